// Tests of the strong unit types and of parse_quantity, the one parser of
// quantities with units (STYLE.md "Units and strong types"): values against
// the SI / IEC definitions of the prefixes, error messages verbatim.
#include "simulator/core/units.h"

#include <string>

#include <catch2/catch.hpp>

#include "simulator/core/error.h"

namespace trainplan {
namespace {

// Where and pointer used in every parse below, so the messages read
// "f.json: /x: <problem>; <hint>".
double parse(const std::string& text, Dimension d) { return parse_quantity(text, d, "f.json", "/x"); }

TEST_CASE("Units: parse_quantity applies SI and IEC prefixes exactly", "[sim][core]") {
  SECTION("80GiB is 80 * 2^30 bytes") {
    // IEC: Gi = 2^30, so 80GiB = 80 * 1073741824 = 85899345920 bytes; the
    // product is an integer below 2^53, hence exact in a double.
    CHECK(parse("80GiB", Dimension::kBytes) == 85899345920.0);
  }
  SECTION("81920MiB is also 80 GiB (nvidia-smi's A100 80GB capacity)") {
    // 81920 * 2^20 = 80 * 2^30.
    CHECK(parse("81920MiB", Dimension::kBytes) == 80.0 * 1073741824.0);
  }
  SECTION("450GB/s is 450e9 bytes/s: G is decimal") {
    CHECK(parse("450GB/s", Dimension::kByteRate) == Approx(450e9).epsilon(1e-15));
  }
  SECTION("400Gb/s is 50e9 bytes/s: b is bits, 8 bits per byte") {
    // 400e9 bit/s / 8 = 50e9 B/s (an HDR/NDR NIC line rate).
    CHECK(parse("400Gb/s", Dimension::kByteRate) == Approx(50e9).epsilon(1e-15));
  }
  SECTION("3.35TB/s is 3.35e12 bytes/s") {
    CHECK(parse("3.35TB/s", Dimension::kByteRate) == Approx(3.35e12).epsilon(1e-15));
  }
  SECTION("2.5us is 2.5e-6 s") {
    CHECK(parse("2.5us", Dimension::kDuration) == Approx(2.5e-6).epsilon(1e-15));
  }
  SECTION("30min is 1800 s") {
    CHECK(parse("30min", Dimension::kDuration) == Approx(1800.0).epsilon(1e-15));
  }
  SECTION("50000h is 1.8e8 s") {
    // 50000 * 3600 s.
    CHECK(parse("50000h", Dimension::kDuration) == Approx(1.8e8).epsilon(1e-15));
  }
  SECTION("989TFLOP/s is 9.89e14 FLOP/s (H100 dense BF16)") {
    CHECK(parse("989TFLOP/s", Dimension::kFlopRate) == Approx(989e12).epsilon(1e-15));
  }
  SECTION("zero may be written without a unit") {
    CHECK(parse("0", Dimension::kByteRate) == 0.0);
  }
}

TEST_CASE("Units: parse_quantity rejects bad text with the exact message", "[sim][core]") {
  const std::string rate_hint = "expected e.g. \"450GB/s\", \"400Gb/s\", \"3.35TB/s\"";
  SECTION("a bare non-zero number has no unit") {
    REQUIRE_THROWS_AS(parse("450", Dimension::kByteRate), InputError);
    REQUIRE_THROWS_WITH(parse("450", Dimension::kByteRate), "f.json: /x: \"450\" has no unit; " + rate_hint);
  }
  SECTION("an unknown unit is named") {
    REQUIRE_THROWS_WITH(parse("450GBs", Dimension::kByteRate),
                        "f.json: /x: unknown unit \"GBs\" in \"450GBs\"; " + rate_hint);
  }
  SECTION("a negative value is rejected") {
    REQUIRE_THROWS_WITH(parse("-450GB/s", Dimension::kByteRate), "f.json: /x: \"-450GB/s\" is negative; " + rate_hint);
  }
  SECTION("nan is not finite") {
    REQUIRE_THROWS_WITH(parse("nan", Dimension::kByteRate), "f.json: /x: \"nan\" is not finite; " + rate_hint);
  }
  SECTION("text that is not a number") {
    REQUIRE_THROWS_WITH(parse("fast", Dimension::kByteRate),
                        "f.json: /x: \"fast\" is not a number with a unit; " + rate_hint);
  }
  SECTION("a unit of another dimension is not accepted: bytes where a rate is due") {
    REQUIRE_THROWS_WITH(parse("80GiB", Dimension::kByteRate),
                        "f.json: /x: unknown unit \"GiB\" in \"80GiB\"; " + rate_hint);
  }
  SECTION("a unit of another dimension is not accepted: a rate where bytes are due") {
    REQUIRE_THROWS_WITH(parse("450GB/s", Dimension::kBytes),
                        "f.json: /x: unknown unit \"GB/s\" in \"450GB/s\"; "
                        "expected e.g. \"80GiB\", \"512MiB\", \"25MB\"");
  }
  SECTION("durations take no SI prefix on seconds other than the named ones") {
    // "ks" is not in the duration list (s, ms, us, ns, ps, min, h, d).
    REQUIRE_THROWS_WITH(parse("3ks", Dimension::kDuration),
                        "f.json: /x: unknown unit \"ks\" in \"3ks\"; expected e.g. \"2.5us\", \"30min\", \"50000h\"");
  }
}

TEST_CASE("Units: Duration is integer picoseconds, so sums are exact", "[sim][core]") {
  SECTION("factories convert to picoseconds") {
    // 1 us = 1e6 ps, 1 ms = 1e9 ps, 1 s = 1e12 ps.
    CHECK(Duration::microseconds(1).ps() == 1000000);
    CHECK(Duration::milliseconds(1).ps() == 1000000000);
    CHECK(Duration::seconds(1).ps() == 1000000000000);
  }
  SECTION("seconds() rounds to the nearest picosecond") {
    CHECK(Duration::seconds(1.4e-12).ps() == 1);
    CHECK(Duration::seconds(1.6e-12).ps() == 2);
  }
  SECTION("ten 0.1 us steps make exactly 1 us (0.1 is not exact in double seconds)") {
    // In double seconds 0.1e-6 added ten times differs from 1e-6 in the last
    // bits; 0.1 us = 100000 ps is an exact integer.
    Duration sum;
    for (int i = 0; i < 10; ++i) sum += Duration::microseconds(0.1);
    CHECK(sum == Duration::microseconds(1));
    CHECK(sum.ps() == 1000000);
  }
  SECTION("the order of summation does not matter") {
    const Duration a = Duration::seconds(1.0), b = Duration::picoseconds(1), c = Duration::seconds(3e-7);
    CHECK(((a + b) + c) == (a + (b + c)));
    CHECK(((c + b) + a) == ((a + c) + b));
    CHECK((a + b + c).ps() == 1000000000000 + 1 + 300000);
  }
  SECTION("difference and integer multiple") {
    CHECK((Duration::microseconds(5) - Duration::microseconds(2)).ps() == 3000000);
    CHECK((Duration::microseconds(2) * 7).ps() == 14000000);
  }
  SECTION("scaled() rounds to the nearest picosecond") {
    // 3 ps * 0.5 = 1.5 ps, rounded half away from zero to 2 ps.
    CHECK(Duration::picoseconds(3).scaled(0.5).ps() == 2);
    CHECK(Duration::picoseconds(1000).scaled(1.25).ps() == 1250);
  }
  SECTION("accessors convert back to seconds, ms and us") {
    const Duration d = Duration::picoseconds(2500000);  // 2.5 us
    CHECK(d.us() == Approx(2.5).epsilon(1e-15));
    CHECK(d.ms() == Approx(2.5e-3).epsilon(1e-15));
    CHECK(d.s() == Approx(2.5e-6).epsilon(1e-15));
  }
}

TEST_CASE("Units: Bytes / Bandwidth and FlopCount / FlopRate give a Duration", "[sim][core]") {
  SECTION("1 GB over 450 GB/s takes 1/450 s") {
    // 1e9 / 450e9 s = 2.2222...e-3 s = 2222222222.22 ps, rounded to 2222222222 ps.
    const Duration d = 1e9 / Bandwidth::gigabytes_per_s(450);
    CHECK(d.ps() == 2222222222);
  }
  SECTION("80 GiB over 400 Gb/s = 50 GB/s") {
    // 85899345920 B / 50e9 B/s = 1.7179869184 s = 1717986918400 ps exactly.
    const Duration d = 80.0 * kGiB / Bandwidth::gigabits_per_s(400);
    CHECK(d.ps() == 1717986918400);
  }
  SECTION("312e12 FLOP at 312 TFLOP/s take 1 s") {
    const Duration d = FlopCount{312e12} / FlopRate::teraflop_per_s(312);
    CHECK(d.ps() == 1000000000000);
  }
  SECTION("Bandwidth factories agree with parse_quantity") {
    CHECK(Bandwidth::gigabits_per_s(400).bytes_per_s() ==
          Approx(parse_quantity("400Gb/s", Dimension::kByteRate, "", "")).epsilon(1e-15));
    CHECK(Bandwidth::gigabytes_per_s(450).gigabytes_per_s() == Approx(450).epsilon(1e-15));
  }
}

TEST_CASE("Units: format_gib writes two decimals of 2^30 bytes", "[sim][core]") {
  SECTION("80 GiB") { CHECK(format_gib(80.0 * kGiB) == "80.00GiB"); }
  SECTION("1.5 GiB") { CHECK(format_gib(1.5 * kGiB) == "1.50GiB"); }
  SECTION("to_gib divides by 2^30") { CHECK(to_gib(3.0 * 1073741824.0) == 3.0); }
}

}  // namespace
}  // namespace trainplan
