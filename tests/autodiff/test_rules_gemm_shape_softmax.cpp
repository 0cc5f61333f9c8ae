// Gradient rules of the gemm, shape and softmax/loss families (autodiff/rules_gemm.cpp,
// autodiff/rules_shape.cpp, autodiff/rules_softmax_loss.cpp) and their backward ops
// (ops/shape_ops.cpp, ops/softmax_loss.cpp).
//
// Every rule is checked by finite differences on a small float64 graph (seeded random
// shapes) ending in the scalar loss ReduceMean(y * r), with r a random feed so that dY
// is not uniform (a loss that already is a scalar is multiplied by a random scalar).
// Tolerance 1e-6 on gradcheck.h's error |a - n| / max(1, |n|): central differences at
// h = 1e-6 in fp64 have truncation error O(h^2 |f'''|) ~ 1e-12 and rounding error
// ~ eps |L| / h ~ 1e-10, so a correct rule sits near 1e-9 and anything above 1e-6 is
// a wrong rule, not noise. None of these ops has a kink.
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <random>

#include "autodiff/gradcheck.h"
#include "autodiff/gradient.h"
#include "graph/error.h"
#include "runtime/training_session.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

constexpr double kTol = 1e-6;

Tensor ints(std::vector<int64_t> values) {
  Tensor t(DataType::Int64, {static_cast<int64_t>(values.size())});
  for (size_t k = 0; k < values.size(); ++k) t.data<int64_t>()[k] = values[k];
  return t;
}

using GraphBuilder = GradNet;

// r in [0.5, 1.5): no output's weight is near zero.
GradCheck check(GraphBuilder& b, const std::string& y, int samples = 12) {
  return check_net(b, y, samples, kTol, 0.5, 1.5);
}

bool has_node(const Graph& g, const std::string& op) {
  for (const Node& n : g.nodes)
    if (n.op_type == op) return true;
  return false;
}

}  // namespace

// ---- Gemm and MatMul ----------------------------------------------------------------

TEST_CASE("gradcheck: Gemm with every trans flag combination, alpha/beta and C broadcasts") {
  std::mt19937_64 rng(21);
  std::uniform_int_distribution<int64_t> extent(1, 4);
  // C shapes relative to Y[M,N]: none, [], [1], [N], [1,N], [M,1], [M,N], [1,1]
  for (int c_kind = 0; c_kind < 8; ++c_kind)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        const int64_t M = extent(rng) + 1, K = extent(rng), N = extent(rng) + 1;
        const std::vector<std::vector<int64_t>> c_shapes = {{}, {}, {1}, {N}, {1, N}, {M, 1}, {M, N}, {1, 1}};
        CAPTURE(c_kind);
        CAPTURE(ta);
        CAPTURE(tb);
        GraphBuilder b;
        b.seed = static_cast<uint64_t>(c_kind * 4 + ta * 2 + tb + 1);
        std::vector<std::string> ins{b.param("A", ta ? std::vector<int64_t>{K, M} : std::vector<int64_t>{M, K}),
                                     b.param("B", tb ? std::vector<int64_t>{N, K} : std::vector<int64_t>{K, N})};
        if (c_kind > 0) ins.push_back(b.param("C", c_shapes[static_cast<size_t>(c_kind)]));
        std::map<std::string, Attribute> attrs{{"transA", Attribute::of_int(ta)}, {"transB", Attribute::of_int(tb)}};
        if ((c_kind + ta + tb) % 2) {  // half the cases with non-default alpha and beta
          attrs["alpha"] = Attribute::of_float(0.75f);
          attrs["beta"] = Attribute::of_float(-1.5f);
        }
        GradCheck r = check(b, b.node("Gemm", ins, attrs));
        CHECK(r.training.params.size() == ins.size());
      }
}

TEST_CASE("gradcheck: Gemm whose A is a data input (only B and C are differentiated)") {
  GraphBuilder b;
  const std::string x = b.feed("x", random_tensor(DataType::Float64, {5, 3}, 9));
  GradCheck r =
      check(b, b.node("Gemm", {x, b.param("W", {4, 3}), b.param("bias", {4})}, {{"transB", Attribute::of_int(1)}}));
  CHECK(r.training.params.size() == 2);
}

TEST_CASE("gradcheck: MatMul 2-D, batched with broadcasting, and 1-D operands") {
  const std::vector<std::pair<std::vector<int64_t>, std::vector<int64_t>>> shapes = {{{3, 4}, {4, 5}},
                                                                                     {{2, 3, 4}, {4, 5}},
                                                                                     {{3, 4}, {2, 4, 5}},
                                                                                     {{2, 1, 3, 4}, {3, 4, 2}},
                                                                                     {{2, 3, 4}, {1, 4, 2}},
                                                                                     {{2, 3, 4}, {2, 4, 2}},
                                                                                     {{4}, {4, 5}},
                                                                                     {{2, 3, 4}, {4}},
                                                                                     {{4}, {4}},
                                                                                     {{4}, {2, 4, 3}},
                                                                                     {{3, 4}, {4}},
                                                                                     {{1, 2, 3}, {2, 2, 3, 1}}};
  for (const auto& [sa, sb] : shapes) {
    CAPTURE(dims_to_string(sa));
    CAPTURE(dims_to_string(sb));
    GraphBuilder b;
    check(b, b.node("MatMul", {b.param("A", sa), b.param("B", sb)}));
  }
}

