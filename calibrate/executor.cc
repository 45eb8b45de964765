#include "calibrate/executor.h"

#include <sys/resource.h>

#include <algorithm>
#include <chrono>
#include <memory>

#include "simulator/core/error.h"
#include "simulator/engine/engine.h"
#include "simulator/memory/memory_model.h"
#include "simulator/network/collective_model.h"
#include "simulator/taskgraph/lowering.h"
#include "simulator/taskgraph/step_costs.h"

namespace trainplan {

namespace {

// The executor runs one process per GPU: its task graph has one simulated
// rank per GPU, TP peers included (LoweringOptions::every_gpu).
LoweringOptions executor_lowering(const SimulateOptions& so) {
  LoweringOptions lo = lowering_options(so);
  lo.every_gpu = true;
  return lo;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v.empty() ? 0 : v[v.size() / 2];
}

// The 75th minus the 25th percentile (nearest rank) of `v`.
double interquartile_range(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const size_t n = v.size();
  return v[(3 * n) / 4 < n ? (3 * n) / 4 : n - 1] - v[n / 4];
}

std::string dtype_of(Precision p, const Backend& b) {
  if (p == Precision::kFp32) return b.supports("tf32") ? "tf32" : "fp32";
  const std::string d = p == Precision::kBf16 ? "bf16" : "fp16";
  return b.supports(d) ? d : "fp32";
}

Collective tp_collective(TpComm c, bool backward) {
  switch (c) {
    case TpComm::kAllReduce: return Collective::kAllReduce;
    case TpComm::kAllGather: return backward ? Collective::kReduceScatter : Collective::kAllGather;
    case TpComm::kReduceScatter: return backward ? Collective::kAllGather : Collective::kReduceScatter;
    case TpComm::kAllToAll: return Collective::kAllToAll;
    case TpComm::kNone: break;
  }
  return Collective::kAllReduce;
}

class RankExecutor {
 public:
  RankExecutor(Backend& b, const ModelSpec& m, const ClusterSpec& c, const Layout& L)
      : b_(b), L_(L), p_(L.plan), dtype_(dtype_of(L.plan.precision, b)) {
    SimulateOptions so = simulate_options_for(b);
    step_ = lower_step(m, c, L, executor_lowering(so));
    costs_ = step_costs(m, c, p_, so.cp_overlap);
    me_ = b.world().rank();
    const RankCoord& rc = step_.ranks[static_cast<size_t>(me_)];
    // Communicators, split the way the plan places ranks.
    tp_ = b.split(rc.pp * 1000003 + rc.dp * p_.cp + rc.cp, rc.tp);
    dp_ = b.split(rc.pp * 1000003 + rc.tp, rc.dp * p_.cp + rc.cp);
    cp_ = b.split((rc.pp * p_.dp + rc.dp) * p_.tp + rc.tp, rc.cp);
    // A replica's tensor and pipeline ranks (the gradient-norm all-reduce).
    mp_ = b.split(rc.dp * p_.cp + rc.cp, rc.pp * p_.tp + rc.tp);
    if (m.has_moe) {
      // Megatron's parallel folding (expert_folding, simulator/spec/plan.h).
      const ExpertFolding f = expert_folding(p_, rc.tp, rc.cp, rc.dp);
      etp_ = b.split(rc.pp * 1000003 + f.etp_group, f.etp_rank);
      ep_ = b.split(rc.pp * 1000003 + f.ep_group, f.ep_rank);
      edp_ = b.split(rc.pp * 1000003 + f.edp_group, f.edp_rank);
      for (size_t r = 0; r < step_.ranks.size(); ++r) {
        const RankCoord& o = step_.ranks[r];
        if (o.pp == rc.pp && expert_folding(p_, o.tp, o.cp, o.dp).edp_group == f.edp_group) {
          edp_members_.push_back(static_cast<int32_t>(r));
        }
      }
      std::sort(edp_members_.begin(), edp_members_.end());
    }
    // Predecessors of every task (the graph stores successors).
    const TaskGraph& g = step_.graph;
    preds_.assign(static_cast<size_t>(g.size()), {});
    for (int32_t t = 0; t < g.size(); ++t) {
      const Task& task = g.task(t);
      const uint32_t* s = g.successors(task);
      for (uint32_t i = 0; i < task.succ_count; ++i) preds_[s[i]].push_back(t);
    }
    // Which DP collectives run on the expert-DP group, decided once.
    if (edp_) {
      expert_dp_.assign(static_cast<size_t>(g.size()), 0);
      for (int32_t t = 0; t < g.size(); ++t) {
        if (g.task(t).type == TaskType::kComm) expert_dp_[static_cast<size_t>(t)] = is_expert_dp(g.task(t));
      }
    }
    MemoryReport mem = estimate_memory(m, c, L);
    const MemoryBreakdown& bd = mem.stages[static_cast<size_t>(rc.pp)].breakdown;
    static_bytes_ = bd.weights + bd.gradients + bd.optimizer;
    stage_params_ = mem.stages[static_cast<size_t>(rc.pp)].params;
  }

