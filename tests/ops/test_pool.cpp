// MaxPool, AveragePool, GlobalAveragePool: hand-computed cases (ceil_mode, pads,
// count_include_pad, Indices), a padded-copy oracle in fp64, errors, symbolic batch.
#include <doctest/doctest.h>

#include <fstream>
#include <limits>
#include <sstream>

#include "golden_files.h"
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

Tensor iota(DataType t, std::vector<int64_t> dims) {
  Tensor x(t, std::move(dims));
  for (int64_t i = 0; i < x.numel(); ++i) x.set_from_double(i, static_cast<double>(i + 1));
  return x;
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

// 2-D oracle: copy x into a (large enough) padded plane with a fill value, then
// reduce each window. `real` marks input pixels, `inpad` input-or-pad pixels.
struct PoolOracle {
  bool max;
  bool include_pad;
  std::vector<int64_t> k, s, pads;  // pads: top, left, bottom, right
  int64_t Ho, Wo;
  Tensor operator()(const Tensor& x) const {
    const int64_t P = x.dims()[0] * x.dims()[1], H = x.dims()[2], W = x.dims()[3];
    const int64_t HP = Ho * s[0] + k[0] + H, WP = Wo * s[1] + k[1] + W;  // room for ceil windows
    Tensor y(DataType::Float64, {x.dims()[0], x.dims()[1], Ho, Wo});
    for (int64_t p = 0; p < P; ++p) {
      std::vector<double> val(HP * WP, 0.0);
      std::vector<int> real(HP * WP, 0), inpad(HP * WP, 0);
      for (int64_t h = 0; h < HP; ++h)
        for (int64_t w = 0; w < WP; ++w) {
          const int64_t ih = h - pads[0], iw = w - pads[1];
          inpad[h * WP + w] = ih < H + pads[2] && iw < W + pads[3];
          if (ih >= 0 && iw >= 0 && ih < H && iw < W) {
            real[h * WP + w] = 1;
            val[h * WP + w] = x.get_as_double((p * H + ih) * W + iw);
          }
        }
      for (int64_t oh = 0; oh < Ho; ++oh)
        for (int64_t ow = 0; ow < Wo; ++ow) {
          double best = -std::numeric_limits<double>::infinity(), sum = 0;
          int n_real = 0, n_pad = 0;
          for (int64_t i = 0; i < k[0]; ++i)
            for (int64_t j = 0; j < k[1]; ++j) {
              const int64_t q = (oh * s[0] + i) * WP + ow * s[1] + j;
              n_pad += inpad[q];
              if (!real[q]) continue;
              n_real++;
              sum += val[q];
              best = std::max(best, val[q]);
            }
          y.set_from_double((p * Ho + oh) * Wo + ow, max ? best : sum / (include_pad ? n_pad : n_real));
        }
    }
    return y;
  }
};

}  // namespace

TEST_CASE("MaxPool: ceil_mode, dilations and Indices by hand") {
  Tensor x = iota(DataType::Float32, {1, 1, 4, 4});
  Node ceil = make_node("MaxPool", {"x"}, {"y", "i"},
                        {{"kernel_shape", Attribute::of_ints({3, 3})},
                         {"strides", Attribute::of_ints({2, 2})},
                         {"ceil_mode", Attribute::of_int(1)}});
  TensorMap out = run_node(ceil, {{"x", x}}, "reference");
  CHECK(max_abs_diff(out["y"], tensor_of(DataType::Float32, {1, 1, 2, 2}, {11, 12, 15, 16})) == 0);
  CHECK(out["i"].dtype() == DataType::Int64);
  CHECK(max_abs_diff(out["i"], tensor_of(DataType::Int64, {1, 1, 2, 2}, {10, 11, 14, 15})) == 0);

  ceil.attrs["ceil_mode"] = Attribute::of_int(0);
  out = run_node(ceil, {{"x", x}}, "reference");
  CHECK(max_abs_diff(out["y"], tensor_of(DataType::Float32, {1, 1, 1, 1}, {11})) == 0);

  Node dil = make_node("MaxPool", {"x"}, {"y"},
                       {{"kernel_shape", Attribute::of_ints({2, 2})}, {"dilations", Attribute::of_ints({2, 2})}});
  out = run_node(dil, {{"x", x}}, "reference");
  CHECK(max_abs_diff(out["y"], tensor_of(DataType::Float32, {1, 1, 2, 2}, {11, 12, 15, 16})) == 0);

  // a ceil_mode window that would start in the end padding is dropped: 4+1 pad, k2 s2 -> 2 windows, not 3
  Node drop = make_node("MaxPool", {"x"}, {"y"},
                        {{"kernel_shape", Attribute::of_ints({2, 2})},
                         {"strides", Attribute::of_ints({2, 2})},
                         {"pads", Attribute::of_ints({0, 0, 1, 1})},
                         {"ceil_mode", Attribute::of_int(1)}});
  out = run_node(drop, {{"x", x}}, "reference");
  CHECK(out["y"].dims() == std::vector<int64_t>{1, 1, 2, 2});
}

