// Gemm and MatMul: values against naive products written here, fp64, broadcasting,
// 1-D promotion, and every shape error (the message names the node).
#include <doctest/doctest.h>

#include "graph/error.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;

namespace {

// y[i,j] = sum_k a(i,k) b(k,j), with a(i,k) = A[i,k] (or A[k,i] when ta).
Tensor naive_gemm(const Tensor& A, const Tensor& B, bool ta, bool tb, double alpha, double beta, const Tensor* C) {
  int64_t M = ta ? A.dims()[1] : A.dims()[0], K = ta ? A.dims()[0] : A.dims()[1];
  int64_t N = tb ? B.dims()[0] : B.dims()[1];
  Tensor Y(A.dtype(), {M, N});
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = 0;
      for (int64_t k = 0; k < K; ++k)
        s += A.get_as_double(ta ? k * M + i : i * K + k) * B.get_as_double(tb ? j * K + k : k * N + j);
      double c = 0;
      if (C) {
        const auto& d = C->dims();
        int64_t ci = d.size() == 2   ? (d[0] == 1 ? 0 : i) * d[1] + (d[1] == 1 ? 0 : j)
                     : d.size() == 1 ? (d[0] == 1 ? 0 : j)
                                     : 0;
        c = C->get_as_double(ci);
      }
      Y.set_from_double(i * N + j, alpha * s + beta * c);
    }
  return Y;
}

std::string error_of(const Node& n, const TensorMap& feeds, const TensorMap& inits = {}) {
  try {
    run_node(n, feeds, "reference", inits);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

}  // namespace

TEST_CASE("Gemm: small example computed by hand") {
  // [1 2; 3 4] @ [5 6; 7 8] = [19 22; 43 50]; *2 + 0.5*[1 1]
  Tensor a = make(DataType::Float32, {2, 2}, {1, 2, 3, 4});
  Tensor b = make(DataType::Float32, {2, 2}, {5, 6, 7, 8});
  Tensor c = make(DataType::Float32, {2}, {1, 1});
  Node n = make_node("Gemm", {"a", "b", "c"}, {"y"},
                     {{"alpha", Attribute::of_float(2)}, {"beta", Attribute::of_float(0.5f)}});
  TensorMap out = run_node(n, {{"a", a}, {"b", b}, {"c", c}}, "reference");
  CHECK(max_abs_diff(out["y"], make(DataType::Float32, {2, 2}, {38.5, 44.5, 86.5, 100.5})) == 0);
}

TEST_CASE("Gemm: transposes, alpha/beta, every C broadcast, fp32 and fp64") {
  for (DataType t : {DataType::Float32, DataType::Float64}) {
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb)
        for (std::vector<int64_t> cd :
             std::vector<std::vector<int64_t>>{{}, {1}, {5}, {1, 5}, {4, 1}, {4, 5}, {1, 1}}) {
          Tensor a = random_tensor(t, ta ? std::vector<int64_t>{3, 4} : std::vector<int64_t>{4, 3}, 1);
          Tensor b = random_tensor(t, tb ? std::vector<int64_t>{5, 3} : std::vector<int64_t>{3, 5}, 2);
          Tensor c = random_tensor(t, cd, 3);
          Node n = make_node("Gemm", {"a", "b", "c"}, {"y"},
                             {{"transA", Attribute::of_int(ta)},
                              {"transB", Attribute::of_int(tb)},
                              {"alpha", Attribute::of_float(0.75f)},
                              {"beta", Attribute::of_float(-1.5f)}});
          TensorMap out = run_node(n, {{"a", a}, {"b", b}, {"c", c}}, "reference");
          Tensor want = naive_gemm(a, b, ta, tb, 0.75, -1.5, &c);
          CHECK(out["y"].dtype() == t);
          CHECK(max_abs_diff(out["y"], want) < (t == DataType::Float64 ? 1e-12 : 1e-5));
        }
  }
}

TEST_CASE("Gemm: no C, C as initializer") {
  Tensor a = random_tensor(DataType::Float64, {2, 3}, 4), b = random_tensor(DataType::Float64, {3, 4}, 5);
  TensorMap out = run_node(make_node("Gemm", {"a", "b"}, {"y"}), {{"a", a}, {"b", b}}, "reference");
  CHECK(max_abs_diff(out["y"], naive_gemm(a, b, false, false, 1, 1, nullptr)) < 1e-12);
  Tensor c = random_tensor(DataType::Float64, {4}, 6);
  out = run_node(make_node("Gemm", {"a", "b", "c"}, {"y"}), {{"a", a}, {"b", b}}, "reference", {{"c", c}});
  CHECK(max_abs_diff(out["y"], naive_gemm(a, b, false, false, 1, 1, &c)) < 1e-12);
}

