// Simulate one training step of a layout and explain where the time goes.
//
// step_time = makespan of the task graph (zero-bubble schedules: the longest
// rank span, as their optimizer post-validation lets steps overlap; see
// simulate_step).  Per simulated rank, the step is
// split into compute (busy, less exposed TP/CP communication folded into
// layer tasks), tp_comm, optimizer, and idle time; idle time before a task is
// pp_comm or dp_comm for the part that overlaps the transfer it waited for
// (its last dependency), bubble otherwise; the components are averaged over
// ranks and sum to the step time.  MFU/HFU use the model and hardware FLOPs
// of cost/step_flops.h against the dense peak of the training dtype.
#ifndef TRAINPLAN_SIM_REPORT_STEP_REPORT_H_
#define TRAINPLAN_SIM_REPORT_STEP_REPORT_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "simulator/engine/engine.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"
#include "simulator/taskgraph/lowering.h"

namespace trainplan {

struct SimulateOptions {
  bool representative = true;   // one rank per pipeline stage
  bool trace = false;           // build a Chrome trace
  double bucket_bytes = 25.0 * 1024 * 1024;
  LoweringOptions::P2p p2p = LoweringOptions::P2p::kBySchedule;
  bool blocking_dp = false;   // see LoweringOptions
  bool cp_overlap = true;     // see LoweringOptions
};

// The lowering a simulation with these options runs (the one place that
// maps SimulateOptions to LoweringOptions).
LoweringOptions lowering_options(const SimulateOptions& options);

struct TimeBreakdown {  // seconds, averaged over ranks
  double compute = 0, tp_comm = 0, pp_comm = 0, dp_comm = 0, bubble = 0, optimizer = 0;
  double ep_comm = 0;  // MoE token all-to-all (dispatch, combine) and expert-TP collectives
  double total() const { return compute + tp_comm + pp_comm + dp_comm + bubble + optimizer + ep_comm; }
};

struct StageResult {
  int stage = 0;
  double simulated_peak_bytes = 0;   // tracked over simulated time
  double closed_form_peak_bytes = 0; // memory model
};

// Async DP: updates applied at the servers between a worker's pull and the
// application of its push (first iteration of each worker excluded: start-up).
struct Staleness {
  double mean = 0, p90 = 0, max = 0;
  int samples = 0;
};

struct StepReport {
  double step_time_s = 0;
  double tokens_per_s = 0;
  double model_tflops_per_gpu = 0;
  double hw_tflops_per_gpu = 0;
  double mfu = 0, hfu = 0;
  double bubble_fraction = 0;
  double exposed_comm_fraction = 0;
  double peak_memory_bytes = 0;
  double capacity_bytes = 0;
  bool fits = false;
  TimeBreakdown breakdown;
  std::vector<StageResult> stages;
  LayerTimes layer;       // a dense layer's times
  bool dense_layers = true;  // whether the model has dense layers (an MoE model may have none)
  LayerTimes moe_layer;   // MoE models: an MoE layer's times
  double moe_load = 1;    // MoE: the busiest expert-parallel rank's token load over the mean
  int simulated_ranks = 0;
  int64_t tasks = 0;
  uint64_t events = 0;
  double engine_wall_s = 0;
  std::string trace_json;   // when options.trace
  bool async = false;
  Staleness staleness;
};

// REQUIRES: layout.feasible.
StepReport simulate_step(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                         const SimulateOptions& options);

// A synchronous step in its steady state: the step simulated with three
// micro-batch counts past the pipeline's warm-up (first, first + stride,
// first + 2 stride; stride p for the interleaved schedule, else 1) and, when
// each stride adds exactly the same time (to the picosecond), events, tasks
// and time per category and leaves the peak memory as it was, the step's own
// count reached by adding that increment; nullopt when the step is not that
// periodic or too short to gain (then simulate_step runs it whole).  Used by
// simulate_step for representative runs without a trace; the same results
// as the whole run up to the rounding of the category sums (tested).
std::optional<StepReport> simulate_steady_state(const ModelSpec& model, const ClusterSpec& cluster,
                                                const Layout& layout, const SimulateOptions& options);

// simulate_step in two halves, for a search that bounds a plan once it is
// lowered and before it runs: lower_for_simulation(...) then
// simulate_lowered(..., std::move(step)) is simulate_step(...).
LoweredStep lower_for_simulation(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                                 const SimulateOptions& options);
StepReport simulate_lowered(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                            const SimulateOptions& options, LoweredStep step);

// simulate_lowered in two halves again, so that a search can run the engine
// once for plans whose lowered steps are identical (equal fingerprints):
// run_lowered(step) is the engine's run (its wall time in *wall_s when
// given), report_lowered(...) the report built from it.
EngineResult run_lowered(LoweredStep& step, double* wall_s = nullptr);
StepReport report_lowered(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                          const SimulateOptions& options, const LoweredStep& step, const EngineResult& result,
                          double engine_wall_s = 0);
// fingerprint(graph, network) with the engine options the step carries
// (compute slowdown under communication, static bytes).
uint64_t lowered_step_fingerprint(const LoweredStep& step);

// A lower bound on simulate_lowered's step time: the lowered step's critical
// path without contention (critical_path_lower_bound_ps); 0 where the step
// is not the makespan (zero-bubble's overlapping steps, async DP).
int64_t lowered_step_lower_bound_ps(const LoweredStep& step, const Layout& layout);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_REPORT_STEP_REPORT_H_
