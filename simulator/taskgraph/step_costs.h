// Per-micro-batch times of a layer, the embedding and the output layer on one
// rank (compute plus the TP/CP communication folded into them), and of the
// optimizer step: the numbers both the lowering and the planner's fast
// estimate use, so the estimate is a true lower bound of the simulation.
#ifndef TRAINPLAN_SIM_TASKGRAPH_STEP_COSTS_H_
#define TRAINPLAN_SIM_TASKGRAPH_STEP_COSTS_H_

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "simulator/cost/layer_cost.h"
#include "simulator/framework/framework.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

// Per-layer figures the report shows.
// Collectives issued back to back on one stream: their latencies and
// transfer times add.  wire_bytes in nccl-tests busbw units per rank.
struct CommTotals {
  int64_t latency_ps = 0;
  double wire_bytes = 0;
  double transfer_s = 0;  // sum of wire_bytes / bus_bandwidth
  int count = 0;
  // The bus bandwidth the collectives reach together (0 when no bytes).
  double rate() const { return transfer_s > 0 ? wire_bytes / transfer_s : 0; }
  void add(const CommTotals& o) {
    latency_ps += o.latency_ps;
    wire_bytes += o.wire_bytes;
    transfer_s += o.transfer_s;
    count += o.count;
  }
};

struct LayerTimes {
  int64_t forward_ps = 0;    // one layer, one micro-batch, including TP/CP comm
  int64_t backward_ps = 0;   // including recomputation
  int64_t tp_comm_forward_ps = 0;
  int64_t tp_comm_backward_ps = 0;
  int64_t recompute_ps = 0;
  int64_t weight_grad_ps = 0;  // the weight-gradient GEMMs: part of backward_ps (W of zero bubble)
  // The host's time to issue the layer's forward and backward (recompute
  // included) on one rank: its ops' host calls (OpCost::host_calls) x
  // ClusterSpec host.op_overhead.  A pass is host-bound when this exceeds
  // its GPU time: forward_ps / backward_ps are then these (each MoE layer
  // synchronizes the host with the device for its token counts, so the host
  // cannot run ahead of it; a dense layer is taken the same way).  0: the
  // cluster does not model its host.
  int64_t host_forward_ps = 0, host_backward_ps = 0;
  int64_t host_bound_ps = 0;  // what the host adds to forward_ps + backward_ps (0: GPU-bound)
  // MoE layers: the expert-parallel all-to-alls (dispatch, combine) and
  // expert-TP collectives, part of forward_ps / backward_ps.
  int64_t ep_comm_forward_ps = 0;
  int64_t ep_comm_backward_ps = 0;
  // The tensor-parallel collectives (CommGroup::kTp) of one layer's forward
  // and backward (recompute included): part of tp_comm_*_ps, which also
  // holds the exposed CP exchange.
  CommTotals tp_forward, tp_backward;
  // Context parallelism with the exchange beside the attention (cp > 1,
  // cp_overlap): one layer's K/V exchange in forward (all-gather) and
  // backward (reduce-scatter) as link work, the part of it the attention
  // does not hide (in tp_comm_*_ps), and the attention time it runs beside.
  CommTotals cp_forward, cp_backward;
  int64_t cp_exposed_forward_ps = 0, cp_exposed_backward_ps = 0;
  int64_t attention_forward_ps = 0, attention_backward_ps = 0;
  // The forward pass's TP/CP/expert collectives of one layer: count, group,
  // kind, size and NCCL algorithm/protocol, e.g. "2x tp all_reduce 64 MiB
  // over 8 (NVLS/Simple)" (the backward runs the same or their transposes).
  std::string collectives;
};

