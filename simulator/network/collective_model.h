// Cost of one NCCL collective on a group of ranks: NCCL's own tuning model
// (NVIDIA/nccl src/graph/tuning.cc, ncclTopoTuneModel + ncclTopoGetAlgoTime),
// driven by link bandwidths from the cluster spec instead of NCCL's topology
// search.
//
// For each available (algorithm, protocol) the model gives
//   time = latency + wire_bytes_per_rank / bus_bandwidth
// and the cheapest pair wins, as NCCL's getAlgoInfo does.  wire_bytes_per_rank
// is the nccl-tests bus-bandwidth factor times the size (doc/PERFORMANCE.md),
// so bus_bandwidth is directly comparable with the "busbw" column of
// nccl-tests.  See README.md beside this file for the sources of every
// constant.
//
// Invariants:
// - Deterministic: a pure function of its arguments; ties between
//   (algorithm, protocol) pairs go to the first in the order Ring, Tree, NVLS,
//   P2P then LL, LL128, Simple.
// - time == latency + wire_bytes_per_rank / bus_bandwidth (to 1 ps).
// - A one-rank group or an empty buffer costs nothing.
// - Ring/Simple (P2P/Simple for AllToAll and SendRecv) is always available, so
//   the unfiltered collective_cost() always has an answer.
#ifndef TRAINPLAN_SIM_NETWORK_COLLECTIVE_MODEL_H_
#define TRAINPLAN_SIM_NETWORK_COLLECTIVE_MODEL_H_

#include <optional>
#include <vector>

#include "simulator/core/collective.h"
#include "simulator/core/units.h"
#include "simulator/spec/cluster.h"

namespace trainplan {


// kP2p is NCCL's send/recv path, which AllToAll and SendRecv use; the other
// collectives never use it.  NVLS is NVLink SHARP (in-switch reduction).
enum class NcclAlgo { kRing, kTree, kNvls, kP2p, kPat };
enum class NcclProto { kLL, kLL128, kSimple };

// The link class that limits the bandwidth term of a collective.
enum class LinkTier { kIntraNode, kInterNode };

const char* to_string(Collective c);
const char* to_string(NcclAlgo a);
const char* to_string(NcclProto p);
const char* to_string(LinkTier t);

// Returns the nccl-tests factor busbw / algbw (doc/PERFORMANCE.md):
// all-reduce 2(n-1)/n; all-gather, reduce-scatter and all-to-all (n-1)/n;
// broadcast and send/recv 1.  Returns 0 for a one-rank collective other than
// broadcast and send/recv.  REQUIRES: ranks >= 1.
double bus_bandwidth_factor(Collective c, int ranks);

// Where the ranks of one communicator sit.  Ranks are spread evenly over the
// nodes they span.
struct GroupPlacement {
  int ranks = 1;           // communicator size n
  int nodes = 1;           // nodes it spans
  int ranks_per_node = 1;  // ranks of this group on each node
  bool crosses_leaf = false;  // traffic crosses leaf switches (pays oversubscription)
};

// Returns the placement of a group of `ranks` with `ranks_per_node` on each
// node, assuming groups are packed onto whole leaves: crosses_leaf is true iff
// the group spans more nodes than one leaf holds (InterNodeSpec::nodes_per_leaf;
// 0 means unknown and gives false).
// REQUIRES: ranks >= 1, 1 <= ranks_per_node <= cluster.gpus_per_node, ranks %
// ranks_per_node == 0.
GroupPlacement group_placement(int ranks, int ranks_per_node, const ClusterSpec& cluster);

// Returns the placement of a group of `ranks` whose members are `stride`
// global ranks apart (1: consecutive, a TP group; tp: a DP or CP group in
// Megatron's rank order), or, with `block` > 1, come in blocks of `block`
// consecutive ranks whose starts are `stride` apart (a replica's model-
// parallel ranks: the tp ranks of each stage, stages tp*cp*dp apart),
// counted from global rank 0 (Megatron's rank order puts every such group
// of a whole-node job at a node boundary), in the even form
// group_placement models: the largest even split that puts no more ranks
// on a node than really share one and spans no fewer nodes than the
// members do, which is their own node count wherever an even split of it
// exists.  So a group straddling
// nodes unevenly (6 data-parallel ranks 2 apart on 8-GPU nodes: 4 + 2)
// keeps its node count (2 nodes of 3), 9 consecutive ranks (8 + 1) take 3
// nodes of 3, and 3 stages of one rank on one 64-rank node stay on it.
// REQUIRES: ranks >= 1, block >= 1, ranks % block == 0, stride >= block
// (or ranks == block).
GroupPlacement strided_group_placement(int ranks, int stride, const ClusterSpec& cluster, int block = 1);

// The link parameters the model needs.  Every efficiency is "what NCCL reaches
// at large sizes / line rate"; link_params() fills them from the cluster spec
// (sources in README.md) and calibration may overwrite them.
struct LinkParams {
  IntraFabric intra_fabric = IntraFabric::kNvswitch;
  Bandwidth intra_bandwidth;       // line rate per GPU per direction
  double intra_efficiency = 0.80;  // ring/Simple busbw / line rate (NCCL SM80_NVLINK_BW 20 of 25 GB/s)
  Duration intra_latency;          // floor on NCCL's per-step intra-node latency; default 0
  int gpus_per_node = 8;

