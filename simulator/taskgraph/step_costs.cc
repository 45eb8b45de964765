#include "simulator/taskgraph/step_costs.h"

#include "simulator/schedule/pipeline_schedule.h"

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <optional>
#include <string>
#include <utility>

#include "simulator/compute/compute_model.h"
#include "simulator/core/error.h"
#include "simulator/cost/moe_routing.h"
#include "simulator/framework/framework.h"
#include "simulator/network/collective_model.h"
#include "simulator/schedule/pipeline_schedule.h"
#include "simulator/spec/deepep.h"

namespace trainplan {

namespace {

// NCCL reserves up to 32 channels = SMs for collectives; 16 channels is its
// usual choice on NVSwitch systems, so comm kernels take ~16 of the SMs.
constexpr double kNcclChannels = 16.0;

struct OpTimes {
  int64_t fwd = 0, bwd = 0, tp_f = 0, tp_b = 0, attn_f = 0, attn_b = 0, wgrad = 0;
  int64_t ep_f = 0, ep_b = 0;  // expert-parallel all-to-all and expert-TP collectives
  // Selective recompute: the forward time of the re-run ops, and the TP and
  // expert collectives they re-run.
  int64_t rc = 0, rc_tp = 0, rc_ep = 0;
  // Host calls (OpCost::host_calls) of the forward, and of the ops selective
  // recompute re-runs.
  double host_calls = 0, rc_host_calls = 0;
  CommTotals tp_f_totals, tp_b_totals, rc_tp_totals;  // the TP collectives, as link work
  std::string collectives;  // the forward collectives, described (LayerTimes::collectives)
};

// One collective as link work: its latency, its wire bytes and their time
// at its bus bandwidth.
CommTotals link_work(const CollectiveCost& cost) {
  CommTotals x;
  x.latency_ps = cost.latency.ps();
  x.wire_bytes = cost.wire_bytes_per_rank;
  x.transfer_s = cost.wire_bytes_per_rank > 0 ? cost.wire_bytes_per_rank / cost.bus_bandwidth.bytes_per_s() : 0;
  x.count = 1;
  return x;
}

// Tensor-parallel communication overlapped with a GEMM as Transformer
// Engine's userbuffers run it (ExecutionProfile::tp_comm_overlap; the
// methods and their defaults are TE's initialize_ub):
//   ring exchange: the GEMM in `splits` chunks along its token dimension; the
//     first chunk is local, each other one arrives by a ring step of
//     comm / (splits - 1) while the previous chunk computes:
//     (splits - 1) * max(g, c) + g.  A chunk runs at the whole GEMM's
//     efficiency (cuBLAS picks tiles for the chunk's shape; the one-tile
//     wave model of compute_model.h would leave most SMs idle on a chunk of
//     a few hundred rows) and pays its own launch.
//   pipeline: the GEMM in `splits` chunks on the SMs the communication kernel
//     leaves; each chunk's reduce-scatter follows it: g + (splits - 1) *
//     max(g, c) + c.
//   bulk: the collective beside the whole GEMM on the SMs it leaves.
int64_t ring_exchange_ps(int64_t gemm_chunks_ps, int64_t comm_ps, int splits) {
  const double g = static_cast<double>(gemm_chunks_ps) / splits;
  const double c = static_cast<double>(comm_ps) / (splits - 1);
  return static_cast<int64_t>(std::llround((splits - 1) * std::max(g, c) + g));
}

int64_t pipeline_ps(int64_t gemm_ps, int64_t comm_ps, int splits) {
  const double g = static_cast<double>(gemm_ps) / splits;
  const double c = static_cast<double>(comm_ps) / splits;
  return static_cast<int64_t>(std::llround(g + (splits - 1) * std::max(g, c) + c));
}

// The exposed forward and backward times of op i's TP collective `fk`
// (forward; `cf` and `cb` its forward and backward times) when it overlaps
// the GEMM beside it, or nullopt when no GEMM takes it:
//   an all-gather feeds the next GEMM (QKV, FC1; casts to FP8 in between do
//     not count): forward ring exchange with it; backward the reduce-scatter
//     of that GEMM's input gradient in bulk beside its weight-gradient GEMM.
//   a reduce-scatter ends op i's own GEMM (projection, FC2): forward
//     pipeline with it; backward the all-gather of its output gradient by
//     ring exchange with its data-gradient GEMM.
std::optional<std::pair<int64_t, int64_t>> overlapped_tp_comm(const std::vector<OpCost>& ops, size_t i,
                                                              Collective fk, int64_t cf, int64_t cb,
                                                              const ComputeParams& cpm, const Plan& p,
                                                              const ExecutionProfile& prof) {
  // A GEMM beside a communication kernel on kTeOverlapCommSms SMs runs on
  // the others (TE's set_sm_margin) at the same rate per SM.
  const double narrow = static_cast<double>(cpm.sm_count) / std::max(1, cpm.sm_count - kTeOverlapCommSms);
  auto on_fewer_sms = [narrow](int64_t ps) { return static_cast<int64_t>(std::llround(static_cast<double>(ps) * narrow)); };
  const int64_t launches = (p.tp - 1) * cpm.kernel_overhead.ps();  // the ring exchange's extra chunks
  auto data_grad = [&](const OpCost& op) {
    return op_backward_time(cpm, op, attention_run(p)).ps() - op_weight_grad_time(cpm, op).ps();
  };
  if (fk == Collective::kAllGather) {
    size_t j = i + 1;
    // (nor do DTensor's copies of the gathered tensor, LayerShape::tp_seq_copies).
    while (j < ops.size() && ops[j].kind == OpKind::kElementwise &&
           (ops[j].name.rfind("fp8_cast_", 0) == 0 || ops[j].name.rfind("tp_gather_copy", 0) == 0)) {
      ++j;
    }
    // TE's userbuffers layers: qkv_fprop and fc1_fprop (the dense MLP's; a
    // MoE layer's shared experts and MLA's projections are other modules).
    if (j >= ops.size() || ops[j].kind != OpKind::kGemm || (ops[j].name != "qkv" && ops[j].name != "fc1"))
      return std::nullopt;
    const OpCost& gemm = ops[j];
    const int64_t whole = op_forward_time(cpm, gemm).ps();
    // Async TP with row-wise float8 scales leaves the all-gather-matmuls
    // unfused (pytorch/pytorch#149990, open: "the all-gather-matmul
    // patterns were NOT being fused properly" with rowwise scales).
    const bool unfused = prof.async_tp && p.fp8_recipe == Fp8Recipe::kRowwise;
    const int64_t forward = unfused ? cf : ring_exchange_ps(whole + launches, cf, p.tp) - whole;
    const int64_t wgrad = op_weight_grad_time(cpm, gemm).ps();
    // torchtitan's async TP leaves this one a plain reduce-scatter: its input
    // is the sum of the data gradients of the GEMMs the gather fed (Q, K and
    // V; gate and up), not one matmul's output, so the compiler's micro-
    // pipeline pass finds no matmul-reduce-scatter to fuse in the backward
    // graph (pytorch/pytorch#149946, review of 2025-03-28: "only valid
    // scaled_mm-reduce-scatter patterns in the forward graph, but not in the
    // backward graph").
    const int64_t backward = prof.async_tp ? cb : std::max(on_fewer_sms(wgrad), cb) - wgrad;
    return std::make_pair(std::max<int64_t>(0, forward), std::max<int64_t>(0, backward));
  }
  if (fk == Collective::kReduceScatter) {
    const OpCost& gemm = ops[i];
    if (gemm.kind != OpKind::kGemm || (gemm.name != "out_proj" && gemm.name != "fc2")) return std::nullopt;
    const int64_t whole = op_forward_time(cpm, gemm).ps();
    const int64_t forward =
        pipeline_ps(on_fewer_sms(whole) + (kTePipelineSplits - 1) * cpm.kernel_overhead.ps(), cf, kTePipelineSplits) -
        whole;
    const int64_t backward = ring_exchange_ps(data_grad(gemm) + launches, cb, p.tp) - data_grad(gemm);
    return std::make_pair(std::max<int64_t>(0, forward), std::max<int64_t>(0, backward));
  }
  return std::nullopt;
}

// The ops Megatron-Core's --moe-shared-expert-overlap pairs: their
// forward and backward time, the collective after them, whether recompute
// re-runs them, and their index in the layer's ops (-1: none).
struct PairedOp {
  int64_t f = 0, b = 0, cf = 0, cb = 0;
  bool rerun = false;
  int index = -1;
};

// Shared experts beside the token all-to-alls (Megatron-Core
// --moe-shared-expert-overlap; moe/shared_experts.py runs them on a stream
// of their own, token_dispatcher.py launches FC1 and the activation right
// after the dispatch all-to-all of the tokens, before the scores', and FC2
// beside the combine): in forward the dispatch (and the scores) hide under
// FC1 and the activation (`shared_in`), the combine under FC2 (`shared_out`);
// autograd replays each on its stream, so in backward the combine's
// transpose hides under FC2's backward and the dispatch's under FC1's.
// While a collective runs its kernels keep their SMs and the GEMM beside it
// gets the rest: it is slower by the hidden time x `share`
// (ep_comm_sm_share, as the combined 1F1B's pairs).  Updates `t` and, when
// given, the ops' charges (each collective keeps what is left exposed; the
// shared experts' first op and FC2 carry the slowdown).
void overlap_shared_experts(const PairedOp& dispatch, const PairedOp& scores, const PairedOp& combine,
                            const PairedOp& shared_in, const PairedOp& shared_out, double share, OpTimes* t,
                            std::vector<OpCharge>* charges) {
  const int64_t in_f = std::min(dispatch.cf + scores.cf, shared_in.f);
  const int64_t out_f = std::min(combine.cf, shared_out.f);
  const int64_t out_b = std::min(combine.cb, shared_out.b);
  const int64_t in_b = std::min(dispatch.cb + scores.cb, shared_in.b);
  auto slower = [share](int64_t hidden) { return static_cast<int64_t>(std::llround(static_cast<double>(hidden) * share)); };
  t->ep_f -= in_f + out_f;
  t->ep_b -= in_b + out_b;
  t->fwd += slower(in_f) + slower(out_f);
  t->bwd += slower(in_b) + slower(out_b);
  if (dispatch.rerun) {
    t->rc_ep -= in_f + out_f;
    t->rc += slower(in_f) + slower(out_f);
  }
  if (charges == nullptr) return;
  auto hide = [&](const PairedOp& x, int64_t hf, int64_t hb) {
    if (x.index < 0) return;
    OpCharge& ch = (*charges)[static_cast<size_t>(x.index)];
    ch.comm_forward_ps -= hf;
    ch.comm_backward_ps -= hb;
  };
  const int64_t scores_f = std::min(scores.cf, in_f), scores_b = std::min(scores.cb, in_b);
  hide(scores, scores_f, scores_b);
  hide(dispatch, in_f - scores_f, in_b - scores_b);
  hide(combine, out_f, out_b);
  auto slow = [&](const PairedOp& x, int64_t hf, int64_t hb) {
    OpCharge& ch = (*charges)[static_cast<size_t>(x.index)];
    ch.forward_ps += slower(hf);
    ch.backward_ps += slower(hb);
    if (ch.recompute_ps > 0) ch.recompute_ps += slower(hf);
  };
  slow(shared_in, in_f, in_b);
  slow(shared_out, out_f, out_b);
}

// `block`: lc is a transformer layer (the GEMMs TE's userbuffers overlap);
// false for the embedding and output layers.
// `charges`, when given, gets each op's own times (layer_charges).
OpTimes op_times(const LayerCost& lc, const ComputeParams& cpm, const ClusterSpec& c, const LinkParams& lp,
                 const Plan& p, bool block, const ExecutionProfile& prof, std::vector<OpCharge>* charges = nullptr) {
  OpTimes t;
  // Groups in rank order (Megatron): tp consecutive; etp consecutive and
  // the ep group etp apart (expert rank order tp-ep-dp-pp).
  auto placement = [&](CommGroup g) {
    switch (g) {
      case CommGroup::kTp: return std::make_pair(p.tp, strided_group_placement(p.tp, 1, c));
      case CommGroup::kEtp: return std::make_pair(p.etp, strided_group_placement(p.etp, 1, c));
      case CommGroup::kEp: return std::make_pair(p.ep, strided_group_placement(p.ep, std::max(1, p.etp), c));
    }
    return std::make_pair(1, GroupPlacement{});
  };
  // Forward collectives by (group, kind, bytes, size, algorithm): how many
  // per layer, in order of first use (described once, at the end).
  struct Seen {
    CommGroup group;
    Collective kind;
    double bytes;
    int size;
    NcclAlgo algo;
    NcclProto proto;
    int count;
  };
  std::vector<Seen> seen;
  // A collective's time and, for the TP totals, its latency and wire bytes.
  auto coll = [&](Collective kind, double bytes, CommGroup g, bool forward) {
    const std::pair<int, GroupPlacement> placed = placement(g);
    const int size = placed.first;
    const GroupPlacement& gp = placed.second;
    CommTotals totals;
    if (size <= 1 || bytes <= 0) return std::make_pair(int64_t{0}, totals);
    const CollectiveCost cost = collective_cost(kind, static_cast<Bytes>(bytes), gp, lp);
    totals = link_work(cost);
    if (forward) {
      auto same = [&](const Seen& x) {
        return x.group == g && x.kind == kind && x.bytes == bytes && x.size == size && x.algo == cost.algo &&
               x.proto == cost.proto;
      };
      auto it = std::find_if(seen.begin(), seen.end(), same);
      if (it == seen.end()) seen.push_back(Seen{g, kind, bytes, size, cost.algo, cost.proto, 1});
      else ++it->count;
    }
    return std::make_pair(cost.time.ps(), totals);
  };
  // A deduplicating dispatcher's all-to-all (OpCost::Dedup) as the uniform
  // all-to-all that loads the links as much: per token, one copy to each
  // rank holding one of its experts (chance rank_hit each), the copies to
  // other nodes once per node over the NICs (node_hit) and forwarded there
  // over NVLink unless the relay (the sender's peer by local index) is the
  // target.  Per token on average: intra-node copies rank_hit * (n - nodes)
  // (the own node's r - 1 ranks plus the other nodes' ranks less their
  // relays), inter-node copies node_hit * (nodes - 1).
  auto comm_bytes = [&](const OpCost& op) {
    const OpCost::Dedup& d = op.dedup;
    if (d.copy_bytes <= 0 || op.comm_group != CommGroup::kEp) return op.tp_comm_bytes;
    const auto [n, g] = placement(CommGroup::kEp);
    if (n <= 1) return 0.0;
    const int64_t per_rank = d.experts / n;
    const double rank_hit = expert_block_hit_probability(d.experts, d.top_k, per_rank, d.groups, d.group_topk);
    const double node_hit =
        expert_block_hit_probability(d.experts, d.top_k, per_rank * g.ranks_per_node, d.groups, d.group_topk);
    const double intra = d.copy_bytes * rank_hit * (n - g.nodes);
    const double inter = d.copy_bytes * node_hit * (g.nodes - 1);
    return all_to_all_equivalent_bytes(intra, inter, g, lp);
  };
  const uint16_t modules = p.recompute == Recompute::kSelective
                              ? (p.recompute_modules != 0 ? p.recompute_modules : static_cast<uint16_t>(kRcCoreAttn))
                              : 0;
  // torchtitan's per-op SAC re-runs a share of each op (LayerShape); its
  // saved reduce-scatters are not repeated, other collectives are.
  const bool per_op = layer_shape(p).per_op_sac;
  const bool overlap = block && prof.tp_comm_overlap && p.tp > 1;
  // The ops --moe-shared-expert-overlap pairs (overlap_shared_experts).
  PairedOp dispatch, scores, combine, shared_in, shared_out;
  for (size_t i = 0; i < lc.ops.size(); ++i) {
    const OpCost& op = lc.ops[i];
    const int64_t f = op_forward_time(cpm, op).ps();
    const int64_t b = op_backward_time(cpm, op, attention_run(p)).ps();
    const int64_t w = op_weight_grad_time(cpm, op).ps();
    const bool rerun = per_op ? op.sac_rerun_share > 0 && op.tp_comm_after != TpComm::kReduceScatter
                              : (op.rerun_by & modules) != 0;
    const int64_t rc = per_op ? static_cast<int64_t>(static_cast<double>(f) * op.sac_rerun_share) : rerun ? f : 0;
    t.rc += rc;
    t.host_calls += op.host_calls;
    if (per_op ? op.sac_rerun_share > 0 : rerun) t.rc_host_calls += op.host_calls;
    t.fwd += f;
    t.bwd += b;
    t.wgrad += w;
    if (charges != nullptr) {
      OpCharge ch;
      ch.op = op;
      ch.forward_ps = f;
      ch.backward_ps = b;
      ch.weight_grad_ps = w;
      ch.recompute_ps = p.recompute == Recompute::kFull ? f : p.recompute == Recompute::kSelective ? rc : 0;
      charges->push_back(std::move(ch));
    }
    if (op.kind == OpKind::kAttention) {
      t.attn_f += f;
      t.attn_b += b;
    }
    if (op.tp_comm_after != TpComm::kNone) {
      const Collective fk = op.tp_comm_after == TpComm::kAllReduce   ? Collective::kAllReduce
                            : op.tp_comm_after == TpComm::kAllGather ? Collective::kAllGather
                            : op.tp_comm_after == TpComm::kAllToAll  ? Collective::kAllToAll
                                                                     : Collective::kReduceScatter;
      // Backward: all-reduce and all-to-all stay; all-gather <-> reduce-scatter.
      const Collective bk = fk == Collective::kAllGather       ? Collective::kReduceScatter
                            : fk == Collective::kReduceScatter ? Collective::kAllGather
                                                               : fk;
      const double bytes = comm_bytes(op);
      // The passes that run it (OpCost::tp_comm_passes).
      const bool in_forward = op.tp_comm_passes != TpCommPasses::kBackwardOnly;
      const bool in_backward = op.tp_comm_passes != TpCommPasses::kForwardOnly;
      auto [cf, tf] = in_forward ? coll(fk, bytes, op.comm_group, true) : std::make_pair(int64_t{0}, CommTotals{});
      const double bwd_bytes = op.tp_comm_bwd_bytes >= 0 ? op.tp_comm_bwd_bytes : bytes;
      auto [cb, tb] = in_backward ? coll(bk, bwd_bytes, op.comm_group, false) : std::make_pair(int64_t{0}, CommTotals{});
      if (op.comm_group == CommGroup::kTp && overlap) {
        // Hidden behind a GEMM (ExecutionProfile::tp_comm_overlap): only
        // what the overlap leaves is exposed, and the collective runs beside
        // the GEMM rather than as link work after the pass.
        if (const std::optional<std::pair<int64_t, int64_t>> exposed =
                overlapped_tp_comm(lc.ops, i, fk, cf, cb, cpm, p, prof)) {
          cf = exposed->first;
          cb = exposed->second;
          tf = CommTotals{};
          tb = CommTotals{};
        }
      }
      if (charges != nullptr && placement(op.comm_group).first > 1) {
        char buf[160];
        std::snprintf(buf, sizeof buf, "%s %s %.3g MiB over %d",
                      op.comm_group == CommGroup::kTp ? "tp" : op.comm_group == CommGroup::kEp ? "ep" : "etp",
                      to_string(in_forward ? fk : bk), (in_forward ? bytes : bwd_bytes) / (1024.0 * 1024.0),
                      placement(op.comm_group).first);
        OpCharge& ch = charges->back();
        ch.comm = buf;
        ch.comm_forward_ps = cf;
        ch.comm_backward_ps = cb;
      }
      if (op.comm_group == CommGroup::kTp) {
        t.tp_f += cf;
        t.tp_b += cb;
        t.tp_f_totals.add(tf);
        t.tp_b_totals.add(tb);
        if (rerun) {
          t.rc_tp += cf;
          t.rc_tp_totals.add(tf);
        }
      } else {
        t.ep_f += cf;
        t.ep_b += cb;
        if (rerun) t.rc_ep += cf;
      }
      PairedOp* x = op.comm_group != CommGroup::kEp ? nullptr
                 : op.name == "permute" || op.name == "dispatch" ? &dispatch
                 : op.name == "score_dispatch"                   ? &scores
                 : op.name == "combine"                          ? &combine
                                                                 : nullptr;
      if (x != nullptr) *x = PairedOp{f, b, cf, cb, rerun, static_cast<int>(i)};
    }
    if (op.name == "shared_fc1" || op.name == "shared_swiglu" || op.name == "shared_gelu") {
      shared_in.f += f;
      shared_in.b += b;
      if (shared_in.index < 0) shared_in.index = static_cast<int>(i);
    }
    if (op.name == "shared_fc2") shared_out = PairedOp{f, b, 0, 0, false, static_cast<int>(i)};
  }
  if (block && p.moe_shared_expert_overlap && shared_in.index >= 0 && shared_out.index >= 0 && dispatch.index >= 0) {
    overlap_shared_experts(dispatch, scores, combine, shared_in, shared_out, ep_comm_sm_share(c, p), &t, charges);
  }
  // Described as "2x tp all_reduce 16 MiB over 8 (ring/simple)"; those that
  // read the same at three digits count as one.
  std::vector<std::pair<std::string, int>> described;
  for (const Seen& x : seen) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s %s %.3g MiB over %d (%s/%s)",
                  x.group == CommGroup::kTp ? "tp" : x.group == CommGroup::kEp ? "ep" : "etp", to_string(x.kind),
                  x.bytes / (1024.0 * 1024.0), x.size, to_string(x.algo), to_string(x.proto));
    auto it = std::find_if(described.begin(), described.end(), [&](const auto& d) { return d.first == buf; });
    if (it == described.end()) described.emplace_back(buf, x.count);
    else it->second += x.count;
  }
  for (const auto& [d, n] : described) {
    t.collectives += (t.collectives.empty() ? "" : "; ") + std::to_string(n) + "x " + d;
  }
  return t;
}

}  // namespace

