// MaxPool, AveragePool, GlobalAveragePool, GlobalMaxPool and their gradients on the cuda
// backend: own kernels, one thread per output element (forward) or per dX element
// (backward, a gather, so no atomics and the same sums on every run); the global ones one
// block per N,C plane (Plain), or per image and tile of 32 channels (GlobalAveragePool on
// ChannelsLast: a warp reads 32 neighbouring channels of one position, coalesced), or one
// thread per plane (GlobalMaxPool on ChannelsLast: neighbouring threads, neighbouring
// channels).
// Registered by register_all (ops/core/register_all.cpp).
//
//   MaxPool          x: N,C,spatial... -> y: N,C,out... (+ Indices: int64, same shape)
//   AveragePool      x: N,C,spatial... -> y: N,C,out... (dilations: opset 19)
//   MaxPoolGrad      (dY, X) -> dX: dY to its window's argmax, recomputed from X (each
//                    window's argmax tap in the workspace: 1 byte up to 256 taps, else 4)
//   AveragePoolGrad  (dY, X) -> dX: dY / divisor to every real element of its window
//   GlobalAveragePool      x: N,C,spatial... -> y: N,C,1,...: each plane's mean, summed in
//                          double over the block (a fixed tree, so the same bits every run)
//   GlobalAveragePoolGrad  (dY, X) -> dX: dY / plane size to every element of the plane
//   GlobalMaxPool          x: N,C,spatial... -> y: N,C,1,...: each plane's first maximum
//   GlobalMaxPoolGrad      (dY, X) -> dX: dY at that maximum, 0 elsewhere
//
// Why not cuDNN's pooling: it pads symmetrically, has no dilations, no ceil_mode, no
// Indices output, and its backward's choice among tied maxima (common after a Relu: a
// window of zeros) is undocumented, while MaxPoolGrad must pick the reference's element
// (the first maximum in window order), and GlobalMaxPoolGrad the first maximum of its
// plane. These kernels are ops/pool.cpp's loops run per
// element, with the same geometry, argmax rule and AveragePool divisor (ops/core/pool_geometry.h:
// one copy for both) and Indices (storage_order), so no case falls
// back to the host; they sum in the value's own type (the reference sums in double).
// 1-3 spatial dims are seen as D,H,W planes with leading size-1 dims, as in the reference.
// The per-element work is ops/core/pool_index.h's (tested on the host against the
// reference, element by element): in int32_t index math wherever the tensors' sizes allow
// (int64_t beyond ~2^31 elements), and for windows that tile the input (kernel ==
// stride, no pads, no dilation: MaxPool 2, AveragePool 7) a gradient element finds its
// one window by a division per dim instead of a modulo and division per kernel tap.
// MaxPool also takes int8/uint8 (opset 12).
//
// ChannelsLast (NHWC, rank 4; runtime/layout.h): each of X, Y (dY, X, dX) Plain or
// ChannelsLast on its own. A thread takes the element at storage offset o of the
// tensor it writes, so with ChannelsLast neighbouring threads write neighbouring
// channels (coalesced); a plane's elements are C apart (window_argmax's step). MaxPool's Indices stay Plain and hold
// ONNX's NCHW indices; GlobalAveragePool's N,C,1,1 output is the same bytes in either layout.
//
// Compiled in CI, run only where a GPU exists (trainrt selftest --device cuda).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>
#include <type_traits>

#include "graph/error.h"
#include "ops/core/common.h"
#include "ops/core/kernel_facts.h"
#include "ops/core/pool_geometry.h"
#include "ops/core/pool_index.h"
#include "ops/cuda/cuda_util.h"

