// Shape ops: Flatten, Reshape, Transpose, Concat, Pad.
//
//   Flatten(x[N,C,H,W], axis=1)        -> [N, C*H*W]
//   Reshape(x[N,3,4], shape=[0,-1])    -> [N,12]      (0 copies, -1 infers)
//   Transpose(x[N,C,H,W], perm=[0,2,3,1]) -> [N,H,W,C]
//   Concat(a[N,2], b[N,3], axis=1)     -> [N,5]
//   Pad(x[N,C,H,W], pads=[0,0,1,1, 0,0,1,1]) -> [N,C,H+2,W+2]  (constant, edge, reflect, wrap)
//   Shape(x[N,3,8,8], start=1) -> int64 [3,8,8]          ConstantOfShape([2,3]; value) -> [2,3]
//   Range(0, 10, 3) -> [0,3,6,9]                         Expand(x[3,1], [2,1,4]) -> [2,3,4]
//   Gather(x[5,4], idx[2,3], axis=0) -> [2,3,4]          (negative indices count from the end)
//   Unsqueeze(x[3,4], axes=[0,-1]) -> [1,3,4,1]          Squeeze(x[1,3,1], axes=[0]) -> [3,1]
//   Slice(x[10], starts=[-1], ends=[-11], steps=[-2]) -> x[9], x[7], ..., x[1]
//   Split(x[N,6], split=[2,4], axis=1) -> [N,2], [N,4]   (equal parts without split)
//   ScatterND(x[4,5], idx[2,1], upd[2,5]) -> x with rows idx[0], idx[1] replaced
//                                        (reduction none/add/mul; repeated indices apply in order)
//
// Backward ops (domain ai.trainrt, autodiff/rules_shape.cpp):
//   ReshapeLike(dY, X) -> dX                  dY's elements in X's shape (Flatten, Reshape; X is
//                                             read for its shape only, so a symbolic batch works)
//   ConcatGrad(dY, X0, X1, ..., axis) -> (dX0, dX1, ...)   dY split along axis into the Xi's
//                                             extents; an empty output name skips that slice
//   GatherGrad(dY, indices, X; axis) -> dX   zeros of X's shape, dY's rows added at the indices
//   SliceGrad(dY, X, starts, ends[, axes[, steps]]) -> dX   zeros of X's shape, dY written where Slice read
// Transpose's gradient is Transpose (inverse perm), Pad's is Pad with negated pads.
//
// Shape-carrying inputs (Reshape's shape, Pad's pads, Slice's starts..., Unsqueeze's
// axes, Expand's and ConstantOfShape's shape, Range's scalars) may be computed: a
// rule reads them with InferContext::input_ints, which also sees what inference knows
// of a computed value (ValueInfo::ints: Shape's output, Gather, Slice, Squeeze,
// Unsqueeze, Reshape and Concat of it, a short ConstantOfShape, and the arithmetic,
// Equal and Where of graph/infer.cpp), so Reshape(x, Concat(Shape(x)[0], [-1])) types as
// [N, C*H*W] before anything is folded. Values known only at run time leave the
// dims unknown until the graph is specialised (runtime/executor.h specialize()).
//
// Why these kernels move bytes: a shape op never looks at values, so one kernel
// serves every numeric dtype (float, int64 indices, bool masks...); Range and
// ConstantOfShape write values, GatherGrad adds (float32/float64).
#include "ops/shape_ops.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "ops/core/broadcast.h"
#include "ops/core/common.h"
#include "ops/core/parallel.h"
#include "ops/core/register_all.h"

namespace trainrt {

namespace {

// The data input must be a numeric dtype (byte copies need a size).
DataType require_numeric(const InferContext& ctx, size_t i) {
  DataType t = ctx.input(i).dtype;
  if (!dtype_is_supported(t) || dtype_size(t) == 0)
    ctx.fail("input " + std::to_string(i) + " '" + ctx.node().inputs[i] + "' has unsupported dtype " + dtype_name(t));
  return t;
}

std::vector<int64_t> tensor_ints(const Tensor& t) {
  std::vector<int64_t> v(static_cast<size_t>(t.numel()));
  for (size_t k = 0; k < v.size(); ++k)
    v[k] = t.dtype() == DataType::Int64 ? t.data<int64_t>()[k] : t.data<int32_t>()[k];
  return v;
}

// Normalises `axis` (attribute `key`) from [-bound, bound) to [0, bound).
int64_t normalize_axis(const InferContext& ctx, const std::string& key, int64_t axis, int64_t bound) {
  if (axis < -bound || axis >= bound)
    ctx.fail("attribute '" + key + "' = " + std::to_string(axis) + " is out of range [" + std::to_string(-bound) +
             ", " + std::to_string(bound - 1) + "]");
  return axis < 0 ? axis + bound : axis;
}

// Product of s[begin,end): known when every dim is; a lone symbol times 1s keeps the
// symbol (the batch through Flatten); anything else is unknown until specialised.
Dim dim_product(const Shape& s, size_t begin, size_t end) {
  int64_t known = 1;
  std::vector<Dim> symbols;
  for (size_t i = begin; i < end; ++i) {
    if (s[i].known())
      known *= s[i].value;
    else
      symbols.push_back(s[i]);
  }
  if (symbols.empty()) return Dim::of(known);
  if (symbols.size() == 1 && known == 1) return symbols[0];
  return Dim{};
}

void copy_bytes(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  TRAINRT_ASSERT(x.nbytes() == y.nbytes());
  if (x.nbytes()) std::memcpy(y.raw(), x.raw(), x.nbytes());
}

// Row-major element strides of `dims`.
std::vector<int64_t> strides_of(const std::vector<int64_t>& dims) {
  std::vector<int64_t> s(dims.size(), 1);
  for (size_t i = dims.size(); i-- > 1;) s[i - 1] = s[i] * dims[i];
  return s;
}

// Advances a row-major multi-index over `dims`; false after the last element.
bool next_index(std::vector<int64_t>& idx, const std::vector<int64_t>& dims) {
  for (size_t d = idx.size(); d-- > 0;) {
    if (++idx[d] < dims[d]) return true;
    idx[d] = 0;
  }
  return false;
}

int64_t normalize(int64_t axis, int64_t rank) { return axis < 0 ? axis + rank : axis; }

// Shape's [start, end) over a rank-`rank` input (opset 15 attributes, clamped).
std::pair<int64_t, int64_t> shape_range(const Node& n, int64_t rank) {
  auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
  const int64_t start = clamp(n.attr_int("start", 0)), end = clamp(n.attr_int("end", rank));
  return {start, std::max(start, end)};
}

// One axis of a Slice: the first element read, the step and how many are read.
struct SliceAxis {
  int64_t start = 0, step = 1, len = 0;
};

// ONNX's rule: negative starts/ends count from the end, then clamp to [0, dim] for
// positive steps and to [0, dim-1] / [-1, dim-1] for negative ones.
SliceAxis slice_axis(int64_t dim, int64_t start, int64_t end, int64_t step) {
  if (dim == 0) return SliceAxis{0, step, 0};
  if (start < 0) start += dim;
  if (end < 0) end += dim;
  SliceAxis a{0, step, 0};
  if (step > 0) {
    a.start = std::clamp<int64_t>(start, 0, dim);
    end = std::clamp<int64_t>(end, 0, dim);
    a.len = end > a.start ? (end - a.start - 1) / step + 1 : 0;
  } else {
    a.start = std::clamp<int64_t>(start, 0, dim - 1);
    end = std::clamp<int64_t>(end, -1, dim - 1);
    const int64_t back = step == std::numeric_limits<int64_t>::min() ? std::numeric_limits<int64_t>::max() : -step;
    a.len = a.start > end ? (a.start - end - 1) / back + 1 : 0;
  }
  return a;
}

// Copies between a dense row-major tensor of `dims` and a strided view of another
// buffer whose element (i_0, .., i_k) sits at base + sum(i_d * strides[d]) (in
// elements of `es` bytes; a stride may be 0 or negative). scatter = false reads the
// view from `src` into dense `dst`; scatter = true writes dense `src` into the view in `dst`.
template <bool kParallel>
void strided_copy(const std::byte* src, std::byte* dst, const std::vector<int64_t>& dims,
                  const std::vector<int64_t>& strides, int64_t base, size_t es, bool scatter) {
  const int64_t n = element_count(dims);
  if (n == 0 || es == 0) return;
  const int64_t e = static_cast<int64_t>(es);
  if (dims.empty()) return void(std::memcpy(dst + (scatter ? base * e : 0), src + (scatter ? 0 : base * e), es));
  const size_t last = dims.size() - 1;
  const int64_t inner = dims[last], step = strides[last];
  for_rows<kParallel>(n / inner, inner, [&](int64_t r0, int64_t r1) {
    std::vector<int64_t> idx(last);  // r0's index over the outer axes
    for (size_t d = last, q = static_cast<size_t>(r0); d-- > 0;) {
      idx[d] = static_cast<int64_t>(q % static_cast<size_t>(dims[d]));
      q /= static_cast<size_t>(dims[d]);
    }
    for (int64_t row = r0; row < r1; ++row) {
      int64_t off = base;
      for (size_t d = 0; d < last; ++d) off += idx[d] * strides[d];
      const int64_t dense = row * inner;
      if (step == 1) {
        std::memcpy(dst + (scatter ? off : dense) * e, src + (scatter ? dense : off) * e,
                    static_cast<size_t>(inner * e));
      } else {
        for (int64_t j = 0; j < inner; ++j, off += step)
          std::memcpy(dst + (scatter ? off : dense + j) * e, src + (scatter ? dense + j : off) * e, es);
      }
      for (size_t d = last; d-- > 0;) {
        if (++idx[d] < dims[d]) break;
        idx[d] = 0;
      }
    }
  });
}

template <bool kParallel>
void constant_of_shape_kernel(KernelContext& ctx) {
  Tensor& y = ctx.out(0);
  const size_t es = dtype_size(y.dtype());
  std::vector<std::byte> value(es, std::byte{0});
  if (ctx.node.has_attr("value")) std::memcpy(value.data(), ctx.node.attr_tensor("value")->raw(), es);
  for_range<kParallel>(y.numel(), [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) std::memcpy(y.raw() + static_cast<size_t>(i) * es, value.data(), es);
  });
}

template <bool kParallel>
void range_kernel(KernelContext& ctx) {
  Tensor& y = ctx.out(0);
  dispatch_arith(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T start = ctx.in(0).data<T>()[0], delta = ctx.in(2).data<T>()[0];
    T* out = y.data<T>();
    for_range<kParallel>(y.numel(), [&](int64_t i0, int64_t i1) {
      for (int64_t i = i0; i < i1; ++i) out[i] = static_cast<T>(start + static_cast<T>(i) * delta);
    });
  });
}

