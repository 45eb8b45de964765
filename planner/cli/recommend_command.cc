// `trainplan recommend`: search every layout, simulate the best, rank them
// and explain why the others lose.  With the fault options (stragglers,
// failures, --train-tokens) plans are ranked by expected time to train.
#include <unistd.h>

#include <algorithm>

#include <cmath>
#include <cstdio>
#include <iostream>
#include <sstream>

#include <CLI/CLI.hpp>

#include "planner/cli/commands.h"
#include "planner/cli/output.h"
#include "planner/cli/plan_flags.h"
#include "planner/export/exporters.h"
#include "planner/plan/plan_file.h"
#include "planner/report/html_report.h"
#include "planner/search/search.h"
#include "simulator/core/error.h"
#include "simulator/faults/convergence.h"
#include "simulator/faults/faults.h"
#include "simulator/framework/framework.h"
#include "simulator/memory/memory_model.h"
#include "simulator/taskgraph/lowering.h"
#include "simulator/spec/calibration.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"

namespace trainplan {

namespace {

// The frameworks that can run a plan simulated without --framework: those
// whose exporter accepts it (framework_refusal), in framework_names() order
// (issue 9: without --framework, recommend labels each plan with the
// frameworks that run it), each with its peak memory under its own execution
// profile where that does not fit the GPU (their optimizer, gradient buffers
// and accumulation differ from the neutral model's: DeepSpeed's
// BF16_Optimizer keeps 16-bit gradients beside fp32 ones, torchtitan and the
// exported PyTorch script fp32 master parameters), 0 where it fits.
struct FrameworkLabel {
  std::string name;
  double out_of_memory_bytes = 0;
};
std::vector<FrameworkLabel> frameworks_running(const ModelSpec& m, const ClusterSpec& c, const Layout& L) {
  if (L.plan.framework != Framework::kGeneric) return {{to_string(L.plan.framework)}};
  std::vector<FrameworkLabel> out;
  for (size_t i = 1; i < framework_names().size(); ++i) {
    // megatron-lm is the 2021-22 profile of the same exporter (current
    // Megatron): megatron-core stands for both.
    if (static_cast<Framework>(i) == Framework::kMegatronLM) continue;
    Layout k = L;
    k.plan.framework = static_cast<Framework>(i);
    if (framework_refusal(m, c, k)) continue;
    const MemoryReport mem = plan_memory(m, c, k);
    out.push_back({framework_names()[i], mem.fits ? 0.0 : mem.peak_bytes});
  }
  return out;
}

constexpr const char* kCompileHelp =
    "torch.compile every plan's model (torchtitan [compile] enable, the PyTorch script's per-block compile); "
    "with --framework torchtitan or pytorch";

struct RecommendFlags {
  std::string model = "llama3-8b";
  std::string cluster = "dgx-h100";
  int64_t nodes = 1;
  int64_t gpus = 0;
  int64_t gbs = 0;
  int64_t seq = 0;
  int top = 5;
  std::string precision = "bf16";
  std::string fp8_recipe;
  int64_t mtp_layers = 0;
  std::string moe_dispatcher = "alltoall";
  std::string moment_dtype = "fp32";
  std::string attention = "flash";
  std::string strategies;
  std::string convergence;  // --convergence SPEC (async plans)
  std::string framework;
  bool compile = false;  // --compile: torch.compile every plan (torchtitan, pytorch)
  std::string save;
  std::string calibration;
  bool json = false;
  std::string html;        // --html FILE (recommend) / --out FILE (report)
  bool report_only = false;  // `trainplan report`: the page only, one line on stdout
  FaultFlags faults;
  CLI::App* app = nullptr;
};

std::string fmt_pct(double fraction) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * fraction);
  return buf;
}

// The report page of a search (planner/report/html_report.h): the ranking,
// the best plan's step with its timeline, the scaling of each family from
// one node (doubling) to the requested size, and the faults when given.
std::string recommend_report(const ModelSpec& model, const ClusterSpec& cluster, int gpus, const SearchOptions& o,
                             const SearchResult& r) {
  nlohmann::json data;
  data["title"] = "trainplan: " + model.name + " on " + cluster.name + ", " + std::to_string(gpus) + " GPUs";
  data["subtitle"] = "gbs " + std::to_string(o.gbs) + " sequences of " +
                     std::to_string(o.seq > 0 ? o.seq : model.seq_len) + " tokens; " + std::to_string(r.evaluated) +
                     " plans evaluated, " + std::to_string(r.feasible) + " fit, " + std::to_string(r.simulated) +
                     " simulated (trainplan " + kVersion + ")";
  data["ranking"] = ranking_section(r);
  if (o.faults.any()) {
    data["ranking"]["ranked_by"] = o.faults.train_tokens > 0 ? "expected time to train" : "step time with stragglers";
  }
  const RankedPlan& best = r.plans.front();
  SimulateOptions so;
  so.trace = true;
  data["step"] = step_section(model, cluster, best.layout, simulate_step(model, cluster, best.layout, so));
  // Scaling: the same search at 1, 2, 4, ... nodes below the requested size.
  std::vector<std::pair<int, SearchResult>> sizes;
  if (gpus > cluster.gpus_per_node) {
    SearchOptions small = o;
    small.top_k = 1;
    small.progress = nullptr;
    small.faults = FaultConfig();
    for (int g = cluster.gpus_per_node; g < gpus; g *= 2) sizes.emplace_back(g, search_plans(model, cluster, g, small));
  }
  sizes.emplace_back(gpus, r);
  data["scaling"] = scaling_section(sizes);
  if (o.faults.any() && best.has_faults) {
    nlohmann::json faults;
    const FaultReport& fr = best.faults;
    std::string summary;
    if (fr.has_stragglers) summary += "straggler tax " + fmt_pct(fr.stragglers.tax) + "; ";
    if (fr.has_failures) {
      nlohmann::json sweep = nlohmann::json::array();
      for (const IntervalPoint& pt : fr.failures.sweep) sweep.push_back({{"interval_s", pt.interval_s}, {"goodput", pt.goodput}});
      faults["sweep"] = sweep;
      summary += "goodput " + fmt_pct(fr.goodput) + " at a checkpoint every " +
                 std::to_string(static_cast<long long>(std::llround(fr.failures.interval_s))) + " s; ";
    }
    nlohmann::json worlds = nlohmann::json::array();
    for (const WorldBest& w : r.worlds) {
      worlds.push_back({{"gpus", w.gpus}, {"goodput", w.best.faults.goodput},
                        {"straggler_tax", w.best.faults.has_stragglers ? w.best.faults.stragglers.tax : 0.0}});
    }
    faults["worlds"] = worlds;
    faults["summary"] = summary;
    data["faults"] = faults;
  }
  return html_report(data);
}

// The recompute column: none, selective, full, or full:N (the first N layers
// of each model chunk, Megatron's block method).
std::string recompute_column(const Plan& q) {
  if (q.recompute == Recompute::kFull && q.recompute_layers > 0) return "full:" + std::to_string(q.recompute_layers);
  return to_string(q.recompute);
}

