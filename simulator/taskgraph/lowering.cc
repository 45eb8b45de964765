#include "simulator/taskgraph/lowering.h"

#include <algorithm>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <tuple>
#include <unordered_map>
#include <cmath>

#include "simulator/compute/compute_model.h"
#include "simulator/core/error.h"
#include "simulator/cost/layer_cost.h"
#include "simulator/framework/deepspeed_zero3.h"
#include "simulator/framework/framework.h"
#include "simulator/memory/memory_model.h"
#include "simulator/network/collective_model.h"
#include "simulator/network/topology.h"
#include "simulator/schedule/pipeline_schedule.h"

namespace trainplan {

namespace {

// Async DP: iterations simulated per worker (enough for the staleness
// distribution to settle after the start-up transient).
constexpr int kAsyncIterations = 16;

// The kind of path between two GPUs (network/topology.h).
struct Route {
  bool same_node = true;
  bool crosses_leaf = false;
};

// A cluster's topology and the route classes found in it, shared by every
// lowering of the same cluster shape and GPU count: the planner lowers
// hundreds of plans on one cluster, and building the Boost graph of 2,048
// nodes for each was most of their time.  A route depends only on the two
// GPUs' positions in their nodes and the nodes' relation (same node, same
// leaf, across the spine), so it is cached under that key.  Thread-safe:
// the planner lowers plans on several threads.
class RouteClasses {
 public:
  RouteClasses(const ClusterSpec& c, int gpus) : topology_(c, gpus), gpn_(c.gpus_per_node) {}

  static std::shared_ptr<RouteClasses> of(const ClusterSpec& c, int gpus) {
    // Everything Topology reads from the cluster, and the GPU count.
    char key[256];
    const InterNodeSpec none;
    const InterNodeSpec& in = c.inter_node ? *c.inter_node : none;
    std::snprintf(key, sizeof key, "%d/%d/%d/%.17g/%d/%d/%.17g/%.17g/%d/%d", gpus, c.gpus_per_node,
                  static_cast<int>(c.intra_node.fabric), c.intra_node.bandwidth.bytes_per_s(),
                  c.inter_node ? 1 : 0, in.nics_per_node, in.nic_bandwidth.bytes_per_s(), in.oversubscription,
                  in.nodes_per_leaf, in.rail_optimized ? 1 : 0);
    static std::mutex mu;
    static std::map<std::string, std::shared_ptr<RouteClasses>> registry;
    std::lock_guard<std::mutex> lock(mu);
    auto it = registry.find(key);
    if (it != registry.end()) return it->second;
    // Keep the few most recent shapes (a search uses one per world size).
    if (registry.size() >= 8) registry.clear();
    auto made = std::make_shared<RouteClasses>(c, gpus);
    registry.emplace(key, made);
    return made;
  }

  Route route(int src, int dst) {
    const int sn = topology_.node_of(src), dn = topology_.node_of(dst);
    const int relation = sn == dn ? 0 : topology_.leaf_of_node(sn) == topology_.leaf_of_node(dn) ? 1 : 2;
    const int key = ((src % gpn_) * gpn_ + dst % gpn_) * 3 + relation;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = cache_.find(key);
      if (it != cache_.end()) return it->second;
    }
    Route r;
    for (VertexKind k : topology_.route(src, dst)) {
      if (k == VertexKind::kNic) r.same_node = false;
      if (k == VertexKind::kSpine) r.crosses_leaf = true;
    }
    std::lock_guard<std::mutex> lock(mu_);
    cache_.emplace(key, r);
    return r;
  }

 private:
  const Topology topology_;
  const int gpn_;
  std::mutex mu_;
  std::map<int, Route> cache_;
};

struct Chunk {
  int first_layer = 0;   // within the stage
  int global_first = 0;  // global index of its first layer
  int layers = 0;
  bool embedding = false;
  bool output = false;
};

// One program entry of a rank: what it is, to find the matching task on
// other ranks (identical structure) and to attach communication.
struct Entry {
  PipeOp::Kind kind = PipeOp::Kind::kForward;
  int mb = 0;
  int chunk = 0;
  int layer = -1;           // -1: whole chunk
  bool last_backward = false;  // last backward of its chunk (gradients final)
  double grad_params = 0;   // parameters whose gradients this task finalises
  double grad_expert_params = 0;  // of them, routed experts (reduced over the expert data-parallel group)
  double gather_params = 0; // ZeRO-3: parameters to gather before it
  double gather_layer_params = 0;  // of them, the layer's own (the rest: embedding / output layer)
  double gather_expert_params = 0;  // of them, routed experts (gathered over the expert data-parallel group)
  // ZeRO-1/2 with ExecutionProfile::overlap_param_gather, on the chunk's
  // first forward: the parameters this task needs all-gathered first, and
  // of them the routed experts (over the expert data-parallel group).
  double sync_params = 0;
  double sync_expert_params = 0;
  // Paired passes: the share of its expert-parallel all-to-all time hidden
  // under the paired pass's compute (ExecutionProfile::paired_ep_overlap).
  double ep_hidden_share = 0;
  // DeepSpeed ZeRO-3 replayed module by module (Lowerer::segment_zero3):
  // this entry runs the part [share_begin, share_end) of its layer's pass,
  // from one fetch that synchronizes to the next; `awaited` are the gathers
  // that fetch waits for, each launched from the hook at the start of the
  // stage's entry `launched_at` (this entry: a blocking fetch).
  struct Gather {
    double params = 0;
    size_t launched_at = 0;
  };
  bool segmented = false;
  double share_begin = 0, share_end = 1;
  std::vector<Gather> awaited;
};

class Lowerer {
 public:
  Lowerer(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout, const LoweringOptions& opt)
      : m_(model), c_(cluster), L_(layout), p_(layout.plan), opt_(opt), lp_(link_params(cluster)),
        prof_(execution_profile(layout.plan)) {}

  // The automatic zero-bubble order alone (automatic_zero_bubble_order).
  PipelineSchedule automatic_order() {
    prepare_costs();
    place_ranks();
    build_links();
    build_schedule();
    return schedule_;
  }

  LoweredStep run() {
    prepare_costs();
    place_ranks();
    build_links();
    if (p_.dp_mode == DpMode::kAsync) {
      build_async();
      out_.graph.finalize();
      return std::move(out_);
    }
    build_schedule();
    {
      // About three tasks (compute, its send, its share of DP work) and four
      // dependencies per program entry of each simulated rank.
      size_t entries = 0;
      for (const RankCoord& r : out_.ranks) entries += entries_[static_cast<size_t>(r.pp)].size();
      out_.graph.reserve(3 * entries + out_.ranks.size(), 4 * entries);
    }
    build_compute();
    build_p2p();
    build_param_offload();
    build_dp();
    build_grad_offload();
    build_embedding_sync();
    build_grad_norm_sync();
    block_on_dp();
    // A CP exchange starts with its pass: whatever the pass waits for, it
    // waits for too.
    out_.graph.mirror_predecessors(cp_companions_);
    out_.graph.finalize();
    return std::move(out_);
  }

 private:
  void prepare_costs() {
    sc_ = step_costs(m_, c_, p_, opt_.cp_overlap);
    cpm_ = compute_params(c_, p_);
    member_call_ = cpm_.kernel_overhead;
    shape_ = sc_.shape;
    layer_ = sc_.layer;
    emb_ = sc_.embedding;
    outc_ = sc_.output;
    keep_outputs_ = p_.pp > 1 && prof_.keeps_stage_outputs;
    stage_output_bytes_ = layer_input_bytes(m_, shape_) * kept_stage_output_share(prof_, p_);
    out_.layer = sc_.layer_times;
    if (sc_.has_moe) {
      out_.moe_layer = sc_.moe_layer_times;
      out_.moe_load = sc_.moe_layer.moe_load;
    }
    out_.comm_slowdown = sc_.comm_slowdown;
    layer_grad_bytes_ = grad_bytes(p_.precision, gradient_dtype(p_, prof_));
    reduce_grad_bytes_ = grad_bytes(p_.precision, reduction_dtype(p_, prof_));
    {
      // The largest parameter tensor of a layer on this TP rank: the fused
      // QKV weight or an MLP weight (SwiGLU: fused gate+up); of an MoE
      // layer's experts, one expert's fused FC1 (one tensor per expert).
      const double h = static_cast<double>(m_.hidden);
      const double qd = static_cast<double>(m_.heads * m_.head_dim());
      const double kvd = static_cast<double>(m_.kv_heads * m_.head_dim());
      const double f = static_cast<double>(m_.ffn_hidden);
      const double glu = m_.mlp == MlpKind::kSwiglu ? 2 : 1;
      largest_tensor_params_ = largest_weight_matrix(m_, p_.tp);
      // The modules a framework that gathers module by module fetches one
      // after another (ExecutionProfile::gather_per_module): the fused QKV,
      // the attention output, the MLP's first (SwiGLU: fused gate and up)
      // and second linear layers.  MoE and MLA layers are gathered whole.
      if (prof_.gather_per_module && !m_.has_moe && m_.attention != AttentionKind::kMla) {
        layer_modules_ = {h * (qd + 2 * kvd) / p_.tp, qd * h / p_.tp, h * f * glu / p_.tp, f * h / p_.tp};
      }
      if (m_.has_moe) {
        largest_expert_tensor_params_ = h * static_cast<double>(m_.moe.expert_ffn_hidden) * glu / p_.etp;
      }
    }
    emb_f_ = sc_.embedding_forward_ps;
    emb_b_ = sc_.embedding_backward_ps;
    emb_tp_f_ = sc_.embedding_tp_forward_ps;
    emb_tp_b_ = sc_.embedding_tp_backward_ps;
    out_f_ = sc_.output_forward_ps;
    out_b_ = sc_.output_backward_ps;
    out_tp_f_ = sc_.output_tp_forward_ps;
    out_tp_b_ = sc_.output_tp_backward_ps;
    out_ep_f_ = sc_.output_ep_forward_ps;
    out_ep_b_ = sc_.output_ep_backward_ps;
  }

  // ---- ranks and links ----
  void place_ranks() {
    const int gpn = c_.gpus_per_node;
    auto coord = [&](int g) {
      RankCoord r;
      r.tp = g % p_.tp;
      r.cp = (g / p_.tp) % p_.cp;
      r.dp = (g / (p_.tp * p_.cp)) % p_.dp;
      r.pp = g / (p_.tp * p_.cp * p_.dp);
      // The GPU it runs on: g itself, except through a dualpipe plan's mirror.
      r.global = physical_rank(L_, r.pp, r.dp, r.cp, r.tp);
      r.node = r.global / gpn;
      return r;
    };
    if (p_.dp_mode == DpMode::kAsync) {
      // Every worker: async training is not symmetric in time.
      for (int d = 0; d < p_.dp; ++d) out_.ranks.push_back(coord(global_rank(p_, 0, d, 0, 0)));
    } else if (opt_.representative) {
      for (int s = 0; s < p_.pp; ++s) out_.ranks.push_back(coord(global_rank(p_, s, 0, 0, 0)));
    } else {
      // Lock-step TP peers as one simulated rank (LoweringOptions::every_gpu).
      out_.gpus_per_rank = !opt_.every_gpu && !m_.has_moe && p_.tp > 1 && p_.tp <= gpn && gpn % p_.tp == 0 ? p_.tp : 1;
      for (int g = 0; g < L_.gpus; g += out_.gpus_per_rank) out_.ranks.push_back(coord(g));
    }
    out_.graph.ranks = static_cast<int32_t>(out_.ranks.size());
    out_.graph.program.assign(out_.ranks.size(), {});
    MemoryReport mem = estimate_memory(m_, c_, L_);
    set_static_bytes(mem);
    stage_params_.clear();
    stage_expert_params_.clear();
    for (const StageMemory& st : mem.stages) {
      stage_params_.push_back(st.params);
      stage_expert_params_.push_back(st.expert_params);
    }
  }

  int sim_index(int pp, int dp, int cp, int tp) const {
    if (opt_.representative) return pp;
    if (out_.gpus_per_rank > 1) return global_rank(p_, pp, dp, cp, 0) / out_.gpus_per_rank;
    return global_rank(p_, pp, dp, cp, tp);
  }

  // Whether other traffic can share the ports the TP collectives load: a
  // TP group smaller than a node leaves its NVLink ports to the DP, CP and
  // pipeline groups of the node's other ranks; one spanning nodes shares
  // their NICs.  A TP group that fills its node alone owns its ports (DP
  // and PP leave the node through the NICs).
  // Other traffic loads them only around some passes: a gradient reduction
  // starts when a chunk's last backward ends, ZeRO-3 gathers and reduces
  // around every layer, and a pipeline neighbour on the same node sends
  // over NVLink after every pass.
  bool tp_port_shared(const Entry& e) const {
    const int gpn = c_.gpus_per_node;
    if (p_.tp == gpn) return false;
    if (p_.tp < gpn && static_cast<int64_t>(p_.tp) * p_.cp * p_.dp * p_.pp == p_.tp) return false;
    const bool p2p_on_node = p_.pp > 1 && static_cast<int64_t>(p_.tp) * p_.cp * p_.dp < gpn;
    return p_.zero == 3 || p2p_on_node || (e.kind != PipeOp::Kind::kForward && e.last_backward);
  }

  // The TP link task after compute task `id`, or -1.
  int32_t tp_after(int32_t id) const {
    return static_cast<size_t>(id) < tp_after_.size() ? tp_after_[static_cast<size_t>(id)] : -1;
  }

  // One FIFO per simulated rank for its CP exchange (ring attention's
  // stream), and the links it loads: the rank's NVLink port where the CP
  // group has peers on the node, its share of the node's NICs where the
  // group spans nodes.
  int32_t cp_channel(size_t r) {
    if (cp_channel_.empty()) cp_channel_.assign(out_.ranks.size(), -1);
    if (cp_channel_[r] < 0) cp_channel_[r] = out_.graph.add_channel();
    return cp_channel_[r];
  }
  std::vector<FlowLink> cp_links(size_t r) const {
    const GroupPlacement gp = strided_group_placement(p_.cp, p_.tp, c_);
    std::vector<FlowLink> links;
    if (gp.ranks_per_node > 1 && intra_link_[r] >= 0) links.push_back(FlowLink{intra_link_[r], 1.0f});
    if (gp.nodes > 1 && nic_link_[r] >= 0) {
      links.push_back(FlowLink{nic_link_[r], 1.0f / static_cast<float>(gp.ranks_per_node)});
    }
    return links;
  }