TEST_CASE("Gemm: symbolic batch and FLOPs") {
  Node n = make_node("Gemm", {"x", "w", "b"}, {"y"}, {{"transB", Attribute::of_int(1)}});
  Graph g;
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DataType::Float32, Shape{Dim::sym("N"), Dim::of(8)}};
  g.initializers["w"] = random_tensor(DataType::Float32, {10, 8}, 1);
  g.values["w"] = ValueInfo{DataType::Float32, shape_of({10, 8})};
  g.initializers["b"] = random_tensor(DataType::Float32, {10}, 2);
  g.values["b"] = ValueInfo{DataType::Float32, shape_of({10})};
  g.nodes.push_back(n);
  g.outputs = {"y"};
  validate_graph(g, registry().schemas, "test");
  infer_shapes(g, registry().schemas, "test");
  CHECK(shape_to_string(*g.info("y").shape) == "[N,10]");
  Graph one = specialize(g, {{"x", Tensor(DataType::Float32, {1, 8})}});
  CHECK(registry().schemas.find("", "Gemm")->flops(one, one.nodes[0]) == 2.0 * 8 * 10);
}

TEST_CASE("Gemm: errors name the node and the field") {
  Tensor a = random_tensor(DataType::Float32, {2, 3}, 1);
  Tensor b = random_tensor(DataType::Float32, {3, 4}, 2);
  CHECK(error_of(make_node("Gemm", {"a", "b"}, {"y"}), {{"a", a}, {"b", random_tensor(DataType::Float32, {2, 4}, 1)}})
            .find("'Gemm_test' (Gemm): the inner dimensions K") != std::string::npos);
  CHECK(
      error_of(make_node("Gemm", {"a", "b"}, {"y"}), {{"a", random_tensor(DataType::Float32, {2, 3, 1}, 1)}, {"b", b}})
          .find("Gemm_test' (Gemm): input 0 'a' must be 2-D") != std::string::npos);
  CHECK(error_of(make_node("Gemm", {"a", "b"}, {"y"}), {{"a", a}, {"b", b.cast(DataType::Float64)}})
            .find("Gemm_test' (Gemm): inputs 0 and 1 must share a dtype") != std::string::npos);
  CHECK(error_of(make_node("Gemm", {"a", "b"}, {"y"}), {{"a", a.cast(DataType::Int64)}, {"b", b}})
            .find("Gemm_test' (Gemm): input 0 'a' must be float32 or float64") != std::string::npos);
  CHECK(error_of(make_node("Gemm", {"a", "b", "c"}, {"y"}),
                 {{"a", a}, {"b", b}, {"c", random_tensor(DataType::Float32, {3}, 1)}})
            .find("Gemm_test' (Gemm): input 2 'c' (C) [3] does not broadcast to [M,N] = [2,4]") != std::string::npos);
  CHECK(error_of(make_node("Gemm", {"a", "b", "c"}, {"y"}),
                 {{"a", a}, {"b", b}, {"c", random_tensor(DataType::Float32, {1, 2, 4}, 1)}})
            .find("Gemm_test' (Gemm): input 2 'c' (C) must have rank <= 2") != std::string::npos);
  CHECK(error_of(make_node("Gemm", {"a", "b"}, {"y"}, {{"transA", Attribute::of_int(2)}}), {{"a", a}, {"b", b}})
            .find("Gemm_test' (Gemm): attribute 'transA' must be 0 or 1") != std::string::npos);
  CHECK(error_of(make_node("Gemm", {"a", "b"}, {"y"}, {{"broadcast", Attribute::of_int(1)}}), {{"a", a}, {"b", b}})
            .find("attribute 'broadcast' is not supported") != std::string::npos);
}

// numpy.matmul written out: a (...,M,K) @ b (...,K,N), batch broadcast, 1-D promotion.
static Tensor naive_matmul(const Tensor& a, const Tensor& b, std::vector<int64_t> ydims) {
  std::vector<int64_t> ad = a.dims(), bd = b.dims();
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  size_t r = std::max(ad.size(), bd.size());
  ad.insert(ad.begin(), r - ad.size(), 1);
  bd.insert(bd.begin(), r - bd.size(), 1);
  int64_t M = ad[r - 2], K = ad[r - 1], N = bd[r - 1];
  Tensor y(a.dtype(), ydims);
  int64_t batches = y.numel() / (M * N);
  for (int64_t p = 0; p < batches; ++p) {
    // batch multi-index of y, then of a and b (size-1 dims read index 0)
    int64_t rest = p, oa = 0, ob = 0, ma = 1, mb = 1;
    for (size_t i = r - 2; i-- > 0;) {
      int64_t yb = std::max(ad[i], bd[i]);
      int64_t idx = rest % yb;
      rest /= yb;
      oa += (ad[i] == 1 ? 0 : idx) * ma;
      ob += (bd[i] == 1 ? 0 : idx) * mb;
      ma *= ad[i];
      mb *= bd[i];
    }
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k)
          s += a.get_as_double(oa * M * K + i * K + k) * b.get_as_double(ob * K * N + k * N + j);
        y.set_from_double(p * M * N + i * N + j, s);
      }
  }
  return y;
}

