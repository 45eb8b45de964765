// The trainplan subcommands.  Each register_* adds one subcommand to the app;
// its callback writes to stdout and stores the process exit code in *status.
// Bad input throws InputError, caught once in main().
#ifndef TRAINPLAN_PLANNER_CLI_COMMANDS_H_
#define TRAINPLAN_PLANNER_CLI_COMMANDS_H_

namespace CLI {
class App;
}

namespace trainplan {

void register_catalog_commands(CLI::App* app, int* status);  // models, clusters
void register_memory_command(CLI::App* app, int* status);
void register_simulate_command(CLI::App* app, int* status);
void register_recommend_command(CLI::App* app, int* status);
void register_report_command(CLI::App* app, int* status);
void register_export_command(CLI::App* app, int* status);
// calibrate and validate start a backend (MPI_Init takes argc/argv).
void register_calibrate_command(CLI::App* app, int* status, int* argc, char*** argv);
void register_validate_command(CLI::App* app, int* status, int* argc, char*** argv);

}  // namespace trainplan

#endif  // TRAINPLAN_PLANNER_CLI_COMMANDS_H_
