// Framework execution profiles: how each training framework runs a plan,
// the one place that knows it (the lowering, the search and the exporters
// read it).  Each behaviour names its source in the framework's code or
// published configuration (framework.cc, one function per framework).
//
//   generic        trainplan's framework-neutral model: PyTorch DDP-style
//                  bucketed gradient reduction overlapped with backward,
//                  FSDP-style parameter gathers (the model before profiles).
//   megatron-lm    Megatron-LM as in the 2021-22 papers (Narayanan et al.
//                  2021, Korthikanti et al. 2022).
//   megatron-core  Megatron-Core 2024+ as NVIDIA's NeMo / Megatron-Bridge
//                  performance recipes run it.
//   deepspeed      DeepSpeed (ZeRO 1-3, its pipeline engine, Megatron-DeepSpeed).
//   torchtitan     torchtitan (FSDP2, TP, PP, CP).
//   pytorch        plain PyTorch DDP / FSDP2.
#ifndef TRAINPLAN_SIM_FRAMEWORK_FRAMEWORK_H_
#define TRAINPLAN_SIM_FRAMEWORK_FRAMEWORK_H_

#include <string>
#include <vector>

#include "simulator/framework/deepspeed_zero3.h"
#include "simulator/spec/plan.h"

namespace trainplan {

// How data-parallel gradient reduction runs against the backward.
enum class GradReduce {
  kOverlapped,     // bucket by bucket as the backward produces them, on a comm stream
  kAfterBackward,  // all buckets after the step's last backward (no overlap)
  kBlocking,       // bucket by bucket during the backward, on the compute stream
};

struct ExecutionProfile {
  Framework framework = Framework::kGeneric;
  GradReduce grad_reduce = GradReduce::kOverlapped;
  // Gradient bucket size in parameters (0: one bucket of everything).
  double grad_bucket_params = 0;
  // Gradient buckets only on the first pipeline stage's first model chunk:
  // every other chunk's gradients (and, with overlap_param_gather, its
  // parameters) form one bucket, reduced once the chunk's last backward is
  // done.
  bool buckets_first_chunk_only = false;
  // ZeRO-1/2 distributed optimizer: the updated parameters are all-gathered
  // bucket by bucket (grad_bucket_params, buckets_first_chunk_only) in
  // forward order, back to back from the step's start (on a later stage of a
  // non-interleaved pipeline, from the arrival of its first input), and a
  // chunk's first forward runs each layer once its bucket has arrived; the
  // gather is exposed where it outruns that forward.  Otherwise it ends the
  // step.
  bool overlap_param_gather = false;
  // ZeRO-3: with full recompute the recompute forward gathers each layer's
  // parameters again (a third gather per layer and micro-batch) instead of
  // using the backward's.
  bool regather_for_recompute = false;
  // ZeRO-3: each gather moves one module's parameters as its own collective
  // (the fused QKV, the attention output, the MLP's first and second
  // linear layers: four per dense layer, each paying the collective's
  // latency), instead of one collective for the whole layer.  The layer's
  // small parameters (biases, norms) stay whole on every rank and are not
  // gathered.  Consecutive modules share one collective until it holds
  // gather_bucket_params parameters (0: none share).
  bool gather_per_module = false;
  double gather_bucket_params = 0;
  // ZeRO-3 collectives through torch.distributed's list API: per member of
  // the group, this many PyTorch calls issued one at a time (Python views of
  // the member's slice, the copy between it and the flat buffer NCCL works
  // on), each costing one kernel overhead
  // (ComputeParams::kernel_overhead): a latency that grows with the group,
  // however small each member's slice.  0: one flat buffer, no per-member work.
  double collective_calls_per_member = 0;
  // ZeRO-3 collectives through torch.distributed's list API move their
  // buffers on the device as well: each gather first zero-fills the
  // parameter's flat buffer (DeepSpeed _allgather_param: torch.zeros, 2 B
  // written per bf16 parameter) and ProcessGroupNCCL copies its own flat
  // output back into the list's member views (2 B read, 2 B written); each
  // reduce-scatter has ProcessGroupNCCL copy the member views into its flat
  // input first (2 B read, 2 B written per gradient element).  Memory-bound
  // device time beside the collective, on its stream.
  bool list_api_copies = false;
  // ZeRO-3: the device is synchronized at every fetch, so the host work of
  // each gather (its per-member calls) runs with the device idle and the
  // gather is launched after it: a layer's gather is prefetched from the
  // previous layer's hook, before that layer's compute, and runs beside it
  // (one step of prefetch, forward and backward).  A reduce-scatter is issued
  // from the gradient hooks (its host work beside the backward) and the next
  // fetch's synchronize waits for it: the next layer's compute starts after
  // it (lowering.cc, build_dp_groups).
  bool gather_syncs_device = false;
  // ZeRO-3 fetched module by module as DeepSpeed's parameter coordinator
  // does (deepspeed_zero3.h, with these knobs): a fetch synchronizes only
  // where its module's parameters are not yet available, the prefetch
  // walks the trace one bucket at a time, and a module used again soon
  // (the recompute's MLP before its backward) keeps its parameters.  The
  // gradients are reduce-scattered in buckets of grad_bucket_params
  // (reduce_independent_p_g_buckets_and_remove_grads), the rest at the end
  // of each backward.
  bool zero3_module_fetches = false;
  Zero3CoordinatorKnobs zero3_knobs;

