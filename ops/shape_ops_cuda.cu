// The cuda backend's shape ops: Flatten, Reshape, Squeeze, Unsqueeze, ReshapeLike,
// Concat, ConcatGrad, Split, Pad, Transpose, Slice and SliceGrad, every dtype (they move bytes,
// as the reference kernels of ops/shape_ops.cpp).
//
//   Flatten, Reshape, Squeeze, Unsqueeze, ReshapeLike   y = x's bytes: one cudaMemcpyAsync
//   Concat       each input's rows (the dims from axis on) into y: one cudaMemcpy2DAsync per input
//   ConcatGrad   the inverse: each requested dX_i's rows out of dY
//   Split        each output's rows out of x: one cudaMemcpy2DAsync per output (the row
//                math is split_rows, ops/shape_ops.h, which a host test replays)
//   Pad          one thread per output element: its source element (constant, edge,
//                reflect, wrap as the reference) or the constant value
//   Transpose    one thread per output element, reading x at its permuted offset
//   Slice        one thread per output element, reading x at start + index * step per axis
//   SliceGrad    dX zeroed, then one thread per dY element writing where Slice read
//                (a slice reads each element at most once)
//
// Why copies: the planner gives these ops no in-place pair (ops/shape_ops.cpp declares
// none, runtime/plan.cpp aliases only declared pairs), so output and input are separate
// buffers; a copy on the stream keeps the step free of synchronisation. A copy onto
// itself is skipped. Shape-carrying inputs (Reshape's shape, Unsqueeze's axes) are not
// read: the output's dims are the specialised graph's.
//
// Pad reads its pads, axes and constant value on the device (each block's thread 0 builds
// the full begin pads in shared memory), since they are tensors a kernel may have
// written; the output's dims are the host's. Slice and SliceGrad read their starts,
// axes and steps so too (ONNX's clamping of ops/shape_ops.cpp's slice_axis; the ends
// only fix the output's dims, which the host knows). Pad splits each output index over
// the dims (one division per dim: the general-rank index).
//
// Host fallbacks (reference kernel after a stream synchronisation): Concat/ConcatGrad/Split
// rows wider than cudaMemcpy2DAsync's pitch limit (2^31 bytes); Pad above
// rank 8 or of elements not 4 or 8 bytes wide; Transpose, Slice and SliceGrad above rank
// 8, of elements wider than 8 bytes, or with int32 bounds.
//
// Compiled in CI, run only where a GPU exists (trainrt selftest --device cuda).
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <limits>
#include <string>
#include <vector>

#include "graph/error.h"
#include "ops/cuda/cuda_util.h"
#include "ops/shape_ops.h"

namespace trainrt::cuda {

namespace {

constexpr size_t kMaxPitch = static_cast<size_t>(std::numeric_limits<int32_t>::max());

// y = x's bytes on the stream (device to device).
void copy_bytes(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  TRAINRT_ASSERT(x.nbytes() == y.nbytes());
  if (x.nbytes() == 0 || y.raw() == x.raw()) return;
  check(cudaMemcpyAsync(y.raw(), x.raw(), x.nbytes(), cudaMemcpyDefault, context().stream),
        what(ctx.node, "cudaMemcpyAsync"));
}

// Bytes of one row of `t` from `axis` on (the block Concat moves per outer index).
size_t row_bytes(const Tensor& t, size_t axis) {
  int64_t block = 1;
  for (size_t d = axis; d < t.dims().size(); ++d) block *= t.dims()[d];
  return static_cast<size_t>(block) * dtype_size(t.dtype());
}

// `outer` rows of `width` bytes from src (rows `spitch` apart) to dst (rows `dpitch` apart).
void copy_rows(const KernelContext& ctx, void* dst, size_t dpitch, const void* src, size_t spitch, size_t width,
               int64_t outer) {
  if (width == 0 || outer == 0) return;
  check(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, static_cast<size_t>(outer), cudaMemcpyDefault,
                          context().stream),
        what(ctx.node, "cudaMemcpy2DAsync"));
}

void concat(KernelContext& ctx) {
  Tensor& y = ctx.out(0);
  const size_t axis = concat_axis(ctx.node, y.rank());
  int64_t outer = 1;
  for (size_t d = 0; d < axis; ++d) outer *= y.dims()[d];
  const size_t out_row = row_bytes(y, axis);
  if (out_row > kMaxPitch) return run_reference(ctx);
  size_t offset = 0;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) {
    const Tensor& x = ctx.in(i);
    const size_t bytes = row_bytes(x, axis);
    copy_rows(ctx, y.raw() + offset, out_row, x.raw(), bytes, bytes, outer);
    offset += bytes;
  }
}

