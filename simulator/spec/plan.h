// A parallel layout ("plan") and its validation against a model and cluster.
//
// The same field names are used by the CLI flags (--tp, --zero, ...) and by
// plan.json.  An impossible plan is an answer, not an error:
// resolve_plan() returns a Layout with feasible == false and the reasons
// (e.g. "tp=3 does not divide heads=32"), in the order the rules are checked.
#ifndef TRAINPLAN_SIM_SPEC_PLAN_H_
#define TRAINPLAN_SIM_SPEC_PLAN_H_

#include <cstdint>
#include <string>
#include <vector>

#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"

namespace trainplan {

enum class Recompute { kNone, kSelective, kFull };
// What selective recompute re-runs in backward (Megatron-Core's
// --recompute-modules; bits of Plan::recompute_modules).  core_attn: the
// attention core (Korthikanti's selective recompute, Megatron's default);
// layernorm: the two norms (their outputs are not kept); mlp: a dense
// layer's MLP; moe: the whole MoE block, its token all-to-alls included;
// moe_act: the experts' activation; shared_experts; mla_up_proj: MLA's up
// projections (Q, K, V are not kept).
enum RecomputeModule : uint16_t {
  kRcCoreAttn = 1,
  kRcLayernorm = 2,
  kRcMlp = 4,
  kRcMoe = 8,
  kRcMoeAct = 16,
  kRcSharedExperts = 32,
  kRcMlaUpProj = 64,
};
// The module names, in bit order (core_attn, layernorm, mlp, moe, moe_act,
// shared_experts, mla_up_proj).
const std::vector<std::string>& recompute_module_names();
// "core_attn,layernorm": the names of the set bits, comma-separated.
std::string recompute_modules_name(uint16_t modules);
// What Megatron-Core captures in per-layer CUDA graphs (--cuda-graph-impl
// transformer_engine --cuda-graph-modules ...; bits of Plan::cuda_graph).
// Each graphed layer is one graph per micro-batch (Transformer Engine's
// make_graphed_callables; transformer_layer.py _te_cuda_graph_capture runs
// the captured attention and MLP parts in one callable), replayed with one
// host call per pass instead of one per op.  kCgLayer: the whole layer
// (Megatron's empty module list); attn: input norm and self-attention;
// mlp: a dense layer's MLP; moe: a whole MoE block (drop-and-pad only);
// moe_router: the MoE block's norm, router (and shared experts) only;
// moe_preprocess: the dispatcher's preprocessing (with moe_router).
enum CudaGraphModule : uint8_t {
  kCgLayer = 1,
  kCgAttn = 2,
  kCgMlp = 4,
  kCgMoe = 8,
  kCgMoeRouter = 16,
  kCgMoePreprocess = 32,
};
// The names of the set bits of `bits`, bit i naming names[i], in bit order
// (recompute and cuda graph modules).
std::vector<std::string> set_bit_names(uint32_t bits, const std::vector<std::string>& names);
// The module names, in bit order (layer, attn, mlp, moe, moe_router,
// moe_preprocess).
const std::vector<std::string>& cuda_graph_module_names();
// "attn,moe_router": the names of the set bits, comma-separated.
std::string cuda_graph_modules_name(uint8_t modules);
// Pipeline schedules (simulator/schedule/pipeline_schedule.h).  kZb1p and
// kZb2p are Zero Bubble's automatic schedules (Qi et al., ICLR 2024): the
// backward split into input-gradient (B) and weight-gradient (W) passes, W
// deferred into the bubbles, under an activation limit of p (ZB-1p, 1F1B's
// peak) or 2p (ZB-2p) micro-batches.  kZbv is ZB-V (Qi et al. Sec. 6) as
// PyTorch's ScheduleZBVZeroBubble orders it: two model chunks per rank placed
// in a V (rank r holds virtual stages r and 2p-1-r), backward split the same
// way, a fixed order per rank.  kDualPipeV is DeepSeek-V3's DualPipe in
// its V form as PyTorch's ScheduleDualPipeV orders it (same placement): in
// its steady state each rank runs a forward of one chunk paired with the full
// backward of the other, and torchtitan overlaps their expert-parallel
// all-to-alls with each other's compute.
// kInterleavedZb is PyTorch's ScheduleInterleavedZeroBubble (torchtitan's
// "InterleavedZeroBubble"): the looped placement of the interleaved
// schedule, vp chunks per rank, backward split into B and W.
// kDualPipe is DeepSeek-V3's bidirectional DualPipe (report Sec. 3.2.1;
// deepseek-ai/DualPipe dualpipe.py): pp ranks, the model in pp stages, rank
// r holding stage r of one parameter copy (micro-batches fed at rank 0) and
// stage pp-1-r of a second copy (fed at rank pp-1), half the micro-batches
// each way.  dualpipe.py runs on rank r the very order dualpipev.py runs on
// rank min(r, pp-1-r) of pp/2 with half the micro-batches, so the executors
// simulate it as that dualpipe-v plan with the mirrored ranks as twice the
// data-parallel replicas (execution_layout), the V's turn a transfer between
// the two middle ranks.
enum class Schedule {
  kGpipe, k1F1B, kInterleaved, kNaive, kZb1p, kZb2p, kZbv, kDualPipeV, kInterleavedZb, kDualPipe
};
enum class Precision { kBf16, kFp16, kFp32 };
enum class GradDtype { kBf16, kFp32 };
// Adam's two moments (exp_avg, exp_avg_sq) as the optimizer keeps them:
// fp32, or bf16 beside the fp32 master copy (Megatron-Core's
// --use-precision-aware-optimizer --exp-avg-dtype bf16 --exp-avg-sq-dtype
// bf16, Transformer Engine's FusedAdam; the DeepSeek-V3 report Sec. 3.3.3
// "we adopt the BF16 data format to track the first and second moments").
enum class MomentDtype { kFp32, kBf16 };
enum class Attention { kFlash, kNaive };
// Which fused attention kernel runs a kFlash plan.  kDefault: the one the
// plan's framework picks on its GPU (default_attention_kernel), the kernel
// the cluster's attention_efficiency figure is taken for; the others name a
// kernel, costed at its published rate relative to that default
// (compute_model.h attention_kernel_speedup):
//   fa2    FlashAttention-2 (flash-attn 2.x; PyTorch SDPA's flash backend)
//   cudnn  cuDNN's fused flash attention (Transformer Engine FusedAttention,
//          SDPA's cuDNN backend)
//   fa3    FlashAttention-3 (flash-attn "hopper"; Hopper only)
enum class AttentionKernel { kDefault, kFa2, kCudnn, kFa3 };
enum class DpMode { kSync, kAsync };
enum class Offload { kNone, kOptimizer, kParams };
// How an MoE layer's tokens reach their experts across the expert-parallel
// group (Megatron-Core --moe-token-dispatcher-type, docs/moe.md):
//   alltoall  NCCL all-to-all of every (token, expert) copy, after a global
//             permute into expert order (MoEAlltoAllTokenDispatcher)
//   deepep    the flex dispatcher on DeepEP: each token sent once per
//             destination rank, across nodes once per destination node over
//             RDMA then forwarded over NVLink; the global permute fused
//             into the kernel (--moe-flex-dispatcher-backend deepep)
//   hybridep  the flex dispatcher on HybridEP, the same traffic, and the one
//             backend that runs across a multi-node NVLink domain (NVL72)
enum class MoeDispatcher { kAllToAll, kDeepEp, kHybridEp };
// How the context-parallel ranks of a layer share its attention (Megatron-Core
// --cp-comm-type; Transformer Engine attention/dot_product_attention/
// context_parallel.py):
//   p2p  ring attention (AttnFuncWithCPAndKVP2P): each rank keeps its
//        queries, the K/V chunks circle the ring beside the attention blocks
//   a2a  DeepSpeed-Ulysses (AttnFuncWithCPAndQKVOA2A): an all-to-all turns
//        the sequence-sharded Q, K, V into head-sharded ones before the
//        attention and one turns the output back after it; each rank attends
//        over the whole sequence for heads/cp of its heads
enum class CpComm { kP2p, kA2a };
// FP8 training (docs/fp8.md): the linear layers' GEMMs run in FP8 with one
// of these scaling recipes, everything else in bf16 (Transformer Engine,
// torchao float8).  kNone: no FP8.
//   delayed     per-tensor scale from an amax history (TE DelayedScaling)
//   tensorwise  per-tensor scale from the current amax (TE Float8CurrentScaling, torchao "tensorwise")
//   rowwise     per-row scales (torchao "rowwise")
//   blockwise   1x128 / 128x128 block scales (TE Float8BlockScaling, DeepSeek-V3)
//   mxfp8       32-element blocks with E8M0 scales (TE MXFP8BlockScaling; Blackwell)
enum class Fp8Recipe { kNone, kDelayed, kTensorwise, kRowwise, kBlockwise, kMxfp8 };
// The framework that runs the plan (simulator/framework/framework.h: how it
// executes; names there).
enum class Framework { kGeneric, kMegatronLM, kMegatronCore, kDeepSpeed, kTorchtitan, kPytorch };

const char* to_string(Recompute r);
const char* to_string(Schedule s);
const char* to_string(Precision p);
const char* to_string(GradDtype g);
const char* to_string(MomentDtype m);
const char* to_string(Attention a);
const char* to_string(AttentionKernel k);  // "default", "fa2", "cudnn", "fa3"
const char* to_string(DpMode m);
const char* to_string(Offload o);
const char* to_string(MoeDispatcher d);
// The dispatcher names the CLI and plan.json accept, in enum order.
const std::vector<std::string>& moe_dispatcher_names();
const char* to_string(CpComm c);
// The CLI / plan.json names, in enum order: p2p, a2a.
const std::vector<std::string>& cp_comm_names();
const char* to_string(Fp8Recipe r);
// The schedule names the CLI and plan.json accept, in enum order.
const std::vector<std::string>& schedule_names();
// True for the schedules that split the backward into B and W passes.
bool zero_bubble(Schedule s);
// True for Zero Bubble's automatic schedules (kZb1p, kZb2p): built from the
// stage times by the authors' heuristic, with optimizer post-validation in
// place of the synchronisation before the step (Qi et al. Sec. 4).
bool zero_bubble_automatic(Schedule s);
// True for the schedules that place two model chunks per rank in a V
// (kZbv, kDualPipeV; virtual_stage).
bool v_shape(Schedule s);
// True for the schedules that run the plan's vp chunks per rank in Megatron's
// loop placement (kInterleaved, kInterleavedZb).
bool interleaved(Schedule s);
// The activation limit of a zero-bubble schedule on `pp` ranks, in
// micro-batches of the rank's activation memory M_B: pp for kZb1p (1F1B's
// peak), 2*pp for kZb2p (Qi et al. Sec. 3.1); 0 for the other schedules.
int zero_bubble_activation_limit(Schedule s, int pp);
// The recipe names the CLI and plan.json accept, in enum order after kNone.
const std::vector<std::string>& fp8_recipe_names();

// What the user asked for.  0 means "derive": dp = gpus/(tp*pp*cp),
// gbs = mbs*dp, seq = the model's seq_len, shard_group = dp*cp.
struct Plan {
  int tp = 1;
  int pp = 1;
  int dp = 0;
  int cp = 1;
  int vp = 1;                 // model chunks per pipeline rank (interleaved)
  int zero = 0;               // 0..3
  int shard_group = 0;        // hybrid shard: shard within groups of N ranks
  int64_t mbs = 1;
  int64_t gbs = 0;
  int64_t seq = 0;
  Recompute recompute = Recompute::kNone;
  uint16_t recompute_modules = 0;  // selective: RecomputeModule bits; 0 = core_attn (Megatron's default)
  // Full recompute of only the first `recompute_layers` layers of each model
  // chunk, the others keeping every activation (Megatron's
  // --recompute-method block --recompute-num-layers N); 0: every layer
  // (--recompute-method uniform --recompute-num-layers 1).
  int recompute_layers = 0;
  bool sp = false;            // sequence parallel (with tp > 1)
  Schedule schedule = Schedule::k1F1B;
  bool schedule_given = false;  // false: interleaved when vp > 1, else 1F1B
  Precision precision = Precision::kBf16;
  // FP8 linear GEMMs (precision stays bf16 for everything else); the CLI's
  // --precision fp8 and plan.json's "precision": "fp8".
  Fp8Recipe fp8_recipe = Fp8Recipe::kNone;
  bool fp8_recipe_given = false;  // false: the GPU generation's default (see resolve_plan)
  // Megatron's --fp8-param-gather: the linear layers' compute weights are
  // kept in FP8 only (no bf16 copy) and the distributed optimizer all-gathers
  // them in FP8 (one byte each).  Needs FP8 and ZeRO >= 1.
  bool fp8_param_gather = false;
  // Megatron-Core's --tp-comm-overlap: tensor-parallel collectives overlapped
  // with the GEMMs beside them (ExecutionProfile::tp_comm_overlap says how).
  // Needs tp > 1 inside one node, sequence parallelism and a framework that
  // runs Transformer Engine's userbuffers (megatron-core, or generic).
  bool tp_comm_overlap = false;
  // torch.compile of the model (torchtitan's [compile] enable, the PyTorch
  // script's per-block compile): Inductor fuses the elementwise ops that the
  // eager model runs one aten op at a time.  torchtitan and pytorch plans
  // only; model_compiled() says whether a plan runs compiled.
  bool compile = false;
  // Megatron-Core's --overlap-moe-expert-parallel-comm: each steady-state
  // forward runs merged with a backward of another micro-batch, the
  // expert-parallel all-to-alls of each under the other's compute (the
  // combined 1F1B order, build_pipeline_schedule; ExecutionProfile::
  // paired_ep_overlap).  Needs ep > 1, the interleaved schedule when pp > 1,
  // no full recompute and no "moe" among the recomputed modules (Megatron-Core
  // TransformerConfig.__post_init__).
  bool ep_overlap = false;
  // Megatron-Core's --delay-wgrad-compute with the combined 1F1B: a merged
  // backward runs its weight-gradient GEMMs after its input gradients, while
  // its own expert all-to-all is in flight, so that all-to-all hides under
  // the partner forward's compute and those GEMMs.  Needs ep_overlap.
  bool delay_wgrad = false;
  // The MoE token dispatcher (MoeDispatcher); the flex ones need ep * etp >
  // 1 and Megatron-Core, DeepEP an NVLink domain of at most 8 GPUs.
  MoeDispatcher moe_dispatcher = MoeDispatcher::kAllToAll;
  // The context-parallel exchange (CpComm); a2a needs cp > 1, heads and
  // kv_heads divisible by tp*cp, and a framework that runs it (megatron-core,
  // generic).
  CpComm cp_comm = CpComm::kP2p;
  // Token dropping with padding (Megatron-Core
  // --moe-pad-expert-input-to-capacity): every expert's input is padded to
  // its capacity, ceil(capacity_factor x its mean load), so each expert runs
  // and each rank sends exactly capacity_factor x the mean (static shapes).
  // Needs the model's capacity_factor; not with deepep.
  bool moe_pad_to_capacity = false;
  // Megatron-Core's --moe-router-fusion: Transformer Engine's fused top-k
  // with the score function and the auxiliary-loss kernels, the router's
  // 72 kernels down to 31 (layer_cost.cc assign_host_calls).  MoE models on
  // Megatron-Core only.
  bool moe_router_fusion = false;
  // Megatron-Core's --moe-shared-expert-overlap: the shared experts run on
  // a stream of their own beside the token all-to-alls (step_costs.cc).
  // Needs shared experts, Megatron-Core, ep * etp > 1, no --ep-overlap and
  // no recompute of the shared_experts module (shared_expert_conflicts).
  bool moe_shared_expert_overlap = false;
  // Megatron-Core's --cross-entropy-loss-fusion (native implementation,
  // megatron/core/fusions/fused_cross_entropy.py): the vocab-parallel loss's
  // elementwise kernels compiled into three fused segments forward and one
  // backward, the same fp32 softmax kept (layer_cost.cc output_cost).
  // Megatron-Core only; any model.
  bool cross_entropy_fusion = false;
  // Multi-token prediction (DeepSeek-V3 report Sec. 2.2; Megatron-Core
  // --mtp-num-layers): depths after the output layer, each a projection of
  // the next tokens' embedding and the hidden state, a transformer layer of
  // the model's last layer's kind, and the logits and loss again on the
  // shared output layer (output_block_cost), on the loss's pipeline stage.
  // 0: none.
  int mtp_layers = 0;
  // Per-layer CUDA graphs (CudaGraphModule bits; 0: eager), Megatron-Core's
  // --cuda-graph-impl transformer_engine: the captured ops cost the host one
  // graph replay per layer and pass instead of their op calls, and each
  // graphed layer keeps static input buffers per micro-batch in flight.
  // Rules in cuda_graph_conflicts.
  uint8_t cuda_graph = 0;
  GradDtype grad_dtype = GradDtype::kFp32;  // Megatron keeps fp32 main grads
  MomentDtype moment_dtype = MomentDtype::kFp32;  // Adam's m and v (rules in resolve_plan)
  Attention attention = Attention::kFlash;
  AttentionKernel attention_kernel = AttentionKernel::kDefault;  // kFlash only
  DpMode dp_mode = DpMode::kSync;
  Offload offload = Offload::kNone;
  int ps_servers = 0;         // async DP: parameter servers (0 = one per node)
  // Explicit transformer layers per pipeline rank (pp entries) or, with
  // more than one model chunk per rank, per virtual stage in model order
  // (pp x chunks_per_rank entries, as Megatron-Core's --pipeline-model-
  // parallel-layout lists them: stage_layers_per_chunk); empty: balanced.
  std::vector<int> stage_layers;
  Framework framework = Framework::kGeneric;
  // Mixture-of-Experts (models with a "moe" block): expert parallel and
  // expert tensor parallel degrees (Megatron-Core's parallel folding: the
  // experts' ep x etp x edp grid re-maps the tp x cp x dp ranks of a
  // pipeline stage); etp 0 derives tp, Megatron's default.
  int ep = 1;
  int etp = 0;
  // The busiest expert-parallel rank's token load over the mean, as
  // measured (>= 1); 0 derives it from uniform routing (cost/moe_routing.h).
  double moe_imbalance = 0;
};

// Whether the plan's model runs under torch.compile: asked for
// (Plan::compile), or implied where torchtitan needs or recommends it --
// async TP (maybe_enable_async_tp needs the model compiled) and float8
// linears (torchtitan docs/float8.md: compile fuses the scaling and casts)
// -- unless the schedule splits the backward, which PyTorch refuses on
// compiled stages (_check_torch_compile_compatibility).  Always false for
// the frameworks that do not compile (their fused kernels are their own).
bool model_compiled(const Plan& p);

// A plan placed on a cluster of `nodes` nodes, with every derived value.
struct Layout {
  Plan plan;                  // with every 0 ("derive") resolved
  int nodes = 0;
  int gpus = 0;
  int64_t microbatches = 0;   // per pipeline per step: gbs / (mbs*dp)
  int shard_degree = 1;       // ranks one copy of sharded state is spread over
  int expert_dp = 1;          // MoE: expert data parallel, tp*cp*dp / (ep*etp); ZeRO shards expert states over it
  std::vector<int> stage_layers;  // transformer layers per pipeline stage
  // A dualpipe plan as its executors run it (execution_layout): the
  // physical pipeline size pp and data-parallel size dp of the plan it was
  // folded from; 0 for every other layout.  Rank (pp', dp') of the folded
  // layout is physical pipeline rank pp' for dp' < dp and pp-1-pp' (the
  // mirror) for dp' >= dp, data-parallel rank dp' mod dp.
  int mirrored_pp = 0;
  int mirrored_dp = 0;
  bool feasible = true;
  std::vector<std::string> reasons;  // why not, when !feasible
};

// Multi-token prediction depths a plan may give (DeepSeek-V3 trains 1;
// Megatron-Core has no cap).
constexpr int kMaxMtpLayers = 16;
// The largest values a plan may give, the same for flags and plan.json
// (docs/input-limits.md): 2^24 GPUs (16.7M) and parallel degrees, 2^30
// sequences per global batch, 2^20 nodes.
constexpr int64_t kMaxGpus = 1 << 24;
constexpr int64_t kMaxDegree = 1 << 24;
constexpr int64_t kMaxGlobalBatch = 1 << 30;
constexpr int64_t kMaxNodes = 1 << 20;
// The longest step resolve_plan accepts, timed at the GPUs' highest peak
// with the least work a layer does (12 x layers x hidden x heads x
// head_dim FLOPs per token): 10,000 s, a hundred times any published step,
// and far enough under the simulator's 64-bit picosecond clock (106 days)
// that the real step, slower than that bound, still fits it.
constexpr double kMaxStepAtPeakSeconds = 1e4;

// Resolves derived values and checks every rule (divisibility, GPU count,
// batch, schedule, ZeRO/offload combinations) for a job on `gpus` GPUs
// (whole nodes, or part of one node).  Never throws: a plan that cannot run
// comes back with feasible == false and the reasons.
// REQUIRES: check_gpu_count(cluster, gpus) passed.
Layout resolve_plan(const ModelSpec& model, const ClusterSpec& cluster, int gpus, const Plan& plan);

// The layout the executors (lowering, memory, lower bounds) run for
// `layout`: itself, except for the dualpipe schedule, which runs as
// dualpipe-v on pp/2 ranks with 2*dp data-parallel replicas, the same
// micro-batch size and global batch (so half the micro-batches per
// pipeline), mirrored_pp/mirrored_dp set; stage k of it is physical ranks k
// and pp-1-k.  Idempotent.  REQUIRES: layout.feasible.
Layout execution_layout(const ModelSpec& model, const ClusterSpec& cluster, const Layout& layout);
// Why Megatron-Core's all-to-all overlap (Plan::ep_overlap) cannot run
// `plan` (TransformerConfig.__post_init__'s rules), in the order checked;
// empty when it can.  The one place for those rules: resolve_plan reports
// them, the search asks before it adds a plan's overlapped variant.
// `plan` has its schedule and recompute modules resolved.
std::vector<std::string> ep_overlap_conflicts(const Plan& plan);
// Why Megatron-Core refuses `plan`'s CUDA graphs (Plan::cuda_graph) on
// `model`: TransformerConfig.__post_init__'s rules for the
// transformer_engine implementation, in the order checked; empty when it
// takes them.  `plan` has its recompute modules resolved.
std::vector<std::string> cuda_graph_conflicts(const ModelSpec& model, const Plan& plan);
// Why the plan cannot run --moe-shared-expert-overlap (empty: it can).
std::vector<std::string> shared_expert_overlap_conflicts(const ModelSpec& model, const Plan& plan);
// Why DeepSpeed's pipeline engine refuses `plan`'s ZeRO stage: ZeRO-2 and
// ZeRO-3 with pp > 1 (deepspeed/runtime/pipe/engine.py PipelineEngine
// __init__: "ZeRO-2 and ZeRO-3 are incompatible with pipeline
// parallelism", v0.3 to head); empty when it accepts it.  The one place for
// that rule: resolve_plan for --framework deepspeed, the DeepSpeed exporter
// for any plan.
std::string deepspeed_pipeline_zero_conflict(const Plan& plan);
// Whether `framework` runs the deduplicating dispatchers (Plan::moe_dispatcher
// deepep / hybridep): Megatron-Core's flex dispatcher, torchtitan's DeepEP
// and HybridEP backends, and the generic model.
bool runs_flex_dispatcher(Framework framework);
// Whether `framework` keeps Adam's moments in bf16 (Plan::moment_dtype):
// Megatron-Core's precision-aware optimizer and the generic model.  The one
// place for that rule: resolve_plan and recommend's --moment-dtype.
bool runs_bf16_moments(Framework framework);
// The fused attention kernel `framework` runs on `arch` when the plan names
// none (never kDefault):
//   megatron-core: Transformer Engine's DotProductAttention prefers
//     FusedAttention (cuDNN) over FlashAttention on sm90 and later ("give
//     FusedAttention preference on Hopper+ for performance reasons",
//     transformer_engine/pytorch/attention/dot_product_attention/utils.py
//     get_attention_backend; on sm90 since TE v1.2) -> cudnn on Hopper and
//     Blackwell, fa2 before;
//   megatron-lm: the flash-attn kernel of its opt-in --use-flash-attn
//     (FlashAttention-2) -> fa2; without that flag it runs no fused kernel
//     (flash_is_default, attention_run);
//   deepspeed: Megatron-DeepSpeed's --use-flash-attn-v2 (flash-attn 2) -> fa2;
//   torchtitan, pytorch: scaled_dot_product_attention, whose flash backend is
//     FlashAttention-2 and whose cuDNN backend is opt-in (pytorch#138522) -> fa2;
//   generic: fa2.
AttentionKernel default_attention_kernel(Framework framework, GpuArch arch);
// Whether `framework` runs a fused (flash) attention kernel when the plan
// names none.  False for megatron-lm: Megatron-LM before Megatron-Core runs
// its own core attention (the QK^T and attention-over-V batched GEMMs with
// the fused scale-mask-softmax kernel, the s x s scores materialised) unless
// launched with --use-flash-attn, an opt-in flag since it came (Megatron-LM
// d693034, "Integrate FlashAttention into Megatron-LM", 2022-12-08;
// store_true in megatron/arguments.py through the 2023 forks, e.g. the Zero
// Bubble paper's sail-sg/zero-bubble-pipeline-parallelism 425b42e, whose
// pretrain_zero_bubble.sh does not pass it).  True for every other framework.
bool flash_is_default(Framework framework);
// The attention path a plan runs: kNaive for attention naive, and for
// attention flash without a named kernel under a framework whose default is
// unfused (flash_is_default); kFlash otherwise.  Costs and memory use this,
// never Plan::attention directly.
Attention attention_run(const Plan& plan);
// The fused kernel a kFlash plan runs on `arch`: the one it names, else its
// framework's default.  REQUIRES: attention_run(plan) == kFlash.
AttentionKernel attention_kernel_run(const Plan& plan, GpuArch arch);
// Why `plan`'s named attention kernel cannot run `model` on `arch` (a GPU
// called `gpu`), or "" when it can: FlashAttention-3 is written for Hopper
// (flash-attn's hopper/ build, sm90) and has no attention dropout (its
// flash_attn_func takes no dropout_p; Transformer Engine disables it for
// dropout), and a kernel other than the framework's own is costed against
// it on Hopper only, where the FlashAttention-3 paper measures all three side
// by side.  The one place for the rule: resolve_plan, and recommend for
// --attention.
std::string attention_kernel_conflict(const Plan& plan, const ModelSpec& model, GpuArch arch, const std::string& gpu);
// The plan's attention as the CLI and plan.json name it: naive, flash, or
// the named kernel (fa2, cudnn, fa3).
std::string attention_name(const Plan& plan);
// The names `--attention` and plan.json's "attention" accept, in this order:
// flash, naive, fa2, cudnn, fa3.
const std::vector<std::string>& attention_names();
// Sets plan->attention and plan->attention_kernel from one of attention_names().
void set_attention(Plan* plan, const std::string& name);
// For a dualpipe plan, the line that says how its per-stage figures read
// ("stage k is pipeline ranks k and pp-1-k ..."); "" for every other plan.
std::string mirrored_stages_note(const Plan& plan);
// Global rank of coordinates in Megatron order (tp fastest, then cp, dp,
// pp).
int global_rank(const Plan& plan, int pp, int dp, int cp, int tp);
// The physical global rank (tp fastest, then cp, dp, pp) of rank (pp, dp,
// cp, tp) of `layout`: global_rank order, through the mirror of a folded
// dualpipe layout.
int physical_rank(const Layout& layout, int pp, int dp, int cp, int tp);

// Whether `gpus` is 1..kMaxGpus and whole nodes or part of one node (what
// resolve_plan requires).
bool valid_gpu_count(const ClusterSpec& cluster, int64_t gpus);

// Checks that `gpus` (from the flag or plan-file field named by `where` and
// `pointer`) is 1..kMaxGpus and whole nodes or part of one node; throws
// InputError("<where>: <pointer>: ...") otherwise.
void check_gpu_count(const ClusterSpec& cluster, int64_t gpus, const std::string& where, const std::string& pointer);

// GPUs of `nodes` whole nodes.  Throws InputError("--nodes: ...") unless
// 1 <= nodes <= kMaxNodes.
int gpus_of_nodes(const ClusterSpec& cluster, int64_t nodes);

// Transformer layers per stage.  layers % pp == 0: even split.  Otherwise the
// embedding and the loss each count as one layer on the first and last stage
// (Megatron's account_for_embedding/loss_in_pipeline_split; Llama 3 405B's
// 126 layers over 16 stages give 7, 8 x 14, 7), the remainder going to the
// middle stages first.  Returns an empty vector if some stage would get none.
std::vector<int> balance_stage_layers(int64_t layers, int pp);
// The contiguous split of a model's layers over `pp` stages whose costliest
// stage is least, every stage holding at least one layer: layer i costs
// `layer_work[i]` (its forward and backward time per micro-batch), and the
// first stage also carries `first_extra` (the embedding), the last
// `last_extra` (the output layer and the loss, with any multi-token
// prediction depths).  Among the splits of least cost, the later stages are
// filled first, which leaves the first stage, the one holding the most
// micro-batches' activations under 1F1B, the lightest.  With equal layers and
// one layer's cost each for the embedding and the loss this is Megatron-Core's
// --account-for-embedding-in-pipeline-split / --account-for-loss-in-pipeline-
// split where (layers + 2) % pp == 0 (Llama 3 405B, 126 layers over 16
// stages: 7, 8 x 14, 7); a large vocabulary's output layer weighs more than a
// layer (GPT-OSS 120B: 201,088 x 2,880 against 5.1B active parameters over 36
// layers, about 4.6 layers' GEMM work) and leaves the last stage shorter.
// Megatron-Core runs any such split (--pipeline-model-parallel-layout).
// Empty if pp < 1, pp > layers or a cost is negative or not finite.
std::vector<int> work_balanced_stage_layers(const std::vector<double>& layer_work, int pp, double first_extra,
                                            double last_extra);

// Transformer layers per pipeline rank for the V schedules, whose rank 0 holds both the
// embedding and the loss: layers % pp == 0, an even split (as above);
// otherwise those two count as a layer each (as above), the units
// split evenly over the ranks with the remainder to the last ranks, rank 0's
// two units taken from its layers; if that leaves rank 0 fewer than two
// layers, the layers alone split evenly, extras to the last ranks.
std::vector<int> balance_v_stage_layers(int64_t layers, int pp);

// The layers of one model chunk of a pipeline stage: global indices
// [first, first + count).
struct ChunkLayers {
  int first = 0;
  int count = 0;
};
// Whether the layer at `index_in_chunk` (0-based within its model chunk) is
// fully recomputed in backward: full recompute of every layer, or of the
// chunk's first recompute_layers (Megatron's block method).
bool layer_recomputed(const Plan& plan, int index_in_chunk);
// Whether plan.stage_layers lists each virtual stage's layers (pp x
// chunks_per_rank entries, chunks_per_rank > 1, not dualpipe) rather than
// each pipeline rank's.
bool stage_layers_per_chunk(const Plan& plan);
// Each pipeline rank's transformer layers as plan.stage_layers states them:
// the list itself, or per virtual stage each rank's chunks summed; empty
// when the plan states none.
std::vector<int> rank_stage_layers(const Plan& plan);
// Layers of the largest model chunk of `stage_layers` under `plan`'s
// schedule (a stage's layers over vp chunks with the interleaved one, split
// as chunk_layers splits them, or as plan.stage_layers lists them per
// virtual stage).
int largest_chunk_layers(const Plan& plan, const std::vector<int>& stage_layers);
// "(N layers per chunk)" for partial full recompute, else "".
std::string recompute_layers_text(const Plan& plan);

// Model chunks per pipeline rank: vp with the interleaved schedules
// (interleaved, interleaved-zb), 2 with the V schedules (zb-v, dualpipe-v)
// and dualpipe (one stage of each parameter copy), else 1.
int chunks_per_rank(const Plan& plan);
// The virtual stage (model order) of chunk `chunk` on pipeline rank `rank`
// of `pp`: chunk*pp + rank, the "loop" placement of Megatron's virtual
// pipeline and torchtitan's looped schedules; for the V schedules the "v" placement,
// chunk 0 at stage rank and chunk 1 at stage 2pp-1-rank (torchtitan
// pipeline_module_split style "v", PyTorch generate_stage_to_rank_mapping):
// the first and the last stage, embedding and loss, on rank 0.
// REQUIRES: 0 <= rank < pp, 0 <= chunk (< 2 for the V schedules); not
// dualpipe (its executors run execution_layout's dualpipe-v).
int virtual_stage(Schedule s, int pp, int rank, int chunk);
// The inverse: {rank, chunk} of virtual stage `stage` (0 <= stage < pp*v).
struct RankChunk {
  int rank = 0;
  int chunk = 0;
};
RankChunk rank_chunk_of(Schedule s, int pp, int stage);

// Megatron-Core's parallel folding of the MoE layers: a pipeline stage's
// tp*cp*dp ranks in their dense order, local = tp + tp_size*(cp +
// cp_size*dp), re-mapped as etp x ep x expert-dp (expert rank order
// tp-ep-dp-pp): an expert-TP group is etp consecutive locals, an
// expert-parallel group the locals etp apart within a block of ep*etp, an
// expert data-parallel group the locals ep*etp apart.  Groups are numbered
// within the stage.
struct ExpertFolding {
  int local = 0;
  int etp_group = 0, etp_rank = 0;
  int ep_group = 0, ep_rank = 0;
  int edp_group = 0, edp_rank = 0;
};
// REQUIRES: 0 <= tp < plan.tp, 0 <= cp < plan.cp, 0 <= dp < plan.dp, ep and
// etp >= 1.
ExpertFolding expert_folding(const Plan& plan, int tp, int cp, int dp);
// The (tp, cp, dp) coordinates of stage-local index `local` (the inverse of
// ExpertFolding::local).
struct StageCoord {
  int tp = 0, cp = 0, dp = 0;
};
StageCoord stage_coord(const Plan& plan, int local);

// [stage][chunk] for a resolved layout: one chunk per stage, vp with the
// interleaved schedule, two with zb-v; with a per-virtual-stage list
// (stage_layers_per_chunk) the chunks it lists; else a stage's chunks differ by at most
// one layer's place (the later ones take the extra) and the layers go to
// virtual stages in model order (virtual_stage), as Megatron and torchtitan
// assign them.  With the looped placement, a first (last) stage holding
// fewer layers than the fullest middle one (with pp 2, than the other end)
// counts the embedding (loss) as a layer's place in its first (last) chunk,
// which is left the short one: 2 layers and the loss over 2 chunks are
// [2, 0] (Megatron-Core's account_for_*_in_pipeline_split; plan.cc
// chunk_counts).  A chunk may so hold no layer, only the embedding or the
// loss.
// REQUIRES: not dualpipe (fold it with execution_layout first).
std::vector<std::vector<ChunkLayers>> chunk_layers(const Layout& layout);

// "fp8" for a plan with FP8 GEMMs, else to_string(plan.precision).
std::string precision_name(const Plan& plan);
// The precision names of the CLI and plan.json: bf16, fp16, fp32, fp8.
const std::vector<std::string>& precision_names();
// Sets plan->precision (and, for "fp8", bf16 with FP8 GEMMs of the GPU's
// default recipe unless one is given later); false for an unknown name.
bool set_precision(const std::string& name, Plan* plan);
// Sets plan->fp8_recipe from its name (given); false for an unknown name.
bool set_fp8_recipe(const std::string& name, Plan* plan);

// The FP8 recipe of a plan that names none: with ZeRO-3 (FSDP2, whose
// float8 is torchao's) tensorwise, torchao's default and the only recipe
// with an FP8 all-gather; otherwise Transformer Engine's: mxfp8 on
// Blackwell (B200, GB200), delayed scaling elsewhere (Megatron's default).
Fp8Recipe default_fp8_recipe(const ClusterSpec& cluster, int zero);

// Whether an FP8 plan runs Transformer Engine's FP8 (linear inputs saved in
// FP8, FP8 weight copies kept between micro-batches) rather than torchao's
// float8 (bf16 inputs saved, weights cast per use): TE unless ZeRO-3 with
// a torchao recipe (tensorwise, rowwise).  docs/fp8.md.
bool fp8_transformer_engine(const Plan& plan);

// Whether the data-parallel all-gather brings the linear weights already in
// FP8: FSDP2's float8 all-gather under torchao's tensorwise recipe
// (enable_fsdp_float8_all_gather, ZeRO-3), or Megatron's
// --fp8-param-gather.  Otherwise torchao quantizes each linear's whole
// weight at every use (fp8_weight_cast_bytes_per_element).
bool fp8_weights_gathered(const Plan& plan);

// Bytes per linear parameter of Transformer Engine's FP8 weight copies: the
// FP8 weight and its transpose on Hopper and Ada (their FP8 GEMMs take only
// the TN layout), 1 on Blackwell for per-tensor recipes, row- and
// column-wise blocks with 1/32-byte scales for mxfp8 (and blockwise, which
// Blackwell runs as MXFP8).  0 for torchao.
double fp8_weight_cache_bytes(const ClusterSpec& cluster, const Plan& plan);

// Bytes of one activation element, one weight and one gradient.
int activation_bytes(Precision p);
int weight_bytes(Precision p);
int grad_bytes(Precision p, GradDtype g);
// Bytes of one of Adam's moments (m or v) per parameter.
int moment_bytes(MomentDtype m);
// Bytes per parameter of Adam's states beside a 16-bit parameter: the
// master copy and each of the two moments (12 in all by default: fp32
// master, m and v; Rajbhandari et al. 2020, K = 12).  fp32 training keeps
// no master copy whatever `master` says (the parameter is the master).
struct AdamStateBytes {
  double master = 4;
  double moment = 4;
};

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_SPEC_PLAN_H_
