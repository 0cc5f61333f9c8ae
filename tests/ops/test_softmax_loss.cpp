// Softmax, LogSoftmax, SoftmaxCrossEntropyLoss, ReduceMean: values from formulas
// written out here (and a few by hand), fp64, weights and ignore_index, errors.
#include <doctest/doctest.h>

#include <array>
#include <cmath>

#include "graph/error.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

std::string error_of(const Node& n, const TensorMap& feeds, const TensorMap& inits = {}) {
  try {
    run_node(n, feeds, "reference", inits);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

bool has(const std::string& s, const std::string& part) {
  if (s.find(part) == std::string::npos) MESSAGE("message was: " << s);
  return s.find(part) != std::string::npos;
}

// softmax along `axis` of a [A,B,C] tensor, straight from the definition (inputs are small).
Tensor naive_softmax3(const Tensor& x, int axis, bool log) {
  const auto& d = x.dims();
  Tensor y(x.dtype(), d);
  auto at = [&](int64_t i, int64_t j, int64_t k) { return (i * d[1] + j) * d[2] + k; };
  for (int64_t i = 0; i < d[0]; ++i)
    for (int64_t j = 0; j < d[1]; ++j)
      for (int64_t k = 0; k < d[2]; ++k) {
        double sum = 0;
        for (int64_t c = 0; c < d[axis]; ++c) {
          int64_t idx = axis == 0 ? at(c, j, k) : axis == 1 ? at(i, c, k) : at(i, j, c);
          sum += std::exp(x.get_as_double(idx));
        }
        double p = std::exp(x.get_as_double(at(i, j, k))) / sum;
        y.set_from_double(at(i, j, k), log ? std::log(p) : p);
      }
  return y;
}

}  // namespace

TEST_CASE("Softmax and LogSoftmax: every axis, default -1, fp32 and fp64") {
  for (DataType t : {DataType::Float32, DataType::Float64})
    for (const char* op : {"Softmax", "LogSoftmax"})
      for (int64_t axis : {0, 1, 2, -1, -2, -3}) {
        Tensor x = random_tensor(t, {2, 3, 4}, 11, -3, 3);
        TensorMap out =
            run_node(make_node(op, {"x"}, {"y"}, {{"axis", Attribute::of_int(axis)}}), {{"x", x}}, "reference");
        Tensor want = naive_softmax3(x, static_cast<int>(axis < 0 ? axis + 3 : axis), std::string(op) == "LogSoftmax");
        CHECK(out["y"].dtype() == t);
        CHECK(max_abs_diff(out["y"], want) < (t == DataType::Float64 ? 1e-12 : 1e-6));
      }
  Tensor x = random_tensor(DataType::Float64, {2, 3, 4}, 12);
  TensorMap out = run_node(make_node("Softmax", {"x"}, {"y"}), {{"x", x}}, "reference");
  CHECK(max_abs_diff(out["y"], naive_softmax3(x, 2, false)) < 1e-12);
}

TEST_CASE("Softmax: large inputs do not overflow") {
  // softmax([1000, 1001]) = [1/(1+e), e/(1+e)]
  const double e = std::exp(1.0);
  TensorMap out =
      run_node(make_node("Softmax", {"x"}, {"y"}), {{"x", make(DataType::Float32, {1, 2}, {1000, 1001})}}, "reference");
  CHECK(max_abs_diff(out["y"], make(DataType::Float32, {1, 2}, {1 / (1 + e), e / (1 + e)})) < 1e-7);
  out = run_node(make_node("LogSoftmax", {"x"}, {"y"}), {{"x", make(DataType::Float64, {1, 2}, {1000, 1001})}},
                 "reference");
  CHECK(max_abs_diff(out["y"], make(DataType::Float64, {1, 2}, {-std::log(1 + e), 1 - std::log(1 + e)})) < 1e-12);
}

TEST_CASE("Softmax: errors") {
  Tensor x = random_tensor(DataType::Float32, {2, 3}, 1);
  CHECK(has(error_of(make_node("Softmax", {"x"}, {"y"}, {{"axis", Attribute::of_int(2)}}), {{"x", x}}),
            "node 0 'Softmax_test' (Softmax): attribute 'axis' = 2 is out of range [-2, 1]"));
  CHECK(has(error_of(make_node("LogSoftmax", {"x"}, {"y"}), {{"x", x.cast(DataType::Int64)}}),
            "'LogSoftmax_test' (LogSoftmax): input 0 'x' must be float32 or float64, got int64"));
  // opset 12 Softmax meant "flatten to 2-D": rejected, not silently reinterpreted
  Graph g;
  g.opsets[""] = 12;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DataType::Float32, shape_of({2, 3})};
  g.nodes.push_back(make_node("Softmax", {"x"}, {"y"}));
  g.outputs = {"y"};
  std::string e;
  try {
    validate_graph(g, registry().schemas, "m.onnx");
  } catch (const Error& err) {
    e = err.what();
  }
  CHECK(
      has(e, "'Softmax_test' (Softmax): model imports ai.onnx opset 12 but trainrt implements Softmax as of opset 13"));
}

