// Gradient rules of the elementwise family (ops/elementwise.cpp).
//
//   Relu       dX = ReluGrad(dY, Y)                 Neg   dX = Neg(dY)
//   LeakyRelu  dX = LeakyReluGrad(dY, X; alpha)     Sum   dXi = SumToShape(dY, Xi)
//   Sigmoid    dX = SigmoidGrad(dY, Y)              Add   dA = SumToShape(dY, A),     dB = SumToShape(dY, B)
//   Tanh       dX = TanhGrad(dY, Y)                 Sub   dA = SumToShape(dY, A),     dB = SumToShape(-dY, B)
//                                                   Mul   dA = SumToShape(dY*B, A),   dB = SumToShape(dY*A, B)
//                                                   Div   dA = SumToShape(dY/B, A),   dB = SumToShape(-(dY/B)*Y, B)
//
// Broadcasting: an input that was broadcast to Y's shape gets dY summed over the
// broadcast axes (SumToShape); when its shape is statically Y's, an Identity
// stands in. Integer Add/Sub/Mul/Div never reach a rule: the driver propagates
// gradients through float outputs only.
#include "autodiff/gradient.h"

namespace trainrt {

namespace {

// Writes dx(i) = grad reduced to the shape of input i.
void reduce_to_input(GradBuilder& g, const std::string& grad, size_t i) {
  const ValueInfo* in = g.graph().find_info(g.input(i));
  const ValueInfo* out = g.graph().find_info(g.output(0));
  if (in && out && in->shape && out->shape && *in->shape == *out->shape && shape_is_known(*in->shape))
    g.add_onnx("Identity", {grad}, {g.dx(i)});
  else
    g.add("SumToShape", {grad, g.input(i)}, {g.dx(i)});
}

void relu_grad(GradBuilder& g) { g.add("ReluGrad", {g.dy(0), g.output(0)}, {g.dx(0)}); }

void leaky_relu_grad(GradBuilder& g) {
  const float alpha = g.node().attr_float("alpha", 0.01f);
  g.add("LeakyReluGrad", {g.dy(0), g.input(0)}, {g.dx(0)}, {{"alpha", Attribute::of_float(alpha)}});
}

void sigmoid_grad(GradBuilder& g) { g.add("SigmoidGrad", {g.dy(0), g.output(0)}, {g.dx(0)}); }
void tanh_grad(GradBuilder& g) { g.add("TanhGrad", {g.dy(0), g.output(0)}, {g.dx(0)}); }
void neg_grad(GradBuilder& g) { g.add_onnx("Neg", {g.dy(0)}, {g.dx(0)}); }

// Add and variadic Sum: every input gets dY, reduced to its shape.
void sum_grad(GradBuilder& g) {
  for (size_t i = 0; i < g.node().inputs.size(); ++i)
    if (g.needs_dx(i)) reduce_to_input(g, g.dy(0), i);
}

void sub_grad(GradBuilder& g) {
  if (g.needs_dx(0)) reduce_to_input(g, g.dy(0), 0);
  if (g.needs_dx(1)) {
    const std::string neg = g.tmp("neg_dy");
    g.add_onnx("Neg", {g.dy(0)}, {neg});
    reduce_to_input(g, neg, 1);
  }
}

void mul_grad(GradBuilder& g) {
  for (size_t i : {0u, 1u}) {
    if (!g.needs_dx(i)) continue;
    const std::string prod = g.tmp("dy_times_" + std::to_string(1 - i));
    g.add_onnx("Mul", {g.dy(0), g.input(1 - i)}, {prod});
    reduce_to_input(g, prod, i);
  }
}

// Y = A / B:  dA = dY / B,  dB = -dY * A / B^2 = -(dY / B) * Y.
void div_grad(GradBuilder& g) {
  const std::string dy_b = g.tmp("dy_over_b");
  g.add_onnx("Div", {g.dy(0), g.input(1)}, {dy_b});
  if (g.needs_dx(0)) reduce_to_input(g, dy_b, 0);
  if (g.needs_dx(1)) {
    const std::string prod = g.tmp("dy_over_b_times_y"), neg = g.tmp("neg_dy_over_b_times_y");
    g.add_onnx("Mul", {dy_b, g.output(0)}, {prod});
    g.add_onnx("Neg", {prod}, {neg});
    reduce_to_input(g, neg, 1);
  }
}

}  // namespace

void register_elementwise_gradients(GradRegistry& r) {
  r.add_rule("Relu", relu_grad);
  r.add_rule("LeakyRelu", leaky_relu_grad);
  r.add_rule("Sigmoid", sigmoid_grad);
  r.add_rule("Tanh", tanh_grad);
  r.add_rule("Neg", neg_grad);
  r.add_rule("Add", sum_grad);
  r.add_rule("Sum", sum_grad);
  r.add_rule("Sub", sub_grad);
  r.add_rule("Mul", mul_grad);
  r.add_rule("Div", div_grad);
}

}  // namespace trainrt
