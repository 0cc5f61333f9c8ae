// ConvTranspose, Resize, Upsample and their backward ops (ops/conv_transpose.cpp,
// ops/resize.cpp): hand-computed values, the shape rules' errors, and the cpu kernels
// against the reference. The cpu kernels are the reference's loops over parallel rows
// (ops/*_loops.h), so the stated tolerance is exact equality in fp32 and fp64.
#include <doctest/doctest.h>

#include "graph/error.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

using Attrs = std::map<std::string, Attribute>;
Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }
Attribute str(const char* s) { return Attribute::of_string(s); }

Tensor floats(std::vector<double> v) {
  const int64_t n = static_cast<int64_t>(v.size());  // before v is moved from
  return make(DataType::Float32, {n}, std::move(v));
}

// Runs `n` on both backends with the same feeds and checks every output is equal.
void check_cpu_equals_reference(const Node& n, const TensorMap& feeds, const TensorMap& inits = {}) {
  TensorMap ref = run_node(n, feeds, "reference", inits);
  TensorMap cpu = run_node(n, feeds, "cpu", inits);
  for (const std::string& o : n.outputs) {
    if (o.empty()) continue;
    CAPTURE(o);
    CHECK(max_abs_diff(cpu.at(o), ref.at(o)) == 0.0);
  }
}

}  // namespace

TEST_CASE("ConvTranspose: stride 2 of a 2x2 input by a 2x2 kernel tiles the kernel") {
  // x = [[1,2],[3,4]], w = [[1,10],[100,1000]], stride 2: each input pixel writes x*w into its own 2x2 block.
  Node n = make_node("ConvTranspose", {"x", "w"}, {"y"}, {{"strides", ints({2, 2})}});
  TensorMap out = run_node(n, {{"x", make(DataType::Float32, {1, 1, 2, 2}, {1, 2, 3, 4})}}, "reference",
                           {{"w", make(DataType::Float32, {1, 1, 2, 2}, {1, 10, 100, 1000})}});
  const Tensor& y = out.at("y");
  REQUIRE(y.dims() == std::vector<int64_t>{1, 1, 4, 4});
  const std::vector<double> want{1, 10, 2, 20, 100, 1000, 200, 2000, 3, 30, 4, 40, 300, 3000, 400, 4000};
  for (int64_t i = 0; i < 16; ++i) CHECK(y.get_as_double(i) == want[static_cast<size_t>(i)]);
}

TEST_CASE("ConvTranspose and ConvTransposeGrad: cpu equals the reference (fp32, fp64)") {
  const std::vector<Attrs> cases = {
      {{"strides", ints({2, 2})}, {"pads", ints({1, 0, 1, 2})}, {"output_padding", ints({1, 1})}},
      {{"group", Attribute::of_int(2)}, {"dilations", ints({2, 1})}},
      {{"output_shape", ints({9, 10})}, {"strides", ints({2, 3})}},
  };
  for (DataType t : {DataType::Float32, DataType::Float64})
    for (const Attrs& a : cases) {
      const Tensor x = random_tensor(t, {3, 4, 5, 4}, 1), w = random_tensor(t, {4, 3, 3, 2}, 2),
                   b = random_tensor(t, {6}, 3);
      const int64_t group = a.count("group") ? 2 : 1;
      const Tensor bias = group == 2 ? b : random_tensor(t, {3}, 3);
      Node fwd = make_node("ConvTranspose", {"x", "w", "b"}, {"y"}, a);
      check_cpu_equals_reference(fwd, {{"x", x}, {"w", w}, {"b", bias}});
      const Tensor y = run_node(fwd, {{"x", x}, {"w", w}, {"b", bias}}, "reference").at("y");
      Node grad = make_node("ConvTransposeGrad", {"dy", "x", "w"}, {"dx", "dw", "db"}, a, kTrainrtDomain);
      check_cpu_equals_reference(grad, {{"dy", random_tensor(t, y.dims(), 4)}, {"x", x}, {"w", w}});
    }
}

