#include "simulator/report/step_report.h"

#include <algorithm>
#include <cmath>
#include <chrono>
#include <cstring>
#include <cstdio>
#include <optional>
#include <sstream>

#include "simulator/core/error.h"
#include "simulator/cost/step_flops.h"
#include "simulator/engine/engine.h"
#include "simulator/memory/memory_model.h"
#include "simulator/spec/cluster.h"

namespace trainplan {

namespace {

double overlap(int64_t a0, int64_t a1, int64_t b0, int64_t b1) {
  return static_cast<double>(std::max<int64_t>(0, std::min(a1, b1) - std::max(a0, b0)));
}

using Intervals = std::vector<std::pair<int64_t, int64_t>>;

// Each simulated rank's DP collectives (comm tasks of Category::kDpComm it
// takes part in) as [start, end) intervals.
std::vector<Intervals> rank_dp_intervals(const TaskGraph& g, const EngineResult& r, size_t ranks) {
  std::vector<Intervals> out(ranks);
  for (int32_t id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.type != TaskType::kComm || t.category != Category::kDpComm) continue;
    const TaskTime& tt = r.times[static_cast<size_t>(id)];
    const int32_t* m = g.members(t);
    for (uint32_t k = 0; k < t.member_count; ++k) out[static_cast<size_t>(m[k])].emplace_back(tt.start_ps, tt.end_ps);
  }
  return out;
}

// The time in [from, to) covered by at least one of `in`.
int64_t covered(const Intervals& in, int64_t from, int64_t to) {
  if (to <= from) return 0;
  Intervals clipped;
  for (const auto& [a, b] : in) {
    const int64_t lo = std::max(a, from), hi = std::min(b, to);
    if (hi > lo) clipped.emplace_back(lo, hi);
  }
  std::sort(clipped.begin(), clipped.end());
  int64_t sum = 0, reach = from;
  for (const auto& [a, b] : clipped) {
    if (b <= reach) continue;
    sum += b - std::max(a, reach);
    reach = b;
  }
  return sum;
}

// Splits the idle gap [from, to) before `task` by what it waited for.
// own_dp: the rank's DP collectives (rank_dp_intervals), or null.
void classify_gap(const TaskGraph& g, const EngineResult& r, int32_t prev, int32_t task, int64_t from, int64_t to,
                  TimeBreakdown* b, const Intervals* own_dp = nullptr) {
  if (to <= from) return;
  // First the previous pass's own TP collectives (a link task right after
  // it): TP communication.
  if (prev >= 0) {
    const Task& pt = g.task(prev);
    const uint32_t* succ = g.successors(pt);
    for (uint32_t k = 0; k < pt.succ_count; ++k) {
      const Task& s = g.task(static_cast<int32_t>(succ[k]));
      if (s.type != TaskType::kComm || s.label != TaskLabel::kTpCollective) continue;
      const TaskTime& st = r.times[succ[k]];
      const int64_t end = std::min(to, std::max(from, st.end_ps));
      b->tp_comm += static_cast<double>(overlap(from, end, st.start_ps, st.end_ps)) * 1e-12;
      from = end;
    }
    if (to <= from) return;
  }
  const double gap = static_cast<double>(to - from);
  const int32_t pred = task >= 0 ? r.last_pred[static_cast<size_t>(task)] : -1;
  double comm = 0;
  Category cat = Category::kCompute;
  bool sync = false;
  if (pred >= 0 && g.task(pred).type == TaskType::kComm) {
    const TaskTime& t = r.times[static_cast<size_t>(pred)];
    comm = overlap(from, to, t.start_ps, t.end_ps);
    cat = g.task(pred).category;
    sync = g.task(pred).label == TaskLabel::kGradNormSync || g.task(pred).label == TaskLabel::kEmbeddingGradSync;
  }
  if (sync) {
    // Waiting at the gradient-norm (or tied-embedding) all-reduce: the
    // all-reduce itself is communication.  Before it, the time this rank's
    // own DP collectives were still running (its reduce-scatters outlasting
    // its backward, as without a pipeline) is DP communication; the rest,
    // waiting for other stages to finish, is bubble.
    const int64_t sync_start = r.times[static_cast<size_t>(pred)].start_ps;
    const int64_t own = own_dp == nullptr ? 0 : covered(*own_dp, from, std::min(to, sync_start));
    b->dp_comm += (comm + static_cast<double>(own)) * 1e-12;
    b->bubble += (gap - comm - static_cast<double>(own)) * 1e-12;
  } else if (cat == Category::kPpComm) {
    // Waiting for a pipeline transfer: the transfer itself is PP
    // communication, the wait for the other stage to produce it is bubble.
    b->pp_comm += comm * 1e-12;
    b->bubble += (gap - comm) * 1e-12;
  } else if (cat == Category::kTpComm || cat == Category::kCpComm) {
    // Waiting for the rank's own TP collectives (after its pass).
    b->tp_comm += gap * 1e-12;
  } else if (cat == Category::kDpComm) {
    // Waiting on the DP channel (ZeRO-3 gathers, gradient reductions queued
    // behind each other): all of it is exposed DP communication.
    b->dp_comm += gap * 1e-12;
  } else {
    b->bubble += gap * 1e-12;
  }
}

Staleness async_staleness(const LoweredStep& step, const EngineResult& r) {
  // Update order = order of completion at the server queue.
  std::vector<int64_t> update_end;
  for (const AsyncIteration& it : step.async) update_end.push_back(r.times[static_cast<size_t>(it.update)].end_ps);
  std::vector<int64_t> sorted = update_end;
  std::sort(sorted.begin(), sorted.end());
  std::vector<double> values;
  for (size_t i = 0; i < step.async.size(); ++i) {
    const AsyncIteration& it = step.async[i];
    if (it.previous_pull < 0) continue;  // start-up iteration
    const int64_t pulled_at = r.times[static_cast<size_t>(it.previous_pull)].start_ps;
    // Updates finished before the pull started = the version the worker read.
    const auto version = std::upper_bound(sorted.begin(), sorted.end(), pulled_at) - sorted.begin();
    // Updates finished before this one = its position in the order.
    const auto position = std::lower_bound(sorted.begin(), sorted.end(), update_end[i]) - sorted.begin();
    values.push_back(static_cast<double>(std::max<std::ptrdiff_t>(0, position - version)));
  }
  Staleness s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  s.samples = static_cast<int>(values.size());
  s.mean = sum / static_cast<double>(values.size());
  s.p90 = values[std::min(values.size() - 1, static_cast<size_t>(0.9 * static_cast<double>(values.size())))];
  s.max = values.back();
  return s;
}

// The event name of a compute task: what it runs, for which micro-batch,
// chunk and layers ("backward mb 3 chunk 1 layers 4-7 +output").
std::string compute_name(const Task& t, const Plan& p) {
  std::string what;
  switch (t.label) {
    case TaskLabel::kForward: what = "forward"; break;
    case TaskLabel::kBackward:
      what = zero_bubble(p.schedule) ? "backward-input" : p.recompute == Recompute::kFull ? "recompute+backward"
                                                                                          : "backward";
      break;
    case TaskLabel::kWeightGrad: what = "backward-weight"; break;
    case TaskLabel::kOptimizer: return "optimizer step";
    case TaskLabel::kIteration: what = "iteration"; break;
    default: what = to_string(t.label); break;
  }
  std::string name = what;
  if (t.microbatch >= 0) name += " mb " + std::to_string(t.microbatch);
  if (chunks_per_rank(p) > 1 && t.chunk >= 0) name += " chunk " + std::to_string(t.chunk);
  if (t.layer >= 0) {
    name += " layer " + std::to_string(t.layer);
  } else if (t.layer_count > 0) {
    name += " (" + std::to_string(t.layer_count) + " layers)";
  }
  if (t.extras & 1) name += " +embedding";
  if (t.extras & 2) name += " +output";
  return name;
}

// Chrome/Perfetto trace: per simulated rank a compute thread (tasks named by
// op, with the idle gaps as "bubble" slices and the TP/CP communication
// folded into the layer ops shown on its own thread), pipeline and DP
// threads (collectives with their sizes), flow arrows from each pipeline
// send to the compute it feeds, and a counter of the bytes allocated.
// dp_intervals: each rank's DP collectives (rank_dp_intervals), as the breakdown read them.
std::string chrome_trace(const LoweredStep& step, const EngineResult& r, const Plan& plan,
                         const std::vector<Intervals>& dp_intervals) {
  const TaskGraph& g = step.graph;
  std::ostringstream out;
  out << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  char buf[768];
  auto us = [](int64_t ps) { return static_cast<double>(ps) * 1e-6; };
  enum Thread { kComputeT = 0, kPpT = 1, kDpT = 2, kTpT = 3 };
  for (size_t i = 0; i < step.ranks.size(); ++i) {
    std::snprintf(buf, sizeof buf,
                  "%s{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":%d,\"args\":{\"name\":\"rank %d (pp %d dp %d cp %d "
                  "tp %d, node %d)\"}}",
                  first ? "" : ",\n", step.ranks[i].global, step.ranks[i].global, step.ranks[i].pp, step.ranks[i].dp,
                  step.ranks[i].cp, step.ranks[i].tp, step.ranks[i].node);
    out << buf;
    first = false;
    const char* threads[] = {"compute", "pp comm", "dp comm", "tp/cp/ep comm (within layer ops)"};
    for (int t = 0; t < 4; ++t) {
      std::snprintf(buf, sizeof buf,
                    ",\n{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":%d,\"tid\":%d,\"args\":{\"name\":\"%s\"}}",
                    step.ranks[i].global, t, threads[t]);
      out << buf;
    }
  }
  // Compute, bubbles, folded TP/CP communication and the memory counter,
  // rank by rank in program order.
  for (size_t rank = 0; rank < step.ranks.size(); ++rank) {
    const int pid = step.ranks[rank].global;
    int64_t prev_end = 0;
    int32_t prev_id = -1;
    int64_t live = rank < step.static_bytes.size() ? step.static_bytes[rank] : 0;
    std::snprintf(buf, sizeof buf, ",\n{\"ph\":\"C\",\"name\":\"memory allocated (GiB)\",\"pid\":%d,\"ts\":0,"
                  "\"args\":{\"GiB\":%.6f}}", pid, static_cast<double>(live) / kGiB);
    out << buf;
    for (int32_t id : g.program[rank]) {
      const Task& t = g.task(id);
      const TaskTime& tt = r.times[static_cast<size_t>(id)];
      if (tt.start_ps > prev_end) {
        // The idle gap split as the time breakdown splits it (classify_gap):
        // bubble first, then the part spent on the transfer waited for.
        TimeBreakdown gap;
        classify_gap(g, r, prev_id, id, prev_end, tt.start_ps, &gap, &dp_intervals[rank]);
        int64_t at = prev_end;
        const std::pair<const char*, double> parts[] = {{"waiting for TP collectives", gap.tp_comm},
                                                        {"bubble", gap.bubble},
                                                        {"waiting for a pipeline transfer", gap.pp_comm},
                                                        {"waiting for a DP collective", gap.dp_comm}};
        for (const auto& [name, seconds] : parts) {
          const int64_t d = static_cast<int64_t>(std::llround(seconds * 1e12));
          if (d <= 0) continue;
          std::snprintf(buf, sizeof buf,
                        ",\n{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"bubble\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,"
                        "\"dur\":%.3f}",
                        name, pid, kComputeT, us(at), us(d));
          out << buf;
          at += d;
        }
      }
      std::snprintf(buf, sizeof buf,
                    ",\n{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"op\":\"%s\",\"microbatch\":%d,\"chunk\":%d,\"layer\":%d,\"layers\":%d}}",
                    compute_name(t, plan).c_str(), to_string(t.category), pid, kComputeT, us(tt.start_ps),
                    us(tt.end_ps - tt.start_ps), to_string(t.label), t.microbatch, t.chunk, t.layer, t.layer_count);
      out << buf;
      if (t.tp_comm_ps + t.ep_comm_ps > 0 && t.work_ps > 0) {
        // Its share of the task, placed at the task's end (it is
        // interleaved with the layer's GEMMs in reality).
        // (In double: the product of two picosecond counts overflows int64.)
        const int64_t dur = static_cast<int64_t>(static_cast<double>(tt.end_ps - tt.start_ps) *
                                                 static_cast<double>(t.tp_comm_ps + t.ep_comm_ps) /
                                                 static_cast<double>(t.work_ps));
        std::snprintf(buf, sizeof buf,
                      ",\n{\"ph\":\"X\",\"name\":\"tp/cp/ep collectives of %s\",\"cat\":\"tp_comm\",\"pid\":%d,\"tid\":%d,"
                      "\"ts\":%.3f,\"dur\":%.3f,\"args\":{\"tp_cp_ms\":%.4f,\"ep_ms\":%.4f",
                      compute_name(t, plan).c_str(), pid, kTpT, us(tt.end_ps - dur), us(dur), t.tp_comm_ps * 1e-9,
                      t.ep_comm_ps * 1e-9);
        out << buf;
        // Each layer's collectives: group, kind, size and NCCL algorithm.
        out << ",\"dense_layer\":\"" << step.layer.collectives << "\"";
        if (!step.moe_layer.collectives.empty()) out << ",\"moe_layer\":\"" << step.moe_layer.collectives << "\"";
        out << "}}";
      }
      // Memory: allocated at the start, freed at the end (the engine's
      // accounting, so the counter's peak is the simulated peak).
      if (t.mem_alloc != 0) {
        live += t.mem_alloc;
        std::snprintf(buf, sizeof buf, ",\n{\"ph\":\"C\",\"name\":\"memory allocated (GiB)\",\"pid\":%d,\"ts\":%.3f,"
                      "\"args\":{\"GiB\":%.6f}}", pid, us(tt.start_ps), static_cast<double>(live) / kGiB);
        out << buf;
      }
      if (t.mem_free != 0) {
        live -= t.mem_free;
        std::snprintf(buf, sizeof buf, ",\n{\"ph\":\"C\",\"name\":\"memory allocated (GiB)\",\"pid\":%d,\"ts\":%.3f,"
                      "\"args\":{\"GiB\":%.6f}}", pid, us(tt.end_ps), static_cast<double>(live) / kGiB);
        out << buf;
      }
      prev_end = tt.end_ps;
      prev_id = id;
    }
  }
  // Communication, with flow arrows from each pipeline send to the compute
  // task it feeds on the receiving rank.
  for (int32_t id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.type == TaskType::kCompute) continue;
    const TaskTime& tt = r.times[static_cast<size_t>(id)];
    const int tid = t.category == Category::kPpComm ? kPpT : t.category == Category::kTpComm ? kTpT : kDpT;
    const int32_t* m = g.members(t);
    // A CP exchange has no members (it does not slow the compute it runs
    // beside) but one rank; it shows from when its bytes move (its latency
    // holds it for the pass's work outside the attention).
    const bool cp = t.label == TaskLabel::kCpExchange && t.rank >= 0;
    const uint32_t shown = cp ? 1 : t.member_count;
    const int64_t start = cp ? std::min(tt.end_ps, tt.start_ps + t.work_ps) : tt.start_ps;
    for (uint32_t k = 0; k < shown; ++k) {
      const int32_t rank = cp ? t.rank : m[k];
      std::snprintf(buf, sizeof buf,
                    ",\n{\"ph\":\"X\",\"name\":\"%s\",\"cat\":\"%s\",\"pid\":%d,\"tid\":%d,\"ts\":%.3f,\"dur\":%.3f,"
                    "\"args\":{\"microbatch\":%d,\"chunk\":%d,\"wire_MB\":%.6f",
                    to_string(t.label), to_string(t.category), step.ranks[static_cast<size_t>(rank)].global, tid,
                    us(start), us(tt.end_ps - start), t.microbatch, t.chunk, t.wire_bytes * 1e-6);
      out << buf;
      if (t.label == TaskLabel::kTpCollective) {
        // Each layer's collectives: group, kind, size and NCCL algorithm.
        out << ",\"dense_layer\":\"" << step.layer.collectives << "\"";
        if (!step.moe_layer.collectives.empty()) out << ",\"moe_layer\":\"" << step.moe_layer.collectives << "\"";
      }
      out << "}}";
    }
    // A collective's members, linked by flow arrows from its first member
    // (ids after the p2p ones: g.size() * k + id is unique for k >= 1).
    if (t.category != Category::kPpComm && t.member_count > 1) {
      for (uint32_t k = 1; k < t.member_count; ++k) {
        const int64_t flow = static_cast<int64_t>(g.size()) * k + id;
        std::snprintf(buf, sizeof buf,
                      ",\n{\"ph\":\"s\",\"name\":\"%s members\",\"cat\":\"%s\",\"id\":%lld,\"pid\":%d,\"tid\":%d,"
                      "\"ts\":%.3f},\n{\"ph\":\"f\",\"bp\":\"e\",\"name\":\"%s members\",\"cat\":\"%s\",\"id\":%lld,"
                      "\"pid\":%d,\"tid\":%d,\"ts\":%.3f}",
                      to_string(t.label), to_string(t.category), static_cast<long long>(flow),
                      step.ranks[static_cast<size_t>(m[0])].global, tid, us(tt.start_ps), to_string(t.label),
                      to_string(t.category), static_cast<long long>(flow), step.ranks[static_cast<size_t>(m[k])].global,
                      tid, us(tt.start_ps));
        out << buf;
      }
    }
    if (t.category != Category::kPpComm || t.member_count == 0) continue;
    const int sender = static_cast<int>(m[0]);
    const uint32_t* succ = g.successors(t);
    for (uint32_t k = 0; k < t.succ_count; ++k) {
      const Task& next = g.task(static_cast<int32_t>(succ[k]));
      if (next.type != TaskType::kCompute || next.rank == sender) continue;
      const TaskTime& nt = r.times[succ[k]];
      std::snprintf(buf, sizeof buf,
                    ",\n{\"ph\":\"s\",\"name\":\"p2p\",\"cat\":\"pp_comm\",\"id\":%d,\"pid\":%d,\"tid\":%d,\"ts\":%.3f}"
                    ",\n{\"ph\":\"f\",\"bp\":\"e\",\"name\":\"p2p\",\"cat\":\"pp_comm\",\"id\":%d,\"pid\":%d,\"tid\":%d,"
                    "\"ts\":%.3f}",
                    id, step.ranks[static_cast<size_t>(sender)].global, kPpT, us(tt.start_ps), id,
                    step.ranks[static_cast<size_t>(next.rank)].global, kComputeT, us(nt.start_ps));
      out << buf;
    }
  }
  out << "\n]}\n";
  return out.str();
}

}  // namespace

