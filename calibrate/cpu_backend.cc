// The cpu backend: Eigen single-precision GEMMs and memcpy on the host, MPI
// collectives between processes (OpenMPI's shared-memory transport on one
// machine).  Without MPI at build time the world is this process alone.
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <stdexcept>
#include <string>
#include <vector>

#include <Eigen/Dense>

#include "calibrate/backend.h"
#include "simulator/core/error.h"

#ifdef TRAINPLAN_HAVE_MPI
#include <mpi.h>
#define MPI_CHECK(call)                                                                                    \
  do {                                                                                                     \
    int rc_ = (call);                                                                                      \
    if (rc_ != MPI_SUCCESS) {                                                                              \
      char msg_[MPI_MAX_ERROR_STRING];                                                                     \
      int len_ = 0;                                                                                        \
      MPI_Error_string(rc_, msg_, &len_);                                                                  \
      throw std::runtime_error(std::string(__FILE__) + ":" + std::to_string(__LINE__) + ": " #call ": " +  \
                               std::string(msg_, static_cast<size_t>(len_)));                              \
    }                                                                                                      \
  } while (0)
#endif

namespace trainplan {

namespace {

// Rank-dependent fill value so every collective's result is checkable:
// v(r, i) = (r + 1) + (i % 13), exact in float.
float fill_value(int r, int64_t i) { return static_cast<float>(r + 1) + static_cast<float>(i % 13); }

class CpuCommunicator : public Communicator {
 public:
#ifdef TRAINPLAN_HAVE_MPI
  explicit CpuCommunicator(MPI_Comm comm, bool owned) : comm_(comm), owned_(owned) {
    MPI_Comm_rank(comm_, &rank_);
    MPI_Comm_size(comm_, &size_);
  }
  ~CpuCommunicator() override {
    if (owned_) MPI_Comm_free(&comm_);
  }
#else
  CpuCommunicator() = default;
#endif
  int rank() const override { return rank_; }
  int size() const override { return size_; }

  void run(Collective c, int64_t bytes) override {
    const int64_t count = std::max<int64_t>(size_, bytes / 4 / size_ * size_);
    ensure(count);
#ifdef TRAINPLAN_HAVE_MPI
    const int n = static_cast<int>(count);
    const int chunk = static_cast<int>(count / size_);
    switch (c) {
      case Collective::kAllReduce:
        MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, buf_.data(), n, MPI_FLOAT, MPI_SUM, comm_));
        break;
      case Collective::kAllGather:
        MPI_CHECK(MPI_Allgather(MPI_IN_PLACE, chunk, MPI_FLOAT, buf_.data(), chunk, MPI_FLOAT, comm_));
        break;
      case Collective::kReduceScatter:
        MPI_CHECK(MPI_Reduce_scatter_block(buf_.data(), out_.data(), chunk, MPI_FLOAT, MPI_SUM, comm_));
        break;
      case Collective::kAllToAll:
        MPI_CHECK(MPI_Alltoall(buf_.data(), chunk, MPI_FLOAT, out_.data(), chunk, MPI_FLOAT, comm_));
        break;
      case Collective::kBroadcast:
        MPI_CHECK(MPI_Bcast(buf_.data(), n, MPI_FLOAT, 0, comm_));
        break;
      case Collective::kSendRecv: {
        const int to = (rank_ + 1) % size_, from = (rank_ + size_ - 1) % size_;
        MPI_CHECK(MPI_Sendrecv(buf_.data(), n, MPI_FLOAT, to, 7, out_.data(), n, MPI_FLOAT, from, 7, comm_,
                               MPI_STATUS_IGNORE));
        break;
      }
    }
#else
    (void)c;
    std::memcpy(out_.data(), buf_.data(), static_cast<size_t>(count) * 4);
#endif
  }