// ---- Flatten ----------------------------------------------------------------------

void flatten_infer(InferContext& ctx) {
  DataType t = require_numeric(ctx, 0);
  const Shape& x = *ctx.input(0).shape;
  const int64_t r = ctx.input_rank(0);
  // axis in [-r, r]: the split point between the two output dims
  int64_t axis = ctx.node().attr_int("axis", 1);
  if (axis < -r || axis > r)
    ctx.fail("attribute 'axis' = " + std::to_string(axis) + " is out of range [" + std::to_string(-r) + ", " +
             std::to_string(r) + "] for input " + shape_to_string(x));
  size_t a = static_cast<size_t>(axis < 0 ? axis + r : axis);
  ctx.set_output(0, t, {dim_product(x, 0, a), dim_product(x, a, x.size())});
}

// ---- Reshape ----------------------------------------------------------------------

void reshape_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  DataType t = require_numeric(ctx, 0);
  const Shape& x = *ctx.input(0).shape;
  (void)ctx.input_rank(0);
  int64_t allowzero = n.attr_int("allowzero", 0);
  if (allowzero != 0 && allowzero != 1)
    ctx.fail("attribute 'allowzero' must be 0 or 1, got " + std::to_string(allowzero));
  if (n.has_attr("allowzero") && ctx.graph().opset("") < 14)
    ctx.fail("attribute 'allowzero' needs ai.onnx opset 14, the model imports opset " +
             std::to_string(ctx.graph().opset("")));
  if (ctx.input(1).dtype != DataType::Int64)
    ctx.fail("input 1 '" + n.inputs[1] + "' (shape) must be int64, got " + dtype_name(ctx.input(1).dtype));
  const std::optional<std::vector<ShapeInt>> ints = ctx.input_ints(1);
  if (!ints) {  // computed at run time: the rank when the shape's length is known
    const ValueInfo& v = ctx.input(1);
    if (v.shape && v.shape->size() == 1 && (*v.shape)[0].known())
      return ctx.set_output(0, t, Shape(static_cast<size_t>((*v.shape)[0].value), Dim{}));
    return ctx.set_output(0, ValueInfo{t});
  }
  // A symbolic element (a copied dimension such as the batch) reads as the dim itself.
  std::vector<int64_t> want;
  std::vector<Dim> symbolic(ints->size());
  for (size_t i = 0; i < ints->size(); ++i) {
    want.push_back((*ints)[i].known() ? (*ints)[i].value : 1);
    if (!(*ints)[i].known()) symbolic[i] = (*ints)[i].dim();
  }
  std::string want_str = "[";
  for (size_t i = 0; i < ints->size(); ++i)
    want_str += (i ? "," : "") + ((*ints)[i].known() ? std::to_string(want[i]) : (*ints)[i].symbol);
  want_str += "]";

  // Symbolic bookkeeping: out = (symbols, known product) per side; a copied or
  // matching symbol cancels, so [N,3,4] -> [-1,12] infers N.
  Shape y(want.size());
  std::vector<Dim> in_symbols;
  int64_t in_known = 1;
  for (const Dim& d : x) {
    if (d.known())
      in_known *= d.value;
    else
      in_symbols.push_back(d);
  }
  int64_t out_known = 1;
  int infer_at = -1;
  bool has_zero = false;
  for (size_t i = 0; i < want.size(); ++i) {
    int64_t v = want[i];
    if (!(*ints)[i].known()) {
      y[i] = symbolic[i];
      if (!y[i].symbol.empty()) {  // a copied symbol cancels the same symbol of the input
        auto it = std::find_if(in_symbols.begin(), in_symbols.end(),
                               [&](const Dim& d) { return !d.symbol.empty() && d.symbol == y[i].symbol; });
        if (it != in_symbols.end()) in_symbols.erase(it);
      }
      continue;
    }
    if (v < -1)
      ctx.fail("shape " + want_str + " has an invalid value " + std::to_string(v) + " at index " + std::to_string(i));
    if (v == -1) {
      if (infer_at >= 0) ctx.fail("shape " + want_str + " has more than one -1");
      infer_at = static_cast<int>(i);
      continue;
    }
    if (v == 0 && allowzero == 0) {
      if (i >= x.size())
        ctx.fail("shape " + want_str + " has 0 at index " + std::to_string(i) + " but the input " + shape_to_string(x) +
                 " has rank " + std::to_string(x.size()));
      y[i] = x[i];
    } else {
      has_zero = has_zero || v == 0;
      y[i] = Dim::of(v);
    }
    if (y[i].known()) {
      const std::optional<int64_t> known = times_within_limit(out_known, y[i].value);
      if (!known) ctx.fail("shape " + want_str + " has more than 2^36 elements");
      out_known = *known;
    } else {
      // a copied symbol cancels the same symbol of the input
      auto it = std::find_if(in_symbols.begin(), in_symbols.end(),
                             [&](const Dim& d) { return !d.symbol.empty() && d.symbol == y[i].symbol; });
      if (it != in_symbols.end()) in_symbols.erase(it);
    }
  }
  if (allowzero == 1 && has_zero && infer_at >= 0)
    ctx.fail("shape " + want_str + " has both 0 and -1, which allowzero=1 does not allow");
  bool y_has_unknown = false;  // a copied unknown dim (not the -1 slot)
  for (size_t i = 0; i < y.size(); ++i)
    y_has_unknown = y_has_unknown || (static_cast<int>(i) != infer_at && !y[i].known() && y[i].symbol.empty());
  const std::string mismatch = "cannot reshape " + shape_to_string(x) + " to " + want_str;
  if (infer_at >= 0) {
    Dim& d = y[static_cast<size_t>(infer_at)];
    if (out_known == 0) ctx.fail(mismatch + ": -1 cannot be inferred next to a dimension of 0");
    if (in_symbols.empty() && !y_has_unknown) {
      if (in_known % out_known != 0)
        ctx.fail(mismatch + ": " + std::to_string(in_known) + " elements do not divide by " +
                 std::to_string(out_known));
      d = Dim::of(in_known / out_known);
    } else if (in_symbols.size() == 1 && !in_symbols[0].symbol.empty() && in_known == out_known && !y_has_unknown) {
      d = in_symbols[0];
    } else {
      d = Dim{};
    }
  } else if (in_symbols.empty() && !y_has_unknown && in_known != out_known) {
    ctx.fail(mismatch + ": " + std::to_string(in_known) + " elements vs " + std::to_string(out_known));
  }
  ValueInfo out{t, y};
  if (y.size() <= 1) out.ints = ctx.input_ints(0);  // a shape value reshaped: same elements, same order
  ctx.set_output(0, out);
}

// ---- Transpose --------------------------------------------------------------------

void transpose_infer(InferContext& ctx) {
  DataType t = require_numeric(ctx, 0);
  const int64_t r = ctx.input_rank(0);
  const Shape& x = *ctx.input(0).shape;
  std::vector<int64_t> perm = transpose_perm(ctx.node(), r);
  if (static_cast<int64_t>(perm.size()) != r)
    ctx.fail("attribute 'perm' " + dims_to_string(perm) + " has " + std::to_string(perm.size()) +
             " entries, the input " + shape_to_string(x) + " has rank " + std::to_string(r));
  std::vector<bool> seen(static_cast<size_t>(r), false);
  Shape y;
  for (int64_t p : perm) {
    if (p < 0 || p >= r || seen[static_cast<size_t>(p)])
      ctx.fail("attribute 'perm' " + dims_to_string(perm) + " is not a permutation of 0.." + std::to_string(r - 1));
    seen[static_cast<size_t>(p)] = true;
    y.push_back(x[static_cast<size_t>(p)]);
  }
  ctx.set_output(0, t, y);
}