namespace {

// FSDP2's copies on the compute stream for a module of `params`
// parameters on this rank (ExecutionProfile::fsdp2_copies), per micro-batch:
// the all-gather copy-out reads and writes the unsharded parameters in
// their dtype (forward and backward unshard), the reduce-scatter copy-in
// reads the gradients in that dtype and writes them in the reduce dtype
// (backward).  Zero where the plan is not sharded that way.
std::pair<int64_t, int64_t> fsdp2_copy_ps(double params, const ComputeParams& cpm, const Plan& p,
                                          const ExecutionProfile& prof) {
  if (p.zero != 3 || params <= 0 || !prof.fsdp2_copies) return {0, 0};
  const double w = weight_bytes(p.precision);
  const double g = grad_bytes(p.precision, p.grad_dtype);
  const int64_t copy_out = memory_time(cpm, 2 * w * params).ps();
  const int64_t copy_in = memory_time(cpm, (w + g) * params).ps();
  return {copy_out, copy_out + copy_in};
}

// One layer's per-micro-batch times on a rank: its ops, the TP and expert
// collectives folded into them, the CP exchange beyond what attention
// hides, and recomputation.
LayerTimes layer_times(const LayerCost& layer, const ComputeParams& cpm, const ClusterSpec& c, const LinkParams& lp,
                       const Plan& p, bool cp_overlap, const ExecutionProfile& prof) {
  const OpTimes lt = op_times(layer, cpm, c, lp, p, true, prof);
  int64_t cp_f = 0, cp_b = 0;
  CommTotals cp_link_f, cp_link_b;
  if (p.cp > 1 && p.cp_comm == CpComm::kA2a) {
    // Ulysses: the all-to-alls run before and after the attention that
    // needs their data, on the compute stream's critical path (Transformer
    // Engine AttnFuncWithCPAndQKVOA2A): Q, K, V in and the output back in
    // forward, the output gradient in and dQ, dK, dV back in backward.
    const GroupPlacement g = strided_group_placement(p.cp, p.tp, c);
    const int64_t qkv =
        collective_cost(Collective::kAllToAll, static_cast<Bytes>(layer.cp_a2a_qkv_bytes), g, lp).time.ps();
    const int64_t out =
        collective_cost(Collective::kAllToAll, static_cast<Bytes>(layer.cp_a2a_out_bytes), g, lp).time.ps();
    cp_f = qkv + out;
    cp_b = qkv + out;
  } else if (p.cp > 1) {
    // Ring attention overlaps the K/V exchange with the attention blocks
    // (Megatron context parallel): only the excess is exposed.
    const GroupPlacement g = strided_group_placement(p.cp, p.tp, c);
    const auto bytes = static_cast<Bytes>(layer.cp_comm_bytes);
    const int64_t hide_f = cp_overlap ? lt.attn_f : 0;
    const int64_t hide_b = cp_overlap ? lt.attn_b : 0;
    const CollectiveCost gather = collective_cost(Collective::kAllGather, bytes, g, lp);
    const CollectiveCost scatter = collective_cost(Collective::kReduceScatter, bytes, g, lp);
    cp_f = std::max<int64_t>(0, gather.time.ps() - hide_f);
    cp_b = std::max<int64_t>(0, scatter.time.ps() - hide_b);
    if (cp_overlap) {
      cp_link_f = link_work(gather);
      cp_link_b = link_work(scatter);
    }
  }
  int64_t recompute = 0, recompute_tp = 0, recompute_ep = 0;
  if (p.recompute == Recompute::kFull) {
    recompute = lt.fwd + lt.tp_f + lt.ep_f;
    recompute_tp = lt.tp_f;
    recompute_ep = lt.ep_f;
  } else if (p.recompute == Recompute::kSelective) {
    recompute = lt.rc + lt.rc_tp + lt.rc_ep;
    recompute_tp = lt.rc_tp;
    recompute_ep = lt.rc_ep;
  }
  // Ulysses' all-to-alls are part of Transformer Engine's attention call, so
  // re-running the layer or its core attention runs them again.
  const uint16_t rc_modules = p.recompute_modules != 0 ? p.recompute_modules : static_cast<uint16_t>(kRcCoreAttn);
  if (p.cp > 1 && p.cp_comm == CpComm::kA2a &&
      (p.recompute == Recompute::kFull || (p.recompute == Recompute::kSelective && (rc_modules & kRcCoreAttn)))) {
    recompute += cp_f;
    recompute_tp += cp_f;
  }
  const auto [copy_f, copy_b] = fsdp2_copy_ps(layer.params, cpm, p, prof);
  LayerTimes t;
  t.forward_ps = lt.fwd + lt.tp_f + cp_f + lt.ep_f + copy_f;
  t.backward_ps = lt.bwd + lt.tp_b + cp_b + lt.ep_b + recompute + copy_b;
  // Host-bound: the host issues a pass's ops one call at a time
  // (OpCost::host_calls x host.op_overhead); a pass whose calls take longer
  // than its GPU time runs at the host's pace.  Backward: one autograd call
  // per forward op, plus the recomputed ops' forward calls.
  const double op_s = c.host.op_overhead.s();
  if (op_s > 0) {
    const double rc_calls = p.recompute == Recompute::kFull        ? lt.host_calls
                            : p.recompute == Recompute::kSelective ? lt.rc_host_calls
                                                                   : 0.0;
    t.host_forward_ps = Duration::seconds(lt.host_calls * op_s).ps();
    t.host_backward_ps = Duration::seconds((lt.host_calls + rc_calls) * op_s).ps();
    t.host_bound_ps = std::max<int64_t>(0, t.host_forward_ps - t.forward_ps) +
                      std::max<int64_t>(0, t.host_backward_ps - t.backward_ps);
    t.forward_ps = std::max(t.forward_ps, t.host_forward_ps);
    t.backward_ps = std::max(t.backward_ps, t.host_backward_ps);
  }
  t.tp_comm_forward_ps = lt.tp_f + cp_f;
  t.tp_comm_backward_ps = lt.tp_b + cp_b + recompute_tp;
  t.tp_forward = lt.tp_f_totals;
  t.tp_backward = lt.tp_b_totals;
  if (p.recompute == Recompute::kFull) t.tp_backward.add(lt.tp_f_totals);
  else if (p.recompute == Recompute::kSelective) t.tp_backward.add(lt.rc_tp_totals);
  if (cp_link_f.count > 0) {
    t.cp_forward = cp_link_f;
    t.cp_backward = cp_link_b;
    t.cp_exposed_forward_ps = cp_f;
    t.cp_exposed_backward_ps = cp_b;
    t.attention_forward_ps = lt.attn_f;
    t.attention_backward_ps = lt.attn_b;
  }
  t.ep_comm_forward_ps = lt.ep_f;
  t.ep_comm_backward_ps = lt.ep_b + recompute_ep;
  t.recompute_ps = recompute;
  t.weight_grad_ps = lt.wgrad;
  t.collectives = lt.collectives;
  return t;
}

}  // namespace

