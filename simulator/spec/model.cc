#include "simulator/spec/model.h"

#include <algorithm>

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
  m.head_dim_given = o.optional_integer("head_dim", 1, kMaxHidden).value_or(0);
  auto attention = o.optional_choice("attention", {"mha", "gqa", "mla"});
  m.attention = attention && *attention == 2 ? AttentionKind::kMla : AttentionKind::kMha;
  const std::vector<std::string> mla_keys = {"q_lora_rank", "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim",
                                             "v_head_dim"};
  if (m.attention == AttentionKind::kMla) {
    m.mla.q_lora_rank = o.optional_integer("q_lora_rank", 0, kMaxHidden).value_or(0);
    m.mla.kv_lora_rank = o.integer("kv_lora_rank", 1, kMaxHidden);
    m.mla.qk_nope_head_dim = o.integer("qk_nope_head_dim", 1, kMaxHidden);
    m.mla.qk_rope_head_dim = o.integer("qk_rope_head_dim", 1, kMaxHidden);
    m.mla.v_head_dim = o.integer("v_head_dim", 1, kMaxHidden);
    if (m.head_dim_given > 0) {
      throw_input_error(where, "/head_dim", "is not used with \"attention\": \"mla\"",
                        "MLA heads are qk_nope_head_dim + qk_rope_head_dim wide (keys) and v_head_dim (values)");
    }
  } else {
    for (const std::string& k : mla_keys) {
      if (o.has(k)) {
        throw_input_error(where, "/" + k, "is a multi-head latent attention dimension",
                          "set \"attention\": \"mla\" to use it, or remove it");
      }
    }
  }
  if (auto moe = o.optional_object("moe")) {
    m.has_moe = true;
    MoeSpec& e = m.moe;
    e.experts = moe->integer("experts", 1, kMaxExperts);
    e.top_k = moe->integer("top_k", 1, kMaxExperts);
    e.expert_ffn_hidden = moe->integer("expert_ffn_hidden", 1, 4 * kMaxHidden);
    e.shared_experts = moe->optional_integer("shared_experts", 0, kMaxExperts).value_or(0);
    e.shared_ffn_hidden = moe->optional_integer("shared_ffn_hidden", 1, 4 * kMaxHidden).value_or(e.expert_ffn_hidden);
    e.dense_layers = moe->optional_integer("dense_layers", 0, m.layers - 1).value_or(0);
    e.layer_freq = moe->optional_integer("layer_freq", 1, m.layers).value_or(1);
    if (!moe->is_null("capacity_factor")) {
      e.capacity_factor = moe->optional_number_in("capacity_factor", 1.0 / 1024, 1024).value_or(0);
    }
    auto router = moe->optional_choice("router", {"softmax", "sigmoid"});
    e.router = router && *router == 1 ? RouterScore::kSigmoid : RouterScore::kSoftmax;
    auto balance = moe->optional_choice("load_balancing", {"aux_loss", "aux_free"});
    e.load_balancing = balance && *balance == 1 ? LoadBalancing::kAuxFree : LoadBalancing::kAuxLoss;
    e.router_groups = moe->optional_integer("router_groups", 1, kMaxExperts).value_or(0);
    e.router_group_topk = moe->optional_integer("router_group_topk", 1, kMaxExperts).value_or(0);
    moe->finish();
    // Megatron-Core TransformerConfig: "When using group limited routing,
    // moe_router_num_groups must be specified"; num_moe_experts divisible by
    // the groups; group_topk <= num_groups; and the top_k experts are picked
    // among the selected groups' experts.
    if ((e.router_groups > 0) != (e.router_group_topk > 0)) {
      throw_input_error(where, e.router_groups > 0 ? "/moe/router_group_topk" : "/moe/router_groups",
                        "is missing", "group-limited routing needs both router_groups and router_group_topk");
    }
    if (e.router_groups > 0) {
      if (e.experts % e.router_groups != 0) {
        throw_input_error(where, "/moe/router_groups", "router_groups=" + std::to_string(e.router_groups) +
                          " does not divide experts=" + std::to_string(e.experts), "a divisor of experts");
      }
      if (e.router_group_topk > e.router_groups) {
        throw_input_error(where, "/moe/router_group_topk", "router_group_topk=" + std::to_string(e.router_group_topk) +
                          " exceeds router_groups=" + std::to_string(e.router_groups), "1 .. router_groups");
      }
      if (e.top_k > e.router_group_topk * (e.experts / e.router_groups)) {
        throw_input_error(where, "/moe/router_group_topk", "the " + std::to_string(e.router_group_topk) +
                          " selected groups hold fewer than top_k=" + std::to_string(e.top_k) + " experts",
                          "router_group_topk * experts / router_groups >= top_k");
      }
    }
    if (e.top_k > e.experts) {
      throw_input_error(where, "/moe/top_k", "top_k=" + std::to_string(e.top_k) + " exceeds experts=" +
                        std::to_string(e.experts), "a token is routed to at most every expert");
    }
  }
  if (auto sw = o.optional_object("sliding_window")) {
    m.has_sliding_window = true;
    m.sliding_window.tokens = sw->integer("tokens", 1, kMaxSeqLen);
    m.sliding_window.full_every = sw->optional_integer("full_every", 2, m.layers).value_or(0);
    sw->finish();
  }
  m.hf_model_type = o.optional_string("hf_model_type").value_or("");
  if (o.has("hf_model_type")) {
    // transformers' model_type names (configuration_*.py): lowercase
    // letters, digits and underscores.
    const std::string& t = m.hf_model_type;
    const bool ok = !t.empty() && t.size() <= 64 && std::all_of(t.begin(), t.end(), [](char ch) {
      return (ch >= 'a' && ch <= 'z') || (ch >= '0' && ch <= '9') || ch == '_';
    });
    if (!ok) {
      throw_input_error(where, "/hf_model_type", "\"" + t + "\" is not a Hugging Face model_type",
                        "the model_type of the model's config.json: 1 to 64 lowercase letters, digits or '_' "
                        "(e.g. \"mixtral\", \"qwen3_moe\")");
    }
  }
  m.source = o.optional_string("source").value_or("");
  o.finish();
  if (m.attention == AttentionKind::kMla && m.kv_heads != m.heads) {
    throw_input_error(where, "/kv_heads", "kv_heads=" + std::to_string(m.kv_heads) + " with multi-head latent attention",
                      "MLA gives every head its own key and value (kv_heads = heads, or leave it out)");
  }
  if (m.head_dim_given == 0 && m.attention == AttentionKind::kMha && m.hidden % m.heads != 0) {
    throw_input_error(where, "/heads", "heads=" + std::to_string(m.heads) + " does not divide hidden=" +
                      std::to_string(m.hidden), "hidden must be a multiple of heads, or give head_dim");
  }
  if (m.kv_heads > m.heads || m.heads % m.kv_heads != 0) {
    throw_input_error(where, "/kv_heads", "kv_heads=" + std::to_string(m.kv_heads) + " does not divide heads=" +
                      std::to_string(m.heads), "kv_heads must divide heads");
  }
  return m;
}

int64_t ModelSpec::moe_layer_count() const {
  int64_t n = 0;
  for (int64_t i = 0; i < layers; ++i) n += is_moe_layer(i) ? 1 : 0;
  return n;
}

ModelSpec load_model(const std::string& name_or_path, const std::string& where, const std::string& pointer) {
  std::string path = resolve_data_file("models", name_or_path, where, pointer, "model");
  return parse_model(detail::read_text_file(path), path);
}

std::vector<std::string> builtin_model_names() { return list_data_names("models"); }

}  // namespace trainplan
