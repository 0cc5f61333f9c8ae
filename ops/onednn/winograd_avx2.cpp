// The transforms of Winograd F(4x4, 3x3) (ops/onednn/winograd.h), compiled with -mavx2
// -mfma (CMakeLists.txt): only winograd::supported() callers reach them.
//
// The 1-D transforms below are the standard F(4x4,3x3) matrices (interpolation points
// 0, 1, -1, 2, -2 and infinity), written as templates over the element type, run on
// __m256 (8 tiles or 8 filters at once, GCC's vector arithmetic). A 2-D transform
// X -> T X T^T applies the 1-D one down the columns, then along the rows.
// Tiles are vectorised 8 at a time: each row of a tile's 6x6 input is one masked load
// (zeros outside the image), 8 tiles' rows are transposed so that lane t of 36 vectors
// holds tile t, transformed, and stored as 8 adjacent columns of the 36 matrices the
// batched matmul reads; output tiles go back the same way (transposed, masked stores).
// Filters are vectorised over 8 adjacent columns of U (8 filters), so that every
// transformed value is stored, or read for the weight gradient, 8 adjacent at a time.
// The arithmetic per element is the same whatever the lane: results do not depend on
// the vectorisation.
#include <immintrin.h>

#include <algorithm>
#include <cstddef>

#include "ops/onednn/winograd.h"

