// optimize_for_inference: BN folding, Dropout/Identity removal, MatMul+Add -> Gemm,
// fused Conv ops; the logits of the Wide ResNet before and after, on both backends.
#include <doctest/doctest.h>
#include <onnx/checker.h>
#include <onnx/onnx_pb.h>

#include "golden_files.h"
#include "graph/onnx_io.h"
#include "ops/onednn/dnnl_util.h"
#include "passes/passes.h"
#include "wrn_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

void check_same_logits(const Graph& before, const Graph& after, const char* what) {
  const Tensor x = random_tensor(DataType::Float32, {3, 1, 28, 28}, 11);
  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    CAPTURE(what);
    const uint64_t fallbacks = dnnl_util::reference_fallbacks();
    const Tensor a = run_graph(before, {{"input", x}}, *make_backend(backend)).at("logits");
    const Tensor b = run_graph(after, {{"input", x}}, *make_backend(backend)).at("logits");
    CHECK(rel_diff(b, a) < 1e-5);
    if (std::string(backend) == "cpu") CHECK(dnnl_util::reference_fallbacks() == fallbacks);
  }
}

}  // namespace

TEST_CASE("optimize_for_inference on the Wide ResNet: BN folded, Dropout gone, Conv+Relu(+Add) fused; same logits") {
  const Graph g = random_bn_wrn({4, 8, 12, 16}, 0.01f, 3);
  CHECK(g.nodes.size() == 59);
  const Graph fast = optimize_for_inference(g);
  CHECK(fast.inputs == g.inputs);
  CHECK(fast.outputs == g.outputs);
  validate_graph(fast, registry().schemas, "fast");
  Graph typed = fast;
  infer_shapes(typed, registry().schemas, "fast");
  // 13 Conv+BN+Relu -> FusedConv(Relu), 6 of them also take the block's residual Add;
  // the 3 skip 1x1 Convs stay plain; Dropout (6) and BN (13) are gone.
  const std::map<std::string, size_t> want{
      {"ai.trainrt::FusedConv", 13}, {"Conv", 3}, {"MaxPool", 2}, {"AveragePool", 1}, {"Flatten", 1}, {"Gemm", 1}};
  CHECK(op_counts(fast) == want);
  size_t with_residual = 0;
  for (const Node& n : fast.nodes)
    if (n.op_type == "FusedConv") with_residual += n.has_input(3) ? 1 : 0;
  CHECK(with_residual == 6);
  check_same_logits(g, fast, "fused");
}

TEST_CASE("optimize_for_inference with standard_onnx_only: plain ONNX that onnx.checker accepts; same logits") {
  const Graph g = random_bn_wrn({4, 8, 12, 16}, 0.01f, 4);
  const Graph std_onnx = optimize_for_inference(g, {.standard_onnx_only = true});
  const std::map<std::string, size_t> want{{"Conv", 16},       {"Relu", 13},   {"Add", 6}, {"MaxPool", 2},
                                           {"AveragePool", 1}, {"Flatten", 1}, {"Gemm", 1}};
  CHECK(op_counts(std_onnx) == want);
  CHECK(std_onnx.opsets.count(kTrainrtDomain) == 0);
  // Every Conv that had a BN now has a bias; the original BN tensors are gone.
  for (const Node& n : std_onnx.nodes)
    if (n.op_type == "Conv") CHECK(n.has_input(2));
  for (const auto& [name, t] : std_onnx.initializers) CHECK(name.find("running_") == std::string::npos);
  check_same_logits(g, std_onnx, "standard");

  const std::string bytes = export_onnx_bytes(std_onnx);
  onnx::ModelProto m;
  REQUIRE(m.ParseFromString(bytes));
  CHECK_NOTHROW(onnx::checker::check_model(m));
  const Graph back = import_onnx_bytes(bytes, "exported", "", registry().schemas);
  check_same_logits(g, back, "exported and re-imported");
}