namespace {

// Each simulated rank's step split by what its program does or waits for in
// [window_start, window_start + period): its tasks' busy time (compute, the
// TP and expert collectives folded into them, the optimizer) and the gaps
// between them (classify_gap), then the wait after its last task.
std::vector<TimeBreakdown> rank_breakdowns(const LoweredStep& step, const EngineResult& r,
                                           const std::vector<Intervals>& dp_intervals,
                                           const std::vector<int64_t>& window_start, int64_t period) {
  const TaskGraph& g = step.graph;
  std::vector<TimeBreakdown> out(step.ranks.size());
  std::vector<int64_t> last_dp_end(step.ranks.size(), 0);
  for (size_t rank = 0; rank < step.ranks.size(); ++rank) {
    for (const auto& [start, end] : dp_intervals[rank]) last_dp_end[rank] = std::max(last_dp_end[rank], end);
  }
  for (size_t rank = 0; rank < step.ranks.size(); ++rank) {
    TimeBreakdown& b = out[rank];
    const int64_t window_end = window_start[rank] + period;
    int64_t prev_end = window_start[rank];
    int32_t prev_id = -1;
    for (int32_t id : g.program[rank]) {
      const Task& t = g.task(id);
      const TaskTime& tt = r.times[static_cast<size_t>(id)];
      classify_gap(g, r, prev_id, id, prev_end, tt.start_ps, &b, &dp_intervals[rank]);
      const double busy = static_cast<double>(tt.end_ps - tt.start_ps) * 1e-12;
      if (t.category == Category::kOptimizer) {
        b.optimizer += busy;
      } else {
        const double tp = t.work_ps > 0 ? busy * static_cast<double>(t.tp_comm_ps) / static_cast<double>(t.work_ps) : 0;
        const double ep = t.work_ps > 0 ? busy * static_cast<double>(t.ep_comm_ps) / static_cast<double>(t.work_ps) : 0;
        b.tp_comm += tp;
        b.ep_comm += ep;
        b.compute += busy - tp - ep;
      }
      prev_end = tt.end_ps;
      prev_id = id;
    }
    // After the rank's last task: waiting for trailing DP all-gathers, or for
    // slower stages (pipeline imbalance).
    if (window_end > prev_end) {
      const int64_t last_comm = last_dp_end[rank];
      const double dp = static_cast<double>(std::max<int64_t>(0, std::min(last_comm, window_end) - prev_end));
      b.dp_comm += dp * 1e-12;
      b.bubble += (static_cast<double>(window_end - prev_end) - dp) * 1e-12;
    }
  }
  return out;
}

}  // namespace

