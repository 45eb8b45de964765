// What the exporters share (planner/export/*_export.cc): the training
// hyper-parameters the plan does not fix, the result helpers, the summary
// lines each output starts with, the launcher (torchrun) arguments, and the
// rules and spellings more than one framework's export needs.  Internal to
// planner/export; exporters.h is the module's interface.
#ifndef TRAINPLAN_PLANNER_EXPORT_EXPORT_COMMON_H_
#define TRAINPLAN_PLANNER_EXPORT_EXPORT_COMMON_H_

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "planner/export/exporters.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {
namespace export_detail {

// Training hyper-parameters the plan does not fix.  Written out so that the
// configs run as they are; the values are the Llama 3 / GPT-3 recipe ones
// (AdamW beta2 0.95, weight decay 0.1, clip 1.0, init std 0.02).
constexpr const char* kLearningRate = "3.0e-4";

constexpr const char* kMinLearningRate = "3.0e-5";

constexpr int kTrainIters = 1000;

constexpr int kWarmupIters = 100;

std::string str(int64_t v);

// Whether an exporter writes its text or only applies its framework's rules
// (framework_refusal: the search asks it of every plan).
enum class Render { kText, kCheckOnly };

ExportResult refuse(const std::string& reason);

ExportResult accept(std::string text);

std::string join(const std::vector<int>& v, const char* sep);

bool all_equal(const std::vector<int>& v);

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

MegatronStageSplit megatron_stage_split(const Layout& L);

// Megatron-Core's pipeline layout string of the plan's model chunks, as
// chunk_layers placed them (chunk c of rank r is virtual stage c * pp + r),
// with the MTP depths beside the loss: Megatron's validate_layer_layout
// wants as many m as --mtp-num-layers (pipeline_layout.h).
std::string megatron_pipeline_layout(const Layout& L);

// One line with every plan field, for the header comment of each output.
std::string plan_summary(const Layout& L);

// The hosts the job starts on, one launcher (torchrun) each: what torchrun
// calls nodes.  export_plan refuses a plan without an even split first.
LaunchShape launch_of(const ClusterSpec& c, const Layout& L);

// "llama3-8b on dgx-h100: 8 GPUs (1 node x 8)"; where a node of the cluster
// is an NVLink domain of several hosts, "kimi-k2 on gb200-nvl72: 256 GPUs
// (64 nodes x 4, in 4 NVLink domains of 64)".
std::string job_summary(const ModelSpec& m, const ClusterSpec& c, const Layout& L);

std::string header_comment(const char* prefix, const std::string& what, const ModelSpec& m, const ClusterSpec& c,
                           const Layout& L);

// Async data parallelism (parameter servers) is modelled by trainplan but
// offered by none of the targets.
std::optional<std::string> async_refusal(const std::string& framework, const Plan& p);

// FP8 plans are simulated either as Transformer Engine's FP8 (Megatron) or
// as torchao's float8 (FSDP2: torchtitan, the PyTorch script); see
// fp8_transformer_engine().  A framework exports only the kind it runs.
std::optional<std::string> fp8_refusal(const std::string& framework, const Plan& p, bool runs_te);

const char* megatron_attention_backend(const Plan& p);

// A named attention kernel (Plan::attention_kernel) a framework's export
// cannot select: `runs` is the one it runs (its default_attention_kernel
// with attention flash), `how` says how it runs it.
std::optional<std::string> attention_kernel_refusal(const std::string& framework, const Plan& p, AttentionKernel runs,
                                                    const std::string& how);

// Megatron's vocabulary is the tokenizer's, padded to a multiple of
// make_vocab_size_divisible_by * tp (_vocab_size_with_padding).  Returns the
// largest power of two up to 128 that keeps the model's vocabulary unpadded.
// REQUIRES: vocab % tp == 0 (resolve_plan checks it).
int64_t vocab_divisor(int64_t vocab, int tp);

// Layers of each virtual pipeline stage in model order, as the simulator
// placed them (chunk_layers: virtual_stage gives each rank's chunks their
// place, the loop of Megatron and torch.distributed.pipelining or zb-v's V).
std::vector<int> virtual_stage_layers(const Layout& L);

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
void add_optimizer_schedule(BashArgs* training);

// A double-quoted bash expansion that stops the script with `message` when
// `var` is unset: "${VAR:?message}".  Inside "${...}" bash parses quotes and
// expansions in the message (an apostrophe opens a quote and the script no
// longer parses), so the message is restricted to characters that are
// literal there.
std::string required_env(const std::string& var, const std::string& message);

// torchrun's rendezvous arguments.  One node runs as is; on several nodes
// NODE_RANK and MASTER_ADDR must be set on each, and bash stops with the
// message if they are not.
BashArgs torchrun_args(const ClusterSpec& c, const Layout& L);

std::string launch_note(const ClusterSpec& c, const Layout& L, const char* checkout);

// The end of a Megatron pretrain_gpt.py launch script, Megatron-LM's and
// Megatron-DeepSpeed's alike: the torchrun, model, parallel, training and
// data argument arrays and the torchrun line that passes them (and "$@").
std::string pretrain_gpt_launch(const ClusterSpec& c, const Layout& L, const BashArgs& model, const BashArgs& parallel,
                                const BashArgs& training, const BashArgs& data);

// Partial full recompute (the first N layers of each chunk) is Megatron's
// block method; the other frameworks' checkpointing takes every layer
// (DeepSpeed's --checkpoint-activations, the PyTorch script) or every N-th
// block of the model (torchtitan's selective_ac_option = "N"), not the
// first N of each pipeline stage.
std::optional<std::string> partial_recompute_refusal(const std::string& framework, const Plan& p,
                                                     const std::string& what);

// A Python literal: "True" / "False" (the FSDP2 script, torchtitan-py).
std::string py_bool(bool b);

// The exporters, one per target (export_or_check in exporters.cc applies the
// rules every target shares first).  With Render::kCheckOnly they apply
// their framework's rules and write nothing.
ExportResult export_megatron(const ModelSpec& m, const ClusterSpec& c, const Layout& L, Render render);
ExportResult export_deepspeed(const ModelSpec& m, const ClusterSpec& c, const Layout& L, Render render);
ExportResult export_torchtitan(const ModelSpec& m, const ClusterSpec& c, const Layout& L, Render render);
ExportResult export_torchtitan_py(const ModelSpec& m, const ClusterSpec& c, const Layout& L, Render render);
ExportResult export_fsdp(const ModelSpec& m, const ClusterSpec& c, const Layout& L, Render render);

}  // namespace export_detail
}  // namespace trainplan

#endif  // TRAINPLAN_PLANNER_EXPORT_EXPORT_COMMON_H_
