// Exporters: a resolved plan as Megatron-LM arguments, a DeepSpeed config,
// a torchtitan TOML or a PyTorch FSDP2/DDP script.
//
// The rules each exporter enforces are the framework's own, taken from its
// source (the file is named next to each rule), so that a refusal here is a
// launch failure there:
//   Megatron-LM  megatron/training/arguments.py (validate_args and the
//                argument definitions).
//   DeepSpeed    docs/_pages/config-json.md, deepspeed/runtime/pipe/engine.py
//                (PipelineEngine asserts ZeRO stage < 2), and
//                Megatron-DeepSpeed megatron/arguments.py.
//   torchtitan   torchtitan/config/job_config.py,
//                torchtitan/models/llama3/infra/parallelize.py,
//                torchtitan/distributed/parallel_dims.py.
//   PyTorch      torch.distributed.fsdp.fully_shard, DeviceMesh,
//                torch.distributed.tensor.parallel, DistributedDataParallel.
#include "planner/export/exporters.h"

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

const char* to_string(ExportTarget t) {
  switch (t) {
    case ExportTarget::kMegatron: return "megatron";
    case ExportTarget::kDeepSpeed: return "deepspeed";
    case ExportTarget::kTorchtitan: return "torchtitan";
    case ExportTarget::kFsdp: return "fsdp";
    case ExportTarget::kTorchtitanPy: return "torchtitan-py";
  }
  return "?";
}

std::optional<ExportTarget> export_target_from_string(const std::string& name) {
  for (ExportTarget t : {ExportTarget::kMegatron, ExportTarget::kDeepSpeed, ExportTarget::kTorchtitan,
                         ExportTarget::kFsdp, ExportTarget::kTorchtitanPy}) {
    if (name == to_string(t)) return t;
  }
  return std::nullopt;
}

namespace {

// Training hyper-parameters the plan does not fix.  Written out so that the
// configs run as they are; the values are the Llama 3 / GPT-3 recipe ones
// (AdamW beta2 0.95, weight decay 0.1, clip 1.0, init std 0.02).
constexpr const char* kLearningRate = "3.0e-4";
constexpr const char* kMinLearningRate = "3.0e-5";
constexpr int kTrainIters = 1000;
constexpr int kWarmupIters = 100;

std::string str(int64_t v) { return std::to_string(v); }

// Whether an exporter writes its text or only applies its framework's rules
// (framework_refusal: the search asks it of every plan).
enum class Render { kText, kCheckOnly };

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

// How a Megatron-LM script states the plan's layers per pipeline stage (and
// per model chunk): the default even split (layers % pp == 0, each rank's
// share split evenly over its vp chunks); --decoder-first/last-pipeline-
// num-layers with the rest even over the middle stages (transformer_config.py
// "Uneven PP": first and last > 0, each stage's share split evenly over its
// chunks); else an explicit --pipeline-model-parallel-layout (Megatron-Core
// 0.13+), which places any split, chunk by chunk (as chunk_layers placed it,
// e.g. a short end stage's chunks with the embedding or the loss in a
// layer's place).
enum class MegatronStageSplit { kEven, kFirstLast, kLayout };

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

// Megatron-Core's pipeline layout string of the plan's model chunks, as
// chunk_layers placed them (chunk c of rank r is virtual stage c * pp + r),
// with the MTP depths beside the loss: Megatron's validate_layer_layout
// wants as many m as --mtp-num-layers (pipeline_layout.h).
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

// One line with every plan field, for the header comment of each output.
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

// The hosts the job starts on, one launcher (torchrun) each: what torchrun
// calls nodes.  export_plan refuses a plan without an even split first.
LaunchShape launch_of(const ClusterSpec& c, const Layout& L) {
  const std::optional<LaunchShape> h = launch_shape(c, L.gpus);
  TRAINPLAN_CHECK(h.has_value(), "export of a plan with no even launch");
  return *h;
}

// "llama3-8b on dgx-h100: 8 GPUs (1 node x 8)"; where a node of the cluster
// is an NVLink domain of several hosts, "kimi-k2 on gb200-nvl72: 256 GPUs
// (64 nodes x 4, in 4 NVLink domains of 64)".
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

// Async data parallelism (parameter servers) is modelled by trainplan but
// offered by none of the targets.
std::optional<std::string> async_refusal(const std::string& framework, const Plan& p) {
  if (p.dp_mode != DpMode::kAsync) return std::nullopt;
  return framework + " has no asynchronous data parallelism (parameter servers); its data-parallel ranks "
                     "reduce gradients in step (use dp_mode sync)";
}

// Megatron's vocabulary is the tokenizer's, padded to a multiple of
// make_vocab_size_divisible_by * tp (_vocab_size_with_padding).  Returns the
// largest power of two up to 128 that keeps the model's vocabulary unpadded.
// REQUIRES: vocab % tp == 0 (resolve_plan checks it).
// FP8 plans are simulated either as Transformer Engine's FP8 (Megatron) or
// as torchao's float8 (FSDP2: torchtitan, the PyTorch script); see
// fp8_transformer_engine().  A framework exports only the kind it runs.
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

// A named attention kernel (Plan::attention_kernel) a framework's export
// cannot select: `runs` is the one it runs (its default_attention_kernel
// with attention flash), `how` says how it runs it.
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

// Layers of each virtual pipeline stage in model order, as the simulator
// placed them (chunk_layers: virtual_stage gives each rank's chunks their
// place, the loop of Megatron and torch.distributed.pipelining or zb-v's V).
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

// Bash array of arguments, one per line ("--flag value").
class BashArgs {
 public:
  void flag(const std::string& f) { lines_.push_back(f); }
  void opt(const std::string& f, const std::string& v) { lines_.push_back(f + " " + v); }
  void opt(const std::string& f, int64_t v) { opt(f, str(v)); }
  // A literal value the shell must not read ('|', '(', '*'): single-quoted.
  // REQUIRES: v has no single quote.
  void literal_opt(const std::string& f, const std::string& v) { lines_.push_back(f + " '" + v + "'"); }
  // A flag with several values (argparse nargs='+').
  void opt_list(const std::string& f, const std::vector<std::string>& values) {
    std::string line = f;
    for (const std::string& v : values) line += " " + v;
    lines_.push_back(line);
  }
  std::string array(const std::string& name) const {
    std::string out = name + "=(\n";
    for (const std::string& l : lines_) out += "  " + l + "\n";
    return out + ")\n";
  }

