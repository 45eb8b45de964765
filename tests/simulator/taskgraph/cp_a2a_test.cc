// Context parallelism as Ulysses all-to-alls (Plan::cp_comm a2a, Megatron-Core
// --cp-comm-type a2a; Transformer Engine AttnFuncWithCPAndQKVOA2A) against
// the ring (p2p): the bytes each rank sends, the exposed exchange in every
// layer pass, the attention kernel's key length, the rules.
#include <catch2/catch.hpp>

#include "simulator/network/collective_model.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"
#include "simulator/taskgraph/step_costs.h"

namespace trainplan {
namespace {

// Llama 3 8B (32 query heads, 8 key/value heads of 128), 8,192 tokens over
// cp 8 on one DGX H100, one micro-batch.
Plan cp8(CpComm comm, Recompute rc = Recompute::kNone) {
  Plan p;
  p.cp = 8;
  p.seq = 8192;
  p.gbs = 1;
  p.cp_comm = comm;
  p.recompute = rc;
  p.framework = Framework::kMegatronCore;
  return p;
}

const OpCost& attention_op(const LayerCost& c) {
  for (const OpCost& op : c.ops) {
    if (op.kind == OpKind::kAttention) return op;
  }
  FAIL("no attention op");
  return c.ops.front();
}

TEST_CASE("Ulysses: each rank sends its tokens' Q, K, V and gets its heads' output back, exposed", "[sim][cpa2a]") {
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  const Layout ring = resolve_plan(m, c, 8, cp8(CpComm::kP2p));
  const Layout ulysses = resolve_plan(m, c, 8, cp8(CpComm::kA2a));
  REQUIRE(ring.feasible);
  REQUIRE(ulysses.feasible);
  const StepCosts r = step_costs(m, c, ring.plan);
  const StepCosts u = step_costs(m, c, ulysses.plan);
  // By hand: 8192 / 8 = 1,024 tokens per rank; Q 32 x 128 = 4,096 wide, K
  // and V 8 x 128 = 1,024 each, 2 B: 1,024 x 6,144 x 2 = 12,582,912 B out
  // before the attention; the output 1,024 x 4,096 x 2 = 8,388,608 B after.
  CHECK(u.layer.cp_a2a_qkv_bytes == Approx(12582912.0));
  CHECK(u.layer.cp_a2a_out_bytes == Approx(8388608.0));
  CHECK(u.layer.cp_comm_bytes == 0);
  // The ring instead all-gathers the whole sequence's K and V: 8,192 x 2,048 x 2 B.
  CHECK(r.layer.cp_comm_bytes == Approx(33554432.0));
  CHECK(r.layer.cp_a2a_qkv_bytes == 0);
  // The same attention work per rank (4 heads over 8,192 keys instead of
  // 32 heads for 1,024 queries), but one kernel over the whole sequence.
  CHECK(attention_op(u.layer).flops == Approx(attention_op(r.layer).flops));
  CHECK(attention_op(u.layer).kv_len == 8192);
  CHECK(attention_op(r.layer).kv_len == 1024);
  // An all-to-all keeps 1/cp of the buffer: each rank sends 7/8 of it
  // (nccl-tests' all-to-all bus bytes).
  const GroupPlacement g = strided_group_placement(8, 1, c);
  const LinkParams lp = link_params(c);
  const CollectiveCost qkv = collective_cost(Collective::kAllToAll, 12582912, g, lp);
  const CollectiveCost out = collective_cost(Collective::kAllToAll, 8388608, g, lp);
  CHECK(qkv.wire_bytes_per_rank == Approx(12582912.0 * 7 / 8));
  // Nothing hides them: forward and backward each carry both, as TP
  // communication, and no link task runs beside the attention.
  const LayerTimes& t = u.layer_times;
  CHECK(t.tp_comm_forward_ps == qkv.time.ps() + out.time.ps());
  CHECK(t.tp_comm_backward_ps == qkv.time.ps() + out.time.ps());
  CHECK(t.cp_forward.count == 0);
  CHECK(t.cp_exposed_forward_ps == 0);
  CHECK(r.layer_times.cp_forward.count > 0);  // the ring's exchange is a link task beside the attention
}

TEST_CASE("Ulysses: recomputing the layer or its core attention runs the all-to-alls again", "[sim][cpa2a]") {
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  const StepCosts none = step_costs(m, c, resolve_plan(m, c, 8, cp8(CpComm::kA2a)).plan);
  const int64_t exchange = none.layer_times.tp_comm_forward_ps;
  REQUIRE(exchange > 0);
  for (Recompute rc : {Recompute::kFull, Recompute::kSelective}) {  // selective: core attention, the default
    const StepCosts s = step_costs(m, c, resolve_plan(m, c, 8, cp8(CpComm::kA2a, rc)).plan);
    CHECK(s.layer_times.tp_comm_backward_ps == 2 * exchange);
  }
}

TEST_CASE("Ulysses: the rules", "[sim][cpa2a]") {
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  auto reasons = [&](const Plan& p, int gpus) {
    std::string s;
    for (const std::string& r : resolve_plan(m, c, gpus, p).reasons) s += r + "\n";
    return s;
  };
  // Transformer Engine: the heads of a TP rank split over cp.  8 key/value
  // heads over tp 2 x cp 8 = 16 ranks do not.
  Plan p = cp8(CpComm::kA2a);
  p.tp = 2;
  CHECK(reasons(p, 16).find("cp comm type a2a splits the attention heads over tp*cp = 16 ranks") !=
        std::string::npos);
  p.tp = 1;
  p.cp = 1;
  CHECK(reasons(p, 8).find("cp comm type a2a needs cp >= 2") != std::string::npos);
  p = cp8(CpComm::kA2a);
  p.framework = Framework::kTorchtitan;
  CHECK(reasons(p, 8).find("runs ring attention") != std::string::npos);
  p.framework = Framework::kGeneric;
  CHECK(reasons(p, 8).empty());
}

}  // namespace
}  // namespace trainplan
