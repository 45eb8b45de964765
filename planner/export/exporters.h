// Ready-to-run configs for the frameworks people train with, from a plan.
//
// Each exporter checks the target framework's own rules first and refuses a
// plan it cannot express with the reason (e.g. DeepSpeed's pipeline engine
// with ZeRO-2/3), instead of writing a config that fails at launch.
//
// What each target writes (deterministic text, no timestamps or versions):
//   kMegatron    a bash script: torchrun running Megatron-LM's
//                pretrain_gpt.py with one argument per line.
//   kDeepSpeed   the DeepSpeed config JSON when tp = pp = 1 (the model code
//                is the user's); with tp > 1 or pp > 1 a bash script that
//                writes that JSON and launches Megatron-DeepSpeed, which is
//                what gives DeepSpeed tensor and pipeline parallelism.
//   kTorchtitan  a torchtitan job config (TOML) for a llama3 flavor.
//   kFsdp        a self-contained PyTorch training script (DDP, DDP +
//                ZeroRedundancyOptimizer, or FSDP2 fully_shard, with DTensor
//                tensor parallelism) on random tokens.
#ifndef TRAINPLAN_PLANNER_EXPORT_EXPORTERS_H_
#define TRAINPLAN_PLANNER_EXPORT_EXPORTERS_H_

#include <optional>
#include <string>

#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

// kTorchtitan: the v0.2.2 TOML job config; kTorchtitanPy: the Python
// Trainer.Config of torchtitan's head and 0.3.
enum class ExportTarget { kMegatron, kDeepSpeed, kTorchtitan, kFsdp, kTorchtitanPy };

// Returns the CLI name: "megatron", "deepspeed", "torchtitan", "fsdp" or
// "torchtitan-py".
const char* to_string(ExportTarget t);

// Returns the target named `name` (a to_string() value), or nullopt.
std::optional<ExportTarget> export_target_from_string(const std::string& name);

struct ExportResult {
  bool ok = false;
  std::string text;    // the config / script when ok
  std::string reason;  // why the target cannot express the plan when !ok
};

// Returns the config for `target`, or ok == false with one line saying which
// rule of the framework the plan breaks.  A refusal is an answer, not an
// error: nothing is thrown for a plan that merely cannot be expressed.
// REQUIRES: layout = resolve_plan(model, cluster, gpus, plan) and
// layout.feasible.
ExportResult export_plan(ExportTarget target, const ModelSpec& model, const ClusterSpec& cluster,
                         const Layout& layout);

// The export target of a framework (nullopt for generic).
std::optional<ExportTarget> export_target_of(Framework f);

// Why `layout.plan.framework` cannot run the plan (its exporter's refusal),
// or nullopt if it can or the plan names no framework.  The search uses it
// so that `recommend --framework X` lists only plans X runs.
// REQUIRES: layout.feasible.
std::optional<std::string> framework_refusal(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout);

}  // namespace trainplan

#endif  // TRAINPLAN_PLANNER_EXPORT_EXPORTERS_H_
