// Convolutions as cuDNN graphs: ops/conv_graph_cuda.h says what and why.
// Host code only (no kernels of its own). Compiled in CI, never run on a GPU.
#include <cuda_runtime.h>
#include <cudnn.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "graph/error.h"
#include "ops/conv_graph_cuda.h"
#include "ops/cuda/cudnn_graph.h"
#include "ops/cuda/graph_fallback.h"

namespace trainrt::cuda {

namespace {

using cudnn_graph::Builder;
using cudnn_graph::dims_text;
using cudnn_graph::dtype_word;
using cudnn_graph::GraphCall;
using cudnn_graph::GraphPlan;
using cudnn_graph::tensor;

// Unique ids of the graph's tensors (the variant pack names buffers by them).
enum Uid : int64_t { kX = 1, kW, kB, kZ, kY, kReluX, kConvOut = 101, kBiasOut, kReluOut };

// What the cache key and the graph depend on. x, w, y are the forward's shapes whatever
// the pass (data writes x's shape from y and w; filter writes w's from x and y).
struct Problem {
  ConvPass pass = ConvPass::forward;
  cudnnDataType_t in = CUDNN_DATA_FLOAT;  // the dtype of the pass's inputs
  // The forward's y (the data pass's dx): fp32, or the inputs' 16-bit type where it is
  // stored so (runtime/narrow.h;
  // fp32 accumulation and epilogue, converted as cuDNN writes it: taken to be nearest
  // even, the rounding of every backend; not checked on a GPU yet).
  cudnnDataType_t out = CUDNN_DATA_FLOAT;
  // The data pass's relu_x: fp32, or the inputs' 16-bit type where X is stored so (a
  // value its writer rounds: the mask tests the same number, its widening exact).
  cudnnDataType_t relu_in = CUDNN_DATA_FLOAT;
  std::vector<int64_t> x, w, y, strides, dilations, pre, post;
  bool bias = false, relu = false, residual = false, tf32 = false;
  // x-shaped (x, dx, relu_x) and y-shaped (y, z, dy) tensors stored ChannelsLast; w (dw)
  // stored KRSC (filter_krsc)
  bool x_last = false, y_last = false, w_last = false;
  int64_t align[5] = {};  // of x, w, b, z, y (bytes, at most 16)
};

// The convolution descriptor of `p` (fp32 accumulation).
cudnnBackendDescriptor_t conv_descriptor(Builder& b, const Problem& p) {
  const int64_t spatial = 2;
  const cudnnDataType_t comp = CUDNN_DATA_FLOAT;
  const cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnBackendDescriptor_t conv = b.make(CUDNN_BACKEND_CONVOLUTION_DESCRIPTOR, "convolution descriptor");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, 1, &comp, "convolution compute type");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_CONV_MODE, CUDNN_TYPE_CONVOLUTION_MODE, 1, &mode, "convolution mode");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_SPATIAL_DIMS, CUDNN_TYPE_INT64, 1, &spatial, "convolution spatial dims");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_FILTER_STRIDES, CUDNN_TYPE_INT64, spatial, p.strides.data(),
        "convolution strides");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_DILATIONS, CUDNN_TYPE_INT64, spatial, p.dilations.data(), "convolution dilations");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_PRE_PADDINGS, CUDNN_TYPE_INT64, spatial, p.pre.data(), "convolution pre-paddings");
  b.set(conv, CUDNN_ATTR_CONVOLUTION_POST_PADDINGS, CUDNN_TYPE_INT64, spatial, p.post.data(),
        "convolution post-paddings");
  b.finalize(conv, "convolution finalize");
  return conv;
}

