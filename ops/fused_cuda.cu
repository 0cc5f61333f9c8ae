// The cuda backend's BatchNormalizationReluDropout (ops/fused.cpp): the cuda
// BatchNormalizationRelu kernel (ops/norm_cuda.cu: its cuDNN graph where in scope, else the
// own batch-norm kernels) writing Z, then the cuda Dropout kernel (ops/misc_cuda.cu) in
// place over Z with the replaced Dropout's index (attribute dropout_node) as its node
// index, so it draws node_seed(*run_seed, dropout_node)'s mask, as the Dropout did. Two
// launches over Z, each the unfused op's kernel: the same values as the unfused pair.
// Layouts: BatchNormalizationRelu's (X and Z shared, Plain or ChannelsLast).
#include <algorithm>
#include <string>

#include "ops/core/kernel_facts.h"
#include "ops/core/register_all.h"
#include "ops/fused.h"

namespace trainrt::cuda {

void register_fused_cuda(Registry& r) {
  const Kernel* bn_relu = r.kernels.find("cuda", kTrainrtDomain, "BatchNormalizationRelu");
  const Kernel* dropout = r.kernels.find("cuda", "", "Dropout");
  if (!bn_relu || !dropout || !r.schemas.find(kTrainrtDomain, "BatchNormalizationReluDropout")) return;
  add_if_schema(
      r, "cuda", kTrainrtDomain, "BatchNormalizationReluDropout",
      [bn = *bn_relu, drop = *dropout](KernelContext& ctx) {
        run_as_bn_relu(ctx, bn);
        apply_dropout_in_place(ctx, drop);
      },
      facts::fixed({{facts::S}, {facts::S}}));
  // BatchNormalizationRelu's workspace (the Dropout kernel needs none).
  r.kernels.set_workspace("cuda", kTrainrtDomain, "BatchNormalizationReluDropout", [](const KernelContext& ctx) {
    size_t bytes = 0;
    run_as_bn_relu(ctx, [&](KernelContext& c) { bytes = registry().kernels.workspace("cuda", c); });
    return bytes;
  });
}

}  // namespace trainrt::cuda