TEST_CASE("SoftmaxCrossEntropyLoss: by hand, weights and ignore_index") {
  // log p: sample 0 [ln3, 0] -> p = [3/4, 1/4]; sample 1 [0, 0] -> [1/2, 1/2]; sample 2 [0, ln3] -> [1/4, 3/4]
  const double l3 = std::log(3.0);
  for (DataType t : {DataType::Float32, DataType::Float64})
    for (DataType lt : {DataType::Int64, DataType::Int32}) {
      Tensor x = make(t, {3, 2}, {l3, 0, 0, 0, 0, l3});
      Tensor y = make(lt, {3}, {0, 1, 0});
      Tensor w = make(t, {2}, {2, 5});
      const double tol = t == DataType::Float64 ? 1e-12 : 1e-6;
      auto run = [&](std::string reduction, bool weights, bool ii) {
        std::map<std::string, Attribute> attrs{{"reduction", Attribute::of_string(reduction)}};
        if (ii) attrs["ignore_index"] = Attribute::of_int(1);
        Node n = make_node("SoftmaxCrossEntropyLoss",
                           weights ? std::vector<std::string>{"x", "y", "w"} : std::vector<std::string>{"x", "y"},
                           {"loss", "log_prob"}, attrs);
        TensorMap feeds{{"x", x}, {"y", y}};
        if (weights) feeds["w"] = w;
        return run_node(n, feeds, "reference");
      };
      // per-sample losses -log p[label]: ln(4/3), ln 2, ln 4
      const double a = std::log(4.0 / 3), b = std::log(2.0), c = std::log(4.0);
      TensorMap out = run("none", false, false);
      CHECK(max_abs_diff(out["loss"], make(t, {3}, {a, b, c})) < tol);
      CHECK(max_abs_diff(out["log_prob"], make(t, {3, 2}, {-a, -c, -b, -b, -c, -a})) < tol);
      CHECK(std::fabs(run("sum", false, false)["loss"].get_as_double(0) - (a + b + c)) < tol);
      CHECK(std::fabs(run("mean", false, false)["loss"].get_as_double(0) - (a + b + c) / 3) < tol);
      // weights: w[label] = 2, 5, 2; mean divides by their sum
      CHECK(max_abs_diff(run("none", true, false)["loss"], make(t, {3}, {2 * a, 5 * b, 2 * c})) < tol);
      CHECK(std::fabs(run("sum", true, false)["loss"].get_as_double(0) - (2 * a + 5 * b + 2 * c)) < tol);
      CHECK(std::fabs(run("mean", true, false)["loss"].get_as_double(0) - (2 * a + 5 * b + 2 * c) / 9) < tol);
      // ignore_index 1 drops sample 1: mean divides by the weights of samples 0 and 2 only
      CHECK(max_abs_diff(run("none", true, true)["loss"], make(t, {3}, {2 * a, 0, 2 * c})) < tol);
      CHECK(std::fabs(run("mean", true, true)["loss"].get_as_double(0) - (2 * a + 2 * c) / 4) < tol);
      CHECK(std::fabs(run("sum", true, true)["loss"].get_as_double(0) - (2 * a + 2 * c)) < tol);
      CHECK(std::fabs(run("mean", false, true)["loss"].get_as_double(0) - (a + c) / 2) < tol);
      CHECK(run("mean", false, true)["loss"].dims().empty());
    }
}

