// `trainplan memory`: the closed-form memory per GPU of every pipeline stage.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "planner/cli/commands.h"
#include "planner/cli/output.h"
#include "planner/cli/plan_flags.h"
#include "simulator/framework/framework.h"
#include "simulator/memory/memory_model.h"
#include "simulator/taskgraph/lowering.h"

namespace trainplan {

namespace {

nlohmann::json breakdown_json(const MemoryBreakdown& b) {
  return {{"weights", rounded(to_gib(b.weights), 4)},
          {"gradients", rounded(to_gib(b.gradients), 4)},
          {"optimizer", rounded(to_gib(b.optimizer), 4)},
          {"activations", rounded(to_gib(b.activations), 4)},
          {"other", rounded(to_gib(b.other), 4)}};
}

// What `other` holds (MemoryBreakdown): inside PyTorch's allocator the
// workspaces and its fragmentation, outside it the CUDA context, NCCL's
// buffers, Transformer Engine's TP-overlap userbuffers and DeepEP's.
nlohmann::json other_parts_json(const MemoryBreakdown& b) {
  return {{"workspace", rounded(to_gib(b.workspace), 4)},
          {"fragmentation", rounded(to_gib(b.fragmentation), 4)},
          {"cuda_context", rounded(to_gib(b.runtime), 4)},
          {"nccl_buffers", rounded(to_gib(b.communication), 4)},
          {"te_userbuffers", rounded(to_gib(b.userbuffers), 4)},
          {"deepep_buffers", rounded(to_gib(b.dispatcher), 4)}};
}

int run_memory(const PlanFlags& flags, bool json) {
  Job job = to_job(flags);
  Layout layout = resolve_plan(job.model, job.cluster, job.gpus, job.plan);
  nlohmann::json out = plan_output_header("memory", job.model, job.cluster, job.gpus, job.plan, layout);
  const std::string hash = out["config_hash"].get<std::string>();
  out["capacity_gib"] = rounded(to_gib(static_cast<double>(job.cluster.gpu.memory)), 4);
  if (!layout.feasible) {
    out["fits"] = false;
    out["reasons"] = layout.reasons;
    if (json) {
      std::cout << out.dump(2) << "\n";
    } else {
      std::printf("# trainplan %s memory: %s on %s, %d GPUs\n# plan: %s\n", kVersion, job.model.name.c_str(),
                  job.cluster.name.c_str(), layout.gpus, describe_plan(layout.plan).c_str());
      std::printf("this plan cannot run:\n");
      for (const std::string& r : layout.reasons) std::printf("  - %s\n", r.c_str());
    }
    return 0;
  }
  MemoryReport rep = plan_memory(job.model, job.cluster, layout);
  const StageMemory& peak = rep.stages[rep.peak_stage];
  out["peak_gib"] = rounded(to_gib(rep.peak_bytes), 4);
  out["peak_stage"] = rep.peak_stage;
  out["fits"] = rep.fits;
  if (!rep.fits) out["reasons"] = nlohmann::json::array({rep.reason()});
  out["breakdown_gib"] = breakdown_json(peak.breakdown);
  out["other_parts_gib"] = other_parts_json(peak.breakdown);
  // The peak stage as PyTorch's allocator reports it (torch.cuda.max_memory_allocated
  // and max_memory_reserved; torchtitan and DeepSpeed log the reserved figure).
  out["peak_allocated_gib"] = rounded(to_gib(peak.breakdown.allocated()), 4);
  out["peak_reserved_gib"] = rounded(to_gib(peak.breakdown.reserved()), 4);
  out["host_offload_gib_per_node"] = rounded(to_gib(rep.host_bytes_per_node), 4);
  out["microbatches"] = layout.microbatches;
  nlohmann::json stages = nlohmann::json::array();
  for (const StageMemory& st : rep.stages) {
    stages.push_back({{"stage", st.stage},
                      {"layers", st.layers},
                      {"params_per_gpu", st.params},
                      {"inflight_microbatches", st.inflight_microbatches},
                      {"peak_gib", rounded(to_gib(st.breakdown.total()), 4)},
                      {"allocated_gib", rounded(to_gib(st.breakdown.allocated()), 4)},
                      {"reserved_gib", rounded(to_gib(st.breakdown.reserved()), 4)},
                      {"breakdown_gib", breakdown_json(st.breakdown)},
                      {"other_parts_gib", other_parts_json(st.breakdown)}});
  }
  out["stages"] = stages;
  if (json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("# trainplan %s memory: %s on %s, %d GPUs (%d nodes)\n# plan: %s\n", kVersion, job.model.name.c_str(),
              job.cluster.name.c_str(), layout.gpus, layout.nodes, describe_plan(layout.plan).c_str());
  std::printf("# config %s; microbatches per step: %lld; GiB = 2^30 bytes, per GPU\n", hash.c_str(),
              static_cast<long long>(layout.microbatches));
  if (const std::string note = mirrored_stages_note(layout.plan); !note.empty()) std::printf("# %s\n", note.c_str());
  std::printf("%5s %6s %14s %8s %12s %10s %12s %12s %10s %10s\n", "stage", "layers", "params/GPU(M)", "inflight",
              "weights(GiB)", "grads(GiB)", "optimizer(GiB)", "activ.(GiB)", "other(GiB)", "total(GiB)");
  for (const StageMemory& st : rep.stages) {
    const MemoryBreakdown& b = st.breakdown;
    std::printf("%5d %6d %14.1f %8lld %12.2f %10.2f %14.2f %12.2f %10.2f %10.2f\n", st.stage, st.layers,
                st.params / 1e6, static_cast<long long>(st.inflight_microbatches), to_gib(b.weights),
                to_gib(b.gradients), to_gib(b.optimizer), to_gib(b.activations), to_gib(b.other), to_gib(b.total()));
  }
  std::printf("peak: %.2f GiB on stage %d of %.2f GiB per GPU: %s\n", to_gib(rep.peak_bytes), rep.peak_stage,
              to_gib(rep.capacity_bytes),
              rep.fits ? ("fits, " + fixed(to_gib(rep.capacity_bytes - rep.peak_bytes), 2) + " GiB free").c_str()
                       : ("does not fit: " + rep.reason()).c_str());
  if (layout.plan.offload != Offload::kNone) {
    // What the offload keeps in each node's host memory (MemoryReport::
    // host_bytes_per_node: the offloaded states of its GPUs, the gradient
    // shards where the framework keeps them there).
    std::printf("host memory per node for the offloaded states: %.2f GiB of %.2f GiB: %s\n",
                to_gib(rep.host_bytes_per_node), to_gib(rep.host_capacity_bytes),
                rep.host_bytes_per_node <= rep.host_capacity_bytes ? "fits" : "does not fit");
  }
  const MemoryBreakdown& pb = peak.breakdown;
  std::printf("  as PyTorch's caching allocator sees stage %d: %.2f GiB allocated, %.2f GiB reserved "
              "(max_memory_allocated / max_memory_reserved); outside it the CUDA context %.2f GiB and NCCL "
              "buffers %.2f GiB%s%s\n",
              rep.peak_stage, to_gib(pb.allocated()), to_gib(pb.reserved()), to_gib(pb.runtime),
              to_gib(pb.communication),
              pb.userbuffers > 0
                  ? ((execution_profile(layout.plan).async_tp ? ", async TP's SymmetricMemory workspace "
                                                               : ", Transformer Engine's TP-overlap userbuffers ") +
                     fixed(to_gib(pb.userbuffers), 2) + " GiB")
                        .c_str()
                  : "",
              pb.dispatcher > 0 ? (", DeepEP buffers " + fixed(to_gib(pb.dispatcher), 2) + " GiB").c_str() : "");
  return 0;
}

}  // namespace

void register_memory_command(CLI::App* app, int* status) {
  static PlanFlags flags;
  static bool json = false;
  CLI::App* cmd = app->add_subcommand("memory", "memory per GPU of every pipeline stage of a plan");
  add_plan_flags(cmd, &flags);
  cmd->add_flag("--json", json, "JSON output");
  cmd->callback([status] { *status = run_memory(flags, json); });
}

}  // namespace trainplan
