// The DeepSpeed export: a DeepSpeed config (docs/_pages/config-json.md) and
// its launcher, or for tensor and pipeline parallelism a Megatron-DeepSpeed
// script (deepspeed/runtime/pipe/engine.py, Megatron-DeepSpeed
// megatron/arguments.py).
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

namespace {

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

}  // namespace

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
  s += pretrain_gpt_launch(c, L, model, parallel, training, data);
  return accept(s);
}

}  // namespace export_detail
}  // namespace trainplan
