#include "calibrate/fit.h"

#include <cstdio>

#include <algorithm>
#include <cmath>
#include <map>
#include <tuple>

#include <Eigen/Dense>

#include "simulator/core/error.h"
#include "simulator/network/collective_model.h"

namespace trainplan {

namespace {

// Weighted least squares for t = a + b x with weights w (columns enabled by
// use_a / use_b).
void solve(const std::vector<double>& x, const std::vector<double>& t, const std::vector<double>& w, bool use_a,
           bool use_b, double* a, double* b) {
  const int cols = (use_a ? 1 : 0) + (use_b ? 1 : 0);
  Eigen::MatrixXd A(static_cast<Eigen::Index>(x.size()), cols);
  Eigen::VectorXd y(static_cast<Eigen::Index>(x.size()));
  for (size_t i = 0; i < x.size(); ++i) {
    const double s = std::sqrt(w[i]);
    int c = 0;
    if (use_a) A(static_cast<Eigen::Index>(i), c++) = s;
    if (use_b) A(static_cast<Eigen::Index>(i), c++) = s * x[i];
    y(static_cast<Eigen::Index>(i)) = s * t[i];
  }
  Eigen::VectorXd sol = A.colPivHouseholderQr().solve(y);
  int c = 0;
  *a = use_a ? sol(c++) : 0.0;
  *b = use_b ? sol(c++) : 0.0;
}

}  // namespace

LineFit robust_line_fit(const std::vector<double>& x, const std::vector<double>& t) {
  TRAINPLAN_CHECK(x.size() == t.size() && x.size() >= 2, "a line fit needs at least 2 samples");
  const size_t n = x.size();
  std::vector<double> huber(n, 1.0);
  double a = 0, b = 0;
  for (int iter = 0; iter < 20; ++iter) {
    std::vector<double> w(n);
    for (size_t i = 0; i < n; ++i) w[i] = huber[i] / (t[i] * t[i]);  // relative error
    bool use_a = true, use_b = true;
    solve(x, t, w, use_a, use_b, &a, &b);
    if (a < 0) {
      use_a = false;
      solve(x, t, w, use_a, use_b, &a, &b);
    }
    if (b < 0) {
      use_b = false;
      use_a = true;
      solve(x, t, w, use_a, use_b, &a, &b);
    }
    // Relative residuals; scale = 1.4826 * MAD.
    std::vector<double> r(n), absr(n);
    for (size_t i = 0; i < n; ++i) {
      r[i] = (a + b * x[i] - t[i]) / t[i];
      absr[i] = std::fabs(r[i]);
    }
    std::vector<double> sorted = absr;
    std::nth_element(sorted.begin(), sorted.begin() + static_cast<std::ptrdiff_t>(n / 2), sorted.end());
    const double scale = std::max(1e-6, 1.4826 * sorted[n / 2]);
    const double k = 1.345 * scale;
    std::vector<double> next(n);
    for (size_t i = 0; i < n; ++i) next[i] = absr[i] <= k ? 1.0 : k / absr[i];
    bool same = true;
    for (size_t i = 0; i < n; ++i) same = same && std::fabs(next[i] - huber[i]) < 1e-9;
    huber = next;
    if (same) break;
  }
  LineFit f;
  f.intercept = a;
  f.slope = b;
  double sum = 0;
  for (size_t i = 0; i < n; ++i) {
    if (huber[i] < 0.5) continue;
    const double r = (a + b * x[i] - t[i]) / t[i];
    sum += r * r;
    ++f.used;
  }
  f.residual_rms = f.used > 0 ? std::sqrt(sum / f.used) : 0;
  return f;
}

std::vector<CollectiveFitResult> fit_collectives(const std::vector<CollectiveSample>& samples) {
  std::map<std::tuple<int, bool, int>, std::pair<std::vector<double>, std::vector<double>>> groups;
  for (const CollectiveSample& s : samples) {
    if (s.time_s <= 0 || s.wrong != 0) continue;
    auto& g = groups[std::make_tuple(static_cast<int>(s.collective), s.inter_node, s.ranks)];
    g.first.push_back(bus_bandwidth_factor(s.collective, s.ranks) * static_cast<double>(s.bytes));
    g.second.push_back(s.time_s);
  }
  std::vector<CollectiveFitResult> out;
  for (const auto& [key, xt] : groups) {
    if (xt.first.size() < 2) continue;
    const LineFit f = robust_line_fit(xt.first, xt.second);
    CollectiveFitResult r;
    r.collective = static_cast<Collective>(std::get<0>(key));
    r.inter_node = std::get<1>(key);
    r.ranks = std::get<2>(key);
    r.latency_s = f.intercept;
    // A zero slope (all samples latency-bound) means "no bandwidth limit
    // seen": report the fastest observed rate instead of infinity.
    double best_rate = 0;
    for (size_t i = 0; i < xt.first.size(); ++i) best_rate = std::max(best_rate, xt.first[i] / xt.second[i]);
    r.bus_bytes_per_s = f.slope > 0 ? 1.0 / f.slope : std::max(best_rate, 1.0);
    r.residual_rms = f.residual_rms;
    r.samples = static_cast<int>(xt.first.size());
    out.push_back(r);
  }
  return out;
}

void fit_compute(Calibration* c) {
  double best = 0;
  std::string dtype;
  for (const GemmSample& g : c->gemm_samples) {
    if (g.time_s > 0 && g.flop_per_s() > best) {
      best = g.flop_per_s();
      dtype = g.dtype;
    }
  }
  c->peak_flop_per_s = best;
  c->dtype = dtype;
  c->gemm_table.clear();
  // Keep the samples of the peak's dtype; average repeated shapes.
  std::map<std::tuple<int64_t, int64_t, int64_t>, std::pair<double, int>> acc;
  for (const GemmSample& g : c->gemm_samples) {
    if (g.dtype != dtype || g.time_s <= 0) continue;
    auto& a = acc[std::make_tuple(g.m, g.n, g.k)];
    a.first += g.flop_per_s() / best;
    a.second += 1;
  }
  for (const auto& [shape, a] : acc) {
    c->gemm_table.push_back(GemmPoint{std::get<0>(shape), std::get<1>(shape), std::get<2>(shape), a.first / a.second});
  }
  std::vector<double> x, t;
  for (const CopySample& s : c->copy_samples) {
    if (s.time_s <= 0) continue;
    x.push_back(2.0 * static_cast<double>(s.bytes));
    t.push_back(s.time_s);
  }
  if (x.size() >= 2) {
    const LineFit f = robust_line_fit(x, t);
    c->kernel_overhead_s = f.intercept;
    c->copy_bytes_per_s = f.slope > 0 ? 1.0 / f.slope : 0;
  }
}

std::vector<std::string> poor_fits(const Calibration& c) {
  std::vector<std::string> out;
  for (const CollectiveFitResult& f : c.collectives) {
    if (f.residual_rms <= kPoorFitResidual) continue;
    char buf[160];
    std::snprintf(buf, sizeof buf, "%s %s %d ranks: residual %.1f%% rms over %d sizes (> %.0f%%)",
                  collective_file_name(f.collective), f.inter_node ? "inter" : "intra", f.ranks, 100 * f.residual_rms,
                  f.samples, 100 * kPoorFitResidual);
    out.push_back(buf);
  }
  return out;
}

}  // namespace trainplan
