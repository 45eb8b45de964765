// Tests of the parallel strategies end to end (lower_step + run_engine, and
// simulate_step): each checks the defining behaviour of a strategy against a
// closed form (pipeline bubbles, ZeRO communication volume, Megatron TP
// collectives, the memory model) or a brute-force property of the simulated
// timeline.  Derivations and tolerances are given per test.
#include "simulator/report/step_report.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/simulator/fixtures.h"

#include "simulator/cost/layer_cost.h"
#include "simulator/engine/engine.h"
#include "simulator/memory/memory_model.h"
#include "simulator/network/collective_model.h"
#include "simulator/taskgraph/lowering.h"

namespace trainplan {
namespace {

using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

std::string all_reasons(const Layout& l) {
  std::string out;
  for (const std::string& r : l.reasons) out += r + "\n";
  return out;
}

// A cluster where communication is negligible: 1e15 B/s links, zero link
// latency and a slow GPU (10 TFLOP/s bf16).  NCCL's fixed per-call latencies
// (6.6-14 us, collective_model.cc) remain, so the GPU is slowed until a layer
// takes milliseconds: a p2p send then costs < 0.1% of a pipeline stage.
// 16 SMs: every GEMM of a layer (s = 1024 tokens -> 4 row tiles of 256)
// fills whole waves, so stages are even; the logits GEMM (128-wide
// vocabulary) is 4 tiles, negligible next to a layer; with 132 SMs the
// layers' GEMMs would leave SMs idle in their last wave.
ClusterSpec fast_links_cluster() { return testing::fast_links_cluster(); }

// A small GPT: 16 layers, h = 1024, 16 heads, s = 1024, and a 128-token
// vocabulary so the embedding and logits are negligible next to a layer.
ModelSpec small_gpt() { return testing::small_gpt(16); }

Layout resolved(const ModelSpec& m, const ClusterSpec& c, int gpus, const Plan& p) {
  const Layout l = resolve_plan(m, c, gpus, p);
  INFO(all_reasons(l));
  REQUIRE(l.feasible);
  return l;
}

Plan pipeline_plan(Schedule s, int pp, int64_t microbatches, int vp = 1) {
  Plan p;
  p.pp = pp;
  p.vp = vp;
  p.mbs = 1;
  p.gbs = microbatches;  // dp = 1
  p.schedule = s;
  p.schedule_given = true;
  return p;
}

struct Run {
  LoweredStep step;
  EngineResult result;
};

Run lower_and_run(const ModelSpec& m, const ClusterSpec& c, const Layout& l, double bucket_bytes = 25e6,
                  bool representative = true) {
  LoweringOptions lo;
  lo.bucket_bytes = bucket_bytes;
  lo.representative = representative;
  Run r{lower_step(m, c, l, lo), {}};
  EngineOptions eo;
  eo.comm_slowdown = r.step.comm_slowdown;
  eo.static_bytes = r.step.static_bytes;
  r.result = run_engine(r.step.graph, r.step.network, eo);
  return r;
}

double dp_wire_bytes(const TaskGraph& g) {
  double sum = 0;
  for (int32_t i = 0; i < g.size(); ++i) {
    const Task& t = g.task(i);
    if (t.type == TaskType::kComm && t.category == Category::kDpComm) sum += t.wire_bytes;
  }
  return sum;
}

int count_label(const TaskGraph& g, TaskLabel label) {
  int n = 0;
  for (int32_t i = 0; i < g.size(); ++i) n += g.task(i).label == label ? 1 : 0;
  return n;
}

TEST_CASE("Strategies: GPipe and 1F1B bubbles are (p-1)/(m+p-1) of the step", "[sim][strategies][pipeline]") {
  // With uniform stages (T_F, T_B per micro-batch) both schedules take
  // (m + p - 1)(T_F + T_B) and keep each rank busy m(T_F + T_B), so the idle
  // share is (p-1)/(m+p-1) (GPipe, Huang et al. 2019; PipeDream-Flush,
  // Narayanan et al. 2021; FORMULAS.md 2.4).  The optimizer step runs after
  // the pipeline drains and is excluded.  3% relative: the embedding, logits
  // and p2p latencies make the stages slightly uneven.
  const ModelSpec m = small_gpt();
  const ClusterSpec c = fast_links_cluster();
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B}) {
    for (std::pair<int, int> pm : {std::make_pair(4, 4), std::make_pair(4, 8), std::make_pair(8, 16)}) {
      const int p = pm.first, mb = pm.second;
      DYNAMIC_SECTION(to_string(s) << " p=" << p << " m=" << mb) {
        const Layout l = resolved(m, c, p, pipeline_plan(s, p, mb));
        const StepReport r = simulate_step(m, c, l, SimulateOptions{});
        const double bubble = r.breakdown.bubble / (r.step_time_s - r.breakdown.optimizer);
        CHECK_THAT(bubble, WithinRel(double(p - 1) / (mb + p - 1), 0.03));
        // The breakdown accounts for the whole step.
        CHECK_THAT(r.breakdown.total(), WithinRel(r.step_time_s, 1e-9));
      }
    }
  }
}

