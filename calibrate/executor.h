// Executes a plan's task graph for real on a Backend: the same lowering as
// the simulator (every rank), with GEMMs of the real shapes, collectives of
// the real sizes on the real groups (split from the world the way the plan
// places ranks: tp innermost, then cp, dp, pp), pipeline sends and
// receives, and the optimizer step's memory traffic.
//
// Each rank runs its compute tasks in program order; a communication task
// runs as soon as this rank's share of its inputs is ready (sends are
// asynchronous, receives and collectives block).  Times are wall clock around
// blocking backend calls; a step's time is the slowest rank's.
#ifndef TRAINPLAN_CALIBRATE_EXECUTOR_H_
#define TRAINPLAN_CALIBRATE_EXECUTOR_H_

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "calibrate/backend.h"
#include "simulator/report/step_report.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

struct ExecutorOptions {
  int warmup = 1;
  int steps = 5;
  // Optional, called on every rank after each step (warm-up included) with
  // the steps done, the total and that step's time.
  std::function<void(int done, int total, double step_s)> progress;
};

struct MeasuredStep {
  double step_time_s = 0;           // median over steps of the slowest rank
  std::vector<double> step_times_s;
  TimeBreakdown breakdown;          // per step, mean over ranks per category (median over steps)
  // Per category, the interquartile range of the per-step values; bubble:
  // of the whole wait (pp_comm + bubble, the step less the other categories).
  TimeBreakdown spread;
  double peak_bytes = 0;            // tracked (not allocated): model states + saved activations, slowest rank
  double process_peak_bytes = 0;    // cpu backend: the largest rank's peak resident set (0 elsewhere)
};

// How the simulator must run to predict what this backend executes: the CPU
// backend's sends are asynchronous and its collectives block.
SimulateOptions simulate_options_for(const Backend& backend);
SimulateOptions simulate_options_for(const std::string& backend_name);  // "cpu" | "cuda"

// REQUIRES: layout.feasible and backend.world().size() == layout.gpus.
// Throws InputError("--plan: ...") if the world size differs.
MeasuredStep execute_plan(Backend& backend, const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                          const ExecutorOptions& options);

}  // namespace trainplan

#endif  // TRAINPLAN_CALIBRATE_EXECUTOR_H_
