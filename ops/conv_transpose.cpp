// ConvTranspose (ai.onnx, opsets 1 to 11 alike): schema, shape rule, FLOP rule, reference
// kernels; any spatial rank (1-D, 2-D, 3-D...).
//
//   X: N,C,in...   W: C,M/group,kernel...   B: M (optional)   ->   Y: N,M,out...
//   Y[n,m,o] = B[m] + sum_{c in group(m), i, k : o = i*stride - pad_begin + k*dilation} X[n,c,i] * W[c,m%(M/group),k]
//
// The transpose of Conv: each input pixel scatters its kernel-weighted values over the
// output. Attributes: strides, dilations, pads, auto_pad, group, output_padding,
// output_shape, kernel_shape (checked against W); output size and pads as
// conv_transpose_geometry (ops/conv_transpose_loops.h) says. FLOPs: 2*N*C*in*(M/group)*kernel
// (every product, cropped ones too; bias not counted).
//
// ConvTransposeGrad (ai.trainrt), its backward; attributes are the forward's:
//   ConvTransposeGrad(dY: N,M,out..., X, W) -> (dX: like X, dW: like W, dB: M), each optional ("").
//   dX = Conv of dY with W (strides, dilations, pad_begin), dW = correlation of X with dY,
//   dB = sum of dY over N and space. One loop over the same (input, kernel, output)
//   triples as the forward, so the two agree on the geometry by construction.
#include <string>
#include <vector>

#include "ops/conv_transpose_loops.h"
#include "ops/core/common.h"
#include "ops/core/register_all.h"

namespace trainrt {

namespace {

// Checks X (input xi) and W (input wi) and returns Y's shape; shared with the gradient.
Shape conv_transpose_output_shape(InferContext& ctx, size_t xi, size_t wi) {
  const Node& n = ctx.node();
  require_float(ctx, xi);
  require_same_dtype(ctx, xi, wi);
  const int64_t rank = ctx.input_rank(xi);
  const std::string x_name = "input " + std::to_string(xi) + " '" + n.inputs[xi] + "'";
  if (rank < 3) ctx.fail(x_name + " must have rank >= 3 (N,C,spatial...), got rank " + std::to_string(rank));
  if (ctx.input_rank(wi) != rank)
    ctx.fail("weights '" + n.inputs[wi] + "' must have rank " + std::to_string(rank) + " (C,M/group,kernel...), got " +
             std::to_string(ctx.input_rank(wi)));
  const Shape& x = *ctx.input(xi).shape;
  const Shape& w = *ctx.input(wi).shape;
  const int64_t group = n.attr_int("group", 1);
  if (group < 1) ctx.fail("attribute 'group' must be >= 1, got " + std::to_string(group));
  if (x[1].known() && w[0].known() && x[1].value != w[0].value)
    ctx.fail(x_name + " has " + std::to_string(x[1].value) + " channels but weights " + shape_to_string(w) +
             " expect " + std::to_string(w[0].value));
  if (w[0].known() && w[0].value % group != 0)
    ctx.fail("weights " + shape_to_string(w) + " have " + std::to_string(w[0].value) +
             " input channels, not divisible by group " + std::to_string(group));
  const size_t sp = static_cast<size_t>(rank - 2);
  const std::vector<int64_t> from_attr = n.attr_ints("kernel_shape");
  if (!from_attr.empty() && from_attr.size() != sp)
    ctx.fail("attribute 'kernel_shape' has " + std::to_string(from_attr.size()) + " values, expected " +
             std::to_string(sp));
  std::vector<int64_t> kernel;
  for (size_t i = 0; i < sp; ++i) {
    const Dim& k = w[2 + i];
    if (!k.known() && from_attr.empty()) ctx.fail("kernel size is unknown: weights " + shape_to_string(w));
    if (k.known() && !from_attr.empty() && from_attr[i] != k.value)
      ctx.fail("attribute 'kernel_shape' " + dims_to_string(from_attr) + " does not match weights " +
               shape_to_string(w));
    kernel.push_back(k.known() ? k.value : from_attr[i]);
  }
  Shape y{x[0], w[1].known() ? Dim::of(w[1].value * group) : Dim{}};
  std::vector<int64_t> in;
  for (size_t i = 0; i < sp; ++i)
    if (x[2 + i].known()) in.push_back(x[2 + i].value);
  if (in.size() < sp) {  // a symbolic spatial dim: its output size is open until the plan specialises it
    for (size_t i = 0; i < sp; ++i) y.push_back(Dim{});
    return y;
  }
  const ConvTransposeGeometry g = conv_transpose_geometry(n, in, kernel, ctx.where());
  for (size_t i = 0; i < sp; ++i) y.push_back(Dim::of(g.out[i]));
  return y;
}

void conv_transpose_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  const Shape y = conv_transpose_output_shape(ctx, 0, 1);
  if (ctx.has_input(2)) {
    require_same_dtype(ctx, 0, 2);
    if (ctx.input_rank(2) != 1)
      ctx.fail("input 2 '" + n.inputs[2] + "' (bias) must have rank 1, got rank " + std::to_string(ctx.input_rank(2)));
    const Dim& b = (*ctx.input(2).shape)[0];
    if (b.known() && y[1].known() && b.value != y[1].value)
      ctx.fail("input 2 '" + n.inputs[2] + "' (bias) has " + std::to_string(b.value) + " values, expected " +
               std::to_string(y[1].value) + " (output channels)");
  }
  ctx.set_output(0, ctx.input(0).dtype, y);
}

// ConvTransposeGrad(dY, X, W) -> (dX, dW, dB): dY must have the forward output's shape.
void conv_transpose_grad_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  const DataType t = require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  const Shape y = conv_transpose_output_shape(ctx, 1, 2);
  const ValueInfo& dy = ctx.input(0);
  bool agree = dy.shape && dy.shape->size() == y.size();
  for (size_t i = 0; agree && i < y.size(); ++i)
    agree = !(*dy.shape)[i].known() || !y[i].known() || (*dy.shape)[i].value == y[i].value;
  if (!agree)
    ctx.fail("input 0 '" + n.inputs[0] + "' (dY) has shape " + shape_to_string(dy.shape.value_or(Shape{})) +
             " but the forward ConvTranspose's output is " + shape_to_string(y));
  ctx.set_output(0, ctx.input(1));
  ctx.set_output(1, ctx.input(2));
  ctx.set_output(2, t, Shape{y[1]});
}