  // The costs of the i-th layer a compute task runs: a dense or an MoE
  // layer by its global index (chunk_layers, as the lowering places them).
  const LayerCost& layer_of(const Task& t, int i) {
    if (!costs_.has_moe) return costs_.layer;
    if (chunks_.empty()) chunks_ = chunk_layers(L_);
    const RankCoord& rc = step_.ranks[static_cast<size_t>(me_)];
    const ChunkLayers& ch = chunks_[static_cast<size_t>(rc.pp)][static_cast<size_t>(std::max<int>(0, t.chunk))];
    return costs_.cost_of(ch.first + std::max<int>(0, t.layer) + i);
  }

  // The communicator of a collective folded into a layer (CommGroup), with
  // the list its times go to (settle_collectives).
  std::pair<Communicator*, std::vector<double>*> layer_group(CommGroup g) {
    switch (g) {
      case CommGroup::kEp: return {ep_.get(), &ep_times_};
      case CommGroup::kEtp: return {etp_.get(), &etp_times_};
      case CommGroup::kTp: break;
    }
    return {tp_.get(), &tp_times_};
  }

  // Whether a DP collective is the routed experts' (over the expert
  // data-parallel group): its members are this rank's expert-DP group.
  bool is_expert_dp(const Task& t) const {
    if (!edp_ || t.member_count != edp_members_.size()) return false;
    std::vector<int32_t> members(step_.graph.members(t), step_.graph.members(t) + t.member_count);
    std::sort(members.begin(), members.end());
    return members == edp_members_;
  }

  // Runs one step; returns this rank's times per category.  `slow`: this
  // rank's compute runs `slow` times as long (an injected straggler);
  // `mid_step`, if set, is called half-way through this rank's program.
  // `link_rank` (>= 0): every transfer that rank takes part in moves
  // 1 / link_fraction times its bytes.
  TimeBreakdown run_step(double* peak_bytes, double slow = 1, const std::function<void()>& mid_step = {},
                         int link_rank = -1, double link_fraction = 1) {
    TimeBreakdown t;
    t_ = &t;
    slow_ = slow;
    link_rank_ = link_rank;
    link_extra_ = link_rank >= 0 ? 1 / link_fraction - 1 : 0;
    step_t0_ = now_s();
    op_ = 0;
    arrivals_.clear();
    const TaskGraph& g = step_.graph;
    done_.assign(static_cast<size_t>(g.size()), 0);
    tp_times_.clear();
    ep_times_.clear();
    etp_times_.clear();
    cp_times_.clear();
    dp_times_.clear();
    edp_times_.clear();
    mp_times_.clear();
    live_bytes_ = static_bytes_;
    peak_ = live_bytes_;
    const std::vector<int32_t>& program = g.program[static_cast<size_t>(me_)];
    for (size_t k = 0; k < program.size(); ++k) {
      const int32_t id = program[k];
      if (mid_step && k == fault_point_index(program.size())) mid_step();
      for (int32_t p : preds_[static_cast<size_t>(id)]) run_comm_if_mine(p);
      run_compute(id);
      const Task& task = g.task(id);
      const uint32_t* s = g.successors(task);
      for (uint32_t i = 0; i < task.succ_count; ++i) {
        const int32_t n = static_cast<int32_t>(s[i]);
        if (g.task(n).type == TaskType::kComm && ready_here(n)) run_comm_if_mine(n);
      }
    }
    // Trailing collectives (e.g. the distributed optimizer's all-gather).
    for (int32_t id = 0; id < g.size(); ++id) {
      if (g.task(id).type == TaskType::kComm) run_comm_if_mine(id);
    }
    const double t0 = now_s();
    b_.world().wait_sends();
    t.pp_comm += now_s() - t0;
    *peak_bytes = peak_;
    return t;
  }

