// Gradient rules of the elementwise and misc families (autodiff/rules_elementwise.cpp,
// autodiff/rules_misc.cpp) and their backward ops (ops/elementwise.cpp, ops/misc.cpp).
//
// Every rule is checked by finite differences on a small float64 graph (random
// seeded shapes; broadcasting shapes for the binary ops) ending in the scalar loss
// ReduceMean(y * r), with r a random feed so that dY is not uniform.
// Tolerance 1e-6 on gradcheck.h's error |a - n| / max(1, |n|): central differences
// at h = 1e-6 in fp64 have truncation error O(h^2 |f'''|) ~ 1e-12 and rounding
// error ~ eps * |L| / h ~ 1e-10, so a correct rule sits near 1e-9 and anything
// above 1e-6 is a wrong rule, not noise. Inputs are drawn away from kinks (ReLU at
// 0, Cast's integer steps) and Div's pole.
#include <doctest/doctest.h>

#include <functional>
#include <random>

#include "autodiff/gradcheck.h"
#include "autodiff/gradient.h"
#include "graph/error.h"
#include "ops/unary_ops.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

constexpr double kTol = 1e-6;

std::vector<int64_t> random_dims(std::mt19937_64& rng, int min_rank = 1, int max_rank = 3) {
  std::uniform_int_distribution<int> rank(min_rank, max_rank), extent(1, 4);
  std::vector<int64_t> d(static_cast<size_t>(rank(rng)));
  for (int64_t& x : d) x = extent(rng);
  return d;
}

using GraphBuilder = GradNet;

void check(GraphBuilder& b, const std::string& y) { check_net(b, y, 12, kTol); }

bool has_node(const Graph& g, const std::string& op, const std::string& output = "") {
  for (const Node& n : g.nodes)
    if (n.op_type == op && (output.empty() || std::find(n.outputs.begin(), n.outputs.end(), output) != n.outputs.end()))
      return true;
  return false;
}

Tensor run_grad_op(const std::string& op, const TensorMap& feeds, std::vector<std::string> ins,
                   std::map<std::string, Attribute> attrs = {}, bool training = false) {
  RunOptions o;
  o.training = training;
  TensorMap used;  // run_graph rejects feeds the graph does not read
  for (const std::string& in : ins)
    if (!in.empty()) used[in] = feeds.at(in);
  return run_node(make_node(op, std::move(ins), {"dx"}, std::move(attrs), kTrainrtDomain), used, "reference", {}, o)
      .at("dx");
}

}  // namespace

// ---- finite differences, one rule at a time -------------------------------------

TEST_CASE("gradcheck: Relu, LeakyRelu, Sigmoid, Tanh, Neg on random shapes") {
  std::mt19937_64 rng(11);
  for (int trial = 0; trial < 3; ++trial) {
    for (const char* op : {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Neg"}) {
      CAPTURE(op);
      CAPTURE(trial);
      GraphBuilder b;
      b.seed = 100 + static_cast<uint64_t>(trial);
      std::map<std::string, Attribute> attrs;
      if (std::string(op) == "LeakyRelu") attrs["alpha"] = Attribute::of_float(0.2f);
      check(b, b.node(op, {b.param("p", random_dims(rng), -2, 2)}, attrs));
    }
  }
}

TEST_CASE("gradcheck: Add, Sub, Mul, Div with broadcasting and scalars") {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{2, 3, 4}, {3, 1}},    {{3, 1}, {2, 3, 4}}, {{2, 3, 4}, {}},        {{}, {2, 3, 4}},
      {{2, 3, 4}, {2, 3, 4}}, {{4}, {2, 3, 1}},    {{1, 3, 1}, {2, 1, 4}}, {{}, {}}};
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    for (const auto& [sa, sb] : shapes) {
      CAPTURE(op);
      CAPTURE(dims_to_string(sa));
      CAPTURE(dims_to_string(sb));
      GraphBuilder b;
      const bool div = std::string(op) == "Div";
      const std::string a = b.param("a", sa);
      const std::string d = b.param("b", sb, div ? 0.5 : -1, div ? 1.5 : 1);  // Div: away from the pole
      check(b, b.node(op, {a, d}));
    }
  }
}