Plan partial_recompute_part(const Plan& p, bool recompute_all) {
  Plan part = p;
  part.recompute_layers = 0;
  if (!recompute_all) part.recompute = Recompute::kNone;
  return part;
}

StepCosts partial_recompute_step_costs(const ModelSpec& m, const Plan& p, StepCosts s,
                                       std::shared_ptr<const StepCosts> none) {
  // Megatron's block method: the first recompute_layers of each model
  // chunk are recomputed, the rest run as without recompute.
  TRAINPLAN_CHECK(none != nullptr, "partial_recompute_step_costs needs the costs without recompute");
  s.without_recompute = std::move(none);
  Layout split;
  split.plan = p;
  split.stage_layers = p.stage_layers.empty() ? balance_stage_layers(m.layers, p.pp) : rank_stage_layers(p);
  s.recomputed_of_layer.assign(static_cast<size_t>(m.layers), false);
  if (!split.stage_layers.empty()) {
    for (const std::vector<ChunkLayers>& stage : chunk_layers(split)) {
      for (const ChunkLayers& ch : stage) {
        for (int at = ch.first; at < ch.first + ch.count && at < m.layers; ++at) {
          s.recomputed_of_layer[static_cast<size_t>(at)] = layer_recomputed(p, at - ch.first);
        }
      }
    }
  }
  return s;
}

