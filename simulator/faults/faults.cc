#include "simulator/faults/faults.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "simulator/core/error.h"
#include "simulator/core/units.h"
#include "simulator/faults/failure_profiles.h"

namespace trainplan {

namespace {

constexpr const char* kNeedsMtbf = "has no effect without --mtbf-gpu, --mtbf-node or --failure-rates";

double positive_duration(const std::string& text, const char* flag) {
  const double s = parse_quantity(text, Dimension::kDuration, flag, "");
  if (s <= 0) throw_input_error(flag, "", "must be > 0, got \"" + text + "\"", "expected e.g. \"30min\", \"50000h\"");
  return s;
}

double non_negative_duration(const std::string& text, const char* flag) {
  return parse_quantity(text, Dimension::kDuration, flag, "");
}

// A whole decimal number in [lo, hi].
uint64_t integer(const std::string& text, const char* flag, uint64_t lo, uint64_t hi, const char* example) {
  const std::string range = "an integer in [" + std::to_string(lo) + ", " + std::to_string(hi) + "]";
  if (text.empty() || text.size() > 20 || text.find_first_not_of("0123456789") != std::string::npos) {
    throw_input_error(flag, "", "\"" + text + "\" is not " + range, std::string("e.g. ") + flag + " " + example);
  }
  errno = 0;
  const unsigned long long v = std::strtoull(text.c_str(), nullptr, 10);
  if (errno != 0 || v < lo || v > hi) {
    throw_input_error(flag, "", "\"" + text + "\" is not " + range, std::string("e.g. ") + flag + " " + example);
  }
  return v;
}

// A number in (lo, hi].
double number_above(const std::string& text, const char* flag, double lo, double hi, const std::string& hint) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(begin, &end);
  if (text.empty() || end != begin + text.size() || std::isnan(v) || std::isspace(static_cast<unsigned char>(text[0]))) {
    throw_input_error(flag, "", "\"" + text + "\" is not a number", hint);
  }
  if (errno != 0 || !(v > lo && v <= hi)) {  // out of range, 1e400 (inf) included
    char range[64];
    std::snprintf(range, sizeof range, "(%g, %g]", lo, hi);
    throw_input_error(flag, "", "\"" + text + "\" is not in " + range, hint);
  }
  return v;
}

}  // namespace

std::vector<FaultFlagInfo> fault_flag_table(FaultFlags* f) {
  return {
      {"--stragglers", "SPEC", &f->stragglers,
       "straggler model SPEC (default none): comma-separated jitter=DIST (per GPU per step), op_jitter=DIST (per "
       "GPU per layer task), slow_gpus=P:F, slow_nodes=P:F (each slow with probability P, compute F times longer), "
       "degraded_link=P:F (each node's network port at fraction F of its bandwidth with probability P); DIST = "
       "lognormal:SIGMA (mean 1), normal:SIGMA, uniform:LO:HI, exp:MEAN (1 + Exp(MEAN)); e.g. "
       "jitter=lognormal:0.05,slow_nodes=0.01:1.5,degraded_link=0.02:0.5.  Every rank is simulated"},
      {"--straggler-steps", "N", &f->straggler_steps, "sampled steps for --stragglers (default 8)"},
      {"--mtbf-gpu", "DURATION", &f->mtbf_gpu, "mean time between failures of one GPU, e.g. 50000h (default: GPUs never fail)"},
      {"--mtbf-node", "DURATION", &f->mtbf_node,
       "mean time between failures of one node (host, NIC, switch, software), e.g. 20000h (default: never)"},
      {"--failure-rates", "NAME", &f->failure_rates,
       "published failure rates by cause: llama3 (Llama 3 405B on 16,384 H100: 419 unexpected interruptions in "
       "54 days; per-GPU MTBF 79,230 h, per-node 17,577 h); --mtbf-gpu / --mtbf-node override its rates"},
      {"--checkpoint-interval", "auto|DURATION", &f->checkpoint_interval,
       "auto|DURATION: time between checkpoints, rounded to whole steps (default auto: the interval that "
       "maximises expected goodput)"},
      {"--storage-bandwidth", "RATE", &f->storage_bandwidth,
       "aggregate checkpoint storage bandwidth, e.g. 2TB/s (required with --mtbf-*; checkpoint write and load "
       "time = weights + optimizer bytes / this)"},
      {"--restart-time", "DURATION", &f->restart_time,
       "time to reschedule and relaunch after a failure, before loading the checkpoint (default 10min)"},
      {"--detect-time", "DURATION", &f->detect_time, "time to detect a failure (default 5min: a watchdog below NCCL's timeout)"},
      {"--checkpoint-mode", "sync|async", &f->checkpoint_mode,
       "sync|async (default sync: training blocks for the whole write).  async (torchtitan checkpoint.async_mode, "
       "Megatron --async-save, PyTorch DCP async_save): training blocks only for the device-to-host snapshot of each "
       "GPU's state (over PCIe: the cluster's host.bandwidth_per_gpu); the write persists in the background and a "
       "checkpoint counts once persisted"},
      {"--slow-node-mtbf", "DURATION", &f->slow_node_mtbf,
       "mean time for one node to turn persistently slow, e.g. 50000h (default 0: never).  The job runs at the slow "
       "node's pace until it is detected and drained onto a spare"},
      {"--slow-node-factor", "F", &f->slow_node_factor,
       "compute slowdown of a slow node, 1 < F <= 100: steps take F times longer while one is in the job (required "
       "with --slow-node-mtbf: no published default)"},
      {"--slow-detect-time", "DURATION", &f->slow_detect_time,
       "time from a node turning slow to its detection (default 10min: two 5-min report windows of NVIDIA's "
       "straggler detector, Megatron-Bridge NVRxStragglerDetectionConfig)"},
      {"--spare-nodes", "N", &f->spare_nodes,
       "hot spare nodes to drain slow nodes onto (required with --slow-node-mtbf; 0: a slow node stays to the end)"},
      {"--repair-time", "DURATION", &f->repair_time,
       "time a drained node spends in repair before it is a spare again, e.g. 3d (required with --spare-nodes >= 1)"},
      {"--train-tokens", "N", &f->train_tokens,
       "tokens to train on, e.g. 15.6T, 300B, 2e12 (required with --mtbf-*; gives the time to train)"},
      {"--seed", "N", &f->seed, "seed of the random draws (default 1); same seed, same output"},
      {"--runs", "N", &f->runs, "Monte Carlo runs of the whole training run (default 1000)"},
  };
}

