#include "simulator/faults/stragglers.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include "simulator/core/error.h"
#include "simulator/core/spec_items.h"
#include "simulator/engine/engine.h"
#include "simulator/taskgraph/lowering.h"

namespace trainplan {

const char* const kStragglerGrammar =
    "allowed: comma-separated jitter=DIST, op_jitter=DIST, slow_gpus=P:F, slow_nodes=P:F, degraded_link=P:F, "
    "degraded_nvlink=P:F, slow_rank=R:F "
    "with DIST one of lognormal:SIGMA, normal:SIGMA, uniform:LO:HI, exp:MEAN "
    "(e.g. jitter=lognormal:0.05,slow_nodes=0.01:1.5,degraded_link=0.02:0.5)";

namespace {

std::vector<std::string> split(const std::string& text, char sep) { return split_on(text, sep); }

double number(const std::string& text, const std::string& flag, const std::string& item) {
  return spec_number(text, flag, item, kStragglerGrammar);
}

constexpr const char* kDistributions = "allowed: lognormal:SIGMA, normal:SIGMA, uniform:LO:HI, exp:MEAN";

void in_range(double v, double lo, double hi, bool lo_open, const std::string& flag, const std::string& item,
              const std::string& what, const std::string& hint) {
  const bool ok = (lo_open ? v > lo : v >= lo) && v <= hi;
  if (ok) return;
  std::ostringstream s;
  s << item << ": " << what << " " << v << " is not in " << (lo_open ? "(" : "[") << lo << ", " << hi << "]";
  throw_input_error(flag, "", s.str(), hint);
}

SlowdownDistribution parse_distribution(const std::string& value, const std::string& flag, const std::string& item) {
  const std::vector<std::string> p = split(value, ':');
  SlowdownDistribution d;
  const std::string kind = p.empty() ? "" : p[0];
  auto want = [&](size_t n, const char* form) {
    if (p.size() != n) {
      throw_input_error(flag, "", item + ": expected " + form, kDistributions);
    }
  };
  if (kind == "lognormal" || kind == "normal") {
    want(2, kind == "lognormal" ? "lognormal:SIGMA" : "normal:SIGMA");
    d.kind = kind == "lognormal" ? SlowdownDistribution::Kind::kLognormal : SlowdownDistribution::Kind::kNormal;
    d.a = number(p[1], flag, item);
    in_range(d.a, 0, 2, false, flag, item, "SIGMA", "e.g. " + kind + ":0.05 for 5% jitter");
  } else if (kind == "uniform") {
    want(3, "uniform:LO:HI");
    d.kind = SlowdownDistribution::Kind::kUniform;
    d.a = number(p[1], flag, item);
    d.b = number(p[2], flag, item);
    in_range(d.a, 0, 100, true, flag, item, "LO", "e.g. uniform:0.95:1.1");
    in_range(d.b, d.a, 100, false, flag, item, "HI", "HI must be >= LO, e.g. uniform:0.95:1.1");
  } else if (kind == "exp") {
    want(2, "exp:MEAN");
    d.kind = SlowdownDistribution::Kind::kExponential;
    d.a = number(p[1], flag, item);
    in_range(d.a, 0, 100, false, flag, item, "MEAN", "e.g. exp:0.02 for hiccups adding 2% on average");
  } else {
    throw_input_error(flag, "", item + ": unknown distribution \"" + value + "\"", kDistributions);
  }
  return d;
}

SlowFraction parse_fraction(const std::string& value, const std::string& flag, const std::string& item, bool link) {
  const std::vector<std::string> p = split(value, ':');
  const std::string form = link ? "P:F with F the bandwidth fraction, e.g. " + item.substr(0, item.find('=')) + "=0.02:0.5"
                                : "P:F with F the slowdown factor, e.g. " + item.substr(0, item.find('=')) + "=0.01:1.5";
  if (p.size() != 2) throw_input_error(flag, "", item + ": expected " + form, kStragglerGrammar);
  SlowFraction f;
  f.probability = number(p[0], flag, item);
  f.factor = number(p[1], flag, item);
  in_range(f.probability, 0, 1, false, flag, item, "probability P", form);
  if (link) {
    in_range(f.factor, 0, 1, true, flag, item, "bandwidth fraction F", form);
  } else {
    in_range(f.factor, 1, 100, false, flag, item, "slowdown factor F", form);
  }
  return f;
}

// Standard normal survival function P(Z > z), accurate in the tail.
double normal_sf(double z) { return 0.5 * std::erfc(z / std::sqrt(2.0)); }

// P(factor > x).
double survival(const SlowdownDistribution& d, double x) {
  using K = SlowdownDistribution::Kind;
  switch (d.kind) {
    case K::kNone: return x < 1 ? 1.0 : 0.0;
    case K::kLognormal:
      if (x <= 0) return 1.0;
      if (d.a == 0) return x < 1 ? 1.0 : 0.0;
      return normal_sf((std::log(x) + d.a * d.a / 2) / d.a);
    case K::kNormal:
      if (x < 0.1) return 1.0;
      if (d.a == 0) return x < 1 ? 1.0 : 0.0;
      return normal_sf((x - 1) / d.a);
    case K::kUniform:
      if (x < d.a) return 1.0;
      if (x >= d.b) return 0.0;
      return (d.b - x) / (d.b - d.a);
    case K::kExponential:
      if (x < 1) return 1.0;
      if (d.a == 0) return 0.0;
      return std::exp(-(x - 1) / d.a);
  }
  return 0.0;
}

// The lowest value of the support (the integrand 1 - F^n is 1 below it).
double support_low(const SlowdownDistribution& d) {
  using K = SlowdownDistribution::Kind;
  switch (d.kind) {
    case K::kNone: return 1;
    case K::kLognormal: return 0;
    case K::kNormal: return 0.1;
    case K::kUniform: return d.a;
    case K::kExponential: return 1;
  }
  return 0;
}

// A simulated rank group that runs in lock-step within a layer (TP x CP peers
// of one pipeline stage and DP replica), and the GPUs it covers.
struct RankGroup {
  std::vector<int32_t> sim_ranks;
  std::vector<int> gpus;  // global GPU ids
};

std::vector<RankGroup> rank_groups(const LoweredStep& step, const Layout& layout, bool async) {
  const Plan& p = layout.plan;
  std::vector<RankGroup> groups;
  if (async) {
    // One simulated rank per DP worker (pp = 1): it covers its TP x CP GPUs.
    for (size_t r = 0; r < step.ranks.size(); ++r) {
      RankGroup g;
      g.sim_ranks.push_back(static_cast<int32_t>(r));
      for (int k = 0; k < p.tp * p.cp; ++k) g.gpus.push_back(step.ranks[r].global + k);
      groups.push_back(std::move(g));
    }
    return groups;
  }
  // Full mode: simulated rank i covers global ranks [global, global +
  // gpus_per_rank) (lowering.h), in global order, tp innermost.
  const int gpr = step.gpus_per_rank;
  const int per = p.tp * p.cp / gpr;
  TRAINPLAN_CHECK(per >= 1 && static_cast<int>(step.ranks.size()) * gpr == layout.gpus &&
                      static_cast<int>(step.ranks.size()) % per == 0,
                  "full mode must simulate every rank");
  for (size_t first = 0; first < step.ranks.size(); first += static_cast<size_t>(per)) {
    RankGroup g;
    for (int k = 0; k < per; ++k) {
      g.sim_ranks.push_back(static_cast<int32_t>(first) + k);
      for (int j = 0; j < gpr; ++j) g.gpus.push_back(step.ranks[first + static_cast<size_t>(k)].global + j);
    }
    groups.push_back(std::move(g));
  }
  return groups;
}

double quantile_sorted(const std::vector<double>& v, double q) {
  if (v.empty()) return 0;
  const size_t i = std::min(v.size() - 1, static_cast<size_t>(q * static_cast<double>(v.size())));
  return v[i];
}

// Updates applied at the servers between a worker's pull and the application
// of its push, one value per iteration (start-up iterations excluded); the
// same definition as the step report's (report/step_report.h).
std::vector<double> async_staleness(const LoweredStep& step, const EngineResult& r) {
  std::vector<int64_t> update_end;
  for (const AsyncIteration& it : step.async) update_end.push_back(r.times[static_cast<size_t>(it.update)].end_ps);
  std::vector<int64_t> sorted = update_end;
  std::sort(sorted.begin(), sorted.end());
  std::vector<double> values;
  for (size_t i = 0; i < step.async.size(); ++i) {
    const AsyncIteration& it = step.async[i];
    if (it.previous_pull < 0) continue;
    const int64_t pulled_at = r.times[static_cast<size_t>(it.previous_pull)].start_ps;
    // Updates finished before the pull started = the version the worker read;
    // updates finished before this one = its position in the order.
    const auto version = std::upper_bound(sorted.begin(), sorted.end(), pulled_at) - sorted.begin();
    const auto position = std::lower_bound(sorted.begin(), sorted.end(), update_end[i]) - sorted.begin();
    values.push_back(static_cast<double>(std::max<std::ptrdiff_t>(0, position - version)));
  }
  return values;
}

Staleness summarize_staleness(std::vector<double> values) {
  Staleness s;
  if (values.empty()) return s;
  std::sort(values.begin(), values.end());
  double sum = 0;
  for (double v : values) sum += v;
  s.samples = static_cast<int>(values.size());
  s.mean = sum / static_cast<double>(values.size());
  s.p90 = quantile_sorted(values, 0.9);
  s.max = values.back();
  return s;
}

// What one simulated step gives.
struct SampleResult {
  double step_s = 0;
  double busy_fraction = 0;
  std::vector<double> arrival_std_s, arrival_range_s;
  std::vector<double> staleness;
};

class StragglerSimulator {
 public:
  StragglerSimulator(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                     const StragglerOptions& options)
      : layout_(layout), opt_(options) {
    LoweringOptions lo = lowering_options(options.simulate);
    lo.representative = false;
    step_ = lower_step(model, cluster, layout, lo);
    async_ = !step_.async.empty();
    groups_ = rank_groups(step_, layout, async_);
    gpus_per_node_ = cluster.gpus_per_node;
    const TaskGraph& g = step_.graph;
    original_rate_.assign(static_cast<size_t>(g.size()), 0);
    for (int32_t id = 0; id < g.size(); ++id) original_rate_[static_cast<size_t>(id)] = g.task(id).max_rate;
    // Gradient synchronisations and the compute tasks they wait for.
    for (int32_t id = 0; id < g.size(); ++id) {
      const Task& t = g.task(id);
      if (t.type != TaskType::kCompute) continue;
      const uint32_t* s = g.successors(t);
      for (uint32_t k = 0; k < t.succ_count; ++k) {
        const Task& n = g.task(static_cast<int32_t>(s[k]));
        if (n.type == TaskType::kComm &&
            (n.label == TaskLabel::kDpAllReduce || n.label == TaskLabel::kDpReduceScatter)) {
          sync_arrivals_.emplace_back(static_cast<int32_t>(s[k]), id);
        }
      }
    }
    std::sort(sync_arrivals_.begin(), sync_arrivals_.end());
  }

