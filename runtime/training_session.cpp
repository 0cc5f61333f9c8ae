#include "runtime/training_session.h"

#include <cmath>

#include "graph/error.h"

namespace trainrt {

TrainingSession::TrainingSession(TrainingGraph t, std::unique_ptr<Backend> backend, uint64_t seed)
    : t_(std::move(t)), backend_(std::move(backend)), seed_(seed) {}

double TrainingSession::step(const TensorMap& batch, float lr) {
  TensorMap feeds = batch;
  if (!t_.lr.empty()) {
    Tensor l(DataType::Float32, {});
    l.data<float>()[0] = lr;
    feeds[t_.lr] = l;
  }
  RunOptions ro;
  ro.training = true;
  ro.seed = seed_ * 0x9e3779b97f4a7c15ull + static_cast<uint64_t>(steps_);
  last_ = run_graph(t_.graph, feeds, *backend_, ro);
  for (const auto& [produced, state] : t_.updates) t_.graph.initializers[state] = last_.at(produced);
  ++steps_;
  return last_.at(t_.loss).get_as_double(0);
}

std::vector<std::string> TrainingSession::state_names() const {
  std::vector<std::string> names;
  for (const auto& [produced, state] : t_.updates) names.push_back(state);
  return names;
}

void TrainingSession::set_state(const std::string& name, const Tensor& value) {
  auto it = t_.graph.initializers.find(name);
  if (it == t_.graph.initializers.end()) throw_bad_input("state '" + name + "'", "is not a state of this training graph");
  if (it->second.dtype() != value.dtype() || it->second.dims() != value.dims())
    throw_bad_input("state '" + name + "'", "expected " + std::string(dtype_name(it->second.dtype())) + " " +
                                                dims_to_string(it->second.dims()) + ", got " +
                                                dtype_name(value.dtype()) + " " + dims_to_string(value.dims()));
  it->second = value.clone();
}

Graph TrainingSession::trained_forward(const Graph& forward) const {
  Graph g = forward;
  for (auto& [name, tensor] : g.initializers) {
    auto it = t_.graph.initializers.find(name);
    if (it != t_.graph.initializers.end()) tensor = it->second.clone();
  }
  return g;
}

}  // namespace trainrt