  // One FIFO per simulated rank for its TP collectives (their stream).
  int32_t tp_channel(size_t r) {
    if (tp_channel_.empty()) tp_channel_.assign(out_.ranks.size(), -1);
    if (tp_channel_[r] < 0) tp_channel_[r] = out_.graph.add_channel();
    return tp_channel_[r];
  }

  // The links a TP collective of simulated rank r loads: its NVLink port,
  // and its share of the node's NICs when the group spans nodes.
  std::vector<FlowLink> tp_links(size_t r) const {
    const GroupPlacement gp = strided_group_placement(p_.tp, 1, c_);
    std::vector<FlowLink> links;
    if (gp.ranks_per_node > 1) links.push_back(FlowLink{intra_link_[r], 1.0f});
    if (gp.nodes > 1 && nic_link_[r] >= 0) {
      links.push_back(FlowLink{nic_link_[r], 1.0f / static_cast<float>(gp.ranks_per_node)});
    }
    return links;
  }

  void build_links() {
    for (size_t i = 0; i < out_.ranks.size(); ++i) {
      intra_link_.push_back(out_.network.add_link(lp_.intra_bandwidth.bytes_per_s() * lp_.intra_efficiency));
      if (lp_.nics_per_node > 0) {
        double share = lp_.nic_bandwidth.bytes_per_s() * lp_.inter_efficiency * lp_.nics_per_node / c_.gpus_per_node;
        nic_link_.push_back(out_.network.add_link(share));
      } else {
        nic_link_.push_back(-1);
      }
    }
  }

  // Each simulated rank's memory outside its activations.  The allocator's
  // fragmentation allowance (part of `other`) scales with what it holds, so
  // an automatic zero-bubble plan's is re-read once its order is known.
  void set_static_bytes(const MemoryReport& mem) {
    out_.static_bytes.clear();
    for (const RankCoord& r : out_.ranks) {
      const MemoryBreakdown& b = mem.stages[static_cast<size_t>(r.pp)].breakdown;
      out_.static_bytes.push_back(static_cast<int64_t>(b.weights + b.gradients + b.optimizer + b.other));
    }
  }

  // ---- pipeline schedule and compute tasks ----
  void build_schedule() {
    const int v = chunks_per_rank(p_);
    v_ = v;
    split_ = zero_bubble(p_.schedule);
    chunks_.assign(static_cast<size_t>(p_.pp), {});
    const std::vector<std::vector<ChunkLayers>> layers_of = chunk_layers(L_);
    for (int s = 0; s < p_.pp; ++s) {
      int first = 0;
      for (int c = 0; c < v; ++c) {
        Chunk ch;
        // Chunks differ by at most one layer; the later chunks take the extra.
        ch.layers = layers_of[static_cast<size_t>(s)][static_cast<size_t>(c)].count;
        ch.global_first = layers_of[static_cast<size_t>(s)][static_cast<size_t>(c)].first;
        ch.first_layer = first;
        first += ch.layers;
        const int vs = virtual_stage(p_.schedule, p_.pp, s, c);
        ch.embedding = vs == 0;
        ch.output = vs == p_.pp * v - 1;
        chunks_[static_cast<size_t>(s)].push_back(ch);
      }
    }
    Feasibility f = check_pipeline_schedule(p_.schedule, p_.pp, static_cast<int>(L_.microbatches), v);
    TRAINPLAN_CHECK(f.ok, "infeasible pipeline schedule reached lowering: " + f.reason);
    if (zero_bubble_automatic(p_.schedule)) {
      // Ordered as the authors' runtime orders it (median stage times), run
      // on the real stage times.
      schedule_ = build_zero_bubble_schedule(p_.schedule, p_.pp, static_cast<int>(L_.microbatches),
                                             zero_bubble_planning_times(stage_op_times()));
      if (p_.dp_mode != DpMode::kAsync) set_static_bytes(estimate_memory(m_, c_, L_, &schedule_));
    } else {
      schedule_ = build_pipeline_schedule(p_.schedule, p_.pp, static_cast<int>(L_.microbatches), v, p_.ep_overlap);
    }
    // Program entries per stage (identical for every rank of a stage).
    entries_.assign(static_cast<size_t>(p_.pp), {});
    for (int s = 0; s < p_.pp; ++s) {
      const auto& ops = schedule_[static_cast<size_t>(s)];
      // The pass that finalises a chunk's gradients: W where the backward is
      // split (zero bubble), else B.
      auto finalizes = [&](PipeOp::Kind kind) {
        return kind == (split_ ? PipeOp::Kind::kWeight : PipeOp::Kind::kBackward);
      };
      std::vector<int> last_b(static_cast<size_t>(v), -1);
      for (size_t k = 0; k < ops.size(); ++k) {
        if (finalizes(ops[k].kind)) last_b[static_cast<size_t>(ops[k].chunk)] = static_cast<int>(k);
      }
      std::vector<bool> forwarded(static_cast<size_t>(v), false);
      for (size_t k = 0; k < ops.size(); ++k) {
        const PipeOp& op = ops[k];
        const Chunk& ch = chunks_[static_cast<size_t>(s)][static_cast<size_t>(op.chunk)];
        const double ep_hidden = ep_hidden_share(s, ops, k);
        const bool is_b = op.kind != PipeOp::Kind::kForward;  // B or W: layers in reverse
        const bool last = finalizes(op.kind) && last_b[static_cast<size_t>(op.chunk)] == static_cast<int>(k);
        // The passes after which the framework reduces gradients: the
        // chunk's last, or every one (ExecutionProfile::reduce_every_microbatch).
        const bool reduces = finalizes(op.kind) && (last || prof_.reduce_every_microbatch);
        // The chunk's first forward waits layer by layer for the overlapped
        // parameter all-gather (ExecutionProfile::overlap_param_gather).
        const bool syncs = op.kind == PipeOp::Kind::kForward && !forwarded[static_cast<size_t>(op.chunk)] &&
                           overlapped_param_sync();
        if (op.kind == PipeOp::Kind::kForward) forwarded[static_cast<size_t>(op.chunk)] = true;
        const bool per_layer =
            p_.zero == 3 || syncs || (reduces && p_.dp * p_.cp > 1 && p_.dp_mode == DpMode::kSync);
        auto entry = [&] {
          Entry e;
          e.kind = op.kind;
          e.mb = op.microbatch;
          e.chunk = op.chunk;
          e.last_backward = last;
          e.ep_hidden_share = ep_hidden;
          return e;
        };
        if (!per_layer) {
          Entry e = entry();
          if (reduces) {
            for (int i = 0; i < ch.layers; ++i) {
              e.grad_params += sc_.cost_of(ch.global_first + i).params;
              e.grad_expert_params += sc_.cost_of(ch.global_first + i).expert_params;
            }
            e.grad_params += extra_params(ch) - (ch.embedding && ch.output ? tied_output_params() : 0.0);
          }
          entries_[static_cast<size_t>(s)].push_back(e);
          continue;
        }
        if (ch.layers == 0) {
          // A chunk of only the embedding or the loss (chunk_layers: the
          // first or last virtual stage counting it as a layer's place) is
          // one entry of its block's parameters.
          Entry e = entry();
          const double params = extra_params(ch) - (ch.embedding && ch.output ? tied_output_params() : 0.0);
          const double experts = ch.output ? outc_.expert_params : 0.0;
          if (finalizes(op.kind)) {
            e.grad_params = params;
            e.grad_expert_params = experts;
          }
          if (syncs) {
            e.sync_params = params;
            e.sync_expert_params = experts;
          }
          if (p_.zero == 3) {
            e.gather_params = extra_params(ch);
            e.gather_expert_params = experts;
          }
          entries_[static_cast<size_t>(s)].push_back(e);
          continue;
        }
        for (int i = 0; i < ch.layers; ++i) {
          // Backward runs the layers in reverse order.
          const int layer = is_b ? ch.layers - 1 - i : i;
          Entry e = entry();
          e.layer = layer;
          double params = sc_.cost_of(ch.global_first + layer).params;
          if (ch.embedding && layer == 0) params += emb_.params;
          if (ch.output && layer == ch.layers - 1) params += outc_.params;
          // An MoE multi-token prediction layer's experts (in the output
          // block) reduce over the expert data-parallel group like the rest.
          const double out_experts = ch.output && layer == ch.layers - 1 ? outc_.expert_params : 0.0;
          if (finalizes(op.kind)) {
            // A tied output matrix's gradient is the embedding's, reduced once.
            e.grad_params = params - (ch.output && layer == ch.layers - 1 && ch.embedding ? tied_output_params() : 0.0);
            e.grad_expert_params = sc_.cost_of(ch.global_first + layer).expert_params + out_experts;
          }
          if (syncs) {
            // A tied output matrix is the embedding's, gathered once.
            e.sync_params = params - (ch.output && layer == ch.layers - 1 && ch.embedding ? tied_output_params() : 0.0);
            e.sync_expert_params = sc_.cost_of(ch.global_first + layer).expert_params + out_experts;
          }
          if (p_.zero == 3) {
            e.gather_params = params;
            e.gather_layer_params = sc_.cost_of(ch.global_first + layer).params;
            e.gather_expert_params = sc_.cost_of(ch.global_first + layer).expert_params + out_experts;
          }
          entries_[static_cast<size_t>(s)].push_back(e);
        }
      }
    }
    if (segment_zero3()) {
      for (auto& entries : entries_) entries = zero3_segments(entries);
    }
  }

  // ZeRO-1/2 whose framework all-gathers the updated parameters behind the
  // next step's forward (ExecutionProfile::overlap_param_gather).
  bool overlapped_param_sync() const {
    return (p_.zero == 1 || p_.zero == 2) && prof_.overlap_param_gather && p_.dp_mode == DpMode::kSync &&
           (p_.dp * p_.cp > 1 || (m_.has_moe && L_.expert_dp > 1));
  }

  // DeepSpeed's ZeRO-3 coordinator replayed module by module
  // (ExecutionProfile::zero3_module_fetches): dense layers of four gathered
  // modules (layer_modules_), one rank per layer (tp = cp = 1; DeepSpeed's
  // pipeline engine refuses ZeRO-3), parameters on the GPU.
  bool segment_zero3() const {
    return p_.zero == 3 && prof_.zero3_module_fetches && layer_modules_.size() == 4 && p_.tp == 1 && p_.cp == 1 &&
           p_.pp == 1 && !split_ && p_.offload == Offload::kNone && p_.recompute_layers == 0;
  }

