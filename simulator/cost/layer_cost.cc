#include "simulator/cost/layer_cost.h"

#include <algorithm>

#include "simulator/core/error.h"
#include "simulator/cost/moe_routing.h"
#include "simulator/framework/framework.h"

namespace trainplan {

LayerShape layer_shape(const Plan& p) {
  LayerShape s;
  s.tp = p.tp;
  s.cp = p.cp;
  s.cp_a2a = p.cp > 1 && p.cp_comm == CpComm::kA2a;
  s.sp = p.sp && p.tp > 1;
  s.mbs = p.mbs;
  s.seq = p.seq;
  s.precision = p.precision;
  s.attention = attention_run(p);
  s.recompute = p.recompute;
  s.recompute_modules = p.recompute_modules != 0 ? p.recompute_modules : static_cast<uint16_t>(kRcCoreAttn);
  s.fp8_recipe = p.fp8_recipe;
  s.fp8_saved_inputs = fp8_transformer_engine(p);
  s.fp8_casts_weights = p.fp8_recipe != Fp8Recipe::kNone && !s.fp8_saved_inputs && !fp8_weights_gathered(p);
  s.mtp_layers = p.mtp_layers;
  s.ep = p.ep;
  s.dispatcher = p.moe_dispatcher;
  s.etp = p.etp;
  s.moe_load = p.moe_imbalance;
  s.pad_to_capacity = p.moe_pad_to_capacity;
  s.router_fusion = p.moe_router_fusion;
  s.shared_expert_overlap = p.moe_shared_expert_overlap;
  s.cuda_graph = p.cuda_graph;
  const ExecutionProfile fw = execution_profile(p);
  s.per_op_sac = fw.per_op_selective_recompute && p.recompute == Recompute::kSelective;
  s.pytorch_loss = fw.pytorch_cross_entropy;
  s.loss_fusion = p.cross_entropy_fusion && !s.pytorch_loss;
  s.eager = fw.eager_elementwise;
  s.te_modules = fw.te_modules;
  s.tp_seq_copies = fw.dtensor_sequence_copies && p.sp && p.tp > 1;
  s.tp_seq_fused = fw.async_tp;
  // ... except its all-gather-matmuls under row-wise float8 scales
  // (pytorch/pytorch#149990; step_costs.cc overlapped_tp_comm).
  s.tp_seq_fused_gathers = fw.async_tp && p.fp8_recipe != Fp8Recipe::kRowwise;
  return s;
}

double largest_weight_matrix(const ModelSpec& m, int tp) {
  const double h = static_cast<double>(m.hidden);
  const double qd = static_cast<double>(m.heads * m.head_dim());
  const double kvd = static_cast<double>(m.kv_heads * m.head_dim());
  const double glu = m.mlp == MlpKind::kSwiglu ? 2 : 1;
  return std::max(h * (qd + 2 * kvd), h * static_cast<double>(m.ffn_hidden) * glu) / std::max(1, tp);
}

double attention_params(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden);
  if (m.attention == AttentionKind::kMla) {
    // DeepSeek-V2 Sec. 2.1 (config.json names): W^DQ h x q_lora and its
    // RMSNorm, W^UQ q_lora x heads*(nope+rope) (or h x heads*(nope+rope)
    // without a query latent); W^DKV h x (kv_lora + rope) (the shared rotary
    // key), its norm, W^UKV kv_lora x heads*(nope + v); W^O heads*v x h.
    const MlaSpec& a = m.mla;
    const double nh = static_cast<double>(m.heads);
    const double qk = static_cast<double>(a.qk_nope_head_dim + a.qk_rope_head_dim);
    double q = a.q_lora_rank > 0 ? h * a.q_lora_rank + a.q_lora_rank + static_cast<double>(a.q_lora_rank) * nh * qk
                                 : h * nh * qk;
    double kv = h * static_cast<double>(a.kv_lora_rank + a.qk_rope_head_dim) + a.kv_lora_rank +
                static_cast<double>(a.kv_lora_rank) * nh * static_cast<double>(a.qk_nope_head_dim + a.v_head_dim);
    double o = nh * static_cast<double>(a.v_head_dim) * h;
    return q + kv + o;
  }
  const double qd = static_cast<double>(m.heads * m.head_dim());
  const double kvd = static_cast<double>(m.kv_heads * m.head_dim());
  // Q, K, V and output projections; GQA shrinks K and V to kv_heads*head_dim.
  double attn = h * (qd + 2 * kvd) + qd * h;
  if (m.bias) attn += (qd + 2 * kvd) + h;
  return attn;
}

double mlp_params(const ModelSpec& m, int64_t ffn) {
  const double h = static_cast<double>(m.hidden);
  const double f = static_cast<double>(ffn);
  // GELU MLP: h->f->h; SwiGLU: gate and up h->f, down f->h (Shazeer 2020).
  double mlp = (m.mlp == MlpKind::kGelu ? 2.0 : 3.0) * h * f;
  if (m.bias) mlp += (m.mlp == MlpKind::kGelu ? f : 2 * f) + h;
  return mlp;
}

namespace {

// The MoE block: router (h x experts), every routed expert, the shared experts.
double moe_block_params(const ModelSpec& m, int64_t routed) {
  const MoeSpec& e = m.moe;
  return static_cast<double>(m.hidden) * e.experts + static_cast<double>(routed) * mlp_params(m, e.expert_ffn_hidden) +
         static_cast<double>(e.shared_experts) * mlp_params(m, e.shared_ffn_hidden);
}

double norm_params(const ModelSpec& m) { return 2.0 * (m.bias ? 2 * m.hidden : m.hidden); }  // two per layer

}  // namespace

double layer_params(const ModelSpec& m, bool moe) {
  const double ffn = moe ? moe_block_params(m, m.moe.experts) : mlp_params(m, m.ffn_hidden);
  return attention_params(m) + ffn + norm_params(m);
}

double layer_active_params(const ModelSpec& m, bool moe) {
  const double ffn = moe ? moe_block_params(m, m.moe.top_k) : mlp_params(m, m.ffn_hidden);
  return attention_params(m) + ffn + norm_params(m);
}

double embedding_params(const ModelSpec& m) {
  double p = static_cast<double>(m.vocab) * static_cast<double>(m.hidden);
  if (m.position_embedding == PositionEmbedding::kLearned) p += static_cast<double>(m.seq_len * m.hidden);
  return p;
}

double output_params(const ModelSpec& m) {
  double final_norm = static_cast<double>(m.bias ? 2 * m.hidden : m.hidden);
  return final_norm + (m.tied_embeddings ? 0.0 : static_cast<double>(m.vocab) * static_cast<double>(m.hidden));
}

double total_params(const ModelSpec& m) {
  double p = embedding_params(m) + output_params(m);
  for (int64_t i = 0; i < m.layers; ++i) p += layer_params(m, m.is_moe_layer(i));
  return p;
}

double active_params(const ModelSpec& m) {
  double p = embedding_params(m) + output_params(m);
  for (int64_t i = 0; i < m.layers; ++i) p += layer_active_params(m, m.is_moe_layer(i));
  return p;
}

