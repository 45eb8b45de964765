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

#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

// How one layer is executed on one rank.
struct LayerShape {
  int tp = 1;
  int cp = 1;
  bool cp_a2a = false;  // the CP exchange is Ulysses' all-to-alls (Plan::cp_comm), not the ring
  bool sp = false;
  int64_t mbs = 1;
  int64_t seq = 0;
  Precision precision = Precision::kBf16;
  Attention attention = Attention::kFlash;
  Recompute recompute = Recompute::kNone;
  uint16_t recompute_modules = kRcCoreAttn;  // selective: what is re-run (RecomputeModule bits)
  Fp8Recipe fp8_recipe = Fp8Recipe::kNone;  // FP8 linear GEMMs (resolved recipe)
  bool fp8_saved_inputs = false;  // linear inputs saved in FP8 (Transformer Engine; torchao keeps bf16)
  // torchao quantizes each linear's whole weight at every use: no FP8 weight
  // cache (Transformer Engine) and no FP8 all-gather (fp8_weights_gathered).
  bool fp8_casts_weights = false;
  // MoE layers: expert parallel and expert tensor parallel degrees, and the
  // load of the busiest expert-parallel rank over the mean (>= 1; 0: the
  // expected maximum under uniform routing, moe_routing.h).
  int ep = 1;
  int etp = 1;
  double moe_load = 0;
  // How the framework runs it (ExecutionProfile): selective recompute as
  // torchtitan's per-op SAC, and the loss as PyTorch's cross_entropy on
  // fp32-cast logits (else Megatron's vocab-parallel one).
  bool per_op_sac = false;
  bool pytorch_loss = false;
  // Megatron's vocab-parallel loss as its fused implementation
  // (Plan::cross_entropy_fusion; output_cost).
  bool loss_fusion = false;
  // Memory-bound ops as PyTorch eager kernels (ExecutionProfile::eager_elementwise).
  bool eager = false;
  // Each sequence-parallel all-gather's result and reduce-scatter's input
  // copied whole, in both passes (ExecutionProfile::dtensor_sequence_copies);
  // with tp_seq_fused (async TP) only the backward's reduce-scatters of the
  // gathers' input gradients, the collectives it leaves unfused.
  bool tp_seq_copies = false;
  bool tp_seq_fused = false;
  bool tp_seq_fused_gathers = false;  // the forward all-gathers fused too (not under row-wise float8)
  // Linear layers and the attention core as Transformer Engine modules
  // (ExecutionProfile::te_modules): the host calls of each (host_calls).
  bool te_modules = false;
  // Multi-token prediction depths after the output layer (Plan::mtp_layers).
  int mtp_layers = 0;
  // MoE layers: the token dispatcher (Plan::moe_dispatcher).
  MoeDispatcher dispatcher = MoeDispatcher::kAllToAll;
  // Every expert's input padded to its capacity (Plan::moe_pad_to_capacity):
  // the load is the model's capacity_factor, whatever the routing.
  bool pad_to_capacity = false;
  // Megatron-Core's fused router (Plan::moe_router_fusion): fewer router
  // kernels, so fewer host calls (te_modules only).
  bool router_fusion = false;
  // Megatron-Core's shared-expert overlap (Plan::moe_shared_expert_overlap):
  // the shared experts run beside the dispatcher, outside the moe_router
  // CUDA graph.
  bool shared_expert_overlap = false;
  // Per-layer CUDA graphs (Plan::cuda_graph, CudaGraphModule bits): the
  // captured ops' host calls become one graph replay per layer and pass,
  // and the layer keeps its graph's static inputs (layer_cost.cc
  // capture_in_cuda_graph).
  uint8_t cuda_graph = 0;
};

LayerShape layer_shape(const Plan& resolved_plan);

enum class OpKind { kGemm, kAttention, kElementwise };
enum class TpComm { kNone, kAllReduce, kAllGather, kReduceScatter, kAllToAll };
enum class TpCommPasses : uint8_t { kBoth, kForwardOnly, kBackwardOnly };
// The communicator of a collective folded into a layer: the tensor-parallel
// group, the expert-parallel group (token dispatch and combine) or the
// expert tensor-parallel group.
enum class CommGroup { kTp, kEp, kEtp };