  // A stage's per-layer entries cut where DeepSpeed's fetches synchronize
  // (replay_zero3_fetches over the step's trace of module uses): each
  // segment runs its modules' share of the layer pass (the attention with
  // the fused QKV, the rest by parameters, i.e. by GEMM FLOPs) and waits for
  // the gathers its first fetch waits for; the gradients leave in
  // DeepSpeed's reduce buckets, the rest at the end of each backward.
  std::vector<Entry> zero3_segments(const std::vector<Entry>& entries) const {
    struct Use {
      size_t entry = 0;
      int module = 0;
      double numel = 0;
      double share = 0;       // of the entry's pass
      double grad = 0;        // gradients finalised by this use (backward)
    };
    std::vector<Use> uses;
    const double layer_total = layer_modules_[0] + layer_modules_[1] + layer_modules_[2] + layer_modules_[3];
    // With tied embeddings (one stage holds both ends) the output layer
    // multiplies by the embedding's matrix: the same parameter, fetched and
    // released as one, its gradient reduced once (with the embedding's);
    // the output block's own parameters (the final norm) are persistent.
    const bool tied = m_.tied_embeddings && p_.pp == 1;
    const int emb_module = static_cast<int>(4 * m_.layers), out_module = tied ? emb_module : emb_module + 1;
    const double out_numel = tied ? emb_.params : outc_.params;
    const double out_grads = outc_.params - tied_output_params();
    const bool regather = prof_.regather_for_recompute && p_.recompute == Recompute::kFull;
    // A pass's share per module: the attention with the fused QKV, the rest
    // by parameters (GEMM FLOPs).
    auto shares = [&](double attention_share) {
      std::vector<double> out(4);
      const double a = std::clamp(attention_share, 0.0, 1.0);
      for (int m = 0; m < 4; ++m) out[static_cast<size_t>(m)] = (1 - a) * layer_modules_[static_cast<size_t>(m)] / layer_total;
      out[0] += a;
      return out;
    };
    auto ratio = [](int64_t part, int64_t whole) { return whole > 0 ? static_cast<double>(part) / static_cast<double>(whole) : 0.0; };
    for (size_t k = 0; k < entries.size(); ++k) {
      const Entry& e = entries[k];
      const Chunk& ch = chunks_[0][static_cast<size_t>(e.chunk)];
      const int gl = ch.global_first + e.layer;
      const LayerTimes& lt = sc_.times_of(gl);
      const bool with_emb = ch.embedding && e.layer == 0;
      const bool with_out = ch.output && e.layer == ch.layers - 1;
      auto module = [&](int m) { return 4 * gl + m; };
      const double small = sc_.cost_of(gl).params - layer_total;  // norms and biases (persistent)
      // The entry's pass: the layer's, plus the embedding's or the output
      // layer's work run by their own modules.
      const bool fwd = e.kind == PipeOp::Kind::kForward;
      const double layer_ps = static_cast<double>(fwd ? lt.forward_ps : lt.backward_ps);
      const double emb_ps = with_emb ? static_cast<double>(fwd ? emb_f_ : emb_b_) : 0.0;
      const double out_ps = with_out ? static_cast<double>(fwd ? out_f_ : out_b_) : 0.0;
      const double total_ps = std::max(1.0, layer_ps + emb_ps + out_ps);
      const double layer_share = layer_ps / total_ps;
      if (fwd) {
        const std::vector<double> f = shares(ratio(lt.attention_forward_ps, lt.forward_ps));
        if (with_emb) uses.push_back(Use{k, emb_module, emb_.params, emb_ps / total_ps, 0});
        for (int m = 0; m < 4; ++m) {
          uses.push_back(Use{k, module(m), layer_modules_[static_cast<size_t>(m)], layer_share * f[static_cast<size_t>(m)], 0});
        }
        if (with_out) uses.push_back(Use{k, out_module, out_numel, out_ps / total_ps, 0});
        continue;
      }
      const double rec = regather ? ratio(lt.recompute_ps, lt.backward_ps) : 0.0;
      if (regather) {
        const std::vector<double> f = shares(ratio(lt.attention_forward_ps, lt.forward_ps));
        for (int m = 0; m < 4; ++m) {
          uses.push_back(Use{k, module(m), layer_modules_[static_cast<size_t>(m)], layer_share * rec * f[static_cast<size_t>(m)], 0});
        }
      }
      const std::vector<double> b = shares(ratio(lt.attention_backward_ps, lt.backward_ps));
      const bool grads = e.grad_params > 0;
      if (with_out) uses.push_back(Use{k, out_module, out_numel, out_ps / total_ps, grads ? out_grads : 0});
      for (int m = 3; m >= 0; --m) {
        const double numel = layer_modules_[static_cast<size_t>(m)];
        uses.push_back(Use{k, module(m), numel, layer_share * (1 - rec) * b[static_cast<size_t>(m)],
                           grads ? numel + (m == 0 ? small : 0) : 0});
      }
      if (with_emb) uses.push_back(Use{k, emb_module, emb_.params, emb_ps / total_ps, grads ? emb_.params : 0});
    }
    std::vector<ModuleUse> trace;
    trace.reserve(uses.size());
    for (const Use& u : uses) trace.push_back(ModuleUse{u.module, u.numel});
    const std::vector<std::vector<AwaitedGather>> awaited = replay_zero3_fetches(trace, prof_.zero3_knobs);
    // Cut: a segment starts with each entry and at each synchronizing fetch.
    std::vector<Entry> out;
    std::vector<size_t> segment_of(uses.size(), 0);
    double bucket = 0;
    for (size_t i = 0; i < uses.size(); ++i) {
      const Use& u = uses[i];
      const bool first = i == 0 || uses[i - 1].entry != u.entry;
      if (first || !awaited[i].empty()) {
        Entry seg = entries[u.entry];
        seg.segmented = true;
        seg.grad_params = seg.grad_expert_params = 0;
        seg.gather_params = seg.gather_layer_params = seg.gather_expert_params = 0;  // Entry::awaited instead
        seg.share_begin = seg.share_end = first ? 0.0 : out.back().share_end;
        for (const AwaitedGather& g : awaited[i]) {
          seg.awaited.push_back(Entry::Gather{g.numel, static_cast<size_t>(g.launched_at)});
        }
        if (!first) out.back().last_backward = false;
        out.push_back(seg);
      }
      segment_of[i] = out.size() - 1;
      Entry& seg = out.back();
      seg.share_end = std::min(1.0, seg.share_end + u.share);
      // reduce_independent_p_g_buckets_and_remove_grads: the bucket leaves
      // before a gradient that would overflow it.
      if (u.grad > 0) {
        if (bucket > 0 && bucket + u.grad > prof_.grad_bucket_params) {
          seg.grad_params += bucket;
          bucket = 0;
        }
        bucket += u.grad;
      }
      // The entry's last use ends its pass (the whole of it); the end of a
      // micro-batch's backward flushes the bucket (the epilogue's reduce_ipg_grads).
      const bool last = i + 1 == uses.size() || uses[i + 1].entry != u.entry;
      if (last) {
        seg.share_end = 1;
        const Entry& e = entries[u.entry];
        const bool ends_mb = e.kind != PipeOp::Kind::kForward &&
                             (u.entry + 1 == entries.size() || entries[u.entry + 1].kind == PipeOp::Kind::kForward ||
                              entries[u.entry + 1].mb != e.mb);
        if (ends_mb && bucket > 0) {
          seg.grad_params += bucket;
          bucket = 0;
        }
      }
    }
    // Launch points as segment indices.
    for (Entry& seg : out) {
      for (Entry::Gather& g : seg.awaited) g.launched_at = segment_of[g.launched_at];
    }
    return out;
  }

  // Paired passes with the framework's overlap (dualpipe-v; Megatron-Core's
  // combined 1F1B): a paired forward's all-to-all time is hidden under its
  // partner backward's compute (B and, with dualpipe-v, W; less their
  // communication) and the backward's under the forward's, each up to the
  // other's compute (DeepSeek-V3 report Sec. 3.2.1, Fig. 4; combined_1f1b.py).
  // The pair is the forward and the backward after it in the rank's order.
  double ep_hidden_share(int s, const std::vector<PipeOp>& ops, size_t k) const {
    if (!prof_.paired_ep_overlap || !ops[k].overlapped || ops[k].kind == PipeOp::Kind::kWeight) return 0;
    const bool fwd = ops[k].kind == PipeOp::Kind::kForward;
    const size_t partner = fwd ? k + 1 : k - 1;
    TRAINPLAN_CHECK(partner < ops.size() && ops[partner].overlapped, "an overlapped pass without its partner");
    struct Sums {
      double compute = 0, ep = 0, wgrad = 0;
    };
    auto sums = [&](const PipeOp& op, bool forward) {
      const Chunk& ch = chunks_[static_cast<size_t>(s)][static_cast<size_t>(op.chunk)];
      Sums x;
      for (int i = ch.global_first; i < ch.global_first + ch.layers; ++i) {
        const LayerTimes& lt = sc_.times_of(i);
        const int64_t all = forward ? lt.forward_ps : lt.backward_ps;
        const int64_t tp = forward ? lt.tp_comm_forward_ps : lt.tp_comm_backward_ps;
        const int64_t e = forward ? lt.ep_comm_forward_ps : lt.ep_comm_backward_ps;
        x.compute += static_cast<double>(all - tp - e);
        x.ep += static_cast<double>(e);
        if (!forward) x.wgrad += static_cast<double>(lt.weight_grad_ps);
      }
      // The multi-token prediction layers' all-to-alls, on the output
      // block's chunk, hide at the same share (their compute is not counted
      // in the partner's budget: the pairing is layer by layer).
      if (ch.output) x.ep += static_cast<double>(forward ? out_ep_f_ : out_ep_b_);
      return x;
    };
    const Sums own = sums(ops[k], fwd);
    const Sums other = sums(ops[partner], !fwd);
    if (own.ep <= 0) return 0;
    // --delay-wgrad-compute: a merged backward's weight-gradient GEMMs run
    // while its own all-to-all is in flight (model_chunk_schedule_plan.py:
    // backward_dw after the dispatch), so they hide it too.
    const double budget = other.compute + (!fwd && p_.delay_wgrad ? own.wgrad : 0.0);
    return std::min(1.0, budget / own.ep);
  }

  // Per-stage F, B (input gradient) and W times and the p2p time the
  // zero-bubble scheduler orders the passes by (one chunk per rank).
  StageOpTimes stage_op_times() {
    StageOpTimes t;
    for (int s = 0; s < p_.pp; ++s) {
      const Chunk& ch = chunks_[static_cast<size_t>(s)][0];  // zero bubble: one chunk per rank
      int64_t f = 0, b = 0, w = 0;
      double held = 0, kept = 0;
      for (int i = ch.global_first; i < ch.global_first + ch.layers; ++i) {
        const LayerTimes& lt = sc_.times_of(i);
        f += lt.forward_ps;
        b += lt.backward_ps - lt.weight_grad_ps;
        w += lt.weight_grad_ps;
        held += sc_.cost_of(i).saved_bytes;
        kept += sc_.cost_of(i).weight_grad_saved_bytes;
      }
      if (s == 0) {
        f += emb_f_;
        b += emb_b_ - sc_.embedding_weight_grad_ps;
        w += sc_.embedding_weight_grad_ps;
      }
      if (s == p_.pp - 1) {
        f += out_f_;
        b += out_b_ - sc_.output_weight_grad_ps;
        w += sc_.output_weight_grad_ps;
      }
      // What a micro-batch holds from F to B and from B to W on this stage.
      if (s == 0) {
        held += emb_.saved_bytes;
        kept += emb_.weight_grad_saved_bytes;
      }
      if (s == p_.pp - 1) {
        held += outc_.saved_bytes;
        kept += outc_.weight_grad_saved_bytes;
      }
      t.activation.push_back(std::max(1.0, held));
      t.weight_kept.push_back(kept);
      // Durations must be positive; a pass of no work takes a picosecond.
      t.forward.push_back(static_cast<double>(std::max<int64_t>(1, f)));
      t.backward_input.push_back(static_cast<double>(std::max<int64_t>(1, b)));
      t.backward_weight.push_back(static_cast<double>(std::max<int64_t>(1, w)));
    }
    const int dst = physical_rank(L_, 1, 0, 0, 0);
    t.p2p = static_cast<double>(p2p_cost(physical_rank(L_, 0, 0, 0, 0), dst).cost.time.ps());
    t.weight_memory_share = layer_.saved_bytes > 0 ? layer_.weight_grad_saved_bytes / layer_.saved_bytes : 1.0;
    return t;
  }

  double extra_params(const Chunk& ch) const {
    return (ch.embedding ? emb_.params : 0.0) + (ch.output ? outc_.params : 0.0);
  }
  // The output layer's matrix when it is the embedding's (tied embeddings,
  // both on one stage: one parameter, one gradient; memory_model.cc
  // tied_copy), per TP rank; 0 otherwise.
  double tied_output_params() const {
    return m_.tied_embeddings && p_.pp == 1 ? static_cast<double>(m_.vocab) * static_cast<double>(m_.hidden) / p_.tp
                                            : 0.0;
  }

  // Work that ends a micro-batch's backward, after its last backward entry
  // on a stage (micro_batch_end_ps_, per stage and entry):
  // - ExecutionProfile::grad_accumulation_bytes_per_param: one pass
  //   accumulating the micro-batch's gradients, with
  //   grad_accumulation_kernels_per_tensor kernels per parameter tensor (a
  //   GPT layer's tensors: two norms and four linear layers, each a weight
  //   and, with biases, a bias);
  // - ExecutionProfile::offload_grad_copies_each_reduction: ZeRO-Offload's
  //   copies of the rank's gradient partition at each reduction, after every
  //   micro-batch (reduce_every_microbatch) or the last only
  //   (offload_grad_copy_time).
  void plan_microbatch_ends() {
    micro_batch_end_ps_.assign(static_cast<size_t>(p_.pp), {});
    const bool accumulate = prof_.grad_accumulation_bytes_per_param > 0;
    const bool offload_copies = prof_.offload_grad_copies_each_reduction && p_.offload != Offload::kNone;
    if (!accumulate && !offload_copies) return;
    const ComputeParams cpm = compute_params(c_, p_);
    const int per_layer = 6 * (m_.bias ? 2 : 1);
    const int64_t mbs = L_.microbatches;
    for (int s = 0; s < p_.pp; ++s) {
      const auto& entries = entries_[static_cast<size_t>(s)];
      const int layers = static_cast<size_t>(s) < L_.stage_layers.size() ? L_.stage_layers[static_cast<size_t>(s)]
                                                                         : static_cast<int>(m_.layers);
      const double params = stage_params_[static_cast<size_t>(s)];
      int64_t accumulate_ps = 0;
      if (accumulate) {
        const int kernels = prof_.grad_accumulation_kernels_per_tensor * per_layer * layers;
        accumulate_ps = (memory_time(cpm, prof_.grad_accumulation_bytes_per_param * params) +
                         cpm.kernel_overhead * std::max(0, kernels - 1))
                            .ps();
      }
      const double partition =
          optimizer_partition_params(L_, prof_, params, stage_expert_params_[static_cast<size_t>(s)]);
      std::map<int, size_t> last;
      for (size_t k = 0; k < entries.size(); ++k) {
        if (entries[k].kind != PipeOp::Kind::kForward) last[entries[k].mb] = k;
      }
      auto& ends = micro_batch_end_ps_[static_cast<size_t>(s)];
      ends.assign(entries.size(), 0);
      for (const auto& [mb, k] : last) {
        if (accumulate && !(mb == 0 && prof_.grad_accumulation_skips_first_microbatch)) ends[k] += accumulate_ps;
        if (offload_copies && (prof_.reduce_every_microbatch || mb == mbs - 1)) {
          ends[k] += offload_grad_copy_time(c_, p_, partition, mb, mbs).ps();
        }
      }
    }
  }

