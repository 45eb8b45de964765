// `trainplan models` and `trainplan clusters`: the built-ins with their key
// figures.
#include <cstdio>
#include <iostream>

#include <CLI/CLI.hpp>

#include "planner/cli/commands.h"
#include "planner/cli/output.h"
#include "simulator/cost/layer_cost.h"
#include "simulator/spec/cluster.h"
#include "simulator/spec/model.h"

namespace trainplan {

namespace {

void print_models(bool json) {
  nlohmann::json out = nlohmann::json::array();
  if (!json) {
    std::printf("%-14s %9s %7s %7s %6s %4s %7s %8s %8s %-7s %s\n", "model", "params(B)", "layers", "hidden", "heads",
                "kv", "ffn", "vocab", "seq", "mlp", "tied");
  }
  for (const std::string& name : builtin_model_names()) {
    ModelSpec m = load_model(name);
    double params = total_params(m);
    if (json) {
      out.push_back({{"name", m.name}, {"params_b", rounded(params / 1e9, 3)}, {"layers", m.layers},
                     {"hidden", m.hidden}, {"heads", m.heads}, {"kv_heads", m.kv_heads},
                     {"ffn_hidden", m.ffn_hidden}, {"vocab", m.vocab}, {"seq_len", m.seq_len},
                     {"mlp", m.mlp == MlpKind::kGelu ? "gelu" : "swiglu"}, {"tied_embeddings", m.tied_embeddings}});
    } else {
      std::printf("%-14s %9.2f %7lld %7lld %6lld %4lld %7lld %8lld %8lld %-7s %s\n", m.name.c_str(), params / 1e9,
                  static_cast<long long>(m.layers), static_cast<long long>(m.hidden), static_cast<long long>(m.heads),
                  static_cast<long long>(m.kv_heads), static_cast<long long>(m.ffn_hidden),
                  static_cast<long long>(m.vocab), static_cast<long long>(m.seq_len),
                  m.mlp == MlpKind::kGelu ? "gelu" : "swiglu", m.tied_embeddings ? "yes" : "no");
    }
  }
  if (json) std::cout << out.dump(2) << "\n";
}

void print_clusters(bool json) {
  nlohmann::json out = nlohmann::json::array();
  if (!json) {
    std::printf("%-14s %-18s %-9s %8s %9s %9s %5s %-9s %9s %-10s %4s %9s %7s %7s\n", "cluster", "gpu", "arch", "mem(GiB)",
                "bf16(TF/s)", "hbm(GB/s)", "gpn", "intra", "intra(GB/s)", "inter", "nics", "nic(GB/s)", "nic_eff", "op(us)");
  }
  for (const std::string& name : builtin_cluster_names()) {
    ClusterSpec c = load_cluster(name);
    double bf16 = c.gpu.peak.at(Dtype::kBf16).teraflop_per_s();
    if (json) {
      nlohmann::json j = {{"name", c.name},
                          {"gpu", c.gpu.name},
                          {"architecture", to_string(c.gpu.arch)},
                          {"memory_gib", rounded(to_gib(static_cast<double>(c.gpu.memory)), 2)},
                          {"bf16_tflops", bf16},
                          {"hbm_gb_per_s", rounded(c.gpu.hbm_bandwidth.gigabytes_per_s(), 1)},
                          {"gpus_per_node", c.gpus_per_node},
                          {"gpus_per_host", c.host.gpus},
                          {"intra_fabric", to_string(c.intra_node.fabric)},
                          {"intra_gb_per_s", rounded(c.intra_node.bandwidth.gigabytes_per_s(), 1)}};
      if (c.inter_node) {
        j["inter_fabric"] = to_string(c.inter_node->fabric);
        j["nics_per_node"] = c.inter_node->nics_per_node;
        j["nic_gb_per_s"] = rounded(c.inter_node->nic_bandwidth.gigabytes_per_s(), 2);
        j["nic_efficiency"] = c.inter_node->efficiency;  // NCCL's share of the line rate
      }
      if (c.host.op_overhead.ps() > 0) j["host_op_us"] = rounded(c.host.op_overhead.us(), 2);
      out.push_back(j);
    } else {
      std::printf("%-14s %-18s %-9s %8.1f %9.1f %9.0f %5d %-9s %9.1f", c.name.c_str(), c.gpu.name.c_str(),
                  to_string(c.gpu.arch), to_gib(static_cast<double>(c.gpu.memory)), bf16,
                  c.gpu.hbm_bandwidth.gigabytes_per_s(), c.gpus_per_node, to_string(c.intra_node.fabric),
                  c.intra_node.bandwidth.gigabytes_per_s());
      if (c.inter_node) {
        // nic_eff: the share of the line rate NCCL gets through one NIC (InterNodeSpec::efficiency).
        std::printf("  %-10s %4d %9.1f %7.2f", to_string(c.inter_node->fabric), c.inter_node->nics_per_node,
                    c.inter_node->nic_bandwidth.gigabytes_per_s(), c.inter_node->efficiency);
      } else {
        std::printf("  %-10s %4s %9s %7s", "(none)", "-", "-", "-");
      }
      // The host's time per eager op call (host.op_overhead; "-": not modelled).
      if (c.host.op_overhead.ps() > 0) std::printf(" %7.2f\n", c.host.op_overhead.us());
      else std::printf(" %7s\n", "-");
    }
  }
  if (json) std::cout << out.dump(2) << "\n";
}

}  // namespace

void register_catalog_commands(CLI::App* app, int* status) {
  static bool models_json = false, clusters_json = false;
  CLI::App* models = app->add_subcommand("models", "list the built-in models with their key figures");
  models->add_flag("--json", models_json, "JSON output");
  models->callback([status] {
    print_models(models_json);
    *status = 0;
  });
  CLI::App* clusters = app->add_subcommand("clusters", "list the built-in clusters with their key figures");
  clusters->add_flag("--json", clusters_json, "JSON output");
  clusters->callback([status] {
    print_clusters(clusters_json);
    *status = 0;
  });
}

}  // namespace trainplan
