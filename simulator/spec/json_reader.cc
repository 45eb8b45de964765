#include "simulator/spec/json_reader.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <sstream>

#include "simulator/core/error.h"

namespace trainplan {
namespace detail {

namespace {

using json = nlohmann::json;

const char* type_name(const json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer()) return "an integer";
  if (v.is_number()) return "a number";
  if (v.is_string()) return "a string";
  if (v.is_array()) return "an array";
  if (v.is_object()) return "an object";
  return "null";
}

std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
  return out;
}

// The shortest text that reads back to d, in plain notation for
// magnitudes from 1e-4 to 1e15 ("100", not "1e+02").
std::string number_text(double d) {
  const bool plain = d == 0 || (std::fabs(d) >= 1e-4 && std::fabs(d) < 1e15);
  for (int precision = 1; precision <= 17; ++precision) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "%.*g", precision, d);
    if (std::strtod(buf, nullptr) == d && (!plain || std::strchr(buf, 'e') == nullptr)) return buf;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, plain ? "%.17f" : "%.17g", d);
  return buf;
}

std::string allowed_range(const std::string& lo, const std::string& hi) { return "allowed: " + lo + " to " + hi; }

// "line L, column C" of a byte offset (the column of the character there).
std::string position_text(const std::string& text, size_t byte) {
  size_t line = 1, column = 1;
  for (size_t i = 0; i + 1 < byte && i < text.size(); ++i) {
    if (text[i] == '\n') {
      ++line;
      column = 1;
    } else {
      ++column;
    }
  }
  return "line " + std::to_string(line) + ", column " + std::to_string(column);
}

// Builds the document from nlohmann's SAX events as its own DOM parser
// does, and rejects duplicate keys, numbers out of range and deep nesting
// where nlohmann would keep the last key, throw its own out_of_range or
// nest without bound.
class StrictBuilder {
 public:
  StrictBuilder(json* root, const std::string& text, const std::string& where)
      : root_(root), text_(text), where_(where) {}

  bool null() { return place(json(nullptr)), true; }
  bool boolean(bool v) { return place(json(v)), true; }
  bool number_integer(json::number_integer_t v) { return place(json(v)), true; }
  bool number_unsigned(json::number_unsigned_t v) { return place(json(v)), true; }
  bool number_float(json::number_float_t v, const json::string_t&) { return place(json(v)), true; }
  bool string(json::string_t& v) { return place(json(std::move(v))), true; }
  bool binary(json::binary_t& v) { return place(json(std::move(v))), true; }
  bool start_object(std::size_t) { return open(json::value_t::object), true; }
  bool start_array(std::size_t) { return open(json::value_t::array), true; }
  bool end_object() { return close(), true; }
  bool end_array() { return close(), true; }

  bool key(json::string_t& k) {
    json& object = *stack_.back();
    if (object.contains(k)) {
      throw_input_error(where_, pointer() + "/" + pointer_token(k), "duplicate key \"" + k + "\"",
                        "each key may appear once in an object");
    }
    slot_ = &object[k];
    key_ = k;
    return true;
  }

  bool parse_error(std::size_t position, const std::string& token, const nlohmann::detail::exception& e) {
    if (e.id == 406) {  // out_of_range.406: number overflow
      throw_input_error(where_, "", position_text(text_, position) + ": number " + token + " is out of range",
                        "numbers must be finite (magnitude below 1.8e308)");
    }
    throw_input_error(where_, "", "malformed JSON at " + position_text(text_, position), "expected one JSON object");
  }

 private:
  // The JSON pointer of the innermost open container.
  std::string pointer() const {
    std::string out;
    for (size_t i = 1; i < tokens_.size(); ++i) out += "/" + tokens_[i];
    return out;
  }

  json* place(json v) {
    if (stack_.empty()) {
      *root_ = std::move(v);
      return root_;
    }
    json& top = *stack_.back();
    if (top.is_array()) {
      top.push_back(std::move(v));
      return &top.back();
    }
    *slot_ = std::move(v);
    return slot_;
  }

  void open(json::value_t type) {
    std::string token;
    if (!stack_.empty()) token = stack_.back()->is_array() ? std::to_string(stack_.back()->size()) : pointer_token(key_);
    json* child = place(json(type));
    stack_.push_back(child);
    tokens_.push_back(token);
    if (static_cast<int>(stack_.size()) > kMaxJsonDepth) {
      throw_input_error(where_, pointer(), "nested deeper than " + std::to_string(kMaxJsonDepth) + " levels",
                        "input files are flat records");
    }
  }

  void close() {
    stack_.pop_back();
    tokens_.pop_back();
  }

  json* root_;
  const std::string& text_;
  const std::string& where_;
  std::vector<json*> stack_;
  std::vector<std::string> tokens_;
  json* slot_ = nullptr;
  std::string key_;
};

}  // namespace

