// FP8 training (docs/fp8.md): GEMM time at the FP8 peak and FP8 MAMF
// efficiency, the cast kernels, the activations and the weight copies of
// Transformer Engine against closed forms, and the plan rules.
#include <catch2/catch.hpp>

#include "simulator/compute/compute_model.h"
#include "simulator/cost/layer_cost.h"
#include "simulator/memory/memory_model.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {
namespace {

Plan fp8_plan(const std::string& recipe = "") {
  Plan p;
  REQUIRE(set_precision("fp8", &p));
  if (!recipe.empty()) REQUIRE(set_fp8_recipe(recipe, &p));
  return p;
}

// Linear-layer parameters of one Llama 3 8B layer: Q, K, V, O and the three
// SwiGLU matrices, h (h + 2 kv d) + h^2 + 3 h f (Dubey et al. 2024 Table 3:
// h 4096, 8 KV heads of 128, f 14336).
constexpr double kLlama8bLinear = 4096.0 * (4096 + 2 * 1024) + 4096.0 * 4096 + 3.0 * 4096 * 14336;

}  // namespace

TEST_CASE("FP8: a large GEMM runs at the FP8 MAMF share of the FP8 peak", "[sim][fp8]") {
  // Same shape, same tile and wave factors: the time ratio is the ratio of
  // peak x best-shape efficiency x depth, (989 x 0.803 x d_bf16) / (1979 x
  // 0.709 x d_fp8) for H100 SXM (datasheet peaks; BF16 and FP8 MAMF 794.5
  // and 1402.6 TFLOP/s, published_dev.json mamf_NVIDIA_H100_SXM_*), with
  // d = k / (k + K0) and K0 = peak x e_max / (3.35 TB/s x 0.85), the steps
  // of k a tile's bf16 output write costs (compute_model.h): 278.9 for bf16,
  // 492.7 for FP8.  A 8192^3 GEMM is compute bound in both.
  const ClusterSpec h100 = load_cluster("dgx-h100");
  const ComputeParams p = compute_params(h100, Precision::kBf16);
  const int64_t n = 8192;
  const double bf16 = (gemm_time(p, n, n, n, false) - p.kernel_overhead).s();
  const double fp8 = (gemm_time(p, n, n, n, true) - p.kernel_overhead).s();
  const double d_bf16 = 8192.0 / (8192 + 989e12 * 0.803 / (3.35e12 * 0.85));
  const double d_fp8 = 8192.0 / (8192 + 1979e12 * 0.709 / (3.35e12 * 0.85));
  CHECK(fp8 / bf16 == Approx((989.0 * 0.803 * d_bf16) / (1979.0 * 0.709 * d_fp8)).epsilon(1e-3));
}

TEST_CASE("FP8: the linear layers run in FP8, attention and the LM head in bf16", "[sim][fp8]") {
  const ModelSpec m = load_model("llama3-8b");
  Plan p = fp8_plan("delayed");
  p.seq = 8192;
  const LayerCost c = transformer_layer_cost(m, layer_shape(p));
  int fp8_gemms = 0;
  for (const OpCost& op : c.ops) {
    if (op.kind == OpKind::kGemm) {
      CHECK(op.fp8);
      fp8_gemms += 1;
    }
    if (op.kind == OpKind::kAttention) CHECK_FALSE(op.fp8);
  }
  CHECK(fp8_gemms == 4);  // qkv, out_proj, fc1 (gate and up fused), fc2
  for (const OpCost& op : output_cost(m, layer_shape(p)).ops) CHECK_FALSE(op.fp8);
  CHECK(c.linear_params == Approx(kLlama8bLinear));
}

