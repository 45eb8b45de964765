#include "simulator/engine/engine.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "simulator/core/error.h"
#include "simulator/engine/event_queue.h"

namespace trainplan {

namespace {

enum EventKind : uint8_t { kComputeDone = 0, kLatencyDone = 1, kFlowDone = 2 };

class Engine {
 public:
  // From this many simulated ranks on, events are queued per distinct time
  // (event_queue.h); a representative step (one rank per stage) keeps the
  // plain heap.  Measured (docs/performance.md): 16 ranks are ~8% faster on
  // the heap, 1,024 ranks 2x faster bucketed.
  static constexpr int32_t kBucketedFromRanks = 256;

  Engine(const TaskGraph& g, FlowNetwork& net, const EngineOptions& opt)
      : g_(g), net_(net), opt_(opt), q_(g.ranks >= kBucketedFromRanks) {
    const size_t n = static_cast<size_t>(g.size());
    node_.resize(n);
    version_.assign(n, 0);
    done_.assign(n, 0);
    result_.times.assign(n, TaskTime{});
    result_.last_pred.assign(n, -1);
    for (int32_t i = 0; i < g.size(); ++i) {
      const Task& t = g.task(i);
      node_[static_cast<size_t>(i)] = Node{t.preds, t.type == TaskType::kCompute ? t.rank : -1 - t.channel};
    }
    const size_t r = static_cast<size_t>(g.ranks);
    cursor_.assign(r, 0);
    running_.assign(r, -1);
    comm_active_.assign(r, 0);
    remaining_work_.assign(r, 0);
    last_update_.assign(r, 0);
    speed_.assign(r, 1.0);
    mem_.assign(r, 0);
    result_.peak_bytes.assign(r, 0);
    result_.rank_end_ps.assign(r, 0);
    for (size_t i = 0; i < r && i < opt.static_bytes.size(); ++i) mem_[i] = result_.peak_bytes[i] = opt.static_bytes[i];
    chan_cursor_.assign(static_cast<size_t>(g.channels), 0);
    chan_busy_.assign(static_cast<size_t>(g.channels), 0);
    arrivals_.assign(static_cast<size_t>(g.channels), {});
    arrival_head_.assign(static_cast<size_t>(g.channels), 0);
    for (int32_t i = 0; i < g.size(); ++i) {
      const Task& t = g.task(i);
      if (t.type == TaskType::kComm && t.preds == 0 && g.channel_arrival[static_cast<size_t>(t.channel)]) {
        arrivals_[static_cast<size_t>(t.channel)].push_back(i);
      }
    }
    const size_t c = static_cast<size_t>(g.comm_count());
    net_.reserve_flows(c);
    // Flow starts and ends of one instant are applied together (run()).
    net_.defer_updates(true);
    comm_task_.assign(c, -1);
    flow_bytes_.assign(c, 0);
    flow_rate_.assign(c, 0);
    flow_last_.assign(c, 0);
    for (int32_t i = 0; i < g.size(); ++i) {
      if (g.task(i).type == TaskType::kComm) comm_task_[static_cast<size_t>(g.task(i).comm_index)] = i;
    }
  }

  EngineResult run() {
    for (int32_t r = 0; r < g_.ranks; ++r) try_start_rank(r);
    for (int32_t c = 0; c < g_.channels; ++c) try_start_channel(c);
    while (true) {
      // Before time moves on, the rates after every flow start and end of
      // this instant, and the new ends of the flows whose rate changed.
      if (net_.pending() && (q_.empty() || q_.next_time() > now_)) {
        net_.update();
        reschedule_flows();
      }
      if (q_.empty()) break;
      Event e = q_.pop();
      if (e.version != version_[static_cast<size_t>(e.task)]) continue;
      now_ = e.time_ps;
      ++result_.events;
      switch (e.kind) {
        case kComputeDone: finish_compute(e.task); break;
        case kLatencyDone: start_flow(e.task); break;
        case kFlowDone: finish_comm(e.task); break;
        default: break;
      }
    }
    check_all_done();
    net_.defer_updates(false);
    result_.makespan_ps = now_;
    return std::move(result_);
  }

 private:
  void schedule(int32_t task, int64_t at, uint8_t kind) {
    uint32_t v = ++version_[static_cast<size_t>(task)];
    q_.push(at, task, v, kind);
  }

