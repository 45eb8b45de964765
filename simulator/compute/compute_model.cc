#include "simulator/compute/compute_model.h"

#include <algorithm>
#include <cmath>

#include "simulator/core/error.h"

namespace trainplan {

namespace {
constexpr int64_t kTile = 128;       // CUTLASS/cuBLAS output tile edge for large BF16 GEMMs
constexpr double kDepthHalf = 64.0;  // k at which the main loop is half of the kernel
}  // namespace

ComputeParams compute_params(const ClusterSpec& cluster, Precision precision) {
  ComputeParams p;
  Dtype d = precision == Precision::kBf16 ? Dtype::kBf16 : precision == Precision::kFp16 ? Dtype::kFp16 : Dtype::kFp32;
  // fp32 training runs its GEMMs in TF32 where the GPU has it (PyTorch
  // allow_tf32 for convolutions / Megatron default), else in FP32.
  if (precision == Precision::kFp32 && cluster.gpu.peak.count(Dtype::kTf32)) d = Dtype::kTf32;
  TRAINPLAN_CHECK(cluster.gpu.peak.count(d) > 0, "GPU has no peak for the dtype");
  p.peak = cluster.gpu.peak.at(d);
  p.gemm_efficiency = cluster.gpu.gemm_efficiency;
  p.hbm = cluster.gpu.hbm_bandwidth;
  p.hbm_efficiency = cluster.gpu.hbm_efficiency;
  p.sm_count = cluster.gpu.sm_count;
  p.attention_efficiency = cluster.gpu.attention_efficiency;
  p.element_bytes = activation_bytes(precision);
  return p;
}

double gemm_efficiency(const ComputeParams& p, int64_t m, int64_t n, int64_t k) {
  if (m <= 0 || n <= 0 || k <= 0) return p.gemm_efficiency;
  const int64_t tm = (m + kTile - 1) / kTile;
  const int64_t tn = (n + kTile - 1) / kTile;
  const double tile = static_cast<double>(m) * static_cast<double>(n) /
                      (static_cast<double>(tm * kTile) * static_cast<double>(tn * kTile));
  const int64_t tiles = tm * tn;
  const int64_t waves = (tiles + p.sm_count - 1) / p.sm_count;
  const double wave = static_cast<double>(tiles) / static_cast<double>(waves * p.sm_count);
  const double depth = static_cast<double>(k) / (static_cast<double>(k) + kDepthHalf);
  return p.gemm_efficiency * tile * wave * depth;
}

Duration gemm_time(const ComputeParams& p, int64_t m, int64_t n, int64_t k) {
  const double flops = 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const double compute_s = flops / (p.peak.flop_per_s() * gemm_efficiency(p, m, n, k));
  const double bytes = static_cast<double>(p.element_bytes) *
                       (static_cast<double>(m) * k + static_cast<double>(k) * n + static_cast<double>(m) * n);
  const double memory_s = bytes / (p.hbm.bytes_per_s() * p.hbm_efficiency);
  return Duration::seconds(std::max(compute_s, memory_s)) + p.kernel_overhead;
}

Duration memory_time(const ComputeParams& p, double bytes) {
  if (bytes <= 0) return Duration();
  return Duration::seconds(bytes / (p.hbm.bytes_per_s() * p.hbm_efficiency)) + p.kernel_overhead;
}

Duration op_forward_time(const ComputeParams& p, const OpCost& op) {
  switch (op.kind) {
    case OpKind::kGemm: return gemm_time(p, op.m, op.n, op.k);
    case OpKind::kAttention:
      if (op.bytes > 0 && op.flops == 0) return memory_time(p, op.bytes);
      return Duration::seconds(op.flops / (p.peak.flop_per_s() * p.attention_efficiency)) +
             memory_time(p, op.bytes);
    case OpKind::kElementwise: return memory_time(p, op.bytes);
  }
  return Duration();
}

Duration op_backward_time(const ComputeParams& p, const OpCost& op, Attention attention) {
  switch (op.kind) {
    case OpKind::kGemm: return gemm_time(p, op.m, op.k, op.n) + gemm_time(p, op.n, op.k, op.m);
    case OpKind::kAttention: {
      const double factor = attention == Attention::kFlash ? 2.5 : 2.0;
      return Duration::seconds(factor * op.flops /
                               (p.peak.flop_per_s() * p.attention_efficiency)) +
             memory_time(p, 2 * op.bytes);
    }
    case OpKind::kElementwise: return memory_time(p, 2 * op.bytes);
  }
  return Duration();
}

}  // namespace trainplan