TEST_CASE("FP8: the cast kernels are memory-bound work of 4 or 6 bytes per element", "[sim][fp8]") {
  // Forward: every FP8 GEMM's input is quantized once: tokens x (h + h + h
  // + f) elements per layer at tp 1 (qkv and fc1 read the normed hidden
  // state, out_proj the attention output, fc2 the SwiGLU output).
  // Delayed scaling reads 2 B and writes the FP8 copy and its transpose
  // (4 B); current scaling (tensorwise) reads once more for the amax (6 B).
  const ModelSpec m = load_model("llama3-8b");
  Plan bf16;
  bf16.seq = 4096;
  const double tokens = 4096, h = 4096, f = 14336;
  const double base = transformer_layer_cost(m, layer_shape(bf16)).fwd_bytes;
  for (const auto& [recipe, per_element] : {std::pair<std::string, double>{"delayed", 4.0}, {"tensorwise", 6.0}}) {
    Plan p = fp8_plan(recipe);
    p.seq = 4096;
    const double fp8 = transformer_layer_cost(m, layer_shape(p)).fwd_bytes;
    CHECK(fp8 - base == Approx(tokens * (3 * h + f) * per_element));
  }
}

TEST_CASE("FP8: torchao's rowwise casts in 8 B per element, quantizes each weight at every use, rescales in backward",
          "[sim][fp8]") {
  // torchao's own roofline of its float8 kernels (torchao
  // testing/training/roofline_utils.py get_tensor_memory_traffic_ovhd_s):
  // rowwise quantizes an input or output gradient in two kernels, read 2 B
  // + write the row-wise FP8 copy 1 B + a bf16 transpose 2 B, then read the
  // transpose 2 B + write 1 B: 8 B per element.  Without an FP8 all-gather
  // it quantizes the whole weight at each use: row-wise in forward (read 2,
  // write 1: 3 B), transposed in bf16 (4 B) and cast (3 B) in backward.
  // Tensorwise under ZeRO-3 all-gathers the weights in FP8 (FSDP2
  // enable_fsdp_float8_all_gather): no per-use weight cast, 6 B per input
  // element as before, and its backward GEMMs scale in cuBLAS (no rescale).  Llama 3 8B, tp 1, 4096 tokens: forward inputs
  // tokens x (3h + f); the QKV weight h x (h + 2 kv d).
  const ModelSpec m = load_model("llama3-8b");
  Plan bf16;
  bf16.seq = 4096;
  const double tokens = 4096, h = 4096, f = 14336, qkv = 4096 + 2 * 1024;
  const double base = transformer_layer_cost(m, layer_shape(bf16)).fwd_bytes;
  Plan rowwise = fp8_plan("rowwise");
  rowwise.seq = 4096;
  rowwise.zero = 3;
  const LayerShape rs = layer_shape(rowwise);
  CHECK(rs.fp8_casts_weights);
  const LayerCost rc = transformer_layer_cost(m, rs);
  CHECK(rc.fwd_bytes - base == Approx(tokens * (3 * h + f) * 8 + kLlama8bLinear * 3));
  bool seen = false;
  for (const OpCost& op : rc.ops) {
    if (op.name != "fp8_cast_qkv") continue;
    seen = true;
    CHECK(op.bytes == Approx(tokens * h * 8 + h * qkv * 3));
    // Backward: the output gradient's cast, the weight's transposed cast,
    // and the rescale (read 2 + write 2) of the two slow-accumulation
    // GEMMs' outputs, the input gradient (tokens x h) and the weight
    // gradient (h x qkv) (torchao float8_ops.py addmm_float8_unwrapped).
    CHECK(op.bwd_bytes == Approx(tokens * qkv * 8 + h * qkv * 7 + (tokens * h + h * qkv) * 4));
  }
  CHECK(seen);
  Plan tensorwise = fp8_plan("tensorwise");
  tensorwise.seq = 4096;
  tensorwise.zero = 3;
  CHECK(fp8_weights_gathered(tensorwise));
  CHECK_FALSE(layer_shape(tensorwise).fp8_casts_weights);
  const LayerCost tc = transformer_layer_cost(m, layer_shape(tensorwise));
  CHECK(tc.fwd_bytes - base == Approx(tokens * (3 * h + f) * 6));
  for (const OpCost& op : tc.ops) {
    if (op.name == "fp8_cast_qkv") CHECK(op.bwd_bytes == Approx(tokens * qkv * 6));
  }
  // Transformer Engine keeps FP8 weight copies between micro-batches.
  CHECK_FALSE(layer_shape(fp8_plan("delayed")).fp8_casts_weights);
}

