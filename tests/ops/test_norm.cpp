// BatchNormalization: inference formula, training statistics (opset 15
// training_mode, the opset 13 five-output form, executor training), running-stat
// update, errors, symbolic batch and FLOPs.
#include <doctest/doctest.h>

#include <cmath>

#include "graph/error.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

struct BnInputs {
  Tensor x, scale, bias, mean, var;
  TensorMap feeds() const { return {{"x", x}, {"s", scale}, {"b", bias}, {"m", mean}, {"v", var}}; }
};

BnInputs bn_inputs(DataType t, std::vector<int64_t> dims, uint64_t seed) {
  const int64_t C = dims[1];
  BnInputs in;
  in.x = random_tensor(t, dims, seed, -2, 3);
  in.scale = random_tensor(t, {C}, seed + 1, 0.5, 1.5);
  in.bias = random_tensor(t, {C}, seed + 2);
  in.mean = random_tensor(t, {C}, seed + 3);
  in.var = random_tensor(t, {C}, seed + 4, 0.5, 2);
  return in;
}

// Batch statistics by the one-pass formula E[x^2] - E[x]^2 (the kernel uses two passes).
void batch_stats(const Tensor& x, std::vector<double>& mean, std::vector<double>& var) {
  const int64_t N = x.dims()[0], C = x.dims()[1], S = x.numel() / (N * C);
  mean.assign(C, 0);
  var.assign(C, 0);
  for (int64_t i = 0; i < x.numel(); ++i) {
    const int64_t c = (i / S) % C;
    mean[c] += x.get_as_double(i);
    var[c] += x.get_as_double(i) * x.get_as_double(i);
  }
  for (int64_t c = 0; c < C; ++c) {
    mean[c] /= static_cast<double>(N * S);
    var[c] = var[c] / static_cast<double>(N * S) - mean[c] * mean[c];
  }
}

// Expected Y for given per-channel statistics.
Tensor normalized(const BnInputs& in, const std::vector<double>& mean, const std::vector<double>& var, double eps) {
  const int64_t C = in.x.dims()[1], S = in.x.numel() / (in.x.dims()[0] * C);
  Tensor y(DataType::Float64, in.x.dims());
  for (int64_t i = 0; i < in.x.numel(); ++i) {
    const int64_t c = (i / S) % C;
    y.set_from_double(i, (in.x.get_as_double(i) - mean[c]) / std::sqrt(var[c] + eps) * in.scale.get_as_double(c) +
                             in.bias.get_as_double(c));
  }
  return y;
}

std::vector<double> values(const Tensor& t) {
  std::vector<double> v;
  for (int64_t i = 0; i < t.numel(); ++i) v.push_back(t.get_as_double(i));
  return v;
}

