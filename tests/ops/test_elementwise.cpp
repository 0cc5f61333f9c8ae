// Elementwise ops (ops/elementwise.cpp) and the broadcasting helpers (ops/core/broadcast.h):
// known values by hand or by an independent formula, fp32 and fp64, shape errors.
#include <doctest/doctest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <string>
#include <vector>

#include "graph/error.h"
#include "ops/core/broadcast.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

Tensor run1(const std::string& op, const TensorMap& feeds, std::map<std::string, Attribute> attrs = {}) {
  std::vector<std::string> ins;
  for (const auto& [name, t] : feeds) ins.push_back(name);
  return run_node(make_node(op, ins, {"y"}, std::move(attrs)), feeds, "reference").at("y");
}

// y[i,j,k] of a [2,3,4] tensor op a [3,1] tensor, by explicit index arithmetic.
Tensor expected_234_31(const Tensor& a, const Tensor& b, const std::function<double(double, double)>& f) {
  Tensor y(a.dtype(), {2, 3, 4});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k)
        y.set_from_double((i * 3 + j) * 4 + k, f(a.get_as_double((i * 3 + j) * 4 + k), b.get_as_double(j)));
  return y;
}

}  // namespace

TEST_CASE("Relu and LeakyRelu on known values, fp32 and fp64") {
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    CAPTURE(dtype_name(t));
    Tensor x = make(t, {2, 3}, {-2, -0.5, 0, 0.5, 2, -1e-3});
    CHECK(max_abs_diff(run1("Relu", {{"x", x}}), make(t, {2, 3}, {0, 0, 0, 0.5, 2, 0})) == 0);
    CHECK(max_abs_diff(run1("LeakyRelu", {{"x", x}}), make(t, {2, 3}, {-0.02, -0.005, 0, 0.5, 2, -1e-5})) < 1e-9);
    Tensor y = run1("LeakyRelu", {{"x", x}}, {{"alpha", Attribute::of_float(0.5f)}});
    CHECK(max_abs_diff(y, make(t, {2, 3}, {-1, -0.25, 0, 0.5, 2, -5e-4})) < 1e-9);
  }
}

TEST_CASE("Sigmoid and Tanh match independent formulas, including large |x|") {
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    CAPTURE(dtype_name(t));
    Tensor x = make(t, {7}, {-800, -20, -1, 0, 0.5, 3, 800});
    Tensor s = run1("Sigmoid", {{"x", x}});
    Tensor th = run1("Tanh", {{"x", x}});
    const double tol = t == DataType::Float32 ? 1e-6 : 1e-14;
    for (int64_t i = 0; i < x.numel(); ++i) {
      const double v = x.get_as_double(i);
      const double sig = v < -700 ? 0.0 : 1.0 / (1.0 + std::exp(-v));
      const double tanh = v > 700 ? 1.0 : v < -700 ? -1.0 : std::expm1(2 * v) / (std::exp(2 * v) + 1);
      CHECK(std::fabs(s.get_as_double(i) - sig) <= tol);
      CHECK(std::fabs(th.get_as_double(i) - tanh) <= tol);
    }
  }
  CHECK(run1("Sigmoid", {{"x", make(DataType::Float32, {1}, {0})}}).data<float>()[0] == 0.5f);
}

TEST_CASE("Add/Sub/Mul/Div broadcast [2,3,4] with [3,1]") {
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    CAPTURE(dtype_name(t));
    Tensor a = random_tensor(t, {2, 3, 4}, 1);
    Tensor b = random_tensor(t, {3, 1}, 2, 0.5, 2.0);
    const std::map<std::string, std::function<double(double, double)>> ops = {
        {"Add", [](double p, double q) { return p + q; }},
        {"Sub", [](double p, double q) { return p - q; }},
        {"Mul", [](double p, double q) { return p * q; }},
        {"Div", [](double p, double q) { return p / q; }}};
    for (const auto& [op, f] : ops) {
      CAPTURE(op);
      Tensor y = run1(op, {{"a", a}, {"b", b}});
      CHECK(y.dtype() == t);
      CHECK(y.dims() == std::vector<int64_t>{2, 3, 4});
      CHECK(all_close(y, expected_234_31(a, b, f), t == DataType::Float32 ? 1e-6 : 1e-15, 0));
    }
  }
}

