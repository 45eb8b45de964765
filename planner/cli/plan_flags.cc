#include "planner/cli/plan_flags.h"

#include <algorithm>
#include <sstream>
#include <vector>

#include <CLI/CLI.hpp>

#include "planner/plan/plan_file.h"
#include "simulator/framework/framework.h"
#include "simulator/core/error.h"
#include "simulator/spec/calibration.h"
#include "simulator/spec/pipeline_layout.h"

namespace trainplan {

void add_plan_flags(CLI::App* app, PlanFlags* f) {
  f->app = app;
  app->add_option("--plan", f->plan_file, "plan.json (from `recommend --save`) instead of the flags below");
  app->add_option("--calibration", f->calibration, "calibration.json from `trainplan calibrate` (overrides the cluster's figures)");
  app->add_option("--model", f->model, "model name (see `trainplan models`) or path to a model JSON");
  app->add_option("--cluster", f->cluster, "cluster name (see `trainplan clusters`) or path to a cluster JSON");
  app->add_option("--nodes", f->nodes, "number of nodes, each gpus_per_node GPUs (`trainplan clusters`; on GB200/GB300 NVL72 one 64-GPU NVLink domain)");
  app->add_option("--gpus", f->gpus, "number of GPUs (whole nodes, or part of one node)");
  app->add_option("--tp", f->tp, "tensor-parallel degree (default 1)");
  app->add_option("--pp", f->pp, "pipeline-parallel degree (default 1)");
  app->add_option("--dp", f->dp, "data-parallel degree (default gpus/(tp*pp*cp))");
  app->add_option("--cp", f->cp, "context-parallel degree (default 1)");
  app->add_option("--vp", f->vp, "model chunks per pipeline rank, interleaved schedule (default 1)");
  app->add_option("--zero", f->zero, "ZeRO stage 0|1|2|3 (default 0)");
  app->add_option("--shard-group", f->shard_group, "hybrid shard: shard within groups of N ranks (default dp*cp)");
  app->add_option("--mbs", f->mbs, "micro-batch size in sequences (default 1)");
  app->add_option("--gbs", f->gbs, "global batch size in sequences (default mbs*dp)");
  app->add_option("--seq", f->seq, "sequence length in tokens (default: the model's)");
  app->add_option("--recompute", f->recompute, "activation recomputation none|selective|full (default none)");
  app->add_option("--recompute-modules", f->recompute_modules,
                  "with --recompute selective: what to re-run, comma-separated core_attn|layernorm|mlp|moe|moe_act|"
                  "shared_experts|mla_up_proj (default core_attn; Megatron-Core --recompute-modules)");
  app->add_option("--recompute-layers", f->recompute_layers,
                  "with --recompute full: recompute only the first N layers of each model chunk, the others keep "
                  "their activations (Megatron --recompute-method block --recompute-num-layers N; default: every "
                  "layer)");
  app->add_flag("--sp", f->sp, "sequence parallel (with tp > 1)");
  app->add_option("--schedule", f->schedule,
                  "pipeline schedule gpipe|1f1b|interleaved|naive|zb-1p|zb-2p|zb-v|dualpipe-v|interleaved-zb|dualpipe "
                  "(default 1f1b, interleaved when vp > 1; zb-1p/zb-2p: Zero Bubble, activations up to 1x/2x 1F1B's; "
                  "zb-v, dualpipe-v: two chunks per rank in a V, as PyTorch's ZBVZeroBubble and DualPipeV; "
                  "interleaved-zb: vp chunks per rank, PyTorch's InterleavedZeroBubble; dualpipe: DeepSeek-V3's "
                  "bidirectional DualPipe, two parameter copies, rank r holding stages r and pp-1-r)");
  add_precision_flags(app, &f->precision, &f->fp8_recipe);
  app->add_option("--grad-dtype", f->grad_dtype, "gradient dtype bf16|fp32 (default fp32, as Megatron)");
  app->add_option("--moment-dtype", f->moment_dtype,
                  "Adam's two moments fp32|bf16 (default fp32; bf16: Megatron-Core's precision-aware optimizer, "
                  "--exp-avg-dtype/--exp-avg-sq-dtype bf16 beside the fp32 master copy, as DeepSeek-V3 trained; "
                  "needs --zero >= 1)");
  app->add_option("--attention", f->attention,
                  "flash|naive|fa2|cudnn|fa3: flash = the framework's default attention (cudnn under Megatron-Core on "
                  "Hopper and Blackwell, fa2 elsewhere; under megatron-lm its own unfused attention, FlashAttention "
                  "being opt-in there: fa2); fa2, cudnn, fa3 name a kernel, costed at its published rate against "
                  "that default (Hopper only; docs/frameworks.md) (default flash)");
  app->add_option("--dp-mode", f->dp_mode, "sync|async (async: parameter servers; default sync)");
  app->add_option("--offload", f->offload, "none|optimizer|params (default none)");
  app->add_option("--ps-servers", f->ps_servers, "async DP: parameter servers (default one per node)");
  app->add_option("--stage-layers", f->stage_layers,
                  "transformer layers per pipeline stage, e.g. 7,8,8,7; with vp model chunks per stage (or a V "
                  "schedule's two) also one count per virtual stage in model order (pp*vp entries, chunk c of stage "
                  "s at c*pp+s; a chunk may be empty), as Megatron-Core's layout lists them");
  app->add_option("--pipeline-layout", f->pipeline_layout,
                  "Megatron-Core's --pipeline-model-parallel-layout string, e.g. \"Et*2|(t*2|)*34,t*3|(t*2|)*3,tL\": "
                  "virtual stages separated by |, E embedding, t layer, m MTP depth, L loss, x*n and (...)*n "
                  "repeats; sets the layers of each model chunk, and vp (stages / pp) where --vp is not given");
  app->add_flag("--fp8-param-gather", f->fp8_param_gather,
                "FP8 compute weights all-gathered in FP8 by the distributed optimizer (Megatron "
                "--fp8-param-gather; needs --precision fp8 and --zero >= 1)");
  app->add_flag("--tp-comm-overlap", f->tp_comm_overlap,
                "tensor-parallel collectives overlapped with the GEMMs beside them (Megatron-Core "
                "--tp-comm-overlap, Transformer Engine userbuffers; torchtitan async TP, compiled; needs tp >= 2 "
                "inside a node and --sp)");
  app->add_flag("--compile", f->compile,
                "torch.compile the model (torchtitan [compile] enable, the PyTorch script's per-block compile): "
                "elementwise ops fused; --framework torchtitan or pytorch (torchtitan's FP8 and async-TP plans are "
                "compiled without it)");
  app->add_flag("--ep-overlap", f->ep_overlap,
                "MoE: each forward merged with another micro-batch's backward, the expert-parallel all-to-alls of "
                "each under the other's compute (Megatron-Core --overlap-moe-expert-parallel-comm; needs ep >= 2 "
                "and, with pp > 1, --vp >= 2)");
  app->add_flag("--delay-wgrad-compute", f->delay_wgrad,
                "with --ep-overlap: a merged backward runs its weight gradients while its own all-to-all is in "
                "flight, hiding it further (Megatron-Core --delay-wgrad-compute)");
  app->add_option("--moe-dispatcher", f->moe_dispatcher,
                  "MoE: alltoall (every token copy over NCCL, default), deepep or hybridep (Megatron-Core's flex "
                  "dispatcher, torchtitan's DeepEP/HybridEP backends: each token once per destination rank, once per "
                  "node across nodes; hybridep also across a multi-node NVLink domain)");
  app->add_option("--cp-comm-type", f->cp_comm,
                  "with cp > 1: p2p (ring attention, the K/V chunks exchanged beside the attention, default) or a2a "
                  "(DeepSpeed-Ulysses: all-to-alls before and after the attention, each rank attending over the "
                  "whole sequence for heads/cp heads; Megatron-Core --cp-comm-type; needs heads and kv_heads "
                  "divisible by tp*cp)");
  app->add_flag("--moe-pad-to-capacity", f->moe_pad_to_capacity,
                "MoE with a capacity factor: pad every expert's input to its capacity, so each runs "
                "capacity_factor x its mean load whatever the routing (Megatron-Core "
                "--moe-pad-expert-input-to-capacity)");
  app->add_flag("--moe-router-fusion", f->moe_router_fusion,
                "MoE on Megatron-Core: Transformer Engine's fused router (top-k with the score function and the "
                "aux-loss kernels: 31 kernels instead of 72; Megatron-Core --moe-router-fusion)");
  app->add_flag("--moe-shared-expert-overlap", f->moe_shared_expert_overlap,
                "MoE with shared experts on Megatron-Core: run them on their own stream beside the token "
                "all-to-alls, FC1 beside the dispatch and FC2 beside the combine (Megatron-Core "
                "--moe-shared-expert-overlap; not with --ep-overlap)");
  app->add_flag("--cross-entropy-fusion", f->cross_entropy_fusion,
                "Megatron-Core's fused vocab-parallel cross-entropy loss, its native implementation: the loss's "
                "elementwise kernels as fused segments, 32 instead of 52 bytes per bf16 logit (Megatron-Core "
                "--cross-entropy-loss-fusion --cross-entropy-fusion-impl native)");
  app->add_option("--cuda-graph", f->cuda_graph,
                  "per-layer CUDA graphs, Megatron-Core --cuda-graph-impl transformer_engine: \"layer\" (the whole "
                  "layer) or modules of attn,mlp,moe,moe_router,moe_preprocess (--cuda-graph-modules): the captured "
                  "ops cost the host one graph replay per layer and pass, and each graphed layer keeps static input "
                  "buffers per micro-batch in flight (default: eager)");
  app->add_option("--mtp-layers", f->mtp_layers,
                  "multi-token prediction depths after the output layer, each a transformer layer of the last "
                  "layer's kind plus the logits and loss again, on the loss's pipeline stage (Megatron-Core "
                  "--mtp-num-layers; DeepSeek-V3 trains 1; default 0)");
  app->add_option("--ep", f->ep, "expert-parallel degree, MoE models (default 1; ep*etp must divide tp*cp*dp)");
  app->add_option("--etp", f->etp, "expert tensor-parallel degree, MoE models (default tp, as Megatron)");
  app->add_option("--moe-imbalance", f->moe_imbalance,
                  "MoE: the busiest expert-parallel rank's token load over the mean, as measured (>= 1; default: "
                  "the expected maximum under uniform routing, docs/moe.md)");
  app->add_option("--framework", f->framework,
                  "framework that runs the plan: generic|megatron-lm|megatron-core|deepspeed|torchtitan|pytorch "
                  "(default generic; how each executes: docs/frameworks.md)");
}

size_t pick(const std::string& flag, const std::string& value, const std::vector<std::string>& allowed) {
  std::string list;
  for (size_t i = 0; i < allowed.size(); ++i) {
    if (allowed[i] == value) return i;
    list += (i ? ", " : "") + allowed[i];
  }
  throw_input_error(flag, "", "unknown value \"" + value + "\"", "allowed: " + list);
}

int64_t in_range(const std::string& flag, int64_t v, int64_t lo, int64_t hi) {
  if (v < lo || v > hi) {
    throw_input_error(flag, "", "out of range: " + std::to_string(v),
                      "allowed: " + std::to_string(lo) + " to " + std::to_string(hi));
  }
  return v;
}

namespace {

uint16_t parse_recompute_modules(const std::string& text) {
  uint16_t bits = 0;
  std::stringstream ss(text);
  std::string item;
  const std::vector<std::string>& names = recompute_module_names();
  while (std::getline(ss, item, ',')) {
    bits |= static_cast<uint16_t>(1u << pick("--recompute-modules", item, names));
  }
  if (bits == 0) throw_input_error("--recompute-modules", "", "empty list", "e.g. layernorm,moe_act");
  return bits;
}

uint8_t parse_cuda_graph(const std::string& text) {
  uint8_t bits = 0;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    bits |= static_cast<uint8_t>(1u << pick("--cuda-graph", item, cuda_graph_module_names()));
  }
  if (bits == 0) throw_input_error("--cuda-graph", "", "empty list", "e.g. attn,moe_router,moe_preprocess or layer");
  return bits;
}

std::vector<int> parse_stage_layers(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    if (item.empty() || item.find_first_not_of("0123456789") != std::string::npos || item.size() > 7) {
      throw_input_error("--stage-layers", "", "\"" + text + "\" is not a comma-separated list of layer counts",
                        "e.g. 7,8,8,7");
    }
    out.push_back(std::stoi(item));  // 0: an empty model chunk (to_job checks per-stage lists)
  }
  if (out.empty()) throw_input_error("--stage-layers", "", "empty list", "e.g. 7,8,8,7");
  return out;
}

