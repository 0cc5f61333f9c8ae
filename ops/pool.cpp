// Pooling: MaxPool (opset 12 semantics), AveragePool (opset 11), GlobalAveragePool.
//
//   MaxPool      x: N,C,spatial... -> y: N,C,out...  (+ Indices: int64, same shape)
//   AveragePool  x: N,C,spatial... -> y: N,C,out...
//   GlobalAveragePool x: N,C,spatial... -> y: N,C,1,...,1
//
// Windowed pools take 1, 2 or 3 spatial dims; the kernels view every input as
// N*C, D,H,W with leading size-1 dims, so one set of loops serves all three.
// Geometry (pads, strides, dilations, auto_pad, ceil_mode) is ops/window.h.
//
// MaxPool ignores padded positions; Indices are ONNX's flattened indices into x
// (they include the N and C offsets, never the padding): row-major for
// storage_order 0, column-major (h + w*H) for storage_order 1 (2-D only).
// AveragePool divides by the number of real input elements in the window
// (count_include_pad 0) or by the window positions inside input plus pads
// (count_include_pad 1; the part of a ceil_mode window past the end pad is not counted).
// FLOPs: one per window element and output (a compare or an add); Global: one per input.
#include <limits>
#include <string>

#include "ops/common.h"
#include "ops/register_all.h"
#include "ops/window.h"

