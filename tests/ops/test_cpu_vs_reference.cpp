// The cpu backend (oneDNN kernels, ops/*_cpu.cpp) against the reference backend,
// op by op: seeded random shapes and attributes (20 cases per op) plus the Wide
// ResNet's real layer shapes at batch 2.
//
// Tolerances (|cpu - ref| <= atol + rtol*|ref|), per op family. The reference
// accumulates in double, so the difference is the fp32 kernel's own error:
// - Conv/Gemm/MatMul: rtol 1e-4, atol 1e-5. Weights are scaled by 1/sqrt(fan_in)
//   (as in training), so outputs are O(1) and so are the partial sums; oneDNN sums
//   fan_in <= 5760 (640*3*3) products in fp32 in a blocked order, whose rounding
//   error behaves like a random walk: ~sqrt(5760) * 2^-24 * O(1) ~ 5e-6 at worst in
//   practice (the worst-case bound fan_in * 2^-24 ~ 3e-4 never occurs with random
//   signs). atol covers outputs near 0, where a relative bound means nothing.
// - BatchNormalization: rtol 1e-4, atol 1e-4: fp32 batch mean/variance over up to
//   N*H*W = 1568 values, then amplified by scale/sqrt(var+eps) (up to ~3 here).
//   LayerNormalization likewise (row statistics over up to 768 values).
// - Pools: rtol 1e-5, atol 1e-6 (a max is exact; a mean of <= 49 values).
// - Relu/LeakyRelu, Add/Sub/Mul/Div: rtol 1e-6, atol 0 (one correctly rounded op).
// - Sigmoid/Tanh/Softmax: rtol 1e-5, atol 1e-6 (oneDNN's vectorised exp/tanh
//   approximations are within a few ulp).
// - LogSoftmax: rtol 1e-5, atol 1e-5: y = x - max - log(sum) is computed from
//   intermediates as large as the input range (16 here), so its absolute error is a
//   few ulp of 16 (~2e-6) even where y itself is near 0.
#include <doctest/doctest.h>

#include <random>
#include <thread>

#include "ops/onednn/dnnl_util.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

struct Tol {
  double rtol, atol;
};
constexpr Tol kConvTol{1e-4, 1e-5};
constexpr Tol kNormTol{1e-4, 1e-4};
constexpr Tol kPoolTol{1e-5, 1e-6};
constexpr Tol kExactTol{1e-6, 0};
constexpr Tol kTranscTol{1e-5, 1e-6};
constexpr Tol kLogSoftmaxTol{1e-5, 1e-5};

// The op must have its schema and a cpu kernel, or this test cannot say anything.
void require_cpu_kernel(const char* op) {
  REQUIRE_MESSAGE(registry().schemas.find("", op) != nullptr, "no schema for ", op);
  REQUIRE_MESSAGE(registry().kernels.find("cpu", "", op) != nullptr, "no cpu kernel for ", op);
}

struct RunInfo {
  uint64_t fallbacks = 0;  // calls the cpu kernel sent to the reference kernel
};

// Runs `n` on both backends; every output must agree within `tol`.
RunInfo check_same(const Node& n, const TensorMap& feeds, Tol tol, bool training = false, int64_t opset = 17) {
  Graph g = single_node_graph(n, feeds, {}, opset);
  RunOptions opts;
  opts.training = training;
  TensorMap ref = run_graph(g, feeds, *make_backend("reference"), opts);
  uint64_t before = dnnl_util::reference_fallbacks();
  TensorMap cpu = run_graph(g, feeds, *make_backend("cpu"), opts);
  RunInfo info{dnnl_util::reference_fallbacks() - before};
  for (const auto& [name, r] : ref) {
    const Tensor& c = cpu.at(name);
    INFO(n.op_type, " output '", name, "' ", dims_to_string(r.dims()), ": max |cpu-ref| = ", max_abs_diff(c, r));
    CHECK(all_close(c, r, tol.rtol, tol.atol));
  }
  return info;
}

int64_t pick(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
}

// Random weights of fan-in `fan_in`, scaled to 1/sqrt(fan_in) (keeps outputs O(1)).
Tensor weights(std::vector<int64_t> dims, int64_t fan_in, uint64_t seed) {
  double a = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return random_tensor(DataType::Float32, std::move(dims), seed, -a, a);
}

// ---- Conv -----------------------------------------------------------------
Node conv_node(bool bias, std::map<std::string, Attribute> attrs) {
  std::vector<std::string> in{"x", "w"};
  if (bias) in.push_back("b");
  return make_node("Conv", in, {"y"}, std::move(attrs));
}

