// Tests of the cluster loader: every built-in topology loads with its
// datasheet figures, and bad files fail with the exact message.
#include "simulator/spec/cluster.h"

#include <algorithm>
#include <optional>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "simulator/compute/compute_model.h"
#include "simulator/core/error.h"

namespace trainplan {
namespace {

// A valid two-level cluster; each error test below changes one thing.
const char* const kGoodCluster = R"({
  "name": "tiny",
  "gpus_per_node": 8,
  "gpu": {
    "name": "X",
    "memory": "80GiB",
    "hbm_bandwidth": "2TB/s",
    "peak": {"bf16": "312TFLOP/s", "fp16": "312TFLOP/s", "fp32": "19.5TFLOP/s"}
  },
  "intra_node": {"fabric": "nvswitch", "bandwidth": "300GB/s", "latency": "3us"},
  "inter_node": {"fabric": "infiniband", "nics_per_node": 8, "nic_bandwidth": "200Gb/s", "latency": "5us"},
  "host": {"memory": "2TiB", "bandwidth_per_gpu": "25GB/s"}
})";

std::string edited(const std::string& from, const std::string& to) {
  std::string text = kGoodCluster;
  size_t pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  text.replace(pos, from.size(), to);
  return text;
}

TEST_CASE("ClusterSpec: every built-in cluster loads", "[sim][spec]") {
  const std::vector<std::string> names = builtin_cluster_names();
  SECTION("at least 7 clusters, and the required ones exist") {
    CHECK(names.size() >= 7);
    for (const char* n : {"dgx-a100", "dgx-h100", "dgx-h200", "dgx-b200", "dgx-b300", "gb200-nvl72", "gb300-nvl72",
                          "rtx4090-pcie", "v100-pcie", "h100-ethernet"}) {
      INFO(n);
      CHECK(std::find(names.begin(), names.end(), n) != names.end());
    }
  }
  SECTION("each file loads, its name equals the file stem and it meets the invariants") {
    for (const std::string& n : names) {
      INFO(n);
      ClusterSpec c;
      REQUIRE_NOTHROW(c = load_cluster(n));
      CHECK(c.name == n);
      CHECK(c.gpus_per_node > 0);
      CHECK(c.gpu.memory > 0);
      CHECK(c.gpu.hbm_bandwidth.bytes_per_s() > 0);
      CHECK(c.gpu.peak.count(Dtype::kBf16) == 1);
      CHECK(c.gpu.peak.count(Dtype::kFp16) == 1);
      CHECK(c.gpu.peak.count(Dtype::kFp32) == 1);
      CHECK(c.intra_node.bandwidth.bytes_per_s() > 0);
      CHECK(c.intra_node.latency.ps() >= 0);
      CHECK(c.host.memory > 0);
      if (c.inter_node) {
        CHECK(c.inter_node->nics_per_node > 0);
        CHECK(c.inter_node->oversubscription >= 1.0);
        CHECK(c.inter_node->latency.ps() >= 0);
      }
    }
  }
}

TEST_CASE("ClusterSpec: dgx-a100 carries the A100 datasheet figures", "[sim][spec]") {
  const ClusterSpec c = load_cluster("dgx-a100");
  SECTION("80 GiB of HBM: 81920 MiB = 80 * 2^30 bytes") { CHECK(c.gpu.memory == int64_t{80} * 1073741824); }
  SECTION("312 TFLOP/s dense BF16") {
    CHECK(c.gpu.peak.at(Dtype::kBf16).flop_per_s() == Approx(312e12).epsilon(1e-15));
  }
  SECTION("NVLink3: 12 links x 25 GB/s = 300 GB/s per direction, 3 us per step") {
    CHECK(c.intra_node.fabric == IntraFabric::kNvswitch);
    CHECK(c.intra_node.bandwidth.bytes_per_s() == Approx(300e9).epsilon(1e-15));
    CHECK(c.intra_node.latency == Duration::microseconds(3));
  }
  SECTION("8 x HDR 200 Gb/s = 25 GB/s per NIC") {
    REQUIRE(c.inter_node);
    CHECK(c.inter_node->fabric == InterFabric::kInfiniband);
    CHECK(c.inter_node->nics_per_node == 8);
    CHECK(c.inter_node->nic_bandwidth.bytes_per_s() == Approx(25e9).epsilon(1e-15));
  }
  SECTION("2 TiB of host memory") { CHECK(c.host.memory == int64_t{2} * 1099511627776); }
}