TEST_CASE("Strategies: the gradient-norm all-reduce joins a replica's stages before the update", "[sim][strategies][pipeline]") {
  // Clipping by the global gradient norm (Megatron clip_grad_norm_fp32 over
  // the model-parallel group) is one all-reduce over a replica's tp x pp
  // ranks after its gradients are final: no stage updates before every stage
  // of its replica has finished its backward, so each replica's optimizer
  // steps start together, after the latest backward of the replica.  One
  // sync per replica (dp 2 here).  The Zero Bubble schedules validate the
  // step afterwards (Qi et al. 2024 Sec. 4) and have none.
  const ModelSpec m = small_gpt();
  const ClusterSpec c = fast_links_cluster();
  Plan p = pipeline_plan(Schedule::k1F1B, 4, 8);
  p.gbs = 16;  // dp 2
  const Layout l = resolved(m, c, 8, p);
  const Run run = lower_and_run(m, c, l, 25e6, /*representative=*/false);
  const LoweredStep& step = run.step;
  const EngineResult& r = run.result;
  CHECK(count_label(step.graph, TaskLabel::kGradNormSync) == 2);
  std::map<int, int64_t> opt_start, last_backward_end;  // by dp index
  std::map<int, std::vector<int64_t>> starts;
  for (int32_t i = 0; i < step.graph.size(); ++i) {
    const Task& t = step.graph.task(i);
    if (t.type != TaskType::kCompute) continue;
    const int d = step.ranks[static_cast<size_t>(t.rank)].dp;
    const TaskTime& tt = r.times[static_cast<size_t>(i)];
    if (t.label == TaskLabel::kOptimizer) starts[d].push_back(tt.start_ps);
    if (t.label == TaskLabel::kBackward) last_backward_end[d] = std::max(last_backward_end[d], tt.end_ps);
  }
  REQUIRE(starts.size() == 2);
  for (const auto& [d, v] : starts) {
    REQUIRE(v.size() == 4);
    for (int64_t t0 : v) {
      CHECK(t0 == v.front());
      CHECK(t0 >= last_backward_end[d]);
    }
  }
  Plan zb = pipeline_plan(Schedule::kZb2p, 4, 8);
  const LoweredStep zstep = lower_step(m, c, resolved(m, c, 4, zb), LoweringOptions{});
  CHECK(count_label(zstep.graph, TaskLabel::kGradNormSync) == 0);
}

TEST_CASE("Strategies: without a pipeline, waiting for the own reduce-scatters is DP communication, not bubble",
          "[sim][strategies][dp]") {
  // One stage: no rank ever waits for another stage, so the step has no
  // bubble (the 1F1B bubble (p-1)/(m+p-1) is 0 at p = 1).  Llama 3 70B at tp 8
  // over 16 DGX H100 nodes, one micro-batch: each rank reduce-scatters
  // 70.6e9 / 8 x 4 B = 35 GB of fp32 gradients over its 400 Gb/s NIC, about
  // 0.7 s, behind a backward of about 0.4 s, and the gradient-norm all-reduce
  // waits for the last of them.  That wait is exposed DP communication:
  // compute + TP + DP + optimizer make up the step.
  const ModelSpec m = load_model("llama3-70b");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan p;
  p.tp = 8;
  p.zero = 1;
  p.mbs = 1;
  p.gbs = 16;  // dp 16, one micro-batch
  p.seq = 4096;
  const Layout l = resolved(m, c, 128, p);
  REQUIRE(l.microbatches == 1);
  const StepReport rep = simulate_step(m, c, l, SimulateOptions{});
  const TimeBreakdown& b = rep.breakdown;
  CHECK(b.bubble == Approx(0).margin(1e-9));
  CHECK(b.dp_comm > 0.2);
  CHECK(b.compute + b.tp_comm + b.pp_comm + b.dp_comm + b.ep_comm + b.optimizer ==
        Approx(rep.step_time_s).epsilon(1e-9));
}

TEST_CASE("Strategies: the interleaved bubble is (p-1)/(v m) of the compute", "[sim][strategies][pipeline]") {
  // Narayanan et al. 2021 Sec. 2.2.2: with v model chunks per rank the
  // pipeline flush shrinks to (p-1)(T_F + T_B)/v while each rank computes
  // m(T_F + T_B): bubble / compute = (p-1)/(v m) = 3/16 for p=4, v=2, m=8.
  // 5% relative: uneven chunks (embedding, logits) and p2p latencies.
  const ModelSpec m = small_gpt();
  const ClusterSpec c = fast_links_cluster();
  const Layout l = resolved(m, c, 4, pipeline_plan(Schedule::kInterleaved, 4, 8, 2));
  const StepReport r = simulate_step(m, c, l, SimulateOptions{});
  CHECK_THAT(r.breakdown.bubble / r.breakdown.compute, WithinRel(3.0 / 16, 0.05));
}

