// InstanceNormalization, GroupNormalization and GroupNormalizationGrad on the cpu backend:
// the reference loops (ops/group_norm_loops.h) run in parallel over (n, group) units
// (oneDNN 2.6 has no group normalization primitive). Same bits as the reference.
// Row-major (Plain) arguments only: a unit is a contiguous run of C/G*S values.
#include "ops/core/common.h"
#include "ops/core/register_all.h"
#include "ops/group_norm.h"
#include "ops/group_norm_loops.h"

namespace trainrt {

void register_group_norm_cpu(Registry& r) {
  const Kernel forward = [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { group_norm_loops::forward<true, decltype(tag)>(ctx); });
  };
  add_if_schema(r, "cpu", "", "InstanceNormalization", forward);
  add_if_schema(r, "cpu", "", "GroupNormalization", forward);
  add_if_schema(r, "cpu", kTrainrtDomain, "GroupNormalizationGrad", [](KernelContext& ctx) {
    dispatch_float(ctx.in(1).dtype(), [&](auto tag) { group_norm_loops::backward<true, decltype(tag)>(ctx); });
  });
}

}  // namespace trainrt
