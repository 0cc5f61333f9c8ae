// Constant folding, dead-node elimination (simplify) and the pass report.
#include <doctest/doctest.h>

#include "passes/passes.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

Node node(const std::string& op, std::vector<std::string> in, std::vector<std::string> out,
          std::map<std::string, Attribute> attrs = {}) {
  const std::string name = out.at(0) + "_node";
  Node n = make_node(op, std::move(in), std::move(out), std::move(attrs));
  n.name = name;
  return n;
}

Tensor int64s(std::vector<int64_t> v) {
  Tensor t(DataType::Int64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

// x[N,3] @ Reshape(Concat(Cast(w_i), Cast(w_j)), Constant [3,4]) -> y; out = Identity(y); plus a dead Relu.
Graph shape_graph() {
  Graph g;
  g.name = "fold";
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DataType::Float32, Shape{Dim::sym("N"), Dim::of(3)}};
  Tensor wi(DataType::Int32, {6}), wj(DataType::Int32, {6});
  for (int i = 0; i < 6; ++i) {
    wi.data<int32_t>()[i] = i - 5;
    wj.data<int32_t>()[i] = i + 1;
  }
  g.initializers["w_i"] = wi;
  g.initializers["w_j"] = wj;
  g.values["w_i"] = g.values["w_j"] = ValueInfo{DataType::Int32, shape_of({6})};
  g.nodes.push_back(node("Constant", {}, {"s"}, {{"value", Attribute::of_tensor(int64s({3, 4}))}}));
  g.nodes.push_back(node("Cast", {"w_i"}, {"f_i"}, {{"to", Attribute::of_int(1)}}));
  g.nodes.push_back(node("Cast", {"w_j"}, {"f_j"}, {{"to", Attribute::of_int(1)}}));
  g.nodes.push_back(node("Concat", {"f_i", "f_j"}, {"w_flat"}, {{"axis", Attribute::of_int(0)}}));
  g.nodes.push_back(node("Reshape", {"w_flat", "s"}, {"w"}));
  g.nodes.push_back(node("MatMul", {"x", "w"}, {"y"}));
  g.nodes.push_back(node("Relu", {"y"}, {"unused"}));
  g.nodes.push_back(node("Identity", {"y"}, {"out"}));
  g.outputs = {"out"};
  validate_graph(g, registry().schemas, "fold");
  infer_shapes(g, registry().schemas, "fold");
  return g;
}

}  // namespace

TEST_CASE("simplify folds Constant, Concat, Cast and Reshape of constants and drops dead nodes; results unchanged") {
  const Graph g = shape_graph();
  Graph s = g;
  CHECK(simplify(s) == 6);  // 5 folded + the dead Relu
  REQUIRE(s.nodes.size() == 2);
  CHECK(s.nodes[0].op_type == "MatMul");
  CHECK(s.nodes[1].op_type == "Identity");
  REQUIRE(s.is_initializer("w"));
  CHECK(s.initializers.at("w").dims() == std::vector<int64_t>{3, 4});
  CHECK(s.initializers.at("w").dtype() == DataType::Float32);
  CHECK(s.initializers.at("w").data<float>()[0] == -5.f);
  CHECK(s.initializers.at("w").data<float>()[11] == 6.f);
  CHECK(!s.is_initializer("w_i"));  // nothing reads it any more
  CHECK(!s.is_initializer("f_i"));
  CHECK(s.inputs == g.inputs);
  CHECK(s.outputs == g.outputs);
  validate_graph(s, registry().schemas, "simplified");
  infer_shapes(s, registry().schemas, "simplified");
  const Tensor x = random_tensor(DataType::Float32, {2, 3}, 1);
  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    TensorMap a = run_graph(g, {{"x", x}}, *make_backend(backend));
    TensorMap b = run_graph(s, {{"x", x}}, *make_backend(backend));
    CHECK(max_abs_diff(a.at("out"), b.at("out")) == 0.0);
  }
}

TEST_CASE("simplify never folds through variable initializers or initializers that are graph inputs") {
  Graph g = shape_graph();
  SimplifyOptions o;
  o.variable = {"w_i"};
  simplify(g, o);
  std::vector<std::string> ops;
  for (const Node& n : g.nodes) ops.push_back(n.op_type);
  CHECK(ops == std::vector<std::string>{"Cast", "Concat", "Reshape", "MatMul", "Identity"});
  CHECK(g.is_initializer("s"));    // the Constant still folds,
  CHECK(g.is_initializer("f_j"));  // and so does the Cast of the other initializer

  Graph h = shape_graph();
  h.initializer_inputs = {"w_i"};
  simplify(h);
  CHECK(h.nodes.size() == 5);
  CHECK(h.initializer_inputs == std::vector<std::string>{"w_i"});
}

