#include "planner/plan/plan_file.h"

#include <sstream>

#include "simulator/framework/framework.h"

#include <nlohmann/json.hpp>

#include "simulator/core/error.h"
#include "simulator/spec/calibration.h"
#include "simulator/spec/json_reader.h"

namespace trainplan {

namespace {

// The bits a JSON array of names sets (names[i] sets bit i); bad input names
// `where` and the element's pointer under `pointer`.
uint32_t name_bits(const nlohmann::json& v, const std::string& where, const std::string& pointer,
                   const std::vector<std::string>& names, const std::string& what) {
  uint32_t bits = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    const std::string ptr = pointer + "/" + std::to_string(i);
    if (!v[i].is_string()) throw_input_error(where, ptr, "must be a string", "a " + what + " name");
    const std::string name = v[i].get<std::string>();
    size_t k = 0;
    while (k < names.size() && names[k] != name) ++k;
    if (k == names.size()) {
      std::string list;
      for (const std::string& n : names) list += (list.empty() ? "" : ", ") + n;
      throw_input_error(where, ptr, "unknown " + what + " \"" + name + "\"", "allowed: " + list);
    }
    bits |= 1u << k;
  }
  return bits;
}

}  // namespace

nlohmann::json plan_to_json(const Plan& p) {
  nlohmann::json j;
  j["tp"] = p.tp;
  j["pp"] = p.pp;
  j["dp"] = p.dp;
  j["cp"] = p.cp;
  j["vp"] = p.vp;
  j["zero"] = p.zero;
  j["shard_group"] = p.shard_group;
  j["mbs"] = p.mbs;
  j["gbs"] = p.gbs;
  j["seq"] = p.seq;
  j["recompute"] = to_string(p.recompute);
  if (p.recompute == Recompute::kSelective && p.recompute_modules != 0 && p.recompute_modules != kRcCoreAttn) {
    j["recompute_modules"] = set_bit_names(p.recompute_modules, recompute_module_names());
  }
  if (p.recompute_layers > 0) j["recompute_layers"] = p.recompute_layers;
  j["sp"] = p.sp;
  j["schedule"] = to_string(p.schedule);
  j["precision"] = precision_name(p);
  if (p.fp8_recipe != Fp8Recipe::kNone) j["fp8_recipe"] = to_string(p.fp8_recipe);
  j["grad_dtype"] = to_string(p.grad_dtype);
  if (p.moment_dtype != MomentDtype::kFp32) j["moment_dtype"] = to_string(p.moment_dtype);
  j["attention"] = attention_name(p);
  j["dp_mode"] = to_string(p.dp_mode);
  j["offload"] = to_string(p.offload);
  j["ps_servers"] = p.ps_servers;
  j["stage_layers"] = p.stage_layers;
  if (p.framework != Framework::kGeneric) j["framework"] = to_string(p.framework);
  if (p.fp8_param_gather) j["fp8_param_gather"] = true;
  if (p.tp_comm_overlap) j["tp_comm_overlap"] = true;
  if (p.compile) j["compile"] = true;
  if (p.ep_overlap) j["ep_overlap"] = true;
  if (p.delay_wgrad) j["delay_wgrad"] = true;
  if (p.moe_dispatcher != MoeDispatcher::kAllToAll) j["moe_dispatcher"] = to_string(p.moe_dispatcher);
  if (p.cp_comm != CpComm::kP2p) j["cp_comm_type"] = to_string(p.cp_comm);
  if (p.moe_pad_to_capacity) j["moe_pad_to_capacity"] = true;
  if (p.moe_router_fusion) j["moe_router_fusion"] = true;
  if (p.cross_entropy_fusion) j["cross_entropy_fusion"] = true;
  if (p.moe_shared_expert_overlap) j["moe_shared_expert_overlap"] = true;
  if (p.cuda_graph != 0) j["cuda_graph"] = set_bit_names(p.cuda_graph, cuda_graph_module_names());
  if (p.mtp_layers > 0) j["mtp_layers"] = p.mtp_layers;
  // A missing etp reads back as the default, tp (MoE models; dense ones
  // resolve to 1): an expert tensor-parallel degree of 1 under tp > 1 is
  // written too, or the plan would come back with etp = tp.
  if (p.ep > 1 || p.etp > 1 || (p.etp == 1 && p.tp > 1)) {
    j["ep"] = p.ep;
    j["etp"] = p.etp;
  }
  if (p.moe_imbalance > 0) j["moe_imbalance"] = p.moe_imbalance;
  return j;
}

std::string plan_file_json(const PlanFile& f) {
  nlohmann::json j = plan_to_json(f.plan);
  j["model"] = f.model;
  j["cluster"] = f.cluster;
  j["gpus"] = f.gpus;
  return j.dump(2) + "\n";
}

