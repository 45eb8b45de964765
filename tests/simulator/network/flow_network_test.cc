// Tests of max-min fair sharing in FlowNetwork against hand-derived
// progressive-filling solutions (Bertsekas & Gallager, Data Networks,
// sec. 6.5.2) and, on random instances, against the bottleneck
// characterisation of max-min fairness: a feasible allocation is max-min fair
// iff every flow is at its cap or crosses a saturated link on which no other
// flow has a higher rate (B&G Prop. 6.5.1).  Rates are doubles in bytes/s;
// tolerances are relative 1e-9 (the solver freezes at 1e-12 of capacity).
#include "simulator/network/flow_network.h"

#include <algorithm>
#include <cstdint>
#include <deque>
#include <random>
#include <vector>

#include <catch2/catch.hpp>

namespace trainplan {
namespace {

using Catch::Matchers::WithinRel;

constexpr double kUnlimited = 1e30;  // a cap that never binds
constexpr double kRel = 1e-9;

// The network keeps a view of a flow's links until the flow stops: the
// helper keeps every list it was given alive for the whole test program.
void start(FlowNetwork& net, int32_t id, double cap, std::vector<FlowLink> links) {
  static std::deque<std::vector<FlowLink>> kept;
  kept.push_back(std::move(links));
  net.start(id, cap, kept.back().data(), static_cast<int>(kept.back().size()));
}

std::vector<int32_t> changed(const FlowNetwork& net) { return net.changed(); }

TEST_CASE("FlowNetwork: one flow alone gets min(cap, link)", "[sim][network][flow]") {
  FlowNetwork net;
  const int32_t l = net.add_link(100.0);
  SECTION("the link limits: min(1e30, 100) = 100") {
    start(net, 0, kUnlimited, {{l, 1.0f}});
    CHECK_THAT(net.rate(0), WithinRel(100.0, kRel));
  }
  SECTION("the cap limits: min(30, 100) = 30") {
    start(net, 0, 30.0, {{l, 1.0f}});
    CHECK_THAT(net.rate(0), WithinRel(30.0, kRel));
  }
  SECTION("no links: the cap alone") {
    start(net, 0, 7.0, {});
    CHECK_THAT(net.rate(0), WithinRel(7.0, kRel));
  }
  SECTION("weight 0.5 puts half the rate on the link: r = 100 / 0.5 = 200") {
    start(net, 0, kUnlimited, {{l, 0.5f}});
    CHECK_THAT(net.rate(0), WithinRel(200.0, kRel));
  }
}

TEST_CASE("FlowNetwork: two flows on one link split it equally", "[sim][network][flow]") {
  FlowNetwork net;
  const int32_t l = net.add_link(100.0);
  start(net, 0, kUnlimited, {{l, 1.0f}});
  start(net, 1, kUnlimited, {{l, 1.0f}});
  // Progressive filling: both rise together until 2r = 100.
  CHECK_THAT(net.rate(0), WithinRel(50.0, kRel));
  CHECK_THAT(net.rate(1), WithinRel(50.0, kRel));
}

TEST_CASE("FlowNetwork: weights scale a flow's load, not its rate", "[sim][network][flow]") {
  // Max-min fairness is over rates; weight w means w*r bytes/s on the link.
  // Flows A (w=1) and B (w=3) on a 100 B/s link rise together until
  // 1r + 3r = 100: r = 25 each, the link carries 25 + 75 = 100.
  FlowNetwork net;
  const int32_t l = net.add_link(100.0);
  start(net, 0, kUnlimited, {{l, 1.0f}});
  start(net, 1, kUnlimited, {{l, 3.0f}});
  CHECK_THAT(net.rate(0), WithinRel(25.0, kRel));
  CHECK_THAT(net.rate(1), WithinRel(25.0, kRel));
  SECTION("A capped at 10 leaves B (100 - 10) / 3 = 30") {
    FlowNetwork n2;
    const int32_t l2 = n2.add_link(100.0);
    start(n2, 0, 10.0, {{l2, 1.0f}});
    start(n2, 1, kUnlimited, {{l2, 3.0f}});
    CHECK_THAT(n2.rate(0), WithinRel(10.0, kRel));
    CHECK_THAT(n2.rate(1), WithinRel(30.0, kRel));
  }
}

TEST_CASE("FlowNetwork: the three-link example of Bertsekas & Gallager", "[sim][network][flow]") {
  // Links: L1 = 2, L2 = 3, L3 = 10 B/s.  Flows: A over L1, L2, L3; B over L1;
  // C over L2; D over L3.  Progressive filling (B&G sec. 6.5.2):
  //  - all four rise together; fair shares: L1 2/2 = 1 (A, B), L2 3/2 = 1.5
  //    (A, C), L3 10/2 = 5 (A, D).  L1 saturates first at r = 1: A = B = 1.
  //  - C and D continue.  L2 has 3 - 1 = 2 left for C, L3 has 10 - 1 = 9 for
  //    D.  L2 saturates at C = 2, then L3 at D = 9.
  // Max-min check: A and B are bottlenecked at L1 (both at 1, the largest
  // there); C at L2 (2 >= A's 1); D at L3 (9 >= 1).
  FlowNetwork net;
  const int32_t l1 = net.add_link(2.0), l2 = net.add_link(3.0), l3 = net.add_link(10.0);
  start(net, 0, kUnlimited, {{l1, 1.0f}, {l2, 1.0f}, {l3, 1.0f}});  // A
  start(net, 1, kUnlimited, {{l1, 1.0f}});                          // B
  start(net, 2, kUnlimited, {{l2, 1.0f}});                          // C
  start(net, 3, kUnlimited, {{l3, 1.0f}});                          // D
  CHECK_THAT(net.rate(0), WithinRel(1.0, kRel));
  CHECK_THAT(net.rate(1), WithinRel(1.0, kRel));
  CHECK_THAT(net.rate(2), WithinRel(2.0, kRel));
  CHECK_THAT(net.rate(3), WithinRel(9.0, kRel));
}

TEST_CASE("FlowNetwork: a flow capped below its fair share frees bandwidth", "[sim][network][flow]") {
  // 90 B/s shared by A (cap 10), B and C: the equal share would be 30, but A
  // stops at 10; B and C split the remaining 80: 40 each.
  FlowNetwork net;
  const int32_t l = net.add_link(90.0);
  start(net, 0, 10.0, {{l, 1.0f}});
  start(net, 1, kUnlimited, {{l, 1.0f}});
  start(net, 2, kUnlimited, {{l, 1.0f}});
  CHECK_THAT(net.rate(0), WithinRel(10.0, kRel));
  CHECK_THAT(net.rate(1), WithinRel(40.0, kRel));
  CHECK_THAT(net.rate(2), WithinRel(40.0, kRel));
}

TEST_CASE("FlowNetwork: rates are recomputed after stop()", "[sim][network][flow]") {
  FlowNetwork net;
  const int32_t l = net.add_link(100.0);
  start(net, 0, kUnlimited, {{l, 1.0f}});
  start(net, 1, kUnlimited, {{l, 1.0f}});
  start(net, 2, 20.0, {{l, 1.0f}});
  // C capped at 20; A, B share 80: 40 each.
  REQUIRE_THAT(net.rate(0), WithinRel(40.0, kRel));
  SECTION("stopping A gives B the link less C's cap: 100 - 20 = 80") {
    net.stop(0);
    CHECK_FALSE(net.active(0));
    CHECK_THAT(net.rate(1), WithinRel(80.0, kRel));
    CHECK_THAT(net.rate(2), WithinRel(20.0, kRel));
    CHECK(changed(net) == std::vector<int32_t>{1, 2});
  }
  SECTION("stopping C lets A and B split 100: 50 each") {
    net.stop(2);
    CHECK_THAT(net.rate(0), WithinRel(50.0, kRel));
    CHECK_THAT(net.rate(1), WithinRel(50.0, kRel));
    CHECK(changed(net) == std::vector<int32_t>{0, 1});
  }
  SECTION("a stopped id can be started again") {
    net.stop(1);
    start(net, 1, kUnlimited, {{l, 1.0f}});
    CHECK(net.active(1));
    CHECK_THAT(net.rate(0), WithinRel(40.0, kRel));
    CHECK_THAT(net.rate(1), WithinRel(40.0, kRel));
  }
}

TEST_CASE("FlowNetwork: changed() covers the connected component only", "[sim][network][flow]") {
  // Flows <-> links: A on L1; B on L1, L2; C on L2; D on L3.  Starting E on L2
  // touches L2 -> B, C -> (through B) L1 -> A.  D shares no link: untouched.
  FlowNetwork net;
  const int32_t l1 = net.add_link(100.0), l2 = net.add_link(100.0), l3 = net.add_link(100.0);
  start(net, 0, kUnlimited, {{l1, 1.0f}});                 // A
  start(net, 1, kUnlimited, {{l1, 1.0f}, {l2, 1.0f}});     // B
  start(net, 2, kUnlimited, {{l2, 1.0f}});                 // C
  start(net, 3, kUnlimited, {{l3, 1.0f}});                 // D
  CHECK(changed(net) == std::vector<int32_t>{3});
  start(net, 4, kUnlimited, {{l2, 1.0f}});                 // E
  CHECK(changed(net) == std::vector<int32_t>{0, 1, 2, 4});
  // New max-min point: L2 carries B, C, E: 100/3 each; A gets L1's rest.
  CHECK_THAT(net.rate(1), WithinRel(100.0 / 3, kRel));
  CHECK_THAT(net.rate(2), WithinRel(100.0 / 3, kRel));
  CHECK_THAT(net.rate(4), WithinRel(100.0 / 3, kRel));
  CHECK_THAT(net.rate(0), WithinRel(200.0 / 3, kRel));
  CHECK_THAT(net.rate(3), WithinRel(100.0, kRel));
  SECTION("stopping D changes nothing else") {
    net.stop(3);
    CHECK(changed(net).empty());
    CHECK_THAT(net.rate(0), WithinRel(200.0 / 3, kRel));
  }
}

TEST_CASE("FlowNetwork: random instances satisfy the bottleneck conditions of max-min fairness",
          "[sim][network][flow]") {
  // Independent oracle (B&G Prop. 6.5.1): the allocation is feasible and every
  // flow is either at its cap or has a bottleneck link: saturated, and no flow
  // on it has a higher rate.  Seeded from Catch::rngSeed() (Catch2 v2; replay with --rng-seed).
  std::mt19937_64 rng(Catch::rngSeed());
  auto uniform = [&rng](double lo, double hi) {
    return lo + (hi - lo) * static_cast<double>(rng() >> 11) * (1.0 / 9007199254740992.0);
  };
  for (int trial = 0; trial < 200; ++trial) {
    FlowNetwork net;
    const int n_links = 1 + static_cast<int>(rng() % 6);
    std::vector<double> cap_link;
    for (int i = 0; i < n_links; ++i) cap_link.push_back(uniform(1.0, 100.0));
    for (double c : cap_link) net.add_link(c);
    const int n_flows = 1 + static_cast<int>(rng() % 8);
    std::vector<double> cap_flow;
    std::vector<std::vector<FlowLink>> paths;
    for (int f = 0; f < n_flows; ++f) {
      std::vector<FlowLink> path;
      for (int i = 0; i < n_links; ++i) {
        if (rng() % 2 == 0) path.push_back(FlowLink{i, static_cast<float>(uniform(0.25, 2.0))});
      }
      const double cap = rng() % 3 == 0 ? uniform(0.5, 50.0) : kUnlimited;
      if (path.empty() && cap == kUnlimited) path.push_back(FlowLink{0, 1.0f});
      cap_flow.push_back(cap);
      paths.push_back(path);
      start(net, f, cap, path);
    }
    std::vector<double> load(static_cast<size_t>(n_links), 0.0);
    for (int f = 0; f < n_flows; ++f) {
      for (const FlowLink& l : paths[static_cast<size_t>(f)]) load[static_cast<size_t>(l.link)] += l.weight * net.rate(f);
    }
    INFO("trial " << trial);
    for (int i = 0; i < n_links; ++i) CHECK(load[static_cast<size_t>(i)] <= cap_link[static_cast<size_t>(i)] * (1 + 1e-9));
    for (int f = 0; f < n_flows; ++f) {
      const double r = net.rate(f);
      CHECK(r <= cap_flow[static_cast<size_t>(f)] * (1 + 1e-9));
      bool bottlenecked = r >= cap_flow[static_cast<size_t>(f)] * (1 - 1e-9);
      for (const FlowLink& l : paths[static_cast<size_t>(f)]) {
        const size_t li = static_cast<size_t>(l.link);
        if (load[li] < cap_link[li] * (1 - 1e-9)) continue;
        bool highest = true;
        for (int g = 0; g < n_flows; ++g) {
          for (const FlowLink& lg : paths[static_cast<size_t>(g)]) {
            if (lg.link == l.link && net.rate(g) > r * (1 + 1e-9)) highest = false;
          }
        }
        bottlenecked = bottlenecked || highest;
      }
      CHECK(bottlenecked);
    }
  }
}

TEST_CASE("FlowNetwork: deferred updates give the rates of immediate ones", "[sim][network][flow]") {
  // Oracle: the same sequence of starts and stops applied to a network that
  // updates at once.  Deferred, each batch (one instant of the engine) is
  // applied by update(): every active flow's rate must equal the immediate
  // network's bit for bit (each component is filled from its final state, as
  // the immediate network's last update of it was), and changed() must list
  // every flow whose rate moved in that batch.
  std::mt19937_64 rng(Catch::rngSeed());
  for (int trial = 0; trial < 100; ++trial) {
    FlowNetwork now, later;
    later.defer_updates(true);
    const int n_links = 2 + static_cast<int>(rng() % 10);
    for (int i = 0; i < n_links; ++i) {
      const double c = 1.0 + static_cast<double>(rng() % 100);
      now.add_link(c);
      later.add_link(c);
    }
    std::vector<int32_t> active;
    int32_t next_id = 0;
    std::vector<double> before(64, 0.0);
    for (int batch = 0; batch < 12; ++batch) {
      for (int32_t f : active) before[static_cast<size_t>(f)] = later.rate(f);
      const int events = 1 + static_cast<int>(rng() % 5);
      for (int e = 0; e < events; ++e) {
        if (!active.empty() && rng() % 3 == 0) {
          const size_t k = rng() % active.size();
          now.stop(active[k]);
          later.stop(active[k]);
          active.erase(active.begin() + static_cast<std::ptrdiff_t>(k));
        } else if (next_id < 64) {
          std::vector<FlowLink> path;
          for (int i = 0; i < n_links; ++i) {
            if (rng() % 3 == 0) path.push_back(FlowLink{i, rng() % 2 ? 1.0f : 0.5f});
          }
          if (path.empty()) path.push_back(FlowLink{static_cast<int32_t>(rng() % n_links), 1.0f});
          const double cap = rng() % 4 == 0 ? 5.0 + static_cast<double>(rng() % 50) : kUnlimited;
          start(now, next_id, cap, path);
          start(later, next_id, cap, path);
          before[static_cast<size_t>(next_id)] = 0;
          active.push_back(next_id++);
        }
      }
      REQUIRE(later.pending());
      later.update();
      CHECK_FALSE(later.pending());
      const std::vector<int32_t>& ch = later.changed();
      CHECK(std::is_sorted(ch.begin(), ch.end()));
      INFO("trial " << trial << " batch " << batch);
      for (int32_t f : active) {
        CHECK(later.rate(f) == now.rate(f));
        if (later.rate(f) != before[static_cast<size_t>(f)]) {
          CHECK(std::binary_search(ch.begin(), ch.end(), f));
        }
      }
    }
  }
}

}  // namespace
}  // namespace trainplan
