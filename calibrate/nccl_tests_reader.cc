#include "calibrate/nccl_tests_reader.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cctype>
#include <functional>
#include <set>
#include <sstream>

#include <nlohmann/json.hpp>

#include "simulator/core/error.h"
#include "simulator/spec/json_reader.h"

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

bool number(const std::string& s, double* v) {
  char* end = nullptr;
  *v = std::strtod(s.c_str(), &end);
  return end != s.c_str() && *end == '\0';
}

// The largest message nccl-tests is run with in practice is a few GiB;
// 1 PiB bounds the int64 byte count and the fit's products.
constexpr double kMaxRowBytes = 1125899906842624.0;
// One timed collective above an hour is not a measurement.
constexpr double kMaxRowTimeUs = 3600e6;

// Checks one result row as nccl-tests itself would flag it and adds it.
// Size-0 rows (nccl-tests -b 0) carry no bandwidth and are skipped.
void add_row(NcclTestsRun* run, const std::string& where, const std::string& at, double bytes, double time_us,
             double wrong) {
  if (!(bytes >= 0) || bytes > kMaxRowBytes || bytes != std::floor(bytes)) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", bytes);
    throw_input_error(where, "", at + ": size " + std::string(buf) + " is not a byte count",
                      "allowed: 0 to 2^50 bytes");
  }
  if (!std::isfinite(time_us) || time_us <= 0 || time_us > kMaxRowTimeUs) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%g", time_us);
    throw_input_error(where, "", at + ": time " + buf + " us is not a measurement",
                      "expected a finite time > 0 and at most 1 h");
  }
  if (!(wrong >= 0) || wrong != std::floor(wrong)) {
    throw_input_error(where, "", at + ": #wrong is not a count", "expected 0 or N/A");
  }
  if (wrong > 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.0f", wrong);
    throw_input_error(where, "", at + ": nccl-tests counted " + std::string(buf) + " wrong elements",
                      "rerun the test: results with wrong elements are not measurements");
  }
  if (bytes == 0) return;
  CollectiveSample s;
  s.bytes = static_cast<int64_t>(bytes);
  s.time_s = time_us * 1e-6;
  run->samples.push_back(s);
}

void finish(NcclTestsRun* run, std::optional<Collective> named, const std::string& where, std::optional<Collective> given,
            int ranks) {
  if (given) named = given;
  if (!named) {
    throw_input_error(where, "", "cannot tell which collective this nccl-tests output measured",
                      "pass --collective all_reduce|all_gather|reduce_scatter|alltoall|broadcast|sendrecv");
  }
  if (ranks > 0) run->ranks = ranks;
  if (run->ranks < 1) throw_input_error(where, "", "cannot tell the number of ranks", "pass --ranks N");
  if (run->samples.empty()) {
    throw_input_error(where, "", "no result rows found", "expected nccl-tests output with at least one row of size > 0");
  }
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
    const nlohmann::json doc = detail::parse_json_text(text, where);
    std::set<std::string> hosts;
    std::function<void(const nlohmann::json&)> walk = [&](const nlohmann::json& j) {
      if (j.is_object()) {
        if (j.contains("device_info") && j.contains("hostname") && j["hostname"].is_string()) {
          run.ranks += 1;
          hosts.insert(j["hostname"].get<std::string>());
          if (run.device.empty() && j["device_info"].is_string()) run.device = j["device_info"].get<std::string>();
        }
        if (j.contains("size") && (j.contains("in_place") || j.contains("out_of_place"))) {
          const std::string at = "result with size " + j["size"].dump();
          const nlohmann::json& r = j.contains("in_place") && j["in_place"].is_object() ? j["in_place"] : j["out_of_place"];
          if (!r.is_object() || !r.contains("time")) {
            throw_input_error(where, "", at + ": no \"time\" in its in_place or out_of_place record",
                              "expected the file written by nccl-tests -J");
          }
          const double bytes = j["size"].is_number() ? j["size"].get<double>() : -1;
          const double time_us = r["time"].is_number() ? r["time"].get<double>() : -1;
          const double wrong = r.contains("nwrong") && r["nwrong"].is_number() ? r["nwrong"].get<double>() : 0;
          add_row(&run, where, at, bytes, time_us, wrong);
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
  int64_t line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    if (line.rfind("#", 0) == 0) {
      // "# Out of bounds values : 3 FAILED": nccl-tests' own verdict.
      if (line.find("Out of bounds values") != std::string::npos && line.find("FAILED") != std::string::npos) {
        throw_input_error(where, "", "line " + std::to_string(line_no) + ": nccl-tests reported data errors (" +
                          line.substr(line.find_first_not_of("# ")) + ")",
                          "rerun the test: results with wrong elements are not measurements");
      }
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
    // A data row starts with its size in bytes and element count; other
    // lines (launcher noise, blank lines) are not nccl-tests rows.
    double size = 0, count = 0;
    if (f.size() < 2 || !number(f[0], &size) || !number(f[1], &count)) continue;
    const std::string at = "line " + std::to_string(line_no);
    if (f.size() < 9) {
      throw_input_error(where, "", at + ": a result row has " + std::to_string(f.size()) + " fields",
                        "expected size count type redop root time algbw busbw #wrong [time algbw busbw #wrong]");
    }
    // The in-place columns when present (the 13-field layout), else the
    // out-of-place ones; either must be a real measurement.
    const bool in_place = f.size() >= 13;
    const std::string& time_text = in_place ? f[9] : f[5];
    const std::string& wrong_text = in_place ? f[12] : f[8];
    double time_us = 0, wrong = 0, out_wrong = 0;
    if (!number(time_text, &time_us)) {
      throw_input_error(where, "", at + ": time \"" + time_text + "\" is not a number", "expected microseconds");
    }
    if (wrong_text != "N/A" && !number(wrong_text, &wrong)) {
      throw_input_error(where, "", at + ": #wrong \"" + wrong_text + "\" is not a count", "expected 0 or N/A");
    }
    // nccl-tests checks both runs; a data error in either invalidates the row.
    if (in_place && f[8] != "N/A" && number(f[8], &out_wrong) && out_wrong > wrong) wrong = out_wrong;
    add_row(&run, where, at, size, time_us, wrong);
  }
  run.nodes = static_cast<int>(hosts.size());
  finish(&run, named, where, given, ranks);
  return run;
}

}  // namespace trainplan