namespace trainrt::cuda {

namespace {

using pool_index::Lay, pool_index::fits_int32, pool_index::index_dims, pool_index::is_tiled;

// How a node's N,C,spatial tensor is stored (ops/core/pool_index.h: the per-element index
// arithmetic, run and tested on the host too).
template <typename I>
Lay<I> lay_of(const Tensor& t) {
  return t.layout() == Layout::ChannelsLast ? Lay<I>{static_cast<I>(t.dims()[1]), true} : Lay<I>{};
}

// A grid-stride loop over [0, n) in index type I (fits_int32 leaves room for the last step).
#define POOL_LOOP(I, o, n)                                                   \
  for (I o = static_cast<I>(blockIdx.x * blockDim.x + threadIdx.x); o < (n); \
       o += static_cast<I>(gridDim.x * blockDim.x))

// x: P,D,H,W -> y: P,Do,Ho,Wo; idx (optional): ONNX's flattened argmax indices.
template <typename T, typename I>
__global__ void maxpool_kernel(PoolDims<I> g, Lay<I> lx, Lay<I> ly, const T* x, T* y, int64_t* idx, bool column_major,
                               T lowest) {
  const I count = g.planes * g.out_size();
  POOL_LOOP(I, o, count) pool_index::maxpool_at(g, lx, ly, x, o, lowest, column_major, y, idx);
}

// x: P,D,H,W -> y: P,Do,Ho,Wo, the mean of each (dilated) window.
template <typename T, typename I>
__global__ void averagepool_kernel(PoolDims<I> g, Lay<I> lx, Lay<I> ly, const T* x, T* y, bool include_pad) {
  const I count = g.planes * g.out_size();
  POOL_LOOP(I, o, count) y[o] = pool_index::averagepool_at(g, lx, ly, x, o, include_pad);
}

// arg[o]: the tap of window o's argmax (the forward's choice); o in dY's storage order.
template <typename T, typename I, typename A>
__global__ void window_argmax_kernel(PoolDims<I> g, Lay<I> lx, Lay<I> ldy, const T* x, A* arg) {
  const I count = g.planes * g.out_size();
  POOL_LOOP(I, o, count) arg[o] = pool_index::argmax_tap_at<A>(g, lx, ldy, x, o);
}

// dx[p, i] = sum of dy over the windows of plane p whose argmax (arg) is element i.
template <typename T, typename I, typename A, bool kTiled>
__global__ void maxpool_grad_kernel(PoolDims<I> g, Lay<I> ldy, Lay<I> ldx, const T* dy, const A* arg, T* dx) {
  const I count = g.planes * g.in_size();
  POOL_LOOP(I, i, count) dx[i] = pool_index::maxpool_grad_at<kTiled>(g, ldy, ldx, dy, arg, i);
}

// dx[p, i] = sum over the windows holding element i of dy / that window's divisor.
template <typename T, typename I, bool kTiled>
__global__ void averagepool_grad_kernel(PoolDims<I> g, Lay<I> ldy, Lay<I> ldx, const T* dy, T* dx, bool include_pad) {
  const I count = g.planes * g.in_size();
  POOL_LOOP(I, i, count) dx[i] = pool_index::averagepool_grad_at<kTiled>(g, ldy, ldx, dy, i, include_pad);
}

// f(index type tag, g in that type): int32_t where the tensors' sizes allow.
template <typename F>
void with_index(const Pool3& g, F&& f) {
  if (fits_int32(g)) return f(int32_t{}, index_dims<int32_t>(g));
  f(int64_t{}, g);
}
// f(std::bool_constant<is_tiled(g)>).
template <typename F>
void with_tiled(const Pool3& g, F&& f) {
  if (is_tiled(g)) return f(std::true_type{});
  f(std::false_type{});
}

// MaxPool also takes 8-bit integers (ONNX opset 12).
template <typename F>
void dispatch_maxpool(DataType t, F&& f) {
  if (t == DataType::UInt8) return f(uint8_t{});
  if (t == DataType::Int8) return f(int8_t{});
  dispatch_float(t, f);
}

void maxpool(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  const Pool3 g = pool_geometry(ctx.node, x, y);
  int64_t* idx = ctx.has_output(1) ? ctx.out(1).data<int64_t>() : nullptr;
  const bool column_major = ctx.node.attr_int("storage_order", 0) == 1;
  dispatch_maxpool(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    with_index(g, [&](auto itag, const auto& gi) {
      using I = decltype(itag);
      maxpool_kernel<T, I><<<blocks_for(y.numel(), kThreads), kThreads, 0, context().stream>>>(
          gi, lay_of<I>(x), lay_of<I>(y), x.data<T>(), y.data<T>(), idx, column_major,
          std::numeric_limits<T>::lowest());
    });
  });
  check_launch(ctx.node, "maxpool_kernel");
}

void averagepool(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  const Pool3 g = pool_geometry(ctx.node, x, y);
  const bool include_pad = ctx.node.attr_int("count_include_pad", 0) == 1;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    with_index(g, [&](auto itag, const auto& gi) {
      using I = decltype(itag);
      averagepool_kernel<T, I><<<blocks_for(y.numel(), kThreads), kThreads, 0, context().stream>>>(
          gi, lay_of<I>(x), lay_of<I>(y), x.data<T>(), y.data<T>(), include_pad);
    });
  });
  check_launch(ctx.node, "averagepool_kernel");
}

