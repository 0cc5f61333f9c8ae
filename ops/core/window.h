// Sliding-window geometry shared by Conv and the pooling ops: ONNX's kernel_shape,
// strides, dilations, pads, auto_pad and ceil_mode, read once and resolved per
// spatial dimension.
//
//   // in a shape rule, ctx is its InferContext (graph/schema.h)
//   Window w = read_window(ctx.node(), /*spatial=*/2, /*kernel=*/{3, 3}, ctx.where(), {});
//   int64_t ho = resolve_window_dim(w, 0, /*in=*/32, ctx.where());
//   // w.pads now holds explicit pads (auto_pad resolved) for dim 0
//
// Why one place: the shape rule and every backend's kernel must agree on the
// output size and on where SAME padding goes, or a kernel writes past its output.
// pads are in ONNX order: x1_begin, x2_begin, ..., x1_end, x2_end, ...
//
// Output size of one dim, with eff = dilation*(kernel-1)+1 and P = in+pad_begin+pad_end:
//   NOTSET/explicit: floor((P-eff)/stride)+1, or ceil(...)+1 with ceil_mode; a ceil
//                    window that would start past in+pad_begin is dropped (as PyTorch
//                    and ONNX Runtime do), so no window lies wholly in the end padding
//   VALID:           floor((in-eff)/stride)+1 with zero pads
//   SAME_UPPER/LOWER: ceil(in/stride); total pad = max(0,(out-1)*stride+eff-in), the
//                    odd pixel going to the end (UPPER) or the beginning (LOWER)
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/ir.h"

