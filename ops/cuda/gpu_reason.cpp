#include "ops/cuda/gpu_reason.h"

namespace trainrt {

namespace {
std::string cuda_version(int v) { return std::to_string(v / 1000) + "." + std::to_string((v % 1000) / 10); }
}  // namespace

std::string no_gpu_reason(const GpuProbe& p) {
  const std::string code = p.error_name.empty() ? "error " + std::to_string(p.error) : p.error_name;
  if (p.error == 0) return p.count > 0 ? "" : "no CUDA device: the driver sees no GPU (0 devices)";
  if (p.error == kCudaErrorInsufficientDriver) {
    if (p.driver_version == 0)
      return "no NVIDIA driver: libcuda.so.1 not found by the loader, or it did not load (" + code +
             "; add the driver's folder to LD_LIBRARY_PATH)";
    if (p.driver_version < p.runtime_version)
      return "NVIDIA driver too old: it supports CUDA " + cuda_version(p.driver_version) + ", this build needs " +
             cuda_version(p.runtime_version) + " (" + code + ")";
  }
  if (p.error == kCudaErrorStubLibrary)
    return "libcuda.so found is the CUDA toolkit's stub, not the NVIDIA driver (" + code +
           "; put the driver's folder before the toolkit's)";
  if (p.error == kCudaErrorNoDevice) return "no CUDA device: the driver sees no GPU (" + code + ")";
  if (p.error == kCudaErrorDevicesUnavailable) return "every GPU is busy or in exclusive-process mode (" + code + ")";
  if (p.error == kCudaErrorSystemDriverMismatch)
    return "the NVIDIA driver's kernel module and libcuda.so.1 are different versions (" + code + ")";
  return "CUDA error " + code;
}

}  // namespace trainrt