  void build_compute() {
    TaskGraph& g = out_.graph;
    plan_microbatch_ends();
    op_index_.assign(out_.ranks.size(), {});
    size_t longest = 0;
    for (size_t r = 0; r < out_.ranks.size(); ++r) {
      op_index_[r].assign(static_cast<size_t>(L_.microbatches) * v_ * 3 * 2, -1);
      longest = std::max(longest, entries_[static_cast<size_t>(out_.ranks[r].pp)].size());
    }
    // Position-major: the k-th pass of every rank is created before any
    // rank's (k+1)-th, so that ranks running the same pass at the same time
    // (every rank of a stage, in a full-rank step) have neighbouring task ids
    // and the engine walks their tasks in memory order.  Each program is the
    // same list in the same order either way.
    for (size_t k = 0; k < longest; ++k) {
      for (size_t r = 0; r < out_.ranks.size(); ++r) {
        const int s = out_.ranks[r].pp;
        const auto& entries = entries_[static_cast<size_t>(s)];
        if (k >= entries.size()) continue;
        auto& index = op_index_[r];
        const Entry& e = entries[k];
        const Chunk& ch = chunks_[static_cast<size_t>(s)][static_cast<size_t>(e.chunk)];
        const bool is_b = e.kind == PipeOp::Kind::kBackward;
        const bool is_w = e.kind == PipeOp::Kind::kWeight;
        const int first = e.layer < 0 ? 0 : e.layer;
        const int count = e.layer < 0 ? ch.layers : 1;
        const bool with_emb = ch.embedding && first == 0;
        const bool with_out = ch.output && first + count == ch.layers;
        // The entry's layers, dense or MoE, summed.
        int64_t layer_wgrad = 0, work = 0, tp = 0, ep = 0;
        double alloc = 0, kept = 0, transient_bytes = 0;
        CommTotals tp_link;  // the layers' TP collectives, run as a link task after the pass
        CommTotals cp_link;  // the layers' CP exchange, run as a link task beside the attention
        int64_t cp_exposed = 0, attention = 0;
        for (int i = ch.global_first + first; i < ch.global_first + first + count; ++i) {
          const LayerTimes& lt = sc_.times_of(i);
          const LayerCost& lc = sc_.cost_of(i);
          tp_link.add(is_b ? lt.tp_backward : lt.tp_forward);
          cp_link.add(is_b ? lt.cp_backward : lt.cp_forward);
          cp_exposed += is_b ? lt.cp_exposed_backward_ps : lt.cp_exposed_forward_ps;
          attention += is_b ? lt.attention_backward_ps : lt.attention_forward_ps;
          layer_wgrad += lt.weight_grad_ps;
          work += is_b ? lt.backward_ps : lt.forward_ps;
          tp += is_b ? lt.tp_comm_backward_ps : lt.tp_comm_forward_ps;
          ep += is_b ? lt.ep_comm_backward_ps : lt.ep_comm_forward_ps;
          alloc += lc.saved_bytes;
          kept += lc.weight_grad_saved_bytes;  // M_W, zero bubble
          transient_bytes = std::max(transient_bytes, lc.backward_transient_bytes);
        }
        // Where W passes exist (zero bubble), B is the backward without the
        // weight-gradient GEMMs and W is those GEMMs alone (no TP comm).
        const int64_t wgrad = split_ ? layer_wgrad + (with_emb ? sc_.embedding_weight_grad_ps : 0) +
                                           (with_out ? sc_.output_weight_grad_ps : 0)
                                     : 0;
        if (with_emb) {
          work += is_b ? emb_b_ : emb_f_;
          tp += is_b ? emb_tp_b_ : emb_tp_f_;
          tp_link.add(is_b ? sc_.embedding_tp_backward : sc_.embedding_tp_forward);
          alloc += emb_.saved_bytes;
          kept += emb_.weight_grad_saved_bytes;
        }
        // A framework that keeps a stage's output until its backward
        // (ExecutionProfile::keeps_stage_outputs) holds it from the chunk's
        // last forward.
        if (keep_outputs_ && !ch.output && first + count == ch.layers && !split_) alloc += stage_output_bytes_;
        if (with_out) {
          work += is_b ? out_b_ : out_f_;
          tp += is_b ? out_tp_b_ : out_tp_f_;
          tp_link.add(is_b ? sc_.output_tp_backward : sc_.output_tp_forward);
          ep += is_b ? out_ep_b_ : out_ep_f_;
          alloc += outc_.saved_bytes;
          kept += outc_.weight_grad_saved_bytes;
        }
        if (is_b) work -= wgrad;
        if (e.segmented) {
          // Its part of the layer pass; the parts of one pass sum to the whole.
          auto part = [&](double x) {
            return static_cast<int64_t>(std::llround(x * e.share_end) - std::llround(x * e.share_begin));
          };
          work = part(static_cast<double>(work));
          tp = part(static_cast<double>(tp));
          ep = part(static_cast<double>(ep));
          attention = part(static_cast<double>(attention));
          alloc = static_cast<double>(part(alloc));
          kept = static_cast<double>(part(kept));
        }
        if (!micro_batch_end_ps_[static_cast<size_t>(s)].empty()) work += micro_batch_end_ps_[static_cast<size_t>(s)][k];
        if (e.ep_hidden_share > 0 && !is_w) {
          // The hidden all-to-all is no longer exposed, but its kernels hold
          // their SMs while the partner pass computes on the rest: that
          // compute is slower by the hidden time times their share
          // (StepCosts::ep_comm_sm_share).
          const int64_t hidden = static_cast<int64_t>(static_cast<double>(ep) * e.ep_hidden_share);
          const int64_t contention = static_cast<int64_t>(static_cast<double>(hidden) * sc_.ep_comm_sm_share);
          work -= hidden - contention;
          ep -= hidden;
        }
        if (is_w) {
          work = wgrad;
          tp = 0;
          ep = 0;
          tp_link = CommTotals{};
          cp_link = CommTotals{};
        }
        // The CP exchange (ring attention's K/V steps on their own stream)
        // leaves the compute task for a link task on the CP group's port that
        // starts with the pass and moves its bytes beside the attention:
        // its latency holds it for the pass's other work (what runs before
        // and after the attention, taken first), so uncontended the next
        // pass waits max(0, exchange - attention), as before, and contended
        // the exchange shares the port with DP and PP traffic.
        if (cp_link.count > 0) {
          work -= cp_exposed;
          tp -= cp_exposed;
        }
        // The layers' TP collectives leave the compute task for a link task
        // on this rank's TP port, right after it (serial: no framework
        // profile here overlaps them with the GEMMs), so that they share
        // the port's bandwidth with DP and PP traffic, the embedding's and
        // the output layer's with the layers'; what is left in tp is the
        // exposed CP exchange.  Where nothing else can load the port the
        // same time stays in the compute task (fewer tasks, same step).
        int64_t tp_link_ps = 0;
        if (tp_link.count > 0 && tp_port_shared(e)) {
          tp_link_ps = std::min(tp, tp_link.latency_ps + static_cast<int64_t>(std::llround(tp_link.transfer_s * 1e12)));
          work -= tp_link_ps;
          tp -= tp_link_ps;
        }
        const TaskLabel label = is_w ? TaskLabel::kWeightGrad : is_b ? TaskLabel::kBackward : TaskLabel::kForward;
        const int32_t previous = g.program[r].empty() ? -1 : g.program[r].back();
        int32_t id = g.add_compute(static_cast<int32_t>(r), std::max<int64_t>(0, work), Category::kCompute, label);
        int32_t cp_task = -1;
        if (cp_link.count > 0) {
          const int64_t before_attention = std::max<int64_t>(0, work - attention);
          cp_task = g.add_comm(cp_channel(r), before_attention + cp_link.latency_ps, cp_link.wire_bytes,
                               cp_link.rate(), Category::kTpComm, TaskLabel::kCpExchange, {}, cp_links(r));
          if (previous >= 0) g.add_dep(previous, cp_task);
          cp_companions_.emplace_back(id, cp_task);
          g.task(cp_task).rank = static_cast<int32_t>(r);  // for the trace: it has no members
          g.task(cp_task).microbatch = e.mb;
          g.task(cp_task).chunk = static_cast<int16_t>(e.chunk);
          g.task(cp_task).layer = static_cast<int16_t>(e.layer);
          if (tp_after_.size() <= static_cast<size_t>(id)) tp_after_.resize(static_cast<size_t>(id) + 1, -1);
          tp_after_[static_cast<size_t>(id)] = cp_task;
        }
        if (tp_link_ps > 0) {
          const int32_t tc = g.add_comm(tp_channel(r), tp_link.latency_ps, tp_link.wire_bytes, tp_link.rate(),
                                        Category::kTpComm, TaskLabel::kTpCollective, {static_cast<int32_t>(r)},
                                        tp_links(r));
          g.add_dep(id, tc);
          if (cp_task >= 0) g.add_dep(cp_task, tc);  // the pass's output waits for its attention's exchange
          if (tp_after_.size() <= static_cast<size_t>(tc)) tp_after_.resize(static_cast<size_t>(tc) + 1, -1);
          tp_after_[static_cast<size_t>(id)] = tc;
          g.task(tc).microbatch = e.mb;
          g.task(tc).chunk = static_cast<int16_t>(e.chunk);
          g.task(tc).layer = static_cast<int16_t>(e.layer);
        }
        Task& t = g.task(id);
        t.tp_comm_ps = tp;
        t.ep_comm_ps = ep;
        t.microbatch = e.mb;
        t.chunk = static_cast<int16_t>(e.chunk);
        t.layer = static_cast<int16_t>(e.layer);
        t.layer_count = static_cast<int16_t>(count);
        t.extras = static_cast<uint8_t>((with_emb ? 1 : 0) | (with_out ? 2 : 0));
        if (e.kind == PipeOp::Kind::kForward) {
          t.mem_alloc = static_cast<int64_t>(alloc);
        } else if (is_w) {
          t.mem_free = static_cast<int64_t>(kept);
        } else {
          // Recompute re-materialises one layer at a time in backward; the
          // loss holds its gradient buffers as the backward starts
          // (memory_model.h: the larger of the two).  Held while the pass
          // runs, split or not.  A split B keeps M_W (linear inputs and
          // output gradients) for its W; an unsplit one frees all it held.
          if (with_out) transient_bytes = std::max(transient_bytes, outc_.backward_transient_bytes);
          const int64_t transient = static_cast<int64_t>(transient_bytes);
          const double held_after = split_ ? kept : 0.0;
          t.mem_alloc = transient + static_cast<int64_t>(std::max(0.0, held_after - alloc));
          t.mem_free = transient + static_cast<int64_t>(std::max(0.0, alloc - held_after));
        }
        // Record first and last task of each (mb, chunk, kind).
        const size_t key = op_key(e.mb, e.chunk, e.kind);
        if (index[key] < 0) index[key] = id;
        index[key + 1] = id;
      }
    }
    for (size_t r = 0; r < out_.ranks.size(); ++r) {
      const int s = out_.ranks[r].pp;
      // The optimizer step ends the program.
      const double params = stage_params_[static_cast<size_t>(s)];
      const int64_t opt_ps = optimizer_ps(c_, L_, params, stage_expert_params_[static_cast<size_t>(s)]);
      int32_t opt = g.add_compute(static_cast<int32_t>(r), opt_ps, Category::kOptimizer, TaskLabel::kOptimizer);
      optimizer_task_.push_back(opt);
      optimizer_inputs_.emplace_back();
    }
    // A pass's TP collectives hold the rank's next compute (the layer's
    // output, or its input gradient, is ready once they end).
    for (const auto& prog : g.program) {
      for (size_t k = 0; k + 1 < prog.size(); ++k) {
        const int32_t tc = tp_after(prog[k]);
        if (tc >= 0) g.add_dep(tc, prog[k + 1]);
      }
    }
  }

  // ---- async data parallel (parameter servers) ----
  void build_async() {
    TaskGraph& g = out_.graph;
    const int workers = static_cast<int>(out_.ranks.size());
    const int servers = p_.ps_servers > 0 ? p_.ps_servers : std::max(1, L_.nodes);
    const int iterations = kAsyncIterations;
    out_.async_iterations = iterations;
    const double params = total_params(m_);
    const LayerTimes& lt = out_.layer;
    const int64_t iteration_ps =
        L_.microbatches * (m_.layers * (lt.forward_ps + lt.backward_ps) + emb_f_ + emb_b_ + out_f_ + out_b_);
    // Each GPU of a worker pushes its TP shard of the gradients and pulls its
    // shard of the weights; the servers' NICs are shared by every worker.
    const double push_bytes = params / p_.tp * reduce_grad_bytes_;
    const double pull_bytes = params / p_.tp * weight_bytes(p_.precision);
    const bool net = lp_.nics_per_node > 0;
    const double port = net ? lp_.nic_bandwidth.bytes_per_s() * lp_.inter_efficiency * lp_.nics_per_node / c_.gpus_per_node
                            : lp_.intra_bandwidth.bytes_per_s() * lp_.intra_efficiency;
    const double server_bw = net ? servers * lp_.nics_per_node * lp_.nic_bandwidth.bytes_per_s() * lp_.inter_efficiency
                                 : lp_.intra_bandwidth.bytes_per_s() * lp_.intra_efficiency;
    const int32_t ps_in = out_.network.add_link(server_bw);
    const int32_t ps_out = out_.network.add_link(server_bw);
    const Duration latency = net ? c_.inter_node->latency : c_.intra_node.latency;
    // Servers apply Adam on their share in parallel; updates are serialised
    // in arrival order.
    const int64_t update_ps = Duration::seconds(params / servers / kCpuAdamParamsPerSPerNode).ps();
    const int32_t server_queue = g.add_channel(true);
    for (int w = 0; w < workers; ++w) {
      const int32_t push_ch = g.add_channel(), pull_ch = g.add_channel();
      int32_t prev_pull = -1;
      const int32_t own = static_cast<size_t>(w) < nic_link_.size() && net ? nic_link_[static_cast<size_t>(w)]
                                                                            : intra_link_[static_cast<size_t>(w)];
      for (int it = 0; it < iterations; ++it) {
        int32_t c = g.add_compute(w, iteration_ps, Category::kCompute, TaskLabel::kIteration);
        g.task(c).microbatch = it;
        g.task(c).tp_comm_ps = L_.microbatches * m_.layers * (lt.tp_comm_forward_ps + lt.tp_comm_backward_ps);
        if (prev_pull >= 0) g.add_dep(prev_pull, c);
        int32_t push = g.add_comm(push_ch, latency.ps(), push_bytes, port, Category::kDpComm, TaskLabel::kPsPush, {w},
                                  {FlowLink{own, 1.0f}, FlowLink{ps_in, static_cast<float>(p_.tp)}});
        g.add_dep(c, push);
        int32_t upd = g.add_comm(server_queue, update_ps, 0, 0, Category::kDpComm, TaskLabel::kPsUpdate, {}, {});
        g.add_dep(push, upd);
        int32_t pull = g.add_comm(pull_ch, latency.ps(), pull_bytes, port, Category::kDpComm, TaskLabel::kPsPull, {w},
                                  {FlowLink{own, 1.0f}, FlowLink{ps_out, static_cast<float>(p_.tp)}});
        g.add_dep(upd, pull);
        g.task(push).microbatch = g.task(upd).microbatch = g.task(pull).microbatch = it;
        out_.async.push_back(AsyncIteration{w, prev_pull, upd});
        prev_pull = pull;
      }
    }
  }

  size_t op_key(int mb, int chunk, PipeOp::Kind kind) const {
    return ((static_cast<size_t>(mb) * v_ + static_cast<size_t>(chunk)) * 3 + static_cast<size_t>(kind)) * 2;
  }

