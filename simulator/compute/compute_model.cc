#include "simulator/compute/compute_model.h"

#include <algorithm>
#include <cmath>

#include "simulator/core/error.h"

namespace trainplan {

namespace {
constexpr int64_t kTileLong = 256;   // CUTLASS/cuBLAS output tile of large BF16 GEMMs: 256 x 128 or 128 x 256
constexpr int64_t kTileShort = 128;
}  // namespace

ComputeParams compute_params(const ClusterSpec& cluster, Precision precision) {
  ComputeParams p;
  Dtype d = precision == Precision::kBf16 ? Dtype::kBf16 : precision == Precision::kFp16 ? Dtype::kFp16 : Dtype::kFp32;
  // fp32 training runs its GEMMs in TF32 where the GPU has it (PyTorch
  // allow_tf32 for convolutions / Megatron default), else in FP32.
  if (precision == Precision::kFp32 && cluster.gpu.peak.count(Dtype::kTf32)) d = Dtype::kTf32;
  TRAINPLAN_CHECK(cluster.gpu.peak.count(d) > 0, "GPU has no peak for the dtype");
  // A power limit below the TDP lowers the sustained clock (GpuSpec).
  const double clock = cluster.gpu.sustained_clock_fraction();
  p.peak = cluster.gpu.peak.at(d) * clock;
  p.gemm_efficiency = cluster.gpu.gemm_efficiency;
  p.hbm = cluster.gpu.hbm_bandwidth;
  p.hbm_efficiency = cluster.gpu.hbm_efficiency;
  p.sm_count = cluster.gpu.sm_count;
  p.attention_efficiency = cluster.gpu.attention_efficiency;
  p.element_bytes = activation_bytes(precision);
  if (cluster.gpu.kernel_overhead_s >= 0) p.kernel_overhead = Duration::seconds(cluster.gpu.kernel_overhead_s);
  p.gemm_table = cluster.gpu.gemm_table;
  p.copy_table = cluster.gpu.copy_table;
  if (cluster.gpu.peak.count(Dtype::kFp8)) {
    p.fp8_peak = cluster.gpu.peak.at(Dtype::kFp8) * clock;
    // Without an FP8 MAMF figure the GPU reaches the same share of its FP8
    // peak as of its bf16 one; a calibration scales both alike.
    const double spec_eff = cluster.gpu.fp8_gemm_efficiency > 0 ? cluster.gpu.fp8_gemm_efficiency : cluster.gpu.gemm_efficiency;
    p.fp8_gemm_efficiency = spec_eff;
  }
  return p;
}

ComputeParams ComputeParams::fp8() const {
  TRAINPLAN_CHECK(fp8_peak.flop_per_s() > 0, "FP8 GEMM on a GPU without an FP8 peak");
  ComputeParams q = *this;
  q.peak = fp8_peak;
  q.gemm_efficiency = fp8_gemm_efficiency;
  q.element_bytes = 1;
  q.gemm_table.clear();
  return q;
}

namespace {

// A tile's fixed cost, in steps of k: the main loop does 2 FLOPs per output
// element per step at the block's share of the GEMM rate (peak x e_max over
// the SMs), and the block then writes its output tile at its SM's share of
// HBM bandwidth (HBM x hbm_efficiency over the SMs), `bytes` per element.
// The SM count cancels: bytes / 2 x (peak x e_max) / (HBM x hbm_efficiency).
// The output tile is written in the training dtype (bf16/fp16 2 B, an FP8
// GEMM's bf16 2 B, TF32's fp32 4 B); a split-K block writes an fp32 partial
// (4 B).  About 280 (560 split) steps on H100 bf16, 270 on B200, 150 on A100.
// Checked against XLA's published H100 and B200 sweep (docs/compute.md): at
// m = n = 4096 the H100's measured rate falls with k as k / (k + K0) with K0
// about 256 (0.51, 0.71, 0.88, 0.94 of the k = 4096 rate at k = 256 ... 2048;
// this form 0.51, 0.69, 0.84, 0.94).
double tile_write_steps(const ComputeParams& p, double bytes) {
  const double write = p.hbm.bytes_per_s() * p.hbm_efficiency;
  if (write <= 0) return 0;  // no HBM figure: no tile cost
  return bytes / 2 * p.peak.flop_per_s() * p.gemm_efficiency / write;
}

double tiled_efficiency(const ComputeParams& p, int64_t m, int64_t n, int64_t k, int64_t groups, int64_t tile_m,
                        int64_t tile_n) {
  const int64_t tm = (m + tile_m - 1) / tile_m;
  const int64_t tn = (n + tile_n - 1) / tile_n;
  const double tile = static_cast<double>(m) * static_cast<double>(n) /
                      (static_cast<double>(tm * tile_m) * static_cast<double>(tn * tile_n));
  const int64_t tiles = tm * tn * groups;  // a grouped GEMM schedules every group's tiles in one grid
  // Split-K: with fewer output tiles than SMs cuBLAS splits the reduction
  // over `split` blocks per tile, each summing k / split steps into an fp32
  // partial tile; the splits that keep every block in the first wave are
  // tried and the best runs (XLA's H100 sweep: 256 x 256 x 4096 at 91
  // TFLOP/s, 11 without splitting, 55 with it).
  // Each split holds at least one 64-deep k tile (CUTLASS's bf16 mainloop
  // tile), which also bounds the search.
  const int64_t max_split = std::max<int64_t>(1, std::min<int64_t>(p.sm_count / std::max<int64_t>(1, tiles), k / 64));
  const double whole_k0 = tile_write_steps(p, std::max(2, p.element_bytes));  // the output tile
  const double split_k0 = tile_write_steps(p, 4.0);                             // an fp32 partial tile
  double best = 0;
  for (int64_t split = 1; split <= max_split; ++split) {
    const int64_t blocks = tiles * split;
    const int64_t waves = (blocks + p.sm_count - 1) / p.sm_count;
    const double wave = static_cast<double>(blocks) / static_cast<double>(waves * p.sm_count);
    const double part = static_cast<double>(k) / static_cast<double>(split);
    const double depth = part / (part + (split == 1 ? whole_k0 : split_k0));
    best = std::max(best, p.gemm_efficiency * tile * wave * depth);
  }
  return best;
}

double analytic_efficiency(const ComputeParams& p, int64_t m, int64_t n, int64_t k, int64_t groups = 1) {
  return std::max({tiled_efficiency(p, m, n, k, groups, kTileLong, kTileShort),
                   tiled_efficiency(p, m, n, k, groups, kTileShort, kTileLong)});
}

}  // namespace

namespace {

// The traffic rate for `bytes` of traffic: the measured rate interpolated
// linearly in log(size) between the two nearest sizes of the calibration,
// the end rates beyond them; hbm * efficiency without a table.
double traffic_rate(const ComputeParams& p, double bytes) {
  const auto& t = p.copy_table;
  if (t.empty()) return p.hbm.bytes_per_s() * p.hbm_efficiency;
  if (bytes <= t.front().first) return t.front().second;
  if (bytes >= t.back().first) return t.back().second;
  size_t i = 1;
  while (t[i].first < bytes) ++i;
  const double f = std::log(bytes / t[i - 1].first) / std::log(t[i].first / t[i - 1].first);
  return t[i - 1].second + f * (t[i].second - t[i - 1].second);
}

}  // namespace

double gemm_efficiency(const ComputeParams& p, int64_t m, int64_t n, int64_t k, int64_t groups) {
  if (m <= 0 || n <= 0 || k <= 0) return p.gemm_efficiency;
  if (p.gemm_table.empty()) return analytic_efficiency(p, m, n, k, groups);
  const GemmPoint* nearest = nullptr;
  double best = 0;
  for (const GemmPoint& g : p.gemm_table) {
    const double d = std::fabs(std::log(static_cast<double>(m) / static_cast<double>(g.m))) +
                     std::fabs(std::log(static_cast<double>(n) / static_cast<double>(g.n))) +
                     std::fabs(std::log(static_cast<double>(k) / static_cast<double>(g.k)));
    if (nearest == nullptr || d < best) {
      nearest = &g;
      best = d;
    }
  }
  if (best == 0) return nearest->efficiency;
  return std::min(1.0, nearest->efficiency * analytic_efficiency(p, m, n, k, groups) /
                           analytic_efficiency(p, nearest->m, nearest->n, nearest->k));
}

Duration gemm_time(const ComputeParams& p, int64_t m, int64_t n, int64_t k, int64_t groups) {
  const double g = static_cast<double>(groups);
  const double flops = 2.0 * g * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k);
  const double compute_s = flops / (p.peak.flop_per_s() * gemm_efficiency(p, m, n, k, groups));
  // Each group reads its own weight (k x n) and its rows.
  const double bytes = static_cast<double>(p.element_bytes) * g *
                       (static_cast<double>(m) * k + static_cast<double>(k) * n + static_cast<double>(m) * n);
  const double memory_s = bytes / traffic_rate(p, bytes);
  // Transformer Engine's GroupedLinear launches one GEMM per group (on
  // several streams), so each group pays the launch overhead.
  return Duration::seconds(std::max(compute_s, memory_s)) + p.kernel_overhead * groups;
}

