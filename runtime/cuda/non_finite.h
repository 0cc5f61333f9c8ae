// The cuda backend's device-side NaN/Inf check (Backend::flag_non_finite): a kernel on
// the context's stream that lowers `*flag` to the key of `t`'s first non-finite element.
//
//   cuda::flag_non_finite(t, flag);   // flag: 8 bytes of device memory, copied out before a sync
//
// Why: the executor's checks then cost no synchronisation per node; the host reads the
// flags where the step synchronises anyway (runtime/executor.h). Plain C++ header.
//
// Compiled only in a CUDA build; nothing of it has run without a GPU.
#pragma once

#include <cstdint>

#include "graph/tensor.h"

namespace trainrt::cuda {

// float32, float64, float16 and bfloat16 (tested on their bits: exponent all ones); other
// dtypes are left alone. Key of element i: 2 * i + (1 if Inf, 0 if NaN) (Backend::non_finite_key).
void flag_non_finite(const Tensor& t, uint64_t* flag);

}  // namespace trainrt::cuda