TEST_CASE("MaxPool: Indices include N and C offsets; storage_order 1 is column-major") {
  const std::vector<double> plane{1, 9, 2, 3, 4, 8, 7, 5, 6};
  std::vector<double> v = plane;
  for (double p : plane) v.push_back(p + 10);
  Tensor x = tensor_of(DataType::Float64, {1, 2, 3, 3}, v);
  Node n = make_node("MaxPool", {"x"}, {"y", "i"}, {{"kernel_shape", Attribute::of_ints({2, 2})}});
  TensorMap out = run_node(n, {{"x", x}}, "reference");
  CHECK(max_abs_diff(out["y"], tensor_of(DataType::Float64, {1, 2, 2, 2}, {9, 9, 7, 8, 19, 19, 17, 18})) == 0);
  CHECK(max_abs_diff(out["i"], tensor_of(DataType::Int64, {1, 2, 2, 2}, {1, 1, 6, 5, 10, 10, 15, 14})) == 0);
  n.attrs["storage_order"] = Attribute::of_int(1);
  out = run_node(n, {{"x", x}}, "reference");
  CHECK(max_abs_diff(out["i"], tensor_of(DataType::Int64, {1, 2, 2, 2}, {3, 3, 2, 7, 12, 12, 11, 16})) == 0);
}

TEST_CASE("MaxPool: storage_order 1 on 1-D and 3-D: column-major over the spatial dims") {
  // 3-D: x is 1,1,2,2,3 counting up and the 2x2x2 windows start at w = 0 and w = 1, so
  // their maxima are their last elements, (d,h,w) = (1,1,1) and (1,1,2): row-major
  // d*6 + h*3 + w = 10 and 11, column-major d + h*2 + w*4 = 7 and 11.
  Tensor x = iota(DataType::Float64, {1, 1, 2, 2, 3});
  Node n = make_node("MaxPool", {"x"}, {"y", "i"},
                     {{"kernel_shape", Attribute::of_ints({2, 2, 2})}, {"storage_order", Attribute::of_int(1)}});
  TensorMap out = run_node(n, {{"x", x}}, "reference");
  CHECK(max_abs_diff(out["i"], tensor_of(DataType::Int64, {1, 1, 1, 1, 2}, {7, 11})) == 0);
  n.attrs["storage_order"] = Attribute::of_int(0);
  out = run_node(n, {{"x", x}}, "reference");
  CHECK(max_abs_diff(out["i"], tensor_of(DataType::Int64, {1, 1, 1, 1, 2}, {10, 11})) == 0);
  // 1-D: both orders are the position in the row (plus the N,C offset).
  Node n1 = make_node("MaxPool", {"x"}, {"y", "i"},
                      {{"kernel_shape", Attribute::of_ints({2})}, {"storage_order", Attribute::of_int(1)}});
  out = run_node(n1, {{"x", tensor_of(DataType::Float64, {1, 2, 3}, {3, 1, 2, 0, 5, 4})}}, "reference");
  CHECK(max_abs_diff(out["i"], tensor_of(DataType::Int64, {1, 2, 2}, {0, 2, 4, 4})) == 0);
}

TEST_CASE("GlobalMaxPool: plane maxima over 1 to 3 spatial dims; the gradient goes to the first maximum") {
  Tensor x = tensor_of(DataType::Float64, {1, 2, 4}, {1, 5, 5, 2, -3, -1, -2, -4});
  TensorMap out = run_node(make_node("GlobalMaxPool", {"x"}, {"y"}), {{"x", x}}, "reference");
  CHECK(max_abs_diff(out["y"], tensor_of(DataType::Float64, {1, 2, 1}, {5, -1})) == 0);
  Node g = make_node("GlobalMaxPoolGrad", {"dy", "x"}, {"dx"}, {}, kTrainrtDomain);
  out = run_node(g, {{"dy", tensor_of(DataType::Float64, {1, 2, 1}, {2, 3})}, {"x", x}}, "reference");
  CHECK(max_abs_diff(out["dx"], tensor_of(DataType::Float64, {1, 2, 4}, {0, 2, 0, 0, 0, 3, 0, 0})) == 0);
  Tensor x3 = random_tensor(DataType::Float32, {2, 3, 2, 3, 4}, 9);
  out = run_node(make_node("GlobalMaxPool", {"x"}, {"y"}), {{"x", x3}}, "reference");
  REQUIRE(out["y"].dims() == std::vector<int64_t>{2, 3, 1, 1, 1});
  for (int64_t p = 0; p < 6; ++p) {
    double m = x3.get_as_double(p * 24);
    for (int64_t i = 1; i < 24; ++i) m = std::max(m, x3.get_as_double(p * 24 + i));
    CHECK(out["y"].get_as_double(p) == m);
  }
}

