// Conv (ai.onnx, opset 11 semantics): schema, shape rule, FLOP rule, reference kernel.
//
//   x: N,C,spatial...   W: M,C/group,k...   B: M (optional)   ->   y: N,M,out...
//   y[n,m,o] = B[m] + sum_{c in group(m), k} x[n, c, o*s - pb + k*d] * W[m, c', k]   (per spatial dim)
//
// 1-D (N,C,L), 2-D (N,C,H,W) and 3-D (N,C,D,H,W) convolutions; more spatial dims are
// Unsupported. The reference views every rank as D,H,W with leading size-1 dims, so a
// 2-D convolution runs the same loops in the same order at every rank. Groups cover
// ordinary (group 1), grouped and depthwise (group == C) convolution. Geometry
// (pads, strides, dilations, auto_pad) comes from ops/core/window.h so the shape rule and
// every kernel agree. FLOPs: 2*N*M*prod(out)*(C/group)*prod(k) (bias not counted).
//
// ConvGrad (ai.trainrt), the backward of Conv; attributes are the forward's:
//   ConvGrad(dY: N,M,out..., X: N,C,spatial..., W: M,C/group,k...) -> (dX: like X, dW: like W, dB: M)
//   dX = dY convolved back through W (transposed conv), dW = correlation of dY with X,
//   dB = sum of dY over N and the spatial dims. Every output is optional ("" = not needed).
//   dx_relu = 1 (an attribute only the training fusions set): dX = X > 0 ? dX : 0, the
//   gradient of a Relu whose output X is (with_dx_relu, ops/core/common.h).
//   FLOPs: the forward's for each of dX and dW requested.
#include <memory>
#include <string>
#include <vector>

#include "ops/core/common.h"
#include "ops/core/register_all.h"
#include "ops/core/window.h"

namespace trainrt {

namespace {

// Kernel size from the weights (dims 2..), checked against the optional kernel_shape attribute.
std::vector<int64_t> conv_kernel(const Node& n, const Shape& w, const std::string& where) {
  std::vector<int64_t> from_attr = n.attr_ints("kernel_shape");
  if (n.has_attr("kernel_shape") && from_attr.size() != w.size() - 2)
    throw_bad_input(where, "attribute 'kernel_shape' has " + std::to_string(from_attr.size()) + " values, expected " +
                               std::to_string(w.size() - 2));
  std::vector<int64_t> k;
  for (size_t i = 2; i < w.size(); ++i) {
    if (w[i].known()) {
      if (!from_attr.empty() && from_attr[i - 2] != w[i].value)
        throw_bad_input(where, "attribute 'kernel_shape' " + dims_to_string(from_attr) + " does not match weights " +
                                   shape_to_string(w));
      k.push_back(w[i].value);
    } else if (!from_attr.empty()) {
      k.push_back(from_attr[i - 2]);
    } else {
      throw_bad_input(where, "kernel size is unknown: weights " + shape_to_string(w) + " and no 'kernel_shape'");
    }
  }
  return k;
}

// Checks data X (input xi) and weights W (input wi) as Conv does and returns Y's shape
// (N,M,Ho,Wo; unknown dims where X's are unknown). Shared by Conv and ConvGrad.
Shape conv_output_shape(InferContext& ctx, size_t xi, size_t wi) {
  const Node& n = ctx.node();
  require_float(ctx, xi);
  require_same_dtype(ctx, xi, wi);
  const std::string x_name = "input " + std::to_string(xi) + " '" + n.inputs[xi] + "'";
  const std::string w_name = "input " + std::to_string(wi) + " '" + n.inputs[wi] + "' (weights)";
  const int64_t rank = ctx.input_rank(xi);
  if (rank < 3) ctx.fail(x_name + " must have rank >= 3 (N,C,spatial...), got rank " + std::to_string(rank));
  if (rank > 5)
    throw_unsupported(ctx.where(), "Conv over " + std::to_string(rank - 2) +
                                       " spatial dims is not implemented (1 to 3 are), " + x_name + " has rank " +
                                       std::to_string(rank));
  const int64_t w_rank = ctx.input_rank(wi);
  if (w_rank != rank)
    ctx.fail(w_name + " must have rank " + std::to_string(rank) + " (M,C/group,kernel...) like the input, got rank " +
             std::to_string(w_rank));
  const size_t sp = static_cast<size_t>(rank - 2);
  const Shape& x = *ctx.input(xi).shape;
  const Shape& w = *ctx.input(wi).shape;
  const int64_t group = n.attr_int("group", 1);
  if (group < 1) ctx.fail("attribute 'group' must be >= 1, got " + std::to_string(group));
  if (x[1].known() && w[1].known() && x[1].value != w[1].value * group)
    ctx.fail(x_name + " has " + std::to_string(x[1].value) + " channels but weights " + shape_to_string(w) +
             " with group " + std::to_string(group) + " expect " + std::to_string(w[1].value * group));
  if (w[0].known() && w[0].value % group != 0)
    ctx.fail("weights " + shape_to_string(w) + " have " + std::to_string(w[0].value) +
             " output channels, not divisible by group " + std::to_string(group));
  Window win = read_window(n, sp, conv_kernel(n, w, ctx.where()), ctx.where(), {});
  Shape y{x[0], w[0]};
  for (size_t i = 0; i < sp; ++i) {
    const Dim& in = x[2 + i];
    y.push_back(in.known() ? Dim::of(resolve_window_dim(win, i, in.value, ctx.where())) : Dim{});
  }
  return y;
}

void conv_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  const Shape y = conv_output_shape(ctx, 0, 1);
  const Shape& w = *ctx.input(1).shape;
  if (ctx.has_input(2)) {
    require_same_dtype(ctx, 0, 2);
    if (ctx.input_rank(2) != 1)
      ctx.fail("input 2 '" + n.inputs[2] + "' (bias) must have rank 1, got rank " + std::to_string(ctx.input_rank(2)));
    const Dim& b = (*ctx.input(2).shape)[0];
    if (b.known() && w[0].known() && b.value != w[0].value)
      ctx.fail("input 2 '" + n.inputs[2] + "' (bias) has " + std::to_string(b.value) + " values, expected " +
               std::to_string(w[0].value) + " (output channels)");
  }
  ctx.set_output(0, ctx.input(0).dtype, y);
}

// True when two shapes have the same rank and no known dims that differ.
bool shapes_agree(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i)
    if (a[i].known() && b[i].known() && a[i].value != b[i].value) return false;
  return true;
}