RunInfo check_conv(int64_t n, int64_t c, int64_t m, int64_t h, int64_t w, int64_t k, int64_t pad, bool bias,
                   uint64_t seed) {
  TensorMap feeds{{"x", random_tensor(DataType::Float32, {n, c, h, w}, seed)},
                  {"w", weights({m, c, k, k}, c * k * k, seed + 1)}};
  if (bias) feeds["b"] = random_tensor(DataType::Float32, {m}, seed + 2);
  return check_same(conv_node(bias, {{"pads", Attribute::of_ints({pad, pad, pad, pad})}}), feeds, kConvTol);
}

}  // namespace

TEST_CASE("cpu vs reference: Conv, random shapes and attributes") {
  require_cpu_kernel("Conv");
  std::mt19937_64 rng(1234);
  for (int i = 0; i < 20; ++i) {
    int64_t group = pick(rng, 0, 3) == 0 ? pick(rng, 2, 3) : 1;
    int64_t cg = pick(rng, 1, 4), mg = pick(rng, 1, 4);
    bool depthwise = pick(rng, 0, 5) == 0;
    if (depthwise) cg = 1, group = pick(rng, 2, 6);
    int64_t c = group * cg, m = group * mg, n = pick(rng, 1, 3);
    int64_t kh = pick(rng, 1, 3), kw = pick(rng, 1, 3);
    int64_t sh = pick(rng, 1, 2), sw = pick(rng, 1, 2), dh = pick(rng, 1, 2), dw = pick(rng, 1, 2);
    int64_t h = pick(rng, (kh - 1) * dh + 1, 12), w = pick(rng, (kw - 1) * dw + 1, 12);
    std::map<std::string, Attribute> attrs{{"strides", Attribute::of_ints({sh, sw})},
                                           {"dilations", Attribute::of_ints({dh, dw})}};
    if (group > 1) attrs["group"] = Attribute::of_int(group);
    int64_t mode = pick(rng, 0, 5);
    if (mode == 0)
      attrs["auto_pad"] = Attribute::of_string("SAME_UPPER");
    else if (mode == 1)
      attrs["auto_pad"] = Attribute::of_string("SAME_LOWER");
    else if (mode == 2)
      attrs["auto_pad"] = Attribute::of_string("VALID");
    else
      attrs["pads"] =
          Attribute::of_ints({pick(rng, 0, kh - 1), pick(rng, 0, kw - 1), pick(rng, 0, kh - 1), pick(rng, 0, kw - 1)});
    if (pick(rng, 0, 1)) attrs["kernel_shape"] = Attribute::of_ints({kh, kw});
    bool bias = pick(rng, 0, 1);
    CAPTURE(i);
    TensorMap feeds{{"x", random_tensor(DataType::Float32, {n, c, h, w}, 100 + i)},
                    {"w", weights({m, cg, kh, kw}, cg * kh * kw, 200 + i)}};
    if (bias) feeds["b"] = random_tensor(DataType::Float32, {m}, 300 + i);
    RunInfo info = check_same(conv_node(bias, attrs), feeds, kConvTol);
    CHECK(info.fallbacks == 0);
  }
}

TEST_CASE("cpu vs reference: Conv 1-D and 3-D, random shapes and attributes") {
  require_cpu_kernel("Conv");
  std::mt19937_64 rng(5678);
  for (int i = 0; i < 16; ++i) {
    const size_t sp = i % 2 ? 3 : 1;
    const int64_t group = pick(rng, 0, 2) == 0 ? 2 : 1;
    const int64_t cg = pick(rng, 1, 4), mg = pick(rng, 1, 4), c = group * cg, m = group * mg, n = pick(rng, 1, 3);
    std::vector<int64_t> xd{n, c}, wd{m, cg}, s, d, pads(2 * sp);
    int64_t fan_in = cg;
    for (size_t j = 0; j < sp; ++j) {
      const int64_t k = pick(rng, 1, 3);
      s.push_back(pick(rng, 1, 2));
      d.push_back(pick(rng, 1, 2));
      pads[j] = pick(rng, 0, k - 1);
      pads[j + sp] = pick(rng, 0, k - 1);
      xd.push_back(pick(rng, (k - 1) * d[j] + 1, sp == 1 ? 20 : 7));
      wd.push_back(k);
      fan_in *= k;
    }
    std::map<std::string, Attribute> attrs{{"strides", Attribute::of_ints(s)}, {"dilations", Attribute::of_ints(d)}};
    if (group > 1) attrs["group"] = Attribute::of_int(group);
    const int64_t mode = pick(rng, 0, 4);
    if (mode == 0)
      attrs["auto_pad"] = Attribute::of_string(pick(rng, 0, 1) ? "SAME_UPPER" : "SAME_LOWER");
    else if (mode == 1)
      attrs["auto_pad"] = Attribute::of_string("VALID");
    else
      attrs["pads"] = Attribute::of_ints(pads);
    const bool bias = pick(rng, 0, 1);
    CAPTURE(i);
    CAPTURE(dims_to_string(xd));
    TensorMap feeds{{"x", random_tensor(DataType::Float32, xd, 700 + i)}, {"w", weights(wd, fan_in, 800 + i)}};
    if (bias) feeds["b"] = random_tensor(DataType::Float32, {m}, 900 + i);
    CHECK(check_same(conv_node(bias, attrs), feeds, kConvTol).fallbacks == 0);
  }
}

