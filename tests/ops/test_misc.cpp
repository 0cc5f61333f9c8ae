// Identity, Constant, Cast and Dropout (ops/misc.cpp).
#include <doctest/doctest.h>

#include <cmath>
#include <functional>
#include <limits>

#include "graph/error.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

Tensor cast(const Tensor& x, DataType to) {
  Node n = make_node("Cast", {"x"}, {"y"}, {{"to", Attribute::of_int(static_cast<int64_t>(to))}});
  return run_node(n, {{"x", x}}, "reference").at("y");
}

Tensor scalar_bool(bool v) {
  Tensor t(DataType::Bool, {});
  t.data<uint8_t>()[0] = v ? 1 : 0;
  return t;
}

// Dropout of x in training mode; returns {output, mask}.
std::pair<Tensor, Tensor> dropout_train(const Tensor& x, double ratio, uint64_t seed) {
  Node n = make_node("Dropout", {"x", "r"}, {"y", "mask"});
  RunOptions opts;
  opts.training = true;
  opts.seed = seed;
  TensorMap out = run_node(n, {{"x", x}}, "reference", {{"r", make(DataType::Float32, {}, {ratio})}}, opts);
  return {out.at("y"), out.at("mask")};
}

}  // namespace

TEST_CASE("Identity copies any numeric tensor") {
  for (DataType t : {DataType::Float32, DataType::Float64, DataType::Int64, DataType::Bool}) {
    Tensor x = random_tensor(t, {2, 3}, 7, 0, 5);
    Tensor y = run_node(make_node("Identity", {"x"}, {"y"}), {{"x", x}}, "reference").at("y");
    CHECK(y.dtype() == t);
    CHECK(max_abs_diff(x, y) == 0);
    CHECK(y.raw() != x.raw());  // a copy, not an alias
  }
}

TEST_CASE("Constant outputs its value tensor; other value_* forms are unsupported") {
  Tensor v = make(DataType::Int64, {3}, {4, -5, 6});
  Node n = make_node("Constant", {}, {"c"}, {{"value", Attribute::of_tensor(v)}});
  Tensor c = run_node(n, {}, "reference").at("c");
  CHECK(c.dtype() == DataType::Int64);
  CHECK(max_abs_diff(c, v) == 0);

  ErrorKind kind{};
  std::string e = error_of(
      [] {
        run_node(make_node("Constant", {}, {"c"}, {{"value_float", Attribute::of_float(1)}}), {}, "reference");
      },
      &kind);
  CHECK(kind == ErrorKind::Unsupported);
  CHECK(e.find("value_float") != std::string::npos);
  e = error_of([] { run_node(make_node("Constant", {}, {"c"}), {}, "reference"); }, &kind);
  CHECK(kind == ErrorKind::BadInput);
  CHECK(e.find("'Constant_test'") != std::string::npos);
}

TEST_CASE("Cast between numeric types") {
  Tensor f = make(DataType::Float32, {6}, {-2.7, -0.5, 0, 0.5, 2.7, 300});
  CHECK(max_abs_diff(cast(f, DataType::Int32), make(DataType::Int32, {6}, {-2, 0, 0, 0, 2, 300})) == 0);
  CHECK(max_abs_diff(cast(f, DataType::Float64), f) == 0);
  CHECK(max_abs_diff(cast(f, DataType::Bool), make(DataType::Bool, {6}, {1, 1, 0, 1, 1, 1})) == 0);
  // fp16/bf16 values that are exactly representable survive a round trip.
  Tensor exact = make(DataType::Float32, {4}, {-2, 0.5, 0.375, 1024});
  CHECK(max_abs_diff(cast(cast(exact, DataType::Float16), DataType::Float32), exact) == 0);
  CHECK(max_abs_diff(cast(cast(exact, DataType::BFloat16), DataType::Float64), exact) == 0);
  CHECK(cast(make(DataType::Float32, {1}, {1.0}), DataType::Float16).data<uint16_t>()[0] == 0x3c00);
  // Integer narrowing wraps modulo 2^bits; widening keeps the value exactly.
  Tensor big = make(DataType::Int64, {3}, {257, -1, 256});
  CHECK(max_abs_diff(cast(big, DataType::UInt8), make(DataType::UInt8, {3}, {1, 255, 0})) == 0);
  Tensor i64(DataType::Int64, {1});
  i64.data<int64_t>()[0] = (int64_t{1} << 62) + 1;  // not representable in double
  CHECK(cast(i64, DataType::UInt64).data<uint64_t>()[0] == (uint64_t{1} << 62) + 1);
  CHECK(max_abs_diff(cast(make(DataType::Bool, {2}, {1, 0}), DataType::Float32),
                     make(DataType::Float32, {2}, {1, 0})) == 0);
  // NaN -> 0 and out-of-range values saturate instead of invoking UB.
  Tensor odd = make(DataType::Float64, {3}, {std::nan(""), 1e30, -1e30});
  Tensor c = cast(odd, DataType::Int16);
  CHECK(c.data<int16_t>()[0] == 0);
  CHECK(c.data<int16_t>()[1] == 32767);
  CHECK(c.data<int16_t>()[2] == -32768);
  CHECK(cast(make(DataType::Float32, {1}, {-3}), DataType::UInt32).data<uint32_t>()[0] == 0);
}