namespace {

OpCost gemm(const std::string& name, double m, double n, double k, double saved_input_bytes) {
  OpCost op;
  op.name = name;
  op.kind = OpKind::kGemm;
  op.m = static_cast<int64_t>(m);
  op.n = static_cast<int64_t>(n);
  op.k = static_cast<int64_t>(k);
  op.flops = 2.0 * m * n * k;  // multiply-add = 2 FLOPs
  op.saved_bytes = saved_input_bytes;
  return op;
}

OpCost elementwise(const std::string& name, double bytes, double saved) {
  OpCost op;
  op.name = name;
  op.kind = OpKind::kElementwise;
  op.bytes = bytes;
  op.bwd_bytes = 2 * bytes;
  op.saved_bytes = saved;
  return op;
}

// The FP8 quantization of a GEMM's input (forward) and of its output
// gradient (backward), memory-bound.  Under torchao (`torchao`): each use's
// weight cast (unless the weights arrive in FP8, `casts_weights` false) and
// the rescale of the backward GEMMs' outputs (the input gradient, as many
// elements as the input, and the weight gradient).
OpCost fp8_cast(const std::string& gemm_name, double input_elements, double grad_elements, double weight_elements,
                Fp8Recipe recipe, bool torchao, bool casts_weights) {
  OpCost op;
  op.name = "fp8_cast_" + gemm_name;
  op.kind = OpKind::kElementwise;
  const Fp8WeightCastBytes w = fp8_weight_cast_bytes_per_element(recipe);
  const double cast_weights = casts_weights ? weight_elements : 0;
  const double rescale = torchao ? fp8_backward_rescale_bytes_per_element(recipe) : 0;
  op.bytes = input_elements * fp8_cast_bytes_per_element(recipe) + cast_weights * w.forward;
  op.bwd_bytes = grad_elements * fp8_cast_bytes_per_element(recipe) + cast_weights * w.backward +
                 (input_elements + weight_elements) * rescale;
  return op;
}

// `grad_e`: bytes per element of an output gradient.
void add_totals(LayerCost* c, double grad_e) {
  for (const OpCost& op : c->ops) {
    c->fwd_flops += op.flops;
    c->fwd_bytes += op.bytes;
    c->saved_bytes += op.saved_bytes;
    if (op.kind == OpKind::kGemm) {
      c->weight_grad_saved_bytes +=
          op.saved_bytes + static_cast<double>(op.m) * static_cast<double>(op.n) * static_cast<double>(op.groups) * grad_e;
    }
  }
}

}  // namespace

namespace {

// PyTorch eager memory-bound kernels, bytes per element, forward (each
// backward ~2x, the elementwise convention of OpCost).  RMSNorm as
// torchtitan/models/norms.py and torch.nn.RMSNorm compute it in eager mode:
// x.float() (read 2, write 4), pow(2) (4, 4), mean (4), x * rsqrt (4, 4),
// type_as (4, 2), * weight (2, 2) = 36.  Rotary embedding through complex
// fp32 (torchtitan apply_rotary_emb): .float() (2, 4), the complex multiply
// (4, 4), type_as (4, 2) = 20.
constexpr double kEagerRmsNormBytes = 36;
constexpr double kEagerRopeBytes = 20;

}  // namespace

double layer_input_bytes(const ModelSpec& m, const LayerShape& s) {
  const double sp_div = s.sp ? s.tp : 1;
  return static_cast<double>(s.mbs) * static_cast<double>(s.seq) / s.cp * static_cast<double>(m.hidden) *
         activation_bytes(s.precision) / sp_div;
}

namespace {

// torchtitan's per-op SAC policy (framework.cc) over the layer's ops in
// execution order: matmuls are counted per block and the output of every
// odd-numbered one is saved, the even ones re-run; attention's output and
// log-sum-exp are saved; every other op re-runs.  The fused QKV GEMM is
// torchtitan's wq, wk, wv (1st to 3rd matmul: Q and V saved, K re-run) and
// a SwiGLU fc1 its w1 and w3 (w1 saved, w3 re-run), each a share of the
// fused op by output width.
void mark_per_op_sac(LayerCost* c, const ModelSpec& m, const LayerShape& s, double e) {
  int mm = 0;
  const double t = s.tp;
  for (OpCost& op : c->ops.mut()) {
    op.sac_saved_bytes = 0;
    op.sac_rerun_share = 0;
    if (op.kind == OpKind::kAttention) {
      if (op.flops > 0) {
        const double tokens = static_cast<double>(op.m);
        const double vd = m.attention == AttentionKind::kMla ? static_cast<double>(m.heads * m.mla.v_head_dim)
                                                              : static_cast<double>(m.heads * m.head_dim());
        op.sac_saved_bytes = tokens * vd / t * e + 4.0 * static_cast<double>(m.heads) / t * tokens;
      }
      continue;
    }
    if (op.kind != OpKind::kGemm) {
      // A reduce-scatter's input copy feeds only the (saved) reduce-scatter.
      op.sac_rerun_share = op.name.find("tp_scatter_copy") != std::string::npos ? 0 : 1;
      continue;
    }
    std::vector<double> widths;  // output columns of each matmul the op stands for
    const double n = static_cast<double>(op.n);
    if (op.name == "qkv") {
      const double qd = static_cast<double>(m.heads * m.head_dim()) / t;
      const double kvd = static_cast<double>(m.kv_heads * m.head_dim()) / t;
      widths = {qd, kvd, kvd};
    } else if (m.mlp == MlpKind::kSwiglu && op.name.size() >= 3 && op.name.compare(op.name.size() - 3, 3, "fc1") == 0) {
      widths = {n / 2, n / 2};
    } else {
      widths = {n};
    }
    double total = 0;
    for (double w : widths) total += w;
    const double rows = static_cast<double>(op.m) * static_cast<double>(op.groups);
    for (double w : widths) {
      if (++mm % 2 == 1) op.sac_saved_bytes += rows * w * e;
      else op.sac_rerun_share += w / total;
    }
  }
}

}  // namespace

double fp8_cast_bytes_per_element(Fp8Recipe recipe) {
  switch (recipe) {
    case Fp8Recipe::kNone: return 0;
    case Fp8Recipe::kDelayed: return 4;
    case Fp8Recipe::kTensorwise: return 6;
    case Fp8Recipe::kRowwise: return 8;
    case Fp8Recipe::kBlockwise: return 4;
    case Fp8Recipe::kMxfp8: return 4 + 2.0 / 32;
  }
  return 0;
}

Fp8WeightCastBytes fp8_weight_cast_bytes_per_element(Fp8Recipe recipe) {
  switch (recipe) {
    case Fp8Recipe::kTensorwise: return {5, 3};
    case Fp8Recipe::kRowwise: return {3, 7};
    default: return {0, 0};
  }
}

double fp8_backward_rescale_bytes_per_element(Fp8Recipe recipe) { return recipe == Fp8Recipe::kRowwise ? 4 : 0; }

double fp8_gather_bytes_per_element(Fp8Recipe recipe) {
  switch (recipe) {
    case Fp8Recipe::kNone:
    case Fp8Recipe::kRowwise: return 0;
    case Fp8Recipe::kDelayed:
    case Fp8Recipe::kTensorwise: return 1;
    case Fp8Recipe::kBlockwise: return 1 + 4.0 / 128;  // an fp32 scale per 1x128 block
    case Fp8Recipe::kMxfp8: return 1 + 1.0 / 32;       // an E8M0 scale per 32 elements
  }
  return 0;
}

