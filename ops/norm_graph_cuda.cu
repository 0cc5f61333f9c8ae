// Batch normalization as cuDNN graphs: ops/norm_graph_cuda.h says what and why.
// Host code only (no kernels of its own). The float32 graphs ran on an H200
// (docs/gpu-runs.md); the 16-bit ones are compiled, not run.
#include <cudnn.h>

#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "ops/core/bn_graph_scope.h"
#include "ops/cuda/cudnn_graph.h"
#include "ops/cuda/graph_fallback.h"
#include "ops/norm_graph_cuda.h"

namespace trainrt::cuda {

namespace {

using cudnn_graph::Builder;
using cudnn_graph::dims_text;
using cudnn_graph::dtype_word;
using cudnn_graph::GraphCall;
using cudnn_graph::GraphPlan;
using cudnn_graph::tensor;

// Unique ids of the graph's tensors (the variant pack names buffers by them).
enum Uid : int64_t {
  kX = 1,
  kScale,
  kBias,
  kMean,
  kInvStd,
  kEps,
  kY,
  kDy,
  kReluY,
  kDx,
  kDscale,
  kDbias,
  kNormOut = 101,  // the forward's normalized value before the ReLU
  kMaskedDy,       // the backward's dy after the ReLU's gradient
};

// What the cache key and the graph depend on: x's shape (N,C,H,W, stored NHWC), the
// direction, the ReLU, the math filter, the activations' storage and the buffers'
// alignments.
struct Problem {
  bool backward = false, relu = false, tf32 = false;
  std::vector<int64_t> x;
  // forward: x, y, scale, bias; backward: x, dy, dx, relu_y, scale, dscale, dbias
  std::vector<int64_t> align;
  // The activation-shaped tensors' types, in align's order (forward: x, y; backward: x,
  // dy, dx, relu_y): float32, or bfloat16 / half where stored in 16 bits
  // (ops/core/bn_graph_scope.h). Statistics and per-channel tensors stay float32.
  std::vector<DataType> io;
};

// A per-channel 1,C,1,1 tensor in NHWC strides (C contiguous values).
cudnnBackendDescriptor_t channel(Builder& b, int64_t uid, const Problem& p, int64_t align) {
  return tensor(b, uid, {1, p.x[1], 1, 1}, align, false, CUDNN_DATA_FLOAT, true);
}

// The x-shaped NHWC tensor of Problem slot `slot` (its type and alignment).
cudnnBackendDescriptor_t activation(Builder& b, int64_t uid, const Problem& p, size_t slot) {
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnn_graph::graph_dtype(p.io[slot], &type);
  return tensor(b, uid, p.x, p.align[slot], false, type, true);
}
// A virtual x-shaped intermediate: float32, whatever the storage (the math's precision).
cudnnBackendDescriptor_t virtual_activation(Builder& b, int64_t uid, const Problem& p) {
  return tensor(b, uid, p.x, 16, true, CUDNN_DATA_FLOAT, true);
}

void set_mode(Builder& b, cudnnBackendDescriptor_t op, cudnnBackendAttributeName_t name) {
  const cudnnBackendNormMode_t mode = CUDNN_BATCH_NORM;
  b.set(op, name, CUDNN_TYPE_NORM_MODE, 1, &mode, "normalization mode");
}

// NORM_FORWARD (training) then, with the ReLU, RELU_FWD.
std::vector<cudnnBackendDescriptor_t> forward_ops(Builder& b, const Problem& p) {
  cudnnBackendDescriptor_t x = activation(b, kX, p, 0);
  cudnnBackendDescriptor_t y = activation(b, kY, p, 1);
  cudnnBackendDescriptor_t normed = p.relu ? virtual_activation(b, kNormOut, p) : y;
  cudnnBackendDescriptor_t scale = channel(b, kScale, p, p.align[2]);
  cudnnBackendDescriptor_t bias = channel(b, kBias, p, p.align[3]);
  cudnnBackendDescriptor_t mean = channel(b, kMean, p, 16);
  cudnnBackendDescriptor_t inv_std = channel(b, kInvStd, p, 16);
  cudnnBackendDescriptor_t eps = cudnn_graph::scalar_tensor(b, kEps, CUDNN_DATA_DOUBLE);
  cudnnBackendDescriptor_t op =
      b.make(CUDNN_BACKEND_OPERATION_NORM_FORWARD_DESCRIPTOR, "normalization forward operation");
  set_mode(b, op, CUDNN_ATTR_OPERATION_NORM_FWD_MODE);
  const cudnnBackendNormFwdPhase_t phase = CUDNN_NORM_FWD_TRAINING;
  b.set(op, CUDNN_ATTR_OPERATION_NORM_FWD_PHASE, CUDNN_TYPE_NORM_FWD_PHASE, 1, &phase, "normalization phase");
  b.set_descs(op, {{CUDNN_ATTR_OPERATION_NORM_FWD_XDESC, x, "normalization x"},
                   {CUDNN_ATTR_OPERATION_NORM_FWD_MEAN_DESC, mean, "normalization mean"},
                   {CUDNN_ATTR_OPERATION_NORM_FWD_INV_VARIANCE_DESC, inv_std, "normalization inverse std"},
                   {CUDNN_ATTR_OPERATION_NORM_FWD_SCALE_DESC, scale, "normalization scale"},
                   {CUDNN_ATTR_OPERATION_NORM_FWD_BIAS_DESC, bias, "normalization bias"},
                   {CUDNN_ATTR_OPERATION_NORM_FWD_EPSILON_DESC, eps, "normalization epsilon"},
                   {CUDNN_ATTR_OPERATION_NORM_FWD_YDESC, normed, "normalization y"}});
  b.finalize(op, "normalization forward finalize");
  if (!p.relu) return {op};
  return {op, cudnn_graph::pointwise(b, CUDNN_POINTWISE_RELU_FWD, normed, nullptr, y)};
}

// With the ReLU, RELU_BWD of dy against relu_y; then NORM_BACKWARD from the saved
// mean and inverse std.
std::vector<cudnnBackendDescriptor_t> backward_ops(Builder& b, const Problem& p) {
  std::vector<cudnnBackendDescriptor_t> ops;
  cudnnBackendDescriptor_t x = activation(b, kX, p, 0);
  cudnnBackendDescriptor_t dy = activation(b, kDy, p, 1);
  cudnnBackendDescriptor_t dx = activation(b, kDx, p, 2);
  if (p.relu) {
    cudnnBackendDescriptor_t relu_y = activation(b, kReluY, p, 3);
    cudnnBackendDescriptor_t masked = virtual_activation(b, kMaskedDy, p);
    ops.push_back(cudnn_graph::relu_backward(b, dy, relu_y, masked));
    dy = masked;
  }
  cudnnBackendDescriptor_t op =
      b.make(CUDNN_BACKEND_OPERATION_NORM_BACKWARD_DESCRIPTOR, "normalization backward operation");
  set_mode(b, op, CUDNN_ATTR_OPERATION_NORM_BWD_MODE);
  b.set_descs(
      op,
      {{CUDNN_ATTR_OPERATION_NORM_BWD_XDESC, x, "normalization backward x"},
       {CUDNN_ATTR_OPERATION_NORM_BWD_MEAN_DESC, channel(b, kMean, p, 16), "normalization backward mean"},
       {CUDNN_ATTR_OPERATION_NORM_BWD_INV_VARIANCE_DESC, channel(b, kInvStd, p, 16),
        "normalization backward inverse std"},
       {CUDNN_ATTR_OPERATION_NORM_BWD_DYDESC, dy, "normalization backward dy"},
       {CUDNN_ATTR_OPERATION_NORM_BWD_SCALE_DESC, channel(b, kScale, p, p.align[4]), "normalization backward scale"},
       {CUDNN_ATTR_OPERATION_NORM_BWD_DSCALE_DESC, channel(b, kDscale, p, p.align[5]), "normalization backward dscale"},
       {CUDNN_ATTR_OPERATION_NORM_BWD_DBIAS_DESC, channel(b, kDbias, p, p.align[6]), "normalization backward dbias"},
       {CUDNN_ATTR_OPERATION_NORM_BWD_DXDESC, dx, "normalization backward dx"}});
  b.finalize(op, "normalization backward finalize");
  ops.push_back(op);
  return ops;
}

std::shared_ptr<const GraphPlan> build_plan(const Problem& p, const cudnn_graph::PlanChoice& choice, std::string* why) {
  Builder b;
  const std::vector<cudnnBackendDescriptor_t> ops = p.backward ? backward_ops(b, p) : forward_ops(b, p);
  return cudnn_graph::plan_of(b, ops, p.tf32, choice, why);
}

// The scope (ops/core/bn_graph_scope.h): true, with each activation's type in p.io
// (an omitted one float32), when the graphs take the node's tensors.
bool in_scope(const KernelContext& ctx, const Tensor& x, std::initializer_list<const Tensor*> activations,
              std::initializer_list<const Tensor*> channels, Problem& p) {
  if (!bn_graph_scope::reason(x, activations, channels, ctx.math).empty()) return false;
  p.io.push_back(x.dtype());
  for (const Tensor* t : activations) p.io.push_back(t ? t->dtype() : DataType::Float32);
  return true;
}

// Key, words, label and builder of problem `p` for node `ctx.node`.
void describe(const KernelContext& ctx, Problem p, GraphCall& c) {
  const std::string dir = p.backward ? (p.relu ? "backward+drelu" : "backward") : (p.relu ? "forward+relu" : "forward");
  // The activations' storage: "fp32", or each one's word where any is 16-bit.
  std::string io;
  const char* word16 = nullptr;  // the 16-bit type's word ("bf16", "fp16") where any is
  for (DataType t : p.io) {
    io += std::string(io.empty() ? "" : ",") + dtype_word(t);
    if (t != DataType::Float32) word16 = dtype_word(t);
  }
  const bool any16 = word16 != nullptr;
  if (!any16) io = "fp32";
  c.key =
      "BatchNormalization." + dir + "|x" + dims_text(p.x) + "|nhwc|" + (p.tf32 ? "tf32" : "strict") + "|io" + io + "|a";
  for (int64_t v : p.align) c.key += std::to_string(v);
  c.choice = cudnn_graph::plan_choice(ctx);
  c.key += c.choice.key();
  c.pattern = "BatchNormalization." + dir;
  c.pass = dir;
  c.problem = "x " + dims_text(p.x) + " " + dir + ", NHWC" + (any16 ? ", " + io + " storage" : "");
  c.label = bn_graph_label(ctx.node.op_type, p.relu);
  c.precision = any16 ? word16 : p.tf32 ? "tf32" : "fp32";
  c.build = [p = std::move(p)](const cudnn_graph::PlanChoice& choice, std::string* why) {
    return build_plan(p, choice, why);
  };
}

int64_t align_of(const void* ptr, bool planning) { return planning ? 16 : cudnn_graph::alignment(ptr); }

bool forward_call(const KernelContext& ctx, const BnForwardGraphArgs& a, bool planning, GraphCall& c) {
  Problem p;
  if (!in_scope(ctx, a.x, {&a.y}, {&a.scale, &a.bias}, p)) return false;
  p.relu = a.relu;
  p.tf32 = tf32_allowed(ctx);
  p.x = a.x.dims();
  for (const void* ptr : std::initializer_list<const void*>{a.x.raw(), a.y.raw(), a.scale.raw(), a.bias.raw()})
    p.align.push_back(align_of(ptr, planning));
  describe(ctx, std::move(p), c);
  c.bufs.add(kX, a.x.raw());
  c.bufs.add(kY, a.y.raw());
  c.bufs.add(kScale, a.scale.raw());
  c.bufs.add(kBias, a.bias.raw());
  c.bufs.add(kMean, a.mean);
  c.bufs.add(kInvStd, a.inv_std);
  c.bufs.out = a.y.raw();
  c.bufs.workspace_offset = a.workspace_offset;
  return true;
}

bool backward_call(const KernelContext& ctx, const BnBackwardGraphArgs& a, bool planning, GraphCall& c) {
  Problem p;
  if (!in_scope(ctx, a.x, {&a.dy, &a.dx, a.relu_y}, {&a.scale}, p)) return false;
  p.backward = true;
  p.relu = a.relu_y != nullptr;
  p.tf32 = tf32_allowed(ctx);
  p.x = a.x.dims();
  for (const void* ptr : std::initializer_list<const void*>{
           a.x.raw(), a.dy.raw(), a.dx.raw(), a.relu_y ? a.relu_y->raw() : nullptr, a.scale.raw(),
           static_cast<const void*>(a.dscale), static_cast<const void*>(a.dbias)})
    p.align.push_back(ptr ? align_of(ptr, planning) : 16);
  describe(ctx, std::move(p), c);
  c.bufs.add(kX, a.x.raw());
  c.bufs.add(kDy, a.dy.raw());
  c.bufs.add(kDx, a.dx.raw());
  if (a.relu_y) c.bufs.add(kReluY, a.relu_y->raw());
  c.bufs.add(kScale, a.scale.raw());
  c.bufs.add(kMean, a.mean);
  c.bufs.add(kInvStd, a.inv_std);
  c.bufs.add(kDscale, a.dscale);
  c.bufs.add(kDbias, a.dbias);
  c.bufs.out = a.dx.raw();
  c.bufs.workspace_offset = a.workspace_offset;
  return true;
}

}  // namespace

std::string bn_graph_label(const std::string& op_type, bool relu) {
  return op_type == "BatchNormalizationGrad" && relu ? op_type + " +drelu" : op_type;
}

bool bn_graph_forward(const KernelContext& ctx, const BnForwardGraphArgs& a) {
  GraphCall c;
  if (!forward_call(ctx, a, false, c)) {  // outside the graph's scope: the own kernels
    fusion_tally().record(bn_graph_label(ctx.node.op_type, a.relu), ctx.node.name, false);
    return false;
  }
  // epsilon is a by-value scalar: the variant pack points at host memory, alive until
  // the graph (and any timing of it) has been queued
  const double eps = a.eps;
  c.bufs.add(kEps, &eps);
  return cudnn_graph::run(ctx, c, nullptr, "trainrt's own batch-norm kernels");
}

bool bn_graph_backward(const KernelContext& ctx, const BnBackwardGraphArgs& a) {
  GraphCall c;
  if (!backward_call(ctx, a, false, c)) {
    fusion_tally().record(bn_graph_label(ctx.node.op_type, a.relu_y != nullptr), ctx.node.name, false);
    return false;
  }
  return cudnn_graph::run(ctx, c, a.prepare, "trainrt's own batch-norm kernels");
}

int64_t bn_graph_forward_workspace(const KernelContext& ctx, const BnForwardGraphArgs& a) {
  GraphCall c;
  return forward_call(ctx, a, true, c) ? cudnn_graph::plan_workspace(c) : -1;
}

int64_t bn_graph_backward_workspace(const KernelContext& ctx, const BnBackwardGraphArgs& a) {
  GraphCall c;
  return backward_call(ctx, a, true, c) ? cudnn_graph::plan_workspace(c) : -1;
}

}  // namespace trainrt::cuda