  // After a step (outside its timing): a blocking collective's time on a
  // rank is its own transfer plus the wait for the last member to arrive,
  // and that wait is the other members' compute skew, not communication.
  // The last member to arrive waits for nobody, so the minimum over the
  // group of each collective's time is the collective itself; the rest is
  // left out of the category: it becomes idle time (the step's remainder),
  // as the simulator counts a rank that waits for a collective to start.
  // REQUIRES: every rank calls it after each step.
  void settle_collectives(TimeBreakdown* t) {
    auto settle = [](Communicator& comm, const std::vector<double>& times, double* category) {
      std::vector<double> mins = times;
      comm.reduce_each(&mins, Communicator::Reduce::kMin);
      for (size_t i = 0; i < times.size(); ++i) *category -= times[i] - mins[i];
    };
    settle(*tp_, tp_times_, &t->tp_comm);
    if (ep_) {
      settle(*ep_, ep_times_, &t->ep_comm);
      settle(*etp_, etp_times_, &t->ep_comm);
    }
    settle(*cp_, cp_times_, &t->tp_comm);
    settle(*dp_, dp_times_, &t->dp_comm);
    if (edp_) settle(*edp_, edp_times_, &t->dp_comm);
    settle(*mp_, mp_times_, &t->dp_comm);
  }

  // After a step, on every rank: the mean over this step's gradient
  // synchronisations of the spread of the DP group's arrival times (last
  // minus first rank to enter the collective), as the straggler model
  // measures it.  0 without DP synchronisations.
  double arrival_range_s() {
    std::vector<double> lo = arrivals_, neg_hi(arrivals_.size());
    for (size_t i = 0; i < arrivals_.size(); ++i) neg_hi[i] = -arrivals_[i];
    dp_->reduce_each(&lo, Communicator::Reduce::kMin);
    dp_->reduce_each(&neg_hi, Communicator::Reduce::kMin);
    if (arrivals_.empty() || dp_->size() < 2) return 0;
    double sum = 0;
    for (size_t i = 0; i < lo.size(); ++i) sum += -neg_hi[i] - lo[i];
    return sum / static_cast<double>(lo.size());
  }

 private:
  bool member(const Task& t) const {
    const int32_t* m = step_.graph.members(t);
    return std::find(m, m + t.member_count, me_) != m + t.member_count;
  }

  // The receiving rank of a point-to-point task: its compute successor.
  int32_t receiver(const Task& t) const {
    const uint32_t* s = step_.graph.successors(t);
    for (uint32_t i = 0; i < t.succ_count; ++i) {
      const Task& n = step_.graph.task(static_cast<int32_t>(s[i]));
      if (n.type == TaskType::kCompute && n.rank != step_.graph.members(t)[0]) return n.rank;
    }
    return -1;
  }

  // All of this rank's inputs to comm task `id` are done.
  bool ready_here(int32_t id) const {
    for (int32_t p : preds_[static_cast<size_t>(id)]) {
      const Task& pt = step_.graph.task(p);
      if (pt.type == TaskType::kCompute && pt.rank == me_ && !done_[static_cast<size_t>(p)]) return false;
      if (pt.type == TaskType::kComm && !done_[static_cast<size_t>(p)] && (member(pt) || receiver(pt) == me_)) {
        return false;
      }
    }
    return true;
  }

