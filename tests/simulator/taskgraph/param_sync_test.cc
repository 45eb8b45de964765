// Megatron-Core's overlapped parameter all-gather and its gradient buckets
// (lowering.cc build_param_sync, bucket_cap; ExecutionProfile::
// overlap_param_gather, buckets_first_chunk_only).  With the distributed
// optimizer and --overlap-param-gather, the updated parameters are gathered
// bucket by bucket in forward order, each bucket dispatched once the one
// before it has arrived (core_r0.8.0 distrib_optimizer.py zero_grad /
// _finish_param_sync_helper; param_and_grad_buffer.py finish_param_sync
// since), and the first forward of each model chunk waits for the bucket of
// each layer; buckets hold max(40M, 1M x dp) parameters, built from the
// model's end, on the first pipeline stage's first chunk only
// (distributed_data_parallel.py: one bucket on pp ranks > 0 and, through
// training.py's disable_bucketing, on model chunks after the first); the
// first bucket leaves from the first forward's pre-hook (since core_r0.9.0),
// on a later stage of a non-interleaved pipeline once its input has arrived.
#include <catch2/catch.hpp>

#include <algorithm>
#include <map>
#include <vector>

#include "simulator/engine/engine.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/taskgraph/lowering.h"

namespace trainplan {
namespace {

using Catch::Matchers::WithinRel;

struct Run {
  ModelSpec model = load_model("llama3-8b");
  ClusterSpec cluster = load_cluster("dgx-h100");
  LoweredStep step;
  EngineResult result;

