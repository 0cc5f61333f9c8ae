// The loops of InstanceNormalization, GroupNormalization and their backward
// (ops/group_norm.cpp), instantiated serial by the reference backend and parallel over
// (n, group) units by the cpu backend (ops/group_norm_cpu.cpp): one code, the same bits.
//
//   group_norm_loops::forward<true, float>(ctx);        // the cpu kernel
//   group_norm_loops::backward<false, double>(ctx);     // the reference backward
//
// Layout: X is N,C,S (S = product of the spatial dims), channels split into G groups of
// C/G; the C/G*S values of unit u = n*G + g are contiguous, so a unit is one row:
//   mean, var = moments of the row (two passes in double, norm_loops::row_moments)
//   r = 1/sqrt(var + eps), xh = (x - mean)*r, Y = xh*scale[k] + bias[k]
// where k is the channel c when scale has C values (InstanceNormalization, opset 21's
// GroupNormalization) and the group g when it has G (opset 18's GroupNormalization).
// Backward per unit, g_i = dY_i*scale[k_i], D = C/G*S:
//   dX = r*(g - mean(g) - xh*mean(g*xh))
//   dScale[k] = sum over n, (and the group's channels for per-group scale) of dY*xh,
//   dBias[k] = the same sums of dY.
// The per-(n, c) partial sums are written by the parallel units and reduced over n
// serially afterwards, so the parameter gradients do not depend on the split either.
#pragma once

#include <cmath>
#include <cstdint>
#include <vector>

#include "ops/core/kernel.h"
#include "ops/core/parallel.h"
#include "ops/norm_loops.h"

namespace trainrt::group_norm_loops {

struct Dims {
  int64_t N = 0, C = 0, S = 0, G = 1;
  bool per_channel = true;  // scale/bias have C values (else G)
  int64_t D() const { return C / G * S; }
  int64_t affine(int64_t c) const { return per_channel ? c : c / (C / G); }
};

// num_groups of node n: InstanceNormalization normalises each channel (G = C), and so
// does GroupNormalizationGrad with num_groups 0 (InstanceNormalization's backward).
inline int64_t groups_of(const Node& n, int64_t C) {
  const int64_t g = n.op_type == "InstanceNormalization" ? 0 : n.attr_int("num_groups", 0);
  return g == 0 ? C : g;
}

inline Dims dims_of(const Node& n, const Tensor& x, const Tensor& scale) {
  Dims d;
  d.N = x.dims()[0];
  d.C = x.dims()[1];
  d.S = d.N * d.C == 0 ? 0 : x.numel() / (d.N * d.C);
  d.G = groups_of(n, d.C);
  d.per_channel = scale.numel() == d.C;
  return d;
}

// X, scale, B -> Y.
template <bool kParallel, typename T>
void forward(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Dims d = dims_of(ctx.node, x, ctx.in(1));
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const T* xp = x.data<T>();
  const T* s = ctx.in(1).data<T>();
  const T* b = ctx.in(2).data<T>();
  T* yp = ctx.out(0).data<T>();
  const int64_t D = d.D(), cg = d.G == 0 ? 0 : d.C / d.G;
  for_rows<kParallel>(d.N * d.G, D, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const T* xr = xp + u * D;
      T* yr = yp + u * D;
      const auto [mean, var] = norm_loops::row_moments(xr, D);
      const double r = 1.0 / std::sqrt(var + eps);
      for (int64_t j = 0; j < cg; ++j) {
        const int64_t k = d.affine(u % d.G * cg + j);
        const double a = static_cast<double>(s[k]) * r, sh = static_cast<double>(b[k]);
        for (int64_t i = j * d.S; i < (j + 1) * d.S; ++i)
          yr[i] = static_cast<T>((static_cast<double>(xr[i]) - mean) * a + sh);
      }
    }
  });
}

// (dY, X, scale; num_groups, epsilon) -> (dX, dScale, dBias), each output optional.
template <bool kParallel, typename T>
void backward(KernelContext& ctx) {
  const Tensor& x = ctx.in(1);
  const Dims d = dims_of(ctx.node, x, ctx.in(2));
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const T* dyp = ctx.in(0).data<T>();
  const T* xp = x.data<T>();
  const T* s = ctx.in(2).data<T>();
  T* dx = ctx.has_output(0) ? ctx.out(0).data<T>() : nullptr;
  const int64_t D = d.D(), cg = d.G == 0 ? 0 : d.C / d.G;
  // [N, C]: sum over S of dY and of dY*xh, per sample and channel.
  std::vector<double> sum_dy(static_cast<size_t>(d.N * d.C)), sum_dyxh(sum_dy.size());
  for_rows<kParallel>(d.N * d.G, 2 * D, [&](int64_t u0, int64_t u1) {
    for (int64_t u = u0; u < u1; ++u) {
      const T* xr = xp + u * D;
      const T* dyr = dyp + u * D;
      const auto [mean, var] = norm_loops::row_moments(xr, D);
      const double r = 1.0 / std::sqrt(var + eps);
      double g_sum = 0, gxh_sum = 0;
      for (int64_t j = 0; j < cg; ++j) {
        const int64_t c = u % d.G * cg + j;
        double a = 0, b = 0;
        for (int64_t i = j * d.S; i < (j + 1) * d.S; ++i) {
          const double dy = static_cast<double>(dyr[i]);
          a += dy;
          b += dy * (static_cast<double>(xr[i]) - mean) * r;
        }
        const size_t at = static_cast<size_t>(u / d.G * d.C + c);
        sum_dy[at] = a;
        sum_dyxh[at] = b;
        const double sc = static_cast<double>(s[d.affine(c)]);
        g_sum += sc * a;
        gxh_sum += sc * b;
      }
      if (!dx) continue;
      const double g_mean = g_sum / static_cast<double>(D), gxh_mean = gxh_sum / static_cast<double>(D);
      for (int64_t j = 0; j < cg; ++j) {
        const double sc = static_cast<double>(s[d.affine(u % d.G * cg + j)]);
        for (int64_t i = j * d.S; i < (j + 1) * d.S; ++i) {
          const double xh = (static_cast<double>(xr[i]) - mean) * r;
          dx[u * D + i] = static_cast<T>(r * (static_cast<double>(dyr[i]) * sc - g_mean - xh * gxh_mean));
        }
      }
    }
  });
  for (size_t o : {size_t{1}, size_t{2}}) {
    if (!ctx.has_output(o)) continue;
    const std::vector<double>& from = o == 1 ? sum_dyxh : sum_dy;
    Tensor& out = ctx.out(o);
    std::vector<double> acc(static_cast<size_t>(out.numel()));
    for (int64_t n = 0; n < d.N; ++n)
      for (int64_t c = 0; c < d.C; ++c) acc[static_cast<size_t>(d.affine(c))] += from[static_cast<size_t>(n * d.C + c)];
    for (size_t k = 0; k < acc.size(); ++k) out.data<T>()[k] = static_cast<T>(acc[k]);
  }
}

}  // namespace trainrt::group_norm_loops
