// Tests of the NCCL collective cost model against closed-form oracles and the
// published nccl-tests measurements of shared/reference (FORMULAS.md section 4,
// published_dev.json).  Every anchor states its source; tolerances are explicit.
#include "simulator/network/collective_model.h"

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <fstream>
#include <cstdlib>
#include <string>
#include <vector>

namespace trainplan {
namespace {

using Catch::Matchers::WithinAbs;
using Catch::Matchers::WithinRel;

constexpr double kKiB = 1024.0;
constexpr double kMiB = 1024.0 * kKiB;  // kGiB comes from units.h

Bytes bytes(double b) { return static_cast<Bytes>(b); }

// An 8-GPU NVSwitch node; `nvlink_gb_per_s` is per GPU per direction.
ClusterSpec node8(const std::string& gpu, double nvlink_gb_per_s, bool nvls) {
  ClusterSpec c;
  c.name = gpu + "-test";
  c.gpu.name = gpu;
  c.gpus_per_node = 8;
  c.intra_node.fabric = IntraFabric::kNvswitch;
  c.intra_node.bandwidth = Bandwidth::gigabytes_per_s(nvlink_gb_per_s);
  c.intra_node.nvls = nvls;
  return c;
}

ClusterSpec with_ib(ClusterSpec c, int nics, double nic_gbit_per_s, int nodes_per_leaf = 0,
                    double oversubscription = 1.0) {
  InterNodeSpec net;
  net.fabric = InterFabric::kInfiniband;
  net.nics_per_node = nics;
  net.nic_bandwidth = Bandwidth::gigabits_per_s(nic_gbit_per_s);
  net.nodes_per_leaf = nodes_per_leaf;
  net.oversubscription = oversubscription;
  c.inter_node = net;
  return c;
}

// DGX A100: NVLink3 + NVSwitch, 300 GB/s per GPU per direction; 8x HDR 200 Gb/s.
ClusterSpec dgx_a100() { return with_ib(node8("NVIDIA A100-SXM4-80GB", 300, false), 8, 200); }
// H100/H200 SXM: NVLink4 + NVSwitch, 450 GB/s, NVLS; 8x NDR 400 Gb/s.
ClusterSpec hgx_h100() { return with_ib(node8("NVIDIA H100 80GB HBM3", 450, true), 8, 400); }
ClusterSpec hgx_h200() { return with_ib(node8("NVIDIA H200", 450, true), 8, 400); }
// B200: NVLink5 + NVSwitch, 900 GB/s, NVLS.
ClusterSpec hgx_b200() { return node8("NVIDIA B200", 900, true); }

GroupPlacement one_node(int ranks) { return GroupPlacement{ranks, 1, ranks, false}; }
GroupPlacement nodes_of(int nodes, int per_node) {
  return GroupPlacement{nodes * per_node, nodes, per_node, false};
}

CollectiveCost forced(Collective c, double size, const GroupPlacement& g, const LinkParams& p,
                      NcclAlgo algo) {
  const std::optional<CollectiveCost> cost = collective_cost(c, bytes(size), g, p, AlgoFilter{algo, {}});
  REQUIRE(cost.has_value());
  return *cost;
}

double busbw_gb_per_s(const CollectiveCost& cost) { return reported_bus_bandwidth(cost).gigabytes_per_s(); }

}  // namespace

namespace {

// Oracle for strided_group_placement: brute force over a group's members
// b * stride + t (b < ranks / block, t < block) from global rank 0 on nodes
// of `gpn` GPUs (a group starting on a node boundary, as Megatron's rank
// order places every TP, CP, DP and model-parallel group of a whole-node
// job): the nodes it spans and the most members one node holds.  The even
// form never puts more ranks on a node than really share one, spans at
// least as many nodes, and exactly as many wherever an even split exists.
void check_placement_against_brute_force(int ranks, int stride, int block, const ClusterSpec& c) {
  const int gpn = c.gpus_per_node;
  std::vector<int> per_node;
  for (int b = 0; b < ranks / block; ++b) {
    for (int t = 0; t < block; ++t) {
      const int node = (b * stride + t) / gpn;
      if (node >= static_cast<int>(per_node.size())) per_node.resize(static_cast<size_t>(node) + 1, 0);
      ++per_node[static_cast<size_t>(node)];
    }
  }
  int spanned = 0, fullest = 0;
  for (int n : per_node) {
    spanned += n > 0;
    fullest = std::max(fullest, n);
  }
  const GroupPlacement g = strided_group_placement(ranks, stride, c, block);
  INFO("gpn " << gpn << " ranks " << ranks << " in blocks of " << block << " stride " << stride);
  CHECK(g.ranks == ranks);
  CHECK(g.nodes * g.ranks_per_node == ranks);
  CHECK(g.ranks_per_node <= fullest);
  CHECK(g.nodes >= spanned);
  if (ranks % spanned == 0 && ranks / spanned <= fullest) CHECK(g.nodes == spanned);
}

}  // namespace

TEST_CASE("strided_group_placement: an even form of where a strided group's ranks really sit", "[sim][network]") {
  const ClusterSpec c = dgx_a100();
  for (int stride : {1, 2, 3, 4, 6, 8, 16}) {
    for (int ranks = 1; ranks <= 48; ++ranks) check_placement_against_brute_force(ranks, stride, 1, c);
  }
  // The case that used to stop the lowering: 6 data-parallel ranks at tp 2.
  const GroupPlacement six = strided_group_placement(6, 2, c);
  CHECK(six.nodes == 2);
  CHECK(six.ranks_per_node == 3);
}

TEST_CASE("strided_group_placement: blocks of consecutive ranks, strided (a replica's model-parallel group)",
          "[sim][network]") {
  // The gradient-norm all-reduce groups the tp ranks of every pipeline
  // stage, stages tp*cp*dp apart; on nodes of 8 and of 64 GPUs (cpu-
  // local's).  The case that stopped the lowering: 3 stages of one rank on
  // one 64-rank node were placed on 3 nodes (a gcd of 3 and 64), and
  // cpu-local has no inter-node network.
  for (int gpn : {8, 64}) {
    ClusterSpec c = dgx_a100();
    c.gpus_per_node = gpn;
    for (int block : {1, 2, 4, 8}) {
      for (int blocks = 1; blocks <= 12; ++blocks) {
        for (int stride = block; stride <= 96; stride += block) {
          check_placement_against_brute_force(blocks * block, stride, block, c);
        }
      }
    }
  }
  ClusterSpec local = dgx_a100();
  local.gpus_per_node = 64;
  CHECK(strided_group_placement(3, 1, local, 1).nodes == 1);
}

TEST_CASE("bus_bandwidth_factor: nccl-tests PERFORMANCE.md factors", "[sim][network]") {
  // doc/PERFORMANCE.md: all-reduce moves 2(n-1)/n of the buffer through each
  // rank's link (reduce-scatter then all-gather), all-gather / reduce-scatter
  // (n-1)/n, all-to-all (n-1)/n (nothing is sent to oneself), broadcast and
  // send/recv 1.
  SECTION("eight ranks") {
    CHECK_THAT(bus_bandwidth_factor(Collective::kAllReduce, 8), WithinAbs(1.75, 1e-12));
    CHECK_THAT(bus_bandwidth_factor(Collective::kAllGather, 8), WithinAbs(0.875, 1e-12));
    CHECK_THAT(bus_bandwidth_factor(Collective::kReduceScatter, 8), WithinAbs(0.875, 1e-12));
    CHECK_THAT(bus_bandwidth_factor(Collective::kAllToAll, 8), WithinAbs(0.875, 1e-12));
    CHECK_THAT(bus_bandwidth_factor(Collective::kBroadcast, 8), WithinAbs(1.0, 1e-12));
    CHECK_THAT(bus_bandwidth_factor(Collective::kSendRecv, 8), WithinAbs(1.0, 1e-12));
  }
  SECTION("two ranks and one rank") {
    CHECK_THAT(bus_bandwidth_factor(Collective::kAllReduce, 2), WithinAbs(1.0, 1e-12));
    CHECK_THAT(bus_bandwidth_factor(Collective::kAllGather, 2), WithinAbs(0.5, 1e-12));
    CHECK(bus_bandwidth_factor(Collective::kAllReduce, 1) == 0.0);
    CHECK(bus_bandwidth_factor(Collective::kReduceScatter, 1) == 0.0);
  }
}

TEST_CASE("collective_cost: DGX A100 one-node all-reduce", "[sim][network]") {
  const LinkParams p = link_params(dgx_a100());
  const GroupPlacement g = one_node(8);

  SECTION("16 GiB busbw within 5% of the measured 234.9 GB/s") {
    // Bandwidth-bound: NCCL's A100 NVLink is 12 links x 20 GB/s (topo.h
    // SM80_NVLINK_BW) = 0.8 x 300 = 240 GB/s ring busbw; the 56 us latency is
    // 0.04% of 125 ms.  Measured: nccl_a100_node_allreduce_curve, 234.89 GB/s.
    const CollectiveCost cost = collective_cost(Collective::kAllReduce, bytes(16 * kGiB), g, p);
    CHECK(cost.algo == NcclAlgo::kRing);
    CHECK(cost.proto == NcclProto::kSimple);
    CHECK_THAT(busbw_gb_per_s(cost), WithinRel(234.89, 0.05));
  }

  SECTION("latency-bound region of the measured curve") {
    // The published curve (nccl-tests -g 8: one thread drives all 8 GPUs) is
    // flat at 32 KiB: 1.31 GB/s busbw = 32 KiB / (1.31/1.75 GB/s) = 43.8 us per
    // call, against NCCL's own 15.7 us.  That host-side floor is the model's
    // call_overhead; it is calibrated from the 32 KiB row alone and then the
    // 1 MiB / 8 MiB / 128 MiB rows are predicted.
    const double measured_32k_us = 32 * kKiB / (1.31e9 / 1.75) * 1e6;
    const CollectiveCost bare = collective_cost(Collective::kAllReduce, bytes(32 * kKiB), g, p);
    LinkParams tuned = p;
    tuned.call_overhead = Duration::microseconds(measured_32k_us - bare.time.us());
    CHECK_THAT(tuned.call_overhead.us(), WithinAbs(28.1, 0.5));

    // 8 MiB: Ring/LL128, 40.6 us + 8 MiB / (0.92 x 240 x 8/14 GB/s) = 107 us,
    // + 28 us floor -> 108.6 GB/s; measured 109.93.
    const CollectiveCost mid = collective_cost(Collective::kAllReduce, bytes(8 * kMiB), g, tuned);
    CHECK(mid.proto == NcclProto::kLL128);
    CHECK_THAT(busbw_gb_per_s(mid), WithinRel(109.93, 0.25));

    // 128 MiB: Ring/Simple, 56 + 28 us + 134 MB / 137 GB/s -> 221 GB/s;
    // measured 176.92.  The measured curve climbs slowly from 64 MiB to
    // 512 MiB (171 -> 223 GB/s), a shape no latency + size/bandwidth model
    // reproduces, so the prediction sits at the edge of the 25% band.
    const CollectiveCost big = collective_cost(Collective::kAllReduce, bytes(128 * kMiB), g, tuned);
    CHECK(big.proto == NcclProto::kSimple);
    CHECK_THAT(busbw_gb_per_s(big), WithinRel(176.92, 0.25));

    // 1 MiB: NCCL's model picks Ring/LL (llMaxBws Ampere 87.7 GB/s busbw):
    // 15 us + 21 us + 28 us = 64 us -> 28.7 GB/s, but the published run took
    // 102 us (18.0 GB/s).  Known deviation, kept visible: the model is
    // optimistic here by less than 1.75x.
    const CollectiveCost small = collective_cost(Collective::kAllReduce, bytes(1 * kMiB), g, tuned);
    CHECK(small.proto == NcclProto::kLL);
    const double ratio = busbw_gb_per_s(small) / 18.0;
    CHECK(ratio >= 1.0);
    CHECK(ratio <= 1.75);
  }
}

TEST_CASE("collective_cost: H200 / B200 node, NVLS and ring", "[sim][network]") {
  // Source: nccl_h200_node_collectives_16GiB, nccl_h200_node_allreduce_curve_nvls,
  // nccl_b200_node_allreduce_8GiB (NCCL 2.27.7).  Ring busbw = NCCL's Hopper
  // NVLink 18 x 20.6 GB/s = 370.8 GB/s.  NVLS algbw = nvlsEfficiency x 370.8 x
  // n/(n+1): each GPU's link carries S(n+1)/n (whole buffer to the switch,
  // reduced shard back), so busbw = 0.85 x 370.8 x 8/9 x 14/8 = 490 GB/s.
  const LinkParams p = link_params(hgx_h200());

  SECTION("NVLS all-reduce at 16 GiB ~480 GB/s busbw") {
    const CollectiveCost cost = collective_cost(Collective::kAllReduce, bytes(16 * kGiB), one_node(8), p);
    CHECK(cost.algo == NcclAlgo::kNvls);
    CHECK_THAT(busbw_gb_per_s(cost), WithinRel(480.0, 0.05));
    CHECK_THAT(busbw_gb_per_s(cost), WithinRel(482.26, 0.05));
  }

  SECTION("ring all-reduce, all-gather and reduce-scatter at 16 GiB ~362-367 GB/s") {
    const GroupPlacement g = one_node(8);
    CHECK_THAT(busbw_gb_per_s(forced(Collective::kAllReduce, 16 * kGiB, g, p, NcclAlgo::kRing)),
               WithinRel(367.2, 0.05));
    const CollectiveCost ag = collective_cost(Collective::kAllGather, bytes(16 * kGiB), g, p);
    const CollectiveCost rs = collective_cost(Collective::kReduceScatter, bytes(16 * kGiB), g, p);
    CHECK(ag.algo == NcclAlgo::kRing);  // NVLS is all-reduce only here
    CHECK(rs.algo == NcclAlgo::kRing);
    CHECK_THAT(busbw_gb_per_s(ag), WithinRel(361.4, 0.05));
    CHECK_THAT(busbw_gb_per_s(rs), WithinRel(362.9, 0.05));
  }

  SECTION("NVLS gain against GPU count at 8 GiB, off below 5 GPUs") {
    // Measured busbw: 4 GPUs 363.3 (ring), 5: 414.2, 6: 435.6, 7: 460.0, 8: 473.1.
    const double measured[] = {363.3, 414.2, 435.6, 460.0, 473.1};
    for (int n = 4; n <= 8; ++n) {
      const CollectiveCost cost = collective_cost(Collective::kAllReduce, bytes(8 * kGiB), one_node(n), p);
      INFO("ranks " << n);
      CHECK((cost.algo == NcclAlgo::kNvls) == (n >= 5));
      CHECK_THAT(busbw_gb_per_s(cost), WithinRel(measured[n - 4], 0.05));
    }
  }

  SECTION("B200: NVLS 838 GB/s, ring 682 GB/s, NVLS only from 6 GPUs") {
    // NCCL SM100 NVLink 18 x 40.1 = 721.8 GB/s, nvlsEfficiency 0.74:
    // 0.74 x 721.8 x 8/9 x 1.75 = 831 GB/s.  The ring prediction (720) is 5.5%
    // above the measured 682.2 (NCCL's 80.2% of line rate vs 75.8% measured),
    // hence the 8% band there.
    const LinkParams b = link_params(hgx_b200());
    CHECK(b.nvls_min_ranks == 6);
    const CollectiveCost nvls = collective_cost(Collective::kAllReduce, bytes(8 * kGiB), one_node(8), b);
    CHECK(nvls.algo == NcclAlgo::kNvls);
    CHECK_THAT(busbw_gb_per_s(nvls), WithinRel(838.0, 0.05));
    CHECK_THAT(busbw_gb_per_s(forced(Collective::kAllReduce, 8 * kGiB, one_node(8), b, NcclAlgo::kRing)),
               WithinRel(682.2, 0.08));
    const CollectiveCost four = collective_cost(Collective::kAllReduce, bytes(8 * kGiB), one_node(4), b);
    CHECK(four.algo == NcclAlgo::kRing);
    CHECK_THAT(busbw_gb_per_s(four), WithinRel(673.2, 0.08));
    CHECK(collective_cost(Collective::kAllReduce, bytes(8 * kGiB), one_node(5), b).algo == NcclAlgo::kRing);
  }
}

TEST_CASE("collective_cost: multi-node all-reduce is bounded by the node NICs", "[sim][network]") {
  SECTION("DGX A100, 8x HDR 200 Gb/s: ~192 GB/s busbw (nccl#812)") {
    // Each ring enters and leaves a node once, so the node's 8 NICs carry what
    // one rank sends: busbw = min(NVLink 240, 8 x 25 GB/s x 0.95) = 190 GB/s.
    // Four nodes so that Ring, not the two-node Tree, is NCCL's choice.
    const LinkParams p = link_params(dgx_a100());
    const CollectiveCost cost = collective_cost(Collective::kAllReduce, bytes(16 * kGiB), nodes_of(4, 8), p);
    CHECK(cost.algo == NcclAlgo::kRing);
    CHECK(cost.bottleneck == LinkTier::kInterNode);
    CHECK_THAT(cost.bus_bandwidth.gigabytes_per_s(), WithinRel(192.0, 0.05));
    CHECK_THAT(busbw_gb_per_s(cost), WithinRel(192.0, 0.05));
  }

  SECTION("A100, 4x HDR per node over 3 nodes: ~96 GB/s peak (nccl-tests#119, user report)") {
    ClusterSpec c = dgx_a100();
    c.inter_node->nics_per_node = 4;
    const CollectiveCost cost =
        forced(Collective::kAllReduce, 4 * kGiB, nodes_of(3, 8), link_params(c), NcclAlgo::kRing);
    CHECK_THAT(cost.bus_bandwidth.gigabytes_per_s(), WithinRel(96.0, 0.05));
  }

  SECTION("two-node Tree may exceed the NIC limit (only S crosses each node's NICs)") {
    const LinkParams p = link_params(dgx_a100());
    const CollectiveCost cost = collective_cost(Collective::kAllReduce, bytes(4 * kGiB), nodes_of(2, 8), p);
    CHECK(cost.algo == NcclAlgo::kTree);
    CHECK(busbw_gb_per_s(cost) > 200.0);  // above 8 x 25 GB/s line rate
  }
}

TEST_CASE("collective_cost: a ring all-gather over 192 nodes with small shards is latency-bound", "[sim][network]") {
  // A ring all-gather takes n-1 dependent steps whatever the size (NCCL
  // tuning.cc: nsteps = nRanks-1, of which nNodes-1 cross the network); with
  // a fixed 64 MiB output the shard per rank shrinks as 1/n, so past a few
  // hundred ranks the step latencies, not the bytes, set the time: on DGX
  // A100 nodes (8 GPUs, 8x HDR) each step costs at least NCCL's Simple
  // NVLink step latency (3.4 us) and a network step 14 us.
  const LinkParams p = link_params(dgx_a100());
  const auto ring_ag = [&](int nodes) {
    const auto cost = collective_cost(Collective::kAllGather, bytes(64 * kMiB), nodes_of(nodes, 8), p,
                                      AlgoFilter{NcclAlgo::kRing, NcclProto::kSimple});
    REQUIRE(cost.has_value());
    return *cost;
  };
  const CollectiveCost n48 = ring_ag(48), n96 = ring_ag(96), n192 = ring_ag(192);
  const int ranks = 192 * 8;
  // Closed form of the latency floor: (n - N) intra steps + (N - 1) network steps.
  CHECK(n192.latency.us() >= (ranks - 192) * 3.4 + 191 * 14.0);
  // Latency-bound: the step latencies are most of the time ...
  CHECK(n192.latency.s() > 0.5 * n192.time.s());
  // ... and at fixed bytes the time grows with the group: the bandwidth term
  // is the same ((n-1)/n x 64 MiB at the NIC-bound busbw), the latency
  // doubles with n.
  CHECK(n96.time.s() > 1.3 * n48.time.s());
  CHECK(n192.time.s() > 1.5 * n96.time.s());
  CHECK_THAT(n192.wire_bytes_per_rank / n48.wire_bytes_per_rank, WithinRel(1.0, 0.01));
}

TEST_CASE("collective_cost: PAT for all-gather and reduce-scatter with one GPU per node", "[sim][network]") {
  // NCCL 2.23+ tuning.cc: PAT only for AG/RS, Simple, nNodes == nRanks;
  // latency 8 + log2(N) x 14/3.5 + 2.8 x N us, bus bandwidth 0.75 x the ring's.
  // Ring with one rank per node pays a 14 us network step per rank.
  const LinkParams p = link_params(dgx_a100());
  const GroupPlacement g = nodes_of(192, 1);
  const auto pat = collective_cost(Collective::kAllGather, bytes(1 * kMiB), g, p, AlgoFilter{NcclAlgo::kPat, {}});
  REQUIRE(pat.has_value());
  CHECK(pat->proto == NcclProto::kSimple);
  CHECK_THAT(pat->latency.us() - p.call_overhead.us(), WithinRel(8.0 + 7 * 14.0 / 3.5 + 2.8 * 192, 1e-9));
  const auto ring = collective_cost(Collective::kAllGather, bytes(1 * kMiB), g, p,
                                    AlgoFilter{NcclAlgo::kRing, NcclProto::kSimple});
  REQUIRE(ring.has_value());
  CHECK_THAT(pat->bus_bandwidth.bytes_per_s() / ring->bus_bandwidth.bytes_per_s(), WithinRel(0.75, 1e-9));
  // Small: PAT's logarithmic latency wins; large: the ring's bandwidth does.
  CHECK(collective_cost(Collective::kAllGather, bytes(1 * kMiB), g, p).algo == NcclAlgo::kPat);
  CHECK(collective_cost(Collective::kReduceScatter, bytes(1 * kMiB), g, p).algo == NcclAlgo::kPat);
  CHECK(collective_cost(Collective::kAllGather, bytes(16 * kGiB), g, p).algo == NcclAlgo::kRing);
  // Not for all-reduce, nor for groups with several GPUs per node.
  CHECK(!collective_cost(Collective::kAllReduce, bytes(1 * kMiB), g, p, AlgoFilter{NcclAlgo::kPat, {}}).has_value());
  CHECK(!collective_cost(Collective::kAllGather, bytes(1 * kMiB), nodes_of(24, 8), p, AlgoFilter{NcclAlgo::kPat, {}})
             .has_value());
}

TEST_CASE("collective_cost: a cluster's NIC efficiency sets the inter-node rate", "[sim][network]") {
  // One rank per node: the ring crosses one NIC per node and direction, so its
  // bus bandwidth is line rate x efficiency (closed form, no NVLink step).
  // Jean Zay's Omni-Path: 100 Gb/s x 0.41 = 5.125 GB/s, the rate NCCL
  // measured there (40.55 Gb/s busbw per NIC; topologies/jean-zay-a100.json).
  const ClusterSpec jz = load_cluster("jean-zay-a100");
  const CollectiveCost ar = forced(Collective::kAllReduce, 4 * kGiB, nodes_of(4, 1), link_params(jz), NcclAlgo::kRing);
  CHECK(ar.bottleneck == LinkTier::kInterNode);
  CHECK_THAT(ar.bus_bandwidth.gigabytes_per_s(), WithinRel(12.5 * 0.41, 1e-9));
  // The same fabric at the RDMA default runs 0.95 / 0.41 times faster.
  ClusterSpec nominal = jz;
  nominal.inter_node->efficiency = 0.95;
  const CollectiveCost fast =
      forced(Collective::kAllReduce, 4 * kGiB, nodes_of(4, 1), link_params(nominal), NcclAlgo::kRing);
  CHECK_THAT(fast.bus_bandwidth.gigabytes_per_s(), WithinRel(12.5 * 0.95, 1e-9));
}

TEST_CASE("collective_cost: H100 with 8x NDR 400 Gb/s", "[sim][network]") {
  const LinkParams p = link_params(hgx_h100());

  SECTION("46-48 GB/s per NIC (nccl-tests#290)") {
    // One rank per node uses its own rail NIC: 50 GB/s x 0.95 = 47.5 GB/s.
    const CollectiveCost ar = forced(Collective::kAllReduce, 4 * kGiB, nodes_of(4, 1), p, NcclAlgo::kRing);
    CHECK(ar.bottleneck == LinkTier::kInterNode);
    CHECK(ar.bus_bandwidth.gigabytes_per_s() >= 46.0);
    CHECK(ar.bus_bandwidth.gigabytes_per_s() <= 48.0);
    CHECK(busbw_gb_per_s(ar) >= 46.0 * 0.99);
    const CollectiveCost sr = collective_cost(Collective::kSendRecv, bytes(1 * kGiB), nodes_of(2, 1), p);
    CHECK(sr.algo == NcclAlgo::kP2p);
    CHECK_THAT(sr.bus_bandwidth.gigabytes_per_s(), WithinRel(47.0, 0.03));
  }

  SECTION("eight NICs: ring busbw ~370-385 GB/s (derived in the reference)") {
    // min(NVLink 370.8, 8 x 47.5 = 380) = 370.8 GB/s.
    const CollectiveCost cost = forced(Collective::kAllReduce, 16 * kGiB, nodes_of(2, 8), p, NcclAlgo::kRing);
    CHECK(cost.bus_bandwidth.gigabytes_per_s() >= 370.0 * 0.99);
    CHECK(cost.bus_bandwidth.gigabytes_per_s() <= 385.0);
  }
}

TEST_CASE("collective_cost: hgx-h800 reaches the NVLink and InfiniBand rates DeepSeek-V3's report states", "[sim][network]") {
  // DeepSeek-V3 report (arXiv:2412.19437) Sec. 3.2.2: "NVLink offers a bandwidth of 160 GB/s, roughly 3.2
  // times that of IB (50 GB/s)".  The built-in cluster states only link counts and rates (8 NVLink4 links,
  // 8 x 400 Gb/s NICs), so the model's large-message rates are an independent check of it.
  const ClusterSpec c = load_cluster("hgx-h800");
  const LinkParams p = link_params(c);
  SECTION("one node: all-gather and all-to-all bus bandwidth ~160 GB/s") {
    const CollectiveCost ag = collective_cost(Collective::kAllGather, bytes(4 * kGiB), one_node(8), p);
    CHECK(ag.bottleneck == LinkTier::kIntraNode);
    CHECK_THAT(busbw_gb_per_s(ag), WithinRel(160.0, 0.05));
    const CollectiveCost a2a = collective_cost(Collective::kAllToAll, bytes(4 * kGiB), one_node(8), p);
    CHECK_THAT(busbw_gb_per_s(a2a), WithinRel(160.0, 0.05));
  }
  SECTION("one GPU per node: ~50 GB/s over its own NIC, about 3.2x less") {
    const CollectiveCost sr = collective_cost(Collective::kSendRecv, bytes(1 * kGiB), nodes_of(2, 1), p);
    CHECK(sr.bottleneck == LinkTier::kInterNode);
    CHECK_THAT(sr.bus_bandwidth.gigabytes_per_s(), WithinRel(50.0, 0.06));
    const CollectiveCost ag = collective_cost(Collective::kAllGather, bytes(4 * kGiB), one_node(8), p);
    CHECK_THAT(ag.bus_bandwidth.gigabytes_per_s() / sr.bus_bandwidth.gigabytes_per_s(), WithinRel(3.2, 0.1));
  }
}

TEST_CASE("collective_cost: the cheapest (algorithm, protocol) wins", "[sim][network]") {
  const LinkParams p = link_params(dgx_a100());

  SECTION("one node: LL for small messages, Simple for large") {
    const CollectiveCost small = collective_cost(Collective::kAllReduce, bytes(4 * kKiB), one_node(8), p);
    CHECK(small.algo == NcclAlgo::kRing);
    CHECK(small.proto == NcclProto::kLL);
    const CollectiveCost large = collective_cost(Collective::kAllReduce, bytes(1 * kGiB), one_node(8), p);
    CHECK(large.proto == NcclProto::kSimple);
  }

  SECTION("32 nodes: Tree/LL for small messages (log latency), Ring/Simple for 16 GiB") {
    // Tree/LL latency 6.8 + 2 x (7 x 0.6 + 5 x 5.0) = 65 us against Ring/LL's
    // 6.6 + 448 x 1.0 + 62 x 2.7 = 622 us.
    const GroupPlacement g = nodes_of(32, 8);
    const CollectiveCost small = collective_cost(Collective::kAllReduce, bytes(8 * kKiB), g, p);
    CHECK(small.algo == NcclAlgo::kTree);
    CHECK(small.proto == NcclProto::kLL);
    CHECK_THAT(small.latency.us(), WithinAbs(65.2, 0.05));
    const CollectiveCost large = collective_cost(Collective::kAllReduce, bytes(16 * kGiB), g, p);
    CHECK(large.algo == NcclAlgo::kRing);
    CHECK(large.proto == NcclProto::kSimple);
  }

  SECTION("the choice is the minimum over all candidates") {
    for (double size : {1.0, 4 * kKiB, 300 * kKiB, 8 * kMiB, 77 * kMiB, 2 * kGiB}) {
      for (const GroupPlacement& g : {one_node(8), nodes_of(2, 8), nodes_of(16, 4)}) {
        const CollectiveCost best = collective_cost(Collective::kAllReduce, bytes(size), g, p);
        for (const CollectiveCost& other : candidate_costs(Collective::kAllReduce, bytes(size), g, p)) {
          CHECK(best.time <= other.time);
        }
      }
    }
  }

  SECTION("PCIe: no LL128 (NCCL enables it only over NVLink)") {
    ClusterSpec c = dgx_a100();
    c.intra_node.fabric = IntraFabric::kPcie;
    c.intra_node.bandwidth = Bandwidth::gigabytes_per_s(32);
    for (const CollectiveCost& cost :
         candidate_costs(Collective::kAllReduce, bytes(8 * kMiB), one_node(8), link_params(c))) {
      CHECK(cost.proto != NcclProto::kLL128);
    }
  }
}

TEST_CASE("collective_cost: crossing oversubscribed leaves", "[sim][network]") {
  // 64 nodes under leaves of 32 nodes with 2:1 oversubscription: the inter-node
  // bandwidth halves (190 -> 95 GB/s), the latency does not change, so the
  // bandwidth term doubles.
  const ClusterSpec c = with_ib(node8("NVIDIA A100-SXM4-80GB", 300, false), 8, 200, 32, 2.0);
  const LinkParams p = link_params(c);
  const GroupPlacement inside = group_placement(32 * 8, 8, c);
  const GroupPlacement across = group_placement(64 * 8, 8, c);
  REQUIRE_FALSE(inside.crosses_leaf);
  REQUIRE(across.crosses_leaf);
  GroupPlacement same_size_no_cross = across;
  same_size_no_cross.crosses_leaf = false;

  const AlgoFilter ring_simple{NcclAlgo::kRing, NcclProto::kSimple};
  const CollectiveCost fast = *collective_cost(Collective::kAllReduce, bytes(4 * kGiB), same_size_no_cross, p, ring_simple);
  const CollectiveCost slow = *collective_cost(Collective::kAllReduce, bytes(4 * kGiB), across, p, ring_simple);
  CHECK(slow.latency == fast.latency);
  CHECK_THAT(fast.bus_bandwidth.bytes_per_s() / slow.bus_bandwidth.bytes_per_s(), WithinRel(2.0, 1e-12));
  CHECK_THAT((slow.time - slow.latency).s() / (fast.time - fast.latency).s(), WithinRel(2.0, 1e-6));
}

TEST_CASE("collective_cost: invariants and availability", "[sim][network]") {
  const LinkParams p = link_params(hgx_h100());

  SECTION("time = latency + wire bytes / bus bandwidth") {
    const Collective all[] = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                              Collective::kAllToAll,  Collective::kBroadcast, Collective::kSendRecv};
    for (Collective c : all) {
      for (const GroupPlacement& g : {one_node(8), nodes_of(4, 8), nodes_of(3, 2)}) {
        for (const CollectiveCost& cost : candidate_costs(c, bytes(64 * kMiB), g, p)) {
          INFO(to_string(c) << " " << to_string(cost.algo) << "/" << to_string(cost.proto));
          CHECK_THAT(cost.wire_bytes_per_rank, WithinRel(bus_bandwidth_factor(c, g.ranks) * 64 * kMiB, 1e-12));
          const Duration term = cost.wire_bytes_per_rank / cost.bus_bandwidth;
          CHECK(std::llabs((cost.latency + term - cost.time).ps()) <= 1);
          CHECK(reported_bus_bandwidth(cost).bytes_per_s() <= cost.bus_bandwidth.bytes_per_s());
        }
      }
    }
  }

