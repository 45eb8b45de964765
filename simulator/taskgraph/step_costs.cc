#include "simulator/taskgraph/step_costs.h"

#include <algorithm>
#include <cstdint>

#include "simulator/compute/compute_model.h"
#include "simulator/network/collective_model.h"

namespace trainplan {

namespace {

// NCCL reserves up to 32 channels = SMs for collectives; 16 channels is its
// usual choice on NVSwitch systems, so comm kernels take ~16 of the SMs.
constexpr double kNcclChannels = 16.0;
// DeepSpeed CPU-Adam updates about 1e9 parameters/s per node (AVX-512,
// ZeRO-Offload paper Sec. 5: 6x faster than torch CPU Adam).
constexpr double kCpuAdamParamsPerSPerNode = 1e9;

struct OpTimes {
  int64_t fwd = 0, bwd = 0, tp_f = 0, tp_b = 0, attn_f = 0, attn_b = 0, wgrad = 0;
};

OpTimes op_times(const LayerCost& lc, const ComputeParams& cpm, const ClusterSpec& c, const LinkParams& lp,
                 const Plan& p) {
  OpTimes t;
  const int tp_rpn = std::min(p.tp, c.gpus_per_node);
  auto coll = [&](Collective kind, double bytes) {
    if (p.tp <= 1 || bytes <= 0) return int64_t{0};
    return collective_cost(kind, static_cast<Bytes>(bytes), group_placement(p.tp, tp_rpn, c), lp).time.ps();
  };
  for (const OpCost& op : lc.ops) {
    const int64_t f = op_forward_time(cpm, op).ps();
    const int64_t b = op_backward_time(cpm, op, p.attention).ps();
    t.fwd += f;
    t.bwd += b;
    t.wgrad += op_weight_grad_time(cpm, op).ps();
    if (op.kind == OpKind::kAttention) {
      t.attn_f += f;
      t.attn_b += b;
    }
    if (op.tp_comm_after != TpComm::kNone) {
      const Collective fk = op.tp_comm_after == TpComm::kAllReduce   ? Collective::kAllReduce
                            : op.tp_comm_after == TpComm::kAllGather ? Collective::kAllGather
                                                                     : Collective::kReduceScatter;
      // Backward: all-reduce stays all-reduce; all-gather <-> reduce-scatter.
      const Collective bk = fk == Collective::kAllGather       ? Collective::kReduceScatter
                            : fk == Collective::kReduceScatter ? Collective::kAllGather
                                                               : fk;
      t.tp_f += coll(fk, op.tp_comm_bytes);
      t.tp_b += coll(bk, op.tp_comm_bytes);
    }
  }
  return t;
}

}  // namespace

StepCosts step_costs(const ModelSpec& m, const ClusterSpec& c, const Plan& p, bool cp_overlap) {
  StepCosts s;
  s.shape = layer_shape(p);
  s.layer = transformer_layer_cost(m, s.shape);
  s.embedding = embedding_cost(m, s.shape);
  s.output = output_cost(m, s.shape);
  const ComputeParams cpm = compute_params(c, p.precision);
  const LinkParams lp = link_params(c);
  const OpTimes lt = op_times(s.layer, cpm, c, lp, p);
  int64_t cp_f = 0, cp_b = 0;
  if (p.cp > 1) {
    // Ring attention overlaps the K/V exchange with the attention blocks
    // (Megatron context parallel): only the excess is exposed.
    const int cp_rpn = std::max(1, std::min(p.cp, c.gpus_per_node / std::min(p.tp, c.gpus_per_node)));
    const GroupPlacement g = group_placement(p.cp, cp_rpn, c);
    const auto bytes = static_cast<Bytes>(s.layer.cp_comm_bytes);
    const int64_t hide_f = cp_overlap ? lt.attn_f : 0;
    const int64_t hide_b = cp_overlap ? lt.attn_b : 0;
    cp_f = std::max<int64_t>(0, collective_cost(Collective::kAllGather, bytes, g, lp).time.ps() - hide_f);
    cp_b = std::max<int64_t>(0, collective_cost(Collective::kReduceScatter, bytes, g, lp).time.ps() - hide_b);
  }
  int64_t recompute = 0, recompute_tp = 0;
  if (p.recompute == Recompute::kFull) {
    recompute = lt.fwd + lt.tp_f;
    recompute_tp = lt.tp_f;
  } else if (p.recompute == Recompute::kSelective) {
    recompute = lt.attn_f;
  }
  LayerTimes& t = s.layer_times;
  t.forward_ps = lt.fwd + lt.tp_f + cp_f;
  t.backward_ps = lt.bwd + lt.tp_b + cp_b + recompute;
  t.tp_comm_forward_ps = lt.tp_f + cp_f;
  t.tp_comm_backward_ps = lt.tp_b + cp_b + recompute_tp;
  t.recompute_ps = recompute;
  t.weight_grad_ps = lt.wgrad;
  const OpTimes e = op_times(s.embedding, cpm, c, lp, p);
  s.embedding_forward_ps = e.fwd + e.tp_f;
  s.embedding_backward_ps = e.bwd + e.tp_b;
  s.embedding_tp_forward_ps = e.tp_f;
  s.embedding_tp_backward_ps = e.tp_b;
  // The embedding's backward is all weight gradient (its input is token ids).
  s.embedding_weight_grad_ps = e.bwd;
  const OpTimes o = op_times(s.output, cpm, c, lp, p);
  s.output_forward_ps = o.fwd + o.tp_f;
  s.output_backward_ps = o.bwd + o.tp_b;
  s.output_tp_forward_ps = o.tp_f;
  s.output_tp_backward_ps = o.tp_b;
  s.output_weight_grad_ps = o.wgrad;
  s.comm_slowdown = kNcclChannels / std::max(1, c.gpu.sm_count);
  return s;
}

int64_t optimizer_ps(const ClusterSpec& c, const Layout& layout, double stage_params) {
  const Plan& p = layout.plan;
  const double shard = p.zero >= 1 ? layout.shard_degree : 1;
  const double local = stage_params / shard;
  if (p.offload == Offload::kNone) {
    // Adam reads fp32 master, m, v and the gradient and writes master, m, v
    // and the 16-bit weight (4*4 + 3*4 + 2 = 30 bytes per parameter); the
    // gradient-norm/overflow check reads the gradients twice more and zeroing
    // them writes them once (Megatron's optimizer.step): 30 + 3*4 = 42 bytes
    // (fp32 training: no master copy, 36 bytes).
    const double bytes_per_param = p.precision == Precision::kFp32 ? 36.0 : 42.0;
    return memory_time(compute_params(c, p.precision), local * bytes_per_param).ps();
  }
  // CPU Adam on the host, plus gradients down and weights up over PCIe.
  const double cpu_s = local / (kCpuAdamParamsPerSPerNode / c.gpus_per_node);
  const double pcie_s =
      local * (grad_bytes(p.precision, p.grad_dtype) + weight_bytes(p.precision)) / c.host.bandwidth_per_gpu.bytes_per_s();
  return Duration::seconds(cpu_s + pcie_s).ps();
}

int64_t step_time_lower_bound(const ModelSpec& m, const ClusterSpec& c, const Layout& layout, const StepCosts& s,
                              const std::vector<double>& stage_params) {
  const Plan& p = layout.plan;
  const int64_t mb = layout.microbatches;
  const int v = p.schedule == Schedule::kInterleaved ? p.vp : 1;
  int64_t best = 0;
  // Stage st cannot start before micro-batch 0 has gone forward through the
  // first chunk of every earlier stage.
  int64_t start_delay = 0;
  for (int st = 0; st < p.pp; ++st) {
    const int64_t layers = layout.stage_layers[static_cast<size_t>(st)];
    int64_t work = layers * (s.layer_times.forward_ps + s.layer_times.backward_ps);
    if (st == 0) work += s.embedding_forward_ps + s.embedding_backward_ps;
    if (st == p.pp - 1) work += s.output_forward_ps + s.output_backward_ps;
    // Naive model parallel: one stage busy at a time, so the step is at least
    // the sum over stages.
    int64_t total = start_delay + mb * work + optimizer_ps(c, layout, stage_params[static_cast<size_t>(st)]);
    best = std::max(best, total);
    start_delay += (layers / v) * s.layer_times.forward_ps + (st == 0 ? s.embedding_forward_ps : 0);
  }
  if (p.pp > 1 && p.schedule != Schedule::kNaive && !zero_bubble(p.schedule)) {
    // (Zero-bubble schedules fill the cool-down with W passes, so only the
    // per-stage bound above holds for them.)
    // With every forward and backward chunk at the smallest chunk's time, the
    // schedule's makespan is exactly (m*v + p - 1) chunk-steps (GPipe and 1F1B:
    // (m + p - 1)(tf + tb); interleaved: (p - 1)/(v m) bubble; checked by
    // pipeline_schedule_test).  The makespan only grows with op durations
    // (fixed order, non-negative communication), so this bounds the step.
    const int64_t min_layers = *std::min_element(layout.stage_layers.begin(), layout.stage_layers.end());
    const int64_t chunk = (min_layers / v) * (s.layer_times.forward_ps + s.layer_times.backward_ps);
    int64_t min_opt = INT64_MAX;
    for (int st = 0; st < p.pp; ++st) min_opt = std::min(min_opt, optimizer_ps(c, layout, stage_params[static_cast<size_t>(st)]));
    best = std::max(best, (mb * v + p.pp - 1) * chunk + min_opt);
  }
  if (p.schedule == Schedule::kNaive && p.pp > 1) {
    int64_t sum = 0;
    for (int st = 0; st < p.pp; ++st) {
      const int64_t layers = layout.stage_layers[static_cast<size_t>(st)];
      sum += mb * layers * (s.layer_times.forward_ps + s.layer_times.backward_ps);
    }
    best = std::max(best, sum);
  }
  (void)m;
  return best;
}

}  // namespace trainplan
