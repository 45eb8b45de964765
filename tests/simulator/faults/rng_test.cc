// Tests of the seeded Rng and its hand-written distributions: the engine is
// the standard's, the distributions match their moments, and streams are
// reproducible and independent of each other.
#include "simulator/faults/rng.h"

#include <cmath>
#include <cstdint>
#include <vector>

#include <catch2/catch.hpp>

namespace trainplan {
namespace {

using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

TEST_CASE("Rng: the engine is the standard's mt19937_64", "[sim][faults][rng]") {
  // C++ standard [rand.predef]: the 10000th consecutive invocation of a
  // default-constructed mt19937_64 (seed 5489) produces 9981545732273789042.
  Rng rng(5489);
  uint64_t v = 0;
  for (int i = 0; i < 10000; ++i) v = rng.next_u64();
  CHECK(v == 9981545732273789042ULL);
}

TEST_CASE("Rng: same seed, same numbers; derived streams differ", "[sim][faults][rng]") {
  Rng a(42), b(42), c(derive_seed(42, 1)), d(derive_seed(42, 2));
  for (int i = 0; i < 100; ++i) {
    CHECK(a.normal() == b.normal());
    CHECK(a.exponential(2.0) == b.exponential(2.0));
  }
  CHECK(c.next_u64() != d.next_u64());
  CHECK(derive_seed(42, RngStream::kStragglers, 0) != derive_seed(42, RngStream::kFailures, 0));
  CHECK(derive_seed(42, RngStream::kFailures, 7) == derive_seed(42, RngStream::kFailures, 7));
}

TEST_CASE("Rng: uniform01 is in [0, 1)", "[sim][faults][rng]") {
  Rng rng(Catch::rngSeed());
  for (int i = 0; i < 100000; ++i) {
    const double u = rng.uniform01();
    REQUIRE(u >= 0.0);
    REQUIRE(u < 1.0);
  }
}

TEST_CASE("Rng: distributions have their moments", "[sim][faults][rng]") {
  // n = 400000 samples: the standard error of a mean is sd/sqrt(n) = sd/632;
  // every tolerance below is at least 5 standard errors.
  Rng rng(Catch::rngSeed());
  const int n = 400000;
  SECTION("normal: mean 0, variance 1") {
    double s = 0, s2 = 0;
    for (int i = 0; i < n; ++i) {
      const double z = rng.normal();
      s += z;
      s2 += z * z;
    }
    CHECK_THAT(s / n, WithinAbs(0.0, 0.008));
    // Var of z^2 is 2: SE of the second moment = sqrt(2/n) = 0.0022.
    CHECK_THAT(s2 / n, WithinAbs(1.0, 0.012));
  }
  SECTION("lognormal(-sigma^2/2, sigma): mean 1, E[x^2] = e^{sigma^2}") {
    // E[e^{mu + sigma Z}] = e^{mu + sigma^2/2} = 1; E[x^2] = e^{2mu + 2sigma^2} = e^{sigma^2}.
    const double sigma = 0.3;
    double s = 0, s2 = 0;
    for (int i = 0; i < n; ++i) {
      const double x = rng.lognormal(-sigma * sigma / 2, sigma);
      s += x;
      s2 += x * x;
    }
    CHECK_THAT(s / n, WithinAbs(1.0, 0.003));
    CHECK_THAT(s2 / n, WithinRel(std::exp(sigma * sigma), 0.01));
  }
  SECTION("exponential: mean 1/rate, P(X > 1/rate) = 1/e") {
    const double rate = 4.0;
    double s = 0;
    int above = 0;
    for (int i = 0; i < n; ++i) {
      const double x = rng.exponential(rate);
      REQUIRE(x >= 0);
      s += x;
      above += x > 1 / rate ? 1 : 0;
    }
    CHECK_THAT(s / n, WithinRel(0.25, 0.01));
    // Binomial SE = sqrt(p(1-p)/n) = 0.00076.
    CHECK_THAT(static_cast<double>(above) / n, WithinAbs(std::exp(-1.0), 0.004));
  }
}

}  // namespace
}  // namespace trainplan
