// Memory as each framework allocates it (ExecutionProfile, memory_model.h),
// against closed forms derived by hand from the frameworks' own code paths:
// FSDP2's fp32 sharded parameters, torchtitan's per-op SAC policy, PyTorch's
// cross entropy on fp32 logits, DeepSpeed's BF16_Optimizer and the stage
// outputs a pipeline engine keeps.
#include <catch2/catch.hpp>

#include "simulator/cost/layer_cost.h"
#include "simulator/framework/framework.h"
#include "simulator/memory/memory_model.h"
#include "simulator/schedule/pipeline_schedule.h"
#include "simulator/taskgraph/lowering.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"
#include "simulator/taskgraph/step_costs.h"

namespace trainplan {
namespace {

using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

// resolve_plan's layout, which the test needs feasible (its reasons are
// reported when it is not).
Layout feasible_layout(const ModelSpec& m, const ClusterSpec& c, int gpus, const Plan& p) {
  Layout l = resolve_plan(m, c, gpus, p);
  for (const std::string& reason : l.reasons) UNSCOPED_INFO(reason);
  REQUIRE(l.feasible);
  return l;
}

// torchtitan's Llama 3 8B table layout (benchmarks/llama3_h100_202412):
// FSDP2 over 8 GPUs, local batch 2, seq 8192, bf16, per-op SAC.
Layout titan_8b(const ModelSpec& m, const ClusterSpec& c, Recompute rc, Framework fw = Framework::kTorchtitan) {
  Plan p;
  p.mbs = 2;
  p.gbs = 16;
  p.seq = 8192;
  p.zero = 3;
  p.recompute = rc;
  p.framework = fw;
  return feasible_layout(m, c, 8, p);
}

TEST_CASE("FSDP2 keeps fp32 sharded parameters as the master copy: 16 B per parameter over the shard group") {
  // FSDP2 MixedPrecisionPolicy(param_dtype=bf16, reduce_dtype=fp32): the
  // sharded parameter stays fp32 (4 B), its gradient fp32 (4 B), Adam's m
  // and v fp32 (8 B), all over 8 ranks; the bf16 copies exist only as
  // gathered layers.  Megatron's optimizer keeps 2 + 4 + 12 B instead.
  const double psi = 1e9;
  const ModelStateBytes fsdp = model_state_bytes(psi, Precision::kBf16, GradDtype::kFp32, 3, 8, Offload::kNone, true);
  CHECK(fsdp.weights == Approx(4 * psi / 8));
  CHECK(fsdp.gradients == Approx(4 * psi / 8));
  CHECK(fsdp.optimizer == Approx(8 * psi / 8));
  // Without resharding after forward (ZeRO-2) the gathered bf16 parameters
  // stay until backward: 2 B unsharded on top.
  const ModelStateBytes z2 = model_state_bytes(psi, Precision::kBf16, GradDtype::kFp32, 2, 8, Offload::kNone, true);
  CHECK(z2.weights == Approx(2 * psi + 4 * psi / 8));
  // fp32 training has no separate master copy either way: 4 + 4 + 8.
  const ModelStateBytes f32 = model_state_bytes(psi, Precision::kFp32, GradDtype::kFp32, 3, 8, Offload::kNone, true);
  CHECK(f32.total() == Approx(16 * psi / 8));

  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  const MemoryReport r = estimate_memory(m, c, titan_8b(m, c, Recompute::kSelective));
  const StageMemory& st = r.stages[0];
  // Plus, in backward, the largest FSDP unit's unsharded bf16 gradients and
  // its reduce-scatter input in fp32 (foreach_reduce: world x padded shard
  // in reduce_dtype): 2 + 4 B per parameter of the norm+output unit
  // (128256 x 4096 + 4096, untied), torchtitan's largest.
  const double output_unit = 128256.0 * 4096 + 4096;
  CHECK_THAT(st.breakdown.gradients, WithinRel(4 * st.params / 8 + 6 * output_unit, 1e-12));
  CHECK_THAT(st.breakdown.optimizer, WithinRel(8 * st.params / 8, 1e-12));
}

TEST_CASE("torchtitan's per-op SAC saves a Llama block's input, Q, V, attention output, w1 and w2 outputs") {
  // parallelize_llama.py: in each block the outputs of aten.mm are saved
  // except every second one, SDPA's output (and log-sum-exp) is saved.
  // Block order wq(1) wk(2) wv(3) [sdpa] wo(4) w1(5) w3(6) w2(7): saved
  // Q (h), V (kv width), attention output (h), w1 (f) and w2 (h) outputs
  // per token, plus the block input (h), 2 B each; lse 4 B per head and
  // token.  Re-run: wk, wo and w3 and every elementwise op.
  const ModelSpec m = load_model("llama3-8b");  // h 4096, 32 heads, 8 KV heads, f 14336
  LayerShape s;
  s.mbs = 2;
  s.seq = 8192;
  s.recompute = Recompute::kSelective;
  s.per_op_sac = true;
  const LayerCost sac = transformer_layer_cost(m, s);
  const double tokens = 2 * 8192, h = 4096, kv = 1024, f = 14336;
  const double saved = 2 * tokens * (h + h + kv + h + f + h) + 4 * 32 * tokens;
  CHECK_THAT(sac.saved_bytes, WithinRel(saved, 1e-12));
  // Recomputed FLOPs: the K projection, the output projection and w3.
  const double rerun = 2 * tokens * h * kv + 2 * tokens * h * h + 2 * tokens * h * f;
  CHECK_THAT(sac.recompute_flops, WithinRel(rerun, 1e-12));
  // Its backward re-materialises what the policy dropped.
  LayerShape none = s;
  none.recompute = Recompute::kNone;
  none.per_op_sac = false;
  const LayerCost all = transformer_layer_cost(m, none);
  CHECK_THAT(sac.backward_transient_bytes, WithinRel(all.saved_bytes - saved, 1e-12));
  // The framework decides: torchtitan's selective is per-op, Megatron's is
  // its recompute_modules.
  Plan p;
  p.recompute = Recompute::kSelective;
  p.framework = Framework::kTorchtitan;
  CHECK(layer_shape(p).per_op_sac);
  p.framework = Framework::kMegatronCore;
  CHECK_FALSE(layer_shape(p).per_op_sac);
}

TEST_CASE("The loss's backward holds 12 B per logit with PyTorch's cross entropy, 4 + e with Megatron's") {
  // cross_entropy(logits.float()): log_softmax keeps its fp32 output (4 B);
  // nll_loss's backward makes a dense fp32 gradient of it (4 B) and
  // log_softmax's backward the fp32 gradient of the logits (4 B) while both
  // live.  Megatron's vocab-parallel cross entropy turns the saved fp32
  // softmax into the gradient in place and casts it to bf16 (2 B).
  const ModelSpec m = load_model("llama3-8b");
  LayerShape s;
  s.mbs = 2;
  s.seq = 8192;
  const double logits = 2.0 * 8192 * m.vocab;
  s.pytorch_loss = true;
  const LayerCost pt = output_cost(m, s);
  CHECK_THAT(pt.backward_transient_bytes, WithinRel(8 * logits, 1e-12));
  s.pytorch_loss = false;
  const LayerCost mg = output_cost(m, s);
  CHECK_THAT(mg.backward_transient_bytes, WithinRel(2 * logits, 1e-12));
  // Both keep the 4 B fp32 probabilities as saved activations.
  CHECK(pt.saved_bytes == mg.saved_bytes);
}

TEST_CASE("torchtitan's Llama 3 8B on 8 GPUs: peak = FSDP2 states + SAC blocks + loss backward, by hand") {
  // 32 SAC blocks (above) + final norm and output-layer inputs 2 x 2 B per
  // token and h + the loss's 4 B kept and 8 B held per logit; FSDP2: fp32
  // shards of 4 + 4 + 8 B over 8 and two gathered bf16 units, the largest
  // being the output layer (vocab x h) with the final norm; other as the
  // memory model's fixed terms and 5% fragmentation.
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  const MemoryReport r = estimate_memory(m, c, titan_8b(m, c, Recompute::kSelective));
  const MemoryBreakdown& b = r.stages[0].breakdown;
  const double tokens = 2 * 8192, h = 4096, kv = 1024, f = 14336, v = 128256;
  const double block = 2 * tokens * (4 * h + kv + f) + 4 * 32 * tokens;
  const double activations = 32 * block + 2 * 2 * tokens * h + 12 * tokens * v;
  CHECK_THAT(b.activations, WithinRel(activations, 1e-12));
  const double psi = r.stages[0].params;
  CHECK_THAT(b.weights, WithinRel(4 * psi / 8 + 2 * 2 * (v * h + h), 1e-12));
  // Measured (torchtitan_t1_8b_8gpu_FSDP, max reserved): 82.4 GiB.  The
  // model stays below it by the caching allocator's excess over its 5%
  // allowance (docs/accuracy.md, memory rows); within 10%.
  CHECK(to_gib(r.peak_bytes) == Approx(82.4).epsilon(0.10));
}

TEST_CASE("DeepSpeed's BF16_Optimizer keeps bf16 gradients beside its unsharded fp32 accumulation buffer") {
  // bf16 + ZeRO-1 + fp32 accumulation selects BF16_Optimizer (engine.py):
  // per parameter 2 B weight + 2 B .grad + 4 B fp32 gradient (unsharded) +
  // 12/dp B optimizer: FORMULAS.md's "+4 bytes/param on top of ZeRO-1".
  const ModelSpec m = load_model("gpt3-1.3b");
  const ClusterSpec c = load_cluster("dgx-a100");
  Plan p;
  p.zero = 1;
  p.gbs = 8;
  p.framework = Framework::kDeepSpeed;
  const Layout ds = resolve_plan(m, c, 8, p);
  REQUIRE(ds.feasible);
  const StageMemory st = estimate_memory(m, c, ds).stages[0];
  CHECK_THAT(st.breakdown.gradients, WithinRel(6 * st.params, 1e-12));
  CHECK_THAT(st.breakdown.weights + st.breakdown.gradients + st.breakdown.optimizer,
             WithinRel((2 + 2 + 4 + 12.0 / 8) * st.params, 1e-12));
  // Megatron-Core's distributed optimizer: one fp32 gradient buffer.
  p.framework = Framework::kMegatronCore;
  const StageMemory mc = estimate_memory(m, c, resolve_plan(m, c, 8, p)).stages[0];
  CHECK_THAT(mc.breakdown.gradients, WithinRel(4 * mc.params, 1e-12));
}

TEST_CASE("DeepSpeed's BF16_Optimizer with AutoEP experts: their states over the expert-data-parallel ranks") {
  // Mixtral 8x7B on 16 GPUs, ep 8 (DeepSpeed AutoEP), bf16 + ZeRO-1 + fp32
  // accumulation: BF16_Optimizer (bf16_optimizer.py _configure_moe_settings
  // gives each MoE parameter group the expert-data-parallel group,
  // _setup_for_real_optimizer partitions every group over its own group and
  // zeros_like's the whole flat group for the fp32 gradients).  By hand:
  // per layer attention 4096 x (4096 + 2 x 1024) + 4096 x 4096 = 41,943,040,
  // two RMSNorms 8,192, the router 4096 x 8 = 32,768, one local expert of
  // 3 x 4096 x 14336 = 176,160,768; 32 layers, embedding and output
  // 2 x 32000 x 4096, the final norm 4096.
  const ModelSpec m = load_model("mixtral-8x7b");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan p;
  p.ep = 8;
  p.zero = 1;
  p.recompute = Recompute::kFull;
  p.framework = Framework::kDeepSpeed;
  const StageMemory st = estimate_memory(m, c, feasible_layout(m, c, 16, p)).stages[0];
  const double expert = 32.0 * 176160768;
  const double dense = 32.0 * (41943040 + 8192 + 32768) + 2.0 * 32000 * 4096 + 4096;
  CHECK_THAT(st.params, WithinRel(expert + dense, 1e-9));
  CHECK_THAT(st.breakdown.weights, WithinRel(2 * (expert + dense), 1e-9));
  CHECK_THAT(st.breakdown.gradients, WithinRel(6 * (expert + dense), 1e-9));  // bf16 .grad + fp32 buffer
  // 12 B of master copy and moments: the dense part over dp 16, the experts
  // over the 16 / 8 = 2 ranks holding the same experts.
  CHECK_THAT(st.breakdown.optimizer, WithinRel(12 * dense / 16 + 12 * expert / 2, 1e-9));
}

TEST_CASE("DeepSpeed ZeRO-2 keeps its gradient partition in bf16 and casts it to fp32 at the step") {
  // zero/stage_1_and_2.py: copy_grads_in_partition allocates
  // grads_in_partition in the model's dtype (self.dtype), whatever
  // grad_accum_dtype says (its grad_accum attribute is used only without
  // partitioned gradients), so bf16 ZeRO-2 holds 2 B per partition
  // element; step() casts the partition to fp32 (single_grad_partition, 4 B
  // per element) after the backward has freed the activations.  Per
  // parameter: 2 B weight + 2/dp B gradient + 12/dp B optimizer, plus the
  // larger of the backward's activations and the step's 4/dp B copy.
  // Megatron-Core keeps its fp32 gradient buffer sharded at ZeRO-2 (4/dp).
  const ModelSpec m = load_model("gpt3-1.3b");
  const ClusterSpec c = load_cluster("dgx-a100");
  Plan p;
  p.zero = 2;
  p.framework = Framework::kDeepSpeed;
  p.recompute = Recompute::kFull;
  REQUIRE(p.grad_dtype == GradDtype::kFp32);
  for (int gpus : {8, 2}) {
    p.gbs = gpus;
    const StageMemory st = estimate_memory(m, c, feasible_layout(m, c, gpus, p)).stages[0];
    const MemoryBreakdown& b = st.breakdown;
    const double params = st.params;
    const double dp = gpus;
    INFO(gpus << " GPUs: activations " << b.activations << " B");
    CHECK_THAT(b.weights + b.gradients + b.optimizer + b.activations,
               WithinRel((2 + 2 / dp + 12 / dp) * params + std::max(b.activations, 4 / dp * params), 1e-12));
    // On 8 GPUs the backward's activations exceed the copy, on 2 the copy
    // sets the peak (recompute keeps the activations to layer inputs).
    CHECK((gpus == 8) == (b.activations > 4 / dp * params));
  }
  p.gbs = 8;
  p.framework = Framework::kMegatronCore;
  const StageMemory mc = estimate_memory(m, c, feasible_layout(m, c, 8, p)).stages[0];
  CHECK_THAT(mc.breakdown.gradients, WithinRel(4 * mc.params / 8, 1e-12));
}

TEST_CASE("Optimizer offload: ZeRO-Offload and FSDP2 keep the gradient partition on the host, Megatron on the GPU") {
  // DeepSpeed's ZeRO-Offload (zero/stage_1_and_2.py with cpu_offload):
  // copy_grads_in_partition moves each reduced partition to pinned host
  // buffers and clear_grad_attribute frees the device gradient, so under
  // ZeRO-2 the device keeps the 2 B bf16 weight per parameter and no
  // gradient shard (Ren et al. 2021 Sec. 4.1: "2M" on the GPU); ZeRO-1
  // reduces only after the step's last backward, so the unsharded bf16
  // .grad (2 B) stays until then.  The host holds the fp32 gradient shard
  // (4 B / dp) beside Adam's 12 B / dp and, with two micro-batches to
  // accumulate, the bf16 running sum of the shard (accumulated_grads_in_cpu,
  // 2 B / dp).  Megatron's --optimizer-cpu-offload
  // keeps its fp32 main-gradient buffer (4 B, unsharded at ZeRO-1).
  const ModelSpec m = load_model("gpt3-1.3b");
  const ClusterSpec c = load_cluster("dgx-a100");
  Plan p;
  p.gbs = 16;
  p.offload = Offload::kOptimizer;
  p.framework = Framework::kDeepSpeed;
  for (int zero : {1, 2}) {
    p.zero = zero;
    const MemoryReport r = estimate_memory(m, c, feasible_layout(m, c, 8, p));
    const StageMemory& st = r.stages[0];
    INFO("ZeRO-" << zero);
    CHECK(st.breakdown.optimizer == 0);
    CHECK_THAT(st.breakdown.weights, WithinRel(2 * st.params, 1e-12));
    CHECK_THAT(st.breakdown.gradients, WithinAbs(zero == 1 ? 2 * st.params : 0.0, 1.0));
    // Per node: eight GPUs' (12 + 4 + 2) B / 8 per parameter on the host.
    CHECK_THAT(r.host_bytes_per_node, WithinRel(8 * 18.0 / 8 * st.params, 1e-12));
    // contiguous_gradients (forced on by cpu_offload) holds one ipg buffer of
    // reduce_bucket_size = 5e8 bf16 elements beside the cuBLAS workspace.
    CHECK_THAT(st.breakdown.workspace, WithinRel(32.0 * 1024 * 1024 + 5e8 * 2, 1e-12));
  }
  // ZeRO-2 keeps that buffer without offload too; ZeRO-1 without offload
  // has no contiguous gradients (engine.py turns them off for stage 1).
  p.offload = Offload::kNone;
  const StageMemory z2 = estimate_memory(m, c, feasible_layout(m, c, 8, p)).stages[0];
  CHECK_THAT(z2.breakdown.workspace, WithinRel(32.0 * 1024 * 1024 + 5e8 * 2, 1e-12));
  p.zero = 1;
  const StageMemory z1 = estimate_memory(m, c, feasible_layout(m, c, 8, p)).stages[0];
  CHECK_THAT(z1.breakdown.workspace, WithinRel(32.0 * 1024 * 1024, 1e-12));
  p.offload = Offload::kOptimizer;
  p.zero = 2;
  p.framework = Framework::kMegatronCore;
  const StageMemory mc = estimate_memory(m, c, feasible_layout(m, c, 8, p)).stages[0];
  CHECK_THAT(mc.breakdown.gradients, WithinRel(4 * mc.params / 8, 1e-12));
  // FSDP2's CPUOffloadPolicy (offload params, ZeRO-3): the fp32 sharded
  // parameter and gradient and Adam's m, v all on the host; the device keeps
  // only the unsharded blocks being gathered and reduced.
  p.zero = 3;
  p.offload = Offload::kParams;
  for (Framework fw : {Framework::kTorchtitan, Framework::kPytorch}) {
    p.framework = fw;
    const Layout l = feasible_layout(m, c, 8, p);
    const StageMemory st = estimate_memory(m, c, l).stages[0];
    Plan no = p;
    no.offload = Offload::kNone;
    const StageMemory kept = estimate_memory(m, c, feasible_layout(m, c, 8, no)).stages[0];
    INFO(to_string(fw));
    // 4 B fp32 gradient shard per parameter over 8 ranks less on the device.
    CHECK_THAT(kept.breakdown.gradients - st.breakdown.gradients, WithinRel(4 * st.params / 8, 1e-9));
  }
}

TEST_CASE("A pipeline engine that keeps stage outputs holds one 2sbh output per in-flight micro-batch") {
  // DeepSpeed's pipe_buffers['outputs'] live from a micro-batch's forward to
  // its backward; Megatron frees them once sent.  Stage i of 1F1B holds
  // min(p - i, m) micro-batches, the last stage none (its output is the
  // loss).  The difference between the two frameworks' activations is
  // exactly that many layer inputs.
  const ModelSpec m = load_model("gpt3-1.3b");
  const ClusterSpec c = load_cluster("dgx-a100");
  Plan p;
  p.pp = 4;
  p.mbs = 2;
  p.gbs = 32;
  // The same attention path under both (Megatron-LM's `flash` is its own
  // unfused attention, attention_run).
  p.attention = Attention::kNaive;
  p.framework = Framework::kDeepSpeed;
  const Layout ds = resolve_plan(m, c, 4, p);
  REQUIRE(ds.feasible);
  p.framework = Framework::kMegatronLM;
  const Layout mg = resolve_plan(m, c, 4, p);
  REQUIRE(mg.feasible);
  const MemoryReport a = estimate_memory(m, c, ds), b = estimate_memory(m, c, mg);
  const double out = 2.0 * 2 * 2048 * 2048;  // mbs 2, seq 2048, h 2048, 2 B
  for (int i = 0; i < 4; ++i) {
    INFO("stage " << i);
    const double held = i == 3 ? 0 : 4 - i;
    CHECK_THAT(a.stages[i].breakdown.activations - b.stages[i].breakdown.activations,
               WithinRel(held * out, 1e-9) || WithinAbs(held * out, 1));
  }
  // With tensor parallelism DeepSpeed keeps only this rank's slice
  // (pipeline.pipe_partitioned, default true: PartitionedTensor over the
  // tensor-parallel group, the full output's data freed): 1/tp of it.
  p.tp = 2;
  p.framework = Framework::kDeepSpeed;
  const Layout ds2 = resolve_plan(m, c, 8, p);
  p.framework = Framework::kMegatronLM;
  const Layout mg2 = resolve_plan(m, c, 8, p);
  REQUIRE((ds2.feasible && mg2.feasible));
  const MemoryReport a2 = estimate_memory(m, c, ds2), b2 = estimate_memory(m, c, mg2);
  CHECK_THAT(a2.stages[0].breakdown.activations - b2.stages[0].breakdown.activations,
             WithinRel(4 * out / 2, 1e-9));
}

TEST_CASE("Megatron-LM's own attention stores the s x s scores: the Zero Bubble paper's peaks") {
  // The Zero Bubble paper's 1.5B GPT (Qi et al. 2024, Tables 3-4: 22 layers,
  // h 2304, 24 heads, seq 1024, micro-batch 6, 8 A100 stages, the first and
  // last one layer short) ran on a Megatron-LM fork whose launch script does
  // not pass --use-flash-attn (sail-sg/zero-bubble-pipeline-parallelism
  // 425b42e examples/pretrain_zero_bubble.sh), so its attention kept the
  // softmax output, the dropout mask and the dropout output: 5as^2b bytes per
  // layer and micro-batch (Korthikanti et al. 2022, Sec. 4.1) on top of what
  // a flash kernel keeps.  trainplan's megatron-lm `flash` is that attention
  // (flash_is_default), so the two differ by exactly that per micro-batch and
  // layer held, less flash's fp32 log-sum-exp (4as b); and the peaks land on
  // the paper's Table 4 (GB read as GiB, ACCURACY.md T2): 1F1B 30, ZB-1p 32,
  // ZB-2p 59, 1F1B-I 40, each within 6% (the automatic zero-bubble
  // schedules' activations read off the order the lowering builds,
  // plan_memory; the scheduler's limit alone gives ZB-1p 34.6, 8% high).
  const ModelSpec m = parse_model(R"({"name": "zb-1.5b", "layers": 22, "hidden": 2304, "heads": 24,
      "ffn_hidden": 9216, "vocab": 50304, "seq_len": 1024, "mlp": "gelu", "tied_embeddings": true,
      "dropout": true, "position_embedding": "learned"})",
                                  "zb-1.5b");
  const ClusterSpec c = load_cluster("dgx-a100");
  auto layout = [&](Framework f, Schedule schedule, int vp) {
    Plan p;
    p.pp = 8;
    p.mbs = 6;
    p.gbs = 144;  // 24 micro-batches
    p.seq = 1024;
    p.stage_layers = {2, 3, 3, 3, 3, 3, 3, 2};
    p.framework = f;
    p.vp = vp;
    p.schedule = schedule;
    p.schedule_given = true;
    return feasible_layout(m, c, 8, p);
  };
  const MemoryReport legacy = estimate_memory(m, c, layout(Framework::kMegatronLM, Schedule::k1F1B, 1));
  const MemoryReport core = estimate_memory(m, c, layout(Framework::kMegatronCore, Schedule::k1F1B, 1));
  const double a = 24, s = 1024, b = 6;
  const double per_layer = 5 * a * s * s * b - 4 * a * s * b;
  for (int i = 0; i < 8; ++i) {
    INFO("stage " << i);
    const double held = static_cast<double>(std::min(8 - i, 24));  // 1F1B: min(p - i, m) in flight
    const double layers = i == 0 || i == 7 ? 2 : 3;
    CHECK_THAT(legacy.stages[static_cast<size_t>(i)].breakdown.activations -
                   core.stages[static_cast<size_t>(i)].breakdown.activations,
               WithinRel(held * layers * per_layer, 1e-6));
  }
  const double gib = 1024.0 * 1024 * 1024;
  struct Row {
    Schedule schedule;
    int vp;
    double measured_gib;
  };
  for (const Row& r : {Row{Schedule::k1F1B, 1, 30}, Row{Schedule::kZb1p, 1, 32}, Row{Schedule::kZb2p, 1, 59},
                      Row{Schedule::kInterleaved, 2, 40}}) {
    INFO(to_string(r.schedule));
    const MemoryReport rep = plan_memory(m, c, layout(Framework::kMegatronLM, r.schedule, r.vp));
    CHECK_THAT(rep.peak_bytes / gib, WithinRel(r.measured_gib, 0.06));
  }
  // 1F1B-I as mapped (vp 2 over stages of 2 and 3 layers): the chunks are
  // unequal, so what a rank holds depends on which chunks are in flight.
  // Megatron runs a rank's k-th forward on model chunk (k mod p*v) div p
  // (schedules.py get_model_chunk_id) and rank 1 warms up (p-2)*2 + (v-1)*p
  // = 20 forwards plus one: chunk 0 for k 0-7 and 16-20 (13), chunk 1 for
  // k 8-15 (8).  Its activations are 13 x chunk 0's layers + 8 x chunk 1's,
  // not 21 x the 1.5-layer mean.
  auto by_chunk = [](int pp, int vp, int64_t inflight) {
    std::vector<int64_t> v;
    for (int c = 0; c < vp; ++c) v.push_back(interleaved_inflight_in_chunk(pp, vp, inflight, c));
    return v;
  };
  CHECK(by_chunk(8, 2, 21) == std::vector<int64_t>{13, 8});
  CHECK(by_chunk(8, 2, 23) == std::vector<int64_t>{15, 8});
  CHECK(by_chunk(4, 3, 26) == std::vector<int64_t>{10, 8, 8});
  const Layout inter = layout(Framework::kMegatronLM, Schedule::kInterleaved, 2);
  const std::vector<std::vector<ChunkLayers>> chunks = chunk_layers(inter);
  REQUIRE(chunks[1].size() == 2);
  REQUIRE(chunks[1][0].count + chunks[1][1].count == 3);
  const double per_layer_saved = transformer_layer_cost(m, layer_shape(inter.plan)).saved_bytes;
  const MemoryReport rep = estimate_memory(m, c, inter);
  CHECK_THAT(rep.stages[1].breakdown.activations,
             WithinRel((13.0 * chunks[1][0].count + 8.0 * chunks[1][1].count) * per_layer_saved, 1e-9));
}