namespace {

// Host calls per op (OpCost::host_calls): one eager op call each, except
// - a Transformer Engine module (s.te_modules: linear layers and the
//   attention core): kTeModuleCalls calls' worth of host time.  TE#2053
//   (NVIDIA/TransformerEngine, 2025-08) times one Linear forward (bf16,
//   hidden 2048, 8192 tokens) on the host: TE 99.66 us vs torch.nn.Linear
//   37.08 us on GB200's Grace, 90.53 vs 33.17 us on GH200's: 2.69 and 2.73.
// - TE's GroupedLinear (a grouped expert GEMM, s.te_modules): the module,
//   the split of its input by expert, and with FP8 two torch.empty per GEMM
//   for the cast outputs (TE#1499, maintainer's answer: torch.split() and
//   torch.empty() "2x num_gemms calls" under fused_multi_cast_transpose).
// - Megatron-Core's router (s.te_modules): 72 kernels, 31 with router fusion
//   (s.router_fusion; Megatron-LM docs/discussions/deepseek-v3-gb200-
//   optimization, Sec. 2.1.4: "reducing the total number of kernels in the
//   router part from 72 to 31" with --moe-router-fusion, off by default),
//   the gating GEMM one of them.
// - PyTorch eager memory-bound ops (s.eager), one call per kernel of the
//   decompositions kEagerRmsNormBytes and kEagerRopeBytes describe: RMSNorm
//   6 (x.float, pow, mean, x * rsqrt, type_as, * weight), rotary 3 for each
//   of Q and K (.float, the complex multiply, type_as), repeat_kv one copy
//   each for K and V, SwiGLU 2 (SiLU, the product).
constexpr double kTeModuleCalls = (99.66 / 37.08 + 90.53 / 33.17) / 2;
constexpr double kMcoreRouterKernels = 72;
constexpr double kMcoreFusedRouterKernels = 31;

void assign_host_calls(LayerCost* c, const ModelSpec& m, const LayerShape& s) {
  for (OpCost& op : c->ops.mut()) {
    op.host_calls = 1;
    if (s.eager) {
      if ((op.name == "ln1" || op.name == "ln2") && !m.bias) op.host_calls = 6;
      if (op.name == "rope") op.host_calls = 6;
      if (op.name == "repeat_kv") op.host_calls = 2;
      if (op.name == "swiglu" || op.name == "shared_swiglu") op.host_calls = 2;
    }
    if (!s.te_modules) continue;
    if (op.kind == OpKind::kAttention && s.attention == Attention::kFlash) op.host_calls = kTeModuleCalls;
    if (op.kind == OpKind::kGemm && op.name != "router") {
      op.host_calls = kTeModuleCalls;
      if (op.groups > 1) op.host_calls += 1 + (op.fp8 ? 2.0 * static_cast<double>(op.groups) : 0.0);
    }
    if (op.name == "router_topk") op.host_calls = (s.router_fusion ? kMcoreFusedRouterKernels : kMcoreRouterKernels) - 1;
  }
}

// Per-layer CUDA graphs (Megatron-Core --cuda-graph-impl transformer_engine,
// d98e8a64dd).  transformer_layer.py _te_cuda_graph_capture runs the
// captured attention part (_forward_attention: input norm, self-attention,
// its bias-dropout-add) and MLP part (_forward_mlp: the pre-MLP norm and the
// MLP or MoE block with its bias-dropout-add; for moe_router only the norm,
// the router and the shared experts, _get_submodules_under_cudagraphs; for
// moe_preprocess the dispatcher's preprocessing) as one callable, which
// Transformer Engine's make_graphed_callables graphs once per micro-batch:
// the layer's captured ops cost the host one replay per pass instead of
// their calls.  Static inputs per graph (get_layer_static_inputs): the
// hidden states, and with attention captured a bool attention mask of
// mbs x seq/cp x seq; cuda_graphs.py _get_sample_arguments reuses a
// micro-batch's buffers only once its backward is done, so the layer holds
// them per micro-batch in flight, like its saved activations.
void capture_in_cuda_graph(LayerCost* c, const ModelSpec& m, const LayerShape& s, bool moe) {
  const uint8_t g = s.cuda_graph;
  if (g == 0) return;
  enum Region { kAttn, kRouter, kPreprocess, kMlpRest };
  bool after_ln2 = false;
  bool graphed = false, attention = false;
  double* first = nullptr;
  for (OpCost& op : c->ops.mut()) {
    if (op.name == "ln2") after_ln2 = true;
    const std::string base = op.name.rfind("fp8_cast_", 0) == 0 ? op.name.substr(9) : op.name;
    Region r = kAttn;
    if (after_ln2) {
      r = kMlpRest;
      // With --moe-shared-expert-overlap the shared experts run beside the
      // dispatcher, outside the moe_router graph (transformer_layer.py
      // _get_submodules_under_cudagraphs).
      if (moe && (base == "ln2" || base == "tp_gather_copy_mlp" || base == "router" || base == "router_topk" ||
                  (base.rfind("shared_", 0) == 0 && !s.shared_expert_overlap)))
        r = kRouter;
      if (moe && (base == "token_counts" || base == "score_dispatch")) r = kPreprocess;
    }
    bool captured = (g & kCgLayer) != 0;
    if (r == kAttn) captured |= (g & kCgAttn) != 0;
    else if (!moe) captured |= (g & kCgMlp) != 0;
    else captured |= (g & kCgMoe) != 0 || (r == kRouter && (g & kCgMoeRouter)) ||
                     (r == kPreprocess && (g & kCgMoePreprocess));
    if (!captured) continue;
    if (first == nullptr) first = &op.host_calls;
    op.host_calls = 0;
    graphed = true;
    attention |= r == kAttn;
  }
  if (!graphed) return;
  *first = 1;  // the graph's replay
  const double mask = attention ? static_cast<double>(s.mbs) * static_cast<double>(s.seq) / s.cp *
                                      static_cast<double>(s.seq)
                                : 0.0;
  c->cuda_graph_static_bytes = layer_input_bytes(m, s) + mask;
}

}  // namespace

