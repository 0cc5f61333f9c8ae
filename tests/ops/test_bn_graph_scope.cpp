// Which batch normalizations the cuda backend's cuDNN graphs describe
// (ops/core/bn_graph_scope.h): float32 activations, and since 16-bit storage, activations
// stored in the call's 16-bit type, with the channel rule of cuDNN's fusion engines.
#include <doctest/doctest.h>

#include "ops/core/bn_graph_scope.h"

using namespace trainrt;

namespace {

// A tensor without memory: dtype, dims, layout and the 16-bit storage mark.
Tensor shaped(DataType t, std::vector<int64_t> dims, Layout l = Layout::ChannelsLast, bool narrowed = false) {
  Tensor r(t, std::move(dims), nullptr);
  r.set_layout(l);
  r.set_narrowed(narrowed);
  return r;
}
Tensor stored16(DataType t, std::vector<int64_t> dims) {
  return shaped(t, std::move(dims), Layout::ChannelsLast, true);
}

}  // namespace

TEST_CASE("bn graph scope: float32 NHWC activations, C a multiple of 4") {
  const std::vector<int64_t> d{8, 160, 32, 32};
  const Tensor x = shaped(DataType::Float32, d), y = shaped(DataType::Float32, d);
  const Tensor scale = shaped(DataType::Float32, {160}, Layout::Plain), bias = scale;
  for (MathPrecision m : {MathPrecision::fp32, MathPrecision::bf16, MathPrecision::fp16})
    CHECK(bn_graph_scope::reason(x, {&y}, {&scale, &bias}, m) == "");
  // C = 12: a multiple of 4 is enough for float32.
  const Tensor x12 = shaped(DataType::Float32, {2, 12, 4, 4}), s12 = shaped(DataType::Float32, {12}, Layout::Plain);
  CHECK(bn_graph_scope::reason(x12, {&x12}, {&s12}, MathPrecision::fp32) == "");
  const Tensor x6 = shaped(DataType::Float32, {2, 6, 4, 4}), s6 = shaped(DataType::Float32, {6}, Layout::Plain);
  CHECK(bn_graph_scope::reason(x6, {}, {&s6}, MathPrecision::fp32) == "C=6 not a multiple of 4");
}

TEST_CASE("bn graph scope: activations stored in the math's 16-bit type, C a multiple of 8") {
  const std::vector<int64_t> d{1024, 320, 16, 16};
  const Tensor scale = shaped(DataType::Float32, {320}, Layout::Plain);
  const Tensor x = stored16(DataType::BFloat16, d), dy = stored16(DataType::BFloat16, d);
  const Tensor dx = stored16(DataType::BFloat16, d), relu_y = stored16(DataType::BFloat16, d);
  // The Wide ResNet's batch-norm gradient under bf16: X, dY, dX and the ReLU's Y all 16-bit.
  CHECK(bn_graph_scope::reason(x, {&dy, &dx, &relu_y}, {&scale}, MathPrecision::bf16) == "");
  // An omitted ReLU input agrees with anything.
  CHECK(bn_graph_scope::reason(x, {&dy, &dx, nullptr}, {&scale}, MathPrecision::bf16) == "");
  // A float32 dY beside 16-bit X: each described as stored.
  const Tensor dy32 = shaped(DataType::Float32, d);
  CHECK(bn_graph_scope::reason(x, {&dy32, &dx}, {&scale}, MathPrecision::bf16) == "");
  // Half storage under fp16.
  const Tensor xh = stored16(DataType::Float16, d);
  CHECK(bn_graph_scope::reason(xh, {&xh}, {&scale}, MathPrecision::fp16) == "");
  // 16-bit storage of the other math, or under fp32, is no value this call stores so.
  CHECK(bn_graph_scope::reason(xh, {}, {&scale}, MathPrecision::bf16) ==
        "dtype float16 (float32, or float32 stored in 16 bits)");
  CHECK(bn_graph_scope::reason(x, {}, {&scale}, MathPrecision::fp32) ==
        "dtype bfloat16 (float32, or float32 stored in 16 bits)");
  CHECK(bn_graph_scope::reason(shaped(DataType::Float32, d), {&xh}, {&scale}, MathPrecision::bf16) ==
        "dtype float16 (float32, or float32 stored in 16 bits)");
  // A bfloat16 tensor of the model itself (not a stored float32 value) is out of scope.
  const Tensor model16 = shaped(DataType::BFloat16, d);
  CHECK(bn_graph_scope::reason(model16, {}, {&scale}, MathPrecision::bf16) ==
        "dtype bfloat16 (float32, or float32 stored in 16 bits)");
  // C = 12: enough for float32, not where any activation is 16-bit.
  const Tensor s12 = shaped(DataType::Float32, {12}, Layout::Plain);
  const Tensor x12 = shaped(DataType::Float32, {2, 12, 4, 4}), y12 = stored16(DataType::BFloat16, {2, 12, 4, 4});
  CHECK(bn_graph_scope::reason(x12, {&x12}, {&s12}, MathPrecision::bf16) == "");
  CHECK(bn_graph_scope::reason(x12, {&y12}, {&s12}, MathPrecision::bf16) == "C=12 not a multiple of 8 (16-bit)");
}