  int32_t task_of(size_t r, int mb, int chunk, PipeOp::Kind kind, bool last) const {
    return op_index_[r][op_key(mb, chunk, kind) + (last ? 1 : 0)];
  }

  // ---- routes ----
  // The path between two GPUs in the cluster's graph (BFS), by class
  // (RouteClasses).
  Route route_between(int src, int dst) {
    if (!routes_) routes_ = RouteClasses::of(c_, L_.gpus);
    return routes_->route(src, dst);
  }

  // ---- pipeline point-to-point ----
  struct P2pCost {
    Route route;
    CollectiveCost cost;
  };

  // One micro-batch's activations (or their gradients) between two GPUs.
  P2pCost p2p_cost(int src_global, int dst_global) {
    const double bytes = static_cast<double>(p_.mbs) * static_cast<double>(p_.seq) / p_.cp *
                         static_cast<double>(m_.hidden) * activation_bytes(p_.precision) / p_.tp;
    P2pCost pc;
    pc.route = route_between(src_global, dst_global);
    GroupPlacement gp = group_placement(2, pc.route.same_node ? 2 : 1, c_);
    gp.crosses_leaf = pc.route.crosses_leaf;
    pc.cost = collective_cost(Collective::kSendRecv, static_cast<Bytes>(bytes), gp, lp_);
    return pc;
  }

  void build_p2p() {
    if (p_.pp == 1) return;
    TaskGraph& g = out_.graph;
    // One send channel per simulated rank (Megatron's p2p stream).
    first_p2p_channel_ = g.channels;
    for (size_t r = 0; r < out_.ranks.size(); ++r) g.add_channel();
    next_in_program_.assign(static_cast<size_t>(g.size()), -1);
    for (const auto& prog : g.program) {
      for (size_t k = 0; k + 1 < prog.size(); ++k) next_in_program_[static_cast<size_t>(prog[k])] = prog[k + 1];
    }
    const int stages = p_.pp * v_;
    for (size_t r = 0; r < out_.ranks.size(); ++r) {
      const RankCoord& rc = out_.ranks[r];
      for (const PipeOp& op : schedule_[static_cast<size_t>(rc.pp)]) {
        if (op.kind == PipeOp::Kind::kWeight) continue;  // W sends nothing
        const int vs = virtual_stage(p_.schedule, p_.pp, rc.pp, op.chunk);
        const bool fwd = op.kind == PipeOp::Kind::kForward;
        const int to = fwd ? vs + 1 : vs - 1;
        if (to < 0 || to >= stages) continue;
        const RankChunk to_rc = rank_chunk_of(p_.schedule, p_.pp, to);
        const int to_stage = to_rc.rank, to_chunk = to_rc.chunk;
        // The turn of a dualpipe plan's V crosses to the mirrored replica
        // (physical ranks pp/2-1 and pp/2): the same micro-batch index there
        // continues this one (execution_layout).  Simulating one rank per
        // stage, the mirror is not simulated and runs in step with this rank,
        // so the transfer lands on this rank's own next stage.
        const bool mirror_turn = to_stage == rc.pp && L_.mirrored_pp > 0;
        const int to_dp = mirror_turn ? (rc.dp + L_.mirrored_dp) % p_.dp : rc.dp;
        const size_t dst = static_cast<size_t>(sim_index(to_stage, to_dp, rc.cp, rc.tp));
        const int32_t producer = task_of(r, op.microbatch, op.chunk, op.kind, true);
        const int32_t produced = tp_after(producer) >= 0 ? tp_after(producer) : producer;
        if (to_stage == rc.pp && !mirror_turn) {
          // The turn of zb-v's V: both stages on this rank, the activation
          // (or its gradient) handed over in memory, no transfer.
          g.add_dep(produced, task_of(dst, op.microbatch, to_chunk, op.kind, false));
          continue;
        }
        const int dst_global = physical_rank(L_, to_stage, to_dp, rc.cp, rc.tp);
        const P2pCost pc = p2p_cost(rc.global, dst_global);
        const Route& route = pc.route;
        const CollectiveCost& cost = pc.cost;
        std::vector<FlowLink> links;
        int32_t link = route.same_node ? intra_link_[r] : nic_link_[r];
        if (link >= 0) links.push_back(FlowLink{link, 1.0f});
        int32_t id = g.add_comm(first_p2p_channel_ + static_cast<int32_t>(r), cost.latency.ps(),
                                cost.wire_bytes_per_rank, cost.bus_bandwidth.bytes_per_s(), Category::kPpComm,
                                fwd ? TaskLabel::kSendForward : TaskLabel::kSendBackward,
                                {static_cast<int32_t>(r)}, links);
        g.task(id).microbatch = op.microbatch;
        g.task(id).chunk = static_cast<int16_t>(op.chunk);
        g.add_dep(produced, id);
        if (produced != producer) g.add_dep(producer, id);  // a CP exchange may end before its pass
        const int32_t receiver = task_of(dst, op.microbatch, to_chunk, op.kind, false);
        g.add_dep(id, receiver);
        if (fwd) forward_recv_[receiver] = id;
        // Megatron's non-interleaved schedules send and receive with blocking
        // batched isend/irecv + wait (send_forward_recv_backward): the sender's
        // next compute waits for the transfer.  The interleaved schedule
        // overlaps p2p with compute (--overlap-p2p-comm), and so do the Zero
        // Bubble schedules (their runtime posts sends and receives ahead and
        // waits only when the data is needed; Qi et al. Sec. 4).
        const bool blocking = opt_.p2p == LoweringOptions::P2p::kBlocking ||
                              (opt_.p2p == LoweringOptions::P2p::kBySchedule &&
                               (p_.schedule != Schedule::kInterleaved || prof_.interleaved_p2p_blocks) && !split_);
        if (blocking) {
          const int32_t next = next_in_program_[static_cast<size_t>(producer)];
          if (next >= 0) g.add_dep(id, next);
        }
      }
    }
  }

  // A blocking DP collective holds each member's compute stream: the member's
  // next compute after the collective's last member predecessor waits for it.
  void block_on_dp() {
    if (blocking_comm_.empty()) return;
    TaskGraph& g = out_.graph;
    if (next_in_program_.size() != static_cast<size_t>(g.size())) {
      next_in_program_.assign(static_cast<size_t>(g.size()), -1);
      for (const auto& prog : g.program) {
        for (size_t k = 0; k + 1 < prog.size(); ++k) next_in_program_[static_cast<size_t>(prog[k])] = prog[k + 1];
      }
    }
    for (int32_t id : blocking_comm_) {
      for (int32_t member : dp_member_preds_[id]) {
        const int32_t next = next_in_program_[static_cast<size_t>(member)];
        if (next >= 0) g.add_dep(id, next);
      }
    }
  }

  // ---- gradient clipping ----
  // Before the update every framework clips by the global gradient norm,
  // and the norm of a model split over tensor and pipeline ranks is one
  // all-reduce over them (Megatron clip_grad_norm_fp32 over the model-
  // parallel group, --clip-grad 1.0 by default; DeepSpeed's clip_grad_norm_
  // through its mpu; torchtitan's clip_grad_norm_ on DTensors over the
  // mesh).  So no stage updates before the last stage has its gradients:
  // one sync task per replica (ranks of one dp and cp index), after every
  // member's gradients are final, before every member's optimizer.  The
  // Zero Bubble schedules validate after the step instead (optimizer
  // post-validation, Qi et al. 2024 Sec. 4), so they have none; PyTorch's
  // ZB-V runs under torchtitan's ordinary clip_grad_norm_, so it has one.
  void build_grad_norm_sync() {
    const int n = p_.tp * p_.pp;
    if (n <= 1 || zero_bubble_automatic(p_.schedule)) return;
    TaskGraph& g = out_.graph;
    std::map<int, std::vector<int32_t>> replicas;  // dp*cp index -> simulated ranks
    for (size_t r = 0; r < out_.ranks.size(); ++r) {
      const RankCoord& rc = out_.ranks[r];
      replicas[rc.dp * p_.cp + rc.cp].push_back(static_cast<int32_t>(r));
    }
    // The group: the tp ranks of each stage, stages tp*cp*dp ranks apart
    // (a node holds several stages when a stage's block is smaller).
    const GroupPlacement gp = strided_group_placement(n, p_.tp * p_.cp * p_.dp, c_, p_.tp);
    const CollectiveCost cost = collective_cost(Collective::kAllReduce, 4, gp, lp_);
    for (const auto& [idx, members] : replicas) {
      (void)idx;
      const int32_t sync = g.add_comm(g.add_channel(), cost.latency.ps(), 0, 0, Category::kDpComm,
                                      TaskLabel::kGradNormSync, members, {});
      for (int32_t mr : members) {
        const auto& prog = g.program[static_cast<size_t>(mr)];
        if (prog.size() >= 2) g.add_dep(prog[prog.size() - 2], sync);
        for (int32_t in : optimizer_inputs_[static_cast<size_t>(mr)]) g.add_dep(in, sync);
        g.add_dep(sync, optimizer_task_[static_cast<size_t>(mr)]);
      }
    }
  }

  // ---- tied embeddings across the pipeline ----
  // With tied embeddings and the embedding and output layer on different
  // pipeline ranks, each holds a copy of the matrix, and every step the
  // copies' gradients (vocab/tp x hidden) are all-reduced between the two
  // ranks before the update: Megatron-LM 2021-22 train_step ("All-reduce
  // word_embeddings' grad across first and last stages", the embedding
  // group), Megatron-Core finalize_model_grads (_allreduce_word_embedding_grads,
  // after the data-parallel reduction), DeepSpeed's pipeline engine
  // (_exec_reduce_tied_grads).  A rank that holds both ends (V-shaped
  // schedules) has one copy.  Waiting at it for the other stage is bubble.
  // Not for Zero Bubble's automatic schedules, whose steps overlap across
  // stages (optimizer post-validation, as build_grad_norm_sync): the
  // authors' runtime issued this all-reduce asynchronously while the last
  // weight-gradient passes ran ("so that the rank 0 won't be blocked",
  // zbpp_utils.py WeightGradStore.clear, kept commented in their 2024 port),
  // and their ZB-2p/1F1B ratio (Qi et al. Table 3) holds without the wait.
  void build_embedding_sync() {
    if (!m_.tied_embeddings || p_.pp <= 1 || p_.dp_mode != DpMode::kSync) return;
    if (zero_bubble_automatic(p_.schedule)) return;
    for (const Chunk& ch : chunks_[0]) {
      if (ch.output) return;
    }
    TaskGraph& g = out_.graph;
    const int last = static_cast<int>(chunks_.size()) - 1;
    std::map<std::tuple<int, int, int>, std::pair<int32_t, int32_t>> ends;  // (dp, cp, tp) -> (first, last stage)
    for (size_t r = 0; r < out_.ranks.size(); ++r) {
      const RankCoord& rc = out_.ranks[r];
      if (rc.pp != 0 && rc.pp != last) continue;
      auto& pair = ends.try_emplace(std::make_tuple(rc.dp, rc.cp, rc.tp), std::make_pair(-1, -1)).first->second;
      (rc.pp == 0 ? pair.first : pair.second) = static_cast<int32_t>(r);
    }
    const double bytes = static_cast<double>(m_.vocab) * static_cast<double>(m_.hidden) / p_.tp * reduce_grad_bytes_;
    // Global ranks run tp fastest, then cp, dp, pp: the two ends share a
    // node only when a whole pipeline fits on one.  (Not dp_placement: its
    // ranks-per-node of an evenly strided group takes the ends of an 8-rank
    // pipeline on one 8-GPU node, 7 apart, for two nodes.)
    const bool one_node = static_cast<int64_t>(p_.tp) * p_.cp * p_.dp * p_.pp <= c_.gpus_per_node;
    const GroupPlacement gp = group_placement(2, one_node ? 2 : 1, c_);
    const CollectiveCost cost = collective_cost(Collective::kAllReduce, static_cast<Bytes>(bytes), gp, lp_);
    for (const auto& [coord, pair] : ends) {
      (void)coord;
      if (pair.first < 0 || pair.second < 0) continue;
      const std::vector<int32_t> members = {pair.first, pair.second};
      const int32_t sync = add_group_task(g.add_channel(), TaskLabel::kEmbeddingGradSync, cost, gp, members);
      for (int32_t mr : members) {
        const auto& prog = g.program[static_cast<size_t>(mr)];
        if (prog.size() >= 2) g.add_dep(prog[prog.size() - 2], sync);
        for (int32_t in : optimizer_inputs_[static_cast<size_t>(mr)]) g.add_dep(in, sync);
        g.add_dep(sync, optimizer_task_[static_cast<size_t>(mr)]);
      }
    }
  }

  // ---- parameter offload (ZeRO-Infinity, FSDP CPU offload) ----
  // The number of gathers a layer needs before entry e: DeepSpeed with full
  // recompute gathers twice for the backward (framework/framework.h).
  int gathers_before(const Entry& e) const {
    if (e.kind == PipeOp::Kind::kForward) return 1;
    return prof_.regather_for_recompute && p_.recompute == Recompute::kFull ? 2 : 1;
  }

  // With parameters offloaded, each rank's shard of a layer lives in host
  // memory and is copied over the GPU's PCIe link before every gather of
  // that layer (DeepSpeed ZeRO-Infinity offload_param; FSDP CPUOffload),
  // with the gathers' one layer of prefetch; with one rank the shard is the
  // whole layer and the copy replaces the gather.
  void build_param_offload() {
    if (p_.offload != Offload::kParams) return;
    TaskGraph& g = out_.graph;
    const double shard_bytes = static_cast<double>(weight_bytes(p_.precision)) / std::max(1, L_.shard_degree);
    const double pcie = c_.host.bandwidth_per_gpu.bytes_per_s();
    h2d_.assign(out_.ranks.size(), {});
    for (size_t r = 0; r < out_.ranks.size(); ++r) {
      const int32_t link = out_.network.add_link(pcie);
      const int32_t channel = g.add_channel();
      const auto& entries = entries_[static_cast<size_t>(out_.ranks[r].pp)];
      auto& mine = h2d_[r];
      mine.assign(entries.size(), {});
      for (size_t k = 0; k < entries.size(); ++k) {
        const Entry& e = entries[k];
        if (e.gather_params <= 0) continue;
        for (int n = 0; n < gathers_before(e); ++n) {
          const int32_t id = g.add_comm(channel, 0, e.gather_params * shard_bytes, pcie, Category::kDpComm,
                                        TaskLabel::kHostToDevice, {static_cast<int32_t>(r)}, {FlowLink{link, 1.0f}});
          const int32_t task = g.program[r][k];
          if (k >= 2) g.add_dep(g.program[r][k - 2], id);
          g.add_dep(id, task);
          mine[k].push_back(id);
        }
      }
    }
  }

