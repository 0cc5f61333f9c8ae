// Gradient rules of the pooling family (ops/pool.cpp).
//
//   MaxPool(X) -> Y, [Indices]   dX = MaxPoolGrad(dY, X)            attributes copied
//   AveragePool(X) -> Y          dX = AveragePoolGrad(dY, X)        attributes copied
//   GlobalAveragePool(X) -> Y    dX = GlobalAveragePoolGrad(dY, X)
//   GlobalMaxPool(X) -> Y        dX = GlobalMaxPoolGrad(dY, X)      (first maximum of each plane)
//   LpPool(X) -> Y               dX = LpPoolGrad(dY, X, Y)          attributes copied; Y is the
//                                norm each window's gradient divides by
//
// MaxPoolGrad recomputes the argmax from X (the forward's tie rule) instead of
// reading Indices, so the forward need not write Indices and the backward keeps X
// alive rather than an int64 tensor of Y's size. Indices is int64: the driver
// sends no gradient through it.
#include "autodiff/gradient.h"

namespace trainrt {

namespace {

void maxpool_grad(GradBuilder& g) { g.add("MaxPoolGrad", {g.dy(0), g.input(0)}, {g.dx(0)}, g.node().attrs); }

void averagepool_grad(GradBuilder& g) { g.add("AveragePoolGrad", {g.dy(0), g.input(0)}, {g.dx(0)}, g.node().attrs); }

void lp_pool_grad(GradBuilder& g) {
  g.add("LpPoolGrad", {g.dy(0), g.input(0), g.output(0)}, {g.dx(0)}, g.node().attrs);
}

void global_average_pool_grad(GradBuilder& g) { g.add("GlobalAveragePoolGrad", {g.dy(0), g.input(0)}, {g.dx(0)}); }

void global_max_pool_grad(GradBuilder& g) { g.add("GlobalMaxPoolGrad", {g.dy(0), g.input(0)}, {g.dx(0)}); }

}  // namespace

void register_pool_gradients(GradRegistry& r) {
  r.add_rule("MaxPool", maxpool_grad, /*differentiable=*/{0});
  r.add_rule("AveragePool", averagepool_grad, {0});
  r.add_rule("LpPool", lp_pool_grad, {0});
  r.add_rule("GlobalAveragePool", global_average_pool_grad, {0});
  r.add_rule("GlobalMaxPool", global_max_pool_grad, {0});
}

}  // namespace trainrt
