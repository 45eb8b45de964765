// trainplan: which parallel layout fits this model on this cluster, how fast
// it runs, and why the alternatives lose.
//
// Exit codes: 0 answered (including "this plan does not fit"), 1 a device or
// runtime failure (or wrong data in calibrate), 2 bad input.
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "planner/cli/commands.h"
#include "planner/cli/output.h"
#include "simulator/core/error.h"

namespace {

// CLI11 converts an integer that overflows int64 to its limit instead of
// failing ("--tp 99999999999999999999" would read as 2^63-1 and be
// reported as such).  Every integer option of every command gets a check on
// the text as typed, run before the conversion; each command then checks
// its own range.
void refuse_overflowing_integers(CLI::App* app) {
  for (CLI::Option* opt : app->get_options()) {
    if (opt->get_type_name() != "INT") continue;
    opt->check(CLI::Validator(
        [](std::string& text) -> std::string {
          errno = 0;
          char* end = nullptr;
          (void)std::strtoll(text.c_str(), &end, 10);
          if (text.empty() || *end != '\0') return "\"" + text + "\" is not an integer";
          if (errno == ERANGE) return "out of range: " + text + "; allowed: a 64-bit integer";
          return std::string();
        },
        "", "integer"));
  }
  for (CLI::App* sub : app->get_subcommands([](CLI::App*) { return true; })) refuse_overflowing_integers(sub);
}

#ifndef TRAINPLAN_WITH_BACKENDS
// `calibrate` and `validate` run in trainplan-backends (the executable that
// links MPI, CUDA, cuBLAS and NCCL), found next to this one: the process
// image is replaced with the same arguments, so mpirun's rank and
// environment carry over.  Returns only if that fails.
int exec_backends(int argc, char** argv) {
  char self[4096];
  const ssize_t n = readlink("/proc/self/exe", self, sizeof self - 1);
  std::string dir = ".";
  if (n > 0) {
    self[n] = '\0';
    dir = self;
    const size_t slash = dir.rfind('/');
    dir = slash == std::string::npos ? "." : dir.substr(0, slash);
  }
  const std::string path = dir + "/" + TRAINPLAN_BACKENDS_EXECUTABLE;
  std::vector<char*> args(argv, argv + argc);
  args.push_back(nullptr);
  execv(path.c_str(), args.data());
  std::fprintf(stderr,
               "trainplan: %s: needs %s next to trainplan (%s: %s); it holds the cpu (MPI) and cuda backends: build "
               "the whole project\n",
               argv[1], TRAINPLAN_BACKENDS_EXECUTABLE, path.c_str(), std::strerror(errno));
  return 2;
}
#endif

}  // namespace

int main(int argc, char** argv) {
#ifndef TRAINPLAN_WITH_BACKENDS
  if (argc >= 2 && (std::strcmp(argv[1], "calibrate") == 0 || std::strcmp(argv[1], "validate") == 0)) {
    return exec_backends(argc, argv);
  }
#endif
  CLI::App app{"trainplan: plan, simulate and validate distributed LLM training layouts"};
  app.require_subcommand(1);
  app.set_version_flag("--version", std::string("trainplan ") + trainplan::kVersion);
  int status = 0;
  trainplan::register_catalog_commands(&app, &status);
  trainplan::register_memory_command(&app, &status);
  trainplan::register_simulate_command(&app, &status);
  trainplan::register_recommend_command(&app, &status);
  trainplan::register_report_command(&app, &status);
  trainplan::register_export_command(&app, &status);
#ifdef TRAINPLAN_WITH_BACKENDS
  trainplan::register_calibrate_command(&app, &status, &argc, &argv);
  trainplan::register_validate_command(&app, &status, &argc, &argv);
#else
  // Listed in --help; main() hands them to trainplan-backends before parsing.
  app.add_subcommand("calibrate", "measure collectives, GEMMs and memory bandwidth; write calibration.json");
  app.add_subcommand("validate", "execute a plan on real devices and compare with the prediction");
#endif
  refuse_overflowing_integers(&app);
  int rc = 0;
  try {
    app.parse(argc, argv);
    rc = status;
  } catch (const CLI::CallForHelp& e) {
    rc = app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    rc = app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    rc = app.exit(e);
  } catch (const CLI::ParseError& e) {
    // CLI11 echoes the arguments: escaped like every other message.
    std::fprintf(stderr, "trainplan: %s\n", trainplan::escape_control(e.what()).c_str());
    rc = 2;
  } catch (const trainplan::InputError& e) {
    std::fprintf(stderr, "trainplan: %s\n", e.what());
    rc = 2;
  } catch (const std::exception& e) {
    // A device or runtime failure (CUDA, NCCL, MPI): not bad input.
    std::fprintf(stderr, "trainplan: error: %s\n", trainplan::escape_control(e.what()).c_str());
    rc = 1;
  }
  try {
    trainplan::check_stdout();
  } catch (const trainplan::InputError& e) {
    std::fprintf(stderr, "trainplan: %s\n", e.what());
    return 2;
  }
  return rc;
}