LoweringOptions lowering_options(const SimulateOptions& options) {
  LoweringOptions lo;
  lo.representative = options.representative;
  lo.bucket_bytes = options.bucket_bytes;
  lo.p2p = options.p2p;
  lo.blocking_dp = options.blocking_dp;
  lo.cp_overlap = options.cp_overlap;
  return lo;
}

LoweredStep lower_for_simulation(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                                 const SimulateOptions& options) {
  TRAINPLAN_CHECK(layout.feasible, "simulating an infeasible layout");
  return lower_step(model, cluster, layout, lowering_options(options));  // lower_step folds a dualpipe plan
}

int64_t lowered_step_lower_bound_ps(const LoweredStep& step, const Layout& layout) {
  if (zero_bubble_automatic(layout.plan.schedule) || !step.async.empty() || layout.plan.dp_mode == DpMode::kAsync) {
    return 0;
  }
  return critical_path_lower_bound_ps(step.graph);
}

namespace {

void finish_report(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout, StepReport* out);
// report_lowered, and each simulated rank's own split of the step into *ranks
// when not null (rank_breakdowns over the report's window).
StepReport report_lowered_ranks(const ModelSpec& model, const ClusterSpec& cluster, const Layout& requested,
                                const SimulateOptions& options, const LoweredStep& step, const EngineResult& r,
                                double engine_wall_s, std::vector<TimeBreakdown>* ranks);

// The steady state of a synchronous step: how many micro-batches the three
// probe runs take (first, first + stride, first + 2 stride).  The first is
// past the pipeline's warm-up and cool-down (2p + 2, at least 3: the first
// micro-batch has no prefetch and the last reduces the gradients); the
// stride keeps the interleaved schedule's m % p == 0.
struct SteadyProbe {
  int64_t first = 0, stride = 1;
};

std::optional<SteadyProbe> steady_probe(const Layout& layout, const SimulateOptions& options) {
  const Plan& p = layout.plan;
  if (options.trace || !options.representative || p.dp_mode != DpMode::kSync || zero_bubble(p.schedule) ||
      p.schedule == Schedule::kNaive) {
    return std::nullopt;
  }
  SteadyProbe probe;
  probe.stride = p.schedule == Schedule::kInterleaved ? p.pp : 1;
  const int64_t warm = std::max<int64_t>(3, 2 * static_cast<int64_t>(p.pp) + 2);
  probe.first = (warm + probe.stride - 1) / probe.stride * probe.stride;
  // Worth it only when the probes run well under the step's micro-batches.
  const int64_t probed = 3 * probe.first + 3 * probe.stride;
  if (layout.microbatches <= probe.first + 2 * probe.stride || 5 * probed > 3 * layout.microbatches) return std::nullopt;
  return probe;
}

struct ProbeRun {
  StepReport report;
  int64_t makespan_ps = 0;
  std::vector<TimeBreakdown> ranks;  // each simulated rank's own split of the run (rank_breakdowns)
};

ProbeRun run_probe(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                   const SimulateOptions& options, int64_t microbatches) {
  Layout L = layout;
  L.microbatches = microbatches;
  L.plan.gbs = microbatches * L.plan.mbs * L.plan.dp;
  LoweredStep step = lower_for_simulation(model, cluster, L, options);
  double wall_s = 0;
  const EngineResult r = run_lowered(step, &wall_s);
  ProbeRun run{StepReport{}, r.makespan_ps, {}};
  run.report = report_lowered_ranks(model, cluster, L, options, step, r, wall_s, &run.ranks);
  return run;
}

// Whether b - a and c - b agree to rounding (sums of the same per-task
// terms in another order), relative to the step.
bool same_increment(double a, double b, double c, double step_s) {
  return std::fabs((c - b) - (b - a)) <= 1e-9 * std::max(step_s, 1e-12);
}

}  // namespace