// ConvGrad(dY, X, W) -> (dX, dW, dB): X and W are checked as the forward Conv
// checks them, dY must have the forward output's shape.
void conv_grad_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  const DataType t = require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  const Shape y = conv_output_shape(ctx, 1, 2);
  const ValueInfo& dy = ctx.input(0);
  if (!dy.shape || !shapes_agree(*dy.shape, y))
    ctx.fail("input 0 '" + n.inputs[0] + "' (dY) has shape " + shape_to_string(dy.shape.value_or(Shape{})) +
             " but the forward Conv's output is " + shape_to_string(y));
  const Shape& w = *ctx.input(2).shape;
  ctx.set_output(0, ctx.input(1));
  ctx.set_output(1, ctx.input(2));
  ctx.set_output(2, t, Shape{w[0]});
}

// Multiply-adds of one Conv with output y and weights w: N*M*Ho*Wo * C/group*kH*kW.
double conv_macs(const Graph& g, const std::string& y_name, const std::string& w_name) {
  const ValueInfo* w = g.find_info(w_name);
  const ValueInfo* y = g.find_info(y_name);
  if (!w || !y || !w->shape || !y->shape || !shape_is_known(*w->shape) || !shape_is_known(*y->shape)) return 0;
  double macs = 1;
  for (int64_t d : shape_dims(*y->shape)) macs *= static_cast<double>(d);  // N*M*Ho*Wo
  std::vector<int64_t> wd = shape_dims(*w->shape);
  for (size_t i = 1; i < wd.size(); ++i) macs *= static_cast<double>(wd[i]);  // C/group*kH*kW
  return macs;
}

double conv_flops(const Graph& g, const Node& n) { return 2 * conv_macs(g, n.outputs[0], n.inputs[1]); }

// dX and dW each cost what the forward costs; dB is one add per dY element (not counted).
double conv_grad_flops(const Graph& g, const Node& n) {
  const int products = static_cast<int>(n.has_output(0)) + static_cast<int>(n.has_output(1));
  return 2 * products * conv_macs(g, n.inputs[0], n.inputs[2]);
}