Tensor vec(const std::vector<double>& v) {
  Tensor t(DataType::Float64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.set_from_double(static_cast<int64_t>(i), v[i]);
  return t;
}

std::vector<double> mix(const std::vector<double>& running, const std::vector<double>& current, double momentum) {
  std::vector<double> out;
  for (size_t i = 0; i < running.size(); ++i) out.push_back(running[i] * momentum + current[i] * (1 - momentum));
  return out;
}

std::string error_of(const Node& n, const TensorMap& feeds, int64_t opset, ErrorKind* kind = nullptr) {
  try {
    (void)single_node_graph(n, feeds, {}, opset);
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "";
}

const std::vector<std::string> kIn{"x", "s", "b", "m", "v"};

}  // namespace

TEST_CASE("BatchNormalization: inference uses the given statistics (fp32 and fp64)") {
  for (DataType t : {DataType::Float64, DataType::Float32}) {
    BnInputs in = bn_inputs(t, {2, 3, 4, 5}, 1);
    Node n = make_node("BatchNormalization", kIn, {"y"}, {{"epsilon", Attribute::of_float(0.01f)}});
    TensorMap out = run_node(n, in.feeds(), "reference");
    Tensor want = normalized(in, values(in.mean), values(in.var), static_cast<double>(0.01f));
    CHECK(out["y"].dtype() == t);
    CHECK(max_abs_diff(out["y"], want) < (t == DataType::Float64 ? 1e-13 : 1e-5));
  }
  // rank 2 (N,C) input: no spatial dims
  BnInputs in = bn_inputs(DataType::Float64, {4, 3}, 2);
  TensorMap out = run_node(make_node("BatchNormalization", kIn, {"y"}), in.feeds(), "reference");
  CHECK(max_abs_diff(out["y"], normalized(in, values(in.mean), values(in.var), static_cast<double>(1e-5f))) < 1e-13);
}

TEST_CASE("BatchNormalization: training_mode=1 (opset 15) normalises by batch statistics and updates running stats") {
  BnInputs in = bn_inputs(DataType::Float64, {3, 2, 3, 4}, 10);
  Node n = make_node("BatchNormalization", kIn, {"y", "rm", "rv"},
                     {{"training_mode", Attribute::of_int(1)}, {"momentum", Attribute::of_float(0.75f)}});
  TensorMap out = run_node(n, in.feeds(), "reference");
  std::vector<double> mean, var;
  batch_stats(in.x, mean, var);
  CHECK(max_abs_diff(out["y"], normalized(in, mean, var, static_cast<double>(1e-5f))) < 1e-12);
  CHECK(max_abs_diff(out["rm"], vec(mix(values(in.mean), mean, 0.75))) < 1e-13);
  // the population (biased) variance, as ONNX's reference implementation
  CHECK(max_abs_diff(out["rv"], vec(mix(values(in.var), var, 0.75))) < 1e-13);

  // Y really is standardised: per-channel mean = bias, variance = scale^2 * var/(var+eps)
  const int64_t S = 12;
  for (int64_t c = 0; c < 2; ++c) {
    double m = 0, q = 0;
    for (int64_t k = 0; k < 3; ++k)
      for (int64_t s = 0; s < S; ++s) m += out["y"].get_as_double((k * 2 + c) * S + s) / (3 * S);
    for (int64_t k = 0; k < 3; ++k)
      for (int64_t s = 0; s < S; ++s) q += std::pow(out["y"].get_as_double((k * 2 + c) * S + s) - m, 2) / (3 * S);
    CHECK(m == doctest::Approx(in.bias.get_as_double(c)).epsilon(1e-12));
    const double sc = in.scale.get_as_double(c);
    CHECK(q == doctest::Approx(sc * sc * var[c] / (var[c] + 1e-5)).epsilon(1e-6));
  }
}

TEST_CASE("BatchNormalization: opset 13 five-output form trains (PyTorch 1.13 export)") {
  BnInputs in = bn_inputs(DataType::Float64, {4, 3, 2, 2}, 20);
  Node n = make_node("BatchNormalization", kIn, {"y", "mean", "var", "saved_mean", "saved_var"},
                     {{"momentum", Attribute::of_float(0.9f)}, {"epsilon", Attribute::of_float(1e-3f)}});
  Graph g = single_node_graph(n, in.feeds(), {}, 13);
  TensorMap out = run_graph(g, in.feeds(), *make_backend("reference"));
  std::vector<double> mean, var;
  batch_stats(in.x, mean, var);
  const double momentum = static_cast<double>(0.9f);
  CHECK(max_abs_diff(out["y"], normalized(in, mean, var, static_cast<double>(1e-3f))) < 1e-12);
  CHECK(max_abs_diff(out["mean"], vec(mix(values(in.mean), mean, momentum))) < 1e-13);
  CHECK(max_abs_diff(out["var"], vec(mix(values(in.var), var, momentum))) < 1e-13);
  CHECK(max_abs_diff(out["saved_mean"], vec(mean)) < 1e-13);
  CHECK(max_abs_diff(out["saved_var"], vec(var)) < 1e-13);

  // only the running mean requested: still training
  Node partial = make_node("BatchNormalization", kIn, {"y", "mean"});
  g = single_node_graph(partial, in.feeds(), {}, 13);
  out = run_graph(g, in.feeds(), *make_backend("reference"));
  CHECK(max_abs_diff(out["y"], normalized(in, mean, var, static_cast<double>(1e-5f))) < 1e-12);
}

TEST_CASE("BatchNormalization: executor training mode uses batch statistics; inference does not") {
  BnInputs in = bn_inputs(DataType::Float32, {2, 3, 3, 3}, 30);
  Node n = make_node("BatchNormalization", kIn, {"y"});
  std::vector<double> mean, var;
  batch_stats(in.x, mean, var);
  RunOptions train;
  train.training = true;
  TensorMap out = run_node(n, in.feeds(), "reference", {}, train);
  CHECK(max_abs_diff(out["y"], normalized(in, mean, var, static_cast<double>(1e-5f))) < 1e-5);
  out = run_node(n, in.feeds(), "reference");
  CHECK(max_abs_diff(out["y"], normalized(in, values(in.mean), values(in.var), static_cast<double>(1e-5f))) < 1e-5);
}

TEST_CASE("BatchNormalization: bad attributes and shapes give one-line errors naming the node") {
  BnInputs in = bn_inputs(DataType::Float32, {2, 3, 2, 2}, 40);
  struct Bad {
    std::map<std::string, Attribute> attrs;
    std::vector<std::string> outputs;
    int64_t opset;
    std::string replace;  // input to replace with a bad tensor
    Tensor bad;
    std::string want;
  };
  const std::vector<std::string> y{"y"};
  const Bad cases[] = {
      {{{"spatial", Attribute::of_int(0)}}, y, 13, "", {}, "attribute 'spatial' 0"},
      {{{"training_mode", Attribute::of_int(2)}}, y, 15, "", {}, "attribute 'training_mode' must be 0 or 1"},
      {{{"training_mode", Attribute::of_int(1)}}, y, 13, "", {}, "attribute 'training_mode' exists from opset 14"},
      {{{"epsilon", Attribute::of_float(-1.f)}}, y, 15, "", {}, "attribute 'epsilon' must be >= 0"},
      {{}, {"y", "rm", "rv"}, 15, "", {}, "only defined with attribute 'training_mode' = 1"},
      {{{"training_mode", Attribute::of_int(1)}}, {"y", "rm", "rv", "sm"}, 15, "", {}, "has 4 outputs"},
      {{}, y, 15, "b", Tensor(DataType::Float32, {4}), "input 2 'b' (B) has 4 values, expected 3"},
      {{}, y, 15, "v", Tensor(DataType::Float32, {2}), "input 4 'v' (input_var) has 2 values, expected 3"},
      {{}, y, 15, "s", Tensor(DataType::Float32, {3, 1}), "input 1 's' (scale) must have rank 1"},
      {{}, y, 15, "m", Tensor(DataType::Float64, {3}), "must share a dtype"},
      {{}, y, 15, "x", Tensor(DataType::Float32, {3}), "must have rank >= 2"},
      {{}, y, 15, "x", Tensor(DataType::Int32, {2, 3}), "must be float32 or float64, got int32"},
  };
  for (const Bad& c : cases) {
    TensorMap feeds = in.feeds();
    if (!c.replace.empty()) feeds[c.replace] = c.bad;
    ErrorKind kind = ErrorKind::Internal;
    std::string msg = error_of(make_node("BatchNormalization", kIn, c.outputs, c.attrs), feeds, c.opset, &kind);
    CAPTURE(msg);
    CHECK(msg.find("'BatchNormalization_test' (BatchNormalization)") != std::string::npos);
    CHECK(msg.find(c.want) != std::string::npos);
    CHECK(kind == ErrorKind::BadInput);
  }
}

TEST_CASE("BatchNormalization: symbolic batch, FLOPs, since_version") {
  Graph g;
  g.opsets[""] = 13;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DataType::Float32, Shape{Dim::sym("N"), Dim::of(3), Dim::of(8), Dim::of(8)}};
  for (const char* p : {"s", "b", "m", "v"}) {
    g.initializers[p] = Tensor(DataType::Float32, {3});
    g.values[p] = ValueInfo{DataType::Float32, shape_of({3})};
  }
  g.nodes.push_back(make_node("BatchNormalization", kIn, {"y", "", "", "sm"}));
  g.outputs = {"y", "sm"};
  validate_graph(g, registry().schemas, "test");
  infer_shapes(g, registry().schemas, "test");
  CHECK(shape_to_string(*g.info("y").shape) == "[N,3,8,8]");
  CHECK(shape_to_string(*g.info("sm").shape) == "[3]");
  const OpSchema* s = registry().schemas.find("", "BatchNormalization");
  CHECK(s->since_version == 9);
  Graph c = specialize(g, {{"x", Tensor(DataType::Float32, {2, 3, 8, 8})}});
  CHECK(s->flops(c, c.nodes[0]) == 6.0 * 2 * 3 * 8 * 8);  // training (an extra output is requested)
  c.nodes[0].outputs = {"y"};
  CHECK(s->flops(c, c.nodes[0]) == 2.0 * 2 * 3 * 8 * 8);
}
