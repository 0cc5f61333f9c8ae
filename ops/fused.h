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

}  // namespace trainrt
