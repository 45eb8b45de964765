// Tests of the tensor-parallel collectives as link tasks (issue 9, item 3):
// a pass's TP collectives leave its compute task for a link task on the
// rank's NVLink port where other traffic can load that port, and they share
// the port's bandwidth with the DP collectives that run at the same time.
#include <catch2/catch.hpp>

#include "simulator/engine/engine.h"
#include "simulator/report/step_report.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/taskgraph/lowering.h"

namespace trainplan {
namespace {

using Catch::Matchers::WithinRel;

struct Lowered {
  ModelSpec model = load_model("gpt3-1.3b");
  ClusterSpec cluster = load_cluster("dgx-a100");
  Layout layout;
  LoweredStep step;

  explicit Lowered(const Plan& p, int gpus) {
    layout = resolve_plan(model, cluster, gpus, p);
    REQUIRE(layout.feasible);
    step = lower_step(model, cluster, layout, LoweringOptions{});
  }
};

Plan tp2_dp4() {
  // TP 2 x DP 4 on one dgx-a100 node, no SP, ZeRO-1 (DeepSpeed's reduction
  // on the compute stream would serialise it; the generic profile
  // overlaps the bucketed reduce-scatters with the backward).
  Plan p;
  p.tp = 2;
  p.dp = 4;
  p.zero = 1;
  p.gbs = 8;  // 2 micro-batches per rank
  return p;
}

TEST_CASE("TP links: the last backward's collectives are a link task with the layers' bytes", "[sim][tplink]") {
  // Megatron TP without SP all-reduces the [s, b, h] activation twice per
  // layer forward and twice per layer backward (Korthikanti et al. 2022
  // Sec. 3): 2048 x 1 x 2048 x 2 B = 8 MiB each; a ring all-reduce over 2
  // ranks moves 2(n-1)/n = 1 x the buffer per rank (nccl-tests busbw
  // factor): 16 MiB per layer backward on the rank's port, and the rank's
  // next compute waits for it (the next layer's backward, after layer 0 the
  // optimizer step).  Only the passes around which other traffic runs get
  // one: here the last micro-batch's backward, layer by layer as the DP
  // reduce-scatters start; the forwards keep their TP time inside.
  //
  // The output layer's backward adds one more: its column-parallel input
  // (Megatron's copy_to_tensor_model_parallel_region, the identity in
  // forward) all-reduces the input gradient, 8 MiB, in the pass that runs
  // the last layer's backward; the vocab-parallel embedding's all-reduce is
  // forward only (reduce_from_tensor_model_parallel_region), so layer 0's
  // backward carries the layer's 16 MiB alone.
  const Lowered l(tp2_dp4(), 8);
  const TaskGraph& g = l.step.graph;
  const double mib = 1024.0 * 1024;
  int links = 0, to_optimizer = 0, with_output = 0;
  for (int32_t id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.label != TaskLabel::kTpCollective) continue;
    ++links;
    CHECK(t.category == Category::kTpComm);
    const bool output = t.wire_bytes > 20 * mib;
    with_output += output;
    CHECK_THAT(t.wire_bytes, WithinRel((output ? 24.0 : 16.0) * mib, 1e-9));
    REQUIRE(t.link_count == 1);
    int next_compute = 0;
    const uint32_t* succ = g.successors(t);
    for (uint32_t k = 0; k < t.succ_count; ++k) {
      const Task& n = g.task(static_cast<int32_t>(succ[k]));
      next_compute += n.type == TaskType::kCompute;
      to_optimizer += n.label == TaskLabel::kOptimizer;
    }
    CHECK(next_compute == 1);
  }
  // Representative mode: one simulated rank; its last backward's 24 layers,
  // the output layer's beside the last one.
  CHECK(links == 24);
  CHECK(with_output == 1);
  CHECK(to_optimizer == 1);
  // The forwards' compute tasks still carry their TP time (tp_comm_ps).
  for (int32_t id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.label == TaskLabel::kForward) CHECK(t.tp_comm_ps > 0);
  }
  // A TP group that fills the node owns its ports: no link tasks.
  Plan full = tp2_dp4();
  full.tp = 8;
  full.dp = 1;
  const Lowered alone(full, 8);
  for (int32_t id = 0; id < alone.step.graph.size(); ++id) {
    CHECK(alone.step.graph.task(id).label != TaskLabel::kTpCollective);
  }
}

TEST_CASE("TP links: TP and DP collectives on one NVLink port share its bandwidth", "[sim][tplink]") {
  // The last backward's TP all-reduces and the DP reduce-scatters that start
  // with them load the same port (capacity C): the flow model splits C
  // between them, so each runs slower than alone (time > latency +
  // bytes / its own rate) and neither faster than its fair share allows;
  // the bytes through the port while both run never exceed C per second.
  const Lowered l(tp2_dp4(), 8);
  LoweredStep step = l.step;
  EngineOptions o;
  o.static_bytes = step.static_bytes;
  const EngineResult r = run_engine(step.graph, step.network, o);
  const TaskGraph& g = step.graph;
  int32_t tp = -1;
  for (int32_t id = 0; id < g.size(); ++id) {
    if (g.task(id).label == TaskLabel::kTpCollective) tp = id;
  }
  REQUIRE(tp >= 0);
  const Task& tpt = g.task(tp);
  const TaskTime& tpw = r.times[static_cast<size_t>(tp)];
  const double tp_alone_s = static_cast<double>(tpt.work_ps) * 1e-12 + tpt.wire_bytes / tpt.max_rate;
  const double tp_took_s = static_cast<double>(tpw.end_ps - tpw.start_ps) * 1e-12;
  // A reduce-scatter on the same port, running during the TP task.
  double overlapped_rs_bytes = 0;
  int concurrent = 0;
  for (int32_t id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.label != TaskLabel::kDpReduceScatter) continue;
    const TaskTime& w = r.times[static_cast<size_t>(id)];
    if (w.end_ps <= tpw.start_ps || w.start_ps >= tpw.end_ps) continue;
    ++concurrent;
    overlapped_rs_bytes += t.wire_bytes;
  }
  REQUIRE(concurrent > 0);
  CHECK(tp_took_s > tp_alone_s * 1.01);
  // Capacity bound: the TP bytes and at most all of the concurrent
  // reduce-scatters' bytes went through the port in the TP task's window
  // plus those collectives' own spans, at no more than C.
  const double capacity = tpt.max_rate;  // A100 ring/Simple busbw = the port's capacity
  CHECK(tp_took_s <= (tpt.wire_bytes + overlapped_rs_bytes) / capacity +
                         static_cast<double>(tpt.work_ps) * 1e-12 + 1e-9);
}

}  // namespace
}  // namespace trainplan