// y[i0..ik] = x[...] with y dim k = x dim perm[k].
void transpose_reference(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  const std::vector<int64_t> perm = transpose_perm(ctx.node, x.rank());
  const std::vector<int64_t> xs = strides_of(x.dims());
  const size_t es = dtype_size(x.dtype());
  std::vector<int64_t> idx(perm.size(), 0);
  std::byte* out = y.raw();
  do {
    int64_t src = 0;
    for (size_t k = 0; k < perm.size(); ++k) src += idx[k] * xs[static_cast<size_t>(perm[k])];
    std::memcpy(out, x.raw() + src * static_cast<int64_t>(es), es);
    out += es;
  } while (next_index(idx, y.dims()));
}

// ---- Concat -----------------------------------------------------------------------

void concat_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  if (!n.has_attr("axis")) ctx.fail("attribute 'axis' is required");
  DataType t = require_numeric(ctx, 0);
  const int64_t r = ctx.input_rank(0);
  if (r == 0) ctx.fail("input 0 '" + n.inputs[0] + "' is a scalar; Concat needs rank >= 1");
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, "axis", n.attr_int("axis", 0), r));
  Shape y = *ctx.input(0).shape;
  for (size_t i = 1; i < ctx.input_count(); ++i) {
    require_same_dtype(ctx, 0, i);
    const Shape& s = *ctx.input(i).shape;
    if (ctx.input_rank(i) != r)
      ctx.fail("input " + std::to_string(i) + " '" + n.inputs[i] + "' has rank " + std::to_string(s.size()) +
               ", input 0 has rank " + std::to_string(r));
    for (size_t d = 0; d < s.size(); ++d) {
      if (d == axis) {
        y[d] = y[d].known() && s[d].known() ? Dim::of(y[d].value + s[d].value) : Dim{};
      } else if (y[d].known() && s[d].known() && y[d].value != s[d].value) {
        ctx.fail("input " + std::to_string(i) + " '" + n.inputs[i] + "' " + shape_to_string(s) +
                 " differs from input 0 " + shape_to_string(*ctx.input(0).shape) + " in dimension " +
                 std::to_string(d) + " (only the concat axis " + std::to_string(axis) + " may differ)");
      } else if (!y[d].known() && s[d].known()) {
        y[d] = s[d];
      }
    }
  }
  ValueInfo out{t, y};
  if (r == 1) {  // a shape being assembled: its elements when every part's are known
    std::vector<ShapeInt> ints;
    bool all = true;
    for (size_t i = 0; i < ctx.input_count() && all; ++i) {
      std::optional<std::vector<ShapeInt>> part = ctx.input_ints(i);
      all = part.has_value();
      if (all) ints.insert(ints.end(), part->begin(), part->end());
    }
    if (all) out.ints = ints;
  }
  ctx.set_output(0, out);
}

// y = [x0 | x1 | ...] along axis: each outer slice copies every input's block in turn.
void concat_reference(KernelContext& ctx) {
  Tensor& y = ctx.out(0);
  const size_t axis = concat_axis(ctx.node, y.rank());
  const size_t es = dtype_size(y.dtype());
  int64_t outer = 1;
  for (size_t d = 0; d < axis; ++d) outer *= y.dims()[d];
  std::byte* out = y.raw();
  for (int64_t o = 0; o < outer; ++o)
    for (size_t i = 0; i < ctx.inputs.size(); ++i) {
      const Tensor& x = ctx.in(i);
      int64_t block = 1;
      for (size_t d = axis; d < x.dims().size(); ++d) block *= x.dims()[d];
      const size_t bytes = static_cast<size_t>(block) * es;
      if (bytes) std::memcpy(out, x.raw() + static_cast<size_t>(o) * bytes, bytes);
      out += bytes;
    }
}

// ---- Pad --------------------------------------------------------------------------

// Full [begin_0..begin_r-1, end_0..end_r-1] pads from pads (and opset 18 axes).
std::vector<int64_t> full_pads(const std::vector<int64_t>& pads, const std::vector<int64_t>* axes, int64_t rank) {
  if (!axes) return pads;
  std::vector<int64_t> full(static_cast<size_t>(2 * rank), 0);
  for (size_t k = 0; k < axes->size(); ++k) {
    int64_t a = (*axes)[k] < 0 ? (*axes)[k] + rank : (*axes)[k];
    full[static_cast<size_t>(a)] = pads[k];
    full[static_cast<size_t>(a + rank)] = pads[k + axes->size()];
  }
  return full;
}

void pad_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  const std::string mode = n.attr_string("mode", "constant");
  if (mode != "constant" && mode != "reflect" && mode != "edge" && mode != "wrap")
    ctx.fail("attribute 'mode' = '" + mode + "' is not a Pad mode");
  if (mode == "wrap" && ctx.graph().opset("") < 19)
    ctx.fail("mode 'wrap' needs ai.onnx opset 19, the model imports opset " + std::to_string(ctx.graph().opset("")));
  DataType t = require_numeric(ctx, 0);
  const int64_t r = ctx.input_rank(0);
  const Shape& x = *ctx.input(0).shape;
  const std::optional<std::vector<int64_t>> known_pads = ctx.input_numbers(1);
  if (!known_pads || (ctx.has_input(3) && !ctx.input_numbers(3)))  // known at run time
    return ctx.set_output(0, t, Shape(x.size(), Dim{}));
  std::vector<int64_t> pads = *known_pads;
  for (int64_t p : pads)  // bounded so that the sums below cannot overflow (fuzz finding)
    if (p > (int64_t{1} << 40) || p < -(int64_t{1} << 40))
      ctx.fail("input 1 '" + n.inputs[1] + "' (pads) " + dims_to_string(pads) + " has a value beyond +-2^40");
  std::vector<int64_t> axes;
  if (ctx.has_input(3)) {
    if (ctx.graph().opset("") < 18)
      ctx.fail("input 3 '" + n.inputs[3] + "' (axes) needs ai.onnx opset 18, the model imports opset " +
               std::to_string(ctx.graph().opset("")));
    axes = *ctx.input_numbers(3);
    std::vector<bool> seen(static_cast<size_t>(r), false);
    for (int64_t a : axes) {
      if (a < -r || a >= r || seen[static_cast<size_t>(a < 0 ? a + r : a)])
        ctx.fail("input 3 '" + n.inputs[3] + "' (axes) " + dims_to_string(axes) +
                 " has an out-of-range or repeated axis for rank " + std::to_string(r));
      seen[static_cast<size_t>(a < 0 ? a + r : a)] = true;
    }
  }
  const size_t padded_axes = ctx.has_input(3) ? axes.size() : static_cast<size_t>(r);
  if (pads.size() != 2 * padded_axes)
    ctx.fail("input 1 '" + n.inputs[1] + "' (pads) " + dims_to_string(pads) + " must have " +
             std::to_string(2 * padded_axes) + " values for input " + shape_to_string(x));
  pads = full_pads(pads, ctx.has_input(3) ? &axes : nullptr, r);
  if (ctx.has_input(2)) {
    require_same_dtype(ctx, 0, 2);
    const ValueInfo& v = ctx.input(2);
    if (v.shape && !(v.shape->empty() || (v.shape->size() == 1 && (*v.shape)[0] == Dim::of(1))))
      ctx.fail("input 2 '" + n.inputs[2] + "' (constant_value) must be a scalar, got " + shape_to_string(*v.shape));
  }
  Shape y = x;
  for (size_t d = 0; d < x.size(); ++d) {
    int64_t grow = pads[d] + pads[d + x.size()];
    if (grow == 0) continue;
    if (!x[d].known()) {
      y[d] = Dim{};
      continue;
    }
    if (x[d].value + grow < 0)
      ctx.fail("pads " + dims_to_string(pads) + " crop dimension " + std::to_string(d) + " of " + shape_to_string(x) +
               " below zero");
    if (mode != "constant" && x[d].value == 0)
      ctx.fail("mode '" + mode + "' cannot pad dimension " + std::to_string(d) + " of " + shape_to_string(x) +
               ", which is empty");
    if (mode == "reflect" && std::max(pads[d], pads[d + x.size()]) >= x[d].value)
      ctx.fail("mode 'reflect' pads " + dims_to_string(pads) + " must be smaller than dimension " + std::to_string(d) +
               " of " + shape_to_string(x));
    y[d] = Dim::of(x[d].value + grow);
  }
  ctx.set_output(0, t, y);
}

