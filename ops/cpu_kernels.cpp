// The cpu backend's kernels: oneDNN primitives per op family (ops/*_dnnl.cpp).
// Each family registers a kernel only for ops whose schema is registered, so this
// runs after every register_<family>() (see register_all.cpp). Ops without a cpu
// kernel use the reference one (Backend::fallback_ops, `trainrt inspect`).
// Per-element ops whose cpu kernel is the reference loop split over oneTBB chunks
// (Sum, Dropout, DropoutGrad, SGD, Adam, SoftmaxCrossEntropyLoss and its gradient;
// ops/core/parallel.h) register it in their family file, beside the reference kernel they
// share their code with.
#include "ops/cpu_grad_kernels.h"
#include "ops/core/dnnl_util.h"
#include "ops/core/register_all.h"

namespace trainrt {

void register_cpu_kernels(Registry& r) {
  register_conv_dnnl(r);
  register_pool_dnnl(r);
  register_norm_dnnl(r);
  register_gemm_dnnl(r);
  register_eltwise_dnnl(r);
  register_reduce_dnnl(r);
  register_shape_ops_cpu(r);
  register_misc_cpu(r);
  register_cpu_grad_kernels(r);
  register_sum_to_shape_cpu(r);
}

}  // namespace trainrt
