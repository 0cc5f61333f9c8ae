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
// kernels: the seed of the Dropout node it replaced (attribute dropout_node), and the
// Dropout's kernel `dropout` run in place on output 0 with inputs 5, 6 (ratio,
// training_mode) and that seed; nothing when the node does not train.
//
//   run_as_bn_relu(ctx, bn_relu_kernel);  apply_dropout_in_place(ctx, dropout_kernel<true>);
uint64_t dropout_node_seed(const KernelContext& ctx);
// bn_relu run on inputs 0..4 as a BatchNormalizationRelu node (a copy of ctx.node), so a
// backend kernel that falls back to the reference runs BatchNormalizationRelu's.
void run_as_bn_relu(const KernelContext& ctx, const Kernel& bn_relu);
void apply_dropout_in_place(KernelContext& ctx, const Kernel& dropout);

}  // namespace trainrt
