#include "calibrate/nccl_tests_reader.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "simulator/core/error.h"

namespace trainplan {

std::optional<Collective> collective_from_name(const std::string& raw) {
  std::string n;
  for (char ch : raw) {
    if (ch != '_' && ch != '-') n += static_cast<char>(std::tolower(static_cast<unsigned char>(ch)));
  }
  if (n.size() > 4 && n.compare(n.size() - 4, 4, "perf") == 0) n.resize(n.size() - 4);
  if (n == "allreduce") return Collective::kAllReduce;
  if (n == "allgather") return Collective::kAllGather;
  if (n == "reducescatter") return Collective::kReduceScatter;
  if (n == "alltoall") return Collective::kAllToAll;
  if (n == "broadcast") return Collective::kBroadcast;
  if (n == "sendrecv") return Collective::kSendRecv;
  return std::nullopt;
}

namespace {

void finish(NcclTestsRun* run, std::optional<Collective> named, const std::string& where, std::optional<Collective> given,
            int ranks) {
  if (given) named = given;
  if (!named) {
    throw_input_error(where, "", "cannot tell which collective this nccl-tests output measured",
                      "pass --collective all_reduce|all_gather|reduce_scatter|alltoall|broadcast|sendrecv");
  }
  if (ranks > 0) run->ranks = ranks;
  if (run->ranks < 1) throw_input_error(where, "", "cannot tell the number of ranks", "pass --ranks N");
  if (run->samples.empty()) throw_input_error(where, "", "no result rows found", "expected nccl-tests output");
  run->collective = *named;
  for (CollectiveSample& s : run->samples) {
    s.collective = *named;
    s.ranks = run->ranks;
    s.inter_node = run->nodes > 1;
  }
}

}  // namespace

NcclTestsRun parse_nccl_tests(const std::string& text, const std::string& where, std::optional<Collective> given,
                              int ranks) {
  NcclTestsRun run;
  std::optional<Collective> named;
  const size_t first = text.find_first_not_of(" \t\r\n");
  if (first != std::string::npos && text[first] == '{') {
    nlohmann::json doc;
    try {
      doc = nlohmann::json::parse(text);
    } catch (const nlohmann::json::parse_error&) {
      throw_input_error(where, "", "malformed nccl-tests JSON", "expected the file written by nccl-tests -J");
    }
    std::set<std::string> hosts;
    std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& j) {
      if (j.is_object()) {
        if (j.contains("device_info") && j.contains("hostname") && j["hostname"].is_string()) {
          run.ranks += 1;
          hosts.insert(j["hostname"].get<std::string>());
          if (run.device.empty() && j["device_info"].is_string()) run.device = j["device_info"].get<std::string>();
        }
        if (j.contains("size") && (j.contains("in_place") || j.contains("out_of_place"))) {
          const nlohmann::json& r = j.contains("in_place") && j["in_place"].is_object() ? j["in_place"] : j["out_of_place"];
          if (r.is_object() && r.contains("time") && r["time"].is_number() && j["size"].is_number()) {
            CollectiveSample s;
            s.bytes = j["size"].get<int64_t>();
            s.time_s = r["time"].get<double>() * 1e-6;
            s.wrong = r.contains("nwrong") && r["nwrong"].is_number() ? static_cast<int64_t>(r["nwrong"].get<double>()) : 0;
            run.samples.push_back(s);
          }
          return;
        }
        for (auto it = j.begin(); it != j.end(); ++it) {
          if (it.key() == "argv" && it->is_array() && !it->empty() && (*it)[0].is_string()) {
            std::string prog = (*it)[0].get<std::string>();
            named = collective_from_name(prog.substr(prog.find_last_of('/') + 1));
          }
          walk(*it);
        }
      } else if (j.is_array()) {
        for (const auto& e : j) walk(e);
      }
    };
    walk(doc);
    run.nodes = static_cast<int>(hosts.size());
    finish(&run, named, where, given, ranks);
    return run;
  }
  std::istringstream in(text);
  std::string line;
  std::set<std::string> hosts;
  while (std::getline(in, line)) {
    if (line.rfind("#", 0) == 0) {
      const std::string key = "Collective test starting:";
      auto p = line.find(key);
      if (p != std::string::npos) {
        std::string prog = line.substr(p + key.size());
        prog.erase(0, prog.find_first_not_of(' '));
        prog = prog.substr(0, prog.find_first_of(" \r"));
        named = collective_from_name(prog.substr(prog.find_last_of('/') + 1));
      }
      std::istringstream ls(line);
      std::string hash, word;
      ls >> hash >> word;
      if (word == "Rank") {
        run.ranks += 1;
        auto on = line.find(" on ");
        if (on != std::string::npos) {
          std::istringstream hs(line.substr(on + 4));
          std::string host;
          hs >> host;
          hosts.insert(host);
        }
        auto br = line.find(']');
        if (run.device.empty() && br != std::string::npos) {
          run.device = line.substr(br + 1);
          run.device.erase(0, run.device.find_first_not_of(' '));
        }
      }
      continue;
    }
    std::istringstream ls(line);
    std::vector<std::string> f;
    std::string w;
    while (ls >> w) f.push_back(w);
    if (f.size() < 9) continue;
    auto number = [](const std::string& s, double* v) {
      char* end = nullptr;
      *v = std::strtod(s.c_str(), &end);
      return end != s.c_str() && *end == '\0';
    };
    double size = 0, t_out = 0, t_in = 0, wrong_out = 0, wrong_in = 0;
    if (!number(f[0], &size) || !number(f[5], &t_out)) continue;
    CollectiveSample s;
    s.bytes = static_cast<int64_t>(size);
    s.time_s = t_out * 1e-6;
    if (number(f[8], &wrong_out)) s.wrong = static_cast<int64_t>(wrong_out);
    if (f.size() >= 13 && number(f[9], &t_in)) {
      s.time_s = t_in * 1e-6;
      s.wrong = number(f[12], &wrong_in) ? static_cast<int64_t>(wrong_in) : s.wrong;
    }
    if (s.bytes > 0 && s.time_s > 0) run.samples.push_back(s);
  }
  run.nodes = static_cast<int>(hosts.size());
  finish(&run, named, where, given, ranks);
  return run;
}

}  // namespace trainplan
