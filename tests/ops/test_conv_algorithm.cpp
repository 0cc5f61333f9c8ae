// ConvAlgorithm::winograd (ops/core/kernel.h) on the cpu backend: oneDNN's Winograd
// F(4x4, 3x3) for fp32 3x3 stride-1 convolutions, forward and both backward passes.
//
// Winograd computes the same sums through transforms of 6x6 input tiles and 3x3
// weights whose constants (up to 5.06 in F(4x4,3x3)) amplify fp32 rounding, so it is
// less exact than the direct sum but is no approximation: against the reference
// (direct, in double) the largest difference of any output stays below 1e-4 of the
// output's rms here (measured: at most 1.35e-5 of the rms over these shapes), where
// the direct kernel's is ~2e-6. Checked: each output within 1e-4 of the rms of the
// reference; different from the direct cpu kernel's output (so the Winograd primitive
// really ran); and for shapes Winograd does not take (stride 2, 1x1, bf16), asking for
// it changes nothing: bit-identical to direct. oneDNN implements Winograd for AVX-512
// only: on an AVX2+FMA CPU the cpu backend runs its own F(4x4,3x3) where it is faster
// (winograd::preferred: at least 64 channels in and out; within kOwnBound below, and
// different from direct), and the other cases are bit-identical to direct. The last test
// calls the backend's own kernel directly, so AVX-512 CPUs test it too.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "ops/onednn/dnnl_util.h"
#include "ops/onednn/winograd.h"
#include "runtime/executor.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

double rms(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += t.get_as_double(i) * t.get_as_double(i);
  return t.numel() ? std::sqrt(s / static_cast<double>(t.numel())) : 0;
}

bool bit_equal(const Tensor& a, const Tensor& b) {
  return a.dims() == b.dims() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// plain: every value row-major (Backend::blocked_layouts off), as the own Winograd needs.
TensorMap run(const Node& n, const TensorMap& feeds, const std::string& backend, ConvAlgorithm conv,
              MathPrecision math = MathPrecision::fp32, bool plain = false) {
  Graph g = single_node_graph(n, feeds, {}, 17);
  ExecutorOptions o;
  o.conv = conv;
  o.math = math;
  const std::unique_ptr<Backend> b = make_backend(backend);  // the executor keeps a reference
  if (plain) b->blocked_layouts = false;
  Executor ex(g, *b, o);
  TensorMap out;
  for (const auto& [name, t] : ex.run(feeds)) out[name] = t.clone();
  return out;
}

Node conv_node(const std::string& op, const std::string& domain, int64_t k, int64_t stride, int64_t pad) {
  Node n = make_node(op, {"X", "W"}, {"Y"}, {}, domain);
  n.attrs["kernel_shape"] = Attribute::of_ints({k, k});
  n.attrs["strides"] = Attribute::of_ints({stride, stride});
  n.attrs["pads"] = Attribute::of_ints({pad, pad, pad, pad});
  return n;
}

Tensor weights(std::vector<int64_t> dims, uint64_t seed) {
  const double a = 1.0 / std::sqrt(static_cast<double>(dims[1] * dims[2] * dims[3]));
  return random_tensor(DataType::Float32, std::move(dims), seed, -a, a);
}

// The backend's own F(4x4,3x3) (ops/onednn/winograd.h, the kernels' choice on AVX2) is held
// to kOwnBound of each output's rms. Derived from the tile size: an output of a 4x4 tile
// is A^T (U . V) A with V = B^T d B, and the rounding of each fp32 step is amplified by
// the transforms' entries, which grow with the tile: up to 8 (= 2^3, the point 2 cubed)
// in A^T and 5 in B^T for 4x4 outputs (F(2x2,3x3): 1 and 1). Relative to the direct
// sum's ~2e-6 of the rms (this test's |direct - ref|), a factor of ~40 (8 x 5) gives
// ~8e-5; measured here at most ~5.4e-5 (forward, FusedConv, data and weight gradients
// over the shapes below), so the bound is 2e-4. oneDNN's Winograd (AVX-512) keeps 1e-4.
constexpr double kOwnBound = 2e-4;

double g_worst = 0;  // largest |winograd - reference| / rms seen, for the message

// own_c, own_m: the convolution's input and output channels.
void check_winograd(const Node& n, const TensorMap& feeds, int64_t own_c, int64_t own_m) {
  const TensorMap ref = run(n, feeds, "reference", ConvAlgorithm::direct);
  const TensorMap direct = run(n, feeds, "cpu", ConvAlgorithm::direct);
  const uint64_t before = dnnl_util::reference_fallbacks();
  const TensorMap wino = run(n, feeds, "cpu", ConvAlgorithm::winograd);
  CHECK(dnnl_util::reference_fallbacks() == before);
  for (const auto& [name, r] : ref) {
    const double scale = rms(r), diff = max_abs_diff(wino.at(name), r);
    g_worst = std::max(g_worst, diff / scale);
    INFO(n.op_type, " output '", name, "' ", dims_to_string(r.dims()), ": |winograd - ref| = ", diff, " (",
         diff / scale, " of the rms), |direct - ref| = ", max_abs_diff(direct.at(name), r));
    CHECK(diff <= (dnnl_util::cpu_has_avx512_core() ? 1e-4 : kOwnBound) * scale);
    // oneDNN's Winograd on AVX-512, the backend's own (ops/onednn/winograd.h) on AVX2 where
    // it is preferred; direct otherwise.
    if (dnnl_util::cpu_has_avx512_core() || winograd::preferred(own_c, own_m))
      CHECK_FALSE(bit_equal(wino.at(name), direct.at(name)));
    else
      CHECK(bit_equal(wino.at(name), direct.at(name)));
  }
}

struct Case {
  int64_t n, c, m, hw;
};
// The Wide ResNet's 3x3 stride-1 layers (width 10, Fashion-MNIST) at a small batch, and
// sizes that are not multiples of the 4x4 output tile or of 16 channels.
const Case kCases[] = {{2, 1, 16, 28},   {2, 16, 160, 28}, {2, 160, 160, 28}, {2, 320, 320, 14},
                       {2, 640, 640, 7}, {3, 20, 36, 9},   {1, 16, 16, 5}};

}  // namespace

