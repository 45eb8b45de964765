// The Megatron-LM / Megatron-Core export: a bash script of launch arguments
// checked against megatron/training/arguments.py (validate_args and the
// argument definitions).
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

// What a plan simulated for Megatron-LM as of the 2021-22 papers (the
// megatron-lm profile) uses that only came with Megatron-Core: context
// parallelism (Megatron-Core 0.5, 2024), Transformer Engine FP8 (2023),
// Megatron FSDP (ZeRO-2/3, 2025), MoE, latent or sliding-window attention, and
// pipeline stages of unequal layers (mpu.get_num_layers at the end of 2021,
// 9da6e975de: "num_layers must be divisible by pipeline_model_parallel_size";
// --decoder-first/last-pipeline-num-layers and the layout string came later).
std::optional<std::string> megatron_lm_refusal(const ModelSpec& m, const Layout& L) {
  const Plan& p = L.plan;
  if (p.cp > 1) return std::string("Megatron-LM before Megatron-Core has no context parallelism; use --framework megatron-core");
  if (p.fp8_recipe != Fp8Recipe::kNone) {
    return std::string("Megatron-LM before Megatron-Core has no FP8 training (Transformer Engine); use --framework "
                       "megatron-core");
  }
  if (p.zero >= 2) {
    return std::string("Megatron-LM before Megatron-Core has no gradient or parameter sharding (Megatron FSDP); use "
                       "--framework megatron-core");
  }
  if (m.has_moe || m.attention == AttentionKind::kMla || m.has_sliding_window) {
    return std::string("Megatron-LM before Megatron-Core has no Mixture-of-Experts layers, latent attention or "
                       "sliding-window attention; use --framework megatron-core");
  }
  if (p.pp > 1 && !all_equal(L.stage_layers)) {
    return "Megatron-LM before Megatron-Core splits the layers evenly over pipeline stages (\"num_layers must be "
           "divisible by pipeline_model_parallel_size\"); it cannot place stage layers " +
           join(L.stage_layers, ",") + " (use --framework megatron-core)";
  }
  return std::nullopt;
}

}  // namespace

