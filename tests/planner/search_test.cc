// Tests of the plan search: the lower bound is a lower bound, branch and
// bound returns exactly the brute-force top K, the search is deterministic,
// and it explains infeasibility.
#include <catch2/catch.hpp>

#include <limits>
#include <set>
#include <string>

#include "planner/cli/plan_flags.h"
#include "planner/plan/plan_file.h"
#include "planner/search/search.h"
#include "simulator/core/error.h"
#include "simulator/framework/framework.h"
#include "simulator/memory/memory_model.h"
#include "simulator/report/step_report.h"
#include "simulator/taskgraph/step_costs.h"
#include "tests/simulator/fixtures.h"

using namespace trainplan;

namespace {

// Each stage's parameters, as the search hands them to the bounds.
std::vector<double> stage_params_of(const ModelSpec& m, const ClusterSpec& c, const Layout& L) {
  std::vector<double> params;
  for (const StageMemory& st : estimate_memory(m, c, L).stages) params.push_back(st.params);
  return params;
}

double lower_bound_s(const ModelSpec& m, const ClusterSpec& c, const Layout& L) {
  return static_cast<double>(step_time_lower_bound(m, c, L, step_costs(m, c, L.plan), stage_params_of(m, c, L))) *
         1e-12;
}

}  // namespace

TEST_CASE("Search: the lower bound never exceeds the simulated step time", "[planner][search]") {
  // The pruning is exact only if lb <= simulated time for every plan: check
  // it on a grid covering every schedule, ZeRO stage, recompute mode and
  // pipeline shape (oracle: the simulator itself).
  const ModelSpec m = load_model("gpt3-1.3b");
  const ClusterSpec c = load_cluster("dgx-a100");
  int checked = 0;
  for (int tp : {1, 2, 8}) {
    for (int pp : {1, 2, 4}) {
      for (int vp : {1, 2}) {
        for (int zero : {0, 1, 3}) {
          for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
            for (Schedule s : {Schedule::k1F1B, Schedule::kGpipe, Schedule::kInterleaved, Schedule::kNaive}) {
              Plan p;
              p.tp = tp;
              p.pp = pp;
              p.vp = vp;
              p.zero = zero;
              p.recompute = rc;
              p.schedule = s;
              p.schedule_given = true;
              p.mbs = 2;
              p.gbs = 64;
              Layout L = resolve_plan(m, c, 16, p);
              if (!L.feasible) continue;
              const double lb = lower_bound_s(m, c, L);
              const double sim = simulate_step(m, c, L, SimulateOptions{}).step_time_s;
              INFO("tp " << tp << " pp " << pp << " vp " << vp << " zero " << zero << " schedule " << to_string(s));
              CHECK(lb <= sim * (1 + 1e-9));
              ++checked;
            }
          }
        }
      }
    }
  }
  CHECK(checked > 40);
}

TEST_CASE("Search: the schedule and critical-path bounds never exceed the simulated step time", "[planner][search]") {
  // Oracle: the simulator.  pipeline_step_lower_bound runs the plan's own
  // schedule with compute times only; the lowered step's critical path adds
  // every transfer at its uncontended time.  Both must stay at or below the
  // simulated step for uneven stages (32 layers over 3 or 5 stages),
  // interleaved chunks of unequal size, ZeRO-3 (per-layer gathers, with and
  // without parameter offload), DeepSpeed's regather for full recompute and
  // Megatron-Core's overlaps; and the schedule bound must dominate the basic
  // one (it takes the maximum with it).
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  int checked = 0, tighter = 0;
  for (Framework fw : {Framework::kGeneric, Framework::kDeepSpeed, Framework::kMegatronCore}) {
    for (int pp : {1, 3, 4, 5}) {
      for (int vp : {1, 3}) {
        for (int zero : {1, 3}) {
          for (Recompute rc : {Recompute::kNone, Recompute::kFull}) {
            for (Offload off : {Offload::kNone, Offload::kParams}) {
              Plan p;
              p.tp = 2;
              p.pp = pp;
              p.vp = vp;
              p.zero = zero;
              p.recompute = rc;
              p.offload = off;
              p.framework = fw;
              p.schedule = vp > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
              p.schedule_given = true;
              p.mbs = 1;
              p.seq = 2048;
              p.gbs = 120;
              const int gpus = 2 * pp * (pp == 4 ? 2 : 4);  // a whole number of 8-GPU nodes
              Layout L = resolve_plan(m, c, gpus, p);
              if (!L.feasible) continue;
              const std::vector<double> params = stage_params_of(m, c, L);
              const StepCosts costs = step_costs(m, c, L.plan);
              const int64_t basic = step_time_lower_bound(m, c, L, costs, params);
              const int64_t sched = pipeline_step_lower_bound(m, c, L, costs, params);
              LoweredStep step = lower_for_simulation(m, c, L, SimulateOptions{});
              const int64_t path = lowered_step_lower_bound_ps(step, L);
              const double sim = simulate_lowered(m, c, L, SimulateOptions{}, std::move(step)).step_time_s;
              INFO(describe_plan(L.plan) << " framework " << to_string(fw));
              CHECK(sched >= basic);
              CHECK(static_cast<double>(sched) * 1e-12 <= sim * (1 + 1e-12));
              CHECK(static_cast<double>(path) * 1e-12 <= sim * (1 + 1e-12));
              if (sched > basic) ++tighter;
              ++checked;
            }
          }
        }
      }
    }
  }
  CHECK(checked > 60);
  CHECK(tighter > 10);
}