// y[i] = x[i - begin] inside x, the constant value elsewhere (negative pads crop).
void pad_reference(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  const std::vector<int64_t> pads = pad_amounts(ctx);
  const size_t es = dtype_size(x.dtype());
  std::vector<std::byte> value(es, std::byte{0});
  if (ctx.has_input(2) && ctx.in(2).numel() > 0) std::memcpy(value.data(), ctx.in(2).raw(), es);
  const std::vector<int64_t> xs = strides_of(x.dims());
  const size_t r = x.dims().size();
  const std::string mode = ctx.node.attr_string("mode", "constant");
  // Where an index outside [0, n) reads from: edge repeats the border, reflect mirrors
  // without repeating it, wrap is periodic.
  auto source = [&](int64_t i, int64_t n) {
    if (i >= 0 && i < n) return i;
    if (mode == "edge") return std::clamp<int64_t>(i, 0, n - 1);
    if (mode == "wrap") return ((i % n) + n) % n;
    if (n == 1) return int64_t{0};
    const int64_t period = 2 * (n - 1), m = ((i % period) + period) % period;
    return m < n ? m : period - m;
  };
  std::vector<int64_t> idx(r, 0);
  std::byte* out = y.raw();
  do {
    int64_t src = 0;
    bool inside = true;
    for (size_t d = 0; d < r && inside; ++d) {
      int64_t i = idx[d] - pads[d];
      if (mode != "constant") i = source(i, x.dims()[d]);
      inside = i >= 0 && i < x.dims()[d];
      src += i * xs[d];
    }
    std::memcpy(out, inside ? x.raw() + src * static_cast<int64_t>(es) : value.data(), es);
    out += es;
  } while (next_index(idx, y.dims()));
}

// ---- shape arithmetic: Shape, ConstantOfShape, Range -------------------------------

// The model's ai.onnx opset, for ops whose attributes became inputs.
int64_t onnx_opset(const InferContext& ctx) { return ctx.graph().opset(""); }

void shape_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  if ((n.has_attr("start") || n.has_attr("end")) && onnx_opset(ctx) < 15)
    ctx.fail("attributes 'start' and 'end' need ai.onnx opset 15, the model imports opset " +
             std::to_string(onnx_opset(ctx)));
  const int64_t r = ctx.input_rank(0);
  const Shape& x = *ctx.input(0).shape;
  const std::pair<int64_t, int64_t> range = shape_range(n, r);
  std::vector<ShapeInt> ints;
  for (int64_t d = range.first; d < range.second; ++d) ints.push_back(ShapeInt::of(x[static_cast<size_t>(d)]));
  ctx.set_output(0, ValueInfo{DataType::Int64, shape_of({static_cast<int64_t>(ints.size())}), ints});
}

void shape_reference(KernelContext& ctx) {
  const std::vector<int64_t>& d = ctx.in(0).dims();
  const std::pair<int64_t, int64_t> range = shape_range(ctx.node, ctx.in(0).rank());
  for (int64_t k = range.first; k < range.second; ++k)
    ctx.out(0).data<int64_t>()[k - range.first] = d[static_cast<size_t>(k)];
}

// The dims named by a shape input's elements (numbers >= 0, symbols, unknown); the
// rank alone when only the input's length is known; nullopt when not even that.
// Longest vector ConstantOfShape's output carries as ValueInfo::ints: a shape's length.
// Also the largest rank a shape input may ask for.
constexpr int64_t kMaxShapeInts = 64;

std::optional<Shape> dims_of_shape_input(const InferContext& ctx, size_t i, const std::string& role) {
  const ValueInfo& v = ctx.input(i);
  const std::string what = "input " + std::to_string(i) + " (" + role + ")";
  if (v.dtype != DataType::Int64) ctx.fail(what + " must be int64");
  if (v.shape && v.shape->size() == 1 && (*v.shape)[0].known() && (*v.shape)[0].value > kMaxShapeInts)
    ctx.fail(what + " has " + std::to_string((*v.shape)[0].value) + " dimensions, more than " +
             std::to_string(kMaxShapeInts));
  if (std::optional<std::vector<ShapeInt>> ints = ctx.input_ints(i)) {
    if (static_cast<int64_t>(ints->size()) > kMaxShapeInts)
      ctx.fail(what + " has " + std::to_string(ints->size()) + " dimensions, more than " +
               std::to_string(kMaxShapeInts));
    Shape s;
    int64_t n = 1;  // known non-zero dims, bounded before the product can overflow
    for (const ShapeInt& e : *ints) {
      if (e.known() && e.value < 0) ctx.fail(what + " has a negative dimension " + std::to_string(e.value));
      if (e.known() && e.value > 0) {
        const std::optional<int64_t> m = times_within_limit(n, e.value);
        if (!m) ctx.fail(what + " asks for more than 2^36 elements");
        n = *m;
      }
      s.push_back(e.dim());
    }
    return s;
  }
  if (v.shape && v.shape->size() == 1 && (*v.shape)[0].known())
    return Shape(static_cast<size_t>((*v.shape)[0].value), Dim{});
  return std::nullopt;
}

void constant_of_shape_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  DataType t = DataType::Float32;
  if (n.has_attr("value")) {
    const Tensor* v = n.attr_tensor("value");
    if (!v || v->numel() != 1) ctx.fail("attribute 'value' must be a one-element tensor");
    t = v->dtype();
    if (!dtype_is_supported(t) || dtype_size(t) == 0) ctx.fail("attribute 'value' has unsupported dtype");
  }
  ValueInfo out{t, dims_of_shape_input(ctx, 0, "shape")};
  // A small integer vector of one value (PyTorch's expand builds [1,1,1] this way):
  // its elements, for the shape arithmetic that follows.
  const Tensor* v = n.has_attr("value") ? n.attr_tensor("value") : nullptr;
  if ((t == DataType::Int64 || t == DataType::Int32) && out.shape && out.shape->size() <= 1 &&
      shape_is_known(*out.shape) && element_count(shape_dims(*out.shape)) <= kMaxShapeInts)
    out.ints = std::vector<ShapeInt>(static_cast<size_t>(element_count(shape_dims(*out.shape))),
                                     ShapeInt::of(v ? static_cast<int64_t>(v->get_as_double(0)) : 0));
  ctx.set_output(0, out);
}

// Range's length max(ceil((limit - start) / delta), 0).
int64_t range_length(double start, double limit, double delta) {
  return std::max<int64_t>(0, static_cast<int64_t>(std::ceil((limit - start) / delta)));
}

void range_infer(InferContext& ctx) {
  const DataType t = ctx.input(0).dtype;
  if (t != DataType::Float32 && t != DataType::Float64 && t != DataType::Int16 && t != DataType::Int32 &&
      t != DataType::Int64)
    ctx.fail(std::string("inputs must be float, double, int16, int32 or int64, got ") + dtype_name(t));
  double v[3] = {0, 0, 0};
  bool known = true;
  for (size_t i = 0; i < 3; ++i) {
    require_same_dtype(ctx, 0, i);
    const ValueInfo& in = ctx.input(i);
    if (in.shape && !(in.shape->empty() || (in.shape->size() == 1 && (*in.shape)[0] == Dim::of(1))))
      ctx.fail("input " + std::to_string(i) + " '" + ctx.node().inputs[i] + "' must be a scalar, got " +
               shape_to_string(*in.shape));
    if (const Tensor* c = ctx.input_constant(i); c && c->numel() == 1)
      v[i] = c->get_as_double(0);
    else if (std::optional<std::vector<int64_t>> ints = ctx.input_numbers(i); ints && ints->size() == 1)
      v[i] = static_cast<double>((*ints)[0]);
    else
      known = false;
  }
  if (known && v[2] == 0) ctx.fail("delta is 0");
  if (known) {
    const double len = std::ceil((v[1] - v[0]) / v[2]);  // NaN or beyond int64 must not reach the cast
    if (!(len <= static_cast<double>(kMaxElements)))
      ctx.fail("start " + std::to_string(v[0]) + ", limit " + std::to_string(v[1]) + " and delta " +
               std::to_string(v[2]) + " give more than 2^36 elements");
  }
  ctx.set_output(0, t, {known ? Dim::of(range_length(v[0], v[1], v[2])) : Dim{}});
}

// ---- Gather -----------------------------------------------------------------------

void gather_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  DataType t = require_numeric(ctx, 0);
  const int64_t r = ctx.input_rank(0);
  if (r == 0) ctx.fail("input 0 '" + n.inputs[0] + "' is a scalar; Gather needs rank >= 1");
  const DataType it = ctx.input(1).dtype;
  if (it != DataType::Int64 && it != DataType::Int32)
    ctx.fail(std::string("input 1 (indices) must be int32 or int64, got ") + dtype_name(it));
  (void)ctx.input_rank(1);
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, "axis", n.attr_int("axis", 0), r));
  const Shape& x = *ctx.input(0).shape;
  const Shape& idx = *ctx.input(1).shape;
  Shape y(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(axis));
  y.insert(y.end(), idx.begin(), idx.end());
  y.insert(y.end(), x.begin() + static_cast<std::ptrdiff_t>(axis) + 1, x.end());
  ValueInfo out{t, y};
  const std::optional<std::vector<int64_t>> picks = ctx.input_numbers(1);
  if (picks && x[axis].known())
    for (int64_t k : *picks)
      if (k < -x[axis].value || k >= x[axis].value)
        ctx.fail("index " + std::to_string(k) + " is out of range for dimension " + std::to_string(axis) + " of " +
                 shape_to_string(x));
  if (const std::optional<std::vector<ShapeInt>> data = ctx.input_ints(0); data && r == 1 && picks) {
    std::vector<ShapeInt> ints;
    for (int64_t k : *picks) ints.push_back((*data)[static_cast<size_t>(k < 0 ? k + x[0].value : k)]);
    out.ints = ints;
  }
  ctx.set_output(0, out);
}

