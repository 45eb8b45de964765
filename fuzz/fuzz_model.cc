// libFuzzer target: model JSON (simulator/spec/model.cc), then the default
// plan of the model on one DGX A100 node and on 1..8 GPUs with TP where it
// divides.
#include "fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainplan;
  TRAINPLAN_FUZZ_BODY({
    const ModelSpec model = parse_model(fuzz::text_of(data, size), "model.json");
    const ClusterSpec& cluster = fuzz::a100_cluster();
    for (int tp : {1, 8}) {
      Plan plan;
      plan.tp = tp;
      plan.seq = std::min<int64_t>(model.seq_len, 4096);
      const Layout layout = resolve_plan(model, cluster, 8, plan);
      fuzz::exercise(model, cluster, layout);
    }
  })
}
