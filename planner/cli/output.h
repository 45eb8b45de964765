// Output helpers shared by the commands: the version banner, JSON of a plan,
// and atomic writes (temp file + rename) so no half-written file is left.
#ifndef TRAINPLAN_PLANNER_CLI_OUTPUT_H_
#define TRAINPLAN_PLANNER_CLI_OUTPUT_H_

#include <string>

#include <nlohmann/json.hpp>

#include "planner/plan/plan_file.h"  // plan_to_json
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

constexpr const char* kVersion = "0.1.0";

// Writes `text` to `path` via a temporary file in the same folder and a
// rename.  Throws InputError naming `flag` if the file cannot be written.
void write_file_atomically(const std::string& path, const std::string& text, const std::string& flag);

// A short hash (FNV-1a, 16 hex digits) of everything an answer depends on:
// the model's shape, the cluster (and its calibration), the GPU count and the
// plan or search options given as `extra`.  Printed in every output header.
std::string config_hash(const ModelSpec& model, const ClusterSpec& cluster, int gpus, const std::string& extra);

// Formats x with `decimals` digits after the point.
std::string fixed(double x, int decimals);

// Rounds x to `decimals` digits so JSON numbers stay short and stable.
double rounded(double x, int decimals);

}  // namespace trainplan

#endif  // TRAINPLAN_PLANNER_CLI_OUTPUT_H_
