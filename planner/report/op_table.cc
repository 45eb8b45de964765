#include "planner/report/op_table.h"

#include <cmath>
#include <cstdio>
#include <string>

namespace trainplan {

namespace {

double ms(int64_t ps) { return static_cast<double>(ps) * 1e-9; }

// JSON numbers rounded to `decimals` digits, so they stay short and stable.
double rounded(double x, int decimals) {
  const double f = std::pow(10.0, decimals);
  return std::round(x * f) / f;
}

std::string fixed(double x, int decimals) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f", decimals, x);
  return buf;
}

const char* kind_name(OpKind k) {
  switch (k) {
    case OpKind::kGemm: return "gemm";
    case OpKind::kAttention: return "attention";
    case OpKind::kElementwise: return "memory";
  }
  return "memory";
}

bool transformer_layer(const LayerCharges& k) {
  return k.kind == ChargedLayer::kDense || k.kind == ChargedLayer::kMoe;
}

// "a dense layer (32 such layers)", "an MoE layer, recomputed (...)", "the output layer and the loss", ...
std::string layer_title(const LayerCharges& k) {
  switch (k.kind) {
    case ChargedLayer::kEmbedding: return "the embedding";
    case ChargedLayer::kOutput: return "the output layer and the loss";
    case ChargedLayer::kDense:
    case ChargedLayer::kMoe: break;
  }
  std::string s = k.moe() ? "an MoE layer" : "a dense layer";
  if (k.recomputed.has_value()) s += *k.recomputed ? ", recomputed" : ", not recomputed";
  return s + " (" + std::to_string(k.layers) + " such layers)";
}

const char* layer_key(ChargedLayer k) {
  switch (k) {
    case ChargedLayer::kDense: return "dense";
    case ChargedLayer::kMoe: return "moe";
    case ChargedLayer::kEmbedding: return "embedding";
    case ChargedLayer::kOutput: return "output";
  }
  return "dense";
}

std::string shape_of(const OpCost& op) {
  if (op.kind == OpKind::kElementwise || op.m <= 0) return "";
  std::string s = std::to_string(op.m) + " x " + std::to_string(op.n) + " x " + std::to_string(op.k);
  if (op.groups > 1) s += " x " + std::to_string(op.groups);
  return s;
}

// The forward rate its time implies: FLOP/s of a GEMM or the attention,
// HBM bytes/s of a memory-bound op (0 where it has neither).
double forward_tflops(const OpCharge& c) {
  return c.op.kind != OpKind::kElementwise && c.forward_ps > 0 ? c.op.flops / (ms(c.forward_ps) * 1e-3) / 1e12 : 0;
}
double forward_gbps(const OpCharge& c) {
  return c.op.kind == OpKind::kElementwise && c.forward_ps > 0 ? c.op.bytes / (ms(c.forward_ps) * 1e-3) / 1e9 : 0;
}

struct Sums {
  int64_t fwd = 0, bwd = 0, wgrad = 0, rerun = 0, comm_f = 0, comm_b = 0;
  double calls = 0;
};

Sums sums_of(const LayerCharges& k) {
  Sums s;
  for (const OpCharge& c : k.ops) {
    s.fwd += c.forward_ps;
    s.bwd += c.backward_ps;
    s.wgrad += c.weight_grad_ps;
    s.rerun += c.recompute_ps;
    s.comm_f += c.comm_forward_ps;
    s.comm_b += c.comm_backward_ps;
    s.calls += c.op.host_calls;
  }
  return s;
}

}  // namespace