TEST_CASE("bn graph scope: shapes, layouts and per-channel tensors it turns down") {
  const std::vector<int64_t> d{4, 16, 8, 8};
  const Tensor x = shaped(DataType::Float32, d), scale = shaped(DataType::Float32, {16}, Layout::Plain);
  const MathPrecision m = MathPrecision::bf16;
  CHECK(bn_graph_scope::reason(shaped(DataType::Float32, d, Layout::Plain), {}, {&scale}, m) ==
        "NCHW (the graphs take NHWC)");
  const Tensor y_plain = shaped(DataType::Float32, d, Layout::Plain);
  CHECK(bn_graph_scope::reason(x, {&y_plain}, {&scale}, m) == "NCHW (the graphs take NHWC)");
  const Tensor other = shaped(DataType::Float32, {4, 16, 8, 4});
  CHECK(bn_graph_scope::reason(x, {&other}, {&scale}, m) == "an activation of another shape");
  CHECK(bn_graph_scope::reason(shaped(DataType::Float32, {4, 16, 8}), {}, {&scale}, m) ==
        "rank 3 (the graphs take 4-D N,C,H,W)");
  CHECK(bn_graph_scope::reason(shaped(DataType::Float32, {0, 16, 8, 8}), {}, {&scale}, m) == "empty");
  CHECK(bn_graph_scope::reason(shaped(DataType::Float64, d), {}, {&scale}, m) ==
        "dtype float64 (float32, or float32 stored in 16 bits)");
  const Tensor scale64 = shaped(DataType::Float64, {16}, Layout::Plain);
  const Tensor scale8 = shaped(DataType::Float32, {8}, Layout::Plain);
  CHECK(bn_graph_scope::reason(x, {}, {&scale64}, m) == "per-channel tensor not float32 of C values");
  CHECK(bn_graph_scope::reason(x, {}, {&scale, &scale8}, m) == "per-channel tensor not float32 of C values");
}

TEST_CASE("bn graph scope: what a value stored in 16 bits is (stored_16bit, io_type)") {
  const Tensor b = stored16(DataType::BFloat16, {2, 8, 2, 2}), h = stored16(DataType::Float16, {2, 8, 2, 2});
  CHECK(stored_16bit(b, MathPrecision::bf16));
  CHECK_FALSE(stored_16bit(b, MathPrecision::fp16));
  CHECK_FALSE(stored_16bit(b, MathPrecision::fp32));
  CHECK(stored_16bit(h, MathPrecision::fp16));
  CHECK_FALSE(stored_16bit(shaped(DataType::BFloat16, {2, 8, 2, 2}), MathPrecision::bf16));
  CHECK(bn_graph_scope::io_type(b, MathPrecision::bf16) == DataType::BFloat16);
  CHECK(bn_graph_scope::io_type(h, MathPrecision::fp16) == DataType::Float16);
  CHECK(bn_graph_scope::io_type(shaped(DataType::Float32, {2}), MathPrecision::bf16) == DataType::Float32);
  CHECK_FALSE(bn_graph_scope::io_type(h, MathPrecision::bf16).has_value());
  CHECK(math_storage_type(MathPrecision::bf16) == DataType::BFloat16);
  CHECK(math_storage_type(MathPrecision::fp16) == DataType::Float16);
}
