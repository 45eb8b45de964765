// The calibration fits and the nccl-tests reader, without a device.
#include <catch2/catch.hpp>

#include <cmath>
#include <fstream>
#include <sstream>

#include "calibrate/fit.h"
#include "calibrate/nccl_tests_reader.h"
#include "simulator/core/error.h"
#include "simulator/network/collective_model.h"
#include "simulator/spec/calibration.h"

using namespace trainplan;

namespace {
std::string fixture(const std::string& name) {
  std::ifstream in(std::string(TRAINPLAN_TEST_DATA_DIR) + "/" + name);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}
}  // namespace

TEST_CASE("Fit: recovers latency and bandwidth and ignores an outlier", "[calibrate][fit]") {
  // Oracle: t = 20us + x / 100 GB/s exactly for 12 sizes, plus one sample
  // 10x too slow (a neighbour's burst).  Huber IRLS gives the outlier
  // weight ~0, so the fit returns the generating line.
  std::vector<double> x, t;
  for (int i = 0; i < 12; ++i) {
    const double bytes = 1024.0 * std::pow(4.0, i);
    x.push_back(bytes);
    t.push_back(20e-6 + bytes / 100e9);
  }
  x.push_back(64.0 * 1024 * 1024);
  t.push_back(10 * (20e-6 + x.back() / 100e9));
  const LineFit f = robust_line_fit(x, t);
  CHECK(f.intercept == Approx(20e-6).epsilon(1e-3));
  CHECK(1.0 / f.slope == Approx(100e9).epsilon(1e-3));
  CHECK(f.used == 12);
}

TEST_CASE("Fit: per-collective busbw uses the nccl-tests factor", "[calibrate][fit]") {
  // All-reduce over 8 ranks: busbw = algbw * 2(n-1)/n (PERFORMANCE.md).  With
  // t = 5us + size * 1.75 / 200 GB/s, the fitted bus bandwidth is 200 GB/s.
  std::vector<CollectiveSample> s;
  for (int i = 10; i < 30; ++i) {
    const int64_t bytes = int64_t{1} << i;
    s.push_back(CollectiveSample{Collective::kAllReduce, false, 8, bytes, 5e-6 + 1.75 * bytes / 200e9, 0});
  }
  const auto fits = fit_collectives(s);
  REQUIRE(fits.size() == 1);
  CHECK(fits[0].bus_bytes_per_s == Approx(200e9).epsilon(1e-3));
  CHECK(fits[0].latency_s == Approx(5e-6).epsilon(1e-3));
}

TEST_CASE("nccl-tests reader: the DGX A100 all_reduce curve", "[calibrate][nccl-tests]") {
  // Rows of the reference curve (published_dev.json, nccl_a100_node_allreduce_curve):
  // in-place time is used; 8 ranks from the device lines; one host.
  const NcclTestsRun run = parse_nccl_tests(fixture("nccl/all_reduce_perf_a100.txt"), "a.txt", Collective::kAllReduce, 0);
  CHECK(run.ranks == 8);
  CHECK(run.nodes == 1);
  CHECK(run.device == "NVIDIA A100-SXM4-80GB");
  REQUIRE(run.samples.size() == 10);
  CHECK(run.samples.back().bytes == 17179869184LL);
  CHECK(run.samples.back().time_s == Approx(128001.2e-6));
  // The fit of the large-message end gives the measured 235 GB/s busbw
  // within 2% (bandwidth-bound above 512 MiB).
  const auto fits = fit_collectives(run.samples);
  REQUIRE(fits.size() == 1);
  CHECK(fits[0].bus_bytes_per_s * 1e-9 == Approx(235.0).epsilon(0.02));
}

TEST_CASE("nccl-tests reader: errors name the file", "[calibrate][nccl-tests]") {
  REQUIRE_THROWS_WITH(parse_nccl_tests("# nothing here\n", "x.txt", Collective::kAllReduce, 8),
                      "x.txt: no result rows found; expected nccl-tests output with at least one row of size > 0");
  REQUIRE_THROWS_WITH(parse_nccl_tests(fixture("nccl/all_reduce_perf_a100.txt"), "a.txt", std::nullopt, 0),
                      Catch::StartsWith("a.txt: cannot tell which collective"));
}