TEST_CASE("The interleaved 1F1B's peak by model chunk equals a walk of its pass order", "[sim][memory]") {
  // interleaved_peak_activations (the closed form `memory` uses) against the
  // oracle of walking each rank's passes as build_pipeline_schedule orders
  // them (Megatron's schedules.py), +held[c] at a chunk-c F and -held[c] at
  // its B, for chunks of unequal activations, e.g. [3, 1] layers where the
  // peak comes after the warm-up (a rank's later forwards are all chunk 0's
  // while its backwards free chunk 1's).
  const std::vector<std::vector<double>> shapes = {{3, 1}, {1, 2}, {0.01, 2}, {2, 0.01}, {1, 2, 3}, {3, 2, 1}, {1, 1, 4}};
  for (const std::vector<double>& held : shapes) {
    const int vp = static_cast<int>(held.size());
    for (int pp : {2, 4, 8}) {
      for (int64_t m : {int64_t{pp}, int64_t{2} * pp, int64_t{3} * pp, int64_t{8} * pp}) {
        // Megatron-Core's combined 1F1B (--overlap-moe-expert-parallel-comm)
        // runs one more warm-up forward and then merged forward-backward
        // steps.
        for (bool combined : {false, true}) {
          const PipelineSchedule order =
              build_pipeline_schedule(Schedule::kInterleaved, pp, static_cast<int>(m), vp, combined);
          for (int r = 0; r < pp; ++r) {
            INFO("held " << held[0] << "," << held[1] << " pp " << pp << " m " << m << " rank " << r << " combined "
                         << combined);
            const int64_t inflight = inflight_chunks(Schedule::kInterleaved, pp, m, vp, r, combined);
            CHECK_THAT(interleaved_peak_activations(pp, vp, inflight, m, held),
                       WithinRel(peak_activation_bytes(order[static_cast<size_t>(r)], held, held), 1e-12));
          }
        }
      }
    }
  }
}

