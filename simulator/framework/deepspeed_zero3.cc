#include "simulator/framework/deepspeed_zero3.h"

#include <cstddef>
#include <limits>
#include <map>

namespace trainplan {

namespace {

enum class Status { kNotAvailable, kInFlight, kAvailable };

struct ModuleState {
  Status status = Status::kNotAvailable;
  double numel = 0;
};

}  // namespace

std::vector<std::vector<AwaitedGather>> replay_zero3_fetches(const std::vector<ModuleUse>& trace,
                                                             const Zero3CoordinatorKnobs& knobs) {
  const std::size_t n = trace.size();
  std::vector<std::vector<AwaitedGather>> out(n);
  // Reuse distances (get_reuse_distance_in_numel): the elements of every
  // module used strictly between a use and the next use of the same module.
  std::vector<double> prefix(n + 1, 0);
  for (std::size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + trace[i].numel;
  std::vector<std::size_t> next_use(n, n);
  std::map<int, std::size_t> seen;
  for (std::size_t i = n; i-- > 0;) {
    auto it = seen.find(trace[i].module);
    if (it != seen.end()) next_use[i] = it->second;
    seen[trace[i].module] = i;
  }
  std::map<int, ModuleState> state;
  for (const ModuleUse& u : trace) state[u.module].numel = u.numel;
  auto persistent = [&](const ModuleUse& u) { return u.numel < knobs.persistence_numel; };
  std::vector<AwaitedGather> in_flight;
  double available = 0;
  for (std::size_t i = 0; i < n; ++i) {
    const ModuleUse& u = trace[i];
    ModuleState& s = state[u.module];
    // fetch_sub_module: gather what is missing, wait for what is in flight.
    if (!persistent(u) && s.status != Status::kAvailable) {
      if (s.status == Status::kNotAvailable) {
        in_flight.push_back(AwaitedGather{u.numel, u.module, static_cast<int>(i)});
        available += u.numel;
      }
      out[i] = in_flight;  // _synchronize_communication waits for all of them
      for (const AwaitedGather& g : in_flight) state[g.module].status = Status::kAvailable;
      in_flight.clear();
    }
    // prefetch_next_sub_modules: one batch at a time, under the live limit.
    if (in_flight.empty() && available < knobs.max_live_numel) {
      double total = 0;
      for (std::size_t j = i; j < n && total < knobs.prefetch_bucket_numel; ++j) {
        const ModuleUse& v = trace[j];
        ModuleState& t = state[v.module];
        if (persistent(v) || t.status != Status::kNotAvailable) continue;
        t.status = Status::kInFlight;
        in_flight.push_back(AwaitedGather{v.numel, v.module, static_cast<int>(i)});
        total += v.numel;
        available += v.numel;
      }
    }
    // release_sub_module after the module's forward (backward).
    if (!persistent(u)) {
      const double distance = next_use[i] < n ? prefix[next_use[i]] - prefix[i + 1]
                                              : std::numeric_limits<double>::infinity();
      if (!(distance < knobs.max_reuse_numel)) {
        s.status = Status::kNotAvailable;
        available -= u.numel;
      }
    }
  }
  return out;
}

}  // namespace trainplan
