#include "ops/core/register_all.h"

namespace trainrt {

#ifdef TRAINRT_HAVE_CUDA
namespace cuda {
void register_cuda_kernels(Registry& r);  // ops/core/cuda_util.h (kept out of this g++-compiled file)
}
#endif

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
#ifdef TRAINRT_HAVE_CUDA
  cuda::register_cuda_kernels(r);  // the cuda kernel set (ops/*_cuda.cu); plain layouts only
#endif
}

void add_if_schema(Registry& r, const std::string& backend, const std::string& domain, const std::string& op,
                   Kernel k) {
  if (r.schemas.find(domain, op)) r.kernels.add(backend, domain, op, std::move(k));
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
