// bf16 and fp16 arithmetic (MathPrecision, ops/core/kernel.h) in the convolution and
// matrix-product kernels: Conv, FusedConv and ConvGrad read bf16 (oneDNN's bf16
// primitives) or half-precision (emulated: rounded fp32 copies) copies of their fp32
// inputs and accumulate in fp32; Gemm, FusedGemm and MatMul read rounded fp32 copies of
// A and B (emulated in both precisions).
//
// What is checked, on the Wide ResNet's layer shapes at batch 2-4 and on a few odd
// windows:
// - cpu against reference, both in bf16 (or both in fp16). The reference rounds its
//   inputs and then computes exactly as in fp32 (in double). A product of two bf16 (or
//   two fp16) values is exact in fp32 (8- or 11-bit significands), so the two backends
//   differ only by fp32 summation order: the same bounds as the fp32 comparison (tests/ops/
//   test_cpu_grad_vs_reference.cpp: 32 * sqrt(L) * 2^-24 * rms for a sum of L terms).
// - cpu bf16 against reference fp32: the difference is the bf16 rounding of the
//   inputs: each input moves by up to 2^-9 of itself (RMS 2^-9/sqrt(3)), so over a
//   random-sign sum an output moves by ~1.6e-3 of the output's rms, and the largest
//   of ~10^5 outputs by several times that (measured: at most 2.0% of the rms, dX of
//   the strided 1x1). It must exceed 20x the fp32 bound (so a kernel that silently
//   stays in fp32 fails) and stay under 5% of the rms. fp16 rounds 16x finer (2^-11),
//   so its difference from fp32 must exceed only 2x the fp32 bound.
#include <doctest/doctest.h>

#include <algorithm>
#include <cmath>
#include <set>

#include "ops/core/rounded_outputs.h"
#include "ops/onednn/dnnl_util.h"
#include "runtime/executor.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

// The distance between neighbouring 16-bit numbers of `m` at magnitude |v|.
double spacing_16(double v, MathPrecision m) {
  int e = 0;
  std::frexp(v, &e);  // |v| in [2^(e-1), 2^e)
  if (m == MathPrecision::bf16) return std::ldexp(1.0, e - 1 - 7);
  return std::ldexp(1.0, std::max(e - 1, -14) - 10);
}

// The largest |a - b| less one 16-bit spacing at each element: two fp32 sums that agree
// to their last places may round to neighbouring 16-bit numbers. `z`: a residual added
// in fp32 after the rounding (FusedConv's), so the spacing is that of a - z.
double max_diff_rounded(const Tensor& a, const Tensor& b, MathPrecision m, const Tensor* z = nullptr) {
  double d = 0;
  for (int64_t i = 0; i < a.numel(); ++i) {
    const double x = a.get_as_double(i), y = b.get_as_double(i), r = z ? z->get_as_double(i) : 0;
    d = std::max(d, std::fabs(x - y) - spacing_16(std::max(std::fabs(x - r), std::fabs(y - r)), m));
  }
  return std::max(d, 0.0);
}

bool all_16_bit(const Tensor& t, MathPrecision m) {
  for (int64_t i = 0; i < t.numel(); ++i)
    if (round_to_math(t.data<float>()[i], m) != t.data<float>()[i]) return false;
  return true;
}

double rms(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.get_as_double(i) * t.get_as_double(i);
  return t.numel() ? std::sqrt(s / static_cast<double>(t.numel())) : 0;
}

TensorMap run(const Node& n, const TensorMap& feeds, const std::string& backend, MathPrecision math) {
  Graph g = single_node_graph(n, feeds, {}, 17);
  ExecutorOptions o;
  o.math = math;
  const std::unique_ptr<Backend> b = make_backend(backend);  // the executor keeps a reference
  Executor ex(g, *b, o);
  TensorMap out;
  for (const auto& [name, t] : ex.run(feeds)) out[name] = t.clone();
  return out;
}

