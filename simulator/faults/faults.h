// Training under faults: the options shared by `simulate` and `recommend`
// (stragglers, failures, checkpoint/restart, the run length) and their
// evaluation for one layout.
//
// The options arrive as strings (FaultFlags) so that every value, with its
// unit, is validated here with one error format:
//   --flag: <problem>; <hint>
// Options that only matter with failures (--checkpoint-interval,
// --checkpoint-mode, --storage-bandwidth, --restart-time, --detect-time,
// --runs, --slow-node-mtbf) are errors without --mtbf-gpu or --mtbf-node,
// --straggler-steps without --stragglers, --slow-node-factor,
// --slow-detect-time and --spare-nodes without --slow-node-mtbf (> 0), and
// --repair-time without a spare, so that no option is silently ignored.
// --seed (and --slow-node-mtbf 0, "off") is accepted alone (scripts pass it
// always).
#ifndef TRAINPLAN_SIM_FAULTS_FAULTS_H_
#define TRAINPLAN_SIM_FAULTS_FAULTS_H_

#include <cstdint>
#include <string>
#include <vector>

#include "simulator/faults/failures.h"
#include "simulator/faults/stragglers.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

struct FaultFlags {
  std::string stragglers, straggler_steps;
  std::string mtbf_gpu, mtbf_node, checkpoint_interval, storage_bandwidth, restart_time, detect_time;
  std::string failure_rates;
  std::string checkpoint_mode;
  std::string slow_node_mtbf, slow_node_factor, slow_detect_time, spare_nodes, repair_time;
  std::string train_tokens, seed, runs;
};

// One command-line option: its name, where its value goes, its help text
// (with the default and why).  The CLI registers each as a string option.
struct FaultFlagInfo {
  const char* name;
  const char* type_name;  // for --help: SPEC, N, DURATION, RATE, ...
  std::string* value;
  std::string help;
};
std::vector<FaultFlagInfo> fault_flag_table(FaultFlags* flags);

struct FaultConfig {
  bool stragglers_given = false;
  StragglerSpec stragglers;
  int straggler_steps = 8;      // sampled steps: enough for the mean tax within a few %
  bool failures_given = false;  // an MTBF or --failure-rates was given
  std::string failure_profile;  // --failure-rates NAME (failure_profiles.h), empty if none
  FailureModel failures;
  bool checkpoint_mode_given = false;  // --checkpoint-mode (the reports then name the mode)
  bool slow_nodes_given = false;       // --slow-node-mtbf > 0
  double train_tokens = 0;      // 0: not given
  uint64_t seed = 1;
  int runs = 1000;              // Monte Carlo runs: p90 within ~1% of the run time
  bool any() const { return stragglers_given || failures_given || train_tokens > 0; }
};

// Validates every flag.  Throws InputError("--flag: ...") on a bad value or
// a missing or pointless combination.
FaultConfig parse_fault_flags(const FaultFlags& flags);

// Parses a token count: a number with an optional suffix k, M, B or G
// (1e9), T (1e12): "15.6T", "300B", "2e12".  Throws InputError naming flag.
double parse_token_count(const std::string& text, const std::string& flag);

struct FaultReport {
  double base_step_s = 0;       // as simulated without faults
  double step_s = 0;            // with stragglers: base_step_s * (1 + tax)
  bool has_stragglers = false;
  StragglerReport stragglers;
  bool has_failures = false;
  FailureReport failures;
  bool has_time_to_train = false;
  int64_t steps = 0;
  double goodput = 1;           // 1 without failures
  double time_to_train_mean_s = 0, time_to_train_p50_s = 0, time_to_train_p90_s = 0;
  double time_to_train_expected_s = 0;  // closed form (no failures: steps * step_s)
};

// Evaluates a layout whose fault-free step takes `step_s` and processes
// `tokens_per_step` tokens.  Without `monte_carlo` the time to train is the
// closed-form expectation only (p50 = p90 = mean = expected); the search
// ranks by it and adds the Monte Carlo to the winners with
// add_monte_carlo().  REQUIRES: config.any(), layout.feasible.
FaultReport evaluate_faults(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout, double step_s,
                            double tokens_per_step, const FaultConfig& config, bool monte_carlo = true);

// Adds the Monte Carlo distribution (config.runs runs) to a report made
// without it; a no-op without failures.
void add_monte_carlo(const FaultConfig& config, FaultReport* report);

// The best long-run goodput any checkpoint interval can give this layout
// (steady_goodput at tau*, in the configured checkpoint mode), independent
// of the step time: expected time to train >= steps * step_s / this (slow
// nodes only add time).  1 without failures.
double goodput_upper_bound(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                           const FaultConfig& config);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_FAULTS_FAULTS_H_