// Indices of `t` (int32 or int64) checked against `dim` and made non-negative.
std::vector<int64_t> gather_indices(const KernelContext& ctx, const Tensor& t, int64_t dim) {
  std::vector<int64_t> v = tensor_ints(t);
  for (int64_t& k : v) {
    if (k < -dim || k >= dim)
      throw_bad_input(describe_node(ctx.node, 0), "index " + std::to_string(k) + " is out of range [" +
                                                      std::to_string(-dim) + ", " + std::to_string(dim - 1) + "]");
    if (k < 0) k += dim;
  }
  return v;
}

// data [outer, dim, inner] -> y [outer, K, inner]: row (o, k) is data row (o, idx[k]).
template <bool kParallel>
void gather_rows(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const size_t axis = static_cast<size_t>(normalize(ctx.node.attr_int("axis", 0), x.rank()));
  const int64_t dim = x.dims()[axis];
  const std::vector<int64_t> idx = gather_indices(ctx, ctx.in(1), dim);
  const int64_t k = static_cast<int64_t>(idx.size());
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= x.dims()[d];
  for (size_t d = axis + 1; d < x.dims().size(); ++d) inner *= x.dims()[d];
  const size_t row = static_cast<size_t>(inner) * dtype_size(x.dtype());
  if (row == 0) return;
  for_rows<kParallel>(outer * k, inner, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      std::memcpy(y.raw() + static_cast<size_t>(r) * row,
                  x.raw() + static_cast<size_t>((r / k) * dim + idx[static_cast<size_t>(r % k)]) * row, row);
  });
}

// dX = zeros(X) with dY's rows added at the gathered rows: the adjoint of Gather.
template <bool kParallel>
void gather_grad_rows(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  Tensor& dx = ctx.out(0);
  const size_t axis = static_cast<size_t>(normalize(ctx.node.attr_int("axis", 0), dx.rank()));
  const int64_t dim = dx.dims()[axis];
  const std::vector<int64_t> idx = gather_indices(ctx, ctx.in(1), dim);
  const int64_t k = static_cast<int64_t>(idx.size());
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= dx.dims()[d];
  for (size_t d = axis + 1; d < dx.dims().size(); ++d) inner *= dx.dims()[d];
  dispatch_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* out = dx.data<T>();
    const T* g = dy.data<T>();
    // One outer slice per task: repeated indices add into the same rows of that slice.
    for_rows<kParallel>(outer, k * inner, [&](int64_t o0, int64_t o1) {
      std::fill(out + o0 * dim * inner, out + o1 * dim * inner, T(0));
      for (int64_t o = o0; o < o1; ++o)
        for (int64_t j = 0; j < k; ++j) {
          T* dst = out + (o * dim + idx[static_cast<size_t>(j)]) * inner;
          const T* src = g + (o * k + j) * inner;
          for (int64_t i = 0; i < inner; ++i) dst[i] += src[i];
        }
    });
  });
}

// GatherGrad(dY, indices, X; axis): X's type; dY must be Gather's output shape.
void gather_grad_infer(InferContext& ctx) {
  require_float(ctx, 0);
  require_same_dtype(ctx, 0, 2);
  ctx.set_output(0, ValueInfo{ctx.input(2).dtype, ctx.input(2).shape});
}

// ---- Unsqueeze, Squeeze -----------------------------------------------------------

// Axes of Squeeze/Unsqueeze: the attribute before opset 13, input 1 from 13 on.
std::optional<std::vector<int64_t>> squeeze_axes(const InferContext& ctx) {
  if (onnx_opset(ctx) < 13) {
    if (ctx.has_input(1)) ctx.fail("input 1 (axes) needs ai.onnx opset 13; before it axes is an attribute");
    if (!ctx.node().has_attr("axes")) return std::nullopt;
    return ctx.node().attr_ints("axes");
  }
  if (ctx.node().has_attr("axes")) ctx.fail("attribute 'axes' is an input from ai.onnx opset 13 on");
  if (!ctx.has_input(1)) return std::nullopt;
  if (ctx.input(1).dtype != DataType::Int64) ctx.fail("input 1 (axes) must be int64");
  return ctx.input_numbers(1);
}

// Sorted axes normalised to [0, rank), each once.
std::vector<int64_t> unique_axes(const InferContext& ctx, std::vector<int64_t> axes, int64_t rank) {
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t& a : axes) {
    a = normalize_axis(ctx, "axes", a, rank);
    if (seen[static_cast<size_t>(a)]) ctx.fail("axes " + dims_to_string(axes) + " repeat axis " + std::to_string(a));
    seen[static_cast<size_t>(a)] = true;
  }
  std::sort(axes.begin(), axes.end());
  return axes;
}

void unsqueeze_infer(InferContext& ctx) {
  DataType t = require_numeric(ctx, 0);
  const int64_t r = ctx.input_rank(0);
  const Shape& x = *ctx.input(0).shape;
  const std::optional<std::vector<int64_t>> axes = squeeze_axes(ctx);
  if (!axes) {
    if (onnx_opset(ctx) < 13 || !ctx.has_input(1)) ctx.fail("axes are required");
    const ValueInfo& a = ctx.input(1);  // known count, unknown positions: every dim unknown
    if (a.shape && a.shape->size() == 1 && (*a.shape)[0].known())
      return ctx.set_output(0, t, Shape(static_cast<size_t>(r + (*a.shape)[0].value), Dim{}));
    return ctx.set_output(0, ValueInfo{t});
  }
  const int64_t out_rank = r + static_cast<int64_t>(axes->size());
  const std::vector<int64_t> at = unique_axes(ctx, *axes, out_rank);
  Shape y;
  size_t next = 0, src = 0;
  for (int64_t d = 0; d < out_rank; ++d) {
    if (next < at.size() && at[next] == d) {
      y.push_back(Dim::of(1));
      ++next;
    } else {
      y.push_back(x[src++]);
    }
  }
  ValueInfo out{t, y};
  if (out_rank <= 1) out.ints = ctx.input_ints(0);
  ctx.set_output(0, out);
}

void squeeze_infer(InferContext& ctx) {
  DataType t = require_numeric(ctx, 0);
  const int64_t r = ctx.input_rank(0);
  const Shape& x = *ctx.input(0).shape;
  std::optional<std::vector<int64_t>> axes = squeeze_axes(ctx);
  if (!axes && ctx.has_input(1)) return ctx.set_output(0, ValueInfo{t});  // axes known at run time
  std::vector<int64_t> at;
  if (axes) {
    at = unique_axes(ctx, *axes, r);
    for (int64_t a : at)
      if (x[static_cast<size_t>(a)].known() && x[static_cast<size_t>(a)].value != 1)
        ctx.fail("axis " + std::to_string(a) + " of " + shape_to_string(x) + " is not 1");
  } else {
    for (int64_t d = 0; d < r; ++d) {
      if (!x[static_cast<size_t>(d)].known()) return ctx.set_output(0, ValueInfo{t});  // rank unknown
      if (x[static_cast<size_t>(d)].value == 1) at.push_back(d);
    }
  }
  Shape y;
  for (int64_t d = 0; d < r; ++d)
    if (!std::binary_search(at.begin(), at.end(), d)) y.push_back(x[static_cast<size_t>(d)]);
  ValueInfo out{t, y};
  if (y.size() <= 1) out.ints = ctx.input_ints(0);
  ctx.set_output(0, out);
}

// ---- Slice ------------------------------------------------------------------------

// Slice's starts, ends and (optional) axes and steps as numbers; nullopt while unknown.
struct SliceArgs {
  std::vector<int64_t> starts, ends, axes, steps;
};

