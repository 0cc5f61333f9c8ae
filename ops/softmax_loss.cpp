// Softmax, LogSoftmax, SoftmaxCrossEntropyLoss and the reductions ReduceMean, ReduceSum, ReduceMax.
//
//   Softmax(x, axis=-1):     y = exp(x - max) / sum(exp(x - max))   along one axis (opset 13)
//   LogSoftmax(x, axis=-1):  y = x - max - log(sum(exp(x - max)))
//   SoftmaxCrossEntropyLoss(scores[N,C,d1..], labels[N,d1..] int, weights[C]?)
//       loss[n,d] = -w[l] * log_softmax(scores, axis=1)[n,l,d], l = labels[n,d];
//       a label equal to ignore_index contributes 0 and has weight 0;
//       mean = sum(loss) / sum(w[l] over non-ignored samples)  (ONNX spec; w = 1 without weights)
//       optional output 1 is the log_softmax itself, shape [N,C,d1..].
//   ReduceMean(x, axes, keepdims=1): opset 13 takes axes as an attribute, opset 18 as an
//       optional constant input with noop_with_empty_axes.
//   ReduceSum(x, axes?, keepdims=1, noop_with_empty_axes=0): axes is input 1 from opset 13.
//   ReduceMax(x, axes, keepdims=1): axes attribute up to opset 17, input 1 from opset 18.
//   No axes means every axis (or none, y = x, with noop_with_empty_axes). Sums are in double.
//
// Backward ops (domain ai.trainrt, autodiff/rules_softmax_loss.cpp):
//   SoftmaxGrad(dY, Y, axis) -> dX           dX = Y * (dY - sum_axis(dY * Y))
//   LogSoftmaxGrad(dY, Y, axis) -> dX        dX = dY - exp(Y) * sum_axis(dY)
//   SoftmaxCrossEntropyLossGrad(dLoss, log_prob, labels, weights?; reduction, ignore_index) -> dScores
//       dScores[n,c,d] = g[n,d] * w[l] * (exp(log_prob[n,c,d]) - [c == l]),  l = labels[n,d],
//       g = dLoss / sum(w[l] over non-ignored samples) (mean), dLoss (sum), dLoss[n,d] (none);
//       0 for ignored samples.
//   ReduceMeanGrad(dY, X; axes, keepdims, noop_with_empty_axes) -> dX   dY / count broadcast back to X
//   ReduceSumGrad(dY, X; axes, keepdims, noop_with_empty_axes) -> dX    dY broadcast back to X
//   ReduceMaxGrad(dY, X, Y; axes, keepdims, noop_with_empty_axes) -> dX dY split equally among the
//       elements equal to their max (as PyTorch's amax), 0 elsewhere
//
// Reference kernels subtract the max and accumulate in double. SoftmaxCrossEntropyLoss and
// its gradient are loops in ops/softmax_loss_loops.h that the cpu kernels
// (ops/softmax_loss_cpu.cpp) run with the independent rows split over oneTBB chunks
// (ops/core/parallel.h), so they equal the reference bit for bit.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "ops/core/common.h"
#include "ops/core/parallel.h"
#include "ops/core/register_all.h"
#include "ops/softmax_loss_loops.h"

