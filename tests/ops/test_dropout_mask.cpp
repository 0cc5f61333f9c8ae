// Dropout's mask rule as the cuda kernels run it (ops/core/dropout_mask.h): the integer
// keep test against the reference's double comparison, the four-at-a-time index walk
// against the layout's row-major index, and the device's masks and outputs, emulated with
// those functions for Plain and NHWC tensors, against the reference's Dropout bit for bit.
#include <doctest/doctest.h>

#include <cmath>
#include <cstring>
#include <random>
#include <vector>

#include "ops/core/channels_last.h"
#include "ops/core/dropout_mask.h"
#include "ops/core/kernel.h"
#include "test_util.h"

using namespace trainrt;
using namespace trainrt::test;
using namespace trainrt::dropout_mask;

TEST_CASE("dropout mask: the device's integer test is the reference's u >= ratio") {
  std::mt19937_64 rng(3);
  std::vector<double> ratios = {0.0, 0.5, 0.01, 0.1, 0.25, 0.9, std::nextafter(1.0, 0.0), 0x1p-53, 3 * 0x1p-53};
  for (int i = 0; i < 200; ++i) ratios.push_back(std::uniform_real_distribution<double>(0.0, 1.0)(rng));
  int64_t wrong = 0, checked = 0;
  for (double r : ratios) {
    const uint64_t t = threshold(r);
    std::vector<uint64_t> draws = {0, (1ull << 53) - 1};
    for (int64_t d = -2; d <= 2; ++d)
      if (static_cast<int64_t>(t) + d >= 0 && static_cast<int64_t>(t) + d < (1ll << 53)) draws.push_back(t + d);
    for (int i = 0; i < 100; ++i) draws.push_back(rng() >> 11);
    for (uint64_t d : draws) {
      wrong += (d >= t) != (static_cast<double>(d) * 0x1p-53 >= r);
      ++checked;
    }
  }
  CHECK(wrong == 0);
  CHECK(checked > 20000);
}

TEST_CASE("dropout mask: four storage offsets' row-major indices are at + k * lane_step") {
  CHECK(lane_step(false, 3, 7) == 1);
  CHECK(lane_step(true, 16, 49) == 49);
  CHECK(lane_step(true, 6, 49) == 0);  // C % 4 != 0: one at a time
  struct Shape {
    int64_t N, C, hw;
  };
  for (const Shape s : {Shape{2, 16, 9}, Shape{3, 4, 1}, Shape{1, 8, 5}, Shape{2, 160, 49}})
    for (const int64_t stride : {1, 3, 7, 256}) {  // the grid's threads: the walk's step is 4 * stride
      const int64_t n = s.N * s.C * s.hw, groups = n / 4, step = lane_step(true, s.C, s.hw);
      int64_t wrong = 0;
      for (int64_t first = 0; first < std::min<int64_t>(stride, groups); ++first) {
        channels_last::PlainWalk w(4 * first, 4 * stride, s.C, s.hw);
        for (int64_t g = first; g < groups; g += stride, w.next(4 * stride))
          for (int64_t k = 0; k < 4; ++k)
            wrong += w.plain() + k * step != channels_last::plain_index(4 * g + k, s.C, s.hw);
      }
      CHECK(wrong == 0);
    }
}

namespace {

// The cuda Dropout's mask and output for x stored Plain or NHWC, drawn as its kernels
// draw them (dropout4_kernel where lane_step allows, with a Plain tail; else
// dropout_kernel), written back in row-major order.
struct Drawn {
  std::vector<float> y;
  std::vector<uint8_t> mask;
};
Drawn device_dropout(const Tensor& x, bool nhwc, double ratio, uint64_t key) {
  const int64_t n = x.numel(), C = nhwc ? x.dims()[1] : 1, hw = nhwc ? x.dims()[2] * x.dims()[3] : 1;
  const float scale = static_cast<float>(1.0 / (1.0 - ratio));
  const uint64_t t = threshold(ratio);
  Drawn d{std::vector<float>(static_cast<size_t>(n)), std::vector<uint8_t>(static_cast<size_t>(n))};
  auto put = [&](int64_t at, bool kept) {
    d.y[static_cast<size_t>(at)] = kept ? x.data<float>()[at] * scale : 0.f;
    d.mask[static_cast<size_t>(at)] = kept ? 1 : 0;
  };
  const int64_t step = lane_step(nhwc, C, hw);
  if (step > 0) {
    const int64_t groups = n / 4;
    channels_last::PlainWalk w(0, 4, C, hw);
    for (int64_t g = 0; g < groups; ++g, w.next(4)) {
      bool k[4];
      keep4(key, w.plain(), step, t, k);
      for (int j = 0; j < 4; ++j) put(w.plain() + j * step, k[j]);
    }
    for (int64_t i = 4 * groups; i < n; ++i) put(i, keep(key, i, t));  // Plain tail
  } else {
    for (channels_last::PlainWalk w(0, 1, C, hw); w.index < n; w.next(1)) put(w.plain(), keep(key, w.plain(), t));
  }
  return d;
}

}  // namespace

TEST_CASE("dropout mask: the device's draws equal the reference's Dropout bit for bit") {
  struct Case {
    std::vector<int64_t> dims;
    bool nhwc;
  };
  const std::vector<Case> cases = {{{2, 16, 8, 8}, false}, {{2, 16, 8, 8}, true}, {{3, 5, 7}, false},
                                   {{2, 6, 5, 5}, true},   {{1, 12, 3, 3}, true}, {{4, 160, 7, 7}, true},
                                   {{1, 1, 1, 7}, false}};
  for (const Case& c : cases)
    for (const double ratio : {0.01, 0.5, 0.3}) {
      CAPTURE(dims_to_string(c.dims));
      CAPTURE(c.nhwc);
      CAPTURE(ratio);
      const Tensor x = random_tensor(DataType::Float32, c.dims, 11, -2, 2);
      RunOptions opts;
      opts.training = true;
      opts.seed = 1234;
      const Node n = make_node("Dropout", {"x", "r"}, {"y", "mask"}, {{"seed", Attribute::of_int(77)}});
      const TensorMap out = run_node(n, {{"x", x}}, "reference", {{"r", make(DataType::Float32, {}, {ratio})}}, opts);
      // The key as the cuda kernel forms it: node 0's seed in this run, the attribute's mix.
      const uint64_t key = key_of(node_seed(opts.seed, 0), splitmix64(77));
      const double r = static_cast<double>(static_cast<float>(ratio));  // the ratio input is float32
      const Drawn d = device_dropout(x, c.nhwc && c.dims.size() == 4, r, key);
      int64_t wrong = 0, kept = 0;
      for (int64_t i = 0; i < x.numel(); ++i) {
        wrong += d.mask[static_cast<size_t>(i)] != out.at("mask").data<uint8_t>()[i];
        wrong += std::memcmp(&d.y[static_cast<size_t>(i)], &out.at("y").data<float>()[i], sizeof(float)) != 0;
        kept += d.mask[static_cast<size_t>(i)];
      }
      CHECK(wrong == 0);
      CHECK(kept > 0);
    }
}
