// The cpu Dropout's 16-lane draws (ops/onednn/dropout_simd.h), each ISA build this CPU
// runs (scalar, AVX2, AVX-512: every CPU kind CI may get runs the first two), against
// the scalar rule of ops/core/dropout_mask.h value by value, bit for bit: outputs,
// masks, in place, Plain runs and Blocked16c ranges that start and end mid-block.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

#include "graph/tensor.h"
#include "ops/core/dropout_mask.h"
#include "ops/onednn/dropout_simd.h"

using namespace trainrt;
using dropout_simd::Isa;

namespace {

std::vector<float> random_values(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> g(0.f, 2.f);
  std::vector<float> v(n);
  for (float& x : v) x = g(rng);
  // Values whose product or sign a wrong select would change.
  const float specials[] = {0.f,
                            -0.f,
                            std::numeric_limits<float>::quiet_NaN(),
                            -std::numeric_limits<float>::infinity(),
                            std::numeric_limits<float>::denorm_min(),
                            -3e38f};
  for (size_t i = 0; i < n; i += 7) v[i] = specials[(i / 7) % 6];
  return v;
}

// The scalar rule for value i whose row-major index is `at`.
void expect_value(const std::vector<float>& x, const std::vector<float>& y, const std::vector<uint8_t>& mask, size_t i,
                  int64_t at, const dropout_simd::Draw& d, int64_t& wrong) {
  const bool kept = dropout_mask::keep(d.key, at, d.threshold);
  const float want = kept ? x[i] * d.scale : 0.f;
  wrong += std::memcmp(&want, &y[i], sizeof want) != 0 || mask[i] != (kept ? 1 : 0);
}

std::vector<Isa> isas_here() {
  std::vector<Isa> v;
  for (Isa isa : {Isa::scalar, Isa::avx2, Isa::avx512})
    if (dropout_simd::runs(isa)) v.push_back(isa);
  return v;
}

std::vector<double> ratios() { return {0.0, 0.3, 0.5, 0.9, std::nextafter(1.0, 0.0), 3 * 0x1p-53}; }

}  // namespace

TEST_CASE("dropout simd: 16-lane blocks equal the scalar rule on every ISA this CPU runs") {
  CHECK(dropout_simd::runs(Isa::scalar));
  MESSAGE("best here: " << std::string(dropout_simd::name(dropout_simd::best())));
  const int64_t blocks = 37;
  const std::vector<float> x = random_values(16 * blocks, 5);
  for (Isa isa : isas_here()) {
    int64_t wrong = 0, kept = 0;
    for (double r : ratios()) {
      const dropout_simd::Draw d{dropout_mask::key_of(91, 0) + static_cast<uint64_t>(r * 1000),
                                 dropout_mask::threshold(r), static_cast<float>(1.0 / (1.0 - r))};
      // Plain steps, Blocked16c steps (H*W apart), and indices past 2^32.
      for (auto [at, block_step, lane_step] :
           {std::tuple<int64_t, int64_t, int64_t>{0, 16, 1}, {5, 1, 49}, {(1ll << 35) + 3, 1, 12544}}) {
        std::vector<float> y(x.size(), 1.f);
        std::vector<uint8_t> mask(x.size(), 7);
        dropout_simd::apply16(isa, x.data(), y.data(), mask.data(), blocks, d, at, block_step, lane_step);
        for (int64_t b = 0; b < blocks; ++b)
          for (int64_t l = 0; l < 16; ++l) {
            expect_value(x, y, mask, static_cast<size_t>(16 * b + l), at + b * block_step + l * lane_step, d, wrong);
            kept += mask[static_cast<size_t>(16 * b + l)];
          }
        std::vector<float> z = x;  // in place, no mask
        dropout_simd::apply16(isa, z.data(), z.data(), nullptr, blocks, d, at, block_step, lane_step);
        wrong += std::memcmp(z.data(), y.data(), y.size() * sizeof(float)) != 0;
      }
    }
    INFO("isa " << std::string(dropout_simd::name(isa)));
    CHECK(wrong == 0);
    CHECK(kept > 16 * blocks);  // ratio 0 keeps all: the test saw kept values, not only zeros
  }
}

TEST_CASE("dropout simd: Plain runs and Blocked16c ranges equal the scalar rule by row-major index") {
  const std::vector<int64_t> dims{3, 32, 5, 7};  // hw 35: rows of positions end mid-range
  const int64_t n = 3 * 32 * 35;
  const std::vector<float> x = random_values(static_cast<size_t>(n), 8);
  const dropout_simd::Draw d{dropout_mask::key_of(4, 0), dropout_mask::threshold(0.3), static_cast<float>(1.0 / 0.7)};
  for (Isa isa : isas_here()) {
    int64_t wrong = 0;
    for (auto [begin, end] :
         {std::pair<int64_t, int64_t>{0, n}, {5, n - 3}, {16, 16 * 35 + 9}, {17, 18}, {1000, 1000}}) {
      std::vector<float> y(x.size(), 1.f);
      std::vector<uint8_t> mask(x.size(), 7);
      dropout_simd::apply_plain(x.data() + begin, y.data() + begin, mask.data() + begin, end - begin, begin, d, isa);
      for (int64_t i = begin; i < end; ++i) expect_value(x, y, mask, static_cast<size_t>(i), i, d, wrong);
      std::fill(y.begin(), y.end(), 1.f);
      std::fill(mask.begin(), mask.end(), 7);
      dropout_simd::apply_blocked16c(x.data(), y.data(), mask.data(), begin, end, dims, d, isa);
      for (int64_t i = begin; i < end; ++i)
        expect_value(x, y, mask, static_cast<size_t>(i), blocked_to_plain_index(dims, i), d, wrong);
      // Nothing outside [begin, end) written.
      for (int64_t i = 0; i < n; ++i)
        if (i < begin || i >= end) wrong += y[static_cast<size_t>(i)] != 1.f || mask[static_cast<size_t>(i)] != 7;
    }
    INFO("isa " << std::string(dropout_simd::name(isa)));
    CHECK(wrong == 0);
  }
}