// `reduction`: the length of the sum behind each output element. `unrounded`: outputs
// computed from unrounded inputs (FusedGemm's sums), which must equal fp32's within its
// bound instead of differing from it.
void check_math(const Node& n, const TensorMap& feeds, const std::map<std::string, int64_t>& reduction,
                MathPrecision math, const std::set<std::string>& unrounded = {}) {
  CAPTURE(math_precision_name(math));
  if (math == MathPrecision::bf16 && !dnnl_util::cpu_has_bf16()) {
    // No native bf16 here: the cpu backend refuses it rather than run oneDNN's slow
    // reference path (runtime/backend.cpp); nothing to compare.
    CHECK_THROWS_AS(make_backend("cpu")->check_math(math), Error);
    return;
  }
  const TensorMap ref16 = run(n, feeds, "reference", math);
  const TensorMap ref32 = run(n, feeds, "reference", MathPrecision::fp32);
  const uint64_t before = dnnl_util::reference_fallbacks();
  const TensorMap cpu16 = run(n, feeds, "cpu", math);
  CHECK_MESSAGE(dnnl_util::reference_fallbacks() == before, n.op_type, " fell back to the reference kernel");
  const std::vector<size_t> rounds = math_rounded_outputs(n);
  for (const auto& [name, r16] : ref16) {
    const int64_t L = reduction.at(name);
    const double scale = rms(r16);
    const double fp32_bound = 32 * std::sqrt(static_cast<double>(L)) * std::ldexp(1.0, -24) * scale;
    bool rounded = false;
    for (size_t k : rounds) rounded = rounded || n.outputs[k] == name;
    // FusedConv's Y with Z: act(conv + B) rounded, then Z added.
    const bool residual = n.op_type == "FusedConv" && n.has_input(3) && name == n.outputs[0];
    const double same = rounded || residual
                            ? max_diff_rounded(cpu16.at(name), r16, math, residual ? &feeds.at(n.inputs[3]) : nullptr)
                            : max_abs_diff(cpu16.at(name), r16);
    const double rounding = max_abs_diff(cpu16.at(name), ref32.at(name));
    INFO(n.op_type, " output '", name, "' ", dims_to_string(r16.dims()), ": |cpu - ref| = ", same,
         ", |cpu - ref fp32| = ", rounding, ", fp32 bound ", fp32_bound, ", rms ", scale);
    CHECK(same <= fp32_bound);
    if (unrounded.count(name)) {
      CHECK(rounding <= fp32_bound);
      continue;
    }
    CHECK(rounding > (math == MathPrecision::bf16 ? 20 : 2) * fp32_bound);
    CHECK(rounding < 0.05 * scale);
  }
}

Node conv_node(int64_t k, int64_t stride, int64_t pad, bool bias, const std::string& domain = "",
               const std::string& op = "Conv") {
  Node n = make_node(op, {"X", "W"}, {"Y"}, {}, domain);
  if (bias) n.inputs.push_back("B");
  n.attrs["kernel_shape"] = Attribute::of_ints({k, k});
  n.attrs["strides"] = Attribute::of_ints({stride, stride});
  n.attrs["pads"] = Attribute::of_ints({pad, pad, pad, pad});
  return n;
}

Tensor weights(std::vector<int64_t> dims, uint64_t seed) {
  const int64_t fan_in = dims[1] * dims[2] * dims[3];
  const double a = 1.0 / std::sqrt(static_cast<double>(fan_in));
  return random_tensor(DataType::Float32, std::move(dims), seed, -a, a);
}

struct ConvCase {
  int64_t n, c, m, hw, k, stride, pad;
};
// Wide ResNet (width 10, Fashion-MNIST) layers at a small batch, plus odd windows.
const ConvCase kShapes[] = {
    {2, 1, 16, 28, 3, 1, 1},     // the stem
    {2, 160, 160, 14, 3, 1, 1},  // a stage-2-sized 3x3
    {2, 160, 320, 14, 1, 2, 0},  // a strided 1x1 shortcut
    {3, 20, 36, 9, 3, 2, 1},     // channels not a multiple of 16, odd size
    {4, 16, 16, 7, 5, 1, 2},
};

}  // namespace

// Both reduced precisions over the cases of one op.
void check_both(const Node& n, const TensorMap& feeds, const std::map<std::string, int64_t>& reduction,
                const std::set<std::string>& unrounded = {}) {
  check_math(n, feeds, reduction, MathPrecision::bf16, unrounded);
  check_math(n, feeds, reduction, MathPrecision::fp16, unrounded);
}

TEST_CASE("bf16/fp16 math: Conv on cpu equals the reference's emulation, and differs from fp32") {
  uint64_t seed = 100;
  for (const ConvCase& s : kShapes) {
    CAPTURE(s.c);
    CAPTURE(s.m);
    CAPTURE(s.hw);
    for (bool bias : {false, true}) {
      TensorMap feeds{{"X", random_tensor(DataType::Float32, {s.n, s.c, s.hw, s.hw}, ++seed, -1, 1)},
                      {"W", weights({s.m, s.c, s.k, s.k}, ++seed)}};
      if (bias) feeds["B"] = random_tensor(DataType::Float32, {s.m}, ++seed, -0.5, 0.5);
      check_both(conv_node(s.k, s.stride, s.pad, bias), feeds, {{"Y", s.c * s.k * s.k}});
    }
  }
}

