// What a kernel declares where it registers, beside the kernel itself: which arguments
// it takes in Blocked16c (ops/core/kernel.h LayoutRule) and which outputs it may write
// over an input (InPlaceRule). The rules common to many kernels:
//
//   add_if_schema(r, "cpu", "", "Conv", conv_cpu, facts::fixed({{A, P, P}, {A}}));
//   add_if_schema(r, "cpu", "", "Relu", relu_cpu, facts::elementwise);
//   r.kernels.set_in_place("", "Relu", facts::in_place({{0, 0}}));
//
// Layouts, Any: convolution forward/backward and pooling reorder each argument on its
// own, so X, Y, Z, dY, dX may each be blocked or not (weights and biases stay
// row-major). Shared: batch normalization (one data descriptor for X/Y, dY/X/dX),
// MaxPoolGrad (a loop over planes in one layout) and every elementwise kernel over
// same-shape tensors: a position-independent loop gives the same bits in any layout as
// long as all its arguments share it. The cpu backend uses these only where oneDNN has
// nChw16c kernels (AVX-512; see Backend::blocked_layouts in runtime/backend.h). A kernel
// declaring blocked arguments must describe them with dnnl_util::desc_of (or be
// elementwise over same-shape arguments) and fall back through
// dnnl_util::run_reference, which converts blocked arguments.
//
// In place: an op declares the pairs once for every backend (the plan does not depend
// on the backend), so each backend's kernel for the op must be alias-safe for them:
// every element of the input is read before the same element of the output is written.
// A rule sees the node, so a variadic op pairs every output with its input by the
// argument counts (MultiSGD, MultiAdam: ops/optimizer.cpp multi_in_place).
#pragma once

#include <string>
#include <vector>

#include "ops/core/kernel.h"

namespace trainrt::facts {

inline constexpr SlotLayout P = SlotLayout::Plain, A = SlotLayout::Any, S = SlotLayout::Shared,
                            C = SlotLayout::Converted;

// True when every named value (empty names skipped) has one known shape.
bool same_shapes(const Graph& g, const std::vector<std::string>& values);
// True when all of n's inputs and outputs have one known shape.
bool node_shapes_agree(const Graph& g, const Node& n);
// The same layouts for every node.
LayoutRule fixed(NodeLayouts l);
// Every argument Shared when all have one shape, else every argument Plain.
NodeLayouts elementwise(const Graph& g, const Node& n);
// Clip and ClipGrad: the data arguments (X, Y; dY, X, dX) Shared when they have one
// shape, the scalar bounds Plain.
NodeLayouts clip(const Graph& g, const Node& n);
// SumToShape(dY, like) where the shapes agree (a copy): dY and the output Shared, `like`
// (which only lends its dims) Any.
NodeLayouts sum_to_shape(const Graph& g, const Node& n);
// Dropout draws its mask from each element's row-major index, so any shared layout
// draws the same mask: data, output and mask Shared (ratio, training_mode Plain); its
// gradients DropoutGrad (dY, mask; dX) and DropoutReluGrad (dZ, Z; dX) are elementwise.
NodeLayouts dropout(const Graph& g, const Node& n);
NodeLayouts dropout_grad(const Graph& g, const Node& n);

// 16-bit storage (ops/core/kernel.h NodeSlots, runtime/narrow.h): the same slots for every
// node, `inputs` read and `outputs` written in 16 bits where the value is float32.
NarrowRule narrow(std::vector<size_t> inputs, std::vector<size_t> outputs);
inline NarrowRule narrow_float_outputs(std::vector<size_t> outputs) { return narrow({}, std::move(outputs)); }
inline NarrowRule narrow_float_inputs(std::vector<size_t> inputs) { return narrow(std::move(inputs), {}); }

// The same pairs for every node.
InPlaceRule in_place(std::vector<InPlacePair> pairs);
// Binary elementwise ops with broadcasting: the output over input 0 when input 0 has
// the output's dims; for commutative ops the output over input 1 when only input 1 has.
InPlaceRule in_place_binary(bool commutative);

}  // namespace trainrt::facts
