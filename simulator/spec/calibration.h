// calibration.json: what `trainplan calibrate` measured on a real cluster,
// and its overlay onto a ClusterSpec (DESIGN.md: calibration.json overlays
// the cluster defaults).
//
// Quantities carry units in the file ("12.5us", "183.2GB/s",
// "714.3TFLOP/s").  A calibration holds the raw samples (so a fit can be
// redone and an interrupted sweep resumed) and the fits.  Applying a
// calibration taken on another GPU type is refused.
#ifndef TRAINPLAN_SIM_SPEC_CALIBRATION_H_
#define TRAINPLAN_SIM_SPEC_CALIBRATION_H_

#include <cstdint>
#include <string>
#include <vector>

#include "simulator/core/collective.h"
#include "simulator/spec/cluster.h"

namespace trainplan {

const char* collective_file_name(Collective c);  // "all_reduce", ... (nccl-tests names)

struct CollectiveSample {
  Collective collective = Collective::kAllReduce;
  bool inter_node = false;
  int ranks = 0;
  int64_t bytes = 0;     // nccl-tests "size"
  double time_s = 0;     // per operation
  int64_t wrong = 0;
};

struct GemmSample {
  int64_t m = 0, n = 0, k = 0;
  std::string dtype;
  double time_s = 0;
  double flop_per_s() const { return 2.0 * static_cast<double>(m) * static_cast<double>(n) * static_cast<double>(k) / time_s; }
};

struct CopySample {
  int64_t bytes = 0;   // bytes copied (traffic = 2x)
  double time_s = 0;
};

struct CollectiveFitResult {
  Collective collective = Collective::kAllReduce;
  bool inter_node = false;
  int ranks = 0;
  double latency_s = 0;
  double bus_bytes_per_s = 0;
  double residual_rms = 0;   // relative, over the samples used
  int samples = 0;
};

// Multipliers a fit to measured training runs (`calibrate --from-runs`)
// puts on a cluster's published figures; 1 leaves a figure as it is.
struct RunScales {
  double gemm_efficiency = 1;       // GpuSpec::gemm_efficiency and fp8_gemm_efficiency
  double hbm_efficiency = 1;        // GpuSpec::hbm_efficiency
  double attention_efficiency = 1;  // GpuSpec::attention_efficiency
  double intra_bandwidth = 1;       // IntraNodeSpec::bandwidth
  double inter_bandwidth = 1;       // InterNodeSpec::nic_bandwidth
  // HostSpec::op_overhead (a time: > 1 is a slower host).  No effect on a
  // cluster that does not model its host.
  double host_op_time = 1;
};

// One measured run of a --from-runs fit and what the fitted model predicts.
struct RunResidual {
  std::string name;
  double measured_s = 0;
  double predicted_s = 0;       // with the scales fitted on every run
  double leave_one_out_s = 0;   // with scales fitted on the other runs (0: fewer than 2 runs)
};

struct RunFit {
  bool present = false;
  RunScales scales;
  std::vector<RunResidual> runs;
  double residual_rms = 0;       // relative, sqrt(mean(log(pred/meas)^2)) as exp(.) - 1
  double leave_one_out_rms = 0;  // the same with leave-one-out predictions
};

struct Calibration {
  std::string tool;
  std::string backend;      // "cpu" | "cuda" | "nccl-tests" | "runs" (fitted to measured runs)
  std::string versions;
  std::string device;       // device name as the backend reports it
  std::string gpu_type;     // normalised type used to match clusters ("A100", "H200", "cpu")
  int ranks = 0;
  int nodes = 0;
  bool complete = false;    // false while a sweep is in progress
  std::string dtype;        // GEMM dtype of the peak below
  double peak_flop_per_s = 0;       // best measured GEMM rate
  double copy_bytes_per_s = 0;      // memory traffic rate (read + write)
  double kernel_overhead_s = 0;     // fitted per-call overhead
  std::vector<GemmPoint> gemm_table;  // efficiency vs peak_flop_per_s
  std::vector<CollectiveFitResult> collectives;
  std::vector<CollectiveSample> collective_samples;
  std::vector<GemmSample> gemm_samples;
  std::vector<CopySample> copy_samples;
  RunFit run_fit;           // from `calibrate --from-runs`
  std::string where;        // the file it was read from ("" when made in memory); not written
};

// The normalised GPU type of a device or cluster GPU name: the first of
// B200, H200, H100, A100, V100, RTX 4090, L40S, ... found in it, "cpu" for
// CPU devices, else the name itself.
std::string gpu_type_of(const std::string& name);

std::string calibration_json(const Calibration& c);
Calibration parse_calibration(const std::string& json_text, const std::string& where);
Calibration load_calibration(const std::string& path);

// Multiplies the cluster's figures by `s` (efficiencies capped at 1).
void apply_run_scales(const RunScales& s, ClusterSpec* cluster);

// Replaces the cluster's GEMM peak/efficiency table, memory bandwidth,
// kernel overhead and collective costs with the measured ones; a fit to runs
// (backend "runs") applies its scales instead.  Throws
// InputError("<file>: /gpu_type: ...", or "<flag>: ..." for a calibration
// made in memory) if it was taken on another GPU type or is incomplete.
void apply_calibration(const Calibration& c, const std::string& flag, ClusterSpec* cluster);

}  // namespace trainplan

#endif  // TRAINPLAN_SIM_SPEC_CALIBRATION_H_
