// Failures, checkpoint/restart and goodput of a whole training run.
//
// Model (a renewal process, Young 1974; Daly 2006, FGCS 22(3)):
// - The job fails at rate lambda = gpus / MTBF_gpu + nodes / MTBF_node
//   (exponential inter-failure times: any failure stops a synchronous job).
// - The run is N = ceil(train_tokens / tokens_per_step) steps of T seconds.
//   Every k steps the job writes a checkpoint, blocking for delta seconds
//   (the last segment, shorter if k does not divide N, ends with the final
//   save).  A segment is committed when its checkpoint write completes.
// - A failure during a segment (compute or checkpoint write) loses the time
//   spent in it; the job is down for D = detect + restart (failure-free:
//   the scheduler replaces the node), then loads the last checkpoint (L
//   seconds, during which it can fail again) and redoes the segment.
// - Checkpoint size = weights + optimizer states of the whole model, each
//   byte written once (fully parallel save: replicated states are split over
//   their replicas, as Megatron's distributed checkpointing and PyTorch DCP do)
//   and spread over every GPU; delta = size / storage bandwidth (the
//   aggregate the job gets from the checkpoint store); L = size / the same
//   bandwidth (each unique byte read once, then broadcast over the fabric).
//
// Expected time of a segment of x seconds (x = k T + delta):
//   E(x) = (1/lambda + D) e^{lambda L} (e^{lambda x} - 1)
// (derivation in failures.cc).  Expected goodput = useful time / wall time.
// The interval maximising it minimises (e^{lambda (tau + delta)} - 1) / tau:
//   tau* = (1 + W0(-e^{-(1 + lambda delta)})) / lambda
// with W0 the principal branch of Lambert's W; D and L scale every segment
// by the same factor and do not move it.  For delta << MTBF,
// tau* = sqrt(2 delta MTBF) - 2 delta / 3 + O(delta^1.5 / MTBF^0.5): Young's
// sqrt(2 delta MTBF) without the -2/3 delta term, which Daly's expansion has.
// The checkpoint can only be taken at a step boundary: the chosen interval is
// the whole number of steps with the lowest expected run time.
//
// The Monte Carlo simulates the same model with the seeded Rng (run i uses
// stream derive_seed(seed, kFailures, i)); its mean converges to the closed
// form, and it gives the distribution (p50, p90) of the time to train.
// Times are double seconds: a run is far longer than the engine's +-106 days
// of int64 picoseconds, and the model is a sequential, deterministic loop.
//
// Asynchronous checkpointing (--checkpoint-mode async; torchtitan
// checkpoint.async_mode = "async", Megatron --async-save, PyTorch DCP
// async_save): training blocks only for the device-to-host snapshot of each
// GPU's shard, s = per-GPU state bytes / host bandwidth per GPU; the shard
// then persists in the background for p = the sync write time, and the
// checkpoint is committed when the persist completes.  One host buffer: the
// next snapshot waits for the previous persist, so a checkpoint every tau
// seconds of compute blocks s + max(0, p - tau) and the commits are
// max(tau, p) + s apart.  A failure before a commit rolls back to the
// previous committed checkpoint.  Per checkpoint interval (derivation in
// failures.cc), with x1 = max(tau, p) + s (running after a commit) and
// x2 = tau + s + p (fresh after a restart):
//   E = (1 - e^{-lambda x1}) (1/lambda + D) e^{lambda (L + x2)}
// (the first interval of the run starts fresh: x1 = x2).  p = 0 is the
// synchronous model.  The optimum is tau* = max(tau*_sync(delta = s), p)
// (for lambda p < 1); Young/Daly are given with delta = s.
//
// Persistent slow nodes, detection and draining against a spare pool:
// slow_nodes.h (SlowNodeRun below is their part of the run).
#ifndef TRAINPLAN_SIM_FAULTS_FAILURES_H_
#define TRAINPLAN_SIM_FAULTS_FAILURES_H_

#include <cstdint>
#include <string>
#include <vector>

#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

struct FailureModel {
  double mtbf_gpu_s = 0;             // 0: GPUs never fail
  double mtbf_node_s = 0;            // 0: nodes never fail (host, NIC, switch, software)
  // Detection: 5 min, a heartbeat/NCCL-watchdog monitor well below PyTorch's
  // 10-minute default collective timeout.
  double detect_s = 300;
  // Restart: 10 min to reschedule onto a spare node, relaunch every process
  // and re-initialise NCCL at scale.
  double restart_s = 600;
  double storage_bytes_per_s = 0;    // REQUIRED > 0: aggregate checkpoint store bandwidth
  double checkpoint_interval_s = 0;  // 0: the interval that maximises expected goodput
  // Sync (the default, and what most runs use): the write blocks training.
  bool async_checkpoint = false;
  // Persistent slow nodes (slow_nodes.h); off without slow_node_mtbf_s.
  double slow_node_mtbf_s = 0;  // per node; 0: nodes never turn slow
  double slow_node_factor = 1;  // F: compute time of a slow node / nominal (REQUIRED > 1 when on)
  // Detection: 10 min = two report windows of NVIDIA's straggler detector
  // (Megatron-Bridge training/config.py NVRxStragglerDetectionConfig:
  // report_time_interval = 300 s): the window in which the slowdown starts
  // (diluted by its fast part) and one full window to see it.
  double slow_detect_s = 600;
  int spare_nodes = 0;          // hot spares of the job (REQUIRED when on)
  double repair_s = 0;          // a drained node's time in repair before it is a spare again (REQUIRED with spares)
};