std::optional<StepReport> simulate_steady_state(const ModelSpec& model, const ClusterSpec& cluster,
                                                const Layout& layout, const SimulateOptions& options) {
  TRAINPLAN_CHECK(layout.feasible, "simulating an infeasible layout");
  const std::optional<SteadyProbe> probe = steady_probe(layout, options);
  if (!probe) return std::nullopt;
  const ProbeRun a = run_probe(model, cluster, layout, options, probe->first);
  const ProbeRun b = run_probe(model, cluster, layout, options, probe->first + probe->stride);
  const ProbeRun c = run_probe(model, cluster, layout, options, probe->first + 2 * probe->stride);
  // Periodic: every `stride` more micro-batches add the same time (to the
  // picosecond), the same events and tasks, the same time to each category,
  // and leave each stage's simulated peak memory as it was.
  const int64_t period = c.makespan_ps - b.makespan_ps;
  if (period <= 0 || b.makespan_ps - a.makespan_ps != period) return std::nullopt;
  if (c.report.events - b.report.events != b.report.events - a.report.events) return std::nullopt;
  if (c.report.tasks - b.report.tasks != b.report.tasks - a.report.tasks) return std::nullopt;
  const TimeBreakdown &x = a.report.breakdown, &y = b.report.breakdown, &z = c.report.breakdown;
  const double st = c.report.step_time_s;
  constexpr double TimeBreakdown::*parts[] = {&TimeBreakdown::compute, &TimeBreakdown::tp_comm,
                                             &TimeBreakdown::pp_comm, &TimeBreakdown::dp_comm,
                                             &TimeBreakdown::bubble,  &TimeBreakdown::optimizer,
                                             &TimeBreakdown::ep_comm};
  for (double TimeBreakdown::*part : parts) {
    if (!same_increment(x.*part, y.*part, z.*part, st)) return std::nullopt;
  }
  // And so on every rank, whose own work (its tasks and the collectives it
  // waits for) grows by no more than the step: a rank that is still using up
  // the slack the warm-up left it (uneven stages, whose busiest rank falls
  // behind only after some micro-batches) would add more each stride than
  // the probes show, and its idle time, shrinking at a constant rate, adds
  // up to the same increment in the mean.
  for (size_t i = 0; i < c.ranks.size(); ++i) {
    for (double TimeBreakdown::*part : parts) {
      if (!same_increment(a.ranks[i].*part, b.ranks[i].*part, c.ranks[i].*part, st)) return std::nullopt;
    }
    const TimeBreakdown &rb = b.ranks[i], &rc = c.ranks[i];
    const double work = (rc.compute + rc.tp_comm + rc.ep_comm + rc.optimizer) -
                        (rb.compute + rb.tp_comm + rb.ep_comm + rb.optimizer);
    if (work > static_cast<double>(period) * 1e-12 * (1 + 1e-9)) return std::nullopt;
  }
  for (size_t s = 0; s < c.report.stages.size(); ++s) {
    if (a.report.stages[s].simulated_peak_bytes != c.report.stages[s].simulated_peak_bytes ||
        b.report.stages[s].simulated_peak_bytes != c.report.stages[s].simulated_peak_bytes) {
      return std::nullopt;
    }
  }
  // Extrapolate from the last probe by the remaining periods.
  const int64_t q = (layout.microbatches - probe->first - 2 * probe->stride) / probe->stride;
  StepReport rep = c.report;
  rep.step_time_s = static_cast<double>(c.makespan_ps + q * period) * 1e-12;
  for (double TimeBreakdown::*part : parts) rep.breakdown.*part = z.*part + static_cast<double>(q) * (z.*part - y.*part);
  rep.events = c.report.events + static_cast<uint64_t>(q) * (c.report.events - b.report.events);
  rep.tasks = c.report.tasks + q * (c.report.tasks - b.report.tasks);
  rep.engine_wall_s = a.report.engine_wall_s + b.report.engine_wall_s + c.report.engine_wall_s;
  finish_report(model, cluster, layout, &rep);
  return rep;
}

