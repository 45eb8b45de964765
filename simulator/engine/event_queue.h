// Events ordered by (time, sequence number), as ns-3's EventKey: events at the
// same time run in the order they were scheduled (FIFO), so runs are
// deterministic.
//
// A full-rank step schedules about one event per rank at a handful of
// distinct times (symmetric ranks finish identical tasks together), so the
// queue keeps one FIFO bucket per distinct time and a binary heap of the
// distinct times only: the heap stays small (and in cache) however many
// ranks there are, where a heap of every event grows with the cluster and
// each pop walks log2(events) cache lines (issue 15: 0.75 M events/s at
// 131,072 GPUs against 2 M at 1,024).  The order is exactly (time, seq):
// within a bucket events are appended in scheduling order, and a time's
// bucket is consumed before any later time's.  O(1) amortised push into an
// existing time (one hash lookup), O(log distinct times) for a new time.
// With few ranks most events have a time of their own, and a plain heap of
// events is cheaper: the engine picks (kBucketedFromRanks).
#ifndef TRAINPLAN_SIM_ENGINE_EVENT_QUEUE_H_
#define TRAINPLAN_SIM_ENGINE_EVENT_QUEUE_H_

#include <cstdint>
#include <functional>
#include <queue>
#include <unordered_map>
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
  // `bucketed`: one FIFO per distinct time (for many symmetric ranks);
  // otherwise a plain binary heap of events, cheaper when few events share a
  // time (a handful of simulated ranks).  Both give the same order.
  explicit EventQueue(bool bucketed = true) : bucketed_(bucketed) {}

  void push(int64_t time_ps, int32_t task, uint32_t version, uint8_t kind) {
    if (!bucketed_) {
      heap_.push(Event{time_ps, next_seq_++, task, version, kind});
      ++size_;
      return;
    }
    auto [it, fresh] = bucket_of_.try_emplace(time_ps, 0);
    if (fresh) {
      if (free_buckets_.empty()) {
        it->second = static_cast<int32_t>(buckets_.size());
        buckets_.emplace_back();
      } else {
        it->second = free_buckets_.back();
        free_buckets_.pop_back();
      }
      const int32_t c = new_chunk();
      buckets_[static_cast<size_t>(it->second)] = Bucket{c, c, 0};
      times_.push(time_ps);
    }
    Bucket& b = buckets_[static_cast<size_t>(it->second)];
    if (chunks_[static_cast<size_t>(b.tail)].count == kChunk) {
      const int32_t c = new_chunk();
      chunks_[static_cast<size_t>(b.tail)].next = c;
      b.tail = c;
    }
    Chunk& tail = chunks_[static_cast<size_t>(b.tail)];
    tail.events[tail.count++] = Event{time_ps, next_seq_++, task, version, kind};
    ++size_;
  }
  bool empty() const { return size_ == 0; }
  // The time of the event pop() returns next.  REQUIRES: !empty().
  int64_t next_time() const { return bucketed_ ? times_.top() : heap_.top().time_ps; }
  // REQUIRES: !empty().
  Event pop() {
    if (!bucketed_) {
      const Event e = heap_.top();
      heap_.pop();
      --size_;
      return e;
    }
    const int64_t t = times_.top();
    if (t != current_time_ || current_ < 0) {
      current_time_ = t;
      current_ = bucket_of_.find(t)->second;
    }
    Bucket& b = buckets_[static_cast<size_t>(current_)];
    Chunk* head = &chunks_[static_cast<size_t>(b.head)];
    if (b.read == kChunk) {  // the head chunk is spent: on to the next
      const int32_t next = head->next;
      free_chunk(b.head);
      b.head = next;
      b.read = 0;
      head = &chunks_[static_cast<size_t>(b.head)];
    }
    const Event e = head->events[b.read++];
    --size_;
    if (b.head == b.tail && b.read == head->count) {
      // Exhausted: a later push at this time opens a new bucket, which
      // still runs after everything scheduled here before it.
      free_chunk(b.head);
      free_buckets_.push_back(current_);
      bucket_of_.erase(t);
      times_.pop();
      current_ = -1;
    }
    return e;
  }
  uint64_t scheduled() const { return next_seq_; }

 private:
  // A bucket is a list of fixed-size chunks from one pool, so a time with a
  // hundred thousand events grows without reallocating (and faulting in)
  // ever larger arrays.
  static constexpr int kChunk = 64;
  struct Chunk {
    Event events[kChunk];
    int32_t count = 0;
    int32_t next = -1;
  };
  struct Bucket {
    int32_t head = -1, tail = -1;
    int32_t read = 0;  // next event in the head chunk
  };
  int32_t new_chunk() {
    if (free_chunks_.empty()) {
      chunks_.emplace_back();
      return static_cast<int32_t>(chunks_.size() - 1);
    }
    const int32_t c = free_chunks_.back();
    free_chunks_.pop_back();
    chunks_[static_cast<size_t>(c)].count = 0;
    chunks_[static_cast<size_t>(c)].next = -1;
    return c;
  }
  void free_chunk(int32_t c) { free_chunks_.push_back(c); }

  struct Later {
    bool operator()(const Event& a, const Event& b) const {
      return a.time_ps != b.time_ps ? a.time_ps > b.time_ps : a.seq > b.seq;
    }
  };
  bool bucketed_ = true;
  std::priority_queue<Event, std::vector<Event>, Later> heap_;  // !bucketed_
  std::priority_queue<int64_t, std::vector<int64_t>, std::greater<int64_t>> times_;  // distinct, pending
  std::unordered_map<int64_t, int32_t> bucket_of_;  // pending time -> bucket
  std::vector<Bucket> buckets_;
  std::vector<int32_t> free_buckets_;
  std::vector<Chunk> chunks_;
  std::vector<int32_t> free_chunks_;
  int64_t current_time_ = 0;
  int32_t current_ = -1;  // bucket of current_time_ (cached between pops)
  size_t size_ = 0;
  uint64_t next_seq_ = 0;
};

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_ENGINE_EVENT_QUEUE_H_
