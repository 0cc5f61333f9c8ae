// Placeholder while the norm family's CUDA kernels are written: registers nothing, so
// these ops run on the host (Backend::fallback_ops).
#include "ops/cuda_util.h"

namespace trainrt::cuda {

void register_norm_cuda(Registry&) {}

}  // namespace trainrt::cuda
