// Tests of the pipeline schedules against Megatron-LM's op order and against
// closed-form bubble and activation-memory results (FORMULAS.md §2.4).
#include "simulator/schedule/pipeline_schedule.h"

#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <csignal>
#include <functional>
#include <map>
#include <tuple>
#include <string>
#include <utility>
#include <vector>

#include <catch2/catch.hpp>

namespace trainplan {
namespace {

using Catch::Matchers::WithinAbs;

// "F<microbatch>.<chunk>" / "B<microbatch>.<chunk>", space separated.
std::string ops_text(const std::vector<PipeOp>& ops) {
  std::string out;
  for (const PipeOp& op : ops) {
    if (!out.empty()) out += ' ';
    out += op.kind == PipeOp::Kind::kForward ? 'F' : 'B';
    out += std::to_string(op.microbatch) + "." + std::to_string(op.chunk);
  }
  return out;
}

struct Config {
  Schedule schedule;
  int p, m, v;
};

std::vector<Config> feasible_configs() {
  std::vector<Config> out;
  for (Schedule s : {Schedule::kGpipe, Schedule::k1F1B, Schedule::kNaive}) {
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m : {1, 2, 3, 5, 8, 16}) out.push_back({s, p, m, 1});
    }
  }
  for (int p : {2, 3, 4, 8}) {
    for (int v : {1, 2, 3, 4}) {
      for (int k : {1, 2, 3, 4}) out.push_back({Schedule::kInterleaved, p, k * p, v});
    }
  }
  return out;
}

std::string describe(const Config& c) {
  return std::string(to_string(c.schedule)) + " p=" + std::to_string(c.p) +
         " m=" + std::to_string(c.m) + " v=" + std::to_string(c.v);
}

TEST_CASE("PipelineSchedule: feasibility follows Megatron's rules", "[sim][taskgraph]") {
  SECTION("interleaved needs m to be a multiple of p") {
    const Feasibility f = check_pipeline_schedule(Schedule::kInterleaved, 4, 6, 2);
    CHECK_FALSE(f.ok);
    CHECK(f.reason ==
          "interleaved schedule needs the microbatch count to be a multiple of the pipeline size "
          "(got m = 6, p = 4; Megatron: number of microbatches is not divisible by "
          "pipeline-parallel size)");
    CHECK(check_pipeline_schedule(Schedule::kInterleaved, 4, 8, 2).ok);
  }
  SECTION("interleaved needs p >= 2") {
    const Feasibility f = check_pipeline_schedule(Schedule::kInterleaved, 1, 4, 2);
    CHECK_FALSE(f.ok);
    CHECK(f.reason ==
          "interleaved schedule needs pipeline size p >= 2 (got p = 1; Megatron: "
          "pipeline-model-parallel size should be greater than 1)");
  }
  SECTION("non-interleaved schedules have one chunk per rank") {
    const Feasibility f = check_pipeline_schedule(Schedule::k1F1B, 4, 8, 2);
    CHECK_FALSE(f.ok);
    CHECK(f.reason ==
          "1f1b schedule runs one model chunk per rank; got v = 2 (use the interleaved schedule)");
  }
  SECTION("counts must be positive") {
    CHECK(check_pipeline_schedule(Schedule::kGpipe, 0, 4, 1).reason ==
          "pipeline size p must be >= 1 (got 0)");
    CHECK(check_pipeline_schedule(Schedule::kGpipe, 4, 0, 1).reason ==
          "microbatch count m must be >= 1 (got 0)");
    CHECK(check_pipeline_schedule(Schedule::kInterleaved, 4, 4, 0).reason ==
          "model chunks per rank v must be >= 1 (got 0)");
  }
  SECTION("1F1B and GPipe accept any m, including m < p") {
    CHECK(check_pipeline_schedule(Schedule::k1F1B, 8, 3, 1).ok);
    CHECK(check_pipeline_schedule(Schedule::kGpipe, 8, 3, 1).ok);
  }
}

TEST_CASE("PipelineSchedule: model_chunk_stage is chunk*p + rank", "[sim][taskgraph]") {
  CHECK(model_chunk_stage(0, 0, 4) == 0);
  CHECK(model_chunk_stage(3, 0, 4) == 3);
  CHECK(model_chunk_stage(0, 1, 4) == 4);
  CHECK(model_chunk_stage(2, 3, 4) == 14);
}