  void run_comm_if_mine(int32_t id) {
    const TaskGraph& g = step_.graph;
    const Task& t = g.task(id);
    if (t.type != TaskType::kComm || done_[static_cast<size_t>(id)]) return;
    const bool p2p = t.category == Category::kPpComm;
    const int32_t sender = t.member_count > 0 ? g.members(t)[0] : -1;
    const int32_t to = p2p ? receiver(t) : -1;
    if (!member(t) && to != me_) return;
    // Comm chains (e.g. a hybrid-shard all-reduce after its reduce-scatter).
    for (int32_t p : preds_[static_cast<size_t>(id)]) {
      if (g.task(p).type == TaskType::kComm) run_comm_if_mine(p);
    }
    done_[static_cast<size_t>(id)] = 1;
    const double t0 = now_s();
    if (p2p) {
      const int64_t bytes = static_cast<int64_t>(t.wire_bytes);
      const int tag = static_cast<int>(t.microbatch * 64 + t.chunk * 2 + (t.label == TaskLabel::kSendBackward ? 1 : 0));
      // A slow link: the extra bytes follow with the same tag (MPI keeps
      // messages between a pair with one tag in order).
      const bool slow_link = link_rank_ >= 0 && (sender == link_rank_ || to == link_rank_);
      const int64_t extra = slow_link ? static_cast<int64_t>(static_cast<double>(bytes) * link_extra_) : 0;
      if (sender == me_) {
        b_.world().send(to, bytes, tag);
        if (extra > 0) b_.world().send(to, extra, tag);
      } else {
        b_.world().recv(sender, bytes, tag);
        if (extra > 0) b_.world().recv(sender, extra, tag);
      }
      t_->pp_comm += now_s() - t0;
      return;
    }
    if (t.label == TaskLabel::kGradNormSync) {
      // The global gradient norm: one fp32 value summed over the replica.
      mp_->run(Collective::kAllReduce, 4);
      slow_link_extra(*mp_, Group::kMp, Collective::kAllReduce, 4);
      const double took = now_s() - t0;
      t_->dp_comm += took;
      mp_times_.push_back(took);
      return;
    }
    if (t.label == TaskLabel::kTpCollective || t.label == TaskLabel::kCpExchange) {
      // A pass's TP collectives and CP exchange: the executor runs them
      // inside the pass, op by op, where they fall.
      return;
    }
    if (t.label == TaskLabel::kListCopy) {
      // A list-API collective's device copies: the executor's collectives
      // take flat buffers, so there is nothing to copy.
      return;
    }
    if (t.label == TaskLabel::kHostWork) {
      // A list-API collective's per-member calls: the executor's collectives
      // take flat buffers, so there is nothing to run.
      return;
    }
    if (t.label == TaskLabel::kHostToDevice || t.label == TaskLabel::kDeviceToHost) {
      // Offload: a parameter shard copied from host memory, a gradient shard
      // to it (a copy of n bytes is the executor's stand-in for the PCIe
      // transfer).
      b_.copy(static_cast<int64_t>(t.wire_bytes));
      t_->dp_comm += now_s() - t0;
      return;
    }
    Collective kind = Collective::kAllReduce;
    if (t.label == TaskLabel::kDpReduceScatter) kind = Collective::kReduceScatter;
    if (t.label == TaskLabel::kDpAllGather || t.label == TaskLabel::kParamAllGather) kind = Collective::kAllGather;
    Communicator& dp = !expert_dp_.empty() && expert_dp_[static_cast<size_t>(id)] ? *edp_ : *dp_;
    const double factor = bus_bandwidth_factor(kind, dp.size());
    const int64_t size = factor > 0 ? static_cast<int64_t>(t.wire_bytes / factor) : 0;
    if (size > 0 && (t.label == TaskLabel::kDpAllReduce || t.label == TaskLabel::kDpReduceScatter)) {
      arrivals_.push_back(t0 - step_t0_);
    }
    if (size > 0) {
      dp.run(kind, size);
      if (&dp == dp_.get()) slow_link_extra(dp, Group::kDp, kind, size);
    }
    const double took = now_s() - t0;
    t_->dp_comm += took;
    if (size > 0) (&dp == dp_.get() ? dp_times_ : edp_times_).push_back(took);
  }

  enum class Group { kTp, kCp, kDp, kMp };

  // Whether `rank` is in this rank's group of that kind (the splits in the
  // constructor: tp innermost, then cp, dp, pp).
  bool in_group(Group g, int rank) const {
    const RankCoord& a = step_.ranks[static_cast<size_t>(me_)];
    const RankCoord& b = step_.ranks[static_cast<size_t>(rank)];
    switch (g) {
      case Group::kTp: return a.pp == b.pp && a.dp == b.dp && a.cp == b.cp;
      case Group::kCp: return a.pp == b.pp && a.dp == b.dp && a.tp == b.tp;
      case Group::kDp: return a.pp == b.pp && a.tp == b.tp;
      case Group::kMp: return a.dp == b.dp && a.cp == b.cp;
    }
    return false;
  }

  // A slow link on a group's member: the collective again on (1/F - 1)
  // times its bytes (whole elements of every rank's share), so that the
  // group moves 1/F times the data at the link's full rate.
  void slow_link_extra(Communicator& comm, Group g, Collective kind, int64_t bytes) {
    if (link_rank_ < 0 || comm.size() < 2 || !in_group(g, link_rank_)) return;
    const int64_t unit = 4 * static_cast<int64_t>(comm.size());
    const int64_t extra = static_cast<int64_t>(static_cast<double>(bytes) * link_extra_) / unit * unit;
    if (extra > 0) comm.run(kind, extra);
  }

