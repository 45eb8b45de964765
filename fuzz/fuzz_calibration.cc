// libFuzzer target: calibration.json (simulator/spec/calibration.cc),
// applied to a DGX A100 (as --calibration does) and used for a step.
#include "fuzz/fuzz_common.h"
#include "simulator/spec/calibration.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainplan;
  TRAINPLAN_FUZZ_BODY({
    Calibration c = parse_calibration(fuzz::text_of(data, size), "calibration.json");
    ClusterSpec cluster = fuzz::a100_cluster();
    // Whatever device it names, apply it (the type check is tested apart).
    c.gpu_type = gpu_type_of(cluster.gpu.name);
    c.complete = true;
    apply_calibration(c, "--calibration", &cluster);
    const ModelSpec& model = fuzz::tiny_model();
    fuzz::exercise(model, cluster, resolve_plan(model, cluster, 8, Plan{}));
  })
}
