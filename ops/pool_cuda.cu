// MaxPool, AveragePool, GlobalAveragePool and their gradients on the cuda backend: own
// kernels, one thread per output element (forward) or per dX element (backward, a gather,
// so no atomics and the same sums on every run); the global ones one block per N,C plane
// (Plain), or per image and tile of 32 channels (ChannelsLast: a warp reads 32
// neighbouring channels of one position, coalesced).
// Registered by register_all (ops/core/register_all.cpp).
//
//   MaxPool          x: N,C,spatial... -> y: N,C,out... (+ Indices: int64, same shape)
//   AveragePool      x: N,C,spatial... -> y: N,C,out...
//   MaxPoolGrad      (dY, X) -> dX: dY to its window's argmax, recomputed from X
//   AveragePoolGrad  (dY, X) -> dX: dY / divisor to every real element of its window
//   GlobalAveragePool      x: N,C,spatial... -> y: N,C,1,...: each plane's mean, summed in
//                          double over the block (a fixed tree, so the same bits every run)
//   GlobalAveragePoolGrad  (dY, X) -> dX: dY / plane size to every element of the plane
//
// Why not cuDNN's pooling: it pads symmetrically, has no dilations, no ceil_mode, no
// Indices output, and its backward's choice among tied maxima (common after a Relu: a
// window of zeros) is undocumented, while MaxPoolGrad must pick the reference's element
// (the first maximum in window order). These kernels are ops/pool.cpp's loops run per
// element, with the same geometry, argmax rule and AveragePool divisor (ops/core/pool_geometry.h:
// one copy for both) and Indices (storage_order), so no case falls
// back to the host; they sum in the value's own type (the reference sums in double).
// 1-3 spatial dims are seen as D,H,W planes with leading size-1 dims, as in the reference.
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

#include "graph/error.h"
#include "ops/core/common.h"
#include "ops/core/cuda_util.h"
#include "ops/core/kernel_facts.h"
#include "ops/core/pool_geometry.h"

