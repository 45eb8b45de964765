// Tests of the per-layer cost: saved activation bytes against Korthikanti et
// al. 2022 Table 2 (FORMULAS.md §2.2), which are exact closed forms, and the
// changes that flash attention, GQA, SwiGLU and no dropout make to them.
#include "simulator/cost/layer_cost.h"

#include <algorithm>
#include <tuple>

#include <catch2/catch.hpp>

namespace trainplan {
namespace {

// Korthikanti et al. 2022 Table 3, 22B: s = 2048, h = 6144, a = 64, b = 4,
// 48 layers, GeLU 4h MLP, MHA, dropout.
ModelSpec gpt22b() {
  ModelSpec m;
  m.name = "gpt-22b-test";
  m.layers = 48;
  m.hidden = 6144;
  m.heads = 64;
  m.kv_heads = 64;
  m.ffn_hidden = 4 * 6144;
  m.vocab = 51200;
  m.seq_len = 2048;
  m.mlp = MlpKind::kGelu;
  m.tied_embeddings = true;
  m.dropout = true;
  m.bias = true;
  m.position_embedding = PositionEmbedding::kLearned;
  return m;
}

LayerShape shape(int tp, bool sp, Recompute r, Attention att = Attention::kNaive) {
  LayerShape s;
  s.tp = tp;
  s.sp = sp;
  s.mbs = 4;
  s.seq = 2048;
  s.precision = Precision::kBf16;
  s.attention = att;
  s.recompute = r;
  return s;
}

double saved(const ModelSpec& m, const LayerShape& s) { return transformer_layer_cost(m, s).saved_bytes; }

constexpr double kS = 2048, kB = 4, kH = 6144, kA = 64;
constexpr double kSbh = kS * kB * kH;  // 50,331,648
constexpr double kRel = 1e-9;          // the Table 2 forms are exact by construction

// OpList shares a layer's ops between copies until one changes them: each copy
// must still behave as a value (the oracle: std::vector's value semantics), and
// a copy that nobody changes must not hold ops of its own (what the planner's
// tens of thousands of partial-recompute step costs rely on).
TEST_CASE("LayerCost: copies share their ops until one of them changes them", "[sim][cost]") {
  const LayerCost original = transformer_layer_cost(gpt22b(), shape(8, true, Recompute::kSelective));
  const std::vector<OpCost> before = original.ops.vec();
  REQUIRE(before.size() > 3);

  LayerCost copy = original;
  CHECK(&copy.ops.vec() == &original.ops.vec());  // shared, not copied
  copy.ops.mut()[1].flops += 1;
  copy.ops.push_back(before.front());
  CHECK(&copy.ops.vec() != &original.ops.vec());
  CHECK(copy.ops.size() == before.size() + 1);
  CHECK(copy.ops[1].flops == before[1].flops + 1);
  // The original is as it was, op for op.
  REQUIRE(original.ops.size() == before.size());
  for (size_t i = 0; i < before.size(); ++i) {
    CHECK(original.ops[i].name == before[i].name);
    CHECK(original.ops[i].flops == before[i].flops);
  }
  // A copy changed while it is the only holder changes in place.
  const std::vector<OpCost>* own = &copy.ops.vec();
  copy.ops.mut()[0].bytes += 1;
  CHECK(&copy.ops.vec() == own);
  // An empty list reads as an empty vector; its first change makes one.
  OpList none;
  CHECK(none.empty());
  CHECK(none.begin() == none.end());
  none.push_back(before.front());
  CHECK(none.size() == 1);
}

TEST_CASE("LayerCost: GPT layer saves sbh(34 + 5as/h) bytes", "[sim][cost]") {
  const ModelSpec m = gpt22b();
  SECTION("no parallelism") {
    // 5as/h = 5*64*2048/6144 = 106.67: sbh * 140.67 = 7,079,985,152 bytes.
    CHECK(saved(m, shape(1, false, Recompute::kNone)) == Approx(kSbh * (34 + 5 * kA * kS / kH)).epsilon(kRel));
  }
  SECTION("the sum of the ops equals the layer total") {
    const LayerCost c = transformer_layer_cost(m, shape(1, false, Recompute::kNone));
    double sum = 0;
    for (const OpCost& op : c.ops) sum += op.saved_bytes;
    CHECK(c.saved_bytes == Approx(sum).epsilon(kRel));
  }
}

TEST_CASE("LayerCost: Korthikanti Table 2 rows under tensor and sequence parallelism", "[sim][cost]") {
  const ModelSpec m = gpt22b();
  for (int t : {2, 4, 8}) {
    DYNAMIC_SECTION("tp=" << t << ": sbh(10 + 24/t + 5as/(ht))") {
      // LayerNorm inputs, QKV and FC1 inputs and the two dropout masks (10sbh)
      // are replicated; the rest is split over t.
      CHECK(saved(m, shape(t, false, Recompute::kNone)) ==
            Approx(kSbh * (10 + 24.0 / t + 5 * kA * kS / (kH * t))).epsilon(kRel));
    }
    DYNAMIC_SECTION("tp=" << t << " + sp: sbh(34 + 5as/h)/t") {
      CHECK(saved(m, shape(t, true, Recompute::kNone)) == Approx(kSbh * (34 + 5 * kA * kS / kH) / t).epsilon(kRel));
    }
    DYNAMIC_SECTION("tp=" << t << " + selective: sbh(10 + 24/t)") {
      CHECK(saved(m, shape(t, false, Recompute::kSelective)) == Approx(kSbh * (10 + 24.0 / t)).epsilon(kRel));
    }
    DYNAMIC_SECTION("tp=" << t << " + sp + selective: 34sbh/t") {
      CHECK(saved(m, shape(t, true, Recompute::kSelective)) == Approx(34 * kSbh / t).epsilon(kRel));
    }
    DYNAMIC_SECTION("tp=" << t << " + full recompute: 2sbh (the layer input)") {
      CHECK(saved(m, shape(t, false, Recompute::kFull)) == Approx(2 * kSbh).epsilon(kRel));
    }
    DYNAMIC_SECTION("tp=" << t << " + sp + full recompute: 2sbh/t") {
      CHECK(saved(m, shape(t, true, Recompute::kFull)) == Approx(2 * kSbh / t).epsilon(kRel));
    }
  }
  SECTION("sp is ignored at tp=1") {
    // layer_shape() turns sp off without tp; the tp=1 row is Eq. 1.
    Plan p;
    p.tp = 1;
    p.sp = true;
    CHECK_FALSE(layer_shape(p).sp);
  }
}

TEST_CASE("LayerCost: flash attention keeps the 4-byte log-sum-exp instead of 5as^2b", "[sim][cost]") {
  const ModelSpec m = gpt22b();
  for (int t : {1, 8}) {
    DYNAMIC_SECTION("tp=" << t << ": naive - flash = 5as^2b/t - 4asb/t") {
      // Naive keeps softmax output (2 bytes), dropout mask (1) and dropout
      // output (2) per score element: 5as^2b/t; flash keeps one fp32 LSE per
      // query row and head: 4asb/t (Dao et al. 2022).
      const double naive = saved(m, shape(t, false, Recompute::kNone, Attention::kNaive));
      const double flash = saved(m, shape(t, false, Recompute::kNone, Attention::kFlash));
      CHECK(naive - flash == Approx((5 * kA * kS * kS * kB - 4 * kA * kS * kB) / t).epsilon(kRel));
      CHECK(flash == Approx(kSbh * (10 + 24.0 / t) + 4 * kA * kS * kB / t).epsilon(kRel));
    }
  }
  SECTION("selective recompute with flash keeps the LSE (only s^2 terms are dropped)") {
    const double flash_sel = saved(m, shape(8, true, Recompute::kSelective, Attention::kFlash));
    CHECK(flash_sel == Approx(34 * kSbh / 8 + 4 * kA * kS * kB / 8).epsilon(kRel));
  }
}

TEST_CASE("LayerCost: GQA shrinks the saved K and V", "[sim][cost]") {
  // With kv_heads = 8 of head_dim 96, K and V are 768 wide instead of 6144:
  // each saves 2*s*b*768/t instead of 2*s*b*6144/t, so the layer saves
  // 2 tensors * 2 bytes * s*b*(h - kv*d)/t less.
  ModelSpec mha = gpt22b();
  ModelSpec gqa = gpt22b();
  gqa.kv_heads = 8;
  const double kvd = 8 * (kH / kA);  // 768
  for (int t : {1, 8}) {
    DYNAMIC_SECTION("tp=" << t) {
      const double diff = saved(mha, shape(t, false, Recompute::kNone)) - saved(gqa, shape(t, false, Recompute::kNone));
      CHECK(diff == Approx(4 * kS * kB * (kH - kvd) / t).epsilon(kRel));
    }
  }
  SECTION("K and V projections also hold fewer parameters") {
    // Q and output: 2h^2; K and V: 2*h*kvd.
    CHECK(layer_params(mha) - layer_params(gqa) == Approx(2 * kH * (kH - kvd) + 2 * (kH - kvd)).epsilon(kRel));
  }
}

TEST_CASE("LayerCost: a SwiGLU MLP saves 6sbf/t", "[sim][cost]") {
  // FC1 input 2sbh (replicated / SP-split as for GeLU); SwiGLU keeps gate and
  // up, 2 * 2sbf/t; FC2 input 2sbf/t: 6sbf/t, against GeLU's 4sbf/t.
  ModelSpec sw = gpt22b();
  sw.mlp = MlpKind::kSwiglu;
  sw.ffn_hidden = 16384;
  const double f = 16384;
  for (int t : {1, 4}) {
    DYNAMIC_SECTION("tp=" << t << ": sbh(10 + 8/t) + 6sbf/t + 5as^2b/t") {
      CHECK(saved(sw, shape(t, false, Recompute::kNone)) ==
            Approx(kSbh * (10 + 8.0 / t) + 6 * kS * kB * f / t + 5 * kA * kS * kS * kB / t).epsilon(kRel));
    }
  }
  SECTION("against GeLU of the same width the difference is 2sbf/t") {
    ModelSpec ge = sw;
    ge.mlp = MlpKind::kGelu;
    CHECK(saved(sw, shape(2, false, Recompute::kNone)) - saved(ge, shape(2, false, Recompute::kNone)) ==
          Approx(2 * kS * kB * f / 2).epsilon(kRel));
  }
}

TEST_CASE("LayerCost: without dropout the masks and the dropout output go", "[sim][cost]") {
  // Korthikanti Sec. 4.1: the two residual dropout masks are sbh bytes each,
  // attention dropout keeps a 1-byte mask as^2b and its 2-byte output 2as^2b.
  ModelSpec nd = gpt22b();
  nd.dropout = false;
  SECTION("tp=1: sbh(34 - 2) + (5 - 3)as^2b") {
    CHECK(saved(nd, shape(1, false, Recompute::kNone)) == Approx(32 * kSbh + 2 * kA * kS * kS * kB).epsilon(kRel));
  }
  SECTION("tp=8 + sp: (32sbh + 2as^2b)/8") {
    CHECK(saved(nd, shape(8, true, Recompute::kNone)) == Approx((32 * kSbh + 2 * kA * kS * kS * kB) / 8).epsilon(kRel));
  }
}

TEST_CASE("LayerCost: layer FLOPs are 24Bsh^2 + 4Bs^2h forward", "[sim][cost]") {
  // Korthikanti App. A: QKV 6Bsh^2, QK^T 2Bs^2h, attention*V 2Bs^2h, output
  // projection 2Bsh^2, MLP 16Bsh^2.
  const ModelSpec m = gpt22b();
  SECTION("tp=1") {
    const LayerCost c = transformer_layer_cost(m, shape(1, false, Recompute::kNone));
    CHECK(c.fwd_flops == Approx(24 * kB * kS * kH * kH + 4 * kB * kS * kS * kH).epsilon(kRel));
  }
  SECTION("tp=8 splits them evenly") {
    const LayerCost c = transformer_layer_cost(m, shape(8, true, Recompute::kNone));
    CHECK(c.fwd_flops == Approx((24 * kB * kS * kH * kH + 4 * kB * kS * kS * kH) / 8).epsilon(kRel));
  }
  SECTION("selective recompute redoes the attention core, 4Bs^2h") {
    const LayerCost c = transformer_layer_cost(m, shape(1, false, Recompute::kSelective));
    CHECK(c.recompute_flops == Approx(4 * kB * kS * kS * kH).epsilon(kRel));
  }
  SECTION("full recompute redoes the whole forward") {
    const LayerCost c = transformer_layer_cost(m, shape(1, false, Recompute::kFull));
    CHECK(c.recompute_flops == Approx(c.fwd_flops).epsilon(kRel));
  }
}

TEST_CASE("LayerCost: sliding-window layers charge the query-key pairs their window keeps", "[sim][cost]") {
  // A windowed layer's query i attends to keys max(0, i - w + 1) .. i.
  // Counted pair by pair here (the oracle), against the causal prefix's
  // s(s+1)/2 pairs; the layer's attention is the mean over the model's
  // layers, half of them windowed with full_every 2.
  ModelSpec m = gpt22b();
  m.has_sliding_window = true;
  m.sliding_window.tokens = 256;
  m.sliding_window.full_every = 2;
  REQUIRE(m.windowed_layer_count() == 24);
  double kept = 0;
  for (int64_t i = 0; i < 2048; ++i) kept += static_cast<double>(std::min<int64_t>(i + 1, 256));
  const double ratio = kept / (2048.0 * 2049.0 / 2);
  auto attention = [&](const ModelSpec& model, Attention att) {
    for (const OpCost& op : transformer_layer_cost(model, shape(1, false, Recompute::kNone, att)).ops) {
      if (op.kind == OpKind::kAttention) return op;
    }
    FAIL("no attention op");
    return OpCost{};
  };
  const OpCost full = attention(gpt22b(), Attention::kFlash);
  const OpCost mixed = attention(m, Attention::kFlash);
  CHECK(full.flops == Approx(4 * kB * kS * kS * kH).epsilon(kRel));
  CHECK(mixed.flops == Approx(full.flops * (0.5 + 0.5 * ratio)).epsilon(kRel));
  // The windowed layers' share of those FLOPs, and their kernels' key count.
  CHECK(mixed.window_flops_share == Approx(0.5 * ratio / (0.5 + 0.5 * ratio)).epsilon(kRel));
  CHECK(mixed.window_kv_len == 256);
  // Unfused attention computes every score and masks the window out.
  CHECK(attention(m, Attention::kNaive).flops == Approx(full.flops).epsilon(kRel));
  // A window as long as the sequence is the causal prefix.
  m.sliding_window.tokens = 2048;
  CHECK(attention(m, Attention::kFlash).flops == Approx(full.flops).epsilon(kRel));
  CHECK(attention(m, Attention::kFlash).window_flops_share == 0);
}

TEST_CASE("LayerCost: the embedding and output layer add Korthikanti's extra terms", "[sim][cost]") {
  // FORMULAS.md §2.2 "Extra terms": embedding dropout mask sbh/t (with SP);
  // at p = 1 the final LayerNorm input, the output-layer input (2sbh/t each)
  // and the fp32 logits 4sbv/t: 4sbh/t (1 + v/h).
  const ModelSpec m = gpt22b();
  const double v = 51200;
  SECTION("embedding dropout mask, tp=8 + sp: sbh/8") {
    CHECK(embedding_cost(m, shape(8, true, Recompute::kNone)).saved_bytes == Approx(kSbh / 8).epsilon(kRel));
  }
  SECTION("output layer, tp=8 + sp: 4sbh/t (1 + v/h)") {
    CHECK(output_cost(m, shape(8, true, Recompute::kNone)).saved_bytes ==
          Approx(4 * kSbh / 8 * (1 + v / kH)).epsilon(kRel));
  }
  SECTION("output layer FLOPs: logits 2BshV") {
    CHECK(output_cost(m, shape(1, false, Recompute::kNone)).fwd_flops == Approx(2 * kB * kS * kH * v).epsilon(kRel));
  }
  SECTION("the loss's kernels move their bytes per logit, kernel by kernel") {
    // Megatron's _VocabParallelCrossEntropy on logits.float(): cast (2 + 4),
    // max (4), sub_ (4 + 4), exp in place (4 + 4), sum (4), div_ (4 + 4) =
    // 38 B per logit forward; backward mul_ (4 + 4) and the cast back to
    // bf16 (4 + 2) = 14.  PyTorch's cross_entropy(logits.float()): cast 6,
    // log_softmax 16 = 22 forward; nll_loss's gradient 4, log_softmax's
    // backward 12, cast back 6 = 22 backward.
    const double logits = kB * kS * v / 8;
    const auto loss = [&](bool pytorch) {
      LayerShape s = shape(8, true, Recompute::kNone);
      s.pytorch_loss = pytorch;
      for (const OpCost& op : output_cost(m, s).ops) {
        if (op.name == "cross_entropy") return op;
      }
      FAIL("no cross_entropy op");
      return OpCost{};
    };
    CHECK(loss(false).bytes == Approx(38 * logits).epsilon(kRel));
    CHECK(loss(false).bwd_bytes == Approx(14 * logits).epsilon(kRel));
    CHECK(loss(true).bytes == Approx(22 * logits).epsilon(kRel));
    CHECK(loss(true).bwd_bytes == Approx(22 * logits).epsilon(kRel));
  }
  SECTION("Megatron-Core's fused loss: the same steps, one pass per compiled segment") {
    // megatron/core/fusions/fused_cross_entropy.py, each function a
    // torch.compile'd segment (jit_fuser), each one loop over the row:
    // calculate_logits_max reads bf16 and writes the fp32 copy it returns
    // (2 + 4, the max in the same loop); calculate_predicted_logits
    // subtracts and exponentiates in place with the sum (4 + 4);
    // calculate_cross_entropy_loss divides in place (4 + 4) = 22 B per
    // logit forward, against the unfused 38.  Backward calculate_gradients:
    // mul_ in place, written back (4 + 4), and the cast to bf16 (2) = 10,
    // against 14.  The saved fp32 softmax is the same: 4sbv/t.
    const double logits = kB * kS * v / 8;
    LayerShape s = shape(8, true, Recompute::kNone);
    s.loss_fusion = true;
    const LayerCost fused = output_cost(m, s);
    const OpCost* ce = nullptr;
    for (const OpCost& op : fused.ops) {
      if (op.name == "cross_entropy") ce = &op;
    }
    REQUIRE(ce != nullptr);
    CHECK(ce->bytes == Approx(22 * logits).epsilon(kRel));
    CHECK(ce->bwd_bytes == Approx(10 * logits).epsilon(kRel));
    CHECK(fused.saved_bytes == Approx(output_cost(m, shape(8, true, Recompute::kNone)).saved_bytes).epsilon(kRel));
    CHECK(fused.backward_transient_bytes == Approx(2 * logits).epsilon(kRel));
    // Under fp16 the segment's bf16 gradient is cast again by autograd to
    // the fp16 logits' dtype: 2 + 2 more, 14.
    s.precision = Precision::kFp16;
    for (const OpCost& op : output_cost(m, s).ops) {
      if (op.name == "cross_entropy") CHECK(op.bwd_bytes == Approx(14 * logits).epsilon(kRel));
    }
  }
}

TEST_CASE("LayerCost: TP splits matrices and column biases, not row biases and norms", "[sim][cost]") {
  // GPT layer: matrices 12h^2 and column-parallel biases 3h + 4h split over t;
  // the output-projection and FC2 biases (2h) and two LayerNorms (4h) are
  // replicated (Megatron ColumnParallelLinear / RowParallelLinear).
  const ModelSpec m = gpt22b();
  SECTION("tp=1 holds the whole layer, 12h^2 + 13h") {
    CHECK(transformer_layer_cost(m, shape(1, false, Recompute::kNone)).params ==
          Approx(12 * kH * kH + 13 * kH).epsilon(kRel));
  }
  SECTION("tp=8") {
    CHECK(transformer_layer_cost(m, shape(8, false, Recompute::kNone)).params ==
          Approx((12 * kH * kH + 7 * kH) / 8 + 6 * kH).epsilon(kRel));
  }
}


TEST_CASE("LayerCost: the embedding's and output layer's TP collectives run in the passes Megatron runs them",
          "[sim][cost][tp]") {
  // Megatron's f/g operators (Shoeybi et al. 2019 Fig. 3): the
  // vocab-parallel embedding reduces its partial lookups in forward
  // (reduce_from_tensor_model_parallel_region: backward the identity); the
  // column-parallel output layer copies its input in forward
  // (copy_to_tensor_model_parallel_region) and all-reduces the input
  // gradient in backward.  Both move the [s, b, h] activation.  With
  // sequence parallelism: reduce-scatter / all-gather for the embedding,
  // all-gather / reduce-scatter before the output layer, in both passes.
  const ModelSpec m = gpt22b();
  const double sbh_bytes = 2048.0 * 4 * 6144 * 2;  // b = 4, bf16
  auto comm = [](const LayerCost& c) {
    int forward = 0, backward = 0;
    double bytes = 0;
    for (const OpCost& op : c.ops) {
      if (op.tp_comm_after == TpComm::kNone) continue;
      forward += op.tp_comm_passes != TpCommPasses::kBackwardOnly;
      backward += op.tp_comm_passes != TpCommPasses::kForwardOnly;
      bytes = op.tp_comm_bytes;
    }
    return std::make_tuple(forward, backward, bytes);
  };
  {
    const auto [f, b, bytes] = comm(embedding_cost(m, shape(8, false, Recompute::kNone)));
    CHECK(f == 1);
    CHECK(b == 0);
    CHECK(bytes == Approx(sbh_bytes));
  }
  {
    const auto [f, b, bytes] = comm(output_cost(m, shape(8, false, Recompute::kNone)));
    CHECK(f == 0);
    CHECK(b == 1);
    CHECK(bytes == Approx(sbh_bytes));
  }
  for (const LayerCost& c : {embedding_cost(m, shape(8, true, Recompute::kNone)),
                             output_cost(m, shape(8, true, Recompute::kNone))}) {
    const auto [f, b, bytes] = comm(c);
    CHECK(f == 1);
    CHECK(b == 1);
    CHECK(bytes == Approx(sbh_bytes));
  }
  // tp = 1: none.
  CHECK(std::get<0>(comm(output_cost(m, shape(1, false, Recompute::kNone)))) == 0);
  CHECK(std::get<1>(comm(output_cost(m, shape(1, false, Recompute::kNone)))) == 0);
}

}  // namespace
}  // namespace trainplan