TEST_CASE("cpu vs reference: Conv, Wide ResNet layer shapes at batch 2") {
  require_cpu_kernel("Conv");
  struct Case {
    int64_t c, m, hw, k;
    bool bias;
  };
  const Case cases[] = {
      {3, 16, 32, 3, false},    {1, 16, 28, 3, false},                             // input block (CIFAR, Fashion-MNIST)
      {16, 160, 28, 3, false},  {160, 160, 28, 3, false},                          // blocks 1-2
      {160, 320, 14, 3, false}, {320, 320, 14, 3, false},                          // blocks 3-4 after MaxPool 2
      {320, 640, 7, 3, false},  {640, 640, 7, 3, false},                           // blocks 5-6 (fan-in 5760)
      {16, 160, 28, 1, true},   {160, 320, 14, 1, true},  {320, 640, 7, 1, true},  // 1x1 skips
  };
  uint64_t seed = 1;
  for (Case cs : cases) {
    cs.hw = test::sanitized(cs.hw, 8);  // the same channels, smaller images
    CAPTURE(cs.c);
    CAPTURE(cs.m);
    CAPTURE(cs.hw);
    RunInfo info = check_conv(test::sanitized(2, 1), cs.c, cs.m, cs.hw, cs.hw, cs.k, cs.k / 2, cs.bias, seed += 10);
    CHECK(info.fallbacks == 0);
  }
}

TEST_CASE("cpu vs reference: Conv fp64 uses the reference kernel") {
  require_cpu_kernel("Conv");
  TensorMap feeds{{"x", random_tensor(DataType::Float64, {1, 2, 5, 5}, 1)},
                  {"w", random_tensor(DataType::Float64, {3, 2, 3, 3}, 2)}};
  RunInfo info = check_same(conv_node(false, {}), feeds, {0, 0});
  CHECK(info.fallbacks == 1);
}

TEST_CASE("cpu: the plan cache reuses a primitive for repeated shapes") {
  require_cpu_kernel("Conv");
  Node n = conv_node(true, {{"pads", Attribute::of_ints({1, 1, 1, 1})}});
  TensorMap feeds{{"x", random_tensor(DataType::Float32, {2, 4, 9, 9}, 1)},
                  {"w", weights({8, 4, 3, 3}, 36, 2)},
                  {"b", random_tensor(DataType::Float32, {8}, 3)}};
  Graph g = single_node_graph(n, feeds);
  auto cpu = make_backend("cpu");
  TensorMap first = run_graph(g, feeds, *cpu);
  size_t plans = dnnl_util::cache_size();
  TensorMap second = run_graph(g, feeds, *cpu);
  CHECK(dnnl_util::cache_size() == plans);
  CHECK(max_abs_diff(first.at("y"), second.at("y")) == 0);
  feeds["x"] = random_tensor(DataType::Float32, {3, 4, 9, 9}, 4);  // a new batch size: a new plan
  run_graph(single_node_graph(n, feeds), feeds, *cpu);
  CHECK(dnnl_util::cache_size() == plans + 1);
}

TEST_CASE("cpu: one cached plan runs in several threads at once") {
  require_cpu_kernel("Conv");
  // Plans are shared; scratchpads and reorder temporaries are per thread.
  Node n = conv_node(false, {{"pads", Attribute::of_ints({1, 1, 1, 1})}});
  TensorMap feeds{{"x", random_tensor(DataType::Float32, {2, 16, 14, 14}, 7)}, {"w", weights({32, 16, 3, 3}, 144, 8)}};
  Graph g = single_node_graph(n, feeds);
  auto cpu = make_backend("cpu");
  Tensor expected = run_graph(g, feeds, *cpu).at("y");
  std::vector<double> worst(4, 0);
  std::vector<std::thread> threads;
  for (size_t t = 0; t < worst.size(); ++t)
    threads.emplace_back([&, t] {
      for (int rep = 0; rep < 5; ++rep)
        worst[t] = std::max(worst[t], max_abs_diff(run_graph(g, feeds, *cpu).at("y"), expected));
    });
  for (std::thread& t : threads) t.join();
  for (double d : worst) CHECK(d == 0);
}