TEST_CASE("Search: the bounds hold where a rank's chunks differ and where zero bubble's stages start late",
          "[planner][search]") {
  // Oracle: the simulator.  Two plans planner_search_random_test found with
  // the basic bound above their simulated step (and so prunable winners):
  //  - interleaved with a partial recompute (the first 2 layers of each
  //    chunk): a rank's chunks are not one run of layers, and its stage was
  //    summed as one (25.56 s bound, 25.44 s step);
  //  - zb-2p on 2 stages: an automatic zero-bubble step is the longest
  //    rank's own span (post-validation), so the later stage's wait for its
  //    first input is no part of it (0.586 s bound, 0.547 s step).
  struct Case {
    const char* model;
    const char* cluster;
    int gpus;
    Plan plan;
  };
  Plan chunks;
  chunks.pp = 4;
  chunks.vp = 4;
  chunks.stage_layers = {8, 9, 9, 6};
  chunks.zero = 1;
  chunks.mbs = 2;
  chunks.gbs = 64;
  chunks.seq = 1024;
  chunks.recompute = Recompute::kFull;
  chunks.recompute_layers = 2;
  chunks.precision = Precision::kFp32;
  chunks.mtp_layers = 1;
  chunks.framework = Framework::kMegatronCore;
  chunks.offload = Offload::kOptimizer;
  Plan zb;
  zb.tp = 2;
  zb.pp = 2;
  zb.mbs = 2;
  zb.gbs = 8;
  zb.seq = 1024;
  zb.schedule = Schedule::kZb2p;
  zb.schedule_given = true;
  for (const Case& cs : {Case{"llama2-7b", "rtx4090-pcie", 4, chunks}, Case{"llama2-7b", "jean-zay-a100", 4, zb}}) {
    const ModelSpec m = load_model(cs.model);
    const ClusterSpec c = load_cluster(cs.cluster);
    const Layout L = resolve_plan(m, c, cs.gpus, cs.plan);
    INFO(describe_plan(cs.plan) << (L.reasons.empty() ? "" : ": " + L.reasons.front()));
    REQUIRE(L.feasible);
    std::vector<double> params, expert_params;
    for (const StageMemory& st : estimate_memory(m, c, L).stages) {
      params.push_back(st.params);
      expert_params.push_back(st.expert_params);
    }
    const StepCosts costs = step_costs(m, c, L.plan);
    const double sim = simulate_step(m, c, L, SimulateOptions{}).step_time_s;
    CHECK(static_cast<double>(step_time_lower_bound(m, c, L, costs, params, expert_params)) * 1e-12 <= sim);
    CHECK(static_cast<double>(pipeline_step_lower_bound(m, c, L, costs, params, expert_params)) * 1e-12 <= sim);
  }
}

TEST_CASE("Search: every listed plan's time is its own simulation", "[planner][search]") {
  // Oracle: simulate_step of each listed plan and of its ties, afresh.  The
  // search runs the engine once per distinct lowered step (equal
  // fingerprints) and prunes on bounds; neither may change a listed time.
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  SearchOptions o;
  o.gbs = 64;
  o.top_k = 8;
  SearchResult r = search_plans(m, c, 16, o);
  REQUIRE(r.plans.size() == 8);
  int ties = 0;
  for (const RankedPlan& rp : r.plans) {
    CHECK(simulate_step(m, c, rp.layout, SimulateOptions{}).step_time_s == rp.report.step_time_s);
    for (const Layout& t : rp.ties) {
      CHECK(simulate_step(m, c, t, SimulateOptions{}).step_time_s == rp.report.step_time_s);
      ++ties;
    }
  }
  CHECK(ties > 0);  // the case exercises equivalent plans
}

TEST_CASE("Search: Megatron-Core plans run the fused loss, and it never makes a step slower", "[planner][search]") {
  // Megatron-Core's --cross-entropy-loss-fusion moves fewer bytes per logit
  // (22 + 10 against 38 + 14, layer_cost_test.cc) and keeps the same memory,
  // so a Megatron-Core search gives it to every plan; the oracle is a fresh
  // simulation of each listed plan without it, which can be no faster (on
  // one stage the loss is on the critical path, so strictly slower there).
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  SearchOptions o;
  o.gbs = 64;
  o.top_k = 5;
  o.framework = Framework::kMegatronCore;
  int slower = 0;
  for (const RankedPlan& rp : search_plans(m, c, 8, o).plans) {
    INFO(describe_plan(rp.layout.plan));
    REQUIRE(rp.layout.plan.cross_entropy_fusion);
    CHECK(simulate_step(m, c, rp.layout, SimulateOptions{}).step_time_s == rp.report.step_time_s);
    Plan unfused = rp.layout.plan;
    unfused.cross_entropy_fusion = false;
    const Layout L = resolve_plan(m, c, rp.layout.gpus, unfused);
    REQUIRE(L.feasible);
    const double t = simulate_step(m, c, L, SimulateOptions{}).step_time_s;
    CHECK(t >= rp.report.step_time_s);
    if (rp.layout.plan.pp == 1 && t > rp.report.step_time_s) ++slower;
  }
  CHECK(slower >= 1);
  // Other frameworks do not run it.
  o.framework = Framework::kTorchtitan;
  for (const RankedPlan& rp : search_plans(m, c, 8, o).plans) CHECK(!rp.layout.plan.cross_entropy_fusion);
}