TEST_CASE("ClusterSpec: the Blackwell Ultra clusters carry NVIDIA's system figures", "[sim][spec]") {
  // The per-GPU dense peaks times the GPU count give NVIDIA's system
  // figures: DGX B300 "72 PFLOPS FP8 training" for 8 GPUs (a 2:4 sparse
  // figure, so 36 PF dense); GB300 NVL72 180 PF dense BF16 and 360 PF dense
  // FP8 for its 72 GPUs.  ConnectX-8: 800 Gb/s = 100 GB/s per NIC, one per GPU.
  const ClusterSpec b300 = load_cluster("dgx-b300");
  CHECK(b300.gpus_per_node == 8);
  CHECK(b300.gpu.arch == GpuArch::kBlackwell);
  CHECK_THAT(8 * b300.gpu.peak.at(Dtype::kFp8).flop_per_s() * 2, Catch::Matchers::WithinRel(72e15, 1e-12));
  CHECK_THAT(b300.gpu.peak.at(Dtype::kBf16).flop_per_s(), Catch::Matchers::WithinRel(2250e12, 1e-12));
  REQUIRE(b300.inter_node);
  CHECK(b300.inter_node->nics_per_node == 8);
  CHECK_THAT(b300.inter_node->nic_bandwidth.bytes_per_s(), Catch::Matchers::WithinRel(100e9, 1e-12));
  const ClusterSpec gb300 = load_cluster("gb300-nvl72");
  CHECK(gb300.gpu.arch == GpuArch::kBlackwell);
  CHECK_THAT(72 * gb300.gpu.peak.at(Dtype::kBf16).flop_per_s(), Catch::Matchers::WithinRel(180e15, 1e-12));
  CHECK_THAT(72 * gb300.gpu.peak.at(Dtype::kFp8).flop_per_s(), Catch::Matchers::WithinRel(360e15, 1e-12));
  REQUIRE(gb300.inter_node);
  CHECK(gb300.inter_node->nics_per_node == gb300.gpus_per_node);
  CHECK_THAT(gb300.inter_node->nic_bandwidth.bytes_per_s(), Catch::Matchers::WithinRel(100e9, 1e-12));
  // Blackwell Ultra has more HBM than Blackwell on the same NVLink.
  CHECK(gb300.gpu.memory > load_cluster("gb200-nvl72").gpu.memory);
  CHECK(b300.gpu.memory > load_cluster("dgx-b200").gpu.memory);
}

TEST_CASE("ClusterSpec: jean-zay-a100's NICs run at the rate NCCL measured on Jean Zay", "[sim][spec]") {
  // bigscience-workshop/bigscience experiments/bandwidth/all_reduce_bench-a100-n4.txt
  // (2022-01-28; NCCL 2.10.3, 4 nodes x 8 A100-SXM4-80GB, 4 GB fp32
  // all-reduce): after each rank's first trial, busbw 40.5-40.8 Gb/s, median
  // 40.55 Gb/s, with NCCL's two rings through one Omni-Path NIC per direction
  // (its log) -- that NIC's rate out of its 100 Gb/s.
  const ClusterSpec c = load_cluster("jean-zay-a100");
  REQUIRE(c.inter_node);
  CHECK_THAT(c.inter_node->nic_bandwidth.bytes_per_s() * 8e-9 * c.inter_node->efficiency,
             Catch::Matchers::WithinRel(40.55, 0.015));
}