StepReport simulate_step(const ModelSpec& model, const ClusterSpec& cluster, const Layout& requested,
                         const SimulateOptions& options) {
  const Layout layout = execution_layout(model, cluster, requested);
  if (std::optional<StepReport> steady = simulate_steady_state(model, cluster, layout, options)) return *steady;
  return simulate_lowered(model, cluster, layout, options, lower_for_simulation(model, cluster, layout, options));
}

StepReport simulate_lowered(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                            const SimulateOptions& options, LoweredStep step) {
  double wall_s = 0;
  const EngineResult r = run_lowered(step, &wall_s);
  return report_lowered(model, cluster, layout, options, step, r, wall_s);  // report_lowered folds it
}

EngineResult run_lowered(LoweredStep& step, double* wall_s) {
  EngineOptions eo;
  eo.comm_slowdown = step.comm_slowdown;
  eo.static_bytes = step.static_bytes;
  auto t0 = std::chrono::steady_clock::now();
  EngineResult r = run_engine(step.graph, step.network, eo);
  auto t1 = std::chrono::steady_clock::now();
  if (wall_s != nullptr) *wall_s = std::chrono::duration<double>(t1 - t0).count();
  return r;
}

uint64_t lowered_step_fingerprint(const LoweredStep& step) {
  uint64_t h = fingerprint(step.graph, step.network);
  uint64_t bits = 0;
  std::memcpy(&bits, &step.comm_slowdown, sizeof bits);
  h ^= bits * 0x9e3779b97f4a7c15ULL;
  for (int64_t b : step.static_bytes) h = (h ^ static_cast<uint64_t>(b)) * 0x100000001b3ULL;
  return h;
}

