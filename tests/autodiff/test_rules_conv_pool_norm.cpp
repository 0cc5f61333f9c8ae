// Gradient rules of Conv, the pools and BatchNormalization (autodiff/rules_conv.cpp,
// rules_pool.cpp, rules_norm.cpp) and their backward ops (ops/conv.cpp, pool.cpp, norm.cpp).
//
// Every rule is checked by finite differences (tests/autodiff/gradcheck.h) on a small
// float64 graph whose inputs are parameters, ending in loss = ReduceMean(y * r) with
// r a random feed so that dY is not uniform. Tolerance 1e-6 on |a - n| / max(1, |n|):
// a correct rule sits near 1e-9 (see test_rules_elementwise.cpp for the error budget).
// MaxPool and Relu kinks are avoided by continuous random inputs (a tie within h is
// improbable). BatchNormalization's Y does not change when its input shifts by a
// constant per channel, so dX sums to zero per channel; the check still compares
// every sampled element.
#include <doctest/doctest.h>

#include <functional>

#include "autodiff/gradcheck.h"
#include "autodiff/gradient.h"
#include "graph/error.h"
#include "runtime/training_session.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

constexpr double kTol = 1e-6;

using Attrs = GradAttrs;

using Net = GradNet;

void check(Net& net, const std::string& y, int samples = 12) { check_net(net, y, samples, kTol); }

Attribute ints(std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); }

bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

const Node* find_node(const Graph& g, const std::string& op) {
  for (const Node& n : g.nodes)
    if (n.op_type == op) return &n;
  return nullptr;
}

// Runs one backward op (domain ai.trainrt) on the reference backend.
TensorMap run_backward(const std::string& op, const TensorMap& feeds, std::vector<std::string> ins,
                       std::vector<std::string> outs, Attrs attrs = {}) {
  return run_node(make_node(op, std::move(ins), std::move(outs), std::move(attrs), kTrainrtDomain), feeds, "reference");
}

Tensor cast_to(const Tensor& x, DataType t) {
  Tensor y(t, x.dims());
  for (int64_t i = 0; i < x.numel(); ++i) y.set_from_double(i, x.get_as_double(i));
  return y;
}

}  // namespace

// ---- Conv -------------------------------------------------------------------------

TEST_CASE("gradcheck: Conv with strides, pads, dilations, groups, auto_pad, with and without bias") {
  struct Case {
    std::string what;
    std::vector<int64_t> x, w;
    bool bias;
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      {"3x3 stride 1 pad 1, bias", {2, 3, 6, 6}, {4, 3, 3, 3}, true, {{"pads", ints({1, 1, 1, 1})}}},
      {"3x3 stride 2 asymmetric pads, no bias",
       {2, 3, 7, 6},
       {4, 3, 3, 3},
       false,
       {{"strides", ints({2, 2})}, {"pads", ints({1, 0, 2, 1})}}},
      {"dilation 2, pad 2, bias",
       {1, 2, 7, 7},
       {3, 2, 3, 3},
       true,
       {{"dilations", ints({2, 2})}, {"pads", ints({2, 2, 2, 2})}}},
      {"group 2, stride 2, bias",
       {2, 4, 5, 5},
       {6, 2, 3, 3},
       true,
       {{"group", Attribute::of_int(2)}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}},
      {"depthwise (group = C), no bias", {2, 3, 5, 5}, {3, 1, 3, 3}, false, {{"group", Attribute::of_int(3)}}},
      {"SAME_UPPER stride 2, 2x3 kernel",
       {1, 2, 7, 6},
       {3, 2, 2, 3},
       true,
       {{"auto_pad", Attribute::of_string("SAME_UPPER")}, {"strides", ints({2, 2})}}},
      {"SAME_LOWER, strides 1x2, dilations 2x1",
       {1, 2, 6, 5},
       {2, 2, 2, 3},
       false,
       {{"auto_pad", Attribute::of_string("SAME_LOWER")}, {"strides", ints({1, 2})}, {"dilations", ints({2, 1})}}},
      {"1x1, bias", {2, 3, 4, 4}, {5, 3, 1, 1}, true, {}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    Net net;
    std::vector<std::string> ins{net.param("x", c.x), net.param("w", c.w)};
    if (c.bias) ins.push_back(net.param("b", {c.w[0]}));
    check(net, net.node("Conv", ins, c.attrs));
  }
}

TEST_CASE("Conv rule: one ConvGrad with the forward's attributes; unneeded outputs are not computed") {
  Net net;
  const std::string x = net.feed("x", random_tensor(DataType::Float64, {2, 3, 5, 5}, 3));
  Attrs attrs{{"pads", ints({1, 1, 1, 1})}, {"strides", ints({2, 2})}, {"group", Attribute::of_int(1)}};
  Graph& g = net.finish(net.node("Conv", {x, net.param("w", {4, 3, 3, 3}), net.param("b", {4})}, attrs));
  TrainingOptions o;
  o.optimizer = "none";
  TrainingGraph t = build_training_graph(g, o);
  const Node* cg = find_node(t.graph, "ConvGrad");
  REQUIRE(cg);
  CHECK(cg->domain == kTrainrtDomain);
  CHECK(cg->inputs == std::vector<std::string>{cg->inputs[0], "x", "w"});
  CHECK(cg->outputs.size() == 3);
  CHECK(cg->outputs[0].empty());  // x is data: no dX
  CHECK(t.gradients.at("w") == cg->outputs[1]);
  CHECK(t.gradients.at("b") == cg->outputs[2]);
  CHECK(cg->attr_ints("pads") == std::vector<int64_t>{1, 1, 1, 1});
  CHECK(cg->attr_ints("strides") == std::vector<int64_t>{2, 2});
}

// ---- pooling ----------------------------------------------------------------------

TEST_CASE("gradcheck: MaxPool 1-D, 2-D, 3-D with pads, strides, dilations, ceil_mode, SAME") {
  struct Case {
    std::string what;
    std::vector<int64_t> x;
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      {"2x2 stride 2", {2, 3, 6, 6}, {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}}},
      {"3x3 stride 2 pad 1 (overlapping)",
       {2, 2, 7, 7},
       {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}},
      {"3x3 stride 1 (heavy overlap)", {1, 2, 5, 5}, {{"kernel_shape", ints({3, 3})}}},
      {"dilation 2", {1, 2, 7, 7}, {{"kernel_shape", ints({2, 2})}, {"dilations", ints({2, 2})}}},
      {"ceil_mode",
       {1, 2, 6, 6},
       {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"ceil_mode", Attribute::of_int(1)}}},
      {"SAME_UPPER",
       {1, 2, 5, 6},
       {{"kernel_shape", ints({2, 3})}, {"strides", ints({2, 2})}, {"auto_pad", Attribute::of_string("SAME_UPPER")}}},
      {"1-D", {2, 3, 9}, {{"kernel_shape", ints({3})}, {"strides", ints({2})}, {"pads", ints({1, 1})}}},
      {"3-D", {1, 2, 4, 4, 4}, {{"kernel_shape", ints({2, 2, 2})}, {"strides", ints({2, 1, 2})}}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    Net net;
    check(net, net.node("MaxPool", {net.param("x", c.x)}, c.attrs));
  }
}