namespace trainrt {

namespace {

using softmax_loops::AxisSplit;
using softmax_loops::log_softmax_into;
using softmax_loops::split_at;

int64_t normalize_axis(const InferContext& ctx, const std::string& field, int64_t axis, int64_t rank) {
  if (axis < -rank || axis >= rank)
    ctx.fail(field + " = " + std::to_string(axis) + " is out of range [" + std::to_string(-rank) + ", " +
             std::to_string(rank - 1) + "] for input " + shape_to_string(*ctx.input(0).shape));
  return axis < 0 ? axis + rank : axis;
}

// ---- Softmax / LogSoftmax ---------------------------------------------------------

void softmax_infer(InferContext& ctx) {
  DataType t = require_float(ctx, 0);
  const int64_t r = ctx.input_rank(0);
  if (r == 0) ctx.fail("input 0 '" + ctx.node().inputs[0] + "' is a scalar; need rank >= 1");
  normalize_axis(ctx, "attribute 'axis'", ctx.node().attr_int("axis", -1), r);
  ctx.set_output(0, t, *ctx.input(0).shape);
}

template <typename T, bool kLog>
void softmax_reference(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  int64_t axis = ctx.node.attr_int("axis", -1);
  if (axis < 0) axis += x.rank();
  const AxisSplit s = split_at(x.dims(), static_cast<size_t>(axis));
  std::vector<double> lp(static_cast<size_t>(x.numel()));
  log_softmax_into(x.data<T>(), s, lp.data());
  T* y = ctx.out(0).data<T>();
  for (size_t k = 0; k < lp.size(); ++k) y[k] = static_cast<T>(kLog ? lp[k] : std::exp(lp[k]));
}

// ---- SoftmaxCrossEntropyLoss ------------------------------------------------------

void sce_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  DataType t = require_float(ctx, 0);
  const std::string reduction = n.attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "mean" && reduction != "sum")
    ctx.fail("attribute 'reduction' = '" + reduction + "' must be none, mean or sum");
  const int64_t r = ctx.input_rank(0);
  const Shape& x = *ctx.input(0).shape;
  if (r < 2)
    ctx.fail("input 0 '" + n.inputs[0] + "' (scores) must be [N,C] or [N,C,d1,...], got " + shape_to_string(x));
  DataType lt = ctx.input(1).dtype;
  if (lt != DataType::Int64 && lt != DataType::Int32)
    ctx.fail("input 1 '" + n.inputs[1] + "' (labels) must be int64 or int32, got " + dtype_name(lt));
  Shape labels = *ctx.input(1).shape;
  const std::string want = "the scores " + shape_to_string(x) + " without C";
  if (ctx.input_rank(1) != r - 1)
    ctx.fail("input 1 '" + n.inputs[1] + "' (labels) " + shape_to_string(labels) + " must have the shape of " + want);
  for (size_t d = 0; d < labels.size(); ++d) {
    const Dim& s = x[d == 0 ? 0 : d + 1];
    Dim& l = labels[d];
    if (l.known() && s.known() && l.value != s.value)
      ctx.fail("input 1 '" + n.inputs[1] + "' (labels) " + shape_to_string(*ctx.input(1).shape) +
               " must have the shape of " + want);
    if (!l.known() && s.known()) l = s;
  }
  if (ctx.has_input(2)) {
    require_same_dtype(ctx, 0, 2);
    const ValueInfo& w = ctx.input(2);
    if (ctx.input_rank(2) != 1 || (w.shape->at(0).known() && x[1].known() && w.shape->at(0).value != x[1].value))
      ctx.fail("input 2 '" + n.inputs[2] + "' (weights) must be [C] = [" + shape_to_string({x[1]}).substr(1) +
               ", got " + shape_to_string(*w.shape));
  }
  ctx.set_output(0, t, reduction == "none" ? labels : Shape{});
  ctx.set_output(1, t, x);
}

// ---- ReduceMean, ReduceSum, ReduceMax --------------------------------------------

// The opset from which a reduction takes its axes as input 1 instead of an attribute.
int64_t axes_input_opset(const Node& n) { return n.op_type == "ReduceSum" ? 13 : 18; }

// The axes of a reduction node: attribute (before axes_input_opset) or input 1.
std::vector<int64_t> reduce_axes(const Node& n, const Tensor* axes_input) {
  if (n.has_attr("axes")) return n.attr_ints("axes");
  std::vector<int64_t> v;
  if (axes_input)
    for (int64_t k = 0; k < axes_input->numel(); ++k) v.push_back(axes_input->data<int64_t>()[k]);
  return v;
}

// Shape of a reduction of x over `axes` (keepdims / noop_with_empty_axes from the node);
// checks the axes against x's rank.
Shape reduced_shape(const InferContext& ctx, const Shape& x, const std::vector<int64_t>& axes) {
  const Node& n = ctx.node();
  for (const char* key : {"keepdims", "noop_with_empty_axes"}) {
    int64_t v = n.attr_int(key, 0);
    if (v != 0 && v != 1) ctx.fail(std::string("attribute '") + key + "' must be 0 or 1, got " + std::to_string(v));
  }
  if (axes.empty() && n.attr_int("noop_with_empty_axes", 0)) return x;
  const bool keepdims = n.attr_int("keepdims", 1) != 0;
  std::vector<bool> reduced(x.size(), axes.empty());
  for (int64_t a : axes) {
    size_t d = static_cast<size_t>(normalize_axis(ctx, "axes entry", a, static_cast<int64_t>(x.size())));
    if (reduced[d]) ctx.fail("axes " + dims_to_string(axes) + " repeat axis " + std::to_string(d));
    reduced[d] = true;
  }
  Shape y;
  for (size_t d = 0; d < x.size(); ++d) {
    if (!reduced[d])
      y.push_back(x[d]);
    else if (keepdims)
      y.push_back(Dim::of(1));
  }
  return y;
}

