// Resize's cpu kernels (Resize, Upsample, ResizeGrad): the reference's loops
// (ops/resize_loops.h) over parallel rows (oneTBB), so they equal the reference bit for
// bit. oneDNN 2.6's resampling primitive has nearest and linear with half-pixel centres
// only (no align_corners, asymmetric or nearest rounding modes), so it would cover a
// part of the modes with other sums; the loops cover them all.
#include "ops/core/register_all.h"
#include "ops/resize_loops.h"

namespace trainrt {

void register_resize_cpu(Registry& r) {
  add_if_schema(r, "cpu", "", "Resize", resize_loops::forward_kernel<true>);
  add_if_schema(r, "cpu", "", "Upsample", resize_loops::forward_kernel<true>);
  add_if_schema(r, "cpu", kTrainrtDomain, "ResizeGrad", resize_loops::backward_kernel<true>);
}

}  // namespace trainrt