  int64_t check(Collective c, int64_t bytes) override {
    const int64_t count = std::max<int64_t>(size_, bytes / 4 / size_ * size_);
    ensure(count);
    const int64_t chunk = count / size_;
    for (int64_t i = 0; i < count; ++i) buf_[static_cast<size_t>(i)] = fill_value(rank_, i);
    if (c == Collective::kAllGather) {
      // Each rank contributes its own chunk in place.
      for (int64_t i = 0; i < count; ++i) buf_[static_cast<size_t>(i)] = fill_value(rank_, i);
    }
    run(c, bytes);
    int64_t wrong = 0;
    float sum_r = 0;
    for (int r = 0; r < size_; ++r) sum_r += static_cast<float>(r + 1);
    for (int64_t i = 0; i < count; ++i) {
      float expect = 0, got = buf_[static_cast<size_t>(i)];
      switch (c) {
        case Collective::kAllReduce: expect = sum_r + static_cast<float>(size_ * (i % 13)); break;
        case Collective::kAllGather: expect = fill_value(static_cast<int>(i / chunk), i); break;
        case Collective::kBroadcast: expect = fill_value(0, i); break;
        case Collective::kReduceScatter:
          if (i >= chunk) continue;
          got = out_[static_cast<size_t>(i)];
          expect = sum_r + static_cast<float>(size_ * ((rank_ * chunk + i) % 13));
          break;
        case Collective::kAllToAll: {
          // Block j of the output came from rank j's block `rank_`.
          got = out_[static_cast<size_t>(i)];
          const int from = static_cast<int>(i / chunk);
          expect = fill_value(from, rank_ * chunk + i % chunk);
          break;
        }
        case Collective::kSendRecv: {
          got = out_[static_cast<size_t>(i)];
          expect = fill_value((rank_ + size_ - 1) % size_, i);
          break;
        }
      }
      if (got != expect) ++wrong;
    }
    return wrong;
  }

  void send(int peer, int64_t bytes, int tag) override {
#ifdef TRAINPLAN_HAVE_MPI
    // Non-blocking: the buffer lives until wait_sends().
    pending_.emplace_back(static_cast<size_t>(std::max<int64_t>(1, bytes / 4)), 1.0f);
    requests_.emplace_back();
    MPI_CHECK(MPI_Isend(pending_.back().data(), static_cast<int>(pending_.back().size()), MPI_FLOAT, peer, tag, comm_,
                        &requests_.back()));
#else
    (void)peer, (void)bytes, (void)tag;
#endif
  }
  void recv(int peer, int64_t bytes, int tag) override {
#ifdef TRAINPLAN_HAVE_MPI
    const int64_t count = std::max<int64_t>(1, bytes / 4);
    ensure(count);
    MPI_CHECK(MPI_Recv(out_.data(), static_cast<int>(count), MPI_FLOAT, peer, tag, comm_, MPI_STATUS_IGNORE));
#else
    (void)peer, (void)bytes, (void)tag;
#endif
  }
  void wait_sends() override {
#ifdef TRAINPLAN_HAVE_MPI
    if (!requests_.empty()) {
      MPI_CHECK(MPI_Waitall(static_cast<int>(requests_.size()), requests_.data(), MPI_STATUSES_IGNORE));
    }
    requests_.clear();
    pending_.clear();
#endif
  }
  void barrier() override {
#ifdef TRAINPLAN_HAVE_MPI
    MPI_CHECK(MPI_Barrier(comm_));
#endif
  }
  double max(double value) override {
#ifdef TRAINPLAN_HAVE_MPI
    double out = value;
    MPI_CHECK(MPI_Allreduce(&value, &out, 1, MPI_DOUBLE, MPI_MAX, comm_));
    return out;
#else
    return value;
#endif
  }
  void reduce_each(std::vector<double>* values, Reduce op) override {
#ifdef TRAINPLAN_HAVE_MPI
    if (values->empty()) return;
    MPI_CHECK(MPI_Allreduce(MPI_IN_PLACE, values->data(), static_cast<int>(values->size()), MPI_DOUBLE,
                            op == Reduce::kSum ? MPI_SUM : MPI_MIN, comm_));
#else
    (void)values, (void)op;
#endif
  }

 private:
  void ensure(int64_t count) {
    if (static_cast<int64_t>(buf_.size()) < count) {
      buf_.assign(static_cast<size_t>(count), 0.0f);
      out_.assign(static_cast<size_t>(count), 0.0f);
    }
  }
#ifdef TRAINPLAN_HAVE_MPI
  MPI_Comm comm_ = MPI_COMM_WORLD;
  bool owned_ = false;
  std::vector<std::vector<float>> pending_;
  std::vector<MPI_Request> requests_;
#endif
  int rank_ = 0;
  int size_ = 1;
  std::vector<float> buf_, out_;
};

std::string cpu_model_name() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      auto p = line.find(':');
      if (p != std::string::npos) return line.substr(p + 2);
    }
  }
  return "unknown CPU";
}

