// `trainplan validate`: execute a plan's task graph on real devices and
// compare with the simulator's prediction, quantity by quantity.
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <iostream>

#include <CLI/CLI.hpp>

#include "calibrate/backend.h"
#include "calibrate/executor.h"
#include "calibrate/inject.h"
#include "planner/cli/commands.h"
#include "planner/cli/output.h"
#include "planner/cli/plan_flags.h"
#include "planner/cli/validate_faults.h"
#include "planner/plan/plan_file.h"
#include "simulator/core/error.h"
#include "simulator/framework/framework.h"
#include "simulator/memory/memory_model.h"
#include "simulator/taskgraph/lowering.h"
#include "simulator/core/units.h"
#include "simulator/spec/calibration.h"

namespace trainplan {

namespace {

// The rank mpirun/srun gave this process (0 when not launched by one).
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return std::atoi(v);
  }
  return 0;
}

int run_validate_checked(const ValidateFlags& f, int* argc, char*** argv);

// Bad input is the same on every rank: rank 0 alone says so (one line, not
// one per process); the others exit 2 quietly.
int run_validate(const ValidateFlags& f, int* argc, char*** argv) {
  try {
    return run_validate_checked(f, argc, argv);
  } catch (const InputError&) {
    if (launcher_rank() != 0) return 2;
    throw;
  }
}