TEST_CASE("broadcasting in both directions, with scalars and [1]") {
  Tensor col = make(DataType::Float32, {3, 1}, {1, 2, 3});
  Tensor row = make(DataType::Float32, {1, 4}, {10, 20, 30, 40});
  // [3,1] - [1,4] -> [3,4]: y[i,j] = col[i] - row[j]
  Tensor y = run1("Sub", {{"a", col}, {"b", row}});
  CHECK(max_abs_diff(y, make(DataType::Float32, {3, 4}, {-9, -19, -29, -39, -8, -18, -28, -38, -7, -17, -27, -37})) ==
        0);

  Tensor scalar = make(DataType::Float64, {}, {2});
  Tensor one = make(DataType::Float64, {1}, {4});
  Tensor x = make(DataType::Float64, {2, 2}, {1, 2, 3, 4});
  CHECK(max_abs_diff(run1("Mul", {{"a", x}, {"b", scalar}}), make(DataType::Float64, {2, 2}, {2, 4, 6, 8})) == 0);
  // The scalar comes first: b / a, not a / b.
  CHECK(max_abs_diff(run1("Div", {{"a", scalar}, {"b", x}}), make(DataType::Float64, {2, 2}, {2, 1, 2.0 / 3, 0.5})) ==
        0);
  CHECK(max_abs_diff(run1("Add", {{"a", one}, {"b", x}}), make(DataType::Float64, {2, 2}, {5, 6, 7, 8})) == 0);
  Tensor s = run1("Add", {{"a", scalar}, {"b", scalar}});
  CHECK(s.dims().empty());
  CHECK(s.data<double>()[0] == 4);
}

TEST_CASE("integer arithmetic wraps, Div truncates, division by zero is an error") {
  Tensor a = make(DataType::UInt8, {3}, {250, 7, 9});
  Tensor b = make(DataType::UInt8, {3}, {10, 2, 3});
  CHECK(max_abs_diff(run1("Add", {{"a", a}, {"b", b}}), make(DataType::UInt8, {3}, {4, 9, 12})) == 0);
  CHECK(max_abs_diff(run1("Sub", {{"a", b}, {"b", a}}), make(DataType::UInt8, {3}, {16, 251, 250})) == 0);
  CHECK(max_abs_diff(run1("Div", {{"a", a}, {"b", b}}), make(DataType::UInt8, {3}, {25, 3, 3})) == 0);
  Tensor p = make(DataType::Int64, {4}, {-7, 7, 6, -9});
  Tensor q = make(DataType::Int64, {4}, {2, -2, 4, -1});
  CHECK(max_abs_diff(run1("Div", {{"a", p}, {"b", q}}), make(DataType::Int64, {4}, {-3, -3, 1, 9})) == 0);
  CHECK(max_abs_diff(run1("Mul", {{"a", p}, {"b", q}}), make(DataType::Int64, {4}, {-14, -14, 24, 9})) == 0);
  Tensor big = make(DataType::Int32, {1}, {2147483647});
  CHECK(run1("Add", {{"a", big}, {"b", make(DataType::Int32, {1}, {1})}}).data<int32_t>()[0] == -2147483647 - 1);
  const std::string e = error_of([&] { run1("Div", {{"a", p}, {"b", make(DataType::Int64, {1}, {0})}}); });
  CHECK(e.find("division by zero") != std::string::npos);
  CHECK(e.find("Div_test") != std::string::npos);
}

