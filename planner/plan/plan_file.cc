#include "planner/plan/plan_file.h"

#include <nlohmann/json.hpp>

#include "simulator/core/error.h"
#include "simulator/spec/json_reader.h"

namespace trainplan {

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
  j["sp"] = p.sp;
  j["schedule"] = to_string(p.schedule);
  j["precision"] = to_string(p.precision);
  j["grad_dtype"] = to_string(p.grad_dtype);
  j["attention"] = to_string(p.attention);
  j["dp_mode"] = to_string(p.dp_mode);
  j["offload"] = to_string(p.offload);
  j["ps_servers"] = p.ps_servers;
  j["stage_layers"] = p.stage_layers;
  return j;
}

std::string plan_file_json(const PlanFile& f) {
  nlohmann::json j = plan_to_json(f.plan);
  j["model"] = f.model;
  j["cluster"] = f.cluster;
  j["gpus"] = f.gpus;
  return j.dump(2) + "\n";
}

namespace {

int small_int(detail::JsonObject& o, const std::string& key, bool zero_ok) {
  if (zero_ok && o.has(key)) {
    // 0 means "derive"; read as a number >= 0.
    auto v = o.optional_number_in(key, 0, 1 << 24);
    if (static_cast<double>(static_cast<int64_t>(*v)) != *v) {
      throw_input_error(o.where(), o.pointer(key), "expected an integer", "");
    }
    return static_cast<int>(*v);
  }
  return static_cast<int>(o.positive_integer(key));
}

}  // namespace

PlanFile parse_plan_file(const std::string& text, const std::string& where) {
  nlohmann::json doc = detail::parse_json_text(text, where);
  detail::JsonObject o(doc, where, "");
  PlanFile f;
  f.model = o.string("model");
  f.cluster = o.string("cluster");
  f.gpus = static_cast<int>(o.positive_integer("gpus"));
  Plan& p = f.plan;
  p.tp = small_int(o, "tp", false);
  p.pp = small_int(o, "pp", false);
  p.dp = small_int(o, "dp", true);
  p.cp = small_int(o, "cp", false);
  p.vp = small_int(o, "vp", false);
  p.zero = small_int(o, "zero", true);
  if (p.zero > 3) throw_input_error(where, "/zero", "unknown ZeRO stage", "allowed: 0, 1, 2, 3");
  o.allow("shard_group");
  p.shard_group = o.has("shard_group") ? small_int(o, "shard_group", true) : 0;
  p.mbs = o.positive_integer("mbs");
  p.gbs = o.positive_integer("gbs");
  p.seq = o.positive_integer("seq");
  p.recompute = static_cast<Recompute>(o.choice("recompute", {"none", "selective", "full"}));
  p.sp = o.boolean("sp");
  p.schedule = static_cast<Schedule>(o.choice("schedule", {"gpipe", "1f1b", "interleaved", "naive"}));
  p.schedule_given = true;
  p.precision = static_cast<Precision>(o.choice("precision", {"bf16", "fp16", "fp32"}));
  p.grad_dtype = static_cast<GradDtype>(o.choice("grad_dtype", {"bf16", "fp32"}));
  p.attention = static_cast<Attention>(o.optional_choice("attention", {"flash", "naive"}).value_or(0));
  p.dp_mode = static_cast<DpMode>(o.optional_choice("dp_mode", {"sync", "async"}).value_or(0));
  p.offload = static_cast<Offload>(o.optional_choice("offload", {"none", "optimizer", "params"}).value_or(0));
  o.allow("ps_servers");
  p.ps_servers = o.has("ps_servers") ? small_int(o, "ps_servers", true) : 0;
  o.allow("stage_layers");
  if (o.has("stage_layers")) {
    const nlohmann::json& v = o.raw("stage_layers");
    if (!v.is_array()) throw_input_error(where, "/stage_layers", "expected an array of layer counts", "e.g. [7, 8, 8, 7]");
    for (size_t i = 0; i < v.size(); ++i) {
      if (!v[i].is_number_integer() || v[i].get<int64_t>() < 1 || v[i].get<int64_t>() > (1 << 20)) {
        throw_input_error(where, "/stage_layers/" + std::to_string(i), "expected a layer count >= 1", "");
      }
      p.stage_layers.push_back(static_cast<int>(v[i].get<int64_t>()));
    }
  }
  o.finish();
  return f;
}

PlanFile load_plan_file(const std::string& path) { return parse_plan_file(detail::read_text_file(path), path); }

}  // namespace trainplan