TEST_CASE("gradcheck: the same parameter on both sides of Mul and Div") {
  for (const char* op : {"Mul", "Div", "Sub", "Add"}) {
    CAPTURE(op);
    GraphBuilder b;
    const std::string p = b.param("p", {2, 3}, 0.5, 1.5);
    check(b, b.node(op, {b.node("Tanh", {p}), p}));
  }
}

TEST_CASE("gradcheck: variadic Sum with broadcasting, Identity, float Cast") {
  {
    GraphBuilder b;
    check(b, b.node("Sum", {b.param("a", {2, 3, 4}), b.param("b", {3, 1}), b.param("c", {})}));
  }
  {
    GraphBuilder b;
    check(b, b.node("Sum", {b.param("a", {3})}));
  }
  {
    GraphBuilder b;
    check(b, b.node("Identity", {b.param("p", {2, 2})}));
  }
  {
    GraphBuilder b;  // float64 -> float64 Cast: the rule's Cast back, at fp64 precision
    check(b, b.node("Cast", {b.param("p", {3, 2})}, {{"to", Attribute::of_int(int64_t(DataType::Float64))}}));
  }
}

TEST_CASE("Cast float64 -> float32 -> float64: the gradient is cast back to each input's dtype") {
  GraphBuilder b;
  const std::string p = b.param("p", {2, 3});
  const std::string f32 = b.node("Cast", {p}, {{"to", Attribute::of_int(int64_t(DataType::Float32))}});
  Graph& g = b.finish(b.node("Cast", {f32}, {{"to", Attribute::of_int(int64_t(DataType::Float64))}}));
  TrainingOptions o;
  o.optimizer = "none";
  TrainingGraph t = build_training_graph(g, o);
  RunOptions ro;
  ro.training = true;
  TensorMap out = run_graph(t.graph, b.feeds, *make_backend("reference"), ro);
  const Tensor& dp = out.at(t.gradients.at(p));
  REQUIRE(dp.dtype() == DataType::Float64);
  // loss = mean(p * r) through an fp32 round trip: dp = r / 6 rounded to float32.
  const Tensor& r = b.feeds.at("r");
  for (int64_t i = 0; i < 6; ++i)
    CHECK(dp.get_as_double(i) == static_cast<double>(static_cast<float>(r.get_as_double(i) / 6.0)));
}

// ---- fan-out, non-differentiable paths, Dropout -------------------------------

TEST_CASE("a Relu read by two consumers gets the sum of both gradients") {
  GraphBuilder b;
  const std::string h = b.node("Relu", {b.param("p", {3, 4})}, {}, "h");
  const std::string y1 = b.node("Sigmoid", {h});
  const std::string y2 = b.node("Mul", {h, b.param("q", {4})});
  Graph& g = b.finish(b.node("Add", {y1, y2}));
  GradCheck r = check_gradients(g, b.feeds);
  CAPTURE(r.worst);
  CHECK(r.max_error < kTol);
  // The driver, not a rule, sums the fan-out: one Sum node writes h's gradient.
  bool found = false;
  for (const Node& n : r.training.graph.nodes)
    if (n.op_type == "Sum" && n.name == "h/grad/Sum") found = n.inputs.size() == 2;
  CHECK(found);
}

TEST_CASE("a parameter reaching the loss only through Cast to int64 is a BadInput naming the op and the path") {
  GraphBuilder b;
  const std::string x = b.feed("x", random_tensor(DataType::Float64, {2, 3}, 5, -4, 4));
  const std::string scaled = b.node("Mul", {b.param("w", {2, 3}), x});
  const std::string ints = b.node("Cast", {scaled}, {{"to", Attribute::of_int(int64_t(DataType::Int64))}}, "ints");
  Graph& g = b.finish(b.node("Cast", {ints}, {{"to", Attribute::of_int(int64_t(DataType::Float64))}}));
  TrainingOptions o;
  o.optimizer = "none";
  ErrorKind kind = ErrorKind::Internal;
  const std::string msg = error_of([&] { build_training_graph(g, o); }, &kind);
  CAPTURE(msg);
  CHECK(kind == ErrorKind::BadInput);
  CHECK(msg.find("Cast (node 'Cast_1')") != std::string::npos);
  CHECK(msg.find("path: ") != std::string::npos);
  CHECK(msg.find("-> Mul_0 (Mul) -> Cast_1 (Cast) -> Cast_2 (Cast)") != std::string::npos);
}