TEST_CASE("ClusterSpec: the GPU architecture comes from the file or the GPU's name", "[sim][spec]") {
  // Oracle: NVIDIA's architecture of each part (CUDA compute capability
  // 10.x Blackwell, 9.0 Hopper, 8.9 Ada, 8.0/8.6 Ampere, 7.0 Volta).
  SECTION("names, as nvidia-smi and the datasheets spell them") {
    const std::vector<std::pair<const char*, GpuArch>> cases = {
        {"B200-SXM-180GB", GpuArch::kBlackwell}, {"NVIDIA GB200", GpuArch::kBlackwell},
        {"GB300-279GB", GpuArch::kBlackwell},    {"NVIDIA B300 SXM6 AC", GpuArch::kBlackwell},
        {"NVIDIA H100 80GB HBM3", GpuArch::kHopper}, {"H800", GpuArch::kHopper},
        {"NVIDIA GH200 480GB", GpuArch::kHopper},    {"A100-SXM4-80GB", GpuArch::kAmpere},
        {"NVIDIA A10", GpuArch::kAmpere},            {"NVIDIA GeForce RTX 4090", GpuArch::kAda},
        {"NVIDIA L40S", GpuArch::kAda},              {"Tesla V100-PCIE-32GB", GpuArch::kVolta},
        {"cpu-rank", GpuArch::kCpu},                 {"AMD Instinct MI300X", GpuArch::kUnknown}};
    for (const auto& [name, arch] : cases) {
      INFO(name);
      CHECK(gpu_arch_of_name(name) == arch);
    }
  }
  SECTION("every built-in cluster's GPU is a known architecture") {
    const std::vector<std::pair<const char*, GpuArch>> cases = {
        {"dgx-a100", GpuArch::kAmpere},     {"jean-zay-a100", GpuArch::kAmpere},  {"dgx-h100", GpuArch::kHopper},
        {"h100-ethernet", GpuArch::kHopper}, {"dgx-h200", GpuArch::kHopper},      {"dgx-b200", GpuArch::kBlackwell},
        {"dgx-b300", GpuArch::kBlackwell},   {"gb200-nvl72", GpuArch::kBlackwell}, {"gb300-nvl72", GpuArch::kBlackwell},
        {"rtx4090-pcie", GpuArch::kAda},     {"v100-pcie", GpuArch::kVolta},       {"cpu-local", GpuArch::kCpu}};
    for (const auto& [name, arch] : cases) {
      INFO(name);
      CHECK(load_cluster(name).gpu.arch == arch);
    }
    for (const std::string& n : builtin_cluster_names()) {
      INFO(n);
      CHECK(load_cluster(n).gpu.arch != GpuArch::kUnknown);
    }
  }
  SECTION("the file's architecture names a part whose name does not") {
    CHECK(parse_cluster(kGoodCluster, "c.json").gpu.arch == GpuArch::kUnknown);
    const ClusterSpec c = parse_cluster(edited("\"name\": \"X\",", "\"name\": \"X\", \"architecture\": \"blackwell\","), "c.json");
    CHECK(c.gpu.arch == GpuArch::kBlackwell);
    REQUIRE_THROWS_WITH(parse_cluster(edited("\"name\": \"X\",", "\"name\": \"X\", \"architecture\": \"rubin\","), "c.json"),
                        "c.json: /gpu/architecture: unknown value \"rubin\"; allowed: volta, ampere, ada, hopper, blackwell");
  }
}

TEST_CASE("ClusterSpec: PCIe boxes have no inter-node fabric", "[sim][spec]") {
  SECTION("rtx4090-pcie") { CHECK_FALSE(load_cluster("rtx4090-pcie").inter_node.has_value()); }
  SECTION("v100-pcie") { CHECK_FALSE(load_cluster("v100-pcie").inter_node.has_value()); }
}

