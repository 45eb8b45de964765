// FLOPs of one training iteration (global batch) of a whole model.
//
// Model FLOPs (for MFU) exclude recomputation; hardware FLOPs (for HFU)
// include it.  For GPT-style models (ffn = 4h, MHA) they reduce exactly to
// Megatron's 72*B*s*l*h^2*(1 + s/(6h) + V/(12lh)) and, with full recompute,
// 96*B*s*l*h^2*(1 + s/(6h) + V/(16lh)) (Narayanan et al. 2021, App. A).
#ifndef TRAINPLAN_SIM_COST_STEP_FLOPS_H_
#define TRAINPLAN_SIM_COST_STEP_FLOPS_H_

#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

struct StepFlops {
  double model_flops = 0;
  double hardware_flops = 0;
};

// REQUIRES: plan resolved (gbs, seq set).  Forward = sum of matmul and
// attention FLOPs of every layer plus the logits; backward = 2x forward;
// recompute adds the recomputed forward FLOPs of the transformer layers.
StepFlops step_flops(const ModelSpec& model, const Plan& plan);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_COST_STEP_FLOPS_H_