nlohmann::json parse_json_text(const std::string& text, const std::string& where) {
  json doc;
  StrictBuilder builder(&doc, text, where);
  json::sax_parse(text, &builder);
  return doc;
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input_error(path, "", "cannot open file", "check the path");
  std::ostringstream ss;
  ss << in.rdbuf();
  if (in.bad()) throw_input_error(path, "", "cannot read file", "is it a regular file?");
  return ss.str();
}

std::string pointer_token(const std::string& key) {
  std::string out;
  for (char ch : key) {
    if (ch == '~') out += "~0";
    else if (ch == '/') out += "~1";
    else out += ch;
  }
  return out;
}

std::string format_quantity(double value, Dimension dimension) {
  struct Unit {
    double factor;
    const char* name;
  };
  static const Unit kBytes[] = {{1125899906842624.0, "PiB"}, {1099511627776.0, "TiB"}, {1073741824.0, "GiB"},
                                {1048576.0, "MiB"}, {1024.0, "KiB"}, {1, "B"}};
  static const Unit kRates[] = {{1e15, "PB/s"}, {1e12, "TB/s"}, {1e9, "GB/s"}, {1e6, "MB/s"}, {1e3, "kB/s"}, {1, "B/s"}};
  static const Unit kFlops[] = {{1e18, "EFLOP/s"}, {1e15, "PFLOP/s"}, {1e12, "TFLOP/s"}, {1e9, "GFLOP/s"},
                                {1e6, "MFLOP/s"}, {1, "FLOP/s"}};
  static const Unit kTimes[] = {{86400, "d"}, {3600, "h"}, {60, "min"}, {1, "s"}, {1e-3, "ms"}, {1e-6, "us"},
                                {1e-9, "ns"}, {1e-12, "ps"}};
  const Unit* units = kBytes;
  size_t n = 6;
  switch (dimension) {
    case Dimension::kBytes: units = kBytes; n = 6; break;
    case Dimension::kByteRate: units = kRates; n = 6; break;
    case Dimension::kFlopRate: units = kFlops; n = 6; break;
    case Dimension::kDuration: units = kTimes; n = 8; break;
  }
  if (value == 0) {
    for (size_t i = 0; i < n; ++i) {
      if (units[i].factor == 1) return std::string("0") + units[i].name;
    }
  }
  for (size_t i = 0; i < n; ++i) {
    if (value >= units[i].factor || i + 1 == n) return number_text(value / units[i].factor) + units[i].name;
  }
  return number_text(value);
}

int64_t integer_value(const nlohmann::json& v, const std::string& where, const std::string& pointer, int64_t lo,
                      int64_t hi) {
  const std::string allowed = allowed_range(std::to_string(lo), std::to_string(hi));
  if (v.is_number_unsigned()) {
    const uint64_t u = v.get<uint64_t>();
    if (hi < 0 || u > static_cast<uint64_t>(hi)) throw_input_error(where, pointer, "out of range: " + std::to_string(u), allowed);
    const int64_t n = static_cast<int64_t>(u);
    if (n < lo) throw_input_error(where, pointer, "out of range: " + std::to_string(n), allowed);
    return n;
  }
  if (v.is_number_integer()) {
    const int64_t n = v.get<int64_t>();
    if (n < lo || n > hi) throw_input_error(where, pointer, "out of range: " + std::to_string(n), allowed);
    return n;
  }
  if (v.is_number_float()) {
    const double d = v.get<double>();
    // An integer literal beyond 64 bits reaches us as a double.
    if (std::floor(d) == d && std::fabs(d) >= 9.2e18) throw_input_error(where, pointer, "out of range: " + number_text(d), allowed);
    const std::string shown = std::floor(d) == d && std::fabs(d) < 1e15 ? number_text(d) + ".0" : number_text(d);
    throw_input_error(where, pointer, "expected an integer, got " + shown,
                      "write integers without a fraction or exponent; " + allowed);
  }
  throw_input_error(where, pointer, std::string("expected an integer, got ") + type_name(v), allowed);
}

JsonObject::JsonObject(const nlohmann::json& value, std::string where, std::string pointer)
    : value_(&value), where_(std::move(where)), pointer_(std::move(pointer)) {
  if (!value.is_object()) {
    throw_input_error(where_, pointer_.empty() ? "/" : pointer_,
                      std::string("expected an object, got ") + type_name(value), "");
  }
}

bool JsonObject::has(const std::string& key) const { return value_->contains(key); }

bool JsonObject::is_null(const std::string& key) {
  if (!has(key) || !value_->at(key).is_null()) return false;
  read_.insert(key);
  return true;
}

std::string JsonObject::pointer(const std::string& key) const { return pointer_ + "/" + pointer_token(key); }

const nlohmann::json& JsonObject::at(const std::string& key) {
  read_.insert(key);
  auto it = value_->find(key);
  if (it == value_->end()) throw_input_error(where_, pointer(key), "missing required key", "");
  return *it;
}

