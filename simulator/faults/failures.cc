#include "simulator/faults/failures.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <deque>
#include <limits>

#include "simulator/core/error.h"
#include "simulator/cost/layer_cost.h"
#include "simulator/faults/rng.h"
#include "simulator/faults/slow_nodes.h"
#include "simulator/framework/framework.h"
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
  const AdamStateBytes adam = adam_state_bytes(p, execution_profile(p));
  const ModelStateBytes unique =
      model_state_bytes(total_params(model), p.precision, p.grad_dtype, 0, 1, Offload::kNone, false, adam);
  c.total_bytes = unique.weights + unique.optimizer;
  for (const StageMemory& st : mem.stages) {
    const ModelStateBytes held = model_state_bytes(st.params, p.precision, p.grad_dtype, p.zero, layout.shard_degree,
                                                    Offload::kNone, false, adam);
    c.per_gpu_state_bytes = std::max(c.per_gpu_state_bytes, held.weights + held.optimizer);
  }
  c.per_gpu_written_bytes = c.total_bytes / layout.gpus;
  c.write_s = c.total_bytes / storage_bytes_per_s;
  c.load_s = c.total_bytes / storage_bytes_per_s;
  // Async snapshot: every GPU copies its own shard to pinned host memory at
  // once, each over its PCIe link (cluster.host.bandwidth_per_gpu, per
  // direction); the most loaded GPU sets the time.  A node holds the
  // snapshots of its GPUs (bounded by the most loaded one's).
  const double pcie = cluster.host.bandwidth_per_gpu.bytes_per_s();
  c.snapshot_s = pcie > 0 ? c.per_gpu_state_bytes / pcie : 0;
  c.snapshot_host_bytes_per_node = c.per_gpu_state_bytes * std::min(cluster.gpus_per_node, layout.gpus);
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

// Async checkpointing: the time from one commit to the next.  Take a
// checkpoint every tau seconds of compute, snapshot s (blocking), persist p
// (background; one host buffer, so snapshot j + 1 starts only once persist j
// is done).  Snapshot j ends at e_j and commits at c_j = e_j + p.
// - Running after a commit (steady state): if tau >= p, at c_j the job is p
//   seconds into the next compute; it finishes it (tau - p), snapshots (s)
//   and persists (p): c_{j+1} - c_j = tau + s.  If tau < p, at c_j it has
//   computed tau, waited p - tau, and now snapshots and persists:
//   c_{j+1} - c_j = s + p.  Both: x1 = max(tau, p) + s without a failure.
// - Fresh after a restart (state loaded, no persist in flight): compute tau,
//   snapshot s, persist p: x2 = tau + s + p.  After its commit the job is
//   again "running after a commit" (p seconds into the next compute, or
//   waiting if tau < p), so the intervals renew at the commits.
// - A failure before c_{j+1} rolls back to checkpoint j: downtime D, a load
//   L that can fail, then fresh.  As for E(x) (Y(y) = (1/lambda + D)
//   (e^{lambda y} - 1) per attempt of y seconds restarted from its start):
//     E = E[min(F, x1)] + P(F < x1) (D + Y(L + x2))
//       = (1 - e^{-lambda x1}) (1/lambda + D) e^{lambda (L + x2)}.
// With p = 0, x1 = x2 = x and this is E(x).  The run: the first interval
// starts fresh at time 0 without a load (x1 = x2 at its k steps), the last
// has its own steps, and the run ends when the final checkpoint commits.
double expected_interval_s(const RunModel& m, double x1, double x2) {
  if (m.rate_per_s <= 0) return x1;
  const double l = m.rate_per_s;
  return -std::expm1(-l * x1) * (1.0 / l + m.downtime_s) * std::exp(l * (m.load_s + x2));
}

