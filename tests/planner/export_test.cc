// Tests of the exporters: one golden output per target, every output parsed
// back and checked against the plan it came from, and the exact reason of
// each refusal.
//
// Golden files live in tests/data/export/.  After an intended change to an
// exporter, regenerate them with
//   TRAINPLAN_UPDATE_GOLDEN=1 ./build/tests/planner_export_test
// and review the diff; the checks against the plan still run.
#include "planner/export/exporters.h"

#include <algorithm>
#include <cstdlib>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "planner/plan/plan_file.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"
#include "simulator/framework/framework.h"

namespace trainplan {
namespace {

const std::string kExportData = std::string(TRAINPLAN_TEST_DATA_DIR) + "/export/";

// A plan with its model, cluster and resolved layout, as `trainplan export`
// builds it.
struct Job {
  PlanFile file;
  ModelSpec model;
  ClusterSpec cluster;
  Layout layout;
};

std::string reasons_of(const Layout& l) {
  std::string out;
  for (const std::string& r : l.reasons) out += r + "\n";
  return out;
}

Job make_job(const PlanFile& f) {
  Job j;
  j.file = f;
  j.model = load_model(f.model);
  j.cluster = load_cluster(f.cluster);
  j.layout = resolve_plan(j.model, j.cluster, f.gpus, f.plan);
  INFO(reasons_of(j.layout));
  REQUIRE(j.layout.feasible);
  return j;
}

Job job_from_file(const std::string& name) { return make_job(load_plan_file(kExportData + name)); }

Job job(const std::string& model, const std::string& cluster, int gpus, const Plan& p) {
  PlanFile f;
  f.model = model;
  f.cluster = cluster;
  f.gpus = gpus;
  f.plan = p;
  return make_job(f);
}

std::string exported(ExportTarget t, const Job& j) {
  const ExportResult r = export_plan(t, j.model, j.cluster, j.layout);
  INFO(r.reason);
  REQUIRE(r.ok);
  REQUIRE(r.reason.empty());
  return r.text;
}

std::string refusal(ExportTarget t, const Job& j) {
  const ExportResult r = export_plan(t, j.model, j.cluster, j.layout);
  INFO(r.text);
  REQUIRE_FALSE(r.ok);
  REQUIRE(r.text.empty());
  return r.reason;
}

std::string read_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  INFO(path);
  REQUIRE(in.good());
  std::ostringstream s;
  s << in.rdbuf();
  return s.str();
}

// Compares `text` with tests/data/export/<name>; rewrites the file first when
// TRAINPLAN_UPDATE_GOLDEN=1.
void check_golden(const std::string& name, const std::string& text) {
  const std::string path = kExportData + name;
  const char* update = std::getenv("TRAINPLAN_UPDATE_GOLDEN");
  if (update != nullptr && std::string(update) == "1") {
    std::ofstream out(path, std::ios::binary | std::ios::trunc);
    out << text;
  }
  INFO("golden file " << path << " (regenerate with TRAINPLAN_UPDATE_GOLDEN=1)");
  CHECK(text == read_file(path));
}

// The arguments of bash array `name` ("NAME=(" ... ")"), one per line:
// flag -> value ("" for a bare flag).
std::map<std::string, std::string> bash_args(const std::string& script, const std::string& name) {
  std::map<std::string, std::string> out;
  const std::string open = "\n" + name + "=(\n";
  const size_t start = script.find(open);
  INFO("array " << name);
  REQUIRE(start != std::string::npos);
  std::istringstream lines(script.substr(start + open.size()));
  std::string line;
  while (std::getline(lines, line) && line != ")") {
    std::istringstream words(line);
    std::string flag;
    words >> flag;
    REQUIRE(flag.rfind("--", 0) == 0);
    std::string value;
    std::getline(words >> std::ws, value);
    REQUIRE(out.count(flag) == 0);
    out[flag] = value;
  }
  return out;
}

int64_t int_arg(const std::map<std::string, std::string>& args, const std::string& flag) {
  INFO(flag);
  REQUIRE(args.count(flag) == 1);
  return std::stoll(args.at(flag));
}

// "section.key" -> raw value of a flat TOML file (what the exporter writes:
// [section] headers, key = value lines, # comments).
std::map<std::string, std::string> toml_values(const std::string& text) {
  std::map<std::string, std::string> out;
  std::istringstream lines(text);
  std::string line, section;
  while (std::getline(lines, line)) {
    if (line.empty() || line[0] == '#') continue;
    if (line.rfind("  [", 0) == 0 || line == "]") continue;  // rows of a multi-line array (toml_model_parts)
    if (line[0] == '[') {
      section = line.substr(1, line.find(']') - 1);
      continue;
    }
    const size_t eq = line.find(" = ");
    REQUIRE(eq != std::string::npos);
    out[section + "." + line.substr(0, eq)] = line.substr(eq + 3);
  }
  return out;
}

// The rows of `module_fqns_per_model_part = [ ... ]`: one list of module
// names per virtual pipeline stage.
std::vector<std::vector<std::string>> toml_model_parts(const std::string& text) {
  std::vector<std::vector<std::string>> parts;
  const size_t start = text.find("module_fqns_per_model_part = [\n");
  REQUIRE(start != std::string::npos);
  std::istringstream lines(text.substr(start));
  std::string line;
  std::getline(lines, line);
  while (std::getline(lines, line) && line != "]") {
    std::vector<std::string> part;
    for (size_t q = line.find('"'); q != std::string::npos; q = line.find('"', line.find('"', q + 1) + 1)) {
      part.push_back(line.substr(q + 1, line.find('"', q + 1) - q - 1));
    }
    parts.push_back(part);
  }
  return parts;
}

// Transformer layers ("layers.N") of each part.
std::vector<int> layers_per_part(const std::vector<std::vector<std::string>>& parts) {
  std::vector<int> out;
  for (const auto& part : parts) {
    out.push_back(static_cast<int>(std::count_if(part.begin(), part.end(), [](const std::string& m) {
      return m.rfind("layers.", 0) == 0;
    })));
  }
  return out;
}

int64_t toml_int(const std::map<std::string, std::string>& v, const std::string& key) {
  INFO(key);
  REQUIRE(v.count(key) == 1);
  return std::stoll(v.at(key));
}

// "NAME = value  # comment" lines of the FSDP script: NAME -> value.
std::map<std::string, std::string> python_constants(const std::string& script) {
  std::map<std::string, std::string> out;
  std::istringstream lines(script);
  std::string line;
  while (std::getline(lines, line)) {
    const size_t eq = line.find(" = ");
    if (eq == std::string::npos || eq == 0 || line[0] == ' ' || line[0] == '#') continue;
    const std::string name = line.substr(0, eq);
    if (name.find_first_not_of("ABCDEFGHIJKLMNOPQRSTUVWXYZ_") != std::string::npos) continue;
    std::string value = line.substr(eq + 3);
    value = value.substr(0, value.find("  #"));
    out[name] = value;
  }
  return out;
}

// The JSON between "<<'JSON'" and "JSON" of a Megatron-DeepSpeed script.
nlohmann::json heredoc_json(const std::string& script) {
  const std::string open = "<<'JSON'\n";
  const size_t start = script.find(open);
  REQUIRE(start != std::string::npos);
  const size_t end = script.find("\nJSON\n", start);
  REQUIRE(end != std::string::npos);
  return nlohmann::json::parse(script.substr(start + open.size(), end - start - open.size()));
}

int total_gpus(const std::map<std::string, std::string>& distributed) {
  return static_cast<int>(int_arg(distributed, "--nproc_per_node") * int_arg(distributed, "--nnodes"));
}

TEST_CASE("Export: target names round-trip", "[planner][export]") {
  for (ExportTarget t : {ExportTarget::kMegatron, ExportTarget::kDeepSpeed, ExportTarget::kTorchtitan,
                         ExportTarget::kFsdp, ExportTarget::kTorchtitanPy}) {
    CHECK(export_target_from_string(to_string(t)) == t);
  }
  CHECK_FALSE(export_target_from_string("Megatron").has_value());
  CHECK_FALSE(export_target_from_string("").has_value());
}

TEST_CASE("Export: Megatron-LM script for llama3-8b tp=2 pp=2 on one DGX H100", "[planner][export]") {
  const Job j = job_from_file("plan_llama3-8b_tp2_pp2.json");
  const std::string text = exported(ExportTarget::kMegatron, j);
  check_golden("megatron_llama3-8b_tp2_pp2.sh", text);
  const Plan& p = j.layout.plan;

  SECTION("the arguments parse back to the plan") {
    const auto model = bash_args(text, "MODEL_ARGS");
    const auto parallel = bash_args(text, "PARALLEL_ARGS");
    const auto training = bash_args(text, "TRAINING_ARGS");
    CHECK(int_arg(parallel, "--tensor-model-parallel-size") == p.tp);
    CHECK(int_arg(parallel, "--pipeline-model-parallel-size") == p.pp);
    CHECK(int_arg(parallel, "--context-parallel-size") == p.cp);
    CHECK(parallel.count("--sequence-parallel") == 1);
    CHECK(parallel.count("--use-distributed-optimizer") == 1);  // zero 1
    CHECK(int_arg(training, "--micro-batch-size") == p.mbs);
    CHECK(int_arg(training, "--global-batch-size") == p.gbs);
    CHECK(training.at("--recompute-granularity") == "selective");
    CHECK(training.count("--recompute-method") == 0);  // arguments.py: none with selective
    CHECK(training.count("--bf16") == 1);
    CHECK(int_arg(model, "--num-layers") == j.model.layers);
    CHECK(int_arg(model, "--hidden-size") == j.model.hidden);
    CHECK(int_arg(model, "--ffn-hidden-size") == j.model.ffn_hidden);
    CHECK(int_arg(model, "--num-attention-heads") == j.model.heads);
    CHECK(int_arg(model, "--num-query-groups") == j.model.kv_heads);
    CHECK(int_arg(model, "--seq-length") == p.seq);
    CHECK(int_arg(model, "--max-position-embeddings") >= p.seq);
  }
  SECTION("Megatron's own checks pass") {
    // validate_args: world % (tp*pp*cp) == 0; dp = world / (tp*pp*cp);
    // the micro-batch calculator: gbs % (mbs*dp) == 0; layers % pp == 0
    // without uneven first/last stages.
    const auto distributed = bash_args(text, "DISTRIBUTED_ARGS");
    const auto parallel = bash_args(text, "PARALLEL_ARGS");
    const auto training = bash_args(text, "TRAINING_ARGS");
    const auto model = bash_args(text, "MODEL_ARGS");
    const int64_t world = total_gpus(distributed);
    const int64_t mp = int_arg(parallel, "--tensor-model-parallel-size") *
                       int_arg(parallel, "--pipeline-model-parallel-size") *
                       int_arg(parallel, "--context-parallel-size");
    CHECK(world == 8);
    CHECK(world % mp == 0);
    CHECK(world / mp == p.dp);
    CHECK(int_arg(training, "--global-batch-size") % (int_arg(training, "--micro-batch-size") * (world / mp)) == 0);
    CHECK(int_arg(model, "--num-layers") % int_arg(parallel, "--pipeline-model-parallel-size") == 0);
    // NullTokenizer adds the end-of-document id; padding keeps the vocabulary.
    const auto data = bash_args(text, "DATA_ARGS");
    const int64_t vocab = int_arg(data, "--vocab-size") + 1;
    CHECK(vocab == j.model.vocab);
    CHECK(vocab % (int_arg(data, "--make-vocab-size-divisible-by") * p.tp) == 0);
  }
  SECTION("tensor parallelism sets CUDA_DEVICE_MAX_CONNECTIONS=1") {
    CHECK(text.find("\nexport CUDA_DEVICE_MAX_CONNECTIONS=1\n") != std::string::npos);
  }
}

TEST_CASE("Export: Megatron-LM layouts beyond the golden file", "[planner][export]") {
  SECTION("interleaved: layers per virtual stage = layers per stage / vp") {
    Plan p;
    p.pp = 2;
    p.vp = 2;
    p.tp = 4;
    p.gbs = 16;
    const Job j = job("llama3-8b", "dgx-h100", 8, p);
    const auto parallel = bash_args(exported(ExportTarget::kMegatron, j), "PARALLEL_ARGS");
    CHECK(int_arg(parallel, "--num-layers-per-virtual-pipeline-stage") == 8);  // 32 / 2 / 2
    CHECK(parallel.count("--num-virtual-stages-per-pipeline-rank") == 0);
  }
  SECTION("uneven stages: first and last stage sizes, the middle split evenly") {
    // Llama 3 405B, 126 layers over 16 stages: 7, 8 x 14, 7.
    Plan p;
    p.tp = 8;
    p.pp = 16;
    p.gbs = 16;
    const Job j = job("llama3-405b", "dgx-h100", 128, p);
    const std::string text = exported(ExportTarget::kMegatron, j);
    const auto parallel = bash_args(text, "PARALLEL_ARGS");
    const int64_t first = int_arg(parallel, "--decoder-first-pipeline-num-layers");
    const int64_t last = int_arg(parallel, "--decoder-last-pipeline-num-layers");
    CHECK(first == 7);
    CHECK(last == 7);
    CHECK((j.model.layers - first - last) % (p.pp - 2) == 0);
    CHECK((j.model.layers - first - last) / (p.pp - 2) == 8);
    const auto distributed = bash_args(text, "DISTRIBUTED_ARGS");
    CHECK(int_arg(distributed, "--nnodes") == 16);
    // No quote inside "${...:?message}": bash would parse it as one and the
    // script would stop at `bash -n` (issue 13).
    CHECK(distributed.at("--node_rank") == "\"${NODE_RANK:?set NODE_RANK to the index of this node, 0..15}\"");
  }
  SECTION("uneven stages with vp use the virtual stage count") {
    // Long end stages (20 and 22 layers around 14 of 6) split evenly over
    // their chunks, as Megatron's uneven PP builds them.
    Plan p;
    p.tp = 8;
    p.pp = 16;
    p.vp = 2;
    p.gbs = 32;
    p.stage_layers = std::vector<int>(16, 6);
    p.stage_layers.front() = 20;
    p.stage_layers.back() = 22;
    const Job j = job("llama3-405b", "dgx-h100", 128, p);
    const auto parallel = bash_args(exported(ExportTarget::kMegatron, j), "PARALLEL_ARGS");
    CHECK(int_arg(parallel, "--num-virtual-stages-per-pipeline-rank") == 2);
    CHECK(int_arg(parallel, "--decoder-first-pipeline-num-layers") == 20);
    CHECK(int_arg(parallel, "--decoder-last-pipeline-num-layers") == 22);
    CHECK(parallel.count("--num-layers-per-virtual-pipeline-stage") == 0);
  }
  SECTION("splits first/last cannot state take an explicit pipeline layout") {
    // Megatron-Core's --pipeline-model-parallel-layout (pipeline_parallel_layer_layout.py
    // parse_str_to_list): '(X)*n' and 'x*n' unroll, '|' separates virtual
    // stages, virtual stage c * pp + r is chunk c of rank r.  The layout
    // unrolled must give each rank's chunks the plan's layers, with the
    // embedding E first and the loss L last.
    auto unrolled = [](std::string layout) {
      REQUIRE(layout.size() >= 2);
      REQUIRE(layout.front() == '\'');
      layout = layout.substr(1, layout.size() - 2);  // the shell quotes
      layout.erase(std::remove(layout.begin(), layout.end(), ','), layout.end());  // cosmetic (parse_str_to_list)
      layout = std::regex_replace(layout, std::regex(R"(\(([^)]+)\)\*(\d+))"), "<$1>{$2}");
      std::string out;
      for (size_t i = 0; i < layout.size(); ++i) {  // <X>{n}: X n times
        if (layout[i] != '<') {
          out += layout[i];
          continue;
        }
        const size_t close = layout.find('>', i), brace = layout.find('}', close);
        const std::string body = layout.substr(i + 1, close - i - 1);
        for (int k = std::stoi(layout.substr(close + 2, brace - close - 2)); k > 0; --k) out += body;
        i = brace;
      }
      std::string flat;
      for (size_t i = 0; i < out.size(); ++i) {  // x*n: x n times
        if (i + 1 < out.size() && out[i + 1] == '*') {
          size_t end = i + 2;
          while (end < out.size() && std::isdigit(static_cast<unsigned char>(out[end]))) ++end;
          flat += std::string(static_cast<size_t>(std::stoi(out.substr(i + 2, end - i - 2))), out[i]);
          i = end - 1;
        } else {
          flat += out[i];
        }
      }
      return flat;
    };
    // 8, 7, 9, 8 over pp 4: the middle stages differ, so no first/last split.
    Plan middle;
    middle.pp = 4;
    middle.stage_layers = {8, 7, 9, 8};
    auto parallel = bash_args(exported(ExportTarget::kMegatron, job("llama3-8b", "dgx-h100", 8, middle)), "PARALLEL_ARGS");
    CHECK(unrolled(parallel.at("--pipeline-model-parallel-layout")) ==
          "Etttttttt|ttttttt|ttttttttt|ttttttttL");
    CHECK(parallel.count("--decoder-first-pipeline-num-layers") == 0);
    CHECK(parallel.count("--num-virtual-stages-per-pipeline-rank") == 0);
    // 15 and 17 layers over vp 2: chunks of 7 + 8 and 8 + 9 (the larger
    // chunk last, chunk_layers); virtual stages r0c0 r1c0 r0c1 r1c1.
    Plan vp;
    vp.pp = 2;
    vp.vp = 2;
    vp.gbs = 16;
    vp.stage_layers = {15, 17};
    parallel = bash_args(exported(ExportTarget::kMegatron, job("llama3-8b", "dgx-h100", 8, vp)), "PARALLEL_ARGS");
    CHECK(unrolled(parallel.at("--pipeline-model-parallel-layout")) ==
          "Ettttttt|tttttttt|tttttttt|tttttttttL");
    // A short last stage (6 layers against 8) counts the loss as a layer's
    // place among its chunks (chunk_layers): [4, 2 + loss], which Megatron's
    // --decoder-last-pipeline-num-layers 6 with 2 virtual stages would build
    // as [3, 3], so the split goes out as a layout.
    Plan short_last;
    short_last.tp = 8;
    short_last.pp = 16;
    short_last.vp = 2;
    short_last.gbs = 32;
    short_last.stage_layers = std::vector<int>(16, 8);
    short_last.stage_layers.back() = 6;
    parallel = bash_args(exported(ExportTarget::kMegatron, job("llama3-405b", "dgx-h100", 128, short_last)),
                         "PARALLEL_ARGS");
    CHECK(parallel.count("--decoder-last-pipeline-num-layers") == 0);
    std::string want = "E";
    for (int vs = 0; vs < 31; ++vs) want += "tttt|";
    CHECK(unrolled(parallel.at("--pipeline-model-parallel-layout")) == want + "ttL");
    // DeepSeek-V3's 61 layers over pp 32 as 1, 2 x 29, 1, 1: a run of equal
    // stages is written once with its count.
    Plan ds;
    ds.pp = 32;
    ds.ep = 8;
    ds.gbs = 32;
    ds.stage_layers = std::vector<int>(32, 2);
    ds.stage_layers.front() = 1;
    ds.stage_layers[30] = 1;
    ds.stage_layers[31] = 1;
    parallel = bash_args(exported(ExportTarget::kMegatron, job("deepseek-v3", "dgx-h100", 256, ds)), "PARALLEL_ARGS");
    CHECK(parallel.at("--pipeline-model-parallel-layout") == "'Et|(t*2|)*29,t|tL'");
    // With multi-token prediction Megatron wants as many m in the layout as
    // --mtp-num-layers (pipeline_parallel_layer_layout.py
    // validate_layer_layout): the depth beside the loss.
    ds.mtp_layers = 1;
    parallel = bash_args(exported(ExportTarget::kMegatron, job("deepseek-v3", "dgx-h100", 256, ds)), "PARALLEL_ARGS");
    CHECK(parallel.at("--pipeline-model-parallel-layout") == "'Et|(t*2|)*29,t|tmL'");
    // A split listed per virtual stage is written back as listed:
    // Megatron-Bridge's Llama 3 70B H100 FP8 layout (perf_recipes/llama/h100/llama3.py).
    Plan l70;
    l70.tp = 4;
    l70.pp = 8;
    l70.vp = 5;
    l70.sp = true;
    l70.gbs = 16;
    l70.stage_layers = std::vector<int>(35, 2);
    l70.stage_layers.insert(l70.stage_layers.end(), {3, 2, 2, 2, 1});
    parallel = bash_args(exported(ExportTarget::kMegatron, job("llama3-70b", "dgx-h100", 32, l70)), "PARALLEL_ARGS");
    CHECK(parallel.at("--pipeline-model-parallel-layout") == "'Et*2|(t*2|)*34,t*3|(t*2|)*3,tL'");
  }
  SECTION("ZeRO-3 without pipeline parallelism is Megatron-FSDP") {
    Plan p;
    p.tp = 2;
    p.sp = true;
    p.zero = 3;
    const Job j = job("llama3-8b", "dgx-h100", 8, p);
    const std::string text = exported(ExportTarget::kMegatron, j);
    const auto parallel = bash_args(text, "PARALLEL_ARGS");
    CHECK(parallel.count("--use-megatron-fsdp") == 1);
    CHECK(parallel.at("--data-parallel-sharding-strategy") == "optim_grads_params");
    CHECK(parallel.at("--ckpt-format") == "fsdp_dtensor");
    CHECK(parallel.count("--use-distributed-optimizer") == 1);
    CHECK(parallel.count("--no-gradient-accumulation-fusion") == 1);
    // arguments.py asserts CUDA_DEVICE_MAX_CONNECTIONS != 1 under Megatron-FSDP.
    CHECK(text.find("export CUDA_DEVICE_MAX_CONNECTIONS=1") == std::string::npos);
    CHECK(text.find("\nunset CUDA_DEVICE_MAX_CONNECTIONS\n") != std::string::npos);
  }
  SECTION("ZeRO-2 is Megatron-FSDP's optim_grads") {
    Plan p;
    p.zero = 2;
    const Job j = job("llama3-8b", "dgx-h100", 8, p);
    const auto parallel = bash_args(exported(ExportTarget::kMegatron, j), "PARALLEL_ARGS");
    CHECK(parallel.at("--data-parallel-sharding-strategy") == "optim_grads");
  }
  SECTION("a hybrid shard group is copies of the distributed optimizer") {
    Plan p;
    p.zero = 1;
    p.shard_group = 8;
    const Job j = job("llama3-8b", "dgx-h100", 16, p);
    const auto parallel = bash_args(exported(ExportTarget::kMegatron, j), "PARALLEL_ARGS");
    CHECK(int_arg(parallel, "--num-distributed-optimizer-instances") == 2);  // 16 / 8
  }
  SECTION("optimizer offload needs the precision-aware optimizer (arguments.py)") {
    Plan p;
    p.zero = 1;
    p.offload = Offload::kOptimizer;
    const Job j = job("llama3-8b", "dgx-h100", 8, p);
    const auto parallel = bash_args(exported(ExportTarget::kMegatron, j), "PARALLEL_ARGS");
    CHECK(parallel.count("--optimizer-cpu-offload") == 1);
    CHECK(parallel.count("--use-precision-aware-optimizer") == 1);
  }
  SECTION("a GPT-style model: learned positions, LayerNorm, biases, tied embeddings") {
    Plan p;
    p.recompute = Recompute::kFull;
    p.precision = Precision::kFp16;
    const Job j = job("gpt3-1.3b", "dgx-a100", 8, p);
    const std::string text = exported(ExportTarget::kMegatron, j);
    const auto model = bash_args(text, "MODEL_ARGS");
    const auto training = bash_args(text, "TRAINING_ARGS");
    CHECK(model.at("--position-embedding-type") == "learned_absolute");
    CHECK(model.at("--normalization") == "LayerNorm");
    CHECK(model.count("--disable-bias-linear") == 0);
    CHECK(model.count("--untie-embeddings-and-output-weights") == 0);
    CHECK(model.count("--swiglu") == 0);
    CHECK(model.count("--group-query-attention") == 0);
    CHECK(model.at("--hidden-dropout") == "0.1");
    CHECK(training.count("--fp16") == 1);
    CHECK(training.at("--recompute-granularity") == "full");
    CHECK(training.at("--recompute-method") == "uniform");
    CHECK(int_arg(training, "--recompute-num-layers") == 1);
    CHECK(text.find("CUDA_DEVICE_MAX_CONNECTIONS") == std::string::npos);  // tp = cp = 1
  }
}

TEST_CASE("Export: sliding-window attention as Megatron-Core and Transformer Engine run it", "[planner][export]") {
  // gpt-oss: 128-token windows, every second layer full.  Megatron-Bridge's
  // gpt_oss_bridge.py sets window_size = (sliding_window - 1, 0) and
  // window_attn_skip_freq = 2 (arguments.py: one full layer after N - 1
  // windowed ones).
  Plan p;
  p.pp = 4;
  p.ep = 8;
  p.zero = 1;
  p.gbs = 64;
  const Job j = job("gpt-oss-120b", "dgx-h100", 64, p);
  const auto model = bash_args(exported(ExportTarget::kMegatron, j), "MODEL_ARGS");
  CHECK(model.at("--window-size") == "127,0");
  CHECK(int_arg(model, "--window-attn-skip-freq") == 2);
  // A model without windows writes neither.
  const auto llama = bash_args(exported(ExportTarget::kMegatron, job("llama3-8b", "dgx-h100", 8, Plan{})), "MODEL_ARGS");
  CHECK(llama.count("--window-size") == 0);
  CHECK(llama.count("--window-attn-skip-freq") == 0);
  // Transformer Engine context_parallel.py: "Context parallelism does not
  // support sliding window attention with cp_comm_type='p2p'".
  Plan cp = p;
  cp.cp = 2;
  CHECK(refusal(ExportTarget::kMegatron, job("gpt-oss-120b", "dgx-h100", 64, cp)) ==
        "Transformer Engine runs sliding-window attention under context parallelism only with --cp-comm-type a2a or "
        "all_gather, not the p2p ring this plan runs; use --cp-comm-type a2a, or cp 1");
  // With Ulysses' all-to-alls (64 query and 8 key/value heads split over cp 2) it runs, and says so.
  cp.cp_comm = CpComm::kA2a;
  cp.framework = Framework::kMegatronCore;
  const Job ulysses = job("gpt-oss-120b", "dgx-h100", 64, cp);
  const std::string script = exported(ExportTarget::kMegatron, ulysses);
  CHECK(bash_args(script, "PARALLEL_ARGS").at("--cp-comm-type") == "a2a");
  CHECK(int_arg(bash_args(script, "PARALLEL_ARGS"), "--context-parallel-size") == 2);
  CHECK(bash_args(script, "MODEL_ARGS").at("--window-size") == "127,0");
  // The ring is Megatron's default: nothing written.
  CHECK(bash_args(exported(ExportTarget::kMegatron, job("llama3-8b", "dgx-h100", 8, [] {
                    Plan q;
                    q.cp = 2;
                    return q;
                  }())),
                  "PARALLEL_ARGS")
            .count("--cp-comm-type") == 0);
  // torchtitan's context parallelism is ring attention.
  Plan generic_a2a;
  generic_a2a.cp = 2;
  generic_a2a.cp_comm = CpComm::kA2a;
  generic_a2a.zero = 1;  // DeepSpeed takes fp32 gradient accumulation of a bf16 model under ZeRO only
  CHECK(refusal(ExportTarget::kTorchtitan, job("llama3-8b", "dgx-h100", 8, generic_a2a)) ==
        "the plan runs context parallelism as Ulysses all-to-alls (--cp-comm-type a2a), which Megatron-Core "
        "(--cp-comm-type a2a) and Megatron-DeepSpeed (--ds-sequence-parallel-size) run; export it with --to megatron "
        "or --to deepspeed, or plan with --cp-comm-type p2p");
  // DeepSpeed-Ulysses through Megatron-DeepSpeed: tp 1 and pp 1 only
  // (megatron/core/parallel_state.py), its sequence-parallel degree the cp.
  const std::string ds = exported(ExportTarget::kDeepSpeed, job("llama3-8b", "dgx-h100", 8, generic_a2a));
  CHECK(int_arg(bash_args(ds, "PARALLEL_ARGS"), "--ds-sequence-parallel-size") == 2);
  CHECK(bash_args(ds, "PARALLEL_ARGS").count("--no-pipeline-parallel") == 1);
  CHECK(heredoc_json(ds).at("train_batch_size").get<int64_t>() == 4);  // dp 4 (8 / cp 2) x mbs 1 x 1
  Plan ulysses_tp2 = generic_a2a;
  ulysses_tp2.tp = 2;
  ulysses_tp2.sp = true;
  CHECK(refusal(ExportTarget::kDeepSpeed, job("llama3-8b", "dgx-h100", 8, ulysses_tp2))
            .find("\"DeepSpeed's sequence parallel does not work with tensor parallel or pipeline parallel\"") !=
        std::string::npos);
  Plan ring = generic_a2a;
  ring.cp_comm = CpComm::kP2p;
  CHECK(refusal(ExportTarget::kDeepSpeed, job("llama3-8b", "dgx-h100", 8, ring)).find("use --cp-comm-type a2a") !=
        std::string::npos);
  // Megatron-DeepSpeed's GPT and torchtitan's llama3/deepseek_v3 have no window.
  Plan tp2;
  tp2.tp = 2;
  tp2.sp = true;
  tp2.zero = 1;
  ModelSpec windowed = load_model("llama3-8b");
  windowed.has_sliding_window = true;
  windowed.sliding_window.tokens = 4096;
  Job w = job("llama3-8b", "dgx-h100", 8, tp2);
  w.model = windowed;
  CHECK(refusal(ExportTarget::kDeepSpeed, w) ==
        "DeepSpeed gets tensor and pipeline parallelism from Megatron-DeepSpeed, whose GPT model has no sliding-window "
        "attention (use --to megatron, or tp 1 and pp 1 with your own model code)");
  CHECK(refusal(ExportTarget::kTorchtitan, w) ==
        "torchtitan's llama3 models attend to the whole causal prefix; llama3-8b has sliding-window layers (use --to "
        "megatron)");
  // torchtitan's gpt_oss flavor has gpt-oss's own windows; another window is another model.
  Plan titan;
  titan.ep = 8;
  titan.zero = 3;
  titan.gbs = 64;
  Job oss = job("gpt-oss-120b", "dgx-h100", 64, titan);
  CHECK(exported(ExportTarget::kTorchtitan, oss).find("flavor = \"120b\"") != std::string::npos);
  oss.model.sliding_window.tokens = 256;
  CHECK(refusal(ExportTarget::kTorchtitan, oss).find("none of its MoE flavors") != std::string::npos);
  CHECK(refusal(ExportTarget::kFsdp, w).find("sliding window") != std::string::npos);
  CHECK(bash_args(exported(ExportTarget::kMegatron, w), "MODEL_ARGS").at("--window-size") == "4095,0");
}

TEST_CASE("Export: DeepSpeed config for gpt3-1.3b ZeRO-2 on one DGX A100", "[planner][export]") {
  const Job j = job_from_file("plan_gpt3-1.3b_zero2.json");
  const std::string text = exported(ExportTarget::kDeepSpeed, j);
  check_golden("deepspeed_gpt3-1.3b_zero2.json", text);
  const Plan& p = j.layout.plan;
  const nlohmann::json c = nlohmann::json::parse(text);
  // config-json.md: train_batch_size = micro * accumulation * dp.
  const int64_t micro = c.at("train_micro_batch_size_per_gpu").get<int64_t>();
  const int64_t accum = c.at("gradient_accumulation_steps").get<int64_t>();
  CHECK(c.at("train_batch_size").get<int64_t>() == micro * accum * p.dp);
  CHECK(c.at("train_batch_size").get<int64_t>() == p.gbs);
  CHECK(micro == p.mbs);
  CHECK(accum == j.layout.microbatches);
  CHECK(c.at("zero_optimization").at("stage").get<int>() == p.zero);
  CHECK(c.at("bf16").at("enabled").get<bool>());
  CHECK(c.count("fp16") == 0);
  CHECK(c.at("data_types").at("grad_accum_dtype").get<std::string>() == "fp32");
  // The reductions' dtype as simulated, written out (engine.py
  // communication_data_type's default moved between releases): this plan
  // was simulated under its own framework's fp32 reductions; under
  // DeepSpeed's profile they are the model's bf16.
  CHECK(c.at("communication_data_type").get<std::string>() ==
        (p.framework == Framework::kDeepSpeed ? "bf16" : "fp32"));
  Job ds = j;
  ds.layout.plan.framework = Framework::kDeepSpeed;
  CHECK(nlohmann::json::parse(exported(ExportTarget::kDeepSpeed, ds)).at("communication_data_type") == "bf16");
  CHECK(c.count("activation_checkpointing") == 1);  // recompute full
  CHECK(c.at("zero_optimization").count("offload_optimizer") == 0);
  CHECK(c.at("optimizer").at("type").get<std::string>() == "AdamW");
}

TEST_CASE("Export: DeepSpeed configs for other plans", "[planner][export]") {
  SECTION("tp and pp: a Megatron-DeepSpeed launch carrying the config") {
    const Job j = job_from_file("plan_llama3-8b_tp2_pp2.json");
    const std::string text = exported(ExportTarget::kDeepSpeed, j);
    const nlohmann::json c = heredoc_json(text);
    CHECK(c.at("train_batch_size").get<int64_t>() == 64);
    CHECK(c.at("train_micro_batch_size_per_gpu").get<int64_t>() == 1);
    CHECK(c.at("gradient_accumulation_steps").get<int64_t>() == 32);  // 64 / (1 * dp 2)
    CHECK(c.at("zero_optimization").at("stage").get<int>() == 1);
    CHECK(c.count("optimizer") == 0);  // Megatron-DeepSpeed passes its own
    const auto parallel = bash_args(text, "PARALLEL_ARGS");
    CHECK(int_arg(parallel, "--tensor-model-parallel-size") == 2);
    CHECK(int_arg(parallel, "--pipeline-model-parallel-size") == 2);
    CHECK(int_arg(parallel, "--zero-stage") == 1);
    CHECK(parallel.count("--deepspeed") == 1);
    CHECK(parallel.at("--deepspeed_config") == "\"$DS_CONFIG\"");
    CHECK(parallel.count("--no-pipeline-parallel") == 0);
    CHECK(parallel.count("--sequence-parallel") == 1);
    const auto model = bash_args(text, "MODEL_ARGS");
    CHECK(int_arg(model, "--num-key-value-heads") == 8);
    CHECK(model.count("--use-rotary-position-embeddings") == 1);
    CHECK(model.at("--normalization") == "rmsnorm");
    const auto training = bash_args(text, "TRAINING_ARGS");
    CHECK(int_arg(training, "--global-batch-size") == 64);
  }
  SECTION("tp without pp disables DeepSpeed's pipeline engine") {
    Plan p;
    p.tp = 8;
    p.zero = 3;
    const Job j = job("llama3-8b", "dgx-h100", 16, p);
    const std::string text = exported(ExportTarget::kDeepSpeed, j);
    CHECK(bash_args(text, "PARALLEL_ARGS").count("--no-pipeline-parallel") == 1);
    CHECK(heredoc_json(text).at("zero_optimization").at("stage").get<int>() == 3);
  }
  SECTION("ZeRO-3 parameter offload is offload_param, fp16 is dynamic loss scaling") {
    Plan p;
    p.zero = 3;
    p.offload = Offload::kParams;
    p.precision = Precision::kFp16;
    const Job j = job("llama2-7b", "dgx-a100", 16, p);
    const nlohmann::json c = nlohmann::json::parse(exported(ExportTarget::kDeepSpeed, j));
    const nlohmann::json& z = c.at("zero_optimization");
    CHECK(z.count("mics_shard_size") == 0);
    CHECK(z.at("offload_param").at("device").get<std::string>() == "cpu");
    CHECK(z.at("offload_optimizer").at("device").get<std::string>() == "cpu");
    CHECK(z.count("allgather_bucket_size") == 0);
    CHECK(c.at("fp16").at("enabled").get<bool>());
    CHECK(c.at("fp16").at("loss_scale").get<int>() == 0);  // dynamic
    CHECK(c.count("bf16") == 0);
  }
}

TEST_CASE("Export: DeepSpeed AutoEP for Hugging Face MoE models of a preset family", "[planner][export]") {
  // DeepSpeed master edaa7221 (2026-08): a config's "expert_parallel"
  // section turns on AutoEP, which recognises a Hugging Face model by its
  // config.json model_type (auto_ep_presets/*.py hf_model_types; base.py
  // _validate_hf_model_type raises for another), needs autoep_size to divide
  // the experts and the world (validate_autoep_post_detection,
  // build_folding_spec), reserves expert_tensor_parallel_size > 1, raises on
  // tensor parallelism from an mpu (engine.py _configure_expert_parallel) and
  // rejects a load_balance_coeff (no expert bias).
  SECTION("Mixtral 8x7B, ep 8 over 16 GPUs, ZeRO-1: the mixtral preset") {
    Plan p;
    p.ep = 8;
    p.zero = 1;
    const Job j = job("mixtral-8x7b", "dgx-h100", 16, p);
    const nlohmann::json c = nlohmann::json::parse(exported(ExportTarget::kDeepSpeed, j));
    const nlohmann::json& e = c.at("expert_parallel");
    CHECK(e.at("enabled").get<bool>());
    CHECK(e.at("autoep_size").get<int>() == 8);
    CHECK(e.at("preset_model").get<std::string>() == "mixtral");
    CHECK(e.at("use_grouped_mm").get<bool>());
    CHECK(e.count("expert_tensor_parallel_size") == 0);  // its default, 1
    CHECK(e.count("load_balance_coeff") == 0);
    CHECK(c.at("train_batch_size").get<int64_t>() == 16);  // dp 16 x mbs 1 x 1 micro-batch
    CHECK(c.at("optimizer").at("type").get<std::string>() == "AdamW");  // the engine splits the MoE param groups
  }
  SECTION("Qwen3-30B-A3B, ep 16, ZeRO-3: the qwen3_moe preset") {
    Plan p;
    p.ep = 16;
    p.zero = 3;
    p.recompute = Recompute::kFull;
    const Job j = job("qwen3-30b-a3b", "dgx-h100", 16, p);
    const nlohmann::json c = nlohmann::json::parse(exported(ExportTarget::kDeepSpeed, j));
    CHECK(c.at("expert_parallel").at("preset_model").get<std::string>() == "qwen3_moe");
    CHECK(c.at("expert_parallel").at("autoep_size").get<int>() == 16);
    CHECK(c.at("zero_optimization").at("stage").get<int>() == 3);
  }
  SECTION("what AutoEP cannot run is refused with its rule") {
    Plan p;
    p.ep = 8;
    p.zero = 1;
    Plan tp2 = p;
    tp2.tp = 2;
    CHECK(refusal(ExportTarget::kDeepSpeed, job("mixtral-8x7b", "dgx-h100", 16, tp2))
              .find("\"AutoEP does not currently support tensor model parallelism from mpu\"") != std::string::npos);
    Plan pp2 = p;
    pp2.pp = 2;
    CHECK(refusal(ExportTarget::kDeepSpeed, job("mixtral-8x7b", "dgx-h100", 16, pp2)).find("tp=1 pp=2") !=
          std::string::npos);
    Plan selective = p;
    selective.recompute = Recompute::kSelective;
    CHECK(refusal(ExportTarget::kDeepSpeed, job("mixtral-8x7b", "dgx-h100", 16, selective))
              .find("recomputes whole decoder layers") != std::string::npos);
    // DeepSeek-V3 balances with an expert bias (auxiliary-loss-free), which
    // the deepseek_v3 preset leaves out; DeepSeek-V2 drops tokens beyond a
    // capacity factor, AutoEP routes dropless; gpt-oss has no preset.
    CHECK(refusal(ExportTarget::kDeepSpeed, job("deepseek-v3", "dgx-h100", 64, p)).find("auxiliary-loss-free") !=
          std::string::npos);
    CHECK(refusal(ExportTarget::kDeepSpeed, job("deepseek-v2", "dgx-h100", 64, p)).find("routes dropless") !=
          std::string::npos);
    CHECK(refusal(ExportTarget::kDeepSpeed, job("gpt-oss-120b", "dgx-h100", 64, p)).find("is \"gpt_oss\"") !=
          std::string::npos);
    Plan tiny;
    tiny.ep = 4;
    tiny.zero = 1;
    Job j = job("gpt-tiny-moe", "dgx-h100", 4, tiny);
    CHECK(refusal(ExportTarget::kDeepSpeed, j).find("set \"hf_model_type\" in its model file") != std::string::npos);
    // A model type names a preset whose score function is not the model's.
    j.model.hf_model_type = "qwen3_moe";
    j.model.moe.router = RouterScore::kSigmoid;
    CHECK(refusal(ExportTarget::kDeepSpeed, j).find("qwen3_moe preset scores experts with a softmax") !=
          std::string::npos);
    j.model.moe.router = RouterScore::kSoftmax;
    CHECK(nlohmann::json::parse(exported(ExportTarget::kDeepSpeed, j)).at("expert_parallel").at("preset_model") ==
          "qwen3_moe");
  }
}

TEST_CASE("Export: torchtitan TOML for llama3-8b ZeRO-3 over two DGX H100s", "[planner][export]") {
  const Job j = job_from_file("plan_llama3-8b_zero3.json");
  const std::string text = exported(ExportTarget::kTorchtitan, j);
  check_golden("torchtitan_llama3-8b_zero3.toml", text);
  const Plan& p = j.layout.plan;
  const auto v = toml_values(text);
  const int64_t replicate = toml_int(v, "parallelism.data_parallel_replicate_degree");
  const int64_t shard = toml_int(v, "parallelism.data_parallel_shard_degree");
  CHECK(replicate * shard == p.dp);
  CHECK(shard * p.cp == j.layout.shard_degree);  // HSDP: shard over 8, replicate twice
  CHECK(replicate == 2);
  CHECK(toml_int(v, "parallelism.tensor_parallel_degree") == p.tp);
  CHECK(toml_int(v, "parallelism.pipeline_parallel_degree") == p.pp);
  CHECK(toml_int(v, "parallelism.context_parallel_degree") == p.cp);
  CHECK(v.at("parallelism.fsdp_reshard_after_forward") == "\"always\"");
  CHECK(v.at("model.name") == "\"llama3\"");
  CHECK(v.at("model.flavor") == "\"8B\"");
  // Accumulation steps = global / (local * dp) = the plan's micro-batches.
  const int64_t local = toml_int(v, "training.local_batch_size");
  const int64_t global = toml_int(v, "training.global_batch_size");
  CHECK(global == p.gbs);
  CHECK(global % (local * p.dp) == 0);
  CHECK(global / (local * p.dp) == j.layout.microbatches);
  CHECK(toml_int(v, "training.seq_len") == p.seq);
  CHECK(v.at("training.mixed_precision_param") == "\"bfloat16\"");
  CHECK(v.at("activation_checkpoint.mode") == "\"full\"");
}

TEST_CASE("Export: torchtitan ZBVZeroBubble for a zb-v plan", "[planner][export]") {
  // PyTorch's ScheduleZBVZeroBubble needs exactly two stages per rank
  // (torchtitan pipeline_module_split style "v": rank r runs stages r and
  // 2pp-1-r); the stages are listed in model order, the plan's split:
  // llama3-8b's 32 layers over 4 ranks, 8 each (layers % pp == 0: even, as
  // Megatron's split), halved per rank: eight stages of 4, the embedding in
  // stage 0 and the norm and output in stage 7, both on rank 0.
  const Job j = job_from_file("plan_llama3-8b_pp4_zbv.json");
  const std::string text = exported(ExportTarget::kTorchtitan, j);
  check_golden("torchtitan_llama3-8b_pp4_zbv.toml", text);
  const auto v = toml_values(text);
  CHECK(v.at("parallelism.pipeline_parallel_schedule") == "\"ZBVZeroBubble\"");
  CHECK(text.find("# Virtual stages of 4, 4, 4, 4, 4, 4, 4, 4 transformer layers") != std::string::npos);
  CHECK(text.find("[\"layers.28\", \"layers.29\", \"layers.30\", \"layers.31\", \"norm\", \"output\"],") !=
        std::string::npos);
  // No torch.compile with the B/W split (_check_torch_compile_compatibility).
  CHECK(text.find("[compile]") == std::string::npos);
  // (torchtitan's float8 runs under FSDP2, ZeRO-3, which the zero-bubble
  // schedules refuse: no zb-v plan compiles.)
}

TEST_CASE("Export: torchtitan head Python config for llama3-8b ZeRO-3 over two DGX H100s", "[planner][export]") {
  // torchtitan head reads a zero-argument function returning Trainer.Config
  // (config/manager.py ConfigManager._load_config); the token counts are
  // TrainingConfig's (num_tokens_per_microbatch_per_dp_rank = mbs x seq,
  // num_tokens_per_train_step = gbs x seq); tests/export/torchtitan_rules.py
  // check_python_config checks it against head's schema in the chain test.
  const Job j = job_from_file("plan_llama3-8b_zero3.json");
  const std::string text = exported(ExportTarget::kTorchtitanPy, j);
  check_golden("torchtitan_llama3-8b_zero3.py", text);
  const Plan& p = j.layout.plan;
  CHECK(text.find("def trainplan_job() -> Trainer.Config:") != std::string::npos);
  CHECK(text.find("num_tokens_per_microbatch_per_dp_rank=" + std::to_string(p.mbs * p.seq) + ",") !=
        std::string::npos);
  CHECK(text.find("num_tokens_per_train_step=" + std::to_string(p.gbs * p.seq) + ",") != std::string::npos);
  CHECK(text.find("fsdp_reshard_after_forward=\"always\"") != std::string::npos);
  CHECK(text.find("model_spec = model_registry(\"8B\")") != std::string::npos);
  // FP8 is refused with the reason (head's converter is not among the facts).
  Job f = j;
  f.file.plan.fp8_recipe = f.layout.plan.fp8_recipe = Fp8Recipe::kTensorwise;
  CHECK(refusal(ExportTarget::kTorchtitanPy, f).find("writes no float8 converter") != std::string::npos);
}

TEST_CASE("Export: torchtitan pipelines and ZeRO-2", "[planner][export]") {
  SECTION("interleaved 1F1B: one split point per virtual stage boundary") {
    Plan p;
    p.pp = 2;
    p.vp = 2;
    p.zero = 2;
    p.tp = 2;
    p.sp = true;
    p.gbs = 32;
    p.mbs = 2;
    p.recompute = Recompute::kSelective;
    const Job j = job("llama3-8b", "dgx-h100", 8, p);
    const std::string text = exported(ExportTarget::kTorchtitan, j);
    const auto v = toml_values(text);
    CHECK(v.at("parallelism.pipeline_parallel_schedule") == "\"Interleaved1F1B\"");
    // pipeline_parallel_split_points was removed before torchtitan v0.2.0
    // (its loader rejects unknown keys); the split is written as the modules
    // of each virtual stage: 32 layers / (pp 2 x vp 2) = 8 each, stage v*pp+r
    // on rank r, the embedding on the first and norm + output on the last.
    CHECK(v.count("parallelism.pipeline_parallel_split_points") == 0);
    const auto parts = toml_model_parts(text);
    CHECK(layers_per_part(parts) == std::vector<int>{8, 8, 8, 8});
    CHECK(parts.front().front() == "tok_embeddings");
    CHECK(parts.front()[1] == "layers.0");
    CHECK(parts.back().back() == "output");
    CHECK(parts.back()[parts.back().size() - 2] == "norm");
    CHECK(parts[2][0] == "layers.16");
    CHECK(v.at("parallelism.fsdp_reshard_after_forward") == "\"never\"");
    CHECK(toml_int(v, "parallelism.pipeline_parallel_microbatch_size") == 2);
    // dp = 2: each replica's local batch is all its micro-batches (32 / 2).
    CHECK(toml_int(v, "training.local_batch_size") == 16);
    CHECK(toml_int(v, "parallelism.data_parallel_shard_degree") == 2);
    CHECK(toml_int(v, "parallelism.data_parallel_replicate_degree") == 1);
    CHECK(v.at("activation_checkpoint.mode") == "\"selective\"");
    CHECK(v.at("activation_checkpoint.selective_ac_option") == "\"op\"");
  }
  SECTION("uneven stages are written module by module") {
    Plan p;
    p.pp = 4;
    p.zero = 3;
    p.schedule = Schedule::kGpipe;
    p.schedule_given = true;
    p.stage_layers = {7, 9, 9, 7};
    p.gbs = 8;
    const Job j = job("llama3-8b", "dgx-h100", 8, p);
    const std::string text = exported(ExportTarget::kTorchtitan, j);
    const auto v = toml_values(text);
    CHECK(v.at("parallelism.pipeline_parallel_schedule") == "\"GPipe\"");
    CHECK(layers_per_part(toml_model_parts(text)) == std::vector<int>{7, 9, 9, 7});
  }
}

TEST_CASE("Export: FSDP2 script for llama3-8b ZeRO-3 over two DGX H100s", "[planner][export]") {
  const Job j = job_from_file("plan_llama3-8b_zero3.json");
  const std::string text = exported(ExportTarget::kFsdp, j);
  check_golden("fsdp_llama3-8b_zero3.py", text);
  const Plan& p = j.layout.plan;
  const auto c = python_constants(text);
  CHECK(c.at("TP") == std::to_string(p.tp));
  CHECK(c.at("DP") == std::to_string(p.dp));
  CHECK(c.at("ZERO") == "3");
  CHECK(c.at("SHARD") == "8");
  CHECK(c.at("REPLICATE") == "2");
  CHECK(std::stoll(c.at("SHARD")) * std::stoll(c.at("REPLICATE")) == p.dp);
  CHECK(c.at("MBS") == std::to_string(p.mbs));
  CHECK(c.at("GBS") == std::to_string(p.gbs));
  CHECK(std::stoll(c.at("ACCUM")) * p.mbs * p.dp == p.gbs);
  CHECK(c.at("SEQ") == std::to_string(p.seq));
  CHECK(c.at("LAYERS") == std::to_string(j.model.layers));
  CHECK(c.at("KV_HEADS") == std::to_string(j.model.kv_heads));
  CHECK(c.at("RECOMPUTE") == "\"full\"");
  CHECK(c.at("PRECISION") == "\"bf16\"");
  CHECK(c.at("CPU_OFFLOAD") == "False");
}

TEST_CASE("Export: FSDP script for DDP, ZeRO-1 and tensor parallelism", "[planner][export]") {
  SECTION("zero 0 is DDP, zero 1 adds ZeroRedundancyOptimizer") {
    for (int zero : {0, 1}) {
      Plan p;
      p.zero = zero;
      p.gbs = 64;
      const Job j = job("gpt3-1.3b", "dgx-a100", 8, p);
      const auto c = python_constants(exported(ExportTarget::kFsdp, j));
      CHECK(c.at("ZERO") == std::to_string(zero));
      CHECK(c.at("SHARD") == "1");
      CHECK(c.at("ACCUM") == "8");
      CHECK(c.at("POSITIONS") == "\"learned\"");
      CHECK(c.at("TIED_EMBEDDINGS") == "True");
      CHECK(c.at("MLP") == "\"gelu\"");
    }
  }
  SECTION("tensor and sequence parallelism under FSDP2") {
    Plan p;
    p.tp = 4;
    p.sp = true;
    p.zero = 2;
    const Job j = job("llama3-70b", "dgx-h100", 16, p);
    const auto c = python_constants(exported(ExportTarget::kFsdp, j));
    CHECK(c.at("TP") == "4");
    CHECK(c.at("DP") == "4");
    CHECK(c.at("SP") == "True");
    CHECK(c.at("SHARD") == "4");
  }
}

TEST_CASE("Export: refusals name the framework's rule", "[planner][export]") {
  SECTION("asynchronous data parallelism, every target") {
    Plan p;
    p.dp_mode = DpMode::kAsync;
    const Job j = job("gpt3-1.3b", "dgx-a100", 8, p);
    CHECK(refusal(ExportTarget::kMegatron, j) ==
          "Megatron-LM has no asynchronous data parallelism (parameter servers); its data-parallel ranks reduce "
          "gradients in step (use dp_mode sync)");
    CHECK(refusal(ExportTarget::kDeepSpeed, j) ==
          "DeepSpeed has no asynchronous data parallelism (parameter servers); its data-parallel ranks reduce "
          "gradients in step (use dp_mode sync)");
    CHECK(refusal(ExportTarget::kFsdp, j) ==
          "PyTorch DDP/FSDP2 has no asynchronous data parallelism (parameter servers); its data-parallel ranks "
          "reduce gradients in step (use dp_mode sync)");
  }
  SECTION("zero-bubble schedules: no framework here runs them with one stage per rank") {
    // Upstream Megatron-LM has no zero-bubble schedule (the authors' fork
    // sail-sg/zero-bubble-pipeline-parallelism: --enable-zero-bubble,
    // --zero-bubble-max-pending-backward = p for ZB-1p, 2p for ZB-2p, on
    // --transformer-impl local); torch.distributed.pipelining's zero-bubble
    // schedules are multi-stage (torchtitan: "Multi-stage schedule requires
    // at least 2 stages per rank"); DeepSpeed runs 1F1B only.
    Plan zb;
    zb.pp = 4;
    zb.gbs = 16;
    zb.schedule = Schedule::kZb2p;
    zb.schedule_given = true;
    const Job j = job("llama3-8b", "dgx-h100", 4, zb);  // dp 1
    CHECK(refusal(ExportTarget::kMegatron, j) ==
          "Megatron-LM has no zb-2p schedule; Zero Bubble's fork of it (sail-sg/zero-bubble-pipeline-parallelism) "
          "runs it with --enable-zero-bubble --zero-bubble-max-pending-backward 8 on its local "
          "(non-Transformer-Engine) layers, which this export does not target (use schedule 1f1b or interleaved)");
    CHECK(refusal(ExportTarget::kTorchtitan, j) ==
          "torchtitan has no zb-2p schedule with one stage per rank: its zero-bubble schedules "
          "(InterleavedZeroBubble, ZBVZeroBubble) run 2 or more stages per rank (\"Multi-stage schedule requires at "
          "least 2 stages per rank\"); use schedule zb-v, 1f1b or interleaved");
    CHECK(refusal(ExportTarget::kDeepSpeed, j) ==
          "DeepSpeed's pipeline engine runs one 1F1B schedule (TrainSchedule) with one model chunk per stage; it has "
          "no zb-2p schedule (use schedule 1f1b)");
    CHECK(refusal(ExportTarget::kFsdp, j).find("no pipeline schedule") != std::string::npos);
  }
  SECTION("DeepSpeed: ZeRO-2/3 with pipeline parallelism") {
    const Job j = job_from_file("plan_llama3-8b_pp2_zero2.json");
    CHECK(refusal(ExportTarget::kDeepSpeed, j) ==
          "DeepSpeed's pipeline engine refuses ZeRO stage 2 and 3 (\"ZeRO-2 and ZeRO-3 are incompatible with pipeline "
          "parallelism\"); use zero 0 or 1 with pp > 1");
  }
  SECTION("DeepSpeed: context parallelism, interleaving, uneven stages, hybrid ZeRO-1") {
    Plan cp;
    cp.cp = 2;
    CHECK(refusal(ExportTarget::kDeepSpeed, job("llama3-8b", "dgx-h100", 8, cp)) ==
          "DeepSpeed has no ring context parallelism; its sequence parallelism (DeepSpeed-Ulysses) splits attention "
          "heads with all-to-all instead (use --cp-comm-type a2a, or cp 1)");
    Plan vp;
    vp.pp = 2;
    vp.vp = 2;
    vp.gbs = 16;
    CHECK(refusal(ExportTarget::kDeepSpeed, job("llama3-8b", "dgx-h100", 8, vp)) ==
          "DeepSpeed's pipeline engine runs one 1F1B schedule (TrainSchedule) with one model chunk per stage; it has "
          "no interleaved schedule (use schedule 1f1b)");
    Plan uneven;
    uneven.pp = 2;
    uneven.stage_layers = {15, 17};
    CHECK(refusal(ExportTarget::kDeepSpeed, job("llama3-8b", "dgx-h100", 8, uneven)) ==
          "Megatron-DeepSpeed splits transformer layers evenly over pipeline stages (partition_method "
          "type:transformer); it cannot place stage layers 15,17");
    Plan hybrid;
    hybrid.zero = 1;
    hybrid.shard_group = 8;
    CHECK(refusal(ExportTarget::kDeepSpeed, job("llama3-8b", "dgx-h100", 16, hybrid)) ==
          "DeepSpeed shards ZeRO state over the whole data-parallel group; its hybrid sharding (MiCS, "
          "mics_shard_size) is rejected by current releases (use shard_group = dp)");
    hybrid.zero = 3;
    CHECK(refusal(ExportTarget::kDeepSpeed, job("llama3-8b", "dgx-h100", 16, hybrid)) ==
          "DeepSpeed shards ZeRO state over the whole data-parallel group; its hybrid sharding (MiCS, "
          "mics_shard_size) is rejected by current releases (use shard_group = dp)");
    Plan offload;
    offload.pp = 2;
    offload.zero = 1;
    offload.offload = Offload::kOptimizer;
    CHECK(refusal(ExportTarget::kDeepSpeed, job("llama3-8b", "dgx-h100", 8, offload)) ==
          "DeepSpeed's pipeline engine fails with bf16 and optimizer offload (deepspeedai/DeepSpeed#3866); use fp16, "
          "pp 1 or no offload");
  }
  SECTION("Megatron-LM: schedules it does not have") {
    Plan gpipe;
    gpipe.pp = 2;
    gpipe.schedule = Schedule::kGpipe;
    gpipe.schedule_given = true;
    CHECK(refusal(ExportTarget::kMegatron, job("llama3-8b", "dgx-h100", 8, gpipe)) ==
          "Megatron-LM has no GPipe schedule (all forwards, then all backwards); its pipeline schedules are 1F1B and "
          "interleaved 1F1B (use schedule 1f1b)");
    Plan naive = gpipe;
    naive.schedule = Schedule::kNaive;
    CHECK(refusal(ExportTarget::kMegatron, job("llama3-8b", "dgx-h100", 8, naive)) ==
          "Megatron-LM has no naive pipeline schedule (one micro-batch in flight); its pipeline schedules are 1F1B "
          "and interleaved 1F1B (use schedule 1f1b)");
    // Without pipeline parallelism the schedule does not matter.
    Plan flat;
    flat.schedule = Schedule::kGpipe;
    flat.schedule_given = true;
    CHECK_FALSE(exported(ExportTarget::kMegatron, job("llama3-8b", "dgx-h100", 8, flat)).empty());
  }
  SECTION("Megatron-LM: ALiBi, parameter offload, ZeRO-3 with pp") {
    Plan plain;
    plain.tp = 8;
    plain.gbs = 8;
    CHECK(refusal(ExportTarget::kMegatron, job("bloom-176b", "dgx-h100", 8, plain)) ==
          "Megatron-LM has no ALiBi position embedding (--position-embedding-type takes learned_absolute, rope, "
          "mrope, relative or none)");
    Plan offload;
    offload.zero = 3;
    offload.offload = Offload::kParams;
    CHECK(refusal(ExportTarget::kMegatron, job("llama3-8b", "dgx-h100", 8, offload)) ==
          "Megatron-LM cannot offload parameters to the host; --optimizer-cpu-offload moves optimizer state only "
          "(use offload optimizer)");
    Plan fsdp_pp;
    fsdp_pp.zero = 3;
    fsdp_pp.pp = 2;
    CHECK(refusal(ExportTarget::kMegatron, job("llama3-8b", "dgx-h100", 8, fsdp_pp)) ==
          "Megatron-LM shards gradients and parameters (ZeRO-2/3) only with Megatron-FSDP (--use-megatron-fsdp), "
          "which is documented with tensor, context and expert parallelism but not pipeline parallelism; its "
          "distributed optimizer (--use-distributed-optimizer) is ZeRO-1 (use zero 1 with pp > 1)");
  }
  SECTION("torchtitan: GPT-style models, unknown shapes, ZeRO-1, DDP with tp, fp16") {
    const Job gpt = job_from_file("plan_gpt3-1.3b_zero2.json");
    CHECK(refusal(ExportTarget::kTorchtitan, gpt) ==
          "torchtitan ships Llama-family models only (SwiGLU, RoPE, RMSNorm, no biases); gpt3-1.3b has a GeLU MLP, "
          "learned positions and biases with LayerNorm");
    Plan zero3;
    zero3.zero = 3;
    CHECK(refusal(ExportTarget::kTorchtitan, job("llama2-7b", "dgx-h100", 8, zero3)) ==
          "torchtitan picks the architecture by [model] name and flavor, and no llama3 flavor (8B, 70B, 405B) has "
          "llama2-7b's shape (layers=32, hidden=4096, heads=32, kv_heads=32, ffn_hidden=11008, vocab=32000); add a "
          "flavor to torchtitan/models/llama3 first");
    // Llama 2 70B has the 70B flavor's layers, but the flavor's vocabulary is
    // Llama 3's (torchtitan/models/llama3/model/args.py vocab_size = 128256,
    // not read from the tokenizer in v0.2.2): tests/export/torchtitan_rules.py
    // refused the export that took it for the flavor.
    CHECK(refusal(ExportTarget::kTorchtitan, job("llama2-70b", "dgx-h100", 16, zero3)) ==
          "torchtitan picks the architecture by [model] name and flavor, and no llama3 flavor (8B, 70B, 405B) has "
          "llama2-70b's shape (layers=80, hidden=8192, heads=64, kv_heads=8, ffn_hidden=28672, vocab=32000); add a "
          "flavor to torchtitan/models/llama3 first");
    Plan zero1;
    zero1.zero = 1;
    CHECK(refusal(ExportTarget::kTorchtitan, job("llama3-8b", "dgx-h100", 8, zero1)) ==
          "torchtitan has no optimizer-only sharding (ZeRO-1); its data parallelism is DDP "
          "(data_parallel_replicate_degree) or FSDP2 (data_parallel_shard_degree: ZeRO-2 with "
          "fsdp_reshard_after_forward = \"never\", ZeRO-3 otherwise)");
    Plan ddp_tp;
    ddp_tp.tp = 2;
    CHECK(refusal(ExportTarget::kTorchtitan, job("llama3-8b", "dgx-h100", 8, ddp_tp)) ==
          "torchtitan applies DDP (zero 0) only without other parallelism (\"DDP has not supported > 1D "
          "parallelism\"); use zero 2 or 3 to combine data parallelism with tp or pp");
    Plan fp16 = zero3;
    fp16.precision = Precision::kFp16;
    CHECK(refusal(ExportTarget::kTorchtitan, job("llama3-8b", "dgx-h100", 8, fp16)) ==
          "torchtitan's training.mixed_precision_param is bfloat16 or float32; it has no fp16 (loss-scaled) training "
          "(use precision bf16)");
    Plan offload = zero3;
    offload.offload = Offload::kOptimizer;
    CHECK(refusal(ExportTarget::kTorchtitan, job("llama3-8b", "dgx-h100", 8, offload)) ==
          "torchtitan's training.enable_cpu_offload (FSDP2 CPUOffloadPolicy) moves parameters, gradients and "
          "optimizer state together; it has no optimizer-only offload (use offload params with zero 3)");
  }
  SECTION("FSDP: pipelines, context parallelism, DDP with tp, optimizer-only offload") {
    const Job pp = job_from_file("plan_llama3-8b_tp2_pp2.json");
    CHECK(refusal(ExportTarget::kFsdp, pp) ==
          "PyTorch FSDP2 and DDP have no pipeline schedule; export pipeline-parallel plans with --to torchtitan "
          "(torch.distributed.pipelining) or --to megatron");
    Plan cp;
    cp.cp = 2;
    cp.zero = 3;
    CHECK(refusal(ExportTarget::kFsdp, job("llama3-8b", "dgx-h100", 8, cp)) ==
          "the FSDP2 script has no context parallelism; export context-parallel plans with --to torchtitan or --to "
          "megatron");
    Plan ddp_tp;
    ddp_tp.tp = 2;
    ddp_tp.zero = 1;
    CHECK(refusal(ExportTarget::kFsdp, job("llama3-8b", "dgx-h100", 8, ddp_tp)) ==
          "PyTorch composes tensor parallelism (DTensor) with FSDP2's fully_shard, not with DistributedDataParallel "
          "or ZeroRedundancyOptimizer (use zero 2 or 3 with tp > 1)");
    Plan offload;
    offload.zero = 2;
    offload.offload = Offload::kOptimizer;
    CHECK(refusal(ExportTarget::kFsdp, job("llama3-8b", "dgx-h100", 8, offload)) ==
          "FSDP2's CPUOffloadPolicy moves parameters, gradients and optimizer state together; it has no "
          "optimizer-only offload (use offload params with zero 3)");
  }
}

TEST_CASE("Export: a plan simulated for a framework exports what that framework was simulated with",
          "[planner][export][framework]") {
  Job j = job_from_file("plan_llama3-8b_tp2_pp2.json");  // zero 1, dp 2
  auto with = [&](Framework f) {
    Job k = j;
    k.file.plan.framework = f;
    k.layout.plan.framework = f;
    return k;
  };
  SECTION("Megatron-Core (NeMo recipes): both overlaps; Megatron-LM 2021: neither") {
    const auto core = bash_args(exported(ExportTarget::kMegatron, with(Framework::kMegatronCore)), "PARALLEL_ARGS");
    CHECK(core.count("--overlap-grad-reduce") == 1);
    CHECK(core.count("--overlap-param-gather") == 1);
    const auto lm = bash_args(exported(ExportTarget::kMegatron, with(Framework::kMegatronLM)), "PARALLEL_ARGS");
    CHECK(lm.count("--overlap-grad-reduce") == 0);
    CHECK(lm.count("--overlap-param-gather") == 0);
    CHECK(lm.count("--use-distributed-optimizer") == 1);
  }
  SECTION("DeepSpeed ZeRO-1/2: overlap_comm as DeepSpeed defaults it (false below stage 3)") {
    Job z = job_from_file("plan_gpt3-1.3b_zero2.json");
    z.file.plan.framework = z.layout.plan.framework = Framework::kDeepSpeed;
    const nlohmann::json c = nlohmann::json::parse(exported(ExportTarget::kDeepSpeed, z));
    CHECK(c.at("zero_optimization").at("overlap_comm").get<bool>() == false);
  }
  SECTION("DeepSpeed ZeRO-3: the parameter coordinator's knobs as simulated") {
    // The values the simulation replays (deepspeed_zero3.h) are DeepSpeed's
    // defaults (deepspeed/runtime/zero/config.py: stage3_prefetch_bucket_size
    // 5e7, stage3_max_live_parameters 1e9, stage3_max_reuse_distance 1e9,
    // stage3_param_persistence_threshold 1e5), written out so that the run
    // does what was simulated whatever a DeepSpeed release defaults to.
    Plan p;
    p.zero = 3;
    p.framework = Framework::kDeepSpeed;
    const Job z = job("llama2-7b", "dgx-a100", 16, p);
    const nlohmann::json c = nlohmann::json::parse(exported(ExportTarget::kDeepSpeed, z));
    const nlohmann::json& zo = c.at("zero_optimization");
    CHECK(zo.at("stage3_prefetch_bucket_size").get<int64_t>() == 50000000);
    CHECK(zo.at("stage3_max_live_parameters").get<int64_t>() == 1000000000);
    CHECK(zo.at("stage3_max_reuse_distance").get<int64_t>() == 1000000000);
    CHECK(zo.at("stage3_param_persistence_threshold").get<int64_t>() == 100000);
    CHECK(zo.at("reduce_bucket_size").get<int64_t>() == 500000000);
  }
  SECTION("--fp8-param-gather is Megatron's flag, written when simulated") {
    Job k = j;
    k.file.plan.fp8_recipe = k.layout.plan.fp8_recipe = Fp8Recipe::kDelayed;
    k.file.plan.fp8_param_gather = k.layout.plan.fp8_param_gather = true;
    const auto training = bash_args(exported(ExportTarget::kMegatron, k), "TRAINING_ARGS");
    CHECK(training.count("--fp8-param-gather") == 1);
    CHECK(training.at("--fp8-recipe") == "delayed");
  }
  SECTION("Megatron-LM of the 2021-22 papers: no context parallelism, FP8 or Megatron FSDP") {
    Job k = with(Framework::kMegatronLM);
    CHECK_FALSE(framework_refusal(k.model, k.cluster, k.layout).has_value());
    k.layout.plan.zero = 2;
    CHECK(*framework_refusal(k.model, k.cluster, k.layout) ==
          "Megatron-LM before Megatron-Core has no gradient or parameter sharding (Megatron FSDP); use --framework "
          "megatron-core");
    // The export refuses what the search refuses (one place: export_megatron).
    CHECK(refusal(ExportTarget::kMegatron, k) == *framework_refusal(k.model, k.cluster, k.layout));
    // Stages of unequal layers: Megatron-LM at the end of 2021 (9da6e975de,
    // mpu.get_num_layers) asserts num_layers % pp == 0.  Llama 3 8B's 32
    // layers over 3 stages split 10, 11, 11 by default; Megatron-Core runs it.
    Plan uneven;
    uneven.pp = 3;
    uneven.framework = Framework::kMegatronLM;
    const Job lm = job("llama3-8b", "dgx-h100", 3, uneven);
    REQUIRE(lm.layout.stage_layers.size() == 3);
    CHECK(refusal(ExportTarget::kMegatron, lm) ==
          "Megatron-LM before Megatron-Core splits the layers evenly over pipeline stages (\"num_layers must be "
          "divisible by pipeline_model_parallel_size\"); it cannot place stage layers " +
          std::to_string(lm.layout.stage_layers[0]) + "," + std::to_string(lm.layout.stage_layers[1]) + "," +
          std::to_string(lm.layout.stage_layers[2]) + " (use --framework megatron-core)");
    uneven.framework = Framework::kMegatronCore;
    CHECK_FALSE(framework_refusal(lm.model, lm.cluster, job("llama3-8b", "dgx-h100", 3, uneven).layout).has_value());
  }
  SECTION("another framework's target is refused") {
    CHECK(refusal(ExportTarget::kTorchtitan, with(Framework::kMegatronCore)) ==
          "the plan was simulated for megatron-core, whose execution (overlaps, buckets, gathers) another framework "
          "does not reproduce; export it with --to megatron, or simulate it for this target's framework");
  }
}

TEST_CASE("Export: the same plan gives byte-identical output", "[planner][export]") {
  const Job j = job_from_file("plan_llama3-8b_tp2_pp2.json");
  for (ExportTarget t : {ExportTarget::kMegatron, ExportTarget::kDeepSpeed}) {
    CHECK(exported(t, j) == exported(t, j));
  }
}

TEST_CASE("Export: a named attention kernel maps to the framework's switch or is refused", "[planner][export]") {
  // Megatron's --attention-backend (megatron/core/transformer/enums.py
  // AttnBackend: flash, fused, unfused, local, auto; tests/data/frameworks
  // megatron_lm.json): the framework's default kernel is what "auto" lets
  // Transformer Engine pick; fa2 / fa3 are TE's FlashAttention backend,
  // cudnn its FusedAttention, naive the unfused path.
  auto script = [](const std::string& attention, Framework f = Framework::kMegatronCore,
                   const std::string& model = "llama3-8b", const std::string& cluster = "dgx-h100") {
    Plan p;
    p.framework = f;
    set_attention(&p, attention);
    return exported(ExportTarget::kMegatron, job(model, cluster, 8, p));
  };
  auto backend = [&script](const std::string& attention, Framework f = Framework::kMegatronCore,
                           const std::string& model = "llama3-8b", const std::string& cluster = "dgx-h100") {
    return bash_args(script(attention, f, model, cluster), "MODEL_ARGS").at("--attention-backend");
  };
  CHECK(backend("flash") == "auto");
  CHECK(backend("cudnn") == "fused");
  CHECK(backend("fa2") == "flash");
  CHECK(backend("fa3") == "flash");
  CHECK(backend("naive") == "unfused");
  // A megatron-lm plan (Megatron-LM before Megatron-Core) was simulated with
  // that framework's own unfused attention unless it names fa2, its opt-in
  // --use-flash-attn (flash_is_default): the script runs what was simulated.
  auto legacy = [&backend](const std::string& attention) {
    return backend(attention, Framework::kMegatronLM, "gpt3-1.3b", "dgx-a100");
  };
  CHECK(legacy("flash") == "unfused");
  CHECK(legacy("naive") == "unfused");
  CHECK(legacy("fa2") == "flash");
  // TE's flash backend prefers FlashAttention-3 on Hopper when installed;
  // v2.18's NVTE_FLASH_ATTN_V2 / _V3 pin the one the plan names.
  CHECK(script("fa2").find("\nexport NVTE_FLASH_ATTN_V3=0\n") != std::string::npos);
  CHECK(script("fa3").find("\nexport NVTE_FLASH_ATTN_V2=0\n") != std::string::npos);
  CHECK(script("flash").find("NVTE_FLASH_ATTN") == std::string::npos);
  // Megatron-DeepSpeed, torchtitan and the PyTorch script run FlashAttention-2
  // (--use-flash-attn-v2; scaled_dot_product_attention's flash backend) and
  // cannot be told to run another kernel.
  Plan z1;
  z1.zero = 1;
  set_attention(&z1, "cudnn");
  CHECK(refusal(ExportTarget::kDeepSpeed, job("llama3-8b", "dgx-h100", 8, z1)) ==
        "Megatron-DeepSpeed runs FlashAttention-2 (--use-flash-attn-v2); this export cannot select attention cudnn "
        "(use attention flash or fa2)");
  Plan z3;
  z3.zero = 3;
  set_attention(&z3, "fa3");
  CHECK(refusal(ExportTarget::kTorchtitan, job("llama3-8b", "dgx-h100", 8, z3)) ==
        "torchtitan runs scaled_dot_product_attention, whose flash backend is FlashAttention-2; this export cannot "
        "select attention fa3 (use attention flash or fa2)");
  CHECK(refusal(ExportTarget::kFsdp, job("llama3-8b", "dgx-h100", 8, z3)).find("cannot select attention fa3") !=
        std::string::npos);
  // Naming their own kernel is accepted (exported() requires it).
  set_attention(&z3, "fa2");
  CHECK_FALSE(exported(ExportTarget::kTorchtitan, job("llama3-8b", "dgx-h100", 8, z3)).empty());
  CHECK_FALSE(exported(ExportTarget::kFsdp, job("llama3-8b", "dgx-h100", 8, z3)).empty());
}

}  // namespace
}  // namespace trainplan
