// `trainplan export`: a saved plan as a ready-to-run config for Megatron-LM,
// DeepSpeed, torchtitan or PyTorch FSDP2/DDP.
//
// Exit codes: 0 with the config on stdout (or in -o FILE); 2 for bad flags,
// a plan file whose plan cannot run, or a plan the target cannot express
// ("--to: deepspeed cannot express this plan: <reason>").
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "planner/cli/commands.h"
#include "planner/cli/output.h"
#include "planner/export/exporters.h"
#include "planner/plan/plan_file.h"
#include "simulator/core/error.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

namespace {

constexpr const char* kTargets = "allowed: megatron, deepspeed, torchtitan, fsdp, torchtitan-py";

struct ExportFlags {
  std::string plan;    // plan.json, required
  std::string to;      // target name, required
  std::string output;  // empty: stdout
};

int run_export(const ExportFlags& f) {
  if (!f.output.empty()) check_output_path(f.output, "-o/--output");
  if (f.plan.empty()) {
    throw_input_error("--plan", "", "is required", "give --plan plan.json (from `trainplan recommend --save`)");
  }
  if (f.to.empty()) throw_input_error("--to", "", "is required", kTargets);
  const std::optional<ExportTarget> target = export_target_from_string(f.to);
  if (!target) throw_input_error("--to", "", "unknown target \"" + f.to + "\"", kTargets);

  const PlanJob job = load_plan_job(f.plan, "");
  const PlanFile& file = job.file;
  const ModelSpec& model = job.model;
  const ClusterSpec& cluster = job.cluster;
  const Layout layout = resolve_plan(model, cluster, file.gpus, file.plan);
  if (!layout.feasible) {
    throw_input_error("--plan", "", "the plan in " + f.plan + " cannot run: " + layout.reasons.front(),
                      "see `trainplan simulate --plan " + f.plan + "`");
  }
  const ExportResult r = export_plan(*target, file, model, cluster, layout);
  if (!r.ok) throw_input_error("--to", "", std::string(to_string(*target)) + " cannot express this plan: " + r.reason);
  if (f.output.empty()) {
    std::cout << r.text;
  } else {
    write_file_atomically(f.output, r.text, "-o/--output");
    std::cout << "wrote the " << to_string(*target) << " export of " << f.plan << " to " << f.output << "\n";
  }
  return 0;
}

}  // namespace

void register_export_command(CLI::App* app, int* status) {
  static ExportFlags f;
  CLI::App* cmd = app->add_subcommand(
      "export", "write a plan as a Megatron-LM script, DeepSpeed config, torchtitan TOML or FSDP2 script");
  cmd->add_option("--plan", f.plan, "plan.json (from `trainplan recommend --save`)");
  cmd->add_option("--to", f.to,
                  "megatron|deepspeed|torchtitan|fsdp|torchtitan-py (torchtitan: v0.2.2 TOML; torchtitan-py: the "
                  "Python Trainer.Config of torchtitan head and 0.3)");
  cmd->add_option("-o,--output", f.output, "write to this file instead of stdout");
  cmd->callback([status] { *status = run_export(f); });
}

}  // namespace trainplan