// One forward op of a layer on one rank.  The backward of a GEMM or attention
// op costs 2x its forward FLOPs; of an elementwise op `bwd_bytes` (2x its
// bytes unless the op says otherwise).
struct OpCost {
  std::string name;
  OpKind kind = OpKind::kElementwise;
  int64_t m = 0, n = 0, k = 0;   // GEMM shape (kGemm; kAttention: each of its two products)
  int64_t groups = 1;            // kGemm: a grouped GEMM of `groups` m x n x k problems (local experts)
  double flops = 0;              // forward FLOPs
  double bytes = 0;              // forward HBM traffic of memory-bound ops
  double bwd_bytes = 0;          // backward HBM traffic of memory-bound ops
  bool fp8 = false;              // kGemm: runs in FP8 (at the FP8 peak)
  // kAttention: the share of the s x s product the time is charged for.
  // 1: attention_efficiency is applied to the full product, as the cluster
  // files' figures are fitted (docs/moe.md, "attention convention": a
  // causal kernel computes about half of it, and charging half makes the
  // dense H100 rows 15-35 points more optimistic, so the factor stays 1
  // until the optimism it would expose elsewhere is found).
  double computed_share = 1;
  // kAttention: the keys one kernel call loops over per query block (the
  // sequence, or its 1/cp share per ring step under context parallelism);
  // 0: long enough not to matter (compute_model.h, flash_sequence_factor).
  int64_t kv_len = 0;
  // kAttention, flash: the part of `flops` done by sliding-window layers
  // (ModelSpec::is_windowed_layer; a layer's attention is the mean over the
  // model's full and windowed layers), whose kernel calls loop over
  // window_kv_len keys instead of kv_len.
  double window_flops_share = 0;
  int64_t window_kv_len = 0;
  // kAttention, flash: the query/key head width the kernel's tiles hold
  // (compute_model.h, flash_head_dim_factor); 0: not a fused kernel.
  int64_t head_dim = 0;
  double saved_bytes = 0;        // activation bytes saved for backward
  // Eager framework op calls the host makes to issue this op's forward
  // (and, taken as equal, its backward); times ClusterSpec host.op_overhead
  // it is the host time the GPU may wait for (step_costs.h).  Set by
  // host_calls() below.
  double host_calls = 1;
  // Selective recompute (RecomputeModule bits): recomputing a module in
  // `rerun_by` re-runs this op's forward in backward; one in `drop_by`
  // stops keeping `dropped_bytes` of saved_bytes (core_attn: the s^2 terms;
  // layernorm: a norm output this op keeps as its input).
  uint16_t rerun_by = 0;
  uint16_t drop_by = 0;
  double dropped_bytes = 0;
  // Per-op selective activation checkpointing (LayerShape::per_op_sac):
  // the bytes of this op's output the policy saves, and the share of its
  // forward it re-runs in backward (a fused QKV or gate/up GEMM stands for
  // two or three of the framework's matmuls, of which some are saved).
  double sac_saved_bytes = 0;
  double sac_rerun_share = 0;
  TpComm tp_comm_after = TpComm::kNone;  // collective after this op
  // The passes that run it.  Megatron's tensor-parallel operators come in
  // pairs (Shoeybi et al. 2019 Fig. 3; Korthikanti et al. 2022 Fig. 5): g
  // after a row-parallel layer all-reduces in forward (its backward is the
  // identity), f before a column-parallel one all-reduces in backward.  A
  // transformer block has one of each, charged as one op's collective in
  // both passes (kBoth; with sequence parallelism the forward's collective
  // and its transpose in backward).  Without sequence parallelism the
  // vocab-parallel embedding has a g alone (forward only) and the output
  // layer an f alone (backward only).
  TpCommPasses tp_comm_passes = TpCommPasses::kBoth;
  CommGroup comm_group = CommGroup::kTp;  // over which group
  double tp_comm_bytes = 0;      // buffer size of that collective (nccl-tests "size")
  // The backward's collective's size where it differs (an FP8 all-gather of
  // an output gradient behind a bf16 reduce-scatter, or the bf16 reduce-
  // scatter of an input gradient behind an FP8 all-gather); < 0: the same.
  double tp_comm_bwd_bytes = -1;
  // An expert-parallel all-to-all of a deduplicating dispatcher (DeepEP,
  // HybridEP): each token goes once to each rank (and, off the node, each
  // node) holding one of its experts, `copy_bytes` per destination for all
  // of this rank's tokens at the busiest rank's load.  The time is that of
  // the uniform all-to-all loading the links as much
  // (all_to_all_equivalent_bytes, at the group's placement); tp_comm_bytes
  // keeps the all-to-all dispatcher's size.  copy_bytes 0: not deduplicated.
  struct Dedup {
    double copy_bytes = 0;
    int64_t experts = 0, top_k = 0, groups = 0, group_topk = 0;
  } dedup;
};

