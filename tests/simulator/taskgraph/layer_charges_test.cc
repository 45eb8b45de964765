// The per-op view of a layer (layer_charges, `simulate --ops`): the ops
// carry the layer's FLOPs (closed form), no op runs faster than the GPU's
// datasheet peaks, the ops' times add up to what the step charges the
// layer, and the layer kinds are the model's.
#include <catch2/catch.hpp>

#include "simulator/cost/layer_cost.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"
#include "simulator/taskgraph/step_costs.h"

namespace trainplan {
namespace {

using Catch::Matchers::WithinRel;

Plan llama_plan(int tp, Recompute r) {
  Plan p;
  p.tp = tp;
  p.sp = tp > 1;
  p.mbs = 1;
  p.seq = 4096;
  p.gbs = 8;
  p.recompute = r;
  p.framework = Framework::kMegatronCore;
  return p;
}

TEST_CASE("LayerCharges: a Llama 3 8B layer's ops carry the layer's FLOPs", "[sim][taskgraph][ops]") {
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  const Layout L = resolve_plan(m, c, 8, llama_plan(1, Recompute::kNone));
  REQUIRE(L.feasible);
  const std::vector<LayerCharges> kinds = layer_charges(m, c, L.plan);
  // A dense layer, the embedding, the output layer with the loss.
  REQUIRE(kinds.size() == 3);
  CHECK(kinds[0].kind == ChargedLayer::kDense);
  CHECK(kinds[0].layers == 32);
  CHECK((kinds[1].kind == ChargedLayer::kEmbedding && kinds[2].kind == ChargedLayer::kOutput));
  // The output layer: the logits GEMM, 2 x T x h x V FLOPs (vocab 128256).
  double logits = 0;
  for (const OpCharge& ch : kinds[2].ops) logits += ch.op.kind == OpKind::kGemm ? ch.op.flops : 0;
  CHECK_THAT(logits, WithinRel(2.0 * 4096 * 4096 * 128256, 1e-9));
  // Closed form (Llama 3 8B: h 4096, 32 heads of 128, 8 KV heads, SwiGLU of
  // 14336; T = 4096 tokens): the linear layers 2T x (h(h + 2*1024) + h*h +
  // 3*h*14336) FLOPs forward; the attention's two products 2 x 2*T*s*h
  // (Megatron's count of the whole s x s product).
  const double T = 4096, s = 4096, h = 4096, kv = 1024, f = 14336;
  const double linear = 2 * T * (h * (h + 2 * kv) + h * h + 3 * h * f);
  double gemm = 0, attention = 0;
  for (const OpCharge& ch : kinds[0].ops) {
    if (ch.op.kind == OpKind::kGemm) gemm += ch.op.flops;
    if (ch.op.kind == OpKind::kAttention) attention += ch.op.flops;
  }
  CHECK_THAT(gemm, WithinRel(linear, 1e-9));
  CHECK_THAT(attention, WithinRel(4 * T * s * h, 1e-9));
}

TEST_CASE("LayerCharges: no op runs faster than the H100's datasheet peaks", "[sim][taskgraph][ops]") {
  // Oracle: the H100 SXM datasheet, 989.4 dense bf16 TFLOP/s and 3.35 TB/s
  // of HBM3.  Whatever the efficiencies, a GEMM or the attention takes at
  // least its FLOPs at that peak, a memory-bound op its bytes at that rate.
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  for (int tp : {1, 2, 8}) {
    const Layout L = resolve_plan(m, c, 8, llama_plan(tp, Recompute::kNone));
    REQUIRE(L.feasible);
    const std::vector<LayerCharges> kinds = layer_charges(m, c, L.plan);
    for (const OpCharge& ch : kinds[0].ops) {
      const double t = static_cast<double>(ch.forward_ps) * 1e-12;
      if (ch.op.kind == OpKind::kElementwise) {
        CHECK(t >= ch.op.bytes / 3.35e12);
      } else {
        CHECK(t >= ch.op.flops / 989.4e12);
        // Backward: the data and weight gradients, twice the forward's FLOPs.
        CHECK(static_cast<double>(ch.backward_ps) * 1e-12 >= 2 * ch.op.flops / 989.4e12);
      }
    }
  }
}

TEST_CASE("LayerCharges: the ops' times are what the step charges the layer", "[sim][taskgraph][ops]") {
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  for (Recompute r : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
    const Layout L = resolve_plan(m, c, 8, llama_plan(2, r));
    REQUIRE(L.feasible);
    const std::vector<LayerCharges> kinds = layer_charges(m, c, L.plan);
    REQUIRE(kinds.size() == 3);
    const LayerCharges& k = kinds[0];
    int64_t fwd = 0, bwd = 0, rerun = 0, comm_f = 0, comm_b = 0;
    for (const OpCharge& ch : k.ops) {
      fwd += ch.forward_ps;
      bwd += ch.backward_ps;
      rerun += ch.recompute_ps;
      comm_f += ch.comm_forward_ps;
      comm_b += ch.comm_backward_ps;
      // tp 2 with sequence parallelism: the gathers and reduce-scatters
      // named after the ops that end in them.
      if (ch.op.name == "out_proj" || ch.op.name == "fc2") CHECK(ch.comm.find("tp reduce_scatter") == 0);
    }
    CHECK(comm_f > 0);
    // A dense layer at 4096 tokens is GPU-bound on a DGX H100's host.
    REQUIRE(k.times.host_bound_ps == 0);
    CHECK(k.times.forward_ps == fwd + comm_f);
    // Full recompute runs the forward and its collectives again; selective
    // the re-run ops only (core attention: no collective after it).
    CHECK(k.times.backward_ps == bwd + comm_b + rerun + (r == Recompute::kFull ? comm_f : 0));
    if (r == Recompute::kNone) CHECK(rerun == 0);
    if (r == Recompute::kFull) CHECK(rerun == fwd);
    if (r == Recompute::kSelective) CHECK((rerun > 0 && rerun < fwd));
    // The same layer as step_costs gives the simulator, and so the
    // embedding and the output layer, whose ops add up to it too.
    const StepCosts sc = step_costs(m, c, L.plan);
    CHECK(k.times.forward_ps == sc.layer_times.forward_ps);
    for (const LayerCharges& end : {kinds[1], kinds[2]}) {
      int64_t f = 0, b = 0;
      for (const OpCharge& ch : end.ops) {
        f += ch.forward_ps + ch.comm_forward_ps;
        b += ch.backward_ps + ch.comm_backward_ps;
      }
      CHECK(end.times.forward_ps == f);
      CHECK(end.times.backward_ps == b);
    }
    CHECK(kinds[2].times.forward_ps == sc.output_forward_ps);
  }
}

TEST_CASE("LayerCharges: the layer kinds are the model's", "[sim][taskgraph][ops]") {
  // DeepSeek-V3: 61 layers, the first 3 dense (first_k_dense_replace 3).
  const ModelSpec m = load_model("deepseek-v3");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan p;
  p.pp = 8;
  p.ep = 8;
  p.etp = 1;
  p.seq = 4096;
  p.gbs = 64;
  p.zero = 1;
  p.precision = Precision::kBf16;
  p.framework = Framework::kMegatronCore;
  const Layout L = resolve_plan(m, c, 64, p);
  REQUIRE(L.feasible);
  const std::vector<LayerCharges> kinds = layer_charges(m, c, L.plan);
  REQUIRE(kinds.size() == 4);
  CHECK((kinds[0].kind == ChargedLayer::kDense && kinds[0].layers == 3));
  CHECK((kinds[1].moe() && kinds[1].layers == 58));
  bool all_to_all = false;
  for (const OpCharge& ch : kinds[1].ops) all_to_all = all_to_all || ch.comm.find("ep all_to_all") == 0;
  CHECK(all_to_all);

  // Megatron's partial recompute: the recomputed layers of each chunk and
  // the rest, each kind twice, the re-run only in the first.
  const ModelSpec llama = load_model("llama3-8b");
  Plan q = llama_plan(1, Recompute::kFull);
  q.pp = 2;
  q.recompute_layers = 4;
  const Layout Q = resolve_plan(llama, c, 8, q);
  REQUIRE(Q.feasible);
  const std::vector<LayerCharges> parts = layer_charges(llama, c, Q.plan);
  REQUIRE(parts.size() == 4);  // two of the layer, then the embedding and the output layer once
  CHECK((parts[2].kind == ChargedLayer::kEmbedding && parts[3].kind == ChargedLayer::kOutput));
  REQUIRE((parts[0].recomputed.has_value() && parts[1].recomputed.has_value()));
  CHECK((*parts[0].recomputed && !*parts[1].recomputed));
  CHECK(parts[0].ops.front().recompute_ps > 0);
  CHECK(parts[1].ops.front().recompute_ps == 0);
}

}  // namespace
}  // namespace trainplan