TEST_CASE("Sum is variadic and broadcasts") {
  Tensor a = make(DataType::Float32, {2, 3}, {1, 2, 3, 4, 5, 6});
  Tensor b = make(DataType::Float32, {3}, {10, 20, 30});
  Tensor c = make(DataType::Float32, {2, 1}, {100, 200});
  Tensor y = run1("Sum", {{"a", a}, {"b", b}, {"c", c}});
  CHECK(max_abs_diff(y, make(DataType::Float32, {2, 3}, {111, 122, 133, 214, 225, 236})) == 0);
  CHECK(max_abs_diff(run1("Sum", {{"a", a}}), a) == 0);
  Tensor d = random_tensor(DataType::Float64, {4, 1, 5}, 3);
  Tensor e = random_tensor(DataType::Float64, {3, 1}, 4);
  Tensor s = run1("Sum", {{"d", d}, {"e", e}});
  REQUIRE(s.dims() == std::vector<int64_t>{4, 3, 5});
  for (int64_t i = 0; i < 4; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 5; ++k)
        CHECK(s.data<double>()[(i * 3 + j) * 5 + k] == d.data<double>()[i * 5 + k] + e.data<double>()[j]);
}

TEST_CASE("Sum adds from 0 in input order: one pass over inputs of y's shape, the same bits as broadcasting") {
  // Per column, values whose fp32 sum depends on the order (1e8 + -1e8 + 1 is 1 left to
  // right, 0 as (1e8 + 1) + -1e8) and signed zeros (0 + -0 is +0, so Sum(-0) is +0).
  const std::vector<double> av{1e8, -0.0, -0.0, 0.5, 3, -7}, bv{-1e8, -0.0, 0.0, 1e-9, 1e30, 7},
      cv{1, -0.0, -0.0, -0.5, -1e30, 1e-3};
  auto row2 = [](const std::vector<double>& v) {  // [2,6]: the row twice
    std::vector<double> r = v;
    r.insert(r.end(), v.begin(), v.end());
    return make(DataType::Float32, {2, 6}, r);
  };
  const Tensor a = row2(av), b = row2(bv), c = row2(cv), c_row = make(DataType::Float32, {1, 6}, cv);
  auto bits = [](float v) {
    uint32_t u = 0;
    std::memcpy(&u, &v, sizeof u);
    return u;
  };
  for (const char* backend : {"reference", "cpu"}) {
    CAPTURE(backend);
    auto sum = [&](const TensorMap& feeds) {
      std::vector<std::string> ins;
      for (const auto& [name, t] : feeds) ins.push_back(name);
      return run_node(make_node("Sum", ins, {"y"}), feeds, backend).at("y");
    };
    const Tensor dense = sum({{"a", a}, {"b", b}, {"c", c}});          // the one-pass form
    const Tensor broadcast = sum({{"a", a}, {"b", b}, {"c", c_row}});  // the broadcasting loop
    const Tensor one = sum({{"a", a}});
    for (int64_t i = 0; i < 12; ++i) {
      CAPTURE(i);
      const float x = a.data<float>()[i], y = b.data<float>()[i], z = c.data<float>()[i];
      const float want = ((0.f + x) + y) + z;
      CHECK(bits(dense.data<float>()[i]) == bits(want));
      CHECK(bits(broadcast.data<float>()[i]) == bits(want));
      CHECK(bits(one.data<float>()[i]) == bits(0.f + x));
    }
    CHECK(dense.data<float>()[0] == 1.f);          // not 0: the order is the inputs'
    CHECK(!std::signbit(dense.data<float>()[1]));  // -0 + -0 + -0 from +0
    CHECK(!std::signbit(one.data<float>()[2]));
  }
}