TEST_CASE("ConvTranspose: 1-D and 3-D; output_padding must be below the stride") {
  Node n1 = make_node("ConvTranspose", {"x", "w"}, {"y"}, {{"strides", ints({3})}});
  TensorMap o1 = run_node(
      n1,
      {{"x", random_tensor(DataType::Float32, {2, 3, 5}, 1)}, {"w", random_tensor(DataType::Float32, {3, 2, 4}, 2)}},
      "cpu");
  CHECK(o1.at("y").dims() == std::vector<int64_t>{2, 2, 16});  // 3*(5-1) + 4
  Node n3 = make_node("ConvTranspose", {"x", "w"}, {"y"}, {{"strides", ints({2, 2, 2})}});
  check_cpu_equals_reference(n3, {{"x", random_tensor(DataType::Float32, {1, 2, 2, 3, 2}, 1)},
                                  {"w", random_tensor(DataType::Float32, {2, 2, 2, 2, 2}, 2)}});
  Node bad = make_node("ConvTranspose", {"x", "w"}, {"y"}, {{"output_padding", ints({1, 1})}});
  const std::string e = error_of([&] {
    run_node(bad,
             {{"x", random_tensor(DataType::Float32, {1, 1, 3, 3}, 1)},
              {"w", random_tensor(DataType::Float32, {1, 1, 3, 3}, 2)}},
             "reference");
  });
  CHECK(e.find("output_padding") != std::string::npos);
}

TEST_CASE("Resize: nearest rounding modes and linear coordinate transforms on a 1-D ramp") {
  // x = [0, 1, 2, 3] resized to 8 (scale 2) along the last axis.
  const Tensor x = make(DataType::Float32, {1, 1, 1, 4}, {0, 1, 2, 3});
  auto run = [&](Attrs a) {
    Node n = make_node("Resize", {"x", "", "scales"}, {"y"}, std::move(a));
    const Tensor y = run_node(n, {{"x", x}}, "reference", {{"scales", floats({1, 1, 1, 2})}}).at("y");
    std::vector<double> v;
    for (int64_t i = 0; i < y.numel(); ++i) v.push_back(y.get_as_double(i));
    return v;
  };
  using V = std::vector<double>;
  // half_pixel: x_in = (o + 0.5)/2 - 0.5 = -0.25, 0.25, 0.75, 1.25, ...
  CHECK(run({{"nearest_mode", str("round_prefer_floor")}}) == V{0, 0, 1, 1, 2, 2, 3, 3});
  CHECK(run({{"nearest_mode", str("floor")}}) == V{0, 0, 0, 1, 1, 2, 2, 3});
  CHECK(run({{"nearest_mode", str("ceil")}}) == V{0, 1, 1, 2, 2, 3, 3, 3});
  // asymmetric: x_in = o/2 = 0, 0.5, 1, 1.5, ...: the rounding of halves
  CHECK(run({{"coordinate_transformation_mode", str("asymmetric")}, {"nearest_mode", str("round_prefer_floor")}}) ==
        V{0, 0, 1, 1, 2, 2, 3, 3});
  CHECK(run({{"coordinate_transformation_mode", str("asymmetric")}, {"nearest_mode", str("round_prefer_ceil")}}) ==
        V{0, 1, 1, 2, 2, 3, 3, 3});
  CHECK(run({{"mode", str("linear")}}) == V{0, 0.25, 0.75, 1.25, 1.75, 2.25, 2.75, 3});
  CHECK(run({{"mode", str("linear")}, {"coordinate_transformation_mode", str("asymmetric")}}) ==
        V{0, 0.5, 1, 1.5, 2, 2.5, 3, 3});
  const V ac = run({{"mode", str("linear")}, {"coordinate_transformation_mode", str("align_corners")}});
  for (size_t i = 0; i < 8; ++i) CHECK(ac[i] == doctest::Approx(3.0 * static_cast<double>(i) / 7).epsilon(1e-6));
}