  SECTION("one rank or an empty buffer costs nothing") {
    CHECK(collective_cost(Collective::kAllReduce, bytes(1 * kGiB), one_node(1), p).time.ps() == 0);
    CHECK(collective_cost(Collective::kAllGather, 0, one_node(8), p).time.ps() == 0);
  }

  SECTION("algorithms only where NCCL has them") {
    CHECK_FALSE(collective_cost(Collective::kAllGather, bytes(kGiB), one_node(8), p, AlgoFilter{NcclAlgo::kTree, {}}).has_value());
    CHECK_FALSE(collective_cost(Collective::kAllGather, bytes(kGiB), one_node(8), p, AlgoFilter{NcclAlgo::kNvls, {}}).has_value());
    CHECK_FALSE(collective_cost(Collective::kAllReduce, bytes(kGiB), nodes_of(2, 8), p, AlgoFilter{NcclAlgo::kNvls, {}}).has_value());
    CHECK_FALSE(collective_cost(Collective::kAllReduce, bytes(kGiB), one_node(8), p, AlgoFilter{NcclAlgo::kP2p, {}}).has_value());
    CHECK(collective_cost(Collective::kAllToAll, bytes(kGiB), one_node(8), p).algo == NcclAlgo::kP2p);
    CHECK(collective_cost(Collective::kBroadcast, bytes(kGiB), one_node(8), p).algo == NcclAlgo::kRing);
  }

