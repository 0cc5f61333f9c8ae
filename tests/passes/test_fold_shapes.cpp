// Shape subgraphs: inference knows computed shapes element by element (ValueInfo::ints),
// fold_shapes turns them into constants once input shapes are known, and a feed read
// as a shape specialises the plan on its value (runtime/executor.h specialize()).
#include <doctest/doctest.h>

#include "autodiff/training_graph.h"
#include "graph/infer.h"
#include "ops/core/register_all.h"
#include "passes/passes.h"
#include "runtime/executor.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

Tensor int64s(std::vector<int64_t> v) {
  Tensor t(DataType::Int64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

void add_init(Graph& g, const std::string& name, Tensor t) {
  g.values[name] = ValueInfo{t.dtype(), shape_of(t.dims())};
  g.initializers[name] = std::move(t);
}

// y = Reshape(x, Concat(Unsqueeze(Gather(Shape(x), 0)), Div(Gather(Shape(x), 1), 2), [-1]))
// with x [batch,4,3]: PyTorch's x.view(x.size(0), x.size(1) // 2, -1) as exported.
Graph view_graph(const Dim& batch) {
  Graph g;
  g.name = "view";
  g.opsets[""] = 13;
  g.inputs = {"x"};
  g.outputs = {"y"};
  g.values["x"] = ValueInfo{DataType::Float32, Shape{batch, Dim::of(4), Dim::of(3)}};
  add_init(g, "i0", Tensor(DataType::Int64, {}));
  Tensor one(DataType::Int64, {});
  one.data<int64_t>()[0] = 1;
  add_init(g, "i1", one);
  Tensor two(DataType::Int64, {});
  two.data<int64_t>()[0] = 2;
  add_init(g, "two", two);
  add_init(g, "axes", int64s({0}));
  add_init(g, "minus1", int64s({-1}));
  g.nodes = {make_node("Shape", {"x"}, {"s"}),
             make_node("Gather", {"s", "i0"}, {"n"}),
             make_node("Gather", {"s", "i1"}, {"c"}),
             make_node("Div", {"c", "two"}, {"half"}),
             make_node("Unsqueeze", {"n", "axes"}, {"n1"}),
             make_node("Unsqueeze", {"half", "axes"}, {"h1"}),
             make_node("Concat", {"n1", "h1", "minus1"}, {"shape"}, {{"axis", Attribute::of_int(0)}}),
             make_node("Reshape", {"x", "shape"}, {"y"})};
  for (size_t i = 0; i < g.nodes.size(); ++i) g.nodes[i].name = "n" + std::to_string(i);
  return g;
}

size_t count(const Graph& g, const std::string& op) {
  size_t k = 0;
  for (const Node& n : g.nodes) k += n.op_type == op;
  return k;
}

}  // namespace

TEST_CASE("fold_shapes: Shape -> Gather -> Unsqueeze -> Concat -> Reshape folds to a constant Reshape") {
  Graph g = view_graph(Dim::of(2));
  infer_shapes(g, registry().schemas, "test");
  CHECK(shape_to_string(*g.info("y").shape) == "[2,2,6]");  // typed before anything folds
  const size_t folded = fold_shapes(g, registry().schemas);
  eliminate_dead_nodes(g);
  CHECK(folded == 7);
  CHECK(count(g, "Shape") == 0);
  REQUIRE(g.nodes.size() == 1);
  CHECK(g.nodes[0].op_type == "Reshape");
  REQUIRE(g.is_initializer("shape"));
  const Tensor& shape = g.initializers.at("shape");
  REQUIRE(shape.numel() == 3);
  CHECK(shape.data<int64_t>()[0] == 2);
  CHECK(shape.data<int64_t>()[1] == 2);
  CHECK(shape.data<int64_t>()[2] == -1);
  // The folded graph computes what the unfolded one does.
  Tensor x(DataType::Float32, {2, 4, 3});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i);
  auto backend = make_backend("cpu");
  const Tensor y = run_graph(g, {{"x", x}}, *backend).at("y");
  CHECK(y.dims() == std::vector<int64_t>{2, 2, 6});
  CHECK(y.data<float>()[23] == 23.0f);
}

TEST_CASE("fold_shapes: a symbolic batch keeps its symbol, then folds once the batch is known") {
  Graph g = view_graph(Dim::sym("N"));
  infer_shapes(g, registry().schemas, "test");
  CHECK(shape_to_string(*g.info("y").shape) == "[N,2,6]");
  fold_shapes(g, registry().schemas);
  CHECK(count(g, "Shape") == 1);    // the batch is not known yet
  CHECK(g.is_initializer("half"));  // 4 / 2 is
  for (int64_t batch : {1, 3}) {
    Tensor x(DataType::Float32, {batch, 4, 3});
    const Graph s = specialize(g, {{"x", x}});
    CHECK(count(s, "Shape") == 0);
    CHECK(count(s, "Concat") == 0);
    CHECK(shape_dims(*s.info("y").shape) == std::vector<int64_t>{batch, 2, 6});
    auto backend = make_backend("reference");
    CHECK(run_graph(g, {{"x", x}}, *backend).at("y").dims() == std::vector<int64_t>{batch, 2, 6});
  }
}