std::optional<SliceArgs> slice_args(const InferContext& ctx, int64_t rank) {
  for (size_t i = 1; i < ctx.input_count(); ++i)
    if (ctx.has_input(i) && ctx.input(i).dtype != DataType::Int64 && ctx.input(i).dtype != DataType::Int32)
      ctx.fail("input " + std::to_string(i) + " '" + ctx.node().inputs[i] + "' must be int32 or int64");
  SliceArgs a;
  auto read = [&](size_t i, std::vector<int64_t>& v) {
    if (!ctx.has_input(i)) return true;
    std::optional<std::vector<int64_t>> n = ctx.input_numbers(i);
    if (n) v = *n;
    return n.has_value();
  };
  if (!read(1, a.starts) || !read(2, a.ends) || !read(3, a.axes) || !read(4, a.steps)) return std::nullopt;
  if (!ctx.has_input(3))
    for (size_t k = 0; k < a.starts.size(); ++k) a.axes.push_back(static_cast<int64_t>(k));
  if (!ctx.has_input(4)) a.steps.assign(a.starts.size(), 1);
  if (a.ends.size() != a.starts.size() || a.axes.size() != a.starts.size() || a.steps.size() != a.starts.size())
    ctx.fail("starts, ends, axes and steps must have one value each per sliced axis, got " +
             std::to_string(a.starts.size()) + ", " + std::to_string(a.ends.size()) + ", " +
             std::to_string(a.axes.size()) + ", " + std::to_string(a.steps.size()));
  std::vector<bool> seen(static_cast<size_t>(rank), false);
  for (int64_t& axis : a.axes) {
    axis = normalize_axis(ctx, "axes", axis, rank);
    if (seen[static_cast<size_t>(axis)]) ctx.fail("axes repeat axis " + std::to_string(axis));
    seen[static_cast<size_t>(axis)] = true;
  }
  for (int64_t s : a.steps)
    if (s == 0) ctx.fail("steps must not be 0");
  return a;
}

void slice_infer(InferContext& ctx) {
  DataType t = require_numeric(ctx, 0);
  const int64_t r = ctx.input_rank(0);
  const Shape& x = *ctx.input(0).shape;
  const std::optional<SliceArgs> a = slice_args(ctx, r);
  if (!a) return ctx.set_output(0, t, Shape(x.size(), Dim{}));
  Shape y = x;
  std::vector<SliceAxis> geometry(x.size(), SliceAxis{});
  for (size_t k = 0; k < a->axes.size(); ++k) {
    const size_t d = static_cast<size_t>(a->axes[k]);
    if (!x[d].known()) {
      y[d] = Dim{};
      continue;
    }
    geometry[d] = slice_axis(x[d].value, a->starts[k], a->ends[k], a->steps[k]);
    y[d] = Dim::of(geometry[d].len);
  }
  ValueInfo out{t, y};
  const std::optional<std::vector<ShapeInt>> data = ctx.input_ints(0);
  if (data && r == 1 && y[0].known()) {
    const SliceAxis g = a->axes.empty() ? SliceAxis{0, 1, y[0].value} : geometry[0];
    std::vector<ShapeInt> ints;
    for (int64_t i = 0; i < g.len; ++i) ints.push_back((*data)[static_cast<size_t>(g.start + i * g.step)]);
    out.ints = ints;
  }
  ctx.set_output(0, out);
}

// Per axis of x: where the slice starts, its step and its length.
// `first`: the index of the starts input (Slice 1, SliceGrad 2); ends, axes, steps follow.
std::vector<SliceAxis> slice_geometry(const KernelContext& ctx, size_t first, const std::vector<int64_t>& dims) {
  const std::vector<int64_t> starts = tensor_ints(ctx.in(first)), ends = tensor_ints(ctx.in(first + 1));
  std::vector<int64_t> axes, steps(starts.size(), 1);
  if (ctx.has_input(first + 2))
    axes = tensor_ints(ctx.in(first + 2));
  else
    for (size_t k = 0; k < starts.size(); ++k) axes.push_back(static_cast<int64_t>(k));
  if (ctx.has_input(first + 3)) steps = tensor_ints(ctx.in(first + 3));
  std::vector<SliceAxis> g;
  for (int64_t d : dims) g.push_back(SliceAxis{0, 1, d});
  for (size_t k = 0; k < starts.size(); ++k) {
    const size_t d = static_cast<size_t>(normalize(axes[k], static_cast<int64_t>(dims.size())));
    g[d] = slice_axis(dims[d], starts[k], ends[k], steps[k]);
  }
  return g;
}

// Element strides over y's axes into x (x's strides times the steps), and the offset of y[0].
std::pair<std::vector<int64_t>, int64_t> slice_strides(const std::vector<SliceAxis>& g,
                                                       const std::vector<int64_t>& dims) {
  const std::vector<int64_t> xs = strides_of(dims);
  std::vector<int64_t> s(dims.size());
  int64_t base = 0;
  for (size_t d = 0; d < dims.size(); ++d) {
    s[d] = xs[d] * g[d].step;
    base += xs[d] * g[d].start;
  }
  return {s, base};
}

template <bool kParallel>
void slice_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const auto [strides, base] = slice_strides(slice_geometry(ctx, 1, x.dims()), x.dims());
  strided_copy<kParallel>(x.raw(), y.raw(), y.dims(), strides, base, dtype_size(x.dtype()), /*scatter=*/false);
}

// SliceGrad(dY, X, starts, ends[, axes[, steps]]) -> dX: zeros with dY written where
// Slice read (a slice reads each element at most once, so writing is the adjoint).
template <bool kParallel>
void slice_grad_kernel(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  Tensor& dx = ctx.out(0);
  if (dx.nbytes()) std::memset(dx.raw(), 0, dx.nbytes());
  const auto [strides, base] = slice_strides(slice_geometry(ctx, 2, dx.dims()), dx.dims());
  strided_copy<kParallel>(dy.raw(), dx.raw(), dy.dims(), strides, base, dtype_size(dy.dtype()), /*scatter=*/true);
}

void slice_grad_infer(InferContext& ctx) {
  require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  ctx.set_output(0, ctx.input(1));
}

// ---- Split ------------------------------------------------------------------------

void split_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  DataType t = require_numeric(ctx, 0);
  const int64_t r = ctx.input_rank(0);
  if (r == 0) ctx.fail("input 0 '" + n.inputs[0] + "' is a scalar; Split needs rank >= 1");
  const Shape& x = *ctx.input(0).shape;
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, "axis", n.attr_int("axis", 0), r));
  const size_t parts = ctx.output_count();
  std::optional<std::vector<int64_t>> sizes;
  if (onnx_opset(ctx) < 13) {
    if (ctx.has_input(1)) ctx.fail("input 1 (split) needs ai.onnx opset 13; before it split is an attribute");
    if (n.has_attr("split")) sizes = n.attr_ints("split");
  } else {
    if (n.has_attr("split")) ctx.fail("attribute 'split' is an input from ai.onnx opset 13 on");
    if (ctx.has_input(1)) {
      if (ctx.input(1).dtype != DataType::Int64) ctx.fail("input 1 (split) must be int64");
      sizes = ctx.input_numbers(1);
      if (!sizes) {  // known at run time
        for (size_t i = 0; i < parts; ++i) {
          Shape y = x;
          y[axis] = Dim{};
          ctx.set_output(i, t, y);
        }
        return;
      }
    }
  }
  if (n.has_attr("num_outputs") && onnx_opset(ctx) < 18) ctx.fail("attribute 'num_outputs' needs ai.onnx opset 18");
  if (n.has_attr("num_outputs") && (sizes || n.attr_int("num_outputs", 0) != static_cast<int64_t>(parts)))
    ctx.fail("attribute 'num_outputs' must equal the number of outputs and come without split");
  Shape y = x;
  if (sizes) {
    if (sizes->size() != parts)
      ctx.fail("split " + dims_to_string(*sizes) + " has " + std::to_string(sizes->size()) + " sizes for " +
               std::to_string(parts) + " outputs");
    int64_t total = 0;
    for (int64_t s : *sizes) {
      if (s < 0) ctx.fail("split " + dims_to_string(*sizes) + " has a negative size");
      if (s > kMaxElements - total) ctx.fail("split " + dims_to_string(*sizes) + " sums to more than 2^36");
      total += s;
    }
    if (x[axis].known() && total != x[axis].value)
      ctx.fail("split " + dims_to_string(*sizes) + " sums to " + std::to_string(total) + ", dimension " +
               std::to_string(axis) + " of " + shape_to_string(x) + " is " + std::to_string(x[axis].value));
    for (size_t i = 0; i < parts; ++i) {
      y[axis] = Dim::of((*sizes)[i]);
      ctx.set_output(i, t, y);
    }
    return;
  }
  // Equal parts; from opset 18 the last part may be smaller.
  for (size_t i = 0; i < parts; ++i) {
    if (!x[axis].known()) {
      y[axis] = Dim{};
    } else {
      const int64_t dim = x[axis].value, p = static_cast<int64_t>(parts);
      if (dim % p != 0 && !n.has_attr("num_outputs"))
        ctx.fail("dimension " + std::to_string(axis) + " of " + shape_to_string(x) + " does not split into " +
                 std::to_string(parts) + " equal parts");
      const int64_t each = (dim + p - 1) / p;
      y[axis] = Dim::of(std::clamp<int64_t>(dim - each * static_cast<int64_t>(i), 0, each));
    }
    ctx.set_output(i, t, y);
  }
}

