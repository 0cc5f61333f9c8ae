// The cpu backend's row-major fp32 MaxPool and MaxPoolGrad for the 2x2 stride-2 unpadded
// window (ops/pool_cpu.cpp: own SSE2 loops) against the reference, bit for bit: both pick
// window_argmax's element (first maximum, a NaN only as the window's first element), so
// Y is that element and dX is dY there (+0 for -0, as the reference's double 0 + dY) and
// +0 elsewhere. Shapes with an odd last row or column (read by no window), output rows
// not a multiple of 4 (the SSE2 loop's tail), N = 1; X quantised to a few levels with
// +0 and -0 among them (ties everywhere), NaN at each of a window's four places.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "ops/onednn/dnnl_util.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.dims() == b.dims() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// X in {-1, -0, +0, 0.5, 1} (about a fifth each), with NaN at (n=0, c=0)'s windows
// (0,0) at a, (0,1) at b, (1,0) at c, (1,1) at d when the plane has them; dY random
// with some -0.
TensorMap pool_feeds(const std::vector<int64_t>& dims, uint64_t seed) {
  Tensor x = random_tensor(DataType::Float32, dims, seed, 0, 5);
  const float levels[5] = {-1.f, -0.f, 0.f, 0.5f, 1.f};
  float* xp = x.data<float>();
  for (int64_t i = 0; i < x.numel(); ++i) xp[i] = levels[std::min(4, static_cast<int>(xp[i]))];
  const int64_t H = dims[2], W = dims[3];
  const float nan = std::numeric_limits<float>::quiet_NaN();
  if (H >= 4 && W >= 4) {
    xp[0] = nan;              // window (0,0), a
    xp[3] = nan;              // window (0,1), b
    xp[2 * W + 0 + W] = nan;  // window (1,0), c
    xp[3 * W + 3] = nan;      // window (1,1), d
  }
  std::vector<int64_t> yd{dims[0], dims[1], H / 2, W / 2};
  Tensor dy = random_tensor(DataType::Float32, yd, seed + 1);
  for (int64_t i = 0; i < dy.numel(); i += 7) dy.data<float>()[i] = -0.f;
  return {{"x", x}, {"dy", dy}};
}

std::map<std::string, Attribute> attrs_2x2() {
  return {{"kernel_shape", Attribute::of_ints({2, 2})}, {"strides", Attribute::of_ints({2, 2})}};
}

}  // namespace

TEST_CASE("cpu MaxPool and MaxPoolGrad 2x2 stride 2, row-major: bit for bit with the reference") {
  const std::vector<std::vector<int64_t>> shapes{{1, 3, 5, 7},   {2, 5, 28, 28}, {1, 1, 14, 14}, {3, 2, 2, 9},
                                                 {2, 3, 16, 18}, {1, 2, 9, 4},   {1, 1, 8, 17},  {2, 1, 4, 4}};
  for (size_t i = 0; i < shapes.size(); ++i) {
    CAPTURE(dims_to_string(shapes[i]));
    const TensorMap f = pool_feeds(shapes[i], 70 + 3 * i);
    const uint64_t fallbacks = dnnl_util::reference_fallbacks();
    const Node fwd = make_node("MaxPool", {"x"}, {"y"}, attrs_2x2());
    const TensorMap y_cpu = run_node(fwd, {{"x", f.at("x")}}, "cpu");
    const TensorMap y_ref = run_node(fwd, {{"x", f.at("x")}}, "reference");
    CHECK(same_bits(y_cpu.at("y"), y_ref.at("y")));
    const Node grad = make_node("MaxPoolGrad", {"dy", "x"}, {"dx"}, attrs_2x2(), kTrainrtDomain);
    const TensorMap dx_cpu = run_node(grad, f, "cpu"), dx_ref = run_node(grad, f, "reference");
    CHECK(same_bits(dx_cpu.at("dx"), dx_ref.at("dx")));
    CHECK(dnnl_util::reference_fallbacks() == fallbacks);
  }
}

TEST_CASE("cpu MaxPool 2x2 stride 2, row-major: a NaN wins only as a window's first element") {
  const TensorMap f = pool_feeds({1, 1, 4, 8}, 5);
  const TensorMap y = run_node(make_node("MaxPool", {"x"}, {"y"}, attrs_2x2()), {{"x", f.at("x")}}, "cpu");
  const float* yp = y.at("y").data<float>();
  CHECK(std::isnan(yp[0]));   // NaN as a
  CHECK(!std::isnan(yp[1]));  // NaN as b: skipped
  CHECK(!std::isnan(yp[4]));  // as c
  CHECK(!std::isnan(yp[5]));  // as d
}
