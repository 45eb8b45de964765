// `trainplan calibrate`: measure a cluster (collectives, GEMMs, memory
// copies) with the cpu or cuda backend, print nccl-tests-style tables, fit
// the cost model and write calibration.json; or fit nccl-tests output a user
// already has (--from-nccl-tests), or the step times of training runs a user
// measured (--from-runs).
#include <cstdio>
#include <filesystem>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "calibrate/backend.h"
#include "calibrate/fit.h"
#include "calibrate/nccl_tests_reader.h"
#include "calibrate/run_fit.h"
#include "calibrate/sweep.h"
#include "planner/cli/commands.h"
#include "planner/cli/output.h"
#include "planner/plan/plan_file.h"
#include "simulator/core/error.h"
#include "simulator/memory/memory_model.h"
#include "simulator/taskgraph/lowering.h"
#include "simulator/spec/data_dir.h"
#include "simulator/spec/json_reader.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

namespace {

struct CalibrateFlags {
  std::string backend;
  std::string out = "calibration.json";
  std::string min_bytes = "8", max_bytes;
  int factor = 2;
  int warmup = 5;
  int iters = 20;
  std::string collectives;
  std::vector<std::string> models;
  std::string mbs = "1,2,4";
  int64_t seq = 0;
  double gemm_max_flops = 0;
  std::string gemm_dtype;
  bool no_check = false;
  bool resume = false;
  bool json = false;
  std::vector<std::string> nccl_tests;
  std::string collective;
  int ranks = 0;
  std::string device;
  std::string from_runs;
  int ranks_per_node = 0;
  CLI::App* app = nullptr;  // to tell which flags were given
};

int64_t parse_size(const std::string& flag, const std::string& text) {
  // nccl-tests style: 8, 1K, 64M, 1G (binary), or with B/iB units.
  std::string t = text;
  if (!t.empty() && (t.back() == 'K' || t.back() == 'M' || t.back() == 'G')) {
    t = t.substr(0, t.size() - 1) + (t.back() == 'K' ? "KiB" : t.back() == 'M' ? "MiB" : "GiB");
  } else if (!t.empty() && std::isdigit(static_cast<unsigned char>(t.back()))) {
    t += "B";
  }
  const double v = parse_quantity(t, Dimension::kBytes, flag, "");
  // Buffers of this size are allocated (twice) on every rank: 64 GiB is
  // about half an H200.
  if (v < 4 || v > 64.0 * 1073741824.0) {
    throw_input_error(flag, "", "out of range: \"" + text + "\"", "allowed: 4 bytes to 64G, e.g. 8, 1K, 64M, 1G");
  }
  return static_cast<int64_t>(v);
}

void print_fits(const Calibration& c) {
  std::printf("#\n# Fit: time = latency + busbw_factor(n) * size / busbw (robust relative least squares)\n");
  std::printf("# %-15s %6s %6s %12s %12s %10s %8s\n", "collective", "scope", "ranks", "latency(us)", "busbw(GB/s)",
              "resid_rms", "samples");
  for (const CollectiveFitResult& f : c.collectives) {
    std::printf("  %-15s %6s %6d %12.2f %12.3f %10.3f %8d\n", collective_file_name(f.collective),
                f.inter_node ? "inter" : "intra", f.ranks, f.latency_s * 1e6, f.bus_bytes_per_s * 1e-9, f.residual_rms,
                f.samples);
  }
  if (c.peak_flop_per_s > 0) {
    std::printf("# GEMM: best %.4f TFLOP/s (%s) over %zu shapes; memory copy %.2f GB/s traffic, %.2f us per call\n",
                c.peak_flop_per_s * 1e-12, c.dtype.c_str(), c.gemm_table.size(), c.copy_bytes_per_s * 1e-9,
                c.kernel_overhead_s * 1e6);
  }
}

int run_from_nccl_tests(const CalibrateFlags& f) {
  check_output_path(f.out, "--out");
  if (f.app != nullptr && f.app->count("--ranks") > 0 && (f.ranks < 1 || f.ranks > kMaxGpus)) {
    throw_input_error("--ranks", "", "out of range: " + std::to_string(f.ranks), "allowed: 1 to " + std::to_string(kMaxGpus));
  }
  std::optional<Collective> given;
  if (!f.collective.empty()) {
    given = collective_from_name(f.collective);
    if (!given) {
      throw_input_error("--collective", "", "unknown collective \"" + f.collective + "\"",
                        "allowed: all_reduce, all_gather, reduce_scatter, alltoall, broadcast, sendrecv");
    }
  }
  Calibration c;
  c.tool = std::string("trainplan ") + kVersion;
  c.backend = "nccl-tests";
  c.versions = "nccl-tests output";
  if (f.app != nullptr && f.app->count("--ranks-per-node") > 0 && f.ranks_per_node < 1) {
    throw_input_error("--ranks-per-node", "", "out of range: " + std::to_string(f.ranks_per_node),
                      "allowed: 1 or more (the ranks of one NVLink domain)");
  }
  for (const std::string& path : f.nccl_tests) {
    NcclTestsRun run = parse_nccl_tests(detail::read_text_file(path), path, given, f.ranks);
    if (f.ranks_per_node > 0) {
      // The run's hosts are trays of one NVLink domain where its ranks fit in
      // one (calibrate --ranks-per-node): NVLink measured, not the network.
      run.nodes = (run.ranks + f.ranks_per_node - 1) / f.ranks_per_node;
      for (CollectiveSample& s : run.samples) s.inter_node = run.nodes > 1;
    }
    c.collective_samples.insert(c.collective_samples.end(), run.samples.begin(), run.samples.end());
    if (c.device.empty()) c.device = run.device;
    c.ranks = std::max(c.ranks, run.ranks);
    c.nodes = std::max({c.nodes, run.nodes, 1});
  }
  if (!f.device.empty()) c.device = f.device;
  if (c.device.empty()) throw_input_error("--device", "", "the output names no device", "pass --device \"NVIDIA H100 80GB HBM3\"");
  c.gpu_type = gpu_type_of(c.device);
  c.collectives = fit_collectives(c.collective_samples);
  c.complete = true;
  print_fits(c);
  write_file_atomically(f.out, calibration_json(c), "--out");
  std::printf("# wrote %s\n", f.out.c_str());
  return 0;
}

// runs.json: {"runs": [{"name": "...", "plan": "plan.json", "step_time":
// "12.3s", "peak_memory": "61GiB" (optional)}, ...]}; plan paths are
// relative to runs.json.
int run_from_runs(const CalibrateFlags& f) {
  check_output_path(f.out, "--out");
  const std::string& where = f.from_runs;
  nlohmann::json doc = detail::parse_json_text(detail::read_text_file(where), where);
  detail::JsonObject o(doc, where, "");
  const nlohmann::json& list = o.array("runs");
  o.finish();
  if (list.empty()) throw_input_error(where, "/runs", "is empty", "give at least one measured run");
  constexpr size_t kMaxRuns = 1000;
  if (list.size() > kMaxRuns) {
    throw_input_error(where, "/runs", "lists " + std::to_string(list.size()) + " runs", "allowed: 1 to 1000");
  }
  const std::filesystem::path base = std::filesystem::path(where).parent_path();
  std::vector<MeasuredRun> runs;
  std::vector<double> measured_memory;  // bytes, 0 if not given
  std::string gpu_type;
  int ranks = 1, nodes = 1;
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string ptr = "/runs/" + std::to_string(i);
    detail::JsonObject r(list[i], where, ptr);
    MeasuredRun run;
    run.name = r.string("name");
    if (run.name.empty()) throw_input_error(where, ptr + "/name", "is empty", "name the run");
    std::filesystem::path plan = r.string("plan");
    if (plan.is_relative()) plan = base / plan;
    run.step_time_s = r.quantity("step_time", Dimension::kDuration, 1e-9, 1e7);
    if (r.has("peak_memory")) {
      measured_memory.push_back(r.quantity("peak_memory", Dimension::kBytes, 1, 1e15));
    } else {
      r.allow("peak_memory");
      measured_memory.push_back(0);
    }
    r.finish();
    if (!std::filesystem::is_regular_file(plan)) {
      throw_input_error(where, ptr + "/plan", "no plan file " + plan.string(),
                        "give a plan.json (from recommend --save), its path relative to " + where);
    }
    PlanJob job = load_plan_job(plan.string(), "");
    run.model = job.model;
    run.cluster = job.cluster;
    run.gpus = job.file.gpus;
    run.plan = job.file.plan;
    const std::string type = gpu_type_of(run.cluster.gpu.name);
    if (gpu_type.empty()) gpu_type = type;
    if (type != gpu_type) {
      throw_input_error(where, ptr + "/plan", "runs on " + run.cluster.gpu.name + " (" + type + "), the first run on " +
                        gpu_type, "fit the runs of one GPU type at a time");
    }
    ranks = std::max(ranks, run.gpus);
    nodes = std::max(nodes, (run.gpus + run.cluster.gpus_per_node - 1) / run.cluster.gpus_per_node);
    // Every run must simulate before the fit starts.
    (void)predicted_step_time(run, RunScales{});
    runs.push_back(std::move(run));
  }
  std::vector<double> before;
  for (const MeasuredRun& r : runs) before.push_back(predicted_step_time(r, RunScales{}));
  Calibration c;
  c.tool = std::string("trainplan ") + kVersion;
  c.backend = "runs";
  c.versions = "fit to " + std::to_string(runs.size()) + " measured runs (" + where + ")";
  c.device = runs.front().cluster.gpu.name;
  c.gpu_type = gpu_type;
  c.ranks = ranks;
  c.nodes = nodes;
  c.complete = true;
  c.run_fit = fit_runs(runs);