ExportResult export_megatron(const ModelSpec& m, const ClusterSpec& c, const Layout& L, Render render) {
  const Plan& p = L.plan;
  if (auto r = async_refusal("Megatron-LM", p)) return refuse(*r);
  if (p.framework == Framework::kMegatronLM) {
    if (auto r = megatron_lm_refusal(m, L)) return refuse(*r);
  }
  if (p.pp > 1 && p.schedule == Schedule::kNaive) {
    return refuse(
        "Megatron-LM has no naive pipeline schedule (one micro-batch in flight); its pipeline schedules are 1F1B and "
        "interleaved 1F1B (use schedule 1f1b)");
  }
  if (p.schedule == Schedule::kZbv) {
    // The fork's ZB-V (--zero-bubble-v-schedule, megatron/core/zbpp_utils.py)
    // is its own greedy schedule, not PyTorch's fixed order simulated here.
    return refuse(
        "Megatron-LM has no zb-v schedule; Zero Bubble's fork of it (sail-sg/zero-bubble-pipeline-parallelism) runs "
        "its own ZB-V variant with --zero-bubble-v-schedule on its local (non-Transformer-Engine) layers, which this "
        "export does not target; the zb-v simulated here is PyTorch's ScheduleZBVZeroBubble (export to torchtitan)");
  }
  if (p.schedule == Schedule::kInterleavedZb) {
    return refuse(
        "Megatron-LM has no interleaved-zb schedule (its interleaved schedule runs full backwards); the "
        "interleaved-zb simulated here is PyTorch's ScheduleInterleavedZeroBubble (export to torchtitan)");
  }
  if (p.schedule == Schedule::kDualPipeV) {
    // Megatron-Core has no DualPipe schedule; its EP overlap is batch-level
    // in 1F1B (--overlap-moe-expert-parallel-comm, MoE README v0.14).
    return refuse(
        "Megatron-LM has no dualpipe-v schedule (its expert-parallel overlap is --overlap-moe-expert-parallel-comm "
        "within 1F1B / interleaved 1F1B); the dualpipe-v simulated here is PyTorch's ScheduleDualPipeV (export to "
        "torchtitan)");
  }
  if (zero_bubble(p.schedule)) {
    // Upstream Megatron-LM / Megatron-Core ships no zero-bubble schedule; the
    // authors' fork (sail-sg/zero-bubble-pipeline-parallelism) adds one on
    // its legacy local transformer (--transformer-impl local, asserted in
    // its validate_args), which this export does not target.
    return refuse(std::string("Megatron-LM has no ") + to_string(p.schedule) +
                  " schedule; Zero Bubble's fork of it (sail-sg/zero-bubble-pipeline-parallelism) runs it with "
                  "--enable-zero-bubble --zero-bubble-max-pending-backward " +
                  std::to_string(zero_bubble_activation_limit(p.schedule, p.pp)) +
                  " on its local (non-Transformer-Engine) layers, which this export does not target (use schedule "
                  "1f1b or interleaved)");
  }
  if (p.pp > 1 && p.schedule == Schedule::kGpipe) {
    return refuse(
        "Megatron-LM has no GPipe schedule (all forwards, then all backwards); its pipeline schedules are 1F1B and "
        "interleaved 1F1B (use schedule 1f1b)");
  }
  if (m.position_embedding == PositionEmbedding::kAlibi) {
    return refuse(
        "Megatron-LM has no ALiBi position embedding (--position-embedding-type takes learned_absolute, rope, mrope, "
        "relative or none)");
  }
  if (p.cp > 1 && m.has_sliding_window && p.cp_comm == CpComm::kP2p) {
    // transformer_engine/pytorch/attention/dot_product_attention/
    // context_parallel.py attn_forward_func_with_cp: "Context parallelism
    // does not support sliding window attention with cp_comm_type='p2p'".
    return refuse(
        "Transformer Engine runs sliding-window attention under context parallelism only with --cp-comm-type a2a or "
        "all_gather, not the p2p ring this plan runs; use --cp-comm-type a2a, or cp 1");
  }
  if (p.cp > 1 && p.attention == Attention::kNaive) {
    return refuse(
        "Megatron-LM runs context parallelism inside Transformer Engine's fused or flash attention, not unfused "
        "attention (use attention flash)");
  }
  if (p.offload == Offload::kParams) {
    return refuse(
        "Megatron-LM cannot offload parameters to the host; --optimizer-cpu-offload moves optimizer state only (use "
        "offload optimizer)");
  }
  if (p.precision == Precision::kFp16 && p.grad_dtype == GradDtype::kBf16) {
    return refuse("Megatron-LM reduces gradients in bf16 only under --bf16 (--grad-reduce-in-bf16)");
  }
  if (auto r = fp8_refusal("Megatron-LM", p, true)) return refuse(*r);
  if (p.fp8_recipe == Fp8Recipe::kRowwise) {
    return refuse(
        "Megatron-LM (Transformer Engine) has no rowwise FP8 recipe; its --fp8-recipe takes tensorwise, delayed, "
        "mxfp8 or blockwise (1x128 blocks are the nearest; re-plan with --fp8-recipe blockwise)");
  }
  if (m.has_moe && m.bias && p.etp > 1) {
    // transformer_config.py: add_bias_linear with MoE needs
    // expert_tensor_parallel_size 1.
    return refuse("Megatron-Core's MoE experts with biases (--add-bias-linear) need --expert-tensor-parallel-size 1, "
                  "not etp=" + str(p.etp));
  }
  if (m.has_moe && m.moe.load_balancing == LoadBalancing::kAuxFree && m.moe.router != RouterScore::kSigmoid) {
    return refuse("Megatron-Core's aux-loss-free expert bias (--moe-router-enable-expert-bias) needs "
                  "--moe-router-score-function sigmoid; the model's router is softmax");
  }
  const bool megatron_fsdp = p.zero >= 2;
  if (megatron_fsdp && p.pp > 1) {
    return refuse(
        "Megatron-LM shards gradients and parameters (ZeRO-2/3) only with Megatron-FSDP (--use-megatron-fsdp), which "
        "is documented with tensor, context and expert parallelism but not pipeline parallelism; its distributed "
        "optimizer (--use-distributed-optimizer) is ZeRO-1 (use zero 1 with pp > 1)");
  }
  if (render == Render::kCheckOnly) return accept("");
  const MegatronStageSplit split = megatron_stage_split(L);

  BashArgs model;
  model.opt("--num-layers", m.layers);
  model.opt("--hidden-size", m.hidden);
  model.opt("--ffn-hidden-size", m.ffn_hidden);
  model.opt("--num-attention-heads", m.heads);
  if (m.kv_heads != m.heads) {
    model.flag("--group-query-attention");
    model.opt("--num-query-groups", m.kv_heads);
  }
  if (m.head_dim_given > 0) model.opt("--kv-channels", m.head_dim_given);
  if (m.attention == AttentionKind::kMla) {
    // megatron/training/arguments.py _add_mla_args.
    model.flag("--multi-latent-attention");
    if (m.mla.q_lora_rank > 0) model.opt("--q-lora-rank", m.mla.q_lora_rank);
    model.opt("--kv-lora-rank", m.mla.kv_lora_rank);
    model.opt("--qk-head-dim", m.mla.qk_nope_head_dim);
    model.opt("--qk-pos-emb-head-dim", m.mla.qk_rope_head_dim);
    model.opt("--v-head-dim", m.mla.v_head_dim);
  }
  if (m.has_sliding_window) {
    // megatron/training/arguments.py: --window-size (left, right) as
    // tuple_type, the keys before and after the query (flash-attn's
    // window_size), --window-attn-skip-freq N (one full-attention layer
    // after N - 1 windowed ones); Megatron-Bridge's gpt-oss bridge
    // (gpt_oss_bridge.py) sets (sliding_window - 1, 0) and 2.
    model.opt("--window-size", str(m.sliding_window.tokens - 1) + ",0");
    if (m.sliding_window.full_every > 0) model.opt("--window-attn-skip-freq", m.sliding_window.full_every);
  }
  if (m.has_moe) {
    // Megatron-Core MoE (megatron/core/transformer/moe/README.md): routed
    // experts of --moe-ffn-hidden-size, grouped GEMM, the all-to-all token
    // dispatcher when tokens cross GPUs.
    const MoeSpec& e = m.moe;
    model.opt("--num-experts", e.experts);
    model.opt("--moe-router-topk", e.top_k);
    model.opt("--moe-ffn-hidden-size", e.expert_ffn_hidden);
    if (e.shared_experts > 0) model.opt("--moe-shared-expert-intermediate-size", e.shared_experts * e.shared_ffn_hidden);
    if (e.dense_layers > 0 || e.layer_freq > 1) {
      // arguments.py moe_freq_type evaluates a Python list expression of
      // num_layers 0/1 entries; quoted for bash.
      std::string pattern;
      if (e.layer_freq == 1) {
        pattern = "([0]*" + str(e.dense_layers) + "+[1]*" + str(m.layers - e.dense_layers) + ")";
      } else {
        pattern = "[";
        for (int64_t i = 0; i < m.layers; ++i) pattern += std::string(i ? "," : "") + (m.is_moe_layer(i) ? "1" : "0");
        pattern += "]";
      }
      model.opt("--moe-layer-freq", "'" + pattern + "'");
    }
    model.opt("--moe-router-score-function", e.router == RouterScore::kSigmoid ? "sigmoid" : "softmax");
    if (e.load_balancing == LoadBalancing::kAuxFree) {
      // DeepSeek-V3: the expert bias plus a small sequence-wise balance loss.
      model.flag("--moe-router-enable-expert-bias");
      model.opt("--moe-router-load-balancing-type", "seq_aux_loss");
      model.opt("--moe-aux-loss-coeff", "1e-4");
    } else {
      model.opt("--moe-router-load-balancing-type", "aux_loss");
      model.opt("--moe-aux-loss-coeff", "1e-2");
    }
    if (e.capacity_factor > 0) {
      char cf[32];
      std::snprintf(cf, sizeof cf, "%g", e.capacity_factor);
      model.opt("--moe-expert-capacity-factor", cf);
      // Plan::moe_pad_to_capacity (resolve_plan holds the rules).
      if (p.moe_pad_to_capacity) model.flag("--moe-pad-expert-input-to-capacity");
    }
    if (e.router_groups > 0) {
      // Group-limited (node-limited) routing: TransformerConfig
      // moe_router_num_groups / moe_router_group_topk.
      model.opt("--moe-router-num-groups", e.router_groups);
      model.opt("--moe-router-group-topk", e.router_group_topk);
    }
    model.flag("--moe-grouped-gemm");
    // The permutations as the simulator costs them: Transformer Engine's
    // fused permute, sort-by-local-expert and unpermute kernels (one launch
    // each; TE >= 2.1, transformer_config.py), as NVIDIA's recipes set them
    // (Megatron-Bridge moe_permute_fusion = True).  Without it Megatron-Core
    // permutes with torch index ops and syncs the host before the sort.
    model.flag("--moe-permute-fusion");
    if (p.moe_router_fusion) model.flag("--moe-router-fusion");  // Plan::moe_router_fusion
    if (p.moe_shared_expert_overlap) model.flag("--moe-shared-expert-overlap");  // Plan::moe_shared_expert_overlap
    if (p.moe_dispatcher != MoeDispatcher::kAllToAll) {
      // The flex dispatcher on the plan's backend (Plan::moe_dispatcher;
      // resolve_plan holds its rules).
      model.opt("--moe-token-dispatcher-type", "flex");
      model.opt("--moe-flex-dispatcher-backend", to_string(p.moe_dispatcher));
    } else {
      model.opt("--moe-token-dispatcher-type", p.ep * p.etp > 1 ? "alltoall" : "allgather");
    }
  }
  model.opt("--seq-length", p.seq);
  model.opt("--max-position-embeddings", std::max(p.seq, m.seq_len));
  const bool rope = m.position_embedding == PositionEmbedding::kRope;
  model.opt("--position-embedding-type", rope ? "rope" : "learned_absolute");
  // Multi-token prediction depths (Plan::mtp_layers), on the last pipeline
  // stage with the loss (Megatron-Core's default placement); the loss
  // weight stays Megatron's default (--mtp-loss-scaling-factor 0.1).
  if (p.mtp_layers > 0) model.opt("--mtp-num-layers", p.mtp_layers);
  if (m.mlp == MlpKind::kSwiglu) model.flag("--swiglu");
  if (!m.bias) model.flag("--disable-bias-linear");
  model.opt("--normalization", m.bias ? "LayerNorm" : "RMSNorm");
  if (!m.tied_embeddings) model.flag("--untie-embeddings-and-output-weights");
  model.opt("--attention-dropout", m.dropout ? "0.1" : "0.0");
  model.opt("--hidden-dropout", m.dropout ? "0.1" : "0.0");
  // Megatron's --attention-backend (megatron/core/transformer/enums.py
  // AttnBackend): flash = the framework's default kernel, which is what
  // "auto" lets Transformer Engine pick (cuDNN on Hopper and later,
  // default_attention_kernel); fa2 and fa3 = TE's FlashAttention backend
  // (flash-attn 2, or flash-attn 3 on Hopper when its hopper build is
  // installed); cudnn = TE's FusedAttention.
  model.opt("--attention-backend", megatron_attention_backend(p));
  // Plan::cross_entropy_fusion: the fused vocab-parallel loss, its native
  // implementation (training arguments.py refuses the 'te' one: "disabled
  // due to stability issues").
  if (p.cross_entropy_fusion) {
    model.flag("--cross-entropy-loss-fusion");
    model.opt("--cross-entropy-fusion-impl", "native");
  }

  BashArgs parallel;
  parallel.opt("--tensor-model-parallel-size", p.tp);
  parallel.opt("--pipeline-model-parallel-size", p.pp);
  parallel.opt("--context-parallel-size", p.cp);
  // Plan::cp_comm: Megatron's default is p2p (arguments.py --cp-comm-type).
  if (p.cp > 1 && p.cp_comm == CpComm::kA2a) parallel.opt("--cp-comm-type", "a2a");
  if (p.sp && p.tp > 1) parallel.flag("--sequence-parallel");
  if (m.has_moe) {
    parallel.opt("--expert-model-parallel-size", p.ep);
    parallel.opt("--expert-tensor-parallel-size", p.etp);
  }
  switch (split) {
    case MegatronStageSplit::kEven:
      if (p.vp > 1) parallel.opt("--num-layers-per-virtual-pipeline-stage", L.stage_layers.front() / p.vp);
      break;
    case MegatronStageSplit::kFirstLast:
      parallel.opt("--decoder-first-pipeline-num-layers", L.stage_layers.front());
      parallel.opt("--decoder-last-pipeline-num-layers", L.stage_layers.back());
      // arguments.py: uneven stages take the chunk count.
      if (p.vp > 1) parallel.opt("--num-virtual-stages-per-pipeline-rank", p.vp);
      break;
    case MegatronStageSplit::kLayout:
      // The virtual pipeline degree follows from the layout's stage count.
      parallel.literal_opt("--pipeline-model-parallel-layout", megatron_pipeline_layout(L));
      break;
  }
  const int dp_cp = p.dp * p.cp;
  if (p.zero >= 1) parallel.flag("--use-distributed-optimizer");
  if (megatron_fsdp) {
    parallel.flag("--use-megatron-fsdp");
    parallel.opt("--data-parallel-sharding-strategy", p.zero == 2 ? "optim_grads" : "optim_grads_params");
    parallel.flag("--no-gradient-accumulation-fusion");
    parallel.opt("--ckpt-format", "fsdp_dtensor");
  }
  if (p.zero >= 1 && L.shard_degree < dp_cp) {
    parallel.opt("--num-distributed-optimizer-instances", dp_cp / L.shard_degree);
  }
  // The overlaps the plan was simulated with (framework/framework.h).
  const ExecutionProfile prof = execution_profile(p);
  if (dp_cp > 1 && prof.grad_reduce == GradReduce::kOverlapped) {
    parallel.flag("--overlap-grad-reduce");
    if (p.zero >= 1 && prof.overlap_param_gather) parallel.flag("--overlap-param-gather");
  }
  // Transformer Engine's userbuffers overlap of the TP collectives with the
  // GEMMs (needs --sequence-parallel, validate_args; TE's default config).
  if (prof.tp_comm_overlap) parallel.flag("--tp-comm-overlap");
  // The combined 1F1B schedule's all-to-all overlap (Plan::ep_overlap; the
  // alltoall dispatcher above, as TransformerConfig requires).
  if (p.ep_overlap) parallel.flag("--overlap-moe-expert-parallel-comm");
  if (p.delay_wgrad) parallel.flag("--delay-wgrad-compute");
  // Per-layer CUDA graphs (Plan::cuda_graph; resolve_plan holds
  // TransformerConfig's rules): Transformer Engine's graphs of the captured
  // modules, the whole layer with no module list (arguments.py
  // --cuda-graph-modules); graphs need TE's RNG tracker, which validate_args
  // would otherwise switch on with a warning.
  if (p.cuda_graph != 0) {
    parallel.opt("--cuda-graph-impl", "transformer_engine");
    if ((p.cuda_graph & kCgLayer) == 0)
      parallel.opt_list("--cuda-graph-modules", set_bit_names(p.cuda_graph, cuda_graph_module_names()));
    parallel.flag("--te-rng-tracker");
  }
  if (p.offload == Offload::kOptimizer) {
    parallel.flag("--optimizer-cpu-offload");
    parallel.flag("--use-precision-aware-optimizer");
  }
  if (p.moment_dtype == MomentDtype::kBf16) {
    // Transformer Engine's FusedAdam keeps exp_avg and exp_avg_sq in bf16
    // beside the fp32 master weights (megatron/core/optimizer_config.py:
    // the dtypes need --use-precision-aware-optimizer, which needs the
    // distributed optimizer: resolve_plan's zero >= 1).
    parallel.flag("--use-precision-aware-optimizer");
    parallel.opt("--exp-avg-dtype", "bf16");
    parallel.opt("--exp-avg-sq-dtype", "bf16");
  }

  BashArgs training;
  training.opt("--micro-batch-size", p.mbs);
  training.opt("--global-batch-size", p.gbs);
  if (p.precision == Precision::kBf16) training.flag("--bf16");
  if (p.precision == Precision::kFp16) training.flag("--fp16");
  if (p.precision == Precision::kBf16 && p.grad_dtype == GradDtype::kBf16) training.flag("--grad-reduce-in-bf16");
  if (p.fp8_recipe != Fp8Recipe::kNone) {
    // FP8 linear layers through Transformer Engine (--transformer-impl
    // transformer_engine, the default): E4M3 forward and E5M2 gradients
    // ("hybrid"), E4M3 throughout for block scaling, as Megatron's MoE
    // recipes do; delayed scaling with the amax history of
    // examples/llama/train_llama3_8b_h100_fp8.sh.
    const bool blocks = p.fp8_recipe == Fp8Recipe::kBlockwise || p.fp8_recipe == Fp8Recipe::kMxfp8;
    training.opt("--fp8-format", blocks ? "e4m3" : "hybrid");
    training.opt("--fp8-recipe", to_string(p.fp8_recipe));
    if (p.fp8_recipe == Fp8Recipe::kDelayed) {
      training.opt("--fp8-amax-history-len", 1024);
      training.opt("--fp8-amax-compute-algo", "max");
    }
    // FP8 compute weights, all-gathered in FP8 by the distributed optimizer.
    if (p.fp8_param_gather) training.flag("--fp8-param-gather");
  }
  if (p.recompute == Recompute::kFull && p.recompute_layers > 0) {
    // transformer_block.py _checkpointed_forward, method "block": the first
    // recompute_num_layers layers of each model chunk are checkpointed, the
    // rest run without.
    training.opt("--recompute-granularity", "full");
    training.opt("--recompute-method", "block");
    training.opt("--recompute-num-layers", p.recompute_layers);
  } else if (p.recompute == Recompute::kFull) {
    training.opt("--recompute-granularity", "full");
    training.opt("--recompute-method", "uniform");
    training.opt("--recompute-num-layers", 1);
  } else if (p.recompute == Recompute::kSelective) {
    training.opt("--recompute-granularity", "selective");
    if (p.recompute_modules != 0 && p.recompute_modules != kRcCoreAttn) {
      training.opt_list("--recompute-modules", set_bit_names(p.recompute_modules, recompute_module_names()));
    }
  }
  add_optimizer_schedule(&training);

  // NullTokenizer's vocabulary is --vocab-size + 1 (the end-of-document id).
  BashArgs data;
  data.flag("--mock-data");
  data.opt("--tokenizer-type", "NullTokenizer");
  data.opt("--vocab-size", m.vocab - 1);
  data.opt("--make-vocab-size-divisible-by", vocab_divisor(m.vocab, p.tp));

  std::string s = "#!/usr/bin/env bash\n";
  s += header_comment("# ", "Megatron-LM pretraining", m, c, L);
  s += launch_note(c, L, "Megatron-LM");
  s += "# Trains on mock data; replace DATA_ARGS with --data-path and a tokenizer for a\n# real run.\n";
  s += "set -euo pipefail\n\n";
  if (megatron_fsdp) {
    s += "# Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS is not 1 (arguments.py).\n";
    s += "unset CUDA_DEVICE_MAX_CONNECTIONS\n\n";
  } else if (p.tp > 1 || p.cp > 1) {
    s += "# Tensor and context parallelism need one hardware queue per GPU so that\n"
         "# communication and compute kernels keep their order (arguments.py checks it).\n";
    s += "export CUDA_DEVICE_MAX_CONNECTIONS=1\n\n";
  } else if (p.ep_overlap) {
    s += "# The all-to-all overlap runs communication beside compute on other streams, which\n"
         "# needs more than one hardware queue (arguments.py: a larger CUDA_DEVICE_MAX_CONNECTIONS).\n";
    s += "export CUDA_DEVICE_MAX_CONNECTIONS=32\n\n";
  }
  // Transformer Engine's FlashAttention backend takes FlashAttention-3 on
  // Hopper when flash-attn's hopper build is installed, else FlashAttention-2
  // (dot_product_attention/utils.py get_attention_backend); from TE v2.18
  // NVTE_FLASH_ATTN_V2 / NVTE_FLASH_ATTN_V3 switch each off.
  if (p.attention == Attention::kFlash && p.attention_kernel == AttentionKernel::kFa2) {
    s += "# attention fa2: keep Transformer Engine's flash backend on FlashAttention-2 even where\n"
         "# flash-attn's Hopper build (FlashAttention-3) is installed (TE v2.18+).\n";
    s += "export NVTE_FLASH_ATTN_V3=0\n\n";
  } else if (p.attention == Attention::kFlash && p.attention_kernel == AttentionKernel::kFa3) {
    s += "# attention fa3: needs flash-attn's Hopper build (flash_attn_3); without it Transformer\n"
         "# Engine would fall back to FlashAttention-2, which this switches off (TE v2.18+).\n";
    s += "export NVTE_FLASH_ATTN_V2=0\n\n";
  }
  if (p.moe_dispatcher == MoeDispatcher::kHybridEp) {
    // DeepEP's HybridEPBuffer reads its topology from the environment: how
    // many expert-parallel ranks share one NVLink domain (the group must be
    // whole domains: "should be divisible by the number of ranks per NVLink
    // domain") and whether that domain spans hosts (multi-node NVLink).
    const int per_domain = strided_group_placement(p.ep, std::max(1, p.etp), c).ranks_per_node;
    const bool mnnvl = c.host.gpus < c.gpus_per_node && per_domain * std::max(1, p.etp) > c.host.gpus;
    s += "# HybridEP: " + str(per_domain) + " expert-parallel ranks per NVLink domain" +
         (mnnvl ? ", which spans hosts (multi-node NVLink)" : "") + ".\n";
    s += "export NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=" + str(per_domain) + "\n";
    s += std::string("export USE_MNNVL=") + (mnnvl ? "1" : "0") + "\n\n";
  }
  s += pretrain_gpt_launch(c, L, model, parallel, training, data);
  return accept(s);
}

}  // namespace export_detail
}  // namespace trainplan
