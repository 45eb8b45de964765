// A GPU cluster, as read from topologies/*.json: the GPU, the node, the
// intra-node fabric and the inter-node fabric.  Node count is not part of the
// file; it comes from --nodes or --gpus (Cluster = ClusterSpec + nodes).
//
// Invariants after load_cluster(): all rates, sizes and counts > 0, latencies
// >= 0, oversubscription >= 1.  A cluster without "inter_node" is one box.
#ifndef TRAINPLAN_SIM_SPEC_CLUSTER_H_
#define TRAINPLAN_SIM_SPEC_CLUSTER_H_

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "simulator/core/collective.h"
#include "simulator/core/units.h"

namespace trainplan {

enum class Dtype { kBf16, kFp16, kFp32, kTf32, kFp8 };
enum class IntraFabric { kNvswitch, kNvlink, kPcie };
enum class InterFabric { kInfiniband, kRoce, kEthernet };
// The GPU's architecture generation: what its tensor cores and its NVLink
// can do (MX formats on Blackwell, NCCL's per-generation tuning constants).
// kUnknown: a part none of the rules below names (the collective model then
// reads the generation off the NVLink bandwidth).
enum class GpuArch { kUnknown, kCpu, kVolta, kAmpere, kAda, kHopper, kBlackwell };

const char* to_string(Dtype d);
const char* to_string(IntraFabric f);
const char* to_string(InterFabric f);
const char* to_string(GpuArch a);

// A GEMM shape measured by `trainplan calibrate`: its efficiency against the
// dense peak of its dtype.
// The most GPUs one node may hold (docs/input-limits.md).
constexpr int kMaxGpusPerNode = 1024;

struct GemmPoint {
  int64_t m = 0, n = 0, k = 0;
  double efficiency = 0;
};

// A collective measured by `trainplan calibrate` (alpha-beta fit): it
// replaces NCCL's cost model for that collective inside or across nodes.
struct CalibratedCollective {
  Collective collective = Collective::kAllReduce;
  bool inter_node = false;
  Duration latency;         // the alpha-beta fit
  Bandwidth bus_bandwidth;
  int ranks = 0;            // group size of the measurements below
  // Measured (nccl-tests size in bytes, seconds per call), ascending by size
  // (the median of repeated sizes): between the smallest and largest size a
  // cost is read off this curve (log-log), outside it from the fit.
  std::vector<std::pair<double, double>> size_time;
};

struct GpuSpec {
  std::string name;
  // "architecture" in the file, else read off the name (gpu_arch_of_name).
  GpuArch arch = GpuArch::kUnknown;
  Bytes memory = 0;
  Bandwidth hbm_bandwidth;
  std::map<Dtype, FlopRate> peak;  // dense peak per dtype
  double gemm_efficiency = 0.8;    // best-shape GEMM / peak (MAMF), (0, 1]
  double fp8_gemm_efficiency = 0;  // best-shape FP8 GEMM / FP8 peak (FP8 MAMF); 0: gemm_efficiency
  double hbm_efficiency = 0.85;    // achievable copy bandwidth / spec, (0, 1]
  int sm_count = 108;              // streaming multiprocessors (GEMM wave quantization)
  double attention_efficiency = 0.55;  // fused attention FLOPs / dense peak, fwd+bwd, (0, 1]
  // Board power: the rated TDP and the enforced limit (nvidia-smi -pl; 0 =
  // the TDP).  Below the TDP the sustained SM clock, and with it every
  // compute peak, is taken as (limit / TDP)^(1/3) of nominal: dynamic power
  // ~ C V^2 f with V ~ f over the DVFS range, all board power treated as
  // dynamic (so the clock is an upper bound: the slowdown a lower one).  HBM
  // bandwidth is not scaled (its clock is separate).  0 TDP: no power model.
  double tdp_w = 0;
  double power_limit_w = 0;
  // The factor above, 1 without a limit below the TDP.
  double sustained_clock_fraction() const;
  // From a calibration file only (not in topologies/): measured GEMM
  // efficiencies by shape and the measured per-kernel overhead (< 0: model
  // default).
  std::vector<GemmPoint> gemm_table;
  // Measured memory traffic rate by size (calibration copy sweep): pairs of
  // (traffic bytes = 2 x bytes copied, bytes/s), ascending in size.  Caches
  // make small copies faster than streaming ones, so one rate cannot serve
  // both a 1 MB elementwise op and a 100 MB optimizer step.
  std::vector<std::pair<double, double>> copy_table;
  double kernel_overhead_s = -1;
  std::string source;
};

struct IntraNodeSpec {
  IntraFabric fabric = IntraFabric::kNvswitch;
  Bandwidth bandwidth;  // per GPU per direction
  Duration latency;
  bool nvls = false;    // NVLink SHARP (in-switch reduction) available
  int gpus_per_switch = 0;  // PCIe: GPUs behind one switch (0 = all)
  std::string source;
};

// NCCL's achievable share of a NIC's line rate when nothing better is known:
// RDMA (InfiniBand, RoCE) 0.95: 46-48 GB/s per 400 Gb/s NIC (nccl-tests#290),
// 192 of 200 GB/s on a DGX A100 (nccl#812); plain Ethernet 0.80, the
// ml-engineering rule of thumb (no NCCL anchor).
constexpr double default_nic_efficiency(InterFabric fabric) { return fabric == InterFabric::kEthernet ? 0.80 : 0.95; }

struct InterNodeSpec {
  InterFabric fabric = InterFabric::kInfiniband;
  int nics_per_node = 0;
  Bandwidth nic_bandwidth;  // per NIC per direction, line rate
  // The share of nic_bandwidth NCCL's traffic gets through one NIC per
  // direction (its bus bandwidth per NIC over the line rate).  Default by
  // fabric (default_nic_efficiency); a cluster file states its own where the
  // fabric was measured to do otherwise.  parse_cluster sets the fabric's
  // default; a spec built in code starts at the RDMA one.
  double efficiency = default_nic_efficiency(InterFabric::kInfiniband);
  Duration latency;
  double oversubscription = 1.0;  // leaf uplink:downlink ratio, >= 1
  bool rail_optimized = true;
  int nodes_per_leaf = 0;         // nodes under one leaf switch (rail group)
  std::string source;
};

struct HostSpec {
  Bytes memory = 0;               // CPU memory per node
  Bandwidth bandwidth_per_gpu;    // host <-> GPU (PCIe) per direction
  // Host time of one eager framework op call on the node's CPU (Python and
  // PyTorch dispatch, the kernel launch): the rate at which one training
  // process can issue work (step_costs.h, host-bound layers).  Zero: the
  // host is not modelled (it never bounds a layer).
  Duration op_overhead;
  // GPUs one host drives: one operating system, one torchrun, one process
  // per GPU.  Equal to gpus_per_node except where a node is an NVLink domain
  // of several hosts (a GB200 NVL72 compute tray drives 4 of the rack's GPUs).
  int gpus = 0;
  std::string source;
};

struct ClusterSpec {
  std::string name;
  std::string description;
  GpuSpec gpu;
  int gpus_per_node = 0;
  IntraNodeSpec intra_node;
  std::optional<InterNodeSpec> inter_node;
  HostSpec host;
  std::string source;
  std::vector<CalibratedCollective> calibrated_collectives;  // from a calibration file
  std::string calibration;  // where the calibration came from, empty if none
};

// How a job of `gpus` GPUs is started: `hosts` hosts, each running a
// launcher (torchrun) with `per_host` processes, one per GPU.
struct LaunchShape {
  int hosts = 0;
  int per_host = 0;
};

// The launch of `gpus` GPUs on `cluster`: whole hosts (cluster.host.gpus
// each) when the job fills them, otherwise the fewest hosts that split the
// GPUs evenly.  nullopt when no even split exists (torchrun starts the same
// number of processes on every host: --nproc-per-node).
// REQUIRES: gpus > 0.
std::optional<LaunchShape> launch_shape(const ClusterSpec& cluster, int gpus);

// Parses and validates a cluster JSON document (see topologies/README.md).
// Throws InputError on any bad field.
ClusterSpec parse_cluster(const std::string& json_text, const std::string& where);

// Finds a cluster by name or path and parses it; lists the known names in the
// error if the name is unknown.
// `where` and `pointer` name what gave the name (the flag, or a plan file's
// field) in the error for an unknown one.
ClusterSpec load_cluster(const std::string& name_or_path, const std::string& where = "--cluster",
                         const std::string& pointer = "");

std::vector<std::string> builtin_cluster_names();

// The architecture a GPU's marketing name implies, the one place that maps
// names to generations (the file's "architecture" field overrides it):
// B100/B200/B300 and GB200/GB300 Blackwell; H100/H200/H800/H20/GH200 Hopper;
// A100/A800/A30/A40/A10 Ampere; RTX 4090/L40S/L4 Ada; V100 Volta; names
// starting "CPU" the cpu backend; anything else kUnknown.  Case-insensitive.
GpuArch gpu_arch_of_name(const std::string& name);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_SPEC_CLUSTER_H_
