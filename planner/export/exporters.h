// Ready-to-run configs for the frameworks people train with, from a plan.
//
// Each exporter checks the target framework's own rules first and refuses a
// plan it cannot express with the reason (e.g. DeepSpeed's pipeline engine
// with ZeRO-2/3), instead of writing a config that fails at launch.
#ifndef TRAINPLAN_PLANNER_EXPORT_EXPORTERS_H_
#define TRAINPLAN_PLANNER_EXPORT_EXPORTERS_H_

#include <string>

#include "planner/plan/plan_file.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

enum class ExportTarget { kMegatron, kDeepSpeed, kTorchtitan, kFsdp };

struct ExportResult {
  bool ok = false;
  std::string text;    // the config / script when ok
  std::string reason;  // why the target cannot express the plan when !ok
};

// REQUIRES: layout = resolve_plan(model, cluster, file.gpus, file.plan) and
// layout.feasible.
ExportResult export_plan(ExportTarget target, const PlanFile& file, const ModelSpec& model,
                         const ClusterSpec& cluster, const Layout& layout);

}  // namespace trainplan

#endif  // TRAINPLAN_PLANNER_EXPORT_EXPORTERS_H_