TEST_CASE("winograd: Conv, FusedConv and ConvGrad agree with the reference and differ from direct") {
  uint64_t seed = 500;
  for (Case s : kCases) {
    // The same channels and batch (dB sums over it: one image would give direct's bits),
    // smaller images.
    s.hw = test::sanitized(s.hw, 8);
    CAPTURE(s.c);
    CAPTURE(s.m);
    CAPTURE(s.hw);
    const Tensor x = random_tensor(DataType::Float32, {s.n, s.c, s.hw, s.hw}, ++seed, -1, 1);
    const Tensor w = weights({s.m, s.c, 3, 3}, ++seed);
    check_winograd(conv_node("Conv", "", 3, 1, 1), {{"X", x}, {"W", w}}, s.c, s.m);

    Node fused = conv_node("FusedConv", kTrainrtDomain, 3, 1, 1);
    fused.inputs = {"X", "W", "B", "Z"};
    fused.attrs["activation"] = Attribute::of_string("Relu");
    check_winograd(fused,
                   {{"X", x},
                    {"W", w},
                    {"B", random_tensor(DataType::Float32, {s.m}, ++seed, -0.5, 0.5)},
                    {"Z", random_tensor(DataType::Float32, {s.n, s.m, s.hw, s.hw}, ++seed, -1, 1)}},
                   s.c, s.m);

    Node grad = conv_node("ConvGrad", kTrainrtDomain, 3, 1, 1);
    grad.inputs = {"dY", "X", "W"};
    grad.outputs = {"dX", "dW", "dB"};
    check_winograd(
        grad, {{"dY", random_tensor(DataType::Float32, {s.n, s.m, s.hw, s.hw}, ++seed, -1, 1)}, {"X", x}, {"W", w}},
        s.c, s.m);
  }
  MESSAGE("largest |winograd - reference| / rms: ", g_worst);
}

