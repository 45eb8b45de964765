// How many tokens the busiest expert-parallel rank receives when a router
// spreads tokens over experts: the expected maximum of the ranks' loads,
// over the mean, for a router that picks each token's top_k experts
// uniformly at random without repetition, optionally capped by an expert
// capacity (token dropping).
//
// Derivation (docs/moe.md): with E experts over ep ranks (E/ep each), one
// token sends to a given rank a hypergeometric count of its k picks: mean
// k/ep, variance k (1/ep)(1 - 1/ep)(E - k)/(E - 1).  Over n independent
// tokens a rank's load is approximately normal with mean n k/ep and
// variance n times that.  The ep loads sum to n k (exchangeable, correlation
// -1/(ep - 1)), so load_i - mean = sigma' (Z_i - Zbar) with Z iid standard
// normal and sigma' = sigma / sqrt(1 - 1/ep); E[max_i (Z_i - Zbar)] =
// E[max of ep standard normals].  Hence
//   E[max load] / mean = 1 + sqrt(ep/(ep - 1)) * e(ep) * sigma / mean.
// A learned router is less even than a uniform one (Megatron-MoE model zoo:
// dropless real routing 8-20% slower than forced balance on Qwen3-235B); the
// plan's --moe-imbalance states a measured figure instead.
#ifndef TRAINPLAN_SIM_COST_MOE_ROUTING_H_
#define TRAINPLAN_SIM_COST_MOE_ROUTING_H_

#include <cstdint>

namespace trainplan {

// E[max of n iid standard normals] (n >= 1), by numerical integration of
// n x phi(x) Phi(x)^(n-1); 0 for n = 1, 1/sqrt(pi) for n = 2.
double expected_max_standard_normal(int64_t n);

// The busiest of `ep` ranks' expected load over the mean load, for `tokens`
// tokens each routed to `top_k` distinct experts of `experts` chosen
// uniformly.  capacity_factor > 0 caps it (tokens beyond an expert's
// capacity of capacity_factor x its mean load are dropped; below 1 every
// expert is full and the load is the capacity factor).  Otherwise >= 1; 1
// when ep == 1 or every token goes to every expert.
// REQUIRES: tokens > 0, 1 <= top_k <= experts, ep >= 1, ep divides experts.
double expected_max_rank_load(double tokens, int64_t top_k, int64_t experts, int64_t ep,
                              double capacity_factor = 0);

// The chance that one token's top_k experts include at least one of a
// block of `unit` consecutive experts (an expert-parallel rank's local
// experts, or a node's), averaged over the experts / unit blocks, for a
// router that picks uniformly at random without repetition; with
// group-limited routing (groups > 0) the token first picks `group_topk` of
// the `groups` equal groups of consecutive experts uniformly, then its
// top_k among their experts (Megatron-Core group_limited_topk).  What a
// deduplicating dispatcher (DeepEP, HybridEP) sends: each token once per
// destination rank or node, so E[destinations] = blocks x this.
//
// Derivation: with S the selected groups and N = group_topk * experts /
// groups candidates (N = experts without groups), a block missed by all k
// picks has probability C(N - u_S, k) / C(N, k), where u_S is the number of
// its experts inside S; averaged over the equally likely S, enumerated over
// the subsets of the groups the block touches (hypergeometric in their
// count).  Exact; a Monte Carlo in tests/simulator/cost/moe_routing_test.cc.
// REQUIRES: 1 <= top_k <= experts; unit divides experts; groups == 0 or
// (groups divides experts, 1 <= group_topk <= groups, top_k <=
// group_topk * experts / groups).
double expert_block_hit_probability(int64_t experts, int64_t top_k, int64_t unit, int64_t groups = 0,
                                    int64_t group_topk = 0);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_COST_MOE_ROUTING_H_
