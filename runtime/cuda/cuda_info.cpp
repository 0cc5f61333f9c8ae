#include "runtime/cuda/cuda_info.h"

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <nccl.h>

#include "ops/cuda/gpu_reason.h"

namespace trainrt {

namespace {
std::string version3(long v, long major_div, long minor_div) {
  return std::to_string(v / major_div) + "." + std::to_string((v % major_div) / minor_div) + "." +
         std::to_string(v % minor_div);
}
}  // namespace

std::string cuda_version_report() {
  std::string r;
  r += "  CUDA       " + version3(CUDART_VERSION, 1000, 10) + " (runtime built in; kernels for " +
       TRAINRT_CUDA_ARCHITECTURES + ")\n";
  r += "  cuDNN      " + std::to_string(CUDNN_MAJOR) + "." + std::to_string(CUDNN_MINOR) + "." +
       std::to_string(CUDNN_PATCHLEVEL) + "\n";
  r += "  cuBLASLt   " + version3(static_cast<long>(cublasLtGetVersion()), 10000, 100) + "\n";
  r += "  NCCL       " + std::to_string(NCCL_MAJOR) + "." + std::to_string(NCCL_MINOR) + "." +
       std::to_string(NCCL_PATCH) + "\n";
  std::string why;
  r += std::string("  GPU        ") + (cuda_device_available(&why) ? "available" : "none (" + why + ")") + "\n";
  return r;
}

bool cuda_device_available(std::string* why) {
  const std::string reason = no_gpu_reason(cuda::probe_gpu());
  if (why) *why = reason;
  return reason.empty();
}

}  // namespace trainrt
