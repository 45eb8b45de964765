#include "simulator/spec/plan.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <numeric>
#include <sstream>

#include "simulator/core/error.h"
#include "simulator/spec/calibration.h"
#include "simulator/spec/deepep.h"

namespace trainplan {

const char* to_string(Recompute r) {
  switch (r) {
    case Recompute::kNone: return "none";
    case Recompute::kSelective: return "selective";
    case Recompute::kFull: return "full";
  }
  return "?";
}
const char* to_string(Schedule s) {
  switch (s) {
    case Schedule::kGpipe: return "gpipe";
    case Schedule::k1F1B: return "1f1b";
    case Schedule::kInterleaved: return "interleaved";
    case Schedule::kNaive: return "naive";
    case Schedule::kZb1p: return "zb-1p";
    case Schedule::kZb2p: return "zb-2p";
    case Schedule::kZbv: return "zb-v";
    case Schedule::kDualPipeV: return "dualpipe-v";
    case Schedule::kInterleavedZb: return "interleaved-zb";
    case Schedule::kDualPipe: return "dualpipe";
  }
  return "?";
}
const std::vector<std::string>& recompute_module_names() {
  static const std::vector<std::string> names = {"core_attn", "layernorm", "mlp",        "moe",
                                                 "moe_act",   "shared_experts", "mla_up_proj"};
  return names;
}

std::vector<std::string> set_bit_names(uint32_t bits, const std::vector<std::string>& names) {
  std::vector<std::string> out;
  for (size_t i = 0; i < names.size(); ++i) {
    if (bits & (1u << i)) out.push_back(names[i]);
  }
  return out;
}

namespace {

// The names of the set bits of `bits`, comma-separated.
std::string bit_names(uint32_t bits, const std::vector<std::string>& names) {
  std::string s;
  for (const std::string& n : set_bit_names(bits, names)) s += (s.empty() ? "" : ",") + n;
  return s;
}

}  // namespace

std::string recompute_modules_name(uint16_t modules) { return bit_names(modules, recompute_module_names()); }

const std::vector<std::string>& cuda_graph_module_names() {
  static const std::vector<std::string> names = {"layer", "attn", "mlp", "moe", "moe_router", "moe_preprocess"};
  return names;
}

std::string cuda_graph_modules_name(uint8_t modules) { return bit_names(modules, cuda_graph_module_names()); }

const std::vector<std::string>& schedule_names() {
  static const std::vector<std::string> names = {"gpipe", "1f1b", "interleaved", "naive", "zb-1p", "zb-2p", "zb-v", "dualpipe-v",
                                                 "interleaved-zb", "dualpipe"};
  return names;
}
bool zero_bubble(Schedule s) {
  return zero_bubble_automatic(s) || v_shape(s) || s == Schedule::kInterleavedZb || s == Schedule::kDualPipe;
}
bool interleaved(Schedule s) { return s == Schedule::kInterleaved || s == Schedule::kInterleavedZb; }
bool v_shape(Schedule s) { return s == Schedule::kZbv || s == Schedule::kDualPipeV; }
bool zero_bubble_automatic(Schedule s) { return s == Schedule::kZb1p || s == Schedule::kZb2p; }
bool model_compiled(const Plan& p) {
  if (p.framework != Framework::kTorchtitan && p.framework != Framework::kPytorch) return false;
  if (p.compile) return true;
  if (p.framework != Framework::kTorchtitan || zero_bubble(p.schedule)) return false;
  return p.tp_comm_overlap || p.fp8_recipe != Fp8Recipe::kNone;
}
int zero_bubble_activation_limit(Schedule s, int pp) {
  if (s == Schedule::kZb1p) return pp;
  if (s == Schedule::kZb2p) return 2 * pp;
  return 0;
}
const char* to_string(Precision p) {
  switch (p) {
    case Precision::kBf16: return "bf16";
    case Precision::kFp16: return "fp16";
    case Precision::kFp32: return "fp32";
  }
  return "?";
}
const char* to_string(GradDtype g) { return g == GradDtype::kBf16 ? "bf16" : "fp32"; }
const char* to_string(MomentDtype m) { return m == MomentDtype::kBf16 ? "bf16" : "fp32"; }
const char* to_string(Attention a) { return a == Attention::kFlash ? "flash" : "naive"; }
const char* to_string(AttentionKernel k) {
  switch (k) {
    case AttentionKernel::kDefault: return "default";
    case AttentionKernel::kFa2: return "fa2";
    case AttentionKernel::kCudnn: return "cudnn";
    case AttentionKernel::kFa3: return "fa3";
  }
  return "default";
}
const char* to_string(DpMode m) { return m == DpMode::kSync ? "sync" : "async"; }
const char* to_string(MoeDispatcher d) {
  switch (d) {
    case MoeDispatcher::kAllToAll: return "alltoall";
    case MoeDispatcher::kDeepEp: return "deepep";
    case MoeDispatcher::kHybridEp: return "hybridep";
  }
  return "?";
}

const std::vector<std::string>& moe_dispatcher_names() {
  static const std::vector<std::string> names = {"alltoall", "deepep", "hybridep"};
  return names;
}

const char* to_string(CpComm c) { return c == CpComm::kA2a ? "a2a" : "p2p"; }

const std::vector<std::string>& cp_comm_names() {
  static const std::vector<std::string> names = {"p2p", "a2a"};
  return names;
}

const char* to_string(Offload o) {
  switch (o) {
    case Offload::kNone: return "none";
    case Offload::kOptimizer: return "optimizer";
    case Offload::kParams: return "params";
  }
  return "?";
}

const char* to_string(Fp8Recipe r) {
  switch (r) {
    case Fp8Recipe::kNone: return "none";
    case Fp8Recipe::kDelayed: return "delayed";
    case Fp8Recipe::kTensorwise: return "tensorwise";
    case Fp8Recipe::kRowwise: return "rowwise";
    case Fp8Recipe::kBlockwise: return "blockwise";
    case Fp8Recipe::kMxfp8: return "mxfp8";
  }
  return "?";
}

const std::vector<std::string>& fp8_recipe_names() {
  static const std::vector<std::string> names = {"delayed", "tensorwise", "rowwise", "blockwise", "mxfp8"};
  return names;
}

std::string precision_name(const Plan& p) {
  return p.fp8_recipe != Fp8Recipe::kNone ? "fp8" : to_string(p.precision);
}

const std::vector<std::string>& precision_names() {
  static const std::vector<std::string> names = {"bf16", "fp16", "fp32", "fp8"};
  return names;
}

bool set_precision(const std::string& name, Plan* p) {
  if (name == "bf16") p->precision = Precision::kBf16;
  else if (name == "fp16") p->precision = Precision::kFp16;
  else if (name == "fp32") p->precision = Precision::kFp32;
  else if (name == "fp8") p->precision = Precision::kBf16;
  else return false;
  if (name == "fp8") {
    if (p->fp8_recipe == Fp8Recipe::kNone) p->fp8_recipe = Fp8Recipe::kDelayed;  // placeholder until resolved
  } else {
    p->fp8_recipe = Fp8Recipe::kNone;
    p->fp8_recipe_given = false;
  }
  return true;
}

bool set_fp8_recipe(const std::string& name, Plan* p) {
  const std::vector<std::string>& names = fp8_recipe_names();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == name) {
      p->fp8_recipe = static_cast<Fp8Recipe>(i + 1);
      p->fp8_recipe_given = true;
      return true;
    }
  }
  return false;
}

namespace {
bool is_blackwell(const ClusterSpec& c) { return c.gpu.arch == GpuArch::kBlackwell; }
}  // namespace

Fp8Recipe default_fp8_recipe(const ClusterSpec& cluster, int zero) {
  if (zero == 3) return Fp8Recipe::kTensorwise;
  return is_blackwell(cluster) ? Fp8Recipe::kMxfp8 : Fp8Recipe::kDelayed;
}

bool fp8_transformer_engine(const Plan& p) {
  if (p.fp8_recipe == Fp8Recipe::kNone) return false;
  return !(p.zero == 3 && (p.fp8_recipe == Fp8Recipe::kTensorwise || p.fp8_recipe == Fp8Recipe::kRowwise));
}

bool fp8_weights_gathered(const Plan& p) {
  return (p.zero == 3 && p.fp8_recipe == Fp8Recipe::kTensorwise) || p.fp8_param_gather;
}

double fp8_weight_cache_bytes(const ClusterSpec& cluster, const Plan& p) {
  if (!fp8_transformer_engine(p)) return 0;
  if (p.fp8_recipe == Fp8Recipe::kMxfp8 || (p.fp8_recipe == Fp8Recipe::kBlockwise && is_blackwell(cluster))) {
    return 2 * (1 + 1.0 / 32);
  }
  return is_blackwell(cluster) ? 1.0 : 2.0;
}

int activation_bytes(Precision p) { return p == Precision::kFp32 ? 4 : 2; }
int weight_bytes(Precision p) { return p == Precision::kFp32 ? 4 : 2; }
int grad_bytes(Precision p, GradDtype g) {
  return (p == Precision::kFp32 || g == GradDtype::kFp32) ? 4 : 2;
}
int moment_bytes(MomentDtype m) { return m == MomentDtype::kBf16 ? 2 : 4; }

