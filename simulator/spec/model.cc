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
  m.layers = o.positive_integer("layers");
  m.hidden = o.positive_integer("hidden");
  m.heads = o.positive_integer("heads");
  m.kv_heads = o.optional_positive_integer("kv_heads").value_or(m.heads);
  m.ffn_hidden = o.optional_positive_integer("ffn_hidden").value_or(4 * m.hidden);
  m.vocab = o.positive_integer("vocab");
  m.seq_len = o.positive_integer("seq_len");
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

ModelSpec load_model(const std::string& name_or_path) {
  std::string path = resolve_data_file("models", name_or_path, "--model", "model");
  return parse_model(detail::read_text_file(path), path);
}

std::vector<std::string> builtin_model_names() { return list_data_names("models"); }

}  // namespace trainplan
