// Sum's loop, one template for both backends: the reference kernel (ops/elementwise.cpp)
// instantiates kParallel=false, the cpu kernel (ops/elementwise_cpu.cpp) kParallel=true,
// the same code over parallel chunks (ops/core/parallel.h), so the same bits.
//
//   r.kernels.add("reference", "", "Sum", elementwise_loops::sum_kernel<false>);
#pragma once

#include <vector>

#include "ops/core/broadcast.h"
#include "ops/core/common.h"
#include "ops/core/parallel.h"

namespace trainrt::elementwise_loops {

// y = x0 + x1 + ... with broadcasting, per element left to right from 0.
// kParallel: the cpu kernel, the same code over parallel chunks (same bits).
template <bool kParallel>
void sum_kernel(KernelContext& ctx) {
  Tensor& y = ctx.out(0);
  dispatch_float(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* py = y.data<T>();
    std::vector<BroadcastIndex> ix;
    for (size_t k = 0; k < ctx.inputs.size(); ++k) ix.emplace_back(ctx.in(k).dims(), y.dims());
    for_range<kParallel>(y.numel(), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) py[i] = T(0);
      for (size_t k = 0; k < ctx.inputs.size(); ++k) {
        const T* px = ctx.in(k).data<T>();
        if (ctx.in(k).numel() == y.numel()) {  // the gradient fan-out case: a dense loop
          for (int64_t i = begin; i < end; ++i) py[i] += px[i];
        } else {
          for (int64_t i = begin; i < end; ++i) py[i] += px[ix[k](i)];
        }
      }
    });
  });
}

}  // namespace trainrt::elementwise_loops
