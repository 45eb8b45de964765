#include "simulator/faults/slow_nodes.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "simulator/core/error.h"

namespace trainplan {

namespace {

// ln k!: exact sum below 32, Stirling's series above (error < 1e-16 relative
// there).  std::lgamma writes the global signgam (not thread-safe, and the
// search evaluates plans on several threads).
double log_factorial(int64_t k) {
  if (k < 32) {
    double s = 0;
    for (int64_t i = 2; i <= k; ++i) s += std::log(static_cast<double>(i));
    return s;
  }
  const double x = static_cast<double>(k);
  constexpr double kHalfLog2Pi = 0.91893853320467274178;  // ln(2 pi) / 2
  return x * std::log(x) - x + 0.5 * std::log(x) + kHalfLog2Pi + 1 / (12 * x) - 1 / (360 * x * x * x) +
         1 / (1260 * x * x * x * x * x);
}

// Poisson(mean) probabilities over [lo, lo + p.size()): mean +- 12 standard
// deviations (+ 20), outside which the mass is below 1e-30.
struct PoissonPmf {
  int64_t lo = 0;
  std::vector<double> p;
};

PoissonPmf poisson_pmf(double mean) {
  PoissonPmf r;
  if (mean <= 0) {
    r.p = {1.0};
    return r;
  }
  const double sd = std::sqrt(mean);
  r.lo = std::max<int64_t>(0, static_cast<int64_t>(std::floor(mean - 12 * sd - 10)));
  const int64_t hi = static_cast<int64_t>(std::ceil(mean + 12 * sd + 20));
  const int64_t mode = static_cast<int64_t>(std::floor(mean));
  r.p.assign(static_cast<size_t>(hi - r.lo + 1), 0.0);
  // From the mode outwards: p(k+1) = p(k) mean / (k+1), p(k-1) = p(k) k / mean.
  const double at_mode = std::exp(static_cast<double>(mode) * std::log(mean) - mean - log_factorial(mode));
  r.p[static_cast<size_t>(mode - r.lo)] = at_mode;
  for (int64_t k = mode + 1; k <= hi; ++k) {
    r.p[static_cast<size_t>(k - r.lo)] = r.p[static_cast<size_t>(k - 1 - r.lo)] * mean / static_cast<double>(k);
  }
  for (int64_t k = mode - 1; k >= r.lo; --k) {
    r.p[static_cast<size_t>(k - r.lo)] = r.p[static_cast<size_t>(k + 1 - r.lo)] * static_cast<double>(k + 1) / mean;
  }
  return r;
}

// P(Poisson(mean) > k).
double poisson_tail_above(double mean, int64_t k) {
  const PoissonPmf pmf = poisson_pmf(mean);
  double tail = 0;
  for (size_t i = 0; i < pmf.p.size(); ++i) {
    if (pmf.lo + static_cast<int64_t>(i) > k) tail += pmf.p[i];
  }
  return tail;
}

// The number of detected slow nodes in the M/D/S spare queue (waiting or
// with their spare's slot in repair), stepped by R with Crommelin's
// recursion N' = max(N - S, 0) + Poisson(nu R).  States above a cap from
// which N cannot come back to <= S before the horizon (it falls by at most S
// per step) are lumped: their mass and first moment are kept exactly
// (above S they evolve as N - S + A: the mean moves by nu R - S per step).
class SpareQueue {
 public:
  SpareQueue(int spares, double arrivals_per_repair) : spares_(spares), rho_(arrivals_per_repair),
                                                       arrivals_(poisson_pmf(arrivals_per_repair)) {}

  // N ~ Poisson(mean): a start u < R after the queue opened, nothing served yet.
  void start(double mean, int64_t cap) {
    const PoissonPmf init = poisson_pmf(mean);
    p_.assign(static_cast<size_t>(std::min<int64_t>(cap, init.lo + static_cast<int64_t>(init.p.size()) - 1) + 1), 0.0);
    double kept = 0, kept_moment = 0;
    for (size_t i = 0; i < init.p.size(); ++i) {
      const int64_t n = init.lo + static_cast<int64_t>(i);
      if (n > cap) break;
      p_[static_cast<size_t>(n)] = init.p[i];
      kept += init.p[i];
      kept_moment += static_cast<double>(n) * init.p[i];
    }
    lumped_mass_ = std::max(0.0, 1 - kept);
    lumped_moment_ = std::max(0.0, mean - kept_moment);
    converged_ = false;
  }