  SECTION("all-to-all across nodes is bounded by NIC bandwidth per rank") {
    // Node egress r(n-r)/n x S over 8 x 47.5 GB/s, wire (n-1)/n x S per rank:
    // busbw = (n-1) x 380 / (r (n-r)) = 31 x 380 / (8 x 24) = 61.35 GB/s.
    const CollectiveCost cost = collective_cost(Collective::kAllToAll, bytes(kGiB), nodes_of(4, 8), p);
    CHECK(cost.bottleneck == LinkTier::kInterNode);
    CHECK_THAT(cost.bus_bandwidth.gigabytes_per_s(), WithinRel(31.0 * 380.0 / (8 * 24), 1e-9));
  }
}

TEST_CASE("link_params: NCCL constants by GPU generation", "[sim][network]") {
  const LinkParams a100 = link_params(dgx_a100());
  CHECK_THAT(a100.intra_efficiency, WithinAbs(0.80, 1e-12));
  CHECK_FALSE(a100.nvls);
  CHECK_THAT(a100.ll_max_bus_bandwidth_1node.gigabytes_per_s(), WithinAbs(87.7, 1e-9));
  CHECK(a100.nics_per_node == 8);

  const LinkParams h200 = link_params(hgx_h200());
  CHECK(h200.nvls);
  CHECK(h200.nvls_min_ranks == 5);
  CHECK_THAT(h200.nvls_efficiency, WithinAbs(0.85, 1e-12));
  CHECK_THAT(h200.intra_efficiency, WithinAbs(20.6 / 25.0, 1e-12));

  const LinkParams b200 = link_params(hgx_b200());
  CHECK(b200.nvls_min_ranks == 6);
  CHECK_THAT(b200.nvls_efficiency, WithinAbs(0.74, 1e-12));
  CHECK(b200.nics_per_node == 0);

  ClusterSpec unnamed = hgx_b200();
  unnamed.gpu.name = "prototype";
  CHECK(link_params(unnamed).nvls_min_ranks == 6);  // 900 GB/s NVLink: Blackwell
}

