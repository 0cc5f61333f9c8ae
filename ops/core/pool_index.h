// The cuda pooling kernels' per-element work (ops/pool_cuda.cu), written once for host
// and device so that the CPU tests (tests/ops/test_pool_index.cpp) run the very
// functions the kernels call, element by element, against the reference's pooling.
//
//   const Pool3 g = pool_geometry(node, x, y);               // host, ops/core/pool_geometry.h
//   if (fits_int32(g)) { PoolDims<int32_t> gi = index_dims<int32_t>(g); ... }  // else int64_t
//   y[o] = averagepool_at(gi, lx, ly, x, o, include_pad);    // per output storage offset o
//   arg[o] = argmax_tap_at<uint8_t>(gi, lx, ldy, x, o);      // MaxPoolGrad's scratch
//   dx[i] = maxpool_grad_at<tiled>(gi, ldy, ldx, dy, arg, i);
//   PlaneMax<T, I> m = plane_max_scan(plane, size, t, threads, step);  // GlobalMaxPool: thread t
//   plane_max_merge(m, other); at = plane_max_pos(plane, m);           // the reference's position
//
// Why: one thread per element, so what costs is the index math per element. In int32_t
// (every tensor here has fewer than about 2^31 elements: fits_int32) a division is a few
// instructions where int64_t's is a library call of dozens. A gradient element finds the
// windows that hold it; in general with a modulo and a division per kernel tap, but where
// windows tile the input (kernel == stride, no pads, no dilation: `tiled`, the Wide
// ResNet's MaxPool 2 and AveragePool 7) each element lies in at most one window, found by
// one division per dim. MaxPoolGrad keeps each window's argmax as its tap (place in the
// window: argmax_bytes, 1 byte where the window has <= 256 taps) instead of a 64-bit
// position.
//
// Layouts: a tensor N,C,spatial seen as planes p = n*C + c of `size` positions, stored
// Plain (a plane's positions adjacent) or ChannelsLast (its positions C apart): Lay.
//
// Plain C++ for g++; under nvcc the functions are __host__ __device__.
#pragma once

#include <cstddef>
#include <cstdint>
#include <limits>

#include "ops/core/pool_geometry.h"