TEST_CASE("Cast rejects strings and unknown types") {
  ErrorKind kind{};
  Tensor x = random_tensor(DataType::Float32, {2}, 1);
  std::string e = error_of([&] { cast(x, DataType::String); }, &kind);
  CHECK(kind == ErrorKind::Unsupported);
  e = error_of([&] { cast(x, static_cast<DataType>(42)); }, &kind);
  CHECK(kind == ErrorKind::BadInput);
  CHECK(e.find("'Cast_test'") != std::string::npos);
  CHECK(e.find("42") != std::string::npos);
  e = error_of([&] { run_node(make_node("Cast", {"x"}, {"y"}), {{"x", x}}, "reference"); }, &kind);
  CHECK(e.find("attribute 'to' is required") != std::string::npos);
}

TEST_CASE("Dropout in inference is the identity with an all-true mask") {
  Tensor x = random_tensor(DataType::Float32, {4, 5}, 3);
  Node n = make_node("Dropout", {"x", "r"}, {"y", "mask"}, {{"seed", Attribute::of_int(5)}});
  TensorMap out = run_node(n, {{"x", x}}, "reference", {{"r", make(DataType::Float32, {}, {0.7})}});
  CHECK(max_abs_diff(out.at("y"), x) == 0);
  CHECK(out.at("mask").dtype() == DataType::Bool);
  for (int64_t i = 0; i < x.numel(); ++i) CHECK(out.at("mask").data<uint8_t>()[i] == 1);
  // training_mode = false given explicitly, and the one-output form.
  out = run_node(make_node("Dropout", {"x", "", "t"}, {"y"}), {{"x", x}, {"t", scalar_bool(false)}}, "reference");
  CHECK(max_abs_diff(out.at("y"), x) == 0);
}

TEST_CASE("Dropout in training: deterministic per seed, mask matches output, ratio holds") {
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    CAPTURE(dtype_name(t));
    Tensor x = random_tensor(t, {200, 500}, 11, 0.5, 1.5);  // no zeros: a dropped element is visible
    const double ratio = 0.3;
    auto [y1, m1] = dropout_train(x, ratio, 42);
    auto [y2, m2] = dropout_train(x, ratio, 42);
    auto [y3, m3] = dropout_train(x, ratio, 43);
    CHECK(max_abs_diff(y1, y2) == 0);
    CHECK(max_abs_diff(m1, m2) == 0);
    CHECK(max_abs_diff(m1, m3) > 0);
    int64_t kept = 0;
    bool consistent = true;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const bool keep = m1.data<uint8_t>()[i] != 0;
      kept += keep;
      const double want = keep ? x.get_as_double(i) * (1.0 / (1.0 - ratio)) : 0.0;
      consistent = consistent && std::fabs(y1.get_as_double(i) - want) <= 1e-6 * std::fabs(want);
    }
    CHECK(consistent);
    // Kept fraction ~ Binomial(n, 0.7): 5 standard deviations is ~0.0072 here.
    const double n = static_cast<double>(x.numel());
    CHECK(std::fabs(static_cast<double>(kept) / n - (1 - ratio)) < 5 * std::sqrt(ratio * (1 - ratio) / n));
    // The mean is preserved in expectation.
    double mx = 0, my = 0;
    for (int64_t i = 0; i < x.numel(); ++i) mx += x.get_as_double(i), my += y1.get_as_double(i);
    CHECK(std::fabs(my / mx - 1) < 0.01);
  }
}

TEST_CASE("Dropout training_mode input, ratio 0 and bad ratios") {
  Tensor x = random_tensor(DataType::Float32, {1000}, 5, 1, 2);
  // training_mode = true without RunOptions::training; default ratio 0.5.
  TensorMap out =
      run_node(make_node("Dropout", {"x", "", "t"}, {"y", "m"}), {{"x", x}, {"t", scalar_bool(true)}}, "reference");
  int64_t kept = 0;
  for (int64_t i = 0; i < x.numel(); ++i) {
    kept += out.at("m").data<uint8_t>()[i];
    if (out.at("m").data<uint8_t>()[i]) CHECK(out.at("y").data<float>()[i] == 2 * x.data<float>()[i]);
  }
  CHECK(kept > 400);
  CHECK(kept < 600);
  // ratio 0 in training keeps everything unscaled.
  auto [y, m] = dropout_train(x, 0.0, 1);
  CHECK(max_abs_diff(y, x) == 0);
  // A constant ratio outside [0, 1) is caught by the shape rule.
  ErrorKind kind{};
  std::string e = error_of([&] { dropout_train(x, 1.0, 1); }, &kind);
  CHECK(kind == ErrorKind::BadInput);
  CHECK(e.find("'Dropout_test'") != std::string::npos);
  CHECK(e.find("[0, 1)") != std::string::npos);
  e = error_of([&] {
    run_node(make_node("Dropout", {"x", "", "t"}, {"y"}), {{"x", x}, {"t", make(DataType::Float32, {}, {1})}},
             "reference");
  });
  CHECK(e.find("training_mode") != std::string::npos);
}