 private:
  std::vector<std::string> lines_;
};

// The optimizer and learning-rate schedule both Megatron launchers use
// (GPT-3 paper's AdamW settings; the same in Megatron-LM and
// Megatron-DeepSpeed).
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

// A double-quoted bash expansion that stops the script with `message` when
// `var` is unset: "${VAR:?message}".  Inside "${...}" bash parses quotes and
// expansions in the message (an apostrophe opens a quote and the script no
// longer parses), so the message is restricted to characters that are
// literal there.
std::string required_env(const std::string& var, const std::string& message) {
  for (char ch : message) {
    const bool safe = std::isalnum(static_cast<unsigned char>(ch)) || std::strchr(" ,.:;_-()/", ch) != nullptr;
    TRAINPLAN_CHECK(safe, "bash message has a character that is not literal inside ${...}");
  }
  return "\"${" + var + ":?" + message + "}\"";
}

// torchrun's rendezvous arguments.  One node runs as is; on several nodes
// NODE_RANK and MASTER_ADDR must be set on each, and bash stops with the
// message if they are not.
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

std::string launch_note(const ClusterSpec& c, const Layout& L, const char* checkout) {
  const LaunchShape h = launch_of(c, L);
  std::string out = "# Run it from a " + std::string(checkout) + " checkout";
  if (h.hosts == 1) return out + ".\n";
  return out + " on each of the " + str(h.hosts) +
         " nodes, with NODE_RANK\n# (0.." + str(h.hosts - 1) + ") and MASTER_ADDR (node 0) set there.\n";
}

// ---- Megatron-LM ------------------------------------------------------------

// What a plan simulated for Megatron-LM as of the 2021-22 papers (the
// megatron-lm profile) uses that only came with Megatron-Core: context
// parallelism (Megatron-Core 0.5, 2024), Transformer Engine FP8 (2023),
// Megatron FSDP (ZeRO-2/3, 2025), MoE, latent or sliding-window attention, and
// pipeline stages of unequal layers (mpu.get_num_layers at the end of 2021,
// 9da6e975de: "num_layers must be divisible by pipeline_model_parallel_size";
// --decoder-first/last-pipeline-num-layers and the layout string came later).
std::optional<std::string> megatron_lm_refusal(const ModelSpec& m, const Layout& L) {
  const Plan& p = L.plan;
  if (p.cp > 1) return std::string("Megatron-LM before Megatron-Core has no context parallelism; use --framework megatron-core");
  if (p.fp8_recipe != Fp8Recipe::kNone) {
    return std::string("Megatron-LM before Megatron-Core has no FP8 training (Transformer Engine); use --framework "
                       "megatron-core");
  }
  if (p.zero >= 2) {
    return std::string("Megatron-LM before Megatron-Core has no gradient or parameter sharding (Megatron FSDP); use "
                       "--framework megatron-core");
  }
  if (m.has_moe || m.attention == AttentionKind::kMla || m.has_sliding_window) {
    return std::string("Megatron-LM before Megatron-Core has no Mixture-of-Experts layers, latent attention or "
                       "sliding-window attention; use --framework megatron-core");
  }
  if (p.pp > 1 && !all_equal(L.stage_layers)) {
    return "Megatron-LM before Megatron-Core splits the layers evenly over pipeline stages (\"num_layers must be "
           "divisible by pipeline_model_parallel_size\"); it cannot place stage layers " +
           join(L.stage_layers, ",") + " (use --framework megatron-core)";
  }
  return std::nullopt;
}

ExportResult export_megatron(const ModelSpec& m, const ClusterSpec& c, const Layout& L, Render render) {
  const Plan& p = L.plan;
  if (auto r = async_refusal("Megatron-LM", p)) return refuse(*r);
  if (p.framework == Framework::kMegatronLM) {
    if (auto r = megatron_lm_refusal(m, L)) return refuse(*r);
  }
  if (p.pp > 1 && p.schedule == Schedule::kNaive) {
    return refuse(
        "Megatron-LM has no naive pipeline schedule (one micro-batch in flight); its pipeline schedules are 1F1B and "
        "interleaved 1F1B (use schedule 1f1b)");
  }
  if (p.schedule == Schedule::kZbv) {
    // The fork's ZB-V (--zero-bubble-v-schedule, megatron/core/zbpp_utils.py)
    // is its own greedy schedule, not PyTorch's fixed order simulated here.
    return refuse(
        "Megatron-LM has no zb-v schedule; Zero Bubble's fork of it (sail-sg/zero-bubble-pipeline-parallelism) runs "
        "its own ZB-V variant with --zero-bubble-v-schedule on its local (non-Transformer-Engine) layers, which this "
        "export does not target; the zb-v simulated here is PyTorch's ScheduleZBVZeroBubble (export to torchtitan)");
  }
  if (p.schedule == Schedule::kInterleavedZb) {
    return refuse(
        "Megatron-LM has no interleaved-zb schedule (its interleaved schedule runs full backwards); the "
        "interleaved-zb simulated here is PyTorch's ScheduleInterleavedZeroBubble (export to torchtitan)");
  }
  if (p.schedule == Schedule::kDualPipeV) {
    // Megatron-Core has no DualPipe schedule; its EP overlap is batch-level
    // in 1F1B (--overlap-moe-expert-parallel-comm, MoE README v0.14).
    return refuse(
        "Megatron-LM has no dualpipe-v schedule (its expert-parallel overlap is --overlap-moe-expert-parallel-comm "
        "within 1F1B / interleaved 1F1B); the dualpipe-v simulated here is PyTorch's ScheduleDualPipeV (export to "
        "torchtitan)");
  }
  if (zero_bubble(p.schedule)) {
    // Upstream Megatron-LM / Megatron-Core ships no zero-bubble schedule; the
    // authors' fork (sail-sg/zero-bubble-pipeline-parallelism) adds one on
    // its legacy local transformer (--transformer-impl local, asserted in
    // its validate_args), which this export does not target.
    return refuse(std::string("Megatron-LM has no ") + to_string(p.schedule) +
                  " schedule; Zero Bubble's fork of it (sail-sg/zero-bubble-pipeline-parallelism) runs it with "
                  "--enable-zero-bubble --zero-bubble-max-pending-backward " +
                  std::to_string(zero_bubble_activation_limit(p.schedule, p.pp)) +
                  " on its local (non-Transformer-Engine) layers, which this export does not target (use schedule "
                  "1f1b or interleaved)");
  }
  if (p.pp > 1 && p.schedule == Schedule::kGpipe) {
    return refuse(
        "Megatron-LM has no GPipe schedule (all forwards, then all backwards); its pipeline schedules are 1F1B and "
        "interleaved 1F1B (use schedule 1f1b)");
  }
  if (m.position_embedding == PositionEmbedding::kAlibi) {
    return refuse(
        "Megatron-LM has no ALiBi position embedding (--position-embedding-type takes learned_absolute, rope, mrope, "
        "relative or none)");
  }
  if (p.cp > 1 && m.has_sliding_window && p.cp_comm == CpComm::kP2p) {
    // transformer_engine/pytorch/attention/dot_product_attention/
    // context_parallel.py attn_forward_func_with_cp: "Context parallelism
    // does not support sliding window attention with cp_comm_type='p2p'".
    return refuse(
        "Transformer Engine runs sliding-window attention under context parallelism only with --cp-comm-type a2a or "
        "all_gather, not the p2p ring this plan runs; use --cp-comm-type a2a, or cp 1");
  }
  if (p.cp > 1 && p.attention == Attention::kNaive) {
    return refuse(
        "Megatron-LM runs context parallelism inside Transformer Engine's fused or flash attention, not unfused "
        "attention (use attention flash)");
  }
  if (p.offload == Offload::kParams) {
    return refuse(
        "Megatron-LM cannot offload parameters to the host; --optimizer-cpu-offload moves optimizer state only (use "
        "offload optimizer)");
  }
  if (p.precision == Precision::kFp16 && p.grad_dtype == GradDtype::kBf16) {
    return refuse("Megatron-LM reduces gradients in bf16 only under --bf16 (--grad-reduce-in-bf16)");
  }
  if (auto r = fp8_refusal("Megatron-LM", p, true)) return refuse(*r);
  if (p.fp8_recipe == Fp8Recipe::kRowwise) {
    return refuse(
        "Megatron-LM (Transformer Engine) has no rowwise FP8 recipe; its --fp8-recipe takes tensorwise, delayed, "
        "mxfp8 or blockwise (1x128 blocks are the nearest; re-plan with --fp8-recipe blockwise)");
  }
  if (m.has_moe && m.bias && p.etp > 1) {
    // transformer_config.py: add_bias_linear with MoE needs
    // expert_tensor_parallel_size 1.
    return refuse("Megatron-Core's MoE experts with biases (--add-bias-linear) need --expert-tensor-parallel-size 1, "
                  "not etp=" + str(p.etp));
  }
  if (m.has_moe && m.moe.load_balancing == LoadBalancing::kAuxFree && m.moe.router != RouterScore::kSigmoid) {
    return refuse("Megatron-Core's aux-loss-free expert bias (--moe-router-enable-expert-bias) needs "
                  "--moe-router-score-function sigmoid; the model's router is softmax");
  }
  const bool megatron_fsdp = p.zero >= 2;
  if (megatron_fsdp && p.pp > 1) {
    return refuse(
        "Megatron-LM shards gradients and parameters (ZeRO-2/3) only with Megatron-FSDP (--use-megatron-fsdp), which "
        "is documented with tensor, context and expert parallelism but not pipeline parallelism; its distributed "
        "optimizer (--use-distributed-optimizer) is ZeRO-1 (use zero 1 with pp > 1)");
  }
  if (render == Render::kCheckOnly) return accept("");
  const MegatronStageSplit split = megatron_stage_split(L);

  BashArgs model;
  model.opt("--num-layers", m.layers);
  model.opt("--hidden-size", m.hidden);
  model.opt("--ffn-hidden-size", m.ffn_hidden);
  model.opt("--num-attention-heads", m.heads);
  if (m.kv_heads != m.heads) {
    model.flag("--group-query-attention");
    model.opt("--num-query-groups", m.kv_heads);
  }
  if (m.head_dim_given > 0) model.opt("--kv-channels", m.head_dim_given);
  if (m.attention == AttentionKind::kMla) {
    // megatron/training/arguments.py _add_mla_args.
    model.flag("--multi-latent-attention");
    if (m.mla.q_lora_rank > 0) model.opt("--q-lora-rank", m.mla.q_lora_rank);
    model.opt("--kv-lora-rank", m.mla.kv_lora_rank);
    model.opt("--qk-head-dim", m.mla.qk_nope_head_dim);
    model.opt("--qk-pos-emb-head-dim", m.mla.qk_rope_head_dim);
    model.opt("--v-head-dim", m.mla.v_head_dim);
  }
  if (m.has_sliding_window) {
    // megatron/training/arguments.py: --window-size (left, right) as
    // tuple_type, the keys before and after the query (flash-attn's
    // window_size), --window-attn-skip-freq N (one full-attention layer
    // after N - 1 windowed ones); Megatron-Bridge's gpt-oss bridge
    // (gpt_oss_bridge.py) sets (sliding_window - 1, 0) and 2.
    model.opt("--window-size", str(m.sliding_window.tokens - 1) + ",0");
    if (m.sliding_window.full_every > 0) model.opt("--window-attn-skip-freq", m.sliding_window.full_every);
  }
  if (m.has_moe) {
    // Megatron-Core MoE (megatron/core/transformer/moe/README.md): routed
    // experts of --moe-ffn-hidden-size, grouped GEMM, the all-to-all token
    // dispatcher when tokens cross GPUs.
    const MoeSpec& e = m.moe;
    model.opt("--num-experts", e.experts);
    model.opt("--moe-router-topk", e.top_k);
    model.opt("--moe-ffn-hidden-size", e.expert_ffn_hidden);
    if (e.shared_experts > 0) model.opt("--moe-shared-expert-intermediate-size", e.shared_experts * e.shared_ffn_hidden);
    if (e.dense_layers > 0 || e.layer_freq > 1) {
      // arguments.py moe_freq_type evaluates a Python list expression of
      // num_layers 0/1 entries; quoted for bash.
      std::string pattern;
      if (e.layer_freq == 1) {
        pattern = "([0]*" + str(e.dense_layers) + "+[1]*" + str(m.layers - e.dense_layers) + ")";
      } else {
        pattern = "[";
        for (int64_t i = 0; i < m.layers; ++i) pattern += std::string(i ? "," : "") + (m.is_moe_layer(i) ? "1" : "0");
        pattern += "]";
      }
      model.opt("--moe-layer-freq", "'" + pattern + "'");
    }
    model.opt("--moe-router-score-function", e.router == RouterScore::kSigmoid ? "sigmoid" : "softmax");
    if (e.load_balancing == LoadBalancing::kAuxFree) {
      // DeepSeek-V3: the expert bias plus a small sequence-wise balance loss.
      model.flag("--moe-router-enable-expert-bias");
      model.opt("--moe-router-load-balancing-type", "seq_aux_loss");
      model.opt("--moe-aux-loss-coeff", "1e-4");
    } else {
      model.opt("--moe-router-load-balancing-type", "aux_loss");
      model.opt("--moe-aux-loss-coeff", "1e-2");
    }
    if (e.capacity_factor > 0) {
      char cf[32];
      std::snprintf(cf, sizeof cf, "%g", e.capacity_factor);
      model.opt("--moe-expert-capacity-factor", cf);
      // Plan::moe_pad_to_capacity (resolve_plan holds the rules).
      if (p.moe_pad_to_capacity) model.flag("--moe-pad-expert-input-to-capacity");
    }
    if (e.router_groups > 0) {
      // Group-limited (node-limited) routing: TransformerConfig
      // moe_router_num_groups / moe_router_group_topk.
      model.opt("--moe-router-num-groups", e.router_groups);
      model.opt("--moe-router-group-topk", e.router_group_topk);
    }
    model.flag("--moe-grouped-gemm");
    if (p.moe_dispatcher != MoeDispatcher::kAllToAll) {
      // The flex dispatcher on the plan's backend (Plan::moe_dispatcher;
      // resolve_plan holds its rules).
      model.opt("--moe-token-dispatcher-type", "flex");
      model.opt("--moe-flex-dispatcher-backend", to_string(p.moe_dispatcher));
    } else {
      model.opt("--moe-token-dispatcher-type", p.ep * p.etp > 1 ? "alltoall" : "allgather");
    }
  }
  model.opt("--seq-length", p.seq);
  model.opt("--max-position-embeddings", std::max(p.seq, m.seq_len));
  const bool rope = m.position_embedding == PositionEmbedding::kRope;
  model.opt("--position-embedding-type", rope ? "rope" : "learned_absolute");
  // Multi-token prediction depths (Plan::mtp_layers), on the last pipeline
  // stage with the loss (Megatron-Core's default placement); the loss
  // weight stays Megatron's default (--mtp-loss-scaling-factor 0.1).
  if (p.mtp_layers > 0) model.opt("--mtp-num-layers", p.mtp_layers);
  if (m.mlp == MlpKind::kSwiglu) model.flag("--swiglu");
  if (!m.bias) model.flag("--disable-bias-linear");
  model.opt("--normalization", m.bias ? "LayerNorm" : "RMSNorm");
  if (!m.tied_embeddings) model.flag("--untie-embeddings-and-output-weights");
  model.opt("--attention-dropout", m.dropout ? "0.1" : "0.0");
  model.opt("--hidden-dropout", m.dropout ? "0.1" : "0.0");
  // Megatron's --attention-backend (megatron/core/transformer/enums.py
  // AttnBackend): flash = the framework's default kernel, which is what
  // "auto" lets Transformer Engine pick (cuDNN on Hopper and later,
  // default_attention_kernel); fa2 and fa3 = TE's FlashAttention backend
  // (flash-attn 2, or flash-attn 3 on Hopper when its hopper build is
  // installed); cudnn = TE's FusedAttention.
  model.opt("--attention-backend", megatron_attention_backend(p));

  BashArgs parallel;
  parallel.opt("--tensor-model-parallel-size", p.tp);
  parallel.opt("--pipeline-model-parallel-size", p.pp);
  parallel.opt("--context-parallel-size", p.cp);
  // Plan::cp_comm: Megatron's default is p2p (arguments.py --cp-comm-type).
  if (p.cp > 1 && p.cp_comm == CpComm::kA2a) parallel.opt("--cp-comm-type", "a2a");
  if (p.sp && p.tp > 1) parallel.flag("--sequence-parallel");
  if (m.has_moe) {
    parallel.opt("--expert-model-parallel-size", p.ep);
    parallel.opt("--expert-tensor-parallel-size", p.etp);
  }
  switch (split) {
    case MegatronStageSplit::kEven:
      if (p.vp > 1) parallel.opt("--num-layers-per-virtual-pipeline-stage", L.stage_layers.front() / p.vp);
      break;
    case MegatronStageSplit::kFirstLast:
      parallel.opt("--decoder-first-pipeline-num-layers", L.stage_layers.front());
      parallel.opt("--decoder-last-pipeline-num-layers", L.stage_layers.back());
      // arguments.py: uneven stages take the chunk count.
      if (p.vp > 1) parallel.opt("--num-virtual-stages-per-pipeline-rank", p.vp);
      break;
    case MegatronStageSplit::kLayout:
      // The virtual pipeline degree follows from the layout's stage count.
      parallel.literal_opt("--pipeline-model-parallel-layout", megatron_pipeline_layout(L));
      break;
  }
  const int dp_cp = p.dp * p.cp;
  if (p.zero >= 1) parallel.flag("--use-distributed-optimizer");
  if (megatron_fsdp) {
    parallel.flag("--use-megatron-fsdp");
    parallel.opt("--data-parallel-sharding-strategy", p.zero == 2 ? "optim_grads" : "optim_grads_params");
    parallel.flag("--no-gradient-accumulation-fusion");
    parallel.opt("--ckpt-format", "fsdp_dtensor");
  }
  if (p.zero >= 1 && L.shard_degree < dp_cp) {
    parallel.opt("--num-distributed-optimizer-instances", dp_cp / L.shard_degree);
  }
  // The overlaps the plan was simulated with (framework/framework.h).
  const ExecutionProfile prof = execution_profile(p);
  if (dp_cp > 1 && prof.grad_reduce == GradReduce::kOverlapped) {
    parallel.flag("--overlap-grad-reduce");
    if (p.zero >= 1 && prof.overlap_param_gather) parallel.flag("--overlap-param-gather");
  }
  // Transformer Engine's userbuffers overlap of the TP collectives with the
  // GEMMs (needs --sequence-parallel, validate_args; TE's default config).
  if (prof.tp_comm_overlap) parallel.flag("--tp-comm-overlap");
  // The combined 1F1B schedule's all-to-all overlap (Plan::ep_overlap; the
  // alltoall dispatcher above, as TransformerConfig requires).
  if (p.ep_overlap) parallel.flag("--overlap-moe-expert-parallel-comm");
  if (p.delay_wgrad) parallel.flag("--delay-wgrad-compute");
  // Per-layer CUDA graphs (Plan::cuda_graph; resolve_plan holds
  // TransformerConfig's rules): Transformer Engine's graphs of the captured
  // modules, the whole layer with no module list (arguments.py
  // --cuda-graph-modules); graphs need TE's RNG tracker, which validate_args
  // would otherwise switch on with a warning.
  if (p.cuda_graph != 0) {
    parallel.opt("--cuda-graph-impl", "transformer_engine");
    if ((p.cuda_graph & kCgLayer) == 0)
      parallel.opt_list("--cuda-graph-modules", set_bit_names(p.cuda_graph, cuda_graph_module_names()));
    parallel.flag("--te-rng-tracker");
  }
  if (p.offload == Offload::kOptimizer) {
    parallel.flag("--optimizer-cpu-offload");
    parallel.flag("--use-precision-aware-optimizer");
  }
  if (p.moment_dtype == MomentDtype::kBf16) {
    // Transformer Engine's FusedAdam keeps exp_avg and exp_avg_sq in bf16
    // beside the fp32 master weights (megatron/core/optimizer_config.py:
    // the dtypes need --use-precision-aware-optimizer, which needs the
    // distributed optimizer: resolve_plan's zero >= 1).
    parallel.flag("--use-precision-aware-optimizer");
    parallel.opt("--exp-avg-dtype", "bf16");
    parallel.opt("--exp-avg-sq-dtype", "bf16");
  }

  BashArgs training;
  training.opt("--micro-batch-size", p.mbs);
  training.opt("--global-batch-size", p.gbs);
  if (p.precision == Precision::kBf16) training.flag("--bf16");
  if (p.precision == Precision::kFp16) training.flag("--fp16");
  if (p.precision == Precision::kBf16 && p.grad_dtype == GradDtype::kBf16) training.flag("--grad-reduce-in-bf16");
  if (p.fp8_recipe != Fp8Recipe::kNone) {
    // FP8 linear layers through Transformer Engine (--transformer-impl
    // transformer_engine, the default): E4M3 forward and E5M2 gradients
    // ("hybrid"), E4M3 throughout for block scaling, as Megatron's MoE
    // recipes do; delayed scaling with the amax history of
    // examples/llama/train_llama3_8b_h100_fp8.sh.
    const bool blocks = p.fp8_recipe == Fp8Recipe::kBlockwise || p.fp8_recipe == Fp8Recipe::kMxfp8;
    training.opt("--fp8-format", blocks ? "e4m3" : "hybrid");
    training.opt("--fp8-recipe", to_string(p.fp8_recipe));
    if (p.fp8_recipe == Fp8Recipe::kDelayed) {
      training.opt("--fp8-amax-history-len", 1024);
      training.opt("--fp8-amax-compute-algo", "max");
    }
    // FP8 compute weights, all-gathered in FP8 by the distributed optimizer.
    if (p.fp8_param_gather) training.flag("--fp8-param-gather");
  }
  if (p.recompute == Recompute::kFull && p.recompute_layers > 0) {
    // transformer_block.py _checkpointed_forward, method "block": the first
    // recompute_num_layers layers of each model chunk are checkpointed, the
    // rest run without.
    training.opt("--recompute-granularity", "full");
    training.opt("--recompute-method", "block");
    training.opt("--recompute-num-layers", p.recompute_layers);
  } else if (p.recompute == Recompute::kFull) {
    training.opt("--recompute-granularity", "full");
    training.opt("--recompute-method", "uniform");
    training.opt("--recompute-num-layers", 1);
  } else if (p.recompute == Recompute::kSelective) {
    training.opt("--recompute-granularity", "selective");
    if (p.recompute_modules != 0 && p.recompute_modules != kRcCoreAttn) {
      training.opt_list("--recompute-modules", set_bit_names(p.recompute_modules, recompute_module_names()));
    }
  }
  add_optimizer_schedule(&training);

  // NullTokenizer's vocabulary is --vocab-size + 1 (the end-of-document id).
  BashArgs data;
  data.flag("--mock-data");
  data.opt("--tokenizer-type", "NullTokenizer");
  data.opt("--vocab-size", m.vocab - 1);
  data.opt("--make-vocab-size-divisible-by", vocab_divisor(m.vocab, p.tp));

  std::string s = "#!/usr/bin/env bash\n";
  s += header_comment("# ", "Megatron-LM pretraining", m, c, L);
  s += launch_note(c, L, "Megatron-LM");
  s += "# Trains on mock data; replace DATA_ARGS with --data-path and a tokenizer for a\n# real run.\n";
  s += "set -euo pipefail\n\n";
  if (megatron_fsdp) {
    s += "# Megatron-FSDP asserts CUDA_DEVICE_MAX_CONNECTIONS is not 1 (arguments.py).\n";
    s += "unset CUDA_DEVICE_MAX_CONNECTIONS\n\n";
  } else if (p.tp > 1 || p.cp > 1) {
    s += "# Tensor and context parallelism need one hardware queue per GPU so that\n"
         "# communication and compute kernels keep their order (arguments.py checks it).\n";
    s += "export CUDA_DEVICE_MAX_CONNECTIONS=1\n\n";
  } else if (p.ep_overlap) {
    s += "# The all-to-all overlap runs communication beside compute on other streams, which\n"
         "# needs more than one hardware queue (arguments.py: a larger CUDA_DEVICE_MAX_CONNECTIONS).\n";
    s += "export CUDA_DEVICE_MAX_CONNECTIONS=32\n\n";
  }
  // Transformer Engine's FlashAttention backend takes FlashAttention-3 on
  // Hopper when flash-attn's hopper build is installed, else FlashAttention-2
  // (dot_product_attention/utils.py get_attention_backend); from TE v2.18
  // NVTE_FLASH_ATTN_V2 / NVTE_FLASH_ATTN_V3 switch each off.
  if (p.attention == Attention::kFlash && p.attention_kernel == AttentionKernel::kFa2) {
    s += "# attention fa2: keep Transformer Engine's flash backend on FlashAttention-2 even where\n"
         "# flash-attn's Hopper build (FlashAttention-3) is installed (TE v2.18+).\n";
    s += "export NVTE_FLASH_ATTN_V3=0\n\n";
  } else if (p.attention == Attention::kFlash && p.attention_kernel == AttentionKernel::kFa3) {
    s += "# attention fa3: needs flash-attn's Hopper build (flash_attn_3); without it Transformer\n"
         "# Engine would fall back to FlashAttention-2, which this switches off (TE v2.18+).\n";
    s += "export NVTE_FLASH_ATTN_V2=0\n\n";
  }
  if (p.moe_dispatcher == MoeDispatcher::kHybridEp) {
    // DeepEP's HybridEPBuffer reads its topology from the environment: how
    // many expert-parallel ranks share one NVLink domain (the group must be
    // whole domains: "should be divisible by the number of ranks per NVLink
    // domain") and whether that domain spans hosts (multi-node NVLink).
    const int per_domain = strided_group_placement(p.ep, std::max(1, p.etp), c).ranks_per_node;
    const bool mnnvl = c.host.gpus < c.gpus_per_node && per_domain * std::max(1, p.etp) > c.host.gpus;
    s += "# HybridEP: " + str(per_domain) + " expert-parallel ranks per NVLink domain" +
         (mnnvl ? ", which spans hosts (multi-node NVLink)" : "") + ".\n";
    s += "export NUM_OF_HYBRID_EP_RANKS_PER_NVLINK_DOMAIN=" + str(per_domain) + "\n";
    s += std::string("export USE_MNNVL=") + (mnnvl ? "1" : "0") + "\n\n";
  }
  s += torchrun_args(c, L).array("DISTRIBUTED_ARGS") + "\n";
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
  return accept(s);
}

// ---- DeepSpeed --------------------------------------------------------------

// The DeepSpeed config (docs/_pages/config-json.md).  train_batch_size =
// train_micro_batch_size_per_gpu * gradient_accumulation_steps * dp, where
// DeepSpeed's dp = world / (tp * pp).  `client_optimizer`: Megatron-DeepSpeed
// builds its own optimizer, so the "optimizer" block is left out there.
// DeepSpeed's AutoEP (deepspeed/module_inject/auto_ep*.py, DeepSpeed master
// edaa7221, 2026-08; docs/code-docs/source/autoep.rst): a config's
// "expert_parallel" section makes deepspeed.initialize replace the MoE blocks
// of a Hugging Face model with expert-parallel layers (grouped GEMMs, an
// all-to-all of every routed token copy, expert-data-parallel gradient
// reduction).  It recognises the model by preset, each for the config.json
// model types it names (auto_ep_presets/*.py PRESET_NAME, hf_model_types)
// and routing with the preset's score function.
struct AutoEpPreset {
  const char* preset;
  const char* hf_model_types[2];
  RouterScore score;
};
constexpr AutoEpPreset kAutoEpPresets[] = {
    {"mixtral", {"mixtral", nullptr}, RouterScore::kSoftmax},
    {"qwen3_moe", {"qwen3_moe", "qwen2_moe"}, RouterScore::kSoftmax},
    {"qwen3_5_moe", {"qwen3_5_moe_text", nullptr}, RouterScore::kSoftmax},
    {"deepseek_v2", {"deepseek_v2", nullptr}, RouterScore::kSoftmax},
    {"deepseek_v3", {"deepseek_v3", nullptr}, RouterScore::kSigmoid},
};

const AutoEpPreset* autoep_preset_of(const ModelSpec& m) {
  for (const AutoEpPreset& e : kAutoEpPresets) {
    for (const char* t : e.hf_model_types) {
      if (t != nullptr && m.hf_model_type == t) return &e;
    }
  }
  return nullptr;
}

// The MoE plans a DeepSpeed config cannot run through AutoEP, with the rule.
std::optional<std::string> autoep_refusal(const ModelSpec& m, const Plan& p) {
  const std::string use = " (use --to megatron)";
  if (m.hf_model_type.empty()) {
    return "DeepSpeed runs expert parallelism on a Hugging Face MoE model through AutoEP (config "
           "\"expert_parallel\"), which recognises the model by its config.json model_type; " + m.name +
           " names none (set \"hf_model_type\" in its model file)" + use;
  }
  const AutoEpPreset* e = autoep_preset_of(m);
  if (e == nullptr) {
    return "DeepSpeed's AutoEP has presets for the Hugging Face model types mixtral, qwen3_moe, qwen2_moe, "
           "qwen3_5_moe_text, deepseek_v2 and deepseek_v3 (auto_ep_presets); " + m.name + " is \"" +
           m.hf_model_type + "\"" + use;
  }
  if (p.tp > 1 || p.pp > 1) {
    // engine.py _configure_expert_parallel: tensor parallelism from an mpu
    // raises ("AutoEP does not currently support tensor model parallelism
    // from mpu"), and a Hugging Face model is no PipelineModule; AutoEP's
    // folding with AutoTP is not what this export writes.
    return "DeepSpeed's AutoEP runs a Hugging Face MoE model on DeepSpeed's engine, without Megatron-DeepSpeed's tensor "
           "or pipeline parallelism (\"AutoEP does not currently support tensor model parallelism from mpu\"); the "
           "plan has tp=" + str(p.tp) + " pp=" + str(p.pp) + ": use tp 1 and pp 1" + use;
  }
  if (p.etp > 1) {
    return "DeepSpeed's AutoEP reserves expert_tensor_parallel_size > 1 (\"not supported yet\", "
           "auto_ep_folding.py); use etp 1" + use;
  }
  if (m.moe.load_balancing == LoadBalancing::kAuxFree) {
    return "DeepSpeed's AutoEP does not run auxiliary-loss-free balancing (its " + std::string(e->preset) +
           " preset leaves the expert bias out and load_balance_coeff must be null), which " + m.name +
           " trains with" + use;
  }
  if (m.moe.capacity_factor > 0) {
    return "DeepSpeed's AutoEP routes dropless (token-choice top-k, no expert capacity); " + m.name +
           " drops tokens beyond a capacity factor" + use;
  }
  if (p.recompute == Recompute::kSelective) {
    // transformers' PreTrainedModel.gradient_checkpointing_enable wraps
    // whole decoder layers; module-level selective recompute is
    // Megatron-Core's (--recompute-modules).
    return "AutoEP trains a Hugging Face model, which recomputes whole decoder layers "
           "(gradient_checkpointing_enable), not selected modules; use recompute none or full" + use;
  }
  if (e->score != m.moe.router) {
    return "DeepSpeed's AutoEP " + std::string(e->preset) + " preset scores experts with " +
           (e->score == RouterScore::kSigmoid ? "a sigmoid" : "a softmax") + ", " + m.name + "'s router with " +
           (m.moe.router == RouterScore::kSigmoid ? "a sigmoid" : "a softmax") + " (check its hf_model_type)" + use;
  }
  return std::nullopt;
}

nlohmann::ordered_json deepspeed_config(const ModelSpec& m, const Layout& L, bool client_optimizer) {
  const Plan& p = L.plan;
  nlohmann::ordered_json j;
  j["train_batch_size"] = p.gbs;
  j["train_micro_batch_size_per_gpu"] = p.mbs;
  j["gradient_accumulation_steps"] = L.microbatches;
  j["gradient_clipping"] = 1.0;
  j["steps_per_print"] = 10;
  j["wall_clock_breakdown"] = false;
  if (!client_optimizer) {
    j["optimizer"] = {{"type", "AdamW"},
                      {"params", {{"lr", 3.0e-4}, {"betas", {0.9, 0.95}}, {"eps", 1.0e-8}, {"weight_decay", 0.1}}}};
  }
  if (p.precision == Precision::kBf16) {
    j["bf16"] = {{"enabled", true}};
    j["data_types"] = {{"grad_accum_dtype", p.grad_dtype == GradDtype::kBf16 ? "bf16" : "fp32"}};
  } else if (p.precision == Precision::kFp16) {
    // Dynamic loss scaling (loss_scale 0) from 2^16, as in the docs example.
    j["fp16"] = {{"enabled", true},     {"loss_scale", 0},  {"initial_scale_power", 16}, {"loss_scale_window", 1000},
                 {"hysteresis", 2},     {"min_loss_scale", 1}};
  }
  // The gradient reductions' dtype as simulated (reduction_dtype: the
  // model's 16-bit dtype), written out because the default moved between
  // releases (engine.py communication_data_type: fp32 from #2970 until #3370).
  if (p.precision != Precision::kFp32) {
    j["communication_data_type"] = reduction_dtype(p, execution_profile(p)) == GradDtype::kFp32 ? "fp32"
                                   : p.precision == Precision::kFp16                            ? "fp16"
                                                                                                : "bf16";
  }
  nlohmann::ordered_json z;
  z["stage"] = p.zero;
  if (p.zero >= 1) {
    // 5e8 elements per bucket: the documented defaults, written out;
    // overlap_comm as simulated (DeepSpeed's default: only for stage 3).
    z["overlap_comm"] = execution_profile(p).grad_reduce == GradReduce::kOverlapped;
    // Stage 3 as simulated: its gradient buckets all-reduced whole
    // (ExecutionProfile::grads_all_reduced: contiguous_gradients=false, the
    // stage-3 default before v0.5.0, takes buffered_reduce_fallback).
    z["contiguous_gradients"] = !(p.zero == 3 && execution_profile(p).grads_all_reduced);
    z["reduce_scatter"] = true;
    z["reduce_bucket_size"] = 500000000;
    if (p.zero <= 2) z["allgather_bucket_size"] = 500000000;
    if (p.zero == 3) {
      // The parameter coordinator as simulated (ExecutionProfile::zero3_knobs,
      // DeepSpeed's defaults written out).
      const Zero3CoordinatorKnobs& k = execution_profile(p).zero3_knobs;
      z["stage3_prefetch_bucket_size"] = static_cast<int64_t>(k.prefetch_bucket_numel);
      z["stage3_max_live_parameters"] = static_cast<int64_t>(k.max_live_numel);
      z["stage3_max_reuse_distance"] = static_cast<int64_t>(k.max_reuse_numel);
      z["stage3_param_persistence_threshold"] = static_cast<int64_t>(k.persistence_numel);
    }
  }
  if (p.offload != Offload::kNone) z["offload_optimizer"] = {{"device", "cpu"}, {"pin_memory", true}};
  if (p.offload == Offload::kParams) z["offload_param"] = {{"device", "cpu"}, {"pin_memory", true}};
  j["zero_optimization"] = z;
  if (m.has_moe) {
    // AutoEP as simulated: every rank of an ep-wide group of consecutive
    // ranks holds experts / ep experts (groups.py _create_expert_and_data_
    // parallel), grouped GEMMs (use_grouped_mm, its default, written out).
    const AutoEpPreset* e = autoep_preset_of(m);
    j["expert_parallel"] = {{"enabled", true},
                            {"autoep_size", p.ep},
                            {"preset_model", e != nullptr ? e->preset : ""},
                            {"use_grouped_mm", true}};
  }
  if (p.recompute != Recompute::kNone) {
    j["activation_checkpointing"] = {{"partition_activations", false},
                                     {"cpu_checkpointing", false},
                                     {"contiguous_memory_optimization", false},
                                     {"synchronize_checkpoint_boundary", false},
                                     {"profile", false}};
  }
  return j;
}

// Partial full recompute (the first N layers of each chunk) is Megatron's
// block method; the other frameworks' checkpointing takes every layer
// (DeepSpeed's --checkpoint-activations, the PyTorch script) or every N-th
// block of the model (torchtitan's selective_ac_option = "N"), not the
// first N of each pipeline stage.
std::optional<std::string> partial_recompute_refusal(const std::string& framework, const Plan& p,
                                                     const std::string& what) {
  if (p.recompute != Recompute::kFull || p.recompute_layers == 0) return std::nullopt;
  return framework + " " + what + "; recomputing the first " + std::to_string(p.recompute_layers) +
         " layers of each model chunk is Megatron's --recompute-method block (use --to megatron, or full recompute "
         "of every layer)";
}

ExportResult export_deepspeed(const ModelSpec& m, const ClusterSpec& c, const Layout& L, Render render) {
  const Plan& p = L.plan;
  if (auto r = async_refusal("DeepSpeed", p)) return refuse(*r);
  if (auto r = attention_kernel_refusal("Megatron-DeepSpeed", p, AttentionKernel::kFa2,
                                        "FlashAttention-2 (--use-flash-attn-v2)")) {
    return refuse(*r);
  }
  if (auto r = partial_recompute_refusal("this DeepSpeed export", p,
                                         "checkpoints every layer (--checkpoint-activations)")) {
    return refuse(*r);
  }
  if (m.has_moe) {
    // Megatron-DeepSpeed's GPT builds deepspeed.moe.layer.MoE in its own
    // model code; a plain config reaches a Hugging Face model's experts
    // through AutoEP only.
    if (auto r = autoep_refusal(m, p)) return refuse(*r);
  }
  if (p.fp8_recipe != Fp8Recipe::kNone) {
    return refuse(
        "DeepSpeed's config has no FP8 training (FP8 comes only from Transformer Engine layers in the model code), "
        "and Megatron-DeepSpeed's FP8 path takes delayed scaling only, without GQA, and is skipped by its pipeline "
        "engine; export FP8 plans with --to megatron");
  }
  if (p.cp > 1 && p.cp_comm != CpComm::kA2a) {
    return refuse(
        "DeepSpeed has no ring context parallelism; its sequence parallelism (DeepSpeed-Ulysses) splits attention "
        "heads with all-to-all instead (use --cp-comm-type a2a, or cp 1)");
  }
  if (p.cp > 1 && (p.tp > 1 || p.pp > 1 || m.has_moe)) {
    // Megatron-DeepSpeed megatron/core/parallel_state.py
    // initialize_model_parallel: "DeepSpeed's sequence parallel does not
    // work with tensor parallel or pipeline parallel"; an MoE plan is a
    // plain config for a Hugging Face model (AutoEP), without Ulysses.
    return refuse(m.has_moe ? "DeepSpeed-Ulysses comes from Megatron-DeepSpeed's GPT model, and an MoE plan exports as a "
                              "config for a Hugging Face model through AutoEP, which has none (use cp 1, or --to megatron)"
                            : "Megatron-DeepSpeed runs DeepSpeed-Ulysses only without tensor and pipeline parallelism "
                              "(\"DeepSpeed's sequence parallel does not work with tensor parallel or pipeline "
                              "parallel\"); the plan has tp=" + str(p.tp) + " pp=" + str(p.pp) + " (use tp 1 and pp 1)");
  }
  if (const std::string why = deepspeed_pipeline_zero_conflict(p); !why.empty()) return refuse(why);
  if (p.pp > 1 && p.schedule != Schedule::k1F1B) {
    return refuse(std::string("DeepSpeed's pipeline engine runs one 1F1B schedule (TrainSchedule) with one model chunk "
                              "per stage; it has no ") +
                  to_string(p.schedule) + " schedule (use schedule 1f1b)");
  }
  if (p.pp > 1 && !all_equal(L.stage_layers)) {
    return refuse(
        "Megatron-DeepSpeed splits transformer layers evenly over pipeline stages (partition_method "
        "type:transformer); it cannot place stage layers " +
        join(L.stage_layers, ","));
  }
  if (p.zero >= 1 && L.shard_degree < p.dp) {
    // MiCS ("mics_shard_size", ZeRO-3 only) was DeepSpeed's hybrid scheme;
    // current releases reject it (tests/unit/runtime/test_ds_config_dict.py).
    return refuse(
        "DeepSpeed shards ZeRO state over the whole data-parallel group; its hybrid sharding (MiCS, "
        "mics_shard_size) is rejected by current releases (use shard_group = dp)");
  }
  if (p.zero == 0 && p.precision == Precision::kBf16 && p.grad_dtype == GradDtype::kFp32) {
    // deepspeed/runtime/engine.py _do_optimizer_sanity_check: without ZeRO a
    // bf16 model accumulates gradients in bf16; any other mix raises
    // NotImplementedError("unsupported mix of model_dtype and grad_accum_dtype").
    return refuse(
        "DeepSpeed accumulates fp32 gradients of a bf16 model only under ZeRO (stage 0 raises \"unsupported mix of "
        "model_dtype and grad_accum_dtype\"); use zero 1, or grad_dtype bf16");
  }
  if (p.pp > 1 && p.offload != Offload::kNone && p.precision == Precision::kBf16) {
    return refuse(
        "DeepSpeed's pipeline engine fails with bf16 and optimizer offload (deepspeedai/DeepSpeed#3866); use fp16, "
        "pp 1 or no offload");
  }
  // Tensor, pipeline and Ulysses sequence parallelism come from
  // Megatron-DeepSpeed; a plain config describes data parallelism only.
  const bool model_parallel = p.tp > 1 || p.pp > 1 || p.cp > 1;
  if (!model_parallel) return render == Render::kCheckOnly ? accept("") : accept(deepspeed_config(m, L, false).dump(2) + "\n");

  // Tensor and pipeline parallelism: Megatron-DeepSpeed's pretrain_gpt.py.
  if (m.attention == AttentionKind::kMla || m.separate_head_dim()) {
    return refuse("DeepSpeed gets tensor and pipeline parallelism from Megatron-DeepSpeed, whose GPT model has no "
                  "multi-head latent attention, and this export writes no --kv-channels: heads must be hidden/heads "
                  "wide (use --to megatron, or tp 1 and pp 1 with your own model code)");
  }
  if (m.has_sliding_window) {
    return refuse(
        "DeepSpeed gets tensor and pipeline parallelism from Megatron-DeepSpeed, whose GPT model has no sliding-window "
        "attention (use --to megatron, or tp 1 and pp 1 with your own model code)");
  }
  if (m.position_embedding == PositionEmbedding::kAlibi) {
    return refuse(
        "DeepSpeed gets tensor and pipeline parallelism from Megatron-DeepSpeed, which has no ALiBi position "
        "embedding (rotary or learned positions)");
  }
  if (render == Render::kCheckOnly) return accept("");
  BashArgs model;
  model.opt("--num-layers", m.layers);
  model.opt("--hidden-size", m.hidden);
  model.opt("--ffn-hidden-size", m.ffn_hidden);
  model.opt("--num-attention-heads", m.heads);
  if (m.kv_heads != m.heads) model.opt("--num-key-value-heads", m.kv_heads);
  model.opt("--seq-length", p.seq);
  model.opt("--max-position-embeddings", std::max(p.seq, m.seq_len));
  if (m.position_embedding == PositionEmbedding::kRope) model.flag("--use-rotary-position-embeddings");
  if (m.mlp == MlpKind::kSwiglu) model.flag("--swiglu");
  if (!m.bias) model.flag("--disable-bias-linear");
  model.opt("--normalization", m.bias ? "layernorm" : "rmsnorm");
  if (!m.tied_embeddings) model.flag("--untie-embeddings-and-output-weights");
  model.opt("--attention-dropout", m.dropout ? "0.1" : "0.0");
  model.opt("--hidden-dropout", m.dropout ? "0.1" : "0.0");
  if (p.attention == Attention::kFlash) model.flag("--use-flash-attn-v2");

  BashArgs parallel;
  parallel.opt("--tensor-model-parallel-size", p.tp);
  parallel.opt("--pipeline-model-parallel-size", p.pp);
  // DeepSpeed-Ulysses (megatron/model/transformer.py: DistributedAttention
  // over the sequence-parallel group of ds_sequence_parallel_size
  // consecutive ranks), the plan's cp with its all-to-alls.
  if (p.cp > 1) parallel.opt("--ds-sequence-parallel-size", p.cp);
  if (p.pp == 1) parallel.flag("--no-pipeline-parallel");
  if (p.sp && p.tp > 1) parallel.flag("--sequence-parallel");
  parallel.flag("--deepspeed");
  parallel.opt("--deepspeed_config", "\"$DS_CONFIG\"");
  parallel.opt("--zero-stage", p.zero);
  if (p.offload != Offload::kNone) parallel.flag("--cpu-optimizer");

  BashArgs training;
  training.opt("--micro-batch-size", p.mbs);
  training.opt("--global-batch-size", p.gbs);
  if (p.precision == Precision::kBf16) training.flag("--bf16");
  if (p.precision == Precision::kFp16) training.flag("--fp16");
  if (p.recompute == Recompute::kFull) {
    training.flag("--deepspeed-activation-checkpointing");
    training.flag("--checkpoint-activations");
  } else if (p.recompute == Recompute::kSelective) {
    training.opt("--recompute-granularity", "selective");
  }
  add_optimizer_schedule(&training);

  BashArgs data;
  data.opt("--data-path", required_env("DATA_PATH", "set DATA_PATH to a preprocessed .bin/.idx prefix"));
  data.opt("--tokenizer-type", "NullTokenizer");
  data.opt("--vocab-size", m.vocab - 1);
  data.opt("--make-vocab-size-divisible-by", vocab_divisor(m.vocab, p.tp));

  std::string s = "#!/usr/bin/env bash\n";
  s += header_comment("# ", "DeepSpeed (Megatron-DeepSpeed) pretraining", m, c, L);
  s += "# DeepSpeed has tensor and pipeline parallelism through Megatron-DeepSpeed, so\n"
       "# this writes the DeepSpeed config and launches its pretrain_gpt.py.\n";
  s += launch_note(c, L, "Megatron-DeepSpeed");
  s += "# DATA_PATH: a dataset preprocessed with tools/preprocess_data.py; NullTokenizer\n"
       "# only fixes the vocabulary size, use your tokenizer for a real run.\n";
  s += "set -euo pipefail\n\n";
  if (p.tp > 1) {
    s += "# Megatron-DeepSpeed raises without it when sequence parallelism is on.\n";
    s += "export CUDA_DEVICE_MAX_CONNECTIONS=1\n\n";
  }
  s += "DS_CONFIG=\"${DS_CONFIG:-ds_config.json}\"\n";
  s += "cat >\"$DS_CONFIG\" <<'JSON'\n" + deepspeed_config(m, L, true).dump(2) + "\nJSON\n\n";
  s += torchrun_args(c, L).array("DISTRIBUTED_ARGS") + "\n";
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
  return accept(s);
}

// ---- torchtitan -------------------------------------------------------------

// The llama3 flavors torchtitan ships (torchtitan/models/llama3/__init__.py),
// with the ffn size its ffn_dim_multiplier / multiple_of give, and the
// vocabulary every one of them has (model/args.py TransformerModelArgs
// vocab_size = 128256; v0.2.2 takes it from there, not from the tokenizer):
// Llama 2 70B has the 70B flavor's layers but 32000 tokens.
struct TitanFlavor {
  const char* flavor;
  int64_t layers, hidden, heads, kv_heads, ffn_hidden, vocab;
};
constexpr TitanFlavor kTitanFlavors[] = {
    {"8B", 32, 4096, 32, 8, 14336, 128256},
    {"70B", 80, 8192, 64, 8, 28672, 128256},
    {"405B", 126, 16384, 128, 8, 53248, 128256},
};

// The MoE models torchtitan v0.2.2 ships (torchtitan/models/<name>/__init__.py
// flavors; tests/data/frameworks/torchtitan.json "moe_flavors"), matched to a
// model by shape, and what each train spec runs: pipelining_fn set
// (deepseek_v3 yes; qwen3 and gpt_oss None, torchtitan/train.py raises
// "Pipeline Parallel is enabled but <name> does not support pipelining"),
// context parallel (needs SDPA attention: qwen3 yes; deepseek_v3's 671B
// flavor uses flex attention and its args.py raises "Context Parallel only
// supports SDPA attention"; gpt_oss raises "CP support for gpt-oss model is
// still in progress").  Sliding windows: gpt_oss's even layers attend
// through a 128-token window (torchtitan/models/gpt_oss: sliding_window_size
// 128, use_sliding_attention = layer_id % 2 == 0), i.e. full_every 2.
// Group-limited routing: deepseek_v3's 671B flavor sets n_expert_groups 8,
// n_limited_groups 4 (torchtitan/models/deepseek_v3/__init__.py); the
// others route over every expert.
struct TitanMoeFlavor {
  const char* name;
  const char* flavor;
  int64_t layers, hidden, vocab, experts, top_k, expert_ffn_hidden, shared_experts, dense_layers;
  bool pipeline, context_parallel;
  int64_t window_tokens, window_full_every;  // 0, 0: no sliding window
  int64_t router_groups, router_group_topk;  // 0, 0: no group-limited routing
};
constexpr TitanMoeFlavor kTitanMoeFlavors[] = {
    {"deepseek_v3", "671B", 61, 7168, 129280, 256, 8, 2048, 1, 3, true, false, 0, 0, 8, 4},
    {"qwen3", "30B-A3B", 48, 2048, 151936, 128, 8, 768, 0, 0, false, true, 0, 0, 0, 0},
    {"qwen3", "235B-A22B", 94, 4096, 151936, 128, 8, 1536, 0, 0, false, true, 0, 0, 0, 0},
    {"gpt_oss", "120b", 36, 2880, 201088, 128, 4, 2880, 0, 0, false, false, 128, 2, 0, 0},
};

// What the torchtitan export writes in [model]: the train spec and flavor.
struct TitanModel {
  std::string name, flavor;
  bool moe = false;
};

// dp_shard x cp ranks hold one copy of sharded state; replicas across the
// rest (ZeRO 0: replicas of one).
std::pair<int, int> titan_dp_degrees(const Layout& L) {
  const Plan& p = L.plan;
  if (p.zero < 2) return {p.dp, 1};
  const int shard = L.shard_degree / p.cp;
  return {p.dp / shard, shard};
}

// The MoE plans torchtitan v0.2.2 (or, with `head`, torchtitan at head
// commit b5bcd76c) cannot run, with the rule; sets *out.  Head differs
// (torchtitan/models/{qwen3,deepseek_v3,gpt_oss}/__init__.py model_registry,
// config/configs.py, distributed/parallel_dims.py): every MoE spec pipelines
// (pipelining_fn=pipeline_llm); context parallelism needs FlexAttention,
// the qwen3 and deepseek_v3 default and gpt_oss's with attn_backend="flex";
// ParallelismConfig has no expert tensor parallelism (the expert mesh is
// pp x dp_replicate x efsdp x ep, efsdp = dp_shard*cp*tp/ep).
std::optional<std::string> titan_moe_refusal(const ModelSpec& m, const Layout& L, TitanModel* out, bool head) {
  const Plan& p = L.plan;
  const TitanMoeFlavor* f = nullptr;
  for (const TitanMoeFlavor& t : kTitanMoeFlavors) {
    if (t.layers == m.layers && t.hidden == m.hidden && t.vocab == m.vocab && t.experts == m.moe.experts &&
        t.top_k == m.moe.top_k && t.expert_ffn_hidden == m.moe.expert_ffn_hidden &&
        t.shared_experts == m.moe.shared_experts && t.dense_layers == m.moe.dense_layers &&
        t.window_tokens == (m.has_sliding_window ? m.sliding_window.tokens : 0) &&
        t.window_full_every == (m.has_sliding_window ? m.sliding_window.full_every : 0) &&
        t.router_groups == m.moe.router_groups && t.router_group_topk == m.moe.router_group_topk) {
      f = &t;
    }
  }
  if (f == nullptr) {
    return "torchtitan v0.2.2 trains MoE models through its own model code, and none of its MoE flavors "
           "(deepseek_v3 671B, qwen3 30B-A3B and 235B-A22B, gpt_oss 120b) has " + m.name +
           "'s shape, attention windows and routing groups (layers=" +
           str(m.layers) + ", hidden=" + str(m.hidden) + ", experts=" + str(m.moe.experts) + ", top_k=" +
           str(m.moe.top_k) + ", expert_ffn_hidden=" + str(m.moe.expert_ffn_hidden) + "; use --to megatron)";
  }
  if (m.moe.capacity_factor > 0) {
    // torchtitan's MoE routes dropless (torchtitan/models/moe: token-choice
    // top-k with no capacity).
    char cf[32];
    std::snprintf(cf, sizeof cf, "%g", m.moe.capacity_factor);
    return "torchtitan's MoE is dropless (no expert capacity); " + m.name + " drops tokens beyond capacity factor " +
           cf + " (use --to megatron, or a dropless model)";
  }
  out->name = f->name;
  out->flavor = f->flavor;
  out->moe = true;
  if (head && p.etp != 1) {
    return "torchtitan at head has no expert tensor parallelism (ParallelismConfig has no "
           "expert_tensor_parallel_degree; the expert mesh is dp_replicate x efsdp x ep): plan with --etp 1, or "
           "export to the v0.2.2 TOML (--to torchtitan)";
  }
  if (head && p.tp > 1 && p.ep == 1) {
    return "this export writes MoE plans with tp > 1 for torchtitan at head only with expert parallelism (etp 1, "
           "each ep rank taking the tp ranks' token shards, as ParallelDims borrows them); how head runs experts "
           "under tp without ep is not among the checked facts: give --ep > 1, or export to --to torchtitan";
  }
  if (!head && p.moe_dispatcher == MoeDispatcher::kHybridEp) {
    return "torchtitan v0.2.2's expert_parallel_comm_backend is \"standard\" or \"deepep\" (job_config.py); "
           "HybridEP is torchtitan head's (moe_comm_backend): export with --to torchtitan-py";
  }
  if (!head && p.moe_dispatcher == MoeDispatcher::kDeepEp && std::string(f->name) != "deepseek_v3") {
    return std::string("torchtitan v0.2.2 runs DeepEP in deepseek_v3's (and llama4's) parallelize only; ") + f->name +
           " ignores expert_parallel_comm_backend and would dispatch with the standard all-to-all: export with "
           "--to torchtitan-py (head: moe_comm_backend)";
  }
  if (p.pp > 1 && !f->pipeline && !head) {
    return std::string("torchtitan's ") + f->name + " train spec has no pipelining function (torchtitan/train.py: "
           "\"Pipeline Parallel is enabled but " + f->name + " does not support pipelining\"); use pp 1";
  }
  if (p.cp > 1 && !f->context_parallel && !head) {
    return std::string("torchtitan's ") + f->name + " " + f->flavor + " cannot run context parallelism (" +
           (std::string(f->name) == "gpt_oss" ? "\"CP support for gpt-oss model is still in progress\""
                                              : "\"Context Parallel only supports SDPA attention\" and the flavor uses "
                                                "flex attention") +
           "); use cp 1";
  }
  if (p.fp8_recipe != Fp8Recipe::kNone) {
    return std::string("torchtitan's float8 MoE training (quantize.grouped_mm.float8) is a prototype with its own "
                       "limits (no pipeline or context parallelism, no tensorwise TP for deepseek_v3) that this export "
                       "does not check; export the bf16 plan, or use --to megatron");
  }
  if (p.ep > 1 && p.etp != 1 && p.etp != p.tp) {
    return "torchtitan supports expert tensor parallelism equal to tp or 1 (ParallelDims: \"Currently we only "
           "support ETP=TP or ETP=1\"), not etp=" + str(p.etp) + " with tp=" + str(p.tp);
  }
  const auto [dp_replicate, dp_shard] = titan_dp_degrees(L);
  (void)dp_replicate;
  const int64_t borrowed = int64_t{dp_shard} * p.cp * p.tp;
  if (borrowed % (int64_t{p.ep} * p.etp) != 0) {
    return "torchtitan's expert parallelism borrows the dp_shard x cp x tp ranks (" + str(borrowed) +
           "; ParallelDims builds the (efsdp, ep, etp) mesh from them), which ep x etp = " + str(int64_t{p.ep} * p.etp) +
           " must divide; shard the data-parallel ranks with zero 3 or lower ep";
  }
  if (p.ep > 1 && p.etp == 1 && p.tp > 1 && (p.mbs * p.seq) % p.ep != 0) {
    return "torchtitan's expert parallelism with etp 1 and tp > 1 splits each micro-batch's tokens over the ep "
           "ranks (expert_parallel.py: \"Requires EP degree dividing batch size * seq len\"): mbs x seq = " +
           str(p.mbs * p.seq) + " is not a multiple of ep=" + str(p.ep);
  }
  return std::nullopt;
}

std::string toml_string(const std::string& s) {
  std::string out = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') out += '\\';
    out += ch;
  }
  return out + "\"";
}