  // ZeRO-3 with the gradients on the host (ExecutionProfile::
  // offload_grads_to_host: DeepSpeed stage 3 with offload_optimizer, FSDP2's
  // CPUOffloadPolicy): every backward pass's shard of the gradients it
  // finalises goes down the GPU's PCIe link in the gradient dtype, beside
  // the compute (DeepSpeed's reduce-and-partition stream, FSDP2's
  // reduce-scatter stream), and the optimizer step waits for all of them.
  // A copy starts once the pass's gradient reduction ends (DeepSpeed's
  // partition_grads after the bucket's reduce-scatter; FSDP2's post_reduce
  // copies the new sharded gradient to the CPU on the reduce-scatter
  // stream), or once the pass ends where nothing reduces it (a single
  // rank).  With offload_grad_round_trip the
  // running sum first comes up its host-to-device link, from the step's
  // second micro-batch on (the add on the device is left out).  Each
  // direction has its own link (PCIe is full duplex).
  void build_grad_offload() {
    if (p_.zero != 3 || p_.offload == Offload::kNone || !prof_.offload_grads_to_host) return;
    TaskGraph& g = out_.graph;
    const double pcie = c_.host.bandwidth_per_gpu.bytes_per_s();
    const double shard = std::max(1, L_.shard_degree), expert_shard = std::max(1, L_.expert_dp);
    for (size_t r = 0; r < out_.ranks.size(); ++r) {
      const int32_t link = out_.network.add_link(pcie);
      const int32_t up_link = prof_.offload_grad_round_trip ? out_.network.add_link(pcie) : -1;
      const int32_t channel = g.add_channel();
      const auto& entries = entries_[static_cast<size_t>(out_.ranks[r].pp)];
      for (size_t k = 0; k < entries.size(); ++k) {
        const Entry& e = entries[k];
        if (e.grad_params <= 0) continue;
        const double params =
            (e.grad_params - e.grad_expert_params) / shard + e.grad_expert_params / expert_shard;
        const double bytes = params * layer_grad_bytes_;
        int32_t up = -1;
        if (up_link >= 0 && e.mb > 0) {
          up = g.add_comm(channel, 0, bytes, pcie, Category::kDpComm, TaskLabel::kHostToDevice,
                          {static_cast<int32_t>(r)}, {FlowLink{up_link, 1.0f}});
          g.add_dep(g.program[r][k], up);
          g.task(up).microbatch = e.mb;
          g.task(up).layer = static_cast<int16_t>(e.layer);
        }
        const int32_t id = g.add_comm(channel, 0, bytes, pcie, Category::kDpComm, TaskLabel::kDeviceToHost,
                                      {static_cast<int32_t>(r)}, {FlowLink{link, 1.0f}});
        g.add_dep(up >= 0 ? up : g.program[r][k], id);
        if (r < reduced_.size() && k < reduced_[r].size()) {
          for (int32_t tail : reduced_[r][k]) g.add_dep(tail, id);
        }
        g.add_dep(id, optimizer_task_[r]);
        g.task(id).microbatch = e.mb;
        g.task(id).layer = static_cast<int16_t>(e.layer);
      }
    }
  }

  // ---- data parallel ----
  std::vector<int32_t> group_members(const RankCoord& leader, bool shard_group_only) const {
    std::vector<int32_t> members;
    if (opt_.representative) return {static_cast<int32_t>(sim_index(leader.pp, 0, 0, 0))};
    const int size = shard_group_only ? L_.shard_degree : p_.dp * p_.cp;
    const int base = leader.dp * p_.cp + leader.cp;
    for (int k = base; k < base + size; ++k) {
      members.push_back(sim_index(leader.pp, k / p_.cp, k % p_.cp, leader.tp));
    }
    return members;
  }

  // Placement of a group of `size` ranks whose global ranks are `stride`
  // apart (a DP group: stride tp; hybrid-shard replicas: tp * shard).
  GroupPlacement dp_placement(int size, int stride) const {
    const GroupPlacement even = strided_group_placement(size, stride, c_);
    // A dualpipe plan's replicas sit on two physical pipeline ranks, r and
    // pp-1-r (execution_layout): half the group on each, on other nodes
    // unless the whole pipeline fits one (size / 2 divides size, as does
    // the even placement's count, so the smaller of the two does).
    if (L_.mirrored_pp > 0 && size % 2 == 0 && int64_t{size / 2} * stride < c_.gpus_per_node &&
        int64_t{L_.gpus} > c_.gpus_per_node && size / 2 < even.ranks_per_node) {
      return group_placement(size, size / 2, c_);
    }
    return even;
  }

  // The parameters one ZeRO-3 gather of `params` moves per collective: all
  // of them at once, or (gather_per_module) module by module, consecutive
  // modules sharing a collective until it holds gather_bucket_params.  The
  // layer's small parameters (biases, norms) stay whole and are not
  // gathered; `params` beyond the layer's own (the embedding or output
  // layer of the chunk's first or last layer) is one more module.
  std::vector<double> gather_pieces(double params, double layer_params) const {
    if (layer_modules_.empty()) return {params};
    std::vector<double> modules;
    if (params > layer_params) modules.push_back(params - layer_params);
    modules.insert(modules.end(), layer_modules_.begin(), layer_modules_.end());
    std::vector<double> pieces;
    double open = 0;
    for (double m : modules) {
      open += m;
      if (open >= prof_.gather_bucket_params) {
        pieces.push_back(open);
        open = 0;
      }
    }
    if (open > 0) pieces.push_back(open);
    return pieces;
  }

  // The cost of one collective of `bytes` over a group of `size` ranks
  // `stride` global ranks apart.  A step issues the same few collectives
  // thousands of times (ZeRO-3: every layer of every micro-batch): each size
  // and group is costed once.
  const CollectiveCost& group_cost(Collective kind, double bytes, int size, int stride, const GroupPlacement& gp) {
    const Bytes size_bytes = static_cast<Bytes>(std::max(1.0, bytes));
    const auto key = std::make_tuple(static_cast<int>(kind), size_bytes, size, stride);
    auto hit = group_costs_.find(key);
    if (hit == group_costs_.end()) hit = group_costs_.emplace(key, collective_cost(kind, size_bytes, gp, lp_)).first;
    return hit->second;
  }

  // The per-member work of `collectives` ZeRO-3 collectives over `size`
  // ranks issued through a list API (ExecutionProfile::collective_calls_per_member).
  // It is host work of its own when the framework synchronizes the device
  // around ZeRO-3's collectives (synced_host_latency), not the collective's.
  Duration list_api_latency(TaskLabel label, size_t collectives, int size) const {
    const bool zero3 = label == TaskLabel::kParamAllGather || (label == TaskLabel::kDpReduceScatter && p_.zero == 3);
    return zero3 && !prof_.gather_syncs_device ? member_calls(collectives, size) : Duration();
  }
  Duration synced_host_latency(size_t collectives, int size) const {
    return prof_.gather_syncs_device ? member_calls(collectives, size) : Duration();
  }
  Duration member_calls(size_t collectives, int size) const {
    if (prof_.collective_calls_per_member <= 0) return Duration();
    return member_call_.scaled(prof_.collective_calls_per_member * static_cast<double>(size) *
                               static_cast<double>(collectives));
  }

  // `stride`: global ranks between consecutive members (0: tp, a DP group).
  int32_t add_group_comm(int32_t channel, Collective kind, TaskLabel label, double bytes, int size,
                         const std::vector<int32_t>& members, int stride = 0) {
    if (stride <= 0) stride = p_.tp;
    const GroupPlacement gp = dp_placement(size, stride);
    CollectiveCost cost = group_cost(kind, bytes, size, stride, gp);
    cost.latency += list_api_latency(label, 1, size);
    return add_group_task(channel, label, cost, gp, members);
  }

  // One task for collectives issued back to back on one stream (`pieces`,
  // bytes each): their latencies add, and so do their transfer times.
  int32_t add_group_comm(int32_t channel, Collective kind, TaskLabel label, const std::vector<double>& pieces,
                         int size, const std::vector<int32_t>& members, int stride = 0) {
    if (pieces.size() == 1) return add_group_comm(channel, kind, label, pieces.front(), size, members, stride);
    if (stride <= 0) stride = p_.tp;
    const GroupPlacement gp = dp_placement(size, stride);
    CollectiveCost cost;
    double transfer_s = 0;
    for (double bytes : pieces) {
      const CollectiveCost& piece = group_cost(kind, bytes, size, stride, gp);
      cost.latency += piece.latency;
      cost.wire_bytes_per_rank += piece.wire_bytes_per_rank;
      if (piece.wire_bytes_per_rank > 0) transfer_s += piece.wire_bytes_per_rank / piece.bus_bandwidth.bytes_per_s();
      cost.bus_bandwidth = piece.bus_bandwidth;
    }
    if (transfer_s > 0) cost.bus_bandwidth = Bandwidth::bytes_per_s(cost.wire_bytes_per_rank / transfer_s);
    cost.latency += list_api_latency(label, pieces.size(), size);
    return add_group_task(channel, label, cost, gp, members);
  }

  // The comm task of a DP-side collective: its members' intra-node links
  // and, across nodes, their share of the NICs.
  int32_t add_group_task(int32_t channel, TaskLabel label, const CollectiveCost& cost, const GroupPlacement& gp,
                         const std::vector<int32_t>& members) {
    std::vector<FlowLink> links;
    for (int32_t mr : members) {
      if (gp.ranks_per_node > 1) links.push_back(FlowLink{intra_link_[static_cast<size_t>(mr)], 1.0f});
      if (gp.nodes > 1 && nic_link_[static_cast<size_t>(mr)] >= 0) {
        links.push_back(FlowLink{nic_link_[static_cast<size_t>(mr)], 1.0f / static_cast<float>(gp.ranks_per_node)});
      }
    }
    const int32_t id = out_.graph.add_comm(channel, cost.latency.ps(), cost.wire_bytes_per_rank,
                                           cost.bus_bandwidth.bytes_per_s(), Category::kDpComm, label, members, links);
    if (opt_.blocking_dp) blocking_comm_.push_back(id);
    return id;
  }

  void build_dp() {
    reduced_.assign(out_.ranks.size(), {});
    if (p_.dp_mode != DpMode::kSync) return;
    build_dp_groups(false);
    // MoE: the routed experts' gradients are reduced over the expert
    // data-parallel group (tp*cp*dp / (ep*etp) ranks, ep*etp apart).
    if (m_.has_moe && L_.expert_dp > 1) build_dp_groups(true);
  }

  // Members (simulated ranks) of the expert data-parallel group of `leader`:
  // the ranks of its stage whose index within the stage is congruent modulo
  // ep*etp (Megatron's expert rank order tp-ep-dp-pp).
  std::vector<int32_t> expert_group_members(const RankCoord& leader) const {
    if (opt_.representative) return {static_cast<int32_t>(sim_index(leader.pp, 0, 0, 0))};
    const int block = p_.ep * p_.etp;
    const ExpertFolding f = expert_folding(p_, leader.tp, leader.cp, leader.dp);
    std::vector<int32_t> members;
    for (int k = 0; k < L_.expert_dp; ++k) {
      const StageCoord sc = stage_coord(p_, f.edp_group + k * block);
      members.push_back(sim_index(leader.pp, sc.dp, sc.cp, sc.tp));
    }
    return members;
  }

  // The gathers a segmented entry's fetch waits for (Entry::awaited), each
  // batch launched from the hook at the start of its entry j: the host work
  // of its per-parameter list-API calls (each starts with a device-wide
  // synchronize) runs once entry j-1 is done and the gathers and
  // reduce-scatter that entry j's fetch waited for have ended, before entry
  // j runs; the gathers (one collective per parameter) follow it and entry k
  // waits for them.  j = k: a blocking fetch, after entry k-1 and whatever
  // was in flight.
  template <typename HostWork, typename TaskAt>
  void gather_segmented(size_t k, const std::vector<Entry>& entries, const std::vector<int32_t>& members,
                        int32_t channel, int shard, int stride, double wbytes, HostWork& add_host_work,
                        TaskAt& task_at, const std::vector<int32_t>& reduce_tail,
                        std::vector<std::vector<int32_t>>& awaited_tails) {
    constexpr size_t kNoEntry = std::numeric_limits<size_t>::max();
    TaskGraph& g = out_.graph;
    const Entry& e = entries[k];
    std::map<size_t, std::vector<double>> launches;
    for (const Entry::Gather& a : e.awaited) launches[a.launched_at].push_back(a.params * wbytes);
    std::vector<int32_t> earlier;  // launched before this entry (in flight at its fetch)
    for (const auto& [j, pieces] : launches) {
      const int32_t ag = add_group_comm(channel, Collective::kAllGather, TaskLabel::kParamAllGather, pieces, shard,
                                        members, stride);
      double gathered = 0;
      for (double piece : pieces) gathered += piece;
      const Duration zero_fill = prof_.list_api_copies ? memory_time(cpm_, gathered) : Duration();
      const Duration host = synced_host_latency(pieces.size(), shard) + zero_fill;
      const int32_t h = add_host_work(host, j >= 1 ? j - 1 : kNoEntry, j);
      if (h >= 0) {
        g.add_dep(h, ag);
        if (j < k) {
          for (int32_t t : awaited_tails[j]) g.add_dep(t, h);
        } else {
          for (int32_t t : earlier) g.add_dep(t, h);
        }
        if (j >= 1 && reduce_tail[j - 1] >= 0) g.add_dep(reduce_tail[j - 1], h);
      }
      if (j >= 1) {
        for (int32_t mr : members) g.add_dep(task_at(mr, j - 1), ag);
      }
      g.task(ag).microbatch = e.mb;
      g.task(ag).layer = static_cast<int16_t>(e.layer);
      for (int32_t mr : members) g.add_dep(ag, task_at(mr, k));
      int32_t tail = ag;
      if (prof_.list_api_copies) {
        tail = g.add_comm(channel, memory_time(cpm_, 2 * gathered).ps(), 0, 0, Category::kDpComm,
                          TaskLabel::kListCopy, members, {});
        g.add_dep(ag, tail);
        g.task(tail).microbatch = e.mb;
        g.task(tail).layer = static_cast<int16_t>(e.layer);
        for (int32_t mr : members) g.add_dep(tail, task_at(mr, k));
      }
      awaited_tails[k].push_back(tail);
      if (j < k) earlier.push_back(tail);
    }
  }

