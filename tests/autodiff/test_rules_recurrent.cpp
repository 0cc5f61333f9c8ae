// LSTM, GRU and RNN as import expands them (graph/expand_recurrent.cpp): the unrolled
// graph's gradients against finite differences (tests/autodiff/gradcheck.h) on small
// float64 nodes whose weights, biases, peepholes and initial states are parameters,
// ending in loss = sum of ReduceMean(output * r) over the node's outputs, r random feeds.
// Tolerance 1e-6 on |a - n| / max(1, |n|). Sigmoid and Tanh are smooth; clip is set wide
// enough that no gate input reaches it (a kink within h of an input would show).
#include <doctest/doctest.h>

#include "autodiff/gradcheck.h"
#include "graph/expand_recurrent.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

constexpr double kTol = 1e-6;

// Parameters in [-0.8, 0.8) keep the gates away from saturation; lens() adds sequence_lens.
struct Net : GradNet {
  Net() : GradNet(14) {
    lo = -0.8;
    hi = 0.8;
  }
  std::string lens(std::vector<int32_t> v) {
    Tensor t(DataType::Int32, {static_cast<int64_t>(v.size())});
    for (size_t i = 0; i < v.size(); ++i) t.data<int32_t>()[i] = v[i];
    return constant("lens", t);
  }
  // A recurrent node, its outputs named before its attributes as in the op's signature.
  void layer(const std::string& op, std::vector<std::string> ins, std::vector<std::string> outs, GradAttrs attrs) {
    node_outs(op, std::move(ins), std::move(attrs), std::move(outs));
  }
  // Validates, infers, expands the recurrent nodes and appends the loss over `outs`.
  Graph& finish(const std::vector<std::string>& outs) {
    infer();
    REQUIRE(expand_recurrent(g, "test") > 0);
    infer_shapes(g, registry().schemas, "test");
    for (const Node& n : g.nodes) REQUIRE(!is_recurrent_op(n.domain, n.op_type));
    std::vector<std::string> terms;
    for (size_t k = 0; k < outs.size(); ++k)
      terms.push_back(weighted_mean(outs[k], "t" + std::to_string(k), -1, 1, "r" + std::to_string(k)));
    node("Sum", terms, {}, "loss");
    g.outputs = {"loss"};
    infer_shapes(g, registry().schemas, "test");
    return g;
  }
};

void check(Net& net, const std::vector<std::string>& outs) {
  GradCheck r = check_gradients(net.finish(outs), net.feeds, 6);
  CAPTURE(r.worst);
  CHECK(r.checked > 0);
  CHECK(r.max_error < kTol);
}

Attribute text(const std::string& s) { return Attribute::of_string(s); }

}  // namespace

TEST_CASE("gradcheck: LSTM bidirectional with B, sequence_lens, initial_h, initial_c, peepholes, clip") {
  const int64_t t = 4, n = 3, i = 2, h = 3;
  Net net;
  const std::string x = net.param("x", {t, n, i});
  net.layer(
      "LSTM",
      {x, net.param("W", {2, 4 * h, i}), net.param("R", {2, 4 * h, h}), net.param("B", {2, 8 * h}), net.lens({4, 2, 1}),
       net.param("h0", {2, n, h}), net.param("c0", {2, n, h}), net.param("P", {2, 3 * h})},
      {"Y", "Y_h", "Y_c"},
      {{"hidden_size", Attribute::of_int(h)}, {"direction", text("bidirectional")}, {"clip", Attribute::of_float(50)}});
  check(net, {"Y", "Y_h", "Y_c"});
}

TEST_CASE("gradcheck: LSTM reverse, input_forget, layout 1, no bias, Y_c only") {
  Net net;
  const std::string x = net.param("x", {2, 3, 2});  // [N,T,I]
  net.layer("LSTM", {x, net.param("W", {1, 8, 2}), net.param("R", {1, 8, 2})}, {"", "", "Y_c"},
            {{"direction", text("reverse")}, {"input_forget", Attribute::of_int(1)}, {"layout", Attribute::of_int(1)}});
  check(net, {"Y_c"});
}

TEST_CASE("gradcheck: GRU with linear_before_reset 0 and 1, both directions, sequence_lens") {
  for (int64_t before_reset : {0, 1}) {
    CAPTURE(before_reset);
    Net net;
    const std::string x = net.param("x", {3, 2, 2});
    net.layer("GRU",
              {x, net.param("W", {2, 9, 2}), net.param("R", {2, 9, 3}), net.param("B", {2, 18}), net.lens({3, 1}),
               net.param("h0", {2, 2, 3})},
              {"Y", "Y_h"},
              {{"hidden_size", Attribute::of_int(3)},
               {"direction", text("bidirectional")},
               {"linear_before_reset", Attribute::of_int(before_reset)}});
    check(net, {"Y", "Y_h"});
  }
}

