// Conv: hand-computed cases, a scatter-form oracle (loops over inputs, not outputs)
// in fp64, every bad-attribute error, symbolic batch and the FLOP rule.
#include <doctest/doctest.h>

#include "graph/error.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

Tensor tensor_of(DataType t, std::vector<int64_t> dims, std::vector<double> v) {
  Tensor x(t, std::move(dims));
  REQUIRE(static_cast<size_t>(x.numel()) == v.size());
  for (size_t i = 0; i < v.size(); ++i) x.set_from_double(static_cast<int64_t>(i), v[i]);
  return x;
}

// Scatter form: every input pixel adds x*w to each output it reaches. pads are
// explicit (top, left); output size is given.
Tensor conv_scatter(const Tensor& x, const Tensor& w, const Tensor* b, int64_t group, std::vector<int64_t> s,
                    std::vector<int64_t> d, int64_t pt, int64_t pl, int64_t Ho, int64_t Wo) {
  const auto& xd = x.dims();
  const auto& wd = w.dims();
  const int64_t N = xd[0], C = xd[1], H = xd[2], W = xd[3], M = wd[0], Cg = wd[1], kH = wd[2], kW = wd[3];
  Tensor y(DataType::Float64, {N, M, Ho, Wo});
  for (int64_t n = 0; n < N; ++n)
    for (int64_t m = 0; m < M; ++m)
      for (int64_t i = 0; i < Ho * Wo; ++i) y.set_from_double((n * M + m) * Ho * Wo + i, b ? b->get_as_double(m) : 0.0);
  for (int64_t n = 0; n < N; ++n)
    for (int64_t c = 0; c < C; ++c)
      for (int64_t h = 0; h < H; ++h)
        for (int64_t wi = 0; wi < W; ++wi) {
          const double xv = x.get_as_double(((n * C + c) * H + h) * W + wi);
          const int64_t g = c / Cg;
          for (int64_t m = g * (M / group); m < (g + 1) * (M / group); ++m)
            for (int64_t i = 0; i < kH; ++i)
              for (int64_t j = 0; j < kW; ++j) {
                const int64_t th = h + pt - i * d[0], tw = wi + pl - j * d[1];  // = oh*s, ow*s
                if (th < 0 || tw < 0 || th % s[0] || tw % s[1]) continue;
                const int64_t oh = th / s[0], ow = tw / s[1];
                if (oh >= Ho || ow >= Wo) continue;
                const int64_t o = ((n * M + m) * Ho + oh) * Wo + ow;
                y.set_from_double(o, y.get_as_double(o) + xv * w.get_as_double(((m * Cg + c % Cg) * kH + i) * kW + j));
              }
        }
  return y;
}

std::string error_of(const Node& n, const TensorMap& feeds, ErrorKind* kind = nullptr) {
  try {
    (void)single_node_graph(n, feeds);
  } catch (const Error& e) {
    if (kind) *kind = e.kind();
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Conv: hand-computed 3x3 input") {
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    Tensor x = tensor_of(t, {1, 1, 3, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9});
    // y = x[h,w] - x[h+1,w+1] + 0.5 = -3.5 everywhere
    Tensor w = tensor_of(t, {1, 1, 2, 2}, {1, 0, 0, -1});
    Tensor b = tensor_of(t, {1}, {0.5});
    TensorMap out = run_node(make_node("Conv", {"x", "w", "b"}, {"y"}), {{"x", x}, {"w", w}, {"b", b}}, "reference");
    CHECK(max_abs_diff(out["y"], tensor_of(t, {1, 1, 2, 2}, {-3.5, -3.5, -3.5, -3.5})) == 0);

    // 3x3 box filter, pads 1, stride 2: sums of the 2x2 corners of x
    Tensor ones = tensor_of(t, {1, 1, 3, 3}, {1, 1, 1, 1, 1, 1, 1, 1, 1});
    Node n = make_node("Conv", {"x", "w"}, {"y"},
                       {{"pads", Attribute::of_ints({1, 1, 1, 1})},
                        {"strides", Attribute::of_ints({2, 2})},
                        {"kernel_shape", Attribute::of_ints({3, 3})}});
    out = run_node(n, {{"x", x}, {"w", ones}}, "reference");
    CHECK(max_abs_diff(out["y"], tensor_of(t, {1, 1, 2, 2}, {12, 16, 24, 28})) == 0);
    CHECK(out["y"].dtype() == t);
  }
}