// The fields that tell plans of one search apart (gbs, seq, dtypes are fixed).
std::string short_plan(const Plan& q) {
  std::ostringstream s;
  s << "tp=" << q.tp << " pp=" << q.pp << " dp=" << q.dp << " cp=" << q.cp << " vp=" << q.vp << " zero=" << q.zero;
  if (q.shard_group) s << " shard=" << q.shard_group;
  s << " mbs=" << q.mbs << " " << to_string(q.schedule) << " recompute=" << recompute_column(q)
    << " sp=" << (q.sp ? "on" : "off");
  if (q.dp_mode != DpMode::kSync) s << " " << to_string(q.dp_mode);
  if (q.offload != Offload::kNone) s << " offload=" << to_string(q.offload);
  return s.str();
}

// The fields of `other` that differ from `base`: "dp=4 cp=2 mbs=2".
std::string plan_difference(const Plan& base, const Plan& other) {
  std::ostringstream s;
  auto field = [&s](const char* name, const std::string& a, const std::string& b) {
    if (a == b) return;
    if (s.tellp() > 0) s << " ";
    s << name << "=" << b;
  };
  auto num = [](int64_t v) { return std::to_string(v); };
  field("tp", num(base.tp), num(other.tp));
  field("pp", num(base.pp), num(other.pp));
  field("dp", num(base.dp), num(other.dp));
  field("cp", num(base.cp), num(other.cp));
  field("vp", num(base.vp), num(other.vp));
  field("zero", num(base.zero), num(other.zero));
  field("shard", num(base.shard_group), num(other.shard_group));
  field("mbs", num(base.mbs), num(other.mbs));
  field("schedule", to_string(base.schedule), to_string(other.schedule));
  field("recompute", recompute_column(base), recompute_column(other));
  field("sp", base.sp ? "on" : "off", other.sp ? "on" : "off");
  field("offload", to_string(base.offload), to_string(other.offload));
  field("ep", num(base.ep), num(other.ep));
  field("etp", num(base.etp), num(other.etp));
  field("recompute-modules", recompute_modules_name(base.recompute_modules),
        recompute_modules_name(other.recompute_modules));
  field("fp8-recipe", to_string(base.fp8_recipe), to_string(other.fp8_recipe));
  field("tp-comm-overlap", base.tp_comm_overlap ? "on" : "off", other.tp_comm_overlap ? "on" : "off");
  field("compile", model_compiled(base) ? "on" : "off", model_compiled(other) ? "on" : "off");
  field("ep-overlap", base.ep_overlap ? "on" : "off", other.ep_overlap ? "on" : "off");
  field("delay-wgrad", base.delay_wgrad ? "on" : "off", other.delay_wgrad ? "on" : "off");
  field("moe-dispatcher", to_string(base.moe_dispatcher), to_string(other.moe_dispatcher));
  field("cp-comm-type", to_string(base.cp_comm), to_string(other.cp_comm));
  field("moe-pad-to-capacity", base.moe_pad_to_capacity ? "on" : "off", other.moe_pad_to_capacity ? "on" : "off");
  field("moe-router-fusion", base.moe_router_fusion ? "on" : "off", other.moe_router_fusion ? "on" : "off");
  field("cross-entropy-fusion", base.cross_entropy_fusion ? "on" : "off", other.cross_entropy_fusion ? "on" : "off");
  field("moe-shared-expert-overlap", base.moe_shared_expert_overlap ? "on" : "off",
        other.moe_shared_expert_overlap ? "on" : "off");
  field("cuda-graph", base.cuda_graph ? cuda_graph_modules_name(base.cuda_graph) : "off",
        other.cuda_graph ? cuda_graph_modules_name(other.cuda_graph) : "off");
  return s.str();
}

// The offload column: "-", "opt" or "param".
const char* offload_column(Offload o) {
  switch (o) {
    case Offload::kNone: return "-";
    case Offload::kOptimizer: return "opt";
    case Offload::kParams: return "param";
  }
  return "?";
}

std::string days(double s) {
  if (!std::isfinite(s)) return "never";
  char buf[32];
  std::snprintf(buf, sizeof buf, s < 86400 * 1e5 ? "%.2f" : "%.3g", s / 86400);
  return buf;
}

// What the deduplicating dispatcher would do for the best plan when the
// search did not try it (a generic search, whose plans export to targets
// without it; --moe-dispatcher alltoall named; an expert group inside one
// NVLink domain, search.cc flex_dispatcher_to_try): the same layout with
// DeepEP (HybridEP on an NVLink domain of more than 8 GPUs), if its framework
// runs it (resolve_plan's rules).  A Megatron-Core or torchtitan search with
// no dispatcher named ranks it itself (search.cc flex_dispatcher_to_try).
constexpr const char* kMoeDispatcherHelp =
    "MoE token dispatcher of every plan whose tokens cross GPUs: alltoall (default), deepep or hybridep "
    "(Megatron-Core's flex dispatcher, torchtitan's DeepEP/HybridEP backends)";
constexpr const char* kMomentDtypeHelp =
    "Adam's two moments fp32|bf16 in every plan with the distributed optimizer (zero >= 1, no offload; the "
    "others keep fp32): bf16 is Megatron-Core's precision-aware optimizer (--exp-avg-dtype/--exp-avg-sq-dtype "
    "bf16; default fp32)";

struct DispatcherHint {
  bool valid = false;
  MoeDispatcher dispatcher = MoeDispatcher::kDeepEp;
  double step_s = 0, base_step_s = 0;
  double a2a_ms = 0, base_a2a_ms = 0;  // an MoE layer's forward all-to-alls
};

DispatcherHint dispatcher_hint(const ModelSpec& model, const ClusterSpec& cluster, const SearchOptions& o,
                               const RankedPlan& best) {
  DispatcherHint h;
  const Plan& q = best.layout.plan;
  // The search tried this layout with the flex dispatcher (from the plan
  // without the stage split and graphs its variants add).
  Plan base = q;
  base.stage_layers.clear();
  base.cuda_graph = 0;
  const bool searched = flex_dispatcher_to_try(o, model, cluster, base) != MoeDispatcher::kAllToAll;
  if (searched || !model.has_moe || q.moe_dispatcher != MoeDispatcher::kAllToAll || int64_t{q.ep} * std::max(1, q.etp) < 2) {
    return h;
  }
  Plan flex = q;
  flex.moe_dispatcher = cluster.gpus_per_node > 8 ? MoeDispatcher::kHybridEp : MoeDispatcher::kDeepEp;
  const Layout L = resolve_plan(model, cluster, best.layout.gpus, flex);
  if (!L.feasible) return h;
  const StepReport rep = simulate_step(model, cluster, L, SimulateOptions{});
  h.valid = true;
  h.dispatcher = flex.moe_dispatcher;
  h.step_s = rep.step_time_s;
  h.base_step_s = best.report.step_time_s;
  h.a2a_ms = static_cast<double>(rep.moe_layer.ep_comm_forward_ps) * 1e-9;
  h.base_a2a_ms = static_cast<double>(best.report.moe_layer.ep_comm_forward_ps) * 1e-9;
  return h;
}