// Multiply-adds: N*C*in * (M/group)*kernel, from X (x_name) and W (w_name).
double conv_transpose_macs(const Graph& g, const std::string& x_name, const std::string& w_name) {
  const ValueInfo* x = g.find_info(x_name);
  const ValueInfo* w = g.find_info(w_name);
  if (!x || !w || !x->shape || !w->shape || !shape_is_known(*x->shape) || !shape_is_known(*w->shape)) return 0;
  double macs = 1;
  for (int64_t d : shape_dims(*x->shape)) macs *= static_cast<double>(d);
  std::vector<int64_t> wd = shape_dims(*w->shape);
  for (size_t i = 1; i < wd.size(); ++i) macs *= static_cast<double>(wd[i]);
  return macs;
}

double conv_transpose_flops(const Graph& g, const Node& n) {
  return 2 * conv_transpose_macs(g, n.inputs[0], n.inputs[1]);
}

double conv_transpose_grad_flops(const Graph& g, const Node& n) {
  const int products = static_cast<int>(n.has_output(0)) + static_cast<int>(n.has_output(1));
  return 2 * products * conv_transpose_macs(g, n.inputs[1], n.inputs[2]);
}

}  // namespace

void register_conv_transpose(Registry& r) {
  OpSchema s;
  s.op_type = "ConvTranspose";
  s.min_inputs = 2;
  s.max_inputs = 3;
  s.since_version = 1;  // unchanged up to opset 11, its latest version
  s.infer = conv_transpose_infer;
  s.flops = conv_transpose_flops;
  s.attributes = {"auto_pad",       "dilations",    "group", "kernel_shape",
                  "output_padding", "output_shape", "pads",  "strides"};
  r.schemas.add(std::move(s));
  r.kernels.add("reference", "", "ConvTranspose", conv_transpose_loops::forward_kernel<false>);

  OpSchema grad;
  grad.domain = kTrainrtDomain;
  grad.op_type = "ConvTransposeGrad";
  grad.min_inputs = grad.max_inputs = 3;
  grad.min_outputs = 1;
  grad.max_outputs = 3;
  grad.infer = conv_transpose_grad_infer;
  grad.flops = conv_transpose_grad_flops;
  grad.attributes = {"auto_pad",       "dilations",    "group", "kernel_shape",
                     "output_padding", "output_shape", "pads",  "strides"};
  r.schemas.add(std::move(grad));
  r.kernels.add("reference", kTrainrtDomain, "ConvTransposeGrad", conv_transpose_loops::backward_kernel<false>);
}

}  // namespace trainrt
