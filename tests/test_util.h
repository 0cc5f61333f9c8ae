// Helpers for tests: random tensors, one-node graphs, comparisons.
//
//   Tensor x = random_tensor(DataType::Float32, {2, 3, 8, 8}, /*seed=*/1);
//   Node n = make_node("Conv", {"x", "w"}, {"y"}, {{"pads", Attribute::of_ints({1,1,1,1})}});
//   TensorMap out = run_node(n, {{"x", x}, {"w", w}}, "reference");
//   CHECK(max_abs_diff(out["y"], expected) < 1e-5);
#pragma once

#include <doctest/doctest.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "graph/error.h"
#include "graph/infer.h"
#include "graph/tsan.h"  // TRAINRT_TSAN
#include "ops/core/register_all.h"
#include "runtime/executor.h"

namespace trainrt::test {

// Whether this build runs under ASan or TSan (graph/tsan.h's TRAINRT_TSAN; ASan from
// clang's __has_feature or g++'s macro). The tests that compare kernels with the fp64
// reference at the Wide ResNet's full layer sizes take smaller images and batches there:
// the same code at a fraction of the instrumented reference's minutes
// (docs/reliability.md, "Build time and CI's budget").
#if defined(TRAINRT_TSAN) || defined(__SANITIZE_ADDRESS__)
inline constexpr bool kSanitized = true;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
inline constexpr bool kSanitized = true;
#else
inline constexpr bool kSanitized = false;
#endif
#else
inline constexpr bool kSanitized = false;
#endif
// `size`, or at most `cap` in a sanitizer build.
inline int64_t sanitized(int64_t size, int64_t cap) { return kSanitized ? std::min(size, cap) : size; }

// A fresh folder under the system's temporary folder, removed with everything in it at
// the end of the scope.
struct TempDir {
  std::filesystem::path path;
  TempDir() {
    std::string t = (std::filesystem::temp_directory_path() / "trainrt-test-XXXXXX").string();
    REQUIRE(::mkdtemp(t.data()) != nullptr);
    path = t;
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  std::string file(const std::string& name) const { return (path / name).string(); }
  // Entries directly in the folder (a test of atomic writes: no temporary left).
  size_t count() const {
    return static_cast<size_t>(
        std::distance(std::filesystem::directory_iterator(path), std::filesystem::directory_iterator()));
  }
};

// Uniform in [lo, hi), from a std::mt19937_64 seeded with `seed`. The tensor helpers
// that loop over every element are defined in tests/test_util.cpp, built at the
// libraries' optimisation: the sanitizer builds compile the test sources at -O0
// (tools/ci_reliability.sh), where these loops would dominate some tests.
Tensor random_tensor(DataType t, std::vector<int64_t> dims, uint64_t seed, double lo = -1.0, double hi = 1.0);

// A tensor of the given values (as many as dims need), converted to dtype t.
inline Tensor make(DataType t, std::vector<int64_t> dims, std::vector<double> values) {
  Tensor x(t, std::move(dims));
  REQUIRE(static_cast<int64_t>(values.size()) == x.numel());
  for (int64_t i = 0; i < x.numel(); ++i) x.set_from_double(i, values[static_cast<size_t>(i)]);
  return x;
}

// The message of the trainrt::Error thrown by f ("" if none); its kind in *kind.
inline std::string error_of(const std::function<void()>& f, ErrorKind* kind = nullptr) {
  try {
    f();
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "";
}

inline Node make_node(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                      std::map<std::string, Attribute> attrs = {}, const std::string& domain = "") {
  Node n;
  n.name = op + "_test";
  n.op_type = op;
  n.domain = domain;
  n.inputs = std::move(inputs);
  n.outputs = std::move(outputs);
  n.attrs = std::move(attrs);
  return n;
}

// A graph of one node whose inputs are all graph inputs (fed at run time), except
// those listed in `initializers`. Shapes are inferred (throws like the importer).
inline Graph single_node_graph(const Node& n, const TensorMap& feeds, const TensorMap& initializers = {},
                               int64_t opset = 17) {
  Graph g;
  g.name = "test";
  g.opsets[""] = opset;
  for (const std::string& in : n.inputs) {
    if (in.empty()) continue;
    if (auto it = initializers.find(in); it != initializers.end()) {
      g.initializers[in] = it->second;
      g.values[in] = ValueInfo{it->second.dtype(), shape_of(it->second.dims())};
    } else if (auto f = feeds.find(in); f != feeds.end()) {
      if (std::find(g.inputs.begin(), g.inputs.end(), in) == g.inputs.end()) g.inputs.push_back(in);
      g.values[in] = ValueInfo{f->second.dtype(), shape_of(f->second.dims())};
    }
  }
  g.nodes.push_back(n);
  for (const std::string& out : n.outputs)
    if (!out.empty()) g.outputs.push_back(out);
  validate_graph(g, registry().schemas, "test");
  infer_shapes(g, registry().schemas, "test");
  return g;
}

inline TensorMap run_node(const Node& n, const TensorMap& feeds, const std::string& backend,
                          const TensorMap& initializers = {}, RunOptions opts = {}) {
  Graph g = single_node_graph(n, feeds, initializers);
  return run_graph(g, feeds, *make_backend(backend), opts);
}

// max |a - b| over the elements; infinity when the shapes differ or a difference is NaN.
double max_abs_diff(const Tensor& a, const Tensor& b);

// True when |a-b| <= atol + rtol*|b| elementwise (numpy.allclose), NaN == NaN.
bool all_close(const Tensor& a, const Tensor& b, double rtol, double atol);

// A CNN without batch normalization, as small exported models are: input [N,1,12,12] ->
// Conv(width, 3x3, bias) + Relu -> Conv(6, 3x3, bias) + Relu -> MaxPool 2x2 ->
// GlobalAveragePool -> Flatten -> Linear(6, 10). The training fusions make both
// Conv + Relu FusedConv(activation=Relu) and fold the first Relu's gradient into the second
// convolution's data gradient (ConvGrad(dx_relu=1)).
inline Graph relu_cnn(int64_t width) {
  Graph g;
  g.name = "relu_cnn";
  g.opsets[""] = 17;
  g.inputs = {"input"};
  g.values["input"] = ValueInfo{DataType::Float32, Shape{Dim::sym("N"), Dim::of(1), Dim::of(12), Dim::of(12)}};
  auto init = [&](const std::string& name, std::vector<int64_t> dims, uint64_t seed, double scale) {
    g.initializers[name] = random_tensor(DataType::Float32, dims, seed, -scale, scale);
    g.values[name] = ValueInfo{DataType::Float32, shape_of(dims)};
  };
  init("w1", {width, 1, 3, 3}, 1, 0.5);
  init("b1", {width}, 2, 0.1);
  init("w2", {6, width, 3, 3}, 3, 0.2);
  init("b2", {6}, 4, 0.1);
  init("fc", {10, 6}, 5, 0.5);
  init("fcb", {10}, 6, 0.1);
  auto add = [&](const std::string& op, std::vector<std::string> in, const std::string& out,
                 std::map<std::string, Attribute> attrs = {}) {
    Node n = make_node(op, std::move(in), {out}, std::move(attrs));
    n.name = out;
    g.nodes.push_back(n);
  };
  const std::map<std::string, Attribute> conv{{"pads", Attribute::of_ints({1, 1, 1, 1})}};
  add("Conv", {"input", "w1", "b1"}, "conv1", conv);
  add("Relu", {"conv1"}, "relu1");
  add("Conv", {"relu1", "w2", "b2"}, "conv2", conv);
  add("Relu", {"conv2"}, "relu2");
  add("MaxPool", {"relu2"}, "pool",
      {{"kernel_shape", Attribute::of_ints({2, 2})}, {"strides", Attribute::of_ints({2, 2})}});
  add("GlobalAveragePool", {"pool"}, "gap");
  add("Flatten", {"gap"}, "flat");
  add("Gemm", {"flat", "fc", "fcb"}, "logits", {{"transB", Attribute::of_int(1)}});
  g.outputs = {"logits"};
  validate_graph(g, registry().schemas, "relu_cnn");
  infer_shapes(g, registry().schemas, "relu_cnn");
  return g;
}

}  // namespace trainrt::test
