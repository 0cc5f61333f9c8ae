// The transforms of Winograd F(4x4, 3x3) (ops/onednn/winograd.h), compiled with -mavx2
// -mfma (CMakeLists.txt): only winograd::supported() callers reach them.
//
// The 1-D transforms below are the standard F(4x4,3x3) matrices (interpolation points
// 0, 1, -1, 2, -2 and infinity), written as templates over the element type: float for
// the filters, __m256 (8 tiles at once, GCC's vector arithmetic) for the tiles. A 2-D
// transform X -> T X T^T applies the 1-D one down the columns, then along the rows.
// Tiles are vectorised 8 at a time: a tile's 6x6 input is gathered into lane t of 36
// vectors (zeros outside the image), transformed, and stored as 8 adjacent columns of
// the 36 matrices the batched matmul reads.
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

// The h x h patches at (row + dr, col + dc) of each lane's image plane `plane(n)`
// (rows x cols), zeros outside it and in off lanes, as h*h vectors.
template <int h, typename Plane>
void gather(const Lanes& l, Plane plane, int64_t rows, int64_t cols, int64_t dr, int64_t dc, V8* out) {
  alignas(32) float buf[h * h][8];
  for (int t = 0; t < 8; ++t) {
    const float* src = l.on[t] ? plane(l.n[t]) : nullptr;
    const int64_t r0 = l.row[t] + dr, c0 = l.col[t] + dc;
    for (int i = 0; i < h; ++i) {
      const int64_t r = r0 + i;
      const bool row_in = src && r >= 0 && r < rows;
      for (int j = 0; j < h; ++j) {
        const int64_t c = c0 + j;
        buf[i * h + j][t] = row_in && c >= 0 && c < cols ? src[r * cols + c] : 0.f;
      }
    }
  }
  for (int e = 0; e < h * h; ++e) out[e] = _mm256_load_ps(buf[e]);
}

}  // namespace

void weights(const float* w, int64_t K, int64_t C, bool rotate, int64_t r0, int64_t r1, float* u) {
  // U[a] is K x C, or C x K for the rotated (data-gradient) filters; each row's columns
  // are written in order (the filters are read out of order instead: 9 floats each).
  const int64_t rows = rotate ? C : K, cols = rotate ? K : C;
  for (int64_t r = r0; r < r1; ++r)
    for (int64_t col = 0; col < cols; ++col) {
      const float* src = rotate ? w + (col * C + r) * 9 : w + (r * C + col) * 9;
      float g[9], t[36];
      for (int e = 0; e < 9; ++e) g[e] = rotate ? src[8 - e] : src[e];
      two_d<3, 6>(g6<float>, g, t);
      for (int a = 0; a < 36; ++a) u[(a * rows + r) * cols + col] = t[a];
    }
}

void input(const Geometry& g, const float* x, int64_t c0, int64_t c1, int64_t p0, int64_t count, float* v, int64_t ld) {
  const int64_t hw = g.H * g.W;
  for (int64_t q = 0; q < count; q += 8) {
    const Lanes l(g, p0, q, count);
    for (int64_t c = c0; c < c1; ++c) {
      V8 d[36], o[36];
      gather<6>(
          l, [&](int64_t n) { return x + (n * g.C + c) * hw; }, g.H, g.W, -g.pad_top, -g.pad_left, d);
      two_d<6, 6>(bt<V8>, d, o);
      for (int a = 0; a < 36; ++a) _mm256_storeu_ps(v + (a * g.C + c) * ld + q, o[a]);
    }
  }
}

void output(const Geometry& g, const float* m, int64_t ld, int64_t k0, int64_t k1, int64_t p0, int64_t count,
            const Epilogue& e, float* y) {
  const int64_t hw = g.Ho * g.Wo;
  for (int64_t q = 0; q < count; q += 8) {
    const Lanes l(g, p0, q, count);
    for (int64_t k = k0; k < k1; ++k) {
      V8 in[36], o[16];
      for (int a = 0; a < 36; ++a) in[a] = _mm256_loadu_ps(m + (a * g.K + k) * ld + q);
      two_d<6, 4>(at<V8>, in, o);
      alignas(32) float buf[16][8];
      const V8 bias = _mm256_set1_ps(e.bias ? e.bias[k] : 0.f);
      for (int i = 0; i < 16; ++i) {
        V8 r = o[i] + bias;
        if (e.relu) r = _mm256_max_ps(r, _mm256_setzero_ps());
        _mm256_store_ps(buf[i], r);
      }
      for (int t = 0; t < 8 && l.on[t]; ++t) {
        const int64_t base = (l.n[t] * g.K + k) * hw;
        const int64_t rows = std::min<int64_t>(4, g.Ho - l.row[t]), cols = std::min<int64_t>(4, g.Wo - l.col[t]);
        for (int64_t i = 0; i < rows; ++i)
          for (int64_t j = 0; j < cols; ++j) {
            const int64_t at_ = base + (l.row[t] + i) * g.Wo + l.col[t] + j;
            y[at_] = e.z ? buf[i * 4 + j][t] + e.z[at_] : buf[i * 4 + j][t];
          }
      }
    }
  }
}

void output_grad(const Geometry& g, const float* dy, int64_t k0, int64_t k1, int64_t p0, int64_t count, float* d,
                 int64_t ld) {
  const int64_t hw = g.Ho * g.Wo;
  for (int64_t q = 0; q < count; q += 8) {
    const Lanes l(g, p0, q, count);
    for (int64_t k = k0; k < k1; ++k) {
      V8 in[16], o[36];
      gather<4>(
          l, [&](int64_t n) { return dy + (n * g.K + k) * hw; }, g.Ho, g.Wo, 0, 0, in);
      two_d<4, 6>(a6<V8>, in, o);
      for (int a = 0; a < 36; ++a) _mm256_storeu_ps(d + (a * g.K + k) * ld + q, o[a]);
    }
  }
}

void weight_grad(const float* du, int64_t K, int64_t C, int64_t k0, int64_t k1, float* dw) {
  for (int64_t k = k0; k < k1; ++k)
    for (int64_t c = 0; c < C; ++c) {
      float t[36], g[9];
      for (int a = 0; a < 36; ++a) t[a] = du[(a * K + k) * C + c];
      two_d<6, 3>(gt<float>, t, g);
      for (int e = 0; e < 9; ++e) dw[(k * C + c) * 9 + e] = g[e];
    }
}

}  // namespace trainrt::winograd::avx2
