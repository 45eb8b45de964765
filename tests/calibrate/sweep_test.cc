// The GEMM and collective sweeps against a machine with a slow spell: a
// backend whose GEMMs and collectives cost a known time, three times as much
// while the spell lasts.
#include "calibrate/sweep.h"

#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace trainplan {
namespace {

// Runs the sweep with its report going to a scratch file; returns what it
// measured.
Calibration sweep(Backend& backend, const SweepConfig& cfg) {
  Calibration cal;
  std::FILE* out = std::tmpfile();
  REQUIRE(out != nullptr);
  run_sweep(backend, cfg, &cal, out, [](const Calibration&) {});
  std::fclose(out);
  return cal;
}

// One rank alone.
class SoloCommunicator : public Communicator {
 public:
  int rank() const override { return 0; }
  int size() const override { return 1; }
  void run(Collective, int64_t) override {}
  int64_t check(Collective, int64_t) override { return 0; }
  void send(int, int64_t, int) override {}
  void recv(int, int64_t, int) override {}
  void wait_sends() override {}
  void barrier() override {}
  double max(double value) override { return value; }
  void reduce_each(std::vector<double>*, Reduce) override {}
};

// A simulated machine: every GEMM advances the clock by `base_s`, by 3x
// that while the clock is inside the slow spell [spell_begin_s, spell_end_s)
// (another job on a shared machine).
class SpellBackend : public Backend {
 public:
  SpellBackend(double base_s, double spell_begin_s, double spell_end_s)
      : base_s_(base_s), begin_s_(spell_begin_s), end_s_(spell_end_s) {}
  std::string name() const override { return "spell"; }
  std::string versions() const override { return "test"; }
  DeviceInfo device() const override { return DeviceInfo{"test device", "0", 1e9}; }
  Communicator& world() override { return world_; }
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<SoloCommunicator>(); }
  bool supports(const std::string&) const override { return true; }
  void copy(int64_t) override {}
  void synchronize() override {}
  void gemm(int64_t, int64_t, int64_t, const std::string&) override {
    now_s_ += now_s_ >= begin_s_ && now_s_ < end_s_ ? 3 * base_s_ : base_s_;
  }
  double now_s() const { return now_s_; }

 private:
  SoloCommunicator world_;
  double base_s_, begin_s_, end_s_;
  double now_s_ = 0;
};

TEST_CASE("Calibrate: a slow spell of the machine does not bend the GEMM table", "[calibrate][sweep]") {
  // 12 shapes, 5 passes of one 2 ms batch (10 GEMMs of 200 us) each, plus a
  // warm-up GEMM per shape in the first pass: a pass takes 24 ms (26.4 ms
  // the first).  The spell lasts 24 ms from 30 ms: it covers one pass, so
  // it reaches at most two of a shape's five batches and each shape's
  // median is the machine's normal 200 us.  Timed shape after shape (all
  // batches of a shape together), the shapes swept during the spell would
  // come out 3x slower.  Oracle: the costs the simulated machine was built
  // with.
  constexpr double kBase = 200e-6;
  SpellBackend backend(kBase, 0.030, 0.054);
  SweepConfig cfg;
  for (int64_t i = 1; i <= 12; ++i) cfg.gemm_shapes.push_back({64 * i, 64, 64});
  cfg.gemm_dtype = "fp32";
  cfg.gemm_min_time_s = 0.010;
  cfg.json = true;
  cfg.clock = [&backend] { return backend.now_s(); };
  const Calibration cal = sweep(backend, cfg);
  REQUIRE(cal.gemm_samples.size() == 12);
  for (const GemmSample& g : cal.gemm_samples) {
    INFO("m " << g.m << ": " << g.time_s * 1e6 << " us");
    CHECK(g.time_s == Approx(kBase).epsilon(1e-9));
  }
  // The spell did happen: the sweep ran through it (about 30 ms to 54 ms).
  CHECK(backend.now_s() > 0.054);
}

// One simulated clock: a collective of `bytes` takes 10 us + bytes /
// (1 GB/s), three times that inside the spell.
struct SimClock {
  double now_s = 0;
  double begin_s = 0, end_s = 0;
  static double cost_s(int64_t bytes) { return 10e-6 + static_cast<double>(bytes) * 1e-9; }
  void advance(int64_t bytes) { now_s += now_s >= begin_s && now_s < end_s ? 3 * cost_s(bytes) : cost_s(bytes); }
};

