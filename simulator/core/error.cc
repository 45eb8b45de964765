#include "simulator/core/error.h"

#include <cstdio>
#include <cstdlib>

namespace trainplan {

std::string format_input_error(const std::string& where, const std::string& pointer,
                               const std::string& problem, const std::string& hint) {
  std::string out;
  if (!where.empty()) out += where + ": ";
  if (!pointer.empty()) out += pointer + ": ";
  out += problem;
  if (!hint.empty()) out += "; " + hint;
  return out;
}

void throw_input_error(const std::string& where, const std::string& pointer,
                       const std::string& problem, const std::string& hint) {
  throw InputError(format_input_error(where, pointer, problem, hint));
}

namespace detail {
void check_failed(const char* file, int line, const char* cond, const std::string& msg) {
  std::fprintf(stderr, "%s:%d: internal check failed: %s: %s\n", file, line, cond, msg.c_str());
  std::abort();
}
}  // namespace detail

}  // namespace trainplan
