// The plan search behind `trainplan recommend`.
//
// 1. Enumerate every plan of the space (tp, pp, dp, cp, vp, ZeRO stage and
//    hybrid shard group, mbs, recompute, sequence parallel, schedule,
//    offload; naive model parallel, GPipe, zero-bubble and async DP when
//    asked for).
// 2. Reject invalid plans with the framework rules (resolve_plan), and plans
//    that do not fit with the closed-form memory model.
// 3. Bound: step_time_lower_bound() never exceeds the simulated step time.
//    Plans reach the front of a min-heap by it; there the tighter
//    pipeline_step_lower_bound() (the plan's own schedule at compute times)
//    re-queues them, and they are simulated in that order.  Once lowered, a
//    plan whose critical path without contention already exceeds the K-th
//    best simulated score is not run.  The search stops once the smallest
//    bound left is slower than the K-th best: the top K is exact (branch and
//    bound), not a heuristic.  Plans that lower to the same step run the
//    engine once; long steps use simulate_steady_state.  Batches run on the
//    hardware threads and are taken as one at a time would take them, so the
//    result does not depend on the thread count.
// 4. Rank by tokens/s (equivalently step time; gbs is fixed).  Plans with
//    exactly the same score are one entry of the top K: the simplest is
//    listed, the others as its ties.  Deterministic.
// 5. If nothing fits and offload was not asked for, the search repeats with
//    offload and says so (SearchResult::widened).
// Under faults (options.faults.any(), simulator/faults/faults.h) the score is
// the expected time to train (closed form of the failure model, with the
// straggler tax of every simulated plan), or the straggled step time when no
// --train-tokens is given.  Its bound is the step-time bound times
// steps / the best goodput any checkpoint interval gives that world (the
// goodput does not depend on the step time), so the top K stays exact as
// long as the straggler tax is >= 0 (true unless a jitter distribution makes
// GPUs faster than nominal).  With failures, worlds of 3/4 and 1/2 of the
// nodes are searched too: fewer GPUs fail less often and can train sooner.
#ifndef TRAINPLAN_PLANNER_SEARCH_SEARCH_H_
#define TRAINPLAN_PLANNER_SEARCH_SEARCH_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "simulator/faults/convergence.h"
#include "simulator/faults/faults.h"
#include "simulator/memory/memory_model.h"
#include "simulator/report/step_report.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

struct SearchOptions {
  int64_t gbs = 0;           // global batch in sequences; REQUIRED > 0
  int64_t seq = 0;           // 0: the model's
  int top_k = 5;
  Precision precision = Precision::kBf16;
  Fp8Recipe fp8_recipe = Fp8Recipe::kNone;  // FP8 GEMMs in every plan (set_precision "fp8")
  bool fp8_recipe_given = false;            // false: the GPU's default recipe
  int mtp_layers = 0;        // multi-token prediction depths in every plan (Plan::mtp_layers)
  // Adam's moments in every plan with the distributed optimizer (zero >= 1,
  // no offload: resolve_plan's rules for bf16); the others keep fp32.
  MomentDtype moment_dtype = MomentDtype::kFp32;
  bool compile = false;      // torch.compile every plan (Plan::compile; torchtitan and pytorch)
  // The MoE token dispatcher of every plan whose tokens cross GPUs
  // (ep * etp > 1; the others keep alltoall, which they never run).
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  // Whether the user named the dispatcher; if not, a Megatron-Core or
  // torchtitan search also tries the deduplicating one (DeepEP, HybridEP on
  // an NVLink domain of more than 8 GPUs) for every layout that fits
  // (search.cc flex_dispatcher_to_try).
  bool moe_dispatcher_given = false;
  // The fused attention kernel of every plan (Plan::attention_kernel;
  // kDefault: the framework's own).
  AttentionKernel attention_kernel = AttentionKernel::kDefault;
  bool gpipe = false;        // also consider GPipe
  bool naive = false;        // also consider naive model parallel
  bool zero_bubble = false;  // also consider the ZB-1p and ZB-2p schedules
  // Simulate every plan as this framework runs it and keep only the plans it
  // can run (generic: trainplan's framework-neutral model, every plan).
  Framework framework = Framework::kGeneric;
  bool async_dp = false;     // also consider async DP (parameter servers)
  // Async plans are ranked by time to a target loss under this model of
  // stale gradients (faults/convergence.h): their score is divided by the
  // per-sample efficiency, and a plan whose staleness diverges is rejected.
  ConvergenceSpec convergence;
  bool offload = false;      // also consider optimizer/parameter offload
  FaultConfig faults;        // none by default: rank by step time
  // Optional: called now and then with the phase ("evaluating": validity,
  // memory and bound of every plan, `total` the plans proposed so far, which
  // grows as the plans that fit propose their variants and larger
  // micro-batches; "simulating": candidates in bound order, `total` the most
  // that could be simulated).
  std::function<void(const char* phase, int64_t done, int64_t total)> progress;
};

struct RankedPlan {
  Layout layout;
  StepReport report;
  double lower_bound_s = 0;
  std::string limit;         // what limits it, one line
  std::string family;
  bool has_faults = false;   // options.faults.any()
  FaultReport faults;
  double score_s = 0;        // what it is ranked by: step time, or expected time to train
                             // (async: divided by convergence.sample_efficiency)
  bool has_convergence = false;  // an async plan
  AsyncConvergence convergence;
  // Plans with exactly the same score, simpler first; this plan is the
  // simplest of its group (fewest features, lowest ZeRO, cp 1).
  std::vector<Layout> ties;
  // A plan whose stages the search balanced by their work
  // (Plan::stage_layers set): the same plan at the default split
  // (balance_stage_layers), whether that fits, and its simulated step time
  // (0 when it does not fit or is not valid).
  std::vector<int> default_split;
  bool default_split_fits = false;
  double default_split_step_s = 0;
};

