// `trainplan simulate`: one training step through the discrete-event
// simulator: step time, throughput, MFU/HFU, bubble, exposed communication,
// memory per stage and where the time goes; with the fault options
// (simulator/faults/faults.h), the straggler tax, goodput under failures and
// the expected time to train.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "planner/cli/commands.h"
#include "planner/report/op_table.h"
#include "planner/cli/output.h"
#include "planner/cli/plan_flags.h"
#include "planner/report/html_report.h"
#include "simulator/core/error.h"
#include "simulator/faults/failure_profiles.h"
#include "simulator/faults/convergence.h"
#include "simulator/faults/faults.h"
#include "simulator/framework/framework.h"
#include "simulator/report/step_report.h"

namespace trainplan {

namespace {

struct SimulateFlags {
  PlanFlags plan;
  bool json = false;
  bool full = false;
  bool ops = false;  // --ops: each layer kind's ops as charged (op_table.h)
  std::string trace;
  std::string html;
  std::string save;         // --save plan.json: the plan, for export, validate, memory, simulate --plan
  std::string convergence;  // --convergence SPEC (async plans)
  FaultFlags faults;
  CLI::App* app = nullptr;
};

nlohmann::json spread_json(const ArrivalSpread& a) {
  return {{"syncs", a.syncs},
          {"std_mean_ms", rounded(a.std_mean_s * 1e3, 3)},
          {"range_mean_ms", rounded(a.range_mean_s * 1e3, 3)},
          {"range_p90_ms", rounded(a.range_p90_s * 1e3, 3)},
          {"range_max_ms", rounded(a.range_max_s * 1e3, 3)}};
}

nlohmann::json staleness_json(const Staleness& s) {
  return {{"mean", rounded(s.mean, 3)}, {"p90", s.p90}, {"max", s.max}, {"samples", s.samples}};
}

// Adds the fault fields to `out` (DESIGN: fields carry their unit).
// Interruptions expected over the run, by cause, from --failure-rates.
std::vector<CauseCount> causes_of(const FaultReport& fr, const FaultConfig& cfg, int gpus, int nodes) {
  if (cfg.failure_profile.empty() || !fr.has_time_to_train) return {};
  // Failures strike while the job runs: the Monte Carlo's mean count is the
  // running time in units of the job's MTBF (the closed form's run time
  // otherwise).
  const FailureReport& f = fr.failures;
  const double running_s = f.mc.failures_mean > 0 ? f.mc.failures_mean * f.job_mtbf_s : fr.time_to_train_expected_s;
  return expected_by_cause(failure_profile(cfg.failure_profile), gpus, nodes, running_s);
}

void faults_to_json(const FaultReport& fr, const FaultConfig& cfg, int gpus, int nodes, nlohmann::json& out) {
  out["seed"] = cfg.seed;
  if (fr.has_stragglers) {
    const StragglerReport& s = fr.stragglers;
    out["straggler_tax"] = rounded(s.tax, 4);
    nlohmann::json j;
    j["spec"] = cfg.stragglers.text;
    j["sampled_steps"] = s.samples;
    j["simulated_ranks"] = s.simulated_ranks;
    j["step_time_s"] = {{"without", rounded(s.base_step_s, 6)}, {"mean", rounded(s.step_mean_s, 6)},
                        {"p50", rounded(s.step_p50_s, 6)},      {"p90", rounded(s.step_p90_s, 6)},
                        {"max", rounded(s.step_max_s, 6)}};
    j["gpu_busy_fraction"] = {{"without", rounded(s.base_busy_fraction, 4)}, {"with", rounded(s.busy_fraction, 4)}};
    j["sync_arrival_spread"] = {{"without", spread_json(s.base_arrivals)}, {"with", spread_json(s.arrivals)}};
    j["jitter_max_tax"] = rounded(s.jitter_max_tax, 4);
    if (s.async) {
      j["tokens_per_s"] = {{"without", rounded(s.base_tokens_per_s, 1)}, {"with", rounded(s.tokens_per_s, 1)}};
      j["staleness"] = {{"without", staleness_json(s.base_staleness)}, {"with", staleness_json(s.staleness)}};
    }
    out["stragglers"] = j;
  }
  if (fr.has_time_to_train) {
    out["train_tokens"] = cfg.train_tokens;
    out["steps"] = fr.steps;
    out["goodput"] = rounded(fr.goodput, 4);
    out["time_to_train_s"] = {{"mean", rounded(fr.time_to_train_mean_s, 1)},
                              {"p50", rounded(fr.time_to_train_p50_s, 1)},
                              {"p90", rounded(fr.time_to_train_p90_s, 1)},
                              {"expected", rounded(fr.time_to_train_expected_s, 1)},
                              {"fault_free", rounded(static_cast<double>(fr.steps) * fr.base_step_s, 1)}};
  }
  if (fr.has_failures) {
    const FailureReport& f = fr.failures;
    out["checkpoint_interval_s"] = rounded(f.interval_s, 3);
    out["young_daly_interval_s"] = rounded(f.young_interval_s, 3);
    nlohmann::json j;
    j["rate_per_hour"] = rounded(f.rate_per_hour, 6);
    j["job_mtbf_s"] = rounded(f.job_mtbf_s, 1);
    j["mtbf_gpu_s"] = cfg.failures.mtbf_gpu_s;
    j["mtbf_node_s"] = cfg.failures.mtbf_node_s;
    j["detect_s"] = cfg.failures.detect_s;
    j["restart_s"] = cfg.failures.restart_s;
    j["storage_bandwidth_gb_per_s"] = rounded(cfg.failures.storage_bytes_per_s * 1e-9, 3);
    j["checkpoint"] = {{"size_gib", rounded(to_gib(f.checkpoint.total_bytes), 3)},
                       {"written_per_gpu_gib", rounded(to_gib(f.checkpoint.per_gpu_written_bytes), 4)},
                       {"state_per_gpu_gib", rounded(to_gib(f.checkpoint.per_gpu_state_bytes), 4)},
                       {"write_s", rounded(f.checkpoint.write_s, 3)},
                       {"load_s", rounded(f.checkpoint.load_s, 3)}};
    if (cfg.checkpoint_mode_given) j["checkpoint"]["mode"] = f.async_checkpoint ? "async" : "sync";
    if (f.async_checkpoint) {
      // Blocking per checkpoint: the snapshot, plus the wait for the
      // previous persist when the interval is shorter than it.
      const double blocking = f.run.checkpoint_s + std::max(0.0, f.run.persist_s - f.interval_s);
      j["checkpoint"]["snapshot_s"] = rounded(f.checkpoint.snapshot_s, 6);
      j["checkpoint"]["persist_s"] = rounded(f.run.persist_s, 3);
      j["checkpoint"]["blocking_per_checkpoint_s"] = rounded(blocking, 6);
      j["checkpoint"]["snapshot_host_gib_per_node"] = rounded(to_gib(f.checkpoint.snapshot_host_bytes_per_node), 3);
    }
    j["interval"] = {{"mode", f.auto_interval ? "auto" : "given"},
                     {"steps", f.interval_steps},
                     {"seconds", rounded(f.interval_s, 3)},
                     {"optimal_continuous_s", rounded(f.optimal_interval_s, 3)},
                     {"young_s", rounded(f.young_interval_s, 3)},
                     {"daly_s", rounded(f.daly_interval_s, 3)}};
    j["goodput_expected"] = rounded(f.goodput_expected, 4);
    j["goodput_at_young_interval"] = rounded(f.goodput_young, 4);
    if (!cfg.failure_profile.empty()) {
      j["failure_rates"] = cfg.failure_profile;
      nlohmann::json by = nlohmann::json::array();
      for (const CauseCount& k : causes_of(fr, cfg, gpus, nodes)) {
        by.push_back({{"cause", k.name}, {"expected_interruptions", rounded(k.expected, 3)}});
      }
      j["interruptions_by_cause"] = by;
    }
    if (!f.cannot_run.empty()) j["cannot_run"] = f.cannot_run;
    j["runs"] = f.mc.runs;
    j["failures_mean"] = rounded(f.mc.failures_mean, 2);
    const WallBreakdown& b = f.mc.breakdown;
    j["wall_breakdown_s"] = {{"useful", rounded(b.useful, 1)},     {"checkpoint", rounded(b.checkpoint, 1)},
                             {"lost", rounded(b.lost, 1)},         {"downtime", rounded(b.downtime, 1)},
                             {"load", rounded(b.load, 1)}};
    if (f.has_slow_nodes) {
      j["wall_breakdown_s"]["slow"] = rounded(b.slow, 1);
      j["wall_breakdown_s"]["drain"] = rounded(b.drain, 1);
      const FailureModel& fm = cfg.failures;
      const double wall = f.mc.mean_s;
      nlohmann::json sn;
      sn["mtbf_node_s"] = fm.slow_node_mtbf_s;
      sn["factor"] = fm.slow_node_factor;
      sn["detect_s"] = fm.slow_detect_s;
      sn["spare_nodes"] = fm.spare_nodes;
      sn["repair_s"] = fm.repair_s;
      sn["rate_per_hour"] = rounded(f.slow_rate_per_hour, 6);
      sn["spares_in_repair_mean"] = rounded(f.spare_load, 4);
      sn["drain_s"] = rounded(f.run.slow.drain_s, 3);
      sn["expected"] = {{"slow_nodes", rounded(f.slow_expected_events, 2)},
                        {"drains", rounded(f.slow_expected_drains, 2)},
                        {"slow_wall_fraction", rounded(f.slow_wall_fraction, 4)}};
      sn["monte_carlo"] = {{"slow_nodes", rounded(f.mc.slow_events_mean, 2)},
                           {"drains", rounded(f.mc.drains_mean, 2)},
                           {"slow_wall_fraction", rounded(wall > 0 ? f.mc.slow_wall_mean_s / wall : 0, 4)}};
      j["slow_nodes"] = sn;
    }
    nlohmann::json sweep = nlohmann::json::array();
    for (const IntervalPoint& pt : f.sweep) {
      sweep.push_back({{"interval_s", rounded(pt.interval_s, 3)}, {"goodput", rounded(pt.goodput, 4)}});
    }
    j["interval_sweep"] = sweep;
    out["failures"] = j;
  }
}

void print_faults(const FaultReport& fr, const FaultConfig& cfg, int gpus, int nodes) {
  if (fr.has_stragglers) {
    const StragglerReport& s = fr.stragglers;
    std::printf("stragglers       %s (%d sampled steps, %d ranks simulated, seed %llu)\n", cfg.stragglers.text.c_str(),
                s.samples, s.simulated_ranks, static_cast<unsigned long long>(cfg.seed));
    std::printf("  step time      %.4f s -> %.4f s mean (p50 %.4f, p90 %.4f): straggler tax %.1f%%\n", s.base_step_s,
                s.step_mean_s, s.step_p50_s, s.step_p90_s, 100 * s.tax);
    std::printf("  GPU busy       %.1f%% -> %.1f%% of the step in compute kernels\n", 100 * s.base_busy_fraction,
                100 * s.busy_fraction);
    if (s.arrivals.syncs > 0) {
      std::printf("  gradient sync  arrival spread (last - first rank) mean %.2f ms, p90 %.2f ms, max %.2f ms; std %.2f ms\n",
                  s.arrivals.range_mean_s * 1e3, s.arrivals.range_p90_s * 1e3, s.arrivals.range_max_s * 1e3,
                  s.arrivals.std_mean_s * 1e3);
    }
    if (s.jitter_max_tax > 0) {
      std::printf("  bound          E[max of %d jitter factors] - 1 = %.1f%% (the tax of a compute-bound step)\n", gpus,
                  100 * s.jitter_max_tax);
    }
    if (s.async) {
      std::printf("  async          %.0f -> %.0f tokens/s; staleness mean %.2f -> %.2f, p90 %.0f, max %.0f\n",
                  s.base_tokens_per_s, s.tokens_per_s, s.base_staleness.mean, s.staleness.mean, s.staleness.p90,
                  s.staleness.max);
    }
  }
  if (fr.has_failures) {
    const FailureReport& f = fr.failures;
    const FailureModel& m = cfg.failures;
    auto hours = [](double s) { return s >= 3600 ? fixed(s / 3600, 0) + " h" : s > 0 ? human_duration(s) : std::string("never"); };
    std::printf("failures         MTBF per GPU %s, per node %s: the job fails every %s (%.3f per hour)\n",
                hours(m.mtbf_gpu_s).c_str(), hours(m.mtbf_node_s).c_str(), human_duration(f.job_mtbf_s).c_str(),
                f.rate_per_hour);
    std::printf("  checkpoint     %.1f GiB (weights + optimizer), %.3f GiB written per GPU; write %s, load %s at %.1f GB/s\n",
                to_gib(f.checkpoint.total_bytes), to_gib(f.checkpoint.per_gpu_written_bytes),
                human_duration(f.checkpoint.write_s).c_str(), human_duration(f.checkpoint.load_s).c_str(),
                m.storage_bytes_per_s * 1e-9);
    if (f.async_checkpoint) {
      const double blocking = f.run.checkpoint_s + std::max(0.0, f.run.persist_s - f.interval_s);
      std::printf("  async          snapshot %s blocking (%.2f GiB per GPU over PCIe, %.0f GiB of host memory per node), "
                  "persist %s in the background; %s blocked per checkpoint\n",
                  human_duration(f.checkpoint.snapshot_s).c_str(), to_gib(f.checkpoint.per_gpu_state_bytes),
                  to_gib(f.checkpoint.snapshot_host_bytes_per_node), human_duration(f.run.persist_s).c_str(),
                  human_duration(blocking).c_str());
    }
    std::printf("  recovery       detect %s + restart %s + load %s\n", human_duration(m.detect_s).c_str(),
                human_duration(m.restart_s).c_str(), human_duration(f.checkpoint.load_s).c_str());
    std::printf("  interval       %s (%lld steps, %s); optimum %s, Young %s, Daly %s\n", human_duration(f.interval_s).c_str(),
                static_cast<long long>(f.interval_steps), f.auto_interval ? "auto" : "given",
                human_duration(f.optimal_interval_s).c_str(), human_duration(f.young_interval_s).c_str(),
                human_duration(f.daly_interval_s).c_str());
    if (f.async_checkpoint) {
      std::printf("                 (async: Young/Daly with delta = the snapshot; an interval below the persist only "
                  "adds waits)\n");
    }
    if (f.has_slow_nodes) {
      const double wall = f.mc.mean_s;
      std::printf("  slow nodes     MTBF %s per node: one of %d turns slow every %s, %.1f over the run; steps x%.2f "
                  "until detected (%s) and drained\n",
                  hours(m.slow_node_mtbf_s).c_str(), nodes, human_duration(3600 / f.slow_rate_per_hour).c_str(),
                  f.mc.slow_events_mean, m.slow_node_factor, human_duration(m.slow_detect_s).c_str());
      if (m.spare_nodes == 0) {
        std::printf("  spares         none: the first slow node stays to the end; a slow node in the job %.1f%% of the "
                    "time (closed form %.1f%%)\n",
                    wall > 0 ? 100 * f.mc.slow_wall_mean_s / wall : 0.0, 100 * f.slow_wall_fraction);
      } else {
        std::printf("  spares         %d, repair %s (%.2f in repair on average): %.1f drains of %s (save + restart + "
                    "load); a slow node in the job %.1f%% of the time (closed form %.1f%%)\n",
                    m.spare_nodes, human_duration(m.repair_s).c_str(), f.spare_load, f.mc.drains_mean,
                    human_duration(f.run.slow.drain_s).c_str(), wall > 0 ? 100 * f.mc.slow_wall_mean_s / wall : 0.0,
                    100 * f.slow_wall_fraction);
      }
    }
    const std::vector<CauseCount> causes = causes_of(fr, cfg, gpus, nodes);
    if (!causes.empty()) {
      double total = 0;
      for (const CauseCount& k : causes) total += k.expected;
      std::printf("  by cause       %.1f interruptions expected over the run (%s rates):", total,
                  cfg.failure_profile.c_str());
      for (size_t i = 0; i < causes.size() && i < 5; ++i) std::printf("%s %s %.1f", i ? "," : "", causes[i].name, causes[i].expected);
      std::printf("%s\n", causes.size() > 5 ? ", ..." : "");
    }
    std::printf("  goodput        %.1f%% (closed form %.1f%%; at Young's interval %.1f%%)\n", 100 * f.goodput,
                100 * f.goodput_expected, 100 * f.goodput_young);
    if (!f.cannot_run.empty()) std::printf("  verdict        this plan cannot run: %s\n", f.cannot_run.c_str());
    const WallBreakdown& b = f.mc.breakdown;
    const double w = f.mc.mean_s;
    if (std::isfinite(w) && f.has_slow_nodes) {
      std::printf("  where it goes  useful %.1f%%, checkpoint %.1f%%, lost work %.1f%%, down %.1f%%, load %.1f%%, slow "
                  "%.1f%%, drain %.1f%%; %.1f failures\n",
                  100 * b.useful / w, 100 * b.checkpoint / w, 100 * b.lost / w, 100 * b.downtime / w, 100 * b.load / w,
                  100 * b.slow / w, 100 * b.drain / w, f.mc.failures_mean);
    } else if (std::isfinite(w)) std::printf("  where it goes  useful %.1f%%, checkpoint %.1f%%, lost work %.1f%%, down %.1f%%, load %.1f%%; %.1f failures\n",
                100 * b.useful / w, 100 * b.checkpoint / w, 100 * b.lost / w, 100 * b.downtime / w, 100 * b.load / w,
                f.mc.failures_mean);
  }
  if (fr.has_time_to_train) {
    std::printf("time to train    %lld steps: p50 %s, p90 %s, mean %s (fault-free %s)%s\n", static_cast<long long>(fr.steps),
                human_duration(fr.time_to_train_p50_s).c_str(), human_duration(fr.time_to_train_p90_s).c_str(),
                human_duration(fr.time_to_train_mean_s).c_str(),
                human_duration(static_cast<double>(fr.steps) * fr.base_step_s).c_str(),
                !fr.has_failures ? ""
                : fr.failures.mc.runs > 0
                    ? (" over " + std::to_string(fr.failures.mc.runs) + " Monte Carlo runs, seed " +
                       std::to_string(cfg.seed)).c_str()
                    : " (closed form: too many expected failures to sample)");
  }
}

int run_simulate(const SimulateFlags& f) {
  if (!f.trace.empty()) check_output_path(f.trace, "--trace");
  if (!f.html.empty()) check_output_path(f.html, "--html");
  if (!f.save.empty()) check_output_path(f.save, "--save");
  FaultFlags fault_flags = f.faults;
  for (const FaultFlagInfo& info : fault_flag_table(&fault_flags)) {
    if (f.app != nullptr && f.app->count(info.name) > 0 && info.value->empty()) {
      throw_input_error(info.name, "", "empty value", "");
    }
  }
  const FaultConfig faults = parse_fault_flags(f.faults);
  ConvergenceSpec cspec;
  if (f.app != nullptr && f.app->count("--convergence") > 0) cspec = parse_convergence_spec(f.convergence, "--convergence");
  Job job = to_job(f.plan);
  Layout layout = resolve_plan(job.model, job.cluster, job.gpus, job.plan);
  nlohmann::json out = plan_output_header("simulate", job.model, job.cluster, job.gpus, job.plan, layout);
  const std::string hash = out["config_hash"].get<std::string>();
  if (!f.save.empty()) {
    if (!layout.feasible) {
      throw_input_error("--save", "", "the plan cannot run (" + layout.reasons.front() + "), nothing to save",
                        "see `trainplan simulate` without --save");
    }
    PlanFile pf;
    pf.model = job.model_ref;
    pf.cluster = job.cluster_ref;
    pf.gpus = layout.gpus;
    pf.plan = layout.plan;
    write_file_atomically(f.save, plan_file_json(pf), "--save");
  }
  if (!layout.feasible) {
    out["fits"] = false;
    out["reasons"] = layout.reasons;
    if (f.json) {
      std::cout << out.dump(2) << "\n";
    } else {
      std::printf("# trainplan %s simulate: %s on %s, %d GPUs\n# plan: %s\nthis plan cannot run:\n", kVersion,
                  job.model.name.c_str(), job.cluster.name.c_str(), layout.gpus, describe_plan(layout.plan).c_str());
      for (const std::string& r : layout.reasons) std::printf("  - %s\n", r.c_str());
    }
    return 0;
  }
  SimulateOptions so;
  so.representative = !f.full;
  so.trace = !f.trace.empty() || !f.html.empty();
  StepReport rep = simulate_step(job.model, job.cluster, layout, so);
  if (!f.trace.empty()) write_file_atomically(f.trace, rep.trace_json, "--trace");
  if (!f.html.empty()) {
    // The plan's page (planner/report/html_report.h): its step, memory and timeline.
    nlohmann::json data;
    data["title"] = "trainplan: " + job.model.name + " on " + job.cluster.name + ", " + std::to_string(layout.gpus) +
                    " GPUs";
    data["subtitle"] = describe_plan(layout.plan) + " (trainplan " + kVersion + ")";
    data["step"] = step_section(job.model, job.cluster, layout, rep);
    write_file_atomically(f.html, html_report(data), "--html");
  }

  out["step_time_s"] = rounded(rep.step_time_s, 6);
  out["tokens_per_s"] = rounded(rep.tokens_per_s, 1);
  out["model_tflops_per_gpu"] = rounded(rep.model_tflops_per_gpu, 2);
  out["hw_tflops_per_gpu"] = rounded(rep.hw_tflops_per_gpu, 2);
  out["mfu"] = rounded(rep.mfu, 4);
  out["hfu"] = rounded(rep.hfu, 4);
  out["bubble_fraction"] = rounded(rep.bubble_fraction, 4);
  out["exposed_comm_fraction"] = rounded(rep.exposed_comm_fraction, 4);
  out["peak_memory_gib"] = rounded(to_gib(rep.peak_memory_bytes), 3);
  out["capacity_gib"] = rounded(to_gib(rep.capacity_bytes), 3);
  out["fits"] = rep.fits;
  out["microbatches"] = layout.microbatches;
  const TimeBreakdown& b = rep.breakdown;
  out["time_breakdown_s"] = {{"compute", rounded(b.compute, 6)}, {"tp_comm", rounded(b.tp_comm, 6)},
                             {"pp_comm", rounded(b.pp_comm, 6)}, {"dp_comm", rounded(b.dp_comm, 6)},
                             {"bubble", rounded(b.bubble, 6)},   {"optimizer", rounded(b.optimizer, 6)},
                             {"ep_comm", rounded(b.ep_comm, 6)}};
  nlohmann::json stages = nlohmann::json::array();
  for (const StageResult& st : rep.stages) {
    stages.push_back({{"stage", st.stage},
                      {"peak_memory_gib", rounded(to_gib(st.simulated_peak_bytes), 3)},
                      {"closed_form_gib", rounded(to_gib(st.closed_form_peak_bytes), 3)}});
  }
  out["stages"] = stages;
  out["layer_ms"] = {{"forward", rounded(rep.layer.forward_ps * 1e-9, 4)},
                     {"backward", rounded(rep.layer.backward_ps * 1e-9, 4)},
                     {"tp_comm_forward", rounded(rep.layer.tp_comm_forward_ps * 1e-9, 4)},
                     {"tp_comm_backward", rounded(rep.layer.tp_comm_backward_ps * 1e-9, 4)}};
  if (job.model.has_moe) {
    out["moe"] = {{"ep", layout.plan.ep}, {"etp", layout.plan.etp}, {"expert_dp", layout.expert_dp},
                  {"busiest_rank_load", rounded(rep.moe_load, 4)},
                  {"moe_layer_ms", {{"forward", rounded(rep.moe_layer.forward_ps * 1e-9, 4)},
                                    {"backward", rounded(rep.moe_layer.backward_ps * 1e-9, 4)},
                                    {"ep_comm_forward", rounded(rep.moe_layer.ep_comm_forward_ps * 1e-9, 4)},
                                    {"ep_comm_backward", rounded(rep.moe_layer.ep_comm_backward_ps * 1e-9, 4)}}}};
    out["flops_convention"] = "megatron-core (causal attention, top-k experts)";
  }
  // Async: what its staleness costs under the convergence model, against
  // the same layout trained synchronously (time to a target loss, the
  // noise floor it ends at).
  const bool convergence_given = f.app != nullptr && f.app->count("--convergence") > 0;
  if (convergence_given && !rep.async) {
    throw_input_error("--convergence", "", "only applies to async plans (dp_mode async), this one is sync",
                      "add --dp-mode async, or drop --convergence");
  }
  AsyncConvergence conv;
  double sync_step_s = 0;
  if (rep.async) {
    out["staleness"] = staleness_json(rep.staleness);
    conv = async_convergence(cspec, layout.plan.dp, rep.staleness.mean);
    Plan sync_plan = layout.plan;
    sync_plan.dp_mode = DpMode::kSync;
    const Layout sync_layout = resolve_plan(job.model, job.cluster, job.gpus, sync_plan);
    SimulateOptions sync_options = so;
    sync_options.trace = false;
    if (sync_layout.feasible) sync_step_s = simulate_step(job.model, job.cluster, sync_layout, sync_options).step_time_s;
    nlohmann::json c = {{"model", cspec.describe()},
                        {"staleness", conv.staleness},
                        {"workers", conv.workers},
                        {"lr_scale", rounded(conv.lr_scale, 6)},
                        {"max_lr_scale", rounded(conv.max_lr_scale, 6)},
                        {"converges", conv.converges}};
    if (conv.converges) {
      c["sample_efficiency"] = rounded(conv.sample_efficiency, 6);
      c["floor_ratio"] = rounded(conv.floor_ratio, 6);
      c["sync_equivalent_step_s"] = rounded(rep.step_time_s / conv.sample_efficiency, 6);
      if (sync_step_s > 0) {
        c["sync_step_s"] = rounded(sync_step_s, 6);
        c["time_to_target_vs_sync"] = rounded(rep.step_time_s / conv.sample_efficiency / sync_step_s, 6);
      }
    } else {
      c["reason"] = conv.reason;
    }
    out["convergence"] = c;
  }
  if (rep.dense_layers && rep.layer.host_bound_ps > 0) out["host_bound_ms_per_layer"] = rounded(rep.layer.host_bound_ps * 1e-9, 6);
  if (job.model.has_moe && rep.moe_layer.host_bound_ps > 0) {
    out["host_bound_ms_per_moe_layer"] = rounded(rep.moe_layer.host_bound_ps * 1e-9, 6);
  }
  out["simulated_ranks"] = rep.simulated_ranks;
  const std::string version_note = execution_profile(layout.plan).version_note;
  if (!version_note.empty()) out["framework_note"] = version_note;
  // The fused kernel `flash` stands for (Plan::attention_kernel).
  // "unfused" where `flash` stands for a framework's own unfused attention
  // (flash_is_default).
  const char* attention_kernel = layout.plan.attention == Attention::kNaive ? nullptr
                                 : attention_run(layout.plan) == Attention::kNaive
                                     ? "unfused"
                                     : to_string(attention_kernel_run(layout.plan, job.cluster.gpu.arch));
  if (attention_kernel != nullptr) out["attention_kernel"] = attention_kernel;
  out["tasks"] = rep.tasks;
  out["events"] = rep.events;
  std::vector<LayerCharges> op_tables;
  if (f.ops) {
    op_tables = layer_charges(job.model, job.cluster, layout.plan);
    out["layer_ops"] = op_tables_json(op_tables, job.cluster);
  }
  FaultReport fr;
  if (faults.any()) {
    const double tokens_per_step = static_cast<double>(layout.plan.gbs) * static_cast<double>(layout.plan.seq);
    fr = evaluate_faults(job.model, job.cluster, layout, rep.step_time_s, tokens_per_step, faults);
    faults_to_json(fr, faults, layout.gpus, layout.nodes, out);
  }
  if (f.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("# trainplan %s simulate: %s on %s, %d GPUs (%d nodes), %s mode\n", kVersion, job.model.name.c_str(),
              job.cluster.name.c_str(), layout.gpus, layout.nodes, f.full ? "every rank" : "one rank per stage");
  std::printf("# plan: %s\n# config %s\n", describe_plan(layout.plan).c_str(), hash.c_str());
  if (!version_note.empty()) std::printf("# framework: %s\n", version_note.c_str());
  if (attention_kernel != nullptr && attention_run(layout.plan) == Attention::kNaive) {
    std::printf("# attention: flash runs unfused here (Megatron-LM's own attention, the s x s scores stored; its "
                "FlashAttention is opt-in: --attention fa2 names it)\n");
  } else if (attention_kernel != nullptr && layout.plan.attention_kernel == AttentionKernel::kDefault) {
    std::printf("# attention: flash runs %s here (the framework's default kernel; --attention fa2|cudnn|fa3 names one)\n",
                attention_kernel);
  }
  std::printf("step time        %10.4f s   (%lld micro-batches per pipeline)\n", rep.step_time_s,
              static_cast<long long>(layout.microbatches));
  std::printf("throughput       %10.0f tokens/s  (%.0f tokens/s per GPU)\n", rep.tokens_per_s,
              rep.tokens_per_s / layout.gpus);
  std::printf("model TFLOP/s    %10.1f per GPU   MFU %.1f%%\n", rep.model_tflops_per_gpu, 100 * rep.mfu);
  std::printf("hw TFLOP/s       %10.1f per GPU   HFU %.1f%%\n", rep.hw_tflops_per_gpu, 100 * rep.hfu);
  std::printf("bubble           %10.1f%% of the step\n", 100 * rep.bubble_fraction);
  std::printf("exposed comm     %10.1f%% of the step\n", 100 * rep.exposed_comm_fraction);
  if (rep.async) {
    std::printf("async staleness  mean %.2f, p90 %.0f, max %.0f updates between a worker's pull and its push\n",
                rep.staleness.mean, rep.staleness.p90, rep.staleness.max);
    std::printf("convergence      %s, %d workers, staleness %d: learning rate x %.4g (converges below x %.4g)\n",
                cspec.describe().c_str(), conv.workers, conv.staleness, conv.lr_scale, conv.max_lr_scale);
    if (!conv.converges) {
      std::printf("  %s\n", conv.reason.c_str());
    } else {
      std::printf("  per sample     %.3f x sync's progress; noise floor (the loss a constant learning rate ends at) "
                  "x %.3f sync's\n", conv.sample_efficiency, conv.floor_ratio);
      if (sync_step_s > 0) {
        std::printf("  vs sync        the same layout synchronous: step %.4f s; to a target loss above the floor async "
                    "takes %.3f x sync's time (%.4f s per sync-equivalent step)\n",
                    sync_step_s, rep.step_time_s / conv.sample_efficiency / sync_step_s,
                    rep.step_time_s / conv.sample_efficiency);
      }
    }
  }
  // Host-bound layers (step_costs.h LayerTimes::host_bound_ps).
  auto host_line = [&](const char* what, const LayerTimes& t) {
    if (t.host_bound_ps <= 0) return;
    std::printf("host-bound       %s: %.3f ms to issue its forward + backward (%.2f us per op call), %.3f ms more "
                "than on the GPU\n",
                what, (t.host_forward_ps + t.host_backward_ps) * 1e-9, job.cluster.host.op_overhead.us(),
                t.host_bound_ps * 1e-9);
  };
  if (rep.dense_layers) host_line(job.model.has_moe ? "a dense layer" : "a layer", rep.layer);
  if (job.model.has_moe) host_line("an MoE layer", rep.moe_layer);
  std::printf("where the time goes (s, mean over ranks):\n");
  const double st = rep.step_time_s;
  auto line = [st](const char* name, double v) { std::printf("  %-10s %10.4f  %5.1f%%\n", name, v, 100 * v / st); };
  line("compute", b.compute);
  line("tp_comm", b.tp_comm);
  line("pp_comm", b.pp_comm);
  line("dp_comm", b.dp_comm);
  line("bubble", b.bubble);
  line("optimizer", b.optimizer);
  if (job.model.has_moe) {
    line("ep_comm", b.ep_comm);
    std::printf("MoE: ep=%d etp=%d expert_dp=%d; busiest expert-parallel rank %.3fx the mean token load; all-to-all "
                "%.3f + %.3f ms per MoE layer (fwd + bwd)\n",
                layout.plan.ep, layout.plan.etp, layout.expert_dp, rep.moe_load,
                rep.moe_layer.ep_comm_forward_ps * 1e-9, rep.moe_layer.ep_comm_backward_ps * 1e-9);
  }
  if (const std::string note = mirrored_stages_note(layout.plan); !note.empty()) std::printf("# %s\n", note.c_str());
  std::printf("memory per GPU (GiB = 2^30 B): simulated peak vs closed form\n");
  for (const StageResult& s : rep.stages) {
    std::printf("  stage %3d  %8.2f  %8.2f\n", s.stage, to_gib(s.simulated_peak_bytes), to_gib(s.closed_form_peak_bytes));
  }
  std::printf("peak %.2f GiB of %.2f GiB: %s\n", to_gib(rep.peak_memory_bytes), to_gib(rep.capacity_bytes),
              rep.fits ? "fits" : "DOES NOT FIT");
  if (f.ops) print_op_tables(op_tables, job.cluster);
  if (faults.any()) print_faults(fr, faults, layout.gpus, layout.nodes);
  if (!f.save.empty()) std::printf("saved the plan to %s\n", f.save.c_str());
  return 0;
}

}  // namespace

void register_simulate_command(CLI::App* app, int* status) {
  static SimulateFlags flags;
  CLI::App* cmd = app->add_subcommand("simulate", "simulate one training step of a plan");
  add_plan_flags(cmd, &flags.plan);
  cmd->add_flag("--json", flags.json, "JSON output");
  cmd->add_flag("--full", flags.full, "simulate every rank (lock-step TP peers as one) instead of one representative rank per stage");
  cmd->add_flag("--ops", flags.ops,
                "also print each kind of transformer layer's ops for one micro-batch on one rank: shape, forward, "
                "backward and recompute time, the rate that implies, host calls and the collective after each, as the "
                "step charges them (JSON: layer_ops)");
  cmd->add_option("--convergence", flags.convergence,
                  std::string("async plans: the stale-gradient convergence model (default sharpness=1,condition=1000,"
                              "lr=scaled); ") + kConvergenceGrammar);
  cmd->add_option("--trace", flags.trace, "write a Chrome trace (open in Perfetto) to this file");
  cmd->add_option("--html", flags.html, "write the plan's report page (step, memory, timeline) to this HTML file");
  cmd->add_option("--save", flags.save,
                  "write the plan to this plan.json (as `recommend --save` does), for export, validate, memory and "
                  "simulate --plan");
  for (const FaultFlagInfo& info : fault_flag_table(&flags.faults)) cmd->add_option(info.name, *info.value, info.help)->type_name(info.type_name);
  flags.app = cmd;
  cmd->callback([status] { *status = run_simulate(flags); });
}

}  // namespace trainplan