// ---- Pools ----------------------------------------------------------------
namespace {
// A random window for `spatial` dims with input sizes `in` (filled here).
std::map<std::string, Attribute> random_pool_attrs(std::mt19937_64& rng, size_t spatial, bool max,
                                                   std::vector<int64_t>& in) {
  std::vector<int64_t> k, s, d, pads(2 * spatial);
  for (size_t i = 0; i < spatial; ++i) {
    k.push_back(pick(rng, 1, 3));
    s.push_back(pick(rng, 1, 3));
    d.push_back(pick(rng, 1, 2));  // AveragePool's dilations: opset 19
    pads[i] = pick(rng, 0, k[i] - 1);
    pads[i + spatial] = pick(rng, 0, k[i] - 1);
    in.push_back(pick(rng, (k[i] - 1) * d[i] + 1, 9));
  }
  std::map<std::string, Attribute> a{{"kernel_shape", Attribute::of_ints(k)}, {"strides", Attribute::of_ints(s)}};
  a["dilations"] = Attribute::of_ints(d);
  int64_t mode = pick(rng, 0, 4);
  if (mode == 0)
    a["auto_pad"] = Attribute::of_string(pick(rng, 0, 1) ? "SAME_UPPER" : "SAME_LOWER");
  else if (mode == 1)
    a["auto_pad"] = Attribute::of_string("VALID");
  else
    a["pads"] = Attribute::of_ints(pads);
  if (pick(rng, 0, 1)) a["ceil_mode"] = Attribute::of_int(1);
  if (!max && pick(rng, 0, 1)) a["count_include_pad"] = Attribute::of_int(1);
  return a;
}

void random_pools(const char* op, uint64_t seed) {
  require_cpu_kernel(op);
  bool max = std::string(op) == "MaxPool";
  std::mt19937_64 rng(seed);
  int on_dnnl = 0;
  for (int i = 0; i < 20; ++i) {
    size_t spatial = static_cast<size_t>(pick(rng, 1, 3));
    std::vector<int64_t> in;
    auto attrs = random_pool_attrs(rng, spatial, max, in);
    std::vector<int64_t> dims{pick(rng, 1, 2), pick(rng, 1, 4)};
    dims.insert(dims.end(), in.begin(), in.end());
    // Indices (MaxPool's 2nd output) are the reference kernel's job.
    bool indices = max && i % 5 == 4;
    Node n = make_node(op, {"x"}, indices ? std::vector<std::string>{"y", "i"} : std::vector<std::string>{"y"}, attrs);
    CAPTURE(i);
    CAPTURE(dims_to_string(dims));
    RunInfo info = check_same(n, {{"x", random_tensor(DataType::Float32, dims, 400 + i)}}, kPoolTol);
    if (indices) CHECK(info.fallbacks == 1);
    on_dnnl += info.fallbacks == 0;
  }
  CHECK(on_dnnl >= 10);  // most random windows must exercise oneDNN, not the fallback
}
}  // namespace

TEST_CASE("cpu vs reference: MaxPool, random windows") { random_pools("MaxPool", 77); }
TEST_CASE("cpu vs reference: AveragePool, random windows") { random_pools("AveragePool", 78); }

TEST_CASE("cpu vs reference: AveragePool-19 dilations on oneDNN, 1-D to 3-D, pads, ceil_mode, both divisors") {
  require_cpu_kernel("AveragePool");
  struct Case {
    const char* what;
    std::vector<int64_t> dims, k, s, d, pads;
    bool ceil;
    bool on_dnnl[2];  // count_include_pad 0, 1
  };
  const std::vector<Case> cases = {
      {"1-D k3 d2", {2, 3, 11}, {3}, {1}, {2}, {0, 0}, false, {true, true}},
      {"1-D k2 d3 s2 pads 1 ceil", {2, 3, 12}, {2}, {2}, {3}, {1, 1}, true, {true, true}},
      {"2-D k3 d2 s2 pads 1", {2, 4, 9, 8}, {3, 3}, {2, 2}, {2, 2}, {1, 1, 1, 1}, false, {true, true}},
      // the last window's taps pass the end pad: oneDNN would count them, the reference runs
      {"2-D k3 d2 s2 pads 1 ceil (overhang)", {1, 3, 9, 8}, {3, 3}, {2, 2}, {2, 2}, {1, 1, 1, 1}, true, {true, false}},
      {"2-D k2x3 d3x2 pads 1,0,0,1", {2, 2, 7, 7}, {2, 3}, {1, 2}, {3, 2}, {1, 0, 0, 1}, false, {true, true}},
      {"3-D d1,2,3 pads", {1, 2, 5, 6, 7}, {2, 2, 2}, {1, 2, 2}, {1, 2, 3}, {1, 0, 1, 0, 1, 1}, false, {true, true}},
  };
  for (const Case& c : cases)
    for (const int64_t include_pad : {0, 1}) {
      CAPTURE(c.what);
      CAPTURE(include_pad);
      const std::map<std::string, Attribute> a{
          {"kernel_shape", Attribute::of_ints(c.k)},        {"strides", Attribute::of_ints(c.s)},
          {"dilations", Attribute::of_ints(c.d)},           {"pads", Attribute::of_ints(c.pads)},
          {"ceil_mode", Attribute::of_int(c.ceil ? 1 : 0)}, {"count_include_pad", Attribute::of_int(include_pad)}};
      const RunInfo info = check_same(make_node("AveragePool", {"x"}, {"y"}, a),
                                      {{"x", random_tensor(DataType::Float32, c.dims, 19)}}, kPoolTol);
      CHECK((info.fallbacks == 0) == c.on_dnnl[include_pad]);
    }
}