  Run(const Plan& p, int gpus) {
    const Layout layout = resolve_plan(model, cluster, gpus, p);
    REQUIRE(layout.feasible);
    step = lower_step(model, cluster, layout, LoweringOptions{});
    EngineOptions o;
    o.static_bytes = step.static_bytes;
    result = run_engine(step.graph, step.network, o);
  }
  std::vector<int32_t> tasks(TaskLabel label, int stage) const {
    std::vector<int32_t> out;
    for (int32_t id = 0; id < step.graph.size(); ++id) {
      const Task& t = step.graph.task(id);
      if (t.label != label) continue;
      const int32_t rank = step.graph.members(t)[0];
      if (step.ranks[static_cast<size_t>(rank)].pp == stage) out.push_back(id);
    }
    return out;
  }
  const TaskTime& time(int32_t id) const { return result.times[static_cast<size_t>(id)]; }
};

Plan megatron_core(int pp, int dp, int64_t gbs) {
  Plan p;
  p.pp = pp;
  p.dp = dp;
  p.zero = 1;
  p.gbs = gbs;
  p.framework = Framework::kMegatronCore;
  return p;
}

// Llama 3 8B's parameters layer by layer (Dubey et al. 2024 Table 3; the
// model file's figures): attention 4096 x (4096 + 2 x 8 x 128) + 4096 x 4096,
// SwiGLU MLP 3 x 4096 x 14336, two RMSNorms; the embedding and the untied
// output matrix 128256 x 4096 each (the output with the final norm).
constexpr double kLayer = 4096.0 * (4096 + 2 * 8 * 128) + 4096.0 * 4096 + 3 * 4096.0 * 14336 + 2 * 4096;
constexpr double kVocab = 128256.0 * 4096;

TEST_CASE("ParamSync: the distributed optimizer's all-gather in Megatron-Core's buckets, in forward order",
          "[sim][paramsync]") {
  // 256 GPUs of data parallelism, one micro-batch each: buckets of
  // max(40M, 1M x 256) = 256M parameters.  Megatron fills them from the
  // model's end and closes one once it reaches the cap; a layer (218M) is
  // not split here.  The same walk, done by hand:
  std::vector<double> params(32, kLayer);
  params.front() += kVocab;
  params.back() += kVocab + 4096;
  const double cap = 256e6;
  std::vector<int> first_layers;  // of each bucket, from the model's end
  std::vector<double> sizes;
  double open = 0;
  for (int l = 31; l >= 0; --l) {
    open += params[static_cast<size_t>(l)];
    if (open >= cap || l == 0) {
      first_layers.push_back(l);
      sizes.push_back(open);
      open = 0;
    }
  }
  std::reverse(first_layers.begin(), first_layers.end());
  std::reverse(sizes.begin(), sizes.end());
  REQUIRE(first_layers.size() == 17);  // {0 + embedding}, {1, 2} ... {29, 30}, {31 + output}

  const Run run(megatron_core(1, 256, 256), 256);
  const TaskGraph& g = run.step.graph;
  const std::vector<int32_t> gathers = run.tasks(TaskLabel::kDpAllGather, 0);
  REQUIRE(gathers.size() == first_layers.size());
  double gathered = 0;
  for (size_t b = 0; b < gathers.size(); ++b) {
    const Task& t = g.task(gathers[b]);
    // A ring all-gather brings (n - 1)/n of the bf16 bucket to each rank.
    CHECK_THAT(t.wire_bytes, WithinRel(sizes[b] * 2 * 255 / 256, 1e-3));
    gathered += t.wire_bytes;
    // It gates the step's first forward at the bucket's first layer.
    const uint32_t* succ = g.successors(t);
    REQUIRE(t.succ_count >= 1);
    const Task& fwd = g.task(static_cast<int32_t>(succ[0]));
    CHECK(fwd.label == TaskLabel::kForward);
    CHECK(fwd.microbatch == 0);
    CHECK(fwd.layer == first_layers[b]);
    // Back to back from the step's start: each is dispatched once the one
    // before it has arrived, none waits for the forward.
    const int64_t ready = b == 0 ? 0 : run.time(gathers[b - 1]).end_ps;
    CHECK(run.time(gathers[b]).start_ps == ready);
    CHECK(run.time(static_cast<int32_t>(succ[0])).start_ps >= run.time(gathers[b]).end_ps);
  }
  // Once per step: the whole bf16 model (8.03B parameters).
  CHECK_THAT(gathered, WithinRel((32 * kLayer + 2 * kVocab + 4096) * 2 * 255 / 256, 1e-3));
}

TEST_CASE("ParamSync: the first forward ends no earlier than the last bucket's arrival plus the layers after it",
          "[sim][paramsync]") {
  // The closed form of a one-bucket prefetch chain: layer l of the first
  // micro-batch starts at max(end of layer l-1, arrival of its bucket), so
  // the forward ends at max over buckets b of (arrival of b + the forward
  // time of the layers from b's first to the last), and the exposure is what
  // that adds to the forward alone.  Short sequences (1,024 tokens) over 32
  // nodes: the 16 GB of bf16 parameters take longer than the forward.
  Plan p = megatron_core(1, 256, 512);
  p.seq = 1024;
  const Run run(p, 256);
  const TaskGraph& g = run.step.graph;
  const std::vector<int32_t> gathers = run.tasks(TaskLabel::kDpAllGather, 0);
  REQUIRE(!gathers.empty());
  std::vector<int32_t> forward(32, -1);  // the first micro-batch's layer tasks
  for (int32_t id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.label == TaskLabel::kForward && t.microbatch == 0 && t.layer >= 0) forward[static_cast<size_t>(t.layer)] = id;
  }
  REQUIRE(std::find(forward.begin(), forward.end(), -1) == forward.end());
  int64_t expected = 0;
  for (int32_t ag : gathers) {
    const int first = g.task(static_cast<int32_t>(g.successors(g.task(ag))[0])).layer;
    int64_t rest = 0;
    for (int l = first; l < 32; ++l) {
      const TaskTime& t = run.time(forward[static_cast<size_t>(l)]);
      rest += t.end_ps - t.start_ps;
    }
    expected = std::max(expected, run.time(ag).end_ps + rest);
  }
  CHECK(run.time(forward.back()).end_ps == expected);
  // Here the gathers outrun the forward: it waits beyond the first bucket.
  int64_t busy = 0;
  for (int32_t id : forward) busy += run.time(id).end_ps - run.time(id).start_ps;
  const int64_t exposed = run.time(forward.back()).end_ps - busy;
  CHECK(exposed > run.time(gathers.front()).end_ps);
}

TEST_CASE("ParamSync: one bucket per model chunk after the first pipeline stage's first chunk, dispatched on arrival",
          "[sim][paramsync]") {
  // Two stages of 16 layers, dp 16 (buckets of 40M parameters: one per
  // layer on stage 0); stage 1 gathers and reduces its whole chunk at once.
  const Run run(megatron_core(2, 16, 64), 32);
  const std::vector<int32_t> gathers0 = run.tasks(TaskLabel::kDpAllGather, 0);
  const std::vector<int32_t> gathers1 = run.tasks(TaskLabel::kDpAllGather, 1);
  CHECK(gathers0.size() == 16);
  REQUIRE(gathers1.size() == 1);
  // Stage 1: 16 layers, the final norm and the output matrix, in bf16.
  CHECK_THAT(run.step.graph.task(gathers1[0]).wire_bytes,
             WithinRel((16 * kLayer + kVocab + 4096) * 2 * 15 / 16, 1e-3));
  // Its gradients leave in one reduce-scatter once its last backward is done;
  // stage 0 reduces in layer-sized buckets during its last backward.
  const std::vector<int32_t> reduce1 = run.tasks(TaskLabel::kDpReduceScatter, 1);
  REQUIRE(reduce1.size() == 1);
  int64_t last_backward = 0;
  for (int32_t id = 0; id < run.step.graph.size(); ++id) {
    const Task& t = run.step.graph.task(id);
    if (t.type == TaskType::kCompute && t.label == TaskLabel::kBackward &&
        run.step.ranks[static_cast<size_t>(t.rank)].pp == 1) {
      last_backward = std::max(last_backward, run.time(id).end_ps);
    }
  }
  CHECK(run.time(reduce1[0]).start_ps >= last_backward);
  CHECK(run.tasks(TaskLabel::kDpReduceScatter, 0).size() > 1);
  // Non-interleaved, stage 1 dispatches its gather from the first forward's
  // pre-hook, which its host reaches once the blocking receive of that
  // forward's input is done (batch_p2p_sync); stage 0's starts the step.
  int64_t received = -1;
  for (int32_t id = 0; id < run.step.graph.size(); ++id) {
    const Task& t = run.step.graph.task(id);
    if (t.label == TaskLabel::kSendForward && t.microbatch == 0) received = run.time(id).end_ps;
  }
  REQUIRE(received > 0);
  CHECK(run.time(gathers1[0]).start_ps == received);
  CHECK(run.time(gathers0[0]).start_ps == 0);
}

TEST_CASE("ParamSync: the interleaved schedule gathers chunks 0 and 1 at its start, chunk c from virtual "
          "micro-batch (c - 1) pp - r", "[sim][paramsync]") {
  // schedules.py forward_backward_pipelining_with_interleaving: param_sync_func
  // for chunks 0 and 1 before the first forward; chunk c >= 2 from the
  // forward step of virtual micro-batch k with k + r the first micro-batch of
  // chunk c - 1 (groups of pp micro-batches), i.e. on rank r > 0 chunk c - 2's
  // micro-batch pp - r, on rank 0 chunk c - 1's micro-batch 0.  Llama 3 8B
  // over pp 2, vp 4 (chunks of 4 layers), dp 16, 4 micro-batches.
  Plan p = megatron_core(2, 16, 64);
  p.vp = 4;
  const Run run(p, 32);
  const TaskGraph& g = run.step.graph;
  // The first bucket of each chunk (one bucket per chunk off stage 0's chunk 0).
  for (int stage = 0; stage < 2; ++stage) {
    std::map<int, int32_t> first_of_chunk;
    for (int32_t ag : run.tasks(TaskLabel::kDpAllGather, stage)) {
      const Task& fwd = g.task(static_cast<int32_t>(g.successors(g.task(ag))[0]));
      if (first_of_chunk.count(fwd.chunk) == 0) first_of_chunk[fwd.chunk] = ag;
    }
    REQUIRE(first_of_chunk.size() == 4);
    CHECK(run.time(first_of_chunk[0]).start_ps == 0);
    for (int c = 2; c < 4; ++c) {
      const int launch_chunk = stage == 0 ? c - 1 : c - 2;
      const int launch_mb = stage == 0 ? 0 : 2 - stage;
      int64_t launch = -1;
      for (int32_t id = 0; id < g.size(); ++id) {
        const Task& t = g.task(id);
        if (t.type == TaskType::kCompute && t.label == TaskLabel::kForward && t.chunk == launch_chunk &&
            t.microbatch == launch_mb && run.step.ranks[static_cast<size_t>(t.rank)].pp == stage &&
            (launch < 0 || run.time(id).start_ps < launch)) {
          launch = run.time(id).start_ps;
        }
      }
      REQUIRE(launch >= 0);
      CHECK(run.time(first_of_chunk[c]).start_ps >= launch);
    }
  }
}

TEST_CASE("ParamSync: a model chunk of only the loss gathers and reduces the output layer", "[sim][paramsync]") {
  // Llama 3 8B over pp 2, vp 2 with stages of 30 and 2 layers: the short
  // last stage counts the loss as a layer's place (chunk_layers, as
  // Megatron-Core's --account-for-loss-in-pipeline-split builds it), so its
  // chunks hold 2 layers and none, the second only the final norm and the
  // output matrix.  dp 16: the chunk's parameters are gathered in bf16 and
  // its fp32 gradients reduce-scattered, (dp - 1) / dp of each through a
  // member's port.
  Plan p = megatron_core(2, 16, 64);
  p.vp = 2;
  p.stage_layers = {30, 2};
  const Run run(p, 32);
  const TaskGraph& g = run.step.graph;
  std::map<int, double> gathered;
  for (int32_t ag : run.tasks(TaskLabel::kDpAllGather, 1)) {
    gathered[g.task(static_cast<int32_t>(g.successors(g.task(ag))[0])).chunk] += g.task(ag).wire_bytes;
  }
  REQUIRE(gathered.size() == 2);
  CHECK_THAT(gathered[0], WithinRel(2 * kLayer * 2 * 15 / 16, 1e-3));
  CHECK_THAT(gathered[1], WithinRel((kVocab + 4096) * 2 * 15 / 16, 1e-3));
  double reduced = 0;
  for (int32_t rs : run.tasks(TaskLabel::kDpReduceScatter, 1)) reduced += g.task(rs).wire_bytes;
  CHECK_THAT(reduced, WithinRel((2 * kLayer + kVocab + 4096) * 4 * 15 / 16, 1e-3));
  // Every micro-batch runs the loss chunk's forward and backward once.
  int forwards = 0, backwards = 0;
  for (int32_t id = 0; id < g.size(); ++id) {
    const Task& t = g.task(id);
    if (t.type != TaskType::kCompute || t.chunk != 1 || run.step.ranks[static_cast<size_t>(t.rank)].pp != 1) continue;
    CHECK(t.layer_count == 0);
    forwards += t.label == TaskLabel::kForward;
    backwards += t.label == TaskLabel::kBackward;
  }
  CHECK(forwards == 4);
  CHECK(backwards == 4);
}

TEST_CASE("ZeRO-3: a layer's reduce-scatter queues behind the next layer's prefetched all-gather", "[sim][paramsync]") {
  // FSDP2 issues its collectives on one communicator in this order: layer
  // L's pre-backward hook prefetches L-1's all-gather, then L's
  // post-backward hook issues L's reduce-scatter (_fsdp_state.py
  // _pre_backward -> _backward_prefetch; post_backward -> foreach_reduce),
  // and ProcessGroupNCCL runs one communicator's collectives in issue order.
  // So the gather a backward needs is never stuck behind the reduce-scatter
  // of the layer just finished: wherever a layer's backward outlasts one
  // reduce-scatter plus one all-gather, consecutive backwards run back to
  // back.  (Queued the other way round, every backward would wait for both.)
  // Llama 3 8B, torchtitan, FSDP over 8 H100, one micro-batch.
  Plan p;
  p.dp = 8;
  p.zero = 3;
  p.gbs = 8;
  p.framework = Framework::kTorchtitan;
  const Run r(p, 8);
  std::vector<int32_t> backward;
  for (int32_t id = 0; id < r.step.graph.size(); ++id) {
    const Task& t = r.step.graph.task(id);
    if (t.label == TaskLabel::kBackward && t.rank == 0) backward.push_back(id);
  }
  std::sort(backward.begin(), backward.end(),
            [&](int32_t a, int32_t b) { return r.time(a).start_ps < r.time(b).start_ps; });
  REQUIRE(backward.size() >= 32);
  auto longest = [&](TaskLabel label) {
    int64_t most = 0;
    for (int32_t id : r.tasks(label, 0)) most = std::max(most, r.time(id).end_ps - r.time(id).start_ps);
    return most;
  };
  const int64_t comm = longest(TaskLabel::kDpReduceScatter) + longest(TaskLabel::kParamAllGather);
  REQUIRE(comm > 0);
  for (size_t i = 1; i + 1 < backward.size(); ++i) {
    const TaskTime& prev = r.time(backward[i - 1]);
    const TaskTime& cur = r.time(backward[i]);
    REQUIRE(prev.end_ps - prev.start_ps > comm);  // the condition above holds here
    CHECK(cur.start_ps - prev.end_ps <= 1000);    // back to back (1 ns)
  }
}

}  // namespace
}  // namespace trainplan
