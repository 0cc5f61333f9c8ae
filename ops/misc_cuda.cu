// The cuda backend's misc kernels: Dropout and its two gradients (DropoutGrad,
// DropoutReluGrad), float32 and float64; Identity, every dtype.
//
//   Dropout     the counter-based mask of ops/misc.cpp, bit for bit (in any layout: the
//               mask follows each element's row-major index)
//   Identity    y = x's bytes: one cudaMemcpyAsync on the stream (the planner declares no
//               in-place pair for it, so y is a buffer of its own; a copy onto itself is skipped);
//               x and y each Plain or ChannelsLast (4-D), transposed where they differ, and y
//               stored in 16 bits (rounded as written) where the plan says so: the
//               convolutions' KRSC weight copies and the KCRS weight gradients
//               (runtime/layout.h add_layout_copies) are such Identity nodes
//
// Why own kernels: one pass over memory; cuDNN has no op with Dropout's mask. Kernels
// run in place where the planner puts an output over an input (runtime/plan.cpp):
// every thread reads element i before writing it. The NHWC mask index is walked with
// no division per element; fp32 Dropout and its gradients move four values per 16-byte
// access where aligned (Dropout on ChannelsLast where C % 4 == 0: four channels of one
// position, row-major indices H*W apart), with a scalar tail.
//
// Dropout: the mask is splitmix64 of (seed, element index), so the device draws exactly
// the host's mask; u >= ratio is tested as the integer (h >> 11) >= ceil(ratio * 2^53),
// which is the same comparison without a double per element. ratio and training_mode
// are read on the device (they are values, possibly changed between steps). A device
// kernel cannot throw: where the reference rejects a ratio outside [0, 1) in training,
// these kernels write NaN to every element (mask 0), so the loss shows it.
//
// Host fallbacks (reference kernel after a stream synchronisation): Dropout of any dtype
// other than float32/float64.
//
// Compiled in CI, run only where a GPU exists (trainrt selftest --device cuda).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <type_traits>

#include "graph/error.h"
#include "ops/core/channels_last.h"
#include "ops/core/dropout_mask.h"
#include "ops/core/kernel_facts.h"
#include "ops/cuda/cuda_load16.h"
#include "ops/cuda/cuda_util.h"
#include "ops/cuda/dropout_device.h"

