// Tests of the framework execution profiles (simulator/framework): each
// behaviour against its source's rule, checked on the lowered task graph or
// against a closed-form bound on the simulated step.
#include "simulator/framework/framework.h"

#include <map>
#include <string>
#include <utility>

#include <catch2/catch.hpp>

#include "simulator/compute/compute_model.h"
#include "simulator/memory/memory_model.h"
#include "simulator/network/collective_model.h"
#include "simulator/report/step_report.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/taskgraph/lowering.h"
#include "simulator/taskgraph/step_costs.h"
#include "tests/simulator/fixtures.h"

namespace trainplan {
namespace {

using Catch::Matchers::WithinRel;

struct Case {
  ModelSpec model = load_model("gpt3-1.3b");
  ClusterSpec cluster = load_cluster("dgx-a100");
  Plan plan;
  int gpus = 32;

  Layout layout(Framework f) const {
    Plan p = plan;
    p.framework = f;
    Layout L = resolve_plan(model, cluster, gpus, p);
    INFO((L.reasons.empty() ? std::string() : L.reasons.front()));
    REQUIRE(L.feasible);
    return L;
  }
  StepReport run(Framework f) const { return simulate_step(model, cluster, layout(f), SimulateOptions{}); }
  int count(Framework f, TaskLabel label) const {
    const LoweredStep s = lower_step(model, cluster, layout(f), LoweringOptions{});
    int n = 0;
    for (int32_t id = 0; id < s.graph.size(); ++id) n += s.graph.task(id).label == label;
    return n;
  }
};

// Seconds of compute-category work the lowered step gives one pipeline stage.
double stage_compute_s(const Case& c, Framework f, int stage) {
  const LoweredStep s = lower_step(c.model, c.cluster, c.layout(f), LoweringOptions{});
  double sum = 0;
  for (int32_t id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    if (t.type == TaskType::kCompute && t.category == Category::kCompute && s.ranks[t.rank].pp == stage) {
      sum += static_cast<double>(t.work_ps) * 1e-12;
    }
  }
  return sum;
}

// The closed form of a gradient-accumulation pass: `bytes` per parameter of
// `params` at the A100's achieved HBM rate plus one kernel overhead for each
// of `kernels` launches (the kernel overhead does not depend on the dtype).
double accumulation_pass_s(const Case& c, double bytes, double params, int kernels) {
  const double hbm = c.cluster.gpu.hbm_bandwidth.bytes_per_s() * c.cluster.gpu.hbm_efficiency;
  const double launch = compute_params(c.cluster, Precision::kBf16).kernel_overhead.s();
  return bytes * params / hbm + kernels * launch;
}

TEST_CASE("Framework: names and profiles follow their sources", "[sim][framework]") {
  CHECK(framework_names() ==
        std::vector<std::string>{"generic", "megatron-lm", "megatron-core", "deepspeed", "torchtitan", "pytorch"});
  Plan p;
  p.dp = 64;
  p.framework = Framework::kMegatronCore;
  // megatron/core/distributed/distributed_data_parallel.py: max(40M, 1M x dp).
  CHECK(execution_profile(p).grad_bucket_params == 64e6);
  p.dp = 8;
  CHECK(execution_profile(p).grad_bucket_params == 40e6);
  // deepspeed/runtime/zero/config.py: overlap_comm defaults to stage == 3.
  p.framework = Framework::kDeepSpeed;
  p.zero = 3;
  CHECK(execution_profile(p).grad_reduce == GradReduce::kOverlapped);
  p.zero = 1;
  CHECK(execution_profile(p).grad_reduce == GradReduce::kBlocking);
  CHECK(execution_profile(p).grad_bucket_params == 5e8);
  // PyTorch DDP bucket_cap_mb 25 with fp32 gradients.
  p.framework = Framework::kPytorch;
  CHECK(execution_profile(p).grad_bucket_params == 25.0 * 1024 * 1024 / 4);
}

TEST_CASE("Framework: Megatron-LM all-reduces the gradients after the backward", "[sim][framework]") {
  // Megatron-LM 2021 (train_step: allreduce_gradients after
  // forward_backward_func): nothing of the all-reduce hides behind the
  // backward, so the step is at least the compute plus one all-reduce of all
  // gradients (fp32, 4 B each) over the 32-rank DP group; PyTorch DDP's
  // bucketed overlap hides most of it.
  Case c;
  c.plan.gbs = 32;
  const StepReport lm = c.run(Framework::kMegatronLM);
  const StepReport ddp = c.run(Framework::kPytorch);
  const Layout L = c.layout(Framework::kMegatronLM);
  // One contiguous buffer: one all-reduce.
  CHECK(c.count(Framework::kMegatronLM, TaskLabel::kDpAllReduce) == 1);
  const double params = estimate_memory(c.model, c.cluster, L).stages[0].params;
  const double allreduce_s = static_cast<double>(collective_cost(Collective::kAllReduce,
                                                                 static_cast<Bytes>(4.0 * params),
                                                                 group_placement(32, 8, c.cluster),
                                                                 link_params(c.cluster))
                                                     .time.ps()) *
                             1e-12;
  CHECK(lm.step_time_s >= lm.breakdown.compute + 0.9 * allreduce_s);
  CHECK(ddp.step_time_s < lm.step_time_s - 0.5 * allreduce_s);
}

TEST_CASE("Framework: Megatron-Core overlaps the distributed optimizer's all-gather", "[sim][framework]") {
  // NeMo recipes: overlap_param_gather=True gathers the updated parameters
  // bucket by bucket before the layers of the next forward that use them
  // (tests/simulator/taskgraph/param_sync_test.cc); generic ends the step
  // with the whole gather, after the optimizer.
  Case c;
  c.plan.gbs = 32;
  c.plan.zero = 1;
  auto gathers_after_optimizer = [&](Framework f) {
    const LoweredStep s = lower_step(c.model, c.cluster, c.layout(f), LoweringOptions{});
    int after = 0, all = 0;
    for (int32_t id = 0; id < s.graph.size(); ++id) {
      const Task& t = s.graph.task(id);
      if (t.label != TaskLabel::kOptimizer) continue;
      for (uint32_t k = 0; k < t.succ_count; ++k) {
        after += s.graph.task(static_cast<int32_t>(s.graph.successors(t)[k])).label == TaskLabel::kDpAllGather;
      }
    }
    for (int32_t id = 0; id < s.graph.size(); ++id) all += s.graph.task(id).label == TaskLabel::kDpAllGather;
    return std::make_pair(after, all);
  };
  // GPT-3 1.3B over dp 32: buckets of 40M parameters, one per 50M layer.
  CHECK(gathers_after_optimizer(Framework::kMegatronCore) == std::make_pair(0, 24));
  const auto generic = gathers_after_optimizer(Framework::kGeneric);
  CHECK(generic.first > 0);
  CHECK(generic.first == generic.second);
  CHECK(c.run(Framework::kMegatronCore).step_time_s < c.run(Framework::kGeneric).step_time_s);
}

// A lowered step and its simulated times, for checks on the task order.
struct RanStep {
  LoweredStep step;
  EngineResult result;
  RanStep(const ModelSpec& m, const ClusterSpec& cl, const Layout& L)
      : step(lower_step(m, cl, L, LoweringOptions{})), result(run_lowered(step, nullptr)) {}
  // Whether task `to` depends directly on task `from`.
  bool feeds(int32_t from, int32_t to) const {
    const Task& t = step.graph.task(from);
    const uint32_t* succ = step.graph.successors(t);
    for (uint32_t i = 0; i < t.succ_count; ++i) {
      if (static_cast<int32_t>(succ[i]) == to) return true;
    }
    return false;
  }
  TaskTime span(int32_t id) const { return result.times[static_cast<size_t>(id)]; }
};

// GPT-3 175B's layer shape (h 12288, 96 heads, 4h GeLU MLP) on 4 layers:
// its four weight matrices (QKV 3h^2, proj h^2, FC1 and FC2 4h^2) each
// exceed DeepSpeed's 5e7-element prefetch bucket, and a layer (12h^2 =
// 1.81e9) exceeds the 1e9 reuse distance, so the coordinator
// (deepspeed_zero3.h) with its trace aligned would prefetch exactly one
// module ahead; as v0.3.14 runs it (the step counter one behind), none.
Case zero3_case() {
  Case c;
  c.model.hidden = 12288;
  c.model.heads = 96;
  c.model.kv_heads = 96;
  c.model.ffn_hidden = 4 * 12288;
  c.model.layers = 4;
  c.plan.zero = 3;
  return c;
}

// The gathers of layer `layer` (a middle one: no embedding or output layer)
// in micro-batch `mb`, by parameters moved.
std::vector<double> layer_gathers(const LoweredStep& s, int mb, int layer, double bytes_per_param) {
  std::vector<double> out;
  for (int32_t id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    if (t.label == TaskLabel::kParamAllGather && t.microbatch == mb && t.layer == layer) {
      out.push_back(t.wire_bytes / bytes_per_param);
    }
  }
  return out;
}

TEST_CASE("Framework: Megatron-Core's overlaps hide the DP collectives behind no more than the passes beside them",
          "[sim][framework]") {
  // --overlap-grad-reduce reduce-scatters each bucket as the backward fills
  // it and --overlap-param-gather all-gathers each bucket before the
  // forward's layers that use it (NeMo recipes; param_sync_test.cc has the
  // order).  One micro-batch, no pipeline, no TP: the step is the compute,
  // the optimizer and whatever DP time nothing hides.  Closed-form bounds
  // on that exposed time E, from the lowered step's own task durations:
  //   E <= RS + AG                          (only what runs can be exposed)
  //   E >= max(0, RS - B) + max(0, AG - F)  (the reduce-scatters overlap at
  //        most the backward B, the all-gathers at most the forward F)
  // and the overlap is real: E is under half of RS + AG.  Megatron-LM 2021
  // (one all-reduce after the backward, the gather after the optimizer)
  // exposes at least 90% of its collectives' time.
  Case c;
  c.plan.gbs = 32;
  c.plan.zero = 1;
  struct Split {
    double step = 0, compute = 0, fwd = 0, bwd = 0, optimizer = 0, rs = 0, ag = 0, ar = 0;
  };
  auto split = [&](Framework f) {
    const RanStep run(c.model, c.cluster, c.layout(f));
    const TaskGraph& g = run.step.graph;
    Split out;
    out.step = static_cast<double>(run.result.makespan_ps) * 1e-12;
    for (int32_t id = 0; id < g.size(); ++id) {
      const Task& t = g.task(id);
      const double d = static_cast<double>(run.span(id).end_ps - run.span(id).start_ps) * 1e-12;
      if (t.type == TaskType::kCompute && t.rank == 0) {
        if (t.label == TaskLabel::kOptimizer) out.optimizer += d;
        else if (t.category == Category::kCompute) {
          out.compute += d;
          if (t.label == TaskLabel::kForward) out.fwd += d;
          else out.bwd += d;
        }
      }
      if (t.label == TaskLabel::kDpReduceScatter) out.rs += d;
      if (t.label == TaskLabel::kDpAllGather) out.ag += d;
      if (t.label == TaskLabel::kDpAllReduce) out.ar += d;
    }
    return out;
  };
  const Split mc = split(Framework::kMegatronCore);
  REQUIRE(mc.rs > 0);
  REQUIRE(mc.ag > 0);
  const double exposed = mc.step - mc.compute - mc.optimizer;
  const double tol = 1e-6 * mc.step;
  CHECK(exposed <= mc.rs + mc.ag + tol);
  CHECK(exposed >= std::max(0.0, mc.rs - mc.bwd) + std::max(0.0, mc.ag - mc.fwd) - tol);
  CHECK(exposed < 0.5 * (mc.rs + mc.ag));
  const Split lm = split(Framework::kMegatronLM);
  REQUIRE(lm.ar + lm.rs + lm.ag > 0);
  CHECK(lm.step - lm.compute - lm.optimizer >= 0.9 * (lm.ar + lm.rs + lm.ag));
}

TEST_CASE("Framework: DeepSpeed ZeRO-3 gathers what its coordinator released", "[sim][framework]") {
  // stage3.py (v0.3.14) releases a module's parameters after its forward
  // unless it is used again within 1e9 elements (_keep_for_later), but its
  // step counter runs one behind the trace (the model's reset_step hook is
  // registered after its own sub-module hook, setup_zero_stage3_hooks), so
  // get_reuse_distance_in_numel finds another module at the recorded step
  // and reports no reuse: every module is released after every use.  With
  // full recompute a middle layer, per micro-batch: the forward gathers its
  // four modules, the recompute the four again, the backward the four a
  // third time: 12 gathers, 3 layers of parameters (with the trace aligned
  // the backward would find FC2 kept: 11, deepspeed_zero3_test.cc).
  // Without recompute, forward and backward: 8, 2 layers.  Each gather is
  // one collective (async _allgather_param per parameter).  FSDP2
  // (torchtitan) gathers each block whole, twice with recompute.
  Case c = zero3_case();
  c.plan.gbs = 64;  // 2 micro-batches per rank
  c.plan.recompute = Recompute::kFull;
  const double h2 = 12288.0 * 12288.0;
  // Wire bytes per gathered parameter: (n-1)/n of 2 B (bf16) over 32 ranks.
  const double per_param = 2.0 * 31 / 32;
  const LoweredStep s = lower_step(c.model, c.cluster, c.layout(Framework::kDeepSpeed), LoweringOptions{});
  for (int mb : {0, 1}) {
    for (int layer : {1, 2}) {
      const std::vector<double> g = layer_gathers(s, mb, layer, per_param);
      REQUIRE(g.size() == 12u);
      double total = 0;
      for (double params : g) {
        total += params;
        const bool one_module = std::abs(params - 3 * h2) < 1e3 || std::abs(params - h2) < 1e3 ||
                                std::abs(params - 4 * h2) < 1e3;
        CHECK(one_module);
      }
      CHECK_THAT(total, WithinRel(36 * h2, 1e-9));  // 12 + 12 + 12 h^2
    }
  }
  // FSDP2: each block whole, for the forward and once more for the
  // backward, whose recompute runs after that unshard: 2 per layer.
  CHECK(c.count(Framework::kTorchtitan, TaskLabel::kParamAllGather) == 2 * c.model.layers * 2);
  c.plan.recompute = Recompute::kNone;
  const LoweredStep t = lower_step(c.model, c.cluster, c.layout(Framework::kDeepSpeed), LoweringOptions{});
  const std::vector<double> g = layer_gathers(t, 1, 2, per_param);
  CHECK(g.size() == 8u);
  double total = 0;
  for (double params : g) total += params;
  CHECK_THAT(total, WithinRel(24 * h2, 1e-9));
}

TEST_CASE("Framework: DeepSpeed ZeRO-3 issues one list-API collective per parameter", "[sim][framework]") {
  // v0.3.14 partition_parameters.py _all_gather(async_op=True) calls
  // _allgather_param for each parameter: one torch.distributed.all_gather per
  // weight matrix, each through the list API: per member a narrow() view and
  // a get_rank(group) in Python, ProcessGroupNCCL's select and copy_ of the
  // member's slice out of its flat buffer: four calls per member, issued
  // with the device synchronized (torch.cuda.synchronize() first), so 4 x 32
  // kernel overheads of host work per collective, plus the zero-fill of the
  // parameter's flat buffer (2 B written per parameter).  Biases and norms
  // stay whole (param_persistence_threshold 1e5).  Each gradient bucket
  // (reduce_bucket_size 5e8: FC2, FC1, proj and QKV each fill one, 4h^2 =
  // 6.04e8 > 5e8; proj + QKV = 4h^2 too) is flattened and all-reduced as one
  // tensor (stage 3's default contiguous_gradients=false until v0.5.0:
  // reduce_ipg_grads -> buffered_reduce_fallback -> allreduce_and_copy), a
  // single call with no per-member work.
  Case c = zero3_case();
  c.plan.gbs = 32;  // one micro-batch per rank
  const double h2 = 12288.0 * 12288.0;
  const LinkParams lp = link_params(c.cluster);
  const GroupPlacement g = group_placement(32, 8, c.cluster);
  const auto gather = [&](double params) { return collective_cost(Collective::kAllGather, static_cast<Bytes>(params * 2), g, lp); };
  const LoweredStep s = lower_step(c.model, c.cluster, c.layout(Framework::kDeepSpeed), LoweringOptions{});
  const ComputeParams cpm = compute_params(c.cluster, Precision::kBf16);
  const int64_t list_api = 4 * 32 * cpm.kernel_overhead.ps();
  REQUIRE(list_api > 0);
  std::map<double, int> modules;  // parameters -> gathers of that module size (middle layers)
  for (int32_t id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    if (t.label != TaskLabel::kParamAllGather || t.layer < 1 || t.layer > 2) continue;
    for (double params : {3 * h2, h2, 4 * h2}) {
      const CollectiveCost one = gather(params);
      if (std::abs(t.wire_bytes - one.wire_bytes_per_rank) > 1) continue;
      CHECK(t.work_ps == one.latency.ps());
      ++modules[params];
      // Its host work: one collective's calls and the zero-fill.
      int hosts = 0;
      for (int32_t h = 0; h < s.graph.size(); ++h) {
        const Task& w = s.graph.task(h);
        if (w.label != TaskLabel::kHostWork) continue;
        const uint32_t* succ = s.graph.successors(w);
        for (uint32_t i = 0; i < w.succ_count; ++i) {
          if (static_cast<int32_t>(succ[i]) != id) continue;
          ++hosts;
          CHECK(w.work_ps == list_api + memory_time(cpm, params * 2).ps());
        }
      }
      CHECK(hosts == 1);
    }
  }
  // Two middle layers, forward (4 modules) and backward (4 again: no
  // recompute, each released after its forward): QKV and proj twice each,
  // FC1 and FC2 (same size) four times each, per layer.
  CHECK(modules[3 * h2] == 2 * 2);
  CHECK(modules[h2] == 2 * 2);
  CHECK(modules[4 * h2] == 2 * 4);
  int reductions = 0;
  for (int32_t id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    if (t.label == TaskLabel::kDpReduceScatter) FAIL("a list-API reduce-scatter where the buckets are all-reduced");
    if (t.label != TaskLabel::kDpAllReduce) continue;
    ++reductions;
    for (int32_t h = 0; h < s.graph.size(); ++h) {
      const Task& w = s.graph.task(h);
      if (w.label != TaskLabel::kHostWork) continue;
      const uint32_t* succ = s.graph.successors(w);
      for (uint32_t i = 0; i < w.succ_count; ++i) CHECK(static_cast<int32_t>(succ[i]) != id);
    }
  }
  CHECK(reductions >= 4 * 4);  // at least one per weight matrix
}

TEST_CASE("Framework: DeepSpeed ZeRO-3 synchronizes the device at every fetch", "[sim][framework]") {
  // DeepSpeed v0.3.14 stage3.py: a module's pre-forward (pre-backward) hook
  // fetches its parameters and waits for them (fetch_sub_module ends with
  // _synchronize_communication: comm_stream.synchronize() and
  // torch.cuda.synchronize()), the gather itself issued there
  // (_allgather_param: torch.cuda.synchronize(), the Python loop over the
  // world, then the NCCL launch); the prefetch that follows finds the step
  // counter one behind the trace ("Tracing failed. Prefetching is
  // disabled", get_params_to_prefetch) and launches nothing; the gradient
  // buckets are reduced from the gradient hooks, after the module's
  // backward kernels are launched.  Hence, in the lowered step (GPT-3
  // 175B's layer shape, 4 layers, 32 A100, full recompute, one
  // micro-batch):
  //  (1) no gather is prefetched: none starts before the compute ahead of
  //      the part of the pass it feeds has ended;
  //  (2) a gather starts only after the host work that issues it;
  //  (3) no compute runs while a gradient bucket's all-reduce does: the
  //      next fetch's synchronize waits for it, and the backward has
  //      produced its input.
  Case c = zero3_case();
  c.plan.gbs = 32;
  c.plan.recompute = Recompute::kFull;
  const RanStep run(c.model, c.cluster, c.layout(Framework::kDeepSpeed));
  const TaskGraph& g = run.step.graph;
  const std::vector<int32_t>& prog = g.program[0];
  int prefetched = 0, gathers = 0, issued = 0;
  for (int32_t id = 0; id < g.size(); ++id) {
    if (g.task(id).label != TaskLabel::kParamAllGather) continue;
    ++gathers;
    // (1) the part of the pass it feeds, and the compute before it.
    for (size_t k = 1; k < prog.size(); ++k) {
      if (!run.feeds(id, prog[k])) continue;
      if (run.span(id).start_ps < run.span(prog[k - 1]).end_ps) ++prefetched;
      break;
    }
    // (2) the host work that issues it.
    for (int32_t h = 0; h < g.size(); ++h) {
      if (g.task(h).label != TaskLabel::kHostWork || !run.feeds(h, id)) continue;
      ++issued;
      CHECK(run.span(id).start_ps >= run.span(h).end_ps);
    }
  }
  // Forward: the embedding, 4 modules per layer, the (tied) output layer: 18.
  // Backward: per layer the recompute's 4 and the backward's 4 (nothing
  // kept); the output layer's backward before the last layer's and the
  // embedding's after layer 0's: 4 x 8 + 2 = 34.
  CHECK(gathers == 18 + 34);
  CHECK(issued == gathers);
  CHECK(prefetched == 0);
  // (3)
  int scatters = 0;
  for (int32_t id = 0; id < g.size(); ++id) {
    if (g.task(id).label != TaskLabel::kDpAllReduce) continue;
    ++scatters;
    for (int32_t k : prog) {
      const bool inside = run.span(k).start_ps < run.span(id).end_ps && run.span(k).end_ps > run.span(id).start_ps;
      if (g.task(k).label == TaskLabel::kBackward) CHECK_FALSE(inside);
    }
  }
  CHECK(scatters >= 4 * 4);
}

TEST_CASE("Framework: DeepSpeed ZeRO-3 with tensor parallelism gathers on demand too", "[sim][framework]") {
  // The step counter one behind the trace (deepspeed_zero3.h) does not
  // depend on the layout: with TP 2 (Megatron-DeepSpeed's mpu; lowered a
  // layer at a time, not module by module) each layer's gathers are still
  // issued by its own fetch, whose torch.cuda.synchronize() first waits
  // for the previous pass and for the gradient all-reduce that pass's hooks
  // issued.  So in the lowered step (GPT-3 175B's layer shape, 4 layers, 32
  // A100, TP 2, full recompute, one micro-batch per rank): no gather starts
  // before the pass ahead of the one it feeds has ended, and none before
  // that pass's gradient reduction has.
  Case c = zero3_case();
  c.plan.tp = 2;
  c.plan.gbs = 16;
  c.plan.recompute = Recompute::kFull;
  const RanStep run(c.model, c.cluster, c.layout(Framework::kDeepSpeed));
  const TaskGraph& g = run.step.graph;
  const std::vector<int32_t>& prog = g.program[0];
  int gathers = 0, checked_reductions = 0;
  for (int32_t id = 0; id < g.size(); ++id) {
    if (g.task(id).label != TaskLabel::kParamAllGather) continue;
    ++gathers;
    for (size_t k = 1; k < prog.size(); ++k) {
      if (!run.feeds(id, prog[k])) continue;
      CHECK(run.span(id).start_ps >= run.span(prog[k - 1]).end_ps);
      for (int32_t red = 0; red < g.size(); ++red) {
        if (g.task(red).label != TaskLabel::kDpAllReduce || !run.feeds(prog[k - 1], red)) continue;
        ++checked_reductions;
        CHECK(run.span(id).start_ps >= run.span(red).end_ps);
      }
      break;
    }
  }
  CHECK(gathers == 4 * 3);  // per layer: its forward's, its recompute's and its backward's
  CHECK(checked_reductions > 0);
}

TEST_CASE("Framework: a tied output matrix's gradient is reduced once, with the embedding's", "[sim][framework]") {
  // GPT-3 1.3B ties its output layer to the word embedding (51200 x 2048):
  // one parameter, one gradient.  On one stage the data-parallel reduction
  // moves every gradient once, so its bytes fall short of the same model
  // untied by exactly that matrix's gradients: the memory model's parameter
  // count (memory_model.cc tied_copy) is the reduced count.  Ring all-reduce
  // over 8 GPUs: 2 x 7/8 of the bytes per rank on the wire.
  Case c;
  c.gpus = 8;
  c.plan.gbs = 8;
  auto wire = [&](const ModelSpec& m) {
    Plan p = c.plan;
    p.framework = Framework::kGeneric;
    const Layout L = resolve_plan(m, c.cluster, c.gpus, p);
    REQUIRE(L.feasible);
    const LoweredStep s = lower_step(m, c.cluster, L, LoweringOptions{});
    double bytes = 0;
    for (int32_t id = 0; id < s.graph.size(); ++id) {
      if (s.graph.task(id).label == TaskLabel::kDpAllReduce) bytes += s.graph.task(id).wire_bytes;
    }
    return bytes;
  };
  ModelSpec untied = c.model;
  untied.tied_embeddings = false;
  const double gbytes = grad_bytes(c.plan.precision, c.plan.grad_dtype);
  const double matrix = 51200.0 * 2048.0;
  CHECK_THAT(wire(untied) - wire(c.model), WithinRel(2.0 * 7 / 8 * matrix * gbytes, 1e-3));
}

TEST_CASE("Framework: DeepSpeed's pipeline engine takes ZeRO-0 and ZeRO-1 only", "[sim][framework]") {
  // deepspeed/runtime/pipe/engine.py PipelineEngine.__init__ (v0.3 to head):
  // assert zero stage < 2, "ZeRO-2 and ZeRO-3 are incompatible with pipeline
  // parallelism".  Other frameworks shard with pp > 1 (Megatron-Core's
  // distributed optimizer is ZeRO-1; the generic model takes any stage).
  Case c;
  c.plan.pp = 2;
  c.plan.gbs = 64;
  for (int zero : {0, 1, 2, 3}) {
    Plan p = c.plan;
    p.zero = zero;
    p.framework = Framework::kDeepSpeed;
    const Layout L = resolve_plan(c.model, c.cluster, c.gpus, p);
    CHECK(L.feasible == (zero < 2));
    if (zero >= 2) CHECK(testing::reasons_mention(L, "incompatible with pipeline parallelism"));
    p.framework = Framework::kGeneric;
    CHECK(resolve_plan(c.model, c.cluster, c.gpus, p).feasible);
  }
}

TEST_CASE("Framework: DeepSpeed's BF16_Optimizer under the pipeline engine all-reduces the whole gradient in 16 bits",
          "[sim][framework]") {
  // deepspeed/runtime/pipe/engine.py (v0.6.5 on) _exec_reduce_grads
  // -> _bf16_reduce_grads: buffered_allreduce_fallback over the optimizer's
  // fp32 gradients, all of them, in buckets of 5e8 elements; each rank then
  // updates its own partition.  allreduce_bucket casts each flattened
  // bucket to communication_data_type first (engine.py: fp16 under any ZeRO
  // stage in 2022, the model's bf16 since #3370), so a stage's DP traffic is
  // a ring all-reduce, 2(n-1)/n x 2 B per parameter (nccl-tests busbw
  // factor), not the reduce-scatter's (n-1)/n.  bf16 with bf16 gradients
  // runs ZeRO-1's DeepSpeedZeroOptimizer instead, which all-reduces too
  // (stage 1 without MoE layers: buffered_reduce_fallback(None, ...)), its
  // 2-byte gradients.
  Case c;
  c.plan.pp = 2;
  c.plan.gbs = 64;
  c.plan.zero = 1;
  c.plan.precision = Precision::kBf16;
  const Layout L = c.layout(Framework::kDeepSpeed);
  const double params = estimate_memory(c.model, c.cluster, L).stages[0].params;
  auto traffic = [&](GradDtype grad_dtype) {
    Case d = c;
    d.plan.grad_dtype = grad_dtype;
    const LoweredStep s = lower_step(d.model, d.cluster, d.layout(Framework::kDeepSpeed), LoweringOptions{});
    std::map<TaskLabel, double> wire;
    for (int32_t id = 0; id < s.graph.size(); ++id) {
      const Task& t = s.graph.task(id);
      if (t.category == Category::kDpComm && s.ranks[static_cast<size_t>(s.graph.members(t)[0])].pp == 0) {
        wire[t.label] += t.wire_bytes;
      }
    }
    return wire;
  };
  const std::map<TaskLabel, double> fp32_grads = traffic(GradDtype::kFp32);
  CHECK(fp32_grads.count(TaskLabel::kDpReduceScatter) == 0);
  REQUIRE(fp32_grads.count(TaskLabel::kDpAllReduce) == 1);
  CHECK_THAT(fp32_grads.at(TaskLabel::kDpAllReduce), WithinRel(2.0 * 15 / 16 * 2 * params, 1e-3));
  const std::map<TaskLabel, double> bf16_grads = traffic(GradDtype::kBf16);
  CHECK(bf16_grads.count(TaskLabel::kDpReduceScatter) == 0);
  REQUIRE(bf16_grads.count(TaskLabel::kDpAllReduce) == 1);
  CHECK_THAT(bf16_grads.at(TaskLabel::kDpAllReduce), WithinRel(2.0 * 15 / 16 * 2 * params, 1e-3));
  // Without the pipeline engine too: engine.py allreduce_gradients finds no
  // reduce_gradients on BF16_Optimizer and calls buffered_allreduce_fallback,
  // which takes the optimizer's fp32 gradients (get_grads_for_reduction).
  Case flat = c;
  flat.plan.pp = 1;
  flat.plan.gbs = 128;  // dp 32
  CHECK(flat.count(Framework::kDeepSpeed, TaskLabel::kDpReduceScatter) == 0);
  CHECK(flat.count(Framework::kDeepSpeed, TaskLabel::kDpAllReduce) > 0);
}

TEST_CASE("Framework: DeepSpeed runs bf16 ZeRO-0 with fp32 gradients as BF16_Optimizer, states sharded",
          "[sim][framework]") {
  // engine.py _do_optimizer_sanity_check (v0.9): without ZeRO, a bf16 model
  // with fp32 gradient accumulation gets BFLOAT16 (v0.6.5: every bf16 run
  // without ZeRO, BLOOM's final setup), and BF16_Optimizer partitions its
  // fp32 master and Adam states over the data-parallel group
  // (bf16_optimizer.py _setup_for_real_optimizer), all-gathering the bf16
  // parameters after the step (update_lp_params).  So the plan's memory,
  // step and traffic are ZeRO-1's: 12 B / dp of optimizer per parameter
  // instead of 12 B, and one all-gather of 2 B per parameter per step more.
  Case c;
  c.plan.pp = 2;
  c.plan.gbs = 64;  // dp 16
  c.plan.precision = Precision::kBf16;
  c.plan.zero = 0;
  const Layout z0 = c.layout(Framework::kDeepSpeed);
  Plan p0 = z0.plan;
  REQUIRE(execution_profile(p0).optimizer_sharded_without_zero);
  const OptimizerSharding os = optimizer_sharding(z0, execution_profile(p0));
  CHECK(os.zero == 1);
  CHECK(os.shard == 16);
  const MemoryReport m0 = estimate_memory(c.model, c.cluster, z0);
  CHECK_THAT(m0.stages[0].breakdown.optimizer, WithinRel(12.0 * m0.stages[0].params / 16, 1e-9));
  CHECK(c.count(Framework::kDeepSpeed, TaskLabel::kDpAllGather) > 0);
  Case one = c;
  one.plan.zero = 1;
  CHECK_THAT(c.run(Framework::kDeepSpeed).step_time_s, WithinRel(one.run(Framework::kDeepSpeed).step_time_s, 1e-9));
  // fp16 at ZeRO-0 is FP16_Optimizer: unsharded states, no gather.
  Case fp16 = c;
  fp16.plan.precision = Precision::kFp16;
  const Layout f0 = fp16.layout(Framework::kDeepSpeed);
  const MemoryReport mf = estimate_memory(fp16.model, fp16.cluster, f0);
  CHECK_THAT(mf.stages[0].breakdown.optimizer, WithinRel(12.0 * mf.stages[0].params, 1e-9));
  CHECK(fp16.count(Framework::kDeepSpeed, TaskLabel::kDpAllGather) == 0);
}

// `base` under torchtitan on 2 pipeline stages with its ZB-V schedule (a
// split backward, which torch.compile refuses).
Plan torchtitan_zbv(const Plan& base) {
  Plan p = base;
  p.framework = Framework::kTorchtitan;
  p.pp = 2;
  p.zero = 1;
  p.schedule = Schedule::kZbv;
  p.schedule_given = true;
  return p;
}

TEST_CASE("Framework: torchtitan runs tp comm overlap as async TP, compiled, with the same chunked forms",
          "[sim][framework]") {
  // torchtitan's async TP (parallelism.enable_async_tensor_parallel) micro-
  // pipelines the sequence-parallel all-gathers and reduce-scatters with
  // their GEMMs, as Transformer Engine's userbuffers do under Megatron-Core;
  // it needs the model compiled (maybe_enable_async_tp), so the plan's
  // elementwise ops are fused, and torch.compile refuses the split-backward
  // schedules.  Llama 3 8B, tp 2 with sequence parallelism on one H100 node.
  Case c;
  c.model = load_model("llama3-8b");
  c.cluster = load_cluster("dgx-h100");
  c.gpus = 8;
  c.plan.tp = 2;
  c.plan.sp = true;
  c.plan.zero = 3;
  c.plan.gbs = 8;
  c.plan.tp_comm_overlap = true;
  const Layout titan = c.layout(Framework::kTorchtitan);
  const ExecutionProfile prof = execution_profile(titan.plan);
  CHECK(prof.tp_comm_overlap);
  CHECK_FALSE(prof.eager_elementwise);  // compiled
  // The overlap hides TP time: each layer's exposed TP collectives under
  // async TP are at most what the same layer exposes without it, and the
  // chunked forms are Megatron-Core's, so the forward's exposure equals its
  // own.  In backward async TP leaves the reduce-scatters of the gathers'
  // input gradients unfused (their input is a sum of data gradients,
  // pytorch/pytorch#149946), where Transformer Engine runs them beside the
  // weight-gradient GEMMs: of the backward's four collectives of one size
  // (the gathers' reduce-scatters, the output gradients' all-gathers) the
  // two reduce-scatters stay whole, so at least about half of what runs
  // without the overlap stays exposed.
  const StepCosts with = step_costs(c.model, c.cluster, titan.plan);
  Case plain = c;
  plain.plan.tp_comm_overlap = false;
  const StepCosts without = step_costs(c.model, c.cluster, plain.layout(Framework::kTorchtitan).plan);
  const StepCosts mcore = step_costs(c.model, c.cluster, c.layout(Framework::kMegatronCore).plan);
  const LayerTimes& a = with.times_of(0);
  CHECK(a.tp_comm_forward_ps + a.tp_comm_backward_ps <
        without.times_of(0).tp_comm_forward_ps + without.times_of(0).tp_comm_backward_ps);
  CHECK(a.tp_comm_forward_ps == mcore.times_of(0).tp_comm_forward_ps);
  CHECK(a.tp_comm_backward_ps < without.times_of(0).tp_comm_backward_ps);
  CHECK(a.tp_comm_backward_ps > 0.45 * static_cast<double>(without.times_of(0).tp_comm_backward_ps));
  CHECK(a.tp_comm_backward_ps != mcore.times_of(0).tp_comm_backward_ps);
  // PyTorch's own script has no async TP; torchtitan's zero-bubble schedules
  // cannot compile.
  Plan p = c.plan;
  p.framework = Framework::kPytorch;
  CHECK(testing::reasons_mention(resolve_plan(c.model, c.cluster, 8, p), "torchtitan (async TP)"));
  Plan zbv = torchtitan_zbv(c.plan);
  CHECK(testing::reasons_mention(resolve_plan(c.model, c.cluster, 8, zbv), "needs torch.compile"));
}

TEST_CASE("Framework: --compile runs torchtitan's and the PyTorch script's model under torch.compile",
          "[sim][framework]") {
  // Oracle: torchtitan's benchmarks/ Table 1 (Llama 3.1 8B, FSDP on 8 Grand
  // Teton H100s, local batch 2, seq 8192, selective op AC): 5,762 tokens/s
  // per GPU eager, 6,667 with torch.compile, a speed-up of 1.157 (Table 3,
  // 128 GPUs: 6,514 / 5,605 = 1.162).  The Grand Teton part as
  // tools/accuracy.py derives it from the rows' "96GB HBM2e ... 500W power
  // limit": six HBM2e stacks at 409.6 GB/s and the 500 W limit.
  Case c;
  c.model = load_model("llama3-8b");
  c.cluster = load_cluster("dgx-h100");
  c.cluster.gpu.hbm_bandwidth = Bandwidth::gigabytes_per_s(6 * 409.6);
  c.cluster.gpu.power_limit_w = 500;
  c.gpus = 8;
  c.plan.zero = 3;
  c.plan.mbs = 2;
  c.plan.gbs = 16;
  c.plan.seq = 8192;
  c.plan.recompute = Recompute::kSelective;
  const double eager = c.run(Framework::kTorchtitan).step_time_s;
  CHECK(execution_profile(c.layout(Framework::kTorchtitan).plan).eager_elementwise);
  c.plan.compile = true;
  const Layout compiled = c.layout(Framework::kTorchtitan);
  CHECK_FALSE(execution_profile(compiled.plan).eager_elementwise);
  CHECK_THAT(eager / c.run(Framework::kTorchtitan).step_time_s, WithinRel(1.157, 0.05));
  // The PyTorch script compiles each block the same way.
  CHECK_FALSE(execution_profile(c.layout(Framework::kPytorch).plan).eager_elementwise);
  // Frameworks that do not compile refuse it; so does a split backward
  // (torch/distributed/pipelining/schedules.py
  // _check_torch_compile_compatibility), where torchtitan's float8 then runs
  // eagerly instead of compiled.
  for (Framework f : {Framework::kMegatronCore, Framework::kDeepSpeed, Framework::kGeneric}) {
    Plan p = c.plan;
    p.framework = f;
    CHECK(testing::reasons_mention(resolve_plan(c.model, c.cluster, 8, p), "runs in torchtitan and the PyTorch script"));
  }
  Plan zbv = torchtitan_zbv(c.plan);
  CHECK(testing::reasons_mention(resolve_plan(c.model, c.cluster, 8, zbv), "split backward"));
  zbv.compile = false;
  zbv.fp8_recipe = Fp8Recipe::kTensorwise;
  CHECK_FALSE(model_compiled(zbv));
  zbv.schedule = Schedule::k1F1B;
  CHECK(model_compiled(zbv));  // float8 compiled where the schedule allows it
}

// A Llama 3 8B layer's plan: tp 8 with sequence parallelism, 2 x 4,096 tokens.
Plan tp8_sequence_parallel() {
  Plan p;
  p.tp = 8;
  p.sp = true;
  p.mbs = 2;
  p.seq = 4096;
  return p;
}

// The op of a layer's cost named `name` (REQUIRE: there is one).
const OpCost& op_named(const LayerCost& c, const std::string& name) {
  for (const OpCost& op : c.ops) {
    if (op.name == name) return op;
  }
  FAIL("no op " << name);
  return c.ops.front();
}

TEST_CASE("Framework: FP8 sequence-parallel all-gathers move FP8, their reduce-scatters bf16", "[sim][framework]") {
  // Oracle: the frameworks' own code.  Transformer Engine quantizes the
  // norm output and all-gathers the FP8 data into QKV / FC1 (module/
  // layernorm_linear.py: gather_along_first_dim(ln_out, tp_group,
  // quantizer=input_quantizer)) and gathers the projection's and FC2's
  // output gradient with the grad-output quantizer (module/linear.py);
  // torchao's tensorwise float8 TP does the same (float8_tensor_parallel.py:
  // PrepareFloat8ModuleInput / Float8ColwiseParallel cast before the
  // all-gather, Float8RowwiseParallel casts the output gradient before the
  // backward's).  The reduce-scatters sum bf16.  torchao's rowwise recipe
  // keeps every collective in high precision (torchtitan float8.md).  So,
  // per layer of tokens t and hidden h: the norm's gather t*h*q forward and
  // its transpose t*h*2 backward; the projection's reduce-scatter t*h*2
  // forward and its transpose t*h*q backward, q = 1 (delayed, tensorwise),
  // 1 + 1/32 (MXFP8's E8M0 scale per 32), 2 (rowwise, bf16).
  const ModelSpec m = load_model("llama3-8b");
  Plan p = tp8_sequence_parallel();
  const double th = 2.0 * 4096 * 4096;  // tokens x hidden
  for (auto [recipe, q] : std::vector<std::pair<Fp8Recipe, double>>{
           {Fp8Recipe::kDelayed, 1.0}, {Fp8Recipe::kTensorwise, 1.0}, {Fp8Recipe::kMxfp8, 1 + 1.0 / 32},
           {Fp8Recipe::kRowwise, 2.0}, {Fp8Recipe::kNone, 2.0}}) {
    p.fp8_recipe = recipe;
    const LayerCost c = transformer_layer_cost(m, layer_shape(p));
    INFO(to_string(recipe));
    for (const char* gather : {"ln1", "ln2"}) {
      const OpCost& g = op_named(c, gather);
      CHECK_THAT(g.tp_comm_bytes, WithinRel(th * q, 1e-12));
      CHECK_THAT(g.tp_comm_bwd_bytes >= 0 ? g.tp_comm_bwd_bytes : g.tp_comm_bytes, WithinRel(th * 2, 1e-12));
    }
    for (const char* reduce : {"out_proj", "fc2"}) {
      const OpCost& r = op_named(c, reduce);
      CHECK_THAT(r.tp_comm_bytes, WithinRel(th * 2, 1e-12));
      CHECK_THAT(r.tp_comm_bwd_bytes >= 0 ? r.tp_comm_bwd_bytes : r.tp_comm_bytes, WithinRel(th * q, 1e-12));
    }
  }
  // Without sequence parallelism the all-reduces sum bf16 both ways.
  p.sp = false;
  p.fp8_recipe = Fp8Recipe::kDelayed;
  const LayerCost ar = transformer_layer_cost(m, layer_shape(p));
  CHECK(op_named(ar, "out_proj").tp_comm_bytes == th * 2);
  CHECK(op_named(ar, "out_proj").tp_comm_bwd_bytes < 0);
}

TEST_CASE("Framework: torchtitan's tensor parallelism copies each sequence-parallel tensor whole (DTensor Shard(1))",
          "[sim][framework]") {
  // Oracle: PyTorch's functional collectives gather and scatter along dim
  // 0 only (_functional_collectives.py: _all_gather_tensor ends with
  // torch.cat(torch.chunk(res, group_size, dim=0), dim=gather_dim);
  // reduce_scatter_tensor starts with torch.cat(torch.chunk(self,
  // group_size, dim=scatter_dim))), and torchtitan shards the sequence on
  // dim 1 of [batch, seq, hidden].  So each of a dense layer's four
  // sequence-parallel collectives copies its whole tensor, a read and a
  // write: 2 * t*h*2 B each way in bf16.  Async TP's fused ops take the
  // dimension themselves (copying at most a shard), and Megatron's [seq,
  // batch, hidden] gathers along dim 0: no copies there.
  const ModelSpec m = load_model("llama3-8b");
  Plan p = tp8_sequence_parallel();
  p.framework = Framework::kTorchtitan;
  const double th = 2.0 * 4096 * 4096;  // tokens x hidden
  auto copies = [&](const Plan& plan) {
    std::vector<OpCost> out;
    for (const OpCost& op : transformer_layer_cost(m, layer_shape(plan)).ops) {
      if (op.name.find("tp_gather_copy") != std::string::npos || op.name.find("tp_scatter_copy") != std::string::npos)
        out.push_back(op);
    }
    return out;
  };
  const std::vector<OpCost> bf16 = copies(p);
  REQUIRE(bf16.size() == 4);
  for (const OpCost& op : bf16) {
    CHECK_THAT(op.bytes, WithinRel(2 * th * 2, 1e-12));
    CHECK_THAT(op.bwd_bytes, WithinRel(2 * th * 2, 1e-12));
  }
  // Tensorwise float8 gathers FP8, so the gathered copies move 1 B per
  // element where the gather does.
  p.fp8_recipe = Fp8Recipe::kTensorwise;
  for (const OpCost& op : copies(p)) {
    const bool gather = op.name.find("gather") != std::string::npos;
    CHECK_THAT(op.bytes, WithinRel(2 * th * (gather ? 1 : 2), 1e-12));
    CHECK_THAT(op.bwd_bytes, WithinRel(2 * th * (gather ? 2 : 1), 1e-12));
  }
  // Async TP fuses the forward's collectives and the backward's gathers
  // (fused_all_gather_matmul takes the dimension itself); the backward's
  // reduce-scatters of the gathers' input gradients stay plain funcol ones
  // (their input is a sum of data gradients, pytorch/pytorch#149946), so
  // only they copy.  Under row-wise float8 the all-gather-matmuls stay
  // unfused too (pytorch/pytorch#149990), their gathers copying forward.
  p.fp8_recipe = Fp8Recipe::kNone;
  p.tp_comm_overlap = true;
  const std::vector<OpCost> fused = copies(p);
  REQUIRE(fused.size() == 2);
  for (const OpCost& op : fused) {
    CHECK(op.name.find("tp_gather_copy") == 0);
    CHECK(op.bytes == 0);
    CHECK_THAT(op.bwd_bytes, WithinRel(2 * th * 2, 1e-12));
  }
  p.fp8_recipe = Fp8Recipe::kRowwise;
  for (const OpCost& op : copies(p)) CHECK_THAT(op.bytes, WithinRel(2 * th * 2, 1e-12));
  p.fp8_recipe = Fp8Recipe::kNone;
  p.tp_comm_overlap = false;
  p.framework = Framework::kMegatronCore;
  CHECK(copies(p).empty());
}

TEST_CASE("Framework: torchtitan's float8 speed-up under vanilla tensor parallelism, as published", "[sim][framework]") {
  // Oracle: torchtitan benchmarks/asyncTP_llama3_h100_2025-06_torchtitan.md
  // (Grand Teton H100, 500 W, HBM2e; torch.compile; vanilla TP): Llama 3 8B
  // on 64 GPUs, FSDP 8 x TP 8, local batch 12, per-op SAC: 4,378 tokens/s
  // per GPU in bf16, 5,078 with float8 tensorwise, a speed-up of 1.160;
  // Llama 3 70B on 256 GPUs, FSDP 32 x TP 8, local batch 16, full AC: 597.3
  // and 809.8, 1.356.  Before the FP8 gathers and the DTensor copies the
  // simulated speed-ups were 1.041 and 1.18.
  auto speedup = [](const char* model, int gpus, int mbs, Recompute rc) {
    Case c;
    c.model = load_model(model);
    c.cluster = load_cluster("dgx-h100");
    c.cluster.gpu.hbm_bandwidth = Bandwidth::gigabytes_per_s(6 * 409.6);
    c.cluster.gpu.power_limit_w = 500;
    c.gpus = gpus;
    c.plan.tp = 8;
    c.plan.sp = true;
    c.plan.zero = 3;
    c.plan.mbs = mbs;
    c.plan.gbs = static_cast<int64_t>(mbs) * gpus / 8;
    c.plan.seq = 8192;
    c.plan.recompute = rc;
    c.plan.compile = true;
    const double bf16 = c.run(Framework::kTorchtitan).step_time_s;
    c.plan.fp8_recipe = Fp8Recipe::kTensorwise;
    return bf16 / c.run(Framework::kTorchtitan).step_time_s;
  };
  CHECK_THAT(speedup("llama3-8b", 64, 12, Recompute::kSelective), WithinRel(5078.0 / 4378.0, 0.05));
  CHECK_THAT(speedup("llama3-70b", 256, 16, Recompute::kFull), WithinRel(809.8 / 597.3, 0.10));
}

TEST_CASE("Framework: the exported PyTorch script reduce-scatters FSDP2 gradients every micro-batch, DDP once a step",
          "[sim][framework]") {
  // The exported script keeps FSDP2's gradient sync on, as torchtitan does
  // (trainer.py train_step): every micro-batch's post_backward
  // reduce-scatters each block's gradients into the sharded fp32 .grad, so
  // no unsharded fp32 accumulator (set_requires_gradient_sync(False)'s
  // _fsdp_param.py unsharded_accumulated_grad, 4 B per parameter of the
  // rank's whole model) is ever held.  DDP waits inside no_sync() and
  // all-reduces once, after the last micro-batch.  GPT-3 1.3B on 32 A100,
  // dp 32, 4 micro-batches per rank against 1.
  Case c;
  c.plan.gbs = 128;
  c.plan.zero = 3;
  Case one = c;
  one.plan.gbs = 32;
  const int per_microbatch = one.count(Framework::kPytorch, TaskLabel::kDpReduceScatter);
  REQUIRE(per_microbatch > 0);
  CHECK(c.count(Framework::kPytorch, TaskLabel::kDpReduceScatter) == 4 * per_microbatch);
  CHECK(c.count(Framework::kTorchtitan, TaskLabel::kDpReduceScatter) == 4 * per_microbatch);
  // Memory: the gradients of 4 micro-batches take what one takes.
  const MemoryReport four = estimate_memory(c.model, c.cluster, c.layout(Framework::kPytorch));
  const MemoryReport single = estimate_memory(one.model, one.cluster, one.layout(Framework::kPytorch));
  CHECK_THAT(four.stages[0].breakdown.gradients, WithinRel(single.stages[0].breakdown.gradients, 1e-9));
  Case ddp = c;
  ddp.plan.zero = 0;
  Case ddp1 = ddp;
  ddp1.plan.gbs = 32;
  const int allreduces = ddp1.count(Framework::kPytorch, TaskLabel::kDpAllReduce);
  REQUIRE(allreduces > 0);
  CHECK(ddp.count(Framework::kPytorch, TaskLabel::kDpAllReduce) == allreduces);
  CHECK(ddp.count(Framework::kTorchtitan, TaskLabel::kDpAllReduce) == 4 * allreduces);
  // DDP: each fp32 .grad accumulates through AccumulateGrad (read 4 + 4,
  // write 4 = 12 B per parameter, one kernel per tensor) after every
  // micro-batch but the first: with the same per-micro-batch work otherwise,
  // 4 micro-batches cost 4x one micro-batch's compute plus 3 such passes.
  const MemoryReport mem = estimate_memory(ddp.model, ddp.cluster, ddp.layout(Framework::kPytorch));
  // GPT-3 1.3B: 12 tensors per layer (two LayerNorms, QKV, projection and
  // the two MLP linears, each a weight and a bias) over 24 layers.
  const double pass = accumulation_pass_s(c, 12, mem.stages[0].params, 12 * 24);
  CHECK_THAT(stage_compute_s(ddp, Framework::kPytorch, 0) - 4 * stage_compute_s(ddp1, Framework::kPytorch, 0),
             WithinRel(3 * pass, 1e-3));
}

TEST_CASE("Framework: DeepSpeed ZeRO-1 all-reduces 16-bit gradients accumulated through autograd",
          "[sim][framework]") {
  // zero/stage_1_and_2.py (v0.5 to v0.9): stage 1 registers no gradient
  // hooks (partition_gradients and overlap_comm off), so each parameter's
  // 16-bit .grad accumulates through autograd's AccumulateGrad, an in-place
  // grad += new_grad (read 2 + 2, write 2 = 6 B per parameter, one kernel
  // per tensor), the first micro-batch's gradient taken as is (zero_grad
  // sets them to None); at the boundary reduce_ipg_grads all-reduces them
  // (contiguous_gradients is forced off for stage 1 without MoE layers:
  // buffered_reduce_fallback(None, ...)), on one pipeline stage too.
  Case c;
  c.plan.zero = 1;
  c.plan.gbs = 128;  // dp 32, 4 micro-batches per rank
  c.plan.precision = Precision::kFp16;
  c.plan.attention = Attention::kNaive;  // one attention path under both frameworks (attention_run)
  Plan p = c.plan;
  p.framework = Framework::kDeepSpeed;
  const ExecutionProfile fp16 = execution_profile(p);
  CHECK(fp16.grads_all_reduced);
  CHECK(fp16.grad_accumulation_bytes_per_param == 6);
  CHECK(fp16.grad_accumulation_skips_first_microbatch);
  Plan moe = p;
  moe.ep = 2;
  CHECK_FALSE(execution_profile(moe).grads_all_reduced);  // average_tensor: reduced to each partition's owner
  Plan zero2 = p;
  zero2.zero = 2;
  CHECK_FALSE(execution_profile(zero2).grads_all_reduced);
  CHECK(execution_profile(zero2).grad_accumulation_bytes_per_param == 0);  // reduced every micro-batch
  CHECK(c.count(Framework::kDeepSpeed, TaskLabel::kDpReduceScatter) == 0);
  CHECK(c.count(Framework::kDeepSpeed, TaskLabel::kDpAllReduce) > 0);
  // The accumulation passes against Megatron-LM's bf16, which accumulates in
  // the weight-gradient GEMM (no pass); fp16 and bf16 share the A100's
  // tensor-core peak, so the compute a DeepSpeed fp16 rank adds is 3 passes.
  REQUIRE(c.cluster.gpu.peak.at(Dtype::kFp16).flop_per_s() == c.cluster.gpu.peak.at(Dtype::kBf16).flop_per_s());
  Case m = c;
  m.plan.precision = Precision::kBf16;
  const MemoryReport mem = estimate_memory(c.model, c.cluster, c.layout(Framework::kDeepSpeed));
  // GPT-3 1.3B: 12 tensors per layer (two LayerNorms, QKV, projection and
  // the two MLP linears, each a weight and a bias) over 24 layers.
  const double pass = accumulation_pass_s(c, 6, mem.stages[0].params, 12 * 24);
  CHECK_THAT(stage_compute_s(c, Framework::kDeepSpeed, 0) - stage_compute_s(m, Framework::kMegatronLM, 0),
             WithinRel(3 * pass, 1e-3));
}

TEST_CASE("Framework: DeepSpeed ZeRO-3 stops scaling from 768 to 1536 A100 while a 3D plan scales",
          "[sim][framework]") {
  // Narayanan et al. 2021 Table 2 (GPT-3 175B, global batch 1536, DGX A100
  // with 8 HDR NICs per node): ZeRO-3 without model parallelism runs at 88
  // TFLOP/s per GPU on 768 GPUs and 44 on 1536, i.e. the same step time
  // (the throughput per GPU halves), while PTD-P (TP 8 x PP 12) keeps its
  // per-GPU throughput and nearly halves its step.  At this batch each
  // rank's micro-batch halves with the GPU count while every ZeRO-3
  // collective spans the whole DP group: its per-member work (list API)
  // and ring latency double.  Within 10% (the bar) for ZeRO-3;
  // the 3D plan at least 1.6x faster.
  ModelSpec model = load_model("gpt3-175b");
  const ClusterSpec cluster = load_cluster("dgx-a100");
  auto step = [&](int gpus, Plan p) {
    p.seq = 2048;
    p.gbs = 1536;
    p.precision = Precision::kBf16;
    p.attention = Attention::kNaive;
    p.recompute = Recompute::kFull;
    p.dp = gpus / (p.tp * p.pp);
    const Layout L = resolve_plan(model, cluster, gpus, p);
    REQUIRE(L.feasible);
    return simulate_step(model, cluster, L, SimulateOptions{}).step_time_s;
  };
  Plan zero3;
  zero3.framework = Framework::kDeepSpeed;
  zero3.zero = 3;
  zero3.mbs = 2;
  const double z768 = step(768, zero3);
  zero3.mbs = 1;
  const double z1536 = step(1536, zero3);
  CHECK(z1536 / z768 > 0.9);
  CHECK(z1536 / z768 < 1.1);
  Plan ptd;
  ptd.framework = Framework::kMegatronLM;
  ptd.tp = 8;
  ptd.pp = 12;
  ptd.mbs = 1;
  const double p768 = step(768, ptd), p1536 = step(1536, ptd);
  CHECK(p768 / p1536 > 1.6);
}

TEST_CASE("Framework: DeepSpeed's bf16 pipeline adds each micro-batch's gradients into fp32", "[sim][framework]") {
  // pipe/engine.py _exec_backward_pass calls BF16_Optimizer.update_hp_grads
  // after every micro-batch's backward: for each parameter
  // hp_grad.add_(lp.grad.to(fp32)), read 2 + write 4 + read 4 + 4 + write
  // 4 = 18 bytes per parameter at the achieved HBM rate, two kernels per
  // parameter tensor.  Megatron-LM accumulates into its fp32 buffer inside
  // the backward's GEMMs (no extra pass), and runs the same layers in the
  // same time: the compute a DeepSpeed stage adds over the same plan is
  // microbatches x that pass.
  Case c;
  c.plan.pp = 2;
  c.plan.zero = 1;
  c.plan.gbs = 64;  // dp 16, 4 micro-batches per rank
  c.plan.precision = Precision::kBf16;
  c.plan.attention = Attention::kNaive;  // one attention path under both frameworks (attention_run)
  const ExecutionProfile ds = execution_profile([&] {
    Plan p = c.plan;
    p.framework = Framework::kDeepSpeed;
    return p;
  }());
  REQUIRE(ds.grad_accumulation_bytes_per_param == 18);
  auto compute = [&](Framework f, int stage) { return stage_compute_s(c, f, stage); };
  const Layout L = c.layout(Framework::kDeepSpeed);
  const MemoryReport mem = estimate_memory(c.model, c.cluster, L);
  for (int stage = 0; stage < 2; ++stage) {
    // GPT-3 1.3B: 12 tensors per layer (two LayerNorms, QKV, projection and
    // the two MLP linears, each a weight and a bias), 12 layers a stage.
    const double pass = accumulation_pass_s(c, 18, mem.stages[static_cast<size_t>(stage)].params, 2 * 12 * 12);
    CHECK_THAT(compute(Framework::kDeepSpeed, stage) - compute(Framework::kMegatronLM, stage),
               WithinRel(4 * pass, 1e-3));
  }
}

TEST_CASE("Framework: Megatron-LM's fp16 gradients accumulate through autograd after the first micro-batch",
          "[sim][framework]") {
  // Megatron-LM of the 2021 paper (sc21 scripts: --fp16, no
  // --accumulate-allreduce-grads-in-fp32; gradient-accumulation fusion for
  // fp16 only from 07916bf, 2022-09): each parameter's .grad accumulates
  // through PyTorch's AccumulateGrad, an in-place grad += new_grad, read
  // 2 + 2 and write 2 = 6 bytes per parameter, one kernel per tensor.  The
  // optimizer's zero_grad(set_to_none=True) leaves no gradient before the
  // step's first micro-batch, whose gradient is taken without an add: with 4
  // micro-batches per rank a stage pays 3 passes.  bf16 accumulates in the
  // weight-gradient GEMM (fusion from 83b1e42, 2022-02) and fp16 and bf16
  // share the A100's tensor-core peak, so the difference is those passes.
  Case c;
  c.plan.pp = 2;
  c.plan.gbs = 64;  // dp 16, 4 micro-batches per rank
  c.plan.precision = Precision::kFp16;
  Plan fp16 = c.plan;
  fp16.framework = Framework::kMegatronLM;
  REQUIRE(execution_profile(fp16).grad_accumulation_bytes_per_param == 6);
  REQUIRE(execution_profile(fp16).grad_accumulation_skips_first_microbatch);
  Plan bf16 = fp16;
  bf16.precision = Precision::kBf16;
  REQUIRE(execution_profile(bf16).grad_accumulation_bytes_per_param == 0);
  auto compute = [&](Precision precision, int stage) {
    Case k = c;
    k.plan.precision = precision;
    return stage_compute_s(k, Framework::kMegatronLM, stage);
  };
  REQUIRE(c.cluster.gpu.peak.at(Dtype::kFp16).flop_per_s() == c.cluster.gpu.peak.at(Dtype::kBf16).flop_per_s());
  const MemoryReport mem = estimate_memory(c.model, c.cluster, c.layout(Framework::kMegatronLM));
  for (int stage = 0; stage < 2; ++stage) {
    // GPT-3 1.3B: 12 tensors per layer (two LayerNorms, QKV, projection and
    // the two MLP linears, each a weight and a bias), 12 layers a stage.
    const double pass = accumulation_pass_s(c, 6, mem.stages[static_cast<size_t>(stage)].params, 12 * 12);
    CHECK_THAT(compute(Precision::kFp16, stage) - compute(Precision::kBf16, stage), WithinRel(3 * pass, 1e-3));
  }
}

TEST_CASE("Framework: Megatron-LM's interleaved pipeline sends block the sender, Megatron-Core's do not",
          "[sim][framework]") {
  // Megatron-LM 2021-22 megatron/p2p_communication.py _communicate:
  // batch_isend_irecv, req.wait(), then torch.cuda.synchronize() "to
  // protect against race condition", for every schedule, so a rank's next
  // pass starts after its send.  Megatron-Core's interleaved schedule posts
  // sends ahead (overlap_p2p_comm) and only the receiver waits.  Counted on
  // the lowered graph: sends with a successor that is the sender's own
  // compute.
  Case c;
  c.plan.pp = 2;
  c.plan.vp = 2;
  c.plan.schedule = Schedule::kInterleaved;
  c.plan.gbs = 64;  // dp 16, 4 micro-batches per rank
  auto blocking_sends = [&](Framework f) {
    const LoweredStep s = lower_step(c.model, c.cluster, c.layout(f), LoweringOptions{});
    int sends = 0, blocking = 0;
    for (int32_t id = 0; id < s.graph.size(); ++id) {
      const Task& t = s.graph.task(id);
      if (t.label != TaskLabel::kSendForward && t.label != TaskLabel::kSendBackward) continue;
      ++sends;
      const uint32_t* next = s.graph.successors(t);
      for (uint32_t k = 0; k < t.succ_count; ++k) {
        const Task& u = s.graph.task(static_cast<int32_t>(next[k]));
        if (u.type == TaskType::kCompute && t.member_count == 1 && u.rank == s.graph.members(t)[0]) {
          ++blocking;
          break;
        }
      }
    }
    REQUIRE(sends > 0);
    return std::pair<int, int>{sends, blocking};
  };
  const auto [lm_sends, lm_blocking] = blocking_sends(Framework::kMegatronLM);
  // Every send but each rank's last (no pass after it) holds its sender.
  CHECK(lm_blocking >= lm_sends - 2 * 2);
  CHECK(lm_blocking > 0);
  CHECK(blocking_sends(Framework::kMegatronCore).second == 0);
}

TEST_CASE("Framework: BLOOM's pre-launch sweep peaks at micro-batch 4", "[sim][framework]") {
  // BLOOM's pre-launch benchmark (bigscience, 02-21; reference rows
  // bloom_prequel_00..03): 72 layers, h 14336, 64 heads, TP 8 x PP 12 x DP 4
  // on 384 A100 of Jean Zay, global batch 2048, bf16 ZeRO-1 with full
  // recompute, Megatron-DeepSpeed: 112, 120, 130 then 125 TFLOP/s for
  // micro-batches 1, 2, 4, 8, i.e. the step time falls to mbs 4 and rises
  // at 8.  Per micro-batch the stage pays a fixed pass over its 2.3 B
  // parameters (update_hp_grads) that larger micro-batches amortise, while
  // the pipeline's fill and drain grow with the micro-batch (11 of 523
  // slots at mbs 1, 11 of 75 at mbs 8).  Without the pass mbs 2 came out
  // fastest.
  ModelSpec m;
  m.name = "bloom-prequel";
  m.layers = 72;
  m.hidden = 14336;
  m.heads = 64;
  m.kv_heads = 64;
  m.ffn_hidden = 4 * 14336;
  m.vocab = 250880;
  m.seq_len = 2048;
  m.mlp = MlpKind::kGelu;
  m.position_embedding = PositionEmbedding::kAlibi;
  const ClusterSpec cluster = load_cluster("jean-zay-a100");
  auto step = [&](int mbs) {
    Plan p;
    p.tp = 8;
    p.pp = 12;
    p.dp = 4;
    p.mbs = mbs;
    p.gbs = 2048;
    p.zero = 1;
    p.precision = Precision::kBf16;
    p.attention = Attention::kNaive;
    p.recompute = Recompute::kFull;
    p.framework = Framework::kDeepSpeed;
    const Layout L = resolve_plan(m, cluster, 384, p);
    REQUIRE(L.feasible);
    return simulate_step(m, cluster, L, SimulateOptions{}).step_time_s;
  };
  const double s1 = step(1), s2 = step(2), s4 = step(4), s8 = step(8);
  CHECK(s1 > s2);
  CHECK(s2 > s4);
  CHECK(s8 > s4);
}

TEST_CASE("Framework: DeepSpeed ZeRO-2 reduces every micro-batch's gradients", "[sim][framework]") {
  // zero/stage_1_and_2.py reduce_ready_partitions_and_remove_grads: a
  // parameter's gradient is reduced from its backward hook when the
  // gradients are partitioned (stage 2) or at the accumulation boundary
  // (stage 1).  With 4 micro-batches per rank, ZeRO-2 runs the step's
  // reduce-scatters 4 times (same buckets of 5e8 elements), ZeRO-1 once.
  // (ZeRO-1 here is BF16_Optimizer, which all-reduces the same buckets.)
  Case c;
  c.plan.gbs = 128;  // dp 32, 4 micro-batches per rank
  c.plan.zero = 1;
  const int once = c.count(Framework::kDeepSpeed, TaskLabel::kDpAllReduce);
  REQUIRE(once > 0);
  REQUIRE(c.count(Framework::kDeepSpeed, TaskLabel::kDpReduceScatter) == 0);
  // On the compute stream either way (no overlap_comm below stage 3): four
  // reduce-scatters of the buckets expose more than one all-reduce (2x a
  // reduce-scatter's bytes) of them.
  const double dp1 = c.run(Framework::kDeepSpeed).breakdown.dp_comm;
  c.plan.zero = 2;
  CHECK(c.count(Framework::kDeepSpeed, TaskLabel::kDpReduceScatter) == 4 * once);
  CHECK(c.run(Framework::kDeepSpeed).breakdown.dp_comm > dp1);
  // Megatron-Core keeps the whole gradient buffer and reduces once, after
  // the last micro-batch, whichever ZeRO stage.
  const int mcore2 = c.count(Framework::kMegatronCore, TaskLabel::kDpReduceScatter);
  c.plan.zero = 1;
  CHECK(c.count(Framework::kMegatronCore, TaskLabel::kDpReduceScatter) == mcore2);
}

TEST_CASE("Framework: DeepSpeed ZeRO-1 reduces on the compute stream", "[sim][framework]") {
  // overlap_comm false for stage 1: the backward waits for each bucket's
  // reduction, so the step is longer than with overlapped buckets.
  Case c;
  c.plan.zero = 1;
  c.plan.gbs = 32;
  CHECK(c.run(Framework::kDeepSpeed).step_time_s > c.run(Framework::kPytorch).step_time_s);
}

TEST_CASE("Offload: parameter offload copies each layer's shard over PCIe before its gathers", "[sim][offload]") {
  // ZeRO-Infinity offload_param: a rank's parameter shard lives in host
  // memory; forward and backward each copy it to the GPU.  On one GPU the
  // shard is the whole layer, so per micro-batch 2 x params x 2 B cross the
  // 25 GB/s PCIe link; they cannot overlap each other, so the step is at
  // least that traffic plus the optimizer step (which follows the last
  // copy).  Optimizer offload keeps the weights on the GPU.
  Case c;
  c.cluster = load_cluster("rtx4090-pcie");
  c.gpus = 1;
  c.plan.zero = 3;
  c.plan.gbs = 8;  // 8 micro-batches
  c.plan.offload = Offload::kParams;
  const Layout L = c.layout(Framework::kGeneric);
  const LoweredStep s = lower_step(c.model, c.cluster, L, LoweringOptions{});
  int copies = 0;
  for (int32_t id = 0; id < s.graph.size(); ++id) copies += s.graph.task(id).label == TaskLabel::kHostToDevice;
  CHECK(copies == 2 * c.model.layers * 8);
  const StepReport params = simulate_step(c.model, c.cluster, L, SimulateOptions{});
  const double layer_params = estimate_memory(c.model, c.cluster, L).stages[0].params;  // all of them, one stage
  const double traffic_s = 8 * 2 * layer_params * 2 / c.cluster.host.bandwidth_per_gpu.bytes_per_s();
  CHECK(params.step_time_s >= params.breakdown.optimizer + 0.95 * traffic_s);
  c.plan.offload = Offload::kOptimizer;
  const StepReport optimizer = c.run(Framework::kGeneric);
  CHECK(params.step_time_s > optimizer.step_time_s);
}

TEST_CASE("Framework: DeepSpeed's list-API ZeRO-3 collectives copy their buffers on the device", "[sim][framework]") {
  // DeepSpeed v0.3.14 partition_parameters.py _allgather_param zero-fills the
  // parameter's flat buffer (torch.zeros: 2 B written per bf16 parameter,
  // with the host's per-member work before the synchronize) and hands
  // torch.distributed.all_gather a list of views into it, whose
  // ProcessGroupNCCL gathers into its own flat buffer and copies each
  // member's part back on its stream (2 B read + 2 B written): 4 B per
  // parameter per gather.  _reduce_scatter_gradient hands reduce_scatter a list of views,
  // which ProcessGroupNCCL copies into its flat input (read + write of the
  // gradient).  Without recompute each weight matrix of a layer (GPT-3
  // 175B's shape) is gathered for its forward and again for its backward.
  // The gradients (stage 3's default contiguous_gradients=false until
  // v0.5.0, stage3.py allreduce_and_copy) leave once per micro-batch in
  // buckets of at most one 4h^2 matrix, each flattened (torch.cat: read and
  // write) and divided in place (read and write) before its all-reduce and
  // copied back into the gradients after it (read and write).
  Case c = zero3_case();
  c.plan.gbs = 64;  // 2 micro-batches per rank on 32 GPUs
  const Layout L = c.layout(Framework::kDeepSpeed);
  const LoweredStep s = lower_step(c.model, c.cluster, L, LoweringOptions{});
  const ComputeParams cpm = compute_params(c.cluster, Precision::kBf16);
  const double h2 = 12288.0 * 12288.0;
  // Each gather's copy: 4 B per gathered parameter of one weight matrix.
  std::map<int64_t, int> gather_copies;
  for (int32_t id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    if (t.label != TaskLabel::kParamAllGather || t.layer < 1 || t.layer > 2) continue;
    const uint32_t* succ = s.graph.successors(t);
    for (uint32_t i = 0; i < t.succ_count; ++i) {
      const Task& copy = s.graph.task(static_cast<int32_t>(succ[i]));
      if (copy.label == TaskLabel::kListCopy) ++gather_copies[copy.work_ps];
    }
  }
  // Per micro-batch and middle layer, forward and backward: QKV and proj
  // twice, FC1 and FC2 four times.
  CHECK(gather_copies[memory_time(cpm, 4 * 3 * h2).ps()] == 2 * 2 * 2);
  CHECK(gather_copies[memory_time(cpm, 4 * h2).ps()] == 2 * 2 * 2);
  CHECK(gather_copies[memory_time(cpm, 4 * 4 * h2).ps()] == 2 * 2 * 4);
  // So the buckets' copies move 4 x grad bytes of every parameter before
  // the all-reduces and 2 x after, per micro-batch (each minus one kernel
  // overhead: memory_time's), the tied output matrix once: the embedding's.
  // The buckets hold the 16-bit gradients as they are (stage3.py
  // allreduce_bucket: fp32 only with allreduce_always_fp32): 2 B each.
  const double gbytes = 2;
  const double stage_params = estimate_memory(c.model, c.cluster, L).stages[0].params;
  double before_s = 0, after_s = 0;
  int before_copies = 0, after_copies = 0;
  for (int32_t id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    if (t.label == TaskLabel::kDpAllReduce) {
      const uint32_t* succ = s.graph.successors(t);
      for (uint32_t i = 0; i < t.succ_count; ++i) {
        const Task& copy = s.graph.task(static_cast<int32_t>(succ[i]));
        if (copy.label != TaskLabel::kListCopy) continue;
        ++after_copies;
        after_s += static_cast<double>(copy.work_ps - cpm.kernel_overhead.ps()) * 1e-12;
      }
    }
    if (t.label != TaskLabel::kListCopy) continue;
    bool before_reduce = false;
    const uint32_t* succ = s.graph.successors(t);
    for (uint32_t i = 0; i < t.succ_count; ++i) {
      before_reduce |= s.graph.task(static_cast<int32_t>(succ[i])).label == TaskLabel::kDpAllReduce;
    }
    if (!before_reduce) continue;
    ++before_copies;
    before_s += static_cast<double>(t.work_ps - cpm.kernel_overhead.ps()) * 1e-12;
  }
  const int reductions = c.count(Framework::kDeepSpeed, TaskLabel::kDpAllReduce);
  CHECK(before_copies == reductions);
  CHECK(after_copies == reductions);
  CHECK(c.count(Framework::kDeepSpeed, TaskLabel::kDpReduceScatter) == 0);
  CHECK_THAT(before_s, WithinRel(2 * (memory_time(cpm, 4 * gbytes * stage_params) - cpm.kernel_overhead).s(), 1e-3));
  CHECK_THAT(after_s, WithinRel(2 * (memory_time(cpm, 2 * gbytes * stage_params) - cpm.kernel_overhead).s(), 1e-3));
  // PyTorch's FSDP2 gathers into one flat buffer: no list copies.
  CHECK(c.count(Framework::kPytorch, TaskLabel::kListCopy) == 0);
}

TEST_CASE("Framework: FSDP2 copies the gathered parameters and the gradients on the compute stream",
          "[sim][framework]") {
  // torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py: each unshard
  // ends with foreach_all_gather_copy_out (split_with_sizes_copy of the
  // all-gather output into the bf16 parameters: 2 B read + 2 B written per
  // parameter) and each reduce-scatter starts with
  // foreach_reduce_scatter_copy_in (_chunk_cat of the bf16 gradients into
  // the fp32 reduce input: 2 B read + 4 B written), both on the current
  // stream.  A layer's forward unshards once; its backward unshards again
  // and reduce-scatters: forward + 4 B x params, backward + 4 B x params +
  // 6 B x params at the GPU's memory-bound rate, against the same plan under
  // ZeRO-1 (no unshard).  Megatron-Core's ZeRO-3 (Megatron FSDP) does not
  // run these copies.
  const ModelSpec model = load_model("llama3-8b");
  const ClusterSpec cluster = load_cluster("dgx-h100");
  Plan p;
  p.framework = Framework::kTorchtitan;
  p.mbs = 2;
  p.seq = 8192;
  p.zero = 3;
  auto costs = [&](const Plan& plan) {
    const Layout L = resolve_plan(model, cluster, 8, plan);
    REQUIRE(L.feasible);
    return step_costs(model, cluster, L.plan);
  };
  const StepCosts fsdp = costs(p);
  p.zero = 1;
  const StepCosts ddp = costs(p);
  const ComputeParams cpm = compute_params(cluster, Precision::kBf16);
  const double params = fsdp.layer.params;
  CHECK(params == Approx(4096.0 * (4096 + 1024 + 1024 + 4096) + 3 * 4096.0 * 14336 + 2 * 4096).epsilon(1e-12));
  const int64_t out = memory_time(cpm, 4 * params).ps(), in = memory_time(cpm, 6 * params).ps();
  CHECK(fsdp.layer_times.forward_ps - ddp.layer_times.forward_ps == out);
  CHECK(fsdp.layer_times.backward_ps - ddp.layer_times.backward_ps == out + in);
  // The output layer is sharded the same way (vocab x hidden parameters).
  CHECK(fsdp.output_forward_ps - ddp.output_forward_ps == memory_time(cpm, 4 * fsdp.output.params).ps());
  p.zero = 3;
  p.framework = Framework::kMegatronCore;
  const StepCosts mcore = costs(p);
  p.zero = 1;
  CHECK(mcore.layer_times.forward_ps == costs(p).layer_times.forward_ps);
}

// GPT-3 1.3B on 4 x RTX 4090 under ZeRO-3 with parameter offload, 8
// micro-batches per rank.
Case rtx_zero3_offload() {
  Case c;
  c.cluster = load_cluster("rtx4090-pcie");
  c.gpus = 4;
  c.plan.zero = 3;
  c.plan.gbs = 32;  // 8 micro-batches per rank
  c.plan.offload = Offload::kParams;
  return c;
}

// Bytes and count of the lowered step's tasks with this label.
std::pair<double, int> labelled_bytes(const LoweredStep& s, TaskLabel label) {
  double bytes = 0;
  int n = 0;
  for (int32_t id = 0; id < s.graph.size(); ++id) {
    const Task& t = s.graph.task(id);
    if (t.label != label) continue;
    bytes += t.wire_bytes;
    ++n;
  }
  return {bytes, n};
}

TEST_CASE("Offload: each rank copies its own shard, 1/dp of a layer, before each gather", "[sim][offload]") {
  // With the shard over 4 ranks each rank holds a quarter of every layer in
  // host memory and copies that quarter before each of the layer's gathers
  // (forward and backward: two per layer and micro-batch): 2 x 8 x params x
  // 2 B / 4 bytes per rank and step, the whole model's bf16 weights once per
  // micro-batch.  (An integer division once made these copies empty, so
  // parameter and optimizer offload gave the same step to the last digit.)
  Case c = rtx_zero3_offload();
  const Layout L = c.layout(Framework::kGeneric);
  const LoweredStep s = lower_step(c.model, c.cluster, L, LoweringOptions{});
  const double bytes = labelled_bytes(s, TaskLabel::kHostToDevice).first;
  // The model's parameters (one stage holds them all); GPT-3's tied
  // embedding is used by the embedding and by the output layer and gathered
  // for each.
  REQUIRE(c.model.tied_embeddings);
  const double params = estimate_memory(c.model, c.cluster, L).stages[0].params +
                        static_cast<double>(c.model.vocab) * static_cast<double>(c.model.hidden);
  CHECK_THAT(bytes, Catch::Matchers::WithinRel(2.0 * 8 * params * 2 / 4, 1e-6));
  // And the copies cost time: parameter offload is slower than keeping the
  // weights on the GPU with only the optimizer offloaded.
  const StepReport with_params = simulate_step(c.model, c.cluster, L, SimulateOptions{});
  c.plan.offload = Offload::kOptimizer;
  CHECK(with_params.step_time_s > c.run(Framework::kGeneric).step_time_s);
}

TEST_CASE("Offload: ZeRO-3 copies each backward pass's gradient shard to the host as it goes", "[sim][offload]") {
  // DeepSpeed stage 3 with offload_optimizer and FSDP2's CPUOffloadPolicy
  // keep the gradient shard on the host (grad_partitions_flat_buffer;
  // CPUOffloadPolicy): every micro-batch's backward sends the rank's shard
  // of each layer's gradients down its PCIe link, in the gradient dtype
  // (fp32 here): per rank and step 8 micro-batches x params / 4 x 4 B (the
  // tied embedding's gradient once).  The optimizer step then moves only the
  // bf16 weights up.
  Case c = rtx_zero3_offload();
  for (Framework fw : {Framework::kDeepSpeed, Framework::kTorchtitan, Framework::kGeneric}) {
    INFO(to_string(fw));
    const Layout L = c.layout(fw);
    const auto [bytes, copies] = labelled_bytes(lower_step(c.model, c.cluster, L, LoweringOptions{}),
                                                TaskLabel::kDeviceToHost);
    const double params = estimate_memory(c.model, c.cluster, L).stages[0].params;
    // Only the representative rank is simulated (one program).
    CHECK_THAT(bytes, Catch::Matchers::WithinRel(8 * params / 4 * 4, 1e-6));
    CHECK(copies > 8);
    // Each copy follows its pass's gradient reduction (DeepSpeed's
    // partition_grads after the reduce-scatter; FSDP2's post_reduce copies
    // on the reduce-scatter stream): every D2H task is a successor of a
    // data-parallel reduction (DeepSpeed's flattened bucket: of the copy
    // back into the parameters' gradients after it).
    {
      const LoweredStep s = lower_step(c.model, c.cluster, L, LoweringOptions{});
      std::vector<bool> after_reduction(static_cast<size_t>(s.graph.size()), false);
      for (int32_t id = 0; id < s.graph.size(); ++id) {
        const Task& t = s.graph.task(id);
        if (t.label != TaskLabel::kDpReduceScatter && t.label != TaskLabel::kDpAllReduce) continue;
        const uint32_t* succ = s.graph.successors(t);
        for (uint32_t i = 0; i < t.succ_count; ++i) {
          after_reduction[succ[i]] = true;
          const Task& next = s.graph.task(static_cast<int32_t>(succ[i]));
          if (next.label != TaskLabel::kListCopy) continue;
          const uint32_t* succ2 = s.graph.successors(next);
          for (uint32_t j = 0; j < next.succ_count; ++j) after_reduction[succ2[j]] = true;
        }
      }
      int followed = 0;
      for (int32_t id = 0; id < s.graph.size(); ++id) {
        followed += s.graph.task(id).label == TaskLabel::kDeviceToHost && after_reduction[static_cast<size_t>(id)];
      }
      CHECK(followed == copies);
    }
    const StepReport r = simulate_step(c.model, c.cluster, L, SimulateOptions{});
    const double shard = params / 4;
    CHECK_THAT(r.breakdown.optimizer,
               Catch::Matchers::WithinRel(shard / (kCpuAdamParamsPerSPerNode / 4) +
                                              shard * 2 / c.cluster.host.bandwidth_per_gpu.bytes_per_s(),
                                          1e-6));
  }
  // DeepSpeed adds on the device (stage3.py partition_grads: the host's
  // running sum comes up first from the second micro-batch on): 7 more
  // shard-sized copies up than FSDP2, which adds on the host.
  const double up_ds = labelled_bytes(lower_step(c.model, c.cluster, c.layout(Framework::kDeepSpeed), LoweringOptions{}),
                                      TaskLabel::kHostToDevice).first;
  const double up_titan = labelled_bytes(
      lower_step(c.model, c.cluster, c.layout(Framework::kTorchtitan), LoweringOptions{}), TaskLabel::kHostToDevice).first;
  const double params = estimate_memory(c.model, c.cluster, c.layout(Framework::kDeepSpeed)).stages[0].params;
  CHECK_THAT(up_ds - up_titan, Catch::Matchers::WithinRel(7 * params / 4 * 4, 1e-6));
  // Megatron's optimizer offload keeps its gradients on the GPU: no copies
  // until the step.
  c.plan.zero = 1;
  c.plan.offload = Offload::kOptimizer;
  CHECK(c.count(Framework::kMegatronCore, TaskLabel::kDeviceToHost) == 0);
}

TEST_CASE("Offload: ZeRO-Offload moves the gradient partition over PCIe at each reduction", "[sim][offload]") {
  // DeepSpeed's stage_1_and_2.py with cpu_offload, on the compute stream
  // (overlap_comm off below stage 3): at each reduction of a step that
  // accumulates, the rank's partition goes down to a bf16 host buffer (2 B
  // per parameter), from the step's second reduction on after its running
  // sum came up (2 B) and was added on the device (read 2 + 2, write 2);
  // the last one also casts it to fp32 (read 2, write 4) and copies that
  // down (4 B).  ZeRO-2 reduces after each of the 8 micro-batches: PCIe
  // 2 + 6 x 4 + (4 + 4) = 34 B per partition parameter, HBM 7 x 6 + 6 =
  // 48 B; ZeRO-1 once, after the last: PCIe 2 + 2 + 4 = 8 B, HBM 6 + 6 =
  // 12 B.  The optimizer step then brings only the bf16 weights up (2 B).
  // (With bf16 gradients the plans without offload accumulate as the
  // offloaded ones do, through autograd's .grad, so the difference is the
  // copies alone.)
  Case c;
  c.gpus = 8;
  c.plan.gbs = 64;  // 8 micro-batches per rank
  c.plan.grad_dtype = GradDtype::kBf16;
  const double pcie = c.cluster.host.bandwidth_per_gpu.bytes_per_s();
  const double hbm = c.cluster.gpu.hbm_bandwidth.bytes_per_s() * c.cluster.gpu.hbm_efficiency;
  for (int zero : {1, 2}) {
    c.plan.zero = zero;
    c.plan.offload = Offload::kNone;
    const double kept = stage_compute_s(c, Framework::kDeepSpeed, 0);
    c.plan.offload = Offload::kOptimizer;
    const Layout L = c.layout(Framework::kDeepSpeed);
    const double partition = estimate_memory(c.model, c.cluster, L).stages[0].params / 8;
    const double pcie_bytes = zero == 2 ? 34 : 8, hbm_bytes = zero == 2 ? 48 : 12;
    const double copies_s = partition * (pcie_bytes / pcie + hbm_bytes / hbm);
    INFO("ZeRO-" << zero);
    CHECK_THAT(stage_compute_s(c, Framework::kDeepSpeed, 0) - kept, Catch::Matchers::WithinRel(copies_s, 0.01));
    const StepReport r = simulate_step(c.model, c.cluster, L, SimulateOptions{});
    CHECK_THAT(r.breakdown.optimizer,
               Catch::Matchers::WithinRel(partition / (kCpuAdamParamsPerSPerNode / 8) + partition * 2 / pcie, 1e-6));
  }
  // Megatron's --optimizer-cpu-offload keeps the gradients on the GPU until
  // the step, which copies them down with the weights up: no per-reduction
  // copies.
  c.plan.zero = 1;
  c.plan.offload = Offload::kNone;
  const double mc_kept = stage_compute_s(c, Framework::kMegatronCore, 0);
  c.plan.offload = Offload::kOptimizer;
  CHECK_THAT(stage_compute_s(c, Framework::kMegatronCore, 0), Catch::Matchers::WithinRel(mc_kept, 1e-9));
}

TEST_CASE("Framework: DeepSpeed ZeRO-2 reduces its gradients in the model's 16-bit dtype", "[sim][framework]") {
  // zero/stage_1_and_2.py: the ipg buckets hold the gradients in the
  // model's dtype and average_tensor reduce-scatters them in
  // communication_data_type, which engine.py defaults to bf16 under bf16;
  // grads_in_partition is allocated in that dtype too, so an fp32
  // grad_accum_dtype changes neither.  Megatron-Core reduce-scatters its
  // fp32 main-gradient buffer.  Each framework's reduce-scatters carry the
  // whole gradient once per reduction, (dp - 1) / dp of it per rank on the
  // wire: DeepSpeed ZeRO-2 reduces after each of 4 micro-batches at 2 B,
  // Megatron-Core once at 4 B, so DeepSpeed's wire bytes are 4 x 2 / 4 = 2x
  // Megatron-Core's, where fp32 reductions would make them 4x.
  Case c;
  c.plan.gbs = 128;  // dp 32, 4 micro-batches per rank
  c.plan.zero = 2;
  REQUIRE(c.plan.grad_dtype == GradDtype::kFp32);
  const auto rs_bytes = [&](Framework f) {
    return labelled_bytes(lower_step(c.model, c.cluster, c.layout(f), LoweringOptions{}),
                          TaskLabel::kDpReduceScatter)
        .first;
  };
  const double ds = rs_bytes(Framework::kDeepSpeed), mc = rs_bytes(Framework::kMegatronCore);
  REQUIRE(mc > 0);
  CHECK_THAT(ds / mc, WithinRel(2.0, 1e-6));
}

}  // namespace
}  // namespace trainplan
