// ConvTranspose's geometry and loops (ops/conv_transpose.cpp gives the math), one
// template per pass for both backends: the reference kernels instantiate
// kParallel=false, the cpu kernels (ops/conv_transpose_cpu.cpp) kParallel=true, the same
// per-row code over parallel rows (ops/core/parallel.h), so the two agree bit for bit.
//
//   ConvTransposeGeometry geo = conv_transpose_geometry(node, x_spatial, kernel, where);
//   conv_transpose_loops::forward<float, true>(x, w, b, y, geo, group);
//
// Every N-D spatial rank is one loop: the (input, kernel, output) offset triples of the
// spatial dims are listed once per call, so a pass is a loop over rows (an output plane,
// an input plane, a weight slice) and over the triples. Sums are in double, in a fixed
// order per row, then rounded once. Under bf16/fp16 math the kernels read X, W and dY
// rounded to that type (math_input, as Conv and ConvGrad do; math_rounded_inputs).
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/ir.h"
#include "ops/core/common.h"
#include "ops/core/kernel.h"
#include "ops/core/parallel.h"

namespace trainrt {

// Per spatial dim: input size, kernel, stride, dilation, the begin pad (the first
// `pad_begin` positions of the full transposed output are cropped) and output size.
struct ConvTransposeGeometry {
  std::vector<int64_t> in, kernel, strides, dilations, pad_begin, out;
  size_t rank() const { return in.size(); }
};

// ONNX ConvTranspose's output size and pads for spatial input sizes `in` and kernel
// `kernel`. Full size F = stride*(in-1) + output_padding + dilation*(kernel-1) + 1.
//   output_shape given: out = output_shape, total pad P = max(0, F - out), begin pad
//     P - P/2 (SAME_UPPER: P/2); an out above F gets zeros (plus the bias) at its end;
//   auto_pad SAME_UPPER/SAME_LOWER: out = in*stride, P = max(0, F - out), begin pad
//     P/2 (SAME_UPPER) or P - P/2 (SAME_LOWER);
//   VALID: pads 0; else out = F - pad_begin - pad_end.
// Errors are BadInput "<where>: ...".
inline ConvTransposeGeometry conv_transpose_geometry(const Node& n, const std::vector<int64_t>& in,
                                                     const std::vector<int64_t>& kernel, const std::string& where) {
  const size_t r = in.size();
  auto sized = [&](const char* name, int64_t fill, size_t count) {
    std::vector<int64_t> v = n.attr_ints(name, std::vector<int64_t>(count, fill));
    if (v.size() != count)
      throw_bad_input(where, std::string("attribute '") + name + "' has " + std::to_string(v.size()) +
                                 " values, expected " + std::to_string(count));
    return v;
  };
  ConvTransposeGeometry g;
  g.in = in;
  g.kernel = kernel;
  g.strides = sized("strides", 1, r);
  g.dilations = sized("dilations", 1, r);
  std::vector<int64_t> pads = sized("pads", 0, 2 * r);
  const std::vector<int64_t> out_pad = sized("output_padding", 0, r);
  std::vector<int64_t> out_shape = n.attr_ints("output_shape");
  if (out_shape.size() == r + 2) out_shape.erase(out_shape.begin(), out_shape.begin() + 2);  // N,C given too
  if (!out_shape.empty() && out_shape.size() != r)
    throw_bad_input(where, "attribute 'output_shape' has " + std::to_string(out_shape.size()) + " values, expected " +
                               std::to_string(r));
  const std::string auto_pad = n.attr_string("auto_pad", "NOTSET");
  if (auto_pad != "NOTSET" && auto_pad != "SAME_UPPER" && auto_pad != "SAME_LOWER" && auto_pad != "VALID")
    throw_bad_input(where,
                    "attribute 'auto_pad' must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '" + auto_pad + "'");
  for (size_t i = 0; i < r; ++i) {
    if (g.strides[i] < 1 || g.dilations[i] < 1 || kernel[i] < 1)
      throw_bad_input(where, "strides, dilations and kernel_shape must be >= 1, got strides " +
                                 dims_to_string(g.strides) + ", dilations " + dims_to_string(g.dilations) +
                                 ", kernel " + dims_to_string(kernel));
    if (pads[i] < 0 || pads[i + r] < 0)
      throw_bad_input(where, "attribute 'pads' must be >= 0, got " + dims_to_string(pads));
    if (out_pad[i] < 0 || out_pad[i] >= std::max(g.strides[i], g.dilations[i]))
      throw_bad_input(where, "attribute 'output_padding' " + dims_to_string(out_pad) +
                                 " must be >= 0 and smaller than the stride or the dilation");
    const int64_t full = g.strides[i] * (in[i] - 1) + out_pad[i] + g.dilations[i] * (kernel[i] - 1) + 1;
    int64_t out = 0, begin = 0;
    if (!out_shape.empty() || auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
      out = !out_shape.empty() ? out_shape[i] : in[i] * g.strides[i];
      if (out < 0) throw_bad_input(where, "attribute 'output_shape' must be >= 0, got " + dims_to_string(out_shape));
      const int64_t total = std::max<int64_t>(0, full - out);
      begin = auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    } else {
      if (auto_pad == "VALID") pads[i] = pads[i + r] = 0;
      begin = pads[i];
      out = full - pads[i] - pads[i + r];
      if (out < 1)
        throw_bad_input(where, "pads " + dims_to_string(pads) + " leave no output in spatial dim " + std::to_string(i) +
                                   " (full size " + std::to_string(full) + ")");
    }
    g.pad_begin.push_back(begin);
    g.out.push_back(out);
  }
  return g;
}

namespace conv_transpose_loops {

// (input, kernel, output) spatial offsets with output = input*stride - pad_begin +
// kernel*dilation inside the output, in row-major order of (input, kernel).
inline std::vector<std::array<int64_t, 3>> triples(const ConvTransposeGeometry& g) {
  std::vector<std::array<int64_t, 3>> t{{0, 0, 0}};
  for (size_t d = 0; d < g.rank(); ++d) {
    std::vector<std::array<int64_t, 3>> next;
    for (const auto& p : t)
      for (int64_t i = 0; i < g.in[d]; ++i)
        for (int64_t k = 0; k < g.kernel[d]; ++k) {
          const int64_t o = i * g.strides[d] - g.pad_begin[d] + k * g.dilations[d];
          if (o < 0 || o >= g.out[d]) continue;
          next.push_back({p[0] * g.in[d] + i, p[1] * g.kernel[d] + k, p[2] * g.out[d] + o});
        }
    t = std::move(next);
  }
  return t;
}

inline int64_t product(const std::vector<int64_t>& v) {
  int64_t p = 1;
  for (int64_t d : v) p *= d;
  return p;
}

// x: N,C,in...  w: C,M/group,kernel...  b: M or null  ->  y: N,M,out...
//   y[n,m,o] = b[m] + sum_{c in group(m), (i,k,o)} x[n,c,i] * w[c,m%Mg,k]
template <typename T, bool kParallel>
void forward(const T* x, const T* w, const T* b, T* y, int64_t N, int64_t C, int64_t M, int64_t group,
             const ConvTransposeGeometry& g) {
  const auto tr = triples(g);
  const int64_t in_sp = product(g.in), k_sp = product(g.kernel), out_sp = product(g.out);
  const int64_t Cg = C / group, Mg = M / group;
  for_rows<kParallel>(N * M, Cg * static_cast<int64_t>(tr.size()) + out_sp, [&](int64_t r0, int64_t r1) {
    std::vector<double> acc(static_cast<size_t>(out_sp));
    for (int64_t row = r0; row < r1; ++row) {
      const int64_t n = row / M, m = row % M, grp = m / Mg, mg = m % Mg;
      std::fill(acc.begin(), acc.end(), b ? static_cast<double>(b[m]) : 0.0);
      for (int64_t c = grp * Cg; c < (grp + 1) * Cg; ++c) {
        const T* xp = x + (n * C + c) * in_sp;
        const T* wp = w + (c * Mg + mg) * k_sp;
        for (const auto& t : tr)
          acc[static_cast<size_t>(t[2])] += static_cast<double>(xp[t[0]]) * static_cast<double>(wp[t[1]]);
      }
      T* yp = y + row * out_sp;
      for (int64_t o = 0; o < out_sp; ++o) yp[o] = static_cast<T>(acc[static_cast<size_t>(o)]);
    }
  });
}

// dy: N,M,out...  ->  dx: N,C,in... (null: not wanted)
//   dx[n,c,i] = sum_{m in group(c), (i,k,o)} dy[n,m,o] * w[c,m%Mg,k]
//   dw: C,M/group,kernel...:  dw[c,mg,k] = sum_{n, (i,k,o)} x[n,c,i] * dy[n,m,o]
//   db: M:  db[m] = sum_{n,o} dy[n,m,o]
template <typename T, bool kParallel>
void backward(const T* dy, const T* x, const T* w, T* dx, T* dw, T* db, int64_t N, int64_t C, int64_t M, int64_t group,
              const ConvTransposeGeometry& g) {
  const auto tr = triples(g);
  const int64_t in_sp = product(g.in), k_sp = product(g.kernel), out_sp = product(g.out);
  const int64_t Cg = C / group, Mg = M / group;
  const int64_t cost = static_cast<int64_t>(tr.size()) + 1;
  if (dx)
    for_rows<kParallel>(N * C, Mg * cost, [&](int64_t r0, int64_t r1) {
      std::vector<double> acc(static_cast<size_t>(in_sp));
      for (int64_t row = r0; row < r1; ++row) {
        const int64_t n = row / C, c = row % C, grp = c / Cg;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t mg = 0; mg < Mg; ++mg) {
          const T* dyp = dy + (n * M + grp * Mg + mg) * out_sp;
          const T* wp = w + (c * Mg + mg) * k_sp;
          for (const auto& t : tr)
            acc[static_cast<size_t>(t[0])] += static_cast<double>(dyp[t[2]]) * static_cast<double>(wp[t[1]]);
        }
        for (int64_t i = 0; i < in_sp; ++i) dx[row * in_sp + i] = static_cast<T>(acc[static_cast<size_t>(i)]);
      }
    });
  if (dw)
    for_rows<kParallel>(C * Mg, N * cost, [&](int64_t r0, int64_t r1) {
      std::vector<double> acc(static_cast<size_t>(k_sp));
      for (int64_t row = r0; row < r1; ++row) {
        const int64_t c = row / Mg, mg = row % Mg, m = (c / Cg) * Mg + mg;
        std::fill(acc.begin(), acc.end(), 0.0);
        for (int64_t n = 0; n < N; ++n) {
          const T* xp = x + (n * C + c) * in_sp;
          const T* dyp = dy + (n * M + m) * out_sp;
          for (const auto& t : tr)
            acc[static_cast<size_t>(t[1])] += static_cast<double>(xp[t[0]]) * static_cast<double>(dyp[t[2]]);
        }
        for (int64_t k = 0; k < k_sp; ++k) dw[row * k_sp + k] = static_cast<T>(acc[static_cast<size_t>(k)]);
      }
    });
  if (db)
    for_rows<kParallel>(M, N * out_sp, [&](int64_t r0, int64_t r1) {
      for (int64_t m = r0; m < r1; ++m) {
        double s = 0;
        for (int64_t n = 0; n < N; ++n)
          for (int64_t o = 0; o < out_sp; ++o) s += static_cast<double>(dy[(n * M + m) * out_sp + o]);
        db[m] = static_cast<T>(s);
      }
    });
}

// Kernel size of W (C,M/group,kernel...) and the geometry of a node whose input x_slot is
// X (N,C,in...) and input w_slot is W.
inline ConvTransposeGeometry geometry_of(const KernelContext& ctx, size_t x_slot, size_t w_slot) {
  const std::vector<int64_t>& xd = ctx.in(x_slot).dims();
  const std::vector<int64_t>& wd = ctx.in(w_slot).dims();
  return conv_transpose_geometry(ctx.node, std::vector<int64_t>(xd.begin() + 2, xd.end()),
                                 std::vector<int64_t>(wd.begin() + 2, wd.end()), ctx.node.name);
}

// ConvTranspose(X, W, [B]) -> Y.
template <bool kParallel>
void forward_kernel(KernelContext& ctx) {
  const Tensor x = math_input(ctx.in(0), ctx.math, kParallel);
  const Tensor w = math_input(ctx.in(1), ctx.math, kParallel);
  const ConvTransposeGeometry g = geometry_of(ctx, 0, 1);
  const int64_t group = ctx.node.attr_int("group", 1);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    forward<T, kParallel>(x.data<T>(), w.data<T>(), ctx.has_input(2) ? ctx.in(2).data<T>() : nullptr,
                          ctx.out(0).data<T>(), x.dims()[0], x.dims()[1], w.dims()[1] * group, group, g);
  });
}

// ConvTransposeGrad(dY, X, W) -> (dX, dW, dB), each optional.
template <bool kParallel>
void backward_kernel(KernelContext& ctx) {
  // X is read only for dW and W only for dX: each is rounded only where it is read.
  const Tensor dy = math_input(ctx.in(0), ctx.math, kParallel);
  const Tensor x = ctx.has_output(1) ? math_input(ctx.in(1), ctx.math, kParallel) : ctx.in(1);
  const Tensor w = ctx.has_output(0) ? math_input(ctx.in(2), ctx.math, kParallel) : ctx.in(2);
  const ConvTransposeGeometry g = geometry_of(ctx, 1, 2);
  const int64_t group = ctx.node.attr_int("group", 1);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    auto out = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<T>() : nullptr; };
    backward<T, kParallel>(dy.data<T>(), x.data<T>(), w.data<T>(), out(0), out(1), out(2), x.dims()[0], x.dims()[1],
                           w.dims()[1] * group, group, g);
  });
}

}  // namespace conv_transpose_loops

}  // namespace trainrt
