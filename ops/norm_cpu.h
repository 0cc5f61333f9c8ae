// The oneDNN batch-normalization forward shared by BatchNormalization (ops/norm_cpu.cpp)
// and the fused BatchNormalizationRelu (ops/fused_cpu.cpp).
//
//   batchnorm_forward_dnnl(ctx, /*fuse_relu=*/true);   // Y = relu(BN(x)), same inputs/outputs as BN
//
// Why: the two ops differ only in oneDNN's fuse_norm_relu flag; statistics, the
// running-statistics update and the reference fallback are the same code.
#pragma once

#include "ops/core/kernel.h"

namespace trainrt {

void batchnorm_forward_dnnl(KernelContext& ctx, bool fuse_relu);

}  // namespace trainrt
