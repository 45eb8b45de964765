// What every libFuzzer target of the input readers shares (fuzz/README.md).
//
// A target feeds the bytes to one reader and, when they are accepted, on
// through the code the accepted value reaches (resolve, memory, step
// costs, a small simulation), so that a value the reader lets through but
// the model cannot handle is found too.  InputError (bad input, including
// RangeError for a step beyond the engine's range) is the one allowed
// outcome besides success; any other exception, an abort, a sanitizer
// report or a hang is a finding.
#ifndef TRAINPLAN_FUZZ_FUZZ_COMMON_H_
#define TRAINPLAN_FUZZ_FUZZ_COMMON_H_

#include <cstddef>
#include <cstdint>
#include <string>

#include "simulator/core/error.h"
#include "simulator/memory/memory_model.h"
#include "simulator/report/step_report.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"
#include "simulator/taskgraph/step_costs.h"

namespace trainplan {
namespace fuzz {

inline std::string text_of(const uint8_t* data, size_t size) {
  return std::string(reinterpret_cast<const char*>(data), size);
}

// The built-in files a target combines the fuzzed one with (loaded once).
inline const ModelSpec& tiny_model() {
  static const ModelSpec m = load_model("gpt-tiny");
  return m;
}
inline const ClusterSpec& a100_cluster() {
  static const ClusterSpec c = load_cluster("dgx-a100");
  return c;
}

// Runs what a user's command would run on an accepted layout, bounded so
// that one input stays in the milliseconds: memory and step costs always,
// the simulation for small jobs.
inline void exercise(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout) {
  if (!layout.feasible) return;
  (void)estimate_memory(model, cluster, layout);
  (void)step_costs(model, cluster, layout.plan);
  if (layout.gpus <= 64 && layout.microbatches <= 64 && model.layers <= 64) {
    SimulateOptions options;
    (void)simulate_step(model, cluster, layout, options);
  }
}

}  // namespace fuzz
}  // namespace trainplan

// Catches the one allowed failure; everything else escapes to libFuzzer.
#define TRAINPLAN_FUZZ_BODY(body)          \
  try {                                    \
    body                                   \
  } catch (const trainplan::InputError&) { \
  }                                        \
  return 0;

#endif  // TRAINPLAN_FUZZ_FUZZ_COMMON_H_