// A layer's ops, shared by the copies of its LayerCost until one of them is
// changed (copy on write).  The planner keeps tens of thousands of step costs
// that differ only in which layers recompute (partial_recompute_step_costs:
// each a copy of the costs with every layer recomputed), so a copy must not
// copy the ops.  Reading is a const std::vector<OpCost>; changing goes
// through push_back or mut(), which first make this copy's ops its own.
// Unlike a vector member, a const reference taken to the ops of a copy that
// shares them keeps reading the shared ones after mut() on that copy:
// take references after changing, not across a change.
class OpList {
 public:
  using value_type = OpCost;
  using const_iterator = std::vector<OpCost>::const_iterator;
  using const_reverse_iterator = std::vector<OpCost>::const_reverse_iterator;

  OpList() = default;
  OpList(std::vector<OpCost> ops) : ops_(std::make_shared<std::vector<OpCost>>(std::move(ops))) {}  // NOLINT

  const std::vector<OpCost>& vec() const { return ops_ ? *ops_ : empty_list(); }
  operator const std::vector<OpCost>&() const { return vec(); }  // NOLINT: reads as the vector
  size_t size() const { return vec().size(); }
  bool empty() const { return vec().empty(); }
  const OpCost& operator[](size_t i) const { return vec()[i]; }
  const OpCost& front() const { return vec().front(); }
  const OpCost& back() const { return vec().back(); }
  const_iterator begin() const { return vec().begin(); }
  const_iterator end() const { return vec().end(); }
  const_reverse_iterator rbegin() const { return vec().rbegin(); }
  const_reverse_iterator rend() const { return vec().rend(); }

  // This copy's own ops, to change (copied first where another copy shares them).
  std::vector<OpCost>& mut() {
    if (!ops_) ops_ = std::make_shared<std::vector<OpCost>>();
    else if (ops_.use_count() > 1) ops_ = std::make_shared<std::vector<OpCost>>(*ops_);
    return *ops_;
  }
  void push_back(OpCost op) { mut().push_back(std::move(op)); }

 private:
  static const std::vector<OpCost>& empty_list() {
    static const std::vector<OpCost> kEmpty;
    return kEmpty;
  }
  std::shared_ptr<std::vector<OpCost>> ops_;
};

struct LayerCost {
  OpList ops;                    // forward, in execution order
  double params = 0;             // parameters held by this TP rank
  double fwd_flops = 0;          // sum of ops
  double fwd_bytes = 0;
  double saved_bytes = 0;        // per recompute mode (see saved_activation_bytes)
  double recompute_flops = 0;    // extra forward FLOPs in backward
  double cp_comm_bytes = 0;      // K,V bytes exchanged over cp per forward (ring: the all-gather's output)
  // Ulysses (cp_a2a): each rank's send buffer of the all-to-all before the
  // attention (its tokens' Q, K and V) and of the one after it (their
  // attention output); the backward moves the same gradients the other way.
  double cp_a2a_qkv_bytes = 0, cp_a2a_out_bytes = 0;
  double linear_params = 0;      // parameters of the FP8-capable linear layers on this rank
  // M_W of Zero Bubble (Qi et al. Table 1): what one micro-batch keeps from
  // its input-gradient pass B to its weight-gradient pass W: each linear
  // layer's saved input and its output gradient (32sbh for a GPT layer).
  double weight_grad_saved_bytes = 0;
  double expert_params = 0;      // part of params held as routed experts (sharded by ep*etp, not tp)
  bool moe = false;              // an MoE layer
  double moe_load = 1;           // the busiest EP rank's load over the mean (moe)
  // Bytes held during this block's backward beyond its saved activations:
  // the re-materialised tensors of full or per-op selective recompute, and
  // for the output layer the loss's gradient buffers (output_cost).
  double backward_transient_bytes = 0;
  // Per-layer CUDA graphs: the static input buffers the layer's graph keeps
  // per micro-batch in flight (included in saved_bytes; 0: not graphed).
  double cuda_graph_static_bytes = 0;
};