// A pretend two-rank world whose collectives advance the simulated clock.
class ClockCommunicator : public SoloCommunicator {
 public:
  explicit ClockCommunicator(SimClock* clock) : clock_(clock) {}
  int size() const override { return 2; }
  void run(Collective, int64_t bytes) override { clock_->advance(bytes); }

 private:
  SimClock* clock_;
};

// SpellBackend (its GEMMs unused) with that world.
class CollectiveSpellBackend : public SpellBackend {
 public:
  explicit CollectiveSpellBackend(SimClock* clock) : SpellBackend(0, 0, 0), clock_(clock), world_(clock) {}
  Communicator& world() override { return world_; }
  std::unique_ptr<Communicator> split(int, int) override { return std::make_unique<ClockCommunicator>(clock_); }

 private:
  SimClock* clock_;
  ClockCommunicator world_;
};

TEST_CASE("Calibrate: a slow spell of the machine does not bend the collective curve", "[calibrate][sweep]") {
  // All-reduce from 1 KiB to 64 KiB (7 sizes), 20 calls each as 5 passes of
  // 4: one call of every size costs 70 us + 127 KiB / (1 GB/s) = 200 us in
  // all, so a pass takes 0.8 ms (1.8 ms the first, with 5 warm-up calls per
  // size).  The spell lasts 0.8 ms from 2.0 ms: even slowed 3x by it, a
  // pass overlaps it in at most two of a size's five samples, so every
  // size's median is the machine's normal cost.  Timed size after size (all
  // calls of a size together), the sizes timed during the spell would come
  // out 3x slower.  Oracle: the costs the simulated machine was built with.
  SimClock clock;
  clock.begin_s = 2.0e-3;
  clock.end_s = 2.8e-3;
  CollectiveSpellBackend backend(&clock);
  SweepConfig cfg;
  cfg.min_bytes = 1024;
  cfg.max_bytes = 64 * 1024;
  cfg.collectives = {Collective::kAllReduce};
  cfg.json = true;
  cfg.clock = [&clock] { return clock.now_s; };
  const Calibration cal = sweep(backend, cfg);
  REQUIRE(cal.collective_samples.size() == 7);
  for (const CollectiveSample& c : cal.collective_samples) {
    INFO(c.bytes << " B: " << c.time_s * 1e6 << " us");
    CHECK(c.time_s == Approx(SimClock::cost_s(c.bytes)).epsilon(1e-9));
  }
  // The spell did happen: the sweep ran through it.
  CHECK(clock.now_s > 2.8e-3);
}

// A world of `size` ranks seen from `rank`, whose split records the colour
// it was given and returns a group of `group` ranks.
class GroupCommunicator : public SoloCommunicator {
 public:
  GroupCommunicator(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }

 private:
  int rank_, size_;
};

class SplitRecordingBackend : public SpellBackend {
 public:
  SplitRecordingBackend(int rank, int size, int group) : SpellBackend(0, 0, 0), world_(rank, size), group_(group) {}
  Communicator& world() override { return world_; }
  std::unique_ptr<Communicator> split(int color, int key) override {
    colors.push_back(color);
    return std::make_unique<GroupCommunicator>(key % group_, group_);
  }
  std::vector<int> colors;

 private:
  GroupCommunicator world_;
  int group_;
};

TEST_CASE("Calibrate: --ranks-per-node makes blocks of consecutive ranks one node", "[calibrate][sweep]") {
  // A GB200 NVL72 domain spans trays of 4 GPUs: with 16 ranks and 8 ranks per
  // node (an NVLink domain), rank 13 is in node 13 / 8 = 1 and the sweep sees
  // 16 / 8 = 2 nodes, so it runs the inter-node sweep over all ranks and the
  // intra-node one inside each block.
  for (const int rank : {0, 5, 13}) {
    INFO("rank " << rank);
    SplitRecordingBackend backend(rank, 16, 8);
    SweepConfig cfg;
    cfg.ranks_per_node = 8;
    cfg.collectives = {Collective::kAllReduce};
    cfg.min_bytes = cfg.max_bytes = 1024;
    cfg.warmup = cfg.iters = 1;
    cfg.json = true;
    const Calibration cal = sweep(backend, cfg);
    REQUIRE(backend.colors.size() == 1);
    CHECK(backend.colors[0] == rank / 8);
    CHECK(cal.nodes == 2);
    CHECK(cal.ranks == 16);
  }
}

}  // namespace
}  // namespace trainplan