StepCosts step_costs(const ModelSpec& m, const ClusterSpec& c, const Plan& p, bool cp_overlap) {
  if (p.recompute == Recompute::kFull && p.recompute_layers > 0) {
    return partial_recompute_step_costs(
        m, p, step_costs(m, c, partial_recompute_part(p, true), cp_overlap),
        std::make_shared<const StepCosts>(step_costs(m, c, partial_recompute_part(p, false), cp_overlap)));
  }
  StepCosts s;
  s.shape = layer_shape(p);
  s.layer = transformer_layer_cost(m, s.shape);
  s.embedding = embedding_cost(m, s.shape);
  s.output = output_block_cost(m, s.shape);  // multi-token prediction included
  const ComputeParams cpm = compute_params(c, p);
  const LinkParams lp = link_params(c);
  const ExecutionProfile prof = execution_profile(p);
  s.layer_times = layer_times(s.layer, cpm, c, lp, p, cp_overlap, prof);
  s.has_moe = m.has_moe;
  if (m.has_moe) {
    s.moe_layer = transformer_layer_cost(m, s.shape, true);
    s.moe_layer_times = layer_times(s.moe_layer, cpm, c, lp, p, cp_overlap, prof);
  }
  s.moe_of_layer.resize(static_cast<size_t>(m.layers));
  for (int64_t i = 0; i < m.layers; ++i) s.moe_of_layer[static_cast<size_t>(i)] = m.is_moe_layer(i);
  const OpTimes e = op_times(s.embedding, cpm, c, lp, p, false, prof);
  const auto [emb_copy_f, emb_copy_b] = fsdp2_copy_ps(s.embedding.params, cpm, p, prof);
  s.embedding_forward_ps = e.fwd + e.tp_f + emb_copy_f;
  s.embedding_backward_ps = e.bwd + e.tp_b + emb_copy_b;
  s.embedding_tp_forward_ps = e.tp_f;
  s.embedding_tp_backward_ps = e.tp_b;
  s.embedding_tp_forward = e.tp_f_totals;
  s.embedding_tp_backward = e.tp_b_totals;
  // The embedding's backward is all weight gradient (its input is token ids).
  s.embedding_weight_grad_ps = e.bwd;
  const OpTimes o = op_times(output_cost(m, s.shape), cpm, c, lp, p, false, prof);
  const auto [out_copy_f, out_copy_b] = fsdp2_copy_ps(s.output.params, cpm, p, prof);
  s.output_forward_ps = o.fwd + o.tp_f + out_copy_f;
  s.output_backward_ps = o.bwd + o.tp_b + out_copy_b;
  s.output_tp_forward_ps = o.tp_f;
  s.output_tp_backward_ps = o.tp_b;
  s.output_tp_forward = o.tp_f_totals;
  s.output_tp_backward = o.tp_b_totals;
  s.output_weight_grad_ps = o.wgrad;
  if (p.mtp_layers > 0) {
    // Each multi-token prediction depth after the loss: its norms,
    // projection, logits and loss (op times), and a transformer layer timed
    // as the decoder's of its kind (recompute, TP and expert collectives
    // included), all in the output block's passes.
    const LayerTimes& mt = mtp_layer_is_moe(m) ? s.moe_layer_times : s.layer_times;
    const OpTimes h = op_times(mtp_head_cost(m, s.shape), cpm, c, lp, p, false, prof);
    const int64_t k = p.mtp_layers;
    s.output_forward_ps += k * (mt.forward_ps + h.fwd + h.tp_f);
    s.output_backward_ps += k * (mt.backward_ps + h.bwd + h.tp_b);
    s.output_tp_forward_ps += k * (mt.tp_comm_forward_ps + h.tp_f);
    s.output_tp_backward_ps += k * (mt.tp_comm_backward_ps + h.tp_b);
    for (int64_t d = 0; d < k; ++d) {
      s.output_tp_forward.add(mt.tp_forward);
      s.output_tp_forward.add(h.tp_f_totals);
      s.output_tp_backward.add(mt.tp_backward);
      s.output_tp_backward.add(h.tp_b_totals);
    }
    s.output_weight_grad_ps += k * (mt.weight_grad_ps + h.wgrad);
    s.output_ep_forward_ps = k * mt.ep_comm_forward_ps;
    s.output_ep_backward_ps = k * mt.ep_comm_backward_ps;
  }
  s.comm_slowdown = kNcclChannels / std::max(1, c.gpu.sm_count);
  s.ep_comm_sm_share = ep_comm_sm_share(c, p);
  return s;
}

