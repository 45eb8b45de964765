#include "simulator/framework/framework.h"

#include <algorithm>

namespace trainplan {

namespace {

// PyTorch DDP: bucket_cap_mb = 25 (torch/nn/parallel/distributed.py), fp32
// gradients by default: 25 MiB / 4 B parameters per bucket; buckets are
// all-reduced by autograd hooks as they fill, on NCCL's stream.
//
// Memory: FSDP2's fully_shard with MixedPrecisionPolicy(param_dtype=bf16,
// reduce_dtype=fp32) keeps each sharded parameter, its gradient and Adam's
// states in fp32 (torch/distributed/fsdp/_fully_shard/_fsdp_param.py: the
// sharded parameter keeps its original dtype, the all-gather casts), and
// DDP trains fp32 parameters under torch.autocast; the loss is
// torch.nn.functional.cross_entropy on the fp32-cast logits (the FSDP2
// script trainplan exports; torchtitan train.py loss_fn).
ExecutionProfile pytorch(const Plan& p) {
  ExecutionProfile e;
  e.framework = p.framework;
  e.grad_reduce = GradReduce::kOverlapped;
  e.grad_bucket_params = 25.0 * 1024 * 1024 / grad_bytes(p.precision, p.grad_dtype);
  e.fp32_master_is_param = p.framework != Framework::kGeneric;
  e.pytorch_cross_entropy = p.framework != Framework::kGeneric;
  // FSDP2's CPUOffloadPolicy offloads the sharded parameters, their
  // gradients and the optimizer states together (torch.distributed.fsdp
  // CPUOffloadPolicy: sharded gradients are copied device-to-host in
  // backward and the optimizer steps on the CPU).
  e.offload_grads_to_host = p.offload == Offload::kParams;
  e.keeps_stage_outputs = p.framework != Framework::kGeneric;
  // The exported script and torchtitan (train_configs/llama3_*.toml:
  // compile = false; the eager RMSNorm of torchtitan/models/norms.py) train
  // the model eagerly unless it is compiled (model_compiled: --compile, and
  // torchtitan's FP8 and async-TP plans), each block under torch.compile,
  // which fuses the elementwise ops.
  e.eager_elementwise = p.framework != Framework::kGeneric && !model_compiled(p);
  // The exported FSDP2 script and torchtitan shard with fully_shard.
  e.fsdp2_copies = p.framework != Framework::kGeneric;
  if (p.framework != Framework::kGeneric && p.offload == Offload::kNone) {
    // Gradient accumulation as the exported script runs it.
    if (p.zero >= 2) {
      // FSDP2 keeps gradient sync on for every micro-batch, as torchtitan
      // does (trainer.py train_step): each micro-batch's post_backward
      // reduce-scatters the unsharded gradient and adds the result to the
      // fp32 sharded .grad (_fsdp_collectives.py foreach_reduce: "grad +=
      // new_sharded_grad" on 1/dp of the parameters, left out).  Turning sync
      // off (set_requires_gradient_sync(False)) would save the reduce-
      // scatters of all but the last micro-batch at the price of an fp32
      // unsharded_accumulated_grad of the rank's whole gradient, 4 B per
      // parameter (_fsdp_param.py accumulate_unsharded_grad_if_needed), held
      // until the last one: what ZeRO-2/3 shard away, and more than a large
      // model has room for.
      e.reduce_every_microbatch = true;
    } else {
      // DDP under no_sync() keeps every micro-batch's gradients but the last
      // local: each fp32 parameter's .grad accumulates through AccumulateGrad,
      // an in-place grad += new_grad (read 4 + 4, write 4), one kernel per
      // tensor, after every micro-batch but the first (the optimizer's
      // zero_grad(set_to_none=True) leaves none before it).
      e.grad_accumulation_kernels_per_tensor = 1;
      e.grad_accumulation_skips_first_microbatch = true;
      e.grad_accumulation_bytes_per_param = 12;
    }
  }
  return e;
}

// Megatron-LM 2021-22 (v2.x-v3.0, megatron/training.py train_step): the
// local DistributedDataParallel keeps the gradients in one contiguous
// buffer and train_step calls model.allreduce_gradients() after
// forward_backward_func returns, i.e. one all-reduce after the whole
// backward, not overlapped; the distributed optimizer did not exist yet
// (ZeRO-1 plans gather after the step, exposed).
//
// fp16 gradients accumulate through autograd (ExecutionProfile::
// grad_accumulation_bytes_per_param): the 2021-22 papers trained fp16
// without gradient-accumulation fusion, which Megatron-LM supports for fp16
// only from 2022-09 (07916bf "Support gradient accumulation fusion in
// fp16"); the sc21 reproduction scripts pass --fp16 and no
// --accumulate-allreduce-grads-in-fp32 (examples/academic_paper_scripts/
// sc21/CONFIG.sh).  bf16 runs accumulate in fp32 inside the weight-gradient
// GEMM (--gradient-accumulation-fusion, default on from 83b1e42, 2022-02).
ExecutionProfile megatron_lm(const Plan& p) {
  ExecutionProfile e;
  e.framework = p.framework;
  e.grad_reduce = GradReduce::kAfterBackward;
  e.grad_bucket_params = 0;
  e.interleaved_p2p_blocks = true;
  if (p.precision == Precision::kFp16) {
    e.grad_accumulation_bytes_per_param = 6;
    e.grad_accumulation_kernels_per_tensor = 1;
    e.grad_accumulation_skips_first_microbatch = true;
  }
  return e;
}

// Megatron-Core as NeMo's and Megatron-Bridge's performance recipes run it
// (nemo/collections/llm/recipes/llama3_8b.py, llama3_70b.py:
// DistributedDataParallelConfig(overlap_grad_reduce=True,
// overlap_param_gather=True)); buckets of max(40M, 1M x dp) parameters
// (megatron/core/distributed/distributed_data_parallel.py).  Megatron-Core's
// own defaults are both False (distributed_data_parallel_config.py).
ExecutionProfile megatron_core(const Plan& p) {
  ExecutionProfile e;
  e.framework = p.framework;
  e.grad_reduce = GradReduce::kOverlapped;
  e.grad_bucket_params = std::max(40e6, 1e6 * p.dp * p.cp);
  // distributed_data_parallel.py: "Turn off bucketing if we are on a
  // pipeline stage that is not the first (since data-parallel communication
  // on these stages is not on the critical path)", and training.py wraps
  // model chunks after the first with disable_bucketing (core_r0.8.0 and
  // since).
  e.buckets_first_chunk_only = true;
  // With overlap_param_gather each forward pre-hook, once its bucket has
  // arrived, dispatches the next bucket's all-gather (core_r0.8.0
  // distrib_optimizer.py _finish_param_sync_helper; param_and_grad_buffer.py
  // finish_param_sync since), in forward order (_get_model_param_buffer_
  // dp_views reverses the buckets, built from the model's end).  The first
  // is dispatched from the first forward's pre-hook (since core_r0.9.0;
  // r0.8.0 did it in zero_grad), or, with the interleaved schedule
  // (align_param_gather, param_sync_func), chunks 0 and 1 at its start and
  // chunk c from the forward step of virtual micro-batch (c - 1) pp - r.
  e.overlap_param_gather = p.zero >= 1;
  // --tp-comm-overlap (megatron/training/arguments.py validate_args: only
  // with --sequence-parallel); NVIDIA's Llama 3 performance recipes set it
  // for TP > 1 (Megatron-Bridge perf_recipes/llama/h100/llama3.py
  // CommOverlapConfig(tp_comm_overlap=True)), Megatron-Core's default is off.
  e.tp_comm_overlap = p.tp_comm_overlap;
  // --overlap-moe-expert-parallel-comm (default off; Plan::ep_overlap).
  e.paired_ep_overlap = p.ep_overlap;
  // --transformer-impl transformer_engine is Megatron-Core's default
  // (megatron/training/arguments.py).
  e.te_modules = true;
  e.master_param_remainders = true;
  return e;
}

// DeepSpeed (deepspeed/runtime/zero/config.py): overlap_comm defaults to
// stage == 3 (overlap_comm_valid), reduce_bucket_size 5e8 elements.
// Without overlap_comm, ZeRO-1/2 reduce each bucket from the backward hooks
// on the compute stream (blocking); ZeRO-0 and the pipeline engine
// (Megatron-DeepSpeed, runtime/pipe/engine.py _exec_reduce_grads) reduce
// after the backward.  ZeRO-3 releases a module's parameters after its
// forward (partitioned_param_coordinator release_sub_module), so the
// activation-checkpointing recompute fetches them again before the
// backward fetches them a third time.  Gathers go module by module
// (stage3 fetch_sub_module runs from each nn.Module's pre-forward and
// pre-backward hook and all-gathers that module's own parameters,
// partitioned_param_coordinator / partition_parameters.py
// _all_gather -> one collective per fetch); parameters under
// param_persistence_threshold (1e5 elements, zero/config.py) are never
// partitioned, so a layer's biases and norms are not gathered.  A fetch
// coalesces the parameters it prefetches into one collective
// (all_gather_coalesced), the queue being walked until it holds
// stage3_prefetch_bucket_size = 5e7 elements (zero/config.py).
//
// Memory: bf16 with ZeRO-0 or 1 and fp32 gradient accumulation runs
// BF16_Optimizer (engine.py _do_optimizer_sanity_check returns BFLOAT16),
// which accumulates into an unsharded fp32 flat buffer
// (bf16_optimizer.py fp32_groups_gradients_flat) while the bf16 .grad
// tensors stay allocated (clear_lp_grads zeroes them, set_to_none=False).
ExecutionProfile deepspeed(const Plan& p) {
  ExecutionProfile e;
  e.framework = p.framework;
  e.grad_bucket_params = 5e8;
  e.offload_grads_to_host = p.offload != Offload::kNone;
  e.offload_grad_copies_each_reduction = p.offload != Offload::kNone && p.zero <= 2;
  e.offload_grad_round_trip = p.offload != Offload::kNone && p.zero == 3;
  // contiguous_gradients (zero/config.py default true; engine.py turns it off
  // for stage 1 without MoE, and cpu_offload turns it back on:
  // stage_1_and_2.py "contiguous_gradients or self.cpu_offload"): one ipg
  // buffer below stage 3, where overlap_comm is off.  Stage 3 as profiled
  // here runs without contiguous gradients (grads_all_reduced below).
  if (p.zero == 2 || (p.zero == 1 && p.offload != Offload::kNone)) e.contiguous_grad_buffers = 1;
  e.grads_in_model_dtype = p.zero == 2;
  e.grads_reduced_in_model_dtype = true;
  // runtime/pipe/engine.py: _exec_forward_pass stores the stage's outputs in
  // pipe_buffers['outputs'][buffer_id]; _exec_backward_pass reads them.
  e.keeps_stage_outputs = true;
  // runtime/config.py pipeline defaults: pipe_partitioned = True;
  // engine.py _exec_forward_pass stores PartitionedTensor(first_output,
  // slice-parallel group).data() and sets first_output.data = zeros(1).
  e.stage_outputs_partitioned = true;
  if (p.precision == Precision::kBf16 && p.zero <= 1 && p.grad_dtype == GradDtype::kFp32 && p.offload == Offload::kNone) {
    // BF16_Optimizer for ZeRO-0 as well (engine.py _do_optimizer_sanity_check
    // v0.8-v0.9: without ZeRO, bf16 with fp32 gradient accumulation returns
    // BFLOAT16; v0.6.5 took it for ZeRO-0 only, BLOOM's final runs), its fp32
    // groups partitioned over the data-parallel group (bf16_optimizer.py
    // _setup_for_real_optimizer).  Current releases raise on this mix, so the
    // exporter refuses it (planner/export/) and recommend does not offer it.
    e.optimizer_sharded_without_zero = p.zero == 0;
    e.lp_grad_bytes = 2;
    // pipe/engine.py _exec_backward_pass (v0.6.5+, "bf16+pipeline
    // parallelism" #1801, the BLOOM setup): optimizer.update_hp_grads()
    // after every micro-batch's backward; the engine's non-pipeline
    // backward does the same through BF16_Optimizer.backward.
    e.grad_accumulation_bytes_per_param = 18;
    e.grad_accumulation_kernels_per_tensor = 2;
    // pipe/engine.py _exec_reduce_grads -> _bf16_reduce_grads (v0.6.5 to
    // v0.9.x): buffered_allreduce_fallback over the optimizer's fp32
    // gradients (get_grads_for_reduction), all of them, in buckets of
    // MEMORY_OPT_ALLREDUCE_SIZE = 5e8 elements; each rank then steps its
    // own partition and all-gathers the bf16 parameters (update_lp_params).
    // Without the pipeline engine the same: engine.py allreduce_gradients
    // finds no reduce_gradients on BF16_Optimizer and calls
    // buffered_allreduce_fallback, which takes the optimizer's fp32
    // gradients ("This is currently for BF16 optimizer").  allreduce_bucket
    // casts each flattened bucket to communication_data_type before the
    // all-reduce (grads_reduced_in_model_dtype).
    e.grads_all_reduced = true;
  } else if (p.zero <= 1 && p.offload == Offload::kNone) {
    // 16-bit gradients stay in each parameter's .grad (FP16_Optimizer for
    // ZeRO-0; zero/stage_1_and_2.py DeepSpeedZeroOptimizer for ZeRO-1, whose
    // stage 1 registers no gradient hooks: partition_gradients and
    // overlap_comm are both off) and accumulate through autograd's
    // AccumulateGrad, an in-place grad += new_grad of 6 B per parameter, one
    // kernel per tensor; the optimizer's zero_grad(set_grads_to_None=True)
    // leaves none before the step's first micro-batch.  fp16 always runs
    // this way (ZeRO refuses a gradient-accumulation dtype other than the
    // model's, engine.py _do_optimizer_sanity_check).
    if (p.precision == Precision::kFp16 || (p.precision == Precision::kBf16 && p.grad_dtype == GradDtype::kBf16)) {
      e.grad_accumulation_bytes_per_param = 6;
      e.grad_accumulation_kernels_per_tensor = 1;
      e.grad_accumulation_skips_first_microbatch = true;
    }
    // ZeRO-1 reduces at the accumulation boundary by all-reducing every
    // gradient (stage_1_and_2.py reduce_ipg_grads: contiguous_gradients is
    // forced off for stage 1 without MoE layers, engine.py
    // _configure_zero_optimizer, so buffered_reduce_fallback(None, ...) ->
    // allreduce_and_copy, v0.5 to v0.9), each rank then stepping its own
    // partition and all-gathering the parameters.  With MoE layers the
    // contiguous path reduces each partition to its owner (average_tensor).
    e.grads_all_reduced = p.zero == 1 && p.ep <= 1;
  } else if (p.zero == 1 && p.precision != Precision::kFp32) {
    // ZeRO-Offload at stage 1 (offload_grads_to_host above): the reduction
    // waits for the accumulation boundary (stage_1_and_2.py
    // reduce_ready_partitions_and_remove_grads), so the micro-batches'
    // 16-bit .grad tensors accumulate through autograd's AccumulateGrad as
    // above; the fp32 gradients exist only on the host.
    e.grad_accumulation_bytes_per_param = 6;
    e.grad_accumulation_kernels_per_tensor = 1;
    e.grad_accumulation_skips_first_microbatch = true;
  }
  if (p.zero == 3) {
    e.grad_reduce = GradReduce::kOverlapped;
    e.regather_for_recompute = true;
    e.gather_per_module = true;
    e.gather_bucket_params = 5e7;
    // ZeRO-3 as DeepSpeed ran it through v0.5.4 (2021; the published runs at
    // scale, Narayanan et al. 2021 Table 2), counted in v0.3.14: each
    // parameter's gather (partition_parameters.py _allgather_param) loops
    // over the world in Python, a narrow() view of the flat output and a
    // torch.distributed.get_rank(group) per member, and passes the list to
    // torch.distributed.all_gather, whose ProcessGroupNCCL gathers into its
    // own flat buffer and copies it out member by member (a select and a
    // copy_ each); each reduce-scatter (_reduce_scatter_gradient) builds a
    // view(-1).narrow() per member and ProcessGroupNCCL copies each into its
    // flat input (a select and a copy_): four calls per member either way.
    // v0.5.5 moved gathers to one flat _all_gather_base.
    e.collective_calls_per_member = 4;
    // The same code paths' device copies: _allgather_param's torch.zeros of
    // the flat buffer, ProcessGroupNCCL's copy of its flattened output into
    // the list (allgather) and of the list into its flattened input
    // (reduce_scatter).
    e.list_api_copies = true;
    // _allgather_param starts with torch.cuda.synchronize() and a fetch ends
    // with one (stage3.py _synchronize_communication), so the host's calls
    // run with the device idle; a module's pre-forward/pre-backward hook
    // fetches (and waits for) its parameters, then prefetches the next
    // module's before its own kernels are launched
    // (pre_sub_module_forward_function: fetch_sub_module, then
    // prefetch_next_sub_modules); the backward's reduce-scatters come from
    // the gradient hooks once the module's backward is launched
    // (reduce_ipg_grads), and the next fetch's synchronize waits for them.
    e.gather_syncs_device = true;
    // stage3.py (v0.3.14) FP16_DeepSpeedZeroOptimizer_Stage3 defaults, as
    // zero/config.py: the coordinator's knobs (Zero3CoordinatorKnobs) and
    // reduce_bucket_size (grad_bucket_params above).
    e.zero3_module_fetches = true;
    // ... which do nothing in that code path: the model's reset_step hook
    // runs after its own sub-module hook has advanced the step counter
    // (setup_zero_stage3_hooks, v0.3.14 to v0.5.10), so every prefetch and
    // reuse lookup misses the trace and each module is gathered, waited for
    // and released at each use (deepspeed_zero3.h; DeepSpeed issue #1069).
    e.zero3_knobs.trace_aligned = false;
    // The gradients: stage 3's default contiguous_gradients was false until
    // v0.5.0 (zero/constants.py ZERO3_OPTIMIZATION_CONTIGUOUS_GRADIENTS_DEFAULT,
    // v0.3.13 to v0.4.x), and then reduce_ipg_grads takes
    // buffered_reduce_fallback: allreduce_and_copy flattens the bucket
    // (torch.cat), divides it by the world size and all-reduces it as one
    // tensor on the reduction stream, then copies it back into each
    // gradient; partition_previous_reduced_grads keeps this rank's part.
    // The bucket is flushed when the next gradient would overflow
    // reduce_bucket_size, after reduction_stream.synchronize() (the host
    // waits for the previous bucket).  Hybrid sharding (ZeRO++ hpZ) is
    // DeepSpeed >= 0.9, which reduce-scatters.
    e.grads_all_reduced = p.shard_group == 0 || p.shard_group >= p.dp * p.cp;
    e.version_note =
        "ZeRO-3 as DeepSpeed 0.3-0.4 ran it (2021: list-API gathers with per-member calls, no prefetch (its step "
        "counter one behind the module trace, v0.3.14-v0.5.10), the device synchronized before each gather, the "
        "gradients all-reduced in flattened buckets); DeepSpeed >= 0.5.5 gathers into one flat buffer and "
        "reduce-scatters, >= 0.6 prefetches, so this plan is pessimistic there";
  } else if (p.zero >= 1 && p.pp == 1) {
    e.grad_reduce = GradReduce::kBlocking;
    // zero/stage_1_and_2.py reduce_ready_partitions_and_remove_grads reduces
    // a parameter's gradient from its backward hook when
    // partition_gradients (stage 2: engine.py partition_grads=zero_stage ==
    // gradients) or at the accumulation boundary (stage 1).
    e.reduce_every_microbatch = p.zero == 2;
  } else {
    e.grad_reduce = GradReduce::kAfterBackward;
  }
  return e;
}

// torchtitan: FSDP2 reduce-scatters each transformer block's gradients as
// its backward ends and prefetches the next block's all-gather
// (torchtitan/models/llama3/infra/parallelize.py apply_fsdp: fully_shard
// per block); activation checkpointing recomputes inside the block's
// backward, after its unshard, so no extra gather; DDP (dp_replicate only)
// as PyTorch's.  Selective activation checkpointing is per-op SAC
// (torchtitan/models/llama/parallelize_llama.py `_save_list` and
// `_custom_policy`, job config `activation_checkpoint.selective_ac_option =
// "op"`, the default of its Llama 3 train configs): the outputs of
// aten.mm (except every second one per block), of the SDPA kernels and of
// reduce_scatter are saved, the rest recomputed.
ExecutionProfile torchtitan(const Plan& p) {
  ExecutionProfile e = pytorch(p);
  e.framework = p.framework;
  // torchtitan never turns gradient sync off (trainer.py train_step runs
  // each accumulation step's forward-backward as is): FSDP2 reduce-scatters
  // every micro-batch's gradients (as the exported script), and its DDP
  // (replicate) all-reduces every backward, where the script's no_sync()
  // waits for the last.
  e.reduce_every_microbatch = true;
  e.per_op_selective_recompute = true;
  // Async TP (parallelism.enable_async_tensor_parallel): torch's
  // fused_all_gather_matmul splits each sequence-parallel all-gather into
  // one chunk per rank, copied through SymmetricMemory while the GEMM works
  // on the chunk it has, and fused_matmul_reduce_scatter pipelines the
  // reduce-scatter behind the GEMM's chunks (torch/distributed/
  // _symmetric_memory/__init__.py; micro-pipeline TP, applied by
  // torch.compile's pattern matcher to the forward and the backward): the
  // chunked-overlap forms of ExecutionProfile::tp_comm_overlap.
  e.tp_comm_overlap = p.tp_comm_overlap;
  e.async_tp = p.tp_comm_overlap;
  // torchtitan's models keep [batch, seq, hidden] and shard the sequence on
  // dim 1 (parallelize.py: SequenceParallel(), PrepareModuleInput(
  // input_layouts=(Shard(1),), desired_input_layouts=(Replicate(),)),
  // RowwiseParallel(output_layouts=Shard(1))).
  e.dtensor_sequence_copies = true;
  e.paired_ep_overlap = p.schedule == Schedule::kDualPipeV && p.ep > 1 && p.recompute == Recompute::kNone;
  return e;
}

// Without a framework: DualPipe as its authors run it, all-to-alls
// overlapped in the paired passes whatever the recompute.
ExecutionProfile generic(const Plan& p) {
  ExecutionProfile e = pytorch(p);
  e.offload_grads_to_host = p.offload != Offload::kNone;
  e.paired_ep_overlap = (p.schedule == Schedule::kDualPipeV && p.ep > 1) || p.ep_overlap;
  e.tp_comm_overlap = p.tp_comm_overlap;
  return e;
}

}  // namespace

GradDtype gradient_dtype(const Plan& plan, const ExecutionProfile& profile) {
  return profile.grads_in_model_dtype ? GradDtype::kBf16 : plan.grad_dtype;
}

GradDtype reduction_dtype(const Plan& plan, const ExecutionProfile& profile) {
  return profile.grads_reduced_in_model_dtype || profile.grads_in_model_dtype ? GradDtype::kBf16 : plan.grad_dtype;
}

AdamStateBytes adam_state_bytes(const Plan& plan, const ExecutionProfile& profile) {
  AdamStateBytes a;
  a.moment = moment_bytes(plan.moment_dtype);
  const bool remainders = profile.master_param_remainders && plan.moment_dtype == MomentDtype::kBf16 &&
                          plan.precision == Precision::kBf16 &&
                          (plan.fp8_recipe == Fp8Recipe::kNone || plan.fp8_recipe == Fp8Recipe::kDelayed);
  if (remainders) a.master = 2;
  return a;
}

double kept_stage_output_share(const ExecutionProfile& profile, const Plan& plan) {
  if (!profile.keeps_stage_outputs) return 0;
  return profile.stage_outputs_partitioned ? 1.0 / plan.tp : 1.0;
}

const std::vector<std::string>& framework_names() {
  static const std::vector<std::string> names = {"generic",   "megatron-lm", "megatron-core",
                                                 "deepspeed", "torchtitan",  "pytorch"};
  return names;
}

const char* to_string(Framework f) { return framework_names()[static_cast<size_t>(f)].c_str(); }

OptimizerSharding optimizer_sharding(const Layout& layout, const ExecutionProfile& profile) {
  const Plan& p = layout.plan;
  if (p.zero == 0 && profile.optimizer_sharded_without_zero) return {1, p.dp * p.cp};
  return {p.zero, layout.shard_degree};
}

ExecutionProfile execution_profile(const Plan& p) {
  switch (p.framework) {
    case Framework::kGeneric: return generic(p);
    case Framework::kMegatronLM: return megatron_lm(p);
    case Framework::kMegatronCore: return megatron_core(p);
    case Framework::kDeepSpeed: return deepspeed(p);
    case Framework::kTorchtitan: return torchtitan(p);
    case Framework::kPytorch: return pytorch(p);
  }
  return pytorch(p);
}

}  // namespace trainplan