TEST_CASE("Resize, Upsample and ResizeGrad: cpu equals the reference; refusals name the node") {
  const std::vector<Attrs> cases = {
      {},
      {{"mode", str("linear")}},
      {{"mode", str("linear")}, {"coordinate_transformation_mode", str("align_corners")}},
      {{"coordinate_transformation_mode", str("asymmetric")}, {"nearest_mode", str("floor")}},
  };
  for (DataType t : {DataType::Float32, DataType::Float64})
    for (const Attrs& a : cases) {
      const Tensor x = random_tensor(t, {2, 3, 5, 4}, 1);
      const TensorMap inits{{"scales", floats({1, 1, 2.5, 1.5})}};
      check_cpu_equals_reference(make_node("Resize", {"x", "", "scales"}, {"y"}, a), {{"x", x}}, inits);
      Node grad = make_node("ResizeGrad", {"dy", "x", "", "scales"}, {"dx"}, a, kTrainrtDomain);
      check_cpu_equals_reference(grad, {{"dy", random_tensor(t, {2, 3, 12, 6}, 2)}, {"x", x}}, inits);
    }
  check_cpu_equals_reference(make_node("Upsample", {"x", "scales"}, {"y"}, {{"mode", str("linear")}}),
                             {{"x", random_tensor(DataType::Float32, {1, 2, 3, 3}, 1)}},
                             {{"scales", floats({1, 1, 2, 2})}});
  Node cubic = make_node("Resize", {"x", "", "scales"}, {"y"}, {{"mode", str("cubic")}});
  ErrorKind kind{};
  const std::string e = error_of(
      [&] {
        run_node(cubic, {{"x", random_tensor(DataType::Float32, {1, 1, 2, 2}, 1)}}, "reference",
                 {{"scales", floats({1, 1, 2, 2})}});
      },
      &kind);
  CHECK(kind == ErrorKind::Unsupported);
  CHECK(e.find("Resize_test") != std::string::npos);
  CHECK(e.find("cubic") != std::string::npos);
}

TEST_CASE("Resize: sizes and scales fed at run time specialise the plan") {
  Node n = make_node("Resize", {"x", "", "", "sizes"}, {"y"}, {{"mode", str("linear")}});
  const Tensor x = random_tensor(DataType::Float32, {1, 1, 3, 3}, 1);
  TensorMap out = run_node(n, {{"x", x}, {"sizes", make(DataType::Int64, {4}, {1, 1, 6, 5})}}, "cpu");
  CHECK(out.at("y").dims() == std::vector<int64_t>{1, 1, 6, 5});
  Node s = make_node("Resize", {"x", "", "scales"}, {"y"});
  TensorMap out2 = run_node(s, {{"x", x}, {"scales", floats({1, 1, 2, 3})}}, "reference");
  CHECK(out2.at("y").dims() == std::vector<int64_t>{1, 1, 6, 9});
}

TEST_CASE("Resize opset 18: axes, keep_aspect_ratio_policy") {
  const Tensor x = random_tensor(DataType::Float32, {1, 2, 3, 4}, 1);
  // axes [2,3] with scales [2,2] is scales [1,1,2,2].
  const Tensor full = run_node(make_node("Resize", {"x", "", "scales"}, {"y"}, {{"mode", str("linear")}}), {{"x", x}},
                               "reference", {{"scales", floats({1, 1, 2, 2})}})
                          .at("y");
  const Tensor by_axes =
      run_node(make_node("Resize", {"x", "", "scales"}, {"y"}, {{"mode", str("linear")}, {"axes", ints({2, 3})}}),
               {{"x", x}}, "cpu", {{"scales", floats({2, 2})}})
          .at("y");
  CHECK(max_abs_diff(full, by_axes) == 0.0);
  // sizes [5,5] of 3x4: ratios 5/3 and 5/4; not_larger takes 1.25 (4x5), not_smaller 5/3 (5x7).
  auto dims_with = [&](const char* policy) {
    Node n = make_node("Resize", {"x", "", "", "sizes"}, {"y"},
                       {{"axes", ints({2, 3})}, {"keep_aspect_ratio_policy", str(policy)}});
    return run_node(n, {{"x", x}}, "reference", {{"sizes", make(DataType::Int64, {2}, {5, 5})}}).at("y").dims();
  };
  CHECK(dims_with("stretch") == std::vector<int64_t>{1, 2, 5, 5});
  CHECK(dims_with("not_larger") == std::vector<int64_t>{1, 2, 4, 5});
  CHECK(dims_with("not_smaller") == std::vector<int64_t>{1, 2, 5, 7});
}
