// Tests of multi-token prediction (Plan::mtp_layers; DeepSeek-V3 report Sec.
// 2.2, Megatron-Core multi_token_prediction.py) against DeepSeek-V3's
// published MTP module size, a hand derivation of the last stage's memory
// and the time of a decoder layer plus a second logits-and-loss.
#include <string>

#include <catch2/catch.hpp>

#include "simulator/cost/layer_cost.h"
#include "simulator/cost/step_flops.h"
#include "simulator/memory/memory_model.h"
#include "simulator/report/step_report.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"
#include "tests/simulator/fixtures.h"
#include "simulator/taskgraph/step_costs.h"

namespace trainplan {
namespace {

TEST_CASE("MTP: DeepSeek-V3's module is 14B parameters", "[sim][cost][mtp]") {
  // DeepSeek-V3 model card: "685B, which includes 671B of the Main Model
  // weights and 14B of the Multi-Token Prediction (MTP) Module weights".
  // The checkpoint's MTP module keeps its own copies of the embedding and
  // the output head (trainplan shares them, as Megatron-Core and the report
  // do), so its 14B (rounded) is trainplan's MTP block (eh_proj, norms, one
  // MoE layer with all 256 experts) plus one embedding and one output layer.
  // The card's 685B and 671B are whole billions, so the module is 14 +- 1B.
  const ModelSpec m = load_model("deepseek-v3");
  LayerShape s;
  s.seq = 4096;
  s.mtp_layers = 1;
  REQUIRE(mtp_layer_is_moe(m));  // DeepSeek-V3's last layer is an MoE layer
  const double block = output_block_cost(m, s).params - output_cost(m, s).params;
  const double checkpoint = block + embedding_params(m) + output_params(m);
  CHECK(checkpoint >= 13e9);
  CHECK(checkpoint <= 15e9);
  // Without its attention, experts and norms (a decoder layer's), the MTP
  // block adds eh_proj (2 x 7168^2) and three norms (3 x 7168).
  CHECK(block - layer_params(m, true) == Approx(2.0 * 7168 * 7168 + 3 * 7168).epsilon(1e-12));
  // Its routed experts: 256 x 3 x 7168 x 2048 (SwiGLU gate, up, down).
  CHECK(output_block_cost(m, s).expert_params == Approx(256.0 * 3 * 7168 * 2048).epsilon(1e-12));
}

TEST_CASE("MTP: the loss's stage holds the block, experts sharded like the layers'", "[sim][cost][mtp]") {
  const ModelSpec m = load_model("deepseek-v3");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan plan;
  plan.pp = 16;
  plan.ep = 64;
  plan.etp = 1;
  plan.zero = 1;
  plan.mbs = 1;
  plan.gbs = 8192;
  plan.framework = Framework::kMegatronCore;
  const Layout L0 = resolve_plan(m, c, 1024, plan);
  plan.mtp_layers = 1;
  const Layout L1 = resolve_plan(m, c, 1024, plan);
  REQUIRE(L0.feasible);
  REQUIRE(L1.feasible);
  REQUIRE(L1.plan.dp == 64);
  REQUIRE(L1.expert_dp == 1);
  const MemoryReport a = estimate_memory(m, c, L0), b = estimate_memory(m, c, L1);
  // Every stage but the last is unchanged.
  for (size_t i = 0; i + 1 < a.stages.size(); ++i) CHECK(b.stages[i].breakdown.total() == a.stages[i].breakdown.total());
  // The last stage: tp 1, so the block's dense part (eh_proj 2h^2, the
  // norms, the MoE layer's attention, router and shared expert) and its 4
  // local experts (256 / ep 64), each 3 x 7168 x 2048.
  const double h = 7168, expert = 3 * h * 2048;
  const StageMemory& x = a.stages.back();
  const StageMemory& y = b.stages.back();
  const double experts = 4 * expert;
  CHECK(y.expert_params - x.expert_params == Approx(experts).epsilon(1e-9));
  const double dense = (y.params - x.params) - experts;
  CHECK(dense > 2 * h * h);
  // Megatron's distributed optimizer (bf16 weights, fp32 gradients, 12 B of
  // fp32 master and Adam moments): weights 2 B and gradients 4 B per local
  // parameter; the optimizer's 12 B over the shard degree (dp 64) for dense
  // parameters and over the expert data-parallel group (1) for experts.
  CHECK(y.breakdown.weights - x.breakdown.weights == Approx(2 * (dense + experts)).epsilon(1e-9));
  CHECK(y.breakdown.optimizer - x.breakdown.optimizer == Approx(12 * dense / 64 + 12 * experts / 1).epsilon(1e-9));
  // More activations too: the MTP layer's and a second logits.
  CHECK(y.breakdown.activations > x.breakdown.activations);
}

TEST_CASE("MTP: a depth costs a decoder layer and a second logits and loss", "[sim][cost][mtp]") {
  // One GPU, no pipeline, no data parallelism: the step is m micro-batches
  // of forward and backward and the optimizer step, so an MTP depth adds m
  // x (one decoder layer + the output block again + eh_proj and three norms).
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan plan;
  plan.mbs = 1;
  plan.gbs = 4;
  plan.seq = 4096;
  const Layout L0 = resolve_plan(m, c, 1, plan);
  plan.mtp_layers = 1;
  const Layout L1 = resolve_plan(m, c, 1, plan);
  REQUIRE(L0.feasible);
  REQUIRE(L1.feasible);
  const StepCosts sc = step_costs(m, c, L0.plan);
  const double layer = static_cast<double>(sc.layer_times.forward_ps + sc.layer_times.backward_ps) * 1e-12;
  const double head = static_cast<double>(sc.output_forward_ps + sc.output_backward_ps) * 1e-12;
  const double d = simulate_step(m, c, L1, SimulateOptions{}).step_time_s - simulate_step(m, c, L0, SimulateOptions{}).step_time_s;
  // eh_proj is 2h x h on every token, a sixth of a SwiGLU layer's
  // 4h^2 + 3 x h x 14336 multiply-adds; norms and the optimizer's share of
  // the new parameters add less than that again.
  CHECK(d >= 4 * (layer + head));
  CHECK(d <= 4 * (layer + head) * 1.15);
  // Model FLOPs: Megatron's count adds the layer, eh_proj and the logits.
  CHECK(step_flops(m, L1.plan).model_flops > step_flops(m, L0.plan).model_flops);
}

TEST_CASE("MTP: the plan rules", "[sim][cost][mtp]") {
  const ClusterSpec c = load_cluster("dgx-a100");
  Plan plan;
  plan.mtp_layers = 1;
  // Megatron validate_args: rope or none only.
  CHECK(testing::reasons_mention(resolve_plan(load_model("gpt3-1.3b"), c, 8, plan), "needs rotary position embeddings"));
  const ModelSpec llama = load_model("llama3-8b");
  CHECK(resolve_plan(llama, c, 8, plan).feasible);
  Plan q = plan;
  q.framework = Framework::kTorchtitan;
  CHECK(testing::reasons_mention(resolve_plan(llama, c, 8, q), "use --framework megatron-core"));
  q = plan;
  q.mtp_layers = kMaxMtpLayers + 1;
  CHECK(testing::reasons_mention(resolve_plan(llama, c, 8, q), "out of range"));
}


TEST_CASE("MTP: an MoE depth's all-to-alls count as expert communication", "[sim][cost][mtp]") {
  // qwen3-30b-a3b on 8 GPUs, ep 8, one MTP depth (an MoE layer like the
  // last): the output block carries the depth's dispatch and combine, one
  // decoder MoE layer's worth, and the step's expert communication grows by
  // that much per micro-batch on the one stage (m = 4 micro-batches).
  const ModelSpec m = load_model("qwen3-30b-a3b");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan plan;
  plan.mbs = 1;
  plan.gbs = 32;
  plan.seq = 4096;
  plan.ep = 8;
  plan.zero = 1;
  plan.framework = Framework::kMegatronCore;
  const Layout L0 = resolve_plan(m, c, 8, plan);
  plan.mtp_layers = 1;
  const Layout L1 = resolve_plan(m, c, 8, plan);
  REQUIRE(L0.feasible);
  REQUIRE(L1.feasible);
  const StepCosts sc0 = step_costs(m, c, L0.plan);
  const StepCosts sc1 = step_costs(m, c, L1.plan);
  CHECK(sc0.output_ep_forward_ps == 0);
  CHECK(sc1.output_ep_forward_ps == sc1.moe_layer_times.ep_comm_forward_ps);
  CHECK(sc1.output_ep_backward_ps == sc1.moe_layer_times.ep_comm_backward_ps);
  const double per_mb = static_cast<double>(sc1.output_ep_forward_ps + sc1.output_ep_backward_ps) * 1e-12;
  const double ep0 = simulate_step(m, c, L0, SimulateOptions{}).breakdown.ep_comm;
  const double ep1 = simulate_step(m, c, L1, SimulateOptions{}).breakdown.ep_comm;
  // (Within 0.5%: the engine stretches a pass that runs beside the
  // gradient reduce-scatter by the SMs NCCL takes, its ep share with it.)
  CHECK(ep1 - ep0 == Approx(4 * per_mb).epsilon(0.005));
}

}  // namespace
}  // namespace trainplan
