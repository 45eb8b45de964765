// trainplan: which parallel layout fits this model on this cluster, how fast
// it runs, and why the alternatives lose.
//
// Exit codes: 0 answered (including "this plan does not fit"), 1 a device or
// runtime failure (or wrong data in calibrate), 2 bad input.
#include <cstdio>
#include <exception>
#include <string>

#include <CLI/CLI.hpp>

#include "planner/cli/commands.h"
#include "planner/cli/output.h"
#include "simulator/core/error.h"

int main(int argc, char** argv) {
  CLI::App app{"trainplan: plan, simulate and validate distributed LLM training layouts"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("trainplan ") + trainplan::kVersion);
  int status = 0;
  trainplan::register_catalog_commands(&app, &status);
  trainplan::register_memory_command(&app, &status);
  trainplan::register_simulate_command(&app, &status);
  trainplan::register_recommend_command(&app, &status);
  trainplan::register_export_command(&app, &status);
  trainplan::register_calibrate_command(&app, &status, &argc, &argv);
  trainplan::register_validate_command(&app, &status, &argc, &argv);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "trainplan: %s\n", e.what());
    return 2;
  } catch (const trainplan::InputError& e) {
    std::fprintf(stderr, "trainplan: %s\n", e.what());
    return 2;
  } catch (const std::exception& e) {
    // A device or runtime failure (CUDA, NCCL, MPI): not bad input.
    std::fprintf(stderr, "trainplan: error: %s\n", e.what());
    return 1;
  }
  return status;
}
