// Gemm and MatMul (fp32) on oneDNN's matmul.
//
//   Gemm:   Y[M,N] = alpha * A'[M,K] B'[K,N] + beta * C   (A' = A or A^T, B' = B or B^T,
//           C broadcast from [], [N], [1,N], [M,1], [M,N] ...)
//   MatMul: Y[...,M,N] = A[...,M,K] B[...,K,N]  (numpy: 1-D operands promoted,
//           batch dims broadcast)
//
// Transposes are expressed as strides of the plain descriptors, so A and B are
// read in place. For Gemm, Y is first filled with the broadcast C and the matmul
// adds into it through a sum post-op scaled by beta; alpha is the output scale.
// FusedGemm's ReLU is an eltwise post-op after the sum (ops/gemm_cpu.h).
//
// Under --precision bf16/fp16 (KernelContext::math) A and B are read as rounded fp32
// copies (math_input, the reference's rounding): the products of 16-bit values are exact
// in fp32, so this is the 16-bit arithmetic of ops/core/kernel.h at fp32 speed. Native
// bf16 matmuls would be faster on AVX-512 BF16; in the Wide ResNet the one Linear layer's
// three products are far below 1% of a step.
#include "ops/gemm_cpu.h"

#include <algorithm>
#include <oneapi/dnnl/dnnl.hpp>

#include "graph/error.h"
#include "ops/core/common.h"
#include "ops/core/register_all.h"
#include "ops/onednn/dnnl_util.h"

namespace trainrt {
namespace {
namespace du = dnnl_util;

struct MatmulPlan {
  bool use_reference = false;
  dnnl::primitive prim;
  du::Md a, b, y;
};

// Rows x cols row-major matrix, or its transpose stored as cols x rows.
du::Md matrix_desc(int64_t rows, int64_t cols, bool transposed) {
  return du::Md({rows, cols}, dnnl::memory::data_type::f32, transposed ? du::Dims{1, rows} : du::Dims{cols, 1});
}

MatmulPlan make_plan(const du::Md& a, const du::Md& b, const du::Md& y, const dnnl::primitive_attr& attr) {
  try {
    return MatmulPlan{
        false, dnnl::matmul(dnnl::matmul::primitive_desc(dnnl::matmul::desc(a, b, y), attr, du::engine())), a, b, y};
  } catch (const dnnl::error&) {
    return du::reference_plan<MatmulPlan>();
  }
}

void run_plan(const MatmulPlan& p, const Tensor& a, const Tensor& b, Tensor& y) {
  du::execute(p.prim, {{DNNL_ARG_SRC, du::memory_of(a, p.a)},
                       {DNNL_ARG_WEIGHTS, du::memory_of(b, p.b)},
                       {DNNL_ARG_DST, du::memory_of(y, p.y)}});
}

// Y[M,N] = C broadcast (C of rank 0..2, each dim 1 or full).
void fill_broadcast(const Tensor& c, Tensor& y, int64_t m, int64_t n) {
  std::vector<int64_t> cd = c.dims();
  while (cd.size() < 2) cd.insert(cd.begin(), 1);
  const float* cp = c.data<float>();
  float* yp = y.data<float>();
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) yp[i * n + j] = cp[(cd[0] == 1 ? 0 : i) * cd[1] + (cd[1] == 1 ? 0 : j)];
}

}  // namespace

void gemm_forward_dnnl(KernelContext& ctx, bool relu) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  const Node& n = ctx.node;
  const Tensor a = math_input(ctx.in(0), ctx.math, /*parallel=*/true);
  const Tensor b = math_input(ctx.in(1), ctx.math, /*parallel=*/true);
  Tensor& y = ctx.out(0);
  bool ta = n.attr_int("transA", 0) != 0, tb = n.attr_int("transB", 0) != 0;
  float alpha = n.attr_float("alpha", 1.f), beta = n.attr_float("beta", 1.f);
  bool use_c = ctx.has_input(2) && beta != 0.f;
  int64_t m = y.dims()[0], nn = y.dims()[1], k = ta ? a.dims()[0] : a.dims()[1];
  if (y.numel() == 0) return;
  if (k == 0) return du::run_reference(ctx);
  std::string key = du::key("Gemm", m, nn, k, ta, tb, alpha, use_c ? beta : 0.f, relu);
  auto plan = du::cached<MatmulPlan>(key, [&] {
    dnnl::primitive_attr attr = du::attr();
    if (alpha != 1.f) attr.set_output_scales(0, {alpha});
    dnnl::post_ops ops;
    if (use_c) ops.append_sum(beta);
    if (relu) ops.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
    if (use_c || relu) attr.set_post_ops(ops);
    return make_plan(matrix_desc(m, k, ta), matrix_desc(k, nn, tb), du::plain_desc({m, nn}), attr);
  });
  if (plan->use_reference) return du::run_reference(ctx);
  if (use_c) fill_broadcast(ctx.in(2), y, m, nn);
  run_plan(*plan, a, b, y);
}

namespace {

void matmul_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  const Tensor a = math_input(ctx.in(0), ctx.math, /*parallel=*/true);
  const Tensor b = math_input(ctx.in(1), ctx.math, /*parallel=*/true);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  // numpy promotion: [K] x [...,K,N] -> [1,K]; [...,M,K] x [K] -> [K,1].
  std::vector<int64_t> ad = a.dims(), bd = b.dims();
  if (ad.size() == 1) ad.insert(ad.begin(), 1);
  if (bd.size() == 1) bd.push_back(1);
  if (ad.size() < 2 || bd.size() < 2 || ad.back() == 0) return du::run_reference(ctx);
  size_t rank = std::max(ad.size(), bd.size());
  if (rank > DNNL_MAX_NDIMS) return du::run_reference(ctx);
  ad.insert(ad.begin(), rank - ad.size(), 1);
  bd.insert(bd.begin(), rank - bd.size(), 1);
  std::vector<int64_t> yd(rank);
  for (size_t i = 0; i + 2 < rank; ++i) yd[i] = std::max(ad[i], bd[i]);
  yd[rank - 2] = ad[rank - 2];
  yd[rank - 1] = bd[rank - 1];
  TRAINRT_ASSERT(element_count(yd) == y.numel());
  auto plan = du::cached<MatmulPlan>(du::key("MatMul", ad, bd), [&] {
    return make_plan(du::plain_desc(ad), du::plain_desc(bd), du::plain_desc(yd), du::attr());
  });
  if (plan->use_reference) return du::run_reference(ctx);
  run_plan(*plan, a, b, y);
}

}  // namespace

void register_gemm_cpu(Registry& r) {
  add_if_schema(r, "cpu", "", "Gemm", [](KernelContext& ctx) { gemm_forward_dnnl(ctx, /*relu=*/false); });
  add_if_schema(r, "cpu", "", "MatMul", matmul_cpu);
}

}  // namespace trainrt
