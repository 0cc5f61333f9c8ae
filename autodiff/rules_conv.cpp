// Gradient rule of Conv (ops/conv.cpp).
//
//   Conv(X, W, [B]) -> Y      (dX, dW, dB) = ConvGrad(dY, X, W)   attributes copied
//
// One backward node for all three gradients, so a backend computes them in one
// pass over dY (oneDNN and cuDNN have separate data/weights primitives; the cpu
// kernel may split it). Outputs not needed are "" and are not computed.
#include "autodiff/gradient.h"

namespace trainrt {

namespace {

void conv_grad(GradBuilder& g) {
  std::vector<std::string> outs{g.dx(0), g.dx(1), g.has_input(2) ? g.dx(2) : ""};
  while (outs.size() > 1 && outs.back().empty()) outs.pop_back();
  g.add("ConvGrad", {g.dy(0), g.input(0), g.input(1)}, std::move(outs), g.node().attrs);
}

}  // namespace

void register_conv_gradients(GradRegistry& r) { r.add_rule("Conv", conv_grad, /*differentiable=*/{0, 1, 2}); }

}  // namespace trainrt
