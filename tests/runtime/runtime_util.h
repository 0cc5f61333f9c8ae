// Helpers for the runtime tests: the naive executor (one zero-filled buffer per
// value, file order: what run_graph did before the planner) as the oracle, a small
// Wide ResNet training graph, bitwise comparison.
#pragma once

#include <cstring>
#include <unordered_map>

#include "autodiff/training_graph.h"
#include "graph/infer.h"
#include "models/wrn.h"
#include "runtime/training_session.h"
#include "test_util.h"

namespace trainrt::test {

// Every value of the run, each in its own buffer, nodes in file order.
inline TensorMap naive_run(const Graph& g, const TensorMap& feeds, const Backend& b, bool training, uint64_t seed) {
  Graph s = specialize(g, feeds);
  TensorMap values;
  for (const auto& [name, t] : s.initializers) values[name] = t;
  for (const auto& [name, t] : feeds) values[name] = t;
  for (size_t i = 0; i < s.nodes.size(); ++i) {
    const Node& n = s.nodes[i];
    KernelContext ctx{n, {}, {}, training, seed * 1000003u + i};
    for (const std::string& in : n.inputs) ctx.inputs.push_back(in.empty() ? nullptr : &values.at(in));
    for (const std::string& out : n.outputs)
      if (!out.empty()) values[out] = Tensor(s.info(out).dtype, shape_dims(*s.info(out).shape));
    for (const std::string& out : n.outputs) ctx.outputs.push_back(out.empty() ? nullptr : &values.at(out));
    b.kernel(n)(ctx);
  }
  return values;
}

inline bool bitwise_equal(const Tensor& a, const Tensor& b) {
  return a.dtype() == b.dtype() && a.dims() == b.dims() && std::memcmp(a.raw(), b.raw(), a.nbytes()) == 0;
}

// The Fashion-MNIST Wide ResNet at small widths, typed.
inline Graph small_wrn(std::vector<int64_t> widths = {4, 8, 12, 16}) {
  WrnOptions o = wrn_options_for_dataset("fashion-mnist");
  o.widths = std::move(widths);
  o.dropout_ratio = 0.2f;  // masks that matter
  Graph g = build_wide_resnet(o);
  validate_graph(g, registry().schemas, "wrn");
  infer_shapes(g, registry().schemas, "wrn");
  return g;
}

inline TrainingGraph wrn_training(const Graph& g, const std::string& optimizer = "sgd") {
  TrainingOptions o;
  o.optimizer = optimizer;
  o.momentum = 0.9f;
  o.weight_decay = 5e-4f;
  return build_training_graph(g, o);
}

inline TensorMap wrn_batch(int64_t n, uint64_t seed) {
  Tensor labels(DataType::Int64, {n});
  for (int64_t i = 0; i < n; ++i)
    labels.data<int64_t>()[i] = static_cast<int64_t>((seed + 3 * static_cast<uint64_t>(i)) % 10);
  return {{"input", random_tensor(DataType::Float32, {n, 1, 28, 28}, seed)}, {"labels", labels}};
}

}  // namespace trainrt::test