TEST_CASE("Conv: fp64 against the scatter oracle (strides, dilations, asymmetric pads, groups, bias)") {
  struct Case {
    int64_t C, M, group, H, W, kH, kW;
    std::vector<int64_t> s, d, pads;
    bool bias;
  };
  const Case cases[] = {
      {3, 4, 1, 7, 6, 3, 3, {1, 1}, {1, 1}, {1, 1, 1, 1}, true},
      {3, 5, 1, 9, 8, 3, 2, {2, 3}, {2, 1}, {0, 2, 1, 0}, true},
      {4, 6, 2, 6, 6, 3, 3, {2, 2}, {1, 1}, {1, 1, 1, 1}, false},  // grouped
      {3, 6, 3, 5, 7, 3, 3, {1, 2}, {2, 2}, {2, 1, 2, 1}, true},   // depthwise, multiplier 2
      {2, 2, 1, 4, 4, 1, 1, {1, 1}, {1, 1}, {0, 0, 0, 0}, false},  // 1x1
  };
  uint64_t seed = 1;
  for (const Case& c : cases) {
    Tensor x = random_tensor(DataType::Float64, {2, c.C, c.H, c.W}, seed++);
    Tensor w = random_tensor(DataType::Float64, {c.M, c.C / c.group, c.kH, c.kW}, seed++);
    Tensor b = random_tensor(DataType::Float64, {c.M}, seed++);
    const int64_t Ho = (c.H + c.pads[0] + c.pads[2] - c.d[0] * (c.kH - 1) - 1) / c.s[0] + 1;
    const int64_t Wo = (c.W + c.pads[1] + c.pads[3] - c.d[1] * (c.kW - 1) - 1) / c.s[1] + 1;
    Node n = make_node("Conv", {"x", "w", c.bias ? "b" : ""}, {"y"},
                       {{"pads", Attribute::of_ints(c.pads)},
                        {"strides", Attribute::of_ints(c.s)},
                        {"dilations", Attribute::of_ints(c.d)},
                        {"group", Attribute::of_int(c.group)}});
    TensorMap feeds{{"x", x}, {"w", w}};
    if (c.bias) feeds["b"] = b;
    TensorMap out = run_node(n, feeds, "reference");
    Tensor want = conv_scatter(x, w, c.bias ? &b : nullptr, c.group, c.s, c.d, c.pads[0], c.pads[1], Ho, Wo);
    CAPTURE(c.C);
    CAPTURE(c.group);
    CHECK(max_abs_diff(out["y"], want) < 1e-12);

    // fp32 follows fp64 to rounding
    TensorMap feeds32;
    for (auto& [k, v] : feeds) feeds32[k] = v.cast(DataType::Float32);
    TensorMap out32 = run_node(n, feeds32, "reference");
    CHECK(out32["y"].dtype() == DataType::Float32);
    CHECK(max_abs_diff(out32["y"], want) < 1e-5);
  }
}

