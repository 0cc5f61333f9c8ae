// Helpers for the runtime tests: the naive executor (one zero-filled buffer per
// value, file order: what run_graph did before the planner) as the oracle, a small
// Wide ResNet training graph, bitwise comparison.
#pragma once

#include <cstring>
#include <exception>
#include <functional>
#include <thread>
#include <unordered_map>
#include <vector>

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
    ctx.node_index = i;  // as the executor sets it: BatchNormalizationReluDropout draws from it (ops/fused.h)
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

// Runs f(rank) for ranks 0..world-1, each on a thread of its own (a LocalGroup's ranks),
// and rethrows the first rank's exception once all have ended.
inline void on_ranks(int world, const std::function<void(int)>& f) {
  std::vector<std::thread> threads;
  std::vector<std::exception_ptr> errors(static_cast<size_t>(world));
  for (int r = 0; r < world; ++r)
    threads.emplace_back([&, r] {
      try {
        f(r);
      } catch (...) {
        errors[static_cast<size_t>(r)] = std::current_exception();
      }
    });
  for (auto& t : threads) t.join();
  for (auto& e : errors)
    if (e) std::rethrow_exception(e);
}

}  // namespace trainrt::test