void concat_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  int64_t axis = ctx.node.attr_int("axis", 0);
  if (axis < 0) axis += dy.rank();
  int64_t outer = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= dy.dims()[static_cast<size_t>(d)];
  const size_t in_row = row_bytes(dy, static_cast<size_t>(axis));
  if (in_row > kMaxPitch) return run_reference(ctx);
  size_t offset = 0;
  for (size_t i = 1; i < ctx.inputs.size(); ++i) {
    const size_t bytes = row_bytes(ctx.in(i), static_cast<size_t>(axis));
    if (ctx.has_output(i - 1)) copy_rows(ctx, ctx.out(i - 1).raw(), bytes, dy.raw() + offset, in_row, bytes, outer);
    offset += bytes;
  }
}

// Split: each output's rows out of x (split_rows, ops/shape_ops.h), the part sizes read
// off the outputs' dims (the split input or attribute, or num_outputs, fixed them at
// shape inference; the split input is not read).
void split(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  int64_t axis = ctx.node.attr_int("axis", 0);
  if (axis < 0) axis += x.rank();
  std::vector<int64_t> parts;
  for (size_t i = 0; i < ctx.outputs.size(); ++i) {
    if (!ctx.has_output(i)) return run_reference(ctx, "an omitted output leaves its part's size unknown");
    parts.push_back(ctx.out(i).dims()[static_cast<size_t>(axis)]);
  }
  const std::vector<RowCopy> rows = split_rows(x.dims(), static_cast<size_t>(axis), parts, dtype_size(x.dtype()));
  if (!rows.empty() && rows[0].src_pitch > kMaxPitch) return run_reference(ctx);
  for (size_t i = 0; i < rows.size(); ++i) {
    const RowCopy& c = rows[i];
    copy_rows(ctx, ctx.out(i).raw(), c.width, x.raw() + c.src_offset, c.src_pitch, c.width, c.outer);
  }
}

// ---- Pad ---------------------------------------------------------------

constexpr int kMaxRank = 8;

// f(E{}) with E the unsigned integer of the element's width, and true; false for other
// widths (1 and 2 bytes: bool, uint8, fp16 stay on the host; each width is another
// kernel for every GPU architecture in the binary).
template <typename F>
bool with_width(DataType t, F&& f) {
  switch (dtype_size(t)) {
    case 4:
      return f(uint32_t{}), true;
    case 8:
      return f(uint64_t{}), true;
    default:
      return false;
  }
}

enum class PadMode : int { Constant, Edge, Reflect, Wrap };

struct PadArgs {
  int rank = 0;
  int64_t in[kMaxRank] = {}, out[kMaxRank] = {};
  const int64_t* pads = nullptr;  // [begin..., end...] of the axes (all axes without `axes`)
  const void* axes = nullptr;     // opset 18: the padded axes, int64 or int32
  bool axes_wide = true;
  int axes_count = 0;
  const void* value = nullptr;  // constant mode's value (one element), nullptr: zero
  PadMode mode = PadMode::Constant;
};

// Where index i of a dim of size n reads (the reference's `source`).
__device__ int64_t pad_source(int64_t i, int64_t n, PadMode mode) {
  if (i >= 0 && i < n) return i;
  if (mode == PadMode::Edge) return i < 0 ? 0 : n - 1;
  if (mode == PadMode::Wrap) return ((i % n) + n) % n;
  if (n == 1) return 0;
  const int64_t period = 2 * (n - 1), m = ((i % period) + period) % period;
  return m < n ? m : period - m;
}

// E: an unsigned integer of the element's width (the kernel moves bytes).
template <typename E>
__global__ void pad_kernel(const E* x, E* y, int64_t n, PadArgs a) {
  __shared__ int64_t begin[kMaxRank];
  if (threadIdx.x == 0) {
    for (int d = 0; d < a.rank; ++d) begin[d] = a.axes ? 0 : a.pads[d];
    for (int k = 0; a.axes && k < a.axes_count; ++k) {
      int64_t axis = a.axes_wide ? static_cast<const int64_t*>(a.axes)[k] : static_cast<const int32_t*>(a.axes)[k];
      if (axis < 0) axis += a.rank;
      if (axis >= 0 && axis < a.rank) begin[axis] = a.pads[k];
    }
  }
  __syncthreads();
  const E fill = a.value ? *static_cast<const E*>(a.value) : E(0);
  TRAINRT_GRID_STRIDE(o, n) {
    int64_t rest = o, src = 0, stride = 1;
    bool inside = true;
    for (int d = a.rank - 1; d >= 0; --d) {
      const int64_t q = rest / a.out[d];
      int64_t i = rest - q * a.out[d] - begin[d];
      rest = q;
      if (a.mode != PadMode::Constant) i = pad_source(i, a.in[d], a.mode);
      inside = inside && i >= 0 && i < a.in[d];
      src += i * stride;
      stride *= a.in[d];
    }
    y[o] = inside ? x[src] : fill;
  }
}