TEST_CASE("bf16/fp16 math: FusedConv (Relu and the residual sum) on cpu equals the reference's emulation") {
  const ConvCase s{2, 160, 160, 14, 3, 1, 1};
  Node n = conv_node(s.k, s.stride, s.pad, true, kTrainrtDomain, "FusedConv");
  n.inputs.push_back("Z");
  n.attrs["activation"] = Attribute::of_string("Relu");
  TensorMap feeds{{"X", random_tensor(DataType::Float32, {s.n, s.c, s.hw, s.hw}, 7, -1, 1)},
                  {"W", weights({s.m, s.c, s.k, s.k}, 8)},
                  {"B", random_tensor(DataType::Float32, {s.m}, 9, -0.5, 0.5)},
                  {"Z", random_tensor(DataType::Float32, {s.n, s.m, s.hw, s.hw}, 10, -1, 1)}};
  check_both(n, feeds, {{"Y", s.c * s.k * s.k}});
}

TEST_CASE("bf16/fp16 math: ConvGrad (dX, dW, dB) on cpu equals the reference's emulation, and differs from fp32") {
  uint64_t seed = 200;
  for (const ConvCase& s : kShapes) {
    CAPTURE(s.c);
    CAPTURE(s.m);
    CAPTURE(s.hw);
    const int64_t ho = (s.hw + 2 * s.pad - s.k) / s.stride + 1;
    Node n = conv_node(s.k, s.stride, s.pad, false, kTrainrtDomain, "ConvGrad");
    n.inputs = {"dY", "X", "W"};
    n.outputs = {"dX", "dW", "dB"};
    TensorMap feeds{{"dY", random_tensor(DataType::Float32, {s.n, s.m, ho, ho}, ++seed, -1, 1)},
                    {"X", random_tensor(DataType::Float32, {s.n, s.c, s.hw, s.hw}, ++seed, -1, 1)},
                    {"W", weights({s.m, s.c, s.k, s.k}, ++seed)}};
    check_both(n, feeds, {{"dX", s.m * s.k * s.k}, {"dW", s.n * ho * ho}, {"dB", s.n * ho * ho}});
    // dB alone takes the per-channel loop instead of the primitive: it rounds dY too.
    n.outputs = {"", "", "dB"};
    check_both(n, feeds, {{"dB", s.n * ho * ho}});
  }
}

// A decoder's upsampling: ConvTranspose (stride 2, 4x4 kernel, bias; grouped) and its
// gradient. Both backends run the same loops (ops/conv_transpose_loops.h).
TEST_CASE(
    "bf16/fp16 math: ConvTranspose and its gradient on cpu equal the reference's emulation, and differ from fp32") {
  for (int64_t group : {1, 2}) {
    CAPTURE(group);
    const int64_t n = 2, c = 16, m = 12, hw = 7, k = 4, ho = (hw - 1) * 2 + k - 2;
    Node fwd = make_node("ConvTranspose", {"X", "W", "B"}, {"Y"},
                         {{"kernel_shape", Attribute::of_ints({k, k})},
                          {"strides", Attribute::of_ints({2, 2})},
                          {"pads", Attribute::of_ints({1, 1, 1, 1})},
                          {"group", Attribute::of_int(group)}});
    TensorMap feeds{{"X", random_tensor(DataType::Float32, {n, c, hw, hw}, 61 + group, -1, 1)},
                    {"W", weights({c, m / group, k, k}, 63 + group)},
                    {"B", random_tensor(DataType::Float32, {m}, 65, -0.5, 0.5)}};
    check_both(fwd, feeds, {{"Y", c / group * k * k}});
    Node grad = fwd;
    grad.op_type = "ConvTransposeGrad";
    grad.domain = kTrainrtDomain;
    grad.inputs = {"dY", "X", "W"};
    grad.outputs = {"dX", "dW", "dB"};
    feeds.erase("B");
    feeds["dY"] = random_tensor(DataType::Float32, {n, m, ho, ho}, 67 + group, -1, 1);
    check_both(grad, feeds, {{"dX", m / group * k * k}, {"dW", n * hw * hw}, {"dB", n * ho * ho}});
  }
}