struct CheckpointCost {
  double total_bytes = 0;          // weights + optimizer states, each byte once
  double per_gpu_written_bytes = 0;  // total / GPUs (fully parallel save)
  double per_gpu_state_bytes = 0;  // weights + optimizer held by the most loaded GPU (as the plan shards them)
  double write_s = 0, load_s = 0;
  // Async: the blocking device-to-host copy of that GPU's state,
  // per_gpu_state_bytes / cluster.host.bandwidth_per_gpu (PCIe, all GPUs of
  // a node copying at once); p is write_s.
  double snapshot_s = 0;
  double snapshot_host_bytes_per_node = 0;  // pinned host memory the snapshots of a node take
};

// REQUIRES: layout resolved, storage_bytes_per_s > 0.
CheckpointCost checkpoint_cost(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                               double storage_bytes_per_s);

// Failures per second of a job on `gpus` GPUs of `nodes` nodes.
double failure_rate_per_s(const FailureModel& model, int gpus, int nodes);

// Persistent slow nodes as the run sees them (slow_nodes.h); off when
// rate_per_s == 0.
struct SlowNodeRun {
  double rate_per_s = 0;  // nu = nodes / slow-node MTBF (wall time, whatever the job does)
  double factor = 1;      // F: steps take F T while a slow node is in the job
  double detect_s = 0;    // d
  int spares = 0;         // S
  double repair_s = 0;    // R
  double drain_s = 0;     // C = planned save + restart + load
};

// The run as the renewal model sees it.
struct RunModel {
  double step_s = 0;        // T
  int64_t steps = 0;        // N
  double rate_per_s = 0;    // lambda (0: no failures)
  double checkpoint_s = 0;  // delta: the blocking part of a checkpoint (sync: the write; async: the snapshot s)
  double load_s = 0;        // L
  double downtime_s = 0;    // D = detect + restart
  double persist_s = 0;     // p: async background write after each snapshot; 0: synchronous
  SlowNodeRun slow;         // not in expected_run_s (see slow_nodes.h)
};

// E[wall time to complete x seconds of running] (x = compute + checkpoint of
// a segment), restarting from its start after each failure.
double expected_segment_s(const RunModel& m, double x);
// E[wall time from one commit to the next] when the first attempt needs x1
// seconds without a failure and every attempt after a failure x2 (after the
// load): (1 - e^{-lambda x1}) (1/lambda + D) e^{lambda (L + x2)}.
double expected_interval_s(const RunModel& m, double x1, double x2);
// E[wall time of the whole run] with a checkpoint every k steps (failures and
// checkpoints only; slow nodes: expected_slow_run).  REQUIRES: k >= 1.
double expected_run_s(const RunModel& m, int64_t k);
// Long-run goodput of a checkpoint every tau seconds of compute: sync
// tau / E(tau + delta); async tau / expected_interval_s(max(tau, p) + s, tau + s + p).
double steady_goodput(const RunModel& m, double tau_s);
// tau* above (continuous, the argmax of steady_goodput); +inf without failures.
double optimal_interval_s(const RunModel& m);
// The whole number of steps between checkpoints with the lowest expected run
// time (ties: fewer steps); N without failures (only the final save).
int64_t optimal_interval_steps(const RunModel& m);
// Young (1974): sqrt(2 delta M).  Daly (2006) eq. 37: sqrt(2 delta M) (1 +
// sqrt(delta/(2M))/3 + delta/(18M)) - delta for delta < 2M, else M.
double young_interval_s(double checkpoint_s, double mtbf_s);
double daly_interval_s(double checkpoint_s, double mtbf_s);

// Where the wall time of a run goes (seconds, mean over Monte Carlo runs).
struct WallBreakdown {
  double useful = 0;      // N T
  double checkpoint = 0;  // committed checkpoint writes (async: snapshots and waits for the persist)
  double lost = 0;        // time in attempts a failure cut short (work, writes, loads)
  double downtime = 0;    // detection + restart
  double load = 0;        // completed checkpoint loads
  double slow = 0;        // kept steps run at a slow node's pace: their time beyond N T
  double drain = 0;       // drains of slow nodes: planned save + restart + load
};