  void try_start_rank(int32_t r) {
    const size_t ri = static_cast<size_t>(r);
    if (running_[ri] >= 0) return;
    const auto& prog = g_.program[ri];
    if (cursor_[ri] >= prog.size()) return;
    int32_t t = prog[cursor_[ri]];
    if (node_[static_cast<size_t>(t)].deps > 0) return;
    const Task& task = g_.task(t);
    running_[ri] = t;
    result_.times[static_cast<size_t>(t)].start_ps = now_;
    double scale = opt_.work_scale.empty() ? 1.0 : opt_.work_scale[static_cast<size_t>(t)];
    remaining_work_[ri] = static_cast<double>(task.work_ps) * scale;
    last_update_[ri] = now_;
    mem_[ri] += task.mem_alloc;
    result_.peak_bytes[ri] = std::max(result_.peak_bytes[ri], mem_[ri]);
    schedule(t, now_ + static_cast<int64_t>(std::llround(remaining_work_[ri] / speed_[ri])), kComputeDone);
  }

  void set_comm_active(int32_t r, int delta) {
    const size_t ri = static_cast<size_t>(r);
    int before = comm_active_[ri];
    comm_active_[ri] += delta;
    bool was = before > 0, is = comm_active_[ri] > 0;
    if (was == is) return;
    double new_speed = is ? 1.0 / (1.0 + opt_.comm_slowdown) : 1.0;
    int32_t t = running_[ri];
    if (t >= 0 && new_speed != speed_[ri]) {
      remaining_work_[ri] -= static_cast<double>(now_ - last_update_[ri]) * speed_[ri];
      remaining_work_[ri] = std::max(0.0, remaining_work_[ri]);
      last_update_[ri] = now_;
      schedule(t, now_ + static_cast<int64_t>(std::llround(remaining_work_[ri] / new_speed)), kComputeDone);
    }
    speed_[ri] = new_speed;
  }

  void try_start_channel(int32_t c) {
    const size_t ci = static_cast<size_t>(c);
    if (chan_busy_[ci]) return;
    int32_t t = -1;
    if (g_.channel_arrival[ci]) {
      auto& q = arrivals_[ci];
      size_t& head = arrival_head_[ci];
      if (head >= q.size()) return;
      t = q[head++];
    } else {
      const auto& order = g_.channel_order[ci];
      if (chan_cursor_[ci] >= order.size()) return;
      t = order[chan_cursor_[ci]];
      if (node_[static_cast<size_t>(t)].deps > 0) return;
    }
    chan_busy_[ci] = 1;
    const Task& task = g_.task(t);
    result_.times[static_cast<size_t>(t)].start_ps = now_;
    const int32_t* m = g_.members(task);
    for (uint32_t i = 0; i < task.member_count; ++i) set_comm_active(m[i], +1);
    schedule(t, now_ + task.work_ps, kLatencyDone);
  }

  void reschedule_flows() {
    for (int32_t fid : net_.changed()) {
      const size_t f = static_cast<size_t>(fid);
      // A flow of the component whose rate did not change keeps its
      // scheduled end (its bytes left are still those at its last change).
      if (net_.active(fid) && net_.rate(fid) == flow_rate_[f]) continue;
      flow_bytes_[f] -= flow_rate_[f] * static_cast<double>(now_ - flow_last_[f]) * 1e-12;
      flow_bytes_[f] = std::max(0.0, flow_bytes_[f]);
      flow_last_[f] = now_;
      if (!net_.active(fid)) continue;
      flow_rate_[f] = net_.rate(fid);
      TRAINPLAN_CHECK(flow_rate_[f] > 0, "flow with zero rate");
      int64_t dt = static_cast<int64_t>(std::ceil(flow_bytes_[f] / flow_rate_[f] * 1e12));
      schedule(comm_task_[f], now_ + dt, kFlowDone);
    }
  }

  void start_flow(int32_t t) {
    const Task& task = g_.task(t);
    if (task.wire_bytes <= 0) {
      finish_comm(t);
      return;
    }
    const size_t f = static_cast<size_t>(task.comm_index);
    flow_bytes_[f] = task.wire_bytes;
    flow_rate_[f] = 0;
    flow_last_[f] = now_;
    net_.start(task.comm_index, task.max_rate, g_.links(task), static_cast<int>(task.link_count));
  }

