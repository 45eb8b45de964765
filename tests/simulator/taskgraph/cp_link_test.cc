// Tests of the context-parallel K/V exchange as link tasks (issue 9, item
// 3): each pass's exchange is a comm task on the CP group's port that starts
// with the pass and moves its bytes beside the attention, so uncontended the
// next pass waits max(0, exchange - attention) as ring attention overlaps it,
// and contended it shares the port with the DP collectives.
#include <catch2/catch.hpp>

#include <algorithm>

#include "simulator/engine/engine.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/taskgraph/lowering.h"

namespace trainplan {
namespace {

struct Run {
  ModelSpec model = load_model("llama3-8b");
  ClusterSpec cluster = load_cluster("dgx-h100");
  LoweredStep step;
  EngineResult result;

  explicit Run(const Plan& p) {
    const Layout layout = resolve_plan(model, cluster, 8, p);
    REQUIRE(layout.feasible);
    step = lower_step(model, cluster, layout, LoweringOptions{});
    EngineOptions o;
    o.static_bytes = step.static_bytes;
    result = run_engine(step.graph, step.network, o);
  }
  const TaskTime& time(int32_t id) const { return result.times[static_cast<size_t>(id)]; }
};

Plan cp8(int64_t seq) {
  // Llama 3 8B, the 8,192-token sequence over CP 8 on one DGX H100, one
  // micro-batch, the gradients all-reduced over the CP ranks after the
  // backward (DeepSpeed without ZeRO): nothing else loads the NVLink port
  // while the passes run.
  Plan p;
  p.cp = 8;
  p.seq = seq;
  p.gbs = 1;
  p.framework = Framework::kDeepSpeed;
  return p;
}

TEST_CASE("CP links: one exchange per pass with the layer's K/V bytes, starting with its pass", "[sim][cplink]") {
  // 8,192 tokens (1,024 per rank: the attention hides the exchange) and
  // 2,048 (256 per rank: the exchange outlasts the attention).
  const int64_t seq = GENERATE(8192, 2048);
  const Run run(cp8(seq));
  const TaskGraph& g = run.step.graph;
  // Every rank needs the K and V of the whole sequence: seq tokens x (8 KV
  // heads x 128) x 2 (K and V) x 2 B per layer (32 MiB at 8,192), of which a
  // ring all-gather brings (cp - 1)/cp to each rank (nccl-tests busbw factor).
  const double layer_kv = static_cast<double>(seq) * 8 * 128 * 2 * 2;
  int exchanges = 0, hidden = 0, exposed = 0;
  for (int32_t id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.label != TaskLabel::kCpExchange) continue;
    ++exchanges;
    CHECK(t.category == Category::kTpComm);
    const int layers = t.layer < 0 ? 32 : 1;  // a pass of the whole chunk, or of one layer
    CHECK(t.wire_bytes == Approx(layers * layer_kv * 7 / 8).epsilon(1e-9));
    // It starts with the compute task of its pass (same rank, same layer,
    // same micro-batch), which it does not slow (no members).
    CHECK(t.member_count == 0);
    const TaskTime& ct = run.time(id);
    int32_t pass = -1;
    for (int32_t k : g.program[static_cast<size_t>(t.rank)]) {
      const Task& c = g.task(k);
      if (c.microbatch == t.microbatch && c.layer == t.layer && c.label != TaskLabel::kOptimizer &&
          run.time(k).start_ps == ct.start_ps) {
        pass = k;
      }
    }
    REQUIRE(pass >= 0);
    // Alone on the port it takes its latency (the pass's work outside the
    // attention, then the collective's own) plus bytes / rate ...
    const int64_t alone = t.work_ps + static_cast<int64_t>(std::ceil(t.wire_bytes / t.max_rate * 1e12));
    CHECK(std::llabs((ct.end_ps - ct.start_ps) - alone) <= 2);
    // ... and the rank's next compute starts when both the pass and its
    // exchange are done.
    const auto& prog = g.program[static_cast<size_t>(t.rank)];
    const auto at = std::find(prog.begin(), prog.end(), pass);
    REQUIRE(at + 1 != prog.end());
    const int64_t next = run.time(*(at + 1)).start_ps;
    if (g.task(*(at + 1)).label == TaskLabel::kOptimizer) {
      CHECK(next >= std::max(run.time(pass).end_ps, ct.end_ps));  // it also waits for the gradients' all-reduce
    } else {
      CHECK(next == std::max(run.time(pass).end_ps, ct.end_ps));
    }
    (ct.end_ps > run.time(pass).end_ps ? exposed : hidden) += 1;
  }
  // The forward of the whole chunk as one pass, the backward layer by layer.
  CHECK(exchanges == 1 + 32);
  // At 1,024 tokens per rank the attention hides every exchange; at 256 the
  // exchange outlasts it and the next pass waits.
  if (seq == 8192) CHECK(exposed == 0);
  if (seq == 2048) CHECK(exposed > 0);
  CHECK(exposed + hidden == exchanges);
}

TEST_CASE("CP links: an exchange and ZeRO-3 gathers on one NVLink port share it", "[sim][cplink]") {
  // CP 2 x DP 4 with ZeRO-3 on one node: the parameter all-gathers and
  // reduce-scatters of the data-parallel group load the same NVLink ports as
  // the exchanges, so some exchange runs slower than alone, and never faster
  // than its bytes through the port's capacity allow.
  Plan p;
  p.cp = 2;
  p.dp = 4;
  p.zero = 3;
  p.seq = 8192;
  p.gbs = 8;
  const Run run(p);
  const TaskGraph& g = run.step.graph;
  int slowed = 0, exchanges = 0;
  for (int32_t id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.label != TaskLabel::kCpExchange) continue;
    ++exchanges;
    const TaskTime& ct = run.time(id);
    const double took = static_cast<double>(ct.end_ps - ct.start_ps - t.work_ps) * 1e-12;
    CHECK(took >= t.wire_bytes / t.max_rate - 1e-12);
    slowed += took > 1.01 * t.wire_bytes / t.max_rate;
  }
  CHECK(exchanges > 0);
  CHECK(slowed > 0);
}

}  // namespace
}  // namespace trainplan
