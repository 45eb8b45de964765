#include "simulator/spec/calibration.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>

#include "simulator/core/error.h"
#include "simulator/spec/json_reader.h"

namespace trainplan {

const char* collective_file_name(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "alltoall";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kSendRecv: return "sendrecv";
  }
  return "?";
}

namespace {

const std::vector<std::string> kCollectiveNames = {"all_reduce", "all_gather", "reduce_scatter",
                                                   "alltoall",   "broadcast",  "sendrecv"};

std::string with_unit(double v, const char* unit) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.6g%s", v, unit);
  return buf;
}

}  // namespace

std::string gpu_type_of(const std::string& name) {
  std::string up;
  for (char ch : name) up += static_cast<char>(std::toupper(static_cast<unsigned char>(ch)));
  if (up.rfind("CPU", 0) == 0) return "cpu";
  for (const char* t : {"GB200", "B200", "H200", "GH200", "H100", "H800", "A100", "A800", "V100", "L40S", "4090", "MI300X"}) {
    if (up.find(t) != std::string::npos) return t;
  }
  return name;
}

std::string calibration_json(const Calibration& c) {
  nlohmann::json j;
  j["tool"] = c.tool;
  j["backend"] = c.backend;
  j["versions"] = c.versions;
  j["device"] = c.device;
  j["gpu_type"] = c.gpu_type;
  j["ranks"] = c.ranks;
  j["nodes"] = c.nodes;
  j["complete"] = c.complete;
  j["dtype"] = c.dtype;
  j["peak"] = with_unit(c.peak_flop_per_s * 1e-12, "TFLOP/s");
  j["copy_bandwidth"] = with_unit(c.copy_bytes_per_s * 1e-9, "GB/s");
  j["kernel_overhead"] = with_unit(c.kernel_overhead_s * 1e6, "us");
  nlohmann::json table = nlohmann::json::array();
  for (const GemmPoint& g : c.gemm_table) {
    table.push_back({{"m", g.m}, {"n", g.n}, {"k", g.k}, {"efficiency", g.efficiency}});
  }
  j["gemm_table"] = table;
  nlohmann::json fits = nlohmann::json::array();
  for (const CollectiveFitResult& f : c.collectives) {
    fits.push_back({{"collective", collective_file_name(f.collective)},
                    {"scope", f.inter_node ? "inter" : "intra"},
                    {"ranks", f.ranks},
                    {"latency", with_unit(f.latency_s * 1e6, "us")},
                    {"bus_bandwidth", with_unit(f.bus_bytes_per_s * 1e-9, "GB/s")},
                    {"residual_rms", f.residual_rms},
                    {"samples", f.samples}});
  }
  j["collectives"] = fits;
  nlohmann::json cs = nlohmann::json::array();
  for (const CollectiveSample& s : c.collective_samples) {
    cs.push_back({{"collective", collective_file_name(s.collective)},
                  {"scope", s.inter_node ? "inter" : "intra"},
                  {"ranks", s.ranks},
                  {"size", with_unit(static_cast<double>(s.bytes), "B")},
                  {"time", with_unit(s.time_s * 1e6, "us")},
                  {"wrong", s.wrong}});
  }
  nlohmann::json gs = nlohmann::json::array();
  for (const GemmSample& s : c.gemm_samples) {
    gs.push_back({{"m", s.m}, {"n", s.n}, {"k", s.k}, {"dtype", s.dtype}, {"time", with_unit(s.time_s * 1e6, "us")}});
  }
  nlohmann::json ps = nlohmann::json::array();
  for (const CopySample& s : c.copy_samples) {
    ps.push_back({{"size", with_unit(static_cast<double>(s.bytes), "B")}, {"time", with_unit(s.time_s * 1e6, "us")}});
  }
  j["samples"] = {{"collectives", cs}, {"gemm", gs}, {"copy", ps}};
  return j.dump(2) + "\n";
}