TEST_CASE("Conv: auto_pad SAME_UPPER, SAME_LOWER and VALID") {
  Tensor x = random_tensor(DataType::Float64, {1, 2, 6, 5}, 11);
  Tensor w = random_tensor(DataType::Float64, {3, 2, 4, 3}, 12);
  // SAME with stride 2: out = ceil(in/2) = 3,3; total pads = (3-1)*2+k-in = 2 (H), 2 (W)... computed here
  const int64_t Ho = 3, Wo = 3;
  const int64_t total_h = (Ho - 1) * 2 + 4 - 6, total_w = (Wo - 1) * 2 + 3 - 5;
  struct Mode {
    const char* name;
    int64_t pt, pl;
  };
  for (Mode m : {Mode{"SAME_UPPER", total_h / 2, total_w / 2},
                 Mode{"SAME_LOWER", total_h - total_h / 2, total_w - total_w / 2}}) {
    Node n = make_node("Conv", {"x", "w"}, {"y"},
                       {{"auto_pad", Attribute::of_string(m.name)}, {"strides", Attribute::of_ints({2, 2})}});
    TensorMap out = run_node(n, {{"x", x}, {"w", w}}, "reference");
    CAPTURE(m.name);
    CHECK(max_abs_diff(out["y"], conv_scatter(x, w, nullptr, 1, {2, 2}, {1, 1}, m.pt, m.pl, Ho, Wo)) < 1e-12);
  }
  Node valid = make_node("Conv", {"x", "w"}, {"y"}, {{"auto_pad", Attribute::of_string("VALID")}});
  TensorMap out = run_node(valid, {{"x", x}, {"w", w}}, "reference");
  CHECK(max_abs_diff(out["y"], conv_scatter(x, w, nullptr, 1, {1, 1}, {1, 1}, 0, 0, 3, 3)) < 1e-12);
}