namespace {

// x1 (running after a commit) and x2 (fresh) of an async interval of `steps`.
double async_x1(const RunModel& m, int64_t steps) {
  return std::max(static_cast<double>(steps) * m.step_s, m.persist_s) + m.checkpoint_s;
}
double async_x2(const RunModel& m, int64_t steps) {
  return static_cast<double>(steps) * m.step_s + m.checkpoint_s + m.persist_s;
}

// Calls f(count, steps, x1, x2) for the intervals of an async run: the
// first (fresh), the middle ones, the last.
template <typename F>
void for_each_async_interval(const RunModel& m, int64_t k, F&& f) {
  const int64_t n = std::max<int64_t>(1, m.steps);
  k = std::min(k, n);
  const int64_t segments = (n + k - 1) / k;
  const int64_t last = n - (segments - 1) * k;
  if (segments == 1) {
    f(1.0, last, async_x2(m, last), async_x2(m, last));
    return;
  }
  f(1.0, k, async_x2(m, k), async_x2(m, k));
  if (segments > 2) f(static_cast<double>(segments - 2), k, async_x1(m, k), async_x2(m, k));
  f(1.0, last, async_x1(m, last), async_x2(m, last));
}

}  // namespace

double expected_run_s(const RunModel& m, int64_t k) {
  TRAINPLAN_CHECK(k >= 1, "checkpoint interval must be at least one step");
  if (m.persist_s > 0) {
    double sum = 0;
    for_each_async_interval(m, k, [&](double count, int64_t, double x1, double x2) {
      sum += count * expected_interval_s(m, x1, x2);
    });
    return sum;
  }
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

// Async: per interval, failures (1 - e^{-lambda x1}) e^{lambda (L + x2)}
// (the first attempt fails with probability 1 - e^{-lambda x1}, then
// e^{lambda (L + x2)} fresh attempts on average, all but the last failing),
// completed loads L (1 - e^{-lambda x1}).  Every checkpoint commits once,
// and its blocking time is its snapshot s plus the time training waits for
// its persist: max(0, p - the next interval's compute), p for the final one
// (nothing follows it).  That is the failure-free total, whatever failed
// before; lost work is the rest of the expected run time.
namespace {

WallBreakdown async_breakdown(const RunModel& m, int64_t k, double* failures) {
  WallBreakdown b;
  const int64_t n = std::max<int64_t>(1, m.steps);
  k = std::min(k, n);
  const int64_t segments = (n + k - 1) / k;
  const int64_t last = n - (segments - 1) * k;
  const double l = m.rate_per_s;
  double total = 0, fails = 0;
  for_each_async_interval(m, k, [&](double count, int64_t, double x1, double x2) {
    total += count * expected_interval_s(m, x1, x2);
    if (l > 0) {
      const double first_fails = -std::expm1(-l * x1);
      fails += count * first_fails * std::exp(l * (m.load_s + x2));
      b.load += count * m.load_s * first_fails;
    }
  });
  const double p = m.persist_s, s = m.checkpoint_s, t = m.step_s;
  b.useful = static_cast<double>(n) * t;
  b.checkpoint = static_cast<double>(segments) * s + p;
  if (segments >= 2) {
    b.checkpoint += static_cast<double>(segments - 2) * std::max(0.0, p - static_cast<double>(k) * t) +
                    std::max(0.0, p - static_cast<double>(last) * t);
  }
  b.downtime = m.downtime_s * fails;
  b.lost = total - b.useful - b.checkpoint - b.downtime - b.load;
  if (failures != nullptr) *failures = fails;
  return b;
}

}  // namespace

WallBreakdown expected_breakdown(const RunModel& m, int64_t k) {
  if (m.persist_s > 0) return async_breakdown(m, k, nullptr);
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
  if (m.persist_s > 0) {
    double fails = 0;
    async_breakdown(m, k, &fails);
    return fails;
  }
  double sum = 0;
  for_each_segment(m, k, [&](double count, double work_s) {
    if (count > 0) sum += count * segment_breakdown(m, work_s).failures;
  });
  return sum;
}

double steady_goodput(const RunModel& m, double tau_s) {
  if (m.persist_s > 0) {
    return tau_s / expected_interval_s(m, std::max(tau_s, m.persist_s) + m.checkpoint_s, tau_s + m.checkpoint_s + m.persist_s);
  }
  return tau_s / expected_segment_s(m, tau_s + m.checkpoint_s);
}

// d/dtau [(e^{lambda(tau+delta)} - 1) / tau] = 0
//   <=> (1 - lambda tau) e^{lambda (tau + delta)} = 1.
// With y = lambda tau, c = lambda delta: g(y) = log(1 - y) + y + c = 0 on
// (0, 1); g(0) = c > 0, g' = -y/(1-y) < 0, g -> -inf at 1: one root, found by
// bisection (the Lambert-W form loses digits near the branch point -1/e).
//
// Async: interval / tau = (1/lambda + D) e^{lambda L} g(tau) with
//   g = e^{lambda p} (e^{lambda (tau + s)} - 1) / tau        for tau >= p,
//   g = (1 - e^{-lambda (p + s)}) e^{lambda (tau + s + p)} / tau  for tau < p.
// The first is the sync ratio with delta = s (times e^{lambda p}): its
// minimum is the sync tau* with delta = s, or p if that is below p.  The
// second falls while lambda tau < 1 (d/dtau e^{lambda tau}/tau =
// e^{lambda tau} (lambda tau - 1)/tau^2): with lambda p <= 1 it falls all the
// way to p, so tau* = max(tau*_sync(s), p); with lambda p > 1 (a persist
// longer than the job's MTBF) its minimum 1/lambda is the optimum.
double optimal_interval_s(const RunModel& m) {
  if (m.rate_per_s <= 0) return std::numeric_limits<double>::infinity();
  if (m.persist_s > 0) {
    RunModel sync = m;
    sync.persist_s = 0;
    if (m.rate_per_s * m.persist_s > 1) return 1 / m.rate_per_s;
    return std::max(optimal_interval_s(sync), m.persist_s);
  }
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
  // Async: the last interval blocks for max(its compute, p) + s, so a short
  // last segment wastes up to p and the run time is jagged in k: scan from
  // k0 / 2 to 2 k0.
  const double span = std::max(2.0, 0.1 * k0);
  int64_t lo = std::max<int64_t>(1, static_cast<int64_t>(std::floor(m.persist_s > 0 ? std::min(k0 - span, 0.5 * k0) : k0 - span)));
  int64_t hi = std::min<int64_t>(n, static_cast<int64_t>(std::ceil(m.persist_s > 0 ? std::max(k0 + span, 2 * k0) : k0 + span)));
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

namespace {

// One run of the event-by-event timeline (failures.h, monte_carlo_run).
struct TimelineRun {
  double wall = 0;
  WallBreakdown b;
  double failures = 0, slow_events = 0, drains = 0, slow_wall = 0;
};

enum class Phase { kCompute, kSnapshot, kWait, kTail, kLoad, kDown, kDrain };

// The job: segments of k steps (the last shorter) computed at 1/pace
// nominal seconds per second, pace F while a slow node is in the job; after
// each segment a blocking snapshot (sync: the whole write, committed at its
// end; async: s, then the persist of p in the background, committed at its
// end; the next snapshot waits for it).  Failures (rate lambda) strike while
// the job computes, snapshots, waits for a persist or loads; each rolls back
// to the last commit, then downtime D (failure-free) and a load L.
// The slow nodes, in wall time whatever the job does: a node turns slow at
// rate nu, is detected d later, queues (FIFO) for a free spare; a spare
// handed out drains the job (planned save of the current state, restart,
// load: C failure-free seconds; free while the job is down or already
// draining, the restart takes the spare; free once all steps are done) and
// sends the slow node to repair for R, after which it is a free spare.
// Accounting: compute and blocking time of work that is later committed is
// useful (N T) + slow (its time beyond nominal) + checkpoint; everything a
// failure rolls back, and partial loads, is lost.
TimelineRun timeline_run(const RunModel& m, int64_t k, int64_t n, Rng& frng, Rng& srng) {
  const double inf = std::numeric_limits<double>::infinity();
  const SlowNodeRun& sl = m.slow;
  const bool slow_on = sl.rate_per_s > 0;
  const double big_f = slow_on ? sl.factor : 1.0;
  const double s = m.checkpoint_s, p = m.persist_s, T = m.step_s;
  const int64_t nseg = (n + k - 1) / k;
  auto seg_len = [&](int64_t j) { return static_cast<double>(j < nseg - 1 ? k : n - (nseg - 1) * k) * T; };
  auto draw_failure = [&](double now) { return m.rate_per_s > 0 ? now + frng.exponential(m.rate_per_s) : inf; };

  TimelineRun r;
  WallBreakdown& b = r.b;
  double t = 0;
  int64_t seg = 0, cseg = 0;  // current and committed position: segment + nominal seconds into it
  double off = 0, coff = 0;
  bool pending = false;       // a persist in flight
  int64_t pend_seg = 0;       // it covers segments up to pend_seg
  double pend_done = 0, pend_block = 0, pend_comp = 0, pend_slowx = 0;
  double cur_comp = 0, cur_slowx = 0;  // compute since the last snapshot (or commit point)
  double phase_acc = 0;                // time so far in a blocking phase (snapshot, wait, tail, load)
  // A completed load counts as load once the attempt after it commits (as
  // the closed form counts it: one per interval that failed), else lost.
  double load_at_risk = 0;
  Phase ph = Phase::kCompute;
  double ph_end = 0, f_remaining = 0;
  double f = draw_failure(0);
  double next_arrival = slow_on ? srng.exponential(sl.rate_per_s) : inf;
  std::deque<double> detecting, repairs;
  int64_t waiting = 0, free_spares = slow_on ? sl.spares : 0;
  bool done = false;

  auto commit_pending = [&]() {
    b.load += load_at_risk;
    load_at_risk = 0;
    b.checkpoint += pend_block;
    b.slow += pend_slowx;
    cseg = pend_seg + 1;
    coff = 0;
    pending = false;
  };
  auto start_snapshot = [&]() {
    ph = Phase::kSnapshot;
    ph_end = t + s;
    phase_acc = 0;
  };
  auto compute_done = [&]() { return seg >= nseg || (seg == nseg - 1 && off >= seg_len(seg)); };
  auto drain = [&]() {
    if (ph == Phase::kDown || ph == Phase::kDrain || compute_done()) return;  // the swap is free
    if (ph == Phase::kLoad) {
      b.lost += phase_acc;
    } else {
      // Planned save of the current state: the compute since the last commit
      // is kept, a snapshot in flight is superseded, a partial one lost.
      b.slow += cur_slowx + (pending ? pend_slowx : 0);
      if (pending) b.checkpoint += pend_block;
      if (ph != Phase::kCompute) b.lost += phase_acc;
      if (off >= seg_len(seg)) {
        seg += 1;
        off = 0;
      }
      cseg = seg;
      coff = off;
    }
    pending = false;
    cur_comp = cur_slowx = 0;
    phase_acc = 0;
    b.load += load_at_risk;  // the drain's save commits the attempt
    load_at_risk = 0;
    r.drains += 1;
    b.drain += sl.drain_s;
    f_remaining = f - t;
    ph = Phase::kDrain;
    ph_end = t + sl.drain_s;
  };
  auto hand_out_spares = [&]() {
    while (waiting > 0 && free_spares > 0) {
      waiting -= 1;
      free_spares -= 1;
      repairs.push_back(t + sl.repair_s);
      drain();
    }
  };
  auto fail = [&]() {
    b.lost += cur_comp + phase_acc + load_at_risk + (pending ? pend_comp + pend_block : 0);
    load_at_risk = 0;
    r.failures += 1;
    pending = false;
    cur_comp = cur_slowx = 0;
    phase_acc = 0;
    seg = cseg;
    off = coff;
    b.downtime += m.downtime_s;
    ph = Phase::kDown;
    ph_end = t + m.downtime_s;
  };
  // Whole cycles (compute k steps, wait for the persist, snapshot) before
  // the next failure or slow-node event, in one go.  REQUIRES: at the end of
  // a snapshot (async: its persist just started).
  auto fast_forward = [&](double pace) {
    const int64_t whole_max = nseg - 1 - seg;  // full segments before the last one
    if (whole_max < 1) return;
    const double kt = static_cast<double>(k) * T * pace;
    const double cycle = std::max(kt, p) + s;
    double horizon = f;
    if (!detecting.empty()) horizon = std::min(horizon, detecting.front());
    if (!repairs.empty()) horizon = std::min(horizon, repairs.front());
    horizon = std::min(horizon, next_arrival);
    const double fit = horizon < inf ? std::floor((horizon - t) / cycle) : static_cast<double>(whole_max);
    const int64_t w = std::min<int64_t>(whole_max, fit > 0 ? static_cast<int64_t>(std::min(fit, 9e18)) : 0);
    if (w < 1) return;
    const double wait1 = std::max(0.0, p - kt);
    const double wd = static_cast<double>(w);
    b.load += load_at_risk;  // the first cycle commits
    load_at_risk = 0;
    if (pending) {
      b.checkpoint += pend_block + wait1 + (wd - 1) * (s + wait1);
      b.slow += pend_slowx + (wd - 1) * static_cast<double>(k) * T * (pace - 1);
      pend_seg = seg + w - 1;
      pend_block = s;
      pend_comp = kt;
      pend_slowx = static_cast<double>(k) * T * (pace - 1);
      pend_done = t + wd * cycle + p;
      cseg = seg + w - 1;
    } else {
      b.checkpoint += wd * s;
      b.slow += wd * static_cast<double>(k) * T * (pace - 1);
      cseg = seg + w;
    }
    coff = 0;
    if (pace > 1) r.slow_wall += wd * cycle;
    t += wd * cycle;
    seg += w;
    off = 0;
  };

  while (!done) {
    const bool slow_now = !detecting.empty() || waiting > 0;
    const double pace = slow_now ? big_f : 1.0;
    double end = 0;
    switch (ph) {
      case Phase::kCompute: end = t + (seg_len(seg) - off) * pace; break;
      case Phase::kWait:
      case Phase::kTail: end = pend_done; break;
      default: end = ph_end; break;
    }
    double env = next_arrival;
    if (!detecting.empty()) env = std::min(env, detecting.front());
    if (!repairs.empty()) env = std::min(env, repairs.front());
    const bool can_fail = ph != Phase::kDown && ph != Phase::kDrain;
    const double fail_at = can_fail ? f : inf;
    const double commit_at = pending && ph == Phase::kCompute ? pend_done : inf;
    const double te = std::max(t, std::min({end, env, fail_at, commit_at}));
    const double dt = te - t;
    if (slow_now) r.slow_wall += dt;
    if (ph == Phase::kCompute) {
      off += dt / pace;
      cur_comp += dt;
      cur_slowx += dt * (1 - 1 / pace);
    } else if (ph != Phase::kDown && ph != Phase::kDrain) {
      phase_acc += dt;
    }
    t = te;
    if (commit_at <= te && commit_at <= fail_at) {
      commit_pending();
      continue;
    }
    if (end <= te && end <= fail_at && end <= env) {
      switch (ph) {
        case Phase::kCompute:
          off = seg_len(seg);
          if (pending) {
            ph = Phase::kWait;
            phase_acc = 0;
          } else {
            start_snapshot();
          }
          break;
        case Phase::kWait:
          pend_block += phase_acc;
          commit_pending();
          start_snapshot();
          break;
        case Phase::kSnapshot:
          pending = true;
          pend_seg = seg;
          pend_block = phase_acc;
          pend_comp = cur_comp;
          pend_slowx = cur_slowx;
          pend_done = t + p;
          cur_comp = cur_slowx = 0;
          phase_acc = 0;
          seg += 1;
          off = 0;
          if (p <= 0) commit_pending();
          if (seg >= nseg) {
            if (pending) {
              ph = Phase::kTail;
            } else {
              done = true;
            }
          } else {
            ph = Phase::kCompute;
            fast_forward(pace);
          }
          break;
        case Phase::kTail:
          pend_block += phase_acc;
          commit_pending();
          done = true;
          break;
        case Phase::kLoad:
          load_at_risk += phase_acc;
          phase_acc = 0;
          ph = Phase::kCompute;
          break;
        case Phase::kDown:
          f = draw_failure(t);
          ph = Phase::kLoad;
          ph_end = t + m.load_s;
          phase_acc = 0;
          break;
        case Phase::kDrain:
          f = t + f_remaining;
          ph = Phase::kCompute;
          break;
      }
      continue;
    }
    if (env <= te && env <= fail_at) {
      if (next_arrival <= te) {
        r.slow_events += 1;
        detecting.push_back(t + sl.detect_s);
        next_arrival = t + srng.exponential(sl.rate_per_s);
      } else if (!detecting.empty() && detecting.front() <= te) {
        detecting.pop_front();
        waiting += 1;
        hand_out_spares();
      } else {
        repairs.pop_front();
        free_spares += 1;
        hand_out_spares();
      }
      continue;
    }
    fail();
  }
  r.wall = t;
  b.useful = static_cast<double>(n) * T;
  return r;
}

// One run of the synchronous model without slow nodes: one loop per
// attempt, whole segments between failures in one go.  Returns its wall time.
double sync_run(const RunModel& m, int64_t k, int64_t n, Rng& rng, WallBreakdown* b, double* failures) {
  const double inf = std::numeric_limits<double>::infinity();
  const double full_x = static_cast<double>(k) * m.step_s + m.checkpoint_s;
  double wall = 0;
  int64_t done = 0;  // committed steps
  bool need_load = false;
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
        b->lost += f;
        b->downtime += m.downtime_s;
        *failures += 1;
        need_load = true;
        break;
      }
      wall += x;
      f -= x;
      done += steps;
      b->load += load;
      b->checkpoint += m.checkpoint_s;
      need_load = false;
      // Whole segments that fit before the failure, in one go.
      if (f < inf) {
        const int64_t whole = std::min(static_cast<int64_t>(f / full_x), (n - done) / k);
        if (whole > 0) {
          wall += static_cast<double>(whole) * full_x;
          f -= static_cast<double>(whole) * full_x;
          done += whole * k;
          b->checkpoint += static_cast<double>(whole) * m.checkpoint_s;
        }
      }
    }
  }
  b->useful = static_cast<double>(n) * m.step_s;
  return wall;
}

}  // namespace

