// The Dropout loops (ops/misc.cpp's header comment gives the mask), one template per op
// for both backends: the reference kernels (ops/misc.cpp) instantiate kParallel=false,
// the cpu kernels (ops/misc_cpu.cpp) kParallel=true, the same per-element code over
// parallel chunks (ops/core/parallel.h), so the same mask and the same bits; the cpu
// Dropout's fp32 draws run 16 at a time (ops/onednn/dropout_simd.h), the same bits too.
//
//   r.kernels.add("cpu", "", "Dropout", misc_loops::dropout_kernel<true>);
#pragma once

#include <cmath>
#include <cstring>
#include <string>
#include <type_traits>
#ifdef __SSE2__
#include <emmintrin.h>
#endif

#include "ops/core/common.h"
#include "ops/core/dropout_mask.h"
#include "ops/core/parallel.h"
#include "ops/onednn/dropout_simd.h"

namespace trainrt::misc_loops {

// ---- Dropout ----------------------------------------------------------------

using dropout_mask::splitmix64;  // the mask rule, shared with the cuda kernels (ops/core/dropout_mask.h)

// Inputs: data (N..), optional ratio (scalar, default 0.5), optional training_mode
// (bool scalar). Outputs: output (like data), optional mask (bool, like data).
// kParallel: the cpu kernel, the same per-element code over parallel chunks, so
// its mask and output are the reference's bit for bit (ops/core/parallel.h).
template <bool kParallel>
void dropout_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  uint8_t* mask = ctx.has_output(1) ? ctx.out(1).data<uint8_t>() : nullptr;
  const bool training = ctx.training || (ctx.has_input(2) && ctx.in(2).get_as_double(0) != 0.0);
  const double ratio = ctx.has_input(1) ? ctx.in(1).get_as_double(0) : 0.5;
  const int64_t n = x.numel();
  if (!training) {  // inference: identity, mask all true
    std::memcpy(y.raw(), x.raw(), x.nbytes());
    if (mask) std::memset(mask, 1, static_cast<size_t>(n));
    return;
  }
  if (!(ratio >= 0.0 && ratio < 1.0)) throw_bad_input("", "ratio must be in [0, 1), got " + std::to_string(ratio));
  const uint64_t key = dropout_mask::key_of(
      ctx.seed, ctx.node.has_attr("seed") ? splitmix64(static_cast<uint64_t>(ctx.node.attr_int("seed", 0))) : 0);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T scale = static_cast<T>(1.0 / (1.0 - ratio));
    const T* px = x.data<T>();
    T* py = y.data<T>();
    // Element i (storage order) whose row-major index is `at`: the mask depends on `at`
    // only, so a tensor in any layout (runtime/layout.h) draws the Plain tensor's mask.
    auto draw = [=](int64_t i, int64_t at) {
      const double u = static_cast<double>(dropout_mask::draw(key, at)) * 0x1p-53;
      const bool keep = u >= ratio;
      py[i] = keep ? px[i] * scale : T(0);
      if (mask) mask[i] = keep ? 1 : 0;
    };
    const Layout layout = x.layout();
    if constexpr (kParallel && std::is_same_v<T, float>) {
      // The cpu kernel's fp32 Plain and Blocked16c tensors: 16 draws at a time, the same
      // integer test (dropout_mask::threshold is u >= ratio exactly) and product.
      if (layout == Layout::Plain || layout == Layout::Blocked16c) {
        const dropout_simd::Draw d{key, dropout_mask::threshold(ratio), scale};
        const bool blocked = layout == Layout::Blocked16c;
        for_range<true>(n, [=, &x](int64_t begin, int64_t end) {
          if (!blocked)
            return dropout_simd::apply_plain(px + begin, py + begin, mask ? mask + begin : nullptr, end - begin, begin,
                                             d);
          dropout_simd::apply_blocked16c(px, py, mask, begin, end, x.dims(), d);
        });
        return;
      }
    }
    for_range<kParallel>(n, [=, &x](int64_t begin, int64_t end) {
      if (layout == Layout::Plain)
        for (int64_t i = begin; i < end; ++i) draw(i, i);
      else if (layout == Layout::Blocked16c)
        for (BlockedWalk w(x.dims(), begin); w.offset < end; w.next()) draw(w.offset, w.plain);
      else
        for (int64_t i = begin; i < end; ++i) draw(i, storage_to_plain_index(layout, x.dims(), i));
    });
  });
}

template <bool kParallel>
void dropout_grad_kernel(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const uint8_t* mask = ctx.in(1).data<uint8_t>();
  const bool training = ctx.training || (ctx.has_input(3) && ctx.in(3).get_as_double(0) != 0.0);
  const double ratio = ctx.has_input(2) ? ctx.in(2).get_as_double(0) : 0.5;
  if (training && !(ratio >= 0.0 && ratio < 1.0))
    throw_bad_input("", "ratio must be in [0, 1), got " + std::to_string(ratio));
  dispatch_float(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T scale = training ? static_cast<T>(1.0 / (1.0 - ratio)) : T(1);
    const T* pdy = dy.data<T>();
    T* pdx = ctx.out(0).data<T>();
    for_range<kParallel>(dy.numel(), [=](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) pdx[i] = mask[i] ? pdy[i] * scale : T(0);
    });
  });
}

template <bool kParallel>
void dropout_relu_grad_kernel(KernelContext& ctx) {
  const Tensor& dz = ctx.in(0);
  const Tensor& z = ctx.in(1);
  const bool training = ctx.training || (ctx.has_input(3) && ctx.in(3).get_as_double(0) != 0.0);
  const double ratio = ctx.has_input(2) ? ctx.in(2).get_as_double(0) : 0.5;
  if (training && !(ratio >= 0.0 && ratio < 1.0))
    throw_bad_input("", "ratio must be in [0, 1), got " + std::to_string(ratio));
  dispatch_float(dz.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T scale = training ? static_cast<T>(1.0 / (1.0 - ratio)) : T(1);
    const T* pdz = dz.data<T>();
    const T* pz = z.data<T>();
    T* pdx = ctx.out(0).data<T>();
    // Under bf16/fp16 Z's sign is read rounded (math_rounded_inputs): a Z that underflows
    // to 0 in 16 bits passes no gradient, as when Z is stored in 16 bits.
    const MathPrecision m = std::is_same_v<T, float> ? ctx.math : MathPrecision::fp32;
    for_range<kParallel>(dz.numel(), [=](int64_t begin, int64_t end) {
      int64_t i = begin;
#ifdef __SSE2__
      // fp32, 4 at a time without a branch: Z's sign is random, and GCC's -O2 left the
      // loop below a mispredicted branch per element. The same bits: dz * scale or +0.
      if constexpr (std::is_same_v<T, float>)
        if (m == MathPrecision::fp32) {
          const __m128 s4 = _mm_set1_ps(scale), zero = _mm_setzero_ps();
          for (; i + 4 <= end; i += 4) {
            const __m128 on = _mm_cmpgt_ps(_mm_loadu_ps(pz + i), zero);
            _mm_storeu_ps(pdx + i, _mm_and_ps(on, _mm_mul_ps(_mm_loadu_ps(pdz + i), s4)));
          }
        }
#endif
      for (; i < end; ++i) {
        const bool on = m == MathPrecision::fp32 ? pz[i] > T(0) : round_to_math(static_cast<float>(pz[i]), m) > 0.f;
        pdx[i] = on ? pdz[i] * scale : T(0);
      }
    });
  });
}
}  // namespace trainrt::misc_loops