Duration gemm_time(const ComputeParams& p, int64_t m, int64_t n, int64_t k, bool fp8, int64_t groups) {
  return fp8 ? gemm_time(p.fp8(), m, n, k, groups) : gemm_time(p, m, n, k, groups);
}

Duration memory_time(const ComputeParams& p, double bytes) {
  if (bytes <= 0) return Duration();
  return Duration::seconds(bytes / traffic_rate(p, bytes)) + p.kernel_overhead;
}

namespace {
constexpr double kFlashBlockOverheadTokens = 240;  // flash_sequence_factor (compute_model.h)
constexpr double kFlashReferenceTokens = 16384;
}  // namespace

ComputeParams compute_params(const ClusterSpec& cluster, const Plan& plan) {
  ComputeParams p = compute_params(cluster, plan.precision);
  if (attention_run(plan) == Attention::kFlash) {
    const GpuArch arch = cluster.gpu.arch;
    const auto [fwd, bwd] =
        attention_kernel_speedup(attention_kernel_run(plan, arch), default_attention_kernel(plan.framework, arch));
    p.attention_fwd_speedup = fwd;
    p.attention_bwd_speedup = bwd;
  }
  return p;
}

AttentionKernelRate hopper_attention_rate(AttentionKernel kernel) {
  switch (kernel) {
    case AttentionKernel::kFa2: return {335, 322};
    case AttentionKernel::kCudnn: return {539, 516};
    case AttentionKernel::kFa3: return {616, 561};
    case AttentionKernel::kDefault: break;
  }
  TRAINPLAN_CHECK(false, "hopper_attention_rate needs a named kernel");
  return {};
}

