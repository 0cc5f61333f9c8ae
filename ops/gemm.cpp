// Gemm and MatMul: the matrix products.
//
//   Gemm:   Y[M,N] = alpha * op(A) op(B) + beta * C,  op = transpose when transA/transB,
//           C (optional) broadcasts one way to [M,N] (shapes [], [N], [1,N], [M,1], [M,N]...).
//   MatMul: numpy.matmul: a 1-D A is [1,K] (the 1 is dropped from Y), a 1-D B is [K,1]
//           (the 1 is dropped), leading (batch) dims broadcast both ways.
//
// Reference kernels accumulate in double so they stay the oracle for fp32 kernels. Under
// --precision bf16/fp16 (KernelContext::math) both read A and B rounded to 16 bits
// (math_input), never C.
#include <algorithm>

#include "ops/core/common.h"
#include "ops/core/matmul_shape.h"
#include "ops/core/register_all.h"

namespace trainrt {

namespace {

// Two dims that must be equal (e.g. the K of A and of B): fails when both are known
// and differ; returns the more informative of the two.
Dim same_dim(const InferContext& ctx, const Dim& a, const Dim& b, const std::string& what) {
  if (a.known() && b.known() && a.value != b.value)
    ctx.fail(what + " must match, got " + std::to_string(a.value) + " and " + std::to_string(b.value));
  return a.known() ? a : b;
}

// numpy broadcast of two dims.
Dim broadcast_dim(const InferContext& ctx, const Dim& a, const Dim& b, const std::string& what) {
  if (a.known() && a.value == 1) return b;
  if (b.known() && b.value == 1) return a;
  if (a.known() && b.known() && a.value != b.value)
    ctx.fail(what + " cannot broadcast " + std::to_string(a.value) + " with " + std::to_string(b.value));
  if (a.known()) return a;
  if (b.known()) return b;
  return a.symbol == b.symbol ? a : Dim{};  // two different symbols: unknown
}

int64_t dim_or_zero(const Dim& d) { return d.known() ? d.value : 0; }

// ---- Gemm -------------------------------------------------------------------------

void gemm_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  DataType t = require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  for (size_t i : {0, 1})
    if (ctx.input_rank(i) != 2)
      ctx.fail("input " + std::to_string(i) + " '" + n.inputs[i] + "' must be 2-D, got " +
               shape_to_string(*ctx.input(i).shape));
  for (const char* key : {"transA", "transB"}) {
    int64_t v = n.attr_int(key, 0);
    if (v != 0 && v != 1) ctx.fail(std::string("attribute '") + key + "' must be 0 or 1, got " + std::to_string(v));
  }
  const Shape& a = *ctx.input(0).shape;
  const Shape& b = *ctx.input(1).shape;
  bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  Dim m = ta ? a[1] : a[0], ka = ta ? a[0] : a[1];
  Dim kb = tb ? b[1] : b[0], nn = tb ? b[0] : b[1];
  same_dim(ctx, ka, kb, "the inner dimensions K of A " + shape_to_string(a) + " and B " + shape_to_string(b));
  if (ctx.has_input(2)) {
    require_same_dtype(ctx, 0, 2);
    int64_t rc = ctx.input_rank(2);
    const Shape& c = *ctx.input(2).shape;
    if (rc > 2) ctx.fail("input 2 '" + n.inputs[2] + "' (C) must have rank <= 2, got " + shape_to_string(c));
    Shape y{m, nn};
    for (int64_t i = 0; i < rc; ++i) {
      const Dim& cd = c[i];
      const Dim& yd = y[2 - rc + i];
      if (cd.known() && cd.value != 1 && yd.known() && cd.value != yd.value)
        ctx.fail("input 2 '" + n.inputs[2] + "' (C) " + shape_to_string(c) +
                 " does not broadcast to [M,N] = " + shape_to_string(y));
    }
  }
  ctx.set_output(0, t, {m, nn});
}

double gemm_flops(const Graph& g, const Node& n) {
  const Shape& y = *g.info(n.outputs[0]).shape;
  const Shape& a = *g.info(n.inputs[0]).shape;
  int64_t k = dim_or_zero(a[n.attr_int("transA", 0) ? 0 : 1]);
  return 2.0 * static_cast<double>(dim_or_zero(y[0])) * static_cast<double>(dim_or_zero(y[1])) * static_cast<double>(k);
}

// A[M,K] (or [K,M]), B[K,N] (or [N,K]), C broadcast to [M,N] -> Y[M,N]
template <typename T>
void gemm_reference(KernelContext& ctx) {
  const Node& n = ctx.node;
  const Tensor A = math_input(ctx.in(0), ctx.math), B = math_input(ctx.in(1), ctx.math);
  Tensor& Y = ctx.out(0);
  const bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  const double alpha = n.attr_float("alpha", 1.0f), beta = n.attr_float("beta", 1.0f);
  const int64_t M = Y.dims()[0], N = Y.dims()[1], K = ta ? A.dims()[0] : A.dims()[1];
  const T* a = A.data<T>();
  const T* b = B.data<T>();
  const T* c = ctx.has_input(2) ? ctx.in(2).data<T>() : nullptr;
  // C's dims right-aligned to [M,N]; a dim of 1 (or missing) broadcasts.
  int64_t cm = 1, cn = 1;
  if (c) {
    const auto& cd = ctx.in(2).dims();
    if (cd.size() == 2) cm = cd[0], cn = cd[1];
    if (cd.size() == 1) cn = cd[0];
  }
  T* y = Y.data<T>();
  for (int64_t i = 0; i < M; ++i) {
    for (int64_t j = 0; j < N; ++j) {
      double acc = 0;
      for (int64_t k = 0; k < K; ++k) {
        double av = ta ? a[k * M + i] : a[i * K + k];
        double bv = tb ? b[j * K + k] : b[k * N + j];
        acc += av * bv;
      }
      double v = alpha * acc;
      if (c) v += beta * static_cast<double>(c[(cm == 1 ? 0 : i) * cn + (cn == 1 ? 0 : j)]);
      y[i * N + j] = static_cast<T>(v);
    }
  }
}

// ---- MatMul -----------------------------------------------------------------------

void matmul_infer(InferContext& ctx) {
  DataType t = require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  int64_t ra = ctx.input_rank(0), rb = ctx.input_rank(1);
  if (ra < 1 || rb < 1)
    ctx.fail("inputs must have rank >= 1, got " + std::to_string(ra) + " and " + std::to_string(rb));
  Shape a = *ctx.input(0).shape, b = *ctx.input(1).shape;
  const std::string shapes = shape_to_string(a) + " and " + shape_to_string(b);
  if (ra == 1) a.insert(a.begin(), Dim::of(1));
  if (rb == 1) b.push_back(Dim::of(1));
  same_dim(ctx, a.back(), b[b.size() - 2], "the inner dimensions K of " + shapes);
  // Batch dims: right-aligned, missing ones are 1.
  const size_t rank = std::max(a.size(), b.size());
  a.insert(a.begin(), rank - a.size(), Dim::of(1));
  b.insert(b.begin(), rank - b.size(), Dim::of(1));
  Shape y;
  for (size_t i = 0; i + 2 < rank; ++i)
    y.push_back(broadcast_dim(ctx, a[i], b[i], "batch dimension " + std::to_string(i) + " of " + shapes));
  if (ra > 1) y.push_back(a[a.size() - 2]);
  if (rb > 1) y.push_back(b.back());
  ctx.set_output(0, t, y);
}

double matmul_flops(const Graph& g, const Node& n) {
  const Shape& y = *g.info(n.outputs[0]).shape;
  const Shape& a = *g.info(n.inputs[0]).shape;
  double out = 1;
  for (const Dim& d : y) out *= static_cast<double>(dim_or_zero(d));
  return 2.0 * out * static_cast<double>(dim_or_zero(a.back()));
}

// A[...,M,K] @ B[...,K,N] -> Y[...,M,N] with 1-D promotion and batch broadcasting.
template <typename T>
void matmul_reference(KernelContext& ctx) {
  const MatmulShape s = matmul_shape(ctx.in(0).dims(), ctx.in(1).dims());
  const int64_t M = s.m, K = s.k, N = s.n;
  const Tensor A = math_input(ctx.in(0), ctx.math), B = math_input(ctx.in(1), ctx.math);
  const T* a = A.data<T>();
  const T* b = B.data<T>();
  T* y = ctx.out(0).data<T>();
  for (int64_t p = 0; p < s.batches; ++p) {
    const auto [oa, ob] = s.operands_of(p);
    const T* am = a + oa * M * K;
    const T* bm = b + ob * K * N;
    T* ym = y + p * M * N;
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) {
        double acc = 0;
        for (int64_t k = 0; k < K; ++k) acc += static_cast<double>(am[i * K + k]) * bm[k * N + j];
        ym[i * N + j] = static_cast<T>(acc);
      }
  }
}

}  // namespace

void register_gemm(Registry& r) {
  r.schemas.add(OpSchema{"", "Gemm", 2, 3, 1, 1, 11, gemm_infer, gemm_flops, {"alpha", "beta", "transA", "transB"}});
  r.schemas.add(OpSchema{"", "MatMul", 2, 2, 1, 1, 9, matmul_infer, matmul_flops, {}});
  r.kernels.add("reference", "", "Gemm", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { gemm_reference<decltype(tag)>(ctx); });
  });
  r.kernels.add("reference", "", "MatMul", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { matmul_reference<decltype(tag)>(ctx); });
  });
}

}  // namespace trainrt
