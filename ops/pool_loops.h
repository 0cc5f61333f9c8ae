// LpPool's loops (ops/pool.cpp gives the schema), one template per pass for both
// backends: the reference kernels instantiate kParallel=false, the cpu kernels
// (ops/pool_cpu.cpp) kParallel=true, the same per-plane code over parallel planes
// (ops/core/parallel.h), so the two agree bit for bit. oneDNN has no Lp pooling.
//
//   lp_pool_loops::forward_kernel<true>(ctx);    // LpPool(X) -> Y
//   lp_pool_loops::backward_kernel<true>(ctx);   // LpPoolGrad(dY, X, Y) -> dX
//
// Y = (sum over the window's taps on real elements of |x|^p)^(1/p); padding adds 0, so
// it takes no count_include_pad (the geometry, dilations and ceil_mode included, is
// ops/core/pool_geometry.h's). Its gradient: dX += dY * sign(x) * |x|^(p-1) / Y^(p-1)
// over the windows holding x, and nothing from a window whose Y is 0 (every tap 0: the
// norm's gradient is undefined there; PyTorch's is NaN). Sums in double, each plane's
// windows in order.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/core/common.h"
#include "ops/core/parallel.h"
#include "ops/core/pool_geometry.h"

namespace trainrt::lp_pool_loops {

// |v|^p, with p = 1 and 2 exact.
inline double abs_pow(double v, int64_t p) {
  const double a = std::fabs(v);
  return p == 1 ? a : p == 2 ? a * a : std::pow(a, static_cast<double>(p));
}

// f(input offset in the plane) for every tap of window (od,oh,ow) on a real element.
template <typename F>
void for_taps(const Pool3& g, int64_t od, int64_t oh, int64_t ow, F&& f) {
  for (int64_t a = 0; a < g.k[0]; ++a) {
    const int64_t id = od * g.s[0] - g.pb[0] + a * g.d[0];
    if (id < 0 || id >= g.in[0]) continue;
    for (int64_t b = 0; b < g.k[1]; ++b) {
      const int64_t ih = oh * g.s[1] - g.pb[1] + b * g.d[1];
      if (ih < 0 || ih >= g.in[1]) continue;
      for (int64_t c = 0; c < g.k[2]; ++c) {
        const int64_t iw = ow * g.s[2] - g.pb[2] + c * g.d[2];
        if (iw >= 0 && iw < g.in[2]) f((id * g.in[1] + ih) * g.in[2] + iw);
      }
    }
  }
}

// x: P,D,H,W -> y: P,Do,Ho,Wo.
template <typename T, bool kParallel>
void forward(const Pool3& g, const T* x, T* y, int64_t p) {
  const int64_t in = g.in_size(), out = g.out_size();
  for_rows<kParallel>(g.planes, in * g.k[0] * g.k[1] * g.k[2], [&](int64_t p0, int64_t p1) {
    for (int64_t q = p0; q < p1; ++q) {
      const T* plane = x + q * in;
      for (int64_t od = 0; od < g.out[0]; ++od)
        for (int64_t oh = 0; oh < g.out[1]; ++oh)
          for (int64_t ow = 0; ow < g.out[2]; ++ow) {
            double sum = 0;
            for_taps(g, od, oh, ow, [&](int64_t i) { sum += abs_pow(static_cast<double>(plane[i]), p); });
            const double norm = p == 1 ? sum : p == 2 ? std::sqrt(sum) : std::pow(sum, 1.0 / static_cast<double>(p));
            y[q * out + (od * g.out[1] + oh) * g.out[2] + ow] = static_cast<T>(norm);
          }
    }
  });
}

// dy, y: P,Do,Ho,Wo, x: P,D,H,W -> dx: P,D,H,W.
template <typename T, bool kParallel>
void backward(const Pool3& g, const T* dy, const T* x, const T* y, T* dx, int64_t p) {
  const int64_t in = g.in_size(), out = g.out_size();
  for_rows<kParallel>(g.planes, in * g.k[0] * g.k[1] * g.k[2], [&](int64_t p0, int64_t p1) {
    std::vector<double> acc(static_cast<size_t>(in));
    for (int64_t q = p0; q < p1; ++q) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const T* plane = x + q * in;
      for (int64_t od = 0; od < g.out[0]; ++od)
        for (int64_t oh = 0; oh < g.out[1]; ++oh)
          for (int64_t ow = 0; ow < g.out[2]; ++ow) {
            const int64_t o = q * out + (od * g.out[1] + oh) * g.out[2] + ow;
            const double norm = static_cast<double>(y[o]);
            if (norm == 0) continue;
            const double scale = static_cast<double>(dy[o]) / (p == 1 ? 1.0 : abs_pow(norm, p - 1));
            for_taps(g, od, oh, ow, [&](int64_t i) {
              const double v = static_cast<double>(plane[i]);
              acc[static_cast<size_t>(i)] += (v > 0 ? 1 : v < 0 ? -1 : 0) * abs_pow(v, p - 1) * scale;
            });
          }
      for (int64_t i = 0; i < in; ++i) dx[q * in + i] = static_cast<T>(acc[static_cast<size_t>(i)]);
    }
  });
}

// LpPool(X) -> Y.
template <bool kParallel>
void forward_kernel(KernelContext& ctx) {
  const Pool3 g = pool_geometry(ctx.node, ctx.in(0), ctx.out(0));
  const int64_t p = ctx.node.attr_int("p", 2);
  dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
    using T = decltype(tag);
    forward<T, kParallel>(g, ctx.in(0).data<T>(), ctx.out(0).data<T>(), p);
  });
}

// LpPoolGrad(dY, X, Y) -> dX.
template <bool kParallel>
void backward_kernel(KernelContext& ctx) {
  const Pool3 g = pool_geometry(ctx.node, ctx.in(1), ctx.in(0));
  const int64_t p = ctx.node.attr_int("p", 2);
  dispatch_float(ctx.in(1).dtype(), [&](auto tag) {
    using T = decltype(tag);
    backward<T, kParallel>(g, ctx.in(0).data<T>(), ctx.in(1).data<T>(), ctx.in(2).data<T>(), ctx.out(0).data<T>(), p);
  });
}

}  // namespace trainrt::lp_pool_loops