// A Linear layer's three products at batch 8 (640 features, 100 classes: the Wide
// ResNet's classifier) and a batched MatMul.
TEST_CASE("bf16/fp16 math: Gemm, FusedGemm and MatMul on cpu equal the reference's emulation, and differ from fp32") {
  const int64_t n = 8, k = 640, m = 100;
  const TensorMap feeds{{"X", random_tensor(DataType::Float32, {n, k}, 301, -1, 1)},
                        {"W", random_tensor(DataType::Float32, {m, k}, 302, -0.04, 0.04)},
                        {"B", random_tensor(DataType::Float32, {m}, 303, -0.5, 0.5)},
                        {"dY", random_tensor(DataType::Float32, {n, m}, 304, -1, 1)}};
  auto only = [&](std::vector<std::string> names) {
    TensorMap r;
    for (const std::string& s : names) r[s] = feeds.at(s);
    return r;
  };
  // Y = X W^T + B
  check_both(make_node("Gemm", {"X", "W", "B"}, {"Y"}, {{"transB", Attribute::of_int(1)}}), only({"X", "W", "B"}),
             {{"Y", k}});
  // Y = relu(X W^T + B), as the fusion pass writes a Linear layer and its activation
  check_both(
      make_node("FusedGemm", {"X", "W", "B"}, {"Y"},
                {{"transB", Attribute::of_int(1)}, {"activation", Attribute::of_string("Relu")}}, kTrainrtDomain),
      only({"X", "W", "B"}), {{"Y", k}});
  // dX = dY W
  check_both(make_node("Gemm", {"dY", "W"}, {"dX"}), only({"dY", "W"}), {{"dX", m}});
  // dW = dY^T X and dB = the column sums of dY, unrounded
  check_both(make_node("FusedGemm", {"dY", "X"}, {"dW", "dB"},
                       {{"transA", Attribute::of_int(1)}, {"sum_of", Attribute::of_string("A")}}, kTrainrtDomain),
             only({"dY", "X"}), {{"dW", n}, {"dB", n}}, {"dB"});
  check_both(make_node("MatMul", {"P", "Q"}, {"R"}),
             {{"P", random_tensor(DataType::Float32, {2, 3, 16, 48}, 305, -1, 1)},
              {"Q", random_tensor(DataType::Float32, {48, 24}, 306, -1, 1)}},
             {{"R", 48}});
}

TEST_CASE("bf16 math: both backends round the inputs, ties to even") {
  // 1 + 2^-8 lies halfway between the bf16 values 1 and 1 + 2^-7: it rounds to 1 (even);
  // 1 + 3*2^-8 lies halfway between 1 + 2^-7 and 1 + 2^-6: it rounds to 1 + 2^-6.
  Node n = conv_node(1, 1, 0, false);
  Tensor x(DataType::Float32, {1, 2, 1, 1});
  x.data<float>()[0] = 1.0f + std::ldexp(1.0f, -8);
  x.data<float>()[1] = 1.0f + 3 * std::ldexp(1.0f, -8);
  Tensor w(DataType::Float32, {2, 2, 1, 1});
  w.data<float>()[0] = 1;  // y0 = x0, y1 = x1
  w.data<float>()[3] = 1;
  for (const std::string backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    const TensorMap y = run(n, {{"X", x}, {"W", w}}, backend, MathPrecision::bf16);
    CHECK(y.at("Y").data<float>()[0] == 1.0f);
    CHECK(y.at("Y").data<float>()[1] == 1.0f + std::ldexp(1.0f, -6));
    const TensorMap y32 = run(n, {{"X", x}, {"W", w}}, backend, MathPrecision::fp32);
    CHECK(y32.at("Y").data<float>()[1] == x.data<float>()[1]);
  }
}

TEST_CASE("fp16 math: both backends round the inputs to half precision: ties to even, overflow to Inf") {
  // 1 + 2^-11 is halfway between the halves 1 and 1 + 2^-10: rounds to 1; 70000 is
  // beyond fp16's largest value 65504: Inf. One channel, two pixels, weight 1: y = x.
  Node n = conv_node(1, 1, 0, false);
  Tensor x(DataType::Float32, {1, 1, 1, 2});
  x.data<float>()[0] = 1.0f + std::ldexp(1.0f, -11);
  x.data<float>()[1] = 70000.0f;
  Tensor w(DataType::Float32, {1, 1, 1, 1});
  w.data<float>()[0] = 1;
  for (const std::string backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    const TensorMap y = run(n, {{"X", x}, {"W", w}}, backend, MathPrecision::fp16);
    CHECK(y.at("Y").data<float>()[0] == 1.0f);
    CHECK(std::isinf(y.at("Y").data<float>()[1]));
  }
}