namespace {

// The fields a report derives from its step time, breakdown and simulated
// per-stage peaks: throughput (sync), FLOP rates, fractions, the memory
// verdict against the closed form.
void finish_report(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout, StepReport* out) {
  StepReport& rep = *out;
  const Plan& p = layout.plan;
  if (!rep.async) rep.tokens_per_s = static_cast<double>(p.gbs) * static_cast<double>(p.seq) / rep.step_time_s;
  StepFlops flops = step_flops(model, p);
  const Dtype dt = p.precision == Precision::kBf16 ? Dtype::kBf16 : p.precision == Precision::kFp16 ? Dtype::kFp16 : Dtype::kFp32;
  const double peak = cluster.gpu.peak.at(dt).flop_per_s();
  rep.model_tflops_per_gpu = flops.model_flops / rep.step_time_s / layout.gpus * 1e-12;
  rep.hw_tflops_per_gpu = flops.hardware_flops / rep.step_time_s / layout.gpus * 1e-12;
  rep.mfu = rep.model_tflops_per_gpu * 1e12 / peak;
  rep.hfu = rep.hw_tflops_per_gpu * 1e12 / peak;
  rep.bubble_fraction = rep.breakdown.bubble / rep.step_time_s;
  rep.exposed_comm_fraction =
      (rep.breakdown.tp_comm + rep.breakdown.pp_comm + rep.breakdown.dp_comm + rep.breakdown.ep_comm) / rep.step_time_s;
  // Memory: simulated peak per stage against the closed form.
  MemoryReport mem = plan_memory(model, cluster, layout);
  rep.capacity_bytes = mem.capacity_bytes;
  rep.stages.resize(static_cast<size_t>(p.pp));
  rep.peak_memory_bytes = 0;
  for (int s = 0; s < p.pp; ++s) {
    rep.stages[static_cast<size_t>(s)].stage = s;
    rep.stages[static_cast<size_t>(s)].closed_form_peak_bytes = mem.stages[static_cast<size_t>(s)].breakdown.total();
  }
  for (const StageResult& st : rep.stages) rep.peak_memory_bytes = std::max(rep.peak_memory_bytes, st.simulated_peak_bytes);
  rep.fits = rep.peak_memory_bytes <= rep.capacity_bytes && mem.fits;
}

}  // namespace

