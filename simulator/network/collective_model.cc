// NCCL's collective cost model.  Constants are NCCL's tuning defaults
// (NVIDIA/nccl src/graph/tuning.cc, ncclTunerConstantsDefaults of v2.23-2.27:
// baseLatencies, hwLatencies, llMaxBws, treeCorrectionFactor,
// nvlsEfficiency); the link bandwidths that NCCL gets from its topology search
// (nChannels * bwIntra / bwInter) come from the cluster spec times an
// achievable fraction instead.  README.md lists each source.
#include "simulator/network/collective_model.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <string>

#include "simulator/core/error.h"

namespace trainplan {
namespace {

// Rows of NCCL's hwLatencies table.
enum class Hw { kNvlink = 0, kPcie = 1, kNet = 2 };

// NCCL baseLatencies and hwLatencies (per step), microseconds, by protocol
// LL / LL128 / Simple.
constexpr double kRingBaseLatencyUs[3] = {6.6, 14.0, 8.4};
constexpr double kTreeBaseLatencyUs[3] = {6.8, 14.0, 8.4};
constexpr double kRingStepLatencyUs[3][3] = {
    {0.6, 1.9, 3.4},    // NVLink
    {1.0, 2.5, 5.7},    // PCIe
    {2.7, 4.0, 14.0}};  // network
constexpr double kTreeStepLatencyUs[3][3] = {
    {0.6, 1.25, 4.0},   // NVLink
    {1.0, 1.9, 4.0},    // PCIe
    {5.0, 8.5, 14.0}};  // network
// hwLatencies[NVLINK][NVLS][Simple]; NVLS has no base latency.
constexpr double kNvlsLatencyUs = 25.0;
// PAT (NCCL 2.23+, Parallel Aggregated Trees) for all-gather and
// reduce-scatter with one GPU per node, Simple only (ncclPatEnable): base
// latency 8 us, a logarithmic part log2(nNodes) x netLat/3.5 with netLat =
// hwLatencies[NET][PAT][Simple] = 14 us, a linear part 2.8 us per rank, and
// 0.75 of the ring's bus bandwidth (tuning.cc ncclTopoTuneModel).
constexpr double kPatBaseLatencyUs = 8.0;
constexpr double kPatNetLatencyUs = 14.0;
constexpr double kPatLogDivisor = 3.5;
constexpr double kPatPerRankUs = 2.8;
constexpr double kPatBandwidthFactor = 0.75;
// getNetOverhead(): 1 us per network post on Intel hosts, 3x for Simple; a
// multi-node ring pays it on every step.
constexpr double kNetOverheadUs = 1.0;
constexpr double kNetOverheadSimpleFactor = 3.0;
// ncclTopoGetAlgoTime: multi-node Ring/Simple all-reduce latency "plateau
// effect", 1.4 from compute capability 8.0 on.
constexpr double kRingPlateauFactor = 1.4;

// Bandwidth refinements of ncclTopoTuneModel.
constexpr double kRingLlFactor = 0.5;      // Ring/LL: half the line carries flags
constexpr double kRingLl128Factor = 0.92;  // Ring/LL128: 120 of 128 bytes are data
constexpr double kTreeFactor = 0.92;       // Tree (all-reduce)
constexpr double kTreeLlDivisor = 3.8;     // Tree/LL
constexpr double kTreeLl128OneNode = 7.0 / 9.0;
constexpr double kTreeLl128MultiNode = 120.0 / 128.0;
constexpr double kTreeAlgbwRatio = 0.5;    // Tree algbw = busBw / 2

// treeCorrectionFactor[proto][log2(bytes / 64)], for 64 B .. 512 MiB.
constexpr int kTreeCorrectionEntries = 24;
constexpr double kTreeCorrection[3][kTreeCorrectionEntries] = {
    {1.0, 1.0, 1.0, 1.0, .9, .8, .7, .7, .7, .7, .6, .5, .4, .4, .5, .6, .7, .8, .9, 1.0, 1.0, 1.0, 1.0, 1.0},
    {1.0, 1.0, 1.0, 1.0, 1.0, .9, .8, .8, .8, .7, .6, .6, .6, .6, .6, .6, .8, .9, .9, .9, .9, 1.0, 1.0, 1.0},
    {.9, .9, .9, .9, .9, .9, .9, .8, .7, .6, .6, .5, .5, .5, .5, .6, .7, .8, .7, .7, .8, .9, .9, .9}};

// NCCL has no cost model for send/recv.  Its p2p schedule packs up to
// NCCL_MAX_DEV_WORK_P2P_PER_BATCH (8) peers in one batch; we charge one step
// latency per batch of peers.
constexpr int kP2pPeersPerBatch = 8;

enum class Generation { kVolta, kAmpere, kHopper, kBlackwell };

int pi(NcclProto p) { return static_cast<int>(p); }
int hi(Hw h) { return static_cast<int>(h); }

int floor_log2(int v) {
  int r = -1;
  while (v > 0) {
    v >>= 1;
    ++r;
  }
  return r;
}

int ceil_div(int a, int b) { return (a + b - 1) / b; }

double us_max(double table_us, Duration floor) { return std::max(table_us, floor.us()); }

// The bandwidth term and latency of one (algorithm, protocol), before the
// call overhead.
struct Term {
  double latency_us = 0;
  double bus_bytes_per_s = 0;  // nccl-tests busbw units
  LinkTier tier = LinkTier::kIntraNode;
};

class Model {
 public:
  Model(Collective c, Bytes size, const GroupPlacement& g, const LinkParams& p)
      : c_(c), size_(size), g_(g), p_(p) {
    intra_hw_ = p.intra_fabric == IntraFabric::kPcie ? Hw::kPcie : Hw::kNvlink;
    intra_bytes_per_s_ = p.intra_bandwidth.bytes_per_s() * p.intra_efficiency;
  }