namespace trainrt::pool_index {

// Windows tile the input: kernel == stride, no pads, no dilation in every dim (ceil_mode's
// last, partial window included).
inline bool is_tiled(const Pool3& g) {
  for (int i = 0; i < 3; ++i)
    if (g.k[i] != g.s[i] || g.pb[i] != 0 || g.pe[i] != 0 || g.d[i] != 1) return false;
  return true;
}

// Whether int32_t holds every index the kernels compute for g: X and Y (dY and dX) have
// planes * in_size and planes * out_size elements, and a grid-stride loop steps up to
// 65535 blocks of 1024 threads past the last one.
inline bool fits_int32(const Pool3& g) {
  constexpr int64_t kRoom = 65535LL * 1024;
  const int64_t most = g.planes * (g.in_size() > g.out_size() ? g.in_size() : g.out_size());
  return most <= std::numeric_limits<int32_t>::max() - kRoom;
}

// g in index type I (when I is int32_t, only where fits_int32(g)).
template <typename I>
PoolDims<I> index_dims(const Pool3& g) {
  PoolDims<I> r;
  r.planes = static_cast<I>(g.planes);
  for (int i = 0; i < 3; ++i) {
    r.in[i] = static_cast<I>(g.in[i]);
    r.out[i] = static_cast<I>(g.out[i]);
    r.k[i] = static_cast<I>(g.k[i]);
    r.s[i] = static_cast<I>(g.s[i]);
    r.d[i] = static_cast<I>(g.d[i]);
    r.pb[i] = static_cast<I>(g.pb[i]);
    r.pe[i] = static_cast<I>(g.pe[i]);
  }
  return r;
}

// Bytes of one window's argmax tap in MaxPoolGrad's scratch: uint8_t where the window
// has <= 256 taps, else int32_t; argmax_scratch_bytes: the scratch for every window (the
// kernel's workspace and its plan-time rule).
inline size_t argmax_bytes(const Pool3& g) { return g.k[0] * g.k[1] * g.k[2] <= 256 ? 1 : 4; }
inline size_t argmax_scratch_bytes(const Pool3& g) {
  return static_cast<size_t>(g.planes * g.out_size()) * argmax_bytes(g);
}

// How a tensor's planes are stored: Plain, or ChannelsLast with C channels.
template <typename I>
struct Lay {
  I C = 1;
  bool last = false;
};
// Storage offset of position pos of plane p.
template <typename I>
TRAINRT_HOST_DEVICE I offset_of(const Lay<I>& l, I p, I pos, I size) {
  return l.last ? ((p / l.C) * size + pos) * l.C + p % l.C : p * size + pos;
}
template <typename I>
TRAINRT_HOST_DEVICE I plane_step(const Lay<I>& l) {
  return l.last ? l.C : 1;
}

// The element at storage offset o of planes of dims D,H,W: plane p, (a, b, c) in the
// plane, and its position pos = (a*H + b)*W + c.
template <typename I>
struct At {
  I p, a, b, c, pos;
};
template <typename I>
TRAINRT_HOST_DEVICE At<I> split(I o, const I (&dims)[3], const Lay<I>& l) {
  const I size = dims[0] * dims[1] * dims[2];
  At<I> r;
  if (l.last) {
    const I q = o / l.C;
    r.pos = q % size;
    r.p = q / size * l.C + (o - q * l.C);
  } else {
    r.p = o / size;
    r.pos = o - r.p * size;
  }
  I t = r.pos;
  r.c = t % dims[2];
  t /= dims[2];
  r.b = t % dims[1];
  r.a = t / dims[1];
  return r;
}

// MaxPool at output offset o (in y's storage order): y[o] and, with idx, ONNX's
// flattened index of the maximum (Plain, NCHW: row-major, or column-major spatial dims).
template <typename T, typename I>
TRAINRT_HOST_DEVICE void maxpool_at(const PoolDims<I>& g, const Lay<I>& lx, const Lay<I>& ly, const T* x, I o, T lowest,
                                    bool column_major, T* y, int64_t* idx) {
  const I D = g.in[0], H = g.in[1], W = g.in[2], step = plane_step(lx);
  const At<I> t = split(o, g.out, ly);
  const T* plane = x + offset_of(lx, t.p, I(0), g.in_size());
  const ArgmaxOf<I> m = window_argmax(g, plane, t.a, t.b, t.c, step);
  y[o] = m.d < 0 ? lowest : plane[((m.d * H + m.h) * W + m.w) * step];
  if (idx)
    idx[t.p * g.out_size() + t.pos] = static_cast<int64_t>(t.p * g.in_size()) +
                                      (column_major ? m.d + m.h * D + m.w * D * H : (m.d * H + m.h) * W + m.w);
}

// AveragePool at output offset o: the window's sum in T (taps in window order) over its
// divisor. The window's taps on real elements are one range of taps per dim
// (taps_within), their positions dilations apart.
template <typename T, typename I>
TRAINRT_HOST_DEVICE T averagepool_at(const PoolDims<I>& g, const Lay<I>& lx, const Lay<I>& ly, const T* x, I o,
                                     bool include_pad) {
  const I H = g.in[1], W = g.in[2], step = plane_step(lx);
  const At<I> t = split(o, g.out, ly);
  const T* plane = x + offset_of(lx, t.p, I(0), g.in_size());
  const I o3[3] = {t.a, t.b, t.c};
  I start[3];
  TapRange<I> r[3];
  for (int i = 0; i < 3; ++i) {
    start[i] = o3[i] * g.s[i] - g.pb[i];
    r[i] = taps_within(start[i], g.k[i], g.d[i], I(0), g.in[i]);
  }
  T sum = 0;
  for (I a = r[0].first; a < r[0].last; ++a) {
    const I id = start[0] + a * g.d[0];
    for (I b = r[1].first; b < r[1].last; ++b) {
      const I ih = start[1] + b * g.d[1];
      for (I c = r[2].first; c < r[2].last; ++c) sum += plane[((id * H + ih) * W + start[2] + c * g.d[2]) * step];
    }
  }
  return sum / static_cast<T>(average_divisor(g, t.a, t.b, t.c, include_pad));
}

// MaxPoolGrad's scratch at dY offset o: the tap of window o's argmax (window_argmax, the
// forward's choice) as A (uint8_t or int32_t: argmax_bytes). A window with no input
// element gets 0, never read: the gradient reads a window's tap only for the elements
// the window holds.
template <typename A, typename T, typename I>
TRAINRT_HOST_DEVICE A argmax_tap_at(const PoolDims<I>& g, const Lay<I>& lx, const Lay<I>& ldy, const T* x, I o) {
  const At<I> t = split(o, g.out, ldy);
  const ArgmaxOf<I> m = window_argmax(g, x + offset_of(lx, t.p, I(0), g.in_size()), t.a, t.b, t.c, plane_step(lx));
  return static_cast<A>(m.d < 0 ? 0 : m.tap);
}

// Calls f(od, oh, ow, tap) for every window of g that holds input element (id, ih, iw),
// in tap order, kernel offsets g.d apart. kTiled (is_tiled(g)): the one window, if any,
// by a division per dim.
template <bool kTiled, typename I, typename F>
TRAINRT_HOST_DEVICE void for_windows_of(const PoolDims<I>& g, I id, I ih, I iw, F&& f) {
  if constexpr (kTiled) {
    const I od = id / g.k[0], oh = ih / g.k[1], ow = iw / g.k[2];
    if (od >= g.out[0] || oh >= g.out[1] || ow >= g.out[2]) return;  // past the last window (floor mode)
    f(od, oh, ow, ((id - od * g.k[0]) * g.k[1] + ih - oh * g.k[1]) * g.k[2] + iw - ow * g.k[2]);
  } else {
    const I dd = g.d[0], dh = g.d[1], dw = g.d[2];
    for (I a = 0; a < g.k[0]; ++a) {
      const I sd = id + g.pb[0] - a * dd;  // = od * stride for the window that puts tap a on id
      if (sd < 0 || sd % g.s[0] != 0 || sd / g.s[0] >= g.out[0]) continue;
      for (I b = 0; b < g.k[1]; ++b) {
        const I sh = ih + g.pb[1] - b * dh;
        if (sh < 0 || sh % g.s[1] != 0 || sh / g.s[1] >= g.out[1]) continue;
        for (I c = 0; c < g.k[2]; ++c) {
          const I sw = iw + g.pb[2] - c * dw;
          if (sw < 0 || sw % g.s[2] != 0 || sw / g.s[2] >= g.out[2]) continue;
          f(sd / g.s[0], sh / g.s[1], sw / g.s[2], (a * g.k[1] + b) * g.k[2] + c);
        }
      }
    }
  }
}

// MaxPoolGrad at dX offset i: the sum of dY over the windows whose argmax tap (arg, from
// argmax_tap_at) is element i.
template <bool kTiled, typename A, typename T, typename I>
TRAINRT_HOST_DEVICE T maxpool_grad_at(const PoolDims<I>& g, const Lay<I>& ldy, const Lay<I>& ldx, const T* dy,
                                      const A* arg, I i) {
  const At<I> t = split(i, g.in, ldx);
  T acc = 0;
  for_windows_of<kTiled>(g, t.a, t.b, t.c, [&](I od, I oh, I ow, I tap) {
    const I o = offset_of(ldy, t.p, (od * g.out[1] + oh) * g.out[2] + ow, g.out_size());
    if (static_cast<I>(arg[o]) == tap) acc += dy[o];
  });
  return acc;
}

// AveragePoolGrad at dX offset i: the sum over the windows holding element i of dY / that
// window's divisor.
template <bool kTiled, typename T, typename I>
TRAINRT_HOST_DEVICE T averagepool_grad_at(const PoolDims<I>& g, const Lay<I>& ldy, const Lay<I>& ldx, const T* dy, I i,
                                          bool include_pad) {
  const At<I> t = split(i, g.in, ldx);
  T acc = 0;
  for_windows_of<kTiled>(g, t.a, t.b, t.c, [&](I od, I oh, I ow, I) {
    const I o = offset_of(ldy, t.p, (od * g.out[1] + oh) * g.out[2] + ow, g.out_size());
    acc += dy[o] / static_cast<T>(average_divisor(g, od, oh, ow, include_pad));
  });
  return acc;
}

// GlobalMaxPool and its gradient (ops/pool_cuda.cu): a plane's maximum and its position by
// the reference's rule (ops/pool.cpp plane_argmax: the first maximum; a NaN never compares
// greater, so a plane whose first element is NaN keeps position 0 and any later NaN is
// passed over), found by several threads. Each scans positions first, first + stride, ...
// (plane_max_scan); partial results merge in any order and grouping (plane_max_merge: the
// larger value, the lower position between equal ones: one total order, so every
// reduction tree picks the same element); plane_max_pos then applies the NaN-first rule.
template <typename T, typename I>
struct PlaneMax {
  T v;
  I at;  // < 0: no non-NaN element seen
};
template <typename T, typename I>
TRAINRT_HOST_DEVICE PlaneMax<T, I> plane_max_none() {
  return PlaneMax<T, I>{T(0), I(-1)};
}
template <typename T, typename I>
TRAINRT_HOST_DEVICE void plane_max_take(PlaneMax<T, I>& m, T v, I at) {
  if (!(v == v)) return;  // NaN
  if (m.at < 0 || v > m.v || (v == m.v && at < m.at)) m = PlaneMax<T, I>{v, at};
}
template <typename T, typename I>
TRAINRT_HOST_DEVICE void plane_max_merge(PlaneMax<T, I>& m, const PlaneMax<T, I>& other) {
  if (other.at >= 0) plane_max_take(m, other.v, other.at);
}
// Positions first, first + stride, ... below size of a plane whose elements are `step` apart.
template <typename T, typename I>
TRAINRT_HOST_DEVICE PlaneMax<T, I> plane_max_scan(const T* plane, I size, I first, I stride, I step) {
  PlaneMax<T, I> m = plane_max_none<T, I>();
  for (I i = first; i < size; i += stride) plane_max_take(m, plane[i * step], i);
  return m;
}
// The reference's position from the merged result of every position of a non-empty plane.
template <typename T, typename I>
TRAINRT_HOST_DEVICE I plane_max_pos(const T* plane, const PlaneMax<T, I>& m) {
  return !(plane[0] == plane[0]) || m.at < 0 ? I(0) : m.at;
}

}  // namespace trainrt::pool_index
