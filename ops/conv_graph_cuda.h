// FusedConv's forward as one cuDNN graph (the backend descriptor API), for
// ops/conv_cuda.cu, which keeps its legacy convolution + epilogue as the fallback.
//
//   if (!conv_graph_forward(ctx, ConvGraphArgs{x, w, b, z, y, win, group, relu})) legacy();
//
//   y = act(conv(x, w) + b) + z      x: N,C,H,W  w: M,C,kH,kW  b: M (optional)
//                                    z: N,M,Ho,Wo (optional)  act: none | Relu
//
// One operation graph: convolution forward into a virtual tensor, then a pointwise
// chain (ADD b broadcast over N,H,W; RELU_FWD; ADD z), each intermediate virtual, the
// last writing y. Engines come from the heuristics (mode A, then the fallback list),
// the first that finalizes within 256 MiB of workspace; non-deterministic engines only
// when no deterministic one does; never one that down-converts its inputs. Where TF32
// is not allowed (cuda_util.h's tf32_allowed: --fp32-math strict on inputs not rounded
// by --precision bf16/fp16), engines that carry the TENSOR_CORE numerical note (TF32
// for fp32 data) are left out. The execution plan is cached per problem (dtype, shapes,
// resolved window, which of b / Relu / z, fp32 math, the pointers' alignments).
// With KernelContext::chooser set (a run with a timing cache), every engine config that
// passes those filters is a candidate: the problem's first call takes the cached choice
// or times each candidate with cudaEvents on its own buffers (not while the stream is
// captured) and runs the fastest from then on; the workspace rule then reserves the
// most any candidate needs (ops/core/engine_choice.h, docs/cuda.md "Engine timing").
//
// Scope: fp32, 4-D, ungrouped, undilated (runtime/cudnn_fusion.h's rule for a fusable
// FusedConv site; keep the two alike). Outside it this returns false at once and says
// nothing. Inside it, a problem cuDNN turns down (no engine, a plan that does not
// finalize, NOT_SUPPORTED when it executes) runs the legacy path from then on and is
// reported once on stderr (ops/core/graph_fallback.h).
//
// Compiled in CI, never run: no GPU has executed it yet.
#pragma once

#include <cstdint>

#include "ops/core/cuda_util.h"
#include "ops/core/window.h"

namespace trainrt::cuda {

struct ConvGraphArgs {
  const Tensor& x;
  const Tensor& w;
  const Tensor* b;  // null: no bias
  const Tensor* z;  // null: no residual
  Tensor& y;
  const Window& win;  // resolved for x (explicit pads)
  int64_t group = 1;
  bool relu = false;
  // Bytes at the front of the shared workspace the caller uses (x and w rounded under
  // --precision bf16/fp16); the graph's own workspace follows them.
  size_t workspace_offset = 0;
};

// True when y was computed by the graph (queued on the context's stream); false when
// the caller must run the legacy path.
bool conv_graph_forward(const KernelContext& ctx, const ConvGraphArgs& a);

// The workspace bytes the graph of `a`'s problem needs, asked before the buffers exist
// (planned for 16-byte-aligned buffers, the least the arena gives; a call whose buffers
// are aligned wider may pick another engine); -1 outside the scope or when cuDNN does not
// support the problem (its notice comes with the first call).
int64_t conv_graph_workspace(const KernelContext& ctx, const ConvGraphArgs& a);

}  // namespace trainrt::cuda
