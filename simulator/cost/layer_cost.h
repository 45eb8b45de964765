// Per-rank cost of one transformer layer, the embedding and the output layer
// for one micro-batch: parameters, FLOPs, memory traffic and the activation
// bytes saved for backward, op by op.
//
// Sources (cited per formula in layer_cost.cc):
// - FLOPs: matmul = 2*m*n*k; Korthikanti et al. 2022 App. A / Narayanan et al.
//   2021: a GPT layer costs 24*B*s*h^2 + 4*B*s^2*h forward; backward = 2x.
// - Saved activations: Korthikanti et al. 2022 Sec. 4, Table 2: each op saves
//   its input; a GPT layer with dropout saves s*b*h*(34 + 5*a*s/h) bytes in
//   16-bit, split by TP/SP as in Table 2.  Derived op by op here, so GQA,
//   SwiGLU, other FFN widths, no dropout and flash attention follow from the
//   tensors actually saved.
// Invariants: every quantity is per TP/CP rank and per micro-batch of `mbs`
// sequences of `seq` tokens; the sum over the tp*cp ranks of a layer's FLOPs
// equals the unsharded layer's FLOPs.
#ifndef TRAINPLAN_SIM_COST_LAYER_COST_H_
#define TRAINPLAN_SIM_COST_LAYER_COST_H_

#include <string>
#include <vector>

#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

// How one layer is executed on one rank.
struct LayerShape {
  int tp = 1;
  int cp = 1;
  bool sp = false;
  int64_t mbs = 1;
  int64_t seq = 0;
  Precision precision = Precision::kBf16;
  Attention attention = Attention::kFlash;
  Recompute recompute = Recompute::kNone;
  Fp8Recipe fp8_recipe = Fp8Recipe::kNone;  // FP8 linear GEMMs (resolved recipe)
  bool fp8_saved_inputs = false;  // linear inputs saved in FP8 (Transformer Engine; torchao keeps bf16)
};

LayerShape layer_shape(const Plan& resolved_plan);

enum class OpKind { kGemm, kAttention, kElementwise };
enum class TpComm { kNone, kAllReduce, kAllGather, kReduceScatter };

// One forward op of a layer on one rank.  The backward of a GEMM or attention
// op costs 2x its forward FLOPs; of an elementwise op `bwd_bytes` (2x its
// bytes unless the op says otherwise).
struct OpCost {
  std::string name;
  OpKind kind = OpKind::kElementwise;
  int64_t m = 0, n = 0, k = 0;   // GEMM shape (kGemm; kAttention: each of its two products)
  double flops = 0;              // forward FLOPs
  double bytes = 0;              // forward HBM traffic of memory-bound ops
  double bwd_bytes = 0;          // backward HBM traffic of memory-bound ops
  bool fp8 = false;              // kGemm: runs in FP8 (at the FP8 peak)
  double saved_bytes = 0;        // activation bytes saved for backward
  double selective_dropped_bytes = 0;  // part of saved_bytes that selective
                                       // recompute does not keep (s^2 terms)
  TpComm tp_comm_after = TpComm::kNone;  // collective over tp after this op
  double tp_comm_bytes = 0;      // buffer size of that collective (nccl-tests "size")
};

struct LayerCost {
  std::vector<OpCost> ops;       // forward, in execution order
  double params = 0;             // parameters held by this TP rank
  double fwd_flops = 0;          // sum of ops
  double fwd_bytes = 0;
  double saved_bytes = 0;        // per recompute mode (see saved_activation_bytes)
  double recompute_flops = 0;    // extra forward FLOPs in backward
  double cp_comm_bytes = 0;      // K,V bytes exchanged over cp per forward
  double linear_params = 0;      // parameters of the FP8-capable linear layers on this rank
  // M_W of Zero Bubble (Qi et al. Table 1): what one micro-batch keeps from
  // its input-gradient pass B to its weight-gradient pass W: each linear
  // layer's saved input and its output gradient (32sbh for a GPT layer).
  double weight_grad_saved_bytes = 0;
};

// Bytes of HBM traffic per element to quantize one bf16 tensor to FP8 for
// a GEMM (docs/fp8.md): read 2 B, write the FP8 copy and its transpose
// (Hopper's FP8 GEMMs take only the TN layout, so the backward needs the
// transposed operand; Blackwell's MXFP8 needs row- and column-wise blocks):
// 4 B; current scaling (tensorwise, rowwise) first reads the tensor once
// more for its amax: 6 B; mxfp8 adds one E8M0 scale byte per 32 elements.
double fp8_cast_bytes_per_element(Fp8Recipe recipe);

// Parameters of one whole (unsharded) transformer layer.
double layer_params(const ModelSpec& m);
// Parameters of the input embedding (+ learned positions) and of the output
// layer (0 if tied), unsharded.
double embedding_params(const ModelSpec& m);
double output_params(const ModelSpec& m);
double total_params(const ModelSpec& m);

// The layer's ops and totals on one rank.  REQUIRES: tp divides heads,
// kv_heads and ffn_hidden; cp divides seq.
LayerCost transformer_layer_cost(const ModelSpec& m, const LayerShape& s);

// Activation bytes one layer saves for backward per micro-batch on one rank,
// for s.recompute: none keeps every op's saved tensors, selective drops
// selective_dropped_bytes, full keeps only the layer input.
double saved_activation_bytes(const LayerCost& c, const ModelSpec& m, const LayerShape& s);

// Input embedding on the first stage and output layer + loss on the last, per
// rank per micro-batch.
LayerCost embedding_cost(const ModelSpec& m, const LayerShape& s);
LayerCost output_cost(const ModelSpec& m, const LayerShape& s);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_COST_LAYER_COST_H_