void reduce_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  DataType t = require_float(ctx, 0);
  (void)ctx.input_rank(0);
  const Shape& x = *ctx.input(0).shape;
  const int64_t opset = ctx.graph().opset("");
  const Tensor* axes_input = nullptr;
  const int64_t since = axes_input_opset(n);
  if (opset >= since) {
    if (n.has_attr("axes")) ctx.fail("attribute 'axes' is an input (input 1) since opset " + std::to_string(since));
    if (ctx.has_input(1)) {
      axes_input = ctx.input_constant(1);
      // Fed at run time: the shape is known once the plan is specialised on the value
      // (graph/infer.h shape_input_slots).
      if (!axes_input) return ctx.set_output(0, ValueInfo{t});
      if (axes_input->dtype() != DataType::Int64 || axes_input->rank() != 1)
        ctx.fail("input 1 '" + n.inputs[1] + "' (axes) must be a 1-D int64 tensor, got " +
                 dtype_name(axes_input->dtype()) + dims_to_string(axes_input->dims()));
    }
  } else {
    if (ctx.has_input(1))
      ctx.fail("axes as input 1 needs ai.onnx opset " + std::to_string(since) + " (the model imports " +
               std::to_string(opset) + ")");
    if (n.has_attr("noop_with_empty_axes"))
      ctx.fail("attribute 'noop_with_empty_axes' needs ai.onnx opset " + std::to_string(since));
  }
  ctx.set_output(0, t, reduced_shape(ctx, x, reduce_axes(n, axes_input)));
}

double reduce_flops(const Graph& g, const Node& n) {
  const ValueInfo& x = g.info(n.inputs[0]);
  if (!x.shape || !shape_is_known(*x.shape)) return 0;
  return static_cast<double>(element_count(shape_dims(*x.shape)));  // one add per element
}

// Where each element of x lands in the reduced y: y offset of x element k, and the
// number of x elements averaged into one y element. y is in keepdims layout (size 1
// on reduced dims); dropping them leaves the same order. noop: y = x.
struct ReduceMap {
  std::vector<int64_t> offsets;  // per x element
  int64_t count = 1;
};
ReduceMap reduce_map(const std::vector<int64_t>& xd, const std::vector<int64_t>& axes, bool noop_with_empty_axes) {
  const size_t r = xd.size();
  ReduceMap m;
  m.offsets.resize(static_cast<size_t>(element_count(xd)));
  std::vector<bool> reduced(r, axes.empty() && !noop_with_empty_axes);
  for (int64_t a : axes) reduced[static_cast<size_t>(a < 0 ? a + static_cast<int64_t>(r) : a)] = true;
  std::vector<int64_t> ys(r, 0);
  for (size_t d = r, stride = 1; d-- > 0;) {
    if (reduced[d]) {
      m.count *= xd[d];
    } else {
      ys[d] = static_cast<int64_t>(stride);
      stride *= static_cast<size_t>(xd[d]);
    }
  }
  std::vector<int64_t> idx(r, 0);
  for (size_t k = 0; k < m.offsets.size(); ++k) {
    int64_t o = 0;
    for (size_t d = 0; d < r; ++d) o += idx[d] * ys[d];
    m.offsets[k] = o;
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < xd[d]) break;
      idx[d] = 0;
    }
  }
  return m;
}

enum class Reduction { Mean, Sum, Max };

// y = mean / sum / max of x over the axes; sums accumulate in double. A max keeps the
// first NaN it meets; a max over nothing is -inf.
template <typename T, Reduction kind>
void reduce_reference(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const std::vector<int64_t> axes = reduce_axes(ctx.node, ctx.has_input(1) ? &ctx.in(1) : nullptr);
  const ReduceMap m = reduce_map(x.dims(), axes, ctx.node.attr_int("noop_with_empty_axes", 0) != 0);
  const double init = kind == Reduction::Max ? -INFINITY : 0.0;
  std::vector<double> acc(static_cast<size_t>(y.numel()), init);
  const T* xp = x.data<T>();
  for (size_t k = 0; k < m.offsets.size(); ++k) {
    double& a = acc[static_cast<size_t>(m.offsets[k])];
    const double v = static_cast<double>(xp[k]);
    if constexpr (kind == Reduction::Max) {
      if (v > a || (std::isnan(v) && !std::isnan(a))) a = v;
    } else {
      a += v;
    }
  }
  const double div = kind == Reduction::Mean ? static_cast<double>(m.count) : 1.0;
  T* yp = y.data<T>();
  for (size_t k = 0; k < acc.size(); ++k) yp[k] = static_cast<T>(acc[k] / div);
}

