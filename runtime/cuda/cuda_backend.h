// The cuda backend: cuDNN / cuBLASLt / own kernels (ops/*_cuda.cu) on a compute stream,
// batch copies on a copy stream ordered by events (Backend::Stream),
// values in device memory (cudaMalloc), staging in pinned host memory (cudaMallocHost).
//
//   std::unique_ptr<Backend> b = make_backend("cuda");   // Unsupported without a GPU
//
// Why device memory and no managed memory: managed pages migrate whenever the host
// looks, and managed allocations beyond the card's memory can stall it. The host
// therefore never dereferences a value (host_visible() is false); the executor, the
// trainer and the data-parallel code see device memory only through copies at named
// points (results, NaN/Inf flags, state for checkpoints and export, bucket mirrors, the
// arguments of ops without a CUDA kernel), in backend-independent code that the
// stand-in device of the runtime tests checks on the CPU. The backend stays thin: it
// allocates, copies, synchronises and picks the device.
//
// The device is the local rank's (SLURM_LOCALID / OMPI_COMM_WORLD_LOCAL_RANK) modulo
// the GPUs visible, as DDP's one process per GPU. Arithmetic is fp32 (bf16/fp16 are
// refused). Plain C++ header: nothing here needs nvcc.
//
// Compiled and linked in CI; run only where a GPU exists (`trainrt selftest --device
// cuda`, tests labelled gpu). Nothing of it has run on the machines that built it.
#pragma once

#include <memory>

#include "runtime/backend.h"

namespace trainrt {

std::unique_ptr<Backend> make_cuda_backend();

}  // namespace trainrt