  // Adds the compute (or optimizer) time since t0 to `category`.  An
  // injected straggler then keeps its core busy until the work has taken
  // `slow` times what the same work took in the last plain step, as a device
  // that much slower would (spinning, not sleeping: a sleeping rank would
  // hand its core to the others on a shared CPU).  The plain step's time,
  // not this one's: the ranks of a CPU share its memory system, and an op
  // that runs while the other rank waits runs faster than in a plain step
  // (measured with calibrate on this 2-core machine: GEMMs 12% and copies
  // 50% faster with one rank than with two), which would make the injected
  // straggler less slow than it says.
  void charge(double* category, double t0) {
    double took = now_s() - t0;
    const size_t k = op_++;
    if (slow_ > 1) {
      const double plain = k < plain_took_.size() && plain_took_[k] > 0 ? plain_took_[k] : took;
      const double until = t0 + slow_ * plain;
      while (now_s() < until) {
      }
      took = now_s() - t0;
    } else {
      if (plain_took_.size() <= k) plain_took_.resize(k + 1, 0);
      plain_took_[k] = took;
    }
    *category += took;
  }

  // Runs one collective on `comm`, timed into the TP/CP category and the
  // group's list of collective times (settle_collectives).
  void timed(Communicator& comm, Collective kind, double bytes, std::vector<double>* times) {
    const double t0 = now_s();
    comm.run(kind, static_cast<int64_t>(bytes));
    slow_link_extra(comm, &comm == cp_.get() ? Group::kCp : Group::kTp, kind, static_cast<int64_t>(bytes));
    const double took = now_s() - t0;
    (times == &ep_times_ || times == &etp_times_ ? t_->ep_comm : t_->tp_comm) += took;
    times->push_back(took);
  }

  void forward_ops(const LayerCost& lc, bool with_tp) {
    for (const OpCost& op : lc.ops) {
      // Context parallel: the K/V of the other cp ranks are gathered before
      // attention (step_costs: one all-gather of cp_comm_bytes forward).
      if (op.kind == OpKind::kAttention && lc.cp_comm_bytes > 0 && cp_->size() > 1) {
        timed(*cp_, Collective::kAllGather, lc.cp_comm_bytes, &cp_times_);
      }
      // Ulysses (cp_comm a2a): Q, K, V all-to-all'd to head groups before
      // the attention, the output back after it (step_costs: both exposed).
      const bool ulysses = op.kind == OpKind::kAttention && lc.cp_a2a_qkv_bytes > 0 && cp_->size() > 1;
      if (ulysses) timed(*cp_, Collective::kAllToAll, lc.cp_a2a_qkv_bytes, &cp_times_);
      const double t0 = now_s();
      run_op_forward(op);
      charge(&t_->compute, t0);
      if (ulysses) timed(*cp_, Collective::kAllToAll, lc.cp_a2a_out_bytes, &cp_times_);
      if (with_tp && op.tp_comm_after != TpComm::kNone) {
        const auto [comm, times] = layer_group(op.comm_group);
        if (comm->size() > 1) timed(*comm, tp_collective(op.tp_comm_after, false), op.tp_comm_bytes, times);
      }
    }
  }

  void run_op_forward(const OpCost& op) {
    switch (op.kind) {
      case OpKind::kGemm:
        // A grouped GEMM (MoE experts) runs one GEMM per group, as
        // Transformer Engine's GroupedLinear does.
        for (int64_t g = 0; g < op.groups; ++g) b_.gemm(op.m, op.n, op.k, dtype_);
        break;
      case OpKind::kAttention: {
        // QK^T and attention-over-V as GEMMs of the op's shape, plus its
        // memory traffic.
        b_.gemm(op.m, op.n, op.k, dtype_);
        b_.gemm(op.m, op.k, op.n, dtype_);
        if (op.bytes > 0) b_.copy(static_cast<int64_t>(op.bytes / 2));
        break;
      }
      case OpKind::kElementwise:
        if (op.bytes > 0) b_.copy(static_cast<int64_t>(op.bytes / 2));
        break;
    }
  }

  // Which products of the backward to run: all of them, the input
  // gradients only (B of a zero-bubble schedule) or the weight gradients
  // only (its W), as op_weight_grad_time splits them.
  enum class Part { kAll, kInput, kWeight };