  std::printf("# trainplan %s calibrate --from-runs %s: %zu runs on %s\n", kVersion, where.c_str(), runs.size(),
              c.device.c_str());
  std::printf("# error = (predicted - measured) / measured; published: the cluster's figures, fitted: with the scales\n");
  std::printf("%-24s %12s %12s %8s %12s %8s %12s %8s %14s\n", "run", "measured(s)", "published(s)", "error",
              "fitted(s)", "error", "leave-1-out", "error", "memory error");
  auto err = [](double pred, double meas) {
    if (pred <= 0) return std::string("-");
    char b[32];
    std::snprintf(b, sizeof b, "%+.1f%%", 100 * (pred - meas) / meas);
    return std::string(b);
  };
  for (size_t i = 0; i < runs.size(); ++i) {
    const RunResidual& r = c.run_fit.runs[i];
    std::string mem = "-";
    if (measured_memory[i] > 0) {
      const MeasuredRun& run = runs[i];
      const Layout L = resolve_plan(run.model, run.cluster, run.gpus, run.plan);
      mem = err(plan_memory(run.model, run.cluster, L).peak_bytes, measured_memory[i]);
    }
    std::printf("%-24s %12.4f %12.4f %8s %12.4f %8s %12.4f %8s %14s\n", r.name.c_str(), r.measured_s, before[i],
                err(before[i], r.measured_s).c_str(), r.predicted_s, err(r.predicted_s, r.measured_s).c_str(),
                r.leave_one_out_s, err(r.leave_one_out_s, r.measured_s).c_str(), mem.c_str());
  }
  const RunScales& s = c.run_fit.scales;
  std::printf("# scales on the published figures: gemm_efficiency x%.3f, hbm_efficiency x%.3f, attention_efficiency "
              "x%.3f, intra_bandwidth x%.3f, inter_bandwidth x%.3f, host_op_time x%.3f\n",
              s.gemm_efficiency, s.hbm_efficiency, s.attention_efficiency, s.intra_bandwidth, s.inter_bandwidth,
              s.host_op_time);
  std::printf("# residual %.1f%% rms, leave-one-out %.1f%% rms\n", 100 * c.run_fit.residual_rms,
              100 * c.run_fit.leave_one_out_rms);
  for (const std::string& w : run_fit_warnings(c.run_fit)) {
    std::printf("# WARNING: %s\n", w.c_str());
    std::fprintf(stderr, "trainplan: calibrate: warning: %s\n", w.c_str());
  }
  write_file_atomically(f.out, calibration_json(c), "--out");
  std::printf("# wrote %s\n", f.out.c_str());
  return 0;
}

