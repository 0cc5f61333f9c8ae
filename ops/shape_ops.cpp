// Shape ops: Flatten, Reshape, Transpose, Concat, Pad.
//
//   Flatten(x[N,C,H,W], axis=1)        -> [N, C*H*W]
//   Reshape(x[N,3,4], shape=[0,-1])    -> [N,12]      (0 copies, -1 infers)
//   Transpose(x[N,C,H,W], perm=[0,2,3,1]) -> [N,H,W,C]
//   Concat(a[N,2], b[N,3], axis=1)     -> [N,5]
//   Pad(x[N,C,H,W], pads=[0,0,1,1, 0,0,1,1]) -> [N,C,H+2,W+2]  (constant mode only)
//
// Backward ops (domain ai.trainrt, autodiff/rules_shape.cpp):
//   ReshapeLike(dY, X) -> dX                  dY's elements in X's shape (Flatten, Reshape; X is
//                                             read for its shape only, so a symbolic batch works)
//   ConcatGrad(dY, X0, X1, ..., axis) -> (dX0, dX1, ...)   dY split along axis into the Xi's
//                                             extents; an empty output name skips that slice
// Transpose's gradient is Transpose (inverse perm), Pad's is Pad with negated pads.
//
// Why these kernels move bytes: a shape op never looks at values, so one kernel
// serves every numeric dtype (float, int64 indices, bool masks...). Shape inputs
// (Reshape's shape, Pad's pads) must be constants so every shape is static once the
// batch is known; a symbolic batch dimension survives where it is copied through.
#include "ops/shape_ops.h"

#include <cstring>

#include "ops/core/common.h"
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

// Values of a constant 1-D int64 (or int32) input, for shape-carrying inputs.
std::vector<int64_t> constant_ints(const InferContext& ctx, size_t i, const std::string& role) {
  const std::string field = "input " + std::to_string(i) + " '" + ctx.node().inputs[i] + "' (" + role + ")";
  const Tensor* t = ctx.input_constant(i);
  if (!t)
    throw_unsupported(ctx.where(), field +
                                       " must be a constant (an initializer or a Constant node's output): "
                                       "trainrt needs static shapes");
  if (t->dtype() != DataType::Int64 && t->dtype() != DataType::Int32)
    ctx.fail(field + " must be int64, got " + dtype_name(t->dtype()));
  if (t->rank() != 1) ctx.fail(field + " must be 1-D, got " + dims_to_string(t->dims()));
  std::vector<int64_t> v(static_cast<size_t>(t->numel()));
  for (size_t k = 0; k < v.size(); ++k)
    v[k] = t->dtype() == DataType::Int64 ? t->data<int64_t>()[k] : t->data<int32_t>()[k];
  return v;
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
  std::vector<int64_t> want = constant_ints(ctx, 1, "shape");
  const std::string want_str = dims_to_string(want);

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
      out_known *= y[i].value;
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
  ctx.set_output(0, t, y);
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
  ctx.set_output(0, t, y);
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
  if (mode == "reflect" || mode == "edge" || mode == "wrap")
    throw_unsupported(ctx.where(), "attribute 'mode' = '" + mode + "' is not supported (only 'constant')");
  if (mode != "constant") ctx.fail("attribute 'mode' = '" + mode + "' is not a Pad mode");
  DataType t = require_numeric(ctx, 0);
  const int64_t r = ctx.input_rank(0);
  const Shape& x = *ctx.input(0).shape;
  std::vector<int64_t> pads = constant_ints(ctx, 1, "pads");
  for (int64_t p : pads)  // bounded so that the sums below cannot overflow (fuzz finding)
    if (p > (int64_t{1} << 40) || p < -(int64_t{1} << 40))
      ctx.fail("input 1 '" + n.inputs[1] + "' (pads) " + dims_to_string(pads) + " has a value beyond +-2^40");
  std::vector<int64_t> axes;
  if (ctx.has_input(3)) {
    if (ctx.graph().opset("") < 18)
      ctx.fail("input 3 '" + n.inputs[3] + "' (axes) needs ai.onnx opset 18, the model imports opset " +
               std::to_string(ctx.graph().opset("")));
    axes = constant_ints(ctx, 3, "axes");
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
  std::vector<int64_t> idx(r, 0);
  std::byte* out = y.raw();
  do {
    int64_t src = 0;
    bool inside = true;
    for (size_t d = 0; d < r && inside; ++d) {
      int64_t i = idx[d] - pads[d];
      inside = i >= 0 && i < x.dims()[d];
      src += i * xs[d];
    }
    std::memcpy(out, inside ? x.raw() + src * static_cast<int64_t>(es) : value.data(), es);
    out += es;
  } while (next_index(idx, y.dims()));
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

}  // namespace

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
}

}  // namespace trainrt