// ---- backward ops -----------------------------------------------------------------

// Input j must have the shape of input i where both dims are known.
void require_same_shape(const InferContext& ctx, size_t i, size_t j, const std::string& what) {
  const Shape& a = *ctx.input(i).shape;
  const Shape& b = *ctx.input(j).shape;
  bool ok = a.size() == b.size();
  for (size_t k = 0; ok && k < a.size(); ++k) ok = !(a[k].known() && b[k].known() && a[k].value != b[k].value);
  if (!ok)
    ctx.fail("input " + std::to_string(j) + " '" + ctx.node().inputs[j] + "' " + shape_to_string(b) +
             " must have the shape of " + what + " " + shape_to_string(a));
}

// SoftmaxGrad / LogSoftmaxGrad (dY, Y): one dtype, one shape; dX is typed like Y.
void softmax_grad_infer(InferContext& ctx) {
  require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  (void)ctx.input_rank(0);
  (void)ctx.input_rank(1);
  require_same_shape(ctx, 0, 1, "dY");
  const int64_t r = ctx.input_rank(1);
  if (r == 0) ctx.fail("input 1 '" + ctx.node().inputs[1] + "' is a scalar; need rank >= 1");
  normalize_axis(ctx, "attribute 'axis'", ctx.node().attr_int("axis", -1), r);
  ctx.set_output(0, ctx.input(1));
}

// dX along the axis from dY and the forward output Y (double accumulation).
template <typename T, bool kLog>
void softmax_grad_reference(KernelContext& ctx) {
  const Tensor& y = ctx.in(1);
  int64_t axis = ctx.node.attr_int("axis", -1);
  if (axis < 0) axis += y.rank();
  const AxisSplit s = split_at(y.dims(), static_cast<size_t>(axis));
  const T* dy = ctx.in(0).data<T>();
  const T* yp = y.data<T>();
  T* dx = ctx.out(0).data<T>();
  for (int64_t o = 0; o < s.outer; ++o)
    for (int64_t i = 0; i < s.inner; ++i) {
      const int64_t base = o * s.len * s.inner + i;
      double sum = 0;  // softmax: sum(dY * Y); log_softmax: sum(dY)
      for (int64_t c = 0; c < s.len; ++c) {
        const int64_t k = base + c * s.inner;
        sum += kLog ? static_cast<double>(dy[k]) : static_cast<double>(dy[k]) * yp[k];
      }
      for (int64_t c = 0; c < s.len; ++c) {
        const int64_t k = base + c * s.inner;
        const double v = kLog ? dy[k] - std::exp(static_cast<double>(yp[k])) * sum : yp[k] * (dy[k] - sum);
        dx[k] = static_cast<T>(v);
      }
    }
}

// SoftmaxCrossEntropyLossGrad(dLoss, log_prob, labels, weights?)
void sce_grad_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  const std::string reduction = n.attr_string("reduction", "mean");
  if (reduction != "none" && reduction != "mean" && reduction != "sum")
    ctx.fail("attribute 'reduction' = '" + reduction + "' must be none, mean or sum");
  const Shape& lp = *ctx.input(1).shape;
  if (ctx.input_rank(1) < 2)
    ctx.fail("input 1 '" + n.inputs[1] + "' (log_prob) must be [N,C] or [N,C,d1,...], got " + shape_to_string(lp));
  DataType lt = ctx.input(2).dtype;
  if (lt != DataType::Int64 && lt != DataType::Int32)
    ctx.fail("input 2 '" + n.inputs[2] + "' (labels) must be int64 or int32, got " + dtype_name(lt));
  Shape want{lp[0]};
  for (size_t d = 2; d < lp.size(); ++d) want.push_back(lp[d]);
  auto matches = [](const Shape& a, const Shape& b) {
    bool ok = a.size() == b.size();
    for (size_t k = 0; ok && k < a.size(); ++k) ok = !(a[k].known() && b[k].known() && a[k].value != b[k].value);
    return ok;
  };
  const Shape& labels = *ctx.input(2).shape;
  (void)ctx.input_rank(2);
  if (!matches(labels, want))
    ctx.fail("input 2 '" + n.inputs[2] + "' (labels) " + shape_to_string(labels) + " must be " + shape_to_string(want) +
             " (log_prob " + shape_to_string(lp) + " without C)");
  const Shape& dloss = *ctx.input(0).shape;
  (void)ctx.input_rank(0);
  const Shape want_dloss = reduction == "none" ? want : Shape{};
  if (!matches(dloss, want_dloss))
    ctx.fail("input 0 '" + n.inputs[0] + "' (dLoss) " + shape_to_string(dloss) + " must be " +
             shape_to_string(want_dloss) + " for reduction '" + reduction + "'");
  if (ctx.has_input(3)) {
    require_same_dtype(ctx, 0, 3);
    const Shape& w = *ctx.input(3).shape;
    if (ctx.input_rank(3) != 1 || !matches(w, Shape{lp[1]}))
      ctx.fail("input 3 '" + n.inputs[3] + "' (weights) " + shape_to_string(w) +
               " must be [C] = " + shape_to_string({lp[1]}));
  }
  ctx.set_output(0, ctx.input(1));
}

