// `trainplan export`: a plan, saved (--plan plan.json) or given by the same
// flags simulate takes, as a ready-to-run config for Megatron-LM, DeepSpeed,
// torchtitan or PyTorch FSDP2/DDP.
//
// Exit codes: 0 with the config on stdout (or in -o FILE); 2 for bad flags,
// a plan that cannot run, or a plan the target cannot express ("--to:
// deepspeed cannot express this plan: <reason>").
#include <iostream>
#include <string>

#include <CLI/CLI.hpp>

#include "planner/cli/commands.h"
#include "planner/cli/output.h"
#include "planner/cli/plan_flags.h"
#include "planner/export/exporters.h"
#include "simulator/core/error.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

namespace {

constexpr const char* kTargets = "allowed: megatron, deepspeed, torchtitan, fsdp, torchtitan-py";

struct ExportFlags {
  PlanFlags plan;      // --plan plan.json, or the plan's flags
  std::string to;      // target name, required
  std::string output;  // empty: stdout
};

int run_export(const ExportFlags& f) {
  if (!f.output.empty()) check_output_path(f.output, "-o/--output");
  const bool from_file = !f.plan.plan_file.empty();
  if (!from_file && f.plan.model.empty()) {
    throw_input_error("--plan", "", "is required",
                      "give --plan plan.json (from `trainplan recommend --save`), or the plan's own flags (--model, "
                      "--cluster, --gpus, --tp, ...)");
  }
  if (f.to.empty()) throw_input_error("--to", "", "is required", kTargets);
  const std::optional<ExportTarget> target = export_target_from_string(f.to);
  if (!target) throw_input_error("--to", "", "unknown target \"" + f.to + "\"", kTargets);

  const Job job = to_job(f.plan);
  const Layout layout = resolve_plan(job.model, job.cluster, job.gpus, job.plan);
  if (!layout.feasible) {
    if (from_file) {
      throw_input_error("--plan", "", "the plan in " + f.plan.plan_file + " cannot run: " + layout.reasons.front(),
                        "see `trainplan simulate --plan " + f.plan.plan_file + "`");
    }
    throw_input_error("--model", "", "the plan these flags give cannot run: " + layout.reasons.front(),
                      "see `trainplan simulate` with the same flags");
  }
  const ExportResult r = export_plan(*target, job.model, job.cluster, layout);
  if (!r.ok) throw_input_error("--to", "", std::string(to_string(*target)) + " cannot express this plan: " + r.reason);
  if (f.output.empty()) {
    std::cout << r.text;
  } else {
    write_file_atomically(f.output, r.text, "-o/--output");
    std::cout << "wrote the " << to_string(*target) << " export of "
              << (from_file ? f.plan.plan_file : std::string("the plan")) << " to " << f.output << "\n";
  }
  return 0;
}

}  // namespace

void register_export_command(CLI::App* app, int* status) {
  static ExportFlags f;
  CLI::App* cmd = app->add_subcommand(
      "export", "write a plan as a Megatron-LM script, DeepSpeed config, torchtitan TOML or FSDP2 script");
  add_plan_flags(cmd, &f.plan);  // --plan plan.json (from `trainplan recommend --save`), or the plan's flags
  cmd->add_option("--to", f.to,
                  "megatron|deepspeed|torchtitan|fsdp|torchtitan-py (torchtitan: v0.2.2 TOML; torchtitan-py: the "
                  "Python Trainer.Config of torchtitan head and 0.3)");
  cmd->add_option("-o,--output", f.output, "write to this file instead of stdout");
  cmd->callback([status] { *status = run_export(f); });
}

}  // namespace trainplan
