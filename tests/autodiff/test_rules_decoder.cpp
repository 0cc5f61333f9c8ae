// Gradient rules of ConvTranspose, Resize and Upsample (autodiff/rules_conv_transpose.cpp,
// rules_resize.cpp) and their backward ops (ops/conv_transpose.cpp, ops/resize.cpp),
// checked by finite differences (tests/autodiff/gradcheck.h) on small float64 graphs whose
// inputs are parameters, ending in loss = ReduceMean(y * r) with r a random feed.
// Tolerance 1e-6 on |a - n| / max(1, |n|). Nearest resizing is piecewise constant in its
// input's values, linear resizing linear: both have exact finite differences.
#include <doctest/doctest.h>

#include "autodiff/gradcheck.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

constexpr double kTol = 1e-6;
using Attrs = GradAttrs;

// The decoder tests' graphs are opset 13 unless a test names another.
struct Net : GradNet {
  explicit Net(int64_t opset = 13) : GradNet(opset) {}
};

void check(Net& net, const std::string& y, int samples = 16) { check_net(net, y, samples, kTol); }

Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

Tensor floats(std::vector<double> v) {
  Tensor t(DataType::Float32, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<float>()[i] = static_cast<float>(v[i]);
  return t;
}

Tensor int64s(std::vector<int64_t> v) {
  Tensor t(DataType::Int64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

}  // namespace

TEST_CASE("gradcheck: ConvTranspose with strides, output_padding, groups, dilations, pads, output_shape") {
  struct Case {
    std::string what;
    std::vector<int64_t> x, w;
    bool bias;
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      {"stride 2, kernel 3, bias", {2, 3, 3, 4}, {3, 2, 3, 3}, true, {{"strides", ints({2, 2})}}},
      {"stride 2, pads 1, output_padding 1",
       {1, 2, 3, 3},
       {2, 3, 3, 3},
       true,
       {{"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}, {"output_padding", ints({1, 1})}}},
      {"group 2, stride 2x1, no bias",
       {2, 4, 3, 3},
       {4, 2, 2, 3},
       false,
       {{"group", Attribute::of_int(2)}, {"strides", ints({2, 1})}}},
      {"dilation 2, pads 2x1",
       {1, 2, 4, 3},
       {2, 2, 3, 3},
       true,
       {{"dilations", ints({2, 2})}, {"pads", ints({2, 1, 2, 1})}}},
      {"output_shape 8x7, SAME_UPPER stride 2",
       {1, 1, 3, 3},
       {1, 2, 3, 3},
       false,
       {{"output_shape", ints({8, 7})}, {"strides", ints({2, 2})}, {"auto_pad", Attribute::of_string("SAME_UPPER")}}},
      {"1-D, stride 3", {2, 2, 4}, {2, 3, 2}, true, {{"strides", ints({3})}}},
      {"3-D, stride 2", {1, 2, 2, 2, 3}, {2, 1, 2, 2, 2}, true, {{"strides", ints({2, 2, 2})}}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    Net net;
    std::vector<std::string> ins{net.param("x", c.x), net.param("w", c.w)};
    if (c.bias) ins.push_back(net.param("b", {c.w[1] * (c.attrs.count("group") ? c.attrs.at("group").i : 1)}));
    check(net, net.node("ConvTranspose", ins, c.attrs));
  }
}

TEST_CASE("gradcheck: Resize nearest and linear, half_pixel and align_corners, scales and sizes; Upsample") {
  struct Case {
    std::string what;
    std::vector<int64_t> x;
    Attrs attrs;
    std::vector<double> scales;
    std::vector<int64_t> sizes;
  };
  const std::vector<Case> cases = {
      {"nearest x2 asymmetric floor (PyTorch's)",
       {2, 2, 3, 3},
       {{"coordinate_transformation_mode", Attribute::of_string("asymmetric")},
        {"nearest_mode", Attribute::of_string("floor")}},
       {1, 1, 2, 2},
       {}},
      {"nearest half_pixel round_prefer_ceil to 5x7",
       {1, 2, 3, 4},
       {{"nearest_mode", Attribute::of_string("round_prefer_ceil")}},
       {},
       {1, 2, 5, 7}},
      {"linear half_pixel x2", {2, 2, 3, 4}, {{"mode", Attribute::of_string("linear")}}, {1, 1, 2, 2}, {}},
      {"linear align_corners to 5x7",
       {1, 2, 3, 4},
       {{"mode", Attribute::of_string("linear")},
        {"coordinate_transformation_mode", Attribute::of_string("align_corners")}},
       {},
       {1, 2, 5, 7}},
      {"linear half_pixel downsample 0.6",
       {1, 1, 5, 6},
       {{"mode", Attribute::of_string("linear")}},
       {1, 1, 0.6, 0.6},
       {}},
      {"trilinear pytorch_half_pixel",
       {1, 1, 2, 3, 2},
       {{"mode", Attribute::of_string("linear")},
        {"coordinate_transformation_mode", Attribute::of_string("pytorch_half_pixel")}},
       {1, 1, 2, 1.5, 2},
       {}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    Net net;
    std::vector<std::string> ins{net.param("x", c.x), ""};
    ins.push_back(c.scales.empty() ? "" : net.constant("scales", floats(c.scales)));
    if (!c.sizes.empty()) ins.push_back(net.constant("sizes", int64s(c.sizes)));
    check(net, net.node("Resize", ins, c.attrs));
  }
  SUBCASE("Upsample-9 linear") {
    Net net;  // the schema takes Upsample at any opset from 7
    check(net, net.node("Upsample", {net.param("x", {1, 2, 3, 3}), net.constant("scales", floats({1, 1, 2, 3}))},
                        {{"mode", Attribute::of_string("linear")}}));
  }
}
