#include "simulator/faults/convergence.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <set>
#include <sstream>
#include <utility>
#include <vector>

#include <Eigen/Dense>

#include "simulator/core/error.h"
#include "simulator/core/spec_items.h"

namespace trainplan {

const char* const kConvergenceGrammar =
    "allowed: comma-separated sharpness=A (0 < A < 2: learning rate x top Hessian eigenvalue of the sync run, "
    "default 1), condition=K (1 <= K <= 1e9, default 1000), lr=same|scaled|staleness (async learning rate: as "
    "sync, / workers, / staleness; default scaled), e.g. sharpness=0.5,lr=staleness";

namespace {

constexpr double kPi = 3.14159265358979323846;
constexpr int kModes = 16;  // log-spaced modes of the noise floor

double number(const std::string& text, const std::string& flag, const std::string& item) {
  return spec_number(text, flag, item, kConvergenceGrammar);
}

double lr_scale(AsyncLr lr, int workers, int tau) {
  switch (lr) {
    case AsyncLr::kSame: return 1.0;
    case AsyncLr::kScaled: return 1.0 / workers;
    case AsyncLr::kStaleness: return 1.0 / std::max(1, tau);
  }
  return 1.0;
}

}  // namespace

const char* async_lr_name(AsyncLr lr) {
  switch (lr) {
    case AsyncLr::kSame: return "same";
    case AsyncLr::kScaled: return "scaled";
    case AsyncLr::kStaleness: return "staleness";
  }
  return "scaled";
}

std::string ConvergenceSpec::describe() const {
  std::ostringstream s;
  s << "sharpness=" << sharpness << ",condition=" << condition << ",lr=" << async_lr_name(lr);
  return s.str();
}

ConvergenceSpec parse_convergence_spec(const std::string& text, const std::string& flag) {
  ConvergenceSpec spec;
  spec.text = text;
  for (const SpecItem& si : spec_items(text, flag, kConvergenceGrammar)) {
    const std::string &item = si.item, &key = si.key, &value = si.value;
    if (key == "sharpness") {
      spec.sharpness = number(value, flag, item);
      if (!(spec.sharpness > 0 && spec.sharpness < 2)) {
        throw_input_error(flag, "", item + ": sharpness must be in (0, 2) (at 2 even sync gradient descent diverges)",
                          kConvergenceGrammar);
      }
    } else if (key == "condition") {
      spec.condition = number(value, flag, item);
      if (!(spec.condition >= 1 && spec.condition <= 1e9)) {
        throw_input_error(flag, "", item + ": condition must be in [1, 1e9]", kConvergenceGrammar);
      }
    } else if (key == "lr") {
      if (value == "same") {
        spec.lr = AsyncLr::kSame;
      } else if (value == "scaled") {
        spec.lr = AsyncLr::kScaled;
      } else if (value == "staleness") {
        spec.lr = AsyncLr::kStaleness;
      } else {
        throw_input_error(flag, "", item + ": unknown learning-rate rule \"" + value + "\"", kConvergenceGrammar);
      }
    } else {
      throw_input_error(flag, "", "unknown key \"" + key + "\"", kConvergenceGrammar);
    }
  }
  return spec;
}

double delayed_stability_limit(int tau) {
  return 2 * std::cos(kPi * tau / (2.0 * tau + 1.0));
}

double delayed_spectral_radius(double a, int tau) {
  TRAINPLAN_CHECK(a > 0 && tau >= 0 && tau <= kMaxStaleness, "delayed_spectral_radius: a > 0, 0 <= tau <= max");
  if (tau == 0) return std::fabs(1 - a);
  // The roots are computed once per (a, tau): the search asks for few.
  static std::mutex mu;
  static std::map<std::pair<double, int>, double> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto hit = cache.find({a, tau});
    if (hit != cache.end()) return hit->second;
  }
  // Companion matrix of the monic z^{n} - z^{n-1} + a, n = tau + 1.
  const int n = tau + 1;
  Eigen::MatrixXd c = Eigen::MatrixXd::Zero(n, n);
  c(0, n - 1) = -a;
  c(n - 1, n - 1) = 1;
  for (int i = 1; i < n; ++i) c(i, i - 1) = 1;
  Eigen::EigenSolver<Eigen::MatrixXd> solver(c, /*computeEigenvectors=*/false);
  double rho = 0;
  for (int i = 0; i < n; ++i) rho = std::max(rho, std::abs(solver.eigenvalues()[i]));
  std::lock_guard<std::mutex> lock(mu);
  cache[{a, tau}] = rho;
  return rho;
}

double delayed_noise_gain(double a, int tau) {
  TRAINPLAN_CHECK(a > 0 && tau >= 0, "delayed_noise_gain: a > 0, tau >= 0");
  // At the limit itself a root is on the unit circle: no stationary variance.
  if (a >= delayed_stability_limit(tau) * (1 - 1e-12)) return std::numeric_limits<double>::infinity();
  if (tau == 0) return 1 / (a * (2 - a));  // sum of (1 - a)^{2k}
  // x_1 = 1, x_{k+1} = x_k - a x_{k-tau} (x_j = 0 for j <= 0), in a ring
  // of the last tau + 1 values; summed until a whole window of tau + 1
  // values adds less than 1e-13 of the total.
  std::vector<double> ring(static_cast<size_t>(tau + 1), 0.0);
  const size_t n = ring.size();
  double x = 1, sum = 0, window = 0;
  size_t head = 0;
  constexpr int64_t kMaxTerms = 400000000;  // a root within ~1e-7 of the circle: treated as unstable
  for (int64_t k = 1;; ++k) {
    if (k > kMaxTerms) return std::numeric_limits<double>::infinity();
    sum += x * x;
    window += x * x;
    ring[head] = x;  // x_k
    head = (head + 1) % n;
    const double delayed = ring[head];  // the oldest of the last tau + 1: x_{k-tau} (0 for k <= tau)
    x = x - a * delayed;
    if (k % static_cast<int64_t>(n) == 0) {
      if (k > 4 * static_cast<int64_t>(n) && window < 1e-13 * sum) break;
      window = 0;
    }
  }
  return sum;
}