TEST_CASE("an integer Cast beside a float path contributes zero, the float path the gradient") {
  GraphBuilder b;
  const std::string p = b.param("p", {2, 3}, -3, 3);  // trunc steps at integers: far from the samples
  const std::string ints = b.node("Cast", {p}, {{"to", Attribute::of_int(int64_t(DataType::Int32))}});
  const std::string back = b.node("Cast", {ints}, {{"to", Attribute::of_int(int64_t(DataType::Float64))}});
  check(b, b.node("Mul", {back, b.node("Sigmoid", {p})}));
}

TEST_CASE("Dropout: the mask is exposed, fixed by the seed, and the gradient matches finite differences") {
  for (bool with_ratio : {false, true}) {
    CAPTURE(with_ratio);
    GraphBuilder b;
    std::vector<std::string> ins{b.param("p", {4, 6})};
    if (with_ratio) {
      Tensor ratio(DataType::Float32, {});
      ratio.data<float>()[0] = 0.3f;
      b.g.initializers["ratio"] = ratio;
      b.g.values["ratio"] = ValueInfo{DataType::Float32, Shape{}};
      ins.push_back("ratio");
    }
    Graph& g = b.finish(b.node("Dropout", ins, {}, "y"));
    GradCheck r = check_gradients(g, b.feeds, /*samples=*/24);
    CAPTURE(r.worst);
    CHECK(r.max_error < kTol);
    const TrainingGraph& t = r.training;
    CHECK(t.params == std::vector<std::string>{"p"});  // the ratio initializer is not trainable
    CHECK(has_node(t.graph, "DropoutGrad"));
    CHECK(t.graph.find_info("Dropout_0/mask") != nullptr);
    // The analytic gradient is r/24/(1-ratio) where kept and 0 where dropped.
    RunOptions ro;
    ro.training = true;
    ro.seed = 7;
    TensorMap out = run_graph(t.graph, b.feeds, *make_backend("reference"), ro);
    const double keep_scale = 1.0 / (1.0 - (with_ratio ? double(0.3f) : 0.5));
    const Tensor& dp = out.at(t.gradients.at("p"));
    const Tensor& rr = b.feeds.at("r");
    int dropped = 0;
    for (int64_t i = 0; i < 24; ++i) {
      const double v = dp.get_as_double(i);
      dropped += v == 0.0;
      if (v != 0.0) CHECK(std::fabs(v - rr.get_as_double(i) / 24 * keep_scale) < 1e-15);
    }
    CHECK(dropped > 0);
    CHECK(dropped < 24);
  }
}

TEST_CASE("Dropout that already names its mask keeps it") {
  GraphBuilder b;
  Node n = make_node("Dropout", {b.param("p", {3, 3})}, {"y", "my_mask"});
  n.name = "drop";
  b.g.nodes.push_back(n);
  GradCheck r = check_gradients(b.finish("y"), b.feeds);
  CHECK(r.max_error < kTol);
  for (const Node& m : r.training.graph.nodes)
    if (m.op_type == "DropoutGrad") CHECK(m.inputs.at(1) == "my_mask");
  CHECK(r.training.graph.find_info("drop/mask") == nullptr);
}

