#include "simulator/spec/calibration.h"

#include <algorithm>
#include <cctype>
#include <cstdio>
#include <map>

#include "simulator/core/error.h"
#include "simulator/spec/json_reader.h"
#include "simulator/spec/plan.h"

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
  for (const char* t : {"GB300", "B300", "GB200", "B200", "H200", "GH200", "H100", "H800", "A100", "A800", "V100", "L40S", "4090", "MI300X"}) {
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
  if (c.run_fit.present) {
    const RunScales& s = c.run_fit.scales;
    nlohmann::json runs = nlohmann::json::array();
    for (const RunResidual& r : c.run_fit.runs) {
      runs.push_back({{"name", r.name},
                      {"measured", with_unit(r.measured_s, "s")},
                      {"predicted", with_unit(r.predicted_s, "s")},
                      {"leave_one_out", with_unit(r.leave_one_out_s, "s")}});
    }
    j["run_fit"] = {{"scales",
                     {{"gemm_efficiency", s.gemm_efficiency},
                      {"hbm_efficiency", s.hbm_efficiency},
                      {"attention_efficiency", s.attention_efficiency},
                      {"intra_bandwidth", s.intra_bandwidth},
                      {"inter_bandwidth", s.inter_bandwidth},
                      {"host_op_time", s.host_op_time}}},
                    {"runs", runs},
                    {"residual_rms", c.run_fit.residual_rms},
                    {"leave_one_out_rms", c.run_fit.leave_one_out_rms}};
  }
  return j.dump(2) + "\n";
}

namespace {

// Ranges (docs/hardening.md).  "0" marks a figure the backend did not
// measure (nccl-tests output has no GEMM or copy figures).  The fitted
// figures are bounded as loosely as the fit can produce them from samples
// within range (a sanitizer build's CPU all-reduce of 8 bytes fits below
// 1 MB/s), so that every file calibrate writes reads back (--resume); a
// figure that makes a simulated step longer than the engine's range is
// reported then, as RangeError.
constexpr double kMaxFlops = 1e18;          // 1 EFLOP/s
constexpr double kMinFlops = 1;             // the fit's own floor
constexpr double kMinRate = 1;              // 1 B/s: the fit's own floor (fit_collectives)
constexpr double kMaxRate = 1e15;           // 1 PB/s
constexpr double kMaxSampleTime = 3600.0;   // one timed operation
constexpr double kMaxKernelOverhead = kMaxSampleTime;  // a fit's intercept stays below its samples
constexpr double kMaxLatency = kMaxSampleTime;
constexpr double kMaxSampleBytes = 1125899906842624.0;  // 1 PiB
constexpr int64_t kMaxGemmDim = int64_t{1} << 24;
// A --from-runs scale: 1/100 to 10 times the published figure.
constexpr double kMinRunScale = 0.01;
constexpr double kMaxRunScale = 10.0;

const std::vector<std::string> kGemmDtypes = {"bf16", "fp16", "fp32", "tf32"};

// A measured figure: 0 (not measured) or within [lo, hi].
double measured(detail::JsonObject& o, const std::string& key, Dimension d, double lo, double hi) {
  const double v = o.quantity(key, d, 0, hi);
  if (v != 0 && v < lo) {
    throw_input_error(o.where(), o.pointer(key), "out of range",
                      "allowed: 0 (not measured) or " + detail::format_quantity(lo, d) + " to " +
                          detail::format_quantity(hi, d));
  }
  return v;
}

int64_t gemm_dim(detail::JsonObject& o, const std::string& key) { return o.integer(key, 1, kMaxGemmDim); }

}  // namespace

