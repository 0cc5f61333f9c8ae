// The dispatch and the run and range walks of ops/onednn/dropout_simd.h; the 16-lane
// body is in dropout_simd_lanes.h.
#include "ops/onednn/dropout_simd.h"

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <string>
#include <vector>

#include "graph/tensor.h"
#include "ops/core/dropout_mask.h"

namespace trainrt::dropout_simd {

namespace {

// One value by the scalar rule (dropout_mask::keep).
inline void apply_one(const float* x, float* y, uint8_t* mask, int64_t i, int64_t at, const Draw& d) {
  const bool kept = dropout_mask::keep(d.key, at, d.threshold);
  y[i] = kept ? x[i] * d.scale : 0.f;
  if (mask) mask[i] = kept ? 1 : 0;
}

// ONEDNN_MAX_CPU_ISA caps these loops as it caps oneDNN's kernels, so a run limited to
// AVX2 (tools/setup.sh test's second ctest pass) runs what an AVX2-only CPU runs.
Isa cap() {
  const char* s = std::getenv("ONEDNN_MAX_CPU_ISA");
  if (!s || !*s) return Isa::avx512;
  std::string v(s);
  for (char& c : v) c = static_cast<char>(std::toupper(static_cast<unsigned char>(c)));
  if (v == "ALL" || v.rfind("AVX512", 0) == 0 || v.rfind("AVX10", 0) == 0) return Isa::avx512;
  return v.rfind("AVX2", 0) == 0 ? Isa::avx2 : Isa::scalar;
}

}  // namespace

bool runs(Isa isa) {
  static const bool avx2 = __builtin_cpu_supports("avx2");
  static const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512dq");
  return isa == Isa::scalar || (isa == Isa::avx2 && avx2) || (isa == Isa::avx512 && avx512);
}

Isa best() {
  static const Isa isa = [] {
    const Isa limit = cap();
    if (limit == Isa::avx512 && runs(Isa::avx512)) return Isa::avx512;
    return limit != Isa::scalar && runs(Isa::avx2) ? Isa::avx2 : Isa::scalar;
  }();
  return isa;
}

const char* name(Isa isa) { return isa == Isa::avx512 ? "avx512" : isa == Isa::avx2 ? "avx2" : "scalar"; }

void apply16(Isa isa, const float* x, float* y, uint8_t* mask, int64_t blocks, const Draw& d, int64_t at,
             int64_t block_step, int64_t lane_step) {
  if (isa == Isa::avx512) return apply16_avx512(x, y, mask, blocks, d, at, block_step, lane_step);
  if (isa == Isa::avx2) return apply16_avx2(x, y, mask, blocks, d, at, block_step, lane_step);
  for (int64_t b = 0; b < blocks; ++b)
    for (int64_t l = 0; l < 16; ++l) apply_one(x, y, mask, 16 * b + l, at + b * block_step + l * lane_step, d);
}

void apply_plain(const float* x, float* y, uint8_t* mask, int64_t n, int64_t at, const Draw& d, Isa isa) {
  const int64_t blocks = n / 16;
  if (blocks > 0) apply16(isa, x, y, mask, blocks, d, at, 16, 1);
  for (int64_t i = 16 * blocks; i < n; ++i) apply_one(x, y, mask, i, at + i, d);
}

void apply_blocked16c(const float* x, float* y, uint8_t* mask, int64_t begin, int64_t end,
                      const std::vector<int64_t>& dims, const Draw& d, Isa isa) {
  const int64_t hw = dims[2] * dims[3];
  int64_t i = begin;
  for (; i < end && i % 16 != 0; ++i) apply_one(x, y, mask, i, blocked_to_plain_index(dims, i), d);  // partial block
  while (end - i >= 16) {  // whole blocks, a row's run of positions at a time: lane l of the
    // block at position s lies l * hw after lane 0, the next position's lane 0 one after
    const int64_t s = (i / 16) % hw;
    const int64_t blocks = std::min(hw - s, (end - i) / 16);
    apply16(isa, x + i, y + i, mask ? mask + i : nullptr, blocks, d, blocked_to_plain_index(dims, i), 1, hw);
    i += 16 * blocks;
  }
  for (; i < end; ++i) apply_one(x, y, mask, i, blocked_to_plain_index(dims, i), d);
}

}  // namespace trainrt::dropout_simd
