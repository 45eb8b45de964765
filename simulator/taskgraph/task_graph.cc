#include "simulator/taskgraph/task_graph.h"

#include <algorithm>
#include <cmath>
#include <cstring>

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
    case TaskLabel::kDeviceToHost: return "D2H";
    case TaskLabel::kHostWork: return "host";
    case TaskLabel::kTpCollective: return "tp-collectives";
    case TaskLabel::kCpExchange: return "cp-exchange";
    case TaskLabel::kListCopy: return "list-api-copy";
    case TaskLabel::kGradNormSync: return "grad-norm";
    case TaskLabel::kEmbeddingGradSync: return "embedding-grad-allreduce";
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
  const bool same_members =
      members.size() == last_member_count_ &&
      std::equal(members.begin(), members.end(), members_.begin() + static_cast<std::ptrdiff_t>(last_member_begin_));
  const bool same_links = links.size() == last_link_count_ &&
                          std::equal(links.begin(), links.end(), links_.begin() + static_cast<std::ptrdiff_t>(last_link_begin_),
                                     [](const FlowLink& a, const FlowLink& b) { return a.link == b.link && a.weight == b.weight; });
  if (!same_members) {
    last_member_begin_ = static_cast<uint32_t>(members_.size());
    last_member_count_ = static_cast<uint32_t>(members.size());
    members_.insert(members_.end(), members.begin(), members.end());
  }
  if (!same_links) {
    last_link_begin_ = static_cast<uint32_t>(links_.size());
    last_link_count_ = static_cast<uint32_t>(links.size());
    links_.insert(links_.end(), links.begin(), links.end());
  }
  t.member_begin = last_member_begin_;
  t.member_count = last_member_count_;
  t.link_begin = last_link_begin_;
  t.link_count = last_link_count_;
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