// ReduceMeanGrad(dY, X; axes, keepdims, noop_with_empty_axes) -> dX typed like X.
void reduce_mean_grad_infer(InferContext& ctx) {
  require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  (void)ctx.input_rank(1);
  const Shape& x = *ctx.input(1).shape;
  const std::vector<int64_t> axes = ctx.node().attr_ints("axes");
  for (int64_t a : axes)
    if (a < -static_cast<int64_t>(x.size()) || a >= static_cast<int64_t>(x.size()))
      ctx.fail("attribute 'axes' " + dims_to_string(axes) + " is out of range for input 1 '" + ctx.node().inputs[1] +
               "' " + shape_to_string(x));
  const Shape want = reduced_shape(ctx, x, axes);
  const Shape& dy = *ctx.input(0).shape;
  (void)ctx.input_rank(0);
  bool ok = dy.size() == want.size();
  for (size_t k = 0; ok && k < dy.size(); ++k) ok = !(dy[k].known() && want[k].known() && dy[k].value != want[k].value);
  if (!ok)
    ctx.fail("input 0 '" + ctx.node().inputs[0] + "' (dY) " + shape_to_string(dy) + " must be " +
             shape_to_string(want) + ", the reduction of input 1 '" + ctx.node().inputs[1] + "' " + shape_to_string(x));
  ctx.set_output(0, ctx.input(1));
}

// ReduceMaxGrad(dY, X, Y): as ReduceMeanGrad, and Y must have dY's shape.
void reduce_max_grad_infer(InferContext& ctx) {
  reduce_mean_grad_infer(ctx);
  require_same_dtype(ctx, 0, 2);
  require_same_shape(ctx, 0, 2, "dY");
}

// ReduceMaxGrad: dx[k] = dy[o] / ties[o] where x[k] == y[o] (o = offset(k)), else 0;
// ties[o] counts the elements of x equal to y[o] (PyTorch's amax splits equally).
template <typename T>
void reduce_max_grad_reference(KernelContext& ctx) {
  const ReduceMap m =
      reduce_map(ctx.in(1).dims(), ctx.node.attr_ints("axes"), ctx.node.attr_int("noop_with_empty_axes", 0) != 0);
  const T* dy = ctx.in(0).data<T>();
  const T* x = ctx.in(1).data<T>();
  const T* y = ctx.in(2).data<T>();
  std::vector<int64_t> ties(static_cast<size_t>(ctx.in(2).numel()), 0);
  for (size_t k = 0; k < m.offsets.size(); ++k)
    if (x[k] == y[m.offsets[k]]) ++ties[static_cast<size_t>(m.offsets[k])];
  T* dx = ctx.out(0).data<T>();
  for (size_t k = 0; k < m.offsets.size(); ++k) {
    const int64_t o = m.offsets[k];
    dx[k] = x[k] == y[o]
                ? static_cast<T>(static_cast<double>(dy[o]) / static_cast<double>(ties[static_cast<size_t>(o)]))
                : T(0);
  }
}

// ReduceMeanGrad: dx[k] = dy[offset(k)] / count; ReduceSumGrad: dx[k] = dy[offset(k)].
template <typename T, bool mean>
void reduce_broadcast_grad_reference(KernelContext& ctx) {
  const ReduceMap m =
      reduce_map(ctx.in(1).dims(), ctx.node.attr_ints("axes"), ctx.node.attr_int("noop_with_empty_axes", 0) != 0);
  const T* dy = ctx.in(0).data<T>();
  T* dx = ctx.out(0).data<T>();
  for (size_t k = 0; k < m.offsets.size(); ++k)
    dx[k] = static_cast<T>(static_cast<double>(dy[m.offsets[k]]) / (mean ? static_cast<double>(m.count) : 1.0));
}

}  // namespace