StepReport report_lowered(const ModelSpec& model, const ClusterSpec& cluster, const Layout& requested,
                          const SimulateOptions& options, const LoweredStep& step, const EngineResult& r,
                          double engine_wall_s) {
  return report_lowered_ranks(model, cluster, requested, options, step, r, engine_wall_s, nullptr);
}

namespace {

StepReport report_lowered_ranks(const ModelSpec& model, const ClusterSpec& cluster, const Layout& requested,
                                const SimulateOptions& options, const LoweredStep& step, const EngineResult& r,
                                double engine_wall_s, std::vector<TimeBreakdown>* ranks) {
  TRAINPLAN_CHECK(requested.feasible, "simulating an infeasible layout");
  const Layout layout = execution_layout(model, cluster, requested);
  StepReport rep;
  rep.engine_wall_s = engine_wall_s;
  rep.events = r.events;
  rep.tasks = step.graph.size();
  rep.simulated_ranks = static_cast<int>(step.ranks.size());
  rep.layer = step.layer;
  rep.dense_layers = false;
  for (int64_t i = 0; i < model.layers && !rep.dense_layers; ++i) rep.dense_layers = !model.is_moe_layer(i);
  rep.moe_layer = step.moe_layer;
  rep.moe_load = step.moe_load;
  const Plan& p = layout.plan;
  const TaskGraph& g = step.graph;
  const std::vector<Intervals> dp_intervals = rank_dp_intervals(g, r, step.ranks.size());
  std::vector<int64_t> last_dp_end(step.ranks.size(), 0);
  for (size_t rank = 0; rank < step.ranks.size(); ++rank) {
    for (const auto& [start, end] : dp_intervals[rank]) last_dp_end[rank] = std::max(last_dp_end[rank], end);
  }
  // Each rank's step is the window [window_start, window_start + period).
  // Zero Bubble's automatic schedules run with optimizer post-validation (Qi et al.
  // Sec. 4: the step's global synchronisations, the gradient-norm and
  // NaN/Inf all-reduces, are checked after the update instead), so
  // consecutive steps overlap across stages and the period is the longest
  // rank span, first task start to last task (or DP transfer) end.
  // Elsewhere the step ends in a synchronisation: the period is the makespan.
  std::vector<int64_t> window_start(step.ranks.size(), 0);
  int64_t period = r.makespan_ps;
  if (zero_bubble_automatic(p.schedule) && step.async.empty()) {
    period = 0;
    for (size_t rank = 0; rank < step.ranks.size(); ++rank) {
      const auto& prog = g.program[rank];
      if (prog.empty()) continue;
      int64_t last = last_dp_end[rank];
      for (int32_t id : prog) last = std::max(last, r.times[static_cast<size_t>(id)].end_ps);
      window_start[rank] = r.times[static_cast<size_t>(prog.front())].start_ps;
      period = std::max(period, last - window_start[rank]);
    }
  }
  rep.step_time_s = static_cast<double>(period) * 1e-12;
  if (!step.async.empty()) {
    // Throughput over the run; a "step" is the time to process gbs samples.
    rep.async = true;
    const double tokens = static_cast<double>(step.async_iterations) * static_cast<double>(p.gbs) *
                          static_cast<double>(p.seq);
    rep.tokens_per_s = tokens / rep.step_time_s;
    rep.step_time_s = static_cast<double>(p.gbs) * static_cast<double>(p.seq) / rep.tokens_per_s;
    rep.staleness = async_staleness(step, r);
  }

  // Time breakdown per rank, averaged.
  TimeBreakdown sum;
  std::vector<TimeBreakdown> per_rank = rank_breakdowns(step, r, dp_intervals, window_start, period);
  for (const TimeBreakdown& b : per_rank) {
    sum.compute += b.compute;
    sum.tp_comm += b.tp_comm;
    sum.ep_comm += b.ep_comm;
    sum.pp_comm += b.pp_comm;
    sum.dp_comm += b.dp_comm;
    sum.bubble += b.bubble;
    sum.optimizer += b.optimizer;
  }
  // Async runs several iterations: scale the run's split to one step.
  const double n = static_cast<double>(step.ranks.size()) * (static_cast<double>(period) * 1e-12 / rep.step_time_s);
  rep.breakdown = TimeBreakdown{sum.compute / n, sum.tp_comm / n, sum.pp_comm / n, sum.dp_comm / n, sum.bubble / n,
                                sum.optimizer / n, sum.ep_comm / n};
  rep.stages.resize(static_cast<size_t>(p.pp));
  for (size_t i = 0; i < step.ranks.size(); ++i) {
    StageResult& st = rep.stages[static_cast<size_t>(step.ranks[i].pp)];
    st.simulated_peak_bytes = std::max(st.simulated_peak_bytes, static_cast<double>(r.peak_bytes[i]));
  }
  finish_report(model, cluster, layout, &rep);
  if (options.trace) rep.trace_json = chrome_trace(step, r, p, dp_intervals);
  if (ranks != nullptr) *ranks = std::move(per_rank);
  return rep;
}

}  // namespace

}  // namespace trainplan