TEST_CASE("Calibrated collectives: the measured curve inside its range, the fit outside", "[sim][network][calibration]") {
  // A 2-rank all-reduce measured at 1, 2 and 4 MiB, with a protocol switch
  // between 1 and 2 MiB that no latency + size/bandwidth line follows
  // (the cpu backend's Open MPI: 176 us, 407 us, 804 us, docs/validation.md).
  LinkParams p = link_params(dgx_a100());
  CalibratedCollective k;
  k.collective = Collective::kAllReduce;
  k.inter_node = false;
  k.latency = Duration::microseconds(6.7);
  k.bus_bandwidth = Bandwidth::gigabytes_per_s(4.875);
  k.ranks = 2;
  k.size_time = {{1.0 * kMiB, 176e-6}, {2.0 * kMiB, 407e-6}, {4.0 * kMiB, 804e-6}};
  p.calibrated = {k};
  GroupPlacement two;
  two.ranks = 2;
  two.ranks_per_node = 2;
  auto time_us = [&](double size, const GroupPlacement& g) {
    const CollectiveCost c = collective_cost(Collective::kAllReduce, bytes(size), g, p);
    // The model's invariant holds on the curve too.
    CHECK_THAT(c.time.us(), WithinAbs((c.latency + c.wire_bytes_per_rank / c.bus_bandwidth).us(), 1e-5));
    return c.time.us();
  };
  // At a measured size the measurement itself.
  CHECK_THAT(time_us(2.0 * kMiB, two), WithinRel(407.0, 1e-6));
  // Between two sizes, log-log: at sqrt(2) MiB, sqrt(176 x 407) = 267.6 us
  // (the fit would give 6.7 + 1.48 MB / 4.875 GB/s = 311 us).
  CHECK_THAT(time_us(std::sqrt(2.0) * kMiB, two), WithinRel(std::sqrt(176.0 * 407.0), 1e-5));
  // Beyond the range, the fit: 8 MiB -> 6.7 us + 8 MiB / 4.875 GB/s.
  CHECK_THAT(time_us(8.0 * kMiB, two), WithinRel(6.7 + 8.0 * kMiB / 4.875e3, 1e-6));
  // Another group size is read at equal wire bytes per rank: 4 ranks move
  // 2 x 3/4 S, so 4/3 MiB on 4 ranks is 2 MiB on 2 (2 x 1/2 x 2 MiB).
  GroupPlacement four = two;
  four.ranks = 4;
  four.ranks_per_node = 4;
  CHECK_THAT(time_us(4.0 / 3.0 * kMiB, four), WithinRel(407.0, 1e-5));
}

