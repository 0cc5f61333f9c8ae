// fp32 accuracy of the cpu backend's batch norm (ops/norm_cpu.cpp) on what makes a
// batch-norm network's fp32 gradients drift from fp64: long per-channel reductions
// (M = N*H*W values a channel) over channels whose mean is large next to their spread,
// down to nearly constant ones (a variance far below epsilon). The oracle is the
// reference backend in fp64.
//
// The forward training kernel's saved statistics must be the fp64 batch mean and
// biased variance rounded to float once (statistics summed in fp32 lose digits to the
// mean's size, E[x^2]-E[x]^2 loses all of them, and 1/sqrt(var + eps) amplifies that
// error in Y, where it can flip a following Relu). The rest is bounded from fp32
// arithmetic, with u = 2^-24, per channel of mean m, r = 1/sqrt(var + eps):
//   Y:  the saved mean's rounding moves every x - m by u*|m| (the same for any fp32
//       batch norm that keeps its mean in float), plus a few roundings of the apply,
//       which may also be x*(scale*r) + (B - m*scale*r) (roundings of size u*|m|*scale*r):
//       |dY| <= 4*|scale|*r*u*(|m| + |x - m|) + 4*u*(|y| + |B|)
//   dScale, dBias, dX given the saved statistics (the backward reads the forward's
//       statistics, and the fp64 reference gets the same float values widened): sums
//       of M terms, whose fp32 rounding grows like sqrt(M)*u times the output's RMS
//       (tests/ops/test_cpu_grad_vs_reference.cpp): max |cpu - ref| <= 32*sqrt(M)*u*rms.
// Both layouts the cpu backend keeps are run: row-major, and Blocked16c (its layout on
// AVX-512 CPUs, where oneDNN runs its AVX-512 kernels on it; on AVX2 oneDNN's own
// reference kernels), which must give the same statistics bits as row-major.
#include <doctest/doctest.h>

#include <cmath>
#include <string>

#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

constexpr double kU = 1.0 / (1 << 24);

Tensor widened(const Tensor& x) {
  Tensor y(DataType::Float64, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) y.set_from_double(i, x.get_as_double(i));
  return y;
}

Tensor in_layout(const Tensor& t, Layout layout) {
  if (layout == Layout::Plain) return t;
  Tensor b(t.dtype(), t.dims());
  b.set_layout(layout);
  copy_from_plain(t, b);
  return b;
}

Tensor empty_like(const Tensor& t, Layout layout) {
  Tensor y(t.dtype(), t.dims());
  y.set_layout(layout);
  return y;
}

double rms(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.get_as_double(i) * t.get_as_double(i);
  return std::sqrt(s / static_cast<double>(t.numel()));
}

// max |got - want| <= 32*sqrt(M)*u*rms(want): an fp32 sum of M terms, in any order.
void check_reduction(const std::string& what, const Tensor& got, const Tensor& want, int64_t m) {
  const double diff = max_abs_diff(got, want);
  const double bound = 32 * std::sqrt(static_cast<double>(m)) * kU * rms(want);
  INFO(what, ": max |cpu - fp64| = ", diff, ", bound ", bound);
  CHECK(diff <= bound);
}

}  // namespace