TEST_CASE("gradcheck: MaxPool with its Indices output requested (Indices carries no gradient)") {
  Net net;
  const std::string y = net.node_outs("MaxPool", {net.param("x", {2, 2, 4, 4})},
                                      {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}}, {"y", "indices"})[0];
  check(net, y);
}

TEST_CASE("gradcheck: AveragePool with count_include_pad 0 and 1, ceil_mode, SAME, dilations, 1-D and 3-D") {
  struct Case {
    std::string what;
    std::vector<int64_t> x;
    Attrs attrs;
  };
  std::vector<Case> cases;
  for (int64_t cip : {0, 1}) {
    Attribute c = Attribute::of_int(cip);
    cases.push_back({"3x3 stride 2 pad 1",
                     {2, 2, 6, 6},
                     {{"kernel_shape", ints({3, 3})},
                      {"strides", ints({2, 2})},
                      {"pads", ints({1, 1, 1, 1})},
                      {"count_include_pad", c}}});
    cases.push_back({"asymmetric pads, stride 1",
                     {1, 2, 5, 4},
                     {{"kernel_shape", ints({3, 2})}, {"pads", ints({2, 0, 0, 1})}, {"count_include_pad", c}}});
    cases.push_back({"ceil_mode with pads",
                     {1, 2, 7, 7},
                     {{"kernel_shape", ints({3, 3})},
                      {"strides", ints({2, 2})},
                      {"pads", ints({1, 1, 1, 1})},
                      {"ceil_mode", Attribute::of_int(1)},
                      {"count_include_pad", c}}});
    cases.push_back({"ceil_mode without pads",
                     {1, 1, 6, 6},
                     {{"kernel_shape", ints({3, 3})},
                      {"strides", ints({2, 2})},
                      {"ceil_mode", Attribute::of_int(1)},
                      {"count_include_pad", c}}});
    cases.push_back(
        {"SAME_LOWER",
         {1, 2, 5, 5},
         {{"kernel_shape", ints({2, 2})}, {"auto_pad", Attribute::of_string("SAME_LOWER")}, {"count_include_pad", c}}});
    cases.push_back(
        {"1-D",
         {2, 2, 7},
         {{"kernel_shape", ints({3})}, {"strides", ints({2})}, {"pads", ints({1, 1})}, {"count_include_pad", c}}});
    cases.push_back(
        {"3-D",
         {1, 1, 4, 4, 4},
         {{"kernel_shape", ints({2, 3, 2})}, {"pads", ints({0, 1, 1, 1, 1, 0})}, {"count_include_pad", c}}});
    // opset 19's dilations: overlapping dilated windows, a ceil window's taps past the end pad
    cases.push_back({"dilation 2, stride 2, pads 1, ceil_mode",
                     {1, 2, 9, 8},
                     {{"kernel_shape", ints({3, 3})},
                      {"strides", ints({2, 2})},
                      {"dilations", ints({2, 2})},
                      {"pads", ints({1, 1, 1, 1})},
                      {"ceil_mode", Attribute::of_int(1)},
                      {"count_include_pad", c}}});
    cases.push_back({"1-D dilation 3, SAME_UPPER",
                     {2, 2, 10},
                     {{"kernel_shape", ints({3})},
                      {"dilations", ints({3})},
                      {"auto_pad", Attribute::of_string("SAME_UPPER")},
                      {"count_include_pad", c}}});
    cases.push_back({"3-D dilations 1,2,3",
                     {1, 1, 4, 5, 7},
                     {{"kernel_shape", ints({2, 2, 2})},
                      {"strides", ints({1, 2, 2})},
                      {"dilations", ints({1, 2, 3})},
                      {"pads", ints({1, 0, 1, 0, 1, 1})},
                      {"count_include_pad", c}}});
  }
  cases.push_back({"7x7 stride 7 on 8x8 (the reference model's CIFAR quirk)",
                   {2, 3, 8, 8},
                   {{"kernel_shape", ints({7, 7})}, {"strides", ints({7, 7})}}});
  for (const Case& c : cases) {
    CAPTURE(c.what);
    CAPTURE(c.attrs.at("count_include_pad").i);
    Net net;
    check(net, net.node("AveragePool", {net.param("x", c.x)}, c.attrs));
  }
}

