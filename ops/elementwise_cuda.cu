// CUDA kernels of the elementwise family. Compiled and linked in CI; run only
// where a GPU exists (tests labelled `gpu`).
#include <cuda_runtime.h>

#include <cstdint>

#include "ops/cuda_util.h"

namespace trainrt::cuda {

// y[i] = max(x[i], 0), N elements.
__global__ void relu_kernel(const float* x, float* y, int64_t n) {
  int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < n) y[i] = x[i] > 0.f ? x[i] : 0.f;
}

cudaError_t relu(const float* x, float* y, int64_t n, cudaStream_t stream) {
  if (n == 0) return cudaSuccess;
  const int threads = 256;
  const unsigned blocks = static_cast<unsigned>((n + threads - 1) / threads);
  relu_kernel<<<blocks, threads, 0, stream>>>(x, y, n);
  return cudaGetLastError();
}

}  // namespace trainrt::cuda

namespace trainrt::cuda {
void register_elementwise_cuda(Registry&) {}
}  // namespace trainrt::cuda