namespace trainrt::winograd::avx2 {
namespace {

using V8 = __m256;

// B^T: 6 -> 6 (input tiles).
template <typename T>
void bt(const T* d, ptrdiff_t s, T* o, ptrdiff_t os) {
  const T d0 = d[0], d1 = d[s], d2 = d[2 * s], d3 = d[3 * s], d4 = d[4 * s], d5 = d[5 * s];
  o[0] = 4.f * d0 - 5.f * d2 + d4;
  o[os] = -4.f * (d1 + d2) + d3 + d4;
  o[2 * os] = 4.f * (d1 - d2) - d3 + d4;
  o[3 * os] = 2.f * (d3 - d1) + d4 - d2;
  o[4 * os] = 2.f * (d1 - d3) + d4 - d2;
  o[5 * os] = 4.f * d1 - 5.f * d3 + d5;
}

// G: 3 -> 6 (filters).
template <typename T>
void g6(const T* g, ptrdiff_t s, T* o, ptrdiff_t os) {
  const T g0 = g[0], g1 = g[s], g2 = g[2 * s];
  o[0] = g0 * (1.f / 4);
  o[os] = (g0 + g1 + g2) * (-1.f / 6);
  o[2 * os] = (g0 - g1 + g2) * (-1.f / 6);
  o[3 * os] = g0 * (1.f / 24) + g1 * (1.f / 12) + g2 * (1.f / 6);
  o[4 * os] = g0 * (1.f / 24) - g1 * (1.f / 12) + g2 * (1.f / 6);
  o[5 * os] = g2;
}

// A^T: 6 -> 4 (products to output tiles).
template <typename T>
void at(const T* m, ptrdiff_t s, T* o, ptrdiff_t os) {
  const T m0 = m[0], m1 = m[s], m2 = m[2 * s], m3 = m[3 * s], m4 = m[4 * s], m5 = m[5 * s];
  const T p12 = m1 + m2, m12 = m1 - m2, p34 = m3 + m4, m34 = m3 - m4;
  o[0] = m0 + p12 + p34;
  o[os] = m12 + 2.f * m34;
  o[2 * os] = p12 + 4.f * p34;
  o[3 * os] = m12 + 8.f * m34 + m5;
}

// A: 4 -> 6 (output-gradient tiles, the weight gradient's A dY A^T).
template <typename T>
void a6(const T* y, ptrdiff_t s, T* o, ptrdiff_t os) {
  const T y0 = y[0], y1 = y[s], y2 = y[2 * s], y3 = y[3 * s];
  const T e = y0 + y2, f = y1 + y3, e4 = y0 + 4.f * y2, f8 = 2.f * y1 + 8.f * y3;
  o[0] = y0;
  o[os] = e + f;
  o[2 * os] = e - f;
  o[3 * os] = e4 + f8;
  o[4 * os] = e4 - f8;
  o[5 * os] = y3;
}

// G^T: 6 -> 3 (weight gradients back to 3x3).
template <typename T>
void gt(const T* u, ptrdiff_t s, T* o, ptrdiff_t os) {
  const T u0 = u[0], u1 = u[s], u2 = u[2 * s], u3 = u[3 * s], u4 = u[4 * s], u5 = u[5 * s];
  o[0] = u0 * (1.f / 4) - (u1 + u2) * (1.f / 6) + (u3 + u4) * (1.f / 24);
  o[os] = (u2 - u1) * (1.f / 6) + (u3 - u4) * (1.f / 12);
  o[2 * os] = (u3 + u4 - u1 - u2) * (1.f / 6) + u5;
}

// out (O x O, row-major) = T in T^T for in (I x I, row-major), T the 1-D transform f.
template <int I, int O, typename T, typename F>
void two_d(F f, const T* in, T* out) {
  T mid[O * I];  // T applied down each column of `in`
  for (int j = 0; j < I; ++j) f(in + j, I, mid + j, I);
  for (int r = 0; r < O; ++r) f(mid + r * I, 1, out + r * O, 1);
}

// Where the 8 tiles p0 + q .. p0 + q + 7 start: image n, output row and column of their
// top-left pixel; lanes at or past `count` are off.
struct Lanes {
  int64_t n[8], row[8], col[8];
  bool on[8];
  Lanes(const Geometry& g, int64_t p0, int64_t q, int64_t count) {
    const int64_t th = g.tiles_h(), tw = g.tiles_w();
    for (int t = 0; t < 8; ++t) {
      on[t] = q + t < count;
      const int64_t p = p0 + std::min(q + t, count - 1), r = p % (th * tw);
      n[t] = p / (th * tw), row[t] = r / tw * 4, col[t] = r % tw * 4;
    }
  }
};

// The first n (1..8) floats at p as a vector (zeros after them), and the reverse.
inline V8 load_n(const float* p, int64_t n) {
  if (n == 8) return _mm256_loadu_ps(p);
  alignas(32) float buf[8] = {};
  std::copy_n(p, n, buf);
  return _mm256_load_ps(buf);
}
inline void store_n(float* p, V8 v, int64_t n) {
  if (n == 8) return _mm256_storeu_ps(p, v);
  alignas(32) float buf[8];
  _mm256_store_ps(buf, v);
  std::copy_n(buf, n, p);
}

// In place: r[j] becomes column j of the 8 x 8 matrix whose rows were r[0..7].
inline void transpose8(V8* r) {
  const V8 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
  const V8 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
  const V8 t4 = _mm256_unpacklo_ps(r[4], r[5]), t5 = _mm256_unpackhi_ps(r[4], r[5]);
  const V8 t6 = _mm256_unpacklo_ps(r[6], r[7]), t7 = _mm256_unpackhi_ps(r[6], r[7]);
  const V8 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xEE);
  const V8 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xEE);
  const V8 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xEE);
  const V8 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xEE);
  r[0] = _mm256_permute2f128_ps(s0, s4, 0x20), r[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
  r[2] = _mm256_permute2f128_ps(s2, s6, 0x20), r[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
  r[4] = _mm256_permute2f128_ps(s0, s4, 0x31), r[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
  r[6] = _mm256_permute2f128_ps(s2, s6, 0x31), r[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

// The h x h patches (h <= 8) of 8 lanes, each at (row + dr, col + dc) of its image's
// planes (rows x cols, `channels` planes per image): per lane, the patch's top-left
// offset in channel 0's plane of image n (the offset may point outside the plane: only
// the columns of `mask` inside it are read), its first row, and the mask of its columns
// inside the plane. Computed once per 8 tiles, read for every channel.
template <int h>
struct Patches {
  int64_t at[8], row[8];
  bool on[8];
  __m256i mask[8];
  Patches(const Lanes& l, int64_t channels, int64_t rows, int64_t cols, int64_t dr, int64_t dc) {
    for (int t = 0; t < 8; ++t) {
      on[t] = l.on[t];
      row[t] = l.row[t] + dr;
      const int64_t c0 = l.col[t] + dc;
      at[t] = l.n[t] * channels * rows * cols + row[t] * cols + c0;
      alignas(32) int32_t m[8];
      for (int j = 0; j < 8; ++j) m[j] = j < h && c0 + j >= 0 && c0 + j < cols ? -1 : 0;
      mask[t] = _mm256_load_si256(reinterpret_cast<const __m256i*>(m));
    }
  }
};

// The patches of `p` in the planes at x (channel c of image 0: x + c * rows * cols), zeros
// outside them and in off lanes, as h*h vectors (element i*h + j: row i, column j; lane t:
// tile t). Each patch row is one masked load; 8 lanes' rows are transposed into columns.
template <int h>
void gather(const Patches<h>& p, const float* x, int64_t rows, int64_t cols, V8* out) {
  for (int i = 0; i < h; ++i) {
    V8 r[8];
    for (int t = 0; t < 8; ++t) {
      const int64_t row = p.row[t] + i;
      r[t] = p.on[t] && row >= 0 && row < rows ? _mm256_maskload_ps(x + p.at[t] + i * cols, p.mask[t])
                                               : _mm256_setzero_ps();
    }
    transpose8(r);
    for (int j = 0; j < h; ++j) out[i * h + j] = r[j];
  }
}

}  // namespace

void weights(const float* w, int64_t K, int64_t C, bool rotate, int64_t r0, int64_t r1, float* u) {
  // U[a] is K x C, or C x K for the rotated (data-gradient) filters. 8 filters at a time,
  // the columns col0 .. col0 + 7 of one row: their 9 taps gathered into 9 vectors, so that
  // each of the 36 results is one store of 8 adjacent floats.
  const int64_t rows = rotate ? C : K, cols = rotate ? K : C;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t col0 = 0; col0 < cols; col0 += 8) {
      const int64_t n = std::min<int64_t>(8, cols - col0);
      alignas(32) float buf[9][8] = {};
      for (int64_t t = 0; t < n; ++t) {
        const float* src = rotate ? w + ((col0 + t) * C + r) * 9 : w + (r * C + col0 + t) * 9;
        for (int e = 0; e < 9; ++e) buf[e][t] = rotate ? src[8 - e] : src[e];
      }
      V8 g[9], o[36];
      for (int e = 0; e < 9; ++e) g[e] = _mm256_load_ps(buf[e]);
      two_d<3, 6>([](auto... a) { g6<V8>(a...); }, g, o);
      for (int a = 0; a < 36; ++a) store_n(u + (a * rows + r) * cols + col0, o[a], n);
    }
}

void input(const Geometry& g, const float* x, int64_t c0, int64_t c1, int64_t p0, int64_t count, float* v, int64_t ld) {
  const int64_t hw = g.H * g.W;
  for (int64_t q = 0; q < count; q += 8) {
    const Patches<6> patches(Lanes(g, p0, q, count), g.C, g.H, g.W, -g.pad_top, -g.pad_left);
    for (int64_t c = c0; c < c1; ++c) {
      V8 d[36], o[36];
      gather(patches, x + c * hw, g.H, g.W, d);
      two_d<6, 6>([](auto... a) { bt<V8>(a...); }, d, o);
      for (int a = 0; a < 36; ++a) _mm256_storeu_ps(v + (a * g.C + c) * ld + q, o[a]);
    }
  }
}

void output(const Geometry& g, const float* m, int64_t ld, int64_t k0, int64_t k1, int64_t p0, int64_t count,
            const Epilogue& e, float* y) {
  const int64_t hw = g.Ho * g.Wo;
  for (int64_t q = 0; q < count; q += 8) {
    const Patches<4> p(Lanes(g, p0, q, count), g.K, g.Ho, g.Wo, 0, 0);
    for (int64_t k = k0; k < k1; ++k) {
      V8 in[36], o[16];
      for (int a = 0; a < 36; ++a) in[a] = _mm256_loadu_ps(m + (a * g.K + k) * ld + q);
      two_d<6, 4>([](auto... a) { at<V8>(a...); }, in, o);
      const V8 bias = _mm256_set1_ps(e.bias ? e.bias[k] : 0.f);
      for (int i = 0; i < 4; ++i) {
        V8 r[4];
        for (int j = 0; j < 4; ++j) {
          r[j] = o[i * 4 + j] + bias;
          if (e.relu) r[j] = _mm256_max_ps(r[j], _mm256_setzero_ps());
        }
        // Row i of the 8 tiles: lane t's 4 values in half t / 4 of rows[t % 4].
        const V8 t0 = _mm256_unpacklo_ps(r[0], r[1]), t1 = _mm256_unpackhi_ps(r[0], r[1]);
        const V8 t2 = _mm256_unpacklo_ps(r[2], r[3]), t3 = _mm256_unpackhi_ps(r[2], r[3]);
        const V8 rows[4] = {_mm256_shuffle_ps(t0, t2, 0x44), _mm256_shuffle_ps(t0, t2, 0xEE),
                            _mm256_shuffle_ps(t1, t3, 0x44), _mm256_shuffle_ps(t1, t3, 0xEE)};
        for (int t = 0; t < 8 && p.on[t]; ++t) {
          if (p.row[t] + i >= g.Ho) continue;
          __m128 v = t < 4 ? _mm256_castps256_ps128(rows[t]) : _mm256_extractf128_ps(rows[t - 4], 1);
          const int64_t at_ = p.at[t] + k * hw + i * g.Wo;
          const __m128i mask = _mm256_castsi256_si128(p.mask[t]);
          if (e.z) v = _mm_add_ps(v, _mm_maskload_ps(e.z + at_, mask));
          _mm_maskstore_ps(y + at_, mask, v);
        }
      }
    }
  }
}

void output_grad(const Geometry& g, const float* dy, int64_t k0, int64_t k1, int64_t p0, int64_t count, float* d,
                 int64_t ld) {
  const int64_t hw = g.Ho * g.Wo;
  for (int64_t q = 0; q < count; q += 8) {
    const Patches<4> patches(Lanes(g, p0, q, count), g.K, g.Ho, g.Wo, 0, 0);
    for (int64_t k = k0; k < k1; ++k) {
      V8 in[16], o[36];
      gather(patches, dy + k * hw, g.Ho, g.Wo, in);
      two_d<4, 6>([](auto... a) { a6<V8>(a...); }, in, o);
      for (int a = 0; a < 36; ++a) _mm256_storeu_ps(d + (a * g.K + k) * ld + q, o[a]);
    }
  }
}

void weight_grad(const float* du, int64_t K, int64_t C, int64_t k0, int64_t k1, float* dw) {
  // 8 filters at a time (channels c0 .. c0 + 7 of filter k): 36 loads of 8 adjacent
  // floats, then their 9 taps each written back as 72 adjacent floats.
  for (int64_t k = k0; k < k1; ++k)
    for (int64_t c0 = 0; c0 < C; c0 += 8) {
      const int64_t n = std::min<int64_t>(8, C - c0);
      V8 t[36], g[9];
      for (int a = 0; a < 36; ++a) t[a] = load_n(du + (a * K + k) * C + c0, n);
      two_d<6, 3>([](auto... a) { gt<V8>(a...); }, t, g);
      alignas(32) float buf[9][8];
      for (int e = 0; e < 9; ++e) _mm256_store_ps(buf[e], g[e]);
      for (int64_t q = 0; q < n; ++q)
        for (int e = 0; e < 9; ++e) dw[(k * C + c0 + q) * 9 + e] = buf[e][q];
    }
}

}  // namespace trainrt::winograd::avx2