TEST_CASE("SoftmaxCrossEntropyLoss: [N,C,d1,d2] against the definition") {
  const int64_t N = 2, C = 3, D1 = 2, D2 = 2;
  Tensor x = random_tensor(DataType::Float64, {N, C, D1, D2}, 21, -2, 2);
  Tensor y(DataType::Int64, {N, D1, D2});
  const std::vector<int64_t> labels = {0, 2, 1, -1, 2, 2, -1, 0};
  for (size_t i = 0; i < labels.size(); ++i) y.data<int64_t>()[i] = labels[i];
  Tensor w = make(DataType::Float64, {C}, {0.5, 2, 1.5});
  Node n = make_node("SoftmaxCrossEntropyLoss", {"x", "y", "w"}, {"loss", "lp"},
                     {{"reduction", Attribute::of_string("none")}, {"ignore_index", Attribute::of_int(-1)}});
  TensorMap out = run_node(n, {{"x", x}, {"y", y}, {"w", w}}, "reference");
  REQUIRE(out["loss"].dims() == std::vector<int64_t>{N, D1, D2});
  REQUIRE(out["lp"].dims() == x.dims());
  double num = 0, den = 0;
  for (int64_t i = 0; i < N; ++i)
    for (int64_t d = 0; d < D1 * D2; ++d) {
      double sum = 0;
      for (int64_t c = 0; c < C; ++c) sum += std::exp(x.get_as_double((i * C + c) * 4 + d));
      for (int64_t c = 0; c < C; ++c)
        CHECK(std::fabs(out["lp"].get_as_double((i * C + c) * 4 + d) -
                        std::log(std::exp(x.get_as_double((i * C + c) * 4 + d)) / sum)) < 1e-12);
      int64_t l = labels[static_cast<size_t>(i * 4 + d)];
      double want = l < 0 ? 0 : -w.get_as_double(l) * std::log(std::exp(x.get_as_double((i * C + l) * 4 + d)) / sum);
      CHECK(std::fabs(out["loss"].get_as_double(i * 4 + d) - want) < 1e-12);
      num += want;
      den += l < 0 ? 0 : w.get_as_double(l);
    }
  n.attrs["reduction"] = Attribute::of_string("mean");
  n.outputs = {"loss"};
  out = run_node(n, {{"x", x}, {"y", y}, {"w", w}}, "reference");
  CHECK(std::fabs(out["loss"].get_as_double(0) - num / den) < 1e-12);
}

TEST_CASE("SoftmaxCrossEntropyLoss: symbolic batch and errors") {
  Graph g;
  g.opsets[""] = 17;
  g.inputs = {"x", "y"};
  g.values["x"] = ValueInfo{DataType::Float32, Shape{Dim::sym("N"), Dim::of(10)}};
  g.values["y"] = ValueInfo{DataType::Int64, Shape{Dim::sym("N")}};
  g.nodes.push_back(
      make_node("SoftmaxCrossEntropyLoss", {"x", "y"}, {"l", "lp"}, {{"reduction", Attribute::of_string("none")}}));
  g.outputs = {"l", "lp"};
  infer_shapes(g, registry().schemas, "test");
  CHECK(shape_to_string(*g.info("l").shape) == "[N]");
  CHECK(shape_to_string(*g.info("lp").shape) == "[N,10]");

  Tensor x = random_tensor(DataType::Float32, {3, 4}, 1);
  Tensor y = make(DataType::Int64, {3}, {0, 1, 2});
  Node n = make_node("SoftmaxCrossEntropyLoss", {"x", "y"}, {"l"});
  const std::string at = "'SoftmaxCrossEntropyLoss_test' (SoftmaxCrossEntropyLoss): ";
  CHECK(has(error_of(n, {{"x", x}, {"y", make(DataType::Float32, {3}, {0, 1, 2})}}),
            at + "input 1 'y' (labels) must be int64 or int32, got float32"));
  CHECK(has(error_of(n, {{"x", x}, {"y", make(DataType::Int64, {2}, {0, 1})}}),
            at + "input 1 'y' (labels) [2] must have the shape of the scores [3,4] without C"));
  CHECK(has(error_of(n, {{"x", x}, {"y", make(DataType::Int64, {3, 1}, {0, 1, 2})}}),
            at + "input 1 'y' (labels) [3,1] must have the shape of"));
  CHECK(has(error_of(n, {{"x", make(DataType::Float32, {3}, {0, 1, 2})}, {"y", y}}),
            at + "input 0 'x' (scores) must be [N,C] or [N,C,d1,...], got [3]"));
  CHECK(has(error_of(make_node("SoftmaxCrossEntropyLoss", {"x", "y", "w"}, {"l"}),
                     {{"x", x}, {"y", y}, {"w", Tensor(DataType::Float32, {3})}}),
            at + "input 2 'w' (weights) must be [C] = [4], got [3]"));
  CHECK(has(
      error_of(make_node("SoftmaxCrossEntropyLoss", {"x", "y"}, {"l"}, {{"reduction", Attribute::of_string("max")}}),
               {{"x", x}, {"y", y}}),
      at + "attribute 'reduction' = 'max' must be none, mean or sum"));
  // a label out of range is found by the kernel, still naming the node
  CHECK(has(error_of(n, {{"x", x}, {"y", make(DataType::Int64, {3}, {0, 4, 2})}}),
            at + "label 4 at position 1 is outside [0, 4)"));
  CHECK(
      has(error_of(make_node("SoftmaxCrossEntropyLoss", {"x", "y"}, {"l"}, {{"ignore_index", Attribute::of_int(-100)}}),
                   {{"x", x}, {"y", make(DataType::Int64, {3}, {0, -1, 2})}}),
          at + "label -1 at position 1 is outside [0, 4) and is not ignore_index -100"));
}

