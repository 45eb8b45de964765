// plan.json: a plan with the model, cluster and size it was made for, the
// file `recommend --save` writes and `simulate`, `memory`, `export` and
// `validate` read with --plan.  Field names are the CLI flag names with '_'
// for '-'.  Unknown keys are errors.
#ifndef TRAINPLAN_PLANNER_PLAN_PLAN_FILE_H_
#define TRAINPLAN_PLANNER_PLAN_PLAN_FILE_H_

#include <string>

#include <nlohmann/json.hpp>

#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

struct PlanFile {
  std::string model;    // name or path, as given to --model
  std::string cluster;  // name or path
  int gpus = 0;
  Plan plan;            // resolved (no "derive" zeros)
};

// The plan's fields as a JSON object (the keys of plan.json without model,
// cluster and gpus); used by every command's --json output.
nlohmann::json plan_to_json(const Plan& plan);

// Returns the JSON text (2-space indent, sorted keys, trailing newline).
std::string plan_file_json(const PlanFile& f);

// Parses and validates plan.json; throws InputError "<path>: <pointer>: ...".
PlanFile parse_plan_file(const std::string& json_text, const std::string& where);
PlanFile load_plan_file(const std::string& path);

// A plan file with the model and cluster it names, loaded.
struct PlanJob {
  PlanFile file;
  ModelSpec model;
  ClusterSpec cluster;
};

// Loads plan.json at `path`, its model and cluster (with the calibration at
// `calibration_path` applied unless empty, errors naming --calibration), and
// checks its GPU count against the cluster ("<path>: /gpus: ...").  The one
// way every command reads --plan.
PlanJob load_plan_job(const std::string& path, const std::string& calibration_path);

// One line describing the plan, e.g. "tp=8 pp=4 dp=2 cp=1 vp=1 zero=1 ...".
std::string describe_plan(const Plan& plan);

}  // namespace trainplan

#endif  // TRAINPLAN_PLANNER_PLAN_PLAN_FILE_H_