// Beyond the Wide ResNet: non-square images, one-sided and uneven pads (ONNX's `pads` as
// begin and end per axis) and auto_pad, through the kernels (Conv, FusedConv, ConvGrad)
// with 64 channels or more, so that an AVX2 CPU runs the backend's own Winograd: within the
// bound of the reference and not the direct kernel's bits. On AVX-512 oneDNN may take or
// refuse a shape, so only the bound is checked there.
TEST_CASE("winograd: non-square images, uneven pads and auto_pad agree with the reference") {
  struct Shape {
    int64_t n, c, m, h, w;
    std::vector<int64_t> pads;  // top, left, bottom, right; empty: auto_pad
    const char* auto_pad;
  };
  const Shape shapes[] = {{2, 64, 64, 7, 13, {0, 1, 2, 1}, "NOTSET"}, {1, 72, 64, 5, 3, {1, 1, 1, 1}, "NOTSET"},
                          {1, 64, 80, 10, 6, {2, 0, 0, 2}, "NOTSET"}, {2, 64, 64, 9, 6, {}, "VALID"},
                          {1, 64, 64, 6, 11, {}, "SAME_LOWER"},       {1, 64, 64, 1, 1, {1, 1, 1, 1}, "NOTSET"},
                          {3, 64, 64, 2, 9, {1, 0, 1, 2}, "NOTSET"}};
  uint64_t seed = 700;
  for (const Shape& s : shapes) {
    CAPTURE(s.h);
    CAPTURE(s.w);
    CAPTURE(s.auto_pad);
    const std::vector<int64_t> p =
        s.pads.empty() ? std::vector<int64_t>(4, std::string(s.auto_pad) == "VALID" ? 0 : 1) : s.pads;
    const int64_t ho = s.h + p[0] + p[2] - 2, wo = s.w + p[1] + p[3] - 2;
    auto node = [&](const std::string& op, const std::string& domain) {
      Node n = conv_node(op, domain, 3, 1, 0);
      if (s.pads.empty()) {
        n.attrs.erase("pads");
        n.attrs["auto_pad"] = Attribute::of_string(s.auto_pad);
      } else {
        n.attrs["pads"] = Attribute::of_ints(s.pads);
      }
      return n;
    };
    const Tensor x = random_tensor(DataType::Float32, {s.n, s.c, s.h, s.w}, ++seed, -1, 1);
    const Tensor w = weights({s.m, s.c, 3, 3}, ++seed);
    Node fused = node("FusedConv", kTrainrtDomain);
    fused.inputs = {"X", "W", "B", "Z"};
    fused.attrs["activation"] = Attribute::of_string("Relu");
    Node grad = node("ConvGrad", kTrainrtDomain);
    grad.inputs = {"dY", "X", "W"};
    grad.outputs = {"dX", "dW"};
    const std::pair<Node, TensorMap> runs[] = {
        {node("Conv", ""), {{"X", x}, {"W", w}}},
        {fused,
         {{"X", x},
          {"W", w},
          {"B", random_tensor(DataType::Float32, {s.m}, ++seed, -0.5, 0.5)},
          {"Z", random_tensor(DataType::Float32, {s.n, s.m, ho, wo}, ++seed, -1, 1)}}},
        {grad, {{"dY", random_tensor(DataType::Float32, {s.n, s.m, ho, wo}, ++seed, -1, 1)}, {"X", x}, {"W", w}}}};
    for (const auto& [n, feeds] : runs) {
      const TensorMap ref = run(n, feeds, "reference", ConvAlgorithm::direct);
      const TensorMap direct = run(n, feeds, "cpu", ConvAlgorithm::direct);
      const TensorMap wino = run(n, feeds, "cpu", ConvAlgorithm::winograd);
      for (const auto& [name, r] : ref) {
        const double scale = rms(r), diff = max_abs_diff(wino.at(name), r);
        INFO(n.op_type, " '", name, "' ", dims_to_string(r.dims()), ": |winograd - ref| = ", diff, " (", diff / scale,
             " of the rms)");
        CHECK(diff <= kOwnBound * scale);
        if (!dnnl_util::cpu_has_avx512_core() && winograd::supported())
          CHECK_FALSE(bit_equal(wino.at(name), direct.at(name)));
      }
    }
  }
}