// What bf16 Adam moments would free on the best plan of an MoE search that
// kept them fp32 and turned layouts away for GPU memory (the MoE runs are
// where the practice is published: the DeepSeek-V3 report, NVIDIA's
// DeepSeek and Qwen3-MoE recipes): its peak with them, if its framework
// keeps them so (resolve_plan's rules: generic or Megatron-Core, 16-bit,
// the distributed optimizer, no offload).  Not
// ranked: the layouts that would then fit are searched by
// `recommend --moment-dtype bf16`, a choice of numerics the user makes.
struct MomentHint {
  bool valid = false;
  int64_t out_of_memory = 0;      // layouts the search turned away for GPU memory
  double optimizer_bytes = 0, base_optimizer_bytes = 0;  // on the best plan's peak stage
  double peak_bytes = 0, base_peak_bytes = 0;
};

MomentHint moment_hint(const ModelSpec& model, const ClusterSpec& cluster, const SearchOptions& o,
                       const SearchResult& r) {
  MomentHint h;
  const auto oom = r.rejected.find("out of GPU memory");
  if (!model.has_moe || r.plans.empty() || o.moment_dtype != MomentDtype::kFp32 || oom == r.rejected.end() ||
      oom->second <= 0) {
    return h;
  }
  const RankedPlan& best = r.plans.front();
  Plan bf16 = best.layout.plan;
  bf16.moment_dtype = MomentDtype::kBf16;
  const Layout L = resolve_plan(model, cluster, best.layout.gpus, bf16);
  if (!L.feasible) return h;
  const MemoryReport base = plan_memory(model, cluster, best.layout);
  const MemoryReport with = plan_memory(model, cluster, L);
  h.valid = true;
  h.out_of_memory = oom->second;
  h.base_peak_bytes = base.peak_bytes;
  h.peak_bytes = with.peak_bytes;
  h.base_optimizer_bytes = base.stages[static_cast<size_t>(base.peak_stage)].breakdown.optimizer;
  h.optimizer_bytes = with.stages[static_cast<size_t>(base.peak_stage)].breakdown.optimizer;
  return h;
}

// What torch.compile would do for the best plan of a torchtitan or PyTorch
// search run without --compile: the same layout compiled
// (model_compiled), if the framework may compile it.  Not ranked: compile
// time, recompilations and graph breaks are not modelled, and compiling is
// the user's choice (--compile).
struct CompileHint {
  bool valid = false;
  double step_s = 0, base_step_s = 0;
};

CompileHint compile_hint(const ModelSpec& model, const ClusterSpec& cluster, const RankedPlan& best) {
  CompileHint h;
  Plan compiled = best.layout.plan;
  if (model_compiled(compiled) ||
      (compiled.framework != Framework::kTorchtitan && compiled.framework != Framework::kPytorch)) {
    return h;
  }
  compiled.compile = true;
  const Layout L = resolve_plan(model, cluster, best.layout.gpus, compiled);
  if (!L.feasible) return h;
  h.valid = true;
  h.step_s = simulate_step(model, cluster, L, SimulateOptions{}).step_time_s;
  h.base_step_s = best.report.step_time_s;
  return h;
}

