// Dropout's per-launch constants on the device, shared by the cuda Dropout kernels
// (ops/misc_cuda.cu) and the fused BatchNormalizationReluDropout apply (ops/fused_cuda.cu):
//
//   DropoutOptions o;  o.run_seed = ctx.run_seed;  o.node = ...;  o.seed = ...;
//   if (!dropout_options(ctx, ratio_at, o)) ...host fallback...;
//   // in a kernel, every thread of the block:
//   const DropoutConstants<float> c = block_dropout_constants<float>(o);
//   z = !c.training ? y : dropout_mask::keep(c.key, at, c.threshold) ? y * c.scale : c.valid ? 0 : c.scale;
//
// Why here: ratio and training_mode are values read on the device (they may change
// between replays of a captured step), and the key derives from the run's seed in device
// memory; both kernels must derive them, and the NaN of an invalid ratio, the same way.
#pragma once

#ifdef __CUDACC__
#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <math.h>

#include <cstdint>

#include "graph/tensor.h"
#include "ops/core/dropout_mask.h"
#include "ops/core/kernel.h"

namespace trainrt::cuda {

// Dropout's optional ratio and training_mode inputs, read on the device.
struct DropoutOptions {
  const void* ratio = nullptr;  // scalar of ratio_type; nullptr: 0.5
  DataType ratio_type = DataType::Float32;
  const uint8_t* training_mode = nullptr;  // bool scalar; nullptr: false
  bool training = false;                   // KernelContext::training
  // The mask's key, splitmix64(seed ^ attr_mix): seed is node_seed(*run_seed, node) read
  // on the device (a captured step draws each replay's masks), else `seed`.
  const uint64_t* run_seed = nullptr;
  uint64_t node = 0, seed = 0, attr_mix = 0;
  // DropoutReluGrad: Z's sign read as round_to_math in this precision, and whether Z is
  // stored in 16 bits (its bfloat16 / half bits, runtime/narrow.h).
  MathPrecision z_math = MathPrecision::fp32;
  bool z16 = false;
};

// What every thread of a launch needs, derived once per block by thread 0.
template <typename T>
struct DropoutConstants {
  bool training, valid;  // valid: ratio in [0, 1), the reference's check
  uint64_t threshold;    // keep when (h >> 11) >= threshold, i.e. u >= ratio
  T scale;               // 1 / (1 - ratio) in training, else 1; NaN when !valid
  uint64_t key;          // the mask's key (DropoutOptions)
};

template <typename T>
__device__ DropoutConstants<T> dropout_constants(const DropoutOptions& o) {
  double ratio = 0.5;
  if (o.ratio) switch (o.ratio_type) {
      case DataType::Float64:
        ratio = *static_cast<const double*>(o.ratio);
        break;
      case DataType::Float16:
        ratio = __half2float(*static_cast<const __half*>(o.ratio));
        break;
      case DataType::BFloat16:
        ratio = __bfloat162float(*static_cast<const __nv_bfloat16*>(o.ratio));
        break;
      default:
        ratio = *static_cast<const float*>(o.ratio);
        break;
    }
  DropoutConstants<T> c;
  c.training = o.training || (o.training_mode && *o.training_mode != 0);
  c.valid = ratio >= 0.0 && ratio < 1.0;
  c.key = dropout_mask::key_of(o.run_seed ? node_seed(*o.run_seed, o.node) : o.seed, o.attr_mix);
  c.threshold = c.valid ? dropout_mask::threshold(ratio) : 0;  // u >= ratio as integers
  c.scale = !c.training ? T(1) : c.valid ? static_cast<T>(1.0 / (1.0 - ratio)) : static_cast<T>(nan(""));
  return c;
}

template <typename T>
__device__ DropoutConstants<T> block_dropout_constants(const DropoutOptions& o) {
  __shared__ DropoutConstants<T> shared;
  if (threadIdx.x == 0) shared = dropout_constants<T>(o);
  __syncthreads();
  return shared;
}

// Inputs `ratio_at` (ratio) and `ratio_at + 1` (training_mode), either optional.
inline bool dropout_options(const KernelContext& ctx, size_t ratio_at, DropoutOptions& o) {
  o.training = ctx.training;
  if (ctx.has_input(ratio_at)) {
    o.ratio = ctx.in(ratio_at).raw();
    o.ratio_type = ctx.in(ratio_at).dtype();
    if (o.ratio_type != DataType::Float32 && o.ratio_type != DataType::Float64 && o.ratio_type != DataType::Float16 &&
        o.ratio_type != DataType::BFloat16)
      return false;
  }
  if (ctx.has_input(ratio_at + 1)) {
    if (ctx.in(ratio_at + 1).dtype() != DataType::Bool) return false;
    o.training_mode = ctx.in(ratio_at + 1).data<uint8_t>();
  }
  return true;
}

}  // namespace trainrt::cuda
#endif
