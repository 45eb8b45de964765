// Stragglers: per-GPU, per-node and per-link slowdowns that break the
// symmetry of synchronous training.
//
// Model.  A slowdown factor f multiplies the compute time of a task (f = 1.2:
// 20% slower).  Each sampled step draws, with the seeded Rng:
//   - jitter:        one factor per GPU for the whole step (clocks, thermals,
//                    data loading, OS noise that persists over a step);
//   - op_jitter:     one factor per GPU per compute task (a layer's forward or
//                    backward, kernel-level noise that averages out);
//   - slow_gpus:     each GPU is slow with probability P, by factor F;
//   - slow_nodes:    each node is slow with probability P, by factor F on all
//                    of its GPUs;
//   - degraded_link: each node's network port runs at fraction F of its
//                    bandwidth with probability P; every inter-node transfer
//                    touching that node (a ring all-reduce, a pipeline send)
//                    runs at most at F of its rate;
//   - degraded_nvlink: each node's GPU-to-GPU fabric (NVLink, or PCIe)
//                    runs at fraction F with probability P: the TP and CP
//                    communication inside its layers takes 1/F as long and
//                    every collective or send that stays inside the node
//                    runs at most at F of its rate;
//   - slow_rank:     one given GPU (global rank R) slow by factor F in every
//                    sample: the deterministic straggler `validate --inject
//                    slow:rank=R,factor=F` executes for real.
// Each sample is an independent draw of the whole cluster state, so the mean
// over samples is the expectation over which GPUs are slow.
// TP and CP peers synchronise inside every layer (their collectives are folded
// into the layer's task), so a layer runs at the pace of the slowest GPU of its
// TP x CP group: a task's factor is the maximum over the group.  The factor
// stretches the compute part of a task, not its exposed TP communication.
// The step is then simulated with every rank (full mode); a sync strategy
// waits for the slowest rank at each gradient synchronisation and pipeline
// hand-off, an async one (parameter servers) does not: there each iteration
// is a worker's step and draws its own jitter, and the step time is gbs
// tokens at the rate updates land while every worker still runs.
//
// straggler_tax = mean step time with stragglers / step time without - 1,
// and at least 0 for a synchronous step where no factor is below 1 on
// average: the step is the longest path through its tasks, a maximum of sums
// of their times, so it is convex and non-decreasing in them, and by
// Jensen's inequality its expectation under factors of mean >= 1 is at least
// the step without them.  A negative mean over a few sampled steps is then
// sampling noise, and a search that ranked by it would prefer a plan for its
// luck (and lose the exactness of its bounds, planner/search/search.h).
#ifndef TRAINPLAN_SIM_FAULTS_STRAGGLERS_H_
#define TRAINPLAN_SIM_FAULTS_STRAGGLERS_H_

#include <cstdint>
#include <string>

#include "simulator/faults/rng.h"
#include "simulator/report/step_report.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

// A distribution of slowdown factors.
struct SlowdownDistribution {
  enum class Kind { kNone, kLognormal, kNormal, kUniform, kExponential };
  Kind kind = Kind::kNone;  // kNone: always 1
  double a = 0, b = 0;      // lognormal/normal: sigma; uniform: lo, hi; exponential: mean
  // lognormal:   exp(sigma Z - sigma^2/2)   (mean 1: jitter makes the slowest
  //              GPU slower, not the average one)
  // normal:      max(0.1, 1 + sigma Z)
  // uniform:     U[lo, hi)
  // exponential: 1 + Exp(mean)              (occasional hiccups, long tail)
  double sample(Rng& rng) const;
  // Whether a factor is at least 1 on average (every kind but a uniform
  // range centred below 1): such jitter never speeds a GPU up in expectation.
  bool mean_at_least_one() const;
  // P(factor <= x).
  double cdf(double x) const;
  std::string describe() const;  // e.g. "lognormal:0.05"
};

