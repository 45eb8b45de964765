// Errors of trainplan.
//
// Bad input (JSON files, CLI flags, plan files) is reported with one exception
// type, InputError, whose message has the fixed format
//   <file>: <json-pointer>: <problem>; <hint>
// (or "--flag: <problem>; <hint>" for command-line input), control
// characters escaped.  main() catches it
// once, prints the message on one line of stderr and returns exit code 2.
//
// Internal invariants use TRAINPLAN_CHECK, which stays on in release builds
// and aborts with file:line and the message (SimGrid xbt_assert).
#ifndef TRAINPLAN_SIM_CORE_ERROR_H_
#define TRAINPLAN_SIM_CORE_ERROR_H_

#include <stdexcept>
#include <string>

namespace trainplan {

class InputError : public std::runtime_error {
 public:
  explicit InputError(const std::string& message) : std::runtime_error(message) {}
};

// A simulated quantity beyond what the engine represents (a time longer
// than Duration's +-106 days of int64 picoseconds): the inputs describe a
// run no one would start.  main() reports it as bad input (exit 2); the
// search drops the plan with the reason.
class RangeError : public InputError {
 public:
  using InputError::InputError;
};

// Returns `text` with control characters (bytes below 0x20 and 0x7f) written
// as \n, \r, \t or \xHH, so that input echoed into a message keeps it on
// one line and cannot move the terminal's cursor.
std::string escape_control(const std::string& text);

// Returns "<where>: <pointer>: <problem>; <hint>" with empty parts left out
// and control characters escaped.
std::string format_input_error(const std::string& where, const std::string& pointer,
                               const std::string& problem, const std::string& hint);

// Throws InputError(format_input_error(...)).
[[noreturn]] void throw_input_error(const std::string& where, const std::string& pointer,
                                    const std::string& problem, const std::string& hint = "");

namespace detail {
[[noreturn]] void check_failed(const char* file, int line, const char* cond, const std::string& msg);
}  // namespace detail

}  // namespace trainplan

#define TRAINPLAN_CHECK(cond, msg)                                                   \
  do {                                                                               \
    if (!(cond)) ::trainplan::detail::check_failed(__FILE__, __LINE__, #cond, (msg)); \
  } while (0)

#endif  // TRAINPLAN_SIM_CORE_ERROR_H_
