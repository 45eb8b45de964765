#include "planner/cli/output.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include "simulator/core/error.h"

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

void write_file_atomically(const std::string& path, const std::string& text, const std::string& flag) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw_input_error(flag, "", "cannot write \"" + path + "\"", "check the folder exists and is writable");
    out << text;
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      throw_input_error(flag, "", "cannot write \"" + path + "\"", "disk full?");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw_input_error(flag, "", "cannot rename onto \"" + path + "\"", "");
  }
}

std::string fixed(double x, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

double rounded(double x, int decimals) {
  double f = std::pow(10.0, decimals);
  return std::round(x * f) / f;
}

}  // namespace trainplan
