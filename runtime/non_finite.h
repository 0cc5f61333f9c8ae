// The host's NaN/Inf scan of a tensor, shared by the backends' flag_non_finite, the
// executor's --check-numerics guard and the data-parallel average check: a utility below
// all three, so that the backend does not reach up into the executor for it.
#pragma once

#include <cstdint>

#include "graph/tensor.h"

namespace trainrt {

// Index of the first NaN/Inf element of a float tensor (storage order), or -1; -1 for
// other element types.
int64_t first_non_finite(const Tensor& t);

}  // namespace trainrt