TEST_CASE("Calibration: JSON round trip and GPU type check", "[calibrate][spec]") {
  Calibration c;
  c.tool = "trainplan test";
  c.backend = "cuda";
  c.versions = "CUDA 13.0";
  c.device = "NVIDIA H100 80GB HBM3";
  c.gpu_type = gpu_type_of(c.device);
  c.ranks = 8;
  c.nodes = 1;
  c.complete = true;
  c.dtype = "bf16";
  c.peak_flop_per_s = 750e12;
  c.copy_bytes_per_s = 2.8e12;
  c.collectives.push_back(CollectiveFitResult{Collective::kAllReduce, false, 8, 30e-6, 360e9, 0.02, 20});
  c.gemm_table.push_back(GemmPoint{8192, 8192, 8192, 1.0});
  const Calibration d = parse_calibration(calibration_json(c), "c.json");
  CHECK(calibration_json(d) == calibration_json(c));
  CHECK(d.gpu_type == "H100");
  ClusterSpec h100 = load_cluster("dgx-h100");
  apply_calibration(d, "--calibration", &h100);
  // Measured 750 of 989 TFLOP/s: efficiency 0.758; the all-reduce now costs
  // 30us + 1.75 * size / 360 GB/s.
  CHECK(h100.gpu.gemm_efficiency == Approx(750.0 / 989.0));
  const GroupPlacement g = group_placement(8, 8, h100);
  const CollectiveCost cost = collective_cost(Collective::kAllReduce, int64_t{1} << 30, g, link_params(h100));
  CHECK(cost.time.s() == Approx(30e-6 + 1.75 * 1073741824.0 / 360e9).epsilon(1e-6));
  ClusterSpec a100 = load_cluster("dgx-a100");
  REQUIRE_THROWS_WITH(apply_calibration(d, "--calibration", &a100),
                      "c.json: /gpu_type: taken on NVIDIA H100 80GB HBM3 (H100), but cluster dgx-a100 has A100-SXM4-80GB "
                      "(A100); calibrate on the cluster you plan for");
}