namespace trainrt {

struct Window {
  std::vector<int64_t> kernel, strides, dilations, pads;  // pads: begins then ends
  std::string auto_pad = "NOTSET";
  bool ceil_mode = false;
  size_t rank() const { return kernel.size(); }
  int64_t effective_kernel(size_t i) const { return dilations[i] * (kernel[i] - 1) + 1; }
};

struct WindowOptions {
  bool ceil_mode = false;         // the op has a ceil_mode attribute
  bool pad_below_kernel = false;  // pooling: each pad must be smaller than the kernel
};

namespace window_detail {
inline std::string ints_string(const std::vector<int64_t>& v) { return dims_to_string(v); }
}  // namespace window_detail

// Reads and range-checks the window attributes of `n` for `spatial` dims. `kernel`
// is the kernel size (Conv: taken from the weights; pooling: kernel_shape). Errors
// are BadInput "<where>: attribute '<name>' ...".
inline Window read_window(const Node& n, size_t spatial, std::vector<int64_t> kernel, const std::string& where,
                          WindowOptions opt) {
  Window w;
  w.kernel = std::move(kernel);
  auto sized = [&](const char* name, int64_t fill, size_t count) {
    std::vector<int64_t> v = n.attr_ints(name, std::vector<int64_t>(count, fill));
    if (v.size() != count)
      throw_bad_input(where, std::string("attribute '") + name + "' has " + std::to_string(v.size()) +
                                 " values, expected " + std::to_string(count) + " for " + std::to_string(spatial) +
                                 " spatial dims");
    return v;
  };
  if (w.kernel.size() != spatial)
    throw_bad_input(where,
                    "kernel has " + std::to_string(w.kernel.size()) + " dims, expected " + std::to_string(spatial));
  for (int64_t k : w.kernel)
    if (k < 1)
      throw_bad_input(where, "attribute 'kernel_shape' must be >= 1, got " + window_detail::ints_string(w.kernel));
  w.strides = sized("strides", 1, spatial);
  w.dilations = sized("dilations", 1, spatial);
  w.pads = sized("pads", 0, 2 * spatial);
  for (int64_t s : w.strides)
    if (s < 1) throw_bad_input(where, "attribute 'strides' must be >= 1, got " + window_detail::ints_string(w.strides));
  for (int64_t d : w.dilations)
    if (d < 1)
      throw_bad_input(where, "attribute 'dilations' must be >= 1, got " + window_detail::ints_string(w.dilations));
  for (int64_t p : w.pads)
    if (p < 0) throw_bad_input(where, "attribute 'pads' must be >= 0, got " + window_detail::ints_string(w.pads));
  w.auto_pad = n.attr_string("auto_pad", "NOTSET");
  if (w.auto_pad != "NOTSET" && w.auto_pad != "SAME_UPPER" && w.auto_pad != "SAME_LOWER" && w.auto_pad != "VALID")
    throw_bad_input(where,
                    "attribute 'auto_pad' must be NOTSET, SAME_UPPER, SAME_LOWER or VALID, got '" + w.auto_pad + "'");
  if (w.auto_pad != "NOTSET") {
    for (int64_t p : w.pads)
      if (p != 0)
        throw_bad_input(where, "attributes 'pads' " + window_detail::ints_string(w.pads) + " and 'auto_pad' " +
                                   w.auto_pad + " cannot be used together");
  }
  if (opt.ceil_mode) {
    int64_t c = n.attr_int("ceil_mode", 0);
    if (c != 0 && c != 1) throw_bad_input(where, "attribute 'ceil_mode' must be 0 or 1, got " + std::to_string(c));
    w.ceil_mode = c == 1;
  }
  if (opt.pad_below_kernel && w.auto_pad == "NOTSET") {
    for (size_t i = 0; i < spatial; ++i)
      if (w.pads[i] >= w.kernel[i] || w.pads[i + spatial] >= w.kernel[i])
        throw_bad_input(where, "attribute 'pads' " + window_detail::ints_string(w.pads) +
                                   " must be smaller than 'kernel_shape' " + window_detail::ints_string(w.kernel));
  }
  return w;
}

// Output size of spatial dim i for input size `in`; resolves auto_pad into w.pads.
// Fails when the (dilated) kernel is larger than the padded input.
inline int64_t resolve_window_dim(Window& w, size_t i, int64_t in, const std::string& where) {
  const size_t r = w.rank();
  const int64_t s = w.strides[i], eff = w.effective_kernel(i);
  int64_t& pb = w.pads[i];
  int64_t& pe = w.pads[i + r];
  if (w.auto_pad == "SAME_UPPER" || w.auto_pad == "SAME_LOWER") {
    int64_t out = (in + s - 1) / s;
    int64_t total = std::max<int64_t>(0, (out - 1) * s + eff - in);
    pb = w.auto_pad == "SAME_UPPER" ? total / 2 : total - total / 2;
    pe = total - pb;
    return out;
  }
  if (w.auto_pad == "VALID") pb = pe = 0;
  const int64_t padded = in + pb + pe;
  if (padded < eff)
    throw_bad_input(where, "kernel of size " + std::to_string(eff) + " (kernel_shape " + std::to_string(w.kernel[i]) +
                               ", dilation " + std::to_string(w.dilations[i]) + ") is larger than the padded input " +
                               std::to_string(padded) + " in spatial dim " + std::to_string(i));
  if (!w.ceil_mode) return (padded - eff) / s + 1;
  int64_t out = (padded - eff + s - 1) / s + 1;
  if ((out - 1) * s >= in + pb) --out;  // last window would start in the end padding
  return out;
}

// A 1-D convolution's or pooling's node (N,C,L) as the 2-D one over N,C,1,L: kernel_shape,
// strides and dilations get a leading 1, ONNX's pads [b, e] become [0, b, 0, e]; auto_pad
// and the rest as they are (SAME on a unit height with kernel 1 pads nothing). A kernel
// that takes 2-D windows only then runs the 1-D op on rank-4 views of its tensors.
inline Node one_d_as_two_d(const Node& n) {
  Node m = n;
  for (const char* key : {"kernel_shape", "strides", "dilations"})
    if (n.has_attr(key)) {
      std::vector<int64_t> v = n.attr_ints(key);
      v.insert(v.begin(), 1);
      m.attrs[key] = Attribute::of_ints(v);
    }
  if (n.has_attr("pads")) {
    const std::vector<int64_t> p = n.attr_ints("pads");
    if (p.size() == 2) m.attrs["pads"] = Attribute::of_ints({0, p[0], 0, p[1]});
  }
  return m;
}

}  // namespace trainrt
