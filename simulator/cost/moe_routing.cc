#include "simulator/cost/moe_routing.h"

#include <algorithm>
#include <bitset>
#include <cmath>
#include <map>
#include <tuple>
#include <vector>

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
  // Below 1, every expert is full and drops the rest: the load is the cap.
  if (ep == 1 || top_k == experts) return capacity_factor > 0 ? std::min(1.0, capacity_factor) : 1;
  const double k = static_cast<double>(top_k), e = static_cast<double>(experts), r = static_cast<double>(ep);
  const double mean = tokens * k / r;
  const double var = tokens * k * (1 / r) * (1 - 1 / r) * (e - k) / (e - 1);
  double load = 1 + std::sqrt(r / (r - 1)) * expected_max_standard_normal(ep) * std::sqrt(var) / mean;
  load = std::max(1.0, load);
  return capacity_factor > 0 ? std::min(load, capacity_factor) : load;
}

namespace {

// C(n, k) / C(m, k) for n <= m, as a product (no overflow): the chance that
// k draws without repetition from m items all avoid m - n of them.
double choose_ratio(int64_t n, int64_t m, int64_t k) {
  if (n < k) return 0;
  double r = 1;
  for (int64_t i = 0; i < k; ++i) r *= static_cast<double>(n - i) / static_cast<double>(m - i);
  return r;
}

// log C(n, k).
double log_choose(int64_t n, int64_t k) {
  if (k < 0 || k > n) return -INFINITY;
  return std::lgamma(static_cast<double>(n + 1)) - std::lgamma(static_cast<double>(k + 1)) -
         std::lgamma(static_cast<double>(n - k + 1));
}

constexpr int kMaxTouchedGroups = 20;  // subsets enumerated per block (2^20)

}  // namespace

double expert_block_hit_probability(int64_t experts, int64_t top_k, int64_t unit, int64_t groups,
                                    int64_t group_topk) {
  TRAINPLAN_CHECK(top_k >= 1 && top_k <= experts && unit >= 1 && experts % unit == 0,
                  "expert_block_hit_probability: bad arguments");
  if (groups <= 0) return 1 - choose_ratio(experts - unit, experts, top_k);
  TRAINPLAN_CHECK(experts % groups == 0 && group_topk >= 1 && group_topk <= groups &&
                      top_k <= group_topk * (experts / groups),
                  "expert_block_hit_probability: bad groups");
  // The planner asks for the same few blocks (a rank's or a node's experts)
  // for every layer shape it costs.
  using Key = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t>;
  thread_local std::map<Key, double> cache;
  const Key key{experts, top_k, unit, groups, group_topk};
  auto hit = cache.find(key);
  if (hit != cache.end()) return hit->second;
  const int64_t per_group = experts / groups;
  const int64_t candidates = group_topk * per_group;
  const int64_t blocks = experts / unit;
  double total = 0;
  for (int64_t b = 0; b < blocks; ++b) {
    // The groups this block touches and how many of its experts lie in each.
    std::vector<int64_t> inside;
    for (int64_t e = b * unit; e < (b + 1) * unit;) {
      const int64_t g_end = (e / per_group + 1) * per_group;
      const int64_t n = std::min(g_end, (b + 1) * unit) - e;
      inside.push_back(n);
      e += n;
    }
    const int t = static_cast<int>(inside.size());
    double missed = 0;
    if (t > kMaxTouchedGroups) {
      // A block spanning this many groups holds all but at most its two end
      // groups whole (blocks and groups are both runs of consecutive
      // experts); taken as whole groups, only the count i of them among the
      // selected matters.
      for (int64_t i = 0; i <= std::min<int64_t>(t, group_topk); ++i) {
        const double p = std::exp(log_choose(t, i) + log_choose(groups - t, group_topk - i) -
                                  log_choose(groups, group_topk));
        missed += p * choose_ratio(candidates - i * per_group, candidates, top_k);
      }
    } else {
      // Each subset T' of the touched groups is the selected part with
      // probability C(groups - t, group_topk - |T'|) / C(groups, group_topk).
      for (uint32_t mask = 0; mask < (1u << t); ++mask) {
        const int i = static_cast<int>(std::bitset<32>(mask).count());
        if (i > group_topk) continue;
        const double p = std::exp(log_choose(groups - t, group_topk - i) - log_choose(groups, group_topk));
        int64_t u = 0;
        for (int j = 0; j < t; ++j) {
          if (mask & (1u << j)) u += inside[j];
        }
        missed += p * choose_ratio(candidates - u, candidates, top_k);
      }
    }
    total += 1 - missed;
  }
  const double v = total / static_cast<double>(blocks);
  cache.emplace(key, v);
  return v;
}

}  // namespace trainplan