void register_softmax_loss(Registry& r) {
  r.schemas.add(OpSchema{"", "Softmax", 1, 1, 1, 1, 13, softmax_infer, nullptr, {"axis"}});
  r.schemas.add(OpSchema{"", "LogSoftmax", 1, 1, 1, 1, 13, softmax_infer, nullptr, {"axis"}});
  r.schemas.add(
      OpSchema{"", "SoftmaxCrossEntropyLoss", 2, 3, 1, 2, 12, sce_infer, nullptr, {"ignore_index", "reduction"}});
  // 13: ReduceMean/ReduceMax take axes as an attribute, ReduceSum as input 1; the
  // opset 18 form of ReduceMean/ReduceMax (axes input) is chosen by the model's opset
  for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax"})
    r.schemas.add(
        OpSchema{"", op, 1, 2, 1, 1, 13, reduce_infer, reduce_flops, {"axes", "keepdims", "noop_with_empty_axes"}});
  r.kernels.add("reference", "", "Softmax", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { softmax_reference<decltype(tag), false>(ctx); });
  });
  r.kernels.add("reference", "", "LogSoftmax", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { softmax_reference<decltype(tag), true>(ctx); });
  });
  r.kernels.add("reference", "", "SoftmaxCrossEntropyLoss", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { softmax_loops::sce_kernel<decltype(tag), false>(ctx); });
  });
  r.kernels.add("reference", "", "ReduceMean", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { reduce_reference<decltype(tag), Reduction::Mean>(ctx); });
  });
  r.kernels.add("reference", "", "ReduceSum", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { reduce_reference<decltype(tag), Reduction::Sum>(ctx); });
  });
  r.kernels.add("reference", "", "ReduceMax", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { reduce_reference<decltype(tag), Reduction::Max>(ctx); });
  });

  r.schemas.add(OpSchema{kTrainrtDomain, "SoftmaxGrad", 2, 2, 1, 1, 1, softmax_grad_infer, nullptr, {"axis"}});
  r.schemas.add(OpSchema{kTrainrtDomain, "LogSoftmaxGrad", 2, 2, 1, 1, 1, softmax_grad_infer, nullptr, {"axis"}});
  r.schemas.add(OpSchema{kTrainrtDomain,
                         "SoftmaxCrossEntropyLossGrad",
                         3,
                         4,
                         1,
                         1,
                         1,
                         sce_grad_infer,
                         nullptr,
                         {"ignore_index", "reduction"}});
  for (const char* op : {"ReduceMeanGrad", "ReduceSumGrad"})
    r.schemas.add(OpSchema{kTrainrtDomain,
                           op,
                           2,
                           2,
                           1,
                           1,
                           1,
                           reduce_mean_grad_infer,
                           nullptr,
                           {"axes", "keepdims", "noop_with_empty_axes"}});
  r.schemas.add(OpSchema{kTrainrtDomain,
                         "ReduceMaxGrad",
                         3,
                         3,
                         1,
                         1,
                         1,
                         reduce_max_grad_infer,
                         nullptr,
                         {"axes", "keepdims", "noop_with_empty_axes"}});
  r.kernels.add("reference", kTrainrtDomain, "SoftmaxGrad", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { softmax_grad_reference<decltype(tag), false>(ctx); });
  });
  r.kernels.add("reference", kTrainrtDomain, "LogSoftmaxGrad", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { softmax_grad_reference<decltype(tag), true>(ctx); });
  });
  r.kernels.add("reference", kTrainrtDomain, "SoftmaxCrossEntropyLossGrad", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { softmax_loops::sce_grad_kernel<decltype(tag), false>(ctx); });
  });
  r.kernels.add("reference", kTrainrtDomain, "ReduceMeanGrad", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { reduce_broadcast_grad_reference<decltype(tag), true>(ctx); });
  });
  r.kernels.add("reference", kTrainrtDomain, "ReduceSumGrad", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { reduce_broadcast_grad_reference<decltype(tag), false>(ctx); });
  });
  r.kernels.add("reference", kTrainrtDomain, "ReduceMaxGrad", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { reduce_max_grad_reference<decltype(tag)>(ctx); });
  });
}

}  // namespace trainrt
