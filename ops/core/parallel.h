// Parallel loops for the cpu backend's kernels (oneTBB; plain std::threads under TSan).
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
// tbb::global_control (training/run_setup.cpp).
//
// Every parallel loop of the cpu kernels goes through parallel_ranges(). In a TSan
// build it forks std::threads and joins them instead of calling oneTBB: Debian's
// libtbb is not instrumented, so TSan would not see oneTBB's fork/join ordering and
// would flag oneTBB's own inlined internals; with plain threads it sees exactly the
// kernels' own accesses from several threads, which is what the executor's TSan run
// (tools/ci_reliability.sh tsan, test_runtime) checks.
//
// for_rows() splits a loop over rows (a softmax row, a padded row) the same way, at
// whole rows; parallel_copy() is the copy of the shape ops (Reshape, Flatten, ...).
//
// The loop body reaches oneTBB (or the threads) through one function pointer per chunk
// (ops/core/parallel.cpp), not as a template argument: oneTBB's parallel_for instantiated
// for every kernel's lambda, op by dtype, was most of the compile time of the
// elementwise and shape-op families (ops/elementwise_cpu.cpp: 45 s of g++, 100 s under
// clang's ASan+UBSan), and a call per chunk of at least kGrain elements costs nothing.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <type_traits>

namespace trainrt {

constexpr int64_t kGrain = 16384;  // elements: 64 KB of fp32

namespace parallel_detail {
// The loop machinery, compiled once (ops/core/parallel.cpp): `call(body, begin, end)`
// over the ranges, `call(a)` and `call(b)` at the same time. Exceptions of any part are
// rethrown on the calling thread after every part ended.
using RangeCall = void (*)(void* body, int64_t begin, int64_t end);
using Call = void (*)(void* fn);
void ranges(int64_t n, int64_t grain, RangeCall call, void* body);
void pair(Call call_a, void* a, Call call_b, void* b);

template <typename F>
void* erase(F& f) {
  return const_cast<void*>(static_cast<const void*>(std::addressof(f)));
}
}  // namespace parallel_detail

// Calls f(begin, end) over disjoint ranges covering [0, n), each at least `grain`
// items long where n allows, in parallel (oneTBB; in a TSan build up to 4 std::threads,
// more than the CI machine's cores, so the ranges really overlap in time).
template <typename F>
void parallel_ranges(int64_t n, int64_t grain, F&& f) {
  if (n <= 0) return;
  using Body = std::remove_reference_t<F>;
  parallel_detail::ranges(
      n, std::max<int64_t>(grain, 1),
      [](void* body, int64_t begin, int64_t end) { (*static_cast<Body*>(body))(begin, end); },
      parallel_detail::erase(f));
}

// Runs a() and b() at the same time and returns when both have; an exception of
// either is rethrown after both ended (oneTBB's parallel_invoke; a std::thread under TSan).
template <typename A, typename B>
void parallel_pair(A&& a, B&& b) {
  using FA = std::remove_reference_t<A>;
  using FB = std::remove_reference_t<B>;
  parallel_detail::pair([](void* fn) { (*static_cast<FA*>(fn))(); }, parallel_detail::erase(a),
                        [](void* fn) { (*static_cast<FB*>(fn))(); }, parallel_detail::erase(b));
}

// Calls f(begin, end) over disjoint chunks covering [0, n), in parallel when n is
// more than one chunk.
template <typename F>
void parallel_chunks(int64_t n, F&& f) {
  if (n <= 0) return;
  if (n <= kGrain) return f(int64_t{0}, n);
  parallel_ranges(n, kGrain, f);
}

// f(0, n) for the reference kernel, parallel_chunks(n, f) for the cpu kernel.
template <bool kParallel, typename F>
void for_range(int64_t n, F&& f) {
  if constexpr (kParallel)
    parallel_chunks(n, f);
  else if (n > 0)
    f(int64_t{0}, n);
}

// f(0, rows) for the reference kernel; for the cpu kernel, f over chunks of whole rows
// of `row_cost` elements each, at least kGrain elements per chunk (a row is never split).
template <bool kParallel, typename F>
void for_rows(int64_t rows, int64_t row_cost, F&& f) {
  if (rows <= 0) return;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, row_cost));
  if (!kParallel || rows <= grain) return f(int64_t{0}, rows);
  parallel_ranges(rows, grain, f);
}

// memcpy(dst, src, bytes) in parallel chunks; nothing when dst == src (an in-place copy).
inline void parallel_copy(void* dst, const void* src, size_t bytes) {
  if (dst == src || bytes == 0) return;
  auto* d = static_cast<std::byte*>(dst);
  const auto* s = static_cast<const std::byte*>(src);
  constexpr size_t kBytes = kGrain * 4;  // one grain of fp32 per task
  if (bytes <= kBytes) return void(std::memcpy(d, s, bytes));
  parallel_ranges(static_cast<int64_t>((bytes + kBytes - 1) / kBytes), 1, [&](int64_t c0, int64_t c1) {
    const size_t from = static_cast<size_t>(c0) * kBytes;
    std::memcpy(d + from, s + from, std::min(static_cast<size_t>(c1 - c0) * kBytes, bytes - from));
  });
}

}  // namespace trainrt