TEST_CASE("Eager PyTorch moves more bytes through a Llama block's memory-bound ops than fused kernels, by hand") {
  // Per token, forward, bf16 (torchtitan's model code in eager mode against
  // Megatron's fused kernels): two RMSNorms 36 B instead of 4 B per element
  // of h; RoPE over Q and K 20 B instead of 4 B per element; repeat_kv
  // copies K and V (read the KV width, write the query width, 2 B each);
  // the attention output made contiguous (read and write h); SwiGLU 10 B
  // instead of 6 B per element of f.
  const ModelSpec m = load_model("llama3-8b");
  LayerShape fused;
  fused.mbs = 1;
  fused.seq = 8192;
  LayerShape eager = fused;
  eager.eager = true;
  const double tokens = 8192, h = 4096, kv = 1024, f = 14336;
  const double extra = tokens * (2 * (36 - 4) * h + (20 - 4) * (h + kv) + 2 * 2 * (kv + h) + 4 * h + (10 - 6) * f);
  const double eager_bytes = transformer_layer_cost(m, eager).fwd_bytes;
  const double fused_bytes = transformer_layer_cost(m, fused).fwd_bytes;
  CHECK_THAT(eager_bytes - fused_bytes, WithinRel(extra, 1e-12));
  // The framework decides: torchtitan and the PyTorch script run eager,
  // torchtitan's FP8 plans compiled (its export enables torch.compile),
  // Megatron fused.
  Plan p;
  p.framework = Framework::kTorchtitan;
  CHECK(layer_shape(p).eager);
  p.fp8_recipe = Fp8Recipe::kTensorwise;
  p.precision = Precision::kBf16;
  CHECK_FALSE(layer_shape(p).eager);
  p = Plan{};
  p.framework = Framework::kPytorch;
  CHECK(layer_shape(p).eager);
  p.framework = Framework::kMegatronCore;
  CHECK_FALSE(layer_shape(p).eager);
}

