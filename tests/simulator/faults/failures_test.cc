// Tests of the failure model: the closed form against the Monte Carlo, the
// optimal checkpoint interval against Young/Daly and a numeric search, and
// the checkpoint size against the plan's sharding.
#include "simulator/faults/failures.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>

#include <catch2/catch.hpp>

#include "simulator/cost/layer_cost.h"
#include "simulator/faults/faults.h"
#include "simulator/memory/memory_model.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {
namespace {

using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

RunModel run_model(double step_s, int64_t steps, double mtbf_s, double checkpoint_s, double load_s, double down_s) {
  RunModel m;
  m.step_s = step_s;
  m.steps = steps;
  m.rate_per_s = mtbf_s > 0 ? 1 / mtbf_s : 0;
  m.checkpoint_s = checkpoint_s;
  m.load_s = load_s;
  m.downtime_s = down_s;
  return m;
}

// Golden-section search for the maximum of steady_goodput over log(tau):
// independent of the library's root finding.
double golden_section_optimum(const RunModel& m, double lo, double hi) {
  const double phi = (std::sqrt(5.0) - 1) / 2;
  double a = std::log(lo), b = std::log(hi);
  double x1 = b - phi * (b - a), x2 = a + phi * (b - a);
  double f1 = steady_goodput(m, std::exp(x1)), f2 = steady_goodput(m, std::exp(x2));
  for (int i = 0; i < 200; ++i) {
    if (f1 < f2) {
      a = x1;
      x1 = x2;
      f1 = f2;
      x2 = a + phi * (b - a);
      f2 = steady_goodput(m, std::exp(x2));
    } else {
      b = x2;
      x2 = x1;
      f2 = f1;
      x1 = b - phi * (b - a);
      f1 = steady_goodput(m, std::exp(x1));
    }
  }
  return std::exp(0.5 * (a + b));
}

TEST_CASE("Failures: Young/Daly hold where checkpoints are cheap", "[sim][faults][failures]") {
  // Young (1974) minimises the first-order waste delta/tau + tau/(2M):
  // tau = sqrt(2 delta M).  Exact optimum (failures.h):
  // tau* = sqrt(2 delta M) - 2 delta/3 + O(delta^1.5/M^0.5), so with
  // delta/M = 1e-4 Young is within 2/3 sqrt(delta/(2M)) = 0.5%, Daly's
  // second-order formula within ~1e-5.  The golden-section maximum of the
  // goodput agrees with the root to 1e-6.
  const double mtbf = 100000, delta = 10;
  const RunModel m = run_model(1.0, 1000000, mtbf, delta, 30, 600);
  const double tau = optimal_interval_s(m);
  CHECK_THAT(tau, WithinRel(young_interval_s(delta, mtbf), 0.05));
  CHECK_THAT(tau, WithinRel(young_interval_s(delta, mtbf), 0.006));
  CHECK_THAT(tau, WithinRel(daly_interval_s(delta, mtbf), 1e-4));
  CHECK_THAT(tau, WithinRel(golden_section_optimum(m, 1, 1e6), 1e-6));
  // Whole steps: the chosen interval minimises the whole run's expected time
  // (its last, shorter segment included), within 1% of tau*.
  const int64_t k = optimal_interval_steps(m);
  CHECK_THAT(static_cast<double>(k) * m.step_s, WithinRel(tau, 0.01));
  for (int64_t other : {k - 1, k + 1, static_cast<int64_t>(std::llround(tau))}) {
    CHECK(expected_run_s(m, k) <= expected_run_s(m, other));
  }
}

TEST_CASE("Failures: where Young/Daly drift", "[sim][faults][failures]") {
  // delta/M = 0.1: the -2 delta/3 term is 2/3 * 10 = 6.7% of sqrt(2 delta M)
  // = 447: Young overestimates; the exact optimum is still the argmax.
  const RunModel m = run_model(1.0, 1000000, 1000, 100, 0, 0);
  const double tau = optimal_interval_s(m);
  CHECK(tau < young_interval_s(100, 1000));
  CHECK_THAT(tau, WithinRel(golden_section_optimum(m, 1, 1e5), 1e-6));
  CHECK(steady_goodput(m, tau) > steady_goodput(m, young_interval_s(100, 1000)));
  CHECK_THAT(young_interval_s(100, 1000) - tau, WithinRel(2.0 / 3 * 100, 0.25));
}

TEST_CASE("Failures: restart and load times do not move the optimum", "[sim][faults][failures]") {
  // E(x) = (1/lambda + D) e^{lambda L} (e^{lambda x} - 1): D and L multiply
  // every segment alike, so tau* depends on lambda and delta only.
  const RunModel a = run_model(2.0, 100000, 20000, 60, 0, 0);
  const RunModel b = run_model(2.0, 100000, 20000, 60, 600, 3600);
  CHECK(optimal_interval_s(a) == optimal_interval_s(b));
  CHECK(optimal_interval_steps(a) == optimal_interval_steps(b));
  CHECK(steady_goodput(b, optimal_interval_s(b)) < steady_goodput(a, optimal_interval_s(a)));
}

TEST_CASE("Failures: the Monte Carlo converges to the closed form", "[sim][faults][failures]") {
  // Segments are independent (memoryless failures), so E[wall] = sum of
  // E(x_i) exactly; with 4000 runs the Monte Carlo mean is within 5 standard
  // errors (sample SD / sqrt(4000)) of it.  Five, not four: the test compares
  // 8 means for any --rng-seed, and a 4-sigma bound fails one of them in about
  // 1 seed of 2,000 (seed 23 gives z = -4.4 here).  Over 300 seeds the z-scores
  // of every case had mean within 0.06 of 0 and SD within 0.05 of 1 (no bias),
  // so the wider bound still catches any error above ~0.1% of the mean.
  for (const RunModel& m : {run_model(10.0, 20000, 36000, 30, 60, 900), run_model(1.0, 50000, 3000, 5, 20, 300)}) {
    for (int64_t k : {int64_t{1}, int64_t{50}, optimal_interval_steps(m), int64_t{5000}}) {
      const MonteCarloResult mc = monte_carlo_run(m, k, 4000, Catch::rngSeed());
      const double expected = expected_run_s(m, k);
      const double se = mc.std_s / std::sqrt(4000.0);
      INFO("k " << k << " mc " << mc.mean_s << " expected " << expected << " se " << se);
      CHECK(std::fabs(mc.mean_s - expected) < 5 * se + 1e-9 * expected);
      // The breakdown adds up to the wall time.
      const WallBreakdown& b = mc.breakdown;
      CHECK_THAT(b.useful + b.checkpoint + b.lost + b.downtime + b.load, WithinRel(mc.mean_s, 1e-9));
      CHECK(mc.p50_s <= mc.p90_s);
    }
  }
}

TEST_CASE("Failures: the closed-form breakdown matches the Monte Carlo", "[sim][faults][failures]") {
  // Oracle: the Monte Carlo's mean breakdown.  Each part is a mean of
  // per-run sums; 4000 runs keep it within a few percent of the expectation
  // (downtime and lost work vary the most; 5% is > 4 standard errors here).
  const RunModel m = run_model(1.0, 50000, 3000, 5, 20, 300);
  for (int64_t k : {int64_t{50}, optimal_interval_steps(m), int64_t{5000}}) {
    const MonteCarloResult mc = monte_carlo_run(m, k, 4000, 7);
    const WallBreakdown e = expected_breakdown(m, k);
    INFO("k " << k);
    CHECK(e.useful == mc.breakdown.useful);
    CHECK_THAT(e.checkpoint, WithinRel(mc.breakdown.checkpoint, 1e-9));
    CHECK_THAT(e.downtime, WithinRel(mc.breakdown.downtime, 0.05));
    CHECK_THAT(e.load, WithinRel(mc.breakdown.load, 0.05));
    CHECK_THAT(e.lost, WithinRel(mc.breakdown.lost, 0.05));
    CHECK_THAT(expected_failures(m, k), WithinRel(mc.failures_mean, 0.05));
    // Its parts add up to the closed-form run time.
    CHECK_THAT(e.useful + e.checkpoint + e.lost + e.downtime + e.load, WithinRel(expected_run_s(m, k), 1e-9));
  }
}

TEST_CASE("Failures: a run that fails faster than it can checkpoint cannot run", "[sim][faults][failures]") {
  // --mtbf-gpu 1s on 8 GPUs: lambda = 8/s against 1 s steps and a 5 s
  // checkpoint, so E(x) ~ e^{8 x} / 8 per segment: goodput ~ 0.  The
  // Monte Carlo would loop once per failure for ever; it is skipped and the
  // closed form reported (mc.runs == 0), and the verdict says why.
  const ModelSpec model = load_model("gpt3-1.3b");
  const ClusterSpec cluster = load_cluster("dgx-a100");
  const Layout layout = resolve_plan(model, cluster, 8, Plan{});
  FailureModel fm;
  fm.mtbf_gpu_s = 1;
  fm.storage_bytes_per_s = 100e9;
  const FailureReport r = analyze_failures(model, cluster, layout, 1.0, 4e6, 3e11, fm, 1000, 1);
  CHECK(r.mc.runs == 0);
  CHECK(r.goodput < kMinRunnableGoodput);
  CHECK_THAT(r.cannot_run, Catch::Matchers::StartsWith("the job fails every 0.125 s on average"));
  // A realistic MTBF (50,000 h per GPU) runs and is sampled.
  fm.mtbf_gpu_s = 50000 * 3600.0;
  const FailureReport ok = analyze_failures(model, cluster, layout, 1.0, 4e6, 3e11, fm, 100, 1);
  CHECK(ok.mc.runs == 100);
  CHECK(ok.cannot_run.empty());
}

TEST_CASE("Failures: without failures the run is steps plus checkpoints", "[sim][faults][failures]") {
  const RunModel m = run_model(2.0, 1000, 0, 5, 10, 100);
  const MonteCarloResult mc = monte_carlo_run(m, 300, 3, 1);
  // ceil(1000/300) = 4 segments, each ending with a 5 s checkpoint.
  CHECK(mc.mean_s == 2000.0 + 4 * 5.0);
  CHECK(mc.p90_s == mc.mean_s);
  CHECK(expected_run_s(m, 300) == mc.mean_s);
  CHECK(optimal_interval_steps(m) == 1000);
}

TEST_CASE("Failures: a seeded Monte Carlo is reproducible", "[sim][faults][failures]") {
  const RunModel m = run_model(1.0, 100000, 5000, 10, 30, 600);
  const MonteCarloResult a = monte_carlo_run(m, 300, 200, 99), b = monte_carlo_run(m, 300, 200, 99);
  CHECK(a.mean_s == b.mean_s);
  CHECK(a.p90_s == b.p90_s);
  CHECK(a.failures_mean == b.failures_mean);
  CHECK(monte_carlo_run(m, 300, 200, 100).mean_s != a.mean_s);
}

TEST_CASE("Failures: checkpoint size is weights + optimizer, written once", "[sim][faults][failures]") {
  // bf16 mixed precision: 2 B weights + 12 B optimizer per parameter,
  // independent of how ZeRO or TP shard them; ZeRO-1 shrinks what each GPU
  // holds, not what is written.
  ModelSpec m;
  m.name = "ckpt-test";
  m.layers = 8;
  m.hidden = 1024;
  m.heads = 16;
  m.kv_heads = 16;
  m.ffn_hidden = 4096;
  m.vocab = 32000;
  m.seq_len = 1024;
  m.mlp = MlpKind::kGelu;
  const ClusterSpec c = load_cluster("dgx-a100");
  auto layout = [&](int tp, int zero) {
    Plan p;
    p.tp = tp;
    p.zero = zero;
    p.mbs = 1;
    p.gbs = 16 / tp;
    const Layout l = resolve_plan(m, c, 16, p);
    REQUIRE(l.feasible);
    return l;
  };
  const Layout ddp = layout(1, 0), zero1 = layout(1, 1), tp2 = layout(2, 1);
  const double params = total_params(m);
  CHECK_THAT(estimate_memory(m, c, ddp).stages[0].params, WithinRel(params, 1e-12));
  const CheckpointCost a = checkpoint_cost(m, c, ddp, 1e9);
  CHECK_THAT(a.total_bytes, WithinRel(14 * params, 1e-12));
  CHECK_THAT(a.write_s, WithinRel(14 * params / 1e9, 1e-12));
  CHECK_THAT(a.per_gpu_written_bytes, WithinRel(14 * params / 16, 1e-12));
  CHECK_THAT(a.per_gpu_state_bytes, WithinRel(14 * params, 1e-12));
  const CheckpointCost b = checkpoint_cost(m, c, zero1, 1e9);
  CHECK_THAT(b.total_bytes, WithinRel(a.total_bytes, 1e-12));
  CHECK_THAT(b.per_gpu_state_bytes, WithinRel(params * (2 + 12.0 / 16), 1e-12));
  // TP replicates the layer norms on every TP rank; the checkpoint holds
  // them once.
  CHECK(checkpoint_cost(m, c, tp2, 1e9).total_bytes == a.total_bytes);
}

TEST_CASE("Failures: rate adds GPUs and nodes", "[sim][faults][failures]") {
  FailureModel fm;
  fm.mtbf_gpu_s = 50000 * 3600.0;
  fm.mtbf_node_s = 20000 * 3600.0;
  // 16384 GPUs / 50000 h + 2048 nodes / 20000 h = 0.32768 + 0.1024 per hour.
  CHECK_THAT(failure_rate_per_s(fm, 16384, 2048) * 3600, WithinRel(0.43008, 1e-12));
}

RunModel async_model(double step_s, int64_t steps, double mtbf_s, double snapshot_s, double persist_s,
                     double load_s, double down_s) {
  RunModel m = run_model(step_s, steps, mtbf_s, snapshot_s, load_s, down_s);
  m.persist_s = persist_s;
  return m;
}

TEST_CASE("Failures: async checkpointing: the Monte Carlo converges to the closed form", "[sim][faults][failures]") {
  // Oracle: the event-by-event timeline (compute, snapshot, background
  // persist, commit, wait for the previous persist, failure, rollback,
  // downtime, load).  Its mean is within 5 standard errors (see the
  // synchronous case above for why five) of the closed
  // form's renewal at the commits (failures.cc) for intervals shorter than
  // the persist (kT < p: the next snapshot waits), longer (kT > p), a
  // shorter last segment, k = 1 and a single interval (k >= N).  Every
  // checkpoint commits once, blocking its snapshot plus the wait for its
  // persist: the checkpoint part is deterministic, the same in both.
  const RunModel slow_store = async_model(10.0, 2000, 20000, 2, 120, 60, 900);
  const RunModel fast_store = async_model(1.0, 50000, 3000, 0.5, 8, 20, 300);
  for (const RunModel& m : {slow_store, fast_store}) {
    // One interval (k >= N) only where it is not hopeless (20,000 s of steps
    // against a 20,000 s MTBF).
    const int64_t longest = m.steps < 10000 ? m.steps + 5 : 3000;
    for (int64_t k : {int64_t{1}, int64_t{7}, int64_t{13}, int64_t{50}, optimal_interval_steps(m), int64_t{3000}, longest}) {
      const MonteCarloResult mc = monte_carlo_run(m, k, 4000, Catch::rngSeed());
      const double expected = expected_run_s(m, k);
      const double se = mc.std_s / std::sqrt(4000.0);
      INFO("k " << k << " mc " << mc.mean_s << " expected " << expected << " se " << se);
      CHECK(std::fabs(mc.mean_s - expected) < 5 * se + 1e-9 * expected);
      const WallBreakdown& b = mc.breakdown;
      CHECK_THAT(b.useful + b.checkpoint + b.lost + b.downtime + b.load, WithinRel(mc.mean_s, 1e-9));
      const WallBreakdown e = expected_breakdown(m, k);
      CHECK(e.useful == b.useful);
      CHECK_THAT(e.checkpoint, WithinRel(b.checkpoint, 1e-9));
      CHECK_THAT(e.useful + e.checkpoint + e.lost + e.downtime + e.load, WithinRel(expected, 1e-9));
      if (expected_failures(m, k) > 20) {
        CHECK_THAT(expected_failures(m, k), WithinRel(mc.failures_mean, 0.05));
        CHECK_THAT(e.downtime, WithinRel(b.downtime, 0.05));
        CHECK_THAT(e.lost, WithinRel(b.lost, 0.08));
      }
    }
  }
}

TEST_CASE("Failures: async checkpointing without failures", "[sim][faults][failures]") {
  // 1000 steps of 2 s, a checkpoint every 300 steps (600 s > p = 50 s):
  // 4 snapshots of 1 s, the final persist of 50 s; nothing else blocks.
  RunModel m = async_model(2.0, 1000, 0, 1, 50, 10, 100);
  CHECK(expected_run_s(m, 300) == 2000.0 + 4 * 1.0 + 50);
  const MonteCarloResult mc = monte_carlo_run(m, 300, 3, 1);
  CHECK_THAT(mc.mean_s, WithinRel(2000.0 + 4 * 1.0 + 50, 1e-12));
  // Every 10 steps (20 s < p): each snapshot after the first waits 30 s for
  // the previous persist: 100 snapshots, 99 waits, the final persist.
  CHECK_THAT(expected_run_s(m, 10), WithinRel(2000.0 + 100 * 1.0 + 99 * 30 + 50, 1e-12));
  CHECK_THAT(monte_carlo_run(m, 10, 2, 1).mean_s, WithinRel(2000.0 + 100 * 1.0 + 99 * 30 + 50, 1e-12));
}

TEST_CASE("Failures: async is the sync model when the persist takes no time", "[sim][faults][failures]") {
  // x1 = x2 = kT + s: the interval formula is E(x).
  const RunModel sync = run_model(1.0, 50000, 3000, 5, 20, 300);
  const RunModel async = async_model(1.0, 50000, 3000, 5, 1e-9, 20, 300);
  for (double x : {10.0, 100.0, 1000.0}) {
    CHECK_THAT(expected_interval_s(sync, x, x), WithinRel(expected_segment_s(sync, x), 1e-12));
  }
  for (int64_t k : {int64_t{1}, int64_t{60}, int64_t{777}}) {
    CHECK_THAT(expected_run_s(async, k), WithinRel(expected_run_s(sync, k), 1e-9));
  }
  CHECK_THAT(optimal_interval_s(async), WithinRel(optimal_interval_s(sync), 1e-9));
  // The timeline (forced by a slow-node process that never fires) draws the
  // same failure times as the sync loop: the same runs to rounding.
  RunModel timeline = sync;
  timeline.slow.rate_per_s = 1e-300;
  timeline.slow.factor = 2;
  for (int64_t k : {int64_t{1}, int64_t{60}, int64_t{777}}) {
    const MonteCarloResult a = monte_carlo_run(sync, k, 50, 11), b = monte_carlo_run(timeline, k, 50, 11);
    CHECK_THAT(b.mean_s, WithinRel(a.mean_s, 1e-9));
    CHECK_THAT(b.p90_s, WithinRel(a.p90_s, 1e-9));
    CHECK(b.failures_mean == a.failures_mean);
    CHECK_THAT(b.breakdown.lost, WithinRel(a.breakdown.lost, 1e-9));
  }
}

TEST_CASE("Failures: the async optimum is the sync optimum with delta = s or the persist time", "[sim][faults][failures]") {
  // Oracle: a golden-section search of steady_goodput (no root finding).
  // Cheap snapshot, short persist: the sync optimum with delta = s
  // (Young/Daly's sqrt(2 s M) to first order) is above p.
  const RunModel a = async_model(1.0, 1000000, 100000, 1, 30, 30, 600);
  RunModel a_sync = a;
  a_sync.persist_s = 0;
  CHECK_THAT(optimal_interval_s(a), WithinRel(optimal_interval_s(a_sync), 1e-12));
  CHECK_THAT(optimal_interval_s(a), WithinRel(daly_interval_s(1, 100000), 1e-3));
  CHECK_THAT(optimal_interval_s(a), WithinRel(golden_section_optimum(a, 1, 1e6), 1e-6));
  // A persist longer than that: checkpointing more often only adds waits.
  const RunModel b = async_model(1.0, 1000000, 100000, 1, 2000, 30, 600);
  CHECK(optimal_interval_s(b) == 2000);
  CHECK_THAT(golden_section_optimum(b, 1, 1e6), WithinRel(2000.0, 1e-4));
  // A persist longer than the MTBF: the optimum is 1/lambda.
  const RunModel c = async_model(1.0, 1000000, 1000, 1, 2000, 30, 600);
  CHECK_THAT(optimal_interval_s(c), WithinRel(1000.0, 1e-12));
  CHECK_THAT(golden_section_optimum(c, 1, 1e6), WithinRel(1000.0, 1e-4));
}

TEST_CASE("Failures: the whole-step interval is the brute-force minimum", "[sim][faults][failures]") {
  // Oracle: expected_run_s at every k in [1, N].
  for (const RunModel& m : {run_model(3.0, 3000, 20000, 20, 40, 600), async_model(3.0, 3000, 20000, 0.5, 200, 40, 600),
                            async_model(3.0, 3000, 20000, 0.5, 20, 40, 600)}) {
    double best = std::numeric_limits<double>::infinity();
    for (int64_t k = 1; k <= m.steps; ++k) best = std::min(best, expected_run_s(m, k));
    INFO("persist " << m.persist_s);
    CHECK_THAT(expected_run_s(m, optimal_interval_steps(m)), WithinRel(best, 1e-12));
  }
}

TEST_CASE("Failures: goodput_upper_bound bounds every run in both modes", "[sim][faults][failures]") {
  // The search prunes with steps * step / goodput_upper_bound: it must not
  // exceed any run's expected goodput, whatever the step time, run length
  // or mode (with slow nodes too: they only add time).
  const ModelSpec model = load_model("gpt3-1.3b");
  const ClusterSpec cluster = load_cluster("dgx-a100");
  const Layout layout = resolve_plan(model, cluster, 64, Plan{});
  REQUIRE(layout.feasible);
  for (const char* mode : {"sync", "async"}) {
    for (const char* bw : {"2GB/s", "20GB/s", "1TB/s"}) {
      for (const char* slow : {"", "2000h"}) {
        FaultFlags f;
        f.mtbf_node = "200h";
        f.storage_bandwidth = bw;
        f.train_tokens = "1B";
        f.checkpoint_mode = mode;
        if (*slow != 0) {
          f.slow_node_mtbf = slow;
          f.slow_node_factor = "2";
          f.spare_nodes = "1";
          f.repair_time = "1d";
        }
        const FaultConfig config = parse_fault_flags(f);
        const double bound = goodput_upper_bound(model, cluster, layout, config);
        for (double step : {0.05, 1.0, 30.0}) {
          for (double tokens_per_step : {1e5, 1e7, 1e9}) {
            const FaultReport r = evaluate_faults(model, cluster, layout, step, tokens_per_step, config, false);
            INFO(mode << " " << bw << " slow " << slow << " step " << step << " tokens/step " << tokens_per_step);
            CHECK(r.goodput <= bound * (1 + 1e-12));
          }
        }
      }
    }
  }
}

TEST_CASE("Failures: async snapshot is the plan's per-GPU state over PCIe", "[sim][faults][failures]") {
  // dgx-a100 host.bandwidth_per_gpu = 25 GB/s; ZeRO-1 over 16 GPUs of a
  // 1.3B model: each GPU holds 2 B weights + 12/16 B optimizer per parameter.
  const ModelSpec model = load_model("gpt3-1.3b");
  const ClusterSpec cluster = load_cluster("dgx-a100");
  Plan p;
  p.zero = 1;
  const Layout layout = resolve_plan(model, cluster, 16, p);
  REQUIRE(layout.feasible);
  const CheckpointCost c = checkpoint_cost(model, cluster, layout, 100e9);
  const double params = total_params(model);
  CHECK_THAT(c.snapshot_s, WithinRel(params * (2 + 12.0 / 16) / 25e9, 1e-9));
  CHECK_THAT(c.snapshot_host_bytes_per_node, WithinRel(8 * params * (2 + 12.0 / 16), 1e-9));
}

TEST_CASE("Faults: flags are validated with one-line errors", "[sim][faults]") {
  FaultFlags f;
  SECTION("durations need units") {
    f.mtbf_gpu = "50000";
    CHECK_THROWS_WITH(parse_fault_flags(f),
                      "--mtbf-gpu: \"50000\" has no unit; expected e.g. \"2.5us\", \"30min\", \"50000h\"");
  }
  SECTION("failure options need an MTBF") {
    f.storage_bandwidth = "20GB/s";
    CHECK_THROWS_WITH(parse_fault_flags(f),
                      "--storage-bandwidth: has no effect without --mtbf-gpu, --mtbf-node or --failure-rates");
  }
  SECTION("an MTBF needs storage and a run length") {
    f.mtbf_node = "20000h";
    CHECK_THROWS_WITH(parse_fault_flags(f),
                      "--storage-bandwidth: is required with --mtbf-gpu, --mtbf-node or --failure-rates (checkpoint write and load "
                      "times depend on it); e.g. --storage-bandwidth 100GB/s");
    f.storage_bandwidth = "20GB/s";
    CHECK_THROWS_WITH(parse_fault_flags(f),
                      "--train-tokens: is required with --mtbf-gpu, --mtbf-node or --failure-rates (the run length); e.g. "
                      "--train-tokens 15.6T");
    f.train_tokens = "15.6T";
    const FaultConfig c = parse_fault_flags(f);
    CHECK(c.failures_given);
    CHECK(c.train_tokens == 15.6e12);
    CHECK(c.failures.mtbf_node_s == 20000 * 3600.0);
    CHECK(c.failures.storage_bytes_per_s == 20e9);
    CHECK(c.failures.detect_s == 300);
  }
  SECTION("checkpoint mode") {
    f.checkpoint_mode = "async";
    CHECK_THROWS_WITH(parse_fault_flags(f),
                      "--checkpoint-mode: has no effect without --mtbf-gpu, --mtbf-node or --failure-rates");
    f.mtbf_node = "20000h";
    f.storage_bandwidth = "20GB/s";
    f.train_tokens = "1T";
    CHECK(parse_fault_flags(f).failures.async_checkpoint);
    CHECK(parse_fault_flags(f).checkpoint_mode_given);
    f.checkpoint_mode = "background";
    CHECK_THROWS_WITH(parse_fault_flags(f), "--checkpoint-mode: unknown mode \"background\"; allowed: sync, async");
    f.checkpoint_mode = "sync";
    CHECK_FALSE(parse_fault_flags(f).failures.async_checkpoint);
  }
  SECTION("slow nodes") {
    f.mtbf_node = "20000h";
    f.storage_bandwidth = "20GB/s";
    f.train_tokens = "1T";
    f.spare_nodes = "4";
    CHECK_THROWS_WITH(parse_fault_flags(f), "--spare-nodes: has no effect without --slow-node-mtbf (a duration > 0)");
    f.slow_node_mtbf = "0s";  // off, as if absent
    CHECK_THROWS_WITH(parse_fault_flags(f), "--spare-nodes: has no effect without --slow-node-mtbf (a duration > 0)");
    f.spare_nodes.clear();
    CHECK_FALSE(parse_fault_flags(f).slow_nodes_given);
    f.slow_node_mtbf = "50000h";
    CHECK_THROWS_WITH(parse_fault_flags(f),
                      "--slow-node-factor: is required with --slow-node-mtbf (the slow node's compute slowdown; no "
                      "published default); e.g. --slow-node-factor 1.5");
    f.slow_node_factor = "1";
    CHECK_THROWS_WITH(parse_fault_flags(f),
                      "--slow-node-factor: \"1\" is not in (1, 100]; F = a slow node's compute time / nominal, e.g. "
                      "--slow-node-factor 1.5");
    f.slow_node_factor = "1.5x";
    CHECK_THROWS_WITH(parse_fault_flags(f),
                      "--slow-node-factor: \"1.5x\" is not a number; F = a slow node's compute time / nominal, e.g. "
                      "--slow-node-factor 1.5");
    f.slow_node_factor = "1.5";
    CHECK_THROWS_WITH(parse_fault_flags(f),
                      "--spare-nodes: is required with --slow-node-mtbf (the job's hot spares; 0: a slow node stays to "
                      "the end of the run); e.g. --spare-nodes 16");
    f.spare_nodes = "0";
    FaultConfig c = parse_fault_flags(f);
    CHECK(c.slow_nodes_given);
    CHECK(c.failures.slow_node_mtbf_s == 50000 * 3600.0);
    CHECK(c.failures.slow_node_factor == 1.5);
    CHECK(c.failures.slow_detect_s == 600);
    f.repair_time = "1d";
    CHECK_THROWS_WITH(parse_fault_flags(f),
                      "--repair-time: has no effect with --spare-nodes 0 (no node is drained to repair)");
    f.spare_nodes = "2";
    f.repair_time.clear();
    CHECK_THROWS_WITH(parse_fault_flags(f),
                      "--repair-time: is required with --spare-nodes >= 1 (a drained node's time in repair before it "
                      "is a spare again); e.g. --repair-time 3d");
    f.repair_time = "0s";
    CHECK_THROWS_WITH(parse_fault_flags(f), "--repair-time: must be > 0, got \"0s\"; expected e.g. \"30min\", \"50000h\"");
    f.repair_time = "1d";
    f.slow_detect_time = "2min";
    c = parse_fault_flags(f);
    CHECK(c.failures.spare_nodes == 2);
    CHECK(c.failures.repair_s == 86400);
    CHECK(c.failures.slow_detect_s == 120);
    f.mtbf_node.clear();
    f.storage_bandwidth.clear();
    CHECK_THROWS_WITH(parse_fault_flags(f),
                      "--slow-node-mtbf: has no effect without --mtbf-gpu, --mtbf-node or --failure-rates");
  }
  SECTION("counts and seeds") {
    CHECK(parse_token_count("300B", "--train-tokens") == 300e9);
    CHECK(parse_token_count("2e12", "--train-tokens") == 2e12);
    CHECK_THROWS_WITH(parse_token_count("12X", "--train-tokens"),
                      "--train-tokens: unknown suffix \"X\" in \"12X\"; allowed: k, M, B (or G), T");
    f.seed = "-1";
    CHECK_THROWS_WITH(parse_fault_flags(f),
                      "--seed: \"-1\" is not an integer in [0, 18446744073709551615]; e.g. --seed 42");
    f.seed = "18446744073709551615";
    CHECK(parse_fault_flags(f).seed == UINT64_MAX);
  }
}

}  // namespace
}  // namespace trainplan
