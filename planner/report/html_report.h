// One self-contained HTML page of a recommendation or a simulated plan:
// the ranking, where the losing layouts' seconds go, memory per stage
// against capacity, the chosen step as a timeline per representative rank
// (the pipeline schedule visible), memory over time, the scaling of each
// family's best plan with the cluster size, and, with faults, goodput
// against the checkpoint interval and the cluster size.
//
// Charts are Apache ECharts (third_party/echarts, vendored and inlined), so
// the page opens offline and makes no network request.  Every chart's
// container gets data-points="N" once drawn, and the body data-ready="1"
// when all are: what the browser test (tests/report/) asserts on.
#ifndef TRAINPLAN_PLANNER_REPORT_HTML_REPORT_H_
#define TRAINPLAN_PLANNER_REPORT_HTML_REPORT_H_

#include <string>

#include <nlohmann/json.hpp>

#include "planner/search/search.h"
#include "simulator/report/step_report.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

// The chosen plan's step: its report (simulated with a trace), memory per
// stage from the memory model.
nlohmann::json step_section(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                            const StepReport& report);

// The ranking and the families' best plans of a search.
nlohmann::json ranking_section(const SearchResult& result);

// Best tokens/s and MFU of each family at each cluster size searched
// (`sizes` in GPUs, ascending, each with its search result).
nlohmann::json scaling_section(const std::vector<std::pair<int, SearchResult>>& sizes);

// The page: `data` holds "title", "subtitle" and any of "ranking", "step",
// "scaling", "faults".  Reads the charting library from the data directory
// (third_party/echarts/echarts.min.js); throws InputError if it is missing.
std::string html_report(const nlohmann::json& data);

}  // namespace trainplan

#endif  // TRAINPLAN_PLANNER_REPORT_HTML_REPORT_H_
