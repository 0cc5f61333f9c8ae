// Index arithmetic of the ChannelsLast (NHWC) layout (graph/tensor.h) that the cuda
// kernels run per element, written once for host and device so that the host tests
// (tests/ops/test_channels_last.cpp) check the very functions the kernels call.
//
//   int64_t row_major = channels_last::plain_index(i, C, hw);        // Dropout's mask index
//   for (PlainWalk w(first, step, C, hw); w.index < n; w.next(step))
//     use(w.index, w.plain());                                         // the same, no division
//   for (ChannelWalk w(first, step, C); w.index < n; w.next()) use(w.index, w.channel);  // index % C
//   Planes l{C, true};  plane_of(l, o, size, &p, &pos);  o == offset_of(l, p, pos, size)
//   int64_t from = padded_source(i, h, w, hp, wp, top, left, inner);  // -1: a zero
//   y[i] = x[relayout_source(i, C, hw, x_last, y_last)];              // KCRS <-> KRSC
//
// Plain C++ for g++; under nvcc the functions are __host__ __device__.
#pragma once

#include <cstdint>

#include "graph/tensor.h"  // TRAINRT_HOST_DEVICE (graph/float16.h)

namespace trainrt::channels_last {

// The row-major (NCHW) index of storage offset i of a ChannelsLast tensor with C
// channels and hw positions per image (storage_to_plain_index, with divisions).
TRAINRT_HOST_DEVICE inline int64_t plain_index(int64_t i, int64_t C, int64_t hw) {
  const int64_t c = i % C, p = i / C;
  return (p / hw * C + c) * hw + p % hw;
}

// The storage offset in a ChannelsLast tensor of the element at row-major (NCHW) index
// q (plain_index's inverse). A 4-D filter K,C,R,S stored ChannelsLast is KRSC: offset
// ((k*R + r)*S + s)*C + c, with hw = R*S.
TRAINRT_HOST_DEVICE inline int64_t last_index(int64_t q, int64_t C, int64_t hw) {
  const int64_t s = q % hw, nc = q / hw;
  return (nc / C * hw + s) * C + nc % C;
}

// The storage offset in a tensor stored `from_last` (ChannelsLast, else Plain) of the
// element at storage offset i of the same tensor stored `to_last`: a conversion between
// the layouts (Identity's on the cuda backend: KCRS weights to their KRSC copy, a KRSC
// weight gradient back) is y[i] = x[relayout_source(i, ...)].
TRAINRT_HOST_DEVICE inline int64_t relayout_source(int64_t i, int64_t C, int64_t hw, bool from_last, bool to_last) {
  const int64_t q = to_last ? plain_index(i, C, hw) : i;
  return from_last ? last_index(q, C, hw) : q;
}

// Offsets start, start + step, ... with each one's channel c = i % C, carried by one
// compare per step instead of a division (a grid-stride loop's walk).
struct ChannelWalk {
  int64_t index, channel, step, dc, C;
  TRAINRT_HOST_DEVICE ChannelWalk(int64_t start, int64_t stride, int64_t channels)
      : index(start), channel(start % channels), step(stride), dc(stride % channels), C(channels) {}
  TRAINRT_HOST_DEVICE void next() {
    index += step;
    channel += dc;
    if (channel >= C) channel -= C;
  }
};

// Offsets start, start + step, ... of a ChannelsLast tensor (C channels, hw positions
// per image) with each one's row-major (NCHW) index, plain_index(index, C, hw), carried
// from step to step by adds and compares: the divisions are the constructor's, once per
// walk (a grid-stride loop's, as Dropout's mask is drawn).
struct PlainWalk {
  int64_t index, C, hw;
  int64_t c, s, n;     // index = (n * hw + s) * C + c
  int64_t dc, ds, dn;  // step = (dn * hw + ds) * C + dc
  TRAINRT_HOST_DEVICE PlainWalk(int64_t start, int64_t step, int64_t channels, int64_t positions)
      : index(start), C(channels), hw(positions) {
    c = start % C;
    const int64_t p = start / C, dp = step / C;
    s = p % hw, n = p / hw;
    dc = step % C, ds = dp % hw, dn = dp / hw;
  }
  TRAINRT_HOST_DEVICE int64_t plain() const { return (n * C + c) * hw + s; }
  TRAINRT_HOST_DEVICE void next(int64_t step) {
    index += step;
    c += dc;
    s += ds;
    n += dn;
    if (c >= C) c -= C, ++s;  // s + ds + 1 < 2 * hw: one wrap at most
    if (s >= hw) s -= hw, ++n;
  }
};

// How an N,C,spatial tensor seen as planes (p = n*C + c, `size` positions each) is
// stored: Plain (a plane's positions adjacent) or ChannelsLast (its positions C apart).
struct Planes {
  int64_t C = 1;
  bool last = false;
};
// Storage offset of position pos of plane p.
TRAINRT_HOST_DEVICE inline int64_t offset_of(const Planes& l, int64_t p, int64_t pos, int64_t size) {
  return l.last ? ((p / l.C) * size + pos) * l.C + p % l.C : p * size + pos;
}
// The plane and position of storage offset o (offset_of's inverse).
TRAINRT_HOST_DEVICE inline void plane_of(const Planes& l, int64_t o, int64_t size, int64_t* p, int64_t* pos) {
  if (l.last) {
    const int64_t q = o / l.C;
    *pos = q % size;
    *p = q / size * l.C + (o - q * l.C);
  } else {
    *p = o / size;
    *pos = o - *p * size;
  }
}
// How far apart a plane's elements are stored.
TRAINRT_HOST_DEVICE inline int64_t plane_step(const Planes& l) { return l.last ? l.C : 1; }

// Zero padding and cropping of h x w planes into hp x wp ones at (top, left), each
// position holding `inner` values (1: Plain planes per image and channel; C:
// ChannelsLast, planes per image). padded_source: the offset in the unpadded tensor of
// element i of the padded one, or -1 where it is a pad. cropped_source: the offset in the
// padded tensor of element i of the cropped one.
TRAINRT_HOST_DEVICE inline int64_t padded_source(int64_t i, int64_t h, int64_t w, int64_t hp, int64_t wp, int64_t top,
                                                 int64_t left, int64_t inner) {
  const int64_t k = i % inner, q = i / inner;
  const int64_t c = q % wp - left, r = (q / wp) % hp - top, p = q / (wp * hp);
  return r >= 0 && r < h && c >= 0 && c < w ? ((p * h + r) * w + c) * inner + k : -1;
}
TRAINRT_HOST_DEVICE inline int64_t cropped_source(int64_t i, int64_t h, int64_t w, int64_t hp, int64_t wp, int64_t top,
                                                  int64_t left, int64_t inner) {
  const int64_t k = i % inner, q = i / inner;
  const int64_t c = q % w, r = (q / w) % h, p = q / (w * h);
  return ((p * hp + r + top) * wp + c + left) * inner + k;
}

// The same across a change of layout: x's planes stored as `x`, xp's as `xp` (Planes: C
// and whether ChannelsLast). The cuda convolutions' legacy path convolves an x stored in
// another layout than y from such a copy (cuDNN's legacy API wants one layout for x, w
// and y); equal layouts give padded_source's and cropped_source's offsets.
TRAINRT_HOST_DEVICE inline int64_t relaid_padded_source(int64_t i, int64_t h, int64_t w, int64_t hp, int64_t wp,
                                                        int64_t top, int64_t left, const Planes& x, const Planes& xp) {
  int64_t p = 0, pos = 0;
  plane_of(xp, i, hp * wp, &p, &pos);
  const int64_t r = pos / wp - top, c = pos % wp - left;
  return r >= 0 && r < h && c >= 0 && c < w ? offset_of(x, p, r * w + c, h * w) : -1;
}
TRAINRT_HOST_DEVICE inline int64_t relaid_cropped_source(int64_t i, int64_t h, int64_t w, int64_t hp, int64_t wp,
                                                         int64_t top, int64_t left, const Planes& x, const Planes& xp) {
  int64_t p = 0, pos = 0;
  plane_of(x, i, h * w, &p, &pos);
  return offset_of(xp, p, (pos / w + top) * wp + pos % w + left, hp * wp);
}

}  // namespace trainrt::channels_last
