// Per-layer CUDA graphs (Plan::cuda_graph; Megatron-Core --cuda-graph-impl
// transformer_engine): the captured ops' host calls against the closed form,
// the graphs' static buffers against Megatron's sample arguments, the
// effect Megatron-Bridge publishes, and TransformerConfig's rules.
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "simulator/cost/layer_cost.h"
#include "simulator/memory/memory_model.h"
#include "simulator/report/step_report.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"
#include "simulator/taskgraph/step_costs.h"
#include "tests/simulator/fixtures.h"

namespace trainplan {
namespace {

using Catch::Matchers::WithinRel;

// The host calls of the ops from the one named `first` on (eager costing).
double calls_from(const LayerCost& c, const std::string& first) {
  double n = 0;
  bool on = false;
  for (const OpCost& op : c.ops) {
    on = on || op.name == first;
    if (on) n += op.host_calls;
  }
  return n;
}

TEST_CASE("CudaGraph: a graphed layer's captured ops cost the host one replay per pass", "[sim][taskgraph][host]") {
  // Oracle: a whole-layer graph is one replay (TE make_graphed_callables:
  // one graph per layer and micro-batch, transformer_layer.py
  // _te_cuda_graph_capture); an attention graph replaces the calls of the
  // ops before the pre-MLP norm by one and leaves the MLP's eager.
  const ModelSpec model = load_model("llama3-8b");
  Plan p;
  p.framework = Framework::kMegatronCore;
  p.seq = 8192;
  p.attention = Attention::kFlash;
  const LayerCost eager = transformer_layer_cost(model, layer_shape(p));
  p.cuda_graph = kCgLayer;
  CHECK(testing::layer_host_calls(transformer_layer_cost(model, layer_shape(p))) == Approx(1));
  p.cuda_graph = kCgAttn;
  CHECK(testing::layer_host_calls(transformer_layer_cost(model, layer_shape(p))) == Approx(calls_from(eager, "ln2") + 1));
  p.cuda_graph = kCgAttn | kCgMlp;
  CHECK(testing::layer_host_calls(transformer_layer_cost(model, layer_shape(p))) == Approx(1));

  // An MoE layer with attn, moe_router, moe_preprocess captured keeps the
  // dispatch, experts and combine eager (from the permute on); the router's
  // 72 kernels leave the host.
  const ModelSpec moe = load_model("qwen3-30b-a3b");
  Plan q = testing::qwen3_30b_8gpu_fp8_layout();
  const LayerCost moe_eager = transformer_layer_cost(moe, layer_shape(q), true);
  q.cuda_graph = kCgAttn | kCgMoeRouter | kCgMoePreprocess;
  const LayerCost moe_graphed = transformer_layer_cost(moe, layer_shape(q), true);
  CHECK(testing::layer_host_calls(moe_graphed) == Approx(calls_from(moe_eager, "permute") + 1));
  CHECK(testing::layer_host_calls(moe_eager) - testing::layer_host_calls(moe_graphed) > 72);
}

TEST_CASE("CudaGraph: the moe_router graph holds the shared experts unless they run beside the all-to-alls",
          "[sim][taskgraph][host]") {
  // transformer_layer.py _get_submodules_under_cudagraphs: under moe_router
  // the graph takes the pre-MLP norm, the router and the shared experts,
  // but not the shared experts with --moe-shared-expert-overlap (they run
  // on their own stream inside the dispatcher).  DeepSeek-V3's layer, whose
  // shared expert is three ops: FC1 and FC2 Transformer Engine modules of
  // (99.66/37.08 + 90.53/33.17)/2 host calls each (TE#2053), the SwiGLU one.
  const ModelSpec m = load_model("deepseek-v3");
  Plan p;
  p.framework = Framework::kMegatronCore;
  p.ep = 8;
  p.etp = 1;
  p.seq = 4096;
  auto shared_calls = [&](const Plan& q) {
    double n = 0;
    for (const OpCost& op : transformer_layer_cost(m, layer_shape(q), true).ops)
      if (op.name.rfind("shared_", 0) == 0) n += op.host_calls;
    return n;
  };
  const double eager = shared_calls(p);
  CHECK(eager == Approx(99.66 / 37.08 + 90.53 / 33.17 + 1));
  p.cuda_graph = kCgMoeRouter;
  CHECK(shared_calls(p) == 0);
  p.moe_shared_expert_overlap = true;
  CHECK(shared_calls(p) == Approx(eager));
}

TEST_CASE("CudaGraph: each graphed layer keeps its static inputs per micro-batch in flight", "[sim][memory]") {
  // Oracle: Megatron's get_layer_static_inputs (transformer_layer.py) gives
  // each graph the hidden states, s x b x h bf16, and with attention
  // captured a bool mask of b x s x s; cuda_graphs.py _get_sample_arguments
  // reuses a micro-batch's buffers once its backward is done.  With pp 1 one
  // micro-batch is in flight, so the activations grow by layers x (2sbh +
  // bs^2) (and the allocator's fragmentation allowance with them).
  const ModelSpec model = load_model("qwen3-30b-a3b");
  const ClusterSpec c = load_cluster("gb200-nvl72");
  Plan p = testing::qwen3_30b_8gpu_fp8_layout();
  const Layout eager = resolve_plan(model, c, 8, p);
  p.cuda_graph = kCgAttn | kCgMoeRouter | kCgMoePreprocess;
  const Layout graphed = resolve_plan(model, c, 8, p);
  REQUIRE(eager.feasible);
  REQUIRE(graphed.feasible);
  const double b = 4, s = 4096, h = 2048;
  const double per_layer = 2 * s * b * h + b * s * s;
  const MemoryReport with = estimate_memory(model, c, graphed);
  const MemoryReport without = estimate_memory(model, c, eager);
  const double grown = with.stages[0].breakdown.activations - without.stages[0].breakdown.activations;
  CHECK(with.peak_bytes - without.peak_bytes > grown);
  CHECK_THAT(grown, WithinRel(static_cast<double>(model.layers) * per_layer, 1e-9));
}

TEST_CASE("CudaGraph: graphs speed up a launch-bound MoE step as Megatron-Bridge measures, and not a GPU-bound one",
          "[sim][taskgraph][host]") {
  // Oracle: Megatron-Bridge docs/training/cuda-graphs.md (067f987df0):
  // launch-bound mid-sized MoE pretraining with attn + moe_router +
  // moe_preprocess graphs runs "low-teens to low-20s percent faster step
  // time"; Qwen3-30B-A3B on H100 in BF16 with the all-to-all dispatcher
  // replayed at 42.00 s against 41.36 s eager (neutral).  trainplan finds
  // GB200's Grace host bounding this layout (host_bound_test.cc) and H100's
  // x86 host not.
  const ModelSpec model = load_model("qwen3-30b-a3b");
  auto step_s = [&](const ClusterSpec& c, Plan p, uint8_t graphs) {
    p.cuda_graph = graphs;
    const Layout L = resolve_plan(model, c, 16, p);
    REQUIRE(L.feasible);
    return simulate_step(model, c, L, SimulateOptions{}).step_time_s;
  };
  const uint8_t scope = kCgAttn | kCgMoeRouter | kCgMoePreprocess;
  const ClusterSpec gb200 = load_cluster("gb200-nvl72");
  Plan p = testing::qwen3_30b_8gpu_fp8_layout();
  p.gbs = 512;
  const double launch_bound = step_s(gb200, p, 0) / step_s(gb200, p, scope) - 1;
  CHECK(launch_bound > 0.10);
  CHECK(launch_bound < 0.25);
  // Megatron-Bridge's H100 BF16 recipe: 16 GPUs, pp 2, vp 12, ep 8.
  const ClusterSpec h100 = load_cluster("dgx-h100");
  Plan q;
  q.framework = Framework::kMegatronCore;
  q.pp = 2;
  q.vp = 12;
  q.ep = 8;
  q.etp = 1;
  q.mbs = 1;
  q.gbs = 512;
  q.seq = 4096;
  q.zero = 1;
  q.attention = Attention::kFlash;
  CHECK_THAT(step_s(h100, q, scope), WithinRel(step_s(h100, q, 0), 0.02));
}

TEST_CASE("CudaGraph: TransformerConfig's rules", "[sim][plan]") {
  // Oracle: megatron/core/transformer/transformer_config.py __post_init__
  // (d98e8a64dd), the transformer_engine implementation's checks.
  const ModelSpec dense = load_model("llama3-8b");
  const ModelSpec moe = load_model("qwen3-30b-a3b");
  auto why = [](const ModelSpec& m, uint8_t g, Plan p = Plan()) {
    p.framework = Framework::kMegatronCore;
    p.cuda_graph = g;
    return cuda_graph_conflicts(m, p);
  };
  CHECK(why(dense, kCgAttn | kCgMlp).empty());
  CHECK(why(dense, kCgLayer).empty());
  CHECK(why(moe, kCgAttn | kCgMoeRouter | kCgMoePreprocess).empty());
  CHECK(why(dense, kCgMoeRouter).size() == 1);                  // moe graphs need an MoE model
  CHECK(why(moe, kCgMoePreprocess).size() == 1);                // moe_preprocess only with moe_router
  CHECK(why(moe, kCgMoe | kCgMoeRouter).size() == 2);           // not both; moe needs drop-padding
  CHECK(why(moe, kCgMlp).size() == 1);                          // every Qwen3 layer is MoE
  CHECK(why(moe, kCgLayer).size() == 1);                        // a dropless layer's shapes are dynamic
  CHECK(why(dense, kCgLayer | kCgAttn).size() == 1);            // the whole layer takes no other module
  Plan full;
  full.recompute = Recompute::kFull;
  CHECK(why(dense, kCgAttn, full).size() == 1);  // full recompute only with the full-iteration graph
  Plan moe_rc;
  moe_rc.recompute = Recompute::kSelective;
  moe_rc.recompute_modules = kRcMoe;
  CHECK(why(moe, kCgMoeRouter, moe_rc).size() == 1);  // moe recompute with the moe_router graph
  Plan ds;
  ds.cuda_graph = kCgAttn;
  ds.framework = Framework::kDeepSpeed;
  CHECK(cuda_graph_conflicts(dense, ds).size() == 1);
}

}  // namespace
}  // namespace trainplan