TEST_CASE("cpu vs reference: pools at the Wide ResNet's shapes") {
  require_cpu_kernel("MaxPool");
  require_cpu_kernel("AveragePool");
  auto two = Attribute::of_ints({2, 2});
  for (auto [c, hw] : {std::pair<int64_t, int64_t>{160, 28}, {320, 14}, {160, 32}, {320, 16}}) {
    CAPTURE(hw);
    Node n = make_node("MaxPool", {"x"}, {"y"}, {{"kernel_shape", two}, {"strides", two}});
    CHECK(check_same(n, {{"x", random_tensor(DataType::Float32, {2, c, hw, hw}, hw)}}, kPoolTol).fallbacks == 0);
  }
  auto seven = Attribute::of_ints({7, 7});
  for (int64_t hw : {7, 8}) {  // Fashion-MNIST: global; CIFAR: top-left 7x7 only
    CAPTURE(hw);
    Node n = make_node("AveragePool", {"x"}, {"y"}, {{"kernel_shape", seven}, {"strides", seven}});
    CHECK(check_same(n, {{"x", random_tensor(DataType::Float32, {2, 640, hw, hw}, hw)}}, kPoolTol).fallbacks == 0);
  }
}

TEST_CASE("cpu vs reference: GlobalAveragePool") {
  require_cpu_kernel("GlobalAveragePool");
  std::mt19937_64 rng(5);
  for (int i = 0; i < 20; ++i) {
    std::vector<int64_t> dims{pick(rng, 1, 3), pick(rng, 1, 16)};
    for (int64_t s = pick(rng, 1, 3); s > 0; --s) dims.push_back(pick(rng, 1, 9));
    if (i == 0) dims = {2, 640, 7, 7};
    CAPTURE(dims_to_string(dims));
    Node n = make_node("GlobalAveragePool", {"x"}, {"y"});
    CHECK(check_same(n, {{"x", random_tensor(DataType::Float32, dims, 500 + i)}}, kPoolTol).fallbacks == 0);
  }
}

TEST_CASE("cpu vs reference: GlobalMaxPool over 1, 2 and 3 spatial dims") {
  require_cpu_kernel("GlobalMaxPool");
  for (std::vector<int64_t> dims : {std::vector<int64_t>{2, 3, 17}, {2, 16, 7, 7}, {1, 4, 3, 4, 5}}) {
    CAPTURE(dims_to_string(dims));
    Node n = make_node("GlobalMaxPool", {"x"}, {"y"});
    CHECK(check_same(n, {{"x", random_tensor(DataType::Float32, dims, 550)}}, kExactTol).fallbacks == 0);
  }
}

// ---- BatchNormalization ---------------------------------------------------
namespace {
TensorMap bn_feeds(const std::vector<int64_t>& dims, uint64_t seed) {
  int64_t c = dims[1];
  return {{"x", random_tensor(DataType::Float32, dims, seed, -2, 3)},
          {"scale", random_tensor(DataType::Float32, {c}, seed + 1, 0.5, 1.5)},
          {"b", random_tensor(DataType::Float32, {c}, seed + 2)},
          {"mean", random_tensor(DataType::Float32, {c}, seed + 3, -0.5, 0.5)},
          {"var", random_tensor(DataType::Float32, {c}, seed + 4, 0.5, 1.5)}};
}
const std::vector<std::string> kBnInputs{"x", "scale", "b", "mean", "var"};
}  // namespace