Calibration parse_calibration(const std::string& text, const std::string& where) {
  nlohmann::json doc = detail::parse_json_text(text, where);
  detail::JsonObject o(doc, where, "");
  Calibration c;
  c.tool = o.string("tool");
  {
    const std::vector<std::string> backends = {"cpu", "cuda", "nccl-tests", "runs"};
    c.backend = backends[o.choice("backend", backends)];
  }
  c.versions = o.string("versions");
  c.device = o.string("device");
  c.gpu_type = o.string("gpu_type");
  c.ranks = static_cast<int>(o.integer("ranks", 1, kMaxGpus));
  c.nodes = static_cast<int>(o.integer("nodes", 1, kMaxNodes));
  if (c.nodes > c.ranks) {
    throw_input_error(where, "/nodes", "exceeds the " + std::to_string(c.ranks) + " ranks", "allowed: 1 to ranks");
  }
  c.complete = o.boolean("complete");
  c.peak_flop_per_s = measured(o, "peak", Dimension::kFlopRate, kMinFlops, kMaxFlops);
  c.copy_bytes_per_s = measured(o, "copy_bandwidth", Dimension::kByteRate, kMinRate, kMaxRate);
  c.kernel_overhead_s = o.quantity("kernel_overhead", Dimension::kDuration, 0, kMaxKernelOverhead);
  // The GEMM dtype: one the backends run, or "" when no GEMM was measured.
  c.dtype = o.string("dtype");
  if (c.peak_flop_per_s > 0 || !c.dtype.empty()) c.dtype = kGemmDtypes[o.choice("dtype", kGemmDtypes)];
  const nlohmann::json& table = o.array("gemm_table");
  if (!table.empty() && c.peak_flop_per_s == 0) {
    throw_input_error(where, "/gemm_table", "lists GEMM shapes but /peak is 0 (not measured)",
                      "the table's efficiencies are relative to the peak");
  }
  for (size_t i = 0; i < table.size(); ++i) {
    detail::JsonObject g(table[i], where, "/gemm_table/" + std::to_string(i));
    GemmPoint p;
    p.m = gemm_dim(g, "m");
    p.n = gemm_dim(g, "n");
    p.k = gemm_dim(g, "k");
    p.efficiency = g.number_in("efficiency", 1e-6, 1.0);
    g.finish();
    c.gemm_table.push_back(p);
  }
  const nlohmann::json& fits = o.array("collectives");
  for (size_t i = 0; i < fits.size(); ++i) {
    detail::JsonObject f(fits[i], where, "/collectives/" + std::to_string(i));
    CollectiveFitResult r;
    r.collective = static_cast<Collective>(f.choice("collective", kCollectiveNames));
    r.inter_node = f.choice("scope", {"intra", "inter"}) == 1;
    r.ranks = static_cast<int>(f.integer("ranks", 1, kMaxGpus));
    r.latency_s = f.quantity("latency", Dimension::kDuration, 0, kMaxLatency);
    r.bus_bytes_per_s = f.quantity("bus_bandwidth", Dimension::kByteRate, kMinRate, kMaxRate);
    r.residual_rms = f.optional_number_in("residual_rms", 0, 1e9).value_or(0);
    r.samples = static_cast<int>(f.integer("samples", 1, 1 << 30));
    f.finish();
    c.collectives.push_back(r);
  }
  detail::JsonObject samples = o.object("samples");
  const nlohmann::json& cs = samples.array("collectives");
  for (size_t i = 0; i < cs.size(); ++i) {
    detail::JsonObject s(cs[i], where, "/samples/collectives/" + std::to_string(i));
    CollectiveSample x;
    x.collective = static_cast<Collective>(s.choice("collective", kCollectiveNames));
    x.inter_node = s.choice("scope", {"intra", "inter"}) == 1;
    x.ranks = static_cast<int>(s.integer("ranks", 1, kMaxGpus));
    x.bytes = static_cast<int64_t>(s.quantity("size", Dimension::kBytes, 1, kMaxSampleBytes));
    x.time_s = s.quantity("time", Dimension::kDuration, 1e-12, kMaxSampleTime);
    x.wrong = s.optional_integer("wrong", 0, int64_t{1} << 62).value_or(0);
    s.finish();
    c.collective_samples.push_back(x);
  }
  const nlohmann::json& gs = samples.array("gemm");
  for (size_t i = 0; i < gs.size(); ++i) {
    detail::JsonObject s(gs[i], where, "/samples/gemm/" + std::to_string(i));
    GemmSample x;
    x.m = gemm_dim(s, "m");
    x.n = gemm_dim(s, "n");
    x.k = gemm_dim(s, "k");
    x.dtype = kGemmDtypes[s.choice("dtype", kGemmDtypes)];
    x.time_s = s.quantity("time", Dimension::kDuration, 1e-12, kMaxSampleTime);
    s.finish();
    c.gemm_samples.push_back(x);
  }
  const nlohmann::json& ps = samples.array("copy");
  for (size_t i = 0; i < ps.size(); ++i) {
    detail::JsonObject s(ps[i], where, "/samples/copy/" + std::to_string(i));
    CopySample x;
    x.bytes = static_cast<int64_t>(s.quantity("size", Dimension::kBytes, 1, kMaxSampleBytes));
    x.time_s = s.quantity("time", Dimension::kDuration, 1e-12, kMaxSampleTime);
    s.finish();
    c.copy_samples.push_back(x);
  }
  samples.finish();
  if (auto rf = o.optional_object("run_fit")) {
    RunFit& f = c.run_fit;
    f.present = true;
    // A fit's scales stay within what fit_runs allows (calibrate/run_fit.h).
    detail::JsonObject s = rf->object("scales");
    f.scales.gemm_efficiency = s.number_in("gemm_efficiency", kMinRunScale, kMaxRunScale);
    f.scales.hbm_efficiency = s.number_in("hbm_efficiency", kMinRunScale, kMaxRunScale);
    f.scales.attention_efficiency = s.number_in("attention_efficiency", kMinRunScale, kMaxRunScale);
    f.scales.intra_bandwidth = s.number_in("intra_bandwidth", kMinRunScale, kMaxRunScale);
    f.scales.inter_bandwidth = s.number_in("inter_bandwidth", kMinRunScale, kMaxRunScale);
    // Files written before the host model carry no host scale: the published figure.
    f.scales.host_op_time = s.optional_number_in("host_op_time", kMinRunScale, kMaxRunScale).value_or(1.0);
    s.finish();
    const nlohmann::json& runs = rf->array("runs");
    for (size_t i = 0; i < runs.size(); ++i) {
      detail::JsonObject r(runs[i], where, "/run_fit/runs/" + std::to_string(i));
      RunResidual x;
      x.name = r.string("name");
      x.measured_s = r.quantity("measured", Dimension::kDuration, 1e-12, kMaxSampleTime);
      x.predicted_s = r.quantity("predicted", Dimension::kDuration, 0, kMaxSampleTime);
      x.leave_one_out_s = r.quantity("leave_one_out", Dimension::kDuration, 0, kMaxSampleTime);
      r.finish();
      f.runs.push_back(x);
    }
    f.residual_rms = rf->number_in("residual_rms", 0, 1e9);
    f.leave_one_out_rms = rf->number_in("leave_one_out_rms", 0, 1e9);
    rf->finish();
  }
  o.finish();
  c.where = where;
  return c;
}

