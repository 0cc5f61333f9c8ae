// Gradient rule of ConvTranspose (ops/conv_transpose.cpp).
//
//   ConvTranspose(X, W, [B]) -> Y      (dX, dW, dB) = ConvTransposeGrad(dY, X, W)   attributes copied
//
// One backward node for the three gradients, as Conv's rule; outputs not needed are "".
#include "autodiff/gradient.h"

namespace trainrt {

namespace {

void conv_transpose_grad(GradBuilder& g) {
  std::vector<std::string> outs{g.dx(0), g.dx(1), g.has_input(2) ? g.dx(2) : ""};
  while (outs.size() > 1 && outs.back().empty()) outs.pop_back();
  g.add("ConvTransposeGrad", {g.dy(0), g.input(0), g.input(1)}, std::move(outs), g.node().attrs);
}

}  // namespace

void register_conv_transpose_gradients(GradRegistry& r) {
  r.add_rule("ConvTranspose", conv_transpose_grad, /*differentiable=*/{0, 1, 2});
}

}  // namespace trainrt
