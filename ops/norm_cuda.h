// BatchNormalization's forward statistics on the cuda backend's own kernels
// (ops/norm_cuda.cu) for a kernel that applies them itself: the fused
// BatchNormalizationReluDropout (ops/fused_cuda.cu).
//
//   const BnCoefficients k = batchnorm_coefficients(ctx);   // outputs 1..6 written
//   y = relu(batchnorm_stats::apply(x, k.shift[c], k.mul[c], k.add[c]))   // on the device
//
// Why apart from the cuDNN graph: a graph applies the statistics itself, so a kernel that
// changes what the apply writes (the Dropout's mask before the store) takes the own
// statistics kernels, BatchNormalizationRelu's path outside the graph's scope.
#pragma once

#include "ops/core/kernel.h"

namespace trainrt::cuda {

struct BnCoefficients {
  const float *shift, *mul, *add;  // C values each, in cuda::workspace
};

// A float32 node of rank >= 2 with C > 0 (inputs 0..4 and outputs 1..6 a batch norm's),
// training by ops/norm.cpp's rule; the workspace is BatchNormalizationRelu's.
BnCoefficients batchnorm_coefficients(KernelContext& ctx);

}  // namespace trainrt::cuda