TEST_CASE("gradcheck: Clip with both, one or no bounds; HardSigmoid, HardSwish, Sqrt, Erf, Gelu") {
  std::mt19937_64 rng(12);
  auto scalar = [](GraphBuilder& b, const std::string& name, double v) {
    b.g.initializers[name] = make(DataType::Float64, {}, {v});
    b.g.values[name] = ValueInfo{DataType::Float64, Shape{}};
    return name;
  };
  for (int trial = 0; trial < 2; ++trial) {
    CAPTURE(trial);
    const std::vector<int64_t> dims = random_dims(rng);
    CAPTURE(dims_to_string(dims));
    for (const std::vector<std::string>& bounds :
         std::vector<std::vector<std::string>>{{"lo", "hi"}, {"lo"}, {"", "hi"}, {}}) {
      GraphBuilder b;
      b.seed = 200 + static_cast<uint64_t>(trial);
      std::vector<std::string> ins{b.param("p", dims, -2, 2)};
      for (const std::string& bound : bounds)
        ins.push_back(bound.empty() ? "" : scalar(b, bound, bound == "lo" ? -0.5 : 0.7));
      Graph& g = b.finish(b.node("Clip", ins));
      GradCheck r = check_gradients(g, b.feeds);
      CAPTURE(r.worst);
      CHECK(r.max_error < kTol);
      CHECK(r.training.params == std::vector<std::string>{"p"});  // the bounds are not trained
    }
    const std::vector<std::pair<std::string, std::map<std::string, Attribute>>> ops = {
        {"HardSigmoid", {}},
        {"HardSigmoid", {{"alpha", Attribute::of_float(0.3f)}, {"beta", Attribute::of_float(0.4f)}}},
        {"HardSwish", {}},
        {"Erf", {}},
        {"Gelu", {}},
        {"Gelu", {{"approximate", Attribute::of_string("tanh")}}}};
    for (const auto& [op, attrs] : ops) {
      CAPTURE(op);
      GraphBuilder b;
      b.seed = 300 + static_cast<uint64_t>(trial);
      check(b, b.node(op, {b.param("p", dims, -4, 4)}, attrs));
    }
    for (const char* op : {"Sqrt", "Log", "Reciprocal", "Exp"}) {  // away from the poles at 0
      CAPTURE(op);
      GraphBuilder b;
      b.seed = 400 + static_cast<uint64_t>(trial);
      check(b, b.node(op, {b.param("p", dims, 0.2, 3)}));
    }
  }
}

TEST_CASE("gradcheck: Pow with broadcasting, for base and float exponent; an integer exponent") {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {
      {{2, 3, 4}, {3, 1}}, {{3, 1}, {2, 3, 4}}, {{2, 3}, {}}, {{}, {2, 3}}, {{2, 3}, {2, 3}}};
  for (const auto& [sa, sb] : shapes) {
    CAPTURE(dims_to_string(sa));
    CAPTURE(dims_to_string(sb));
    GraphBuilder b;
    check(b, b.node("Pow", {b.param("a", sa, 0.3, 2), b.param("b", sb, -2, 2)}));
  }
  GraphBuilder b;  // int64 exponent, negative bases: a gradient for the base only
  const std::string e = b.feed("e", make(DataType::Int64, {3}, {0, 2, -3}));
  GradCheck r = check_gradients(b.finish(b.node("Pow", {b.param("a", {2, 3}, -2, -0.5), e})), b.feeds);
  CAPTURE(r.worst);
  CHECK(r.max_error < kTol);
}

TEST_CASE("gradcheck: Where with broadcasting, its condition from Equal (non-differentiable)") {
  const std::vector<std::vector<int64_t>> x_shapes = {{2, 3}, {3}, {}, {2, 1}};
  for (const auto& xs : x_shapes) {
    CAPTURE(dims_to_string(xs));
    GraphBuilder b;
    const std::string u = b.feed("u", make(DataType::Int64, {2, 3}, {1, 0, 2, 1, 1, 0}));
    const std::string one = b.feed("one", make(DataType::Int64, {}, {1}));
    const std::string c = b.node("Equal", {u, one});
    check(b, b.node("Where", {c, b.param("x", xs), b.param("y", {3})}));
  }
  // Equal is non-differentiable: an initializer read only by it is not trained.
  GraphBuilder b;
  const std::string c = b.node("Equal", {b.param("p", {2, 3}), b.feed("q", make(DataType::Float64, {}, {0.5}))});
  Graph& g = b.finish(b.node("Where", {c, b.param("x", {3}), b.feed("y", make(DataType::Float64, {}, {2}))}));
  GradCheck r = check_gradients(g, b.feeds);
  CAPTURE(r.worst);
  CHECK(r.max_error < kTol);
  CHECK(r.training.params == std::vector<std::string>{"x"});
}

