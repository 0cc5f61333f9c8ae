// The reference kernels are the oracle for the fp32 kernels, so their fp32 sums are
// accumulated in double and rounded once: an fp32 reference output is the fp64
// reference's output (same inputs, widened) rounded to float, bit for bit. A plain
// float accumulation of the same long sum is many ulps away from it, so the check
// below would fail for an oracle that summed in fp32 (as PyTorch's fp32 does).
//
// Each case is one long reduction (2^16 positive terms, sum ~ 2^14, where a float's
// ulp is 2^-9): Conv over input channels, ConvGrad's dW over positions, Gemm and
// batched MatMul over K, ReduceSum, LayerNormalization's Mean and BatchNormalization's
// batch mean. The float accumulation's error is a random walk of 2^16 roundings of
// up to half an ulp each, ~100 ulps; the test requires more than 8.
#include <doctest/doctest.h>

#include <cmath>

#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

constexpr int64_t kTerms = int64_t{1} << 16;

Tensor widened(const Tensor& x) {
  Tensor y(DataType::Float64, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) y.set_from_double(i, x.get_as_double(i));
  return y;
}

// Runs `n` on the reference backend with fp32 feeds and with the same values in fp64;
// returns output `out` of both.
std::pair<Tensor, Tensor> run_both(const Node& n, const TensorMap& feeds32, const std::string& out,
                                   int64_t opset = 17) {
  TensorMap feeds64;
  for (const auto& [name, t] : feeds32) feeds64[name] = widened(t);
  const Graph g32 = single_node_graph(n, feeds32, {}, opset);
  const Graph g64 = single_node_graph(n, feeds64, {}, opset);
  auto backend = make_backend("reference");
  return {run_graph(g32, feeds32, *backend).at(out), run_graph(g64, feeds64, *backend).at(out)};
}

// Every fp32 output is its fp64 counterpart rounded to float.
void check_rounded_once(const Tensor& r32, const Tensor& r64) {
  REQUIRE(r32.numel() == r64.numel());
  for (int64_t i = 0; i < r32.numel(); ++i) {
    CAPTURE(i);
    CHECK(r32.data<float>()[i] == static_cast<float>(r64.data<double>()[i]));
  }
}

// A float accumulation of sum(a[k] * b[k]) (b null: sum(a)) is more than 8 ulps of
// float from the exact `want`: the bound above is one a float sum cannot meet.
void check_float_sum_fails(const float* a, const float* b, int64_t n, double want) {
  float acc = 0;
  for (int64_t k = 0; k < n; ++k) acc += b ? a[k] * b[k] : a[k];
  const double ulp = std::ldexp(1.0, std::ilogb(want) - 23);
  CAPTURE(acc);
  CAPTURE(want);
  CHECK(std::fabs(static_cast<double>(acc) - want) > 8 * ulp);
}

Tensor positive(std::vector<int64_t> dims, uint64_t seed) {
  return random_tensor(DataType::Float32, std::move(dims), seed, 0, 1);
}

}  // namespace

TEST_CASE("fp32 reference Conv, ConvGrad dW, Gemm, MatMul: a long sum is the fp64 result rounded once") {
  SUBCASE("Conv over 2^16 input channels") {
    const TensorMap f{{"x", positive({1, kTerms, 1, 1}, 1)}, {"w", positive({1, kTerms, 1, 1}, 2)}};
    const auto [r32, r64] = run_both(make_node("Conv", {"x", "w"}, {"y"}), f, "y");
    check_rounded_once(r32, r64);
    check_float_sum_fails(f.at("x").data<float>(), f.at("w").data<float>(), kTerms, r64.data<double>()[0]);
  }
  SUBCASE("ConvGrad dW over 256x256 positions") {
    const TensorMap f{
        {"dy", positive({1, 1, 256, 256}, 3)}, {"x", positive({1, 1, 256, 256}, 4)}, {"w", positive({1, 1, 1, 1}, 5)}};
    const auto [r32, r64] = run_both(make_node("ConvGrad", {"dy", "x", "w"}, {"", "dw"}, {}, kTrainrtDomain), f, "dw");
    check_rounded_once(r32, r64);
    check_float_sum_fails(f.at("dy").data<float>(), f.at("x").data<float>(), kTerms, r64.data<double>()[0]);
  }
  SUBCASE("Gemm over K = 2^16") {
    const TensorMap f{{"a", positive({1, kTerms}, 6)}, {"b", positive({kTerms, 1}, 7)}};
    const auto [r32, r64] = run_both(make_node("Gemm", {"a", "b"}, {"y"}), f, "y");
    check_rounded_once(r32, r64);
    check_float_sum_fails(f.at("a").data<float>(), f.at("b").data<float>(), kTerms, r64.data<double>()[0]);
  }
  SUBCASE("batched MatMul over K = 2^16, B broadcast") {
    const TensorMap f{{"a", positive({2, 1, kTerms}, 8)}, {"b", positive({kTerms}, 9)}};
    const auto [r32, r64] = run_both(make_node("MatMul", {"a", "b"}, {"y"}), f, "y");
    check_rounded_once(r32, r64);
    check_float_sum_fails(f.at("a").data<float>() + kTerms, f.at("b").data<float>(), kTerms, r64.data<double>()[1]);
  }
}

TEST_CASE("fp32 reference ReduceSum, LayerNormalization and BatchNormalization statistics: rounded once") {
  const Tensor x = positive({1, kTerms}, 10);
  SUBCASE("ReduceSum") {
    const auto [r32, r64] = run_both(make_node("ReduceSum", {"x"}, {"y"}), {{"x", x}}, "y", 13);
    check_rounded_once(r32, r64);
    check_float_sum_fails(x.data<float>(), nullptr, kTerms, r64.data<double>()[0]);
  }
  SUBCASE("LayerNormalization Mean") {
    const TensorMap f{{"x", x}, {"s", positive({kTerms}, 11)}};
    const auto [r32, r64] = run_both(make_node("LayerNormalization", {"x", "s"}, {"y", "mean"}), f, "mean");
    check_rounded_once(r32, r64);
    check_float_sum_fails(x.data<float>(), nullptr, kTerms, r64.data<double>()[0] * kTerms);
  }
  SUBCASE("BatchNormalization batch mean (opset 13 saved_mean)") {
    TensorMap f{{"x", positive({1, 1, kTerms}, 12)}};
    for (const char* p : {"scale", "b", "mean", "var"}) f[p] = positive({1}, 13);
    const auto [r32, r64] =
        run_both(make_node("BatchNormalization", {"x", "scale", "b", "mean", "var"}, {"y", "rm", "rv", "sm", "sv"}), f,
                 "sm", 13);
    check_rounded_once(r32, r64);
    check_float_sum_fails(f.at("x").data<float>(), nullptr, kTerms, r64.data<double>()[0] * kTerms);
  }
}