TEST_CASE("AveragePool: pads with and without count_include_pad, ceil overhang") {
  Tensor x = iota(DataType::Float64, {1, 1, 3, 3});
  Node n = make_node("AveragePool", {"x"}, {"y"},
                     {{"kernel_shape", Attribute::of_ints({2, 2})},
                      {"strides", Attribute::of_ints({2, 2})},
                      {"pads", Attribute::of_ints({1, 1, 1, 1})}});
  TensorMap out = run_node(n, {{"x", x}}, "reference");
  CHECK(max_abs_diff(out["y"], tensor_of(DataType::Float64, {1, 1, 2, 2}, {1, 2.5, 5.5, 7})) == 0);
  n.attrs["count_include_pad"] = Attribute::of_int(1);
  out = run_node(n, {{"x", x}}, "reference");
  CHECK(max_abs_diff(out["y"], tensor_of(DataType::Float64, {1, 1, 2, 2}, {0.25, 1.25, 2.75, 7})) == 0);

  // 1-D, 5 values, k2 s2 ceil_mode, one end pad: windows [1,2] [3,4] [5,pad]
  Tensor r = iota(DataType::Float64, {1, 1, 5});
  Node c = make_node("AveragePool", {"x"}, {"y"},
                     {{"kernel_shape", Attribute::of_ints({2})},
                      {"strides", Attribute::of_ints({2})},
                      {"pads", Attribute::of_ints({0, 1})},
                      {"ceil_mode", Attribute::of_int(1)}});
  out = run_node(c, {{"x", r}}, "reference");
  CHECK(max_abs_diff(out["y"], tensor_of(DataType::Float64, {1, 1, 3}, {1.5, 3.5, 5})) == 0);
  c.attrs["count_include_pad"] = Attribute::of_int(1);
  out = run_node(c, {{"x", r}}, "reference");
  CHECK(max_abs_diff(out["y"], tensor_of(DataType::Float64, {1, 1, 3}, {1.5, 3.5, 2.5})) == 0);
  // no end pad: the ceil overhang is not padding, so it is never counted
  c.attrs["pads"] = Attribute::of_ints({0, 0});
  out = run_node(c, {{"x", r}}, "reference");
  CHECK(max_abs_diff(out["y"], tensor_of(DataType::Float64, {1, 1, 3}, {1.5, 3.5, 5})) == 0);
}

namespace {

// Golden pooling cases, computed tap by tap from the spec's definition in float64:
// tests/data/avgpool_dilations.txt (tools/golden_avgpool_dilations.py: AveragePool-19 with
// dilations) and tests/data/lppool.txt (tools/golden_lppool.py: LpPool-18).
struct GoldenPool {
  std::string what;
  std::map<std::string, Attribute> attrs;
  Tensor x, y, dy, dx;
};

std::vector<GoldenPool> load_golden_pools(const std::string& file) {
  std::ifstream in(golden_file(std::string(TRAINRT_TEST_DATA) + "/" + file));
  REQUIRE(in);
  std::vector<GoldenPool> cases;
  std::vector<int64_t> x_shape, y_shape;
  const auto ints_of = [](const std::string& csv) {
    std::vector<int64_t> v;
    std::istringstream ss(csv);
    for (std::string t; std::getline(ss, t, ',');) v.push_back(std::stoll(t));
    return v;
  };
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream ls(line);
    std::string kind;
    ls >> kind;
    if (kind.empty() || kind[0] == '#') continue;
    if (kind == "case") {
      cases.emplace_back();
      cases.back().what = line.substr(5);
      for (std::string kv; ls >> kv;) {
        const std::string key = kv.substr(0, kv.find('=')), value = kv.substr(kv.find('=') + 1);
        if (key == "auto_pad")
          cases.back().attrs[key] = Attribute::of_string(value);
        else if (key == "ceil_mode" || key == "count_include_pad" || key == "p")
          cases.back().attrs[key] = Attribute::of_int(std::stoll(value));
        else
          cases.back().attrs[key] = Attribute::of_ints(ints_of(value));
      }
      continue;
    }
    std::vector<double> v;
    for (double d; ls >> d;) v.push_back(d);
    if (kind == "x_shape" || kind == "y_shape") {
      (kind == "x_shape" ? x_shape : y_shape).assign(v.begin(), v.end());
      continue;
    }
    REQUIRE(!cases.empty());
    Tensor t = tensor_of(DataType::Float64, kind == "x" || kind == "dx" ? x_shape : y_shape, v);
    if (kind == "x") cases.back().x = t;
    if (kind == "y") cases.back().y = t;
    if (kind == "dy") cases.back().dy = t;
    if (kind == "dx") cases.back().dx = t;
  }
  return cases;
}

Tensor as_f32(const Tensor& t) {
  Tensor r(DataType::Float32, t.dims());
  for (int64_t i = 0; i < t.numel(); ++i) r.data<float>()[i] = static_cast<float>(t.data<double>()[i]);
  return r;
}

}  // namespace