int run_recommend(const RecommendFlags& f) {
  if (!f.save.empty()) check_output_path(f.save, "--save");
  if (!f.html.empty()) check_output_path(f.html, f.report_only ? "--out" : "--html");
  FaultFlags fault_flags = f.faults;
  for (const FaultFlagInfo& info : fault_flag_table(&fault_flags)) {
    if (f.app != nullptr && f.app->count(info.name) > 0 && info.value->empty()) {
      throw_input_error(info.name, "", "empty value", "");
    }
  }
  SearchOptions o;
  o.faults = parse_fault_flags(f.faults);
  if (f.top < 1 || f.top > 1000) throw_input_error("--top", "", "must be between 1 and 1000, got " + std::to_string(f.top), "");
  auto given = [&f](const char* flag) { return f.app != nullptr && f.app->count(flag) > 0; };
  // --seq and --gbs default to derived values; given, they must be >= 1.
  if (given("--seq") && (f.seq < 1 || f.seq > kMaxSeqLen)) {
    throw_input_error("--seq", "", "out of range: " + std::to_string(f.seq),
                      "allowed: 1 to " + std::to_string(kMaxSeqLen) + "; omit it for the model's");
  }
  if (given("--gbs") && (f.gbs < 1 || f.gbs > kMaxGlobalBatch)) {
    throw_input_error("--gbs", "", "out of range: " + std::to_string(f.gbs),
                      "allowed: 1 to " + std::to_string(kMaxGlobalBatch) + "; omit it for about 4M tokens");
  }
  o.top_k = f.top;
  o.seq = f.seq;
  {
    Plan precision;
    set_precision_flags(f.precision, given("--fp8-recipe") ? &f.fp8_recipe : nullptr, &precision);
    o.precision = precision.precision;
    o.fp8_recipe = precision.fp8_recipe;
    o.fp8_recipe_given = precision.fp8_recipe_given;
    o.mtp_layers = static_cast<int>(in_range("--mtp-layers", f.mtp_layers, 0, kMaxMtpLayers));
    o.moe_dispatcher =
        static_cast<MoeDispatcher>(pick("--moe-dispatcher", f.moe_dispatcher, moe_dispatcher_names()));
    o.moe_dispatcher_given = given("--moe-dispatcher");
  }
  if (!f.framework.empty()) o.framework = static_cast<Framework>(pick("--framework", f.framework, framework_names()));
  if (f.compile && o.framework != Framework::kTorchtitan && o.framework != Framework::kPytorch) {
    throw_input_error("--compile", "",
                      "torch.compile runs in torchtitan and the PyTorch script, not in --framework " +
                          (f.framework.empty() ? std::string("generic") : f.framework),
                      "use --framework torchtitan or pytorch, or drop --compile");
  }
  o.compile = f.compile;
  o.moment_dtype = static_cast<MomentDtype>(pick("--moment-dtype", f.moment_dtype, {"fp32", "bf16"}));
  if (o.moment_dtype != MomentDtype::kFp32 && !runs_bf16_moments(o.framework)) {
    throw_input_error("--moment-dtype", "",
                      "bf16 Adam moments are Megatron-Core's precision-aware optimizer, not --framework " + f.framework,
                      "use --framework megatron-core or generic, or drop --moment-dtype");
  }
  if (o.moment_dtype != MomentDtype::kFp32 && o.precision == Precision::kFp32) {
    throw_input_error("--moment-dtype", "", "bf16 Adam moments need 16-bit training (they sit beside an fp32 master "
                      "copy)", "use --precision bf16, fp16 or fp8, or drop --moment-dtype");
  }
  if (o.moe_dispatcher != MoeDispatcher::kAllToAll && !runs_flex_dispatcher(o.framework)) {
    throw_input_error("--moe-dispatcher", "", f.moe_dispatcher + " runs in Megatron-Core and torchtitan, not in --framework " +
                      f.framework, "use --framework megatron-core or torchtitan, or drop --moe-dispatcher");
  }
  std::stringstream ss(f.strategies);
  std::string s;
  while (std::getline(ss, s, ',')) {
    if (s == "gpipe") o.gpipe = true;
    else if (s == "naive") o.naive = true;
    else if (s == "async") o.async_dp = true;
    else if (s == "offload") o.offload = true;
    else if (s == "zero-bubble") o.zero_bubble = true;
    else if (s == "all") o.gpipe = o.naive = o.async_dp = o.offload = o.zero_bubble = true;
    else throw_input_error("--strategies", "", "unknown strategy \"" + s + "\"", "allowed: gpipe, naive, async, offload, zero-bubble, all");
  }
  if (given("--convergence")) {
    if (!o.async_dp) {
      throw_input_error("--convergence", "", "only ranks async plans, and the search has none",
                        "add --strategies async (or all)");
    }
    o.convergence = parse_convergence_spec(f.convergence, "--convergence");
  }
  ModelSpec model = load_model(f.model);
  ClusterSpec cluster = load_cluster(f.cluster);
  if (!f.calibration.empty()) apply_calibration(load_calibration(f.calibration), "--calibration", &cluster);
  {
    // Every plan the search ranks runs the framework's default attention
    // (fused, but megatron-lm's own unfused: attention_run); --attention
    // names a fused kernel.
    static const std::vector<std::string> kernels = {"flash", "fa2", "cudnn", "fa3"};
    Plan probe;
    set_attention(&probe, kernels[pick("--attention", f.attention, kernels)]);
    probe.framework = o.framework;
    if (const std::string why = attention_kernel_conflict(probe, model, cluster.gpu.arch, cluster.gpu.name); !why.empty()) {
      throw_input_error("--attention", "", why, "use --attention flash");
    }
    o.attention_kernel = probe.attention_kernel;
  }
  int gpus = 0;
  if (given("--nodes") && given("--gpus")) throw_input_error("--gpus", "", "give only one of --nodes N or --gpus N", "");
  if (given("--gpus")) {
    check_gpu_count(cluster, f.gpus, "--gpus", "");
    gpus = static_cast<int>(f.gpus);
  } else {
    gpus = gpus_of_nodes(cluster, given("--nodes") ? f.nodes : 1);
  }
  // Default global batch: about 4M tokens (Llama 3 / GPT-3 scale), at least
  // one sequence per GPU.
  const int64_t seq = f.seq > 0 ? f.seq : model.seq_len;
  o.gbs = f.gbs > 0 ? f.gbs : std::max<int64_t>(gpus, (int64_t{4} << 20) / seq / gpus * gpus);
  const bool tty = isatty(2) != 0;
  ProgressLine progress("searching");
  if (tty) {
    o.progress = [&progress](const char* phase, int64_t done, int64_t total) {
      // Simulating stops early where the bounds allow; evaluating learns of
      // more plans as it goes.
      progress.update(phase, done, total, phase == std::string("simulating") ? "at most" : "at least");
    };
  }
  SearchResult r = search_plans(model, cluster, gpus, o);
  progress.clear();

  nlohmann::json out;
  out["tool"] = std::string("trainplan ") + kVersion;
  const std::string hash = config_hash(model, cluster, gpus,
                                       "recommend gbs=" + std::to_string(o.gbs) + " seq=" + std::to_string(seq) +
                                           " top=" + std::to_string(o.top_k) + " precision=" + f.precision + " fp8_recipe=" + f.fp8_recipe +
                                           (f.mtp_layers > 0 ? " mtp_layers=" + std::to_string(f.mtp_layers) : "") +
                                           (f.moe_dispatcher != "alltoall" ? " moe_dispatcher=" + f.moe_dispatcher : "") +
                                           (f.moment_dtype != "fp32" ? " moment_dtype=" + f.moment_dtype : "") +
                                           (f.attention != "flash" ? " attention=" + f.attention : "") +
                                           " strategies=" + f.strategies + " calibration=" + f.calibration +
                                           (f.framework.empty() ? "" : " framework=" + f.framework) +
                                           (f.compile ? " compile=on" : ""));
  out["config_hash"] = hash;
  out["command"] = "recommend";
  out["model"] = model.name;
  out["cluster"] = cluster.name;
  out["gpus"] = gpus;
  out["gbs"] = o.gbs;
  out["seq"] = seq;
  out["evaluated"] = r.evaluated;
  out["valid"] = r.valid;
  out["feasible"] = r.feasible;
  out["simulated"] = r.simulated;
  out["elapsed_s"] = rounded(r.elapsed_s, 3);
  out["evaluate_s"] = rounded(r.evaluate_s, 4);
  nlohmann::json plans = nlohmann::json::array();
  for (const RankedPlan& p : r.plans) {
    nlohmann::json j = plan_to_json(p.layout.plan);
    j["stage_layers"] = p.layout.stage_layers;
    if (!p.default_split.empty()) {
      // Stages balanced by their work: the same plan at the default split.
      j["default_split"] = {{"stage_layers", p.default_split}, {"fits", p.default_split_fits}};
      j["default_split"]["step_time_s"] =
          p.default_split_fits ? nlohmann::json(rounded(p.default_split_step_s, 6)) : nlohmann::json(nullptr);
    }
    j["family"] = p.family;
    const std::string note = execution_profile(p.layout.plan).version_note;
    if (!note.empty()) j["framework_note"] = note;
    j["gpus"] = p.layout.gpus;
    j["step_time_s"] = rounded(p.report.step_time_s, 6);
    j["tokens_per_s"] = rounded(p.report.tokens_per_s, 1);
    j["mfu"] = rounded(p.report.mfu, 4);
    j["peak_memory_gib"] = rounded(to_gib(p.report.peak_memory_bytes), 3);
    j["bubble_fraction"] = rounded(p.report.bubble_fraction, 4);
    j["exposed_comm_fraction"] = rounded(p.report.exposed_comm_fraction, 4);
    j["lower_bound_s"] = rounded(p.lower_bound_s, 6);
    j["limit"] = p.limit;
    if (p.has_convergence) {
      const AsyncConvergence& ac = p.convergence;
      j["convergence"] = {{"staleness", ac.staleness},
                          {"lr_scale", rounded(ac.lr_scale, 6)},
                          {"max_lr_scale", rounded(ac.max_lr_scale, 6)},
                          {"sample_efficiency", rounded(ac.sample_efficiency, 6)},
                          {"floor_ratio", rounded(ac.floor_ratio, 6)},
                          {"score_s", rounded(p.score_s, 6)}};
    }
    nlohmann::json ties = nlohmann::json::array();
    for (const Layout& t : p.ties) ties.push_back(plan_to_json(t.plan));
    j["ties"] = ties;
    nlohmann::json runs = nlohmann::json::array();
    nlohmann::json oom = nlohmann::json::object();
    for (const FrameworkLabel& fw : frameworks_running(model, cluster, p.layout)) {
      runs.push_back(fw.name);
      if (fw.out_of_memory_bytes > 0) oom[fw.name] = rounded(to_gib(fw.out_of_memory_bytes), 2);
    }
    j["frameworks"] = runs;
    j["frameworks_out_of_memory_gib"] = oom;
    if (p.has_faults) {
      const FaultReport& fr = p.faults;
      if (fr.has_stragglers) j["straggler_tax"] = rounded(fr.stragglers.tax, 4);
      if (fr.has_time_to_train) {
        j["goodput"] = rounded(fr.goodput, 4);
        j["time_to_train_s"] = {{"mean", rounded(fr.time_to_train_mean_s, 1)},
                                {"p50", rounded(fr.time_to_train_p50_s, 1)},
                                {"p90", rounded(fr.time_to_train_p90_s, 1)},
                                {"expected", rounded(fr.time_to_train_expected_s, 1)}};
      }
      if (fr.has_failures) {
        j["failures_per_hour"] = rounded(fr.failures.rate_per_hour, 6);
        j["checkpoint_interval_s"] = rounded(fr.failures.interval_s, 3);
        j["young_daly_interval_s"] = rounded(fr.failures.young_interval_s, 3);
      }
      j["score_s"] = rounded(p.score_s, 3);
    }
    plans.push_back(j);
  }
  out["plans"] = plans;
  const CompileHint compiled = r.plans.empty() ? CompileHint{} : compile_hint(model, cluster, r.plans.front());
  if (compiled.valid) {
    out["best_compiled"] = {{"step_time_s", rounded(compiled.step_s, 6)},
                            {"eager_step_time_s", rounded(compiled.base_step_s, 6)}};
  }
  const DispatcherHint hint = r.plans.empty() ? DispatcherHint{} : dispatcher_hint(model, cluster, o, r.plans.front());
  const MomentHint moments = moment_hint(model, cluster, o, r);
  if (moments.valid) {
    out["best_with_bf16_moments"] = {{"peak_memory_gib", rounded(to_gib(moments.peak_bytes), 3)},
                                     {"optimizer_gib", rounded(to_gib(moments.optimizer_bytes), 3)},
                                     {"fp32_peak_memory_gib", rounded(to_gib(moments.base_peak_bytes), 3)},
                                     {"fp32_optimizer_gib", rounded(to_gib(moments.base_optimizer_bytes), 3)}};
  }
  if (hint.valid) {
    out["best_with_flex_dispatcher"] = {{"moe_dispatcher", to_string(hint.dispatcher)},
                                        {"step_time_s", rounded(hint.step_s, 6)},
                                        {"ep_comm_forward_ms", rounded(hint.a2a_ms, 4)},
                                        {"alltoall_step_time_s", rounded(hint.base_step_s, 6)},
                                        {"alltoall_ep_comm_forward_ms", rounded(hint.base_a2a_ms, 4)}};
  }
  nlohmann::json worlds = nlohmann::json::array();
  for (const WorldBest& w : r.worlds) {
    const FaultReport& fr = w.best.faults;
    worlds.push_back({{"gpus", w.gpus},
                      {"plan", plan_to_json(w.best.layout.plan)},
                      {"step_time_s", rounded(w.best.report.step_time_s, 6)},
                      {"failures_per_hour", rounded(fr.failures.rate_per_hour, 6)},
                      {"goodput", rounded(fr.goodput, 4)},
                      {"time_to_train_s", {{"mean", rounded(fr.time_to_train_mean_s, 1)},
                                           {"p50", rounded(fr.time_to_train_p50_s, 1)},
                                           {"p90", rounded(fr.time_to_train_p90_s, 1)},
                                           {"expected", rounded(fr.time_to_train_expected_s, 1)}}}});
  }
  if (!r.worlds.empty()) out["worlds"] = worlds;
  if (o.faults.any()) {
    out["ranked_by"] = o.faults.train_tokens > 0 ? "expected time to train" : "step time with stragglers";
    out["seed"] = o.faults.seed;
  } else {
    out["ranked_by"] = "step time";
  }
  out["rejected"] = r.rejected;
  out["rejected_examples"] = r.rejected_example;
  nlohmann::json fam = nlohmann::json::array();
  for (const FamilyVerdict& v : r.families) {
    nlohmann::json e = {{"family", v.family}, {"verdict", v.verdict}};
    // The family's best plan that fits: its step, to set beside the winner's.
    if (v.fits) {
      e["step_time_s"] = rounded(v.report.step_time_s, 6);
      // What the ranking compares, where it is not the step: expected
      // seconds to train (failures) or to the target loss (async DP).
      if (v.score_s != v.report.step_time_s) e["score_s"] = rounded(v.score_s, 3);
    }
    fam.push_back(e);
  }
  out["families"] = fam;
  // fits: some plan fits in memory; runs: some plan is ranked (one that
  // fits may never finish under --mtbf-*, or diverge as async DP).
  out["fits"] = r.feasible > 0;
  out["runs"] = !r.plans.empty();
  if (!r.widened.empty()) out["widened"] = r.widened;
  if (r.feasible == 0) {
    out["min_peak_gib"] = rounded(to_gib(r.min_peak_bytes), 3);
    out["capacity_gib"] = rounded(to_gib(static_cast<double>(cluster.gpu.memory)), 3);
    out["advice"] = r.advice;
  }
  if (!f.save.empty()) {
    if (r.plans.empty()) {
      throw_input_error("--save", "", r.feasible > 0 ? "no plan can run, nothing to save" : "no plan fits, nothing to save",
                        "see the reasons above");
    }
    PlanFile pf;
    pf.model = f.model;
    pf.cluster = f.cluster;
    pf.gpus = r.plans.front().layout.gpus;
    pf.plan = r.plans.front().layout.plan;
    write_file_atomically(f.save, plan_file_json(pf), "--save");
  }
  if (!f.html.empty()) {
    const char* flag = f.report_only ? "--out" : "--html";
    if (r.plans.empty()) {
      throw_input_error(flag, "", r.feasible > 0 ? "no plan can run, no report to write" : "no plan fits, no report to write",
                        "see the reasons above");
    }
    write_file_atomically(f.html, recommend_report(model, cluster, gpus, o, r), flag);
    if (f.report_only) {
      std::printf("wrote %s: %s on %s, %d GPUs, best plan %s\n", f.html.c_str(), model.name.c_str(),
                  cluster.name.c_str(), gpus, describe_plan(r.plans.front().layout.plan).c_str());
      return 0;
    }
  }
  if (f.json) {
    std::cout << out.dump(2) << "\n";
    return 0;
  }
  std::printf("# trainplan %s recommend: %s on %s, %d GPUs, gbs %lld sequences of %lld tokens (config %s)\n",
              kVersion, model.name.c_str(), cluster.name.c_str(), gpus, static_cast<long long>(o.gbs),
              static_cast<long long>(seq), hash.c_str());
  if (o.fp8_recipe != Fp8Recipe::kNone) {
    if (o.fp8_recipe_given) {
      std::printf("# precision fp8 (bf16 with FP8 linear GEMMs), recipe %s\n", to_string(o.fp8_recipe));
    } else {
      std::printf("# precision fp8 (bf16 with FP8 linear GEMMs), recipe %s (tensorwise with ZeRO-3: FSDP2 float8)\n",
                  to_string(default_fp8_recipe(cluster, 0)));
    }
  }
  if (!flash_is_default(o.framework) && o.attention_kernel == AttentionKernel::kDefault) {
    std::printf("# attention: megatron-lm runs its own unfused attention in every plan (the s x s scores stored; its "
                "FlashAttention is opt-in: --attention fa2)\n");
  }
  std::printf("# %lld plans: %lld valid, %lld fit in memory, %lld simulated; %.2f s\n",
              static_cast<long long>(r.evaluated), static_cast<long long>(r.valid), static_cast<long long>(r.feasible),
              static_cast<long long>(r.simulated), r.elapsed_s);
  if (!r.widened.empty()) std::printf("# %s\n", r.widened.c_str());
  if (r.valid == 0) {
    std::printf("no valid plan for %d GPUs and gbs %lld (see the rules below)\n", gpus, static_cast<long long>(o.gbs));
  } else if (r.plans.empty() && r.feasible > 0) {
    // Every plan that fits was simulated and none can finish (search.cc
    // never_finishes): failures too frequent, or async DP diverging.
    std::printf("no plan can run: %lld fit in memory and none of them finishes (why below)\n",
                static_cast<long long>(r.feasible));
    for (const auto& [reason, example] : r.rejected_example) {
      if (reason.rfind("never finishes", 0) == 0) std::printf("  e.g. %s\n", example.c_str());
    }
  } else if (r.plans.empty()) {
    std::printf("nothing fits: the closest plan needs %.1f GiB per GPU, the GPU has %.1f GiB\n",
                to_gib(r.min_peak_bytes), to_gib(static_cast<double>(cluster.gpu.memory)));
    for (const std::string& a : r.advice) std::printf("  with %s\n", a.c_str());
  } else {
    const bool ttt = o.faults.train_tokens > 0;
    const bool tax = o.faults.stragglers_given;
    const std::string& stuck = r.plans.front().faults.failures.cannot_run;
    if (!stuck.empty()) std::printf("no plan can run: even the best one below cannot: %s\n", stuck.c_str());
    if (o.faults.any()) {
      std::printf("# ranked by %s\n", ttt ? "expected time to train (closed form; p50/p90 from the Monte Carlo in --json)"
                                          : "step time with stragglers");
    }
    std::printf("%4s %6s %3s %3s %5s %3s %3s %4s %4s %5s %-9s %-3s %-11s %-5s %11s %12s %6s %9s", "rank", "gpus", "tp",
                "pp", "dp", "cp", "vp", "zero", "shrd", "mbs", "recompute", "sp", "schedule", "offl", "step(s)",
                "tokens/s", "MFU", "mem(GiB)");
    if (model.has_moe) std::printf(" %4s %4s", "ep", "etp");
    if (tax) std::printf(" %7s", "tax");
    if (o.faults.failures_given) std::printf(" %8s %8s", "fail/h", "goodput");
    if (ttt) std::printf(" %9s", "TTT(d)");
    std::printf("\n");
    int rank = 1;
    for (const RankedPlan& p : r.plans) {
      const Plan& q = p.layout.plan;
      std::printf("%4d %6d %3d %3d %5d %3d %3d %4d %4d %5lld %-9s %-3s %-11s %-5s %11.4f %12.0f %5.1f%% %9.2f", rank++,
                  p.layout.gpus, q.tp, q.pp, q.dp, q.cp, q.vp, q.zero, q.shard_group, static_cast<long long>(q.mbs),
                  recompute_column(q).c_str(), q.sp ? "on" : "off", to_string(q.schedule), offload_column(q.offload),
                  p.report.step_time_s, p.report.tokens_per_s, 100 * p.report.mfu, to_gib(p.report.peak_memory_bytes));
      if (model.has_moe) std::printf(" %4d %4d", q.ep, q.etp);
      if (tax) std::printf(" %6.1f%%", 100 * p.faults.stragglers.tax);
      if (o.faults.failures_given) std::printf(" %8.3f %7.1f%%", p.faults.failures.rate_per_hour, 100 * p.faults.goodput);
      if (ttt) std::printf(" %9s", days(p.faults.time_to_train_expected_s).c_str());
      std::printf("\n");
      std::printf("       %s: %s\n", p.family.c_str(), p.limit.c_str());
      if (p.has_convergence) {
        const AsyncConvergence& ac = p.convergence;
        std::printf("       async: staleness %d, learning rate x %.4g (lr=%s): %.3f x sync's progress per sample, "
                    "noise floor x %.3f; ranked by step / %.3f (%s)\n",
                    ac.staleness, ac.lr_scale, async_lr_name(o.convergence.lr), ac.sample_efficiency,
                    ac.floor_ratio, ac.sample_efficiency, o.convergence.describe().c_str());
      }
      if (q.recompute == Recompute::kSelective && q.recompute_modules != 0 && q.recompute_modules != kRcCoreAttn) {
        std::printf("       recompute modules: %s\n", recompute_modules_name(q.recompute_modules).c_str());
      }
      if (!q.stage_layers.empty()) {
        // The search's work-balanced split (work_balanced_stage_layers),
        // against the same plan at the default split.
        auto list = [](const std::vector<int>& v) {
          std::string text;
          for (int n : v) text += (text.empty() ? "" : ",") + std::to_string(n);
          return text;
        };
        std::string against;
        if (!p.default_split.empty()) {
          char took[64];
          std::snprintf(took, sizeof took, "takes %.4f s (%+.1f%%)", p.default_split_step_s,
                        100 * (p.default_split_step_s / p.report.step_time_s - 1));
          against = "; split " + list(p.default_split) + " it " + (p.default_split_fits ? took : "does not fit");
        }
        std::printf("       pipeline stages of %s layers, balanced by their work (the embedding, the output layer "
                    "and the loss at their simulated time)%s\n",
                    list(q.stage_layers).c_str(), against.c_str());
      }
      if (q.tp_comm_overlap) {
        std::printf("       TP communication overlapped with the GEMMs (%s)\n",
                    q.framework == Framework::kTorchtitan
                        ? "torchtitan async TP, compiled"
                        : q.framework == Framework::kMegatronCore ? "Megatron-Core --tp-comm-overlap"
                                                                  : "Megatron-Core --tp-comm-overlap, torchtitan async TP");
      }
      if (model_compiled(q) && !q.tp_comm_overlap) {
        std::printf("       model under torch.compile (%s)\n",
                    q.compile ? "--compile" : "float8: torchtitan compiles it to fuse the scaling and casts");
      }
      if (q.ep_overlap) {
        std::printf("       expert all-to-alls overlapped with another micro-batch's compute (Megatron-Core "
                    "--overlap-moe-expert-parallel-comm%s)\n",
                    q.delay_wgrad ? " --delay-wgrad-compute" : "");
      }
      if (q.cp > 1 && q.cp_comm == CpComm::kA2a) {
        std::printf("       context parallelism as Ulysses all-to-alls of Q, K, V and the output, each rank attending "
                    "over the whole sequence (%s)\n",
                    q.framework == Framework::kDeepSpeed ? "DeepSpeed-Ulysses, Megatron-DeepSpeed --ds-sequence-parallel-size"
                    : q.framework == Framework::kMegatronCore ? "Megatron-Core --cp-comm-type a2a"
                                                              : "Megatron-Core --cp-comm-type a2a, DeepSpeed-Ulysses");
      }
      if (q.moe_dispatcher != MoeDispatcher::kAllToAll) {
        std::printf("       tokens dispatched by %s (each token once per destination rank and node%s)\n",
                    to_string(q.moe_dispatcher),
                    q.framework == Framework::kMegatronCore ? ": Megatron-Core's flex dispatcher" : "");
      }
      if (q.moe_shared_expert_overlap) {
        std::printf("       shared experts beside the token all-to-alls (Megatron-Core --moe-shared-expert-overlap)\n");
      }
      if (q.moe_router_fusion) {
        std::printf("       router fused (Megatron-Core --moe-router-fusion: 31 kernels instead of 72)\n");
      }
      if (q.cross_entropy_fusion) {
        std::printf("       loss fused (Megatron-Core --cross-entropy-loss-fusion: 32 instead of 52 bytes per logit)\n");
      }
      if (q.cuda_graph != 0) {
        std::printf("       layers captured in CUDA graphs: %s (Megatron-Core --cuda-graph-impl transformer_engine; "
                    "searched because the eager layers are host-bound)\n",
                    cuda_graph_modules_name(q.cuda_graph).c_str());
      }
      if (o.framework == Framework::kGeneric) {
        const std::vector<FrameworkLabel> fws = frameworks_running(model, cluster, p.layout);
        std::string list;
        for (const FrameworkLabel& fw : fws) list += (list.empty() ? "" : ", ") + fw.name;
        std::printf("       runs on: %s\n", list.empty() ? "none of the export targets (see trainplan export)" : list.c_str());
        for (const FrameworkLabel& fw : fws) {
          if (fw.out_of_memory_bytes <= 0) continue;
          std::printf("       but under %s's own profile it needs %.1f GiB per GPU: does not fit (recommend --framework %s)\n",
                      fw.name.c_str(), to_gib(fw.out_of_memory_bytes), fw.name.c_str());
        }
      }
      if (!p.ties.empty()) {
        std::printf("       same step time exactly (this one is simpler): ");
        const size_t shown = std::min<size_t>(p.ties.size(), 3);
        for (size_t i = 0; i < shown; ++i) {
          std::printf("%s%s", i == 0 ? "" : "; ", plan_difference(q, p.ties[i].plan).c_str());
        }
        if (shown < p.ties.size()) std::printf("; %zu more (--json lists all)", p.ties.size() - shown);
        std::printf("\n");
      }
    }
    const bool v_listed = std::any_of(r.plans.begin(), r.plans.end(),
                                      [](const RankedPlan& rp) { return v_shape(rp.layout.plan.schedule); });
    std::printf("# shrd: ZeRO-3 shard group (0 = all dp*cp ranks; smaller = hybrid shard, replicated across groups); "
                "vp: model chunks per pipeline rank (interleaved 1F1B%s); offl: offload to host memory (opt = optimizer "
                "states, param = parameters too)\n",
                v_listed ? "; zb-v and dualpipe-v always run 2, placed in a V" : "");
  }
  if (!r.worlds.empty() && !r.plans.empty()) {
    std::printf("best plan per world size (a larger world fails more often):\n");
    std::printf("  %6s %10s %8s %8s %9s %9s  %s\n", "gpus", "step(s)", "fail/h", "goodput", "TTT(d)", "vs best", "plan");
    const double best = r.plans.front().score_s;
    for (const WorldBest& w : r.worlds) {
      const FaultReport& fr = w.best.faults;
      std::printf("  %6d %10.4f %8.3f %7.1f%% %9s %+8.1f%%  %s\n", w.gpus, w.best.report.step_time_s,
                  fr.failures.rate_per_hour, 100 * fr.goodput, days(fr.time_to_train_expected_s).c_str(),
                  100 * (w.best.score_s / best - 1), short_plan(w.best.layout.plan).c_str());
    }
  }
  {
    // The framework version a listed plan's profile follows, where it
    // matters (as `simulate` prints it), once per note with the plans it
    // concerns.
    std::map<std::string, std::string> notes;
    int rank_of = 1;
    for (const RankedPlan& p : r.plans) {
      const std::string note = execution_profile(p.layout.plan).version_note;
      if (!note.empty()) notes[note] += (notes[note].empty() ? "" : ", ") + std::to_string(rank_of);
      ++rank_of;
    }
    for (const auto& [note, ranks] : notes) std::printf("# framework (rank %s): %s\n", ranks.c_str(), note.c_str());
  }
  if (compiled.valid && compiled.step_s < compiled.base_step_s) {
    std::printf("with --compile (torch.compile of the model: its elementwise ops fused) the best plan's step falls "
                "from %.4f to %.4f s (%+.1f%%); not ranked: compile time, recompilation and graph breaks are not "
                "modelled\n",
                compiled.base_step_s, compiled.step_s, 100 * (compiled.step_s / compiled.base_step_s - 1));
  }
  if (hint.valid && hint.step_s < hint.base_step_s) {
    std::printf("with --moe-dispatcher %s (each token once per destination rank and node) the best plan's expert "
                "all-to-alls fall from %.3f to %.3f ms per MoE layer forward and its step to %.4f s (%+.1f%%); not "
                "ranked: %s\n",
                to_string(hint.dispatcher), hint.base_a2a_ms, hint.a2a_ms, hint.step_s,
                100 * (hint.step_s / hint.base_step_s - 1),
                o.moe_dispatcher_given ? "--moe-dispatcher alltoall was asked for"
                : o.framework == Framework::kGeneric
                    ? "a generic plan exports to targets without it (recommend --framework megatron-core or "
                      "torchtitan searches it where the expert group spans NVLink domains)"
                    : "the search tries it where the expert group spans NVLink domains, and this one's does not");
  }
  if (moments.valid) {
    std::printf("with --moment-dtype bf16 (Adam's moments in bf16: Megatron-Core's precision-aware optimizer, as "
                "DeepSeek-V3 trained) the best plan's optimizer states fall from %.2f to %.2f GiB per GPU and its "
                "peak from %.2f to %.2f GiB; %lld layouts were out of GPU memory here: recommend --moment-dtype bf16 "
                "searches those that then fit\n",
                to_gib(moments.base_optimizer_bytes), to_gib(moments.optimizer_bytes), to_gib(moments.base_peak_bytes),
                to_gib(moments.peak_bytes), static_cast<long long>(moments.out_of_memory));
  }
  std::printf("why the others lose:\n");
  // A kind of reason with numbers in it ("tp=N does not divide ...") is
  // shown by one of its reasons verbatim: N in a message reads as a name
  // ("zb-Np", "use zero N or N").
  for (const auto& [reason, count] : r.rejected) {
    if (count <= 0) continue;
    auto ex = r.rejected_example.find(reason);
    if (ex == r.rejected_example.end() || reason.find('N') == std::string::npos || rule_of(ex->second) == ex->second) {
      std::printf("  %8lld  %s\n", static_cast<long long>(count), reason.c_str());
      continue;
    }
    const std::string head = reason.substr(0, reason.size() - rule_of(ex->second).size());
    std::printf("  %8lld  %s%s%s\n", static_cast<long long>(count), head.c_str(), count > 1 ? "e.g. " : "",
                ex->second.c_str());
  }
  for (const FamilyVerdict& v : r.families) std::printf("  %s: %s\n", v.family.c_str(), v.verdict.c_str());
  if (!f.save.empty()) std::printf("saved the best plan to %s\n", f.save.c_str());
  return 0;
}

}  // namespace