double parse_token_count(const std::string& text, const std::string& flag) {
  const std::string hint = "expected a token count, e.g. 15.6T, 300B, 2e12";
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  double v = std::strtod(begin, &end);
  if (text.empty() || end == begin || errno != 0 || !std::isfinite(v) ||
      std::isspace(static_cast<unsigned char>(text[0]))) {
    throw_input_error(flag, "", "\"" + text + "\" is not a number", hint);
  }
  const std::string suffix(end);
  if (suffix == "k" || suffix == "K") v *= 1e3;
  else if (suffix == "M") v *= 1e6;
  else if (suffix == "B" || suffix == "G") v *= 1e9;
  else if (suffix == "T") v *= 1e12;
  else if (!suffix.empty()) throw_input_error(flag, "", "unknown suffix \"" + suffix + "\" in \"" + text + "\"", "allowed: k, M, B (or G), T");
  if (v < 1) throw_input_error(flag, "", "must be >= 1 token, got \"" + text + "\"", hint);
  if (v > 1e18) throw_input_error(flag, "", "\"" + text + "\" is out of range", "at most 1e18 tokens");
  return v;
}

FaultConfig parse_fault_flags(const FaultFlags& f) {
  FaultConfig c;
  if (!f.stragglers.empty()) {
    c.stragglers = parse_straggler_spec(f.stragglers, "--stragglers");
    c.stragglers_given = true;
  }
  if (!f.straggler_steps.empty()) {
    c.straggler_steps = static_cast<int>(integer(f.straggler_steps, "--straggler-steps", 1, 1000, "8"));
  }
  FailureModel& m = c.failures;
  if (!f.failure_rates.empty()) {
    const auto& names = failure_profile_names();
    if (std::find(names.begin(), names.end(), f.failure_rates) == names.end()) {
      std::string allowed;
      for (const std::string& n : names) allowed += (allowed.empty() ? "" : ", ") + n;
      throw_input_error("--failure-rates", "", "unknown failure profile \"" + f.failure_rates + "\"",
                        "allowed: " + allowed);
    }
    c.failure_profile = f.failure_rates;
    const FailureProfile& prof = failure_profile(f.failure_rates);
    m.mtbf_gpu_s = prof.mtbf_gpu_s();
    m.mtbf_node_s = prof.mtbf_node_s();
  }
  if (!f.mtbf_gpu.empty()) m.mtbf_gpu_s = positive_duration(f.mtbf_gpu, "--mtbf-gpu");
  if (!f.mtbf_node.empty()) m.mtbf_node_s = positive_duration(f.mtbf_node, "--mtbf-node");
  if (!f.checkpoint_interval.empty() && f.checkpoint_interval != "auto") {
    m.checkpoint_interval_s = positive_duration(f.checkpoint_interval, "--checkpoint-interval");
  }
  if (!f.storage_bandwidth.empty()) {
    m.storage_bytes_per_s = parse_quantity(f.storage_bandwidth, Dimension::kByteRate, "--storage-bandwidth", "");
    if (m.storage_bytes_per_s <= 0) {
      throw_input_error("--storage-bandwidth", "", "must be > 0, got \"" + f.storage_bandwidth + "\"",
                        "expected e.g. \"2TB/s\", \"100GB/s\"");
    }
  }
  if (!f.restart_time.empty()) m.restart_s = non_negative_duration(f.restart_time, "--restart-time");
  if (!f.detect_time.empty()) m.detect_s = non_negative_duration(f.detect_time, "--detect-time");
  if (!f.checkpoint_mode.empty()) {
    if (f.checkpoint_mode != "sync" && f.checkpoint_mode != "async") {
      throw_input_error("--checkpoint-mode", "", "unknown mode \"" + f.checkpoint_mode + "\"", "allowed: sync, async");
    }
    m.async_checkpoint = f.checkpoint_mode == "async";
    c.checkpoint_mode_given = true;
  }
  if (!f.slow_node_mtbf.empty()) m.slow_node_mtbf_s = non_negative_duration(f.slow_node_mtbf, "--slow-node-mtbf");
  if (!f.slow_node_factor.empty()) {
    m.slow_node_factor = number_above(f.slow_node_factor, "--slow-node-factor", 1, 100,
                                      "F = a slow node's compute time / nominal, e.g. --slow-node-factor 1.5");
  }
  if (!f.slow_detect_time.empty()) m.slow_detect_s = non_negative_duration(f.slow_detect_time, "--slow-detect-time");
  if (!f.spare_nodes.empty()) m.spare_nodes = static_cast<int>(integer(f.spare_nodes, "--spare-nodes", 0, 1000, "16"));
  if (!f.repair_time.empty()) m.repair_s = positive_duration(f.repair_time, "--repair-time");
  if (!f.train_tokens.empty()) c.train_tokens = parse_token_count(f.train_tokens, "--train-tokens");
  if (!f.seed.empty()) c.seed = integer(f.seed, "--seed", 0, UINT64_MAX, "42");
  if (!f.runs.empty()) c.runs = static_cast<int>(integer(f.runs, "--runs", 1, 100000, "1000"));

  // Combinations.
  c.failures_given = !f.mtbf_gpu.empty() || !f.mtbf_node.empty() || !f.failure_rates.empty();
  if (!c.stragglers_given && !f.straggler_steps.empty()) {
    throw_input_error("--straggler-steps", "", "has no effect without --stragglers");
  }
  c.slow_nodes_given = m.slow_node_mtbf_s > 0;
  if (!c.failures_given) {
    const std::string none;
    const std::pair<const char*, const std::string*> only_with_failures[] = {
        {"--checkpoint-interval", &f.checkpoint_interval}, {"--checkpoint-mode", &f.checkpoint_mode},
        {"--storage-bandwidth", &f.storage_bandwidth},     {"--restart-time", &f.restart_time},
        {"--detect-time", &f.detect_time},                 {"--runs", &f.runs},
        {"--slow-node-mtbf", c.slow_nodes_given ? &f.slow_node_mtbf : &none}};
    for (const auto& [name, value] : only_with_failures) {
      if (!value->empty()) throw_input_error(name, "", kNeedsMtbf);
    }
  }
  if (!c.slow_nodes_given) {
    const std::pair<const char*, const std::string*> only_with_slow_nodes[] = {
        {"--slow-node-factor", &f.slow_node_factor}, {"--slow-detect-time", &f.slow_detect_time},
        {"--spare-nodes", &f.spare_nodes},           {"--repair-time", &f.repair_time}};
    for (const auto& [name, value] : only_with_slow_nodes) {
      if (!value->empty()) throw_input_error(name, "", "has no effect without --slow-node-mtbf (a duration > 0)");
    }
  } else {
    if (f.slow_node_factor.empty()) {
      throw_input_error("--slow-node-factor", "",
                        "is required with --slow-node-mtbf (the slow node's compute slowdown; no published default)",
                        "e.g. --slow-node-factor 1.5");
    }
    if (f.spare_nodes.empty()) {
      throw_input_error("--spare-nodes", "",
                        "is required with --slow-node-mtbf (the job's hot spares; 0: a slow node stays to the end of "
                        "the run)",
                        "e.g. --spare-nodes 16");
    }
    if (m.spare_nodes == 0 && !f.repair_time.empty()) {
      throw_input_error("--repair-time", "", "has no effect with --spare-nodes 0 (no node is drained to repair)");
    }
    if (m.spare_nodes > 0 && f.repair_time.empty()) {
      throw_input_error("--repair-time", "",
                        "is required with --spare-nodes >= 1 (a drained node's time in repair before it is a spare "
                        "again)",
                        "e.g. --repair-time 3d");
    }
  }
  if (c.failures_given) {
    if (f.storage_bandwidth.empty()) {
      throw_input_error("--storage-bandwidth", "",
                        "is required with --mtbf-gpu, --mtbf-node or --failure-rates (checkpoint write and load times depend on it)",
                        "e.g. --storage-bandwidth 100GB/s");
    }
    if (f.train_tokens.empty()) {
      throw_input_error("--train-tokens", "", "is required with --mtbf-gpu, --mtbf-node or --failure-rates (the run length)",
                        "e.g. --train-tokens 15.6T");
    }
  }
  return c;
}

