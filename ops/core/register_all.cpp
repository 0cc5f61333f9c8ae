#include "ops/core/register_all.h"

#include "ops/group_norm.h"
#include "ops/recurrent.h"

namespace trainrt {

void register_all(Registry& r) {
  // Each family's registration function with the file that holds it: every kernel it
  // adds records that file (`trainrt ops --kernels BACKEND`; tests/cli/ops_cli.sh checks
  // that each file exists).
  auto from = [&r](const char* file, void (*add)(Registry&)) {
    r.kernels.set_source(file);
    add(r);
  };
  from("ops/elementwise.cpp", register_elementwise);
  from("ops/conv.cpp", register_conv);
  from("ops/conv_transpose.cpp", register_conv_transpose);
  from("ops/resize.cpp", register_resize);
  from("ops/pool.cpp", register_pool);
  from("ops/norm.cpp", register_norm);
  from("ops/group_norm.cpp", register_group_norm);
  from("ops/gemm.cpp", register_gemm);
  from("ops/recurrent.cpp", register_recurrent);  // schemas only: import expands them (graph/expand_recurrent.h)
  from("ops/shape_ops.cpp", register_shape_ops);
  from("ops/softmax_loss.cpp", register_softmax_loss);
  from("ops/misc.cpp", register_misc);
  from("ops/optimizer.cpp", register_optimizer);
  from("ops/preview_training.cpp", register_preview_training);
  from("ops/fused.cpp", register_fused);  // after Conv and BatchNormalization, whose rules and kernels it reuses

  from("ops/elementwise_cpu.cpp", register_elementwise_cpu);
  from("ops/conv_cpu.cpp", register_conv_cpu);
  from("ops/conv_transpose_cpu.cpp", register_conv_transpose_cpu);
  from("ops/resize_cpu.cpp", register_resize_cpu);
  from("ops/pool_cpu.cpp", register_pool_cpu);
  from("ops/norm_cpu.cpp", register_norm_cpu);
  from("ops/group_norm_cpu.cpp", register_group_norm_cpu);
  from("ops/gemm_cpu.cpp", register_gemm_cpu);
  from("ops/shape_ops_cpu.cpp", register_shape_ops_cpu);
  from("ops/softmax_loss_cpu.cpp", register_softmax_loss_cpu);
  from("ops/misc_cpu.cpp", register_misc_cpu);
  from("ops/optimizer_cpu.cpp", register_optimizer_cpu);
  from("ops/fused_cpu.cpp", register_fused_cpu);

#ifdef TRAINRT_HAVE_CUDA
  from("ops/elementwise_cuda.cu", cuda::register_elementwise_cuda);
  from("ops/conv_cuda.cu", cuda::register_conv_cuda);
  from("ops/pool_cuda.cu", cuda::register_pool_cuda);
  from("ops/norm_cuda.cu", cuda::register_norm_cuda);
  from("ops/gemm_cuda.cu", cuda::register_gemm_cuda);
  from("ops/shape_ops_cuda.cu", cuda::register_shape_ops_cuda);
  from("ops/softmax_loss_cuda.cu", cuda::register_softmax_loss_cuda);
  from("ops/misc_cuda.cu", cuda::register_misc_cuda);
  from("ops/optimizer_cuda.cu", cuda::register_optimizer_cuda);
  from("ops/fused_cuda.cu", cuda::register_fused_cuda);  // after norm and misc, whose kernels it runs
#endif
  r.kernels.set_source("");
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
