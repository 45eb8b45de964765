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
  // ZeRO-1/2 distributed optimizer: the updated parameters' all-gather runs
  // behind the next step's forward (hidden) instead of ending the step.
  bool overlap_param_gather = false;
  // ZeRO-3: with full recompute the recompute forward gathers each layer's
  // parameters again (a third gather per layer and micro-batch) instead of
  // using the backward's.
  bool regather_for_recompute = false;
};

// The profile of `plan.framework` for this plan (bucket sizes may depend on
// the plan's dp and precision).
ExecutionProfile execution_profile(const Plan& plan);

// The CLI / plan.json names, in enum order: generic, megatron-lm,
// megatron-core, deepspeed, torchtitan, pytorch.
const std::vector<std::string>& framework_names();
const char* to_string(Framework f);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_FRAMEWORK_FRAMEWORK_H_