// The llama3 train spec: a Llama-family model with one of its flavors'
// shape; sets *out.
std::optional<std::string> titan_llama_refusal(const ModelSpec& m, TitanModel* out) {
  std::vector<std::string> not_llama;
  if (m.mlp != MlpKind::kSwiglu) not_llama.push_back("a GeLU MLP");
  if (m.position_embedding == PositionEmbedding::kLearned) not_llama.push_back("learned positions");
  if (m.position_embedding == PositionEmbedding::kAlibi) not_llama.push_back("ALiBi positions");
  if (m.bias) not_llama.push_back("biases with LayerNorm");
  if (!not_llama.empty()) {
    std::string what = not_llama.front();
    for (size_t i = 1; i < not_llama.size(); ++i) what += (i + 1 == not_llama.size() ? " and " : ", ") + not_llama[i];
    return "torchtitan ships Llama-family models only (SwiGLU, RoPE, RMSNorm, no biases); " + m.name + " has " + what;
  }
  for (const TitanFlavor& t : kTitanFlavors) {
    if (t.layers == m.layers && t.hidden == m.hidden && t.heads == m.heads && t.kv_heads == m.kv_heads &&
        t.ffn_hidden == m.ffn_hidden && t.vocab == m.vocab) {
      out->name = "llama3";
      out->flavor = t.flavor;
      return std::nullopt;
    }
  }
  return "torchtitan picks the architecture by [model] name and flavor, and no llama3 flavor (8B, 70B, 405B) has " +
         m.name + "'s shape (layers=" + str(m.layers) + ", hidden=" + str(m.hidden) + ", heads=" + str(m.heads) +
         ", kv_heads=" + str(m.kv_heads) + ", ffn_hidden=" + str(m.ffn_hidden) + ", vocab=" + str(m.vocab) +
         "); add a flavor to torchtitan/models/llama3 first";
}

