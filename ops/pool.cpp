// Pooling: MaxPool (opset 12 semantics), AveragePool (opset 19: opset 11's with
// dilations), LpPool (opset 18: opset 11's with ceil_mode and dilations),
// GlobalAveragePool, GlobalMaxPool.
//
//   MaxPool      x: N,C,spatial... -> y: N,C,out...  (+ Indices: int64, same shape)
//   AveragePool  x: N,C,spatial... -> y: N,C,out...
//   LpPool       x: N,C,spatial... -> y: N,C,out...: (sum of |x|^p over the window)^(1/p),
//                p >= 1 (default 2); padding adds 0 (ops/pool_loops.h)
//   GlobalAveragePool, GlobalMaxPool  x: N,C,spatial... -> y: N,C,1,...,1 (any number
//                of spatial dims: a plane is all of them)
//
// Windowed pools take 1, 2 or 3 spatial dims; the kernels view every input as
// N*C, D,H,W with leading size-1 dims, so one set of loops serves all three.
// Geometry (pads, strides, dilations, auto_pad, ceil_mode) is ops/core/window.h.
//
// MaxPool ignores padded positions; Indices are ONNX's flattened indices into x
// (they include the N and C offsets, never the padding): row-major for
// storage_order 0, column-major (d + h*D + w*D*H) for storage_order 1.
// AveragePool divides by the number of the window's taps on real input elements
// (count_include_pad 0) or by its taps inside input plus pads (count_include_pad 1; the
// taps of a ceil_mode window past the end pad are not counted); its taps are dilations
// apart (opset 19's attribute, taken whatever opset the model imports), and a dilated
// window whose taps all miss the input averages nothing: NaN (count_include_pad 0).
// FLOPs: one per window element and output (a compare or an add); Global: one per input.
//
// Backward ops (ai.trainrt), attributes copied from the forward node:
//   MaxPoolGrad(dY, X) -> dX      dY goes to the argmax of its window, recomputed from X
//                                 with the forward's tie rule (first maximum in window order)
//   AveragePoolGrad(dY, X) -> dX  dY / divisor to every real element of its window
//   GlobalAveragePoolGrad(dY, X) -> dX   dY / plane size to every element of the plane
//   GlobalMaxPoolGrad(dY, X) -> dX       dY to the plane's first maximum, 0 elsewhere
//   LpPoolGrad(dY, X, Y) -> dX   dY * sign(x) |x|^(p-1) / Y^(p-1) to every real element of
//                                its window (nothing from a window whose Y is 0)
#include <algorithm>
#include <limits>
#include <string>
#include <vector>

#include "ops/core/common.h"
#include "ops/core/pool_geometry.h"
#include "ops/core/register_all.h"
#include "ops/core/window.h"
#include "ops/pool_loops.h"