namespace trainrt::cuda {

namespace {

// Grid cap of kernels whose blocks first derive constants from device scalars.
constexpr unsigned kMaxBlocks = 1024;

// ---- Dropout -------------------------------------------------------------------

using dropout_mask::splitmix64;  // the mask rule: ops/core/dropout_mask.h, the reference's too

// Element i's mask is drawn from its row-major index: C, hw of a ChannelsLast x (y,
// mask alike), walked without a division per element (channels_last::PlainWalk); C = hw
// = 1 for Plain, where the walk's row-major index is i itself.
// x: a const T*, or a Load16 where x is stored in 16 bits; y: a T*, or a Store16 where y is
// (runtime/narrow.h).
template <typename T, typename In, typename Out>
__global__ void dropout_kernel(In x, Out y, uint8_t* mask, int64_t n, int64_t C, int64_t hw, DropoutOptions o) {
  const DropoutConstants<T> c = block_dropout_constants<T>(o);
  const uint64_t key = c.key;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  // (w.index) parenthesised: nvcc takes "w.index < n" for a template's argument list.
  for (channels_last::PlainWalk w(first, step, C, hw); (w.index) < n; w.next(step)) {
    const int64_t i = w.index;
    if (!c.training) {  // inference: identity, mask all true
      store_at(y, i, static_cast<T>(load_at(x, i)));
      if (mask) mask[i] = 1;
      continue;
    }
    const bool keep = c.valid && dropout_mask::keep(key, w.plain(), c.threshold);
    store_at(y, i, keep ? static_cast<T>(load_at(x, i)) * c.scale : c.valid ? T(0) : c.scale);
    if (mask) mask[i] = keep ? 1 : 0;
  }
}

// fp32 Dropout four values per 16-byte access: x and y as float4 (16-byte aligned), the
// mask as uchar4 (4-byte aligned). Group g holds storage offsets 4g..4g+3, whose
// row-major indices are at, at + step, ... (dropout_mask::lane_step: step 1 Plain, hw
// ChannelsLast with C % 4 == 0), `at` walked as in dropout_kernel. A Plain tensor's last
// n % 4 values (`tail`) are drawn one by one by the grid's first threads.
__global__ void dropout4_kernel(const float4* x, float4* y, uchar4* mask, int64_t groups, int64_t C, int64_t hw,
                                int64_t step, const float* tail_x, float* tail_y, uint8_t* tail_mask, int64_t tail,
                                DropoutOptions o) {
  const DropoutConstants<float> c = block_dropout_constants<float>(o);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  channels_last::PlainWalk w(4 * first, 4 * stride, C, hw);
  for (int64_t g = first; g < groups; g += stride, w.next(4 * stride)) {
    const float4 v = x[g];
    if (!c.training) {  // inference: identity, mask all true
      y[g] = v;
      if (mask) mask[g] = make_uchar4(1, 1, 1, 1);
      continue;
    }
    bool k[4] = {false, false, false, false};
    if (c.valid) dropout_mask::keep4(c.key, w.plain(), step, c.threshold, k);
    const float drop = c.valid ? 0.f : c.scale;
    y[g] = make_float4(k[0] ? v.x * c.scale : drop, k[1] ? v.y * c.scale : drop, k[2] ? v.z * c.scale : drop,
                       k[3] ? v.w * c.scale : drop);
    if (mask) mask[g] = make_uchar4(k[0], k[1], k[2], k[3]);
  }
  if (first < tail) {  // Plain: row-major index = storage offset
    const int64_t i = 4 * groups + first;
    const bool keep = !c.training || (c.valid && dropout_mask::keep(c.key, i, c.threshold));
    tail_y[first] = !c.training ? tail_x[first] : keep ? tail_x[first] * c.scale : c.valid ? 0.f : c.scale;
    if (tail_mask) tail_mask[first] = keep ? 1 : 0;
  }
}

// One gradient value: dY * scale where the element was kept, else 0 (NaN everywhere for
// an invalid training ratio, as the forward wrote).
template <typename T>
__device__ T dropout_grad_value(const DropoutConstants<T>& c, T dy, bool kept) {
  return c.training && !c.valid ? c.scale : kept ? dy * c.scale : T(0);
}

// DropoutReluGrad's test of element i of Z: Z > 0, under bf16/fp16 on Z rounded to that
// type (math_rounded_inputs), read from its 16-bit bits where Z is stored so.
template <typename T>
__device__ bool relu_kept(const T* z, int64_t i, const DropoutOptions& o) {
  if (o.z16) {
    const uint16_t b = reinterpret_cast<const uint16_t*>(z)[i];
    return (o.z_math == MathPrecision::bf16 ? bfloat16_to_float(b) : half_to_float(b)) > 0.f;
  }
  if constexpr (std::is_same_v<T, float>) return round_to_math(z[i], o.z_math) > 0.f;
  return z[i] > T(0);
}

// DropoutGrad (kRelu false): dX = mask ? dY * scale : 0.
// DropoutReluGrad (kRelu true, `keep` is Z): dX = Z > 0 ? dZ * scale : 0.
// dy: a const T* or a Load16, dx: a T* or a Store16 (stored in 16 bits, runtime/narrow.h).
template <typename T, bool kRelu, typename Dy, typename Dx>
__global__ void dropout_grad_kernel(Dy dy, const void* keep, Dx dx, int64_t n, DropoutOptions o) {
  const DropoutConstants<T> c = block_dropout_constants<T>(o);
  TRAINRT_GRID_STRIDE(i, n) {
    bool kept;
    if constexpr (kRelu)
      kept = relu_kept(static_cast<const T*>(keep), i, o);
    else
      kept = static_cast<const uint8_t*>(keep)[i] != 0;
    store_at(dx, i, dropout_grad_value(c, static_cast<T>(load_at(dy, i)), kept));
  }
}

// The same for fp32 four values per 16-byte access (n % 4 == 0, dy and dx 16-byte
// aligned, `keep` 16-byte (Z) or 4-byte (mask) aligned).
template <bool kRelu>
__global__ void dropout_grad4_kernel(const float4* dy, const void* keep, float4* dx, int64_t n4, DropoutOptions o) {
  const DropoutConstants<float> c = block_dropout_constants<float>(o);
  TRAINRT_GRID_STRIDE(i, n4) {
    bool k0, k1, k2, k3;
    if constexpr (kRelu) {
      const float4 z = static_cast<const float4*>(keep)[i];
      k0 = z.x > 0.f, k1 = z.y > 0.f, k2 = z.z > 0.f, k3 = z.w > 0.f;
    } else {
      const uchar4 m = static_cast<const uchar4*>(keep)[i];
      k0 = m.x != 0, k1 = m.y != 0, k2 = m.z != 0, k3 = m.w != 0;
    }
    const float4 g = dy[i];
    dx[i] = make_float4(dropout_grad_value(c, g.x, k0), dropout_grad_value(c, g.y, k1), dropout_grad_value(c, g.z, k2),
                        dropout_grad_value(c, g.w, k3));
  }
}

void dropout(KernelContext& ctx) {
  DropoutOptions o;
  const Tensor& x = ctx.in(0);
  // The reference's key: splitmix64(seed), or splitmix64(seed ^ splitmix64(attr seed)).
  o.run_seed = ctx.run_seed;
  o.node = ctx.node_index;
  o.seed = ctx.seed;
  if (ctx.node.has_attr("seed")) o.attr_mix = splitmix64(static_cast<uint64_t>(ctx.node.attr_int("seed", 0)));
  uint8_t* mask = ctx.has_output(1) ? ctx.out(1).data<uint8_t>() : nullptr;
  // A float32 x stored in 16 bits still runs the float kernels (they read its bits).
  const DataType type = stored_narrow(ctx, x) ? DataType::Float32 : x.dtype();
  if (!dropout_options(ctx, 1, o) || !with_float(type, [&](auto tag) {
        using T = decltype(tag);
        const int64_t n = x.numel();
        if (n == 0) return;  // nothing to draw (and PlainWalk divides by C and hw)
        const unsigned blocks = std::min(blocks_for(n), kMaxBlocks);
        const bool last = x.layout() == Layout::ChannelsLast;
        const int64_t C = last ? x.dims()[1] : 1, hw = last ? x.dims()[2] * x.dims()[3] : 1;
        Tensor& y = ctx.out(0);
        if constexpr (std::is_same_v<T, float>) {
          const int64_t step = dropout_mask::lane_step(last, C, hw);
          const bool mask_aligned = !mask || reinterpret_cast<std::uintptr_t>(mask) % 4 == 0;
          if (step > 0 && !stored_narrow(ctx, x) && !stored_narrow(ctx, y) && aligned16(x.raw()) &&
              aligned16(y.raw()) && mask_aligned) {
            const int64_t groups = n / 4, tail = n - 4 * groups;  // tail: Plain only (C % 4 == 0 otherwise)
            const float* tx = x.data<float>() + 4 * groups;
            float* ty = y.data<float>() + 4 * groups;
            dropout4_kernel<<<std::min(blocks_for(std::max(groups, tail)), kMaxBlocks), kThreads, 0,
                              context().stream>>>(reinterpret_cast<const float4*>(x.raw()),
                                                  reinterpret_cast<float4*>(y.raw()), reinterpret_cast<uchar4*>(mask),
                                                  groups, C, hw, step, tx, ty, mask ? mask + 4 * groups : nullptr, tail,
                                                  o);
            check_launch(ctx.node, "dropout4_kernel");
            return;
          }
        }
        auto launch = [&](auto in) {
          if (std::is_same_v<T, float> && stored_narrow(ctx, y))  // y stored in 16 bits: rounded as written
            dropout_kernel<T><<<blocks, kThreads, 0, context().stream>>>(in, store16(y, ctx.math), mask, n, C, hw, o);
          else
            dropout_kernel<T><<<blocks, kThreads, 0, context().stream>>>(in, y.data<T>(), mask, n, C, hw, o);
          check_launch(ctx.node, "dropout_kernel");
        };
        if constexpr (std::is_same_v<T, float>)
          if (stored_narrow(ctx, x)) {  // x stored in 16 bits: its exact widening
            launch(load16(x, ctx.math));
            return;
          }
        launch(x.data<T>());
      }))
    run_reference(ctx);
}

template <bool kRelu>
void dropout_grad(KernelContext& ctx) {
  DropoutOptions o;
  const Tensor& dy = ctx.in(0);
  // DropoutReluGrad's dY and dX may be float32 values stored in 16 bits: the float kernels
  // read and write their bits (the scalar path).
  const bool dy16 = stored_narrow(ctx, dy), dx16 = stored_narrow(ctx, ctx.out(0));
  if (!dropout_options(ctx, 2, o) || !with_float(dy16 ? DataType::Float32 : dy.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const int64_t n = dy.numel();
        const void* keep = ctx.in(1).raw();
        const unsigned blocks = std::min(blocks_for(n), kMaxBlocks);
        auto launch = [&](auto dy_at, auto dx_at) {
          dropout_grad_kernel<T, kRelu><<<blocks, kThreads, 0, context().stream>>>(dy_at, keep, dx_at, n, o);
          check_launch(ctx.node, "dropout_grad_kernel");
        };
        if constexpr (kRelu) {
          o.z_math = std::is_same_v<T, float> ? ctx.math : MathPrecision::fp32;
          o.z16 = stored_narrow(ctx, ctx.in(1));
        }
        if constexpr (std::is_same_v<T, float>)
          if (dy16 || dx16) {
            const Load16 dy_bits = dy16 ? load16(dy, ctx.math) : Load16{};
            const Store16 dx_bits = dx16 ? store16(ctx.out(0), ctx.math) : Store16{};
            if (dy16 && dx16) return launch(dy_bits, dx_bits);
            if (dy16) return launch(dy_bits, ctx.out(0).data<float>());
            return launch(dy.data<float>(), dx_bits);
          }
        T* dx = ctx.out(0).data<T>();
        const bool keep_aligned = kRelu ? aligned16(keep) : reinterpret_cast<std::uintptr_t>(keep) % 4 == 0;
        if constexpr (std::is_same_v<T, float>) {  // the float4 path reads fp32 Z with its sign as it is
          if (n % 4 == 0 && aligned16(dy.raw()) && aligned16(dx) && keep_aligned && o.z_math == MathPrecision::fp32 &&
              !o.z16) {
            dropout_grad4_kernel<kRelu><<<std::min(blocks_for(n / 4), kMaxBlocks), kThreads, 0, context().stream>>>(
                reinterpret_cast<const float4*>(dy.raw()), keep, reinterpret_cast<float4*>(dx), n / 4, o);
            check_launch(ctx.node, "dropout_grad4_kernel");
            return;
          }
        }
        launch(dy.data<T>(), dx);
      }))
    run_reference(ctx);
}

// ---- Identity ------------------------------------------------------------------

// y (storage offset i) = x in the other layout (channels_last::relayout_source); Y: a T*
// or a Store16 where y is stored in 16 bits.
template <typename T, typename Y>
__global__ void relayout_kernel(const T* x, Y y, int64_t n, int64_t C, int64_t hw, bool x_last, bool y_last) {
  TRAINRT_GRID_STRIDE(i, n) { store_at(y, i, x[channels_last::relayout_source(i, C, hw, x_last, y_last)]); }
}
template <typename T, typename Y>
void relayout(const Tensor& x, Y y, const Tensor& shape, const Node& n) {
  const int64_t count = x.numel();
  const bool x_last = x.layout() == Layout::ChannelsLast, y_last = shape.layout() == Layout::ChannelsLast;
  const int64_t C = x.rank() == 4 ? x.dims()[1] : 1, hw = x.rank() == 4 ? x.dims()[2] * x.dims()[3] : 1;
  relayout_kernel<T>
      <<<blocks_for(count), kThreads, 0, context().stream>>>(x.data<T>(), y, count, C, hw, x_last, y_last);
  check_launch(n, "relayout_kernel");
}

void identity(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (x.nbytes() == 0 || y.raw() == x.raw()) return;
  if (stored_narrow(ctx, y)) {  // a float32 value stored rounded (runtime/narrow.h)
    if (x.dtype() != DataType::Float32) return run_reference(ctx, "a 16-bit copy of a value that is not float32");
    return relayout<float>(x, store16(y, ctx.math), y, ctx.node);
  }
  if (x.layout() == y.layout()) {
    check(cudaMemcpyAsync(y.raw(), x.raw(), x.nbytes(), cudaMemcpyDefault, context().stream),
          what(ctx.node, "cudaMemcpyAsync"));
    return;
  }
  switch (dtype_size(x.dtype())) {  // a transposition moves bytes: any dtype of the size
    case 1:
      return relayout<uint8_t>(x, y.data<uint8_t>(), y, ctx.node);
    case 2:
      return relayout<uint16_t>(x, y.data<uint16_t>(), y, ctx.node);
    case 4:
      return relayout<uint32_t>(x, y.data<uint32_t>(), y, ctx.node);
    case 8:
      return relayout<uint64_t>(x, y.data<uint64_t>(), y, ctx.node);
    default:
      return run_reference(ctx, "a layout conversion of this dtype");
  }
}

}  // namespace

