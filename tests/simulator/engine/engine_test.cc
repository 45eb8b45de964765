// Tests of the discrete-event engine on hand-built task graphs, each against a
// closed-form timeline derived in its comment.  Times are integer
// picoseconds; a tolerance is stated where the engine rounds a double.
#include "simulator/engine/engine.h"

#include <cstdint>
#include <cstdlib>
#include <vector>

#include <catch2/catch.hpp>

namespace trainplan {
namespace {

// A graph with `ranks` simulated ranks, set up as lowering does.
TaskGraph graph_with_ranks(int32_t ranks) {
  TaskGraph g;
  g.ranks = ranks;
  g.program.assign(static_cast<size_t>(ranks), {});
  return g;
}

int32_t compute(TaskGraph& g, int32_t rank, int64_t work_ps) {
  return g.add_compute(rank, work_ps, Category::kCompute, TaskLabel::kForward);
}

int32_t comm(TaskGraph& g, int32_t channel, int64_t latency_ps, double bytes, double max_rate,
             std::vector<int32_t> members = {}, std::vector<FlowLink> links = {}) {
  return g.add_comm(channel, latency_ps, bytes, max_rate, Category::kDpComm, TaskLabel::kDpAllReduce, members, links);
}

EngineResult run(const TaskGraph& g, FlowNetwork& net, EngineOptions opt = {}) { return run_engine(g, net, opt); }

int64_t start_of(const EngineResult& r, int32_t t) { return r.times[static_cast<size_t>(t)].start_ps; }
int64_t end_of(const EngineResult& r, int32_t t) { return r.times[static_cast<size_t>(t)].end_ps; }

TEST_CASE("Engine: a chain's makespan is the sum of its tasks", "[sim][engine]") {
  SECTION("on one rank") {
    TaskGraph g = graph_with_ranks(1);
    const int32_t a = compute(g, 0, 100), b = compute(g, 0, 250), c = compute(g, 0, 650);
    g.add_dep(a, b);
    g.add_dep(b, c);
    g.finalize();
    FlowNetwork net;
    const EngineResult r = run(g, net);
    CHECK(r.makespan_ps == 100 + 250 + 650);
    CHECK(start_of(r, b) == 100);
    CHECK(start_of(r, c) == 350);
    CHECK(r.last_pred[static_cast<size_t>(c)] == b);
    CHECK(r.last_pred[static_cast<size_t>(a)] == -1);
  }
  SECTION("across ranks: r0 -> r1 -> r0") {
    TaskGraph g = graph_with_ranks(2);
    const int32_t a = compute(g, 0, 1000), b = compute(g, 1, 3000), c = compute(g, 0, 500);
    g.add_dep(a, b);
    g.add_dep(b, c);
    g.finalize();
    FlowNetwork net;
    const EngineResult r = run(g, net);
    CHECK(r.makespan_ps == 4500);
    CHECK(start_of(r, c) == 4000);
    CHECK(r.rank_end_ps == std::vector<int64_t>{4500, 4000});
  }
}

TEST_CASE("Engine: independent ranks run in parallel", "[sim][engine]") {
  // makespan = max(1000, 700), both start at 0.
  TaskGraph g = graph_with_ranks(2);
  const int32_t a = compute(g, 0, 1000), b = compute(g, 1, 700);
  g.finalize();
  FlowNetwork net;
  const EngineResult r = run(g, net);
  CHECK(r.makespan_ps == 1000);
  CHECK(start_of(r, a) == 0);
  CHECK(start_of(r, b) == 0);
  CHECK(end_of(r, b) == 700);
}

TEST_CASE("Engine: program order is respected even where dependencies allow otherwise", "[sim][engine]") {
  // Rank 0 runs [T0 (500), T1 (100)]; T0 waits for T2 (300) on rank 1, T1 has
  // no dependencies.  Program order keeps T1 behind T0: T0 in [300, 800),
  // T1 in [800, 900).
  TaskGraph g = graph_with_ranks(2);
  const int32_t t0 = compute(g, 0, 500), t1 = compute(g, 0, 100), t2 = compute(g, 1, 300);
  g.add_dep(t2, t0);
  g.finalize();
  FlowNetwork net;
  const EngineResult r = run(g, net);
  CHECK(start_of(r, t0) == 300);
  CHECK(start_of(r, t1) == 800);
  CHECK(r.makespan_ps == 900);
}

TEST_CASE("Engine: a comm task takes its latency plus bytes over its rate", "[sim][engine]") {
  // L = 5 us, B = 1e6 bytes, cap R = 3e9 B/s on a link of 1e12 B/s (the cap
  // binds): L + ceil(B / R in ps) = 5e6 + ceil(1e18 / 3e9) = 5e6 + 333333334.
  const int64_t latency = 5'000'000;
  const int64_t bytes = 1'000'000, rate = 3'000'000'000;
  const int64_t transfer = (bytes * 1'000'000'000'000 + rate - 1) / rate;
  REQUIRE(transfer == 333'333'334);
  SECTION("the cap binds") {
    TaskGraph g = graph_with_ranks(1);
    const int32_t ch = g.add_channel();
    FlowNetwork net;
    const int32_t l = net.add_link(1e12);
    const int32_t c = comm(g, ch, latency, static_cast<double>(bytes), static_cast<double>(rate), {0}, {{l, 1.0f}});
    g.finalize();
    const EngineResult r = run(g, net);
    CHECK(start_of(r, c) == 0);
    CHECK(end_of(r, c) == latency + transfer);
    CHECK(r.makespan_ps == latency + transfer);
  }
  SECTION("the link binds: 2^20 bytes on a 2^30 B/s link = 2^-10 s = 976562500 ps exactly") {
    TaskGraph g = graph_with_ranks(1);
    const int32_t ch = g.add_channel();
    FlowNetwork net;
    const int32_t l = net.add_link(1073741824.0);
    const int32_t c = comm(g, ch, latency, 1048576.0, 1e15, {0}, {{l, 1.0f}});
    g.finalize();
    const EngineResult r = run(g, net);
    CHECK(end_of(r, c) == latency + 976'562'500);
  }
  SECTION("zero bytes: the latency alone") {
    TaskGraph g = graph_with_ranks(1);
    const int32_t ch = g.add_channel();
    const int32_t c = comm(g, ch, latency, 0.0, 0.0);
    g.finalize();
    FlowNetwork net;
    const EngineResult r = run(g, net);
    CHECK(end_of(r, c) == latency);
  }
  SECTION("tasks on one channel run FIFO, one after the other") {
    TaskGraph g = graph_with_ranks(1);
    const int32_t ch = g.add_channel();
    const int32_t a = comm(g, ch, 1000, 0.0, 0.0), b = comm(g, ch, 2000, 0.0, 0.0);
    g.finalize();
    FlowNetwork net;
    const EngineResult r = run(g, net);
    CHECK(end_of(r, a) == 1000);
    CHECK(start_of(r, b) == 1000);
    CHECK(end_of(r, b) == 3000);
  }
}

TEST_CASE("Engine: concurrent comm tasks sharing a link take twice as long", "[sim][engine]") {
  // 2^20 bytes each on a 2^30 B/s link, no latency.  Alone: T = 2^-10 s =
  // 976562500 ps.  Two at once, each at 2^29 B/s: 2T = 1953125000 ps (powers
  // of two: no rounding).
  const double bytes = 1048576.0, link = 1073741824.0;
  const int64_t T = 976'562'500;
  SECTION("started together: both end at 2T") {
    TaskGraph g = graph_with_ranks(2);
    const int32_t c0 = g.add_channel(), c1 = g.add_channel();
    FlowNetwork net;
    const int32_t l = net.add_link(link);
    const int32_t a = comm(g, c0, 0, bytes, 1e15, {0}, {{l, 1.0f}});
    const int32_t b = comm(g, c1, 0, bytes, 1e15, {1}, {{l, 1.0f}});
    g.finalize();
    const EngineResult r = run(g, net);
    CHECK(end_of(r, a) == 2 * T);
    CHECK(end_of(r, b) == 2 * T);
  }
  SECTION("on separate links they do not interfere: both end at T") {
    TaskGraph g = graph_with_ranks(2);
    const int32_t c0 = g.add_channel(), c1 = g.add_channel();
    FlowNetwork net;
    const int32_t l0 = net.add_link(link), l1 = net.add_link(link);
    const int32_t a = comm(g, c0, 0, bytes, 1e15, {0}, {{l0, 1.0f}});
    const int32_t b = comm(g, c1, 0, bytes, 1e15, {1}, {{l1, 1.0f}});
    g.finalize();
    const EngineResult r = run(g, net);
    CHECK(end_of(r, a) == T);
    CHECK(end_of(r, b) == T);
  }
  SECTION("B starts at T/2: A ends at 1.5T, B at 2T") {
    // A alone moves half its bytes by T/2, then both run at half rate: A's
    // other half takes T (ends 1.5T), by which B has moved half; B alone then
    // needs T/2 more (ends 2T).  The engine converts bytes <-> ps in doubles:
    // +-2 ps.
    TaskGraph g = graph_with_ranks(2);
    const int32_t c0 = g.add_channel(), c1 = g.add_channel();
    FlowNetwork net;
    const int32_t l = net.add_link(link);
    const int32_t delay = compute(g, 1, T / 2);
    const int32_t a = comm(g, c0, 0, bytes, 1e15, {0}, {{l, 1.0f}});
    const int32_t b = comm(g, c1, 0, bytes, 1e15, {1}, {{l, 1.0f}});
    g.add_dep(delay, b);
    g.finalize();
    const EngineResult r = run(g, net);
    CHECK(start_of(r, b) == T / 2);
    CHECK(std::llabs(end_of(r, a) - 3 * T / 2) <= 2);
    CHECK(std::llabs(end_of(r, b) - 2 * T) <= 2);
  }
}

TEST_CASE("Engine: comm_slowdown stretches compute by (1 + k) while a member's comm runs", "[sim][engine]") {
  // k = 0.25.  Work done during an overlap of length D is D / (1 + k); the
  // rest runs at full speed.  llround of the rescheduled end: +-1 ps.
  EngineOptions opt;
  opt.comm_slowdown = 0.25;
  SECTION("compute W = 1e6 ps, comm [0, 4e5): end = 4e5 + (1e6 - 4e5/1.25) = 1080000") {
    TaskGraph g = graph_with_ranks(1);
    const int32_t ch = g.add_channel();
    const int32_t c = compute(g, 0, 1'000'000);
    comm(g, ch, 400'000, 0.0, 0.0, {0});
    g.finalize();
    FlowNetwork net;
    const EngineResult r = run(g, net, opt);
    CHECK(std::llabs(end_of(r, c) - 1'080'000) <= 1);
  }
  SECTION("compute entirely inside the comm: W (1 + k) = 1.25e6") {
    TaskGraph g = graph_with_ranks(1);
    const int32_t ch = g.add_channel();
    const int32_t c = compute(g, 0, 1'000'000);
    comm(g, ch, 10'000'000, 0.0, 0.0, {0});
    g.finalize();
    FlowNetwork net;
    const EngineResult r = run(g, net, opt);
    CHECK(std::llabs(end_of(r, c) - 1'250'000) <= 1);
  }
  SECTION("comm starts mid-task: [0, 2e5) full speed, [2e5, 6e5) at 1/1.25, then full speed") {
    // Work: 2e5 + 4e5 / 1.25 = 5.2e5 by 6e5; 4.8e5 left: end = 1.08e6.
    TaskGraph g = graph_with_ranks(2);
    const int32_t ch = g.add_channel();
    const int32_t c = compute(g, 0, 1'000'000);
    const int32_t delay = compute(g, 1, 200'000);
    const int32_t m = comm(g, ch, 400'000, 0.0, 0.0, {0});
    g.add_dep(delay, m);
    g.finalize();
    FlowNetwork net;
    const EngineResult r = run(g, net, opt);
    CHECK(start_of(r, m) == 200'000);
    CHECK(std::llabs(end_of(r, c) - 1'080'000) <= 1);
  }
  SECTION("compute starting while the comm runs: [1e5, 1e6) slowed, then full speed") {
    // Starts at 1e5 (after rank 1's task); by 1e6 it has done 9e5 / 1.25 =
    // 7.2e5 of its 1e6; 2.8e5 left: end = 1.28e6.
    TaskGraph g = graph_with_ranks(2);
    const int32_t ch = g.add_channel();
    const int32_t delay = compute(g, 1, 100'000);
    const int32_t c = compute(g, 0, 1'000'000);
    g.add_dep(delay, c);
    comm(g, ch, 1'000'000, 0.0, 0.0, {0});
    g.finalize();
    FlowNetwork net;
    const EngineResult r = run(g, net, opt);
    CHECK(start_of(r, c) == 100'000);
    CHECK(std::llabs(end_of(r, c) - 1'280'000) <= 1);
  }
  SECTION("a comm task of another rank does not slow this one") {
    TaskGraph g = graph_with_ranks(2);
    const int32_t ch = g.add_channel();
    const int32_t c = compute(g, 0, 1'000'000);
    comm(g, ch, 10'000'000, 0.0, 0.0, {1});
    g.finalize();
    FlowNetwork net;
    const EngineResult r = run(g, net, opt);
    CHECK(end_of(r, c) == 1'000'000);
  }
}

TEST_CASE("Engine: memory peak is static + live allocations, freed at task end", "[sim][engine]") {
  EngineOptions opt;
  opt.static_bytes = {1000, 50};
  SECTION("forward keeps 500, backward adds 200 transient then frees 700: peak 1000 + 500 + 200") {
    TaskGraph g = graph_with_ranks(2);
    const int32_t f = compute(g, 0, 10), b = compute(g, 0, 10);
    g.task(f).mem_alloc = 500;
    g.task(b).mem_alloc = 200;
    g.task(b).mem_free = 700;
    // A third task allocating 300 after the free: 1000 + 300 < 1700.
    const int32_t f2 = compute(g, 0, 10);
    g.task(f2).mem_alloc = 300;
    g.task(f2).mem_free = 300;
    g.finalize();
    FlowNetwork net;
    const EngineResult r = run(g, net, opt);
    CHECK(r.peak_bytes == std::vector<int64_t>{1700, 50});
  }
  SECTION("allocations freed at each end do not accumulate: peak 1000 + max(300, 400)") {
    TaskGraph g = graph_with_ranks(2);
    const int32_t a = compute(g, 0, 10), b = compute(g, 0, 10);
    g.task(a).mem_alloc = g.task(a).mem_free = 300;
    g.task(b).mem_alloc = g.task(b).mem_free = 400;
    g.finalize();
    FlowNetwork net;
    const EngineResult r = run(g, net, opt);
    CHECK(r.peak_bytes[0] == 1400);
  }
}

TEST_CASE("Engine: an arrival-order channel serves tasks in the order they become ready", "[sim][engine]") {
  // X (created first) waits for 2000 ps of compute on rank 0, Y for 1000 ps on
  // rank 1; each comm takes 5000 ps.
  //   arrival order: Y [1000, 6000), X [6000, 11000).
  //   creation (FIFO) order: X [2000, 7000), Y [7000, 12000).
  for (bool arrival : {true, false}) {
    DYNAMIC_SECTION((arrival ? "arrival" : "ordered") << " channel") {
      TaskGraph g = graph_with_ranks(2);
      const int32_t ch = g.add_channel(arrival);
      const int32_t cx = compute(g, 0, 2000), cy = compute(g, 1, 1000);
      const int32_t x = comm(g, ch, 5000, 0.0, 0.0), y = comm(g, ch, 5000, 0.0, 0.0);
      g.add_dep(cx, x);
      g.add_dep(cy, y);
      g.finalize();
      FlowNetwork net;
      const EngineResult r = run(g, net);
      if (arrival) {
        CHECK(start_of(r, y) == 1000);
        CHECK(start_of(r, x) == 6000);
        CHECK(r.makespan_ps == 11000);
      } else {
        CHECK(start_of(r, x) == 2000);
        CHECK(start_of(r, y) == 7000);
        CHECK(r.makespan_ps == 12000);
      }
    }
  }
}

// A graph with flows, slowdown, several channels and ranks.
TaskGraph mixed_graph(FlowNetwork& net) {
  TaskGraph g = graph_with_ranks(3);
  const int32_t l0 = net.add_link(3e9), l1 = net.add_link(7e9);
  const int32_t ch0 = g.add_channel(), ch1 = g.add_channel(true), ch2 = g.add_channel();
  std::vector<int32_t> prev(3, -1);
  for (int step = 0; step < 6; ++step) {
    for (int32_t r = 0; r < 3; ++r) {
      const int32_t c = compute(g, r, 1'000'003 * (r + 1) + 7919 * step);
      if (prev[static_cast<size_t>(r)] >= 0) g.add_dep(prev[static_cast<size_t>(r)], c);
      const int32_t ch = r == 0 ? ch0 : r == 1 ? ch1 : ch2;
      const int32_t m = comm(g, ch, 1234 * (step + 1), 1e3 * (17 + step * r), 5e9, {r, (r + 1) % 3},
                             {{l0, 1.0f}, {r == 2 ? l1 : l0, 0.5f}});
      g.add_dep(c, m);
      prev[static_cast<size_t>(r)] = m;
    }
  }
  g.finalize();
  return g;
}

TEST_CASE("Engine: the same graph twice gives identical times", "[sim][engine]") {
  EngineOptions opt;
  opt.comm_slowdown = 0.37;
  opt.static_bytes = {1, 2, 3};
  FlowNetwork n1, n2;
  const TaskGraph g1 = mixed_graph(n1), g2 = mixed_graph(n2);
  const EngineResult a = run_engine(g1, n1, opt), b = run_engine(g2, n2, opt);
  REQUIRE(a.times.size() == b.times.size());
  for (size_t i = 0; i < a.times.size(); ++i) {
    INFO("task " << i);
    CHECK(a.times[i].start_ps == b.times[i].start_ps);
    CHECK(a.times[i].end_ps == b.times[i].end_ps);
  }
  CHECK(a.makespan_ps == b.makespan_ps);
  CHECK(a.events == b.events);
  CHECK(a.last_pred == b.last_pred);
  CHECK(a.rank_end_ps == b.rank_end_ps);
}

}  // namespace
}  // namespace trainplan

namespace trainplan {

TEST_CASE("Engine: the critical path bounds the makespan, and contention is what it leaves out", "[sim][engine]") {
  // Rank 0 runs A (10 us) then B (5 us); C, a transfer of 2 kB at a cap of
  // 1 GB/s (2 us) after 3 us of latency, waits for A; D (4 us) on rank 1
  // waits for C; E, a second 2 kB transfer on another channel, waits for A
  // too.  Uncontended, C and E run 10..15 us, D 15..19 us: the critical path
  // A -> C -> D is 19 us, and the engine's makespan equals it on links that
  // carry both at their caps.  On one shared link of 1 GB/s the two
  // transfers split it (0.5 GB/s each: 4 us of bytes, C ends at 17 us, D at
  // 21 us): the engine's makespan grows, the bound does not.
  auto build = [](TaskGraph& g, FlowNetwork& net, double link_bytes_per_s, int64_t d_work_ps) {
    const int32_t link = net.add_link(link_bytes_per_s);
    const int32_t ch1 = g.add_channel(), ch2 = g.add_channel();
    const int32_t a = compute(g, 0, 10'000'000), b = compute(g, 0, 5'000'000);
    const int32_t c = comm(g, ch1, 3'000'000, 2e3, 1e9, {0}, {FlowLink{link, 1.0f}});
    const int32_t e = comm(g, ch2, 3'000'000, 2e3, 1e9, {0}, {FlowLink{link, 1.0f}});
    const int32_t d = compute(g, 1, d_work_ps);
    g.add_dep(a, b);
    g.add_dep(a, c);
    g.add_dep(a, e);
    g.add_dep(c, d);
    g.finalize();
  };
  TaskGraph fast = graph_with_ranks(2), shared = graph_with_ranks(2), other = graph_with_ranks(2);
  FlowNetwork fast_net, shared_net, other_net;
  build(fast, fast_net, 1e12, 4'000'000);
  build(shared, shared_net, 1e9, 4'000'000);
  build(other, other_net, 1e12, 4'000'001);
  CHECK(critical_path_lower_bound_ps(fast) == 19'000'000);
  CHECK(run(fast, fast_net).makespan_ps == 19'000'000);
  CHECK(critical_path_lower_bound_ps(shared) == 19'000'000);
  CHECK(run(shared, shared_net).makespan_ps == 21'000'000);
  // The fingerprint: the same graph and network hash alike; a link's
  // capacity or one task's work tells them apart.
  TaskGraph again = graph_with_ranks(2);
  FlowNetwork again_net;
  build(again, again_net, 1e12, 4'000'000);
  CHECK(fingerprint(again, again_net) == fingerprint(fast, fast_net));
  CHECK(fingerprint(shared, shared_net) != fingerprint(fast, fast_net));
  CHECK(fingerprint(other, other_net) != fingerprint(fast, fast_net));
}

}  // namespace trainplan
