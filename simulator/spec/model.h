// The shape of a transformer model, as read from models/*.json.
//
// Invariants after load_model(): every count is > 0, heads % kv_heads == 0,
// hidden % heads == 0.  Defaults: kv_heads = heads, ffn_hidden = 4*hidden,
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
  std::string source;   // where the figures come from

  int64_t head_dim() const { return hidden / heads; }
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
