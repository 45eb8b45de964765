#include "simulator/spec/data_dir.h"

#include <algorithm>
#include <cstdlib>
#include <filesystem>

#include "simulator/core/error.h"

namespace trainplan {

namespace fs = std::filesystem;

std::string data_dir() {
  const char* env = std::getenv("TRAINPLAN_DATA_DIR");
  if (env != nullptr && *env != '\0') return env;
  return TRAINPLAN_DEFAULT_DATA_DIR;
}

std::vector<std::string> list_data_names(const std::string& subdir) {
  std::vector<std::string> names;
  std::error_code ec;
  fs::path dir = fs::path(data_dir()) / subdir;
  for (const auto& entry : fs::directory_iterator(dir, ec)) {
    if (entry.path().extension() == ".json") names.push_back(entry.path().stem().string());
  }
  std::sort(names.begin(), names.end());
  return names;
}

std::string resolve_data_file(const std::string& subdir, const std::string& name_or_path, const std::string& where,
                              const std::string& pointer, const std::string& what) {
  bool is_path = name_or_path.find('/') != std::string::npos ||
                 (name_or_path.size() > 5 && name_or_path.compare(name_or_path.size() - 5, 5, ".json") == 0);
  if (is_path) {
    if (!fs::exists(name_or_path)) throw_input_error(where, pointer, "no such file \"" + name_or_path + "\"", "");
    return name_or_path;
  }
  fs::path p = fs::path(data_dir()) / subdir / (name_or_path + ".json");
  if (fs::exists(p)) return p.string();
  std::string known;
  for (const std::string& n : list_data_names(subdir)) known += (known.empty() ? "" : ", ") + n;
  throw_input_error(where, pointer, "unknown " + what + " \"" + name_or_path + "\"",
                    "known: " + (known.empty() ? std::string("(none found in ") + data_dir() + "/" + subdir + ")" : known));
}

}  // namespace trainplan