// --pipeline-layout: Megatron-Core's layout string as a per-virtual-stage
// stage_layers list, its vp and MTP depths (pipeline_layout.h).
void set_pipeline_layout(const PlanFlags& f, bool stage_layers_given, bool vp_given, bool mtp_given, Plan* p) {
  const char* flag = "--pipeline-layout";
  if (stage_layers_given) throw_input_error(flag, "", "cannot be combined with --stage-layers", "give one of the two");
  PipelineLayout layout;
  const std::string problem = parse_pipeline_layout(f.pipeline_layout, &layout);
  if (!problem.empty()) {
    throw_input_error(flag, "", "\"" + f.pipeline_layout + "\": " + problem,
                      "virtual stages separated by |, each of E t m L with x*n and (...)*n repeats, E first and L "
                      "last, e.g. \"Et|(t*2|)*29,t|tL\" (Megatron-Core pipeline_parallel_layer_layout.py)");
  }
  const int stages = static_cast<int>(layout.stage_layers.size());
  if (stages % p->pp != 0) {
    throw_input_error(flag, "", "lists " + std::to_string(stages) + " virtual stages, not a multiple of --pp " +
                                    std::to_string(p->pp),
                      "pp x vp stages (Megatron: divisible by the pipeline size)");
  }
  const int vp = stages / p->pp;
  if (vp_given && p->vp != vp) {
    throw_input_error(flag, "", "lists " + std::to_string(stages) + " virtual stages, " + std::to_string(vp) +
                                    " per pipeline rank, but --vp is " + std::to_string(p->vp),
                      "drop --vp (the layout sets it) or give pp x vp stages");
  }
  if (p->schedule_given && (p->schedule == Schedule::kDualPipe || v_shape(p->schedule))) {
    throw_input_error(flag, "", std::string("places Megatron's looped model chunks; the ") + to_string(p->schedule) +
                                    " schedule places them otherwise",
                      "use --stage-layers with that schedule, or an interleaved schedule");
  }
  if (mtp_given && p->mtp_layers != layout.mtp_layers) {
    throw_input_error(flag, "", "holds " + std::to_string(layout.mtp_layers) + " MTP depths m but --mtp-layers is " +
                                    std::to_string(p->mtp_layers),
                      "as many m as --mtp-layers (Megatron validate_layer_layout)");
  }
  p->mtp_layers = layout.mtp_layers;
  p->vp = vp;
  p->stage_layers = layout.stage_layers;
}

}  // namespace