int run_validate_checked(const ValidateFlags& f, int* argc, char*** argv) {
  if (f.plan.empty()) throw_input_error("--plan", "", "is required", "a plan.json from `recommend --save`");
  if (f.backend.empty()) throw_input_error("--backend", "", "is required", "allowed: cpu, cuda");
  if (f.steps < 1 || f.steps > 1000) throw_input_error("--steps", "", "must be between 1 and 1000", "");
  if (f.warmup < 0 || f.warmup > 100) throw_input_error("--warmup", "", "must be between 0 and 100", "");
  if (!f.out.empty()) check_output_path(f.out, "--out");
  PlanJob job = load_plan_job(f.plan, f.calibration);
  const PlanFile& pf = job.file;
  const ModelSpec& model = job.model;
  ClusterSpec& cluster = job.cluster;
  Layout layout = resolve_plan(model, cluster, pf.gpus, pf.plan);
  if (!layout.feasible) throw_input_error("--plan", "", "the plan cannot run: " + layout.reasons.front(), "");
  if (layout.plan.fp8_recipe != Fp8Recipe::kNone) {
    throw_input_error("--plan", "",
                      "validate cannot execute FP8 GEMMs yet: the cpu backend runs fp32 and the cuda backend bf16, "
                      "fp16, fp32 or tf32 (precision fp8)",
                      "validate the same layout with precision bf16");
  }
  {
    // The executors run each pass's collectives in line, op by op; an overlap
    // the framework runs beside the compute would be measured exposed while
    // the simulation hides it, and the comparison would not be of one plan.
    const ExecutionProfile prof = execution_profile(layout.plan);
    std::string overlap;
    if (prof.tp_comm_overlap) {
      overlap = "tensor-parallel collectives overlapped with the GEMMs (tp_comm_overlap)";
    } else if (prof.paired_ep_overlap) {
      overlap = layout.plan.ep_overlap ? "the combined 1F1B's all-to-all overlap (ep_overlap)"
                                       : "dualpipe-v's all-to-all overlap in its paired passes";
    }
    if (!overlap.empty()) {
      throw_input_error("--plan", "",
                        "validate cannot reproduce " + overlap +
                            ": the executors run each pass's collectives in line, so they would measure another plan",
                        "validate the same layout without it");
    }
  }
  if (layout.plan.cuda_graph != 0) {
    // The executors issue every kernel from the host as it comes; a graph's
    // replay is what the simulation charges the host for the captured ops.
    throw_input_error("--plan", "",
                      "validate cannot replay CUDA graphs (cuda_graph " + cuda_graph_modules_name(layout.plan.cuda_graph) +
                          "): the executors launch each kernel from the host, so they would measure another plan",
                      "validate the same layout without cuda_graph");
  }
  if (layout.plan.moe_shared_expert_overlap) {
    // The executors run the shared experts in line after the routed ones.
    throw_input_error("--plan", "",
                      "validate cannot run the shared experts beside the all-to-alls (moe_shared_expert_overlap): the "
                      "executors run them in line, so they would measure another plan",
                      "validate the same layout without moe_shared_expert_overlap");
  }
  if (layout.plan.cross_entropy_fusion) {
    // The executors compute the loss with their own ops, not Megatron-Core's
    // fused segments, whose bytes the simulation charges.
    throw_input_error("--plan", "",
                      "validate cannot run Megatron-Core's fused cross-entropy loss (cross_entropy_fusion): the "
                      "executors compute the loss with their own ops, so they would measure another plan",
                      "validate the same layout without cross_entropy_fusion");
  }
  if (layout.plan.moe_router_fusion) {
    // The executors' router is their own ops, not Transformer Engine's
    // fused kernels, whose host calls the simulation charges.
    throw_input_error("--plan", "",
                      "validate cannot run Transformer Engine's fused router (moe_router_fusion): the executors route "
                      "with their own ops, so they would measure another plan",
                      "validate the same layout without moe_router_fusion");
  }
  if (layout.plan.schedule == Schedule::kDualPipe) {
    throw_input_error("--plan", "",
                      "validate cannot execute the dualpipe schedule: its mirrored ranks hand each micro-batch over at "
                      "the V's turn, which the executors do not route",
                      "validate the plan it runs as: schedule dualpipe-v with half the pp and twice the dp (the same "
                      "order on every rank)");
  }
  if (layout.plan.moe_dispatcher != MoeDispatcher::kAllToAll) {
    throw_input_error("--plan", "",
                      std::string("validate cannot execute the ") + to_string(layout.plan.moe_dispatcher) +
                          " dispatcher: the executors move every token copy with an all-to-all, so they would "
                          "measure another plan",
                      "validate the same layout with moe_dispatcher alltoall");
  }
  if (layout.plan.dp_mode == DpMode::kAsync) {
    throw_input_error("--plan", "",
                      "validate executes synchronous plans only: the executors have no parameter servers to push "
                      "gradients to and pull weights from (dp_mode async)",
                      "validate the same layout with dp_mode sync");
  }
  if (f.tolerance_pct != -1 && !(f.tolerance_pct > 0 && f.tolerance_pct <= 1000)) {
    throw_input_error("--tolerance", "", "must be a percentage in (0, 1000], got " + fixed(f.tolerance_pct, 2),
                      "e.g. --tolerance 15");
  }
  double max_time_s = 0;  // 0: no limit
  if (f.max_time != "none") {
    max_time_s = parse_quantity(f.max_time, Dimension::kDuration, "--max-time", "");
    if (!(max_time_s > 0)) throw_input_error("--max-time", "", "must be > 0", "e.g. 10min, 2h, or none");
  }
  // Predicted before the backend starts, so that a refusal below is one
  // line from one process, not one per MPI rank.
  const StepReport pred = simulate_step(model, cluster, layout, simulate_options_for(f.backend));
  // Refuse a run predicted to take longer than --max-time before starting it.
  const int total_steps = f.warmup + f.steps;
  InjectSpec spec;
  if (!f.inject.empty()) spec = parse_inject(f.inject, layout.gpus, total_steps);
  // The run takes (warm-up + steps) steps; a slow or link fault adds
  // --steps more (a slow rank's at most factor times as long), a recovery
  // run redoes the steps since its checkpoint (at most all of them).
  double predicted_run_s = total_steps * pred.step_time_s;
  std::string what = std::to_string(total_steps) + " steps of " + human_duration(pred.step_time_s);
  if (spec.kind == InjectSpec::Kind::kSlow || spec.kind == InjectSpec::Kind::kLink) {
    const double slowed = f.steps * pred.step_time_s * (spec.kind == InjectSpec::Kind::kSlow ? spec.factor : 1 / spec.factor);
    predicted_run_s += slowed;
    what += " and " + std::to_string(f.steps) + " with the fault";
  } else if (spec.recovery()) {
    predicted_run_s *= 2;
    what += ", twice: the run and its recovery";
  }
  if (max_time_s > 0 && predicted_run_s > max_time_s) {
    throw_input_error("--max-time", "",
                      "the run is predicted to take " + human_duration(predicted_run_s) + " (" + what + "), more than " +
                          human_duration(max_time_s),
                      "use fewer --steps, a plan with a smaller global batch, or --max-time " +
                          human_duration(2 * predicted_run_s) + " (none: no limit)");
  }
  if (spec.kind == InjectSpec::Kind::kLink && (layout.gpus > 2 || layout.nodes > 1)) {
    throw_input_error("--inject", "",
                      spec.text + ": the plan has " + std::to_string(layout.gpus) + " ranks on " +
                          std::to_string(layout.nodes) + " node(s); a slow link is predicted as the node's fabric at "
                          "F, which is rank R's link only when every transfer involves it (2 ranks, 1 node)",
                      "a 2-rank plan, or slow:rank=R,factor=F");
  }
  if (!spec.recovery() && f.recovery_attempt == 0) {
    for (const auto& [given, flag] : f.recovery_flags_given) {
      if (given) {
        throw_input_error(flag, "", "is only for a recovery run", "use it with --inject kill:... or hang:...");
      }
    }
  }
  if (spec.recovery() && f.recovery_attempt == 0) {
    for (const char* name : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_PROCID"}) {
      if (std::getenv(name) != nullptr) {
        throw_input_error("--inject", "",
                          spec.text + ": validate launches (and relaunches) the job itself, so it must not run under "
                          "a launcher (" + name + " is set)",
                          "run it without mpirun; --launcher sets the command it starts the ranks with");
      }
    }
    return run_recovery_supervisor(f, model, cluster, layout, pred, spec);
  }
  if (f.recovery_attempt != 0 && f.recovery_dir.empty()) {
    throw_input_error("--recovery-attempt", "", "is set by validate --inject for the ranks it launches", "");
  }
  std::unique_ptr<Backend> backend = make_backend(f.backend, argc, argv);
  if (f.recovery_attempt != 0) return run_recovery_worker(f, *backend, model, cluster, layout, spec);
  const bool root = backend->world().rank() == 0;
  ExecutorOptions eo;
  eo.steps = f.steps;
  eo.warmup = f.warmup;
  if (spec.kind == InjectSpec::Kind::kSlow) {
    eo.slow_rank = spec.rank;
    eo.slow_factor = spec.factor;
  }
  if (spec.kind == InjectSpec::Kind::kLink) {
    eo.link_rank = spec.rank;
    eo.link_fraction = spec.factor;
  }
  ProgressLine progress("validate");
  if (root) {
    eo.progress = [&progress, &f](int done, int total, double step_s) {
      progress.update(done <= f.warmup ? "warm-up step" : "step", done, total);
      (void)step_s;
    };
  }
  const MeasuredStep meas = execute_plan(*backend, model, cluster, layout, eo);
  progress.clear();
  if (!root) return 0;

  // Memory compared without the GPU-specific "other" (CUDA context, NCCL
  // buffers, fragmentation): the executor tracks model states and saved
  // activations.
  double pred_mem = 0;
  {
    MemoryReport mr = plan_memory(model, cluster, layout);
    for (const StageMemory& st : mr.stages) pred_mem = std::max(pred_mem, st.breakdown.total() - st.breakdown.other);
  }
  struct Row {
    const char* name;
    double predicted, measured;
    double spread = -1;  // the measurement's interquartile range over steps; < 0: not a time category
  };
  const TimeBreakdown& pb = pred.breakdown;
  const TimeBreakdown& mb = meas.breakdown;
  const TimeBreakdown& sb = meas.spread;
  const Row rows[] = {{"step_time_s", pred.step_time_s, meas.step_time_s},
                      {"compute_s", pb.compute, mb.compute, sb.compute},
                      {"tp_comm_s", pb.tp_comm, mb.tp_comm, sb.tp_comm},
                      // Time blocked in pipeline receives includes waiting
                      // for the other stage (bubble): compare them together.
                      {"pp_wait_s", pb.pp_comm + pb.bubble, mb.pp_comm + mb.bubble, sb.bubble},
                      {"dp_comm_s", pb.dp_comm, mb.dp_comm, sb.dp_comm},
                      // MoE: token all-to-all and expert-TP collectives.
                      {"ep_comm_s", pb.ep_comm, mb.ep_comm, sb.ep_comm},
                      {"optimizer_s", pb.optimizer, mb.optimizer, sb.optimizer},
                      // Tracked by the executor from the task graph, not
                      // allocated: it checks the bookkeeping, not the model.
                      {"peak_memory_tracked_gib", to_gib(pred_mem), to_gib(meas.peak_bytes)},
                      // Measured only: the process's resident high-water mark.
                      {"process_peak_rss_gib", 0.0, to_gib(meas.process_peak_bytes)}};
  // A category's verdict (docs/validation.md): "ok" within
  // kCategoryTolerancePct; "small" when both sides are under 1% of the
  // step (a few microseconds of a 0.3 s step are timer and scheduler
  // noise); "noise" when the miss is within the measurement's own
  // interquartile range over the steps (no prediction can be judged closer
  // than the run repeats itself); "skew" for the wait of a plan without a
  // pipeline that the model puts at 0: the ranks waiting for each other at
  // their collectives, i.e. the compute skew between ranks, which the plain
  // simulation's identical ranks do not have (--stragglers models it); else
  // "MISS".
  constexpr double kCategoryTolerancePct = 20;
  const bool no_pipeline = layout.plan.pp == 1;
  auto skew_only = [&](const Row& r) {
    return no_pipeline && r.predicted == 0 && std::string(r.name) == "pp_wait_s";
  };
  auto category_verdict = [&](const Row& r) -> std::string {
    if (r.spread < 0) return "";
    if (r.predicted == 0 && r.measured == 0) return "-";
    if (std::max(r.predicted, r.measured) < 0.01 * meas.step_time_s) return "small";
    if (skew_only(r)) return "skew";
    if (r.measured > 0 && std::fabs(r.predicted - r.measured) <= kCategoryTolerancePct / 100 * r.measured) return "ok";
    if (std::fabs(r.predicted - r.measured) <= r.spread) return "noise";
    return "MISS";
  };
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
    if (r.spread >= 0) {
      out["results"][r.name]["spread"] = r.spread;
      out["results"][r.name]["verdict"] = category_verdict(r);
    }
  }
  const double step_error = meas.step_time_s > 0 ? (pred.step_time_s - meas.step_time_s) / meas.step_time_s : 0;
  const bool missed = f.tolerance_pct > 0 && std::fabs(step_error) * 100 > f.tolerance_pct;
  if (f.tolerance_pct > 0) {
    out["tolerance_pct"] = f.tolerance_pct;
    out["within_tolerance"] = !missed;
  }
  std::vector<Compared> straggler_rows;
  if (spec.kind == InjectSpec::Kind::kSlow || spec.kind == InjectSpec::Kind::kLink) {
    straggler_rows = compare_straggler(f, model, cluster, layout, spec, meas, &out);
  }
  if (!f.out.empty()) write_file_atomically(f.out, out.dump(2) + "\n", "--out");
  auto verdict = [&]() {
    if (f.tolerance_pct <= 0) return 0;
    if (!missed) {
      if (!f.json) {
        std::printf("# within tolerance: step time %+.1f%% (tolerance %.1f%%)\n", 100 * step_error, f.tolerance_pct);
      }
      return 0;
    }
    std::fprintf(stderr, "trainplan: validate: the predicted step time misses the measured one by %+.1f%%, more than "
                         "--tolerance %.1f%%\n", 100 * step_error, f.tolerance_pct);
    return 1;
  };
  if (f.json) {
    std::cout << out.dump(2) << "\n";
    return verdict();
  }
  std::printf("# trainplan %s validate: %s (%s on %s, %d ranks) on the %s backend, median of %d steps after %d warm-up\n",
              kVersion, f.plan.c_str(), model.name.c_str(), cluster.name.c_str(), layout.gpus, backend->name().c_str(),
              f.steps, f.warmup);
  std::printf("# plan: %s\n# calibration: %s\n", describe_plan(layout.plan).c_str(),
              f.calibration.empty() ? "(none: the cluster's defaults)" : f.calibration.c_str());
  std::printf("%-24s %14s %14s %9s %14s  %s\n", "quantity", "predicted", "measured", "error", "spread(IQR)", "verdict");
  for (const Row& r : rows) {
    char spread[32] = "";
    if (r.spread >= 0) std::snprintf(spread, sizeof spread, "%.6f", r.spread);
    const std::string v = category_verdict(r);
    if (r.measured > 0 && r.predicted > 0) {
      std::printf("%-24s %14.6f %14.6f %+8.1f%% %14s  %s\n", r.name, r.predicted, r.measured,
                  100 * (r.predicted - r.measured) / r.measured, spread, v.c_str());
    } else if (r.predicted == 0 && r.measured > 0 && std::string(r.name) == "process_peak_rss_gib") {
      std::printf("%-24s %14s %14.6f %9s\n", r.name, "-", r.measured, "-");
    } else {
      std::printf("%-24s %14.6f %14.6f %9s %14s  %s\n", r.name, r.predicted, r.measured, "-", spread, v.c_str());
    }
  }
  for (const Row& r : rows) {
    if (r.spread >= 0 && category_verdict(r) == "skew") {
      std::printf("# skew: without a pipeline, pp_wait_s is the ranks waiting for each other at collectives (%.1f%% of "
                  "the step): their compute skew, which the simulation's identical ranks do not have; --stragglers "
                  "models it\n", 100 * r.measured / meas.step_time_s);
    }
  }
  if (!straggler_rows.empty()) {
    if (spec.kind == InjectSpec::Kind::kLink) {
      std::printf("# injected slow link (%s): every transfer of rank %d moves 1/%.3f of its bytes in %d more steps, "
                  "alternating with the others; "
                  "predicted: the straggler model with degraded_nvlink=1:%.3f\n",
                  spec.text.c_str(), spec.rank, spec.factor, f.steps, spec.factor);
    } else {
      std::printf("# injected straggler (%s): rank %d's compute and optimizer x %.3f in %d more steps, alternating "
                "with the others; predicted: the "
                  "straggler model with slow_rank=%d:%.3f\n",
                  spec.text.c_str(), spec.rank, spec.factor, f.steps, spec.rank, spec.factor);
    }
    print_compared(straggler_rows, 0.01 * meas.step_time_s);
  }
  return verdict();
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
  cmd->add_option("-o,--out", f.out, "write predicted vs measured as JSON to this file");
  cmd->add_flag("--json", f.json, "JSON output");
  cmd->add_option("--tolerance", f.tolerance_pct,
                  "exit 1 if the predicted step time misses the measured one by more than PCT percent");
  cmd->add_option("--max-time", f.max_time,
                  "refuse a run predicted to take longer (default 10min; none: no limit)");
  cmd->add_option("--inject", f.inject, std::string("execute a fault and compare with the fault models; ") + kInjectGrammar);
  CLI::Option* every = cmd->add_option("--checkpoint-every", f.checkpoint_every,
                                       "kill/hang: a blocking checkpoint every N steps (default 2)");
  CLI::Option* dir = cmd->add_option("--checkpoint-dir", f.checkpoint_dir,
                                     "kill/hang: an empty folder for the checkpoints and logs (default: a temporary "
                                     "folder, removed afterwards)");
  CLI::Option* hb = cmd->add_option("--heartbeat-timeout", f.heartbeat_timeout,
                                    "kill/hang: declare the job failed after no rank logged for this long (default "
                                    "max(2s, 4 predicted steps))");
  CLI::Option* bw = cmd->add_option("--storage-bandwidth", f.storage_bandwidth,
                                    "kill/hang: the checkpoint store's bandwidth for the prediction (default: probed "
                                    "in the checkpoint folder)");
  CLI::Option* mode = cmd->add_option("--checkpoint-mode", f.checkpoint_mode,
                                      "kill/hang: sync (blocking save) or async (snapshot, then persist in the "
                                      "background; default sync)");
  CLI::Option* launcher = cmd->add_option("--launcher", f.launcher,
                                          "kill/hang: the command that starts the ranks (default: mpirun "
                                          "--oversubscribe -np N, with --allow-run-as-root as root)");
  cmd->add_option("--recovery-dir", f.recovery_dir)->group("");
  cmd->add_option("--recovery-attempt", f.recovery_attempt)->group("");
  cmd->callback([status, argc, argv, every, dir, hb, bw, launcher, mode] {
    f.recovery_flags_given = {{every->count() > 0, "--checkpoint-every"},
                              {dir->count() > 0, "--checkpoint-dir"},
                              {hb->count() > 0, "--heartbeat-timeout"},
                              {bw->count() > 0, "--storage-bandwidth"},
                              {launcher->count() > 0, "--launcher"},
                              {mode->count() > 0, "--checkpoint-mode"}};
    *status = run_validate(f, argc, argv);
  });
}

}  // namespace trainplan