void pad(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  const std::string mode = ctx.node.attr_string("mode", "constant");
  PadArgs a;
  a.rank = static_cast<int>(x.rank());
  a.mode = mode == "edge"      ? PadMode::Edge
           : mode == "reflect" ? PadMode::Reflect
           : mode == "wrap"    ? PadMode::Wrap
                               : PadMode::Constant;
  const Tensor& pads = ctx.in(1);
  if (a.rank > kMaxRank || pads.dtype() != DataType::Int64) return run_reference(ctx);
  a.pads = pads.data<int64_t>();
  if (ctx.has_input(3)) {
    const Tensor& axes = ctx.in(3);
    if (axes.dtype() != DataType::Int64 && axes.dtype() != DataType::Int32) return run_reference(ctx);
    a.axes = axes.raw();
    a.axes_wide = axes.dtype() == DataType::Int64;
    a.axes_count = static_cast<int>(axes.numel());
  }
  if (ctx.has_input(2) && ctx.in(2).numel() > 0) a.value = ctx.in(2).raw();
  for (int d = 0; d < a.rank; ++d) {
    a.in[d] = x.dims()[static_cast<size_t>(d)];
    a.out[d] = y.dims()[static_cast<size_t>(d)];
  }
  const int64_t n = y.numel();
  if (!with_width(x.dtype(), [&](auto tag) {
        using E = decltype(tag);
        pad_kernel<<<blocks_for(n), kThreads, 0, context().stream>>>(reinterpret_cast<const E*>(x.raw()),
                                                                     reinterpret_cast<E*>(y.raw()), n, a);
        check_launch(ctx.node, "pad_kernel");
      }))
    run_reference(ctx);
}

// ---- Transpose, Slice, SliceGrad: one thread per element of the dense side --------

// Element o of a dense tensor of dims `dense` sits at base + sum(i_d * strides[d]) of the
// strided side (i_d: o's index over the dims).
struct StridedView {
  int rank = 0;
  int64_t dense[kMaxRank] = {}, strides[kMaxRank] = {};
  int64_t base = 0;
  __device__ int64_t offset(int64_t o) const { return base + strided_offset(o, rank, dense, strides); }
};

// This thread's elements: scatter = false: dst[o] = src[view(o)]; true: dst[view(o)] = src[o].
template <typename E>
__device__ void copy_view(const E* src, E* dst, int64_t n, const StridedView& v, bool scatter) {
  TRAINRT_GRID_STRIDE(o, n) {
    if (scatter)
      dst[v.offset(o)] = src[o];
    else
      dst[o] = src[v.offset(o)];
  }
}

template <typename E>
__global__ void strided_copy_kernel(const E* src, E* dst, int64_t n, StridedView v, bool scatter) {
  copy_view(src, dst, n, v, scatter);
}

// Slice's bounds as a StridedView over x: computed on the device (thread 0 of each block)
// from the starts/ends/axes/steps tensors, with ONNX's clamping (ops/shape_ops.cpp
// slice_axis); the view's dims are the dense side's, known on the host.
struct SliceArgs {
  StridedView v;             // dense dims set on the host; strides and base by the kernel
  int64_t x[kMaxRank] = {};  // x's dims (dX's for SliceGrad)
  const int64_t *starts = nullptr, *ends = nullptr, *axes = nullptr, *steps = nullptr;
  int count = 0;
};

__device__ void slice_view(const SliceArgs& a, StridedView& v) {
  int64_t start[kMaxRank], step[kMaxRank];
  for (int d = 0; d < v.rank; ++d) start[d] = 0, step[d] = 1;
  for (int k = 0; k < a.count; ++k) {
    int64_t d = a.axes ? a.axes[k] : k;
    if (d < 0) d += v.rank;
    if (d < 0 || d >= v.rank) continue;
    const int64_t dim = a.x[d], st = a.steps ? a.steps[k] : 1;
    int64_t b = a.starts[k];
    if (b < 0) b += dim;
    b = st > 0 ? (b < 0 ? 0 : b > dim ? dim : b) : (b < 0 ? 0 : b > dim - 1 ? dim - 1 : b);
    start[d] = dim == 0 ? 0 : b;
    step[d] = st;
  }
  int64_t stride = 1;
  v.base = 0;
  for (int d = v.rank - 1; d >= 0; --d) {
    v.strides[d] = stride * step[d];
    v.base += stride * start[d];
    stride *= a.x[d];
  }
}

template <typename E>
__global__ void slice_kernel(const E* src, E* dst, int64_t n, SliceArgs a, bool scatter) {
  __shared__ StridedView v;
  if (threadIdx.x == 0) {
    v = a.v;
    slice_view(a, v);
  }
  __syncthreads();
  copy_view(src, dst, n, v, scatter);
}

