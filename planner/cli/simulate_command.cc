// `trainplan simulate`: one training step through the discrete-event
// simulator: step time, throughput, MFU/HFU, bubble, exposed communication,
// memory per stage and where the time goes.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "planner/cli/commands.h"
#include "planner/cli/output.h"
#include "planner/cli/plan_flags.h"
#include "simulator/core/error.h"
#include "simulator/report/step_report.h"

namespace trainplan {

namespace {

struct SimulateFlags {
  PlanFlags plan;
  bool json = false;
  bool full = false;
  std::string trace;
};

int run_simulate(const SimulateFlags& f) {
  Job job = to_job(f.plan);
  Layout layout = resolve_plan(job.model, job.cluster, job.gpus, job.plan);
  nlohmann::json out;
  out["tool"] = std::string("trainplan ") + kVersion;
  out["command"] = "simulate";
  out["model"] = job.model.name;
  out["cluster"] = job.cluster.name;
  out["gpus"] = layout.gpus;
  out["nodes"] = layout.nodes;
  out["plan"] = plan_to_json(layout.plan);
  out["plan"]["stage_layers"] = layout.stage_layers;
  out["valid"] = layout.feasible;
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
  so.trace = !f.trace.empty();
  StepReport rep = simulate_step(job.model, job.cluster, layout, so);
  if (!f.trace.empty()) write_file_atomically(f.trace, rep.trace_json, "--trace");

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
                             {"bubble", rounded(b.bubble, 6)},   {"optimizer", rounded(b.optimizer, 6)}};
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
  if (rep.async) {
    out["staleness"] = {{"mean", rounded(rep.staleness.mean, 3)}, {"p90", rep.staleness.p90},
                        {"max", rep.staleness.max}, {"samples", rep.staleness.samples}};
  }
  out["simulated_ranks"] = rep.simulated_ranks;
  out["tasks"] = rep.tasks;
  out["events"] = rep.events;
  if (f.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("# trainplan %s simulate: %s on %s, %d GPUs (%d nodes), %s mode\n", kVersion, job.model.name.c_str(),
              job.cluster.name.c_str(), layout.gpus, layout.nodes, f.full ? "every rank" : "one rank per stage");
  std::printf("# plan: %s\n", describe_plan(layout.plan).c_str());
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
  }
  std::printf("where the time goes (s, mean over ranks):\n");
  const double st = rep.step_time_s;
  auto line = [st](const char* name, double v) { std::printf("  %-10s %10.4f  %5.1f%%\n", name, v, 100 * v / st); };
  line("compute", b.compute);
  line("tp_comm", b.tp_comm);
  line("pp_comm", b.pp_comm);
  line("dp_comm", b.dp_comm);
  line("bubble", b.bubble);
  line("optimizer", b.optimizer);
  std::printf("memory per GPU (GiB = 2^30 B): simulated peak vs closed form\n");
  for (const StageResult& s : rep.stages) {
    std::printf("  stage %3d  %8.2f  %8.2f\n", s.stage, to_gib(s.simulated_peak_bytes), to_gib(s.closed_form_peak_bytes));
  }
  std::printf("peak %.2f GiB of %.2f GiB: %s\n", to_gib(rep.peak_memory_bytes), to_gib(rep.capacity_bytes),
              rep.fits ? "fits" : "DOES NOT FIT");
  return 0;
}

}  // namespace

void register_simulate_command(CLI::App* app, int* status) {
  static SimulateFlags flags;
  CLI::App* cmd = app->add_subcommand("simulate", "simulate one training step of a plan");
  add_plan_flags(cmd, &flags.plan);
  cmd->add_flag("--json", flags.json, "JSON output");
  cmd->add_flag("--full", flags.full, "simulate every rank instead of one representative rank per stage");
  cmd->add_option("--trace", flags.trace, "write a Chrome trace (open in Perfetto) to this file");
  cmd->callback([status] { *status = run_simulate(flags); });
}

}  // namespace trainplan
