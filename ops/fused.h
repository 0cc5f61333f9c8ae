// Shared by FusedGemm's reference (ops/fused.cpp) and cpu (ops/fused_cpu.cpp) kernels.
//
//   fused_gemm_sums(ctx);   // output 1 = the sums of op(A) or op(B) over K (attribute sum_of)
//
// Why one function: the bias gradient a training graph fuses into its weight-gradient
// Gemm (passes/fuse_conv.cpp, fuse_gemm_bias_grad) was a SumToShape of dY; these sums
// add dY's rows in the order the reference SumToShape adds them, so the fused graph's
// reference run has the unfused one's bits, and the cpu kernel the reference's.
#pragma once

#include "ops/core/kernel.h"

namespace trainrt {

void fused_gemm_sums(KernelContext& ctx);

// BatchNormalizationReluDropout (ops/fused.cpp), shared by its reference, cpu and cuda
// kernels: the seed of the Dropout node it replaced (attribute dropout_node); bn_relu run
// on inputs 0..4 as a BatchNormalizationRelu node (a copy of ctx.node, so a backend kernel
// that falls back to the reference runs BatchNormalizationRelu's); under bf16/fp16 a
// float32 Z rounded in place as the executor rounds that node's Y (math_rounded_outputs);
// the Dropout's kernel `dropout` run in place on Z with inputs 5, 6 (ratio, training_mode)
// and that seed, nothing when the Dropout does not train (dropout_trains).
//
//   run_as_bn_relu(ctx, bn_relu_kernel);
//   round_bn_relu_output(ctx, /*parallel=*/true);
//   apply_dropout_in_place(ctx, dropout_kernel<true>);
//
// The cpu and cuda kernels that apply the mask inside the batch norm's apply loop instead
// draw with dropout_key (the Dropout's key_of, ops/core/dropout_mask.h) and dropout_ratio
// (checked as the Dropout kernel checks it).
uint64_t dropout_node_seed(const KernelContext& ctx);
void run_as_bn_relu(const KernelContext& ctx, const Kernel& bn_relu);
void round_bn_relu_output(const KernelContext& ctx, bool parallel);
bool dropout_trains(const KernelContext& ctx);
void apply_dropout_in_place(KernelContext& ctx, const Kernel& dropout);
// The same without the training test, which reads training_mode (input 6) on the host:
// for a device kernel, which reads it where it lives (in place, inference is a copy).
void run_dropout_in_place(KernelContext& ctx, const Kernel& dropout);
uint64_t dropout_key(const KernelContext& ctx);
double dropout_ratio(const KernelContext& ctx);

}  // namespace trainrt