TEST_CASE("AveragePool-19 dilations: reference and cpu against the spec's tap-by-tap golden data, with the gradient") {
  const std::vector<GoldenPool> cases = load_golden_pools("avgpool_dilations.txt");
  REQUIRE(cases.size() == 12);
  for (const GoldenPool& c : cases) {
    CAPTURE(c.what);
    const Node fwd = make_node("AveragePool", {"x"}, {"y"}, c.attrs);
    const Node bwd = make_node("AveragePoolGrad", {"dy", "x"}, {"dx"}, c.attrs, kTrainrtDomain);
    // fp64 on the reference backend: the golden values to rounding.
    CHECK(max_abs_diff(run_node(fwd, {{"x", c.x}}, "reference").at("y"), c.y) < 1e-12);
    CHECK(max_abs_diff(run_node(bwd, {{"dy", c.dy}, {"x", c.x}}, "reference").at("dx"), c.dx) < 1e-12);
    // fp32 on both backends (the cpu one's oneDNN pooling_v2 with dilation).
    const Tensor x32 = as_f32(c.x), dy32 = as_f32(c.dy);
    for (const char* backend : {"reference", "cpu"}) {
      CAPTURE(std::string(backend));
      CHECK(max_abs_diff(run_node(fwd, {{"x", x32}}, backend).at("y"), c.y) < 1e-5);
      CHECK(max_abs_diff(run_node(bwd, {{"dy", dy32}, {"x", x32}}, backend).at("dx"), c.dx) < 1e-5);
    }
  }
}

TEST_CASE("AveragePool-19 dilations by hand: taps past the end pad and taps that skip the input") {
  // 1-D, 11 values 1..11, k2 dilation 3 stride 2, pads 1,1, ceil_mode: windows start at
  // -1, 1, ..., 9 with taps (start, start + 3); the last one's tap 12 lies past the end
  // pad, so it never counts; the first one's tap -1 is padding.
  Tensor x = iota(DataType::Float64, {1, 1, 11});
  Node n = make_node("AveragePool", {"x"}, {"y"},
                     {{"kernel_shape", Attribute::of_ints({2})},
                      {"strides", Attribute::of_ints({2})},
                      {"dilations", Attribute::of_ints({3})},
                      {"pads", Attribute::of_ints({1, 1})},
                      {"ceil_mode", Attribute::of_int(1)}});
  TensorMap out = run_node(n, {{"x", x}}, "reference");
  CHECK(max_abs_diff(out["y"], tensor_of(DataType::Float64, {1, 1, 6}, {3, 3.5, 5.5, 7.5, 9.5, 10})) == 0);
  n.attrs["count_include_pad"] = Attribute::of_int(1);
  out = run_node(n, {{"x", x}}, "reference");
  CHECK(max_abs_diff(out["y"], tensor_of(DataType::Float64, {1, 1, 6}, {1.5, 3.5, 5.5, 7.5, 9.5, 10})) == 0);
  // Its gradient, dY = 1: every tap on x gets 1/2, x[9] (the last window's only
  // counted tap) 1, x[0] (no window's tap) 0.
  Tensor dy = tensor_of(DataType::Float64, {1, 1, 6}, {1, 1, 1, 1, 1, 1});
  Node g = make_node("AveragePoolGrad", {"dy", "x"}, {"dx"}, n.attrs, kTrainrtDomain);
  CHECK(max_abs_diff(run_node(g, {{"dy", dy}, {"x", x}}, "reference").at("dx"),
                     tensor_of(DataType::Float64, {1, 1, 11}, {0, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 0.5, 1, 0.5})) ==
        0);

  // One value, k2 dilation 2, pads 1,1: the one window's taps -1 and 1 both miss x. Its
  // mean over real elements is 0/0 (NaN); with count_include_pad it is 0/2.
  Node e = make_node("AveragePool", {"x"}, {"y"},
                     {{"kernel_shape", Attribute::of_ints({2})},
                      {"dilations", Attribute::of_ints({2})},
                      {"pads", Attribute::of_ints({1, 1})}});
  const Tensor one = iota(DataType::Float64, {1, 1, 1});
  CHECK(std::isnan(run_node(e, {{"x", one}}, "reference").at("y").data<double>()[0]));
  e.attrs["count_include_pad"] = Attribute::of_int(1);
  CHECK(run_node(e, {{"x", one}}, "reference").at("y").data<double>()[0] == 0);
}

TEST_CASE("LpPool-18: reference and cpu against the spec's tap-by-tap golden data, with the gradient") {
  const std::vector<GoldenPool> cases = load_golden_pools("lppool.txt");
  REQUIRE(cases.size() == 10);
  for (const GoldenPool& c : cases) {
    CAPTURE(c.what);
    const Node fwd = make_node("LpPool", {"x"}, {"y"}, c.attrs);
    const Node bwd = make_node("LpPoolGrad", {"dy", "x", "y"}, {"dx"}, c.attrs, kTrainrtDomain);
    // fp64, both backends (the cpu one runs the reference's loops over parallel planes).
    for (const char* backend : {"reference", "cpu"}) {
      CAPTURE(std::string(backend));
      CHECK(max_abs_diff(run_node(fwd, {{"x", c.x}}, backend).at("y"), c.y) < 1e-12);
      CHECK(max_abs_diff(run_node(bwd, {{"dy", c.dy}, {"x", c.x}, {"y", c.y}}, backend).at("dx"), c.dx) < 1e-12);
    }
    const Tensor x32 = as_f32(c.x);
    CHECK(max_abs_diff(run_node(fwd, {{"x", x32}}, "cpu").at("y"), c.y) < 1e-5);
  }
}