TEST_CASE("Conv: bad attributes and shapes give one-line errors naming the node") {
  const TensorMap ok{{"x", Tensor(DataType::Float32, {1, 4, 5, 5})}, {"w", Tensor(DataType::Float32, {2, 4, 3, 3})}};
  struct Bad {
    std::map<std::string, Attribute> attrs;
    TensorMap feeds;
    std::string want;
  };
  TensorMap wrong_channels = ok;
  wrong_channels["w"] = Tensor(DataType::Float32, {2, 3, 3, 3});
  TensorMap wrong_rank = ok;
  wrong_rank["w"] = Tensor(DataType::Float32, {2, 4, 3});
  TensorMap bad_bias = ok;
  bad_bias["b"] = Tensor(DataType::Float32, {3});
  TensorMap bias_rank = ok;
  bias_rank["b"] = Tensor(DataType::Float32, {2, 1});
  TensorMap int_input = ok;
  int_input["x"] = Tensor(DataType::Int64, {1, 4, 5, 5});
  TensorMap big_kernel = ok;
  big_kernel["w"] = Tensor(DataType::Float32, {2, 4, 7, 3});
  TensorMap odd_group = ok;
  odd_group["w"] = Tensor(DataType::Float32, {3, 2, 3, 3});
  const Bad cases[] = {
      {{{"pads", Attribute::of_ints({1, -1, 1, 1})}}, ok, "attribute 'pads' must be >= 0"},
      {{{"pads", Attribute::of_ints({1, 1})}}, ok, "attribute 'pads' has 2 values, expected 4"},
      {{{"strides", Attribute::of_ints({1, 0})}}, ok, "attribute 'strides' must be >= 1"},
      {{{"dilations", Attribute::of_ints({0, 1})}}, ok, "attribute 'dilations' must be >= 1"},
      {{{"dilations", Attribute::of_ints({3, 1})}}, ok, "is larger than the padded input 5"},
      {{}, big_kernel, "is larger than the padded input 5"},
      {{{"group", Attribute::of_int(0)}}, ok, "attribute 'group' must be >= 1"},
      {{}, wrong_channels, "has 4 channels but weights [2,3,3,3] with group 1 expect 3"},
      {{{"group", Attribute::of_int(2)}}, odd_group, "not divisible by group 2"},
      {{}, wrong_rank, "(weights) must have rank 4"},
      {{}, bad_bias, "(bias) has 3 values, expected 2"},
      {{}, bias_rank, "(bias) must have rank 1"},
      {{}, int_input, "must be float32 or float64, got int64"},
      {{{"kernel_shape", Attribute::of_ints({3, 2})}}, ok, "attribute 'kernel_shape' [3,2] does not match weights"},
      {{{"auto_pad", Attribute::of_string("SAME")}}, ok, "attribute 'auto_pad' must be NOTSET"},
      {{{"auto_pad", Attribute::of_string("VALID")}, {"pads", Attribute::of_ints({1, 1, 1, 1})}},
       ok,
       "cannot be used together"},
  };
  for (const Bad& c : cases) {
    std::vector<std::string> inputs{"x", "w"};
    if (c.feeds.count("b")) inputs.push_back("b");
    Node n = make_node("Conv", inputs, {"y"}, c.attrs);
    ErrorKind kind = ErrorKind::Internal;
    std::string msg = error_of(n, c.feeds, &kind);
    CAPTURE(msg);
    CHECK(msg.find("'Conv_test' (Conv)") != std::string::npos);
    CHECK(msg.find(c.want) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
    CHECK(kind == ErrorKind::BadInput);
  }

  // 4-D convolution is valid ONNX that trainrt does not implement (1-D to 3-D are)
  {
    ErrorKind kind = ErrorKind::Internal;
    std::string msg = error_of(
        make_node("Conv", {"x", "w"}, {"y"}),
        {{"x", Tensor(DataType::Float32, {1, 4, 5, 5, 5, 5})}, {"w", Tensor(DataType::Float32, {2, 4, 3, 3, 3, 3})}},
        &kind);
    CHECK(kind == ErrorKind::Unsupported);
    CHECK(msg.find("'Conv_test' (Conv)") != std::string::npos);
    CHECK(msg.find("Conv over 4 spatial dims is not implemented (1 to 3 are)") != std::string::npos);
  }
  // A weight rank that differs from the input's is BadInput.
  {
    ErrorKind kind = ErrorKind::Internal;
    std::string msg =
        error_of(make_node("Conv", {"x", "w"}, {"y"}),
                 {{"x", Tensor(DataType::Float32, {1, 4, 5})}, {"w", Tensor(DataType::Float32, {2, 4, 3, 3})}}, &kind);
    CHECK(kind == ErrorKind::BadInput);
    CHECK(msg.find("must have rank 3 (M,C/group,kernel...) like the input, got rank 4") != std::string::npos);
  }
}

TEST_CASE("Conv: symbolic batch propagates; FLOPs = 2*N*M*Ho*Wo*C/group*kH*kW") {
  Graph g;
  g.opsets[""] = 13;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DataType::Float32, Shape{Dim::sym("N"), Dim::of(6), Dim::of(32), Dim::of(32)}};
  g.initializers["w"] = Tensor(DataType::Float32, {8, 3, 3, 3});
  g.values["w"] = ValueInfo{DataType::Float32, shape_of({8, 3, 3, 3})};
  g.nodes.push_back(make_node("Conv", {"x", "w"}, {"y"},
                              {{"pads", Attribute::of_ints({1, 1, 1, 1})},
                               {"strides", Attribute::of_ints({2, 2})},
                               {"group", Attribute::of_int(2)}}));
  g.outputs = {"y"};
  validate_graph(g, registry().schemas, "test");
  infer_shapes(g, registry().schemas, "test");
  CHECK(shape_to_string(*g.info("y").shape) == "[N,8,16,16]");
  const OpSchema* s = registry().schemas.find("", "Conv");
  REQUIRE(s);
  CHECK(s->since_version == 11);
  CHECK(s->flops(g, g.nodes[0]) == 0);  // unknown batch: not counted

  Graph concrete = specialize(g, {{"x", Tensor(DataType::Float32, {2, 6, 32, 32})}});
  CHECK(concrete.info("y").shape == shape_of({2, 8, 16, 16}));
  CHECK(s->flops(concrete, concrete.nodes[0]) == 2.0 * 2 * 8 * 16 * 16 * 3 * 3 * 3);
}
