#include "runtime/non_finite.h"

#include <cmath>

namespace trainrt {

int64_t first_non_finite(const Tensor& t) {
  const int64_t n = t.numel();
  switch (t.dtype()) {
    case DataType::Float32: {
      const float* p = t.data<float>();
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(p[i])) return i;
      return -1;
    }
    case DataType::Float64: {
      const double* p = t.data<double>();
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(p[i])) return i;
      return -1;
    }
    case DataType::Float16:
    case DataType::BFloat16:
      for (int64_t i = 0; i < n; ++i)
        if (!std::isfinite(t.get_as_double(i))) return i;
      return -1;
    default:
      return -1;
  }
}

}  // namespace trainrt
