// Published failure rates by component (`--failure-rates NAME`): a
// measured interruption log turned into per-GPU and per-node rates, and the
// expected interruptions of a job by cause.
//
//   llama3   Llama 3 405B pre-training on 16,384 H100 (2,048 nodes), a
//            54-day snapshot: 466 interruptions, 47 planned (automated
//            maintenance) and 419 unexpected, by root cause (Dubey et al.
//            2024, "The Llama 3 Herd of Models", Sec. 3.3.4 and Table 5).
//            Causes on a GPU (faulty GPU, HBM3, SRAM, GPU system processor,
//            silent data corruption, thermal interface / sensor) give the
//            per-GPU rate; the rest (software bugs, network switch / cable,
//            host maintenance, NIC, NCCL watchdog, SSD, power supply,
//            chassis, IO board, dependency, CPU, system memory) the
//            per-node rate.  Planned interruptions are not failures.
#ifndef TRAINPLAN_SIM_FAULTS_FAILURE_PROFILES_H_
#define TRAINPLAN_SIM_FAULTS_FAILURE_PROFILES_H_

#include <string>
#include <vector>

namespace trainplan {

struct FailureCause {
  const char* name;
  int interruptions;  // in the log
  bool per_gpu;       // true: scales with GPUs, false: with nodes
};

struct FailureProfile {
  std::string name;
  std::string source;
  double log_days = 0;
  int log_gpus = 0, log_nodes = 0;
  std::vector<FailureCause> causes;
  double mtbf_gpu_s() const;   // log time x GPUs / per-GPU interruptions
  double mtbf_node_s() const;  // log time x nodes / per-node interruptions
};

// The names `--failure-rates` accepts.
const std::vector<std::string>& failure_profile_names();
// REQUIRES: name is one of failure_profile_names().
const FailureProfile& failure_profile(const std::string& name);

struct CauseCount {
  const char* name;
  double expected;  // interruptions expected over the run
};

// Interruptions by cause expected for a job on `gpus` GPUs of `nodes`
// nodes running `seconds` (the profile's rates, largest first).
std::vector<CauseCount> expected_by_cause(const FailureProfile& p, int gpus, int nodes, double seconds);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_FAULTS_FAILURE_PROFILES_H_