namespace trainrt {

namespace {

// MaxPool also takes 8-bit integers (ONNX opset 12); AveragePool is float only.
template <typename F>
void dispatch_maxpool(DataType t, F&& f) {
  switch (t) {
    case DataType::UInt8:
      f(uint8_t{});
      break;
    case DataType::Int8:
      f(int8_t{});
      break;
    default:
      dispatch_float(t, f);
  }
}

// Window read from a pooling node; `where` is "" inside kernels (the executor adds the node).
Window pool_window(const Node& n, size_t spatial, const std::string& where) {
  if (!n.has_attr("kernel_shape")) throw_bad_input(where, "attribute 'kernel_shape' is required");
  std::vector<int64_t> k = n.attr_ints("kernel_shape");
  if (k.size() != spatial)
    throw_bad_input(where, "attribute 'kernel_shape' has " + std::to_string(k.size()) + " values, expected " +
                               std::to_string(spatial) + " (one per spatial dim of the input)");
  return read_window(n, spatial, std::move(k), where, WindowOptions{.ceil_mode = true, .pad_below_kernel = true});
}

// Checks pooled input X (input xi) and the attributes; returns Y's shape. Shared by
// the forward pools and their Grad ops (whose X must be float: no gradient of int8).
Shape pool_output_shape(InferContext& ctx, size_t xi, bool is_max, bool allow_int) {
  const Node& n = ctx.node();
  const DataType t = ctx.input(xi).dtype;
  if (!(allow_int && (t == DataType::UInt8 || t == DataType::Int8))) require_float(ctx, xi);
  const int64_t rank = ctx.input_rank(xi);
  if (rank < 3)
    ctx.fail("input " + std::to_string(xi) + " '" + n.inputs[xi] + "' must have rank >= 3 (N,C,spatial...), got rank " +
             std::to_string(rank));
  if (rank > 5)
    throw_unsupported(ctx.where(),
                      "pooling over " + std::to_string(rank - 2) + " spatial dims is not implemented (1 to 3 are)");
  const size_t sp = static_cast<size_t>(rank - 2);
  Window win = pool_window(n, sp, ctx.where());
  if (is_max) {
    int64_t order = n.attr_int("storage_order", 0);
    if (order != 0 && order != 1) ctx.fail("attribute 'storage_order' must be 0 or 1, got " + std::to_string(order));
  } else {
    int64_t cip = n.attr_int("count_include_pad", 0);
    if (cip != 0 && cip != 1) ctx.fail("attribute 'count_include_pad' must be 0 or 1, got " + std::to_string(cip));
  }
  const Shape& x = *ctx.input(xi).shape;
  Shape y{x[0], x[1]};
  for (size_t i = 0; i < sp; ++i) {
    const Dim& in = x[2 + i];
    y.push_back(in.known() ? Dim::of(resolve_window_dim(win, i, in.value, ctx.where())) : Dim{});
  }
  return y;
}

void pool_infer(InferContext& ctx, bool is_max) {
  const Shape y = pool_output_shape(ctx, 0, is_max, /*allow_int=*/is_max);
  ctx.set_output(0, ctx.input(0).dtype, y);
  if (is_max) ctx.set_output(1, DataType::Int64, y);
}

// Input 0 (dY) of a pooling Grad op must have the forward output's shape `y` and X's dtype.
void check_pool_dy(InferContext& ctx, const Shape& y, const char* forward) {
  const Node& n = ctx.node();
  require_same_dtype(ctx, 0, 1);
  const ValueInfo& dy = ctx.input(0);
  bool ok = dy.shape && dy.shape->size() == y.size();
  for (size_t i = 0; ok && i < y.size(); ++i)
    ok = !((*dy.shape)[i].known() && y[i].known() && (*dy.shape)[i].value != y[i].value);
  if (!ok)
    ctx.fail("input 0 '" + n.inputs[0] + "' (dY) has shape " + shape_to_string(dy.shape.value_or(Shape{})) +
             " but the forward " + forward + "'s output is " + shape_to_string(y));
}

// MaxPoolGrad / AveragePoolGrad (dY, X) -> dX: dX is typed like X.
void pool_grad_infer(InferContext& ctx, bool is_max) {
  const Shape y = pool_output_shape(ctx, 1, is_max, /*allow_int=*/false);
  check_pool_dy(ctx, y, is_max ? "MaxPool" : "AveragePool");
  ctx.set_output(0, ctx.input(1));
}

// LpPool's p: an integer >= 1.
void check_lp(InferContext& ctx) {
  const int64_t p = ctx.node().attr_int("p", 2);
  if (p < 1) ctx.fail("attribute 'p' must be >= 1, got " + std::to_string(p));
}

void lp_pool_infer(InferContext& ctx) {
  check_lp(ctx);
  ctx.set_output(0, ctx.input(0).dtype, pool_output_shape(ctx, 0, /*is_max=*/false, /*allow_int=*/false));
}

// LpPoolGrad (dY, X, Y) -> dX: Y is the forward's output, shaped like dY.
void lp_pool_grad_infer(InferContext& ctx) {
  check_lp(ctx);
  const Shape y = pool_output_shape(ctx, 1, /*is_max=*/false, /*allow_int=*/false);
  check_pool_dy(ctx, y, "LpPool");
  require_same_dtype(ctx, 2, 1);
  const ValueInfo& yv = ctx.input(2);
  if (yv.shape && shape_is_known(*yv.shape) && shape_is_known(y) && shape_dims(*yv.shape) != shape_dims(y))
    ctx.fail("input 2 '" + ctx.node().inputs[2] + "' (Y) has shape " + shape_to_string(*yv.shape) +
             " but the forward LpPool's output is " + shape_to_string(y));
  ctx.set_output(0, ctx.input(1));
}

double pool_flops(const Graph& g, const Node& n) {
  const ValueInfo* y = g.find_info(n.outputs[0]);
  if (!y || !y->shape || !shape_is_known(*y->shape)) return 0;
  double f = static_cast<double>(element_count(shape_dims(*y->shape)));
  for (int64_t k : n.attr_ints("kernel_shape")) f *= static_cast<double>(k);
  return f;
}

// x: P,D,H,W -> y: P,Do,Ho,Wo (P = N*C); idx (optional) gets flattened argmax positions.
template <typename T>
void maxpool_reference(const Pool3& g, const T* x, T* y, int64_t* idx, bool column_major) {
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2];
  for (int64_t p = 0; p < g.planes; ++p)
    for (int64_t od = 0; od < g.out[0]; ++od)
      for (int64_t oh = 0; oh < g.out[1]; ++oh)
        for (int64_t ow = 0; ow < g.out[2]; ++ow) {
          const T* plane = x + p * D * H * W;
          const Argmax m = window_argmax(g, plane, od, oh, ow);
          const int64_t o = ((p * g.out[0] + od) * g.out[1] + oh) * g.out[2] + ow;
          y[o] = m.d < 0 ? std::numeric_limits<T>::lowest() : plane[(m.d * H + m.h) * W + m.w];
          if (idx) idx[o] = p * D * H * W + (column_major ? m.d + m.h * D + m.w * D * H : (m.d * H + m.h) * W + m.w);
        }
}

// dy: P,Do,Ho,Wo, x: P,D,H,W -> dx: P,D,H,W. Each dY goes to its window's argmax
// (recomputed from x); overlapping windows that share a maximum add up.
template <typename T>
void maxpool_grad_reference(const Pool3& g, const T* dy, const T* x, T* dx) {
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2];
  std::vector<double> acc(static_cast<size_t>(g.planes * D * H * W), 0.0);
  for (int64_t p = 0; p < g.planes; ++p)
    for (int64_t od = 0; od < g.out[0]; ++od)
      for (int64_t oh = 0; oh < g.out[1]; ++oh)
        for (int64_t ow = 0; ow < g.out[2]; ++ow) {
          const Argmax m = window_argmax(g, x + p * D * H * W, od, oh, ow);
          if (m.d < 0) continue;
          acc[static_cast<size_t>(((p * D + m.d) * H + m.h) * W + m.w)] +=
              static_cast<double>(dy[((p * g.out[0] + od) * g.out[1] + oh) * g.out[2] + ow]);
        }
  for (size_t i = 0; i < acc.size(); ++i) dx[i] = static_cast<T>(acc[i]);
}