TEST_CASE("ClusterSpec: the optional fields take their documented defaults", "[sim][spec]") {
  const ClusterSpec c = parse_cluster(kGoodCluster, "c.json");
  SECTION("GPU efficiencies 0.8 and 0.85") {
    CHECK(c.gpu.gemm_efficiency == 0.8);
    CHECK(c.gpu.hbm_efficiency == 0.85);
  }
  SECTION("no NVLS, 32 nodes per leaf, rail optimized, no oversubscription") {
    CHECK_FALSE(c.intra_node.nvls);
    REQUIRE(c.inter_node);
    CHECK(c.inter_node->nodes_per_leaf == 32);
    CHECK(c.inter_node->rail_optimized);
    CHECK(c.inter_node->oversubscription == 1.0);
  }
  SECTION("NCCL gets 0.95 of an RDMA NIC's line rate, 0.80 of an Ethernet one, or what the file says") {
    // default_nic_efficiency's sources: 46-48 GB/s per 400 Gb/s NIC
    // (nccl-tests#290), 192 of 200 GB/s on a DGX A100 (nccl#812); the
    // ml-engineering 80% rule for plain Ethernet.
    REQUIRE(c.inter_node);
    CHECK(c.inter_node->efficiency == 0.95);
    const ClusterSpec eth = parse_cluster(edited("\"infiniband\"", "\"ethernet\""), "c.json");
    CHECK(eth.inter_node->efficiency == 0.80);
    const ClusterSpec stated =
        parse_cluster(edited("\"nic_bandwidth\": \"200Gb/s\"", "\"nic_bandwidth\": \"200Gb/s\", \"efficiency\": 0.5"), "c.json");
    CHECK(stated.inter_node->efficiency == 0.5);
  }
  SECTION("optional peaks stay absent") {
    CHECK(c.gpu.peak.count(Dtype::kFp8) == 0);
    CHECK(c.gpu.peak.count(Dtype::kTf32) == 0);
  }
}

TEST_CASE("ClusterSpec: a power limit below the TDP lowers every compute peak by the cube root", "[sim][spec]") {
  // Dynamic power ~ C V^2 f with V ~ f: at 500 of 700 W the sustained clock
  // is (500/700)^(1/3) = 0.8939 of nominal (Meta's Grand Teton H100s run at
  // 500 W, torchtitan's benchmark notes).  HBM bandwidth is not scaled.
  ClusterSpec c = load_cluster("dgx-h100");
  CHECK(c.gpu.tdp_w == 700);
  CHECK(c.gpu.sustained_clock_fraction() == 1.0);
  const ComputeParams nominal = compute_params(c, Precision::kBf16);
  c.gpu.power_limit_w = 500;
  CHECK_THAT(c.gpu.sustained_clock_fraction(), Catch::Matchers::WithinRel(0.893904, 1e-5));
  const ComputeParams capped = compute_params(c, Precision::kBf16);
  CHECK_THAT(capped.peak.flop_per_s(), Catch::Matchers::WithinRel(nominal.peak.flop_per_s() * 0.893904, 1e-5));
  CHECK_THAT(capped.fp8_peak.flop_per_s(), Catch::Matchers::WithinRel(nominal.fp8_peak.flop_per_s() * 0.893904, 1e-5));
  CHECK(capped.hbm.bytes_per_s() == nominal.hbm.bytes_per_s());
  // A limit at or above the TDP changes nothing.
  c.gpu.power_limit_w = 800;
  CHECK(c.gpu.sustained_clock_fraction() == 1.0);
  // A limit needs the rated power.
  REQUIRE_THROWS_WITH(parse_cluster(edited("\"name\": \"X\",", "\"name\": \"X\", \"power_limit_w\": 500,"), "c.json"),
                      "c.json: /gpu/power_limit_w: needs the GPU's rated power; give tdp_w too (e.g. 700 for H100 SXM)");
}

