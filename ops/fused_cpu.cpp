// cpu (oneDNN, fp32) kernels of the fused ops (ops/fused.cpp): each is its unfused
// op's oneDNN kernel with post-ops or a flag.
//
//   FusedConv: ops/conv_cpu.cpp's convolution forward with eltwise_relu and sum post-ops.
//   FusedGemm: ops/gemm_cpu.cpp's matmul with an eltwise_relu post-op; its sums
//     (sum_of) by ops/fused.h's loop, the reference's.
//   BatchNormalizationRelu: ops/norm_cpu.cpp's batch-normalization forward with
//     oneDNN's fuse_norm_relu flag.
//   BatchNormalizationReluDropout: that, with the Dropout's mask and scale applied by
//     the fp32 apply loop (row-major or Blocked16c) to each row it has just written
//     (the mask by row-major index, the Dropout's product: the unfused pair's bits).
//     Where that loop does not run (fp64, other layouts) or under bf16/fp16 (Y is
//     rounded before the Dropout reads it): the batch norm writing Z, Z rounded, then
//     the cpu Dropout's loop (ops/misc_loops.h) in place over Z, the unfused pair's
//     kernels (the node's X and Z share a layout, as BatchNormalizationRelu's X and Y,
//     and the Dropout draws by row-major index in any layout).
// fp64 and windows oneDNN rejects run the reference kernel.
#include <optional>

#include "ops/conv_cpu.h"
#include "ops/core/dropout_mask.h"
#include "ops/core/kernel_facts.h"
#include "ops/core/register_all.h"
#include "ops/fused.h"
#include "ops/gemm_cpu.h"
#include "ops/misc_loops.h"
#include "ops/norm_cpu.h"

namespace trainrt {

namespace {

void bn_relu_dropout_cpu(KernelContext& ctx) {
  std::optional<FusedDropout> d;
  if (ctx.math == MathPrecision::fp32 && ctx.out(0).dtype() == DataType::Float32 && dropout_trains(ctx)) {
    const double ratio = dropout_ratio(ctx);
    d = FusedDropout{dropout_key(ctx), dropout_mask::threshold(ratio), static_cast<float>(1.0 / (1.0 - ratio))};
  }
  run_as_bn_relu(ctx, [&](KernelContext& bn) { batchnorm_forward_dnnl(bn, /*fuse_relu=*/true, d ? &*d : nullptr); });
  if (d && d->applied) return;
  round_bn_relu_output(ctx, /*parallel=*/true);
  apply_dropout_in_place(ctx, misc_loops::dropout_kernel<true>);
}

}  // namespace

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
  add_if_schema(r, "cpu", kTrainrtDomain, "BatchNormalizationReluDropout", bn_relu_dropout_cpu,
                facts::fixed({{S}, {S}}));
}

}  // namespace trainrt
