// `trainplan validate`: execute a plan's task graph on real devices and
// compare with the simulator's prediction, quantity by quantity.
#include <cmath>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "calibrate/backend.h"
#include "calibrate/executor.h"
#include "planner/cli/commands.h"
#include "planner/cli/output.h"
#include "planner/cli/plan_flags.h"
#include "planner/plan/plan_file.h"
#include "simulator/core/error.h"
#include "simulator/memory/memory_model.h"
#include "simulator/spec/calibration.h"

namespace trainplan {

namespace {

struct ValidateFlags {
  std::string plan;
  std::string backend;
  std::string calibration;
  int steps = 5;
  int warmup = 1;
  std::string out;
  bool json = false;
};

int run_validate(const ValidateFlags& f, int* argc, char*** argv) {
  if (f.plan.empty()) throw_input_error("--plan", "", "is required", "a plan.json from `recommend --save`");
  if (f.backend.empty()) throw_input_error("--backend", "", "is required", "allowed: cpu, cuda");
  if (f.steps < 1 || f.steps > 1000) throw_input_error("--steps", "", "must be between 1 and 1000", "");
  if (f.warmup < 0 || f.warmup > 100) throw_input_error("--warmup", "", "must be between 0 and 100", "");
  PlanFile pf = load_plan_file(f.plan);
  ModelSpec model = load_model(pf.model);
  ClusterSpec cluster = load_cluster(pf.cluster);
  if (!f.calibration.empty()) apply_calibration(load_calibration(f.calibration), "--calibration", &cluster);
  Layout layout = resolve_plan(model, cluster, pf.gpus, pf.plan);
  if (!layout.feasible) throw_input_error("--plan", "", "the plan cannot run: " + layout.reasons.front(), "");
  std::unique_ptr<Backend> backend = make_backend(f.backend, argc, argv);
  const StepReport pred = simulate_step(model, cluster, layout, simulate_options_for(*backend));
  ExecutorOptions eo;
  eo.steps = f.steps;
  eo.warmup = f.warmup;
  const MeasuredStep meas = execute_plan(*backend, model, cluster, layout, eo);
  if (backend->world().rank() != 0) return 0;

  // Memory compared without the GPU-specific "other" (CUDA context, NCCL
  // buffers, fragmentation): the executor tracks model states and saved
  // activations.
  double pred_mem = 0;
  {
    MemoryReport mr = estimate_memory(model, cluster, layout);
    for (const StageMemory& st : mr.stages) pred_mem = std::max(pred_mem, st.breakdown.total() - st.breakdown.other);
  }
  struct Row {
    const char* name;
    double predicted, measured;
  };
  const TimeBreakdown& pb = pred.breakdown;
  const TimeBreakdown& mb = meas.breakdown;
  const Row rows[] = {{"step_time_s", pred.step_time_s, meas.step_time_s},
                      {"compute_s", pb.compute, mb.compute},
                      {"tp_comm_s", pb.tp_comm, mb.tp_comm},
                      // Time blocked in pipeline receives includes waiting
                      // for the other stage (bubble): compare them together.
                      {"pp_wait_s", pb.pp_comm + pb.bubble, mb.pp_comm + mb.bubble},
                      {"dp_comm_s", pb.dp_comm, mb.dp_comm},
                      {"optimizer_s", pb.optimizer, mb.optimizer},
                      {"peak_memory_gib", to_gib(pred_mem), to_gib(meas.peak_bytes)},
                      // Measured only: the process's resident high-water mark.
                      {"process_peak_rss_gib", 0.0, to_gib(meas.process_peak_bytes)}};
  nlohmann::json out;
  out["tool"] = std::string("trainplan ") + kVersion;
  out["command"] = "validate";
  out["plan"] = f.plan;
  out["model"] = model.name;
  out["cluster"] = cluster.name;
  out["backend"] = backend->name();
  out["calibration"] = f.calibration;
  out["steps"] = f.steps;
  out["step_times_s"] = meas.step_times_s;
  for (const Row& r : rows) {
    const double err = r.measured > 0 ? (r.predicted - r.measured) / r.measured : 0;
    out["results"][r.name] = {{"predicted", r.predicted}, {"measured", r.measured}, {"error", err}};
  }
  if (!f.out.empty()) write_file_atomically(f.out, out.dump(2) + "\n", "--out");
  if (f.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("# trainplan %s validate: %s (%s on %s, %d ranks) on the %s backend, median of %d steps after %d warm-up\n",
              kVersion, f.plan.c_str(), model.name.c_str(), cluster.name.c_str(), layout.gpus, backend->name().c_str(),
              f.steps, f.warmup);
  std::printf("# plan: %s\n# calibration: %s\n", describe_plan(layout.plan).c_str(),
              f.calibration.empty() ? "(none: the cluster's defaults)" : f.calibration.c_str());
  std::printf("%-18s %14s %14s %9s\n", "quantity", "predicted", "measured", "error");
  for (const Row& r : rows) {
    if (r.measured > 0 && r.predicted > 0) {
      std::printf("%-18s %14.6f %14.6f %+8.1f%%\n", r.name, r.predicted, r.measured,
                  100 * (r.predicted - r.measured) / r.measured);
    } else if (r.predicted == 0 && r.measured > 0 && std::string(r.name) == "process_peak_rss_gib") {
      std::printf("%-18s %14s %14.6f %9s\n", r.name, "-", r.measured, "-");
    } else {
      std::printf("%-18s %14.6f %14.6f %9s\n", r.name, r.predicted, r.measured, "-");
    }
  }
  return 0;
}

}  // namespace

void register_validate_command(CLI::App* app, int* status, int* argc, char*** argv) {
  static ValidateFlags f;
  CLI::App* cmd = app->add_subcommand("validate", "execute a plan on real devices and compare with the prediction");
  cmd->add_option("--plan", f.plan, "plan.json to execute");
  cmd->add_option("--backend", f.backend, "cpu (Eigen + MPI) or cuda (cuBLAS + NCCL)");
  cmd->add_option("--calibration", f.calibration, "calibration.json from `trainplan calibrate` (recommended)");
  cmd->add_option("--steps", f.steps, "timed steps (default 5)");
  cmd->add_option("--warmup", f.warmup, "warm-up steps (default 1)");
  cmd->add_option("--out", f.out, "write predicted vs measured as JSON to this file");
  cmd->add_flag("--json", f.json, "JSON output");
  cmd->callback([status, argc, argv] { *status = run_validate(f, argc, argv); });
}

}  // namespace trainplan