  SampleResult run(bool with_stragglers, uint64_t sample) {
    TaskGraph& g = step_.graph;
    EngineOptions eo;
    eo.comm_slowdown = step_.comm_slowdown;
    eo.static_bytes = step_.static_bytes;
    std::vector<float> scale;
    if (with_stragglers) {
      scale = draw_work_scale(sample);
      draw_link_rates(sample);
      eo.work_scale = scale;
    } else {
      restore_link_rates();
    }
    FlowNetwork network = step_.network;
    EngineResult r = run_engine(g, network, eo);
    restore_link_rates();
    SampleResult out;
    out.step_s = async_ ? async_step_s(r) : static_cast<double>(r.makespan_ps) * 1e-12;
    // Busy share: the compute part of each compute task.
    double busy = 0;
    for (int32_t id = 0; id < g.size(); ++id) {
      const Task& t = g.task(id);
      if (t.type != TaskType::kCompute || t.work_ps <= 0) continue;
      const double f = scale.empty() ? 1.0 : static_cast<double>(scale[static_cast<size_t>(id)]);
      const double work = static_cast<double>(t.work_ps) * f;
      const double compute = work - static_cast<double>(t.tp_comm_ps + t.ep_comm_ps);
      const TaskTime& tt = r.times[static_cast<size_t>(id)];
      busy += static_cast<double>(tt.end_ps - tt.start_ps) * std::max(0.0, compute) / work;
    }
    out.busy_fraction = busy / (static_cast<double>(r.makespan_ps) * static_cast<double>(g.ranks));
    // Arrival spread at each gradient synchronisation.
    for (size_t i = 0; i < sync_arrivals_.size();) {
      size_t j = i;
      double sum = 0, sum2 = 0, lo = 1e300, hi = -1e300;
      while (j < sync_arrivals_.size() && sync_arrivals_[j].first == sync_arrivals_[i].first) {
        const double t = static_cast<double>(r.times[static_cast<size_t>(sync_arrivals_[j].second)].end_ps) * 1e-12;
        sum += t;
        sum2 += t * t;
        lo = std::min(lo, t);
        hi = std::max(hi, t);
        ++j;
      }
      const double n = static_cast<double>(j - i);
      if (n >= 2) {
        const double mean = sum / n;
        out.arrival_std_s.push_back(std::sqrt(std::max(0.0, sum2 / n - mean * mean)));
        out.arrival_range_s.push_back(hi - lo);
      }
      i = j;
    }
    if (async_) out.staleness = async_staleness(step_, r);
    return out;
  }

