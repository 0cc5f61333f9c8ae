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

using Attrs = std::map<std::string, Attribute>;

struct Net {
  Graph g;
  TensorMap feeds;
  uint64_t seed = 11;

  explicit Net(int64_t opset) {
    g.name = "gradcheck";
    g.opsets[""] = opset;
  }
  std::string param(const std::string& name, std::vector<int64_t> dims, double lo = -1, double hi = 1) {
    return constant(name, random_tensor(DataType::Float64, std::move(dims), seed++, lo, hi));
  }
  std::string constant(const std::string& name, Tensor t) {
    g.values[name] = ValueInfo{t.dtype(), shape_of(t.dims())};
    g.initializers[name] = std::move(t);
    return name;
  }
  std::string node(const std::string& op, std::vector<std::string> ins, Attrs attrs = {}) {
    Node n = make_node(op, std::move(ins), {"v" + std::to_string(g.nodes.size())}, std::move(attrs));
    n.name = op + "_" + std::to_string(g.nodes.size());
    g.nodes.push_back(n);
    return n.outputs[0];
  }
  void infer() {
    validate_graph(g, registry().schemas, "test");
    infer_shapes(g, registry().schemas, "test");
  }
  // Appends loss = ReduceMean(y * r) and checks every parameter's gradient.
  void check(const std::string& y, int samples = 16) {
    infer();
    const ValueInfo& v = g.info(y);
    Tensor r = random_tensor(v.dtype, shape_dims(*v.shape), seed++);
    g.values["r"] = ValueInfo{r.dtype(), shape_of(r.dims())};
    g.inputs.push_back("r");
    feeds["r"] = r;
    Node loss = make_node("ReduceMean", {node("Mul", {y, "r"})}, {"loss"}, {{"keepdims", Attribute::of_int(0)}});
    loss.name = "loss";
    g.nodes.push_back(loss);
    g.outputs = {"loss"};
    infer();
    GradCheck c = check_gradients(g, feeds, samples);
    CAPTURE(c.worst);
    CHECK(c.checked > 0);
    CHECK(c.max_error < 1e-6);
  }
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