TEST_CASE("winograd: shapes it does not take run the direct kernel, bit for bit") {
  const Tensor x = random_tensor(DataType::Float32, {2, 32, 14, 14}, 1, -1, 1);
  struct Other {
    int64_t k, stride, pad;
    MathPrecision math;
  };
  for (const Other& o : {Other{3, 2, 1, MathPrecision::fp32}, Other{1, 1, 0, MathPrecision::fp32},
                         Other{5, 1, 2, MathPrecision::fp32}, Other{3, 1, 1, MathPrecision::bf16}}) {
    CAPTURE(o.k);
    CAPTURE(o.stride);
    const Node n = conv_node("Conv", "", o.k, o.stride, o.pad);
    const TensorMap feeds{{"X", x}, {"W", weights({48, 32, o.k, o.k}, 2)}};
    CHECK(bit_equal(run(n, feeds, "cpu", ConvAlgorithm::winograd, o.math).at("Y"),
                    run(n, feeds, "cpu", ConvAlgorithm::direct, o.math).at("Y")));
  }
  // 3x3 stride 1 but grouped or dilated (64 channels: within the own kernel's bound on
  // AVX2, so only the shape rule keeps them direct), forward and both gradients.
  const Tensor x64 = random_tensor(DataType::Float32, {2, 64, 12, 12}, 3, -1, 1);
  for (const auto& [group, dilation] : {std::pair<int64_t, int64_t>{2, 1}, std::pair<int64_t, int64_t>{1, 2}}) {
    CAPTURE(group);
    CAPTURE(dilation);
    const int64_t out = 12;  // pads = dilation: the same size
    auto with = [&](Node n) {
      n.attrs["group"] = Attribute::of_int(group);
      n.attrs["dilations"] = Attribute::of_ints({dilation, dilation});
      n.attrs["pads"] = Attribute::of_ints({dilation, dilation, dilation, dilation});
      return n;
    };
    const Tensor w = weights({64, 64 / group, 3, 3}, 4);
    Node grad = with(conv_node("ConvGrad", kTrainrtDomain, 3, 1, 1));
    grad.inputs = {"dY", "X", "W"};
    grad.outputs = {"dX", "dW"};
    const std::pair<Node, TensorMap> runs[] = {
        {with(conv_node("Conv", "", 3, 1, 1)), {{"X", x64}, {"W", w}}},
        {grad, {{"dY", random_tensor(DataType::Float32, {2, 64, out, out}, 5, -1, 1)}, {"X", x64}, {"W", w}}}};
    for (const auto& [n, feeds] : runs) {
      const TensorMap wino = run(n, feeds, "cpu", ConvAlgorithm::winograd);
      const TensorMap direct = run(n, feeds, "cpu", ConvAlgorithm::direct);
      for (const auto& [name, t] : direct) {
        CAPTURE(name);
        CHECK(bit_equal(wino.at(name), t));
      }
    }
  }
}

// The backend's own F(4x4,3x3) (ops/onednn/winograd.h), called directly so that it is tested
// on AVX-512 CPUs too (where the kernels pick oneDNN's): forward with each part of the
// epilogue, data and weight gradients, against the reference backend, for the Wide
// ResNet's layer shapes at batch 2, odd sizes and other paddings.
//
namespace {

double g_own_worst = 0;
void check_close(const char* what, const Tensor& got, const Tensor& ref) {
  const double scale = rms(ref), diff = max_abs_diff(got, ref);
  g_own_worst = std::max(g_own_worst, diff / scale);
  INFO(what, " ", dims_to_string(ref.dims()), ": |own winograd - ref| = ", diff, " (", diff / scale, " of the rms)");
  CHECK(diff <= kOwnBound * scale);
}
}  // namespace