// MaxPoolGrad(dY, X) -> dX: the argmax tap of every window into the workspace (1 or 4
// bytes each: pool_index::argmax_bytes), then a gather per dX element.
void maxpool_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  Tensor& dx = ctx.out(0);
  if (dx.numel() == 0) return;
  const Pool3 g = pool_geometry(ctx.node, x, dy);
  const cudaStream_t stream = context().stream;
  void* scratch = workspace(pool_index::argmax_scratch_bytes(g));
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    with_index(g, [&](auto itag, const auto& gi) {
      using I = decltype(itag);
      auto run = [&](auto atag) {
        using A = decltype(atag);
        auto* arg = static_cast<A*>(scratch);
        if (dy.numel() > 0)
          window_argmax_kernel<T, I, A><<<blocks_for(dy.numel(), kThreads), kThreads, 0, stream>>>(
              gi, lay_of<I>(x), lay_of<I>(dy), x.data<T>(), arg);
        with_tiled(g, [&](auto tiled) {
          maxpool_grad_kernel<T, I, A, decltype(tiled)::value>
              <<<blocks_for(dx.numel(), kThreads), kThreads, 0, stream>>>(gi, lay_of<I>(dy), lay_of<I>(dx),
                                                                          dy.data<T>(), arg, dx.data<T>());
        });
      };
      if (pool_index::argmax_bytes(g) == 1)
        run(uint8_t{});
      else
        run(int32_t{});
    });
  });
  check_launch(ctx.node, "maxpool_grad_kernel");
}

void averagepool_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  Tensor& dx = ctx.out(0);
  if (dx.numel() == 0) return;
  const Pool3 g = pool_geometry(ctx.node, x, dy);
  const bool include_pad = ctx.node.attr_int("count_include_pad", 0) == 1;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    with_index(g, [&](auto itag, const auto& gi) {
      using I = decltype(itag);
      with_tiled(g, [&](auto tiled) {
        averagepool_grad_kernel<T, I, decltype(tiled)::value>
            <<<blocks_for(dx.numel(), kThreads), kThreads, 0, context().stream>>>(
                gi, lay_of<I>(dy), lay_of<I>(dx), dy.data<T>(), dx.data<T>(), include_pad);
      });
    });
  });
  check_launch(ctx.node, "averagepool_grad_kernel");
}

// Plain x: one block per plane p (grid-stride over planes): y[p] = mean of x's plane p.
template <typename T>
__global__ void global_average_pool_kernel(const T* x, T* y, int64_t planes, int64_t size) {
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    const T* plane = x + p * size;
    double sum = 0;
    for (int64_t i = threadIdx.x; i < size; i += blockDim.x) sum += static_cast<double>(plane[i]);
    sum = block_sum(sum);
    if (threadIdx.x == 0) y[p] = static_cast<T>(sum / static_cast<double>(size));
  }
}

// Plain dx: one block per plane p: dx's plane p = dy[p] / size (the reference's rounding).
template <typename T>
__global__ void global_average_pool_grad_kernel(const T* dy, T* dx, int64_t planes, int64_t size) {
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    const T share = static_cast<T>(static_cast<double>(dy[p]) / static_cast<double>(size));
    T* plane = dx + p * size;
    for (int64_t i = threadIdx.x; i < size; i += blockDim.x) plane[i] = share;
  }
}

