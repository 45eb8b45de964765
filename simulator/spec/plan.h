// A parallel layout ("plan") and its validation against a model and cluster.
//
// The same field names are used by the CLI flags (--tp, --zero, ...) and by
// plan.json.  An impossible plan is an answer, not an error:
// resolve_plan() returns a Layout with feasible == false and the reasons
// (e.g. "tp=3 does not divide heads=32"), in the order the rules are checked.
#ifndef TRAINPLAN_SIM_SPEC_PLAN_H_
#define TRAINPLAN_SIM_SPEC_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"

namespace trainplan {

enum class Recompute { kNone, kSelective, kFull };
enum class Schedule { kGpipe, k1F1B, kInterleaved, kNaive };
enum class Precision { kBf16, kFp16, kFp32 };
enum class GradDtype { kBf16, kFp32 };
enum class Attention { kFlash, kNaive };
enum class DpMode { kSync, kAsync };
enum class Offload { kNone, kOptimizer, kParams };

const char* to_string(Recompute r);
const char* to_string(Schedule s);
const char* to_string(Precision p);
const char* to_string(GradDtype g);
const char* to_string(Attention a);
const char* to_string(DpMode m);
const char* to_string(Offload o);

// What the user asked for.  0 means "derive": dp = gpus/(tp*pp*cp),
// gbs = mbs*dp, seq = the model's seq_len, shard_group = dp*cp.
struct Plan {
  int tp = 1;
  int pp = 1;
  int dp = 0;
  int cp = 1;
  int vp = 1;                 // model chunks per pipeline rank (interleaved)
  int zero = 0;               // 0..3
  int shard_group = 0;        // hybrid shard: shard within groups of N ranks
  int64_t mbs = 1;
  int64_t gbs = 0;
  int64_t seq = 0;
  Recompute recompute = Recompute::kNone;
  bool sp = false;            // sequence parallel (with tp > 1)
  Schedule schedule = Schedule::k1F1B;
  bool schedule_given = false;  // false: interleaved when vp > 1, else 1F1B
  Precision precision = Precision::kBf16;
  GradDtype grad_dtype = GradDtype::kFp32;  // Megatron keeps fp32 main grads
  Attention attention = Attention::kFlash;
  DpMode dp_mode = DpMode::kSync;
  Offload offload = Offload::kNone;
  int ps_servers = 0;         // async DP: parameter servers (0 = one per node)
  std::vector<int> stage_layers;  // explicit transformer layers per stage
};

// A plan placed on a cluster of `nodes` nodes, with every derived value.
struct Layout {
  Plan plan;                  // with every 0 ("derive") resolved
  int nodes = 0;
  int gpus = 0;
  int64_t microbatches = 0;   // per pipeline per step: gbs / (mbs*dp)
  int shard_degree = 1;       // ranks one copy of sharded state is spread over
  std::vector<int> stage_layers;  // transformer layers per pipeline stage
  bool feasible = true;
  std::vector<std::string> reasons;  // why not, when !feasible
};

// The largest values a plan may give, the same for flags and plan.json
// (docs/input-limits.md): 2^24 GPUs (16.7M) and parallel degrees, 2^30
// sequences per global batch, 2^20 nodes.
constexpr int64_t kMaxGpus = 1 << 24;
constexpr int64_t kMaxDegree = 1 << 24;
constexpr int64_t kMaxGlobalBatch = 1 << 30;
constexpr int64_t kMaxNodes = 1 << 20;

// Resolves derived values and checks every rule (divisibility, GPU count,
// batch, schedule, ZeRO/offload combinations) for a job on `gpus` GPUs
// (whole nodes, or part of one node).  Never throws: a plan that cannot run
// comes back with feasible == false and the reasons.
// REQUIRES: check_gpu_count(cluster, gpus) passed.
Layout resolve_plan(const ModelSpec& model, const ClusterSpec& cluster, int gpus, const Plan& plan);

// Checks that `gpus` (from the flag or plan-file field named by `where` and
// `pointer`) is 1..kMaxGpus and whole nodes or part of one node; throws
// InputError("<where>: <pointer>: ...") otherwise.
void check_gpu_count(const ClusterSpec& cluster, int64_t gpus, const std::string& where, const std::string& pointer);

// GPUs of `nodes` whole nodes.  Throws InputError("--nodes: ...") unless
// 1 <= nodes <= kMaxNodes.
int gpus_of_nodes(const ClusterSpec& cluster, int64_t nodes);

// Transformer layers per stage.  layers % pp == 0: even split.  Otherwise the
// embedding and the loss each count as one layer on the first and last stage
// (Megatron's account_for_embedding/loss_in_pipeline_split; Llama 3 405B's
// 126 layers over 16 stages give 7, 8 x 14, 7), the remainder going to the
// middle stages first.  Returns an empty vector if some stage would get none.
std::vector<int> balance_stage_layers(int64_t layers, int pp);

// Bytes of one activation element, one weight and one gradient.
int activation_bytes(Precision p);
int weight_bytes(Precision p);
int grad_bytes(Precision p, GradDtype g);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_SPEC_PLAN_H_