  bool nvls = false;               // NVLink SHARP usable (NVSwitch with nvls)
  int nvls_min_ranks = 5;          // NVLS only from this many ranks per node (H100/H200 5, B200 6)
  double nvls_efficiency = 0.85;   // NCCL nvlsEfficiency: Hopper 0.85, Blackwell 0.74

  int nics_per_node = 0;           // 0: single-node cluster
  Bandwidth nic_bandwidth;         // line rate per NIC per direction
  double inter_efficiency = default_nic_efficiency(InterFabric::kInfiniband);  // InterNodeSpec::efficiency
  Duration inter_latency;          // floor on NCCL's per-step network latency; default 0
  double oversubscription = 1.0;   // divides inter-node bandwidth when crosses_leaf; >= 1

  // NCCL llMaxBws: the LL protocol's bus-bandwidth ceiling on one node (by GPU
  // generation: Ampere 87.7, Hopper 141 GB/s), two nodes and more nodes.
  Bandwidth ll_max_bus_bandwidth_1node = Bandwidth::gigabytes_per_s(87.7);
  Bandwidth ll_max_bus_bandwidth_2nodes = Bandwidth::gigabytes_per_s(39.0);
  Bandwidth ll_max_bus_bandwidth_many_nodes = Bandwidth::gigabytes_per_s(20.4);

  // Fixed cost per collective call outside NCCL's table (host launch and
  // framework dispatch when the host cannot run ahead).  Default 0: NCCL's
  // latencies were tuned on end-to-end nccl-tests times.  Calibration fits it
  // from the smallest measured size.
  Duration call_overhead;

  // Measured alpha-beta fits from a calibration file; when one matches the
  // collective and scope it replaces NCCL's model.
  std::vector<CalibratedCollective> calibrated;
};

// Returns the parameters of `cluster`.  The GPU generation (from the GPU name,
// else the NVLink bandwidth) selects NCCL's per-generation constants.
LinkParams link_params(const ClusterSpec& cluster);

struct CollectiveCost {
  NcclAlgo algo = NcclAlgo::kRing;
  NcclProto proto = NcclProto::kSimple;
  Duration latency;             // size-independent part, call_overhead included
  Duration time;                // latency + wire_bytes_per_rank / bus_bandwidth
  Bandwidth bus_bandwidth;      // rate of the bandwidth term, nccl-tests busbw units
  double wire_bytes_per_rank = 0;  // bus_bandwidth_factor(c, n) * size
  LinkTier bottleneck = LinkTier::kIntraNode;  // link class that sets bus_bandwidth
};

// Restricts the choice like NCCL_ALGO / NCCL_PROTO; empty means any.
struct AlgoFilter {
  std::optional<NcclAlgo> algo;
  std::optional<NcclProto> proto;
};

// Returns the cheapest available (algorithm, protocol) for collective `c` of
// `size` bytes (the nccl-tests "size": the whole buffer for all-reduce and
// broadcast, the output of all-gather, the input of reduce-scatter, each
// rank's send buffer for all-to-all, the bytes each rank sends for send/recv).
// REQUIRES: size >= 0; g.ranks == g.nodes * g.ranks_per_node >= 1;
// g.ranks_per_node <= p.gpus_per_node; g.nodes == 1 or p.nics_per_node > 0.
CollectiveCost collective_cost(Collective c, Bytes size, const GroupPlacement& g, const LinkParams& p);

// As above among the pairs `filter` allows; std::nullopt when none is
// available (e.g. NVLS for all-gather, or across nodes).
std::optional<CollectiveCost> collective_cost(Collective c, Bytes size, const GroupPlacement& g,
                                              const LinkParams& p, const AlgoFilter& filter);

// Returns every available (algorithm, protocol) with its cost, in tie-break
// order, so reports can say why the alternatives lose.  Same REQUIRES.
std::vector<CollectiveCost> candidate_costs(Collective c, Bytes size, const GroupPlacement& g,
                                            const LinkParams& p);

// Returns the busbw nccl-tests would print for this cost:
// wire_bytes_per_rank / time (latency included).  0 when time is 0.
// A traffic pattern that is not the uniform all-to-all nccl-tests measures
// (a deduplicating MoE dispatcher: DeepEP, HybridEP) as the uniform
// all-to-all size that loads the busier link tier as much: `intra_bytes`
// per rank over the intra-node fabric and `inter_bytes` per rank off the
// node (through the NICs the group's ranks on a node share), against the
// uniform all-to-all's (r - 1)/n and (n - r)/n of its size on each (r ranks
// per node of n).  0 for a one-rank group or no bytes.
double all_to_all_equivalent_bytes(double intra_bytes, double inter_bytes, const GroupPlacement& g,
                                   const LinkParams& p);

Bandwidth reported_bus_bandwidth(const CollectiveCost& cost);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_NETWORK_COLLECTIVE_MODEL_H_