// XLA's GPU cost model ships collectives measured on a GB200 NVL72 rack
// (tests/data/validation/xla_collective_gb200.json, its source and what each
// row means in the file): all-reduce, all-gather, reduce-scatter and
// all-to-all over groups of 4 to 64 GPUs of the NVLink domain.  None of it
// was used to build the collective model (NVLink5 line rate, NCCL's
// per-generation constants), so it checks the model on a multi-node NVLink
// domain, which the nccl-tests rows (8-GPU nodes) do not reach.  At 8 GB and
// more, the model's algorithm bandwidth (full buffer / time) is within
// 0.9..1.2 of the measured one at every point (0.99..1.17; the model is
// fastest on all-to-all of 4 GPUs) and within 10% on the geometric mean.
// Below that the model is up to 1.36x fast (all-reduce over 64 at 1 GB;
// docs/compute.md); not asserted.
TEST_CASE("collective_cost: GB200 NVL72 collectives follow XLA's published measurements", "[sim][network]") {
  std::ifstream in(std::string(TRAINPLAN_TEST_DATA_DIR) + "/validation/xla_collective_gb200.json");
  REQUIRE(in.good());
  const nlohmann::json table = nlohmann::json::parse(in);
  const ClusterSpec c = load_cluster("gb200-nvl72");
  const LinkParams p = link_params(c);
  double log_sum = 0;
  int points = 0;
  for (const auto& row : table["rows"]) {
    const std::string op = row[0].get<std::string>();
    const int ranks = row[1].get<int>();
    const double bytes = row[2].get<double>();
    const double measured = row[3].get<double>() * 1e9;
    if (bytes < 8e9) continue;
    const Collective col = op == "all-reduce"       ? Collective::kAllReduce
                           : op == "all-gather"     ? Collective::kAllGather
                           : op == "reduce-scatter" ? Collective::kReduceScatter
                                                    : Collective::kAllToAll;
    REQUIRE((op == "all-reduce" || op == "all-gather" || op == "reduce-scatter" || op == "all-to-all"));
    const GroupPlacement g = strided_group_placement(ranks, 1, c);
    REQUIRE(g.nodes == 1);  // inside one 64-GPU NVLink domain (the cluster's node)
    const double model = bytes / collective_cost(col, static_cast<Bytes>(bytes), g, p).time.s();
    INFO(op << " over " << ranks << " GPUs, " << bytes / 1e9 << " GB: model " << model / 1e9 << " GB/s, measured "
            << measured / 1e9);
    CHECK(model / measured > 0.9);
    CHECK(model / measured < 1.2);
    log_sum += std::log(model / measured);
    ++points;
  }
  REQUIRE(points == 60);  // 4 collectives x 5 group sizes x 3 sizes (8.6, 17.2, 34.4 GB)
  CHECK(std::fabs(log_sum / points) < std::log(1.10));
}

}  // namespace trainplan