TEST_CASE("Search: branch and bound returns the brute-force top K", "[planner][search]") {
  // Oracle: with top_k larger than the number of feasible plans, every
  // feasible plan is simulated (brute force); its first 3 must equal the
  // pruned top-3 search, plan for plan and time for time.
  const ModelSpec m = load_model("gpt3-1.3b");
  const ClusterSpec c = load_cluster("dgx-a100");
  SearchOptions o;
  o.gbs = 64;
  o.top_k = 3;
  SearchResult pruned = search_plans(m, c, 16, o);
  o.top_k = 1000000;
  SearchResult brute = search_plans(m, c, 16, o);
  REQUIRE(brute.simulated == brute.feasible);
  REQUIRE(pruned.plans.size() == 3);
  CHECK(pruned.simulated < brute.simulated);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(pruned.plans[i].report.step_time_s == brute.plans[i].report.step_time_s);
    CHECK(describe_plan(pruned.plans[i].layout.plan) == describe_plan(brute.plans[i].layout.plan));
  }
}

TEST_CASE("Search: async plans rank by time to a target loss, and branch and bound stays exact", "[planner][search]") {
  // Oracle 1 (the ranking rule, faults/convergence.h): an async plan's score
  // is its simulated step / its per-sample efficiency at its simulated
  // staleness.  Oracle 2 (brute force): with async plans scored that way
  // the pruned top 3 equals the brute-force top 3, so their bound
  // (step bound / async_efficiency_bound) never prunes a winner.
  const ModelSpec m = load_model("gpt3-1.3b");
  const ClusterSpec c = load_cluster("dgx-a100");
  SearchOptions o;
  o.gbs = 64;
  o.async_dp = true;
  o.convergence = parse_convergence_spec("sharpness=0.02,lr=same", "--convergence");  // async at 8x per sample
  o.top_k = 1000000;
  SearchResult brute = search_plans(m, c, 16, o);
  int async_plans = 0;
  for (const RankedPlan& p : brute.plans) {
    if (p.layout.plan.dp_mode != DpMode::kAsync) continue;
    ++async_plans;
    REQUIRE(p.has_convergence);
    const AsyncConvergence ac = async_convergence(o.convergence, p.layout.plan.dp, p.report.staleness.mean);
    CHECK(ac.converges);
    CHECK(p.score_s == p.report.step_time_s / ac.sample_efficiency);
  }
  REQUIRE(async_plans > 0);
  o.top_k = 3;
  SearchResult pruned = search_plans(m, c, 16, o);
  REQUIRE(pruned.plans.size() == 3);
  for (size_t i = 0; i < 3; ++i) {
    CHECK(pruned.plans[i].score_s == brute.plans[i].score_s);
    CHECK(describe_plan(pruned.plans[i].layout.plan) == describe_plan(brute.plans[i].layout.plan));
  }
  // With the sync learning rate at sharpness 1 every async plan diverges
  // (Levin-May: staleness >= 1 needs a < 1): none is ranked, each is counted.
  o.convergence = parse_convergence_spec("sharpness=1,lr=same", "--convergence");
  o.top_k = 1000000;
  SearchResult diverged = search_plans(m, c, 16, o);
  int64_t rejected = 0;
  for (const auto& [why, n] : diverged.rejected) {
    if (why.rfind("async DP diverges", 0) == 0) rejected += n;
  }
  CHECK(rejected == async_plans);
  for (const RankedPlan& p : diverged.plans) CHECK(p.layout.plan.dp_mode == DpMode::kSync);
}

TEST_CASE("Search: deterministic and counts add up", "[planner][search]") {
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  SearchOptions o;
  o.gbs = 128;
  SearchResult a = search_plans(m, c, 16, o);
  SearchResult b = search_plans(m, c, 16, o);
  REQUIRE(a.plans.size() == b.plans.size());
  for (size_t i = 0; i < a.plans.size(); ++i) {
    CHECK(a.plans[i].report.step_time_s == b.plans[i].report.step_time_s);
    CHECK(describe_plan(a.plans[i].layout.plan) == describe_plan(b.plans[i].layout.plan));
  }
  // Every enumerated plan is accounted for exactly once: invalid + out of
  // memory + feasible = evaluated; feasible = top K + slower (simulated or
  // by bound).
  int64_t invalid = 0, oom = 0, slower = 0;
  for (const auto& [reason, n] : a.rejected) {
    if (reason.rfind("invalid", 0) == 0) invalid += n;
    else if (reason.rfind("out of", 0) == 0) oom += n;
    else slower += n;
  }
  CHECK(invalid + oom + a.feasible == a.evaluated);
  int64_t listed = 0;
  for (const RankedPlan& p : a.plans) listed += 1 + static_cast<int64_t>(p.ties.size());
  CHECK(listed + slower == a.feasible);
  // Ranked best first.
  for (size_t i = 1; i < a.plans.size(); ++i) {
    CHECK(a.plans[i - 1].report.step_time_s <= a.plans[i].report.step_time_s);
  }
}

