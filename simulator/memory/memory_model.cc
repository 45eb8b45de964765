#include "simulator/memory/memory_model.h"

#include <algorithm>
#include <cstdio>

#include "simulator/core/error.h"
#include "simulator/cost/layer_cost.h"
#include "simulator/framework/framework.h"
#include "simulator/schedule/pipeline_schedule.h"
#include "simulator/spec/deepep.h"

namespace trainplan {

namespace {

// CUDA context of a PyTorch process with lazy module loading (CUDA >= 11.7):
// about 0.5 GiB as nvidia-smi reports it for an idle process; outside
// PyTorch's caching allocator (not in torch.cuda.memory_reserved).
constexpr double kCudaContextBytes = 0.5 * kGiB;
// cuBLAS workspace on Hopper (CUBLAS_WORKSPACE_CONFIG default :4096:8 * 4 +
// Hopper's 32 MiB): 32 MiB.
constexpr double kCublasWorkspaceBytes = 32.0 * 1024 * 1024;
// NCCL: NCCL_BUFFSIZE 4 MiB per channel and peer direction; with ~16 channels
// about 128 MiB per communicator in use, allocated by NCCL itself (outside
// PyTorch's caching allocator).
constexpr double kNcclBytesPerCommunicator = 128.0 * 1024 * 1024;
// Gradient reduce buckets (PyTorch DDP bucket_cap_mb = 25 MiB, double buffered).
constexpr double kBucketBytes = 2 * 25.0 * 1024 * 1024;
// Caching-allocator fragmentation: reserved exceeds allocated by about 5% in
// steady-state training (PyTorch memory stats, reserved vs allocated; ZeRO
// paper Sec. 3.2 notes OOM with >30% free in the worst case); a share of
// what goes through the allocator (states, activations, workspaces).
constexpr double kFragmentation = 0.05;

// Transformer Engine's userbuffers for --tp-comm-overlap (Megatron's
// _initialize_tp_communicators: initialize_ub(shape = [seq * mbs / cp,
// hidden], tp, use_fp8)): transformer_engine/pytorch/module/base.py
// initialize_ub registers one communicator per GEMM of the layer under the
// default methods (ring_exchange qkv_fprop, fc1_fprop, proj_dgrad,
// fc2_dgrad; pipeline proj_fprop, fc2_fprop; bulk qkv_dgrad, qkv_wgrad,
// fc1_dgrad, fc1_wgrad; external proj_wgrad, fc2_wgrad), each with a buffer
// of the shape (comm_gemm_overlap.cpp CommOverlapBase / CommOverlapP2PBase
// ::initialize; only a ring-exchange reduce-scatter takes 2 tp - 1 chunks,
// and none is one by default), registered outside PyTorch's allocator.
// The eight all-gather buffers hold FP8 (1 B) under an FP8 recipe
// (fp8_buf), the four reduce-scatter ones the 16-bit dtype.
double te_userbuffer_bytes(const ModelSpec& model, const Plan& p) {
  const double elements = static_cast<double>(p.seq) * static_cast<double>(p.mbs) / p.cp *
                          static_cast<double>(model.hidden);
  const double gather_bytes = p.fp8_recipe != Fp8Recipe::kNone ? 1.0 : activation_bytes(p.precision);
  return elements * (8 * gather_bytes + 4 * activation_bytes(p.precision));
}

// torchtitan's async TP: torch's micro-pipelined collectives share one
// SymmetricMemory workspace per TP group, grown to the largest request
// (torch/distributed/_symmetric_memory/__init__.py get_symm_mem_workspace):
// the all-gather side copies the local shard into it
// (_pipelined_multi_all_gather_and_consume: the shard's bytes), the
// reduce-scatter side double-buffers one output chunk
// (_pipelined_produce_and_all2all: 2 x the chunk's bytes).  With sequence
// parallelism both are [seq * mbs / cp / tp, hidden]: the workspace is two
// such chunks in the 16-bit dtype, registered outside PyTorch's allocator.
double symmetric_memory_bytes(const ModelSpec& model, const Plan& p) {
  const double chunk = static_cast<double>(p.seq) * static_cast<double>(p.mbs) / p.cp / p.tp *
                       static_cast<double>(model.hidden) * activation_bytes(p.precision);
  return 2 * chunk;
}

}  // namespace

ModelStateBytes model_state_bytes(double params, Precision precision, GradDtype grad_dtype, int zero, int shard,
                                  Offload offload, bool fp32_master_is_param, AdamStateBytes adam) {
  TRAINPLAN_CHECK(zero >= 0 && zero <= 3 && shard >= 1, "bad ZeRO stage or shard degree");
  double w = weight_bytes(precision);
  double g = grad_bytes(precision, grad_dtype);
  // Mixed precision Adam: fp32 master copy + m + v = 12 bytes; fp32 training
  // needs no master copy: m + v = 8 bytes (Rajbhandari et al. 2020, K = 12).
  // Other dtypes of the master and the moments: adam_state_bytes.
  const double mv = 2.0 * adam.moment;
  double k = precision == Precision::kFp32 ? mv : adam.master + mv;
  ModelStateBytes s;
  int weight_shard = zero >= 3 ? shard : 1;
  if (fp32_master_is_param && precision != Precision::kFp32) {
    w = 4;
    g = 4;
    k = mv;
    // FSDP2 shards the fp32 parameters at ZeRO-2 too; without resharding
    // after forward it keeps the all-gathered 16-bit copies until backward.
    // DDP (ZeRO-0/1) under autocast casts each weight once per forward and
    // its backward holds the cast.
    if (zero >= 2) weight_shard = shard;
    if (zero < 3) s.weights = params * weight_bytes(precision);
  }
  s.weights += params * w / weight_shard;
  s.gradients = params * g / (zero >= 2 ? shard : 1);
  s.optimizer = params * k / (zero >= 1 ? shard : 1);
  if (offload == Offload::kOptimizer || offload == Offload::kParams) s.optimizer = 0;
  if (offload == Offload::kParams) s.weights = 0;
  return s;
}

int64_t interleaved_inflight_in_chunk(int pp, int vp, int64_t inflight, int chunk) {
  const int64_t group = int64_t{pp} * vp;  // Megatron: model chunk (k mod p*v) div p
  return inflight / group * pp + std::clamp<int64_t>(inflight % group - int64_t{chunk} * pp, 0, pp);
}

double interleaved_peak_activations(int pp, int vp, int64_t inflight, int64_t microbatches,
                                    const std::vector<double>& chunk_saved) {
  // Steady state (schedules.py forward_backward_pipelining_with_interleaving):
  // after the warm-up's `inflight` forwards, each step frees a backward
  // (virtual micro-batch k, the model chunks visited in reverse:
  // get_model_chunk_id(forward=False)) and adds a forward (inflight + k,
  // model chunk (j mod p*v) div p).  The mix repeats every p*v steps and the
  // cool-down only frees.  Equal chunks hold the same whatever the mix.
  if (std::all_of(chunk_saved.begin(), chunk_saved.end(), [&](double b) { return b == chunk_saved.front(); })) {
    return static_cast<double>(inflight) * chunk_saved.front();
  }
  const int64_t group = int64_t{pp} * vp;
  const int64_t steps = std::max<int64_t>(0, std::min<int64_t>(microbatches * vp - inflight, group - 1));
  double held = 0;
  for (int c = 0; c < vp; ++c) {
    held += static_cast<double>(interleaved_inflight_in_chunk(pp, vp, inflight, c)) * chunk_saved[static_cast<size_t>(c)];
  }
  double peak = held;
  int64_t f = (inflight % group) / pp, f_at = inflight % pp;  // the next forward's chunk, its place in the run
  int64_t b = 0, b_at = 0;                                    // the next backward's run (chunk vp - 1 - b)
  // Each stays on a model chunk for runs of pp steps, over which held
  // changes linearly: its most is at a run's end.
  for (int64_t k = 0; k < steps;) {
    const int64_t run = std::min({pp - f_at, pp - b_at, steps - k});
    held += static_cast<double>(run) *
            (chunk_saved[static_cast<size_t>(f)] - chunk_saved[static_cast<size_t>(vp - 1 - b)]);
    peak = std::max(peak, held);
    k += run;
    if ((f_at += run) == pp) f_at = 0, f = f + 1 == vp ? 0 : f + 1;
    if ((b_at += run) == pp) b_at = 0, b = b + 1 == vp ? 0 : b + 1;
  }
  return peak;
}

int64_t inflight_chunks(Schedule schedule, int pp, int64_t microbatches, int vp, int stage, bool combined_1f1b) {
  // The combined 1F1B runs one more warm-up forward (build_pipeline_schedule).
  const int extra = combined_1f1b ? 1 : 0;
  if (schedule == Schedule::kNaive) return 1;
  if (pp == 1) return std::min<int64_t>(1 + extra, microbatches);
  switch (schedule) {
    case Schedule::kGpipe: return microbatches;
    case Schedule::k1F1B: return std::min<int64_t>(pp - stage + extra, microbatches);
    case Schedule::kInterleaved: {
      // Megatron: warm-up = (p - rank - 1) * 2 + (v - 1) * p forward chunks,
      // plus the one in steady state; with m == p every rank runs all m*v
      // forwards first.
      if (microbatches == pp) return microbatches * vp;
      int64_t warm = int64_t{pp - stage - 1} * 2 + int64_t{vp - 1} * pp + 1 + extra;
      return std::min<int64_t>(warm, microbatches * vp);
    }
    case Schedule::kNaive: return 1;
    case Schedule::kZb1p:
    case Schedule::kZb2p:
      // The scheduler starts an F only while the rank holds fewer than its
      // limit's worth of micro-batches (build_zero_bubble_schedule).
      return std::min<int64_t>(zero_bubble_activation_limit(schedule, pp), microbatches);
    case Schedule::kInterleavedZb:
    case Schedule::kZbv:
    case Schedule::kDualPipeV:
    case Schedule::kDualPipe:
      // Fixed orders: read off the rank's passes.
      return peak_microbatches_in_flight(
          build_pipeline_schedule(schedule, pp, static_cast<int>(microbatches), interleaved(schedule) ? vp : 2)
              [static_cast<size_t>(stage)]);
  }
  return 1;
}

MemoryReport estimate_memory(const ModelSpec& model, const ClusterSpec& cluster, const Layout& requested,
                             const PipelineSchedule* automatic_order) {
  const Layout layout = execution_layout(model, cluster, requested);
  const LayerShape shape = layer_shape(layout.plan);
  const LayerCost layer = transformer_layer_cost(model, shape);
  const LayerCost moe_layer = model.has_moe ? transformer_layer_cost(model, shape, true) : layer;
  return estimate_memory(model, cluster, layout, layer, moe_layer, embedding_cost(model, shape),
                         output_block_cost(model, shape), nullptr, nullptr, automatic_order);
}

MemoryReport estimate_memory(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                             const LayerCost& layer, const LayerCost& moe_layer, const LayerCost& emb,
                             const LayerCost& out, const LayerCost* plain_layer_given,
                             const LayerCost* plain_moe_layer_given, const PipelineSchedule* automatic_order) {
  const Plan& p = layout.plan;
  TRAINPLAN_CHECK(p.schedule != Schedule::kDualPipe, "a dualpipe plan's memory is its execution_layout's");
  const LayerShape shape = layer_shape(p);
  const ExecutionProfile fw = execution_profile(p);
  const OptimizerSharding os = optimizer_sharding(layout, fw);
  const double tied_copy = static_cast<double>(model.vocab) * static_cast<double>(model.hidden) / p.tp;
  // What a stage's layers hold, summed over its dense and MoE layers.
  struct StageSums {
    double params = 0, expert_params = 0, saved = 0, weight_kept = 0, linear = 0, transient = 0, largest = 0;
    double largest_expert = 0;  // a layer's routed experts on this GPU (their own FSDP unit)
    std::vector<double> chunk_saved, chunk_kept;  // M_B and M_W per model chunk
  };
  std::vector<StageSums> sums(static_cast<size_t>(p.pp));
  // Partial full recompute (Megatron's block method): the layers of a chunk
  // past its first recompute_layers keep every activation.
  const bool partial = p.recompute == Recompute::kFull && p.recompute_layers > 0;
  LayerCost plain_layer_own, plain_moe_layer_own;
  if (partial && plain_layer_given == nullptr) {
    LayerShape none = shape;
    none.recompute = Recompute::kNone;
    plain_layer_own = transformer_layer_cost(model, none);
    if (model.has_moe) plain_moe_layer_own = transformer_layer_cost(model, none, true);
  }
  const LayerCost& plain_layer = plain_layer_given != nullptr ? *plain_layer_given : plain_layer_own;
  const LayerCost& plain_moe_layer =
      plain_moe_layer_given != nullptr ? *plain_moe_layer_given
      : plain_layer_given != nullptr   ? *plain_layer_given
                                       : plain_moe_layer_own;
  const std::vector<std::vector<ChunkLayers>> stage_chunks = chunk_layers(layout);
  // The fixed-order schedules with W passes (zb-v, dualpipe-v,
  // interleaved-zb), and the automatic ones when their order is given, read
  // each rank's peak off its pass order, from the
  // activations of each of its model chunks (M_B, M_W per chunk); the
  // interleaved 1F1B counts its in-flight chunks by model chunk (chunks of
  // unequal layers hold unequal activations); the others need only the
  // stage's sums.
  const bool automatic = zero_bubble_automatic(p.schedule);
  TRAINPLAN_CHECK(automatic_order == nullptr || (automatic && automatic_order->size() == static_cast<size_t>(p.pp)),
                  "an automatic zero-bubble order is given only for a zb-1p/zb-2p plan, one pass list per rank");
  const bool ordered = zero_bubble(p.schedule) && (!automatic || automatic_order != nullptr);
  const bool per_chunk = ordered || p.schedule == Schedule::kInterleaved;
  for (int i = 0; i < p.pp; ++i) {
    StageSums& ss = sums[static_cast<size_t>(i)];
    if (per_chunk) {
      ss.chunk_saved.assign(stage_chunks[static_cast<size_t>(i)].size(), 0.0);
      ss.chunk_kept.assign(stage_chunks[static_cast<size_t>(i)].size(), 0.0);
    }
    size_t chunk = 0;
    for (const ChunkLayers& ch : stage_chunks[static_cast<size_t>(i)]) {
      for (int at = ch.first; at < ch.first + ch.count; ++at) {
        const bool is_moe = at < model.layers && model.is_moe_layer(at);
        const bool plain = partial && !layer_recomputed(p, at - ch.first);
        const LayerCost& c = plain ? (is_moe ? plain_moe_layer : plain_layer) : (is_moe ? moe_layer : layer);
        ss.params += c.params;
        ss.expert_params += c.expert_params;
        ss.saved += c.saved_bytes;
        ss.weight_kept += c.weight_grad_saved_bytes;
        if (per_chunk) {
          ss.chunk_saved[chunk] += c.saved_bytes;
          ss.chunk_kept[chunk] += c.weight_grad_saved_bytes;
        }
        ss.linear += c.linear_params;
        ss.transient = std::max(ss.transient, c.backward_transient_bytes);
        ss.largest = std::max(ss.largest, c.params - c.expert_params);
        ss.largest_expert = std::max(ss.largest_expert, c.expert_params);
      }
      ++chunk;
    }
  }

  // The embedding is on virtual stage 0 and the output on the last (both on
  // rank 0 in a V).
  const RankChunk out_at = rank_chunk_of(p.schedule, p.pp, p.pp * chunks_per_rank(p) - 1);
  const int output_rank = out_at.rank;
  PipelineSchedule fixed_order;
  // Where a rank's chunks are walked (a fixed pass order, or the interleaved
  // steady state: interleaved_peak_activations), the embedding counts in
  // chunk 0 of rank 0 and the loss in the last virtual stage's chunk: a
  // micro-batch's loss lives from that chunk's forward to its backward, as
  // the chunk's activations do.
  if (ordered || p.schedule == Schedule::kInterleaved) {
    sums[0].chunk_saved[0] += emb.saved_bytes;
    sums[static_cast<size_t>(out_at.rank)].chunk_saved[static_cast<size_t>(out_at.chunk)] += out.saved_bytes;
  }
  if (ordered) {
    fixed_order = automatic ? *automatic_order
                            : build_pipeline_schedule(p.schedule, p.pp, static_cast<int>(layout.microbatches),
                                                      chunks_per_rank(p));
    sums[0].chunk_kept[0] += emb.weight_grad_saved_bytes;
    sums[static_cast<size_t>(out_at.rank)].chunk_kept[static_cast<size_t>(out_at.chunk)] += out.weight_grad_saved_bytes;
  }

  MemoryReport r;
  r.capacity_bytes = static_cast<double>(cluster.gpu.memory);
  r.host_capacity_bytes = static_cast<double>(cluster.host.memory);
  r.stages.reserve(static_cast<size_t>(p.pp));
  double offloaded_per_gpu_max = 0;
  // Activation bytes one micro-batch holds on stage i from F to B (M_B).
  auto stage_activation = [&](int i) {
    double a = sums[static_cast<size_t>(i)].saved;
    if (i == 0) a += emb.saved_bytes;
    if (i == output_rank) a += out.saved_bytes;
    return a;
  };
  for (int i = 0; i < p.pp; ++i) {
    const StageSums& ss = sums[static_cast<size_t>(i)];
    StageMemory st;
    st.stage = i;
    st.layers = layout.stage_layers[i];
    double params = ss.params;
    if (i == 0) params += emb.params;
    if (i == output_rank) params += out.params - (model.tied_embeddings && p.pp == 1 ? tied_copy : 0.0);
    st.params = params;
    // Routed experts: the layers' and, on the loss's stage, an MoE MTP layer's.
    const double experts = ss.expert_params + (i == output_rank ? out.expert_params : 0.0);
    st.expert_params = experts;
    // Dense parameters shard over the shard degree; routed experts' states
    // over the expert data-parallel group (Megatron's distributed optimizer
    // keeps one optimizer per parallel-state group).
    const GradDtype kept_dtype = gradient_dtype(p, fw);
    const AdamStateBytes adam = adam_state_bytes(p, fw);
    ModelStateBytes ms = model_state_bytes(params - experts, p.precision, kept_dtype, os.zero, os.shard, p.offload,
                                           fw.fp32_master_is_param, adam);
    ModelStateBytes me = model_state_bytes(experts, p.precision, kept_dtype, os.zero, std::max(1, layout.expert_dp),
                                           p.offload, fw.fp32_master_is_param, adam);
    MemoryBreakdown& b = st.breakdown;
    b.weights = ms.weights + me.weights;
    b.gradients = ms.gradients + me.gradients + fw.lp_grad_bytes * params;
    b.optimizer = ms.optimizer + me.optimizer;
    // Optimizer offload that keeps the gradient partition on the host
    // (ExecutionProfile::offload_grads_to_host): no gradient shard on the
    // device; ZeRO-1 accumulates the unsharded 16-bit gradients on it until
    // the step's last backward reduces them.
    const bool grads_on_host = p.offload != Offload::kNone && fw.offload_grads_to_host;
    if (grads_on_host) b.gradients = os.zero <= 1 ? params * weight_bytes(p.precision) : 0.0;
    if (p.zero == 3) {
      // ZeRO-3 / FSDP gathers one layer's full (TP-sharded) weights and
      // prefetches the next: two layers unsharded in 16-bit.  An MoE layer's
      // routed experts are a unit of their own, gathered over the expert
      // data-parallel group with the rest of their block (torchtitan
      // apply_fsdp: fully_shard(transformer_block.moe.experts, mesh =
      // dp_shard_mod_ep) inside the block's unit).
      double largest = std::max(ss.largest, i == output_rank ? out.params : 0.0);
      if (fw.zero3_module_fetches && !fw.zero3_knobs.trace_aligned && !model.has_moe &&
          model.attention != AttentionKind::kMla) {
        // DeepSpeed 2021 (deepspeed_zero3.h, the step counter behind its
        // trace) gathers one module at a time on demand and releases it
        // after use: the largest weight matrix, or the embedding / output
        // layer on their stages, held twice while ProcessGroupNCCL copies
        // its flat output into the parameter's buffer (the list API).
        const double module = std::max({largest_weight_matrix(model, p.tp), i == 0 ? emb.params : 0.0,
                                        i == output_rank ? out.params : 0.0});
        b.weights += 2 * module * weight_bytes(p.precision);
      } else {
        b.weights += 2 * (largest + ss.largest_expert) * weight_bytes(p.precision);
      }
      largest = std::max(largest, ss.largest_expert);
      if (fw.fp32_master_is_param) {
        // FSDP2's backward: a block's unsharded gradients in the parameter
        // dtype while the previous block's reduce-scatter input, the full
        // unsharded size in reduce_dtype (fp32), is kept until the next
        // reduce-scatter is issued (torch/distributed/fsdp/_fully_shard/
        // _fsdp_collectives.py foreach_reduce: reduce_scatter_input of
        // world_size * padded shard elements in reduce_dtype;
        // _fsdp_param_group.py keeps it as reduce_scatter_state).
        b.gradients += largest * (weight_bytes(p.precision) + grad_bytes(p.precision, p.grad_dtype));
      }
    }
    // Transformer Engine keeps each linear layer's weight quantized to FP8
    // beside the bf16 weight for the whole run (its FP8 workspaces; not
    // with torchao, which casts per use).
    const double linear = ss.linear + (i == output_rank ? out.linear_params : 0.0);
    b.weights += linear * fp8_weight_cache_bytes(cluster, p);
    // --fp8-param-gather: the FP8 copy is the compute weight; no bf16 copy
    // of the linear layers remains (the fp32 master stays in the optimizer).
    if (p.fp8_param_gather) b.weights -= linear * weight_bytes(p.precision) / (p.zero >= 3 ? layout.shard_degree : 1);
    ModelStateBytes kept = model_state_bytes(params - experts, p.precision, kept_dtype, os.zero, os.shard,
                                             Offload::kNone, fw.fp32_master_is_param, adam);
    ModelStateBytes kept_e = model_state_bytes(experts, p.precision, kept_dtype, os.zero, std::max(1, layout.expert_dp),
                                               Offload::kNone, fw.fp32_master_is_param, adam);
    // On the host: the states offload moves (Adam's; the parameters under
    // parameter offload) and, where the gradients go too, the fp32 gradient
    // shard, plus ZeRO-Offload's 16-bit running sum of it while a step
    // accumulates micro-batches (stage_1_and_2.py accumulated_grads_in_cpu).
    double host = kept.total() + kept_e.total() - ms.total() - me.total();
    if (grads_on_host) {
      const int sharded = std::max(os.zero, 2);
      const double shard_grads =
          model_state_bytes(params - experts, p.precision, p.grad_dtype, sharded, os.shard, Offload::kNone,
                            fw.fp32_master_is_param).gradients +
          model_state_bytes(experts, p.precision, p.grad_dtype, sharded, std::max(1, layout.expert_dp), Offload::kNone,
                            fw.fp32_master_is_param).gradients;
      host += shard_grads;
      if (fw.offload_grad_copies_each_reduction && layout.microbatches > 1) {
        host += shard_grads / grad_bytes(p.precision, p.grad_dtype) * weight_bytes(p.precision);
      }
    }
    offloaded_per_gpu_max = std::max(offloaded_per_gpu_max, host);

    // Activations.
    int64_t chunks = ordered ? peak_microbatches_in_flight(fixed_order[static_cast<size_t>(i)])
                             : inflight_chunks(p.schedule, p.pp, layout.microbatches, p.vp, i, p.ep_overlap);
    st.inflight_microbatches = chunks;
    double act = static_cast<double>(chunks) * ss.saved;
    // The interleaved schedule's in-flight forwards by model chunk, at the
    // steady state's peak (chunks of unequal layers hold unequal
    // activations; the embedding is in chunk 0 of rank 0).
    // A framework that keeps each stage's output until its backward
    // (ExecutionProfile::keeps_stage_outputs) holds one per in-flight
    // micro-batch of every model chunk but the one ending in the loss: under
    // the interleaved schedule that is part of each chunk's share, so that
    // the walk finds the moment the two peak together (the last rank's
    // in-flight mix of loss and other chunks changes from step to step).
    const bool keeps_outputs = fw.keeps_stage_outputs && p.pp > 1 && !zero_bubble(p.schedule);
    const double kept_output = keeps_outputs ? layer_input_bytes(model, shape) * kept_stage_output_share(fw, p) : 0.0;
    if (p.schedule == Schedule::kInterleaved) {
      std::vector<double> chunk_held = ss.chunk_saved;
      for (size_t c = 0; c < chunk_held.size(); ++c) {
        if (!(i == out_at.rank && static_cast<int>(c) == out_at.chunk)) chunk_held[c] += kept_output;
      }
      act = interleaved_peak_activations(p.pp, p.vp, chunks, layout.microbatches, chunk_held);
    } else if (i == 0) {
      act += static_cast<double>(chunks) * emb.saved_bytes;
    }
    // The loss (interleaved: in the last chunk's sums above).
    if (i == p.pp - 1 && p.schedule != Schedule::kInterleaved) act += static_cast<double>(chunks) * out.saved_bytes;
    if (ordered) {
      act = peak_activation_bytes(fixed_order[static_cast<size_t>(i)], ss.chunk_saved, ss.chunk_kept);
    } else if (zero_bubble(p.schedule)) {
      // The scheduler holds at most limit x max(M_B of stages 0 and 1) on
      // every stage (build_zero_bubble_schedule), and at most all m
      // micro-batches.
      const double cap = zero_bubble_activation_limit(p.schedule, p.pp) *
                         std::max(stage_activation(0), stage_activation(std::min(1, p.pp - 1)));
      act = std::min(cap, static_cast<double>(layout.microbatches) * stage_activation(i));
      // A B pass whose W keeps more than the micro-batch held (M_W > M_B)
      // grows the rank's memory by the difference before its W frees it.
      double held = ss.weight_kept - ss.saved;
      if (i == 0) held += emb.weight_grad_saved_bytes - emb.saved_bytes;
      if (i == p.pp - 1) held += out.weight_grad_saved_bytes - out.saved_bytes;
      act += std::max(0.0, held);
    }
    // The other schedules' stage outputs (the interleaved ones are in the
    // walk above): one per in-flight micro-batch, none on the last stage,
    // whose one chunk ends in the loss.
    if (keeps_outputs && p.schedule != Schedule::kInterleaved && i != p.pp - 1) {
      act += static_cast<double>(chunks) * kept_output;
    }
    // One layer's backward re-materialises what recompute dropped; the last
    // stage's loss holds its gradient buffers as its backward starts (both
    // transient, the larger one counts).
    act += std::max(ss.transient, i == output_rank ? out.backward_transient_bytes : 0.0);
    b.activations = act;
    // A 16-bit gradient partition the optimizer step casts to fp32
    // (ExecutionProfile::grads_in_model_dtype): the copy lives while the
    // activations are freed, so the step's peak exceeds the backward's only
    // by what the copy holds beyond them.
    if (fw.grads_in_model_dtype && !grads_on_host && p.precision != Precision::kFp32) {
      const double fp32_copy = b.gradients / weight_bytes(p.precision) * 4;
      b.gradients += std::max(0.0, fp32_copy - act);
    }

    int communicators = (p.tp > 1) + (p.pp > 1) + (p.dp > 1) + (p.cp > 1) + (p.ep > 1) + (p.etp > 1 && p.etp != p.tp);
    b.runtime = kCudaContextBytes;
    b.communication = communicators * kNcclBytesPerCommunicator;
    if (fw.tp_comm_overlap && p.tp > 1) {
      b.userbuffers = fw.async_tp ? symmetric_memory_bytes(model, p) : te_userbuffer_bytes(model, p);
    }
    // DeepEP's NVLink and RDMA buffers (spec/deepep.h), allocated outside
    // the caching allocator by the ranks that run MoE layers.
    if (p.moe_dispatcher == MoeDispatcher::kDeepEp && experts > 0) {
      b.dispatcher = deepep_buffer_bytes(model.hidden, int64_t{p.ep} * std::max(1, p.etp)).total();
    }
    const double buckets = fw.contiguous_grad_buffers > 0
                               ? fw.contiguous_grad_buffers * fw.grad_bucket_params * weight_bytes(p.precision)
                               : (p.zero >= 2 || p.dp_mode == DpMode::kAsync ? kBucketBytes : 0.0);
    b.workspace = kCublasWorkspaceBytes + buckets;
    b.fragmentation = kFragmentation * b.allocated();
    b.other = b.workspace + b.fragmentation + b.runtime + b.communication + b.userbuffers + b.dispatcher;
    r.stages.push_back(st);
  }
  for (const StageMemory& st : r.stages) {
    if (st.breakdown.total() > r.peak_bytes) {
      r.peak_bytes = st.breakdown.total();
      r.peak_stage = st.stage;
    }
  }
  r.host_bytes_per_node = offloaded_per_gpu_max * cluster.gpus_per_node;
  r.fits = r.peak_bytes <= r.capacity_bytes && r.host_bytes_per_node <= r.host_capacity_bytes;
  return r;
}

std::string MemoryReport::reason() const {
  char buf[256];
  if (peak_bytes > capacity_bytes) {
    std::snprintf(buf, sizeof buf, "needs %.1f GiB per GPU on stage %d, has %.1f GiB", to_gib(peak_bytes), peak_stage,
                  to_gib(capacity_bytes));
    return buf;
  }
  if (host_bytes_per_node > host_capacity_bytes) {
    std::snprintf(buf, sizeof buf, "offload needs %.1f GiB of host memory per node, has %.1f GiB",
                  to_gib(host_bytes_per_node), to_gib(host_capacity_bytes));
    return buf;
  }
  return "";
}

}  // namespace trainplan
