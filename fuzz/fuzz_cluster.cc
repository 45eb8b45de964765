// libFuzzer target: cluster JSON (simulator/spec/cluster.cc), then a tiny
// model on one node and on two nodes of it.
#include "fuzz/fuzz_common.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace trainplan;
  TRAINPLAN_FUZZ_BODY({
    const ClusterSpec cluster = parse_cluster(fuzz::text_of(data, size), "cluster.json");
    const ModelSpec& model = fuzz::tiny_model();
    for (int64_t nodes : {1, 2}) {
      if (nodes > 1 && !cluster.inter_node) continue;
      const int gpus = gpus_of_nodes(cluster, nodes);
      if (gpus > 64) continue;
      const Layout layout = resolve_plan(model, cluster, gpus, Plan{});
      fuzz::exercise(model, cluster, layout);
    }
  })
}
