#include "simulator/network/topology.h"

#include <algorithm>
#include <queue>

#include <boost/graph/adjacency_list.hpp>
#include <boost/graph/breadth_first_search.hpp>

#include "simulator/core/error.h"

namespace trainplan {

const char* to_string(VertexKind k) {
  switch (k) {
    case VertexKind::kGpu: return "gpu";
    case VertexKind::kNodeSwitch: return "node_switch";
    case VertexKind::kNic: return "nic";
    case VertexKind::kLeaf: return "leaf";
    case VertexKind::kSpine: return "spine";
  }
  return "?";
}

namespace {
struct VertexProps {
  VertexKind kind = VertexKind::kGpu;
};
struct EdgeProps {
  double bytes_per_s = 0;
};
using Graph = boost::adjacency_list<boost::vecS, boost::vecS, boost::undirectedS, VertexProps, EdgeProps>;
}  // namespace

struct Topology::Impl {
  Graph g;
  int gpus = 0, nodes = 0, gpn = 0, nics = 0, nodes_per_leaf = 1;
  std::vector<int> gpu_vertex;
  double intra = 0, nic_share = 0;
};

Topology::Topology(const ClusterSpec& c, int gpus) : impl_(std::make_unique<Impl>()) {
  Impl& t = *impl_;
  t.gpus = gpus;
  t.gpn = c.gpus_per_node;
  t.nodes = (gpus + t.gpn - 1) / t.gpn;
  t.nics = c.inter_node ? c.inter_node->nics_per_node : 0;
  t.nodes_per_leaf = c.inter_node ? std::max(1, c.inter_node->nodes_per_leaf) : 1;
  t.intra = c.intra_node.bandwidth.bytes_per_s();
  t.nic_share = t.nics > 0 ? c.inter_node->nic_bandwidth.bytes_per_s() * t.nics / t.gpn : 0;
  auto add = [&t](VertexKind k) { return static_cast<int>(boost::add_vertex(VertexProps{k}, t.g)); };
  const int leaves = (t.nodes + t.nodes_per_leaf - 1) / t.nodes_per_leaf;
  int spine = -1;
  std::vector<int> leaf_vertex;
  if (t.nics > 0 && t.nodes > 1) {
    spine = add(VertexKind::kSpine);
    double uplink = c.inter_node->nic_bandwidth.bytes_per_s() * t.nics * t.nodes_per_leaf / c.inter_node->oversubscription;
    for (int l = 0; l < leaves; ++l) {
      leaf_vertex.push_back(add(VertexKind::kLeaf));
      boost::add_edge(leaf_vertex.back(), spine, EdgeProps{uplink}, t.g);
    }
  }
  for (int n = 0; n < t.nodes; ++n) {
    int sw = add(VertexKind::kNodeSwitch);
    std::vector<int> nic_vertex;
    if (!leaf_vertex.empty()) {
      for (int k = 0; k < t.nics; ++k) {
        nic_vertex.push_back(add(VertexKind::kNic));
        boost::add_edge(nic_vertex.back(), leaf_vertex[static_cast<size_t>(n / t.nodes_per_leaf)],
                        EdgeProps{c.inter_node->nic_bandwidth.bytes_per_s()}, t.g);
      }
    }
    for (int i = 0; i < t.gpn && n * t.gpn + i < gpus; ++i) {
      int v = add(VertexKind::kGpu);
      t.gpu_vertex.push_back(v);
      boost::add_edge(v, sw, EdgeProps{t.intra}, t.g);
      if (!nic_vertex.empty()) {
        // Rail-optimized: GPU i reaches NIC i * nics / gpn through its PCIe switch.
        int k = std::min(t.nics - 1, i * t.nics / t.gpn);
        boost::add_edge(v, nic_vertex[static_cast<size_t>(k)], EdgeProps{t.nic_share}, t.g);
      }
    }
  }
}

Topology::~Topology() = default;
Topology::Topology(Topology&&) noexcept = default;

int Topology::gpus() const { return impl_->gpus; }
int Topology::nodes() const { return impl_->nodes; }
int Topology::node_of(int gpu) const { return gpu / impl_->gpn; }
int Topology::leaf_of_node(int node) const { return node / impl_->nodes_per_leaf; }
int Topology::vertex_count() const { return static_cast<int>(boost::num_vertices(impl_->g)); }
int Topology::edge_count() const { return static_cast<int>(boost::num_edges(impl_->g)); }
double Topology::intra_port_bytes_per_s() const { return impl_->intra; }
double Topology::nic_share_bytes_per_s() const { return impl_->nic_share; }

std::vector<VertexKind> Topology::route(int src, int dst) const {
  const Impl& t = *impl_;
  TRAINPLAN_CHECK(src >= 0 && src < t.gpus && dst >= 0 && dst < t.gpus, "route between unknown GPUs");
  const size_t n = boost::num_vertices(t.g);
  std::vector<Graph::vertex_descriptor> pred(n);
  const auto s = static_cast<Graph::vertex_descriptor>(t.gpu_vertex[static_cast<size_t>(src)]);
  for (size_t i = 0; i < n; ++i) pred[i] = i;
  // BFS gives a shortest path; it never relays through a third GPU because
  // the direct switch or NIC path is always shorter.
  boost::breadth_first_search(
      t.g, s, boost::visitor(boost::make_bfs_visitor(boost::record_predecessors(pred.data(), boost::on_tree_edge()))));
  std::vector<VertexKind> path;
  auto v = static_cast<Graph::vertex_descriptor>(t.gpu_vertex[static_cast<size_t>(dst)]);
  while (true) {
    path.push_back(t.g[v].kind);
    if (v == s) break;
    TRAINPLAN_CHECK(pred[v] != v, "no route between GPUs");
    v = pred[v];
  }
  std::reverse(path.begin(), path.end());
  return path;
}

}  // namespace trainplan