int run_calibrate(CalibrateFlags& f, int* argc, char*** argv) {
  check_output_path(f.out, "--out");
  if (!f.from_runs.empty()) {
    if (!f.nccl_tests.empty()) {
      throw_input_error("--from-runs", "", "cannot be combined with --from-nccl-tests", "fit one kind of input at a time");
    }
    return run_from_runs(f);
  }
  if (!f.nccl_tests.empty()) return run_from_nccl_tests(f);
  if (f.backend.empty()) throw_input_error("--backend", "", "is required", "allowed: cpu, cuda");
  // Each flag has a short nccl-tests alias; errors name both forms.
  if (f.factor < 2 || f.factor > 1024) {
    throw_input_error("-f/--stepfactor", "", "out of range: " + std::to_string(f.factor), "allowed: 2 to 1024");
  }
  if (f.iters < 1 || f.iters > 100000) {
    throw_input_error("-n/--iters", "", "out of range: " + std::to_string(f.iters), "allowed: 1 to 100000");
  }
  if (f.warmup < 0 || f.warmup > 100000) {
    throw_input_error("-w/--warmup", "", "out of range: " + std::to_string(f.warmup), "allowed: 0 to 100000");
  }
  if (f.seq < 0 || f.seq > kMaxSeqLen || (f.app != nullptr && f.app->count("--seq") > 0 && f.seq == 0)) {
    throw_input_error("--seq", "", "out of range: " + std::to_string(f.seq),
                      "allowed: 1 to " + std::to_string(kMaxSeqLen) + "; omit it for the model's");
  }
  if (!(f.gemm_max_flops >= 0 && f.gemm_max_flops <= 1e18) ||
      (f.app != nullptr && f.app->count("--gemm-max-flops") > 0 && f.gemm_max_flops == 0)) {
    throw_input_error("--gemm-max-flops", "", "out of range", "allowed: a FLOP count from 1 to 1e18");
  }
  SweepConfig cfg;
  cfg.min_bytes = parse_size("-b/--minbytes", f.min_bytes);
  cfg.max_bytes = parse_size("-e/--maxbytes", f.max_bytes.empty() ? (f.backend == "cpu" ? "16M" : "1G") : f.max_bytes);
  if (cfg.max_bytes < cfg.min_bytes) {
    throw_input_error("-e/--maxbytes", "", "must be >= -b/--minbytes (" + std::to_string(cfg.min_bytes) + " bytes)", "");
  }
  cfg.factor = f.factor;
  cfg.warmup = f.warmup;
  cfg.iters = f.iters;
  cfg.check = !f.no_check;
  cfg.json = f.json;
  if (!f.collectives.empty()) {
    cfg.collectives.clear();
    std::stringstream ss(f.collectives);
    std::string item;
    while (std::getline(ss, item, ',')) {
      auto c = collective_from_name(item);
      if (!c) {
        throw_input_error("--collectives", "", "unknown collective \"" + item + "\"",
                          "allowed: all_reduce, all_gather, reduce_scatter, alltoall, broadcast, sendrecv");
      }
      cfg.collectives.push_back(*c);
    }
  }
  std::vector<ModelSpec> models;
  for (const std::string& m : f.models) models.push_back(load_model(m));
  if (f.models.empty() && f.backend == "cuda") {
    for (const std::string& m : builtin_model_names()) models.push_back(load_model(m));
  }
  std::vector<int64_t> mbs;
  {
    std::stringstream ss(f.mbs);
    std::string item;
    while (std::getline(ss, item, ',')) {
      if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 5) {
        throw_input_error("--mbs", "", "\"" + f.mbs + "\" is not a list of micro-batch sizes", "e.g. 1,2,4");
      }
      mbs.push_back(std::stoll(item));
    }
  }
  const double max_flops = f.gemm_max_flops > 0 ? f.gemm_max_flops : (f.backend == "cpu" ? 2e9 : 2e13);
  cfg.gemm_shapes = training_gemm_shapes(models, mbs, f.seq, max_flops);
  cfg.gemm_dtype = !f.gemm_dtype.empty() ? f.gemm_dtype : (f.backend == "cpu" ? "fp32" : "bf16");
  // A shared CPU is noisy: spend 0.1 s per GEMM shape (median of 5 batches)
  // so one burst of other work does not skew a shape; GPUs are steadier.
  cfg.gemm_min_time_s = f.backend == "cpu" ? 0.1 : 0.02;
  for (int64_t s = int64_t{1} << 20; s <= (f.backend == "cpu" ? int64_t{64} << 20 : int64_t{1} << 30); s *= 4) {
    cfg.copy_sizes.push_back(s);
  }
  std::unique_ptr<Backend> backend = make_backend(f.backend, argc, argv);
  if (!backend->supports(cfg.gemm_dtype)) {
    throw_input_error("--gemm-dtype", "", "the " + f.backend + " backend cannot run " + cfg.gemm_dtype + " GEMMs",
                      f.backend == "cpu" ? "the cpu backend runs fp32" : "allowed: bf16, fp16, fp32, tf32");
  }
  if (f.ranks_per_node != 0) {
    const int world = backend->world().size();
    if (f.ranks_per_node < 1 || world % f.ranks_per_node != 0) {
      throw_input_error("--ranks-per-node", "",
                        std::to_string(f.ranks_per_node) + " does not divide the " + std::to_string(world) + " ranks",
                        "allowed: a divisor of the rank count (the ranks of one NVLink domain, numbered domain by domain)");
    }
    cfg.ranks_per_node = f.ranks_per_node;
  }
  const bool root = backend->world().rank() == 0;
  Calibration cal;
  if (f.resume && std::filesystem::exists(f.out)) {
    cal = load_calibration(f.out);
    if (cal.backend != backend->name()) {
      throw_input_error("--resume", "", f.out + " was measured with the " + cal.backend + " backend",
                        "resume with --backend " + cal.backend + " or drop --resume");
    }
  }
  cal.tool = std::string("trainplan ") + kVersion;
  cal.backend = backend->name();
  cal.versions = backend->versions();
  cal.device = backend->device().name;
  cal.gpu_type = gpu_type_of(cal.device);
  cal.complete = false;
  auto checkpoint = [&](const Calibration& c) {
    Calibration copy = c;
    copy.collectives = fit_collectives(copy.collective_samples);
    fit_compute(&copy);
    copy.complete = false;
    write_file_atomically(f.out, calibration_json(copy), "--out");
  };
  const int64_t wrong = run_sweep(*backend, cfg, &cal, stdout, checkpoint);
  cal.collectives = fit_collectives(cal.collective_samples);
  fit_compute(&cal);
  cal.complete = true;
  if (root) {
    if (!f.json) print_fits(cal);
    write_file_atomically(f.out, calibration_json(cal), "--out");
    const std::vector<std::string> poor = poor_fits(cal);
    for (const std::string& w : poor) {
      if (!f.json) std::printf("# WARNING: poor fit: %s\n", w.c_str());
      std::fprintf(stderr, "trainplan: calibrate: warning: poor fit: %s; predictions from it may be off by as much "
                           "(rerun on a quiet machine, or with more --iters)\n", w.c_str());
    }
    const std::string verdict = wrong != 0 ? "ERROR:" : poor.empty() ? "OK:" : "OK with " + std::to_string(poor.size()) +
                                                                                 " poor fits (see the warnings):";
    if (!f.json) std::printf("# %s %lld wrong elements; wrote %s\n", verdict.c_str(), static_cast<long long>(wrong),
                             f.out.c_str());
  }
  if (wrong != 0) {
    std::fprintf(stderr, "trainplan: calibrate: %lld wrong elements in collective results\n", static_cast<long long>(wrong));
    return 1;
  }
  return 0;
}

}  // namespace

