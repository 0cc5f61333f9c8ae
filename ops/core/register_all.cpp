#include "ops/core/register_all.h"

#include "ops/group_norm.h"
#include "ops/recurrent.h"

namespace trainrt {

void register_all(Registry& r) {
  register_elementwise(r);
  register_conv(r);
  register_conv_transpose(r);
  register_resize(r);
  register_pool(r);
  register_norm(r);
  register_group_norm(r);
  register_gemm(r);
  register_recurrent(r);  // schemas only: import expands them (graph/expand_recurrent.h)
  register_shape_ops(r);
  register_softmax_loss(r);
  register_misc(r);
  register_optimizer(r);
  register_preview_training(r);
  register_fused(r);  // after Conv and BatchNormalization, whose rules and kernels it reuses

  register_elementwise_cpu(r);
  register_conv_cpu(r);
  register_conv_transpose_cpu(r);
  register_resize_cpu(r);
  register_pool_cpu(r);
  register_norm_cpu(r);
  register_group_norm_cpu(r);
  register_gemm_cpu(r);
  register_shape_ops_cpu(r);
  register_softmax_loss_cpu(r);
  register_misc_cpu(r);
  register_optimizer_cpu(r);
  register_fused_cpu(r);

#ifdef TRAINRT_HAVE_CUDA
  cuda::register_elementwise_cuda(r);
  cuda::register_conv_cuda(r);
  cuda::register_pool_cuda(r);
  cuda::register_norm_cuda(r);
  cuda::register_gemm_cuda(r);
  cuda::register_shape_ops_cuda(r);
  cuda::register_softmax_loss_cuda(r);
  cuda::register_misc_cuda(r);
  cuda::register_optimizer_cuda(r);
#endif
}

void add_if_schema(Registry& r, const std::string& backend, const std::string& domain, const std::string& op, Kernel k,
                   LayoutRule layouts) {
  if (!r.schemas.find(domain, op)) return;
  r.kernels.add(backend, domain, op, std::move(k));
  if (layouts) r.kernels.set_layouts(backend, domain, op, std::move(layouts));
}

const Registry& registry() {
  static const Registry r = [] {
    Registry built;
    register_all(built);
    return built;
  }();
  return r;
}

}  // namespace trainrt
