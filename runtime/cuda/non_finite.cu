// See runtime/cuda/non_finite.h. Each thread of a grid-stride loop stops at its first
// non-finite element (its smallest index, as its indices only grow) and lowers the flag
// to that element's key with one atomicMin, so the flag ends at the smallest key: the
// first bad element in storage order and whether it is an Inf.
#include <cuda_runtime.h>

#include <string>

#include "ops/cuda/cuda_util.h"
#include "runtime/cuda/non_finite.h"

namespace trainrt::cuda {

namespace {

// Bits: the element's storage as an unsigned integer; an element is non-finite when all
// of `exponent` is set, and an Inf when none of `mantissa` is.
template <typename Bits>
__global__ void flag_kernel(const Bits* x, int64_t n, Bits exponent, Bits mantissa, unsigned long long* flag) {
  TRAINRT_GRID_STRIDE(i, n) {
    const Bits b = x[i];
    if ((b & exponent) != exponent) continue;
    const unsigned long long key = 2ull * static_cast<unsigned long long>(i) + ((b & mantissa) == 0 ? 1ull : 0ull);
    atomicMin(flag, key);
    return;
  }
}

template <typename Bits>
void launch(const Tensor& t, Bits exponent, Bits mantissa, uint64_t* flag) {
  const int64_t n = t.numel();
  if (n == 0) return;
  flag_kernel<Bits><<<blocks_for(n), kThreads, 0, context().stream>>>(
      reinterpret_cast<const Bits*>(t.raw()), n, exponent, mantissa, reinterpret_cast<unsigned long long*>(flag));
  check(cudaGetLastError(), "launch of the NaN/Inf check kernel");
}

}  // namespace

void flag_non_finite(const Tensor& t, uint64_t* flag) {
  static_assert(sizeof(unsigned long long) == sizeof(uint64_t));
  switch (t.dtype()) {
    case DataType::Float32:
      return launch<uint32_t>(t, 0x7f800000u, 0x007fffffu, flag);
    case DataType::Float64:
      return launch<uint64_t>(t, 0x7ff0000000000000ull, 0x000fffffffffffffull, flag);
    case DataType::Float16:
      return launch<uint16_t>(t, 0x7c00, 0x03ff, flag);
    case DataType::BFloat16:
      return launch<uint16_t>(t, 0x7f80, 0x007f, flag);
    default:
      return;
  }
}

}  // namespace trainrt::cuda
