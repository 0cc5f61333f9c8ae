// Small helpers the backward cpu kernels (ops/*_cpu.cpp) share on top of
// ops/onednn/dnnl_util.h.
//
//   dnnl::memory dy = grad_util::to_layout(plan->dy_reorder, du::memory_of(t, plain), plan->dy_md, /*slot=*/0);
//   dnnl::memory dx = grad_util::out_memory(plan->dx_reorder, user_dx, plan->dx_md, /*slot=*/2);
//   ... execute ...;  grad_util::from_layout(plan->dx_reorder, dx, user_dx);
//
// Why: each kernel moves its row-major (N,C,H,W) tensors into the layout its
// primitive chose (blocked, e.g. nChw16c) and its results back; a reorder that is
// empty means the layouts already agree and the user's buffer is used directly.
#pragma once

#include <oneapi/dnnl/dnnl.hpp>

#include "ops/onednn/dnnl_util.h"

namespace trainrt::grad_util {

// `user` in the primitive's layout `want`: a temporary in per-thread `slot` when a
// reorder is planned, else `user` itself.
inline dnnl::memory to_layout(const dnnl::reorder& r, const dnnl::memory& user, const dnnl_util::Md& want, int slot) {
  if (!r) return user;
  dnnl::memory m = dnnl_util::temp_memory(want, slot);
  dnnl_util::reorder(r, user, m);
  return m;
}

// Where a primitive writes a result that ends up in `user`: a temporary of layout
// `md` when a reorder back is planned, else `user` itself.
inline dnnl::memory out_memory(const dnnl::reorder& r, const dnnl::memory& user, const dnnl_util::Md& md, int slot) {
  return r ? dnnl_util::temp_memory(md, slot) : user;
}

// Copies a result from the primitive's layout back to the user's (no-op if none).
inline void from_layout(const dnnl::reorder& r, const dnnl::memory& produced, const dnnl::memory& user) {
  if (r) dnnl_util::reorder(r, produced, user);
}

}  // namespace trainrt::grad_util