TEST_CASE("shape rules reject bad inputs with the node's name") {
  Tensor x = random_tensor(DataType::Float32, {2, 3}, 1);
  ErrorKind kind{};
  std::string e = error_of([&] { run1("Add", {{"a", x}, {"b", random_tensor(DataType::Float32, {4}, 2)}}); }, &kind);
  CHECK(kind == ErrorKind::BadInput);
  CHECK(e.find("'Add_test' (Add)") != std::string::npos);
  CHECK(e.find("cannot broadcast") != std::string::npos);
  CHECK(e.find("[2,3]") != std::string::npos);

  e = error_of([&] { run1("Mul", {{"a", x}, {"b", random_tensor(DataType::Float64, {2, 3}, 2)}}); });
  CHECK(e.find("must share a dtype") != std::string::npos);
  e = error_of([&] {
    run1("Sum", {{"a", x},
                 {"b", random_tensor(DataType::Float32, {3}, 2)},
                 {"c", random_tensor(DataType::Float32, {2, 2}, 3)}});
  });
  CHECK(e.find("'Sum_test'") != std::string::npos);
  CHECK(e.find("input 2 'c'") != std::string::npos);
  e = error_of([&] { run1("Relu", {{"x", random_tensor(DataType::Int32, {2}, 1)}}); });
  CHECK(e.find("must be float32 or float64") != std::string::npos);
  e = error_of([&] { run1("Sum", {{"x", random_tensor(DataType::Int32, {2}, 1)}}); });
  CHECK(e.find("must be float32 or float64") != std::string::npos);
  e = error_of([&] { run1("Relu", {{"x", x}}, {{"alpha", Attribute::of_float(1)}}); }, &kind);
  CHECK(kind == ErrorKind::Unsupported);
  CHECK(e.find("attribute 'alpha'") != std::string::npos);
  e = error_of([&] { run1("LeakyRelu", {{"x", x}}, {{"beta", Attribute::of_float(1)}}); }, &kind);
  CHECK(kind == ErrorKind::Unsupported);
  e = error_of([&] { run1("LeakyRelu", {{"x", x}}, {{"alpha", Attribute::of_int(1)}}); }, &kind);
  CHECK(kind == ErrorKind::BadInput);
}

TEST_CASE("broadcast_shapes on symbolic dims") {
  const Dim N = Dim::sym("N"), M = Dim::sym("M");
  auto bs = [](Shape a, Shape b) { return broadcast_shapes(a, b); };
  CHECK(*bs({N, Dim::of(3)}, {N, Dim::of(3)}) == Shape{N, Dim::of(3)});
  CHECK(*bs({N, Dim::of(3)}, {Dim::of(3)}) == Shape{N, Dim::of(3)});
  CHECK(*bs({Dim::of(1), Dim::of(3)}, {N, Dim::of(1)}) == Shape{N, Dim::of(3)});
  CHECK(*bs({N}, {Dim::of(5)}) == Shape{Dim::of(5)});  // N must be 1 or 5
  CHECK(*bs({N}, {M}) == Shape{Dim{}});                // unknown
  CHECK(*bs({}, {N, Dim::of(2)}) == Shape{N, Dim::of(2)});
  std::string why;
  CHECK_FALSE(broadcast_shapes({N, Dim::of(3)}, {Dim::of(4)}, &why).has_value());
  CHECK(why == "axis 1 of the broadcast is 3 vs 4");
  CHECK(broadcast_dims({5, 1, 3}, {4, 1}) == std::vector<int64_t>{5, 4, 3});
}

TEST_CASE("BroadcastIndex and broadcast_reduce_axes") {
  // in [3,1] inside out [2,3,4]: offset of (i,j,k) is j.
  BroadcastIndex ix({3, 1}, {2, 3, 4});
  for (int64_t i = 0; i < 2; ++i)
    for (int64_t j = 0; j < 3; ++j)
      for (int64_t k = 0; k < 4; ++k) CHECK(ix((i * 3 + j) * 4 + k) == j);
  BroadcastIndex same({2, 3}, {2, 3}), scalar({}, {2, 3}), row({1, 3}, {2, 3});
  for (int64_t i = 0; i < 6; ++i) {
    CHECK(same(i) == i);
    CHECK(scalar(i) == 0);
    CHECK(row(i) == i % 3);
  }
  const Dim N = Dim::sym("N");
  CHECK(broadcast_reduce_axes(shape_of({3, 1}), shape_of({2, 3, 4})) == std::vector<int64_t>{0, 2});
  CHECK(broadcast_reduce_axes(Shape{Dim::of(1), Dim::of(5)}, Shape{N, Dim::of(5)}) == std::vector<int64_t>{0});
  CHECK(broadcast_reduce_axes(Shape{N, Dim::of(5)}, Shape{N, Dim::of(5)}).empty());
  CHECK(broadcast_reduce_axes(Shape{}, Shape{N}) == std::vector<int64_t>{0});
}

