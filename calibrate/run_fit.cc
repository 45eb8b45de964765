#include "calibrate/run_fit.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdio>

#include <Eigen/Dense>

#include "simulator/core/error.h"
#include "simulator/report/step_report.h"

namespace trainplan {

namespace {

constexpr int kScales = 6;
constexpr int kLeaveOneOutIterations = 6;
using Vec = Eigen::Matrix<double, kScales, 1>;
using Mat = Eigen::Matrix<double, kScales, kScales>;

RunScales scales_of(const Vec& x) {
  RunScales s;
  s.gemm_efficiency = std::exp(x(0));
  s.hbm_efficiency = std::exp(x(1));
  s.attention_efficiency = std::exp(x(2));
  s.intra_bandwidth = std::exp(x(3));
  s.inter_bandwidth = std::exp(x(4));
  s.host_op_time = std::exp(x(5));
  return s;
}

struct Bounds {
  Vec lo, hi;
};

// log-scale bounds: no efficiency above 1 on any run's cluster.
Bounds bounds_of(const std::vector<MeasuredRun>& runs) {
  Bounds b;
  b.lo.setConstant(std::log(kRunScaleFloor));
  b.hi(0) = b.hi(1) = b.hi(2) = 10.0;
  b.hi(3) = b.hi(4) = std::log(kRunBandwidthCeiling);
  // The host's time per op call: a time, free either way within 10x.
  b.hi(5) = std::log(kRunHostCeiling);
  for (const MeasuredRun& r : runs) {
    const GpuSpec& g = r.cluster.gpu;
    b.hi(0) = std::min(b.hi(0), -std::log(std::max(g.gemm_efficiency, g.fp8_gemm_efficiency)));
    b.hi(1) = std::min(b.hi(1), -std::log(g.hbm_efficiency));
    b.hi(2) = std::min(b.hi(2), -std::log(g.attention_efficiency));
  }
  for (int j = 0; j < kScales; ++j) b.hi(j) = std::max(b.hi(j), 0.0);
  return b;
}

Vec clamp(const Vec& x, const Bounds& b) { return x.cwiseMax(b.lo).cwiseMin(b.hi); }

struct Problem {
  const std::vector<const MeasuredRun*>& runs;
  double prior;
  // Residuals: log(pred/meas) per run, then sqrt(prior) * x.
  Eigen::VectorXd residuals(const Vec& x) const {
    Eigen::VectorXd r(static_cast<Eigen::Index>(runs.size()) + kScales);
    const RunScales s = scales_of(x);
    for (size_t i = 0; i < runs.size(); ++i) {
      r(static_cast<Eigen::Index>(i)) = std::log(predicted_step_time(*runs[i], s) / runs[i]->step_time_s);
    }
    for (int j = 0; j < kScales; ++j) r(static_cast<Eigen::Index>(runs.size()) + j) = std::sqrt(prior) * x(j);
    return r;
  }
};

Vec levenberg_marquardt(const Problem& pb, const Bounds& b, Vec x, int max_iterations) {
  x = clamp(x, b);
  Eigen::VectorXd r = pb.residuals(x);
  double cost = r.squaredNorm();
  double mu = 1e-3;
  constexpr double kStep = 0.01;       // forward-difference step in log scale (1%)
  constexpr double kMoved = 1e-3;      // converged: no scale moves by more than 0.1%
  constexpr double kGain = 1e-6;       // converged: the cost falls by less than this share
  constexpr int kTries = 4;            // damping increases per iteration
  for (int it = 0; it < max_iterations; ++it) {
    Eigen::MatrixXd J(r.size(), kScales);
    for (int j = 0; j < kScales; ++j) {
      Vec xp = x;
      // Step into the box.
      const double h = x(j) + kStep <= b.hi(j) ? kStep : -kStep;
      xp(j) += h;
      J.col(j) = (pb.residuals(xp) - r) / h;
    }
    const Mat A = J.transpose() * J;
    const Vec g = J.transpose() * r;
    bool improved = false;
    for (int tries = 0; tries < kTries && !improved; ++tries) {
      Mat damped = A;
      for (int j = 0; j < kScales; ++j) damped(j, j) += mu * std::max(A(j, j), 1e-9);
      const Vec xn = clamp(x + damped.ldlt().solve(-g), b);
      const double moved = (xn - x).cwiseAbs().maxCoeff();
      if (moved < kMoved) return x;  // the projected step is (nearly) zero: at a bound or converged
      const Eigen::VectorXd rn = pb.residuals(xn);
      const double cn = rn.squaredNorm();
      if (cn < cost) {
        const double gain = (cost - cn) / std::max(cost, 1e-300);
        x = xn;
        r = rn;
        cost = cn;
        mu = std::max(mu / 3, 1e-9);
        improved = true;
        if (gain < kGain) return x;
      } else {
        mu *= 4;
      }
    }
    if (!improved) break;
  }
  return x;
}

double rms_error(const std::vector<double>& pred, const std::vector<double>& meas) {
  double s = 0;
  int n = 0;
  for (size_t i = 0; i < pred.size(); ++i) {
    if (pred[i] <= 0) continue;
    const double e = std::log(pred[i] / meas[i]);
    s += e * e;
    ++n;
  }
  return n > 0 ? std::exp(std::sqrt(s / n)) - 1 : 0;
}

Vec fit(const std::vector<const MeasuredRun*>& runs, const Bounds& b, const RunFitOptions& o, const Vec& start) {
  Problem pb{runs, o.prior_weight};
  return levenberg_marquardt(pb, b, start, o.max_iterations);
}

std::vector<const MeasuredRun*> pointers(const std::vector<MeasuredRun>& runs, size_t skip) {
  std::vector<const MeasuredRun*> out;
  for (size_t i = 0; i < runs.size(); ++i) {
    if (i != skip) out.push_back(&runs[i]);
  }
  return out;
}

std::string percent(double x) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f%%", 100 * x);
  return buf;
}

}  // namespace

