// Where a cuda kernel reads a float32 value stored in 16 bits (runtime/narrow.h,
// stored_narrow) as its exact float32 widening; Store16 (ops/cuda/cuda_util.h) writes one.
//
//   dropout_kernel<T><<<...>>>(load16(x, ctx.math), ...);   // load_at(in, i): x's element i
//
// load_at(p, i) reads element i through a const T* or a Load16, so one kernel body serves
// both storages.
#pragma once

#ifdef __CUDACC__
#include <cstdint>

#include "graph/float16.h"
#include "graph/tensor.h"
#include "ops/core/kernel.h"

namespace trainrt::cuda {

struct Load16 {
  const uint16_t* p;
  bool bf16;
};
template <typename T>
__device__ inline T load_at(const T* p, int64_t i) {
  return p[i];
}
__device__ inline float load_at(Load16 s, int64_t i) {
  return s.bf16 ? bfloat16_to_float(s.p[i]) : half_to_float(s.p[i]);
}
inline Load16 load16(const Tensor& t, MathPrecision m) { return Load16{t.data<uint16_t>(), m == MathPrecision::bf16}; }

}  // namespace trainrt::cuda
#endif
