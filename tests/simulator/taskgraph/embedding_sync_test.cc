// Tied embeddings across the pipeline (lowering.cc build_embedding_sync):
// the first and last stages' copies of the word embedding have their
// gradients all-reduced every step before the update, as Megatron-LM's
// train_step / Megatron-Core's finalize_model_grads (_allreduce_word_embedding_grads)
// and DeepSpeed's pipeline engine (_exec_reduce_tied_grads) do.
#include <catch2/catch.hpp>

#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/taskgraph/lowering.h"

namespace trainplan {
namespace {

using Catch::Matchers::WithinRel;

struct Lowered {
  ModelSpec model;
  ClusterSpec cluster = load_cluster("dgx-a100");
  Layout layout;
  LoweredStep step;

  Lowered(const std::string& name, const Plan& p, int gpus) : model(load_model(name)) {
    layout = resolve_plan(model, cluster, gpus, p);
    REQUIRE(layout.feasible);
    step = lower_step(model, cluster, layout, LoweringOptions{});
  }
  std::vector<int32_t> syncs() const {
    std::vector<int32_t> out;
    for (int32_t id = 0; id < step.graph.size(); ++id) {
      if (step.graph.task(id).label == TaskLabel::kEmbeddingGradSync) out.push_back(id);
    }
    return out;
  }
};

Plan pipeline(int tp, int pp) {
  Plan p;
  p.tp = tp;
  p.pp = pp;
  p.gbs = 8;
  return p;
}

TEST_CASE("EmbeddingSync: tied embeddings on two stages all-reduce the matrix's gradient before both updates",
          "[sim][pipeline]") {
  // GPT-3 1.3B (tied): 50,257 x 2,048 padded by Megatron to a multiple of
  // 128 x tp rows; fp32 gradients (trainplan's default grad dtype); a ring
  // all-reduce over 2 ranks moves 2(n-1)/n = 1 x the buffer per rank.
  const Lowered l("gpt3-1.3b", pipeline(2, 4), 8);
  const std::vector<int32_t> syncs = l.syncs();
  REQUIRE(syncs.size() == 1);  // one pipeline simulated (representative ranks)
  const TaskGraph& g = l.step.graph;
  const Task& t = g.task(syncs[0]);
  const double bytes = static_cast<double>(l.model.vocab) * static_cast<double>(l.model.hidden) / 2 * 4;
  CHECK_THAT(t.wire_bytes, WithinRel(bytes, 1e-9));
  // Its members: the first and the last stage; it feeds both optimizer steps.
  REQUIRE(t.member_count == 2);
  const int32_t* m = g.members(t);
  CHECK(l.step.ranks[static_cast<size_t>(m[0])].pp == 0);
  CHECK(l.step.ranks[static_cast<size_t>(m[1])].pp == 3);
  int optimizers = 0;
  const uint32_t* succ = g.successors(t);
  for (uint32_t k = 0; k < t.succ_count; ++k) {
    optimizers += g.task(static_cast<int32_t>(succ[k])).label == TaskLabel::kOptimizer;
  }
  CHECK(optimizers == 2);
}

TEST_CASE("EmbeddingSync: none where one rank holds the only copy or the embeddings are untied", "[sim][pipeline]") {
  // One stage: the output layer uses the embedding's matrix itself.
  CHECK(Lowered("gpt3-1.3b", pipeline(2, 1), 8).syncs().empty());
  // Untied (Llama): two matrices, nothing to keep equal.
  CHECK(Lowered("llama3-8b", pipeline(1, 4), 8).syncs().empty());
  // V-shaped schedule: rank 0 holds the first and the last stage.
  Plan v = pipeline(1, 4);
  v.schedule = Schedule::kZbv;
  v.schedule_given = true;
  v.gbs = 16;
  const Lowered vl("gpt3-1.3b", v, 4);
  REQUIRE(vl.layout.plan.schedule == Schedule::kZbv);
  CHECK(vl.syncs().empty());
}

}  // namespace
}  // namespace trainplan
