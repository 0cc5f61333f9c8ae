// The backends trainrt has and the factory that makes one by name: the reference and cpu
// backends (defined here) and the cuda backend (runtime/cuda/). The one place in runtime/
// that knows every implementation; backend.cpp has the interface's shared parts only.
#include <omp.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "graph/error.h"
#include "ops/core/parallel.h"
#include "ops/onednn/dnnl_util.h"
#include "runtime/backend.h"
#ifdef TRAINRT_HAVE_CUDA
#include "runtime/cuda/cuda_backend.h"
#endif

namespace trainrt {

namespace {
class ReferenceBackend : public Backend {
 public:
  ReferenceBackend() : Backend("reference", {}) {}
  std::string name() const override { return "reference"; }
};
class CpuBackend : public Backend {
 public:
  CpuBackend() : Backend("cpu", {"reference"}) { blocked_layouts = dnnl_util::cpu_has_avx512_core(); }
  std::string name() const override { return "cpu"; }
  void run_pair(const std::function<void()>& first, const std::function<void()>& second) const override {
    // oneDNN's primitives open OpenMP regions sized by the calling thread's setting:
    // each branch takes half of the threads, so the pair does not oversubscribe.
    const int all = threads > 0 ? threads : omp_get_max_threads();
    if (all < 2) return Backend::run_pair(first, second);
    auto with_threads = [](int n, const std::function<void()>& f) {
      const int before = omp_get_max_threads();
      omp_set_num_threads(n);
      try {
        f();
      } catch (...) {
        omp_set_num_threads(before);
        throw;
      }
      omp_set_num_threads(before);
    };
    parallel_pair([&] { with_threads(all / 2, first); }, [&] { with_threads(all - all / 2, second); });
  }
  // The executor's copies (a batch into the plan's buffers, state) and the copy that
  // bench measures as the memory's speed (copy_bandwidth_gbps): on every thread.
  void copy(void* to, const void* from, size_t bytes) const override { parallel_copy(to, from, bytes); }
  void check_math(MathPrecision m) const override {
    if (m == MathPrecision::bf16 && !dnnl_util::cpu_has_bf16())
      throw_unsupported("--precision bf16",
                        "this CPU has no AVX-512 BF16 instructions, where oneDNN runs bf16 convolutions on its slow "
                        "reference path; use fp32");
  }
};
}  // namespace

std::vector<std::string> backend_names() {
  std::vector<std::string> names{"reference", "cpu"};
#ifdef TRAINRT_HAVE_CUDA
  names.push_back("cuda");
#endif
  return names;
}

std::unique_ptr<Backend> make_backend(const std::string& name, int threads) {
  std::unique_ptr<Backend> b;
  if (name == "reference")
    b = std::make_unique<ReferenceBackend>();
  else if (name == "cpu")
    b = std::make_unique<CpuBackend>();
  else if (name == "cuda") {
#ifdef TRAINRT_HAVE_CUDA
    b = make_cuda_backend();
#else
    throw_bad_input("--backend cuda", "this trainrt was built without CUDA (configure with -DTRAINRT_CUDA=ON)");
#endif
  } else {
    throw_bad_input("--backend", "unknown backend '" + name + "' (expected reference or cpu)");
  }
  b->threads = threads;
  return b;
}

}  // namespace trainrt