  // One repair time later.  Returns whether nothing changed (to 1e-15).
  void step(int64_t cap) {
    const size_t s = static_cast<size_t>(spares_);
    std::vector<double> shifted(p_.size() > s ? p_.size() - s : 1, 0.0);
    double total = 0, moment = 0;
    for (size_t n = 0; n < p_.size(); ++n) {
      const size_t m = n > s ? n - s : 0;
      shifted[m] += p_[n];
      total += p_[n];
    }
    for (size_t m = 0; m < shifted.size(); ++m) moment += static_cast<double>(m) * shifted[m];
    moment += rho_ * total;
    const int64_t top = std::min<int64_t>(cap, static_cast<int64_t>(shifted.size()) - 1 + arrivals_.lo +
                                                   static_cast<int64_t>(arrivals_.p.size()) - 1);
    std::vector<double> next(static_cast<size_t>(std::max<int64_t>(top, 0) + 1), 0.0);
    for (size_t m = 0; m < shifted.size(); ++m) {
      const double w = shifted[m];
      if (w == 0) continue;
      const int64_t base = static_cast<int64_t>(m) + arrivals_.lo;
      for (size_t i = 0; i < arrivals_.p.size(); ++i) {
        const int64_t n = base + static_cast<int64_t>(i);
        if (n > top) break;
        next[static_cast<size_t>(n)] += w * arrivals_.p[i];
      }
    }
    double kept = 0, kept_moment = 0;
    for (size_t n = 0; n < next.size(); ++n) {
      kept += next[n];
      kept_moment += static_cast<double>(n) * next[n];
    }
    while (next.size() > 1 && next.back() < 1e-300) next.pop_back();
    const double escaped = std::max(0.0, total - kept);
    lumped_moment_ += lumped_mass_ * (rho_ - spares_) + std::max(0.0, moment - kept_moment);
    lumped_mass_ += escaped;
    double change = escaped;
    for (size_t n = 0; n < std::max(next.size(), p_.size()); ++n) {
      change += std::fabs((n < next.size() ? next[n] : 0.0) - (n < p_.size() ? p_[n] : 0.0));
    }
    converged_ = change < 1e-15;
    p_ = std::move(next);
  }

  // Steps more without changing the distribution (after converged()).
  void coast(double steps) { lumped_moment_ += steps * lumped_mass_ * (rho_ - spares_); }

  bool converged() const { return converged_; }

  double p_at_most_spares() const {
    double sum = 0;
    for (size_t n = 0; n < p_.size() && n <= static_cast<size_t>(spares_); ++n) sum += p_[n];
    return sum;
  }

  // E[(N - S)^+]: detected slow nodes still in the job.
  double waiting_mean() const {
    double sum = lumped_moment_ - spares_ * lumped_mass_;
    for (size_t n = static_cast<size_t>(spares_) + 1; n < p_.size(); ++n) sum += static_cast<double>(n - spares_) * p_[n];
    return std::max(0.0, sum);
  }

