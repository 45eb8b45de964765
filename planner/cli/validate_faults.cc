#include "planner/cli/validate_faults.h"

#include <signal.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iostream>
#include <memory>
#include <sstream>
#include <stdexcept>

#include "calibrate/recovery.h"
#include "planner/cli/output.h"
#include "planner/plan/plan_file.h"
#include "simulator/core/error.h"
#include "simulator/core/units.h"
#include "simulator/faults/failures.h"
#include "simulator/faults/stragglers.h"

namespace trainplan {

namespace {

std::string compared_verdict(const Compared& c, double small_below) {
  if (std::max(c.predicted, c.measured) < small_below) return "small";
  if (c.measured > 0 && std::fabs(c.predicted - c.measured) <= 0.2 * c.measured) return "ok";
  return "MISS";
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

}  // namespace

void print_compared(const std::vector<Compared>& rows, double small_below) {
  std::printf("%-24s %14s %14s %9s  %-7s %s\n", "quantity", "predicted", "measured", "error", "verdict", "how");
  for (const Compared& c : rows) {
    char err[32] = "-";
    if (c.measured > 0) std::snprintf(err, sizeof err, "%+.1f%%", 100 * (c.predicted - c.measured) / c.measured);
    std::printf("%-24s %14.6f %14.6f %9s  %-7s %s\n", c.name.c_str(), c.predicted, c.measured, err,
                compared_verdict(c, small_below).c_str(), c.note.c_str());
  }
}

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

namespace {
// Sampled steps of the jitter fit and of the jittered predictions: enough
// that the mean arrival spread of a two-rank step is within about 5%.
constexpr int kJitterSamples = 64;
}  // namespace

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
  so.simulate = simulate_options_for(f.backend);
  // The machine's own jitter, the baseline the tax is measured against: the
  // plain steps' ranks never arrive at a gradient sync together (their
  // compute differs from step to step), and the simulation's identical
  // ranks do.  A per-GPU, per-step lognormal jitter whose simulated arrival
  // spread equals the plain steps' measured one (bisection on sigma; the
  // spread grows with sigma) is given to both the plain and the slowed
  // prediction; a slowed rank that is always the last hides it, which is
  // what the measured tax sees.  No spread measured (a pipeline without
  // gradient syncs between ranks): no jitter.
  StragglerOptions plain = so;
  plain.spec = StragglerSpec{};
  plain.samples = kJitterSamples;
  double sigma = 0;
  if (meas.arrival_range_s > 0) {
    auto spread_at = [&](double sg) {
      plain.spec.jitter = {SlowdownDistribution::Kind::kLognormal, sg, 0};
      return simulate_stragglers(model, cluster, layout, plain).arrivals.range_mean_s;
    };
    double lo = 0, hi = 0.5;
    if (spread_at(hi) > meas.arrival_range_s) {
      for (int i = 0; i < 30; ++i) {
        const double mid = 0.5 * (lo + hi);
        (spread_at(mid) < meas.arrival_range_s ? lo : hi) = mid;
      }
      sigma = 0.5 * (lo + hi);
    } else {
      sigma = hi;
    }
  }
  std::string jitter_text;
  if (sigma > 0) {
    const SlowdownDistribution jitter{SlowdownDistribution::Kind::kLognormal, sigma, 0};
    plain.spec.jitter = jitter;
    so.spec.jitter = jitter;
    jitter_text = ", jitter=" + jitter.describe() + " (fitted to the plain steps' arrival spread)";
    so.spec.text += jitter_text;
  }
  so.samples = sigma > 0 ? kJitterSamples : 1;
  const StragglerReport sr = simulate_stragglers(model, cluster, layout, so);
  const StragglerReport base = sigma > 0 ? simulate_stragglers(model, cluster, layout, plain) : StragglerReport{};
  const double base_step = sigma > 0 ? base.step_mean_s : sr.base_step_s;
  const double base_spread = sigma > 0 ? base.arrivals.range_mean_s : sr.base_arrivals.range_mean_s;
  const double tax_pred = base_step > 0 ? sr.step_mean_s / base_step - 1 : 0;
  const double tax = meas.step_time_s > 0 ? meas.slowed_step_time_s / meas.step_time_s - 1 : 0;
  const std::vector<Compared> rows = {
      {"slowed_step_time_s", sr.step_mean_s, meas.slowed_step_time_s, "every rank simulated, " + so.spec.text},
      {"straggler_tax", tax_pred, tax, "slowed step / step - 1"},
      {"arrival_spread_s", base_spread, meas.arrival_range_s,
       sigma > 0 ? "gradient syncs: last - first arrival, mean (the jitter's fit)"
                 : "gradient syncs: last - first arrival, mean"},
      {"slowed_arrival_spread_s", sr.arrivals.range_mean_s, meas.slowed_arrival_range_s, "the same, slowed steps"}};
  (*out)["jitter_sigma"] = sigma;
  (*out)["inject"] = spec.text;
  (*out)["slowed_step_times_s"] = meas.slowed_step_times_s;
  (*out)["straggler"] = compared_json(rows, 0.01 * meas.step_time_s);
  return rows;
}

}  // namespace trainplan
