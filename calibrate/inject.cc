#include "calibrate/inject.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <map>
#include <sstream>
#include <vector>

#include "simulator/core/error.h"

namespace trainplan {

const char* const kInjectGrammar =
    "allowed: slow:rank=R,factor=F (1 < F <= 100), link:rank=R,factor=F (0 < F < 1), kill:rank=R,step=N or "
    "hang:rank=R,step=N "
    "(N from 1 to warm-up + steps), e.g. --inject kill:rank=1,step=4";

namespace {

[[noreturn]] void bad(const std::string& problem) { throw_input_error("--inject", "", problem, kInjectGrammar); }

double number(const std::string& key, const std::string& text) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(begin, &end);
  if (text.empty() || end != begin + text.size() || errno != 0 || !std::isfinite(v)) {
    bad(key + "=\"" + text + "\" is not a number");
  }
  return v;
}

int whole(const std::string& key, const std::string& text, int lo, int hi) {
  const double v = number(key, text);
  if (v != std::floor(v) || v < lo || v > hi) {
    bad(key + "=" + text + " is not a whole number in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]");
  }
  return static_cast<int>(v);
}

}  // namespace

InjectSpec parse_inject(const std::string& text, int ranks, int total_steps) {
  InjectSpec spec;
  spec.text = text;
  const size_t colon = text.find(':');
  const std::string kind = text.substr(0, colon);
  if (kind == "slow") {
    spec.kind = InjectSpec::Kind::kSlow;
  } else if (kind == "link") {
    spec.kind = InjectSpec::Kind::kLink;
  } else if (kind == "kill") {
    spec.kind = InjectSpec::Kind::kKill;
  } else if (kind == "hang") {
    spec.kind = InjectSpec::Kind::kHang;
  } else {
    bad("unknown fault \"" + kind + "\"");
  }
  if (colon == std::string::npos) bad("\"" + kind + "\" needs its KEY=VALUE list after a colon");
  std::map<std::string, std::string> kv;
  std::stringstream ss(text.substr(colon + 1));
  std::string item;
  while (std::getline(ss, item, ',')) {
    const size_t eq = item.find('=');
    if (eq == std::string::npos) bad("\"" + item + "\" is not KEY=VALUE");
    if (!kv.emplace(item.substr(0, eq), item.substr(eq + 1)).second) bad("\"" + item.substr(0, eq) + "\" given twice");
  }
  const bool factor = spec.kind == InjectSpec::Kind::kSlow || spec.kind == InjectSpec::Kind::kLink;
  const std::vector<std::string> keys =
      factor ? std::vector<std::string>{"rank", "factor"} : std::vector<std::string>{"rank", "step"};
  for (const auto& [key, value] : kv) {
    if (key != keys[0] && key != keys[1]) bad("unknown key \"" + key + "\" for " + kind);
  }
  for (const std::string& key : keys) {
    if (!kv.count(key)) bad(kind + " needs " + key + "=");
  }
  spec.rank = whole("rank", kv["rank"], 0, ranks - 1);
  if (spec.kind == InjectSpec::Kind::kSlow) {
    spec.factor = number("factor", kv["factor"]);
    if (!(spec.factor > 1 && spec.factor <= 100)) bad("factor=" + kv["factor"] + " is not in (1, 100]");
  } else if (spec.kind == InjectSpec::Kind::kLink) {
    spec.factor = number("factor", kv["factor"]);
    if (!(spec.factor > 0 && spec.factor < 1)) bad("factor=" + kv["factor"] + " is not a bandwidth fraction in (0, 1)");
  } else {
    spec.step = whole("step", kv["step"], 1, total_steps);
  }
  return spec;
}

}  // namespace trainplan