TEST_CASE("PipelineSchedule: op order matches Megatron", "[sim][taskgraph]") {
  SECTION("1F1B, p=4, m=8: rank r warms up with p-r-1 forwards") {
    const PipelineSchedule s = build_pipeline_schedule(Schedule::k1F1B, 4, 8, 1);
    REQUIRE(s.size() == 4);
    CHECK(ops_text(s[0]) ==
          "F0.0 F1.0 F2.0 F3.0 B0.0 F4.0 B1.0 F5.0 B2.0 F6.0 B3.0 F7.0 B4.0 B5.0 B6.0 B7.0");
    CHECK(ops_text(s[3]) ==
          "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0 F3.0 B3.0 F4.0 B4.0 F5.0 B5.0 F6.0 B6.0 F7.0 B7.0");
  }
  SECTION("1F1B with m < p is all warm-up then cool-down on early ranks") {
    const PipelineSchedule s = build_pipeline_schedule(Schedule::k1F1B, 4, 2, 1);
    CHECK(ops_text(s[0]) == "F0.0 F1.0 B0.0 B1.0");  // warm-up min(3, 2) = 2
    CHECK(ops_text(s[2]) == "F0.0 F1.0 B0.0 B1.0");  // warm-up 1, then F1 B0, then B1
    CHECK(ops_text(s[3]) == "F0.0 B0.0 F1.0 B1.0");
  }
  SECTION("interleaved, p=2, m=4, v=2") {
    // Virtual microbatch k maps to chunk (k mod 4) / 2 and microbatch
    // (k / 4)*2 + k mod 2; backward chunk is 1 minus that.  Warm-up on rank 0
    // is 2*(2-0-1) + (2-1)*2 = 4, on rank 1 it is 2.
    const PipelineSchedule s = build_pipeline_schedule(Schedule::kInterleaved, 2, 4, 2);
    CHECK(ops_text(s[0]) ==
          "F0.0 F1.0 F0.1 F1.1 "
          "F2.0 B0.1 F3.0 B1.1 F2.1 B0.0 F3.1 B1.0 "
          "B2.1 B3.1 B2.0 B3.0");
    CHECK(ops_text(s[1]) ==
          "F0.0 F1.0 "
          "F0.1 B0.1 F1.1 B1.1 F2.0 B0.0 F3.0 B1.0 F2.1 B2.1 F3.1 B3.1 "
          "B2.0 B3.0");
  }
  SECTION("interleaved with m == p runs all forwards, then all backwards") {
    const PipelineSchedule s = build_pipeline_schedule(Schedule::kInterleaved, 2, 2, 2);
    for (const auto& ops : s) CHECK(ops_text(ops) == "F0.0 F1.0 F0.1 F1.1 B0.1 B1.1 B0.0 B1.0");
  }
  SECTION("GPipe runs backwards in reverse microbatch order (torchgpipe)") {
    const PipelineSchedule s = build_pipeline_schedule(Schedule::kGpipe, 2, 3, 1);
    for (const auto& ops : s) CHECK(ops_text(ops) == "F0.0 F1.0 F2.0 B2.0 B1.0 B0.0");
  }
  SECTION("naive finishes each microbatch before the next") {
    const PipelineSchedule s = build_pipeline_schedule(Schedule::kNaive, 3, 3, 1);
    for (const auto& ops : s) CHECK(ops_text(ops) == "F0.0 B0.0 F1.0 B1.0 F2.0 B2.0");
  }
}

TEST_CASE("PipelineSchedule: every (microbatch, chunk) runs F once, then B once",
          "[sim][taskgraph]") {
  for (const Config& c : feasible_configs()) {
    INFO(describe(c));
    const PipelineSchedule s = build_pipeline_schedule(c.schedule, c.p, c.m, c.v);
    REQUIRE(static_cast<int>(s.size()) == c.p);
    for (const auto& ops : s) {
      REQUIRE(static_cast<int>(ops.size()) == 2 * c.m * c.v);
      std::map<std::pair<int, int>, std::pair<int, int>> position;  // -> (F index, B index)
      for (int i = 0; i < static_cast<int>(ops.size()); ++i) {
        const PipeOp& op = ops[static_cast<size_t>(i)];
        REQUIRE(op.microbatch >= 0);
        REQUIRE(op.microbatch < c.m);
        REQUIRE(op.chunk >= 0);
        REQUIRE(op.chunk < c.v);
        auto it = position.emplace(std::make_pair(op.microbatch, op.chunk), std::make_pair(-1, -1));
        int& slot = op.kind == PipeOp::Kind::kForward ? it.first->second.first
                                                      : it.first->second.second;
        REQUIRE(slot == -1);
        slot = i;
      }
      REQUIRE(static_cast<int>(position.size()) == c.m * c.v);
      for (const auto& entry : position) {
        CHECK(entry.second.first >= 0);
        CHECK(entry.second.first < entry.second.second);
      }
    }
  }
}

