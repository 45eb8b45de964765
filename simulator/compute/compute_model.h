// Time of compute kernels on one GPU: GEMMs by shape, attention, and
// memory-bound (elementwise) ops.
//
// GEMM: FLOPs / (peak * e_max * tile * wave * depth) where e_max is the
// best-shape efficiency (MAMF, stas00/ml-engineering; FORMULAS.md sec. 4),
// `tile` the fraction of the 256x128 (or 128x256, whichever quantizes
// better) output tiles that is real work, `wave` the fraction of SMs busy
// over the waves of tiles (NVIDIA Deep Learning Performance Guide, "Matrix
// Multiplication Background": cuBLAS's large tiles, one per SM at a time;
// MAMF's best shapes run in them), `depth` = k/(k + K0) with K0 the steps of
// k a block's output-tile write costs at its SM's share of HBM bandwidth
// (peak x e_max / (HBM x hbm_efficiency) for a 2-byte output); with fewer
// tiles than SMs the reduction is split over several blocks per tile
// (split-K), each writing an fp32 partial tile.  Never faster than its HBM
// traffic allows (roofline).  Memory-bound ops: bytes / (HBM * eff).  Every
// kernel pays a fixed launch/tail overhead.  Checked against XLA's published
// H100/B200 GEMM sweep (docs/compute.md).
// Invariants: times are monotone in FLOPs and bytes; a calibration replaces
// e_max, the attention and HBM efficiencies.
#ifndef TRAINPLAN_SIM_COMPUTE_COMPUTE_MODEL_H_
#define TRAINPLAN_SIM_COMPUTE_COMPUTE_MODEL_H_

#include <utility>
#include <vector>

#include "simulator/core/units.h"
#include "simulator/cost/layer_cost.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/plan.h"

namespace trainplan {

struct ComputeParams {
  FlopRate peak;                 // dense peak for the training dtype
  double gemm_efficiency = 0.8;  // best-shape GEMM / peak
  // Fraction of the dense peak the attention kernel sustains, per GPU from
  // the cluster file (FlashAttention-2: ~0.57 on A100, ~0.40 on H100).
  double attention_efficiency = 0.55;
  // A named kernel's forward and backward rate over the framework default's
  // (attention_kernel_speedup; 1 for the default kernel).  Fused attention
  // only, and not under a calibration's measured GEMM table.
  double attention_fwd_speedup = 1;
  double attention_bwd_speedup = 1;
  Bandwidth hbm;
  double hbm_efficiency = 0.85;
  int sm_count = 108;
  Duration kernel_overhead = Duration::microseconds(3);  // launch gap + tail per kernel
  int element_bytes = 2;
  // Measured GEMM efficiencies by shape (calibration): an exact shape uses
  // its measurement; another shape scales the nearest measurement (in log
  // m, n, k) by the analytic model's ratio.
  std::vector<GemmPoint> gemm_table;
  // Measured traffic rate by size (GpuSpec::copy_table); empty: hbm * hbm_efficiency.
  std::vector<std::pair<double, double>> copy_table;
  // FP8 GEMMs (OpCost::fp8): the FP8 peak and best-shape efficiency (FP8
  // MAMF); the measured table is of the training dtype and is not used.
  FlopRate fp8_peak;
  double fp8_gemm_efficiency = 0;

