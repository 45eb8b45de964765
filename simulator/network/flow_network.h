// Max-min fair sharing of links among concurrent flows (progressive filling,
// Bertsekas & Gallager, Data Networks, sec. 6.5.2; SimGrid's lmm solver).
//
// A flow has a rate cap (its own bottleneck, e.g. NCCL's bus bandwidth for
// its group alone) and uses links with weights: a flow at rate r puts w*r
// bytes/s on a link.  Rates are recomputed when a flow starts or ends, only
// for the flows connected to it through shared links.
// Invariants after update(): every link carries <= its capacity (up to
// rounding); every flow is limited by its cap or by a saturated link on which
// no other flow has a higher rate (max-min optimality).
#ifndef TRAINPLAN_SIM_NETWORK_FLOW_NETWORK_H_
#define TRAINPLAN_SIM_NETWORK_FLOW_NETWORK_H_

#include <cstddef>
#include <cstdint>
#include <vector>

namespace trainplan {

struct FlowLink {
  int32_t link = 0;
  float weight = 1.0f;
};

class FlowNetwork {
 public:
  // Adds a link of `capacity` bytes/s; returns its id.
  int32_t add_link(double capacity_bytes_per_s);
  int32_t link_count() const { return static_cast<int32_t>(capacity_.size()); }
  double capacity(int32_t link) const { return capacity_[static_cast<size_t>(link)]; }

  // Starts flow `id` (caller-chosen, unique among active flows, >= 0) with a
  // rate cap and links.  Rates of connected flows change; changed() lists them.
  // The links are not copied: links[0..n_links) must stay valid until
  // stop(id) (the engine passes the task graph's own link array).
  void start(int32_t id, double cap_bytes_per_s, const FlowLink* links, int n_links);
  // Room for flow ids below n (saves growing the flow table flow by flow).
  void reserve_flows(size_t n) {
    if (flows_.size() < n) flows_.resize(n);
  }
  // Ends flow `id`.  REQUIRES: active.
  void stop(int32_t id);
  double rate(int32_t id) const { return flows_[static_cast<size_t>(id)].rate; }
  bool active(int32_t id) const;

  // Flow ids whose rate was recomputed by the last start()/stop() (deferred:
  // by the last update()), ascending.
  const std::vector<int32_t>& changed() const { return changed_; }

  // Deferred updates: start() and stop() only record what changed, and
  // update() recomputes the rates of every component they touched, each
  // once.  An event-driven caller defers while it handles the events of one
  // instant and updates before time moves on: a thousand DP replicas that
  // start their sends at the same instant cost one recomputation of the
  // component they share instead of a thousand.  The rates are those of
  // immediate updates (each component's max-min rates from its final state).
  void defer_updates(bool on) { deferred_ = on; }
  bool pending() const { return !seed_flows_.empty() || !seed_links_.empty(); }
  void update();

 private:
  // The caller's links of a flow (a view: see start()).
  struct Links {
    const FlowLink* first = nullptr;
    int count = 0;
    const FlowLink* begin() const { return first; }
    const FlowLink* end() const { return first + count; }
  };
  struct Flow {
    double cap = 0;
    double rate = 0;
    Links links;
    bool active = false;
    uint32_t mark = 0;
  };
  // Recomputes the rates of the components around seed_flows_ and
  // seed_links_, one component at a time, and clears the seeds.
  void recompute_seeds();
  // Progressive filling over the component in changed_[first..] and
  // comp_links_.
  void fill(size_t first);

  std::vector<double> capacity_;
  std::vector<std::vector<int32_t>> link_flows_;  // active flows per link
  std::vector<uint32_t> link_mark_;
  std::vector<Flow> flows_;
  std::vector<int32_t> changed_;
  uint32_t epoch_ = 0;
  bool deferred_ = false;
  std::vector<int32_t> seed_flows_, seed_links_;  // since the last recomputation
  // Scratch of recompute_seeds, kept to avoid allocating per flow event.
  std::vector<int32_t> comp_links_, stack_links_, link_local_, unfrozen_, next_;
  std::vector<double> remaining_, load_weight_;
};

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_NETWORK_FLOW_NETWORK_H_