// math_rounded_inputs (ops/core/kernel.h) is the contract the cuda kernels round by
// (ops/conv_cuda.cu, not run here). The reference is its oracle: in bf16/fp16 it must
// equal, bit for bit, its fp32 run on inputs pre-rounded at exactly the listed
// positions; leaving out any listed input, or also rounding an unlisted input that the
// kernel reads (bias, residual), must change the result.
TEST_CASE("bf16/fp16 math: math_rounded_inputs names exactly the inputs the reference rounds") {
  auto rounded = [](const Tensor& t, MathPrecision m) {
    Tensor r = t.clone();
    for (int64_t i = 0; i < r.numel(); ++i) r.data<float>()[i] = round_to_math(r.data<float>()[i], m);
    return r;
  };
  auto check = [&](const Node& n, const TensorMap& feeds, const std::vector<size_t>& read, MathPrecision m) {
    CAPTURE(n.op_type);
    CAPTURE(math_precision_name(m));
    std::vector<bool> wanted;
    for (const std::string& o : n.outputs) wanted.push_back(!o.empty());
    const std::vector<size_t> listed = math_rounded_inputs(n, wanted);
    auto with_rounded = [&](const std::vector<size_t>& which) {
      TensorMap f = feeds;
      for (size_t i : which) f[n.inputs[i]] = rounded(feeds.at(n.inputs[i]), m);
      if (n.op_type == "FusedConv" && n.has_input(3)) {  // act(conv + B) rounded, then Z added in fp32
        Node no_z = n;
        no_z.inputs.pop_back();
        const Tensor z = f.at(n.inputs[3]);
        f.erase(n.inputs[3]);
        Tensor y = rounded(run(no_z, f, "reference", MathPrecision::fp32).at(n.outputs[0]), m);
        for (int64_t i = 0; i < y.numel(); ++i) y.data<float>()[i] += z.data<float>()[i];
        return TensorMap{{n.outputs[0], y}};
      }
      TensorMap r = run(n, f, "reference", MathPrecision::fp32);
      for (size_t k : math_rounded_outputs(n))  // and the outputs it rounds (checked below)
        if (k < n.outputs.size() && r.count(n.outputs[k])) r[n.outputs[k]] = rounded(r.at(n.outputs[k]), m);
      return r;
    };
    auto same = [](const TensorMap& a, const TensorMap& b) {
      for (const auto& [name, t] : a)
        if (max_abs_diff(t, b.at(name)) != 0) return false;
      return true;
    };
    const TensorMap want = run(n, feeds, "reference", m);
    CHECK(same(with_rounded(listed), want));
    for (size_t i = 0; i < listed.size(); ++i) {
      std::vector<size_t> fewer = listed;
      fewer.erase(fewer.begin() + static_cast<std::ptrdiff_t>(i));
      CAPTURE(listed[i]);
      CHECK_FALSE(same(with_rounded(fewer), want));
    }
    for (size_t j : read)
      if (std::find(listed.begin(), listed.end(), j) == listed.end()) {
        std::vector<size_t> more = listed;
        more.push_back(j);
        CAPTURE(j);
        CHECK_FALSE(same(with_rounded(more), want));
      }
  };
  Node conv = conv_node(3, 1, 1, true);
  Node fused = conv_node(3, 1, 1, true, kTrainrtDomain, "FusedConv");
  fused.inputs.push_back("Z");
  fused.attrs["activation"] = Attribute::of_string("Relu");
  Node grad = conv_node(3, 1, 1, false, kTrainrtDomain, "ConvGrad");
  grad.inputs = {"dY", "X", "W"};
  const TensorMap feeds{{"X", random_tensor(DataType::Float32, {2, 4, 6, 6}, 31, -1, 1)},
                        {"W", weights({5, 4, 3, 3}, 32)},
                        {"B", random_tensor(DataType::Float32, {5}, 33, -0.5, 0.5)},
                        {"Z", random_tensor(DataType::Float32, {2, 5, 6, 6}, 34, -1, 1)},
                        {"dY", random_tensor(DataType::Float32, {2, 5, 6, 6}, 35, -1, 1)}};
  auto only = [](const TensorMap& f, std::vector<std::string> names) {
    TensorMap r;
    for (const std::string& s : names) r[s] = f.at(s);
    return r;
  };
  for (MathPrecision m : {MathPrecision::bf16, MathPrecision::fp16}) {
    check(conv, only(feeds, {"X", "W", "B"}), {0, 1, 2}, m);
    check(fused, only(feeds, {"X", "W", "B", "Z"}), {0, 1, 2, 3}, m);
    // Each set of requested gradients: the inputs read for them.
    for (const auto& [outs, read] :
         std::vector<std::pair<std::vector<std::string>, std::vector<size_t>>>{{{"dX", "dW", "dB"}, {0, 1, 2}},
                                                                               {{"dX", "", ""}, {0, 2}},
                                                                               {{"", "dW", ""}, {0, 1}},
                                                                               {{"", "", "dB"}, {0}}}) {
      grad.outputs = outs;
      check(grad, only(feeds, {"dY", "X", "W"}), read, m);
    }
  }
  // ConvTranspose and its gradient as Conv and ConvGrad (W is [C, M, k, k]).
  Node deconv = make_node("ConvTranspose", {"X", "W", "B"}, {"Y"},
                          {{"kernel_shape", Attribute::of_ints({3, 3})}, {"strides", Attribute::of_ints({2, 2})}});
  Node deconv_grad = deconv;
  deconv_grad.op_type = "ConvTransposeGrad";
  deconv_grad.domain = kTrainrtDomain;
  deconv_grad.inputs = {"dY", "X", "W"};
  const TensorMap dfeeds{{"X", random_tensor(DataType::Float32, {2, 4, 5, 5}, 36, -1, 1)},
                         {"W", weights({4, 3, 3, 3}, 37)},
                         {"B", random_tensor(DataType::Float32, {3}, 38, -0.5, 0.5)},
                         {"dY", random_tensor(DataType::Float32, {2, 3, 11, 11}, 39, -1, 1)}};
  for (MathPrecision m : {MathPrecision::bf16, MathPrecision::fp16}) {
    check(deconv, only(dfeeds, {"X", "W", "B"}), {0, 1, 2}, m);
    for (const auto& [outs, read] :
         std::vector<std::pair<std::vector<std::string>, std::vector<size_t>>>{{{"dX", "dW", "dB"}, {0, 1, 2}},
                                                                               {{"dX", "", ""}, {0, 2}},
                                                                               {{"", "dW", ""}, {0, 1}},
                                                                               {{"", "", "dB"}, {0}}}) {
      deconv_grad.outputs = outs;
      check(deconv_grad, only(dfeeds, {"dY", "X", "W"}), read, m);
    }
  }
  // Gemm's C is added unrounded; MatMul has A and B only.
  const TensorMap mats{{"A", random_tensor(DataType::Float32, {3, 20}, 41, -1, 1)},
                       {"Bm", random_tensor(DataType::Float32, {20, 5}, 42, -1, 1)},
                       {"C", random_tensor(DataType::Float32, {5}, 43, -1, 1)}};
  Node gemm = make_node("Gemm", {"A", "Bm", "C"}, {"Y"});
  Node fused_gemm =
      make_node("FusedGemm", {"A", "Bm", "C"}, {"Y"}, {{"activation", Attribute::of_string("Relu")}}, kTrainrtDomain);
  for (MathPrecision m : {MathPrecision::bf16, MathPrecision::fp16}) {
    check(gemm, mats, {0, 1, 2}, m);
    check(fused_gemm, mats, {0, 1, 2}, m);
    check(make_node("MatMul", {"A", "Bm"}, {"Y"}), only(mats, {"A", "Bm"}), {0, 1}, m);
  }
  // DropoutReluGrad tests Z's sign on Z rounded: Z holds values that round to 0 in
  // bfloat16 (2^-140, an fp32 subnormal) and in half (2^-30), which pass no gradient.
  Tensor z = random_tensor(DataType::Float32, {3, 40}, 51, -1, 1);
  for (int64_t i = 0; i < z.numel(); i += 7) z.data<float>()[i] = std::ldexp(1.0f, i % 2 ? -140 : -30);
  const TensorMap drop{{"dZ", random_tensor(DataType::Float32, {3, 40}, 52, -1, 1)}, {"Zd", z}};
  const Node drop_grad = make_node("DropoutReluGrad", {"dZ", "Zd"}, {"dX"}, {}, kTrainrtDomain);
  // dZ passes unchanged into dX, which is rounded (math_rounded_outputs): rounding dZ
  // first changes nothing, so only Z is checked.
  for (MathPrecision m : {MathPrecision::bf16, MathPrecision::fp16}) check(drop_grad, drop, {1}, m);
  CHECK(math_rounded_inputs(make_node("Relu", {"A"}, {"Y"}), {true}).empty());
  CHECK(math_rounded_inputs(make_node("BatchNormalization", {"A", "s", "b", "m", "v"}, {"Y"}), {true}).empty());
}