PlanFile parse_plan_file(const std::string& text, const std::string& where) {
  nlohmann::json doc = detail::parse_json_text(text, where);
  detail::JsonObject o(doc, where, "");
  PlanFile f;
  f.model = o.string("model");
  f.cluster = o.string("cluster");
  // Ranges as the flags' (simulator/spec/plan.h); 0 means "derive" where
  // the flags default to a derived value.
  f.gpus = static_cast<int>(o.integer("gpus", 1, kMaxGpus));
  Plan& p = f.plan;
  p.tp = static_cast<int>(o.integer("tp", 1, kMaxDegree));
  p.pp = static_cast<int>(o.integer("pp", 1, kMaxDegree));
  p.dp = static_cast<int>(o.integer("dp", 0, kMaxDegree));
  p.cp = static_cast<int>(o.integer("cp", 1, kMaxDegree));
  p.vp = static_cast<int>(o.integer("vp", 1, kMaxDegree));
  p.zero = static_cast<int>(o.integer("zero", 0, 3));
  p.shard_group = static_cast<int>(o.optional_integer("shard_group", 0, kMaxDegree).value_or(0));
  p.mbs = o.integer("mbs", 1, kMaxDegree);
  p.gbs = o.integer("gbs", 1, kMaxGlobalBatch);
  p.seq = o.integer("seq", 1, kMaxSeqLen);
  p.recompute = static_cast<Recompute>(o.choice("recompute", {"none", "selective", "full"}));
  o.allow("recompute_modules");
  if (o.has("recompute_modules")) {
    p.recompute_modules = static_cast<uint16_t>(
        name_bits(o.array("recompute_modules"), where, "/recompute_modules", recompute_module_names(), "recompute module"));
    if (p.recompute != Recompute::kSelective) {
      throw_input_error(where, "/recompute_modules", "needs \"recompute\": \"selective\"", "");
    }
  }
  p.recompute_layers = static_cast<int>(o.optional_integer("recompute_layers", 1, kMaxDegree).value_or(0));
  if (p.recompute_layers > 0 && p.recompute != Recompute::kFull) {
    throw_input_error(where, "/recompute_layers", "needs \"recompute\": \"full\"", "Megatron's block method");
  }
  p.sp = o.boolean("sp");
  p.schedule = static_cast<Schedule>(o.choice("schedule", schedule_names()));
  p.schedule_given = true;
  set_precision(precision_names()[o.choice("precision", precision_names())], &p);
  if (auto recipe = o.optional_choice("fp8_recipe", fp8_recipe_names())) {
    if (p.fp8_recipe == Fp8Recipe::kNone) {
      throw_input_error(where, "/fp8_recipe", "is given but /precision is not fp8", "drop it or set precision fp8");
    }
    set_fp8_recipe(fp8_recipe_names()[*recipe], &p);
  }
  p.grad_dtype = static_cast<GradDtype>(o.choice("grad_dtype", {"bf16", "fp32"}));
  p.moment_dtype = static_cast<MomentDtype>(o.optional_choice("moment_dtype", {"fp32", "bf16"}).value_or(0));
  set_attention(&p, attention_names()[o.optional_choice("attention", attention_names()).value_or(0)]);
  p.dp_mode = static_cast<DpMode>(o.optional_choice("dp_mode", {"sync", "async"}).value_or(0));
  p.offload = static_cast<Offload>(o.optional_choice("offload", {"none", "optimizer", "params"}).value_or(0));
  p.ps_servers = static_cast<int>(o.optional_integer("ps_servers", 0, kMaxDegree).value_or(0));
  p.framework = static_cast<Framework>(o.optional_choice("framework", framework_names()).value_or(0));
  p.fp8_param_gather = o.optional_boolean("fp8_param_gather").value_or(false);
  p.tp_comm_overlap = o.optional_boolean("tp_comm_overlap").value_or(false);
  p.compile = o.optional_boolean("compile").value_or(false);
  p.ep_overlap = o.optional_boolean("ep_overlap").value_or(false);
  p.delay_wgrad = o.optional_boolean("delay_wgrad").value_or(false);
  p.moe_dispatcher = static_cast<MoeDispatcher>(o.optional_choice("moe_dispatcher", moe_dispatcher_names()).value_or(0));
  p.cp_comm = static_cast<CpComm>(o.optional_choice("cp_comm_type", cp_comm_names()).value_or(0));
  p.moe_pad_to_capacity = o.optional_boolean("moe_pad_to_capacity").value_or(false);
  p.moe_router_fusion = o.optional_boolean("moe_router_fusion").value_or(false);
  p.cross_entropy_fusion = o.optional_boolean("cross_entropy_fusion").value_or(false);
  p.moe_shared_expert_overlap = o.optional_boolean("moe_shared_expert_overlap").value_or(false);
  o.allow("cuda_graph");
  if (o.has("cuda_graph")) {
    p.cuda_graph = static_cast<uint8_t>(
        name_bits(o.array("cuda_graph"), where, "/cuda_graph", cuda_graph_module_names(), "cuda graph module"));
    if (p.cuda_graph == 0) throw_input_error(where, "/cuda_graph", "empty list", "e.g. [\"attn\", \"moe_router\"] or [\"layer\"]");
  }
  p.mtp_layers = static_cast<int>(o.optional_integer("mtp_layers", 0, kMaxMtpLayers).value_or(0));
  p.ep = static_cast<int>(o.optional_integer("ep", 1, kMaxDegree).value_or(1));
  p.etp = static_cast<int>(o.optional_integer("etp", 1, kMaxDegree).value_or(0));
  p.moe_imbalance = o.optional_number_in("moe_imbalance", 1, 1024).value_or(0);
  o.allow("stage_layers");
  if (o.has("stage_layers")) {
    const nlohmann::json& v = o.array("stage_layers");
    if (v.size() > static_cast<size_t>(kMaxLayers)) {
      throw_input_error(where, "/stage_layers", "lists more stages than the " + std::to_string(kMaxLayers) +
                        " layers a model may have", "");
    }
    // Per pipeline stage (pp entries, each >= 1) or per virtual stage (pp x
    // chunks, where a chunk may be empty: stage_layers_per_chunk).
    const bool per_stage = v.size() == static_cast<size_t>(p.pp);
    for (size_t i = 0; i < v.size(); ++i) {
      p.stage_layers.push_back(static_cast<int>(
          detail::integer_value(v[i], where, "/stage_layers/" + std::to_string(i), per_stage ? 1 : 0, kMaxLayers)));
    }
  }
  o.finish();
  return f;
}