template <typename T>
void averagepool_reference(const Pool3& g, const T* x, T* y, bool count_include_pad) {
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2];
  for (int64_t p = 0; p < g.planes; ++p)
    for (int64_t od = 0; od < g.out[0]; ++od)
      for (int64_t oh = 0; oh < g.out[1]; ++oh)
        for (int64_t ow = 0; ow < g.out[2]; ++ow) {
          double sum = 0;
          for (int64_t a = 0; a < g.k[0]; ++a) {
            const int64_t id = od * g.s[0] - g.pb[0] + a * g.d[0];
            if (id < 0 || id >= D) continue;
            for (int64_t b = 0; b < g.k[1]; ++b) {
              const int64_t ih = oh * g.s[1] - g.pb[1] + b * g.d[1];
              if (ih < 0 || ih >= H) continue;
              for (int64_t c = 0; c < g.k[2]; ++c) {
                const int64_t iw = ow * g.s[2] - g.pb[2] + c * g.d[2];
                if (iw < 0 || iw >= W) continue;
                sum += static_cast<double>(x[((p * D + id) * H + ih) * W + iw]);
              }
            }
          }
          const int64_t o[3] = {od, oh, ow};
          const double count = static_cast<double>(average_divisor(g, o[0], o[1], o[2], count_include_pad));
          y[((p * g.out[0] + od) * g.out[1] + oh) * g.out[2] + ow] = static_cast<T>(sum / count);
        }
}

