// Which arena values a backend keeps in a blocked layout between its kernels.
//
//   Plan plan = build_plan(s, o);
//   std::vector<Layout> l = choose_layouts(plan, backend);   // one per plan value
//   // the executor binds value v's buffer with Tensor::set_layout(l[v])
//
// Why: oneDNN's convolutions run in nChw16c (the cpu backend's blocked layout); a row-major tensor between two of them
// costs a reorder out and a reorder back in, each a full pass over the activation,
// for every convolution, forward and backward. Kernels declare per argument what they
// take (ops/core/kernel.h: Plain, Any, Shared); a value is stored Blocked16c when its
// shape allows it (rank 4, C a multiple of 16: same bytes, so the memory plan is
// unchanged), its producer and every reader take it, the Shared arguments of a node
// agree, an in-place output matches the input it overwrites, and nobody outside the
// step sees it (feeds, state and kept values stay Plain). The constraints only ever
// remove values, so iterating them to a fixed point terminates. The cuda backend's
// blocked layout is ChannelsLast (NHWC: its cuDNN convolutions run on tensor cores
// without transposing), chosen by the same rules (Backend::blocked_layout).
#pragma once

#include <vector>

#include "runtime/backend.h"
#include "runtime/plan.h"

namespace trainrt {

std::vector<Layout> choose_layouts(const Plan& plan, const Backend& backend);

}  // namespace trainrt
