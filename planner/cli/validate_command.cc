// `trainplan validate`: execute a plan's task graph on real devices and
// compare with the simulator's prediction, quantity by quantity.
#include <signal.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "calibrate/backend.h"
#include "calibrate/executor.h"
#include "calibrate/inject.h"
#include "calibrate/recovery.h"
#include "planner/cli/commands.h"
#include "planner/cli/output.h"
#include "planner/cli/plan_flags.h"
#include "planner/plan/plan_file.h"
#include "simulator/core/error.h"
#include "simulator/faults/failures.h"
#include "simulator/faults/stragglers.h"
#include "simulator/memory/memory_model.h"
#include "simulator/core/units.h"
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
  double tolerance_pct = -1;       // < 0: report only
  std::string max_time = "10min";  // refuse longer runs; "none": no limit
  // Fault injection (calibrate/inject.h) and the recovery run's settings.
  std::string inject;
  int checkpoint_every = 2;
  std::string checkpoint_dir;      // empty: a fresh temporary folder, removed afterwards
  std::string heartbeat_timeout;   // empty: max(2 s, 4 predicted steps)
  std::string storage_bandwidth;   // empty: probed in the checkpoint folder
  std::string launcher;            // empty: mpirun -np N (kill/hang relaunch the job)
  std::string checkpoint_mode = "sync";  // sync | async
  // Set by the supervisor for the ranks it launches (hidden).
  std::string recovery_dir;
  int recovery_attempt = 0;
  // (given, flag) of the options only a recovery run takes.
  std::vector<std::pair<bool, std::string>> recovery_flags_given;
};

