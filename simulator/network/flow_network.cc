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
  f.links = Links{links, n_links};
  for (const FlowLink& l : f.links) link_flows_[static_cast<size_t>(l.link)].push_back(id);
  seed_flows_.push_back(id);
  if (!deferred_) recompute_seeds();
}

void FlowNetwork::stop(int32_t id) {
  Flow& f = flows_[static_cast<size_t>(id)];
  TRAINPLAN_CHECK(f.active, "stopping a flow that is not active");
  f.active = false;
  for (const FlowLink& l : f.links) {
    auto& v = link_flows_[static_cast<size_t>(l.link)];
    v.erase(std::find(v.begin(), v.end(), id));
    seed_links_.push_back(l.link);
  }
  f.links = Links{};
  if (!deferred_) recompute_seeds();
}

void FlowNetwork::update() {
  if (pending()) recompute_seeds();
}

// Scratch buffers are members, reused from call to call: a flow start or
// stop allocates nothing once they have grown (issue 15).
void FlowNetwork::recompute_seeds() {
  ++epoch_;
  changed_.clear();
  auto visit_link = [&](int32_t l) {
    if (link_mark_[static_cast<size_t>(l)] != epoch_) {
      link_mark_[static_cast<size_t>(l)] = epoch_;
      comp_links_.push_back(l);
      stack_links_.push_back(l);
    }
  };
  auto visit_flow = [&](int32_t fid) {
    Flow& f = flows_[static_cast<size_t>(fid)];
    if (f.mark == epoch_) return;
    f.mark = epoch_;
    changed_.push_back(fid);
    for (const FlowLink& l : f.links) visit_link(l.link);
  };
  // Each seed's connected component (flows <-> links) not yet visited, then
  // its rates: components are independent, so each is filled on its own,
  // exactly as an immediate update of its last change would.
  auto component = [&](int32_t seed_flow, int32_t seed_link) {
    const size_t first = changed_.size();
    comp_links_.clear();
    stack_links_.clear();
    if (seed_flow >= 0) visit_flow(seed_flow);
    if (seed_link >= 0) visit_link(seed_link);
    while (!stack_links_.empty()) {
      int32_t l = stack_links_.back();
      stack_links_.pop_back();
      for (int32_t fid : link_flows_[static_cast<size_t>(l)]) visit_flow(fid);
    }
    if (changed_.size() > first) fill(first);
  };
  for (int32_t fid : seed_flows_) {
    if (flows_[static_cast<size_t>(fid)].active && flows_[static_cast<size_t>(fid)].mark != epoch_) component(fid, -1);
  }
  for (int32_t l : seed_links_) {
    if (link_mark_[static_cast<size_t>(l)] != epoch_) component(-1, l);
  }
  seed_flows_.clear();
  seed_links_.clear();
  std::sort(changed_.begin(), changed_.end());  // ascending, as changed() says
}

void FlowNetwork::fill(size_t first) {
  // Deterministic order regardless of discovery order.
  std::sort(changed_.begin() + static_cast<std::ptrdiff_t>(first), changed_.end());

  // Progressive filling: raise all unfrozen rates together; freeze flows at
  // their cap or on the first link that saturates.  Links are indexed in
  // discovery order (link_local_): each link's sums and the minimum over
  // links do not depend on that order, so it needs no sort.
  const size_t n = comp_links_.size();
  if (link_local_.size() < capacity_.size()) link_local_.resize(capacity_.size());
  remaining_.resize(n);
  load_weight_.resize(n);
  for (size_t i = 0; i < n; ++i) {
    link_local_[static_cast<size_t>(comp_links_[i])] = static_cast<int32_t>(i);
    remaining_[i] = capacity_[static_cast<size_t>(comp_links_[i])];
  }
  auto index_of = [&](int32_t l) { return static_cast<size_t>(link_local_[static_cast<size_t>(l)]); };
  unfrozen_.assign(changed_.begin() + static_cast<std::ptrdiff_t>(first), changed_.end());
  for (int32_t fid : unfrozen_) flows_[static_cast<size_t>(fid)].rate = 0;
  double level = 0;  // common rate of the unfrozen flows
  while (!unfrozen_.empty()) {
    std::fill(load_weight_.begin(), load_weight_.end(), 0.0);
    double step = std::numeric_limits<double>::infinity();
    for (int32_t fid : unfrozen_) {
      const Flow& f = flows_[static_cast<size_t>(fid)];
      step = std::min(step, f.cap - level);
      for (const FlowLink& l : f.links) load_weight_[index_of(l.link)] += l.weight;
    }
    for (size_t i = 0; i < n; ++i) {
      if (load_weight_[i] > 0) step = std::min(step, remaining_[i] / load_weight_[i]);
    }
    step = std::max(step, 0.0);
    level += step;
    for (size_t i = 0; i < n; ++i) remaining_[i] -= step * load_weight_[i];
    next_.clear();
    for (int32_t fid : unfrozen_) {
      Flow& f = flows_[static_cast<size_t>(fid)];
      bool frozen = f.cap - level <= f.cap * 1e-12;
      for (const FlowLink& l : f.links) {
        size_t i = index_of(l.link);
        if (remaining_[i] <= capacity_[static_cast<size_t>(l.link)] * 1e-12) frozen = true;
      }
      if (frozen) {
        f.rate = level;
      } else {
        next_.push_back(fid);
      }
    }
    TRAINPLAN_CHECK(next_.size() < unfrozen_.size(), "progressive filling made no progress");
    unfrozen_.swap(next_);
  }
}

}  // namespace trainplan