TEST_CASE("MatMul with a symbolic batch: gradients keep the symbol and run at any batch") {
  GraphBuilder b;
  b.g.inputs.push_back("x");
  b.g.values["x"] = ValueInfo{DataType::Float64, Shape{Dim::sym("N"), Dim::of(3), Dim::of(4)}};
  const std::string h = b.node("MatMul", {"x", b.param("W", {4, 2})});
  const std::string y = b.node("MatMul", {h, b.param("v", {2})});  // [N,3]
  const std::string z = b.node(
      "MatMul", {b.param("u", {3}), b.node("Transpose", {h}, {{"perm", Attribute::of_ints({0, 1, 2})}})});  // [N,2]
  b.g.outputs = {b.node("Concat", {b.node("Flatten", {y}), b.node("Flatten", {z})}, {{"axis", Attribute::of_int(1)}})};
  Node mean = make_node("ReduceMean", {b.g.outputs[0]}, {"loss"}, {{"keepdims", Attribute::of_int(0)}});
  b.g.nodes.push_back(mean);
  b.g.outputs = {"loss"};
  infer_shapes(b.g, registry().schemas, "test");
  for (int64_t batch : {1, 3}) {
    CAPTURE(batch);
    GradCheck r = check_gradients(b.g, {{"x", random_tensor(DataType::Float64, {batch, 3, 4}, 4)}});
    CAPTURE(r.worst);
    CHECK(r.max_error < kTol);
    CHECK(r.training.params.size() == 3);
  }
}

// ---- shape ops ------------------------------------------------------------------------

TEST_CASE("gradcheck: Flatten on every axis and Reshape with 0 and -1") {
  for (int64_t axis : {0, 1, 2, 3, -1, -3}) {
    CAPTURE(axis);
    GraphBuilder b;
    check(b, b.node("Tanh", {b.node("Flatten", {b.param("p", {2, 3, 2})}, {{"axis", Attribute::of_int(axis)}})}));
  }
  for (const std::vector<int64_t>& shape : std::vector<std::vector<int64_t>>{{0, -1}, {6, 2}, {-1}, {2, 0, 1, 2}}) {
    CAPTURE(dims_to_string(shape));
    GraphBuilder b;
    const std::string s = b.constant("shape", ints(shape));
    GradCheck r = check(b, b.node("Tanh", {b.node("Reshape", {b.param("p", {2, 3, 2}), s})}));
    CHECK(r.training.params == std::vector<std::string>{"p"});  // the int64 shape is not a parameter
  }
}

TEST_CASE("gradcheck: Transpose with explicit and default perms") {
  for (const std::vector<int64_t>& perm :
       std::vector<std::vector<int64_t>>{{}, {0, 1, 2}, {2, 0, 1}, {1, 2, 0}, {0, 2, 1}}) {
    CAPTURE(dims_to_string(perm));
    GraphBuilder b;
    std::map<std::string, Attribute> attrs;
    if (!perm.empty()) attrs["perm"] = Attribute::of_ints(perm);
    check(b, b.node("Transpose", {b.param("p", {2, 3, 4})}, attrs));
  }
}

TEST_CASE("gradcheck: Concat on several axes, with a repeated input and a data input") {
  for (int64_t axis : {0, 1, 2, -1, -2}) {
    CAPTURE(axis);
    GraphBuilder b;
    const size_t a = static_cast<size_t>(axis < 0 ? axis + 3 : axis);
    std::vector<int64_t> s0{2, 3, 2}, s1{2, 3, 2}, s2{2, 3, 2};
    s0[a] = 1;
    s2[a] = 3;
    const std::string p = b.param("p", s0);
    const std::string x = b.feed("x", random_tensor(DataType::Float64, s2, 77));
    GradCheck r = check(b, b.node("Concat", {p, b.param("q", s1), x, p}, {{"axis", Attribute::of_int(axis)}}));
    CHECK(r.training.params.size() == 2);
    CHECK(has_node(r.training.graph, "ConcatGrad"));
  }
}

TEST_CASE("gradcheck: Pad with growing, cropping and mixed pads, a constant value, opset 18 axes") {
  const std::vector<std::vector<int64_t>> all_pads = {
      {0, 1, 2, 0, 2, 1}, {0, 0, 0, 0, 0, 0}, {1, -1, 0, 0, 1, -1}, {0, -1, -1, 0, 0, -1}};
  for (const auto& pads : all_pads) {
    CAPTURE(dims_to_string(pads));
    GraphBuilder b;
    b.constant("value", make(DataType::Float64, {}, {0.25}));
    const std::string pads_name = b.constant("pads", ints(pads));
    check(b, b.node("Pad", {b.param("p", {2, 3, 4}), pads_name, "value"}));
  }
  GraphBuilder b(18);
  const std::string pads_name = b.constant("pads", ints({1, 2, 0, 1}));
  const std::string axes = b.constant("axes", ints({-1, 0}));
  GradCheck r = check(b, b.node("Pad", {b.param("p", {2, 3, 4}), pads_name, "", axes}));
  CHECK(r.training.params == std::vector<std::string>{"p"});
}