  // The parameters of an FP8 GEMM: fp8 peak and efficiency, 1-byte
  // operands, no bf16 table.  REQUIRES: fp8_peak > 0.
  ComputeParams fp8() const;
};

// REQUIRES: cluster.gpu.peak has the dtype of `precision`.
ComputeParams compute_params(const ClusterSpec& cluster, Precision precision);
// The same for a plan: its precision, and its attention kernel's speedup
// over the framework's default kernel on this GPU.  REQUIRES: the plan
// resolved on this cluster (resolve_plan refuses a named kernel off Hopper
// unless it is the default).
ComputeParams compute_params(const ClusterSpec& cluster, const Plan& plan);

// A fused attention kernel's published rate (TFLOP/s on the causal half of
// the s x s product) on H100 SXM5, bf16, head dimension 128, 16K tokens,
// causal mask: the FlashAttention-3 paper (Shah et al. 2024, arXiv
// 2407.08608, Figs. 5-6): forward FA2 335, cuDNN 539, FA3 616; backward
// FA2 322, cuDNN 516, FA3 561.  REQUIRES: kernel != kDefault.
struct AttentionKernelRate {
  double fwd_tflops = 0;
  double bwd_tflops = 0;
};
AttentionKernelRate hopper_attention_rate(AttentionKernel kernel);
// `kernel`'s forward and backward rates over `base`'s on Hopper (1, 1 when
// they are the same kernel or either is kDefault).
std::pair<double, double> attention_kernel_speedup(AttentionKernel kernel, AttentionKernel base);

// Efficiency (fraction of peak) of an m x n x k GEMM, or of a grouped GEMM
// of `groups` such problems (one grid: the wave count is over all tiles).
double gemm_efficiency(const ComputeParams& p, int64_t m, int64_t n, int64_t k, int64_t groups = 1);
Duration gemm_time(const ComputeParams& p, int64_t m, int64_t n, int64_t k, int64_t groups = 1);
// gemm_time of an FP8 GEMM when `fp8`, else of the training dtype.
Duration gemm_time(const ComputeParams& p, int64_t m, int64_t n, int64_t k, bool fp8, int64_t groups = 1);
Duration memory_time(const ComputeParams& p, double bytes);

// The share of its long-sequence rate a fused (flash) attention kernel
// reaches when each query block loops over `kv_len` keys: a thread block's
// fixed work (loading its query block, rescaling and writing its output)
// costs about as much as kFlashBlockOverheadTokens keys, so the rate goes as
// kv_len / (kv_len + 240), normalised to 1 at the 16,384-token sequence the
// quoted kernel figures (ClusterSpec attention_efficiency) were taken at.
// Source: pytorch/benchmark ff65cb675 (FlashAttention-3 and Triton
// FlashAttention-2 forward on H100, head dim 128, batch x sequence = 16k):
// 430, 517, 566, 590, 614, 621 (FA3) and 329, 390, 434, 458, 471, 477 TFLOP/s
// (FA2) at 512 ... 16,384 tokens, which this form matches within 2.5%.
// kv_len <= 0: 1.
double flash_sequence_factor(int64_t kv_len);

// The share of its head-dimension-128 rate a fused (flash) attention kernel
// reaches at head dimension `head_dim`: a K/V block loaded for fewer columns
// leaves the block's fixed work (softmax rescaling, loads, the output write)
// a larger share.  Source: the FlashAttention-3 paper (Shah et al. 2024,
// Figs. 5-6; H100 SXM5, bf16, 16K tokens), FlashAttention-2 forward 324 vs
// 370 TFLOP/s and backward 291 vs 322 at head dimension 64 vs 128, i.e.
// forward + backward (the backward does 2.5x the forward's FLOPs) 299.7 vs
// 334.4 TFLOP/s: 0.896 for each halving of the head dimension below 128.
// The cluster files' attention figures are head-dimension-128 figures.
// head_dim >= 128 or <= 0: 1 (the paper's FlashAttention-2 has no backward
// figure above 128).
double flash_head_dim_factor(int64_t head_dim);

// Forward and backward time of one op.  Backward of a GEMM = data-gradient
// GEMM (m x k x n) + weight-gradient GEMM (n x k x m); of flash attention
// 2.5x the forward FLOPs (FlashAttention-2 recomputes S = QK^T); of a naive
// attention 2x; of an elementwise op its bwd_bytes.  FP8 GEMMs
// (OpCost::fp8) run all three products in FP8, as Transformer Engine and
// torchao do (E4M3 forward, E5M2 gradients in the hybrid format).
Duration op_forward_time(const ComputeParams& p, const OpCost& op);
Duration op_backward_time(const ComputeParams& p, const OpCost& op, Attention attention);
// The weight-gradient part of op_backward_time (the W pass of a zero-bubble
// schedule): a GEMM's n x k x m product, nothing for the other ops.
Duration op_weight_grad_time(const ComputeParams& p, const OpCost& op);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_COMPUTE_COMPUTE_MODEL_H_