MonteCarloResult monte_carlo_run(const RunModel& m, int64_t k, int runs, uint64_t seed) {
  TRAINPLAN_CHECK(k >= 1 && runs >= 1, "bad Monte Carlo arguments");
  const int64_t n = std::max<int64_t>(1, m.steps);
  k = std::min(k, n);
  const bool timeline = m.persist_s > 0 || m.slow.rate_per_s > 0;
  MonteCarloResult res;
  res.runs = runs;
  std::vector<double> walls;
  walls.reserve(static_cast<size_t>(runs));
  double failures = 0, slow_events = 0, drains = 0, slow_wall = 0;
  WallBreakdown sum;
  for (int run = 0; run < runs; ++run) {
    Rng rng(derive_seed(seed, RngStream::kFailures, static_cast<uint64_t>(run)));
    double wall = 0;
    WallBreakdown b;
    if (timeline) {
      Rng srng(derive_seed(seed, RngStream::kSlowNodes, static_cast<uint64_t>(run)));
      const TimelineRun tr = timeline_run(m, k, n, rng, srng);
      wall = tr.wall;
      b = tr.b;
      failures += tr.failures;
      slow_events += tr.slow_events;
      drains += tr.drains;
      slow_wall += tr.slow_wall;
    } else {
      wall = sync_run(m, k, n, rng, &b, &failures);
    }
    walls.push_back(wall);
    sum.useful += b.useful;
    sum.checkpoint += b.checkpoint;
    sum.lost += b.lost;
    sum.downtime += b.downtime;
    sum.load += b.load;
    sum.slow += b.slow;
    sum.drain += b.drain;
  }
  double total = 0;
  for (double w : walls) total += w;
  const double r = static_cast<double>(runs);
  res.mean_s = total / r;
  double squares = 0;
  for (double w : walls) squares += (w - res.mean_s) * (w - res.mean_s);
  res.std_s = runs > 1 ? std::sqrt(squares / (r - 1)) : 0;
  res.failures_mean = failures / r;
  res.breakdown = WallBreakdown{sum.useful / r, sum.checkpoint / r, sum.lost / r, sum.downtime / r,
                                sum.load / r,   sum.slow / r,       sum.drain / r};
  res.slow_events_mean = slow_events / r;
  res.drains_mean = drains / r;
  res.slow_wall_mean_s = slow_wall / r;
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
  rep.async_checkpoint = fm.async_checkpoint;
  if (fm.async_checkpoint) {
    m.checkpoint_s = rep.checkpoint.snapshot_s;
    m.persist_s = rep.checkpoint.write_s;
  }
  if (fm.slow_node_mtbf_s > 0) {
    SlowNodeRun& sl = m.slow;
    sl.rate_per_s = layout.nodes / fm.slow_node_mtbf_s;
    sl.factor = fm.slow_node_factor;
    sl.detect_s = fm.slow_detect_s;
    sl.spares = fm.spare_nodes;
    sl.repair_s = fm.repair_s;
    // A drain is a planned save that must be committed before the job stops
    // (async: snapshot + persist), then a restart onto the spare and a load;
    // no detection (the slow node is known).
    sl.drain_s = m.checkpoint_s + m.persist_s + fm.restart_s + m.load_s;
    rep.has_slow_nodes = true;
    rep.slow_rate_per_hour = sl.rate_per_s * 3600;
    rep.spare_load = sl.rate_per_s * sl.repair_s;
  }
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
  if (rep.has_slow_nodes) {
    const SlowRunResult slow = expected_slow_run(m, rep.interval_steps);
    rep.expected_s = slow.expected_s;
    rep.breakdown_expected = slow.breakdown;
    rep.slow_expected_events = slow.slow_events;
    rep.slow_expected_drains = slow.drains;
    rep.slow_expected_failures = slow.failures;
    rep.slow_wall_fraction = std::isfinite(slow.expected_s) ? slow.slow_wall_s / slow.expected_s : 1;
  } else {
    rep.expected_s = expected_run_s(m, rep.interval_steps);
    rep.breakdown_expected = expected_breakdown(m, rep.interval_steps);
  }
  rep.goodput_expected = useful / rep.expected_s;
  rep.goodput_young = useful / (rep.has_slow_nodes ? expected_slow_run(m, steps_of(rep.young_interval_s)).expected_s
                                                    : expected_run_s(m, steps_of(rep.young_interval_s)));
  if (!std::isfinite(rep.expected_s)) rep.goodput_expected = 0;
  rep.goodput = rep.goodput_expected;
  const bool slow_nodes_stop_it =
      rep.has_slow_nodes && useful / expected_run_s(m, rep.interval_steps) >= kMinRunnableGoodput;
  if (rep.goodput_expected < kMinRunnableGoodput && slow_nodes_stop_it) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "a node turns slow every %.3g s on average (steps %.3gx longer until it is detected after %.3g s, "
                  "then a %.3g s drain onto a spare): expected goodput %.2g%%",
                  1 / m.slow.rate_per_s, m.slow.factor, m.slow.detect_s, m.slow.drain_s, 100 * rep.goodput_expected);
    rep.cannot_run = buf;
  } else if (rep.goodput_expected < kMinRunnableGoodput) {
    char buf[320];
    std::snprintf(buf, sizeof buf,
                  "the job fails every %.3g s on average, while a checkpoint interval of %lld steps takes %.3g s with "
                  "its %.3g s %s: expected goodput %.2g%%",
                  rep.job_mtbf_s, static_cast<long long>(rep.interval_steps),
                  rep.interval_s + m.checkpoint_s + m.persist_s, m.checkpoint_s + m.persist_s,
                  fm.async_checkpoint ? "snapshot and persist" : "checkpoint write", 100 * rep.goodput_expected);
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
  // Each slow node is a few events of the timeline (onset, detection, spare).
  const double events = failures + 3 * rep->slow_expected_events;
  if (!(events * runs <= kMaxMonteCarloFailures)) {
    MonteCarloResult& mc = rep->mc;
    mc = MonteCarloResult{};
    mc.mean_s = mc.p50_s = mc.p90_s = mc.min_s = mc.max_s = rep->expected_s;
    mc.failures_mean = rep->has_slow_nodes ? rep->slow_expected_failures : failures;
    mc.breakdown = rep->breakdown_expected;
    mc.slow_events_mean = rep->slow_expected_events;
    mc.drains_mean = rep->slow_expected_drains;
    mc.slow_wall_mean_s = rep->slow_wall_fraction * rep->expected_s;
    rep->goodput = rep->goodput_expected;
    return;
  }
  rep->mc = monte_carlo_run(rep->run, rep->interval_steps, runs, seed);
  rep->goodput = static_cast<double>(rep->run.steps) * rep->run.step_s / rep->mc.mean_s;
}

}  // namespace trainplan