// dy: P,Do,Ho,Wo -> dx: P,D,H,W. Every real element of a window gets dY / divisor.
template <typename T>
void averagepool_grad_reference(const Pool3& g, const T* dy, T* dx, bool count_include_pad) {
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2];
  std::vector<double> acc(static_cast<size_t>(g.planes * D * H * W), 0.0);
  for (int64_t p = 0; p < g.planes; ++p)
    for (int64_t od = 0; od < g.out[0]; ++od)
      for (int64_t oh = 0; oh < g.out[1]; ++oh)
        for (int64_t ow = 0; ow < g.out[2]; ++ow) {
          const int64_t o[3] = {od, oh, ow};
          const double share = static_cast<double>(dy[((p * g.out[0] + od) * g.out[1] + oh) * g.out[2] + ow]) /
                               static_cast<double>(average_divisor(g, o[0], o[1], o[2], count_include_pad));
          for (int64_t a = 0; a < g.k[0]; ++a) {
            const int64_t id = od * g.s[0] - g.pb[0] + a * g.d[0];
            if (id < 0 || id >= D) continue;
            for (int64_t b = 0; b < g.k[1]; ++b) {
              const int64_t ih = oh * g.s[1] - g.pb[1] + b * g.d[1];
              if (ih < 0 || ih >= H) continue;
              for (int64_t c = 0; c < g.k[2]; ++c) {
                const int64_t iw = ow * g.s[2] - g.pb[2] + c * g.d[2];
                if (iw < 0 || iw >= W) continue;
                acc[static_cast<size_t>(((p * D + id) * H + ih) * W + iw)] += share;
              }
            }
          }
        }
  for (size_t i = 0; i < acc.size(); ++i) dx[i] = static_cast<T>(acc[i]);
}

void maxpool_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const Pool3 g = pool_geometry(ctx.node, x, y);
  int64_t* idx = ctx.has_output(1) ? ctx.out(1).data<int64_t>() : nullptr;
  const bool column_major = ctx.node.attr_int("storage_order", 0) == 1;
  dispatch_maxpool(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    maxpool_reference<T>(g, x.data<T>(), y.data<T>(), idx, column_major);
  });
}

void averagepool_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const Pool3 g = pool_geometry(ctx.node, x, y);
  const bool include_pad = ctx.node.attr_int("count_include_pad", 0) == 1;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    averagepool_reference<T>(g, x.data<T>(), y.data<T>(), include_pad);
  });
}

void maxpool_grad_kernel(KernelContext& ctx) {
  const Pool3 g = pool_geometry(ctx.node, ctx.in(1), ctx.in(0));
  dispatch_float(ctx.in(1).dtype(), [&](auto tag) {
    using T = decltype(tag);
    maxpool_grad_reference<T>(g, ctx.in(0).data<T>(), ctx.in(1).data<T>(), ctx.out(0).data<T>());
  });
}

void averagepool_grad_kernel(KernelContext& ctx) {
  const Pool3 g = pool_geometry(ctx.node, ctx.in(1), ctx.in(0));
  const bool include_pad = ctx.node.attr_int("count_include_pad", 0) == 1;
  dispatch_float(ctx.in(1).dtype(), [&](auto tag) {
    using T = decltype(tag);
    averagepool_grad_reference<T>(g, ctx.in(0).data<T>(), ctx.out(0).data<T>(), include_pad);
  });
}

// GlobalAveragePool and GlobalMaxPool: x: N,C,spatial... -> y: N,C,1,...
void global_pool_infer(InferContext& ctx) {
  const DataType t = require_float(ctx, 0);
  const int64_t rank = ctx.input_rank(0);
  if (rank < 3)
    ctx.fail("input 0 '" + ctx.node().inputs[0] + "' must have rank >= 3 (N,C,spatial...), got rank " +
             std::to_string(rank));
  Shape y = *ctx.input(0).shape;
  for (size_t i = 2; i < y.size(); ++i) y[i] = Dim::of(1);
  ctx.set_output(0, t, y);
}

// GlobalAveragePoolGrad / GlobalMaxPoolGrad (dY: N,C,1,..., X: N,C,spatial...) -> dX: like X.
void global_pool_grad_infer(InferContext& ctx, const char* forward) {
  require_float(ctx, 1);
  const int64_t rank = ctx.input_rank(1);
  if (rank < 3)
    ctx.fail("input 1 '" + ctx.node().inputs[1] + "' must have rank >= 3 (N,C,spatial...), got rank " +
             std::to_string(rank));
  Shape y = *ctx.input(1).shape;
  for (size_t i = 2; i < y.size(); ++i) y[i] = Dim::of(1);
  check_pool_dy(ctx, y, forward);
  ctx.set_output(0, ctx.input(1));
}