TEST_CASE("FP8: Transformer Engine saves linear inputs in FP8, torchao in bf16", "[sim][fp8]") {
  // TE's Linear saves its quantized input for the weight gradient: the
  // inputs of qkv, out_proj, fc1 and fc2 drop from 2 B to 1 B per element,
  // tokens x (3h + f) bytes less per layer.  But out_proj's input is the
  // attention output O, which the fused attention keeps for its own
  // backward in 16 bits (FusedAttnFunc saves out_f16; in bf16 training the
  // two saves are one tensor): + 2 B x tokens x qd, qd = h for Llama 3 8B.
  // Net: tokens x (3h + f - 2h) = tokens x (h + f).  torchao's float8
  // (ZeRO-3 with tensorwise: FSDP2) saves the bf16 input: no change.
  const ModelSpec m = load_model("llama3-8b");
  Plan bf16;
  bf16.seq = 4096;
  const double saved = transformer_layer_cost(m, layer_shape(bf16)).saved_bytes;
  Plan te = fp8_plan("delayed");
  te.seq = 4096;
  CHECK(saved - transformer_layer_cost(m, layer_shape(te)).saved_bytes == Approx(4096.0 * (4096.0 + 14336.0)));
  // Recomputing core attention keeps neither O nor (in bf16) its shared
  // save: the FP8 plan then saves the full tokens x (3h + f) less.
  bf16.recompute = te.recompute = Recompute::kSelective;
  bf16.recompute_modules = te.recompute_modules = kRcCoreAttn;
  CHECK(transformer_layer_cost(m, layer_shape(bf16)).saved_bytes -
            transformer_layer_cost(m, layer_shape(te)).saved_bytes ==
        Approx(4096.0 * (3 * 4096.0 + 14336.0)));
  Plan fsdp2 = fp8_plan("tensorwise");
  fsdp2.seq = 4096;
  fsdp2.zero = 3;
  CHECK(transformer_layer_cost(m, layer_shape(fsdp2)).saved_bytes == Approx(saved));
}

TEST_CASE("FP8: Transformer Engine's FP8 weight copies in memory", "[sim][fp8]") {
  // TE keeps each linear weight in FP8 with its transpose on Hopper (2 B per
  // linear parameter), 1 B on Blackwell for per-tensor recipes (no
  // transpose needed), and row- and column-wise MXFP8 blocks with one E8M0
  // scale per 32 elements, 2 (1 + 1/32) B, for mxfp8.  Llama 3 8B on one
  // GPU (tp 1, pp 1): 32 layers x kLlama8bLinear parameters.
  const ModelSpec m = load_model("llama3-8b");
  struct Case {
    const char* cluster;
    const char* recipe;
    double bytes_per_param;
  };
  for (const Case& k : {Case{"dgx-h100", "delayed", 2.0}, Case{"dgx-h100", "tensorwise", 2.0},
                        Case{"dgx-b200", "delayed", 1.0}, Case{"dgx-b200", "mxfp8", 2.0 * (1 + 1.0 / 32)}}) {
    INFO(k.cluster << " " << k.recipe);
    const ClusterSpec c = load_cluster(k.cluster);
    Plan bf16;
    bf16.zero = 1;
    Plan fp8 = fp8_plan(k.recipe);
    fp8.zero = 1;
    const double w_bf16 = estimate_memory(m, c, resolve_plan(m, c, 1, bf16)).stages[0].breakdown.weights;
    const double w_fp8 = estimate_memory(m, c, resolve_plan(m, c, 1, fp8)).stages[0].breakdown.weights;
    CHECK(w_fp8 - w_bf16 == Approx(32 * kLlama8bLinear * k.bytes_per_param));
  }
  // FSDP2 float8 (ZeRO-3, tensorwise) casts per gathered layer: no copies.
  const ClusterSpec h100 = load_cluster("dgx-h100");
  Plan z3 = fp8_plan("tensorwise");
  z3.zero = 3;
  Plan z3_bf16;
  z3_bf16.zero = 3;
  CHECK(estimate_memory(m, h100, resolve_plan(m, h100, 8, z3)).stages[0].breakdown.weights ==
        Approx(estimate_memory(m, h100, resolve_plan(m, h100, 8, z3_bf16)).stages[0].breakdown.weights));
}

