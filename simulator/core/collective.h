// The collective operations, shared by the cost model, the cluster spec's
// calibrated overrides and the calibrate/ backends.
#ifndef TRAINPLAN_SIM_CORE_COLLECTIVE_H_
#define TRAINPLAN_SIM_CORE_COLLECTIVE_H_

namespace trainplan {

enum class Collective { kAllReduce, kAllGather, kReduceScatter, kAllToAll, kBroadcast, kSendRecv };

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_CORE_COLLECTIVE_H_