LayerCost transformer_layer_cost(const ModelSpec& m, const LayerShape& s, bool moe) {
  TRAINPLAN_CHECK(s.tp >= 1 && m.heads % s.tp == 0 && m.kv_heads % s.tp == 0, "tp must divide heads and kv_heads");
  TRAINPLAN_CHECK(s.cp >= 1 && s.seq % s.cp == 0, "cp must divide seq");
  TRAINPLAN_CHECK(!moe || (m.has_moe && s.ep >= 1 && s.etp >= 1 && m.moe.experts % s.ep == 0 &&
                           m.moe.expert_ffn_hidden % s.etp == 0),
                  "an MoE layer needs ep | experts and etp | expert_ffn_hidden");
  const double t = s.tp;
  const double e = activation_bytes(s.precision);   // bytes per activation element
  const double sp_div = s.sp ? t : 1.0;             // replicated tensors are split by SP
  const double h = static_cast<double>(m.hidden);
  const double a = static_cast<double>(m.heads);
  const bool mla = m.attention == AttentionKind::kMla;
  // Per-head widths: query/key and value (MHA: head_dim both).
  const double dqk = mla ? static_cast<double>(m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim)
                         : static_cast<double>(m.head_dim());
  const double dv = mla ? static_cast<double>(m.mla.v_head_dim) : static_cast<double>(m.head_dim());
  const double qd = a * dqk;                        // query width (= h for GPT shapes)
  const double vd = a * dv;                         // attention output width
  const double kvd = mla ? qd : static_cast<double>(m.kv_heads) * dqk;  // key width
  const double kvvd = mla ? vd : static_cast<double>(m.kv_heads) * dv;  // value width
  const double f = static_cast<double>(m.ffn_hidden);
  const double seq = static_cast<double>(s.seq);
  const double tokens = static_cast<double>(s.mbs) * seq / s.cp;  // b * s / cp on this rank
  const double mask = m.dropout ? 1.0 : 0.0;        // dropout masks are 1 byte per element
  const TpComm reduce = s.tp == 1 ? TpComm::kNone : (s.sp ? TpComm::kReduceScatter : TpComm::kAllReduce);
  const TpComm gather = s.sp ? TpComm::kAllGather : TpComm::kNone;
  const double tp_buffer = tokens * h * e;          // full [s, b, h] activation

  LayerCost c;
  c.moe = moe;
  {
    // Matrices and column-parallel biases are split by TP; row-parallel
    // output biases and norms are replicated (Megatron ColumnParallelLinear /
    // RowParallelLinear).  MLA's down projections and latent norms are
    // replicated too (Megatron MLASelfAttention: duplicated linears).
    // Routed experts are split by ep (whole experts) and etp (each expert's
    // width) instead; the router is replicated.
    const bool gelu_mlp = m.mlp == MlpKind::kGelu;
    double attn_split = 0, attn_col_bias = 0;
    if (mla) {
      const MlaSpec& x = m.mla;
      attn_split = (x.q_lora_rank > 0 ? x.q_lora_rank : h) * qd +
                   static_cast<double>(x.kv_lora_rank) * a * static_cast<double>(x.qk_nope_head_dim + x.v_head_dim) +
                   vd * h;
    } else {
      attn_split = h * (qd + 2 * kvd) + qd * h;
      attn_col_bias = m.bias ? qd + 2 * kvd : 0.0;
    }
    double mlp_split = 0, mlp_col_bias = 0;
    double expert_params = 0;
    if (!moe) {
      mlp_split = (gelu_mlp ? 2.0 : 3.0) * h * f;
      mlp_col_bias = m.bias ? (gelu_mlp ? f : 2 * f) : 0.0;
    } else {
      const double fs = static_cast<double>(m.moe.shared_experts * m.moe.shared_ffn_hidden);
      mlp_split = (gelu_mlp ? 2.0 : 3.0) * h * fs;
      mlp_col_bias = m.bias && fs > 0 ? (gelu_mlp ? fs : 2 * fs) : 0.0;
      expert_params = static_cast<double>(m.moe.experts) * mlp_params(m, m.moe.expert_ffn_hidden);
    }
    const double split = attn_split + mlp_split + attn_col_bias + mlp_col_bias;
    const double replicated = layer_params(m, moe) - split - expert_params;
    c.expert_params = expert_params / (static_cast<double>(s.ep) * s.etp);
    c.params = split / t + replicated + c.expert_params;
    c.linear_params = (attn_split + mlp_split) / t +
                      (moe ? static_cast<double>(m.moe.experts) * (gelu_mlp ? 2.0 : 3.0) * h *
                                 static_cast<double>(m.moe.expert_ffn_hidden) / (static_cast<double>(s.ep) * s.etp)
                           : 0.0);
  }

  // Korthikanti Sec. 4.1: LayerNorm saves its input, 2sbh.  A fused norm
  // reads and writes each element once (2e B); PyTorch's eager RMSNorm
  // (x.float(), pow, mean, x * rsqrt, type_as, * weight) moves 36 B.
  const double norm_bytes = tp_buffer / sp_div * (s.eager && !m.bias ? kEagerRmsNormBytes / e : 2.0);
  OpCost ln1 = elementwise("ln1", norm_bytes, tp_buffer / sp_div);
  ln1.rerun_by = kRcLayernorm;
  ln1.tp_comm_after = gather;
  ln1.tp_comm_bytes = s.sp ? tp_buffer : 0;
  // FP8: the gather feeding the QKV projection moves FP8 (a column-parallel
  // TE LayerNormLinear; MLA's down projections are other modules), the
  // reduce-scatter of its input gradient bf16; the projection's and FC2's
  // reduce-scatters sum bf16 and their backward gathers the FP8 output
  // gradient (fp8_gather_bytes_per_element).
  const double fp8_gather = s.sp ? tokens * h * fp8_gather_bytes_per_element(s.fp8_recipe) : 0;
  if (fp8_gather > 0 && !mla) {
    ln1.tp_comm_bwd_bytes = ln1.tp_comm_bytes;
    ln1.tp_comm_bytes = fp8_gather;
  }
  c.ops.push_back(ln1);
  // DTensor's sequence-dimension copies (LayerShape::tp_seq_copies): each
  // collective's whole tensor read and written once in each pass -- a
  // gather's result put into place and a reduce-scatter's input copied
  // before it, in forward; their transposes' in backward.  `forward`: false
  // where async TP fuses the forward's collective.
  auto dim1_copy = [&](const std::string& name, const OpCost& collective, bool forward) {
    OpCost copy = elementwise(name, forward ? 2 * collective.tp_comm_bytes : 0, 0);
    copy.bwd_bytes = 2 * (collective.tp_comm_bwd_bytes >= 0 ? collective.tp_comm_bwd_bytes : collective.tp_comm_bytes);
    return copy;
  };
  if (s.tp_seq_copies && ln1.tp_comm_bytes > 0) {
    c.ops.push_back(dim1_copy("tp_gather_copy_attn", ln1, !s.tp_seq_fused_gathers));
  }
  // QKV projection saves its input, 2sbh (2sbh/t with SP: the sharded input is
  // kept and re-gathered in backward).
  // FP8 (Transformer Engine, torchao float8): the linear layers run in
  // FP8 (the LM head, the router and core attention stay bf16, as
  // Megatron's non-TE output layer and TE's default DotProductAttention);
  // Transformer Engine saves their input in FP8, 1 byte per element, torchao
  // the bf16 input.  A cast kernel quantizes each GEMM's input (and, in
  // backward, its output gradient).
  const bool fp8 = s.fp8_recipe != Fp8Recipe::kNone;
  const double saved_e = s.fp8_saved_inputs ? 1.0 : e;  // bytes per saved element of a linear layer's input
  auto linear = [&](const std::string& name, double m_, double n_, double k_, double saved_elements) {
    if (fp8) {
      c.ops.push_back(
          fp8_cast(name, m_ * k_, m_ * n_, n_ * k_, s.fp8_recipe, !s.fp8_saved_inputs, s.fp8_casts_weights));
    }
    OpCost op = gemm(name, m_, n_, k_, saved_elements * saved_e);
    op.fp8 = fp8;
    return op;
  };
  // Recompute tags (RecomputeModule): `rerun` modules re-run the op, `drop`
  // ones stop keeping `dropped` of its saved bytes.
  auto tag = [](OpCost op, uint16_t rerun, uint16_t drop, double dropped) {
    op.rerun_by = rerun;
    op.drop_by = drop;
    op.dropped_bytes = dropped;
    return op;
  };
  // A GEMM whose saved input is a norm's output: not kept when the norms
  // are recomputed.
  auto after_norm = [&](OpCost op, uint16_t rerun) { return tag(op, rerun, kRcLayernorm, op.saved_bytes); };
  if (!mla) {
    c.ops.push_back(after_norm(linear("qkv", tokens, (qd + 2 * kvd) / t, h, tokens * h / sp_div), 0));
  } else {
    // Down projections run on every TP rank (replicated weights), on the
    // gathered sequence; the up projections are split by heads.
    const MlaSpec& x = m.mla;
    const double ql = static_cast<double>(x.q_lora_rank), kl = static_cast<double>(x.kv_lora_rank);
    // The up projections' outputs (Q; K with its rotary part, V) are what
    // attention keeps for its backward; recomputing the up projections
    // (mla_up_proj) keeps only the latents.
    const double q_out = tokens * qd * e / t;
    const double kv_out = tokens * a * static_cast<double>(x.qk_nope_head_dim + x.qk_rope_head_dim + x.v_head_dim) * e / t;
    auto up = [&](OpCost op, double out) {
      op.saved_bytes += out;
      return tag(op, kRcMlaUpProj, kRcMlaUpProj, out);
    };
    if (x.q_lora_rank > 0) {
      c.ops.push_back(after_norm(linear("q_down", tokens, ql, h, tokens * h / sp_div), 0));
      c.ops.push_back(elementwise("q_norm", 2 * tokens * ql * e, tokens * ql * e));
      c.ops.push_back(up(linear("q_up", tokens, qd / t, ql, tokens * ql), q_out));
    } else {
      c.ops.push_back(up(after_norm(linear("q_proj", tokens, qd / t, h, tokens * h / sp_div), 0), q_out));
      c.ops.mut().back().drop_by = kRcMlaUpProj;  // (its input, the norm output, stays with layernorm recompute)
    }
    c.ops.push_back(linear("kv_down", tokens, kl + static_cast<double>(x.qk_rope_head_dim), h, 0));
    c.ops.push_back(elementwise("kv_norm", 2 * tokens * kl * e, tokens * kl * e));
    c.ops.push_back(up(linear("kv_up", tokens, a * static_cast<double>(x.qk_nope_head_dim + x.v_head_dim) / t, kl,
                              tokens * kl),
                       kv_out));
  }
  if (!mla && m.position_embedding == PositionEmbedding::kRope) {
    // Rotary embedding of Q and K: a fused kernel reads and writes each
    // element once (2e B; Megatron/Transformer Engine fused RoPE); PyTorch
    // eager through complex fp32 (torchtitan apply_rotary_emb: .float(),
    // the complex multiply, type_as) moves 20 B per element.
    c.ops.push_back(elementwise("rope", tokens * (qd + kvd) / t * (s.eager ? kEagerRopeBytes : 2 * e), 0));
  }
  if (!mla && s.eager && kvd < qd) {
    // Eager grouped-query attention expands K and V to every query head
    // by copies (torchtitan repeat_kv; repeat_interleave): read the KV
    // width, write the query width, for K and V.
    c.ops.push_back(elementwise("repeat_kv", 2 * tokens * (kvd + qd) / t * e, 0));
  }
  {
    // Core attention per rank: QK^T (d_qk per head) and attention-over-V (d_v
    // per head), 2*b*s_q*s_kv*width/t each (Korthikanti App. A counts the full
    // s x s product, as Megatron does).
    OpCost op;
    op.name = "attention";
    op.kind = OpKind::kAttention;
    // Shape of each of its two products per rank, as GEMMs: QK^T is
    // (tokens x seq_kv x qd/t) over the heads, attention-over-V the same.
    op.m = static_cast<int64_t>(tokens);
    op.n = static_cast<int64_t>(seq);
    op.k = static_cast<int64_t>(qd / t);
    // A fused kernel's rate depends on the keys it loops over (ring
    // attention: one step's keys per call; Ulysses: the whole sequence for
    // its heads); unfused attention runs GEMMs.
    if (s.attention == Attention::kFlash) {
      op.kv_len = static_cast<int64_t>(s.cp_a2a ? seq : seq / s.cp);
      op.head_dim = mla ? m.mla.qk_nope_head_dim + m.mla.qk_rope_head_dim : m.head_dim();
    }
    op.flops = 2.0 * tokens * seq * (qd + vd) / t;
    if (s.attention == Attention::kFlash && m.has_sliding_window && m.sliding_window.tokens < seq) {
      // A windowed layer's query i attends to min(i + 1, w) keys: w*s -
      // w(w-1)/2 query-key pairs against s(s+1)/2 for the causal prefix, the
      // share of the product the kernel computes (the convention above
      // charges the causal prefix as the whole product; the ratio keeps
      // it).  Unfused attention computes every score and masks them.
      const double w = static_cast<double>(m.sliding_window.tokens);
      const double sd = static_cast<double>(seq);
      const double ratio = (w * sd - w * (w - 1) / 2) / (sd * (sd + 1) / 2);
      const double windowed = static_cast<double>(m.windowed_layer_count()) / static_cast<double>(m.layers);
      const double mean = (1 - windowed) + windowed * ratio;
      op.flops *= mean;
      op.window_flops_share = windowed * ratio / mean;
      op.window_kv_len = std::min<int64_t>(m.sliding_window.tokens, op.kv_len);
    }
    // Q, K and V are saved (Korthikanti: Q and K 4sbh, V 2sbh; GQA: K, V are
    // kv_heads*head_dim wide).
    double qkv_saved = mla ? 0.0 : tokens * (qd + kvd + kvvd) * e / t;  // MLA: kept by the up projections
    double scores = a / t * tokens * seq;  // elements of the score matrix on this rank
    if (s.attention == Attention::kNaive) {
      // Softmax output 2as^2b; with dropout also its 1-byte mask as^2b and the
      // dropout output 2as^2b: 5as^2b (Korthikanti Sec. 4.1).
      double s2 = scores * e + mask * scores * (1 + e);
      op.saved_bytes = qkv_saved + s2;
      op.drop_by = kRcCoreAttn;
      op.dropped_bytes = s2;
      // Scores written, read by softmax, probabilities written, read by AV.
      op.bytes = 4 * scores * e + mask * scores * (1 + 2 * e);
    } else {
      // FlashAttention keeps only the fp32 log-sum-exp per query row and head
      // (Dao et al. 2022); the s x s matrix is never stored.
      op.saved_bytes = qkv_saved + 4.0 * a / t * tokens;
      // It also keeps its output O for the backward, the tensor the output
      // projection saves as its input (one storage) in 16-bit training.
      // Transformer Engine's FP8 linears save their input quantized
      // instead, so O stays in 16 bits beside that FP8 copy
      // (dot_product_attention/backends.py FusedAttnFunc.forward saves q,
      // k, v and out_f16 unless the attention itself runs in FP8);
      // recomputing core attention keeps neither.
      if (s.fp8_saved_inputs) {
        const double o16 = tokens * vd / t * e;
        op.saved_bytes += o16;
        op.drop_by = kRcCoreAttn;
        op.dropped_bytes = o16;
      }
      op.bytes = tokens * (qd + kvd + kvvd + vd) * e / t;
    }
    op.rerun_by = kRcCoreAttn;
    c.ops.push_back(op);
    c.recompute_flops = 0;
  }
  // Eager: the attention output [b, heads, s, d] is made contiguous in
  // [b, s, heads*d] for the output projection, a copy.
  if (s.eager) c.ops.push_back(elementwise("attn_out_contiguous", 2 * tokens * vd / t * e, 0));
  // Output projection saves its input 2sbh/t; then all-reduce (or
  // reduce-scatter with SP) over tp.
  OpCost proj = linear("out_proj", tokens, h, vd / t, tokens * vd / t);
  proj.tp_comm_after = reduce;
  proj.tp_comm_bytes = reduce == TpComm::kNone ? 0 : tp_buffer;
  if (fp8_gather > 0 && reduce == TpComm::kReduceScatter) proj.tp_comm_bwd_bytes = fp8_gather;
  c.ops.push_back(proj);
  if (s.tp_seq_copies && !s.tp_seq_fused && reduce == TpComm::kReduceScatter) {
    c.ops.push_back(dim1_copy("tp_scatter_copy_attn", proj, true));
  }
  // Dropout + residual add: 1-byte mask sbh.
  c.ops.push_back(elementwise("dropout_residual1", 3 * tp_buffer / sp_div, mask * tokens * h / sp_div));
  const bool gelu = m.mlp == MlpKind::kGelu;
  // A TP-split MLP of width `width` on the gathered sequence: FC1, the
  // activation, FC2 and its reduce over tp.
  // `module`: the recompute module of this MLP (mlp, or shared_experts,
  // which moe covers too).
  auto tp_mlp = [&](const std::string& prefix, double width, uint16_t module) {
    c.ops.push_back(after_norm(linear(prefix + "fc1", tokens, (gelu ? width : 2 * width) / t, h, tokens * h / sp_div),
                               module));
    // GeLU saves its input 2sbf/t (8sbh/t for f = 4h).  SwiGLU saves gate
    // and up, 4sbf/t.
    if (gelu) {
      c.ops.push_back(tag(elementwise(prefix + "gelu", 2 * tokens * width * e / t, tokens * width * e / t), module,
                          module, tokens * width * e / t));
    } else {
      // Fused: read gate and up, write the product (3e B per element);
      // eager: SiLU (read, write) then the product (read two, write): 5e.
      c.ops.push_back(tag(elementwise(prefix + "swiglu", (s.eager ? 5 : 3) * tokens * width * e / t,
                                      2 * tokens * width * e / t),
                          module, module, 2 * tokens * width * e / t));
    }
    // FC2 saves its input 2sbf/t.
    OpCost fc2 = linear(prefix + "fc2", tokens, h, width / t, tokens * width / t);
    fc2 = tag(fc2, module, module, fc2.saved_bytes);
    fc2.tp_comm_after = reduce;
    fc2.tp_comm_bytes = reduce == TpComm::kNone ? 0 : tp_buffer;
    if (fp8_gather > 0 && reduce == TpComm::kReduceScatter && module == kRcMlp) fc2.tp_comm_bwd_bytes = fp8_gather;
    c.ops.push_back(fc2);
    if (s.tp_seq_copies && !s.tp_seq_fused && reduce == TpComm::kReduceScatter) {
      c.ops.push_back(tag(dim1_copy(prefix + "tp_scatter_copy_mlp", fc2, true), module, 0, 0));
    }
  };
  OpCost ln2 = elementwise("ln2", norm_bytes, tp_buffer / sp_div);
  ln2.rerun_by = kRcLayernorm;
  const bool shared = moe && m.moe.shared_experts > 0;
  // The dense MLP and the shared experts run on the sequence gathered over
  // tp; the routed experts take each rank's own tokens (Megatron requires
  // sequence parallelism for MoE with tp > 1).
  ln2.tp_comm_after = !moe || shared ? gather : TpComm::kNone;
  ln2.tp_comm_bytes = s.sp && (!moe || shared) ? tp_buffer : 0;
  // FP8 gather feeding FC1 (the dense MLP's TE LayerNormMLP; the shared
  // experts gather in their own module, left bf16).
  if (fp8_gather > 0 && !moe) {
    ln2.tp_comm_bwd_bytes = ln2.tp_comm_bytes;
    ln2.tp_comm_bytes = fp8_gather;
  }
  c.ops.push_back(ln2);
  if (s.tp_seq_copies && ln2.tp_comm_bytes > 0) {
    c.ops.push_back(dim1_copy("tp_gather_copy_mlp", ln2, !s.tp_seq_fused_gathers));
  }
  if (!moe) {
    tp_mlp("", f, kRcMlp);
  } else {
    // Routed experts (Megatron-Core MoELayer with the all-to-all token
    // dispatcher, docs/moe.md): route this rank's tokens, permute their
    // top_k copies into expert order, all-to-all them over the ep group
    // (all-gather over etp), run the local experts as one grouped GEMM,
    // reverse the path and sum the copies weighted by the router's scores.
    const MoeSpec& x = m.moe;
    const double tr = tokens / sp_div;            // this rank's tokens
    const double assign = tr * static_cast<double>(x.top_k);  // token copies it dispatches
    const double load = s.pad_to_capacity && x.capacity_factor > 0 ? x.capacity_factor
                        : s.moe_load > 0                        ? s.moe_load
                                       : expected_max_rank_load(tr * s.ep * s.etp, x.top_k, x.experts, s.ep,
                                                                x.capacity_factor);
    c.moe_load = load;
    // Rows the busiest rank's local experts process: every copy routed to
    // them from the ep x etp block, at the busiest rank's load.
    const double rows = assign * s.etp * load;
    const double local = static_cast<double>(x.experts / s.ep);
    const double fe = static_cast<double>(x.expert_ffn_hidden / s.etp);
    // Router: an fp32-accumulated h x experts GEMM (kept out of FP8), then
    // softmax/sigmoid and top-k over fp32 scores; the scores are saved.
    // The router keeps its input (the norm output) for its weight gradient;
    // recomputing the MoE block keeps that input as the checkpoint.
    c.ops.push_back(after_norm(gemm("router", tr, static_cast<double>(x.experts), h, tr * h * e), kRcMoe));
    c.ops.push_back(tag(elementwise("router_topk", 3 * 4 * tr * x.experts, 4 * tr * x.experts), kRcMoe, kRcMoe,
                        4 * tr * x.experts));
    // The flex dispatcher (DeepEP, HybridEP; Plan::moe_dispatcher) sends
    // each token once per destination rank with its top_k indices (int64)
    // and weights (fp32) beside it (deepseek-ai/DeepEP Buffer.dispatch), and
    // fuses the global permute into that kernel: the expert side then
    // permutes the `recv` distinct tokens it received into its `rows`
    // (Megatron-Core _DeepepManager / _HybridEPManager get_permuted_hidden_states),
    // and sums its experts' outputs back per token before the combine.
    const bool flex = s.dispatcher != MoeDispatcher::kAllToAll && s.ep > 1;
    const int64_t groups = x.router_groups, group_topk = x.router_group_topk;
    const double recv =
        flex ? rows * expert_block_hit_probability(x.experts, x.top_k, x.experts / s.ep, groups, group_topk) * s.ep /
                   static_cast<double>(x.top_k)
             : tr;
    auto dedup = [&](OpCost* op, double copy) {
      op->dedup.copy_bytes = tr * load * copy;
      op->dedup.experts = x.experts;
      op->dedup.top_k = x.top_k;
      op->dedup.groups = groups;
      op->dedup.group_topk = group_topk;
    };
    if (s.ep > 1) {
      // The dispatcher's preprocessing (token_dispatcher.py, all-to-all
      // dispatcher): every rank's token count per expert is gathered over
      // the ep group (4-byte counts for every expert; latency-bound; DeepEP's
      // notify step exchanges the same counts), and with the all-to-all
      // dispatcher the routing scores travel beside the tokens (an
      // all-to-all of top_k fp32 scores per token, reversed in backward).
      OpCost counts = elementwise("token_counts", 0, 0);
      counts.rerun_by = kRcMoe;
      counts.tp_comm_after = TpComm::kAllGather;
      counts.comm_group = CommGroup::kEp;
      counts.tp_comm_bytes = 4.0 * static_cast<double>(x.experts) * s.ep;
      c.ops.push_back(counts);
      if (!flex) {
        OpCost scores = elementwise("score_dispatch", 0, 0);
        scores.rerun_by = kRcMoe;
        scores.tp_comm_after = TpComm::kAllToAll;
        scores.comm_group = CommGroup::kEp;
        scores.tp_comm_bytes = 4.0 * assign * load;
        c.ops.push_back(scores);
      }
    }
    // A permutation's backward is the inverse permutation of the gradient
    // (Transformer Engine's moe_permute backward unpermutes it, moe_unpermute
    // backward permutes it): the forward's bytes again.
    OpCost permute = elementwise("permute", (flex ? 0 : tr + assign) * h * e, 0);
    permute.bwd_bytes = permute.bytes;
    permute.rerun_by = kRcMoe;
    permute.tp_comm_after = s.ep > 1 ? TpComm::kAllToAll : TpComm::kNone;
    permute.comm_group = CommGroup::kEp;
    permute.tp_comm_bytes = s.ep > 1 ? assign * load * h * e : 0;  // each rank's send buffer, at the peak load
    if (flex) {
      permute.name = "dispatch";
      dedup(&permute, h * e + 12.0 * static_cast<double>(x.top_k));
    }
    c.ops.push_back(permute);
    if (flex) {
      OpCost regroup = elementwise("local_permute", (recv + rows) * h * e, 0);
      regroup.bwd_bytes = regroup.bytes;
      regroup.rerun_by = kRcMoe;
      c.ops.push_back(regroup);
    }
    if (s.etp > 1) {
      OpCost g = elementwise("etp_gather", 0, 0);
      g.rerun_by = kRcMoe;
      g.tp_comm_after = TpComm::kAllGather;
      g.comm_group = CommGroup::kEtp;
      g.tp_comm_bytes = rows * h * e;
      c.ops.push_back(g);
    }
    // The all-to-all dispatcher's second permutation (Megatron-Core
    // token_dispatcher.py MoEAlltoAllTokenDispatcher, "Permutation 2: Sort
    // tokens by local expert"): with more than one local expert the rows
    // arrive grouped by source rank and are reordered by local expert
    // (sort_chunks_by_idxs; with drop-and-pad a transpose().contiguous()),
    // and combine_preprocess reverses it before the combine ("Unpermutation
    // 2").  Each reads and writes every row once; its backward is the
    // inverse reordering of the gradient, the same bytes.  The flex
    // dispatchers' local_permute above does this as part of theirs, and with
    // ep x etp = 1 the all-gather dispatcher has no second permutation.
    const bool local_sort = !flex && s.ep * s.etp > 1 && local > 1;
    if (local_sort) {
      OpCost sort = elementwise("local_sort", 2 * rows * h * e, 0);
      sort.bwd_bytes = sort.bytes;
      sort.rerun_by = kRcMoe;
      c.ops.push_back(sort);
    }
    auto grouped = [&](const std::string& name, double n_, double k_, double saved_elements) {
      if (fp8) {
        c.ops.push_back(fp8_cast(name, rows * k_, rows * n_, local * n_ * k_, s.fp8_recipe, !s.fp8_saved_inputs,
                                 s.fp8_casts_weights));
      }
      OpCost op = gemm(name, rows / local, n_, k_, saved_elements * saved_e);
      op.groups = static_cast<int64_t>(local);
      op.flops *= local;
      op.fp8 = fp8;
      return op;
    };
    {
      OpCost fc1 = grouped("expert_fc1", gelu ? fe : 2 * fe, h, rows * h);
      c.ops.push_back(tag(fc1, kRcMoe, kRcMoe, fc1.saved_bytes));
    }
    // moe_act re-runs the activation from its kept input, so FC2's input
    // (the activation's output) is not kept.
    const uint16_t act = kRcMoe | kRcMoeAct;
    if (gelu) {
      c.ops.push_back(tag(elementwise("expert_gelu", 2 * rows * fe * e, rows * fe * e + 4 * rows), act, kRcMoe,
                          rows * fe * e + 4 * rows));
    } else {
      c.ops.push_back(tag(elementwise("expert_swiglu", 3 * rows * fe * e, 2 * rows * fe * e + 4 * rows), act,
                          kRcMoe, 2 * rows * fe * e + 4 * rows));
    }
    OpCost fc2 = grouped("expert_fc2", h, fe, rows * fe);
    fc2 = tag(fc2, kRcMoe, act, fc2.saved_bytes);
    // The expert-tensor-parallel reduce-scatter of the experts' output
    // follows the reverse of the local sort where there is one.
    OpCost unsort = elementwise("local_unsort", 2 * rows * h * e, 0);
    unsort.bwd_bytes = unsort.bytes;
    unsort.rerun_by = kRcMoe;
    OpCost& before_rs = local_sort ? unsort : fc2;
    if (s.etp > 1) {
      before_rs.tp_comm_after = TpComm::kReduceScatter;
      before_rs.comm_group = CommGroup::kEtp;
      before_rs.tp_comm_bytes = rows * h * e;
    }
    c.ops.push_back(fc2);
    if (local_sort) c.ops.push_back(unsort);
    if (s.ep > 1) {
      OpCost combine = elementwise("combine", 0, 0);
      combine.rerun_by = kRcMoe;
      combine.tp_comm_after = TpComm::kAllToAll;
      combine.comm_group = CommGroup::kEp;
      combine.tp_comm_bytes = assign * load * h * e;
      if (flex) dedup(&combine, h * e);
      c.ops.push_back(combine);
    }
    // Unpermute sums the top_k copies back per token.  Megatron-Core applies
    // the router scores inside the expert activation (weighted SwiGLU, its
    // scores saved with the activation input), so unpermute saves nothing
    // but its index map.  Before a flex combine the expert side sums its
    // rows into the `recv` tokens it sends back.
    OpCost unpermute = elementwise("unpermute", (flex ? recv + rows : assign + tr) * h * e, 0);
    unpermute.bwd_bytes = unpermute.bytes;
    c.ops.push_back(tag(unpermute, kRcMoe, 0, 0));
    if (shared) {
      tp_mlp("shared_", static_cast<double>(m.moe.shared_experts * m.moe.shared_ffn_hidden),
             static_cast<uint16_t>(kRcSharedExperts | kRcMoe));
    }
  }
  c.ops.push_back(elementwise("dropout_residual2", 3 * tp_buffer / sp_div, mask * tokens * h / sp_div));
  // An FP8 cast is re-run with the GEMM it feeds (the next op).
  for (size_t i = 0; i + 1 < c.ops.size(); ++i) {
    if (c.ops[i].name.rfind("fp8_cast_", 0) == 0) c.ops.mut()[i].rerun_by = c.ops[i + 1].rerun_by;
  }
  if (s.per_op_sac) mark_per_op_sac(&c, m, s, e);
  assign_host_calls(&c, m, s);
  add_totals(&c, e);

  if (s.cp_a2a) {
    // Ulysses: this rank's b*s/cp tokens of Q, K and V (its tp share of the
    // heads) go out in cp pieces, one per head group, and the attention
    // output of its heads comes back the same way (Transformer Engine
    // flash_attn_a2a_communicate, before and after the attention).
    c.cp_a2a_qkv_bytes = tokens * (qd + kvd + kvvd) * e / t;
    c.cp_a2a_out_bytes = tokens * vd * e / t;
  } else if (s.cp > 1) {
    // Context parallel: every rank needs the K and V of the whole sequence
    // (ring exchange; all-gather buffer of b*s*(k + v width) elements per tp rank).
    c.cp_comm_bytes = static_cast<double>(s.mbs) * seq * (kvd + kvvd) * e / t;
  }
  switch (s.recompute) {
    case Recompute::kNone: break;
    case Recompute::kSelective:
      for (const OpCost& op : c.ops) {
        if (s.per_op_sac) c.recompute_flops += op.flops * op.sac_rerun_share;
        else if (op.rerun_by & s.recompute_modules) c.recompute_flops += op.flops;
      }
      break;
    case Recompute::kFull: c.recompute_flops = c.fwd_flops; break;
  }
  c.saved_bytes = saved_activation_bytes(c, m, s);
  capture_in_cuda_graph(&c, m, s, moe);
  c.saved_bytes += c.cuda_graph_static_bytes;
  // What the backward re-materialises on top (one layer at a time): the
  // whole layer for full recompute (only its input was kept), the tensors
  // per-op SAC did not save.
  if (s.recompute == Recompute::kFull || s.per_op_sac) {
    LayerShape none = s;
    none.recompute = Recompute::kNone;
    none.per_op_sac = false;
    const double all = saved_activation_bytes(c, m, none);
    c.backward_transient_bytes = s.recompute == Recompute::kFull ? all : std::max(0.0, all - c.saved_bytes);
  }
  return c;
}

