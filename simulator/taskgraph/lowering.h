// Lowering: a resolved plan on a cluster -> the task graph of one training
// step, the flow network it runs on and each rank's static memory.
//
// Ranks are placed in Megatron's order (tp innermost, then cp, dp, pp), so a
// TP group stays inside a node.  Pipeline transfers follow the route the
// cluster's graph (network/topology.h) gives between the two GPUs: through
// the node switch, or out of the NIC (and over the spine, paying the fat
// tree's oversubscription).  Per rank: the pipeline schedule's forward and
// backward ops (per model chunk, or per layer where DP/ZeRO needs layer
// granularity), TP/CP collectives folded into the layer time (they block the
// compute stream, Megatron without comm overlap), pipeline send/recv, DP
// gradient buckets (all-reduce, or reduce-scatter + all-gather under ZeRO),
// ZeRO-3 per-layer parameter all-gathers with one layer of prefetch, and the
// optimizer step.
// Async DP (parameter servers): each DP worker loops compute -> push
// gradients -> server update (served in arrival order, no barrier) -> pull
// weights, for a fixed number of iterations.
// Representative mode simulates one rank per pipeline stage (all DP, TP, CP
// replicas are symmetric); full mode simulates every rank.  Both give the
// same timeline when nothing breaks symmetry.
#ifndef TRAINPLAN_SIM_TASKGRAPH_LOWERING_H_
#define TRAINPLAN_SIM_TASKGRAPH_LOWERING_H_

#include <cstdint>
#include <vector>

#include "simulator/memory/memory_model.h"
#include "simulator/network/flow_network.h"
#include "simulator/schedule/pipeline_schedule.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"
#include "simulator/taskgraph/step_costs.h"
#include "simulator/taskgraph/task_graph.h"

namespace trainplan {

struct LoweringOptions {
  bool representative = true;
  // Full mode (representative = false): the tensor-parallel peers of a stage
  // and DP replica run in lock-step (every layer's TP collectives join them;
  // the straggler model gives them one work scale, the max over their GPUs)
  // and each moves its own slice over its own GPU's links, of equal
  // capacity, on one node (per-node degradations hit them alike).  So one
  // simulated rank stands for them (LoweredStep::gpus_per_rank = tp): the
  // same step, tp times fewer tasks.  every_gpu keeps one simulated rank per
  // GPU (a backend that executes one process per GPU); so do MoE models
  // (expert groups mix TP ranks) and TP groups that span nodes.
  bool every_gpu = false;
  // Gradient bucket size (PyTorch DDP bucket_cap_mb = 25, i.e. 25 MiB).
  double bucket_bytes = 25.0 * 1024 * 1024;
  // Pipeline sends block the sender's next compute (Megatron's
  // non-interleaved schedules) unless overlapped (interleaved, or a backend
  // whose sends are asynchronous).  Default: by schedule.
  enum class P2p { kBySchedule, kBlocking, kAsync } p2p = P2p::kBySchedule;
  // DP collectives run on the compute stream (a backend without async
  // collectives, e.g. the CPU backend's MPI calls): each blocks the members'
  // next compute.
  bool blocking_dp = false;
  // Context-parallel K/V exchange hidden behind attention (StepCosts).
  bool cp_overlap = true;
};

struct RankCoord {
  int global = 0;
  int pp = 0, dp = 0, cp = 0, tp = 0;
  int node = 0;
};

// Async data parallel: one worker iteration (compute, push, PS update, pull).
struct AsyncIteration {
  int worker = 0;
  int32_t previous_pull = -1;  // the pull whose weights this iteration used (-1: initial)
  int32_t update = -1;         // the parameter-server update of its gradients
};

struct LoweredStep {
  TaskGraph graph;
  FlowNetwork network;
  std::vector<RankCoord> ranks;        // simulated ranks
  // GPUs each simulated rank stands for in full mode: its own and the tp - 1
  // peers after it (LoweringOptions::every_gpu); 1 when every GPU is simulated.
  int gpus_per_rank = 1;
  std::vector<int64_t> static_bytes;   // per simulated rank
  double comm_slowdown = 0;
  LayerTimes layer;
  LayerTimes moe_layer;   // MoE models: an MoE layer's times
  double moe_load = 1;    // MoE: the busiest expert-parallel rank's load over the mean
  std::vector<AsyncIteration> async;  // async DP only
  int async_iterations = 0;           // per worker
};

// REQUIRES: layout.feasible.
LoweredStep lower_step(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                       const LoweringOptions& options);

// The passes each pipeline rank of an automatic zero-bubble plan (zb-1p,
// zb-2p) runs, in order: Zero Bubble's scheduler on the step's stage times,
// as lower_step orders them.  REQUIRES: layout.feasible and
// zero_bubble_automatic(layout.plan.schedule).
PipelineSchedule automatic_zero_bubble_order(const ModelSpec& model, const ClusterSpec& cluster,
                                             const Layout& layout);

// A plan's memory per GPU: estimate_memory, given the pass order of an
// automatic zero-bubble plan (so its activations are the schedule's, not
// the scheduler's limit).  What `memory`, `recommend`, `validate` and the
// reports print; the plan search sizes its candidates by estimate_memory's
// bound (never less than this).  REQUIRES: layout resolved by resolve_plan.
MemoryReport plan_memory(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_TASKGRAPH_LOWERING_H_