struct StepCosts {
  LayerShape shape;
  LayerCost layer, embedding, output;
  LayerTimes layer_times;
  // MoE models: the cost and times of an MoE layer, and which layers are
  // MoE layers (by global index); `layer` / `layer_times` are the dense ones.
  bool has_moe = false;
  LayerCost moe_layer;
  LayerTimes moe_layer_times;
  std::vector<bool> moe_of_layer;
  // Partial full recompute (Plan::recompute_layers > 0): the layers of each
  // chunk past the first N keep their activations: which layers (by global
  // index) are recomputed, and the step costs of the plan without recompute
  // (partial_recompute_part), whose layer costs and times those layers take
  // (shared: the planner keeps one per shape for its many partial plans).
  // Empty / null: every layer as `layer` / `moe_layer`.
  std::vector<bool> recomputed_of_layer;
  std::shared_ptr<const StepCosts> without_recompute;
  bool plain(int64_t index) const {
    return !recomputed_of_layer.empty() && !recomputed_of_layer[static_cast<size_t>(index)];
  }
  // The layer costs of the plain layers (REQUIRES: without_recompute).
  const LayerCost& plain_layer() const { return without_recompute->layer; }
  const LayerCost& plain_moe_layer() const {
    return has_moe ? without_recompute->moe_layer : without_recompute->layer;
  }
  const LayerCost& cost_of(int64_t index) const {
    const bool moe = moe_of_layer[static_cast<size_t>(index)];
    if (plain(index)) return moe ? without_recompute->moe_layer : without_recompute->layer;
    return moe ? moe_layer : layer;
  }
  const LayerTimes& times_of(int64_t index) const {
    const bool moe = moe_of_layer[static_cast<size_t>(index)];
    if (plain(index)) return moe ? without_recompute->moe_layer_times : without_recompute->layer_times;
    return moe ? moe_layer_times : layer_times;
  }
  // Whether every layer has the same times (no mix of dense and MoE layers,
  // no partial recompute).
  bool uniform_layers() const;
  // Sum of forward + backward of layers [first, first + count);
  // `less_ep_comm`: without their expert-parallel collectives (what paired
  // passes may hide, ExecutionProfile::paired_ep_overlap).
  int64_t layers_work_ps(int64_t first, int64_t count, bool less_ep_comm = false) const;
  int64_t layers_forward_ps(int64_t first, int64_t count) const;
  int64_t embedding_forward_ps = 0, embedding_backward_ps = 0;  // including TP comm
  int64_t embedding_tp_forward_ps = 0, embedding_tp_backward_ps = 0;
  int64_t output_forward_ps = 0, output_backward_ps = 0;
  int64_t output_tp_forward_ps = 0, output_tp_backward_ps = 0;
  // Their TP collectives as link work (LayerTimes::tp_forward, ...); the
  // output block's with its multi-token prediction depths.
  CommTotals embedding_tp_forward, embedding_tp_backward, output_tp_forward, output_tp_backward;
  // The expert all-to-alls of the multi-token prediction layers (MoE
  // layers): part of output_forward_ps / output_backward_ps, reported as
  // ep_comm and hidden as the decoder's are where the framework overlaps them.
  int64_t output_ep_forward_ps = 0, output_ep_backward_ps = 0;
  // Weight-gradient parts of embedding_backward_ps and output_backward_ps.
  int64_t embedding_weight_grad_ps = 0, output_weight_grad_ps = 0;
  double comm_slowdown = 0;  // compute slowdown while NCCL kernels run
  // The share of the GPU's SMs the expert all-to-all kernels occupy
  // (ep_comm_sm_share): where the framework runs them beside another
  // pass's compute (paired passes), that compute runs on the rest.
  double ep_comm_sm_share = 0;
};

// The share of a GPU's SMs the plan's expert dispatch and combine kernels
// occupy while they run: NCCL's all-to-all its channels (kNcclChannels, one
// SM each), DeepEP's normal kernels kDeepEpNumSms, HybridEP's
// kHybridEpNumSms (kHybridEpInterDomainNumSms when the ep x etp group spans
// NVLink domains); at most 1.
double ep_comm_sm_share(const ClusterSpec& cluster, const Plan& plan);

// Depends only on the model, the cluster and the plan's tp, cp, sp, mbs, seq,
// precision, attention, recompute, tp_comm_overlap, framework and zero stage (FSDP2's copies) (with recompute_layers also on its
// stage split and vp: which layers of each chunk are recomputed).  `cp_overlap`: the context-parallel K/V
// exchange runs beside the attention blocks (ring attention on its own
// stream, Megatron/TE); false for a backend whose collectives block the
// compute (the CPU backend), where all of it is exposed.
// REQUIRES: those are valid.
StepCosts step_costs(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan, bool cp_overlap = true);

// One op of a transformer layer as the step charges it on a rank for one
// micro-batch (`simulate --ops`): the times op_forward_time and
// op_backward_time give it, the share of its forward that recomputation
// re-runs in the backward, and the collective after it as charged there
// (what TP overlap leaves exposed).
struct OpCharge {
  OpCost op;                      // shape, FLOPs, bytes, host calls
  int64_t forward_ps = 0;
  int64_t backward_ps = 0;        // data and weight gradients
  int64_t weight_grad_ps = 0;     // the weight-gradient part of backward_ps
  int64_t recompute_ps = 0;       // its forward again in the backward (recompute)
  std::string comm;               // the collective after it, e.g. "tp all_reduce 16 MiB over 8"; empty: none
  int64_t comm_forward_ps = 0, comm_backward_ps = 0;
};

// The ops of one kind of layer and the layer's totals as step_costs
// charges them (LayerTimes: collectives, the CP exchange, recomputation,
// FSDP2's copies and, for transformer layers, the host's pace folded in).
enum class ChargedLayer { kDense, kMoe, kEmbedding, kOutput };
struct LayerCharges {
  ChargedLayer kind = ChargedLayer::kDense;
  bool moe() const { return kind == ChargedLayer::kMoe; }
  // Megatron's partial recompute (recompute_layers > 0): the recomputed
  // layers of each chunk (true) or the rest (false); unset otherwise.
  std::optional<bool> recomputed;
  int64_t layers = 0;             // layers of this kind in the model (1: embedding, output)
  std::vector<OpCharge> ops;      // forward order
  // forward_ps, backward_ps and weight_grad_ps for every kind; the rest for
  // transformer layers only.  The output's include its multi-token
  // prediction depths (Plan::mtp_layers), which its ops do not list.
  LayerTimes times;
};

