// Host-bound layers (LayerTimes::host_*; OpCost::host_calls x ClusterSpec
// host.op_overhead): the closed form of a layer's host time from its ops,
// max(GPU, host) per pass, and the published B200 / GB200 pair it explains.
#include <algorithm>

#include <catch2/catch.hpp>

#include "simulator/cost/layer_cost.h"
#include "simulator/report/step_report.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"
#include "simulator/taskgraph/step_costs.h"
#include "tests/simulator/fixtures.h"

namespace trainplan {
namespace {

using Catch::Matchers::WithinRel;

TEST_CASE("HostBound: a layer's host time is its ops' calls times the CPU's op time, forward and backward",
          "[sim][taskgraph][host]") {
  const ModelSpec model = load_model("qwen3-30b-a3b");
  const ClusterSpec c = load_cluster("gb200-nvl72");
  REQUIRE(c.host.op_overhead.us() == Approx(37.08));  // TE#2053, one torch.nn.Linear forward on GB200's Grace
  for (Recompute r : {Recompute::kNone, Recompute::kFull}) {
    Plan q = testing::qwen3_30b_8gpu_fp8_layout();
    q.recompute = r;
    const Layout L = resolve_plan(model, c, 8, q);
    REQUIRE(L.feasible);
    const StepCosts sc = step_costs(model, c, L.plan);
    const double calls = testing::layer_host_calls(sc.moe_layer);
    // Megatron-Core runs TE modules: a linear layer is 2.71 calls' worth
    // (TE#2053: TE Linear 99.66 vs torch 37.08 us on GB200, 90.53 vs 33.17
    // on GH200), its router 72 kernels before --moe-router-fusion; so the
    // MoE layer issues far more calls than it has ops.
    CHECK(calls > static_cast<double>(sc.moe_layer.ops.size()) + 70);
    const double op_s = c.host.op_overhead.s();
    CHECK_THAT(static_cast<double>(sc.moe_layer_times.host_forward_ps), WithinRel(calls * op_s * 1e12, 1e-9));
    // Backward: one autograd call per forward op, and full recompute issues
    // the forward's calls again.
    const double backward_calls = r == Recompute::kFull ? 2 * calls : calls;
    CHECK_THAT(static_cast<double>(sc.moe_layer_times.host_backward_ps),
               WithinRel(backward_calls * op_s * 1e12, 1e-9));
    // A pass takes max(GPU, host); the excess is reported.
    CHECK(sc.moe_layer_times.forward_ps >= sc.moe_layer_times.host_forward_ps);
    CHECK(sc.moe_layer_times.backward_ps >= sc.moe_layer_times.host_backward_ps);
  }
}

TEST_CASE("HostBound: without a host figure nothing changes; with one, only what the host bounds",
          "[sim][taskgraph][host]") {
  const ModelSpec model = load_model("qwen3-30b-a3b");
  ClusterSpec none = load_cluster("gb200-nvl72");
  none.host.op_overhead = Duration();
  const ClusterSpec grace = load_cluster("gb200-nvl72");
  const Layout L = resolve_plan(model, grace, 8, testing::qwen3_30b_8gpu_fp8_layout());
  REQUIRE(L.feasible);
  const StepCosts gpu = step_costs(model, none, L.plan);
  const StepCosts host = step_costs(model, grace, L.plan);
  CHECK(gpu.moe_layer_times.host_forward_ps == 0);
  CHECK(gpu.moe_layer_times.host_bound_ps == 0);
  // max(GPU, host) per pass, the excess its sum.
  const LayerTimes& g = gpu.moe_layer_times;
  const LayerTimes& h = host.moe_layer_times;
  CHECK(h.forward_ps == std::max(g.forward_ps, h.host_forward_ps));
  CHECK(h.backward_ps == std::max(g.backward_ps, h.host_backward_ps));
  CHECK(h.host_bound_ps == h.forward_ps + h.backward_ps - g.forward_ps - g.backward_ps);
  // This layer, on Grace, is host-bound: more than 10 ms of calls per
  // micro-batch against about 10 ms on the GPU.
  CHECK(h.host_bound_ps > 0);
}

TEST_CASE("HostBound: the same Qwen3-30B-A3B layout runs slower on GB200 than on B200, as published",
          "[sim][taskgraph][host]") {
  // Oracle: Megatron-Bridge's tables put this layout at 547 model TFLOP/s
  // per GPU on GB200 (25.11) and 619 on B200 (26.04.01), although GB200's
  // GPU is the faster one: a B200 node's x86 host issues an op call in
  // about 13.5 us, GB200's Grace in about 37 us (TE#2053).  Without the host
  // model GB200 comes out ahead.
  const ModelSpec model = load_model("qwen3-30b-a3b");
  const ClusterSpec b200 = load_cluster("dgx-b200");
  const ClusterSpec gb200 = load_cluster("gb200-nvl72");
  ClusterSpec gb200_no_host = gb200;
  gb200_no_host.host.op_overhead = Duration();
  auto step_s = [&](const ClusterSpec& c) {
    const Layout L = resolve_plan(model, c, 8, testing::qwen3_30b_8gpu_fp8_layout());
    REQUIRE(L.feasible);
    return simulate_step(model, c, L, SimulateOptions{}).step_time_s;
  };
  const double on_b200 = step_s(b200);
  CHECK(step_s(gb200_no_host) < on_b200);
  CHECK(step_s(gb200) > on_b200);
  // The x86 host does not bound this layer on B200.
  const Layout Lb = resolve_plan(model, b200, 8, testing::qwen3_30b_8gpu_fp8_layout());
  CHECK(step_costs(model, b200, Lb.plan).moe_layer_times.host_bound_ps == 0);
}

TEST_CASE("HostBound: torchtitan's eager ops issue one call per kernel of their decomposition",
          "[sim][taskgraph][host]") {
  // Eager PyTorch (torchtitan without torch.compile, layer_cost.cc): RMSNorm
  // as 6 kernels (x.float, pow, mean, x * rsqrt, type_as, * weight), rotary 3
  // each for Q and K, repeat_kv a copy each for K and V, SwiGLU 2; every
  // other op one call.  Llama 3 8B (GQA: repeat_kv present): 17 calls more
  // than it has ops.  Megatron-Core's fused kernels: one call each.
  const ModelSpec model = load_model("llama3-8b");
  Plan p;
  p.framework = Framework::kTorchtitan;
  p.seq = 8192;
  p.attention = Attention::kFlash;
  const LayerCost eager = transformer_layer_cost(model, layer_shape(p));
  CHECK(testing::layer_host_calls(eager) == Approx(static_cast<double>(eager.ops.size()) + 2 * 5 + 5 + 1 + 1));
  p.framework = Framework::kPytorch;
  const LayerCost also = transformer_layer_cost(model, layer_shape(p));
  CHECK(testing::layer_host_calls(also) == Approx(static_cast<double>(also.ops.size()) + 17));
}

TEST_CASE("HostBound: a dense Megatron-Core layer on H100's x86 host stays GPU-bound", "[sim][taskgraph][host]") {
  // The dense rows (mcore24, NeMo) run 4-8K-token micro-batches of layers
  // whose GEMMs take milliseconds; some tens of calls at 13.48 us each do
  // not bound them.
  const ModelSpec model = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan p;
  p.framework = Framework::kMegatronCore;
  p.mbs = 1;
  p.gbs = 8;
  p.seq = 8192;
  p.attention = Attention::kFlash;
  const Layout L = resolve_plan(model, c, 8, p);
  REQUIRE(L.feasible);
  const StepCosts sc = step_costs(model, c, L.plan);
  CHECK(sc.layer_times.host_forward_ps > 0);
  CHECK(sc.layer_times.host_bound_ps == 0);
  CHECK(sc.layer_times.host_forward_ps * 5 < sc.layer_times.forward_ps);
}

}  // namespace
}  // namespace trainplan