// E: an unsigned integer of the element's width, 1 to 8 bytes.
template <typename F>
bool with_any_width(DataType t, F&& f) {
  switch (dtype_size(t)) {
    case 1:
      return f(uint8_t{}), true;
    case 2:
      return f(uint16_t{}), true;
    default:
      return with_width(t, f);
  }
}

void transpose(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const int64_t n = y.numel();
  if (n == 0) return;
  const std::vector<int64_t> perm = transpose_perm(ctx.node, x.rank());
  if (perm.size() > static_cast<size_t>(kMaxRank)) return run_reference(ctx);
  StridedView v;
  v.rank = static_cast<int>(perm.size());
  std::vector<int64_t> xs(perm.size(), 1);
  for (size_t d = perm.size(); d-- > 1;) xs[d - 1] = xs[d] * x.dims()[d];
  for (size_t d = 0; d < perm.size(); ++d) {
    v.dense[d] = y.dims()[d];
    v.strides[d] = xs[static_cast<size_t>(perm[d])];
  }
  if (!with_any_width(x.dtype(), [&](auto tag) {
        using E = decltype(tag);
        strided_copy_kernel<<<blocks_for(n), kThreads, 0, context().stream>>>(
            reinterpret_cast<const E*>(x.raw()), reinterpret_cast<E*>(y.raw()), n, v, false);
        check_launch(ctx.node, "strided_copy_kernel");
      }))
    run_reference(ctx);
}

// Slice (first = 1: x, starts, ends...) or SliceGrad (first = 2: dY, X, starts, ends...).
void slice_common(KernelContext& ctx, size_t first, bool grad) {
  const Tensor& src = ctx.in(0);
  Tensor& dst = ctx.out(0);
  const Tensor& full = grad ? dst : src;   // the tensor the bounds index
  const Tensor& dense = grad ? src : dst;  // the slice itself
  if (grad && dst.nbytes())
    check(cudaMemsetAsync(dst.raw(), 0, dst.nbytes(), context().stream), what(ctx.node, "cudaMemsetAsync"));
  const int64_t n = dense.numel();
  if (n == 0) return;
  const size_t rank = full.dims().size();
  const Tensor &starts = ctx.in(first), &ends = ctx.in(first + 1);
  bool ok = rank <= static_cast<size_t>(kMaxRank) && starts.dtype() == DataType::Int64 &&
            ends.dtype() == DataType::Int64 && starts.numel() <= static_cast<int64_t>(kMaxRank);
  for (size_t k = first + 2; k < first + 4; ++k) ok = ok && (!ctx.has_input(k) || ctx.in(k).dtype() == DataType::Int64);
  if (!ok) return run_reference(ctx);
  SliceArgs a;
  a.v.rank = static_cast<int>(rank);
  for (size_t d = 0; d < rank; ++d) {
    a.x[d] = full.dims()[d];
    a.v.dense[d] = dense.dims()[d];
  }
  a.starts = starts.data<int64_t>();
  a.ends = ends.data<int64_t>();
  a.axes = ctx.has_input(first + 2) ? ctx.in(first + 2).data<int64_t>() : nullptr;
  a.steps = ctx.has_input(first + 3) ? ctx.in(first + 3).data<int64_t>() : nullptr;
  a.count = static_cast<int>(starts.numel());
  if (!with_any_width(src.dtype(), [&](auto tag) {
        using E = decltype(tag);
        slice_kernel<<<blocks_for(n), kThreads, 0, context().stream>>>(reinterpret_cast<const E*>(src.raw()),
                                                                       reinterpret_cast<E*>(dst.raw()), n, a, grad);
        check_launch(ctx.node, "slice_kernel");
      }))
    run_reference(ctx);
}
void slice(KernelContext& ctx) { slice_common(ctx, 1, false); }
void slice_grad(KernelContext& ctx) { slice_common(ctx, 2, true); }

}  // namespace

void register_shape_ops_cuda(Registry& r) {
  add_if_schema(r, "cuda", "", "Transpose", transpose);
  add_if_schema(r, "cuda", "", "Slice", slice);
  add_if_schema(r, "cuda", kTrainrtDomain, "SliceGrad", slice_grad);
  add_if_schema(r, "cuda", "", "Pad", pad);
  for (const char* op : {"Flatten", "Reshape", "Squeeze", "Unsqueeze"}) add_if_schema(r, "cuda", "", op, copy_bytes);
  add_if_schema(r, "cuda", kTrainrtDomain, "ReshapeLike", copy_bytes);
  add_if_schema(r, "cuda", "", "Concat", concat);
  add_if_schema(r, "cuda", kTrainrtDomain, "ConcatGrad", concat_grad);
  add_if_schema(r, "cuda", "", "Split", split);
}

}  // namespace trainrt::cuda