TEST_CASE("Pad's gradient on a padded symbolic dim keeps the symbol") {
  GraphBuilder b;
  b.feed("x", random_tensor(DataType::Float64, {2, 3}, 3));
  b.g.values["x"] = ValueInfo{DataType::Float64, Shape{Dim::sym("N"), Dim::of(3)}};
  const std::string h = b.node("Mul", {"x", b.param("w", {3})});
  const std::string y = b.node("Tanh", {b.node("Pad", {h, b.constant("pads", ints({1, 0, 2, 1}))})});  // [?,4]
  Node mean = make_node("ReduceMean", {y}, {"loss"}, {{"keepdims", Attribute::of_int(0)}});
  b.g.nodes.push_back(mean);
  b.g.outputs = {"loss"};
  infer_shapes(b.g, registry().schemas, "test");
  GradCheck r = check_gradients(b.g, b.feeds);
  CAPTURE(r.worst);
  CHECK(r.max_error < kTol);
  CHECK(has_node(r.training.graph, "ReshapeLike"));
}

// ---- softmax, loss, mean ----------------------------------------------------------------

TEST_CASE("gradcheck: Softmax and LogSoftmax on first, middle and last axes") {
  for (const char* op : {"Softmax", "LogSoftmax"})
    for (int64_t axis : {0, 1, 2, -1, -2}) {
      CAPTURE(op);
      CAPTURE(axis);
      GraphBuilder b;
      check(b, b.node(op, {b.param("p", {2, 4, 3}, -2, 2)}, {{"axis", Attribute::of_int(axis)}}));
    }
  GraphBuilder b;  // default axis
  check(b, b.node("Softmax", {b.param("p", {3, 5}, -2, 2)}));
}

TEST_CASE("gradcheck: SoftmaxCrossEntropyLoss for each reduction, with weights and ignore_index") {
  for (const char* reduction : {"mean", "sum", "none"})
    for (bool weighted : {false, true})
      for (int ignore : {0, 1, 2})  // 0: no ignore_index; 1: a class label; 2: a negative one
        for (bool spatial : {false, true}) {
          CAPTURE(reduction);
          CAPTURE(weighted);
          CAPTURE(ignore);
          CAPTURE(spatial);
          GraphBuilder b;
          const std::vector<int64_t> dims = spatial ? std::vector<int64_t>{3, 4, 2} : std::vector<int64_t>{5, 4};
          const int64_t ii = ignore == 1 ? 2 : -100;
          Tensor labels(DataType::Int64, spatial ? std::vector<int64_t>{3, 2} : std::vector<int64_t>{5});
          for (int64_t k = 0; k < labels.numel(); ++k) labels.data<int64_t>()[k] = (k * 3 + 1) % 4;
          if (ignore) labels.data<int64_t>()[1] = ii;  // at least one ignored, at least one kept
          std::vector<std::string> ins{b.param("scores", dims, -2, 2), b.feed("labels", labels)};
          if (weighted) ins.push_back(b.constant("weights", make(DataType::Float64, {4}, {0.5, 1.5, 2.0, 0.25})));
          std::map<std::string, Attribute> attrs{{"reduction", Attribute::of_string(reduction)}};
          if (ignore) attrs["ignore_index"] = Attribute::of_int(ii);
          GradCheck r = check(b, b.node("SoftmaxCrossEntropyLoss", ins, attrs));
          CHECK(r.training.params == std::vector<std::string>{"scores"});  // weights are not trained
          CHECK(r.training.graph.find_info("SoftmaxCrossEntropyLoss_0/log_prob") != nullptr);
        }
}

TEST_CASE("gradcheck: SoftmaxCrossEntropyLoss whose log_prob output is used too") {
  GraphBuilder b;
  Tensor labels = ints({0, 2, 1});
  auto outs = b.node_n("SoftmaxCrossEntropyLoss", {b.param("scores", {3, 3}, -2, 2), b.feed("labels", labels)}, 2);
  const std::string lp_mean = b.node("ReduceMean", {b.node("Tanh", {outs[1]})}, {{"keepdims", Attribute::of_int(0)}});
  GradCheck r = check(b, b.node("Add", {outs[0], lp_mean}));
  CHECK(has_node(r.training.graph, "LogSoftmaxGrad"));
  CHECK(has_node(r.training.graph, "SoftmaxCrossEntropyLossGrad"));
}

TEST_CASE("gradcheck: ReduceMean over axes with and without keepdims, all axes, opset 18 input") {
  const std::vector<std::vector<int64_t>> all_axes = {{}, {0}, {1}, {-1}, {0, 2}, {2, 1, 0}};
  for (const auto& axes : all_axes)
    for (int64_t keepdims : {0, 1}) {
      CAPTURE(dims_to_string(axes));
      CAPTURE(keepdims);
      GraphBuilder b;
      std::map<std::string, Attribute> attrs{{"keepdims", Attribute::of_int(keepdims)}};
      if (!axes.empty()) attrs["axes"] = Attribute::of_ints(axes);
      check(b, b.node("ReduceMean", {b.param("p", {2, 3, 4})}, attrs));
    }
  for (bool noop : {false, true}) {
    CAPTURE(noop);
    GraphBuilder b(18);
    std::map<std::string, Attribute> attrs{{"noop_with_empty_axes", Attribute::of_int(noop)}};
    check(b, b.node("ReduceMean", {b.param("p", {2, 3, 4}), b.constant("axes", ints({1}))}));
    GraphBuilder c(18);
    check(c, c.node("ReduceMean", {c.param("p", {2, 3})}, attrs));
  }
}

