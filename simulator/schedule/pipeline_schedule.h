// Pipeline-parallel schedules: for each of the p pipeline ranks, the ordered
// forward (F) and backward (B) passes it runs in one training step of m
// microbatches, as Megatron-LM's schedules.py orders them; and Zero Bubble's
// schedules (Qi et al., ICLR 2024, arXiv 2401.10241), whose backward is split
// into the input-gradient pass B and the weight-gradient pass W.
//
// Model layout: the model is cut into p*v virtual stages; rank r holds chunks
// 0..v-1, and chunk c of rank r is global stage c*p + r (Megatron's virtual
// pipeline).  Without interleaving v == 1 and stage == rank.
//
// Invariants of every schedule returned by build_pipeline_schedule:
//  - each rank runs F and B of every (microbatch, chunk) pair exactly once,
//    and F before B; zero-bubble schedules also run its W once, after its B
//    (W has no cross-rank dependency: it only needs the rank's own B);
//  - the ops honour the data dependencies F(s, mb) after F(s-1, mb) and
//    B(s, mb) after B(s+1, mb) and F(last stage, mb) without deadlock when
//    each rank executes its list in order.
// Dependencies and timing belong to the simulator; simulate_pipeline_unit_time
// is a small reference executor for tests and cross-checks.
#ifndef TRAINPLAN_SIM_SCHEDULE_PIPELINE_SCHEDULE_H_
#define TRAINPLAN_SIM_SCHEDULE_PIPELINE_SCHEDULE_H_

#include <string>
#include <vector>

#include "simulator/spec/plan.h"  // Schedule, to_string(Schedule)