  void backward_ops(const LayerCost& lc, Part part = Part::kAll) {
    if (part == Part::kWeight) {
      const double t0 = now_s();
      for (auto it = lc.ops.rbegin(); it != lc.ops.rend(); ++it) {
        if (it->kind == OpKind::kGemm) {
          for (int64_t g = 0; g < it->groups; ++g) b_.gemm(it->n, it->k, it->m, dtype_);
        }
      }
      // The embedding's weight gradient is its whole backward (its input is
      // token ids): the scatter of the output gradient into the table.
      if (&lc == &costs_.embedding) {
        for (const OpCost& op : lc.ops) {
          if (op.bwd_bytes > 0) b_.copy(static_cast<int64_t>(op.bwd_bytes / 2));
        }
      }
      charge(&t_->compute, t0);
      return;
    }
    for (auto it = lc.ops.rbegin(); it != lc.ops.rend(); ++it) {
      const OpCost& op = *it;
      if (op.tp_comm_after != TpComm::kNone) {
        const auto [comm, times] = layer_group(op.comm_group);
        if (comm->size() > 1) timed(*comm, tp_collective(op.tp_comm_after, true), op.tp_comm_bytes, times);
      }
      const double t0 = now_s();
      switch (op.kind) {
        case OpKind::kGemm:
          for (int64_t g = 0; g < op.groups; ++g) {
            b_.gemm(op.m, op.k, op.n, dtype_);
            if (part == Part::kAll) b_.gemm(op.n, op.k, op.m, dtype_);
          }
          break;
        case OpKind::kAttention:
          // Backward = 2x the forward FLOPs (2.5x with flash: S recomputed).
          run_op_forward(op);
          run_op_forward(op);
          if (attention_run(p_) == Attention::kFlash) b_.gemm(op.m, op.n, op.k, dtype_);
          // Context parallel: the K/V gradients go back to their owners.
          if (lc.cp_comm_bytes > 0 && cp_->size() > 1) {
            charge(&t_->compute, t0);
            timed(*cp_, Collective::kReduceScatter, lc.cp_comm_bytes, &cp_times_);
            continue;
          }
          // Ulysses: the output gradient in before, dQ, dK, dV back after
          // (the order of the two does not change their sum).
          if (lc.cp_a2a_qkv_bytes > 0 && cp_->size() > 1) {
            charge(&t_->compute, t0);
            timed(*cp_, Collective::kAllToAll, lc.cp_a2a_out_bytes, &cp_times_);
            timed(*cp_, Collective::kAllToAll, lc.cp_a2a_qkv_bytes, &cp_times_);
            continue;
          }
          break;
        case OpKind::kElementwise:
          // A copy of n bytes moves 2n of traffic (the embedding's, all
          // weight gradient, runs in W where the backward is split).
          if (op.bwd_bytes > 0 && !(part == Part::kInput && &lc == &costs_.embedding)) {
            b_.copy(static_cast<int64_t>(op.bwd_bytes / 2));
          }
          break;
      }
      charge(&t_->compute, t0);
    }
  }

