// The microbenchmark sweeps of `trainplan calibrate`: collectives from
// min_bytes to max_bytes (nccl-tests' -b -e -f), GEMMs over the shapes
// training runs, and device memory copies.  Rank 0 prints what nccl-tests
// prints: a '#' header, a units row, and size / count / type / redop / root /
// time / algbw / busbw / #wrong per size (busbw factors of PERFORMANCE.md).
#ifndef TRAINPLAN_CALIBRATE_SWEEP_H_
#define TRAINPLAN_CALIBRATE_SWEEP_H_

#include <array>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "calibrate/backend.h"
#include "simulator/spec/calibration.h"
#include "simulator/spec/model.h"

namespace trainplan {

struct SweepConfig {
  int64_t min_bytes = 8;
  int64_t max_bytes = int64_t{64} << 20;
  int factor = 2;
  int warmup = 5;
  int iters = 20;
  bool check = true;
  std::vector<Collective> collectives = {Collective::kAllReduce, Collective::kAllGather, Collective::kReduceScatter,
                                         Collective::kAllToAll,  Collective::kBroadcast, Collective::kSendRecv};
  std::vector<std::array<int64_t, 3>> gemm_shapes;  // m, n, k
  std::string gemm_dtype = "bf16";
  double gemm_min_time_s = 0.02;  // repeat each GEMM until this much time
  std::vector<int64_t> copy_sizes;
  bool json = false;  // print JSON rows instead of the table
  // Ranks that share one node's NVLink, numbered node by node: the
  // intra-node sweep runs in those groups.  0: the ranks on one host
  // (hostname); a GB200/GB300 NVL72 domain spans hosts (trays of 4 GPUs), so
  // there the domain's rank count is given.
  int ranks_per_node = 0;
  // The clock the GEMM sweep reads, in seconds (empty: std::chrono's
  // steady clock); tests give a simulated one.
  std::function<double()> clock;
};

// GEMM shapes of the given models' layers (forward and both backward GEMMs)
// under TP 1, 2, 4, 8 and the given micro-batch sizes, plus a grid, without
// shapes above max_flops; sorted, unique.
std::vector<std::array<int64_t, 3>> training_gemm_shapes(const std::vector<ModelSpec>& models,
                                                         const std::vector<int64_t>& mbs, int64_t seq,
                                                         double max_flops);

// Runs the sweeps into `cal`, skipping collectives, GEMM shapes and copy
// sizes already in it (resume); calls checkpoint(cal) on rank 0 after each
// collective and phase.  Returns the number of wrong elements seen.
int64_t run_sweep(Backend& backend, const SweepConfig& config, Calibration* cal, std::FILE* out,
                  const std::function<void(const Calibration&)>& checkpoint);

}  // namespace trainplan

#endif  // TRAINPLAN_CALIBRATE_SWEEP_H_
