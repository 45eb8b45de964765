// Strict reading of JSON input files (private to the loaders' .cc files).
//
// JsonObject wraps one JSON object and records which keys were read; finish()
// rejects every key that was not, so unknown keys are errors.  Every error is
// an InputError "<file>: <json-pointer>: <problem>; <hint>".
#ifndef TRAINPLAN_SIM_SPEC_JSON_READER_H_
#define TRAINPLAN_SIM_SPEC_JSON_READER_H_

#include <cstdint>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "simulator/core/units.h"

namespace trainplan {
namespace detail {

// Parses text; throws InputError "<where>: malformed JSON at line L, column C;
// expected one JSON object" (the column of the last character read).
nlohmann::json parse_json_text(const std::string& text, const std::string& where);

// Reads a whole file; throws InputError if it cannot be read.
std::string read_text_file(const std::string& path);

class JsonObject {
 public:
  // Throws InputError if `value` is not an object.
  JsonObject(const nlohmann::json& value, std::string where, std::string pointer);

  bool has(const std::string& key) const;
  // Required/optional readers; each throws InputError naming where/pointer/key
  // on a missing key (required only) or a wrong type or range.
  int64_t positive_integer(const std::string& key);
  std::optional<int64_t> optional_positive_integer(const std::string& key);
  double positive_number(const std::string& key);  // finite, > 0
  std::optional<double> optional_number_in(const std::string& key, double lo, double hi);
  std::string string(const std::string& key);
  std::optional<std::string> optional_string(const std::string& key);
  bool boolean(const std::string& key);
  std::optional<bool> optional_boolean(const std::string& key);
  // A string with a unit of `dimension`, > 0 unless allow_zero.
  double quantity(const std::string& key, Dimension dimension, bool allow_zero = false);
  // One of `allowed`; returns its index.
  size_t choice(const std::string& key, const std::vector<std::string>& allowed);
  std::optional<size_t> optional_choice(const std::string& key, const std::vector<std::string>& allowed);
  // Marks an optional key as allowed without reading it.
  void allow(const std::string& key) { read_.insert(key); }
  // The raw value of a required key (marked as read).
  const nlohmann::json& raw(const std::string& key) { return at(key); }
  JsonObject object(const std::string& key);
  std::optional<JsonObject> optional_object(const std::string& key);
  // Keys of this object, in document order of nlohmann (sorted).
  std::vector<std::string> keys() const;
  // Throws InputError on the first key (sorted) that was never read.
  void finish() const;

  const std::string& where() const { return where_; }
  std::string pointer(const std::string& key) const;

 private:
  const nlohmann::json& at(const std::string& key);
  const nlohmann::json* value_;
  std::string where_;
  std::string pointer_;
  std::set<std::string> read_;
};

}  // namespace detail
}  // namespace trainplan

#endif  // TRAINPLAN_SIM_SPEC_JSON_READER_H_