// A fraction of components slowed by a factor.
struct SlowFraction {
  double probability = 0;  // each component independently
  double factor = 1;       // slowdown (>= 1), or bandwidth fraction for links (0 < F <= 1)
};

struct StragglerSpec {
  SlowdownDistribution jitter;     // per GPU per step
  SlowdownDistribution op_jitter;  // per GPU per compute task
  SlowFraction slow_gpus, slow_nodes, degraded_link, degraded_nvlink;
  int slow_rank = -1;              // slow_rank=R:F (-1: none); R < the plan's GPUs (checked when simulated)
  double slow_rank_factor = 1;
  std::string text;                // as given
};

// The grammar, for --help and error hints.
extern const char* const kStragglerGrammar;

// Parses SPEC = ITEM[,ITEM...]; ITEM = jitter=DIST | op_jitter=DIST |
// slow_gpus=P:F | slow_nodes=P:F | degraded_link=P:F | degraded_nvlink=P:F |
// slow_rank=R:F; DIST =
// lognormal:SIGMA | normal:SIGMA | uniform:LO:HI | exp:MEAN.
// Throws InputError("<flag>: <problem>; allowed: ...") on any bad item,
// duplicate key, or value out of range (SIGMA in [0, 2], P in [0, 1],
// slowdown F in [1, 100], link F in (0, 1], 0 < LO <= HI <= 100,
// MEAN in [0, 100]).
StragglerSpec parse_straggler_spec(const std::string& text, const std::string& flag);

// E[max of n i.i.d. factors] = integral of x d(F(x)^n) = integral over x >= 0
// of (1 - F(x)^n) dx (the factors are positive), by Simpson's rule on a grid
// fine enough for 1e-9 relative accuracy.  REQUIRES: n >= 1.
double expected_max(const SlowdownDistribution& d, int n);

struct StragglerOptions {
  StragglerSpec spec;
  int samples = 8;          // sampled steps
  uint64_t seed = 1;
  // How the step is lowered (bucket size, point-to-point and DP blocking):
  // the defaults, or simulate_options_for(backend) to predict what an
  // executor runs.  `representative` is ignored: stragglers simulate every rank.
  SimulateOptions simulate;
};

// Spread of the arrival times of the ranks at gradient synchronisations (the
// end of each member's compute task that a gradient all-reduce or
// reduce-scatter waits for), over every such collective of every sample.
struct ArrivalSpread {
  int syncs = 0;
  double std_mean_s = 0;    // mean over syncs of the standard deviation
  double range_mean_s = 0;  // mean over syncs of last - first arrival
  double range_p90_s = 0;
  double range_max_s = 0;
};

struct StragglerReport {
  int samples = 0;
  int simulated_ranks = 0;
  double base_step_s = 0;   // every rank, no stragglers
  double step_mean_s = 0, step_p50_s = 0, step_p90_s = 0, step_max_s = 0;
  double tax = 0;           // step_mean_s / base_step_s - 1 (at least 0 where that is known: above)
  // Mean over ranks of the share of the step spent in compute kernels
  // (forward, backward, optimizer; not exposed TP communication).
  double base_busy_fraction = 0, busy_fraction = 0;
  ArrivalSpread base_arrivals, arrivals;
  // E[max over all GPUs of the per-step jitter] - 1: the tax of a purely
  // compute-bound step with that jitter alone (0 without jitter).
  double jitter_max_tax = 0;
  // Async DP: tokens/s and staleness without and with stragglers (pooled
  // over the samples).
  bool async = false;
  double base_tokens_per_s = 0, tokens_per_s = 0;
  Staleness base_staleness, staleness;
};

// Simulates options.samples steps of the layout with sampled slowdowns, every
// rank simulated.  Same inputs and seed => identical report.
// REQUIRES: layout.feasible, options.samples >= 1.  Throws
// InputError("--stragglers: ...") if slow_rank names a GPU the plan lacks.
StragglerReport simulate_stragglers(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                                    const StragglerOptions& options);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_FAULTS_STRAGGLERS_H_