struct FamilyVerdict {
  std::string key;           // plan_family() of its plans (the same at every cluster size)
  std::string family;
  std::string verdict;       // e.g. "needs 142.0 GiB per GPU, has 80.0"
  // The family's best plan, when one fits (its simulated step).
  bool fits = false;
  double peak_gib = 0;       // its peak memory per GPU (the nearest miss when it does not fit)
  double score_s = 0;        // fits only: what it is ranked by (RankedPlan::score_s)
  StepReport report;         // fits only
};

// The best plan of one world size (under failures, where fewer GPUs fail
// less often): exact, by branch and bound within that world.
struct WorldBest {
  int gpus = 0;
  RankedPlan best;
};

struct SearchResult {
  int64_t evaluated = 0;     // plans enumerated
  int64_t valid = 0;         // pass the framework rules
  int64_t feasible = 0;      // valid and fit in memory
  int64_t simulated = 0;
  double elapsed_s = 0;
  double evaluate_s = 0;     // enumeration, validity, memory and bound of every plan (before simulation)
  std::vector<RankedPlan> plans;               // best first, at most top_k
  std::map<std::string, int64_t> rejected;     // reason (numbers as N: rule_of) -> count
  // A reason of that kind verbatim (the first met), for reasons with numbers.
  std::map<std::string, std::string> rejected_example;
  std::vector<FamilyVerdict> families;         // why the other families lose
  std::vector<WorldBest> worlds;               // with failures: best per world size, most GPUs first
  double min_peak_bytes = 0;                   // nearest miss when nothing fits
  std::vector<std::string> advice;             // what would make it fit
  // Non-empty when the search widened itself (e.g. to offload because
  // nothing fits without it): says what was added.
  std::string widened;
};

// Throws InputError if gpus or options are out of range.
SearchResult search_plans(const ModelSpec& model, const ClusterSpec& cluster, int gpus, const SearchOptions& options);

// The family a plan is grouped in for "why the others lose": "plain DDP",
// "ZeRO-1/2", "ZeRO-3 / FSDP without TP", "FSDP hybrid shard", "TP", "PP",
// "TP + PP", "single GPU", "naive model parallel", "async DP ...".
std::string plan_family(const Plan& plan);

// What a plan is, named by the dimensions it really splits over: "TP + DP",
// "PP" (dp 1), "3D (TP + PP + DP)", "TP + CP + DP, ZeRO-3",
// "ZeRO-1/2 (CP + DP)".  Never names a dimension of degree 1.
std::string plan_label(const Plan& plan);

// The rule a reason states: its numbers become N so that plans breaking one
// rule count together ("tp=3 does not divide heads=32" -> "tp=N does not
// divide heads=N"); a number glued to a letter before it is part of a name
// ("rtx4090-pcie", "A100") and is kept.
std::string rule_of(const std::string& reason);

// The token dispatcher to search a fitting MoE layout with too, where the
// user named none (o.moe_dispatcher_given false) in a Megatron-Core or
// torchtitan search: the deduplicating one (DeepEP; HybridEP on an NVLink
// domain of more than 8 GPUs, DeepEP's NUM_MAX_NVL_PEERS) for a layout whose
// expert group (ep x etp ranks) spans NVLink domains -- where a token goes
// to another node once instead of once per expert there (DeepSeek-V3 report
// Sec. 3.2.2), the NIC traffic the deduplication saves -- and that runs the
// all-to-all one, has no stage split and no graphs (its variants are
// searched from the plan without them).  Inside one domain the search keeps
// the all-to-all dispatcher (every fitting MoE layout again would double a
// GB200 search) and recommend says what the flex one would do for its best
// plan.  kAllToAll: none.  Its kernels' SMs are charged where they
// run beside compute (StepCosts::ep_comm_sm_share); the framework's rules
// (resolve_plan, framework_refusal) drop the variants it does not run.
MoeDispatcher flex_dispatcher_to_try(const SearchOptions& o, const ModelSpec& m, const ClusterSpec& c,
                                     const Plan& plan);

// A lower bound of the peak memory per GPU of `plan` with micro-batches of
// `larger_mbs` sequences (> plan.mbs, the same global batch), from `mem`,
// plan's own memory report: the search does not try the larger micro-batch
// where this exceeds the GPU's memory.  A stage holds the activations of
// min(depth, m) micro-batches, m x mbs being its share of the global batch,
// and one micro-batch's grow with mbs, though less than in proportion where
// a part does not scale with its tokens (an MoE layer's busiest expert rank
// carries a larger share of a smaller micro-batch: expected_max_rank_load).
// So where the larger micro-batches still cover the schedule's deepest
// warm-up (pp under 1F1B and ZB-1p, 2 x pp under ZB-2p, 2 x pp x the chunks
// per rank under the interleaved and V schedules; never under GPipe, which
// holds every micro-batch) the larger plan holds at least as much: the bound
// is plan's peak.  Elsewhere each stage holds at least mbs / larger_mbs of
// its activations (m / r micro-batches, each at least as large), and the
// allocator-level parts are taken as falling by as much: the peak stage's
// total less (1 - mbs / larger_mbs) of its activations and `other`.
// search_test.cc checks the bound against the memory model on a grid of
// plans.
// REQUIRES: mem is estimate_memory of plan's layout; larger_mbs > plan.mbs.
double larger_microbatch_peak_lower_bound(const Plan& plan, const MemoryReport& mem, int larger_mbs);

}  // namespace trainplan

#endif  // TRAINPLAN_PLANNER_SEARCH_SEARCH_H_
