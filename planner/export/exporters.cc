// Exporters: a resolved plan as Megatron-LM arguments, a DeepSpeed config,
// a torchtitan TOML or a PyTorch FSDP2/DDP script.  This file holds the
// targets' names and the rules every target shares (export_or_check); each
// target is written by its own file (megatron_export.cc,
// deepspeed_export.cc, torchtitan_export.cc, fsdp_export.cc) from the
// helpers in export_common.h.
//
// The rules each exporter enforces are the framework's own, taken from its
// source (the file is named next to each rule), so that a refusal here is a
// launch failure there:
//   Megatron-LM  megatron/training/arguments.py (validate_args and the
//                argument definitions).
//   DeepSpeed    docs/_pages/config-json.md, deepspeed/runtime/pipe/engine.py
//                (PipelineEngine asserts ZeRO stage < 2), and
//                Megatron-DeepSpeed megatron/arguments.py.
//   torchtitan   torchtitan/config/job_config.py,
//                torchtitan/models/llama3/infra/parallelize.py,
//                torchtitan/distributed/parallel_dims.py.
//   PyTorch      torch.distributed.fsdp.fully_shard, DeviceMesh,
//                torch.distributed.tensor.parallel, DistributedDataParallel.
#include "planner/export/exporters.h"

#include "planner/export/export_common.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "simulator/core/error.h"
#include "simulator/framework/framework.h"
#include "simulator/network/collective_model.h"
#include "simulator/spec/pipeline_layout.h"

