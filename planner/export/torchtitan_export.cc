// The torchtitan exports: a TOML job config (torchtitan/config/job_config.py,
// models/*/infra/parallelize.py, distributed/parallel_dims.py) and the same
// job as a Python launcher (torchtitan-py).
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
namespace export_detail {

namespace {

// The llama3 flavors torchtitan ships (torchtitan/models/llama3/__init__.py),
// with the ffn size its ffn_dim_multiplier / multiple_of give, and the
// vocabulary every one of them has (model/args.py TransformerModelArgs
// vocab_size = 128256; v0.2.2 takes it from there, not from the tokenizer):
// Llama 2 70B has the 70B flavor's layers but 32000 tokens.
struct TitanFlavor {
  const char* flavor;
  int64_t layers, hidden, heads, kv_heads, ffn_hidden, vocab;
};
constexpr TitanFlavor kTitanFlavors[] = {
    {"8B", 32, 4096, 32, 8, 14336, 128256},
    {"70B", 80, 8192, 64, 8, 28672, 128256},
    {"405B", 126, 16384, 128, 8, 53248, 128256},
};

// The MoE models torchtitan v0.2.2 ships (torchtitan/models/<name>/__init__.py
// flavors; tests/data/frameworks/torchtitan.json "moe_flavors"), matched to a
// model by shape, and what each train spec runs: pipelining_fn set
// (deepseek_v3 yes; qwen3 and gpt_oss None, torchtitan/train.py raises
// "Pipeline Parallel is enabled but <name> does not support pipelining"),
// context parallel (needs SDPA attention: qwen3 yes; deepseek_v3's 671B
// flavor uses flex attention and its args.py raises "Context Parallel only
// supports SDPA attention"; gpt_oss raises "CP support for gpt-oss model is
// still in progress").  Sliding windows: gpt_oss's even layers attend
// through a 128-token window (torchtitan/models/gpt_oss: sliding_window_size
// 128, use_sliding_attention = layer_id % 2 == 0), i.e. full_every 2.
// Group-limited routing: deepseek_v3's 671B flavor sets n_expert_groups 8,
// n_limited_groups 4 (torchtitan/models/deepseek_v3/__init__.py); the
// others route over every expert.
struct TitanMoeFlavor {
  const char* name;
  const char* flavor;
  int64_t layers, hidden, vocab, experts, top_k, expert_ffn_hidden, shared_experts, dense_layers;
  bool pipeline, context_parallel;
  int64_t window_tokens, window_full_every;  // 0, 0: no sliding window
  int64_t router_groups, router_group_topk;  // 0, 0: no group-limited routing
};
constexpr TitanMoeFlavor kTitanMoeFlavors[] = {
    {"deepseek_v3", "671B", 61, 7168, 129280, 256, 8, 2048, 1, 3, true, false, 0, 0, 8, 4},
    {"qwen3", "30B-A3B", 48, 2048, 151936, 128, 8, 768, 0, 0, false, true, 0, 0, 0, 0},
    {"qwen3", "235B-A22B", 94, 4096, 151936, 128, 8, 1536, 0, 0, false, true, 0, 0, 0, 0},
    {"gpt_oss", "120b", 36, 2880, 201088, 128, 4, 2880, 0, 0, false, false, 128, 2, 0, 0},
};

// What the torchtitan export writes in [model]: the train spec and flavor.
struct TitanModel {
  std::string name, flavor;
  bool moe = false;
};

// dp_shard x cp ranks hold one copy of sharded state; replicas across the
// rest (ZeRO 0: replicas of one).
std::pair<int, int> titan_dp_degrees(const Layout& L) {
  const Plan& p = L.plan;
  if (p.zero < 2) return {p.dp, 1};
  const int shard = L.shard_degree / p.cp;
  return {p.dp / shard, shard};
}

// The MoE plans torchtitan v0.2.2 (or, with `head`, torchtitan at head
// commit b5bcd76c) cannot run, with the rule; sets *out.  Head differs
// (torchtitan/models/{qwen3,deepseek_v3,gpt_oss}/__init__.py model_registry,
// config/configs.py, distributed/parallel_dims.py): every MoE spec pipelines
// (pipelining_fn=pipeline_llm); context parallelism needs FlexAttention,
// the qwen3 and deepseek_v3 default and gpt_oss's with attn_backend="flex";
// ParallelismConfig has no expert tensor parallelism (the expert mesh is
// pp x dp_replicate x efsdp x ep, efsdp = dp_shard*cp*tp/ep).
std::optional<std::string> titan_moe_refusal(const ModelSpec& m, const Layout& L, TitanModel* out, bool head) {
  const Plan& p = L.plan;
  const TitanMoeFlavor* f = nullptr;
  for (const TitanMoeFlavor& t : kTitanMoeFlavors) {
    if (t.layers == m.layers && t.hidden == m.hidden && t.vocab == m.vocab && t.experts == m.moe.experts &&
        t.top_k == m.moe.top_k && t.expert_ffn_hidden == m.moe.expert_ffn_hidden &&
        t.shared_experts == m.moe.shared_experts && t.dense_layers == m.moe.dense_layers &&
        t.window_tokens == (m.has_sliding_window ? m.sliding_window.tokens : 0) &&
        t.window_full_every == (m.has_sliding_window ? m.sliding_window.full_every : 0) &&
        t.router_groups == m.moe.router_groups && t.router_group_topk == m.moe.router_group_topk) {
      f = &t;
    }
  }
  if (f == nullptr) {
    // Head has more MoE models (kimi_k2_7, qwen3_5) than this export writes.
    return std::string(head ? "torchtitan at head (b5bcd76c) trains MoE models through its own model code, and "
                              "none of the MoE flavors this export writes"
                            : "torchtitan v0.2.2 trains MoE models through its own model code, and none of its "
                              "MoE flavors") +
           " (deepseek_v3 671B, qwen3 30B-A3B and 235B-A22B, gpt_oss 120b) has " + m.name +
           "'s shape, attention windows and routing groups (layers=" +
           str(m.layers) + ", hidden=" + str(m.hidden) + ", experts=" + str(m.moe.experts) + ", top_k=" +
           str(m.moe.top_k) + ", expert_ffn_hidden=" + str(m.moe.expert_ffn_hidden) + "; use --to megatron)";
  }
  if (m.moe.capacity_factor > 0) {
    // torchtitan's MoE routes dropless (torchtitan/models/moe: token-choice
    // top-k with no capacity).
    char cf[32];
    std::snprintf(cf, sizeof cf, "%g", m.moe.capacity_factor);
    return "torchtitan's MoE is dropless (no expert capacity); " + m.name + " drops tokens beyond capacity factor " +
           cf + " (use --to megatron, or a dropless model)";
  }
  out->name = f->name;
  out->flavor = f->flavor;
  out->moe = true;
  if (head && p.etp != 1) {
    return "torchtitan at head has no expert tensor parallelism (ParallelismConfig has no "
           "expert_tensor_parallel_degree; the expert mesh is dp_replicate x efsdp x ep): plan with --etp 1, or "
           "export to the v0.2.2 TOML (--to torchtitan)";
  }
  if (head && p.tp > 1 && p.ep == 1) {
    return "this export writes MoE plans with tp > 1 for torchtitan at head only with expert parallelism (etp 1, "
           "each ep rank taking the tp ranks' token shards, as ParallelDims borrows them); how head runs experts "
           "under tp without ep is not among the checked facts: give --ep > 1, or export to --to torchtitan";
  }
  if (!head && p.moe_dispatcher == MoeDispatcher::kHybridEp) {
    return "torchtitan v0.2.2's expert_parallel_comm_backend is \"standard\" or \"deepep\" (job_config.py); "
           "HybridEP is torchtitan head's (moe_comm_backend): export with --to torchtitan-py";
  }
  if (!head && p.moe_dispatcher == MoeDispatcher::kDeepEp && std::string(f->name) != "deepseek_v3") {
    return std::string("torchtitan v0.2.2 runs DeepEP in deepseek_v3's (and llama4's) parallelize only; ") + f->name +
           " ignores expert_parallel_comm_backend and would dispatch with the standard all-to-all: export with "
           "--to torchtitan-py (head: moe_comm_backend)";
  }
  if (p.pp > 1 && !f->pipeline && !head) {
    return std::string("torchtitan's ") + f->name + " train spec has no pipelining function (torchtitan/train.py: "
           "\"Pipeline Parallel is enabled but " + f->name + " does not support pipelining\"); use pp 1";
  }
  if (p.cp > 1 && !f->context_parallel && !head) {
    return std::string("torchtitan's ") + f->name + " " + f->flavor + " cannot run context parallelism (" +
           (std::string(f->name) == "gpt_oss" ? "\"CP support for gpt-oss model is still in progress\""
                                              : "\"Context Parallel only supports SDPA attention\" and the flavor uses "
                                                "flex attention") +
           "); use cp 1";
  }
  if (p.fp8_recipe != Fp8Recipe::kNone) {
    return std::string("torchtitan's float8 MoE training (quantize.grouped_mm.float8) is a prototype with its own "
                       "limits (no pipeline or context parallelism, no tensorwise TP for deepseek_v3) that this export "
                       "does not check; export the bf16 plan, or use --to megatron");
  }
  if (p.ep > 1 && p.etp != 1 && p.etp != p.tp) {
    return "torchtitan supports expert tensor parallelism equal to tp or 1 (ParallelDims: \"Currently we only "
           "support ETP=TP or ETP=1\"), not etp=" + str(p.etp) + " with tp=" + str(p.tp);
  }
  const auto [dp_replicate, dp_shard] = titan_dp_degrees(L);
  (void)dp_replicate;
  const int64_t borrowed = int64_t{dp_shard} * p.cp * p.tp;
  if (borrowed % (int64_t{p.ep} * p.etp) != 0) {
    return "torchtitan's expert parallelism borrows the dp_shard x cp x tp ranks (" + str(borrowed) +
           "; ParallelDims builds the (efsdp, ep, etp) mesh from them), which ep x etp = " + str(int64_t{p.ep} * p.etp) +
           " must divide; shard the data-parallel ranks with zero 3 or lower ep";
  }
  if (p.ep > 1 && p.etp == 1 && p.tp > 1 && (p.mbs * p.seq) % p.ep != 0) {
    return "torchtitan's expert parallelism with etp 1 and tp > 1 splits each micro-batch's tokens over the ep "
           "ranks (expert_parallel.py: \"Requires EP degree dividing batch size * seq len\"): mbs x seq = " +
           str(p.mbs * p.seq) + " is not a multiple of ep=" + str(p.ep);
  }
  return std::nullopt;
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

// The llama3 train spec: a Llama-family model with one of its flavors'
// shape; sets *out.
std::optional<std::string> titan_llama_refusal(const ModelSpec& m, TitanModel* out) {
  std::vector<std::string> not_llama;
  if (m.mlp != MlpKind::kSwiglu) not_llama.push_back("a GeLU MLP");
  if (m.position_embedding == PositionEmbedding::kLearned) not_llama.push_back("learned positions");
  if (m.position_embedding == PositionEmbedding::kAlibi) not_llama.push_back("ALiBi positions");
  if (m.bias) not_llama.push_back("biases with LayerNorm");
  if (!not_llama.empty()) {
    std::string what = not_llama.front();
    for (size_t i = 1; i < not_llama.size(); ++i) what += (i + 1 == not_llama.size() ? " and " : ", ") + not_llama[i];
    return "torchtitan ships Llama-family models only (SwiGLU, RoPE, RMSNorm, no biases); " + m.name + " has " + what;
  }
  for (const TitanFlavor& t : kTitanFlavors) {
    if (t.layers == m.layers && t.hidden == m.hidden && t.heads == m.heads && t.kv_heads == m.kv_heads &&
        t.ffn_hidden == m.ffn_hidden && t.vocab == m.vocab) {
      out->name = "llama3";
      out->flavor = t.flavor;
      return std::nullopt;
    }
  }
  return "torchtitan picks the architecture by [model] name and flavor, and no llama3 flavor (8B, 70B, 405B) has " +
         m.name + "'s shape (layers=" + str(m.layers) + ", hidden=" + str(m.hidden) + ", heads=" + str(m.heads) +
         ", kv_heads=" + str(m.kv_heads) + ", ffn_hidden=" + str(m.ffn_hidden) + ", vocab=" + str(m.vocab) +
         "); add a flavor to torchtitan/models/llama3 first";
}

// The plans torchtitan (v0.2.2 and head alike) cannot run, with the rule;
// sets *out to the [model] name and flavor of the model (llama3, or one of
// the MoE train specs of v0.2.2).
std::optional<std::string> titan_refusal(const ModelSpec& m, const Layout& L, TitanModel* out, bool head) {
  const Plan& p = L.plan;
  if (auto r = async_refusal("torchtitan", p)) return r;
  if (auto r = fp8_refusal("torchtitan", p, false)) return r;
  if (auto r = partial_recompute_refusal(
          "torchtitan", p, "checkpoints every layer (mode = \"full\") or every N-th block (selective_ac_option = \"N\")")) {
    return r;
  }
  if (m.has_sliding_window && !m.has_moe) {
    return std::optional<std::string>("torchtitan's llama3 models attend to the whole causal prefix; " + m.name +
                                      " has sliding-window layers (use --to megatron)");
  }
  if (auto r = m.has_moe ? titan_moe_refusal(m, L, out, head) : titan_llama_refusal(m, out)) return r;
  if (p.zero == 1) {
    return std::optional<std::string>(
        "torchtitan has no optimizer-only sharding (ZeRO-1); its data parallelism is DDP "
        "(data_parallel_replicate_degree) or FSDP2 (data_parallel_shard_degree: ZeRO-2 with "
        "fsdp_reshard_after_forward = \"never\", ZeRO-3 otherwise)");
  }
  if (p.zero == 0 && p.cp > 1) {
    return std::optional<std::string>(
        "torchtitan shards parameters over the context-parallel ranks with FSDP2 whenever cp > 1, so zero 0 with "
        "cp > 1 cannot be expressed (use zero 3)");
  }
  if (p.zero == 0 && p.dp > 1 && (p.tp > 1 || p.pp > 1)) {
    return std::optional<std::string>(
        "torchtitan applies DDP (zero 0) only without other parallelism (\"DDP has not supported > 1D "
        "parallelism\"); use zero 2 or 3 to combine data parallelism with tp or pp");
  }
  if (p.zero >= 2 && L.shard_degree % p.cp != 0) {
    return std::optional<std::string>("torchtitan's FSDP2 shards over dp_shard x cp ranks, so the shard group must be a multiple of cp=" +
                  str(p.cp) + " (shard group " + str(L.shard_degree) + ")");
  }
  if (p.precision == Precision::kFp16) {
    return std::optional<std::string>(
        "torchtitan's training.mixed_precision_param is bfloat16 or float32; it has no fp16 (loss-scaled) training "
        "(use precision bf16)");
  }
  if (p.grad_dtype == GradDtype::kBf16) {
    return std::optional<std::string>("torchtitan reduces gradients in float32 only (training.mixed_precision_reduce)");
  }
  if (p.offload == Offload::kOptimizer) {
    return std::optional<std::string>(
        "torchtitan's training.enable_cpu_offload (FSDP2 CPUOffloadPolicy) moves parameters, gradients and optimizer "
        "state together; it has no optimizer-only offload (use offload params with zero 3)");
  }
  if (p.attention == Attention::kNaive) {
    return std::optional<std::string>(
        "torchtitan's llama3 attention is scaled_dot_product_attention (fused kernels); it has no unfused attention "
        "(use attention flash)");
  }
  if (auto r = attention_kernel_refusal("torchtitan", p, AttentionKernel::kFa2,
                                        "scaled_dot_product_attention, whose flash backend is FlashAttention-2")) {
    return r;
  }
  if (p.schedule == Schedule::kDualPipeV && p.ep > 1 && p.recompute != Recompute::kNone) {
    // torchtitan/distributed/dual_pipe_v.py get_dual_pipe_v_flag.
    return std::optional<std::string>(
        "torchtitan raises NotImplementedError for expert parallelism with DualPipeV and activation checkpointing "
        "(\"cannot be used together\"); use recompute none with dualpipe-v, or schedule zb-v");
  }
  if (zero_bubble_automatic(p.schedule)) {
    // torch/distributed/pipelining/schedules.py: ScheduleInterleavedZeroBubble
    // ("the ZB1P schedule in the paper") and ScheduleZBVZeroBubble are
    // multi-stage schedules, and torchtitan's pipeline_llm requires at least 2
    // stages per rank for them; there is no single-stage one.
    return std::optional<std::string>(std::string("torchtitan has no ") + to_string(p.schedule) +
                  " schedule with one stage per rank: its zero-bubble schedules (InterleavedZeroBubble, "
                  "ZBVZeroBubble) run 2 or more stages per rank (\"Multi-stage schedule requires at least 2 stages "
                  "per rank\"); use schedule zb-v, 1f1b or interleaved");
  }
  if (p.pp > 1 && p.schedule == Schedule::kNaive) {
    return std::optional<std::string>(
        "torchtitan has no naive pipeline schedule (one micro-batch in flight); pipeline_parallel_schedule takes "
        "GPipe, 1F1B, Interleaved1F1B and others (use schedule 1f1b)");
  }
  const int64_t divisor = int64_t{p.tp} * p.cp * 2;
  if (p.seq % divisor != 0) {
    return std::optional<std::string>("torchtitan needs seq_len=" + str(p.seq) + " divisible by tp*cp*2 = " + str(divisor) +
                  " (sequence parallelism and load-balanced context parallelism)");
  }
  return std::nullopt;
}


const char* titan_schedule(Schedule s) {
  if (s == Schedule::kGpipe) return "GPipe";
  if (s == Schedule::kInterleaved) return "Interleaved1F1B";
  if (s == Schedule::kZbv) return "ZBVZeroBubble";
  if (s == Schedule::kDualPipeV) return "DualPipeV";
  if (s == Schedule::kInterleavedZb) return "InterleavedZeroBubble";
  return "1F1B";
}

}  // namespace

ExportResult export_torchtitan(const ModelSpec& m, const ClusterSpec& c, const Layout& L, Render render) {
  const Plan& p = L.plan;
  TitanModel model;
  if (auto r = titan_refusal(m, L, &model, false)) return refuse(*r);
  if (render == Render::kCheckOnly) return accept("");

  const auto [dp_replicate, dp_shard] = titan_dp_degrees(L);
  const char* schedule = titan_schedule(p.schedule);

  std::string s = header_comment("# ", "torchtitan v0.2.2 job config (TOML)", m, c, L);
  s += "# For torchtitan 0.2.0-0.2.2 (pip install torchtitan==0.2.2): the last releases that\n"
       "# read TOML job configs; 0.3 and later take a Python Trainer.Config (--module/--config):\n"
       "# trainplan export --to torchtitan-py writes that.\n";
  s += "# Run it from a torchtitan checkout";
  const LaunchShape h = launch_of(c, L);
  if (h.hosts == 1) {
    s += ":\n#   NGPU=" + str(L.gpus) + " CONFIG_FILE=<this file> ./run_train.sh\n";
  } else {
    s += " on each of the " + str(h.hosts) + " nodes:\n#   torchrun --nproc_per_node " + str(h.per_host) +
         " --nnodes " + str(h.hosts) +
         " --node_rank $NODE_RANK --rdzv_backend c10d \\\n#     --rdzv_endpoint $MASTER_ADDR:29500 -m "
         "torchtitan.train --job.config_file <this file>\n";
  }
  s += "# Set [model] hf_assets_path (the folder with the tokenizer) and\n"
       "# [training] dataset for your data.\n\n";
  s += "[job]\n";
  s += "dump_folder = \"./outputs\"\n";
  s += "description = " + toml_string(m.name + " on " + c.name + ", " + str(L.gpus) + " GPUs (trainplan export)") +
       "\n\n";
  s += "[model]\n";
  s += "name = " + toml_string(model.name) + "\n";
  s += "flavor = " + toml_string(model.flavor) + "\n";
  const bool fp8 = p.fp8_recipe != Fp8Recipe::kNone;
  if (fp8) {
    // torchao float8 linears (v0.2.x registers the converter as
    // "quantize.linear.float8"; v0.1's "float8" raises KeyError).
    s += "converters = [\"quantize.linear.float8\"]\n";
  }
  s += "\n";
  if (fp8) {
    s += "[quantize.linear.float8]\n";
    s += "# The output layer stays bf16, as simulated (torchtitan converts it by default).\n";
    s += "filter_fqns = [\"output\"]\n";
    if (p.fp8_recipe == Fp8Recipe::kRowwise) {
      s += "recipe_name = \"rowwise\"\n";
    } else if (dp_shard > 1) {
      s += "# Tensorwise scaling: FSDP2 all-gathers the linear weights in FP8.\n";
      s += "enable_fsdp_float8_all_gather = true\n";
      s += "precompute_float8_dynamic_scale_for_fsdp = true\n";
    }
    s += "\n";
  }
  if (model_compiled(p)) {
    s += "[compile]\n";
    if (p.compile) s += "# The model under torch.compile (--compile), its elementwise ops fused, as simulated.\n";
    if (fp8) s += "# torch.compile fuses the float8 scaling and casts (torchtitan docs/float8.md).\n";
    if (p.tp_comm_overlap) {
      s += "# Async TP needs the model compiled, 'model' among the components (the default)\n"
           "# (torchtitan/distributed/tensor_parallel.py maybe_enable_async_tp).\n";
    }
    s += "enable = true\n\n";
  }
  s += "[optimizer]\n";
  s += "name = \"AdamW\"\n";
  s += "lr = " + std::string(kLearningRate) + "\n";
  s += "eps = 1e-8\n";
  s += "weight_decay = 0.1\n\n";
  s += "[lr_scheduler]\n";
  s += "warmup_steps = " + str(kWarmupIters) + "\n\n";
  s += "[training]\n";
  if (p.pp > 1) {
    s += "# Per data-parallel rank per step: " + str(L.microbatches) + " pipeline micro-batches of " + str(p.mbs) +
         ".\n";
    s += "local_batch_size = " + str(p.mbs * L.microbatches) + "\n";
  } else {
    s += "# Per data-parallel rank per micro-step; global / (local * dp) = " + str(L.microbatches) +
         " accumulation steps.\n";
    s += "local_batch_size = " + str(p.mbs) + "\n";
  }
  s += "global_batch_size = " + str(p.gbs) + "\n";
  s += "seq_len = " + str(p.seq) + "\n";
  s += "max_norm = 1.0\n";
  s += "steps = " + str(kTrainIters) + "\n";
  s += std::string("mixed_precision_param = ") + (p.precision == Precision::kBf16 ? "\"bfloat16\"" : "\"float32\"") +
       "\n";
  s += "mixed_precision_reduce = \"float32\"\n";
  s += std::string("enable_cpu_offload = ") + (p.offload == Offload::kParams ? "true" : "false") + "\n\n";
  s += "[parallelism]\n";
  s += "data_parallel_replicate_degree = " + str(dp_replicate) + "\n";
  s += "data_parallel_shard_degree = " + str(dp_shard) + "\n";
  if (p.zero >= 2) {
    s += "# ZeRO-" + str(p.zero) + ": " +
         (p.zero == 2 ? "keep gathered parameters from forward to backward."
                      : "free gathered parameters after forward, gather again in backward.") +
         "\n";
    s += std::string("fsdp_reshard_after_forward = ") + (p.zero == 2 ? "\"never\"" : "\"always\"") + "\n";
  }
  s += "tensor_parallel_degree = " + str(p.tp) + "\n";
  if (p.tp > 1 && !p.sp) s += "# torchtitan always shards norms and dropout over the sequence (sp) with tp.\n";
  if (p.tp_comm_overlap) {
    s += "# Async TP: the sequence-parallel all-gathers and reduce-scatters micro-pipelined with\n"
         "# their GEMMs (torch SymmetricMemory), as simulated.\n";
  }
  s += std::string("enable_async_tensor_parallel = ") + (p.tp_comm_overlap ? "true" : "false") + "\n";
  s += "pipeline_parallel_degree = " + str(p.pp) + "\n";
  if (p.pp > 1) {
    s += "pipeline_parallel_schedule = " + toml_string(schedule) + "\n";
    s += "pipeline_parallel_microbatch_size = " + str(p.mbs) + "\n";
    // The modules of each virtual stage, in model order (stage v*pp + r is
    // chunk v of pipeline rank r; ZBVZeroBubble places them in a V, stages r
    // and 2pp-1-r on rank r, pipeline_module_split style "v"): the plan's
    // split exactly.  torchtitan's
    // pipeline_parallel_layers_per_stage would let it choose the split
    // itself, counting the embedding and the output as layers
    // (torchtitan/distributed/pipeline_parallel.py,
    // generate_llm_fqn_per_model_part), which is not the simulated plan.
    const std::vector<int> stages = virtual_stage_layers(L);
    s += "# Virtual stages of " + join(stages, ", ") + " transformer layers; the embedding on the first,\n"
         "# the final norm and output on the last.\n";
    if (p.schedule == Schedule::kDualPipeV && p.ep > 1) {
      s += "# DualPipeV overlaps one micro-batch's expert all-to-alls with the other's compute, as simulated.\n";
      s += "pipeline_parallel_expert_parallel_overlap = true\n";
    }
    if (v_shape(p.schedule)) {
      s += "# " + std::string(schedule) + " places them in a V: pipeline rank r runs stages r and " + str(2 * p.pp - 1) +
           " - r,\n# so rank 0 holds the first and the last.\n";
    }
    s += "module_fqns_per_model_part = [\n";
    int next = 0;
    for (size_t i = 0; i < stages.size(); ++i) {
      std::string part;
      auto add = [&part](const std::string& fqn) { part += (part.empty() ? "" : ", ") + toml_string(fqn); };
      if (i == 0) add("tok_embeddings");
      for (int l = 0; l < stages[i]; ++l) add("layers." + std::to_string(next++));
      if (i + 1 == stages.size()) {
        add("norm");
        add("output");
      }
      s += "  [" + part + "],\n";
    }
    s += "]\n";
  }
  s += "context_parallel_degree = " + str(p.cp) + "\n";
  if (model.moe) {
    s += "# The experts over ep ranks borrowed from dp_shard x cp" + std::string(p.etp == 1 ? " x tp" : "") +
         ", each expert split over etp (= 1 or tp).\n";
    s += "expert_parallel_degree = " + str(p.ep) + "\n";
    s += "expert_tensor_parallel_degree = " + str(p.etp) + "\n";
    if (p.moe_dispatcher == MoeDispatcher::kDeepEp) {
      s += "# Dispatch and combine through DeepEP's kernels, as simulated (each token once per destination).\n";
      s += "expert_parallel_comm_backend = \"deepep\"\n";
    }
  }
  s += "\n";
  s += "[activation_checkpoint]\n";
  if (p.recompute == Recompute::kFull) {
    s += "mode = \"full\"\n";
  } else if (p.recompute == Recompute::kSelective) {
    s += "mode = \"selective\"\n";
    s += "selective_ac_option = \"op\"\n";
  } else {
    s += "mode = \"none\"\n";
  }
  return accept(s);
}

namespace {


// The Python Trainer.Config torchtitan's head (and 0.3) reads instead of
// TOML (torchtitan/config/manager.py ConfigManager._load_config: --module
// names a module, --config a zero-argument function in it returning
// Trainer.Config).  Field names and types are those of head commit b5bcd76c
// (tests/data/frameworks/torchtitan.json "head"); the same plans as the TOML
// export are accepted, plus one rule: head's float8 converter is not
// written (its Config fields are not part of the checked facts).

// Where torchtitan's own job configs point hf_assets_path (the tokenizer
// folder): torchtitan/models/*/config_registry.py at head.
std::string titan_hf_assets(const TitanModel& model) {
  if (model.name == "llama3") return "./assets/hf/Llama-3.1-" + model.flavor;
  if (model.name == "qwen3") return "./assets/hf/Qwen3-" + model.flavor;
  if (model.name == "deepseek_v3") return "./assets/hf/DeepSeek-V3.1-Base";
  return "./assets/hf/gpt-oss-" + model.flavor;
}

}  // namespace

ExportResult export_torchtitan_py(const ModelSpec& m, const ClusterSpec& c, const Layout& L, Render render) {
  const Plan& p = L.plan;
  TitanModel model;
  if (auto r = titan_refusal(m, L, &model, true)) return refuse(*r);
  if (p.fp8_recipe != Fp8Recipe::kNone) {
    return refuse(
        "the torchtitan head export writes no float8 converter (Float8LinearConverter.Config at head is not among "
        "the checked config facts); export FP8 plans with --to torchtitan (v0.2.2 TOML)");
  }
  if (render == Render::kCheckOnly) return accept("");
  const auto [dp_replicate, dp_shard] = titan_dp_degrees(L);
  const std::string ind = "        ";
  std::string s = header_comment("# ", "torchtitan head Python config (Trainer.Config)", m, c, L);
  s += "# For torchtitan at head (commit b5bcd76c, 2026-08-21) and 0.3, which take a Python\n"
       "# Trainer.Config instead of TOML.  Save this file as trainplan_job.py on PYTHONPATH and\n";
  const LaunchShape h = launch_of(c, L);
  if (h.hosts == 1) {
    s += "# run from a torchtitan checkout:\n#   MODULE=trainplan_job CONFIG=trainplan_job NGPU=" + str(L.gpus) +
         " ./run_train.sh\n";
  } else {
    s += "# run on each of the " + str(h.hosts) + " nodes:\n#   torchrun --nproc_per_node " +
         str(h.per_host) + " --nnodes " + str(h.hosts) +
         " --node_rank $NODE_RANK --rdzv_backend c10d \\\n#     --rdzv_endpoint $MASTER_ADDR:29500 -m "
         "torchtitan.train --module trainplan_job --config trainplan_job\n";
  }
  s += "# Set hf_assets_path (the folder with the tokenizer) and the dataset (c4 here, as\n"
       "# torchtitan's llama3 configs) for your data.\n\n";
  s += "from torchtitan.components.data import ConcatThenSplitPackingConfig, GrainDataLoader\n";
  s += "from torchtitan.components.loss import CrossEntropyLoss\n";
  s += "from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw\n";
  s += "from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig\n";
  if (p.recompute != Recompute::kNone) {
    s += std::string("from torchtitan.distributed.activation_checkpoint import ") +
         (p.recompute == Recompute::kFull ? "FullAC" : "SelectiveAC") + "\n";
  }
  s += "from torchtitan.hf_datasets.text_datasets import DATASETS\n";
  s += "from torchtitan.models.common.config_utils import decoder_vocab_size\n";
  s += "from torchtitan.models." + model.name + " import model_registry\n";
  s += "from torchtitan.trainer import Trainer\n\n\n";
  s += "def trainplan_job() -> Trainer.Config:\n";
  // gpt_oss defaults to varlen attention, which context parallelism refuses
  // ("Context Parallel is not supported with ScaledDotProductAttention or
  // VarlenAttention. Use FlexAttention or disable CP.").
  const bool flex_attention = model.name == "gpt_oss" && p.cp > 1;
  // The plan's DeepEP / HybridEP dispatch (Plan::moe_dispatcher):
  // model_registry's moe_comm_backend (models/common/config_utils.py
  // make_token_dispatcher_config: standard | deepep | hybridep).
  const std::string comm_backend = p.moe_dispatcher != MoeDispatcher::kAllToAll
                                       ? std::string(", moe_comm_backend=\"") + to_string(p.moe_dispatcher) + "\""
                                       : std::string();
  s += "    model_spec = model_registry(\"" + model.flavor + "\"" + (flex_attention ? ", attn_backend=\"flex\"" : "") +
       comm_backend + ")\n";
  s += "    return Trainer.Config(\n";
  s += "        model_spec=model_spec,\n";
  // The base loss is abstract: the plain cross entropy simulated (one
  // logits GEMM, not the chunked wrapper of torchtitan's own configs).
  s += "        loss=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(model_spec)),\n";
  s += "        dataloader=GrainDataLoader.Config(dataset=ConcatThenSplitPackingConfig(dataset=DATASETS[\"c4\"])),\n";
  s += "        hf_assets_path=\"" + titan_hf_assets(model) + "\",\n";
  s += "        dump_folder=\"./outputs\",\n";
  s += "        optimizer=default_adamw(lr=" + std::string(kLearningRate) + "),\n";
  s += "        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=" + str(kWarmupIters) + "),\n";
  s += "        training=TrainingConfig(\n";
  s += ind + "    # mbs " + str(p.mbs) + " x seq " + str(p.seq) + " tokens per micro-batch; gbs " + str(p.gbs) +
       " sequences per step.\n";
  s += ind + "    num_tokens_per_microbatch_per_dp_rank=" + str(p.mbs * p.seq) + ",\n";
  s += ind + "    num_tokens_per_train_step=" + str(p.gbs * p.seq) + ",\n";
  s += ind + "    max_context_length=" + str(p.seq) + ",\n";
  s += ind + "    max_norm=1.0,\n";
  s += ind + "    steps=" + str(kTrainIters) + ",\n";
  s += ind + "    mixed_precision_param=" + (p.precision == Precision::kBf16 ? "\"bfloat16\"" : "\"float32\"") + ",\n";
  s += ind + "    mixed_precision_reduce=\"float32\",\n";
  s += ind + "    enable_cpu_offload=" + py_bool(p.offload == Offload::kParams) + ",\n";
  // Trainer.Config._validate_cuda_graphs: pipeline parallelism, and expert
  // parallelism on the standard all-to-all (dynamic token counts), need
  // them off.
  s += ind + "    disable_cuda_graphs=" + py_bool(p.pp > 1 || p.ep > 1) + ",\n";
  s += ind + "),\n";
  s += "        parallelism=ParallelismConfig(\n";
  s += ind + "    data_parallel_replicate_degree=" + str(dp_replicate) + ",\n";
  s += ind + "    data_parallel_shard_degree=" + str(dp_shard) + ",\n";
  if (p.zero >= 2) {
    s += ind + "    # ZeRO-" + str(p.zero) + ": " +
         (p.zero == 2 ? "keep gathered parameters from forward to backward."
                      : "free gathered parameters after forward, gather again in backward.") +
         "\n";
    s += ind + "    fsdp_reshard_after_forward=" + (p.zero == 2 ? "\"never\"" : "\"always\"") + ",\n";
  }
  s += ind + "    tensor_parallel_degree=" + str(p.tp) + ",\n";
  s += ind + "    enable_sequence_parallel=" + py_bool(p.tp > 1 ? p.sp : true) + ",\n";
  s += ind + "    pipeline_parallel_degree=" + str(p.pp) + ",\n";
  if (p.pp > 1) {
    s += ind + "    pipeline_parallel_schedule=\"" + std::string(titan_schedule(p.schedule)) + "\",\n";
    s += ind + "    num_pp_microbatches=" + str(L.microbatches) + ",\n";
    // The plan's split exactly (see export_torchtitan); head names the
    // output module lm_head.
    const std::vector<int> stages = virtual_stage_layers(L);
    s += ind + "    # Virtual stages of " + join(stages, ", ") + " transformer layers.\n";
    s += ind + "    module_fqns_per_model_part=[\n";
    int next = 0;
    for (size_t i = 0; i < stages.size(); ++i) {
      std::string part;
      auto add = [&part](const std::string& fqn) { part += (part.empty() ? "\"" : ", \"") + fqn + "\""; };
      if (i == 0) add("tok_embeddings");
      for (int l = 0; l < stages[i]; ++l) add("layers." + std::to_string(next++));
      if (i + 1 == stages.size()) {
        add("norm");
        add("lm_head");
      }
      s += ind + "        [" + part + "],\n";
    }
    s += ind + "    ],\n";
  }
  s += ind + "    context_parallel_degree=" + str(p.cp) + ",\n";
  if (model.moe) {
    s += ind + "    # The experts over ep ranks borrowed from dp_shard x cp x tp (no expert TP at head).\n";
    s += ind + "    expert_parallel_degree=" + str(p.ep) + ",\n";
  }
  s += ind + "),\n";
  if (p.tp_comm_overlap) {
    s += "        # Async TP (micro-pipelined sequence-parallel collectives, as simulated) needs the\n"
         "        # model compiled (CompileConfig.__post_init__).\n"
         "        compile=CompileConfig(enable=True, enable_async_tensor_parallel=True),\n";
  } else if (model_compiled(p)) {
    // (FP8 plans, compiled by implication, are refused above: no float8
    // converter at head.)
    s += "        # The model under torch.compile (--compile), its elementwise ops fused, as simulated.\n";
    s += "        compile=CompileConfig(enable=True),\n";
  } else {
    s += "        compile=CompileConfig(enable=False),\n";
  }
  if (p.recompute == Recompute::kFull) {
    s += "        activation_checkpoint=FullAC.Config(),\n";
  } else if (p.recompute == Recompute::kSelective) {
    s += "        activation_checkpoint=SelectiveAC.Config(),\n";
  } else {
    s += "        activation_checkpoint=None,\n";
  }
  s += "    )\n";
  return accept(s);
}

}  // namespace export_detail
}  // namespace trainplan