namespace trainrt {

namespace {

// MaxPool also takes 8-bit integers (ONNX opset 12); AveragePool is float only.
template <typename F>
void dispatch_maxpool(DataType t, F&& f) {
  switch (t) {
    case DataType::UInt8: f(uint8_t{}); break;
    case DataType::Int8: f(int8_t{}); break;
    default: dispatch_float(t, f);
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

void pool_infer(InferContext& ctx, bool is_max) {
  const Node& n = ctx.node();
  const DataType t = ctx.input(0).dtype;
  if (is_max && (t == DataType::UInt8 || t == DataType::Int8)) {
    // accepted as is
  } else {
    require_float(ctx, 0);
  }
  const int64_t rank = ctx.input_rank(0);
  if (rank < 3)
    ctx.fail("input 0 '" + n.inputs[0] + "' must have rank >= 3 (N,C,spatial...), got rank " + std::to_string(rank));
  if (rank > 5)
    throw_unsupported(ctx.where(),
                      "pooling over " + std::to_string(rank - 2) + " spatial dims is not implemented (1 to 3 are)");
  const size_t sp = static_cast<size_t>(rank - 2);
  Window win = pool_window(n, sp, ctx.where());
  if (is_max) {
    int64_t order = n.attr_int("storage_order", 0);
    if (order != 0 && order != 1) ctx.fail("attribute 'storage_order' must be 0 or 1, got " + std::to_string(order));
    if (order == 1 && sp != 2)
      throw_unsupported(ctx.where(), "attribute 'storage_order' 1 is implemented for 2-D MaxPool only");
  } else {
    int64_t cip = n.attr_int("count_include_pad", 0);
    if (cip != 0 && cip != 1) ctx.fail("attribute 'count_include_pad' must be 0 or 1, got " + std::to_string(cip));
  }
  const Shape& x = *ctx.input(0).shape;
  Shape y{x[0], x[1]};
  for (size_t i = 0; i < sp; ++i) {
    const Dim& in = x[2 + i];
    y.push_back(in.known() ? Dim::of(resolve_window_dim(win, i, in.value, ctx.where())) : Dim{});
  }
  ctx.set_output(0, t, y);
  if (is_max) ctx.set_output(1, DataType::Int64, y);
}

double pool_flops(const Graph& g, const Node& n) {
  const ValueInfo* y = g.find_info(n.outputs[0]);
  if (!y || !y->shape || !shape_is_known(*y->shape)) return 0;
  double f = static_cast<double>(element_count(shape_dims(*y->shape)));
  for (int64_t k : n.attr_ints("kernel_shape")) f *= static_cast<double>(k);
  return f;
}

// Sizes of one pooling call as N*C planes of D,H,W (leading dims of size 1 for 1-D/2-D).
struct Pool3 {
  int64_t planes = 1;
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  int64_t k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0, 0, 0}, pe[3] = {0, 0, 0};
};

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

// x: P,D,H,W -> y: P,Do,Ho,Wo (P = N*C); idx (optional) gets flattened argmax positions.
template <typename T>
void maxpool_reference(const Pool3& g, const T* x, T* y, int64_t* idx, bool column_major) {
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2];
  for (int64_t p = 0; p < g.planes; ++p)
    for (int64_t od = 0; od < g.out[0]; ++od)
      for (int64_t oh = 0; oh < g.out[1]; ++oh)
        for (int64_t ow = 0; ow < g.out[2]; ++ow) {
          T best = std::numeric_limits<T>::lowest();
          int64_t best_d = -1, best_h = -1, best_w = -1;
          for (int64_t a = 0; a < g.k[0]; ++a) {
            const int64_t id = od * g.s[0] - g.pb[0] + a * g.d[0];
            if (id < 0 || id >= D) continue;
            for (int64_t b = 0; b < g.k[1]; ++b) {
              const int64_t ih = oh * g.s[1] - g.pb[1] + b * g.d[1];
              if (ih < 0 || ih >= H) continue;
              for (int64_t c = 0; c < g.k[2]; ++c) {
                const int64_t iw = ow * g.s[2] - g.pb[2] + c * g.d[2];
                if (iw < 0 || iw >= W) continue;
                const T v = x[((p * D + id) * H + ih) * W + iw];
                if (best_d < 0 || v > best) best = v, best_d = id, best_h = ih, best_w = iw;
              }
            }
          }
          const int64_t o = ((p * g.out[0] + od) * g.out[1] + oh) * g.out[2] + ow;
          y[o] = best;
          if (idx)
            idx[o] = p * D * H * W +
                     (column_major ? best_d + best_h * D + best_w * D * H : (best_d * H + best_h) * W + best_w);
        }
}

template <typename T>
void averagepool_reference(const Pool3& g, const T* x, T* y, bool count_include_pad) {
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2];
  // Window positions of output o along dim i that lie inside input + pads.
  auto padded_count = [&](int i, int64_t o) {
    const int64_t start = o * g.s[i] - g.pb[i];
    return std::min(start + g.k[i], g.in[i] + g.pe[i]) - start;
  };
  for (int64_t p = 0; p < g.planes; ++p)
    for (int64_t od = 0; od < g.out[0]; ++od)
      for (int64_t oh = 0; oh < g.out[1]; ++oh)
        for (int64_t ow = 0; ow < g.out[2]; ++ow) {
          double sum = 0;
          int64_t count = 0;
          for (int64_t a = 0; a < g.k[0]; ++a) {
            const int64_t id = od * g.s[0] - g.pb[0] + a;
            if (id < 0 || id >= D) continue;
            for (int64_t b = 0; b < g.k[1]; ++b) {
              const int64_t ih = oh * g.s[1] - g.pb[1] + b;
              if (ih < 0 || ih >= H) continue;
              for (int64_t c = 0; c < g.k[2]; ++c) {
                const int64_t iw = ow * g.s[2] - g.pb[2] + c;
                if (iw < 0 || iw >= W) continue;
                sum += static_cast<double>(x[((p * D + id) * H + ih) * W + iw]);
                ++count;
              }
            }
          }
          if (count_include_pad) count = padded_count(0, od) * padded_count(1, oh) * padded_count(2, ow);
          y[((p * g.out[0] + od) * g.out[1] + oh) * g.out[2] + ow] = static_cast<T>(sum / static_cast<double>(count));
        }
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

void global_average_pool_infer(InferContext& ctx) {
  const DataType t = require_float(ctx, 0);
  const int64_t rank = ctx.input_rank(0);
  if (rank < 3)
    ctx.fail("input 0 '" + ctx.node().inputs[0] + "' must have rank >= 3 (N,C,spatial...), got rank " +
             std::to_string(rank));
  Shape y = *ctx.input(0).shape;
  for (size_t i = 2; i < y.size(); ++i) y[i] = Dim::of(1);
  ctx.set_output(0, t, y);
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

void global_average_pool_kernel(KernelContext& ctx) {
  dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
    using T = decltype(tag);
    global_average_pool_reference<T>(ctx.in(0), ctx.out(0));
  });
}

}  // namespace

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
  avg.attributes = {"auto_pad", "ceil_mode", "count_include_pad", "kernel_shape", "pads", "strides"};
  r.schemas.add(std::move(avg));
  r.kernels.add("reference", "", "AveragePool", averagepool_kernel);

  OpSchema global;
  global.op_type = "GlobalAveragePool";
  global.since_version = 1;
  global.infer = global_average_pool_infer;
  global.flops = global_average_pool_flops;
  r.schemas.add(std::move(global));
  r.kernels.add("reference", "", "GlobalAveragePool", global_average_pool_kernel);
}

}  // namespace trainrt
