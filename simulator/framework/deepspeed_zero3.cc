#include "simulator/framework/deepspeed_zero3.h"

#include <algorithm>
#include <cstddef>
#include <limits>
#include <map>
#include <set>

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
  std::map<int, std::vector<std::size_t>> uses;  // module -> its positions, ascending
  for (std::size_t i = 0; i < n; ++i) uses[trace[i].module].push_back(i);
  auto next_use_from = [&](int module, std::size_t from) {
    const std::vector<std::size_t>& at = uses[module];
    const auto it = std::lower_bound(at.begin(), at.end(), from);
    return it == at.end() ? n : *it;
  };
  std::map<int, ModuleState> state;
  for (const ModuleUse& u : trace) state[u.module].numel = u.numel;
  auto persistent = [&](const ModuleUse& u) { return u.numel < knobs.persistence_numel; };
  // The partitioned modules not available, by their next use (at or after
  // the current one once refreshed): get_params_to_prefetch's walk visits
  // them in this order, each once.  A module's key is kept in `key`.
  std::set<std::pair<std::size_t, int>> waiting;
  std::map<int, std::size_t> key;
  auto wait_for = [&](int module, std::size_t from) {
    const std::size_t at = next_use_from(module, from);
    if (at < n) {
      waiting.emplace(at, module);
      key[module] = at;
    }
  };
  auto stop_waiting = [&](int module) {
    const auto it = key.find(module);
    if (it == key.end()) return;
    waiting.erase({it->second, module});
    key.erase(it);
  };
  for (const auto& [module, at] : uses) {
    if (trace[at.front()].numel >= knobs.persistence_numel) wait_for(module, 0);
  }
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
        stop_waiting(u.module);
      }
      out[i] = in_flight;  // _synchronize_communication waits for all of them
      for (const AwaitedGather& g : in_flight) state[g.module].status = Status::kAvailable;
      in_flight.clear();
    }
    // prefetch_next_sub_modules: one batch at a time, under the live limit
    // (never when the step counter is behind the trace).
    if (knobs.trace_aligned && in_flight.empty() && available < knobs.max_live_numel) {
      while (!waiting.empty() && waiting.begin()->first < i) {
        const int module = waiting.begin()->second;
        stop_waiting(module);
        wait_for(module, i);
      }
      double total = 0;
      for (auto it = waiting.begin(); it != waiting.end() && total < knobs.prefetch_bucket_numel; ++it) {
        ModuleState& t = state[it->second];
        in_flight.push_back(AwaitedGather{t.numel, it->second, static_cast<int>(i)});
        total += t.numel;
        available += t.numel;
      }
      for (const AwaitedGather& g : in_flight) {
        state[g.module].status = Status::kInFlight;
        stop_waiting(g.module);
      }
    }
    // release_sub_module after the module's forward (backward).
    if (!persistent(u)) {
      const std::size_t next = next_use_from(u.module, i + 1);
      const double distance = next < n ? prefix[next] - prefix[i + 1] : std::numeric_limits<double>::infinity();
      if (!knobs.trace_aligned || !(distance < knobs.max_reuse_numel)) {
        s.status = Status::kNotAvailable;
        available -= u.numel;
        wait_for(u.module, i + 1);
      }
    }
  }
  return out;
}

}  // namespace trainplan
