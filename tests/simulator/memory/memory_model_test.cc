// Tests of the closed-form memory model: ZeRO model states against
// Rajbhandari et al. 2020 (FORMULAS.md §2.3), activations against Korthikanti
// et al. 2022 Fig. 1 and the pipeline-schedule factors of §2.4.
#include "simulator/memory/memory_model.h"

#include <algorithm>
#include <string>

#include <catch2/catch.hpp>

#include "simulator/cost/layer_cost.h"
#include "simulator/framework/framework.h"

namespace trainplan {
namespace {

std::string all_reasons(const Layout& l) {
  std::string out;
  for (const std::string& r : l.reasons) out += r + "\n";
  return out;
}

TEST_CASE("MemoryModel: ZeRO stages reproduce Rajbhandari et al. Fig. 1", "[sim][memory]") {
  // Psi = 7.5e9, N_d = 64, K = 12, 16-bit weights and gradients (the paper's
  // mixed-precision Adam): published_dev.json zero20_fig1_7.5B_nd64_*.
  const double psi = 7.5e9;
  auto total = [&](int zero) {
    return model_state_bytes(psi, Precision::kBf16, GradDtype::kBf16, zero, 64).total();
  };
  SECTION("baseline: (2 + 2 + 12) Psi = 120 GB") { CHECK(total(0) == Approx(120e9).epsilon(1e-12)); }
  SECTION("P_os: 4 Psi + 12 Psi/64 = 31.4 GB") { CHECK(total(1) == Approx(31.40625e9).epsilon(1e-12)); }
  SECTION("P_os+g: 2 Psi + 14 Psi/64 = 16.6 GB") { CHECK(total(2) == Approx(16.640625e9).epsilon(1e-12)); }
  SECTION("P_os+g+p: 16 Psi/64 = 1.875 GB") { CHECK(total(3) == Approx(1.875e9).epsilon(1e-12)); }
  SECTION("the published rounded figures") {
    CHECK(total(1) / 1e9 == Approx(31.4).margin(0.05));
    CHECK(total(2) / 1e9 == Approx(16.6).margin(0.05));
    CHECK(total(3) / 1e9 == Approx(1.9).margin(0.05));
  }
}

TEST_CASE("MemoryModel: Megatron keeps 18 bytes per parameter, 6 + 12/d with the distributed optimizer",
          "[sim][memory]") {
  // bf16 weights 2, fp32 main gradients 4, fp32 master + Adam m, v 12
  // (Megatron-LM distributed optimizer docs).
  const double psi = 1e9;
  SECTION("no ZeRO: 18 bytes per parameter") {
    CHECK(model_state_bytes(psi, Precision::kBf16, GradDtype::kFp32, 0, 8).total() == Approx(18e9).epsilon(1e-12));
  }
  for (int d : {2, 8, 64}) {
    DYNAMIC_SECTION("ZeRO-1 over d=" << d << ": 6 + 12/d bytes per parameter") {
      const ModelStateBytes s = model_state_bytes(psi, Precision::kBf16, GradDtype::kFp32, 1, d);
      CHECK(s.total() == Approx(psi * (6 + 12.0 / d)).epsilon(1e-12));
      CHECK(s.weights == Approx(2 * psi).epsilon(1e-12));
      CHECK(s.gradients == Approx(4 * psi).epsilon(1e-12));
    }
  }
  SECTION("fp32 training: 4 + 4 + 8 = 16 bytes per parameter (no master copy)") {
    CHECK(model_state_bytes(psi, Precision::kFp32, GradDtype::kFp32, 0, 1).total() == Approx(16e9).epsilon(1e-12));
  }
  SECTION("optimizer offload leaves weights and gradients on the GPU") {
    const ModelStateBytes s = model_state_bytes(psi, Precision::kBf16, GradDtype::kFp32, 1, 8, Offload::kOptimizer);
    CHECK(s.optimizer == 0);
    CHECK(s.total() == Approx(6e9).epsilon(1e-12));
  }
}

TEST_CASE("MemoryModel: bf16 Adam moments keep 8 optimizer bytes per parameter, not 12", "[sim][memory]") {
  // Megatron-Core's precision-aware optimizer (--exp-avg-dtype bf16
  // --exp-avg-sq-dtype bf16): fp32 master 4 + m 2 + v 2 = 8 bytes per
  // parameter, sharded over d by the distributed optimizer, so ZeRO-1 holds
  // 6 + 8/d; DeepSeek-V3 report Sec. 3.3.3 (BF16 moments, FP32 master
  // weights and gradients).
  const double psi = 1e9;
  const ModelSpec m = load_model("llama3-8b");
  const ClusterSpec c = load_cluster("dgx-h100");
  for (int d : {1, 8, 64}) {
    DYNAMIC_SECTION("ZeRO-1 over d=" << d << ": 6 + 8/d bytes per parameter") {
      const ModelStateBytes s = model_state_bytes(psi, Precision::kBf16, GradDtype::kFp32, 1, d, Offload::kNone,
                                                  false, AdamStateBytes{4, 2});
      CHECK(s.optimizer == Approx(psi * 8.0 / d).epsilon(1e-12));
      CHECK(s.total() == Approx(psi * (6 + 8.0 / d)).epsilon(1e-12));
    }
  }
  SECTION("Megatron-Core keeps the bf16 parameter's remainder as the master: 2 + 2 + 2 = 6 bytes") {
    // OptimizerConfig.store_param_remainders (default true) under the
    // precision-aware optimizer with bf16 parameters and no FP8 recipe but
    // delayed scaling; an FP8 recipe with primary FP8 weights (tensorwise,
    // mxfp8) keeps Megatron-Core's fp32 master: 4 + 2 + 2.
    Plan p;
    p.zero = 1;
    p.framework = Framework::kMegatronCore;
    p.moment_dtype = MomentDtype::kBf16;
    const AdamStateBytes mcore = adam_state_bytes(p, execution_profile(p));
    CHECK(mcore.master + 2 * mcore.moment == 6);
    p.fp8_recipe = Fp8Recipe::kDelayed;
    CHECK(adam_state_bytes(p, execution_profile(p)).master == 2);
    p.fp8_recipe = Fp8Recipe::kTensorwise;
    CHECK(adam_state_bytes(p, execution_profile(p)).master == 4);
    p.fp8_recipe = Fp8Recipe::kNone;
    p.moment_dtype = MomentDtype::kFp32;  // no precision-aware optimizer: fp32 master, m, v
    const AdamStateBytes plain = adam_state_bytes(p, execution_profile(p));
    CHECK(plain.master + 2 * plain.moment == 12);
    p.framework = Framework::kGeneric;  // the DeepSeek-V3 report: "FP32 master weights", BF16 moments
    p.moment_dtype = MomentDtype::kBf16;
    const AdamStateBytes generic = adam_state_bytes(p, execution_profile(p));
    CHECK(generic.master + 2 * generic.moment == 8);
  }
  SECTION("a whole plan: its optimizer states shrink by 8/12 on every stage, nothing else moves") {
    Plan p;
    p.pp = 2;
    p.zero = 1;
    p.mbs = 1;
    p.gbs = 16;
    const Layout fp32 = resolve_plan(m, c, 8, p);
    p.moment_dtype = MomentDtype::kBf16;
    const Layout bf16 = resolve_plan(m, c, 8, p);
    INFO(all_reasons(bf16));
    REQUIRE(fp32.feasible);
    REQUIRE(bf16.feasible);
    const MemoryReport a = estimate_memory(m, c, fp32), b = estimate_memory(m, c, bf16);
    REQUIRE(a.stages.size() == b.stages.size());
    for (size_t i = 0; i < a.stages.size(); ++i) {
      CHECK(b.stages[i].breakdown.optimizer == Approx(a.stages[i].breakdown.optimizer * 8.0 / 12.0).epsilon(1e-9));
      CHECK(b.stages[i].breakdown.weights == Approx(a.stages[i].breakdown.weights).epsilon(1e-12));
      CHECK(b.stages[i].breakdown.gradients == Approx(a.stages[i].breakdown.gradients).epsilon(1e-12));
      CHECK(b.stages[i].breakdown.activations == Approx(a.stages[i].breakdown.activations).epsilon(1e-12));
    }
  }
  SECTION("the precision-aware optimizer's rules (Megatron-Core)") {
    Plan p;
    p.zero = 1;
    p.mbs = 1;
    p.gbs = 8;
    p.moment_dtype = MomentDtype::kBf16;
    CHECK(resolve_plan(m, c, 8, p).feasible);
    p.zero = 0;  // get_megatron_optimizer: only with the distributed optimizer
    CHECK_FALSE(resolve_plan(m, c, 8, p).feasible);
    p.zero = 1;
    p.framework = Framework::kDeepSpeed;  // DeepSpeed keeps fp32 moments
    CHECK_FALSE(resolve_plan(m, c, 8, p).feasible);
    p.framework = Framework::kMegatronCore;
    CHECK(resolve_plan(m, c, 8, p).feasible);
    p.precision = Precision::kFp32;  // no master copy for the moments to sit beside
    CHECK_FALSE(resolve_plan(m, c, 8, p).feasible);
  }
}

// Korthikanti Fig. 1, 22B on one DGX A100: TP=8, b=4, s=2048, no PP/DP.
Layout fig1_layout(const ModelSpec& m, const ClusterSpec& c, bool sp, Recompute r) {
  Plan p;
  p.tp = 8;
  p.mbs = 4;
  p.gbs = 4;
  p.sp = sp;
  p.recompute = r;
  p.attention = Attention::kNaive;
  Layout l = resolve_plan(m, c, 8, p);
  INFO(all_reasons(l));
  REQUIRE(l.feasible);
  return l;
}

TEST_CASE("MemoryModel: Korthikanti Fig. 1 activations of the 22B model", "[sim][memory]") {
  const ModelSpec m = load_model("gpt-22b");
  const ClusterSpec c = load_cluster("dgx-a100");
  const double sbh = 2048.0 * 4 * 6144, v = 51200, gib = 1073741824.0;
  SECTION("TP only, no recompute: 59.25 GiB (within 2%)") {
    // 48 layers * sbh(10 + 24/8 + 5*64*2048/(6144*8)) = 48 * 26.33 sbh =
    // 59.25 GiB exactly (korthikanti22_fig1_22B_no_recompute_no_sp).  Our
    // total adds the p = 1 terms: embedding dropout mask sbh, final LayerNorm
    // and output-layer inputs 4sbh, fp32 logits 4sbv/t: +0.43 GiB = 59.68 GiB.
    // The peak also holds, as the loss's backward starts, the bf16 gradient
    // of the logits cast from Megatron's in-place fp32 one, 2sbv/t: a
    // transient the figure's stored activations do not count.
    const MemoryReport r = estimate_memory(m, c, fig1_layout(m, c, false, Recompute::kNone));
    const double act = r.stages[0].breakdown.activations;
    const double loss_transient = 2 * sbh * v / 6144 / 8;
    CHECK((act - loss_transient) / gib == Approx(59.25).epsilon(0.02));
    CHECK(act == Approx(48 * sbh * (13 + 40.0 / 3) + sbh + 4 * sbh + 4 * sbh * v / 6144 / 8 + loss_transient)
                     .epsilon(1e-9));
  }
  SECTION("SP + selective recompute: 9.5625 GiB (within 3%)") {
    // 48 * 34sbh/8 = 9.5625 GiB exactly (korthikanti22_fig1_22B_seqpar_selective).
    // Extra p = 1 terms, all split by SP: sbh/8 + 4sbh/8 + 4sbv/8 = +0.22 GiB
    // = 9.79 GiB, 2.3% above the figure.
    // The peak adds the loss's backward transient 2sbv/t as above.
    const MemoryReport r = estimate_memory(m, c, fig1_layout(m, c, true, Recompute::kSelective));
    const double act = r.stages[0].breakdown.activations;
    const double loss_transient = 2 * sbh * v / 6144 / 8;
    CHECK((act - loss_transient) / gib == Approx(9.5625).epsilon(0.03));
    CHECK(act == Approx(48 * 34 * sbh / 8 + sbh / 8 + 4 * sbh / 8 + 4 * sbh * v / 6144 / 8 + loss_transient)
                     .epsilon(1e-9));
  }
  SECTION("full recompute keeps 2sbh/t per layer plus one layer rematerialised") {
    // 48 * 2sbh/8 (SP) + one layer's full Table 2 activations sbh(34 + 5as/h)/8
    // during its backward + the p = 1 terms.
    const MemoryReport r = estimate_memory(m, c, fig1_layout(m, c, true, Recompute::kFull));
    const double one_layer = sbh * (34 + 5 * 64 * 2048.0 / 6144) / 8;
    CHECK(r.stages[0].breakdown.activations ==
          Approx(48 * 2 * sbh / 8 + one_layer + sbh / 8 + 4 * sbh / 8 + 4 * sbh * v / 6144 / 8).epsilon(1e-9));
  }
}

TEST_CASE("MemoryModel: micro-batches in flight per schedule", "[sim][memory]") {
  SECTION("1F1B stage i holds min(p - i, m)") {
    for (int i = 0; i < 4; ++i) {
      CHECK(inflight_chunks(Schedule::k1F1B, 4, 16, 1, i) == 4 - i);
      CHECK(inflight_chunks(Schedule::k1F1B, 4, 2, 1, i) == std::min(4 - i, 2));
    }
  }
  SECTION("GPipe holds all m on every stage") {
    for (int i = 0; i < 4; ++i) CHECK(inflight_chunks(Schedule::kGpipe, 4, 16, 1, i) == 16);
  }
  SECTION("naive holds one") { CHECK(inflight_chunks(Schedule::kNaive, 4, 16, 1, 0) == 1); }
  SECTION("no pipeline holds one") { CHECK(inflight_chunks(Schedule::k1F1B, 1, 16, 1, 0) == 1); }
  SECTION("interleaved stage 0: 2(p-1) + (v-1)p + 1 chunks (Megatron warm-up + 1)") {
    // p=4, v=2: 6 + 4 + 1 = 11 chunks of half a stage = 5.5 micro-batches of
    // a whole stage, against 1F1B's 4: 1 + (p-1)/(pv) = 1.375.
    CHECK(inflight_chunks(Schedule::kInterleaved, 4, 16, 2, 0) == 11);
    CHECK(inflight_chunks(Schedule::kInterleaved, 4, 16, 2, 3) == 5);
  }
}

// A GPT-style model without dropout: no embedding activations, so stage 0 of
// a pipeline holds only transformer-layer activations.
ModelSpec no_dropout_gpt(int64_t layers) {
  ModelSpec m;
  m.name = "gpt-nodrop";
  m.layers = layers;
  m.hidden = 2048;
  m.heads = 16;
  m.kv_heads = 16;
  m.ffn_hidden = 8192;
  m.vocab = 51200;
  m.seq_len = 2048;
  m.mlp = MlpKind::kGelu;
  m.dropout = false;
  return m;
}

double stage0_activations(const ModelSpec& m, const ClusterSpec& c, int vp, Schedule s) {
  Plan p;
  p.pp = 4;
  p.vp = vp;
  p.mbs = 1;
  p.gbs = 16;  // 4 GPUs: dp = 1, m = 16
  p.schedule = s;
  p.schedule_given = true;
  const Layout l = resolve_plan(m, c, 4, p);
  INFO(all_reasons(l));
  REQUIRE(l.feasible);
  return estimate_memory(m, c, l).stages[0].breakdown.activations;
}

TEST_CASE("MemoryModel: stage 0 activations follow the schedule's factor", "[sim][memory]") {
  const ModelSpec m = no_dropout_gpt(16);  // 4 layers per stage, vp=2 divides
  const ClusterSpec c = load_cluster("dgx-h100");
  const double one_f_one_b = stage0_activations(m, c, 1, Schedule::k1F1B);
  SECTION("1F1B stage 0 holds p micro-batches of its layers = L layers' worth (Korthikanti Eq. 5)") {
    LayerShape s;
    s.seq = 2048;
    const double per_layer = transformer_layer_cost(m, s).saved_bytes;
    CHECK(one_f_one_b == Approx(16 * per_layer).epsilon(1e-9));
  }
  SECTION("interleaved / 1F1B = 1 + (p-1)/(pv), p=4, v=2") {
    CHECK(stage0_activations(m, c, 2, Schedule::kInterleaved) / one_f_one_b ==
          Approx(1 + 3.0 / 8).epsilon(1e-9));
  }
  SECTION("GPipe / 1F1B = m/p = 4") {
    CHECK(stage0_activations(m, c, 1, Schedule::kGpipe) / one_f_one_b == Approx(4.0).epsilon(1e-9));
  }
}

TEST_CASE("MemoryModel: the fits flag flips at the GPU's capacity", "[sim][memory]") {
  const ModelSpec m = load_model("gpt3-1.3b");
  ClusterSpec c = load_cluster("dgx-a100");
  const Layout l = resolve_plan(m, c, 1, Plan{});
  REQUIRE(l.feasible);
  const double peak = estimate_memory(m, c, l).peak_bytes;
  SECTION("one byte more than the peak fits") {
    c.gpu.memory = static_cast<Bytes>(peak) + 1;
    const MemoryReport r = estimate_memory(m, c, l);
    CHECK(r.fits);
    CHECK(r.reason().empty());
  }
  SECTION("one byte less does not, and the reason says so") {
    c.gpu.memory = static_cast<Bytes>(peak) - 1;
    const MemoryReport r = estimate_memory(m, c, l);
    CHECK_FALSE(r.fits);
    CHECK_THAT(r.reason(), Catch::Matchers::StartsWith("needs ") &&
                             Catch::Matchers::Contains(" GiB per GPU on stage 0, has "));
  }
  SECTION("the A100's 80 GiB: one sequence fits, 32 do not") {
    CHECK(estimate_memory(m, c, l).fits);
    Plan big;
    big.mbs = 32;
    const MemoryReport r = estimate_memory(m, c, resolve_plan(m, c, 1, big));
    CHECK_FALSE(r.fits);
    CHECK_THAT(r.reason(), Catch::Matchers::EndsWith(" GiB per GPU on stage 0, has 80.0 GiB"));
  }
}

TEST_CASE("MemoryModel: ZeRO-3 shards the weights", "[sim][memory]") {
  // gpt3-1.3b on 8 GPUs, dp = 8, bf16 with fp32 grads.  Psi = 1,317,654,528.
  const ModelSpec m = load_model("gpt3-1.3b");
  const ClusterSpec c = load_cluster("dgx-a100");
  const double psi = total_params(m);
  Plan p0;
  Plan p3;
  p3.zero = 3;
  const MemoryBreakdown z0 = estimate_memory(m, c, resolve_plan(m, c, 8, p0)).stages[0].breakdown;
  const MemoryBreakdown z3 = estimate_memory(m, c, resolve_plan(m, c, 8, p3)).stages[0].breakdown;
  SECTION("without ZeRO every GPU holds 2 Psi of weights") { CHECK(z0.weights == Approx(2 * psi).epsilon(1e-12)); }
  SECTION("ZeRO-3: 2 Psi/8 plus two gathered units in 16-bit") {
    // The largest gathered unit is the (tied) output layer, Vh + 2h =
    // 104,861,696 parameters, larger than a layer's 12h^2 + 13h = 50,376,704;
    // FSDP holds it and prefetches the next: 2 * 2 bytes each.
    const double h = 2048, v = 51200;
    const double largest = std::max(v * h + 2 * h, 12 * h * h + 13 * h);
    CHECK(z3.weights == Approx(2 * psi / 8 + 4 * largest).epsilon(1e-12));
  }
  SECTION("ZeRO-3 also shards gradients (fp32) and optimizer states") {
    CHECK(z3.gradients == Approx(4 * psi / 8).epsilon(1e-12));
    CHECK(z3.optimizer == Approx(12 * psi / 8).epsilon(1e-12));
  }
}

TEST_CASE("MemoryModel: stage parameters add up to the model", "[sim][memory]") {
  const ClusterSpec c = load_cluster("dgx-a100");
  SECTION("untied llama2-7b over 4 stages") {
    const ModelSpec m = load_model("llama2-7b");
    Plan p;
    p.pp = 4;
    const MemoryReport r = estimate_memory(m, c, resolve_plan(m, c, 4, p));
    REQUIRE(r.stages.size() == 4);
    double sum = 0;
    for (const StageMemory& st : r.stages) sum += st.params;
    CHECK(sum == Approx(total_params(m)).epsilon(1e-12));
  }
  SECTION("tied gpt3-1.3b over 2 stages keeps a copy of the embedding on the last stage") {
    // Megatron: with pp > 1 the output layer holds its own copy (Vh) of the
    // tied word embedding, synchronised by an extra all-reduce.
    const ModelSpec m = load_model("gpt3-1.3b");
    Plan p;
    p.pp = 2;
    const MemoryReport r = estimate_memory(m, c, resolve_plan(m, c, 2, p));
    REQUIRE(r.stages.size() == 2);
    CHECK(r.stages[0].params + r.stages[1].params == Approx(total_params(m) + 51200.0 * 2048).epsilon(1e-12));
  }
  SECTION("the peak is the most loaded stage") {
    const ModelSpec m = load_model("llama2-7b");
    Plan p;
    p.pp = 4;
    const MemoryReport r = estimate_memory(m, c, resolve_plan(m, c, 4, p));
    double max_total = 0;
    for (const StageMemory& st : r.stages) max_total = std::max(max_total, st.breakdown.total());
    CHECK(r.peak_bytes == max_total);
    CHECK(r.stages[r.peak_stage].breakdown.total() == max_total);
  }
}

}  // namespace
}  // namespace trainplan

