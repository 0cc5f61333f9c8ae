// Which cuDNN-graph fusion pattern each fused step of a training graph maps to, or why
// it would run unfused: the plan for fused cuDNN graphs on the cuda backend, decided
// from the graph alone (no GPU, no CUDA), so `trainrt inspect --training --device cuda`
// can print it anywhere and tests check it on the CPU.
//
//   std::vector<FusionSite> s = cudnn_fusion_sites(fused_training_graph);
//   for (const FusionRow& r : cudnn_fusion_table(s)) ...   // pattern, fused, unfused by reason
//
// Sites (graph after fuse_training_graph; passes/fuse_conv.cpp, passes/fuse_dropout.cpp):
//   FusedConv(X, W, [B], [Z]; activation)  -> "conv[_bias][_relu][_add]"
//        cuDNN generic runtime fusion: convolution fprop followed by a pointwise chain
//        (bias add, ReLU, residual add); Y = act(conv + B) + Z as trainrt defines it.
//   BatchNormalizationRelu (training)      -> "bn_relu_fwd"
//        batch-norm forward training with ReLU: cuDNN's specialized runtime fusion
//        engine BnAddRelu (batch-norm training forward is served by that engine only).
//        Not BatchNormalizationReluDropout: its mask is applied by its own apply kernel
//        before the store (ops/fused_cuda.cu), after the own statistics kernels.
//   ConvGrad with dx_relu (trainrt fused the ReLU gradient of X into it), or a ReluGrad(dY,
//        Y) whose dY is the sole use of a ConvGrad's dX  -> "dgrad_drelu"
//        convolution dgrad followed by the ReLU gradient (generic runtime fusion).
//   ReluGrad(dY, Y) read only by a BatchNormalizationGrad, Y from BatchNormalizationRelu
//        -> "bn_relu_bwd": cuDNN's DReluForkDBn engine (batch-norm backward is served
//        by that specialized engine only).
//   DropoutReluGrad in either place: the same pattern, unfused (the dropout mask and
//        scale between the two gradients are not part of either pattern).
// A site is unfused, with the reason, when its values are not fp32/fp16/bf16, not 4-D
// (N,C,H,W), when the convolution is grouped or dilated or an activation is not ReLU
// (the first fused kernels' scope), or when a batch-norm's channel count is not a
// multiple of 4 (fp32) or 8 (fp16, bf16), which BnAddRelu and DReluForkDBn require.
// The cuda FusedConv forward (ops/conv_graph_cuda.h) tries its cuDNN graph exactly on
// the conv sites this counts as fused (on fp32 values: activations are fp32 in memory
// in every precision); keep the two rules alike. So do the batch-norm graphs
// (ops/norm_graph_cuda.h) on the bn sites, given the backend's default NHWC activations
// (with `--layout nchw` every batch-norm runs the own kernels) and, for bn_relu_bwd, the
// forward's saved statistics, which the training graph always passes. Whether cuDNN then takes a site is known only at
// run time: one it turns down falls back and says so once.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace trainrt {

struct FusionSite {
  std::string node;     // the node the pattern is anchored at (the fused node, or the ReLU gradient)
  std::string op;       // its op type
  std::string pattern;  // "conv_bias_relu", "bn_relu_fwd", "bn_relu_bwd", "dgrad_drelu", ...
  std::string reason;   // empty: fusable; else why it runs unfused
};

std::vector<FusionSite> cudnn_fusion_sites(const Graph& g);

struct FusionRow {
  std::string pattern;
  size_t fused = 0;
  std::map<std::string, size_t> unfused;  // reason -> count
};

// One row per pattern, in the order of first appearance in the graph.
std::vector<FusionRow> cudnn_fusion_table(const std::vector<FusionSite>& sites);

// Under --precision bf16/fp16 every convolution pass first tries a cuDNN graph on 16-bit
// copies of its rounded inputs (ops/conv_graph_cuda.h): one site per pass, pattern
// "conv_fwd" (Conv, FusedConv), "conv_dgrad" (ConvGrad computing dX) or "conv_wgrad"
// (ConvGrad computing dW). A site is out of that graph's scope, with the reason, when the
// convolution is grouped or dilated, or a value it reads or writes is not a 4-D float32
// tensor (the copies are made of float32 values: the reference rounds no other dtype).
// The cuda kernels decide by the same rule (keep the two alike); whether cuDNN then
// takes a problem is known only at run time.
std::vector<FusionSite> cudnn_conv16_sites(const Graph& g);

}  // namespace trainrt