// The forward's operations: the convolution, then the epilogue in FusedConv's order
// (bias, activation, then the residual), each writing a virtual tensor but the last.
std::vector<cudnnBackendDescriptor_t> forward_ops(Builder& b, const Problem& p) {
  cudnnBackendDescriptor_t x = tensor(b, kX, p.x, p.align[0], false, p.in, p.x_last);
  cudnnBackendDescriptor_t w = tensor(b, kW, p.w, p.align[1], false, p.in, p.w_last);
  const std::vector<int64_t> channel{1, p.y[1], 1, 1};
  cudnnBackendDescriptor_t bias = p.bias ? tensor(b, kB, channel, p.align[2], false) : nullptr;
  cudnnBackendDescriptor_t z = p.residual ? tensor(b, kZ, p.y, p.align[3], false, CUDNN_DATA_FLOAT, p.y_last) : nullptr;
  const int stages = 1 + (p.bias ? 1 : 0) + (p.relu ? 1 : 0) + (p.residual ? 1 : 0);
  int stage = 0;
  auto out = [&](int64_t uid) {
    ++stage;
    return stage == stages ? tensor(b, kY, p.y, p.align[4], false, p.out, p.y_last)
                           : tensor(b, uid, p.y, 16, true, CUDNN_DATA_FLOAT, p.y_last);
  };
  cudnnBackendDescriptor_t conv = conv_descriptor(b, p);
  std::vector<cudnnBackendDescriptor_t> ops;
  cudnnBackendDescriptor_t cur = out(kConvOut);
  const float alpha = 1.f, beta = 0.f;
  cudnnBackendDescriptor_t fwd =
      b.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_FORWARD_DESCRIPTOR, "convolution forward operation");
  b.set_desc(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_X, x, "convolution x");
  b.set_desc(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_W, w, "convolution w");
  b.set_desc(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_Y, cur, "convolution y");
  b.set_desc(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_CONV_DESC, conv, "convolution descriptor");
  b.set(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, "convolution alpha");
  b.set(fwd, CUDNN_ATTR_OPERATION_CONVOLUTION_FORWARD_BETA, CUDNN_TYPE_FLOAT, 1, &beta, "convolution beta");
  b.finalize(fwd, "convolution forward finalize");
  ops.push_back(fwd);
  if (p.bias) {
    cudnnBackendDescriptor_t next = out(kBiasOut);
    ops.push_back(cudnn_graph::pointwise(b, CUDNN_POINTWISE_ADD, cur, bias, next));
    cur = next;
  }
  if (p.relu) {
    cudnnBackendDescriptor_t next = out(kReluOut);
    ops.push_back(cudnn_graph::pointwise(b, CUDNN_POINTWISE_RELU_FWD, cur, nullptr, next));
    cur = next;
  }
  if (p.residual) ops.push_back(cudnn_graph::pointwise(b, CUDNN_POINTWISE_ADD, cur, z, out(kY)));
  return ops;
}

// A backward pass's operations. The uids keep the forward's names: data reads kY (dy)
// and kW and writes kX (dx; with p.relu through RELU_BWD against kReluX); filter reads
// kX and kY (dy) and writes kW (dw).
std::vector<cudnnBackendDescriptor_t> backward_ops(Builder& b, const Problem& p) {
  const bool data = p.pass == ConvPass::data;
  const bool relu = data && p.relu;
  cudnnBackendDescriptor_t x = relu ? tensor(b, kConvOut, p.x, 16, true, CUDNN_DATA_FLOAT, p.x_last)
                                    : tensor(b, kX, p.x, p.align[0], false, data ? p.out : p.in, p.x_last);
  cudnnBackendDescriptor_t w = tensor(b, kW, p.w, p.align[1], false, data ? p.in : p.out, p.w_last);
  cudnnBackendDescriptor_t dy = tensor(b, kY, p.y, p.align[4], false, p.in, p.y_last);
  cudnnBackendDescriptor_t conv = conv_descriptor(b, p);
  const float alpha = 1.f, beta = 0.f;
  if (data) {
    cudnnBackendDescriptor_t op =
        b.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_DATA_DESCRIPTOR, "convolution data gradient operation");
    b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_W, w, "data gradient w");
    b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DY, dy, "data gradient dy");
    b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_DX, x, "data gradient dx");
    b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_CONV_DESC, conv, "data gradient descriptor");
    b.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, "data gradient alpha");
    b.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_DATA_BETA, CUDNN_TYPE_FLOAT, 1, &beta, "data gradient beta");
    b.finalize(op, "convolution data gradient finalize");
    if (!relu) return {op};
    // The dgrad's fp32 result masked in fp32 (RELU_BWD's math precision), converted once
    // where dx is 16-bit: round(mask(g)) == mask(round(g)), the reference's dX.
    cudnnBackendDescriptor_t relu_x = tensor(b, kReluX, p.x, p.align[3], false, p.relu_in, p.x_last);
    cudnnBackendDescriptor_t dx = tensor(b, kX, p.x, p.align[0], false, p.out, p.x_last);
    return {op, cudnn_graph::relu_backward(b, x, relu_x, dx)};
  }
  cudnnBackendDescriptor_t op =
      b.make(CUDNN_BACKEND_OPERATION_CONVOLUTION_BACKWARD_FILTER_DESCRIPTOR, "convolution filter gradient operation");
  b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_X, x, "filter gradient x");
  b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DY, dy, "filter gradient dy");
  b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_DW, w, "filter gradient dw");
  b.set_desc(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_CONV_DESC, conv, "filter gradient descriptor");
  b.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_ALPHA, CUDNN_TYPE_FLOAT, 1, &alpha, "filter gradient alpha");
  b.set(op, CUDNN_ATTR_OPERATION_CONVOLUTION_BWD_FILTER_BETA, CUDNN_TYPE_FLOAT, 1, &beta, "filter gradient beta");
  b.finalize(op, "convolution filter gradient finalize");
  return {op};
}

