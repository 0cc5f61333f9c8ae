// Backends: where kernels run. The executor asks a Backend for each node's kernel.
//
//   std::unique_ptr<Backend> b = make_backend("cpu");   // or "reference", "cuda"
//   const Kernel& k = b->kernel(node);                  // throws Unsupported if none
//
// Why: the reference backend is the oracle (plain loops, fp32/fp64); the cpu
// backend uses oneDNN/oneTBB kernels and falls back to the reference kernel only
// for ops listed by fallback_ops() (shown by `trainrt inspect`); the cuda backend
// (cuDNN/cuBLASLt) slots in behind the same interface.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "ops/register_all.h"

namespace trainrt {

class Backend {
 public:
  virtual ~Backend() = default;
  virtual std::string name() const = 0;
  // The kernel for `n` on this backend; throws Unsupported naming the op.
  virtual const Kernel& kernel(const Node& n) const;
  // Which arguments `n`'s kernel takes in a blocked layout (ops/kernel.h); all Plain
  // for reference fallbacks, kernels that declared nothing and !blocked_layouts.
  NodeLayouts layouts(const Graph& g, const Node& n) const;
  // Throws Unsupported (naming why) when this backend cannot run the convolutions in
  // `m` arithmetic at a useful speed: the cpu backend needs AVX-512 BF16 for bf16 (fp16
  // it emulates: rounded copies, no speed-up); the reference backend takes everything.
  virtual void check_math(MathPrecision m) const { (void)m; }
  // Runs two independent kernel calls (a pair of the plan, Plan::runs_with_next) at the
  // same time where this backend can: the cpu backend runs them on two oneTBB threads
  // and gives each half of its OpenMP threads. By default one after the other.
  virtual void run_pair(const std::function<void()>& first, const std::function<void()>& second) const {
    first();
    second();
  }
  // Ops whose kernel on this backend is the reference one.
  std::vector<std::string> fallback_ops() const;
  // Threads this backend may use (0 = all cores).
  int threads = 0;
  // Whether layouts() reports the kernels' blocked slots. The cpu backend turns it off
  // where oneDNN has no nChw16c kernels (no AVX-512: they would run on its reference
  // implementations, ops/dnnl_util.h cpu_has_avx512_core); tests turn it on to check
  // the layout choice and the blocked kernels on any CPU.
  bool blocked_layouts = true;

 protected:
  explicit Backend(std::string kernel_set, bool reference_fallback)
      : kernel_set_(std::move(kernel_set)), reference_fallback_(reference_fallback) {}

 private:
  std::string kernel_set_;
  bool reference_fallback_;
};

// "reference", "cpu" (and "cuda" when built with CUDA); BadInput for other names.
std::unique_ptr<Backend> make_backend(const std::string& name, int threads = 0);
std::vector<std::string> backend_names();

}  // namespace trainrt