  // The bucket cap (`cap`, in its unit: bytes or parameters) of a stage's
  // model chunk `chunk`: one bucket for the whole chunk off the first
  // stage's first chunk where the framework buckets only there
  // (ExecutionProfile::buckets_first_chunk_only).
  double bucket_cap(int stage, int chunk, double cap) const {
    return prof_.buckets_first_chunk_only && (stage > 0 || chunk > 0) ? 1e30 : cap;
  }

  // The overlapped parameter all-gather of a stage's group (ExecutionProfile::
  // overlap_param_gather): the parameters of each chunk's first forward in
  // the gradient buckets' boundaries (built from the chunk's end, closed
  // once they reach the cap; a layer is not split), issued in forward order
  // back to back on the group's own stream, each bucket before the first
  // layer that uses it, the first from the step's start (on a later stage of
  // a non-interleaved pipeline: once the first forward's input has
  // arrived; interleaved, chunk c >= 2 from virtual micro-batch
  // (c - 1) pp - r).  The step this simulates starts right after the
  // previous step's optimizer.
  void build_param_sync(const std::vector<Entry>& entries, const std::vector<int32_t>& members, int shard,
                        int stride, bool experts, double bytes_per_param, int stage) {
    TaskGraph& g = out_.graph;
    struct Bucket {
      size_t first_entry = 0;
      double params = 0;
      bool chunk_first = false;  // the chunk's first bucket in forward order
    };
    std::vector<Bucket> buckets;  // in forward order
    const double cap = prof_.grad_bucket_params > 0 ? prof_.grad_bucket_params : 1e30;
    const auto params_of = [&](const Entry& e) {
      return experts ? e.sync_expert_params : e.sync_params - e.sync_expert_params;
    };
    size_t k = 0;
    while (k < entries.size()) {
      if (entries[k].sync_params <= 0) {
        ++k;
        continue;
      }
      // One chunk's first forward: entries [k, end).
      size_t end = k;
      while (end < entries.size() && entries[end].sync_params > 0 && entries[end].chunk == entries[k].chunk &&
             entries[end].kind == PipeOp::Kind::kForward) {
        ++end;
      }
      const double chunk_cap = bucket_cap(stage, entries[k].chunk, cap);
      std::vector<Bucket> chunk;  // from the chunk's end
      double open = 0;
      for (size_t j = end; j-- > k;) {
        open += params_of(entries[j]);
        if (open >= chunk_cap || j == k) {
          if (open > 0) chunk.push_back(Bucket{j, open});
          open = 0;
        }
      }
      if (!chunk.empty()) chunk.back().chunk_first = true;
      buckets.insert(buckets.end(), chunk.rbegin(), chunk.rend());
      k = end;
    }
    if (buckets.empty()) return;
    // The program entry from whose forward step a bucket is dispatched where
    // that is not the step's start (kNoEntry): without align_param_gather
    // (Megatron-Core sets it only for the interleaved schedule) the first
    // bucket leaves from the first forward's pre-hook (param_and_grad_buffer.py
    // finish_param_sync, since core_r0.9.0), which a later stage's host
    // reaches only once its input has arrived (the blocking batched receive,
    // p2p_communication.py batch_p2p_sync); the interleaved schedule
    // dispatches chunks 0 and 1 at its start and chunk c >= 2 from the
    // forward step of virtual micro-batch (c - 1) * pp - r on pipeline rank
    // r, aligned across the ranks (schedules.py
    // forward_backward_pipelining_with_interleaving, param_sync_func;
    // micro-batch groups of pp).
    constexpr size_t kNoEntry = std::numeric_limits<size_t>::max();
    auto dispatch_entry = [&](size_t i) {
      const Bucket& b = buckets[i];
      if (i == 0 && stage > 0 && v_ == 1 && !split_) return b.first_entry;
      const int c = entries[b.first_entry].chunk;
      if (!b.chunk_first || p_.schedule != Schedule::kInterleaved || c < 2) return kNoEntry;
      const int launch_chunk = stage == 0 ? c - 1 : c - 2;
      const int launch_mb = stage == 0 ? 0 : p_.pp - stage;
      for (size_t j = 0; j < entries.size(); ++j) {
        const Entry& e = entries[j];
        if (e.kind == PipeOp::Kind::kForward && e.chunk == launch_chunk && e.mb == launch_mb) return j;
      }
      return kNoEntry;
    };
    const int32_t channel = g.add_channel();
    for (size_t i = 0; i < buckets.size(); ++i) {
      const Bucket& b = buckets[i];
      const int32_t ag = add_group_comm(channel, Collective::kAllGather, TaskLabel::kDpAllGather,
                                        b.params * bytes_per_param, shard, members, stride);
      g.task(ag).microbatch = entries[b.first_entry].mb;
      g.task(ag).layer = static_cast<int16_t>(entries[b.first_entry].layer);
      const size_t from = dispatch_entry(i);
      for (int32_t mr : members) {
        const std::vector<int32_t>& program = g.program[static_cast<size_t>(mr)];
        g.add_dep(ag, program[b.first_entry]);
        if (from == kNoEntry) continue;
        // When that forward step starts: after the rank's previous task and
        // the arrival of its input.
        if (from > 0) g.add_dep(program[from - 1], ag);
        if (const auto recv = forward_recv_.find(program[from]); recv != forward_recv_.end()) {
          g.add_dep(recv->second, ag);
        }
      }
    }
  }

