// Tests of the Chrome trace (issue 16, trace part): events named by op,
// bubble slices that fill each rank's idle time, a flow arrow from every
// pipeline send to the compute it feeds, TP/CP communication on its own
// thread, and a memory counter whose peak is the simulated peak.
#include <map>
#include <string>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "simulator/memory/memory_model.h"
#include "simulator/report/step_report.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"
#include "simulator/taskgraph/lowering.h"  // global_rank

namespace trainplan {
namespace {

using Catch::Matchers::WithinRel;

TEST_CASE("Trace: names, bubbles, p2p flows, TP thread and memory counter", "[sim][trace]") {
  const ModelSpec m = load_model("gpt3-1.3b");
  const ClusterSpec c = load_cluster("dgx-a100");
  Plan p;
  p.tp = 2;
  p.pp = 4;
  p.gbs = 16;
  const Layout L = resolve_plan(m, c, 8, p);
  REQUIRE(L.feasible);
  SimulateOptions o;
  o.trace = true;
  const StepReport rep = simulate_step(m, c, L, o);
  const nlohmann::json trace = nlohmann::json::parse(rep.trace_json);
  const auto& ev = trace.at("traceEvents");

  int forwards = 0, tp_slices = 0, bubbles = 0, transfer_waits = 0;
  std::map<int, double> busy_plus_bubble;  // pid -> summed compute + bubble durations
  std::map<int, double> peak_gib;
  std::map<int64_t, int> flow_starts, flow_ends;
  int sync_arrows = 0;
  for (const auto& e : ev) {
    const std::string ph = e.at("ph").get<std::string>();
    if (ph == "X" && e.at("tid").get<int>() == 0) {
      const std::string name = e.at("name").get<std::string>();
      // Named by op, never the bare "F"/"B" or layer -1 alone.
      CHECK(name != "F");
      CHECK(name != "B");
      if (name.rfind("forward mb ", 0) == 0) ++forwards;
      if (name == "bubble") ++bubbles;
      if (name == "waiting for a pipeline transfer") ++transfer_waits;
      busy_plus_bubble[e.at("pid").get<int>()] += e.at("dur").get<double>();
    }
    if (ph == "X" && e.at("tid").get<int>() == 3) {
      ++tp_slices;
      // Each TP slice names its layer's collectives: Megatron TP without SP
      // all-reduces the [s, b, h] activation twice per layer forward:
      // 2048 tokens x 2048 hidden x 2 bytes = 8 MiB, over the 2 TP ranks.
      const std::string desc = e.at("args").at("dense_layer").get<std::string>();
      CHECK(desc.find("2x tp all_reduce 8 MiB over 2 (") == 0);
    }
    if (ph == "C") {
      double& pk = peak_gib[e.at("pid").get<int>()];
      pk = std::max(pk, e.at("args").at("GiB").get<double>());
    }
    // Pipeline transfers' arrows (the gradient-norm sync joining the stages
    // has its own, "grad-norm members").
    const bool p2p = e.contains("name") && e.at("name") == "p2p";
    if (ph == "s" && p2p) ++flow_starts[e.at("id").get<int64_t>()];
    if (ph == "f" && p2p) ++flow_ends[e.at("id").get<int64_t>()];
    if (ph == "s" && e.at("name") == "grad-norm members") ++sync_arrows;
  }
  // tp 2 x pp 4 on 8 GPUs: dp 1, 16 micro-batches; one forward per (stage,
  // micro-batch), one simulated rank per stage.
  CHECK(forwards == 4 * static_cast<int>(L.microbatches));
  CHECK(tp_slices > 0);  // tp 2: the layers' all-reduces
  // 1F1B on 4 stages: later stages wait for the first activations (bubble),
  // and blocking sends show as waits for the transfer.
  CHECK(bubbles > 0);
  CHECK(transfer_waits > 0);
  // Compute and bubble slices tile each rank's timeline from 0 to its last
  // task, so they never add up to more than the step.
  for (const auto& [pid, t_us] : busy_plus_bubble) CHECK(t_us <= rep.step_time_s * 1e6 * (1 + 1e-9));
  // Every pipeline transfer: (stages - 1) boundaries x micro-batches x 2
  // directions, each with one arrow.
  CHECK(flow_starts.size() == static_cast<size_t>(3 * L.microbatches * 2));
  // One gradient-norm all-reduce joins the 4 stages before the update: an
  // arrow from its first member to each of the other 3.
  CHECK(sync_arrows == 3);
  for (const auto& [id, n] : flow_starts) {
    CHECK(n == 1);
    CHECK(flow_ends[id] == 1);
  }
  // The memory counter peaks at the simulated peak of each stage.
  for (const StageResult& st : rep.stages) {
    const int pid = global_rank(L.plan, st.stage, 0, 0, 0);
    CHECK_THAT(peak_gib[pid], WithinRel(st.simulated_peak_bytes / kGiB, 1e-5));
  }
}

TEST_CASE("Trace: every rank simulated -- a collective's members are linked by flow arrows", "[sim][trace]") {
  // DP 8 (ZeRO-1) on one DGX A100, every rank simulated: each gradient
  // reduce-scatter and parameter all-gather links its first member to the
  // other seven, one arrow each.
  const ModelSpec m = load_model("gpt3-1.3b");
  const ClusterSpec c = load_cluster("dgx-a100");
  Plan p;
  p.zero = 1;
  p.gbs = 16;
  const Layout L = resolve_plan(m, c, 8, p);
  REQUIRE(L.feasible);
  SimulateOptions o;
  o.trace = true;
  o.representative = false;
  const StepReport rep = simulate_step(m, c, L, o);
  const nlohmann::json trace = nlohmann::json::parse(rep.trace_json);
  std::map<int64_t, int> start_pid, end_pid;
  for (const auto& e : trace.at("traceEvents")) {
    const std::string ph = e.at("ph").get<std::string>();
    if (ph != "s" && ph != "f") continue;
    const std::string name = e.at("name").get<std::string>();
    if (name.size() < 8 || name.compare(name.size() - 8, 8, " members") != 0) continue;
    (ph == "s" ? start_pid : end_pid)[e.at("id").get<int64_t>()] = e.at("pid").get<int>();
  }
  REQUIRE_FALSE(start_pid.empty());
  CHECK(start_pid.size() == end_pid.size());
  std::map<int, int> reached;
  for (const auto& [id, from] : start_pid) {
    REQUIRE(end_pid.count(id) == 1);
    CHECK(end_pid[id] != from);
    reached[end_pid[id]] += 1;
  }
  CHECK(reached.size() == 7);  // every member but the first
  // Each member is reached once per collective.
  for (const auto& [pid, n] : reached) CHECK(n == static_cast<int>(start_pid.size() / 7));
}

TEST_CASE("Trace: llama3-70b TP8 PP4 VP5 on 64 H100 -- TP time and memory peak as the report says",
          "[sim][trace]") {
  // The trace's TP/CP thread (tid 3) carries each layer task's TP share;
  // averaged over the simulated ranks it is the step report's tp_comm.  The
  // memory counter's peak per rank is the memory model's closed form.
  const ModelSpec m = load_model("llama3-70b");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan p;
  p.tp = 8;
  p.pp = 4;
  p.vp = 5;
  p.sp = true;
  p.zero = 1;
  p.gbs = 32;
  const Layout L = resolve_plan(m, c, 64, p);
  REQUIRE(L.feasible);
  SimulateOptions o;
  o.trace = true;
  const StepReport rep = simulate_step(m, c, L, o);
  const nlohmann::json trace = nlohmann::json::parse(rep.trace_json);
  std::map<int, double> tp_us, peak_gib;
  for (const auto& e : trace.at("traceEvents")) {
    const std::string ph = e.at("ph").get<std::string>();
    if (ph == "X" && e.at("tid").get<int>() == 3) tp_us[e.at("pid").get<int>()] += e.at("dur").get<double>();
    if (ph == "C") {
      double& pk = peak_gib[e.at("pid").get<int>()];
      pk = std::max(pk, e.at("args").at("GiB").get<double>());
    }
  }
  REQUIRE(tp_us.size() == 4);
  double mean_s = 0;
  for (const auto& [pid, us] : tp_us) mean_s += us * 1e-6 / 4;
  REQUIRE(rep.breakdown.tp_comm > 0);
  CHECK_THAT(mean_s, WithinRel(rep.breakdown.tp_comm, 0.01));
  const MemoryReport mem = estimate_memory(m, c, L);
  for (const StageMemory& st : mem.stages) {
    const int pid = global_rank(L.plan, st.stage, 0, 0, 0);
    CHECK_THAT(peak_gib[pid], WithinRel(st.breakdown.total() / kGiB, 0.01));
  }
}

}  // namespace
}  // namespace trainplan
