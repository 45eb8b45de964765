#include "planner/cli/output.h"

#include <cmath>
#include <cstdio>
#include <fstream>

#include "simulator/core/error.h"

namespace trainplan {

void write_file_atomically(const std::string& path, const std::string& text, const std::string& flag) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    if (!out) throw_input_error(flag, "", "cannot write \"" + path + "\"", "check the folder exists and is writable");
    out << text;
    out.close();
    if (!out) {
      std::remove(tmp.c_str());
      throw_input_error(flag, "", "cannot write \"" + path + "\"", "disk full?");
    }
  }
  if (std::rename(tmp.c_str(), path.c_str()) != 0) {
    std::remove(tmp.c_str());
    throw_input_error(flag, "", "cannot rename onto \"" + path + "\"", "");
  }
}

std::string fixed(double x, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

double rounded(double x, int decimals) {
  double f = std::pow(10.0, decimals);
  return std::round(x * f) / f;
}

}  // namespace trainplan
