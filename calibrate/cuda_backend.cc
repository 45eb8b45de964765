// The cuda backend: cuBLAS GEMMs (cublasGemmEx) and device-to-device copies
// on one GPU per process, NCCL collectives and point-to-point transfers
// between processes.  Plain C++ over the CUDA runtime, cuBLAS and NCCL C APIs;
// no device code of its own.
//
// Launch (the first that applies):
//   (a) built with MPI and started by mpirun/srun (OMPI_COMM_WORLD_SIZE,
//       PMI_SIZE, PMIX_RANK or SLURM_NTASKS set): MPI_Init, rank 0 makes the
//       NCCL unique id and broadcasts it; device = local rank % device count.
//   (b) torchrun-style environment (RANK, WORLD_SIZE, LOCAL_RANK): every rank
//       calls ncclGetUniqueId, which with NCCL_COMM_ID=<host>:<port> set
//       returns the id derived from that address without opening a socket;
//       ncclCommInitRank then opens the root on rank 0 (NVIDIA/nccl
//       src/bootstrap.cc bootstrapGetUniqueId, src/init.cc
//       ncclCommInitRankDev).  Without NCCL_COMM_ID, MASTER_ADDR and
//       MASTER_PORT + 1 are used (torchrun's own store holds MASTER_PORT).
//       Built without MPI but started by mpirun, OMPI_COMM_WORLD_RANK/SIZE/
//       LOCAL_RANK (or MPICH's PMI_RANK/PMI_SIZE) stand in for them.
//   (c) otherwise one process, world size 1, on device TRAINPLAN_CUDA_DEVICE
//       (default 0).
//
// Invariants:
// - Every operation returns only when its work is complete on the device,
//   so wall-clock timing around it is valid (Backend contract).
// - All streams are non-blocking (cudaStreamNonBlocking) and buffers grow
//   with stream-ordered cudaMallocAsync/cudaFreeAsync, so nothing here
//   synchronizes the whole device: a send issued to a peer that has not yet
//   posted its receive can never block an unrelated GEMM or allocation.
// - Point-to-point: there is no guarantee that two NCCL operations progress
//   concurrently (NVIDIA/nccl#217, maintainer); operations on one
//   communicator may run one after another in issue order.  So send() only queues the transfer
//   (like MPI_Isend, the call returns at once); the queue is issued before
//   the next operation that waits on a peer: recv() on the same
//   communicator issues queued sends and the receive in one
//   ncclGroupStart/End (the batched isend/irecv of Megatron-LM, which keeps
//   "both sides send, then both receive" from deadlocking); collectives,
//   barrier(), max(), wait_sends() and recv() on any communicator first
//   issue the queues of all others.  NCCL has no tags: sends and receives
//   between two ranks match in issue order, which pipeline schedules keep.
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <nccl.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "calibrate/backend.h"
#include "simulator/core/error.h"

#ifdef TRAINPLAN_HAVE_MPI
#define OMPI_SKIP_MPICXX 1  // the C API only
#define MPICH_SKIP_MPICXX 1
#include <mpi.h>
#endif

#define TRAINPLAN_CUDA_FAIL(call, what)                                                                    \
  throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " + (call) + ": " + \
                           (what))

