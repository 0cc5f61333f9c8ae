// Gradient rules of the misc family (ops/misc.cpp).
//
//   Identity  dX = Identity(dY)
//   Cast      dX = Cast(dY, to = X's dtype)              float -> float only (see below)
//   Dropout   dX = DropoutGrad(dY, mask, [ratio], [training_mode])   data input only
//   Constant  no inputs: listed as non-differentiable (nothing could need a gradient)
//
// Cast to an integer or bool type: "the gradient is zero" and "the gradient is
// never requested" are different here. Integer outputs carry no gradient: the
// driver only propagates through float outputs, so the Cast rule is never asked
// for one. A parameter that also reaches the loss through a float path gets that
// path's gradient (the integer path's contribution is zero almost everywhere, and
// is dropped); a parameter that reaches the loss *only* through an integer Cast
// is a BadInput from the driver naming the Cast and the path, not a silent zero.
//
// Dropout is prepared before differentiation: its mask output is added (named
// "<node>/mask") when the model omitted it, so the backward reuses the mask the
// training forward drew instead of redrawing it.
#include "autodiff/gradient.h"
#include "graph/error.h"

namespace trainrt {

namespace {

void identity_grad(GradBuilder& g) { g.add_onnx("Identity", {g.dy(0)}, {g.dx(0)}); }

void cast_grad(GradBuilder& g) {
  const DataType from = g.graph().info(g.input(0)).dtype;
  const DataType to = g.graph().info(g.output(0)).dtype;
  if (!dtype_is_float(from) || !dtype_is_float(to))  // the driver never asks (see above)
    throw_internal("autodiff", "Cast '" + g.node().name + "': gradient requested through a non-float cast");
  g.add_onnx("Cast", {g.dy(0)}, {g.dx(0)}, {{"to", Attribute::of_int(static_cast<int64_t>(from))}});
}

void dropout_prepare(Node& n, const Graph& g) {
  if (n.has_output(1)) return;
  std::string mask = n.name + "/mask";
  for (int k = 1; g.find_info(mask) || g.is_initializer(mask); ++k) mask = n.name + "/mask_" + std::to_string(k);
  n.outputs.resize(2);
  n.outputs[1] = mask;
}

void dropout_grad(GradBuilder& g) {
  std::vector<std::string> inputs{g.dy(0), g.output(1)};
  for (size_t i = 1; i <= 2; ++i) inputs.push_back(g.has_input(i) ? g.input(i) : "");
  while (inputs.back().empty()) inputs.pop_back();
  g.add("DropoutGrad", std::move(inputs), {g.dx(0)});
}

}  // namespace

void register_misc_gradients(GradRegistry& r) {
  r.add_rule("Identity", identity_grad);
  r.add_rule("Cast", cast_grad);
  r.add_rule("Dropout", dropout_grad, /*differentiable=*/{0}, dropout_prepare);
  r.add_non_differentiable("Constant");
}

}  // namespace trainrt
