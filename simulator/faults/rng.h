// The one random number generator of trainplan, and its distributions.
//
// std::mt19937_64 is fully specified by the C++ standard (the 10000th output
// of a default-seeded engine is 9981545732273789042), but the
// std::*_distribution classes are implementation-defined: libstdc++ and libc++
// turn the same bits into different numbers.  So the distributions are written
// here (SimGrid xbt/random.hpp does the same), and a given seed gives the same
// samples with any standard library.
//
// Invariants:
// - No global state: every Rng is seeded explicitly and passed by reference.
// - Independent streams come from derive_seed(seed, stream) (SplitMix64,
//   Steele et al. 2014), so e.g. Monte Carlo run 7 sees the same numbers
//   whether 10 or 1000 runs are made.
// - uniform01() has 53 random bits and lies in [0, 1).
#ifndef TRAINPLAN_SIM_FAULTS_RNG_H_
#define TRAINPLAN_SIM_FAULTS_RNG_H_

#include <cmath>
#include <cstdint>
#include <random>

namespace trainplan {

// SplitMix64 finaliser of seed + (stream + 1) * golden gamma: well-mixed,
// distinct seeds for distinct streams.
inline uint64_t derive_seed(uint64_t seed, uint64_t stream) {
  uint64_t z = seed + (stream + 1) * 0x9E3779B97F4A7C15ULL;
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
  return z ^ (z >> 31);
}

// Streams of derive_seed used by the fault models, named so that adding one
// never shifts another.
enum class RngStream : uint64_t { kStragglers = 1, kFailures = 2, kSlowNodes = 3 };

inline uint64_t derive_seed(uint64_t seed, RngStream stream, uint64_t index) {
  return derive_seed(derive_seed(seed, static_cast<uint64_t>(stream)), index);
}

class Rng {
 public:
  explicit Rng(uint64_t seed) : engine_(seed) {}

  uint64_t next_u64() { return engine_(); }

  // Uniform on [0, 1): the top 53 bits of one draw.
  double uniform01() { return static_cast<double>(engine_() >> 11) * 0x1.0p-53; }

  // Uniform on [lo, hi).
  double uniform(double lo, double hi) { return lo + (hi - lo) * uniform01(); }

  // Standard normal, Box-Muller (Box & Muller 1958): two uniforms give two
  // independent normals; the second is kept for the next call.
  double normal() {
    if (has_spare_) {
      has_spare_ = false;
      return spare_;
    }
    const double u1 = 1.0 - uniform01();  // (0, 1]: log is finite
    const double u2 = uniform01();
    const double r = std::sqrt(-2.0 * std::log(u1));
    const double theta = 2.0 * kPi * u2;
    spare_ = r * std::sin(theta);
    has_spare_ = true;
    return r * std::cos(theta);
  }

  // exp(mu + sigma * Z), Z standard normal.
  double lognormal(double mu, double sigma) { return std::exp(mu + sigma * normal()); }

  // Exponential with the given rate (mean 1/rate) by inversion.
  // REQUIRES: rate > 0.
  double exponential(double rate) { return -std::log(1.0 - uniform01()) / rate; }

  // True with probability p.
  bool bernoulli(double p) { return uniform01() < p; }

 private:
  static constexpr double kPi = 3.14159265358979323846;
  std::mt19937_64 engine_;
  double spare_ = 0;
  bool has_spare_ = false;
};

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_FAULTS_RNG_H_
