// The loops of SoftmaxCrossEntropyLoss and its gradient (ops/softmax_loss.cpp's header
// comment gives the maths; the per-row math, shared with the cuda kernels, is
// ops/core/softmax_math.h), one template each for both backends: the reference kernels
// (ops/softmax_loss.cpp) instantiate kParallel=false, the cpu kernels
// (ops/softmax_loss_cpu.cpp) kParallel=true, the independent rows over oneTBB chunks
// (ops/core/parallel.h), so the two agree bit for bit.
//
//   dispatch_float(t, [&](auto tag) { softmax_loops::sce_kernel<decltype(tag), true>(ctx); });
#pragma once

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "ops/core/common.h"
#include "ops/core/parallel.h"
#include "ops/core/softmax_math.h"

namespace trainrt::softmax_loops {

// Splits dims around `axis` into outer * dims[axis] * inner.
struct AxisSplit {
  int64_t outer = 1, len = 1, inner = 1;
};
inline AxisSplit split_at(const std::vector<int64_t>& dims, size_t axis) {
  AxisSplit s;
  for (size_t d = 0; d < dims.size(); ++d) {
    if (d < axis)
      s.outer *= dims[d];
    else if (d == axis)
      s.len = dims[d];
    else
      s.inner *= dims[d];
  }
  return s;
}

// log_softmax of x along the middle of `s`, written to out (double), for each outer/inner;
// each (outer, inner) row on its own, so kParallel splits the rows over oneTBB chunks.
template <bool kParallel = false, typename T>
void log_softmax_into(const T* x, const AxisSplit& s, double* out) {
  for_rows<kParallel>(s.outer * s.inner, s.len, [&](int64_t row0, int64_t row1) {
    for (int64_t row = row0; row < row1; ++row) {
      const int64_t o = row / s.inner, i = row % s.inner;
      const int64_t base = o * s.len * s.inner + i;
      double m, log_sum;
      softmax_math::log_normaliser(x + base, s.len, s.inner, m, log_sum);
      for (int64_t c = 0; c < s.len; ++c)
        out[base + c * s.inner] = static_cast<double>(x[base + c * s.inner]) - m - log_sum;
    }
  });
}

// kParallel: the cpu kernel. The log_softmax rows and the copy to output 1 run over
// oneTBB chunks; the loss and its sums stay one sequential loop, in the reference's order.
template <typename T, bool kParallel>
void sce_kernel(KernelContext& ctx) {
  const Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  const Tensor& labels = ctx.in(1);
  const T* w = ctx.has_input(2) ? ctx.in(2).data<T>() : nullptr;
  const std::string reduction = n.attr_string("reduction", "mean");
  const bool has_ii = n.has_attr("ignore_index");
  const int64_t ii = n.attr_int("ignore_index", 0);
  // scores [N,C,D] with D = d1*d2*..., labels [N,D]
  const AxisSplit s = split_at(x.dims(), 1);
  const int64_t C = s.len, D = s.inner;
  std::vector<double> lp(static_cast<size_t>(x.numel()));
  log_softmax_into<kParallel>(x.data<T>(), s, lp.data());
  if (ctx.has_output(1)) {
    T* out = ctx.out(1).data<T>();
    const double* in = lp.data();
    for_range<kParallel>(x.numel(), [=](int64_t b, int64_t e) {
      for (int64_t k = b; k < e; ++k) out[k] = static_cast<T>(in[k]);
    });
  }
  std::vector<double> loss(static_cast<size_t>(labels.numel()));
  double loss_sum = 0, weight_sum = 0;
  for (int64_t nn = 0; nn < s.outer; ++nn)
    for (int64_t d = 0; d < D; ++d) {
      const int64_t k = nn * D + d;
      const int64_t l = labels.dtype() == DataType::Int64 ? labels.data<int64_t>()[k] : labels.data<int32_t>()[k];
      if (has_ii && l == ii) continue;  // loss 0, weight 0
      if (l < 0 || l >= C)
        throw_bad_input("", "label " + std::to_string(l) + " at position " + std::to_string(k) + " is outside [0, " +
                                std::to_string(C) + ")" +
                                (has_ii ? " and is not ignore_index " + std::to_string(ii) : ""));
      const double wl = w ? static_cast<double>(w[l]) : 1.0;
      loss[static_cast<size_t>(k)] = -wl * lp[static_cast<size_t>((nn * C + l) * D + d)];
      loss_sum += loss[static_cast<size_t>(k)];
      weight_sum += wl;
    }
  T* y = ctx.out(0).data<T>();
  if (reduction == "none") {
    for (size_t k = 0; k < loss.size(); ++k) y[k] = static_cast<T>(loss[k]);
  } else if (reduction == "sum") {
    y[0] = static_cast<T>(loss_sum);
  } else {
    y[0] = static_cast<T>(loss_sum / weight_sum);  // every sample ignored: 0/0 = NaN, as the spec
  }
}

// kParallel: the cpu kernel. The mean's denominator (and the label check) is one
// sequential loop as in the reference; then each sample's C outputs on their own, so
// the samples split over oneTBB chunks.
template <typename T, bool kParallel>
void sce_grad_kernel(KernelContext& ctx) {
  const Node& n = ctx.node;
  const Tensor& lp = ctx.in(1);
  const Tensor& labels = ctx.in(2);
  const T* dloss = ctx.in(0).data<T>();
  const T* w = ctx.has_input(3) ? ctx.in(3).data<T>() : nullptr;
  const std::string reduction = n.attr_string("reduction", "mean");
  const bool has_ii = n.has_attr("ignore_index");
  const int64_t ii = n.attr_int("ignore_index", 0);
  const AxisSplit s = split_at(lp.dims(), 1);  // [N,C,D]
  const int64_t C = s.len, D = s.inner;
  auto label_at = [&](int64_t k) {
    return labels.dtype() == DataType::Int64 ? labels.data<int64_t>()[k] : labels.data<int32_t>()[k];
  };
  double weight_sum = 0;  // the forward's mean denominator
  for (int64_t k = 0; k < labels.numel(); ++k) {
    const int64_t l = label_at(k);
    if (has_ii && l == ii) continue;
    if (l < 0 || l >= C)
      throw_bad_input("", "label " + std::to_string(l) + " at position " + std::to_string(k) + " is outside [0, " +
                              std::to_string(C) + ")" +
                              (has_ii ? " and is not ignore_index " + std::to_string(ii) : ""));
    weight_sum += w ? static_cast<double>(w[l]) : 1.0;
  }
  const T* p = lp.data<T>();
  T* dx = ctx.out(0).data<T>();
  for_rows<kParallel>(s.outer * D, C, [&](int64_t k0, int64_t k1) {
    for (int64_t k = k0; k < k1; ++k) {
      const int64_t nn = k / D, d = k % D;
      const int64_t l = label_at(k);
      const bool ignored = has_ii && l == ii;
      double g = 0;
      if (!ignored) {
        g = (w ? static_cast<double>(w[l]) : 1.0) * (reduction == "none" ? dloss[k] : dloss[0]);
        if (reduction == "mean") g /= weight_sum;
      }
      for (int64_t c = 0; c < C; ++c) {
        const int64_t at = (nn * C + c) * D + d;
        dx[at] = static_cast<T>(ignored ? 0.0 : softmax_math::loss_grad(g, static_cast<double>(p[at]), c == l));
      }
    }
  });
}

}  // namespace trainrt::softmax_loops
