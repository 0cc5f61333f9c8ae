// Convolutions as cuDNN graphs (the backend descriptor API), for ops/conv_cuda.cu, which
// keeps cuDNN's legacy convolution API (and its own epilogue kernel) as the fallback.
//
//   if (!conv_graph_forward(ctx, ConvGraphArgs{x, w, b, z, y, win, group, relu})) legacy();
//   if (!conv_graph_backward(ctx, ConvGradGraphArgs{ConvPass::data, dy, w, dx, win})) legacy();
//
//   forward  y = act(conv(x, w) + b) + z  x: N,C,H,W  w: M,C,kH,kW  b: M (optional)
//                                         z: N,M,Ho,Wo (optional)  act: none | Relu
//   data     dx = conv's data gradient of dy through w     (ConvGrad's dX)
//            [then dx = relu_x > 0 ? dx : 0: ConvGrad's dx_relu, RELU_BWD in the graph]
//   filter   dw = conv's filter gradient of dy against x   (ConvGrad's dW)
//
// The forward is one operation graph: convolution forward into a virtual tensor, then a
// pointwise chain (ADD b broadcast over N,H,W; RELU_FWD; ADD z), each intermediate
// virtual, the last writing y; with no epilogue the convolution writes y itself. Each
// backward pass is a graph of its one operation; the data pass with relu_x writes a
// virtual dx that a pointwise RELU_BWD (against relu_x) turns into dx. Engines come from the heuristics (mode
// A, then the fallback list), the first that finalizes within 256 MiB of workspace;
// non-deterministic engines only when no deterministic one does; never one that
// down-converts its inputs or reduces in reduced precision. Where TF32 is not allowed
// (cuda_util.h's tf32_allowed: --fp32-math strict on inputs not rounded by --precision
// bf16/fp16), engines that carry the TENSOR_CORE numerical note (TF32 for fp32 data) are
// left out. The execution plan is cached per problem (pass, input dtype, shapes,
// resolved window, which of b / Relu / z, fp32 math, the pointers' alignments).
// With KernelContext::chooser set (a run with a timing cache), every engine config that
// passes those filters is a candidate: the problem's first call takes the cached choice
// or times each candidate with cudaEvents on its own buffers (not while the stream is
// captured) and runs the fastest from then on; the workspace rule then reserves the
// most any candidate needs (ops/core/engine_choice.h, docs/cuda.md "Engine timing").
//
// Input dtypes: fp32 (FusedConv's forward and the data pass with relu_x only: the fused
// epilogue is the point), or,
// under --precision bf16/fp16, bfloat16 / IEEE half copies of the inputs the reference
// rounds (math_rounded_inputs), for every pass of Conv, FusedConv and ConvGrad. Those
// 16-bit copies hold exactly the reference's rounded values (round_to_math is
// float_to_bfloat16 / float_to_half widened back), the engines multiply them exactly and
// accumulate in fp32 into fp32 outputs: the reference's numerics at the tensor cores'
// 16-bit rate (with half the input bytes of fp32 copies).
//
// Scope: 4-D, ungrouped, undilated, inputs of one dtype (above), fp32 outputs
// (runtime/cudnn_fusion.h's rule for a fusable FusedConv site; keep the two alike), and
// a forward without z, a data pass (with or without relu_x) or a filter pass whose y
// (dx, dw) is of its 16-bit inputs' type: a Y (dX) stored in 16 bits (runtime/narrow.h;
// ops/conv_cuda.cu forward16, grad16), a dW the step rounds anyway (filter16 widens it
// after the graph), the fp32 result (after RELU_BWD, in fp32) converted as cuDNN
// writes it (part of the cache key). relu_x is fp32, or of the 16-bit inputs' type
// where X is stored so (an X its writer rounds; its type part of the cache key).
// Outside it these return false at once and say nothing. Inside it, a problem cuDNN
// turns down (no engine, a plan that does not finalize, NOT_SUPPORTED when it executes)
// runs the legacy path from then on and is reported once on stderr
// (ops/cuda/graph_fallback.h). Every call records into fusion_tally() whether its node
// ran a graph, under the label of graph_label().
//
// Filters: w (dw) is described as it is stored, KCRS (Plain) or KRSC (ChannelsLast, the
// copy runtime/layout.h add_layout_copies makes for the cuda convolutions: strides
// C*R*S, 1, S*C, C for dims K,C,R,S, what cuDNN's NHWC and runtime-fusion engines read);
// a Plain 1x1 or depthwise filter beside NHWC activations is the same bytes as KRSC and
// is described so (filter_krsc).
//
// Compiled in CI, never run: no GPU has executed it yet.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "ops/core/window.h"
#include "ops/cuda/cuda_util.h"

