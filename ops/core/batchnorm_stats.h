// BatchNormalization's per-channel statistics and its per-element formulas, written once
// for the reference kernel (ops/norm.cpp), the cuda kernels (ops/norm_cuda.cu) and the
// step that turns cuDNN's saved statistics into trainrt's (ops/norm_graph_cuda.cu).
//
//   y  = apply(x, mean, scale / sqrt(var + eps), bias)                 // forward
//   dx = grad(dy, x, mean, scale * r, sum(dy) / M, r * sum(dy * xhat) / M)   // backward
//
//   write_channel(outs, c, input_mean, input_var, batch_mean, batch_var, momentum);
//   double var = variance_of_inv_std(r, eps);   // cuDNN saved r = 1/sqrt(var + eps)
//   double r = inv_std(saved_var, eps);          // what cuDNN's backward reads
//
// Why: trainrt's training graph keeps ONNX's statistics: the batch mean and the biased
// batch variance (saved for the gradient as outputs 5/6), running = input * momentum +
// batch * (1 - momentum). cuDNN's normalization graphs save the inverse standard deviation
// instead, and their running variance is the unbiased one. So the cuDNN path asks cuDNN
// for mean and inverse std only, and writes every other output through write_channel, as
// the reference does; tests/ops/test_batchnorm_stats.cpp checks the round trip against
// the reference kernel on the host.
//
// Plain C++ for g++; under nvcc the functions are __host__ __device__.
#pragma once

#include <math.h>

#include <cstdint>

#include "graph/tensor.h"  // TRAINRT_HOST_DEVICE (graph/float16.h)

namespace trainrt::batchnorm_stats {

// ONNX's running statistic from the input one and the batch's.
TRAINRT_HOST_DEVICE inline double running(double input, double batch, double momentum) {
  return input * momentum + batch * (1 - momentum);
}

// 1 / sqrt(var + eps): the inverse standard deviation cuDNN saves and reads.
TRAINRT_HOST_DEVICE inline double inv_std(double var, double eps) { return 1.0 / sqrt(var + eps); }

// The biased variance whose inverse standard deviation is r (never below 0: r holds
// var + eps to float rounding, so a variance far below eps comes back as about 0).
TRAINRT_HOST_DEVICE inline double variance_of_inv_std(double r, double eps) {
  const double v = 1.0 / (r * r) - eps;
  return v > 0 ? v : 0;
}

// A training BatchNormalization's per-channel outputs 1..6, any of them null: running
// mean and variance, ONNX's batch mean and variance, trainrt's saved mean and variance.
template <typename T>
struct ChannelOutputs {
  T *running_mean = nullptr, *running_var = nullptr, *batch_mean = nullptr, *batch_var = nullptr;
  T *saved_mean = nullptr, *saved_var = nullptr;
};

// Writes channel c's outputs from the inputs' running statistics and the batch's.
template <typename T>
TRAINRT_HOST_DEVICE void write_channel(const ChannelOutputs<T> &o, int64_t c, double input_mean, double input_var,
                                       double batch_mean, double batch_var, double momentum) {
  if (o.running_mean) o.running_mean[c] = static_cast<T>(running(input_mean, batch_mean, momentum));
  if (o.running_var) o.running_var[c] = static_cast<T>(running(input_var, batch_var, momentum));
  if (o.batch_mean) o.batch_mean[c] = static_cast<T>(batch_mean);
  if (o.batch_var) o.batch_var[c] = static_cast<T>(batch_var);
  if (o.saved_mean) o.saved_mean[c] = static_cast<T>(batch_mean);
  if (o.saved_var) o.saved_var[c] = static_cast<T>(batch_var);
}

// The forward's normalisation with the channel's coefficients: y = (x - shift) * mul + add,
// shift = mean, mul = scale / sqrt(var + eps), add = bias. The reference runs it in
// double, the cuda kernels in T (the coefficients computed in double, rounded once).
template <typename A>
TRAINRT_HOST_DEVICE A apply(A x, A shift, A mul, A add) {
  return (x - shift) * mul + add;
}

// The backward's data gradient with the channel's coefficients: dx = k * (dy - bias_term -
// (x - mean) * x_term), k = scale * r, bias_term = sum(dy) / M, x_term = r * sum(dy * xhat)
// / M, r = 1 / sqrt(var + eps), xhat = (x - mean) * r, M the channel's element count.
template <typename A>
TRAINRT_HOST_DEVICE A grad(A dy, A x, A mean, A k, A bias_term, A x_term) {
  return k * (dy - bias_term - (x - mean) * x_term);
}

}  // namespace trainrt::batchnorm_stats