// The plans torchtitan (v0.2.2 and head alike) cannot run, with the rule;
// sets *out to the [model] name and flavor of the model (llama3, or one of
// the MoE train specs of v0.2.2).
std::optional<std::string> titan_refusal(const ModelSpec& m, const Layout& L, TitanModel* out, bool head) {
  const Plan& p = L.plan;
  if (auto r = async_refusal("torchtitan", p)) return r;
  if (auto r = fp8_refusal("torchtitan", p, false)) return r;
  if (auto r = partial_recompute_refusal(
          "torchtitan", p, "checkpoints every layer (mode = \"full\") or every N-th block (selective_ac_option = \"N\")")) {
    return r;
  }
  if (m.has_sliding_window && !m.has_moe) {
    return std::optional<std::string>("torchtitan's llama3 models attend to the whole causal prefix; " + m.name +
                                      " has sliding-window layers (use --to megatron)");
  }
  if (auto r = m.has_moe ? titan_moe_refusal(m, L, out, head) : titan_llama_refusal(m, out)) return r;
  if (p.zero == 1) {
    return std::optional<std::string>(
        "torchtitan has no optimizer-only sharding (ZeRO-1); its data parallelism is DDP "
        "(data_parallel_replicate_degree) or FSDP2 (data_parallel_shard_degree: ZeRO-2 with "
        "fsdp_reshard_after_forward = \"never\", ZeRO-3 otherwise)");
  }
  if (p.zero == 0 && p.cp > 1) {
    return std::optional<std::string>(
        "torchtitan shards parameters over the context-parallel ranks with FSDP2 whenever cp > 1, so zero 0 with "
        "cp > 1 cannot be expressed (use zero 3)");
  }
  if (p.zero == 0 && p.dp > 1 && (p.tp > 1 || p.pp > 1)) {
    return std::optional<std::string>(
        "torchtitan applies DDP (zero 0) only without other parallelism (\"DDP has not supported > 1D "
        "parallelism\"); use zero 2 or 3 to combine data parallelism with tp or pp");
  }
  if (p.zero >= 2 && L.shard_degree % p.cp != 0) {
    return std::optional<std::string>("torchtitan's FSDP2 shards over dp_shard x cp ranks, so the shard group must be a multiple of cp=" +
                  str(p.cp) + " (shard group " + str(L.shard_degree) + ")");
  }
  if (p.precision == Precision::kFp16) {
    return std::optional<std::string>(
        "torchtitan's training.mixed_precision_param is bfloat16 or float32; it has no fp16 (loss-scaled) training "
        "(use precision bf16)");
  }
  if (p.grad_dtype == GradDtype::kBf16) {
    return std::optional<std::string>("torchtitan reduces gradients in float32 only (training.mixed_precision_reduce)");
  }
  if (p.offload == Offload::kOptimizer) {
    return std::optional<std::string>(
        "torchtitan's training.enable_cpu_offload (FSDP2 CPUOffloadPolicy) moves parameters, gradients and optimizer "
        "state together; it has no optimizer-only offload (use offload params with zero 3)");
  }
  if (p.attention == Attention::kNaive) {
    return std::optional<std::string>(
        "torchtitan's llama3 attention is scaled_dot_product_attention (fused kernels); it has no unfused attention "
        "(use attention flash)");
  }
  if (auto r = attention_kernel_refusal("torchtitan", p, AttentionKernel::kFa2,
                                        "scaled_dot_product_attention, whose flash backend is FlashAttention-2")) {
    return r;
  }
  if (p.schedule == Schedule::kDualPipeV && p.ep > 1 && p.recompute != Recompute::kNone) {
    // torchtitan/distributed/dual_pipe_v.py get_dual_pipe_v_flag.
    return std::optional<std::string>(
        "torchtitan raises NotImplementedError for expert parallelism with DualPipeV and activation checkpointing "
        "(\"cannot be used together\"); use recompute none with dualpipe-v, or schedule zb-v");
  }
  if (zero_bubble_automatic(p.schedule)) {
    // torch/distributed/pipelining/schedules.py: ScheduleInterleavedZeroBubble
    // ("the ZB1P schedule in the paper") and ScheduleZBVZeroBubble are
    // multi-stage schedules, and torchtitan's pipeline_llm requires at least 2
    // stages per rank for them; there is no single-stage one.
    return std::optional<std::string>(std::string("torchtitan has no ") + to_string(p.schedule) +
                  " schedule with one stage per rank: its zero-bubble schedules (InterleavedZeroBubble, "
                  "ZBVZeroBubble) run 2 or more stages per rank (\"Multi-stage schedule requires at least 2 stages "
                  "per rank\"); use schedule zb-v, 1f1b or interleaved");
  }
  if (p.pp > 1 && p.schedule == Schedule::kNaive) {
    return std::optional<std::string>(
        "torchtitan has no naive pipeline schedule (one micro-batch in flight); pipeline_parallel_schedule takes "
        "GPipe, 1F1B, Interleaved1F1B and others (use schedule 1f1b)");
  }
  const int64_t divisor = int64_t{p.tp} * p.cp * 2;
  if (p.seq % divisor != 0) {
    return std::optional<std::string>("torchtitan needs seq_len=" + str(p.seq) + " divisible by tp*cp*2 = " + str(divisor) +
                  " (sequence parallelism and load-balanced context parallelism)");
  }
  return std::nullopt;
}