TEST_CASE("gradcheck: RNN layout 1 with HardSigmoid (alpha, beta) and ScaledTanh activations") {
  Net net;
  const std::string x = net.param("x", {2, 3, 2});  // [N,T,I]
  net.layer("RNN", {x, net.param("W", {2, 3, 2}), net.param("R", {2, 3, 3}), net.param("B", {2, 6})}, {"Y", "Y_h"},
            {{"hidden_size", Attribute::of_int(3)},
             {"direction", text("bidirectional")},
             {"layout", Attribute::of_int(1)},
             {"activations",
              [] {
                Attribute a;
                a.kind = Attribute::Kind::Strings;
                a.strings = {"HardSigmoid", "ScaledTanh"};
                return a;
              }()},
             {"activation_alpha", Attribute::of_floats({0.3f, 0.7f})},
             {"activation_beta", Attribute::of_floats({0.4f, 1.5f})}});
  check(net, {"Y", "Y_h"});
}

TEST_CASE("gradcheck: GRU with Affine and ThresholdedRelu, LSTM with LeakyRelu, Tanh and Relu activations") {
  auto strings = [](std::vector<std::string> v) {
    Attribute a;
    a.kind = Attribute::Kind::Strings;
    a.strings = std::move(v);
    return a;
  };
  Net gru;
  gru.layer("GRU", {gru.param("x", {3, 2, 2}), gru.param("W", {1, 6, 2}), gru.param("R", {1, 6, 2})}, {"Y", "Y_h"},
            {{"hidden_size", Attribute::of_int(2)},
             {"activations", strings({"Affine", "ThresholdedRelu"})},
             {"activation_alpha", Attribute::of_floats({0.5f, 0.05f})},
             {"activation_beta", Attribute::of_floats({0.25f})}});
  check(gru, {"Y", "Y_h"});
  Net lstm;
  lstm.layer(
      "LSTM", {lstm.param("x", {3, 2, 2}), lstm.param("W", {1, 8, 2}), lstm.param("R", {1, 8, 2})}, {"Y", "Y_h", "Y_c"},
      {{"activations", strings({"LeakyRelu", "Tanh", "Relu"})}, {"activation_alpha", Attribute::of_floats({0.1f})}});
  check(lstm, {"Y", "Y_h", "Y_c"});
}

TEST_CASE(
    "expand_recurrent: one MatMul per direction; a symbolic sequence length and an unknown activation are refused") {
  Net net;
  net.layer("LSTM", {net.param("x", {5, 2, 3}), net.param("W", {2, 8, 3}), net.param("R", {2, 8, 2})}, {"Y"},
            {{"direction", text("bidirectional")}});
  validate_graph(net.g, registry().schemas, "test");
  infer_shapes(net.g, registry().schemas, "test");
  CHECK(expand_recurrent(net.g, "m.onnx") == 1);
  size_t matmuls = 0, gemms = 0;
  for (const Node& n : net.g.nodes) {
    matmuls += n.op_type == "MatMul";
    gemms += n.op_type == "Gemm";
  }
  CHECK(matmuls == 2);
  CHECK(gemms == 2 * 4);  // steps 1..4 of each direction; step 0 starts from H = 0

  Graph g = net.g;
  g.nodes.clear();
  g.values["xs"] = ValueInfo{DataType::Float64, Shape{Dim::sym("T"), Dim::of(2), Dim::of(3)}};
  g.inputs = {"xs"};
  g.nodes.push_back(make_node("LSTM", {"xs", "W", "R"}, {"Y"}, {{"direction", text("bidirectional")}}));
  g.nodes.back().name = "lstm";
  g.outputs = {"Y"};
  infer_shapes(g, registry().schemas, "m.onnx");
  CHECK_THROWS_WITH(expand_recurrent(g, "m.onnx"),
                    doctest::Contains("m.onnx: node 0 'lstm' (LSTM): needs a static sequence length: X is [T,2,3]"));
  Attribute acts;
  acts.kind = Attribute::Kind::Strings;
  acts.strings = {"Sigmoid", "Swish", "Tanh"};
  g.nodes[0].inputs[0] = "x";
  g.nodes[0].attrs["direction"] = text("forward");
  g.nodes[0].attrs["activations"] = acts;
  CHECK_THROWS_WITH(expand_recurrent(g, "m.onnx"), doctest::Contains("activation 'Swish' is not supported"));
}