TEST_CASE("fold_constants: Shape of a fully known value folds, of a symbolic one does not; large results stay") {
  Graph g;
  g.opsets[""] = 17;
  g.inputs = {"x", "v"};
  g.values["x"] = ValueInfo{DataType::Float32, shape_of({2, 3, 4})};
  g.values["v"] = ValueInfo{DataType::Float32, Shape{Dim::sym("N"), Dim::of(3)}};
  g.nodes.push_back(node("Shape", {"x"}, {"sx"}, {{"start", Attribute::of_int(1)}}));
  g.nodes.push_back(node("Shape", {"v"}, {"sv"}));
  g.nodes.push_back(node("Gather", {"sx", "idx"}, {"gx"}));
  g.initializers["idx"] = int64s({-1, 0});
  g.values["idx"] = ValueInfo{DataType::Int64, shape_of({2})};
  g.values["gx"] = ValueInfo{DataType::Int64, shape_of({2})};
  g.outputs = {"gx", "sv"};
  CHECK(fold_constants(g) == 1);
  REQUIRE(g.is_initializer("sx"));
  CHECK(g.initializers.at("sx").numel() == 2);
  CHECK(g.initializers.at("sx").data<int64_t>()[0] == 3);
  CHECK(g.initializers.at("sx").data<int64_t>()[1] == 4);
  REQUIRE(g.is_initializer("gx") == false);  // a graph output is never replaced by an initializer
  // Gather folds when its result is not a graph output.
  g.outputs = {"sv"};
  g.nodes.push_back(node("Identity", {"gx"}, {"gx2"}));
  g.values["gx2"] = g.values["gx"];
  g.outputs.push_back("gx2");
  CHECK(fold_constants(g) == 1);
  REQUIRE(g.is_initializer("gx"));
  CHECK(g.initializers.at("gx").data<int64_t>()[0] == 4);
  CHECK(g.initializers.at("gx").data<int64_t>()[1] == 3);
  CHECK(g.nodes.size() == 2);  // Shape(v) and the Identity into a graph output

  Graph big = shape_graph();
  SimplifyOptions o;
  o.max_fold_elements = 4;  // w (12 elements) is too big to fold
  simplify(big, o);
  CHECK(!big.is_initializer("w"));
  CHECK(!big.is_initializer("f_i"));  // 6 elements
  CHECK(big.is_initializer("s"));
}

TEST_CASE("fold_constants: Cast folds only when every value converts exactly") {
  Graph g;
  g.opsets[""] = 17;
  Tensor f = make(DataType::Float32, {2}, {1.5, 2});
  Tensor ints = make(DataType::Float32, {2}, {-3, 2});
  g.initializers["f"] = f;
  g.initializers["i"] = ints;
  g.values["f"] = ValueInfo{DataType::Float32, shape_of({2})};
  g.values["i"] = ValueInfo{DataType::Float32, shape_of({2})};
  g.nodes.push_back(node("Cast", {"f"}, {"f64"}, {{"to", Attribute::of_int(7)}}));  // 1.5 -> int64 truncates: kept
  g.nodes.push_back(node("Cast", {"i"}, {"i64"}, {{"to", Attribute::of_int(7)}}));  // exact: folded
  g.nodes.push_back(node("Concat", {"f64", "i64"}, {"c"}, {{"axis", Attribute::of_int(0)}}));
  g.outputs = {"c"};
  CHECK(fold_constants(g) == 1);
  REQUIRE(g.is_initializer("i64"));
  CHECK(g.initializers.at("i64").dtype() == DataType::Int64);
  CHECK(g.initializers.at("i64").data<int64_t>()[0] == -3);
  CHECK(!g.is_initializer("f64"));
}

TEST_CASE("describe_passes lists node counts per op type before and after") {
  const Graph g = shape_graph();
  Graph s = g;
  simplify(s);
  const PassReport r = pass_report(g, s);
  CHECK(r.before.at("Constant") == 1);
  CHECK(r.before.at("Cast") == 2);
  CHECK(r.after.count("Constant") == 0);
  CHECK(r.nodes_before == 8);
  CHECK(r.nodes_after == 2);
  const std::string text = describe_passes(g, s);
  CHECK(text.find("Constant") != std::string::npos);
  const size_t cast = text.find("\nCast ");
  REQUIRE(cast != std::string::npos);
  const std::string line = text.substr(cast + 1, text.find('\n', cast + 1) - cast - 1);
  CHECK(line.find(" 2 ") != std::string::npos);
  CHECK(line.find(" 0 ") != std::string::npos);
  CHECK(line.substr(line.size() - 2) == "-2");
  CHECK(text.find("nodes") != std::string::npos);
}

TEST_CASE("simplify folds Transpose and a reversing Slice of constants (PyTorch's F.pad pads) as the kernels compute") {
  Graph g;
  g.name = "pads";
  g.opsets[""] = 13;
  Tensor c(DataType::Int64, {2, 3});
  for (int i = 0; i < 6; ++i) c.data<int64_t>()[i] = i;
  g.initializers["c"] = c;
  g.values["c"] = ValueInfo{DataType::Int64, shape_of({2, 3})};
  for (auto [name, v] : {std::pair{"st", -1}, {"en", -4}, {"ax", 0}, {"sp", -1}}) {
    g.nodes.push_back(node("Constant", {}, {name}, {{"value", Attribute::of_tensor(int64s({v}))}}));
  }
  g.nodes.push_back(node("Transpose", {"c"}, {"t"}, {{"perm", Attribute::of_ints({1, 0})}}));
  g.nodes.push_back(node("Slice", {"t", "st", "en", "ax", "sp"}, {"r"}));
  g.nodes.push_back(node("Identity", {"r"}, {"out"}));
  g.outputs = {"out"};
  validate_graph(g, registry().schemas, "pads");
  infer_shapes(g, registry().schemas, "pads");
  Graph s = g;
  simplify(s);
  REQUIRE(s.is_initializer("r"));
  const Tensor& r = s.initializers.at("r");
  CHECK(r.dims() == std::vector<int64_t>{3, 2});
  const std::vector<int64_t> want{2, 5, 1, 4, 0, 3};  // rows of c^T, last first
  for (size_t i = 0; i < want.size(); ++i) CHECK(r.data<int64_t>()[i] == want[i]);
  TensorMap a = run_graph(g, {}, *make_backend("reference"));
  CHECK(max_abs_diff(a.at("out").cast(DataType::Float64), r.cast(DataType::Float64)) == 0.0);
}
