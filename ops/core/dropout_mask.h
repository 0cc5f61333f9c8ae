// Dropout's mask rule, written once for host and device: the reference and cpu kernels
// (ops/misc_loops.h) and the cuda kernels (ops/misc_cuda.cu) draw from these functions,
// and the CPU tests (tests/ops/test_dropout_mask.cpp) check the device's integer test
// and its four-at-a-time index walk against the reference's Dropout.
//
//   const uint64_t key = key_of(seed, attr_mix);     // per node and step
//   bool kept = draw(key, at) * 2^-53 >= ratio;       // the reference: u in [0, 1) as a double
//   bool kept = keep(key, at, threshold(ratio));      // the device: the same test in integers
//   keep4(key, at, lane_step, threshold(ratio), k);   // four values of one 16-byte access
//
// `at` is the element's row-major (NCHW) index, whatever its storage layout, so every
// backend and layout draws the Plain tensor's mask. Four consecutive storage offsets
// from a multiple of 4 have row-major indices at, at + s, at + 2s, at + 3s: s = 1 Plain,
// s = H*W ChannelsLast when C % 4 == 0 (the four are channels c..c+3 of one position);
// lane_step gives s, or 0 where the four are not so spaced.
//
// Plain C++ for g++; under nvcc the functions are __host__ __device__.
#pragma once

#include <math.h>

#include <cstdint>

#include "graph/tensor.h"  // TRAINRT_HOST_DEVICE (graph/float16.h)

namespace trainrt::dropout_mask {

TRAINRT_HOST_DEVICE inline uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// The mask's key: splitmix64(seed ^ attr_mix), attr_mix = splitmix64(the node's seed
// attribute), or 0 without one.
TRAINRT_HOST_DEVICE inline uint64_t key_of(uint64_t seed, uint64_t attr_mix) { return splitmix64(seed ^ attr_mix); }

// The 53-bit draw of the element at row-major index `at`: u = draw * 2^-53 in [0, 1).
TRAINRT_HOST_DEVICE inline uint64_t draw(uint64_t key, int64_t at) {
  return splitmix64(key + static_cast<uint64_t>(at) * 0x9E3779B97F4A7C15ull) >> 11;
}

// u >= ratio as integers: draw >= ceil(ratio * 2^53) (u = draw * 2^-53 exactly, and
// ratio * 2^53 is exact for a double ratio in [0, 1)).
TRAINRT_HOST_DEVICE inline uint64_t threshold(double ratio) {
  return static_cast<uint64_t>(ceil(ratio * 9007199254740992.0));
}
TRAINRT_HOST_DEVICE inline bool keep(uint64_t key, int64_t at, uint64_t threshold) {
  return draw(key, at) >= threshold;
}

// Whether four storage offsets 4g..4g+3 of a tensor may be drawn together, and their
// row-major spacing: 1 Plain, hw ChannelsLast with C % 4 == 0; 0: one at a time.
inline int64_t lane_step(bool channels_last, int64_t C, int64_t hw) {
  if (!channels_last) return 1;
  return C % 4 == 0 ? hw : 0;
}

// keep for the four elements at row-major indices at + k * step, k = 0..3.
TRAINRT_HOST_DEVICE inline void keep4(uint64_t key, int64_t at, int64_t step, uint64_t threshold, bool (&k)[4]) {
  for (int j = 0; j < 4; ++j) k[j] = keep(key, at + j * step, threshold);
}

}  // namespace trainrt::dropout_mask