const char* titan_schedule(Schedule s) {
  if (s == Schedule::kGpipe) return "GPipe";
  if (s == Schedule::kInterleaved) return "Interleaved1F1B";
  if (s == Schedule::kZbv) return "ZBVZeroBubble";
  if (s == Schedule::kDualPipeV) return "DualPipeV";
  if (s == Schedule::kInterleavedZb) return "InterleavedZeroBubble";
  return "1F1B";
}

ExportResult export_torchtitan(const ModelSpec& m, const ClusterSpec& c, const Layout& L, Render render) {
  const Plan& p = L.plan;
  TitanModel model;
  if (auto r = titan_refusal(m, L, &model, false)) return refuse(*r);
  if (render == Render::kCheckOnly) return accept("");

  const auto [dp_replicate, dp_shard] = titan_dp_degrees(L);
  const char* schedule = titan_schedule(p.schedule);

  std::string s = header_comment("# ", "torchtitan v0.2.2 job config (TOML)", m, c, L);
  s += "# For torchtitan 0.2.0-0.2.2 (pip install torchtitan==0.2.2): the last releases that\n"
       "# read TOML job configs; 0.3 and later take a Python Trainer.Config (--module/--config):\n"
       "# trainplan export --to torchtitan-py writes that.\n";
  s += "# Run it from a torchtitan checkout";
  const LaunchShape h = launch_of(c, L);
  if (h.hosts == 1) {
    s += ":\n#   NGPU=" + str(L.gpus) + " CONFIG_FILE=<this file> ./run_train.sh\n";
  } else {
    s += " on each of the " + str(h.hosts) + " nodes:\n#   torchrun --nproc_per_node " + str(h.per_host) +
         " --nnodes " + str(h.hosts) +
         " --node_rank $NODE_RANK --rdzv_backend c10d \\\n#     --rdzv_endpoint $MASTER_ADDR:29500 -m "
         "torchtitan.train --job.config_file <this file>\n";
  }
  s += "# Set [model] hf_assets_path (the folder with the tokenizer) and\n"
       "# [training] dataset for your data.\n\n";
  s += "[job]\n";
  s += "dump_folder = \"./outputs\"\n";
  s += "description = " + toml_string(m.name + " on " + c.name + ", " + str(L.gpus) + " GPUs (trainplan export)") +
       "\n\n";
  s += "[model]\n";
  s += "name = " + toml_string(model.name) + "\n";
  s += "flavor = " + toml_string(model.flavor) + "\n";
  const bool fp8 = p.fp8_recipe != Fp8Recipe::kNone;
  if (fp8) {
    // torchao float8 linears (v0.2.x registers the converter as
    // "quantize.linear.float8"; v0.1's "float8" raises KeyError).
    s += "converters = [\"quantize.linear.float8\"]\n";
  }
  s += "\n";
  if (fp8) {
    s += "[quantize.linear.float8]\n";
    s += "# The output layer stays bf16, as simulated (torchtitan converts it by default).\n";
    s += "filter_fqns = [\"output\"]\n";
    if (p.fp8_recipe == Fp8Recipe::kRowwise) {
      s += "recipe_name = \"rowwise\"\n";
    } else if (dp_shard > 1) {
      s += "# Tensorwise scaling: FSDP2 all-gathers the linear weights in FP8.\n";
      s += "enable_fsdp_float8_all_gather = true\n";
      s += "precompute_float8_dynamic_scale_for_fsdp = true\n";
    }
    s += "\n";
  }
  if (model_compiled(p)) {
    s += "[compile]\n";
    if (p.compile) s += "# The model under torch.compile (--compile), its elementwise ops fused, as simulated.\n";
    if (fp8) s += "# torch.compile fuses the float8 scaling and casts (torchtitan docs/float8.md).\n";
    if (p.tp_comm_overlap) {
      s += "# Async TP needs the model compiled, 'model' among the components (the default)\n"
           "# (torchtitan/distributed/tensor_parallel.py maybe_enable_async_tp).\n";
    }
    s += "enable = true\n\n";
  }
  s += "[optimizer]\n";
  s += "name = \"AdamW\"\n";
  s += "lr = " + std::string(kLearningRate) + "\n";
  s += "eps = 1e-8\n";
  s += "weight_decay = 0.1\n\n";
  s += "[lr_scheduler]\n";
  s += "warmup_steps = " + str(kWarmupIters) + "\n\n";
  s += "[training]\n";
  if (p.pp > 1) {
    s += "# Per data-parallel rank per step: " + str(L.microbatches) + " pipeline micro-batches of " + str(p.mbs) +
         ".\n";
    s += "local_batch_size = " + str(p.mbs * L.microbatches) + "\n";
  } else {
    s += "# Per data-parallel rank per micro-step; global / (local * dp) = " + str(L.microbatches) +
         " accumulation steps.\n";
    s += "local_batch_size = " + str(p.mbs) + "\n";
  }
  s += "global_batch_size = " + str(p.gbs) + "\n";
  s += "seq_len = " + str(p.seq) + "\n";
  s += "max_norm = 1.0\n";
  s += "steps = " + str(kTrainIters) + "\n";
  s += std::string("mixed_precision_param = ") + (p.precision == Precision::kBf16 ? "\"bfloat16\"" : "\"float32\"") +
       "\n";
  s += "mixed_precision_reduce = \"float32\"\n";
  s += std::string("enable_cpu_offload = ") + (p.offload == Offload::kParams ? "true" : "false") + "\n\n";
  s += "[parallelism]\n";
  s += "data_parallel_replicate_degree = " + str(dp_replicate) + "\n";
  s += "data_parallel_shard_degree = " + str(dp_shard) + "\n";
  if (p.zero >= 2) {
    s += "# ZeRO-" + str(p.zero) + ": " +
         (p.zero == 2 ? "keep gathered parameters from forward to backward."
                      : "free gathered parameters after forward, gather again in backward.") +
         "\n";
    s += std::string("fsdp_reshard_after_forward = ") + (p.zero == 2 ? "\"never\"" : "\"always\"") + "\n";
  }
  s += "tensor_parallel_degree = " + str(p.tp) + "\n";
  if (p.tp > 1 && !p.sp) s += "# torchtitan always shards norms and dropout over the sequence (sp) with tp.\n";
  if (p.tp_comm_overlap) {
    s += "# Async TP: the sequence-parallel all-gathers and reduce-scatters micro-pipelined with\n"
         "# their GEMMs (torch SymmetricMemory), as simulated.\n";
  }
  s += std::string("enable_async_tensor_parallel = ") + (p.tp_comm_overlap ? "true" : "false") + "\n";
  s += "pipeline_parallel_degree = " + str(p.pp) + "\n";
  if (p.pp > 1) {
    s += "pipeline_parallel_schedule = " + toml_string(schedule) + "\n";
    s += "pipeline_parallel_microbatch_size = " + str(p.mbs) + "\n";
    // The modules of each virtual stage, in model order (stage v*pp + r is
    // chunk v of pipeline rank r; ZBVZeroBubble places them in a V, stages r
    // and 2pp-1-r on rank r, pipeline_module_split style "v"): the plan's
    // split exactly.  torchtitan's
    // pipeline_parallel_layers_per_stage would let it choose the split
    // itself, counting the embedding and the output as layers
    // (torchtitan/distributed/pipeline_parallel.py,
    // generate_llm_fqn_per_model_part), which is not the simulated plan.
    const std::vector<int> stages = virtual_stage_layers(L);
    s += "# Virtual stages of " + join(stages, ", ") + " transformer layers; the embedding on the first,\n"
         "# the final norm and output on the last.\n";
    if (p.schedule == Schedule::kDualPipeV && p.ep > 1) {
      s += "# DualPipeV overlaps one micro-batch's expert all-to-alls with the other's compute, as simulated.\n";
      s += "pipeline_parallel_expert_parallel_overlap = true\n";
    }
    if (v_shape(p.schedule)) {
      s += "# " + std::string(schedule) + " places them in a V: pipeline rank r runs stages r and " + str(2 * p.pp - 1) +
           " - r,\n# so rank 0 holds the first and the last.\n";
    }
    s += "module_fqns_per_model_part = [\n";
    int next = 0;
    for (size_t i = 0; i < stages.size(); ++i) {
      std::string part;
      auto add = [&part](const std::string& fqn) { part += (part.empty() ? "" : ", ") + toml_string(fqn); };
      if (i == 0) add("tok_embeddings");
      for (int l = 0; l < stages[i]; ++l) add("layers." + std::to_string(next++));
      if (i + 1 == stages.size()) {
        add("norm");
        add("output");
      }
      s += "  [" + part + "],\n";
    }
    s += "]\n";
  }
  s += "context_parallel_degree = " + str(p.cp) + "\n";
  if (model.moe) {
    s += "# The experts over ep ranks borrowed from dp_shard x cp" + std::string(p.etp == 1 ? " x tp" : "") +
         ", each expert split over etp (= 1 or tp).\n";
    s += "expert_parallel_degree = " + str(p.ep) + "\n";
    s += "expert_tensor_parallel_degree = " + str(p.etp) + "\n";
    if (p.moe_dispatcher == MoeDispatcher::kDeepEp) {
      s += "# Dispatch and combine through DeepEP's kernels, as simulated (each token once per destination).\n";
      s += "expert_parallel_comm_backend = \"deepep\"\n";
    }
  }
  s += "\n";
  s += "[activation_checkpoint]\n";
  if (p.recompute == Recompute::kFull) {
    s += "mode = \"full\"\n";
  } else if (p.recompute == Recompute::kSelective) {
    s += "mode = \"selective\"\n";
    s += "selective_ac_option = \"op\"\n";
  } else {
    s += "mode = \"none\"\n";
  }
  return accept(s);
}

