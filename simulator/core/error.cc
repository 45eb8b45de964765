#include "simulator/core/error.h"

#include <cstdio>
#include <cstdlib>

namespace trainplan {

std::string escape_control(const std::string& text) {
  std::string out;
  out.reserve(text.size());
  for (unsigned char ch : text) {
    if (ch == '\n') out += "\\n";
    else if (ch == '\r') out += "\\r";
    else if (ch == '\t') out += "\\t";
    else if (ch < 0x20 || ch == 0x7f) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\x%02x", ch);
      out += buf;
    } else {
      out += static_cast<char>(ch);
    }
  }
  return out;
}

std::string format_input_error(const std::string& where, const std::string& pointer,
                               const std::string& problem, const std::string& hint) {
  std::string out;
  if (!where.empty()) out += where + ": ";
  if (!pointer.empty()) out += pointer + ": ";
  out += problem;
  if (!hint.empty()) out += "; " + hint;
  return escape_control(out);
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