TEST_CASE("Search: says why plain DDP loses and what to do when nothing fits", "[planner][search]") {
  SECTION("70B on one DGX H100: plain DDP needs 16 bytes per parameter") {
    // 70.55e9 parameters * (2 + 4 + 12) bytes = 1.27e12 B = 1183 GiB > 80 GiB.
    SearchOptions o;
    o.gbs = 64;
    SearchResult r = search_plans(load_model("llama3-70b"), load_cluster("dgx-h100"), 8, o);
    bool found = false;
    for (const FamilyVerdict& v : r.families) {
      if (v.family.rfind("plain DDP", 0) == 0) {
        found = true;
        CHECK(v.verdict.rfind("does not fit: needs 1", 0) == 0);
      }
    }
    CHECK(found);
  }
  SECTION("405B on one DGX A100 node fits nowhere") {
    // Even fully sharded, 405.85e9 * 16 B / 8 GPUs = 756 GiB per GPU.
    SearchOptions o;
    o.gbs = 8;
    SearchResult r = search_plans(load_model("llama3-405b"), load_cluster("dgx-a100"), 8, o);
    CHECK(r.plans.empty());
    CHECK(to_gib(r.min_peak_bytes) > 80);
    CHECK_FALSE(r.advice.empty());
  }
}

TEST_CASE("PlanFile: round trip and strict parsing", "[planner][plan]") {
  PlanFile f;
  f.model = "llama3-8b";
  f.cluster = "dgx-h100";
  f.gpus = 16;
  f.plan.tp = 2;
  f.plan.pp = 2;
  f.plan.dp = 4;
  f.plan.vp = 2;
  f.plan.zero = 1;
  f.plan.mbs = 2;
  f.plan.gbs = 64;
  f.plan.seq = 8192;
  f.plan.sp = true;
  f.plan.schedule = Schedule::kInterleaved;
  f.plan.recompute = Recompute::kSelective;
  f.plan.stage_layers = {16, 16};
  const std::string text = plan_file_json(f);
  PlanFile g = parse_plan_file(text, "p.json");
  CHECK(plan_file_json(g) == text);
  CHECK(describe_plan(g.plan) == describe_plan(f.plan));
  CHECK(g.plan.stage_layers == f.plan.stage_layers);
  SECTION("unknown key") {
    std::string bad = text;
    bad.insert(1, "\"tpp\": 2,");
    REQUIRE_THROWS_WITH(parse_plan_file(bad, "p.json"), Catch::StartsWith("p.json: /tpp: unknown key; allowed: "));
  }
  SECTION("bad enum") {
    std::string bad = text;
    bad.replace(bad.find("\"selective\""), 11, "\"some\"");
    REQUIRE_THROWS_WITH(parse_plan_file(bad, "p.json"),
                        "p.json: /recompute: unknown value \"some\"; allowed: none, selective, full");
  }
}

// Issue 13: exact ties and equivalent plans are listed once.
TEST_CASE("Search: equivalent plans are one entry, the simplest listed", "[planner][search][issue13]") {
  // Llama 3 8B on one DGX H100, default batch (4M tokens = 512 x 8192).
  // ZeRO-1 and ZeRO-2 at the same layout run the same step where nothing
  // but the optimizer states' sharding differs (the gradients are
  // reduce-scattered over the same ranks either way and their memory is
  // not on the critical path): one entry, the lower ZeRO stage listed, the
  // other named as its tie.  (Context parallel no longer ties with data
  // parallel: a ring step's attention loops over 1/cp of the keys, which
  // the flash kernel runs at a lower rate, compute_model.h
  // flash_sequence_factor.)
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  // (Top 60: Ulysses' variants of the context-parallel plans fill much of
  // the top 30.)
  SearchOptions o;
  o.gbs = 512;
  o.top_k = 60;
  SearchResult r = search_plans(m, c, 8, o);
  REQUIRE_FALSE(r.plans.empty());
  const RankedPlan& best = r.plans.front();
  CHECK(best.layout.plan.cp == 1);
  CHECK(best.layout.plan.dp == 8);
  int with_ties = 0;
  for (const RankedPlan& p : r.plans) {
    for (const Layout& t : p.ties) {
      ++with_ties;
      CHECK(simulate_step(m, c, t, SimulateOptions{}).step_time_s == p.report.step_time_s);
      // The listed one is the simpler: no more ZeRO, no more context parallel.
      CHECK(p.layout.plan.zero <= t.plan.zero);
      CHECK(p.layout.plan.cp <= t.plan.cp);
    }
  }
  CHECK(with_ties >= 1);
  // No two listed entries share a score: ties were merged.
  for (size_t i = 1; i < r.plans.size(); ++i) CHECK(r.plans[i].score_s > r.plans[i - 1].score_s);
  SECTION("ZeRO at dp*cp = 1 is not a separate plan") {
    // ZeRO shards over the dp*cp ranks; with one rank, ZeRO-1/2/3 hold the
    // same states as ZeRO-0 (no offload): the enumeration keeps only zero 0.
    SearchOptions one;
    one.gbs = 8;
    one.top_k = 1000000;
    SearchResult single = search_plans(load_model("gpt-0.35b"), load_cluster("dgx-a100"), 1, one);
    for (const RankedPlan& p : single.plans) {
      CHECK(p.layout.plan.zero == 0);
      for (const Layout& t : p.ties) CHECK(t.plan.zero == 0);
    }
  }
}

