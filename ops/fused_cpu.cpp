// cpu (oneDNN, fp32) kernels of the fused ops (ops/fused.cpp): each is its unfused
// op's oneDNN kernel with post-ops or a flag.
//
//   FusedConv: ops/conv_cpu.cpp's convolution forward with eltwise_relu and sum post-ops.
//   FusedGemm: ops/gemm_cpu.cpp's matmul with an eltwise_relu post-op; its sums
//     (sum_of) by ops/fused.h's loop, the reference's.
//   BatchNormalizationRelu: ops/norm_cpu.cpp's batch-normalization forward with
//     oneDNN's fuse_norm_relu flag.
//   BatchNormalizationReluDropout: that, writing Z, then the cpu Dropout's loop
//     (ops/misc_loops.h) in place over Z in oneTBB chunks: the unfused pair's kernels,
//     so the same bits (the node's X and Z share a layout, as BatchNormalizationRelu's
//     X and Y, and the Dropout draws by row-major index in any layout).
// fp64 and windows oneDNN rejects run the reference kernel.
#include "ops/conv_cpu.h"
#include "ops/core/kernel_facts.h"
#include "ops/core/register_all.h"
#include "ops/fused.h"
#include "ops/gemm_cpu.h"
#include "ops/misc_loops.h"
#include "ops/norm_cpu.h"

namespace trainrt {

void register_fused_cpu(Registry& r) {
  using facts::A, facts::P, facts::S;
  add_if_schema(
      r, "cpu", kTrainrtDomain, "FusedConv",
      [](KernelContext& ctx) { conv_forward_dnnl(ctx, /*relu=*/ctx.node.attr_string("activation", "") == "Relu"); },
      facts::fixed({{A, P, P, A}, {A}}));
  add_if_schema(r, "cpu", kTrainrtDomain, "FusedGemm", [](KernelContext& ctx) {
    KernelContext g = ctx;
    g.outputs.resize(1);
    gemm_forward_dnnl(g, /*relu=*/ctx.node.attr_string("activation", "") == "Relu");
    if (ctx.has_output(1)) fused_gemm_sums(ctx);
  });
  add_if_schema(
      r, "cpu", kTrainrtDomain, "BatchNormalizationRelu",
      [](KernelContext& ctx) { batchnorm_forward_dnnl(ctx, /*fuse_relu=*/true); }, facts::fixed({{S}, {S}}));
  add_if_schema(
      r, "cpu", kTrainrtDomain, "BatchNormalizationReluDropout",
      [](KernelContext& ctx) {
        run_as_bn_relu(ctx, [](KernelContext& bn) { batchnorm_forward_dnnl(bn, /*fuse_relu=*/true); });
        apply_dropout_in_place(ctx, misc_loops::dropout_kernel<true>);
      },
      facts::fixed({{S}, {S}}));
}

}  // namespace trainrt
