#include "simulator/faults/failure_profiles.h"

#include <algorithm>

#include "simulator/core/error.h"

namespace trainplan {

namespace {

FailureProfile llama3() {
  FailureProfile p;
  p.name = "llama3";
  p.source =
      "Dubey et al. 2024, The Llama 3 Herd of Models, Sec. 3.3.4 and Table 5: 419 unexpected interruptions in a "
      "54-day snapshot of Llama 3 405B pre-training on 16,384 H100 GPUs (2,048 nodes)";
  p.log_days = 54;
  p.log_gpus = 16384;
  p.log_nodes = 2048;
  p.causes = {
      {"faulty GPU", 148, true},
      {"GPU HBM3 memory", 72, true},
      {"software bug", 54, false},
      {"network switch/cable", 35, false},
      {"host maintenance", 32, false},
      {"GPU SRAM memory", 19, true},
      {"GPU system processor", 17, true},
      {"NIC", 7, false},
      {"NCCL watchdog timeouts", 7, false},
      {"silent data corruption", 6, true},
      {"GPU thermal interface + sensor", 6, true},
      {"SSD", 3, false},
      {"power supply", 3, false},
      {"server chassis", 2, false},
      {"IO expansion board", 2, false},
      {"dependency", 2, false},
      {"CPU", 2, false},
      {"system memory", 2, false},
  };
  return p;
}

int interruptions(const FailureProfile& p, bool per_gpu) {
  int n = 0;
  for (const FailureCause& c : p.causes) n += c.per_gpu == per_gpu ? c.interruptions : 0;
  return n;
}

}  // namespace

double FailureProfile::mtbf_gpu_s() const {
  return log_days * 86400.0 * log_gpus / std::max(1, interruptions(*this, true));
}

double FailureProfile::mtbf_node_s() const {
  return log_days * 86400.0 * log_nodes / std::max(1, interruptions(*this, false));
}

const std::vector<std::string>& failure_profile_names() {
  static const std::vector<std::string> names = {"llama3"};
  return names;
}

const FailureProfile& failure_profile(const std::string& name) {
  static const FailureProfile l3 = llama3();
  TRAINPLAN_CHECK(name == "llama3", "unknown failure profile " + name);
  return l3;
}

std::vector<CauseCount> expected_by_cause(const FailureProfile& p, int gpus, int nodes, double seconds) {
  std::vector<CauseCount> out;
  const double log_s = p.log_days * 86400.0;
  for (const FailureCause& c : p.causes) {
    const double units = c.per_gpu ? static_cast<double>(gpus) / p.log_gpus : static_cast<double>(nodes) / p.log_nodes;
    out.push_back(CauseCount{c.name, c.interruptions * units * seconds / log_s});
  }
  std::stable_sort(out.begin(), out.end(), [](const CauseCount& a, const CauseCount& b) { return a.expected > b.expected; });
  return out;
}

}  // namespace trainplan
