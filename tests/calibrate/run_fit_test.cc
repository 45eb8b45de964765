// Tests of `calibrate --from-runs` (calibrate/run_fit.h): the fit recovers
// known scales from synthetic runs (runs simulated on a cluster whose
// figures were scaled by known factors), a figure no run depends on stays as
// published, leave-one-out predicts a held-out run, and the calibration file
// round-trips and applies.
#include "calibrate/run_fit.h"

#include <cmath>
#include <string>
#include <vector>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include "simulator/spec/calibration.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {
namespace {

using Catch::Matchers::WithinRel;

MeasuredRun run(const std::string& name, const std::string& model, int gpus, int tp, int pp, int64_t gbs,
                int64_t seq) {
  MeasuredRun r;
  r.name = name;
  r.model = load_model(model);
  r.cluster = load_cluster("dgx-a100");
  r.gpus = gpus;
  r.plan.tp = tp;
  r.plan.pp = pp;
  r.plan.gbs = gbs;
  r.plan.seq = seq;
  r.plan.mbs = 1;
  return r;
}

// Layouts that lean on different figures: one GPU (compute), TP 8 in a node
// (NVLink), DP across 4 nodes (NICs), long and short sequences (attention
// share), pipeline.
std::vector<MeasuredRun> layouts() {
  return {run("1gpu", "gpt3-1.3b", 1, 1, 1, 8, 2048),     run("1gpu-long", "gpt3-1.3b", 1, 1, 1, 2, 8192),
          run("tp8", "gpt3-2.7b", 8, 8, 1, 8, 2048),      run("dp8", "gpt3-1.3b", 8, 1, 1, 8, 2048),
          run("dp32", "gpt3-1.3b", 32, 1, 1, 32, 2048),   run("tp8-dp4", "gpt3-2.7b", 32, 8, 1, 16, 2048),
          run("pp4-dp2", "gpt3-2.7b", 8, 1, 4, 16, 2048)};
}

TEST_CASE("RunFit: recovers known scales from synthetic runs", "[calibrate][runfit]") {
  // The oracle: step times simulated with known scales are what a cluster
  // with those figures would measure; the fit starts from the published ones.
  RunScales truth;
  truth.gemm_efficiency = 0.80;
  truth.attention_efficiency = 0.90;
  truth.intra_bandwidth = 0.70;
  truth.inter_bandwidth = 0.60;
  std::vector<MeasuredRun> runs = layouts();
  for (MeasuredRun& r : runs) r.step_time_s = predicted_step_time(r, truth);
  RunFitOptions o;
  o.prior_weight = 1e-6;  // noise-free data: let the runs decide
  const RunFit fit = fit_runs(runs, o);
  // Every run is reproduced...
  CHECK(fit.residual_rms < 0.01);
  for (const RunResidual& r : fit.runs) CHECK_THAT(r.predicted_s, WithinRel(r.measured_s, 0.01));
  // ...by the figures that were changed (compute dominates, so the GEMM scale
  // is pinned tightly; the bandwidths by the comm-bound runs).
  CHECK_THAT(fit.scales.gemm_efficiency, WithinRel(truth.gemm_efficiency, 0.03));
  CHECK_THAT(fit.scales.intra_bandwidth, WithinRel(truth.intra_bandwidth, 0.10));
  CHECK_THAT(fit.scales.inter_bandwidth, WithinRel(truth.inter_bandwidth, 0.10));
  // Leave-one-out: each run predicted from the others within 5%.
  CHECK(fit.leave_one_out_rms < 0.05);
}

// Qwen3-30B-A3B on 8 GB200 (Megatron-Core, MXFP8, ep 8): host-bound at
// small micro-batches on Grace (docs/moe.md, "Host-bound layers"), GPU-bound
// at large ones.
MeasuredRun gb200_run(const std::string& name, const std::string& model, int64_t mbs, int ep) {
  MeasuredRun r;
  r.name = name;
  r.model = load_model(model);
  r.cluster = load_cluster("gb200-nvl72");
  r.gpus = 8;
  r.plan.framework = Framework::kMegatronCore;
  r.plan.ep = ep;
  r.plan.etp = 1;
  r.plan.mbs = mbs;
  r.plan.gbs = 8 * mbs * 2;
  r.plan.seq = 4096;
  r.plan.zero = 1;
  REQUIRE(set_precision("fp8", &r.plan));
  return r;
}

TEST_CASE("RunFit: recovers the host's time per op call from host-bound runs", "[calibrate][runfit][host]") {
  // The oracle: runs simulated with a host 1.5x slower per op call and GEMMs
  // at 0.9 of the published efficiency.  The host-bound runs (small
  // micro-batches) move only with the host, the GPU-bound ones (large
  // micro-batches, the dense model) with the GPU: the fit separates them.
  std::vector<MeasuredRun> runs = {gb200_run("moe-mbs1", "qwen3-30b-a3b", 1, 8),
                                   gb200_run("moe-mbs2", "qwen3-30b-a3b", 2, 8),
                                   gb200_run("moe-mbs8", "qwen3-30b-a3b", 8, 8),
                                   gb200_run("dense-mbs2", "llama3-8b", 2, 1),
                                   gb200_run("dense-mbs4", "llama3-8b", 4, 1)};
  RunScales truth;
  truth.host_op_time = 1.5;
  truth.gemm_efficiency = 0.9;
  for (MeasuredRun& r : runs) r.step_time_s = predicted_step_time(r, truth);
  // The host matters: at the published figures the host-bound run is
  // predicted well short of its "measured" time, the GPU-bound dense one not
  // by the host.
  CHECK(predicted_step_time(runs[0], RunScales{}) < 0.8 * runs[0].step_time_s);
  RunFitOptions o;
  o.prior_weight = 1e-6;
  const RunScales s = fit_run_scales(runs, o);
  CHECK_THAT(s.host_op_time, WithinRel(truth.host_op_time, 0.05));
  CHECK_THAT(s.gemm_efficiency, WithinRel(truth.gemm_efficiency, 0.05));
  // On a cluster that does not model its host the scale has nothing to move.
  std::vector<MeasuredRun> a100 = {run("1gpu", "gpt3-1.3b", 1, 1, 1, 8, 2048)};
  a100[0].step_time_s = predicted_step_time(a100[0], RunScales{});
  CHECK(fit_run_scales(a100).host_op_time == 1.0);
}

TEST_CASE("RunFit: a figure no run depends on stays as published", "[calibrate][runfit]") {
  // Single-node runs say nothing about the NICs: the prior keeps that scale
  // at 1 while the GEMM scale moves to explain a uniformly slower GPU.
  std::vector<MeasuredRun> runs = {run("1gpu", "gpt3-1.3b", 1, 1, 1, 8, 2048),
                                   run("tp8", "gpt3-2.7b", 8, 8, 1, 8, 2048)};
  RunScales slow;
  slow.gemm_efficiency = 0.85;
  for (MeasuredRun& r : runs) r.step_time_s = predicted_step_time(r, slow);
  const RunScales s = fit_run_scales(runs);
  CHECK(s.inter_bandwidth == 1.0);
  CHECK_THAT(s.gemm_efficiency, WithinRel(0.85, 0.05));
}

TEST_CASE("RunFit: scales stay within their bounds", "[calibrate][runfit]") {
  // A run 100x slower than the model cannot be explained: scales stop at the
  // floor and the fit says so.
  std::vector<MeasuredRun> runs = {run("1gpu", "gpt3-1.3b", 1, 1, 1, 8, 2048)};
  runs[0].step_time_s = 100 * predicted_step_time(runs[0], RunScales{});
  const RunFit fit = fit_runs(runs);
  CHECK(fit.scales.gemm_efficiency >= kRunScaleFloor * 0.999);
  CHECK(fit.residual_rms > 0.5);
  const std::vector<std::string> w = run_fit_warnings(fit);
  REQUIRE_FALSE(w.empty());
  CHECK(w[0].find("misses the runs by") != std::string::npos);
  // An efficiency never exceeds 1 (A100 gemm_efficiency 0.869: scale <= 1.15).
  runs[0].step_time_s = predicted_step_time(runs[0], RunScales{}) / 3;
  const RunScales fast = fit_run_scales(runs);
  CHECK(fast.gemm_efficiency * load_cluster("dgx-a100").gpu.gemm_efficiency <= 1.0 + 1e-9);
}

TEST_CASE("RunFit: the calibration file round-trips and applies the scales", "[calibrate][runfit]") {
  Calibration c;
  c.tool = "trainplan test";
  c.backend = "runs";
  c.versions = "fit to 1 measured runs";
  c.device = "A100-SXM4-80GB";
  c.gpu_type = "A100";
  c.ranks = 8;
  c.nodes = 1;
  c.complete = true;
  c.run_fit.present = true;
  c.run_fit.scales.gemm_efficiency = 0.8;
  c.run_fit.scales.inter_bandwidth = 0.5;
  c.run_fit.runs.push_back(RunResidual{"r", 1.5, 1.49, 0});
  c.run_fit.residual_rms = 0.007;
  const Calibration back = parse_calibration(calibration_json(c), "cal.json");
  CHECK(back.backend == "runs");
  CHECK(back.run_fit.present);
  CHECK(back.run_fit.scales.gemm_efficiency == 0.8);
  CHECK(back.run_fit.runs.size() == 1);
  CHECK_THAT(back.run_fit.runs[0].predicted_s, WithinRel(1.49, 1e-6));
  ClusterSpec cl = load_cluster("dgx-a100");
  const double gemm = cl.gpu.gemm_efficiency, nic = cl.inter_node->nic_bandwidth.bytes_per_s();
  const double hbm = cl.gpu.hbm_efficiency;
  apply_calibration(back, "--calibration", &cl);
  CHECK_THAT(cl.gpu.gemm_efficiency, WithinRel(0.8 * gemm, 1e-12));
  CHECK_THAT(cl.inter_node->nic_bandwidth.bytes_per_s(), WithinRel(0.5 * nic, 1e-12));
  CHECK(cl.gpu.hbm_efficiency == hbm);  // scale 1
  CHECK(back.run_fit.scales.host_op_time == 1.0);
  // The host's op time scales the cluster's (H100: the 8480C's 13.48 us).
  Calibration hc = back;
  hc.device = "H100-SXM5-80GB";
  hc.gpu_type = "H100";
  hc.run_fit.scales.host_op_time = 1.5;
  const Calibration hback = parse_calibration(calibration_json(hc), "cal.json");
  CHECK(hback.run_fit.scales.host_op_time == 1.5);
  ClusterSpec h100 = load_cluster("dgx-h100");
  apply_calibration(hback, "--calibration", &h100);
  CHECK_THAT(h100.host.op_overhead.us(), WithinRel(1.5 * 13.48, 1e-9));
  // A file written before the host scale existed reads as the published figure.
  nlohmann::json old = nlohmann::json::parse(calibration_json(c));
  REQUIRE(old["run_fit"]["scales"].erase("host_op_time") == 1);
  CHECK(parse_calibration(old.dump(), "old.json").run_fit.scales.host_op_time == 1.0);
  // Applying to another GPU type is refused, as for measured calibrations.
  ClusterSpec h = load_cluster("dgx-h100");
  CHECK_THROWS_WITH(apply_calibration(back, "--calibration", &h),
                    Catch::Contains("cal.json: /gpu_type: taken on A100-SXM4-80GB (A100)"));
}

}  // namespace
}  // namespace trainplan