std::vector<int> balance_stage_layers(int64_t layers, int pp) {
  TRAINPLAN_CHECK(pp >= 1 && layers >= 1, "balance_stage_layers needs pp >= 1 and layers >= 1");
  if (pp == 1) return {static_cast<int>(layers)};
  if (layers % pp == 0) return std::vector<int>(pp, static_cast<int>(layers / pp));
  int64_t units = layers + 2;  // embedding on the first stage, loss on the last
  std::vector<int64_t> per(pp, units / pp);
  int64_t rem = units % pp;
  std::vector<int> order;
  for (int i = 1; i + 1 < pp; ++i) order.push_back(i);
  order.push_back(0);
  order.push_back(pp - 1);
  for (int64_t k = 0; k < rem; ++k) per[order[k]] += 1;
  per[0] -= 1;
  per[pp - 1] -= 1;
  std::vector<int> out;
  for (int64_t n : per) out.push_back(static_cast<int>(n));
  if (*std::min_element(out.begin(), out.end()) >= 1) return out;
  // Too few layers to give the embedding and loss a layer's weight: split
  // the layers alone as evenly as possible, extras to the middle stages.
  std::vector<int> even(pp, static_cast<int>(layers / pp));
  for (int64_t k = 0; k < layers % pp; ++k) even[order[k]] += 1;
  if (*std::min_element(even.begin(), even.end()) < 1) return {};
  return even;
}

namespace {

// Fills the stages from the last with as many layers as `cap` allows (each
// stage leaving one layer for every stage before it); `stages` gets the
// split.  True when the first stage, which takes what is left, fits too.
bool fill_stages_from_last(const std::vector<double>& work, int pp, double first_extra, double last_extra, double cap,
                           std::vector<int>* stages) {
  stages->assign(static_cast<size_t>(pp), 0);
  int end = static_cast<int>(work.size());
  for (int s = pp - 1; s >= 1; --s) {
    const double room = cap - (s == pp - 1 ? last_extra : 0.0);
    int start = end;
    double sum = 0;
    while (start - 1 >= s && sum + work[static_cast<size_t>(start - 1)] <= room) sum += work[static_cast<size_t>(--start)];
    if (start == end) return false;
    (*stages)[static_cast<size_t>(s)] = end - start;
    end = start;
  }
  double first = first_extra + (pp == 1 ? last_extra : 0.0);
  for (int i = 0; i < end; ++i) first += work[static_cast<size_t>(i)];
  (*stages)[0] = end;
  return first <= cap;
}

}  // namespace

std::vector<int> work_balanced_stage_layers(const std::vector<double>& layer_work, int pp, double first_extra,
                                            double last_extra) {
  const int layers = static_cast<int>(layer_work.size());
  if (pp < 1 || pp > layers) return {};
  auto bad = [](double x) { return !std::isfinite(x) || x < 0; };
  if (bad(first_extra) || bad(last_extra) || std::any_of(layer_work.begin(), layer_work.end(), bad)) return {};
  if (pp == 1) return {layers};
  // Bisection on the costliest stage's cost: the fill from the last stage
  // succeeds at a cap exactly when some split has no stage above it (each
  // of its stages starts no later than that split's).
  double total = first_extra + last_extra;
  double lo = std::max(first_extra + layer_work.front(), last_extra + layer_work.back());
  for (double w : layer_work) {
    total += w;
    lo = std::max(lo, w);
  }
  lo = std::max(lo, total / pp);
  double hi = total;
  std::vector<int> stages;
  if (fill_stages_from_last(layer_work, pp, first_extra, last_extra, lo, &stages)) return stages;
  for (int it = 0; it < 100 && hi > lo * (1 + 1e-10); ++it) {
    const double mid = 0.5 * (lo + hi);
    (fill_stages_from_last(layer_work, pp, first_extra, last_extra, mid, &stages) ? hi : lo) = mid;
  }
  TRAINPLAN_CHECK(fill_stages_from_last(layer_work, pp, first_extra, last_extra, hi, &stages),
                  "work_balanced_stage_layers: the whole model must fit one stage's cap");
  return stages;
}

bool layer_recomputed(const Plan& plan, int index_in_chunk) {
  if (plan.recompute != Recompute::kFull) return false;
  return plan.recompute_layers == 0 || index_in_chunk < plan.recompute_layers;
}

std::vector<int> balance_v_stage_layers(int64_t layers, int pp) {
  TRAINPLAN_CHECK(pp >= 1 && layers >= 1, "balance_v_stage_layers needs pp >= 1 and layers >= 1");
  if (layers % pp == 0) return std::vector<int>(static_cast<size_t>(pp), static_cast<int>(layers / pp));
  // Otherwise the embedding and the loss count as a layer each, as in
  // balance_stage_layers, and both sit on rank 0 in the V.
  const int64_t units = layers + 2;
  std::vector<int> out(static_cast<size_t>(pp), static_cast<int>(units / pp));
  for (int64_t k = 0; k < units % pp; ++k) out[static_cast<size_t>(pp - 1 - k)] += 1;
  out[0] -= 2;
  if (pp > 1 && out[0] >= 2) return out;
  // Too few layers for that: the layers alone, extras after rank 0.
  std::vector<int> even(static_cast<size_t>(pp), static_cast<int>(layers / pp));
  for (int64_t k = 0; k < layers % pp; ++k) even[static_cast<size_t>(pp - 1 - k)] += 1;
  return even;
}

int chunks_per_rank(const Plan& plan) {
  if (interleaved(plan.schedule)) return std::max(1, plan.vp);
  return v_shape(plan.schedule) || plan.schedule == Schedule::kDualPipe ? 2 : 1;
}

int virtual_stage(Schedule s, int pp, int rank, int chunk) {
  TRAINPLAN_CHECK(s != Schedule::kDualPipe, "a dualpipe plan runs as its execution_layout");
  TRAINPLAN_CHECK(rank >= 0 && rank < pp && chunk >= 0 && (!v_shape(s) || chunk < 2),
                  "rank " + std::to_string(rank) + ", chunk " + std::to_string(chunk) + " out of range for pp = " +
                      std::to_string(pp));
  if (v_shape(s)) return chunk == 0 ? rank : 2 * pp - 1 - rank;
  return chunk * pp + rank;
}

RankChunk rank_chunk_of(Schedule s, int pp, int stage) {
  TRAINPLAN_CHECK(s != Schedule::kDualPipe, "a dualpipe plan runs as its execution_layout");
  TRAINPLAN_CHECK(pp >= 1 && stage >= 0, "virtual stage " + std::to_string(stage) + " out of range");
  if (v_shape(s)) return stage < pp ? RankChunk{stage, 0} : RankChunk{2 * pp - 1 - stage, 1};
  return RankChunk{stage % pp, stage / pp};
}

namespace {

// Layers of each stage's chunks, [stage][chunk] (chunk_layers, plan.h).  A
// stage's layers split as evenly as they go, the later chunks taking the
// extra.  Where the first (last) stage holds fewer layers than the fullest
// middle one, the embedding (loss) stood in for a layer when the stages were cut
// (balance_stage_layers; Megatron-Core's --account-for-embedding-in-pipeline-
// split and --account-for-loss-in-pipeline-split, transformer_block.py
// get_num_layers_to_build; the Zero Bubble fork's --allow-padding-num-layers,
// which pads the first and last stages): with the looped placement it then
// also takes a layer's place among that stage's chunks, in the first (last)
// virtual stage, which builds one layer fewer, and where the stage's places
// do not divide its chunks the chunk holding the embedding (loss) is the one
// left short (the fork drops its padded layers from the first and last
// virtual stages).  So 2 layers and the loss over 2 chunks are [2, 0 + loss],
// not [1, 1 + loss].
struct EndPlaces {
  bool embedding = false, loss = false;
  // The stage's places among its chunks: its layers and the ends it counts.
  int places(const std::vector<int>& stage_layers, int s) const {
    const int last = static_cast<int>(stage_layers.size()) - 1;
    return stage_layers[static_cast<size_t>(s)] + (embedding && s == 0 ? 1 : 0) + (loss && s == last ? 1 : 0);
  }
};

EndPlaces end_places(const Plan& p, const std::vector<int>& stage_layers) {
  const int v = chunks_per_rank(p);
  const int pp = static_cast<int>(stage_layers.size());
  const bool looped = v > 1 && pp > 1 && !v_shape(p.schedule) && p.schedule != Schedule::kDualPipe;
  if (!looped) return {};
  // An end stage is short against the fullest middle stage (with two
  // stages, against the other end).
  const int middle = pp > 2 ? *std::max_element(stage_layers.begin() + 1, stage_layers.end() - 1) : 0;
  const int first_ref = pp > 2 ? middle : stage_layers.back();
  const int last_ref = pp > 2 ? middle : stage_layers.front();
  return EndPlaces{stage_layers.front() < first_ref, stage_layers.back() < last_ref};
}

std::vector<std::vector<int>> chunk_counts(const Plan& p, const std::vector<int>& stage_layers) {
  const int v = chunks_per_rank(p);
  const int pp = static_cast<int>(stage_layers.size());
  if (stage_layers_per_chunk(p) && pp == p.pp) {
    // As listed, virtual stage by virtual stage.
    std::vector<std::vector<int>> listed(static_cast<size_t>(pp), std::vector<int>(static_cast<size_t>(v), 0));
    for (int vs = 0; vs < pp * v; ++vs) {
      const RankChunk rc = rank_chunk_of(p.schedule, pp, vs);
      listed[static_cast<size_t>(rc.rank)][static_cast<size_t>(rc.chunk)] = p.stage_layers[static_cast<size_t>(vs)];
    }
    return listed;
  }
  const EndPlaces ends = end_places(p, stage_layers);
  std::vector<std::vector<int>> out(static_cast<size_t>(pp), std::vector<int>(static_cast<size_t>(v), 0));
  for (int s = 0; s < pp; ++s) {
    const bool embedding = ends.embedding && s == 0, loss = ends.loss && s == pp - 1;
    const int places = ends.places(stage_layers, s);
    std::vector<int>& counts = out[static_cast<size_t>(s)];
    for (int c = 0; c < v; ++c) {
      // The extra places go to the chunks away from the loss's (the
      // embedding's chunk is the first, which the later-first rule skips).
      const bool extra = loss ? c < places % v : c >= v - places % v;
      counts[static_cast<size_t>(c)] = places / v + (extra ? 1 : 0);
    }
    if (embedding) counts.front() -= 1;
    if (loss) counts.back() -= 1;
  }
  return out;
}

}  // namespace