int64_t JsonObject::integer(const std::string& key, int64_t lo, int64_t hi) {
  return integer_value(at(key), where_, pointer(key), lo, hi);
}

std::optional<int64_t> JsonObject::optional_integer(const std::string& key, int64_t lo, int64_t hi) {
  read_.insert(key);
  if (!has(key)) return std::nullopt;
  return integer(key, lo, hi);
}

double JsonObject::number_in(const std::string& key, double lo, double hi) {
  const nlohmann::json& v = at(key);
  const std::string allowed = allowed_range(number_text(lo), number_text(hi));
  if (!v.is_number()) {
    throw_input_error(where_, pointer(key), std::string("expected a number, got ") + type_name(v), allowed);
  }
  const double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) throw_input_error(where_, pointer(key), "out of range: " + number_text(d), allowed);
  return d;
}

std::optional<double> JsonObject::optional_number_in(const std::string& key, double lo, double hi) {
  read_.insert(key);
  if (!has(key)) return std::nullopt;
  return number_in(key, lo, hi);
}

std::string JsonObject::string(const std::string& key) {
  const nlohmann::json& v = at(key);
  if (!v.is_string()) throw_input_error(where_, pointer(key), std::string("expected a string, got ") + type_name(v), "");
  return v.get<std::string>();
}

std::optional<std::string> JsonObject::optional_string(const std::string& key) {
  read_.insert(key);
  if (!has(key)) return std::nullopt;
  return string(key);
}

bool JsonObject::boolean(const std::string& key) {
  const nlohmann::json& v = at(key);
  if (!v.is_boolean()) throw_input_error(where_, pointer(key), std::string("expected true or false, got ") + type_name(v), "");
  return v.get<bool>();
}

std::optional<bool> JsonObject::optional_boolean(const std::string& key) {
  read_.insert(key);
  if (!has(key)) return std::nullopt;
  return boolean(key);
}

double JsonObject::quantity(const std::string& key, Dimension dimension, double lo, double hi) {
  const nlohmann::json& v = at(key);
  const std::string allowed = allowed_range(format_quantity(lo, dimension), format_quantity(hi, dimension));
  if (!v.is_string()) {
    std::string hint;
    switch (dimension) {
      case Dimension::kBytes: hint = "expected a string with a unit, e.g. \"80GiB\""; break;
      case Dimension::kByteRate: hint = "expected a string with a unit, e.g. \"450GB/s\""; break;
      case Dimension::kDuration: hint = "expected a string with a unit, e.g. \"2.5us\""; break;
      case Dimension::kFlopRate: hint = "expected a string with a unit, e.g. \"989TFLOP/s\""; break;
    }
    throw_input_error(where_, pointer(key),
                      v.is_number() ? "a bare number has no unit" : std::string("got ") + type_name(v), hint);
  }
  const std::string text = v.get<std::string>();
  const double q = parse_quantity(text, dimension, where_, pointer(key));
  if (q < lo || q > hi) throw_input_error(where_, pointer(key), "\"" + text + "\" is out of range", allowed);
  return q;
}

size_t JsonObject::choice(const std::string& key, const std::vector<std::string>& allowed) {
  const nlohmann::json& v = at(key);
  std::string hint = "allowed: " + join(allowed);
  if (!v.is_string()) throw_input_error(where_, pointer(key), std::string("expected a string, got ") + type_name(v), hint);
  std::string s = v.get<std::string>();
  for (size_t i = 0; i < allowed.size(); ++i) {
    if (allowed[i] == s) return i;
  }
  throw_input_error(where_, pointer(key), "unknown value \"" + s + "\"", hint);
}

std::optional<size_t> JsonObject::optional_choice(const std::string& key, const std::vector<std::string>& allowed) {
  read_.insert(key);
  if (!has(key)) return std::nullopt;
  return choice(key, allowed);
}

const nlohmann::json& JsonObject::array(const std::string& key) {
  const nlohmann::json& v = at(key);
  if (!v.is_array()) throw_input_error(where_, pointer(key), std::string("expected an array, got ") + type_name(v), "");
  return v;
}

JsonObject JsonObject::object(const std::string& key) {
  return JsonObject(at(key), where_, pointer(key));
}

std::optional<JsonObject> JsonObject::optional_object(const std::string& key) {
  read_.insert(key);
  if (!has(key)) return std::nullopt;
  return object(key);
}

void JsonObject::finish() const {
  std::vector<std::string> known(read_.begin(), read_.end());
  for (auto it = value_->begin(); it != value_->end(); ++it) {
    if (!read_.count(it.key())) {
      throw_input_error(where_, pointer(it.key()), "unknown key", "allowed: " + join(known));
    }
  }
}

}  // namespace detail
}  // namespace trainplan