// The operation graph of `p` and its execution plan; null and `why` when cuDNN does not support it.
std::shared_ptr<const GraphPlan> build_plan(const Problem& p, const cudnn_graph::PlanChoice& choice, std::string* why) {
  Builder b;
  const std::vector<cudnnBackendDescriptor_t> ops =
      p.pass == ConvPass::forward ? forward_ops(b, p) : backward_ops(b, p);
  return cudnn_graph::plan_of(b, ops, p.tf32, choice, why);
}

// A call as the graph sees it, with its cache key, its buffers and the notice's words;
// false outside the graph's scope. `x`, `w`, `y` have the forward's shapes whatever the
// pass; `inputs` is the dtype of the pass's inputs.
struct ConvCall {
  Problem p;
  GraphCall g;
};
bool graph_call(const KernelContext& ctx, ConvPass pass, DataType inputs, const Tensor& x, const Tensor& w,
                const Tensor& y, const Window& win, int64_t group, const int64_t align[5], ConvCall& c) {
  Problem& p = c.p;
  p.pass = pass;
  // fp32 inputs: FusedConv's forward and the data pass with its ReLU gradient only (the
  // fused epilogue is what the graph adds); 16-bit inputs: any pass (the tensor cores'
  // 16-bit rate is). The caller sets p.relu of a data pass before.
  const bool fused =
      (ctx.node.op_type == "FusedConv" && pass == ConvPass::forward) || (pass == ConvPass::data && p.relu);
  if (!cudnn_graph::graph_dtype(inputs, &p.in) || (inputs == DataType::Float32 && !fused)) return false;
  if (x.rank() != 4 || w.rank() != 4 || y.rank() != 4 || group != 1 || win.dilations[0] != 1 || win.dilations[1] != 1 ||
      x.numel() == 0 || w.numel() == 0 || y.numel() == 0)
    return false;
  p.x = x.dims(), p.w = w.dims(), p.y = y.dims();
  p.x_last = x.layout() == Layout::ChannelsLast, p.y_last = y.layout() == Layout::ChannelsLast;
  // KRSC strides for a KRSC w (cudnn_graph::tensor's ChannelsLast strides of K,C,R,S);
  // a filter gradient is written in its own layout: cuDNN writes dW KRSC, the layout
  // copy's Identity brings it back to the parameter's KCRS (runtime/layout.h).
  p.w_last = filter_krsc(w, p.x_last || p.y_last);
  p.strides = win.strides, p.dilations = win.dilations;
  p.pre = {win.pads[0], win.pads[1]}, p.post = {win.pads[2], win.pads[3]};
  p.tf32 = tf32_allowed(ctx);
  const char* math = inputs != DataType::Float32 ? dtype_word(inputs) : p.tf32 ? "tf32" : "strict";
  for (int i = 0; i < 5; ++i) p.align[i] = align[i];
  const bool drelu = pass == ConvPass::data && p.relu;
  const std::string pass_word = std::string(pass == ConvPass::forward ? "forward"
                                            : pass == ConvPass::data  ? "data"
                                                                      : "filter") +
                                (drelu ? "+drelu" : "");
  c.g.key = pass_word + "|x" + dims_text(p.x) + "|w" + dims_text(p.w) + "|y" + dims_text(p.y) + "|s" +
            dims_text(p.strides) + "|p" + dims_text(p.pre) + "," + dims_text(p.post) + "|" + math + "|a";
  for (int64_t v : p.align) c.g.key += std::to_string(v);
  if (p.x_last || p.y_last || p.w_last)
    c.g.key += std::string("|nhwc") + (p.x_last ? "x" : "") + (p.y_last ? "y" : "") + (p.w_last ? "w" : "");
  c.g.choice = cudnn_graph::plan_choice(ctx);
  c.g.key += c.g.choice.key();
  c.g.label = graph_label(ctx.node.op_type, pass, inputs) + (drelu ? " +drelu" : "");
  c.g.pattern = ctx.node.op_type + "." + pass_word;
  c.g.pass = pass_word;
  c.g.flops = 2.0 * static_cast<double>(y.numel()) * static_cast<double>(p.w[1] * p.w[2] * p.w[3]);
  c.g.precision = inputs != DataType::Float32 ? dtype_word(inputs) : p.tf32 ? "tf32" : "fp32";
  c.g.problem = "x " + dims_text(p.x) + " w " + dims_text(p.w) + " " + pass_word + ", " + math +
                (p.x_last || p.y_last ? ", NHWC" : "") + (p.w_last ? ", KRSC" : "");
  return true;
}