TEST_CASE("a Reshape whose shape is a graph input runs with two shape values: two plans") {
  Graph g;
  g.name = "runtime_shape";
  g.opsets[""] = 13;
  g.inputs = {"x", "shape"};
  g.outputs = {"y"};
  g.values["x"] = ValueInfo{DataType::Float32, shape_of({2, 6})};
  g.values["shape"] = ValueInfo{DataType::Int64, shape_of({2})};
  g.nodes = {make_node("Reshape", {"x", "shape"}, {"r"}), make_node("Relu", {"r"}, {"y"})};
  g.nodes[0].name = "reshape";
  g.nodes[1].name = "relu";
  infer_shapes(g, registry().schemas, "test");
  CHECK(shape_to_string(*g.info("y").shape) == "[?,?]");  // rank only until run time
  CHECK(shape_feeds(g) == std::vector<std::string>{"shape"});
  Tensor x(DataType::Float32, {2, 6});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(i) - 5;
  auto backend = make_backend("cpu");
  Executor ex(g, *backend);
  CHECK(ex.run({{"x", x}, {"shape", int64s({3, 4})}}).at("y").dims() == std::vector<int64_t>{3, 4});
  CHECK(ex.plans_built() == 1);
  const TensorMap& y = ex.run({{"x", x}, {"shape", int64s({-1, 2})}});
  CHECK(y.at("y").dims() == std::vector<int64_t>{6, 2});
  CHECK(y.at("y").data<float>()[11] == 6.0f);
  CHECK(y.at("y").data<float>()[0] == 0.0f);
  CHECK(ex.plans_built() == 2);
  ex.run({{"x", x}, {"shape", int64s({3, 4})}});  // the first plan again
  CHECK(ex.plans_built() == 2);
  // A shape that does not fit is the shape rule's error, named at the Reshape.
  CHECK_THROWS_WITH_AS(ex.run({{"x", x}, {"shape", int64s({5, 5})}}), doctest::Contains("cannot reshape"), Error);
}

namespace {

Tensor int64_scalar(int64_t v) {
  Tensor t(DataType::Int64, {});
  t.data<int64_t>()[0] = v;
  return t;
}

// y = Concat(Expand(c, shape), x; axis=1), c [1,1,4], x [batch,3,4]: PyTorch's
// cat([c.expand(x.size(0), -1, -1), x], 1) as exported (opset 17), where the -1s of
// expand become shape = Where(Equal(s, -1 * ones), ones, s) for s = [n, -1, -1].
Graph expand_graph(const Dim& batch) {
  Graph g;
  g.name = "expand";
  g.opsets[""] = 17;
  g.inputs = {"x", "c"};
  g.outputs = {"y"};
  g.values["x"] = ValueInfo{DataType::Float32, Shape{batch, Dim::of(3), Dim::of(4)}};
  g.values["c"] = ValueInfo{DataType::Float32, shape_of({1, 1, 4})};
  add_init(g, "zero", int64_scalar(0));
  add_init(g, "minus1", int64_scalar(-1));
  add_init(g, "axes", int64s({0}));
  add_init(g, "flat", int64s({-1}));
  Tensor one(DataType::Int64, {1});
  one.data<int64_t>()[0] = 1;
  g.nodes = {make_node("Shape", {"x"}, {"s"}),
             make_node("Gather", {"s", "zero"}, {"n"}, {{"axis", Attribute::of_int(0)}}),
             make_node("Unsqueeze", {"n", "axes"}, {"n1"}),
             make_node("Unsqueeze", {"minus1", "axes"}, {"m1"}),
             make_node("Unsqueeze", {"minus1", "axes"}, {"m2"}),
             make_node("Concat", {"n1", "m1", "m2"}, {"sizes"}, {{"axis", Attribute::of_int(0)}}),
             make_node("Reshape", {"sizes", "flat"}, {"r"}, {{"allowzero", Attribute::of_int(0)}}),
             make_node("Shape", {"r"}, {"rs"}),
             make_node("ConstantOfShape", {"rs"}, {"ones"}, {{"value", Attribute::of_tensor(one)}}),
             make_node("Mul", {"ones", "minus1"}, {"neg"}),
             make_node("Equal", {"r", "neg"}, {"is_neg"}),
             make_node("Where", {"is_neg", "ones", "r"}, {"shape"}),
             make_node("Expand", {"c", "shape"}, {"e"}),
             make_node("Concat", {"e", "x"}, {"y"}, {{"axis", Attribute::of_int(1)}})};
  for (size_t i = 0; i < g.nodes.size(); ++i) g.nodes[i].name = "n" + std::to_string(i);
  return g;
}

}  // namespace