TEST_CASE("cpu vs reference: BatchNormalization, random shapes, inference and training") {
  require_cpu_kernel("BatchNormalization");
  std::mt19937_64 rng(99);
  for (int i = 0; i < 20; ++i) {
    std::vector<int64_t> dims{pick(rng, 1, 4), pick(rng, 1, 8)};
    for (int64_t s = pick(rng, 0, 3); s > 0; --s) dims.push_back(pick(rng, 1, 7));
    if (dims[0] * (dims.size() > 2 ? dims[2] : 1) == 1) dims[0] = 2;  // training needs > 1 value per channel
    std::map<std::string, Attribute> attrs{{"epsilon", Attribute::of_float(i % 2 ? 1e-5f : 1e-3f)},
                                           {"momentum", Attribute::of_float(i % 3 ? 0.9f : 0.1f)}};
    int form = i % 4;  // 0 inference, 1 executor training, 2 training_mode=1 (opset 17), 3 opset-13 five outputs
    std::vector<std::string> outs{"y"};
    int64_t opset = 17;
    if (form == 2) attrs["training_mode"] = Attribute::of_int(1), outs = {"y", "rm", "rv"};
    if (form == 3) outs = {"y", "rm", "rv", "sm", "sv"}, opset = 13;
    CAPTURE(i);
    CAPTURE(dims_to_string(dims));
    Node n = make_node("BatchNormalization", kBnInputs, outs, attrs);
    RunInfo info = check_same(n, bn_feeds(dims, 600 + i), kNormTol, form == 1, opset);
    CHECK(info.fallbacks == 0);
  }
}

TEST_CASE("cpu vs reference: BatchNormalization at the Wide ResNet's shapes") {
  require_cpu_kernel("BatchNormalization");
  for (auto [c, hw] : {std::pair<int64_t, int64_t>{16, 32}, {160, 28}, {320, 14}, {640, 7}}) {
    CAPTURE(c);
    Node infer = make_node("BatchNormalization", kBnInputs, {"y"});
    CHECK(check_same(infer, bn_feeds({2, c, hw, hw}, c), kNormTol).fallbacks == 0);
    Node train =
        make_node("BatchNormalization", kBnInputs, {"y", "rm", "rv"}, {{"training_mode", Attribute::of_int(1)}});
    CHECK(check_same(train, bn_feeds({2, c, hw, hw}, c + 1), kNormTol).fallbacks == 0);
  }
}

// Channels of tiny spread around a mean of ~1 (what a BN after a near-constant branch
// sees): the variance (~3e-7) is far below the mean's square, so fp32 statistics
// (oneDNN's own, measured 1.1e-4 off in y here) lose digits that 1/sqrt(var + eps)
// amplifies. The cpu kernel normalises with the reference's double statistics; what
// is left is the rounding of the fp32 mean and of the fp32 apply.
TEST_CASE("cpu vs reference: BatchNormalization training on nearly constant channels") {
  require_cpu_kernel("BatchNormalization");
  for (const std::vector<int64_t>& dims : {std::vector<int64_t>{8, 3, 7, 7}, std::vector<int64_t>{4, 32, 6, 6}}) {
    CAPTURE(dims_to_string(dims));
    TensorMap feeds = bn_feeds(dims, 700);
    Tensor& x = feeds.at("x");
    const Tensor spread = random_tensor(DataType::Float32, dims, 701, -1e-3, 1e-3);
    const int64_t c = dims[1], s = dims[2] * dims[3];
    for (int64_t i = 0; i < x.numel(); ++i)
      x.data<float>()[i] = 1.f + 0.03125f * static_cast<float>((i / s) % c) + spread.data<float>()[i];
    Node train =
        make_node("BatchNormalization", kBnInputs, {"y", "rm", "rv"}, {{"training_mode", Attribute::of_int(1)}});
    CHECK(check_same(train, feeds, kNormTol).fallbacks == 0);
  }
}

// ---- LayerNormalization ---------------------------------------------------
TEST_CASE("cpu vs reference: LayerNormalization, any axis, with and without B and the statistics outputs") {
  require_cpu_kernel("LayerNormalization");
  std::mt19937_64 rng(103);
  for (int i = 0; i < 20; ++i) {
    std::vector<int64_t> dims;
    for (int64_t r = pick(rng, 1, 4); r > 0; --r) dims.push_back(pick(rng, 1, 9));
    if (i == 0) dims = {2, 197, 768};  // ViT-B/16's encoder at batch 2
    const int64_t rank = static_cast<int64_t>(dims.size());
    int64_t axis = i == 0 ? -1 : pick(rng, -rank, rank - 1);
    const std::vector<int64_t> norm(dims.begin() + (axis < 0 ? axis + rank : axis), dims.end());
    const bool bias = i % 3 != 1, stats = i % 2 == 1;
    TensorMap feeds{{"x", random_tensor(DataType::Float32, dims, 1200 + i, -2, 3)},
                    {"scale", random_tensor(DataType::Float32, norm, 1300 + i, 0.5, 1.5)}};
    std::vector<std::string> in{"x", "scale"};
    if (bias) feeds["b"] = random_tensor(DataType::Float32, norm, 1400 + i), in.push_back("b");
    std::vector<std::string> outs{"y"};
    if (stats) outs = {"y", "mean", "inv_std"};
    CAPTURE(i);
    CAPTURE(dims_to_string(dims));
    CAPTURE(axis);
    Node n = make_node("LayerNormalization", in, outs,
                       {{"axis", Attribute::of_int(axis)}, {"epsilon", Attribute::of_float(i % 2 ? 1e-5f : 1e-3f)}});
    CHECK(check_same(n, feeds, kNormTol).fallbacks == 0);
  }
  // A Scale that broadcasts to the normalized dims runs the reference kernel.
  TensorMap feeds{{"x", random_tensor(DataType::Float32, {2, 3, 4}, 1)},
                  {"scale", random_tensor(DataType::Float32, {1, 4}, 2)}};
  CHECK(check_same(make_node("LayerNormalization", {"x", "scale"}, {"y"}, {{"axis", Attribute::of_int(1)}}), feeds,
                   kNormTol)
            .fallbacks == 1);
}

