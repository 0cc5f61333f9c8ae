// Happens-before edges that ThreadSanitizer cannot see by itself.
//
//   tsan_release(&slot);                        // producer, before tbb::task_group::run
//   tasks.run([&slot] { tsan_acquire(&slot); ... });
//
// Why: Debian's oneTBB (libtbb.so) is not built with -fsanitize=thread, so TSan does
// not see that handing a task to a worker orders everything before run() before the
// task, nor that task_group::wait() orders the task before everything after it. It
// then reports trainrt's plain reads in a task (of state written before the task was
// submitted) as races. These calls state exactly those two edges, at the handoff
// points only; any other access between threads must still be ordered by a mutex or
// an atomic, so a real race in the task bodies is still reported.
//
// In a build without TSan they are empty inline functions.
#pragma once

#if defined(__SANITIZE_THREAD__)
#define TRAINRT_TSAN 1
#elif defined(__has_feature)
#if __has_feature(thread_sanitizer)
#define TRAINRT_TSAN 1
#endif
#endif

#ifdef TRAINRT_TSAN
#include <sanitizer/tsan_interface.h>
#endif

namespace trainrt {

// Everything this thread did so far happens before a later tsan_acquire(key).
inline void tsan_release([[maybe_unused]] const void* key) {
#ifdef TRAINRT_TSAN
  __tsan_release(const_cast<void*>(key));
#endif
}

// Everything done before any earlier tsan_release(key) happens before what follows.
inline void tsan_acquire([[maybe_unused]] const void* key) {
#ifdef TRAINRT_TSAN
  __tsan_acquire(const_cast<void*>(key));
#endif
}

}  // namespace trainrt
