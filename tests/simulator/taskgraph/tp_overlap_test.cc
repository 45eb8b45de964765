// Tests of tensor-parallel communication overlapped with the GEMMs
// (Megatron-Core --tp-comm-overlap, Transformer Engine's userbuffers; issue
// 9): the exposed TP time of a layer against the arithmetic of TE's
// overlap schedules, the bounds no overlap can beat, and the rules that
// refuse the flag where Megatron or TE would.
#include <catch2/catch.hpp>

#include <algorithm>
#include <string>

#include "simulator/compute/compute_model.h"
#include "simulator/framework/framework.h"
#include "simulator/network/collective_model.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/taskgraph/step_costs.h"

namespace trainplan {
namespace {

using Catch::Matchers::WithinRel;

Plan tp8_sp(bool overlap) {
  // Llama 2 7B, TP 8 with sequence parallelism on one DGX H100, one
  // 4096-token sequence per micro-batch, as Megatron-Core runs it.
  Plan p;
  p.tp = 8;
  p.sp = true;
  p.mbs = 1;
  p.seq = 4096;
  p.framework = Framework::kMegatronCore;
  p.tp_comm_overlap = overlap;
  return p;
}

const OpCost& op_named(const LayerCost& lc, const std::string& name) {
  const auto it = std::find_if(lc.ops.begin(), lc.ops.end(), [&](const OpCost& o) { return o.name == name; });
  REQUIRE(it != lc.ops.end());
  return *it;
}

TEST_CASE("TP overlap: a layer's exposed TP time follows Transformer Engine's overlap schedules",
          "[sim][tpoverlap]") {
  const ModelSpec model = load_model("llama2-7b");
  const ClusterSpec cluster = load_cluster("dgx-h100");
  const Layout on = resolve_plan(model, cluster, 8, tp8_sp(true));
  const Layout off = resolve_plan(model, cluster, 8, tp8_sp(false));
  REQUIRE(on.feasible);
  REQUIRE(off.feasible);
  const StepCosts with = step_costs(model, cluster, on.plan);
  const StepCosts without = step_costs(model, cluster, off.plan);

  // Each sequence-parallel collective moves the layer's [s, b, h] activation
  // in bf16: 4096 x 1 x 4096 x 2 B = 32 MiB (Korthikanti et al. 2022 Sec. 4.2.2).
  const double buffer = 4096.0 * 4096 * 2;
  const GroupPlacement node = group_placement(8, 8, cluster);
  const LinkParams links = link_params(cluster);
  const double ag = static_cast<double>(collective_cost(Collective::kAllGather, static_cast<Bytes>(buffer), node, links).time.ps());
  const double rs =
      static_cast<double>(collective_cost(Collective::kReduceScatter, static_cast<Bytes>(buffer), node, links).time.ps());
  // Without the overlap the forward pays them all: two all-gathers (before
  // QKV and FC1) and two reduce-scatters (after the projection and FC2).
  CHECK_THAT(static_cast<double>(without.layer_times.tp_comm_forward_ps), WithinRel(2 * ag + 2 * rs, 1e-9));

  const ComputeParams cpm = compute_params(cluster, Precision::kBf16);
  const double launch = static_cast<double>(cpm.kernel_overhead.ps());
  const double k = 8;                                            // ring exchange: tp chunks
  const double splits = kTePipelineSplits;                       // pipeline: 4 chunks
  const double narrow = 132.0 / (132.0 - kTeOverlapCommSms);    // H100 SXM: 132 SMs, 16 for the comm kernel
  auto fwd = [&](const char* name) { return static_cast<double>(op_forward_time(cpm, op_named(with.layer, name)).ps()); };
  // Ring exchange (qkv_fprop, fc1_fprop): the GEMM in k chunks (k - 1 more
  // launches); chunk 0 is local, chunk i + 1 arrives over one ring step
  // (ag / (k - 1)) while chunk i computes; the last chunk computes alone.
  auto ring = [&](double gemm, double comm) {
    const double g = (gemm + (k - 1) * launch) / k;
    return (k - 1) * std::max(g, comm / (k - 1)) + g - gemm;
  };
  // Pipeline (proj_fprop, fc2_fprop): the GEMM on 132 - 16 SMs in 4 chunks,
  // each chunk's reduce-scatter (rs / 4) behind the next chunk's GEMM; the
  // first chunk's GEMM and the last chunk's reduce-scatter are exposed.
  auto pipe = [&](double gemm, double comm) {
    const double g = (gemm * narrow + (splits - 1) * launch) / splits;
    return g + (splits - 1) * std::max(g, comm / splits) + comm / splits - gemm;
  };
  const double expected = ring(fwd("qkv"), ag) + pipe(fwd("out_proj"), rs) + ring(fwd("fc1"), ag) + pipe(fwd("fc2"), rs);
  CHECK_THAT(static_cast<double>(with.layer_times.tp_comm_forward_ps), WithinRel(expected, 1e-6));
  // No schedule ends before both its GEMM and its collective: what stays
  // exposed is at least the collective's excess over the GEMM.
  const double floor = std::max(0.0, ag - fwd("qkv")) + std::max(0.0, rs - fwd("out_proj")) +
                       std::max(0.0, ag - fwd("fc1")) + std::max(0.0, rs - fwd("fc2"));
  CHECK(static_cast<double>(with.layer_times.tp_comm_forward_ps) >= floor);
  // And at TP 8 on NVLink the overlap hides most of it.
  CHECK(with.layer_times.tp_comm_forward_ps < without.layer_times.tp_comm_forward_ps / 2);

  // Backward: the QKV and FC1 input gradients' reduce-scatters run in bulk
  // beside their weight-gradient GEMMs (on 116 SMs); the projection's and
  // FC2's output-gradient all-gathers feed their data-gradient GEMMs by ring
  // exchange.
  auto wgrad = [&](const char* name) {
    return static_cast<double>(op_weight_grad_time(cpm, op_named(with.layer, name)).ps());
  };
  auto dgrad = [&](const char* name) {
    const OpCost& op = op_named(with.layer, name);
    return static_cast<double>(op_backward_time(cpm, op, Attention::kFlash).ps() - op_weight_grad_time(cpm, op).ps());
  };
  auto bulk = [&](double gemm, double comm) { return std::max(gemm * narrow, comm) - gemm; };
  const double backward = bulk(wgrad("qkv"), rs) + ring(dgrad("out_proj"), ag) + bulk(wgrad("fc1"), rs) +
                          ring(dgrad("fc2"), ag);
  CHECK_THAT(static_cast<double>(with.layer_times.tp_comm_backward_ps), WithinRel(backward, 1e-6));
  // The compute itself is unchanged; only the TP time moves.
  CHECK(with.layer_times.forward_ps - with.layer_times.tp_comm_forward_ps ==
        without.layer_times.forward_ps - without.layer_times.tp_comm_forward_ps);
  // The output layer's collectives are not TE userbuffers layers: unchanged.
  CHECK(with.output_tp_forward_ps == without.output_tp_forward_ps);
}

TEST_CASE("TP overlap: refused where Megatron or Transformer Engine would refuse it", "[sim][tpoverlap]") {
  const ModelSpec model = load_model("llama2-7b");
  const ClusterSpec cluster = load_cluster("dgx-h100");
  auto reasons = [&](Plan p, int gpus) {
    const Layout L = resolve_plan(model, cluster, gpus, p);
    std::string all;
    for (const std::string& r : L.reasons) all += r + "\n";
    return all;
  };
  // megatron/training/arguments.py validate_args: "Tensor parallel
  // communication/GEMM overlap can happen only when sequence parallelism is
  // enabled".
  Plan no_sp = tp8_sp(true);
  no_sp.sp = false;
  CHECK_THAT(reasons(no_sp, 8), Catch::Contains("needs sequence parallelism"));
  // Nothing to overlap at tp 1.
  Plan tp1 = tp8_sp(true);
  tp1.tp = 1;
  tp1.sp = false;
  CHECK_THAT(reasons(tp1, 8), Catch::Contains("needs tp >= 2"));
  // Userbuffers live in one node's memory: TP 16 over two DGX H100 cannot.
  Plan tp16 = tp8_sp(true);
  tp16.tp = 16;
  CHECK_THAT(reasons(tp16, 16), Catch::Contains("inside one node"));
  // Megatron-Core drives Transformer Engine's userbuffers, torchtitan its
  // async TP; the others neither.
  for (Framework f : {Framework::kMegatronLM, Framework::kDeepSpeed, Framework::kPytorch}) {
    Plan other = tp8_sp(true);
    other.framework = f;
    CHECK_THAT(reasons(other, 8), Catch::Contains("use --framework megatron-core or torchtitan"));
  }
  Plan titan = tp8_sp(true);
  titan.framework = Framework::kTorchtitan;
  CHECK(reasons(titan, 8).empty());
  CHECK(reasons(tp8_sp(true), 8).empty());
}

}  // namespace
}  // namespace trainplan
