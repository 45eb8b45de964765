// Tests of plan resolution: derived values, the exact reasons an impossible
// plan gives, and the pipeline stage split (FORMULAS.md §2.4).
#include "simulator/spec/plan.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "simulator/core/error.h"
#include "tests/simulator/fixtures.h"

namespace trainplan {
namespace {

bool has_reason(const Layout& l, const std::string& why) {
  return std::find(l.reasons.begin(), l.reasons.end(), why) != l.reasons.end();
}

std::string all_reasons(const Layout& l) {
  std::string out;
  for (const std::string& r : l.reasons) out += r + "\n";
  return out;
}

TEST_CASE("Plan: resolve_plan derives dp, gbs, seq and the schedule", "[sim][spec]") {
  const ModelSpec m = load_model("llama2-7b");
  const ClusterSpec c = load_cluster("dgx-a100");
  SECTION("dp = gpus / (tp*pp*cp)") {
    // 64 GPUs / (4 * 2 * 2) = 4.
    Plan p;
    p.tp = 4;
    p.pp = 2;
    p.cp = 2;
    const Layout l = resolve_plan(m, c, 64, p);
    INFO(all_reasons(l));
    CHECK(l.feasible);
    CHECK(l.plan.dp == 4);
    CHECK(l.nodes == 8);
    CHECK(l.gpus == 64);
  }
  SECTION("gbs defaults to mbs*dp, so one micro-batch per step") {
    Plan p;
    p.tp = 8;
    p.mbs = 2;
    const Layout l = resolve_plan(m, c, 64, p);
    CHECK(l.plan.dp == 8);
    CHECK(l.plan.gbs == 16);
    CHECK(l.microbatches == 1);
  }
  SECTION("microbatches = gbs / (mbs*dp)") {
    // 1024 / (2 * 8) = 64.
    Plan p;
    p.tp = 8;
    p.mbs = 2;
    p.gbs = 1024;
    CHECK(resolve_plan(m, c, 64, p).microbatches == 64);
  }
  SECTION("seq defaults to the model's training length") { CHECK(resolve_plan(m, c, 8, Plan{}).plan.seq == 4096); }
  SECTION("vp > 1 selects the interleaved schedule, otherwise 1F1B") {
    Plan p;
    p.pp = 4;
    p.vp = 2;
    p.gbs = 8;
    const Layout l = resolve_plan(m, c, 8, p);
    CHECK(l.plan.schedule == Schedule::kInterleaved);
    CHECK(resolve_plan(m, c, 8, Plan{}).plan.schedule == Schedule::k1F1B);
  }
  SECTION("a part of one node is allowed") {
    const Layout l = resolve_plan(m, c, 4, Plan{});
    CHECK(l.feasible);
    CHECK(l.nodes == 1);
    CHECK(l.plan.dp == 4);
  }
  SECTION("ZeRO shards over dp*cp, no ZeRO over 1") {
    Plan p;
    p.tp = 2;
    p.cp = 2;
    p.zero = 1;
    CHECK(resolve_plan(m, c, 16, p).shard_degree == 8);  // dp = 16/4 = 4; dp*cp = 8
    p.zero = 0;
    CHECK(resolve_plan(m, c, 16, p).shard_degree == 1);
  }
}

TEST_CASE("Plan: an impossible plan is an answer with exact reasons", "[sim][spec]") {
  const ModelSpec m = load_model("llama2-7b");  // 32 heads, 32 layers
  const ClusterSpec c = load_cluster("dgx-a100");
  SECTION("tp must divide the heads") {
    // 6 GPUs (part of a node), tp=3, dp=2; 32 % 3 != 0.
    Plan p;
    p.tp = 3;
    const Layout l = resolve_plan(m, c, 6, p);
    CHECK_FALSE(l.feasible);
    REQUIRE_FALSE(l.reasons.empty());
    CHECK(l.reasons[0] == "tp=3 does not divide heads=32");
  }
  SECTION("an explicit dp must fill the cluster") {
    // 8 * 4 * 3 * 1 = 96 on 8 nodes of 8 GPUs.
    Plan p;
    p.tp = 8;
    p.pp = 4;
    p.dp = 3;
    const Layout l = resolve_plan(m, c, 64, p);
    CHECK_FALSE(l.feasible);
    CHECK(has_reason(l, "tp*pp*dp*cp = 96 but the cluster has 64 GPUs"));
  }
  SECTION("tp*pp*cp must divide the GPUs when dp is derived") {
    Plan p;
    p.tp = 8;
    p.pp = 3;
    const Layout l = resolve_plan(m, c, 64, p);
    CHECK(has_reason(l, "tp*pp*cp = 24 does not divide the cluster's 64 GPUs"));
  }
  SECTION("gbs must be a multiple of mbs*dp") {
    // tp=8 on 64 GPUs: dp = 8; mbs*dp = 64; 1000 = 15*64 + 40.
    Plan p;
    p.tp = 8;
    p.mbs = 8;
    p.gbs = 1000;
    const Layout l = resolve_plan(m, c, 64, p);
    CHECK_FALSE(l.feasible);
    CHECK(has_reason(l, "gbs=1000 is not a multiple of mbs*dp = 64"));
  }
  SECTION("pp may not exceed the layers") {
    Plan p;
    p.pp = 64;
    CHECK(has_reason(resolve_plan(m, c, 64, p), "pp=64 exceeds layers=32"));
  }
  SECTION("sequence parallel needs tp to divide seq") {
    Plan p;
    p.tp = 8;
    p.sp = true;
    p.seq = 4100;  // 4100 % 8 = 4
    CHECK(has_reason(resolve_plan(m, c, 8, p), "sequence parallel needs tp=8 to divide seq=4100"));
  }
  SECTION("several nodes of a single box") {
    const ClusterSpec box = load_cluster("rtx4090-pcie");
    const Layout l = resolve_plan(m, box, 8, Plan{});
    CHECK(has_reason(l, "cluster rtx4090-pcie is a single box without an inter-node fabric, but 2 nodes were asked for"));
  }
  SECTION("parameter offload needs ZeRO-3") {
    Plan p;
    p.zero = 2;
    p.offload = Offload::kParams;
    CHECK(has_reason(resolve_plan(m, c, 8, p), "parameter offload needs ZeRO stage 3"));
  }
  SECTION("a feasible plan has no reasons") {
    const Layout l = resolve_plan(m, c, 8, Plan{});
    CHECK(l.feasible);
    CHECK(l.reasons.empty());
  }
}

TEST_CASE("Plan: the GPU count must be whole nodes or part of one", "[sim][spec]") {
  const ModelSpec m = load_model("llama2-7b");
  const ClusterSpec c = load_cluster("dgx-a100");
  SECTION("12 GPUs on 8-GPU nodes") {
    REQUIRE_THROWS_AS(check_gpu_count(c, 12, "--gpus", ""), InputError);
    REQUIRE_THROWS_WITH(check_gpu_count(c, 12, "--gpus", ""),
                        "--gpus: 12 is not a multiple of the 8 GPUs per node of dgx-a100; "
                        "use whole nodes, or fewer GPUs than one node");
  }
  SECTION("the error names the plan file's field when the count came from one") {
    REQUIRE_THROWS_WITH(check_gpu_count(c, 12, "plan.json", "/gpus"),
                        "plan.json: /gpus: 12 is not a multiple of the 8 GPUs per node of dgx-a100; "
                        "use whole nodes, or fewer GPUs than one node");
  }
  SECTION("part of one node and whole nodes pass") {
    CHECK_NOTHROW(check_gpu_count(c, 4, "--gpus", ""));
    CHECK_NOTHROW(check_gpu_count(c, 64, "--gpus", ""));
  }
  SECTION("zero GPUs") { REQUIRE_THROWS_WITH(check_gpu_count(c, 0, "--gpus", ""), "--gpus: out of range: 0; allowed: 1 to 16777216"); }
  SECTION("zero nodes") { REQUIRE_THROWS_WITH(gpus_of_nodes(c, 0), "--nodes: out of range: 0; allowed: 1 to 1048576"); }
  SECTION("nodes times GPUs per node") { CHECK(gpus_of_nodes(c, 16) == 128); }
}

TEST_CASE("Plan: balance_stage_layers splits layers over pipeline stages", "[sim][spec]") {
  SECTION("Llama 3 405B: 126 layers over 16 stages give 7, 8 x 14, 7") {
    // Dubey et al. 2024 Sec. 3.3.2: one layer fewer on the first and last
    // stage, for the embedding and the loss: (126 + 2) / 16 = 8 units each.
    std::vector<int> expected(16, 8);
    expected.front() = 7;
    expected.back() = 7;
    const std::vector<int> got = balance_stage_layers(126, 16);
    CHECK(got == expected);
    CHECK(std::accumulate(got.begin(), got.end(), 0) == 126);
  }
  SECTION("an even split stays even") { CHECK(balance_stage_layers(32, 4) == std::vector<int>{8, 8, 8, 8}); }
  SECTION("30 layers over 4 stages: (30 + 2) / 4 = 8 units each") {
    CHECK(balance_stage_layers(30, 4) == std::vector<int>{7, 8, 8, 7});
  }
  SECTION("the remainder goes to the middle stages first") {
    // (31 + 2) = 8*4 + 1: the extra unit goes to stage 1.
    CHECK(balance_stage_layers(31, 4) == std::vector<int>{7, 9, 8, 7});
  }
  SECTION("one stage takes all layers") { CHECK(balance_stage_layers(80, 1) == std::vector<int>{80}); }
  SECTION("the split always sums to the layers") {
    for (int layers : {24, 30, 31, 33, 61, 80, 95, 96, 105, 126}) {
      for (int pp : {2, 3, 4, 8}) {
        INFO("layers=" << layers << " pp=" << pp);
        const std::vector<int> got = balance_stage_layers(layers, pp);
        REQUIRE(got.size() == static_cast<size_t>(pp));
        CHECK(std::accumulate(got.begin(), got.end(), 0) == layers);
        CHECK(*std::min_element(got.begin(), got.end()) >= 1);
      }
    }
  }
}

TEST_CASE("Plan: work_balanced_stage_layers finds the split whose costliest stage is least", "[sim][spec]") {
  SECTION("equal layers, the embedding and the loss a layer each: Megatron's account-for split") {
    // Megatron-Core --account-for-embedding-in-pipeline-split
    // --account-for-loss-in-pipeline-split (transformer_block.py
    // get_num_layers_to_build): (126 + 2) / 16 = 8 places a stage, the end
    // stages one layer fewer: 7, 8 x 14, 7 (Llama 3 405B).
    std::vector<int> expected(16, 8);
    expected.front() = 7;
    expected.back() = 7;
    CHECK(work_balanced_stage_layers(std::vector<double>(126, 1.0), 16, 1.0, 1.0) == expected);
  }
  SECTION("a heavy output layer leaves the last stage short") {
    // GPT-OSS 120B shape: 36 equal layers, the output layer and loss about
    // 4.6 layers, the embedding 0.05.  Best: 10, 10, 10, 6 (the last stage
    // 6 + 4.6 = 10.6); the even 9 x 4 peaks at 13.6, 11, 10, 10, 5 at 11.05.
    const std::vector<int> got = work_balanced_stage_layers(std::vector<double>(36, 1.0), 4, 0.05, 4.6);
    CHECK(got == std::vector<int>{10, 10, 10, 6});
  }
  SECTION("against a brute force over every split") {
    // Oracle: every composition of the layers into pp non-empty stages; the
    // returned split's costliest stage equals the least of them, and among
    // the splits that reach it, none holds fewer layers on the first stage
    // (the later stages are filled first).
    const std::vector<double> work = {1.0, 0.6, 1.4, 1.0, 1.0, 2.2, 0.3, 1.0, 1.1, 0.9, 1.0, 1.7};
    for (int layers : {3, 7, 12}) {
      const std::vector<double> w(work.begin(), work.begin() + layers);
      for (int pp = 1; pp <= layers; ++pp) {
        for (const std::pair<double, double>& ends :
             {std::pair{0.0, 0.0}, std::pair{0.05, 2.5}, std::pair{1.0, 1.0}, std::pair{3.0, 0.2}}) {
          const double first = ends.first, last = ends.second;  // plain names: lambdas below capture them
          INFO("layers " << layers << " pp " << pp << " first " << first << " last " << last);
          const std::vector<int> got = work_balanced_stage_layers(w, pp, first, last);
          REQUIRE(static_cast<int>(got.size()) == pp);
          CHECK(std::accumulate(got.begin(), got.end(), 0) == layers);
          CHECK(*std::min_element(got.begin(), got.end()) >= 1);
          double best = std::numeric_limits<double>::infinity();
          testing::for_each_split(layers, pp, [&](const std::vector<int>& s) {
            best = std::min(best, testing::costliest_stage(w, s, first, last));
          });
          const double cost = testing::costliest_stage(w, got, first, last);
          CHECK(cost == Approx(best).epsilon(1e-9));
          int lightest_first = layers;
          testing::for_each_split(layers, pp, [&](const std::vector<int>& s) {
            if (testing::costliest_stage(w, s, first, last) <= best * (1 + 1e-9)) {
              lightest_first = std::min(lightest_first, s[0]);
            }
          });
          CHECK(got.front() == lightest_first);
        }
      }
    }
  }
  SECTION("no split") {
    CHECK(work_balanced_stage_layers(std::vector<double>(4, 1.0), 5, 0, 0).empty());
    CHECK(work_balanced_stage_layers({1.0, -1.0}, 2, 0, 0).empty());
    CHECK(work_balanced_stage_layers({1.0, 1.0}, 2, std::nan(""), 0).empty());
  }
}

TEST_CASE("Plan: resolve_plan uses the balanced split and checks explicit ones", "[sim][spec]") {
  const ModelSpec m = load_model("llama3-405b");  // 126 layers
  const ClusterSpec c = load_cluster("dgx-h100");
  SECTION("the balanced split is used when none is given") {
    Plan p;
    p.tp = 8;
    p.pp = 16;
    const Layout l = resolve_plan(m, c, 128, p);
    INFO(all_reasons(l));
    CHECK(l.feasible);
    CHECK(l.stage_layers == balance_stage_layers(126, 16));
  }
  SECTION("explicit stage layers must sum to the layers") {
    Plan p;
    p.tp = 8;
    p.pp = 4;
    p.stage_layers = {32, 32, 32, 31};  // 127
    CHECK(has_reason(resolve_plan(m, c, 32, p), "stage_layers sum to 127 but the model has 126 layers"));
  }
  SECTION("explicit stage layers must list pp stages") {
    Plan p;
    p.tp = 8;
    p.pp = 4;
    p.stage_layers = {63, 63};
    CHECK(has_reason(resolve_plan(m, c, 32, p), "stage_layers lists 2 stages but pp=4"));
  }
  SECTION("a valid explicit split is taken as given") {
    Plan p;
    p.tp = 8;
    p.pp = 4;
    p.stage_layers = {30, 33, 33, 30};
    const Layout l = resolve_plan(m, c, 32, p);
    CHECK(l.feasible);
    CHECK(l.stage_layers == std::vector<int>{30, 33, 33, 30});
  }
}

TEST_CASE("Plan: the interleaved schedule needs vp to divide each stage's layers", "[sim][spec]") {
  const ModelSpec m = load_model("llama2-7b");  // 32 layers: 8 per stage with pp = 4
  const ClusterSpec c = load_cluster("dgx-a100");
  Plan p;
  p.pp = 4;
  p.gbs = 16;  // dp = 2 on 8 GPUs: 8 micro-batches, a multiple of pp
  SECTION("vp=2 divides 8") {
    p.vp = 2;
    const Layout l = resolve_plan(m, c, 8, p);
    INFO(all_reasons(l));
    CHECK(l.feasible);
  }
  SECTION("vp=3 does not divide 8") {
    p.vp = 3;
    CHECK(has_reason(resolve_plan(m, c, 8, p), "vp=3 does not divide the 8 layers of a pipeline stage"));
  }
  SECTION("micro-batches must be a multiple of pp") {
    p.vp = 2;
    p.gbs = 12;  // 6 micro-batches
    CHECK(has_reason(resolve_plan(m, c, 8, p), "interleaved schedule needs microbatches=6 to be a multiple of pp=4"));
  }
  SECTION("vp > 1 with another schedule is refused") {
    p.vp = 2;
    p.schedule = Schedule::k1F1B;
    p.schedule_given = true;
    CHECK(has_reason(resolve_plan(m, c, 8, p), "vp=2 needs the interleaved schedule, not 1f1b"));
  }
}

// Layers per model chunk, [stage][chunk], and the chunks' layer ranges
// contiguous in virtual-stage order (chunk c of rank r is stage c*pp + r).
std::vector<std::vector<int>> chunk_counts_of(const Layout& l) {
  std::vector<std::vector<int>> out;
  for (const std::vector<ChunkLayers>& stage : chunk_layers(l)) {
    out.emplace_back();
    for (const ChunkLayers& ch : stage) out.back().push_back(ch.count);
  }
  const int pp = l.plan.pp, v = static_cast<int>(out.front().size());
  const std::vector<std::vector<ChunkLayers>> chunks = chunk_layers(l);
  int at = 0;
  for (int vs = 0; vs < pp * v; ++vs) {
    const ChunkLayers& ch = chunks[static_cast<size_t>(vs % pp)][static_cast<size_t>(vs / pp)];
    CHECK(ch.first == at);
    at += ch.count;
  }
  CHECK(at == std::accumulate(l.stage_layers.begin(), l.stage_layers.end(), 0));
  return out;
}

// [rank][chunk] from layers per virtual stage in model order (looped).
std::vector<std::vector<int>> by_rank(const std::vector<int>& virtual_stages, int pp) {
  const int v = static_cast<int>(virtual_stages.size()) / pp;
  std::vector<std::vector<int>> out(static_cast<size_t>(pp), std::vector<int>(static_cast<size_t>(v)));
  for (int vs = 0; vs < pp * v; ++vs) out[static_cast<size_t>(vs % pp)][static_cast<size_t>(vs / pp)] = virtual_stages[static_cast<size_t>(vs)];
  return out;
}

// The interleaved plan of `gpus` GPUs (tp x pp, dp 1, pp micro-batches).
Layout interleaved(const ModelSpec& m, int gpus, int tp, int pp, int vp, const std::vector<int>& stage_layers = {}) {
  Plan p;
  p.tp = tp;
  p.pp = pp;
  p.vp = vp;
  p.gbs = pp;
  p.stage_layers = stage_layers;
  const Layout l = resolve_plan(m, load_cluster("dgx-h100"), gpus, p);
  INFO(all_reasons(l));
  REQUIRE(l.feasible);
  return l;
}

TEST_CASE("Plan: stage_layers per virtual stage place each model chunk as listed", "[sim][spec]") {
  SECTION("Llama 3 70B on 64 H100, FP8: Megatron-Bridge's own layout") {
    // Megatron-Bridge perf_recipes/llama/h100/llama3.py
    // llama3_70b_pretrain_64gpu_h100_fp8cs_config: pp 8, vp 5,
    // --pipeline-model-parallel-layout "Et*2|(t*2|)*34,t*3|(t*2|)*3,tL":
    // 40 virtual stages, the 36th (chunk 4 of rank 3) with 3 layers, the
    // last with 1 and the loss.  Rank r builds chunk c = virtual stage
    // c * pp + r (pipeline_parallel_layer_layout.py, layout[vpp * pp + pp_rank]).
    std::vector<int> listed(35, 2);
    listed.insert(listed.end(), {3, 2, 2, 2, 1});
    const Layout l = interleaved(load_model("llama3-70b"), 32, 4, 8, 5, listed);
    CHECK(stage_layers_per_chunk(l.plan));
    CHECK(chunk_counts_of(l) == by_rank(listed, 8));
    // Rank 3 holds 4 chunks of 2 and the 3: 11 layers; rank 7 four of 2 and the 1.
    CHECK(l.stage_layers == std::vector<int>({10, 10, 10, 11, 10, 10, 10, 9}));
    CHECK(rank_stage_layers(l.plan) == l.stage_layers);
    CHECK(largest_chunk_layers(l.plan, l.stage_layers) == 3);
  }
  SECTION("an empty chunk is allowed, an empty rank or a wrong sum is not") {
    const ModelSpec m = testing::small_gpt(8);
    Plan p;
    p.pp = 2;
    p.vp = 2;
    p.gbs = 2;
    p.stage_layers = {2, 3, 3, 0};  // rank 0: 2 + 3, rank 1: 3 + 0 (the loss alone, Megatron's "...|L")
    Layout l = resolve_plan(m, load_cluster("dgx-h100"), 2, p);
    INFO(all_reasons(l));
    REQUIRE(l.feasible);
    CHECK(chunk_counts_of(l) == std::vector<std::vector<int>>({{2, 3}, {3, 0}}));
    p.stage_layers = {2, 0, 6, 0};  // rank 1 holds nothing
    l = resolve_plan(m, load_cluster("dgx-h100"), 2, p);
    CHECK_FALSE(l.feasible);
    CHECK(all_reasons(l).find("leave pipeline rank 1 without a layer") != std::string::npos);
    p.stage_layers = {2, 2, 2, 1};  // 7 of 8 layers
    l = resolve_plan(m, load_cluster("dgx-h100"), 2, p);
    CHECK_FALSE(l.feasible);
    CHECK(all_reasons(l).find("(per virtual stage) sum to 7 but the model has 8") != std::string::npos);
    p.stage_layers = {2, 2, 4};  // neither pp nor pp x vp entries
    l = resolve_plan(m, load_cluster("dgx-h100"), 2, p);
    CHECK_FALSE(l.feasible);
    CHECK(all_reasons(l).find("lists 3 stages but pp=2 (or one per virtual stage: pp x 2 = 4)") != std::string::npos);
  }
}

TEST_CASE("Plan: chunk_layers counts a short end stage's embedding or loss as a layer's place", "[sim][spec]") {
  SECTION("Llama 3 405B over pp 8, vp 2: Megatron-Core's account_for_embedding/loss split") {
    // megatron/core/transformer/transformer_block.py get_num_layers_to_build
    // with --account-for-embedding-in-pipeline-split and
    // --account-for-loss-in-pipeline-split: (126 + 2) / 8 = 16 places per
    // rank, 16 / 2 = 8 per virtual stage, one fewer layer built in the first
    // virtual stage of the first rank and in the last of the last.
    const Layout l = interleaved(load_model("llama3-405b"), 64, 8, 8, 2);
    std::vector<int> megatron(16, (126 + 2) / 8 / 2);
    megatron.front() -= 1;
    megatron.back() -= 1;
    CHECK(chunk_counts_of(l) == by_rank(megatron, 8));
    CHECK(largest_chunk_layers(l.plan, l.stage_layers) == 8);
  }
  SECTION("DeepSeek-V3 over pp 8, vp 4: the Megatron-MoE-ModelZoo run's own layout") {
    // Its GB200 MXFP8 baseline (published_moe_dev.json, pp_layout) ran
    // --pipeline-model-parallel-layout "Et|(tt|)*30L": the embedding with one
    // layer, 30 virtual stages of 2, the loss alone.
    const Layout l = interleaved(load_model("deepseek-v3"), 8, 1, 8, 4);  // 61 layers
    std::vector<int> published(32, 2);
    published.front() = 1;
    published.back() = 0;
    CHECK(chunk_counts_of(l) == by_rank(published, 8));
  }
  SECTION("Zero Bubble's 22 layers over pp 8 at one layer per chunk: the fork's padding") {
    // sail-sg/zero-bubble-pipeline-parallelism megatron/legacy/model/
    // transformer.py get_offset with --allow-padding-num-layers: 22 layers
    // padded to 24 over pp 8 x vp 3 chunks of one layer, the two padded
    // layers dropped from chunk_sizes[-1] and chunk_sizes[0]: the first
    // virtual stage holds only the embedding, the last only the loss.
    const ModelSpec m = testing::small_gpt(22);
    const std::vector<int> stages = {2, 3, 3, 3, 3, 3, 3, 2};
    std::vector<int> fork(24, 1);
    fork.front() = 0;
    fork.back() = 0;
    CHECK(chunk_counts_of(interleaved(m, 8, 1, 8, 3, stages)) == by_rank(fork, 8));
    SECTION("vp 2 (ACCURACY.md L7's smallest stage): the embedding's and the loss's chunks are the short ones") {
      // Three places over two chunks on the end ranks (2 layers + embedding,
      // 2 layers + loss): the chunk holding the embedding (loss) takes one
      // place, the other two; the inner ranks' 3 layers split 1 + 2 (the
      // later chunk takes the extra).
      const Layout l2 = interleaved(m, 8, 1, 8, 2, stages);
      const std::vector<std::vector<int>> counts = chunk_counts_of(l2);
      CHECK(counts.front() == std::vector<int>{0, 2});
      CHECK(counts.back() == std::vector<int>{2, 0});
      for (int r = 1; r < 7; ++r) CHECK(counts[static_cast<size_t>(r)] == std::vector<int>{1, 2});
      CHECK(largest_chunk_layers(l2.plan, l2.stage_layers) == 2);
    }
  }
  SECTION("equal stages keep Megatron's default even split (no places for the ends)") {
    const Layout l = interleaved(load_model("llama2-7b"), 4, 1, 4, 2);  // 32 layers
    CHECK(chunk_counts_of(l) == std::vector<std::vector<int>>(4, std::vector<int>{4, 4}));
  }
  SECTION("the V placement keeps both ends on rank 0 and splits its layers evenly") {
    const ModelSpec m = testing::small_gpt(22);
    Plan p;
    p.pp = 4;
    p.gbs = 16;
    p.schedule = Schedule::kZbv;
    p.schedule_given = true;
    const Layout l = resolve_plan(m, load_cluster("dgx-h100"), 4, p);
    REQUIRE(l.feasible);
    REQUIRE(l.stage_layers == std::vector<int>{4, 6, 6, 6});
    const std::vector<std::vector<ChunkLayers>> chunks = chunk_layers(l);
    CHECK(chunks[0][0].count == 2);
    CHECK(chunks[0][1].count == 2);
  }
}

TEST_CASE("Plan: element sizes by precision", "[sim][spec]") {
  SECTION("16-bit activations and weights, fp32 otherwise") {
    CHECK(activation_bytes(Precision::kBf16) == 2);
    CHECK(activation_bytes(Precision::kFp32) == 4);
    CHECK(weight_bytes(Precision::kFp16) == 2);
  }
  SECTION("gradients: fp32 main grads unless bf16 is asked for with 16-bit training") {
    CHECK(grad_bytes(Precision::kBf16, GradDtype::kFp32) == 4);
    CHECK(grad_bytes(Precision::kBf16, GradDtype::kBf16) == 2);
    CHECK(grad_bytes(Precision::kFp32, GradDtype::kBf16) == 4);
  }
}

TEST_CASE("Plan: a named attention kernel runs where the framework can select it and its rate is published",
          "[sim][spec]") {
  // Transformer Engine prefers FusedAttention (cuDNN) on sm90 and later
  // (get_attention_backend: "give FusedAttention preference on Hopper+");
  // PyTorch SDPA's flash backend is FlashAttention-2 (cuDNN opt-in,
  // pytorch#138522); Megatron-DeepSpeed runs --use-flash-attn-v2.
  CHECK(default_attention_kernel(Framework::kMegatronCore, GpuArch::kHopper) == AttentionKernel::kCudnn);
  // Megatron-LM before Megatron-Core: flash-attn through --use-flash-attn.
  CHECK(default_attention_kernel(Framework::kMegatronLM, GpuArch::kBlackwell) == AttentionKernel::kFa2);
  CHECK(default_attention_kernel(Framework::kMegatronCore, GpuArch::kBlackwell) == AttentionKernel::kCudnn);
  CHECK(default_attention_kernel(Framework::kMegatronCore, GpuArch::kAmpere) == AttentionKernel::kFa2);
  CHECK(default_attention_kernel(Framework::kTorchtitan, GpuArch::kHopper) == AttentionKernel::kFa2);
  CHECK(default_attention_kernel(Framework::kDeepSpeed, GpuArch::kHopper) == AttentionKernel::kFa2);

  const ModelSpec m = load_model("llama2-7b");
  const ClusterSpec a100 = load_cluster("dgx-a100"), h100 = load_cluster("dgx-h100"), b200 = load_cluster("dgx-b200");
  auto resolve = [&m](const ClusterSpec& c, Framework f, const std::string& attention) {
    Plan p;
    p.framework = f;
    set_attention(&p, attention);
    return resolve_plan(m, c, 8, p);
  };
  // On Hopper every kernel is comparable (the FlashAttention-3 paper measures
  // FA2, cuDNN and FA3 side by side there).
  for (const char* k : {"fa2", "cudnn", "fa3"}) {
    INFO(k);
    CHECK(resolve(h100, Framework::kMegatronCore, k).feasible);
    CHECK(resolve(h100, Framework::kTorchtitan, k).feasible);
  }
  // FlashAttention-3 is Hopper's (flash-attn hopper/, sm90).
  const Layout fa3 = resolve(a100, Framework::kMegatronCore, "fa3");
  CHECK_FALSE(fa3.feasible);
  CHECK(has_reason(fa3, "attention fa3 (FlashAttention-3) runs on Hopper GPUs (sm90) only; on A100-SXM4-80GB this "
                        "framework runs fa2 (attention flash)"));
  CHECK_FALSE(resolve(b200, Framework::kMegatronCore, "fa3").feasible);
  // Off Hopper the framework's own kernel is accepted by name, another is not
  // (no published side-by-side rate).
  CHECK(resolve(a100, Framework::kMegatronCore, "fa2").feasible);
  CHECK(resolve(b200, Framework::kMegatronCore, "cudnn").feasible);
  const Layout cudnn = resolve(a100, Framework::kTorchtitan, "cudnn");
  CHECK_FALSE(cudnn.feasible);
  CHECK(has_reason(cudnn, "attention cudnn: kernels are compared on Hopper only (the FlashAttention-3 paper's "
                          "side-by-side rates); on A100-SXM4-80GB this framework runs fa2 (attention flash)"));
  CHECK_FALSE(resolve(b200, Framework::kMegatronCore, "fa2").feasible);
  // FlashAttention-3 has no dropout (flash-attn hopper/ flash_attn_func has
  // no dropout_p): a GPT-style model with attention dropout cannot run it.
  ModelSpec gpt = load_model("gpt3-1.3b");
  REQUIRE(gpt.dropout);
  Plan fa3_gpt;
  set_attention(&fa3_gpt, "fa3");
  const Layout dropout = resolve_plan(gpt, h100, 8, fa3_gpt);
  CHECK_FALSE(dropout.feasible);
  CHECK(has_reason(dropout, "attention fa3 (FlashAttention-3) has no attention dropout, and gpt3-1.3b trains with "
                            "dropout; use attention fa2, cudnn or flash"));
  set_attention(&fa3_gpt, "fa2");
  CHECK(resolve_plan(gpt, h100, 8, fa3_gpt).feasible);
  // Megatron-LM's own attention is unfused, its FlashAttention opt-in
  // (--use-flash-attn, store_true since d693034, 2022-12-08): `flash` there
  // runs unfused, fa2 names the flash kernel (on any GPU: it is the
  // framework's own), Transformer Engine's kernels are Megatron-Core's.
  CHECK_FALSE(flash_is_default(Framework::kMegatronLM));
  for (Framework f : {Framework::kGeneric, Framework::kMegatronCore, Framework::kDeepSpeed, Framework::kTorchtitan,
                      Framework::kPytorch}) {
    CHECK(flash_is_default(f));
  }
  {
    Plan p;
    p.framework = Framework::kMegatronLM;
    CHECK(attention_run(p) == Attention::kNaive);
    set_attention(&p, "fa2");
    CHECK(attention_run(p) == Attention::kFlash);
    p.framework = Framework::kMegatronCore;
    set_attention(&p, "flash");
    CHECK(attention_run(p) == Attention::kFlash);
    set_attention(&p, "naive");
    CHECK(attention_run(p) == Attention::kNaive);
  }
  CHECK(resolve(a100, Framework::kMegatronLM, "flash").feasible);
  CHECK(resolve(a100, Framework::kMegatronLM, "fa2").feasible);
  CHECK(resolve(h100, Framework::kMegatronLM, "fa2").feasible);
  const Layout legacy_cudnn = resolve(h100, Framework::kMegatronLM, "cudnn");
  CHECK_FALSE(legacy_cudnn.feasible);
  CHECK(has_reason(legacy_cudnn, "attention cudnn: megatron-lm (Megatron-LM before Megatron-Core) runs "
                                 "FlashAttention-2 with --use-flash-attn (attention fa2) or its own unfused attention "
                                 "(attention flash or naive); Transformer Engine's kernels need --framework "
                                 "megatron-core"));
  CHECK_FALSE(resolve(h100, Framework::kMegatronLM, "fa3").feasible);
  // The names round-trip.
  for (const std::string& name : attention_names()) {
    Plan p;
    set_attention(&p, name);
    CHECK(attention_name(p) == name);
  }
}

TEST_CASE("Plan: the fused cross-entropy loss is Megatron-Core's", "[sim][plan]") {
  // megatron/core/model_parallel_config.py cross_entropy_loss_fusion, read
  // by language_module.py compute_language_model_loss: Megatron-Core's own
  // loss code; the other frameworks compute the loss with theirs.
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan p;
  p.cross_entropy_fusion = true;
  p.framework = Framework::kMegatronCore;
  CHECK(resolve_plan(m, c, 8, p).feasible);
  const std::string why =
      "cross entropy fusion is Megatron-Core's (--cross-entropy-loss-fusion, its fused vocab-parallel loss); this "
      "plan's framework does not run it: use --framework megatron-core";
  for (Framework f : {Framework::kGeneric, Framework::kMegatronLM, Framework::kDeepSpeed, Framework::kTorchtitan,
                      Framework::kPytorch}) {
    p.framework = f;
    const Layout L = resolve_plan(m, c, 8, p);
    INFO(all_reasons(L));
    CHECK(has_reason(L, why));
  }
}

}  // namespace
}  // namespace trainplan