FaultReport evaluate_faults(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout, double step_s,
                            double tokens_per_step, const FaultConfig& config, bool monte_carlo) {
  TRAINPLAN_CHECK(config.any() && layout.feasible, "nothing to evaluate");
  FaultReport rep;
  rep.base_step_s = step_s;
  rep.step_s = step_s;
  if (config.stragglers_given) {
    StragglerOptions so;
    so.spec = config.stragglers;
    so.samples = config.straggler_steps;
    so.seed = config.seed;
    rep.stragglers = simulate_stragglers(model, cluster, layout, so);
    rep.has_stragglers = true;
    // The tax is measured with every rank simulated; applied to the step as
    // reported (one rank per stage), so both modes' small differences in
    // link sharing do not leak into it.
    rep.step_s = step_s * (1 + rep.stragglers.tax);
  }
  if (config.train_tokens > 0) {
    rep.has_time_to_train = true;
    rep.steps = static_cast<int64_t>(std::ceil(config.train_tokens / tokens_per_step));
    const double useful = static_cast<double>(rep.steps) * rep.step_s;
    rep.time_to_train_mean_s = rep.time_to_train_p50_s = rep.time_to_train_p90_s = useful;
    rep.time_to_train_expected_s = useful;
  }
  if (config.failures_given) {
    rep.failures = analyze_failures(model, cluster, layout, rep.step_s, tokens_per_step, config.train_tokens,
                                    config.failures, 0, config.seed);
    rep.has_failures = true;
    rep.goodput = rep.failures.goodput;
    rep.time_to_train_mean_s = rep.time_to_train_p50_s = rep.time_to_train_p90_s = rep.failures.expected_s;
    rep.time_to_train_expected_s = rep.failures.expected_s;
    if (monte_carlo) add_monte_carlo(config, &rep);
  }
  return rep;
}