// ChannelsLast x (N rows of `size` positions of C channels): block (32, kLanes) per
// image n (grid-stride) and tile of 32 channels; thread (t, l) sums channel tile * 32 + t
// over positions l, l + kLanes, ... in double, then lane 0 adds the kLanes partial sums in
// lane order (the same bits every run).
constexpr int kLanes = 8;
template <typename T>
__global__ void global_average_pool_nhwc(const T* x, T* y, int64_t batch, int64_t channels, int64_t size) {
  __shared__ double part[kLanes][32];
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  for (int64_t n = blockIdx.y; n < batch; n += gridDim.y) {
    double sum = 0;
    if (c < channels)
      for (int64_t s = threadIdx.y; s < size; s += kLanes) sum += static_cast<double>(x[(n * size + s) * channels + c]);
    part[threadIdx.y][threadIdx.x] = sum;
    __syncthreads();
    if (threadIdx.y == 0 && c < channels) {
      double total = 0;
      for (int l = 0; l < kLanes; ++l) total += part[l][threadIdx.x];
      y[n * channels + c] = static_cast<T>(total / static_cast<double>(size));
    }
    __syncthreads();  // part is rewritten for the next image
  }
}

// ChannelsLast dx: block (32, kLanes) per tile of 32 channels, of kLanes positions
// (grid-stride) and image (grid-stride); each writes dy[n, c] / size, no division per
// element.
template <typename T>
__global__ void global_average_pool_grad_nhwc(const T* dy, T* dx, int64_t batch, int64_t channels, int64_t size) {
  const int64_t c = blockIdx.x * 32 + threadIdx.x;
  if (c >= channels) return;
  for (int64_t n = blockIdx.z; n < batch; n += gridDim.z) {
    const T share = static_cast<T>(static_cast<double>(dy[n * channels + c]) / static_cast<double>(size));
    for (int64_t s = blockIdx.y * kLanes + threadIdx.y; s < size; s += static_cast<int64_t>(gridDim.y) * kLanes)
      dx[(n * size + s) * channels + c] = share;
  }
}

unsigned capped(int64_t n) { return static_cast<unsigned>(std::clamp<int64_t>(n, 1, 65535)); }
// Tiles of 32 channels: the grid's x, which has no 65535 limit and is not strided over.
unsigned channel_tiles(int64_t c) { return static_cast<unsigned>((c + 31) / 32); }

void global_averagepool(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const int64_t planes = x.dims()[0] * x.dims()[1];
  if (planes == 0) return;
  const int64_t size = x.numel() / planes;  // 0: each mean is 0/0 = NaN, as the reference's
  const int64_t n = x.dims()[0], c = x.dims()[1];
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (x.layout() == Layout::ChannelsLast)
      global_average_pool_nhwc<T><<<dim3(channel_tiles(c), capped(n)), dim3(32, kLanes), 0, context().stream>>>(
          x.data<T>(), y.data<T>(), n, c, size);
    else
      global_average_pool_kernel<T>
          <<<capped(planes), kThreads, 0, context().stream>>>(x.data<T>(), y.data<T>(), planes, size);
  });
  check_launch(ctx.node, "global_average_pool_kernel");
}

void global_averagepool_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  Tensor& dx = ctx.out(0);
  const int64_t planes = dx.dims()[0] * dx.dims()[1];
  if (planes == 0 || dx.numel() == 0) return;
  const int64_t size = dx.numel() / planes;
  const int64_t n = dx.dims()[0], c = dx.dims()[1];
  dispatch_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (dx.layout() == Layout::ChannelsLast)
      global_average_pool_grad_nhwc<T>
          <<<dim3(channel_tiles(c), capped((size + kLanes - 1) / kLanes), capped(n)), dim3(32, kLanes), 0,
             context().stream>>>(dy.data<T>(), dx.data<T>(), n, c, size);
    else
      global_average_pool_grad_kernel<T>
          <<<capped(planes), kThreads, 0, context().stream>>>(dy.data<T>(), dx.data<T>(), planes, size);
  });
  check_launch(ctx.node, "global_average_pool_grad_kernel");
}