  bool async() const { return async_; }

  // Async: time per gbs tokens at the rate the servers apply updates while
  // every worker is still running (up to the first worker's last update): a
  // fixed number of iterations per worker would make the run as slow as its
  // slowest worker, which async training is not.  Each update carries
  // gbs / dp sequences.
  double async_step_s(const EngineResult& r) const {
    std::vector<int64_t> last(static_cast<size_t>(step_.graph.ranks), 0);
    std::vector<int64_t> ends;
    for (const AsyncIteration& it : step_.async) {
      const int64_t e = r.times[static_cast<size_t>(it.update)].end_ps;
      last[static_cast<size_t>(it.worker)] = std::max(last[static_cast<size_t>(it.worker)], e);
      ends.push_back(e);
    }
    const int64_t horizon = *std::min_element(last.begin(), last.end());
    const double updates = static_cast<double>(std::count_if(ends.begin(), ends.end(), [&](int64_t e) { return e <= horizon; }));
    const double workers = static_cast<double>(step_.graph.ranks);
    return static_cast<double>(horizon) * 1e-12 * workers / updates;
  }
  int simulated_ranks() const { return step_.graph.ranks; }
  int async_iterations() const { return step_.async_iterations; }

 private:
  // Per-GPU factors of one sample: the persistent part (slow GPU x slow
  // node) and the per-step jitter.  Each kind has its own stream, so adding
  // an item to the spec leaves the other draws unchanged.
  struct GpuFactors {
    std::vector<double> persistent, jitter;
  };
  GpuFactors gpu_factors(uint64_t sample) const {
    const StragglerSpec& s = opt_.spec;
    const int gpus = layout_.gpus;
    const int nodes = std::max(1, (gpus + gpus_per_node_ - 1) / gpus_per_node_);
    const uint64_t base = derive_seed(opt_.seed, RngStream::kStragglers, sample);
    Rng jitter(derive_seed(base, 1)), slow_gpu(derive_seed(base, 2)), slow_node(derive_seed(base, 3));
    std::vector<double> node_factor(static_cast<size_t>(nodes), 1.0);
    if (s.slow_nodes.probability > 0) {
      for (double& f : node_factor) {
        if (slow_node.bernoulli(s.slow_nodes.probability)) f = s.slow_nodes.factor;
      }
    }
    GpuFactors f;
    f.persistent.assign(static_cast<size_t>(gpus), 1.0);
    f.jitter.assign(static_cast<size_t>(gpus), 1.0);
    for (int gpu = 0; gpu < gpus; ++gpu) {
      double x = node_factor[static_cast<size_t>(gpu / gpus_per_node_)];
      if (s.slow_gpus.probability > 0 && slow_gpu.bernoulli(s.slow_gpus.probability)) x *= s.slow_gpus.factor;
      if (gpu == s.slow_rank) x *= s.slow_rank_factor;
      f.persistent[static_cast<size_t>(gpu)] = x;
      if (s.jitter.kind != SlowdownDistribution::Kind::kNone) f.jitter[static_cast<size_t>(gpu)] = s.jitter.sample(jitter);
    }
    return f;
  }

