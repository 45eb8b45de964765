#include "simulator/cost/step_flops.h"

#include "simulator/cost/layer_cost.h"

namespace trainplan {

namespace {

// Megatron-Core's model FLOPs per token for an MoE or MLA model
// (megatron/training/training.py num_floating_point_operations, transformer
// path; docs/moe.md): 6 x the forward multiply-adds of the projections,
// the dense MLPs, top_k routed experts and the shared experts, and the
// logits, plus causal attention (half the s x s product).  The router GEMM,
// norms and embeddings are not counted.  Checked on the Megatron-Bridge rows
// (tokens/s and TFLOP/s printed together): Qwen3-30B-A3B 22.97 vs 23.01
// GFLOP/token, DeepSeek-V3 249.1 vs 249.8.
double megatron_moe_flops_per_token(const ModelSpec& m, int64_t seq, int mtp_layers) {
  const double h = static_cast<double>(m.hidden), n = static_cast<double>(m.heads);
  const double glu = m.mlp == MlpKind::kSwiglu ? 3 : 2;
  double attn_lin = 0, attn_core = 0;
  if (m.attention == AttentionKind::kMla) {
    const MlaSpec& a = m.mla;
    const double dq = static_cast<double>(a.qk_nope_head_dim), dr = static_cast<double>(a.qk_rope_head_dim);
    const double dv = static_cast<double>(a.v_head_dim);
    const double rq = static_cast<double>(a.q_lora_rank), rkv = static_cast<double>(a.kv_lora_rank);
    const double q = a.q_lora_rank > 0 ? rq * (h + n * (dq + dr) + 1) : h * n * (dq + dr);
    const double kv = rkv * (h + n * (dq + dv) + 1) + h * dr;
    attn_lin = 6 * (q + kv + n * dv * h);
    attn_core = 6 * (n * (dq + dr) / 2 + n * dv / 2);
  } else {
    const double d = static_cast<double>(m.head_dim()), g = static_cast<double>(m.kv_heads);
    attn_lin = 6 * (h * (n * d + 2 * g * d) + n * d * h);
    attn_core = 6 * n * d;
  }
  // Multi-token prediction (num_floating_point_operations): each depth a
  // layer of the last layer's kind, its norms and eh projection (3h + 2h^2
  // multiply-adds per token), and one more logit.
  const double mtp = static_cast<double>(mtp_layers);
  const double moe_layers = static_cast<double>(m.moe_layer_count()) + (mtp_layer_is_moe(m) ? mtp : 0.0);
  const double dense_layers = static_cast<double>(m.layers) + mtp - moe_layers;
  const MoeSpec& e = m.moe;
  const double mlp = 6 * h * glu *
                     (static_cast<double>(m.ffn_hidden) * dense_layers +
                      static_cast<double>(e.expert_ffn_hidden * e.top_k) * moe_layers +
                      static_cast<double>(e.shared_experts * e.shared_ffn_hidden) * moe_layers);
  const double layers = static_cast<double>(m.layers) + mtp;
  return mlp + attn_lin * layers + 6 * h * static_cast<double>(m.vocab) * (1 + mtp) + 6 * mtp * (3 * h + 2 * h * h) +
         static_cast<double>(seq) * attn_core * layers;
}

}  // namespace

StepFlops step_flops(const ModelSpec& model, const Plan& plan) {
  LayerShape one;  // one unsharded sequence
  one.seq = plan.seq;
  one.precision = plan.precision;
  one.attention = attention_run(plan);
  one.recompute = plan.recompute;
  one.ep = 1;
  one.etp = 1;
  one.moe_load = 1;  // the FLOPs of the routed tokens, not of the busiest rank
  one.mtp_layers = plan.mtp_layers;
  LayerCost layer = transformer_layer_cost(model, one);
  LayerCost moe = model.has_moe ? transformer_layer_cost(model, one, true) : layer;
  LayerCost out = output_block_cost(model, one);  // multi-token prediction included
  const double sequences = static_cast<double>(plan.gbs);
  double fwd = out.fwd_flops, recompute = out.recompute_flops;
  for (int64_t i = 0; i < model.layers; ++i) {
    const LayerCost& c = model.is_moe_layer(i) ? moe : layer;
    fwd += c.fwd_flops;
    recompute += c.recompute_flops;
  }
  StepFlops f;
  // Forward + backward (2x forward) = 3x forward.
  f.model_flops = 3.0 * sequences * fwd;
  f.hardware_flops = f.model_flops + sequences * recompute;
  if (model.has_moe || model.attention == AttentionKind::kMla) {
    // MoE / MLA models: model FLOPs as Megatron-Core counts them (the
    // convention every published MoE figure uses); hardware FLOPs stay the
    // executed ops (router, full attention product, recompute).
    f.model_flops = sequences * static_cast<double>(plan.seq) * megatron_moe_flops_per_token(model, plan.seq, plan.mtp_layers);
  }
  return f;
}

}  // namespace trainplan