TEST_CASE("MatMul: 1-D promotion and batch broadcasting, fp32 and fp64") {
  struct Case {
    std::vector<int64_t> a, b, y;
  };
  std::vector<Case> cases = {
      {{3, 4}, {4, 5}, {3, 5}},
      {{4}, {4, 5}, {5}},
      {{3, 4}, {4}, {3}},
      {{4}, {4}, {}},
      {{2, 3, 4}, {4, 5}, {2, 3, 5}},
      {{4}, {2, 4, 5}, {2, 5}},
      {{2, 1, 3, 4}, {5, 4, 2}, {2, 5, 3, 2}},
      {{1, 3, 4}, {2, 4, 1}, {2, 3, 1}},
      {{2, 3, 4}, {4}, {2, 3}},
      {{0, 3, 4}, {4, 2}, {0, 3, 2}},
      // a zero batch on either side: nothing is read (the reference once took max(0, 1) = 1
      // batch and read 8x8 past a 64-byte buffer; ASan reports it for fp32 too)
      {{0, 8, 8}, {8, 8}, {0, 8, 8}},
      {{8, 8}, {0, 8, 8}, {0, 8, 8}},
  };
  for (DataType t : {DataType::Float32, DataType::Float64})
    for (const Case& c : cases) {
      Tensor a = random_tensor(t, c.a, 7), b = random_tensor(t, c.b, 8);
      TensorMap out = run_node(make_node("MatMul", {"a", "b"}, {"y"}), {{"a", a}, {"b", b}}, "reference");
      CAPTURE(dims_to_string(c.a));
      CAPTURE(dims_to_string(c.b));
      CHECK(out["y"].dims() == c.y);
      CHECK(max_abs_diff(out["y"], naive_matmul(a, b, c.y)) < (t == DataType::Float64 ? 1e-12 : 1e-5));
    }
}

TEST_CASE("MatMul: symbolic batch, FLOPs and errors") {
  Graph g;
  g.opsets[""] = 17;
  g.inputs = {"x"};
  g.values["x"] = ValueInfo{DataType::Float32, Shape{Dim::sym("N"), Dim::of(3), Dim::of(4)}};
  g.initializers["w"] = random_tensor(DataType::Float32, {4, 6}, 1);
  g.values["w"] = ValueInfo{DataType::Float32, shape_of({4, 6})};
  g.nodes.push_back(make_node("MatMul", {"x", "w"}, {"y"}));
  g.outputs = {"y"};
  infer_shapes(g, registry().schemas, "test");
  CHECK(shape_to_string(*g.info("y").shape) == "[N,3,6]");
  Graph one = specialize(g, {{"x", Tensor(DataType::Float32, {2, 3, 4})}});
  CHECK(registry().schemas.find("", "MatMul")->flops(one, one.nodes[0]) == 2.0 * 2 * 3 * 6 * 4);

  Tensor a = random_tensor(DataType::Float32, {2, 3, 4}, 1);
  CHECK(error_of(make_node("MatMul", {"a", "b"}, {"y"}), {{"a", a}, {"b", random_tensor(DataType::Float32, {3, 5}, 1)}})
            .find("'MatMul_test' (MatMul): the inner dimensions K of [2,3,4] and [3,5] must match") !=
        std::string::npos);
  CHECK(error_of(make_node("MatMul", {"a", "b"}, {"y"}),
                 {{"a", a}, {"b", random_tensor(DataType::Float32, {3, 4, 5}, 1)}})
            .find("'MatMul_test' (MatMul): batch dimension 0 of [2,3,4] and [3,4,5] cannot broadcast 2 with 3") !=
        std::string::npos);
  CHECK(error_of(make_node("MatMul", {"a", "b"}, {"y"}), {{"a", a}, {"b", Tensor(DataType::Float32, {})}})
            .find("'MatMul_test' (MatMul): inputs must have rank >= 1") != std::string::npos);
  CHECK(error_of(make_node("MatMul", {"a", "b"}, {"y"}), {{"a", a}, {"b", Tensor(DataType::Float64, {4, 2})}})
            .find("'MatMul_test' (MatMul): inputs 0 and 1 must share a dtype") != std::string::npos);
}