TEST_CASE("Search: family labels never name a dimension of degree 1", "[planner][search][issue13]") {
  // Brute force over a grid of layouts: a label names TP, PP, CP or DP
  // exactly when that degree is > 1 (model-parallel families), e.g. "PP" for
  // pp 8 dp 1, not "PP + DP".
  for (int tp : {1, 2}) {
    for (int pp : {1, 2}) {
      for (int cp : {1, 2}) {
        for (int dp : {1, 2}) {
          Plan p;
          p.tp = tp;
          p.pp = pp;
          p.cp = cp;
          p.dp = dp;
          const std::string label = plan_label(p);
          INFO(label << " tp " << tp << " pp " << pp << " cp " << cp << " dp " << dp);
          CHECK((label.find("CP") != std::string::npos) == (cp > 1));
          if (tp > 1 || pp > 1) {
            CHECK((label.find("TP") != std::string::npos) == (tp > 1));
            CHECK((label.find("PP") != std::string::npos) == (pp > 1));
            CHECK((label.find("DP") != std::string::npos) == (dp > 1));
          }
        }
      }
    }
  }
}

TEST_CASE("Search: nothing fits without offload, so offload is searched", "[planner][search][issue13]") {
  // Llama 2 7B on 4 x RTX 4090 (24 GiB): without offload the closest plan
  // needs ~31 GiB; optimizer offload (ZeRO-Offload) brings it under 24 GiB.
  // The search widens itself and says so instead of asking for a rerun.
  const ClusterSpec c = load_cluster("rtx4090-pcie");
  SearchOptions o;
  o.gbs = 64;
  SearchResult r = search_plans(load_model("llama2-7b"), c, 4, o);
  REQUIRE_FALSE(r.plans.empty());
  CHECK_FALSE(r.widened.empty());
  CHECK(r.plans.front().layout.plan.offload != Offload::kNone);
  CHECK(r.plans.front().report.peak_memory_bytes <= static_cast<double>(c.gpu.memory));
  SECTION("reasons keep the digits of names") {
    // rule_of() turns the numbers of a reason into N but not those of a
    // name such as rtx4090-pcie ("cluster rtxN-pcie" before issue 13).
    CHECK(rule_of("gpus=6 is not a multiple of the 4 GPUs per node of rtx4090-pcie on A100") ==
          "gpus=N is not a multiple of the N GPUs per node of rtx4090-pcie on A100");
    CHECK(rule_of("tp=3 does not divide heads=32; 2x 1.5") == "tp=N does not divide heads=N; Nx N.N");
    for (const auto& [reason, n] : r.rejected) CHECK(reason.find("rtxN") == std::string::npos);
  }
}

TEST_CASE("Search: a family that misses only the host's memory says so, not a GPU figure below the GPU's") {
  // Llama 2 13B on 4 x RTX 4090 with offload searched: a family's nearest
  // miss can fit the GPU (its states offloaded) and overflow the host
  // (hybrid shard replicates them per shard group: 436 GiB per node of 256).
  // Its verdict must name the host; a verdict in GPU terms must name a need
  // above the GPU's capacity (the memory model's own reason, checked here
  // against the plan's peak).
  const ClusterSpec c = load_cluster("rtx4090-pcie");
  SearchOptions o;
  o.gbs = 64;
  o.offload = true;
  const SearchResult r = search_plans(load_model("llama2-13b"), c, 4, o);
  int host = 0;
  for (const FamilyVerdict& v : r.families) {
    if (v.fits) continue;
    INFO(v.family << ": " << v.verdict);
    if (v.verdict.find("host memory") != std::string::npos) {
      ++host;
      CHECK(v.peak_gib * 1073741824.0 <= static_cast<double>(c.gpu.memory));
    } else {
      CHECK(v.peak_gib * 1073741824.0 > static_cast<double>(c.gpu.memory));
    }
  }
  CHECK(host >= 1);
}

TEST_CASE("Search: a layout that fits only with full recompute also runs with the smallest partial recompute that fits") {
  // Llama 3 70B on 16 H100 (gbs 64): layouts that fit only with full
  // recompute get a partial-recompute plan (Megatron's block method) with
  // the fewest recomputed layers per chunk that fit.  Oracle: a brute force
  // over N of the memory model (fits with N, not with N - 1, not without
  // recompute), and the simulated partial plan beats the same layout with
  // every layer recomputed.
  const ModelSpec m = load_model("llama3-70b");
  const ClusterSpec c = load_cluster("dgx-h100");
  SearchOptions o;
  o.gbs = 64;
  o.top_k = 60;
  const SearchResult r = search_plans(m, c, 16, o);
  int partial = 0;
  for (const RankedPlan& rp : r.plans) {
    const Plan& q = rp.layout.plan;
    if (q.recompute != Recompute::kFull || q.recompute_layers == 0) continue;
    partial += 1;
    INFO(describe_plan(q));
    auto fits = [&](int n) {
      Layout t = rp.layout;
      t.plan.recompute = n == 0 ? Recompute::kNone : Recompute::kFull;
      t.plan.recompute_layers = n;
      return estimate_memory(m, c, t).fits;
    };
    CHECK(fits(q.recompute_layers));
    CHECK_FALSE(fits(q.recompute_layers - 1));
    Layout every = rp.layout;
    every.plan.recompute_layers = 0;
    CHECK(simulate_step(m, c, every, SimulateOptions{}).step_time_s > rp.report.step_time_s);
  }
  CHECK(partial >= 3);
}



