// Parallel loops for the cpu backend's per-element kernels (oneTBB).
//
//   // the reference kernel: one call over everything
//   update(0, n);
//   // the cpu kernel: the same function over contiguous chunks, in parallel
//   parallel_chunks(n, [&](int64_t begin, int64_t end) { update(begin, end); });
//   // one kernel template for both: for_range<kParallel>(n, update)
//
// Why: Dropout, Sum, SumToShape's copy and the optimizer updates are memory bound
// and were single-threaded reference loops. Written as one function of a range
// [begin, end) whose every element depends on that element alone, the reference
// and the cpu kernel run the same code and agree bit for bit however the range is
// split. Chunks of at least kGrain elements keep each one vectorisable and the task
// overhead small. Threads are oneTBB's, limited by `--threads` through
// tbb::global_control (launch/train_util.cpp).
#pragma once

#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>

#include <cstdint>

namespace trainrt {

constexpr int64_t kGrain = 16384;  // elements: 64 KB of fp32

// Calls f(begin, end) over disjoint chunks covering [0, n), in parallel when n is
// more than one chunk.
template <typename F>
void parallel_chunks(int64_t n, F&& f) {
  if (n <= 0) return;
  if (n <= kGrain) return f(int64_t{0}, n);
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, kGrain),
                    [&](const tbb::blocked_range<int64_t>& r) { f(r.begin(), r.end()); });
}

// f(0, n) for the reference kernel, parallel_chunks(n, f) for the cpu kernel.
template <bool kParallel, typename F>
void for_range(int64_t n, F&& f) {
  if constexpr (kParallel)
    parallel_chunks(n, f);
  else if (n > 0)
    f(int64_t{0}, n);
}

}  // namespace trainrt
