// Faults `validate --inject` executes for real, to measure what the fault
// models (simulator/faults) predict:
//   slow:rank=R,factor=F   rank R's compute and optimizer take F times as
//                          long (1 < F <= 100): the straggler tax and the
//                          spread of gradient-sync arrivals;
//   link:rank=R,factor=F   every transfer rank R takes part in runs at
//                          fraction F of its bandwidth (0 < F < 1): it
//                          moves 1/F times the bytes, the extra as a second
//                          transfer of the same kind right after it;
//   kill:rank=R,step=N     rank R dies (SIGKILL) half-way through its
//                          program in step N (1-based over warm-up + steps):
//                          detection, restart, checkpoint load, lost work;
//   hang:rank=R,step=N     rank R stops (SIGSTOP) there instead: the job is
//                          alive but makes no progress, so only the
//                          heartbeat timeout detects it.
#ifndef TRAINPLAN_CALIBRATE_INJECT_H_
#define TRAINPLAN_CALIBRATE_INJECT_H_

#include <string>

namespace trainplan {

struct InjectSpec {
  enum class Kind { kNone, kSlow, kLink, kKill, kHang };
  Kind kind = Kind::kNone;
  int rank = 0;
  int step = 0;       // kill, hang: 1-based over warm-up + steps
  double factor = 1;  // slow: compute x factor; link: bandwidth fraction
  std::string text;   // as given
  bool recovery() const { return kind == Kind::kKill || kind == Kind::kHang; }
};

extern const char* const kInjectGrammar;

// Parses --inject for a plan of `ranks` ranks and a run of `total_steps`
// steps.  Throws InputError("--inject: <problem>; allowed: ...") on an
// unknown kind or key, a missing or repeated key, a rank outside [0, ranks),
// a step outside [1, total_steps], or a factor outside (1, 100] (slow) or
// (0, 1) (link).
InjectSpec parse_inject(const std::string& text, int ranks, int total_steps);

}  // namespace trainplan

#endif  // TRAINPLAN_CALIBRATE_INJECT_H_