TEST_CASE("FLOP rules count output elements") {
  Node add = make_node("Add", {"a", "b"}, {"y"});
  Graph g =
      single_node_graph(add, {{"a", Tensor(DataType::Float32, {2, 3, 4})}, {"b", Tensor(DataType::Float32, {4})}});
  CHECK(registry().schemas.find("", "Add")->flops(g, g.nodes[0]) == 24);
  Node sum = make_node("Sum", {"a", "b", "c"}, {"y"});
  Tensor t(DataType::Float32, {5});
  Graph gs = single_node_graph(sum, {{"a", t}, {"b", t}, {"c", t}});
  CHECK(registry().schemas.find("", "Sum")->flops(gs, gs.nodes[0]) == 10);
}

// ---- Clip, HardSigmoid, HardSwish, Sqrt, Erf, Gelu, Pow, Where, Equal ---------------

namespace {

// Runs `op` on the named inputs in order ("" for an omitted optional one) at `opset`.
Tensor run_in(const std::string& op, std::vector<std::string> ins, const TensorMap& feeds,
              std::map<std::string, Attribute> attrs = {}, int64_t opset = 17) {
  TensorMap used;  // run_graph rejects feeds the graph does not read
  for (const std::string& in : ins)
    if (!in.empty()) used[in] = feeds.at(in);
  Node n = make_node(op, std::move(ins), {"y"}, std::move(attrs));
  Graph g = single_node_graph(n, used, {}, opset);
  return run_graph(g, used, *make_backend("reference"), {}).at("y");
}

}  // namespace

TEST_CASE("Clip: bounds as inputs (opset 11+) or attributes (opset 6-10), either missing; ints; NaN") {
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    CAPTURE(dtype_name(t));
    const Tensor x = make(t, {2, 3}, {-7, -0.5, 0, 3, 6, 9});
    const TensorMap f{{"x", x}, {"lo", make(t, {}, {0})}, {"hi", make(t, {1}, {6})}};
    CHECK(max_abs_diff(run_in("Clip", {"x", "lo", "hi"}, f), make(t, {2, 3}, {0, 0, 0, 3, 6, 6})) == 0);
    CHECK(max_abs_diff(run_in("Clip", {"x", "", "hi"}, f), make(t, {2, 3}, {-7, -0.5, 0, 3, 6, 6})) == 0);
    CHECK(max_abs_diff(run_in("Clip", {"x", "lo"}, f), make(t, {2, 3}, {0, 0, 0, 3, 6, 9})) == 0);
    CHECK(max_abs_diff(run_in("Clip", {"x"}, f), x) == 0);
    const std::map<std::string, Attribute> relu6{{"min", Attribute::of_float(0)}, {"max", Attribute::of_float(6)}};
    CHECK(max_abs_diff(run_in("Clip", {"x"}, f, relu6, 10), make(t, {2, 3}, {0, 0, 0, 3, 6, 6})) == 0);
    CHECK(max_abs_diff(run_in("Clip", {"x"}, f, {{"max", Attribute::of_float(1)}}, 6),
                       make(t, {2, 3}, {-7, -0.5, 0, 1, 1, 1})) == 0);
    // min > max gives max (numpy.clip's order: max(x, lo) then min(., hi)); NaN stays NaN.
    const TensorMap g{{"x", make(t, {2}, {NAN, 1})}, {"lo", make(t, {}, {2})}, {"hi", make(t, {}, {1})}};
    Tensor y = run_in("Clip", {"x", "lo", "hi"}, g);
    CHECK(std::isnan(y.get_as_double(0)));
    CHECK(y.get_as_double(1) == 1);
  }
  const TensorMap i{{"x", make(DataType::Int8, {4}, {-128, -1, 5, 127})}, {"hi", make(DataType::Int8, {}, {4})}};
  CHECK(max_abs_diff(run_in("Clip", {"x", "", "hi"}, i), make(DataType::Int8, {4}, {-128, -1, 4, 4})) == 0);
}

