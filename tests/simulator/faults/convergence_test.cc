// Tests of the stale-gradient convergence model against closed forms
// (Levin & May's stability limit, the roots for staleness 0 and 1, the
// AR(2) variance), a Monte Carlo of the delayed recursion, and the
// converge/diverge pattern Zhang et al. (IJCAI 2016) report.
#include "simulator/faults/convergence.h"

#include <cmath>
#include <random>

#include <catch2/catch.hpp>

#include "simulator/core/error.h"

namespace trainplan {
namespace {

using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

TEST_CASE("Convergence: the roots of the delayed update", "[sim][faults][convergence]") {
  // tau = 0: x_{k+1} = (1 - a) x_k.
  for (double a : {0.01, 0.5, 1.0, 1.9}) CHECK_THAT(delayed_spectral_radius(a, 0), WithinAbs(std::fabs(1 - a), 1e-12));
  // tau = 1: z^2 - z + a = 0; real roots (1 +- sqrt(1 - 4a)) / 2 for
  // a <= 1/4, else complex of modulus sqrt(a).
  for (double a : {0.01, 0.1, 0.25 - 1e-9}) {
    CHECK_THAT(delayed_spectral_radius(a, 1), WithinAbs((1 + std::sqrt(1 - 4 * a)) / 2, 1e-6));
  }
  for (double a : {0.3, 0.7, 1.5}) CHECK_THAT(delayed_spectral_radius(a, 1), WithinAbs(std::sqrt(a), 1e-9));
  // Levin & May (1976): stable iff a < 2 cos(pi tau / (2 tau + 1)); the
  // numeric roots cross the unit circle exactly there.  Known values: 2
  // (tau 0), 1, (sqrt 5 - 1) / 2 = 0.618..., 2 cos(3 pi / 7) = 0.445...
  CHECK_THAT(delayed_stability_limit(0), WithinAbs(2, 1e-12));
  CHECK_THAT(delayed_stability_limit(1), WithinAbs(1, 1e-12));
  CHECK_THAT(delayed_stability_limit(2), WithinAbs((std::sqrt(5.0) - 1) / 2, 1e-12));
  CHECK_THAT(delayed_stability_limit(3), WithinAbs(0.4450418679126288, 1e-12));
  for (int tau : {1, 2, 3, 5, 8, 15, 31, 64}) {
    INFO("tau " << tau);
    const double limit = delayed_stability_limit(tau);
    CHECK(delayed_spectral_radius(limit * (1 - 1e-4), tau) < 1);
    CHECK(delayed_spectral_radius(limit * (1 + 1e-4), tau) > 1);
    // A slow mode (small a) decays faster with the delay: its leading root
    // is real, z^tau (1 - z) = a, so 1 - z = a / z^tau > a.  This is the
    // implicit momentum of asynchrony (Mitliagkas et al. 2016): staleness
    // costs stability on the stiff modes, not progress on the slow ones.
    for (double a : {1e-4, 1e-3}) {
      if (a > std::pow(tau, tau) / std::pow(tau + 1.0, tau + 1.0)) continue;  // no real root
      const double z = delayed_spectral_radius(a, tau);
      CHECK(z < 1 - a);
      CHECK_THAT(std::pow(z, tau) * (1 - z), WithinRel(a, 1e-6));
    }
  }
}

TEST_CASE("Convergence: the noise gain", "[sim][faults][convergence]") {
  // tau = 0: sum of (1 - a)^{2k} = 1 / (a (2 - a)).
  CHECK_THAT(delayed_noise_gain(0.5, 0), WithinRel(1 / 0.75, 1e-12));
  // tau = 1 is an AR(2) with phi1 = 1, phi2 = -a, whose variance per unit
  // noise is (1 - phi2) / ((1 + phi2) ((1 - phi2)^2 - phi1^2)) (Box &
  // Jenkins) = (1 + a) / ((1 - a) a (a + 2)): 2.4 at a = 0.5.
  for (double a : {0.1, 0.5, 0.9}) {
    CHECK_THAT(delayed_noise_gain(a, 1), WithinRel((1 + a) / ((1 - a) * a * (a + 2)), 1e-9));
  }
  CHECK(std::isinf(delayed_noise_gain(1.0, 1)));
  // tau = 3 against a Monte Carlo of x_{k+1} = x_k - a x_{k-3} + N(0, 1).
  const double a = 0.2;
  std::mt19937_64 rng(11);
  std::normal_distribution<double> z(0, 1);
  double x[4] = {0, 0, 0, 0}, sum2 = 0;
  const int burn = 10000, n = 2000000;
  for (int k = 0; k < burn + n; ++k) {
    const double next = x[3] - a * x[0] + z(rng);
    x[0] = x[1];
    x[1] = x[2];
    x[2] = x[3];
    x[3] = next;
    if (k >= burn) sum2 += next * next;
  }
  CHECK_THAT(delayed_noise_gain(a, 3), WithinRel(sum2 / n, 0.02));
}

TEST_CASE("Convergence: async against sync", "[sim][faults][convergence]") {
  ConvergenceSpec spec;  // sharpness 1, condition 1000, lr scaled
  // One worker, no staleness: sync exactly, whatever the rule.
  for (AsyncLr lr : {AsyncLr::kSame, AsyncLr::kScaled, AsyncLr::kStaleness}) {
    spec.lr = lr;
    const AsyncConvergence one = async_convergence(spec, 1, 0);
    CHECK(one.converges);
    CHECK_THAT(one.sample_efficiency, WithinRel(1.0, 1e-12));
    CHECK_THAT(one.floor_ratio, WithinRel(1.0, 1e-12));
  }
  // Zhang et al. 2016 (30 learners, n-softsync, mean staleness ~ n): with
  // the sync learning rate unchanged, 15- and 30-softsync fail to converge;
  // with the staleness-aware rate alpha / tau every staleness converges.
  spec.lr = AsyncLr::kSame;
  CHECK_FALSE(async_convergence(spec, 30, 15).converges);
  CHECK_FALSE(async_convergence(spec, 30, 30).converges);
  spec.lr = AsyncLr::kStaleness;
  for (double tau : {2.0, 4.0, 8.0, 15.0, 30.0}) {  // (at tau 1, alpha / 1 = alpha sits on the limit 1)
    INFO("tau " << tau);
    CHECK(async_convergence(spec, 30, tau).converges);
  }
  // The linear scaling rule with 32 equal workers (staleness 31): stable
  // (1/32 < 2 cos(31 pi / 63) = 0.0498), each sample does less than in sync
  // (the delay slows the slowest mode), at about sync's progress per sample.
  spec.lr = AsyncLr::kScaled;
  const AsyncConvergence w32 = async_convergence(spec, 32, 31);
  CHECK(w32.converges);
  CHECK(w32.staleness == 31);
  CHECK_THAT(w32.max_lr_scale, WithinRel(delayed_stability_limit(31), 1e-12));
  // Each update carries 1/32 of the batch at 1/32 of the rate: per sample
  // about sync's progress on the slow mode (a little more: the delay's
  // momentum), and a higher noise floor (the delay amplifies the noise of
  // the stiff modes).
  CHECK_THAT(w32.sample_efficiency, WithinRel(1.0, 0.01));
  CHECK(w32.sample_efficiency > 1);
  CHECK(w32.floor_ratio > 1);
  // Async's price is the learning rate it can use: the largest scale that
  // converges is the Levin-May limit over the sharpness, ~ pi / (2 (2 tau + 1)).
  CHECK(w32.max_lr_scale < 0.05);
  // The search's bound holds at every staleness, for every rule.
  for (AsyncLr lr : {AsyncLr::kSame, AsyncLr::kScaled, AsyncLr::kStaleness}) {
    spec.lr = lr;
    for (int w : {2, 8, 32, 256}) {
      for (double tau : {0.0, 1.0, 2.0, w - 1.0, 4.0 * w}) {
        INFO("w " << w << " tau " << tau);
        const AsyncConvergence r = async_convergence(spec, w, tau);
        if (r.converges) CHECK(r.sample_efficiency <= async_efficiency_bound(spec, w) * (1 + 1e-12));
      }
    }
  }
}

TEST_CASE("Convergence: the specification", "[sim][faults][convergence]") {
  const ConvergenceSpec s = parse_convergence_spec("sharpness=0.5,lr=staleness", "--convergence");
  CHECK(s.sharpness == 0.5);
  CHECK(s.condition == 1000);
  CHECK(s.lr == AsyncLr::kStaleness);
  CHECK(s.describe() == "sharpness=0.5,condition=1000,lr=staleness");
  for (const char* bad : {"", "sharpness=2", "sharpness=0", "condition=0.5", "lr=fast", "lr=same,lr=same", "speed=1",
                          "sharpness", "sharpness=x"}) {
    INFO(bad);
    CHECK_THROWS_AS(parse_convergence_spec(bad, "--convergence"), InputError);
  }
}

}  // namespace
}  // namespace trainplan