TEST_CASE("Partial full recompute (Megatron's block method) keeps every activation of the layers past N") {
  // Llama 3 70B, tp 8 (SP), pp 4: 20 layers per stage, one chunk.  With
  // --recompute full --recompute-layers 4, transformer_block.py checkpoints
  // layers 0-3 of each chunk and runs 4-19 normally, so per in-flight
  // micro-batch a stage keeps 4 layer inputs and 16 layers' full saved
  // activations; the backward re-materialises one recomputed layer (the
  // same transient as full recompute).  Against full recompute of every
  // layer, each in-flight micro-batch holds 16 x (all - input) more.
  const ModelSpec m = load_model("llama3-70b");
  const ClusterSpec c = load_cluster("dgx-h100");
  Plan p;
  p.tp = 8;
  p.pp = 4;
  p.sp = true;
  p.zero = 1;
  p.gbs = 64;
  p.recompute = Recompute::kFull;
  const Layout full = resolve_plan(m, c, 32, p);
  p.recompute_layers = 4;
  const Layout part = resolve_plan(m, c, 32, p);
  REQUIRE(full.feasible);
  REQUIRE(part.feasible);
  LayerShape none = layer_shape(full.plan);
  none.recompute = Recompute::kNone;
  const double all = transformer_layer_cost(m, none).saved_bytes;
  const double input = layer_input_bytes(m, layer_shape(full.plan));
  const MemoryReport a = estimate_memory(m, c, part), b = estimate_memory(m, c, full);
  for (int i = 0; i < 4; ++i) {
    INFO("stage " << i);
    const double inflight = static_cast<double>(a.stages[i].inflight_microbatches);  // 4 - i
    CHECK(inflight == 4 - i);
    CHECK_THAT(a.stages[i].breakdown.activations - b.stages[i].breakdown.activations,
               WithinRel(inflight * 16 * (all - input), 1e-9));
  }
  // Time: each recomputed layer's backward re-runs its forward, the others'
  // do not; the step costs say which by global layer index.
  const StepCosts sc = step_costs(m, c, part.plan);
  int recomputed = 0;
  for (int64_t i = 0; i < m.layers; ++i) recomputed += sc.plain(i) ? 0 : 1;
  CHECK(recomputed == 4 * 4);
  CHECK(!sc.plain(0));
  CHECK(sc.plain(4));
  CHECK(!sc.plain(20));  // stage 1's first layer
  CHECK(sc.times_of(0).recompute_ps > 0);
  CHECK(sc.times_of(4).recompute_ps == 0);
  CHECK(sc.times_of(4).backward_ps + sc.times_of(0).recompute_ps == sc.times_of(0).backward_ps);
  // Counting every layer of the largest chunk is the uniform method; the
  // plan says so rather than accept a count that could be wrong.
  p.recompute_layers = 20;
  CHECK_FALSE(resolve_plan(m, c, 32, p).feasible);
  p.recompute = Recompute::kSelective;
  p.recompute_layers = 2;
  CHECK_FALSE(resolve_plan(m, c, 32, p).feasible);
}