namespace trainplan {

TEST_CASE("MemoryModel: the published Llama 3 405B layouts fit on 80 GB H100 with their settings",
          "[sim][memory]") {
  // Oracle: these layouts trained, so they fit.  Settings as published:
  const ModelSpec m = load_model("llama3-405b");
  const ClusterSpec h100 = load_cluster("dgx-h100");
  SECTION("NVIDIA's recipe: TP8 PP8 CP2 VP8 on 512 H100, bf16 gradient buffer") {
    // Megatron-Bridge perf_recipes/llama/h100/llama31.py (and NeMo 2's
    // performance recipe): tp 8, pp 8, cp 2, vp 8, sequence parallel, mbs 1,
    // gbs 768, seq 8192, distributed optimizer, no recompute, and
    // grad_reduce_in_fp32=False: the gradient buffer is bf16.
    Plan p;
    p.tp = 8;
    p.pp = 8;
    p.cp = 2;
    p.vp = 8;
    p.zero = 1;
    p.sp = true;
    p.mbs = 1;
    p.gbs = 768;
    p.seq = 8192;
    p.grad_dtype = GradDtype::kBf16;
    const MemoryReport r = estimate_memory(m, h100, resolve_plan(m, h100, 512, p));
    CHECK(r.fits);
    CHECK(r.peak_bytes / kGiB < 79.65);
    // With Megatron-LM's --bf16 default (fp32 main gradients, 4 B per
    // parameter instead of 2) the same layout would not: the gradient dtype
    // is what lets it fit.
    p.grad_dtype = GradDtype::kFp32;
    CHECK_FALSE(estimate_memory(m, h100, resolve_plan(m, h100, 512, p)).fits);
  }
  SECTION("Meta's 16K-GPU layout: TP8 PP16, first and last stage one layer fewer, gradients sharded") {
    // Dubey et al. 2024 Sec. 3.3.2 and Table 4: tp 8, pp 16, dp 128, 16
    // sequences of 8192 per data-parallel rank (gbs 2048), the first and last
    // stage one layer fewer (7, 8 x 14, 7 of 126), "FSDP ... shards
    // optimizer states and gradients, but for model shards we do not reshard
    // after forward" (ZeRO-2), no activation checkpointing at 8K.
    Plan p;
    p.tp = 8;
    p.pp = 16;
    p.zero = 2;
    p.sp = true;
    p.mbs = 1;
    p.gbs = 2048;
    p.seq = 8192;
    p.stage_layers = {7, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 8, 7};
    const Layout l = resolve_plan(m, h100, 16384, p);
    REQUIRE(l.feasible);
    const MemoryReport r = estimate_memory(m, h100, l);
    CHECK(r.fits);
    CHECK(r.peak_bytes / kGiB < 79.65);
    // Unsharded fp32 gradients (ZeRO-1) would not fit.
    p.zero = 1;
    CHECK_FALSE(estimate_memory(m, h100, resolve_plan(m, h100, 16384, p)).fits);
  }
}

}  // namespace trainplan