// The spatial geometry of one convolution, 1 to 3 dims, right-aligned into D,H,W with
// leading size-1 dims (as ops/core/pool_geometry.h views pools), so one set of loops
// serves every rank and a 2-D convolution runs the loops it always ran.
struct ConvGeometry {
  int64_t in[3] = {1, 1, 1}, out[3] = {1, 1, 1}, k[3] = {1, 1, 1};
  int64_t s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0, 0, 0};
  int64_t in_size() const { return in[0] * in[1] * in[2]; }
  int64_t out_size() const { return out[0] * out[1] * out[2]; }
  int64_t k_size() const { return k[0] * k[1] * k[2]; }
};

// x: N,C,spatial...  w: M,Cg,k...  y: N,M,out...; `win` resolved for x.
ConvGeometry conv_geometry(const Tensor& x, const Tensor& w, const Tensor& y, const Window& win) {
  ConvGeometry g;
  const size_t sp = win.rank();
  for (size_t i = 0; i < sp; ++i) {
    const size_t j = 3 - sp + i;
    g.in[j] = x.dims()[2 + i];
    g.out[j] = y.dims()[2 + i];
    g.k[j] = w.dims()[2 + i];
    g.s[j] = win.strides[i];
    g.d[j] = win.dilations[i];
    g.pb[j] = win.pads[i];
  }
  return g;
}

// The kernel positions of output position o (a flat index into the out plane) that land
// inside the input, in kernel row-major order (a, then b, then c), as runs along the
// last axis: run r covers taps x = x0 + j * d[2], w = w0 + j for j < count (offsets in an
// input plane and in a kernel). Written to `runs` (room for k[0] * k[1]), their number
// returned. Gathered once per output position and used for every channel, so the
// channel loops below are plain strided loops (the same products in the same order).
// Its name has "reference" in it, as the kernels' do: fuzz/coverage_ignore.txt keeps the
// fuzz build's coverage hooks out of the reference's loops, which the ASan suite runs.
struct TapRun {
  int64_t x0, w0, count;
};
int64_t reference_taps(const ConvGeometry& g, int64_t o, TapRun* runs) {
  const int64_t oc = o % g.out[2], ob = (o / g.out[2]) % g.out[1], oa = o / (g.out[2] * g.out[1]);
  // The c range whose input column ic = base + c * d lies in [0, in): c_lo <= c < c_hi.
  const int64_t base = oc * g.s[2] - g.pb[2], d = g.d[2];
  const int64_t c_lo = base >= 0 ? 0 : (-base + d - 1) / d;
  const int64_t c_hi = std::min(g.k[2], base >= g.in[2] ? 0 : (g.in[2] - 1 - base) / d + 1);
  if (c_lo >= c_hi) return 0;
  int64_t n = 0;
  for (int64_t a = 0; a < g.k[0]; ++a) {
    const int64_t ia = oa * g.s[0] - g.pb[0] + a * g.d[0];
    if (ia < 0 || ia >= g.in[0]) continue;
    for (int64_t b = 0; b < g.k[1]; ++b) {
      const int64_t ib = ob * g.s[1] - g.pb[1] + b * g.d[1];
      if (ib < 0 || ib >= g.in[1]) continue;
      runs[n++] = {(ia * g.in[1] + ib) * g.in[2] + base + c_lo * d, (a * g.k[1] + b) * g.k[2] + c_lo, c_hi - c_lo};
    }
  }
  return n;
}