// ---- Gemm / MatMul --------------------------------------------------------
TEST_CASE("cpu vs reference: Gemm, random shapes, transposes, alpha, beta, C broadcast") {
  require_cpu_kernel("Gemm");
  std::mt19937_64 rng(31);
  const float scalars[] = {1.f, 0.5f, -2.f, 0.f};
  for (int i = 0; i < 20; ++i) {
    int64_t m = pick(rng, 1, 40), n = pick(rng, 1, 40), k = pick(rng, 1, 60);
    bool ta = pick(rng, 0, 1), tb = pick(rng, 0, 1);
    float alpha = scalars[pick(rng, 0, 2)], beta = scalars[pick(rng, 0, 3)];
    std::vector<std::vector<int64_t>> c_shapes{{m, n}, {n}, {1, n}, {m, 1}, {1}, {}, {1, 1}};
    int64_t ci = pick(rng, -1, static_cast<int64_t>(c_shapes.size()) - 1);
    TensorMap feeds{
        {"a", random_tensor(DataType::Float32, ta ? std::vector<int64_t>{k, m} : std::vector<int64_t>{m, k}, 700 + i)},
        {"b", random_tensor(DataType::Float32, tb ? std::vector<int64_t>{n, k} : std::vector<int64_t>{k, n}, 800 + i)}};
    std::vector<std::string> in{"a", "b"};
    if (ci >= 0) feeds["c"] = random_tensor(DataType::Float32, c_shapes[ci], 900 + i), in.push_back("c");
    Node node = make_node("Gemm", in, {"y"},
                          {{"transA", Attribute::of_int(ta)},
                           {"transB", Attribute::of_int(tb)},
                           {"alpha", Attribute::of_float(alpha)},
                           {"beta", Attribute::of_float(beta)}});
    CAPTURE(i);
    CHECK(check_same(node, feeds, kConvTol).fallbacks == 0);
  }
}

TEST_CASE("cpu vs reference: Gemm as the Wide ResNet's classifier (640 -> 100, batch 2)") {
  require_cpu_kernel("Gemm");
  TensorMap feeds{{"x", random_tensor(DataType::Float32, {2, 640}, 1)},
                  {"w", weights({100, 640}, 640, 2)},
                  {"bias", random_tensor(DataType::Float32, {100}, 3)}};
  Node n = make_node("Gemm", {"x", "w", "bias"}, {"y"}, {{"transB", Attribute::of_int(1)}});
  CHECK(check_same(n, feeds, kConvTol).fallbacks == 0);
}

TEST_CASE("cpu vs reference: MatMul, 1-D to 4-D with batch broadcasting") {
  require_cpu_kernel("MatMul");
  std::mt19937_64 rng(41);
  for (int i = 0; i < 20; ++i) {
    int64_t m = pick(rng, 1, 20), n = pick(rng, 1, 20), k = pick(rng, 1, 30);
    size_t ra = static_cast<size_t>(pick(rng, 1, 4)), rb = static_cast<size_t>(pick(rng, 1, 4));
    std::vector<int64_t> batch;
    for (size_t r = std::max(ra, rb); r > 2; --r) batch.push_back(pick(rng, 1, 3));
    auto shape = [&](size_t rank, int64_t rows, int64_t cols, bool first) {
      if (rank == 1) return std::vector<int64_t>{first ? cols : rows};
      std::vector<int64_t> d(batch.end() - static_cast<std::ptrdiff_t>(rank - 2), batch.end());
      for (int64_t& x : d)
        if (pick(rng, 0, 2) == 0) x = 1;  // broadcast this batch dim
      d.push_back(rows);
      d.push_back(cols);
      return d;
    };
    std::vector<int64_t> ad = shape(ra, m, k, true), bd = shape(rb, k, n, false);
    CAPTURE(dims_to_string(ad));
    CAPTURE(dims_to_string(bd));
    TensorMap feeds{{"a", random_tensor(DataType::Float32, ad, 1000 + i)},
                    {"b", random_tensor(DataType::Float32, bd, 1100 + i)}};
    CHECK(check_same(make_node("MatMul", {"a", "b"}, {"y"}), feeds, kConvTol).fallbacks == 0);
  }
}