namespace trainrt::cuda {

// Whether filter w (K,C,R,S) is stored KRSC: ChannelsLast, or Plain where the two orders
// are the same bytes (C == 1 or R*S == 1, layout_fits) and the activations are NHWC
// (`nhwc`), so that cuDNN sees one layout for x, w and y.
inline bool filter_krsc(const Tensor& w, bool nhwc) {
  return w.layout() == Layout::ChannelsLast ||
         (nhwc && w.rank() == 4 && w.layout() == Layout::Plain && !layout_fits(Layout::ChannelsLast, w.dims()));
}

struct ConvGraphArgs {
  const Tensor& x;
  const Tensor& w;
  const Tensor* b;  // null: no bias
  const Tensor* z;  // null: no residual
  Tensor& y;
  const Window& win;  // resolved for x (explicit pads)
  int64_t group = 1;
  bool relu = false;
  // Bytes at the front of the shared workspace the caller uses (its rounded copies of
  // the inputs); the graph's own workspace follows them.
  size_t workspace_offset = 0;
  // Queued just before the graph first runs in this call, only when it runs (writes
  // the 16-bit copies x and w point at); null: nothing to prepare.
  const std::function<void()>* prepare = nullptr;
  // What runs where cuDNN turns the graph down (the fallback notice's words).
  const char* instead = "the unfused convolution + epilogue";
};

enum class ConvPass { forward, data, filter };

// ConvGrad's data (dx from dy and w) or filter (dw from x and dy) pass.
struct ConvGradGraphArgs {
  ConvPass pass = ConvPass::data;  // data or filter
  const Tensor& dy;                // N,M,Ho,Wo
  const Tensor& other;             // data: w (M,C,kH,kW); filter: x (N,C,H,W)
  Tensor& out;                     // data: dx (like x); filter: dw (like w)
  const Window& win;               // resolved for x (explicit pads)
  int64_t group = 1;
  size_t workspace_offset = 0;
  const std::function<void()>* prepare = nullptr;
  // Data pass only: the tensor (like dx) whose ReLU gradient dx also goes through
  // (ConvGrad's dx_relu: X itself, fp32 or stored in dy's 16-bit type); null: none.
  const Tensor* relu_x = nullptr;
  // What runs where cuDNN turns the graph down (the fallback notice's words).
  const char* instead = "cuDNN's legacy convolution API on fp32 copies";
};

// True when the output was computed by the graph (queued on the context's stream);
// false when the caller must run the legacy path.
bool conv_graph_forward(const KernelContext& ctx, const ConvGraphArgs& a);
bool conv_graph_backward(const KernelContext& ctx, const ConvGradGraphArgs& a);

// The workspace bytes the graph of `a`'s problem needs (after workspace_offset), asked
// before the buffers exist (planned for 16-byte-aligned buffers, the least the arena
// gives; a call whose buffers are aligned wider may pick another engine); -1 outside the
// scope or when cuDNN does not support the problem (its notice comes with the first call).
int64_t conv_graph_workspace(const KernelContext& ctx, const ConvGraphArgs& a);
int64_t conv_graph_backward_workspace(const KernelContext& ctx, const ConvGradGraphArgs& a);

// The fusion tally's label of a node's graph: the op and the pass ("FusedConv" for the
// forward, "ConvGrad.data"), then the inputs' dtype where 16-bit, e.g. "ConvGrad.data
// (bf16 inputs)"; a data pass with its ReLU gradient adds " +drelu".
std::string graph_label(const std::string& op_type, ConvPass pass, DataType inputs);

}  // namespace trainrt::cuda