TEST_CASE("Strategies: naive model parallelism keeps one GPU busy at a time", "[sim][strategies][pipeline]") {
  // F0 B0 F1 B1 ... on every rank with the data dependencies runs the stages
  // one after the other: the step is the sum of every rank's compute plus the
  // first rank's optimizer (the others overlap the chain), so
  // pp * mean compute = step - optimizer (1% relative: optimizer times differ
  // by stage through the embedding parameters; p2p latencies).
  const ModelSpec m = small_gpt();
  const ClusterSpec c = fast_links_cluster();
  const int pp = 4;
  const Layout l = resolved(m, c, pp, pipeline_plan(Schedule::kNaive, pp, 4));
  SECTION("breakdown.compute = (step - optimizer) / pp") {
    const StepReport r = simulate_step(m, c, l, SimulateOptions{});
    CHECK_THAT(pp * r.breakdown.compute, WithinRel(r.step_time_s - r.breakdown.optimizer, 0.01));
  }
  SECTION("no two forward/backward tasks overlap in time (brute force over all pairs)") {
    const Run run = lower_and_run(m, c, l);
    const TaskGraph& g = run.step.graph;
    std::vector<std::pair<int64_t, int64_t>> busy;
    for (int32_t i = 0; i < g.size(); ++i) {
      const Task& t = g.task(i);
      if (t.type == TaskType::kCompute && t.category == Category::kCompute) {
        busy.emplace_back(run.result.times[static_cast<size_t>(i)].start_ps, run.result.times[static_cast<size_t>(i)].end_ps);
      }
    }
    REQUIRE(busy.size() == static_cast<size_t>(pp * 4 * 2));
    int overlaps = 0;
    for (size_t a = 0; a < busy.size(); ++a) {
      for (size_t b = a + 1; b < busy.size(); ++b) {
        if (std::min(busy[a].second, busy[b].second) > std::max(busy[a].first, busy[b].first)) ++overlaps;
      }
    }
    CHECK(overlaps == 0);
  }
}

TEST_CASE("Strategies: DDP with gradient accumulation syncs once, in buckets, overlapped", "[sim][strategies][dp]") {
  const ModelSpec m = small_gpt();
  const int64_t microbatches = 4;
  // Gradients of the last micro-batch are final; earlier ones accumulate
  // locally (PyTorch no_sync, Megatron grad accumulation): every DP collective
  // starts after the last micro-batch's backward began.
  auto check_no_early_sync = [&](const Run& run) {
    const TaskGraph& g = run.step.graph;
    int64_t last_backward_start = INT64_MAX;
    int dp_tasks = 0;
    for (int32_t i = 0; i < g.size(); ++i) {
      const Task& t = g.task(i);
      if (t.type == TaskType::kCompute && t.label == TaskLabel::kBackward && t.microbatch == microbatches - 1) {
        last_backward_start = std::min(last_backward_start, run.result.times[static_cast<size_t>(i)].start_ps);
      }
    }
    REQUIRE(last_backward_start < INT64_MAX);
    for (int32_t i = 0; i < g.size(); ++i) {
      const Task& t = g.task(i);
      if (t.type != TaskType::kComm || t.category != Category::kDpComm) continue;
      ++dp_tasks;
      CHECK(run.result.times[static_cast<size_t>(i)].start_ps >= last_backward_start);
    }
    CHECK(dp_tasks > 0);
  };
  SECTION("fast links: no sync before the last micro-batch; one all-reduce per bucket") {
    // Buckets close at layer boundaries (lowering.cc build_dp).  With a bucket
    // of 2.9 layers' gradients g, every bucket closes after 3 layers (2g plus
    // the output layer's < 0.9g is short of it, 3g is over), as PyTorch DDP
    // closes a bucket once it reaches the cap.  That is ceil(16/3) = 6
    // buckets, and the closed form ceil(total gradient bytes / bucket) agrees:
    // total = 16g + embedding + output = 16.09g, / 2.9g = 5.55 -> 6.
    const ClusterSpec c = fast_links_cluster();
    Plan p;
    p.mbs = 1;
    p.gbs = 8 * microbatches;  // dp = 8
    const Layout l = resolved(m, c, 8, p);
    REQUIRE(l.microbatches == microbatches);
    const double g_bytes = layer_params(m) * 4;  // fp32 main gradients
    const double bucket = 2.9 * g_bytes;
    const Run run = lower_and_run(m, c, l, bucket);
    check_no_early_sync(run);
    const double total = total_params(m) * 4;
    const int closed_form = static_cast<int>(std::ceil(total / bucket));
    // Brute force: greedy layer packing in backward order (output layer with
    // the last layer, embedding with the first).
    std::vector<double> layers(16, g_bytes);
    layers.front() += embedding_params(m) * 4;
    layers.back() += output_params(m) * 4;
    int greedy = 0;
    double fill = 0;
    for (int i = 15; i >= 0; --i) {
      fill += layers[static_cast<size_t>(i)];
      if (fill >= bucket || i == 0) {
        ++greedy;
        fill = 0;
      }
    }
    REQUIRE(greedy == closed_form);
    CHECK(count_label(run.step.graph, TaskLabel::kDpAllReduce) == closed_form);
    CHECK(closed_form == 6);
  }
  SECTION("slow network (dgx-a100, 2 nodes): only part of the DP collective time is exposed") {
    // The buckets of the last micro-batch's backward overlap the backward of
    // the earlier layers, so exposed dp_comm < the DP channel's busy time.
    const ClusterSpec c = load_cluster("dgx-a100");
    Plan p;
    p.mbs = 1;
    p.gbs = 16 * microbatches;  // dp = 16 over 2 nodes
    const Layout l = resolved(m, c, 16, p);
    const Run run = lower_and_run(m, c, l);
    check_no_early_sync(run);
    double collective_s = 0;
    for (int32_t i = 0; i < run.step.graph.size(); ++i) {
      const Task& t = run.step.graph.task(i);
      if (t.type != TaskType::kComm || t.category != Category::kDpComm) continue;
      const TaskTime& tt = run.result.times[static_cast<size_t>(i)];
      collective_s += static_cast<double>(tt.end_ps - tt.start_ps) * 1e-12;
    }
    const StepReport r = simulate_step(m, c, l, SimulateOptions{});
    REQUIRE(collective_s > 0);
    CHECK(r.breakdown.dp_comm > 0);
    CHECK(r.breakdown.dp_comm < collective_s);
  }
}