  void run_compute(int32_t id) {
    const Task& t = step_.graph.task(id);
    done_[static_cast<size_t>(id)] = 1;
    if (t.category == Category::kOptimizer) {
      const double t0 = now_s();
      // The optimizer's memory traffic (optimizer_ps's bytes per parameter).
      const double shard = p_.zero >= 1 ? L_.shard_degree : 1;
      const double bytes_per_param = optimizer_bytes_per_param(p_, execution_profile(p_));
      if (p_.offload == Offload::kNone) b_.copy(static_cast<int64_t>(stage_params_ / shard * bytes_per_param / 2));
      charge(&t_->optimizer, t0);
      return;
    }
    live_bytes_ += static_cast<double>(t.mem_alloc);
    peak_ = std::max(peak_, live_bytes_);
    const bool backward = t.label == TaskLabel::kBackward;
    if (t.label == TaskLabel::kWeightGrad) {
      if (t.extras & 2) backward_ops(costs_.output, Part::kWeight);
      for (int i = 0; i < t.layer_count; ++i) backward_ops(layer_of(t, i), Part::kWeight);
      if (t.extras & 1) backward_ops(costs_.embedding, Part::kWeight);
    } else if (!backward) {
      if (t.extras & 1) forward_ops(costs_.embedding, true);
      for (int i = 0; i < t.layer_count; ++i) forward_ops(layer_of(t, i), true);
      if (t.extras & 2) forward_ops(costs_.output, true);
    } else {
      const Part part = zero_bubble(p_.schedule) ? Part::kInput : Part::kAll;
      if (t.extras & 2) backward_ops(costs_.output, part);
      for (int i = 0; i < t.layer_count; ++i) {
        // Full recompute re-runs the layer's forward: every layer, or the
        // first recompute_layers of its chunk (t.layer: the task's first
        // layer within its chunk, -1 for a whole chunk).
        const LayerCost& lc = layer_of(t, i);
        if (layer_recomputed(p_, std::max<int>(0, t.layer) + i)) {
          forward_ops(lc, true);
        } else if (p_.recompute == Recompute::kSelective) {
          for (const OpCost& op : lc.ops) {
            if (op.kind != OpKind::kAttention) continue;
            // Ulysses' all-to-alls are inside the recomputed attention call.
            const bool ulysses = lc.cp_a2a_qkv_bytes > 0 && cp_->size() > 1;
            if (ulysses) timed(*cp_, Collective::kAllToAll, lc.cp_a2a_qkv_bytes, &cp_times_);
            const double t0 = now_s();
            run_op_forward(op);
            charge(&t_->compute, t0);
            if (ulysses) timed(*cp_, Collective::kAllToAll, lc.cp_a2a_out_bytes, &cp_times_);
          }
        }
        backward_ops(lc, part);
      }
      if (t.extras & 1) backward_ops(costs_.embedding, part);
    }
    live_bytes_ -= static_cast<double>(t.mem_free);
  }

