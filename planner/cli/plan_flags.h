// Command-line flags shared by the commands that take a plan: the model,
// the cluster and its size, and every plan field (DESIGN.md "plan").
//
// The flags are parsed into strings and numbers by CLI11, then turned into a
// Plan by to_job(), which validates each one and throws InputError
// "--flag: problem; allowed: ..." for bad values.
#ifndef TRAINPLAN_PLANNER_CLI_PLAN_FLAGS_H_
#define TRAINPLAN_PLANNER_CLI_PLAN_FLAGS_H_

#include <cstdint>
#include <string>

#include "planner/plan/plan_file.h"  // describe_plan
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace CLI {
class App;
}

namespace trainplan {

struct PlanFlags {
  std::string plan_file;      // --plan plan.json (replaces the other flags)
  std::string calibration;    // --calibration calibration.json (overlays the cluster)
  CLI::App* app = nullptr;    // to tell which flags were given
  std::string model;
  std::string cluster;
  static constexpr int64_t kUnset = INT64_MIN;
  int64_t nodes = kUnset;
  int64_t gpus = kUnset;
  int64_t tp = 1, pp = 1, dp = 0, cp = 1, vp = 1;
  int64_t zero = 0, shard_group = 0;
  int64_t mbs = 1, gbs = 0, seq = 0;
  std::string recompute = "none";
  std::string recompute_modules;  // comma-separated RecomputeModule names
  int64_t recompute_layers = 0;   // full recompute of the first N layers of each chunk (0: all)
  bool sp = false;
  std::string schedule;
  std::string precision = "bf16";
  std::string fp8_recipe;
  std::string grad_dtype;
  std::string moment_dtype;
  std::string attention = "flash";
  std::string dp_mode = "sync";
  std::string offload = "none";
  int64_t ps_servers = 0;
  std::string stage_layers;
  std::string pipeline_layout;  // Megatron-Core layout string (simulator/spec/pipeline_layout.h)
  std::string framework;
  bool fp8_param_gather = false;
  bool tp_comm_overlap = false;
  bool compile = false;
  bool ep_overlap = false;
  bool delay_wgrad = false;
  std::string moe_dispatcher = "alltoall";
  std::string cp_comm = "p2p";
  bool moe_pad_to_capacity = false;
  bool moe_router_fusion = false;
  bool moe_shared_expert_overlap = false;
  bool cross_entropy_fusion = false;
  std::string cuda_graph;
  int64_t mtp_layers = 0;
  int64_t ep = 1, etp = 0;
  double moe_imbalance = 0;
};

// Registers --plan, --model, --cluster, --nodes, --gpus and the plan flags on
// `app`.
void add_plan_flags(CLI::App* app, PlanFlags* flags);

// The index of `value` in `allowed`; throws InputError("<flag>: unknown
// value \"...\"; allowed: a, b, c") if it is not there.
size_t pick(const std::string& flag, const std::string& value, const std::vector<std::string>& allowed);

// Registers --precision and --fp8-recipe (every command that takes a plan
// or searches for one).
void add_precision_flags(CLI::App* app, std::string* precision, std::string* fp8_recipe);

// Sets plan->precision and its FP8 recipe from those flags (`fp8_recipe`
// null when --fp8-recipe was not given).  Throws InputError for an unknown
// name, or a recipe without --precision fp8.
void set_precision_flags(const std::string& precision, const std::string* fp8_recipe, Plan* plan);

// A validated job: model, cluster, GPU count and plan as given.
struct Job {
  ModelSpec model;
  ClusterSpec cluster;
  std::string model_ref;    // the model as named (--model or the plan file's "model"): name or path
  std::string cluster_ref;  // the cluster likewise
  int gpus = 0;
  Plan plan;
};

// Loads the model and cluster and converts the flags, or loads --plan.
// Throws InputError (also when --plan is combined with other plan flags).
Job to_job(const PlanFlags& flags);


// `v` of the integer flag `flag`; throws InputError("<flag>: out of range:
// v; allowed: lo to hi") unless lo <= v <= hi.
int64_t in_range(const std::string& flag, int64_t v, int64_t lo, int64_t hi);

}  // namespace trainplan

#endif  // TRAINPLAN_PLANNER_CLI_PLAN_FLAGS_H_