TEST_CASE("Strategies: the default DDP bucket is PyTorch's 25 MiB", "[sim][strategies][dp]") {
  // torch/nn/parallel/distributed.py: bucket_cap_mb = 25 ("default case
  // (bucket cap is 25 MiB)"), bucket_bytes_cap = int(bucket_cap_mb * 1024 * 1024)
  // = 26,214,400 bytes.
  CHECK(LoweringOptions{}.bucket_bytes == 25.0 * 1024 * 1024);
  CHECK(SimulateOptions{}.bucket_bytes == 25.0 * 1024 * 1024);
}

TEST_CASE("Strategies: a DDP bucket exceeds the cap by less than one parameter tensor",
          "[sim][strategies][dp]") {
  // PyTorch DDP (compute_bucket_assignment_by_size) fills buckets tensor by
  // tensor in reverse order and closes one once it reaches bucket_cap, so a
  // bucket is < cap + the largest tensor.  Here the largest tensor is an MLP
  // weight, 4h^2 = 4,194,304 parameters = 16.8 MB of fp32 gradients, so no
  // all-reduce should exceed 26.2e6 + 16.8e6 = 43.0 MB.  (A whole layer's
  // gradients, 12h^2 + 13h parameters = 50.4 MB, is over it.)
  const ModelSpec m = small_gpt();
  const ClusterSpec c = fast_links_cluster();
  Plan p;
  p.mbs = 1;
  p.gbs = 32;
  const Layout l = resolved(m, c, 8, p);
  const LoweredStep step = lower_step(m, c, l, LoweringOptions{});
  const double largest_tensor = 4.0 * 1024 * 1024 * 4;
  const double factor = bus_bandwidth_factor(Collective::kAllReduce, 8);
  double largest_bucket = 0;
  for (int32_t i = 0; i < step.graph.size(); ++i) {
    const Task& t = step.graph.task(i);
    if (t.label == TaskLabel::kDpAllReduce) largest_bucket = std::max(largest_bucket, t.wire_bytes / factor);
  }
  INFO("largest bucket " << largest_bucket << " bytes");
  CHECK(largest_bucket < LoweringOptions{}.bucket_bytes + largest_tensor);
}

// The lowered step of a ZeRO stage, m = 1, dp = 8, bf16 gradients.
LoweredStep zero_step(int zero) {
  const ModelSpec m = small_gpt();
  const ClusterSpec c = fast_links_cluster();
  Plan p;
  p.mbs = 1;
  p.gbs = 8;  // m = 1
  p.zero = zero;
  p.grad_dtype = GradDtype::kBf16;
  const Layout l = resolved(m, c, 8, p);
  REQUIRE(l.microbatches == 1);
  return lower_step(m, c, l, LoweringOptions{});
}

double zero_wire_bytes(int zero) { return dp_wire_bytes(zero_step(zero).graph); }