TEST_CASE("LpPool: p 1, 2 and 3 by hand; a window of zeros sends no gradient; cpu equals the reference bit for bit") {
  // 1-D [3, -4, 0, 0], k2 s2: windows (3, -4) and (0, 0).
  const Tensor x = tensor_of(DataType::Float64, {1, 1, 4}, {3, -4, 0, 0});
  const Tensor dy = tensor_of(DataType::Float64, {1, 1, 2}, {1, 1});
  struct Case {
    int64_t p;
    double y0;
    std::vector<double> dx;  // dY * sign(x) |x|^(p-1) / Y^(p-1); nothing from the zero window
  };
  for (const Case& c : {Case{1, 7, {1, -1, 0, 0}}, Case{2, 5, {0.6, -0.8, 0, 0}},
                        Case{3, std::cbrt(91.0), {9 / std::pow(91.0, 2.0 / 3), -16 / std::pow(91.0, 2.0 / 3), 0, 0}}}) {
    CAPTURE(c.p);
    const std::map<std::string, Attribute> a{
        {"kernel_shape", Attribute::of_ints({2})}, {"strides", Attribute::of_ints({2})}, {"p", Attribute::of_int(c.p)}};
    const Tensor y = run_node(make_node("LpPool", {"x"}, {"y"}, a), {{"x", x}}, "reference").at("y");
    CHECK(std::fabs(y.data<double>()[0] - c.y0) < 1e-12);
    CHECK(y.data<double>()[1] == 0);
    const Tensor dx = run_node(make_node("LpPoolGrad", {"dy", "x", "y"}, {"dx"}, a, kTrainrtDomain),
                               {{"dy", dy}, {"x", x}, {"y", y}}, "reference")
                          .at("dx");
    CHECK(max_abs_diff(dx, tensor_of(DataType::Float64, {1, 1, 4}, c.dx)) < 1e-12);
  }
  // Planes enough for the cpu kernel to split them across threads: the same bits.
  const Tensor big = random_tensor(DataType::Float32, {4, 16, 20, 20}, 5);
  const std::map<std::string, Attribute> a{{"kernel_shape", Attribute::of_ints({3, 3})},
                                           {"strides", Attribute::of_ints({2, 2})},
                                           {"pads", Attribute::of_ints({1, 1, 1, 1})},
                                           {"p", Attribute::of_int(3)}};
  const Node fwd = make_node("LpPool", {"x"}, {"y"}, a);
  const Tensor y = run_node(fwd, {{"x", big}}, "reference").at("y");
  CHECK(max_abs_diff(run_node(fwd, {{"x", big}}, "cpu").at("y"), y) == 0);
  const Tensor dy2 = random_tensor(DataType::Float32, y.dims(), 6);
  const Node bwd = make_node("LpPoolGrad", {"dy", "x", "y"}, {"dx"}, a, kTrainrtDomain);
  CHECK(max_abs_diff(run_node(bwd, {{"dy", dy2}, {"x", big}, {"y", y}}, "cpu").at("dx"),
                     run_node(bwd, {{"dy", dy2}, {"x", big}, {"y", y}}, "reference").at("dx")) == 0);
}

