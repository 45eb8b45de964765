// Convergence under stale gradients: what asynchronous data parallelism's
// staleness costs in progress per sample and in final loss, so that async
// can be ranked against sync by time to a target loss, not by step time.
//
// Declared model (the classic local analysis of SGD near a minimum).  The
// loss is a quadratic with Hessian eigenvalues h_i; along each eigenvector
// an update with learning rate alpha and staleness tau is
//   x_{k+1} = x_k - alpha (h_i x_{k-tau} + xi_k),
// with a_i = alpha h_i.  Its deterministic part decays as rho(a, tau)^k,
// rho the largest root modulus of z^{tau+1} - z^tau + a; it is stable iff
//   0 < a < 2 cos(pi tau / (2 tau + 1))
// (Levin & May 1976, Theor. Popul. Biol. 9:178-187; tau = 0: a < 2, the
// classic GD limit), so the largest learning rate that converges falls
// roughly as pi / (2 (2 tau + 1)) with staleness.  The gradient noise xi
// has variance proportional to h_i / batch (noise covariance ~ Hessian:
// Jastrzebski et al. 2017, "Three factors influencing minima in SGD") and
// each mode settles at a stationary variance alpha^2 Var(xi) G(a, tau), with
// G = sum of the squared impulse response (exact for white noise).
//
// Sync DP: one update of the global batch B per step, tau = 0, the tuned
// learning rate with a_max = `sharpness` on the stiffest mode (default 1:
// alpha = 1 / lambda_max, the optimal constant rate of a quadratic, LeCun,
// Bottou, Orr & Mueller 1998, "Efficient BackProp", sec. 5.1).  Async with
// W workers: W updates of B / W per step, staleness tau (the simulated mean
// updates between a worker's pull and its push; W - 1 for equal workers),
// learning rate scaled by s: `same` (s = 1, what a sync recipe reused as is
// does), `scaled` (s = 1 / W: the linear scaling rule for a W times smaller
// batch, Goyal et al. 2017) or `staleness` (s = 1 / max(1, tau): Zhang,
// Gupta, Lian & Liu, IJCAI 2016, "Staleness-aware Async-SGD").
//
// Outputs, async against sync:
// - converges: every mode stable (s a_max below the Levin-May limit);
// - sample_efficiency: progress per sample on the slowest mode (a_min =
//   a_max / condition), W ln rho(s a_min, tau) / ln(1 - a_min): time to a
//   target loss, far above the noise floor, is the step time / this;
// - floor_ratio: the stationary loss (the noise floor a fixed-learning-rate
//   run ends at) summed over kModes log-spaced modes from a_min to a_max.
#ifndef TRAINPLAN_SIM_FAULTS_CONVERGENCE_H_
#define TRAINPLAN_SIM_FAULTS_CONVERGENCE_H_

#include <string>

namespace trainplan {

enum class AsyncLr { kSame, kScaled, kStaleness };
const char* async_lr_name(AsyncLr lr);  // "same", "scaled", "staleness"

struct ConvergenceSpec {
  double sharpness = 1.0;   // a_max = alpha lambda_max of the sync run, in (0, 2)
  double condition = 1000;  // lambda_max / lambda of the slowest mode that sets time to target, >= 1
  AsyncLr lr = AsyncLr::kScaled;
  std::string text;         // as given ("" for the defaults)
  std::string describe() const;  // "sharpness=1,condition=1000,lr=scaled"
};

extern const char* const kConvergenceGrammar;

// Parses "KEY=VALUE[,KEY=VALUE...]" with keys sharpness (0 < x < 2),
// condition (1 <= x <= 1e9), lr (same|scaled|staleness); unset keys keep
// their defaults.  Throws InputError("<flag>: ...; allowed: ...").
ConvergenceSpec parse_convergence_spec(const std::string& text, const std::string& flag);

// The largest staleness the model evaluates (its roots come from a
// (tau + 1)-square companion matrix).
constexpr int kMaxStaleness = 1024;

// rho(a, tau): the largest modulus of the roots of z^{tau+1} - z^tau + a.
// REQUIRES: a > 0, 0 <= tau <= kMaxStaleness.
double delayed_spectral_radius(double a, int tau);
// 2 cos(pi tau / (2 tau + 1)): rho < 1 iff 0 < a < this.
double delayed_stability_limit(int tau);
// G(a, tau) = sum over k >= 1 of x_k^2 for x_{k+1} = x_k - a x_{k-tau} + u_k
// with one unit impulse u_0: the stationary variance per unit noise
// variance.  +inf if a >= the stability limit.  REQUIRES: a > 0.
double delayed_noise_gain(double a, int tau);

struct AsyncConvergence {
  int workers = 0;
  int staleness = 0;          // tau used (the rounded mean)
  double lr_scale = 1;        // s
  bool converges = false;
  double max_lr_scale = 0;    // the largest s that still converges at this tau
  double sample_efficiency = 0;  // per-sample progress, async / sync (0 if it diverges)
  double floor_ratio = 0;        // async's noise-floor loss / sync's (+inf if it diverges)
  std::string reason;            // why it diverges, empty if it converges
};

// REQUIRES: workers >= 1, staleness_mean >= 0.  A staleness above
// kMaxStaleness is evaluated at kMaxStaleness (reason says so).
AsyncConvergence async_convergence(const ConvergenceSpec& spec, int workers, double staleness_mean);

// The largest sample_efficiency async_convergence can give W workers at a
// staleness it converges at (the search's bound: time to target >= step
// lower bound / this).  The slow mode's leading root is real (z^tau (1 - z)
// = s a_min) and moves away from 1 as tau grows, so for a constant scale
// (same, scaled) the bound is at the largest staleness that converges;
// with s = 1 / tau it is at tau <= 1 (s = 1).
double async_efficiency_bound(const ConvergenceSpec& spec, int workers);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_FAULTS_CONVERGENCE_H_
