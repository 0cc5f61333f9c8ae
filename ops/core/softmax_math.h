// The per-row math of the softmax cross-entropy loss and its gradient, written once for
// every backend: the reference and cpu loops (ops/softmax_loss_loops.h) and the cuda
// kernels (ops/softmax_loss_cuda.cu) call these, in double whatever the tensor's type.
//
//   double m, log_sum;
//   softmax_math::log_normaliser(row, C, stride, m, log_sum);   // log_softmax = x - m - log_sum
//   dx = softmax_math::loss_grad(g, log_prob, c == label);       // g * (softmax - onehot)
//
// m is the row's maximum (NaN-propagating as std::max(m, v) is: a NaN first element stays),
// subtracted before exp so that exp never overflows. Tested through the reference and cpu
// kernels against PyTorch's golden data and finite differences (tests/ops/
// test_softmax_loss.cpp); the cuda kernels run the same functions.
//
// Plain C++ for g++; under nvcc the functions are __host__ __device__.
#pragma once

#include <cmath>
#include <cstdint>

#include "graph/float16.h"  // TRAINRT_HOST_DEVICE
#include "ops/core/unary_math.h"

namespace trainrt::softmax_math {

// The maximum m of the C values row[0], row[stride], ... and log(sum exp(x - m)).
template <typename T>
TRAINRT_HOST_DEVICE void log_normaliser(const T* row, int64_t C, int64_t stride, double& m, double& log_sum) {
  m = -INFINITY;
  for (int64_t c = 0; c < C; ++c) {
    const double v = static_cast<double>(row[c * stride]);
    m = m < v ? v : m;  // std::max(m, v)
  }
  double sum = 0;
  for (int64_t c = 0; c < C; ++c) sum += unary_math::exp_of(static_cast<double>(row[c * stride]) - m);
  log_sum = unary_math::log_of(sum);
}

// dScores = g * (exp(log_prob) - [c == label]): the gradient of -w[l] * log_prob[l]
// scaled by g (the upstream gradient, the weight, and 1/weight sum for a mean).
TRAINRT_HOST_DEVICE inline double loss_grad(double g, double log_prob, bool is_label) {
  return g * (unary_math::exp_of(log_prob) - (is_label ? 1.0 : 0.0));
}

}  // namespace trainrt::softmax_math