// mean over the axes marked in `red` of a [2,3,4] tensor, keepdims layout.
static Tensor naive_mean3(const Tensor& x, std::array<bool, 3> red, std::vector<int64_t> ydims) {
  Tensor y(x.dtype(), ydims);
  std::vector<double> sum(static_cast<size_t>(y.numel()), 0);
  std::vector<int> cnt(static_cast<size_t>(y.numel()), 0);
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) {
        int64_t oi = red[0] ? 0 : i, oj = red[1] ? 0 : j, ok = red[2] ? 0 : k;
        int64_t o = (oi * (red[1] ? 1 : 3) + oj) * (red[2] ? 1 : 4) + ok;
        sum[static_cast<size_t>(o)] += x.get_as_double((i * 3 + j) * 4 + k);
        cnt[static_cast<size_t>(o)]++;
      }
  for (int64_t o = 0; o < y.numel(); ++o)
    y.set_from_double(o, sum[static_cast<size_t>(o)] / cnt[static_cast<size_t>(o)]);
  return y;
}

TEST_CASE("ReduceMean: opset 13 axes attribute, keepdims, negative axes") {
  Tensor x6 = make(DataType::Float32, {2, 3}, {0, 1, 2, 3, 4, 5});
  TensorMap out =
      run_node(make_node("ReduceMean", {"x"}, {"y"}, {{"axes", Attribute::of_ints({1})}}), {{"x", x6}}, "reference");
  CHECK(max_abs_diff(out["y"], make(DataType::Float32, {2, 1}, {1, 4})) == 0);
  out = run_node(make_node("ReduceMean", {"x"}, {"y"}), {{"x", x6}}, "reference");
  CHECK(max_abs_diff(out["y"], make(DataType::Float32, {1, 1}, {2.5})) == 0);

  struct Case {
    std::vector<int64_t> axes;
    std::array<bool, 3> red;
    std::vector<int64_t> keep, drop;
  };
  std::vector<Case> cases = {{{0}, {true, false, false}, {1, 3, 4}, {3, 4}},
                             {{-1}, {false, false, true}, {2, 3, 1}, {2, 3}},
                             {{0, 2}, {true, false, true}, {1, 3, 1}, {3}},
                             {{-2, 0}, {true, true, false}, {1, 1, 4}, {4}},
                             {{}, {true, true, true}, {1, 1, 1}, {}}};
  for (DataType t : {DataType::Float32, DataType::Float64})
    for (const Case& c : cases)
      for (int keepdims = 0; keepdims < 2; ++keepdims) {
        Tensor x = random_tensor(t, {2, 3, 4}, 31);
        std::map<std::string, Attribute> attrs{{"keepdims", Attribute::of_int(keepdims)}};
        if (!c.axes.empty()) attrs["axes"] = Attribute::of_ints(c.axes);
        out = run_node(make_node("ReduceMean", {"x"}, {"y"}, attrs), {{"x", x}}, "reference");
        CAPTURE(dims_to_string(c.axes));
        CHECK(out["y"].dims() == (keepdims ? c.keep : c.drop));
        CHECK(max_abs_diff(out["y"].reshaped(c.keep), naive_mean3(x, c.red, c.keep)) <
              (t == DataType::Float64 ? 1e-12 : 1e-6));
      }
}

