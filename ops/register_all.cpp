#include "ops/register_all.h"

namespace trainrt {

void register_all(Registry& r) {
  register_elementwise(r);
  register_conv(r);
  register_pool(r);
  register_norm(r);
  register_gemm(r);
  register_shape_ops(r);
  register_softmax_loss(r);
  register_misc(r);
  register_optimizer(r);
  register_preview_training(r);
  register_cpu_kernels(r);
  register_fused(r);  // after Conv and BatchNormalization, whose rules and kernels it reuses
  register_cpu_layouts(r);
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
