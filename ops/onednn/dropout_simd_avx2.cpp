// dropout_simd::apply16 compiled for AVX2 (CMakeLists.txt: -mavx2); dropout_simd::runs
// checks the CPU before any call (ops/onednn/dropout_simd.h).
#include "ops/onednn/dropout_simd_lanes.h"

namespace trainrt::dropout_simd {

void apply16_avx2(const float* x, float* y, uint8_t* mask, int64_t blocks, const Draw& d, int64_t at,
                  int64_t block_step, int64_t lane_step) {
  apply16_lanes<4>(x, y, mask, blocks, d, at, block_step, lane_step);
}

}  // namespace trainrt::dropout_simd
