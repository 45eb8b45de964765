// Closed-form memory per GPU for every pipeline stage of a layout.
//
// Model states (Rajbhandari et al. 2020, Sec. 5; Megatron distributed
// optimizer docs): weights W bytes, gradients G bytes and optimizer K bytes
// per parameter (mixed precision: W = 2, G = 4 (Megatron fp32 main grads) or
// 2, K = 12 = fp32 master + m + v; fp32: W = G = 4, K = 8).  ZeRO-1 shards K,
// ZeRO-2 also G, ZeRO-3 also W, over the shard degree (dp*cp, or the hybrid
// shard group).
// Activations (Korthikanti et al. 2022): per-layer saved bytes (cost/) times
// the micro-batches a stage holds at its peak: 1F1B stage i holds min(p-i, m),
// GPipe all m, interleaved min(2(p-i-1) + (v-1)p + 1, m*v) model chunks
// (Megatron's warm-up count), naive 1.
// The backward of one layer re-materialises what full or per-op selective
// recompute dropped (LayerCost::backward_transient_bytes), and the last
// stage's loss holds its gradient buffers at the start of its backward.
// "other": CUDA context, cuBLAS workspace, NCCL and bucket buffers, and a
// fragmentation margin of the caching allocator.
#ifndef TRAINPLAN_SIM_MEMORY_MEMORY_MODEL_H_
#define TRAINPLAN_SIM_MEMORY_MEMORY_MODEL_H_

#include <vector>

#include "simulator/cost/layer_cost.h"
#include "simulator/schedule/pipeline_schedule.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

// Bytes per GPU.  `other` is the sum of the four allocator-level terms
// below it, so total() is what the device holds (nvidia-smi's figure).
struct MemoryBreakdown {
  double weights = 0;
  double gradients = 0;
  double optimizer = 0;
  double activations = 0;
  double other = 0;
  // The parts of `other`: buffers the framework allocates through
  // PyTorch's caching allocator (cuBLAS workspace, gradient buckets); the
  // allocator's reserved-but-unallocated excess (fragmentation); the CUDA
  // context, the NCCL communicators' buffers, the TP communication overlap's
  // buffers (Transformer Engine's userbuffers; under torchtitan's async TP,
  // torch's SymmetricMemory workspace) and a flex MoE dispatcher's
  // (DeepEP's NVLink and RDMA buffers, spec/deepep.h), allocated outside it.
  double workspace = 0;
  double fragmentation = 0;
  double runtime = 0;
  double communication = 0;
  double userbuffers = 0;
  double dispatcher = 0;
  double total() const { return weights + gradients + optimizer + activations + other; }
  // torch.cuda.max_memory_allocated's view, and max_memory_reserved's
  // (what torchtitan and DeepSpeed log as memory).
  double allocated() const { return weights + gradients + optimizer + activations + workspace; }
  double reserved() const { return allocated() + fragmentation; }
};

// Bytes per GPU of weights, gradients and optimizer states for `params`
// parameters held by a model-parallel rank.
struct ModelStateBytes {
  double weights = 0, gradients = 0, optimizer = 0;
  double total() const { return weights + gradients + optimizer; }
};
// REQUIRES: zero in 0..3, shard >= 1.  Offload moves optimizer states (and
// with kParams also the weights) to host memory.  `fp32_master_is_param`
// (ExecutionProfile, PyTorch FSDP2 / DDP with autocast, 16-bit precisions):
// the fp32 parameter is the master copy, so weights are 4 B (sharded from
// ZeRO-2 on: FSDP2) plus, below ZeRO-3, the 16-bit compute copy kept through
// the step (2 B, unsharded), gradients 4 B and the optimizer 8 B (m and v).
// `adam`: the optimizer's bytes per parameter (adam_state_bytes: 12 by
// default, 6 or 8 with bf16 moments).
ModelStateBytes model_state_bytes(double params, Precision precision, GradDtype grad_dtype, int zero, int shard,
                                  Offload offload = Offload::kNone, bool fp32_master_is_param = false,
                                  AdamStateBytes adam = {});

