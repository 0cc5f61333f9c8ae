// The body of dropout_simd::apply16 in GCC/clang vector types, included by the two ISA
// files (dropout_simd_avx2.cpp, dropout_simd_avx512.cpp), each compiled with its own
// -m flags and register width: the same source becomes vpmullq on AVX-512 and vpmuludq
// sequences on AVX2.
// Internal linkage, so the two builds never meet in the linker.
#pragma once

#include <cstdint>
#include <cstring>

#include "ops/onednn/dropout_simd.h"

namespace trainrt::dropout_simd {
namespace {

// W 64-bit lanes per vector: 4 on AVX2 (one register; 16 lanes spill its 16
// registers), 16 on AVX-512 (two registers, which ran faster than 8 in one: 0.65 against
// 0.74 ns per value on an AVX-512 Xeon, in cache).
// (Spelled out per width: GCC drops vector_size on a type that depends on a template
// parameter.)
template <int W>
struct Lanes;
template <>
struct Lanes<4> {
  using u64 = uint64_t __attribute__((vector_size(32)));
  using i32 = int32_t __attribute__((vector_size(16)));
  using f32 = float __attribute__((vector_size(16)));
  using i8 = int8_t __attribute__((vector_size(4)));
};
template <>
struct Lanes<16> {
  using u64 = uint64_t __attribute__((vector_size(128)));
  using i32 = int32_t __attribute__((vector_size(64)));
  using f32 = float __attribute__((vector_size(64)));
  using i8 = int8_t __attribute__((vector_size(16)));
};

constexpr uint64_t kGolden = 0x9E3779B97F4A7C15ull;  // dropout_mask::draw's step and splitmix64's increment

// dropout_mask::splitmix64 lane by lane.
template <typename V>
inline V splitmix(const V& in) {  // (by reference: GCC notes an ABI change for 128-byte vectors by value)
  V x = in + kGolden;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

template <int W>
inline void apply16_lanes(const float* x, float* y, uint8_t* mask, int64_t blocks, const Draw& d, int64_t at,
                          int64_t block_step, int64_t lane_step) {
  using L = Lanes<W>;
  constexpr int kGroups = 16 / W;
  // draw(key, i) hashes key + i * kGolden (mod 2^64): lane l of block b adds
  // (b * block_step + l * lane_step) * kGolden to key + at * kGolden.
  typename L::u64 h[kGroups];
  for (int l = 0; l < 16; ++l)
    h[l / W][l % W] = d.key + (static_cast<uint64_t>(at) + static_cast<uint64_t>(l * lane_step)) * kGolden;
  const uint64_t step = static_cast<uint64_t>(block_step) * kGolden, threshold = d.threshold;
  const float scale = d.scale;  // locals: the stores through y may alias d as far as the compiler knows
  for (int64_t b = 0; b < blocks; ++b) {
    for (int g = 0; g < kGroups; ++g) {
      // kept: draw >= threshold. Both are below 2^63 (draw < 2^53, threshold <= 2^53),
      // so draw - threshold has its top bit set exactly where dropped; its high half's
      // sign, spread over the 32-bit lane, is -1 dropped, 0 kept. (Arithmetic, not a
      // comparison: GCC's vector comparisons of 64-bit lanes came out scalar.)
      const typename L::u64 diff = (splitmix(h[g]) >> 11) - threshold;
      const typename L::i32 dropped = __builtin_convertvector(diff >> 32, typename L::i32) >> 31;
      const int64_t i = 16 * b + W * g;
      typename L::f32 v;
      std::memcpy(&v, x + i, sizeof v);
      const typename L::i32 r = reinterpret_cast<typename L::i32>(v * scale) & ~dropped;  // dropped: +0
      std::memcpy(y + i, &r, sizeof r);
      if (mask) {
        const typename L::i8 m = __builtin_convertvector(dropped + 1, typename L::i8);  // 1 kept, 0 dropped
        std::memcpy(mask + i, &m, sizeof m);
      }
      h[g] += step;
    }
  }
}

}  // namespace
}  // namespace trainrt::dropout_simd
