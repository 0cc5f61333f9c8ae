// The training fusion of Relu + Dropout's backward:
//   Y = Relu(X) (or BatchNormalizationRelu), (Z, mask) = Dropout(Y, ratio, training_mode)
//   dY = DropoutGrad(dZ, mask, ratio, training_mode); dX = ReluGrad(dY, Y)
// becomes dX = DropoutReluGrad(dZ, Z, ratio, training_mode) (ops/misc.cpp: exact, since
// Z > 0 exactly where the mask kept a positive Y). What it saves: Y is no longer read
// by the backward, so it dies right after the Dropout instead of living until the
// block's backward (Z lives there anyway: the next Conv's weight gradient reads it);
// the mask, read by nobody now, is no longer written; and one pass over dY goes.
// The Relu's own forward stays where it is (fused into BatchNormalizationRelu in the
// Wide ResNet), so no forward node moves and Dropout masks, seeded by the node's
// index (runtime/executor.cpp), stay the same.
#include <string>
#include <unordered_set>

#include "passes/fuse_util.h"
#include "passes/passes.h"

namespace trainrt::passes {

namespace {

// DropoutGrad's optional inputs (ratio, training_mode) are the Dropout's (inputs 1, 2),
// as the gradient rule writes them (autodiff/rules_misc.cpp).
bool same_options(const Node& dropout, const Node& grad) {
  for (size_t k = 1; k <= 2; ++k) {
    const std::string a = dropout.has_input(k) ? dropout.inputs[k] : "";
    const std::string b = grad.has_input(k + 1) ? grad.inputs[k + 1] : "";
    if (a != b) return false;
  }
  return true;
}

}  // namespace

size_t fuse_dropout_relu_grad(Graph& g) {
  std::unordered_set<std::string> masks;  // of the Dropouts whose gradient was fused
  const size_t fused = sweep(g, [&](size_t j, const Uses& u, std::vector<bool>& dead) {
    const Node& relu_grad = g.nodes[j];
    if (!is_trainrt(relu_grad, "ReluGrad") || relu_grad.input_count() != 2 || !relu_grad.has_output(0)) return false;
    const std::string &dy = relu_grad.inputs[0], &y = relu_grad.inputs[1];
    if (dy.empty() || y.empty()) return false;
    const size_t i = u.producer_of(dy);
    if (i == npos || dead[i] || u.sole_reader(dy) != j) return false;
    const Node& drop_grad = g.nodes[i];
    if (!is_trainrt(drop_grad, "DropoutGrad") || !drop_grad.has_input(0) || !drop_grad.has_input(1)) return false;
    const size_t d = u.producer_of(drop_grad.inputs[1]);
    if (d == npos) return false;
    const Node& dropout = g.nodes[d];
    if (!is_onnx(dropout, "Dropout") || !dropout.has_input(0) || dropout.inputs[0] != y || !dropout.has_output(0) ||
        dropout.outputs.size() < 2 || dropout.outputs[1] != drop_grad.inputs[1] || !same_options(dropout, drop_grad))
      return false;
    Node f = drop_grad;
    f.op_type = "DropoutReluGrad";
    f.inputs[1] = dropout.outputs[0];
    f.outputs = {relu_grad.outputs[0]};
    f.name = fused_name(drop_grad, relu_grad);
    masks.insert(dropout.outputs[1]);
    g.nodes[j] = std::move(f);
    dead[i] = true;
    return true;
  });
  if (masks.empty()) return fused;
  // A mask nobody reads any more is not written: Dropout's mask output is optional.
  const Uses after(g);
  for (Node& n : g.nodes)
    if (is_onnx(n, "Dropout") && n.outputs.size() == 2 && masks.count(n.outputs[1]) &&
        !after.readers.count(n.outputs[1]) && !after.graph_outputs.count(n.outputs[1])) {
      g.values.erase(n.outputs[1]);
      n.outputs.resize(1);
    }
  return fused;
}

}  // namespace trainrt::passes
