// Where the built-in models/ and topologies/ live, and name -> file lookup.
//
// The data folder is $TRAINPLAN_DATA_DIR when set, else the source tree the
// binary was built from (CMake's TRAINPLAN_DATA_DIR).
#ifndef TRAINPLAN_SIM_SPEC_DATA_DIR_H_
#define TRAINPLAN_SIM_SPEC_DATA_DIR_H_

#include <string>
#include <vector>

namespace trainplan {

std::string data_dir();

// Names (file stems) of the *.json files in <data_dir>/<subdir>, sorted.
std::vector<std::string> list_data_names(const std::string& subdir);

// Returns the path for `name_or_path`: a path if it contains '/' or ends in
// ".json" (must exist), else <data_dir>/<subdir>/<name>.json.
// Throws InputError "<where>: <pointer>: unknown <what> "x"; known: a, b, c"
// if not found; `where` and `pointer` name the flag ("--model", "") or the
// file field ("plan.json", "/model") the name came from.
std::string resolve_data_file(const std::string& subdir, const std::string& name_or_path, const std::string& where,
                              const std::string& pointer, const std::string& what);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_SPEC_DATA_DIR_H_
