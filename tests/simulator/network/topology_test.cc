// Tests of the Boost.Graph cluster topology: shortest routes follow the
// physical layout (NVSwitch inside a node, rail NICs to a leaf, a spine
// between leaves) and the vertex and edge counts match the closed form.
#include "simulator/network/topology.h"

#include <string>
#include <vector>

#include <catch2/catch.hpp>

namespace trainplan {
namespace {

using Catch::Matchers::WithinRel;

std::string path_string(const std::vector<VertexKind>& path) {
  std::string s;
  for (VertexKind k : path) s += std::string(s.empty() ? "" : ",") + to_string(k);
  return s;
}

// The DGX H100 file (8 GPUs, 8 x 400 Gb/s NICs, 32 nodes per leaf) with the
// nodes per leaf changed as a test needs.
ClusterSpec h100(int nodes_per_leaf = 32) {
  ClusterSpec c = load_cluster("dgx-h100");
  c.inter_node->nodes_per_leaf = nodes_per_leaf;
  return c;
}

// Closed form for N > 1 nodes of g GPUs with k NICs and `per_leaf` nodes per
// leaf: vertices 1 spine + ceil(N/per_leaf) leaves + N (1 switch + k NICs + g
// GPUs); edges: one uplink per leaf + N (k NIC-leaf + g GPU-switch + g
// GPU-NIC).  One node has no network: 1 switch + g GPUs, g edges.
int closed_form_vertices(int nodes, int g, int k, int per_leaf) {
  if (nodes == 1) return 1 + g;
  return 1 + (nodes + per_leaf - 1) / per_leaf + nodes * (1 + k + g);
}
int closed_form_edges(int nodes, int g, int k, int per_leaf) {
  if (nodes == 1) return g;
  return (nodes + per_leaf - 1) / per_leaf + nodes * (k + 2 * g);
}

TEST_CASE("Topology: routes follow the physical layout of dgx-h100", "[sim][network][topology]") {
  SECTION("same node: gpu, node_switch, gpu") {
    const Topology t(h100(), 16);
    CHECK(path_string(t.route(0, 7)) == "gpu,node_switch,gpu");
    CHECK(path_string(t.route(9, 10)) == "gpu,node_switch,gpu");
  }
  SECTION("two nodes under one leaf: gpu, nic, leaf, nic, gpu") {
    const Topology t(h100(), 16);
    REQUIRE(t.leaf_of_node(t.node_of(3)) == t.leaf_of_node(t.node_of(12)));
    CHECK(path_string(t.route(3, 12)) == "gpu,nic,leaf,nic,gpu");
    CHECK(path_string(t.route(0, 8)) == "gpu,nic,leaf,nic,gpu");
  }
  SECTION("different leaves: gpu, nic, leaf, spine, leaf, nic, gpu") {
    const Topology t(h100(1), 16);  // one node per leaf
    REQUIRE(t.leaf_of_node(0) != t.leaf_of_node(1));
    CHECK(path_string(t.route(2, 13)) == "gpu,nic,leaf,spine,leaf,nic,gpu");
  }
  SECTION("a GPU to itself is one vertex") {
    const Topology t(h100(), 8);
    CHECK(path_string(t.route(5, 5)) == "gpu");
  }
  SECTION("four NICs shared by pairs of GPUs: same-node traffic still goes through the switch") {
    // GPU 0 and 1 share NIC 0 (i * 4 / 8 = 0); both 2-hop paths exist, the
    // physical one is the NVSwitch.
    ClusterSpec c = h100();
    c.inter_node->nics_per_node = 4;
    const Topology t(c, 16);
    CHECK(path_string(t.route(0, 1)) == "gpu,node_switch,gpu");
  }
}

TEST_CASE("Topology: node and leaf indices", "[sim][network][topology]") {
  const Topology t(h100(2), 48);
  CHECK(t.gpus() == 48);
  CHECK(t.nodes() == 6);
  CHECK(t.node_of(0) == 0);
  CHECK(t.node_of(7) == 0);
  CHECK(t.node_of(8) == 1);
  CHECK(t.node_of(47) == 5);
  CHECK(t.leaf_of_node(0) == 0);
  CHECK(t.leaf_of_node(1) == 0);
  CHECK(t.leaf_of_node(2) == 1);
  CHECK(t.leaf_of_node(5) == 2);
}

TEST_CASE("Topology: vertex and edge counts match the closed form", "[sim][network][topology]") {
  for (int per_leaf : {32, 3, 1}) {
    for (int nodes : {1, 2, 4, 7, 40}) {
      DYNAMIC_SECTION(nodes << " nodes, " << per_leaf << " per leaf") {
        const Topology t(h100(per_leaf), nodes * 8);
        CHECK(t.nodes() == nodes);
        CHECK(t.vertex_count() == closed_form_vertices(nodes, 8, 8, per_leaf));
        CHECK(t.edge_count() == closed_form_edges(nodes, 8, 8, per_leaf));
      }
    }
  }
  SECTION("part of one node: 1 switch + 4 GPUs, 4 edges") {
    const Topology t(h100(), 4);
    CHECK(t.nodes() == 1);
    CHECK(t.vertex_count() == 5);
    CHECK(t.edge_count() == 4);
  }
  SECTION("a cluster without an inter-node fabric: N (1 + g) vertices, N g edges") {
    ClusterSpec c = h100();
    c.inter_node.reset();
    const Topology t(c, 16);
    CHECK(t.vertex_count() == 2 * 9);
    CHECK(t.edge_count() == 16);
  }
}

TEST_CASE("Topology: port bandwidths are the line rates of the cluster file", "[sim][network][topology]") {
  // dgx-h100: NVLink4 450 GB/s per GPU per direction; 8 NICs x 400 Gb/s =
  // 8 x 50 GB/s over 8 GPUs = 50 GB/s per GPU.
  const Topology t(h100(), 16);
  CHECK_THAT(t.intra_port_bytes_per_s(), WithinRel(450e9, 1e-12));
  CHECK_THAT(t.nic_share_bytes_per_s(), WithinRel(50e9, 1e-12));
}

}  // namespace
}  // namespace trainplan