// Bytes of HBM traffic per element to quantize one bf16 tensor to FP8 for
// a GEMM (docs/fp8.md): read 2 B, write the FP8 copy and its transpose
// (Hopper's FP8 GEMMs take only the TN layout, so the backward needs the
// transposed operand; Blackwell's MXFP8 needs row- and column-wise blocks):
// 4 B; current scaling (tensorwise, rowwise) first reads the tensor once
// more for its amax: 6 B; mxfp8 adds one E8M0 scale byte per 32 elements.
// torchao's rowwise scales along both dimensions: one kernel reads the
// tensor, writes the row-wise FP8 copy and a bf16 transpose (5 B), a second
// reads the transpose and writes its FP8 copy (3 B): 8 B (torchao
// testing/training/roofline_utils.py get_tensor_memory_traffic_ovhd_s, the
// kernels of its input and grad_output casts).
double fp8_cast_bytes_per_element(Fp8Recipe recipe);

// HBM bytes per weight element of torchao quantizing a linear's weight at
// one use (LayerShape::fp8_casts_weights), forward and backward (the same
// roofline's weight kernels): tensorwise reads it for the amax and writes
// the FP8 copy (5 B), the backward casts the transposed layout (3 B);
// rowwise casts row-wise (3 B), the backward transposes in bf16 (4 B) and
// casts that (3 B).  {0, 0} for the recipes Transformer Engine runs.
struct Fp8WeightCastBytes {
  double forward = 0, backward = 0;
};
Fp8WeightCastBytes fp8_weight_cast_bytes_per_element(Fp8Recipe recipe);

// HBM bytes per element of the output of a backward GEMM (input gradient,
// weight gradient) that torchao rescales after the GEMM: its rowwise recipe
// runs the slow-accumulation backward GEMMs as cuBLAS tensorwise GEMMs with
// unit scales and multiplies the output by the row and column scales
// afterwards, read 2 B + write 2 B ("the rowwise CUTLASS-based kernel is so
// slow without fast-accum": torchao float8/float8_ops.py
// addmm_float8_unwrapped, pytorch/ao#1325).  0 for every other recipe.
double fp8_backward_rescale_bytes_per_element(Fp8Recipe recipe);

// Bytes per element of a sequence-parallel all-gather that feeds an FP8
// linear layer (the norm output before QKV and FC1 in forward; the output
// gradient of the projection and FC2 in backward): the FP8 data, and
// blockwise or MXFP8 scales, quantized before the gather.  Transformer
// Engine does so (module/layernorm_linear.py: the norm writes FP8, then
// gather_along_first_dim(..., quantizer=input_quantizer), with NCCL or
// userbuffers; module/linear.py: grad_output gathered with the grad-output
// quantizer), and so does torchao's tensorwise float8 under torchtitan
// (float8/float8_tensor_parallel.py: PrepareFloat8ModuleInput and
// Float8ColwiseParallel cast before the all-gather, Float8RowwiseParallel
// casts the output gradient before the backward's all-gather).  0 where the
// gather stays in high precision: no FP8, and torchao's rowwise recipe
// ("all distributed communication is done in high precision",
// torchtitan components/quantization/float8.md).  The reduce-scatters (of a
// row-parallel output, of a column-parallel input gradient) sum bf16.
double fp8_gather_bytes_per_element(Fp8Recipe recipe);