  std::optional<Term> ring(NcclProto proto) const {
    const int n = g_.ranks, nodes = g_.nodes;
    if (!protocol_enabled(proto)) return std::nullopt;
    const int steps = c_ == Collective::kAllReduce   ? 2 * (n - 1)
                      : c_ == Collective::kBroadcast ? n
                                                     : n - 1;
    Term t;
    // One ring per channel enters and leaves each node once, so the node's
    // NICs carry as many bytes as one rank sends: ring busbw is bounded by the
    // group's share of the node NICs, not by NIC bandwidth / ranks per node.
    double bw = intra_bytes_per_s_;
    if (nodes > 1) {
      const double inter = inter_group_bytes_per_s(g_.ranks_per_node);
      if (inter <= bw) t.tier = LinkTier::kInterNode;
      bw = std::min(bw, inter);
    }
    t.bus_bytes_per_s = protocol_bandwidth(proto, bw, kRingLl128Factor);
    // Ring algbw = busBw * n / steps, i.e. exactly the nccl-tests busbw.

    if (c_ == Collective::kBroadcast) {
      // Broadcast/Reduce on rings that differ per channel: every step pays a
      // chunk latency, Tree's for Simple.
      const Hw hw = nodes == 1 ? intra_hw_ : Hw::kNet;
      const double table = proto == NcclProto::kSimple ? kTreeStepLatencyUs[hi(hw)][pi(proto)]
                                                       : kRingStepLatencyUs[hi(hw)][pi(proto)];
      const double step = us_max(table, hw == Hw::kNet ? p_.inter_latency : p_.intra_latency);
      t.latency_us = kRingBaseLatencyUs[pi(proto)] + steps * step;
      return t;
    }
    double intra_step = us_max(kRingStepLatencyUs[hi(intra_hw_)][pi(proto)], p_.intra_latency);
    // With one rank per node nothing hides the network latency: NCCL charges
    // Tree's network step latency.
    const double net_table = g_.ranks_per_node == 1 ? kTreeStepLatencyUs[hi(Hw::kNet)][pi(proto)]
                                                    : kRingStepLatencyUs[hi(Hw::kNet)][pi(proto)];
    const double inter_step = us_max(net_table, p_.inter_latency);
    int inter_steps = 0;
    if (nodes > 1) {
      const double overhead =
          kNetOverheadUs * (proto == NcclProto::kSimple ? kNetOverheadSimpleFactor : 1.0);
      intra_step = std::max(intra_step, overhead);
      inter_steps = c_ == Collective::kAllReduce ? 2 * (nodes - 1) : nodes - 1;
    }
    t.latency_us = kRingBaseLatencyUs[pi(proto)] + (steps - inter_steps) * intra_step +
                   inter_steps * inter_step;
    if (c_ == Collective::kAllReduce && proto == NcclProto::kSimple && nodes > 1) {
      t.latency_us *= kRingPlateauFactor;
    }
    return t;
  }