TEST_CASE("BatchNormalization and its gradient on cpu in fp32: large means, small spreads, long reductions") {
  const int64_t N = 8, C = 32, S = 32 * 32, M = N * S;
  const std::vector<int64_t> dims{N, C, 32, 32};
  const float eps = 1e-5f;
  // Channel c: mean offset[c % 4] (up to 1e3), spread spread[c / 4 % 4] (down to 1e-3,
  // a variance ~3e-7 far below eps): from well scaled to nearly constant.
  const double offset[4] = {0, 1, -30, 1000}, spread[4] = {1, 0.1, 1e-2, 1e-3};
  Tensor x = random_tensor(DataType::Float32, dims, 1501);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = i / S % C;
    x.data<float>()[i] = static_cast<float>(offset[c % 4] + spread[c / 4 % 4] * x.data<float>()[i]);
  }
  const Tensor scale = random_tensor(DataType::Float32, {C}, 1502, 0.5, 1.5);
  const Tensor bias = random_tensor(DataType::Float32, {C}, 1503);
  const Tensor rm = random_tensor(DataType::Float32, {C}, 1504);
  const Tensor rv = random_tensor(DataType::Float32, {C}, 1505, 0.5, 1.5);
  const Tensor dy = random_tensor(DataType::Float32, dims, 1506);

  const Node fwd = make_node("BatchNormalization", {"x", "s", "b", "m", "v"}, {"y", "", "", "", "", "sm", "sv"},
                             {{"training_mode", Attribute::of_int(1)}, {"epsilon", Attribute::of_float(eps)}});
  const Node bwd = make_node("BatchNormalizationGrad", {"dy", "x", "scale", "sm", "sv"}, {"dx", "dscale", "dbias"},
                             {{"epsilon", Attribute::of_float(eps)}}, kTrainrtDomain);
  const TensorMap ref = run_node(
      fwd, {{"x", widened(x)}, {"s", widened(scale)}, {"b", widened(bias)}, {"m", widened(rm)}, {"v", widened(rv)}},
      "reference");
  const double* m64 = ref.at("sm").data<double>();
  const double* v64 = ref.at("sv").data<double>();

  auto cpu = make_backend("cpu");
  const Kernel& fwd_kernel = cpu->kernel(fwd);
  const Kernel& bwd_kernel = cpu->kernel(bwd);
  Tensor saved_mean[2], saved_var[2];
  for (Layout layout : {Layout::Plain, Layout::Blocked16c}) {
    const int l = layout == Layout::Plain ? 0 : 1;
    CAPTURE(l);
    const Tensor xl = in_layout(x, layout), dyl = in_layout(dy, layout);
    Tensor y = empty_like(x, layout), dx = empty_like(x, layout);
    Tensor& sm = saved_mean[l] = Tensor(DataType::Float32, {C});
    Tensor& sv = saved_var[l] = Tensor(DataType::Float32, {C});
    KernelContext f{fwd, {&xl, &scale, &bias, &rm, &rv}, {&y, nullptr, nullptr, nullptr, nullptr, &sm, &sv}};
    f.training = true;
    fwd_kernel(f);
    const Tensor yp = to_plain(y);

    for (int64_t c = 0; c < C; ++c) {
      CAPTURE(c);
      // The statistics: fp64 ones rounded to float once.
      CHECK(sm.data<float>()[c] == static_cast<float>(m64[c]));
      CHECK(sv.data<float>()[c] == static_cast<float>(v64[c]));
      const double r = 1 / std::sqrt(v64[c] + eps), g = std::abs(scale.data<float>()[c]);
      const double b = std::abs(bias.data<float>()[c]);
      double worst = 0;  // the largest |dY| / bound in the channel
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) {
          const int64_t i = (n * C + c) * S + s;
          const double want = ref.at("y").data<double>()[i];
          const double bound = 4 * g * r * kU * (std::abs(m64[c]) + std::abs(x.data<float>()[i] - m64[c])) +
                               4 * kU * (std::abs(want) + b);
          worst = std::max(worst, std::abs(yp.data<float>()[i] - want) / bound);
        }
      INFO("Y: largest error in units of its bound ", worst);
      CHECK(worst <= 1);
    }

    // The backward from the saved statistics, against fp64 from the same float values.
    Tensor dscale(DataType::Float32, {C}), dbias(DataType::Float32, {C});
    KernelContext k{bwd, {&dyl, &xl, &scale, &sm, &sv}, {&dx, &dscale, &dbias}};
    k.training = true;
    bwd_kernel(k);
    const TensorMap want = run_node(
        bwd,
        {{"dy", widened(dy)}, {"x", widened(x)}, {"scale", widened(scale)}, {"sm", widened(sm)}, {"sv", widened(sv)}},
        "reference");
    check_reduction("dX", to_plain(dx), want.at("dx"), M);
    check_reduction("dScale", dscale, want.at("dscale"), M);
    check_reduction("dBias", dbias, want.at("dbias"), M);
  }
  // Both layouts normalise with the same statistics bits.
  CHECK(max_abs_diff(saved_mean[0], saved_mean[1]) == 0);
  CHECK(max_abs_diff(saved_var[0], saved_var[1]) == 0);
}
