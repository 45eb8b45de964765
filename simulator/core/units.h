// Strong unit types and the one parser for quantities with units.
//
// Invariants (DESIGN.md "Units, time, determinism"):
// - Duration and TimePoint are int64 picoseconds: sums are exact and results do
//   not depend on evaluation order.  +-106 days fit.
// - Bytes are int64.  Bandwidth is double bytes/s; FlopCount and FlopRate are
//   doubles (FLOP, FLOP/s).
// - Decimal prefixes (k, M, G, T, P) mean powers of 1000, binary prefixes (Ki,
//   Mi, Gi, Ti, Pi) powers of 1024; "B" is bytes and "b" bits.  GB/s always
//   means 1e9 bytes/s.
// - Only meaningful operations exist: Bytes / Bandwidth -> Duration,
//   FlopCount / FlopRate -> Duration, Duration +- Duration.
#ifndef TRAINPLAN_SIM_CORE_UNITS_H_
#define TRAINPLAN_SIM_CORE_UNITS_H_

#include <cstdint>
#include <string>

namespace trainplan {

class Duration {
 public:
  constexpr Duration() = default;
  static constexpr Duration picoseconds(int64_t ps) { return Duration(ps); }
  // Rounds to the nearest picosecond.  Throws RangeError unless s is finite
  // and |s| < 9.2e6 (int64 range, about 106 days).
  static Duration seconds(double s);
  static Duration microseconds(double us) { return seconds(us * 1e-6); }
  static Duration milliseconds(double ms) { return seconds(ms * 1e-3); }
  constexpr int64_t ps() const { return ps_; }
  constexpr double s() const { return static_cast<double>(ps_) * 1e-12; }
  constexpr double us() const { return static_cast<double>(ps_) * 1e-6; }
  constexpr double ms() const { return static_cast<double>(ps_) * 1e-9; }
  // Arithmetic beyond int64 throws RangeError (simulator/core/error.h):
  // the inputs describe a step longer than the engine represents.
  Duration operator+(Duration o) const {
    int64_t r;
    if (__builtin_add_overflow(ps_, o.ps_, &r)) overflow();
    return Duration(r);
  }
  Duration operator-(Duration o) const {
    int64_t r;
    if (__builtin_sub_overflow(ps_, o.ps_, &r)) overflow();
    return Duration(r);
  }
  Duration& operator+=(Duration o) { return *this = *this + o; }
  Duration& operator-=(Duration o) { return *this = *this - o; }
  Duration operator*(int64_t k) const {
    int64_t r;
    if (__builtin_mul_overflow(ps_, k, &r)) overflow();
    return Duration(r);
  }
  // Scales by a real factor, rounding to the nearest picosecond.
  Duration scaled(double factor) const;
  constexpr bool operator<(Duration o) const { return ps_ < o.ps_; }
  constexpr bool operator>(Duration o) const { return ps_ > o.ps_; }
  constexpr bool operator<=(Duration o) const { return ps_ <= o.ps_; }
  constexpr bool operator>=(Duration o) const { return ps_ >= o.ps_; }
  constexpr bool operator==(Duration o) const { return ps_ == o.ps_; }
  constexpr bool operator!=(Duration o) const { return ps_ != o.ps_; }

 private:
  constexpr explicit Duration(int64_t ps) : ps_(ps) {}
  [[noreturn]] static void overflow();
  int64_t ps_ = 0;
};

// A point on the simulated clock: picoseconds since the start of the step.
using TimePoint = Duration;

using Bytes = int64_t;

class Bandwidth {
 public:
  constexpr Bandwidth() = default;
  static constexpr Bandwidth bytes_per_s(double v) { return Bandwidth(v); }
  static constexpr Bandwidth gigabytes_per_s(double v) { return Bandwidth(v * 1e9); }
  static constexpr Bandwidth gigabits_per_s(double v) { return Bandwidth(v * 1e9 / 8); }
  constexpr double bytes_per_s() const { return bytes_per_s_; }
  constexpr double gigabytes_per_s() const { return bytes_per_s_ * 1e-9; }
  constexpr Bandwidth operator*(double k) const { return Bandwidth(bytes_per_s_ * k); }
  constexpr bool operator<(Bandwidth o) const { return bytes_per_s_ < o.bytes_per_s_; }

 private:
  constexpr explicit Bandwidth(double v) : bytes_per_s_(v) {}
  double bytes_per_s_ = 0;
};

using FlopCount = double;

class FlopRate {
 public:
  constexpr FlopRate() = default;
  static constexpr FlopRate flop_per_s(double v) { return FlopRate(v); }
  static constexpr FlopRate teraflop_per_s(double v) { return FlopRate(v * 1e12); }
  constexpr double flop_per_s() const { return flop_per_s_; }
  constexpr double teraflop_per_s() const { return flop_per_s_ * 1e-12; }
  constexpr FlopRate operator*(double k) const { return FlopRate(flop_per_s_ * k); }

 private:
  constexpr explicit FlopRate(double v) : flop_per_s_(v) {}
  double flop_per_s_ = 0;
};

// REQUIRES: bandwidth > 0.  Rounds to the nearest picosecond.
Duration operator/(double bytes, Bandwidth bandwidth);
// REQUIRES: rate > 0.
Duration operator/(FlopCount flops, FlopRate rate);

constexpr double kGiB = 1073741824.0;  // 2^30 bytes
inline double to_gib(double bytes) { return bytes / kGiB; }

// The dimension a quantity string must have.
enum class Dimension { kBytes, kByteRate, kDuration, kFlopRate };

// Parses "80GiB", "450GB/s", "400Gb/s", "2.5us", "30min", "50000h",
// "989TFLOP/s" into the base unit of `dimension` (bytes, bytes/s, seconds,
// FLOP/s).  Zero may be written without a unit ("0").  Bytes above 4e18 are
// out of range (int64); durations may exceed the engine's +-106 days.
// Throws InputError("<where>: <pointer>: ...") if the text has no unit, an
// unknown unit, a unit of another dimension, or is not a finite number >= 0.
double parse_quantity(const std::string& text, Dimension dimension, const std::string& where,
                      const std::string& pointer);

// Formats with the unit: format_bytes(8.6e10) == "80.1GiB" style helpers used by
// reports; precision is fixed so outputs are byte-identical across runs.
std::string format_gib(double bytes);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_CORE_UNITS_H_
