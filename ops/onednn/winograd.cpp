// Winograd F(4x4, 3x3) on the cpu backend (ops/onednn/winograd.h): blocks of tiles, the
// transforms over oneTBB ranges (ops/core/parallel.h) and the 36 products as one batched
// oneDNN matmul per block, its primitives cached by shape (dnnl_util's plan cache).
#include "ops/onednn/winograd.h"

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include "ops/core/parallel.h"
#include "ops/onednn/dnnl_util.h"

namespace trainrt::winograd {
namespace du = dnnl_util;

namespace {

constexpr int64_t kPositions = 36;  // 6x6 transformed positions

// Scratch buffers of dnnl_util's per-thread temporaries (du::temp_memory); the
// convolution kernels use slots 0-8.
enum Slot { kFilters = 16, kTiles = 17, kProducts = 18 };

float* scratch(int slot, int64_t floats) {
  return static_cast<float*>(du::temp_memory(du::plain_desc({floats}), slot).get_data_handle());
}

// The batched products of one block: dst[a] = src[a] * wei[a] for a < 36, where each
// operand is given by its dims and strides (so V^T is V read with swapped strides).
// accumulate: dst += (a sum post-op) instead of dst =.
struct Matmul {
  dnnl::matmul prim;
};

du::Md strided(int64_t rows, int64_t cols, int64_t row_stride, int64_t col_stride, int64_t batch_stride) {
  return du::Md({kPositions, rows, cols}, dnnl::memory::data_type::f32, {batch_stride, row_stride, col_stride});
}

// `key` names the shapes and strides of src, wei and dst.
std::shared_ptr<const Matmul> matmul(const std::string& key, const du::Md& src, const du::Md& wei, const du::Md& dst,
                                     bool accumulate) {
  return du::cached<Matmul>(key, [&] {
    dnnl::primitive_attr a = du::attr();
    if (accumulate) {
      dnnl::post_ops po;
      po.append_sum(1.f);
      a.set_post_ops(po);
    }
    dnnl::matmul::primitive_desc pd(dnnl::matmul::desc(src, wei, dst), a, du::engine());
    return Matmul{dnnl::matmul(pd)};
  });
}

void run_matmul(const Matmul& m, const du::Md& src, const float* s, const du::Md& wei, const float* w,
                const du::Md& dst, float* d) {
  auto mem = [](const du::Md& md, const float* p) { return dnnl::memory(md, du::engine(), const_cast<float*>(p)); };
  du::execute(m.prim, {{DNNL_ARG_SRC, mem(src, s)}, {DNNL_ARG_WEIGHTS, mem(wei, w)}, {DNNL_ARG_DST, mem(dst, d)}});
}

// Rows per parallel range so that each range is at least ~kGrain elements of work.
int64_t grain_rows(int64_t per_row) { return std::max<int64_t>(1, kGrain / std::max<int64_t>(1, per_row)); }

// The convolution `g` of x with filters already transformed (u: 36 x K x C): the
// forward, and the data gradient with the rotated filters.
void convolve(const Geometry& g, const float* x, const float* u, const Epilogue& e, float* y) {
  const int64_t P = g.tiles(), block = std::min(block_tiles(g.C, g.K), (P + 7) / 8 * 8);
  const int64_t ld = block;
  float* v = scratch(kTiles, kPositions * g.C * ld);
  float* m = scratch(kProducts, kPositions * g.K * ld);
  const du::Md u_md = strided(g.K, g.C, g.C, 1, g.K * g.C);
  for (int64_t p0 = 0; p0 < P; p0 += block) {
    const int64_t count = std::min(block, P - p0), cols = (count + 7) / 8 * 8;
    parallel_ranges(g.C, grain_rows(36 * cols),
                    [&](int64_t c0, int64_t c1) { avx2::input(g, x, c0, c1, p0, count, v, ld); });
    const du::Md v_md = strided(g.C, count, ld, 1, g.C * ld), m_md = strided(g.K, count, ld, 1, g.K * ld);
    run_matmul(*matmul(du::key("WinogradForward", g.K, g.C, count, ld), u_md, v_md, m_md, false), u_md, u, v_md, v,
               m_md, m);
    parallel_ranges(g.K, grain_rows(36 * cols),
                    [&](int64_t k0, int64_t k1) { avx2::output(g, m, ld, k0, k1, p0, count, e, y); });
  }
}

}  // namespace

bool supported() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

bool preferred(int64_t C, int64_t K) { return supported() && C >= 64 && K >= 64; }

bool own_requested() {
  const char* s = std::getenv("TRAINRT_WINOGRAD");
  return s && std::string(s) == "own";
}

int64_t block_tiles(int64_t C, int64_t K) {
  if (const char* s = std::getenv("TRAINRT_WINOGRAD_BLOCK")) {
    const int64_t b = std::atoll(s);
    if (b > 0) return (b + 7) / 8 * 8;
  }
  const int64_t budget = int64_t{16} << 20;  // bytes of one block's transformed input or products
  const int64_t b = budget / (kPositions * 4 * std::max(C, K));
  return std::max<int64_t>(256, b / 8 * 8);
}

void forward(const Geometry& g, const float* x, const float* w, const Epilogue& e, float* y) {
  float* u = scratch(kFilters, kPositions * g.K * g.C);
  parallel_ranges(g.K, grain_rows(36 * g.C),
                  [&](int64_t k0, int64_t k1) { avx2::weights(w, g.K, g.C, false, k0, k1, u); });
  convolve(g, x, u, e, y);
}

void backward_data(const Geometry& g, const float* dy, const float* w, float* dx) {
  // dX = dY correlated with W rotated by 180 degrees, K and C swapped: output pixel
  // (i, j) of dX reads dY rows i + pad_top - 2 .. i + pad_top.
  Geometry b;
  b.N = g.N, b.C = g.K, b.H = g.Ho, b.W = g.Wo;
  b.K = g.C, b.Ho = g.H, b.Wo = g.W;
  b.pad_top = 2 - g.pad_top, b.pad_left = 2 - g.pad_left;
  float* u = scratch(kFilters, kPositions * g.K * g.C);
  parallel_ranges(g.C, grain_rows(36 * g.K),
                  [&](int64_t c0, int64_t c1) { avx2::weights(w, g.K, g.C, true, c0, c1, u); });
  convolve(b, dy, u, Epilogue{}, dx);
}

void backward_weights(const Geometry& g, const float* dy, const float* x, float* dw) {
  const int64_t P = g.tiles(), block = std::min(block_tiles(g.C, g.K), (P + 7) / 8 * 8);
  const int64_t ld = block;
  float* v = scratch(kTiles, kPositions * g.C * ld);
  float* d = scratch(kProducts, kPositions * g.K * ld);
  float* du_ = scratch(kFilters, kPositions * g.K * g.C);
  std::memset(du_, 0, sizeof(float) * static_cast<size_t>(kPositions * g.K * g.C));
  const du::Md du_md = strided(g.K, g.C, g.C, 1, g.K * g.C);
  for (int64_t p0 = 0; p0 < P; p0 += block) {
    const int64_t count = std::min(block, P - p0), cols = (count + 7) / 8 * 8;
    parallel_ranges(g.C, grain_rows(36 * cols),
                    [&](int64_t c0, int64_t c1) { avx2::input(g, x, c0, c1, p0, count, v, ld); });
    parallel_ranges(g.K, grain_rows(36 * cols),
                    [&](int64_t k0, int64_t k1) { avx2::output_grad(g, dy, k0, k1, p0, count, d, ld); });
    // dU[a] (K x C) += D[a] (K x count) * V[a]^T (count x C)
    const du::Md d_md = strided(g.K, count, ld, 1, g.K * ld), vt_md = strided(count, g.C, 1, ld, g.C * ld);
    run_matmul(*matmul(du::key("WinogradWeights", g.K, g.C, count, ld), d_md, vt_md, du_md, true), d_md, d, vt_md, v,
               du_md, du_);
  }
  parallel_ranges(g.K, grain_rows(9 * g.C),
                  [&](int64_t k0, int64_t k1) { avx2::weight_grad(du_, g.K, g.C, k0, k1, dw); });
}

}  // namespace trainrt::winograd