// Unit-time oracle, tf = 1, tb = 2, no communication.  The last microbatch
// enters stage p-1 after (p-1) forwards, so with uniform stages GPipe and 1F1B
// both finish at (m + p - 1)(tf + tb) (Narayanan et al. 2021, §2.2); the
// busy time per rank is m(tf + tb), so the bubble fraction of the total is
// (p-1)/(m+p-1) (FORMULAS.md §2.4).
TEST_CASE("PipelineSchedule: GPipe and 1F1B bubble is (p-1)/(m+p-1) of the step",
          "[sim][taskgraph]") {
  const double tf = 1.0, tb = 2.0;
  for (Schedule sched : {Schedule::kGpipe, Schedule::k1F1B}) {
    for (int p : {1, 2, 3, 4, 8}) {
      for (int m : {1, 2, 3, 4, 7, 16, 32}) {
        INFO(to_string(sched) << " p=" << p << " m=" << m);
        const UnitTimeRun run =
            simulate_pipeline_unit_time(build_pipeline_schedule(sched, p, m, 1), 1, tf, tb);
        const double bubble = (run.makespan - m * (tf + tb)) / run.makespan;
        CHECK_THAT(bubble, WithinAbs(double(p - 1) / (m + p - 1), 1e-12));
        CHECK_THAT(run.makespan, WithinAbs((m + p - 1) * (tf + tb), 1e-9));
      }
    }
  }
}

// Interleaving: with per-chunk times tf, tb the ideal step is m*v*(tf + tb)
// and the bubble is (p-1)(tf + tb), i.e. (p-1)(T_F + T_B)/v in whole-stage
// times T = v*t (Narayanan et al. 2021, §2.2.2), a fraction (p-1)/(v*m) of the
// ideal (FORMULAS.md §2.4, Llama 3's (PP-1)/(V*M)).
TEST_CASE("PipelineSchedule: interleaved bubble is (p-1)/(v*m) of the ideal", "[sim][taskgraph]") {
  for (double tb : {1.0, 2.0}) {
    const double tf = 1.0;
    for (int p : {2, 3, 4, 8}) {
      for (int v : {1, 2, 3, 4}) {
        for (int k : {1, 2, 4}) {
          const int m = k * p;
          INFO("p=" << p << " v=" << v << " m=" << m << " tb=" << tb);
          const UnitTimeRun run = simulate_pipeline_unit_time(
              build_pipeline_schedule(Schedule::kInterleaved, p, m, v), v, tf, tb);
          const double ideal = m * v * (tf + tb);
          CHECK_THAT(run.makespan - ideal, WithinAbs((p - 1) * (tf + tb), 1e-9));
          CHECK_THAT((run.makespan - ideal) / ideal, WithinAbs(double(p - 1) / (v * m), 1e-12));
        }
      }
    }
  }
}

TEST_CASE("PipelineSchedule: naive keeps one rank busy at a time", "[sim][taskgraph]") {
  const double tf = 1.0, tb = 2.0;
  for (int p : {1, 2, 4}) {
    for (int m : {1, 3, 8}) {
      INFO("p=" << p << " m=" << m);
      const PipelineSchedule s = build_pipeline_schedule(Schedule::kNaive, p, m, 1);
      const UnitTimeRun run = simulate_pipeline_unit_time(s, 1, tf, tb);
      CHECK_THAT(run.makespan, WithinAbs(m * p * (tf + tb), 1e-9));
      std::vector<std::pair<double, double>> busy;  // (start, end) over all ranks
      for (size_t r = 0; r < s.size(); ++r) {
        for (size_t i = 0; i < s[r].size(); ++i) {
          const double t = s[r][i].kind == PipeOp::Kind::kForward ? tf : tb;
          busy.emplace_back(run.start[r][i], run.start[r][i] + t);
        }
      }
      std::sort(busy.begin(), busy.end());
      for (size_t i = 1; i < busy.size(); ++i) CHECK(busy[i].first >= busy[i - 1].second);
    }
  }
}