TEST_CASE("gradcheck: ReduceSum (axes input, opset 13) and ReduceMax (axes attribute) over axes, keepdims") {
  const std::vector<std::vector<int64_t>> all_axes = {{}, {0}, {1}, {-1}, {0, 2}, {2, 1, 0}};
  for (const auto& axes : all_axes)
    for (int64_t keepdims : {0, 1}) {
      CAPTURE(dims_to_string(axes));
      CAPTURE(keepdims);
      std::map<std::string, Attribute> attrs{{"keepdims", Attribute::of_int(keepdims)}};
      GraphBuilder s(13);
      std::vector<std::string> ins{s.param("p", {2, 3, 4})};
      if (!axes.empty()) ins.push_back(s.constant("axes", ints(axes)));
      GradCheck r = check(s, s.node("ReduceSum", ins, attrs));
      CHECK(has_node(r.training.graph, "ReduceSumGrad"));
      // Continuous random inputs: no two elements of a reduced set tie within h.
      GraphBuilder m(13);
      if (!axes.empty()) attrs["axes"] = Attribute::of_ints(axes);
      r = check(m, m.node("ReduceMax", {m.param("p", {2, 3, 4})}, attrs));
      CHECK(has_node(r.training.graph, "ReduceMaxGrad"));
    }
  for (bool noop : {false, true}) {  // no axes: all of them, or none with noop_with_empty_axes
    CAPTURE(noop);
    GraphBuilder b(13);
    check(b, b.node("ReduceSum", {b.param("p", {2, 3})}, {{"noop_with_empty_axes", Attribute::of_int(noop)}}));
    GraphBuilder c(18);
    check(c, c.node("ReduceMax", {c.param("p", {2, 3}), c.constant("axes", ints({-2}))},
                    {{"noop_with_empty_axes", Attribute::of_int(noop)}}));
  }
}

TEST_CASE("ReduceMaxGrad splits dY equally among tied maxima, as torch.amax's backward does") {
  // torch.amax(x, dim=1).sum().backward() for x = [[1,3,3],[2,2,2]] gives
  // [[0, .5, .5], [1/3, 1/3, 1/3]] (torch 1.13).
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    CAPTURE(dtype_name(t));
    const TensorMap f{
        {"dy", make(t, {2}, {1, 1})}, {"x", make(t, {2, 3}, {1, 3, 3, 2, 2, 2})}, {"y", make(t, {2}, {3, 2})}};
    const TensorMap out =
        run_node(make_node("ReduceMaxGrad", {"dy", "x", "y"}, {"dx"},
                           {{"axes", Attribute::of_ints({1})}, {"keepdims", Attribute::of_int(0)}}, kTrainrtDomain),
                 f, "reference");
    CHECK(max_abs_diff(out.at("dx"), make(t, {2, 3}, {0, 0.5, 0.5, 1.0 / 3, 1.0 / 3, 1.0 / 3})) < 1e-7);
  }
}

TEST_CASE(
    "gradcheck: a transformer-like chain: LayerNorm, batched MatMul with broadcast weights, ReduceMax, ReduceSum") {
  GraphBuilder b;
  const std::string x = b.param("x", {2, 3, 4}, -2, 2);
  const std::string ln = b.node("LayerNormalization", {x, b.param("gamma", {4}, 0.5, 1.5), b.param("beta", {4})});
  const std::string h = b.node("MatMul", {ln, b.param("W", {4, 5})});                      // [2,3,5]
  const std::string att = b.node("MatMul", {h, b.param("K", {1, 5, 3})});                  // [2,3,3], K broadcast
  const std::string m = b.node("ReduceMax", {att}, {{"axes", Attribute::of_ints({-1})}});  // [2,3,1]
  const std::string s = b.node("ReduceSum", {h, b.constant("axes", ints({1}))}, {{"keepdims", Attribute::of_int(0)}});
  GradCheck r = check(b, b.node("Add", {b.node("ReduceSum", {m}, {{"keepdims", Attribute::of_int(0)}}),
                                        b.node("ReduceSum", {s}, {{"keepdims", Attribute::of_int(0)}})}));
  CHECK(has_node(r.training.graph, "LayerNormalizationGrad"));
  CHECK(has_node(r.training.graph, "ReduceMaxGrad"));
  CHECK(has_node(r.training.graph, "SumToShape"));  // K's broadcast batch dim summed
}

TEST_CASE("gradcheck: a small MLP through every family at once") {
  GraphBuilder b;
  const std::string x = b.feed("x", random_tensor(DataType::Float64, {4, 2, 3}, 5));
  const std::string flat = b.node("Flatten", {x});  // [4,6]
  const std::string h = b.node("Tanh", {b.node("Gemm", {flat, b.param("W1", {5, 6}), b.param("b1", {5})},
                                               {{"transB", Attribute::of_int(1)}})});                       // [4,5]
  const std::string cat = b.node("Concat", {h, b.node("Softmax", {h})}, {{"axis", Attribute::of_int(1)}});  // [4,10]
  const std::string logits = b.node("MatMul", {cat, b.param("W2", {10, 3})});
  const std::string loss = b.node("SoftmaxCrossEntropyLoss", {logits, b.feed("labels", ints({0, 2, 1, 2}))});
  check(b, loss, 24);
}

// ---- the appended loss and training -----------------------------------------------------

