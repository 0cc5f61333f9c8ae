// Training BatchNormalization (with its ReLU) and BatchNormalizationGrad (with the ReLU's
// gradient) as cuDNN graphs, for ops/norm_cuda.cu, which keeps its own kernels as the
// fallback.
//
//   if (!bn_graph_forward(ctx, BnForwardGraphArgs{x, scale, bias, y, relu, eps, mean, inv_std})) own();
//   else finish_from(mean, inv_std);   // running and saved statistics, trainrt's way
//   if (!bn_graph_backward(ctx, BnBackwardGraphArgs{dy, x, scale, relu_y, mean, inv_std, dx, ds, db})) own();
//
//   forward   y = [relu](scale * (x - mean) * inv_std + bias)   x, y: N,C,H,W NHWC
//             mean[C], inv_std[C] = 1/sqrt(biased var + eps): the batch's, written by cuDNN
//   backward  dy' = relu_y > 0 ? dy : 0 (with relu_y), else dy
//             dx, dscale[C], dbias[C]: BatchNormalizationGrad of dy' from the given
//             mean and inv_std (the forward's saved statistics)
//
// The forward is one operation graph: NORM_FORWARD (batch norm, training phase; epsilon
// passed by value; no running statistics: cuDNN's running variance is the unbiased one,
// ONNX's the biased, so the caller writes them from mean and inv_std through
// ops/core/batchnorm_stats.h) into a virtual tensor, then a pointwise RELU_FWD writing y;
// without the ReLU the normalization writes y. The backward: a pointwise RELU_BWD of dy
// against relu_y into a virtual tensor, then NORM_BACKWARD; without relu_y the
// normalization reads dy. These are the shapes of cuDNN's BnAddRelu and DReluForkDBn
// runtime fusion engines (without the residual add, which trainrt's graph does not fuse
// here). Engines, timing cache and the per-problem fallback with its one-line notice are
// ops/cuda/cudnn_graph.h's.
//
// Scope (ops/core/bn_graph_scope.h, tested on the CPU): 4-D, every activation-shaped
// tensor ChannelsLast (those engines take NHWC), each float32 or a float32 value stored
// in 16 bits under the call's math (described as bfloat16 / half: what those engines are
// built for), per-channel tensors float32, C a multiple of 4 (8 with 16-bit storage),
// non-empty (runtime/cudnn_fusion.cpp's rule for a fusable site; keep the two alike).
// Outside it these return false at once, say nothing and record the node as unfused in
// the fusion tally. The intermediates (the normalized value before the ReLU, the masked
// dy) are float32 virtual tensors; a 16-bit output is converted once, as cuDNN writes it.
//
// The float32 graphs ran on an H200 (docs/gpu-runs.md: BN+ReLU forward at all 13 sites,
// the backward at 6, the backward with the ReLU gradient finding no engine); on 16-bit
// storage they are compiled, not run.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>

#include "ops/cuda/cuda_util.h"

namespace trainrt::cuda {

struct BnForwardGraphArgs {
  const Tensor& x;
  const Tensor& scale;
  const Tensor& bias;
  Tensor& y;
  bool relu = false;
  double eps = 1e-5;
  float* mean = nullptr;     // C values written (device memory; null when only planning)
  float* inv_std = nullptr;  // C values written
  // Bytes at the front of the shared workspace the caller uses (mean, inv_std and its
  // own); the graph's workspace follows them.
  size_t workspace_offset = 0;
};

struct BnBackwardGraphArgs {
  const Tensor& dy;
  const Tensor& x;
  const Tensor& scale;
  const Tensor* relu_y;  // null: no ReLU gradient
  const float* mean = nullptr;
  const float* inv_std = nullptr;
  Tensor& dx;
  float* dscale = nullptr;  // C values written (the caller's output or scratch)
  float* dbias = nullptr;
  size_t workspace_offset = 0;
  // Queued just before the graph first runs in this call, only when it runs (writes
  // inv_std from the saved variance); null: nothing to prepare.
  const std::function<void()>* prepare = nullptr;
};

// True when the outputs were computed by the graph (queued on the context's stream);
// false when the caller must run its own kernels.
bool bn_graph_forward(const KernelContext& ctx, const BnForwardGraphArgs& a);
bool bn_graph_backward(const KernelContext& ctx, const BnBackwardGraphArgs& a);

// The workspace bytes the graph of `a`'s problem needs after workspace_offset, asked
// before the buffers exist (16-byte alignment assumed); -1 outside the scope or when
// cuDNN does not support the problem.
int64_t bn_graph_forward_workspace(const KernelContext& ctx, const BnForwardGraphArgs& a);
int64_t bn_graph_backward_workspace(const KernelContext& ctx, const BnBackwardGraphArgs& a);

// The fusion tally's label of a node's graph: "BatchNormalizationRelu",
// "BatchNormalization", "BatchNormalizationGrad +drelu", "BatchNormalizationGrad".
std::string bn_graph_label(const std::string& op_type, bool relu);

}  // namespace trainrt::cuda
