// Resize's plan and loops (ops/resize.cpp gives the math), one template per pass for both
// backends: the reference kernels instantiate kParallel=false, the cpu kernels
// (ops/resize_cpu.cpp) kParallel=true, the same per-row code over parallel rows
// (ops/core/parallel.h), so the two agree bit for bit.
//
//   ResizePlan p = resize_plan(node, x_dims, scales, sizes, where);   // shape rule and kernels
//   resize_loops::forward<float, true>(x, y, p);
//
// A plan holds, per dim, the taps of each output coordinate: (input index, weight), one
// for nearest, two for linear (weights 1-t and t; zero weights dropped, indices clamped
// to the input, as ONNX's reference pads with the edge value). An output element is the
// sum over the products of its dims' taps; its gradient scatters back over the same taps.
// Leading dims that the plan leaves as they are (N and C, usually) are the rows of the
// parallel loop; within a row the order of the sums is fixed.
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/ir.h"
#include "ops/core/common.h"
#include "ops/core/parallel.h"

namespace trainrt {

struct ResizeTap {
  int64_t index;
  double weight;
};

struct ResizePlan {
  std::vector<int64_t> in, out;
  std::vector<double> scale;                              // per dim, as the coordinate transform reads it
  std::vector<std::vector<std::vector<ResizeTap>>> taps;  // [dim][output coordinate] -> taps
  size_t rank() const { return in.size(); }
};

// The attributes of a Resize-like node (Upsample: asymmetric coordinates, floor rounding).
struct ResizeMode {
  std::string mode = "nearest", transform = "half_pixel", nearest = "round_prefer_floor", policy = "stretch";
  std::vector<int64_t> axes;
};

// Reads and checks the node's attributes. Unsupported: mode cubic, tf_crop_and_resize,
// antialias with linear. Errors name `where`.
inline ResizeMode resize_mode(const Node& n, const std::string& where) {
  ResizeMode m;
  if (n.op_type == "Upsample") {
    m.mode = n.attr_string("mode", "nearest");
    if (m.mode == "bilinear") m.mode = "linear";
    m.transform = "asymmetric";
    m.nearest = "floor";
    if (m.mode != "nearest" && m.mode != "linear")
      throw_bad_input(where, "attribute 'mode' must be nearest or linear, got '" + m.mode + "'");
    return m;
  }
  m.mode = n.attr_string("mode", "nearest");
  m.transform = n.attr_string("coordinate_transformation_mode", "half_pixel");
  m.nearest = n.attr_string("nearest_mode", "round_prefer_floor");
  m.policy = n.attr_string("keep_aspect_ratio_policy", "stretch");
  m.axes = n.attr_ints("axes");
  if (m.mode == "cubic") throw_unsupported(where, "Resize mode 'cubic' is not implemented (nearest and linear are)");
  if (m.mode != "nearest" && m.mode != "linear")
    throw_bad_input(where, "attribute 'mode' must be nearest, linear or cubic, got '" + m.mode + "'");
  if (m.transform == "tf_crop_and_resize")
    throw_unsupported(where, "Resize coordinate_transformation_mode 'tf_crop_and_resize' is not implemented");
  if (m.transform != "half_pixel" && m.transform != "half_pixel_symmetric" && m.transform != "pytorch_half_pixel" &&
      m.transform != "align_corners" && m.transform != "asymmetric" && m.transform != "tf_half_pixel_for_nn")
    throw_bad_input(where, "unknown coordinate_transformation_mode '" + m.transform + "'");
  if (m.nearest != "round_prefer_floor" && m.nearest != "round_prefer_ceil" && m.nearest != "floor" &&
      m.nearest != "ceil")
    throw_bad_input(where, "unknown nearest_mode '" + m.nearest + "'");
  if (m.policy != "stretch" && m.policy != "not_larger" && m.policy != "not_smaller")
    throw_bad_input(where, "unknown keep_aspect_ratio_policy '" + m.policy + "'");
  if (n.attr_int("antialias", 0) != 0 && m.mode != "nearest")
    throw_unsupported(where, "Resize with antialias = 1 is not implemented");
  return m;
}

// Input coordinate of output coordinate o in a dim of `in` -> `out` elements at `scale`.
inline double resize_source(const std::string& t, double o, int64_t in, int64_t out, double scale) {
  if (t == "align_corners") return out == 1 ? 0.0 : o * static_cast<double>(in - 1) / static_cast<double>(out - 1);
  if (t == "asymmetric") return o / scale;
  if (t == "tf_half_pixel_for_nn") return (o + 0.5) / scale;
  if (t == "pytorch_half_pixel") return out > 1 ? (o + 0.5) / scale - 0.5 : 0.0;
  if (t == "half_pixel_symmetric") {
    const double adjustment = static_cast<double>(out) / (scale * static_cast<double>(in));
    const double offset = static_cast<double>(in) / 2 * (1 - adjustment);
    return offset + (o + 0.5) / scale - 0.5;
  }
  return (o + 0.5) / scale - 0.5;  // half_pixel
}

inline int64_t resize_nearest(const std::string& mode, double x) {
  const double f = std::floor(x);
  if (mode == "floor") return static_cast<int64_t>(f);
  if (mode == "ceil") return static_cast<int64_t>(std::ceil(x));
  if (x - f == 0.5) return static_cast<int64_t>(mode == "round_prefer_floor" ? f : f + 1);
  return static_cast<int64_t>(std::round(x));
}

// The plan for input dims `in` with either `scales` (one per dim, or per axis) or `sizes`
// (the same); output dims: floor(in*scale), or sizes (keep_aspect_ratio_policy not_larger
// / not_smaller: one scale for the axes, the min / max of sizes/in, out = round(in*scale)).
inline ResizePlan resize_plan(const ResizeMode& m, const std::vector<int64_t>& in,
                              const std::optional<std::vector<double>>& scales,
                              const std::optional<std::vector<int64_t>>& sizes, const std::string& where) {
  const size_t r = in.size();
  if (scales.has_value() == sizes.has_value())
    throw_bad_input(where, "exactly one of 'scales' and 'sizes' must be given (non-empty)");
  std::vector<int64_t> axes = m.axes;
  if (axes.empty())
    for (size_t i = 0; i < r; ++i) axes.push_back(static_cast<int64_t>(i));
  for (int64_t& a : axes) {
    if (a < -static_cast<int64_t>(r) || a >= static_cast<int64_t>(r))
      throw_bad_input(where,
                      "attribute 'axes' " + dims_to_string(m.axes) + " is out of range for rank " + std::to_string(r));
    if (a < 0) a += static_cast<int64_t>(r);
  }
  const size_t given = scales ? scales->size() : sizes->size();
  if (given != axes.size())
    throw_bad_input(where, std::string(scales ? "'scales'" : "'sizes'") + " has " + std::to_string(given) +
                               " values, expected " + std::to_string(axes.size()));
  ResizePlan p;
  p.in = in;
  p.out = in;
  p.scale.assign(r, 1.0);
  if (scales) {
    for (size_t k = 0; k < axes.size(); ++k) {
      const double s = (*scales)[k];
      if (!(s > 0)) throw_bad_input(where, "'scales' must be > 0, got " + std::to_string(s));
      const size_t d = static_cast<size_t>(axes[k]);
      p.scale[d] = s;
      p.out[d] = static_cast<int64_t>(std::floor(static_cast<double>(in[d]) * s));
    }
  } else {
    double shared = m.policy == "not_larger" ? INFINITY : 0.0;
    for (size_t k = 0; k < axes.size(); ++k) {
      const int64_t s = (*sizes)[k];
      const size_t d = static_cast<size_t>(axes[k]);
      if (s < 1) throw_bad_input(where, "'sizes' must be >= 1, got " + dims_to_string(*sizes));
      const double ratio = static_cast<double>(s) / static_cast<double>(in[d]);
      shared = m.policy == "not_larger" ? std::min(shared, ratio) : std::max(shared, ratio);
      p.out[d] = s;
      p.scale[d] = ratio;
    }
    if (m.policy != "stretch")
      for (int64_t a : axes) {
        const size_t d = static_cast<size_t>(a);
        p.scale[d] = shared;
        p.out[d] = static_cast<int64_t>(std::round(shared * static_cast<double>(in[d])));
      }
  }
  for (size_t d = 0; d < r; ++d) {
    if (in[d] < 1) throw_bad_input(where, "input dims must be >= 1, got " + dims_to_string(in));
    if (p.out[d] < 1)
      throw_bad_input(where, "output dim " + std::to_string(d) + " would be " + std::to_string(p.out[d]) + " (input " +
                                 std::to_string(in[d]) + ", scale " + std::to_string(p.scale[d]) + ")");
  }
  p.taps.resize(r);
  for (size_t d = 0; d < r; ++d) {
    auto clamp = [&](int64_t i) { return std::min<int64_t>(std::max<int64_t>(i, 0), in[d] - 1); };
    p.taps[d].resize(static_cast<size_t>(p.out[d]));
    for (int64_t o = 0; o < p.out[d]; ++o) {
      std::vector<ResizeTap>& t = p.taps[d][static_cast<size_t>(o)];
      if (p.out[d] == in[d] && p.scale[d] == 1.0) {  // a dim left as it is, whatever the transform
        t.push_back({o, 1.0});
        continue;
      }
      const double x = resize_source(m.transform, static_cast<double>(o), in[d], p.out[d], p.scale[d]);
      if (m.mode == "nearest") {
        t.push_back({clamp(resize_nearest(m.nearest, x)), 1.0});
        continue;
      }
      const double f = std::floor(x), frac = x - f;
      const int64_t i0 = static_cast<int64_t>(f);
      if (frac != 1.0 && 1.0 - frac != 0.0) t.push_back({clamp(i0), 1.0 - frac});
      if (frac != 0.0) t.push_back({clamp(i0 + 1), frac});
    }
  }
  return p;
}

namespace resize_loops {

// Leading dims every output coordinate of which is the same input coordinate.
inline size_t identity_dims(const ResizePlan& p) {
  size_t l = 0;
  for (; l < p.rank(); ++l) {
    if (p.in[l] != p.out[l]) break;
    bool same = true;
    for (int64_t o = 0; o < p.out[l] && same; ++o) {
      const auto& t = p.taps[l][static_cast<size_t>(o)];
      same = t.size() == 1 && t[0].index == o && t[0].weight == 1.0;
    }
    if (!same) break;
  }
  return l;
}

// For the dims from `lead` on, each output element (row-major) as its list of (input
// offset, weight) terms, in CSR form: terms start[j] .. start[j+1].
struct Terms {
  std::vector<int64_t> start, offset;
  std::vector<double> weight;
  int64_t in_inner = 1, out_inner = 1;
};

inline Terms terms(const ResizePlan& p, size_t lead) {
  std::vector<std::vector<ResizeTap>> lists{{{0, 1.0}}};
  Terms t;
  for (size_t d = lead; d < p.rank(); ++d) {
    std::vector<std::vector<ResizeTap>> next;
    next.reserve(lists.size() * static_cast<size_t>(p.out[d]));
    for (const auto& l : lists)
      for (const auto& taps : p.taps[d]) {
        std::vector<ResizeTap> e;
        for (const ResizeTap& a : l)
          for (const ResizeTap& b : taps) e.push_back({a.index * p.in[d] + b.index, a.weight * b.weight});
        next.push_back(std::move(e));
      }
    lists = std::move(next);
    t.in_inner *= p.in[d];
    t.out_inner *= p.out[d];
  }
  t.start.push_back(0);
  for (const auto& l : lists) {
    for (const ResizeTap& a : l) {
      t.offset.push_back(a.index);
      t.weight.push_back(a.weight);
    }
    t.start.push_back(static_cast<int64_t>(t.offset.size()));
  }
  return t;
}

inline int64_t rows_of(const ResizePlan& p, size_t lead) {
  int64_t rows = 1;
  for (size_t d = 0; d < lead; ++d) rows *= p.in[d];
  return rows;
}

// x: in...  ->  y: out...   y[j] = sum of x[term] * weight over j's terms.
template <typename T, bool kParallel>
void forward(const T* x, T* y, const ResizePlan& p) {
  const size_t lead = identity_dims(p);
  const Terms t = terms(p, lead);
  for_rows<kParallel>(rows_of(p, lead), static_cast<int64_t>(t.offset.size()), [&](int64_t r0, int64_t r1) {
    for (int64_t row = r0; row < r1; ++row) {
      const T* xp = x + row * t.in_inner;
      T* yp = y + row * t.out_inner;
      for (int64_t j = 0; j < t.out_inner; ++j) {
        double s = 0;
        for (int64_t e = t.start[static_cast<size_t>(j)]; e < t.start[static_cast<size_t>(j) + 1]; ++e)
          s += static_cast<double>(xp[t.offset[static_cast<size_t>(e)]]) * t.weight[static_cast<size_t>(e)];
        yp[j] = static_cast<T>(s);
      }
    }
  });
}

// dy: out...  ->  dx: in...   dx[term] += dy[j] * weight, j in order, summed in double.
template <typename T, bool kParallel>
void backward(const T* dy, T* dx, const ResizePlan& p) {
  const size_t lead = identity_dims(p);
  const Terms t = terms(p, lead);
  for_rows<kParallel>(rows_of(p, lead), static_cast<int64_t>(t.offset.size()), [&](int64_t r0, int64_t r1) {
    std::vector<double> acc(static_cast<size_t>(t.in_inner));
    for (int64_t row = r0; row < r1; ++row) {
      std::fill(acc.begin(), acc.end(), 0.0);
      const T* dyp = dy + row * t.out_inner;
      for (int64_t j = 0; j < t.out_inner; ++j) {
        const double g = static_cast<double>(dyp[j]);
        for (int64_t e = t.start[static_cast<size_t>(j)]; e < t.start[static_cast<size_t>(j) + 1]; ++e)
          acc[static_cast<size_t>(t.offset[static_cast<size_t>(e)])] += g * t.weight[static_cast<size_t>(e)];
      }
      T* dxp = dx + row * t.in_inner;
      for (int64_t i = 0; i < t.in_inner; ++i) dxp[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
    }
  });
}

// The scales or sizes a node's kernel reads: Resize(X, roi, scales, sizes), ResizeGrad(dY,
// X, roi, scales, sizes), Upsample(X, scales) or Upsample-7's 'scales' attribute. An empty
// tensor counts as not given.
inline ResizePlan plan_of(const KernelContext& ctx) {
  const Node& n = ctx.node;
  const bool grad = n.op_type == "ResizeGrad";
  const std::vector<int64_t>& in = ctx.in(grad ? 1 : 0).dims();
  std::optional<std::vector<double>> scales;
  std::optional<std::vector<int64_t>> sizes;
  const size_t scales_slot = n.op_type == "Upsample" ? 1 : grad ? 3 : 2;
  if (ctx.has_input(scales_slot) && ctx.in(scales_slot).numel() > 0) {
    scales.emplace();
    for (int64_t i = 0; i < ctx.in(scales_slot).numel(); ++i) scales->push_back(ctx.in(scales_slot).get_as_double(i));
  } else if (n.op_type == "Upsample") {
    scales.emplace();
    for (float s : n.attr_floats("scales")) scales->push_back(s);
  }
  const size_t sizes_slot = scales_slot + 1;
  if (n.op_type != "Upsample" && ctx.has_input(sizes_slot) && ctx.in(sizes_slot).numel() > 0) {
    sizes.emplace();
    for (int64_t i = 0; i < ctx.in(sizes_slot).numel(); ++i)
      sizes->push_back(static_cast<int64_t>(ctx.in(sizes_slot).get_as_double(i)));
  }
  return resize_plan(resize_mode(n, n.name), in, scales, sizes, n.name);
}

// Resize / Upsample -> Y.
template <bool kParallel>
void forward_kernel(KernelContext& ctx) {
  const ResizePlan p = plan_of(ctx);
  dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
    using T = decltype(tag);
    forward<T, kParallel>(ctx.in(0).data<T>(), ctx.out(0).data<T>(), p);
  });
}

// ResizeGrad -> dX.
template <bool kParallel>
void backward_kernel(KernelContext& ctx) {
  const ResizePlan p = plan_of(ctx);
  dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
    using T = decltype(tag);
    backward<T, kParallel>(ctx.in(0).data<T>(), ctx.out(0).data<T>(), p);
  });
}

}  // namespace resize_loops

}  // namespace trainrt