TEST_CASE("Search: a large vocabulary's output layer gets its stage fewer layers", "[planner][search]") {
  // GPT-OSS 120B on 64 H100 under Megatron-Core (Megatron-Bridge's GBS
  // 1280): its output layer (201,088 x 2,880) is about 4.6 layers' GEMM
  // work, so the even split leaves the last stage the bottleneck.  Oracles:
  // the listed plans with their own stage split have the least costliest
  // stage of every split of their 36 layers (a brute force over each
  // plan's per-layer, embedding and output times), simulate faster than the
  // same layout split evenly, and keep the lower bound below the simulated
  // time; a search for DeepSpeed, whose pipeline splits evenly, lists none.
  const ModelSpec m = load_model("gpt-oss-120b");
  const ClusterSpec c = load_cluster("dgx-h100");
  SearchOptions o;
  o.gbs = 1280;
  o.top_k = 5;
  o.framework = Framework::kMegatronCore;
  const SearchResult r = search_plans(m, c, 64, o);
  int balanced = 0;
  for (const RankedPlan& rp : r.plans) {
    const Plan& q = rp.layout.plan;
    if (q.stage_layers.empty()) continue;
    balanced += 1;
    INFO(describe_plan(q));
    const StepCosts sc = step_costs(m, c, q);
    std::vector<double> work;
    for (int64_t i = 0; i < m.layers; ++i) {
      work.push_back(static_cast<double>(sc.times_of(i).forward_ps + sc.times_of(i).backward_ps));
    }
    const double first = static_cast<double>(sc.embedding_forward_ps + sc.embedding_backward_ps);
    const double last = static_cast<double>(sc.output_forward_ps + sc.output_backward_ps);
    auto costliest = [&](const std::vector<int>& stages) { return testing::costliest_stage(work, stages, first, last); };
    REQUIRE(q.pp <= 4);  // the brute force below enumerates C(35, pp - 1) splits
    double best = std::numeric_limits<double>::infinity();
    testing::for_each_split(static_cast<int>(m.layers), q.pp,
                            [&](const std::vector<int>& split) { best = std::min(best, costliest(split)); });
    CHECK(costliest(q.stage_layers) == Approx(best).epsilon(1e-12));
    Plan even = q;
    even.stage_layers.clear();
    const Layout even_layout = resolve_plan(m, c, rp.layout.gpus, even);
    REQUIRE(even_layout.feasible);
    CHECK(costliest(even_layout.stage_layers) > costliest(q.stage_layers));
    const double even_step_s = simulate_step(m, c, even_layout, SimulateOptions{}).step_time_s;
    CHECK(even_step_s > rp.report.step_time_s);
    // What recommend prints beside it: the same plan at the default split.
    CHECK(rp.default_split == even_layout.stage_layers);
    CHECK(rp.default_split_fits == estimate_memory(m, c, even_layout).fits);
    if (rp.default_split_fits) CHECK(rp.default_split_step_s == even_step_s);
    CHECK(lower_bound_s(m, c, rp.layout) <= rp.report.step_time_s * (1 + 1e-9));
  }
  CHECK(balanced >= 1);
  o.framework = Framework::kDeepSpeed;
  for (const RankedPlan& rp : search_plans(m, c, 64, o).plans) CHECK(rp.layout.plan.stage_layers.empty());
}

