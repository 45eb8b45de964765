// Measured recovery (validate --inject kill|hang): a supervisor launches the
// plan's job, a rank dies or stops mid-step, the supervisor detects it,
// tears the job down and relaunches it from the last committed checkpoint;
// every phase is timed from the ranks' own event logs.
//
// Worker side (each rank, under the launcher): a RecoveryLog per rank and
// attempt, checkpoint shards written per the plan's sharding (each rank its
// share of the unique weights and optimizer states, as a fully parallel
// save writes them: CheckpointCost::per_gpu_written_bytes), written and
// fsynced, then renamed into place: a shard exists only once it is durable,
// and a checkpoint is committed when every rank's shard of it exists.
//
// Supervisor side (one process, no MPI), as an elastic agent does
// (torchrun's watches its local workers' processes): spawns the launcher in
// its own process group and polls every kPollS for a rank's process that
// exited (each rank logs its pid), the launcher's exit, and a heartbeat
// (any rank's log written within the timeout: ranks log every step end;
// a stopped or deadlocked rank stops them all).  It kills what is left of a
// failed job and relaunches it.  Watching the processes matters: Open MPI's
// mpirun tears a job down only after its SIGTERM-then-SIGKILL grace period
// (about 1 s here), which would be counted as detection.
//
// Times are CLOCK_MONOTONIC seconds (std::chrono::steady_clock), one clock
// for every process of this machine; the cpu backend runs on one machine.
#ifndef TRAINPLAN_CALIBRATE_RECOVERY_H_
#define TRAINPLAN_CALIBRATE_RECOVERY_H_

#include <cstdint>
#include <functional>
#include <string>
#include <thread>
#include <vector>

namespace trainplan {

double monotonic_s();

// Appends "name time_s value" lines to DIR/attempt-A.rank-R.log with
// write(2) per event (no user-space buffer), so a rank killed right after
// an event has logged it.
class RecoveryLog {
 public:
  RecoveryLog(const std::string& dir, int attempt, int rank);  // throws std::runtime_error
  ~RecoveryLog();
  RecoveryLog(const RecoveryLog&) = delete;
  RecoveryLog& operator=(const RecoveryLog&) = delete;
  void event(const std::string& name, double value = 0);

 private:
  int fd_ = -1;
};

// Writes rank `rank`'s shard of the checkpoint after `step` steps: `bytes`
// of a step- and rank-dependent pattern to DIR/ckpt/step-S/rank-R.bin.tmp,
// fsync, rename.  Returns the seconds it took.  Throws std::runtime_error.
double write_shard(const std::string& dir, int step, int rank, int64_t bytes);
// A rank's asynchronous checkpoint writer (torchtitan async_mode, Megatron
// --async-save): snapshot() copies the shard into a host buffer while
// training waits (the device-to-host copy), then a background thread writes,
// fsyncs and renames it as write_shard does; the checkpoint commits when
// that is done.  One buffer: a snapshot first waits for the previous persist.
// `on_persisted(step)` is called on the writer's thread once a shard is in
// place.  The destructor waits for the last persist.
class AsyncShardWriter {
 public:
  AsyncShardWriter(std::string dir, int rank, int64_t bytes, std::function<void(int)> on_persisted);
  ~AsyncShardWriter();
  AsyncShardWriter(const AsyncShardWriter&) = delete;
  AsyncShardWriter& operator=(const AsyncShardWriter&) = delete;
  // Returns the seconds the caller was blocked (the wait + the copy).
  // Throws std::runtime_error if the previous persist failed.
  double snapshot(int step);
  void wait();  // for the persist in flight; rethrows its error

 private:
  std::string dir_;
  int rank_;
  int64_t bytes_;
  std::function<void(int)> on_persisted_;
  std::vector<uint64_t> buffer_;
  std::thread worker_;
  std::string error_;
};

// Reads it back and checks its size and pattern; returns the seconds it
// took.  Throws std::runtime_error naming the file if it is short or wrong.
double load_shard(const std::string& dir, int step, int rank, int64_t bytes);
// The latest step whose shards exist for every rank of [0, ranks); 0 if none.
int latest_committed_step(const std::string& dir, int ranks);

// The checkpoint store's aggregate bandwidth as the job sees it: `ranks`
// shards of `bytes` written (and fsynced) one after another, then read
// back, under DIR/probe; bytes per second each way.  Removes its files.
struct StorageProbe {
  double write_bytes_per_s = 0, read_bytes_per_s = 0;
};
StorageProbe probe_storage(const std::string& dir, int ranks, int64_t bytes);

constexpr double kPollS = 0.005;  // the supervisor's poll period

struct RecoveryConfig {
  std::string dir;
  int ranks = 0;
  int fault_step = 0;        // the step (1-based) the fault hits
  double heartbeat_timeout_s = 0;
  double max_attempt_s = 0;  // an attempt running longer is killed: an error
  std::vector<std::string> first_argv, resume_argv;  // launcher + worker arguments
};

// What the supervisor measured; times in seconds.
struct RecoveryMeasured {
  double launch_s = 0;              // attempt 1: spawn -> every rank ready
  double first_step_s = 0;          // attempt 1: every rank ready -> its first step done (a cold step)
  double fault_at_s = 0;            // fault -> since attempt 1's every rank ready
  double detection_s = 0;           // fault -> declared failed
  std::string detected_by;          // "rank R's process exited" | "launcher exit (...)" | "heartbeat timeout"
  double restart_s = 0;             // declared failed -> every rank of attempt 2 ready
  double load_s = 0;                // attempt 2: every rank ready (or first load start, if later) -> last load ends
  int resumed_from_step = 0;        // 0: no checkpoint before the fault
  int checkpoints = 0;              // written by attempt 1
  double checkpoint_write_s = 0;    // median over them: last rank starts -> last one's training resumes
  double checkpoint_persist_s = 0;  // async: median of last snapshot done -> last shard in place (0: sync)
  bool checkpoint_mode_async = false;  // attempt 1 logged persists
  double lost_work_s = 0;           // commit of the resumed checkpoint (or training start) -> fault
  double since_heartbeat_s = 0;     // last heartbeat before the fault -> fault
  double redo_s = 0;                // attempt 2: loaded -> the faulted step done again
  double recovery_s = 0;            // fault -> the faulted step done again
  double attempt2_s = 0;            // attempt 2: spawn -> exit
};

// Runs attempt 1 (expected to fail), detects the failure, relaunches
// attempt 2 and waits for it to finish.  Throws std::runtime_error with the
// attempt's output file if attempt 1 finishes without failing, attempt 2
// fails, or an attempt exceeds max_attempt_s.
RecoveryMeasured supervise_recovery(const RecoveryConfig& config);

}  // namespace trainplan

#endif  // TRAINPLAN_CALIBRATE_RECOVERY_H_
