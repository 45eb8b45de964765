// Megatron-Core's --overlap-moe-expert-parallel-comm (Plan::ep_overlap): the
// combined 1F1B order against Megatron-Core's own rules (schedules.py,
// combined_1f1b.py, TransformerConfig), what it hides in the simulated step
// against the closed form of its unpaired passes, and the extra micro-batch
// it holds against the pass order.
#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

#include "simulator/memory/memory_model.h"
#include "simulator/report/step_report.h"
#include "simulator/schedule/pipeline_schedule.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"
#include "simulator/taskgraph/step_costs.h"
#include "tests/simulator/fixtures.h"

namespace trainplan {
namespace {

using Catch::Matchers::WithinRel;

std::string text(const std::vector<PipeOp>& ops) {
  std::string out;
  for (const PipeOp& op : ops) {
    if (!out.empty()) out += ' ';
    if (op.overlapped) out += '*';
    out += op.kind == PipeOp::Kind::kForward ? 'F' : 'B';
    out += std::to_string(op.microbatch) + "." + std::to_string(op.chunk);
  }
  return out;
}

TEST_CASE("EpOverlap: without pipelining, F0 alone, then each forward merged with the previous backward",
          "[sim][taskgraph][moe]") {
  // combined_1f1b_schedule_for_no_pipelining: "The forward step for the
  // first microbatch is executed alone", then F(i) with B(i-1), then "The
  // backward step for the last microbatch is executed alone".  (*: merged.)
  const PipelineSchedule s = build_pipeline_schedule(Schedule::k1F1B, 1, 4, 1, true);
  REQUIRE(s.size() == 1);
  CHECK(text(s[0]) == "F0.0 *F1.0 *B0.0 *F2.0 *B1.0 *F3.0 *B2.0 B3.0");
  // One micro-batch: nothing to merge.
  CHECK(text(build_pipeline_schedule(Schedule::k1F1B, 1, 1, 1, true)[0]) == "F0.0 B0.0");
}

TEST_CASE("EpOverlap: the interleaved order runs one more warm-up forward, then merged (F, B) pairs",
          "[sim][taskgraph][moe]") {
  // schedules.py get_pp_rank_microbatches: warm-up = (p - r - 1) * 2 +
  // (v - 1) * p, plus one under overlap_moe_expert_parallel_comm ("one extra
  // micro-batch forward step before the 1f1b stages"), capped at m * v; then
  // every steady-state forward and the backward after it run merged; the
  // remaining backwards alone.  Against the plain interleaved order: the
  // same passes, one fewer steady-state pair.
  for (int p : {2, 4}) {
    for (int v : {2, 3}) {
      for (int m : {p, 2 * p, 4 * p}) {
        INFO("p=" << p << " v=" << v << " m=" << m);
        const PipelineSchedule plain = build_pipeline_schedule(Schedule::kInterleaved, p, m, v);
        const PipelineSchedule comb = build_pipeline_schedule(Schedule::kInterleaved, p, m, v, true);
        for (int r = 0; r < p; ++r) {
          const std::vector<PipeOp>& ops = comb[static_cast<size_t>(r)];
          const int total = m * v;
          const int warmup = m == p ? total : std::min((p - r - 1) * 2 + (v - 1) * p + 1, total);
          int leading = 0;
          while (leading < static_cast<int>(ops.size()) && ops[static_cast<size_t>(leading)].kind == PipeOp::Kind::kForward)
            ++leading;
          // The warm-up forwards, then the first pair's forward.
          CHECK(leading == std::min(warmup + 1, total));
          int merged = 0;
          for (size_t k = 0; k < ops.size(); ++k) {
            if (!ops[k].overlapped) continue;
            ++merged;
            // Merged passes come as a forward and the backward right after it.
            if (ops[k].kind == PipeOp::Kind::kForward) {
              REQUIRE(k + 1 < ops.size());
              CHECK(ops[k + 1].kind == PipeOp::Kind::kBackward);
              CHECK(ops[k + 1].overlapped);
            }
          }
          CHECK(merged == 2 * (total - warmup));
          // Same passes as the plain order, each once.
          std::vector<PipeOp> a = ops, b = plain[static_cast<size_t>(r)];
          auto key = [](const PipeOp& x) { return std::make_tuple(static_cast<int>(x.kind), x.microbatch, x.chunk); };
          auto less = [&](const PipeOp& x, const PipeOp& y) { return key(x) < key(y); };
          std::sort(a.begin(), a.end(), less);
          std::sort(b.begin(), b.end(), less);
          CHECK(a == b);
        }
        // It runs to the end without deadlock (the executor aborts otherwise).
        CHECK(simulate_pipeline_unit_time(comb, v, 1.0, 2.0).makespan > 0);
      }
    }
  }
}

TEST_CASE("EpOverlap: Megatron-Core's rules", "[sim][taskgraph][moe]") {
  // TransformerConfig.__post_init__ under overlap_moe_expert_parallel_comm.
  const ModelSpec model = load_model("qwen3-30b-a3b");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan base;
  base.ep = 8;
  base.zero = 1;
  base.mbs = 1;
  base.gbs = 256;
  base.framework = Framework::kMegatronCore;
  base.ep_overlap = true;
  auto reasons = [&](const Plan& p, int gpus) {
    const Layout L = resolve_plan(model, c, gpus, p);
    std::string all;
    for (const std::string& r : L.reasons) all += r + "\n";
    return std::make_pair(L.feasible, all);
  };
  CHECK(reasons(base, 16).first);
  Plan p = base;
  p.ep = 1;
  CHECK_THAT(reasons(p, 16).second, Catch::Matchers::Contains("ep overlap needs ep >= 2"));
  p = base;
  p.pp = 2;
  CHECK_THAT(reasons(p, 16).second, Catch::Matchers::Contains("ep overlap with pp > 1 runs on the interleaved"));
  p.vp = 2;
  CHECK(reasons(p, 16).first);
  // Only 1F1B and interleaved have a combined order, with or without a pipeline.
  p = base;
  p.schedule = Schedule::kGpipe;
  p.schedule_given = true;
  CHECK_THAT(reasons(p, 16).second, Catch::Matchers::Contains("built on the 1f1b or interleaved schedule"));
  p = base;
  p.recompute = Recompute::kFull;
  CHECK_THAT(reasons(p, 16).second, Catch::Matchers::Contains("other than full"));
  p = base;
  p.recompute = Recompute::kSelective;
  p.recompute_modules = kRcLayernorm | kRcMoe;
  CHECK_THAT(reasons(p, 16).second, Catch::Matchers::Contains("cannot recompute the moe module"));
  p.recompute_modules = kRcLayernorm | kRcMoeAct;
  CHECK(reasons(p, 16).first);
  p = base;
  p.framework = Framework::kTorchtitan;
  CHECK_THAT(reasons(p, 16).second, Catch::Matchers::Contains("use --framework megatron-core"));
}

TEST_CASE("EpOverlap: the merged passes hide their all-to-alls; the unpaired first forward and last backward do not",
          "[sim][taskgraph][moe]") {
  // Qwen3-30B-A3B on 2 DGX H100 nodes, ep 8, no pipeline, 8 micro-batches.
  // In each merged (F(i), B(i-1)) each pass's compute exceeds the other's
  // all-to-all time (checked below), so a merged pass exposes none; what is
  // left is one forward's and one backward's all-to-alls (F0 and B7): the
  // exposed all-to-all time of the same plan with a single micro-batch,
  // where nothing is merged.  The step shrinks by what was hidden, less the
  // partner compute's slowdown while the all-to-all kernels hold their SMs:
  // hidden x 16/132 (NCCL's 16 channels of H100's 132 SMs).
  const ModelSpec model = load_model("qwen3-30b-a3b");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan plan;
  plan.ep = 8;
  plan.zero = 1;
  plan.mbs = 2;
  plan.framework = Framework::kMegatronCore;
  auto run = [&](bool overlap, int64_t gbs) {
    Plan q = plan;
    q.ep_overlap = overlap;
    q.gbs = gbs;
    const Layout L = resolve_plan(model, c, 16, q);
    REQUIRE(L.feasible);
    return std::make_pair(L, simulate_step(model, c, L, SimulateOptions{}));
  };
  const auto [L8, off] = run(false, 256);
  const auto [L8o, on] = run(true, 256);
  const auto [L1, one] = run(true, 32);
  REQUIRE(L8.microbatches == 8);
  REQUIRE(L1.microbatches == 1);
  const StepCosts sc = step_costs(model, c, L8o.plan);
  const LayerTimes& lt = sc.times_of(0);  // every Qwen3-30B-A3B layer is an MoE layer
  REQUIRE(lt.ep_comm_forward_ps > 0);
  CHECK(lt.forward_ps - lt.ep_comm_forward_ps > lt.ep_comm_backward_ps);
  CHECK(lt.backward_ps - lt.ep_comm_backward_ps > lt.ep_comm_forward_ps);
  CHECK_THAT(on.breakdown.ep_comm, WithinRel(one.breakdown.ep_comm, 1e-6));
  CHECK(off.breakdown.ep_comm > 5 * on.breakdown.ep_comm);
  const double hidden_s = off.breakdown.ep_comm - on.breakdown.ep_comm;
  const double f = 16.0 / 132.0;
  CHECK(sc.ep_comm_sm_share == Approx(f));
  CHECK_THAT(on.step_time_s, WithinRel(off.step_time_s - hidden_s * (1 - f), 1e-6));
  CHECK_THAT(on.breakdown.compute, WithinRel(off.breakdown.compute + hidden_s * f, 1e-6));
}

TEST_CASE("EpOverlap: --delay-wgrad-compute hides a merged backward's all-to-all under its own W too",
          "[sim][taskgraph][moe]") {
  // Qwen3-30B-A3B on 2 DGX H100 nodes with ep 16: the expert all-to-alls
  // cross the NICs and a backward's exceeds its partner forward's compute.
  // The combined 1F1B without pipelining merges (F_i, B_i-1) for i = 1..7;
  // in each, the backward's all-to-all eB is hidden up to the forward's
  // compute Fc, and with delay_wgrad_compute up to Fc + W, W the backward's
  // own weight-gradient GEMMs (model_chunk_schedule_plan.py runs backward_dw
  // after the dispatch).  The forwards' all-to-alls are hidden alike in both.
  // So the exposed all-to-all time falls by exactly
  // 7 x (min(eB, Fc + W) - min(eB, Fc)), all 48 layers being one chunk, and
  // the step by that less the partner compute's slowdown under the kernels'
  // SMs (NCCL's 16 channels of H100's 132: x (1 - 16/132)).
  const ModelSpec model = load_model("qwen3-30b-a3b");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan plan;
  plan.ep = 16;
  plan.zero = 1;
  plan.mbs = 1;
  plan.gbs = 128;
  plan.framework = Framework::kMegatronCore;
  plan.ep_overlap = true;
  auto run = [&](bool delay) {
    Plan q = plan;
    q.delay_wgrad = delay;
    const Layout L = resolve_plan(model, c, 16, q);
    REQUIRE(L.feasible);
    REQUIRE(L.microbatches == 8);
    return simulate_step(model, c, L, SimulateOptions{});
  };
  const StepReport off = run(false), on = run(true);
  const StepCosts sc = step_costs(model, c, resolve_plan(model, c, 16, plan).plan);
  const LayerTimes& lt = sc.times_of(0);
  const double layers = static_cast<double>(model.layers);
  const double eB = layers * static_cast<double>(lt.ep_comm_backward_ps);
  const double fc = layers * static_cast<double>(lt.forward_ps - lt.tp_comm_forward_ps - lt.ep_comm_forward_ps);
  const double w = layers * static_cast<double>(lt.weight_grad_ps);
  REQUIRE(eB > fc);  // the backward's all-to-all outlasts its partner's compute
  const double gain_s = 7 * (std::min(eB, fc + w) - std::min(eB, fc)) * 1e-12;
  REQUIRE(gain_s > 0.05);
  CHECK_THAT(off.breakdown.ep_comm - on.breakdown.ep_comm, WithinRel(gain_s, 1e-6));
  CHECK_THAT(off.step_time_s - on.step_time_s, WithinRel(gain_s * (1 - 16.0 / 132.0), 1e-3));
  // Megatron-Core: "overlap_moe_expert_parallel_comm must be enabled when
  // enabling delay_wgrad_compute".
  Plan q = plan;
  q.ep_overlap = false;
  q.delay_wgrad = true;
  const Layout bad = resolve_plan(model, c, 16, q);
  CHECK_FALSE(bad.feasible);
  CHECK(bad.reasons.front().find("delay wgrad compute needs ep overlap") != std::string::npos);
}

TEST_CASE("EpOverlap: one more micro-batch in flight, as the pass order holds", "[sim][taskgraph][moe]") {
  // Without pipelining F1 runs before B0: two micro-batches' activations at
  // the peak instead of one.  Interleaved: the extra warm-up forward; on
  // the last rank it is an output chunk, so two losses are held.  Oracle:
  // the peak count of the combined order itself.
  CHECK(inflight_chunks(Schedule::k1F1B, 1, 8, 1, 0) == 1);
  CHECK(inflight_chunks(Schedule::k1F1B, 1, 8, 1, 0, true) == 2);
  CHECK(inflight_chunks(Schedule::k1F1B, 1, 1, 1, 0, true) == 1);
  for (int r = 0; r < 4; ++r) {
    INFO("rank " << r);
    const PipelineSchedule s = build_pipeline_schedule(Schedule::kInterleaved, 4, 16, 2, true);
    CHECK(inflight_chunks(Schedule::kInterleaved, 4, 16, 2, r, true) ==
          peak_microbatches_in_flight(s[static_cast<size_t>(r)]));
    CHECK(inflight_chunks(Schedule::kInterleaved, 4, 16, 2, r, true) ==
          inflight_chunks(Schedule::kInterleaved, 4, 16, 2, r) + 1);
  }
  // The closed form agrees with the simulated peak on every stage.
  const ModelSpec model = load_model("qwen3-30b-a3b");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan p;
  p.pp = 2;
  p.vp = 2;
  p.ep = 8;
  p.zero = 1;
  p.mbs = 1;
  p.gbs = 256;
  p.recompute = Recompute::kSelective;
  p.recompute_modules = kRcLayernorm | kRcMoeAct;
  p.framework = Framework::kMegatronCore;
  p.ep_overlap = true;
  const Layout L = resolve_plan(model, c, 32, p);
  REQUIRE(L.feasible);
  const StepReport sim = simulate_step(model, c, L, SimulateOptions{});
  REQUIRE(sim.stages.size() == 2);
  for (const StageResult& st : sim.stages) {
    INFO("stage " << st.stage);
    CHECK_THAT(st.simulated_peak_bytes, WithinRel(st.closed_form_peak_bytes, 1e-6));
  }
  // And the extra micro-batch costs memory: the same plan without the overlap peaks lower on every stage.
  Plan q = p;
  q.ep_overlap = false;
  const StepReport plain = simulate_step(model, c, resolve_plan(model, c, 32, q), SimulateOptions{});
  for (size_t i = 0; i < 2; ++i) CHECK(plain.stages[i].simulated_peak_bytes < sim.stages[i].simulated_peak_bytes);
}

TEST_CASE("EpOverlap: the dispatch kernels hold their SMs", "[sim][taskgraph][moe]") {
  // Oracles: NCCL's all-to-all on its 16 channels, one SM each (the
  // engine's kNcclChannels); DeepEP's normal kernels on Buffer.num_sms = 20
  // (Megatron-Core's historical moe_deepep_num_sms); HybridEP's dispatch and
  // combine on 32 SMs inside one NVLink domain and 8 across domains
  // (deepseek-ai/DeepEP 098da2a6de hybrid_ep_buffer.py).  Shares of H100's
  // 132 SMs and of the gb200-nvl72 file's 152.
  const ClusterSpec h100 = load_cluster("dgx-h100");
  const ClusterSpec gb200 = load_cluster("gb200-nvl72");
  Plan p;
  p.ep = 8;
  p.etp = 1;
  CHECK(ep_comm_sm_share(h100, p) == Approx(16.0 / 132));
  p.moe_dispatcher = MoeDispatcher::kDeepEp;
  CHECK(ep_comm_sm_share(h100, p) == Approx(20.0 / 132));
  p.moe_dispatcher = MoeDispatcher::kHybridEp;
  p.ep = 64;  // inside the 64-GPU domain
  CHECK(ep_comm_sm_share(gb200, p) == Approx(32.0 / 152));
  p.ep = 128;  // two domains
  CHECK(ep_comm_sm_share(gb200, p) == Approx(8.0 / 152));
}

TEST_CASE("SharedExpertOverlap: the shared experts hide the token all-to-alls up to their own time",
          "[sim][taskgraph][moe]") {
  // Megatron-Core --moe-shared-expert-overlap (shared_experts.py,
  // token_dispatcher.py): FC1 and the activation of the shared experts run
  // on their own stream beside the dispatch all-to-alls (tokens, then
  // scores), FC2 beside the combine; in backward the transposes beside
  // their backward.  Oracle: the exposed expert-parallel time falls by
  // min(dispatch + scores, FC1 + act) + min(combine, FC2) per pass, the ops'
  // own times as the plan without the overlap charges them, and the compute
  // grows by that hidden time x the collective kernels' SM share (they keep
  // 16 of the H100's 132 SMs).  DeepSeek-V3 (one shared expert of 2048),
  // ep 8 inside a DGX H100, mbs 1 x 4096 tokens: GPU-bound.
  const ModelSpec m = load_model("deepseek-v3");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan p;
  p.pp = 16;
  p.ep = 8;
  p.mbs = 1;
  p.seq = 4096;
  p.gbs = 1024;
  p.zero = 1;
  p.framework = Framework::kMegatronCore;
  const Layout off = resolve_plan(m, c, 256, p);
  REQUIRE(off.feasible);
  p.moe_shared_expert_overlap = true;
  const Layout on = resolve_plan(m, c, 256, p);
  REQUIRE(on.feasible);
  auto moe_kind = [&](const Plan& q) {
    for (const LayerCharges& k : layer_charges(m, c, q))
      if (k.moe()) return k;
    FAIL("no MoE layer");
    return LayerCharges{};
  };
  const LayerCharges a = moe_kind(off.plan), b = moe_kind(on.plan);
  REQUIRE(a.times.host_bound_ps == 0);
  REQUIRE(b.times.host_bound_ps == 0);
  int64_t disp_f = 0, disp_b = 0, comb_f = 0, comb_b = 0, in_f = 0, in_b = 0, out_f = 0, out_b = 0;
  for (const OpCharge& ch : a.ops) {
    const std::string& n = ch.op.name;
    if (n == "permute" || n == "score_dispatch") {
      disp_f += ch.comm_forward_ps;
      disp_b += ch.comm_backward_ps;
    }
    if (n == "combine") {
      comb_f = ch.comm_forward_ps;
      comb_b = ch.comm_backward_ps;
    }
    if (n == "shared_fc1" || n == "shared_swiglu") {
      in_f += ch.forward_ps;
      in_b += ch.backward_ps;
    }
    if (n == "shared_fc2") {
      out_f = ch.forward_ps;
      out_b = ch.backward_ps;
    }
  }
  REQUIRE(disp_f > 0);
  REQUIRE(in_f > 0);
  const int64_t hidden_f = std::min(disp_f, in_f) + std::min(comb_f, out_f);
  const int64_t hidden_b = std::min(disp_b, in_b) + std::min(comb_b, out_b);
  CHECK(a.times.ep_comm_forward_ps - b.times.ep_comm_forward_ps == hidden_f);
  CHECK(a.times.ep_comm_backward_ps - b.times.ep_comm_backward_ps == hidden_b);
  const double share = 16.0 / 132;
  CHECK_THAT(static_cast<double>(b.times.forward_ps - (a.times.forward_ps - hidden_f)),
             WithinRel(static_cast<double>(hidden_f) * share, 1e-3));
  CHECK_THAT(static_cast<double>(b.times.backward_ps - (a.times.backward_ps - hidden_b)),
             WithinRel(static_cast<double>(hidden_b) * share, 1e-3));
  // The ops still add up to the layer.
  int64_t f = 0, bw = 0;
  for (const OpCharge& ch : b.ops) {
    f += ch.forward_ps + ch.comm_forward_ps;
    bw += ch.backward_ps + ch.comm_backward_ps;
  }
  CHECK(f == b.times.forward_ps);
  CHECK(bw == b.times.backward_ps);

  // TransformerConfig's rules: shared experts, an all-to-all to hide (ep*etp
  // > 1), not with --ep-overlap, no recompute of the shared experts; only
  // Megatron-Core runs it.
  using testing::reasons_mention;
  CHECK(reasons_mention(resolve_plan(load_model("qwen3-30b-a3b"), c, 8, [] {
          Plan q;
          q.ep = 8;
          q.gbs = 64;
          q.framework = Framework::kMegatronCore;
          q.moe_shared_expert_overlap = true;
          return q;
        }()),
                        "needs shared experts"));
  Plan q = p;
  q.ep_overlap = true;
  CHECK(reasons_mention(resolve_plan(m, c, 256, q), "exclude each other"));
  q = p;
  q.recompute = Recompute::kSelective;
  q.recompute_modules = kRcSharedExperts;
  CHECK(reasons_mention(resolve_plan(m, c, 256, q), "cannot recompute the shared_experts module"));
  q = p;
  q.framework = Framework::kTorchtitan;
  CHECK(reasons_mention(resolve_plan(m, c, 256, q), "is Megatron-Core's"));
}

}  // namespace
}  // namespace trainplan
