// Winograd F(4x4, 3x3) convolutions of the cpu backend where oneDNN has none (it
// implements Winograd on AVX-512 only): fp32, 3x3 weights, stride 1, no dilation, one
// group, row-major (N,C,H,W) tensors; forward with FusedConv's epilogue, data gradient
// and weight gradient.
//
//   winograd::Geometry g{N, C, H, W, K, Ho, Wo, pad_top, pad_left};
//   if (winograd::supported()) winograd::forward(g, x, w, {bias, relu, z}, y);
//   winograd::backward_data(g, dy, w, dx);     // dX: N,C,H,W
//   winograd::backward_weights(g, dy, x, dw);  // dW: K,C,3,3
//
// Why: ~80% of the Wide ResNet's training step is 3x3 stride-1 convolutions, and
// F(4x4,3x3) does their sums with 36 multiplications per 4x4 outputs and channel pair
// instead of 144. Each 6x6 input tile d (4-pixel stride, zeros outside the image) and
// each 3x3 filter g are transformed, V = B^T d B and U = G g G^T; the 36 transformed
// positions are 36 independent matrix products M[a] = U[a] (K x C) * V[a] (C x tiles),
// run as one batched oneDNN matmul; each output tile is A^T M A (+ bias, relu, + Z).
// The tiles are taken in blocks of block_tiles(), so that the scratch memory stays
// bounded and a block's V (36 x C x tiles) is reused from cache by its 36 products. The data gradient is the same
// algorithm on dY with the filters rotated by 180 degrees and K and C swapped (padding 2 - pad); the weight gradient
// follows from linearity: dU[a] = sum over tiles of (A dY_t A^T)[a] (B^T X_t B)[a], 36 products K x tiles times tiles x
// C, then dW = G^T dU G.
//
// Numerics: the transforms' constants (up to 8 in A, 5 in B) amplify fp32 rounding; the
// error bound the tests hold is in tests/ops/test_conv_algorithm.cpp and docs/reliability.md.
// The transforms (ops/onednn/winograd_avx2.cpp) are compiled for AVX2+FMA; supported()
// checks the CPU at run time and callers fall back to the direct convolution.
#pragma once

#include <cstdint>

namespace trainrt::winograd {

// One convolution: input N,C,H,W; output N,K,Ho,Wo; filter K,C,3,3. Output pixel (i, j)
// reads input rows i - pad_top .. i - pad_top + 2 and columns j - pad_left .. + 2, zero
// outside the input (so any begin and end padding, even negative, is expressed).
struct Geometry {
  int64_t N = 0, C = 0, H = 0, W = 0;
  int64_t K = 0, Ho = 0, Wo = 0;
  int64_t pad_top = 0, pad_left = 0;
  int64_t tiles_h() const { return (Ho + 3) / 4; }
  int64_t tiles_w() const { return (Wo + 3) / 4; }
  int64_t tiles() const { return N * tiles_h() * tiles_w(); }
};

// The forward output's epilogue: y = relu(conv + bias) + z (each part optional).
struct Epilogue {
  const float* bias = nullptr;  // K
  bool relu = false;
  const float* z = nullptr;  // N,K,Ho,Wo
};

// True when the CPU runs the AVX2+FMA transforms.
bool supported();

// The cpu backend's rule for a Winograd request oneDNN cannot serve: its own Winograd
// when the convolution has at least 64 input and output channels, else direct. Measured
// on the Wide ResNet's layers (docs/reliability.md): 1.1-2.9x faster than direct from 160
// channels up, 0.4-0.9x at 16 -> 160 (too little work per tile for the transforms), and
// erratic at 1 or 3 -> 16 (a few ms either way).
bool preferred(int64_t C, int64_t K);

// True when `TRAINRT_WINOGRAD=own` is set (read at each call): the kernels then take this
// Winograd where it is preferred even on CPUs where oneDNN has its own (AVX-512, which
// otherwise runs oneDNN's), given row-major tensors (`trainrt bench --layouts plain`). For
// measuring the two against each other (tools/bench_compare.sh's fp32-winograd-own).
bool own_requested();

// Tiles per block: the number of 4x4 output tiles transformed and multiplied together.
// Chosen from the channel counts: a block's transformed input (or products) within
// 16 MiB, at least 256 tiles. Smaller, L2-sized blocks (64 tiles, ~1 MiB) measured up to
// 6x slower on the shared 2-core AVX2 machine: each block is three parallel regions
// (two oneTBB loops and oneDNN's OpenMP matmul), and on busy cores every region waits
// for a descheduled thread, so fewer, larger blocks win (docs/reliability.md).
// `TRAINRT_WINOGRAD_BLOCK` overrides it for measurements.
int64_t block_tiles(int64_t C, int64_t K);

// y = epilogue(conv(x, w)).
void forward(const Geometry& g, const float* x, const float* w, const Epilogue& e, float* y);
// dX (N,C,H,W) of the convolution `g` from dY (N,K,Ho,Wo) and W (K,C,3,3).
void backward_data(const Geometry& g, const float* dy, const float* w, float* dx);
// dW (K,C,3,3) of the convolution `g` from dY (N,K,Ho,Wo) and X (N,C,H,W).
void backward_weights(const Geometry& g, const float* dy, const float* x, float* dw);

// The transforms, over ranges so that callers split them across threads (defined in
// ops/onednn/winograd_avx2.cpp, AVX2+FMA code; call only when supported()). Transformed
// arrays are 36 matrices, position a's element (row r, column q) at [(a*rows + r)*ld + q],
// where the columns are tiles p0 + q of a block of `count` tiles.
namespace avx2 {
// U[a] (K x C), from W (K,C,3,3), rows [r0, r1). rotate: the data gradient's filters,
// U[a] (C x K) of W rotated by 180 degrees.
void weights(const float* w, int64_t K, int64_t C, bool rotate, int64_t r0, int64_t r1, float* u);
// V[a] (C x count) = B^T d B of input channels [c0, c1).
void input(const Geometry& g, const float* x, int64_t c0, int64_t c1, int64_t p0, int64_t count, float* v, int64_t ld);
// y = epilogue(A^T M A) for output channels [k0, k1) (M[a]: K x count).
void output(const Geometry& g, const float* m, int64_t ld, int64_t k0, int64_t k1, int64_t p0, int64_t count,
            const Epilogue& e, float* y);
// D[a] (K x count) = A dY_t A^T of output channels [k0, k1), dY zero outside Ho x Wo.
void output_grad(const Geometry& g, const float* dy, int64_t k0, int64_t k1, int64_t p0, int64_t count, float* d,
                 int64_t ld);
// dW (K,C,3,3) = G^T dU[a] G, for filters k in [k0, k1) (dU[a]: K x C).
void weight_grad(const float* du, int64_t K, int64_t C, int64_t k0, int64_t k1, float* dw);
}  // namespace avx2

}  // namespace trainrt::winograd