Calibration parse_calibration(const std::string& text, const std::string& where) {
  nlohmann::json doc = detail::parse_json_text(text, where);
  detail::JsonObject o(doc, where, "");
  Calibration c;
  c.tool = o.string("tool");
  c.backend = o.string("backend");
  c.versions = o.string("versions");
  c.device = o.string("device");
  c.gpu_type = o.string("gpu_type");
  c.ranks = static_cast<int>(o.positive_integer("ranks"));
  c.nodes = static_cast<int>(o.positive_integer("nodes"));
  c.complete = o.boolean("complete");
  c.dtype = o.string("dtype");
  c.peak_flop_per_s = o.quantity("peak", Dimension::kFlopRate, true);
  c.copy_bytes_per_s = o.quantity("copy_bandwidth", Dimension::kByteRate, true);
  c.kernel_overhead_s = o.quantity("kernel_overhead", Dimension::kDuration, true);
  auto array_of = [&](const std::string& key) -> const nlohmann::json& {
    const nlohmann::json& v = o.raw(key);
    if (!v.is_array()) throw_input_error(where, o.pointer(key), "expected an array", "");
    return v;
  };
  const nlohmann::json& table = array_of("gemm_table");
  for (size_t i = 0; i < table.size(); ++i) {
    detail::JsonObject g(table[i], where, "/gemm_table/" + std::to_string(i));
    GemmPoint p;
    p.m = g.positive_integer("m");
    p.n = g.positive_integer("n");
    p.k = g.positive_integer("k");
    p.efficiency = *g.optional_number_in("efficiency", 1e-6, 1.0);
    g.finish();
    c.gemm_table.push_back(p);
  }
  const nlohmann::json& fits = array_of("collectives");
  for (size_t i = 0; i < fits.size(); ++i) {
    detail::JsonObject f(fits[i], where, "/collectives/" + std::to_string(i));
    CollectiveFitResult r;
    r.collective = static_cast<Collective>(f.choice("collective", kCollectiveNames));
    r.inter_node = f.choice("scope", {"intra", "inter"}) == 1;
    r.ranks = static_cast<int>(f.positive_integer("ranks"));
    r.latency_s = f.quantity("latency", Dimension::kDuration, true);
    r.bus_bytes_per_s = f.quantity("bus_bandwidth", Dimension::kByteRate);
    r.residual_rms = f.optional_number_in("residual_rms", 0, 1e9).value_or(0);
    r.samples = static_cast<int>(f.positive_integer("samples"));
    f.finish();
    c.collectives.push_back(r);
  }
  detail::JsonObject samples = o.object("samples");
  auto sample_array = [&](const std::string& key) -> const nlohmann::json& {
    const nlohmann::json& v = samples.raw(key);
    if (!v.is_array()) throw_input_error(where, samples.pointer(key), "expected an array", "");
    return v;
  };
  const nlohmann::json& cs = sample_array("collectives");
  for (size_t i = 0; i < cs.size(); ++i) {
    detail::JsonObject s(cs[i], where, "/samples/collectives/" + std::to_string(i));
    CollectiveSample x;
    x.collective = static_cast<Collective>(s.choice("collective", kCollectiveNames));
    x.inter_node = s.choice("scope", {"intra", "inter"}) == 1;
    x.ranks = static_cast<int>(s.positive_integer("ranks"));
    x.bytes = static_cast<int64_t>(s.quantity("size", Dimension::kBytes));
    x.time_s = s.quantity("time", Dimension::kDuration);
    s.allow("wrong");
    x.wrong = s.has("wrong") ? static_cast<int64_t>(*s.optional_number_in("wrong", 0, 1e18)) : 0;
    s.finish();
    c.collective_samples.push_back(x);
  }
  const nlohmann::json& gs = sample_array("gemm");
  for (size_t i = 0; i < gs.size(); ++i) {
    detail::JsonObject s(gs[i], where, "/samples/gemm/" + std::to_string(i));
    GemmSample x;
    x.m = s.positive_integer("m");
    x.n = s.positive_integer("n");
    x.k = s.positive_integer("k");
    x.dtype = s.string("dtype");
    x.time_s = s.quantity("time", Dimension::kDuration);
    s.finish();
    c.gemm_samples.push_back(x);
  }
  const nlohmann::json& ps = sample_array("copy");
  for (size_t i = 0; i < ps.size(); ++i) {
    detail::JsonObject s(ps[i], where, "/samples/copy/" + std::to_string(i));
    CopySample x;
    x.bytes = static_cast<int64_t>(s.quantity("size", Dimension::kBytes));
    x.time_s = s.quantity("time", Dimension::kDuration);
    s.finish();
    c.copy_samples.push_back(x);
  }
  samples.finish();
  o.finish();
  return c;
}