PlanFile load_plan_file(const std::string& path) { return parse_plan_file(detail::read_text_file(path), path); }

PlanJob load_plan_job(const std::string& path, const std::string& calibration_path) {
  PlanJob job;
  job.file = load_plan_file(path);
  job.model = load_model(job.file.model, path, "/model");
  job.cluster = load_cluster(job.file.cluster, path, "/cluster");
  if (!calibration_path.empty()) {
    apply_calibration(load_calibration(calibration_path), "--calibration", &job.cluster);
  }
  check_gpu_count(job.cluster, job.file.gpus, path, "/gpus");
  return job;
}

std::string describe_plan(const Plan& p) {
  std::ostringstream s;
  s << "tp=" << p.tp << " pp=" << p.pp << " dp=" << p.dp << " cp=" << p.cp << " vp=" << p.vp;
  // An explicit stage split (the default one, balance_stage_layers, is not written).
  for (size_t i = 0; i < p.stage_layers.size(); ++i) s << (i == 0 ? " stage_layers=" : ",") << p.stage_layers[i];
  s << " zero=" << p.zero;
  if (p.shard_group) s << " shard_group=" << p.shard_group;
  s << " mbs=" << p.mbs << " gbs=" << p.gbs << " seq=" << p.seq << " recompute=" << to_string(p.recompute);
  if (p.recompute == Recompute::kSelective && p.recompute_modules != 0 && p.recompute_modules != kRcCoreAttn) {
    s << "(" << recompute_modules_name(p.recompute_modules) << ")";
  }
  s << recompute_layers_text(p);
  s
    << " sp=" << (p.sp ? "on" : "off") << " schedule=" << to_string(p.schedule)
    << " precision=" << precision_name(p);
  if (p.fp8_recipe != Fp8Recipe::kNone) s << " fp8_recipe=" << to_string(p.fp8_recipe);
  if (p.fp8_param_gather) s << " fp8_param_gather=on";
  if (p.tp_comm_overlap) s << " tp_comm_overlap=on";
  if (model_compiled(p)) s << " compile=on";
  if (p.ep_overlap) s << " ep_overlap=on";
  if (p.delay_wgrad) s << " delay_wgrad=on";
  if (p.moe_dispatcher != MoeDispatcher::kAllToAll) s << " moe_dispatcher=" << to_string(p.moe_dispatcher);
  if (p.cp_comm != CpComm::kP2p) s << " cp_comm_type=" << to_string(p.cp_comm);
  if (p.moe_pad_to_capacity) s << " moe_pad_to_capacity=on";
  if (p.moe_router_fusion) s << " moe_router_fusion=on";
  if (p.cross_entropy_fusion) s << " cross_entropy_fusion=on";
  if (p.moe_shared_expert_overlap) s << " moe_shared_expert_overlap=on";
  if (p.cuda_graph != 0) s << " cuda_graph=" << cuda_graph_modules_name(p.cuda_graph);
  if (p.mtp_layers > 0) s << " mtp_layers=" << p.mtp_layers;
  s << " grad_dtype=" << to_string(p.grad_dtype);
  if (p.moment_dtype != MomentDtype::kFp32) s << " moment_dtype=" << to_string(p.moment_dtype);
  s
    << " attention=" << attention_name(p);
  if (p.dp_mode != DpMode::kSync) s << " dp_mode=" << to_string(p.dp_mode);
  if (p.framework != Framework::kGeneric) s << " framework=" << to_string(p.framework);
  if (p.ep > 1 || p.etp > 1) s << " ep=" << p.ep << " etp=" << p.etp;
  if (p.moe_imbalance > 0) s << " moe_imbalance=" << p.moe_imbalance;
  if (p.offload != Offload::kNone) s << " offload=" << to_string(p.offload);
  return s.str();
}

}  // namespace trainplan
