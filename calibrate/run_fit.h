// Calibration from your own runs (`trainplan calibrate --from-runs`): the
// measured step times of a few layouts on a cluster fix the handful of
// efficiency figures the simulator exposes (RunScales: GEMM, HBM and
// attention efficiency, intra- and inter-node bandwidth, the host's time
// per op call), by bounded
// nonlinear least squares on the log ratio of predicted to measured step
// time (Levenberg-Marquardt with Eigen, forward-difference Jacobian,
// projected onto the bounds), with a weak prior pulling every scale towards 1
// (the published figure) so that a figure no run depends on stays as
// published.
#ifndef TRAINPLAN_CALIBRATE_RUN_FIT_H_
#define TRAINPLAN_CALIBRATE_RUN_FIT_H_

#include <string>
#include <vector>

#include "simulator/spec/calibration.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"
#include "simulator/spec/plan.h"

namespace trainplan {

// One measured run: a layout of a model on a cluster (the published figures,
// before any scale) and its measured step time.
struct MeasuredRun {
  std::string name;
  ModelSpec model;
  ClusterSpec cluster;
  int gpus = 0;
  Plan plan;
  double step_time_s = 0;  // > 0
};

struct RunFitOptions {
  // Weight of the prior sum(log(scale)^2) against the runs' sum of squared
  // log errors: 0.01 lets one run with a 10% error move a scale by about 10%
  // while a scale no run constrains stays at 1.
  double prior_weight = 0.01;
  int max_iterations = 40;
};

// Bounds of each scale: from 1/10 of the published figure up to what keeps
// an efficiency <= 1, and bandwidths up to 1.25x the line rate figure.
constexpr double kRunScaleFloor = 0.1;
constexpr double kRunBandwidthCeiling = 1.25;
// The host's time per op call (RunScales::host_op_time) from 1/10 to 10x.
constexpr double kRunHostCeiling = 10.0;

// The simulated step time of `run` with `scales` applied to its cluster.
// Throws InputError if the plan is infeasible on the cluster.
double predicted_step_time(const MeasuredRun& run, const RunScales& scales);

// Fits the scales to `runs` (all on clusters of one GPU type; the caller
// checks), and fills the residual of each run and, with two runs or more,
// its leave-one-out prediction (fit on the others).
// REQUIRES: runs non-empty, every step_time_s > 0.
RunFit fit_runs(const std::vector<MeasuredRun>& runs, const RunFitOptions& options = {});

// The scales only (no residuals, no leave-one-out): one fit.
RunScales fit_run_scales(const std::vector<MeasuredRun>& runs, const RunFitOptions& options = {});

// Warnings for a poor fit: residual or leave-one-out error above 10%, or a
// scale at one of its bounds.
std::vector<std::string> run_fit_warnings(const RunFit& fit);

}  // namespace trainplan

#endif  // TRAINPLAN_CALIBRATE_RUN_FIT_H_
