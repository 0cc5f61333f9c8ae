// Gradient rules: forward node + output gradients -> backward nodes.
//
//   void relu_grad(GradBuilder& g) {                       // dX = ReluGrad(dY, Y)
//     g.add("ReluGrad", {g.dy(0), g.output(0)}, {g.dx(0)});
//   }
//   r.add_rule("Relu", relu_grad);                         // in register_elementwise_gradients(GradRegistry& r)
//
// Why: rules are data. A rule sees one forward node, the names of its output
// gradients (dy(i) is "" when no gradient flows into output i) and which inputs
// need one (needs_dx(i)); it emits ordinary nodes (domain ai.trainrt for our
// backward ops) that write dx(i). The driver (autodiff/training_graph.h) sums
// fan-out, prunes unused nodes and checks shapes; rules never sum.
// Ops with a `prepare` hook are rewritten before differentiation to expose what
// their backward needs (Dropout's mask, SoftmaxCrossEntropyLoss's log_prob) and
// to switch to training semantics (BatchNormalization's running statistics).
#pragma once

#include <functional>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace trainrt {

class GradBuilder {
 public:
  GradBuilder(const Graph& g, const Node& n, std::vector<std::string> dys, std::vector<bool> needs,
              std::vector<Node>& out);

  const Graph& graph() const { return graph_; }
  const Node& node() const { return node_; }
  const std::string& input(size_t i) const { return node_.inputs.at(i); }
  const std::string& output(size_t i) const { return node_.outputs.at(i); }
  bool has_input(size_t i) const { return node_.has_input(i); }
  // Gradient flowing into output i ("" when none: treat as zero).
  const std::string& dy(size_t i) const { return dys_.at(i); }
  bool needs_dx(size_t i) const { return i < needs_.size() && needs_[i]; }
  // Where the rule writes the gradient of input i ("" when it is not needed, so
  // a rule may pass dx(i) straight to an optional output).
  std::string dx(size_t i) const;
  // A fresh value name for an intermediate: "<node>/grad/<what>".
  std::string tmp(const std::string& what) const;
  // A new float32 scalar/1-D constant initializer for the rule (e.g. negated pads).
  std::string constant(const std::string& what, Tensor value);

  // Appends a backward node; domain "" for ONNX ops, kTrainrtDomain for ours.
  void add(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
           std::map<std::string, Attribute> attrs = {}, const std::string& domain = kTrainrtDomain);
  void add_onnx(const std::string& op, std::vector<std::string> inputs, std::vector<std::string> outputs,
                std::map<std::string, Attribute> attrs = {}) {
    add(op, std::move(inputs), std::move(outputs), std::move(attrs), "");
  }

  // Constants created by rules; the driver moves them into the graph.
  std::map<std::string, Tensor> constants;

 private:
  const Graph& graph_;
  const Node& node_;
  std::vector<std::string> dys_;
  std::vector<bool> needs_;
  std::vector<Node>& out_;
  int counter_ = 0;
};

using GradRule = std::function<void(GradBuilder&)>;
// Rewrites a forward node in place for training (adds outputs, sets training mode).
// It may rename the inputs of other nodes (to rewire a renamed output), never add or
// remove nodes: the driver is iterating over them.
using PrepareRule = std::function<void(Node&, Graph&)>;

struct GradEntry {
  GradRule rule;
  PrepareRule prepare;              // optional
  std::set<size_t> differentiable;  // input indices that can carry a gradient (empty = all)
};

class GradRegistry {
 public:
  void add_rule(const std::string& op, GradRule rule, std::set<size_t> differentiable = {},
                PrepareRule prepare = nullptr, const std::string& domain = "");
  // An op whose outputs carry no gradient to its inputs on purpose (integer
  // outputs, masks). A parameter that reaches the loss only through one is an
  // error, not a silent zero.
  void add_non_differentiable(const std::string& op, const std::string& domain = "");

  const GradEntry* find(const std::string& domain, const std::string& op) const;
  bool is_non_differentiable(const std::string& domain, const std::string& op) const;
  std::vector<std::string> ops_with_rules() const;

 private:
  std::map<std::pair<std::string, std::string>, GradEntry> rules_;
  std::set<std::pair<std::string, std::string>> non_diff_;
};

// Every family's rules (explicit registration; autodiff/rules_*.cpp).
void register_all_gradients(GradRegistry& r);
const GradRegistry& gradients();

void register_elementwise_gradients(GradRegistry& r);
void register_conv_gradients(GradRegistry& r);
void register_conv_transpose_gradients(GradRegistry& r);
void register_resize_gradients(GradRegistry& r);
void register_pool_gradients(GradRegistry& r);
void register_norm_gradients(GradRegistry& r);
void register_group_norm_gradients(GradRegistry& r);
void register_gemm_gradients(GradRegistry& r);
void register_shape_gradients(GradRegistry& r);
void register_softmax_loss_gradients(GradRegistry& r);
void register_misc_gradients(GradRegistry& r);

}  // namespace trainrt