namespace trainplan {

const char* to_string(ExportTarget t) {
  switch (t) {
    case ExportTarget::kMegatron: return "megatron";
    case ExportTarget::kDeepSpeed: return "deepspeed";
    case ExportTarget::kTorchtitan: return "torchtitan";
    case ExportTarget::kFsdp: return "fsdp";
    case ExportTarget::kTorchtitanPy: return "torchtitan-py";
  }
  return "?";
}

std::optional<ExportTarget> export_target_from_string(const std::string& name) {
  for (ExportTarget t : {ExportTarget::kMegatron, ExportTarget::kDeepSpeed, ExportTarget::kTorchtitan,
                         ExportTarget::kFsdp, ExportTarget::kTorchtitanPy}) {
    if (name == to_string(t)) return t;
  }
  return std::nullopt;
}

std::optional<ExportTarget> export_target_of(Framework f) {
  switch (f) {
    case Framework::kGeneric: return std::nullopt;
    case Framework::kMegatronLM:
    case Framework::kMegatronCore: return ExportTarget::kMegatron;
    case Framework::kDeepSpeed: return ExportTarget::kDeepSpeed;
    case Framework::kTorchtitan: return ExportTarget::kTorchtitan;
    case Framework::kPytorch: return ExportTarget::kFsdp;
  }
  return std::nullopt;
}

namespace {

using export_detail::Render;
using export_detail::refuse;

ExportResult export_or_check(ExportTarget target, const ModelSpec& model, const ClusterSpec& cluster,
                             const Layout& layout, Render render) {
  TRAINPLAN_CHECK(layout.feasible, "export_plan needs a feasible layout");
  TRAINPLAN_CHECK(static_cast<int>(layout.stage_layers.size()) == layout.plan.pp,
                  "export_plan needs one layer count per pipeline stage");
  // A plan simulated for one framework exports to that framework only.
  // This also keeps the options only Megatron-Core runs (the fused router
  // and loss, the shared experts beside the all-to-alls) off the other
  // targets: resolve_plan refuses them under any other framework.
  const Framework fw = layout.plan.framework;
  // torchtitan's two formats run the same framework.
  const ExportTarget runs = target == ExportTarget::kTorchtitanPy ? ExportTarget::kTorchtitan : target;
  if (fw != Framework::kGeneric && export_target_of(fw) != runs) {
    return refuse(std::string("the plan was simulated for ") + to_string(fw) +
                  ", whose execution (overlaps, buckets, gathers) another framework does not reproduce; export it with "
                  "--to " + to_string(*export_target_of(fw)) + ", or simulate it for this target's framework");
  }
  if (!launch_shape(cluster, layout.gpus)) {
    return refuse(std::to_string(layout.gpus) + " GPUs do not split evenly over hosts of " +
                  std::to_string(cluster.host.gpus) + " GPUs, and torchrun starts the same number of processes on "
                  "every host (--nproc-per-node); use a GPU count that does");
  }
  if (layout.plan.schedule == Schedule::kDualPipe) {
    // deepseek-ai/DualPipe ships its schedule as a library of its own
    // (dualpipe.DualPipe); Megatron-Core, DeepSpeed and torchtitan have none,
    // and PyTorch's pipelining has only ScheduleDualPipeV.
    return refuse("no framework export runs the bidirectional dualpipe schedule (DeepSeek's deepseek-ai/DualPipe "
                  "library; PyTorch and torchtitan have only DualPipeV); its ranks run the very order of dualpipe-v on "
                  "pp/2 ranks with twice the data-parallel replicas: export that plan (--schedule dualpipe-v --pp " +
                  std::to_string(layout.plan.pp / 2) + " --dp " + std::to_string(layout.plan.dp * 2) +
                  ") to torchtitan");
  }
  if (layout.plan.mtp_layers > 0 && runs != ExportTarget::kMegatron) {
    // torchtitan's DeepSeek-V3 and the FSDP2 script build no MTP module;
    // DeepSpeed's Megatron-DeepSpeed neither.
    return refuse("the plan trains " + std::to_string(layout.plan.mtp_layers) +
                  " multi-token prediction layer(s) (--mtp-layers), which only Megatron-Core builds "
                  "(--mtp-num-layers); export it with --to megatron, or plan without them");
  }
  if (layout.plan.moment_dtype != MomentDtype::kFp32 && runs != ExportTarget::kMegatron) {
    // DeepSpeed's, torchtitan's and PyTorch's Adam keep the moments in the
    // parameters' fp32 dtype; Megatron-Core's precision-aware optimizer
    // (Transformer Engine's FusedAdam) stores them in bf16.
    return refuse("the plan keeps Adam's moments in bf16 (--moment-dtype bf16), which only Megatron-Core's "
                  "precision-aware optimizer does (--exp-avg-dtype/--exp-avg-sq-dtype bf16); export it with --to "
                  "megatron, or plan with --moment-dtype fp32");
  }
  if (layout.plan.ep_overlap && runs != ExportTarget::kMegatron) {
    return refuse("the plan runs Megatron-Core's combined 1F1B schedule, each forward merged with another "
                  "micro-batch's backward to hide the expert-parallel all-to-alls (--ep-overlap), which only "
                  "Megatron-Core runs; export it with --to megatron");
  }
  if (layout.plan.cuda_graph != 0 && runs != ExportTarget::kMegatron) {
    return refuse("the plan captures its layers in CUDA graphs (--cuda-graph " +
                  cuda_graph_modules_name(layout.plan.cuda_graph) +
                  "), as Megatron-Core runs them (--cuda-graph-impl transformer_engine); export it with --to megatron");
  }
  if (layout.plan.cp > 1 && layout.plan.cp_comm == CpComm::kA2a && runs != ExportTarget::kMegatron &&
      runs != ExportTarget::kDeepSpeed) {
    // torchtitan's context parallelism is ring attention (context_parallel,
    // rotating K/V by all-gather or all-to-all); the FSDP2 script has none.
    return refuse("the plan runs context parallelism as Ulysses all-to-alls (--cp-comm-type a2a), which "
                  "Megatron-Core (--cp-comm-type a2a) and Megatron-DeepSpeed (--ds-sequence-parallel-size) run; "
                  "export it with --to megatron or --to deepspeed, or plan with --cp-comm-type p2p");
  }
  if (layout.plan.moe_pad_to_capacity && runs != ExportTarget::kMegatron) {
    return refuse("the plan pads every expert's input to its capacity (--moe-pad-to-capacity), which only "
                  "Megatron-Core runs (--moe-pad-expert-input-to-capacity); export it with --to megatron");
  }
  if (layout.plan.moe_dispatcher != MoeDispatcher::kAllToAll && runs != ExportTarget::kMegatron &&
      runs != ExportTarget::kTorchtitan) {
    return refuse(std::string("the plan dispatches its tokens with ") + to_string(layout.plan.moe_dispatcher) +
                  " (--moe-dispatcher), which Megatron-Core (flex dispatcher) and torchtitan run; export it with "
                  "--to megatron or a torchtitan target, or plan with --moe-dispatcher alltoall");
  }
  if (layout.plan.tp_comm_overlap && runs != ExportTarget::kMegatron && runs != ExportTarget::kTorchtitan) {
    return refuse("the plan overlaps tensor-parallel communication with the GEMMs (--tp-comm-overlap), which "
                  "Megatron-Core (Transformer Engine userbuffers) and torchtitan (async TP) run; export it with "
                  "--to megatron or a torchtitan target");
  }
  switch (target) {
    case ExportTarget::kMegatron: return export_detail::export_megatron(model, cluster, layout, render);
    case ExportTarget::kDeepSpeed: return export_detail::export_deepspeed(model, cluster, layout, render);
    case ExportTarget::kTorchtitan: return export_detail::export_torchtitan(model, cluster, layout, render);
    case ExportTarget::kFsdp: return export_detail::export_fsdp(model, cluster, layout, render);
    case ExportTarget::kTorchtitanPy: return export_detail::export_torchtitan_py(model, cluster, layout, render);
  }
  return refuse("unknown export target");
}

}  // namespace

ExportResult export_plan(ExportTarget target, const ModelSpec& model, const ClusterSpec& cluster,
                         const Layout& layout) {
  return export_or_check(target, model, cluster, layout, Render::kText);
}

std::optional<std::string> framework_refusal(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout) {
  const std::optional<ExportTarget> target = export_target_of(layout.plan.framework);
  if (!target) return std::nullopt;
  const ExportResult r = export_or_check(*target, model, cluster, layout, Render::kCheckOnly);
  if (r.ok) return std::nullopt;
  return r.reason;
}

}  // namespace trainplan
