// Strict reading of JSON input files (private to the loaders' .cc files).
//
// parse_json_text() is the one JSON parser of every input file: it rejects
// what nlohmann would accept silently or report with its own exception
// (duplicate keys, where the last one would win; numbers outside double
// range such as 1e400; nesting deeper than kMaxJsonDepth) with the file,
// line and column or the JSON pointer.
//
// JsonObject wraps one JSON object and records which keys were read; finish()
// rejects every key that was not, so unknown keys are errors.  Every reader
// takes the range the field allows, so a value that reaches an int, an
// int64 product or a Duration is bounded where it is read.  Every error is an
// InputError "<file>: <json-pointer>: <problem>; <hint>".
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

// Input files are flat records; anything nested deeper is not ours.
constexpr int kMaxJsonDepth = 32;

// Parses text; throws InputError "<where>: malformed JSON at line L, column
// C; expected one JSON object", "<where>: line L, column C: number 1e400 is
// out of range ...", "<where>: <pointer>: duplicate key ..." or
// "<where>: line L, column C: nested deeper than 32 levels".
nlohmann::json parse_json_text(const std::string& text, const std::string& where);

// Reads a whole file; throws InputError if it cannot be read.
std::string read_text_file(const std::string& path);

// "/a/b~1c": one RFC 6901 reference token ('~' -> "~0", '/' -> "~1").
std::string pointer_token(const std::string& key);

class JsonObject {
 public:
  // Throws InputError if `value` is not an object.
  JsonObject(const nlohmann::json& value, std::string where, std::string pointer);

  bool has(const std::string& key) const;
  // True when the key is present with the value null (marks it read).
  bool is_null(const std::string& key);
  // Required/optional readers; each throws InputError naming where/pointer/key
  // on a missing key (required only), a wrong type or a value out of range.
  // Integers must be written as integers (no fraction or exponent) and lie
  // in [lo, hi].
  int64_t integer(const std::string& key, int64_t lo, int64_t hi);
  std::optional<int64_t> optional_integer(const std::string& key, int64_t lo, int64_t hi);
  // A finite number in [lo, hi] (integers are numbers too).
  double number_in(const std::string& key, double lo, double hi);
  std::optional<double> optional_number_in(const std::string& key, double lo, double hi);
  std::string string(const std::string& key);
  std::optional<std::string> optional_string(const std::string& key);
  bool boolean(const std::string& key);
  std::optional<bool> optional_boolean(const std::string& key);
  // A string with a unit of `dimension`, in [lo, hi] of its base unit
  // (bytes, bytes/s, seconds, FLOP/s); "0" needs lo == 0.
  double quantity(const std::string& key, Dimension dimension, double lo, double hi);
  // One of `allowed`; returns its index.
  size_t choice(const std::string& key, const std::vector<std::string>& allowed);
  std::optional<size_t> optional_choice(const std::string& key, const std::vector<std::string>& allowed);
  // The raw value of a required key (marked as read), checked to be an array.
  const nlohmann::json& array(const std::string& key);
  // Marks an optional key as allowed without reading it.
  void allow(const std::string& key) { read_.insert(key); }
  JsonObject object(const std::string& key);
  std::optional<JsonObject> optional_object(const std::string& key);
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

// One integer value (an array element): the rules of JsonObject::integer.
int64_t integer_value(const nlohmann::json& value, const std::string& where, const std::string& pointer, int64_t lo,
                      int64_t hi);

// "1MiB", "2.5us", "989TFLOP/s": a base-unit value with the unit of
// `dimension` and the largest prefix that keeps it >= 1 (for range hints).
std::string format_quantity(double value, Dimension dimension);

}  // namespace detail
}  // namespace trainplan

#endif  // TRAINPLAN_SIM_SPEC_JSON_READER_H_
