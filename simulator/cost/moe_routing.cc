#include "simulator/cost/moe_routing.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "simulator/core/error.h"

namespace trainplan {

double expected_max_standard_normal(int64_t n) {
  TRAINPLAN_CHECK(n >= 1, "expected_max_standard_normal needs n >= 1");
  if (n == 1) return 0;
  // The planner asks for the same few n (powers of two) for every plan.
  thread_local std::map<int64_t, double> cache;
  auto hit = cache.find(n);
  if (hit != cache.end()) return hit->second;
  // E[max] = integral of x n phi(x) Phi(x)^(n-1) dx; the integrand is
  // negligible outside [-10, 10 + sqrt(2 ln n)] (Simpson's rule, 4000 steps).
  const double lo = -10, hi = 10 + std::sqrt(2 * std::log(static_cast<double>(n)));
  const int steps = 4000;
  const double dx = (hi - lo) / steps;
  const double nn = static_cast<double>(n);
  auto f = [&](double x) {
    const double phi = std::exp(-0.5 * x * x) / std::sqrt(2 * M_PI);
    const double cdf = 0.5 * std::erfc(-x / std::sqrt(2.0));
    return x * nn * phi * std::pow(cdf, nn - 1);
  };
  double sum = f(lo) + f(hi);
  for (int i = 1; i < steps; ++i) sum += f(lo + i * dx) * (i % 2 == 1 ? 4 : 2);
  const double v = sum * dx / 3;
  cache.emplace(n, v);
  return v;
}

double expected_max_rank_load(double tokens, int64_t top_k, int64_t experts, int64_t ep, double capacity_factor) {
  TRAINPLAN_CHECK(tokens > 0 && top_k >= 1 && top_k <= experts && ep >= 1 && experts % ep == 0,
                  "expected_max_rank_load: bad arguments");
  if (ep == 1 || top_k == experts) return 1;
  const double k = static_cast<double>(top_k), e = static_cast<double>(experts), r = static_cast<double>(ep);
  const double mean = tokens * k / r;
  const double var = tokens * k * (1 / r) * (1 - 1 / r) * (e - k) / (e - 1);
  double load = 1 + std::sqrt(r / (r - 1)) * expected_max_standard_normal(ep) * std::sqrt(var) / mean;
  if (capacity_factor > 0) load = std::min(load, capacity_factor);
  return std::max(1.0, load);
}

}  // namespace trainplan
