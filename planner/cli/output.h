// Output helpers shared by the commands: the version banner, JSON of a plan,
// atomic writes (temp file + rename) so no half-written file is left, and
// the check that stdout took everything.
#ifndef TRAINPLAN_PLANNER_CLI_OUTPUT_H_
#define TRAINPLAN_PLANNER_CLI_OUTPUT_H_

#include <chrono>
#include <cstdint>
#include <string>

#include <nlohmann/json.hpp>

#include "planner/plan/plan_file.h"  // plan_to_json
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

constexpr const char* kVersion = "0.1.0";

// Writes `text` to `path` whole or not at all: a unique temporary file in
// the same folder (mkstemp: O_EXCL, never through a symlink), fsync, rename
// over `path`, fsync of the folder.  The temporary file is removed on error
// and on SIGINT/SIGTERM/SIGHUP.  The one way every command writes a file.
// Throws InputError "<flag>: cannot write \"path\": <strerror>; ..." if it
// cannot be written (or names a folder).
void write_file_atomically(const std::string& path, const std::string& text, const std::string& flag);

// Checks, before any work, that `path` could be written by
// write_file_atomically: a file name (not a folder) in an existing, writable
// folder.  Throws InputError naming `flag`.
void check_output_path(const std::string& path, const std::string& flag);

// Flushes stdout (stdio and iostream) and throws InputError "standard
// output: write failed: <strerror>; ..." if anything written to it was
// lost (`trainplan models > /dev/full`).  main() calls it before exiting.
void check_stdout();

// A short hash (FNV-1a, 16 hex digits) of everything an answer depends on:
// the model's shape, the cluster (and its calibration), the GPU count and the
// plan or search options given as `extra`.  Printed in every output header.
std::string config_hash(const ModelSpec& model, const ClusterSpec& cluster, int gpus, const std::string& extra);

// The head of simulate's and memory's JSON for one plan: tool, config_hash
// (of the plan as asked, describe_plan), command, model, cluster, gpus,
// nodes, the resolved plan with its stage layers, and valid.
nlohmann::json plan_output_header(const char* command, const ModelSpec& model, const ClusterSpec& cluster, int gpus,
                                  const Plan& asked, const Layout& layout);

// Formats x with `decimals` digits after the point.
std::string fixed(double x, int decimals);

// Rounds x to `decimals` digits so JSON numbers stay short and stable.
double rounded(double x, int decimals);

// A progress line on stderr for long runs: shown only when stderr is a
// terminal and the run has taken more than a second, rewritten in place
// ("\r"), with the elapsed time and an ETA from the rate so far.  clear()
// erases it before the answer is printed.  Output on stdout is unchanged.
class ProgressLine {
 public:
  explicit ProgressLine(std::string what);
  // `eta_qualifier` (e.g. "at most") precedes the ETA when `total` is an
  // upper bound of the work.
  void update(const std::string& phase, int64_t done, int64_t total, const std::string& eta_qualifier = "");
  void clear();

 private:
  std::string what_;
  std::string phase_;
  bool tty_ = false;
  bool shown_ = false;
  std::chrono::steady_clock::time_point start_, phase_start_;
};

// "42 s", "3.5 min", "1.2 h", "29.7 d"; "never" for +inf.
std::string human_duration(double seconds);

}  // namespace trainplan

#endif  // TRAINPLAN_PLANNER_CLI_OUTPUT_H_