// GlobalMaxPool and its gradient: each plane's maximum by the reference's rule (its first
// maximum; ops/core/pool_index.h plane_max_*). A Plain plane (positions adjacent) is one
// block's: thread t scans positions t, t + kThreads, ..., the partial results merge in
// shared memory (any tree gives the same element); a ChannelsLast plane (positions C
// apart) is one thread's, so neighbouring threads read neighbouring channels. The
// gradient writes dy[p] at the plane's maximum and 0 elsewhere, by the same threads.
template <typename T>
__device__ int64_t block_plane_max(const T* plane, int64_t size, int64_t step) {
  __shared__ T val[kThreads];
  __shared__ int64_t pos[kThreads];
  const pool_index::PlaneMax<T, int64_t> m =
      pool_index::plane_max_scan(plane, size, static_cast<int64_t>(threadIdx.x), int64_t{kThreads}, step);
  __syncthreads();  // the previous plane's readers are done
  val[threadIdx.x] = m.v;
  pos[threadIdx.x] = m.at;
  __syncthreads();
  for (int half = kThreads / 2; half > 0; half /= 2) {
    if (static_cast<int>(threadIdx.x) < half) {
      pool_index::PlaneMax<T, int64_t> a{val[threadIdx.x], pos[threadIdx.x]};
      pool_index::plane_max_merge(a,
                                  pool_index::PlaneMax<T, int64_t>{val[threadIdx.x + half], pos[threadIdx.x + half]});
      val[threadIdx.x] = a.v;
      pos[threadIdx.x] = a.at;
    }
    __syncthreads();
  }
  return pool_index::plane_max_pos(plane, pool_index::PlaneMax<T, int64_t>{val[0], pos[0]});
}

// One block per plane (grid-stride): y[p] = the maximum of x's plane p; dx (grad): dy[p]
// there, 0 elsewhere. x and dx each Plain or ChannelsLast (lx, ldx).
template <typename T>
__global__ void global_max_pool_block(const T* x, T* y, Lay<int64_t> lx, int64_t planes, int64_t size) {
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    const T* plane = x + pool_index::offset_of(lx, p, int64_t{0}, size);
    const int64_t step = pool_index::plane_step(lx);
    const int64_t at = block_plane_max(plane, size, step);
    if (threadIdx.x == 0) y[p] = plane[at * step];
  }
}
template <typename T>
__global__ void global_max_pool_grad_block(const T* dy, const T* x, T* dx, Lay<int64_t> lx, Lay<int64_t> ldx,
                                           int64_t planes, int64_t size) {
  for (int64_t p = blockIdx.x; p < planes; p += gridDim.x) {
    const int64_t at =
        block_plane_max(x + pool_index::offset_of(lx, p, int64_t{0}, size), size, pool_index::plane_step(lx));
    T* plane = dx + pool_index::offset_of(ldx, p, int64_t{0}, size);
    const int64_t step = pool_index::plane_step(ldx);
    for (int64_t i = threadIdx.x; i < size; i += blockDim.x) plane[i * step] = i == at ? dy[p] : T(0);
  }
}

// One thread per plane (ChannelsLast x: thread p reads channel p % C of every position).
template <typename T>
__device__ int64_t thread_plane_max(const T* plane, int64_t size, int64_t step) {
  return pool_index::plane_max_pos(plane, pool_index::plane_max_scan(plane, size, int64_t{0}, int64_t{1}, step));
}
template <typename T>
__global__ void global_max_pool_thread(const T* x, T* y, Lay<int64_t> lx, int64_t planes, int64_t size) {
  POOL_LOOP(int64_t, p, planes) {
    const T* plane = x + pool_index::offset_of(lx, p, int64_t{0}, size);
    const int64_t step = pool_index::plane_step(lx);
    y[p] = plane[thread_plane_max(plane, size, step) * step];
  }
}
template <typename T>
__global__ void global_max_pool_grad_thread(const T* dy, const T* x, T* dx, Lay<int64_t> lx, Lay<int64_t> ldx,
                                            int64_t planes, int64_t size) {
  POOL_LOOP(int64_t, p, planes) {
    const int64_t at =
        thread_plane_max(x + pool_index::offset_of(lx, p, int64_t{0}, size), size, pool_index::plane_step(lx));
    T* plane = dx + pool_index::offset_of(ldx, p, int64_t{0}, size);
    const int64_t step = pool_index::plane_step(ldx);
    for (int64_t i = 0; i < size; ++i) plane[i * step] = i == at ? dy[p] : T(0);
  }
}