  // Per task, the factor of its lock-step group: the max over the group's
  // GPUs of persistent x jitter x op jitter.  Sync: the jitter is drawn once
  // per step; async: each task is one iteration (a worker's step), so the
  // jitter is drawn per task.
  std::vector<float> draw_work_scale(uint64_t sample) const {
    const TaskGraph& g = step_.graph;
    const StragglerSpec& spec = opt_.spec;
    const GpuFactors gf = gpu_factors(sample);
    const bool op = spec.op_jitter.kind != SlowdownDistribution::Kind::kNone;
    const bool per_task_jitter = async_ && spec.jitter.kind != SlowdownDistribution::Kind::kNone;
    const uint64_t base = derive_seed(opt_.seed, RngStream::kStragglers, sample);
    Rng op_rng(derive_seed(base, 4)), iteration_rng(derive_seed(base, 6));
    std::vector<float> scale(static_cast<size_t>(g.size()), 1.0f);
    const std::vector<double> nvlink = nvlink_fractions(sample);
    for (const RankGroup& grp : groups_) {
      // The group's TP x CP traffic runs at its slowest node's fabric.
      double fabric = 1.0;
      for (int gid : grp.gpus) fabric = std::min(fabric, nvlink[static_cast<size_t>(gid / gpus_per_node_)]);
      const size_t tasks = g.program[static_cast<size_t>(grp.sim_ranks.front())].size();
      for (int32_t r : grp.sim_ranks) {
        TRAINPLAN_CHECK(g.program[static_cast<size_t>(r)].size() == tasks, "lock-step group with unequal programs");
      }
      for (size_t k = 0; k < tasks; ++k) {
        double f = 0;
        for (int gid : grp.gpus) {
          const size_t gi = static_cast<size_t>(gid);
          double x = gf.persistent[gi] * (per_task_jitter ? spec.jitter.sample(iteration_rng) : gf.jitter[gi]);
          if (op) x *= spec.op_jitter.sample(op_rng);
          f = std::max(f, x);
        }
        for (int32_t r : grp.sim_ranks) {
          const int32_t id = g.program[static_cast<size_t>(r)][k];
          const Task& t = g.task(id);
          if (t.work_ps <= 0) continue;
          // Stretch the compute part by f and the in-layer communication by
          // 1 / fabric: work' = (work - tp) f + tp / fabric.
          const double work = static_cast<double>(t.work_ps), tp = static_cast<double>(t.tp_comm_ps + t.ep_comm_ps);
          scale[static_cast<size_t>(id)] = static_cast<float>(((work - tp) * f + tp / fabric) / work);
        }
      }
    }
    return scale;
  }

