// libFuzzer target: plan.json (planner/plan/plan_file.cc), resolved for the
// tiny model on DGX A100 nodes with the file's GPU count.
#include "fuzz/fuzz_common.h"
#include "planner/plan/plan_file.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainplan;
  TRAINPLAN_FUZZ_BODY({
    const PlanFile file = parse_plan_file(fuzz::text_of(data, size), "plan.json");
    const ClusterSpec& cluster = fuzz::a100_cluster();
    const ModelSpec& model = fuzz::tiny_model();
    check_gpu_count(cluster, file.gpus, "plan.json", "/gpus");
    const Layout layout = resolve_plan(model, cluster, file.gpus, file.plan);
    fuzz::exercise(model, cluster, layout);
  })
}
