// The outputs each backend rounds to 16-bit numbers under --precision bf16/fp16.
//
//   for (size_t k : math_rounded_outputs(n)) ...   // n.outputs[k] is rounded (bf16/fp16)
//
// Why: autocast keeps activations and their gradients in 16 bits (a convolution's output,
// a batch norm's output, the gradients between them); here they stay float32 in memory
// unless stored narrow (runtime/narrow.h), but every backend rounds them with
// round_to_math (ops/core/kernel.h) right after the kernel that writes them (the
// executor's step, Backend::round_outputs), so the reference, cpu, stand-in and cuda
// runs agree, and a rounded value can be stored in 16 bits with the same bits whatever
// its readers do. The counterpart of math_rounded_inputs.
#pragma once

#include <cstddef>
#include <string>
#include <vector>

#include "graph/ir.h"
#include "ops/core/kernel.h"

namespace trainrt {

// Under bf16/fp16: Conv Y, and FusedConv Y without a residual Z (with Z its kernels round
// act(conv + B) before adding Z in fp32, as the unfused Conv and Add do; so Y is not
// listed: it is no 16-bit number); ConvGrad dX and dW (never dB): autocast's dW is the
// gradient of the weights' 16-bit copy, a 16-bit number added to the fp32 master
// weights' gradient, and cuDNN's fast weight-gradient engines write only their inputs'
// type (docs/cuda.md); BatchNormalization and BatchNormalizationRelu Y (never the
// running or saved statistics); BatchNormalizationGrad dX (never dScale or dBias);
// DropoutReluGrad dX. Nothing else: state, parameters, the other gradients of
// parameters, and what a loss reads (the logits come from a Gemm) stay fp32. Only
// float32 outputs are rounded (the executor checks); an output stored in 16 bits is
// rounded as its kernel writes it.
std::vector<size_t> math_rounded_outputs(const Node& n);

// Whether value `v` of `g` is written by a node that rounds it (math_rounded_outputs):
// under bf16/fp16 its float32 value is then a 16-bit number, so a reader that tests it
// unrounded (ConvGrad's dx_relu mask) sees the same value stored in 16 bits. False for
// graph inputs, initializers and unknown values.
bool written_rounded(const Graph& g, const std::string& v);

// Whether a FusedConv with a residual Z and output dtype `y` rounds act(conv + B) and then
// adds Z (in fp32) under `m`: every backend's kernel asks this one question.
inline bool rounds_before_residual(MathPrecision m, DataType y) {
  return m != MathPrecision::fp32 && y == DataType::Float32;
}

}  // namespace trainrt