  int nodes() const { return std::max(1, (layout_.gpus + gpus_per_node_ - 1) / gpus_per_node_); }

  // Per node, the fraction of its GPU-to-GPU fabric it runs at (stream 7).
  std::vector<double> nvlink_fractions(uint64_t sample) const {
    const SlowFraction& d = opt_.spec.degraded_nvlink;
    std::vector<double> f(static_cast<size_t>(nodes()), 1.0);
    if (d.probability <= 0) return f;
    Rng rng(derive_seed(derive_seed(opt_.seed, RngStream::kStragglers, sample), 7));
    for (double& x : f) {
      if (rng.bernoulli(d.probability)) x = d.factor;
    }
    return f;
  }

  // Caps the rate of every inter-node transfer touching a degraded network
  // port, and of every transfer inside a node with a degraded fabric.
  void draw_link_rates(uint64_t sample) {
    const SlowFraction& d = opt_.spec.degraded_link;
    const bool nv = opt_.spec.degraded_nvlink.probability > 0;
    if (d.probability <= 0 && !nv) return;
    TaskGraph& g = step_.graph;
    Rng rng(derive_seed(derive_seed(opt_.seed, RngStream::kStragglers, sample), 5));
    std::vector<double> link(static_cast<size_t>(nodes()), 1.0);
    if (d.probability > 0) {
      for (double& f : link) {
        if (rng.bernoulli(d.probability)) f = d.factor;
      }
    }
    const std::vector<double> nvlink = nvlink_fractions(sample);
    if (touched_nodes_.empty()) build_touched_nodes();
    for (int32_t id = 0; id < g.size(); ++id) {
      const Task& t = g.task(id);
      const auto& nodes_of = touched_nodes_[static_cast<size_t>(id)];
      double f = 1.0;
      for (int n : nodes_of) f = std::min(f, link[static_cast<size_t>(n)]);
      if (nv && t.type == TaskType::kComm && nodes_of.empty() && t.member_count > 0) {
        f = std::min(f, nvlink[static_cast<size_t>(step_.ranks[static_cast<size_t>(g.members(t)[0])].node)]);
      }
      g.task(id).max_rate = original_rate_[static_cast<size_t>(id)] * f;
    }
  }