TEST_CASE("bf16/fp16 math: DropoutReluGrad on cpu equals the reference's, and a Z that underflows passes nothing") {
  Tensor z = random_tensor(DataType::Float32, {4, 64}, 61, -1, 1);
  z.data<float>()[0] = std::ldexp(1.0f, -30);   // 0 in half, not in bfloat16
  z.data<float>()[1] = std::ldexp(1.0f, -140);  // 0 in both
  const TensorMap feeds{{"dZ", random_tensor(DataType::Float32, {4, 64}, 62, 0.5, 1)}, {"Z", z}};
  const Node n = make_node("DropoutReluGrad", {"dZ", "Z"}, {"dX"}, {}, kTrainrtDomain);
  for (MathPrecision m : {MathPrecision::fp32, MathPrecision::bf16, MathPrecision::fp16}) {
    CAPTURE(math_precision_name(m));
    const TensorMap ref = run(n, feeds, "reference", m), cpu = run(n, feeds, "cpu", m);
    CHECK(max_abs_diff(ref.at("dX"), cpu.at("dX")) == 0);
    const float* dx = ref.at("dX").data<float>();
    CHECK((dx[0] != 0) == (m != MathPrecision::fp16));
    CHECK((dx[1] != 0) == (m == MathPrecision::fp32));
  }
}

