// InstanceNormalization, GroupNormalization and GroupNormalizationGrad (ops/group_norm.cpp):
// the reference against a naive per-group computation written here, the shape rules'
// errors, and the cpu kernels (ops/group_norm_cpu.cpp) against the reference. The cpu
// kernels run the reference's loops in parallel over (n, group) units and reduce the
// parameter gradients over n serially, so the tolerance is exact equality (0 ulp).
#include <doctest/doctest.h>

#include <cmath>

#include "graph/error.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

TensorMap run(const Node& n, const TensorMap& feeds, const std::string& backend, int64_t opset) {
  Graph g = single_node_graph(n, feeds, {}, opset);
  return run_graph(g, feeds, *make_backend(backend));
}

// Y of group normalization computed the plain way: x N,C,S; scale/bias C or G values.
Tensor naive_group_norm(const Tensor& x, const Tensor& s, const Tensor& b, int64_t G, double eps) {
  const int64_t N = x.dims()[0], C = x.dims()[1], S = x.numel() / (N * C), cg = C / G;
  Tensor y(x.dtype(), x.dims());
  for (int64_t n = 0; n < N; ++n)
    for (int64_t g = 0; g < G; ++g) {
      double sum = 0, sq = 0;
      const int64_t base = (n * C + g * cg) * S, D = cg * S;
      for (int64_t i = 0; i < D; ++i) sum += x.get_as_double(base + i);
      const double mean = sum / static_cast<double>(D);
      for (int64_t i = 0; i < D; ++i) sq += std::pow(x.get_as_double(base + i) - mean, 2);
      const double r = 1 / std::sqrt(sq / static_cast<double>(D) + eps);
      for (int64_t i = 0; i < D; ++i) {
        const int64_t k = s.numel() == C ? g * cg + i / S : g;
        y.set_from_double(base + i, (x.get_as_double(base + i) - mean) * r * s.get_as_double(k) + b.get_as_double(k));
      }
    }
  return y;
}

}  // namespace

TEST_CASE("InstanceNormalization and GroupNormalization match a naive computation, fp32 and fp64") {
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    CAPTURE(dtype_name(t));
    const double tol = t == DataType::Float64 ? 1e-12 : 1e-5;
    const Tensor x = random_tensor(t, {2, 6, 3, 2}, 1, -2, 3);
    const Tensor sc = random_tensor(t, {6}, 2, 0.5, 1.5), bc = random_tensor(t, {6}, 3);
    const Tensor sg = random_tensor(t, {2}, 4, 0.5, 1.5), bg = random_tensor(t, {2}, 5);
    TensorMap out =
        run(make_node("InstanceNormalization", {"x", "s", "b"}, {"y"}, {{"epsilon", Attribute::of_float(1e-3f)}}),
            {{"x", x}, {"s", sc}, {"b", bc}}, "reference", 13);
    CHECK(max_abs_diff(out.at("y"), naive_group_norm(x, sc, bc, 6, 1e-3f)) < tol);
    const std::map<std::string, Attribute> attrs{{"num_groups", Attribute::of_int(2)},
                                                 {"epsilon", Attribute::of_float(1e-5f)}};
    out = run(make_node("GroupNormalization", {"x", "s", "b"}, {"y"}, attrs), {{"x", x}, {"s", sg}, {"b", bg}},
              "reference", 18);
    CHECK(max_abs_diff(out.at("y"), naive_group_norm(x, sg, bg, 2, 1e-5f)) < tol);
    out = run(make_node("GroupNormalization", {"x", "s", "b"}, {"y"}, attrs), {{"x", x}, {"s", sc}, {"b", bc}},
              "reference", 21);
    CHECK(max_abs_diff(out.at("y"), naive_group_norm(x, sc, bc, 2, 1e-5f)) < tol);
  }
}

TEST_CASE("GroupNormalization and InstanceNormalization: bad attributes and shapes are one-line errors") {
  const Tensor x = random_tensor(DataType::Float32, {2, 6, 4}, 1);
  auto err = [&](const std::string& op, const Tensor& s, std::map<std::string, Attribute> a, int64_t opset) {
    return error_of([&] {
      single_node_graph(make_node(op, {"x", "s", "b"}, {"y"}, std::move(a)), {{"x", x}, {"s", s}, {"b", s}}, {}, opset);
    });
  };
  const Tensor s2 = random_tensor(DataType::Float32, {2}, 2), s6 = random_tensor(DataType::Float32, {6}, 3);
  CHECK(err("GroupNormalization", s2, {{"num_groups", Attribute::of_int(4)}}, 18)
            .find("does not divide the 6 channels") != std::string::npos);
  CHECK(err("GroupNormalization", s2, {}, 18).find("'num_groups' is required") != std::string::npos);
  CHECK(err("GroupNormalization", s6, {{"num_groups", Attribute::of_int(2)}}, 18).find("expected 2 (num_groups") !=
        std::string::npos);
  CHECK(err("GroupNormalization", s2, {{"num_groups", Attribute::of_int(2)}}, 21).find("expected 6 (channels") !=
        std::string::npos);
  CHECK(err("InstanceNormalization", s2, {}, 13).find("expected 6 (channels") != std::string::npos);
  const std::string rank2 = error_of([&] {
    const Tensor x2 = random_tensor(DataType::Float32, {2, 6}, 1);
    single_node_graph(make_node("InstanceNormalization", {"x", "s", "b"}, {"y"}), {{"x", x2}, {"s", s6}, {"b", s6}}, {},
                      13);
  });
  CHECK(rank2.find("must have rank >= 3") != std::string::npos);
}

TEST_CASE("cpu InstanceNormalization, GroupNormalization and GroupNormalizationGrad equal the reference") {
  // 16 x 32 units of 64 values: more than one parallel chunk (ops/core/parallel.h's for_rows).
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    CAPTURE(dtype_name(t));
    const Tensor x = random_tensor(t, {16, 32, 8, 8}, 7, -2, 3), dy = random_tensor(t, {16, 32, 8, 8}, 8);
    struct Case {
      const char* op;
      int64_t groups, affine, opset;
    };
    for (const Case& c : {Case{"InstanceNormalization", 0, 32, 13}, Case{"GroupNormalization", 8, 8, 18},
                          Case{"GroupNormalization", 8, 32, 21}}) {
      CAPTURE(c.op);
      CAPTURE(c.affine);
      const Tensor s = random_tensor(t, {c.affine}, 9, 0.5, 1.5), b = random_tensor(t, {c.affine}, 10);
      std::map<std::string, Attribute> a{{"epsilon", Attribute::of_float(1e-5f)}};
      if (c.groups) a["num_groups"] = Attribute::of_int(c.groups);
      const Node f = make_node(c.op, {"x", "s", "b"}, {"y"}, a);
      const TensorMap feeds{{"x", x}, {"s", s}, {"b", b}}, grad_feeds{{"dy", dy}, {"x", x}, {"s", s}};
      CHECK(max_abs_diff(run(f, feeds, "cpu", c.opset).at("y"), run(f, feeds, "reference", c.opset).at("y")) == 0);
      a["num_groups"] = Attribute::of_int(c.groups);
      const Node g = make_node("GroupNormalizationGrad", {"dy", "x", "s"}, {"dx", "ds", "db"}, a, kTrainrtDomain);
      const TensorMap cpu = run(g, grad_feeds, "cpu", c.opset), ref = run(g, grad_feeds, "reference", c.opset);
      for (const char* o : {"dx", "ds", "db"}) {
        CAPTURE(o);
        CHECK(max_abs_diff(cpu.at(o), ref.at(o)) == 0);
      }
    }
  }
}