// Parameters of one whole (unsharded) transformer layer: a dense layer
// (ffn_hidden MLP), or with `moe` an MoE layer (router, every routed expert
// and the shared experts).
double layer_params(const ModelSpec& m, bool moe = false);
// Parameters a token passes through in one layer: the MoE layer's router,
// top_k routed experts and the shared experts (the dense layer's all).
double layer_active_params(const ModelSpec& m, bool moe);
// Parameters of the attention block (projections, their biases and the
// MLA latent norms) and of one MLP of width `ffn` with its biases.
double attention_params(const ModelSpec& m);
double mlp_params(const ModelSpec& m, int64_t ffn);
// Elements of a dense layer's largest weight matrix on one of `tp` ranks:
// the fused QKV or the MLP's first linear layer (SwiGLU: gate and up fused),
// the most a framework that gathers one module at a time holds of a layer.
double largest_weight_matrix(const ModelSpec& m, int tp);
// Parameters of the input embedding (+ learned positions) and of the output
// layer (0 if tied), unsharded.
double embedding_params(const ModelSpec& m);
double output_params(const ModelSpec& m);
double total_params(const ModelSpec& m);
// What one token passes through (MoE: top_k of the routed experts), with
// the embedding and output layers.
double active_params(const ModelSpec& m);

// The layer's ops and totals on one rank; `moe` selects the MoE block for
// the feed-forward part (REQUIRES m.has_moe then).  REQUIRES: tp divides
// heads, kv_heads and ffn_hidden; cp divides seq; with moe, ep divides
// experts and etp the expert width.
LayerCost transformer_layer_cost(const ModelSpec& m, const LayerShape& s, bool moe = false);

// Activation bytes one layer saves for backward per micro-batch on one rank,
// for s.recompute: none keeps every op's saved tensors, selective drops
// the dropped_bytes of ops whose drop_by meets s.recompute_modules, full
// keeps only the layer input.
double saved_activation_bytes(const LayerCost& c, const ModelSpec& m, const LayerShape& s);

// A layer's input (= a pipeline stage's output) per micro-batch on one
// rank: 2sbh, 2sbh/t when SP splits it (Korthikanti Table 2); what full
// recompute checkpoints.
double layer_input_bytes(const ModelSpec& m, const LayerShape& s);

// Input embedding on the first stage and output layer + loss on the last, per
// rank per micro-batch.  The loss keeps its fp32 probabilities (4 B per
// logit) and its backward holds more (backward_transient_bytes): Megatron's
// fused vocab-parallel cross entropy computes the gradient in place and
// casts it to the activation dtype (+e B per logit); PyTorch's
// cross_entropy(logits.float()) holds the saved log-probabilities, their
// gradient and the logits' fp32 gradient at once (+8 B per logit).
LayerCost embedding_cost(const ModelSpec& m, const LayerShape& s);
LayerCost output_cost(const ModelSpec& m, const LayerShape& s);
// One depth of Megatron-Core's multi-token prediction (MultiTokenPredictionLayer,
// megatron/core/transformer/multi_token_prediction.py) less its transformer
// layer: the norms of the next tokens' embedding and of the previous depth's
// hidden state (enorm, hnorm), their concatenation projected 2h -> h
// (eh_proj, column-parallel, its output gathered), the depth's final norm,
// and the logits and loss on the shared output layer (output_cost's ops).
// Parameters: eh_proj's 2h x h / tp and the three norms.
LayerCost mtp_head_cost(const ModelSpec& m, const LayerShape& s);
// Whether an MTP depth's transformer layer is an MoE layer: as the model's
// last layer (Megatron-Core builds the MTP block from the decoder's last
// layer spec; num_floating_point_operations counts it as last_layer_is_moe).
bool mtp_layer_is_moe(const ModelSpec& m);
// The block the loss's pipeline stage runs after its last layer:
// output_cost, and with s.mtp_layers > 0 each depth's mtp_head_cost and
// transformer layer (ops, parameters, activations; expert parameters as
// expert_params).
LayerCost output_block_cost(const ModelSpec& m, const LayerShape& s);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_COST_LAYER_COST_H_