// FusedGemm's sums replace a SumToShape, which reads its input unrounded: under bf16/fp16
// the product rounds A and B (math_rounded_inputs) and the sums stay fp32's, bit for bit.
TEST_CASE("bf16/fp16 math: FusedGemm's sums read the operand unrounded, its product rounded") {
  const TensorMap feeds{{"dY", random_tensor(DataType::Float32, {6, 5}, 51, -1, 1)},
                        {"X", random_tensor(DataType::Float32, {6, 7}, 52, -1, 1)}};
  const Node n = make_node("FusedGemm", {"dY", "X"}, {"dW", "dB"},
                           {{"transA", Attribute::of_int(1)}, {"sum_of", Attribute::of_string("A")}}, kTrainrtDomain);
  const TensorMap fp32 = run(n, feeds, "reference", MathPrecision::fp32);
  for (MathPrecision m : {MathPrecision::bf16, MathPrecision::fp16}) {
    CAPTURE(math_precision_name(m));
    TensorMap pre;
    for (const auto& [name, t] : feeds) {
      pre[name] = t.clone();
      for (int64_t i = 0; i < t.numel(); ++i) pre[name].data<float>()[i] = round_to_math(t.data<float>()[i], m);
    }
    const TensorMap got = run(n, feeds, "reference", m);
    CHECK(max_abs_diff(got.at("dB"), fp32.at("dB")) == 0);
    CHECK(max_abs_diff(got.at("dW"), run(n, pre, "reference", MathPrecision::fp32).at("dW")) == 0);
    CHECK(max_abs_diff(got.at("dW"), fp32.at("dW")) > 0);
  }
}

