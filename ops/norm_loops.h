// Statistics loops of the normalization ops that the reference (ops/norm.cpp) and the
// cpu backend (ops/norm_cpu.cpp) share, so that both compute them to the same bits.
//
//   const std::pair<double, double> mv = norm_loops::row_moments(xr, D);   // mean, variance
//
// Why in double: the variance feeds 1/sqrt(var + eps), which amplifies its rounding on
// a nearly constant row; two passes avoid the cancellation of E[x^2] - E[x]^2.
#pragma once

#include <cstdint>
#include <utility>

namespace trainrt::norm_loops {

// Mean and biased variance of the D values xr[0..D), both passes summed in double.
template <typename T>
std::pair<double, double> row_moments(const T* xr, int64_t D) {
  double sum = 0;
  for (int64_t j = 0; j < D; ++j) sum += static_cast<double>(xr[j]);
  const double mean = sum / static_cast<double>(D);
  double sq = 0;
  for (int64_t j = 0; j < D; ++j) {
    const double d = static_cast<double>(xr[j]) - mean;
    sq += d * d;
  }
  return {mean, sq / static_cast<double>(D)};
}

}  // namespace trainrt::norm_loops