TEST_CASE("ClusterSpec: bad cluster JSON is rejected with the exact message", "[sim][spec]") {
  SECTION("malformed JSON names line and column") {
    // Line 3 is `  "gpus_per_node": 8,` after the comma ending line 2 was
    // removed.  The unexpected token is the string "gpus_per_node" (columns
    // 3-17); like nlohmann's own messages, the column is that of the last
    // character the parser read, 17.
    REQUIRE_THROWS_AS(parse_cluster(edited("\"tiny\",", "\"tiny\""), "c.json"), InputError);
    REQUIRE_THROWS_WITH(parse_cluster(edited("\"tiny\",", "\"tiny\""), "c.json"),
                        "c.json: malformed JSON at line 3, column 17; expected one JSON object");
  }
  SECTION("missing nested object") {
    REQUIRE_THROWS_WITH(parse_cluster(edited(R"("host": {"memory": "2TiB", "bandwidth_per_gpu": "25GB/s"})",
                                             R"("hostx": {})"),
                                      "c.json"),
                        "c.json: /host: missing required key");
  }
  SECTION("unknown key inside gpu lists the gpu keys") {
    REQUIRE_THROWS_WITH(parse_cluster(edited("\"name\": \"X\",", "\"name\": \"X\", \"colour\": 1,"), "c.json"),
                        "c.json: /gpu/colour: unknown key; allowed: architecture, attention_efficiency, fp8_gemm_efficiency, gemm_efficiency, "
                        "hbm_bandwidth, "
                        "hbm_efficiency, memory, name, peak, power_limit_w, sm_count, source, tdp_w");
  }
  SECTION("unknown dtype under peak lists the dtypes") {
    REQUIRE_THROWS_WITH(parse_cluster(edited("\"fp32\": \"19.5TFLOP/s\"", "\"fp32\": \"19.5TFLOP/s\", \"int8\": \"1TFLOP/s\""),
                                      "c.json"),
                        "c.json: /gpu/peak/int8: unknown key; allowed: bf16, fp16, fp32, fp8, tf32");
  }
  SECTION("bare number for a bandwidth") {
    REQUIRE_THROWS_WITH(parse_cluster(edited("\"300GB/s\"", "300"), "c.json"),
                        "c.json: /intra_node/bandwidth: a bare number has no unit; "
                        "expected a string with a unit, e.g. \"450GB/s\"");
  }
  SECTION("a string number without a unit for a bandwidth") {
    REQUIRE_THROWS_WITH(parse_cluster(edited("\"300GB/s\"", "\"300\""), "c.json"),
                        "c.json: /intra_node/bandwidth: \"300\" has no unit; "
                        "expected e.g. \"450GB/s\", \"400Gb/s\", \"3.35TB/s\"");
  }
  SECTION("a zero bandwidth") {
    REQUIRE_THROWS_WITH(parse_cluster(edited("\"300GB/s\"", "\"0GB/s\""), "c.json"),
                        "c.json: /intra_node/bandwidth: \"0GB/s\" is out of range; allowed: 1MB/s to 1PB/s");
  }
  SECTION("a negative latency") {
    REQUIRE_THROWS_WITH(parse_cluster(edited("\"3us\"", "\"-3us\""), "c.json"),
                        "c.json: /intra_node/latency: \"-3us\" is negative; "
                        "expected e.g. \"2.5us\", \"30min\", \"50000h\"");
  }
  SECTION("bytes given as a rate") {
    REQUIRE_THROWS_WITH(parse_cluster(edited("\"80GiB\"", "\"80GiB/s\""), "c.json"),
                        "c.json: /gpu/memory: unknown unit \"GiB/s\" in \"80GiB/s\"; "
                        "expected e.g. \"80GiB\", \"512MiB\", \"25MB\"");
  }
  SECTION("unknown fabric lists the allowed values") {
    REQUIRE_THROWS_WITH(parse_cluster(edited("\"nvswitch\"", "\"nvlink5\""), "c.json"),
                        "c.json: /intra_node/fabric: unknown value \"nvlink5\"; allowed: nvswitch, nvlink, pcie");
  }
  SECTION("zero NICs") {
    REQUIRE_THROWS_WITH(parse_cluster(edited("\"nics_per_node\": 8", "\"nics_per_node\": 0"), "c.json"),
                        "c.json: /inter_node/nics_per_node: out of range: 0; allowed: 1 to 64");
  }
  SECTION("too many GPUs per node") {
    REQUIRE_THROWS_WITH(parse_cluster(edited("\"gpus_per_node\": 8", "\"gpus_per_node\": 4096"), "c.json"),
                        "c.json: /gpus_per_node: out of range: 4096; allowed: 1 to 1024");
  }
  SECTION("oversubscription below 1") {
    REQUIRE_THROWS_WITH(parse_cluster(edited("\"latency\": \"5us\"", "\"latency\": \"5us\", \"oversubscription\": 0.5"),
                                      "c.json"),
                        "c.json: /inter_node/oversubscription: out of range: 0.5; allowed: 1 to 64");
  }
  SECTION("a NIC efficiency outside (0, 1]") {
    REQUIRE_THROWS_WITH(
        parse_cluster(edited("\"nic_bandwidth\": \"200Gb/s\"", "\"nic_bandwidth\": \"200Gb/s\", \"efficiency\": 0"), "c.json"),
        "c.json: /inter_node/efficiency: out of range: 0; allowed: 0.01 to 1");
  }
  SECTION("a missing required peak") {
    REQUIRE_THROWS_WITH(parse_cluster(edited("\"bf16\": \"312TFLOP/s\", ", ""), "c.json"),
                        "c.json: /gpu/peak/bf16: missing required key");
  }
}