TEST_CASE("HardSigmoid, HardSwish, Sqrt, Erf, Gelu against independent formulas, fp32 and fp64") {
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    CAPTURE(dtype_name(t));
    const double tol = t == DataType::Float32 ? 1e-6 : 1e-15;
    const Tensor x = make(t, {7}, {-4, -3, -1.25, 0, 0.5, 3, 5});
    auto expect = [&](const std::function<double(double)>& f) {
      Tensor y(t, {7});
      for (int64_t i = 0; i < 7; ++i) y.set_from_double(i, f(x.get_as_double(i)));
      return y;
    };
    auto clamp01 = [](double v) { return std::min(1.0, std::max(0.0, v)); };
    CHECK(max_abs_diff(run_in("HardSigmoid", {"x"}, {{"x", x}}),
                       expect([&](double v) { return clamp01(double(0.2f) * v + 0.5); })) < tol);
    CHECK(max_abs_diff(run_in("HardSigmoid", {"x"}, {{"x", x}},
                              {{"alpha", Attribute::of_float(0.5f)}, {"beta", Attribute::of_float(0.25f)}}),
                       expect([&](double v) { return clamp01(0.5 * v + 0.25); })) < tol);
    CHECK(max_abs_diff(run_in("HardSwish", {"x"}, {{"x", x}}),
                       expect([&](double v) { return v * clamp01(v / 6 + 0.5); })) < tol);
    CHECK(max_abs_diff(run_in("Erf", {"x"}, {{"x", x}}), expect([](double v) { return std::erf(v); })) < tol);
    CHECK(max_abs_diff(run_in("Gelu", {"x"}, {{"x", x}}, {}, 20),
                       expect([](double v) { return v * 0.5 * std::erfc(-v / std::sqrt(2.0)); })) < tol);
    CHECK(max_abs_diff(run_in("Gelu", {"x"}, {{"x", x}}, {{"approximate", Attribute::of_string("tanh")}}, 20),
                       expect([](double v) {
                         return 0.5 * v * (1 + std::tanh(std::sqrt(2 / M_PI) * (v + 0.044715 * v * v * v)));
                       })) < tol);
    const Tensor s = make(t, {4}, {0, 0.25, 2, 1e6});
    CHECK(max_abs_diff(run_in("Sqrt", {"x"}, {{"x", s}}), make(t, {4}, {0, 0.5, std::sqrt(2.0), 1e3})) < tol);
    CHECK(std::isnan(run_in("Sqrt", {"x"}, {{"x", make(t, {1}, {-1})}}).get_as_double(0)));
  }
}

TEST_CASE("Pow: broadcasting, mixed base and exponent types, integer powers") {
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    const TensorMap f{{"a", make(t, {2, 3}, {1, 2, 3, 4, 0.25, -2})}, {"b", make(t, {3}, {2, 0.5, 3})}};
    CHECK(max_abs_diff(run_in("Pow", {"a", "b"}, f), make(t, {2, 3}, {1, std::sqrt(2.0), 27, 16, 0.5, -8})) < 1e-6);
    const TensorMap g{{"a", make(t, {3}, {2, -2, 0.5})}, {"b", make(DataType::Int64, {}, {-2})}};
    CHECK(max_abs_diff(run_in("Pow", {"a", "b"}, g), make(t, {3}, {0.25, 0.25, 4})) == 0);
  }
  const TensorMap i{{"a", make(DataType::Int32, {5}, {2, -3, 7, 1, -1})},
                    {"b", make(DataType::Int64, {5}, {10, 3, 0, -4, -3})}};
  CHECK(max_abs_diff(run_in("Pow", {"a", "b"}, i), make(DataType::Int32, {5}, {1024, -27, 1, 1, -1})) == 0);
  const TensorMap m{{"a", make(DataType::Int64, {2}, {4, 3})}, {"b", make(DataType::Float32, {2}, {0.5, 2})}};
  CHECK(max_abs_diff(run_in("Pow", {"a", "b"}, m), make(DataType::Int64, {2}, {2, 9})) == 0);
  Graph g = single_node_graph(make_node("Pow", {"a", "b"}, {"y"}), m);
  CHECK(g.info("y") == ValueInfo{DataType::Int64, shape_of({2})});
}