TEST_CASE("PipelineSchedule: peak activations in flight", "[sim][taskgraph]") {
  SECTION("1F1B rank r holds min(p - r, m)") {
    for (int p : {1, 2, 4, 8}) {
      for (int m : {1, 3, 4, 8, 16}) {
        const PipelineSchedule s = build_pipeline_schedule(Schedule::k1F1B, p, m, 1);
        for (int r = 0; r < p; ++r) {
          INFO("p=" << p << " m=" << m << " rank=" << r);
          CHECK(peak_microbatches_in_flight(s[static_cast<size_t>(r)]) == std::min(p - r, m));
        }
      }
    }
  }
  SECTION("GPipe holds all m") {
    for (const auto& ops : build_pipeline_schedule(Schedule::kGpipe, 4, 7, 1)) {
      CHECK(peak_microbatches_in_flight(ops) == 7);
    }
  }
  SECTION("naive holds one") {
    for (const auto& ops : build_pipeline_schedule(Schedule::kNaive, 4, 7, 1)) {
      CHECK(peak_microbatches_in_flight(ops) == 1);
    }
  }
  SECTION("interleaved rank r holds Megatron's warm-up + 1, capped at m*v") {
    for (int p : {2, 3, 4, 8}) {
      for (int v : {1, 2, 3, 4}) {
        for (int k : {1, 2, 4}) {
          const int m = k * p;
          const PipelineSchedule s = build_pipeline_schedule(Schedule::kInterleaved, p, m, v);
          for (int r = 0; r < p; ++r) {
            INFO("p=" << p << " v=" << v << " m=" << m << " rank=" << r);
            const int warmup = 2 * (p - r - 1) + (v - 1) * p;
            const int expected = m == p ? m * v : std::min(warmup + 1, m * v);
            CHECK(peak_microbatches_in_flight(s[static_cast<size_t>(r)]) == expected);
          }
          if (m >= 2 * p) {
            INFO("p=" << p << " v=" << v << " m=" << m << " rank 0");
            CHECK(peak_microbatches_in_flight(s[0]) == p * v + p - 1);
          }
        }
      }
    }
  }
  SECTION("interleaved rank 0 holds (1 + (p-1)/(p*v)) times 1F1B's activations") {
    // A chunk is 1/v of a stage, so 1F1B's p microbatches are p*v chunks and
    // interleaving's p*v + p - 1 chunks are 1 + (p-1)/(p*v) times that
    // (FORMULAS.md §2.4, Narayanan et al. 2021).
    for (int p : {2, 4, 8}) {
      for (int v : {2, 4}) {
        const int m = 4 * p;
        const int interleaved =
            peak_microbatches_in_flight(build_pipeline_schedule(Schedule::kInterleaved, p, m, v)[0]);
        const int one_f_one_b =
            peak_microbatches_in_flight(build_pipeline_schedule(Schedule::k1F1B, p, m, 1)[0]);
        CHECK_THAT(double(interleaved) / (v * one_f_one_b),
                   WithinAbs(1.0 + double(p - 1) / (p * v), 1e-12));
      }
    }
  }
}

TEST_CASE("PipelineSchedule: unit-time simulator runs every feasible schedule",
          "[sim][taskgraph]") {
  for (const Config& c : feasible_configs()) {
    INFO(describe(c));
    const PipelineSchedule s = build_pipeline_schedule(c.schedule, c.p, c.m, c.v);
    const UnitTimeRun run = simulate_pipeline_unit_time(s, c.v, 1.0, 2.0);
    for (size_t r = 0; r < s.size(); ++r) REQUIRE(run.start[r].size() == s[r].size());
    CHECK(run.makespan >= c.m * c.v * 3.0);
  }
}

// Runs `body` in a child process and returns what it wrote to stderr, or
// "exited" if it returned instead of aborting.
template <typename Body>
std::string abort_message(Body body) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    std::signal(SIGABRT, SIG_DFL);  // Catch2's fatal-signal handler would report a failure
    dup2(fds[1], STDERR_FILENO);
    body();
    _exit(0);
  }
  close(fds[1]);
  std::string text;
  char buf[512];
  ssize_t n;
  while ((n = read(fds[0], buf, sizeof buf)) > 0) text.append(buf, static_cast<size_t>(n));
  close(fds[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGABRT) return "exited";
  return text;
}

