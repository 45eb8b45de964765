// Tests of the bidirectional DualPipe schedule (DeepSeek-V3 report Sec.
// 3.2.1; deepseek-ai/DualPipe dualpipe.py) against DualPipe's own code and
// its README's comparison table, and of how the executors run it: as
// dualpipe-v on half the ranks with the mirrored ranks as data-parallel
// replicas (execution_layout), the V's turn a transfer between the middle
// ranks.
#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "simulator/memory/memory_model.h"
#include "simulator/report/step_report.h"
#include "simulator/schedule/pipeline_schedule.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"
#include "tests/simulator/fixtures.h"
#include "simulator/taskgraph/lowering.h"

namespace trainplan {
namespace {

TEST_CASE("DualPipe: each rank runs dualpipe.py's order for its half rank", "[sim][taskgraph][dualpipe]") {
  // dualpipe.py: "assert num_ranks % 2 == 0"; "num_chunks % 2 == 0 and
  // num_chunks >= num_ranks * 2".
  CHECK_FALSE(check_pipeline_schedule(Schedule::kDualPipe, 3, 12, 2).ok);
  CHECK_FALSE(check_pipeline_schedule(Schedule::kDualPipe, 4, 9, 2).ok);
  CHECK_FALSE(check_pipeline_schedule(Schedule::kDualPipe, 4, 6, 2).ok);
  CHECK(check_pipeline_schedule(Schedule::kDualPipe, 4, 8, 2).ok);
  // trainplan builds the order as DualPipeV's on p/2 ranks, which needs two.
  CHECK_FALSE(check_pipeline_schedule(Schedule::kDualPipe, 2, 8, 2).ok);
  for (int p : {4, 6, 8}) {
    for (int m : {2 * p, 2 * p + 2, 4 * p, 40}) {
      INFO("p=" << p << " m=" << m);
      const PipelineSchedule s = build_pipeline_schedule(Schedule::kDualPipe, p, m, 2);
      REQUIRE(s.size() == static_cast<size_t>(p));
      const int half_ranks = p / 2, half_chunks = m / 2;
      for (int r = 0; r < p; ++r) {
        const std::vector<PipeOp>& ops = s[static_cast<size_t>(r)];
        const int h = std::min(r, p - 1 - r);  // dualpipe.py half_rank
        // The mirror runs the same order (its phases swapped: its chunk 0 is
        // the other direction's first stage).
        CHECK(ops == s[static_cast<size_t>(p - 1 - r)]);
        // Every (micro-batch, chunk) of the rank's half_num_chunks has one F,
        // one B and one W, in that order.
        std::vector<int> seen(static_cast<size_t>(3 * 2 * half_chunks), 0);
        for (const PipeOp& op : ops) {
          REQUIRE(op.microbatch >= 0);
          REQUIRE(op.microbatch < half_chunks);
          const size_t at = static_cast<size_t>((op.microbatch * 2 + op.chunk) * 3);
          const int k = static_cast<int>(op.kind);
          if (k > 0) CHECK(seen[at + static_cast<size_t>(k - 1)] == 1);
          CHECK(seen[at + static_cast<size_t>(k)] == 0);
          seen[at + static_cast<size_t>(k)] = 1;
        }
        CHECK(std::count(seen.begin(), seen.end(), 1) == 6 * half_chunks);
        // dualpipe.py Step 1: (num_half_ranks - half_rank - 1) * 2 forwards
        // of phase 0; Step 2: half_rank + 1 pairs (phase 0, phase 1).
        const int step1 = (half_ranks - h - 1) * 2, step2 = h + 1;
        REQUIRE(ops.size() >= static_cast<size_t>(step1 + 2 * step2));
        for (int i = 0; i < step1; ++i) {
          CHECK(ops[static_cast<size_t>(i)].kind == PipeOp::Kind::kForward);
          CHECK(ops[static_cast<size_t>(i)].chunk == 0);
          CHECK(ops[static_cast<size_t>(i)].microbatch == i);
        }
        for (int i = 0; i < step2; ++i) {
          const PipeOp& f0 = ops[static_cast<size_t>(step1 + 2 * i)];
          const PipeOp& f1 = ops[static_cast<size_t>(step1 + 2 * i + 1)];
          CHECK(f0.kind == PipeOp::Kind::kForward);
          CHECK(f0.chunk == 0);
          CHECK(f0.microbatch == step1 + i);
          CHECK(f1.kind == PipeOp::Kind::kForward);
          CHECK(f1.chunk == 1);
          CHECK(f1.microbatch == i);
        }
        // The README's table ("based on the same number of PP stages"):
        // DualPipe and DualPipeV hold PP + 1 stage-sized activations per
        // device, PP the number of stages (here p).  The first rank, which
        // runs the most warm-up forwards, reaches it.
        if (r == 0) CHECK(peak_microbatches_in_flight(ops) == p + 1);
        CHECK(peak_microbatches_in_flight(ops) <= p + 1);
      }
      // The same order as DualPipeV on p/2 ranks with half the micro-batches
      // (the "cut-in-half" derivation the README credits to Sea AI Lab).
      const PipelineSchedule v = build_pipeline_schedule(Schedule::kDualPipeV, half_ranks, half_chunks, 2);
      for (int r = 0; r < p; ++r) CHECK(s[static_cast<size_t>(r)] == v[static_cast<size_t>(std::min(r, p - 1 - r))]);
    }
  }
}

TEST_CASE("DualPipe: runs as dualpipe-v on half the ranks, the mirrored ranks its extra replicas",
          "[sim][taskgraph][dualpipe]") {
  const ModelSpec model = load_model("llama3-8b");  // 32 layers
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan plan;
  plan.tp = 2;
  plan.pp = 4;
  plan.mbs = 1;
  plan.gbs = 16;
  plan.schedule = Schedule::kDualPipe;
  plan.schedule_given = true;
  const Layout L = resolve_plan(model, c, 16, plan);
  REQUIRE(L.feasible);
  CHECK(L.plan.dp == 2);
  CHECK(L.microbatches == 8);
  // Rank r holds stages r and pp-1-r of 8 layers each.
  CHECK(L.stage_layers == std::vector<int>{16, 16, 16, 16});
  const Layout E = execution_layout(model, c, L);
  REQUIRE(E.feasible);
  CHECK(E.plan.schedule == Schedule::kDualPipeV);
  CHECK(E.plan.pp == 2);
  CHECK(E.plan.dp == 4);
  CHECK(E.plan.gbs == 16);
  CHECK(E.microbatches == 4);  // half enter at each end
  CHECK(E.stage_layers == std::vector<int>{16, 16});
  CHECK(E.mirrored_pp == 4);
  CHECK(E.mirrored_dp == 2);
  // Idempotent.
  CHECK(execution_layout(model, c, E).plan.pp == 2);
  // Physical GPUs, global rank tp + 2 * (dp + 2 * pp) of the dualpipe plan:
  // replicas 0-1 of execution rank k are pipeline rank k, replicas 2-3 its
  // mirror pp-1-k (dualpipe.py: half_rank = min(rank, num_ranks - 1 - rank)).
  CHECK(physical_rank(E, 0, 0, 0, 1) == 1);
  CHECK(physical_rank(E, 1, 1, 0, 0) == 6);   // pp 1, dp 1
  CHECK(physical_rank(E, 0, 2, 0, 0) == 12);  // pp 3, dp 0
  CHECK(physical_rank(E, 1, 3, 0, 1) == 11);  // pp 2, dp 1
  CHECK(physical_rank(L, 3, 1, 0, 1) == 15);  // an unfolded layout: Megatron order
}

TEST_CASE("DualPipe: twice the parameters of 1F1B per device, and the turn's transfers", "[sim][taskgraph][dualpipe]") {
  const ModelSpec model = load_model("llama3-8b");  // 32 layers
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan plan;
  plan.pp = 4;
  plan.mbs = 1;
  plan.gbs = 16;
  plan.seq = 2048;
  plan.schedule_given = true;
  auto layout = [&](Schedule s, int pp) {
    Plan q = plan;
    q.schedule = s;
    q.pp = pp;
    const Layout L = resolve_plan(model, c, 8, q);
    REQUIRE(L.feasible);
    return L;
  };
  const Layout dual = layout(Schedule::kDualPipe, 4);
  const Layout one = layout(Schedule::k1F1B, 4);
  const Layout vee = layout(Schedule::kDualPipeV, 2);
  // The README's table: "Parameter Per Device" 2x 1F1B's at the same number
  // of stages.  Rank 1 holds stages 1 and 2 (16 layers, no embedding or
  // output layer) where 1F1B's rank 1 holds stage 1.
  const MemoryReport md = estimate_memory(model, c, dual), m1 = estimate_memory(model, c, one);
  REQUIRE(md.stages.size() == 2);  // execution stage k = ranks k and 3-k
  CHECK(md.stages[1].breakdown.weights == Approx(2 * m1.stages[1].breakdown.weights).epsilon(1e-12));
  // ... and the dualpipe-v plan it runs as, figure for figure.
  const MemoryReport mv = estimate_memory(model, c, vee);
  for (size_t k = 0; k < 2; ++k) CHECK(md.stages[k].breakdown.total() == mv.stages[k].breakdown.total());

  // One node (NVLink everywhere, the DP groups placed alike): the two plans
  // differ only by the V's turn, which dualpipe-v hands over in memory and
  // dualpipe sends between physical ranks 1 and 2, once forward and once
  // backward per micro-batch of each replica (representative mode: the
  // middle execution stage's sends).
  LoweringOptions lo;
  lo.representative = true;
  const LoweredStep ld = lower_step(model, c, dual, lo), lv = lower_step(model, c, vee, lo);
  auto sends = [](const LoweredStep& s, TaskLabel label) {
    int n = 0;
    int64_t longest = 0;
    for (int32_t id = 0; id < s.graph.size(); ++id) {
      const Task& t = s.graph.task(id);
      if (t.label != label) continue;
      ++n;
      longest = std::max<int64_t>(longest, t.work_ps + static_cast<int64_t>(t.wire_bytes / t.max_rate * 1e12));
    }
    return std::make_pair(n, longest);
  };
  const int m = 4;  // micro-batches per replica of the execution
  const auto [fd, fd_ps] = sends(ld, TaskLabel::kSendForward);
  const auto [fv, fv_ps] = sends(lv, TaskLabel::kSendForward);
  const auto [bd, bd_ps] = sends(ld, TaskLabel::kSendBackward);
  const auto [bv, bv_ps] = sends(lv, TaskLabel::kSendBackward);
  CHECK(fd == fv + m);
  CHECK(bd == bv + m);
  const double sd = simulate_step(model, c, dual, SimulateOptions{}).step_time_s;
  const double sv = simulate_step(model, c, vee, SimulateOptions{}).step_time_s;
  CHECK(sd > sv);
  CHECK(sd - sv <= m * static_cast<double>(fd_ps + bd_ps) * 1e-12 + 1e-9);
}

TEST_CASE("DualPipe: the plan rules", "[sim][taskgraph][dualpipe]") {
  const ModelSpec model = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan plan;
  plan.schedule = Schedule::kDualPipe;
  plan.schedule_given = true;
  plan.pp = 4;
  plan.gbs = 16;
  auto reasons = [&](Plan q, int gpus) { return resolve_plan(model, c, gpus, q); };
  {
    Plan q = plan;
    q.pp = 3;
    q.gbs = 12;
    CHECK(testing::reasons_mention(reasons(q, 6), "the dualpipe schedule needs an even pp"));
  }
  {
    Plan q = plan;
    q.pp = 2;
    q.gbs = 8;
    CHECK(testing::reasons_mention(reasons(q, 4), "the dualpipe schedule needs pp >= 4 here"));
  }
  {
    Plan q = plan;
    q.gbs = 12;  // 6 micro-batches < 2 * pp
    CHECK(testing::reasons_mention(reasons(q, 8), "at least 2*pp = 8"));
    q.gbs = 18;  // 9: odd
    CHECK(testing::reasons_mention(reasons(q, 8), "an even number of micro-batches"));
  }
  {
    Plan q = plan;
    q.framework = Framework::kTorchtitan;
    CHECK(testing::reasons_mention(reasons(q, 8), "no framework profile runs"));
  }
  {
    Plan q = plan;
    q.stage_layers = {14, 18, 16, 16};  // ranks 1 and 2 hold the same two stages: not a mirror image
    CHECK(testing::reasons_mention(reasons(q, 8), "read the same from both ends"));
    q.stage_layers = {14, 18, 18, 14};
    CHECK(reasons(q, 8).feasible);
    q.stage_layers = {14, 16, 16, 14};
    CHECK(testing::reasons_mention(reasons(q, 8), "sum to 30 of the model's 32"));
  }
  {
    Plan q = plan;
    q.recompute = Recompute::kFull;  // a schedule with deferred W passes
    CHECK(testing::reasons_mention(reasons(q, 8), "defers weight gradients"));
  }
}

}  // namespace
}  // namespace trainplan
