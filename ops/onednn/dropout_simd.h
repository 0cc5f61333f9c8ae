// The cpu backend's Dropout draws, 16 at a time: the mask rule of ops/core/dropout_mask.h
// (the value at row-major index `at` is kept when draw(key, at) >= threshold, and
// becomes v * scale, else +0) over fp32 runs, with the splitmix64 hash of 16 lanes in
// AVX-512 (two 8-lane vectors, vpmullq) or AVX2 (four 4-lane vectors, the 64-bit
// products from 32-bit ones), chosen by the CPU at run time; a scalar loop elsewhere.
//
//   const dropout_simd::Draw d{key, dropout_mask::threshold(ratio), float(1 / (1 - ratio))};
//   dropout_simd::apply_plain(x + i, y + i, nullptr, n, /*at=*/i, d);       // Plain run
//   dropout_simd::apply_blocked16c(x, y, mask, begin, end, dims, d);        // Blocked16c offsets
//
// Why: with the hash's three 64-bit products per value done one value at a time, the
// Dropout fused into the Wide ResNet's batch norm and ReLU (BatchNormalizationReluDropout)
// took 3.0x the time of the batch norm and ReLU alone at the same shapes on an AVX-512
// Xeon (Blocked16c activations; 192 ms of a 3.3 s step at Fashion-MNIST batch 64),
// 1.24x with these loops (80 ms). On AVX2's row-major activations the fused apply loop
// goes from 103 to 95 ms a step there. The bits are the scalar rule's: the same integer
// test, the same float product, +0 where dropped (tests/ops/test_dropout_simd.cpp, every
// ISA the CPU runs).
#pragma once

#include <cstdint>
#include <vector>

namespace trainrt::dropout_simd {

struct Draw {
  uint64_t key = 0, threshold = 0;  // dropout_mask::key_of, dropout_mask::threshold(ratio)
  float scale = 1;                  // 1 / (1 - ratio), rounded to float
};

enum class Isa { scalar, avx2, avx512 };
Isa best();          // the widest this CPU runs, within ONEDNN_MAX_CPU_ISA when set
bool runs(Isa isa);  // whether this CPU runs `isa`
const char* name(Isa isa);

// 16-value blocks: value l of block b (x[16 * b + l]) has row-major index
// at + b * block_step + l * lane_step. y may be x; mask (1 kept, 0 dropped) may be null.
// `isa` must run here (runs(isa)).
void apply16(Isa isa, const float* x, float* y, uint8_t* mask, int64_t blocks, const Draw& d, int64_t at,
             int64_t block_step, int64_t lane_step);

// n values of a Plain tensor from row-major index `at` (x, y, mask point at that value).
void apply_plain(const float* x, float* y, uint8_t* mask, int64_t n, int64_t at, const Draw& d, Isa isa = best());

// Storage offsets [begin, end) of a Blocked16c tensor of dims N,C,H,W (row-major index
// of an offset: blocked_to_plain_index); x, y, mask are the tensor's first values.
void apply_blocked16c(const float* x, float* y, uint8_t* mask, int64_t begin, int64_t end,
                      const std::vector<int64_t>& dims, const Draw& d, Isa isa = best());

// The ISA builds of apply16 (ops/onednn/dropout_simd_avx2.cpp, _avx512.cpp).
void apply16_avx2(const float* x, float* y, uint8_t* mask, int64_t blocks, const Draw& d, int64_t at,
                  int64_t block_step, int64_t lane_step);
void apply16_avx512(const float* x, float* y, uint8_t* mask, int64_t blocks, const Draw& d, int64_t at,
                    int64_t block_step, int64_t lane_step);

}  // namespace trainrt::dropout_simd