void add_monte_carlo(const FaultConfig& config, FaultReport* rep) {
  if (!rep->has_failures) return;
  add_monte_carlo(&rep->failures, config.runs, config.seed);
  rep->goodput = rep->failures.goodput;
  rep->time_to_train_mean_s = rep->failures.mc.mean_s;
  rep->time_to_train_p50_s = rep->failures.mc.p50_s;
  rep->time_to_train_p90_s = rep->failures.mc.p90_s;
}

double goodput_upper_bound(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                           const FaultConfig& config) {
  if (!config.failures_given) return 1.0;
  const FailureModel& fm = config.failures;
  const CheckpointCost ck = checkpoint_cost(model, cluster, layout, fm.storage_bytes_per_s);
  RunModel m;
  m.step_s = 1;
  m.steps = 1;
  m.rate_per_s = failure_rate_per_s(fm, layout.gpus, layout.nodes);
  m.checkpoint_s = ck.write_s;
  m.load_s = ck.load_s;
  m.downtime_s = fm.detect_s + fm.restart_s;
  if (fm.async_checkpoint) {
    // Every interval's goodput is at most steady_goodput at tau* (the first,
    // fresh one needs x2 >= x1; the last is steady_goodput at its length).
    m.checkpoint_s = ck.snapshot_s;
    m.persist_s = ck.write_s;
  }
  // Slow nodes only add time (a slower mean step, drains): not in the bound.
  if (m.rate_per_s <= 0) return 1.0;
  return steady_goodput(m, optimal_interval_s(m));
}

}  // namespace trainplan