// Output i is x's slice [offset_i, offset_i + dims_i) along axis.
template <bool kParallel>
void split_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const size_t axis = static_cast<size_t>(normalize(ctx.node.attr_int("axis", 0), x.rank()));
  const std::vector<int64_t> xs = strides_of(x.dims());
  const std::vector<int64_t>& strides = xs;
  int64_t offset = 0;
  for (size_t i = 0; i < ctx.outputs.size(); ++i) {
    std::vector<int64_t> dims = x.dims();
    if (ctx.has_output(i)) {
      Tensor& y = ctx.out(i);
      dims = y.dims();
      strided_copy<kParallel>(x.raw(), y.raw(), dims, strides, offset * xs[axis], dtype_size(x.dtype()), false);
    }
    offset += dims[axis];
  }
}

// ---- Expand -----------------------------------------------------------------------

void expand_infer(InferContext& ctx) {
  DataType t = require_numeric(ctx, 0);
  (void)ctx.input_rank(0);
  const Shape& x = *ctx.input(0).shape;
  const std::optional<Shape> want = dims_of_shape_input(ctx, 1, "shape");
  if (!want) return ctx.set_output(0, ValueInfo{t});
  std::string why;
  std::optional<Shape> y = broadcast_shapes(x, *want, &why);
  if (!y) ctx.fail("cannot expand " + shape_to_string(x) + " to " + shape_to_string(*want) + ": " + why);
  ctx.set_output(0, t, *y);
}

// y = x broadcast to y's shape: x's strides, 0 along broadcast axes.
template <bool kParallel>
void expand_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const std::vector<int64_t> xs = strides_of(x.dims());
  const size_t lead = y.dims().size() - x.dims().size();
  std::vector<int64_t> strides(y.dims().size(), 0);
  for (size_t d = 0; d < x.dims().size(); ++d) strides[lead + d] = x.dims()[d] == 1 ? 0 : xs[d];
  strided_copy<kParallel>(x.raw(), y.raw(), y.dims(), strides, 0, dtype_size(x.dtype()), false);
}

// ---- backward ops -----------------------------------------------------------------

// ReshapeLike(dY, X): X's type; element counts must agree where both are known.
void reshape_like_infer(InferContext& ctx) {
  DataType t = require_numeric(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  const Shape& dy = *ctx.input(0).shape;
  const Shape& x = *ctx.input(1).shape;
  (void)ctx.input_rank(0);
  (void)ctx.input_rank(1);
  if (shape_is_known(dy) && shape_is_known(x) && element_count(shape_dims(dy)) != element_count(shape_dims(x)))
    ctx.fail("input 0 '" + ctx.node().inputs[0] + "' " + shape_to_string(dy) + " has " +
             std::to_string(element_count(shape_dims(dy))) + " elements, input 1 '" + ctx.node().inputs[1] + "' " +
             shape_to_string(x) + " has " + std::to_string(element_count(shape_dims(x))));
  ctx.set_output(0, t, x);
}

// ConcatGrad(dY, X0..Xk-1): output i has Xi's type; the Xi must concatenate to dY.
void concat_grad_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  if (!n.has_attr("axis")) ctx.fail("attribute 'axis' is required");
  DataType t = require_numeric(ctx, 0);
  const Shape& dy = *ctx.input(0).shape;
  const int64_t r = ctx.input_rank(0);
  if (r == 0) ctx.fail("input 0 '" + n.inputs[0] + "' (dY) is a scalar; ConcatGrad needs rank >= 1");
  const size_t axis = static_cast<size_t>(normalize_axis(ctx, "axis", n.attr_int("axis", 0), r));
  const size_t parts = ctx.input_count() - 1;
  if (parts == 0) ctx.fail("needs at least one forward input after dY");
  if (ctx.output_count() > parts)
    ctx.fail("has " + std::to_string(ctx.output_count()) + " outputs for " + std::to_string(parts) + " forward inputs");
  int64_t total = 0;
  bool total_known = true;
  for (size_t i = 1; i <= parts; ++i) {
    require_same_dtype(ctx, 0, i);
    const Shape& x = *ctx.input(i).shape;
    if (ctx.input_rank(i) != r)
      ctx.fail("input " + std::to_string(i) + " '" + n.inputs[i] + "' " + shape_to_string(x) + " has rank " +
               std::to_string(x.size()) + ", dY " + shape_to_string(dy) + " has rank " + std::to_string(r));
    for (size_t d = 0; d < x.size(); ++d) {
      if (d == axis) {
        total_known = total_known && x[d].known();
        total += x[d].known() ? x[d].value : 0;
      } else if (x[d].known() && dy[d].known() && x[d].value != dy[d].value) {
        ctx.fail("input " + std::to_string(i) + " '" + n.inputs[i] + "' " + shape_to_string(x) + " differs from dY " +
                 shape_to_string(dy) + " in dimension " + std::to_string(d));
      }
    }
  }
  if (total_known && dy[axis].known() && total != dy[axis].value)
    ctx.fail("the inputs' extents along axis " + std::to_string(axis) + " sum to " + std::to_string(total) + ", dY " +
             shape_to_string(dy) + " has " + std::to_string(dy[axis].value));
  for (size_t i = 0; i < ctx.output_count(); ++i) ctx.set_output(i, t, *ctx.input(i + 1).shape);
}

// dX_i = the i-th block of dY along axis (the inverse of concat_reference's copies).
void concat_grad_reference(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  int64_t axis = ctx.node.attr_int("axis", 0);
  if (axis < 0) axis += dy.rank();
  const size_t es = dtype_size(dy.dtype());
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= dy.dims()[static_cast<size_t>(d)];
  const std::byte* in = dy.raw();
  for (int64_t o = 0; o < outer; ++o)
    for (size_t i = 1; i < ctx.inputs.size(); ++i) {
      const Tensor& x = ctx.in(i);
      int64_t block = 1;
      for (size_t d = static_cast<size_t>(axis); d < x.dims().size(); ++d) block *= x.dims()[d];
      const size_t bytes = static_cast<size_t>(block) * es;
      if (bytes && ctx.has_output(i - 1)) std::memcpy(ctx.out(i - 1).raw() + static_cast<size_t>(o) * bytes, in, bytes);
      in += bytes;
    }
}

// ---- ScatterND -------------------------------------------------------------------

// ScatterND(data, indices, updates; reduction): indices [..., k] (k <= rank(data)),
// updates = indices.shape[:-1] + data.shape[k:]; the output is data with each indexed
// slice replaced (none), added to (add) or multiplied into (mul).
void scatter_nd_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  const std::string red = n.attr_string("reduction", "none");
  if (red != "none" && red != "add" && red != "mul")
    ctx.fail("attribute reduction must be \"none\", \"add\" or \"mul\", got \"" + red + "\"");
  const DataType t = red == "none" ? ctx.input(0).dtype : require_numeric(ctx, 0);
  if (dtype_size(t) == 0) ctx.fail("input 0 '" + n.inputs[0] + "' has unsupported dtype " + dtype_name(t));
  if (ctx.input(1).dtype != DataType::Int64)
    ctx.fail(std::string("input 1 (indices) must be int64, got ") + dtype_name(ctx.input(1).dtype));
  if (ctx.input(2).dtype != t)
    ctx.fail("input 2 (updates) must have the data's dtype " + std::string(dtype_name(t)) + ", got " +
             dtype_name(ctx.input(2).dtype));
  const int64_t r = ctx.input_rank(0), q = ctx.input_rank(1);
  if (r < 1 || q < 1) ctx.fail("data and indices must have rank >= 1");
  const Shape& data = *ctx.input(0).shape;
  const Shape& idx = *ctx.input(1).shape;
  const Dim k = idx.back();
  if (k.known()) {
    if (k.value < 1 || k.value > r)
      ctx.fail("the last dimension of indices is " + std::to_string(k.value) + ", must be in [1, " + std::to_string(r) +
               "]");
    Shape want(idx.begin(), idx.end() - 1);
    want.insert(want.end(), data.begin() + k.value, data.end());
    if (const std::optional<Shape>& u = ctx.input(2).shape) {
      bool ok = u->size() == want.size();
      for (size_t i = 0; ok && i < want.size(); ++i)
        ok = !(*u)[i].known() || !want[i].known() || (*u)[i].value == want[i].value;
      if (!ok) ctx.fail("input 2 (updates) has shape " + shape_to_string(*u) + ", expected " + shape_to_string(want));
    }
  }
  ctx.set_output(0, ValueInfo{t, data});
}

