// validate's fault injection (calibrate/inject.h): the ranks' and the
// supervisor's sides of a recovery run (kill, hang) and the comparison of an
// injected straggler (slow, link) with the straggler model.  Used by
// validate_command.cc only.
#ifndef TRAINPLAN_PLANNER_CLI_VALIDATE_FAULTS_H_
#define TRAINPLAN_PLANNER_CLI_VALIDATE_FAULTS_H_

#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "calibrate/backend.h"
#include "calibrate/executor.h"
#include "calibrate/inject.h"
#include "simulator/report/step_report.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

struct ValidateFlags {
  std::string plan;
  std::string backend;
  std::string calibration;
  int steps = 5;
  int warmup = 1;
  std::string out;
  bool json = false;
  double tolerance_pct = -1;       // < 0: report only
  std::string max_time = "10min";  // refuse longer runs; "none": no limit
  // Fault injection (calibrate/inject.h) and the recovery run's settings.
  std::string inject;
  int checkpoint_every = 2;
  std::string checkpoint_dir;      // empty: a fresh temporary folder, removed afterwards
  std::string heartbeat_timeout;   // empty: max(2 s, 4 predicted steps)
  std::string storage_bandwidth;   // empty: probed in the checkpoint folder
  std::string launcher;            // empty: mpirun -np N (kill/hang relaunch the job)
  std::string checkpoint_mode = "sync";  // sync | async
  // Set by the supervisor for the ranks it launches (hidden).
  std::string recovery_dir;
  int recovery_attempt = 0;
  // (given, flag) of the options only a recovery run takes.
  std::vector<std::pair<bool, std::string>> recovery_flags_given;
};

// A predicted and a measured quantity, with the verdict docs/validation.md
// defines: "ok" within 20%; "small" when both sides are under
// `small_below` (timer, scheduler and launcher granularity); else "MISS".
struct Compared {
  std::string name;
  double predicted = 0, measured = 0;
  std::string note;
};
void print_compared(const std::vector<Compared>& rows, double small_below);

// The ranks' side of a recovery run (launched by the supervisor): a
// checkpoint every --checkpoint-every steps (blocking or async), a log of
// every phase, the fault in attempt 1, the checkpoint load in attempt 2.
int run_recovery_worker(const ValidateFlags& f, Backend& backend, const ModelSpec& model, const ClusterSpec& cluster,
                        const Layout& layout, const InjectSpec& spec);

// validate --inject kill|hang: launches the job, lets the fault hit,
// detects it, relaunches from the last committed checkpoint, and prints (or
// writes as JSON) each phase against what the fault models predict.
// Throws InputError on bad recovery options.
int run_recovery_supervisor(const ValidateFlags& f, const ModelSpec& model, const ClusterSpec& cluster,
                            const Layout& layout, const StepReport& pred, const InjectSpec& spec);

// validate --inject slow|link: the measured straggler tax and arrival spread
// of the faulted steps against the straggler model's; adds them to `out`.
std::vector<Compared> compare_straggler(const ValidateFlags& f, const ModelSpec& model, const ClusterSpec& cluster,
                                        const Layout& layout, const InjectSpec& spec, const MeasuredStep& meas,
                                        nlohmann::json* out);

}  // namespace trainplan

#endif  // TRAINPLAN_PLANNER_CLI_VALIDATE_FAULTS_H_
