#include "simulator/cost/step_flops.h"

#include "simulator/cost/layer_cost.h"

namespace trainplan {

StepFlops step_flops(const ModelSpec& model, const Plan& plan) {
  LayerShape one;  // one unsharded sequence
  one.seq = plan.seq;
  one.precision = plan.precision;
  one.attention = plan.attention;
  one.recompute = plan.recompute;
  LayerCost layer = transformer_layer_cost(model, one);
  LayerCost out = output_cost(model, one);
  const double sequences = static_cast<double>(plan.gbs);
  const double layers = static_cast<double>(model.layers);
  StepFlops f;
  // Forward + backward (2x forward) = 3x forward.
  f.model_flops = 3.0 * sequences * (layers * layer.fwd_flops + out.fwd_flops);
  f.hardware_flops = f.model_flops + sequences * layers * layer.recompute_flops;
  return f;
}

}  // namespace trainplan