namespace trainrt::cuda {

namespace {

// How a node's N,C,spatial tensor is stored (ops/core/channels_last.h: the index
// arithmetic, tested on the host).
using Lay = channels_last::Planes;
using channels_last::offset_of, channels_last::plane_step;
Lay lay_of(const Tensor& t) { return t.layout() == Layout::ChannelsLast ? Lay{t.dims()[1], true} : Lay{}; }
__device__ int64_t plane_base(int64_t p, int64_t size, Lay l) { return offset_of(l, p, 0, size); }

// The element at storage offset o of planes of `dims` as (plane, od, oh, ow), and its
// position in the plane.
struct At {
  int64_t p, a, b, c, pos;
};
__device__ At split(int64_t o, const int64_t dims[3], Lay l) {
  At r;
  channels_last::plane_of(l, o, dims[0] * dims[1] * dims[2], &r.p, &r.pos);
  int64_t t = r.pos;
  r.c = t % dims[2];
  t /= dims[2];
  r.b = t % dims[1];
  r.a = t / dims[1];
  return r;
}

// x: P,D,H,W -> y: P,Do,Ho,Wo; idx (optional): ONNX's flattened argmax indices.
template <typename T>
__global__ void maxpool_kernel(Pool3 g, Lay lx, Lay ly, const T* x, T* y, int64_t* idx, bool column_major, T lowest) {
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2], count = g.planes * g.out_size();
  const int64_t step = plane_step(lx);
  TRAINRT_GRID_STRIDE(o, count) {
    const At t = split(o, g.out, ly);
    const T* plane = x + plane_base(t.p, g.in_size(), lx);
    const Argmax m = window_argmax(g, plane, t.a, t.b, t.c, step);
    y[o] = m.d < 0 ? lowest : plane[((m.d * H + m.h) * W + m.w) * step];
    if (idx)  // Plain, ONNX's flattened NCHW index
      idx[t.p * g.out_size() + t.pos] =
          t.p * g.in_size() + (column_major ? m.d + m.h * D + m.w * D * H : (m.d * H + m.h) * W + m.w);
  }
}

// x: P,D,H,W -> y: P,Do,Ho,Wo, the mean of each window (AveragePool has no dilations).
template <typename T>
__global__ void averagepool_kernel(Pool3 g, Lay lx, Lay ly, const T* x, T* y, bool include_pad) {
  const int64_t D = g.in[0], H = g.in[1], W = g.in[2], count = g.planes * g.out_size();
  const int64_t step = plane_step(lx);
  TRAINRT_GRID_STRIDE(o, count) {
    const At t = split(o, g.out, ly);
    const T* plane = x + plane_base(t.p, g.in_size(), lx);
    T sum = 0;
    for (int64_t a = 0; a < g.k[0]; ++a) {
      const int64_t id = t.a * g.s[0] - g.pb[0] + a;
      if (id < 0 || id >= D) continue;
      for (int64_t b = 0; b < g.k[1]; ++b) {
        const int64_t ih = t.b * g.s[1] - g.pb[1] + b;
        if (ih < 0 || ih >= H) continue;
        for (int64_t c = 0; c < g.k[2]; ++c) {
          const int64_t iw = t.c * g.s[2] - g.pb[2] + c;
          if (iw >= 0 && iw < W) sum += plane[((id * H + ih) * W + iw) * step];
        }
      }
    }
    y[o] = sum / static_cast<T>(average_divisor(g, t.a, t.b, t.c, include_pad));
  }
}

// arg[o]: position in its plane of window o's argmax (the forward's choice), -1 for
// none; o in dY's storage order.
template <typename T>
__global__ void window_argmax_kernel(Pool3 g, Lay lx, Lay ldy, const T* x, int64_t* arg) {
  const int64_t H = g.in[1], W = g.in[2], count = g.planes * g.out_size();
  TRAINRT_GRID_STRIDE(o, count) {
    const At t = split(o, g.out, ldy);
    const Argmax m = window_argmax(g, x + plane_base(t.p, g.in_size(), lx), t.a, t.b, t.c, plane_step(lx));
    arg[o] = m.d < 0 ? -1 : (m.d * H + m.h) * W + m.w;
  }
}

// Calls f(od, oh, ow) for every window of g that holds input element (id, ih, iw) at
// kernel offsets spaced by `dilated` ? g.d : 1 (AveragePool's windows are never dilated).
template <typename F>
__device__ void for_windows_of(const Pool3& g, int64_t id, int64_t ih, int64_t iw, bool dilated, F&& f) {
  const int64_t dd = dilated ? g.d[0] : 1, dh = dilated ? g.d[1] : 1, dw = dilated ? g.d[2] : 1;
  for (int64_t a = 0; a < g.k[0]; ++a) {
    const int64_t sd = id + g.pb[0] - a * dd;  // = od * stride for the window that puts tap a on id
    if (sd < 0 || sd % g.s[0] != 0 || sd / g.s[0] >= g.out[0]) continue;
    for (int64_t b = 0; b < g.k[1]; ++b) {
      const int64_t sh = ih + g.pb[1] - b * dh;
      if (sh < 0 || sh % g.s[1] != 0 || sh / g.s[1] >= g.out[1]) continue;
      for (int64_t c = 0; c < g.k[2]; ++c) {
        const int64_t sw = iw + g.pb[2] - c * dw;
        if (sw < 0 || sw % g.s[2] != 0 || sw / g.s[2] >= g.out[2]) continue;
        f(sd / g.s[0], sh / g.s[1], sw / g.s[2]);
      }
    }
  }
}

// dx[p, i] = sum of dy over the windows of plane p whose argmax (arg) is element i.
template <typename T>
__global__ void maxpool_grad_kernel(Pool3 g, Lay ldy, Lay ldx, const T* dy, const int64_t* arg, T* dx) {
  const int64_t count = g.planes * g.in_size();
  TRAINRT_GRID_STRIDE(i, count) {
    const At t = split(i, g.in, ldx);
    T acc = 0;
    for_windows_of(g, t.a, t.b, t.c, /*dilated=*/true, [&](int64_t od, int64_t oh, int64_t ow) {
      const int64_t o = offset_of(ldy, t.p, (od * g.out[1] + oh) * g.out[2] + ow, g.out_size());
      if (arg[o] == t.pos) acc += dy[o];
    });
    dx[i] = acc;
  }
}

// dx[p, i] = sum over the windows holding element i of dy / that window's divisor.
template <typename T>
__global__ void averagepool_grad_kernel(Pool3 g, Lay ldy, Lay ldx, const T* dy, T* dx, bool include_pad) {
  const int64_t count = g.planes * g.in_size();
  TRAINRT_GRID_STRIDE(i, count) {
    const At t = split(i, g.in, ldx);
    T acc = 0;
    for_windows_of(g, t.a, t.b, t.c, /*dilated=*/false, [&](int64_t od, int64_t oh, int64_t ow) {
      const int64_t o = offset_of(ldy, t.p, (od * g.out[1] + oh) * g.out[2] + ow, g.out_size());
      acc += dy[o] / static_cast<T>(average_divisor(g, od, oh, ow, include_pad));
    });
    dx[i] = acc;
  }
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
    maxpool_kernel<T><<<blocks_for(y.numel(), kThreads), kThreads, 0, context().stream>>>(
        g, lay_of(x), lay_of(y), x.data<T>(), y.data<T>(), idx, column_major, std::numeric_limits<T>::lowest());
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
    averagepool_kernel<T><<<blocks_for(y.numel(), kThreads), kThreads, 0, context().stream>>>(
        g, lay_of(x), lay_of(y), x.data<T>(), y.data<T>(), include_pad);
  });
  check_launch(ctx.node, "averagepool_kernel");
}

// MaxPoolGrad(dY, X) -> dX: argmax of every window into the workspace, then a gather per dX element.
void maxpool_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  Tensor& dx = ctx.out(0);
  if (dx.numel() == 0) return;
  const Pool3 g = pool_geometry(ctx.node, x, dy);
  const cudaStream_t stream = context().stream;
  auto* arg = static_cast<int64_t*>(workspace(static_cast<size_t>(dy.numel()) * sizeof(int64_t)));
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (dy.numel() > 0)
      window_argmax_kernel<T>
          <<<blocks_for(dy.numel(), kThreads), kThreads, 0, stream>>>(g, lay_of(x), lay_of(dy), x.data<T>(), arg);
    maxpool_grad_kernel<T><<<blocks_for(dx.numel(), kThreads), kThreads, 0, stream>>>(g, lay_of(dy), lay_of(dx),
                                                                                      dy.data<T>(), arg, dx.data<T>());
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
    averagepool_grad_kernel<T><<<blocks_for(dx.numel(), kThreads), kThreads, 0, context().stream>>>(
        g, lay_of(dy), lay_of(dx), dy.data<T>(), dx.data<T>(), include_pad);
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
      return static_cast<size_t>(c.in(0).numel()) * sizeof(int64_t);
    });
  add_if_schema(r, "cuda", kTrainrtDomain, "AveragePoolGrad", averagepool_grad, facts::fixed({{A, A}, {A}}));
}

}  // namespace trainrt::cuda