TEST_CASE("Where and Equal broadcast; Equal on ints, floats and bools") {
  Tensor c(DataType::Bool, {2, 1});
  c.data<uint8_t>()[0] = 1;
  const TensorMap f{{"c", c}, {"x", make(DataType::Int64, {3}, {1, 2, 3})}, {"z", make(DataType::Int64, {}, {-1})}};
  CHECK(max_abs_diff(run_in("Where", {"c", "x", "z"}, f), make(DataType::Int64, {2, 3}, {1, 2, 3, -1, -1, -1})) == 0);
  for (DataType t : {DataType::Float32, DataType::Float64, DataType::Int32, DataType::Bool}) {
    CAPTURE(dtype_name(t));
    const TensorMap e{{"a", make(t, {2, 2}, {0, 1, 1, 0})}, {"b", make(t, {2}, {0, 0})}};
    Tensor y = run_in("Equal", {"a", "b"}, e);
    CHECK(y.dtype() == DataType::Bool);
    CHECK(max_abs_diff(y, make(DataType::Bool, {2, 2}, {1, 0, 0, 1})) == 0);
  }
  const TensorMap w{{"c", c},
                    {"x", make(DataType::Float64, {3}, {0.5, 1.5, 2.5})},
                    {"z", make(DataType::Float64, {2, 3}, {9, 8, 7, 6, 5, 4})}};
  CHECK(max_abs_diff(run_in("Where", {"c", "x", "z"}, w), make(DataType::Float64, {2, 3}, {0.5, 1.5, 2.5, 6, 5, 4})) ==
        0);
}

TEST_CASE("shape rules of Clip, Pow, Where, Equal, Gelu reject bad inputs") {
  const Tensor x = random_tensor(DataType::Float32, {2, 3}, 1);
  const TensorMap f{{"x", x},
                    {"lo", make(DataType::Float32, {}, {0})},
                    {"v", make(DataType::Float32, {2}, {0, 1})},
                    {"d", make(DataType::Float64, {}, {0})},
                    {"c", Tensor(DataType::Bool, {2, 3})},
                    {"i", Tensor(DataType::Int32, {2, 3})}};
  auto error = [&](const std::string& op, std::vector<std::string> ins, std::map<std::string, Attribute> attrs = {},
                   int64_t opset = 17) {
    ErrorKind kind = ErrorKind::Internal;
    const std::string e = error_of([&] { run_in(op, std::move(ins), f, std::move(attrs), opset); }, &kind);
    CHECK(kind == ErrorKind::BadInput);
    return e;
  };
  CHECK(error("Clip", {"x", "v"}).find("(the min bound) must be a scalar") != std::string::npos);
  CHECK(error("Clip", {"x", "lo", "d"}).find("must share a dtype") != std::string::npos);
  CHECK(error("Clip", {"x"}, {{"min", Attribute::of_float(0)}}).find("at opset 17 the bounds are inputs") !=
        std::string::npos);
  CHECK(error("Clip", {"x", "lo"}, {}, 10).find("takes the bounds as attributes") != std::string::npos);
  CHECK(error("Pow", {"x", "v"}).find("cannot broadcast") != std::string::npos);
  CHECK(error("Where", {"x", "x", "x"}).find("(the condition) must be bool") != std::string::npos);
  CHECK(error("Where", {"c", "x", "i"}).find("must share a dtype") != std::string::npos);
  CHECK(error("Equal", {"x", "i"}).find("must share a dtype") != std::string::npos);
  CHECK(error("Gelu", {"x"}, {{"approximate", Attribute::of_string("fast")}}, 20).find("approximate") !=
        std::string::npos);
  CHECK(error("Sqrt", {"i"}).find("must be float32 or float64") != std::string::npos);
}