TEST_CASE("gradcheck: LpPool with p 1 to 4, pads, strides, dilations, ceil_mode, SAME, 1-D and 3-D") {
  struct Case {
    std::string what;
    std::vector<int64_t> x;
    Attrs attrs;
  };
  const auto p = [](int64_t v) { return Attribute::of_int(v); };
  const std::vector<Case> cases = {
      {"2x2, p 2", {2, 2, 4, 4}, {{"kernel_shape", ints({2, 2})}}},
      {"3x3 stride 2 pads 1, p 1",
       {1, 2, 6, 6},
       {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}, {"p", p(1)}}},
      {"3x3 stride 2 pads 1, p 3",
       {1, 2, 7, 7},
       {{"kernel_shape", ints({3, 3})}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}, {"p", p(3)}}},
      {"dilation 2, ceil_mode, p 4",
       {1, 2, 8, 7},
       {{"kernel_shape", ints({2, 2})},
        {"strides", ints({2, 2})},
        {"dilations", ints({2, 2})},
        {"ceil_mode", Attribute::of_int(1)},
        {"p", p(4)}}},
      {"SAME_LOWER", {1, 2, 5, 5}, {{"kernel_shape", ints({2, 3})}, {"auto_pad", Attribute::of_string("SAME_LOWER")}}},
      {"1-D", {2, 2, 9}, {{"kernel_shape", ints({3})}, {"strides", ints({2})}, {"pads", ints({1, 1})}}},
      {"3-D", {1, 1, 4, 4, 4}, {{"kernel_shape", ints({2, 2, 2})}, {"strides", ints({1, 2, 2})}, {"p", p(3)}}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    Net net;
    check(net, net.node("LpPool", {net.param("x", c.x)}, c.attrs));
  }
}

TEST_CASE("gradcheck: GlobalAveragePool over 1, 2 and 3 spatial dims") {
  for (std::vector<int64_t> x : {std::vector<int64_t>{2, 3, 5}, {2, 3, 4, 5}, {1, 2, 2, 3, 4}}) {
    CAPTURE(dims_to_string(x));
    Net net;
    check(net, net.node("GlobalAveragePool", {net.param("x", x)}));
  }
}

TEST_CASE("MaxPoolGrad sends each dY to the element the forward's Indices point at, ties included") {
  // Every window of this input is constant (ties everywhere) or has a repeated maximum.
  Tensor x(DataType::Float32, {1, 2, 4, 4});
  for (int64_t i = 0; i < x.numel(); ++i) x.set_from_double(i, static_cast<double>((i / 3) % 3));
  for (const Attrs& attrs : {Attrs{{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}},
                             Attrs{{"kernel_shape", ints({3, 3})}, {"pads", ints({1, 1, 1, 1})}},
                             Attrs{{"kernel_shape", ints({2, 2})}, {"dilations", ints({2, 2})}}}) {
    TensorMap fwd = run_node(make_node("MaxPool", {"x"}, {"y", "idx"}, attrs), {{"x", x}}, "reference");
    const Tensor& idx = fwd.at("idx");
    Tensor dy = random_tensor(DataType::Float32, idx.dims(), 5, 0.5, 1.5);
    Tensor dx = run_backward("MaxPoolGrad", {{"dy", dy}, {"x", x}}, {"dy", "x"}, {"dx"}, attrs).at("dx");
    std::vector<double> want(static_cast<size_t>(x.numel()), 0.0);
    for (int64_t o = 0; o < idx.numel(); ++o) want[static_cast<size_t>(idx.data<int64_t>()[o])] += dy.get_as_double(o);
    for (int64_t i = 0; i < x.numel(); ++i) CHECK(dx.get_as_double(i) == doctest::Approx(want[static_cast<size_t>(i)]));
  }
}

TEST_CASE("AveragePoolGrad and GlobalAveragePoolGrad on a hand-computed case") {
  // x: 1,1,3,3; kernel 2, stride 1, no pads: each interior element is in 4 windows.
  Tensor x(DataType::Float32, {1, 1, 3, 3});
  Tensor dy(DataType::Float32, {1, 1, 2, 2});
  for (int64_t i = 0; i < 4; ++i) dy.set_from_double(i, 4.0 * static_cast<double>(i + 1));  // 4, 8, 12, 16
  Tensor dx =
      run_backward("AveragePoolGrad", {{"dy", dy}, {"x", x}}, {"dy", "x"}, {"dx"}, {{"kernel_shape", ints({2, 2})}})
          .at("dx");
  const std::vector<double> want = {1, 3, 2, 4, 10, 6, 3, 7, 4};  // dy/4 summed over covering windows
  for (int64_t i = 0; i < 9; ++i) CHECK(dx.get_as_double(i) == doctest::Approx(want[static_cast<size_t>(i)]));

  Tensor gdy(DataType::Float64, {1, 2, 1, 1});
  gdy.set_from_double(0, 6.0);
  gdy.set_from_double(1, -3.0);
  Tensor gx(DataType::Float64, {1, 2, 2, 3});
  Tensor gdx = run_backward("GlobalAveragePoolGrad", {{"dy", gdy}, {"x", gx}}, {"dy", "x"}, {"dx"}).at("dx");
  for (int64_t i = 0; i < 12; ++i) CHECK(gdx.get_as_double(i) == doctest::Approx(i < 6 ? 1.0 : -0.5));
}

// ---- BatchNormalization -----------------------------------------------------------

TEST_CASE("gradcheck: BatchNormalization training, gradients of X, scale and B") {
  struct Case {
    std::string what;
    int64_t opset;
    std::vector<int64_t> x;
    float eps;
  };
  for (const Case& c :
       {Case{"opset 17, N,C,H,W", 17, {3, 2, 3, 3}, 1e-5f}, Case{"opset 13, N,C,H,W", 13, {2, 3, 2, 3}, 1e-3f},
        Case{"opset 15, N,C", 15, {5, 4}, 1e-5f}, Case{"opset 14, N,C,L", 14, {2, 2, 5}, 0.1f}}) {
    CAPTURE(c.what);
    Net net(c.opset);
    const int64_t C = c.x[1];
    const std::string y = net.node("BatchNormalization",
                                   {net.param("x", c.x, -2, 2), net.param("scale", {C}, 0.5, 1.5),
                                    net.param("bias", {C}), net.param("mean", {C}), net.param("var", {C}, 0.5, 1.5)},
                                   {{"epsilon", Attribute::of_float(c.eps)}});
    // Finite differences of the training graph, whose BatchNormalizationGrad reads the
    // forward's saved statistics (checked below).
    GradCheck r = check_gradients(net.finish(y), net.feeds, 24);
    CAPTURE(r.worst);
    CHECK(r.max_error < kTol);
    const Node* bn = find_node(r.training.graph, "BatchNormalization");
    const Node* grad = find_node(r.training.graph, "BatchNormalizationGrad");
    REQUIRE(bn);
    REQUIRE(grad);
    REQUIRE(grad->inputs.size() == 5);
    CHECK(grad->inputs[3] == bn->outputs.at(5));
    CHECK(grad->inputs[4] == bn->outputs.at(6));
  }
}

