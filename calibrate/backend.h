// A device backend for microbenchmarks and for executing a plan: timed GEMMs
// and memory copies on the local device, and collectives / point-to-point
// transfers on communicators split from the world the way the plan places
// ranks.
//
// Backends: "cpu" (Eigen GEMMs, MPI collectives; always built, world = the
// MPI world or 1 without MPI) and "cuda" (cuBLAS GEMMs, NCCL collectives;
// built where the CUDA toolkit and NCCL are found).  Every operation blocks
// until it is done on the device, so wall-clock timing around it is valid.
// Errors (CUDA, NCCL, MPI) throw std::runtime_error with file:line, the call
// and the error string.
#ifndef TRAINPLAN_CALIBRATE_BACKEND_H_
#define TRAINPLAN_CALIBRATE_BACKEND_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "simulator/network/collective_model.h"

namespace trainplan {

struct DeviceInfo {
  std::string name;       // e.g. "NVIDIA H200" or "cpu: Intel(R) Xeon(R) ..."
  std::string bus_id;     // PCI id or host name
  double memory_bytes = 0;
};

// A group of ranks that run collectives together.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // In-place collectives on `bytes` of this rank's buffer, in nccl-tests
  // terms: all-reduce/broadcast of `bytes`; all-gather output of `bytes`;
  // reduce-scatter input of `bytes`; all-to-all of `bytes`.  Element type
  // float.  Returns when complete.
  virtual void run(Collective c, int64_t bytes) = 0;
  // Checks that the last run() produced the expected values (each rank fills
  // its buffer with rank-dependent data first); returns the number of wrong
  // elements.
  virtual int64_t check(Collective c, int64_t bytes) = 0;
  // Point-to-point inside this communicator.
  virtual void send(int peer, int64_t bytes, int tag) = 0;
  virtual void recv(int peer, int64_t bytes, int tag) = 0;
  virtual void wait_sends() = 0;
  virtual void barrier() = 0;
  // Maximum of `value` over the communicator's ranks.
  virtual double max(double value) = 0;
  // Element-wise minimum (or sum) of `values` over the communicator's
  // ranks, in place.  REQUIRES: every rank passes a vector of the same size.
  enum class Reduce { kMin, kSum };
  virtual void reduce_each(std::vector<double>* values, Reduce op) = 0;
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  virtual std::string versions() const = 0;  // e.g. "CUDA 13.0, NCCL 2.27.7, driver ..."
  virtual DeviceInfo device() const = 0;
  virtual Communicator& world() = 0;
  // Splits the world: ranks with the same color form a communicator ordered
  // by key (MPI_Comm_split semantics).  Collective over the world.
  virtual std::unique_ptr<Communicator> split(int color, int key) = 0;
  // One m x n x k GEMM (C = A B, k inner) in `dtype` ("bf16", "fp16",
  // "fp32", "tf32"); blocks until done.
  virtual void gemm(int64_t m, int64_t n, int64_t k, const std::string& dtype) = 0;
  virtual bool supports(const std::string& dtype) const = 0;
  // Copies `bytes` within device memory (read + write); blocks until done.
  virtual void copy(int64_t bytes) = 0;
  virtual void synchronize() = 0;
  // Leaves the device's caches without this rank's buffers, as a training
  // step leaves them between two collectives or copies (GEMMs ran in
  // between).  Untimed; the sweeps call it before each timed copy and
  // collective.  Default: nothing (a GPU's L2, 40-60 MB, is small beside
  // the buffers a step moves).
  virtual void evict_caches() {}
};

// Creates a backend: "cpu" or "cuda".  Throws InputError("--backend: ...") if
// the name is unknown or the backend was not built.
std::unique_ptr<Backend> make_backend(const std::string& name, int* argc, char*** argv);

}  // namespace trainplan

#endif  // TRAINPLAN_CALIBRATE_BACKEND_H_