bool stage_layers_per_chunk(const Plan& plan) {
  const int v = chunks_per_rank(plan);
  return v > 1 && plan.schedule != Schedule::kDualPipe && plan.pp >= 1 &&
         plan.stage_layers.size() == static_cast<size_t>(plan.pp) * static_cast<size_t>(v);
}

std::vector<int> rank_stage_layers(const Plan& plan) {
  if (!stage_layers_per_chunk(plan)) return plan.stage_layers;
  std::vector<int> out(static_cast<size_t>(plan.pp), 0);
  for (size_t vs = 0; vs < plan.stage_layers.size(); ++vs) {
    out[static_cast<size_t>(rank_chunk_of(plan.schedule, plan.pp, static_cast<int>(vs)).rank)] += plan.stage_layers[vs];
  }
  return out;
}

int largest_chunk_layers(const Plan& plan, const std::vector<int>& stage_layers) {
  if (stage_layers_per_chunk(plan)) return *std::max_element(plan.stage_layers.begin(), plan.stage_layers.end());
  // chunk_counts' largest chunk of a stage, without building them: its
  // places over its chunks, rounded up (an end's place is taken from a
  // chunk the extra places skip).
  const int v = chunks_per_rank(plan);
  const EndPlaces ends = end_places(plan, stage_layers);
  int largest = 0;
  for (int s = 0; s < static_cast<int>(stage_layers.size()); ++s) {
    largest = std::max(largest, (ends.places(stage_layers, s) + v - 1) / v);
  }
  return largest;
}

std::string recompute_layers_text(const Plan& plan) {
  if (plan.recompute != Recompute::kFull || plan.recompute_layers == 0) return "";
  return "(" + std::to_string(plan.recompute_layers) + (plan.recompute_layers == 1 ? " layer" : " layers") +
         " per chunk)";
}

ExpertFolding expert_folding(const Plan& plan, int tp, int cp, int dp) {
  const int etp = std::max(1, plan.etp), block = std::max(1, plan.ep) * etp;
  ExpertFolding f;
  f.local = tp + plan.tp * (cp + plan.cp * dp);
  f.etp_group = f.local / etp;
  f.etp_rank = f.local % etp;
  f.ep_group = (f.local / block) * etp + f.local % etp;
  f.ep_rank = (f.local / etp) % std::max(1, plan.ep);
  f.edp_group = f.local % block;
  f.edp_rank = f.local / block;
  return f;
}

StageCoord stage_coord(const Plan& plan, int local) {
  return StageCoord{local % plan.tp, (local / plan.tp) % plan.cp, local / (plan.tp * plan.cp)};
}

std::vector<std::vector<ChunkLayers>> chunk_layers(const Layout& layout) {
  const Plan& p = layout.plan;
  TRAINPLAN_CHECK(p.schedule != Schedule::kDualPipe, "a dualpipe plan runs as its execution_layout");
  const int v = chunks_per_rank(p);
  std::vector<std::vector<ChunkLayers>> out(static_cast<size_t>(p.pp), std::vector<ChunkLayers>(static_cast<size_t>(v)));
  const std::vector<std::vector<int>> counts = chunk_counts(p, layout.stage_layers);
  for (int s = 0; s < p.pp; ++s) {
    for (int c = 0; c < v; ++c) out[static_cast<size_t>(s)][static_cast<size_t>(c)].count = counts[static_cast<size_t>(s)][static_cast<size_t>(c)];
  }
  int at = 0;
  for (int vs = 0; vs < p.pp * v; ++vs) {
    const RankChunk rc = rank_chunk_of(p.schedule, p.pp, vs);
    ChunkLayers& ch = out[static_cast<size_t>(rc.rank)][static_cast<size_t>(rc.chunk)];
    ch.first = at;
    at += ch.count;
  }
  return out;
}

namespace {

std::string str(int64_t v) { return std::to_string(v); }

// A dualpipe plan's layers per rank from those of its first pp/2 ranks:
// rank pp-1-r holds what rank r holds.
std::vector<int> mirrored_stage_layers(const std::vector<int>& half) {
  std::vector<int> out = half;
  out.insert(out.end(), half.rbegin(), half.rend());
  return out;
}

}  // namespace

std::string mirrored_stages_note(const Plan& plan) {
  if (plan.schedule != Schedule::kDualPipe) return "";
  return "dualpipe: stage k below is pipeline ranks k and " + str(plan.pp - 1) +
         "-k (they hold the same two stages, one of each parameter copy, and run the same order); simulated as "
         "dualpipe-v on pp/2 = " + str(plan.pp / 2) + " ranks with dp " + str(2 * plan.dp) +
         ", the V's turn a transfer between ranks " + str(plan.pp / 2 - 1) + " and " + str(plan.pp / 2);
}

std::string deepspeed_pipeline_zero_conflict(const Plan& p) {
  if (p.pp <= 1 || p.zero < 2) return "";
  return "DeepSpeed's pipeline engine refuses ZeRO stage 2 and 3 (\"ZeRO-2 and ZeRO-3 are incompatible with pipeline "
         "parallelism\"); use zero 0 or 1 with pp > 1";
}

bool runs_flex_dispatcher(Framework f) {
  return f == Framework::kGeneric || f == Framework::kMegatronCore || f == Framework::kTorchtitan;
}

bool runs_bf16_moments(Framework f) { return f == Framework::kGeneric || f == Framework::kMegatronCore; }

AttentionKernel default_attention_kernel(Framework f, GpuArch arch) {
  const bool hopper_plus = arch == GpuArch::kHopper || arch == GpuArch::kBlackwell;
  if (f == Framework::kMegatronCore && hopper_plus) return AttentionKernel::kCudnn;
  return AttentionKernel::kFa2;
}

bool flash_is_default(Framework f) { return f != Framework::kMegatronLM; }

Attention attention_run(const Plan& p) {
  const bool framework_default = p.attention_kernel == AttentionKernel::kDefault;
  if (p.attention == Attention::kFlash && framework_default && !flash_is_default(p.framework)) return Attention::kNaive;
  return p.attention;
}

AttentionKernel attention_kernel_run(const Plan& p, GpuArch arch) {
  return p.attention_kernel != AttentionKernel::kDefault ? p.attention_kernel
                                                         : default_attention_kernel(p.framework, arch);
}

std::string attention_kernel_conflict(const Plan& p, const ModelSpec& model, GpuArch arch, const std::string& gpu) {
  if (p.attention != Attention::kFlash || p.attention_kernel == AttentionKernel::kDefault) return "";
  const AttentionKernel fallback = default_attention_kernel(p.framework, arch);
  if (!flash_is_default(p.framework) && p.attention_kernel != fallback) {
    return std::string("attention ") + to_string(p.attention_kernel) +
           ": megatron-lm (Megatron-LM before Megatron-Core) runs FlashAttention-2 with --use-flash-attn (attention " +
           to_string(fallback) +
           ") or its own unfused attention (attention flash or naive); Transformer Engine's kernels need "
           "--framework megatron-core";
  }
  if (p.attention_kernel == AttentionKernel::kFa3 && arch != GpuArch::kHopper) {
    return "attention fa3 (FlashAttention-3) runs on Hopper GPUs (sm90) only; on " + gpu + " this framework runs " +
           to_string(fallback) + " (attention flash)";
  }
  if (p.attention_kernel == AttentionKernel::kFa3 && model.dropout) {
    return "attention fa3 (FlashAttention-3) has no attention dropout, and " + model.name +
           " trains with dropout; use attention fa2, cudnn or flash";
  }
  if (p.attention_kernel != fallback && arch != GpuArch::kHopper) {
    return std::string("attention ") + to_string(p.attention_kernel) +
           ": kernels are compared on Hopper only (the FlashAttention-3 paper's side-by-side rates); on " + gpu +
           " this framework runs " + to_string(fallback) + " (attention flash)";
  }
  return "";
}

const std::vector<std::string>& attention_names() {
  static const std::vector<std::string> names = {"flash", "naive", "fa2", "cudnn", "fa3"};
  return names;
}