TEST_CASE("new backward ops at the kinks follow PyTorch, fp32 and fp64") {
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    CAPTURE(dtype_name(t));
    // Clip(0, 6) as torch.clamp: the gradient passes at exactly min and max.
    const Tensor dy = make(t, {6}, {1, 2, 3, 4, 5, 6});
    const TensorMap f{
        {"dy", dy}, {"x", make(t, {6}, {-3, 0, 3, 6, 6.5, -0.0})}, {"lo", make(t, {}, {0})}, {"hi", make(t, {}, {6})}};
    CHECK(max_abs_diff(run_grad_op("ClipGrad", f, {"dy", "x", "lo", "hi"}), make(t, {6}, {0, 2, 3, 4, 0, 6})) == 0);
    CHECK(max_abs_diff(run_grad_op("ClipGrad", f, {"dy", "x", "", "hi"}), make(t, {6}, {1, 2, 3, 4, 0, 6})) == 0);
    CHECK(max_abs_diff(run_grad_op("ClipGrad", f, {"dy", "x"},
                                   {{"min", Attribute::of_float(0.f)}, {"max", Attribute::of_float(6.f)}}),
                       make(t, {6}, {0, 2, 3, 4, 0, 6})) == 0);
    // HardSigmoid (PyTorch's: alpha 1/6, beta 1/2): zero at x = -3 and 3, alpha inside.
    const TensorMap h{{"dy", dy}, {"x", make(t, {6}, {-3, 3, 0, -4, 4, 1})}};
    const std::map<std::string, Attribute> torch_hs{{"alpha", Attribute::of_float(1.f / 6)},
                                                    {"beta", Attribute::of_float(0.5f)}};
    const double a6 = 1.f / 6;  // the float attribute, as both dtypes' kernels read it
    CHECK(max_abs_diff(run_grad_op("HardSigmoidGrad", h, {"dy", "x"}, torch_hs),
                       make(t, {6}, {0, 0, 3 * a6, 0, 0, 6 * a6})) < 1e-7);
    // HardSwish: x/3 + 1/2 on [-3, 3] (so -1/2 at -3 and 3/2 at 3), 0 below, 1 above.
    CHECK(max_abs_diff(run_grad_op("HardSwishGrad", h, {"dy", "x"}), make(t, {6}, {-0.5, 3, 1.5, 0, 5, 6 * 5.0 / 6})) <
          1e-6);
    // Pow at a = 0: dA = 0 where b == 0, dB = 0 where b >= 0 (PyTorch's masks).
    const TensorMap p{
        {"dy", make(t, {4}, {1, 1, 1, 1})}, {"a", make(t, {4}, {0, 0, 2, 0})}, {"b", make(t, {4}, {0, 2, 3, 1})}};
    RunOptions o;
    TensorMap out =
        run_node(make_node("PowGrad", {"dy", "a", "b"}, {"da", "db"}, {}, kTrainrtDomain), p, "reference", {}, o);
    CHECK(max_abs_diff(out.at("da"), make(t, {4}, {0, 0, 12, 1})) == 0);
    CHECK(max_abs_diff(out.at("db"), make(t, {4}, {0, 0, 8 * std::log(2.0), 0})) < 1e-6);
    // Sqrt: dY / (2 Y); Erf at 0: 2/sqrt(pi).
    const TensorMap q{{"dy", make(t, {2}, {1, 3})}, {"y", make(t, {2}, {0.5, 2})}};
    CHECK(max_abs_diff(run_grad_op("SqrtGrad", q, {"dy", "y"}), make(t, {2}, {1, 0.75})) == 0);
    CHECK(max_abs_diff(run_grad_op("ErfGrad", {{"dy", make(t, {1}, {1})}, {"x", make(t, {1}, {0})}}, {"dy", "x"}),
                       make(t, {1}, {2 / std::sqrt(M_PI)})) < 1e-6);
  }
}