void register_recommend_command(CLI::App* app, int* status) {
  static RecommendFlags f;
  CLI::App* cmd = app->add_subcommand("recommend", "find the fastest layout that fits, and explain why the others lose");
  cmd->add_option("--model", f.model, "model name or path (default llama3-8b)");
  cmd->add_option("--cluster", f.cluster, "cluster name or path (default dgx-h100)");
  cmd->add_option("--nodes", f.nodes, "number of nodes, each gpus_per_node GPUs (`trainplan clusters`; on GB200/GB300 NVL72 one 64-GPU NVLink domain) (default 1)");
  cmd->add_option("--gpus", f.gpus, "number of GPUs");
  cmd->add_option("--gbs", f.gbs, "global batch in sequences (default: about 4M tokens)");
  cmd->add_option("--seq", f.seq, "sequence length (default: the model's)");
  cmd->add_option("--top", f.top, "how many plans to show (default 5)");
  add_precision_flags(cmd, &f.precision, &f.fp8_recipe);
  cmd->add_option("--mtp-layers", f.mtp_layers,
                  "multi-token prediction depths in every plan (Megatron-Core --mtp-num-layers; default 0)");
  cmd->add_option("--moe-dispatcher", f.moe_dispatcher, kMoeDispatcherHelp);
  cmd->add_option("--moment-dtype", f.moment_dtype, kMomentDtypeHelp);
  cmd->add_option("--attention", f.attention,
                  "flash|fa2|cudnn|fa3: the attention kernel of every plan (default flash: the framework's own, "
                  "cudnn under Megatron-Core on Hopper and Blackwell, fa2 elsewhere, megatron-lm's unfused attention; "
                  "a named one is costed at its published rate against it, Hopper only; docs/frameworks.md)");
  cmd->add_option("--strategies", f.strategies, "also consider: gpipe,naive,async,offload,zero-bubble or all");
  cmd->add_option("--convergence", f.convergence,
                  std::string("async plans: the stale-gradient convergence model they are ranked by (time to a target "
                              "loss); ") + kConvergenceGrammar);
  cmd->add_option("--framework", f.framework,
                  "search only plans this framework runs, simulated as it runs them: "
                  "generic|megatron-lm|megatron-core|deepspeed|torchtitan|pytorch (default generic)");
  cmd->add_flag("--compile", f.compile, kCompileHelp);
  cmd->add_option("--save", f.save, "write the best plan to this plan.json");
  cmd->add_option("--calibration", f.calibration,
                  "calibration.json from `trainplan calibrate` (replaces the cluster's GEMM, memory and collective "
                  "figures)");
  cmd->add_flag("--json", f.json, "JSON output");
  cmd->add_option("--html", f.html, "also write the report page (as `trainplan report`) to this HTML file");
  for (const FaultFlagInfo& info : fault_flag_table(&f.faults)) cmd->add_option(info.name, *info.value, info.help)->type_name(info.type_name);
  f.app = cmd;
  cmd->callback([status] { *status = run_recommend(f); });
}