// TP 8 with sequence parallelism over 64 GPUs, 8K tokens, one sequence per
// micro-batch, full recompute: the layout of the TP-overlap buffer tests.
Plan tp8_sequence_parallel(Framework f, int zero, bool overlap) {
  Plan p;
  p.tp = 8;
  p.sp = true;
  p.seq = 8192;
  p.mbs = 1;
  p.gbs = 64;
  p.zero = zero;
  p.recompute = Recompute::kFull;
  p.framework = f;
  p.tp_comm_overlap = overlap;
  return p;
}

TEST_CASE("Transformer Engine's TP-overlap userbuffers: twelve buffers of the layer input's shape") {
  // transformer_engine/pytorch/module/base.py initialize_ub under Megatron's
  // shape [seq * mbs / cp, hidden]: one communicator per GEMM of the layer
  // (4 ring-exchange, 2 pipeline, 4 bulk, 2 external), each registering a
  // buffer of that shape (comm_gemm_overlap.cpp; no default ring-exchange
  // reduce-scatter, the only kind with 2 tp - 1 chunks); the 8 all-gather
  // buffers in FP8 under an FP8 recipe, the 4 reduce-scatter ones in bf16.
  // Llama 3 70B, TP 8 with sequence parallelism, seq 8192, mbs 1:
  // 8192 x 8192 elements -> 12 x 2 B = 1.5 GiB in bf16, (8 + 8) B = 1 GiB
  // with FP8.  Only where the overlap runs (Megatron-Core with
  // --tp-comm-overlap); outside PyTorch's allocator.
  const ModelSpec m = load_model("llama3-70b");
  const ClusterSpec c = load_cluster("dgx-h100");
  auto userbuffers = [&](bool overlap, bool fp8) {
    Plan p = tp8_sequence_parallel(Framework::kMegatronCore, 1, overlap);
    if (fp8) REQUIRE(set_precision("fp8", &p));
    const Layout l = resolve_plan(m, c, 64, p);
    REQUIRE(l.feasible);
    const MemoryReport r = estimate_memory(m, c, l);
    const MemoryBreakdown& b = r.stages[0].breakdown;
    CHECK(b.allocated() < b.total() - b.userbuffers);  // counted outside the allocator's view
    return b.userbuffers;
  };
  const double elements = 8192.0 * 8192.0;
  CHECK_THAT(userbuffers(true, false), WithinRel(12 * 2 * elements, 1e-12));
  CHECK_THAT(userbuffers(true, true), WithinRel((8 * 1 + 4 * 2) * elements, 1e-12));
  CHECK(userbuffers(false, false) == 0);
}

