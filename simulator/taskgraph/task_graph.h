// The task graph of one training step: compute tasks bound to one rank's
// compute stream (run in program order), communication tasks (collectives,
// point-to-point) bound to a FIFO channel, with dependencies.
//
// Invariants after finalize(): successors are stored in CSR form; the graph is
// acyclic (the engine detects a stall and reports it); every compute task's
// rank is in [0, ranks); memory allocated at a task's start and freed at its
// end are in bytes.  Plain data: no JSON, no strings per task.
#ifndef TRAINPLAN_SIM_TASKGRAPH_TASK_GRAPH_H_
#define TRAINPLAN_SIM_TASKGRAPH_TASK_GRAPH_H_

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "simulator/network/flow_network.h"

namespace trainplan {

enum class TaskType : uint8_t { kCompute, kComm };
enum class Category : uint8_t { kCompute, kTpComm, kCpComm, kPpComm, kDpComm, kOptimizer };
constexpr int kCategoryCount = 6;
const char* to_string(Category c);

// What a task is, for traces and reports.
enum class TaskLabel : uint8_t {
  kForward, kBackward, kOptimizer, kSendForward, kSendBackward, kDpAllReduce, kDpReduceScatter,
  kDpAllGather, kParamAllGather, kPsPush, kPsPull, kPsUpdate, kIteration,
  kWeightGrad,  // the weight-gradient pass W of a zero-bubble schedule
  kHostToDevice,  // parameter offload: a layer's parameter shard copied from host memory
  kDeviceToHost,  // gradient offload (ZeRO-3): a pass's gradient shard copied to host memory
  kGradNormSync,  // the gradient-norm all-reduce over a replica's model-parallel ranks before the update
  kHostWork,      // host work with the device synchronized (a list-API collective's per-member calls)
  kTpCollective,  // a pass's tensor-parallel collectives, on the rank's NVLink (or NIC) port
  kCpExchange,    // a pass's context-parallel K/V exchange, beside its attention
  kListCopy,      // a ZeRO-3 collective's device copies (list API: zero-fill, flat buffer <-> member views; a flattened gradient bucket)
  kEmbeddingGradSync  // tied embeddings across the pipeline: the first and last stages' copies' gradients all-reduced
};
const char* to_string(TaskLabel l);

struct Task {
  int64_t work_ps = 0;       // compute: time alone on the GPU; comm: latency
  int64_t tp_comm_ps = 0;    // compute: part of work_ps that is exposed TP/CP communication
  int64_t ep_comm_ps = 0;    // compute: part of work_ps that is MoE token all-to-all / expert-TP communication
  double wire_bytes = 0;     // comm: bytes through each member's bottleneck (busbw units)
  double max_rate = 0;       // comm: bus bandwidth of the group alone, bytes/s
  int64_t mem_alloc = 0;     // compute: bytes allocated at start
  int64_t mem_free = 0;      // compute: bytes freed at end
  int32_t rank = -1;         // compute: simulated rank
  int32_t channel = -1;      // comm: FIFO channel
  int32_t comm_index = -1;   // comm: dense index among comm tasks
  uint32_t succ_begin = 0, succ_count = 0;
  uint32_t member_begin = 0, member_count = 0;  // comm: simulated ranks taking part
  uint32_t link_begin = 0, link_count = 0;      // comm: links of its flow
  int32_t preds = 0;
  int32_t microbatch = -1;
  int16_t chunk = -1;
  int16_t layer = -1;        // -1: the whole chunk
  int16_t layer_count = 0;   // compute: transformer layers it runs
  uint8_t extras = 0;        // compute: 1 = embedding, 2 = output layer + loss
  TaskType type = TaskType::kCompute;
  Category category = Category::kCompute;
  TaskLabel label = TaskLabel::kForward;
};

class TaskGraph {
 public:
  // Adds a comm channel.  Tasks of an ordered channel run in creation order;
  // of an arrival channel in the order they become ready (a server queue).
  int32_t add_channel(bool arrival_order = false);
  int32_t add_compute(int32_t rank, int64_t work_ps, Category category, TaskLabel label);
  // members: simulated ranks whose compute is slowed while it runs.  A task
  // whose members and links equal the previous comm task's shares its
  // ranges of the member and link arrays (a DP group's collectives: one copy
  // of 1,024 members, not one per bucket).
  int32_t add_comm(int32_t channel, int64_t latency_ps, double wire_bytes, double max_rate, Category category,
                   TaskLabel label, const std::vector<int32_t>& members, const std::vector<FlowLink>& links);
  void add_dep(int32_t before, int32_t after);
  // For each (task, companion): every dependency into `task` added so far
  // is added into `companion` too, so the companion becomes ready exactly
  // when the task does (a comm task that starts with a compute task).  One
  // pass over the dependencies.  REQUIRES: before finalize().
  void mirror_predecessors(const std::vector<std::pair<int32_t, int32_t>>& pairs);
  // Builds the CSR successor lists.  REQUIRES: called once, after all adds.
  void finalize();
  // Capacity for about `tasks` tasks and `edges` dependencies (no effect on
  // the graph; saves the re-allocations of large graphs).
  void reserve(size_t tasks, size_t edges) {
    tasks_.reserve(tasks);
    edges_.reserve(edges);
  }

