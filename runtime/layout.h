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
//
// Parameters are state, so they stay Plain (the optimizer, buckets and checkpoints see
// them row-major); a kernel that wants one blocked anyway declares the slot Converted
// (ops/core/kernel.h), and add_layout_copies, run on the specialised graph before the
// plan, gives it a value of the step's own to keep blocked:
//
//   add_layout_copies(s, backend);   // W -> Identity -> "W/blocked" -> every Converted reader
//   Plan plan = build_plan(s, o);    // "W/blocked" ChannelsLast: the cuda convolutions' KRSC
//
// An input slot: one Identity per parameter, written once per step and read by every
// Converted reader of it (its other readers keep the parameter). An output slot: the
// kernel writes "V/blocked", an Identity converts it into V for V's readers (a weight
// gradient reaches the optimizer and the buckets Plain). Only where the value's shape
// fits the backend's blocked layout (layout_fits: a 1x1 or depthwise filter is the same
// bytes in both orders, so it needs no copy), except under bf16/fp16: there such a
// parameter gets a copy "W/narrow" in its own layout where its readers take it in 16 bits
// (runtime/narrow.h stores it so), rounded once per step instead of by every convolution
// pass; its gradient needs no conversion and gets none. The nodes are appended to the graph, so
// every other node keeps its index (messages name nodes by it; Dropout's masks derive
// from it); the plan's topological order places them: in file order a copy just before
// its first reader, a gradient's conversion once no earlier node is ready.
#pragma once

#include <vector>

#include "runtime/backend.h"
#include "runtime/plan.h"

namespace trainrt {

std::vector<Layout> choose_layouts(const Plan& plan, const Backend& backend);

// Adds the conversions of Converted slots to `g` (specialised: shapes known); returns how
// many Identity nodes it added. Nothing where the backend reports no blocked slots. `m`:
// the step's precision (the "W/narrow" copies under bf16/fp16).
size_t add_layout_copies(Graph& g, const Backend& backend, MathPrecision m = MathPrecision::fp32);

}  // namespace trainrt