// math_rounded_outputs (ops/core/kernel.h): under bf16/fp16 every backend rounds the
// activations and activation gradients it lists, and nothing else. On the reference and
// cpu backends: each listed float output holds only 16-bit numbers, equal to the fp32
// result rounded once (the reference, where that result is its own fp32 run on the
// rounded inputs); each other float output (bias gradients, batch statistics,
// dScale, dBias) holds values a 16-bit type cannot (it was not rounded). A kernel or an
// executor that skips the rounding, or rounds one output more, fails.
TEST_CASE("bf16/fp16 math: the reference and cpu backends round exactly math_rounded_outputs") {
  const TensorMap feeds{{"X", random_tensor(DataType::Float32, {2, 4, 6, 6}, 71, -1, 1)},
                        {"W", weights({5, 4, 3, 3}, 72)},
                        {"B", random_tensor(DataType::Float32, {5}, 73, -0.5, 0.5)},
                        {"Z", random_tensor(DataType::Float32, {2, 5, 6, 6}, 74, -1, 1)},
                        {"dY", random_tensor(DataType::Float32, {2, 5, 6, 6}, 75, -1, 1)},
                        {"s", random_tensor(DataType::Float32, {5}, 76, 0.5, 1.5)},
                        {"b", random_tensor(DataType::Float32, {5}, 77, -0.5, 0.5)},
                        {"m", random_tensor(DataType::Float32, {5}, 78, -0.5, 0.5)},
                        {"v", random_tensor(DataType::Float32, {5}, 79, 0.5, 1.5)},
                        {"Xn", random_tensor(DataType::Float32, {2, 5, 6, 6}, 80, -1.5, 2.5)}};
  auto only = [&](std::vector<std::string> names) {
    TensorMap r;
    for (const std::string& s : names) r[s] = feeds.at(s);
    return r;
  };
  Node fused = conv_node(3, 1, 1, true, kTrainrtDomain, "FusedConv");
  fused.inputs.push_back("Z");
  fused.attrs["activation"] = Attribute::of_string("Relu");
  Node grad = conv_node(3, 1, 1, false, kTrainrtDomain, "ConvGrad");
  grad.inputs = {"dY", "X", "W"};
  grad.outputs = {"dX", "dW", "dB"};
  Node fused_no_z = fused;
  fused_no_z.inputs.pop_back();
  const std::vector<std::pair<Node, TensorMap>> cases{
      {conv_node(3, 1, 1, true), only({"X", "W", "B"})},
      {fused, only({"X", "W", "B", "Z"})},  // Y = relu(round(conv + B)) + Z: not listed (test_fused_ops.cpp)
      {fused_no_z, only({"X", "W", "B"})},
      {grad, only({"dY", "X", "W"})},
      {make_node("BatchNormalization", {"Xn", "s", "b", "m", "v"}, {"Y", "rm", "rv"},
                 {{"training_mode", Attribute::of_int(1)}}),
       only({"Xn", "s", "b", "m", "v"})},
      {make_node("BatchNormalizationRelu", {"Xn", "s", "b", "m", "v"}, {"Y", "rm", "rv"},
                 {{"training_mode", Attribute::of_int(1)}}, kTrainrtDomain),
       only({"Xn", "s", "b", "m", "v"})},
      {make_node("BatchNormalizationGrad", {"dY", "Xn", "s"}, {"dX", "ds", "db"}, {}, kTrainrtDomain),
       only({"dY", "Xn", "s"})},
      {make_node("DropoutReluGrad", {"dY", "Xn"}, {"dX"}, {}, kTrainrtDomain), only({"dY", "Xn"})},
  };
  for (const auto& [n, f] : cases) {
    CAPTURE(n.op_type);
    const std::vector<size_t> listed = math_rounded_outputs(n);
    const bool residual = n.op_type == "FusedConv" && n.has_input(3);
    // ConvGrad: dX and dW (autocast's dW, the gradient of the weights' 16-bit copy), not dB.
    const std::vector<size_t> expected = residual                  ? std::vector<size_t>{}
                                         : n.op_type == "ConvGrad" ? std::vector<size_t>{0, 1}
                                                                   : std::vector<size_t>{0};
    CHECK(listed == expected);
    const TensorMap fp32 = run(n, f, "reference", MathPrecision::fp32);
    for (MathPrecision m : {MathPrecision::bf16, MathPrecision::fp16}) {
      CAPTURE(math_precision_name(m));
      for (const std::string backend : {"reference", "cpu"}) {
        CAPTURE(backend);
        if (backend == "cpu" && m == MathPrecision::bf16 && !dnnl_util::cpu_has_bf16()) continue;
        const TensorMap got = run(n, f, backend, m);
        for (size_t k = 0; k < n.outputs.size(); ++k) {
          if (n.outputs[k].empty()) continue;
          CAPTURE(n.outputs[k]);
          const Tensor& t = got.at(n.outputs[k]);
          CHECK(all_16_bit(t, m) == (std::find(expected.begin(), expected.end(), k) != expected.end()));
        }
      }
      // Ops that round no input: the reference's result is its fp32 one rounded once.
      if (!math_rounded_inputs(n, std::vector<bool>(n.outputs.size(), true)).empty()) continue;
      const TensorMap ref = run(n, f, "reference", m);
      Tensor want = fp32.at(n.outputs[0]).clone();
      for (int64_t i = 0; i < want.numel(); ++i) want.data<float>()[i] = round_to_math(want.data<float>()[i], m);
      CHECK(max_abs_diff(ref.at(n.outputs[0]), want) == 0);
    }
  }
  // Ops outside the list round no output.
  CHECK(math_rounded_outputs(make_node("Gemm", {"A", "B"}, {"Y"})).empty());
  CHECK(math_rounded_outputs(make_node("Relu", {"A"}, {"Y"})).empty());
  CHECK(math_rounded_outputs(make_node("Dropout", {"A"}, {"Y", "mask"})).empty());
}
