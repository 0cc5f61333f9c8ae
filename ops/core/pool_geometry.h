// The geometry of one pooling call, shared by the reference kernels (ops/pool.cpp) and
// the cuda kernels (ops/pool_cuda.cu), so both pick the same argmax and divide by the
// same count:
//
//   const Pool3 g = pool_geometry(node, x, y);          // host: window resolved as the shape rule does
//   Argmax m = window_argmax(g, plane, od, oh, ow);     // host or device
//   Argmax m = window_argmax(g, plane, od, oh, ow, 16); // a plane whose elements are 16 apart (Blocked16c)
//   int64_t n = average_divisor(g, od, oh, ow, count_include_pad);
//
// The functions are templates on the index type I (Pool3 is PoolDims<int64_t>): the cuda
// kernels run them in int32_t where the tensors' sizes allow (ops/core/pool_index.h).
// Plain C++ for g++; under nvcc the per-element functions are __host__ __device__.
#pragma once

#include <cstdint>

#include "graph/tensor.h"  // TRAINRT_HOST_DEVICE (graph/float16.h)

namespace trainrt {

struct Node;

// One pooling call as `planes` (N*C) planes of D,H,W; dims a pool lacks are size 1
// (a 2-D pool uses H,W).
template <typename I>
struct PoolDims {
  I planes = 1;
  I in[3] = {1, 1, 1}, out[3] = {1, 1, 1};
  I k[3] = {1, 1, 1}, s[3] = {1, 1, 1}, d[3] = {1, 1, 1}, pb[3] = {0, 0, 0}, pe[3] = {0, 0, 0};
  TRAINRT_HOST_DEVICE I in_size() const { return in[0] * in[1] * in[2]; }
  TRAINRT_HOST_DEVICE I out_size() const { return out[0] * out[1] * out[2]; }
};
using Pool3 = PoolDims<int64_t>;

// I taken from the geometry only (a call's int arguments convert to it).
template <typename I>
struct PoolIndex {
  using type = I;
};
template <typename I>
using PoolIndexOf = typename PoolIndex<I>::type;

// x: N,C,spatial... pooled into y: N,C,out... by pooling node n (ops/pool.cpp).
Pool3 pool_geometry(const Node& n, const Tensor& x, const Tensor& y);

// Position (d,h,w) of the maximum of window (od,oh,ow) in one D,H,W plane, and its tap
// (a*k1 + b)*k2 + c (its place in the window); ties go to the first maximum in window
// order (a, then b, then c). d < 0 when the window holds no input element. MaxPool and
// MaxPoolGrad both use it, so they pick the same element. `step`: the distance between a
// plane's consecutive elements (1 row-major; 16 for one channel of a Blocked16c tensor,
// C for ChannelsLast, runtime/layout.h).
template <typename I>
struct ArgmaxOf {
  I d = -1, h = -1, w = -1, tap = -1;
};
using Argmax = ArgmaxOf<int64_t>;

template <typename T, typename I>
TRAINRT_HOST_DEVICE ArgmaxOf<I> window_argmax(const PoolDims<I>& g, const T* plane, PoolIndexOf<I> od,
                                              PoolIndexOf<I> oh, PoolIndexOf<I> ow, PoolIndexOf<I> step = 1) {
  const I D = g.in[0], H = g.in[1], W = g.in[2];
  T best{};  // read only once a first element was taken
  ArgmaxOf<I> at;
  for (I a = 0; a < g.k[0]; ++a) {
    const I id = od * g.s[0] - g.pb[0] + a * g.d[0];
    if (id < 0 || id >= D) continue;
    for (I b = 0; b < g.k[1]; ++b) {
      const I ih = oh * g.s[1] - g.pb[1] + b * g.d[1];
      if (ih < 0 || ih >= H) continue;
      for (I c = 0; c < g.k[2]; ++c) {
        const I iw = ow * g.s[2] - g.pb[2] + c * g.d[2];
        if (iw < 0 || iw >= W) continue;
        const T v = plane[((id * H + ih) * W + iw) * step];
        if (at.d < 0 || v > best) best = v, at = ArgmaxOf<I>{id, ih, iw, (a * g.k[1] + b) * g.k[2] + c};
      }
    }
  }
  return at;
}

// The taps j in [first, last) of one dim of a window starting at `start` with k taps
// `d` apart whose positions start + j*d lie in [lo, hi); last == first when none does.
template <typename I>
struct TapRange {
  I first, last;
};
template <typename I>
TRAINRT_HOST_DEVICE TapRange<I> taps_within(I start, I k, I d, I lo, I hi) {
  const I first = start >= lo ? I(0) : (lo - start + d - 1) / d;
  I last = start >= hi ? I(0) : (hi - start + d - 1) / d;
  if (last > k) last = k;
  return TapRange<I>{first, last > first ? last : first};
}

// Number AveragePool divides window (od,oh,ow) by: its taps (dilations apart, opset 19)
// on real input elements (count_include_pad 0), or inside input + pads
// (count_include_pad 1: taps of a ceil_mode window past the end pad are not counted,
// as ONNX Runtime and PyTorch count). 0 for a dilated window whose taps all miss the
// input (count_include_pad 0): its mean is 0/0, NaN.
template <typename I>
TRAINRT_HOST_DEVICE I average_divisor(const PoolDims<I>& g, PoolIndexOf<I> od, PoolIndexOf<I> oh, PoolIndexOf<I> ow,
                                      bool count_include_pad) {
  const I o[3] = {od, oh, ow};
  I count = 1;
  for (int i = 0; i < 3; ++i) {
    const I start = o[i] * g.s[i] - g.pb[i];
    const TapRange<I> r = count_include_pad ? taps_within(start, g.k[i], g.d[i], -g.pb[i], g.in[i] + g.pe[i])
                                            : taps_within(start, g.k[i], g.d[i], I(0), g.in[i]);
    count *= r.last - r.first;
  }
  return count;
}

}  // namespace trainrt