struct StageMemory {
  int stage = 0;
  int layers = 0;
  double params = 0;             // parameters on one GPU of this stage (unsharded by ZeRO)
  double expert_params = 0;      // part of params that are routed experts (ZeRO shards them over expert_dp)
  int64_t inflight_microbatches = 0;  // layers' worth = inflight * layers (chunks for interleaved)
  MemoryBreakdown breakdown;     // bytes per GPU
};

struct MemoryReport {
  std::vector<StageMemory> stages;
  int peak_stage = 0;            // the most loaded stage
  double peak_bytes = 0;
  double capacity_bytes = 0;     // GPU memory
  double host_bytes_per_node = 0;  // offloaded states per node
  double host_capacity_bytes = 0;  // host memory per node
  bool fits = false;
  // Why it does not fit ("" when it fits), e.g. "needs 81.4 GiB per GPU on
  // stage 0, has 79.6 GiB"; formatted on demand (the search asks it of a
  // few of the hundreds of thousands of plans it sizes).
  std::string reason() const;
};

// Microbatch-chunks whose activations stage `stage` holds at its peak (for
// the fixed-order schedules with W passes, counted over the rank's order);
// `combined_1f1b`: Megatron-Core's combined 1F1B (Plan::ep_overlap), one
// more warm-up forward (build_pipeline_schedule), so one more in flight.
int64_t inflight_chunks(Schedule schedule, int pp, int64_t microbatches, int vp, int stage,
                        bool combined_1f1b = false);

// How many of the interleaved 1F1B's `inflight` forward chunks on a rank
// are of model chunk `chunk`: Megatron runs virtual micro-batch k of a rank
// on model chunk (k mod pp*vp) div pp (schedules.py get_model_chunk_id), so
// a rank's first forwards hold pp of chunk 0, then pp of chunk 1, ... in
// turn.  Summed over the vp chunks: `inflight`.
// REQUIRES: pp >= 1, vp >= 1, 0 <= chunk < vp, inflight >= 0.
int64_t interleaved_inflight_in_chunk(int pp, int vp, int64_t inflight, int chunk);
// The activations a rank of the interleaved 1F1B holds at its peak, from
// those one micro-batch leaves in each of its model chunks: the most over
// the steady state, where each forward (the rank's `inflight` first, then
// one more per step) is followed by a backward of the model chunks in
// reverse order, so which chunks are in flight shifts; with chunks of
// unequal layers the peak can come after the warm-up ends.
// REQUIRES: pp >= 1, vp >= 1, chunk_saved.size() == vp, microbatches a
// multiple of pp, 0 <= inflight <= microbatches * vp.
double interleaved_peak_activations(int pp, int vp, int64_t inflight, int64_t microbatches,
                                    const std::vector<double>& chunk_saved);

// An automatic zero-bubble plan (zb-1p, zb-2p) orders its passes from the
// stage times (build_zero_bubble_schedule), which this module does not
// have: given that order (`automatic_order`, one pass list per pipeline
// rank, as the lowering builds it: plan_memory in
// simulator/taskgraph/lowering.h), each rank's activations are read off it
// as for the fixed-order schedules; without it they are the scheduler's
// memory limit (limit x max(M_B of ranks 0 and 1), at most every
// micro-batch), an upper bound.
// REQUIRES: layout resolved by resolve_plan (its reasons are not
// re-checked); automatic_order, when given, of layout's plan (pp lists).
MemoryReport estimate_memory(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                             const PipelineSchedule* automatic_order = nullptr);
// The same from the layer costs of layer_shape(layout.plan) computed by the
// caller (the planner reuses them across plans of one shape): the dense
// layer, the MoE layer (== layer for a dense model), embedding and output.
// Partial full recompute (plan.recompute_layers > 0) also needs the layer
// costs without recompute: `plain_layer` / `plain_moe_layer` when the
// caller has them (REQUIRES: of layer_shape(plan) with recompute none),
// else computed here.
MemoryReport estimate_memory(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                             const LayerCost& layer, const LayerCost& moe_layer, const LayerCost& embedding,
                             const LayerCost& output, const LayerCost* plain_layer = nullptr,
                             const LayerCost* plain_moe_layer = nullptr,
                             const PipelineSchedule* automatic_order = nullptr);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_MEMORY_MEMORY_MODEL_H_