namespace {

// logits = Gemm(x, W, b; transB=1): a linear classifier of 2-D points into 3 classes.
Graph linear_classifier(DataType t) {
  Graph g;
  g.name = "classifier";
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{t, Shape{Dim::sym("N"), Dim::of(2)}};
  Tensor w = random_tensor(t, {3, 2}, 3, -0.1, 0.1), bias(t, {3});
  g.initializers = {{"W", w}, {"b", bias}};
  g.values["W"] = ValueInfo{t, shape_of({3, 2})};
  g.values["b"] = ValueInfo{t, shape_of({3})};
  Node n = make_node("Gemm", {"x", "W", "b"}, {"logits"}, {{"transB", Attribute::of_int(1)}});
  n.name = "fc";
  g.nodes.push_back(n);
  g.outputs = {"logits"};
  infer_shapes(g, registry().schemas, "test");
  return g;
}

// Three well separated clusters around (2,0), (-1,2), (-1,-2).
void toy_batch(int64_t n, uint64_t seed, Tensor& x, Tensor& labels) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<double> noise(0.0, 0.3);
  const double centers[3][2] = {{2, 0}, {-1, 2}, {-1, -2}};
  x = Tensor(DataType::Float32, {n, 2});
  labels = Tensor(DataType::Int64, {n});
  for (int64_t i = 0; i < n; ++i) {
    const int64_t c = i % 3;
    labels.data<int64_t>()[i] = c;
    x.data<float>()[2 * i] = static_cast<float>(centers[c][0] + noise(rng));
    x.data<float>()[2 * i + 1] = static_cast<float>(centers[c][1] + noise(rng));
  }
}

}  // namespace

TEST_CASE("a Gemm(transB=1) classifier trained by TrainingSession with SGD separates a toy problem") {
  const Graph forward = linear_classifier(DataType::Float32);
  TrainingOptions o;
  o.optimizer = "sgd";
  o.momentum = 0.9f;
  TrainingSession s(build_training_graph(forward, o), make_backend("reference"), {.seed = 1});
  CHECK(s.training().labels == "labels");
  Tensor x, labels;
  double first = 0, last = 0;
  for (int step = 0; step < 40; ++step) {
    toy_batch(12, static_cast<uint64_t>(step), x, labels);
    last = s.step({{"x", x}, {"labels", labels}}, 0.1f);
    if (step == 0) first = last;
  }
  CAPTURE(first);
  CAPTURE(last);
  CHECK(first > 0.9);         // ~log 3 with small initial weights
  CHECK(last < 0.1 * first);  // separable: the loss falls by far
  // The trained forward classifies a fresh batch correctly.
  toy_batch(30, 1000, x, labels);
  TensorMap out = run_graph(s.trained_forward(forward), {{"x", x}}, *make_backend("reference"));
  const Tensor& logits = out.at("logits");
  for (int64_t i = 0; i < 30; ++i) {
    int64_t best = 0;
    for (int64_t c = 1; c < 3; ++c)
      if (logits.data<float>()[i * 3 + c] > logits.data<float>()[i * 3 + best]) best = c;
    CHECK(best == labels.data<int64_t>()[i]);
  }
}

TEST_CASE("the appended SoftmaxCrossEntropyLoss(mean) has gradient (softmax - onehot) / N") {
  const Graph forward = linear_classifier(DataType::Float64);
  TrainingOptions o;
  o.optimizer = "none";
  TrainingGraph t = build_training_graph(forward, o);
  std::string dlogits;
  for (const Node& n : t.graph.nodes)
    if (n.op_type == "SoftmaxCrossEntropyLossGrad") dlogits = n.outputs.at(0);
  REQUIRE(!dlogits.empty());
  const int64_t N = 5;
  Tensor x = random_tensor(DataType::Float64, {N, 2}, 8, -2, 2), labels = ints({2, 0, 1, 1, 0});
  RunOptions ro;
  ro.training = true;
  ro.extra_outputs = {dlogits};
  TensorMap out = run_graph(t.graph, {{"x", x}, {"labels", labels}}, *make_backend("reference"), ro);
  const Tensor& logits = out.at("logits");
  const Tensor& d = out.at(dlogits);
  const Tensor& dw = out.at(t.gradients.at("W"));
  double dw_want[3][2] = {};
  for (int64_t i = 0; i < N; ++i) {
    double z[3], sum = 0;
    for (int64_t c = 0; c < 3; ++c) sum += z[c] = std::exp(logits.get_as_double(i * 3 + c));
    for (int64_t c = 0; c < 3; ++c) {
      const double want = (z[c] / sum - (labels.data<int64_t>()[i] == c ? 1.0 : 0.0)) / N;
      CHECK(std::fabs(d.get_as_double(i * 3 + c) - want) < 1e-14);
      for (int64_t k = 0; k < 2; ++k) dw_want[c][k] += want * x.get_as_double(i * 2 + k);  // dW = dlogits^T x
    }
  }
  for (int64_t c = 0; c < 3; ++c)
    for (int64_t k = 0; k < 2; ++k) CHECK(std::fabs(dw.get_as_double(c * 2 + k) - dw_want[c][k]) < 1e-14);
}

// ---- backward ops: values and shape rules -------------------------------------------------

namespace {

TensorMap run_backward(const std::string& op, const TensorMap& feeds, std::vector<std::string> ins,
                       std::vector<std::string> outs, std::map<std::string, Attribute> attrs = {}) {
  TensorMap used;
  for (const std::string& in : ins)
    if (!in.empty()) used[in] = feeds.at(in);
  Node n = make_node(op, std::move(ins), std::move(outs), std::move(attrs), kTrainrtDomain);
  return run_graph(single_node_graph(n, used), used, *make_backend("reference"));
}

}  // namespace