TEST_CASE("Strategies: ZeRO-3 moves 1.5x the bytes of DDP, ZeRO-1/2 the same", "[sim][strategies][zero]") {
  // Rajbhandari et al. 2020 Sec. 7 (FORMULAS.md 2.3), n = 8, Psi parameters,
  // 2-byte gradients and weights, wire bytes in nccl-tests bus units:
  //   DDP: all-reduce 2(n-1)/n * 2Psi.
  //   ZeRO-1/2: reduce-scatter (n-1)/n * 2Psi + all-gather of the updated
  //     weights (n-1)/n * 2Psi = 2(n-1)/n * 2Psi (ratio 1).
  //   ZeRO-3: all-gather in forward + again in backward + reduce-scatter =
  //     3(n-1)/n * 2Psi (ratio 1.5).
  // 1%: sizes are truncated to whole bytes per collective.
  const double ddp = zero_wire_bytes(0);
  REQUIRE(ddp > 0);
  SECTION("DDP itself: 2(n-1)/n * 2Psi") {
    CHECK_THAT(ddp, WithinRel(2.0 * 7 / 8 * 2 * total_params(small_gpt()), 0.01));
  }
  SECTION("ZeRO-3 / DDP = 1.5") { CHECK_THAT(zero_wire_bytes(3) / ddp, WithinRel(1.5, 0.01)); }
  SECTION("ZeRO-1 / DDP = 1") { CHECK_THAT(zero_wire_bytes(1) / ddp, WithinRel(1.0, 0.01)); }
  SECTION("ZeRO-2 / DDP = 1") { CHECK_THAT(zero_wire_bytes(2) / ddp, WithinRel(1.0, 0.01)); }
  SECTION("the collectives: DDP all-reduces; ZeRO-1/2 reduce-scatter + all-gather, no all-reduce") {
    CHECK(count_label(zero_step(0).graph, TaskLabel::kDpAllReduce) > 0);
    for (int zero : {1, 2}) {
      const LoweredStep s = zero_step(zero);
      INFO("zero " << zero);
      CHECK(count_label(s.graph, TaskLabel::kDpAllReduce) == 0);
      CHECK(count_label(s.graph, TaskLabel::kDpReduceScatter) > 0);
      CHECK(count_label(s.graph, TaskLabel::kDpAllGather) > 0);
    }
  }
  SECTION("ZeRO-3 gathers every layer twice (forward, backward) and reduce-scatters it once: 2L and L") {
    const LoweredStep s = zero_step(3);
    CHECK(count_label(s.graph, TaskLabel::kParamAllGather) == 2 * 16);
    CHECK(count_label(s.graph, TaskLabel::kDpReduceScatter) == 16);
    CHECK(count_label(s.graph, TaskLabel::kDpAllReduce) == 0);
  }
}

TEST_CASE("Strategies: Megatron TP costs two collectives per layer and direction", "[sim][strategies][tp]") {
  // Megatron-LM (Shoeybi et al. 2019, Fig. 3): the attention and MLP blocks
  // each end in an all-reduce of the [s, b, h] activation (2sbh bytes in
  // bf16): 2 per layer forward, 2 backward.  With sequence parallelism
  // (Korthikanti et al. 2022 Sec. 4.2.2) each becomes an all-gather before
  // the block and a reduce-scatter after it, and backward swaps them: 2 AG +
  // 2 RS either way.  Oracle: the collective model on the TP group (exact).
  const ModelSpec m = small_gpt();
  const ClusterSpec c = load_cluster("dgx-h100");
  const LinkParams lp = link_params(c);
  const Bytes buffer = 2 * 1024 * 1 * 1024;  // 2 s b h
  for (int tp : {2, 4, 8}) {
    const GroupPlacement group = group_placement(tp, tp, c);
    const int64_t ar = collective_cost(Collective::kAllReduce, buffer, group, lp).time.ps();
    const int64_t ag = collective_cost(Collective::kAllGather, buffer, group, lp).time.ps();
    const int64_t rs = collective_cost(Collective::kReduceScatter, buffer, group, lp).time.ps();
    DYNAMIC_SECTION("tp=" << tp << " without SP: 2 all-reduces each way") {
      Plan p;
      p.tp = tp;
      const Layout l = resolved(m, c, tp, p);
      const LayerTimes lt = lower_step(m, c, l, LoweringOptions{}).layer;
      CHECK(lt.tp_comm_forward_ps == 2 * ar);
      CHECK(lt.tp_comm_backward_ps == 2 * ar);
    }
    DYNAMIC_SECTION("tp=" << tp << " with SP: 2 all-gathers + 2 reduce-scatters each way") {
      Plan p;
      p.tp = tp;
      p.sp = true;
      const Layout l = resolved(m, c, tp, p);
      const LayerTimes lt = lower_step(m, c, l, LoweringOptions{}).layer;
      CHECK(lt.tp_comm_forward_ps == 2 * ag + 2 * rs);
      CHECK(lt.tp_comm_backward_ps == 2 * ag + 2 * rs);
    }
  }
}