namespace trainplan {

struct PipeOp {
  // kBackward: the whole backward, or only the input gradient where the
  // schedule has kWeight passes (zero bubble).
  enum class Kind { kForward, kBackward, kWeight };
  Kind kind = Kind::kForward;
  int microbatch = 0;  // 0..m-1
  int chunk = 0;       // virtual stage index on this rank, 0..v-1
  // A forward and the backward that follows it run as one overlapped pair,
  // each one's expert-parallel all-to-alls under the other's compute; both F
  // and B carry it.  kDualPipeV: the full backward (B, then its W; PyTorch
  // OVERLAP_F_B); Megatron-Core's combined 1F1B (build_pipeline_schedule).
  bool overlapped = false;
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
//  - kGpipe, k1F1B, kNaive, kZb1p and kZb2p have one chunk per rank: v must
//    be 1;
//  - kZb1p, kZb2p, kZbv and kDualPipeV need p >= 2; kZbv and kDualPipeV
//    need v == 2, kDualPipeV m >= 2p;
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
//  kDualPipeV:   PyTorch's ScheduleDualPipeV order (v = 2, V placement,
//                m >= 2p): warm-up 2(p-r-1) F0, r+1 (F0 F1), p-r-1
//                (B1 W F1); steady m-2p+r+1 pairs [F0 + full B1]
//                [F1 + full B0] (the first pair of the last rank not
//                overlapped); p-r-1 (full B1, [F1 + full B0]); cool-down
//                r+1 (B1 B0) turning zero-bubble (B without W) half-way,
//                p-r-1 (W, B0), r+1 W.  A full backward is B then its W.
//  kZbv:         PyTorch's ScheduleZBVZeroBubble order (v = 2, V placement,
//                B and W passes): warm-up 2(p-r)-1 F0, r (F1 F0), p-r
//                (F1 B1 W1); steady (F0 B0 W0 F1 B1 W1); cool-down r (B0 B1),
//                p-r (B0 W0), then the pending W1s and W0s; built for
//                max(2p-1, m) micro-batches, those >= m dropped.
//  kInterleaved: over virtual microbatches k = 0..m*v-1, forward k runs chunk
//                (k mod p*v) / p on microbatch (k / (p*v))*p + k mod p and
//                backward k runs chunk v-1 minus that.  Warm-up is all m*v
//                forwards when m == p, else min(2(p-r-1) + (v-1)p, m*v); then
//                (F, B) pairs; then the remaining backwards.
//
// combined_1f1b: Megatron-Core's order under --overlap-moe-expert-parallel-comm
// (megatron/core/pipeline_parallel/combined_1f1b.py) on k1F1B or
// kInterleaved: each rank runs one more warm-up forward than above
// (schedules.py get_pp_rank_microbatches: "we schedule one extra micro-batch
// forward step before the 1f1b stages ... to ensure the forward and backward
// computations are independent"), then every steady-state (F, B) pair runs
// as one merged step, both flagged `overlapped`; with p = 1 that is F0 alone,
// (F_i, B_i-1) pairs, B_m-1 alone (combined_1f1b_schedule_for_no_pipelining).
// REQUIRES: check_pipeline_schedule(s, p, m, v).ok and s is not kZb1p or
// kZb2p; combined_1f1b only with k1F1B or kInterleaved (TRAINPLAN_CHECK
// aborts).
PipelineSchedule build_pipeline_schedule(Schedule s, int p, int m, int v, bool combined_1f1b = false);

// What a zero-bubble schedule is built from: per rank, the durations of its
// F, B (input gradient) and W (weight gradient) passes of one micro-batch and
// the time a pipeline transfer takes (any consistent unit); and the memory a
// micro-batch holds on each rank from F to B (M_B) and from B to W (M_W: the
// linear layers' inputs and output gradients, about 32/34 of M_B for a GPT
// layer; Qi et al. Table 1), in any consistent unit.  Without per-rank
// figures every rank has M_B = 1 and M_W = weight_memory_share.
struct StageOpTimes {
  std::vector<double> forward, backward_input, backward_weight;  // size p, each > 0
  double p2p = 0;                                                 // >= 0
  double weight_memory_share = 1.0;                               // M_W / M_B, >= 0
  std::vector<double> activation, weight_kept;  // M_B (> 0) and M_W (>= 0) per rank, or both empty
};

// Zero Bubble's automatic schedule (Qi et al. Sec. 3.1): ranks run as soon as
// their inputs arrive; B passes take priority, F passes fill the warm-up
// while the rank's activation memory stays within the limit (kZb1p: p
// micro-batches, 1F1B's peak; kZb2p: 2p; zero_bubble_activation_limit), and W passes fill the gaps that are
// long enough for one and free memory when the limit blocks an F; once F and
// B are used up the remaining Ws run.  Memory: F +M_B, B +(M_W - M_B), W
// -M_W of the rank, against limit x max(M_B of ranks 0 and 1) on every rank
// (the authors' runtime: mem_limit = N * max(f_mem[:2])).  As in the paper, a few
// binary heuristics (whether to start an F that would delay an arriving B,
// whether a W may start in a gap shorter than itself) are searched and the
// schedule with the smallest makespan (ties: the first) is returned.
// REQUIRES: check_pipeline_schedule(s, p, m, 1).ok, zero_bubble(s) and
// times as documented (TRAINPLAN_CHECK aborts).
PipelineSchedule build_zero_bubble_schedule(Schedule s, int p, int m, const StageOpTimes& times);

// The times Zero Bubble's runtime plans with: every rank's F, B and W set to
// the median over the ranks (sorted[p / 2]), the p2p time and memory as
// given.  The authors' runtime profiles each stage but orders the passes for
// uniform stages ("Using uniform f/b/w timing for now", scheduler() in
// sail-sg/zero-bubble-pipeline-parallelism megatron/core/pipeline_parallel/
// zerobubble/runtime.py); the order then runs on the real, uneven stages
// (first and last with the embedding and the loss).
// REQUIRES: the three time vectors have the same size > 0.
StageOpTimes zero_bubble_planning_times(const StageOpTimes& measured);

// The peak activation memory of `ops` in units of M_B, counting F +1, B
// -(1 - w) and W -w when the ops contain W passes, else B -1.
double peak_activation_units(const std::vector<PipeOp>& ops, double weight_memory_share);

// The peak activation bytes of a rank running `ops`: the F of a chunk-c
// micro-batch adds held[c] (M_B); where the ops have W passes its B swaps
// that for kept[c] (M_W) and its W frees kept[c], else its B frees held[c].
// REQUIRES: held and kept sized to the rank's chunks.
double peak_activation_bytes(const std::vector<PipeOp>& ops, const std::vector<double>& held,
                             const std::vector<double>& kept);

// Returns the global virtual stage of `chunk` on `rank`: chunk*p + rank, or
// the V placement of kZbv (virtual_stage in simulator/spec/plan.h).
// REQUIRES: 0 <= rank < p, chunk >= 0.
int model_chunk_stage(int rank, int chunk, int p, Schedule s = Schedule::k1F1B);

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

// Runs `schedule` with per-rank op durations `times` (kBackward takes
// times.backward_input where the schedule has W passes, else
// backward_input + backward_weight) and times.p2p between adjacent stages,
// each rank executing its list in order as soon as it is free and its
// dependencies are done.
// REQUIRES: as simulate_pipeline_unit_time, times sized to the ranks, v == 1.
UnitTimeRun simulate_pipeline(const PipelineSchedule& schedule, const StageOpTimes& times);

// The bubble rate of Qi et al. (Sec. 5.3, Table 5): (cost - busiest rank's
// work) / cost, where cost is the longest rank span (first pass start to
// last pass end) of `schedule` executed under `times`.  For 1F1B that is
// rank 0's span, the makespan: (p - 1)/(m + p - 1) with uniform times.
double bubble_rate(const PipelineSchedule& schedule, const StageOpTimes& times);

// Runs `schedule` with every F taking forward_time and every B taking
// backward_time (per chunk), zero communication, each rank executing its list
// in order and starting an op as soon as the rank is free and its
// dependencies are done:
//   F(s, mb) after F(s-1, mb);  B(s, mb) after F(s, mb) and B(s+1, mb),
// with s = model_chunk_stage(rank, chunk, p) and p = schedule.size().
// W passes (zero bubble) take backward_time too and only follow their B.
// Returns the start times and the makespan.
// REQUIRES: v >= 1, times > 0, every (stage, microbatch) has exactly one F
// and one B (and one W or none), microbatches are 0..m-1 with m = 1 + the
// largest seen, and the schedule is deadlock-free (TRAINPLAN_CHECK aborts
// naming a stuck rank).
UnitTimeRun simulate_pipeline_unit_time(const PipelineSchedule& schedule, int v,
                                        double forward_time, double backward_time);

// As simulate_pipeline_unit_time without W passes, with the F and B of each
// virtual stage s = chunk*p + rank taking forward[s] and backward[s] (sizes
// p*v, each > 0).  The makespan only grows with any op's duration (fixed
// per-rank order, as-soon-as-possible starts).
// REQUIRES: as simulate_pipeline_unit_time; the schedule has no W passes.
UnitTimeRun simulate_pipeline_stages(const PipelineSchedule& schedule, int v, const std::vector<double>& forward,
                                     const std::vector<double>& backward, Schedule kind = Schedule::k1F1B);

// As simulate_pipeline with `times` given per virtual stage (size p*v, index
// model_chunk_stage(rank, chunk, p, kind)), for schedules of v chunks per
// rank, W passes included (kZbv).
UnitTimeRun simulate_pipeline_virtual(const PipelineSchedule& schedule, Schedule kind, int v,
                                      const StageOpTimes& times);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_SCHEDULE_PIPELINE_SCHEDULE_H_