 private:
  int spares_;
  double rho_;
  PoissonPmf arrivals_;
  std::vector<double> p_;
  double lumped_mass_ = 0, lumped_moment_ = 0;
  bool converged_ = false;
};

// Gauss-Legendre, 8 points on [-1, 1] (Abramowitz & Stegun, Table 25.4).
constexpr double kGaussNodes[4] = {0.1834346424956498, 0.5255324099163290, 0.7966664774136267, 0.9602898564975363};
constexpr double kGaussWeights[4] = {0.3626837833783620, 0.3137066458778873, 0.2223810344533745, 0.1012285362903763};

template <typename F>
void gauss_points(double a, double b, int panels, F&& f) {
  const double width = (b - a) / panels;
  for (int i = 0; i < panels; ++i) {
    const double mid = a + (i + 0.5) * width, half = 0.5 * width;
    for (int g = 0; g < 4; ++g) {
      f(mid - half * kGaussNodes[g], half * kGaussWeights[g]);
      f(mid + half * kGaussNodes[g], half * kGaussWeights[g]);
    }
  }
}

// P(Poisson(mean) <= k), summing the k + 1 terms (k <= 1000).
double poisson_cdf(double mean, int64_t k) {
  if (mean <= 0) return 1;
  double sum = 0;
  const double log_mean = std::log(mean);
  for (int64_t i = 0; i <= k; ++i) sum += std::exp(static_cast<double>(i) * log_mean - mean - log_factorial(i));
  return std::min(1.0, sum);
}

// More than S + 12 standard deviations of arrivals per repair time: every
// spare is busy from its first drain on (P(A <= S) < 1e-30 per R).
bool overloaded(const SlowNodeRun& s) {
  const double rho = s.rate_per_s * s.repair_s;
  return rho > s.spares + 12 * std::sqrt(rho) + 20;
}

// The queue's work bound: about 0.1 s of one core per spare_pool_stats.
constexpr double kQueueWork = 1e8;

// Operations of one step: support (at most S (J + 1), about rho + S + 12
// sqrt(rho)) times the arrivals window (24 sqrt(rho) + 31).
double queue_step_work(const SlowNodeRun& s, double steps) {
  const double rho = s.rate_per_s * s.repair_s;
  const double support = std::min(s.spares * (steps + 1), rho + s.spares + 12 * std::sqrt(rho) + 30);
  return std::max(1.0, support) * (24 * std::sqrt(rho) + 31);
}

// True when the queue never forms within u_s: N > S needs more than S
// arrivals within one repair time, fewer than 1e-15 likely over u_s / R windows.
bool queue_never_forms(const SlowNodeRun& s, double u_s) {
  const double rho = s.rate_per_s * s.repair_s;
  return poisson_tail_above(rho, s.spares) * (u_s / s.repair_s + 1) < 1e-15;
}

}  // namespace

double slow_probability(const SlowNodeRun& s, double t_s) {
  TRAINPLAN_CHECK(s.rate_per_s > 0 && t_s >= 0, "bad slow-node query");
  const double nu = s.rate_per_s;
  if (s.spares == 0) return -std::expm1(-nu * t_s);
  const double u = t_s - s.detect_s;
  if (u <= 0) return -std::expm1(-nu * t_s);
  double q = 1;
  if (overloaded(s)) {
    q = u < s.repair_s ? poisson_cdf(nu * u, s.spares) : 0;
  } else if (!queue_never_forms(s, u)) {
    const double j_count = std::floor(u / s.repair_s);
    const int64_t j = static_cast<int64_t>(std::min(j_count, 1e15));
    const int64_t max_steps = std::max<int64_t>(10, static_cast<int64_t>(kQueueWork / queue_step_work(s, j_count)));
    SpareQueue queue(s.spares, nu * s.repair_s);
    queue.start(nu * std::fmod(u, s.repair_s), s.spares * (j + 1));
    for (int64_t i = 1; i <= j && i <= max_steps; ++i) {
      queue.step(s.spares * (j - i + 1));
      if (queue.converged()) break;
    }
    q = queue.p_at_most_spares();
  }
  return 1 - std::exp(-nu * s.detect_s) * q;
}

SparePoolStats spare_pool_stats(const SlowNodeRun& s, double horizon_s) {
  TRAINPLAN_CHECK(s.rate_per_s > 0 && horizon_s >= 0, "bad spare pool query");
  SparePoolStats st;
  const double nu = s.rate_per_s, h = horizon_s;
  st.slow_events = nu * h;
  if (s.spares == 0) {
    // One slow node and the job is slow to the end: P(fast at t) = e^{-nu t}.
    st.slow_s = h + std::expm1(-nu * h) / nu;
    return st;
  }
  // Fast: nobody in detection (e^{-nu min(t, d)}) and nobody waiting.
  double fast = -std::expm1(-nu * std::min(h, s.detect_s)) / nu;
  const double u_end = h - s.detect_s;
  if (u_end > 0) {
    double fast_queue = u_end, waiting = 0;  // int_0^U P(N(u) <= S) du, E[(N(U) - S)^+]
    if (overloaded(s)) {
      // Every spare is busy from its first drain on: the queue is fast only
      // before it first holds more than S (u < R: N(u) ~ Poisson(nu u)), and
      // spare i (handed out at the i-th arrival, i / nu on average) is
      // handed out again every R.
      fast_queue = 0;
      const int panels = static_cast<int>(std::clamp(std::ceil(nu * s.repair_s / std::sqrt(s.spares + 1.0)), 1.0, 64.0));
      gauss_points(0, std::min(u_end, s.repair_s), panels,
                   [&](double u, double w) { fast_queue += w * poisson_cdf(nu * u, s.spares); });
      double handed = 0;
      for (int i = 1; i <= s.spares; ++i) {
        const double first = i / nu;
        if (first <= u_end) handed += 1 + std::floor((u_end - first) / s.repair_s);
      }
      waiting = std::max(0.0, nu * u_end - handed);
    } else if (!queue_never_forms(s, u_end)) {
      const double rho = nu * s.repair_s;
      const double j_count = std::floor(u_end / s.repair_s);  // whole repair times in [0, U]
      const int64_t j_full = static_cast<int64_t>(std::min(j_count, 1e15));
      const double rem = std::fmod(u_end, s.repair_s);
      // Work: (support x arrivals window) per step, 16 P + 1 chains; at most
      // kQueueWork, the rest of a chain at its last value when it has not
      // converged by then.
      const double per_step = queue_step_work(s, j_count);
      int panels = static_cast<int>(std::clamp(std::ceil(rho / std::sqrt(s.spares + 1.0)), 1.0, 64.0));
      while (panels > 1 && 16.0 * panels * std::min(j_count + 1, 1e4) * per_step > kQueueWork) panels /= 2;
      const int64_t max_steps = std::max<int64_t>(10, static_cast<int64_t>(kQueueWork / ((16.0 * panels + 1) * per_step)));
      SpareQueue queue(s.spares, rho);
      fast_queue = 0;
      // [0, J R): offsets r in [0, R), steps j = 0 .. J - 1.
      if (j_full > 0) {
        gauss_points(0, s.repair_s, panels, [&](double r, double w) {
          queue.start(nu * r, s.spares * j_full);
          double sum = queue.p_at_most_spares();
          int64_t j = 1;
          for (; j < j_full && j <= max_steps; ++j) {
            queue.step(s.spares * (j_full - j));
            if (queue.converged()) break;
            sum += queue.p_at_most_spares();
          }
          if (j < j_full || j_count > static_cast<double>(j_full)) sum += queue.p_at_most_spares() * (j_count - static_cast<double>(j));
          fast_queue += w * sum;
        });
      }
      // [J R, U): offsets in [0, rem), J steps.
      auto at_step_j = [&](double r) {
        queue.start(nu * r, s.spares * (j_full + 1));
        for (int64_t j = 1; j <= j_full; ++j) {
          if (j > max_steps) {
            queue.coast(j_count - static_cast<double>(j) + 1);
            break;
          }
          queue.step(s.spares * (j_full - j + 1));
          if (queue.converged()) {
            queue.coast(j_count - static_cast<double>(j));
            break;
          }
        }
      };
      if (rem > 0) {
        gauss_points(0, rem, panels, [&](double r, double w) {
          at_step_j(r);
          fast_queue += w * queue.p_at_most_spares();
        });
      }
      at_step_j(rem);
      waiting = queue.waiting_mean();
    }
    fast += std::exp(-nu * s.detect_s) * fast_queue;
    st.handed_out = std::max(0.0, nu * u_end - waiting);
  }
  st.slow_s = std::max(0.0, h - fast);
  return st;
}

SlowRunResult expected_slow_run(const RunModel& m, int64_t k) {
  const SlowNodeRun& sl = m.slow;
  TRAINPLAN_CHECK(sl.rate_per_s > 0 && sl.factor >= 1 && k >= 1, "bad slow-node run");
  RunModel base = m;
  base.slow = SlowNodeRun{};
  const double nt = static_cast<double>(std::max<int64_t>(1, m.steps)) * m.step_s;
  SlowRunResult r;
  auto with_slow_part = [nt](WallBreakdown b) {
    b.slow = b.useful - nt;
    b.useful = nt;
    return b;
  };
  const double x = expected_run_s(base, k);
  if (!std::isfinite(x)) {
    r.expected_s = x;
    r.breakdown = expected_breakdown(base, k);
    return r;
  }
  if (sl.spares == 0) {
    RunModel slow = base;
    slow.step_s = m.step_s * sl.factor;
    const double y = expected_run_s(slow, k);
    const double nu = sl.rate_per_s;
    // E[(X - tau)^+] for tau ~ Exp(nu): the wall time after the onset, at the fast rate.
    const double excess = x + std::expm1(-nu * x) / nu;
    const double pi = std::clamp(excess / x, 0.0, 1.0);  // share of the progress made slow
    r.expected_s = (1 - pi) * x + pi * y;
    const WallBreakdown fast_b = expected_breakdown(base, k), slow_b = with_slow_part(expected_breakdown(slow, k));
    WallBreakdown& b = r.breakdown;
    b.useful = nt;
    b.checkpoint = (1 - pi) * fast_b.checkpoint + pi * slow_b.checkpoint;
    b.lost = (1 - pi) * fast_b.lost + pi * slow_b.lost;
    b.downtime = (1 - pi) * fast_b.downtime + pi * slow_b.downtime;
    b.load = (1 - pi) * fast_b.load + pi * slow_b.load;
    b.slow = pi * slow_b.slow;
    r.failures = (1 - pi) * expected_failures(base, k) + pi * expected_failures(slow, k);
    r.slow_wall_s = pi * y;
    r.slow_events = nu * r.expected_s;
    return r;
  }
  // H = f(H): f is increasing (the pool's slow share and drains grow with
  // the horizon), f(X) >= X, so the iterates rise to the least fixed point;
  // Steffensen's acceleration (Aitken's delta-squared on two plain steps)
  // makes that a few evaluations where the stretch is large.
  RunModel eff = base;
  WallBreakdown b;
  SparePoolStats st;
  double charged = 0;
  auto f = [&](double h) {
    st = spare_pool_stats(sl, h);
    const double q = std::clamp(st.slow_s / h, 0.0, 1.0);
    eff.step_s = m.step_s / (1 - q * (1 - 1 / sl.factor));
    const double e = expected_run_s(eff, k);
    b = expected_breakdown(eff, k);
    if (!std::isfinite(e)) return e;
    const double down = std::min(1.0, b.downtime / h);
    charged = st.handed_out * (1 - down) / (1 + st.handed_out * sl.drain_s / h);
    return e + sl.drain_s * charged;
  };
  // g(H) = f(H) - H >= 0 below the fixed point, < 0 above it.  Rise with
  // plain and accelerated steps until some H has g < 0, then close the
  // bracket by false position (Illinois).
  auto close = [](double a, double c) { return std::fabs(a - c) <= 1e-10 * std::fabs(c); };
  double lo = x, glo = f(x) - x, hi = 0, ghi = 0, h = x;
  bool bracketed = false, done = !std::isfinite(glo) || glo <= 1e-10 * x;
  if (!std::isfinite(glo)) h = glo;
  for (int it = 0; it < 40 && !done && !bracketed; ++it) {
    const double h1 = lo + glo;  // f(lo) >= lo, and f(h1) >= f(lo) = h1: still below
    const double h2 = f(h1);
    if (!std::isfinite(h2) || close(h2, h1)) {
      h = h2;
      done = true;
      break;
    }
    const double denom = h2 - 2 * h1 + lo;
    const double accel = denom < 0 ? lo - (h1 - lo) * (h1 - lo) / denom : h2;
    lo = h1;
    glo = h2 - h1;
    if (accel > h2 && std::isfinite(accel)) {
      const double ga = f(accel) - accel;
      if (!std::isfinite(ga)) {
        h = ga;
        done = true;
      } else if (ga < 0) {
        hi = accel;
        ghi = ga;
        bracketed = true;
      } else {
        lo = accel;
        glo = ga;
      }
    }
    h = lo;
  }
  int side = 0;
  for (int it = 0; it < 60 && bracketed && !done; ++it) {
    const double c = hi - ghi * (hi - lo) / (ghi - glo);
    const double gc = f(c) - c;
    h = c;
    if (std::fabs(gc) <= 1e-10 * c || hi - lo <= 1e-10 * hi) break;
    if (gc < 0) {
      hi = c;
      ghi = gc;
      if (side == -1) glo /= 2;
      side = -1;
    } else {
      lo = c;
      glo = gc;
      if (side == 1) ghi /= 2;
      side = 1;
    }
  }
  if (std::isfinite(h)) h = f(h);  // the breakdown, drains and pool at the solution
  r.expected_s = h;
  r.breakdown = with_slow_part(b);
  r.breakdown.drain = sl.drain_s * charged;
  r.failures = expected_failures(eff, k);
  r.slow_events = st.slow_events;
  r.drains = charged;
  r.slow_wall_s = st.slow_s;
  return r;
}

}  // namespace trainplan
