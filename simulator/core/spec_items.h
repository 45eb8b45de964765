// The small "KEY=VALUE[,KEY=VALUE...]" option languages (--stragglers,
// --convergence): splitting, the item checks and numbers, with one error
// format: "<flag>: <problem>; <grammar>".
#ifndef TRAINPLAN_SIM_CORE_SPEC_ITEMS_H_
#define TRAINPLAN_SIM_CORE_SPEC_ITEMS_H_

#include <string>
#include <vector>

namespace trainplan {

// `text` split at every `sep`; a trailing separator gives a last empty part.
std::vector<std::string> split_on(const std::string& text, char sep);

struct SpecItem {
  std::string item;   // as written, "key=value"
  std::string key, value;
};

// The items of a comma-separated spec.  Throws InputError(flag) for an empty
// spec, an item that is not KEY=VALUE, or a key given twice.
std::vector<SpecItem> spec_items(const std::string& text, const std::string& flag, const std::string& grammar);

// The whole of `text` as a finite number (no leading space); else throws
// InputError("<flag>: <item>: \"<text>\" is not a number; <grammar>").
double spec_number(const std::string& text, const std::string& flag, const std::string& item,
                   const std::string& grammar);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_CORE_SPEC_ITEMS_H_