void add_precision_flags(CLI::App* app, std::string* precision, std::string* fp8_recipe) {
  app->add_option("--precision", *precision, "bf16|fp16|fp32|fp8 (default bf16; fp8: bf16 with FP8 linear GEMMs)");
  app->add_option("--fp8-recipe", *fp8_recipe,
                  "with --precision fp8: delayed|tensorwise|rowwise|blockwise|mxfp8 (default mxfp8 on Blackwell, "
                  "tensorwise with ZeRO-3, else delayed)");
}

void set_precision_flags(const std::string& precision, const std::string* fp8_recipe, Plan* plan) {
  set_precision(precision_names()[pick("--precision", precision, precision_names())], plan);
  if (fp8_recipe == nullptr) return;
  if (plan->fp8_recipe == Fp8Recipe::kNone) {
    throw_input_error("--fp8-recipe", "", "needs --precision fp8", "add --precision fp8 or drop --fp8-recipe");
  }
  set_fp8_recipe(fp8_recipe_names()[pick("--fp8-recipe", *fp8_recipe, fp8_recipe_names())], plan);
}

Job to_job(const PlanFlags& f) {
  Job job;
  auto given = [&f](const char* flag) { return f.app != nullptr && f.app->count(flag) > 0; };
  if (!f.plan_file.empty()) {
    for (const char* flag : {"--model", "--cluster", "--nodes", "--gpus", "--tp", "--pp", "--dp", "--cp", "--vp",
                             "--zero", "--shard-group", "--mbs", "--gbs", "--seq", "--recompute", "--recompute-modules", "--recompute-layers", "--sp", "--schedule",
                             "--precision", "--fp8-recipe", "--grad-dtype", "--attention", "--dp-mode", "--offload", "--ps-servers",
                             "--stage-layers", "--pipeline-layout", "--framework", "--fp8-param-gather", "--tp-comm-overlap", "--compile", "--ep", "--etp", "--moe-imbalance", "--moe-dispatcher", "--moe-pad-to-capacity"}) {
      if (given(flag)) throw_input_error(flag, "", "cannot be combined with --plan", "edit the plan file or drop --plan");
    }
    PlanJob pj = load_plan_job(f.plan_file, f.calibration);
    job.model = std::move(pj.model);
    job.cluster = std::move(pj.cluster);
    job.model_ref = pj.file.model;
    job.cluster_ref = pj.file.cluster;
    job.gpus = pj.file.gpus;
    job.plan = pj.file.plan;
    return job;
  }
  if (f.model.empty()) throw_input_error("--model", "", "is required", "give --model NAME, or --plan plan.json");
  if (f.cluster.empty()) throw_input_error("--cluster", "", "is required", "give --cluster NAME, or --plan plan.json");
  // Validate the flags that need no file first, so a bad flag is reported
  // even when a file is also bad.  Flags whose default is derived (--dp,
  // --gbs, --seq, --shard-group, --ps-servers) must be >= 1 when given: 0
  // would silently mean the default.
  Plan& p = job.plan;
  auto derived = [&](const char* flag, int64_t v, int64_t hi) {
    return given(flag) ? in_range(flag, v, 1, hi) : int64_t{0};
  };
  p.tp = static_cast<int>(in_range("--tp", f.tp, 1, kMaxDegree));
  p.pp = static_cast<int>(in_range("--pp", f.pp, 1, kMaxDegree));
  p.dp = static_cast<int>(derived("--dp", f.dp, kMaxDegree));
  p.cp = static_cast<int>(in_range("--cp", f.cp, 1, kMaxDegree));
  p.vp = static_cast<int>(in_range("--vp", f.vp, 1, kMaxDegree));
  if (f.zero < 0 || f.zero > 3) throw_input_error("--zero", "", "unknown ZeRO stage " + std::to_string(f.zero), "allowed: 0, 1, 2, 3");
  p.zero = static_cast<int>(f.zero);
  p.shard_group = static_cast<int>(derived("--shard-group", f.shard_group, kMaxDegree));
  p.mbs = in_range("--mbs", f.mbs, 1, kMaxDegree);
  p.gbs = derived("--gbs", f.gbs, kMaxGlobalBatch);
  p.seq = derived("--seq", f.seq, kMaxSeqLen);
  p.recompute = static_cast<Recompute>(pick("--recompute", f.recompute, {"none", "selective", "full"}));
  if (given("--recompute-modules")) {
    p.recompute_modules = parse_recompute_modules(f.recompute_modules);
    if (p.recompute != Recompute::kSelective) {
      throw_input_error("--recompute-modules", "", "needs --recompute selective", "add --recompute selective");
    }
  }
  if (given("--recompute-layers")) {
    p.recompute_layers = static_cast<int>(in_range("--recompute-layers", f.recompute_layers, 1, kMaxDegree));
    if (p.recompute != Recompute::kFull) {
      throw_input_error("--recompute-layers", "", "needs --recompute full", "add --recompute full");
    }
  }
  p.sp = f.sp;
  if (!f.schedule.empty()) {
    p.schedule = static_cast<Schedule>(pick("--schedule", f.schedule, schedule_names()));
    p.schedule_given = true;
  }
  set_precision_flags(f.precision, given("--fp8-recipe") ? &f.fp8_recipe : nullptr, &p);
  if (!f.grad_dtype.empty()) {
    p.grad_dtype = static_cast<GradDtype>(pick("--grad-dtype", f.grad_dtype, {"bf16", "fp32"}));
  }
  if (!f.moment_dtype.empty()) {
    p.moment_dtype = static_cast<MomentDtype>(pick("--moment-dtype", f.moment_dtype, {"fp32", "bf16"}));
  }
  set_attention(&p, attention_names()[pick("--attention", f.attention, attention_names())]);
  p.dp_mode = static_cast<DpMode>(pick("--dp-mode", f.dp_mode, {"sync", "async"}));
  p.offload = static_cast<Offload>(pick("--offload", f.offload, {"none", "optimizer", "params"}));
  p.ps_servers = static_cast<int>(derived("--ps-servers", f.ps_servers, kMaxDegree));
  if (given("--stage-layers")) p.stage_layers = parse_stage_layers(f.stage_layers);
  if (!f.framework.empty()) p.framework = static_cast<Framework>(pick("--framework", f.framework, framework_names()));
  p.fp8_param_gather = f.fp8_param_gather;
  p.tp_comm_overlap = f.tp_comm_overlap;
  p.compile = f.compile;
  p.ep_overlap = f.ep_overlap;
  p.delay_wgrad = f.delay_wgrad;
  p.moe_dispatcher = static_cast<MoeDispatcher>(pick("--moe-dispatcher", f.moe_dispatcher, moe_dispatcher_names()));
  p.moe_pad_to_capacity = f.moe_pad_to_capacity;
  p.moe_router_fusion = f.moe_router_fusion;
  p.moe_shared_expert_overlap = f.moe_shared_expert_overlap;
  p.cross_entropy_fusion = f.cross_entropy_fusion;
  p.cp_comm = static_cast<CpComm>(pick("--cp-comm-type", f.cp_comm, cp_comm_names()));
  if (given("--cuda-graph")) p.cuda_graph = parse_cuda_graph(f.cuda_graph);
  p.mtp_layers = static_cast<int>(in_range("--mtp-layers", f.mtp_layers, 0, kMaxMtpLayers));
  if (given("--stage-layers") && static_cast<int>(p.stage_layers.size()) == p.pp &&
      std::find(p.stage_layers.begin(), p.stage_layers.end(), 0) != p.stage_layers.end()) {
    throw_input_error("--stage-layers", "", "every pipeline stage needs at least one layer",
                      "e.g. 7,8,8,7 (zeros only in a list per virtual stage, pp*vp entries)");
  }
  if (given("--pipeline-layout")) set_pipeline_layout(f, given("--stage-layers"), given("--vp"), given("--mtp-layers"), &p);
  p.ep = static_cast<int>(in_range("--ep", f.ep, 1, kMaxDegree));
  p.etp = static_cast<int>(derived("--etp", f.etp, kMaxDegree));
  if (given("--moe-imbalance")) {
    if (!(f.moe_imbalance >= 1 && f.moe_imbalance <= 1024)) {
      throw_input_error("--moe-imbalance", "", "out of range: " + std::to_string(f.moe_imbalance),
                        "allowed: 1 to 1024 (the busiest rank's load over the mean)");
    }
    p.moe_imbalance = f.moe_imbalance;
  }
  if (given("--nodes") == given("--gpus")) {
    throw_input_error("--nodes", "", "give exactly one of --nodes N or --gpus N", "");
  }

  job.model = load_model(f.model);
  job.cluster = load_cluster(f.cluster);
  job.model_ref = f.model;
  job.cluster_ref = f.cluster;
  if (!f.calibration.empty()) apply_calibration(load_calibration(f.calibration), "--calibration", &job.cluster);
  if (given("--nodes")) {
    job.gpus = gpus_of_nodes(job.cluster, f.nodes);
  } else {
    check_gpu_count(job.cluster, f.gpus, "--gpus", "");
    job.gpus = static_cast<int>(f.gpus);
  }
  return job;
}


}  // namespace trainplan
