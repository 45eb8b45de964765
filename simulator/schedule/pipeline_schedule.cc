#include "simulator/schedule/pipeline_schedule.h"

#include <algorithm>
#include <limits>
#include <set>
#include <string>
#include <utility>

#include "simulator/core/error.h"

namespace trainplan {
namespace {

PipeOp forward(int microbatch, int chunk) {
  return PipeOp{PipeOp::Kind::kForward, microbatch, chunk};
}
PipeOp backward(int microbatch, int chunk) {
  return PipeOp{PipeOp::Kind::kBackward, microbatch, chunk};
}

std::string op_text(const PipeOp& op) {
  const char* kind = op.kind == PipeOp::Kind::kForward ? "F" : op.kind == PipeOp::Kind::kBackward ? "B" : "W";
  return std::string(kind) + "(mb " +
         std::to_string(op.microbatch) + ", chunk " + std::to_string(op.chunk) + ")";
}

// megatron/core/pipeline_parallel/schedules.py,
// forward_backward_pipelining_without_interleaving.  `combined`: one more
// warm-up forward, and each steady-state forward merged with the backward
// after it (build_pipeline_schedule).
std::vector<PipeOp> one_f_one_b_rank(int p, int m, int rank, bool combined) {
  const int warmup = std::min(p - rank - 1 + (combined ? 1 : 0), m);
  const int remaining = m - warmup;
  std::vector<PipeOp> ops;
  for (int i = 0; i < warmup; ++i) ops.push_back(forward(i, 0));
  for (int i = 0; i < remaining; ++i) {
    ops.push_back(forward(warmup + i, 0));
    ops.push_back(backward(i, 0));
    if (combined) ops[ops.size() - 2].overlapped = ops.back().overlapped = true;
  }
  for (int i = remaining; i < m; ++i) ops.push_back(backward(i, 0));
  return ops;
}

// megatron/schedules.py forward_backward_pipelining_with_interleaving
// (get_model_chunk_id; the microbatch of a chunk is its FIFO position in
// input_tensors[chunk], which is (k / (p*v))*p + k % p when m % p == 0).
std::vector<PipeOp> interleaved_rank(int p, int m, int v, int rank, bool combined) {
  const int total = m * v;
  const int group = p * v;
  int warmup = total;  // m == p: all forwards, then all backwards
  if (m != p) warmup = std::min((p - rank - 1) * 2 + (v - 1) * p + (combined ? 1 : 0), total);
  const int remaining = total - warmup;
  auto microbatch = [&](int k) { return (k / group) * p + k % p; };
  auto forward_chunk = [&](int k) { return (k % group) / p; };
  auto fwd = [&](int k) { return forward(microbatch(k), forward_chunk(k)); };
  auto bwd = [&](int k) { return backward(microbatch(k), v - 1 - forward_chunk(k)); };

  std::vector<PipeOp> ops;
  for (int k = 0; k < warmup; ++k) ops.push_back(fwd(k));
  for (int k = 0; k < remaining; ++k) {
    ops.push_back(fwd(warmup + k));
    ops.push_back(bwd(k));
    if (combined) ops[ops.size() - 2].overlapped = ops.back().overlapped = true;
  }
  for (int k = remaining; k < total; ++k) ops.push_back(bwd(k));
  return ops;
}

PipeOp weight(int microbatch, int chunk) {
  return PipeOp{PipeOp::Kind::kWeight, microbatch, chunk};
}

// PyTorch's ScheduleZBVZeroBubble._calculate_single_rank_operations
// (torch/distributed/pipelining/schedules.py), restated: the order is built
// for n = max(2p - 1, m) micro-batches and the passes of micro-batches >= m
// are dropped (there the runtime idles).  Chunk 0 is stage r, chunk 1 stage
// 2p-1-r.
std::vector<PipeOp> zbv_rank(int p, int m, int rank) {
  const int n = std::max(2 * p - 1, m);
  std::vector<PipeOp> ops;
  int f0 = 0, f1 = 0, b0 = 0, b1 = 0;
  // Warm-up: 2(p-r)-1 forwards of chunk 0; r pairs F1 F0; p-r triples F1 B1 W1.
  for (int i = 0; i < 2 * (p - rank) - 1; ++i) ops.push_back(forward(f0++, 0));
  for (int i = 0; i < rank; ++i) {
    ops.push_back(forward(f1++, 1));
    ops.push_back(forward(f0++, 0));
  }
  for (int i = 0; i < p - rank; ++i) {
    ops.push_back(forward(f1++, 1));
    ops.push_back(backward(b1, 1));
    ops.push_back(weight(b1++, 1));
  }
  // Steady state: F0 B0 W0 F1 B1 W1 (no F0 once all are out).
  while (f1 < f0 || f0 < n) {
    if (f0 < n) ops.push_back(forward(f0++, 0));
    ops.push_back(backward(b0, 0));
    ops.push_back(weight(b0++, 0));
    ops.push_back(forward(f1++, 1));
    ops.push_back(backward(b1, 1));
    ops.push_back(weight(b1++, 1));
  }
  // Cool-down: r pairs B0 B1, then p-r pairs B0 W0, then the pending Ws of
  // chunk 1 and of chunk 0.
  int w0 = b0, w1 = b1;
  for (int i = 0; i < rank; ++i) {
    ops.push_back(backward(b0++, 0));
    ops.push_back(backward(b1++, 1));
  }
  for (int i = 0; i < p - rank; ++i) {
    ops.push_back(backward(b0++, 0));
    ops.push_back(weight(w0++, 0));
  }
  while (w1 < b1) ops.push_back(weight(w1++, 1));
  while (w0 < b0) ops.push_back(weight(w0++, 0));
  TRAINPLAN_CHECK(f0 == n && b0 == n && w0 == n && f1 == n && b1 == n && w1 == n, "zb-v order is incomplete");
  std::vector<PipeOp> kept;
  for (const PipeOp& op : ops) {
    if (op.microbatch < m) kept.push_back(op);
  }
  return kept;
}

// PyTorch's ScheduleInterleavedZeroBubble._calculate_single_rank_operations
// with _get_warmup_ops(multiply_factor = 1) and _get_1f1b_rank_ops(
// num_1f1b_microbatches = rank, enable_zero_bubble = True), restated: with R
// micro-batches per round (m / max(1, m / p)), warm-up (v-1)R + p-1-r
// forwards (at most v*m); step k's forward runs chunk (k / R) mod v, its
// backward (from the warm-up on) chunk v-1-((k - warm-up) / R) mod v; after
// the rank's first r backwards each backward is followed by the oldest
// pending W; the rest of the Ws run at the end.
std::vector<PipeOp> interleaved_zb_rank(int p, int m, int v, int rank) {
  const int rounds = std::max(1, m / p);
  const int per_round = m / rounds;
  const int total = v * m;
  const int warmup = std::min((v - 1) * per_round + (p - 1 - rank), total);
  const int fwd_bwd = total - warmup;
  std::vector<int> f(static_cast<size_t>(v), 0), b(static_cast<size_t>(v), 0), w(static_cast<size_t>(v), 0);
  std::vector<int> backward_chunks;  // chunk of each backward, in order
  size_t weights = 0;
  std::vector<PipeOp> ops;
  auto fwd_chunk = [&](int k) { return (k / per_round) % v; };
  auto bwd_chunk = [&](int k) { return v - 1 - ((k - warmup) / per_round) % v; };
  auto put_f = [&](int k) {
    const int c = fwd_chunk(k);
    ops.push_back(forward(f[static_cast<size_t>(c)]++, c));
  };
  auto put_b = [&](int k) {
    const int c = bwd_chunk(k);
    ops.push_back(backward(b[static_cast<size_t>(c)]++, c));
    backward_chunks.push_back(c);
    if (k - warmup >= rank) {
      const int wc = backward_chunks[weights++];
      ops.push_back(weight(w[static_cast<size_t>(wc)]++, wc));
    }
  };
  for (int k = 0; k < warmup + fwd_bwd + warmup; ++k) {
    if (k < warmup) {
      put_f(k);
    } else if (k < warmup + fwd_bwd) {
      put_f(k);
      put_b(k);
    } else {
      put_b(k);
    }
  }
  while (weights < backward_chunks.size()) {
    const int wc = backward_chunks[weights++];
    ops.push_back(weight(w[static_cast<size_t>(wc)]++, wc));
  }
  return ops;
}

// PyTorch's ScheduleDualPipeV._calculate_single_rank_operations
// (torch/distributed/pipelining/schedules.py), restated.  Chunk 0 is stage r,
// chunk 1 stage 2p-1-r.  A BACKWARD_INPUT queues its W, popped oldest first
// where the order asks for one; a FULL_BACKWARD is B followed by its W.
std::vector<PipeOp> dualpipev_rank(int p, int m, int rank) {
  std::vector<PipeOp> ops;
  int f[2] = {0, 0}, b[2] = {0, 0};
  std::vector<PipeOp> pending;  // W passes of B-only backwards, oldest first
  auto fwd = [&](int c, bool paired = false) {
    PipeOp op = forward(f[c]++, c);
    op.overlapped = paired;
    ops.push_back(op);
  };
  auto input_only = [&](int c) {
    ops.push_back(backward(b[c], c));
    pending.push_back(weight(b[c]++, c));
  };
  auto full = [&](int c, bool paired = false) {
    PipeOp op = backward(b[c], c);
    op.overlapped = paired;
    ops.push_back(op);
    ops.push_back(weight(b[c]++, c));
  };
  auto pop_weight = [&] {
    if (pending.empty()) return;
    ops.push_back(pending.front());
    pending.erase(pending.begin());
  };
  for (int i = 0; i < (p - rank - 1) * 2; ++i) fwd(0);
  for (int i = 0; i < rank + 1; ++i) {
    fwd(0);
    fwd(1);
  }
  for (int i = 0; i < p - rank - 1; ++i) {
    input_only(1);
    pop_weight();
    fwd(1);
  }
  for (int i = 0; i < m - 2 * p + rank + 1; ++i) {
    // The last rank's first pair is not overlapped (a shorter bubble).
    const bool paired = !(i == 0 && rank == p - 1);
    fwd(0, paired);
    full(1, paired);
    fwd(1, true);
    full(0, true);
  }
  for (int i = 0; i < p - rank - 1; ++i) {
    full(1);
    fwd(1, true);
    full(0, true);
  }
  const int half = rank + 1;
  bool zero_bubble = false;
  for (int i = 0; i < half; ++i) {
    if (i == half / 2 && rank % 2 == 1) zero_bubble = true;
    zero_bubble ? input_only(1) : full(1);
    if (i == half / 2 && rank % 2 == 0) zero_bubble = true;
    zero_bubble ? input_only(0) : full(0);
  }
  for (int i = 0; i < p - rank - 1; ++i) {
    pop_weight();
    zero_bubble ? input_only(0) : full(0);
  }
  for (int i = 0; i < rank + 1; ++i) pop_weight();
  TRAINPLAN_CHECK(f[0] == m && f[1] == m && b[0] == m && b[1] == m && pending.empty(),
                  "dualpipe-v order is incomplete");
  return ops;
}

}  // namespace

bool operator==(const PipeOp& a, const PipeOp& b) {
  return a.kind == b.kind && a.microbatch == b.microbatch && a.chunk == b.chunk;
}

Feasibility check_pipeline_schedule(Schedule s, int p, int m, int v) {
  auto no = [](std::string reason) { return Feasibility{false, std::move(reason)}; };
  if (p < 1) return no("pipeline size p must be >= 1 (got " + std::to_string(p) + ")");
  if (m < 1) return no("microbatch count m must be >= 1 (got " + std::to_string(m) + ")");
  if (v < 1) return no("model chunks per rank v must be >= 1 (got " + std::to_string(v) + ")");
  if (zero_bubble(s) && p < 2) {
    return no(std::string(to_string(s)) + " schedule needs pipeline size p >= 2 (got p = " + std::to_string(p) + ")");
  }
  if (s == Schedule::kDualPipe) {
    // deepseek-ai/DualPipe dualpipe.py: "num_ranks % 2 == 0", "num_chunks %
    // 2 == 0 and num_chunks >= num_ranks * 2"; one stage of each parameter
    // copy per rank.
    if (v != 2) return no("dualpipe schedule runs two model chunks per rank (one stage of each parameter copy); got v = " + std::to_string(v));
    if (p % 2 != 0) return no("dualpipe schedule needs an even pipeline size p (got p = " + std::to_string(p) + "; DualPipe: num_ranks % 2 == 0)");
    // DualPipe runs on 2 ranks too; trainplan builds its order as DualPipeV's
    // on p/2 ranks, which needs two.
    if (p < 4) return no("dualpipe schedule needs p >= 4 here (got p = " + std::to_string(p) + "; it is built as dualpipe-v on p/2 >= 2 ranks)");
    if (m % 2 != 0 || m < 2 * p) {
      return no("dualpipe schedule needs an even m >= 2p micro-batches (got m = " + std::to_string(m) + ", p = " +
                std::to_string(p) + "; DualPipe: num_chunks % 2 == 0 and num_chunks >= num_ranks * 2)");
    }
    return Feasibility{};
  }
  if (v_shape(s)) {
    if (v != 2) {
      return no(std::string(to_string(s)) + " schedule runs exactly two model chunks per rank in a V; got v = " +
                std::to_string(v) + " (PyTorch: ZBV requires exactly 2 stages per rank)");
    }
    if (s == Schedule::kDualPipeV && m < 2 * p) {
      return no("dualpipe-v schedule needs m >= 2p micro-batches (got m = " + std::to_string(m) + ", p = " +
                std::to_string(p) + "; PyTorch: DualPipeV requires at least as many microbatches as stages)");
    }
    return Feasibility{};
  }
  if (s == Schedule::kInterleavedZb) {
    if (v < 2) {
      return no("interleaved-zb schedule runs two or more model chunks per rank; got v = " + std::to_string(v) +
                " (torchtitan: Multi-stage schedule requires at least 2 stages per rank)");
    }
    const int rounds = std::max(1, m / p);
    if (m % rounds != 0) {
      return no("interleaved-zb schedule needs m to be a multiple of its rounds max(1, m / p) = " +
                std::to_string(rounds) + " (got m = " + std::to_string(m) + ")");
    }
    return Feasibility{};
  }
  if (s != Schedule::kInterleaved) {
    if (v != 1) {
      return no(std::string(to_string(s)) + " schedule runs one model chunk per rank; got v = " +
                std::to_string(v) + " (use the interleaved schedule)");
    }
    return Feasibility{};
  }
  if (p < 2) {
    return no("interleaved schedule needs pipeline size p >= 2 (got p = " + std::to_string(p) +
              "; Megatron: pipeline-model-parallel size should be greater than 1)");
  }
  if (m % p != 0) {
    return no("interleaved schedule needs the microbatch count to be a multiple of the pipeline size "
              "(got m = " + std::to_string(m) + ", p = " + std::to_string(p) +
              "; Megatron: number of microbatches is not divisible by pipeline-parallel size)");
  }
  return Feasibility{};
}

PipelineSchedule build_pipeline_schedule(Schedule s, int p, int m, int v, bool combined_1f1b) {
  const Feasibility f = check_pipeline_schedule(s, p, m, v);
  TRAINPLAN_CHECK(f.ok, f.reason);
  TRAINPLAN_CHECK(!combined_1f1b || s == Schedule::k1F1B || s == Schedule::kInterleaved,
                  std::string("the combined 1F1B order is built on 1f1b or interleaved, not ") + to_string(s));
  TRAINPLAN_CHECK(!zero_bubble_automatic(s), std::string(to_string(s)) + " is built by build_zero_bubble_schedule");
  PipelineSchedule schedule(static_cast<size_t>(p));
  for (int rank = 0; rank < p; ++rank) {
    std::vector<PipeOp>& ops = schedule[static_cast<size_t>(rank)];
    switch (s) {
      case Schedule::kGpipe:
        for (int i = 0; i < m; ++i) ops.push_back(forward(i, 0));
        for (int i = m - 1; i >= 0; --i) ops.push_back(backward(i, 0));
        break;
      case Schedule::k1F1B:
        ops = one_f_one_b_rank(p, m, rank, combined_1f1b);
        break;
      case Schedule::kInterleaved:
        ops = interleaved_rank(p, m, v, rank, combined_1f1b);
        break;
      case Schedule::kNaive:
        for (int i = 0; i < m; ++i) {
          ops.push_back(forward(i, 0));
          ops.push_back(backward(i, 0));
        }
        break;
      case Schedule::kZbv:
        ops = zbv_rank(p, m, rank);
        break;
      case Schedule::kDualPipeV:
        ops = dualpipev_rank(p, m, rank);
        break;
      case Schedule::kDualPipe:
        // dualpipe.py runs DualPipeV's steps with num_half_ranks, half_rank =
        // min(rank, p-1-rank) and half the micro-batches; the second half of
        // the ranks swap the two phases (their chunk 0 is the reverse
        // direction's), which leaves the order itself unchanged.
        ops = dualpipev_rank(p / 2, m / 2, std::min(rank, p - 1 - rank));
        break;
      case Schedule::kInterleavedZb:
        ops = interleaved_zb_rank(p, m, v, rank);
        break;
      case Schedule::kZb1p:
      case Schedule::kZb2p:
        break;  // refused above
    }
  }
  return schedule;
}

int model_chunk_stage(int rank, int chunk, int p, Schedule s) { return virtual_stage(s, p, rank, chunk); }

int peak_microbatches_in_flight(const std::vector<PipeOp>& ops) {
  std::set<std::pair<int, int>> live;  // (microbatch, chunk)
  size_t peak = 0;
  for (const PipeOp& op : ops) {
    const std::pair<int, int> key{op.microbatch, op.chunk};
    if (op.kind == PipeOp::Kind::kWeight) continue;
    if (op.kind == PipeOp::Kind::kForward) {
      TRAINPLAN_CHECK(live.insert(key).second, op_text(op) + " while its activations are live");
      peak = std::max(peak, live.size());
    } else {
      TRAINPLAN_CHECK(live.erase(key) == 1, op_text(op) + " without a preceding forward");
    }
  }
  return static_cast<int>(peak);
}

namespace {

// Durations of one op of each kind on each virtual stage (chunk c of rank r
// is stage c*p + r; with one chunk per rank, stage == rank), and the p2p
// delay.
struct OpDurations {
  std::vector<double> f, b, w;  // per virtual stage
  double p2p = 0;
};

// The same per-rank durations for every chunk of the rank.
OpDurations per_stage(OpDurations d, int v) {
  const size_t p = d.f.size();
  for (std::vector<double>* x : {&d.f, &d.b, &d.w}) {
    x->resize(p * static_cast<size_t>(v));
    for (size_t s = p; s < x->size(); ++s) (*x)[s] = (*x)[s % p];
  }
  return d;
}

UnitTimeRun execute(const PipelineSchedule& schedule, int v, const OpDurations& d, Schedule placement = Schedule::k1F1B) {
  const int p = static_cast<int>(schedule.size());
  TRAINPLAN_CHECK(p >= 1 && v >= 1, "need p >= 1 and v >= 1");
  const size_t stage_count = static_cast<size_t>(p) * static_cast<size_t>(v);
  TRAINPLAN_CHECK(d.f.size() == stage_count && d.b.size() == d.f.size() && d.w.size() == d.f.size(),
                  "op durations must be given for each of the " + std::to_string(stage_count) + " virtual stages");
  for (size_t i = 0; i < stage_count; ++i) {
    TRAINPLAN_CHECK(d.f[i] > 0 && d.b[i] > 0 && d.w[i] >= 0, "op times must be positive");
  }
  TRAINPLAN_CHECK(d.p2p >= 0, "p2p time must be >= 0");
  int m = 0;
  size_t weights = 0;
  for (int r = 0; r < p; ++r) {
    for (const PipeOp& op : schedule[static_cast<size_t>(r)]) {
      TRAINPLAN_CHECK(op.microbatch >= 0 && op.chunk >= 0 && op.chunk < v,
                      "rank " + std::to_string(r) + ": " + op_text(op) + " out of range");
      m = std::max(m, op.microbatch + 1);
      if (op.kind == PipeOp::Kind::kWeight) ++weights;
    }
  }
  const int stages = p * v;
  const size_t pairs = static_cast<size_t>(stages) * static_cast<size_t>(m);
  TRAINPLAN_CHECK(weights == 0 || weights == pairs,
                  "schedule has " + std::to_string(weights) + " W passes; expected 0 or stages*m = " +
                      std::to_string(pairs));
  // done[kind][stage * m + microbatch]: finish time, or -1 while not run.
  std::vector<double> done[3] = {std::vector<double>(pairs, -1.0), std::vector<double>(pairs, -1.0),
                                 std::vector<double>(pairs, -1.0)};
  auto at = [&](int kind, int stage, int mb) -> double& {
    return done[kind][static_cast<size_t>(stage) * static_cast<size_t>(m) + static_cast<size_t>(mb)];
  };

  UnitTimeRun run;
  run.start.resize(static_cast<size_t>(p));
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> free_at(static_cast<size_t>(p), 0.0);
  size_t remaining = 0;
  for (const auto& ops : schedule) remaining += ops.size();
  TRAINPLAN_CHECK(remaining == 2 * pairs + weights, "schedule has " + std::to_string(remaining) +
                                                        " ops; expected 2*stages*m (+ W passes) = " +
                                                        std::to_string(2 * pairs + weights));

  // Start times do not depend on the order ranks are visited, since each op
  // starts at max(rank free, dependencies done); sweeping until no rank can
  // advance therefore gives the as-soon-as-possible execution.
  while (remaining > 0) {
    bool progress = false;
    for (int r = 0; r < p; ++r) {
      const auto& ops = schedule[static_cast<size_t>(r)];
      size_t& i = next[static_cast<size_t>(r)];
      while (i < ops.size()) {
        const PipeOp& op = ops[i];
        const int s = model_chunk_stage(r, op.chunk, p, placement);
        const int mb = op.microbatch;
        double ready = free_at[static_cast<size_t>(r)];
        bool blocked = false;
        auto need = [&](int kind, int stage, double delay) {
          const double t = at(kind, stage, mb);
          if (t < 0) blocked = true;
          ready = std::max(ready, t + delay);
        };
        const int kind = op.kind == PipeOp::Kind::kForward ? 0 : op.kind == PipeOp::Kind::kBackward ? 1 : 2;
        if (kind == 0) {
          if (s > 0) need(0, s - 1, d.p2p);
        } else if (kind == 1) {
          need(0, s, 0);
          if (s + 1 < stages) need(1, s + 1, d.p2p);
        } else {
          need(1, s, 0);
        }
        if (blocked) break;
        TRAINPLAN_CHECK(at(kind, s, mb) < 0, "rank " + std::to_string(r) + " runs " + op_text(op) + " twice");
        const size_t ri = static_cast<size_t>(r), si = static_cast<size_t>(s);
        const double length = kind == 0 ? d.f[si] : kind == 2 ? d.w[si] : weights > 0 ? d.b[si] : d.b[si] + d.w[si];
        const double finish = ready + length;
        at(kind, s, mb) = finish;
        free_at[ri] = finish;
        run.start[ri].push_back(ready);
        run.makespan = std::max(run.makespan, finish);
        ++i;
        --remaining;
        progress = true;
      }
    }
    if (!progress) {
      std::string stuck;
      for (int r = 0; r < p; ++r) {
        const size_t i = next[static_cast<size_t>(r)];
        if (i < schedule[static_cast<size_t>(r)].size()) {
          stuck += " rank " + std::to_string(r) + " waits at op " + std::to_string(i) + " " +
                   op_text(schedule[static_cast<size_t>(r)][i]) + ";";
        }
      }
      TRAINPLAN_CHECK(progress, "pipeline schedule deadlocks:" + stuck);
    }
  }
  return run;
}

OpDurations durations_of(const StageOpTimes& t, size_t p) {
  TRAINPLAN_CHECK(t.forward.size() == p && t.backward_input.size() == p && t.backward_weight.size() == p,
                  "stage op times must be given for each of the " + std::to_string(p) + " ranks");
  for (size_t r = 0; r < p; ++r) {
    TRAINPLAN_CHECK(t.forward[r] > 0 && t.backward_input[r] > 0 && t.backward_weight[r] > 0,
                    "stage op times must be positive (rank " + std::to_string(r) + ")");
  }
  TRAINPLAN_CHECK(t.p2p >= 0 && t.weight_memory_share >= 0, "p2p time and W memory share must be >= 0");
  TRAINPLAN_CHECK((t.activation.empty() && t.weight_kept.empty()) ||
                      (t.activation.size() == p && t.weight_kept.size() == p),
                  "per-rank memory must be given for each of the " + std::to_string(p) + " ranks, or not at all");
  for (size_t r = 0; r < t.activation.size(); ++r) {
    TRAINPLAN_CHECK(t.activation[r] > 0 && t.weight_kept[r] >= 0, "per-rank memory must be positive");
  }
  return OpDurations{t.forward, t.backward_input, t.backward_weight, t.p2p};
}

// The three binary heuristics Zero Bubble's scheduler searches (Qi et al.
// Sec. 3.1; the authors' runtime tries all eight combinations and keeps the
// shortest schedule).
struct ZbKnobs {
  // Warm-up: stop adding forwards once the next one would end after the
  // first backward arrives (else: once the rank is busy until it arrives).
  bool no_bubble_before_first_b = false;
  // Steady state: let a rank that is two or more forwards ahead of the next
  // rank skip a forward when it would delay that rank's next B.
  bool prioritize_b = false;
  // Fill a gap shorter than a W with one only if that does not make this
  // rank's idle time the largest (else: always).
  bool fill_short_gaps = true;
};

struct ZbResult {
  PipelineSchedule schedule;
  double makespan = 0;  // of the executed schedule (build_zero_bubble_schedule)
};

// Builds one schedule round by round, as the paper describes: round 0 puts
// each rank's warm-up forwards (as many as fit before the first backward
// returns, within the memory limit, fewer on later ranks) and the first B
// from the last rank to the first; round i puts one forward per rank and then
// B(i) from the last rank to the first.  Before each F and B a rank runs
// pending Ws while they end before the pass's input arrives, or while its
// memory is at the limit.  Timing is tracked as the passes are placed.
ZbResult round_based_zero_bubble(int p, int m, double limit, const StageOpTimes& t, const ZbKnobs& knobs) {
  // `limit` in micro-batches of M_B; scaled below when M_B is given per rank.
  const size_t P = static_cast<size_t>(p);
  const size_t M = static_cast<size_t>(m);
  const double comm = t.p2p;
  // Memory deltas per rank of F, B and W, and the limit (units of M_B).
  std::vector<double> mem_f(P, 1.0), mem_b(P, t.weight_memory_share - 1.0), mem_w(P, -t.weight_memory_share);
  if (!t.activation.empty()) {
    for (size_t j = 0; j < P; ++j) {
      mem_f[j] = t.activation[j];
      mem_b[j] = t.weight_kept[j] - t.activation[j];
      mem_w[j] = -t.weight_kept[j];
    }
    limit *= std::max(t.activation[0], t.activation[P > 1 ? 1 : 0]);
  }
  std::vector<size_t> f(P, 0), b(P, 0), w(P, 0);
  std::vector<double> end(P, 0.0), mem(P, 0.0), idle(P, 0.0);
  std::vector<std::vector<double>> fin_f(P, std::vector<double>(M, 0.0)), fin_b = fin_f, fin_w = fin_f;
  ZbResult res;
  res.schedule.assign(P, {});
  constexpr double kEps = 1e-9;

  auto cost = [&](size_t j, PipeOp::Kind k) {
    return k == PipeOp::Kind::kForward ? t.forward[j] : k == PipeOp::Kind::kBackward ? t.backward_input[j]
                                                                                      : t.backward_weight[j];
  };
  auto put = [&](size_t j, PipeOp::Kind k) {
    size_t& n = k == PipeOp::Kind::kForward ? f[j] : k == PipeOp::Kind::kBackward ? b[j] : w[j];
    TRAINPLAN_CHECK(n < M, "zero-bubble scheduler: rank " + std::to_string(j) + " out of passes");
    double start = end[j];
    if (k == PipeOp::Kind::kForward && j > 0) start = std::max(start, fin_f[j - 1][n] + comm);
    if (k == PipeOp::Kind::kBackward) start = std::max(start, j + 1 < P ? fin_b[j + 1][n] + comm : fin_f[j][n]);
    if (k == PipeOp::Kind::kWeight) start = std::max(start, fin_b[j][n]);
    if (f[j] > 0) idle[j] += start - end[j];
    end[j] = start + cost(j, k);
    (k == PipeOp::Kind::kForward ? fin_f : k == PipeOp::Kind::kBackward ? fin_b : fin_w)[j][n] = end[j];
    mem[j] += k == PipeOp::Kind::kForward ? mem_f[j] : k == PipeOp::Kind::kBackward ? mem_b[j] : mem_w[j];
    res.schedule[j].push_back(PipeOp{k, static_cast<int>(n), 0});
    ++n;
  };
  auto largest_idle = [&] { return *std::max_element(idle.begin(), idle.end()); };
  // Ws before a pass on rank j whose input arrives at `arrival`: free memory
  // down to the limit, then fill the wait.
  auto fill = [&](size_t j, const std::vector<double>& pass, double arrival) {
    const double pass_mem = pass[j];
    while (mem[j] + pass_mem > limit + kEps && w[j] < b[j]) put(j, PipeOp::Kind::kWeight);
    while (w[j] < b[j] && end[j] + t.backward_weight[j] <= arrival + kEps) put(j, PipeOp::Kind::kWeight);
    if (w[j] < b[j] && end[j] < arrival - kEps) {
      // A gap shorter than a W: filling it delays the pass a little.
      if (!knobs.fill_short_gaps || arrival - end[j] > largest_idle() - idle[j]) put(j, PipeOp::Kind::kWeight);
    }
  };

  // Round 0: one forward everywhere, the warm-up forwards, then B(0).
  for (size_t j = 0; j < P; ++j) put(j, PipeOp::Kind::kForward);
  std::vector<size_t> extra(P, 0);
  double back = fin_f[P - 1][0] + t.backward_input[P - 1];  // B(0) leaves the last rank
  for (size_t jj = P - 1; jj-- > 0;) {
    double held = mem[jj], busy = end[jj];
    while (f[jj] + extra[jj] < M && held + mem_f[jj] <= limit + kEps) {
      if (knobs.no_bubble_before_first_b ? busy + t.forward[jj] > back + comm : busy >= back + comm) break;
      held += mem_f[jj];
      busy += t.forward[jj];
      ++extra[jj];
    }
    back = std::max(busy, back + comm) + t.backward_input[jj];
  }
  // A later rank runs fewer warm-up forwards than an earlier one (equal only
  // where both reach all m), never more: its forwards before B(0) need the
  // earlier rank's before its B(0).
  for (size_t j = 1; j < P; ++j) {
    while (extra[j] > 0 && extra[j] >= extra[j - 1] && f[j] + extra[j] < M) --extra[j];
    extra[j] = std::min(extra[j], extra[j - 1]);
  }
  for (size_t j = 0; j < P; ++j) {
    for (size_t k = 0; k < extra[j]; ++k) put(j, PipeOp::Kind::kForward);
  }
  for (size_t j = P; j-- > 0;) put(j, PipeOp::Kind::kBackward);

  for (size_t i = 1; i < M; ++i) {
    std::vector<int> want(P, 0);
    for (size_t j = 0; j < P; ++j) {
      if (f[j] >= M) continue;
      want[j] = 1;
      if (knobs.prioritize_b && j + 1 < P && f[j] >= f[j + 1] + 2) {
        // The next rank's next B is due after its forward and backward.
        const double due = end[j + 1] + t.forward[j + 1] + t.backward_input[j + 1] + comm;
        if (end[j] >= due) {
          want[j] = 0;
          continue;
        }
        double w_cost = 0, held = mem[j] + mem_f[j];
        for (size_t k = w[j]; held > limit + kEps && k < b[j]; ++k) {
          w_cost += t.backward_weight[j];
          held += mem_w[j];
        }
        if (end[j] + t.forward[j] + w_cost > due && due - end[j] <= largest_idle() - idle[j]) want[j] = 0;
      }
    }
    // A rank runs a forward only if the next rank does too.
    for (size_t j = P - 1; j-- > 0;) want[j] = std::min(want[j], want[j + 1]);
    for (size_t j = 0; j < P; ++j) {
      if (want[j] == 0) continue;
      fill(j, mem_f, j > 0 ? fin_f[j - 1][f[j]] + comm : 0.0);
      put(j, PipeOp::Kind::kForward);
    }
    // B(i) needs F(i): a rank that skipped forwards catches up (upstream
    // first, so each F's input is placed).
    for (size_t j = 0; j < P; ++j) {
      while (f[j] <= i) {
        fill(j, mem_f, j > 0 ? fin_f[j - 1][f[j]] + comm : 0.0);
        put(j, PipeOp::Kind::kForward);
      }
    }
    for (size_t j = P; j-- > 0;) {
      TRAINPLAN_CHECK(b[j] == i, "zero-bubble scheduler: rank " + std::to_string(j) + " fell out of its round");
      fill(j, mem_b, j + 1 < P ? fin_b[j + 1][i] + comm : fin_f[j][i]);
      if (j == 0 && f[j] == M) {
        while (w[j] < b[j]) put(j, PipeOp::Kind::kWeight);
      }
      put(j, PipeOp::Kind::kBackward);
    }
  }
  for (size_t j = 0; j < P; ++j) {
    TRAINPLAN_CHECK(f[j] == M && b[j] == M, "zero-bubble scheduler: rank " + std::to_string(j) + " left passes");
    while (w[j] < M) put(j, PipeOp::Kind::kWeight);
  }
  return res;
}

}  // namespace

PipelineSchedule build_zero_bubble_schedule(Schedule s, int p, int m, const StageOpTimes& times) {
  const Feasibility f = check_pipeline_schedule(s, p, m, 1);
  TRAINPLAN_CHECK(f.ok, f.reason);
  TRAINPLAN_CHECK(zero_bubble(s), std::string(to_string(s)) + " is not a zero-bubble schedule");
  const OpDurations d = durations_of(times, static_cast<size_t>(p));
  const double limit = zero_bubble_activation_limit(s, p);
  ZbResult best;
  bool have = false;
  for (bool no_bubble_before_first_b : {false, true}) {
    for (bool prioritize_b : {true, false}) {
      for (bool fill_short_gaps : {true, false}) {
        ZbResult r = round_based_zero_bubble(p, m, limit, times, ZbKnobs{no_bubble_before_first_b, prioritize_b,
                                                                          fill_short_gaps});
        // Judge by the executed schedule (what the step will take).
        r.makespan = execute(r.schedule, 1, d).makespan;
        if (!have || r.makespan < best.makespan - 1e-9 * best.makespan) {
          best = std::move(r);
          have = true;
        }
      }
    }
  }
  return best.schedule;
}

StageOpTimes zero_bubble_planning_times(const StageOpTimes& measured) {
  TRAINPLAN_CHECK(!measured.forward.empty() && measured.backward_input.size() == measured.forward.size() &&
                      measured.backward_weight.size() == measured.forward.size(),
                  "stage op times must be given for every rank");
  StageOpTimes t = measured;
  for (std::vector<double>* v : {&t.forward, &t.backward_input, &t.backward_weight}) {
    std::vector<double> sorted = *v;
    std::sort(sorted.begin(), sorted.end());
    v->assign(v->size(), sorted[sorted.size() / 2]);
  }
  return t;
}

double peak_activation_units(const std::vector<PipeOp>& ops, double weight_memory_share) {
  bool split = false;
  for (const PipeOp& op : ops) split = split || op.kind == PipeOp::Kind::kWeight;
  double live = 0, peak = 0;
  for (const PipeOp& op : ops) {
    if (op.kind == PipeOp::Kind::kForward) live += 1.0;
    if (op.kind == PipeOp::Kind::kBackward) live -= split ? 1.0 - weight_memory_share : 1.0;
    if (op.kind == PipeOp::Kind::kWeight) live -= weight_memory_share;
    peak = std::max(peak, live);
  }
  return peak;
}

double peak_activation_bytes(const std::vector<PipeOp>& ops, const std::vector<double>& held,
                             const std::vector<double>& kept) {
  TRAINPLAN_CHECK(held.size() == kept.size(), "held and kept bytes must be given per chunk");
  bool split = false;
  for (const PipeOp& op : ops) split = split || op.kind == PipeOp::Kind::kWeight;
  double live = 0, peak = 0;
  for (const PipeOp& op : ops) {
    TRAINPLAN_CHECK(op.chunk >= 0 && static_cast<size_t>(op.chunk) < held.size(), op_text(op) + " has no chunk bytes");
    const size_t c = static_cast<size_t>(op.chunk);
    if (op.kind == PipeOp::Kind::kForward) live += held[c];
    if (op.kind == PipeOp::Kind::kBackward) live += split ? kept[c] - held[c] : -held[c];
    if (op.kind == PipeOp::Kind::kWeight) live -= kept[c];
    peak = std::max(peak, live);
  }
  return peak;
}

UnitTimeRun simulate_pipeline(const PipelineSchedule& schedule, const StageOpTimes& times) {
  return execute(schedule, 1, durations_of(times, schedule.size()));
}

double bubble_rate(const PipelineSchedule& schedule, const StageOpTimes& times) {
  const UnitTimeRun run = simulate_pipeline(schedule, times);
  double busiest = 0, longest = 0;
  for (size_t r = 0; r < schedule.size(); ++r) {
    double busy = 0, end = 0;
    const bool split = std::any_of(schedule[r].begin(), schedule[r].end(),
                                   [](const PipeOp& op) { return op.kind == PipeOp::Kind::kWeight; });
    for (size_t i = 0; i < schedule[r].size(); ++i) {
      const PipeOp& op = schedule[r][i];
      double length = 0;
      if (op.kind == PipeOp::Kind::kForward) length = times.forward[r];
      if (op.kind == PipeOp::Kind::kBackward) length = times.backward_input[r] + (split ? 0 : times.backward_weight[r]);
      if (op.kind == PipeOp::Kind::kWeight) length = times.backward_weight[r];
      busy += length;
      end = std::max(end, run.start[r][i] + length);
    }
    busiest = std::max(busiest, busy);
    if (!schedule[r].empty()) longest = std::max(longest, end - run.start[r][0]);
  }
  return longest > 0 ? (longest - busiest) / longest : 0.0;
}

UnitTimeRun simulate_pipeline_unit_time(const PipelineSchedule& schedule, int v, double forward_time,
                                        double backward_time) {
  TRAINPLAN_CHECK(forward_time > 0 && backward_time > 0, "op times must be positive");
  const size_t p = schedule.size();
  bool split = false;
  for (const auto& ops : schedule) {
    for (const PipeOp& op : ops) split = split || op.kind == PipeOp::Kind::kWeight;
  }
  // Every pass (F, B, and W where the schedule has them) takes its time.
  OpDurations d{std::vector<double>(p, forward_time), std::vector<double>(p, backward_time),
                std::vector<double>(p, split ? backward_time : 0.0), 0.0};
  return execute(schedule, v, per_stage(std::move(d), v));
}

UnitTimeRun simulate_pipeline_stages(const PipelineSchedule& schedule, int v, const std::vector<double>& forward,
                                     const std::vector<double>& backward, Schedule kind) {
  const size_t stages = schedule.size() * static_cast<size_t>(std::max(v, 1));
  TRAINPLAN_CHECK(forward.size() == stages && backward.size() == stages,
                  "op times must be given for each of the " + std::to_string(stages) + " virtual stages");
  return execute(schedule, v, OpDurations{forward, backward, std::vector<double>(stages, 0.0), 0.0}, kind);
}

UnitTimeRun simulate_pipeline_virtual(const PipelineSchedule& schedule, Schedule kind, int v,
                                      const StageOpTimes& times) {
  const size_t stages = schedule.size() * static_cast<size_t>(std::max(v, 1));
  return execute(schedule, v, durations_of(times, stages), kind);
}

}  // namespace trainplan