Calibration load_calibration(const std::string& path) { return parse_calibration(detail::read_text_file(path), path); }

void apply_run_scales(const RunScales& s, ClusterSpec* cluster) {
  GpuSpec& g = cluster->gpu;
  g.gemm_efficiency = std::min(1.0, g.gemm_efficiency * s.gemm_efficiency);
  if (g.fp8_gemm_efficiency > 0) g.fp8_gemm_efficiency = std::min(1.0, g.fp8_gemm_efficiency * s.gemm_efficiency);
  g.hbm_efficiency = std::min(1.0, g.hbm_efficiency * s.hbm_efficiency);
  g.attention_efficiency = std::min(1.0, g.attention_efficiency * s.attention_efficiency);
  cluster->intra_node.bandwidth = Bandwidth::bytes_per_s(cluster->intra_node.bandwidth.bytes_per_s() * s.intra_bandwidth);
  if (cluster->inter_node) {
    cluster->inter_node->nic_bandwidth =
        Bandwidth::bytes_per_s(cluster->inter_node->nic_bandwidth.bytes_per_s() * s.inter_bandwidth);
  }
  cluster->host.op_overhead = Duration::seconds(cluster->host.op_overhead.s() * s.host_op_time);
}

void apply_calibration(const Calibration& c, const std::string& flag, ClusterSpec* cluster) {
  const std::string& where = c.where.empty() ? flag : c.where;
  if (!c.complete) {
    throw_input_error(where, c.where.empty() ? "" : "/complete", "the calibration is incomplete (interrupted sweep)",
                      "finish it with calibrate --resume");
  }
  const std::string want = gpu_type_of(cluster->gpu.name);
  if (c.gpu_type != want) {
    throw_input_error(where, c.where.empty() ? "" : "/gpu_type", "taken on " + c.device + " (" + c.gpu_type + "), but cluster " + cluster->name +
                      " has " + cluster->gpu.name + " (" + want + ")", "calibrate on the cluster you plan for");
  }
  if (c.backend == "runs") {
    apply_run_scales(c.run_fit.scales, cluster);
    cluster->calibration = c.device + " (fit to " + std::to_string(c.run_fit.runs.size()) + " measured runs)";
    return;
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
    k.ranks = f.ranks;
    std::map<int64_t, std::vector<double>> times;
    for (const CollectiveSample& s : c.collective_samples) {
      if (s.collective == f.collective && s.inter_node == f.inter_node && s.ranks == f.ranks && s.bytes > 0 &&
          s.time_s > 0) {
        times[s.bytes].push_back(s.time_s);
      }
    }
    for (auto& [bytes, t] : times) {
      std::sort(t.begin(), t.end());
      k.size_time.emplace_back(static_cast<double>(bytes), t[t.size() / 2]);
    }
    cluster->calibrated_collectives.push_back(k);
  }
  cluster->calibration = c.device + " (" + c.versions + ")";
}

}  // namespace trainplan