std::string attention_name(const Plan& p) {
  if (p.attention == Attention::kNaive || p.attention_kernel == AttentionKernel::kDefault) return to_string(p.attention);
  return to_string(p.attention_kernel);
}

void set_attention(Plan* p, const std::string& name) {
  p->attention = name == "naive" ? Attention::kNaive : Attention::kFlash;
  p->attention_kernel = name == "fa2"     ? AttentionKernel::kFa2
                        : name == "cudnn" ? AttentionKernel::kCudnn
                        : name == "fa3"   ? AttentionKernel::kFa3
                                          : AttentionKernel::kDefault;
}

std::vector<std::string> cuda_graph_conflicts(const ModelSpec& m, const Plan& p) {
  // megatron/core/transformer/transformer_config.py __post_init__ (d98e8a64dd)
  // for cuda_graph_impl "transformer_engine", and arguments.py's
  // --cuda-graph-modules (an empty list captures the whole layer, so it
  // takes no other module).
  std::vector<std::string> why;
  const uint8_t g = p.cuda_graph;
  if (g == 0) return why;
  if (p.framework != Framework::kGeneric && p.framework != Framework::kMegatronCore)
    why.push_back("cuda graphs per layer are Megatron-Core's (--cuda-graph-impl transformer_engine); use --framework "
                  "megatron-core, or drop --cuda-graph");
  if ((g & kCgLayer) && g != kCgLayer)
    why.push_back("cuda graph \"layer\" captures the whole layer (Megatron's empty --cuda-graph-modules) and takes no "
                  "other module");
  if ((g & kCgMoe) && (g & kCgMoeRouter))
    why.push_back("cuda graph modules must not contain both moe and moe_router (Megatron-Core)");
  if ((g & kCgMoePreprocess) && !(g & kCgMoeRouter))
    why.push_back("the moe_preprocess cuda graph is only supported with the moe_router one (Megatron-Core)");
  if (!m.has_moe && (g & (kCgMoe | kCgMoeRouter | kCgMoePreprocess)))
    why.push_back("moe cuda graphs are only supported for MoE models (Megatron-Core); capture attn or mlp");
  if (m.has_moe && m.moe_layer_count() == m.layers && (g & kCgMlp))
    why.push_back("the mlp cuda graph is only supported for dense layers, and every layer of this model is MoE "
                  "(Megatron-Core); capture moe_router,moe_preprocess");
  const bool drop_and_pad = m.has_moe && m.moe.capacity_factor > 0 && p.moe_pad_to_capacity;
  if (m.has_moe && !drop_and_pad && (g & (kCgMoe | kCgLayer)))
    why.push_back(std::string("the ") + ((g & kCgMoe) ? "moe" : "whole-layer") +
                  " cuda graph is only supported with drop-padding MoE (Megatron-Core: a dropless layer's token counts "
                  "set its shapes); give the model a capacity factor with --moe-pad-to-capacity, or capture "
                  "attn,moe_router,moe_preprocess");
  if ((g & kCgMoePreprocess) && p.moe_dispatcher == MoeDispatcher::kAllToAll && m.has_moe &&
      m.moe.capacity_factor > 0)
    why.push_back("the moe_preprocess cuda graph is not supported when the preprocess step copies to the host "
                  "(Megatron-Core: the alltoall dispatcher with a capacity factor)");
  if (p.recompute == Recompute::kFull)
    why.push_back("full recompute is only supported with the full-iteration cuda graph (Megatron-Core); use "
                  "selective recompute with per-layer graphs");
  if (p.recompute == Recompute::kSelective && (p.recompute_modules & kRcMoe) && (g & kCgMoeRouter))
    why.push_back("moe recompute is not supported with the moe_router cuda graph (Megatron-Core); recompute moe_act");
  if (p.recompute == Recompute::kSelective && m.dropout) {
    // Graphed recompute cannot draw random numbers: "attention dropout is
    // not supported with graphed attention recomputation", "hidden dropout
    // is not supported with graphed MLP/MoE recomputation".
    const uint16_t rc = p.recompute_modules != 0 ? p.recompute_modules : static_cast<uint16_t>(kRcCoreAttn);
    if ((rc & kRcCoreAttn) && (g & (kCgLayer | kCgAttn)))
      why.push_back("attention dropout is not supported with graphed attention recomputation (Megatron-Core)");
    if (((rc & kRcMlp) && (g & (kCgLayer | kCgMlp))) || ((rc & kRcMoe) && (g & (kCgLayer | kCgMoe))))
      why.push_back("hidden dropout is not supported with graphed MLP/MoE recomputation (Megatron-Core)");
  }
  if (p.ep_overlap && (g & (kCgMoe | kCgMlp | kCgLayer)))
    why.push_back("cuda graphs on moe and mlp are not supported with ep overlap (Megatron-Core: "
                  "overlap_moe_expert_parallel_comm)");
  return why;
}

std::vector<std::string> shared_expert_overlap_conflicts(const ModelSpec& m, const Plan& p) {
  // megatron/core/transformer/transformer_config.py (d98e8a64dd): "Only
  // effective when moe-shared-expert-intermediate-size is set";
  // "moe_shared_expert_overlap only works with alltoall or flex token
  // dispatcher" (ep * etp = 1 exports the allgather one); "disable
  // moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm";
  // "shared_experts recompute cannot work with --moe-shared-expert-overlap".
  std::vector<std::string> why;
  if (!m.has_moe || m.moe.shared_experts == 0) {
    why.push_back("moe shared expert overlap needs shared experts; " + m.name + " has none");
    return why;
  }
  if (p.framework != Framework::kMegatronCore)
    why.push_back("moe shared expert overlap is Megatron-Core's (--moe-shared-expert-overlap); this plan's framework "
                  "does not run it: use --framework megatron-core");
  if (int64_t{p.ep} * std::max(1, p.etp) < 2)
    why.push_back("moe shared expert overlap hides the token all-to-alls (Megatron-Core: the alltoall or flex "
                  "dispatcher only); with ep*etp = 1 there are none: use --ep > 1");
  if (p.ep_overlap)
    why.push_back("moe shared expert overlap and --ep-overlap exclude each other (Megatron-Core: disable "
                  "moe_shared_expert_overlap when enabling overlap_moe_expert_parallel_comm)");
  if (p.recompute == Recompute::kSelective && (p.recompute_modules & kRcSharedExperts) != 0)
    why.push_back("moe shared expert overlap cannot recompute the shared_experts module (Megatron-Core "
                  "TransformerConfig)");
  return why;
}

std::vector<std::string> ep_overlap_conflicts(const Plan& p) {
  // megatron/core/transformer/transformer_config.py __post_init__, under
  // overlap_moe_expert_parallel_comm: "only supported with expert model
  // parallelism"; "virtual_pipeline_model_parallel_size must be specified
  // when pipeline_model_parallel_size > 1"; "disable full recomputation";
  // "disable moe in recompute_modules"; "only supported with bf16 or fp16
  // model" (FP8 GEMMs keep a bf16 model); "MTP supports at most one layer
  // when enabling overlap_moe_expert_parallel_comm"; the combined 1F1B
  // schedule is Megatron-Core's.
  std::vector<std::string> why;
  if (p.ep < 2) why.push_back("ep overlap needs ep >= 2 (there is no expert-parallel all-to-all to overlap)");
  if (p.schedule != Schedule::k1F1B && p.schedule != Schedule::kInterleaved) {
    why.push_back(std::string("ep overlap runs Megatron-Core's combined 1F1B, built on the 1f1b or interleaved "
                              "schedule; this plan's schedule is ") +
                  to_string(p.schedule));
  } else if (p.pp > 1 && p.schedule != Schedule::kInterleaved) {
    why.push_back(std::string("ep overlap with pp > 1 runs on the interleaved schedule (Megatron-Core: virtual "
                              "pipeline size must be specified); this plan's schedule is ") +
                  to_string(p.schedule) + ": give --vp >= 2");
  }
  if (p.recompute == Recompute::kFull) {
    why.push_back("ep overlap needs a recompute other than full (Megatron-Core: disable full recomputation when "
                  "enabling overlap_moe_expert_parallel_comm)");
  }
  if (p.recompute == Recompute::kSelective && (p.recompute_modules & kRcMoe) != 0) {
    why.push_back("ep overlap cannot recompute the moe module (Megatron-Core: disable moe in recompute_modules); "
                  "recompute moe_act instead");
  }
  if (p.precision == Precision::kFp32) why.push_back("ep overlap needs a bf16 or fp16 model (Megatron-Core); got fp32");
  if (p.mtp_layers > 1) {
    why.push_back("ep overlap supports at most one MTP layer (Megatron-Core TransformerConfig); got mtp_layers=" +
                  str(p.mtp_layers));
  }
  if (p.framework != Framework::kGeneric && p.framework != Framework::kMegatronCore) {
    why.push_back("ep overlap is Megatron-Core's combined 1F1B schedule; this plan's framework does not run it: use "
                  "--framework megatron-core");
  }
  return why;
}

int global_rank(const Plan& p, int pp, int dp, int cp, int tp) {
  return tp + p.tp * (cp + p.cp * (dp + p.dp * pp));
}