// Every kind of transformer layer `plan` runs (dense and/or MoE; with
// partial recompute each recomputed and not), in that order, then the
// embedding and the output layer with the loss.  The sums of a kind's op
// times are the compute inside its times.
// REQUIRES: as step_costs.
std::vector<LayerCharges> layer_charges(const ModelSpec& model, const ClusterSpec& cluster, const Plan& plan);

// The plan without partial recompute whose step costs a partial plan
// (recompute full, recompute_layers > 0) is made of: every layer recomputed
// (`recompute_all` true: recompute_layers 0) or none (recompute none).
Plan partial_recompute_part(const Plan& plan, bool recompute_all);

// The step costs of a partial full-recompute plan from those of its two
// parts (step_costs of partial_recompute_part(plan, true) and (plan, false),
// same cp_overlap): what step_costs(plan) returns, without costing the
// layers again (the planner caches the parts; `none` is shared, not copied).
// REQUIRES: plan.recompute == kFull, plan.recompute_layers > 0, none.
StepCosts partial_recompute_step_costs(const ModelSpec& model, const Plan& plan, StepCosts all,
                                       std::shared_ptr<const StepCosts> none);

// The first global layer of each pipeline stage (balanced or explicit split).
std::vector<int64_t> stage_first_layers(const std::vector<int>& stage_layers);

// The host's Adam rate with optimizer offload, and the parameter servers'
// (async DP): DeepSpeed CPU-Adam updates about 1e9 parameters/s per node
// (AVX-512; ZeRO-Offload paper Sec. 5: 6x faster than torch CPU Adam).
constexpr double kCpuAdamParamsPerSPerNode = 1e9;

// Time of the optimizer step on a rank holding `stage_params` parameters
// (sharded by ZeRO over layout.shard_degree), on the GPU or, with offload, on
// the host.
// `stage_expert_params` of them routed experts, sharded over layout.expert_dp.
// HBM bytes per parameter of the on-GPU optimizer step (Adam over the local
// shard: the states it reads and writes, the gradient checks and zeroing).
double optimizer_bytes_per_param(const Plan& plan, const ExecutionProfile& profile);
int64_t optimizer_ps(const ClusterSpec& cluster, const Layout& layout, double stage_params,
                     double stage_expert_params = 0);

// The parameters of one rank's optimizer partition on a stage: the dense
// ones over the optimizer's shard degree, the routed experts over the
// expert data-parallel group (all of them without ZeRO).
double optimizer_partition_params(const Layout& layout, const ExecutionProfile& profile, double stage_params,
                                  double stage_expert_params);

// ZeRO-Offload's device work at one gradient reduction of a step
// (ExecutionProfile::offload_grad_copies_each_reduction) on a rank whose
// partition holds `partition_params`: the reduction runs at micro-batch
// `microbatch` (0-based) of `microbatches`.  While the step accumulates
// (microbatches > 1) each reduction copies the partition down to a 16-bit
// host buffer, after bringing the host's running sum up and adding it on
// the device from the step's second micro-batch on; the last one casts the
// sum to fp32 and copies it into the host optimizer's gradient.  PCIe at
// the cluster's host bandwidth per GPU, the add and the cast at HBM speed.
// REQUIRES: 0 <= microbatch < microbatches.
Duration offload_grad_copy_time(const ClusterSpec& cluster, const Plan& plan, double partition_params, int64_t microbatch,
                                int64_t microbatches);

// A lower bound on the simulated step time: over pipeline stages, the time
// micro-batch 0 needs to reach the stage (the first chunk's forward on every
// earlier stage) plus the stage's own work (its layers' forward and backward
// for every micro-batch, embedding/output, optimizer); and the schedule's
// makespan with every chunk at the smallest chunk's time, (m*v + p - 1)
// chunk-steps.  Never above simulate_step's step time (tested).
int64_t step_time_lower_bound(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                              const StepCosts& costs, const std::vector<double>& stage_params,
                              const std::vector<double>& stage_expert_params = {});

// A tighter bound for a pipelined plan (pp > 1, 1F1B, GPipe or interleaved):
// the plan's own pipeline schedule executed with each pass taking its chunk's
// compute time (layers, plus the embedding on the first chunk and the output
// layer on the last) and no communication, each rank then stepping its
// optimizer; and at least step_time_lower_bound.  The lowering runs the same
// passes in the same per-rank order with communication and slowdowns added,
// and a fixed-order schedule's makespan only grows with its op durations, so
// this never exceeds simulate_step's step time either (tested).  Costs
// O(p * m * v): meant for the plans a search is about to simulate, not for
// every candidate.  Other plans, and schedules of more than 2^18 passes:
// step_time_lower_bound.
int64_t pipeline_step_lower_bound(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                                  const StepCosts& costs, const std::vector<double>& stage_params,
                                  const std::vector<double>& stage_expert_params = {});

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_TASKGRAPH_STEP_COSTS_H_
