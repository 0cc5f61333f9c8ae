// Multidirectional (numpy) broadcasting: the shape rule and an index helper.
//
//   // shape rule: out = broadcast of inputs a and b, or a one-line error
//   std::string why;
//   std::optional<Shape> out = broadcast_shapes(a, b, &why);   // nullopt + why if incompatible
//
//   // kernel: y[i] = a[ia(i)] + b[ib(i)] over the row-major output y of dims `out`
//   BroadcastIndex ia(a.dims(), out), ib(b.dims(), out);
//   for (int64_t i = 0; i < numel; ++i) y[i] = pa[ia(i)] + pb[ib(i)];
//
//   // autodiff: the gradient of a broadcast input sums dy over these output axes
//   std::vector<int64_t> axes = broadcast_reduce_axes(in_shape, out_shape);
//
// Why here: Add/Sub/Mul/Div/Sum (ops/elementwise.cpp) and the gradient rules that
// reduce dy back to an input's shape must agree on one definition. Shapes align
// at the right; a missing leading axis counts as 1. Symbolic dims: equal symbols
// broadcast to themselves, a known 1 broadcasts to the other dim, a known n > 1
// against a symbol gives n (the symbol must be 1 or n at run time), anything
// else gives an unknown dim.
#pragma once

#include <algorithm>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/ir.h"

namespace trainrt {

// Broadcast of two shapes; nullopt (and a reason in *why, if given) when some
// pair of known dims differs and neither is 1.
inline std::optional<Shape> broadcast_shapes(const Shape& a, const Shape& b, std::string* why = nullptr) {
  const size_t rank = std::max(a.size(), b.size());
  Shape out(rank);
  for (size_t k = 0; k < rank; ++k) {  // k counts axes from the right
    const Dim one = Dim::of(1);
    const Dim& x = k < a.size() ? a[a.size() - 1 - k] : one;
    const Dim& y = k < b.size() ? b[b.size() - 1 - k] : one;
    Dim& o = out[rank - 1 - k];
    if (x.known() && y.known()) {
      if (x.value != y.value && x.value != 1 && y.value != 1) {
        if (why)
          *why = "axis " + std::to_string(rank - 1 - k) + " of the broadcast is " + std::to_string(x.value) + " vs " +
                 std::to_string(y.value);
        return std::nullopt;
      }
      o = x.value == 1 ? y : x;
    } else if (x.known()) {
      o = x.value == 1 ? y : x;  // symbol y must be 1 or x
    } else if (y.known()) {
      o = y.value == 1 ? x : y;
    } else if (!x.symbol.empty() && x.symbol == y.symbol) {
      o = x;
    } else {
      o = Dim{};  // two different or anonymous symbols: unknown
    }
  }
  return out;
}

// Broadcast of concrete dims; throws Internal if incompatible (shape rules check first).
inline std::vector<int64_t> broadcast_dims(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  std::string why;
  std::optional<Shape> s = broadcast_shapes(shape_of(a), shape_of(b), &why);
  if (!s) throw_internal("broadcast_dims", dims_to_string(a) + " vs " + dims_to_string(b) + ": " + why);
  return shape_dims(*s);
}

// Maps a row-major index of the broadcast output to the offset of the same
// element in one (smaller or equal) input: the input's stride on every output
// axis where it has extent > 1, stride 0 where it is broadcast.
class BroadcastIndex {
 public:
  BroadcastIndex(const std::vector<int64_t>& in_dims, const std::vector<int64_t>& out_dims)
      : out_dims_(out_dims), strides_(out_dims.size(), 0) {
    TRAINRT_ASSERT(in_dims.size() <= out_dims.size());
    const size_t lead = out_dims.size() - in_dims.size();
    int64_t stride = 1;
    for (size_t k = in_dims.size(); k-- > 0;) {
      TRAINRT_ASSERT(in_dims[k] == out_dims[lead + k] || in_dims[k] == 1);
      if (in_dims[k] != 1) strides_[lead + k] = stride;
      stride *= in_dims[k];
    }
    same_ = element_count(in_dims) == element_count(out_dims);  // no axis is broadcast
    scalar_ = element_count(in_dims) == 1;
  }

  // Offset in the input of output element i (0 <= i < numel(out)).
  int64_t operator()(int64_t i) const {
    if (same_) return i;
    if (scalar_) return 0;
    int64_t offset = 0;
    for (size_t k = out_dims_.size(); k-- > 0 && i > 0;) {
      offset += (i % out_dims_[k]) * strides_[k];
      i /= out_dims_[k];
    }
    return offset;
  }

 private:
  std::vector<int64_t> out_dims_, strides_;
  bool same_ = false, scalar_ = false;
};

// Axes of `out` (numbered in out's rank) over which an input of shape `in` was
// broadcast: the leading axes `in` lacks, and axes where `in` has a known 1 and
// `out` does not. Summing dy over them (then reshaping to `in`) gives dx.
inline std::vector<int64_t> broadcast_reduce_axes(const Shape& in, const Shape& out) {
  std::vector<int64_t> axes;
  const size_t lead = out.size() - std::min(in.size(), out.size());
  for (size_t k = 0; k < out.size(); ++k) {
    if (k < lead) {
      axes.push_back(static_cast<int64_t>(k));
      continue;
    }
    const Dim& d = in[k - lead];
    if (d.known() && d.value == 1 && !(out[k].known() && out[k].value == 1)) axes.push_back(static_cast<int64_t>(k));
  }
  return axes;
}

}  // namespace trainrt
