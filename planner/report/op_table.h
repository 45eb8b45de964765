// `simulate --ops`: the ops of each kind of transformer layer a plan runs,
// one micro-batch on one rank, as the step charges them
// (simulator/taskgraph/step_costs.h layer_charges): shape, time per pass,
// the rate that time implies, host calls and the collective after each op,
// and the layer's totals.  What a profiler trace of one layer would show,
// to set beside one (nsys, the PyTorch profiler).
#ifndef TRAINPLAN_PLANNER_REPORT_OP_TABLE_H_
#define TRAINPLAN_PLANNER_REPORT_OP_TABLE_H_

#include <vector>

#include <nlohmann/json.hpp>

#include "simulator/spec/cluster.h"
#include "simulator/taskgraph/step_costs.h"

namespace trainplan {

// The tables as text on stdout, one per layer kind.
void print_op_tables(const std::vector<LayerCharges>& kinds, const ClusterSpec& cluster);

// The same as JSON: an array with one object per layer kind, times in ms.
nlohmann::json op_tables_json(const std::vector<LayerCharges>& kinds, const ClusterSpec& cluster);

}  // namespace trainplan

#endif  // TRAINPLAN_PLANNER_REPORT_OP_TABLE_H_
