#include "calibrate/sweep.h"

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <functional>
#include <set>

#include "simulator/cost/layer_cost.h"
#include "simulator/network/collective_model.h"

namespace trainplan {

namespace {

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Per-call time of `op` repeated for at least `budget_s` (at most 10000
// calls) on `clock`.
template <typename Op, typename Clock>
double batch_time(Op op, double budget_s, const Clock& clock) {
  int reps = 0;
  const double t0 = clock();
  double t = 0;
  do {
    op();
    ++reps;
    t = clock() - t0;
  } while (t < budget_s && reps < 10000);
  return t / reps;
}

const char* redop_of(Collective c) {
  return c == Collective::kAllReduce || c == Collective::kReduceScatter ? "sum" : "none";
}

int root_of(Collective c) { return c == Collective::kBroadcast ? 0 : -1; }

bool have_sample(const Calibration& cal, Collective c, bool inter, int ranks, int64_t bytes) {
  for (const CollectiveSample& s : cal.collective_samples) {
    if (s.collective == c && s.inter_node == inter && s.ranks == ranks && s.bytes == bytes) return true;
  }
  return false;
}

// Per-call time of one collective size over `calls` calls, each started
// together (barrier) from cold caches, as in a training step where compute
// ran since the buffer was last touched; the slowest rank's mean, on `clock`.
// (nccl-tests times back-to-back calls on a hot buffer: on a GPU the two
// agree, on a CPU the hot buffer sits in cache and looks several times
// faster than a step's collectives.)
double time_collective(Backend& backend, Communicator& comm, Collective c, int64_t bytes, int calls,
                       const std::function<double()>& clock) {
  double total = 0;
  for (int i = 0; i < calls; ++i) {
    backend.evict_caches();
    comm.barrier();
    const double t0 = clock();
    comm.run(c, bytes);
    total += clock() - t0;
  }
  return comm.max(total / calls);
}

// Per-call time of a copy from cold caches (evicted before each call): the
// median of `reps` calls, each started together on every rank (barrier), as
// a step's optimizer runs on all ranks at once after its gradient
// synchronisation; ranks that share one memory system (the cpu backend)
// then contend for it as they do in the step.
template <typename Op>
double cold_median_time(Backend& backend, Op op, int reps) {
  std::vector<double> t;
  for (int i = 0; i < reps; ++i) {
    backend.evict_caches();
    backend.world().barrier();
    const double t0 = now_s();
    op();
    t.push_back(now_s() - t0);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

void sweep_collectives(Backend& backend, Communicator& comm, bool inter, const SweepConfig& cfg, Calibration* cal, std::FILE* out,
                       bool print, int64_t* wrong_total, const std::function<void(const Calibration&)>& checkpoint) {
  const int n = comm.size();
  const std::function<double()> clock = cfg.clock ? cfg.clock : std::function<double()>(now_s);
  for (Collective c : cfg.collectives) {
    if (c == Collective::kSendRecv && n < 2) continue;
    if (print && !cfg.json) {
      std::fprintf(out, "#\n# Collective test: %s_perf, %s-node, %d ranks\n", collective_file_name(c),
                   inter ? "inter" : "intra", n);
      std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "size", "count", "type", "redop", "root",
                   "time", "algbw", "busbw", "#wrong");
      std::fprintf(out, "# %10s  %12s  %8s  %6s  %6s  %7s  %6s  %6s  %6s\n", "(B)", "(elements)", "", "", "", "(us)",
                   "(GB/s)", "(GB/s)", "");
    }
    // Each size is timed once per pass over all sizes, kCollectivePasses
    // passes of iters / kCollectivePasses calls, and keeps the median over
    // passes: a slow spell of a shared machine then costs one sample of each
    // size it overlaps instead of all samples of the sizes timed during it,
    // which bent the curve a plan's collectives are read off (the GEMM
    // sweep below does the same, for the same reason).
    constexpr int kCollectivePasses = 5;
    const int calls = std::max(1, cfg.iters / kCollectivePasses);
    std::vector<int64_t> sizes;
    for (int64_t bytes = cfg.min_bytes; bytes <= cfg.max_bytes; bytes *= cfg.factor) {
      const int64_t unit = 4 * static_cast<int64_t>(n);  // float elements, divisible by ranks
      const int64_t size = std::max(unit, bytes / unit * unit);
      if (!have_sample(*cal, c, inter, n, size) && (sizes.empty() || sizes.back() != size)) sizes.push_back(size);
    }
    std::vector<std::vector<double>> passes(sizes.size());
    for (int pass = 0; pass < kCollectivePasses; ++pass) {
      for (size_t i = 0; i < sizes.size(); ++i) {
        if (pass == 0) {
          for (int w = 0; w < cfg.warmup; ++w) comm.run(c, sizes[i]);
        }
        passes[i].push_back(time_collective(backend, comm, c, sizes[i], calls, clock));
      }
    }
    double busbw_sum = 0;
    int rows = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      const int64_t size = sizes[i];
      std::vector<double>& p = passes[i];
      std::sort(p.begin(), p.end());
      const double t = p[p.size() / 2];
      int64_t wrong = cfg.check ? comm.check(c, size) : 0;
      wrong = static_cast<int64_t>(comm.max(static_cast<double>(wrong)));
      *wrong_total += wrong;
      const double algbw = static_cast<double>(size) / t * 1e-9;
      const double busbw = algbw * bus_bandwidth_factor(c, n);
      busbw_sum += busbw;
      ++rows;
      cal->collective_samples.push_back(CollectiveSample{c, inter, n, size, t, wrong});
      if (print) {
        if (cfg.json) {
          std::fprintf(out,
                       "{\"collective\": \"%s\", \"scope\": \"%s\", \"ranks\": %d, \"size\": %lld, \"count\": %lld, "
                       "\"type\": \"float\", \"redop\": \"%s\", \"root\": %d, \"time\": %.3f, \"algbw\": %.4f, "
                       "\"busbw\": %.4f, \"wrong\": %lld}\n",
                       collective_file_name(c), inter ? "inter" : "intra", n, static_cast<long long>(size),
                       static_cast<long long>(size / 4), redop_of(c), root_of(c), t * 1e6, algbw, busbw,
                       static_cast<long long>(wrong));
        } else {
          std::fprintf(out, "  %10lld  %12lld  %8s  %6s  %6d  %7.2f  %6.2f  %6.2f  %6lld\n",
                       static_cast<long long>(size), static_cast<long long>(size / 4), "float", redop_of(c), root_of(c),
                       t * 1e6, algbw, busbw, static_cast<long long>(wrong));
        }
        std::fflush(out);
      }
    }
    if (print && !cfg.json && rows > 0) std::fprintf(out, "# Avg bus bandwidth    : %g\n", busbw_sum / rows);
    if (print) checkpoint(*cal);
  }
}

}  // namespace

std::vector<std::array<int64_t, 3>> training_gemm_shapes(const std::vector<ModelSpec>& models,
                                                         const std::vector<int64_t>& mbs, int64_t seq,
                                                         double max_flops) {
  std::set<std::array<int64_t, 3>> shapes;
  auto add = [&](int64_t m, int64_t n, int64_t k) {
    if (m > 0 && n > 0 && k > 0 && 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) <= max_flops) {
      shapes.insert({m, n, k});
    }
  };
  for (const ModelSpec& model : models) {
    for (int tp : {1, 2, 4, 8}) {
      if (model.heads % tp != 0 || model.kv_heads % tp != 0 || model.ffn_hidden % tp != 0 || model.vocab % tp != 0) continue;
      for (int64_t b : mbs) {
        LayerShape s;
        s.tp = tp;
        s.mbs = b;
        s.seq = seq > 0 ? seq : model.seq_len;
        std::vector<LayerCost> costs = {transformer_layer_cost(model, s), output_cost(model, s)};
        // MoE layers: the expert GEMMs' rows depend on ep (each rank runs
        // its experts on the tokens routed to them from the ep group).
        for (int ep : {1, 2, 4, 8}) {
          if (!model.has_moe || model.moe.experts % ep != 0) continue;
          LayerShape e = s;
          e.ep = ep;
          e.etp = 1;
          costs.push_back(transformer_layer_cost(model, e, true));
        }
        for (const LayerCost& lc : costs) {
          for (const OpCost& op : lc.ops) {
            if (op.kind != OpKind::kGemm && op.kind != OpKind::kAttention) continue;
            add(op.m, op.n, op.k);  // forward
            add(op.m, op.k, op.n);  // data gradient
            add(op.n, op.k, op.m);  // weight gradient
          }
        }
      }
    }
  }
  for (int64_t m : {256, 1024, 4096}) {
    for (int64_t n : {256, 1024, 4096}) {
      for (int64_t k : {256, 1024, 4096}) add(m, n, k);
    }
  }
  return {shapes.begin(), shapes.end()};
}

int64_t run_sweep(Backend& backend, const SweepConfig& cfg, Calibration* cal, std::FILE* out,
                  const std::function<void(const Calibration&)>& checkpoint) {
  Communicator& world = backend.world();
  const bool print = world.rank() == 0;
  // Ranks on the same host form the intra-node communicator, or the given
  // blocks of consecutive ranks (SweepConfig::ranks_per_node).
  char host[256] = {0};
  gethostname(host, sizeof host - 1);
  const int color = cfg.ranks_per_node > 0 ? world.rank() / cfg.ranks_per_node
                                           : static_cast<int>(std::hash<std::string>{}(host) & 0x3fffffff);
  std::unique_ptr<Communicator> local = backend.split(color, world.rank());
  const int nodes = static_cast<int>(world.max(static_cast<double>(world.size() / local->size())));
  cal->ranks = world.size();
  cal->nodes = nodes;
  int64_t wrong = 0;
  if (print && !cfg.json) {
    std::fprintf(out, "# trainplan calibrate: backend %s (%s)\n", backend.name().c_str(), backend.versions().c_str());
    std::fprintf(out,
                 "# nRanks %d nNodes %d minBytes %lld maxBytes %lld step: %d(factor) warmup iters: %d iters: %d "
                 "validation: %d\n#\n# Using devices\n",
                 world.size(), nodes, static_cast<long long>(cfg.min_bytes), static_cast<long long>(cfg.max_bytes),
                 cfg.factor, cfg.warmup, cfg.iters, cfg.check ? 1 : 0);
    const DeviceInfo d = backend.device();
    std::fprintf(out, "#  Rank %2d Pid %6d on %10s device [%s] %s\n", world.rank(), static_cast<int>(getpid()), host,
                 d.bus_id.c_str(), d.name.c_str());
    if (world.size() > 1) std::fprintf(out, "#  (ranks 1-%d: same launch, one device each)\n", world.size() - 1);
  }
  if (world.size() > 1) {
    if (nodes > 1) {
      sweep_collectives(backend, world, true, cfg, cal, out, print, &wrong, checkpoint);
      sweep_collectives(backend, *local, false, cfg, cal, out, print, &wrong, checkpoint);
    } else {
      sweep_collectives(backend, world, false, cfg, cal, out, print, &wrong, checkpoint);
    }
  }
  // GEMMs and copies: every rank measures its own device; rank 0 records.
  if (print && !cfg.json && !cfg.gemm_shapes.empty()) {
    std::fprintf(out, "#\n# GEMM sweep: %zu shapes, dtype %s\n# %7s %7s %7s %6s %10s %10s\n# %7s %7s %7s %6s %10s %10s\n",
                 cfg.gemm_shapes.size(), cfg.gemm_dtype.c_str(), "m", "n", "k", "dtype", "time", "rate", "", "", "", "",
                 "(us)", "(TFLOP/s)");
  }
  std::set<std::array<int64_t, 3>> done;
  for (const GemmSample& g : cal->gemm_samples) {
    if (g.dtype == cfg.gemm_dtype) done.insert({g.m, g.n, g.k});
  }
  // Each shape is timed once per pass over all shapes, kGemmPasses passes,
  // and keeps the median over passes.  A slow spell of a shared machine
  // (another job, a clock change, a noisy neighbour's steal time) then costs
  // one sample of every shape it overlaps, instead of all samples of the
  // shapes swept during it: timed shape after shape, such a spell bent the
  // table's shape dependence (the shapes swept early came out 30% less
  // efficient than their neighbours swept after it), and a plan whose GEMMs
  // fell on the other side was predicted 30% fast.  Each batch's time is the
  // slowest rank's.
  constexpr int kGemmPasses = 5;
  const std::function<double()> clock = cfg.clock ? cfg.clock : std::function<double()>(now_s);
  std::vector<std::array<int64_t, 3>> todo;
  for (const auto& s : cfg.gemm_shapes) {
    if (!done.count(s)) todo.push_back(s);
  }
  std::vector<std::vector<double>> batches(todo.size());
  for (int pass = 0; pass < kGemmPasses; ++pass) {
    for (size_t i = 0; i < todo.size(); ++i) {
      const auto& s = todo[i];
      auto op = [&] { backend.gemm(s[0], s[1], s[2], cfg.gemm_dtype); };
      if (pass == 0) op();  // warm-up: allocation, the library's kernel choice
      batches[i].push_back(world.max(batch_time(op, cfg.gemm_min_time_s / kGemmPasses, clock)));
    }
  }
  for (size_t i = 0; i < todo.size(); ++i) {
    const auto& s = todo[i];
    std::vector<double>& b = batches[i];
    std::sort(b.begin(), b.end());
    GemmSample g{s[0], s[1], s[2], cfg.gemm_dtype, b[b.size() / 2]};
    cal->gemm_samples.push_back(g);
    // Keep partial results: a sweep cut short after its passes resumes
    // with the shapes not yet recorded.
    if (print && cal->gemm_samples.size() % 16 == 0) checkpoint(*cal);
    if (print) {
      if (cfg.json) {
        std::fprintf(out, "{\"gemm\": [%lld, %lld, %lld], \"dtype\": \"%s\", \"time\": %.3f, \"tflops\": %.4f}\n",
                     static_cast<long long>(s[0]), static_cast<long long>(s[1]), static_cast<long long>(s[2]),
                     cfg.gemm_dtype.c_str(), g.time_s * 1e6, g.flop_per_s() * 1e-12);
      } else {
        std::fprintf(out, "  %7lld %7lld %7lld %6s %10.2f %10.4f\n", static_cast<long long>(s[0]),
                     static_cast<long long>(s[1]), static_cast<long long>(s[2]), cfg.gemm_dtype.c_str(), g.time_s * 1e6,
                     g.flop_per_s() * 1e-12);
      }
    }
  }
  if (print) checkpoint(*cal);
  if (print && !cfg.json && !cfg.copy_sizes.empty()) {
    std::fprintf(out, "#\n# Memory copy sweep\n# %10s %10s %10s\n# %10s %10s %10s\n", "size", "time", "traffic", "(B)",
                 "(us)", "(GB/s)");
  }
  std::set<int64_t> copied;
  for (const CopySample& s : cal->copy_samples) copied.insert(s.bytes);
  for (int64_t bytes : cfg.copy_sizes) {
    if (copied.count(bytes)) continue;
    backend.copy(bytes);
    CopySample c{bytes, world.max(cold_median_time(backend, [&] { backend.copy(bytes); }, 15))};
    cal->copy_samples.push_back(c);
    if (print && !cfg.json) {
      std::fprintf(out, "  %10lld %10.2f %10.2f\n", static_cast<long long>(bytes), c.time_s * 1e6,
                   2.0 * static_cast<double>(bytes) / c.time_s * 1e-9);
    }
  }
  if (print) checkpoint(*cal);
  return wrong;
}

}  // namespace trainplan