  // The gradient reductions (and ZeRO gathers) of the dense parameters over
  // the DP group, or with `experts` of the routed experts over the expert
  // data-parallel group.
  void build_dp_groups(bool experts) {
    const int world_dp = experts ? L_.expert_dp : p_.dp * p_.cp;
    if (world_dp <= 1) return;
    TaskGraph& g = out_.graph;
    const bool hybrid = !experts && L_.shard_degree < world_dp && p_.zero >= 1;
    const int shard = experts ? world_dp : p_.zero >= 1 ? L_.shard_degree : world_dp;
    const int stride = experts ? p_.ep * p_.etp : p_.tp;
    const double wbytes = weight_bytes(p_.precision);
    // FSDP2 float8 all-gather (torchao enable_fsdp_float8_all_gather, the
    // tensorwise recipe only): a layer's linear weights travel in FP8, one
    // byte each, the rest of its parameters in bf16.
    // Megatron --fp8-param-gather does the same for the distributed
    // optimizer's all-gather (and Megatron FSDP's).
    double gather_wbytes = wbytes;
    const bool fp8_gather = fp8_weights_gathered(p_);
    if (fp8_gather && layer_.params > 0) {
      gather_wbytes = (layer_.linear_params * 1.0 + (layer_.params - layer_.linear_params) * wbytes) / layer_.params;
    }
    const double gbytes = reduce_grad_bytes_;
    // How the framework reduces (framework/framework.h); the generic model
    // keeps the caller's bucket size.
    const ExecutionProfile& prof = prof_;
    const double bucket_bytes = p_.framework == Framework::kGeneric ? opt_.bucket_bytes
                                : prof.grad_bucket_params > 0   ? prof.grad_bucket_params * gbytes
                                                                : 1e30;
    // ZeRO-3 reduce-scatters layer by layer whatever the framework (its
    // gathers share the channel with them).
    const bool after_backward = prof.grad_reduce == GradReduce::kAfterBackward && p_.zero < 3;
    const bool blocking = prof.grad_reduce == GradReduce::kBlocking;
    for (size_t r = 0; r < out_.ranks.size(); ++r) {
      const RankCoord& rc = out_.ranks[r];
      // One leader per group: the rank with the lowest dp*cp index of its
      // (shard) group.
      const int idx = rc.dp * p_.cp + rc.cp;
      if (experts) {
        // One leader per expert data-parallel group: the locals of the first
        // ep*etp block.
        if (!opt_.representative && expert_folding(p_, rc.tp, rc.cp, rc.dp).edp_rank != 0) continue;
      } else {
        if (idx % shard != 0) continue;
        if (!opt_.representative && !hybrid && idx != 0) continue;
      }
      const std::vector<int32_t> members = experts ? expert_group_members(rc) : group_members(rc, hybrid);
      const int32_t channel = g.add_channel();
      const auto& entries = entries_[static_cast<size_t>(rc.pp)];
      std::vector<int32_t> reductions;
      int32_t host_channel = -1;  // gather_syncs_device: the host work's FIFO
      double bucket = 0;
      auto task_at = [&](int32_t member, size_t k) { return g.program[static_cast<size_t>(member)][k]; };
      // Host work with the device synchronized (ExecutionProfile::
      // gather_syncs_device): after each member's program entry `after`,
      // before its entry `before` (kNoEntry, or past the program's end: no
      // such edge); -1 when there is none.
      constexpr size_t kNoEntry = std::numeric_limits<size_t>::max();
      auto add_host_work = [&](Duration host, size_t after, size_t before) {
        if (host <= Duration()) return int32_t{-1};
        if (host_channel < 0) host_channel = g.add_channel();
        const int32_t h = g.add_comm(host_channel, host.ps(), 0, 0, Category::kDpComm, TaskLabel::kHostWork, members, {});
        for (int32_t mr : members) {
          const size_t n = g.program[static_cast<size_t>(mr)].size();
          if (after < n) g.add_dep(task_at(mr, after), h);
          if (before < n) g.add_dep(h, task_at(mr, before));
        }
        return h;
      };
      // The rank's last backward pass (its program ends with the optimizer).
      size_t last_backward = 0;
      for (size_t k = 0; k < entries.size(); ++k) {
        if (entries[k].kind != PipeOp::Kind::kForward) last_backward = k;
      }
      // ZeRO-3 with the device synchronized at every fetch (gather_syncs_device,
      // DeepSpeed <= 0.5.4 stage3.py): per program entry, the last device task
      // of its gathers (the list API's copy-out, else the gather) and of its
      // reduce-scatter; the next fetch's torch.cuda.synchronize() waits for both.
      const bool synced = p_.zero == 3 && prof_.gather_syncs_device;
      std::vector<int32_t> gather_tail(synced ? entries.size() : 0, -1);
      std::vector<int32_t> reduce_tail(synced ? entries.size() : 0, -1);
      // Segmented (Entry::segmented): every device task a segment's fetch waits for.
      std::vector<std::vector<int32_t>> awaited_tails(synced ? entries.size() : 0);
      // `deferred`: the reduce-scatter's host work comes from the gradient
      // hooks, which run once the backward's kernels are launched, after the
      // host work of the next fetch's prefetch (issued from the pre-backward
      // hook): on the host's FIFO after it, beside the backward on the device.
      auto reduce = [&](size_t k, double params, bool deferred = false) {
        const double bytes = params * gbytes;
        const bool all_reduce = p_.zero == 0 || prof_.grads_all_reduced;
        Collective kind = all_reduce ? Collective::kAllReduce : Collective::kReduceScatter;
        // ZeRO-3 through the list API: ProcessGroupNCCL copies the member
        // views into its flat input (read and written) on the collective's
        // stream first (ExecutionProfile::list_api_copies).
        // ZeRO-3 all-reducing a flattened bucket (grads_all_reduced): the
        // bucket is flattened (torch.cat) and divided in place, read and
        // written twice, on the reduction stream, then copied back.
        const bool flat_bucket = p_.zero == 3 && all_reduce;
        int32_t copy_in = -1;
        if (p_.zero == 3 && (prof_.list_api_copies || flat_bucket)) {
          copy_in = g.add_comm(channel, memory_time(cpm_, (flat_bucket ? 4 : 2) * bytes).ps(), 0, 0,
                               Category::kDpComm, TaskLabel::kListCopy, members, {});
        }
        int32_t id = add_group_comm(channel, kind, all_reduce ? TaskLabel::kDpAllReduce : TaskLabel::kDpReduceScatter,
                                    bytes, shard, members, stride);
        if (blocking) blocking_comm_.push_back(id);
        int32_t copy_back = -1;
        if (flat_bucket) {
          copy_back = g.add_comm(channel, memory_time(cpm_, 2 * bytes).ps(), 0, 0, Category::kDpComm,
                                 TaskLabel::kListCopy, members, {});
          g.add_dep(id, copy_back);
        }
        const size_t after = after_backward ? last_backward : k;
        // ZeRO-3 with the device synchronized at every fetch: the list
        // API's calls run on the host, between this backward and the next,
        // or (deferred) beside this backward, after the next prefetch's (a
        // flat bucket's all-reduce has no per-member calls).
        const int32_t h = add_host_work(p_.zero == 3 && !flat_bucket ? synced_host_latency(1, shard) : Duration(),
                                        deferred ? kNoEntry : after, deferred ? kNoEntry : after + 1);
        if (h >= 0) g.add_dep(h, id);
        for (int32_t mr : members) {
          g.add_dep(task_at(mr, after), id);
          dp_member_preds_[id].push_back(task_at(mr, after));
          if (copy_in >= 0) g.add_dep(task_at(mr, after), copy_in);
        }
        if (copy_in >= 0) {
          g.add_dep(copy_in, id);
          g.task(copy_in).microbatch = entries[k].mb;
          g.task(copy_in).layer = static_cast<int16_t>(entries[k].layer);
        }
        if (copy_back >= 0) {
          g.task(copy_back).microbatch = entries[k].mb;
          g.task(copy_back).layer = static_cast<int16_t>(entries[k].layer);
        }
        const int32_t tail = copy_back >= 0 ? copy_back : id;
        reductions.push_back(tail);
        if (synced) reduce_tail[k] = tail;
        if (hybrid) {
          // Hybrid shard: the shard's gradients are then all-reduced across
          // the replicas (HSDP / ZeRO++ hpZ).
          int32_t ar = add_group_comm(channel, Collective::kAllReduce, TaskLabel::kDpAllReduce, bytes / shard,
                                      world_dp / shard, members, p_.tp * shard);
          g.add_dep(tail, ar);
          reductions.push_back(ar);
          if (synced) reduce_tail[k] = ar;
        }
        // ZeRO-3 with the gradients on the host: each member copies its
        // shard down once the reduction ends (build_grad_offload).
        if (p_.zero == 3 && p_.offload != Offload::kNone && prof_.offload_grads_to_host) {
          for (int32_t mr : members) {
            auto& per_rank = reduced_[static_cast<size_t>(mr)];
            if (per_rank.size() <= k) per_rank.resize(k + 1);
            per_rank[k].push_back(hybrid ? reductions.back() : tail);
          }
        }
        // The next entry's fetch ends with a device-wide synchronize: its
        // compute waits for this reduce-scatter whether or not it prefetches.
        if (synced) {
          for (int32_t mr : members) {
            if (k + 1 < g.program[static_cast<size_t>(mr)].size()) g.add_dep(reduce_tail[k], task_at(mr, k + 1));
          }
        }
      };
      // synced: the reduce-scatter of the previous backward entry, issued
      // once this entry's prefetch host work is on the host's FIFO.
      size_t pending_reduce = kNoEntry;
      double pending_params = 0;
      auto flush_reduce = [&]() {
        if (pending_reduce == kNoEntry) return;
        reduce(pending_reduce, pending_params, true);
        pending_reduce = kNoEntry;
      };
      for (size_t k = 0; k < entries.size(); ++k) {
        const Entry& e = entries[k];
        // The parameters this group reduces: the routed experts, or the rest.
        const double grad_params = experts ? e.grad_expert_params : e.grad_params - e.grad_expert_params;
        // ZeRO-3: the layer's routed experts are gathered over the expert
        // group (one unit), the rest over the shard group.
        const double gather = experts ? e.gather_expert_params : e.gather_params - e.gather_expert_params;
        // DeepSpeed v0.3.14 - v0.5.10 (Zero3CoordinatorKnobs::trace_aligned
        // false) prefetches nothing: an entry's gathers are issued by its own
        // fetch, whose torch.cuda.synchronize() first waits for the previous
        // entry and the gradient reduction its hooks issued.
        const bool on_demand = synced && !prof_.zero3_knobs.trace_aligned;
        const size_t lag = on_demand ? 1 : 2;
        if (on_demand && !e.segmented && gather > 0) flush_reduce();
        if (e.segmented && synced) {
          gather_segmented(k, entries, members, channel, shard, stride, gather_wbytes, add_host_work, task_at,
                           reduce_tail, awaited_tails);
        } else if (gather > 0) {
          // DeepSpeed with full recompute gathers a layer twice for its
          // backward (recompute forward, then backward).
          const int gathers = gathers_before(e);
          for (int n = 0; n < gathers; ++n) {
            std::vector<double> pieces =
                experts ? std::vector<double>{gather} : gather_pieces(gather, e.gather_layer_params - e.gather_expert_params);
            for (double& piece : pieces) piece *= gather_wbytes;
            int32_t ag = add_group_comm(channel, Collective::kAllGather, TaskLabel::kParamAllGather, pieces, shard,
                                        members, stride);
            // Host work with the device synchronized: after the previous
            // compute, before this one (ExecutionProfile::gather_syncs_device).
            double gathered = 0;
            for (double piece : pieces) gathered += piece;
            // ... and, with the list API, the zero-fill of the flat buffer
            // (DeepSpeed's torch.zeros, one write, before the synchronize).
            const Duration zero_fill = prof_.list_api_copies ? memory_time(cpm_, gathered) : Duration();
            // Synced, the host work is the prefetch issued from the previous
            // entry's pre-forward (pre-backward) hook: after the fetch that
            // waited for entry k-2 and for the device work then in flight
            // (entry k-1's gathers, entry k-2's reduce-scatter), before
            // entry k-1 runs; the gather is launched once it is done.
            // On demand, it is the entry's own fetch: after entry k-1, before k.
            const int32_t h = synced ? add_host_work(synced_host_latency(pieces.size(), shard) + zero_fill,
                                                     k >= lag ? k - lag : kNoEntry, k + 1 >= lag ? k + 1 - lag : kNoEntry)
                                     : add_host_work(synced_host_latency(pieces.size(), shard) + zero_fill,
                                                     k >= 1 ? k - 1 : kNoEntry, k);
            if (synced && h >= 0) {
              g.add_dep(h, ag);
              if (k >= 1 && gather_tail[k - 1] >= 0) g.add_dep(gather_tail[k - 1], h);
              if (k >= lag && reduce_tail[k - lag] >= 0) g.add_dep(reduce_tail[k - lag], h);
            }
            if (synced) gather_tail[k] = ag;
            // An offloaded shard reaches the GPU before it is gathered.
            for (int32_t mr : members) {
              if (static_cast<size_t>(mr) < h2d_.size() && !h2d_[static_cast<size_t>(mr)].empty()) {
                const auto& copies = h2d_[static_cast<size_t>(mr)][k];
                if (static_cast<size_t>(n) < copies.size()) g.add_dep(copies[static_cast<size_t>(n)], ag);
              }
            }
            // One layer of prefetch: gather layer k once layer k-2 is done
            // (on demand: once layer k-1 is).
            if (k >= lag) {
              for (int32_t mr : members) g.add_dep(task_at(mr, k - lag), ag);
            }
            for (int32_t mr : members) g.add_dep(ag, task_at(mr, k));
            // The list API's device copies (ExecutionProfile::list_api_copies):
            // ProcessGroupNCCL's flat output copied into the member views
            // (read and written), on the collective's stream before the layer
            // can use the parameters.
            if (prof_.list_api_copies) {
              const int32_t copy = g.add_comm(channel, memory_time(cpm_, 2 * gathered).ps(), 0, 0,
                                              Category::kDpComm, TaskLabel::kListCopy, members, {});
              g.add_dep(ag, copy);
              for (int32_t mr : members) g.add_dep(copy, task_at(mr, k));
              g.task(copy).microbatch = e.mb;
              g.task(copy).layer = static_cast<int16_t>(e.layer);
              if (synced) gather_tail[k] = copy;
            }
          }
        }
        flush_reduce();
        if (e.kind != PipeOp::Kind::kForward && grad_params > 0) {
          if (p_.zero == 3) {
            // Every micro-batch, per layer, queued on the communicator after
            // the next entry's prefetch: the pre-backward hook of layer L
            // issues the gather of layer L-1 before the post-backward hook of
            // L issues L's reduce-scatter (FSDP2 _fsdp_state.py
            // _pre_backward -> _backward_prefetch, then post_backward ->
            // foreach_reduce; DeepSpeed stage 3 fetch_sub_module from the
            // pre-backward hook), and one communicator runs its collectives in
            // issue order (ProcessGroupNCCL's one NCCL stream per device).
            pending_reduce = k;
            pending_params = grad_params;
          } else if (e.last_backward || prof.reduce_every_microbatch) {
            // PyTorch DDP fills buckets tensor by tensor and closes one once it
            // reaches the cap, so a bucket is at most cap + one tensor: walk
            // the layer's gradients in tensor-sized pieces.
            const double tensor = experts ? largest_expert_tensor_params_ : largest_tensor_params_;
            const int pieces = std::max(1, static_cast<int>(std::ceil(grad_params / tensor)));
            for (int piece = 0; piece < pieces; ++piece) {
              bucket += grad_params / pieces;
              if (bucket * gbytes >= bucket_cap(rc.pp, e.chunk, bucket_bytes)) {
                reduce(k, bucket);
                bucket = 0;
              }
            }
            // The chunk's last layer (layer 0 in backward order) flushes.
            if (e.layer <= 0 && bucket > 0) {
              reduce(k, bucket);
              bucket = 0;
            }
          }
        }
      }
      flush_reduce();
      for (int32_t mr : members) {
        for (int32_t red : reductions) {
          g.add_dep(red, optimizer_task_[static_cast<size_t>(mr)]);
          optimizer_inputs_[static_cast<size_t>(mr)].push_back(red);
        }
      }
      if (overlapped_param_sync()) {
        build_param_sync(entries, members, shard, stride, experts,
                         p_.fp8_param_gather ? gather_wbytes : wbytes, rc.pp);
      } else if (p_.zero == 1 || p_.zero == 2 || (p_.zero == 0 && prof_.optimizer_sharded_without_zero)) {
        // Distributed optimizer: the updated shards are all-gathered (with
        // overlap_param_gather they run behind the next step's forward);
        // so are those of an optimizer sharded without ZeRO.
        const double all = stage_params_[static_cast<size_t>(rc.pp)];
        const double expert = stage_expert_params_[static_cast<size_t>(rc.pp)];
        const double params = experts ? expert : all - expert;
        const int buckets = std::max(1, static_cast<int>(std::ceil(params * wbytes / opt_.bucket_bytes / 4)));
        for (int b = 0; b < buckets; ++b) {
          int32_t ag = add_group_comm(channel, Collective::kAllGather, TaskLabel::kDpAllGather,
                                      params * (p_.fp8_param_gather ? gather_wbytes : wbytes) / buckets, shard,
                                      members, stride);
          for (int32_t mr : members) g.add_dep(optimizer_task_[static_cast<size_t>(mr)], ag);
        }
      }
    }
  }

  const ModelSpec& m_;
  const ClusterSpec& c_;
  const Layout& L_;
  const Plan& p_;
  const LoweringOptions& opt_;
  LinkParams lp_;
  ExecutionProfile prof_;  // how the plan's framework executes (framework/framework.h)
  LayerShape shape_;
  LayerCost layer_, emb_, outc_;
  StepCosts sc_;
  std::vector<int32_t> tp_after_;    // compute task id -> its TP link task (or -1)
  std::unordered_map<int32_t, int32_t> forward_recv_;  // a forward task -> the transfer of its input
  std::vector<std::vector<int64_t>> micro_batch_end_ps_;  // per stage, per entry (plan_microbatch_ends)
  std::vector<int32_t> tp_channel_;  // per simulated rank
  std::vector<int32_t> cp_channel_;  // per simulated rank
  std::vector<std::pair<int32_t, int32_t>> cp_companions_;  // (pass, its CP exchange)
  Duration member_call_;  // one PyTorch call of a list-API collective (the kernel overhead)
  ComputeParams cpm_;     // the GPU's compute parameters for the plan's dtype
  int64_t emb_f_ = 0, emb_b_ = 0, emb_tp_f_ = 0, emb_tp_b_ = 0;
  int64_t out_f_ = 0, out_b_ = 0, out_tp_f_ = 0, out_tp_b_ = 0, out_ep_f_ = 0, out_ep_b_ = 0;
  double layer_grad_bytes_ = 4;   // per gradient element as kept (gradient_dtype)
  double reduce_grad_bytes_ = 4;  // per gradient element as reduced (reduction_dtype)
  double largest_tensor_params_ = 1;
  std::vector<double> layer_modules_;  // gather_per_module: a dense layer's modules, parameters per TP rank
  int v_ = 1;
  bool split_ = false;  // the schedule has W passes (zero bubble)
  bool keep_outputs_ = false;  // stage outputs held until their backward (ExecutionProfile)
  double stage_output_bytes_ = 0;
  std::vector<std::vector<std::vector<int32_t>>> h2d_;  // [rank][entry]: parameter offload copies
  // [rank][entry]: the last task of each of the entry's ZeRO-3 gradient
  // reductions (dense and expert groups), which its offload copy follows.
  std::vector<std::vector<std::vector<int32_t>>> reduced_;
  PipelineSchedule schedule_;
  std::vector<std::vector<Chunk>> chunks_;
  std::vector<std::vector<Entry>> entries_;
  std::vector<std::vector<int32_t>> op_index_;
  std::vector<int32_t> optimizer_task_;
  std::vector<std::vector<int32_t>> optimizer_inputs_;  // [rank]: the DP reductions its optimizer waits for
  std::vector<int32_t> next_in_program_;
  std::shared_ptr<RouteClasses> routes_;
  std::vector<int32_t> blocking_comm_;
  std::map<std::tuple<int, Bytes, int, int>, CollectiveCost> group_costs_;  // add_group_comm's memo
  std::map<int32_t, std::vector<int32_t>> dp_member_preds_;  // collective -> its members' producing tasks  // DP collectives that block their members' next compute
  std::vector<int32_t> intra_link_, nic_link_;
  std::vector<double> stage_params_;
  std::vector<double> stage_expert_params_;  // of stage_params_, routed experts
  double largest_expert_tensor_params_ = 1;
  int32_t first_p2p_channel_ = 0;
  LoweredStep out_;
};

}  // namespace

LoweredStep lower_step(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout,
                       const LoweringOptions& options) {
  TRAINPLAN_CHECK(layout.feasible, "lowering an infeasible layout");
  const Layout executed = execution_layout(model, cluster, layout);
  Lowerer l(model, cluster, executed, options);
  return l.run();
}

PipelineSchedule automatic_zero_bubble_order(const ModelSpec& model, const ClusterSpec& cluster,
                                             const Layout& layout) {
  TRAINPLAN_CHECK(layout.feasible && zero_bubble_automatic(layout.plan.schedule),
                  "an automatic zero-bubble order of a feasible zb-1p/zb-2p layout");
  const LoweringOptions options;  // the Lowerer keeps a reference
  Lowerer l(model, cluster, layout, options);
  return l.automatic_order();
}

MemoryReport plan_memory(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout) {
  if (!layout.feasible || !zero_bubble_automatic(layout.plan.schedule) || layout.plan.dp_mode == DpMode::kAsync) {
    return estimate_memory(model, cluster, layout);
  }
  const PipelineSchedule order = automatic_zero_bubble_order(model, cluster, layout);
  return estimate_memory(model, cluster, layout, &order);
}

}  // namespace trainplan