TEST_CASE("backward ops on known values, fp32 and fp64") {
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    CAPTURE(dtype_name(t));
    const Tensor dy = make(t, {2, 3}, {1, 2, 3, 4, 5, 6});
    // ConcatGrad along axis 1 into [2,1] and [2,2]; the first output skipped.
    const TensorMap f{{"dy", dy}, {"a", Tensor(t, {2, 1})}, {"b", Tensor(t, {2, 2})}, {"x", Tensor(t, {3, 2})}};
    TensorMap out = run_backward("ConcatGrad", f, {"dy", "a", "b"}, {"da", "db"}, {{"axis", Attribute::of_int(1)}});
    CHECK(max_abs_diff(out.at("da"), make(t, {2, 1}, {1, 4})) == 0);
    CHECK(max_abs_diff(out.at("db"), make(t, {2, 2}, {2, 3, 5, 6})) == 0);
    out = run_backward("ConcatGrad", f, {"dy", "a", "b"}, {"", "db"}, {{"axis", Attribute::of_int(-1)}});
    CHECK(max_abs_diff(out.at("db"), make(t, {2, 2}, {2, 3, 5, 6})) == 0);
    out = run_backward("ReshapeLike", f, {"dy", "x"}, {"dx"});
    CHECK(max_abs_diff(out.at("dx"), make(t, {3, 2}, {1, 2, 3, 4, 5, 6})) == 0);
    // ReduceMeanGrad over axis 1 with keepdims=0: dY [2] spread over 3 elements.
    const TensorMap m{{"dy", make(t, {2}, {3, 6})}, {"x", Tensor(t, {2, 3})}};
    out = run_backward("ReduceMeanGrad", m, {"dy", "x"}, {"dx"},
                       {{"axes", Attribute::of_ints({1})}, {"keepdims", Attribute::of_int(0)}});
    CHECK(max_abs_diff(out.at("dx"), make(t, {2, 3}, {1, 1, 1, 2, 2, 2})) == 0);
    // SoftmaxGrad of a uniform Y = 1/2 over 2 classes: dX = (dY - mean dY) / 2.
    const TensorMap s{{"dy", make(t, {1, 2}, {1, 3})}, {"y", make(t, {1, 2}, {0.5, 0.5})}};
    out = run_backward("SoftmaxGrad", s, {"dy", "y"}, {"dx"});
    CHECK(max_abs_diff(out.at("dx"), make(t, {1, 2}, {-0.5, 0.5})) == 0);
    const TensorMap ls{{"dy", make(t, {1, 2}, {1, 3})}, {"y", make(t, {1, 2}, {std::log(0.5), std::log(0.5)})}};
    out = run_backward("LogSoftmaxGrad", ls, {"dy", "y"}, {"dx"});
    CHECK(max_abs_diff(out.at("dx"), make(t, {1, 2}, {-1, 1})) < 1e-6);
    // SCE grad (sum) with a weight: w[l] * (p - onehot).
    const TensorMap sce{{"dl", make(t, {}, {2})},
                        {"lp", make(t, {1, 2}, {std::log(0.25), std::log(0.75)})},
                        {"l", ints({1})},
                        {"w", make(t, {2}, {1, 3})}};
    out = run_backward("SoftmaxCrossEntropyLossGrad", sce, {"dl", "lp", "l", "w"}, {"dx"},
                       {{"reduction", Attribute::of_string("sum")}});
    CHECK(max_abs_diff(out.at("dx"), make(t, {1, 2}, {1.5, -1.5})) < 1e-6);
  }
}