// The Python Trainer.Config torchtitan's head (and 0.3) reads instead of
// TOML (torchtitan/config/manager.py ConfigManager._load_config: --module
// names a module, --config a zero-argument function in it returning
// Trainer.Config).  Field names and types are those of head commit b5bcd76c
// (tests/data/frameworks/torchtitan.json "head"); the same plans as the TOML
// export are accepted, plus one rule: head's float8 converter is not
// written (its Config fields are not part of the checked facts).
std::string py_bool(bool b);  // "True" / "False" (with the FSDP script below)

// Where torchtitan's own job configs point hf_assets_path (the tokenizer
// folder): torchtitan/models/*/config_registry.py at head.
std::string titan_hf_assets(const TitanModel& model) {
  if (model.name == "llama3") return "./assets/hf/Llama-3.1-" + model.flavor;
  if (model.name == "qwen3") return "./assets/hf/Qwen3-" + model.flavor;
  if (model.name == "deepseek_v3") return "./assets/hf/DeepSeek-V3.1-Base";
  return "./assets/hf/gpt-oss-" + model.flavor;
}

ExportResult export_torchtitan_py(const ModelSpec& m, const ClusterSpec& c, const Layout& L, Render render) {
  const Plan& p = L.plan;
  TitanModel model;
  if (auto r = titan_refusal(m, L, &model, true)) return refuse(*r);
  if (p.fp8_recipe != Fp8Recipe::kNone) {
    return refuse(
        "the torchtitan head export writes no float8 converter (Float8LinearConverter.Config at head is not among "
        "the checked config facts); export FP8 plans with --to torchtitan (v0.2.2 TOML)");
  }
  if (render == Render::kCheckOnly) return accept("");
  const auto [dp_replicate, dp_shard] = titan_dp_degrees(L);
  const std::string ind = "        ";
  std::string s = header_comment("# ", "torchtitan head Python config (Trainer.Config)", m, c, L);
  s += "# For torchtitan at head (commit b5bcd76c, 2026-08-21) and 0.3, which take a Python\n"
       "# Trainer.Config instead of TOML.  Save this file as trainplan_job.py on PYTHONPATH and\n";
  const LaunchShape h = launch_of(c, L);
  if (h.hosts == 1) {
    s += "# run from a torchtitan checkout:\n#   MODULE=trainplan_job CONFIG=trainplan_job NGPU=" + str(L.gpus) +
         " ./run_train.sh\n";
  } else {
    s += "# run on each of the " + str(h.hosts) + " nodes:\n#   torchrun --nproc_per_node " +
         str(h.per_host) + " --nnodes " + str(h.hosts) +
         " --node_rank $NODE_RANK --rdzv_backend c10d \\\n#     --rdzv_endpoint $MASTER_ADDR:29500 -m "
         "torchtitan.train --module trainplan_job --config trainplan_job\n";
  }
  s += "# Set hf_assets_path (the folder with the tokenizer) and the dataset (c4 here, as\n"
       "# torchtitan's llama3 configs) for your data.\n\n";
  s += "from torchtitan.components.data import ConcatThenSplitPackingConfig, GrainDataLoader\n";
  s += "from torchtitan.components.loss import CrossEntropyLoss\n";
  s += "from torchtitan.components.optimizer import LRSchedulersContainer, default_adamw\n";
  s += "from torchtitan.config import CompileConfig, ParallelismConfig, TrainingConfig\n";
  if (p.recompute != Recompute::kNone) {
    s += std::string("from torchtitan.distributed.activation_checkpoint import ") +
         (p.recompute == Recompute::kFull ? "FullAC" : "SelectiveAC") + "\n";
  }
  s += "from torchtitan.hf_datasets.text_datasets import DATASETS\n";
  s += "from torchtitan.models.common.config_utils import decoder_vocab_size\n";
  s += "from torchtitan.models." + model.name + " import model_registry\n";
  s += "from torchtitan.trainer import Trainer\n\n\n";
  s += "def trainplan_job() -> Trainer.Config:\n";
  // gpt_oss defaults to varlen attention, which context parallelism refuses
  // ("Context Parallel is not supported with ScaledDotProductAttention or
  // VarlenAttention. Use FlexAttention or disable CP.").
  const bool flex_attention = model.name == "gpt_oss" && p.cp > 1;
  // The plan's DeepEP / HybridEP dispatch (Plan::moe_dispatcher):
  // model_registry's moe_comm_backend (models/common/config_utils.py
  // make_token_dispatcher_config: standard | deepep | hybridep).
  const std::string comm_backend = p.moe_dispatcher != MoeDispatcher::kAllToAll
                                       ? std::string(", moe_comm_backend=\"") + to_string(p.moe_dispatcher) + "\""
                                       : std::string();
  s += "    model_spec = model_registry(\"" + model.flavor + "\"" + (flex_attention ? ", attn_backend=\"flex\"" : "") +
       comm_backend + ")\n";
  s += "    return Trainer.Config(\n";
  s += "        model_spec=model_spec,\n";
  // The base loss is abstract: the plain cross entropy simulated (one
  // logits GEMM, not the chunked wrapper of torchtitan's own configs).
  s += "        loss=CrossEntropyLoss.Config(global_vocab_size=decoder_vocab_size(model_spec)),\n";
  s += "        dataloader=GrainDataLoader.Config(dataset=ConcatThenSplitPackingConfig(dataset=DATASETS[\"c4\"])),\n";
  s += "        hf_assets_path=\"" + titan_hf_assets(model) + "\",\n";
  s += "        dump_folder=\"./outputs\",\n";
  s += "        optimizer=default_adamw(lr=" + std::string(kLearningRate) + "),\n";
  s += "        lr_scheduler=LRSchedulersContainer.Config(warmup_steps=" + str(kWarmupIters) + "),\n";
  s += "        training=TrainingConfig(\n";
  s += ind + "    # mbs " + str(p.mbs) + " x seq " + str(p.seq) + " tokens per micro-batch; gbs " + str(p.gbs) +
       " sequences per step.\n";
  s += ind + "    num_tokens_per_microbatch_per_dp_rank=" + str(p.mbs * p.seq) + ",\n";
  s += ind + "    num_tokens_per_train_step=" + str(p.gbs * p.seq) + ",\n";
  s += ind + "    max_context_length=" + str(p.seq) + ",\n";
  s += ind + "    max_norm=1.0,\n";
  s += ind + "    steps=" + str(kTrainIters) + ",\n";
  s += ind + "    mixed_precision_param=" + (p.precision == Precision::kBf16 ? "\"bfloat16\"" : "\"float32\"") + ",\n";
  s += ind + "    mixed_precision_reduce=\"float32\",\n";
  s += ind + "    enable_cpu_offload=" + py_bool(p.offload == Offload::kParams) + ",\n";
  // Trainer.Config._validate_cuda_graphs: pipeline parallelism, and expert
  // parallelism on the standard all-to-all (dynamic token counts), need
  // them off.
  s += ind + "    disable_cuda_graphs=" + py_bool(p.pp > 1 || p.ep > 1) + ",\n";
  s += ind + "),\n";
  s += "        parallelism=ParallelismConfig(\n";
  s += ind + "    data_parallel_replicate_degree=" + str(dp_replicate) + ",\n";
  s += ind + "    data_parallel_shard_degree=" + str(dp_shard) + ",\n";
  if (p.zero >= 2) {
    s += ind + "    # ZeRO-" + str(p.zero) + ": " +
         (p.zero == 2 ? "keep gathered parameters from forward to backward."
                      : "free gathered parameters after forward, gather again in backward.") +
         "\n";
    s += ind + "    fsdp_reshard_after_forward=" + (p.zero == 2 ? "\"never\"" : "\"always\"") + ",\n";
  }
  s += ind + "    tensor_parallel_degree=" + str(p.tp) + ",\n";
  s += ind + "    enable_sequence_parallel=" + py_bool(p.tp > 1 ? p.sp : true) + ",\n";
  s += ind + "    pipeline_parallel_degree=" + str(p.pp) + ",\n";
  if (p.pp > 1) {
    s += ind + "    pipeline_parallel_schedule=\"" + std::string(titan_schedule(p.schedule)) + "\",\n";
    s += ind + "    num_pp_microbatches=" + str(L.microbatches) + ",\n";
    // The plan's split exactly (see export_torchtitan); head names the
    // output module lm_head.
    const std::vector<int> stages = virtual_stage_layers(L);
    s += ind + "    # Virtual stages of " + join(stages, ", ") + " transformer layers.\n";
    s += ind + "    module_fqns_per_model_part=[\n";
    int next = 0;
    for (size_t i = 0; i < stages.size(); ++i) {
      std::string part;
      auto add = [&part](const std::string& fqn) { part += (part.empty() ? "\"" : ", \"") + fqn + "\""; };
      if (i == 0) add("tok_embeddings");
      for (int l = 0; l < stages[i]; ++l) add("layers." + std::to_string(next++));
      if (i + 1 == stages.size()) {
        add("norm");
        add("lm_head");
      }
      s += ind + "        [" + part + "],\n";
    }
    s += ind + "    ],\n";
  }
  s += ind + "    context_parallel_degree=" + str(p.cp) + ",\n";
  if (model.moe) {
    s += ind + "    # The experts over ep ranks borrowed from dp_shard x cp x tp (no expert TP at head).\n";
    s += ind + "    expert_parallel_degree=" + str(p.ep) + ",\n";
  }
  s += ind + "),\n";
  if (p.tp_comm_overlap) {
    s += "        # Async TP (micro-pipelined sequence-parallel collectives, as simulated) needs the\n"
         "        # model compiled (CompileConfig.__post_init__).\n"
         "        compile=CompileConfig(enable=True, enable_async_tensor_parallel=True),\n";
  } else if (model_compiled(p)) {
    // (FP8 plans, compiled by implication, are refused above: no float8
    // converter at head.)
    s += "        # The model under torch.compile (--compile), its elementwise ops fused, as simulated.\n";
    s += "        compile=CompileConfig(enable=True),\n";
  } else {
    s += "        compile=CompileConfig(enable=False),\n";
  }
  if (p.recompute == Recompute::kFull) {
    s += "        activation_checkpoint=FullAC.Config(),\n";
  } else if (p.recompute == Recompute::kSelective) {
    s += "        activation_checkpoint=SelectiveAC.Config(),\n";
  } else {
    s += "        activation_checkpoint=None,\n";
  }
  s += "    )\n";
  return accept(s);
}

// ---- PyTorch FSDP2 / DDP ----------------------------------------------------