TEST_CASE("BatchNormalizationGrad with the forward's saved statistics equals the recompute form (reference)") {
  // The reference kernels (ops/norm.cpp); the saved statistics are the training
  // forward's outputs 5/6. float64: equal to double rounding; float32: the saved mean
  // and variance are rounded to float once, which moves dX by a few float ulps.
  for (DataType t : {DataType::Float64, DataType::Float32}) {
    CAPTURE(dtype_name(t));
    const std::vector<int64_t> dims{3, 4, 3, 5};
    const TensorMap in{{"x", random_tensor(t, dims, 31, -1.5, 2.5)},
                       {"s", random_tensor(t, {4}, 32, 0.5, 1.5)},
                       {"b", random_tensor(t, {4}, 33)},
                       {"rm", random_tensor(t, {4}, 34)},
                       {"rv", random_tensor(t, {4}, 35, 0.5, 1.5)}};
    const TensorMap fwd =
        run_node(make_node("BatchNormalization", {"x", "s", "b", "rm", "rv"}, {"y", "", "", "", "", "sm", "sv"},
                           {{"training_mode", Attribute::of_int(1)}}),
                 in, "reference");
    TensorMap feeds{{"dy", random_tensor(t, dims, 36)}, {"x", in.at("x")}, {"s", in.at("s")}};
    const TensorMap plain = feeds;  // a graph takes no unused feeds
    feeds["sm"] = fwd.at("sm");
    feeds["sv"] = fwd.at("sv");
    const TensorMap saved = run_node(
        make_node("BatchNormalizationGrad", {"dy", "x", "s", "sm", "sv"}, {"dx", "ds", "db"}, {}, kTrainrtDomain),
        feeds, "reference");
    const TensorMap recomputed =
        run_node(make_node("BatchNormalizationGrad", {"dy", "x", "s"}, {"dx", "ds", "db"}, {}, kTrainrtDomain), plain,
                 "reference");
    const double tol = t == DataType::Float64 ? 1e-12 : 1e-5;
    for (const char* o : {"dx", "ds", "db"}) {
      CAPTURE(o);
      CHECK(max_abs_diff(saved.at(o), recomputed.at(o)) < tol);
    }
    CHECK(max_abs_diff(saved.at("db"), recomputed.at("db")) == 0);  // dBias does not use the statistics
  }
}

TEST_CASE("gradcheck: BatchNormalization's opset-13 five-output form as PyTorch exports it") {
  Net net(13);
  const std::string y = net.node_outs("BatchNormalization",
                                      {net.param("x", {4, 2, 2, 2}), net.param("scale", {2}, 0.5, 1.5),
                                       net.param("bias", {2}), net.param("mean", {2}), net.param("var", {2}, 0.5, 1.5)},
                                      {{"momentum", Attribute::of_float(0.9f)}},
                                      {"y", "bn_mean", "bn_var", "saved_mean", "saved_var"})[0];
  GradCheck r = check_gradients(net.finish(y), net.feeds, 16);
  CAPTURE(r.worst);
  CHECK(r.max_error < kTol);
  const Node* bn = find_node(r.training.graph, "BatchNormalization");
  REQUIRE(bn);
  CHECK(bn->outputs[1] == "mean.updated");
  CHECK(bn->outputs[2] == "var.updated");
  CHECK(!bn->has_attr("training_mode"));  // opset 13: the extra outputs make it train
  // The gradient reads trainrt's saved statistics (outputs 5/6), not ONNX's saved_mean/saved_var.
  const Node* grad = find_node(r.training.graph, "BatchNormalizationGrad");
  REQUIRE(grad);
  REQUIRE(grad->inputs.size() == 5);
  CHECK(grad->inputs[3] == bn->outputs.at(5));
  CHECK(grad->inputs[4] == bn->outputs.at(6));
}

TEST_CASE("gradcheck: LayerNormalization over the last dims, a non-last axis, broadcast Scale/B, no B") {
  struct Case {
    std::string what;
    std::vector<int64_t> x;
    int64_t axis;
    std::vector<int64_t> scale, bias;  // bias empty: no B input
    float eps;
  };
  for (const Case& c : {Case{"last dim (nn.LayerNorm)", {2, 3, 5}, -1, {5}, {5}, 1e-5f},
                        Case{"axis 1 of 3-D", {2, 3, 4}, 1, {3, 4}, {3, 4}, 1e-3f},
                        Case{"axis 0: one row", {3, 4}, 0, {3, 4}, {3, 4}, 1e-5f},
                        Case{"axis -2, Scale [1,4] and B [4] broadcast", {2, 3, 4}, -2, {1, 4}, {4}, 0.1f},
                        Case{"axis 1 of 4-D, no B", {2, 2, 3, 2}, 1, {2, 3, 2}, {}, 1e-5f}}) {
    CAPTURE(c.what);
    Net net;
    std::vector<std::string> ins{net.param("x", c.x, -2, 2), net.param("scale", c.scale, 0.5, 1.5)};
    if (!c.bias.empty()) ins.push_back(net.param("bias", c.bias));
    const std::string y = net.node_outs("LayerNormalization", ins,
                                        {{"axis", Attribute::of_int(c.axis)}, {"epsilon", Attribute::of_float(c.eps)}},
                                        {"y", "mean", "inv_std"})[0];
    check(net, y, 24);
  }
}