double saved_activation_bytes(const LayerCost& c, const ModelSpec& m, const LayerShape& s) {
  switch (s.recompute) {
    case Recompute::kFull: return layer_input_bytes(m, s);
    case Recompute::kSelective: {
      double total = 0;
      if (s.per_op_sac) {
        // The block's input (its checkpoint) and the outputs the policy saves.
        total = layer_input_bytes(m, s);
        for (const OpCost& op : c.ops) total += op.sac_saved_bytes;
        return total;
      }
      for (const OpCost& op : c.ops) total += op.saved_bytes - ((op.drop_by & s.recompute_modules) ? op.dropped_bytes : 0.0);
      return total;
    }
    case Recompute::kNone: break;
  }
  double total = 0;
  for (const OpCost& op : c.ops) total += op.saved_bytes;
  return total;
}

namespace {

// The sizes the embedding, output and MTP blocks are costed from: tp, bytes
// per activation element, the sequence-parallel split, tokens on this rank
// and the hidden size.
struct BlockDims {
  double t, e, sp_div, tokens, h;
};
BlockDims block_dims(const ModelSpec& m, const LayerShape& s) {
  const double t = s.tp;
  return BlockDims{t, static_cast<double>(activation_bytes(s.precision)), s.sp ? t : 1.0,
                   static_cast<double>(s.mbs) * static_cast<double>(s.seq) / s.cp, static_cast<double>(m.hidden)};
}

// Adds block `b` to `into`: its ops after `into`'s, its parameters, FLOPs,
// traffic and activations summed, the larger backward transient.
void append_block(LayerCost* into, const LayerCost& b) {
  LayerCost& c = *into;
  std::vector<OpCost>& ops = c.ops.mut();
  ops.insert(ops.end(), b.ops.begin(), b.ops.end());
  c.params += b.params;
  c.fwd_flops += b.fwd_flops;
  c.fwd_bytes += b.fwd_bytes;
  c.saved_bytes += b.saved_bytes;
  c.recompute_flops += b.recompute_flops;
  c.cp_comm_bytes += b.cp_comm_bytes;
  c.cp_a2a_qkv_bytes += b.cp_a2a_qkv_bytes;
  c.cp_a2a_out_bytes += b.cp_a2a_out_bytes;
  c.linear_params += b.linear_params;
  c.weight_grad_saved_bytes += b.weight_grad_saved_bytes;
  c.expert_params += b.expert_params;
  c.moe = c.moe || b.moe;
  c.moe_load = std::max(c.moe_load, b.moe_load);
  c.backward_transient_bytes = std::max(c.backward_transient_bytes, b.backward_transient_bytes);
}

}  // namespace

