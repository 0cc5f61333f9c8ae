// The oneDNN convolution forward shared by Conv (ops/conv_cpu.cpp) and the fused
// FusedConv (ops/fused_cpu.cpp).
//
//   conv_forward_dnnl(ctx, /*relu=*/true);   // Y = relu(conv(X, W) + B) + Z, Z = input 3 if given
//
// Why: FusedConv is Conv with oneDNN post-ops (eltwise relu, sum of the residual);
// plans, layouts and the reference fallback are the same code.
#pragma once

#include "ops/core/kernel.h"

namespace trainrt {

void conv_forward_dnnl(KernelContext& ctx, bool relu);

}  // namespace trainrt