TEST_CASE("LayerNormalization: Mean and InvStdDev on known values; they carry no gradient") {
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    CAPTURE(dtype_name(t));
    // rows [1,3] and [2,6] over axis 1 (eps 0): means 2, 4; variances 1, 4.
    const TensorMap f{{"x", make(t, {2, 2}, {1, 3, 2, 6})}, {"s", make(t, {2}, {1, 2})}, {"b", make(t, {2}, {0, 1})}};
    const TensorMap out = run_node(
        make_node("LayerNormalization", {"x", "s", "b"}, {"y", "m", "r"}, {{"epsilon", Attribute::of_float(0)}}), f,
        "reference");
    CHECK(max_abs_diff(out.at("y"), make(t, {2, 2}, {-1, 3, -1, 3})) < 1e-7);
    CHECK(max_abs_diff(out.at("m"), make(t, {2, 1}, {2, 4})) < 1e-7);
    CHECK(max_abs_diff(out.at("r"), make(t, {2, 1}, {1, 0.5})) < 1e-7);
  }
  Net net;
  const std::string x = net.param("x", {2, 3});
  net.node_outs("LayerNormalization", {x, net.param("s", {3})}, {}, {"y", "mean"});
  const std::string y = net.node("Add", {"y", "mean"});
  ErrorKind kind = ErrorKind::Internal;
  const std::string msg = error_of([&] { check_gradients(net.finish(y), net.feeds, 4); }, &kind);
  CHECK(kind == ErrorKind::Unsupported);
  CHECK(contains(msg, "only Y carries a gradient"));
}

TEST_CASE("BatchNormalization prepare: training_mode at opset >= 14, .updated outputs, consumers rewired") {
  const PrepareRule& prepare = gradients().find("", "BatchNormalization")->prepare;
  REQUIRE(prepare);
  {
    Net net(17);
    net.node_outs("BatchNormalization",
                  {net.feed("x", Tensor(DataType::Float64, {2, 3, 2, 2})), net.param("s", {3}), net.param("b", {3}),
                   net.param("rm", {3}), net.param("rv", {3})},
                  {}, {"y"});
    net.infer();
    Graph g = net.g;
    prepare(g.nodes[0], g);
    CHECK(g.nodes[0].attr_int("training_mode", 0) == 1);
    const std::string& bn = g.nodes[0].name;
    // Outputs 3/4 do not exist at opset 17; 5/6 are trainrt's saved statistics.
    CHECK(g.nodes[0].outputs ==
          std::vector<std::string>{"y", "rm.updated", "rv.updated", "", "", bn + "/saved_mean", bn + "/saved_var"});
    infer_shapes(g, registry().schemas, "test");
    CHECK(g.info(bn + "/saved_var").shape == Shape{Dim::of(3)});
  }
  {
    Net net(13);  // running statistics fed, not initializers: outputs get fresh names
    net.node_outs("BatchNormalization",
                  {net.feed("x", Tensor(DataType::Float64, {2, 3})), net.param("s", {3}), net.param("b", {3}),
                   net.feed("rm", Tensor(DataType::Float64, {3})), net.feed("rv", Tensor(DataType::Float64, {3}))},
                  {}, {"y"});
    net.infer();
    Graph g = net.g;
    prepare(g.nodes[0], g);
    CHECK(!g.nodes[0].has_attr("training_mode"));
    CHECK(g.nodes[0].outputs.size() == 7);
    CHECK(g.nodes[0].has_output(1));
    CHECK(g.nodes[0].has_output(2));
    CHECK(g.nodes[0].outputs[1] != "rm.updated");
  }
  {
    Net net(13);  // five outputs whose old names other nodes read
    net.node_outs("BatchNormalization",
                  {net.feed("x", Tensor(DataType::Float64, {2, 3, 2, 2})), net.param("s", {3}), net.param("b", {3}),
                   net.param("rm", {3}), net.param("rv", {3})},
                  {}, {"y", "m_out", "v_out", "sm", "sv"});
    net.node("Add", {"m_out", "v_out"}, {}, "stats");
    net.node("Identity", {"sm"}, {}, "sm_copy");
    net.infer();
    Graph g = net.g;
    prepare(g.nodes[0], g);
    const std::string& bn = g.nodes[0].name;
    CHECK(g.nodes[0].outputs ==
          std::vector<std::string>{"y", "rm.updated", "rv.updated", "sm", "sv", bn + "/saved_mean", bn + "/saved_var"});
    CHECK(g.nodes[1].inputs == std::vector<std::string>{"rm.updated", "rv.updated"});
    CHECK(g.nodes[2].inputs == std::vector<std::string>{"sm"});
    CHECK(g.find_info("m_out") == nullptr);
    infer_shapes(g, registry().schemas, "test");  // the rewired graph is consistent
    CHECK(g.info("stats").shape == Shape{Dim::of(3)});
  }
}

TEST_CASE("TrainingSession::step updates BatchNormalization running statistics by the ONNX formula") {
  // running = running * momentum + batch * (1 - momentum), batch var biased (divided by N*H*W).
  for (int64_t opset : {13, 17}) {
    CAPTURE(opset);
    Net net(opset);
    net.dtype = DataType::Float32;
    const float momentum = 0.7f;
    const std::vector<int64_t> xd{3, 2, 2, 3};
    const std::string x = net.feed("x", random_tensor(DataType::Float32, xd, 21, -2, 3));
    const std::string y = net.node("BatchNormalization",
                                   {x, net.param("scale", {2}, 0.5, 1.5), net.param("bias", {2}), net.param("rm", {2}),
                                    net.param("rv", {2}, 0.5, 1.5)},
                                   {{"momentum", Attribute::of_float(momentum)}});
    const Graph& forward = net.finish(y);
    TrainingOptions o;
    o.optimizer = "sgd";
    TrainingGraph t = build_training_graph(forward, o);
    const auto has_update = [&](const std::string& produced, const std::string& state) {
      return std::find(t.updates.begin(), t.updates.end(), std::make_pair(produced, state)) != t.updates.end();
    };
    CHECK(has_update("rm.updated", "rm"));
    CHECK(has_update("rv.updated", "rv"));
    TrainingSession s(std::move(t), make_backend("reference"));
    for (int step = 0; step < 2; ++step) {
      CAPTURE(step);
      TensorMap batch{{"x", random_tensor(DataType::Float32, xd, 30 + static_cast<uint64_t>(step), -2, 3)},
                      {"r", net.feeds.at("r")}};
      const Tensor rm0 = s.state("rm").clone(), rv0 = s.state("rv").clone();
      s.step(batch, 0.1f);
      const Tensor& xb = batch.at("x");
      for (int64_t c = 0; c < 2; ++c) {
        double sum = 0, sq = 0;
        const int64_t count = xd[0] * xd[2] * xd[3];
        for (int64_t n = 0; n < xd[0]; ++n)
          for (int64_t i = 0; i < xd[2] * xd[3]; ++i) sum += xb.get_as_double((n * 2 + c) * xd[2] * xd[3] + i);
        const double mean = sum / static_cast<double>(count);
        for (int64_t n = 0; n < xd[0]; ++n)
          for (int64_t i = 0; i < xd[2] * xd[3]; ++i) {
            const double d = xb.get_as_double((n * 2 + c) * xd[2] * xd[3] + i) - mean;
            sq += d * d;
          }
        const double var = sq / static_cast<double>(count);
        const double m = momentum;
        CHECK(s.state("rm").get_as_double(c) ==
              doctest::Approx(rm0.get_as_double(c) * m + mean * (1 - m)).epsilon(1e-6));
        CHECK(s.state("rv").get_as_double(c) ==
              doctest::Approx(rv0.get_as_double(c) * m + var * (1 - m)).epsilon(1e-6));
      }
    }
    // The trained forward model carries the new statistics under the original names.
    Graph trained = s.trained_forward(forward);
    CHECK(max_abs_diff(trained.initializers.at("rm"), s.state("rm")) == 0);
  }
}

