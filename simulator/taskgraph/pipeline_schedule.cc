#include "simulator/taskgraph/pipeline_schedule.h"

#include <algorithm>
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
  return std::string(op.kind == PipeOp::Kind::kForward ? "F" : "B") + "(mb " +
         std::to_string(op.microbatch) + ", chunk " + std::to_string(op.chunk) + ")";
}

// megatron/core/pipeline_parallel/schedules.py,
// forward_backward_pipelining_without_interleaving.
std::vector<PipeOp> one_f_one_b_rank(int p, int m, int rank) {
  const int warmup = std::min(p - rank - 1, m);
  const int remaining = m - warmup;
  std::vector<PipeOp> ops;
  for (int i = 0; i < warmup; ++i) ops.push_back(forward(i, 0));
  for (int i = 0; i < remaining; ++i) {
    ops.push_back(forward(warmup + i, 0));
    ops.push_back(backward(i, 0));
  }
  for (int i = remaining; i < m; ++i) ops.push_back(backward(i, 0));
  return ops;
}

// megatron/schedules.py forward_backward_pipelining_with_interleaving
// (get_model_chunk_id; the microbatch of a chunk is its FIFO position in
// input_tensors[chunk], which is (k / (p*v))*p + k % p when m % p == 0).
std::vector<PipeOp> interleaved_rank(int p, int m, int v, int rank) {
  const int total = m * v;
  const int group = p * v;
  int warmup = total;  // m == p: all forwards, then all backwards
  if (m != p) warmup = std::min((p - rank - 1) * 2 + (v - 1) * p, total);
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
  }
  for (int k = remaining; k < total; ++k) ops.push_back(bwd(k));
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

PipelineSchedule build_pipeline_schedule(Schedule s, int p, int m, int v) {
  const Feasibility f = check_pipeline_schedule(s, p, m, v);
  TRAINPLAN_CHECK(f.ok, f.reason);
  PipelineSchedule schedule(static_cast<size_t>(p));
  for (int rank = 0; rank < p; ++rank) {
    std::vector<PipeOp>& ops = schedule[static_cast<size_t>(rank)];
    switch (s) {
      case Schedule::kGpipe:
        for (int i = 0; i < m; ++i) ops.push_back(forward(i, 0));
        for (int i = m - 1; i >= 0; --i) ops.push_back(backward(i, 0));
        break;
      case Schedule::k1F1B:
        ops = one_f_one_b_rank(p, m, rank);
        break;
      case Schedule::kInterleaved:
        ops = interleaved_rank(p, m, v, rank);
        break;
      case Schedule::kNaive:
        for (int i = 0; i < m; ++i) {
          ops.push_back(forward(i, 0));
          ops.push_back(backward(i, 0));
        }
        break;
    }
  }
  return schedule;
}

int model_chunk_stage(int rank, int chunk, int p) {
  TRAINPLAN_CHECK(rank >= 0 && rank < p && chunk >= 0,
                  "rank " + std::to_string(rank) + ", chunk " + std::to_string(chunk) +
                      " out of range for p = " + std::to_string(p));
  return chunk * p + rank;
}

int peak_microbatches_in_flight(const std::vector<PipeOp>& ops) {
  std::set<std::pair<int, int>> live;  // (microbatch, chunk)
  size_t peak = 0;
  for (const PipeOp& op : ops) {
    const std::pair<int, int> key{op.microbatch, op.chunk};
    if (op.kind == PipeOp::Kind::kForward) {
      TRAINPLAN_CHECK(live.insert(key).second, op_text(op) + " while its activations are live");
      peak = std::max(peak, live.size());
    } else {
      TRAINPLAN_CHECK(live.erase(key) == 1, op_text(op) + " without a preceding forward");
    }
  }
  return static_cast<int>(peak);
}

UnitTimeRun simulate_pipeline_unit_time(const PipelineSchedule& schedule, int v,
                                        double forward_time, double backward_time) {
  const int p = static_cast<int>(schedule.size());
  TRAINPLAN_CHECK(p >= 1 && v >= 1, "need p >= 1 and v >= 1");
  TRAINPLAN_CHECK(forward_time > 0 && backward_time > 0, "op times must be positive");
  int m = 0;
  for (int r = 0; r < p; ++r) {
    for (const PipeOp& op : schedule[static_cast<size_t>(r)]) {
      TRAINPLAN_CHECK(op.microbatch >= 0 && op.chunk >= 0 && op.chunk < v,
                      "rank " + std::to_string(r) + ": " + op_text(op) + " out of range");
      m = std::max(m, op.microbatch + 1);
    }
  }
  const int stages = p * v;
  // done[kind][stage * m + microbatch]: finish time, or -1 while not run.
  std::vector<double> done[2] = {std::vector<double>(static_cast<size_t>(stages * m), -1.0),
                                 std::vector<double>(static_cast<size_t>(stages * m), -1.0)};
  auto at = [&](int kind, int stage, int mb) -> double& {
    return done[kind][static_cast<size_t>(stage * m + mb)];
  };

  UnitTimeRun run;
  run.start.resize(static_cast<size_t>(p));
  std::vector<size_t> next(static_cast<size_t>(p), 0);
  std::vector<double> free_at(static_cast<size_t>(p), 0.0);
  size_t remaining = 0;
  for (const auto& ops : schedule) remaining += ops.size();
  TRAINPLAN_CHECK(remaining == static_cast<size_t>(2 * stages * m),
                  "schedule has " + std::to_string(remaining) + " ops; expected 2*stages*m = " +
                      std::to_string(2 * stages * m));

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
        const int s = model_chunk_stage(r, op.chunk, p);
        const int mb = op.microbatch;
        double ready = free_at[static_cast<size_t>(r)];
        bool blocked = false;
        auto need = [&](int kind, int stage) {
          const double t = at(kind, stage, mb);
          if (t < 0) blocked = true;
          ready = std::max(ready, t);
        };
        const bool is_forward = op.kind == PipeOp::Kind::kForward;
        if (is_forward) {
          if (s > 0) need(0, s - 1);
        } else {
          need(0, s);
          if (s + 1 < stages) need(1, s + 1);
        }
        if (blocked) break;
        const int kind = is_forward ? 0 : 1;
        TRAINPLAN_CHECK(at(kind, s, mb) < 0,
                        "rank " + std::to_string(r) + " runs " + op_text(op) + " twice");
        const double finish = ready + (is_forward ? forward_time : backward_time);
        at(kind, s, mb) = finish;
        free_at[static_cast<size_t>(r)] = finish;
        run.start[static_cast<size_t>(r)].push_back(ready);
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

}  // namespace trainplan
