// Helpers shared by op families: dtype dispatch and common shape-rule checks.
//
//   dispatch_float(x.dtype(), [&](auto tag) { using T = decltype(tag); relu<T>(x, y); });
//   require_float(ctx, 0);                          // in a shape rule
//
// Why: reference kernels are written once as templates over float/double; the
// dispatch keeps that one line per kernel. Shape-rule checks produce the same
// message wording for every op.
#pragma once

#include <functional>
#include <string>

#include "graph/error.h"
#include "graph/schema.h"
#include "ops/core/kernel.h"

namespace trainrt {

// `t` (fp32, row-major) with every element rounded by round_to_math, still stored as
// fp32 (over oneTBB chunks with `parallel`: the cpu kernels). Other dtypes, or
// MathPrecision::fp32, return `t` itself (shared, no copy).
Tensor math_input(const Tensor& t, MathPrecision m, bool parallel = false);
// to[i] = round_to_math(from[i], m) for i < n: the one host loop behind math_input and
// the cpu convolutions' rounded oneDNN copies (dnnl_util::math_rounded).
void round_floats(const float* from, float* to, int64_t n, MathPrecision m, bool parallel);

// ConvGrad with attribute dx_relu = 1 (passes/fuse_conv.cpp, fuse_dgrad_relu_grad): its
// dX then also goes through the ReLU gradient of X (dX = X > 0 ? dX : 0; X, the
// convolution's input, is the Relu's output). `conv_grad` computes the gradients,
// `relu_grad` (the same backend's ReluGrad kernel, alias-safe) masks dX in place:
// the unfused ReluGrad's own arithmetic, so the fused node has the unfused nodes' bits.
// `conv_grad` returns true when it has applied the mask itself (a fused library call).
Kernel with_dx_relu(std::function<bool(KernelContext&)> conv_grad, Kernel relu_grad);

// `relu_grad` (a backend's ReluGrad kernel) as a fused node calls it: out = ReluGrad(dy, y)
// on a ReluGrad node named `name` (a fallback of the kernel looks its op up; kernels only
// read their node), with the fused call's training, seed, convolution and fp32 settings.
using ReluGradCall = std::function<void(const KernelContext& fused, const Tensor& dy, const Tensor& y, Tensor& out)>;
ReluGradCall relu_grad_call(Kernel relu_grad, std::string name);

// BatchNormalizationGrad with input 5, relu_y (passes/fuse_conv.cpp,
// fuse_relu_grad_into_bn_grad): `bn_grad` runs on dY masked by `relu_grad` (the same
// backend's ReluGrad kernel: the unfused node's own arithmetic, so fused and unfused
// give the same bits) into a reused host buffer in dY's layout; without input 5 it runs
// as is. The reference and cpu kernels; the cuda kernels mask while they read.
Kernel with_dy_relu(Kernel bn_grad, Kernel relu_grad);

// Calls f(float{}) or f(double{}); other dtypes are an internal error (the
// shape rule should have rejected them).
template <typename F>
void dispatch_float(DataType t, F&& f) {
  switch (t) {
    case DataType::Float32:
      f(float{});
      break;
    case DataType::Float64:
      f(double{});
      break;
    default:
      throw_internal("dispatch_float", std::string("unexpected dtype ") + dtype_name(t));
  }
}

// Calls f(T{}) for the C++ type of a float or integer dtype (float32/64, signed and unsigned 8-64 bit).
template <typename F>
void dispatch_arith(DataType t, F&& f) {
  switch (t) {
    case DataType::Float32:
      f(float{});
      break;
    case DataType::Float64:
      f(double{});
      break;
    case DataType::Int8:
      f(int8_t{});
      break;
    case DataType::Int16:
      f(int16_t{});
      break;
    case DataType::Int32:
      f(int32_t{});
      break;
    case DataType::Int64:
      f(int64_t{});
      break;
    case DataType::UInt8:
      f(uint8_t{});
      break;
    case DataType::UInt16:
      f(uint16_t{});
      break;
    case DataType::UInt32:
      f(uint32_t{});
      break;
    case DataType::UInt64:
      f(uint64_t{});
      break;
    default:
      throw_internal("dispatch_arith", std::string("unexpected dtype ") + dtype_name(t));
  }
}

// Input i must be float32 or float64; returns its dtype.
inline DataType require_float(const InferContext& ctx, size_t i) {
  DataType t = ctx.input(i).dtype;
  if (t != DataType::Float32 && t != DataType::Float64)
    ctx.fail("input " + std::to_string(i) + " '" + ctx.node().inputs[i] + "' must be float32 or float64, got " +
             dtype_name(t));
  return t;
}

// Inputs i and j must share a dtype.
inline void require_same_dtype(const InferContext& ctx, size_t i, size_t j) {
  if (ctx.input(i).dtype != ctx.input(j).dtype)
    ctx.fail(std::string("inputs ") + std::to_string(i) + " and " + std::to_string(j) + " must share a dtype, got " +
             dtype_name(ctx.input(i).dtype) + " and " + dtype_name(ctx.input(j).dtype));
}

}  // namespace trainrt
