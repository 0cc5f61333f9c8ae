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

// One part of Split along an axis as a copy of rows (the cuda backend's Split, one
// cudaMemcpy2DAsync per part, as its Concat copies each input's rows): `outer` rows (the
// product of the dims before the axis) of `width` bytes (the part's rows: its size along
// the axis times the dims after it), read at `src_offset` bytes into x with rows
// `src_pitch` bytes apart (x's whole rows) and written densely.
struct RowCopy {
  size_t src_offset = 0, src_pitch = 0, width = 0;
  int64_t outer = 0;
};
// x's dims xd cut along `axis` into parts of sizes `parts` (their sum is xd[axis]), for
// elements of `element` bytes. tests/ops/test_split_rows.cpp replays them on the host.
inline std::vector<RowCopy> split_rows(const std::vector<int64_t>& xd, size_t axis, const std::vector<int64_t>& parts,
                                       size_t element) {
  int64_t outer = 1, inner = 1;
  for (size_t d = 0; d < axis; ++d) outer *= xd[d];
  for (size_t d = axis + 1; d < xd.size(); ++d) inner *= xd[d];
  const size_t row = static_cast<size_t>(inner) * element;  // bytes of one step along the axis
  std::vector<RowCopy> r;
  size_t at = 0;
  for (int64_t size : parts) {
    const size_t width = static_cast<size_t>(size) * row;
    r.push_back(RowCopy{at, static_cast<size_t>(xd[axis]) * row, width, outer});
    at += width;
  }
  return r;
}

// The indexing kernels, serial for the reference backend and over oneTBB chunks of
// whole rows for the cpu one (ops/core/parallel.h): one loop, the same bits.
struct ShapeKernels {
  Kernel gather, gather_grad, slice, slice_grad, split, expand, range, constant_of_shape, scatter_nd;
};
const ShapeKernels& shape_kernels(bool parallel);
// Shape's kernel: writes the input's dims (a few int64).
void shape_of_kernel(KernelContext& ctx);

}  // namespace trainrt