int physical_rank(const Layout& layout, int pp, int dp, int cp, int tp) {
  if (layout.mirrored_pp == 0) return global_rank(layout.plan, pp, dp, cp, tp);
  Plan physical = layout.plan;
  physical.pp = layout.mirrored_pp;
  physical.dp = layout.mirrored_dp;
  const bool mirror = dp >= layout.mirrored_dp;
  return global_rank(physical, mirror ? layout.mirrored_pp - 1 - pp : pp, dp % layout.mirrored_dp, cp, tp);
}

Layout execution_layout(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout) {
  if (layout.plan.schedule != Schedule::kDualPipe) return layout;
  TRAINPLAN_CHECK(layout.feasible, "execution_layout needs a feasible layout");
  Plan folded = layout.plan;
  folded.schedule = Schedule::kDualPipeV;
  folded.schedule_given = true;
  folded.pp = layout.plan.pp / 2;
  folded.dp = layout.plan.dp * 2;
  if (!folded.stage_layers.empty()) folded.stage_layers.resize(static_cast<size_t>(folded.pp));
  Layout out = resolve_plan(model, cluster, layout.gpus, folded);
  TRAINPLAN_CHECK(out.feasible, "the dualpipe plan's dualpipe-v execution is infeasible: " +
                                    (out.reasons.empty() ? std::string() : out.reasons.front()));
  out.mirrored_pp = layout.plan.pp;
  out.mirrored_dp = layout.plan.dp;
  return out;
}

int gpus_of_nodes(const ClusterSpec& cluster, int64_t nodes) {
  if (nodes < 1 || nodes > kMaxNodes) {
    throw_input_error("--nodes", "", "out of range: " + std::to_string(nodes),
                      "allowed: 1 to " + std::to_string(kMaxNodes));
  }
  return static_cast<int>(nodes * cluster.gpus_per_node);
}

bool valid_gpu_count(const ClusterSpec& cluster, int64_t gpus) {
  return gpus >= 1 && gpus <= kMaxGpus && (gpus <= cluster.gpus_per_node || gpus % cluster.gpus_per_node == 0);
}

void check_gpu_count(const ClusterSpec& cluster, int64_t gpus, const std::string& where, const std::string& pointer) {
  if (gpus < 1 || gpus > kMaxGpus) {
    throw_input_error(where, pointer, "out of range: " + std::to_string(gpus), "allowed: 1 to " + std::to_string(kMaxGpus));
  }
  if (gpus > cluster.gpus_per_node && gpus % cluster.gpus_per_node != 0) {
    throw_input_error(where, pointer, std::to_string(gpus) + " is not a multiple of the " +
                      std::to_string(cluster.gpus_per_node) + " GPUs per node of " + cluster.name,
                      "use whole nodes, or fewer GPUs than one node");
  }
}

namespace {

// Expert parallelism (Megatron-Core parallel folding, megatron/core/
// parallel_state.py): per pipeline stage the tp*cp*dp ranks are re-mapped
// as etp x ep x edp for the MoE blocks, so ep*etp must divide tp*cp*dp;
// experts split whole over ep, each expert's width over etp.
template <typename Fail>
void resolve_experts(const ModelSpec& model, Layout* L, Fail fail) {
  Plan& p = L->plan;
  if (p.etp == 0) p.etp = model.has_moe ? p.tp : 1;
  if (!model.has_moe) {
    if (p.ep != 1) fail("ep=" + str(p.ep) + " needs a Mixture-of-Experts model; " + model.name + " has no \"moe\" block");
    if (p.etp != 1) fail("etp=" + str(p.etp) + " needs a Mixture-of-Experts model; " + model.name + " has no \"moe\" block");
    p.ep = 1;
    p.etp = 1;
    if (p.moe_imbalance != 0) fail("moe imbalance needs a Mixture-of-Experts model");
    if (p.moe_router_fusion) fail("moe router fusion needs a Mixture-of-Experts model");
    return;
  }
  // transformer_config.py moe_router_fusion: Transformer Engine's fused
  // router kernels, which only Megatron-Core calls.
  if (p.moe_router_fusion && p.framework != Framework::kMegatronCore)
    fail("moe router fusion is Megatron-Core's (--moe-router-fusion, Transformer Engine's fused top-k and aux-loss "
         "kernels); this plan's framework does not run it: use --framework megatron-core");
  const MoeSpec& e = model.moe;
  if (p.ep < 1 || e.experts % p.ep != 0) fail("ep=" + str(p.ep) + " does not divide experts=" + str(e.experts));
  if (p.etp < 1 || e.expert_ffn_hidden % p.etp != 0)
    fail("etp=" + str(p.etp) + " does not divide expert_ffn_hidden=" + str(e.expert_ffn_hidden));
  const int64_t block = int64_t{p.ep} * std::max(1, p.etp);
  const int64_t world = int64_t{p.tp} * p.cp * p.dp;
  if (block < 1 || world % block != 0) {
    fail("ep*etp = " + str(block) + " does not divide tp*cp*dp = " + str(world) +
         " (the experts re-map the ranks of a pipeline stage)");
    L->expert_dp = 1;
  } else {
    L->expert_dp = static_cast<int>(world / block);
  }
  // Megatron validate_args: "When using MoE and tensor parallelism, sequence
  // parallelism must be used" -- an MoE plan with tp > 1 runs SP.
  if (p.tp > 1) p.sp = true;
  if (p.shard_group != 0) fail("a shard group with MoE is not modelled");
  if (p.dp_mode == DpMode::kAsync) fail("async data parallel with MoE is not modelled");
  if (p.moe_imbalance != 0 && p.moe_imbalance < 1) fail("moe imbalance is the busiest rank's load over the mean, >= 1");
  if (p.moe_pad_to_capacity) {
    // TransformerConfig: "moe_expert_capacity_factor must be set to use
    // moe_pad_expert_input_to_capacity"; padded, every expert runs its
    // capacity whatever the routing, so an imbalance has nothing to say.
    if (e.capacity_factor <= 0)
      fail("padding to capacity needs a capacity factor: " + model.name +
           " is dropless (set the model's moe.capacity_factor)");
    if (p.moe_imbalance != 0)
      fail("moe imbalance does not apply when every expert is padded to its capacity (moe_pad_to_capacity)");
  }
}

}  // namespace

