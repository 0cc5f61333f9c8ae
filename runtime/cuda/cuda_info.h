// What the CUDA build links against, and whether a GPU is usable right now.
//
//   std::cout << cuda_version_report();   // compiled-in CUDA/cuDNN/cuBLASLt/NCCL
//   if (!cuda_device_available(&why)) ... // why: no_gpu_reason's line (ops/cuda/gpu_reason.h), e.g.
//                                         // "no NVIDIA driver: libcuda.so.1 not found by the loader (...)"
//
// Plain C++ header: launch/ includes it without nvcc.
#pragma once

#include <string>

namespace trainrt {

std::string cuda_version_report();
bool cuda_device_available(std::string* why);

}  // namespace trainrt
