// ConvTranspose's cpu kernels: the reference's loops (ops/conv_transpose_loops.h) over
// parallel rows (oneTBB), so they equal the reference bit for bit. oneDNN 2.6's
// deconvolution primitive would take the 2-D/3-D cases without output_shape cropping, but
// its fp32 sums round differently; the loops are the one implementation of every rank
// and attribute until a benchmark asks for more.
#include "ops/conv_transpose_loops.h"
#include "ops/core/register_all.h"

namespace trainrt {

void register_conv_transpose_cpu(Registry& r) {
  add_if_schema(r, "cpu", "", "ConvTranspose", conv_transpose_loops::forward_kernel<true>);
  add_if_schema(r, "cpu", kTrainrtDomain, "ConvTransposeGrad", conv_transpose_loops::backward_kernel<true>);
}

}  // namespace trainrt
