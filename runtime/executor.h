// Runs a graph on a backend for given inputs.
//
//   auto backend = make_backend("cpu");
//   Graph concrete = specialize(g, {{"input", x}});          // every shape known
//   std::map<std::string, Tensor> out = run_graph(g, {{"input", x}}, *backend);
//
// Why: kernels get preallocated outputs, so the graph is first specialised to the
// feeds' shapes (symbolic batch dims become numbers) by re-running shape
// inference. The planner (memory arena, order, buckets) will replace the
// per-value allocation here without changing this interface.
#pragma once

#include <map>
#include <string>

#include "runtime/backend.h"

namespace trainrt {

using TensorMap = std::map<std::string, Tensor>;

struct RunOptions {
  bool training = false;
  uint64_t seed = 0;
  // Values to return besides the graph outputs (e.g. intermediates for tests).
  std::vector<std::string> extra_outputs;
};

// Copies `g` with graph input shapes taken from `feeds` and re-infers all shapes.
// A feed with the wrong dtype, rank or a fixed dimension that differs is BadInput.
Graph specialize(const Graph& g, const TensorMap& feeds);

TensorMap run_graph(const Graph& g, const TensorMap& feeds, const Backend& backend, const RunOptions& opts = {});

}  // namespace trainrt