  // Memory as the framework allocates it (memory_model.h).
  // Mixed precision with the fp32 parameter as the master copy (PyTorch
  // FSDP2's MixedPrecisionPolicy keeps the sharded parameter in fp32 and
  // casts to param_dtype only in the all-gather; DDP under autocast keeps
  // fp32 parameters and caches their bf16 casts for the step): weights 4 B,
  // gradients 4 B and Adam's m and v 8 B per parameter, plus the bf16
  // compute copies that are not resharded.  false: a 16-bit weight, the
  // gradient in grad_dtype and a 12-byte optimizer (fp32 master, m, v), as
  // Megatron's and DeepSpeed's mixed-precision optimizers keep them.
  bool fp32_master_is_param = false;
  // With bf16 moments (Plan::moment_dtype), the optimizer keeps of the fp32
  // master copy of a bf16 parameter only the 16 bits the parameter lacks:
  // Megatron-Core's precision-aware optimizer hands the master weights to
  // Transformer Engine's FusedAdam with store_param_remainders (default
  // true: OptimizerConfig, "store the 16-bit FP32 parameter remainders ...
  // excluding the 16 bits shared with the BF16 parameters";
  // distrib_optimizer.py allocates them as int16) when the parameters are
  // bf16 and no FP8 recipe but delayed scaling keeps FP8 primary weights
  // (use_precision_aware_optimizer_no_fp8_or_ds_fp8).  adam_state_bytes.
  bool master_param_remainders = false;
  // Bytes per parameter of the 16-bit gradients kept beside an fp32
  // gradient accumulation buffer for the whole step (DeepSpeed's
  // BF16_Optimizer: 2; 0 where the gradient has one buffer).
  double lp_grad_bytes = 0;
  // ZeRO-1 or ZeRO-3 whose gradients are all-reduced whole, each rank then
  // keeping its own shard (DeepSpeed's BF16_Optimizer under the pipeline
  // engine; ZeRO-3 before DeepSpeed 0.5.0, whose default
  // contiguous_gradients=false all-reduces each flattened bucket), instead
  // of reduce-scattered.  Under ZeRO-3 the bucket is flattened into one
  // tensor and divided before the all-reduce and copied back into the
  // parameters' gradients after it (lowering.cc), with no per-member calls.
  bool grads_all_reduced = false;
  // The fp32 optimizer states are sharded over the data-parallel group even
  // at ZeRO stage 0, each rank updating its shard and all-gathering the
  // 16-bit parameters after the step, as ZeRO-1 does (DeepSpeed's
  // BF16_Optimizer partitions its fp32 groups over the data-parallel group
  // whatever the ZeRO stage).
  bool optimizer_sharded_without_zero = false;
  // A pipeline stage keeps each in-flight micro-batch's output tensor until
  // that micro-batch's backward (DeepSpeed's pipe_buffers['outputs'],
  // torch.distributed.pipelining's fwd_cache); Megatron frees its data once
  // sent (deallocate_output_tensor; Korthikanti et al. 2022 Sec. 4.2.3).
  bool keeps_stage_outputs = false;
  // The kept output is this rank's 1/tp slice (DeepSpeed's pipe_partitioned,
  // default true: the output is split over the tensor-parallel group before
  // it is sent and stored, and the full tensor's data freed).
  bool stage_outputs_partitioned = false;
  // Selective recompute is torchtitan's per-op SAC (`selective_ac_option =
  // "op"`): each block saves the outputs of its matmuls except every second
  // one and of attention, and re-runs everything else in backward.  false:
  // Megatron's --recompute-granularity selective (recompute_modules).
  bool per_op_selective_recompute = false;
  // The loss as PyTorch computes it on full-vocabulary logits:
  // cross_entropy(logits.float()) keeps the fp32 log-softmax output
  // (4 B per logit) and its backward holds that, the gradient of the
  // log-probabilities and the gradient of the logits together (12 B per
  // logit).  false: Megatron's fused vocab-parallel cross entropy, which
  // keeps the fp32 softmax and computes the gradient in place in it.
  bool pytorch_cross_entropy = false;
  // Compute: the memory-bound ops run as PyTorch eager kernels, one per
  // aten op (RMSNorm in fp32 as six kernels, rotary embedding through
  // complex fp32 multiplies, SiLU and the gate product apart, grouped-query
  // K/V expanded by copies, the attention output made contiguous;
  // layer_cost.cc), instead of the fused kernels of Megatron / Transformer
  // Engine / apex or a torch.compile'd model.
  bool eager_elementwise = false;
  // Tensor parallelism through DTensor with the sequence sharded on dim 1
  // of a [batch, seq, hidden] activation (torchtitan's SequenceParallel,
  // Shard(1)): PyTorch's functional collectives gather and scatter along
  // dim 0 only, so every sequence-parallel all-gather's result is copied
  // into place (_functional_collectives.py _all_gather_tensor:
  // torch.cat(torch.chunk(res, group_size, dim=0), dim=gather_dim)) and
  // every reduce-scatter's input is copied first (reduce_scatter_tensor:
  // torch.cat(torch.chunk(self, group_size, dim=scatter_dim))), in forward
  // and in backward: a read and a write of the whole gathered tensor each
  // (LayerShape::tp_seq_copies).  Megatron's [seq, batch, hidden] layout
  // gathers along dim 0.  Async TP's fused all-gather-matmul and matmul-
  // reduce-scatter take the dimension themselves, so there only the
  // backward's unfused reduce-scatters of input gradients copy
  // (step_costs.cc overlapped_tp_comm).
  bool dtensor_sequence_copies = false;
  // Paired passes overlap their expert-parallel all-to-alls: in each
  // forward and backward that the schedule runs as one pair
  // (PipeOp::overlapped), one micro-batch's all-to-alls run under the
  // other's compute.
  // - DualPipe (DeepSeek-V3 report Sec. 3.2.1), the dualpipe-v schedule's
  //   paired forward and full backward.  torchtitan does it with
  //   pipeline_parallel_expert_parallel_overlap (default true; DualPipeV with
  //   ep > 1, not with activation checkpointing:
  //   torchtitan/distributed/dual_pipe_v.py get_dual_pipe_v_flag).
  // - Megatron-Core's --overlap-moe-expert-parallel-comm (Plan::ep_overlap):
  //   the combined 1F1B schedule's merged steady-state forward and backward
  //   (megatron/core/pipeline_parallel/combined_1f1b.py: "EP A2A in forward
  //   step is hidden by the attention/mlp computation in the backward step.
  //   Vice versa").
  bool paired_ep_overlap = false;
  // Gradient accumulation across micro-batches as a memory-bound pass over
  // the stage's parameters after a micro-batch's backward, however small
  // the micro-batch (0 bytes: none, the weight-gradient GEMM accumulates
  // into the gradient buffer itself or nothing is accumulated).
  // - DeepSpeed's BF16_Optimizer under the pipeline engine
  //   (pipe/engine.py _exec_backward_pass calls update_hp_grads, which adds
  //   lp.grad.to(fp32) into the fp32 gradient of every parameter): 18 B per
  //   parameter (cast: read 2, write 4; add: read 4 + 4, write 4), two
  //   kernels per parameter tensor, every micro-batch.
  // - Megatron-LM's fp16 training before gradient-accumulation fusion
  //   supported fp16 (Megatron-LM 07916bf, 2022-09-27; bf16 from 83b1e42,
  //   2022-02-13): the 16-bit .grad tensors accumulate through autograd's
  //   AccumulateGrad, an in-place `grad += new_grad` (read 2 + 2, write 2 =
  //   6 B per parameter, one kernel per tensor); the optimizer zeroes
  //   gradients with set_to_none=True (megatron/optimizer/optimizer.py
  //   zero_grad), so the first micro-batch's gradient is taken as is.
  double grad_accumulation_bytes_per_param = 0;
  int grad_accumulation_kernels_per_tensor = 0;
  bool grad_accumulation_skips_first_microbatch = false;
  // Optimizer offload keeps the rank's gradient partition in host memory,
  // not on the device (the device holds the 16-bit gradients only while
  // they are produced and reduced; ZeRO-1 keeps them unsharded until the
  // step's last backward reduces them):
  // - DeepSpeed's ZeRO-Offload (zero/stage_1_and_2.py with cpu_offload:
  //   copy_grads_in_partition accumulates each reduced partition in pinned
  //   host buffers, async_inplace_copy_grad_to_fp32_buffer_from_gpu fills
  //   the host fp32 gradient and clear_grad_attribute frees the device one;
  //   zero/stage3.py: grad_partitions_flat_buffer on the host);
  // - FSDP2's CPUOffloadPolicy (offload params: the sharded parameters and
  //   their gradients live on the host);
  // - the ZeRO-Offload design itself (Ren et al. 2021, Sec. 4.1: gradients,
  //   optimizer states and the optimizer step on the CPU), the generic model.
  // false: the gradients stay on the device and the optimizer step copies
  // them down (Megatron's --optimizer-cpu-offload keeps its main-gradient
  // buffers).
  bool offload_grads_to_host = false;
  // ZeRO-Offload's stage-1/2 path moves the partition's gradients over PCIe
  // at every reduction, on the compute stream (stage_1_and_2.py
  // reduce_ipg_grads: "copy_grad_stream is disabled because of race with
  // reduce", overlap_comm being off by default below stage 3):
  // async_accumulate_grad_in_cpu_via_gpu copies each reduced partition to
  // a 16-bit host buffer, and from the step's second reduction on first
  // brings the host's running sum up and adds it on the device; at the
  // accumulation boundary the sum is cast to fp32 and copied into the host
  // optimizer's gradient.  ZeRO-2 reduces after every micro-batch's
  // backward, ZeRO-1 once, after the last (lowering.cc).
  bool offload_grad_copies_each_reduction = false;
  // ZeRO-3 with the gradients on the host accumulates across micro-batches
  // on the device: from the step's second micro-batch on, each pass's
  // running sum comes up from the host before its new shard is added and
  // sent back down (DeepSpeed zero/stage3.py partition_grads: "if dst is
  // CPU, copy first to src device, do the addition there, then move back
  // to dst").  false: the shard only goes down (FSDP2 adds on the host).
  bool offload_grad_round_trip = false;
  // Device buffers of grad_bucket_params 16-bit elements that gradients are
  // copied into for their reduction, held for the whole step (DeepSpeed's
  // contiguous_gradients: stage_1_and_2.py setup_buckets allocates one of
  // reduce_bucket_size elements in the model's dtype, a second with
  // overlap_comm).  0: the generic bucket allowance (memory_model.cc).
  int contiguous_grad_buffers = 0;
  // Gradients are reduced after every micro-batch's backward, not only the
  // step's last (DeepSpeed ZeRO-2 keeps only its partition of the gradients,
  // so it cannot accumulate them unsharded across micro-batches).
  bool reduce_every_microbatch = false;
  // The gradient partition is kept and reduced in the model's 16-bit dtype
  // whatever the plan's grad_dtype (gradient_dtype below), and the optimizer
  // step casts it to fp32 while the activations are freed.  DeepSpeed
  // ZeRO-2 (zero/stage_1_and_2.py): copy_grads_in_partition allocates
  // grads_in_partition in the model's dtype (self.dtype), where each
  // micro-batch's reduced gradients accumulate; an fp32 grad_accum_dtype
  // only takes the grad_accum attribute path without partition_gradients
  // (use_grad_accum_attribute); the ipg buckets are reduced in
  // communication_data_type, the model's dtype by default (engine.py
  // communication_data_type); step() then makes the fp32 copy
  // (flat_grad_partition.to(fp32), single_partition_of_fp32_groups[i].grad)
  // beside the 16-bit partition, 4 B per partition element.
  bool grads_in_model_dtype = false;
  // Data-parallel gradient reductions run in the model's 16-bit dtype
  // whatever the plan's grad_dtype (reduction_dtype below): DeepSpeed with
  // its default config in every release.  Stage 3 of v0.3-v0.5
  // (zero/stage3.py allreduce_bucket) reduced the 16-bit gradients as they
  // were (fp32 only with allreduce_always_fp32); from v0.5.8 (#1487,
  // 2021-11) engine.py's communication_data_type, which the ZeRO optimizers
  // and allreduce_bucket (the BF16_Optimizer's fp32 gradients are cast to
  // it first) reduce in, defaulted to fp16 under fp16 or any ZeRO stage,
  // else bf16 under bf16; from #3370 (2023-04) to the model's 16-bit dtype
  // (fp32 only for the four weeks after #2970).  The exporter writes the
  // dtype out (communication_data_type), so an exported run reduces as
  // simulated whatever its release's default.
  bool grads_reduced_in_model_dtype = false;
  // FSDP2 (fully_shard, ZeRO-3 plans) copies on the compute stream
  // (torch/distributed/fsdp/_fully_shard/_fsdp_collectives.py): every
  // unshard ends with foreach_all_gather_copy_out, a split_with_sizes_copy
  // of the all-gather output into the unsharded parameters on the current
  // stream (read and write the parameters in their param dtype), and every
  // reduce-scatter starts with foreach_reduce_scatter_copy_in, a _chunk_cat
  // of the unsharded gradients into the reduce-dtype input, also on the
  // current stream (read the gradients, write them in reduce dtype).  The
  // forward unshards each module once, the backward again (reshard after
  // forward), and the backward reduce-scatters once, per micro-batch.
  bool fsdp2_copies = false;
  // The interleaved schedule's pipeline sends block the sender as the
  // other schedules' do.  Megatron-LM 2021-22 sends every pipeline tensor
  // with batch_isend_irecv, waits, then torch.cuda.synchronize()
  // (megatron/p2p_communication.py _communicate); Megatron-Core's
  // interleaved schedule posts them ahead (overlap_p2p_comm).  false: only
  // the non-interleaved 1F1B/GPipe sends block (LoweringOptions::p2p).
  bool interleaved_p2p_blocks = false;
  // Tensor-parallel communication overlapped with the GEMMs next to it
  // (Megatron-Core --tp-comm-overlap: Transformer Engine's userbuffers,
  // transformer_engine/pytorch/module/base.py initialize_ub defaults).  Each
  // sequence-parallel all-gather is split into tp chunks exchanged around
  // the ring while the consuming GEMM (QKV, FC1; in backward the dgrad of
  // the projection and FC2) works on the chunk it has ("ring_exchange",
  // copy engines, one SM); each reduce-scatter after the projection and FC2
  // runs on 16 SMs behind the GEMM split into 4 ("pipeline", the GEMM
  // keeping the other SMs); in backward the reduce-scatter of the QKV and
  // FC1 input gradients runs beside their weight-gradient GEMM ("bulk", 16
  // SMs).  torchtitan's async TP micro-pipelines the same collectives with
  // the same GEMMs and is costed with these forms.  The plan asks for it
  // (Plan::tp_comm_overlap); false elsewhere.
  bool tp_comm_overlap = false;
  // tp_comm_overlap runs as torchtitan's async TP (torch SymmetricMemory,
  // one workspace per TP group) rather than Transformer Engine's
  // userbuffers (memory_model.cc).
  bool async_tp = false;
  // The layers are Transformer Engine modules (Megatron-Core's
  // transformer_engine layer spec): each linear layer and the attention
  // core is a TE module, whose host work per call is several eager op
  // calls' (LayerShape::te_modules, layer_cost.h host_calls).
  bool te_modules = false;
  // What the profile assumes about the framework's version that a user of
  // another version should know ("" when nothing); simulate prints it.
  std::string version_note;
};

// Transformer Engine's userbuffers defaults (initialize_ub get_default_config):
// the SMs a "pipeline" or "bulk" overlap takes from the GEMM, and the chunks
// a "pipeline" overlap splits the GEMM into ("ring_exchange" splits into tp).
constexpr int kTeOverlapCommSms = 16;
constexpr int kTePipelineSplits = 4;

// Share of a stage's output tensor a rank keeps per in-flight micro-batch
// when keeps_stage_outputs (1, or 1/tp when partitioned).
double kept_stage_output_share(const ExecutionProfile& profile, const Plan& plan);

// The profile of `plan.framework` for this plan (bucket sizes may depend on
// the plan's dp and precision).
ExecutionProfile execution_profile(const Plan& plan);

// The dtype the framework keeps the plan's gradient partition in (memory,
// host copies): the plan's grad_dtype, or the model's 16-bit dtype where the
// profile says so (ExecutionProfile::grads_in_model_dtype).
GradDtype gradient_dtype(const Plan& plan, const ExecutionProfile& profile);

// The dtype the framework's data-parallel reductions move the plan's
// gradients in: the plan's grad_dtype, or the model's 16-bit dtype where the
// profile says so (ExecutionProfile::grads_reduced_in_model_dtype).  As for
// gradient_dtype, GradDtype::kBf16 stands for the plan's 16-bit precision.
GradDtype reduction_dtype(const Plan& plan, const ExecutionProfile& profile);

// Adam's bytes per parameter as the framework keeps them for this plan:
// moments at moment_bytes(plan.moment_dtype); the master copy 4 bytes, or 2
// where the profile stores only its remainder (master_param_remainders,
// under bf16 moments, bf16 parameters and no FP8 recipe but delayed).
AdamStateBytes adam_state_bytes(const Plan& plan, const ExecutionProfile& profile);

// The ZeRO stage the optimizer states are kept under (the plan's, or 1 where
// the profile shards them without ZeRO: optimizer_sharded_without_zero) and
// the ranks one copy of them is spread over.
struct OptimizerSharding {
  int zero = 0;
  int shard = 1;
};
OptimizerSharding optimizer_sharding(const Layout& layout, const ExecutionProfile& profile);

// The CLI / plan.json names, in enum order: generic, megatron-lm,
// megatron-core, deepspeed, torchtitan, pytorch.
const std::vector<std::string>& framework_names();
const char* to_string(Framework f);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_FRAMEWORK_FRAMEWORK_H_
