// Tests of the plan search: the lower bound is a lower bound, branch and
// bound returns exactly the brute-force top K, the search is deterministic,
// and it explains infeasibility.
#include <catch2/catch.hpp>

#include <set>
#include <string>

#include "planner/cli/plan_flags.h"
#include "planner/plan/plan_file.h"
#include "planner/search/search.h"
#include "simulator/core/error.h"
#include "simulator/memory/memory_model.h"
#include "simulator/report/step_report.h"
#include "simulator/taskgraph/step_costs.h"

using namespace trainplan;

namespace {

double lower_bound_s(const ModelSpec& m, const ClusterSpec& c, const Layout& L) {
  MemoryReport mem = estimate_memory(m, c, L);
  std::vector<double> params;
  for (const StageMemory& st : mem.stages) params.push_back(st.params);
  return static_cast<double>(step_time_lower_bound(m, c, L, step_costs(m, c, L.plan), params)) * 1e-12;
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
  CHECK(static_cast<int64_t>(a.plans.size()) + slower == a.feasible);
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
      if (v.family == "plain DDP") {
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
