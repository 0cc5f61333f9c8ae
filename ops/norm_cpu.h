// The oneDNN batch-normalization forward shared by BatchNormalization (ops/norm_cpu.cpp)
// and the fused BatchNormalizationRelu (ops/fused_cpu.cpp).
//
//   batchnorm_forward_dnnl(ctx, /*fuse_relu=*/true);   // Y = relu(BN(x)), same inputs/outputs as BN
//   FusedDropout d{key, threshold, scale};
//   batchnorm_forward_dnnl(ctx, true, &d);  if (!d.applied) ... the Dropout over Y ...
//
// Why: the two ops differ only in oneDNN's fuse_norm_relu flag; statistics, the
// running-statistics update and the reference fallback are the same code. The fused
// BatchNormalizationReluDropout passes its Dropout's mask to the apply loop (row-major
// or Blocked16c), which applies it to each row of Y while the row is in cache (no second
// pass over Z).
#pragma once

#include <cstdint>

#include "ops/core/kernel.h"

namespace trainrt {

// A Dropout applied by the apply loop: the value at row-major index i becomes
// dropout_mask::keep(key, i, threshold) ? v * scale : +0, the Dropout kernel's mask and
// product (ops/misc_loops.h, ops/core/dropout_mask.h). `applied`: the loop ran (fp32,
// X and Y row-major or Blocked16c); else Y is written without it and the caller runs
// the Dropout.
struct FusedDropout {
  uint64_t key = 0, threshold = 0;
  float scale = 1;
  bool applied = false;
};

void batchnorm_forward_dnnl(KernelContext& ctx, bool fuse_relu, FusedDropout* dropout = nullptr);

}  // namespace trainrt