double global_average_pool_flops(const Graph& g, const Node& n) {
  const ValueInfo* x = g.find_info(n.inputs[0]);
  if (!x || !x->shape || !shape_is_known(*x->shape)) return 0;
  return static_cast<double>(element_count(shape_dims(*x->shape)));
}

// x: N,C,spatial... -> y: N,C,1,...: the mean of each N,C plane.
template <typename T>
void global_average_pool_reference(const Tensor& x, Tensor& y) {
  const int64_t planes = x.dims()[0] * x.dims()[1];
  const int64_t size = x.numel() / planes;
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  for (int64_t p = 0; p < planes; ++p) {
    double sum = 0;
    for (int64_t i = 0; i < size; ++i) sum += static_cast<double>(xp[p * size + i]);
    yp[p] = static_cast<T>(sum / static_cast<double>(size));
  }
}

// dy: N,C,1,... -> dx: N,C,spatial...: each element of plane p gets dy[p] / plane size.
template <typename T>
void global_average_pool_grad_reference(const Tensor& dy, Tensor& dx) {
  const int64_t planes = dx.dims()[0] * dx.dims()[1];
  const int64_t size = planes == 0 ? 0 : dx.numel() / planes;
  const T* dyp = dy.data<T>();
  T* dxp = dx.data<T>();
  for (int64_t p = 0; p < planes; ++p) {
    const T share = static_cast<T>(static_cast<double>(dyp[p]) / static_cast<double>(size));
    for (int64_t i = 0; i < size; ++i) dxp[p * size + i] = share;
  }
}

// Position of the first maximum of plane p (size elements); NaN-free planes assumed
// as in window_argmax (a NaN never compares greater).
template <typename T>
int64_t plane_argmax(const T* plane, int64_t size) {
  int64_t at = 0;
  for (int64_t i = 1; i < size; ++i)
    if (plane[i] > plane[at]) at = i;
  return at;
}

// x: N,C,spatial... -> y: N,C,1,...: the maximum of each N,C plane.
template <typename T>
void global_max_pool_reference(const Tensor& x, Tensor& y) {
  const int64_t planes = x.dims()[0] * x.dims()[1];
  const int64_t size = planes == 0 ? 0 : x.numel() / planes;
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  for (int64_t p = 0; p < planes; ++p) yp[p] = xp[p * size + plane_argmax(xp + p * size, size)];
}

// dy: N,C,1,..., x: N,C,spatial... -> dx: like x: dy[p] at plane p's first maximum.
template <typename T>
void global_max_pool_grad_reference(const Tensor& dy, const Tensor& x, Tensor& dx) {
  const int64_t planes = dx.dims()[0] * dx.dims()[1];
  const int64_t size = planes == 0 ? 0 : dx.numel() / planes;
  const T* dyp = dy.data<T>();
  const T* xp = x.data<T>();
  T* dxp = dx.data<T>();
  for (int64_t p = 0; p < planes; ++p) {
    std::fill(dxp + p * size, dxp + (p + 1) * size, T{0});
    dxp[p * size + plane_argmax(xp + p * size, size)] = dyp[p];
  }
}

void global_average_pool_kernel(KernelContext& ctx) {
  dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
    using T = decltype(tag);
    global_average_pool_reference<T>(ctx.in(0), ctx.out(0));
  });
}

}  // namespace

Pool3 pool_geometry(const Node& n, const Tensor& x, const Tensor& y) {
  const size_t sp = static_cast<size_t>(x.rank() - 2);
  Window w = pool_window(n, sp, "");
  Pool3 g;
  g.planes = x.dims()[0] * x.dims()[1];
  for (size_t i = 0; i < sp; ++i) {
    const size_t j = 3 - sp + i;  // right-align: a 2-D pool uses H,W
    g.in[j] = x.dims()[2 + i];
    g.out[j] = resolve_window_dim(w, i, g.in[j], "");
    TRAINRT_ASSERT(g.out[j] == y.dims()[2 + i]);
    g.k[j] = w.kernel[i];
    g.s[j] = w.strides[i];
    g.d[j] = w.dilations[i];
    g.pb[j] = w.pads[i];
    g.pe[j] = w.pads[i + sp];
  }
  return g;
}