Layout resolve_plan(const ModelSpec& model, const ClusterSpec& cluster, int gpus, const Plan& plan) {
  TRAINPLAN_CHECK(gpus >= 1 && (gpus <= cluster.gpus_per_node || gpus % cluster.gpus_per_node == 0),
                  "resolve_plan needs a checked GPU count");
  Layout L;
  L.plan = plan;
  Plan& p = L.plan;
  L.gpus = gpus;
  L.nodes = (gpus + cluster.gpus_per_node - 1) / cluster.gpus_per_node;
  const int nodes = L.nodes;
  auto fail = [&L](const std::string& why) {
    L.feasible = false;
    L.reasons.push_back(why);
  };

  if (nodes > 1 && !cluster.inter_node) {
    fail("cluster " + cluster.name + " is a single box without an inter-node fabric, but " + str(nodes) +
         " nodes were asked for");
  }
  if (p.seq == 0) p.seq = model.seq_len;
  if (!p.schedule_given) p.schedule = p.vp > 1 ? Schedule::kInterleaved : Schedule::k1F1B;
  if (p.fp8_recipe != Fp8Recipe::kNone && !p.fp8_recipe_given) p.fp8_recipe = default_fp8_recipe(cluster, p.zero);
  if (p.recompute == Recompute::kSelective && p.recompute_modules == 0) p.recompute_modules = kRcCoreAttn;
  if (p.recompute != Recompute::kSelective && p.recompute_modules != 0) {
    fail("recompute modules (" + recompute_modules_name(p.recompute_modules) + ") need recompute=selective");
  }
  if ((p.recompute_modules & (kRcMoe | kRcMoeAct | kRcSharedExperts)) && !model.has_moe)
    fail("recompute modules moe, moe_act and shared_experts need a Mixture-of-Experts model");
  if ((p.recompute_modules & kRcMlaUpProj) && model.attention != AttentionKind::kMla)
    fail("recompute module mla_up_proj needs multi-head latent attention");
  if (p.recompute_layers < 0) fail("recompute_layers=" + str(p.recompute_layers) + " is negative (0: every layer)");
  if (p.recompute_layers > 0 && p.recompute != Recompute::kFull)
    fail("recompute_layers=" + str(p.recompute_layers) + " needs recompute=full (Megatron's block method)");

  const int64_t mp = int64_t{p.tp} * p.pp * p.cp;
  if (p.dp == 0) {
    if (L.gpus % mp != 0) {
      fail("tp*pp*cp = " + str(mp) + " does not divide the cluster's " + str(L.gpus) + " GPUs");
      p.dp = 1;
    } else {
      p.dp = static_cast<int>(L.gpus / mp);
    }
  } else if (mp * p.dp != L.gpus) {
    fail("tp*pp*dp*cp = " + str(mp * p.dp) + " but the cluster has " + str(L.gpus) + " GPUs");
  }
  if (p.gbs == 0) p.gbs = p.mbs * p.dp;
  resolve_experts(model, &L, fail);

  if (model.heads % p.tp != 0) fail("tp=" + str(p.tp) + " does not divide heads=" + str(model.heads));
  else if (model.kv_heads % p.tp != 0)
    fail("tp=" + str(p.tp) + " does not divide kv_heads=" + str(model.kv_heads));
  if (model.ffn_hidden % p.tp != 0) fail("tp=" + str(p.tp) + " does not divide ffn_hidden=" + str(model.ffn_hidden));
  if (model.has_moe && (model.moe.shared_experts * model.moe.shared_ffn_hidden) % p.tp != 0)
    fail("tp=" + str(p.tp) + " does not divide the shared experts' width " +
         str(model.moe.shared_experts * model.moe.shared_ffn_hidden));

  if (model.vocab % p.tp != 0) fail("tp=" + str(p.tp) + " does not divide vocab=" + str(model.vocab));
  if (p.sp && p.seq % p.tp != 0) fail("sequence parallel needs tp=" + str(p.tp) + " to divide seq=" + str(p.seq));
  if (p.cp > 1 && p.seq % (2 * p.cp) != 0)
    fail("cp=" + str(p.cp) + " needs seq=" + str(p.seq) + " to be a multiple of 2*cp (causal load balancing)");
  if (p.cp_comm == CpComm::kA2a) {
    // Transformer Engine AttnFuncWithCPAndQKVOA2A: "The number of attention
    // heads needs to be divisible by CP size!" (the heads of a TP rank, for
    // the queries and for the keys and values).  Megatron-Core, DeepSpeed
    // (DeepSpeed-Ulysses through Megatron-DeepSpeed, deepspeed_export.cc) and
    // generic plans run it; torchtitan's context parallelism is ring
    // attention (torch.distributed.tensor.experimental.context_parallel).
    const int64_t width = int64_t{p.tp} * p.cp;
    if (p.cp < 2) fail("cp comm type a2a needs cp >= 2 (there is no context-parallel exchange)");
    else if (model.heads % width != 0 || model.kv_heads % width != 0)
      fail("cp comm type a2a splits the attention heads over tp*cp = " + str(width) + " ranks; heads=" +
           str(model.heads) + " and kv_heads=" + str(model.kv_heads) +
           " must both be multiples of it (Transformer Engine: the number of attention heads needs to be divisible "
           "by CP size); use p2p or a smaller cp");
    if (p.framework != Framework::kGeneric && p.framework != Framework::kMegatronCore &&
        p.framework != Framework::kDeepSpeed)
      fail("cp comm type a2a (all-to-all context parallelism) runs in Megatron-Core (--cp-comm-type a2a) and "
           "DeepSpeed (Ulysses); this plan's framework runs ring attention or none: use --framework megatron-core "
           "or deepspeed, or --cp-comm-type p2p");
  }
  if (p.pp > model.layers) fail("pp=" + str(p.pp) + " exceeds layers=" + str(model.layers));

  // The simulator's clock counts picoseconds in 64 bits (106 days).  A step
  // that even at the GPUs' highest peak needs more than kMaxStepAtPeakSeconds of
  // the least work a layer does (its query and output projections, forward
  // and backward) is no training step, and its simulation would overflow.
  {
    double peak = 0;
    for (const auto& [dtype, rate] : cluster.gpu.peak) peak = std::max(peak, rate.flop_per_s());
    const double least_flops = static_cast<double>(p.gbs) * static_cast<double>(p.seq) * 12.0 *
                               static_cast<double>(model.layers) * static_cast<double>(model.hidden) *
                               static_cast<double>(model.attention_width());
    const double at_peak_s = peak > 0 ? least_flops / (peak * static_cast<double>(std::max(1, gpus))) : 0;
    if (at_peak_s > kMaxStepAtPeakSeconds) {
      char buf[96];
      std::snprintf(buf, sizeof buf, "%.3g s", at_peak_s);
      fail("a step of gbs=" + str(p.gbs) + " sequences of " + str(p.seq) + " tokens needs at least " + buf +
           " on these GPUs even at peak; trainplan simulates steps of up to " +
           str(static_cast<int64_t>(kMaxStepAtPeakSeconds)) + " s at peak (use a smaller gbs)");
    }
  }
  const int64_t per_step = p.mbs * p.dp;
  if (p.gbs % per_step != 0) {
    fail("gbs=" + str(p.gbs) + " is not a multiple of mbs*dp = " + str(per_step));
    L.microbatches = std::max<int64_t>(1, p.gbs / per_step);
  } else {
    L.microbatches = p.gbs / per_step;
  }

  // Stage layers: explicit or balanced.
  if (!p.stage_layers.empty()) {
    const int chunks = chunks_per_rank(p);
    const std::vector<int> per_rank = rank_stage_layers(p);
    const int64_t listed = std::accumulate(p.stage_layers.begin(), p.stage_layers.end(), int64_t{0});
    if (stage_layers_per_chunk(p)) {
      // One entry per virtual stage: any may be empty (an end chunk with the
      // embedding or the loss alone), every rank holds a layer.
      const auto empty_rank = std::find(per_rank.begin(), per_rank.end(), 0);
      if (listed != model.layers) {
        fail("stage_layers (per virtual stage) sum to " + str(listed) + " but the model has " + str(model.layers) +
             " layers");
      } else if (empty_rank != per_rank.end()) {
        fail("stage_layers leave pipeline rank " + str(empty_rank - per_rank.begin()) + " without a layer");
      } else {
        L.stage_layers = per_rank;
      }
    } else if (static_cast<int>(p.stage_layers.size()) != p.pp) {
      fail("stage_layers lists " + str(static_cast<int64_t>(p.stage_layers.size())) + " stages but pp=" + str(p.pp) +
           (chunks > 1 && p.schedule != Schedule::kDualPipe
                ? " (or one per virtual stage: pp x " + str(chunks) + " = " + str(int64_t{p.pp} * chunks) + ")"
                : ""));
    } else if (std::find(p.stage_layers.begin(), p.stage_layers.end(), 0) != p.stage_layers.end()) {
      fail("stage_layers leave pipeline rank " +
           str(std::find(p.stage_layers.begin(), p.stage_layers.end(), 0) - p.stage_layers.begin()) +
           " without a layer");
    } else if (p.schedule == Schedule::kDualPipe) {
      // Ranks r and pp-1-r hold the same two stages (one of each copy).
      const std::vector<int> half(p.stage_layers.begin(), p.stage_layers.begin() + p.pp / 2);
      if (p.pp % 2 != 0 || mirrored_stage_layers(half) != p.stage_layers) {
        fail("stage_layers of the dualpipe schedule list each rank's layers (its two stages, one of each parameter "
             "copy); ranks r and pp-1-r hold the same stages, so the list must read the same from both ends");
      } else if (std::accumulate(half.begin(), half.end(), int64_t{0}) != model.layers) {
        fail("stage_layers of the dualpipe schedule: the first pp/2 ranks hold every layer once, but sum to " +
             str(std::accumulate(half.begin(), half.end(), int64_t{0})) + " of the model's " + str(model.layers));
      } else {
        L.stage_layers = p.stage_layers;
      }
    } else if (std::accumulate(p.stage_layers.begin(), p.stage_layers.end(), int64_t{0}) != model.layers) {
      fail("stage_layers sum to " +
           str(std::accumulate(p.stage_layers.begin(), p.stage_layers.end(), int64_t{0})) + " but the model has " +
           str(model.layers) + " layers");
    } else {
      L.stage_layers = p.stage_layers;
    }
  } else if (p.schedule == Schedule::kDualPipe && p.pp % 2 == 0 && p.pp <= model.layers) {
    // Rank r holds stages r and pp-1-r, as rank min(r, pp-1-r) of the
    // dualpipe-v plan on pp/2 ranks does (execution_layout).
    L.stage_layers = mirrored_stage_layers(balance_v_stage_layers(model.layers, p.pp / 2));
  } else if (p.pp <= model.layers && v_shape(p.schedule)) {
    L.stage_layers = balance_v_stage_layers(model.layers, p.pp);
  } else if (p.pp <= model.layers) {
    L.stage_layers = balance_stage_layers(model.layers, p.pp);
    if (L.stage_layers.empty()) fail("pp=" + str(p.pp) + " leaves a stage without layers");
  }
  if (L.stage_layers.empty()) L.stage_layers.assign(p.pp, static_cast<int>(std::max<int64_t>(1, model.layers / p.pp)));

  // Schedule rules.
  if (p.vp > 1 && !interleaved(p.schedule))
    fail("vp=" + str(p.vp) + " needs the interleaved schedule, not " + to_string(p.schedule));
  if (interleaved(p.schedule)) {
    const std::string name = to_string(p.schedule);
    if (p.pp < 2) fail("the " + name + " schedule needs pp >= 2");
    if (p.vp < 2) fail("the " + name + " schedule needs vp >= 2");
    // Megatron needs vp | layers per stage; with auto-balanced uneven stages
    // (Llama 3 405B: 7 and 8 layers) the chunks differ by at most one layer.
    const bool even = model.layers % p.pp == 0 && p.stage_layers.empty();
    // A short end stage's embedding or loss takes a chunk's place
    // (chunk_counts): its first (last) chunk may hold no layer.
    const EndPlaces ends = end_places(p, L.stage_layers);
    // A per-virtual-stage list places each chunk itself.
    const int checked = stage_layers_per_chunk(p) ? 0 : static_cast<int>(L.stage_layers.size());
    for (int s = 0; s < checked; ++s) {
      const int n = L.stage_layers[static_cast<size_t>(s)];
      if (even && n % p.vp != 0) {
        fail("vp=" + str(p.vp) + " does not divide the " + str(n) + " layers of a pipeline stage");
        break;
      }
      if (ends.places(L.stage_layers, s) < p.vp) {
        fail("vp=" + str(p.vp) + " exceeds the " + str(n) + " layers of a pipeline stage");
        break;
      }
    }
    if (p.schedule == Schedule::kInterleaved && p.pp >= 2 && L.microbatches % p.pp != 0)
      fail("interleaved schedule needs microbatches=" + str(L.microbatches) + " to be a multiple of pp=" + str(p.pp));
    // PyTorch ScheduleInterleavedZeroBubble: rounds = max(1, m // pp), "Zero
    // bubble requires the number of microbatches to be a multiple of the
    // number of rounds".
    const int64_t rounds = std::max<int64_t>(1, L.microbatches / std::max(1, p.pp));
    if (p.schedule == Schedule::kInterleavedZb && L.microbatches % rounds != 0)
      fail("the interleaved-zb schedule needs microbatches=" + str(L.microbatches) + " to be a multiple of its " +
           str(rounds) + " rounds (max(1, microbatches / pp))");
  }
  if (p.recompute_layers > 0) {
    // Megatron's block method recomputes the first N layers of each model
    // chunk; N beyond the largest chunk is every layer, which the uniform
    // method (recompute_layers 0) says without a count that can be wrong.
    const int largest = largest_chunk_layers(p, L.stage_layers);
    if (p.recompute_layers >= largest && largest > 0)
      fail("recompute_layers=" + str(p.recompute_layers) + " covers every layer of the largest model chunk (" +
           str(largest) + "); use full recompute of every layer (recompute_layers 0)");
  }

  if (p.fp8_param_gather) {
    // megatron/training/arguments.py: "--fp8-param-gather only supported
    // with distributed optimizer, torch fsdp2, megatron fsdp"; FP8 through
    // Transformer Engine.
    if (p.fp8_recipe == Fp8Recipe::kNone) fail("fp8 param gather needs --precision fp8");
    else if (!fp8_transformer_engine(p))
      fail("fp8 param gather keeps Transformer Engine FP8 weights; this plan runs torchao float8 (ZeRO-3 "
           "tensorwise/rowwise), which all-gathers in FP8 on its own");
    if (p.zero < 1) fail("fp8 param gather needs the distributed optimizer or FSDP (zero >= 1)");
  }
  if (p.tp_comm_overlap) {
    // Megatron-Core's --tp-comm-overlap (Transformer Engine's userbuffers)
    // and torchtitan's async TP (parallelism.enable_async_tensor_parallel:
    // torch's micro-pipelined all-gather-matmul and matmul-reduce-scatter
    // through SymmetricMemory) both need sequence parallelism
    // (megatron/training/arguments.py validate_args: "Tensor parallel
    // communication/GEMM overlap can happen only when sequence parallelism
    // is enabled"; torchtitan's TP always shards the norms' sequence) and
    // share one node's memory (CUDA IPC).
    if (p.tp < 2) fail("tp comm overlap needs tp >= 2 (there is no tensor-parallel communication to overlap)");
    else if (!p.sp) fail("tp comm overlap needs sequence parallelism (--sp), as Megatron's validate_args requires");
    if (p.tp > cluster.gpus_per_node)
      fail("tp comm overlap needs the tensor-parallel group inside one node (Transformer Engine's userbuffers, "
           "torch's SymmetricMemory); tp=" + str(p.tp) + " spans nodes of " + str(cluster.gpus_per_node) + " GPUs");
    if (p.framework != Framework::kGeneric && p.framework != Framework::kMegatronCore &&
        p.framework != Framework::kTorchtitan)
      fail("tp comm overlap runs in Megatron-Core (--tp-comm-overlap, Transformer Engine userbuffers) and torchtitan "
           "(async TP); this plan's framework does not run it: use --framework megatron-core or torchtitan");
    // torchtitan: async TP needs torch.compile of the model
    // (distributed/tensor_parallel.py maybe_enable_async_tp), which its
    // split-backward schedules refuse (torch/distributed/pipelining/
    // schedules.py _check_torch_compile_compatibility: "we dont support
    // input/weight backward split with torch.compile").
    if (p.framework == Framework::kTorchtitan &&
        (p.schedule == Schedule::kInterleavedZb || p.schedule == Schedule::kZbv || p.schedule == Schedule::kDualPipeV))
      fail("torchtitan's async TP needs torch.compile, which its zero-bubble schedules (split backward) do not "
           "support; use a 1F1B, interleaved or GPipe schedule, or drop --tp-comm-overlap");
  }
  if (p.compile) {
    // torch.compile is PyTorch's; Megatron and DeepSpeed run their own fused
    // kernels (and Megatron-Core's TE modules are not compiled whole).
    if (p.framework != Framework::kTorchtitan && p.framework != Framework::kPytorch)
      fail("compile (torch.compile of the model) runs in torchtitan and the PyTorch script; use --framework "
           "torchtitan or pytorch, or drop --compile");
    else if (zero_bubble(p.schedule))
      fail(std::string("torch.compile refuses the ") + to_string(p.schedule) +
           " schedule's split backward (torch/distributed/pipelining/schedules.py "
           "_check_torch_compile_compatibility); use a 1F1B, interleaved or GPipe schedule, or drop --compile");
  }
  if (p.ep_overlap) {
    for (const std::string& why : ep_overlap_conflicts(p)) fail(why);
  }
  for (const std::string& why : cuda_graph_conflicts(model, p)) fail(why);
  if (p.moe_shared_expert_overlap) {
    for (const std::string& why : shared_expert_overlap_conflicts(model, p)) fail(why);
  }
  // model_parallel_config.py cross_entropy_loss_fusion: Megatron-Core's
  // fused vocab-parallel loss (language_module.py compute_language_model_loss).
  if (p.cross_entropy_fusion && p.framework != Framework::kMegatronCore)
    fail("cross entropy fusion is Megatron-Core's (--cross-entropy-loss-fusion, its fused vocab-parallel loss); this "
         "plan's framework does not run it: use --framework megatron-core");
  if (p.framework == Framework::kDeepSpeed) {
    const std::string why = deepspeed_pipeline_zero_conflict(p);
    if (!why.empty()) fail(why);
  }
  // transformer_config.py: "overlap_moe_expert_parallel_comm must be enabled
  // when enabling delay_wgrad_compute".
  if (p.delay_wgrad && !p.ep_overlap)
    fail("delay wgrad compute needs ep overlap (Megatron-Core: overlap_moe_expert_parallel_comm must be enabled "
         "when enabling delay_wgrad_compute)");
  if (p.moe_dispatcher != MoeDispatcher::kAllToAll) {
    // The flex token dispatcher (megatron/core/transformer/moe/
    // token_dispatcher.py MoEFlexTokenDispatcher): "DeepEP dispatcher
    // requires TPxEP > 1" (its TP is the expert TP).  torchtitan runs DeepEP
    // (v0.2.2 expert_parallel_comm_backend; head moe_comm_backend, with
    // HybridEP): "DeepEP requires expert parallelism (ep_degree > 1)" and
    // "DeepEP with Expert Tensor Parallelism (ETP) is not supported yet"
    // (v0.2.2 deepseek_v3/infra/parallelize.py; head has no expert TP).
    // DeepEP's intranode kernels reach at most 8 NVLink peers
    // (deepseek-ai/DeepEP NUM_MAX_NVL_PEERS = 8; TransformerConfig:
    // "Currently only hybridep backend supports the MNNVL case").
    const std::string name = to_string(p.moe_dispatcher);
    if (!model.has_moe) fail("the " + name + " dispatcher needs a Mixture-of-Experts model");
    else if (int64_t{p.ep} * std::max(1, p.etp) < 2)
      fail("the " + name + " dispatcher needs ep*etp > 1 (Megatron-Core: the flex dispatcher requires TPxEP > 1); "
           "use alltoall or a larger --ep");
    if (!runs_flex_dispatcher(p.framework))
      fail("the " + name + " dispatcher runs in Megatron-Core (flex token dispatcher) and torchtitan (DeepEP, "
           "HybridEP at head); this plan's framework does not run it: use --moe-dispatcher alltoall");
    if (p.framework == Framework::kTorchtitan && (p.ep < 2 || p.etp != 1))
      fail("torchtitan's " + name + " dispatch needs ep > 1 and etp 1 (\"DeepEP requires expert parallelism\", "
           "\"DeepEP with Expert Tensor Parallelism (ETP) is not supported yet\")");
    // TransformerConfig: "Flex token dispatcher with deepep backend does not
    // support moe_pad_expert_input_to_capacity".
    if (p.moe_dispatcher == MoeDispatcher::kDeepEp && p.moe_pad_to_capacity)
      fail("the deepep dispatcher does not pad to capacity (Megatron-Core); use hybridep or alltoall");
    // deep_ep/buffers/legacy.py get_dispatch_config: a tuned config per
    // group size, else "Unsupported number of EP ranks" (the group is
    // Megatron-Core's ETP x EP group).
    const int64_t group = int64_t{p.ep} * std::max(1, p.etp);
    if (p.moe_dispatcher == MoeDispatcher::kDeepEp && group >= 2 && !deepep_supports_group(group))
      fail("the deepep dispatcher has tuned configs for expert groups (ep*etp) of " + deepep_group_sizes() +
           " ranks only (DeepEP: \"Unsupported number of EP ranks\"); ep*etp = " + str(group) +
           ": use another --ep, or hybridep / alltoall");
    if (p.moe_dispatcher == MoeDispatcher::kDeepEp && cluster.gpus_per_node > 8)
      fail("the deepep dispatcher reaches at most 8 NVLink peers (DeepEP NUM_MAX_NVL_PEERS); " + cluster.name +
           "'s NVLink domain is " + str(cluster.gpus_per_node) + " GPUs: use --moe-dispatcher hybridep");
  }
  if (p.mtp_layers != 0) {
    // Megatron validate_args: "Multi-Token Prediction (MTP) is not supported
    // with <type> position embedding type. The supported position embedding
    // types are rope and none"; TransformerConfig: "MTP supports at most one
    // layer when enabling overlap_moe_expert_parallel_comm".  Megatron-Core
    // is the framework that runs it (torchtitan's DeepSeek-V3 has no MTP
    // module; Megatron-LM of 2021-22, DeepSpeed and plain PyTorch neither).
    if (p.mtp_layers < 0 || p.mtp_layers > kMaxMtpLayers)
      fail("mtp_layers=" + str(p.mtp_layers) + " is out of range 0.." + str(kMaxMtpLayers));
    if (model.position_embedding != PositionEmbedding::kRope)
      fail(std::string("multi-token prediction needs rotary position embeddings; ") + model.name + " has " +
           (model.position_embedding == PositionEmbedding::kAlibi ? "ALiBi" : "learned") +
           " ones (Megatron: MTP supports the rope and none position embedding types)");
    if (p.framework != Framework::kGeneric && p.framework != Framework::kMegatronCore)
      fail("multi-token prediction is Megatron-Core's (--mtp-num-layers); this plan's framework has no MTP "
           "module: use --framework megatron-core");
  }
  if (zero_bubble(p.schedule)) {
    // Qi et al. 2024 run ZB-1p/ZB-2p with one model chunk per rank (the
    // authors' Megatron fork refuses --enable-zero-bubble with a virtual
    // pipeline); ZB-V runs exactly two (PyTorch ScheduleZBVZeroBubble: "ZBV
    // requires exactly 2 stages per rank"), implied by the schedule.
    if (p.pp < 2) fail(std::string("the ") + to_string(p.schedule) + " schedule needs pp >= 2");
    if (v_shape(p.schedule) || p.schedule == Schedule::kDualPipe) {
      for (int n : L.stage_layers) {
        if (n < 2) {
          fail(std::string("the ") + to_string(p.schedule) +
               " schedule places two model chunks on every pipeline rank; a rank with " + str(n) +
               " layer(s) cannot hold both (use a smaller pp)");
          break;
        }
      }
    }
    // PyTorch ScheduleDualPipeV: "DualPipeV requires at least as many
    // microbatches as stages".
    if (p.schedule == Schedule::kDualPipeV && L.microbatches < 2 * p.pp)
      fail("the dualpipe-v schedule needs at least as many micro-batches as its 2*pp = " + str(2 * p.pp) +
           " stages (got " + str(L.microbatches) + ")");
    // deepseek-ai/DualPipe dualpipe.py: "assert num_ranks % 2 == 0" and
    // "num_chunks % 2 == 0 and num_chunks >= num_ranks * 2" (half the
    // micro-batches enter at each end).
    if (p.schedule == Schedule::kDualPipe) {
      if (p.pp % 2 != 0) fail("the dualpipe schedule needs an even pp (ranks pair up as r and pp-1-r); got pp=" + str(p.pp));
      else if (p.pp < 4)
        fail("the dualpipe schedule needs pp >= 4 here: trainplan runs it as dualpipe-v on pp/2 ranks, which needs "
             "two (DeepSeek's DualPipe also runs on pp 2, not modelled)");
      if (L.microbatches % 2 != 0 || L.microbatches < 2 * p.pp)
        fail("the dualpipe schedule needs an even number of micro-batches, at least 2*pp = " + str(2 * p.pp) +
             " (half enter at each end; got " + str(L.microbatches) + ")");
      if (p.shard_group != 0) fail("a shard group with the dualpipe schedule is not modelled");
      if (p.framework != Framework::kGeneric)
        fail("the dualpipe schedule runs in DeepSeek's own DualPipe (deepseek-ai/DualPipe), which no framework "
             "profile runs; use --framework generic, or dualpipe-v at pp/2 (the same order per rank) with a "
             "framework");
    }
    // The deferred W pass of a layer needs the inputs of its linear layers
    // and their output gradients: under full recompute those are
    // rematerialised in B and held until W, which no framework schedules.
    if (p.recompute == Recompute::kFull)
      fail(std::string("the ") + to_string(p.schedule) +
           " schedule defers weight gradients, which full recompute does not support (use selective or none)");
    if (p.zero == 3)
      fail(std::string("the ") + to_string(p.schedule) +
           " schedule keeps every weight on its stage for the deferred W passes; ZeRO-3 is not supported "
           "(use zero 0, 1 or 2)");
  }

  // ZeRO, sharding, offload, async.
  if (p.zero < 0 || p.zero > 3) fail("zero=" + str(p.zero) + " is not a ZeRO stage (0, 1, 2, 3)");
  const int dp_cp = p.dp * p.cp;
  if (p.shard_group == 0) {
    L.shard_degree = p.zero > 0 ? dp_cp : 1;
  } else {
    if (p.zero == 0) fail("a shard group needs ZeRO stage 1, 2 or 3");
    if (dp_cp % p.shard_group != 0)
      fail("shard-group=" + str(p.shard_group) + " does not divide dp*cp = " + str(dp_cp));
    L.shard_degree = p.shard_group;
  }
  if (p.offload == Offload::kOptimizer && p.zero == 0) fail("optimizer offload needs ZeRO stage 1, 2 or 3");
  if (p.offload == Offload::kParams && p.zero != 3) fail("parameter offload needs ZeRO stage 3");
  if (p.precision == Precision::kFp32 && p.grad_dtype == GradDtype::kBf16)
    fail("fp32 training keeps fp32 gradients; --grad-dtype bf16 needs --precision bf16 or fp16");
  if (p.moment_dtype == MomentDtype::kBf16) {
    // Megatron-Core's precision-aware optimizer (Transformer Engine's
    // FusedAdam with exp_avg_dtype / exp_avg_sq_dtype) keeps the moments in
    // bf16 beside an fp32 master copy of 16-bit parameters, and only under
    // its distributed optimizer (megatron/core/optimizer/__init__.py:
    // "--use-precision-aware-optimizer only supported with distributed
    // optimizer"); no other framework trainplan exports to has the option.
    if (p.precision == Precision::kFp32)
      fail("bf16 Adam moments sit beside the fp32 master copy of 16-bit parameters; fp32 training keeps fp32 "
           "moments (use --precision bf16, fp16 or fp8)");
    if (p.zero < 1)
      fail("bf16 Adam moments need the distributed optimizer (zero >= 1), as Megatron-Core's precision-aware "
           "optimizer does");
    if (p.offload != Offload::kNone)
      fail("bf16 Adam moments are modelled on the GPU's optimizer; with --offload the states stay fp32");
    if (!runs_bf16_moments(p.framework))
      fail("bf16 Adam moments are Megatron-Core's precision-aware optimizer; this plan's framework keeps fp32 "
           "moments (use --framework megatron-core or generic)");
  }
  if (p.dp_mode == DpMode::kAsync) {
    if (p.zero != 0) fail("async data parallel (parameter servers) cannot shard with ZeRO");
    if (p.dp < 2) fail("async data parallel needs dp >= 2");
    if (p.pp != 1 || p.cp != 1) fail("async data parallel (parameter servers) is modelled for pp=1 and cp=1");
  }
  if (p.ps_servers < 0) fail("ps-servers must be >= 0");
  if (const std::string why = attention_kernel_conflict(p, model, cluster.gpu.arch, cluster.gpu.name); !why.empty()) {
    fail(why);
  }
  // FP8: tensor cores with FP8 (Hopper, Ada, Blackwell); MXFP8 only on
  // Blackwell (Transformer Engine: MXFP8BlockScaling needs sm_100).
  if (p.fp8_recipe != Fp8Recipe::kNone) {
    if (p.precision != Precision::kBf16) fail("fp8 training keeps bf16 for everything but the FP8 GEMMs");
    if (!cluster.gpu.peak.count(Dtype::kFp8)) {
      fail("fp8 needs FP8 tensor cores (Hopper, Ada or Blackwell); " + cluster.gpu.name + " has none");
    } else if (p.fp8_recipe == Fp8Recipe::kMxfp8 && !is_blackwell(cluster)) {
      fail("the mxfp8 recipe needs Blackwell MX tensor cores (B200, B300, GB200, GB300); " + cluster.gpu.name +
           " runs delayed, tensorwise, rowwise or blockwise");
    }
  }
  return L;
}

}  // namespace trainplan
