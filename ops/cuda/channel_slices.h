// A tensor's values summed per channel on the device, in slices: the layout of the
// work that batch normalization's statistics (ops/norm_cuda.cu) and ConvGrad's 16-bit
// bias gradient (ops/conv_cuda.cu) share. Device code: include from .cu files only; the
// grid itself (how many slices, of how many values) is ops/cuda/channel_grid.h's host
// function of the shape and the device's SM count, tested on the CPU.
//
//   x: N,C,S (S = product of spatial dims); each channel has M = N*S values, the j-th
//   (j over n, then s) at (n*C + c)*S + s, or with ChannelsLast at j*C + c.
//   grid (C, G), or with ChannelsLast (groups of 32 channels, G): block (c, g) takes
//   slice g of channel c, and writes its partial sums to parts[c, g, :] in device memory;
//   channel_total adds a channel's partials in slice order.
//   ChannelsLast: each block gives 32 adjacent channels to the lanes of a warp and 8 rows
//   of threads stride the slice's positions, so a warp reads contiguous values
//   (coalesced); the rows' sums are added in row order (store_rows).
//
// Every sum is in double and in a fixed order: the same bits every run on one device.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>

#include "graph/float16.h"
#include "ops/cuda/channel_grid.h"
#include "ops/cuda/cuda_util.h"

namespace trainrt::cuda::channel_slices {

constexpr int kRows = kThreads / kLanes;  // ChannelsLast statistics blocks: rows of threads

// x seen per channel, sliced for this device (channel_grid with its SM count, cached).
inline Channels channels_of(const Tensor& x) {
  const int64_t N = x.dims()[0], C = x.dims()[1];
  const int64_t S = N * C == 0 ? 0 : x.numel() / (N * C);
  return channel_grid(N, C, S, x.layout() == Layout::ChannelsLast, sm_count());
}

// The statistics passes' grid: (channel, slice), or with ChannelsLast (group of 32
// channels, slice).
inline dim3 slice_grid(const Channels& v) {
  return dim3(static_cast<unsigned>(grid_columns(v)), static_cast<unsigned>(v.slices));
}

// ChannelsLast: this thread's channel, and f(offset) for its positions of slice
// blockIdx.y (rows of threads stride them); nothing for a channel past C.
inline __device__ int64_t last_channel() { return static_cast<int64_t>(blockIdx.x) * kLanes + threadIdx.x % kLanes; }
template <typename F>
__device__ void for_slice_last(const Channels& v, int64_t c, F&& f) {
  if (c >= v.C) return;
  const int64_t first = slice_begin(v, blockIdx.y) + threadIdx.x / kLanes, last = slice_end(v, blockIdx.y);
  for (int64_t j = first; j < last; j += kRows) f(j * v.C + c);
}
// ChannelsLast: out[c, blockIdx.y, k] = the block's rows' acc[k] for this thread's
// channel, added in row order (all threads call it).
template <int K>
__device__ void store_rows(const double (&acc)[K], const Channels& v, int64_t c, double* out) {
  __shared__ double rows[K][kRows][kLanes];
  const int lane = threadIdx.x % kLanes, row = threadIdx.x / kLanes;
  for (int k = 0; k < K; ++k) rows[k][row][lane] = acc[k];
  __syncthreads();
  if (row != 0 || c >= v.C) return;
  for (int k = 0; k < K; ++k) {
    double total = 0;
    for (int r = 0; r < kRows; ++r) total += rows[k][r][lane];
    out[part_index(v, c, blockIdx.y, K, k)] = total;
  }
}

// Calls f(offset) for this thread's share of slice blockIdx.y of channel blockIdx.x.
// (n, s) advance by kThreads values with one compare instead of a division per value.
template <typename F>
__device__ void for_slice(const Channels& v, F&& f) {
  const int64_t c = blockIdx.x, first = slice_begin(v, blockIdx.y) + threadIdx.x, last = slice_end(v, blockIdx.y);
  if (first >= last) return;
  const int64_t dn = kThreads / v.S, ds = kThreads % v.S;
  int64_t n = first / v.S, s = first % v.S;
  for (int64_t j = first; j < last; j += kThreads) {
    f((n * v.C + c) * v.S + s);
    n += dn;
    s += ds;
    if (s >= v.S) {
      s -= v.S;
      ++n;
    }
  }
}

// Channel c's total of partial k: parts[c, 0..slices-1, k] added in slice order.
inline __device__ double channel_total(const double* parts, const Channels& v, int64_t c, int K, int k) {
  double total = 0;
  for (int g = 0; g < v.slices; ++g) total += parts[part_index(v, c, g, K, k)];
  return total;
}

// sums[c, g] = the sum of x over slice g of channel c, in double; grid slice_grid(v),
// kThreads threads. `x` is a pointer, or any accessor whose x[i] converts to double
// (Bits16).
template <typename X>
__global__ void slice_sums(X x, Channels v, double* sums) {
  double acc[1] = {0};
  if (v.last) {
    const int64_t c = last_channel();
    for_slice_last(v, c, [&](int64_t i) { acc[0] += static_cast<double>(x[i]); });
    store_rows(acc, v, c, sums);
    return;
  }
  for_slice(v, [&](int64_t i) { acc[0] += static_cast<double>(x[i]); });
  block_sum(acc);
  if (threadIdx.x == 0) sums[part_index(v, blockIdx.x, blockIdx.y, 1, 0)] = acc[0];
}

// A 16-bit tensor's values (bfloat16 or IEEE half bits) as floats, for slice_sums.
struct Bits16 {
  const uint16_t* p;
  bool bf16;
  __device__ float operator[](int64_t i) const { return bf16 ? bfloat16_to_float(p[i]) : half_to_float(p[i]); }
};

// out[c] = channel c's total of parts[c, 0..slices-1] (K = 1), rounded to T once.
template <typename T>
__global__ void channel_sums_finish(const double* parts, Channels v, T* out) {
  TRAINRT_GRID_STRIDE(c, v.C) { out[c] = static_cast<T>(channel_total(parts, v, c, 1, 0)); }
}

}  // namespace trainrt::cuda::channel_slices