TEST_CASE("ONNX's newer node tests with spelled-out values: AveragePool-19 and LpPool-18 dilations, a ceil window") {
  // The inputs and expected outputs of test_averagepool_2d_dilations,
  // test_averagepool_3d_dilations_small, test_averagepool_2d_ceil_last_window_starts_on_pad
  // (expected values given to 4 digits) and test_lppool_2d_dilations: opsets newer than the
  // ONNX 1.12 data the conformance runner reads.
  std::vector<double> ramp;
  for (int i = 1; i <= 16; ++i) ramp.push_back(i);
  std::vector<double> cube;
  for (int d = 0; d < 4; ++d) cube.insert(cube.end(), ramp.begin(), ramp.end());
  const auto ints = [](std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); };
  struct Case {
    const char* name;
    const char* op;
    std::map<std::string, Attribute> attrs;
    Tensor x, y;
    double tol;
  };
  const std::vector<Case> cases = {
      {"test_averagepool_2d_dilations",
       "AveragePool",
       {{"kernel_shape", ints({2, 2})},
        {"strides", ints({1, 1})},
        {"dilations", ints({2, 2})},
        {"ceil_mode", Attribute::of_int(1)}},
       tensor_of(DataType::Float32, {1, 1, 4, 4}, ramp),
       tensor_of(DataType::Float32, {1, 1, 2, 2}, {6, 7, 10, 11}),
       0},
      {"test_averagepool_3d_dilations_small",
       "AveragePool",
       {{"kernel_shape", ints({2, 2, 2})},
        {"strides", ints({1, 1, 1})},
        {"dilations", ints({2, 2, 2})},
        {"ceil_mode", Attribute::of_int(1)}},
       tensor_of(DataType::Float32, {1, 1, 4, 4, 4}, cube),
       tensor_of(DataType::Float32, {1, 1, 2, 2, 2}, {6, 7, 10, 11, 6, 7, 10, 11}),
       0},
      {"test_averagepool_2d_ceil_last_window_starts_on_pad",
       "AveragePool",
       {{"kernel_shape", ints({3, 3})},
        {"strides", ints({3, 3})},
        {"pads", ints({1, 1, 1, 1})},
        {"ceil_mode", Attribute::of_int(1)},
        {"count_include_pad", Attribute::of_int(1)}},
       tensor_of(DataType::Float32, {1, 3, 2, 2},
                 {0.8580, 0.0786, 0.2692, 0.1537, 0.8816, 0.4353, 0.5772, 0.6623, 0.9067, 0.9483, 0.5970, 0.7630}),
       tensor_of(DataType::Float32, {1, 3, 1, 1}, {0.1511, 0.2841, 0.3572}),
       1e-4},
      {"test_lppool_2d_dilations",
       "LpPool",
       {{"kernel_shape", ints({2, 2})},
        {"strides", ints({1, 1})},
        {"dilations", ints({2, 2})},
        {"p", Attribute::of_int(2)}},
       tensor_of(DataType::Float32, {1, 1, 4, 4}, ramp),
       tensor_of(DataType::Float32, {1, 1, 2, 2},
                 {14.560219778561036, 16.24807680927192, 21.633307652783937, 23.49468024894146}),
       1e-5},
  };
  for (const Case& c : cases)
    for (const char* backend : {"reference", "cpu"}) {
      CAPTURE(std::string(c.name));
      CAPTURE(std::string(backend));
      const Tensor y = run_node(make_node(c.op, {"x"}, {"y"}, c.attrs), {{"x", c.x}}, backend).at("y");
      CHECK(max_abs_diff(y, c.y) <= c.tol);
    }
}

TEST_CASE("MaxPool and AveragePool: fp64 against the padded-copy oracle, fp32 alike") {
  struct Case {
    std::vector<int64_t> k, s, pads;
    bool ceil;
    int64_t H, W;
  };
  const Case cases[] = {
      {{3, 3}, {2, 2}, {1, 1, 1, 1}, false, 8, 7},
      {{3, 2}, {2, 3}, {0, 1, 2, 1}, true, 9, 8},
      {{2, 2}, {2, 2}, {0, 0, 0, 0}, true, 7, 7},
      {{4, 4}, {1, 1}, {2, 1, 1, 2}, false, 5, 6},
  };
  uint64_t seed = 100;
  for (const Case& c : cases) {
    Tensor x = random_tensor(DataType::Float64, {2, 3, c.H, c.W}, seed++);
    auto out_size = [&](int64_t in, int i) {
      const int64_t padded = in + c.pads[i] + c.pads[i + 2] - c.k[i];
      int64_t o = (c.ceil ? (padded + c.s[i] - 1) / c.s[i] : padded / c.s[i]) + 1;
      if ((o - 1) * c.s[i] >= in + c.pads[i]) --o;
      return o;
    };
    const int64_t Ho = out_size(c.H, 0), Wo = out_size(c.W, 1);
    for (const char* op : {"MaxPool", "AveragePool"})
      for (int include : {0, 1}) {
        const bool is_max = std::string(op) == "MaxPool";
        if (is_max && include) continue;
        std::map<std::string, Attribute> attrs{{"kernel_shape", Attribute::of_ints(c.k)},
                                               {"strides", Attribute::of_ints(c.s)},
                                               {"pads", Attribute::of_ints(c.pads)},
                                               {"ceil_mode", Attribute::of_int(c.ceil)}};
        if (!is_max) attrs["count_include_pad"] = Attribute::of_int(include);
        Node n = make_node(op, {"x"}, {"y"}, attrs);
        Tensor want = PoolOracle{is_max, include == 1, c.k, c.s, c.pads, Ho, Wo}(x);
        CAPTURE(op);
        CAPTURE(include);
        CHECK(max_abs_diff(run_node(n, {{"x", x}}, "reference")["y"], want) < 1e-14);
        CHECK(max_abs_diff(run_node(n, {{"x", x.cast(DataType::Float32)}}, "reference")["y"], want) < 1e-6);
      }
  }
}