  // Per comm task, the nodes whose network ports it crosses (empty when it
  // stays inside a node): its members and the ranks that wait for it.
  void build_touched_nodes() {
    const TaskGraph& g = step_.graph;
    touched_nodes_.assign(static_cast<size_t>(g.size()), {});
    auto node_of = [&](int32_t sim_rank) { return step_.ranks[static_cast<size_t>(sim_rank)].node; };
    for (int32_t id = 0; id < g.size(); ++id) {
      const Task& t = g.task(id);
      if (t.type != TaskType::kComm) continue;
      std::set<int> nodes;
      const int32_t* m = g.members(t);
      for (uint32_t k = 0; k < t.member_count; ++k) nodes.insert(node_of(m[k]));
      const uint32_t* s = g.successors(t);
      for (uint32_t k = 0; k < t.succ_count; ++k) {
        const Task& n = g.task(static_cast<int32_t>(s[k]));
        if (n.type == TaskType::kCompute) nodes.insert(node_of(n.rank));
      }
      // Parameter-server traffic always leaves the node.
      const bool ps = t.label == TaskLabel::kPsPush || t.label == TaskLabel::kPsPull;
      if (nodes.size() > 1 || ps) touched_nodes_[static_cast<size_t>(id)].assign(nodes.begin(), nodes.end());
    }
  }

  void restore_link_rates() {
    TaskGraph& g = step_.graph;
    for (int32_t id = 0; id < g.size(); ++id) g.task(id).max_rate = original_rate_[static_cast<size_t>(id)];
  }