TEST_CASE("ReduceMean: opset 18 axes input and noop_with_empty_axes") {
  Tensor x = random_tensor(DataType::Float64, {2, 3, 4}, 32);
  Tensor axes(DataType::Int64, {1});
  axes.data<int64_t>()[0] = 1;
  Node n = make_node("ReduceMean", {"x", "a"}, {"y"}, {{"keepdims", Attribute::of_int(0)}});
  Graph g = single_node_graph(n, {{"x", x}}, {{"a", axes}}, 18);
  TensorMap out = run_graph(g, {{"x", x}}, *make_backend("reference"));
  CHECK(max_abs_diff(out["y"], naive_mean3(x, {false, true, false}, {2, 1, 4}).reshaped({2, 4})) < 1e-12);
  // no axes: all, or nothing with noop_with_empty_axes
  g = single_node_graph(make_node("ReduceMean", {"x"}, {"y"}), {{"x", x}}, {}, 18);
  out = run_graph(g, {{"x", x}}, *make_backend("reference"));
  CHECK(max_abs_diff(out["y"], naive_mean3(x, {true, true, true}, {1, 1, 1})) < 1e-12);
  g = single_node_graph(make_node("ReduceMean", {"x"}, {"y"}, {{"noop_with_empty_axes", Attribute::of_int(1)}}),
                        {{"x", x}}, {}, 18);
  out = run_graph(g, {{"x", x}}, *make_backend("reference"));
  CHECK(max_abs_diff(out["y"], x) == 0);
}

TEST_CASE("ReduceMean: symbolic batch and errors") {
  Graph g;
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DataType::Float32, Shape{Dim::sym("N"), Dim::of(3), Dim::of(4), Dim::of(4)}};
  g.nodes.push_back(make_node("ReduceMean", {"x"}, {"y"}, {{"axes", Attribute::of_ints({2, 3})}}));
  g.outputs = {"y"};
  infer_shapes(g, registry().schemas, "test");
  CHECK(shape_to_string(*g.info("y").shape) == "[N,3,1,1]");

  Tensor x = random_tensor(DataType::Float32, {2, 3}, 1);
  const std::string at = "'ReduceMean_test' (ReduceMean): ";
  CHECK(has(error_of(make_node("ReduceMean", {"x"}, {"y"}, {{"axes", Attribute::of_ints({2})}}), {{"x", x}}),
            at + "axes entry = 2 is out of range [-2, 1]"));
  CHECK(has(error_of(make_node("ReduceMean", {"x"}, {"y"}, {{"axes", Attribute::of_ints({1, -1})}}), {{"x", x}}),
            at + "axes [1,-1] repeat axis 1"));
  CHECK(has(error_of(make_node("ReduceMean", {"x"}, {"y"}, {{"keepdims", Attribute::of_int(3)}}), {{"x", x}}),
            at + "attribute 'keepdims' must be 0 or 1, got 3"));
  Tensor axes(DataType::Int64, {1});
  CHECK(has(error_of(make_node("ReduceMean", {"x", "a"}, {"y"}), {{"x", x}}, {{"a", axes}}),
            at + "axes as input 1 needs ai.onnx opset 18"));
  std::string e;
  try {
    single_node_graph(make_node("ReduceMean", {"x"}, {"y"}, {{"axes", Attribute::of_ints({1})}}), {{"x", x}}, {}, 18);
  } catch (const Error& err) {
    e = err.what();
  }
  CHECK(has(e, at + "attribute 'axes' is an input (input 1) since opset 18"));
  // Axes fed at run time (a shape input, graph/infer.h): the output's shape is unknown
  // until the plan is specialised on the fed value, then it is reduced as given.
  Tensor axis1(DataType::Int64, {1});
  axis1.data<int64_t>()[0] = 1;
  const TensorMap feeds{{"x", x}, {"a", axis1}};
  Graph fed = single_node_graph(make_node("ReduceMean", {"x", "a"}, {"y"}), feeds, {}, 18);
  CHECK_FALSE(fed.info("y").shape.has_value());
  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    const Tensor y = run_graph(fed, feeds, *make_backend(backend)).at("y");
    REQUIRE(y.dims() == std::vector<int64_t>{2, 1});
    for (int64_t r = 0; r < 2; ++r) {
      const double want = (x.data<float>()[3 * r] + x.data<float>()[3 * r + 1] + x.data<float>()[3 * r + 2]) / 3.0;
      CHECK(y.data<float>()[r] == doctest::Approx(want).epsilon(1e-6));
    }
  }
}
