// Which batch normalizations the cuda backend's cuDNN graphs describe
// (ops/norm_graph_cuda.h): host logic, tested on the CPU (tests/ops/test_bn_graph_scope.cpp).
//
//   std::string why = bn_graph_scope::reason(x, {&y}, {&scale, &bias}, MathPrecision::bf16);
//   if (why.empty()) ...   // the graph may run (cuDNN can still turn the problem down)
//
// Activation-shaped tensors (x, y, dy, dx, relu_y) are 4-D N,C,H,W of x's shape stored
// NHWC, each float32 or a float32 value stored in 16 bits under the call's math
// (runtime/narrow.h: bfloat16 bits under bf16, IEEE half under fp16), the storage the
// graph then describes; the per-channel ones (scale, bias, dscale, ...) are float32 with
// C values. C is a multiple of 4, or of 8 where any activation is 16-bit: the rule of
// cuDNN's batch-norm fusion engines (channel_multiple).
//
// Why 16-bit storage is in scope: those engines are built for half and bfloat16
// activations with float32 statistics, which is what trainrt stores under bf16/fp16;
// without it every batch norm of a 16-bit step ran trainrt's own kernels.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <optional>
#include <string>

#include "graph/tensor.h"
#include "ops/core/kernel.h"

namespace trainrt::bn_graph_scope {

// The channel count cuDNN's batch-norm fusion engines take a multiple of: 8 where an
// activation is 16-bit, else 4 (runtime/cudnn_fusion.cpp's plan-time scope asks it too).
inline int64_t channel_multiple(bool sixteen_bit) { return sixteen_bit ? 8 : 4; }

// The type a graph describes for activation-shaped `t`: float32, or its 16-bit storage;
// nullopt for any other tensor (float64, a 16-bit tensor the math did not store so).
inline std::optional<DataType> io_type(const Tensor& t, MathPrecision m) {
  if (t.dtype() == DataType::Float32 && !t.narrowed()) return DataType::Float32;
  if (stored_16bit(t, m)) return t.dtype();
  return std::nullopt;
}

// "" when the graphs take x with the other activation-shaped tensors (null: omitted)
// and the per-channel ones under math m; else why not, in a few words.
inline std::string reason(const Tensor& x, std::initializer_list<const Tensor*> activations,
                          std::initializer_list<const Tensor*> channels, MathPrecision m) {
  if (x.rank() != 4) return "rank " + std::to_string(x.rank()) + " (the graphs take 4-D N,C,H,W)";
  if (x.numel() == 0) return "empty";
  bool any16 = false;
  auto activation = [&](const Tensor& t) -> std::string {
    const std::optional<DataType> io = io_type(t, m);
    if (!io) return std::string("dtype ") + dtype_name(t.dtype()) + " (float32, or float32 stored in 16 bits)";
    if (t.dims() != x.dims()) return "an activation of another shape";
    if (t.layout() != Layout::ChannelsLast) return "NCHW (the graphs take NHWC)";
    any16 = any16 || *io != DataType::Float32;
    return "";
  };
  std::string why = activation(x);
  for (const Tensor* t : activations)
    if (why.empty() && t) why = activation(*t);
  if (!why.empty()) return why;
  const int64_t C = x.dims()[1], multiple = channel_multiple(any16);
  if (C % multiple != 0)
    return "C=" + std::to_string(C) + " not a multiple of " + std::to_string(multiple) + (any16 ? " (16-bit)" : "");
  for (const Tensor* t : channels)
    if (t->dtype() != DataType::Float32 || t->narrowed() || t->numel() != C)
      return "per-channel tensor not float32 of C values";
  return "";
}

}  // namespace trainrt::bn_graph_scope
