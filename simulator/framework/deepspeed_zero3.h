// DeepSpeed ZeRO-3's parameter coordinator (v0.3.14 - v0.5.4,
// deepspeed/runtime/zero/stage3.py PartitionedParameterCoordinator and
// PrefetchCoordinator) replayed over the trace of a step's module uses: at
// which module a fetch synchronizes the device, which gathered parameters
// it waits for, and at which module's hook each of them was launched.
//
// The rules, each from that file:
// - A parameter of fewer than persistence_numel elements is never
//   partitioned (ds_persist: stage3_param_persistence_threshold).
// - A module's pre-forward / pre-backward hook fetches its parameters
//   (fetch_sub_module): any not available is gathered there (blocking); if
//   any was gathered or is in flight, _synchronize_communication waits for
//   everything in flight.  An available parameter costs nothing.
// - Then the hook prefetches (prefetch_next_sub_modules) only when nothing
//   is in flight and fewer than max_live_numel elements are available:
//   walking the trace from this module on, the parameters not available
//   (and not yet chosen) until their count reaches prefetch_bucket_numel
//   (get_params_to_prefetch), launched at once.
// - After a module's forward or backward its parameters are released
//   (repartitioned) unless the module is used again within
//   max_reuse_numel elements of other modules' parameters
//   (_keep_for_later, get_reuse_distance_in_numel).
// - Both walks index the trace by a step counter that each hook advances
//   (increment_step) and the model's pre-forward hook resets (reset_step).
//   From v0.3.14 (stage3.py setup_zero_stage3_hooks, DeepSpeed commit
//   7b46d11, 2021-04-07) to v0.5.10 that reset is registered after the
//   model's own sub-module hook, which has already advanced the counter:
//   every later module sits one step behind its place in the trace, so
//   get_params_to_prefetch finds another module there ("Tracing failed.
//   Prefetching is disabled") and get_reuse_distance_in_numel cannot tell
//   a reuse (1e12), hence nothing is prefetched and every module is
//   released after each use (DeepSpeed issue #1069, diagnosed 2021-05-27;
//   PR #1170 "off-by-one tracing issue"; v0.6.0 replaced the coordinator).
//   Zero3CoordinatorKnobs::trace_aligned = false replays that.
// Invariants: every use of a partitioned parameter that is not available
// when its hook runs is awaited at that use; a prefetched parameter is
// awaited at the first later use that synchronizes; with trace_aligned
// false every use of a partitioned parameter gathers it and waits.
#ifndef TRAINPLAN_SIM_FRAMEWORK_DEEPSPEED_ZERO3_H_
#define TRAINPLAN_SIM_FRAMEWORK_DEEPSPEED_ZERO3_H_

#include <vector>

namespace trainplan {

// The coordinator's knobs, DeepSpeed's defaults (zero/config.py:
// stage3_prefetch_bucket_size 5e7, stage3_max_live_parameters 1e9,
// stage3_max_reuse_distance 1e9, stage3_param_persistence_threshold 1e5).
// `trace_aligned` is not a knob but the code path: false for v0.3.14 -
// v0.5.10, whose step counter runs one behind the trace (above), so the
// prefetch and reuse knobs have no effect.
struct Zero3CoordinatorKnobs {
  double prefetch_bucket_numel = 5e7;
  double max_live_numel = 1e9;
  double max_reuse_numel = 1e9;
  double persistence_numel = 1e5;
  bool trace_aligned = true;
};

// One use of one module in trace order: `module` identifies it (the same
// module used again, e.g. by the recompute and the backward, has the same
// id); `numel` its parameters' elements on this rank before partitioning.
struct ModuleUse {
  int module = 0;
  double numel = 0;
};

// A gather a fetch waits for: `numel` elements launched by the hook of use
// `launched_at` (the awaiting use itself for a blocking fetch).
struct AwaitedGather {
  double numel = 0;
  int module = 0;
  int launched_at = 0;
};

// Per use of the trace: the gathers its fetch waits for (empty: the fetch
// does not synchronize).
std::vector<std::vector<AwaitedGather>> replay_zero3_fetches(const std::vector<ModuleUse>& trace,
                                                             const Zero3CoordinatorKnobs& knobs);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_FRAMEWORK_DEEPSPEED_ZERO3_H_