  Backend& b_;
  const Layout& L_;
  const Plan& p_;
  std::string dtype_;
  LoweredStep step_;
  StepCosts costs_;
  int me_ = 0;
  std::unique_ptr<Communicator> tp_, dp_, cp_, mp_;
  std::unique_ptr<Communicator> ep_, etp_, edp_;  // MoE: expert-parallel, expert-TP and expert-DP groups
  std::vector<int32_t> edp_members_;              // simulated ranks of this rank's expert-DP group, sorted
  std::vector<uint8_t> expert_dp_;                // per task: a DP collective over the expert-DP group
  std::vector<std::vector<ChunkLayers>> chunks_;  // layer_of: each stage's chunks
  std::vector<double> tp_times_, cp_times_, dp_times_, mp_times_;  // this step's collectives, in call order
  std::vector<double> ep_times_, etp_times_, edp_times_;
  std::vector<std::vector<int32_t>> preds_;
  std::vector<uint8_t> done_;
  TimeBreakdown* t_ = nullptr;
  double slow_ = 1, step_t0_ = 0;
  size_t op_ = 0;                    // this step's charge() calls so far
  std::vector<double> plain_took_;   // per charge() call, its time in the last plain step
  int link_rank_ = -1;
  double link_extra_ = 0;  // 1 / link fraction - 1
  std::vector<double> arrivals_;  // this step's gradient synchronisations: entry time since the step's start
  double static_bytes_ = 0, live_bytes_ = 0, peak_ = 0, stage_params_ = 0;
};

}  // namespace

SimulateOptions simulate_options_for(const Backend& backend) { return simulate_options_for(backend.name()); }

SimulateOptions simulate_options_for(const std::string& backend_name) {
  SimulateOptions o;
  o.representative = false;
  if (backend_name == "cpu") {
    o.p2p = LoweringOptions::P2p::kAsync;
    o.blocking_dp = true;
    o.cp_overlap = false;  // MPI calls block the rank: nothing hides the K/V exchange
  }
  return o;
}

double fault_point_time_s(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                          const std::string& backend_name, int rank) {
  LoweredStep step = lower_step(model, cluster, layout, executor_lowering(simulate_options_for(backend_name)));
  const std::vector<int32_t>& program = step.graph.program[static_cast<size_t>(rank)];
  const int32_t task = program[fault_point_index(program.size())];
  EngineOptions eo;
  eo.comm_slowdown = step.comm_slowdown;
  eo.static_bytes = step.static_bytes;
  FlowNetwork network = step.network;
  const EngineResult r = run_engine(step.graph, network, eo);
  return static_cast<double>(r.times[static_cast<size_t>(task)].start_ps) * 1e-12;
}

MeasuredStep execute_plan(Backend& backend, const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                          const ExecutorOptions& options) {
  Communicator& world = backend.world();
  if (world.size() != layout.gpus) {
    throw_input_error("--plan", "", "the plan needs " + std::to_string(layout.gpus) + " ranks but " +
                      std::to_string(world.size()) + " were launched",
                      "launch with mpirun -np " + std::to_string(layout.gpus));
  }
  RankExecutor ex(backend, model, cluster, layout);
  if (options.ready) options.ready();
  MeasuredStep m;
  std::vector<double> compute, tp, pp, dp, opt, ep, wait, arrivals, slowed_arrivals;
  const int timed_end = options.warmup + options.steps;
  const bool injected = options.slow_rank >= 0 || options.link_rank >= 0;
  const int total = timed_end + (injected ? options.steps : 0);
  for (int s = options.first_step; s < total; ++s) {
    // With a fault injected, the timed steps alternate without and with it
    // (A B A B, as paired benchmarks do), so that a drift of the shared
    // machine's speed hits both alike.
    const bool slowed = injected && s >= options.warmup && (s - options.warmup) % 2 == 1;
    const double slow = slowed && world.rank() == options.slow_rank ? options.slow_factor : 1;
    const int link_rank = slowed ? options.link_rank : -1;
    std::function<void()> mid;
    if (options.mid_step) mid = [&options, s] { options.mid_step(s); };
    world.barrier();
    const double t0 = now_s();
    double peak = 0;
    TimeBreakdown t = ex.run_step(&peak, slow, mid, link_rank, options.link_fraction);
    const double step = world.max(now_s() - t0);
    ex.settle_collectives(&t);
    const double arrival = ex.arrival_range_s();
    if (options.progress) options.progress(s + 1, total, step);
    if (s < options.warmup) continue;
    if (slowed) {
      m.slowed_step_times_s.push_back(step);
      slowed_arrivals.push_back(arrival);
      continue;
    }
    arrivals.push_back(arrival);
    m.step_times_s.push_back(step);
    // Each category is the mean over ranks, as the simulator's breakdown
    // is (step_report.cc averages its ranks); the maximum would take each
    // category from a different rank (a pipeline's compute from the heavier
    // stage, its wait from the lighter one).
    std::vector<double> sums{t.compute, t.tp_comm, t.pp_comm, t.dp_comm, t.optimizer, t.ep_comm};
    world.reduce_each(&sums, Communicator::Reduce::kSum);
    const double n = world.size();
    compute.push_back(sums[0] / n);
    tp.push_back(sums[1] / n);
    pp.push_back(sums[2] / n);
    dp.push_back(sums[3] / n);
    opt.push_back(sums[4] / n);
    ep.push_back(sums[5] / n);
    wait.push_back(std::max(0.0, step - (sums[0] + sums[1] + sums[3] + sums[4] + sums[5]) / n));
    m.peak_bytes = world.max(peak);
  }
  if (backend.name() == "cpu") {
    // The process's own high-water mark (includes the executor's buffers,
    // MPI and the binary): a real measurement next to the tracked bytes.
    struct rusage u;
    getrusage(RUSAGE_SELF, &u);
    m.process_peak_bytes = world.max(static_cast<double>(u.ru_maxrss) * 1024.0);
  }
  m.step_time_s = median(m.step_times_s);
  m.arrival_range_s = median(arrivals);
  m.slowed_step_time_s = median(m.slowed_step_times_s);
  m.slowed_arrival_range_s = median(slowed_arrivals);
  m.breakdown.compute = median(compute);
  m.breakdown.tp_comm = median(tp);
  m.breakdown.pp_comm = median(pp);
  m.breakdown.dp_comm = median(dp);
  m.breakdown.optimizer = median(opt);
  m.breakdown.ep_comm = median(ep);
  m.spread.compute = interquartile_range(compute);
  m.spread.tp_comm = interquartile_range(tp);
  m.spread.pp_comm = interquartile_range(pp);
  m.spread.dp_comm = interquartile_range(dp);
  m.spread.optimizer = interquartile_range(opt);
  m.spread.ep_comm = interquartile_range(ep);
  m.spread.bubble = interquartile_range(wait);
  m.breakdown.bubble = std::max(0.0, m.step_time_s - m.breakdown.compute - m.breakdown.tp_comm - m.breakdown.pp_comm -
                                         m.breakdown.dp_comm - m.breakdown.optimizer - m.breakdown.ep_comm);
  return m;
}

}  // namespace trainplan