std::vector<LayerCharges> layer_charges(const ModelSpec& m, const ClusterSpec& c, const Plan& p) {
  if (p.recompute == Recompute::kFull && p.recompute_layers > 0) {
    // The transformer layers of each part, then the embedding and output
    // layer once, as the step takes them (from the recomputed part:
    // partial_recompute_step_costs).
    std::vector<LayerCharges> out, ends;
    for (bool all : {true, false}) {
      for (LayerCharges& k : layer_charges(m, c, partial_recompute_part(p, all))) {
        if (k.kind == ChargedLayer::kDense || k.kind == ChargedLayer::kMoe) {
          k.recomputed = all;
          out.push_back(std::move(k));
        } else if (all) {
          ends.push_back(std::move(k));
        }
      }
    }
    for (LayerCharges& k : ends) out.push_back(std::move(k));
    return out;
  }
  // The costs and totals are the step's own (step_costs); op_times runs
  // again over each block only to record its ops.
  const StepCosts sc = step_costs(m, c, p);
  const ComputeParams cpm = compute_params(c, p);
  const LinkParams lp = link_params(c);
  const ExecutionProfile prof = execution_profile(p);
  std::vector<LayerCharges> out;
  auto add = [&](ChargedLayer kind, int64_t layers, const LayerCost& cost, bool block, const LayerTimes& times) {
    LayerCharges k;
    k.kind = kind;
    k.layers = layers;
    op_times(cost, cpm, c, lp, p, block, prof, &k.ops);
    k.times = times;
    out.push_back(std::move(k));
  };
  int64_t moe_layers = 0;
  for (int64_t i = 0; i < m.layers; ++i) moe_layers += m.is_moe_layer(i) ? 1 : 0;
  if (m.layers > moe_layers) add(ChargedLayer::kDense, m.layers - moe_layers, sc.layer, true, sc.layer_times);
  if (moe_layers > 0) add(ChargedLayer::kMoe, moe_layers, sc.moe_layer, true, sc.moe_layer_times);
  // The embedding and the output layer: their passes' totals (the output's
  // with any multi-token prediction depths, which output_cost leaves out).
  auto ends = [](int64_t forward, int64_t backward, int64_t weight_grad) {
    LayerTimes t;
    t.forward_ps = forward;
    t.backward_ps = backward;
    t.weight_grad_ps = weight_grad;
    return t;
  };
  add(ChargedLayer::kEmbedding, 1, sc.embedding, false,
      ends(sc.embedding_forward_ps, sc.embedding_backward_ps, sc.embedding_weight_grad_ps));
  add(ChargedLayer::kOutput, 1, output_cost(m, sc.shape), false,
      ends(sc.output_forward_ps, sc.output_backward_ps, sc.output_weight_grad_ps));
  return out;
}

