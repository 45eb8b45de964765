#include "simulator/cost/layer_cost.h"

#include "simulator/core/error.h"

namespace trainplan {

LayerShape layer_shape(const Plan& p) {
  LayerShape s;
  s.tp = p.tp;
  s.cp = p.cp;
  s.sp = p.sp && p.tp > 1;
  s.mbs = p.mbs;
  s.seq = p.seq;
  s.precision = p.precision;
  s.attention = p.attention;
  s.recompute = p.recompute;
  s.fp8_recipe = p.fp8_recipe;
  s.fp8_saved_inputs = fp8_transformer_engine(p);
  return s;
}

double layer_params(const ModelSpec& m) {
  const double h = static_cast<double>(m.hidden);
  const double kvd = static_cast<double>(m.kv_heads * m.head_dim());
  const double f = static_cast<double>(m.ffn_hidden);
  // Q, K, V and output projections; GQA shrinks K and V to kv_heads*head_dim.
  double attn = h * (h + 2 * kvd) + h * h;
  // GELU MLP: h->f->h; SwiGLU: gate and up h->f, down f->h (Shazeer 2020).
  double mlp = (m.mlp == MlpKind::kGelu ? 2.0 : 3.0) * h * f;
  double bias = 0;
  if (m.bias) bias = (h + 2 * kvd) + h + (m.mlp == MlpKind::kGelu ? f : 2 * f) + h;
  double norms = 2 * (m.bias ? 2 * h : h);  // LayerNorm (weight + bias) or RMSNorm
  return attn + mlp + bias + norms;
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
  return static_cast<double>(m.layers) * layer_params(m) + embedding_params(m) + output_params(m);
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
// gradient (backward), memory-bound.
OpCost fp8_cast(const std::string& gemm_name, double input_elements, double grad_elements, Fp8Recipe recipe) {
  OpCost op;
  op.name = "fp8_cast_" + gemm_name;
  op.kind = OpKind::kElementwise;
  op.bytes = input_elements * fp8_cast_bytes_per_element(recipe);
  op.bwd_bytes = grad_elements * fp8_cast_bytes_per_element(recipe);
  return op;
}

// `grad_e`: bytes per element of an output gradient.
void add_totals(LayerCost* c, double grad_e) {
  for (const OpCost& op : c->ops) {
    c->fwd_flops += op.flops;
    c->fwd_bytes += op.bytes;
    c->saved_bytes += op.saved_bytes;
    if (op.kind == OpKind::kGemm) {
      c->weight_grad_saved_bytes += op.saved_bytes + static_cast<double>(op.m) * static_cast<double>(op.n) * grad_e;
    }
  }
}

}  // namespace

double fp8_cast_bytes_per_element(Fp8Recipe recipe) {
  switch (recipe) {
    case Fp8Recipe::kNone: return 0;
    case Fp8Recipe::kDelayed: return 4;
    case Fp8Recipe::kTensorwise:
    case Fp8Recipe::kRowwise: return 6;
    case Fp8Recipe::kBlockwise: return 4;
    case Fp8Recipe::kMxfp8: return 4 + 2.0 / 32;
  }
  return 0;
}

LayerCost transformer_layer_cost(const ModelSpec& m, const LayerShape& s) {
  TRAINPLAN_CHECK(s.tp >= 1 && m.heads % s.tp == 0 && m.kv_heads % s.tp == 0, "tp must divide heads and kv_heads");
  TRAINPLAN_CHECK(s.cp >= 1 && s.seq % s.cp == 0, "cp must divide seq");
  const double t = s.tp;
  const double e = activation_bytes(s.precision);   // bytes per activation element
  const double sp_div = s.sp ? t : 1.0;             // replicated tensors are split by SP
  const double h = static_cast<double>(m.hidden);
  const double a = static_cast<double>(m.heads);
  const double kvd = static_cast<double>(m.kv_heads * m.head_dim());
  const double f = static_cast<double>(m.ffn_hidden);
  const double seq = static_cast<double>(s.seq);
  const double tokens = static_cast<double>(s.mbs) * seq / s.cp;  // b * s / cp on this rank
  const double mask = m.dropout ? 1.0 : 0.0;        // dropout masks are 1 byte per element
  const TpComm reduce = s.tp == 1 ? TpComm::kNone : (s.sp ? TpComm::kReduceScatter : TpComm::kAllReduce);
  const TpComm gather = s.sp ? TpComm::kAllGather : TpComm::kNone;
  const double tp_buffer = tokens * h * e;          // full [s, b, h] activation

  LayerCost c;
  c.params = 0;
  {
    // Matrices and column-parallel biases are split by TP; row-parallel
    // output biases and norms are replicated (Megatron ColumnParallelLinear /
    // RowParallelLinear).
    double matrices = h * (h + 2 * kvd) + h * h + (m.mlp == MlpKind::kGelu ? 2.0 : 3.0) * h * f;
    double col_bias = m.bias ? (h + 2 * kvd) + (m.mlp == MlpKind::kGelu ? f : 2 * f) : 0.0;
    double replicated = layer_params(m) - matrices - col_bias;
    c.params = (matrices + col_bias) / t + replicated;
    c.linear_params = matrices / t;
  }

  // Korthikanti Sec. 4.1: LayerNorm saves its input, 2sbh.
  OpCost ln1 = elementwise("ln1", 2 * tp_buffer / sp_div, tp_buffer / sp_div);
  ln1.tp_comm_after = gather;
  ln1.tp_comm_bytes = s.sp ? tp_buffer : 0;
  c.ops.push_back(ln1);
  // QKV projection saves its input, 2sbh (2sbh/t with SP: the sharded input is
  // kept and re-gathered in backward).
  // FP8 (Transformer Engine, torchao float8): the four linear layers run in
  // FP8 (the LM head and core attention stay bf16, as Megatron's non-TE
  // output layer and TE's default DotProductAttention); Transformer Engine
  // saves their input in FP8, 1 byte per element, torchao the bf16 input.
  // A cast kernel quantizes each GEMM's input (and, in backward, its output
  // gradient).
  const bool fp8 = s.fp8_recipe != Fp8Recipe::kNone;
  const double saved_e = s.fp8_saved_inputs ? 1.0 : e;  // bytes per saved element of a linear layer's input
  auto linear = [&](const std::string& name, double m_, double n_, double k_, double saved_elements) {
    if (fp8) c.ops.push_back(fp8_cast(name, m_ * k_, m_ * n_, s.fp8_recipe));
    OpCost op = gemm(name, m_, n_, k_, saved_elements * saved_e);
    op.fp8 = fp8;
    return op;
  };
  c.ops.push_back(linear("qkv", tokens, (h + 2 * kvd) / t, h, tokens * h / sp_div));
  {
    // Core attention per rank: QK^T and attention-over-V, 2*b*s_q*s_kv*h/t each
    // (Korthikanti App. A counts the full s x s product, as Megatron does).
    OpCost op;
    op.name = "attention";
    op.kind = OpKind::kAttention;
    // Shape of each of its two products per rank, as GEMMs: QK^T is
    // (tokens x seq_kv x h/t) over the heads, attention-over-V the same.
    op.m = static_cast<int64_t>(tokens);
    op.n = static_cast<int64_t>(seq);
    op.k = static_cast<int64_t>(h / t);
    op.flops = 4.0 * tokens * seq * h / t;
    // Q, K and V are saved (Korthikanti: Q and K 4sbh, V 2sbh; GQA: K, V are
    // kv_heads*head_dim wide).
    double qkv_saved = tokens * (h + 2 * kvd) * e / t;
    double scores = a / t * tokens * seq;  // elements of the score matrix on this rank
    if (s.attention == Attention::kNaive) {
      // Softmax output 2as^2b; with dropout also its 1-byte mask as^2b and the
      // dropout output 2as^2b: 5as^2b (Korthikanti Sec. 4.1).
      double s2 = scores * e + mask * scores * (1 + e);
      op.saved_bytes = qkv_saved + s2;
      op.selective_dropped_bytes = s2;
      // Scores written, read by softmax, probabilities written, read by AV.
      op.bytes = 4 * scores * e + mask * scores * (1 + 2 * e);
    } else {
      // FlashAttention keeps only the fp32 log-sum-exp per query row and head
      // (Dao et al. 2022); the s x s matrix is never stored.
      op.saved_bytes = qkv_saved + 4.0 * a / t * tokens;
      op.bytes = tokens * (2 * h + 2 * kvd) * e / t;
    }
    c.ops.push_back(op);
    c.recompute_flops = 0;
  }
  // Output projection saves its input 2sbh/t; then all-reduce (or
  // reduce-scatter with SP) over tp.
  OpCost proj = linear("out_proj", tokens, h, h / t, tokens * h / t);
  proj.tp_comm_after = reduce;
  proj.tp_comm_bytes = reduce == TpComm::kNone ? 0 : tp_buffer;
  c.ops.push_back(proj);
  // Dropout + residual add: 1-byte mask sbh.
  c.ops.push_back(elementwise("dropout_residual1", 3 * tp_buffer / sp_div, mask * tokens * h / sp_div));
  OpCost ln2 = elementwise("ln2", 2 * tp_buffer / sp_div, tp_buffer / sp_div);
  ln2.tp_comm_after = gather;
  ln2.tp_comm_bytes = s.sp ? tp_buffer : 0;
  c.ops.push_back(ln2);
  const bool gelu = m.mlp == MlpKind::kGelu;
  c.ops.push_back(linear("fc1", tokens, (gelu ? f : 2 * f) / t, h, tokens * h / sp_div));
  // GeLU saves its input 2sbf/t (8sbh/t for f = 4h).  SwiGLU saves gate and up,
  // 4sbf/t.
  if (gelu) {
    c.ops.push_back(elementwise("gelu", 2 * tokens * f * e / t, tokens * f * e / t));
  } else {
    c.ops.push_back(elementwise("swiglu", 3 * tokens * f * e / t, 2 * tokens * f * e / t));
  }
  // FC2 saves its input 2sbf/t.
  OpCost fc2 = linear("fc2", tokens, h, f / t, tokens * f / t);
  fc2.tp_comm_after = reduce;
  fc2.tp_comm_bytes = reduce == TpComm::kNone ? 0 : tp_buffer;
  c.ops.push_back(fc2);
  c.ops.push_back(elementwise("dropout_residual2", 3 * tp_buffer / sp_div, mask * tokens * h / sp_div));
  add_totals(&c, e);

  if (s.cp > 1) {
    // Context parallel: every rank needs the K and V of the whole sequence
    // (ring exchange; all-gather buffer of 2*b*s*kv*d elements per tp rank).
    c.cp_comm_bytes = 2.0 * static_cast<double>(s.mbs) * seq * kvd * e / t;
  }
  switch (s.recompute) {
    case Recompute::kNone: break;
    case Recompute::kSelective:
      for (const OpCost& op : c.ops) {
        if (op.kind == OpKind::kAttention) c.recompute_flops += op.flops;
      }
      break;
    case Recompute::kFull: c.recompute_flops = c.fwd_flops; break;
  }
  c.saved_bytes = saved_activation_bytes(c, m, s);
  return c;
}

double saved_activation_bytes(const LayerCost& c, const ModelSpec& m, const LayerShape& s) {
  switch (s.recompute) {
    case Recompute::kFull: {
      // Only the layer input is checkpointed: 2sbh, or 2sbh/t when SP already
      // splits it (Korthikanti Table 2 and Sec. 5).
      double sp_div = s.sp ? s.tp : 1;
      return static_cast<double>(s.mbs) * static_cast<double>(s.seq) / s.cp * static_cast<double>(m.hidden) *
             activation_bytes(s.precision) / sp_div;
    }
    case Recompute::kSelective: {
      double total = 0;
      for (const OpCost& op : c.ops) total += op.saved_bytes - op.selective_dropped_bytes;
      return total;
    }
    case Recompute::kNone: break;
  }
  double total = 0;
  for (const OpCost& op : c.ops) total += op.saved_bytes;
  return total;
}

LayerCost embedding_cost(const ModelSpec& m, const LayerShape& s) {
  const double t = s.tp;
  const double e = activation_bytes(s.precision);
  const double sp_div = s.sp ? t : 1.0;
  const double tokens = static_cast<double>(s.mbs) * static_cast<double>(s.seq) / s.cp;
  const double h = static_cast<double>(m.hidden);
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
  c.ops.push_back(op);
  add_totals(&c, e);
  // Its weight gradient scatters the output gradient into the table.
  c.weight_grad_saved_bytes = tokens * h * e / sp_div;
  return c;
}

LayerCost output_cost(const ModelSpec& m, const LayerShape& s) {
  const double t = s.tp;
  const double e = activation_bytes(s.precision);
  const double sp_div = s.sp ? t : 1.0;
  const double tokens = static_cast<double>(s.mbs) * static_cast<double>(s.seq) / s.cp;
  const double h = static_cast<double>(m.hidden);
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
  c.ops.push_back(gemm("logits", tokens, v / t, h, tokens * h * e / sp_div));
  // Vocab-parallel cross entropy in fp32: reads the logits, keeps 4sbv/t.
  c.ops.push_back(elementwise("cross_entropy", tokens * v / t * (e + 2 * 4), 4 * tokens * v / t));
  add_totals(&c, e);
  return c;
}

}  // namespace trainplan
