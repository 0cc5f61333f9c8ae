// Validation and shape inference over a whole graph.
//
//   validate_graph(g, reg, "model.onnx");   // structure, ops, opsets, attributes
//   infer_shapes(g, reg, "model.onnx");     // types every value, checks declared types
//
// Why two steps: validation collects every unsupported op of a model into one
// message (a user fixes them all at once), then inference runs each op's rule in
// topological order; the first shape error stops it, naming the node.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "graph/schema.h"

namespace trainrt {

// Oldest default-domain opset trainrt accepts without looking at each op.
inline constexpr int64_t kMinOpset = 13;

void validate_graph(const Graph& g, const OpRegistry& reg, const std::string& where);

// Inputs of node n whose values decide its outputs' shapes (Reshape's shape, Pad's
// pads and axes, Slice's starts..steps, Expand's and ConstantOfShape's shape, Range's
// scalars, the axes of Squeeze and Unsqueeze, Split's split): TensorRT's shape tensors.
// A graph input read there is specialised on its value (runtime/executor.h specialize()).
std::vector<size_t> shape_input_slots(const Node& n);

// Types every node output. `declared` holds types written in the file
// (value_info, graph outputs); a known dimension that disagrees is an error.
void infer_shapes(Graph& g, const OpRegistry& reg, const std::string& where,
                  const std::unordered_map<std::string, ValueInfo>& declared = {});

}  // namespace trainrt
