// Why a CUDA process has no usable GPU, said in one line that tells the causes apart.
//
//   const std::string why = no_gpu_reason(cuda::probe_gpu());  // "" when a GPU is usable, else e.g.
//   // "no NVIDIA driver: libcuda.so.1 not found by the loader, or it did not load (...)"
//   // "NVIDIA driver too old: it supports CUDA 12.4, this build needs 13.0 (cudaErrorInsufficientDriver)"
//   // "no CUDA device: the driver sees no GPU (cudaErrorNoDevice)"
//
// Why: cudaGetDeviceCount answers cudaErrorInsufficientDriver both when the driver
// library is missing and when it is older than the CUDA runtime; a user on a new node
// needs to know which (a library path to fix, or a driver to update), and no device at
// all is a third case. The probe is filled by ops/cuda/cuda_util.cu (cudaGetDeviceCount,
// cudaDriverGetVersion, CUDART_VERSION); the wording is plain code, tested on the host
// (tests/ops/test_gpu_reason.cpp), and every "no usable GPU" message of the cuda backend,
// `trainrt --version` and tools/gpu_run.sh carries it.
#pragma once

#include <string>

namespace trainrt {

struct GpuProbe {
  int error = 0;            // cudaGetDeviceCount's cudaError_t (0: success)
  std::string error_name;   // cudaGetErrorName of it
  int count = 0;            // devices counted (when error is 0)
  int driver_version = 0;   // cudaDriverGetVersion: 1000*major + 10*minor; 0 when no driver is loaded
  int runtime_version = 0;  // CUDART_VERSION this build was compiled against
};

// The cudaError_t values the reasons are told apart by (static_assert'ed in cuda_util.cu).
inline constexpr int kCudaErrorStubLibrary = 34;
inline constexpr int kCudaErrorInsufficientDriver = 35;
inline constexpr int kCudaErrorDevicesUnavailable = 46;
inline constexpr int kCudaErrorNoDevice = 100;
inline constexpr int kCudaErrorSystemDriverMismatch = 803;

// "" when the probe found a usable GPU; else one line without a trailing period.
std::string no_gpu_reason(const GpuProbe& p);

namespace cuda {
// cudaGetDeviceCount, cudaDriverGetVersion and this build's CUDART_VERSION. Defined in
// ops/cuda/cuda_util.cu: a CUDA build only.
GpuProbe probe_gpu();
}  // namespace cuda

}  // namespace trainrt
