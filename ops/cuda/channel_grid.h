// How a per-channel sum over a tensor is split into blocks on the GPU: the host-side
// geometry of ops/cuda/channel_slices.h (batch-norm statistics, ConvGrad's 16-bit bias
// gradient), plain C++ so the CPU tests include it without CUDA.
//
//   const Channels v = channel_grid(N, C, S, last, sm_count);  // the device's SM count
//   grid (grid_columns(v), v.slices); slice g of a channel: [slice_begin(v, g), slice_end(v, g))
//   partial k of channel c, slice g at parts[part_index(v, c, g, K, k)]; parts_bytes(v, K)
//
// x: N,C,S (S = product of spatial dims); each channel has M = N*S values. A column of
// blocks is one channel (Plain) or 32 adjacent channels (ChannelsLast: a warp's lanes);
// each channel is cut into `slices` slices of `chunk` values (the last one shorter), one
// block per (column, slice). Why the rule below: an H100 (132 SMs) reads at full
// bandwidth only with several resident blocks per SM, about a thousand, while a fixed
// number of slices gives the Wide ResNet's layers 8 to 320 blocks. So the slices are
// chosen to give at least kBlocksPerSm blocks per SM, as long as each block still reads
// at least kMinBlockValues values (8 per thread of a 256-thread block: fewer would cost
// more in partial sums and block start-up than they save). A tensor too small for that
// gets M*lanes / kMinBlockValues slices a column. Results depend on the grid (partials are
// added in slice order, in double), so they repeat bit for bit on one device; two GPUs
// with different SM counts may differ in the last bits of the statistics.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>

#include "graph/tensor.h"  // TRAINRT_HOST_DEVICE (graph/float16.h)

namespace trainrt::cuda::channel_slices {

constexpr int kLanes = 32;                 // ChannelsLast: channels per block (a warp's lanes)
constexpr int kBlocksPerSm = 8;            // blocks wanted per SM (256 threads each: 2048 resident threads)
constexpr int64_t kMinBlockValues = 2048;  // a block reads at least this many values (unless M*lanes is less)
constexpr int64_t kMaxSlices = 65535;      // gridDim.y's limit

// A tensor N,C,S seen per channel, split into `slices` slices of `chunk` values; `last`:
// stored ChannelsLast.
struct Channels {
  int64_t C = 0, S = 0, M = 0, chunk = 0;
  int slices = 1;
  bool last = false;
};

// Block columns: one per channel, or per 32 channels with ChannelsLast.
TRAINRT_HOST_DEVICE inline int64_t grid_columns(const Channels& v) {
  return v.last ? (v.C + kLanes - 1) / kLanes : v.C;
}
// Channels one block sums at once (1 Plain; up to 32 ChannelsLast).
inline int64_t lanes_of(const Channels& v) { return v.last ? std::min<int64_t>(v.C, kLanes) : 1; }

// The grid for a tensor N,C,S on a device with `sm_count` SMs (cudaDevAttrMultiProcessorCount).
inline Channels channel_grid(int64_t N, int64_t C, int64_t S, bool last, int sm_count) {
  Channels v;
  v.C = C;
  v.S = S;
  v.M = N * S;
  v.last = last;
  if (v.M <= 0 || C <= 0) {
    v.chunk = v.M > 0 ? v.M : 0;
    return v;
  }
  const int64_t columns = grid_columns(v), lanes = lanes_of(v);
  const int64_t target = static_cast<int64_t>(std::max(sm_count, 1)) * kBlocksPerSm;
  const int64_t wanted = (target + columns - 1) / columns;
  const int64_t most = std::max<int64_t>(1, v.M * lanes / kMinBlockValues);  // slices of >= kMinBlockValues per block
  const int64_t slices = std::clamp<int64_t>(std::min(wanted, most), 1, std::min(v.M, kMaxSlices));
  v.chunk = (v.M + slices - 1) / slices;
  v.slices = static_cast<int>((v.M + v.chunk - 1) / v.chunk);  // no empty slice
  return v;
}

// Slice g of a channel: its values j in [slice_begin, slice_end) (j over n, then s).
TRAINRT_HOST_DEVICE inline int64_t slice_begin(const Channels& v, int64_t g) { return g * v.chunk; }
TRAINRT_HOST_DEVICE inline int64_t slice_end(const Channels& v, int64_t g) {
  const int64_t end = (g + 1) * v.chunk;
  return end < v.M ? end : v.M;
}

// Where partial k (of K) of channel c's slice g is kept: parts[C, slices, K], doubles.
TRAINRT_HOST_DEVICE inline int64_t part_index(const Channels& v, int64_t c, int64_t g, int K, int k) {
  return (c * v.slices + g) * K + k;
}

// Bytes of parts[C, slices, K] (doubles): every part_index fits.
inline size_t parts_bytes(const Channels& v, int K) {
  return static_cast<size_t>(v.C) * static_cast<size_t>(v.slices) * static_cast<size_t>(K) * sizeof(double);
}

}  // namespace trainrt::cuda::channel_slices
