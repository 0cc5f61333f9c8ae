// A training step over a training graph: run, then write state updates back.
//
//   TrainingSession s(build_training_graph(forward, opts), make_backend("cpu"), /*seed=*/0);
//   double loss = s.step({{"input", x}, {"labels", y}}, /*lr=*/0.01f);
//   Graph trained = s.trained_forward(forward);   // same interface, updated initializers
//
// Why: parameters, optimizer state and BatchNormalization running statistics are
// initializers of the training graph; each step's ".updated" outputs replace
// them (the planner will make this in place). Dropout masks derive from the
// session seed and the step number, so a run is reproducible.
#pragma once

#include <memory>

#include "autodiff/training_graph.h"
#include "runtime/executor.h"

namespace trainrt {

class TrainingSession {
 public:
  TrainingSession(TrainingGraph t, std::unique_ptr<Backend> backend, uint64_t seed = 0);

  // One step on a batch (model inputs + labels); returns the loss.
  double step(const TensorMap& batch, float lr);
  // Forward outputs (e.g. logits) of the last step.
  const TensorMap& last_outputs() const { return last_; }

  const TrainingGraph& training() const { return t_; }
  const Tensor& state(const std::string& name) const { return t_.graph.initializers.at(name); }
  int64_t steps_done() const { return steps_; }
  // Everything a checkpoint must hold to continue exactly: the names of the
  // training graph's state (parameters, optimizer state, BatchNormalization
  // running statistics, optimizer.step), read with state() and restored with
  // set_state(); set_steps_done() restores the step counter that seeds Dropout.
  std::vector<std::string> state_names() const;
  void set_state(const std::string& name, const Tensor& value);
  void set_steps_done(int64_t steps) { steps_ = steps; }
  // The forward graph with this session's trained initializers (parameters and
  // BatchNormalization running statistics); inputs, outputs and nodes unchanged.
  Graph trained_forward(const Graph& forward) const;

 private:
  TrainingGraph t_;
  std::unique_ptr<Backend> backend_;
  uint64_t seed_;
  int64_t steps_ = 0;
  TensorMap last_;
};

}  // namespace trainrt
