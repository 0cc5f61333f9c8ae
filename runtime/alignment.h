// The alignment of every buffer the planner places and every backend allocates: arena
// offsets are multiples of it from an arena's start (runtime/plan.h), and
// Backend::allocate returns memory aligned to it, so a kernel may take 16-byte vector
// loads and oneDNN/cuDNN their aligned paths at any planned offset.
#pragma once

#include <cstddef>

namespace trainrt {

constexpr size_t kPlanAlignment = 64;
// bytes rounded up to a multiple of kPlanAlignment (at least one).
inline size_t align_up(size_t bytes) {
  return bytes == 0 ? kPlanAlignment : (bytes + kPlanAlignment - 1) / kPlanAlignment * kPlanAlignment;
}

}  // namespace trainrt
