// Fits that turn measurements into a calibration: alpha-beta per collective
// and scope (robust least squares on time vs bytes), the copy bandwidth and
// per-call overhead, and the GEMM efficiency table.  Only sample structs in,
// so the fits are testable without a device.
#ifndef TRAINPLAN_CALIBRATE_FIT_H_
#define TRAINPLAN_CALIBRATE_FIT_H_

#include <string>
#include <vector>

#include "simulator/spec/calibration.h"

namespace trainplan {

struct LineFit {
  double intercept = 0;  // seconds
  double slope = 0;      // seconds per unit of x
  double residual_rms = 0;  // relative, sqrt(mean(((fit - t) / t)^2)) over inliers
  int used = 0;          // samples with non-zero final weight
};

// Fits t = a + b x minimising relative error (weights 1/t^2), with Huber
// iteratively reweighted least squares against outliers (k = 1.345 times the
// MAD scale).  a >= 0 and b >= 0 are enforced by refitting without the
// offending term.  REQUIRES: at least 2 samples with t > 0.
LineFit robust_line_fit(const std::vector<double>& x, const std::vector<double>& t);

// Fits every (collective, scope, ranks) group of samples: time = latency +
// busbw_factor(c, n) * size / bus_bandwidth (nccl-tests bus bandwidth).
std::vector<CollectiveFitResult> fit_collectives(const std::vector<CollectiveSample>& samples);

// Fills peak_flop_per_s, dtype and gemm_table from the GEMM samples, and
// copy_bytes_per_s / kernel_overhead_s from the copy samples (traffic = 2x
// bytes copied).
void fit_compute(Calibration* c);

// A fit whose relative residual exceeds this is reported as poor: the
// measurements are not "latency + size / bandwidth" (noise on a shared
// machine, a protocol switch), and predictions built on it can be off by as
// much.  0.2: the 20% within which validate must predict each category.
constexpr double kPoorFitResidual = 0.2;

// One line per collective fit with residual_rms > kPoorFitResidual, e.g.
// "all_reduce intra 2 ranks: residual 45.6% rms over 21 sizes (> 20%)".
std::vector<std::string> poor_fits(const Calibration& c);

}  // namespace trainplan

#endif  // TRAINPLAN_CALIBRATE_FIT_H_
