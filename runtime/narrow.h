// Which float32 values of a step a backend stores in 16 bits under --precision bf16/fp16.
//
//   std::map<std::string, DataType> n = choose_narrowed(s, keep, backend, MathPrecision::bf16);
//   PlanOptions o;  o.narrowed = n;  Plan p = build_plan(s, o);   // those values: 2 bytes each
//   // the executor marks their tensors Tensor::narrowed()
//
// Why: under bf16/fp16 the convolutions read 16-bit copies of their activations and
// gradients. Where every reader of a value rounds it anyway, storing it rounded halves
// its memory and traffic and saves the reader's conversion pass, with the same bits: the
// writer's rounding to nearest even is the one each reader would do (round_to_math). So a
// value is stored in 16 bits when
//   - it is a float32 value a node of the step writes, not a feed, state, initializer or
//     kept output (the caller and the NaN/Inf checks see float32; a fetched value is kept);
//   - its writer's kernel declared the output (Backend::narrow, ops/core/kernel.h NodeSlots);
//   - it has readers, and every reader's kernel declared the input slot, and either its
//     writer rounds it in this precision (math_rounded_outputs: a convolution's Y or dX, a
//     batch norm's Y or dX; the float32 value is then a 16-bit number, so any reader gets
//     the same bits) or every reader rounds that input (math_rounded_inputs: a
//     convolution's x, dY or X).
// A value with an undeclared reader stays float32, still rounded by its writer, so the
// numerics do not depend on what is stored narrow.
// Values the host reads in between (a host fallback) are widened on the way
// (run_on_plain_copies). The reference and cpu backends declare nothing: they keep float32.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "runtime/backend.h"

namespace trainrt {

// `keep`: values read after the step (outputs, fetched values); `state_updates`: values
// written into state. Empty for MathPrecision::fp32.
std::map<std::string, DataType> choose_narrowed(const Graph& g, const std::vector<std::string>& keep,
                                                const std::vector<std::string>& state_updates, const Backend& backend,
                                                MathPrecision m);

}  // namespace trainrt
