// The training graph: forward + loss + backward + optimizer nodes in one IR.
//
//   TrainingOptions o;  o.optimizer = "sgd";  o.momentum = 0.9f;  o.weight_decay = 5e-4f;
//   TrainingGraph t = build_training_graph(forward, o);
//   // feeds: the model's inputs, t.labels (int64 [N]) and t.lr (float32 scalar);
//   // after a step, each (produced, state) pair in t.updates replaces the state.
//
// Why: backward and optimizer nodes are ordinary nodes, so passes, the planner and
// the exporter see one graph. The loss is appended when the model ends in logits
// ([N,C] or [N,C,d...]: SoftmaxCrossEntropyLoss, mean); a model whose only output
// is a float scalar is used as its own loss.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "graph/ir.h"

namespace trainrt {

struct TrainingOptions {
  std::vector<std::string> freeze;  // initializers that stay fixed
  std::string optimizer = "sgd";    // sgd | adam | adamw | none (gradients only)
  float momentum = 0.f, dampening = 0.f, weight_decay = 0.f;
  bool nesterov = false;
  float beta1 = 0.9f, beta2 = 0.999f, epsilon = 1e-8f;
  std::string labels_name = "labels";
  std::string lr_name = "lr";
  // Loss scaling (fp16 training): the backward pass starts from a float32 scalar graph
  // input of this name instead of 1, so every gradient comes out multiplied by it, and
  // each parameter's gradient is divided by it again (a Div node) before the optimizer
  // reads it. A power-of-two scale changes no bit in fp32; in fp16 arithmetic it keeps
  // small gradients from rounding to zero. Empty: no loss scaling.
  std::string loss_scale_name;
};

struct TrainingGraph {
  Graph graph;
  std::string loss;        // float scalar
  std::string labels;      // label input added for the appended loss ("" when the model has its own)
  std::string lr;          // float32 scalar input ("" when optimizer == none)
  std::string loss_scale;  // float32 scalar input ("" without loss scaling)
  // With loss scaling: param -> its gradient before the division by the scale (the
  // values a non-finite check must look at to find an overflow of the scaled pass).
  std::map<std::string, std::string> scaled_gradients;
  std::vector<std::string> params;               // trainable, in the order their gradients complete
  std::map<std::string, std::string> gradients;  // param -> its gradient value
  // After each step: value computed by the graph -> the initializer it replaces
  // (updated parameters, optimizer state, BatchNormalization running statistics).
  std::vector<std::pair<std::string, std::string>> updates;
  std::vector<std::string> optimizer_state;  // initializers added for the optimizer
  size_t forward_nodes = 0;                  // nodes [0, forward_nodes) are the forward pass
};

// Throws BadInput when a parameter reaches the loss only through a
// non-differentiable op (naming the op and the path) or when no loss can be found.
TrainingGraph build_training_graph(const Graph& forward, const TrainingOptions& opts);

// Trainable parameters of a forward graph: float initializers, minus frozen ones
// and BatchNormalization running statistics (inputs 3 and 4).
std::vector<std::string> trainable_parameters(const Graph& g, const std::vector<std::string>& freeze);

}  // namespace trainrt
