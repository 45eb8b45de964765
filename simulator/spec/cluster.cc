#include "simulator/spec/cluster.h"

#include <cctype>
#include <cmath>

#include "simulator/core/error.h"
#include "simulator/spec/data_dir.h"
#include "simulator/spec/json_reader.h"

namespace trainplan {

const char* to_string(Dtype d) {
  switch (d) {
    case Dtype::kBf16: return "bf16";
    case Dtype::kFp16: return "fp16";
    case Dtype::kFp32: return "fp32";
    case Dtype::kTf32: return "tf32";
    case Dtype::kFp8: return "fp8";
  }
  return "?";
}

const char* to_string(IntraFabric f) {
  switch (f) {
    case IntraFabric::kNvswitch: return "nvswitch";
    case IntraFabric::kNvlink: return "nvlink";
    case IntraFabric::kPcie: return "pcie";
  }
  return "?";
}

const char* to_string(InterFabric f) {
  switch (f) {
    case InterFabric::kInfiniband: return "infiniband";
    case InterFabric::kRoce: return "roce";
    case InterFabric::kEthernet: return "ethernet";
  }
  return "?";
}

const char* to_string(GpuArch a) {
  switch (a) {
    case GpuArch::kUnknown: return "unknown";
    case GpuArch::kCpu: return "cpu";
    case GpuArch::kVolta: return "volta";
    case GpuArch::kAmpere: return "ampere";
    case GpuArch::kAda: return "ada";
    case GpuArch::kHopper: return "hopper";
    case GpuArch::kBlackwell: return "blackwell";
  }
  return "?";
}

GpuArch gpu_arch_of_name(const std::string& name) {
  std::string up;
  for (char ch : name) up += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (up.rfind("CPU", 0) == 0) return GpuArch::kCpu;
  const auto has = [&](const char* s) { return up.find(s) != std::string::npos; };
  if (has("B100") || has("B200") || has("B300")) return GpuArch::kBlackwell;  // GB200, GB300 too
  if (has("H100") || has("H200") || has("H800") || has("H20")) return GpuArch::kHopper;  // GH200 too
  if (has("A100") || has("A800") || has("A30") || has("A40") || has("A10")) return GpuArch::kAmpere;
  if (has("4090") || has("L40") || has("L4")) return GpuArch::kAda;
  if (has("V100")) return GpuArch::kVolta;
  return GpuArch::kUnknown;
}

namespace {

// Ranges (docs/input-limits.md): a factor of 1000 or more around every
// shipped part, so that a typo in a unit prefix is caught and no product of
// the cost model leaves int64 or Duration range.
constexpr double kMinBytes = 1048576.0;                // 1 MiB
constexpr double kMaxBytes = 1125899906842624.0;       // 1 PiB
constexpr double kMinRate = 1e6;                       // 1 MB/s
constexpr double kMaxRate = 1e15;                      // 1 PB/s
constexpr double kMinFlops = 1e9;                      // 1 GFLOP/s (a CPU core)
constexpr double kMaxFlops = 1e18;                     // 1 EFLOP/s
constexpr double kMaxLatency = 1.0;                    // link latencies are microseconds
constexpr double kMaxOpOverhead = 1e-3;                // one op call: microseconds (1 ms: a stalled host)

int int_in(detail::JsonObject& o, const std::string& key, int64_t lo, int64_t hi) {
  return static_cast<int>(o.integer(key, lo, hi));
}

Duration latency(detail::JsonObject& o) {
  return Duration::seconds(o.quantity("latency", Dimension::kDuration, 0, kMaxLatency));
}

GpuSpec parse_gpu(detail::JsonObject o) {
  GpuSpec g;
  g.name = o.string("name");
  const GpuArch named[] = {GpuArch::kVolta, GpuArch::kAmpere, GpuArch::kAda, GpuArch::kHopper, GpuArch::kBlackwell};
  std::vector<std::string> names;
  for (GpuArch a : named) names.push_back(to_string(a));
  const std::optional<size_t> arch = o.optional_choice("architecture", names);
  g.arch = arch ? named[*arch] : gpu_arch_of_name(g.name);
  g.memory = static_cast<Bytes>(o.quantity("memory", Dimension::kBytes, kMinBytes, kMaxBytes));
  g.hbm_bandwidth = Bandwidth::bytes_per_s(o.quantity("hbm_bandwidth", Dimension::kByteRate, kMinRate, kMaxRate));
  detail::JsonObject peak = o.object("peak");
  const Dtype dtypes[] = {Dtype::kBf16, Dtype::kFp16, Dtype::kFp32, Dtype::kTf32, Dtype::kFp8};
  for (Dtype d : dtypes) {
    bool required = d == Dtype::kBf16 || d == Dtype::kFp16 || d == Dtype::kFp32;
    if (!required && !peak.has(to_string(d))) {
      peak.optional_string(to_string(d));  // mark as allowed
      continue;
    }
    g.peak[d] = FlopRate::flop_per_s(peak.quantity(to_string(d), Dimension::kFlopRate, kMinFlops, kMaxFlops));
  }
  peak.finish();
  g.gemm_efficiency = o.optional_number_in("gemm_efficiency", 0.01, 1.0).value_or(0.8);
  g.fp8_gemm_efficiency = o.optional_number_in("fp8_gemm_efficiency", 0.01, 1.0).value_or(0);
  g.hbm_efficiency = o.optional_number_in("hbm_efficiency", 0.01, 1.0).value_or(0.85);
  g.sm_count = static_cast<int>(o.optional_integer("sm_count", 1, 1 << 16).value_or(108));
  g.attention_efficiency = o.optional_number_in("attention_efficiency", 0.01, 1.0).value_or(0.55);
  g.tdp_w = o.optional_number_in("tdp_w", 1, 1e5).value_or(0);
  g.power_limit_w = o.optional_number_in("power_limit_w", 1, 1e5).value_or(0);
  if (g.power_limit_w > 0 && g.tdp_w == 0) {
    throw_input_error(o.where(), o.pointer("power_limit_w"), "needs the GPU's rated power",
                      "give tdp_w too (e.g. 700 for H100 SXM)");
  }
  g.source = o.optional_string("source").value_or("");
  o.finish();
  return g;
}

}  // namespace

double GpuSpec::sustained_clock_fraction() const {
  if (tdp_w <= 0 || power_limit_w <= 0 || power_limit_w >= tdp_w) return 1.0;
  return std::cbrt(power_limit_w / tdp_w);
}

namespace {

IntraNodeSpec parse_intra(detail::JsonObject o) {
  IntraNodeSpec s;
  s.fabric = static_cast<IntraFabric>(o.choice("fabric", {"nvswitch", "nvlink", "pcie"}));
  s.bandwidth = Bandwidth::bytes_per_s(o.quantity("bandwidth", Dimension::kByteRate, kMinRate, kMaxRate));
  s.latency = latency(o);
  s.nvls = o.optional_boolean("nvls").value_or(false);
  s.gpus_per_switch = static_cast<int>(o.optional_integer("gpus_per_switch", 1, kMaxGpusPerNode).value_or(0));
  s.source = o.optional_string("source").value_or("");
  o.finish();
  return s;
}

InterNodeSpec parse_inter(detail::JsonObject o) {
  InterNodeSpec s;
  s.fabric = static_cast<InterFabric>(o.choice("fabric", {"infiniband", "roce", "ethernet"}));
  s.nics_per_node = int_in(o, "nics_per_node", 1, 64);
  s.nic_bandwidth = Bandwidth::bytes_per_s(o.quantity("nic_bandwidth", Dimension::kByteRate, kMinRate, kMaxRate));
  s.efficiency = o.optional_number_in("efficiency", 0.01, 1.0).value_or(default_nic_efficiency(s.fabric));
  s.latency = latency(o);
  s.oversubscription = o.optional_number_in("oversubscription", 1.0, 64.0).value_or(1.0);
  s.rail_optimized = o.optional_boolean("rail_optimized").value_or(true);
  s.nodes_per_leaf = static_cast<int>(o.optional_integer("nodes_per_leaf", 1, 1 << 20).value_or(32));
  s.source = o.optional_string("source").value_or("");
  o.finish();
  return s;
}

}  // namespace

ClusterSpec parse_cluster(const std::string& json_text, const std::string& where) {
  nlohmann::json doc = detail::parse_json_text(json_text, where);
  detail::JsonObject o(doc, where, "");
  ClusterSpec c;
  c.name = o.string("name");
  if (c.name.empty()) throw_input_error(where, "/name", "must not be empty", "");
  c.description = o.optional_string("description").value_or("");
  c.gpus_per_node = int_in(o, "gpus_per_node", 1, kMaxGpusPerNode);
  c.gpu = parse_gpu(o.object("gpu"));
  c.intra_node = parse_intra(o.object("intra_node"));
  if (c.intra_node.gpus_per_switch > c.gpus_per_node) {
    throw_input_error(where, "/intra_node/gpus_per_switch",
                      "exceeds the " + std::to_string(c.gpus_per_node) + " GPUs of a node",
                      "allowed: 1 to gpus_per_node");
  }
  if (auto inter = o.optional_object("inter_node")) c.inter_node = parse_inter(*inter);
  detail::JsonObject host = o.object("host");
  c.host.memory = static_cast<Bytes>(host.quantity("memory", Dimension::kBytes, kMinBytes, kMaxBytes));
  c.host.bandwidth_per_gpu =
      Bandwidth::bytes_per_s(host.quantity("bandwidth_per_gpu", Dimension::kByteRate, kMinRate, kMaxRate));
  if (host.has("op_overhead")) {
    c.host.op_overhead = Duration::seconds(host.quantity("op_overhead", Dimension::kDuration, 0, kMaxOpOverhead));
  }
  c.host.gpus = static_cast<int>(host.optional_integer("gpus", 1, c.gpus_per_node).value_or(c.gpus_per_node));
  if (c.gpus_per_node % c.host.gpus != 0) {
    throw_input_error(where, "/host/gpus",
                      "does not divide the " + std::to_string(c.gpus_per_node) + " GPUs of a node",
                      "allowed: a divisor of gpus_per_node");
  }
  c.host.source = host.optional_string("source").value_or("");
  host.finish();
  c.source = o.optional_string("source").value_or("");
  o.finish();
  return c;
}

std::optional<LaunchShape> launch_shape(const ClusterSpec& cluster, int gpus) {
  TRAINPLAN_CHECK(gpus > 0, "launch_shape of no GPUs");
  const int per_host = cluster.host.gpus > 0 ? cluster.host.gpus : cluster.gpus_per_node;
  const int hosts = (gpus + per_host - 1) / per_host;
  if (gpus % hosts != 0) return std::nullopt;
  return LaunchShape{hosts, gpus / hosts};
}

ClusterSpec load_cluster(const std::string& name_or_path, const std::string& where, const std::string& pointer) {
  std::string path = resolve_data_file("topologies", name_or_path, where, pointer, "cluster");
  return parse_cluster(detail::read_text_file(path), path);
}

std::vector<std::string> builtin_cluster_names() { return list_data_names("topologies"); }

}  // namespace trainplan