TEST_CASE("torchtitan's async TP: one SymmetricMemory workspace of two sequence-parallel chunks") {
  // torch/distributed/_symmetric_memory/__init__.py: one workspace per TP
  // group, grown to the largest request (get_symm_mem_workspace); the
  // all-gather side asks for the local shard's bytes
  // (_pipelined_multi_all_gather_and_consume), the reduce-scatter side for
  // two output chunks (_pipelined_produce_and_all2all, double-buffered).
  // Llama 3 70B, TP 8 with sequence parallelism, seq 8192, mbs 1: a chunk is
  // 8192 / 8 x 8192 bf16 elements = 16 MiB, the workspace 32 MiB -- not
  // Transformer Engine's twelve full-shape buffers (1.5 GiB).
  const ModelSpec m = load_model("llama3-70b");
  const ClusterSpec c = load_cluster("dgx-h100");
  const Layout l = resolve_plan(m, c, 64, tp8_sequence_parallel(Framework::kTorchtitan, 3, true));
  REQUIRE(l.feasible);
  const MemoryReport r = estimate_memory(m, c, l);
  const MemoryBreakdown& b = r.stages[0].breakdown;
  CHECK_THAT(b.userbuffers, WithinRel(2 * (8192.0 / 8 * 8192.0) * 2, 1e-12));
  CHECK(b.allocated() < b.total() - b.userbuffers);  // outside the allocator's view
}

