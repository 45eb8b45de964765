#include "simulator/network/flow_network.h"

#include <algorithm>
#include <limits>

#include "simulator/core/error.h"

namespace trainplan {

int32_t FlowNetwork::add_link(double capacity) {
  TRAINPLAN_CHECK(capacity > 0, "link capacity must be positive");
  capacity_.push_back(capacity);
  link_flows_.emplace_back();
  link_mark_.push_back(0);
  return static_cast<int32_t>(capacity_.size() - 1);
}

bool FlowNetwork::active(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < flows_.size() && flows_[static_cast<size_t>(id)].active;
}

void FlowNetwork::start(int32_t id, double cap, const FlowLink* links, int n_links) {
  TRAINPLAN_CHECK(id >= 0 && cap > 0, "flow needs an id >= 0 and a positive cap");
  if (static_cast<size_t>(id) >= flows_.size()) flows_.resize(static_cast<size_t>(id) + 1);
  Flow& f = flows_[static_cast<size_t>(id)];
  TRAINPLAN_CHECK(!f.active, "flow already active");
  f.active = true;
  f.cap = cap;
  f.rate = 0;
  f.links.assign(links, links + n_links);
  std::vector<int32_t> seed_links;
  for (const FlowLink& l : f.links) {
    link_flows_[static_cast<size_t>(l.link)].push_back(id);
    seed_links.push_back(l.link);
  }
  recompute_from(id, seed_links);
}

void FlowNetwork::stop(int32_t id) {
  Flow& f = flows_[static_cast<size_t>(id)];
  TRAINPLAN_CHECK(f.active, "stopping a flow that is not active");
  f.active = false;
  std::vector<int32_t> seed_links;
  for (const FlowLink& l : f.links) {
    auto& v = link_flows_[static_cast<size_t>(l.link)];
    v.erase(std::find(v.begin(), v.end(), id));
    seed_links.push_back(l.link);
  }
  f.links.clear();
  recompute_from(-1, seed_links);
}

void FlowNetwork::recompute_from(int32_t seed_flow, const std::vector<int32_t>& seed_links) {
  // Collect the connected component (flows <-> links) around the seed.
  ++epoch_;
  changed_.clear();
  std::vector<int32_t> comp_links;
  std::vector<int32_t> stack_links;
  auto visit_link = [&](int32_t l) {
    if (link_mark_[static_cast<size_t>(l)] != epoch_) {
      link_mark_[static_cast<size_t>(l)] = epoch_;
      comp_links.push_back(l);
      stack_links.push_back(l);
    }
  };
  auto visit_flow = [&](int32_t fid) {
    Flow& f = flows_[static_cast<size_t>(fid)];
    if (f.mark == epoch_) return;
    f.mark = epoch_;
    changed_.push_back(fid);
    for (const FlowLink& l : f.links) visit_link(l.link);
  };
  if (seed_flow >= 0) visit_flow(seed_flow);
  for (int32_t l : seed_links) visit_link(l);
  while (!stack_links.empty()) {
    int32_t l = stack_links.back();
    stack_links.pop_back();
    for (int32_t fid : link_flows_[static_cast<size_t>(l)]) visit_flow(fid);
  }
  // Deterministic order regardless of discovery order.
  std::sort(changed_.begin(), changed_.end());

  // Progressive filling: raise all unfrozen rates together; freeze flows at
  // their cap or on the first link that saturates.
  std::vector<double> remaining(comp_links.size());
  std::vector<double> load_weight(comp_links.size());
  std::vector<int32_t> local(comp_links.size());
  // Map link id -> index in comp_links through a sorted copy.
  std::vector<int32_t> sorted_links = comp_links;
  std::sort(sorted_links.begin(), sorted_links.end());
  auto index_of = [&](int32_t l) {
    return static_cast<size_t>(std::lower_bound(sorted_links.begin(), sorted_links.end(), l) - sorted_links.begin());
  };
  for (size_t i = 0; i < sorted_links.size(); ++i) remaining[i] = capacity_[static_cast<size_t>(sorted_links[i])];
  std::vector<int32_t> unfrozen = changed_;
  for (int32_t fid : unfrozen) flows_[static_cast<size_t>(fid)].rate = 0;
  double level = 0;  // common rate of the unfrozen flows
  while (!unfrozen.empty()) {
    std::fill(load_weight.begin(), load_weight.end(), 0.0);
    double step = std::numeric_limits<double>::infinity();
    for (int32_t fid : unfrozen) {
      const Flow& f = flows_[static_cast<size_t>(fid)];
      step = std::min(step, f.cap - level);
      for (const FlowLink& l : f.links) load_weight[index_of(l.link)] += l.weight;
    }
    for (size_t i = 0; i < sorted_links.size(); ++i) {
      if (load_weight[i] > 0) step = std::min(step, remaining[i] / load_weight[i]);
    }
    step = std::max(step, 0.0);
    level += step;
    for (size_t i = 0; i < sorted_links.size(); ++i) remaining[i] -= step * load_weight[i];
    std::vector<int32_t> next;
    for (int32_t fid : unfrozen) {
      Flow& f = flows_[static_cast<size_t>(fid)];
      bool frozen = f.cap - level <= f.cap * 1e-12;
      for (const FlowLink& l : f.links) {
        size_t i = index_of(l.link);
        if (remaining[i] <= capacity_[static_cast<size_t>(l.link)] * 1e-12) frozen = true;
      }
      if (frozen) {
        f.rate = level;
      } else {
        next.push_back(fid);
      }
    }
    TRAINPLAN_CHECK(next.size() < unfrozen.size(), "progressive filling made no progress");
    unfrozen.swap(next);
  }
  (void)local;
}

}  // namespace trainplan