TEST_CASE("Strategies: representative and full simulation agree exactly", "[sim][strategies]") {
  // Every DP/TP replica of a stage is symmetric, so simulating one rank per
  // stage must give the same timeline as simulating all 16 (bitwise).
  const ModelSpec m = small_gpt();
  const ClusterSpec c = load_cluster("dgx-a100");
  for (int zero : {1, 3}) {
    DYNAMIC_SECTION("dgx-a100, 2 nodes, tp 2, pp 2, dp 4, zero " << zero) {
      Plan p;
      p.tp = 2;
      p.pp = 2;
      p.dp = 4;
      p.zero = zero;
      p.mbs = 1;
      p.gbs = 16;  // 4 micro-batches
      const Layout l = resolved(m, c, 16, p);
      SimulateOptions rep_opt, full_opt;
      full_opt.representative = false;
      const StepReport rep = simulate_step(m, c, l, rep_opt);
      const StepReport full = simulate_step(m, c, l, full_opt);
      REQUIRE(rep.simulated_ranks == 2);
      REQUIRE(full.simulated_ranks == 16 / p.tp);  // one simulated rank per lock-step TP group (lowering.h)
      CHECK(rep.step_time_s == full.step_time_s);
      CHECK(rep.peak_memory_bytes == full.peak_memory_bytes);
      for (int s = 0; s < 2; ++s) {
        CHECK(rep.stages[static_cast<size_t>(s)].simulated_peak_bytes ==
              full.stages[static_cast<size_t>(s)].simulated_peak_bytes);
      }
    }
  }
}

TEST_CASE("Strategies: one simulated rank per TP group gives the every-GPU step", "[sim][strategies]") {
  // Oracle: the same step with every GPU simulated (LoweringOptions::
  // every_gpu, as the executor lowers it).  TP peers run identical programs
  // whose transfers use their own GPUs' links of equal capacity, so folding
  // them into one simulated rank must leave the timeline unchanged to the
  // picosecond: the step and each stage's tracked peak; the breakdown (a
  // mean over tp times fewer ranks) to the last bits of its rounding.
  const ModelSpec m = small_gpt();
  const ClusterSpec c = load_cluster("dgx-a100");
  struct Case {
    int tp, pp, dp, cp, vp, zero, shard_group;
  };
  for (const Case& k : {Case{2, 2, 4, 1, 1, 1, 0}, Case{4, 2, 2, 1, 1, 3, 0}, Case{8, 1, 2, 1, 1, 0, 0},
                        Case{2, 2, 2, 2, 1, 1, 0}, Case{2, 2, 4, 1, 2, 1, 0}, Case{2, 1, 8, 1, 1, 3, 4}}) {
    DYNAMIC_SECTION("tp " << k.tp << " pp " << k.pp << " dp " << k.dp << " cp " << k.cp << " vp " << k.vp << " zero "
                          << k.zero << " shard " << k.shard_group) {
      Plan p;
      p.tp = k.tp;
      p.pp = k.pp;
      p.dp = k.dp;
      p.cp = k.cp;
      p.vp = k.vp;
      p.zero = k.zero;
      p.shard_group = k.shard_group;
      p.mbs = 1;
      p.gbs = 8 * k.dp;
      const Layout l = resolved(m, c, 16, p);
      REQUIRE(l.feasible);
      SimulateOptions so;
      so.representative = false;
      LoweringOptions folded = lowering_options(so), every = folded;
      every.every_gpu = true;
      LoweredStep a = lower_step(m, c, l, folded), b = lower_step(m, c, l, every);
      REQUIRE(a.gpus_per_rank == k.tp);
      REQUIRE(b.gpus_per_rank == 1);
      REQUIRE(static_cast<int>(b.ranks.size()) == 16);
      REQUIRE(static_cast<int>(a.ranks.size()) * k.tp == 16);
      const int64_t tasks_every = b.graph.size();
      const StepReport ra = simulate_lowered(m, c, l, so, std::move(a));
      const StepReport rb = simulate_lowered(m, c, l, so, std::move(b));
      CHECK(ra.step_time_s == rb.step_time_s);
      CHECK_THAT(ra.breakdown.compute, WithinRel(rb.breakdown.compute, 1e-12));
      CHECK_THAT(ra.breakdown.tp_comm, WithinRel(rb.breakdown.tp_comm, 1e-12));
      CHECK_THAT(ra.breakdown.pp_comm, WithinRel(rb.breakdown.pp_comm, 1e-12));
      CHECK_THAT(ra.breakdown.dp_comm, WithinRel(rb.breakdown.dp_comm, 1e-12));
      CHECK_THAT(ra.breakdown.bubble, WithinRel(rb.breakdown.bubble, 1e-12));
      CHECK_THAT(ra.breakdown.optimizer, WithinRel(rb.breakdown.optimizer, 1e-12));
      CHECK(ra.peak_memory_bytes == rb.peak_memory_bytes);
      for (size_t s = 0; s < ra.stages.size(); ++s) {
        CHECK(ra.stages[s].simulated_peak_bytes == rb.stages[s].simulated_peak_bytes);
      }
      // Every task but the replicas' gradient-norm syncs (one per replica
      // either way) exists once per TP peer.
      CHECK(rb.tasks == tasks_every);
      CHECK(ra.tasks < rb.tasks);
      CHECK(rb.tasks <= k.tp * ra.tasks);
    }
  }
}

