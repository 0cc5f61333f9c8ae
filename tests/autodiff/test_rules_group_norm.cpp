// Gradient rules of InstanceNormalization and GroupNormalization (autodiff/rules_group_norm.cpp,
// backward op GroupNormalizationGrad in ops/group_norm.cpp), by finite differences in fp64
// on the reference backend (tests/autodiff/gradcheck.h): loss = ReduceMean(y * r), r random.
// Also PyTorch's decomposed GroupNorm (opset <= 17 export): Reshape -> InstanceNormalization
// (ones, zeros) -> Reshape -> Mul -> Add, which trains through the existing rules.
#include <doctest/doctest.h>

#include "autodiff/gradcheck.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

using Attrs = GradAttrs;

// The group-norm tests' random values start at seed 11; check(y) appends the loss and checks.
struct Net : GradNet {
  explicit Net(int64_t opset) : GradNet(opset, 11) {}
  void check(const std::string& y, int samples = 16) { check_net(*this, y, samples); }
};

}  // namespace

TEST_CASE("gradcheck: InstanceNormalization on rank 3, 4 and 5") {
  for (const std::vector<int64_t>& x : {std::vector<int64_t>{2, 3, 5}, {2, 2, 3, 2}, {1, 2, 2, 2, 3}}) {
    CAPTURE(x.size());
    Net net(13);
    const std::string y =
        net.node("InstanceNormalization",
                 {net.param("x", x, -2, 2), net.param("scale", {x[1]}, 0.5, 1.5), net.param("b", {x[1]})},
                 {{"epsilon", Attribute::of_float(1e-3f)}});
    net.check(y);
  }
}

TEST_CASE("gradcheck: GroupNormalization, per-group (opset 18) and per-channel (opset 21) scale") {
  for (int64_t opset : {18, 21}) {
    CAPTURE(opset);
    Net net(opset);
    const int64_t affine = opset >= 21 ? 6 : 3;
    const std::string y = net.node(
        "GroupNormalization",
        {net.param("x", {2, 6, 2, 2}, -2, 2), net.param("scale", {affine}, 0.5, 1.5), net.param("bias", {affine})},
        {{"num_groups", Attribute::of_int(3)}, {"epsilon", Attribute::of_float(1e-5f)}});
    net.check(y);
  }
}

TEST_CASE("gradcheck: PyTorch's decomposed GroupNorm (Reshape, InstanceNormalization, Reshape, Mul, Add)") {
  // nn.GroupNorm(2, 4) on x [2,4,3] at opset 13: weight and bias [4,1] broadcast over L.
  Net net(13);
  const std::string x = net.param("x", {2, 4, 3}, -2, 2);
  net.constant("grouped", make(DataType::Int64, {3}, {0, 2, -1}));
  net.constant("back", make(DataType::Int64, {3}, {2, 4, 3}));
  net.constant("ones", make(DataType::Float64, {2}, {1, 1}));
  net.constant("zeros", make(DataType::Float64, {2}, {0, 0}));
  const std::string in = net.node("InstanceNormalization", {net.node("Reshape", {x, "grouped"}), "ones", "zeros"},
                                  {{"epsilon", Attribute::of_float(1e-5f)}});
  const std::string y =
      net.node("Add", {net.node("Mul", {net.node("Reshape", {in, "back"}), net.param("weight", {4, 1}, 0.5, 1.5)}),
                       net.param("bias", {4, 1})});
  net.check(y);
}