void print_op_tables(const std::vector<LayerCharges>& kinds, const ClusterSpec& cluster) {
  for (const LayerCharges& k : kinds) {
    std::printf("ops of %s, one micro-batch on one rank, ms per pass (bwd includes wgrad; rerun: the forward "
                "again under recompute):\n",
                layer_title(k).c_str());
    std::printf("  %-20s %-9s %-26s %8s %8s %8s %8s %9s %8s %6s  %s\n", "op", "kind", "m x n x k (x groups)", "fwd_ms",
                "bwd_ms", "wgrad_ms", "rerun_ms", "TFLOP/s", "GB/s", "calls", "collective after it: fwd / bwd ms");
    for (const OpCharge& c : k.ops) {
      const double tf = forward_tflops(c), gb = forward_gbps(c);
      std::string comm;
      if (!c.comm.empty()) {
        char buf[64];
        std::snprintf(buf, sizeof buf, ": %.3f / %.3f", ms(c.comm_forward_ps), ms(c.comm_backward_ps));
        comm = c.comm + buf;
      }
      std::printf("  %-20s %-9s %-26s %8.3f %8.3f %8.3f %8.3f %9s %8s %6.1f  %s\n", c.op.name.c_str(),
                  kind_name(c.op.kind), shape_of(c.op).c_str(), ms(c.forward_ps), ms(c.backward_ps),
                  ms(c.weight_grad_ps), ms(c.recompute_ps), tf > 0 ? fixed(tf, 1).c_str() : "",
                  gb > 0 ? fixed(gb, 0).c_str() : "", c.op.host_calls, comm.c_str());
    }
    const Sums s = sums_of(k);
    std::printf("  %-20s %-9s %-26s %8.3f %8.3f %8.3f %8.3f %9s %8s %6.1f  %.3f / %.3f\n", "ops", "", "", ms(s.fwd),
                ms(s.bwd), ms(s.wgrad), ms(s.rerun), "", "", s.calls, ms(s.comm_f), ms(s.comm_b));
    const LayerTimes& t = k.times;
    std::printf("  %s as the step charges it: forward %.3f ms, backward %.3f ms (%s)\n",
                transformer_layer(k) ? "the layer" : "all of it", ms(t.forward_ps), ms(t.backward_ps),
                transformer_layer(k) ? "collectives, the context-parallel exchange, recomputation and FSDP2's copies "
                                       "included"
                                     : "collectives, FSDP2's copies and any multi-token prediction depths included");
    if (!transformer_layer(k)) continue;
    std::printf("  host: %.1f op calls x %.2f us = %.3f ms to issue the forward, %.3f ms the backward: %s\n", s.calls,
                cluster.host.op_overhead.us(), ms(t.host_forward_ps), ms(t.host_backward_ps),
                t.host_bound_ps > 0 ? ("host-bound, " + fixed(ms(t.host_bound_ps), 3) + " ms more than on the GPU").c_str()
                                    : "GPU-bound");
  }
  std::printf("  (TFLOP/s: the op's forward FLOPs over its forward time, attention's counting the whole s x s product "
              "as Megatron does; GB/s: a memory-bound op's HBM bytes over its time)\n");
}

nlohmann::json op_tables_json(const std::vector<LayerCharges>& kinds, const ClusterSpec& cluster) {
  nlohmann::json out = nlohmann::json::array();
  for (const LayerCharges& k : kinds) {
    nlohmann::json ops = nlohmann::json::array();
    for (const OpCharge& c : k.ops) {
      nlohmann::json o = {{"name", c.op.name},
                          {"kind", kind_name(c.op.kind)},
                          {"forward_ms", rounded(ms(c.forward_ps), 6)},
                          {"backward_ms", rounded(ms(c.backward_ps), 6)},
                          {"weight_grad_ms", rounded(ms(c.weight_grad_ps), 6)},
                          {"recompute_ms", rounded(ms(c.recompute_ps), 6)},
                          {"forward_flops", c.op.flops},
                          {"forward_bytes", c.op.bytes},
                          {"backward_bytes", c.op.bwd_bytes},
                          {"host_calls", rounded(c.op.host_calls, 3)}};
      if (c.op.kind != OpKind::kElementwise && c.op.m > 0) {
        o["m"] = c.op.m;
        o["n"] = c.op.n;
        o["k"] = c.op.k;
        o["groups"] = c.op.groups;
      }
      if (!c.comm.empty()) {
        o["collective"] = c.comm;
        o["collective_forward_ms"] = rounded(ms(c.comm_forward_ps), 6);
        o["collective_backward_ms"] = rounded(ms(c.comm_backward_ps), 6);
      }
      ops.push_back(o);
    }
    const LayerTimes& t = k.times;
    nlohmann::json j = {{"layer", layer_key(k.kind)},
                        {"layers", k.layers},
                        {"ops", ops},
                        {"forward_ms", rounded(ms(t.forward_ps), 6)},
                        {"backward_ms", rounded(ms(t.backward_ps), 6)}};
    if (transformer_layer(k)) {
      j["host_op_call_us"] = rounded(cluster.host.op_overhead.us(), 3);
      j["host_forward_ms"] = rounded(ms(t.host_forward_ps), 6);
      j["host_backward_ms"] = rounded(ms(t.host_backward_ps), 6);
      j["host_bound"] = t.host_bound_ps > 0;
    }
    if (k.recomputed.has_value()) j["recomputed"] = *k.recomputed;
    out.push_back(j);
  }
  return out;
}

}  // namespace trainplan
