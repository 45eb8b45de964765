#include "calibrate/backend.h"

#include "simulator/core/error.h"

namespace trainplan {

std::unique_ptr<Backend> make_cpu_backend(int* argc, char*** argv);
#ifdef TRAINPLAN_HAVE_CUDA
std::unique_ptr<Backend> make_cuda_backend(int* argc, char*** argv);
#endif

std::unique_ptr<Backend> make_backend(const std::string& name, int* argc, char*** argv) {
  if (name == "cpu") return make_cpu_backend(argc, argv);
  if (name == "cuda") {
#ifdef TRAINPLAN_HAVE_CUDA
    return make_cuda_backend(argc, argv);
#else
    throw_input_error("--backend", "", "the cuda backend was not built (no CUDA toolkit or NCCL found at configure time)",
                      "rebuild where CUDA and NCCL are installed, or use --backend cpu");
#endif
  }
  throw_input_error("--backend", "", "unknown backend \"" + name + "\"", "allowed: cpu, cuda");
}

}  // namespace trainplan