// x: N,C,spatial...  w: M,Cg,k... (Cg = C/group)  b: M or null  ->  y: N,M,out...
// Direct loops, accumulated in double so the oracle is as exact as the inputs allow.
template <typename T>
void conv_reference(const Tensor& x, const Tensor& w, const Tensor* b, Tensor& y, const Window& win, int64_t group) {
  const ConvGeometry g = conv_geometry(x, w, y, win);
  const int64_t N = x.dims()[0], C = x.dims()[1], M = w.dims()[0], Cg = w.dims()[1];
  const int64_t S = g.in_size(), So = g.out_size(), K = g.k_size();
  const int64_t Mg = M / group;  // output channels per group
  const T* xp = x.data<T>();
  const T* wp = w.data<T>();
  const T* bp = b ? b->data<T>() : nullptr;
  T* yp = y.data<T>();
  const int64_t d = g.d[2];
  std::vector<TapRun> runs(static_cast<size_t>(g.k[0] * g.k[1]));
  TapRun* rp = runs.data();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < So; ++o) {  // each output's sum is its own: any order of (n, o, m) gives the same bits
      const int64_t nr = reference_taps(g, o, rp);
      for (int64_t m = 0; m < M; ++m) {
        const int64_t c0 = (m / Mg) * Cg;  // first input channel of m's group
        double acc = bp ? static_cast<double>(bp[m]) : 0.0;
        for (int64_t cg = 0; cg < Cg; ++cg) {
          const T* xc = xp + (n * C + c0 + cg) * S;
          const T* wc = wp + (m * Cg + cg) * K;
          for (int64_t r = 0; r < nr; ++r) {
            const T* xr = xc + rp[r].x0;
            const T* wr = wc + rp[r].w0;
            for (int64_t j = 0; j < rp[r].count; ++j)
              acc += static_cast<double>(xr[j * d]) * static_cast<double>(wr[j]);
          }
        }
        yp[(n * M + m) * So + o] = static_cast<T>(acc);
      }
    }
}

// The node's window for weights w (M,Cg,k...), resolved for x (N,C,spatial...).
Window conv_window(const Node& n, const Tensor& x, const Tensor& w) {
  const size_t sp = static_cast<size_t>(x.rank() - 2);
  Window win = read_window(n, sp, std::vector<int64_t>(w.dims().begin() + 2, w.dims().end()), "", {});
  for (size_t i = 0; i < sp; ++i) (void)resolve_window_dim(win, i, x.dims()[2 + i], "");
  return win;
}

void conv_kernel_reference(KernelContext& ctx) {
  const Tensor x = math_input(ctx.in(0), ctx.math);
  const Tensor w = math_input(ctx.in(1), ctx.math);
  const Window win = conv_window(ctx.node, x, w);
  const Tensor* b = ctx.has_input(2) ? &ctx.in(2) : nullptr;
  const int64_t group = ctx.node.attr_int("group", 1);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv_reference<T>(x, w, b, ctx.out(0), win, group);
  });
}

// dy: N,M,out...  x: N,C,spatial...  w: M,Cg,k...  ->  dx: like x, dw: like w, db: M (each may be null).
// The forward's loops with each product scattered back to its two factors:
//   dx[n, c0+cg, in] += dy[n,m,o] * w[m,cg,k]
//   dw[m, cg, k]     += dy[n,m,o] * x[n, c0+cg, in]
//   db[m]            += dy[n,m,o]
// Accumulated in double buffers, then rounded once.
template <typename T>
void conv_grad_reference(const Tensor& dy, const Tensor& x, const Tensor& w, Tensor* dx, Tensor* dw, Tensor* db,
                         const Window& win, int64_t group) {
  const ConvGeometry g = conv_geometry(x, w, dy, win);
  const int64_t N = x.dims()[0], C = x.dims()[1], M = w.dims()[0], Cg = w.dims()[1];
  const int64_t S = g.in_size(), So = g.out_size(), K = g.k_size();
  const int64_t Mg = M / group;
  const T* dyp = dy.data<T>();
  const T* xp = x.data<T>();
  const T* wp = w.data<T>();
  std::vector<double> gx(dx ? static_cast<size_t>(x.numel()) : 0), gw(dw ? static_cast<size_t>(w.numel()) : 0),
      gb(db ? static_cast<size_t>(M) : 0);
  // n, m, o, cg, tap: the order in which each dx and dw element receives its products.
  const int64_t d = g.d[2];
  std::vector<TapRun> runs(static_cast<size_t>(g.k[0] * g.k[1]));
  TapRun* rp = runs.data();
  double* gxp = gx.data();
  double* gwp = gw.data();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m) {
      const int64_t c0 = (m / Mg) * Cg;
      for (int64_t o = 0; o < So; ++o) {
        const double gy = static_cast<double>(dyp[(n * M + m) * So + o]);
        if (db) gb[static_cast<size_t>(m)] += gy;
        const int64_t nr = reference_taps(g, o, rp);
        for (int64_t cg = 0; cg < Cg; ++cg) {
          const int64_t x0 = (n * C + c0 + cg) * S, w0 = (m * Cg + cg) * K;
          for (int64_t r = 0; r < nr; ++r) {
            const int64_t xs = x0 + rp[r].x0, ws = w0 + rp[r].w0, count = rp[r].count;
            if (dx)
              for (int64_t j = 0; j < count; ++j) gxp[xs + j * d] += gy * static_cast<double>(wp[ws + j]);
            if (dw)
              for (int64_t j = 0; j < count; ++j) gwp[ws + j] += gy * static_cast<double>(xp[xs + j * d]);
          }
        }
      }
    }
  auto store = [](const std::vector<double>& from, Tensor* to) {
    if (!to) return;
    T* p = to->data<T>();
    for (size_t i = 0; i < from.size(); ++i) p[i] = static_cast<T>(from[i]);
  };
  store(gx, dx);
  store(gw, dw);
  store(gb, db);
}

