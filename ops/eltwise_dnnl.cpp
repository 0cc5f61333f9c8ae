// Elementwise ops (fp32) on oneDNN: activations via eltwise_forward, Add/Sub/Mul/Div
// via binary, Softmax/LogSoftmax via softmax_forward/logsoftmax_forward.
//
//   Relu y = max(x,0)   LeakyRelu y = x<0 ? alpha*x : x   Sigmoid 1/(1+e^-x)   Tanh
//   Add/Sub/Mul/Div C[*] = A[*] op B[*] with numpy broadcasting
//   Softmax y = exp(x - max) / sum exp(x - max) along `axis` (opset 13: one axis)
//
// Activations see the tensor as one flat vector (layout does not matter). Binary
// ops go to oneDNN when, after left-padding both shapes with 1s to the output
// rank, the first operand has the output's shape and the second has each dim 1
// or full (oneDNN 2.6 broadcasts src1 only); Add and Mul swap operands to get
// there. Other patterns and non-fp32 dtypes (int64 shape arithmetic) use the
// reference kernel.
#include <algorithm>

#include <oneapi/dnnl/dnnl.hpp>

#include "graph/error.h"
#include "ops/core/dnnl_util.h"
#include "ops/core/register_all.h"

namespace trainrt {
namespace {
namespace du = dnnl_util;

struct Plan {
  bool use_reference = false;
  dnnl::primitive prim;
  du::Md src0, src1, dst;
};

// ---- activations ---------------------------------------------------------
template <dnnl::algorithm alg>
void eltwise_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  // LeakyRelu is relu with a negative slope; plain Relu has alpha 0.
  float alpha = ctx.node.op_type == "LeakyRelu" ? ctx.node.attr_float("alpha", 0.01f) : 0.f;
  auto plan = du::cached<Plan>(du::key("Eltwise", static_cast<int>(alg), x.numel(), alpha), [&] {
    du::Md md = du::plain_desc({x.numel()});
    dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, alg, md, alpha, 0.f);
    dnnl::eltwise_forward::primitive_desc pd(d, du::attr(), du::engine());
    return Plan{false, dnnl::eltwise_forward(pd), md, {}, md};
  });
  du::execute(plan->prim, {{DNNL_ARG_SRC, du::memory_of(x, plan->src0)}, {DNNL_ARG_DST, du::memory_of(y, plan->dst)}});
}

// ---- binary --------------------------------------------------------------
std::vector<int64_t> left_pad(std::vector<int64_t> d, size_t rank) {
  d.insert(d.begin(), rank - d.size(), 1);
  return d;
}

bool broadcasts_to(const std::vector<int64_t>& small, const std::vector<int64_t>& full) {
  for (size_t i = 0; i < full.size(); ++i)
    if (small[i] != 1 && small[i] != full[i]) return false;
  return true;
}

template <dnnl::algorithm alg>
void binary_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  Tensor& c = ctx.out(0);
  if (c.numel() == 0) return;
  constexpr bool commutative = alg == dnnl::algorithm::binary_add || alg == dnnl::algorithm::binary_mul;
  const Tensor* a = &ctx.in(0);
  const Tensor* b = &ctx.in(1);
  size_t rank = std::max<size_t>(c.dims().size(), 1);
  if (rank > DNNL_MAX_NDIMS) return du::run_reference(ctx);
  std::vector<int64_t> cd = left_pad(c.dims(), rank), ad = left_pad(a->dims(), rank), bd = left_pad(b->dims(), rank);
  if (ad != cd && commutative) {
    std::swap(a, b);
    std::swap(ad, bd);
  }
  if (ad != cd || !broadcasts_to(bd, cd)) return du::run_reference(ctx);
  auto plan = du::cached<Plan>(du::key("Binary", static_cast<int>(alg), ad, bd), [&] {
    du::Md m0 = du::plain_desc(ad), m1 = du::plain_desc(bd), md = du::plain_desc(cd);
    try {
      dnnl::binary::primitive_desc pd(dnnl::binary::desc(alg, m0, m1, md), du::attr(), du::engine());
      return Plan{false, dnnl::binary(pd), m0, m1, md};
    } catch (const dnnl::error&) {
      return du::reference_plan<Plan>();
    }
  });
  if (plan->use_reference) return du::run_reference(ctx);
  du::execute(plan->prim,
              {{DNNL_ARG_SRC_0, du::memory_of(*a, plan->src0)},
               {DNNL_ARG_SRC_1, du::memory_of(*b, plan->src1)},
               {DNNL_ARG_DST, du::memory_of(c, plan->dst)}});
}

// ---- softmax -------------------------------------------------------------
template <bool log>
void softmax_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  int64_t rank = std::max<int64_t>(x.rank(), 1);
  int64_t axis = ctx.node.attr_int("axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank || rank > DNNL_MAX_NDIMS) return du::run_reference(ctx);
  auto plan = du::cached<Plan>(du::key(log ? "LogSoftmax" : "Softmax", x.dims(), axis), [&] {
    du::Md md = du::plain_desc(x.dims());
    int ax = static_cast<int>(axis);
    if constexpr (log) {
      dnnl::logsoftmax_forward::primitive_desc pd(
          dnnl::logsoftmax_forward::desc(dnnl::prop_kind::forward_inference, md, ax), du::attr(), du::engine());
      return Plan{false, dnnl::logsoftmax_forward(pd), md, {}, md};
    } else {
      dnnl::softmax_forward::primitive_desc pd(
          dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, md, ax), du::attr(), du::engine());
      return Plan{false, dnnl::softmax_forward(pd), md, {}, md};
    }
  });
  du::execute(plan->prim, {{DNNL_ARG_SRC, du::memory_of(x, plan->src0)}, {DNNL_ARG_DST, du::memory_of(y, plan->dst)}});
}

}  // namespace

void register_eltwise_dnnl(Registry& r) {
  add_if_schema(r, "cpu", "", "Relu", eltwise_cpu<dnnl::algorithm::eltwise_relu>);
  add_if_schema(r, "cpu", "", "LeakyRelu", eltwise_cpu<dnnl::algorithm::eltwise_relu>);
  add_if_schema(r, "cpu", "", "Sigmoid", eltwise_cpu<dnnl::algorithm::eltwise_logistic>);
  add_if_schema(r, "cpu", "", "Tanh", eltwise_cpu<dnnl::algorithm::eltwise_tanh>);
  add_if_schema(r, "cpu", "", "Add", binary_cpu<dnnl::algorithm::binary_add>);
  add_if_schema(r, "cpu", "", "Sub", binary_cpu<dnnl::algorithm::binary_sub>);
  add_if_schema(r, "cpu", "", "Mul", binary_cpu<dnnl::algorithm::binary_mul>);
  add_if_schema(r, "cpu", "", "Div", binary_cpu<dnnl::algorithm::binary_div>);
  add_if_schema(r, "cpu", "", "Softmax", softmax_cpu<false>);
  add_if_schema(r, "cpu", "", "LogSoftmax", softmax_cpu<true>);
}

}  // namespace trainrt
