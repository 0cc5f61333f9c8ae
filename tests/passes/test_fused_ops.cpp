// The fused ops (ops/fused.cpp, ops/fused_dnnl.cpp) against the unfused graph they
// replace, run on the reference backend; the cpu kernels must take the oneDNN path.
#include <doctest/doctest.h>

#include "ops/dnnl_util.h"
#include "wrn_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

Graph graph_of(std::vector<Node> nodes, const TensorMap& feeds, const TensorMap& inits, std::vector<std::string> outs) {
  Graph g;
  g.name = "fused";
  g.opsets[""] = 17;
  g.opsets["ai.trainrt"] = 1;
  for (const auto& [name, t] : feeds) {
    g.inputs.push_back(name);
    g.values[name] = ValueInfo{t.dtype(), shape_of(t.dims())};
  }
  for (const auto& [name, t] : inits) {
    g.initializers[name] = t;
    g.values[name] = ValueInfo{t.dtype(), shape_of(t.dims())};
  }
  for (size_t i = 0; i < nodes.size(); ++i) nodes[i].name = "n" + std::to_string(i);
  g.nodes = std::move(nodes);
  g.outputs = std::move(outs);
  validate_graph(g, registry().schemas, "fused");
  infer_shapes(g, registry().schemas, "fused");
  return g;
}

std::map<std::string, Attribute> conv_attrs(int64_t stride, int64_t group) {
  return {{"kernel_shape", Attribute::of_ints({3, 3})},
          {"pads", Attribute::of_ints({1, 1, 1, 1})},
          {"strides", Attribute::of_ints({stride, stride})},
          {"group", Attribute::of_int(group)}};
}

}  // namespace

TEST_CASE("FusedConv = act(Conv + B) + Z on reference and cpu, for every combination of bias, Relu and Z") {
  for (int64_t stride : {1, 2})
    for (int64_t group : {1, 2})
      for (int mask = 0; mask < 8; ++mask) {
        const bool bias = mask & 1, relu = mask & 2, residual = mask & 4;
        CAPTURE(stride);
        CAPTURE(group);
        CAPTURE(mask);
        const int64_t ho = stride == 1 ? 9 : 5;
        TensorMap feeds{{"x", random_tensor(DataType::Float32, {2, 4, 9, 9}, 1)},
                        {"z", random_tensor(DataType::Float32, {2, 6, ho, ho}, 2)}};
        TensorMap inits{{"w", random_tensor(DataType::Float32, {6, 4 / group, 3, 3}, 3)},
                        {"b", random_tensor(DataType::Float32, {6}, 4)}};
        if (!residual) feeds.erase("z");
        if (!bias) inits.erase("b");
        // Unfused: Conv -> [Relu] -> [Add z]
        std::vector<Node> plain{make_node("Conv", {"x", "w", bias ? "b" : ""}, {"c"}, conv_attrs(stride, group))};
        std::string last = "c";
        if (relu) {
          plain.push_back(make_node("Relu", {last}, {"r"}));
          last = "r";
        }
        if (residual) {
          plain.push_back(make_node("Add", {last, "z"}, {"s"}));
          last = "s";
        }
        plain.push_back(make_node("Identity", {last}, {"y"}));
        auto attrs = conv_attrs(stride, group);
        if (relu) attrs["activation"] = Attribute::of_string("Relu");
        Node f = make_node("FusedConv", {"x", "w", bias ? "b" : "", residual ? "z" : ""}, {"y"}, attrs, "ai.trainrt");
        while (!f.inputs.empty() && f.inputs.back().empty()) f.inputs.pop_back();
        const Graph unfused = graph_of(plain, feeds, inits, {"y"});
        const Graph fused = graph_of({f}, feeds, inits, {"y"});
        const Tensor want = run_graph(unfused, feeds, *make_backend("reference")).at("y");
        CHECK(max_abs_diff(run_graph(fused, feeds, *make_backend("reference")).at("y"), want) < 1e-6);
        const uint64_t fallbacks = dnnl_util::reference_fallbacks();
        CHECK(max_abs_diff(run_graph(fused, feeds, *make_backend("cpu")).at("y"), want) < 1e-4);
        CHECK(dnnl_util::reference_fallbacks() == fallbacks);
      }
}

