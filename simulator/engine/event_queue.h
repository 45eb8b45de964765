// Events ordered by (time, sequence number), as ns-3's EventKey: events at the
// same time run in the order they were scheduled (FIFO), so runs are
// deterministic.  O(log n) push and pop (std::priority_queue).
#ifndef TRAINPLAN_SIM_ENGINE_EVENT_QUEUE_H_
#define TRAINPLAN_SIM_ENGINE_EVENT_QUEUE_H_

#include <cstdint>
#include <queue>
#include <vector>

namespace trainplan {

struct Event {
  int64_t time_ps = 0;
  uint64_t seq = 0;
  int32_t task = 0;
  uint32_t version = 0;  // stale if the task's version moved on (lazy cancel)
  uint8_t kind = 0;
};

class EventQueue {
 public:
  void push(int64_t time_ps, int32_t task, uint32_t version, uint8_t kind) {
    heap_.push(Event{time_ps, next_seq_++, task, version, kind});
  }
  bool empty() const { return heap_.empty(); }
  Event pop() {
    Event e = heap_.top();
    heap_.pop();
    return e;
  }
  uint64_t scheduled() const { return next_seq_; }

 private:
  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.time_ps != b.time_ps ? a.time_ps > b.time_ps : a.seq > b.seq;
    }
  };
  std::priority_queue<Event, std::vector<Event>, Later> heap_;
  uint64_t next_seq_ = 0;
};

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_ENGINE_EVENT_QUEUE_H_
