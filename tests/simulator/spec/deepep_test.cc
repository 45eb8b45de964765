// DeepEP as the flex dispatcher runs it (simulator/spec/deepep.h): its tuned
// group sizes and the buffers it allocates, against DeepEP's own formulas
// worked by hand, and how the plan rules and the memory model use them.
#include "simulator/spec/deepep.h"

#include <catch2/catch.hpp>

#include "simulator/memory/memory_model.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"
#include "tests/simulator/fixtures.h"

namespace trainplan {

TEST_CASE("DeepEP: tuned group sizes", "[spec][deepep]") {
  // deep_ep/buffers/legacy.py get_dispatch_config's keys; anything else
  // asserts "Unsupported number of EP ranks".
  for (int64_t n : {2, 4, 8, 16, 24, 32, 48, 64, 96, 128, 144, 160}) CHECK(deepep_supports_group(n));
  for (int64_t n : {1, 3, 12, 40, 256, 512}) CHECK_FALSE(deepep_supports_group(n));
}

TEST_CASE("DeepEP: buffer sizes follow DeepEP's size hints", "[spec][deepep]") {
  // DeepSeek-V3 (hidden 7168, bf16: hidden_bytes = 14336), Buffer.num_sms
  // 20: 10 channels.  config.hpp, by hand:
  //
  // EP 8 (one node, no RDMA buffer): dispatch and combine both receive in
  // chunks of 256 tokens, so 10 x 8 x 256 = 20480 token slots:
  //   counters 10*8*(2*1+3)*4 = 1600; tokens 20480*14336 = 293,601,280;
  //   source meta 20480*8 = 163,840; top-k indices 20480*128*8 = 20,971,520;
  //   weights and scales 2 x 20480*128*4 = 20,971,520
  //   total 335,709,760 -> 335,709,824 after rounding up to 128.
  const DeepEpBuffers one_node = deepep_buffer_bytes(7168, 8);
  CHECK(one_node.nvl_bytes == 335709824.0);
  CHECK(one_node.rdma_bytes == 0.0);
  // EP 64 (8 nodes of 8): NVLink chunks of 288 tokens, 10*8*288 = 23040
  // slots: 10*8*(2*8+3)*4 = 6080; 23040*(14336 + 8 + 128*8 + 128*4*2) =
  // 377,671,680; total 377,677,760 -> 377,677,824 after rounding up to 128.
  // RDMA: receive chunks of 128 tokens (a multiple of the 8-token send
  // chunk already), 10*8*128 = 10240 slots, each buffer doubled:
  //   10*8*(8*2+2)*2*4 = 11,520; 10240*2*(14336 + 8 + 128*8 + 128*4*2 + 16)
  //   = 336,035,840; total 336,047,360 (a multiple of 128 already).
  const DeepEpBuffers eight_nodes = deepep_buffer_bytes(7168, 64);
  CHECK(eight_nodes.nvl_bytes == 377677824.0);
  CHECK(eight_nodes.rdma_bytes == 336047360.0);
  // EP 16: the dispatch config's RDMA receive chunk (128) is rounded up to a
  // multiple of its send chunk (20): 140; the combine config's to 12: 132;
  // the larger is allocated: 10*2*140 = 2800 slots.
  //   10*2*18*2*4 = 2,880; 2800*2*(14336 + 8 + 1024 + 1024 + 16) = 91,884,800;
  //   total 91,887,680 -> 91,887,744.
  CHECK(deepep_buffer_bytes(7168, 16).rdma_bytes == 91887744.0);
}

TEST_CASE("DeepEP: plans use only its tuned groups, and its buffers count in memory", "[spec][deepep]") {
  const ModelSpec m = load_model("deepseek-v3");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan p;
  p.pp = 8;
  p.gbs = 1024;
  p.zero = 1;
  p.framework = Framework::kMegatronCore;
  p.moe_dispatcher = MoeDispatcher::kDeepEp;
  // 1024 GPUs: pp 8 leaves dp 128, so ep 128 and ep 256 both divide it; DeepEP
  // has a config for 128 ranks and none for 256.
  p.ep = 128;
  CHECK(resolve_plan(m, c, 1024, p).feasible);
  p.ep = 256;
  const Layout bad = resolve_plan(m, c, 1024, p);
  CHECK_FALSE(bad.feasible);
  CHECK(testing::reasons_mention(bad, "Unsupported number of EP ranks"));
  // The memory of an EP 64 plan: DeepEP's two buffers on top of the same
  // plan with the all-to-all dispatcher, on every stage with MoE layers.
  p.ep = 64;
  const Layout flex = resolve_plan(m, c, 512, p);
  Plan q = p;
  q.moe_dispatcher = MoeDispatcher::kAllToAll;
  const Layout a2a = resolve_plan(m, c, 512, q);
  REQUIRE(flex.feasible);
  REQUIRE(a2a.feasible);
  const MemoryReport mf = estimate_memory(m, c, flex), ma = estimate_memory(m, c, a2a);
  REQUIRE(mf.stages.size() == ma.stages.size());
  const double buffers = 377677824.0 + 336047360.0;
  for (size_t s = 0; s < mf.stages.size(); ++s) {
    CHECK(mf.stages[s].breakdown.dispatcher == buffers);
    CHECK(ma.stages[s].breakdown.dispatcher == 0);
  }
}

}  // namespace trainplan
