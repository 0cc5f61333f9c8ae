// The oneDNN Gemm shared by Gemm (ops/gemm_cpu.cpp) and the fused FusedGemm
// (ops/fused_cpu.cpp).
//
//   gemm_forward_dnnl(ctx, /*relu=*/true);   // Y = relu(alpha * A'B' + beta * C)
//
// Why: FusedGemm is Gemm with one more oneDNN post-op (eltwise relu after the sum of
// C); plans and the reference fallback are the same code.
#pragma once

#include "ops/core/kernel.h"

namespace trainrt {

void gemm_forward_dnnl(KernelContext& ctx, bool relu);

}  // namespace trainrt