  std::optional<Term> tree(NcclProto proto) const {
    const int n = g_.ranks, nodes = g_.nodes;
    if (c_ != Collective::kAllReduce || !protocol_enabled(proto)) return std::nullopt;
    Term t;
    // Double binary tree: with more than two nodes each node's NICs carry ~2S
    // (up and down in the tree where it is interior), with two nodes only S,
    // which is why two-node Tree busbw can exceed the NIC limit (nccl#812).
    double bw = intra_bytes_per_s_;
    if (nodes > 1) {
      const double inter =
          inter_group_bytes_per_s(g_.ranks_per_node) * (nodes == 2 ? 2.0 : 1.0);
      if (inter <= bw) t.tier = LinkTier::kInterNode;
      bw = std::min(bw, inter);
    }
    double bus = bw * kTreeFactor;
    if (proto == NcclProto::kLL) bus = std::min(bus / kTreeLlDivisor, ll_max_bytes_per_s());
    if (proto == NcclProto::kLL128) bus *= nodes == 1 ? kTreeLl128OneNode : kTreeLl128MultiNode;
    const double algbw = bus * kTreeAlgbwRatio * tree_correction(proto);
    t.bus_bytes_per_s = algbw * bus_bandwidth_factor(c_, n);

    const double intra_step = us_max(kTreeStepLatencyUs[hi(intra_hw_)][pi(proto)], p_.intra_latency);
    const double inter_step = us_max(kTreeStepLatencyUs[hi(Hw::kNet)][pi(proto)], p_.inter_latency);
    t.latency_us = kTreeBaseLatencyUs[pi(proto)] +
                   2.0 * ((g_.ranks_per_node - 1) * intra_step + floor_log2(nodes) * inter_step);
    return t;
  }

  std::optional<Term> nvls(NcclProto proto) const {
    const int n = g_.ranks;
    if (c_ != Collective::kAllReduce || proto != NcclProto::kSimple || !p_.nvls ||
        p_.intra_fabric != IntraFabric::kNvswitch || g_.nodes != 1 ||
        g_.ranks_per_node < p_.nvls_min_ranks) {
      return std::nullopt;
    }
    // Each GPU sends its whole buffer to the switch (multimem.ld_reduce pulls
    // every shard) and pushes back its reduced shard S/n (multimem.st), so its
    // NVLink carries S(n+1)/n per direction: algbw = eff * B * n/(n+1).  This
    // reproduces the measured H200 NVLS gain for 5..8 GPUs within 4%.
    Term t;
    const double algbw = p_.nvls_efficiency * intra_bytes_per_s_ * n / (n + 1.0);
    t.bus_bytes_per_s = algbw * bus_bandwidth_factor(c_, n);
    t.latency_us = kNvlsLatencyUs;
    return t;
  }

  std::optional<Term> pat(NcclProto proto) const {
    const int n = g_.ranks, nodes = g_.nodes;
    if ((c_ != Collective::kAllGather && c_ != Collective::kReduceScatter) || proto != NcclProto::kSimple ||
        nodes < 2 || g_.ranks_per_node != 1) {
      return std::nullopt;
    }
    Term t;
    double bw = intra_bytes_per_s_;
    const double inter = inter_group_bytes_per_s(1);
    if (inter <= bw) t.tier = LinkTier::kInterNode;
    bw = std::min(bw, inter);
    t.bus_bytes_per_s = kPatBandwidthFactor * bw;
    const double net_step = us_max(kPatNetLatencyUs, p_.inter_latency);
    t.latency_us = kPatBaseLatencyUs + floor_log2(nodes) * net_step / kPatLogDivisor + n * kPatPerRankUs;
    return t;
  }

