// The cpu backend's row-major fp32 BatchNormalizationGrad (ops/norm_cpu.cpp,
// batchnorm_grad_plain: own SSE2 loops, channels in parallel) against the reference, with
// the forward's saved statistics, with and without the fused ReLU gradient (relu_y).
//
// Tolerance, derived from the arithmetic: both kernels compute in double with the same
// coefficients (mean, r = 1/sqrt(var + eps), k = scale * r) and the same per-element
// formulas; only the order of the two channel sums differs. A double sum of M terms t in
// any order is within (M - 1) * 2^-53 * sum|t| of the exact one, so two orders differ by
// at most d = 2 * M * 2^-53 * sum|t|. Per channel:
//   dBias, dScale: |cpu - ref| <= d (of their terms) + 2^-23 |ref| (each rounds once to float)
//   dX = k * (g - bias_term - (x - mean) * x_term), bias_term = dBias/M, x_term = r*dScale/M:
//        |cpu - ref| <= 2|k| (d_bias/M + |x - mean| r d_scale/M)
//                       + 8 * 2^-53 |k| (|g| + |bias_term| + |x - mean| |x_term|) + 2^-23 |ref|
// (the middle term: the double rounding of the formula's few operations). That is about
// 1 ulp of fp32 where nothing cancels; oneDNN's fp32 loops miss it by orders of magnitude.
// NaN in dY or X poisons the channel's sums, so its dBias/dScale/dX are NaN on both
// backends; a NaN relu_y masks dY to 0 (y > 0 is false), as ReluGrad does.
#include <doctest/doctest.h>
#include <oneapi/tbb/global_control.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/onednn/dnnl_util.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

constexpr double kU = 1.0 / 9007199254740992.0;  // 2^-53

struct Feeds {
  TensorMap map;
  bool relu = false;
};

// X with an offset, dY, scale, the saved statistics of X (as the forward's: batch mean,
// biased variance) and, with relu, relu_y with about a third of its values <= 0.
Feeds bn_grad_feeds(const std::vector<int64_t>& dims, uint64_t seed, bool relu) {
  const int64_t C = dims[1];
  Feeds f;
  f.relu = relu;
  Tensor x = random_tensor(DataType::Float32, dims, seed, -1.5, 2.5);
  const int64_t S = x.numel() / (dims[0] * C);
  Tensor mean(DataType::Float32, {C}), var(DataType::Float32, {C});
  for (int64_t c = 0; c < C; ++c) {
    double s = 0, q = 0;
    for (int64_t n = 0; n < dims[0]; ++n)
      for (int64_t i = 0; i < S; ++i) s += x.data<float>()[(n * C + c) * S + i];
    const double m = s / static_cast<double>(dims[0] * S);
    for (int64_t n = 0; n < dims[0]; ++n)
      for (int64_t i = 0; i < S; ++i) q += std::pow(x.data<float>()[(n * C + c) * S + i] - m, 2);
    mean.data<float>()[c] = static_cast<float>(m);
    var.data<float>()[c] = static_cast<float>(q / static_cast<double>(dims[0] * S));
  }
  f.map = {{"dy", random_tensor(DataType::Float32, dims, seed + 1)},
           {"x", x},
           {"scale", random_tensor(DataType::Float32, {C}, seed + 2, 0.5, 1.5)},
           {"saved_mean", mean},
           {"saved_var", var}};
  if (relu) f.map["relu_y"] = random_tensor(DataType::Float32, dims, seed + 3, -0.5, 1.0);
  return f;
}

Node bn_grad_node(bool relu) {
  std::vector<std::string> in{"dy", "x", "scale", "saved_mean", "saved_var"};
  if (relu) in.push_back("relu_y");
  return make_node("BatchNormalizationGrad", in, {"dx", "dscale", "dbias"}, {{"epsilon", Attribute::of_float(1e-5f)}},
                   kTrainrtDomain);
}

// |cpu - ref| within the bound above (NaN where the reference has NaN, and only there).
bool within(double cpu, double ref, double tol) {
  if (std::isnan(ref) || std::isnan(cpu)) return std::isnan(ref) && std::isnan(cpu);
  return std::fabs(cpu - ref) <= tol + std::ldexp(std::fabs(ref), -23);
}