// Returns false: dX is not masked here (with_dx_relu applies dx_relu after it).
bool conv_grad_kernel_reference(KernelContext& ctx) {
  const Tensor dy = math_input(ctx.in(0), ctx.math);
  const Tensor x = math_input(ctx.in(1), ctx.math);
  const Tensor w = math_input(ctx.in(2), ctx.math);
  const Window win = conv_window(ctx.node, x, w);
  Tensor* out[3] = {};
  for (size_t i = 0; i < 3; ++i) out[i] = ctx.has_output(i) ? &ctx.out(i) : nullptr;
  const int64_t group = ctx.node.attr_int("group", 1);
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    conv_grad_reference<T>(dy, x, w, out[0], out[1], out[2], win, group);
  });
  return false;
}

}  // namespace

ReluGradCall relu_grad_call(Kernel relu_grad, std::string name) {
  auto node = std::make_shared<Node>();  // one for every call
  node->op_type = "ReluGrad";
  node->domain = kTrainrtDomain;
  node->name = std::move(name);
  node->inputs = {"dY", "Y"};
  node->outputs = {"dX"};
  return [relu_grad = std::move(relu_grad), node](const KernelContext& fused, const Tensor& dy, const Tensor& y,
                                                  Tensor& out) {
    KernelContext r{*node, {&dy, &y}, {&out}, fused.training, fused.seed};
    r.conv = fused.conv;
    r.fp32 = fused.fp32;
    relu_grad(r);
  };
}

Kernel with_dx_relu(std::function<bool(KernelContext&)> conv_grad, Kernel relu_grad) {
  ReluGradCall relu = relu_grad_call(std::move(relu_grad), "ConvGrad's ReLU gradient (dx_relu)");
  return [conv_grad = std::move(conv_grad), relu = std::move(relu)](KernelContext& ctx) {
    const bool masked = conv_grad(ctx);
    if (masked || !ctx.has_output(0) || ctx.node.attr_int("dx_relu", 0) == 0) return;
    // ReluGrad(dY = dX, Y = X) -> dX, in place; X as it is (never rounded: the unfused
    // ReluGrad reads it so).
    relu(ctx, ctx.out(0), ctx.in(1), ctx.out(0));
  };
}

void register_conv(Registry& r) {
  OpSchema s;
  s.op_type = "Conv";
  s.min_inputs = 2;
  s.max_inputs = 3;
  s.since_version = 11;
  s.infer = conv_infer;
  s.flops = conv_flops;
  s.attributes = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides"};
  r.schemas.add(std::move(s));
  r.kernels.add("reference", "", "Conv", conv_kernel_reference);

  OpSchema grad;
  grad.domain = kTrainrtDomain;
  grad.op_type = "ConvGrad";
  grad.min_inputs = grad.max_inputs = 3;
  grad.min_outputs = 1;
  grad.max_outputs = 3;
  grad.infer = conv_grad_infer;
  grad.flops = conv_grad_flops;
  grad.attributes = {"auto_pad", "dilations", "group", "kernel_shape", "pads", "strides", "dx_relu"};
  r.schemas.add(std::move(grad));
  const Kernel* relu_grad = r.kernels.find("reference", kTrainrtDomain, "ReluGrad");
  if (!relu_grad) throw_internal("register_conv", "ReluGrad must be registered first");
  r.kernels.add("reference", kTrainrtDomain, "ConvGrad", with_dx_relu(conv_grad_kernel_reference, *relu_grad));
}

}  // namespace trainrt