Calibration load_calibration(const std::string& path) { return parse_calibration(detail::read_text_file(path), path); }

void apply_calibration(const Calibration& c, const std::string& flag, ClusterSpec* cluster) {
  if (!c.complete) {
    throw_input_error(flag, "", "the calibration is incomplete (interrupted sweep)", "finish it with calibrate --resume");
  }
  const std::string want = gpu_type_of(cluster->gpu.name);
  if (c.gpu_type != want) {
    throw_input_error(flag, "", "taken on " + c.device + " (" + c.gpu_type + "), but cluster " + cluster->name +
                      " has " + cluster->gpu.name + " (" + want + ")", "calibrate on the cluster you plan for");
  }
  GpuSpec& g = cluster->gpu;
  if (c.peak_flop_per_s > 0) {
    Dtype d = c.dtype == "bf16" ? Dtype::kBf16 : c.dtype == "fp16" ? Dtype::kFp16 : c.dtype == "tf32" ? Dtype::kTf32 : Dtype::kFp32;
    const double spec = g.peak.count(d) ? g.peak.at(d).flop_per_s() : 0;
    // The measured best shape sets the ceiling; table efficiencies are
    // relative to it.
    const double scale = spec > c.peak_flop_per_s ? c.peak_flop_per_s / spec : 1.0;
    if (spec < c.peak_flop_per_s) g.peak[d] = FlopRate::flop_per_s(c.peak_flop_per_s);
    g.gemm_efficiency = scale;
    g.gemm_table.clear();
    for (GemmPoint p : c.gemm_table) {
      p.efficiency *= scale;
      g.gemm_table.push_back(p);
    }
    // fp32 training on a device without TF32 uses the fp32 peak; mirror the
    // measured dtype onto the others the CPU backend cannot run.
    for (Dtype o : {Dtype::kBf16, Dtype::kFp16, Dtype::kFp32}) {
      if (c.backend == "cpu") g.peak[o] = g.peak[d];
    }
  }
  if (c.copy_bytes_per_s > 0) {
    g.hbm_bandwidth = Bandwidth::bytes_per_s(c.copy_bytes_per_s);
    g.hbm_efficiency = 1.0;
  }
  // The measured rate by size (median of repeated sizes), for memory_time.
  g.copy_table.clear();
  std::map<int64_t, std::vector<double>> by_size;
  for (const CopySample& s : c.copy_samples) {
    if (s.bytes > 0 && s.time_s > 0) by_size[s.bytes].push_back(2.0 * static_cast<double>(s.bytes) / s.time_s);
  }
  for (auto& [bytes, rates] : by_size) {
    std::sort(rates.begin(), rates.end());
    g.copy_table.emplace_back(2.0 * static_cast<double>(bytes), rates[rates.size() / 2]);
  }
  g.kernel_overhead_s = c.kernel_overhead_s;
  cluster->calibrated_collectives.clear();
  for (const CollectiveFitResult& f : c.collectives) {
    CalibratedCollective k;
    k.collective = f.collective;
    k.inter_node = f.inter_node;
    k.latency = Duration::seconds(f.latency_s);
    k.bus_bandwidth = Bandwidth::bytes_per_s(f.bus_bytes_per_s);
    cluster->calibrated_collectives.push_back(k);
  }
  cluster->calibration = c.device + " (" + c.versions + ")";
}

}  // namespace trainplan
