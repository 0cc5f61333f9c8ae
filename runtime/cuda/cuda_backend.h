// The cuda backend: cuDNN / cuBLASLt / own kernels (ops/*_cuda.cu) on one CUDA stream,
// values in CUDA managed memory.
//
//   std::unique_ptr<Backend> b = make_backend("cuda");   // Unsupported without a GPU
//
// Why managed memory: the executor, the trainer and the data-parallel code read and
// write values on the host (NaN checks, checkpoints, export, gradient buckets, ops
// that have no CUDA kernel yet). With managed memory a tensor's one pointer serves
// both sides, so all of that is shared with the cpu backend unchanged, and the
// backend stays thin: it allocates, copies, synchronises and picks the device. The
// price is page migration where host and device take turns on a value, which
// `trainrt inspect` shows as the list of host-run ops (Backend::fallback_ops).
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