  const Layout& layout_;
  const StragglerOptions& opt_;
  LoweredStep step_;
  bool async_ = false;
  int gpus_per_node_ = 1;
  std::vector<RankGroup> groups_;
  std::vector<double> original_rate_;
  std::vector<std::vector<int>> touched_nodes_;
  std::vector<std::pair<int32_t, int32_t>> sync_arrivals_;  // (sync task, compute task it waits for)
};

ArrivalSpread spread_of(const std::vector<double>& stds, std::vector<double> ranges) {
  ArrivalSpread a;
  a.syncs = static_cast<int>(ranges.size());
  if (ranges.empty()) return a;
  double s = 0, r = 0;
  for (double v : stds) s += v;
  for (double v : ranges) r += v;
  a.std_mean_s = s / static_cast<double>(stds.size());
  a.range_mean_s = r / static_cast<double>(ranges.size());
  std::sort(ranges.begin(), ranges.end());
  a.range_p90_s = quantile_sorted(ranges, 0.9);
  a.range_max_s = ranges.back();
  return a;
}

}  // namespace

double SlowdownDistribution::sample(Rng& rng) const {
  switch (kind) {
    case Kind::kNone: return 1.0;
    case Kind::kLognormal: return rng.lognormal(-a * a / 2, a);
    case Kind::kNormal: return std::max(0.1, 1.0 + a * rng.normal());
    case Kind::kUniform: return rng.uniform(a, b);
    case Kind::kExponential: return 1.0 + a * rng.exponential(1.0);
  }
  return 1.0;
}

bool SlowdownDistribution::mean_at_least_one() const {
  // lognormal: mean exactly 1; normal: E[max(0.1, 1 + sigma Z)] >= 1;
  // exponential: 1 + mean; uniform: (lo + hi) / 2.
  return kind != Kind::kUniform || a + b >= 2.0;
}

double SlowdownDistribution::cdf(double x) const { return 1.0 - survival(*this, x); }

std::string SlowdownDistribution::describe() const {
  std::ostringstream s;
  switch (kind) {
    case Kind::kNone: return "none";
    case Kind::kLognormal: s << "lognormal:" << a; break;
    case Kind::kNormal: s << "normal:" << a; break;
    case Kind::kUniform: s << "uniform:" << a << ":" << b; break;
    case Kind::kExponential: s << "exp:" << a; break;
  }
  return s.str();
}

StragglerSpec parse_straggler_spec(const std::string& text, const std::string& flag) {
  StragglerSpec spec;
  spec.text = text;
  for (const SpecItem& si : spec_items(text, flag, kStragglerGrammar)) {
    const std::string &item = si.item, &key = si.key, &value = si.value;
    if (key == "jitter") {
      spec.jitter = parse_distribution(value, flag, item);
    } else if (key == "op_jitter") {
      spec.op_jitter = parse_distribution(value, flag, item);
    } else if (key == "slow_gpus") {
      spec.slow_gpus = parse_fraction(value, flag, item, false);
    } else if (key == "slow_nodes") {
      spec.slow_nodes = parse_fraction(value, flag, item, false);
    } else if (key == "degraded_link") {
      spec.degraded_link = parse_fraction(value, flag, item, true);
    } else if (key == "degraded_nvlink") {
      spec.degraded_nvlink = parse_fraction(value, flag, item, true);
    } else if (key == "slow_rank") {
      const std::vector<std::string> p = split(value, ':');
      const std::string form = "R:F with R a GPU's global rank and F its slowdown factor, e.g. slow_rank=3:1.5";
      if (p.size() != 2) throw_input_error(flag, "", item + ": expected " + form, kStragglerGrammar);
      const double r = number(p[0], flag, item);
      if (r != std::floor(r) || r < 0 || r > 1e9) {
        throw_input_error(flag, "", item + ": rank R \"" + p[0] + "\" is not a whole number >= 0", form);
      }
      spec.slow_rank = static_cast<int>(r);
      spec.slow_rank_factor = number(p[1], flag, item);
      in_range(spec.slow_rank_factor, 1, 100, false, flag, item, "slowdown factor F", form);
    } else {
      throw_input_error(flag, "", "unknown item \"" + key + "\"", kStragglerGrammar);
    }
  }
  return spec;
}

double expected_max(const SlowdownDistribution& d, int n) {
  TRAINPLAN_CHECK(n >= 1, "expected_max needs n >= 1");
  // 1 - F(x)^n = -expm1(n log1p(-S(x))), exact when S is tiny.
  auto tail = [&](double x) {
    const double s = survival(d, x);
    if (s >= 1.0) return 1.0;
    return -std::expm1(static_cast<double>(n) * std::log1p(-s));
  };
  // Below `lo` the integrand is 1 (to double precision), above `hi` it is 0.
  double lo = support_low(d), hi = std::max(lo, 1.0) * 2;
  while (tail(hi) > 1e-16 && hi < 1e6) hi *= 2;
  // Raise lo to where F(x)^n first exceeds 1e-18 (bisection; F is monotone).
  {
    double a = lo, b = hi;
    for (int i = 0; i < 200; ++i) {
      const double m = 0.5 * (a + b);
      if (1.0 - tail(m) < 1e-18) a = m; else b = m;
    }
    lo = a;
  }
  // Lower hi to where the tail first drops below 1e-16.
  {
    double a = lo, b = hi;
    for (int i = 0; i < 200; ++i) {
      const double m = 0.5 * (a + b);
      if (tail(m) > 1e-16) a = m; else b = m;
    }
    hi = b;
  }
  // Composite Simpson on [lo, hi]; the integrand is smooth there (a kink at
  // the support's ends only for uniform, exactly on the grid ends).
  const int intervals = 20000;
  const double h = (hi - lo) / intervals;
  double sum = tail(lo) + tail(hi);
  for (int i = 1; i < intervals; ++i) sum += tail(lo + i * h) * (i % 2 ? 4.0 : 2.0);
  return lo + sum * h / 3.0;
}

StragglerReport simulate_stragglers(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                                    const StragglerOptions& options) {
  TRAINPLAN_CHECK(layout.feasible, "stragglers of an infeasible layout");
  TRAINPLAN_CHECK(options.samples >= 1, "at least one sampled step");
  if (options.spec.slow_rank >= layout.gpus) {
    throw_input_error("--stragglers", "",
                      "slow_rank=" + std::to_string(options.spec.slow_rank) + ": the plan has " +
                          std::to_string(layout.gpus) + " GPUs",
                      "R from 0 to " + std::to_string(layout.gpus - 1));
  }
  StragglerSimulator sim(model, cluster, layout, options);
  StragglerReport rep;
  rep.samples = options.samples;
  rep.simulated_ranks = sim.simulated_ranks();
  rep.async = sim.async();
  const SampleResult base = sim.run(false, 0);
  rep.base_step_s = base.step_s;
  rep.base_busy_fraction = base.busy_fraction;
  rep.base_arrivals = spread_of(base.arrival_std_s, base.arrival_range_s);
  rep.base_staleness = summarize_staleness(base.staleness);
  std::vector<double> steps, stds, ranges;
  std::vector<double> staleness;
  double busy = 0;
  for (int s = 0; s < options.samples; ++s) {
    const SampleResult r = sim.run(true, static_cast<uint64_t>(s));
    steps.push_back(r.step_s);
    busy += r.busy_fraction;
    stds.insert(stds.end(), r.arrival_std_s.begin(), r.arrival_std_s.end());
    ranges.insert(ranges.end(), r.arrival_range_s.begin(), r.arrival_range_s.end());
    staleness.insert(staleness.end(), r.staleness.begin(), r.staleness.end());
  }
  double sum = 0;
  for (double v : steps) sum += v;
  rep.step_mean_s = sum / static_cast<double>(steps.size());
  std::sort(steps.begin(), steps.end());
  rep.step_p50_s = quantile_sorted(steps, 0.5);
  rep.step_p90_s = quantile_sorted(steps, 0.9);
  rep.step_max_s = steps.back();
  rep.tax = rep.step_mean_s / rep.base_step_s - 1;
  // Never below 0 where the step's expectation is known not to be (the
  // header's Jensen argument: a synchronous step, every factor >= 1 on
  // average; slow GPUs, nodes and links only slow down).
  if (!rep.async && options.spec.jitter.mean_at_least_one() && options.spec.op_jitter.mean_at_least_one() &&
      options.spec.slow_rank_factor >= 1) {
    rep.tax = std::max(0.0, rep.tax);
  }
  rep.busy_fraction = busy / options.samples;
  rep.arrivals = spread_of(stds, ranges);
  rep.jitter_max_tax = expected_max(options.spec.jitter, layout.gpus) - 1;
  if (rep.async) {
    const Plan& p = layout.plan;
    const double tokens = static_cast<double>(p.gbs) * static_cast<double>(p.seq);
    rep.base_tokens_per_s = tokens / rep.base_step_s;
    rep.tokens_per_s = tokens / rep.step_mean_s;
    rep.staleness = summarize_staleness(std::move(staleness));
  }
  return rep;
}

}  // namespace trainplan