  Task& task(int32_t id) { return tasks_[static_cast<size_t>(id)]; }
  const Task& task(int32_t id) const { return tasks_[static_cast<size_t>(id)]; }
  int32_t size() const { return static_cast<int32_t>(tasks_.size()); }
  int32_t comm_count() const { return comm_count_; }
  const uint32_t* successors(const Task& t) const { return succ_.data() + t.succ_begin; }
  const int32_t* members(const Task& t) const { return members_.data() + t.member_begin; }
  const FlowLink* links(const Task& t) const { return links_.data() + t.link_begin; }
  // The successor, member and link arrays behind successors(), members()
  // and links(), whole.
  const std::vector<uint32_t>& successor_array() const { return succ_; }
  const std::vector<int32_t>& member_array() const { return members_; }
  const std::vector<FlowLink>& link_array() const { return links_; }

  int32_t ranks = 0;     // simulated ranks
  int32_t channels = 0;  // comm channels
  // Per rank, compute tasks in program order.
  std::vector<std::vector<int32_t>> program;
  // Per channel, comm tasks in FIFO order, and whether it serves by arrival.
  std::vector<std::vector<int32_t>> channel_order;
  std::vector<uint8_t> channel_arrival;

 private:
  std::vector<Task> tasks_;
  std::vector<std::pair<uint32_t, uint32_t>> edges_;
  std::vector<uint32_t> succ_;
  std::vector<int32_t> members_;
  std::vector<FlowLink> links_;
  int32_t comm_count_ = 0;
  // The last comm task's ranges of members_ and links_ (add_comm).
  uint32_t last_member_begin_ = 0, last_member_count_ = 0, last_link_begin_ = 0, last_link_count_ = 0;
};

// A lower bound on the makespan of `g`: its critical path with every task at
// its uncontended duration (compute: its work, which slowdowns only stretch;
// comm: its latency plus its wire bytes at its rate cap, which sharing a link
// only lowers), through its dependencies, each rank's program order and each
// ordered channel's FIFO order (an arrival channel's order is left out: it
// is the engine's).  The engine honours every one of those precedences, so
// its makespan is never below this.  O(tasks + dependencies).
// REQUIRES: g finalized and acyclic.
int64_t critical_path_lower_bound_ps(const TaskGraph& g);

// A 64-bit hash of everything the engine reads from `g` and `network` (every
// task field, dependencies, members, links and their weights, programs,
// channels, link capacities): two steps with equal fingerprints run the same
// events to the same times (a collision between different graphs has
// probability about 2^-64 per pair).  REQUIRES: g finalized.
uint64_t fingerprint(const TaskGraph& g, const FlowNetwork& network);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_TASKGRAPH_TASK_GRAPH_H_