TEST_CASE("MatMul + Add(bias) and Gemm + Add(bias) become Gemm; other shapes and shared values stay") {
  Graph g;
  g.name = "mm";
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DataType::Float32, Shape{Dim::sym("N"), Dim::of(4)}};
  auto init = [&](const std::string& name, std::vector<int64_t> dims, uint64_t seed) {
    g.initializers[name] = random_tensor(DataType::Float32, dims, seed);
    g.values[name] = ValueInfo{DataType::Float32, shape_of(dims)};
  };
  init("w1", {4, 3}, 1);
  init("b1", {3}, 2);
  init("w2", {3, 5}, 3);
  init("b2", {1, 5}, 4);
  init("w3", {5, 2}, 5);
  init("b3", {2}, 6);
  auto add = [&](const std::string& op, std::vector<std::string> in, const std::string& out,
                 std::map<std::string, Attribute> attrs = {}) {
    Node n = make_node(op, std::move(in), {out}, std::move(attrs));
    n.name = out;
    g.nodes.push_back(n);
  };
  add("MatMul", {"x", "w1"}, "m1");
  add("Add", {"b1", "m1"}, "a1");  // bias first: still fused
  add("Identity", {"a1"}, "i1");
  add("Gemm", {"i1", "w2"}, "m2", {{"alpha", Attribute::of_float(0.5f)}});
  add("Add", {"m2", "b2"}, "a2");
  add("MatMul", {"a2", "w3"}, "m3");  // m3 is read twice: not fused
  add("Add", {"m3", "b3"}, "a3");
  add("Relu", {"m3"}, "r3");
  add("Add", {"a3", "r3"}, "out");
  g.outputs = {"out"};
  validate_graph(g, registry().schemas, "mm");
  infer_shapes(g, registry().schemas, "mm");
  const Graph o = optimize_for_inference(g, {.standard_onnx_only = true});
  const std::map<std::string, size_t> want{{"Gemm", 2}, {"MatMul", 1}, {"Add", 2}, {"Relu", 1}};
  CHECK(op_counts(o) == want);
  validate_graph(o, registry().schemas, "mm");
  const Tensor x = random_tensor(DataType::Float32, {3, 4}, 9);
  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    const Tensor a = run_graph(g, {{"x", x}}, *make_backend(backend)).at("out");
    const Tensor b = run_graph(o, {{"x", x}}, *make_backend(backend)).at("out");
    CHECK(rel_diff(b, a) < 1e-6);
  }
}

TEST_CASE("Identity into a graph output renames its producer; a training Dropout and a used mask stay") {
  Graph g;
  g.name = "drop";
  g.opsets[""] = 17;
  g.inputs = {"x", "train"};
  g.values["x"] = ValueInfo{DataType::Float32, shape_of({2, 3})};
  g.values["train"] = ValueInfo{DataType::Bool, shape_of({})};
  Tensor ratio(DataType::Float32, {});
  ratio.data<float>()[0] = 0.5f;
  g.initializers["ratio"] = ratio;
  g.values["ratio"] = ValueInfo{DataType::Float32, shape_of({})};
  auto add = [&](const std::string& op, std::vector<std::string> in, std::vector<std::string> out) {
    Node n = make_node(op, std::move(in), out);
    n.name = out[0] + "_node";
    g.nodes.push_back(n);
  };
  add("Relu", {"x"}, {"r"});
  add("Dropout", {"r", "ratio"}, {"d"});           // inference: removed
  add("Dropout", {"d", "ratio", "train"}, {"t"});  // training_mode fed at run time: kept
  add("Dropout", {"t", "ratio"}, {"u", "mask"});   // mask is a graph output: kept
  add("Identity", {"u"}, {"y"});                   // y is a graph output: u's producer writes y
  g.outputs = {"y", "mask"};
  validate_graph(g, registry().schemas, "drop");
  infer_shapes(g, registry().schemas, "drop");
  const Graph o = optimize_for_inference(g, {.standard_onnx_only = true});
  const std::map<std::string, size_t> want{{"Relu", 1}, {"Dropout", 2}};
  CHECK(op_counts(o) == want);
  CHECK(o.outputs == g.outputs);
  validate_graph(o, registry().schemas, "drop");
  Tensor f(DataType::Bool, {});
  const Tensor x = random_tensor(DataType::Float32, {2, 3}, 2);
  TensorMap a = run_graph(g, {{"x", x}, {"train", f}}, *make_backend("reference"));
  TensorMap b = run_graph(o, {{"x", x}, {"train", f}}, *make_backend("reference"));
  CHECK(max_abs_diff(a.at("y"), b.at("y")) == 0.0);
  CHECK(max_abs_diff(a.at("mask"), b.at("mask")) == 0.0);
}

TEST_CASE("optimize_for_inference on PyTorch's own eval export: Constant folded, Identity gone, PyTorch's logits") {
  const std::string dir = std::string(TRAINRT_TEST_DATA) + "/";
  const Graph g = import_onnx_file(golden_file(dir + "wrn_small_eval.onnx"), registry().schemas);
  const Tensor x = read_tensor_file(golden_file(dir + "wrn_small_eval_golden/input_0.pb"));
  const Tensor want = read_tensor_file(golden_file(dir + "wrn_small_eval_golden/output_0.pb"));
  for (bool standard : {false, true}) {
    CAPTURE(standard);
    const Graph o = optimize_for_inference(g, {.standard_onnx_only = standard});
    const auto counts = op_counts(o);
    CHECK(counts.count("Identity") == 0);
    CHECK(counts.count("Constant") == 0);
    CHECK(counts.at(standard ? "Conv" : "ai.trainrt::FusedConv") == (standard ? 16u : 13u));
    CHECK(o.nodes.size() < g.nodes.size());
    validate_graph(o, registry().schemas, "optimized");
    for (const char* backend : {"reference", "cpu"}) {
      CAPTURE(backend);
      const Tensor got = run_graph(o, {{g.inputs[0], x}}, *make_backend(backend)).at(g.outputs[0]);
      CHECK(all_close(got, want, 1e-4, 2e-5));
    }
  }
}