// Runs both backends and checks every output of every channel against the bound.
void check_plain_grad(const std::vector<int64_t>& dims, const Feeds& f) {
  const Node n = bn_grad_node(f.relu);
  const uint64_t fallbacks = dnnl_util::reference_fallbacks();
  const TensorMap cpu = run_node(n, f.map, "cpu"), ref = run_node(n, f.map, "reference");
  CHECK(dnnl_util::reference_fallbacks() == fallbacks);
  const int64_t N = dims[0], C = dims[1], S = f.map.at("x").numel() / (N * C);
  const double M = static_cast<double>(N * S);
  auto in = [&](const char* name, int64_t i) { return static_cast<double>(f.map.at(name).data<float>()[i]); };
  auto out = [](const TensorMap& m, const char* name, int64_t i) { return m.at(name).data<float>()[i]; };
  for (int64_t c = 0; c < C; ++c) {
    CAPTURE(c);
    const double mean = in("saved_mean", c), r = 1.0 / std::sqrt(in("saved_var", c) + static_cast<double>(1e-5f));
    const double k = in("scale", c) * r;
    auto g_at = [&](int64_t e) { return f.relu && !(in("relu_y", e) > 0) ? 0.0 : in("dy", e); };
    double abs_b = 0, abs_s = 0;
    for (int64_t e0 = c * S; e0 < N * C * S; e0 += C * S)
      for (int64_t e = e0; e < e0 + S; ++e) {
        abs_b += std::fabs(g_at(e));
        abs_s += std::fabs(g_at(e) * (in("x", e) - mean) * r);
      }
    const double d_b = 2 * M * kU * abs_b, d_s = 2 * M * kU * abs_s;
    CHECK(within(out(cpu, "dbias", c), out(ref, "dbias", c), d_b));
    CHECK(within(out(cpu, "dscale", c), out(ref, "dscale", c), d_s));
    const double bias_term = out(ref, "dbias", c) / M, x_term = r * out(ref, "dscale", c) / M;
    int64_t bad = 0;
    for (int64_t e0 = c * S; e0 < N * C * S; e0 += C * S)
      for (int64_t e = e0; e < e0 + S; ++e) {
        const double xc = std::fabs(in("x", e) - mean);
        const double tol = 2 * std::fabs(k) * (d_b / M + xc * r * d_s / M) +
                           8 * kU * std::fabs(k) * (std::fabs(g_at(e)) + std::fabs(bias_term) + xc * std::fabs(x_term));
        bad += !within(out(cpu, "dx", e), out(ref, "dx", e), std::isnan(tol) ? 0 : tol);
      }
    CHECK(bad == 0);
  }
}

}  // namespace

TEST_CASE("cpu BatchNormalizationGrad, row-major: odd shapes within the double summation bound") {
  REQUIRE(registry().kernels.find("cpu", kTrainrtDomain, "BatchNormalizationGrad") != nullptr);
  // C not a multiple of 8, H*W not a multiple of 4 or 8 (the SSE2 loop's tail), N = 1,
  // rank 2 and 3, and a Wide ResNet-like plane.
  const std::vector<std::vector<int64_t>> shapes{{1, 3, 5, 7}, {2, 13, 3, 5}, {3, 9, 7},      {1, 11, 2, 2},
                                                 {7, 5},       {1, 1, 9, 9},  {2, 17, 28, 28}};
  for (size_t i = 0; i < shapes.size(); ++i)
    for (bool relu : {false, true}) {
      CAPTURE(dims_to_string(shapes[i]));
      CAPTURE(relu);
      check_plain_grad(shapes[i], bn_grad_feeds(shapes[i], 40 + 4 * i, relu));
    }
}

TEST_CASE("cpu BatchNormalizationGrad, row-major: NaN in dY, X and relu_y as the reference") {
  const std::vector<int64_t> dims{2, 6, 5, 3};  // 15 positions: NaN in the 4-wide loop and in its tail
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (bool relu : {false, true}) {
    CAPTURE(relu);
    Feeds f = bn_grad_feeds(dims, 90, relu);
    f.map.at("dy").data<float>()[0 * 15 + 2] = nan;   // channel 0, in the vector loop
    f.map.at("dy").data<float>()[7 * 15 + 14] = nan;  // n 1, channel 1, the tail
    f.map.at("x").data<float>()[3 * 15 + 5] = nan;    // channel 3
    if (relu) {
      // channel 4: NaN dY under relu_y <= 0 (masked away) and a NaN relu_y (mask 0).
      f.map.at("dy").data<float>()[4 * 15 + 1] = nan;
      f.map.at("relu_y").data<float>()[4 * 15 + 1] = -1.f;
      f.map.at("relu_y").data<float>()[4 * 15 + 6] = nan;
      // channel 0's NaN survives its mask only where relu_y > 0.
      f.map.at("relu_y").data<float>()[0 * 15 + 2] = 1.f;
      f.map.at("relu_y").data<float>()[7 * 15 + 14] = 1.f;
    }
    check_plain_grad(dims, f);
    const TensorMap cpu = run_node(bn_grad_node(relu), f.map, "cpu");
    CHECK(std::isnan(cpu.at("dbias").data<float>()[0]));
    CHECK(std::isnan(cpu.at("dscale").data<float>()[1]));
    CHECK(std::isnan(cpu.at("dx").data<float>()[3 * 15]));
    if (relu) CHECK(!std::isnan(cpu.at("dbias").data<float>()[4]));
  }
}

TEST_CASE("cpu BatchNormalizationGrad, row-major: the same bits on 1 thread and on several") {
  // Each channel is one task summed in one order, so the thread count cannot change a bit.
  const std::vector<int64_t> dims{4, 6, 28, 28};
  const Feeds f = bn_grad_feeds(dims, 120, /*relu=*/true);
  TensorMap one;
  {
    tbb::global_control single(tbb::global_control::max_allowed_parallelism, 1);
    one = run_node(bn_grad_node(true), f.map, "cpu");
  }
  const TensorMap many = run_node(bn_grad_node(true), f.map, "cpu");
  for (const auto& [name, t] : one) {
    CAPTURE(name);
    CHECK(std::memcmp(t.raw(), many.at(name).raw(), t.nbytes()) == 0);
  }
}