// The body of the FSDP script; the constants above it come from the plan.
constexpr const char* kFsdpScriptBody = R"PY(DTYPES = {
    "bf16": torch.bfloat16,
    "fp16": torch.float16,
    "fp32": torch.float32,
}
FSDP = ZERO >= 2 and DP > 1


def rope_table(seq, head_dim, theta=10000.0):
    inv = 1.0 / (theta ** (torch.arange(0, head_dim, 2, dtype=torch.float32) / head_dim))
    angles = torch.outer(torch.arange(seq, dtype=torch.float32), inv)
    return torch.stack((angles.cos(), angles.sin()))  # [2, seq, head_dim / 2]


def apply_rope(x, table):
    # x: [batch, seq, heads, head_dim]; rotates the pairs (x[2i], x[2i+1]).
    cos = table[0].to(x.dtype)[None, :, None, :]
    sin = table[1].to(x.dtype)[None, :, None, :]
    x1, x2 = x[..., 0::2], x[..., 1::2]
    return torch.stack((x1 * cos - x2 * sin, x1 * sin + x2 * cos), dim=-1).flatten(-2)


def make_norm():
    return nn.LayerNorm(HIDDEN, bias=True) if BIAS else nn.RMSNorm(HIDDEN, eps=1e-5)


def core_attention(q, k, v, training):
    # q, k, v: [batch, heads, seq, head_dim]; causal.
    p = DROPOUT if training else 0.0
    if ATTENTION == "flash":
        return F.scaled_dot_product_attention(q, k, v, dropout_p=p, is_causal=True)
    scores = (q @ k.transpose(-2, -1)) / math.sqrt(q.shape[-1])
    causal = torch.ones(q.shape[-2], k.shape[-2], dtype=torch.bool, device=q.device).tril()
    probs = F.dropout(scores.masked_fill(~causal, float("-inf")).softmax(dim=-1), p)
    return probs @ v