void register_misc_cuda(Registry& r) {
  // Identity converts between layouts (x and y each Plain or ChannelsLast) and writes a
  // 16-bit y: the layout copies of runtime/layout.h add_layout_copies.
  add_if_schema(r, "cuda", "", "Identity", identity, facts::fixed({{facts::A}, {facts::A}}));
  if (r.kernels.find("cuda", "", "Identity"))
    r.kernels.set_narrow("cuda", "", "Identity", facts::narrow_float_outputs({0}));
  add_if_schema(r, "cuda", "", "Dropout", dropout, facts::dropout);
  if (r.kernels.find("cuda", "", "Dropout"))  // x read, y written in 16 bits where stored so
    r.kernels.set_narrow("cuda", "", "Dropout", facts::narrow({0}, {0}));
  add_if_schema(r, "cuda", kTrainrtDomain, "DropoutGrad", dropout_grad<false>, facts::dropout_grad);
  add_if_schema(r, "cuda", kTrainrtDomain, "DropoutReluGrad", dropout_grad<true>, facts::dropout_grad);
  // DropoutReluGrad: Z (its sign) from 16-bit storage, dY (a convolution's data gradient,
  // rounded by it) read and dX (rounded: math_rounded_outputs) written in 16 bits.
  if (r.kernels.find("cuda", kTrainrtDomain, "DropoutReluGrad"))
    r.kernels.set_narrow("cuda", kTrainrtDomain, "DropoutReluGrad", facts::narrow({0, 1}, {0}));
}

}  // namespace trainrt::cuda