TEST_CASE("backward ops' shape rules reject mismatched shapes") {
  auto rejects = [](const std::string& op, const TensorMap& feeds, std::vector<std::string> ins,
                    std::vector<std::string> outs, std::map<std::string, Attribute> attrs, const std::string& want) {
    CAPTURE(op);
    ErrorKind kind = ErrorKind::Internal;
    TensorMap used;
    for (const std::string& in : ins)
      if (!in.empty()) used[in] = feeds.at(in);
    const std::string msg =
        error_of([&] { single_node_graph(make_node(op, ins, outs, attrs, kTrainrtDomain), used); }, &kind);
    CAPTURE(msg);
    CHECK(kind == ErrorKind::BadInput);
    CHECK(msg.find(want) != std::string::npos);
  };
  const DataType f = DataType::Float32;
  const TensorMap v{{"a23", Tensor(f, {2, 3})},
                    {"a24", Tensor(f, {2, 4})},
                    {"a7", Tensor(f, {7})},
                    {"a32", Tensor(f, {3, 2})},
                    {"d23", Tensor(DataType::Float64, {2, 3})},
                    {"a21", Tensor(f, {2, 1})},
                    {"a22", Tensor(f, {2, 2})},
                    {"a31", Tensor(f, {3, 1})},
                    {"a2", Tensor(f, {2})},
                    {"a3", Tensor(f, {3})},
                    {"s", Tensor(f, {})},
                    {"l2", Tensor(DataType::Int64, {2})},
                    {"l3", Tensor(DataType::Int64, {3})},
                    {"lf", Tensor(f, {2})},
                    {"a234", Tensor(f, {2, 3, 4})}};
  const std::map<std::string, Attribute> none, ax1{{"axis", Attribute::of_int(1)}};
  rejects("ReshapeLike", v, {"a23", "a7"}, {"dx"}, none, "has 6 elements");
  rejects("ReshapeLike", v, {"a23", "d23"}, {"dx"}, none, "must share a dtype");
  rejects("ConcatGrad", v, {"a23", "a21", "a21"}, {"d0", "d1"}, ax1, "sum to 2");
  rejects("ConcatGrad", v, {"a23", "a21", "a31"}, {"d0", "d1"}, ax1, "differs from dY");
  rejects("ConcatGrad", v, {"a23", "a21", "a2"}, {"d0", "d1"}, ax1, "has rank 1");
  rejects("ConcatGrad", v, {"a23", "a21", "a22"}, {"d0", "d1"}, {{"axis", Attribute::of_int(2)}}, "out of range");
  rejects("ConcatGrad", v, {"a23", "a21", "a22"}, {"d0", "d1", "d2"}, ax1, "3 outputs for 2");
  rejects("ConcatGrad", v, {"a23", "a21", "a22"}, {"d0", "d1"}, none, "'axis' is required");
  for (const char* op : {"SoftmaxGrad", "LogSoftmaxGrad"}) {
    rejects(op, v, {"a23", "a32"}, {"dx"}, none, "must have the shape of dY");
    rejects(op, v, {"a23", "d23"}, {"dx"}, none, "must share a dtype");
    rejects(op, v, {"a23", "a23"}, {"dx"}, {{"axis", Attribute::of_int(2)}}, "out of range");
  }
  const std::map<std::string, Attribute> mean{{"reduction", Attribute::of_string("mean")}},
      red_none{{"reduction", Attribute::of_string("none")}};
  rejects("SoftmaxCrossEntropyLossGrad", v, {"s", "a23", "l3"}, {"dx"}, mean, "(labels) [3] must be [2]");
  rejects("SoftmaxCrossEntropyLossGrad", v, {"s", "a23", "lf"}, {"dx"}, mean, "must be int64 or int32");
  rejects("SoftmaxCrossEntropyLossGrad", v, {"a2", "a23", "l2"}, {"dx"}, mean, "(dLoss) [2] must be []");
  rejects("SoftmaxCrossEntropyLossGrad", v, {"s", "a23", "l2"}, {"dx"}, red_none, "(dLoss) [] must be [2]");
  rejects("SoftmaxCrossEntropyLossGrad", v, {"s", "a23", "l2", "a2"}, {"dx"}, mean, "(weights) [2] must be [C] = [3]");
  rejects("SoftmaxCrossEntropyLossGrad", v, {"s", "a3", "l2"}, {"dx"}, mean, "must be [N,C]");
  rejects("SoftmaxCrossEntropyLossGrad", v, {"s", "a23", "l2"}, {"dx"}, {{"reduction", Attribute::of_string("max")}},
          "must be none, mean or sum");
  const std::map<std::string, Attribute> ax1_keep0{{"axes", Attribute::of_ints({1})},
                                                   {"keepdims", Attribute::of_int(0)}};
  rejects("ReduceMeanGrad", v, {"a3", "a23"}, {"dx"}, ax1_keep0, "(dY) [3] must be [2]");
  rejects("ReduceMeanGrad", v, {"a2", "a23"}, {"dx"}, {{"axes", Attribute::of_ints({1})}}, "(dY) [2] must be [2,1]");
  rejects("ReduceMeanGrad", v, {"a2", "a234"}, {"dx"}, {{"axes", Attribute::of_ints({3})}}, "out of range");
  rejects("ReduceMeanGrad", v, {"a2", "d23"}, {"dx"}, ax1_keep0, "must share a dtype");
  // Accepted cases type dX like the forward tensor.
  Graph g = single_node_graph(make_node("ConcatGrad", {"dy", "a", "b"}, {"", "db"}, ax1, kTrainrtDomain),
                              {{"dy", Tensor(f, {2, 3})}, {"a", Tensor(f, {2, 1})}, {"b", Tensor(f, {2, 2})}});
  CHECK(g.info("db") == ValueInfo{f, shape_of({2, 2})});
}

// ---- coverage (STYLE.md point 3) ------------------------------------------------------

TEST_CASE("every gemm/shape/softmax-loss op has a gradient rule, and every backward op a reference kernel") {
  Registry r;
  register_gemm(r);
  register_shape_ops(r);
  register_softmax_loss(r);
  const GradRegistry& gr = gradients();
  int forward = 0, backward = 0;
  for (const OpSchema* s : r.schemas.all()) {
    CAPTURE(s->op_type);
    CHECK(r.kernels.find("reference", s->domain, s->op_type) != nullptr);
    if (s->domain.empty()) {
      ++forward;
      CHECK((gr.find("", s->op_type) != nullptr) != gr.is_non_differentiable("", s->op_type));
    } else {
      ++backward;
      CHECK(s->domain == kTrainrtDomain);
    }
  }
  CHECK(forward == 23);  // Shape, ConstantOfShape, Range and ScatterND are non-differentiable
  CHECK(backward == 10);
}

// ---- Gather, Slice, Split, Squeeze, Unsqueeze, Expand, computed shapes ----------------