double predicted_step_time(const MeasuredRun& run, const RunScales& scales) {
  ClusterSpec c = run.cluster;
  apply_run_scales(scales, &c);
  const Layout L = resolve_plan(run.model, c, run.gpus, run.plan);
  if (!L.feasible) {
    throw_input_error(run.name, "", "the plan cannot run on " + c.name + ": " + L.reasons.front(),
                      "give runs that trainplan can simulate");
  }
  return simulate_step(run.model, c, L, SimulateOptions{}).step_time_s;
}

RunScales fit_run_scales(const std::vector<MeasuredRun>& runs, const RunFitOptions& options) {
  TRAINPLAN_CHECK(!runs.empty(), "fit_run_scales needs runs");
  return scales_of(fit(pointers(runs, runs.size()), bounds_of(runs), options, Vec::Zero()));
}

RunFit fit_runs(const std::vector<MeasuredRun>& runs, const RunFitOptions& options) {
  TRAINPLAN_CHECK(!runs.empty(), "fit_runs needs runs");
  for (const MeasuredRun& r : runs) TRAINPLAN_CHECK(r.step_time_s > 0, "measured step time must be > 0");
  const Bounds b = bounds_of(runs);
  const Vec all = fit(pointers(runs, runs.size()), b, options, Vec::Zero());
  RunFit f;
  f.present = true;
  f.scales = scales_of(all);
  std::vector<double> meas, pred, loo;
  for (size_t i = 0; i < runs.size(); ++i) {
    RunResidual r;
    r.name = runs[i].name;
    r.measured_s = runs[i].step_time_s;
    r.predicted_s = predicted_step_time(runs[i], f.scales);
    if (runs.size() >= 2) {
      // Leave run i out: fit on the others, from the full fit (a few
      // iterations move it to the others' optimum), and predict run i.
      RunFitOptions o = options;
      o.max_iterations = std::min(options.max_iterations, kLeaveOneOutIterations);
      const Vec without = fit(pointers(runs, i), b, o, all);
      r.leave_one_out_s = predicted_step_time(runs[i], scales_of(without));
    }
    meas.push_back(r.measured_s);
    pred.push_back(r.predicted_s);
    loo.push_back(r.leave_one_out_s);
    f.runs.push_back(r);
  }
  f.residual_rms = rms_error(pred, meas);
  f.leave_one_out_rms = rms_error(loo, meas);
  return f;
}

std::vector<std::string> run_fit_warnings(const RunFit& fit) {
  std::vector<std::string> out;
  constexpr double kPoor = 0.10;  // the 10% a layout ranking can tolerate between neighbours
  if (fit.residual_rms > kPoor) {
    out.push_back("the fitted model misses the runs by " + percent(fit.residual_rms) +
                  " rms (> 10%): the runs disagree with each other or depend on something the scales do not cover");
  }
  if (fit.leave_one_out_rms > kPoor) {
    out.push_back("leave-one-out error " + percent(fit.leave_one_out_rms) +
                  " rms (> 10%): predictions for layouts unlike the runs are uncertain; add runs that differ");
  }
  const RunScales& s = fit.scales;
  const std::array<std::pair<const char*, double>, 5> all = {{{"gemm_efficiency", s.gemm_efficiency},
                                                               {"hbm_efficiency", s.hbm_efficiency},
                                                               {"attention_efficiency", s.attention_efficiency},
                                                               {"intra_bandwidth", s.intra_bandwidth},
                                                               {"inter_bandwidth", s.inter_bandwidth}}};
  for (const auto& [name, v] : all) {
    if (v <= kRunScaleFloor * 1.001) {
      out.push_back(std::string(name) + " scale at its floor (x0.1 of the published figure)" +
                    ": the runs are slower than the model can explain");
    }
  }
  if (s.host_op_time >= kRunHostCeiling * 0.999) {
    out.push_back("host_op_time scale at its ceiling (x10 the published figure): the runs are slower than the model "
                  "can explain");
  }
  return out;
}

}  // namespace trainplan