double ep_comm_sm_share(const ClusterSpec& c, const Plan& p) {
  double sms = kNcclChannels;
  if (p.moe_dispatcher == MoeDispatcher::kDeepEp) sms = kDeepEpNumSms;
  if (p.moe_dispatcher == MoeDispatcher::kHybridEp) {
    const bool spans_domains = int64_t{p.ep} * std::max(1, p.etp) > c.gpus_per_node;
    sms = spans_domains ? kHybridEpInterDomainNumSms : kHybridEpNumSms;
  }
  return std::min(1.0, sms / std::max(1, c.gpu.sm_count));
}

bool StepCosts::uniform_layers() const {
  if (!recomputed_of_layer.empty()) return false;
  if (!has_moe || moe_of_layer.empty()) return true;
  return std::all_of(moe_of_layer.begin(), moe_of_layer.end(), [&](bool moe) { return moe == moe_of_layer.front(); });
}

int64_t StepCosts::layers_work_ps(int64_t first, int64_t count, bool less_ep_comm) const {
  int64_t t = 0;
  for (int64_t i = first; i < first + count; ++i) {
    const LayerTimes& lt = times_of(i);
    t += lt.forward_ps + lt.backward_ps - (less_ep_comm ? lt.ep_comm_forward_ps + lt.ep_comm_backward_ps : 0);
  }
  return t;
}

int64_t StepCosts::layers_forward_ps(int64_t first, int64_t count) const {
  int64_t t = 0;
  for (int64_t i = first; i < first + count; ++i) t += times_of(i).forward_ps;
  return t;
}

std::vector<int64_t> stage_first_layers(const std::vector<int>& stage_layers) {
  std::vector<int64_t> first;
  int64_t at = 0;
  for (int n : stage_layers) {
    first.push_back(at);
    at += n;
  }
  return first;
}

double optimizer_partition_params(const Layout& layout, const ExecutionProfile& profile, double stage_params,
                                  double stage_expert_params) {
  const OptimizerSharding os = optimizer_sharding(layout, profile);
  const double shard = os.zero >= 1 ? os.shard : 1;
  const double expert_shard = os.zero >= 1 ? std::max(1, layout.expert_dp) : 1;
  return (stage_params - stage_expert_params) / shard + stage_expert_params / expert_shard;
}

