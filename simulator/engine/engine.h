// The discrete-event engine: runs a TaskGraph on simulated ranks and links.
//
// - A compute task starts when its dependencies are done, it is next in its
//   rank's program order and the compute stream is idle.  While any
//   communication task of that rank is running, compute progresses at
//   1/(1 + comm_slowdown) of full speed (NCCL kernels occupy SMs).
// - A comm task starts when its dependencies are done and it is next on its
//   FIFO channel; it pays its latency, then moves wire_bytes as a flow in the
//   FlowNetwork (max-min fair with other flows on shared links).
// - Memory: each rank starts at static_bytes[rank]; a compute task allocates
//   mem_alloc at its start and frees mem_free at its end; the peak is kept.
// Integer picosecond clock; same graph => identical result.
#ifndef TRAINPLAN_SIM_ENGINE_ENGINE_H_
#define TRAINPLAN_SIM_ENGINE_ENGINE_H_

#include <cstdint>
#include <vector>

#include "simulator/network/flow_network.h"
#include "simulator/taskgraph/task_graph.h"

namespace trainplan {

struct EngineOptions {
  double comm_slowdown = 0.0;        // compute slowdown factor while comm kernels run
  std::vector<int64_t> static_bytes;  // per simulated rank, bytes held all step
  // Optional per-task multiplier of compute work (stragglers); empty = 1.
  std::vector<float> work_scale;
};

struct TaskTime {
  int64_t start_ps = 0;
  int64_t end_ps = 0;
};

struct EngineResult {
  int64_t makespan_ps = 0;
  std::vector<TaskTime> times;         // per task
  std::vector<int32_t> last_pred;      // per task, the dependency that finished last (-1: none)
  std::vector<int64_t> rank_end_ps;    // per rank, end of its last compute task
  std::vector<int64_t> peak_bytes;     // per rank
  uint64_t events = 0;
};

// Runs the graph to completion.  Aborts (TRAINPLAN_CHECK) with the stuck
// tasks if the graph deadlocks.
EngineResult run_engine(const TaskGraph& graph, FlowNetwork& network, const EngineOptions& options);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_ENGINE_ENGINE_H_
