// (being written)
#include "planner/cli/commands.h"
namespace trainplan {
void register_export_command(CLI::App*, int*) {}
}  // namespace trainplan
