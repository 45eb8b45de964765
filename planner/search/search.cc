#include "planner/search/search.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <deque>
#include <exception>
#include <functional>
#include <limits>
#include <memory>
#include <mutex>
#include <numeric>
#include <optional>
#include <queue>
#include <set>
#include <shared_mutex>
#include <thread>
#include <tuple>

#include "planner/export/exporters.h"
#include "simulator/core/error.h"
#include "simulator/faults/convergence.h"
#include "simulator/framework/framework.h"
#include "simulator/taskgraph/step_costs.h"

namespace trainplan {

namespace {

std::string fmt(const char* f, double a) {
  char buf[128];
  std::snprintf(buf, sizeof buf, f, a);
  return buf;
}

}  // namespace

std::string rule_of(const std::string& reason) {
  std::string out;
  bool in_number = false;
  bool in_name = false;
  for (char ch : reason) {
    const bool digit = ch >= '0' && ch <= '9';
    const bool alpha = (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z');
    if (digit && !in_number && !in_name) out += 'N';
    if (!digit || in_name) out += ch;
    in_number = digit && !in_name;
    in_name = alpha || (in_name && digit);
  }
  return out;
}

namespace {

std::vector<int> powers_of_two_up_to(int n) {
  std::vector<int> v;
  for (int x = 1; x <= n; x *= 2) v.push_back(x);
  if (v.back() != n && n > 0 && (n & (n - 1)) != 0) v.push_back(n);
  return v;
}

// World sizes to try: every GPU, and whole-node counts just below it with
// more factors of two (641 nodes -> 640, 636, 632, ...) so a prime node count
// does not rule out pipeline and data parallel layouts; the idle nodes are
// reported.
// Under failures, also 3/4 and 1/2 of the nodes: a smaller world fails less
// often and may train sooner.
std::vector<int> world_sizes(const ClusterSpec& c, int gpus, bool failures) {
  std::vector<int> worlds = {gpus};
  if (gpus > c.gpus_per_node) {
    const int nodes = gpus / c.gpus_per_node;
    for (int k = 1; k <= 7; ++k) {
      const int n = nodes - nodes % (1 << k);
      if (n >= 1 && n * c.gpus_per_node != worlds.back()) worlds.push_back(n * c.gpus_per_node);
    }
    if (failures) {
      for (int n : {nodes * 3 / 4, nodes / 2}) {
        const int g = n * c.gpus_per_node;
        if (n >= 1 && std::find(worlds.begin(), worlds.end(), g) == worlds.end()) worlds.push_back(g);
      }
    }
  }
  return worlds;
}

// The micro-batch sizes the search tries, in increasing order.
constexpr int kMicrobatches[] = {1, 2, 4, 8, 16};

// The next micro-batch size after the plan's that divides its share of the
// global batch (0: none).
int next_microbatch(const Plan& p) {
  for (int mbs : kMicrobatches) {
    if (mbs > p.mbs && p.gbs % (int64_t{mbs} * p.dp) == 0) return mbs;
  }
  return 0;
}

// Every layout of `gpus` GPUs the search considers, at the smallest
// micro-batch that divides the global batch: the larger ones are proposed
// one by one (search_plans), past a plan that does not fit only where the
// larger one might (larger_microbatch_peak_lower_bound).
std::vector<Plan> enumerate(const ModelSpec& m, const ClusterSpec& c, int gpus, const SearchOptions& o,
                            std::vector<int>* world_of_plan) {
  std::vector<Plan> plans;
  const int64_t seq = o.seq > 0 ? o.seq : m.seq_len;
  const std::vector<int> tps = powers_of_two_up_to(std::min(gpus, c.gpus_per_node));
  std::vector<int> cps = {1};
  if (seq >= 4096) {
    for (int cp : {2, 4, 8}) cps.push_back(cp);
  }
  for (int tp : tps) {
    for (int cp : cps) {
      if (gpus % (tp * cp) != 0) continue;
      const int rest = gpus / (tp * cp);
      for (int pp = 1; pp <= rest && pp <= m.layers; ++pp) {
        if (rest % pp != 0) continue;
        const int dp = rest / pp;
        std::vector<int> vps = {1};
        if (pp > 1) {
          const std::vector<int> stages = balance_stage_layers(m.layers, pp);
          const int min_layers = stages.empty() ? 0 : *std::min_element(stages.begin(), stages.end());
          // Interleaving down to one layer per chunk (Megatron allows any vp
          // that divides the layers of a stage; a peer planner's optimum for
          // 22B on 8 A100 uses 24 chunks).
          for (int v = 2; v <= min_layers; ++v) {
            if (m.layers % pp == 0 && (m.layers / pp) % v != 0) continue;
            vps.push_back(v);
          }
        }
        // MoE: expert parallel degrees (powers of two dividing the experts
        // and tp*cp*dp, Megatron-Core's folding), expert TP 1 or tp.
        std::vector<std::pair<int, int>> experts = {{1, 1}};
        if (m.has_moe) {
          experts.clear();
          for (int ep = 1; ep <= m.moe.experts && ep <= tp * cp * dp; ep *= 2) {
            if (m.moe.experts % ep != 0) continue;
            for (int etp : {1, tp}) {
              if ((tp * cp * dp) % (ep * etp) != 0 || m.moe.expert_ffn_hidden % etp != 0) continue;
              if (etp == tp && tp == 1 && !experts.empty() && experts.back() == std::make_pair(ep, 1)) continue;
              experts.push_back({ep, etp});
            }
          }
        }
        for (int vp : vps) {
          std::vector<Schedule> schedules;
          if (vp > 1) {
            schedules.push_back(Schedule::kInterleaved);
            if (o.zero_bubble) schedules.push_back(Schedule::kInterleavedZb);
          } else {
            schedules.push_back(Schedule::k1F1B);
            if (pp > 1 && o.gpipe) schedules.push_back(Schedule::kGpipe);
            if (pp > 1 && o.naive) schedules.push_back(Schedule::kNaive);
            if (pp > 1 && o.zero_bubble) {
              schedules.push_back(Schedule::kZb1p);
              schedules.push_back(Schedule::kZb2p);
              // ZB-V's and DualPipeV's two chunks per rank are implied by
              // the schedule.
              if (2 * pp <= m.layers) {
                schedules.push_back(Schedule::kZbv);
                schedules.push_back(Schedule::kDualPipeV);
              }
            }
          }
          for (Schedule sched : schedules) {
            // The smallest micro-batch only: the search tries the next one
            // where this one does not run out of memory (next_microbatch).
            for (int mbs : kMicrobatches) {
              if (o.gbs % (int64_t{mbs} * dp) != 0) continue;
              std::vector<std::pair<int, int>> zeros = {{0, 0}, {1, 0}};  // (stage, shard group)
              // MoE: ZeRO-2 (FSDP2 without resharding) and ZeRO-3 (FSDP2,
              // the routed experts sharded over the expert data-parallel
              // group: torchtitan's MoE train specs, Megatron-FSDP).
              if (pp == 1 && m.has_moe) {
                zeros.push_back({2, 0});
                zeros.push_back({3, 0});
              }
              if (pp == 1 && !m.has_moe) {
                zeros.push_back({2, 0});
                zeros.push_back({3, 0});
                const int in_node = c.gpus_per_node / std::min(c.gpus_per_node, tp * cp);
                if (in_node > 1 && in_node < dp * cp && (dp * cp) % in_node == 0) zeros.push_back({3, in_node});
              }
              for (auto [zero, shard] : zeros) {
                std::vector<Offload> offloads;
                // ZeRO shards over dp*cp ranks: with one of them every stage
                // is plain replication, so only zero 0 is enumerated (ZeRO-1
                // at dp 1 is the same plan), except where offload needs the
                // ZeRO machinery (ZeRO-Offload / ZeRO-Infinity on one GPU).
                if (zero == 0 || dp * cp > 1) offloads.push_back(Offload::kNone);
                if (o.offload && zero >= 1) offloads.push_back(Offload::kOptimizer);
                if (o.offload && zero == 3) offloads.push_back(Offload::kParams);
                std::vector<DpMode> modes = {DpMode::kSync};
                if (o.async_dp && zero == 0 && pp == 1 && cp == 1 && dp >= 2) modes.push_back(DpMode::kAsync);
                for (Offload off : offloads) {
                  for (DpMode mode : modes) {
                    // MoE recipes also recompute the norms and the MoE block
                    // (Megatron-Core model zoo: --recompute-modules layernorm moe).
                    std::vector<std::pair<Recompute, uint16_t>> recomputes = {
                        {Recompute::kNone, 0}, {Recompute::kSelective, 0}, {Recompute::kFull, 0}};
                    if (m.has_moe) recomputes.push_back({Recompute::kSelective, kRcLayernorm | kRcMoe});
                    for (auto [rc, modules] : recomputes) {
                      for (bool sp : {false, true}) {
                        if (sp && tp == 1) continue;
                        if (m.has_moe && tp > 1 && !sp) continue;  // MoE with tp > 1 runs SP (resolve_plan)
                        for (auto [ep, etp] : experts) {
                        Plan p;
                        p.ep = ep;
                        p.etp = etp;
                        p.recompute_modules = modules;
                        p.tp = tp;
                        p.pp = pp;
                        p.dp = dp;
                        p.cp = cp;
                        // DeepSpeed's context parallelism is Ulysses
                        // (torchtitan_export.cc: it has no ring).
                        if (o.framework == Framework::kDeepSpeed && cp > 1) p.cp_comm = CpComm::kA2a;
                        p.vp = vp;
                        p.zero = zero;
                        p.shard_group = shard;
                        p.mbs = mbs;
                        p.gbs = o.gbs;
                        p.seq = seq;
                        p.recompute = rc;
                        p.sp = sp;
                        p.schedule = sched;
                        p.schedule_given = true;
                        p.precision = o.precision;
                        p.fp8_recipe = o.fp8_recipe;
                        p.fp8_recipe_given = o.fp8_recipe_given;
                        p.mtp_layers = o.mtp_layers;
                        p.compile = o.compile;
                        p.moe_dispatcher = ep * std::max(1, etp) > 1 ? o.moe_dispatcher : MoeDispatcher::kAllToAll;
                        // Megatron-Core's fused router costs nothing and
                        // saves host calls, so every MoE plan it runs has it
                        // (as NVIDIA's DeepSeek-V3 GB200 tuning sets it).
                        p.moe_router_fusion = m.has_moe && o.framework == Framework::kMegatronCore;
                        // Its fused loss likewise: fewer bytes, the same
                        // memory (layer_cost.cc output_cost).
                        p.cross_entropy_fusion = o.framework == Framework::kMegatronCore;
                        // Shared experts beside the token all-to-alls
                        // wherever Megatron-Core allows it (the --ep-overlap
                        // variant turns it off: overlap_variants_to_try).
                        p.moe_shared_expert_overlap = o.framework == Framework::kMegatronCore && m.has_moe &&
                                                      m.moe.shared_experts > 0;
                        if (p.moe_shared_expert_overlap) {
                          Plan q = p;  // the framework is set where the plan is evaluated
                          q.framework = o.framework;
                          p.moe_shared_expert_overlap = shared_expert_overlap_conflicts(m, q).empty();
                        }
                        p.attention_kernel = o.attention_kernel;
                        p.grad_dtype = GradDtype::kFp32;  // Megatron keeps fp32 main grads
                        p.offload = off;
                        p.dp_mode = mode;
                        p.moment_dtype =
                            zero >= 1 && off == Offload::kNone ? o.moment_dtype : MomentDtype::kFp32;
                        plans.push_back(p);
                        world_of_plan->push_back(gpus);
                        }
                      }
                    }
                  }
                }
              }
              break;
            }
          }
        }
      }
    }
  }
  return plans;
}

// What the branch and bound needs of a candidate beyond its bound: its
// layout and its stages' parameters (for the tighter bound).  Made only for
// the candidates it reaches (a search can hold millions that fit).
struct CandidateDetail {
  Layout layout;
  std::vector<double> stage_params, stage_expert_params;
};

// Each stage's parameters and routed-expert parameters from a memory report,
// as the bounds take them.
void stage_params_of(const MemoryReport& mem, std::vector<double>* params, std::vector<double>* expert_params) {
  for (const StageMemory& st : mem.stages) {
    params->push_back(st.params);
    expert_params->push_back(st.expert_params);
  }
}

struct Candidate {
  size_t index = 0;          // in the search's plans
  int gpus = 0;              // its world size
  double lower_bound_s = 0;
  double peak_bytes = 0;
  const std::string* family = nullptr;  // plan_family, interned
  double score_bound_s = 0;  // lower bound of the score (step time, or time to train)
  // For the tighter bound computed just before a simulation
  // (pipeline_step_lower_bound): the plan's costs and the score bound per
  // second of step-time bound.
  const StepCosts* costs = nullptr;
  double score_per_step_bound = 1;
  std::shared_ptr<CandidateDetail> detail;  // null until the search reaches it
};

// A simulated plan and its score.
struct Scored {
  Candidate* cand = nullptr;
  StepReport report;
  FaultReport faults;
  double score_s = 0;
  bool has_convergence = false;
  AsyncConvergence convergence;
};

// The costliest stage of a split: its layers' forward and backward time
// plus the embedding on the first stage and the output layer on the last.
double costliest_stage_ps(const std::vector<double>& work, const std::vector<int>& stages, double first, double last) {
  double worst = 0;
  size_t at = 0;
  for (size_t s = 0; s < stages.size(); ++s) {
    double sum = (s == 0 ? first : 0.0) + (s + 1 == stages.size() ? last : 0.0);
    for (int k = 0; k < stages[s] && at < work.size(); ++k) sum += work[at++];
    worst = std::max(worst, sum);
  }
  return worst;
}

// Whether a plan cut by the default rule (balance_stage_layers) is tried
// with its stages balanced by work too: pipelined, no split or partial
// recompute of its own, a looped schedule (the V schedules and DualPipe
// place both ends on rank 0), synchronous.
bool work_balanced_split_applies(const Plan& plan, const Layout& L) {
  const Plan& p = L.plan;
  return plan.stage_layers.empty() && p.pp >= 2 && p.recompute_layers == 0 && !v_shape(p.schedule) &&
         p.schedule != Schedule::kDualPipe && p.dp_mode == DpMode::kSync;
}

// The stage split balanced by work (work_balanced_stage_layers) of such a
// plan, when its costliest stage is at least 0.5% lighter than the default
// split's; empty otherwise.  The layers' work is their simulated time per
// micro-batch, so a large vocabulary's output layer (GPT-OSS 120B: about 4.6
// layers) and MoE or dense layers each weigh what they cost.  A function of
// the layer costs and the default split only (the search keeps it per
// pair).  Whether the variant is valid and its framework runs it
// (Megatron-DeepSpeed splits evenly) is its own evaluation's question.
std::vector<int> work_balanced_split_of(const ModelSpec& m, const StepCosts& sc,
                                        const std::vector<int>& default_split) {
  const int pp = static_cast<int>(default_split.size());
  std::vector<double> work(static_cast<size_t>(m.layers));
  for (int64_t i = 0; i < m.layers; ++i) {
    const LayerTimes& t = sc.times_of(i);
    work[static_cast<size_t>(i)] = static_cast<double>(t.forward_ps + t.backward_ps);
  }
  const double first = static_cast<double>(sc.embedding_forward_ps + sc.embedding_backward_ps);
  const double last = static_cast<double>(sc.output_forward_ps + sc.output_backward_ps);
  // No split beats an equal share of the whole work (nor the heaviest layer).
  double least = std::accumulate(work.begin(), work.end(), first + last) / pp;
  least = std::max({least, *std::max_element(work.begin(), work.end()), first + work.front(), last + work.back()});
  const double current = costliest_stage_ps(work, default_split, first, last);
  if (least > 0.995 * current) return {};
  std::vector<int> split = work_balanced_stage_layers(work, pp, first, last);
  if (split.empty() || split == default_split) return {};
  if (costliest_stage_ps(work, split, first, last) > 0.995 * current) return {};
  return split;
}

// The per-layer CUDA graphs to search a plan with too: where its dense or
// MoE layers are host-bound (LayerTimes::host_bound_ps), the modules
// Megatron-Bridge's CUDA-graph guide starts from ("dense models: attn, then
// optionally mlp"; "dropless MoE: attn moe_router moe_preprocess"), attention
// alone where Megatron-Core refuses those (cuda_graph_conflicts); 0 where
// the layers are not host-bound, the plan already names graphs or a stage
// split (its variants are searched from the plan without one), or
// Megatron-Core takes none.  The graphs' static inputs cost memory, so the
// variant is evaluated and simulated like any plan.
uint8_t cuda_graphs_to_try(const ModelSpec& m, const Plan& plan, const Layout& L, const StepCosts& sc) {
  if (plan.cuda_graph != 0 || !plan.stage_layers.empty()) return 0;
  const bool dense_bound = sc.layer_times.host_bound_ps > 0 && m.moe_layer_count() < m.layers;
  const bool moe_bound = m.has_moe && sc.moe_layer_times.host_bound_ps > 0;
  if (!dense_bound && !moe_bound) return 0;
  Plan q = L.plan;
  for (uint8_t g : {static_cast<uint8_t>(m.has_moe ? kCgAttn | kCgMoeRouter | kCgMoePreprocess : kCgAttn | kCgMlp),
                    static_cast<uint8_t>(kCgAttn)}) {
    q.cuda_graph = g;
    if (cuda_graph_conflicts(m, q).empty()) return g;
  }
  return 0;
}

// The overlapped forms of an enumerated plan that its framework may run,
// searched beside it:
// - Megatron-Core with --tp-comm-overlap (TE userbuffers: TP inside the
//   node, with SP), torchtitan with async TP: whether it pays depends on the
//   GEMMs and the SM margin;
// - Megatron-Core MoE plans with --overlap-moe-expert-parallel-comm (the
//   combined 1F1B) and --delay-wgrad-compute, the pair the MoE README
//   recommends (never slower: the merged backward's own W only adds to what
//   hides its all-to-all): it hides the all-to-alls under another
//   micro-batch's compute but holds one more micro-batch;
// - Megatron-Core (and generic) context-parallel plans with Ulysses'
//   all-to-alls instead of the ring (--cp-comm-type a2a): exposed exchange,
//   but every rank's attention runs over the whole sequence.
// Each holds at least the memory of the plan it comes from (the userbuffers
// or SymmetricMemory workspace; one more micro-batch in flight), so the
// search tries them only where that plan fits (search_test.cc checks the
// premise on a grid of plans), and the plan rules (resolve_plan,
// framework_refusal) drop what the framework cannot run.
std::vector<Plan> overlap_variants_to_try(const SearchOptions& o, const ClusterSpec& c, const Plan& plan) {
  std::vector<Plan> out;
  if ((o.framework == Framework::kMegatronCore || o.framework == Framework::kTorchtitan) && plan.sp && plan.tp >= 2) {
    Plan p = plan;
    p.tp_comm_overlap = true;
    out.push_back(std::move(p));
  }
  if (o.framework == Framework::kMegatronCore) {
    Plan q = plan;
    q.ep_overlap = true;
    q.delay_wgrad = true;
    q.moe_shared_expert_overlap = false;  // Megatron-Core runs one or the other
    if (ep_overlap_conflicts(q).empty()) out.push_back(std::move(q));
  }
  if ((o.framework == Framework::kMegatronCore || o.framework == Framework::kGeneric) && plan.cp > 1 &&
      plan.cp_comm == CpComm::kP2p && int64_t{plan.tp} * plan.cp <= c.gpus_per_node) {
    // Ulysses instead of the ring: the same memory here (the all-to-all
    // buffers are transient), a different exchange; resolve_plan drops it
    // where the heads do not split over tp*cp.  Searched where the CP group
    // lies inside a node: across nodes its exposed all-to-alls cross the
    // NICs, where the ring hides its exchange under the attention
    // (simulate takes either anywhere).
    Plan u = plan;
    u.cp_comm = CpComm::kA2a;
    out.push_back(std::move(u));
  }
  return out;
}

}  // namespace

// search.h says what it tries and why.
double larger_microbatch_peak_lower_bound(const Plan& p, const MemoryReport& mem, int larger_mbs) {
  TRAINPLAN_CHECK(larger_mbs > p.mbs && p.dp >= 1, "larger_microbatch_peak_lower_bound: bad arguments");
  // The deepest warm-up in micro-batches: 1F1B and ZB-1p hold at most pp
  // (memory_model.h), the others up to twice their chunks per rank.
  int64_t depth = p.pp;
  if (p.schedule == Schedule::kInterleaved || p.schedule == Schedule::kInterleavedZb) {
    depth = 2 * int64_t{p.pp} * std::max(1, p.vp);
  } else if (p.schedule == Schedule::kZbv || p.schedule == Schedule::kDualPipeV || p.schedule == Schedule::kDualPipe) {
    depth = 4 * int64_t{p.pp};
  } else if (p.schedule == Schedule::kZb2p) {
    depth = 2 * int64_t{p.pp};
  }
  if (p.schedule != Schedule::kGpipe && p.gbs / (int64_t{larger_mbs} * p.dp) >= depth) return mem.peak_bytes;
  const MemoryBreakdown& b = mem.stages[static_cast<size_t>(mem.peak_stage)].breakdown;
  const double keep = static_cast<double>(p.mbs) / larger_mbs;
  return mem.peak_bytes - (1 - keep) * (b.activations + b.other);
}

MoeDispatcher flex_dispatcher_to_try(const SearchOptions& o, const ModelSpec& m, const ClusterSpec& c,
                                     const Plan& plan) {
  if (o.moe_dispatcher_given || (o.framework != Framework::kMegatronCore && o.framework != Framework::kTorchtitan) ||
      !m.has_moe || plan.moe_dispatcher != MoeDispatcher::kAllToAll || !plan.stage_layers.empty() ||
      plan.cuda_graph != 0 || int64_t{plan.ep} * std::max(1, plan.etp) <= c.gpus_per_node) {
    return MoeDispatcher::kAllToAll;
  }
  return c.gpus_per_node > 8 ? MoeDispatcher::kHybridEp : MoeDispatcher::kDeepEp;
}

namespace {


std::string limit_of(const StepReport& r) {
  const TimeBreakdown& b = r.breakdown;
  const std::pair<double, const char*> parts[] = {{b.bubble, "pipeline bubble"},
                                                  {b.tp_comm, "TP communication"},
                                                  {b.ep_comm, "MoE token all-to-all"},
                                                  {b.pp_comm, "PP communication"},
                                                  {b.dp_comm, "exposed DP communication"},
                                                  {b.optimizer, "optimizer step"}};
  const auto* worst = &parts[0];
  for (const auto& p : parts) {
    if (p.first > worst->first) worst = &p;
  }
  std::string s;
  if (worst->first < 0.05 * r.step_time_s) {
    s = "compute-bound (" + fmt("%.0f%%", 100 * b.compute / r.step_time_s) + " of the step in kernels)";
  } else {
    s = std::string("limited by ") + worst->second + " (" + fmt("%.1f%%", 100 * worst->first / r.step_time_s) +
        " of the step)";
  }
  if (r.moe_load > 1.02) s += "; busiest expert rank carries " + fmt("%.2fx", r.moe_load) + " the mean token load";
  // Host-bound layers (LayerTimes::host_bound_ps): the GPU waits for the
  // host's launches.
  const int64_t dense_ps = r.dense_layers ? r.layer.host_bound_ps : 0;
  const int64_t host_ps = std::max(dense_ps, r.moe_layer.host_bound_ps);
  if (host_ps > 0) {
    s += "; host-bound: " + std::string(r.moe_layer.host_bound_ps >= dense_ps ? "an MoE" : "a") +
         " layer's op calls take " + fmt("%.2f ms", static_cast<double>(host_ps) * 1e-9) +
         " more than its GPU time per micro-batch";
  }
  const double free_gib = to_gib(r.capacity_bytes - r.peak_memory_bytes);
  s += "; " + fmt("%.1f GiB free per GPU", free_gib);
  if (free_gib < 0.1 * to_gib(r.capacity_bytes)) s += " (tight: fragmentation may OOM)";
  return s;
}

std::string why_slower(const StepReport& loser, const StepReport& winner) {
  const TimeBreakdown& a = loser.breakdown;
  const TimeBreakdown& w = winner.breakdown;
  const std::pair<double, const char*> parts[] = {{a.compute - w.compute, "more compute time (recompute or smaller GEMMs)"},
                                                  {a.tp_comm - w.tp_comm, "TP communication"},
                                                  {a.ep_comm - w.ep_comm, "MoE token all-to-all"},
                                                  {a.pp_comm - w.pp_comm, "PP communication"},
                                                  {a.dp_comm - w.dp_comm, "DP communication exposed"},
                                                  {a.bubble - w.bubble, "pipeline bubble"},
                                                  {a.optimizer - w.optimizer, "optimizer step"}};
  const auto* worst = &parts[0];
  for (const auto& p : parts) {
    if (p.first > worst->first) worst = &p;
  }
  const double slower = loser.step_time_s / winner.step_time_s - 1;
  if (slower < 0.005) return "ties with the best (within 0.5%)";
  // The whole difference, then the part that grew most (it may exceed the
  // whole where other parts shrank: a plan with less TP communication but
  // more compute).
  std::string why = fmt("%.0f%% slower", 100 * slower) +
                    fmt(" (+%.3g s per step)", loser.step_time_s - winner.step_time_s) + ", mostly " + worst->second +
                    fmt(" (+%.3g s)", worst->first);
  if (loser.moe_load > winner.moe_load + 0.02) {
    why += fmt("; expert imbalance: busiest expert rank %.2fx the mean load", loser.moe_load) +
           fmt(" vs %.2fx", winner.moe_load);
  }
  return why;
}

// Why a family's best plan ranks below the winner when the ranking is not
// by step time: by expected time to train (failures), or to a target loss
// (async DP).  The ranking's own figure first, then what makes it: a
// slower step (why_slower), or, with a step no slower, the failures of its
// world (goodput) or its stale gradients (per-sample efficiency).
std::string why_ranked_lower(const Scored& loser, const RankedPlan& winner) {
  if (!std::isfinite(loser.score_s)) return "never finishes (its expected time is unbounded)";
  const double worse = loser.score_s / winner.score_s - 1;
  if (worse < 0.005) return "ties with the best (within 0.5%)";
  const bool async = loser.has_convergence || winner.has_convergence;
  std::string s;
  if (loser.faults.has_time_to_train) {
    const double hours = (loser.score_s - winner.score_s) / 3600;
    s = fmt("%.0f%% longer ", 100 * worse) + (async ? "to the target loss" : "to train") +
        (hours >= 48 ? fmt(" (+%.3g days expected)", hours / 24) : fmt(" (+%.3g h expected)", hours));
  } else if (async) {
    // No tokens to train on: the score is per step, over the per-sample
    // efficiency for async plans (SearchOptions::convergence).
    s = fmt("%.0f%% longer to the target loss", 100 * worse) +
        fmt(" (%.3g s per synchronous step's progress", loser.score_s) + fmt(" against %.3g)", winner.score_s);
  } else {
    // Stragglers alone: the step with their tax.
    s = fmt("%.0f%% slower with stragglers", 100 * worse) + fmt(" (%.3g s per step", loser.score_s) +
        fmt(" against %.3g)", winner.score_s);
  }
  const StepReport& a = loser.report;
  const StepReport& w = winner.report;
  const FaultReport& lf = loser.faults;
  const FaultReport& wf = winner.faults;
  // Its world's failures, where they cost it goodput against the winner's.
  const bool fails_more = lf.has_failures && wf.has_failures && lf.goodput < wf.goodput - 0.005;
  const std::string failures = std::to_string(loser.cand->gpus) + " GPUs fail" +
                               fmt(" %.3g times an hour", lf.failures.rate_per_hour) +
                               fmt(" against %.3g", wf.failures.rate_per_hour) +
                               fmt(" (goodput %.1f%%", 100 * lf.goodput) + fmt(" vs %.1f%%)", 100 * wf.goodput);
  if (a.step_time_s >= w.step_time_s * 1.005) {
    return s + ": step " + why_slower(a, w) + (fails_more ? "; and its " + failures : "");
  }
  const double shorter = 100 * (1 - a.step_time_s / w.step_time_s);
  if (fails_more) return s + fmt(": its step is %.0f%% shorter, but its ", shorter) + failures;
  if (loser.has_convergence && loser.convergence.converges) {
    return s + fmt(": its step is %.0f%% shorter, but stale gradients make a sample worth", shorter) +
           fmt(" %.2f of a synchronous one", loser.convergence.sample_efficiency);
  }
  return s + fmt(": its step is %.0f%% shorter, its failures and checkpoints cost more", shorter);
}

// Between two equivalent plans, the one a user would rather run: fewer
// features, then lower ZeRO stage, no context parallel, smaller model
// parallel degrees, less recomputation, enumeration order last.
bool simpler(const Plan& a, const Plan& b) {
  auto key = [](const Plan& p) {
    const int features = (p.tp > 1) + (p.pp > 1) + (p.cp > 1) + (p.vp > 1) + (p.zero > 0) + (p.shard_group > 0) +
                         (p.offload != Offload::kNone) + (p.recompute != Recompute::kNone) + (p.sp ? 1 : 0) +
                         (p.dp_mode != DpMode::kSync) + (p.tp_comm_overlap ? 1 : 0) + (p.ep_overlap ? 1 : 0) +
                         (p.stage_layers.empty() ? 0 : 1) + (p.cuda_graph != 0 ? 1 : 0) +
                         (p.moe_dispatcher != MoeDispatcher::kAllToAll ? 1 : 0) +
                         (p.cp_comm != CpComm::kP2p ? 1 : 0);
    return std::make_tuple(features, p.zero, p.cp, p.tp, p.pp, p.vp, static_cast<int>(p.recompute),
                           static_cast<int>(p.offload), p.shard_group, p.mbs);
  };
  return key(a) < key(b);
}

}  // namespace

std::string plan_family(const Plan& p) {
  if (p.dp_mode == DpMode::kAsync) return "async DP (parameter servers)";
  if (p.schedule == Schedule::kNaive && p.pp > 1) return "naive model parallel";
  if (p.tp == 1 && p.pp == 1) {
    if (p.dp * p.cp == 1) return "single GPU";
    if (p.zero == 0) return "plain DDP";
    if (p.zero <= 2) return "ZeRO-1/2";
    return p.shard_group > 0 ? "FSDP hybrid shard" : "ZeRO-3 / FSDP without TP";
  }
  if (p.pp == 1) return "TP";
  if (p.tp == 1) return "PP";
  return "TP + PP";
}

std::string plan_label(const Plan& p) {
  const std::string family = plan_family(p);
  // The dimensions the plan really splits over, in Megatron's order.
  std::string dims;
  auto add = [&dims](int degree, const char* dim) {
    if (degree <= 1) return;
    if (!dims.empty()) dims += " + ";
    dims += dim;
  };
  add(p.tp, "TP");
  add(p.pp, "PP");
  add(p.cp, "CP");
  add(p.dp, "DP");
  if (p.dp_mode == DpMode::kAsync || (p.schedule == Schedule::kNaive && p.pp > 1) || family == "single GPU") {
    return family;
  }
  if (p.tp == 1 && p.pp == 1) return p.cp > 1 ? family + " (" + dims + ")" : family;
  if (p.tp > 1 && p.pp > 1 && p.dp > 1) dims = "3D (" + dims + ")";
  if (p.zero == 3 && p.dp * p.cp > 1) dims += p.shard_group > 0 ? ", hybrid-sharded" : ", ZeRO-3";
  if (zero_bubble(p.schedule)) dims += std::string(", ") + to_string(p.schedule);
  return dims;
}

namespace {

// Runs fn(0) .. fn(n - 1) on up to `workers` threads (this one included),
// each index once; an exception is rethrown here, on the calling thread
// (the first by index).
void run_in_parallel(size_t workers, size_t n, const std::function<void(size_t)>& fn) {
  std::vector<std::exception_ptr> errors(n);
  std::atomic<size_t> cursor{0};
  auto work = [&]() {
    for (size_t i = cursor++; i < n; i = cursor++) {
      try {
        fn(i);
      } catch (...) {
        errors[i] = std::current_exception();
      }
    }
  };
  std::vector<std::thread> pool;
  for (size_t t = 1; t < std::min(workers, n); ++t) pool.emplace_back(work);
  work();
  for (std::thread& t : pool) t.join();
  for (const std::exception_ptr& e : errors) {
    if (e) std::rethrow_exception(e);
  }
}

// The smallest N (recomputing the first N layers of each model chunk) with
// which the full-recompute layout `L` still fits, or 0 where none helps:
// the layout fits without recompute (that plan is searched already), or
// only recomputing every layer fits.  Memory falls as N grows.  `sc` and
// `none`: the step costs of the layout and of its plan without recompute
// (partial_recompute_part; the embedding and output layer do not depend on
// recompute).
int smallest_fitting_recompute_layers(const ModelSpec& m, const ClusterSpec& c, const Layout& L, const StepCosts& sc,
                                      const StepCosts& none) {
  const int largest = largest_chunk_layers(L.plan, L.stage_layers);
  if (largest < 2) return 0;
  const LayerCost& plain = none.layer;
  const LayerCost& plain_moe = m.has_moe ? none.moe_layer : none.layer;
  Layout t = L;  // one copy, its recompute set per probe
  auto fits = [&](int n) {
    t.plan.recompute = n == 0 ? Recompute::kNone : Recompute::kFull;
    t.plan.recompute_layers = n;
    if (n == 0) return estimate_memory(m, c, t, plain, plain_moe, sc.embedding, sc.output).fits;
    return estimate_memory(m, c, t, sc.layer, m.has_moe ? sc.moe_layer : sc.layer, sc.embedding, sc.output, &plain,
                           &plain_moe)
        .fits;
  };
  if (fits(0) || !fits(largest - 1)) return 0;
  int lo = 1, hi = largest - 1;  // fits(hi)
  while (lo < hi) {
    const int mid = (lo + hi) / 2;
    if (fits(mid)) hi = mid;
    else lo = mid + 1;
  }
  return hi;
}

}  // namespace

SearchResult search_plans(const ModelSpec& m, const ClusterSpec& c, int gpus, const SearchOptions& o) {
  if (o.gbs < 1) throw_input_error("--gbs", "", "must be >= 1", "");
  if (o.top_k < 1) throw_input_error("--top", "", "must be >= 1", "");
  const auto t0 = std::chrono::steady_clock::now();
  SearchResult res;
  std::vector<Plan> plans;
  std::vector<int> world_of_plan;
  const FaultConfig& fc = o.faults;
  for (int world : world_sizes(c, gpus, fc.failures_given)) {
    std::vector<Plan> more = enumerate(m, c, world, o, &world_of_plan);
    for (Plan& p : more) plans.push_back(std::move(p));
  }
  res.evaluated = static_cast<int64_t>(plans.size());

  // Step costs depend on the plan's layer shape only (step_costs.h): cached by it.
  // Partial full recompute also depends on which layers of each chunk are
  // recomputed: the count and the plan's chunking (pp, vp, schedule, stage split).
  using ShapeKey = std::tuple<int, int, bool, int64_t, int64_t, int, int, int, uint16_t, int, bool, int, int, double, int,
                              int, int, int, bool, bool, int, bool, std::vector<int>, int, bool, bool, bool, bool>;
  // Whether the framework's ZeRO-3 costs differ from its other stages' (FSDP2's copies).
  const bool zero3_costs = [&] {
    Plan z;
    z.framework = o.framework;
    z.zero = 3;
    return execution_profile(z).fsdp2_copies;
  }();
  auto shape_key = [zero3_costs](const LayerShape& x, const Plan& p) {
    const bool partial = p.recompute_layers > 0;
    return ShapeKey{x.tp, x.cp, x.sp, x.mbs, x.seq, static_cast<int>(x.precision), static_cast<int>(x.attention),
                    static_cast<int>(x.recompute), x.recompute_modules, static_cast<int>(x.fp8_recipe),
                    x.fp8_saved_inputs, x.ep, x.etp, x.moe_load, p.recompute_layers, partial ? p.pp : 0,
                    partial ? p.vp : 0, partial ? static_cast<int>(p.schedule) : 0, p.tp_comm_overlap,
                    zero3_costs && p.zero == 3, static_cast<int>(x.dispatcher), x.pad_to_capacity,
                    partial ? p.stage_layers : std::vector<int>{}, static_cast<int>(x.cuda_graph), x.cp_a2a,
                    x.router_fusion, x.shared_expert_overlap, x.loss_fusion};
  };
  // The cached costs live as long as the search: references to them hold.
  std::map<ShapeKey, std::shared_ptr<const StepCosts>> cost_cache;
  std::shared_mutex cost_mu;  // lookups share it; an insertion holds it alone
  // The costs of a plan's shape, computed once (on whichever thread asks
  // first; a thread that loses the race drops its copy).  A partial-recompute
  // plan's costs are made of those of its two parts (every layer recomputed,
  // none), which other plans share; the part without recompute is shared,
  // not copied (StepCosts::without_recompute).
  std::function<std::shared_ptr<const StepCosts>(const Plan&)> shared_costs_of =
      [&](const Plan& p) -> std::shared_ptr<const StepCosts> {
    const ShapeKey key = shape_key(layer_shape(p), p);
    {
      std::shared_lock<std::shared_mutex> lock(cost_mu);
      auto cit = cost_cache.find(key);
      if (cit != cost_cache.end()) return cit->second;
    }
    StepCosts made;
    if (p.recompute == Recompute::kFull && p.recompute_layers > 0) {
      StepCosts all = *shared_costs_of(partial_recompute_part(p, true));
      made = partial_recompute_step_costs(m, p, std::move(all), shared_costs_of(partial_recompute_part(p, false)));
    } else {
      made = step_costs(m, c, p);
    }
    auto shared = std::make_shared<const StepCosts>(std::move(made));
    std::unique_lock<std::shared_mutex> lock(cost_mu);
    return cost_cache.emplace(key, std::move(shared)).first->second;
  };
  auto costs_of = [&](const Plan& p) -> const StepCosts& { return *shared_costs_of(p); };
  // A layout's memory from its cached costs.  An automatic zero-bubble plan
  // is sized by its scheduler's memory limit, an upper bound of what
  // `memory` prints (plan_memory), which would need a lowering (stage times
  // and schedule) for every such candidate.  A partial full recompute's
  // layers without recompute: its costs hold them.
  auto memory_of = [&m, &c](const Layout& L, const StepCosts& sc) {
    const Plan& p = L.plan;
    const bool partial = p.recompute == Recompute::kFull && p.recompute_layers > 0;
    return estimate_memory(m, c, L, sc.layer, m.has_moe ? sc.moe_layer : sc.layer, sc.embedding, sc.output,
                           partial ? &sc.plain_layer() : nullptr, partial ? &sc.plain_moe_layer() : nullptr);
  };
  // work_balanced_split_of per (costs, default split): the plans of one shape
  // and pipeline share it.
  std::map<std::pair<const StepCosts*, std::vector<int>>, std::vector<int>> balanced_cache;
  std::mutex balanced_mu;
  auto balanced_split_of = [&](const StepCosts& sc, const std::vector<int>& default_split) {
    auto key = std::make_pair(&sc, default_split);
    {
      std::lock_guard<std::mutex> lock(balanced_mu);
      auto it = balanced_cache.find(key);
      if (it != balanced_cache.end()) return it->second;
    }
    std::vector<int> split = work_balanced_split_of(m, sc, default_split);
    std::lock_guard<std::mutex> lock(balanced_mu);
    return balanced_cache.emplace(std::move(key), std::move(split)).first->second;
  };
  // One plan's evaluation: all that depends on that plan alone, so that
  // blocks of plans are evaluated on several threads and then taken in
  // enumeration order (the outcome does not depend on the thread count).
  struct Evaluation {
    enum class Outcome { kInvalid, kRefused, kNoMemory, kDiverges, kCandidate };
    Outcome outcome = Outcome::kInvalid;
    std::string reject_key, reject_example;  // kInvalid, kRefused, kDiverges
    Layout layout;                           // kNoMemory, kDiverges, kCandidate
    double peak_bytes = 0;
    bool out_of_gpu_memory = false;          // kNoMemory: GPU memory (else host memory)
    bool larger_microbatch_may_fit = false;  // kNoMemory: the next micro-batch is worth a try
    std::string host_memory_reason;          // kNoMemory in host memory: MemoryReport::reason
    std::string family;
    int partial_layers = 0;                  // a partial full recompute that fits: its N (0: none)
    std::vector<int> balanced_stages;        // the work-balanced stage split to try too (empty: none)
    uint8_t cuda_graph = 0;                  // the CUDA graphs to try too (0: none)
    MoeDispatcher dispatcher = MoeDispatcher::kAllToAll;  // the dispatcher to try too (kAllToAll: none)
    Candidate candidate;                     // kCandidate
  };
  auto evaluate = [&](size_t i) {
    Evaluation ev;
    Plan plan = plans[i];
    plan.framework = o.framework;
    Layout L = resolve_plan(m, c, world_of_plan[i], plan);
    if (!L.feasible) {
      ev.reject_key = "invalid: " + rule_of(L.reasons.front());
      ev.reject_example = L.reasons.front();
      return ev;
    }
    // The framework's own rules (its exporter's refusals).
    if (o.framework != Framework::kGeneric) {
      if (std::optional<std::string> why = framework_refusal(m, c, L)) {
        ev.outcome = Evaluation::Outcome::kRefused;
        ev.reject_key = std::string(to_string(o.framework)) + " cannot run it: " + rule_of(*why);
        ev.reject_example = *why;
        return ev;
      }
    }
    const Plan& p = L.plan;
    const StepCosts& sc = costs_of(p);
    const MemoryReport mem = memory_of(L, sc);
    ev.family = plan_family(p);
    ev.peak_bytes = mem.peak_bytes;
    if (!mem.fits) {
      ev.outcome = Evaluation::Outcome::kNoMemory;
      ev.out_of_gpu_memory = mem.peak_bytes > mem.capacity_bytes;
      if (const int next = next_microbatch(plan); next > 0 && ev.out_of_gpu_memory) {
        ev.larger_microbatch_may_fit = larger_microbatch_peak_lower_bound(p, mem, next) <= mem.capacity_bytes;
      }
      if (!ev.out_of_gpu_memory) ev.host_memory_reason = mem.reason();
      ev.layout = std::move(L);
      return ev;
    }
    // The same layout with its stages balanced by their work, searched as
    // one more plan (appended below) where that lightens the costliest stage.
    // Only where the default split fits: the balanced one moves layers off the
    // last stage onto the earlier ones, whose in-flight micro-batches set the
    // peak under 1F1B.
    if (work_balanced_split_applies(plan, L)) ev.balanced_stages = balanced_split_of(sc, L.stage_layers);
    // Under Megatron-Core, a layout whose layers are host-bound is searched
    // with per-layer CUDA graphs too (cuda_graphs_to_try).
    if (o.framework == Framework::kMegatronCore) ev.cuda_graph = cuda_graphs_to_try(m, plan, L, sc);
    // And, where the user named no dispatcher, with the deduplicating one.
    ev.dispatcher = flex_dispatcher_to_try(o, m, c, plan);
    // Partial full recompute: where this layout fits only with full
    // recompute, recomputing the first N layers of each chunk (Megatron's
    // block method) with the smallest N that fits trades less recompute for
    // the memory left; searched as one more plan (its memory falls as N
    // grows, so a bisection finds it).
    if (p.recompute == Recompute::kFull && p.recompute_layers == 0 && p.dp_mode == DpMode::kSync) {
      ev.partial_layers = smallest_fitting_recompute_layers(m, c, L, sc, costs_of(partial_recompute_part(p, false)));
    }
    std::vector<double> stage_params, stage_expert_params;
    stage_params_of(mem, &stage_params, &stage_expert_params);
    const double lb = static_cast<double>(step_time_lower_bound(m, c, L, sc, stage_params, stage_expert_params)) * 1e-12;
    double score_bound = lb;
    if (p.dp_mode == DpMode::kAsync) {
      // Equal workers are each dp - 1 updates stale: a plan that diverges
      // there cannot train (the simulated staleness is checked again below).
      const AsyncConvergence ac = async_convergence(o.convergence, p.dp, p.dp - 1.0);
      if (!ac.converges) {
        ev.outcome = Evaluation::Outcome::kDiverges;
        ev.reject_key = "async DP diverges: staleness " + std::to_string(p.dp - 1) + " with lr=" +
                        async_lr_name(o.convergence.lr);
        ev.layout = std::move(L);
        return ev;
      }
      score_bound /= async_efficiency_bound(o.convergence, p.dp);
    }
    if (fc.train_tokens > 0) {
      // Expected time to train >= steps * step / best goodput (faults.h).
      const double steps = std::ceil(fc.train_tokens / (static_cast<double>(p.gbs) * static_cast<double>(p.seq)));
      score_bound = lb * steps / goodput_upper_bound(m, c, L, fc);
    }
    const double per_step = lb > 0 ? score_bound / lb : 1.0;
    ev.outcome = Evaluation::Outcome::kCandidate;
    ev.candidate = Candidate{i, world_of_plan[i], lb, mem.peak_bytes, nullptr, score_bound, &sc, per_step, nullptr};
    ev.layout = std::move(L);
    return ev;
  };
  const size_t workers = std::max<size_t>(1, std::min<size_t>(8, std::thread::hardware_concurrency()));
  std::vector<Candidate> candidates;
  std::set<std::string> family_names;  // Candidate::family points into it
  std::map<std::string, double> family_min_peak;
  std::map<std::string, Plan> family_min_peak_plan;  // the plan of that peak, for its label
  // Why that plan does not fit where it is the host's memory, not the GPU's
  // (an offloaded plan): MemoryReport::reason.
  std::map<std::string, std::string> family_min_peak_host_reason;
  std::optional<Plan> min_peak_plan;  // the valid plan closest to fitting
  double min_peak = std::numeric_limits<double>::infinity();
  int min_peak_world = gpus;
  // Blocks of plans: evaluated in parallel, then taken in order.  The
  // partial-recompute plans a block adds are appended, so a later block
  // takes them.
  constexpr size_t kBlock = 4096;
  std::vector<Evaluation> evaluations;
  int64_t dropped_variants = 0;  // variants refused: not counted as evaluated
  // The plans the loop appends: variants of a plan that fits (a stage
  // split, graphs, a dispatcher, overlap, partial recompute), and the next
  // micro-batch of an enumerated plan (a base plan too) unless it cannot
  // fit where this one does not.
  std::vector<uint8_t> base_plan(plans.size(), 1);
  auto append = [&](Plan p, size_t from, bool base) {
    plans.push_back(std::move(p));
    world_of_plan.push_back(world_of_plan[from]);
    base_plan.push_back(base ? 1 : 0);
  };
  auto append_larger_microbatch = [&](size_t i) {
    if (const int mbs = next_microbatch(plans[i])) {
      Plan larger = plans[i];
      larger.mbs = mbs;
      append(std::move(larger), i, true);
    }
  };
  for (size_t begin = 0, n = 0; begin < plans.size(); begin += n) {
    if (o.progress) o.progress("evaluating", static_cast<int64_t>(begin), static_cast<int64_t>(plans.size()));
    n = std::min(kBlock, plans.size() - begin);
    evaluations.assign(n, Evaluation{});
    run_in_parallel(workers, n, [&](size_t k) { evaluations[k] = evaluate(begin + k); });
    for (size_t k = 0; k < n; ++k) {
      Evaluation& ev = evaluations[k];
      const size_t i = begin + k;
      using Outcome = Evaluation::Outcome;
      if (ev.outcome == Outcome::kInvalid || ev.outcome == Outcome::kRefused) {
        // A work-balanced, graphed, overlapped or flex-dispatcher variant (the
        // only plans the search gives a stage split, CUDA graphs, TP or EP
        // overlap or, unasked, a flex dispatcher) that the plan rules or the
        // framework refuse is one try less, not a layout the user asked about.
        if (!plans[i].stage_layers.empty() || plans[i].cuda_graph != 0 || plans[i].tp_comm_overlap ||
            plans[i].ep_overlap ||
            (plans[i].cp_comm == CpComm::kA2a && o.framework != Framework::kDeepSpeed) ||  // DeepSpeed's are enumerated
            (!o.moe_dispatcher_given && plans[i].moe_dispatcher != MoeDispatcher::kAllToAll)) {
          dropped_variants += 1;
          continue;
        }
        if (res.rejected[ev.reject_key]++ == 0) res.rejected_example[ev.reject_key] = ev.reject_example;
        // A rule may refuse one micro-batch and not the next (the
        // interleaved schedule's micro-batch count).
        if (base_plan[i]) append_larger_microbatch(i);
        continue;
      }
      res.valid += 1;
      const Layout& lay = ev.layout;
      auto it = family_min_peak.find(ev.family);
      if (it == family_min_peak.end() || ev.peak_bytes < it->second) {
        family_min_peak[ev.family] = ev.peak_bytes;
        family_min_peak_plan[ev.family] = lay.plan;
        family_min_peak_host_reason[ev.family] = ev.host_memory_reason;
      }
      if (ev.peak_bytes < min_peak) {
        min_peak = ev.peak_bytes;
        min_peak_plan = lay.plan;
        min_peak_world = world_of_plan[i];
      }
      if (ev.outcome == Outcome::kNoMemory) {
        res.rejected[ev.out_of_gpu_memory ? "out of GPU memory" : "out of host memory (offload)"] += 1;
        // Out of GPU memory, the next micro-batch is tried where its lower
        // bound says it may still fit (larger_microbatch_peak_lower_bound);
        // the host's memory does not depend on it.
        if (base_plan[i] && ev.larger_microbatch_may_fit) append_larger_microbatch(i);
        continue;
      }
      res.feasible += 1;
      if (base_plan[i]) {
        append_larger_microbatch(i);
        for (Plan& v : overlap_variants_to_try(o, c, plans[i])) append(std::move(v), i, false);
      }
      if (!ev.balanced_stages.empty()) {
        Plan balanced = plans[i];
        balanced.stage_layers = std::move(ev.balanced_stages);
        append(std::move(balanced), i, false);
      }
      if (ev.dispatcher != MoeDispatcher::kAllToAll) {
        Plan flex = plans[i];
        flex.moe_dispatcher = ev.dispatcher;
        append(std::move(flex), i, false);
      }
      if (ev.cuda_graph != 0) {
        Plan graphed = plans[i];
        graphed.cuda_graph = ev.cuda_graph;
        append(std::move(graphed), i, false);
      }
      if (ev.partial_layers > 0) {
        Plan partial = plans[i];
        partial.recompute_layers = ev.partial_layers;
        append(std::move(partial), i, false);
      }
      if (ev.outcome == Outcome::kDiverges) {
        res.rejected[ev.reject_key] += 1;
        continue;
      }
      ev.candidate.family = &*family_names.insert(ev.family).first;
      candidates.push_back(std::move(ev.candidate));
    }
  }
  // With the partial-recompute, work-balanced, graphed and flex-dispatcher plans added.
  res.evaluated = static_cast<int64_t>(plans.size()) - dropped_variants;
  res.min_peak_bytes = std::isfinite(min_peak) ? min_peak : 0;
  res.evaluate_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();

  // Branch and bound over the lower bound of the score.  The candidates stay
  // where they are (moving a million of them costs more than the sort); rank
  // k of the (bound, enumeration) order is candidates[order[k]].
  std::vector<size_t> order(candidates.size());
  std::iota(order.begin(), order.end(), size_t{0});
  std::sort(order.begin(), order.end(), [&candidates](size_t a, size_t b) {
    const Candidate& x = candidates[a];
    const Candidate& y = candidates[b];
    return x.score_bound_s != y.score_bound_s ? x.score_bound_s < y.score_bound_s : x.index < y.index;
  });
  auto ranked_candidate = [&candidates, &order](size_t k) -> Candidate& { return candidates[order[k]]; };
  std::vector<Scored> best;  // sorted by (score, index)
  std::map<std::string, Scored> family_best;
  SimulateOptions so;
  // A candidate's layout and stages' parameters, made again from its plan
  // as its evaluation made them, once the branch and bound reaches it (on
  // one thread: the batches below read what it made).
  auto materialize = [&](Candidate& cand) {
    if (cand.detail) return;
    auto d = std::make_shared<CandidateDetail>();
    Plan plan = plans[cand.index];
    plan.framework = o.framework;
    d->layout = resolve_plan(m, c, cand.gpus, plan);
    stage_params_of(memory_of(d->layout, *cand.costs), &d->stage_params, &d->stage_expert_params);
    cand.detail = std::move(d);
  };
  auto simulate = [&](Candidate& cand) {
    materialize(cand);
    res.simulated += 1;
    return simulate_step(m, c, cand.detail->layout, so);
  };
  std::map<size_t, Scored> scored;  // by candidate index: each plan is simulated once
  // A simulated plan's score: its step time, or expected time to train with
  // faults; an async plan's divided by its per-sample efficiency (time to a
  // target loss), +inf if its simulated staleness diverges.
  auto score_of = [&](Candidate& cand, StepReport report) {
    Scored sc;
    sc.cand = &cand;
    sc.report = std::move(report);
    sc.score_s = sc.report.step_time_s;
    const Layout& L = cand.detail->layout;
    if (fc.any()) {
      const double tokens = static_cast<double>(L.plan.gbs) * static_cast<double>(L.plan.seq);
      sc.faults = evaluate_faults(m, c, L, sc.report.step_time_s, tokens, fc, false);
      sc.score_s = fc.train_tokens > 0 ? sc.faults.time_to_train_expected_s : sc.faults.step_s;
    }
    if (L.plan.dp_mode == DpMode::kAsync) {
      sc.has_convergence = true;
      sc.convergence = async_convergence(o.convergence, L.plan.dp, sc.report.staleness.mean);
      sc.score_s = sc.convergence.converges ? sc.score_s / sc.convergence.sample_efficiency
                                            : std::numeric_limits<double>::infinity();
    }
    return sc;
  };
  // Why a simulated plan's score is infinite: its asynchronous staleness
  // diverges, or failures come too often for it ever to finish (the fault
  // model's own sentence, FailureReport::cannot_run, is the example).
  int64_t never_finished = 0;
  auto never_finishes = [&](const Scored& sc) -> std::string {
    if (sc.has_convergence && !sc.convergence.converges) return "async DP diverges at its simulated staleness";
    const std::string reason = "never finishes at these failure rates (expected time to train is unbounded)";
    const std::string& why = sc.faults.failures.cannot_run;
    if (!why.empty() && !res.rejected_example.count(reason)) res.rejected_example[reason] = why;
    return reason;
  };
  auto score = [&](Candidate& cand) {
    materialize(cand);
    auto hit = scored.find(cand.index);
    if (hit != scored.end()) return hit->second;
    Scored sc = score_of(cand, simulate(cand));
    if (fc.failures_given) scored.emplace(cand.index, sc);
    return sc;
  };
  // The top K counts groups of exactly tied plans (the same simulated
  // score, e.g. dp 8 and dp 4 x cp 2 when both are compute-bound) as one:
  // the K-th distinct score, +inf while fewer than K are known.
  auto kth_score = [&best, &o]() {
    int groups = 0;
    for (size_t i = 0; i < best.size(); ++i) {
      if (i == 0 || best[i].score_s != best[i - 1].score_s) groups += 1;
      if (groups == o.top_k) return best[i].score_s;
    }
    return std::numeric_limits<double>::infinity();
  };
  int64_t considered = 0;
  // Candidates are simulated in batches, one per hardware thread, then
  // taken in bound order exactly as one at a time would take them: a batch
  // member whose bound exceeds the K-th score once its predecessors are in is
  // dropped with the rest of the batch, so the top K, the order and the count
  // of plans taken do not depend on the thread count (only the wall time).
  bool stop = false;
  // Two bounds per plan: the cheap one every candidate has (sorted above),
  // and a tighter one (pipelined plans: their own schedule run with compute
  // times only; step_costs.h) computed only for the plans that reach the
  // front.  A min-heap holds each candidate first by its cheap bound; popped,
  // it goes back by its tight bound; popped again, it is simulated.  So the
  // plans are simulated in the order of their tight bounds, and the search
  // stops when the smallest bound left exceeds the K-th score.
  struct Entry {
    double key;
    size_t k;
    bool refined;
    bool operator>(const Entry& o) const {
      return key != o.key ? key > o.key : k != o.k ? k > o.k : refined > o.refined;
    }
  };
  std::priority_queue<Entry, std::vector<Entry>, std::greater<Entry>> front;
  for (size_t k = 0; k < candidates.size(); ++k) front.push(Entry{ranked_candidate(k).score_bound_s, k, false});
  std::vector<double> tight(candidates.size(), 0.0);
  // The engine runs of the last few distinct lowered steps, by fingerprint
  // (equivalent plans have equal bounds, so they come out of the heap
  // together).
  constexpr size_t kRecentRuns = 4;
  std::deque<std::pair<uint64_t, std::shared_ptr<EngineResult>>> recent_runs;
  while (!front.empty() && !stop) {
    const double kth_now = kth_score();
    std::vector<size_t> batch;
    while (!front.empty() && batch.size() < workers && front.top().key <= kth_now) {
      const Entry e = front.top();
      front.pop();
      if (e.refined) {
        batch.push_back(e.k);
        continue;
      }
      Candidate& cand = ranked_candidate(e.k);
      materialize(cand);
      const CandidateDetail& d = *cand.detail;
      const int64_t ps = pipeline_step_lower_bound(m, c, d.layout, *cand.costs, d.stage_params, d.stage_expert_params);
      tight[e.k] = std::max(cand.score_bound_s, static_cast<double>(ps) * 1e-12 * cand.score_per_step_bound);
      front.push(Entry{tight[e.k], e.k, true});
    }
    if (batch.empty()) break;
    if (o.progress) o.progress("simulating", considered, static_cast<int64_t>(candidates.size()));
    const size_t n = batch.size();
    std::vector<Scored> results(n);
    auto in_parallel = [&](const std::vector<size_t>& items, const std::function<void(size_t)>& fn) {
      run_in_parallel(workers, items.size(), [&](size_t i) { fn(items[i]); });
    };
    std::vector<size_t> all(n);
    for (size_t k = 0; k < n; ++k) all[k] = k;
    // 1. Lower each member; its lowered step's bound (its compute streams'
    //    and comm channels' busy time, in score units) keeps a plan it puts
    //    above the K-th score from running.
    //    A step long enough to reach a steady state is simulated from
    //    three short probes instead (simulate_steady_state).
    std::vector<LoweredStep> steps(n);
    std::vector<double> lowered(n, 0.0);
    std::vector<uint64_t> prints(n, 0);
    std::vector<std::optional<StepReport>> steady(n);
    in_parallel(all, [&](size_t k) {
      Candidate& cand = ranked_candidate(batch[k]);
      steady[k] = simulate_steady_state(m, c, cand.detail->layout, so);
      if (steady[k]) return;
      steps[k] = lower_for_simulation(m, c, cand.detail->layout, so);
      lowered[k] = static_cast<double>(lowered_step_lower_bound_ps(steps[k], cand.detail->layout)) * 1e-12 *
                   cand.score_per_step_bound;
      if (lowered[k] <= kth_now) prints[k] = lowered_step_fingerprint(steps[k]);
    });
    // 2. Equivalent plans (dp 8 mbs 2 and dp 4 cp 2 mbs 4 often lower to the
    //    same step): the engine runs once per distinct lowered step, here or
    //    in a recent batch.
    std::vector<const EngineResult*> engine(n, nullptr);
    std::vector<std::shared_ptr<EngineResult>> fresh(n);
    std::vector<double> wall(n, 0.0);
    std::vector<size_t> to_run;
    std::vector<size_t> same_as(n, n);
    for (size_t k = 0; k < n; ++k) {
      if (steady[k] || lowered[k] > kth_now) continue;
      for (const auto& [print, result] : recent_runs) {
        if (print == prints[k]) engine[k] = result.get();
      }
      for (size_t j = 0; j < k && engine[k] == nullptr && same_as[k] == n; ++j) {
        if (!steady[j] && lowered[j] <= kth_now && same_as[j] == n && prints[j] == prints[k] && engine[j] == nullptr) {
          same_as[k] = j;
        }
      }
      if (engine[k] == nullptr && same_as[k] == n) to_run.push_back(k);
    }
    in_parallel(to_run, [&](size_t k) {
      fresh[k] = std::make_shared<EngineResult>(run_lowered(steps[k], &wall[k]));
      engine[k] = fresh[k].get();
    });
    for (size_t k = 0; k < n; ++k) {
      if (same_as[k] < n) engine[k] = engine[same_as[k]];
    }
    // 3. Each member's report from its own lowered step and the run.
    std::vector<size_t> reported;
    for (size_t k = 0; k < n; ++k) {
      if (engine[k] != nullptr || steady[k]) reported.push_back(k);
    }
    in_parallel(reported, [&](size_t k) {
      Candidate& cand = ranked_candidate(batch[k]);
      results[k] = score_of(cand, steady[k] ? std::move(*steady[k])
                                            : report_lowered(m, c, cand.detail->layout, so, steps[k], *engine[k],
                                                             wall[k]));
    });
    std::vector<uint8_t> ran(n, 0);
    for (size_t k : reported) ran[k] = 1;
    for (size_t k : to_run) {
      recent_runs.emplace_back(prints[k], fresh[k]);
      if (recent_runs.size() > kRecentRuns) recent_runs.pop_front();
    }
    for (size_t k = 0; k < batch.size(); ++k) {
      Candidate& cand = ranked_candidate(batch[k]);
      // As one at a time: once the K-th score excludes a batch member, it
      // excludes every plan after it.
      if (tight[batch[k]] > kth_score()) {
        stop = true;
        break;
      }
      // Its lowered step's bound excludes it: as if never run (the test is
      // against the K-th score now, as one at a time would make it).
      if (!ran[k] || lowered[k] > kth_score()) continue;
      considered += 1;
      res.simulated += 1;
      Scored sc = std::move(results[k]);
      if (!std::isfinite(sc.score_s)) {
        res.rejected[never_finishes(sc)] += 1;
        never_finished += 1;
        continue;
      }
      if (fc.failures_given) scored.emplace(cand.index, sc);
      auto fb = family_best.find(*cand.family);
      if (fb == family_best.end() || sc.score_s < fb->second.score_s) family_best[*cand.family] = sc;
      best.push_back(std::move(sc));
      std::sort(best.begin(), best.end(), [](const Scored& a, const Scored& b) {
        return a.score_s != b.score_s ? a.score_s < b.score_s : a.cand->index < b.cand->index;
      });
      const double kth = kth_score();
      while (!best.empty() && best.back().score_s > kth) best.pop_back();
    }
  }
  auto ranked = [&](const Scored& sc) {
    RankedPlan rp;
    rp.layout = sc.cand->detail->layout;
    rp.report = sc.report;
    rp.lower_bound_s = sc.cand->lower_bound_s;
    rp.limit = limit_of(sc.report);
    rp.family = plan_label(sc.cand->detail->layout.plan);
    rp.has_faults = fc.any();
    rp.faults = sc.faults;
    if (fc.failures_given) add_monte_carlo(fc, &rp.faults);
    rp.score_s = sc.score_s;
    rp.has_convergence = sc.has_convergence;
    rp.convergence = sc.convergence;
    // A work-balanced plan against its own layout at the default split: what
    // the balance gained (one simulation per listed plan).
    if (!rp.layout.plan.stage_layers.empty()) {
      Plan even = rp.layout.plan;
      even.stage_layers.clear();
      const Layout at_default = resolve_plan(m, c, rp.layout.gpus, even);
      if (at_default.feasible) {
        rp.default_split = at_default.stage_layers;
        rp.default_split_fits = estimate_memory(m, c, at_default).fits;
        if (rp.default_split_fits) rp.default_split_step_s = simulate_step(m, c, at_default, so).step_time_s;
      }
    }
    return rp;
  };
  // One entry per tie group: the simplest plan, the others as its ties.
  for (size_t i = 0; i < best.size();) {
    size_t j = i;
    while (j < best.size() && best[j].score_s == best[i].score_s) ++j;
    std::vector<const Scored*> group;
    for (size_t k = i; k < j; ++k) group.push_back(&best[k]);
    std::stable_sort(group.begin(), group.end(), [](const Scored* a, const Scored* b) {
      return simpler(a->cand->detail->layout.plan, b->cand->detail->layout.plan);
    });
    RankedPlan rp = ranked(*group.front());
    for (size_t k = 1; k < group.size(); ++k) rp.ties.push_back(group[k]->cand->detail->layout);
    res.plans.push_back(std::move(rp));
    i = j;
  }
  int64_t listed = 0;
  for (const RankedPlan& rp : res.plans) listed += 1 + static_cast<int64_t>(rp.ties.size());
  const int64_t simulated_for_top = res.simulated - never_finished;
  if (fc.failures_given && !res.plans.empty()) {
    // Best per world size: branch and bound restricted to each world.
    std::map<int, std::vector<Candidate*>> by_world;
    for (size_t k = 0; k < candidates.size(); ++k) {
      Candidate& cand = ranked_candidate(k);
      by_world[cand.gpus].push_back(&cand);
    }
    for (auto it = by_world.rbegin(); it != by_world.rend(); ++it) {
      Scored world_best;
      for (Candidate* cand : it->second) {
        if (world_best.cand != nullptr && cand->score_bound_s > world_best.score_s) break;
        Scored sc = score(*cand);
        if (world_best.cand == nullptr || sc.score_s < world_best.score_s) world_best = std::move(sc);
      }
      res.worlds.push_back(WorldBest{it->first, ranked(world_best)});
    }
  }
  res.rejected["slower than the top " + std::to_string(o.top_k) + " (simulated)"] =
      std::max<int64_t>(0, simulated_for_top - listed);
  res.rejected["slower than the top " + std::to_string(o.top_k) + " (lower bound)"] =
      static_cast<int64_t>(candidates.size()) - simulated_for_top - never_finished;

  // Why the other families lose: their best plan by lower bound, simulated.
  const std::string winner = res.plans.empty() ? "" : plan_family(res.plans.front().layout.plan);
  std::map<std::string, Candidate*> family_first;
  for (size_t k = 0; k < candidates.size(); ++k) {
    Candidate& cand = ranked_candidate(k);
    if (!family_first.count(*cand.family)) family_first[*cand.family] = &cand;
  }
  for (const auto& [family, peak] : family_min_peak) {
    if (family == winner) continue;
    FamilyVerdict v;
    v.key = family;
    v.family = plan_label(family_min_peak_plan.at(family));
    if (family_first.count(family)) {
      auto fb = family_best.find(family);
      const bool simulated = fb != family_best.end();
      Scored sc = simulated ? fb->second : score(*family_first[family]);
      const Candidate& shown = *sc.cand;
      v.family = plan_label(shown.detail->layout.plan);
      // No winner: every plan that fits was scored infinite.  Ranked by
      // step time, the steps compare; otherwise the ranking's own figure.
      if (res.plans.empty()) {
        v.verdict = never_finishes(sc);
      } else {
        const RankedPlan& top = res.plans.front();
        const bool by_step = sc.score_s == sc.report.step_time_s && top.score_s == top.report.step_time_s;
        v.verdict = by_step ? why_slower(sc.report, top.report) : why_ranked_lower(sc, top);
      }
      v.fits = true;
      v.score_s = sc.score_s;
      v.peak_gib = to_gib(sc.report.peak_memory_bytes);
      v.report = std::move(sc.report);
    } else {
      v.peak_gib = to_gib(peak);
      const std::string& host_reason = family_min_peak_host_reason[family];
      v.verdict = !host_reason.empty() ? "does not fit: " + host_reason
                                       : fmt("does not fit: needs %.1f GiB per GPU", to_gib(peak)) +
                                             fmt(", has %.1f", to_gib(static_cast<double>(c.gpu.memory)));
    }
    res.families.push_back(v);
  }

  // Nothing fits: by how much, and what would make it fit.
  if (res.plans.empty() && res.feasible == 0 && min_peak_plan) {
    auto try_variant = [&](const std::string& what, Plan p, int64_t g) {
      // A count the cluster cannot hold in whole nodes (4x 24 GPUs on
      // 64-GPU NVLink domains) is no advice.
      if (!valid_gpu_count(c, g)) return;
      Layout L = resolve_plan(m, c, static_cast<int>(g), p);
      if (!L.feasible) return;
      MemoryReport mem = estimate_memory(m, c, L);
      res.advice.push_back(what + fmt(": %.1f GiB per GPU", to_gib(mem.peak_bytes)) +
                           (mem.fits ? " (fits)" : " (still too much)"));
    };
    Plan base = *min_peak_plan;
    Plan v = base;
    v.recompute = Recompute::kFull;
    try_variant("full recompute", v, min_peak_world);
    v = base;
    v.zero = std::max(v.zero, 1);
    v.offload = Offload::kOptimizer;
    try_variant("optimizer offload to host memory (ZeRO-Offload)", v, min_peak_world);
    if (base.pp == 1) {
      v = base;
      v.zero = 3;
      v.shard_group = 0;
      v.offload = Offload::kParams;
      try_variant("ZeRO-3 with parameter offload (ZeRO-Infinity)", v, min_peak_world);
    }
    v = base;
    v.seq = std::max<int64_t>(1, base.seq / 2);
    try_variant("half the sequence length (" + std::to_string(v.seq) + ")", v, min_peak_world);
    for (int factor : {2, 4, 8, 16}) {
      v = base;
      v.dp = 0;
      v.gbs = o.gbs * factor;
      try_variant(std::to_string(factor) + "x the GPUs (" + std::to_string(min_peak_world * factor) +
                      ", same layout, more DP)",
                  v, int64_t{min_peak_world} * factor);
    }
  }
  // Nothing fits without offload: search the offload variants too (the
  // recompute variants are always searched) rather than asking for a rerun.
  if (res.plans.empty() && res.valid > 0 && !o.offload) {
    SearchOptions wider = o;
    wider.offload = true;
    SearchResult w = search_plans(m, c, gpus, wider);
    if (!w.plans.empty()) {
      w.widened = "nothing fits without offload, so optimizer and parameter offload were searched too "
                  "(--strategies offload)";
      w.advice = res.advice;
      res = std::move(w);
    }
  }
  res.elapsed_s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace trainplan
