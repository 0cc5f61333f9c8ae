// Attribute and input readers of the shape ops (ops/shape_ops.cpp), shared by their
// reference kernels and the cpu ones (ops/shape_ops_cpu.cpp).
//
//   std::vector<int64_t> perm = transpose_perm(node, x.rank());   // y dim k = x dim perm[k]
//   std::vector<int64_t> pads = pad_amounts(ctx);                 // [begin_0.., end_0..]
//   shape_kernels(/*parallel=*/true).gather(ctx);                 // the cpu backend's Gather
#pragma once

#include <cstdint>
#include <vector>

#include "ops/core/kernel.h"

namespace trainrt {

// Transpose's `perm`, or the reversed axes when the attribute is absent.
std::vector<int64_t> transpose_perm(const Node& n, int64_t rank);

// Pad's [begin_0..begin_r-1, end_0..end_r-1] for the call's input 0 rank, from its
// pads input and the optional opset 18 axes input.
std::vector<int64_t> pad_amounts(const KernelContext& ctx);

// Concat's axis in [0, rank).
size_t concat_axis(const Node& n, int64_t rank);

// The indexing kernels, serial for the reference backend and over oneTBB chunks of
// whole rows for the cpu one (ops/core/parallel.h): one loop, the same bits.
struct ShapeKernels {
  Kernel gather, gather_grad, slice, slice_grad, split, expand, range, constant_of_shape, scatter_nd;
};
const ShapeKernels& shape_kernels(bool parallel);
// Shape's kernel: writes the input's dims (a few int64).
void shape_of_kernel(KernelContext& ctx);

}  // namespace trainrt