LayerCost embedding_cost(const ModelSpec& m, const LayerShape& s) {
  const auto [t, e, sp_div, tokens, h] = block_dims(m, s);
  LayerCost c;
  // Vocab-parallel word embedding (split by tp); learned positions replicated.
  c.params = static_cast<double>(m.vocab) * h / t +
             (m.position_embedding == PositionEmbedding::kLearned ? static_cast<double>(m.seq_len) * h : 0.0);
  // Lookup writes sbh; the vocab-parallel partial results are all-reduced
  // (reduce-scattered with SP); embedding dropout saves its mask sbh/t with SP
  // (Korthikanti Sec. 4.2.1: s*b*h*p/t over p in-flight micro-batches).
  OpCost op = elementwise("embedding", 2 * tokens * h * e, m.dropout ? tokens * h / sp_div : 0.0);
  op.tp_comm_after = s.tp == 1 ? TpComm::kNone : (s.sp ? TpComm::kReduceScatter : TpComm::kAllReduce);
  op.tp_comm_bytes = s.tp == 1 ? 0 : tokens * h * e;
  // Megatron's reduce_from_tensor_model_parallel_region: no backward
  // collective (with SP the reduce-scatter's backward is an all-gather).
  if (!s.sp) op.tp_comm_passes = TpCommPasses::kForwardOnly;
  c.ops.push_back(op);
  add_totals(&c, e);
  // Its weight gradient scatters the output gradient into the table.
  c.weight_grad_saved_bytes = tokens * h * e / sp_div;
  return c;
}

