// Shared test fixtures: a cluster whose communication is negligible and a
// small GPT, built in code so the tests do not depend on data files.
#ifndef TRAINPLAN_TESTS_SIMULATOR_FIXTURES_H_
#define TRAINPLAN_TESTS_SIMULATOR_FIXTURES_H_

#include <algorithm>
#include <functional>
#include <string>
#include <vector>

#include "simulator/cost/layer_cost.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {
namespace testing {

// Whether one of an infeasible layout's reasons contains `part`.
inline bool reasons_mention(const Layout& layout, const std::string& part) {
  for (const std::string& r : layout.reasons) {
    if (r.find(part) != std::string::npos) return true;
  }
  return false;
}

// Megatron-Bridge's Qwen3-30B-A3B layout on 8 GPUs (shared/reference
// published_moe_dev.json, the mbridge_*_Qwen3_30B_A3B_8gpu_mxfp8 rows): ep 8,
// mbs 4, 4,096 tokens, FP8 (MXFP8, the default recipe on Blackwell), ZeRO-1,
// Megatron-Core.
inline Plan qwen3_30b_8gpu_fp8_layout() {
  Plan p;
  p.framework = Framework::kMegatronCore;
  p.ep = 8;
  p.etp = 1;
  p.mbs = 4;
  p.gbs = 512;
  p.seq = 4096;
  p.zero = 1;
  set_precision("fp8", &p);
  p.attention = Attention::kFlash;
  return p;
}

// A layer's host calls (OpCost::host_calls summed over its ops).
inline double layer_host_calls(const LayerCost& c) {
  double n = 0;
  for (const OpCost& op : c.ops) n += op.host_calls;
  return n;
}

// 1e15 B/s links with zero latency and a slow (10 TFLOP/s) GPU: NCCL's fixed
// call latency is negligible next to the compute, so pipeline bubbles come out
// as in the closed forms.  16 SMs: the small GEMMs fill whole waves.
inline ClusterSpec fast_links_cluster() {
  ClusterSpec c;
  c.name = "fast-links-test";
  c.gpu.name = "TEST-GPU";
  c.gpu.memory = static_cast<Bytes>(1024 * kGiB);
  c.gpu.hbm_bandwidth = Bandwidth::gigabytes_per_s(3000);
  c.gpu.peak[Dtype::kBf16] = FlopRate::teraflop_per_s(10);
  c.gpu.peak[Dtype::kFp16] = FlopRate::teraflop_per_s(10);
  c.gpu.peak[Dtype::kFp32] = FlopRate::teraflop_per_s(5);
  c.gpu.gemm_efficiency = 0.8;
  c.gpu.hbm_efficiency = 0.85;
  c.gpu.sm_count = 16;
  c.gpus_per_node = 8;
  c.intra_node.fabric = IntraFabric::kNvswitch;
  c.intra_node.bandwidth = Bandwidth::bytes_per_s(1e15);
  c.intra_node.latency = Duration();
  InterNodeSpec net;
  net.fabric = InterFabric::kInfiniband;
  net.nics_per_node = 8;
  net.nic_bandwidth = Bandwidth::bytes_per_s(1e15);
  net.latency = Duration();
  net.oversubscription = 1.0;
  net.nodes_per_leaf = 32;
  c.inter_node = net;
  c.host.memory = static_cast<Bytes>(2048 * kGiB);
  c.host.bandwidth_per_gpu = Bandwidth::gigabytes_per_s(50);
  return c;
}

// A small GPT: h = 1024, 16 heads, s = 1024 and a 128-token vocabulary so
// the embedding and logits are negligible next to a layer.
inline ModelSpec small_gpt(int64_t layers) {
  ModelSpec m;
  m.name = "gpt-small-test";
  m.layers = layers;
  m.hidden = 1024;
  m.heads = 16;
  m.kv_heads = 16;
  m.ffn_hidden = 4096;
  m.vocab = 128;
  m.seq_len = 1024;
  m.mlp = MlpKind::kGelu;
  return m;
}

// The costliest stage of a pipeline split: its layers' work, the first stage
// also `first`, the last also `last` (work_balanced_stage_layers' objective,
// written out for the brute forces).
inline double costliest_stage(const std::vector<double>& work, const std::vector<int>& stages, double first,
                              double last) {
  double worst = 0;
  size_t at = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    double sum = (s == 0 ? first : 0.0) + (s + 1 == stages.size() ? last : 0.0);
    for (int k = 0; k < stages[s]; ++k) sum += work[at++];
    worst = std::max(worst, sum);
  }
  return worst;
}

// Calls fn with every split of `layers` into `pp` non-empty stages (a brute
// force: C(layers - 1, pp - 1) splits).
inline void for_each_split(int layers, int pp, const std::function<void(const std::vector<int>&)>& fn) {
  std::vector<int> split(static_cast<size_t>(pp), 0);
  std::function<void(int, int)> place = [&](int s, int left) {
    if (s == pp - 1) {
      split[static_cast<size_t>(s)] = left;
      fn(split);
      return;
    }
    for (int n = 1; n <= left - (pp - 1 - s); ++n) {
      split[static_cast<size_t>(s)] = n;
      place(s + 1, left - n);
    }
  };
  if (pp >= 1 && layers >= pp) place(0, layers);
}

}  // namespace testing
}  // namespace trainplan

#endif  // TRAINPLAN_TESTS_SIMULATOR_FIXTURES_H_