void TaskGraph::mirror_predecessors(const std::vector<std::pair<int32_t, int32_t>>& pairs) {
  if (pairs.empty()) return;
  std::vector<int32_t> companion(tasks_.size(), -1);
  for (const auto& [task, other] : pairs) companion[static_cast<size_t>(task)] = other;
  const size_t n = edges_.size();
  for (size_t i = 0; i < n; ++i) {
    const int32_t c = companion[edges_[i].second];
    if (c >= 0 && static_cast<int32_t>(edges_[i].first) != c) add_dep(static_cast<int32_t>(edges_[i].first), c);
  }
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

int64_t critical_path_lower_bound_ps(const TaskGraph& g) {
  const size_t n = static_cast<size_t>(g.size());
  // Precedences beyond the dependencies: the next task in the same program
  // or ordered channel.
  std::vector<int32_t> next_in_order(n * 2, -1);
  std::vector<int32_t> indegree(n, 0);
  for (const std::vector<int32_t>& prog : g.program) {
    for (size_t k = 1; k < prog.size(); ++k) {
      next_in_order[static_cast<size_t>(prog[k - 1]) * 2] = prog[k];
      indegree[static_cast<size_t>(prog[k])] += 1;
    }
  }
  for (size_t c = 0; c < g.channel_order.size(); ++c) {
    if (c < g.channel_arrival.size() && g.channel_arrival[c]) continue;
    const std::vector<int32_t>& order = g.channel_order[c];
    for (size_t k = 1; k < order.size(); ++k) {
      next_in_order[static_cast<size_t>(order[k - 1]) * 2 + 1] = order[k];
      indegree[static_cast<size_t>(order[k])] += 1;
    }
  }
  for (int32_t id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    const uint32_t* s = g.successors(t);
    for (uint32_t k = 0; k < t.succ_count; ++k) indegree[s[k]] += 1;
  }
  std::vector<int64_t> ready(n, 0);  // earliest start
  std::vector<int32_t> queue;
  queue.reserve(n);
  for (int32_t id = 0; id < g.size(); ++id) {
    if (indegree[static_cast<size_t>(id)] == 0) queue.push_back(id);
  }
  int64_t makespan = 0;
  auto release = [&](int32_t next, int64_t finish) {
    const size_t ni = static_cast<size_t>(next);
    ready[ni] = std::max(ready[ni], finish);
    if (--indegree[ni] == 0) queue.push_back(next);
  };
  for (size_t head = 0; head < queue.size(); ++head) {
    const int32_t id = queue[head];
    const Task& t = g.task(id);
    int64_t duration = std::max<int64_t>(0, t.work_ps);
    if (t.type == TaskType::kComm && t.wire_bytes > 0 && t.max_rate > 0) {
      duration += static_cast<int64_t>(std::floor(t.wire_bytes / t.max_rate * 1e12));
    }
    const int64_t finish = ready[static_cast<size_t>(id)] + duration;
    makespan = std::max(makespan, finish);
    const uint32_t* s = g.successors(t);
    for (uint32_t k = 0; k < t.succ_count; ++k) release(static_cast<int32_t>(s[k]), finish);
    for (int w = 0; w < 2; ++w) {
      const int32_t next = next_in_order[static_cast<size_t>(id) * 2 + static_cast<size_t>(w)];
      if (next >= 0) release(next, finish);
    }
  }
  TRAINPLAN_CHECK(queue.size() == n, "critical path of a cyclic task graph");
  return makespan;
}

namespace {

// FNV-1a over 64-bit words, finished with a SplitMix64 mix.
class Hasher {
 public:
  void add(uint64_t x) {
    h_ ^= x;
    h_ *= 0x100000001b3ULL;
  }
  void add(double x) {
    uint64_t bits = 0;
    std::memcpy(&bits, &x, sizeof bits);
    add(bits);
  }
  uint64_t value() const {
    uint64_t z = h_ + 0x9e3779b97f4a7c15ULL;
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
  }

 private:
  uint64_t h_ = 0xcbf29ce484222325ULL;
};

}  // namespace

uint64_t fingerprint(const TaskGraph& g, const FlowNetwork& network) {
  Hasher h;
  h.add(static_cast<uint64_t>(g.size()));
  h.add(static_cast<uint64_t>(g.ranks));
  h.add(static_cast<uint64_t>(g.channels));
  for (int32_t id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    for (int64_t x : {t.work_ps, t.tp_comm_ps, t.ep_comm_ps, t.mem_alloc, t.mem_free}) h.add(static_cast<uint64_t>(x));
    h.add(t.wire_bytes);
    h.add(t.max_rate);
    for (int64_t x : {int64_t{t.rank}, int64_t{t.channel}, int64_t{t.comm_index}, int64_t{t.succ_begin},
                      int64_t{t.succ_count}, int64_t{t.member_begin}, int64_t{t.member_count}, int64_t{t.link_begin},
                      int64_t{t.link_count}, int64_t{t.preds}, int64_t{t.microbatch}, int64_t{t.chunk},
                      int64_t{t.layer}, int64_t{t.layer_count}, int64_t{t.extras}}) {
      h.add(static_cast<uint64_t>(x));
    }
    h.add((static_cast<uint64_t>(t.type) << 16) | (static_cast<uint64_t>(t.category) << 8) |
          static_cast<uint64_t>(t.label));
  }
  for (uint32_t s : g.successor_array()) h.add(uint64_t{s});
  for (int32_t m : g.member_array()) h.add(static_cast<uint64_t>(m));
  for (const FlowLink& l : g.link_array()) {
    h.add(static_cast<uint64_t>(l.link));
    h.add(static_cast<double>(l.weight));
  }
  for (const std::vector<int32_t>& prog : g.program) {
    h.add(static_cast<uint64_t>(prog.size()));
    for (int32_t id : prog) h.add(static_cast<uint64_t>(id));
  }
  for (size_t c = 0; c < g.channel_order.size(); ++c) {
    h.add(static_cast<uint64_t>(g.channel_order[c].size()));
    h.add(static_cast<uint64_t>(c < g.channel_arrival.size() ? g.channel_arrival[c] : 0));
    for (int32_t id : g.channel_order[c]) h.add(static_cast<uint64_t>(id));
  }
  h.add(static_cast<uint64_t>(network.link_count()));
  for (int32_t l = 0; l < network.link_count(); ++l) h.add(network.capacity(l));
  return h.value();
}

}  // namespace trainplan
