#include "planner/export/export_common.h"

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cstring>
#include <functional>
#include <sstream>
#include <vector>

#include <nlohmann/json.hpp>

#include "simulator/core/error.h"
#include "simulator/framework/framework.h"
#include "simulator/network/collective_model.h"
#include "simulator/spec/pipeline_layout.h"

namespace trainplan {
namespace export_detail {

std::string str(int64_t v) { return std::to_string(v); }

ExportResult refuse(const std::string& reason) {
  ExportResult r;
  r.ok = false;
  r.reason = reason;
  return r;
}

ExportResult accept(std::string text) {
  ExportResult r;
  r.ok = true;
  r.text = std::move(text);
  return r;
}

std::string join(const std::vector<int>& v, const char* sep) {
  std::string out;
  for (size_t i = 0; i < v.size(); ++i) {
    if (i > 0) out += sep;
    out += std::to_string(v[i]);
  }
  return out;
}

bool all_equal(const std::vector<int>& v) {
  return std::adjacent_find(v.begin(), v.end(), std::not_equal_to<int>()) == v.end();
}

MegatronStageSplit megatron_stage_split(const Layout& L) {
  const Plan& p = L.plan;
  const std::vector<int>& sl = L.stage_layers;
  const std::vector<std::vector<ChunkLayers>> chunks = chunk_layers(L);
  auto chunks_even = [&](size_t s) {
    return std::all_of(chunks[s].begin(), chunks[s].end(),
                       [&](const ChunkLayers& ch) { return ch.count == chunks[s].front().count; });
  };
  bool middle_even = true;
  for (size_t s = 1; s + 1 < sl.size(); ++s) middle_even = middle_even && chunks_even(s);
  const bool ends_even = chunks_even(0) && chunks_even(sl.size() - 1);
  if (all_equal(sl) && ends_even && middle_even) return MegatronStageSplit::kEven;
  if (p.pp >= 2 && sl.front() > 0 && sl.back() > 0 && ends_even && middle_even) {
    const std::vector<int> middle(sl.begin() + 1, sl.end() - 1);
    if (middle.empty() || (all_equal(middle) && middle.front() > 0)) return MegatronStageSplit::kFirstLast;
  }
  return MegatronStageSplit::kLayout;
}

std::string megatron_pipeline_layout(const Layout& L) {
  const Plan& p = L.plan;
  const std::vector<std::vector<ChunkLayers>> chunks = chunk_layers(L);
  const int v = static_cast<int>(chunks.front().size());
  std::vector<int> stages;
  for (int vs = 0; vs < p.pp * v; ++vs) {
    stages.push_back(chunks[static_cast<size_t>(vs % p.pp)][static_cast<size_t>(vs / p.pp)].count);
  }
  return format_pipeline_layout(stages, p.mtp_layers);
}

std::string plan_summary(const Layout& L) {
  const Plan& p = L.plan;
  std::ostringstream s;
  s << "tp=" << p.tp << " pp=" << p.pp << " dp=" << p.dp << " cp=" << p.cp << " vp=" << p.vp << " zero=" << p.zero
    << " shard=" << L.shard_degree << " mbs=" << p.mbs << " gbs=" << p.gbs << " seq=" << p.seq
    << " recompute=" << to_string(p.recompute) << recompute_layers_text(p) << " sp=" << (p.sp ? "on" : "off")
    << " schedule=" << to_string(p.schedule) << " precision=" << to_string(p.precision)
    << " grad_dtype=" << to_string(p.grad_dtype) << " attention=" << attention_name(p)
    << " offload=" << to_string(p.offload);
  return s.str();
}

LaunchShape launch_of(const ClusterSpec& c, const Layout& L) {
  const std::optional<LaunchShape> h = launch_shape(c, L.gpus);
  TRAINPLAN_CHECK(h.has_value(), "export of a plan with no even launch");
  return *h;
}

std::string job_summary(const ModelSpec& m, const ClusterSpec& c, const Layout& L) {
  const LaunchShape h = launch_of(c, L);
  std::string out = m.name + " on " + c.name + ": " + str(L.gpus) + " GPUs (" + str(h.hosts) +
                    (h.hosts == 1 ? " node" : " nodes") + " x " + str(h.per_host);
  if (c.host.gpus < c.gpus_per_node) {
    out += ", in " + str(L.nodes) + " NVLink domain" + (L.nodes == 1 ? "" : "s") + " of " + str(c.gpus_per_node);
  }
  return out + ")";
}

std::string header_comment(const char* prefix, const std::string& what, const ModelSpec& m, const ClusterSpec& c,
                           const Layout& L) {
  std::string out;
  out += std::string(prefix) + what + " for " + job_summary(m, c, L) + ",\n";
  out += std::string(prefix) + "written by `trainplan export`.\n";
  out += std::string(prefix) + "plan: " + plan_summary(L) + "\n";
  out += std::string(prefix) + "transformer layers per pipeline stage: " + join(L.stage_layers, " ") + "\n";
  return out;
}

std::optional<std::string> async_refusal(const std::string& framework, const Plan& p) {
  if (p.dp_mode != DpMode::kAsync) return std::nullopt;
  return framework + " has no asynchronous data parallelism (parameter servers); its data-parallel ranks "
                     "reduce gradients in step (use dp_mode sync)";
}

std::optional<std::string> fp8_refusal(const std::string& framework, const Plan& p, bool runs_te) {
  if (p.fp8_recipe == Fp8Recipe::kNone) return std::nullopt;
  if (runs_te && !fp8_transformer_engine(p)) {
    return framework + " runs FP8 through Transformer Engine, but this plan was simulated as FSDP2 with torchao's " +
           std::string(to_string(p.fp8_recipe)) +
           " float8 (ZeRO-3: bf16 inputs saved, no FP8 weight copies; export it with --to torchtitan or --to "
           "fsdp, or re-plan with --fp8-recipe delayed or blockwise)";
  }
  if (!runs_te && fp8_transformer_engine(p)) {
    return framework + " runs FP8 through torchao's float8 (tensorwise or rowwise scaling under FSDP2), but this "
           "plan was simulated as Transformer Engine's " + std::string(to_string(p.fp8_recipe)) +
           " FP8 (export it with --to megatron, or re-plan with --zero 3 --fp8-recipe tensorwise or rowwise)";
  }
  return std::nullopt;
}

const char* megatron_attention_backend(const Plan& p) {
  if (attention_run(p) == Attention::kNaive) return "unfused";
  switch (p.attention_kernel) {
    case AttentionKernel::kDefault: return "auto";
    case AttentionKernel::kCudnn: return "fused";
    case AttentionKernel::kFa2:
    case AttentionKernel::kFa3: return "flash";
  }
  return "auto";
}

std::optional<std::string> attention_kernel_refusal(const std::string& framework, const Plan& p, AttentionKernel runs,
                                                    const std::string& how) {
  if (p.attention != Attention::kFlash || p.attention_kernel == AttentionKernel::kDefault ||
      p.attention_kernel == runs) {
    return std::nullopt;
  }
  return framework + " runs " + how + "; this export cannot select attention " + to_string(p.attention_kernel) +
         " (use attention flash or " + to_string(runs) + ")";
}

int64_t vocab_divisor(int64_t vocab, int tp) {
  for (int64_t d = 128; d > 1; d /= 2) {
    if (vocab % (d * tp) == 0) return d;
  }
  return 1;
}

std::vector<int> virtual_stage_layers(const Layout& L) {
  const Plan& p = L.plan;
  const std::vector<std::vector<ChunkLayers>> chunks = chunk_layers(L);
  std::vector<int> out(static_cast<size_t>(p.pp * chunks_per_rank(p)), 0);
  for (int r = 0; r < p.pp; ++r) {
    for (size_t c = 0; c < chunks[static_cast<size_t>(r)].size(); ++c) {
      out[static_cast<size_t>(virtual_stage(p.schedule, p.pp, r, static_cast<int>(c)))] =
          chunks[static_cast<size_t>(r)][c].count;
    }
  }
  return out;
}

void add_optimizer_schedule(BashArgs* training) {
  training->opt("--train-iters", kTrainIters);
  training->opt("--lr", kLearningRate);
  training->opt("--min-lr", kMinLearningRate);
  training->opt("--lr-decay-style", "cosine");
  training->opt("--lr-warmup-iters", kWarmupIters);
  training->opt("--weight-decay", "0.1");
  training->opt("--adam-beta1", "0.9");
  training->opt("--adam-beta2", "0.95");
  training->opt("--clip-grad", "1.0");
  training->opt("--init-method-std", "0.02");
  training->opt("--log-interval", 10);
  training->opt("--eval-iters", 0);
}

std::string required_env(const std::string& var, const std::string& message) {
  for (char ch : message) {
    const bool safe = std::isalnum(static_cast<unsigned char>(ch)) || std::strchr(" ,.:;_-()/", ch) != nullptr;
    TRAINPLAN_CHECK(safe, "bash message has a character that is not literal inside ${...}");
  }
  return "\"${" + var + ":?" + message + "}\"";
}

BashArgs torchrun_args(const ClusterSpec& c, const Layout& L) {
  const LaunchShape h = launch_of(c, L);
  BashArgs a;
  a.opt("--nproc_per_node", h.per_host);
  a.opt("--nnodes", h.hosts);
  if (h.hosts == 1) {
    a.opt("--node_rank", "\"${NODE_RANK:-0}\"");
    a.opt("--master_addr", "\"${MASTER_ADDR:-localhost}\"");
  } else {
    a.opt("--node_rank", required_env("NODE_RANK", "set NODE_RANK to the index of this node, 0.." + str(h.hosts - 1)));
    a.opt("--master_addr", required_env("MASTER_ADDR", "set MASTER_ADDR to the address of node 0"));
  }
  a.opt("--master_port", "\"${MASTER_PORT:-6000}\"");
  return a;
}

std::string pretrain_gpt_launch(const ClusterSpec& c, const Layout& L, const BashArgs& model, const BashArgs& parallel,
                                const BashArgs& training, const BashArgs& data) {
  std::string s = torchrun_args(c, L).array("DISTRIBUTED_ARGS") + "\n";
  s += model.array("MODEL_ARGS") + "\n";
  s += parallel.array("PARALLEL_ARGS") + "\n";
  s += training.array("TRAINING_ARGS") + "\n";
  s += data.array("DATA_ARGS") + "\n";
  s += "torchrun \"${DISTRIBUTED_ARGS[@]}\" pretrain_gpt.py \\\n"
       "  \"${MODEL_ARGS[@]}\" \\\n"
       "  \"${PARALLEL_ARGS[@]}\" \\\n"
       "  \"${TRAINING_ARGS[@]}\" \\\n"
       "  \"${DATA_ARGS[@]}\" \\\n"
       "  \"$@\"\n";
  return s;
}

std::string launch_note(const ClusterSpec& c, const Layout& L, const char* checkout) {
  const LaunchShape h = launch_of(c, L);
  std::string out = "# Run it from a " + std::string(checkout) + " checkout";
  if (h.hosts == 1) return out + ".\n";
  return out + " on each of the " + str(h.hosts) +
         " nodes, with NODE_RANK\n# (0.." + str(h.hosts - 1) + ") and MASTER_ADDR (node 0) set there.\n";
}

std::optional<std::string> partial_recompute_refusal(const std::string& framework, const Plan& p,
                                                     const std::string& what) {
  if (p.recompute != Recompute::kFull || p.recompute_layers == 0) return std::nullopt;
  return framework + " " + what + "; recomputing the first " + std::to_string(p.recompute_layers) +
         " layers of each model chunk is Megatron's --recompute-method block (use --to megatron, or full recompute "
         "of every layer)";
}

std::string py_bool(bool b) { return b ? "True" : "False"; }

}  // namespace export_detail
}  // namespace trainplan