  void finish_comm(int32_t t) {
    const Task& task = g_.task(t);
    if (task.wire_bytes > 0 && net_.active(task.comm_index)) net_.stop(task.comm_index);
    result_.times[static_cast<size_t>(t)].end_ps = now_;
    const int32_t* m = g_.members(task);
    for (uint32_t i = 0; i < task.member_count; ++i) set_comm_active(m[i], -1);
    const size_t ci = static_cast<size_t>(task.channel);
    chan_busy_[ci] = 0;
    chan_cursor_[ci] += 1;
    complete(t);
    try_start_channel(task.channel);
  }

  void finish_compute(int32_t t) {
    const Task& task = g_.task(t);
    const size_t ri = static_cast<size_t>(task.rank);
    result_.times[static_cast<size_t>(t)].end_ps = now_;
    result_.rank_end_ps[ri] = now_;
    mem_[ri] -= task.mem_free;
    running_[ri] = -1;
    cursor_[ri] += 1;
    complete(t);
    try_start_rank(task.rank);
  }

  void complete(int32_t t) {
    done_[static_cast<size_t>(t)] = 1;
    const Task& task = g_.task(t);
    const uint32_t* s = g_.successors(task);
    for (uint32_t i = 0; i < task.succ_count; ++i) {
      int32_t n = static_cast<int32_t>(s[i]);
      result_.last_pred[static_cast<size_t>(n)] = t;
      Node& node = node_[static_cast<size_t>(n)];
      if (--node.deps == 0) {
        if (node.target >= 0) {
          try_start_rank(node.target);
        } else {
          const int32_t channel = -1 - node.target;
          if (g_.channel_arrival[static_cast<size_t>(channel)]) arrivals_[static_cast<size_t>(channel)].push_back(n);
          try_start_channel(channel);
        }
      }
    }
  }

  void check_all_done() {
    std::string stuck;
    int shown = 0;
    for (int32_t i = 0; i < g_.size() && shown < 4; ++i) {
      if (done_[static_cast<size_t>(i)]) continue;
      const Task& t = g_.task(i);
      stuck += " task " + std::to_string(i) + " (" + to_string(t.label) + ", rank " + std::to_string(t.rank) +
               ", channel " + std::to_string(t.channel) + ", mb " + std::to_string(t.microbatch) + ", waiting on " +
               std::to_string(node_[static_cast<size_t>(i)].deps) + " deps);";
      ++shown;
    }
    TRAINPLAN_CHECK(stuck.empty(), "task graph deadlocked:" + stuck);
  }

  const TaskGraph& g_;
  FlowNetwork& net_;
  const EngineOptions& opt_;
  EventQueue q_;
  int64_t now_ = 0;
  // Per task, what complete() needs of a successor, packed (8 bytes, not
  // the 128-byte Task: the successors of a task are scattered over the
  // graph, and this is the engine's most frequent random access): the
  // dependencies left, and the rank (compute, >= 0) or -1 - channel (comm).
  struct Node {
    int32_t deps;
    int32_t target;
  };
  std::vector<Node> node_;
  std::vector<uint32_t> version_;
  std::vector<uint8_t> done_;
  std::vector<size_t> cursor_;
  std::vector<int32_t> running_;
  std::vector<int> comm_active_;
  std::vector<double> remaining_work_;
  std::vector<int64_t> last_update_;
  std::vector<double> speed_;
  std::vector<int64_t> mem_;
  std::vector<size_t> chan_cursor_;
  std::vector<uint8_t> chan_busy_;
  // Per arrival channel, its ready tasks in arrival order and the next to
  // serve (a vector and a cursor: an empty one allocates nothing, where a
  // std::deque allocates a block per channel).
  std::vector<std::vector<int32_t>> arrivals_;
  std::vector<size_t> arrival_head_;
  std::vector<int32_t> comm_task_;
  std::vector<double> flow_bytes_;
  std::vector<double> flow_rate_;
  std::vector<int64_t> flow_last_;
  EngineResult result_;
};

}  // namespace

EngineResult run_engine(const TaskGraph& graph, FlowNetwork& network, const EngineOptions& options) {
  Engine e(graph, network, options);
  return e.run();
}

}  // namespace trainplan