TEST_CASE("Strategies: representative and full simulation agree for an expert-parallel plan", "[sim][strategies][moe]") {
  // The expert data-parallel groups (ranks ep*etp apart within a stage)
  // are as symmetric as the DP groups: one rank per stage gives the same
  // step as all 16 ranks with their dense and expert gradient reductions.
  ModelSpec m = small_gpt();
  m.has_moe = true;
  m.moe.experts = 4;
  m.moe.top_k = 2;
  m.moe.expert_ffn_hidden = m.ffn_hidden;
  m.moe.shared_ffn_hidden = m.ffn_hidden;
  const ClusterSpec c = load_cluster("dgx-a100");
  for (int etp : {1, 2}) {
    DYNAMIC_SECTION("tp 2, pp 2, dp 4, ep 2, etp " << etp) {
      Plan p;
      p.tp = 2;
      p.pp = 2;
      p.dp = 4;
      p.ep = 2;
      p.etp = etp;
      p.zero = 1;
      p.mbs = 1;
      p.gbs = 16;
      const Layout l = resolved(m, c, 16, p);
      REQUIRE(l.expert_dp == 8 / (2 * etp));
      SimulateOptions rep_opt, full_opt;
      full_opt.representative = false;
      const StepReport rep = simulate_step(m, c, l, rep_opt);
      const StepReport full = simulate_step(m, c, l, full_opt);
      CHECK(rep.step_time_s == Approx(full.step_time_s).epsilon(1e-9));
      CHECK(rep.breakdown.ep_comm > 0);
    }
  }
}

TEST_CASE("Strategies: simulated peak memory matches the closed form per stage", "[sim][strategies][memory]") {
  // The engine tracks static + live activations; estimate_memory counts the
  // micro-batches a schedule holds (1F1B min(p-i, m), GPipe m, interleaved
  // Megatron's warm-up + 1, full recompute + one rematerialised layer).  2%.
  const ModelSpec m = small_gpt();
  const ClusterSpec c = fast_links_cluster();
  struct Case {
    const char* name;
    Plan plan;
  };
  Plan full = pipeline_plan(Schedule::k1F1B, 4, 8);
  full.recompute = Recompute::kFull;
  // Frameworks whose pipeline keeps stage outputs (DeepSpeed, torchtitan),
  // per-op SAC with its re-materialisation, PyTorch's loss buffers.
  Plan deepspeed = pipeline_plan(Schedule::k1F1B, 4, 8);
  deepspeed.framework = Framework::kDeepSpeed;
  Plan partial = pipeline_plan(Schedule::k1F1B, 4, 8);
  partial.recompute = Recompute::kFull;
  partial.recompute_layers = 2;
  Plan partial_v = pipeline_plan(Schedule::kInterleaved, 4, 8, 2);
  partial_v.recompute = Recompute::kFull;
  partial_v.recompute_layers = 1;
  Plan titan = pipeline_plan(Schedule::k1F1B, 4, 8);
  titan.framework = Framework::kTorchtitan;
  titan.recompute = Recompute::kSelective;
  Plan titan_v = pipeline_plan(Schedule::kInterleaved, 4, 8, 2);
  titan_v.framework = Framework::kTorchtitan;
  titan_v.recompute = Recompute::kSelective;
  // With m == p Megatron's interleaved schedule runs every forward first
  // (schedules.py: num_microbatches == pipeline_parallel_size -> all
  // warm-up), so the last stage holds all m losses, not one.
  // A short last stage (4 layers against 5) counts the loss as a layer's
  // place: its chunks are [3, 1 + loss] (chunk_layers).
  Plan short_last = pipeline_plan(Schedule::kInterleaved, 4, 8, 2);
  short_last.stage_layers = {3, 5, 4, 4};
  // 2 layers and the loss over 2 chunks: [2, 0 + loss], a chunk of only the
  // loss, and one of only the embedding ([0 + embedding, 2]).
  Plan loss_only = pipeline_plan(Schedule::kInterleaved, 4, 8, 2);
  loss_only.stage_layers = {2, 6, 6, 2};
  const Case cases[] = {{"1F1B", pipeline_plan(Schedule::k1F1B, 4, 8)},
                        {"GPipe", pipeline_plan(Schedule::kGpipe, 4, 8)},
                        {"interleaved v=2", pipeline_plan(Schedule::kInterleaved, 4, 8, 2)},
                        {"interleaved v=2, m = p", pipeline_plan(Schedule::kInterleaved, 4, 4, 2)},
                        {"interleaved v=2, short first and last stages", short_last},
                        {"interleaved v=2, chunks of only the embedding and only the loss", loss_only},
                        {"1F1B + full recompute", full},
                        {"1F1B + full recompute of 2 layers per chunk", partial},
                        {"interleaved + full recompute of 1 layer per chunk", partial_v},
                        {"DeepSpeed 1F1B", deepspeed},
                        {"torchtitan 1F1B, per-op SAC", titan},
                        {"torchtitan interleaved v=2, per-op SAC", titan_v}};
  for (const Case& k : cases) {
    DYNAMIC_SECTION(k.name) {
      const Layout l = resolved(m, c, 4, k.plan);
      const StepReport r = simulate_step(m, c, l, SimulateOptions{});
      REQUIRE(r.stages.size() == 4);
      for (const StageResult& st : r.stages) {
        INFO("stage " << st.stage);
        CHECK_THAT(st.simulated_peak_bytes, WithinRel(st.closed_form_peak_bytes, 0.02));
      }
    }
  }
  // A loss that outweighs a chunk (a 64k vocabulary against the small GPT's
  // layers) on an uneven split: the last rank's peak comes where its larger
  // chunk's forwards pile up, not where a loss is held, so the loss counts
  // with its chunk (it lives from that chunk's forward to its backward) and
  // the closed form is the walk's figure exactly.
  ModelSpec big_vocab = m;
  big_vocab.vocab = 65536;
  for (const std::vector<int>& split : {std::vector<int>{5, 4, 4, 3}, std::vector<int>{3, 4, 4, 5}, std::vector<int>{4, 4, 4, 4}}) {
    Plan uneven = pipeline_plan(Schedule::kInterleaved, 4, 8, 2);
    uneven.stage_layers = split;
    const StepReport r = simulate_step(big_vocab, c, resolved(big_vocab, c, 4, uneven), SimulateOptions{});
    for (const StageResult& st : r.stages) {
      INFO("split " << split[0] << "," << split[1] << "," << split[2] << "," << split[3] << " stage " << st.stage);
      CHECK_THAT(st.simulated_peak_bytes, WithinRel(st.closed_form_peak_bytes, 1e-9));
    }
  }
}