TEST_CASE("Search: host-bound layers are searched with CUDA graphs, GPU-bound ones are not", "[planner][search]") {
  // Qwen3-30B-A3B on one GB200 node (Grace issues an op call in 37 us,
  // TE#2053) under Megatron-Core, FP8, GBS 512: its MoE layers are
  // host-bound eager, so the search also tries them with Megatron-Bridge's
  // MoE graph modules.  Oracles: a listed graphed plan simulates faster
  // than the same plan eager, and eager its layers are host-bound (the
  // condition that put it in the search); the lower bound stays below its
  // simulated time.  On H100 (x86 host, 13.5 us a call) the same search's
  // layers are GPU-bound and no listed plan is graphed; DeepSpeed runs no
  // graphs.
  const ModelSpec m = load_model("qwen3-30b-a3b");
  const ClusterSpec gb200 = load_cluster("gb200-nvl72");
  SearchOptions o;
  o.gbs = 512;
  o.top_k = 5;
  o.framework = Framework::kMegatronCore;
  Plan fp8;
  REQUIRE(set_precision("fp8", &fp8));
  o.precision = fp8.precision;
  o.fp8_recipe = fp8.fp8_recipe;  // the GPU's default recipe (MXFP8 on Blackwell)
  const SearchResult r = search_plans(m, gb200, 8, o);
  int graphed = 0;
  for (const RankedPlan& rp : r.plans) {
    const Plan& q = rp.layout.plan;
    if (q.cuda_graph == 0) continue;
    graphed += 1;
    INFO(describe_plan(q));
    CHECK(q.cuda_graph == (kCgAttn | kCgMoeRouter | kCgMoePreprocess));
    Plan eager = q;
    eager.cuda_graph = 0;
    const Layout eager_layout = resolve_plan(m, gb200, rp.layout.gpus, eager);
    REQUIRE(eager_layout.feasible);
    const StepReport eager_report = simulate_step(m, gb200, eager_layout, SimulateOptions{});
    CHECK(eager_report.moe_layer.host_bound_ps > 0);
    CHECK(eager_report.step_time_s > rp.report.step_time_s);
    CHECK(lower_bound_s(m, gb200, rp.layout) <= rp.report.step_time_s * (1 + 1e-9));
  }
  CHECK(graphed >= 1);
  CHECK(r.plans.front().layout.plan.cuda_graph != 0);
  const ClusterSpec h100 = load_cluster("dgx-h100");
  for (const RankedPlan& rp : search_plans(m, h100, 8, o).plans) CHECK(rp.layout.plan.cuda_graph == 0);
  o.framework = Framework::kDeepSpeed;
  o.fp8_recipe = Fp8Recipe::kNone;
  for (const RankedPlan& rp : search_plans(m, gb200, 8, o).plans) CHECK(rp.layout.plan.cuda_graph == 0);
}

TEST_CASE("Search: where the expert group spans nodes the flex dispatcher is searched too", "[planner][search]") {
  // Qwen3-30B-A3B on 4 DGX H100 nodes under Megatron-Core, no dispatcher
  // named: a layout whose ep x etp group spans nodes is also tried with
  // DeepEP (NVLink domains of 8 GPUs).  Oracles: every listed DeepEP plan's
  // expert group spans nodes and it simulates faster than the same plan
  // with the all-to-all dispatcher (else that one would be listed
  // instead); the lower bound stays below its time.  Naming the dispatcher
  // (alltoall) searches none.
  const ModelSpec m = load_model("qwen3-30b-a3b");
  const ClusterSpec c = load_cluster("dgx-h100");
  SearchOptions o;
  o.gbs = 1024;
  o.top_k = 5;
  o.framework = Framework::kMegatronCore;
  int flex = 0;
  for (const RankedPlan& rp : search_plans(m, c, 32, o).plans) {
    const Plan& q = rp.layout.plan;
    if (q.moe_dispatcher == MoeDispatcher::kAllToAll) continue;
    flex += 1;
    INFO(describe_plan(q));
    CHECK(q.moe_dispatcher == MoeDispatcher::kDeepEp);
    CHECK(int64_t{q.ep} * q.etp > c.gpus_per_node);
    Plan a2a = q;
    a2a.moe_dispatcher = MoeDispatcher::kAllToAll;
    const Layout L = resolve_plan(m, c, rp.layout.gpus, a2a);
    REQUIRE(L.feasible);
    CHECK(simulate_step(m, c, L, SimulateOptions{}).step_time_s > rp.report.step_time_s);
    CHECK(lower_bound_s(m, c, rp.layout) <= rp.report.step_time_s * (1 + 1e-9));
  }
  CHECK(flex >= 1);
  o.moe_dispatcher_given = true;
  for (const RankedPlan& rp : search_plans(m, c, 32, o).plans) {
    CHECK(rp.layout.plan.moe_dispatcher == MoeDispatcher::kAllToAll);
    // Megatron-Core's fused router costs nothing, so every MoE plan of a
    // Megatron-Core search has it (Plan::moe_router_fusion).
    CHECK(rp.layout.plan.moe_router_fusion);
  }
  // Other frameworks do not run it.
  o.framework = Framework::kTorchtitan;
  for (const RankedPlan& rp : search_plans(m, c, 32, o).plans) CHECK(!rp.layout.plan.moe_router_fusion);
}

TEST_CASE("Search: Megatron-Core MoE plans run their shared experts beside the all-to-alls unless --ep-overlap",
          "[planner][search]") {
  // TransformerConfig: --moe-shared-expert-overlap needs shared experts and
  // the alltoall or flex dispatcher (ep*etp > 1), and excludes
  // --overlap-moe-expert-parallel-comm.  A small MoE model given one shared
  // expert, on one DGX H100 under Megatron-Core: each listed plan has the
  // overlap exactly where those rules allow it.
  ModelSpec m = load_model("gpt-tiny-moe");
  m.moe.shared_experts = 1;
  m.moe.shared_ffn_hidden = 512;
  const ClusterSpec c = load_cluster("dgx-h100");
  SearchOptions o;
  o.gbs = 64;
  o.top_k = 100;
  o.framework = Framework::kMegatronCore;
  int with = 0;
  for (const RankedPlan& rp : search_plans(m, c, 8, o).plans) {
    const Plan& q = rp.layout.plan;
    INFO(describe_plan(q));
    const bool allowed = int64_t{q.ep} * q.etp > 1 && !q.ep_overlap;
    CHECK(q.moe_shared_expert_overlap == allowed);
    with += q.moe_shared_expert_overlap ? 1 : 0;
    // The search's cached layer costs are the plan's own (its step as a
    // fresh simulation gives it): plans that differ only in the overlap do
    // not share them.
    CHECK_THAT(rp.report.step_time_s, Catch::Matchers::WithinRel(simulate_step(m, c, rp.layout, SimulateOptions{}).step_time_s, 1e-9));
  }
  CHECK(with >= 1);
}