TEST_CASE("FP8: --fp8-param-gather keeps only the FP8 weights and gathers them in FP8", "[sim][fp8]") {
  // Megatron --fp8-param-gather ("keep the compute param in fp8 ... and
  // perform the param all-gather in fp8"): the bf16 copy of every linear
  // weight goes (2 B per linear parameter), the FP8 data and its transpose
  // stay; the fp32 master weights stay in the distributed optimizer.  Llama 3
  // 8B, ZeRO-1 on one H100 node.
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan fp8 = fp8_plan("delayed");
  fp8.zero = 1;
  Plan gather = fp8;
  gather.fp8_param_gather = true;
  const MemoryReport a = estimate_memory(m, c, resolve_plan(m, c, 8, fp8));
  const MemoryReport b = estimate_memory(m, c, resolve_plan(m, c, 8, gather));
  CHECK(a.stages[0].breakdown.weights - b.stages[0].breakdown.weights == Approx(32 * kLlama8bLinear * 2));
  CHECK(a.stages[0].breakdown.optimizer == Approx(b.stages[0].breakdown.optimizer));
  // Rules: FP8 through Transformer Engine and the distributed optimizer
  // (megatron/training/arguments.py validate_args).
  Plan bf16;
  bf16.zero = 1;
  bf16.fp8_param_gather = true;
  CHECK_FALSE(resolve_plan(m, c, 8, bf16).feasible);
  Plan no_zero = fp8_plan("delayed");
  no_zero.fp8_param_gather = true;
  const Layout L = resolve_plan(m, c, 8, no_zero);
  REQUIRE_FALSE(L.feasible);
  CHECK(L.reasons.front() == "fp8 param gather needs the distributed optimizer or FSDP (zero >= 1)");
}

TEST_CASE("FP8: the plan rules and default recipes", "[sim][fp8]") {
  const ModelSpec m = load_model("llama3-8b");
  SECTION("A100 has no FP8 tensor cores") {
    const ClusterSpec a100 = load_cluster("dgx-a100");
    const Layout l = resolve_plan(m, a100, 8, fp8_plan());
    REQUIRE_FALSE(l.feasible);
    CHECK(l.reasons.front() == "fp8 needs FP8 tensor cores (Hopper, Ada or Blackwell); A100-SXM4-80GB has none");
  }
  SECTION("mxfp8 needs Blackwell (Transformer Engine: compute capability 10.0)") {
    const ClusterSpec h100 = load_cluster("dgx-h100");
    CHECK_FALSE(resolve_plan(m, h100, 8, fp8_plan("mxfp8")).feasible);
    CHECK(resolve_plan(m, load_cluster("dgx-b200"), 8, fp8_plan("mxfp8")).feasible);
  }
  SECTION("defaults: delayed on Hopper, mxfp8 on Blackwell, tensorwise with ZeRO-3") {
    CHECK(resolve_plan(m, load_cluster("dgx-h100"), 8, fp8_plan()).plan.fp8_recipe == Fp8Recipe::kDelayed);
    CHECK(resolve_plan(m, load_cluster("dgx-b200"), 8, fp8_plan()).plan.fp8_recipe == Fp8Recipe::kMxfp8);
    // Blackwell Ultra (compute capability 10.3) has the same MX tensor cores.
    CHECK(resolve_plan(m, load_cluster("dgx-b300"), 8, fp8_plan()).plan.fp8_recipe == Fp8Recipe::kMxfp8);
    CHECK(resolve_plan(m, load_cluster("gb300-nvl72"), 8, fp8_plan()).plan.fp8_recipe == Fp8Recipe::kMxfp8);
    Plan z3 = fp8_plan();
    z3.zero = 3;
    CHECK(resolve_plan(m, load_cluster("dgx-h100"), 8, z3).plan.fp8_recipe == Fp8Recipe::kTensorwise);
  }
  SECTION("a bf16 plan has no FP8, and the names round-trip") {
    Plan p;
    CHECK(set_precision("bf16", &p));
    CHECK(p.fp8_recipe == Fp8Recipe::kNone);
    CHECK(precision_name(fp8_plan()) == "fp8");
    CHECK_FALSE(set_precision("fp4", &p));
    CHECK_FALSE(set_fp8_recipe("nvfp4", &p));
  }
}

}  // namespace trainplan