TEST_CASE("nccl-tests reader: rows nccl-tests itself would flag are refused", "[calibrate][nccl-tests]") {
  // The row layout of nccl-tests common.cu: size count type redop root, then
  // time algbw busbw #wrong for out-of-place and again for in-place; #wrong
  // is "N/A" when the data check is off (-c 0), and a nonzero count makes
  // nccl-tests print "Out of bounds values : N FAILED" and exit 1.
  auto row = [](const std::string& out_time, const std::string& out_wrong, const std::string& in_time,
                const std::string& in_wrong) {
    return "# header\n    1024   256  float  sum  -1  " + out_time + "  0.05  0.09  " + out_wrong + "  " + in_time +
           "  0.05  0.09  " + in_wrong + "\n";
  };
  SECTION("a clean row is read, in-place time first") {
    const NcclTestsRun run = parse_nccl_tests(row("20.68", "0", "20.35", "0"), "x.txt", Collective::kAllReduce, 8);
    REQUIRE(run.samples.size() == 1);
    CHECK(run.samples[0].time_s == Approx(20.35e-6));
  }
  SECTION("N/A wrong counts (no data check) are accepted") {
    CHECK(parse_nccl_tests(row("20.68", "N/A", "20.35", "N/A"), "x.txt", Collective::kAllReduce, 8).samples.size() == 1);
  }
  SECTION("wrong elements in the in-place run") {
    REQUIRE_THROWS_WITH(parse_nccl_tests(row("20.68", "0", "20.35", "3"), "x.txt", Collective::kAllReduce, 8),
                        "x.txt: line 2: nccl-tests counted 3 wrong elements; rerun the test: results with wrong "
                        "elements are not measurements");
  }
  SECTION("wrong elements in the out-of-place run invalidate the row too") {
    REQUIRE_THROWS_WITH(parse_nccl_tests(row("20.68", "7", "20.35", "0"), "x.txt", Collective::kAllReduce, 8),
                        Catch::StartsWith("x.txt: line 2: nccl-tests counted 7 wrong elements"));
  }
  SECTION("negative, infinite and NaN times") {
    REQUIRE_THROWS_WITH(parse_nccl_tests(row("20.68", "0", "-20.35", "0"), "x.txt", Collective::kAllReduce, 8),
                        "x.txt: line 2: time -20.35 us is not a measurement; expected a finite time > 0 and at most 1 h");
    REQUIRE_THROWS_WITH(parse_nccl_tests(row("20.68", "0", "inf", "0"), "x.txt", Collective::kAllReduce, 8),
                        Catch::StartsWith("x.txt: line 2: time inf us is not a measurement"));
    REQUIRE_THROWS_WITH(parse_nccl_tests(row("20.68", "0", "nan", "0"), "x.txt", Collective::kAllReduce, 8),
                        Catch::StartsWith("x.txt: line 2: time nan us is not a measurement"));
  }
  SECTION("a truncated row is an error, not skipped") {
    REQUIRE_THROWS_WITH(parse_nccl_tests("    1024   256  float  sum  -1  20.68\n", "x.txt", Collective::kAllReduce, 8),
                        Catch::StartsWith("x.txt: line 1: a result row has 6 fields"));
  }
  SECTION("nccl-tests' own FAILED verdict") {
    REQUIRE_THROWS_WITH(parse_nccl_tests(row("20.68", "0", "20.35", "0") + "# Out of bounds values : 3 FAILED\n", "x.txt",
                                         Collective::kAllReduce, 8),
                        "x.txt: line 3: nccl-tests reported data errors (Out of bounds values : 3 FAILED); rerun the "
                        "test: results with wrong elements are not measurements");
  }
  SECTION("launcher noise that is not a row is skipped") {
    CHECK(parse_nccl_tests("2 more processes have sent help message\n" + row("20.68", "0", "20.35", "0"), "x.txt",
                           Collective::kAllReduce, 8).samples.size() == 1);
  }
  SECTION("JSON records are held to the same rules") {
    REQUIRE_THROWS_WITH(parse_nccl_tests(R"({"results": [{"size": 1024, "in_place": {"time": -1, "nwrong": 0}}]})",
                                         "x.json", Collective::kAllReduce, 8),
                        Catch::StartsWith("x.json: result with size 1024: time -1 us is not a measurement"));
    REQUIRE_THROWS_WITH(parse_nccl_tests(R"({"results": [{"size": 1024, "in_place": {"time": 3, "nwrong": 2}}]})",
                                         "x.json", Collective::kAllReduce, 8),
                        Catch::StartsWith("x.json: result with size 1024: nccl-tests counted 2 wrong elements"));
  }
}

TEST_CASE("Calibration: every file calibrate can write reads back (--resume)", "[calibrate][spec]") {
  // Oracle: the writer's own output.  A fit from slow samples (an ASan
  // build's CPU all-reduce of 8..64 bytes: 0.9 MB/s, as CI measured) or a
  // latency-bound group (fit_collectives reports its floor, 1 B/s) must stay
  // inside the reader's ranges, or `calibrate --resume` refuses its own file.
  std::vector<CollectiveSample> slow;
  for (int64_t bytes : {8, 16, 32, 64}) {
    slow.push_back(CollectiveSample{Collective::kAllReduce, false, 2, bytes, 20e-6 + static_cast<double>(bytes) / 0.9e6, 0});
  }
  std::vector<CollectiveSample> flat;  // all latency: a zero slope
  for (int64_t bytes : {8, 16}) flat.push_back(CollectiveSample{Collective::kAllGather, false, 2, bytes, 1e-3, 0});
  Calibration c;
  c.tool = "trainplan test";
  c.backend = "cpu";
  c.versions = "test";
  c.device = "cpu: test";
  c.gpu_type = "cpu";
  c.ranks = 2;
  c.nodes = 1;
  c.complete = true;
  c.dtype = "fp32";
  c.collective_samples = slow;
  c.collective_samples.insert(c.collective_samples.end(), flat.begin(), flat.end());
  c.collectives = fit_collectives(c.collective_samples);
  REQUIRE(c.collectives.size() == 2);
  c.peak_flop_per_s = 3e5;           // a very slow GEMM
  c.copy_bytes_per_s = 5e5;          // and copy
  c.kernel_overhead_s = 0.5;         // a loaded machine's intercept
  c.gemm_table.push_back(GemmPoint{64, 64, 64, 1.0});
  const Calibration d = parse_calibration(calibration_json(c), "c.json");
  CHECK(calibration_json(d) == calibration_json(c));
}