TEST_CASE("Pooling: auto_pad, 1-D, 3-D, uint8 MaxPool") {
  Tensor x = iota(DataType::Float32, {1, 1, 4, 4});
  // SAME_UPPER k2 s1 on 4: pad 1 at the end -> the last row/col pools with padding only
  Node up = make_node("MaxPool", {"x"}, {"y"},
                      {{"kernel_shape", Attribute::of_ints({2, 2})}, {"auto_pad", Attribute::of_string("SAME_UPPER")}});
  TensorMap out = run_node(up, {{"x", x}}, "reference");
  CHECK(max_abs_diff(out["y"], tensor_of(DataType::Float32, {1, 1, 4, 4},
                                         {6, 7, 8, 8, 10, 11, 12, 12, 14, 15, 16, 16, 14, 15, 16, 16})) == 0);
  Node low = up;
  low.attrs["auto_pad"] = Attribute::of_string("SAME_LOWER");
  low.op_type = "AveragePool";
  out = run_node(low, {{"x", x}}, "reference");
  CHECK(max_abs_diff(out["y"],
                     tensor_of(DataType::Float32, {1, 1, 4, 4},
                               {1, 1.5, 2.5, 3.5, 3, 3.5, 4.5, 5.5, 7, 7.5, 8.5, 9.5, 11, 11.5, 12.5, 13.5})) == 0);

  Tensor cube = iota(DataType::Float64, {1, 1, 2, 2, 2});
  std::map<std::string, Attribute> k3{{"kernel_shape", Attribute::of_ints({2, 2, 2})}};
  CHECK(run_node(make_node("MaxPool", {"x"}, {"y"}, k3), {{"x", cube}}, "reference")["y"].get_as_double(0) == 8);
  CHECK(run_node(make_node("AveragePool", {"x"}, {"y"}, k3), {{"x", cube}}, "reference")["y"].get_as_double(0) == 4.5);

  Tensor line = tensor_of(DataType::Float32, {1, 1, 5}, {3, 1, 4, 1, 5});
  out = run_node(make_node("MaxPool", {"x"}, {"y"}, {{"kernel_shape", Attribute::of_ints({2})}}), {{"x", line}},
                 "reference");
  CHECK(max_abs_diff(out["y"], tensor_of(DataType::Float32, {1, 1, 4}, {3, 4, 4, 5})) == 0);

  Tensor bytes = tensor_of(DataType::UInt8, {1, 1, 2, 2}, {200, 3, 255, 0});
  out = run_node(make_node("MaxPool", {"x"}, {"y"}, {{"kernel_shape", Attribute::of_ints({2, 2})}}), {{"x", bytes}},
                 "reference");
  CHECK(out["y"].dtype() == DataType::UInt8);
  CHECK(out["y"].get_as_double(0) == 255);
}

TEST_CASE("GlobalAveragePool: plane means, symbolic batch") {
  Tensor x = random_tensor(DataType::Float64, {2, 3, 4, 5}, 7);
  TensorMap out = run_node(make_node("GlobalAveragePool", {"x"}, {"y"}), {{"x", x}}, "reference");
  REQUIRE(out["y"].dims() == std::vector<int64_t>{2, 3, 1, 1});
  for (int64_t p = 0; p < 6; ++p) {
    double sum = 0;
    for (int64_t i = 0; i < 20; ++i) sum += x.get_as_double(p * 20 + i);
    CHECK(out["y"].get_as_double(p) == doctest::Approx(sum / 20).epsilon(1e-14));
  }
}

