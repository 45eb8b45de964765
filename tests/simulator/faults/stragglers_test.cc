// Tests of the straggler model: the grammar and its errors, the expected
// maximum of n slowdowns against closed forms, a numeric integral and
// sampling, and the simulated tax of sync and async data parallel.
#include "simulator/faults/stragglers.h"

#include <cmath>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "tests/simulator/fixtures.h"

#include "simulator/core/error.h"
#include "simulator/report/step_report.h"

namespace trainplan {
namespace {

using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

// Communication is negligible: 1e15 B/s links with zero latency, a 10
// TFLOP/s GPU (as tests/simulator/report/strategies_test.cc).
ClusterSpec fast_links_cluster() { return testing::fast_links_cluster(); }

// 8 layers, h = 1024, s = 1024, a 128-token vocabulary.
ModelSpec small_gpt() { return testing::small_gpt(8); }

Layout resolved(const ModelSpec& m, const ClusterSpec& c, int gpus, const Plan& p) {
  const Layout l = resolve_plan(m, c, gpus, p);
  REQUIRE(l.feasible);
  return l;
}

StragglerReport run(const ModelSpec& m, const ClusterSpec& c, const Layout& l, const std::string& spec, int samples,
                    uint64_t seed = 7) {
  StragglerOptions o;
  o.spec = parse_straggler_spec(spec, "--stragglers");
  o.samples = samples;
  o.seed = seed;
  return simulate_stragglers(m, c, l, o);
}

const std::string kGrammar = kStragglerGrammar;

TEST_CASE("Stragglers: the grammar", "[sim][faults][stragglers]") {
  SECTION("every item") {
    const StragglerSpec s = parse_straggler_spec(
        "jitter=lognormal:0.05,op_jitter=uniform:0.9:1.2,slow_gpus=0.001:2,slow_nodes=0.01:1.5,degraded_link=0.02:0.5",
        "--stragglers");
    CHECK(s.jitter.kind == SlowdownDistribution::Kind::kLognormal);
    CHECK(s.jitter.a == 0.05);
    CHECK(s.op_jitter.kind == SlowdownDistribution::Kind::kUniform);
    CHECK(s.op_jitter.describe() == "uniform:0.9:1.2");
    CHECK(s.slow_gpus.probability == 0.001);
    CHECK(s.slow_gpus.factor == 2);
    CHECK(s.slow_nodes.factor == 1.5);
    CHECK(s.degraded_link.factor == 0.5);
  }
  SECTION("errors name the flag, the item and what is allowed") {
    const char* dists = "allowed: lognormal:SIGMA, normal:SIGMA, uniform:LO:HI, exp:MEAN";
    CHECK_THROWS_WITH(parse_straggler_spec("", "--stragglers"), "--stragglers: empty specification; " + kGrammar);
    CHECK_THROWS_WITH(parse_straggler_spec("foo=1", "--stragglers"),
                      "--stragglers: unknown item \"foo\"; " + kGrammar);
    CHECK_THROWS_WITH(parse_straggler_spec("jitter", "--stragglers"),
                      "--stragglers: \"jitter\" is not KEY=VALUE; " + kGrammar);
    CHECK_THROWS_WITH(parse_straggler_spec("jitter=exp:0.1,jitter=exp:0.2", "--stragglers"),
                      "--stragglers: \"jitter\" given twice; " + kGrammar);
    CHECK_THROWS_WITH(parse_straggler_spec("jitter=gauss:0.1", "--stragglers"),
                      std::string("--stragglers: jitter=gauss:0.1: unknown distribution \"gauss:0.1\"; ") + dists);
    CHECK_THROWS_WITH(parse_straggler_spec("jitter=lognormal", "--stragglers"),
                      std::string("--stragglers: jitter=lognormal: expected lognormal:SIGMA; ") + dists);
    CHECK_THROWS_WITH(parse_straggler_spec("jitter=lognormal:x", "--stragglers"),
                      "--stragglers: jitter=lognormal:x: \"x\" is not a number; " + kGrammar);
    CHECK_THROWS_WITH(parse_straggler_spec("jitter=lognormal:3", "--stragglers"),
                      "--stragglers: jitter=lognormal:3: SIGMA 3 is not in [0, 2]; e.g. lognormal:0.05 for 5% jitter");
    CHECK_THROWS_WITH(parse_straggler_spec("slow_nodes=0.01:0.5", "--stragglers"),
                      "--stragglers: slow_nodes=0.01:0.5: slowdown factor F 0.5 is not in [1, 100]; P:F with F the "
                      "slowdown factor, e.g. slow_nodes=0.01:1.5");
    CHECK_THROWS_WITH(parse_straggler_spec("slow_gpus=2:1.5", "--stragglers"),
                      "--stragglers: slow_gpus=2:1.5: probability P 2 is not in [0, 1]; P:F with F the slowdown "
                      "factor, e.g. slow_gpus=0.01:1.5");
    CHECK_THROWS_WITH(parse_straggler_spec("degraded_link=0.1:1.5", "--stragglers"),
                      "--stragglers: degraded_link=0.1:1.5: bandwidth fraction F 1.5 is not in (0, 1]; P:F with F "
                      "the bandwidth fraction, e.g. degraded_link=0.02:0.5");
    CHECK_THROWS_WITH(parse_straggler_spec("jitter=uniform:1.2:1.1", "--stragglers"),
                      "--stragglers: jitter=uniform:1.2:1.1: HI 1.1 is not in [1.2, 100]; HI must be >= LO, e.g. "
                      "uniform:0.95:1.1");
    CHECK_THROWS_AS(parse_straggler_spec("jitter=exp:0.1,", "--stragglers"), InputError);
  }
}

// E[max of n] = integral of x d(F^n) = integral of x n F^{n-1} f dx: the
// density form, by the trapezoidal rule on a fine grid, independent of the
// library's survival-function form.
double density_form_lognormal(double sigma, int n) {
  const double mu = -sigma * sigma / 2;
  const double pi = 3.14159265358979323846;
  double sum = 0;
  const double lo = std::exp(mu - 12 * sigma), hi = std::exp(mu + 12 * sigma);
  const int steps = 400000;
  const double h = (hi - lo) / steps;
  for (int i = 0; i <= steps; ++i) {
    const double x = lo + i * h;
    const double z = (std::log(x) - mu) / sigma;
    const double pdf = std::exp(-z * z / 2) / (x * sigma * std::sqrt(2 * pi));
    const double cdf = 0.5 * std::erfc(-z / std::sqrt(2.0));
    const double v = x * n * std::pow(cdf, n - 1) * pdf;
    sum += (i == 0 || i == steps) ? v / 2 : v;
  }
  return sum * h;
}

TEST_CASE("Stragglers: expected max of n slowdowns", "[sim][faults][stragglers]") {
  SECTION("lognormal against the density-form integral (rel 1e-6) and sampling (4 standard errors)") {
    Rng rng(Catch::rngSeed());
    for (double sigma : {0.02, 0.1, 0.3}) {
      for (int n : {1, 8, 64, 1024}) {
        SlowdownDistribution d;
        d.kind = SlowdownDistribution::Kind::kLognormal;
        d.a = sigma;
        const double e = expected_max(d, n);
        CHECK_THAT(e, WithinRel(density_form_lognormal(sigma, n), 1e-6));
        // Monte Carlo: 4000 maxima.
        const int trials = 4000;
        double s = 0, s2 = 0;
        for (int t = 0; t < trials; ++t) {
          double mx = 0;
          for (int i = 0; i < n; ++i) mx = std::max(mx, d.sample(rng));
          s += mx;
          s2 += mx * mx;
        }
        const double mean = s / trials, se = std::sqrt(std::max(1e-30, s2 / trials - mean * mean) / trials);
        INFO("sigma " << sigma << " n " << n << " integral " << e << " sampled " << mean << " +- " << se);
        CHECK(std::fabs(mean - e) < 4 * se + 1e-12);
      }
    }
  }
  SECTION("n = 1 of a mean-1 lognormal is 1") {
    SlowdownDistribution d;
    d.kind = SlowdownDistribution::Kind::kLognormal;
    d.a = 0.2;
    CHECK_THAT(expected_max(d, 1), WithinRel(1.0, 1e-7));
  }
  SECTION("closed forms: uniform a + (b-a) n/(n+1); exponential 1 + mean H_n") {
    // Max of n U[a,b]: F^n = ((x-a)/(b-a))^n, E = a + (b-a) n/(n+1).
    // Max of n Exp(mean) = mean * sum_{k=1..n} 1/k (Renyi's representation).
    SlowdownDistribution u;
    u.kind = SlowdownDistribution::Kind::kUniform;
    u.a = 0.9;
    u.b = 1.3;
    SlowdownDistribution x;
    x.kind = SlowdownDistribution::Kind::kExponential;
    x.a = 0.05;
    for (int n : {1, 2, 16, 256}) {
      CHECK_THAT(expected_max(u, n), WithinRel(0.9 + 0.4 * n / (n + 1.0), 1e-7));
      double h = 0;
      for (int k = 1; k <= n; ++k) h += 1.0 / k;
      CHECK_THAT(expected_max(x, n), WithinRel(1 + 0.05 * h, 1e-7));
    }
  }
}

TEST_CASE("Stragglers: no slowdown, no tax; every rank agrees with one rank per stage", "[sim][faults][stragglers]") {
  // Without randomness every DP replica is identical, so the full-mode step
  // equals the representative one (DESIGN.md "Scale") and the tax is 0.
  const ModelSpec m = small_gpt();
  const ClusterSpec c = load_cluster("dgx-a100");
  Plan p;
  p.tp = 2;
  p.pp = 2;
  p.mbs = 1;
  p.gbs = 32;
  const Layout l = resolved(m, c, 16, p);
  const StragglerReport r = run(m, c, l, "jitter=lognormal:0,slow_nodes=0:2", 2);
  const StepReport rep = simulate_step(m, c, l, SimulateOptions{});
  CHECK(r.simulated_ranks == 8);  // 16 GPUs, one simulated rank per lock-step TP pair (lowering.h)
  CHECK_THAT(r.base_step_s, WithinRel(rep.step_time_s, 1e-9));
  CHECK(r.step_mean_s == r.base_step_s);
  CHECK(r.tax == 0);
}

TEST_CASE("Stragglers: sync DP pays E[max] of the per-GPU jitter", "[sim][faults][stragglers]") {
  // Compute-bound DDP (negligible communication): rank r's step is f_r times
  // its compute C + optimizer O, and the gradient all-reduce of the last
  // bucket waits for the slowest rank, so T = max_r f_r (C + O) + t_comm and
  //   tax = (E[max of n f] - 1) (C + O) / T_base = (E[max] - 1) * busy_base.
  // 64 sampled steps: the SE of the mean max of 16 lognormal(0.1) is
  // ~0.045/8 = 0.0056 against E[max] - 1 = 0.17, i.e. 3.3%; tolerance 12%.
  const ModelSpec m = small_gpt();
  const ClusterSpec c = fast_links_cluster();
  Plan p;
  p.mbs = 1;
  p.gbs = 16;
  const Layout l = resolved(m, c, 16, p);
  const StragglerReport r = run(m, c, l, "jitter=lognormal:0.1", 64);
  SlowdownDistribution d;
  d.kind = SlowdownDistribution::Kind::kLognormal;
  d.a = 0.1;
  const double predicted = (expected_max(d, 16) - 1) * r.base_busy_fraction;
  INFO("tax " << r.tax << " predicted " << predicted << " busy " << r.base_busy_fraction);
  CHECK(r.base_busy_fraction > 0.95);
  CHECK_THAT(r.tax, WithinRel(predicted, 0.12));
  CHECK_THAT(r.jitter_max_tax, WithinRel(expected_max(d, 16) - 1, 1e-9));
  // The ranks reach the gradient synchronisations at different times now.
  CHECK(r.base_arrivals.range_max_s < 1e-9);
  CHECK(r.arrivals.syncs > 0);
  CHECK(r.arrivals.range_mean_s > 0);
  CHECK(r.busy_fraction < r.base_busy_fraction);
}

TEST_CASE("Stragglers: a lone GPU loses nothing to mean-1 jitter", "[sim][faults][stragglers]") {
  // E[max of 1] = E[f] = 1: no one to wait for.  Per-step jitter over 64
  // samples: SE = 0.1/8 = 1.25%; per-op jitter averages over ~20 tasks too.
  const ModelSpec m = small_gpt();
  const ClusterSpec c = fast_links_cluster();
  Plan p;
  p.mbs = 1;
  p.gbs = 1;
  const Layout l = resolved(m, c, 1, p);
  CHECK_THAT(run(m, c, l, "jitter=lognormal:0.1", 64).tax, WithinAbs(0.0, 0.05));
  CHECK_THAT(run(m, c, l, "op_jitter=lognormal:0.1", 64).tax, WithinAbs(0.0, 0.02));
}

TEST_CASE("Stragglers: one slow GPU slows its whole TP group and the DP barrier", "[sim][faults][stragglers]") {
  // Every GPU slow by 1.5 (P = 1): each compute task takes 1.5x its compute
  // part, TP communication unchanged and communication negligible, so the
  // step grows by 50% of its compute share (2%: kernels overlapped with
  // gradient all-reduces run slower, and that overlap shrinks).
  const ModelSpec m = small_gpt();
  const ClusterSpec c = fast_links_cluster();
  Plan p;
  p.tp = 2;
  p.mbs = 1;
  p.gbs = 4;
  const Layout l = resolved(m, c, 8, p);
  const StragglerReport all = run(m, c, l, "slow_gpus=1:1.5", 1);
  CHECK(all.tax <= 0.5 + 1e-9);
  CHECK_THAT(all.tax, WithinRel(0.5 * all.base_busy_fraction, 0.02));
}

TEST_CASE("Stragglers: slow_rank=R:F stretches one rank, as validate --inject slow executes", "[sim][faults][stragglers]") {
  // DDP on 4 GPUs with blocking gradient all-reduces (the cpu executor's
  // semantics, simulate_options_for("cpu")): every bucket waits for the
  // slow rank, and nothing overlaps its compute.  With rank 2's compute C
  // and optimizer O stretched by F and the collectives D unchanged, the
  // step is F (C + O) + D against C + O + D (closed form), so
  // tax = (F - 1)(C + O) / (C + O + D).  The arrival spread at each
  // gradient sync is the slow rank's extra compute before it: > 0, and 0
  // without it.
  const ModelSpec m = small_gpt();
  const ClusterSpec c = load_cluster("dgx-a100");
  Plan p;
  p.mbs = 1;
  p.gbs = 8;
  const Layout l = resolved(m, c, 4, p);
  SimulateOptions so;
  so.representative = false;
  so.p2p = LoweringOptions::P2p::kAsync;
  so.blocking_dp = true;
  so.cp_overlap = false;
  const StepReport base = simulate_step(m, c, l, so);
  StragglerOptions o;
  o.spec = parse_straggler_spec("slow_rank=2:1.5", "--stragglers");
  o.samples = 1;
  o.simulate = so;
  const StragglerReport r = simulate_stragglers(m, c, l, o);
  const double co = base.breakdown.compute + base.breakdown.optimizer;
  CHECK_THAT(r.base_step_s, WithinRel(base.step_time_s, 1e-9));
  CHECK_THAT(r.tax, WithinRel(0.5 * co / base.step_time_s, 1e-3));
  CHECK(r.base_arrivals.range_mean_s == 0);
  CHECK(r.arrivals.range_mean_s > 0);
  // Another rank: the same tax (the ranks are symmetric).
  o.spec = parse_straggler_spec("slow_rank=0:1.5", "--stragglers");
  CHECK_THAT(simulate_stragglers(m, c, l, o).tax, WithinRel(r.tax, 1e-9));
  // A rank the plan lacks is bad input.
  o.spec = parse_straggler_spec("slow_rank=4:1.5", "--stragglers");
  CHECK_THROWS_AS(simulate_stragglers(m, c, l, o), InputError);
}

TEST_CASE("Stragglers: a degraded NVLink doubles the TP communication inside the layers", "[sim][faults][stragglers]") {
  // TP 8 on one dgx-a100 node, no DP or PP: the step is the layers' compute
  // C and TP communication X one after the other, then the optimizer.  With
  // the node's fabric at half bandwidth (P = 1) X takes twice as long and
  // nothing else changes: step' = step + X (closed form), X being the
  // report's tp_comm (every rank's, each in lock-step).
  const ModelSpec m = small_gpt();
  const ClusterSpec c = load_cluster("dgx-a100");
  Plan p;
  p.tp = 8;
  p.mbs = 1;
  p.gbs = 2;
  const Layout l = resolved(m, c, 8, p);
  SimulateOptions so;
  so.representative = false;
  const StepReport base = simulate_step(m, c, l, so);
  REQUIRE(base.breakdown.tp_comm > 0.05 * base.step_time_s);
  const StragglerReport r = run(m, c, l, "degraded_nvlink=1:0.5", 1);
  CHECK_THAT(r.step_mean_s, WithinRel(base.step_time_s + base.breakdown.tp_comm, 1e-4));
  CHECK(run(m, c, l, "degraded_nvlink=0:0.5", 1).tax == 0);
  // Inter-node ports degraded instead: nothing crosses a node here.
  CHECK(run(m, c, l, "degraded_link=1:0.5", 1).tax == 0);
}

TEST_CASE("Stragglers: a degraded link slows every ring through it", "[sim][faults][stragglers]") {
  // DDP over 2 dgx-a100 nodes: the gradient all-reduce crosses both nodes'
  // NICs.  With every port at half bandwidth (P = 1) the exposed DP
  // communication grows and each sample is the same.
  const ModelSpec m = small_gpt();
  const ClusterSpec c = load_cluster("dgx-a100");
  Plan p;
  p.mbs = 1;
  p.gbs = 16;
  const Layout l = resolved(m, c, 16, p);
  const StragglerReport r = run(m, c, l, "degraded_link=1:0.5", 2);
  CHECK(r.tax > 0);
  CHECK(r.step_p50_s == r.step_max_s);
  CHECK(run(m, c, l, "degraded_link=0:0.5", 2).tax == 0);
}

TEST_CASE("Stragglers: async DP keeps its throughput, pays in staleness", "[sim][faults][stragglers][async]") {
  // k equal workers: round-robin, staleness k-1 (strategies_test.cc).  Under
  // per-step jitter a sync step waits for the slowest of k (E[max] - 1 of
  // lognormal(0.2) over 8 = 0.29), while async workers run at their mean
  // speed (E[f] = 1): throughput within 5%, and by Little's law the mean
  // staleness stays about k-1 while its spread widens.  8 servers and 4
  // sequences per iteration keep the servers (CPU Adam, 1e9 params/s each)
  // below a quarter busy: a server-bound run would be round-robin whatever
  // the jitter.
  const ModelSpec m = small_gpt();
  const ClusterSpec c = fast_links_cluster();
  const int k = 8;
  Plan a;
  a.dp_mode = DpMode::kAsync;
  a.mbs = 4;
  a.ps_servers = 8;
  const StragglerReport async = run(m, c, resolved(m, c, k, a), "jitter=lognormal:0.2", 8);
  REQUIRE(async.async);
  CHECK_THAT(async.base_staleness.mean, WithinAbs(k - 1, 0.05));
  CHECK(async.base_staleness.max == k - 1);
  CHECK(async.tokens_per_s > 0.95 * async.base_tokens_per_s);
  CHECK_THAT(async.staleness.mean, WithinAbs(k - 1, 0.5));
  CHECK(async.staleness.max > k - 1);
  Plan s;
  s.mbs = 4;
  s.gbs = 4 * k;
  const StragglerReport sync = run(m, c, resolved(m, c, k, s), "jitter=lognormal:0.2", 8);
  CHECK(sync.tax > 0.15);
}

TEST_CASE("Stragglers: same seed, same report; another seed, other draws", "[sim][faults][stragglers]") {
  const ModelSpec m = small_gpt();
  const ClusterSpec c = fast_links_cluster();
  Plan p;
  p.mbs = 1;
  p.gbs = 16;
  const Layout l = resolved(m, c, 16, p);
  const std::string spec = "jitter=lognormal:0.1,op_jitter=exp:0.01,slow_nodes=0.3:1.2";
  const StragglerReport a = run(m, c, l, spec, 4, 11), b = run(m, c, l, spec, 4, 11), d = run(m, c, l, spec, 4, 12);
  CHECK(a.step_mean_s == b.step_mean_s);
  CHECK(a.step_p90_s == b.step_p90_s);
  CHECK(a.arrivals.range_mean_s == b.arrivals.range_mean_s);
  CHECK(a.busy_fraction == b.busy_fraction);
  CHECK(a.step_mean_s != d.step_mean_s);
}

}  // namespace
}  // namespace trainplan
