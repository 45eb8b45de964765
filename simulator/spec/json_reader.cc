#include "simulator/spec/json_reader.h"

#include <cmath>
#include <fstream>
#include <sstream>

#include "simulator/core/error.h"

namespace trainplan {
namespace detail {

namespace {

const char* type_name(const nlohmann::json& v) {
  if (v.is_boolean()) return "a boolean";
  if (v.is_number_integer() || v.is_number_unsigned()) return "an integer";
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

}  // namespace

nlohmann::json parse_json_text(const std::string& text, const std::string& where) {
  try {
    return nlohmann::json::parse(text);
  } catch (const nlohmann::json::parse_error& e) {
    // Turn the byte offset into line and column.
    size_t line = 1, column = 1;
    for (size_t i = 0; i + 1 < e.byte && i < text.size(); ++i) {
      if (text[i] == '\n') { ++line; column = 1; } else { ++column; }
    }
    throw_input_error(where, "", "malformed JSON at line " + std::to_string(line) + ", column " +
                                     std::to_string(column),
                      "expected one JSON object");
  }
}

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw_input_error(path, "", "cannot open file", "check the path");
  std::ostringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

JsonObject::JsonObject(const nlohmann::json& value, std::string where, std::string pointer)
    : value_(&value), where_(std::move(where)), pointer_(std::move(pointer)) {
  if (!value.is_object()) {
    throw_input_error(where_, pointer_.empty() ? "/" : pointer_,
                      std::string("expected an object, got ") + type_name(value), "");
  }
}

bool JsonObject::has(const std::string& key) const { return value_->contains(key); }

std::string JsonObject::pointer(const std::string& key) const { return pointer_ + "/" + key; }

const nlohmann::json& JsonObject::at(const std::string& key) {
  read_.insert(key);
  auto it = value_->find(key);
  if (it == value_->end()) throw_input_error(where_, pointer(key), "missing required key", "");
  return *it;
}

int64_t JsonObject::positive_integer(const std::string& key) {
  const nlohmann::json& v = at(key);
  if (!(v.is_number_integer() || v.is_number_unsigned())) {
    throw_input_error(where_, pointer(key), std::string("expected a positive integer, got ") + type_name(v), "");
  }
  if (v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX / 4)) {
    throw_input_error(where_, pointer(key), "integer is too large", "");
  }
  int64_t n = v.get<int64_t>();
  if (n <= 0) throw_input_error(where_, pointer(key), "must be > 0, got " + std::to_string(n), "");
  if (n > (int64_t{1} << 40)) throw_input_error(where_, pointer(key), "integer is too large", "at most 2^40");
  return n;
}

std::optional<int64_t> JsonObject::optional_positive_integer(const std::string& key) {
  read_.insert(key);
  if (!has(key)) return std::nullopt;
  return positive_integer(key);
}

double JsonObject::positive_number(const std::string& key) {
  const nlohmann::json& v = at(key);
  if (!v.is_number()) throw_input_error(where_, pointer(key), std::string("expected a number, got ") + type_name(v), "");
  double d = v.get<double>();
  if (!std::isfinite(d) || d <= 0) throw_input_error(where_, pointer(key), "must be a finite number > 0", "");
  return d;
}

std::optional<double> JsonObject::optional_number_in(const std::string& key, double lo, double hi) {
  read_.insert(key);
  if (!has(key)) return std::nullopt;
  const nlohmann::json& v = at(key);
  if (!v.is_number()) throw_input_error(where_, pointer(key), std::string("expected a number, got ") + type_name(v), "");
  double d = v.get<double>();
  if (!std::isfinite(d) || d < lo || d > hi) {
    std::ostringstream hint;
    hint << "allowed: " << lo << " to " << hi;
    throw_input_error(where_, pointer(key), "out of range", hint.str());
  }
  return d;
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

double JsonObject::quantity(const std::string& key, Dimension dimension, bool allow_zero) {
  const nlohmann::json& v = at(key);
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
  double q = parse_quantity(v.get<std::string>(), dimension, where_, pointer(key));
  if (q == 0 && !allow_zero) throw_input_error(where_, pointer(key), "must be > 0", "");
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

JsonObject JsonObject::object(const std::string& key) {
  return JsonObject(at(key), where_, pointer(key));
}

std::optional<JsonObject> JsonObject::optional_object(const std::string& key) {
  read_.insert(key);
  if (!has(key)) return std::nullopt;
  return object(key);
}

std::vector<std::string> JsonObject::keys() const {
  std::vector<std::string> out;
  for (auto it = value_->begin(); it != value_->end(); ++it) out.push_back(it.key());
  return out;
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