std::pair<double, double> attention_kernel_speedup(AttentionKernel kernel, AttentionKernel base) {
  if (kernel == AttentionKernel::kDefault || base == AttentionKernel::kDefault || kernel == base) return {1.0, 1.0};
  const AttentionKernelRate k = hopper_attention_rate(kernel), b = hopper_attention_rate(base);
  return {k.fwd_tflops / b.fwd_tflops, k.bwd_tflops / b.bwd_tflops};
}

double flash_head_dim_factor(int64_t head_dim) {
  if (head_dim <= 0 || head_dim >= 128) return 1.0;
  // FlashAttention-3 paper, FlashAttention-2 at 16K tokens (TFLOP/s).
  constexpr double kFwd64 = 324, kBwd64 = 291, kFwd128 = 370, kBwd128 = 322;
  const double rate64 = 3.5 / (1 / kFwd64 + 2.5 / kBwd64);
  const double rate128 = 3.5 / (1 / kFwd128 + 2.5 / kBwd128);
  return std::pow(rate64 / rate128, std::log2(128.0 / static_cast<double>(head_dim)));
}

double flash_sequence_factor(int64_t kv_len) {
  if (kv_len <= 0) return 1.0;
  const double s = static_cast<double>(kv_len);
  const double ref = kFlashReferenceTokens / (kFlashReferenceTokens + kFlashBlockOverheadTokens);
  return s / (s + kFlashBlockOverheadTokens) / ref;
}