// ---- Activations, binary, softmax -----------------------------------------
namespace {
std::vector<int64_t> random_dims(std::mt19937_64& rng, int64_t max_rank) {
  std::vector<int64_t> d;
  for (int64_t r = pick(rng, 0, max_rank); r > 0; --r) d.push_back(pick(rng, 1, 7));
  return d;
}
}  // namespace

TEST_CASE("cpu vs reference: Relu, LeakyRelu, Sigmoid, Tanh") {
  for (const char* op : {"Relu", "LeakyRelu", "Sigmoid", "Tanh"}) {
    require_cpu_kernel(op);
    bool exact = std::string(op) == "Relu" || std::string(op) == "LeakyRelu";
    std::mt19937_64 rng(51);
    for (int i = 0; i < 20; ++i) {
      std::vector<int64_t> dims = random_dims(rng, 4);
      if (i == 0) dims = {2, 160, 28, 28};
      std::map<std::string, Attribute> attrs;
      if (std::string(op) == "LeakyRelu" && i % 2) attrs["alpha"] = Attribute::of_float(0.2f);
      std::string op_name = op;
      CAPTURE(op_name);
      CAPTURE(dims_to_string(dims));
      Node n = make_node(op, {"x"}, {"y"}, attrs);
      RunInfo info = check_same(n, {{"x", random_tensor(DataType::Float32, dims, 1200 + i, -6, 6)}},
                                exact ? kExactTol : kTranscTol);
      CHECK(info.fallbacks == 0);
    }
  }
}

TEST_CASE("cpu vs reference: Add, Sub, Mul, Div with broadcasting") {
  for (const char* op : {"Add", "Sub", "Mul", "Div"}) {
    require_cpu_kernel(op);
    bool commutative = std::string(op) == "Add" || std::string(op) == "Mul";
    std::mt19937_64 rng(61);
    for (int i = 0; i < 20; ++i) {
      std::vector<int64_t> out = random_dims(rng, 4);
      if (i == 0) out = {2, 160, 28, 28};
      // Each operand: the output shape with some dims set to 1 and some leading dims dropped.
      auto operand = [&] {
        std::vector<int64_t> d = out;
        for (int64_t& x : d)
          if (pick(rng, 0, 3) == 0) x = 1;
        d.erase(d.begin(), d.begin() + pick(rng, 0, static_cast<int64_t>(d.size())) / 2);
        return d;
      };
      std::vector<int64_t> ad = i % 3 == 0 ? out : operand(), bd = operand();
      if (i == 0) bd = {160, 1, 1};  // a per-channel operand
      std::string op_name = op;
      CAPTURE(op_name);
      CAPTURE(dims_to_string(ad));
      CAPTURE(dims_to_string(bd));
      // Divisors away from 0 so relative error stays meaningful.
      TensorMap feeds{{"a", random_tensor(DataType::Float32, ad, 1300 + i)},
                      {"b", random_tensor(DataType::Float32, bd, 1400 + i, 0.5, 2)}};
      Graph g = single_node_graph(make_node(op, {"a", "b"}, {"y"}), feeds);
      std::vector<int64_t> yd = shape_dims(*g.info("y").shape);
      RunInfo info = check_same(make_node(op, {"a", "b"}, {"y"}), feeds, kExactTol);
      // oneDNN 2.6 broadcasts its second operand only: the first must already have
      // the output's size (Add and Mul may swap operands to get there).
      bool on_dnnl = element_count(ad) == element_count(yd) || (commutative && element_count(bd) == element_count(yd));
      CHECK(info.fallbacks == (on_dnnl ? 0u : 1u));
    }
  }
}

TEST_CASE("cpu vs reference: Softmax and LogSoftmax along any axis") {
  for (const char* op : {"Softmax", "LogSoftmax"}) {
    require_cpu_kernel(op);
    std::mt19937_64 rng(71);
    for (int i = 0; i < 20; ++i) {
      std::vector<int64_t> dims = random_dims(rng, 4);
      if (dims.empty()) dims = {5};
      if (i == 0) dims = {64, 100};
      int64_t rank = static_cast<int64_t>(dims.size());
      int64_t axis = pick(rng, -rank, rank - 1);
      std::string op_name = op;
      CAPTURE(op_name);
      CAPTURE(dims_to_string(dims));
      CAPTURE(axis);
      Node n = make_node(op, {"x"}, {"y"}, {{"axis", Attribute::of_int(axis)}});
      RunInfo info = check_same(n, {{"x", random_tensor(DataType::Float32, dims, 1500 + i, -8, 8)}},
                                std::string(op) == "LogSoftmax" ? kLogSoftmaxTol : kTranscTol);
      CHECK(info.fallbacks == 0);
    }
  }
}