class CpuBackend : public Backend {
 public:
  CpuBackend(int* argc, char*** argv) {
#ifdef TRAINPLAN_HAVE_MPI
    int inited = 0;
    MPI_Initialized(&inited);
    if (!inited) {
      MPI_CHECK(MPI_Init(argc, argv));
      owns_mpi_ = true;
    }
    world_ = std::make_unique<CpuCommunicator>(MPI_COMM_WORLD, false);
#else
    (void)argc, (void)argv;
    world_ = std::make_unique<CpuCommunicator>();
#endif
  }
  ~CpuBackend() override {
    world_.reset();
#ifdef TRAINPLAN_HAVE_MPI
    if (owns_mpi_) MPI_Finalize();
#endif
  }
  std::string name() const override { return "cpu"; }
  std::string versions() const override {
    std::string v = "Eigen " + std::to_string(EIGEN_WORLD_VERSION) + "." + std::to_string(EIGEN_MAJOR_VERSION) + "." +
                    std::to_string(EIGEN_MINOR_VERSION);
#ifdef TRAINPLAN_HAVE_MPI
    char lib[MPI_MAX_LIBRARY_VERSION_STRING];
    int len = 0;
    MPI_Get_library_version(lib, &len);
    std::string s(lib, static_cast<size_t>(len));
    v += ", " + s.substr(0, s.find(','));
#else
    v += ", no MPI";
#endif
    return v;
  }
  DeviceInfo device() const override {
    DeviceInfo d;
    d.name = "cpu: " + cpu_model_name();
    char host[256] = {0};
    gethostname(host, sizeof host - 1);
    d.bus_id = host;
    d.memory_bytes = static_cast<double>(sysconf(_SC_PHYS_PAGES)) * static_cast<double>(sysconf(_SC_PAGE_SIZE));
    return d;
  }
  Communicator& world() override { return *world_; }
  std::unique_ptr<Communicator> split(int color, int key) override {
#ifdef TRAINPLAN_HAVE_MPI
    MPI_Comm c;
    MPI_CHECK(MPI_Comm_split(MPI_COMM_WORLD, color, key, &c));
    return std::make_unique<CpuCommunicator>(c, true);
#else
    (void)color, (void)key;
    return std::make_unique<CpuCommunicator>();
#endif
  }
  bool supports(const std::string& dtype) const override { return dtype == "fp32"; }
  void gemm(int64_t m, int64_t n, int64_t k, const std::string& dtype) override {
    TRAINPLAN_CHECK(supports(dtype), "cpu backend runs fp32 GEMMs only");
    const size_t need_a = static_cast<size_t>(m * k), need_b = static_cast<size_t>(k * n), need_c = static_cast<size_t>(m * n);
    if (a_.size() < need_a) a_.assign(need_a, 0.5f);
    if (b_.size() < need_b) b_.assign(need_b, 0.25f);
    if (c_.size() < need_c) c_.assign(need_c, 0.0f);
    Eigen::Map<Eigen::MatrixXf> A(a_.data(), m, k), B(b_.data(), k, n), C(c_.data(), m, n);
    C.noalias() = A * B;
  }
  void copy(int64_t bytes) override {
    const size_t n = static_cast<size_t>(std::max<int64_t>(1, bytes));
    if (src_.size() < n) {
      src_.assign(n, 1);
      dst_.assign(n, 0);
    }
    std::memcpy(dst_.data(), src_.data(), n);
  }
  void synchronize() override {}
  // Writes a scratch buffer twice the last-level cache (glibc's sysconf),
  // within 32-128 MiB, which evicts the lines of ours.
  void evict_caches() override {
    if (scratch_.empty()) {
      const long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
      scratch_.assign(static_cast<size_t>(std::clamp<long>(2 * llc, 32L << 20, 128L << 20)), 0);
    }
    for (size_t i = 0; i < scratch_.size(); i += 64) scratch_[i] = static_cast<char>(scratch_[i] + 1);
  }

 private:
  std::unique_ptr<CpuCommunicator> world_;
  bool owns_mpi_ = false;
  std::vector<float> a_, b_, c_;
  std::vector<char> src_, dst_, scratch_;
};

}  // namespace

std::unique_ptr<Backend> make_cpu_backend(int* argc, char*** argv) { return std::make_unique<CpuBackend>(argc, argv); }

}  // namespace trainplan