template <typename T, typename Fn>
void scatter_nd_slices(KernelContext& ctx, T* y, Fn fn, bool parallel) {
  const Tensor &x = ctx.in(0), &ind = ctx.in(1), &u = ctx.in(2);
  const int64_t k = ind.dims().back();
  const int64_t tuples = k == 0 ? 0 : ind.numel() / k;
  int64_t slice = 1;
  for (size_t d = static_cast<size_t>(k); d < x.dims().size(); ++d) slice *= x.dims()[d];
  const int64_t* pi = ind.data<int64_t>();
  std::vector<int64_t> offset(static_cast<size_t>(tuples));
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t o = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t dim = x.dims()[static_cast<size_t>(j)];
      int64_t v = pi[t * k + j];
      if (v < -dim || v >= dim)
        throw_bad_input(describe_node(ctx.node, 1), "index " + std::to_string(v) + " is out of range [" +
                                                        std::to_string(-dim) + ", " + std::to_string(dim - 1) +
                                                        "] for dimension " + std::to_string(j));
      if (v < 0) v += dim;
      o = o * dim + v;
    }
    offset[static_cast<size_t>(t)] = o * slice;
  }
  const T* pu = reinterpret_cast<const T*>(u.raw());
  // Parallel over the elements of a slice, each chunk applying every tuple in order:
  // repeated indices apply in index order on both backends.
  auto body = [&](int64_t b, int64_t e) {
    for (int64_t t = 0; t < tuples; ++t)
      for (int64_t i = b; i < e; ++i) fn(y[offset[static_cast<size_t>(t)] + i], pu[t * slice + i]);
  };
  if (parallel)
    for_range<true>(slice, body);
  else
    for_range<false>(slice, body);
}

template <bool kParallel>
void scatter_nd_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (x.nbytes()) std::memcpy(y.raw(), x.raw(), x.nbytes());
  const std::string red = ctx.node.attr_string("reduction", "none");
  if (red == "none") {
    auto copy = [&](auto tag) {
      using E = decltype(tag);
      scatter_nd_slices<E>(
          ctx, reinterpret_cast<E*>(y.raw()), [](E& d, const E& s) { d = s; }, kParallel);
    };
    switch (dtype_size(x.dtype())) {
      case 1:
        return copy(uint8_t{});
      case 2:
        return copy(uint16_t{});
      case 4:
        return copy(uint32_t{});
      case 8:
        return copy(uint64_t{});
      default:
        throw_internal("ScatterND", std::string("unexpected dtype ") + dtype_name(x.dtype()));
    }
  }
  dispatch_arith(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (red == "add")
      scatter_nd_slices<T>(
          ctx, y.data<T>(), [](T& d, T s) { d = static_cast<T>(d + s); }, kParallel);
    else
      scatter_nd_slices<T>(
          ctx, y.data<T>(), [](T& d, T s) { d = static_cast<T>(d * s); }, kParallel);
  });
}

}  // namespace

const ShapeKernels& shape_kernels(bool parallel) {
  static const ShapeKernels serial{
      gather_rows<false>,      gather_grad_rows<false>, slice_kernel<false>, slice_grad_kernel<false>,
      split_kernel<false>,     expand_kernel<false>,    range_kernel<false>, constant_of_shape_kernel<false>,
      scatter_nd_kernel<false>};
  static const ShapeKernels threaded{
      gather_rows<true>,      gather_grad_rows<true>, slice_kernel<true>, slice_grad_kernel<true>,
      split_kernel<true>,     expand_kernel<true>,    range_kernel<true>, constant_of_shape_kernel<true>,
      scatter_nd_kernel<true>};
  return parallel ? threaded : serial;
}

void shape_of_kernel(KernelContext& ctx) { shape_reference(ctx); }

std::vector<int64_t> transpose_perm(const Node& n, int64_t rank) {
  std::vector<int64_t> perm = n.attr_ints("perm");
  if (!n.has_attr("perm"))
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  return perm;
}

std::vector<int64_t> pad_amounts(const KernelContext& ctx) {
  std::vector<int64_t> axes;
  if (ctx.has_input(3)) axes = tensor_ints(ctx.in(3));
  return full_pads(tensor_ints(ctx.in(1)), ctx.has_input(3) ? &axes : nullptr, ctx.in(0).rank());
}

size_t concat_axis(const Node& n, int64_t rank) {
  const int64_t axis = n.attr_int("axis", 0);
  return static_cast<size_t>(axis < 0 ? axis + rank : axis);
}

void register_shape_ops(Registry& r) {
  r.schemas.add(OpSchema{"", "Flatten", 1, 1, 1, 1, 11, flatten_infer, nullptr, {"axis"}});
  // since 5; allowzero (opset 14) is checked against the model's opset in the rule
  r.schemas.add(OpSchema{"", "Reshape", 2, 2, 1, 1, 5, reshape_infer, nullptr, {"allowzero"}});
  r.schemas.add(OpSchema{"", "Transpose", 1, 1, 1, 1, 1, transpose_infer, nullptr, {"perm"}});
  r.schemas.add(OpSchema{"", "Concat", 1, 1 << 20, 1, 1, 11, concat_infer, nullptr, {"axis"}});
  r.schemas.add(OpSchema{"", "Pad", 2, 4, 1, 1, 11, pad_infer, nullptr, {"mode"}});
  r.kernels.add("reference", "", "Flatten", copy_bytes);
  r.kernels.add("reference", "", "Reshape", copy_bytes);
  r.kernels.add("reference", "", "Transpose", transpose_reference);
  r.kernels.add("reference", "", "Concat", concat_reference);
  r.kernels.add("reference", "", "Pad", pad_reference);

  r.schemas.add(OpSchema{kTrainrtDomain, "ReshapeLike", 2, 2, 1, 1, 1, reshape_like_infer, nullptr, {}});
  r.schemas.add(
      OpSchema{kTrainrtDomain, "ConcatGrad", 2, 1 << 20, 1, 1 << 20, 1, concat_grad_infer, nullptr, {"axis"}});
  r.kernels.add("reference", kTrainrtDomain, "ReshapeLike", copy_bytes);
  r.kernels.add("reference", kTrainrtDomain, "ConcatGrad", concat_grad_reference);

  // Shape computations and indexing. Opsets 11-17 as PyTorch exports them: axes of
  // Squeeze/Unsqueeze and Split's split are attributes before 13 and inputs from 13.
  r.schemas.add(OpSchema{"", "Shape", 1, 1, 1, 1, 1, shape_infer, nullptr, {"start", "end"}});
  r.schemas.add(OpSchema{"", "ConstantOfShape", 1, 1, 1, 1, 9, constant_of_shape_infer, nullptr, {"value"}});
  r.schemas.add(OpSchema{"", "Range", 3, 3, 1, 1, 11, range_infer, nullptr, {}});
  r.schemas.add(OpSchema{"", "Gather", 2, 2, 1, 1, 11, gather_infer, nullptr, {"axis"}});
  r.schemas.add(OpSchema{"", "Unsqueeze", 1, 2, 1, 1, 11, unsqueeze_infer, nullptr, {"axes"}});
  r.schemas.add(OpSchema{"", "Squeeze", 1, 2, 1, 1, 11, squeeze_infer, nullptr, {"axes"}});
  r.schemas.add(OpSchema{"", "Slice", 3, 5, 1, 1, 10, slice_infer, nullptr, {}});
  r.schemas.add(OpSchema{"", "Split", 1, 2, 1, 1 << 20, 11, split_infer, nullptr, {"axis", "split", "num_outputs"}});
  r.schemas.add(OpSchema{"", "Expand", 2, 2, 1, 1, 8, expand_infer, nullptr, {}});
  const ShapeKernels& k = shape_kernels(false);
  r.kernels.add("reference", "", "Shape", shape_reference);
  r.kernels.add("reference", "", "ConstantOfShape", k.constant_of_shape);
  r.kernels.add("reference", "", "Range", k.range);
  r.kernels.add("reference", "", "Gather", k.gather);
  r.kernels.add("reference", "", "Unsqueeze", copy_bytes);
  r.kernels.add("reference", "", "Squeeze", copy_bytes);
  r.kernels.add("reference", "", "Slice", k.slice);
  r.kernels.add("reference", "", "Split", k.split);
  r.kernels.add("reference", "", "Expand", k.expand);
  // ScatterND from opset 11 (13 adds types, 16 the reduction attribute: none/add/mul).
  // FLOPs: one per updated element for add/mul, none for a copy.
  r.schemas.add(OpSchema{"",
                         "ScatterND",
                         3,
                         3,
                         1,
                         1,
                         11,
                         scatter_nd_infer,
                         [](const Graph& g, const Node& n) {
                           const ValueInfo* u = g.find_info(n.inputs.at(2));
                           if (n.attr_string("reduction", "none") == "none" || !u || !u->shape ||
                               !shape_is_known(*u->shape))
                             return 0.0;
                           return static_cast<double>(element_count(shape_dims(*u->shape)));
                         },
                         {"reduction"}});
  r.kernels.add("reference", "", "ScatterND", k.scatter_nd);
  r.schemas.add(OpSchema{kTrainrtDomain, "GatherGrad", 3, 3, 1, 1, 1, gather_grad_infer, nullptr, {"axis"}});
  r.schemas.add(OpSchema{kTrainrtDomain, "SliceGrad", 4, 6, 1, 1, 1, slice_grad_infer, nullptr, {}});
  r.kernels.add("reference", kTrainrtDomain, "GatherGrad", k.gather_grad);
  r.kernels.add("reference", kTrainrtDomain, "SliceGrad", k.slice_grad);
}

}  // namespace trainrt