TEST_CASE("Search: a plan's memory does not fall as its micro-batch grows, nor with TP or EP overlap",
          "[planner][search]") {
  // The search proposes a layout's next micro-batch past a plan that does
  // not fit only where larger_microbatch_peak_lower_bound says it might
  // fit, and its overlapped forms (--tp-comm-overlap,
  // --overlap-moe-expert-parallel-comm) only where the plan they come from
  // fits (search.cc overlap_variants_to_try): exact only if those never need
  // less memory.  Oracle: the memory model itself on a grid of every
  // schedule, ZeRO stage, recompute mode and pipeline shape (context
  // parallel or not), for a dense and an MoE model.  Per stage, 1F1B holds
  // min(p - i, m) micro-batches of mbs sequences with m * mbs the stage's
  // share of the global batch, so where m >= p its activations grow with
  // mbs; the overlapped forms add buffers (TE userbuffers) or a micro-batch
  // in flight.  And the bound is not vacuous: under GPipe, which holds every
  // micro-batch, the larger micro-batch holds less on this grid (Qwen3 at
  // cp 2: the busiest expert rank's expected share of a micro-batch's tokens,
  // expected_max_rank_load, is larger for fewer tokens).
  struct Case {
    const char* model;
    int gpus;
    std::vector<int> eps;
  };
  int compared = 0, tp_overlaps = 0, ep_overlaps = 0, fewer = 0;
  for (const Case& k : {Case{"llama3-8b", 16, {1}}, Case{"qwen3-30b-a3b", 32, {1, 8, 32}}}) {
    const ModelSpec m = load_model(k.model);
    const ClusterSpec c = load_cluster("dgx-h100");
    auto peak = [&](const Plan& p, double* bytes) {
      const Layout L = resolve_plan(m, c, k.gpus, p);
      if (!L.feasible) return false;
      *bytes = estimate_memory(m, c, L).peak_bytes;
      return true;
    };
    for (int tp : {1, 2, 8}) {
      for (int pp : {1, 2, 4}) {
        for (int vp : {1, 2}) {
          for (Schedule s : {Schedule::k1F1B, Schedule::kGpipe, Schedule::kNaive, Schedule::kZb1p, Schedule::kZb2p,
                             Schedule::kZbv, Schedule::kDualPipeV, Schedule::kInterleaved, Schedule::kInterleavedZb}) {
            const bool chunked = s == Schedule::kInterleaved || s == Schedule::kInterleavedZb;
            if (chunked != (vp > 1)) continue;
            for (int zero : {0, 1, 3}) {
              for (Recompute rc : {Recompute::kNone, Recompute::kSelective, Recompute::kFull}) {
                for (int ep : k.eps) {
                  for (int cp : {1, 2}) {
                  for (int64_t gbs : {16, 256}) {
                  for (int mbs : {1, 2, 4}) {
                    Plan p;
                    p.cp = cp;
                    p.framework = Framework::kMegatronCore;
                    p.tp = tp;
                    p.pp = pp;
                    p.vp = vp;
                    p.schedule = s;
                    p.schedule_given = true;
                    p.zero = zero;
                    p.recompute = rc;
                    p.sp = tp > 1;
                    p.ep = ep;
                    p.etp = 1;
                    p.mbs = mbs;
                    p.gbs = gbs;
                    double base = 0;
                    if (!peak(p, &base)) continue;
                    INFO(describe_plan(p));
                    Plan larger = p;
                    larger.mbs = 2 * mbs;
                    double more = 0;
                    if (peak(larger, &more)) {
                      const Layout L = resolve_plan(m, c, k.gpus, p);
                      const MemoryReport mem = estimate_memory(m, c, L);
                      CHECK(more >= larger_microbatch_peak_lower_bound(L.plan, mem, larger.mbs) * (1 - 1e-12));
                      compared += 1;
                      if (more < base) fewer += 1;
                    }
                    Plan tpo = p;
                    tpo.tp_comm_overlap = true;
                    if (peak(tpo, &more)) {
                      CHECK(more >= base);
                      compared += 1;
                      tp_overlaps += 1;
                    }
                    Plan epo = p;
                    epo.ep_overlap = true;
                    epo.delay_wgrad = true;
                    if (ep_overlap_conflicts(epo).empty() && peak(epo, &more)) {
                      CHECK(more >= base);
                      compared += 1;
                      ep_overlaps += 1;
                    }
                  }
                  }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  CHECK(compared > 500);
  CHECK(tp_overlaps > 50);
  CHECK(ep_overlaps > 50);
  CHECK(fewer > 0);
}
