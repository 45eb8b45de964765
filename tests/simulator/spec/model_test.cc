// Tests of the model loader (strict JSON, exact error messages) and of the
// parameter counts of the built-in models against the published sizes.
#include "simulator/spec/model.h"

#include <algorithm>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "simulator/core/error.h"
#include "simulator/cost/layer_cost.h"

namespace trainplan {
namespace {

// A valid GPT-style model document; each error test below changes one thing.
const char* const kGoodModel = R"({
  "name": "tiny",
  "layers": 2,
  "hidden": 64,
  "heads": 4,
  "vocab": 128,
  "seq_len": 32,
  "mlp": "gelu",
  "tied_embeddings": true,
  "dropout": true,
  "source": "test"
})";

// kGoodModel with `from` replaced by `to` (which must occur once).
std::string edited(const std::string& from, const std::string& to) {
  std::string text = kGoodModel;
  size_t pos = text.find(from);
  REQUIRE(pos != std::string::npos);
  text.replace(pos, from.size(), to);
  return text;
}

bool contains(const std::vector<std::string>& v, const std::string& x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

TEST_CASE("ModelSpec: every built-in model loads", "[sim][spec]") {
  const std::vector<std::string> names = builtin_model_names();
  SECTION("at least 15 models, sorted") {
    CHECK(names.size() >= 15);
    CHECK(std::is_sorted(names.begin(), names.end()));
  }
  SECTION("the models the issue requires exist") {
    for (const char* n : {"gpt3-1.3b", "gpt3-175b", "llama2-7b", "llama2-13b", "llama2-70b", "llama3-8b", "llama3-70b",
                          "llama3-405b", "bloom-176b", "mt-nlg-530b", "megatron-1t"}) {
      INFO(n);
      CHECK(contains(names, n));
    }
  }
  SECTION("each file loads, its name equals the file stem and it meets the invariants") {
    for (const std::string& n : names) {
      INFO(n);
      ModelSpec m;
      REQUIRE_NOTHROW(m = load_model(n));
      CHECK(m.name == n);
      CHECK(m.layers > 0);
      CHECK(m.hidden % m.heads == 0);
      CHECK(m.heads % m.kv_heads == 0);
      CHECK(m.ffn_hidden > 0);
      CHECK(m.vocab > 0);
      CHECK(m.seq_len > 0);
      CHECK_FALSE(m.source.empty());
    }
  }
}

TEST_CASE("ModelSpec: defaults follow the model family", "[sim][spec]") {
  SECTION("gelu: kv_heads = heads, ffn = 4h, biases, learned positions") {
    const ModelSpec m = parse_model(kGoodModel, "m.json");
    CHECK(m.kv_heads == 4);
    CHECK(m.ffn_hidden == 4 * 64);
    CHECK(m.bias);
    CHECK(m.position_embedding == PositionEmbedding::kLearned);
    CHECK(m.head_dim() == 16);
  }
  SECTION("swiglu: no biases, rope") {
    const ModelSpec m = parse_model(edited("\"gelu\"", "\"swiglu\""), "m.json");
    CHECK_FALSE(m.bias);
    CHECK(m.position_embedding == PositionEmbedding::kRope);
  }
}

TEST_CASE("ModelSpec: bad model JSON is rejected with the exact message", "[sim][spec]") {
  SECTION("malformed JSON names line and column") {
    // Line 3 is `  "layers": ,`; the comma is the 13th character.
    REQUIRE_THROWS_AS(parse_model(edited("\"layers\": 2", "\"layers\": "), "m.json"), InputError);
    REQUIRE_THROWS_WITH(parse_model(edited("\"layers\": 2", "\"layers\": "), "m.json"),
                        "m.json: malformed JSON at line 3, column 13; expected one JSON object");
  }
  SECTION("the document must be an object") {
    REQUIRE_THROWS_WITH(parse_model("[1, 2]", "m.json"), "m.json: /: expected an object, got an array");
  }
  SECTION("missing key") {
    REQUIRE_THROWS_WITH(parse_model(edited("\"layers\": 2,", ""), "m.json"), "m.json: /layers: missing required key");
  }
  SECTION("unknown key lists the allowed keys") {
    REQUIRE_THROWS_WITH(parse_model(edited("\"layers\": 2,", "\"layers\": 2, \"colour\": \"red\","), "m.json"),
                        "m.json: /colour: unknown key; allowed: attention, bias, dropout, ffn_hidden, head_dim, heads, "
                        "hf_model_type, hidden, kv_heads, layers, mlp, moe, name, position_embedding, seq_len, "
                        "sliding_window, source, tied_embeddings, vocab");
  }
  SECTION("hf_model_type: a Hugging Face config.json model_type, lowercase letters, digits and '_'") {
    CHECK(parse_model(edited("\"layers\": 2,", "\"layers\": 2, \"hf_model_type\": \"qwen3_moe\","), "m.json")
              .hf_model_type == "qwen3_moe");
    CHECK(parse_model(edited("\"layers\": 2,", "\"layers\": 2,"), "m.json").hf_model_type.empty());
    REQUIRE_THROWS_WITH(
        parse_model(edited("\"layers\": 2,", "\"layers\": 2, \"hf_model_type\": \"Qwen3-MoE\","), "m.json"),
        "m.json: /hf_model_type: \"Qwen3-MoE\" is not a Hugging Face model_type; the model_type of the model's "
        "config.json: 1 to 64 lowercase letters, digits or '_' (e.g. \"mixtral\", \"qwen3_moe\")");
    REQUIRE_THROWS_WITH(parse_model(edited("\"layers\": 2,", "\"layers\": 2, \"hf_model_type\": \"\","), "m.json"),
                        Catch::Matchers::StartsWith("m.json: /hf_model_type: \"\" is not a Hugging Face model_type"));
  }
  SECTION("wrong type: a string where an integer is due") {
    REQUIRE_THROWS_WITH(parse_model(edited("\"layers\": 2", "\"layers\": \"2\""), "m.json"),
                        "m.json: /layers: expected an integer, got a string; allowed: 1 to 16384");
  }
  SECTION("wrong type: a fraction where an integer is due") {
    REQUIRE_THROWS_WITH(parse_model(edited("\"layers\": 2", "\"layers\": 2.5"), "m.json"),
                        "m.json: /layers: expected an integer, got 2.5; write integers without a fraction or exponent; allowed: 1 to 16384");
  }
  SECTION("wrong type: an integer where a boolean is due") {
    REQUIRE_THROWS_WITH(parse_model(edited("\"dropout\": true", "\"dropout\": 1"), "m.json"),
                        "m.json: /dropout: expected true or false, got an integer");
  }
  SECTION("zero count") {
    REQUIRE_THROWS_WITH(parse_model(edited("\"layers\": 2", "\"layers\": 0"), "m.json"),
                        "m.json: /layers: out of range: 0; allowed: 1 to 16384");
  }
  SECTION("negative count") {
    REQUIRE_THROWS_WITH(parse_model(edited("\"layers\": 2", "\"layers\": -3"), "m.json"),
                        "m.json: /layers: out of range: -3; allowed: 1 to 16384");
  }
  SECTION("integer above the field's range") {
    // 2^41 = 2199023255552 > kMaxVocab = 2^24 = 16777216.
    REQUIRE_THROWS_WITH(parse_model(edited("\"vocab\": 128", "\"vocab\": 2199023255552"), "m.json"),
                        "m.json: /vocab: out of range: 2199023255552; allowed: 1 to 16777216");
  }
  SECTION("overflowing integer: above int64") {
    // 2^64 - 1 = 18446744073709551615 fits uint64 but not int64.
    REQUIRE_THROWS_WITH(parse_model(edited("\"vocab\": 128", "\"vocab\": 18446744073709551615"), "m.json"),
                        "m.json: /vocab: out of range: 18446744073709551615; allowed: 1 to 16777216");
  }
  SECTION("a number beyond double range is bad input, not nlohmann's out_of_range.406") {
    // 1e400 > DBL_MAX = 1.8e308.  The position is the line and 1-based
    // column of the token's last character, counted here independently.
    const std::string text = edited("\"layers\": 2", "\"layers\": 1e400");
    const size_t col = text.find("1e400") + 5;  // 0-based index of the last character, plus one
    size_t line = 1, line_start = 0;
    for (size_t i = 0; i < text.find("1e400"); ++i) {
      if (text[i] == '\n') { ++line; line_start = i + 1; }
    }
    REQUIRE_THROWS_WITH(parse_model(text, "m.json"),
                        "m.json: line " + std::to_string(line) + ", column " + std::to_string(col - line_start) +
                            ": number 1e400 is out of range; numbers must be finite (magnitude below 1.8e308)");
  }
  SECTION("duplicate keys: RFC 8259 leaves them undefined, nlohmann keeps the last; we refuse") {
    REQUIRE_THROWS_WITH(parse_model(edited("\"layers\": 2,", "\"layers\": 2, \"layers\": 4,"), "m.json"),
                        "m.json: /layers: duplicate key \"layers\"; each key may appear once in an object");
  }
  SECTION("control characters from the input are escaped: the message stays one line") {
    REQUIRE_THROWS_WITH(parse_model(edited("\"gelu\"", "\"re\\nlu\\u001b[2J\""), "m.json"),
                        "m.json: /mlp: unknown value \"re\\nlu\\x1b[2J\"; allowed: gelu, swiglu");
  }
  SECTION("keys with '/' and '~' are escaped in the JSON pointer (RFC 6901)") {
    REQUIRE_THROWS_WITH(parse_model(edited("\"layers\": 2,", "\"layers\": 2, \"a/b~c\": 1,"), "m.json"),
                        Catch::Matchers::StartsWith("m.json: /a~1b~0c: unknown key"));
  }
  SECTION("nesting deeper than kMaxJsonDepth = 32 levels") {
    // The root object is level 1; 32 arrays make 33.
    const std::string deep = std::string(32, '[') + std::string(32, ']');
    REQUIRE_THROWS_WITH(parse_model(edited("\"source\": \"test\"", "\"source\": " + deep), "m.json"),
                        "m.json: /source/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0/0: nested deeper "
                        "than 32 levels; input files are flat records");
  }
  SECTION("unknown enum value lists the allowed values") {
    REQUIRE_THROWS_WITH(parse_model(edited("\"gelu\"", "\"relu\""), "m.json"),
                        "m.json: /mlp: unknown value \"relu\"; allowed: gelu, swiglu");
  }
  SECTION("unknown position embedding lists the allowed values") {
    REQUIRE_THROWS_WITH(parse_model(edited("\"mlp\"", "\"position_embedding\": \"sinusoid\", \"mlp\""), "m.json"),
                        "m.json: /position_embedding: unknown value \"sinusoid\"; allowed: learned, rope, alibi");
  }
  SECTION("heads must divide hidden") {
    REQUIRE_THROWS_WITH(parse_model(edited("\"heads\": 4", "\"heads\": 6"), "m.json"),
                        "m.json: /heads: heads=6 does not divide hidden=64; hidden must be a multiple of heads, or give head_dim");
  }
  SECTION("kv_heads must divide heads") {
    REQUIRE_THROWS_WITH(parse_model(edited("\"heads\": 4", "\"heads\": 4, \"kv_heads\": 3"), "m.json"),
                        "m.json: /kv_heads: kv_heads=3 does not divide heads=4; kv_heads must divide heads");
  }
  SECTION("empty name") {
    REQUIRE_THROWS_WITH(parse_model(edited("\"tiny\"", "\"\""), "m.json"), "m.json: /name: must not be empty");
  }
  SECTION("sliding window: a window of no tokens") {
    REQUIRE_THROWS_WITH(parse_model(edited("\"mlp\"", "\"sliding_window\": {\"tokens\": 0}, \"mlp\""), "m.json"),
                        "m.json: /sliding_window/tokens: out of range: 0; allowed: 1 to 16777216");
  }
  SECTION("sliding window: every layer full is no window") {
    // full_every 1 would make every layer full; 2..layers (here 2) is allowed.
    REQUIRE_THROWS_WITH(
        parse_model(edited("\"mlp\"", "\"sliding_window\": {\"tokens\": 8, \"full_every\": 1}, \"mlp\""), "m.json"),
        "m.json: /sliding_window/full_every: out of range: 1; allowed: 2 to 2");
  }
  SECTION("sliding window: unknown key") {
    REQUIRE_THROWS_WITH(
        parse_model(edited("\"mlp\"", "\"sliding_window\": {\"tokens\": 8, \"pattern\": 2}, \"mlp\""), "m.json"),
        Catch::Matchers::StartsWith("m.json: /sliding_window/pattern: unknown key"));
  }
}

TEST_CASE("ModelSpec: sliding-window layers follow Megatron's --window-attn-skip-freq", "[sim][spec]") {
  // megatron/training/arguments.py: an integer N is "one full attention
  // layer after (N-1) SWA layers"; gpt-oss (config.json layer_types) starts
  // with a sliding layer and alternates: N = 2, layers 1, 3, 5, ... full.
  const ModelSpec oss = load_model("gpt-oss-120b");
  REQUIRE(oss.has_sliding_window);
  CHECK(oss.sliding_window.tokens == 128);
  CHECK(oss.is_windowed_layer(0));
  CHECK_FALSE(oss.is_windowed_layer(1));
  CHECK(oss.is_windowed_layer(34));
  CHECK_FALSE(oss.is_windowed_layer(35));
  CHECK(oss.windowed_layer_count() == 18);
  // Gemma 3's 5 local : 1 global over 12 layers: N = 6, layers 5 and 11 full.
  const ModelSpec g = parse_model(edited("\"layers\": 2", "\"layers\": 12, \"sliding_window\": {\"tokens\": 16, "
                                         "\"full_every\": 6}"), "m.json");
  CHECK(g.windowed_layer_count() == 10);
  CHECK_FALSE(g.is_windowed_layer(5));
  CHECK_FALSE(g.is_windowed_layer(11));
  // Without full_every every layer is windowed (Mistral 7B v0.1).
  const ModelSpec all = parse_model(edited("\"mlp\"", "\"sliding_window\": {\"tokens\": 16}, \"mlp\""), "m.json");
  CHECK(all.windowed_layer_count() == all.layers);
  CHECK_FALSE(parse_model(kGoodModel, "m.json").is_windowed_layer(0));
  // The closed-form count against is_windowed_layer, layer by layer.
  for (int64_t every : {0, 2, 3, 6, 7}) {
    ModelSpec m = g;
    m.layers = 20;
    m.sliding_window.full_every = every;
    int64_t n = 0;
    for (int64_t i = 0; i < m.layers; ++i) n += m.is_windowed_layer(i) ? 1 : 0;
    CHECK(m.windowed_layer_count() == n);
  }
}

TEST_CASE("ModelSpec: a head_dim apart from hidden / heads is what makes heads separate", "[sim][spec]") {
  // Qwen3-30B-A3B: 32 heads of 128 on hidden 2048 (4096 != 2048); gpt-oss:
  // 64 of 64 on 2880; Llama 4 Maverick states head_dim 128 with 40 heads on
  // 5120, the usual 5120 / 40; Llama 3 8B states none.
  CHECK(load_model("qwen3-30b-a3b").separate_head_dim());
  CHECK(load_model("gpt-oss-120b").separate_head_dim());
  const ModelSpec l4 = load_model("llama4-maverick");
  CHECK(l4.head_dim_given == 128);
  CHECK_FALSE(l4.separate_head_dim());
  CHECK(l4.head_dim() == l4.hidden / l4.heads);
  CHECK_FALSE(load_model("llama3-8b").separate_head_dim());
}

TEST_CASE("ModelSpec: load_model finds names and paths", "[sim][spec]") {
  SECTION("an unknown name lists the known models") {
    REQUIRE_THROWS_WITH(load_model("nope"), Catch::Matchers::StartsWith("--model: unknown model \"nope\"; known: bloom-176b, "));
    // The list is every built-in name, sorted, comma separated.
    std::string known;
    for (const std::string& n : builtin_model_names()) known += (known.empty() ? "" : ", ") + n;
    REQUIRE_THROWS_WITH(load_model("nope"), "--model: unknown model \"nope\"; known: " + known);
  }
  SECTION("a missing path is named") {
    REQUIRE_THROWS_WITH(load_model("no/such/model.json"), "--model: no such file \"no/such/model.json\"");
  }
  SECTION("a path loads the file") {
    const ModelSpec m = load_model(std::string(TRAINPLAN_SOURCE_DIR) + "/models/llama3-8b.json");
    CHECK(m.name == "llama3-8b");
  }
}

// Parameter counts.  Closed form for a GPT layer with biases (Narayanan et al.
// 2021 App. A): QKV 3h^2 + 3h, projection h^2 + h, MLP 8h^2 + 5h, two
// LayerNorms 4h: 12h^2 + 13h per layer; plus the word embedding Vh, learned
// positions sh and the final LayerNorm 2h (output layer tied):
//   P = 12lh^2 (1 + 13/(12h) + (V + s)/(12lh)) + 2h.
double gpt_params(double l, double h, double V, double s) { return 12 * l * h * h + 13 * l * h + (V + s) * h + 2 * h; }

// Llama layer without biases, GQA with kv = kv_heads*head_dim, SwiGLU width f,
// two RMSNorms: h(h + 2kv) + h^2 + 3hf + 2h; plus untied embedding and output
// layer 2Vh and the final RMSNorm h.
double llama_params(double l, double h, double kv, double f, double V) {
  return l * (h * (h + 2 * kv) + h * h + 3 * h * f + 2 * h) + 2 * V * h + h;
}

TEST_CASE("ModelSpec: parameter counts match the published sizes", "[sim][spec]") {
  SECTION("gpt3-175b: 174.6B (Narayanan et al. 2021 Table 1)") {
    // 12*96*12288^2 = 173,946,175,488; 13lh = 15,335,424; (51200 + 2048)*12288
    // = 654,311,424; 2h = 24,576: 174,615,846,912.
    const double p = total_params(load_model("gpt3-175b"));
    CHECK(p == Approx(gpt_params(96, 12288, 51200, 2048)).epsilon(1e-12));
    CHECK(p == Approx(174.6e9).epsilon(0.002));
  }
  SECTION("megatron-1t: 1008.0B (Narayanan et al. 2021 Table 1)") {
    // 12*128*25600^2 = 1,006,632,960,000; 13lh = 42,598,400; 53248*25600 =
    // 1,363,148,800; 2h = 51,200: 1,008,038,758,400.
    const double p = total_params(load_model("megatron-1t"));
    CHECK(p == Approx(gpt_params(128, 25600, 51200, 2048)).epsilon(1e-12));
    CHECK(p == Approx(1008.0e9).epsilon(0.002));
  }
  SECTION("mt-nlg-530b: 529.6B (Narayanan et al. 2021 Table 1)") {
    // 12*105*20480^2 = 528,482,304,000; 13lh = 27,955,200; 53248*20480 =
    // 1,090,519,040; 2h = 40,960: 529,600,819,200.
    const double p = total_params(load_model("mt-nlg-530b"));
    CHECK(p == Approx(gpt_params(105, 20480, 51200, 2048)).epsilon(1e-12));
    CHECK(p == Approx(529.6e9).epsilon(0.002));
  }
  SECTION("bloom-176b: 176,247,271,424 (bigscience/bloom) less the embedding LayerNorm") {
    // 70 layers of 12h^2 + 13h (h = 14336) = 172,650,598,400; embedding
    // 250880*14336 = 3,596,615,680; final LayerNorm 2h = 28,672: 176,247,242,752.
    // The published count adds the embedding LayerNorm (2h = 28,672), which the
    // schema does not model.  ALiBi adds no parameters.
    const double p = total_params(load_model("bloom-176b"));
    CHECK(p == Approx(176247271424.0 - 28672.0).epsilon(0.0005));
  }
  SECTION("llama3-8b: 8.03B (8,030,261,248, meta-llama/Meta-Llama-3-8B)") {
    // Layer: 4096*(4096 + 2048) + 4096^2 + 3*4096*14336 + 8192 = 218,112,000;
    // x32 = 6,979,584,000; 2*128256*4096 = 1,050,673,152; + 4096.
    const double p = total_params(load_model("llama3-8b"));
    CHECK(p == Approx(llama_params(32, 4096, 1024, 14336, 128256)).epsilon(1e-12));
    CHECK(p == Approx(8.03e9).epsilon(0.002));
  }
  SECTION("llama3-70b: 70.55B (70,553,706,496)") {
    // Layer: 8192*(8192 + 2048) + 8192^2 + 3*8192*28672 + 16384 = 855,654,400;
    // x80 = 68,452,352,000; 2*128256*8192 = 2,101,346,304; + 8192.
    const double p = total_params(load_model("llama3-70b"));
    CHECK(p == Approx(llama_params(80, 8192, 1024, 28672, 128256)).epsilon(1e-12));
    CHECK(p == Approx(70.55e9).epsilon(0.002));
  }
  SECTION("llama3-405b: 405.85B (405,853,388,800; Dubey et al. 2024 Table 3)") {
    // Layer: 16384*(16384 + 2048) + 16384^2 + 3*16384*53248 + 32768 =
    // 3,187,703,808; x126 = 401,650,679,808; 2*128256*16384 = 4,202,692,608;
    // + 16384.
    const double p = total_params(load_model("llama3-405b"));
    CHECK(p == Approx(llama_params(126, 16384, 1024, 53248, 128256)).epsilon(1e-12));
    CHECK(p == Approx(405.85e9).epsilon(0.005));
  }
  SECTION("llama2-7b: 6.74B (6,738,415,616, Touvron et al. 2023)") {
    // Layer: 4*4096^2 + 3*4096*11008 + 8192 = 202,383,360; x32 =
    // 6,476,267,520; 2*32000*4096 = 262,144,000; + 4096.
    const double p = total_params(load_model("llama2-7b"));
    CHECK(p == Approx(llama_params(32, 4096, 4096, 11008, 32000)).epsilon(1e-12));
    CHECK(p == Approx(6.74e9).epsilon(0.002));
  }
  SECTION("llama2-13b: 13.02B (13,015,864,320)") {
    // Layer: 4*5120^2 + 3*5120*13824 + 10240 = 317,081,600; x40 =
    // 12,683,264,000; 2*32000*5120 = 327,680,000; + 5120.
    const double p = total_params(load_model("llama2-13b"));
    CHECK(p == Approx(13015864320.0).epsilon(1e-12));
  }
  SECTION("llama2-70b: 68.98B (68,976,648,192)") {
    // Same layers as llama3-70b (855,654,400 x 80); 2*32000*8192 = 524,288,000;
    // + 8192.
    const double p = total_params(load_model("llama2-70b"));
    CHECK(p == Approx(llama_params(80, 8192, 1024, 28672, 32000)).epsilon(1e-12));
    CHECK(p == Approx(68.98e9).epsilon(0.002));
  }
}

}  // namespace
}  // namespace trainplan