Duration offload_grad_copy_time(const ClusterSpec& c, const Plan& p, double partition_params, int64_t microbatch,
                                int64_t microbatches) {
  TRAINPLAN_CHECK(microbatch >= 0 && microbatch < microbatches, "micro-batch out of range");
  // zero/stage_1_and_2.py copy_grads_in_partition (cpu_offload):
  // async_accumulate_grad_in_cpu_via_gpu while micro_step_id > 0 or before
  // the boundary (accumulate_gradients: the host buffer up and add_ on the
  // device, from micro_step_id 1; copy_gradients_to_cpu: down, in the
  // parameter's dtype), then at the boundary
  // async_inplace_copy_grad_to_fp32_buffer_from_gpu (.to(fp32), copy down).
  const double e = weight_bytes(p.precision);
  double pcie = 0, hbm = 0;
  if (microbatches > 1) {
    if (microbatch > 0) {
      pcie += e;
      hbm += 3 * e;  // add_: read both, write one
    }
    pcie += e;
  }
  if (microbatch == microbatches - 1) {
    pcie += 4;
    hbm += e + 4;  // the cast: read 16-bit, write fp32
  }
  const ComputeParams cpm = compute_params(c, p.precision);
  return Duration::seconds(partition_params * pcie / c.host.bandwidth_per_gpu.bytes_per_s()) +
         memory_time(cpm, partition_params * hbm);
}

double optimizer_bytes_per_param(const Plan& p, const ExecutionProfile& prof) {
  // Adam reads fp32 master, m, v and the gradient and writes master, m, v
  // and the 16-bit weight (4*4 + 3*4 + 2 = 30 bytes per parameter); the
  // gradient-norm/overflow check reads the gradients twice more and zeroing
  // them writes them once (Megatron's optimizer.step): 30 + 3*4 = 42 bytes
  // (fp32 training: no master copy, 36 bytes).
  double bytes_per_param = p.precision == Precision::kFp32 ? 36.0 : 42.0;
  // bf16 moments (Plan::moment_dtype): m and v are each read and written
  // at 2 B instead of 4 (34 bytes); a master kept as its 16-bit remainder
  // (adam_state_bytes) is read with the bf16 parameter and written back,
  // 2 + 2 + 2 instead of 4 + 4 (32 bytes).
  const AdamStateBytes adam = adam_state_bytes(p, prof);
  bytes_per_param -= 4.0 * (4 - adam.moment);
  if (p.precision != Precision::kFp32 && adam.master < 4) bytes_per_param -= 2;
  // A 16-bit gradient partition is first cast to fp32 (read 2, write 4:
  // ExecutionProfile::grads_in_model_dtype).
  if (prof.grads_in_model_dtype && p.precision != Precision::kFp32) bytes_per_param += weight_bytes(p.precision) + 4;
  return bytes_per_param;
}

int64_t optimizer_ps(const ClusterSpec& c, const Layout& layout, double stage_params, double stage_expert_params) {
  const Plan& p = layout.plan;
  TRAINPLAN_CHECK(p.schedule != Schedule::kDualPipe, "a dualpipe plan's optimizer step is its execution_layout's");
  const ExecutionProfile prof = execution_profile(p);
  const double local = optimizer_partition_params(layout, prof, stage_params, stage_expert_params);
  if (p.offload == Offload::kNone) {
    const double bytes_per_param = optimizer_bytes_per_param(p, prof);
    return memory_time(compute_params(c, p.precision), local * bytes_per_param).ps();
  }
  // CPU Adam on the host, plus gradients down (unless each reduction moved
  // them already: offload_grad_copy_time) and weights up over PCIe.
  const double cpu_s = local / (kCpuAdamParamsPerSPerNode / c.gpus_per_node);
  // (ZeRO-3 with the gradients on the host copies each pass's shard down
  // as the backward produces it: lowering.cc build_grad_offload.)
  const bool moved = prof.offload_grad_copies_each_reduction || (p.zero == 3 && prof.offload_grads_to_host);
  const double down = moved ? 0.0 : grad_bytes(p.precision, p.grad_dtype);
  const double pcie_s = local * (down + weight_bytes(p.precision)) / c.host.bandwidth_per_gpu.bytes_per_s();
  return Duration::seconds(cpu_s + pcie_s).ps();
}