// Adds the forward's epilogue to `c` (its key, pattern and words).
void forward_epilogue(ConvCall& c, bool bias, bool relu, bool residual) {
  c.p.bias = bias, c.p.relu = relu, c.p.residual = residual;
  std::string epilogue = "conv";
  if (bias) epilogue += "+bias";
  if (relu) epilogue += "+relu";
  if (residual) epilogue += "+add";
  c.g.key += std::string("|") + (bias ? "b" : "") + (relu ? "r" : "") + (residual ? "z" : "");
  c.g.pattern = c.p.in == CUDNN_DATA_FLOAT ? "FusedConv." + epilogue : c.g.pattern + "." + epilogue;
  c.g.problem += ", " + epilogue;
}

// Gives `c` its plan builder, once its problem is complete.
void set_build(ConvCall& c) {
  c.g.build = [p = c.p](const cudnn_graph::PlanChoice& choice, std::string* why) { return build_plan(p, choice, why); };
}

// The forward's call for `a` with pointer alignments `align` (x, w, b, z, y). y is fp32,
// or 16-bit like x and w (then without a residual: the graph rounds only at its end).
bool forward_call(const KernelContext& ctx, const ConvGraphArgs& a, const int64_t align[5], ConvCall& c) {
  const bool y16 = a.y.dtype() != DataType::Float32;
  if (a.x.dtype() != a.w.dtype() || (y16 && (a.y.dtype() != a.x.dtype() || a.z)) ||
      (a.b && a.b->dtype() != DataType::Float32) ||
      (a.z && (a.z->dtype() != DataType::Float32 || a.z->layout() != a.y.layout())))
    return false;
  if (y16 && !cudnn_graph::graph_dtype(a.y.dtype(), &c.p.out)) return false;
  if (!graph_call(ctx, ConvPass::forward, a.x.dtype(), a.x, a.w, a.y, a.win, a.group, align, c)) return false;
  if (y16) {
    c.g.key += std::string("|y") + dtype_word(a.y.dtype());
    c.g.problem += std::string(", ") + dtype_word(a.y.dtype()) + " y";
  }
  forward_epilogue(c, a.b != nullptr, a.relu, a.z != nullptr);
  c.g.bufs.add(kX, a.x.raw());
  c.g.bufs.add(kW, a.w.raw());
  c.g.bufs.add(kY, a.y.raw());
  if (a.b) c.g.bufs.add(kB, a.b->raw());
  if (a.z) c.g.bufs.add(kZ, a.z->raw());
  c.g.bufs.out = a.y.raw();
  c.g.bufs.workspace_offset = a.workspace_offset;
  set_build(c);
  return true;
}

