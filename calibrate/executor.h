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
  // Resuming: steps [0, first_step) of warm-up + steps were done by an
  // earlier run (recovery from a checkpoint); they are not run again.
  int first_step = 0;
  // Optional, called on every rank once its executor is set up (task graph,
  // communicators), before the first step: where a resumed run loads its
  // checkpoint.
  std::function<void()> ready;
  // Optional, called on every rank after each step (warm-up included) with
  // the steps done, the total and that step's time.
  std::function<void(int done, int total, double step_s)> progress;
  // An injected straggler (validate --inject slow): `steps` more steps in
  // which rank slow_rank's compute and optimizer take slow_factor times as
  // long (MeasuredStep::slowed_*), alternating with the timed ones after
  // the warm-up.  -1: none.
  int slow_rank = -1;
  double slow_factor = 1;
  // An injected slow link (validate --inject link): in those same extra
  // steps every transfer rank link_rank takes part in moves 1 / link_fraction
  // times its bytes.  -1: none.  At most one of slow_rank and link_rank.
  int link_rank = -1;
  double link_fraction = 1;
  // Optional, called on every rank when it is half-way through its program
  // (fault_point_index) in each step, with the 0-based step: where validate
  // --inject kill and hang stop a rank.
  std::function<void(int step)> mid_step;
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
  // Median over steps of the mean, over a step's gradient synchronisations
  // (DP all-reduce / reduce-scatter), of last minus first arrival of the
  // group's ranks (the straggler model's ArrivalSpread::range_mean_s).
  double arrival_range_s = 0;
  // With ExecutorOptions::slow_rank or link_rank: the same over the slowed steps.
  std::vector<double> slowed_step_times_s;
  double slowed_step_time_s = 0;
  double slowed_arrival_range_s = 0;
};

// Where a rank stops when a fault is injected mid-step: the index in its
// program of the task it would run next.
inline size_t fault_point_index(size_t program_size) { return program_size / 2; }

// When, in the simulated step of the executor's task graph, `rank` reaches
// its fault point (the start of that task), in seconds from the step's start.
double fault_point_time_s(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                          const std::string& backend_name, int rank);

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
