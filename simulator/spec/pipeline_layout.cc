#include "simulator/spec/pipeline_layout.h"

#include <cctype>
#include <cstddef>
#include <cstdint>

#include "simulator/core/error.h"

namespace trainplan {
namespace {

// Longer expansions are refused: far beyond any model's layers (a layer
// costs at least one character), and small enough to hold.
constexpr size_t kMaxExpanded = size_t{1} << 20;

// Reads the repeat count after a '*' at text[*at]: "" and the count, or
// why not.
std::string read_count(const std::string& text, size_t* at, size_t* count, const char* missing) {
  if (*at >= text.size() || text[*at] != '*') return missing;
  size_t i = *at + 1, n = 0;
  if (i >= text.size() || !std::isdigit(static_cast<unsigned char>(text[i]))) return missing;
  for (; i < text.size() && std::isdigit(static_cast<unsigned char>(text[i])); ++i) {
    n = n * 10 + static_cast<size_t>(text[i] - '0');
    if (n > kMaxExpanded) return "a repeat count over a million";
  }
  *at = i;
  *count = n;
  return "";
}

bool append_repeated(const std::string& unit, size_t n, std::string* out) {
  if (!unit.empty() && n > (kMaxExpanded - out->size()) / unit.size()) return false;
  for (size_t k = 0; k < n; ++k) *out += unit;
  return true;
}

}  // namespace

std::string parse_pipeline_layout(const std::string& raw, PipelineLayout* out) {
  std::string text;
  for (char ch : raw) {
    if (ch != ',') text += ch;  // cosmetic
  }
  if (text.empty()) return "empty layout";
  // Groups: (S)*n.
  std::string grouped;
  for (size_t i = 0; i < text.size();) {
    if (text[i] == ')') return "a ')' without its '('";
    if (text[i] != '(') {
      grouped += text[i++];
      continue;
    }
    const size_t close = text.find(')', i + 1);
    if (close == std::string::npos) return "a '(' without its ')'";
    const std::string body = text.substr(i + 1, close - i - 1);
    if (body.find('(') != std::string::npos) return "nested parentheses";
    if (body.empty()) return "an empty group ()";
    size_t at = close + 1, n = 0;
    const std::string bad = read_count(text, &at, &n, "a group (...) must be followed by *n");
    if (!bad.empty()) return bad;
    if (!append_repeated(body, n, &grouped)) return "expands to more than a million characters";
    i = at;
  }
  // Characters: x*n.
  std::string flat;
  for (size_t i = 0; i < grouped.size();) {
    const char ch = grouped[i];
    size_t at = i + 1, n = 1;
    if (at < grouped.size() && grouped[at] == '*') {
      const std::string bad = read_count(grouped, &at, &n, "a '*' must be followed by a repeat count");
      if (!bad.empty()) return bad;
    }
    if (!append_repeated(std::string(1, ch), n, &flat)) return "expands to more than a million characters";
    i = at;
  }
  PipelineLayout layout;
  layout.stage_layers.push_back(0);
  int embeddings = 0, losses = 0, mtp_stage = -1, embedding_stage = -1;
  char first = 0;
  bool after_mtp = false;
  for (char ch : flat) {
    const int stage = static_cast<int>(layout.stage_layers.size()) - 1;
    if (ch == '|') {
      layout.stage_layers.push_back(0);
      continue;
    }
    if (ch != 'E' && ch != 't' && ch != 'm' && ch != 'L') {
      return std::string("unknown layer character '") + ch + "' (E embedding, t transformer layer, m MTP depth, L loss)";
    }
    if (first == 0) first = ch;
    if (ch == 'E') {
      ++embeddings;
      embedding_stage = stage;
    }
    if (ch == 'L') ++losses;
    if (ch == 't') {
      if (after_mtp) return "a transformer layer t after an MTP depth m (decoder layers come first)";
      ++layout.stage_layers.back();
    }
    if (ch == 'm') {
      if (mtp_stage >= 0 && mtp_stage != stage) return "the MTP depths m span more than one stage";
      mtp_stage = stage;
      after_mtp = true;
      ++layout.mtp_layers;
    }
  }
  if (first != 'E') return std::string("the first layer must be the embedding E, got ") + (first ? first : '|');
  if (embeddings != 1) return "the embedding E must appear exactly once";
  if (losses != 1) return "the loss L must appear exactly once";
  if (flat.back() != 'L') return "the loss L must end the last stage";
  // trainplan holds the embedding in the first virtual stage and the loss in
  // the last (Megatron would also take them after or before empty stages).
  if (embedding_stage != 0) return "the embedding E must be in the first stage";
  if (mtp_stage >= 0 && mtp_stage != static_cast<int>(layout.stage_layers.size()) - 1) {
    return "trainplan places the MTP depths m with the loss, in the last stage";
  }
  *out = layout;
  return "";
}

std::string format_pipeline_layout(const std::vector<int>& stage_layers, int mtp_layers) {
  TRAINPLAN_CHECK(!stage_layers.empty(), "format_pipeline_layout needs at least one stage");
  std::vector<std::string> stages;
  for (int n : stage_layers) stages.push_back(n == 0 ? "" : n == 1 ? "t" : "t*" + std::to_string(n));
  stages.front() = "E" + stages.front();
  if (mtp_layers > 0) stages.back() += mtp_layers == 1 ? "m" : "m*" + std::to_string(mtp_layers);
  stages.back() += "L";
  std::string out;
  for (size_t i = 0; i < stages.size();) {
    size_t k = 1;
    while (i + k < stages.size() && stages[i + k] == stages[i]) ++k;
    if (i + k == stages.size() && k > 1) --k;  // the last stage takes no '|' after it
    const bool last = i + k == stages.size();
    if (k >= 3 && !stages[i].empty()) {
      // A cosmetic comma after the group when more follows, as Megatron's
      // own layouts write it ("(t*2|)*34,t*3|...").
      out += "(" + stages[i] + "|)*" + std::to_string(k) + (last ? "" : ",");
    } else {
      for (size_t j = 0; j < k; ++j) out += stages[i] + (last && j + 1 == k ? "" : "|");
    }
    i += k;
  }
  return out;
}

}  // namespace trainplan