class Attention(nn.Module):
    def __init__(self):
        super().__init__()
        self.head_dim = HIDDEN // HEADS
        self.wq = nn.Linear(HIDDEN, HEADS * self.head_dim, bias=BIAS)
        self.wk = nn.Linear(HIDDEN, KV_HEADS * self.head_dim, bias=BIAS)
        self.wv = nn.Linear(HIDDEN, KV_HEADS * self.head_dim, bias=BIAS)
        self.wo = nn.Linear(HEADS * self.head_dim, HIDDEN, bias=BIAS)

    def forward(self, x, rope):
        b, s, _ = x.shape
        # -1: the heads of this tensor-parallel rank.
        q = self.wq(x).view(b, s, -1, self.head_dim)
        k = self.wk(x).view(b, s, -1, self.head_dim)
        v = self.wv(x).view(b, s, -1, self.head_dim)
        if POSITIONS == "rope":
            q, k = apply_rope(q, rope[:, :s]), apply_rope(k, rope[:, :s])
        q, k, v = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
        if q.shape[1] != k.shape[1]:  # grouped-query attention
            k = k.repeat_interleave(q.shape[1] // k.shape[1], dim=1)
            v = v.repeat_interleave(q.shape[1] // v.shape[1], dim=1)
        if RECOMPUTE == "selective":
            o = checkpoint(core_attention, q, k, v, self.training, use_reentrant=False)
        else:
            o = core_attention(q, k, v, self.training)
        return self.wo(o.transpose(1, 2).reshape(b, s, -1))


class FeedForward(nn.Module):
    def __init__(self):
        super().__init__()
        self.w1 = nn.Linear(HIDDEN, FFN_HIDDEN, bias=BIAS)
        self.w2 = nn.Linear(FFN_HIDDEN, HIDDEN, bias=BIAS)
        self.w3 = nn.Linear(HIDDEN, FFN_HIDDEN, bias=BIAS) if MLP == "swiglu" else None

    def forward(self, x):
        if self.w3 is not None:
            return self.w2(F.silu(self.w1(x)) * self.w3(x))
        return self.w2(F.gelu(self.w1(x)))


class Block(nn.Module):
    def __init__(self):
        super().__init__()
        self.attention_norm = make_norm()
        self.attention = Attention()
        self.ffn_norm = make_norm()
        self.feed_forward = FeedForward()

    def forward(self, x, rope):
        # Full recompute inside the block, so that FSDP2 has gathered the
        # block's parameters when backward replays its forward.
        if RECOMPUTE == "full":
            return checkpoint(self.layer, x, rope, use_reentrant=False)
        return self.layer(x, rope)

    def layer(self, x, rope):
        h = x + F.dropout(self.attention(self.attention_norm(x), rope), DROPOUT, self.training)
        return h + F.dropout(self.feed_forward(self.ffn_norm(h)), DROPOUT, self.training)


class Transformer(nn.Module):
    def __init__(self):
        super().__init__()
        self.tok_embeddings = nn.Embedding(VOCAB, HIDDEN)
        self.pos_embeddings = nn.Embedding(SEQ, HIDDEN) if POSITIONS == "learned" else None
        self.layers = nn.ModuleList(Block() for _ in range(LAYERS))
        self.norm = make_norm()
        self.output = nn.Linear(HIDDEN, VOCAB, bias=False)
        if TIED_EMBEDDINGS:
            self.output.weight = self.tok_embeddings.weight
        self.register_buffer("rope", torch.empty(2, SEQ, HIDDEN // HEADS // 2), persistent=False)

    @torch.no_grad()
    def init_weights(self):
        for m in self.modules():
            if isinstance(m, (nn.Linear, nn.Embedding)):
                nn.init.normal_(m.weight, std=0.02)
            if isinstance(m, nn.Linear) and m.bias is not None:
                nn.init.zeros_(m.bias)
            if isinstance(m, (nn.LayerNorm, nn.RMSNorm)):
                nn.init.ones_(m.weight)
                if getattr(m, "bias", None) is not None:
                    nn.init.zeros_(m.bias)
        self.rope.copy_(rope_table(SEQ, HIDDEN // HEADS))

    def forward(self, tokens):
        x = self.tok_embeddings(tokens)
        if self.pos_embeddings is not None:
            x = x + self.pos_embeddings(torch.arange(tokens.shape[1], device=tokens.device))
        x = F.dropout(x, DROPOUT, self.training)
        for block in self.layers:
            x = block(x, self.rope)
        return self.output(self.norm(x))


def apply_tensor_parallel(model, tp_mesh):
    # torchtitan's Llama plan (torchtitan/models/llama3/infra/parallelize.py):
    # column-parallel in, row-parallel out; with SP the norms and residuals
    # are sharded over the sequence between the blocks.
    from torch.distributed.tensor import Replicate, Shard
    from torch.distributed.tensor.parallel import (
        ColwiseParallel,
        PrepareModuleInput,
        RowwiseParallel,
        SequenceParallel,
        parallelize_module,
    )

    between = Shard(1) if SP else Replicate()
    plan = {
        "tok_embeddings": RowwiseParallel(input_layouts=Replicate(), output_layouts=between),
        "output": ColwiseParallel(input_layouts=between, output_layouts=Replicate()),
    }
    if SP:
        plan["norm"] = SequenceParallel()
    parallelize_module(model, tp_mesh, plan)
    for block in model.layers:
        plan = {
            "attention.wq": ColwiseParallel(),
            "attention.wk": ColwiseParallel(),
            "attention.wv": ColwiseParallel(),
            "attention.wo": RowwiseParallel(output_layouts=between),
            "feed_forward.w1": ColwiseParallel(),
            "feed_forward.w2": RowwiseParallel(output_layouts=between),
        }
        if MLP == "swiglu":
            plan["feed_forward.w3"] = ColwiseParallel()
        if SP:
            plan["attention_norm"] = SequenceParallel()
            plan["attention"] = PrepareModuleInput(
                input_layouts=(Shard(1), None), desired_input_layouts=(Replicate(), None)
            )
            plan["ffn_norm"] = SequenceParallel()
            plan["feed_forward"] = PrepareModuleInput(
                input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)
            )
        parallelize_module(block, tp_mesh, plan)


def main():
    dist.init_process_group("nccl")
    rank, world = dist.get_rank(), dist.get_world_size()
    local_rank = int(os.environ["LOCAL_RANK"])
    torch.cuda.set_device(local_rank)
    if world != DP * TP:
        raise SystemExit(f"this plan needs {DP * TP} processes, torchrun started {world}")
    torch.manual_seed(0)

    # Ranks: tp innermost (one node's NVLink), then the data-parallel dims.
    if FSDP:
        dims = [("dp_replicate", REPLICATE), ("dp_shard", SHARD), ("tp", TP)]
    else:
        dims = [("dp", DP), ("tp", TP)]
    dims = [(name, size) for name, size in dims if size > 1 or name == "dp_shard"]
    mesh = None
    if dims:
        mesh = init_device_mesh(
            "cuda", tuple(size for _, size in dims), mesh_dim_names=tuple(name for name, _ in dims)
        )

    with torch.device("meta"):
        model = Transformer()
    if TP > 1:
        apply_tensor_parallel(model, mesh["tp"])
    if FP8_RECIPE:
        # torchao float8 training: every linear of the blocks in FP8, the
        # output layer in bf16 (as simulated), before fully_shard so that
        # FSDP2 all-gathers tensorwise weights in FP8.
        from torchao.float8 import Float8LinearConfig, convert_to_float8_training

        if FP8_RECIPE == "tensorwise":
            fp8_config = Float8LinearConfig(enable_fsdp_float8_all_gather=FSDP)
        else:
            fp8_config = Float8LinearConfig.from_recipe_name(FP8_RECIPE)
        convert_to_float8_training(
            model,
            config=fp8_config,
            module_filter_fn=lambda mod, fqn: fqn != "output" and mod.in_features % 16 == 0 and mod.out_features % 16 == 0,
        )
    if COMPILE:
        # Each block compiled in place (nn.Module.compile keeps the parameter
        # names), before sharding, as torchtitan's apply_compile does.
        for block in model.layers:
            block.compile()
    dtype = DTYPES[PRECISION]
    if FSDP:
        from torch.distributed.fsdp import CPUOffloadPolicy, MixedPrecisionPolicy, fully_shard

        dp_names = tuple(name for name, _ in dims if name.startswith("dp"))
        # A 2-D mesh is HSDP: replicate over dim 0, shard over dim 1.
        dp_mesh = mesh[dp_names[0]] if len(dp_names) == 1 else mesh[dp_names]
        kwargs = {
            "mesh": dp_mesh,
            "reshard_after_forward": ZERO == 3,  # False keeps gathered parameters: ZeRO-2
            "mp_policy": MixedPrecisionPolicy(param_dtype=dtype, reduce_dtype=DTYPES[REDUCE_DTYPE]),
        }
        if CPU_OFFLOAD:
            kwargs["offload_policy"] = CPUOffloadPolicy(pin_memory=True)
        for block in model.layers:
            fully_shard(block, **kwargs)
        fully_shard(model, **kwargs)
    model.to_empty(device="cpu" if CPU_OFFLOAD else "cuda")
    model.init_weights()
    if CPU_OFFLOAD:
        model.rope = model.rope.cuda()
    model.train()

    if not FSDP and DP > 1:
        from torch.nn.parallel import DistributedDataParallel as DDP

        model = DDP(model, device_ids=[local_rank], bucket_cap_mb=25)
    DDP_WRAPPED = not FSDP and DP > 1
    params = [p for p in model.parameters() if p.requires_grad]
    if ZERO == 1 and DP > 1:
        from torch.distributed.optim import ZeroRedundancyOptimizer

        optimizer = ZeroRedundancyOptimizer(
            params, optimizer_class=torch.optim.AdamW, lr=LR, betas=(0.9, 0.95), weight_decay=0.1
        )
    else:
        optimizer = torch.optim.AdamW(params, lr=LR, betas=(0.9, 0.95), weight_decay=0.1)
    # FSDP2 casts through mp_policy; DDP and single replicas use autocast.
    use_autocast = not FSDP and PRECISION != "fp32"
    scaler = torch.amp.GradScaler("cuda") if PRECISION == "fp16" else None

    # Tensor-parallel ranks of one replica read the same batch.
    generator = torch.Generator(device="cuda").manual_seed(1234 + rank // TP)
    for step in range(STEPS):
        for micro in range(ACCUM):
            tokens = torch.randint(0, VOCAB, (MBS, SEQ + 1), device="cuda", generator=generator)
            last = micro == ACCUM - 1
            # As trainplan simulated the plan: DDP all-reduces once per step,
            # skipping its all-reduce inside no_sync() until the last
            # micro-batch; FSDP2 keeps gradient sync on and reduce-scatters
            # every micro-batch into its sharded fp32 gradients (turning it
            # off with set_requires_gradient_sync(False) would hold the whole
            # unsharded gradient in fp32 until the last micro-batch).
            sync = model.no_sync() if DDP_WRAPPED and not last else contextlib.nullcontext()
            with sync:
                with torch.autocast("cuda", dtype=dtype, enabled=use_autocast):
                    logits = model(tokens[:, :-1])
                loss = F.cross_entropy(logits.flatten(0, 1).float(), tokens[:, 1:].flatten()) / ACCUM
                (scaler.scale(loss) if scaler else loss).backward()
        if scaler:
            scaler.unscale_(optimizer)
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        if scaler:
            scaler.step(optimizer)
            scaler.update()
        else:
            optimizer.step()
        if FP8_RECIPE == "tensorwise" and FSDP:
            # One all-reduce of the weights' amaxes for the next FP8 all-gather.
            from torchao.float8 import precompute_float8_dynamic_scale_for_fsdp

            precompute_float8_dynamic_scale_for_fsdp(model)
        optimizer.zero_grad(set_to_none=True)
        if rank == 0:
            print(f"step {step + 1}/{STEPS} loss {loss.item() * ACCUM:.4f}", flush=True)
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
)PY";

std::string py_bool(bool b) { return b ? "True" : "False"; }

ExportResult export_fsdp(const ModelSpec& m, const ClusterSpec& c, const Layout& L, Render render) {
  const Plan& p = L.plan;
  if (auto r = async_refusal("PyTorch DDP/FSDP2", p)) return refuse(*r);
  if (auto r = attention_kernel_refusal("the PyTorch script", p, AttentionKernel::kFa2,
                                        "scaled_dot_product_attention, whose flash backend is FlashAttention-2")) {
    return refuse(*r);
  }
  if (auto r = partial_recompute_refusal("the PyTorch script", p, "checkpoints every block")) return refuse(*r);
  if (m.has_moe || m.attention == AttentionKind::kMla || m.separate_head_dim() || m.has_sliding_window) {
    return refuse("the PyTorch script's model is a dense GPT/Llama block with head_dim = hidden/heads attending to the "
                  "whole causal prefix; it has no experts, latent attention, separate head_dim or sliding window (use "
                  "--to megatron)");
  }
  if (p.pp > 1) {
    return refuse(
        "PyTorch FSDP2 and DDP have no pipeline schedule; export pipeline-parallel plans with --to torchtitan "
        "(torch.distributed.pipelining) or --to megatron");
  }
  if (p.cp > 1) {
    return refuse(
        "the FSDP2 script has no context parallelism; export context-parallel plans with --to torchtitan or --to "
        "megatron");
  }
  if (m.position_embedding == PositionEmbedding::kAlibi) {
    return refuse("the FSDP2 script's model has RoPE or learned position embeddings, not ALiBi");
  }
  const bool fsdp = p.zero >= 2 && p.dp > 1;
  if (p.tp > 1 && p.dp > 1 && p.zero < 2) {
    return refuse(
        "PyTorch composes tensor parallelism (DTensor) with FSDP2's fully_shard, not with DistributedDataParallel or "
        "ZeroRedundancyOptimizer (use zero 2 or 3 with tp > 1)");
  }
  if (p.tp > 1 && (m.position_embedding != PositionEmbedding::kRope || m.tied_embeddings)) {
    return refuse(
        "the FSDP2 script applies tensor parallelism with torchtitan's Llama plan, which needs RoPE and untied "
        "embeddings; " +
        m.name + " has " + (m.tied_embeddings && m.position_embedding == PositionEmbedding::kRope
                                   ? "tied embeddings"
                                   : "learned positions") +
        " (use --to megatron)");
  }
  if (p.zero == 1 && L.shard_degree < p.dp) {
    return refuse(
        "torch.distributed.optim.ZeroRedundancyOptimizer shards over the whole data-parallel group; it has no "
        "hybrid shard groups (use zero 3 for hybrid sharding)");
  }
  if (p.offload == Offload::kOptimizer) {
    return refuse(
        "FSDP2's CPUOffloadPolicy moves parameters, gradients and optimizer state together; it has no "
        "optimizer-only offload (use offload params with zero 3)");
  }
  if (p.precision == Precision::kFp16 && (fsdp || p.tp > 1)) {
    return refuse(
        "the FSDP2 script scales fp16 losses with torch.amp.GradScaler only for plain tensors (DDP, no tensor "
        "parallelism); use precision bf16");
  }
  if (p.grad_dtype == GradDtype::kBf16 && !fsdp) {
    return refuse(
        "DDP under torch.autocast keeps fp32 parameters and gradients; bf16 gradient reduction needs FSDP2's "
        "MixedPrecisionPolicy(reduce_dtype=bfloat16) (use zero 2 or 3)");
  }
  if (auto r = fp8_refusal("the FSDP2 script", p, false)) return refuse(*r);
  if (p.fp8_recipe != Fp8Recipe::kNone && p.tp > 1) {
    return refuse(
        "the FSDP2 script converts linears to torchao float8 without tensor parallelism (FP8 TP needs "
        "Float8ColwiseParallel/Float8RowwiseParallel plans); export FP8 with tp > 1 with --to torchtitan");
  }
  if (render == Render::kCheckOnly) return accept("");

  const int shard = fsdp ? L.shard_degree : 1;
  std::string s = "#!/usr/bin/env python3\n";
  s += header_comment("# ", "PyTorch training script", m, c, L);
  // One node runs as is; on several, each node must say who it is (a
  // default would make every node rank 0 on localhost).
  const LaunchShape h = launch_of(c, L);
  const std::string node_rank =
      h.hosts == 1 ? "\"${NODE_RANK:-0}\""
                   : required_env("NODE_RANK", "set NODE_RANK to the index of this node, 0.." + str(h.hosts - 1));
  const std::string master =
      h.hosts == 1 ? "\"${MASTER_ADDR:-localhost}\""
                   : required_env("MASTER_ADDR", "set MASTER_ADDR to the address of node 0");
  s += "# Launch on every node (NODE_RANK 0..N-1, MASTER_ADDR = node 0):\n";
  s += "#   torchrun --nproc_per_node " + str(h.per_host) + " --nnodes " + str(h.hosts) +
       " --node_rank " + node_rank + " \\\n#     --master_addr " + master +
       " --master_port \"${MASTER_PORT:-29500}\" <this file>\n";
  s += "# Needs PyTorch >= 2.6 (torch.distributed.fsdp.fully_shard). Trains on random\n"
       "# tokens: replace torch.randint in main() with your data loader.\n";
  s += "import contextlib\nimport math\nimport os\n\n";
  s += "import torch\nimport torch.distributed as dist\nimport torch.nn as nn\nimport torch.nn.functional as F\n";
  s += "from torch.distributed.device_mesh import init_device_mesh\nfrom torch.utils.checkpoint import checkpoint\n\n";
  s += "# Model: " + m.name + ".\n";
  s += "LAYERS = " + str(m.layers) + "\n";
  s += "HIDDEN = " + str(m.hidden) + "\n";
  s += "HEADS = " + str(m.heads) + "\n";
  s += "KV_HEADS = " + str(m.kv_heads) + "\n";
  s += "FFN_HIDDEN = " + str(m.ffn_hidden) + "\n";
  s += "VOCAB = " + str(m.vocab) + "\n";
  s += std::string("MLP = ") + (m.mlp == MlpKind::kSwiglu ? "\"swiglu\"" : "\"gelu\"") +
       "  # \"swiglu\" (SiLU-gated, w1/w3) or \"gelu\"\n";
  s += "BIAS = " + py_bool(m.bias) + "  # linear biases; LayerNorm when True, RMSNorm when False\n";
  s += "TIED_EMBEDDINGS = " + py_bool(m.tied_embeddings) + "\n";
  s += std::string("POSITIONS = ") + (m.position_embedding == PositionEmbedding::kRope ? "\"rope\"" : "\"learned\"") +
       "\n";
  s += std::string("DROPOUT = ") + (m.dropout ? "0.1" : "0.0") + "\n\n";
  s += "# Plan.\n";
  s += "TP = " + str(p.tp) + "\n";
  s += "DP = " + str(p.dp) + "\n";
  s += "ZERO = " + str(p.zero) +
       "  # 0: DDP, 1: DDP + ZeroRedundancyOptimizer, 2/3: FSDP2 fully_shard (ZeRO-2 keeps gathered params)\n";
  s += "SHARD = " + str(shard) + "  # ranks one copy of sharded state is spread over\n";
  s += "REPLICATE = " + str(fsdp ? p.dp / shard : 1) + "  # copies of the sharded state (HSDP when > 1)\n";
  s += "SP = " + py_bool(p.sp && p.tp > 1) + "  # sequence parallelism with TP\n";
  s += "MBS = " + str(p.mbs) + "\n";
  s += "GBS = " + str(p.gbs) + "\n";
  s += "SEQ = " + str(p.seq) + "\n";
  s += "ACCUM = " + str(L.microbatches) + "  # GBS // (MBS * DP) micro-batches per step\n";
  s += std::string("RECOMPUTE = \"") + to_string(p.recompute) +
       "\"  # \"none\", \"selective\" (core attention) or \"full\" (whole blocks)\n";
  s += std::string("PRECISION = \"") + to_string(p.precision) + "\"\n";
  s += "FP8_RECIPE = " +
       (p.fp8_recipe == Fp8Recipe::kNone ? std::string("None") : "\"" + std::string(to_string(p.fp8_recipe)) + "\"") +
       "  # torchao float8 linears: None, \"tensorwise\" or \"rowwise\"\n";
  s += std::string("REDUCE_DTYPE = \"") + to_string(p.grad_dtype) + "\"  # FSDP2 gradient reduction\n";
  s += std::string("ATTENTION = \"") + to_string(p.attention) +
       "\"  # \"flash\" (scaled_dot_product_attention) or \"naive\" (softmax(QK^T)V)\n";
  s += "COMPILE = " + py_bool(model_compiled(p)) + "  # torch.compile each block (elementwise ops fused)\n";
  s += "CPU_OFFLOAD = " + py_bool(p.offload == Offload::kParams) +
       "  # FSDP2 CPUOffloadPolicy: parameters, gradients, optimizer on the host\n";
  s += "STEPS = int(os.environ.get(\"STEPS\", \"10\"))\n";
  s += "LR = " + std::string(kLearningRate) + "\n\n";
  s += kFsdpScriptBody;
  return accept(s);
}

}  // namespace

std::optional<ExportTarget> export_target_of(Framework f) {
  switch (f) {
    case Framework::kGeneric: return std::nullopt;
    case Framework::kMegatronLM:
    case Framework::kMegatronCore: return ExportTarget::kMegatron;
    case Framework::kDeepSpeed: return ExportTarget::kDeepSpeed;
    case Framework::kTorchtitan: return ExportTarget::kTorchtitan;
    case Framework::kPytorch: return ExportTarget::kFsdp;
  }
  return std::nullopt;
}

namespace {

ExportResult export_or_check(ExportTarget target, const ModelSpec& model, const ClusterSpec& cluster,
                             const Layout& layout, Render render) {
  TRAINPLAN_CHECK(layout.feasible, "export_plan needs a feasible layout");
  TRAINPLAN_CHECK(static_cast<int>(layout.stage_layers.size()) == layout.plan.pp,
                  "export_plan needs one layer count per pipeline stage");
  // A plan simulated for one framework exports to that framework only.
  const Framework fw = layout.plan.framework;
  // torchtitan's two formats run the same framework.
  const ExportTarget runs = target == ExportTarget::kTorchtitanPy ? ExportTarget::kTorchtitan : target;
  if (fw != Framework::kGeneric && export_target_of(fw) != runs) {
    return refuse(std::string("the plan was simulated for ") + to_string(fw) +
                  ", whose execution (overlaps, buckets, gathers) another framework does not reproduce; export it with "
                  "--to " + to_string(*export_target_of(fw)) + ", or simulate it for this target's framework");
  }
  if (!launch_shape(cluster, layout.gpus)) {
    return refuse(std::to_string(layout.gpus) + " GPUs do not split evenly over hosts of " +
                  std::to_string(cluster.host.gpus) + " GPUs, and torchrun starts the same number of processes on "
                  "every host (--nproc-per-node); use a GPU count that does");
  }
  if (layout.plan.schedule == Schedule::kDualPipe) {
    // deepseek-ai/DualPipe ships its schedule as a library of its own
    // (dualpipe.DualPipe); Megatron-Core, DeepSpeed and torchtitan have none,
    // and PyTorch's pipelining has only ScheduleDualPipeV.
    return refuse("no framework export runs the bidirectional dualpipe schedule (DeepSeek's deepseek-ai/DualPipe "
                  "library; PyTorch and torchtitan have only DualPipeV); its ranks run the very order of dualpipe-v on "
                  "pp/2 ranks with twice the data-parallel replicas: export that plan (--schedule dualpipe-v --pp " +
                  std::to_string(layout.plan.pp / 2) + " --dp " + std::to_string(layout.plan.dp * 2) +
                  ") to torchtitan");
  }
  if (layout.plan.mtp_layers > 0 && runs != ExportTarget::kMegatron) {
    // torchtitan's DeepSeek-V3 and the FSDP2 script build no MTP module;
    // DeepSpeed's Megatron-DeepSpeed neither.
    return refuse("the plan trains " + std::to_string(layout.plan.mtp_layers) +
                  " multi-token prediction layer(s) (--mtp-layers), which only Megatron-Core builds "
                  "(--mtp-num-layers); export it with --to megatron, or plan without them");
  }
  if (layout.plan.moment_dtype != MomentDtype::kFp32 && runs != ExportTarget::kMegatron) {
    // DeepSpeed's, torchtitan's and PyTorch's Adam keep the moments in the
    // parameters' fp32 dtype; Megatron-Core's precision-aware optimizer
    // (Transformer Engine's FusedAdam) stores them in bf16.
    return refuse("the plan keeps Adam's moments in bf16 (--moment-dtype bf16), which only Megatron-Core's "
                  "precision-aware optimizer does (--exp-avg-dtype/--exp-avg-sq-dtype bf16); export it with --to "
                  "megatron, or plan with --moment-dtype fp32");
  }
  if (layout.plan.ep_overlap && runs != ExportTarget::kMegatron) {
    return refuse("the plan runs Megatron-Core's combined 1F1B schedule, each forward merged with another "
                  "micro-batch's backward to hide the expert-parallel all-to-alls (--ep-overlap), which only "
                  "Megatron-Core runs; export it with --to megatron");
  }
  if (layout.plan.cuda_graph != 0 && runs != ExportTarget::kMegatron) {
    return refuse("the plan captures its layers in CUDA graphs (--cuda-graph " +
                  cuda_graph_modules_name(layout.plan.cuda_graph) +
                  "), as Megatron-Core runs them (--cuda-graph-impl transformer_engine); export it with --to megatron");
  }
  if (layout.plan.cp > 1 && layout.plan.cp_comm == CpComm::kA2a && runs != ExportTarget::kMegatron &&
      runs != ExportTarget::kDeepSpeed) {
    // torchtitan's context parallelism is ring attention (context_parallel,
    // rotating K/V by all-gather or all-to-all); the FSDP2 script has none.
    return refuse("the plan runs context parallelism as Ulysses all-to-alls (--cp-comm-type a2a), which "
                  "Megatron-Core (--cp-comm-type a2a) and Megatron-DeepSpeed (--ds-sequence-parallel-size) run; "
                  "export it with --to megatron or --to deepspeed, or plan with --cp-comm-type p2p");
  }
  if (layout.plan.moe_pad_to_capacity && runs != ExportTarget::kMegatron) {
    return refuse("the plan pads every expert's input to its capacity (--moe-pad-to-capacity), which only "
                  "Megatron-Core runs (--moe-pad-expert-input-to-capacity); export it with --to megatron");
  }
  if (layout.plan.moe_dispatcher != MoeDispatcher::kAllToAll && runs != ExportTarget::kMegatron &&
      runs != ExportTarget::kTorchtitan) {
    return refuse(std::string("the plan dispatches its tokens with ") + to_string(layout.plan.moe_dispatcher) +
                  " (--moe-dispatcher), which Megatron-Core (flex dispatcher) and torchtitan run; export it with "
                  "--to megatron or a torchtitan target, or plan with --moe-dispatcher alltoall");
  }
  if (layout.plan.tp_comm_overlap && runs != ExportTarget::kMegatron && runs != ExportTarget::kTorchtitan) {
    return refuse("the plan overlaps tensor-parallel communication with the GEMMs (--tp-comm-overlap), which "
                  "Megatron-Core (Transformer Engine userbuffers) and torchtitan (async TP) run; export it with "
                  "--to megatron or a torchtitan target");
  }
  switch (target) {
    case ExportTarget::kMegatron: return export_megatron(model, cluster, layout, render);
    case ExportTarget::kDeepSpeed: return export_deepspeed(model, cluster, layout, render);
    case ExportTarget::kTorchtitan: return export_torchtitan(model, cluster, layout, render);
    case ExportTarget::kFsdp: return export_fsdp(model, cluster, layout, render);
    case ExportTarget::kTorchtitanPy: return export_torchtitan_py(model, cluster, layout, render);
  }
  return refuse("unknown export target");
}

}  // namespace

ExportResult export_plan(ExportTarget target, const ModelSpec& model, const ClusterSpec& cluster,
                         const Layout& layout) {
  return export_or_check(target, model, cluster, layout, Render::kText);
}

std::optional<std::string> framework_refusal(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout) {
  const std::optional<ExportTarget> target = export_target_of(layout.plan.framework);
  if (!target) return std::nullopt;
  const ExportResult r = export_or_check(*target, model, cluster, layout, Render::kCheckOnly);
  if (r.ok) return std::nullopt;
  return r.reason;
}

}  // namespace trainplan