LayerCost output_cost(const ModelSpec& m, const LayerShape& s) {
  const auto [t, e, sp_div, tokens, h] = block_dims(m, s);
  const double v = static_cast<double>(m.vocab);
  LayerCost c;
  // The output layer holds vocab/t rows; with tied embeddings and pp > 1
  // Megatron keeps a copy on the last stage (the caller decides).
  c.params = static_cast<double>(m.bias ? 2 * m.hidden : m.hidden) + v * h / t;
  // Korthikanti Sec. 4.2.1 (p = 1 terms): final LayerNorm input and output
  // layer input 2sbh/t each, and the fp32 logits 4sbv/t.
  OpCost ln = elementwise("final_ln", 2 * tokens * h * e / sp_div, tokens * h * e / sp_div);
  ln.tp_comm_after = s.sp ? TpComm::kAllGather : TpComm::kNone;
  ln.tp_comm_bytes = s.sp ? tokens * h * e : 0;
  c.ops.push_back(ln);
  OpCost logits = gemm("logits", tokens, v / t, h, tokens * h * e / sp_div);
  if (s.tp > 1 && !s.sp) {
    // The column-parallel output layer's input: copy_to_tensor_model_parallel_region,
    // the identity in forward and an all-reduce of the input gradient in backward.
    logits.tp_comm_after = TpComm::kAllReduce;
    logits.tp_comm_bytes = tokens * h * e;
    logits.tp_comm_passes = TpCommPasses::kBackwardOnly;
  }
  c.ops.push_back(logits);
  // The loss in fp32 on the logits, keeping 4sbv/t, as unfused kernels
  // (bytes per logit):
  // - Megatron's _VocabParallelCrossEntropy on logits.float()
  //   (megatron/core/tensor_parallel/cross_entropy.py; megatron/mpu of
  //   2021-22): the cast (read e, write 4), max (4), sub_ (8), exp out= in
  //   place (8), sum (4), div_ (8) = e + 36 forward; backward mul_ of the
  //   saved softmax by the output gradient (8) and the cast back to the
  //   logits' dtype (4 + e) = 12 + e.
  // - PyTorch's cross_entropy(logits.float()): the cast (e + 4) and
  //   log_softmax (max, sum-of-exp and output passes: three reads of 4,
  //   write 4) = e + 20; backward the dense nll_loss gradient (4),
  //   log_softmax's backward (reads 8, writes 4) and the cast back (4 + e)
  //   = 20 + e.
  // - Megatron-Core's fused loss (s.loss_fusion, --cross-entropy-loss-fusion
  //   with the native implementation, megatron/core/fusions/
  //   fused_cross_entropy.py): the same steps as three torch.compile'd
  //   segments forward, each one pass over the row (jit_fuser is
  //   torch.compile from PyTorch 2.2): the cast with the max (e + 4), the
  //   in-place subtract and exp with their sum (8), the in-place divide (8)
  //   = e + 20; backward one segment, the in-place mul_ written back and
  //   the cast to bf16 = 8 + e (calculate_gradients casts to bf16 whatever
  //   the logits' dtype: under fp16 autograd casts that gradient to fp16,
  //   2 + 2 more).  It keeps the same fp32 softmax.
  const double fused_bwd = 8 + e + (s.precision == Precision::kFp16 ? 4 : 0);
  const double fwd_per_logit = s.pytorch_loss ? e + 20 : s.loss_fusion ? e + 20 : e + 36;
  const double bwd_per_logit = s.pytorch_loss ? 20 + e : s.loss_fusion ? fused_bwd : 12 + e;
  OpCost loss = elementwise("cross_entropy", tokens * v / t * fwd_per_logit, 4 * tokens * v / t);
  loss.bwd_bytes = tokens * v / t * bwd_per_logit;
  c.ops.push_back(loss);
  add_totals(&c, e);
  // The loss's backward (layer_cost.h): Megatron's _VocabParallelCrossEntropy
  // turns the saved softmax into the gradient in place and the cast back to
  // the logits' dtype adds e B per logit; PyTorch's log_softmax backward
  // holds its saved fp32 output, the nll_loss gradient (dense fp32) and the
  // fp32 gradient of the logits together: 8 B per logit beyond the saved 4.
  c.backward_transient_bytes = tokens * v / t * (s.pytorch_loss ? 8.0 : e);
  return c;
}

