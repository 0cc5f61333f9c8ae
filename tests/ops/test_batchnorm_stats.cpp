// ops/core/batchnorm_stats.h: the conversions the cuda backend's batch-norm graphs run
// (ops/norm_graph_cuda.cu) between cuDNN's saved statistics (mean, inverse std) and
// trainrt's (mean, biased variance, ONNX's running rule), checked on the host against
// the reference kernel, which writes its statistics through the same write_channel.
#include <doctest/doctest.h>

#include <cmath>
#include <vector>

#include "ops/core/batchnorm_stats.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

TEST_CASE("batchnorm_stats: the biased variance comes back from a float inverse std") {
  for (double eps : {1e-5, 1e-3})
    for (double var : {0.0, 1e-9, 1e-6, 1e-3, 0.25, 1.0, 1e3}) {
      CAPTURE(eps);
      CAPTURE(var);
      // cuDNN saves r in float32: one rounding of 1/sqrt(var + eps)
      const auto r = static_cast<float>(batchnorm_stats::inv_std(var, eps));
      const double back = batchnorm_stats::variance_of_inv_std(r, eps);
      CHECK(back >= 0);
      // r's relative rounding (2^-24) becomes at most twice that on 1/r^2 = var + eps
      CHECK(std::abs(back - var) <= 2.5e-7 * (var + eps));
    }
}

TEST_CASE("batchnorm_stats: cuDNN's mean and inverse std give the reference's running and saved statistics") {
  // N*H*W = 18 values a channel: an unbiased variance would be 18/17 of the biased one.
  const int64_t N = 2, C = 8, H = 3, W = 3, S = H * W;
  Tensor x = random_tensor(DataType::Float32, {N, C, H, W}, 31, -2, 3);
  float* xp = x.data<float>();
  for (int64_t n = 0; n < N; ++n)
    for (int64_t s = 0; s < S; ++s) {
      xp[(n * C + 0) * S + s] = 0.75f;                                           // a constant channel: var 0
      xp[(n * C + 1) * S + s] = 1.0f + 1e-3f * static_cast<float>((n + s) % 3);  // var far below 1 (~1e-6)
    }
  const Tensor scale = random_tensor(DataType::Float32, {C}, 32, 0.5, 1.5);
  const Tensor bias = random_tensor(DataType::Float32, {C}, 33);
  const Tensor input_mean = random_tensor(DataType::Float32, {C}, 34);
  const Tensor input_var = random_tensor(DataType::Float32, {C}, 35, 0.5, 2);
  const float eps = 1e-5f, momentum = 0.9f;
  Node n = make_node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y", "rm", "rv"},
                     {{"training_mode", Attribute::of_int(1)}, {"momentum", Attribute::of_float(momentum)}});
  TensorMap ref = run_node(n, {{"x", x}, {"s", scale}, {"b", bias}, {"m", input_mean}, {"v", input_var}}, "reference");

  // What the graph path computes: cuDNN's saved mean and inverse std (float32; here from
  // the exact batch statistics), then every other output through write_channel.
  std::vector<float> rm(C), rv(C), bm(C), bv(C), sm(C), sv(C);
  const batchnorm_stats::ChannelOutputs<float> outs{rm.data(), rv.data(), bm.data(), bv.data(), sm.data(), sv.data()};
  for (int64_t c = 0; c < C; ++c) {
    double sum = 0, sq = 0;
    for (int64_t k = 0; k < N; ++k)
      for (int64_t s = 0; s < S; ++s) sum += xp[(k * C + c) * S + s];
    const double mean = sum / static_cast<double>(N * S);
    for (int64_t k = 0; k < N; ++k)
      for (int64_t s = 0; s < S; ++s) sq += std::pow(xp[(k * C + c) * S + s] - mean, 2);
    const double var = sq / static_cast<double>(N * S);
    const auto saved_mean = static_cast<float>(mean);
    const auto saved_inv_std = static_cast<float>(batchnorm_stats::inv_std(var, eps));
    batchnorm_stats::write_channel(outs, c, input_mean.data<float>()[c], input_var.data<float>()[c], saved_mean,
                                   batchnorm_stats::variance_of_inv_std(saved_inv_std, eps), momentum);
    CAPTURE(c);
    CHECK(std::abs(sv[c] - var) <= 3e-7 * (var + eps) + 1e-7 * var);
    CHECK(sm[c] == saved_mean);
    CHECK(bm[c] == sm[c]);
    CHECK(bv[c] == sv[c]);
    // the reference's running statistics, biased variance and ONNX's momentum rule
    CHECK(std::abs(rm[c] - ref["rm"].data<float>()[c]) <= 1e-6f * (1 + std::abs(rm[c])));
    CHECK(std::abs(rv[c] - ref["rv"].data<float>()[c]) <= 1e-6f * (1 + std::abs(rv[c])));
  }
}