TEST_CASE("gradcheck: Gather on every axis with negative and repeated indices") {
  for (int64_t axis : {0, 1, -1}) {
    CAPTURE(axis);
    GraphBuilder b;
    Tensor idx(DataType::Int64, {2, 2});
    const int64_t picks[] = {0, -1, 1, 0};  // row 0 twice: its gradient adds up
    for (int k = 0; k < 4; ++k) idx.data<int64_t>()[k] = picks[k];
    GradCheck r = check(
        b, b.node("Gather", {b.param("p", {3, 2, 4}), b.constant("idx", idx)}, {{"axis", Attribute::of_int(axis)}}));
    CHECK(has_node(r.training.graph, "GatherGrad"));
  }
}

TEST_CASE("gradcheck: Slice with negative steps, clamped ends and default axes") {
  GraphBuilder b;
  check(b, b.node("Slice",
                  {b.param("p", {5, 6}), b.constant("starts", ints({-1, 1})), b.constant("ends", ints({-100, 100})),
                   b.constant("axes", ints({0, -1})), b.constant("steps", ints({-2, 2}))}));
  GraphBuilder c;
  GradCheck r =
      check(c, c.node("Slice", {c.param("p", {4, 3}), c.constant("starts", ints({1})), c.constant("ends", ints({3}))}));
  CHECK(has_node(r.training.graph, "SliceGrad"));
}

TEST_CASE("gradcheck: Split into given and equal parts, one output unused") {
  GraphBuilder b;
  const std::vector<std::string> parts = b.node_n("Split", {b.param("p", {2, 6}), b.constant("split", ints({1, 2, 3}))},
                                                  3, {{"axis", Attribute::of_int(1)}});
  check(b, b.node("Concat", {parts[0], parts[2]}, {{"axis", Attribute::of_int(1)}}));  // parts[1] gets zeros
  GraphBuilder c;                                                                      // equal parts
  const std::vector<std::string> halves = c.node_n("Split", {c.param("p", {4, 3})}, 2);
  check(c, c.node("Mul", {halves[0], halves[1]}));
}

TEST_CASE("opset 11 forms: Split's split and Squeeze/Unsqueeze's axes as attributes") {
  Tensor x(DataType::Float64, {2, 1, 3});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<double>()[i] = static_cast<double>(i);
  auto run = [&](const Node& n) {
    return run_graph(single_node_graph(n, {{"x", x}}, {}, 11), {{"x", x}}, *make_backend("cpu"));
  };
  TensorMap split = run(
      make_node("Split", {"x"}, {"a", "b"}, {{"axis", Attribute::of_int(2)}, {"split", Attribute::of_ints({1, 2})}}));
  CHECK(split.at("b").dims() == std::vector<int64_t>{2, 1, 2});
  CHECK(split.at("b").data<double>()[3] == 5.0);
  CHECK(run(make_node("Squeeze", {"x"}, {"y"}, {{"axes", Attribute::of_ints({-2})}})).at("y").dims() ==
        std::vector<int64_t>{2, 3});
  CHECK(run(make_node("Unsqueeze", {"x"}, {"y"}, {{"axes", Attribute::of_ints({0, 4})}})).at("y").dims() ==
        std::vector<int64_t>{1, 2, 1, 3, 1});
  // From opset 13 the attribute is an error, the input is expected.
  CHECK_THROWS_WITH_AS(
      single_node_graph(make_node("Squeeze", {"x"}, {"y"}, {{"axes", Attribute::of_ints({1})}}), {{"x", x}}),
      doctest::Contains("is an input from ai.onnx opset 13"), Error);
}

TEST_CASE("gradcheck: Squeeze and Unsqueeze with given and default axes") {
  GraphBuilder b;
  const std::string u = b.node("Unsqueeze", {b.param("p", {3, 2}), b.constant("axes", ints({0, -1}))});  // [1,3,2,1]
  check(b, b.node("Squeeze", {u, b.constant("sq", ints({3}))}));                                         // [1,3,2]
  GraphBuilder c;
  const std::string v = c.node("Unsqueeze", {c.param("p", {3, 2}), c.constant("axes", ints({1}))});
  check(c, c.node("Squeeze", {v}));  // every 1 removed
}

TEST_CASE("gradcheck: Expand by broadcasting, to a higher rank") {
  GraphBuilder b;
  GradCheck r = check(b, b.node("Expand", {b.param("p", {3, 1}), b.constant("shape", ints({2, 1, 4}))}));
  CHECK(has_node(r.training.graph, "SumToShape"));
}

TEST_CASE("gradcheck: Reshape whose shape is computed from Shape folds before autodiff") {
  GraphBuilder b;
  const std::string h =
      b.node("Mul", {b.feed("x", random_tensor(DataType::Float64, {2, 3, 4}, 5)), b.param("p", {3, 4})});
  const std::string batch = b.node("Gather", {b.node("Shape", {h}), b.constant("zero", Tensor(DataType::Int64, {}))});
  const std::string shape =
      b.node("Concat", {b.node("Unsqueeze", {batch, b.constant("axes", ints({0}))}), b.constant("rest", ints({-1}))},
             {{"axis", Attribute::of_int(0)}});
  GradCheck r = check(b, b.node("Tanh", {b.node("Reshape", {h, shape})}));  // [2,12]
  CHECK(!has_node(r.training.graph, "Shape"));
  CHECK(!has_node(r.training.graph, "Gather"));
  CHECK(has_node(r.training.graph, "ReshapeLike"));
}
