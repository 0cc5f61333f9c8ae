// Gradient rules of InstanceNormalization and GroupNormalization (ops/group_norm.cpp).
//
//   InstanceNormalization(X, scale, B; epsilon) -> Y
//   (dX, dScale, dB) = GroupNormalizationGrad(dY, X, scale; num_groups = 0, epsilon)
//   GroupNormalization(X, scale, bias; num_groups, epsilon) -> Y
//   (dX, dScale, dBias) = GroupNormalizationGrad(dY, X, scale; num_groups, epsilon)
//
// num_groups 0 is one group per channel. dScale and dBias come out in scale's shape (C,
// or num_groups for opset 18's per-group affine), so no further sum is needed. The
// backward recomputes the statistics from X (one more read of X, no saved outputs).
// PyTorch's decomposed GroupNorm (Reshape -> InstanceNormalization -> Reshape -> Mul ->
// Add) needs nothing more: its scale/B are constants (ones, zeros) that need no gradient.
#include "autodiff/gradient.h"

namespace trainrt {

namespace {

void group_norm_grad(GradBuilder& g) {
  const Node& n = g.node();
  std::vector<std::string> outs{g.dx(0), g.dx(1), g.dx(2)};
  while (outs.size() > 1 && outs.back().empty()) outs.pop_back();
  const int64_t groups = n.op_type == "InstanceNormalization" ? 0 : n.attr_int("num_groups", 0);
  g.add("GroupNormalizationGrad", {g.dy(0), g.input(0), g.input(1)}, std::move(outs),
        {{"num_groups", Attribute::of_int(groups)}, {"epsilon", Attribute::of_float(n.attr_float("epsilon", 1e-5f))}});
}

}  // namespace

void register_group_norm_gradients(GradRegistry& r) {
  r.add_rule("InstanceNormalization", group_norm_grad, /*differentiable=*/{0, 1, 2});
  r.add_rule("GroupNormalization", group_norm_grad, /*differentiable=*/{0, 1, 2});
}

}  // namespace trainrt
