// Persistent slow nodes, their detection and draining against a pool of
// spare nodes, and what they cost a training run.
//
// Model (SlowNodeRun in failures.h), in wall time whatever the job does:
// - Each of the job's n nodes turns persistently slow (thermal throttling, a
//   degraded HBM stack or NIC, a bad host) at rate 1 / MTBF_slow: slow events
//   arrive as a Poisson process of rate nu = n / MTBF_slow (n stays the same:
//   a drained node is replaced by a spare, which is health-checked and fast).
// - A synchronous job runs at the pace of its slowest node.  Step-time model:
//   the compute-bound bound, steps take F T while any slow node is in the job
//   (communication that does not slow down makes the real tax smaller: this
//   is its upper bound; two slow nodes cost what one does).
// - A slow node is detected d seconds after it turns slow, then waits (FIFO)
//   for a free spare.  A spare handed out drains the job: a planned save of
//   the current state (no lost work), restart onto the spare, load: C =
//   save + restart + load seconds, failure-free.  A spare handed out while
//   the job is down after a failure (or already draining) costs nothing: the
//   restart takes it.  The slow node goes to repair for R seconds and comes
//   back as a free spare.  With no spare free the job keeps running slow.
//   No spare at all (S = 0): a node that turns slow stays for the rest of
//   the run.
//
// The spare queue is an M/D/S queue fed (d later) by the slow events:
// customers = detected slow nodes, servers = the S spare slots, service =
// the repair R.  Starting empty, its number in system obeys Crommelin's
// (1932) recursion N(u + R) = max(N(u) - S, 0) + A, A ~ Poisson(nu R),
// N(u) ~ Poisson(nu u) for u < R; the nodes in detection at time t are
// Poisson(nu min(t, d)) and independent of N(t - d) (disjoint arrival
// windows).  Exactly, then:
//   P(no slow node in the job at t) = e^{-nu min(t, d)} P(N(t - d) <= S),
//   spares handed out by t = nu (t - d)^+ - E[(N(t - d) - S)^+].
//
// The run (expected_slow_run; a stated mean-field approximation, checked
// against the Monte Carlo of the whole thing in slow_nodes_test.cc):
// - S >= 1: the share q of the run's wall time H with a slow node in the job
//   (the exact integral above over [0, H]) stretches the mean step to
//   T_eff = T / (1 - q (1 - 1/F)) (a share q of the time at 1/F of the pace);
//   the run is the failure model at T_eff plus C per drain charged while the
//   job runs: H = E_run(T_eff) + C h (1 - f_down) / (1 + h C / H), with h the
//   spares handed out by H and f_down the share of H in failure downtime;
//   H solved by fixed-point iteration (monotone from E_run(T)).
// - S = 0: exact in the onset of slowness: the run is fast until the first
//   node turns slow at tau ~ Exp(nu), then slow to the end.  With X = E_run(T)
//   and Y = E_run(F T) (the failure model at both paces, progress linear in
//   wall time within each), E[H] = X + (Y/X - 1) E[(X - tau)^+],
//   E[(X - tau)^+] = X - (1 - e^{-nu X}) / nu.
#ifndef TRAINPLAN_SIM_FAULTS_SLOW_NODES_H_
#define TRAINPLAN_SIM_FAULTS_SLOW_NODES_H_

#include <cstdint>

#include "simulator/faults/failures.h"

namespace trainplan {

// P(a slow node is in the job at wall time t), from a start with no slow
// node and every spare free.  REQUIRES: s.rate_per_s > 0, t >= 0.
double slow_probability(const SlowNodeRun& s, double t_s);

struct SparePoolStats {
  double slow_s = 0;       // E[wall time in [0, H] with a slow node in the job]
  double handed_out = 0;   // E[spares handed out by H] (drains, charged or free)
  double slow_events = 0;  // nu H
};

// The spare pool over [0, horizon] in closed form (Gauss-Legendre over the
// offset in [0, R) of Crommelin's recursion).  REQUIRES: s.rate_per_s > 0.
SparePoolStats spare_pool_stats(const SlowNodeRun& s, double horizon_s);

struct SlowRunResult {
  double expected_s = 0;   // E[wall time of the run]
  WallBreakdown breakdown;  // with slow (steps' time beyond N T) and drain
  double failures = 0;
  double slow_events = 0, drains = 0, slow_wall_s = 0;
};

// The expected run with slow nodes, a checkpoint every k steps (the model
// above).  REQUIRES: m.slow.rate_per_s > 0, m.slow.factor >= 1, k >= 1.
SlowRunResult expected_slow_run(const RunModel& m, int64_t k);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_FAULTS_SLOW_NODES_H_