namespace {

// -ln of the slow mode's decay per update, a' = s a_min: the leading real
// root of z^tau (1 - z) = a' by bisection on [tau / (tau + 1), 1] where it
// exists (a' <= tau^tau / (tau + 1)^{tau + 1}), else the companion roots.
double slow_mode_rate(double a, int tau) {
  if (tau == 0) return -std::log1p(-a);
  const double z_min = tau / (tau + 1.0);
  const double f_min = std::exp(tau * std::log(z_min)) * (1 - z_min);
  if (a > f_min) return -std::log(delayed_spectral_radius(a, tau));
  double lo = z_min, hi = 1;  // f(lo) >= a >= f(hi) = 0: f decreases on [z_min, 1]
  for (int i = 0; i < 200 && hi - lo > 1e-16; ++i) {
    const double mid = 0.5 * (lo + hi);
    if (std::exp(tau * std::log(mid)) * (1 - mid) >= a) {
      lo = mid;
    } else {
      hi = mid;
    }
  }
  return -std::log(0.5 * (lo + hi));
}

double efficiency(const ConvergenceSpec& spec, int workers, int tau, double scale) {
  const double a_min = spec.sharpness / spec.condition;
  return workers * slow_mode_rate(scale * a_min, tau) / -std::log1p(-a_min);
}

}  // namespace

double async_efficiency_bound(const ConvergenceSpec& spec, int workers) {
  if (spec.lr == AsyncLr::kStaleness) {
    return std::max(efficiency(spec, workers, 0, 1.0), efficiency(spec, workers, 1, 1.0));
  }
  // Only the staleness it converges at counts: the limit falls with tau,
  // so those are tau <= tau_c; in that range the slow mode's root is real
  // for condition >= 5 (s a_min < pi / ((2 tau + 1) condition) <= 1 / (e (tau + 1)))
  // and the efficiency grows with tau, so its largest value is at tau_c.
  const double s = lr_scale(spec.lr, workers, 1);
  int tau_c = 0;
  while (tau_c < kMaxStaleness && s * spec.sharpness < delayed_stability_limit(tau_c + 1) * (1 - 1e-12)) ++tau_c;
  return std::max(efficiency(spec, workers, 0, s), efficiency(spec, workers, tau_c, s));
}

AsyncConvergence async_convergence(const ConvergenceSpec& spec, int workers, double staleness_mean) {
  TRAINPLAN_CHECK(workers >= 1 && staleness_mean >= 0, "async_convergence: workers >= 1, staleness >= 0");
  AsyncConvergence r;
  r.workers = workers;
  r.staleness = static_cast<int>(std::lround(staleness_mean));
  if (r.staleness > kMaxStaleness) {
    r.staleness = kMaxStaleness;
    r.reason = "staleness " + std::to_string(static_cast<long long>(std::lround(staleness_mean))) +
               " evaluated at the model's limit " + std::to_string(kMaxStaleness);
  }
  const int tau = r.staleness;
  r.lr_scale = lr_scale(spec.lr, workers, tau);
  const double limit = delayed_stability_limit(tau);
  r.max_lr_scale = limit / spec.sharpness;
  const double a_max = r.lr_scale * spec.sharpness;
  if (a_max >= limit * (1 - 1e-12)) {
    r.converges = false;
    r.floor_ratio = std::numeric_limits<double>::infinity();
    std::ostringstream s;
    s << "diverges: with staleness " << tau << " updates converge only below a = " << limit
      << " on the stiffest mode (Levin-May), and lr=" << async_lr_name(spec.lr) << " gives " << a_max;
    r.reason = s.str();
    return r;
  }
  r.converges = true;
  const double a_min = spec.sharpness / spec.condition;
  r.sample_efficiency = efficiency(spec, workers, tau, r.lr_scale);
  // Noise floor: mode i of curvature a_i contributes h_i alpha^2 Var(xi_i) G
  // with Var(xi_i) ~ h_i / batch, so ~ a_i^2 G(a_i) / B for sync and
  // (s a_i)^2 G(s a_i, tau) W / B for async (batch B / W per update).
  double sync_floor = 0, async_floor = 0;
  for (int i = 0; i < kModes; ++i) {
    const double a = a_min * std::pow(spec.sharpness / a_min, kModes == 1 ? 1.0 : i / (kModes - 1.0));
    sync_floor += a * a * delayed_noise_gain(a, 0);
    const double sa = r.lr_scale * a;
    async_floor += sa * sa * workers * delayed_noise_gain(sa, tau);
  }
  r.floor_ratio = async_floor / sync_floor;
  return r;
}

}  // namespace trainplan