// The expected breakdown of a run with a checkpoint every k steps, in
// closed form (derivation in failures.cc): per segment of x seconds with
// F = e^{lambda L} (e^{lambda x} - 1) expected failures, downtime D F,
// completed loads L (e^{lambda x} - 1), and F / lambda seconds of running
// in all.  Its total is expected_run_s(m, k).  REQUIRES: k >= 1.
WallBreakdown expected_breakdown(const RunModel& m, int64_t k);
// Expected failures over the run (sum of F over its segments).
double expected_failures(const RunModel& m, int64_t k);

// The Monte Carlo draws one failure per loop: a run expected to fail (or,
// with slow nodes, to see 3 timeline events per slow node) more than this
// often over all Monte Carlo runs is not sampled (it would not
// return for hours, e.g. a 1 s MTBF); with that many failures the
// distribution is the closed form's within 1/sqrt(failures) (central limit
// theorem), so the closed form is reported.
constexpr double kMaxMonteCarloFailures = 2e7;

// Below this expected goodput a run makes no practical progress: "this
// plan cannot run" with the reason.
constexpr double kMinRunnableGoodput = 1e-3;

struct MonteCarloResult {
  int runs = 0;                 // 0: not sampled (closed form, see kMaxMonteCarloFailures)
  double mean_s = 0, p50_s = 0, p90_s = 0, min_s = 0, max_s = 0;
  double std_s = 0;  // sample standard deviation of the run time
  double failures_mean = 0;
  WallBreakdown breakdown;
  // With slow nodes (mean per run): nodes that turned slow, drains, and the
  // wall time with a slow node in the job.
  double slow_events_mean = 0, drains_mean = 0, slow_wall_mean_s = 0;
};

// REQUIRES: k >= 1, runs >= 1, runs * expected_failures(m, k) within
// kMaxMonteCarloFailures.  Synchronous without slow nodes: one loop per
// attempt (whole segments between failures in one go); async or with slow
// nodes: the event-by-event timeline (compute, snapshot, background persist,
// commit, failure, downtime, load; nodes turning slow, detection, the spare
// queue, drains and repairs), stream derive_seed(seed, kSlowNodes, i) for
// the slow nodes.
MonteCarloResult monte_carlo_run(const RunModel& m, int64_t k, int runs, uint64_t seed);

struct IntervalPoint {
  double interval_s = 0;
  double goodput = 0;  // steady_goodput
};

struct FailureReport {
  bool async_checkpoint = false;
  double rate_per_hour = 0;
  double job_mtbf_s = 0;               // 1 / lambda
  CheckpointCost checkpoint;
  RunModel run;
  bool auto_interval = true;
  int64_t interval_steps = 0;
  double interval_s = 0;               // interval_steps * T
  double optimal_interval_s = 0;       // continuous tau*
  double young_interval_s = 0, daly_interval_s = 0;
  double expected_s = 0;               // expected_run_s at interval_steps (with slow nodes: expected_slow_run)
  double goodput_expected = 0;         // N T / expected_s
  double goodput_young = 0;            // expected goodput at Young's interval (whole steps)
  bool has_slow_nodes = false;
  double slow_rate_per_hour = 0;       // nodes turning slow per hour (nu)
  double slow_expected_events = 0;     // nodes expected to turn slow over the run
  double slow_expected_drains = 0;     // drains expected (spares handed out while the job runs)
  double slow_expected_failures = 0;   // failures expected over the run with slow nodes
  double slow_wall_fraction = 0;       // expected share of the wall time with a slow node in the job
  double spare_load = 0;               // nu R: spares busy in repair on average (a stable pool needs < S)
  WallBreakdown breakdown_expected;    // closed form
  MonteCarloResult mc;
  double goodput = 0;                  // N T / mc.mean_s
  std::vector<IntervalPoint> sweep;    // steady goodput around tau*
  // Non-empty when the job can make no practical progress (expected goodput
  // below kMinRunnableGoodput): "the job fails every 1.0 s on average ...".
  std::string cannot_run;
};

// The run of `train_tokens` tokens at `step_s` per step of `tokens_per_step`.
// With runs == 0 only the closed form is computed (mc.runs == 0, goodput =
// goodput_expected); add_monte_carlo() adds the distribution later.
// REQUIRES: step_s > 0, tokens_per_step > 0, train_tokens > 0, runs >= 0,
// model.storage_bytes_per_s > 0, at least one MTBF > 0.
FailureReport analyze_failures(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                               double step_s, double tokens_per_step, double train_tokens, const FailureModel& fm,
                               int runs, uint64_t seed);

// Runs the Monte Carlo of report->run at its interval and sets mc and
// goodput; beyond kMaxMonteCarloFailures expected failures it sets mc to
// the closed form instead (mc.runs == 0).  REQUIRES: runs >= 1.
void add_monte_carlo(FailureReport* report, int runs, uint64_t seed);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_FAULTS_FAILURES_H_