TEST_CASE("Strategies: async DP with k equal workers has staleness k-1", "[sim][strategies][async]") {
  // Parameter servers apply updates in arrival order.  Equal workers settle
  // into round-robin: between a worker's pull and the application of its next
  // push the other k-1 workers' updates land, so every staleness is k-1
  // (Dean et al. 2012 Downpour; Dutta et al. 2018 "Slow and stale gradients":
  // K-async staleness).  Mean within 0.05, max exact.
  const ModelSpec m = small_gpt();
  const ClusterSpec c = fast_links_cluster();
  for (int k : {2, 4}) {
    DYNAMIC_SECTION("k=" << k) {
      Plan p;
      p.dp_mode = DpMode::kAsync;
      p.mbs = 1;
      const Layout l = resolved(m, c, k, p);
      const StepReport r = simulate_step(m, c, l, SimulateOptions{});
      REQUIRE(r.async);
      REQUIRE(r.staleness.samples > 0);
      CHECK_THAT(r.staleness.mean, WithinAbs(k - 1, 0.05));
      CHECK(r.staleness.max == k - 1);
    }
  }
}

TEST_CASE("Strategies: the same inputs twice give identical reports", "[sim][strategies]") {
  const ModelSpec m = small_gpt();
  const ClusterSpec c = load_cluster("dgx-a100");
  Plan p;
  p.tp = 2;
  p.pp = 2;
  p.dp = 4;
  p.zero = 1;
  p.mbs = 1;
  p.gbs = 16;
  const Layout l = resolved(m, c, 16, p);
  SimulateOptions opt;
  opt.representative = false;
  opt.trace = true;
  const StepReport a = simulate_step(m, c, l, opt), b = simulate_step(m, c, l, opt);
  CHECK(a.step_time_s == b.step_time_s);
  CHECK(a.tokens_per_s == b.tokens_per_s);
  CHECK(a.mfu == b.mfu);
  CHECK(a.hfu == b.hfu);
  CHECK(a.peak_memory_bytes == b.peak_memory_bytes);
  CHECK(a.breakdown.compute == b.breakdown.compute);
  CHECK(a.breakdown.tp_comm == b.breakdown.tp_comm);
  CHECK(a.breakdown.pp_comm == b.breakdown.pp_comm);
  CHECK(a.breakdown.dp_comm == b.breakdown.dp_comm);
  CHECK(a.breakdown.bubble == b.breakdown.bubble);
  CHECK(a.breakdown.optimizer == b.breakdown.optimizer);
  CHECK(a.events == b.events);
  CHECK(a.tasks == b.tasks);
  CHECK(a.trace_json == b.trace_json);
  for (size_t s = 0; s < a.stages.size(); ++s) CHECK(a.stages[s].simulated_peak_bytes == b.stages[s].simulated_peak_bytes);
}

}  // namespace
}  // namespace trainplan