  // The size of a uniform all-to-all that takes as long on the wire as
  // `intra` bytes per rank over NVLink/PCIe and `inter` bytes per rank off
  // the node (see all_to_all_equivalent_bytes): the same per-byte link
  // costs as p2p's all-to-all branch.
  double a2a_equivalent(double intra, double inter) const {
    const int n = g_.ranks, per_node = g_.ranks_per_node, nodes = g_.nodes;
    const double out_rate = nodes > 1 ? inter_group_bytes_per_s(per_node) : 0;
    const double intra_s = intra / intra_bytes_per_s_;
    const double inter_s = nodes > 1 ? per_node * inter / out_rate : 0;
    const double intra_per_size = (per_node - 1) / (n * intra_bytes_per_s_);
    const double inter_per_size =
        nodes > 1 ? static_cast<double>(per_node) * (n - per_node) / (n * out_rate) : 0;
    const double per_size = std::max(intra_per_size, inter_per_size);
    return per_size > 0 ? std::max(intra_s, inter_s) / per_size : 0;
  }

  std::optional<Term> p2p(NcclProto proto) const {
    const int n = g_.ranks, nodes = g_.nodes, per_node = g_.ranks_per_node;
    if (proto == NcclProto::kLL128) return std::nullopt;  // NCCL p2p uses LL or Simple
    Term t;
    const double intra_step = us_max(kRingStepLatencyUs[hi(intra_hw_)][pi(proto)], p_.intra_latency);
    const double inter_step = us_max(kRingStepLatencyUs[hi(Hw::kNet)][pi(proto)], p_.inter_latency);
    double bw = 0;
    if (c_ == Collective::kSendRecv) {
      // nccl-tests sendrecv: each rank sends `size` to the next.  Only one
      // rank per node sends off-node, through its own rail.
      bw = intra_bytes_per_s_;
      if (nodes > 1) {
        const double inter = inter_group_bytes_per_s(1);
        if (inter <= bw) t.tier = LinkTier::kInterNode;
        bw = std::min(bw, inter);
      }
      t.latency_us = kRingBaseLatencyUs[pi(proto)] + (nodes > 1 ? inter_step : intra_step);
    } else {
      // All-to-all: each rank sends size/n to every rank.  Per rank
      // (r-1)/n * size stays on the node; per node r(n-r)/n * size leaves it.
      const double intra_s_per_byte = (per_node - 1) / (n * intra_bytes_per_s_);
      double inter_s_per_byte = 0;
      if (nodes > 1) {
        inter_s_per_byte = static_cast<double>(per_node) * (n - per_node) /
                           (n * inter_group_bytes_per_s(per_node));
      }
      if (inter_s_per_byte >= intra_s_per_byte) t.tier = LinkTier::kInterNode;
      bw = bus_bandwidth_factor(c_, n) / std::max(intra_s_per_byte, inter_s_per_byte);
      t.latency_us = kRingBaseLatencyUs[pi(proto)] +
                     ceil_div(per_node - 1, kP2pPeersPerBatch) * intra_step +
                     ceil_div(n - per_node, kP2pPeersPerBatch) * inter_step;
    }
    t.bus_bytes_per_s = protocol_bandwidth(proto, bw, 1.0);
    return t;
  }

 private:
  // NCCL enables LL128 only where the intra-node path is NVLink.
  bool protocol_enabled(NcclProto proto) const {
    return proto != NcclProto::kLL128 || p_.intra_fabric != IntraFabric::kPcie;
  }

  double protocol_bandwidth(NcclProto proto, double bw, double ll128_factor) const {
    switch (proto) {
      case NcclProto::kLL: return std::min(bw * kRingLlFactor, ll_max_bytes_per_s());
      case NcclProto::kLL128: return bw * ll128_factor;
      case NcclProto::kSimple: return bw;
    }
    return bw;
  }

  double ll_max_bytes_per_s() const {
    if (g_.nodes == 1) return p_.ll_max_bus_bandwidth_1node.bytes_per_s();
    if (g_.nodes == 2) return p_.ll_max_bus_bandwidth_2nodes.bytes_per_s();
    return p_.ll_max_bus_bandwidth_many_nodes.bytes_per_s();
  }

  // Bandwidth of the node NICs a group with `per_node` ranks on each node can
  // use: rail-optimized, each GPU owns nics/gpus NICs, and a lone GPU at least
  // one; crossing leaves divides by the oversubscription.
  double inter_group_bytes_per_s(int per_node) const {
    const double nics_per_gpu = static_cast<double>(p_.nics_per_node) / p_.gpus_per_node;
    const double nics = std::min(static_cast<double>(p_.nics_per_node),
                                 std::max(1.0, per_node * nics_per_gpu));
    double bw = nics * p_.nic_bandwidth.bytes_per_s() * p_.inter_efficiency;
    if (g_.crosses_leaf) bw /= p_.oversubscription;
    return bw;
  }