// ---- backward ops: values and shape rules ----------------------------------------

TEST_CASE("backward ops on known values, fp32 and fp64") {
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    CAPTURE(dtype_name(t));
    const Tensor dy = make(t, {2, 3}, {1, 2, 3, 4, 5, 6});
    const Tensor v = make(t, {2, 3}, {-0.5, 0, 0.5, 0.25, -2, 1});
    const TensorMap f{{"dy", dy}, {"v", v}};
    CHECK(max_abs_diff(run_grad_op("ReluGrad", f, {"dy", "v"}), make(t, {2, 3}, {0, 0, 3, 4, 0, 6})) == 0);
    CHECK(max_abs_diff(run_grad_op("LeakyReluGrad", f, {"dy", "v"}, {{"alpha", Attribute::of_float(0.5f)}}),
                       make(t, {2, 3}, {0.5, 2, 3, 4, 2.5, 6})) == 0);
    CHECK(max_abs_diff(run_grad_op("LeakyReluGrad", f, {"dy", "v"}), make(t, {2, 3}, {0.01, 2, 3, 4, 0.05, 6})) < 1e-7);
    CHECK(max_abs_diff(run_grad_op("SigmoidGrad", f, {"dy", "v"}), make(t, {2, 3}, {-0.75, 0, 0.75, 0.75, -30, 0})) <
          1e-6);
    CHECK(max_abs_diff(run_grad_op("TanhGrad", f, {"dy", "v"}), make(t, {2, 3}, {0.75, 2, 2.25, 3.75, -15, 0})) < 1e-6);

    // SumToShape: [2,3] -> [3], [2,1], [] and [2,3] (identity).
    const TensorMap s{{"dy", dy},
                      {"x3", Tensor(t, {3})},
                      {"x21", Tensor(t, {2, 1})},
                      {"x", Tensor(t, {})},
                      {"x23", Tensor(t, {2, 3})}};
    CHECK(max_abs_diff(run_grad_op("SumToShape", s, {"dy", "x3"}), make(t, {3}, {5, 7, 9})) == 0);
    CHECK(max_abs_diff(run_grad_op("SumToShape", s, {"dy", "x21"}), make(t, {2, 1}, {6, 15})) == 0);
    CHECK(max_abs_diff(run_grad_op("SumToShape", s, {"dy", "x"}), make(t, {}, {21})) == 0);
    CHECK(max_abs_diff(run_grad_op("SumToShape", s, {"dy", "x23"}), dy) == 0);

    // DropoutGrad: scaled by 1/(1-ratio) in training, mask only otherwise.
    Tensor mask(DataType::Bool, {2, 3});
    for (int64_t i : {0, 2, 3}) mask.data<uint8_t>()[i] = 1;
    Tensor ratio(DataType::Float32, {});
    ratio.data<float>()[0] = 0.75f;
    const TensorMap d{{"dy", dy}, {"mask", mask}, {"ratio", ratio}};
    CHECK(max_abs_diff(run_grad_op("DropoutGrad", d, {"dy", "mask", "ratio"}, {}, true),
                       make(t, {2, 3}, {4, 0, 12, 16, 0, 0})) == 0);
    CHECK(max_abs_diff(run_grad_op("DropoutGrad", d, {"dy", "mask"}, {}, true), make(t, {2, 3}, {2, 0, 6, 8, 0, 0})) ==
          0);
    CHECK(max_abs_diff(run_grad_op("DropoutGrad", d, {"dy", "mask", "ratio"}, {}, false),
                       make(t, {2, 3}, {1, 0, 3, 4, 0, 0})) == 0);
  }
}

TEST_CASE("Neg forward on known values") {
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    Tensor y = run_node(make_node("Neg", {"x"}, {"y"}), {{"x", make(t, {3}, {1.5, 0, -2})}}, "reference").at("y");
    CHECK(max_abs_diff(y, make(t, {3}, {-1.5, 0, 2})) == 0);
  }
  ErrorKind kind = ErrorKind::Internal;
  error_of([] { run_node(make_node("Neg", {"x"}, {"y"}), {{"x", Tensor(DataType::Int64, {2})}}, "reference"); }, &kind);
  CHECK(kind == ErrorKind::BadInput);
}

