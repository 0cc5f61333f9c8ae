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
// only: on an AVX2 CPU every case must be bit-identical to direct instead.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>

#include "ops/core/dnnl_util.h"
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

TensorMap run(const Node& n, const TensorMap& feeds, const std::string& backend, ConvAlgorithm conv,
              MathPrecision math = MathPrecision::fp32) {
  Graph g = single_node_graph(n, feeds, {}, 17);
  ExecutorOptions o;
  o.conv = conv;
  o.math = math;
  const std::unique_ptr<Backend> b = make_backend(backend);  // the executor keeps a reference
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

double g_worst = 0;  // largest |winograd - reference| / rms seen, for the message

void check_winograd(const Node& n, const TensorMap& feeds) {
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
    CHECK(diff <= 1e-4 * scale);
    // oneDNN has Winograd on AVX-512 only; elsewhere asking for it runs direct.
    if (dnnl_util::cpu_has_avx512_core())
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
  for (const Case& s : kCases) {
    CAPTURE(s.c);
    CAPTURE(s.m);
    CAPTURE(s.hw);
    const Tensor x = random_tensor(DataType::Float32, {s.n, s.c, s.hw, s.hw}, ++seed, -1, 1);
    const Tensor w = weights({s.m, s.c, 3, 3}, ++seed);
    check_winograd(conv_node("Conv", "", 3, 1, 1), {{"X", x}, {"W", w}});

    Node fused = conv_node("FusedConv", kTrainrtDomain, 3, 1, 1);
    fused.inputs = {"X", "W", "B", "Z"};
    fused.attrs["activation"] = Attribute::of_string("Relu");
    check_winograd(fused, {{"X", x},
                           {"W", w},
                           {"B", random_tensor(DataType::Float32, {s.m}, ++seed, -0.5, 0.5)},
                           {"Z", random_tensor(DataType::Float32, {s.n, s.m, s.hw, s.hw}, ++seed, -1, 1)}});

    Node grad = conv_node("ConvGrad", kTrainrtDomain, 3, 1, 1);
    grad.inputs = {"dY", "X", "W"};
    grad.outputs = {"dX", "dW", "dB"};
    check_winograd(
        grad, {{"dY", random_tensor(DataType::Float32, {s.n, s.m, s.hw, s.hw}, ++seed, -1, 1)}, {"X", x}, {"W", w}});
  }
  MESSAGE("largest |winograd - reference| / rms: ", g_worst);
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
}
