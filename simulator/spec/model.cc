#include "simulator/spec/model.h"

#include "simulator/core/error.h"
#include "simulator/spec/data_dir.h"
#include "simulator/spec/json_reader.h"

namespace trainplan {

ModelSpec parse_model(const std::string& json_text, const std::string& where) {
  nlohmann::json doc = detail::parse_json_text(json_text, where);
  detail::JsonObject o(doc, where, "");
  ModelSpec m;
  m.name = o.string("name");
  if (m.name.empty()) throw_input_error(where, "/name", "must not be empty", "");
  // Bounds (docs/input-limits.md): far above any published model, low
  // enough that every int64 product of the cost and memory models (e.g.
  // 12 h^2 L, mbs * seq * hidden) stays exact.
  m.layers = o.integer("layers", 1, kMaxLayers);
  m.hidden = o.integer("hidden", 1, kMaxHidden);
  m.heads = o.integer("heads", 1, kMaxHeads);
  m.kv_heads = o.optional_integer("kv_heads", 1, kMaxHeads).value_or(m.heads);
  m.ffn_hidden = o.optional_integer("ffn_hidden", 1, 4 * kMaxHidden).value_or(4 * m.hidden);
  m.vocab = o.integer("vocab", 1, kMaxVocab);
  m.seq_len = o.integer("seq_len", 1, kMaxSeqLen);
  m.mlp = o.choice("mlp", {"gelu", "swiglu"}) == 0 ? MlpKind::kGelu : MlpKind::kSwiglu;
  m.tied_embeddings = o.boolean("tied_embeddings");
  m.dropout = o.boolean("dropout");
  m.bias = o.optional_boolean("bias").value_or(m.mlp == MlpKind::kGelu);
  auto pe = o.optional_choice("position_embedding", {"learned", "rope", "alibi"});
  m.position_embedding = pe ? static_cast<PositionEmbedding>(*pe)
                            : (m.mlp == MlpKind::kGelu ? PositionEmbedding::kLearned : PositionEmbedding::kRope);
  m.source = o.optional_string("source").value_or("");
  o.finish();
  if (m.hidden % m.heads != 0) {
    throw_input_error(where, "/heads", "heads=" + std::to_string(m.heads) + " does not divide hidden=" +
                      std::to_string(m.hidden), "hidden must be a multiple of heads");
  }
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0) {
    throw_input_error(where, "/kv_heads", "kv_heads=" + std::to_string(m.kv_heads) + " does not divide heads=" +
                      std::to_string(m.heads), "kv_heads must divide heads");
  }
  return m;
}

ModelSpec load_model(const std::string& name_or_path, const std::string& where, const std::string& pointer) {
  std::string path = resolve_data_file("models", name_or_path, where, pointer, "model");
  return parse_model(detail::read_text_file(path), path);
}

std::vector<std::string> builtin_model_names() { return list_data_names("models"); }

}  // namespace trainplan