namespace {

// 1 / (flash_sequence_factor x flash_head_dim_factor) of an attention op's
// calls, averaged over its FLOPs: the full layers' calls loop over kv_len
// keys, the sliding-window layers' over window_kv_len
// (OpCost::window_flops_share).
double inverse_sequence_factor(const OpCost& op) {
  const double full = 1.0 / flash_sequence_factor(op.kv_len);
  const double head = 1.0 / flash_head_dim_factor(op.head_dim);
  if (op.window_flops_share <= 0) return full * head;
  return ((1 - op.window_flops_share) * full + op.window_flops_share / flash_sequence_factor(op.window_kv_len)) * head;
}

}  // namespace

Duration op_forward_time(const ComputeParams& p, const OpCost& op) {
  switch (op.kind) {
    case OpKind::kGemm: return gemm_time(p, op.m, op.n, op.k, op.fp8, op.groups);
    case OpKind::kAttention:
      if (op.bytes > 0 && op.flops == 0) return memory_time(p, op.bytes);
      // A calibrated device runs attention as measured GEMMs (the executor
      // does the same); otherwise the fused kernel's efficiency.
      if (!p.gemm_table.empty() && op.m > 0) {
        return gemm_time(p, op.m, op.n, op.k) + gemm_time(p, op.m, op.k, op.n) + memory_time(p, op.bytes);
      }
      return Duration::seconds(op.flops * op.computed_share * inverse_sequence_factor(op) /
                               (p.peak.flop_per_s() * p.attention_efficiency * p.attention_fwd_speedup)) +
             memory_time(p, op.bytes);
    case OpKind::kElementwise: return memory_time(p, op.bytes);
  }
  return Duration();
}

Duration op_backward_time(const ComputeParams& p, const OpCost& op, Attention attention) {
  switch (op.kind) {
    case OpKind::kGemm: return gemm_time(p, op.m, op.k, op.n, op.fp8, op.groups) + op_weight_grad_time(p, op);
    case OpKind::kAttention: {
      const double factor = attention == Attention::kFlash ? 2.5 : 2.0;
      if (!p.gemm_table.empty() && op.m > 0) {
        const Duration pair = gemm_time(p, op.m, op.n, op.k) + gemm_time(p, op.m, op.k, op.n);
        return pair * 2 + (attention == Attention::kFlash ? gemm_time(p, op.m, op.n, op.k) : Duration()) +
               memory_time(p, 2 * op.bytes);
      }
      return Duration::seconds(factor * op.flops * op.computed_share * inverse_sequence_factor(op) /
                               (p.peak.flop_per_s() * p.attention_efficiency * p.attention_bwd_speedup)) +
             memory_time(p, 2 * op.bytes);
    }
    case OpKind::kElementwise: return memory_time(p, op.bwd_bytes);
  }
  return Duration();
}

Duration op_weight_grad_time(const ComputeParams& p, const OpCost& op) {
  if (op.kind != OpKind::kGemm) return Duration();
  return gemm_time(p, op.n, op.k, op.m, op.fp8, op.groups);
}

}  // namespace trainplan