#define CUDA_CHECK(call)                                                     \
  do {                                                                       \
    cudaError_t e_ = (call);                                                 \
    if (e_ != cudaSuccess) TRAINPLAN_CUDA_FAIL(#call, cuda_error_text(e_)); \
  } while (0)

#define CUBLAS_CHECK(call)                                                              \
  do {                                                                                  \
    cublasStatus_t s_ = (call);                                                         \
    if (s_ != CUBLAS_STATUS_SUCCESS) TRAINPLAN_CUDA_FAIL(#call, cublasGetStatusString(s_)); \
  } while (0)

#define NCCL_CHECK(call)                                                      \
  do {                                                                        \
    ncclResult_t r_ = (call);                                                 \
    if (r_ != ncclSuccess) TRAINPLAN_CUDA_FAIL(#call, nccl_error_text(r_)); \
  } while (0)

#ifdef TRAINPLAN_HAVE_MPI
#define MPI_CHECK(call)                                                              \
  do {                                                                               \
    int rc_ = (call);                                                                \
    if (rc_ != MPI_SUCCESS) {                                                        \
      char msg_[MPI_MAX_ERROR_STRING];                                               \
      int len_ = 0;                                                                  \
      MPI_Error_string(rc_, msg_, &len_);                                            \
      TRAINPLAN_CUDA_FAIL(#call, std::string(msg_, static_cast<size_t>(len_)));      \
    }                                                                                \
  } while (0)
#endif

namespace trainplan {

namespace {

std::string cuda_error_text(cudaError_t e) {
  return std::string(cudaGetErrorName(e)) + " (" + cudaGetErrorString(e) + ")";
}

std::string nccl_error_text(ncclResult_t r) {
  std::string s = ncclGetErrorString(r);
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 13, 0)
  const char* last = ncclGetLastError(nullptr);
  if (last != nullptr && *last != '\0') s += ": " + std::string(last);
#endif
  return s;
}

// Rank-dependent fill value so every collective's result is checkable:
// v(r, i) = (r + 1) + (i % 13), exact in float (same as the cpu backend).
float fill_value(int r, int64_t i) { return static_cast<float>(r + 1) + static_cast<float>(i % 13); }

// Returns the integer in environment variable `name`, or nullopt if unset or
// empty.  Throws InputError if it is set to something else.
std::optional<long> env_int(const char* name) {
  const char* v = std::getenv(name);
  if (v == nullptr || *v == '\0') return std::nullopt;
  char* end = nullptr;
  errno = 0;
  const long x = std::strtol(v, &end, 10);
  if (errno != 0 || end == v || *end != '\0' || x < 0 || x > INT_MAX) {
    throw_input_error(name, "", "expected an integer >= 0 in the environment, got \"" + std::string(v) + "\"");
  }
  return x;
}

bool env_set(const char* name) {
  const char* v = std::getenv(name);
  return v != nullptr && *v != '\0';
}

// Device memory that grows in stream order (cudaMallocAsync/cudaFreeAsync
// where the device has memory pools, which never synchronize the device).
// Growing discards the contents; new memory is filled with `fill_byte`.
class DeviceBuffer {
 public:
  DeviceBuffer() = default;
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  ~DeviceBuffer() { release(); }

  // REQUIRES: `stream` outlives this buffer or the next ensure().
  void ensure(size_t bytes, cudaStream_t stream, bool pools, int fill_byte) {
    bytes = std::max<size_t>(bytes, 256);
    if (bytes <= bytes_) return;
    release();
    stream_ = stream;
    pools_ = pools;
    if (pools_) {
      CUDA_CHECK(cudaMallocAsync(&ptr_, bytes, stream_));
    } else {
      CUDA_CHECK(cudaMalloc(&ptr_, bytes));
    }
    bytes_ = bytes;
    CUDA_CHECK(cudaMemsetAsync(ptr_, fill_byte, bytes, stream_));
  }
  void release() noexcept {
    if (ptr_ == nullptr) return;
    // Errors here mean the context is already broken; nothing to recover.
    if (pools_) {
      (void)cudaFreeAsync(ptr_, stream_);
    } else {
      (void)cudaFree(ptr_);
    }
    ptr_ = nullptr;
    bytes_ = 0;
  }
  float* floats() const { return static_cast<float*>(ptr_); }
  void* get() const { return ptr_; }

 private:
  void* ptr_ = nullptr;
  size_t bytes_ = 0;
  cudaStream_t stream_ = nullptr;
  bool pools_ = false;
};

cudaStream_t make_stream() {
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking));
  return s;
}

class CudaCommunicator;

// The live communicators of one backend, so that a blocking operation on one
// can first issue the queued sends of all others.
struct CommRegistry {
  std::vector<CudaCommunicator*> live;
  void issue_all_sends(const CudaCommunicator* except);
};

class CudaCommunicator : public Communicator {
 public:
  // Takes ownership of `comm`.
  CudaCommunicator(ncclComm_t comm, bool pools, std::shared_ptr<CommRegistry> registry)
      : comm_(comm), pools_(pools), registry_(std::move(registry)) {
    try {
      NCCL_CHECK(ncclCommUserRank(comm_, &rank_));
      NCCL_CHECK(ncclCommCount(comm_, &size_));
      stream_ = make_stream();
      p2p_stream_ = make_stream();
      scalar_.ensure(64, stream_, pools_, 0);
      CUDA_CHECK(cudaStreamSynchronize(stream_));
    } catch (...) {
      destroy();
      throw;
    }
    registry_->live.push_back(this);
  }
  CudaCommunicator(const CudaCommunicator&) = delete;
  CudaCommunicator& operator=(const CudaCommunicator&) = delete;
  ~CudaCommunicator() override {
    auto& live = registry_->live;
    live.erase(std::remove(live.begin(), live.end(), this), live.end());
    // Queued sends that nobody waited for are dropped: issuing them now could
    // block forever on a peer that is gone.
    pending_.clear();
    destroy();
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void run(Collective c, int64_t bytes) override {
    registry_->issue_all_sends(nullptr);
    const size_t count = element_count(bytes);
    ensure(count);
    launch(c, count);
    wait(stream_);
  }

  int64_t check(Collective c, int64_t bytes) override {
    registry_->issue_all_sends(nullptr);
    const size_t count = element_count(bytes);
    ensure(count);
    const size_t chunk = count / static_cast<size_t>(size_);
    host_.resize(count);
    for (size_t i = 0; i < count; ++i) host_[i] = fill_value(rank_, static_cast<int64_t>(i));
    CUDA_CHECK(cudaMemcpyAsync(buf_.get(), host_.data(), count * sizeof(float), cudaMemcpyHostToDevice, stream_));
    launch(c, count);
    const bool in_out = c == Collective::kReduceScatter || c == Collective::kAllToAll || c == Collective::kSendRecv;
    const size_t back = c == Collective::kReduceScatter ? chunk : count;
    CUDA_CHECK(cudaMemcpyAsync(host_.data(), in_out ? out_.get() : buf_.get(), back * sizeof(float),
                               cudaMemcpyDeviceToHost, stream_));
    wait(stream_);
    float sum_r = 0;
    for (int r = 0; r < size_; ++r) sum_r += static_cast<float>(r + 1);
    const float n = static_cast<float>(size_);
    const int64_t ichunk = static_cast<int64_t>(chunk);
    int64_t wrong = 0;
    for (size_t u = 0; u < back; ++u) {
      const int64_t i = static_cast<int64_t>(u);
      float expect = 0;
      switch (c) {
        case Collective::kAllReduce: expect = sum_r + n * static_cast<float>(i % 13); break;
        case Collective::kAllGather: expect = fill_value(static_cast<int>(i / ichunk), i); break;
        case Collective::kBroadcast: expect = fill_value(0, i); break;
        case Collective::kReduceScatter: expect = sum_r + n * static_cast<float>((rank_ * ichunk + i) % 13); break;
        case Collective::kAllToAll:
          // Block j of the output came from rank j's block `rank_`.
          expect = fill_value(static_cast<int>(i / ichunk), rank_ * ichunk + i % ichunk);
          break;
        case Collective::kSendRecv: expect = fill_value((rank_ + size_ - 1) % size_, i); break;
      }
      if (host_[u] != expect) ++wrong;
    }
    return wrong;
  }

  void send(int peer, int64_t bytes, int tag) override {
    (void)tag;  // NCCL matches point-to-point transfers in issue order
    check_peer(peer);
    pending_.push_back(Pending{peer, static_cast<size_t>(std::max<int64_t>(1, bytes / 4))});
  }

  void recv(int peer, int64_t bytes, int tag) override {
    (void)tag;
    check_peer(peer);
    registry_->issue_all_sends(this);
    const size_t count = static_cast<size_t>(std::max<int64_t>(1, bytes / 4));
    ensure_send_buffer();
    recv_buf_.ensure(count * sizeof(float), p2p_stream_, pools_, 0);
    NCCL_CHECK(ncclGroupStart());
    try {
      enqueue_pending();
      NCCL_CHECK(ncclRecv(recv_buf_.get(), count, ncclFloat, peer, comm_, p2p_stream_));
    } catch (...) {
      (void)ncclGroupEnd();
      throw;
    }
    NCCL_CHECK(ncclGroupEnd());
    wait(p2p_stream_);
  }

  void wait_sends() override {
    registry_->issue_all_sends(nullptr);
    wait(p2p_stream_);
  }

  void barrier() override {
    registry_->issue_all_sends(nullptr);
    NCCL_CHECK(ncclAllReduce(scalar_.get(), scalar_.get(), 1, ncclFloat, ncclSum, comm_, stream_));
    wait(stream_);
  }

  double max(double value) override {
    registry_->issue_all_sends(nullptr);
    double out = value;
    CUDA_CHECK(cudaMemcpyAsync(scalar_.get(), &value, sizeof value, cudaMemcpyHostToDevice, stream_));
    NCCL_CHECK(ncclAllReduce(scalar_.get(), scalar_.get(), 1, ncclDouble, ncclMax, comm_, stream_));
    CUDA_CHECK(cudaMemcpyAsync(&out, scalar_.get(), sizeof out, cudaMemcpyDeviceToHost, stream_));
    wait(stream_);
    return out;
  }

  void reduce_each(std::vector<double>* values, Reduce op) override {
    if (values->empty()) return;
    registry_->issue_all_sends(nullptr);
    const size_t bytes = values->size() * sizeof(double);
    vector_.ensure(bytes, stream_, pools_, 0);
    CUDA_CHECK(cudaMemcpyAsync(vector_.get(), values->data(), bytes, cudaMemcpyHostToDevice, stream_));
    NCCL_CHECK(ncclAllReduce(vector_.get(), vector_.get(), values->size(), ncclDouble,
                            op == Reduce::kSum ? ncclSum : ncclMin, comm_, stream_));
    CUDA_CHECK(cudaMemcpyAsync(values->data(), vector_.get(), bytes, cudaMemcpyDeviceToHost, stream_));
    wait(stream_);
  }

  // Issues the queued sends (one group, on the p2p stream) without waiting.
  void issue_sends() {
    if (pending_.empty()) return;
    ensure_send_buffer();
    NCCL_CHECK(ncclGroupStart());
    try {
      enqueue_pending();
    } catch (...) {
      (void)ncclGroupEnd();
      throw;
    }
    NCCL_CHECK(ncclGroupEnd());
  }

  ncclComm_t nccl() const { return comm_; }

 private:
  struct Pending {
    int peer;
    size_t count;
  };

  // Same element count as the cpu backend: whole floats, divisible by size.
  size_t element_count(int64_t bytes) const {
    const int64_t n = size_;
    return static_cast<size_t>(std::max<int64_t>(n, bytes / 4 / n * n));
  }

  void ensure(size_t count) {
    buf_.ensure(count * sizeof(float), stream_, pools_, 0);
    out_.ensure(count * sizeof(float), stream_, pools_, 0);
  }

  void ensure_send_buffer() {
    size_t most = 1;
    for (const Pending& p : pending_) most = std::max(most, p.count);
    send_buf_.ensure(most * sizeof(float), p2p_stream_, pools_, 0);
  }

  // REQUIRES: inside ncclGroupStart/End; send_buf_ holds the largest send.
  void enqueue_pending() {
    std::vector<Pending> todo;
    todo.swap(pending_);
    for (const Pending& p : todo) {
      NCCL_CHECK(ncclSend(send_buf_.get(), p.count, ncclFloat, p.peer, comm_, p2p_stream_));
    }
  }

  void check_peer(int peer) const {
    if (peer < 0 || peer >= size_) {
      throw std::runtime_error("cuda backend: peer " + std::to_string(peer) + " outside a communicator of " +
                               std::to_string(size_) + " ranks");
    }
  }

  // Enqueues collective `c` on `count` floats of buf_ (out_ for the
  // out-of-place ones) on stream_.
  void launch(Collective c, size_t count) {
    const size_t chunk = count / static_cast<size_t>(size_);
    float* buf = buf_.floats();
    float* out = out_.floats();
    switch (c) {
      case Collective::kAllReduce:
        NCCL_CHECK(ncclAllReduce(buf, buf, count, ncclFloat, ncclSum, comm_, stream_));
        break;
      case Collective::kAllGather:
        // In place: this rank's chunk already sits at its offset.
        NCCL_CHECK(ncclAllGather(buf + static_cast<size_t>(rank_) * chunk, buf, chunk, ncclFloat, comm_, stream_));
        break;
      case Collective::kReduceScatter:
        NCCL_CHECK(ncclReduceScatter(buf, out, chunk, ncclFloat, ncclSum, comm_, stream_));
        break;
      case Collective::kAllToAll:
        NCCL_CHECK(ncclGroupStart());
        try {
          for (int j = 0; j < size_; ++j) {
            const size_t at = static_cast<size_t>(j) * chunk;
            NCCL_CHECK(ncclSend(buf + at, chunk, ncclFloat, j, comm_, stream_));
            NCCL_CHECK(ncclRecv(out + at, chunk, ncclFloat, j, comm_, stream_));
          }
        } catch (...) {
          (void)ncclGroupEnd();
          throw;
        }
        NCCL_CHECK(ncclGroupEnd());
        break;
      case Collective::kBroadcast:
        NCCL_CHECK(ncclBroadcast(buf, buf, count, ncclFloat, 0, comm_, stream_));
        break;
      case Collective::kSendRecv: {
        const int to = (rank_ + 1) % size_, from = (rank_ + size_ - 1) % size_;
        NCCL_CHECK(ncclGroupStart());
        try {
          NCCL_CHECK(ncclSend(buf, count, ncclFloat, to, comm_, stream_));
          NCCL_CHECK(ncclRecv(out, count, ncclFloat, from, comm_, stream_));
        } catch (...) {
          (void)ncclGroupEnd();
          throw;
        }
        NCCL_CHECK(ncclGroupEnd());
        break;
      }
    }
  }

  // Waits for `stream`, polling NCCL for asynchronous errors (a peer that
  // died, a network failure) the way nccl-tests' testStreamSynchronize does,
  // so a broken job fails instead of hanging.
  void wait(cudaStream_t stream) {
    for (;;) {
      const cudaError_t e = cudaStreamQuery(stream);
      if (e == cudaSuccess) return;
      if (e != cudaErrorNotReady) TRAINPLAN_CUDA_FAIL("cudaStreamQuery(stream)", cuda_error_text(e));
      ncclResult_t async = ncclSuccess;
      NCCL_CHECK(ncclCommGetAsyncError(comm_, &async));
      if (async != ncclSuccess && async != ncclInProgress) {
        const std::string why = nccl_error_text(async);
        (void)ncclCommAbort(comm_);
        comm_ = nullptr;
        TRAINPLAN_CUDA_FAIL("ncclCommGetAsyncError(comm)", why);
      }
    }
  }

  void destroy() noexcept {
    buf_.release();
    out_.release();
    send_buf_.release();
    recv_buf_.release();
    scalar_.release();
    if (comm_ != nullptr) (void)ncclCommDestroy(comm_);
    comm_ = nullptr;
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    if (p2p_stream_ != nullptr) (void)cudaStreamDestroy(p2p_stream_);
    stream_ = p2p_stream_ = nullptr;
  }

  ncclComm_t comm_ = nullptr;
  bool pools_ = false;
  std::shared_ptr<CommRegistry> registry_;
  int rank_ = 0;
  int size_ = 1;
  cudaStream_t stream_ = nullptr;      // collectives, barrier, max, check
  cudaStream_t p2p_stream_ = nullptr;  // send/recv
  DeviceBuffer buf_, out_, send_buf_, recv_buf_, scalar_, vector_;
  std::vector<float> host_;
  std::vector<Pending> pending_;
};

void CommRegistry::issue_all_sends(const CudaCommunicator* except) {
  for (CudaCommunicator* c : live) {
    if (c != except) c->issue_sends();
  }
}

std::string version_xy(int v) {  // CUDA encodes 12.4 as 12040
  return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10);
}

class CudaBackend : public Backend {
 public:
  CudaBackend(int* argc, char*** argv) {
    try {
      start(argc, argv);
    } catch (...) {
      // MPI is deliberately left initialized: a rank that exits without
      // MPI_Finalize makes mpirun stop the others, which would otherwise wait
      // in ncclCommInitRank for this one.
      release();
      throw;
    }
  }
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;
  ~CudaBackend() override {
    release();
#ifdef TRAINPLAN_HAVE_MPI
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (owns_mpi_ && !finalized) MPI_Finalize();
#endif
  }

  std::string name() const override { return "cuda"; }

  std::string versions() const override {
    int runtime = 0, driver = 0, nccl = 0, major = 0, minor = 0, patch = 0;
    CUDA_CHECK(cudaRuntimeGetVersion(&runtime));
    CUDA_CHECK(cudaDriverGetVersion(&driver));
    CUBLAS_CHECK(cublasGetProperty(MAJOR_VERSION, &major));
    CUBLAS_CHECK(cublasGetProperty(MINOR_VERSION, &minor));
    CUBLAS_CHECK(cublasGetProperty(PATCH_LEVEL, &patch));
    NCCL_CHECK(ncclGetVersion(&nccl));
    // NCCL_VERSION(X,Y,Z): X*1000+Y*100+Z up to 2.8, X*10000+Y*100+Z after.
    const std::string nccl_text = nccl >= 10000 ? std::to_string(nccl / 10000) + "." + std::to_string((nccl % 10000) / 100) +
                                                      "." + std::to_string(nccl % 100)
                                                : std::to_string(nccl / 1000) + "." + std::to_string((nccl % 1000) / 100) +
                                                      "." + std::to_string(nccl % 100);
    return "CUDA runtime " + version_xy(runtime) + ", driver " + version_xy(driver) + ", cuBLAS " +
           std::to_string(major) + "." + std::to_string(minor) + "." + std::to_string(patch) + ", NCCL " + nccl_text;
  }

  DeviceInfo device() const override {
    DeviceInfo d;
    d.name = prop_.name;
    char bus[32];
    std::snprintf(bus, sizeof bus, "%04x:%02x:%02x.0", static_cast<unsigned>(prop_.pciDomainID),
                  static_cast<unsigned>(prop_.pciBusID), static_cast<unsigned>(prop_.pciDeviceID));
    d.bus_id = bus;
    d.memory_bytes = static_cast<double>(prop_.totalGlobalMem);
    return d;
  }

  Communicator& world() override { return *world_; }

  std::unique_ptr<Communicator> split(int color, int key) override {
    TRAINPLAN_CHECK(color >= 0, "split: color must be >= 0 (MPI_UNDEFINED is not supported)");
#if NCCL_VERSION_CODE >= NCCL_VERSION(2, 18, 0)
    int linked = 0;
    NCCL_CHECK(ncclGetVersion(&linked));
    if (linked < NCCL_VERSION(2, 18, 0)) {
      throw std::runtime_error("cuda backend: split() needs NCCL >= 2.18 (ncclCommSplit); the loaded library is " +
                               std::to_string(linked));
    }
    registry_->issue_all_sends(nullptr);
    ncclComm_t c = nullptr;
    NCCL_CHECK(ncclCommSplit(world_->nccl(), color, key, &c, nullptr));
    if (c == nullptr) throw std::runtime_error("cuda backend: ncclCommSplit returned no communicator");
    return std::make_unique<CudaCommunicator>(c, pools_, registry_);
#else
    (void)key;
    throw std::runtime_error("cuda backend: split() needs NCCL >= 2.18 (ncclCommSplit); built against " +
                             std::to_string(NCCL_VERSION_CODE));
#endif
  }

  bool supports(const std::string& dtype) const override {
    if (dtype == "fp32" || dtype == "fp16") return true;
    if (dtype == "bf16" || dtype == "tf32") return prop_.major >= 8;  // Ampere and later
    return false;
  }

  void gemm(int64_t m, int64_t n, int64_t k, const std::string& dtype) override {
    if (!supports(dtype)) {
      throw std::runtime_error("cuda backend: GEMMs in \"" + dtype + "\" are not supported on " + prop_.name +
                               " (supported: bf16, fp16, fp32, tf32 on compute capability >= 8.0)");
    }
    if (m < 1 || n < 1 || k < 1 || m > INT_MAX || n > INT_MAX || k > INT_MAX) {
      throw std::runtime_error("cuda backend: GEMM shape " + std::to_string(m) + " x " + std::to_string(n) + " x " +
                               std::to_string(k) + " outside 1..INT_MAX");
    }
    cudaDataType_t type = CUDA_R_32F;
    cublasComputeType_t compute = CUBLAS_COMPUTE_32F;
    size_t elem = 4;
    if (dtype == "bf16") {
      type = CUDA_R_16BF;
      elem = 2;
    } else if (dtype == "fp16") {
      type = CUDA_R_16F;
      elem = 2;
    } else if (dtype == "tf32") {
      compute = CUBLAS_COMPUTE_32F_FAST_TF32;
    }
    const size_t um = static_cast<size_t>(m), un = static_cast<size_t>(n), uk = static_cast<size_t>(k);
    // Fill byte 0x38: 0.53 in fp16, 4.4e-5 in bf16 and fp32; sums of k
    // products stay finite and normal for any k a model has.
    a_.ensure(um * uk * elem, stream_, pools_, 0x38);
    b_.ensure(uk * un * elem, stream_, pools_, 0x38);
    c_.ensure(um * un * elem, stream_, pools_, 0);
    const float alpha = 1.0f, beta = 0.0f;
    const int im = static_cast<int>(m), in = static_cast<int>(n), ik = static_cast<int>(k);
    // Column-major C (m x n) = A (m x k) * B (k x n).
    CUBLAS_CHECK(cublasGemmEx(cublas_, CUBLAS_OP_N, CUBLAS_OP_N, im, in, ik, &alpha, a_.get(), type, im, b_.get(), type,
                              ik, &beta, c_.get(), type, im, compute, CUBLAS_GEMM_DEFAULT));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void copy(int64_t bytes) override {
    const size_t n = static_cast<size_t>(std::max<int64_t>(1, bytes));
    src_.ensure(n, stream_, pools_, 1);
    dst_.ensure(n, stream_, pools_, 0);
    CUDA_CHECK(cudaMemcpyAsync(dst_.get(), src_.get(), n, cudaMemcpyDeviceToDevice, stream_));
    CUDA_CHECK(cudaStreamSynchronize(stream_));
  }

  void synchronize() override { CUDA_CHECK(cudaStreamSynchronize(stream_)); }

 private:
  void start(int* argc, char*** argv) {
    int devices = 0;
    CUDA_CHECK(cudaGetDeviceCount(&devices));
    if (devices < 1) throw std::runtime_error("cuda backend: no CUDA device visible");
    int rank = 0, size = 1;
    ncclUniqueId id;
    std::memset(&id, 0, sizeof id);
    bool have_id = false;
    (void)argc, (void)argv;

    const bool under_mpi = env_set("OMPI_COMM_WORLD_SIZE") || env_set("PMI_SIZE") || env_set("PMIX_RANK") ||
                           env_set("SLURM_NTASKS");
#ifdef TRAINPLAN_HAVE_MPI
    if (under_mpi) {
      // (a) mpirun / srun.
      int inited = 0;
      MPI_CHECK(MPI_Initialized(&inited));
      if (!inited) {
        MPI_CHECK(MPI_Init(argc, argv));
        owns_mpi_ = true;
      }
      MPI_CHECK(MPI_Comm_rank(MPI_COMM_WORLD, &rank));
      MPI_CHECK(MPI_Comm_size(MPI_COMM_WORLD, &size));
      std::optional<long> local = env_int("OMPI_COMM_WORLD_LOCAL_RANK");
      if (!local) local = env_int("SLURM_LOCALID");
      if (!local) local = env_int("MPI_LOCALRANKID");  // MPICH / Intel MPI
      if (!local) {
        MPI_Comm node;
        MPI_CHECK(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &node));
        int r = 0;
        MPI_CHECK(MPI_Comm_rank(node, &r));
        MPI_CHECK(MPI_Comm_free(&node));
        local = r;
      }
      device_ = static_cast<int>(*local % devices);
      CUDA_CHECK(cudaSetDevice(device_));
      if (rank == 0) NCCL_CHECK(ncclGetUniqueId(&id));
      MPI_CHECK(MPI_Bcast(&id, static_cast<int>(sizeof id), MPI_BYTE, 0, MPI_COMM_WORLD));
      have_id = true;
    }
#endif
    if (!have_id) {
      std::optional<long> env_rank = env_int("RANK"), env_size = env_int("WORLD_SIZE"), env_local = env_int("LOCAL_RANK");
      const char* rank_var = "RANK";
      const char* size_var = "WORLD_SIZE";
      if (!env_rank && !env_size && under_mpi) {
        // Started by mpirun but built without MPI: take the launcher's
        // variables and bootstrap NCCL from NCCL_COMM_ID.  (Not Slurm's: a
        // batch script sees SLURM_NTASKS without being one of the tasks; under
        // srun without MPI, set RANK/WORLD_SIZE/LOCAL_RANK from SLURM_PROCID,
        // SLURM_NTASKS and SLURM_LOCALID.)
        env_rank = env_int("OMPI_COMM_WORLD_RANK");
        env_size = env_int("OMPI_COMM_WORLD_SIZE");
        env_local = env_int("OMPI_COMM_WORLD_LOCAL_RANK");
        rank_var = "OMPI_COMM_WORLD_RANK";
        size_var = "OMPI_COMM_WORLD_SIZE";
        if (!env_rank || !env_size) {
          env_rank = env_int("PMI_RANK");  // MPICH hydra
          env_size = env_int("PMI_SIZE");
          env_local = env_int("MPI_LOCALRANKID");
          rank_var = "PMI_RANK";
          size_var = "PMI_SIZE";
        }
      }
      if (env_rank || env_size) {
        // (b) torchrun-style environment.
        if (!env_rank || !env_size) {
          throw_input_error(env_rank ? size_var : rank_var, "", "not set while " +
                            std::string(env_rank ? rank_var : size_var) + " is",
                            "set both (torchrun sets RANK, WORLD_SIZE and LOCAL_RANK)");
        }
        size = static_cast<int>(*env_size);
        rank = static_cast<int>(*env_rank);
        if (size < 1 || rank >= size) {
          throw_input_error(rank_var, "", "rank " + std::to_string(rank) + " outside a world of " +
                            std::to_string(size) + " ranks");
        }
        if (size > 1 && !env_set("NCCL_COMM_ID")) {
          const char* addr = std::getenv("MASTER_ADDR");
          const std::optional<long> port = env_int("MASTER_PORT");
          if (addr == nullptr || *addr == '\0' || !port) {
            throw_input_error("NCCL_COMM_ID", "", "not set, and no MASTER_ADDR/MASTER_PORT to derive it from",
                              "export NCCL_COMM_ID=<host of rank 0>:<free port> on every rank");
          }
          std::string host = addr;
          if (host.find(':') != std::string::npos && host.front() != '[') host = "[" + host + "]";  // IPv6
          const std::string comm_id = host + ":" + std::to_string(*port + 1);
          if (setenv("NCCL_COMM_ID", comm_id.c_str(), 1) != 0) {
            throw std::runtime_error("cuda backend: setenv(NCCL_COMM_ID): " + std::string(std::strerror(errno)));
          }
        }
        device_ = static_cast<int>((env_local ? *env_local : rank) % devices);
      } else {
        // (c) one process.
        const std::optional<long> dev = env_int("TRAINPLAN_CUDA_DEVICE");
        device_ = dev ? static_cast<int>(*dev) : 0;
        if (device_ >= devices) {
          throw_input_error("TRAINPLAN_CUDA_DEVICE", "", "device " + std::to_string(device_) + " does not exist",
                            "this machine has " + std::to_string(devices) + " visible CUDA device(s)");
        }
      }
      CUDA_CHECK(cudaSetDevice(device_));
      // With NCCL_COMM_ID set this is the same id on every rank, derived from
      // the address; rank 0's ncclCommInitRank opens the root there.
      NCCL_CHECK(ncclGetUniqueId(&id));
    }

    CUDA_CHECK(cudaGetDeviceProperties(&prop_, device_));
    int pools = 0;
    CUDA_CHECK(cudaDeviceGetAttribute(&pools, cudaDevAttrMemoryPoolsSupported, device_));
    pools_ = pools != 0;
    stream_ = make_stream();
    CUBLAS_CHECK(cublasCreate(&cublas_));
    CUBLAS_CHECK(cublasSetStream(cublas_, stream_));

    ncclComm_t comm = nullptr;
    NCCL_CHECK(ncclCommInitRank(&comm, size, id, rank));
    world_ = std::make_unique<CudaCommunicator>(comm, pools_, registry_);
  }

  void release() noexcept {
    world_.reset();
    a_.release();
    b_.release();
    c_.release();
    src_.release();
    dst_.release();
    if (cublas_ != nullptr) (void)cublasDestroy(cublas_);
    cublas_ = nullptr;
    if (stream_ != nullptr) (void)cudaStreamDestroy(stream_);
    stream_ = nullptr;
  }

  std::shared_ptr<CommRegistry> registry_ = std::make_shared<CommRegistry>();
  std::unique_ptr<CudaCommunicator> world_;
#ifdef TRAINPLAN_HAVE_MPI
  bool owns_mpi_ = false;  // MPI_Init was ours, so MPI_Finalize is too
#endif
  bool pools_ = false;
  int device_ = 0;
  cudaDeviceProp prop_{};
  cublasHandle_t cublas_ = nullptr;
  cudaStream_t stream_ = nullptr;  // GEMMs and copies
  DeviceBuffer a_, b_, c_, src_, dst_;
};

}  // namespace

std::unique_ptr<Backend> make_cuda_backend(int* argc, char*** argv) { return std::make_unique<CudaBackend>(argc, argv); }

}  // namespace trainplan
