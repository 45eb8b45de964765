// Pipeline-parallel schedules: for each of the p pipeline ranks, the ordered
// forward (F) and backward (B) passes it runs in one training step of m
// microbatches, as Megatron-LM's schedules.py orders them.
//
// Model layout: the model is cut into p*v virtual stages; rank r holds chunks
// 0..v-1, and chunk c of rank r is global stage c*p + r (Megatron's virtual
// pipeline).  Without interleaving v == 1 and stage == rank.
//
// Invariants of every schedule returned by build_pipeline_schedule:
//  - each rank runs F and B of every (microbatch, chunk) pair exactly once,
//    and F before B;
//  - the ops honour the data dependencies F(s, mb) after F(s-1, mb) and
//    B(s, mb) after B(s+1, mb) and F(last stage, mb) without deadlock when
//    each rank executes its list in order.
// Dependencies and timing belong to the simulator; simulate_pipeline_unit_time
// is a small reference executor for tests and cross-checks.
#ifndef TRAINPLAN_SIM_TASKGRAPH_PIPELINE_SCHEDULE_H_
#define TRAINPLAN_SIM_TASKGRAPH_PIPELINE_SCHEDULE_H_

#include <string>
#include <vector>

#include "simulator/spec/plan.h"  // Schedule, to_string(Schedule)

namespace trainplan {

struct PipeOp {
  enum class Kind { kForward, kBackward };
  Kind kind = Kind::kForward;
  int microbatch = 0;  // 0..m-1
  int chunk = 0;       // virtual stage index on this rank, 0..v-1
};
bool operator==(const PipeOp& a, const PipeOp& b);

// Index r holds rank r's ops in execution order.
using PipelineSchedule = std::vector<std::vector<PipeOp>>;

// An expected "no" (an infeasible configuration), not an error.
struct Feasibility {
  bool ok = true;
  std::string reason;  // empty when ok
};

// Returns ok, or why (s, p, m, v) is not a schedule Megatron would run:
//  - p, m, v must be >= 1;
//  - kGpipe, k1F1B and kNaive have one chunk per rank: v must be 1;
//  - kInterleaved needs p >= 2 (Megatron parallel_state: "pipeline-model-
//    parallel size should be greater than 1 with interleaved schedule"; older
//    versions required p > 2) and m % p == 0 (megatron/schedules.py
//    get_forward_backward_func, "number of microbatches is not divisible by
//    pipeline-parallel size when using interleaved schedule"; newer
//    Megatron-core lifts this, we follow the older rule).
Feasibility check_pipeline_schedule(Schedule s, int p, int m, int v);

// Returns the per-rank op lists (size p) of one training step.
//  kNaive:       F0 B0 F1 B1 ... F(m-1) B(m-1) on every rank; the data
//                dependencies then keep one rank busy at a time.
//  kGpipe:       F0..F(m-1), then B(m-1)..B0.  torchgpipe's fence() makes
//                micro-batch j depend on j-1 through a Fork/Join phony, so
//                autograd runs B(j) before B(j-1) (kakaobrain/torchgpipe
//                pipeline.py fence()/depend(); arXiv 2004.09910 §3.2.1).
//  k1F1B:        warm-up w = min(p-r-1, m) forwards, then m-w (F, B) pairs,
//                then w backwards.
//  kInterleaved: over virtual microbatches k = 0..m*v-1, forward k runs chunk
//                (k mod p*v) / p on microbatch (k / (p*v))*p + k mod p and
//                backward k runs chunk v-1 minus that.  Warm-up is all m*v
//                forwards when m == p, else min(2(p-r-1) + (v-1)p, m*v); then
//                (F, B) pairs; then the remaining backwards.
// REQUIRES: check_pipeline_schedule(s, p, m, v).ok (TRAINPLAN_CHECK aborts).
PipelineSchedule build_pipeline_schedule(Schedule s, int p, int m, int v);

// Returns the global virtual stage of `chunk` on `rank`: chunk*p + rank.
// REQUIRES: 0 <= rank < p, chunk >= 0.
int model_chunk_stage(int rank, int chunk, int p);

// Returns the largest number of (microbatch, chunk) activations one rank holds
// at once: walking `ops`, +1 at each F and -1 at its B.  Megatron values:
// 1F1B rank r: min(p-r, m); GPipe: m; interleaved: m*v if m == p, else
// min(2(p-r-1) + (v-1)p + 1, m*v) (p*v + p - 1 on rank 0 for large m).
// REQUIRES: every B follows its F, and no (microbatch, chunk) is live twice.
int peak_microbatches_in_flight(const std::vector<PipeOp>& ops);

struct UnitTimeRun {
  double makespan = 0;                     // time the last op finishes
  std::vector<std::vector<double>> start;  // start[r][i] of schedule[r][i]
};

// Runs `schedule` with every F taking forward_time and every B taking
// backward_time (per chunk), zero communication, each rank executing its list
// in order and starting an op as soon as the rank is free and its
// dependencies are done:
//   F(s, mb) after F(s-1, mb);  B(s, mb) after F(s, mb) and B(s+1, mb),
// with s = model_chunk_stage(rank, chunk, p) and p = schedule.size().
// Returns the start times and the makespan.
// REQUIRES: v >= 1, times > 0, every (stage, microbatch) has exactly one F
// and one B, microbatches are 0..m-1 with m = 1 + the largest seen, and the
// schedule is deadlock-free (TRAINPLAN_CHECK aborts naming a stuck rank).
UnitTimeRun simulate_pipeline_unit_time(const PipelineSchedule& schedule, int v,
                                        double forward_time, double backward_time);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_TASKGRAPH_PIPELINE_SCHEDULE_H_