TEST_CASE("BatchNormalizationGrad: dX sums to zero per channel (Y ignores a per-channel shift), dBias = sum of dY") {
  Tensor x = random_tensor(DataType::Float32, {4, 3, 2, 2}, 8, -2, 2);
  Tensor dy = random_tensor(DataType::Float32, {4, 3, 2, 2}, 9);
  Tensor scale = random_tensor(DataType::Float32, {3}, 10, 0.5, 1.5);
  TensorMap out = run_backward("BatchNormalizationGrad", {{"dy", dy}, {"x", x}, {"s", scale}}, {"dy", "x", "s"},
                               {"dx", "ds", "db"});
  for (int64_t c = 0; c < 3; ++c) {
    double sum_dx = 0, sum_dy = 0;
    for (int64_t n = 0; n < 4; ++n)
      for (int64_t i = 0; i < 4; ++i) {
        sum_dx += out.at("dx").get_as_double((n * 3 + c) * 4 + i);
        sum_dy += dy.get_as_double((n * 3 + c) * 4 + i);
      }
    CHECK(std::fabs(sum_dx) < 1e-5);
    CHECK(out.at("db").get_as_double(c) == doctest::Approx(sum_dy).epsilon(1e-5));
  }
}

// ---- fp32 kernels agree with fp64 -------------------------------------------------

TEST_CASE("every backward op's float32 kernel agrees with its float64 kernel") {
  struct Case {
    std::string op;
    std::vector<std::vector<int64_t>> inputs;  // dY first
    std::vector<std::string> outs;
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      {"ConvGrad",
       {{2, 4, 3, 3}, {2, 4, 5, 5}, {4, 2, 3, 3}},
       {"o0", "o1", "o2"},
       {{"group", Attribute::of_int(2)}, {"strides", ints({2, 2})}, {"pads", ints({1, 1, 1, 1})}}},
      {"MaxPoolGrad",
       {{2, 3, 3, 3}, {2, 3, 6, 6}},
       {"o0"},
       {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}}},
      {"AveragePoolGrad",
       {{2, 3, 3, 3}, {2, 3, 6, 6}},
       {"o0"},
       {{"kernel_shape", ints({3, 3})},
        {"strides", ints({2, 2})},
        {"pads", ints({1, 1, 1, 1})},
        {"count_include_pad", Attribute::of_int(1)}}},
      {"GlobalAveragePoolGrad", {{2, 3, 1, 1}, {2, 3, 4, 4}}, {"o0"}, {}},
      {"BatchNormalizationGrad", {{2, 3, 2, 2}, {2, 3, 2, 2}, {3}}, {"o0", "o1", "o2"}, {}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.op);
    TensorMap f64, f32;
    std::vector<std::string> names;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      names.push_back("in" + std::to_string(i));
      f64[names.back()] = random_tensor(DataType::Float64, c.inputs[i], 40 + i, -2, 2);
      f32[names.back()] = cast_to(f64[names.back()], DataType::Float32);
    }
    TensorMap a = run_backward(c.op, f64, names, c.outs, c.attrs);
    TensorMap b = run_backward(c.op, f32, names, c.outs, c.attrs);
    for (const std::string& o : c.outs) {
      CAPTURE(o);
      REQUIRE(b.at(o).dtype() == DataType::Float32);
      CHECK(max_abs_diff(a.at(o), b.at(o)) < 1e-4);
    }
  }
}

// ---- shape rules reject mismatches --------------------------------------------------