TEST_CASE("winograd: the backend's own, called directly: forward, data and weight gradients agree with the reference") {
  if (!winograd::supported()) {
    MESSAGE("no AVX2+FMA: the backend's own Winograd is not used here");
    return;
  }
  struct Own {
    int64_t n, c, m, hw, pad;
  };
  // The Wide ResNet's 3x3 layers (Fashion-MNIST 28x28 and CIFAR 32x32 shapes) at batch 1-2,
  // sizes that are not multiples of the 4x4 tile or of 8 channels, and pads 0 and 2.
  const Own cases[] = {{2, 1, 16, 28, 1},    {2, 3, 16, 32, 1},   {2, 16, 160, 28, 1}, {1, 160, 160, 32, 1},
                       {2, 320, 320, 14, 1}, {1, 320, 640, 8, 1}, {1, 640, 640, 7, 1}, {3, 20, 36, 9, 1},
                       {1, 5, 7, 5, 0},      {2, 9, 12, 11, 2}};
  uint64_t seed = 900;
  for (Own s : cases) {
    s.n = test::sanitized(s.n, 1), s.hw = test::sanitized(s.hw, 8);
    CAPTURE(s.c);
    CAPTURE(s.m);
    CAPTURE(s.hw);
    CAPTURE(s.pad);
    const int64_t out = s.hw + 2 * s.pad - 2;
    const Tensor x = random_tensor(DataType::Float32, {s.n, s.c, s.hw, s.hw}, ++seed, -1, 1);
    const Tensor w = weights({s.m, s.c, 3, 3}, ++seed);
    const Tensor b = random_tensor(DataType::Float32, {s.m}, ++seed, -0.5, 0.5);
    const Tensor z = random_tensor(DataType::Float32, {s.n, s.m, out, out}, ++seed, -1, 1);
    const Tensor dy = random_tensor(DataType::Float32, {s.n, s.m, out, out}, ++seed, -1, 1);
    const winograd::Geometry g{s.n, s.c, s.hw, s.hw, s.m, out, out, s.pad, s.pad};

    Node fused = conv_node("FusedConv", kTrainrtDomain, 3, 1, s.pad);
    fused.inputs = {"X", "W", "B", "Z"};
    fused.attrs["activation"] = Attribute::of_string("Relu");
    const Tensor ref_fused =
        run(fused, {{"X", x}, {"W", w}, {"B", b}, {"Z", z}}, "reference", ConvAlgorithm::direct).at("Y");
    Tensor y(DataType::Float32, {s.n, s.m, out, out});
    winograd::forward(g, x.data<float>(), w.data<float>(), {b.data<float>(), true, z.data<float>()}, y.data<float>());
    check_close("forward, bias, relu and Z", y, ref_fused);

    const Tensor ref_conv =
        run(conv_node("Conv", "", 3, 1, s.pad), {{"X", x}, {"W", w}}, "reference", ConvAlgorithm::direct).at("Y");
    winograd::forward(g, x.data<float>(), w.data<float>(), {}, y.data<float>());
    check_close("forward", y, ref_conv);

    Node grad = conv_node("ConvGrad", kTrainrtDomain, 3, 1, s.pad);
    grad.inputs = {"dY", "X", "W"};
    grad.outputs = {"dX", "dW"};
    const TensorMap ref_grad = run(grad, {{"dY", dy}, {"X", x}, {"W", w}}, "reference", ConvAlgorithm::direct);
    Tensor dx(DataType::Float32, x.dims()), dw(DataType::Float32, w.dims());
    winograd::backward_data(g, dy.data<float>(), w.data<float>(), dx.data<float>());
    winograd::backward_weights(g, dy.data<float>(), x.data<float>(), dw.data<float>());
    check_close("data gradient", dx, ref_grad.at("dX"));
    check_close("weight gradient", dw, ref_grad.at("dW"));
  }
  MESSAGE("largest |own winograd - reference| / rms: ", g_own_worst);
}

// TRAINRT_WINOGRAD=own (winograd::own_requested) makes the kernels take the backend's own
// Winograd wherever it fits, also on AVX-512 where they otherwise run oneDNN's: Conv and
// ConvGrad then give the bits of the own kernels called directly, on every CPU kind.
TEST_CASE("winograd: TRAINRT_WINOGRAD=own runs the backend's own kernels on every CPU kind") {
  if (!winograd::supported()) {
    MESSAGE("no AVX2+FMA: the backend's own Winograd is not used here");
    return;
  }
  struct Env {
    Env() { setenv("TRAINRT_WINOGRAD", "own", 1); }
    ~Env() { unsetenv("TRAINRT_WINOGRAD"); }
  };
  const int64_t n = 2, c = 64, m = 96, hw = 10;
  const Tensor x = random_tensor(DataType::Float32, {n, c, hw, hw}, 41, -1, 1);
  const Tensor w = weights({m, c, 3, 3}, 42);
  const Tensor dy = random_tensor(DataType::Float32, {n, m, hw, hw}, 43, -1, 1);
  const winograd::Geometry g{n, c, hw, hw, m, hw, hw, 1, 1};
  Tensor y(DataType::Float32, {n, m, hw, hw}), dx(DataType::Float32, x.dims()), dw(DataType::Float32, w.dims());
  winograd::forward(g, x.data<float>(), w.data<float>(), {}, y.data<float>());
  winograd::backward_data(g, dy.data<float>(), w.data<float>(), dx.data<float>());
  winograd::backward_weights(g, dy.data<float>(), x.data<float>(), dw.data<float>());
  Node grad = conv_node("ConvGrad", kTrainrtDomain, 3, 1, 1);
  grad.inputs = {"dY", "X", "W"};
  grad.outputs = {"dX", "dW"};
  CHECK_FALSE(winograd::own_requested());
  TensorMap conv, conv_grad;
  {
    const Env env;
    CHECK(winograd::own_requested());
    conv = run(conv_node("Conv", "", 3, 1, 1), {{"X", x}, {"W", w}}, "cpu", ConvAlgorithm::winograd,
               MathPrecision::fp32, true);
    conv_grad = run(grad, {{"dY", dy}, {"X", x}, {"W", w}}, "cpu", ConvAlgorithm::winograd, MathPrecision::fp32, true);
  }
  CHECK(bit_equal(conv.at("Y"), y));
  CHECK(bit_equal(conv_grad.at("dX"), dx));
  CHECK(bit_equal(conv_grad.at("dW"), dw));
}