void register_report_command(CLI::App* app, int* status) {
  static RecommendFlags f;
  f.report_only = true;
  CLI::App* cmd = app->add_subcommand(
      "report", "write one self-contained HTML page: ranking, why the others lose, memory, the step's timeline, "
                "scaling and faults");
  cmd->add_option("-o,--out", f.html, "the HTML file to write (required)")->required();
  cmd->add_option("--model", f.model, "model name or path (default llama3-8b)");
  cmd->add_option("--cluster", f.cluster, "cluster name or path (default dgx-h100)");
  cmd->add_option("--nodes", f.nodes, "number of nodes, each gpus_per_node GPUs (`trainplan clusters`; on GB200/GB300 NVL72 one 64-GPU NVLink domain) (default 1)");
  cmd->add_option("--gpus", f.gpus, "number of GPUs");
  cmd->add_option("--gbs", f.gbs, "global batch in sequences (default: about 4M tokens)");
  cmd->add_option("--seq", f.seq, "sequence length (default: the model's)");
  cmd->add_option("--top", f.top, "how many plans to rank (default 5)");
  add_precision_flags(cmd, &f.precision, &f.fp8_recipe);
  cmd->add_option("--mtp-layers", f.mtp_layers,
                  "multi-token prediction depths in every plan (Megatron-Core --mtp-num-layers; default 0)");
  cmd->add_option("--moe-dispatcher", f.moe_dispatcher, kMoeDispatcherHelp);
  cmd->add_option("--moment-dtype", f.moment_dtype, kMomentDtypeHelp);
  cmd->add_option("--strategies", f.strategies, "also consider: gpipe,naive,async,offload,zero-bubble or all");
  cmd->add_option("--convergence", f.convergence,
                  std::string("async plans: the stale-gradient convergence model they are ranked by (time to a target "
                              "loss); ") + kConvergenceGrammar);
  cmd->add_option("--framework", f.framework,
                  "search only plans this framework runs: generic|megatron-lm|megatron-core|deepspeed|torchtitan|"
                  "pytorch (default generic)");
  cmd->add_flag("--compile", f.compile, kCompileHelp);
  cmd->add_option("--calibration", f.calibration, "calibration.json from `trainplan calibrate`");
  for (const FaultFlagInfo& info : fault_flag_table(&f.faults)) cmd->add_option(info.name, *info.value, info.help)->type_name(info.type_name);
  f.app = cmd;
  cmd->callback([status] { *status = run_recommend(f); });
}

}  // namespace trainplan
