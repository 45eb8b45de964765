// Megatron-Core's pipeline layout strings (simulator/spec/pipeline_layout.h).
// Oracle: Megatron-Core's own parser and checks
// (megatron/core/transformer/pipeline_parallel_layer_layout.py
// parse_str_to_list, validate_layer_layout) and the layouts NVIDIA's recipes
// run; and, for the writer, the reader itself over many random splits.
#include "simulator/spec/pipeline_layout.h"

#include <random>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace trainplan {
namespace {

PipelineLayout parsed(const std::string& text) {
  PipelineLayout out;
  const std::string problem = parse_pipeline_layout(text, &out);
  INFO(text << ": " << problem);
  REQUIRE(problem.empty());
  return out;
}

std::string problem_of(const std::string& text) {
  PipelineLayout out;
  return parse_pipeline_layout(text, &out);
}

TEST_CASE("pipeline layout: the layouts NVIDIA's recipes run", "[sim][spec]") {
  SECTION("Llama 3 70B on 64 H100 (Megatron-Bridge perf_recipes/llama/h100/llama3.py, fp8cs)") {
    // (t*2|)*34 unrolls to 34 stages of two layers; the comma is cosmetic.
    std::vector<int> want(35, 2);
    want.insert(want.end(), {3, 2, 2, 2, 1});
    const PipelineLayout l = parsed("Et*2|(t*2|)*34,t*3|(t*2|)*3,tL");
    CHECK(l.stage_layers == want);
    CHECK(l.mtp_layers == 0);
  }
  SECTION("DeepSeek-V3 on pp 8 x vp 4 (Megatron-MoE-ModelZoo's GB200 baseline)") {
    std::vector<int> want(32, 2);
    want.front() = 1;
    want.back() = 0;  // the loss alone
    CHECK(parsed("Et|(tt|)*30L").stage_layers == want);
  }
  SECTION("parse_str_to_list's docstring expansions, in layer characters") {
    // "xy(ab|cd|ef)*2,pq -> xyab|cd|efab|cd|efpq": a group repeats whole,
    // its '|' included; "(|ab)*2,cd -> |ab|abcd".
    CHECK(parsed("Et(t|tt|)*2,tL").stage_layers == std::vector<int>({2, 2, 1, 2, 1}));
    CHECK(parsed("E(|tt)*2,tL").stage_layers == std::vector<int>({0, 2, 3}));
    CHECK(parsed("Et*3mL").mtp_layers == 1);
    CHECK(parsed("Et*3|t*2m*2L").stage_layers == std::vector<int>({3, 2}));
  }
}

TEST_CASE("pipeline layout: what Megatron refuses, and what trainplan cannot place", "[sim][spec]") {
  // validate_layer_layout: embedding first and once, loss last and once,
  // only E t m L (parse_str_to_list), no decoder layer after an MTP layer.
  CHECK(problem_of("") == "empty layout");
  CHECK(problem_of("tE|L") == "the first layer must be the embedding E, got t");
  CHECK(problem_of("EEt|L") == "the embedding E must appear exactly once");
  CHECK(problem_of("EtL|tL") == "the loss L must appear exactly once");
  CHECK(problem_of("EtL|t") == "the loss L must end the last stage");
  CHECK(problem_of("Et|tx|L").find("unknown layer character 'x'") == 0);
  CHECK(problem_of("Etmt|L") == "a transformer layer t after an MTP depth m (decoder layers come first)");
  // Megatron's "Ettt|(tt|)*29,m|L" keeps the MTP depth in a stage of its
  // own; trainplan places the depths with the loss.
  CHECK(problem_of("Ettt|(tt|)*29,m|L") == "trainplan places the MTP depths m with the loss, in the last stage");
  // The regular expression \(([^)]+)\)\*(\d+) does not nest; nor does this.
  CHECK(problem_of("E((t|)*2)*2tL") == "nested parentheses");
  CHECK(problem_of("E(t|)tL") == "a group (...) must be followed by *n");
  CHECK(problem_of("E(t|*2tL") == "a '(' without its ')'");
  CHECK(problem_of("Et)*2L") == "a ')' without its '('");
  CHECK(problem_of("Et*L") == "a '*' must be followed by a repeat count");
  CHECK(problem_of("E(t|)*99999999L") == "a repeat count over a million");
  CHECK(problem_of("E(t|)*999999L") == "expands to more than a million characters");
  // |E...: Megatron's flattened check passes it, but trainplan holds the
  // embedding in the first virtual stage.
  CHECK(problem_of("|Et|tL") == "the embedding E must be in the first stage");
}

TEST_CASE("pipeline layout: what is written reads back as the same split", "[sim][spec]") {
  // The exporter's strings against the reader, over random splits with
  // empty stages, runs of equal stages and MTP depths.
  CHECK(format_pipeline_layout({1, 2, 2, 2, 1}, 0) == "Et|(t*2|)*3,tL");
  CHECK(format_pipeline_layout({2, 2, 2}, 1) == "Et*2|t*2|t*2mL");
  std::mt19937 rng(7);
  for (int trial = 0; trial < 500; ++trial) {
    const int stages = 1 + static_cast<int>(rng() % 40);
    std::vector<int> split;
    for (int s = 0; s < stages; ++s) split.push_back(static_cast<int>(rng() % 4));
    const int mtp = static_cast<int>(rng() % 3);
    const std::string text = format_pipeline_layout(split, mtp);
    const PipelineLayout back = parsed(text);
    INFO(text);
    CHECK(back.stage_layers == split);
    CHECK(back.mtp_layers == mtp);
  }
}

}  // namespace
}  // namespace trainplan
