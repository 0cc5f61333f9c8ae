// cpu (oneDNN, fp32) kernels of the fused ops (ops/fused.cpp): each is its unfused
// op's oneDNN kernel with post-ops or a flag.
//
//   FusedConv: ops/conv_dnnl.cpp's convolution forward with eltwise_relu and sum post-ops.
//   BatchNormalizationRelu: ops/norm_dnnl.cpp's batch-normalization forward with
//     oneDNN's fuse_norm_relu flag.
// fp64 and windows oneDNN rejects run the reference kernel.
#include "ops/conv_dnnl.h"
#include "ops/norm_dnnl.h"
#include "ops/core/register_all.h"

namespace trainrt {

void register_fused_dnnl(Registry& r) {
  r.kernels.add("cpu", kTrainrtDomain, "FusedConv", [](KernelContext& ctx) {
    conv_forward_dnnl(ctx, /*relu=*/ctx.node.attr_string("activation", "") == "Relu");
  });
  r.kernels.add("cpu", kTrainrtDomain, "BatchNormalizationRelu",
                [](KernelContext& ctx) { batchnorm_forward_dnnl(ctx, /*fuse_relu=*/true); });
}

}  // namespace trainrt