int64_t step_time_lower_bound(const ModelSpec& m, const ClusterSpec& c, const Layout& layout, const StepCosts& s,
                              const std::vector<double>& stage_params, const std::vector<double>& stage_expert_params) {
  const Plan& p = layout.plan;
  const int64_t mb = layout.microbatches;
  const int v = chunks_per_rank(p);
  // The rank that runs the output layer and loss (the last virtual stage).
  const int output_rank = rank_chunk_of(p.schedule, p.pp, p.pp * v - 1).rank;
  auto opt = [&](int st) {
    const size_t i = static_cast<size_t>(st);
    return optimizer_ps(c, layout, stage_params[i], i < stage_expert_params.size() ? stage_expert_params[i] : 0.0);
  };
  // Paired passes may hide their expert-parallel all-to-alls
  // (ExecutionProfile::paired_ep_overlap): bound with the rest only.
  const bool hide_ep = execution_profile(p).paired_ep_overlap;
  // The cheapest layer kind present (dense or MoE) bounds any chunk's layers.
  int64_t min_fwd = INT64_MAX, min_bwd = INT64_MAX, min_work = INT64_MAX;
  for (int64_t i = 0; i < m.layers; ++i) {
    const LayerTimes& t = s.times_of(i);
    const int64_t f = t.forward_ps - (hide_ep ? t.ep_comm_forward_ps : 0);
    const int64_t b = t.backward_ps - (hide_ep ? t.ep_comm_backward_ps : 0);
    min_fwd = std::min(min_fwd, f);
    min_bwd = std::min(min_bwd, b);
    min_work = std::min(min_work, f + b);
  }
  const std::vector<int64_t> first = stage_first_layers(layout.stage_layers);
  // A stage's layers are its chunks' (chunk_layers), which are not one run of
  // layers where a rank holds several chunks; where the layers also differ
  // (dense and MoE layers, or a partial recompute that recomputes the first
  // layers of each chunk) the stage's work is summed chunk by chunk.
  // Otherwise every run of as many layers costs the same.
  std::vector<std::vector<ChunkLayers>> chunks;
  if (v > 1 && p.schedule != Schedule::kDualPipe && !s.uniform_layers()) chunks = chunk_layers(layout);
  int64_t best = 0;
  // Stage st cannot start before micro-batch 0 has gone forward through the
  // first chunk of every earlier stage.  And its last op, the backward of a
  // micro-batch through its chunk 0 (1F1B, interleaved and GPipe all end a
  // stage that way), feeds the backward of that micro-batch through chunk 0
  // of every earlier stage in turn, so stage 0 finishes (and then steps its
  // optimizer) at least that drain later.  For uniform stages without
  // communication the two together are the closed form (m + p - 1)(f + b).
  // Zero-bubble schedules end a stage with a W pass that feeds nobody: no
  // drain there.
  const bool drains = p.pp > 1 && p.schedule != Schedule::kNaive && !zero_bubble(p.schedule);
  // Zero Bubble's automatic schedules run with optimizer post-validation:
  // their step is the longest rank's own span, first task to last
  // (report_lowered), so a later stage's wait for its first input is not
  // part of it.
  const bool own_span = zero_bubble_automatic(p.schedule);
  int64_t start_delay = 0, drain = 0;
  for (int st = 0; st < p.pp; ++st) {
    const int64_t layers = layout.stage_layers[static_cast<size_t>(st)];
    int64_t work = 0;
    if (chunks.empty()) {
      work = s.layers_work_ps(first[static_cast<size_t>(st)], layers, hide_ep);
    } else {
      for (const ChunkLayers& cl : chunks[static_cast<size_t>(st)]) work += s.layers_work_ps(cl.first, cl.count, hide_ep);
    }
    if (st == 0) work += s.embedding_forward_ps + s.embedding_backward_ps;
    if (st == output_rank) {
      work += s.output_forward_ps + s.output_backward_ps -
              (hide_ep ? s.output_ep_forward_ps + s.output_ep_backward_ps : 0);
    }
    // Naive model parallel: one stage busy at a time, so the step is at least
    // the sum over stages.
    const int64_t done = start_delay + mb * work;
    best = std::max(best, done + opt(st));
    if (drains) best = std::max(best, done + drain + opt(0));
    if (!own_span) start_delay += (layers / v) * min_fwd + (st == 0 ? s.embedding_forward_ps : 0);
    drain += (layers / v) * min_bwd;
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
    const int64_t chunk = (min_layers / v) * min_work;
    int64_t min_opt = INT64_MAX;
    for (int st = 0; st < p.pp; ++st) min_opt = std::min(min_opt, opt(st));
    best = std::max(best, (mb * v + p.pp - 1) * chunk + min_opt);
  }
  if (p.schedule == Schedule::kNaive && p.pp > 1) {
    int64_t sum = 0;
    for (int st = 0; st < p.pp; ++st) {
      const int64_t layers = layout.stage_layers[static_cast<size_t>(st)];
      sum += mb * s.layers_work_ps(first[static_cast<size_t>(st)], layers, hide_ep);
    }
    best = std::max(best, sum);
  }
  return best;
}

int64_t pipeline_step_lower_bound(const ModelSpec& m, const ClusterSpec& c, const Layout& layout, const StepCosts& s,
                                  const std::vector<double>& stage_params,
                                  const std::vector<double>& stage_expert_params) {
  const int64_t basic = step_time_lower_bound(m, c, layout, s, stage_params, stage_expert_params);
  const Plan& p = layout.plan;
  if (p.pp <= 1 || p.schedule == Schedule::kNaive || zero_bubble(p.schedule)) return basic;
  const int v = chunks_per_rank(p);
  // A schedule of more passes than this (4M sequences of one token) takes
  // the bound longer to build than simulate_steady_state takes to simulate
  // the step, and its bubble is a vanishing share of the step (p * v of its
  // 2^18 passes or more): the basic bound stands.
  constexpr int64_t kMaxSchedulePasses = int64_t{1} << 18;
  if (layout.microbatches * p.pp * v > kMaxSchedulePasses) return basic;
  const int mb = static_cast<int>(layout.microbatches);
  if (!check_pipeline_schedule(p.schedule, p.pp, mb, v).ok) return basic;
  const std::vector<std::vector<ChunkLayers>> chunks = chunk_layers(layout);
  const bool hide_ep = execution_profile(p).paired_ep_overlap;  // as step_time_lower_bound
  const size_t stages = static_cast<size_t>(p.pp) * static_cast<size_t>(v);
  std::vector<double> fwd(stages), bwd(stages);
  int64_t empty_passes = 0;  // per micro-batch
  for (int r = 0; r < p.pp; ++r) {
    for (int ch = 0; ch < v; ++ch) {
      const ChunkLayers& cl = chunks[static_cast<size_t>(r)][static_cast<size_t>(ch)];
      int64_t f = 0, b = 0;
      for (int i = cl.first; i < cl.first + cl.count; ++i) {
        const LayerTimes& lt = s.times_of(i);
        f += lt.forward_ps - (hide_ep ? lt.ep_comm_forward_ps : 0);
        b += lt.backward_ps - (hide_ep ? lt.ep_comm_backward_ps : 0);
      }
      if (r == 0 && ch == 0) {
        f += s.embedding_forward_ps;
        b += s.embedding_backward_ps;
      }
      if (r == p.pp - 1 && ch == v - 1) {
        f += s.output_forward_ps - (hide_ep ? s.output_ep_forward_ps : 0);
        b += s.output_backward_ps - (hide_ep ? s.output_ep_backward_ps : 0);
      }
      // simulate_pipeline_stages needs positive times: a pass of no work
      // takes a picosecond here (none in the lowering), so the makespan may
      // be over by one picosecond per such pass.
      const size_t st = static_cast<size_t>(model_chunk_stage(r, ch, p.pp));
      fwd[st] = static_cast<double>(std::max<int64_t>(1, f));
      bwd[st] = static_cast<double>(std::max<int64_t>(1, b));
      empty_passes += (f <= 0 ? 1 : 0) + (b <= 0 ? 1 : 0);
    }
  }
  const PipelineSchedule schedule = build_pipeline_schedule(p.schedule, p.pp, mb, v, p.ep_overlap);
  const UnitTimeRun run = simulate_pipeline_stages(schedule, v, fwd, bwd);
  int64_t best = basic;
  for (int r = 0; r < p.pp; ++r) {
    const size_t ri = static_cast<size_t>(r);
    const std::vector<PipeOp>& ops = schedule[ri];
    if (ops.empty()) continue;
    const PipeOp& last = ops.back();
    const size_t st = static_cast<size_t>(model_chunk_stage(r, last.chunk, p.pp));
    const double end = run.start[ri].back() + (last.kind == PipeOp::Kind::kForward ? fwd[st] : bwd[st]);
    const int64_t opt = optimizer_ps(c, layout, stage_params[ri], ri < stage_expert_params.size() ? stage_expert_params[ri] : 0.0);
    // Op times are whole picoseconds below 2^53: the sums are exact.
    best = std::max(best, static_cast<int64_t>(end) - empty_passes * mb + opt);
  }
  return best;
}

}  // namespace trainplan
