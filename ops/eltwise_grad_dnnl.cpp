// ReluGrad (fp32) on oneDNN's eltwise_backward with eltwise_relu_use_dst_for_bwd.
//
//   ReluGrad(dY, Y) -> dX      dX = Y > 0 ? dY : 0      (Y = Relu's output)
//
// Relu's output is what the training graph keeps, so the backward reads the forward's
// dst, not its src (the use_dst algorithm; alpha 0). Tensors are seen as one flat
// vector (layout does not matter). The forward_training hint has the same descriptor.
#include <oneapi/dnnl/dnnl.hpp>

#include "graph/error.h"
#include "ops/cpu_grad_kernels.h"
#include "ops/core/dnnl_util.h"
#include "ops/core/register_all.h"

namespace trainrt {
namespace {
namespace du = dnnl_util;

struct ReluGradPlan {
  bool use_reference = false;
  dnnl::primitive prim;
  du::Md md;
};

void relu_grad_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  const Tensor& dy = ctx.in(0);
  const Tensor& y = ctx.in(1);
  Tensor& dx = ctx.out(0);
  if (dx.numel() == 0) return;
  auto plan = du::cached<ReluGradPlan>(du::key("ReluGrad", dx.numel()), [&] {
    ReluGradPlan p;
    p.md = du::plain_desc({dx.numel()});
    constexpr auto alg = dnnl::algorithm::eltwise_relu_use_dst_for_bwd;
    try {
      dnnl::eltwise_forward::desc fd(dnnl::prop_kind::forward_training, alg, p.md, 0.f, 0.f);
      dnnl::eltwise_forward::primitive_desc hint(fd, du::attr(), du::engine());
      dnnl::eltwise_backward::desc bd(alg, p.md, p.md, 0.f, 0.f);
      p.prim = dnnl::eltwise_backward(dnnl::eltwise_backward::primitive_desc(bd, du::attr(), du::engine(), hint));
    } catch (const dnnl::error&) {
      return du::reference_plan<ReluGradPlan>();
    }
    return p;
  });
  if (plan->use_reference) return du::run_reference(ctx);
  du::execute(plan->prim, {{DNNL_ARG_DIFF_DST, du::memory_of(dy, plan->md)},
                           {DNNL_ARG_DST, du::memory_of(y, plan->md)},
                           {DNNL_ARG_DIFF_SRC, du::memory_of(dx, plan->md)}});
}

}  // namespace

void register_eltwise_grad_dnnl(Registry& r) {
  if (r.schemas.find(kTrainrtDomain, "ReluGrad")) r.kernels.add("cpu", kTrainrtDomain, "ReluGrad", relu_grad_cpu);
}

}  // namespace trainrt