void register_pool(Registry& r) {
  OpSchema max;
  max.op_type = "MaxPool";
  max.max_outputs = 2;
  max.since_version = 12;
  max.infer = [](InferContext& ctx) { pool_infer(ctx, true); };
  max.flops = pool_flops;
  max.attributes = {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"};
  r.schemas.add(std::move(max));
  r.kernels.add("reference", "", "MaxPool", maxpool_kernel);

  OpSchema avg;
  avg.op_type = "AveragePool";
  avg.since_version = 11;
  avg.infer = [](InferContext& ctx) { pool_infer(ctx, false); };
  avg.flops = pool_flops;
  avg.attributes = {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"};
  r.schemas.add(std::move(avg));
  r.kernels.add("reference", "", "AveragePool", averagepool_kernel);

  OpSchema lp;
  lp.op_type = "LpPool";
  lp.since_version = 11;
  lp.infer = lp_pool_infer;
  lp.flops = pool_flops;
  lp.attributes = {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "p", "pads", "strides"};
  r.schemas.add(std::move(lp));
  r.kernels.add("reference", "", "LpPool", lp_pool_loops::forward_kernel<false>);

  OpSchema global;
  global.op_type = "GlobalAveragePool";
  global.since_version = 1;
  global.infer = global_pool_infer;
  global.flops = global_average_pool_flops;
  OpSchema global_max = global;
  r.schemas.add(std::move(global));
  r.kernels.add("reference", "", "GlobalAveragePool", global_average_pool_kernel);
  global_max.op_type = "GlobalMaxPool";
  r.schemas.add(std::move(global_max));
  r.kernels.add("reference", "", "GlobalMaxPool", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
      using T = decltype(tag);
      global_max_pool_reference<T>(ctx.in(0), ctx.out(0));
    });
  });

  // Backward ops (ai.trainrt): (dY, X) -> dX with the forward node's attributes.
  auto grad_schema = [](const char* op, ShapeRule infer, std::vector<std::string> attributes) {
    OpSchema s;
    s.domain = kTrainrtDomain;
    s.op_type = op;
    s.min_inputs = s.max_inputs = 2;
    s.infer = std::move(infer);
    s.attributes = std::move(attributes);
    return s;
  };
  r.schemas.add(
      grad_schema("MaxPoolGrad", [](InferContext& ctx) { pool_grad_infer(ctx, true); },
                  {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "pads", "storage_order", "strides"}));
  r.kernels.add("reference", kTrainrtDomain, "MaxPoolGrad", maxpool_grad_kernel);
  r.schemas.add(
      grad_schema("AveragePoolGrad", [](InferContext& ctx) { pool_grad_infer(ctx, false); },
                  {"auto_pad", "ceil_mode", "count_include_pad", "dilations", "kernel_shape", "pads", "strides"}));
  r.kernels.add("reference", kTrainrtDomain, "AveragePoolGrad", averagepool_grad_kernel);
  OpSchema lp_grad = grad_schema("LpPoolGrad", lp_pool_grad_infer,
                                 {"auto_pad", "ceil_mode", "dilations", "kernel_shape", "p", "pads", "strides"});
  lp_grad.min_inputs = lp_grad.max_inputs = 3;
  r.schemas.add(std::move(lp_grad));
  r.kernels.add("reference", kTrainrtDomain, "LpPoolGrad", lp_pool_loops::backward_kernel<false>);
  r.schemas.add(grad_schema("GlobalAveragePoolGrad",
                            [](InferContext& ctx) { global_pool_grad_infer(ctx, "GlobalAveragePool"); }, {}));
  r.kernels.add("reference", kTrainrtDomain, "GlobalAveragePoolGrad", [](KernelContext& ctx) {
    dispatch_float(ctx.in(1).dtype(), [&](auto tag) {
      using T = decltype(tag);
      global_average_pool_grad_reference<T>(ctx.in(0), ctx.out(0));
    });
  });
  r.schemas.add(
      grad_schema("GlobalMaxPoolGrad", [](InferContext& ctx) { global_pool_grad_infer(ctx, "GlobalMaxPool"); }, {}));
  r.kernels.add("reference", kTrainrtDomain, "GlobalMaxPoolGrad", [](KernelContext& ctx) {
    dispatch_float(ctx.in(1).dtype(), [&](auto tag) {
      using T = decltype(tag);
      global_max_pool_grad_reference<T>(ctx.in(0), ctx.in(1), ctx.out(0));
    });
  });
}

}  // namespace trainrt
