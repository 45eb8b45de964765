#include "simulator/taskgraph/task_graph.h"

#include <algorithm>

#include "simulator/core/error.h"

namespace trainplan {

const char* to_string(Category c) {
  switch (c) {
    case Category::kCompute: return "compute";
    case Category::kTpComm: return "tp_comm";
    case Category::kCpComm: return "cp_comm";
    case Category::kPpComm: return "pp_comm";
    case Category::kDpComm: return "dp_comm";
    case Category::kOptimizer: return "optimizer";
  }
  return "?";
}

const char* to_string(TaskLabel l) {
  switch (l) {
    case TaskLabel::kForward: return "F";
    case TaskLabel::kBackward: return "B";
    case TaskLabel::kOptimizer: return "optimizer";
    case TaskLabel::kSendForward: return "send-activation";
    case TaskLabel::kSendBackward: return "send-gradient";
    case TaskLabel::kDpAllReduce: return "dp-allreduce";
    case TaskLabel::kDpReduceScatter: return "dp-reducescatter";
    case TaskLabel::kDpAllGather: return "dp-allgather";
    case TaskLabel::kParamAllGather: return "param-allgather";
    case TaskLabel::kPsPush: return "ps-push";
    case TaskLabel::kPsPull: return "ps-pull";
    case TaskLabel::kPsUpdate: return "ps-update";
    case TaskLabel::kIteration: return "F+B";
    case TaskLabel::kWeightGrad: return "W";
    case TaskLabel::kHostToDevice: return "H2D";
    case TaskLabel::kGradNormSync: return "grad-norm";
  }
  return "?";
}

int32_t TaskGraph::add_channel(bool arrival_order) {
  channel_order.emplace_back();
  channel_arrival.push_back(arrival_order ? 1 : 0);
  return channels++;
}

int32_t TaskGraph::add_compute(int32_t rank, int64_t work_ps, Category category, TaskLabel label) {
  TRAINPLAN_CHECK(rank >= 0 && rank < ranks, "compute task on an unknown rank");
  Task t;
  t.type = TaskType::kCompute;
  t.rank = rank;
  t.work_ps = std::max<int64_t>(0, work_ps);
  t.category = category;
  t.label = label;
  tasks_.push_back(t);
  int32_t id = static_cast<int32_t>(tasks_.size() - 1);
  program[static_cast<size_t>(rank)].push_back(id);
  return id;
}

int32_t TaskGraph::add_comm(int32_t channel, int64_t latency_ps, double wire_bytes, double max_rate,
                            Category category, TaskLabel label, const std::vector<int32_t>& members,
                            const std::vector<FlowLink>& links) {
  TRAINPLAN_CHECK(channel >= 0 && channel < channels, "comm task on an unknown channel");
  TRAINPLAN_CHECK(wire_bytes <= 0 || max_rate > 0, "comm task with bytes needs a positive rate");
  Task t;
  t.type = TaskType::kComm;
  t.channel = channel;
  t.work_ps = std::max<int64_t>(0, latency_ps);
  t.wire_bytes = wire_bytes;
  t.max_rate = max_rate;
  t.category = category;
  t.label = label;
  t.comm_index = comm_count_++;
  t.member_begin = static_cast<uint32_t>(members_.size());
  t.member_count = static_cast<uint32_t>(members.size());
  members_.insert(members_.end(), members.begin(), members.end());
  t.link_begin = static_cast<uint32_t>(links_.size());
  t.link_count = static_cast<uint32_t>(links.size());
  links_.insert(links_.end(), links.begin(), links.end());
  tasks_.push_back(t);
  int32_t id = static_cast<int32_t>(tasks_.size() - 1);
  channel_order[static_cast<size_t>(channel)].push_back(id);
  return id;
}

void TaskGraph::add_dep(int32_t before, int32_t after) {
  TRAINPLAN_CHECK(before >= 0 && after >= 0 && before != after, "bad dependency");
  edges_.emplace_back(static_cast<uint32_t>(before), static_cast<uint32_t>(after));
  tasks_[static_cast<size_t>(after)].preds += 1;
}

void TaskGraph::finalize() {
  std::vector<uint32_t> count(tasks_.size() + 1, 0);
  for (const auto& e : edges_) count[e.first + 1] += 1;
  for (size_t i = 1; i < count.size(); ++i) count[i] += count[i - 1];
  succ_.assign(edges_.size(), 0);
  std::vector<uint32_t> fill(count.begin(), count.end() - 1);
  for (const auto& e : edges_) succ_[fill[e.first]++] = e.second;
  for (size_t i = 0; i < tasks_.size(); ++i) {
    tasks_[i].succ_begin = count[i];
    tasks_[i].succ_count = count[i + 1] - count[i];
  }
  edges_.clear();
  edges_.shrink_to_fit();
}

}  // namespace trainplan