TEST_CASE("backward ops' shape rules reject mismatched shapes and dtypes, naming the node") {
  struct Case {
    std::string what;
    std::string op;
    std::vector<std::pair<std::vector<int64_t>, DataType>> inputs;  // dY first
    std::vector<std::string> outs;
    Attrs attrs;
    const char* expect;  // part of the message
  };
  const DataType f = DataType::Float32, d = DataType::Float64;
  const Attrs pool2{{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}};
  const std::vector<Case> cases = {
      {"ConvGrad dY spatial",
       "ConvGrad",
       {{{2, 4, 5, 5}, f}, {{2, 3, 6, 6}, f}, {{4, 3, 3, 3}, f}},
       {"a", "b", "c"},
       {{"pads", ints({1, 1, 1, 1})}},
       "dY"},
      {"ConvGrad dY channels", "ConvGrad", {{{2, 5, 4, 4}, f}, {{2, 3, 6, 6}, f}, {{4, 3, 3, 3}, f}}, {"a"}, {}, "dY"},
      {"ConvGrad dY rank", "ConvGrad", {{{2, 4, 16}, f}, {{2, 3, 6, 6}, f}, {{4, 3, 3, 3}, f}}, {"a"}, {}, "dY"},
      {"ConvGrad X channels vs W",
       "ConvGrad",
       {{{2, 4, 4, 4}, f}, {{2, 2, 6, 6}, f}, {{4, 3, 3, 3}, f}},
       {"a"},
       {},
       "channels"},
      {"ConvGrad dtype", "ConvGrad", {{{2, 4, 4, 4}, d}, {{2, 3, 6, 6}, f}, {{4, 3, 3, 3}, f}}, {"a"}, {}, "dtype"},
      {"MaxPoolGrad dY spatial", "MaxPoolGrad", {{{2, 3, 4, 4}, f}, {{2, 3, 6, 6}, f}}, {"a"}, pool2, "dY"},
      {"MaxPoolGrad dY batch", "MaxPoolGrad", {{{1, 3, 3, 3}, f}, {{2, 3, 6, 6}, f}}, {"a"}, pool2, "dY"},
      {"MaxPoolGrad no kernel_shape", "MaxPoolGrad", {{{2, 3, 3, 3}, f}, {{2, 3, 6, 6}, f}}, {"a"}, {}, "kernel_shape"},
      {"MaxPoolGrad dtype", "MaxPoolGrad", {{{2, 3, 3, 3}, d}, {{2, 3, 6, 6}, f}}, {"a"}, pool2, "dtype"},
      {"AveragePoolGrad dY channels", "AveragePoolGrad", {{{2, 4, 3, 3}, f}, {{2, 3, 6, 6}, f}}, {"a"}, pool2, "dY"},
      {"GlobalAveragePoolGrad dY spatial",
       "GlobalAveragePoolGrad",
       {{{2, 3, 2, 2}, f}, {{2, 3, 6, 6}, f}},
       {"a"},
       {},
       "dY"},
      {"GlobalAveragePoolGrad dY rank", "GlobalAveragePoolGrad", {{{2, 3}, f}, {{2, 3, 6, 6}, f}}, {"a"}, {}, "dY"},
      {"BatchNormalizationGrad dY shape",
       "BatchNormalizationGrad",
       {{{2, 3, 4, 4}, f}, {{2, 3, 4, 5}, f}, {{3}, f}},
       {"a", "b", "c"},
       {},
       "dY"},
      {"BatchNormalizationGrad scale length",
       "BatchNormalizationGrad",
       {{{2, 3, 4, 4}, f}, {{2, 3, 4, 4}, f}, {{4}, f}},
       {"a", "b", "c"},
       {},
       "scale"},
      {"BatchNormalizationGrad dtype",
       "BatchNormalizationGrad",
       {{{2, 3, 4, 4}, f}, {{2, 3, 4, 4}, f}, {{3}, d}},
       {"a"},
       {},
       "dtype"},
      {"BatchNormalizationGrad saved_mean without saved_var",
       "BatchNormalizationGrad",
       {{{2, 3, 4, 4}, f}, {{2, 3, 4, 4}, f}, {{3}, f}, {{3}, f}},
       {"a"},
       {},
       "saved_var"},
      {"BatchNormalizationGrad saved_var length",
       "BatchNormalizationGrad",
       {{{2, 3, 4, 4}, f}, {{2, 3, 4, 4}, f}, {{3}, f}, {{3}, f}, {{4}, f}},
       {"a"},
       {},
       "saved_var"},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    TensorMap feeds;
    std::vector<std::string> names;
    for (size_t i = 0; i < c.inputs.size(); ++i) {
      names.push_back("in" + std::to_string(i));
      feeds[names.back()] = Tensor(c.inputs[i].second, c.inputs[i].first);
    }
    Node n = make_node(c.op, names, c.outs, c.attrs, kTrainrtDomain);
    ErrorKind kind = ErrorKind::Internal;
    const std::string msg = error_of([&] { single_node_graph(n, feeds); }, &kind);
    CAPTURE(msg);
    CHECK(kind == ErrorKind::BadInput);
    CHECK(contains(msg, "'" + c.op + "_test' (" + c.op + ")"));
    CHECK(contains(msg, c.expect));
  }
}

// ---- a small Wide-ResNet-like chain -------------------------------------------------

TEST_CASE("gradcheck: Conv -> BN -> Relu -> Conv -> Add -> MaxPool -> GlobalAveragePool chain") {
  Net net;
  const std::string x = net.feed("x", random_tensor(DataType::Float64, {2, 3, 6, 6}, 77));
  const std::string c1 = net.node("Conv", {x, net.param("w1", {4, 3, 3, 3})}, {{"pads", ints({1, 1, 1, 1})}});
  const std::string bn =
      net.node("BatchNormalization", {c1, net.param("bn.weight", {4}, 0.5, 1.5), net.param("bn.bias", {4}),
                                      net.param("bn.running_mean", {4}), net.param("bn.running_var", {4}, 0.5, 1.5)});
  const std::string relu = net.node("Relu", {bn});
  const std::string c2 =
      net.node("Conv", {relu, net.param("w2", {4, 4, 3, 3}), net.param("b2", {4})}, {{"pads", ints({1, 1, 1, 1})}});
  const std::string sum = net.node("Add", {relu, c2});
  const std::string mp = net.node("MaxPool", {sum}, {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}});
  check(net, net.node("GlobalAveragePool", {mp}), 16);
}