TEST_CASE("ClusterSpec: GPUs per host and how a job is launched on them", "[sim][spec]") {
  // Default: a host is the node (DGX: one OS, 8 GPUs).
  const ClusterSpec tiny = parse_cluster(kGoodCluster, "c.json");
  CHECK(tiny.host.gpus == 8);
  // GB200 / GB300 NVL72: a node is the 64-GPU NVLink domain, a host one compute
  // tray of 4 GPUs (DGX GB200 User Guide: 2 Grace + 4 GPUs per tray).
  for (const char* n : {"gb200-nvl72", "gb300-nvl72"}) {
    INFO(n);
    const ClusterSpec c = load_cluster(n);
    CHECK(c.gpus_per_node == 64);
    CHECK(c.host.gpus == 4);
  }
  // launch_shape: a job needs ceil(gpus / per_host) hosts, and torchrun
  // starts the same number of processes on each (--nproc-per-node), so a
  // launch exists exactly when that many hosts split the GPUs evenly; checked
  // for every GPU count up to three nodes.
  const ClusterSpec gb = load_cluster("gb200-nvl72");
  const ClusterSpec dgx = load_cluster("dgx-h100");
  for (const ClusterSpec* c : {&gb, &dgx}) {
    for (int gpus = 1; gpus <= 3 * c->gpus_per_node; ++gpus) {
      INFO(c->name << " " << gpus);
      const int need = (gpus + c->host.gpus - 1) / c->host.gpus;
      const std::optional<LaunchShape> h = launch_shape(*c, gpus);
      if (gpus % need == 0) {
        REQUIRE(h.has_value());
        CHECK(h->hosts == need);
        CHECK(h->per_host * h->hosts == gpus);
        CHECK(h->per_host <= c->host.gpus);
      } else {
        CHECK_FALSE(h.has_value());
      }
    }
  }
  CHECK(launch_shape(gb, 256)->hosts == 64);
  CHECK(launch_shape(gb, 6)->per_host == 3);  // two trays of 3
  CHECK_FALSE(launch_shape(gb, 5).has_value());
  CHECK(launch_shape(dgx, 16)->per_host == 8);
  // Bad values name the field.
  const std::string host = R"("host": {"memory": "2TiB", "bandwidth_per_gpu": "25GB/s"})";
  REQUIRE_THROWS_WITH(parse_cluster(edited(host, R"("host": {"memory": "2TiB", "bandwidth_per_gpu": "25GB/s", "gpus": 3})"),
                                    "c.json"),
                      "c.json: /host/gpus: does not divide the 8 GPUs of a node; allowed: a divisor of gpus_per_node");
  REQUIRE_THROWS_AS(parse_cluster(edited(host, R"("host": {"memory": "2TiB", "bandwidth_per_gpu": "25GB/s", "gpus": 16})"),
                                  "c.json"),
                    InputError);
}

TEST_CASE("ClusterSpec: load_cluster lists the known clusters for an unknown name", "[sim][spec]") {
  std::string known;
  for (const std::string& n : builtin_cluster_names()) known += (known.empty() ? "" : ", ") + n;
  REQUIRE_THROWS_WITH(load_cluster("nope"), "--cluster: unknown cluster \"nope\"; known: " + known);
  REQUIRE_THROWS_WITH(load_cluster("nope"), Catch::Matchers::StartsWith("--cluster: unknown cluster \"nope\"; known: cpu-local, dgx-a100, "));
}

}  // namespace
}  // namespace trainplan
