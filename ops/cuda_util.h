// What every CUDA kernel of the cuda backend shares: the process's CUDA context (one
// stream, cuDNN and cuBLASLt handles bound to it, a growing workspace) and error checks.
//
//   cuda::Context& c = cuda::context();                 // created on first use
//   my_kernel<<<blocks, threads, 0, c.stream>>>(...);
//   cuda::check(cudaGetLastError(), "Relu");            // Internal error naming the call
//   cuda::check(cudnnConvolutionForward(c.cudnn, ...), "Conv 'conv1'");
//
// Why: the cuda backend (runtime/cuda/cuda_backend.h) queues every kernel on one stream
// in plan order, so a kernel never waits for another itself; the executor synchronises
// only where the host reads values (checks, hooks, host-run fallback kernels, results).
// Values live in CUDA managed memory, so a tensor's data() pointer is valid both on the
// device and, after synchronisation, on the host. Kernels read and write fp32 (and fp64
// where cuDNN/cuBLASLt have it) in the plain row-major layout; everything else falls
// back to the host kernels (Backend::fallback_ops).
//
// Compiled only in a CUDA build (TRAINRT_HAVE_CUDA); nothing here has run without a GPU.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <cstddef>
#include <string>

#include "ops/register_all.h"

namespace trainrt::cuda {

struct Context {
  int device = 0;
  cudaStream_t stream = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasLtHandle_t lt = nullptr;
};

// Selects the device this process uses (before the first context()); default 0.
void set_device(int device);
// The process's context on its device, created on first use (thread-safe).
// Throws Unsupported when no GPU is usable.
Context& context();
// Scratch device memory of at least `bytes`, valid until the next call that grows it;
// kernels use it within one call on the context's stream.
void* workspace(size_t bytes);

// Internal errors naming `what` and the library's own message.
void check(cudaError_t e, const std::string& what);
void check(cudnnStatus_t s, const std::string& what);
void check(cublasStatus_t s, const std::string& what);

// Blocks and threads for a grid-stride loop over n elements.
inline unsigned blocks_for(long long n, int threads = 256) {
  long long b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

// The "cuda" kernel set, one function per op family file (ops/<family>_cuda.cu),
// all called by register_cuda_kernels (from register_all, after every schema).
void register_cuda_kernels(Registry& r);
void register_conv_cuda(Registry& r);         // Conv, FusedConv, ConvGrad: cuDNN
void register_gemm_cuda(Registry& r);         // Gemm: cuBLASLt
void register_elementwise_cuda(Registry& r);  // Relu, Add, Sum, ReluGrad, ...: own kernels
void register_norm_cuda(Registry& r);         // BatchNormalization and its fused/grad forms: own kernels
void register_optimizer_cuda(Registry& r);    // ai.trainrt SGD, Adam: own kernels

}  // namespace trainrt::cuda