// The rank mpirun/srun gave this process (0 when not launched by one).
int launcher_rank() {
  for (const char* name : {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", "SLURM_PROCID"}) {
    const char* v = std::getenv(name);
    if (v != nullptr && *v != '\0') return std::atoi(v);
  }
  return 0;
}

int run_validate_checked(const ValidateFlags& f, int* argc, char*** argv);

// A predicted and a measured quantity, with the verdict docs/validation.md
// defines: "ok" within 20%; "small" when both sides are under
// `small_below` (timer, scheduler and launcher granularity); else "MISS".
struct Compared {
  std::string name;
  double predicted = 0, measured = 0;
  std::string note;
};

std::string compared_verdict(const Compared& c, double small_below) {
  if (std::max(c.predicted, c.measured) < small_below) return "small";
  if (c.measured > 0 && std::fabs(c.predicted - c.measured) <= 0.2 * c.measured) return "ok";
  return "MISS";
}

void print_compared(const std::vector<Compared>& rows, double small_below) {
  std::printf("%-24s %14s %14s %9s  %-7s %s\n", "quantity", "predicted", "measured", "error", "verdict", "how");
  for (const Compared& c : rows) {
    char err[32] = "-";
    if (c.measured > 0) std::snprintf(err, sizeof err, "%+.1f%%", 100 * (c.predicted - c.measured) / c.measured);
    std::printf("%-24s %14.6f %14.6f %9s  %-7s %s\n", c.name.c_str(), c.predicted, c.measured, err,
                compared_verdict(c, small_below).c_str(), c.note.c_str());
  }
}

nlohmann::json compared_json(const std::vector<Compared>& rows, double small_below) {
  nlohmann::json j;
  for (const Compared& c : rows) {
    j[c.name] = {{"predicted", c.predicted},
                 {"measured", c.measured},
                 {"error", c.measured > 0 ? (c.predicted - c.measured) / c.measured : 0.0},
                 {"verdict", compared_verdict(c, small_below)},
                 {"how", c.note}};
  }
  return j;
}

std::vector<std::string> split_words(const std::string& text) {
  std::istringstream ss(text);
  std::vector<std::string> words;
  std::string w;
  while (ss >> w) words.push_back(w);
  return words;
}

std::string self_executable() {
  std::error_code ec;
  const std::filesystem::path p = std::filesystem::read_symlink("/proc/self/exe", ec);
  if (ec) throw std::runtime_error("cannot find this executable (/proc/self/exe): " + ec.message());
  return p.string();
}

// The ranks' side of a recovery run (launched by the supervisor below):
// checkpoints every --checkpoint-every steps, a log of every phase, the
// fault in attempt 1, the checkpoint load in attempt 2.
int run_recovery_worker(const ValidateFlags& f, Backend& backend, const ModelSpec& model, const ClusterSpec& cluster,
                        const Layout& layout, const InjectSpec& spec) {
  Communicator& world = backend.world();
  const int rank = world.rank();
  RecoveryLog log(f.recovery_dir, f.recovery_attempt, rank);
  log.event("pid", static_cast<double>(::getpid()));
  const int64_t shard = static_cast<int64_t>(checkpoint_cost(model, cluster, layout, 1.0).per_gpu_written_bytes);
  const int resume = f.recovery_attempt >= 2 ? latest_committed_step(f.recovery_dir, layout.gpus) : 0;
  ExecutorOptions eo;
  eo.steps = f.steps;
  eo.warmup = f.warmup;
  eo.first_step = resume;
  eo.ready = [&] {
    log.event("ready");
    if (resume > 0) {
      log.event("load_begin", resume);
      load_shard(f.recovery_dir, resume, rank, shard);
      world.barrier();
      log.event("load_end", resume);
    }
  };
  std::unique_ptr<AsyncShardWriter> async;
  if (f.checkpoint_mode == "async") {
    async = std::make_unique<AsyncShardWriter>(f.recovery_dir, rank, shard,
                                               [&log](int step) { log.event("persist_end", step); });
  }
  eo.progress = [&](int done, int total, double) {
    log.event("step", done);
    if (done % f.checkpoint_every == 0 && done < total) {
      log.event("ckpt_begin", done);
      if (async) {
        // Training waits for the copy only; the shard persists meanwhile and
        // the checkpoint commits when every rank's is in place.
        async->snapshot(done);
      } else {
        // A blocking save: every rank writes its shard, and the checkpoint
        // is committed when the last one is durable.
        write_shard(f.recovery_dir, done, rank, shard);
        world.barrier();
      }
      log.event("ckpt_end", done);
    }
  };
  if (f.recovery_attempt == 1) {
    eo.mid_step = [&](int step) {
      if (rank != spec.rank || step + 1 != spec.step) return;
      log.event("fault", spec.step);
      ::raise(spec.kind == InjectSpec::Kind::kKill ? SIGKILL : SIGSTOP);
    };
  }
  execute_plan(backend, model, cluster, layout, eo);
  if (async) async->wait();
  return 0;
}

// validate --inject kill|hang: launch the job, let the fault hit, detect
// it, relaunch from the last committed checkpoint, and compare each phase
// with what the fault models predict for the plan.
int run_recovery_supervisor(const ValidateFlags& f, const ModelSpec& model, const ClusterSpec& cluster,
                            const Layout& layout, const StepReport& pred, const InjectSpec& spec) {
  const int total_steps = f.warmup + f.steps;
  if (f.checkpoint_every < 1 || f.checkpoint_every >= spec.step) {
    throw_input_error("--checkpoint-every", "",
                      "must be from 1 to " + std::to_string(spec.step - 1) + " so that a checkpoint is committed before "
                      "the fault in step " + std::to_string(spec.step) + ", got " + std::to_string(f.checkpoint_every),
                      "e.g. --checkpoint-every 2 with --inject ...,step=5");
  }
  if (f.checkpoint_mode != "sync" && f.checkpoint_mode != "async") {
    throw_input_error("--checkpoint-mode", "", "unknown mode \"" + f.checkpoint_mode + "\"", "allowed: sync, async");
  }
  double timeout_s = std::max(2.0, 4 * pred.step_time_s);
  if (!f.heartbeat_timeout.empty()) {
    timeout_s = parse_quantity(f.heartbeat_timeout, Dimension::kDuration, "--heartbeat-timeout", "");
    if (!(timeout_s >= 0.1 && timeout_s <= 3600)) {
      throw_input_error("--heartbeat-timeout", "", "must be from 100ms to 1h, got " + f.heartbeat_timeout, "e.g. 2s");
    }
  }
  double bandwidth_given = 0;
  if (!f.storage_bandwidth.empty()) {
    bandwidth_given = parse_quantity(f.storage_bandwidth, Dimension::kByteRate, "--storage-bandwidth", "");
    if (!(bandwidth_given > 0)) throw_input_error("--storage-bandwidth", "", "must be > 0", "e.g. 2GB/s");
  }
  std::string dir = f.checkpoint_dir;
  bool remove_dir = false;
  if (dir.empty()) {
    char tmpl[] = "/tmp/trainplan-recovery-XXXXXX";
    if (::mkdtemp(tmpl) == nullptr) throw std::runtime_error("cannot create a temporary folder in /tmp");
    dir = tmpl;
    remove_dir = true;
  } else {
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (ec || !std::filesystem::is_directory(dir)) {
      throw_input_error("--checkpoint-dir", "", "cannot create folder " + dir, "a writable folder");
    }
    if (!std::filesystem::is_empty(dir)) {
      throw_input_error("--checkpoint-dir", "", dir + " is not empty (an earlier run's checkpoints would be resumed)",
                        "an empty or new folder");
    }
  }
  std::vector<std::string> launch = split_words(f.launcher);
  if (launch.empty()) {
    launch = {"mpirun"};
    if (::geteuid() == 0) launch.push_back("--allow-run-as-root");
    launch.insert(launch.end(), {"--oversubscribe", "-np", std::to_string(layout.gpus)});
  }
  std::vector<std::string> worker = {self_executable(), "validate", "--backend", f.backend, "--plan", f.plan,
                                     "--steps", std::to_string(f.steps), "--warmup", std::to_string(f.warmup),
                                     "--max-time", "none", "--checkpoint-every", std::to_string(f.checkpoint_every),
                                     "--recovery-dir", dir, "--checkpoint-mode", f.checkpoint_mode};
  if (!f.calibration.empty()) worker.insert(worker.end(), {"--calibration", f.calibration});
  RecoveryConfig rc;
  rc.dir = dir;
  rc.ranks = layout.gpus;
  rc.fault_step = spec.step;
  rc.heartbeat_timeout_s = timeout_s;
  rc.max_attempt_s = 60 + 10 * total_steps * pred.step_time_s + timeout_s;
  rc.first_argv = launch;
  rc.first_argv.insert(rc.first_argv.end(), worker.begin(), worker.end());
  rc.first_argv.insert(rc.first_argv.end(), {"--recovery-attempt", "1", "--inject", spec.text});
  rc.resume_argv = launch;
  rc.resume_argv.insert(rc.resume_argv.end(), worker.begin(), worker.end());
  rc.resume_argv.insert(rc.resume_argv.end(), {"--recovery-attempt", "2"});

  const CheckpointCost unit = checkpoint_cost(model, cluster, layout, 1.0);
  StorageProbe storage;
  if (bandwidth_given > 0) {
    storage.write_bytes_per_s = storage.read_bytes_per_s = bandwidth_given;
  } else {
    storage = probe_storage(dir, layout.gpus, static_cast<int64_t>(unit.per_gpu_written_bytes));
  }
  ProgressLine progress("validate");
  progress.update("recovery run (fault, detection, relaunch)", 1, 1);
  const RecoveryMeasured m = supervise_recovery(rc);
  progress.clear();
  if (remove_dir) {
    std::error_code ec;
    std::filesystem::remove_all(dir, ec);
  }

  // The prediction: the failure model's checkpoint cost at the storage
  // rates, the simulated step for lost and redone work, the simulated
  // start of the task where the fault hits.
  const double step = pred.step_time_s;
  const int resumed = (spec.step - 1) / f.checkpoint_every * f.checkpoint_every;
  const double offset = fault_point_time_s(model, cluster, layout, f.backend, spec.rank);
  const bool async = f.checkpoint_mode == "async";
  const double write_s = unit.total_bytes / storage.write_bytes_per_s;
  const double load_s = unit.total_bytes / storage.read_bytes_per_s;
  const bool hang = spec.kind == InjectSpec::Kind::kHang;
  const double detect_s = hang ? timeout_s - offset + kPollS / 2 : kPollS / 2;
  const double restart_s = m.launch_s;
  // A relaunched job's first step is cold again (first touch of its
  // buffers, caches, lazy initialisation): as long as attempt 1's first.
  const double redo_s = m.first_step_s + (spec.step - resumed - 1) * step;
  std::vector<Compared> rows = {
      {"detection_s", detect_s, m.detection_s,
       hang ? "heartbeat timeout less the time since the last heartbeat" : "a rank's exit is seen at the next poll; poll/2"},
      {"restart_s", restart_s, m.restart_s, "attempt 1's launch (spawn to every rank ready)"},
      {"checkpoint_write_s", async ? unit.snapshot_s : write_s, m.checkpoint_write_s,
       async ? "failure model: the blocking snapshot, state bytes / host bandwidth" : "failure model: bytes / write bandwidth"},
      {"checkpoint_load_s", load_s, m.load_s, "failure model: bytes / read bandwidth"},
      {"lost_work_s", (spec.step - 1 - resumed) * step + offset, m.lost_work_s,
       "steps since the checkpoint x step + the fault's point in its step"},
      {"redo_s", redo_s, m.redo_s, "attempt 1's first (cold) step + the other steps since the checkpoint x step"},
      {"recovery_s", detect_s + restart_s + load_s + redo_s, m.recovery_s,
       "fault to the faulted step done again: detection + restart + load + redo"}};
  if (async) {
    rows.insert(rows.begin() + 3, Compared{"checkpoint_persist_s", write_s, m.checkpoint_persist_s,
                                           "failure model: bytes / write bandwidth, in the background"});
  }
  const double small_below = 0.05;  // 50 ms: launcher and file-system granularity on a shared machine
  nlohmann::json out;
  out["tool"] = std::string("trainplan ") + kVersion;
  out["command"] = "validate";
  out["inject"] = spec.text;
  out["plan"] = f.plan;
  out["model"] = model.name;
  out["cluster"] = cluster.name;
  out["backend"] = f.backend;
  out["checkpoint_every_steps"] = f.checkpoint_every;
  out["checkpoint_mode"] = f.checkpoint_mode;
  out["checkpoint_bytes_per_rank"] = unit.per_gpu_written_bytes;
  out["checkpoint_bytes_total"] = unit.total_bytes;
  out["storage_write_bytes_per_s"] = storage.write_bytes_per_s;
  out["storage_read_bytes_per_s"] = storage.read_bytes_per_s;
  out["storage_source"] = bandwidth_given > 0 ? "--storage-bandwidth" : "probed";
  out["heartbeat_timeout_s"] = timeout_s;
  out["detected_by"] = m.detected_by;
  out["resumed_from_step"] = m.resumed_from_step;
  out["predicted_resumed_from_step"] = resumed;
  out["launch_s"] = m.launch_s;
  out["fault_at_s"] = m.fault_at_s;
  out["since_heartbeat_s"] = m.since_heartbeat_s;
  out["first_step_s"] = m.first_step_s;
  out["predicted_step_time_s"] = step;
  out["results"] = compared_json(rows, small_below);
  if (!f.out.empty()) write_file_atomically(f.out, out.dump(2) + "\n", "--out");
  if (f.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("# trainplan %s validate --inject %s: %s (%s on %s, %d ranks) on the %s backend\n", kVersion,
              spec.text.c_str(), f.plan.c_str(), model.name.c_str(), cluster.name.c_str(), layout.gpus,
              f.backend.c_str());
  std::printf("# plan: %s\n", describe_plan(layout.plan).c_str());
  std::printf("# %d steps (%d warm-up), a%s checkpoint every %d steps: %.1f MiB per rank, %.1f MiB in all; "
              "storage %.2f GB/s write, %.2f GB/s read (%s)\n",
              total_steps, f.warmup, async ? "n asynchronous" : " blocking", f.checkpoint_every,
              unit.per_gpu_written_bytes / 1048576.0,
              unit.total_bytes / 1048576.0, storage.write_bytes_per_s / 1e9, storage.read_bytes_per_s / 1e9,
              bandwidth_given > 0 ? "--storage-bandwidth" : "probed in the checkpoint folder");
  std::printf("# fault: rank %d, step %d, %.3f s into training; detected by %s (heartbeat timeout %.2f s); resumed "
              "from step %d (predicted %d); predicted step %.6f s\n",
              spec.rank, spec.step, m.fault_at_s, m.detected_by.c_str(), timeout_s, m.resumed_from_step, resumed,
              step);
  print_compared(rows, small_below);
  return 0;
}

// validate --inject slow: the measured straggler tax and arrival spread of
// the slowed steps against the straggler model's for the same slow rank.
std::vector<Compared> compare_straggler(const ValidateFlags& f, const ModelSpec& model, const ClusterSpec& cluster,
                                        const Layout& layout, const InjectSpec& spec, const MeasuredStep& meas,
                                        nlohmann::json* out) {
  StragglerOptions so;
  if (spec.kind == InjectSpec::Kind::kLink) {
    // Every transfer of a one-node, two-rank job involves rank R: its slow
    // link is the node's fabric at F.
    so.spec.degraded_nvlink = {1.0, spec.factor};
    so.spec.text = "degraded_nvlink=1:" + fixed(spec.factor, 3);
  } else {
    so.spec.slow_rank = spec.rank;
    so.spec.slow_rank_factor = spec.factor;
    so.spec.text = "slow_rank=" + std::to_string(spec.rank) + ":" + fixed(spec.factor, 3);
  }
  so.samples = 1;
  so.simulate = simulate_options_for(f.backend);
  const StragglerReport sr = simulate_stragglers(model, cluster, layout, so);
  const double tax = meas.step_time_s > 0 ? meas.slowed_step_time_s / meas.step_time_s - 1 : 0;
  const std::vector<Compared> rows = {
      {"slowed_step_time_s", sr.step_mean_s, meas.slowed_step_time_s, "every rank simulated, " + so.spec.text},
      {"straggler_tax", sr.tax, tax, "slowed step / step - 1"},
      {"arrival_spread_s", sr.base_arrivals.range_mean_s, meas.arrival_range_s,
       "gradient syncs: last - first arrival, mean"},
      {"slowed_arrival_spread_s", sr.arrivals.range_mean_s, meas.slowed_arrival_range_s, "the same, slowed steps"}};
  (*out)["inject"] = spec.text;
  (*out)["slowed_step_times_s"] = meas.slowed_step_times_s;
  (*out)["straggler"] = compared_json(rows, 0.01 * meas.step_time_s);
  return rows;
}

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
  if (model.has_moe) {
    throw_input_error("--plan", "",
                      "validate cannot execute Mixture-of-Experts layers yet: the executors run dense layers only "
                      "(model " + model.name + " has a \"moe\" block)",
                      "validate a dense model's layout, or compare with a measured run via calibrate --from-runs");
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
    MemoryReport mr = estimate_memory(model, cluster, layout);
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
  // than the run repeats itself); else "MISS".
  constexpr double kCategoryTolerancePct = 20;
  auto category_verdict = [&](const Row& r) -> std::string {
    if (r.spread < 0) return "";
    if (r.predicted == 0 && r.measured == 0) return "-";
    if (std::max(r.predicted, r.measured) < 0.01 * meas.step_time_s) return "small";
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
  cmd->add_option("--out", f.out, "write predicted vs measured as JSON to this file");
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