  double tree_correction(NcclProto proto) const {
    if (size_ < 64) return 1.0;
    const int index = floor_log2(static_cast<int>(std::min<Bytes>(size_ >> 6, 1 << 30)));
    return index < kTreeCorrectionEntries ? kTreeCorrection[pi(proto)][index] : 1.0;
  }

  Collective c_;
  Bytes size_;
  GroupPlacement g_;
  LinkParams p_;
  Hw intra_hw_;
  double intra_bytes_per_s_;
};

void check_inputs(Bytes size, const GroupPlacement& g, const LinkParams& p) {
  TRAINPLAN_CHECK(size >= 0, "collective size must be >= 0, got " + std::to_string(size));
  TRAINPLAN_CHECK(g.ranks >= 1 && g.nodes >= 1 && g.ranks_per_node >= 1 &&
                      g.ranks == g.nodes * g.ranks_per_node,
                  "bad group placement: ranks " + std::to_string(g.ranks) + ", nodes " +
                      std::to_string(g.nodes) + ", ranks per node " + std::to_string(g.ranks_per_node));
  TRAINPLAN_CHECK(p.gpus_per_node >= 1 && g.ranks_per_node <= p.gpus_per_node,
                  "group has " + std::to_string(g.ranks_per_node) + " ranks per node but a node has " +
                      std::to_string(p.gpus_per_node) + " GPUs");
  TRAINPLAN_CHECK(p.intra_bandwidth.bytes_per_s() > 0 && p.intra_efficiency > 0,
                  "intra-node bandwidth must be positive");
  TRAINPLAN_CHECK(g.nodes == 1 || (p.nics_per_node > 0 && p.nic_bandwidth.bytes_per_s() > 0 &&
                                   p.inter_efficiency > 0),
                  "a group spanning nodes needs an inter-node network (ranks " + std::to_string(g.ranks) + ", nodes " +
                      std::to_string(g.nodes) + ")");
  TRAINPLAN_CHECK(p.oversubscription >= 1.0, "oversubscription must be >= 1");
}

CollectiveCost make_cost(Collective c, Bytes size, const GroupPlacement& g, const LinkParams& p,
                         NcclAlgo algo, NcclProto proto, const Term& t) {
  CollectiveCost cost;
  cost.algo = algo;
  cost.proto = proto;
  cost.latency = Duration::microseconds(t.latency_us) + p.call_overhead;
  cost.bus_bandwidth = Bandwidth::bytes_per_s(t.bus_bytes_per_s);
  cost.wire_bytes_per_rank = bus_bandwidth_factor(c, g.ranks) * static_cast<double>(size);
  cost.bottleneck = t.tier;
  cost.time = cost.latency;
  if (cost.wire_bytes_per_rank > 0) cost.time += cost.wire_bytes_per_rank / cost.bus_bandwidth;
  return cost;
}

bool uses_p2p(Collective c) { return c == Collective::kAllToAll || c == Collective::kSendRecv; }

constexpr NcclAlgo kAlgoOrder[] = {NcclAlgo::kRing, NcclAlgo::kTree, NcclAlgo::kNvls, NcclAlgo::kP2p, NcclAlgo::kPat};
constexpr NcclProto kProtoOrder[] = {NcclProto::kLL, NcclProto::kLL128, NcclProto::kSimple};

std::vector<CollectiveCost> candidates(Collective c, Bytes size, const GroupPlacement& g,
                                       const LinkParams& p, const AlgoFilter& filter) {
  check_inputs(size, g, p);
  std::vector<CollectiveCost> out;
  const auto allowed = [&](NcclAlgo a, NcclProto pr) {
    return (!filter.algo || *filter.algo == a) && (!filter.proto || *filter.proto == pr);
  };
  // Nothing to move: NCCL returns at once (a one-rank collective is at most
  // a local copy, which we do not charge).
  if (size == 0 || g.ranks == 1) {
    const NcclAlgo algo = uses_p2p(c) ? NcclAlgo::kP2p : NcclAlgo::kRing;
    if (allowed(algo, NcclProto::kSimple)) {
      CollectiveCost cost;
      cost.algo = algo;
      cost.proto = NcclProto::kSimple;
      cost.bus_bandwidth = Bandwidth::bytes_per_s(p.intra_bandwidth.bytes_per_s() * p.intra_efficiency);
      out.push_back(cost);
    }
    return out;
  }
  const Model model(c, size, g, p);
  for (NcclAlgo algo : kAlgoOrder) {
    if (uses_p2p(c) != (algo == NcclAlgo::kP2p)) continue;
    for (NcclProto proto : kProtoOrder) {
      if (!allowed(algo, proto)) continue;
      std::optional<Term> term;
      switch (algo) {
        case NcclAlgo::kRing: term = model.ring(proto); break;
        case NcclAlgo::kTree: term = model.tree(proto); break;
        case NcclAlgo::kNvls: term = model.nvls(proto); break;
        case NcclAlgo::kP2p: term = model.p2p(proto); break;
        case NcclAlgo::kPat: term = model.pat(proto); break;
      }
      if (term) out.push_back(make_cost(c, size, g, p, algo, proto, *term));
    }
  }
  return out;
}

std::optional<CollectiveCost> cheapest(const std::vector<CollectiveCost>& all) {
  std::optional<CollectiveCost> best;
  for (const CollectiveCost& cost : all) {
    if (!best || cost.time < best->time) best = cost;  // strict: earlier wins ties
  }
  return best;
}

Generation generation_of(const ClusterSpec& cluster) {
  switch (cluster.gpu.arch) {
    case GpuArch::kBlackwell: return Generation::kBlackwell;
    case GpuArch::kHopper: return Generation::kHopper;
    case GpuArch::kAmpere:
    case GpuArch::kAda: return Generation::kAmpere;
    case GpuArch::kVolta: return Generation::kVolta;
    case GpuArch::kUnknown:
    case GpuArch::kCpu: break;
  }
  // Unknown name: NVLink 5 gives 900 GB/s per GPU, NVLink 4 450 GB/s.
  const double gb_per_s = cluster.intra_node.bandwidth.gigabytes_per_s();
  if (cluster.intra_node.fabric != IntraFabric::kPcie && gb_per_s >= 800) return Generation::kBlackwell;
  if (cluster.intra_node.fabric != IntraFabric::kPcie && gb_per_s >= 400) return Generation::kHopper;
  return Generation::kAmpere;
}

}  // namespace

const char* to_string(Collective c) {
  switch (c) {
    case Collective::kAllReduce: return "all_reduce";
    case Collective::kAllGather: return "all_gather";
    case Collective::kReduceScatter: return "reduce_scatter";
    case Collective::kAllToAll: return "all_to_all";
    case Collective::kBroadcast: return "broadcast";
    case Collective::kSendRecv: return "send_recv";
  }
  return "?";
}

const char* to_string(NcclAlgo a) {
  switch (a) {
    case NcclAlgo::kRing: return "Ring";
    case NcclAlgo::kTree: return "Tree";
    case NcclAlgo::kNvls: return "NVLS";
    case NcclAlgo::kP2p: return "P2P";
    case NcclAlgo::kPat: return "PAT";
  }
  return "?";
}

const char* to_string(NcclProto p) {
  switch (p) {
    case NcclProto::kLL: return "LL";
    case NcclProto::kLL128: return "LL128";
    case NcclProto::kSimple: return "Simple";
  }
  return "?";
}

const char* to_string(LinkTier t) {
  switch (t) {
    case LinkTier::kIntraNode: return "intra_node";
    case LinkTier::kInterNode: return "inter_node";
  }
  return "?";
}

double bus_bandwidth_factor(Collective c, int ranks) {
  TRAINPLAN_CHECK(ranks >= 1, "ranks must be >= 1, got " + std::to_string(ranks));
  const double n = ranks;
  switch (c) {
    case Collective::kAllReduce: return 2.0 * (n - 1) / n;
    case Collective::kAllGather:
    case Collective::kReduceScatter:
    case Collective::kAllToAll: return (n - 1) / n;
    case Collective::kBroadcast:
    case Collective::kSendRecv: return 1.0;
  }
  return 1.0;
}

GroupPlacement group_placement(int ranks, int ranks_per_node, const ClusterSpec& cluster) {
  TRAINPLAN_CHECK(ranks >= 1 && ranks_per_node >= 1 && ranks_per_node <= cluster.gpus_per_node &&
                      ranks % ranks_per_node == 0,
                  "cannot place " + std::to_string(ranks) + " ranks at " + std::to_string(ranks_per_node) +
                      " per node on nodes of " + std::to_string(cluster.gpus_per_node) + " GPUs");
  GroupPlacement g;
  g.ranks = ranks;
  g.ranks_per_node = ranks_per_node;
  g.nodes = ranks / ranks_per_node;
  g.crosses_leaf = cluster.inter_node && cluster.inter_node->nodes_per_leaf > 0 &&
                   g.nodes > cluster.inter_node->nodes_per_leaf;
  return g;
}

GroupPlacement strided_group_placement(int ranks, int stride, const ClusterSpec& cluster, int block) {
  TRAINPLAN_CHECK(ranks >= 1 && stride >= 1 && block >= 1 && ranks % block == 0 && (stride >= block || ranks == block),
                  "cannot place " + std::to_string(ranks) + " ranks in blocks of " + std::to_string(block) + " " +
                      std::to_string(stride) + " apart");
  const int64_t gpn = std::max(1, cluster.gpus_per_node);
  // Where the members really sit, from global rank 0: the nodes they span
  // and the most one node holds.
  int spanned = 0, fullest = 0, on_node = 0;
  int64_t node = -1;
  for (int64_t b = 0; b < ranks / block; ++b) {
    for (int64_t t = 0; t < block; ++t) {
      const int64_t n = (b * stride + t) / gpn;
      if (n != node) {
        node = n;
        ++spanned;
        on_node = 0;
      }
      fullest = std::max(fullest, ++on_node);
    }
  }
  // The largest even split with no more on a node than really share one
  // and over no fewer nodes than they span: their own node count whenever
  // an even split of it exists.
  int per_node = std::max(1, std::min(fullest, ranks / spanned));
  while (ranks % per_node != 0) --per_node;
  return group_placement(ranks, per_node, cluster);
}

LinkParams link_params(const ClusterSpec& cluster) {
  const Generation gen = generation_of(cluster);
  LinkParams p;
  p.intra_fabric = cluster.intra_node.fabric;
  p.intra_bandwidth = cluster.intra_node.bandwidth;
  p.intra_latency = cluster.intra_node.latency;
  p.gpus_per_node = cluster.gpus_per_node;
  if (p.intra_fabric == IntraFabric::kPcie) {
    p.intra_efficiency = 0.75;  // NCCL PCI bandwidth = width * speed / 80: 75% of line rate
  } else {
    // NCCL SM{70,80}_NVLINK_BW 20.0, SM90 20.6 of 25 GB/s per link; SM100 40.1 of 50.
    p.intra_efficiency = gen == Generation::kHopper      ? 20.6 / 25.0
                         : gen == Generation::kBlackwell ? 40.1 / 50.0
                                                         : 20.0 / 25.0;
  }
  const bool nvls_gen = gen == Generation::kHopper || gen == Generation::kBlackwell;
  p.nvls = cluster.intra_node.nvls && p.intra_fabric == IntraFabric::kNvswitch && nvls_gen;
  p.nvls_efficiency = gen == Generation::kBlackwell ? 0.74 : 0.85;
  p.nvls_min_ranks = gen == Generation::kBlackwell ? 6 : 5;
  switch (gen) {
    case Generation::kVolta: p.ll_max_bus_bandwidth_1node = Bandwidth::gigabytes_per_s(39.0); break;
    case Generation::kAmpere: p.ll_max_bus_bandwidth_1node = Bandwidth::gigabytes_per_s(87.7); break;
    case Generation::kHopper: p.ll_max_bus_bandwidth_1node = Bandwidth::gigabytes_per_s(141.0); break;
    case Generation::kBlackwell: p.ll_max_bus_bandwidth_1node = Bandwidth::gigabytes_per_s(282.0); break;
  }
  p.calibrated = cluster.calibrated_collectives;
  if (cluster.inter_node) {
    const InterNodeSpec& net = *cluster.inter_node;
    p.nics_per_node = net.nics_per_node;
    p.nic_bandwidth = net.nic_bandwidth;
    p.inter_latency = net.latency;
    p.oversubscription = net.oversubscription;
    p.inter_efficiency = net.efficiency;  // the cluster's figure (default_nic_efficiency)
  }
  return p;
}

namespace {

// A calibrated alpha-beta fit for this collective and scope, if any.
std::optional<CollectiveCost> calibrated_cost(Collective c, Bytes size, const GroupPlacement& g, const LinkParams& p) {
  const bool inter = g.nodes > 1;
  for (const CalibratedCollective& k : p.calibrated) {
    if (k.collective != c || k.inter_node != inter) continue;
    CollectiveCost cost;
    cost.algo = c == Collective::kAllToAll || c == Collective::kSendRecv ? NcclAlgo::kP2p : NcclAlgo::kRing;
    cost.proto = NcclProto::kSimple;
    cost.latency = k.latency;
    cost.bus_bandwidth = k.bus_bandwidth;
    cost.wire_bytes_per_rank = bus_bandwidth_factor(c, g.ranks) * static_cast<double>(size);
    cost.time = cost.latency + cost.wire_bytes_per_rank / cost.bus_bandwidth;
    const double factor = k.ranks > 0 ? bus_bandwidth_factor(c, k.ranks) : 0;
    if (k.size_time.size() >= 2 && factor > 0 && cost.wire_bytes_per_rank > 0) {
      // Inside the measured range the curve itself (log-log between the
      // neighbouring sizes), compared at equal bytes per rank on the wire so
      // that it carries to other group sizes as the fit does: a fit's
      // residual is structure (a protocol switch, the cache) a line misses.
      const double x = cost.wire_bytes_per_rank / factor;  // the size of a k.ranks group with these wire bytes
      const auto& pts = k.size_time;
      if (x >= pts.front().first && x <= pts.back().first) {
        size_t i = 1;
        while (i + 1 < pts.size() && pts[i].first < x) ++i;
        const auto& [x0, t0] = pts[i - 1];
        const auto& [x1, t1] = pts[i];
        const double w = x1 > x0 ? std::log(x / x0) / std::log(x1 / x0) : 0;
        const double t = std::exp(std::log(t0) + w * (std::log(t1) - std::log(t0)));
        // Keep time == latency + wire / bus_bandwidth: the fit's latency
        // (at most the time) and the rate that completes the curve's time.
        cost.latency = std::min(k.latency, Duration::seconds(t));
        const Duration rest = Duration::seconds(t) - cost.latency;
        cost.bus_bandwidth = rest.ps() > 0 ? Bandwidth::bytes_per_s(cost.wire_bytes_per_rank / rest.s())
                                           : Bandwidth::bytes_per_s(cost.wire_bytes_per_rank * 1e12);
        cost.time = cost.latency + cost.wire_bytes_per_rank / cost.bus_bandwidth;
      }
    }
    cost.bottleneck = inter ? LinkTier::kInterNode : LinkTier::kIntraNode;
    return cost;
  }
  return std::nullopt;
}

}  // namespace

CollectiveCost collective_cost(Collective c, Bytes size, const GroupPlacement& g, const LinkParams& p) {
  if (auto k = calibrated_cost(c, size, g, p)) return *k;
  const std::optional<CollectiveCost> best = cheapest(candidates(c, size, g, p, AlgoFilter{}));
  TRAINPLAN_CHECK(best.has_value(), std::string("no algorithm for ") + to_string(c));
  return *best;
}

std::optional<CollectiveCost> collective_cost(Collective c, Bytes size, const GroupPlacement& g,
                                              const LinkParams& p, const AlgoFilter& filter) {
  return cheapest(candidates(c, size, g, p, filter));
}

std::vector<CollectiveCost> candidate_costs(Collective c, Bytes size, const GroupPlacement& g,
                                            const LinkParams& p) {
  return candidates(c, size, g, p, AlgoFilter{});
}

double all_to_all_equivalent_bytes(double intra_bytes, double inter_bytes, const GroupPlacement& g,
                                   const LinkParams& p) {
  if (g.ranks <= 1 || (intra_bytes <= 0 && inter_bytes <= 0)) return 0;
  return Model(Collective::kAllToAll, 1, g, p).a2a_equivalent(std::max(0.0, intra_bytes), std::max(0.0, inter_bytes));
}

Bandwidth reported_bus_bandwidth(const CollectiveCost& cost) {
  if (cost.time.ps() <= 0) return Bandwidth::bytes_per_s(0);
  return Bandwidth::bytes_per_s(cost.wire_bytes_per_rank / cost.time.s());
}

}  // namespace trainplan