void register_calibrate_command(CLI::App* app, int* status, int* argc, char*** argv) {
  static CalibrateFlags f;
  CLI::App* cmd = app->add_subcommand("calibrate", "measure collectives, GEMMs and memory bandwidth; write calibration.json");
  cmd->add_option("--backend", f.backend, "cpu (Eigen + MPI) or cuda (cuBLAS + NCCL)");
  cmd->add_option("-o,--out", f.out, "calibration file to write (default calibration.json)");
  cmd->add_option("-b,--minbytes", f.min_bytes, "smallest collective size (default 8)");
  cmd->add_option("-e,--maxbytes", f.max_bytes, "largest collective size (default 16M cpu, 1G cuda)");
  cmd->add_option("-f,--stepfactor", f.factor, "size multiplier between steps (default 2)");
  cmd->add_option("-w,--warmup", f.warmup, "warm-up iterations per size (default 5)");
  cmd->add_option("-n,--iters", f.iters, "timed iterations per size (default 20)");
  cmd->add_option("--collectives", f.collectives, "comma-separated subset (default all)");
  cmd->add_option("--ranks-per-node", f.ranks_per_node,
                  "ranks that share one node's NVLink, numbered node by node (default: the ranks of one host); on a "
                  "GB200/GB300 NVL72, whose NVLink domain spans trays of 4 GPUs, the domain's ranks, e.g. 64 (also "
                  "with --from-nccl-tests: a run of at most N ranks measured NVLink)");
  cmd->add_option("--model", f.models, "add the GEMM shapes of this model (repeatable; cuda default: all built-ins)");
  cmd->add_option("--mbs", f.mbs, "micro-batch sizes for the model shapes (default 1,2,4)");
  cmd->add_option("--seq", f.seq, "sequence length for the model shapes (default: the model's)");
  cmd->add_option("--gemm-max-flops", f.gemm_max_flops, "skip GEMM shapes above this many FLOPs");
  cmd->add_option("--gemm-dtype", f.gemm_dtype, "GEMM dtype (default bf16 cuda, fp32 cpu)");
  cmd->add_flag("--no-check", f.no_check, "skip the data check of collective results");
  cmd->add_flag("--resume", f.resume, "keep the samples already in --out and measure the rest");
  cmd->add_flag("--json", f.json, "JSON rows instead of tables");
  cmd->add_option("--from-nccl-tests", f.nccl_tests, "fit nccl-tests output (text or -J JSON) instead of measuring");
  cmd->add_option("--collective", f.collective, "with --from-nccl-tests: the collective, if the output does not say");
  cmd->add_option("--ranks", f.ranks, "with --from-nccl-tests: the rank count, if the output does not say");
  cmd->add_option("--device", f.device, "with --from-nccl-tests: the GPU, if the output does not say");
  cmd->add_option("--from-runs", f.from_runs,
                  "fit the model's efficiency scales to measured step times (runs.json: name, plan, step_time)");
  f.app = cmd;
  cmd->callback([status, argc, argv] { *status = run_calibrate(f, argc, argv); });
}

}  // namespace trainplan