LayerCost mtp_head_cost(const ModelSpec& m, const LayerShape& s) {
  const auto [t, e, sp_div, tokens, h] = block_dims(m, s);
  LayerCost c;
  // enorm, hnorm: RMSNorms (Megatron-Core's MTP layer spec), each reading and
  // writing an [s, b, h] tensor and keeping its input; with sequence
  // parallelism the concatenation is gathered for the column-parallel
  // eh_proj.
  c.ops.push_back(elementwise("mtp_enorm", 2 * tokens * h * e / sp_div, tokens * h * e / sp_div));
  OpCost hnorm = elementwise("mtp_hnorm", 2 * tokens * h * e / sp_div, tokens * h * e / sp_div);
  hnorm.tp_comm_after = s.sp ? TpComm::kAllGather : TpComm::kNone;
  hnorm.tp_comm_bytes = s.sp ? tokens * 2 * h * e : 0;
  c.ops.push_back(hnorm);
  // eh_proj: [tokens, 2h] x [2h, h/t], keeping its input; its h/t-wide
  // output is gathered over TP before the transformer layer (Megatron-Core:
  // gather_from_tensor_model_parallel_region, then the scatter to SP).
  OpCost proj = gemm("mtp_eh_proj", tokens, h / t, 2 * h, tokens * 2 * h * e);
  proj.tp_comm_after = s.tp > 1 ? TpComm::kAllGather : TpComm::kNone;
  proj.tp_comm_bytes = s.tp > 1 ? tokens * h * e : 0;
  c.ops.push_back(proj);
  add_totals(&c, e);
  c.params = 2 * h * h / t + 3 * h;
  // The depth's final norm, logits and loss, on the shared output weights
  // (their parameters are the output layer's, counted once).
  LayerCost head = output_cost(m, s);
  head.params = 0;
  append_block(&c, head);
  return c;
}

bool mtp_layer_is_moe(const ModelSpec& m) { return m.has_moe && m.is_moe_layer(m.layers - 1); }

LayerCost output_block_cost(const ModelSpec& m, const LayerShape& s) {
  LayerCost c = output_cost(m, s);
  if (s.mtp_layers <= 0) return c;
  const LayerCost head = mtp_head_cost(m, s);
  const LayerCost layer = transformer_layer_cost(m, s, mtp_layer_is_moe(m));
  for (int d = 0; d < s.mtp_layers; ++d) {
    append_block(&c, head);
    append_block(&c, layer);
  }
  return c;
}

}  // namespace trainplan
