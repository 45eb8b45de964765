// Benchmark of the simulator: lowering + engine for one training step, in
// representative (one rank per stage) and full (every rank) mode.
//
// Usage: trainplan_bench [--model llama3-405b] [--cluster dgx-h100]
//          [--nodes 2048] [--tp 8] [--pp 16] [--vp 2] [--seq 8192] [--gbs 2048]
//          [--repeat 5]
// Prints, per mode: median wall time of simulate_step, events, events/s and
// the process's peak resident memory.  Results and commands: docs/performance.md.
#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "simulator/core/error.h"
#include "simulator/report/step_report.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace {

double peak_rss_gib() {
  struct rusage u;
  getrusage(RUSAGE_SELF, &u);
  return static_cast<double>(u.ru_maxrss) * 1024.0 / (1024.0 * 1024.0 * 1024.0);
}

}  // namespace

int main(int argc, char** argv) {
  std::string model = "llama3-405b", cluster = "dgx-h100";
  long nodes = 2048, tp = 8, pp = 16, vp = 2, seq = 8192, gbs = 2048, repeat = 5;
  for (int i = 1; i + 1 < argc; i += 2) {
    std::string k = argv[i], v = argv[i + 1];
    if (k == "--model") model = v;
    else if (k == "--cluster") cluster = v;
    else if (k == "--nodes") nodes = std::atol(v.c_str());
    else if (k == "--tp") tp = std::atol(v.c_str());
    else if (k == "--pp") pp = std::atol(v.c_str());
    else if (k == "--vp") vp = std::atol(v.c_str());
    else if (k == "--seq") seq = std::atol(v.c_str());
    else if (k == "--gbs") gbs = std::atol(v.c_str());
    else if (k == "--repeat") repeat = std::atol(v.c_str());
    else {
      std::fprintf(stderr, "trainplan_bench: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  try {
    trainplan::ModelSpec m = trainplan::load_model(model);
    trainplan::ClusterSpec c = trainplan::load_cluster(cluster);
    trainplan::Plan p;
    p.tp = static_cast<int>(tp);
    p.pp = static_cast<int>(pp);
    p.vp = static_cast<int>(vp);
    p.seq = seq;
    p.gbs = gbs;
    p.zero = 1;
    p.sp = true;
    p.recompute = trainplan::Recompute::kSelective;
    trainplan::Layout layout =
        trainplan::resolve_plan(m, c, trainplan::gpus_of_nodes(c, nodes), p);
    if (!layout.feasible) {
      std::fprintf(stderr, "trainplan_bench: plan cannot run: %s\n", layout.reasons[0].c_str());
      return 2;
    }
    std::printf("# trainplan_bench: %s on %s x %ld nodes (%d GPUs), tp %ld pp %ld vp %ld dp %d, seq %ld, gbs %ld, "
                "zero 1, sp, selective recompute; median of %ld runs\n",
                model.c_str(), cluster.c_str(), nodes, layout.gpus, tp, pp, vp, layout.plan.dp, seq, gbs, repeat);
    std::printf("%-15s %12s %12s %12s %14s %14s %12s\n", "mode", "ranks", "tasks", "events", "wall_median(s)",
                "events_per_s", "step_time(s)");
    for (bool representative : {true, false}) {
      trainplan::SimulateOptions o;
      o.representative = representative;
      std::vector<double> walls;
      trainplan::StepReport rep;
      for (long k = 0; k < repeat; ++k) {
        auto t0 = std::chrono::steady_clock::now();
        rep = trainplan::simulate_step(m, c, layout, o);
        walls.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::sort(walls.begin(), walls.end());
      const double med = walls[walls.size() / 2];
      std::printf("%-15s %12d %12lld %12llu %14.4f %14.3g %12.6f\n", representative ? "representative" : "full",
                  rep.simulated_ranks, static_cast<long long>(rep.tasks), static_cast<unsigned long long>(rep.events),
                  med, static_cast<double>(rep.events) / med, rep.step_time_s);
    }
    std::printf("peak resident memory of this process: %.2f GiB\n", peak_rss_gib());
  } catch (const trainplan::InputError& e) {
    std::fprintf(stderr, "trainplan_bench: %s\n", e.what());
    return 2;
  }
  return 0;
}