// A backward pass's call: x, w, y of the forward's shapes from the pass's tensors.
// The data pass's dx and relu_x may each be 16-bit like dy and w.
bool backward_call(const KernelContext& ctx, const ConvGradGraphArgs& a, const int64_t align[5], ConvCall& c) {
  const bool data = a.pass == ConvPass::data;
  const bool out16 = a.out.dtype() != DataType::Float32;
  const bool relu16 = a.relu_x && a.relu_x->dtype() != DataType::Float32;
  if (a.pass == ConvPass::forward || a.dy.dtype() != a.other.dtype() || (out16 && a.out.dtype() != a.dy.dtype()))
    return false;
  if (out16 && !cudnn_graph::graph_dtype(a.out.dtype(), &c.p.out)) return false;
  if (a.relu_x && (!data || (relu16 && a.relu_x->dtype() != a.dy.dtype()) || a.relu_x->dims() != a.out.dims() ||
                   a.relu_x->layout() != a.out.layout()))
    return false;
  if (relu16 && !cudnn_graph::graph_dtype(a.relu_x->dtype(), &c.p.relu_in)) return false;
  const Tensor& x = data ? a.out : a.other;
  const Tensor& w = data ? a.other : a.out;
  c.p.relu = a.relu_x != nullptr;
  if (!graph_call(ctx, a.pass, a.dy.dtype(), x, w, a.dy, a.win, a.group, align, c)) return false;
  if (out16) {
    c.g.key += std::string(data ? "|dx" : "|dw") + dtype_word(a.out.dtype());
    c.g.problem += std::string(", ") + dtype_word(a.out.dtype()) + (data ? " dx" : " dw");
  }
  if (relu16) {
    c.g.key += std::string("|rx") + dtype_word(a.relu_x->dtype());
    c.g.problem += std::string(", ") + dtype_word(a.relu_x->dtype()) + " relu_x";
  }
  c.g.bufs.add(kX, x.raw());
  c.g.bufs.add(kW, w.raw());
  c.g.bufs.add(kY, a.dy.raw());
  if (a.relu_x) c.g.bufs.add(kReluX, a.relu_x->raw());
  c.g.bufs.out = a.out.raw();
  c.g.bufs.workspace_offset = a.workspace_offset;
  set_build(c);
  return true;
}

}  // namespace

std::string graph_label(const std::string& op_type, ConvPass pass, DataType inputs) {
  const char* pass_word = pass == ConvPass::forward ? "" : pass == ConvPass::data ? ".data" : ".filter";
  if (inputs == DataType::Float32) return op_type + pass_word;
  return op_type + pass_word + " (" + dtype_word(inputs) + " inputs)";
}

bool conv_graph_forward(const KernelContext& ctx, const ConvGraphArgs& a) {
  const void* ptrs[5] = {a.x.raw(), a.w.raw(), a.b ? a.b->raw() : nullptr, a.z ? a.z->raw() : nullptr, a.y.raw()};
  int64_t align[5];
  for (int i = 0; i < 5; ++i) align[i] = ptrs[i] ? cudnn_graph::alignment(ptrs[i]) : 16;
  ConvCall c;
  if (!forward_call(ctx, a, align, c)) {  // outside the graph's scope: the legacy path
    fusion_tally().record(graph_label(ctx.node.op_type, ConvPass::forward, a.x.dtype()), ctx.node.name, false);
    return false;
  }
  return cudnn_graph::run(ctx, c.g, a.prepare, a.instead);
}

bool conv_graph_backward(const KernelContext& ctx, const ConvGradGraphArgs& a) {
  const bool data = a.pass == ConvPass::data;
  const void* x = data ? a.out.raw() : a.other.raw();
  const void* w = data ? a.other.raw() : a.out.raw();
  const int64_t align[5] = {cudnn_graph::alignment(x), cudnn_graph::alignment(w), 16,
                            a.relu_x ? cudnn_graph::alignment(a.relu_x->raw()) : 16,
                            cudnn_graph::alignment(a.dy.raw())};
  ConvCall c;
  if (!backward_call(ctx, a, align, c)) {
    fusion_tally().record(graph_label(ctx.node.op_type, a.pass, a.dy.dtype()) + (a.relu_x ? " +drelu" : ""),
                          ctx.node.name, false);
    return false;
  }
  return cudnn_graph::run(ctx, c.g, a.prepare, a.instead);
}

int64_t conv_graph_workspace(const KernelContext& ctx, const ConvGraphArgs& a) {
  const int64_t align[5] = {16, 16, 16, 16, 16};
  ConvCall c;
  return forward_call(ctx, a, align, c) ? cudnn_graph::plan_workspace(c.g) : -1;
}

int64_t conv_graph_backward_workspace(const KernelContext& ctx, const ConvGradGraphArgs& a) {
  const int64_t align[5] = {16, 16, 16, 16, 16};
  ConvCall c;
  return backward_call(ctx, a, align, c) ? cudnn_graph::plan_workspace(c.g) : -1;
}

}  // namespace trainrt::cuda
