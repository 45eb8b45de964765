#include "simulator/core/spec_items.h"

#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <set>
#include <sstream>

#include "simulator/core/error.h"

namespace trainplan {

std::vector<std::string> split_on(const std::string& text, char sep) {
  std::vector<std::string> parts;
  std::string part;
  std::stringstream ss(text);
  while (std::getline(ss, part, sep)) parts.push_back(part);
  if (!text.empty() && text.back() == sep) parts.push_back("");
  return parts;
}

std::vector<SpecItem> spec_items(const std::string& text, const std::string& flag, const std::string& grammar) {
  if (text.empty()) throw_input_error(flag, "", "empty specification", grammar);
  std::vector<SpecItem> items;
  std::set<std::string> seen;
  for (const std::string& item : split_on(text, ',')) {
    const size_t eq = item.find('=');
    if (item.empty() || eq == std::string::npos) throw_input_error(flag, "", "\"" + item + "\" is not KEY=VALUE", grammar);
    SpecItem s{item, item.substr(0, eq), item.substr(eq + 1)};
    if (!seen.insert(s.key).second) throw_input_error(flag, "", "\"" + s.key + "\" given twice", grammar);
    items.push_back(std::move(s));
  }
  return items;
}

double spec_number(const std::string& text, const std::string& flag, const std::string& item,
                   const std::string& grammar) {
  const char* begin = text.c_str();
  char* end = nullptr;
  errno = 0;
  const double v = std::strtod(begin, &end);
  if (text.empty() || end != begin + text.size() || errno != 0 || !std::isfinite(v) ||
      std::isspace(static_cast<unsigned char>(text[0]))) {
    throw_input_error(flag, "", item + ": \"" + text + "\" is not a number", grammar);
  }
  return v;
}

}  // namespace trainplan