TEST_CASE("fold_shapes: PyTorch's expand(n, -1, -1) (Equal, Where, ConstantOfShape on a shape) folds") {
  SUBCASE("a known batch types the Expand and folds its shape to a constant") {
    Graph g = expand_graph(Dim::of(2));
    infer_shapes(g, registry().schemas, "test");
    CHECK(shape_to_string(*g.info("e").shape) == "[2,1,4]");
    CHECK(shape_to_string(*g.info("y").shape) == "[2,4,4]");
    fold_shapes(g, registry().schemas);
    eliminate_dead_nodes(g);
    REQUIRE(g.nodes.size() == 2);
    CHECK(g.nodes[0].op_type == "Expand");
    REQUIRE(g.is_initializer("shape"));
    const Tensor& shape = g.initializers.at("shape");
    REQUIRE(shape.numel() == 3);
    CHECK(shape.data<int64_t>()[0] == 2);
    CHECK(shape.data<int64_t>()[1] == 1);
    CHECK(shape.data<int64_t>()[2] == 1);
  }
  SUBCASE("a symbolic batch keeps its symbol (a dimension is never -1), then folds once known") {
    Graph g = expand_graph(Dim::sym("N"));
    infer_shapes(g, registry().schemas, "test");
    CHECK(shape_to_string(*g.info("e").shape) == "[N,1,4]");
    fold_shapes(g, registry().schemas);
    CHECK(count(g, "Where") == 1);  // its value needs the batch
    for (int64_t batch : {1, 3}) {
      Tensor x(DataType::Float32, {batch, 3, 4});
      for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>(10 + i);
      Tensor c(DataType::Float32, {1, 1, 4});
      for (int64_t i = 0; i < 4; ++i) c.data<float>()[i] = static_cast<float>(i + 1);
      const Graph s = specialize(g, {{"x", x}, {"c", c}});
      CHECK(count(s, "Where") == 0);
      CHECK(count(s, "Shape") == 0);
      CHECK(shape_dims(*s.info("e").shape) == std::vector<int64_t>{batch, 1, 4});
      auto backend = make_backend("reference");
      const Tensor y = run_graph(g, {{"x", x}, {"c", c}}, *backend).at("y");
      REQUIRE(y.dims() == std::vector<int64_t>{batch, 4, 4});
      CHECK(y.data<float>()[(batch - 1) * 16 + 3] == 4.0f);                               // the last row's class token
      CHECK(y.data<float>()[(batch - 1) * 16 + 4] == x.data<float>()[(batch - 1) * 12]);  // then x
    }
  }
}

TEST_CASE("training: a float Constant node folded with the shapes is no parameter, the model's initializer is") {
  Graph g = expand_graph(Dim::of(2));  // c becomes a parameter, the output is scaled by a Constant 0.5
  g.inputs = {"x"};
  Tensor c(DataType::Float32, {1, 1, 4});
  add_init(g, "c", c);
  Tensor half(DataType::Float32, {});
  half.data<float>()[0] = 0.5f;
  g.nodes.back().outputs = {"y0"};
  g.nodes.push_back(make_node("Constant", {}, {"half"}, {{"value", Attribute::of_tensor(half)}}));
  g.nodes.push_back(make_node("Mul", {"y0", "half"}, {"y"}));
  g.nodes[g.nodes.size() - 2].name = "half";
  g.nodes.back().name = "scale";
  infer_shapes(g, registry().schemas, "test");
  TrainingOptions o;
  o.optimizer = "none";
  const TrainingGraph t = build_training_graph(g, o);
  CHECK(t.params == std::vector<std::string>{"c"});
  CHECK(t.graph.is_initializer("half"));  // folded, and still not trained
  CHECK(count(t.graph, "Expand") == 1);
  CHECK(count(t.graph, "Where") == 0);
}

TEST_CASE("training: Constant nodes fold into initializers when every shape is known (ReLU6's bounds)") {
  // A model exported with a fixed batch computes no shape, but its Clip bounds are
  // Constant nodes (torchvision's MobileNetV2): they must not stay nodes that run every
  // step (on cuda, on the host), nor become parameters.
  Graph g;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DataType::Float32, shape_of({2, 3})};
  Tensor w(DataType::Float32, {3, 3});
  add_init(g, "w", w);
  auto scalar = [](float v) {
    Tensor t(DataType::Float32, {});
    t.data<float>()[0] = v;
    return t;
  };
  g.nodes.push_back(make_node("Constant", {}, {"lo"}, {{"value", Attribute::of_tensor(scalar(0.f))}}));
  g.nodes.push_back(make_node("Constant", {}, {"hi"}, {{"value", Attribute::of_tensor(scalar(6.f))}}));
  g.nodes.push_back(make_node("MatMul", {"x", "w"}, {"h"}));
  g.nodes.push_back(make_node("Clip", {"h", "lo", "hi"}, {"y"}));
  g.outputs = {"y"};
  g.opsets[""] = 13;
  infer_shapes(g, registry().schemas, "test");
  REQUIRE(!has_shape_computation(g));
  TrainingOptions o;
  o.optimizer = "none";
  const TrainingGraph t = build_training_graph(g, o);
  CHECK(count(t.graph, "Constant") == 0);
  CHECK(t.graph.is_initializer("lo"));
  CHECK(t.graph.is_initializer("hi"));
  CHECK(t.params == std::vector<std::string>{"w"});
}