TEST_CASE("PipelineSchedule: unit-time simulator detects deadlock", "[sim][taskgraph]") {
  // Rank 0 wants B0 before F0, but B0 on stage 0 needs B0 on stage 1, which
  // needs F0 on stage 1, which needs F0 on stage 0.
  const PipeOp f0{PipeOp::Kind::kForward, 0, 0};
  const PipeOp b0{PipeOp::Kind::kBackward, 0, 0};
  const PipelineSchedule bad = {{b0, f0}, {f0, b0}};
  const std::string message = abort_message([&] { simulate_pipeline_unit_time(bad, 1, 1.0, 2.0); });
  CHECK_THAT(message, Catch::Matchers::Contains(
                          "pipeline schedule deadlocks: rank 0 waits at op 0 B(mb 0, chunk 0); "
                          "rank 1 waits at op 0 F(mb 0, chunk 0);"));
}

}  // namespace
}  // namespace trainplan

namespace trainplan {
namespace {

// Oracle for simulate_pipeline_stages: the as-soon-as-possible start of an
// op is the longest path to it in the schedule's precedence DAG (its rank's
// previous op; F(s, mb) after F(s-1, mb); B(s, mb) after F(s, mb) and
// B(s+1, mb)), computed here by memoised recursion over explicit
// predecessors instead of the executor's sweeps.
double longest_path_makespan(const PipelineSchedule& sched, int v, const std::vector<double>& f,
                             const std::vector<double>& b) {
  const int p = static_cast<int>(sched.size());
  std::map<std::tuple<int, int, int>, std::pair<int, size_t>> where;  // (kind, stage, mb) -> (rank, index)
  for (int r = 0; r < p; ++r) {
    for (size_t i = 0; i < sched[static_cast<size_t>(r)].size(); ++i) {
      const PipeOp& op = sched[static_cast<size_t>(r)][i];
      where[{op.kind == PipeOp::Kind::kForward ? 0 : 1, model_chunk_stage(r, op.chunk, p), op.microbatch}] = {r, i};
    }
  }
  std::map<std::pair<int, size_t>, double> finish;
  std::function<double(int, size_t)> end = [&](int r, size_t i) -> double {
    auto hit = finish.find({r, i});
    if (hit != finish.end()) return hit->second;
    const PipeOp& op = sched[static_cast<size_t>(r)][i];
    const int s = model_chunk_stage(r, op.chunk, p);
    double start = i > 0 ? end(r, i - 1) : 0.0;
    auto after = [&](int kind, int stage) {
      const auto& at = where.at({kind, stage, op.microbatch});
      start = std::max(start, end(at.first, at.second));
    };
    if (op.kind == PipeOp::Kind::kForward) {
      if (s > 0) after(0, s - 1);
    } else {
      after(0, s);
      if (s + 1 < p * v) after(1, s + 1);
    }
    const double e = start + (op.kind == PipeOp::Kind::kForward ? f[static_cast<size_t>(s)] : b[static_cast<size_t>(s)]);
    finish[{r, i}] = e;
    return e;
  };
  double makespan = 0;
  for (int r = 0; r < p; ++r) {
    if (!sched[static_cast<size_t>(r)].empty()) makespan = std::max(makespan, end(r, sched[static_cast<size_t>(r)].size() - 1));
  }
  return makespan;
}

}  // namespace

TEST_CASE("PipelineSchedule: per-stage executor runs each op as soon as the DAG allows", "[sim][taskgraph]") {
  for (const Config& c : feasible_configs()) {
    if (c.m > 8) continue;
    INFO(describe(c));
    const PipelineSchedule sched = build_pipeline_schedule(c.schedule, c.p, c.m, c.v);
    const size_t stages = static_cast<size_t>(c.p * c.v);
    // Uniform times: the unit-time executor's makespan.
    const UnitTimeRun uniform = simulate_pipeline_stages(sched, c.v, std::vector<double>(stages, 1.0),
                                                         std::vector<double>(stages, 2.0));
    CHECK(uniform.makespan == simulate_pipeline_unit_time(sched, c.v, 1.0, 2.0).makespan);
    // Uneven stages (whole numbers, so the sums are exact): the longest path.
    std::vector<double> f(stages), b(stages);
    for (size_t s = 0; s < stages; ++s) {
      f[s] = static_cast<double>(1 + (s * 7) % 5);
      b[s] = static_cast<double>(2 + (s * 3) % 4);
    }
    CHECK(simulate_pipeline_stages(sched, c.v, f, b).makespan == longest_path_makespan(sched, c.v, f, b));
  }
}

}  // namespace trainplan