TEST_CASE("backward ops' shape rules reject mismatched shapes and dtypes") {
  auto rejects = [](const std::string& op, const TensorMap& feeds, std::vector<std::string> ins,
                    const std::string& want) {
    CAPTURE(op);
    ErrorKind kind = ErrorKind::Internal;
    const std::string msg =
        error_of([&] { single_node_graph(make_node(op, std::move(ins), {"dx"}, {}, kTrainrtDomain), feeds); }, &kind);
    CAPTURE(msg);
    CHECK(kind == ErrorKind::BadInput);
    CHECK(msg.find(want) != std::string::npos);
  };
  const Tensor a(DataType::Float32, {2, 3}), b(DataType::Float32, {2, 4}), c(DataType::Float64, {2, 3});
  const Tensor r3(DataType::Float32, {2, 2, 3}), mask(DataType::Bool, {3, 2}), fmask(DataType::Float32, {2, 3});
  const TensorMap f{{"a", a},
                    {"b", b},
                    {"c", c},
                    {"r3", r3},
                    {"mask", mask},
                    {"fmask", fmask},
                    {"mask23", Tensor(DataType::Bool, {2, 3})}};
  for (const char* op : {"ReluGrad", "LeakyReluGrad", "SigmoidGrad", "TanhGrad"}) {
    rejects(op, f, {"a", "b"}, "must have the shape of input 0");
    rejects(op, f, {"a", "c"}, "must share a dtype");
    rejects(op, f, {"a", "r3"}, "must have the shape of input 0");
  }
  rejects("SumToShape", f, {"a", "b"}, "does not broadcast to input 0");
  rejects("SumToShape", f, {"a", "r3"}, "has rank 3 > 2");
  rejects("SumToShape", f, {"a", "c"}, "must share a dtype");
  rejects("DropoutGrad", f, {"a", "mask"}, "must have the shape of dY");
  rejects("DropoutGrad", f, {"a", "fmask"}, "must be bool");
  rejects("DropoutGrad", f, {"a", "mask23", "c"}, "must be a scalar");
  rejects("DropoutGrad", f, {"a", "mask23", "", "a"}, "training_mode 'a' must be bool");
  // And the accepted cases type dX like the forward tensor.
  Graph g = single_node_graph(make_node("SumToShape", {"r3", "x"}, {"dx"}, {}, kTrainrtDomain),
                              {{"r3", r3}, {"x", Tensor(DataType::Float32, {2, 1})}});
  CHECK(g.info("dx") == ValueInfo{DataType::Float32, shape_of({2, 1})});
}

// ---- coverage (STYLE.md point 3) ----------------------------------------------------

TEST_CASE("every elementwise/misc op with a reference kernel has a gradient rule or is non-differentiable") {
  Registry r;
  register_elementwise(r);
  register_misc(r);
  const GradRegistry& gr = gradients();
  int forward = 0, backward = 0;
  for (const OpSchema* s : r.schemas.all()) {
    CAPTURE(s->op_type);
    CHECK(r.kernels.find("reference", s->domain, s->op_type) != nullptr);
    if (s->domain == kTrainrtDomain) {  // backward ops: never differentiated themselves
      ++backward;
      continue;
    }
    ++forward;
    CHECK((gr.find(s->domain, s->op_type) != nullptr || gr.is_non_differentiable(s->domain, s->op_type)));
  }
  // The unary table (ops/unary_ops.h) and, besides it: Add Sub Mul Div Sum Identity
  // Constant Cast Dropout Clip Pow Where Equal Greater Less GreaterOrEqual LessOrEqual Mod Not.
  int table = 0, table_grads = 0;
  for (const UnaryOpInfo& u : unary_op_table()) ++table, table_grads += u.grad != nullptr;
  CHECK(forward == 19 + table);
  // The table's backward ops and SumToShape DropoutGrad DropoutReluGrad ClipGrad PowGrad.
  CHECK(backward == 5 + table_grads);
}
