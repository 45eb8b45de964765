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
// Invariants: every use of a partitioned parameter that is not available
// when its hook runs is awaited at that use; a prefetched parameter is
// awaited at the first later use that synchronizes.
#ifndef TRAINPLAN_SIM_FRAMEWORK_DEEPSPEED_ZERO3_H_
#define TRAINPLAN_SIM_FRAMEWORK_DEEPSPEED_ZERO3_H_

#include <vector>

namespace trainplan {

// The coordinator's knobs, DeepSpeed's defaults (zero/config.py:
// stage3_prefetch_bucket_size 5e7, stage3_max_live_parameters 1e9,
// stage3_max_reuse_distance 1e9, stage3_param_persistence_threshold 1e5).
struct Zero3CoordinatorKnobs {
  double prefetch_bucket_numel = 5e7;
  double max_live_numel = 1e9;
  double max_reuse_numel = 1e9;
  double persistence_numel = 1e5;
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