void global_maxpool(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const int64_t planes = x.dims()[0] * x.dims()[1];
  if (planes == 0 || x.numel() == 0) return;
  const int64_t size = x.numel() / planes;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Lay<int64_t> lx = lay_of<int64_t>(x);
    if (lx.last)
      global_max_pool_thread<T>
          <<<blocks_for(planes, kThreads), kThreads, 0, context().stream>>>(x.data<T>(), y.data<T>(), lx, planes, size);
    else
      global_max_pool_block<T>
          <<<capped(planes), kThreads, 0, context().stream>>>(x.data<T>(), y.data<T>(), lx, planes, size);
  });
  check_launch(ctx.node, "global_max_pool_kernel");
}

void global_maxpool_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  Tensor& dx = ctx.out(0);
  const int64_t planes = dx.dims()[0] * dx.dims()[1];
  if (planes == 0 || dx.numel() == 0) return;
  const int64_t size = dx.numel() / planes;
  dispatch_float(dx.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const Lay<int64_t> lx = lay_of<int64_t>(x), ldx = lay_of<int64_t>(dx);
    if (lx.last)
      global_max_pool_grad_thread<T><<<blocks_for(planes, kThreads), kThreads, 0, context().stream>>>(
          dy.data<T>(), x.data<T>(), dx.data<T>(), lx, ldx, planes, size);
    else
      global_max_pool_grad_block<T><<<capped(planes), kThreads, 0, context().stream>>>(
          dy.data<T>(), x.data<T>(), dx.data<T>(), lx, ldx, planes, size);
  });
  check_launch(ctx.node, "global_max_pool_grad_kernel");
}

}  // namespace

void register_pool_cuda(Registry& r) {
  using facts::A, facts::P;  // each data argument Plain or ChannelsLast on its own
  add_if_schema(r, "cuda", "", "GlobalAveragePool", global_averagepool, facts::fixed({{A}, {A}}));
  add_if_schema(r, "cuda", kTrainrtDomain, "GlobalAveragePoolGrad", global_averagepool_grad,
                facts::fixed({{A, A}, {A}}));
  add_if_schema(r, "cuda", "", "MaxPool", maxpool, facts::fixed({{A}, {A, P}}));
  add_if_schema(r, "cuda", "", "AveragePool", averagepool, facts::fixed({{A}, {A}}));
  add_if_schema(r, "cuda", kTrainrtDomain, "MaxPoolGrad", maxpool_grad, facts::fixed({{A, A}, {A}}));
  if (r.kernels.find("cuda", kTrainrtDomain, "MaxPoolGrad"))  // every window's argmax
    r.kernels.set_workspace("cuda", kTrainrtDomain, "MaxPoolGrad", [](const KernelContext& c) {
      return c.out(0).numel() == 0 ? size_t{0}
                                   : pool_index::argmax_scratch_bytes(pool_geometry(c.node, c.in(1), c.in(0)));
    });
  add_if_schema(r, "cuda", kTrainrtDomain, "AveragePoolGrad", averagepool_grad, facts::fixed({{A, A}, {A}}));
  add_if_schema(r, "cuda", "", "GlobalMaxPool", global_maxpool, facts::fixed({{A}, {A}}));
  add_if_schema(r, "cuda", kTrainrtDomain, "GlobalMaxPoolGrad", global_maxpool_grad, facts::fixed({{A, A}, {A}}));
}

}  // namespace trainrt::cuda
