// The shape of a transformer model, as read from models/*.json.
//
// Invariants after load_model(): every count is > 0, heads % kv_heads == 0,
// hidden % heads == 0 unless head_dim is given.  Defaults: kv_heads = heads,
// head_dim = hidden/heads, ffn_hidden = 4*hidden,
// bias = (mlp == gelu), position_embedding = learned for gelu models and rope
// for swiglu models (GPT/BLOOM-style vs Llama-style), norm follows bias
// (layernorm with bias, rmsnorm without).
#ifndef TRAINPLAN_SIM_SPEC_MODEL_H_
#define TRAINPLAN_SIM_SPEC_MODEL_H_

#include <cstdint>
#include <string>
#include <vector>

namespace trainplan {

// The largest values a model file may give (docs/input-limits.md).  The
// largest published dense models have 126 layers, hidden 25600, 128 heads,
// a 256k vocabulary and 1M-token contexts.
constexpr int64_t kMaxLayers = 1 << 14;
constexpr int64_t kMaxHidden = 1 << 18;
constexpr int64_t kMaxHeads = 1 << 14;
constexpr int64_t kMaxVocab = 1 << 24;
constexpr int64_t kMaxSeqLen = 1 << 24;

enum class MlpKind { kGelu, kSwiglu };
enum class PositionEmbedding { kLearned, kRope, kAlibi };
// Multi-head (incl. grouped-query) attention, or DeepSeek's multi-head latent
// attention (DeepSeek-V2, arXiv:2405.04434, Sec. 2.1): queries and keys/values
// go through low-rank latent projections; each head's query and key are a
// non-positional part plus a shared rotary part.
enum class AttentionKind { kMha, kMla };
enum class RouterScore { kSoftmax, kSigmoid };
enum class LoadBalancing { kAuxLoss, kAuxFree };

// The largest expert count and top-k a model file may give (docs/input-limits.md;
// the largest published MoE models route over 256 experts, top-8).
constexpr int64_t kMaxExperts = 1 << 14;

// Multi-head latent attention dimensions (DeepSeek-V3 config.json names).
// q_lora_rank 0: queries are projected directly (DeepSeek-V2-Lite).
struct MlaSpec {
  int64_t q_lora_rank = 0;
  int64_t kv_lora_rank = 0;
  int64_t qk_nope_head_dim = 0;
  int64_t qk_rope_head_dim = 0;
  int64_t v_head_dim = 0;
};

// A Mixture-of-Experts feed-forward block (Shazeer et al. 2017; GShard;
// Switch; Mixtral; DeepSeekMoE).  Each MoE layer routes every token to
// top_k of `experts` SwiGLU/GeLU experts of width expert_ffn_hidden, plus
// `shared_experts` experts every token passes through.  The first
// `dense_layers` layers keep the dense MLP (ffn_hidden); after them every
// layer_freq-th layer is an MoE layer, counting from the first one after
// them (Megatron's --moe-layer-freq N marks layer i when i % N == 0).
struct MoeSpec {
  int64_t experts = 0;
  int64_t top_k = 0;
  int64_t expert_ffn_hidden = 0;
  int64_t shared_experts = 0;
  int64_t shared_ffn_hidden = 0;  // per shared expert (default expert_ffn_hidden)
  int64_t dense_layers = 0;
  int64_t layer_freq = 1;
  double capacity_factor = 0;     // 0: dropless
  RouterScore router = RouterScore::kSoftmax;
  LoadBalancing load_balancing = LoadBalancing::kAuxLoss;
  // Group-limited routing (DeepSeek-V2 device-limited, DeepSeek-V3
  // node-limited; Megatron-Core --moe-router-num-groups / --moe-router-group-topk):
  // the experts form router_groups equal groups of consecutive experts and a
  // token picks its top_k among the router_group_topk groups it selects.
  // 0: no groups (every expert is a candidate).
  int64_t router_groups = 0;
  int64_t router_group_topk = 0;
};

// Sliding-window (local) attention (Mistral 7B v0.1; Gemma 2/3; gpt-oss):
// a windowed layer's query attends to itself and the `tokens` - 1 keys
// before it (Hugging Face `sliding_window`; Megatron-Core --window-size
// (tokens - 1, 0), Megatron-Bridge gpt_oss_bridge.py).  full_every K > 0:
// every K-th layer (layer i, 0-based, when (i + 1) % K == 0) attends to the
// whole causal prefix (Megatron-Core --window-attn-skip-freq K: one full
// layer after K - 1 windowed ones, gpt-oss K = 2, Gemma 3 K = 6); 0: every
// layer is windowed.
struct SlidingWindowSpec {
  int64_t tokens = 0;
  int64_t full_every = 0;
};

struct ModelSpec {
  std::string name;
  int64_t layers = 0;
  int64_t hidden = 0;
  int64_t heads = 0;
  int64_t kv_heads = 0;
  int64_t ffn_hidden = 0;
  int64_t vocab = 0;
  int64_t seq_len = 0;  // default training sequence length
  MlpKind mlp = MlpKind::kGelu;
  bool tied_embeddings = false;
  bool dropout = true;  // whether dropout masks are saved for backward
  bool bias = true;     // linear layers and norms carry biases
  PositionEmbedding position_embedding = PositionEmbedding::kLearned;
  int64_t head_dim_given = 0;  // 0: hidden / heads
  AttentionKind attention = AttentionKind::kMha;
  MlaSpec mla;                 // attention == kMla
  bool has_moe = false;
  MoeSpec moe;                 // has_moe
  bool has_sliding_window = false;
  SlidingWindowSpec sliding_window;  // has_sliding_window
  // The Hugging Face implementation of the architecture: its config.json
  // "model_type" ("mixtral", "qwen3_moe", "deepseek_v3"; "" when not given).
  // Only the exports read it: DeepSpeed's AutoEP replaces the MoE blocks of
  // the Hugging Face model families it has presets for
  // (planner/export/deepspeed_export.cc).
  std::string hf_model_type;
  std::string source;   // where the figures come from