TEST_CASE("DeepSpeed 2021's ZeRO-3 holds one gathered module at a time, FSDP2 two blocks") {
  // GPT-3 175B (h 12288, 4h GeLU MLP, vocab 51200, 2048 learned positions)
  // on 384 A100, ZeRO-3, one rank per layer.  DeepSpeed v0.3.14 - v0.5.10
  // gathers each module on demand and releases it after use (its step
  // counter behind the trace, deepspeed_zero3.h): besides its bf16 shard
  // (2 B per parameter / 384) it holds the largest module gathered -- here
  // the embedding, 51200 x 12288 + 2048 x 12288 elements, larger than FC1's
  // 4h^2 -- twice while ProcessGroupNCCL's flat output is copied into the
  // parameter's buffer.  FSDP2 (torchtitan) holds a whole block and the
  // prefetched next one: 2 x (12h^2 + the layer's biases and norms).
  const ModelSpec m = load_model("gpt3-175b");
  const ClusterSpec c = load_cluster("dgx-a100");
  const double h = 12288;
  auto weights = [&](Framework fw) {
    Plan p;
    p.mbs = 4;
    p.gbs = 1536;
    p.zero = 3;
    p.recompute = Recompute::kFull;
    p.attention = Attention::kNaive;
    p.framework = fw;
    const Layout l = resolve_plan(m, c, 384, p);
    REQUIRE(l.feasible);
    const MemoryReport r = estimate_memory(m, c, l);
    return std::make_pair(r.stages[0].breakdown.weights, r.stages[0].params);
  };
  const auto [ds, params] = weights(Framework::kDeepSpeed);
  const double embedding = 51200 * h + 2048 * h;
  REQUIRE(embedding > 4 * h * h);
  CHECK_THAT(ds, WithinRel(2 * params / 384 + 2 * 2 * embedding, 1e-9));
  CHECK(largest_weight_matrix(m, 1) == 4 * h * h);
  const auto [titan, titan_params] = weights(Framework::kTorchtitan);
  // FSDP2's shard is fp32 (4 B); its two gathered blocks are each at least
  // the layer's four weight matrices, 12h^2.
  CHECK(titan - 4 * titan_params / 384 >= 2 * 2 * 12 * h * h);
}

}  // namespace
}  // namespace trainplan