TEST_CASE("BatchNormalizationRelu = Relu(BatchNormalization) in training and inference, running stats included") {
  const TensorMap feeds{{"x", random_tensor(DataType::Float32, {4, 6, 5, 5}, 1, -2, 2)}};
  TensorMap inits{{"scale", random_tensor(DataType::Float32, {6}, 2, 0.5, 1.5)},
                  {"bias", random_tensor(DataType::Float32, {6}, 3)},
                  {"mean", random_tensor(DataType::Float32, {6}, 4)},
                  {"var", random_tensor(DataType::Float32, {6}, 5, 0.5, 2)}};
  for (bool training : {false, true}) {
    CAPTURE(training);
    std::map<std::string, Attribute> attrs{{"epsilon", Attribute::of_float(1e-3f)},
                                           {"momentum", Attribute::of_float(0.8f)}};
    std::vector<std::string> outs{"bn"}, fouts{"y"};
    if (training) {
      attrs["training_mode"] = Attribute::of_int(1);
      outs = {"bn", "rm", "rv"};
      fouts = {"y", "rm", "rv"};
    }
    const std::vector<std::string> ins{"x", "scale", "bias", "mean", "var"};
    const Graph unfused = graph_of(
        {make_node("BatchNormalization", ins, outs, attrs), make_node("Relu", {"bn"}, {"y"})}, feeds, inits, fouts);
    const Graph fused =
        graph_of({make_node("BatchNormalizationRelu", ins, fouts, attrs, "ai.trainrt")}, feeds, inits, fouts);
    const TensorMap want = run_graph(unfused, feeds, *make_backend("reference"));
    const TensorMap ref = run_graph(fused, feeds, *make_backend("reference"));
    const uint64_t fallbacks = dnnl_util::reference_fallbacks();
    const TensorMap cpu = run_graph(fused, feeds, *make_backend("cpu"));
    CHECK(dnnl_util::reference_fallbacks() == fallbacks);
    for (const std::string& o : fouts) {
      CAPTURE(o);
      CHECK(max_abs_diff(ref.at(o), want.at(o)) == 0.0);
      CHECK(max_abs_diff(cpu.at(o), want.at(o)) < 1e-5);
    }
    double zeros = 0;
    for (int64_t i = 0; i < want.at("y").numel(); ++i) zeros += want.at("y").get_as_double(i) == 0.0 ? 1 : 0;
    CHECK(zeros > 0);  // the Relu did clip something
  }
}

TEST_CASE("fused ops' shape rules: Z of the wrong shape and an unknown activation are one-line errors") {
  const TensorMap feeds{{"x", Tensor(DataType::Float32, {1, 2, 5, 5})}, {"z", Tensor(DataType::Float32, {1, 3, 4, 5})}};
  const TensorMap inits{{"w", Tensor(DataType::Float32, {3, 2, 3, 3})}};
  ErrorKind kind{};
  std::string e = error_of(
      [&] {
        graph_of({make_node("FusedConv", {"x", "w", "", "z"}, {"y"}, conv_attrs(1, 1), "ai.trainrt")}, feeds, inits,
                 {"y"});
      },
      &kind);
  CHECK(kind == ErrorKind::BadInput);
  CHECK(e.find("'n0' (FusedConv)") != std::string::npos);
  CHECK(e.find("(Z) has shape [1,3,4,5]") != std::string::npos);
  auto attrs = conv_attrs(1, 1);
  attrs["activation"] = Attribute::of_string("Tanh");
  e = error_of(
      [&] {
        graph_of({make_node("FusedConv", {"x", "w"}, {"y"}, attrs, "ai.trainrt")}, feeds, inits, {"y"});
      },
      &kind);
  CHECK(kind == ErrorKind::Unsupported);
  CHECK(e.find("activation") != std::string::npos);
}
