// The loop machinery behind ops/core/parallel.h, compiled once: oneTBB's parallel_for
// and parallel_invoke, or in a TSan build plain std::threads that TSan sees fork and
// join (Debian's libtbb is not instrumented; see the header).
#include "ops/core/parallel.h"

#include <exception>

#include "graph/tsan.h"

#ifdef TRAINRT_TSAN
#include <thread>
#include <vector>
#else
#include <tbb/blocked_range.h>
#include <tbb/parallel_for.h>
#include <tbb/parallel_invoke.h>
#endif

namespace trainrt::parallel_detail {

void ranges(int64_t n, int64_t grain, RangeCall call, void* body) {
#ifdef TRAINRT_TSAN
  const int64_t parts = std::min<int64_t>(4, (n + grain - 1) / grain);
  if (parts <= 1) return call(body, 0, n);
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(parts));
  for (int64_t i = 1; i < parts; ++i)
    threads.emplace_back([call, body, &errors, i, n, parts] {
      try {
        call(body, n * i / parts, n * (i + 1) / parts);
      } catch (...) {
        errors[static_cast<size_t>(i)] = std::current_exception();  // rethrown after the join, as oneTBB does
      }
    });
  try {
    call(body, 0, n / parts);
  } catch (...) {
    errors[0] = std::current_exception();
  }
  for (std::thread& t : threads) t.join();
  for (const std::exception_ptr& e : errors)
    if (e) std::rethrow_exception(e);
#else
  tbb::parallel_for(tbb::blocked_range<int64_t>(0, n, grain),
                    [call, body](const tbb::blocked_range<int64_t>& r) { call(body, r.begin(), r.end()); });
#endif
}

void pair(Call call_a, void* a, Call call_b, void* b) {
#ifdef TRAINRT_TSAN
  std::exception_ptr error;
  std::thread other([&] {
    try {
      call_b(b);
    } catch (...) {
      error = std::current_exception();
    }
  });
  try {
    call_a(a);
  } catch (...) {
    other.join();
    throw;
  }
  other.join();
  if (error) std::rethrow_exception(error);
#else
  tbb::parallel_invoke([call_a, a] { call_a(a); }, [call_b, b] { call_b(b); });
#endif
}

}  // namespace trainrt::parallel_detail