TEST_CASE("Pooling: bad attributes give one-line errors naming the node") {
  const TensorMap ok{{"x", Tensor(DataType::Float32, {1, 2, 5, 5})}};
  struct Bad {
    const char* op;
    std::map<std::string, Attribute> attrs;
    TensorMap feeds;
    std::string want;
  };
  auto k = [](std::vector<int64_t> v) { return Attribute::of_ints(std::move(v)); };
  const Bad cases[] = {
      {"MaxPool", {}, ok, "attribute 'kernel_shape' is required"},
      {"MaxPool", {{"kernel_shape", k({2})}}, ok, "attribute 'kernel_shape' has 1 values, expected 2"},
      {"MaxPool", {{"kernel_shape", k({2, 0})}}, ok, "attribute 'kernel_shape' must be >= 1"},
      {"MaxPool", {{"kernel_shape", k({2, 2})}, {"pads", k({0, -1, 0, 0})}}, ok, "attribute 'pads' must be >= 0"},
      {"AveragePool", {{"kernel_shape", k({2, 2})}, {"strides", k({0, 1})}}, ok, "attribute 'strides' must be >= 1"},
      {"MaxPool", {{"kernel_shape", k({2, 2})}, {"dilations", k({1, 0})}}, ok, "attribute 'dilations' must be >= 1"},
      {"MaxPool", {{"kernel_shape", k({2, 2})}, {"pads", k({2, 0, 0, 0})}}, ok, "must be smaller than 'kernel_shape'"},
      {"AveragePool", {{"kernel_shape", k({6, 2})}}, ok, "is larger than the padded input 5"},
      {"MaxPool", {{"kernel_shape", k({3, 3})}, {"dilations", k({3, 1})}}, ok, "is larger than the padded input 5"},
      {"MaxPool",
       {{"kernel_shape", k({2, 2})}, {"ceil_mode", Attribute::of_int(2)}},
       ok,
       "attribute 'ceil_mode' must be 0 or 1"},
      {"MaxPool",
       {{"kernel_shape", k({2, 2})}, {"storage_order", Attribute::of_int(3)}},
       ok,
       "attribute 'storage_order' must be 0 or 1"},
      {"AveragePool",
       {{"kernel_shape", k({2, 2})}, {"count_include_pad", Attribute::of_int(-1)}},
       ok,
       "attribute 'count_include_pad' must be 0 or 1"},
      {"AveragePool",
       {{"kernel_shape", k({2, 2})}, {"auto_pad", Attribute::of_string("same_upper")}},
       ok,
       "attribute 'auto_pad' must be NOTSET"},
      {"AveragePool", {{"kernel_shape", k({2})}}, {{"x", Tensor(DataType::Float32, {2, 5})}}, "must have rank >= 3"},
      {"AveragePool",
       {{"kernel_shape", k({2, 2})}},
       {{"x", Tensor(DataType::UInt8, {1, 1, 5, 5})}},
       "must be float32 or float64, got uint8"},
      {"GlobalAveragePool", {}, {{"x", Tensor(DataType::Float32, {2, 5})}}, "must have rank >= 3"},
      {"LpPool", {{"kernel_shape", k({2, 2})}, {"p", Attribute::of_int(0)}}, ok, "attribute 'p' must be >= 1, got 0"},
      {"LpPool", {{"kernel_shape", k({2, 2})}, {"pads", k({0, 2, 0, 0})}}, ok, "must be smaller than 'kernel_shape'"},
      {"LpPool",
       {{"kernel_shape", k({2, 2})}},
       {{"x", Tensor(DataType::Int8, {1, 1, 5, 5})}},
       "must be float32 or float64, got int8"},
  };
  for (const Bad& c : cases) {
    Node n = make_node(c.op, {"x"}, {"y"}, c.attrs);
    ErrorKind kind = ErrorKind::Internal;
    std::string msg = error_of(n, c.feeds, &kind);
    CAPTURE(msg);
    CHECK(msg.find(std::string("'") + c.op + "_test' (" + c.op + ")") != std::string::npos);
    CHECK(msg.find(c.want) != std::string::npos);
    CHECK(kind == ErrorKind::BadInput);
  }
  // AveragePool's dilations (opset 19) are checked as MaxPool's
  for (const auto& [d, want] : std::vector<std::pair<std::vector<int64_t>, std::string>>{
           {{0, 1}, "attribute 'dilations' must be >= 1, got [0,1]"},
           {{2, 2, 2}, "attribute 'dilations' has 3 values, expected 2 for 2 spatial dims"}}) {
    ErrorKind kind = ErrorKind::Internal;
    const std::string msg =
        error_of(make_node("AveragePool", {"x"}, {"y"}, {{"kernel_shape", k({2, 2})}, {"dilations", k(d)}}), ok, &kind);
    CAPTURE(msg);
    CHECK(kind == ErrorKind::BadInput);
    CHECK(msg.find("(AveragePool)") != std::string::npos);
    CHECK(msg.find(want) != std::string::npos);
    CHECK(msg.find('\n') == std::string::npos);
  }
}

TEST_CASE("Pooling: symbolic batch propagates through shape inference; FLOPs") {
  for (const char* op : {"MaxPool", "AveragePool", "GlobalAveragePool"}) {
    Graph g;
    g.opsets[""] = 13;
    g.inputs = {"x"};
    g.values["x"] = ValueInfo{DataType::Float32, Shape{Dim::sym("N"), Dim::of(3), Dim::of(8), Dim::of(8)}};
    std::map<std::string, Attribute> attrs;
    if (std::string(op) != "GlobalAveragePool")
      attrs = {{"kernel_shape", Attribute::of_ints({2, 2})}, {"strides", Attribute::of_ints({2, 2})}};
    const bool is_max = std::string(op) == "MaxPool";
    g.nodes.push_back(
        make_node(op, {"x"}, is_max ? std::vector<std::string>{"y", "i"} : std::vector<std::string>{"y"}, attrs));
    g.outputs = {"y"};
    validate_graph(g, registry().schemas, "test");
    infer_shapes(g, registry().schemas, "test");
    CAPTURE(op);
    const bool global = std::string(op) == "GlobalAveragePool";
    CHECK(shape_to_string(*g.info("y").shape) == (global ? "[N,3,1,1]" : "[N,3,4,4]"));
    if (is_max) CHECK(g.info("i").dtype == DataType::Int64);
    Graph c = specialize(g, {{"x", Tensor(DataType::Float32, {2, 3, 8, 8})}});
    const OpSchema* s = registry().schemas.find("", op);
    CHECK(s->flops(c, c.nodes[0]) == (global ? 2.0 * 3 * 8 * 8 : 2.0 * 3 * 4 * 4 * 4));
  }
  CHECK(registry().schemas.find("", "MaxPool")->since_version == 12);
  CHECK(registry().schemas.find("", "AveragePool")->since_version == 11);
}