TEST_CASE("gradcheck: Wide-ResNet-like chain to Flatten -> Gemm logits, loss attached by the driver") {
  // Conv -> BN -> Relu -> Conv(+bias) -> Add(skip) -> MaxPool -> GlobalAveragePool -> Flatten -> Gemm,
  // then SoftmaxCrossEntropyLoss(mean) appended by build_training_graph (labels fed).
  Net net;
  const std::string x = net.feed("x", random_tensor(DataType::Float64, {2, 3, 6, 6}, 78));
  Tensor labels(DataType::Int64, {2});
  labels.data<int64_t>()[0] = 4;
  labels.data<int64_t>()[1] = 1;
  net.feeds["labels"] = labels;
  const std::string c1 = net.node("Conv", {x, net.param("conv1.weight", {4, 3, 3, 3})}, {{"pads", ints({1, 1, 1, 1})}});
  const std::string bn =
      net.node("BatchNormalization", {c1, net.param("bn.weight", {4}, 0.5, 1.5), net.param("bn.bias", {4}),
                                      net.param("bn.running_mean", {4}), net.param("bn.running_var", {4}, 0.5, 1.5)});
  const std::string relu = net.node("Relu", {bn});
  const std::string c2 = net.node("Conv", {relu, net.param("conv2.weight", {4, 4, 3, 3}), net.param("conv2.bias", {4})},
                                  {{"pads", ints({1, 1, 1, 1})}});
  const std::string sum = net.node("Add", {relu, c2});
  const std::string mp = net.node("MaxPool", {sum}, {{"kernel_shape", ints({2, 2})}, {"strides", ints({2, 2})}});
  const std::string flat = net.node("Flatten", {net.node("GlobalAveragePool", {mp})});
  const std::string logits = net.node("Gemm", {flat, net.param("fc.weight", {5, 4}), net.param("fc.bias", {5})},
                                      {{"transB", Attribute::of_int(1)}}, "logits");
  net.g.outputs = {logits};
  net.infer();
  GradCheck r = check_gradients(net.g, net.feeds, 16);
  CAPTURE(r.worst);
  CHECK(r.training.labels == "labels");
  CHECK(r.training.params.size() == 7);  // conv1, bn weight/bias, conv2 weight/bias, fc weight/bias
  CHECK(r.max_error < kTol);
  bool updates_running_mean = false;
  for (const auto& [produced, state] : r.training.updates) updates_running_mean |= state == "bn.running_mean";
  CHECK(updates_running_mean);
}

// ---- 1-D and 3-D (N-D) ------------------------------------------------------------

TEST_CASE("gradcheck: Conv 1-D and 3-D with strides, dilations, pads, groups, auto_pad") {
  struct Case {
    std::string what;
    std::vector<int64_t> x, w;
    bool bias;
    Attrs attrs;
  };
  const std::vector<Case> cases = {
      {"1-D k3 stride 2 dilation 2 asymmetric pads, bias",
       {2, 3, 11},
       {4, 3, 3},
       true,
       {{"strides", ints({2})}, {"dilations", ints({2})}, {"pads", ints({1, 2})}}},
      {"1-D group 2, SAME_UPPER stride 2",
       {2, 4, 9},
       {6, 2, 4},
       false,
       {{"group", Attribute::of_int(2)}, {"auto_pad", Attribute::of_string("SAME_UPPER")}, {"strides", ints({2})}}},
      {"1-D depthwise, SAME_LOWER",
       {1, 3, 8},
       {3, 1, 2},
       true,
       {{"group", Attribute::of_int(3)}, {"auto_pad", Attribute::of_string("SAME_LOWER")}}},
      {"3-D 2x3x2 strides 2,1,2 pads, bias",
       {2, 2, 4, 5, 4},
       {3, 2, 2, 3, 2},
       true,
       {{"strides", ints({2, 1, 2})}, {"pads", ints({1, 1, 0, 0, 1, 1})}}},
      {"3-D group 2, dilation 2,1,1, VALID",
       {1, 4, 5, 3, 3},
       {4, 2, 2, 2, 2},
       false,
       {{"group", Attribute::of_int(2)}, {"dilations", ints({2, 1, 1})}, {"auto_pad", Attribute::of_string("VALID")}}},
  };
  for (const Case& c : cases) {
    CAPTURE(c.what);
    Net net;
    std::vector<std::string> ins{net.param("x", c.x), net.param("w", c.w)};
    if (c.bias) ins.push_back(net.param("b", {c.w[0]}));
    check(net, net.node("Conv", ins, c.attrs));
  }
}

TEST_CASE("gradcheck: GlobalMaxPool over 1, 2 and 3 spatial dims") {
  for (std::vector<int64_t> x : {std::vector<int64_t>{2, 3, 5}, {2, 3, 4, 5}, {1, 2, 2, 3, 4}}) {
    CAPTURE(dims_to_string(x));
    Net net;
    check(net, net.node("GlobalMaxPool", {net.param("x", x)}));
  }
}

TEST_CASE("gradcheck: BatchNormalization training on N,C,D,H,W") {
  Net net;
  const std::string y =
      net.node("BatchNormalization", {net.param("x", {2, 3, 2, 3, 2}, -2, 2), net.param("scale", {3}, 0.5, 1.5),
                                      net.param("bias", {3}), net.param("mean", {3}), net.param("var", {3}, 0.5, 1.5)});
  check(net, y, 24);
}

TEST_CASE("gradcheck: 1-D and 3-D chains Conv -> BN -> Relu -> MaxPool -> GlobalMaxPool / GlobalAveragePool") {
  for (bool three_d : {false, true}) {
    CAPTURE(three_d);
    Net net;
    const std::vector<int64_t> x = three_d ? std::vector<int64_t>{2, 2, 4, 4, 4} : std::vector<int64_t>{2, 2, 12};
    const std::vector<int64_t> w = three_d ? std::vector<int64_t>{3, 2, 3, 3, 3} : std::vector<int64_t>{3, 2, 3};
    const size_t sp = x.size() - 2;
    const std::string c =
        net.node("Conv", {net.param("x", x), net.param("w", w)}, {{"pads", ints(std::vector<int64_t>(2 * sp, 1))}});
    const std::string b = net.node("BatchNormalization", {c, net.param("scale", {3}, 0.5, 1.5), net.param("bias", {3}),
                                                          net.param("mean", {3}), net.param("var", {3}, 0.5, 1.5)});
    const std::string m =
        net.node("MaxPool", {net.node("Relu", {b})},
                 {{"kernel_shape", ints(std::vector<int64_t>(sp, 2))}, {"strides", ints(std::vector<int64_t>(sp, 2))}});
    check(net, net.node(three_d ? "GlobalAveragePool" : "GlobalMaxPool", {m}), 24);
  }
}