  int64_t head_dim() const { return head_dim_given > 0 ? head_dim_given : hidden / heads; }
  // Whether the heads are not hidden / heads wide (Qwen3, gpt-oss); a
  // head_dim given equal to it (Llama 4's config states 128 = 5120 / 40) is
  // the usual layout.
  bool separate_head_dim() const { return head_dim_given > 0 && head_dim_given * heads != hidden; }
  // Width of the attention output (the out projection's input): heads *
  // head_dim, or heads * v_head_dim with MLA.
  int64_t attention_width() const {
    return heads * (attention == AttentionKind::kMla ? mla.v_head_dim : head_dim());
  }
  // Whether transformer layer `layer` (0-based) has an MoE block.
  bool is_moe_layer(int64_t layer) const {
    return has_moe && layer >= moe.dense_layers &&
           (moe.layer_freq == 1 || (layer - moe.dense_layers) % moe.layer_freq == 0);
  }
  int64_t moe_layer_count() const;
  // Whether transformer layer `layer` (0-based) attends through the sliding
  // window (SlidingWindowSpec).
  bool is_windowed_layer(int64_t layer) const {
    return has_sliding_window &&
           (sliding_window.full_every == 0 || (layer + 1) % sliding_window.full_every != 0);
  }
  // The layers is_windowed_layer marks: all but the floor(layers / K) full ones.
  int64_t windowed_layer_count() const {
    if (!has_sliding_window) return 0;
    return sliding_window.full_every > 0 ? layers - layers / sliding_window.full_every : layers;
  }
};

// Parses and validates a model JSON document.  `where` names the file in
// error messages.  Throws InputError on malformed JSON, missing or unknown
// keys, wrong types and out-of-range values.
ModelSpec parse_model(const std::string& json_text, const std::string& where);

// Finds a model by name ("llama3-70b" -> <data_dir>/models/llama3-70b.json) or
// by path (anything containing '/' or ending in ".json"), then parses it.
// Throws InputError naming the known models if the name is unknown, from
// `where` (the flag, or the file that named the model) and `pointer`.
ModelSpec load_model(const std::string& name_or_path, const std::string& where = "--model",
                     const std::string& pointer = "");

// Names of the built-in models, sorted.
std::vector<std::string> builtin_model_names();

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_SPEC_MODEL_H_
