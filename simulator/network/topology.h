// The physical topology of a cluster as a Boost.Graph: GPUs, the node's
// switch (NVSwitch or PCIe), NICs (rail-optimized: GPU i uses NIC i*nics/gpn),
// leaf switches and a spine with the fat tree's oversubscription.
//
// The simulator shares bandwidth on each GPU's egress links: its port into the
// node switch and its share of the NICs.  routes are shortest paths (BFS) in
// the graph; tests check hop counts against the physical layout.
#ifndef TRAINPLAN_SIM_NETWORK_TOPOLOGY_H_
#define TRAINPLAN_SIM_NETWORK_TOPOLOGY_H_

#include <memory>
#include <string>
#include <vector>

#include "simulator/spec/cluster.h"

namespace trainplan {

enum class VertexKind { kGpu, kNodeSwitch, kNic, kLeaf, kSpine };
const char* to_string(VertexKind k);

class Topology {
 public:
  // Builds the graph for `gpus` GPUs on ceil(gpus / gpus_per_node) nodes.
  Topology(const ClusterSpec& cluster, int gpus);
  ~Topology();
  Topology(Topology&&) noexcept;

  int gpus() const;
  int nodes() const;
  int node_of(int gpu) const;
  int leaf_of_node(int node) const;
  // Vertex kinds along the shortest path from one GPU to another, both ends
  // included (e.g. gpu, node_switch, gpu inside a node).
  std::vector<VertexKind> route(int src_gpu, int dst_gpu) const;
  int vertex_count() const;
  int edge_count() const;
  // Bandwidth of a GPU's port into its node switch and of its NIC share,
  // bytes/s, per direction (line rates from the cluster file).
  double intra_port_bytes_per_s() const;
  double nic_share_bytes_per_s() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_NETWORK_TOPOLOGY_H_
