// The grid of the cuda backend's per-channel sums (batch-norm statistics, ConvGrad's
// 16-bit bias gradient): ops/cuda/channel_grid.h, the host function the kernels are
// launched with, over the Wide ResNet's shapes for H100, A100 and an 80-SM GPU.
#include <doctest/doctest.h>

#include <cstdio>
#include <vector>

#include "ops/cuda/channel_grid.h"

using namespace trainrt::cuda::channel_slices;

namespace {

constexpr int kThreads = 256, kRows = kThreads / kLanes;  // the kernels' blocks (ops/cuda/cuda_util.h)

struct Shape {
  int64_t C, hw;  // channels, map side
};
// The Wide ResNet's batch-norm and bias-gradient shapes on CIFAR-100 (3x32x32 input).
const std::vector<Shape> kWideResNet = {{16, 32}, {160, 32}, {320, 16}, {640, 8}};

int64_t blocks(const Channels& v) { return grid_columns(v) * v.slices; }

// Values each slice's threads visit, as the kernels walk them (for_slice: thread t takes
// j = begin + t, + kThreads, ...; for_slice_last: row r takes j = begin + r, + kRows, ...),
// counted per value j of one channel.
std::vector<int> visits(const Channels& v) {
  std::vector<int> n(static_cast<size_t>(v.M), 0);
  const int threads = v.last ? kRows : kThreads;
  for (int64_t g = 0; g < v.slices; ++g)
    for (int t = 0; t < threads; ++t)
      for (int64_t j = slice_begin(v, g) + t; j < slice_end(v, g); j += threads) ++n[static_cast<size_t>(j)];
  return n;
}

}  // namespace

TEST_CASE("channel grid: the Wide ResNet's shapes fill the GPU, slices tile each channel") {
  for (const int sms : {132, 108, 80})
    for (const int64_t batch : {32, 1024})
      for (const Shape& s : kWideResNet)
        for (const bool last : {false, true}) {
          const Channels v = channel_grid(batch, s.C, s.hw * s.hw, last, sms);
          CAPTURE(sms);
          CAPTURE(batch);
          CAPTURE(s.C);
          CAPTURE(s.hw);
          CAPTURE(last);
          CHECK(v.M == batch * s.hw * s.hw);
          CHECK(v.C == s.C);
          // The slices tile [0, M): contiguous, none empty, the last one ending at M.
          CHECK(slice_begin(v, 0) == 0);
          for (int64_t g = 0; g < v.slices; ++g) {
            CHECK(slice_end(v, g) > slice_begin(v, g));
            if (g + 1 < v.slices) CHECK(slice_end(v, g) == slice_begin(v, g + 1));
          }
          CHECK(slice_end(v, v.slices - 1) == v.M);
          // Each block reads at least kMinBlockValues values (but the last slice).
          if (v.slices > 1) CHECK(v.chunk * lanes_of(v) >= kMinBlockValues);
          // At least 4 blocks an SM wherever the tensor holds enough values for blocks of
          // kMinBlockValues; the one shape that does not (16 channels of 32x32 at batch 32:
          // 524,288 values, 256 blocks) gets all it holds.
          const int64_t possible = grid_columns(v) * (v.M * lanes_of(v) / kMinBlockValues);
          if (possible >= 4 * sms)
            CHECK(blocks(v) >= 4 * sms);
          else
            CHECK(blocks(v) >= possible);
          if (!(batch == 32 && s.C == 16)) CHECK(blocks(v) >= 4 * sms);
          // Not far more than asked for: slices stop at the wanted count.
          CHECK(blocks(v) < kBlocksPerSm * sms + grid_columns(v));
          CHECK(v.slices <= kMaxSlices);
          // The partial sums' workspace is exactly the parts the kernels index.
          for (const int K : {1, 2, 3}) {
            CHECK(parts_bytes(v, K) ==
                  static_cast<size_t>(part_index(v, v.C - 1, v.slices - 1, K, K - 1) + 1) * sizeof(double));
            CHECK(parts_bytes(v, K) == static_cast<size_t>(v.C * v.slices * K) * sizeof(double));
          }
          if (sms == 132 && batch == 32)
            std::printf("channel grid (132 SMs, batch %lld): C %lld %lldx%lld %s: %d slices of %lld, %lld blocks\n",
                        static_cast<long long>(batch), static_cast<long long>(s.C), static_cast<long long>(s.hw),
                        static_cast<long long>(s.hw), last ? "NHWC" : "NCHW", v.slices, static_cast<long long>(v.chunk),
                        static_cast<long long>(blocks(v)));
        }
}

TEST_CASE("channel grid: the kernels' loops visit every value of a channel exactly once") {
  for (const int sms : {132, 80})
    for (const Shape& s : kWideResNet)
      for (const bool last : {false, true}) {
        const Channels v = channel_grid(32, s.C, s.hw * s.hw, last, sms);
        CAPTURE(sms);
        CAPTURE(s.C);
        CAPTURE(last);
        const std::vector<int> n = visits(v);
        int64_t wrong = 0;
        for (int k : n) wrong += k != 1;
        CHECK(wrong == 0);
      }
}

TEST_CASE("channel grid: small and empty tensors") {
  const Channels empty = channel_grid(0, 8, 16, false, 132);
  CHECK(empty.slices == 1);
  CHECK(empty.M == 0);
  CHECK(parts_bytes(empty, 1) == 8 * sizeof(double));
  const Channels none = channel_grid(4, 0, 16, true, 132);
  CHECK(parts_bytes(none, 3) == 0);
  const Channels one = channel_grid(1, 3, 1, false, 132);  // M = 1: one slice of one value
  CHECK(one.slices == 1);
  CHECK(one.chunk == 1);
  CHECK(slice_end(one, 0) == 1);
  // A big tensor on a GPU with many SMs: slices bounded by gridDim.y's limit.
  const Channels big = channel_grid(1 << 20, 1, 1 << 12, false, 1 << 20);
  CHECK(big.slices <= kMaxSlices);
  CHECK(slice_end(big, big.slices - 1) == big.M);
  // The grid is a function of the SM count: the same device gives the same slices (the
  // summation order, so the same bits), another SM count may not.
  const Channels a = channel_grid(32, 160, 1024, true, 132), b = channel_grid(32, 160, 1024, true, 132);
  CHECK(a.slices == b.slices);
  CHECK(a.chunk == b.chunk);
  CHECK(channel_grid(32, 160, 1024, true, 80).slices != a.slices);
}
