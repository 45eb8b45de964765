#include "simulator/faults/failures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "simulator/core/error.h"
#include "simulator/cost/layer_cost.h"
#include "simulator/faults/rng.h"
#include "simulator/memory/memory_model.h"

namespace trainplan {

CheckpointCost checkpoint_cost(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                               double storage_bytes_per_s) {
  TRAINPLAN_CHECK(storage_bytes_per_s > 0, "storage bandwidth must be positive");
  const Plan& p = layout.plan;
  const MemoryReport mem = estimate_memory(model, cluster, layout);
  CheckpointCost c;
  // Unique states: every parameter once (TP-replicated norms and DP/CP
  // replicas are deduplicated by a sharded checkpoint).
  const ModelStateBytes unique = model_state_bytes(total_params(model), p.precision, p.grad_dtype, 0, 1);
  c.total_bytes = unique.weights + unique.optimizer;
  for (const StageMemory& st : mem.stages) {
    const ModelStateBytes held = model_state_bytes(st.params, p.precision, p.grad_dtype, p.zero, layout.shard_degree);
    c.per_gpu_state_bytes = std::max(c.per_gpu_state_bytes, held.weights + held.optimizer);
  }
  c.per_gpu_written_bytes = c.total_bytes / layout.gpus;
  c.write_s = c.total_bytes / storage_bytes_per_s;
  c.load_s = c.total_bytes / storage_bytes_per_s;
  return c;
}

double failure_rate_per_s(const FailureModel& fm, int gpus, int nodes) {
  double rate = 0;
  if (fm.mtbf_gpu_s > 0) rate += gpus / fm.mtbf_gpu_s;
  if (fm.mtbf_node_s > 0) rate += nodes / fm.mtbf_node_s;
  return rate;
}

// Derivation of E(x).  Let Y(y) be the expected time to get through y seconds
// of running when each failure costs the downtime D and a restart from the
// beginning.  With F ~ Exp(lambda):
//   Y = E[min(F, y)] + P(F < y) (D + Y),  E[min(F, y)] = (1 - e^{-lambda y}) / lambda
//   => Y(y) = (1/lambda + D)(e^{lambda y} - 1).
// A segment's first attempt needs no load; after a failure every attempt is
// load + segment:
//   E(x) = E[min(F, x)] + P(F < x) (D + Y(L + x))
//        = (1 - e^{-lambda x}) (1/lambda + D) e^{lambda (L + x)}
//        = (1/lambda + D) e^{lambda L} (e^{lambda x} - 1).
double expected_segment_s(const RunModel& m, double x) {
  if (m.rate_per_s <= 0) return x;
  const double l = m.rate_per_s;
  return (1.0 / l + m.downtime_s) * std::exp(l * m.load_s) * std::expm1(l * x);
}

double expected_run_s(const RunModel& m, int64_t k) {
  TRAINPLAN_CHECK(k >= 1, "checkpoint interval must be at least one step");
  k = std::min(k, std::max<int64_t>(1, m.steps));
  const int64_t segments = (m.steps + k - 1) / k;
  const int64_t last = m.steps - (segments - 1) * k;
  return static_cast<double>(segments - 1) * expected_segment_s(m, static_cast<double>(k) * m.step_s + m.checkpoint_s) +
         expected_segment_s(m, static_cast<double>(last) * m.step_s + m.checkpoint_s);
}

// The breakdown of E(x).  Failures: the first attempt fails with
// probability 1 - e^{-lambda x}; every later attempt is load + segment and
// succeeds with probability e^{-lambda (L + x)}, so e^{lambda (L + x)}
// attempts follow on average, all but the last failing:
//   F = (1 - e^{-lambda x}) e^{lambda (L + x)} = e^{lambda L} (e^{lambda x} - 1).
// Each failure costs D of downtime; the remaining E(x) - D F = F / lambda is
// running.  The load that counts is the one of the attempt that succeeds
// (as WallBreakdown::load and the Monte Carlo count it): one per segment
// that failed at all, L (1 - e^{-lambda x}).  Lost work is the running time
// that is neither the committed segment nor that load (failed attempts,
// their loads included).
namespace {

struct SegmentBreakdown {
  double failures = 0;
  WallBreakdown wall;
};

SegmentBreakdown segment_breakdown(const RunModel& m, double work_s) {
  SegmentBreakdown b;
  const double x = work_s + m.checkpoint_s;
  b.wall.useful = work_s;
  b.wall.checkpoint = m.checkpoint_s;
  if (m.rate_per_s <= 0) return b;
  const double l = m.rate_per_s;
  const double retries = std::expm1(l * x);  // e^{lambda x} - 1
  b.failures = std::exp(l * m.load_s) * retries;
  b.wall.downtime = m.downtime_s * b.failures;
  b.wall.load = m.load_s * -std::expm1(-l * x);
  b.wall.lost = b.failures / l - x - b.wall.load;
  return b;
}

template <typename F>
void for_each_segment(const RunModel& m, int64_t k, F&& f) {
  TRAINPLAN_CHECK(k >= 1, "checkpoint interval must be at least one step");
  const int64_t n = std::max<int64_t>(1, m.steps);
  k = std::min(k, n);
  const int64_t segments = (n + k - 1) / k;
  const int64_t last = n - (segments - 1) * k;
  f(static_cast<double>(segments - 1), static_cast<double>(k) * m.step_s);
  f(1.0, static_cast<double>(last) * m.step_s);
}

}  // namespace

WallBreakdown expected_breakdown(const RunModel& m, int64_t k) {
  WallBreakdown sum;
  for_each_segment(m, k, [&](double count, double work_s) {
    if (count <= 0) return;
    const SegmentBreakdown b = segment_breakdown(m, work_s);
    sum.useful += count * b.wall.useful;
    sum.checkpoint += count * b.wall.checkpoint;
    sum.lost += count * b.wall.lost;
    sum.downtime += count * b.wall.downtime;
    sum.load += count * b.wall.load;
  });
  return sum;
}

double expected_failures(const RunModel& m, int64_t k) {
  double sum = 0;
  for_each_segment(m, k, [&](double count, double work_s) {
    if (count > 0) sum += count * segment_breakdown(m, work_s).failures;
  });
  return sum;
}

double steady_goodput(const RunModel& m, double tau_s) { return tau_s / expected_segment_s(m, tau_s + m.checkpoint_s); }

// d/dtau [(e^{lambda(tau+delta)} - 1) / tau] = 0
//   <=> (1 - lambda tau) e^{lambda (tau + delta)} = 1.
// With y = lambda tau, c = lambda delta: g(y) = log(1 - y) + y + c = 0 on
// (0, 1); g(0) = c > 0, g' = -y/(1-y) < 0, g -> -inf at 1: one root, found by
// bisection (the Lambert-W form loses digits near the branch point -1/e).
double optimal_interval_s(const RunModel& m) {
  if (m.rate_per_s <= 0) return std::numeric_limits<double>::infinity();
  const double c = m.rate_per_s * m.checkpoint_s;
  if (c <= 0) return 0;
  double lo = 0, hi = 1;
  for (int i = 0; i < 200 && hi - lo > 1e-17; ++i) {
    const double y = 0.5 * (lo + hi);
    if (std::log1p(-y) + y + c > 0) lo = y; else hi = y;
  }
  return 0.5 * (lo + hi) / m.rate_per_s;
}

int64_t optimal_interval_steps(const RunModel& m) {
  const int64_t n = std::max<int64_t>(1, m.steps);
  if (m.rate_per_s <= 0) return n;
  const double k0 = optimal_interval_s(m) / m.step_s;
  if (!(k0 < static_cast<double>(n))) return n;
  // The expected run time is smooth in k except for the last, shorter
  // segment: scan +-10% (at least +-2 steps) around tau*, capped at 4000
  // evaluations.
  const double span = std::max(2.0, 0.1 * k0);
  int64_t lo = std::max<int64_t>(1, static_cast<int64_t>(std::floor(k0 - span)));
  int64_t hi = std::min<int64_t>(n, static_cast<int64_t>(std::ceil(k0 + span)));
  const int64_t stride = std::max<int64_t>(1, (hi - lo) / 4000);
  int64_t best = lo;
  double best_s = expected_run_s(m, lo);
  for (int64_t k = lo + stride; k <= hi; k += stride) {
    const double t = expected_run_s(m, k);
    if (t < best_s) {
      best_s = t;
      best = k;
    }
  }
  return best;
}

double young_interval_s(double checkpoint_s, double mtbf_s) { return std::sqrt(2 * checkpoint_s * mtbf_s); }

double daly_interval_s(double checkpoint_s, double mtbf_s) {
  if (checkpoint_s >= 2 * mtbf_s) return mtbf_s;
  const double r = checkpoint_s / (2 * mtbf_s);
  return std::sqrt(2 * checkpoint_s * mtbf_s) * (1 + std::sqrt(r) / 3 + r / 9) - checkpoint_s;
}

MonteCarloResult monte_carlo_run(const RunModel& m, int64_t k, int runs, uint64_t seed) {
  TRAINPLAN_CHECK(k >= 1 && runs >= 1, "bad Monte Carlo arguments");
  const int64_t n = std::max<int64_t>(1, m.steps);
  k = std::min(k, n);
  const double inf = std::numeric_limits<double>::infinity();
  const double full_x = static_cast<double>(k) * m.step_s + m.checkpoint_s;
  MonteCarloResult res;
  res.runs = runs;
  std::vector<double> walls;
  walls.reserve(static_cast<size_t>(runs));
  double failures = 0;
  WallBreakdown sum;
  for (int run = 0; run < runs; ++run) {
    Rng rng(derive_seed(seed, RngStream::kFailures, static_cast<uint64_t>(run)));
    double wall = 0;
    int64_t done = 0;  // committed steps
    bool need_load = false;
    WallBreakdown b;
    while (done < n) {
      // Time to the next failure from now (memoryless: drawn afresh after
      // each failure, kept across completed segments).
      double f = m.rate_per_s > 0 ? rng.exponential(m.rate_per_s) : inf;
      while (done < n) {
        const int64_t steps = std::min(k, n - done);
        const double load = need_load ? m.load_s : 0.0;
        const double x = load + static_cast<double>(steps) * m.step_s + m.checkpoint_s;
        if (f < x) {
          // Fails inside this attempt: its time is lost, then the downtime.
          wall += f + m.downtime_s;
          b.lost += f;
          b.downtime += m.downtime_s;
          failures += 1;
          need_load = true;
          break;
        }
        wall += x;
        f -= x;
        done += steps;
        b.load += load;
        b.checkpoint += m.checkpoint_s;
        need_load = false;
        // Whole segments that fit before the failure, in one go.
        if (f < inf) {
          const int64_t whole = std::min(static_cast<int64_t>(f / full_x), (n - done) / k);
          if (whole > 0) {
            wall += static_cast<double>(whole) * full_x;
            f -= static_cast<double>(whole) * full_x;
            done += whole * k;
            b.checkpoint += static_cast<double>(whole) * m.checkpoint_s;
          }
        }
      }
    }
    b.useful = static_cast<double>(n) * m.step_s;
    walls.push_back(wall);
    sum.useful += b.useful;
    sum.checkpoint += b.checkpoint;
    sum.lost += b.lost;
    sum.downtime += b.downtime;
    sum.load += b.load;
  }
  double total = 0;
  for (double w : walls) total += w;
  const double r = static_cast<double>(runs);
  res.mean_s = total / r;
  double squares = 0;
  for (double w : walls) squares += (w - res.mean_s) * (w - res.mean_s);
  res.std_s = runs > 1 ? std::sqrt(squares / (r - 1)) : 0;
  res.failures_mean = failures / r;
  res.breakdown = WallBreakdown{sum.useful / r, sum.checkpoint / r, sum.lost / r, sum.downtime / r, sum.load / r};
  std::sort(walls.begin(), walls.end());
  auto q = [&](double p) {
    return walls[std::min(walls.size() - 1, static_cast<size_t>(p * static_cast<double>(walls.size())))];
  };
  res.p50_s = q(0.5);
  res.p90_s = q(0.9);
  res.min_s = walls.front();
  res.max_s = walls.back();
  return res;
}

FailureReport analyze_failures(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                               double step_s, double tokens_per_step, double train_tokens, const FailureModel& fm,
                               int runs, uint64_t seed) {
  TRAINPLAN_CHECK(step_s > 0 && tokens_per_step > 0 && train_tokens > 0 && runs >= 0, "bad run");
  TRAINPLAN_CHECK(fm.storage_bytes_per_s > 0, "storage bandwidth must be positive");
  FailureReport rep;
  const double rate = failure_rate_per_s(fm, layout.gpus, layout.nodes);
  TRAINPLAN_CHECK(rate > 0, "failure analysis without failures");
  rep.rate_per_hour = rate * 3600;
  rep.job_mtbf_s = 1 / rate;
  rep.checkpoint = checkpoint_cost(model, cluster, layout, fm.storage_bytes_per_s);
  RunModel& m = rep.run;
  m.step_s = step_s;
  m.steps = static_cast<int64_t>(std::ceil(train_tokens / tokens_per_step));
  m.rate_per_s = rate;
  m.checkpoint_s = rep.checkpoint.write_s;
  m.load_s = rep.checkpoint.load_s;
  m.downtime_s = fm.detect_s + fm.restart_s;
  rep.optimal_interval_s = optimal_interval_s(m);
  rep.young_interval_s = young_interval_s(m.checkpoint_s, rep.job_mtbf_s);
  rep.daly_interval_s = daly_interval_s(m.checkpoint_s, rep.job_mtbf_s);
  rep.auto_interval = fm.checkpoint_interval_s <= 0;
  auto steps_of = [&](double seconds) {
    const double k = std::round(seconds / step_s);
    if (!(k < static_cast<double>(m.steps))) return std::max<int64_t>(1, m.steps);
    return std::max<int64_t>(1, static_cast<int64_t>(k));
  };
  rep.interval_steps = rep.auto_interval ? optimal_interval_steps(m) : steps_of(fm.checkpoint_interval_s);
  rep.interval_s = static_cast<double>(rep.interval_steps) * step_s;
  const double useful = static_cast<double>(m.steps) * step_s;
  rep.expected_s = expected_run_s(m, rep.interval_steps);
  rep.goodput_expected = useful / rep.expected_s;
  rep.goodput_young = useful / expected_run_s(m, steps_of(rep.young_interval_s));
  if (!std::isfinite(rep.expected_s)) rep.goodput_expected = 0;
  rep.goodput = rep.goodput_expected;
  if (rep.goodput_expected < kMinRunnableGoodput) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "the job fails every %.3g s on average, while a checkpoint interval of %lld steps takes %.3g s with "
                  "its %.3g s checkpoint write: expected goodput %.2g%%",
                  rep.job_mtbf_s, static_cast<long long>(rep.interval_steps),
                  rep.interval_s + m.checkpoint_s, m.checkpoint_s, 100 * rep.goodput_expected);
    rep.cannot_run = buf;
  }
  if (runs > 0) add_monte_carlo(&rep, runs, seed);
  for (double f : {0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 4.0}) {
    const double tau = f * rep.optimal_interval_s;
    rep.sweep.push_back(IntervalPoint{tau, steady_goodput(m, tau)});
  }
  return rep;
}

void add_monte_carlo(FailureReport* rep, int runs, uint64_t seed) {
  const double failures = expected_failures(rep->run, rep->interval_steps);
  if (!(failures * runs <= kMaxMonteCarloFailures)) {
    MonteCarloResult& mc = rep->mc;
    mc = MonteCarloResult{};
    mc.mean_s = mc.p50_s = mc.p90_s = mc.min_s = mc.max_s = rep->expected_s;
    mc.failures_mean = failures;
    mc.breakdown = expected_breakdown(rep->run, rep->interval_steps);
    rep->goodput = rep->goodput_expected;
    return;
  }
  rep->mc = monte_carlo_run(rep->run, rep->interval_steps, runs, seed);
  rep->goodput = static_cast<double>(rep->run.steps) * rep->run.step_s / rep->mc.mean_s;
}

}  // namespace trainplan
