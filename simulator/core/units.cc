#include "simulator/core/units.h"

#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <utility>
#include <vector>

#include "simulator/core/error.h"

namespace trainplan {

namespace {

// int64 picoseconds reach 9.22e6 s; stay clear of the edge so that rounding
// cannot overflow.
constexpr double kMaxSeconds = 9.2e6;

[[noreturn]] void out_of_range(double seconds) {
  char buf[160];
  std::snprintf(buf, sizeof buf, "a simulated time of %.3g s is beyond the simulator's range of 106 days (int64 picoseconds)",
                seconds);
  throw RangeError(format_input_error("", "", buf, "the inputs describe a step that long: check the GPU peak, the "
                                                   "bandwidths and the batch size"));
}

}  // namespace

void Duration::overflow() { out_of_range(9.3e6); }

Duration Duration::seconds(double s) {
  if (!(std::fabs(s) < kMaxSeconds)) out_of_range(s);
  return Duration(static_cast<int64_t>(std::llround(s * 1e12)));
}

Duration Duration::scaled(double factor) const {
  const double ps = static_cast<double>(ps_) * factor;
  if (!(std::fabs(ps) < kMaxSeconds * 1e12)) out_of_range(ps * 1e-12);
  return Duration(static_cast<int64_t>(std::llround(ps)));
}

Duration operator/(double bytes, Bandwidth bandwidth) {
  TRAINPLAN_CHECK(bandwidth.bytes_per_s() > 0, "bandwidth must be positive");
  return Duration::seconds(bytes / bandwidth.bytes_per_s());
}

Duration operator/(FlopCount flops, FlopRate rate) {
  TRAINPLAN_CHECK(rate.flop_per_s() > 0, "FLOP rate must be positive");
  return Duration::seconds(flops / rate.flop_per_s());
}

namespace {

struct Prefix {
  const char* text;
  double factor;
};

// Longest prefixes first so "Gi" wins over "G".
const Prefix kPrefixes[] = {{"Ki", 1024.0}, {"Mi", 1048576.0}, {"Gi", 1073741824.0},
                            {"Ti", 1099511627776.0}, {"Pi", 1125899906842624.0},
                            {"k", 1e3}, {"K", 1e3}, {"M", 1e6}, {"G", 1e9}, {"T", 1e12},
                            {"P", 1e15}, {"", 1.0}};

const char* expected_examples(Dimension d) {
  switch (d) {
    case Dimension::kBytes: return "expected e.g. \"80GiB\", \"512MiB\", \"25MB\"";
    case Dimension::kByteRate: return "expected e.g. \"450GB/s\", \"400Gb/s\", \"3.35TB/s\"";
    case Dimension::kDuration: return "expected e.g. \"2.5us\", \"30min\", \"50000h\"";
    case Dimension::kFlopRate: return "expected e.g. \"989TFLOP/s\", \"312TFLOPS\"";
  }
  return "";
}

// Returns the factor to the base unit for a unit (without prefix) of the given
// dimension, or 0 if the unit does not belong to it.
double base_unit_factor(const std::string& unit, Dimension d, bool* prefixable) {
  *prefixable = true;
  switch (d) {
    case Dimension::kBytes:
      if (unit == "B") return 1.0;
      if (unit == "b") return 1.0 / 8.0;
      return 0;
    case Dimension::kByteRate:
      if (unit == "B/s" || unit == "Bps") return 1.0;
      if (unit == "b/s" || unit == "bps") return 1.0 / 8.0;
      return 0;
    case Dimension::kFlopRate:
      if (unit == "FLOP/s" || unit == "FLOPS" || unit == "flop/s") return 1.0;
      return 0;
    case Dimension::kDuration:
      *prefixable = false;
      if (unit == "s") return 1.0;
      if (unit == "ms") return 1e-3;
      if (unit == "us") return 1e-6;
      if (unit == "ns") return 1e-9;
      if (unit == "ps") return 1e-12;
      if (unit == "min") return 60.0;
      if (unit == "h") return 3600.0;
      if (unit == "d") return 86400.0;
      return 0;
  }
  return 0;
}

}  // namespace

double parse_quantity(const std::string& text, Dimension dimension, const std::string& where,
                      const std::string& pointer) {
  const std::string hint = expected_examples(dimension);
  const char* begin = text.c_str();
  char* end = nullptr;
  double value = std::strtod(begin, &end);
  if (end == begin || text.empty() || std::isspace(static_cast<unsigned char>(text[0]))) {
    throw_input_error(where, pointer, "\"" + text + "\" is not a number with a unit", hint);
  }
  if (!std::isfinite(value)) throw_input_error(where, pointer, "\"" + text + "\" is not finite", hint);
  if (value < 0) throw_input_error(where, pointer, "\"" + text + "\" is negative", hint);
  std::string unit(end);
  if (!unit.empty() && unit[0] == ' ') unit.erase(0, 1);
  if (unit.empty()) {
    if (value == 0) return 0;
    throw_input_error(where, pointer, "\"" + text + "\" has no unit", hint);
  }
  for (const Prefix& p : kPrefixes) {
    size_t n = std::strlen(p.text);
    if (unit.compare(0, n, p.text) != 0) continue;
    bool prefixable = true;
    double f = base_unit_factor(unit.substr(n), dimension, &prefixable);
    if (f == 0) continue;
    if (n > 0 && !prefixable) continue;
    double result = value * p.factor * f;
    // Byte counts must fit int64; durations are checked where they become
    // Durations (an MTBF of "50000h" is a valid double number of seconds).
    const double limit = dimension == Dimension::kBytes ? 4.0e18 : 1e30;
    if (!std::isfinite(result) || result > limit) {
      throw_input_error(where, pointer, "\"" + text + "\" is out of range", hint);
    }
    return result;
  }
  throw_input_error(where, pointer, "unknown unit \"" + unit + "\" in \"" + text + "\"", hint);
}

std::string format_gib(double bytes) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.2fGiB", bytes / kGiB);
  return buf;
}

}  // namespace trainplan
