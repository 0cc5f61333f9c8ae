// Gradient rules of the elementwise family (ops/elementwise.cpp). The unary ops of the
// table in ops/unary_ops.h (Relu ... Gelu below) get theirs from the table.
//
//   Relu       dX = ReluGrad(dY, Y)                 Neg   dX = Neg(dY)
//   LeakyRelu  dX = LeakyReluGrad(dY, X; alpha)     Sum   dXi = SumToShape(dY, Xi)
//   Sigmoid    dX = SigmoidGrad(dY, Y)              Add   dA = SumToShape(dY, A),     dB = SumToShape(dY, B)
//   Tanh       dX = TanhGrad(dY, Y)                 Sub   dA = SumToShape(dY, A),     dB = SumToShape(-dY, B)
//                                                   Mul   dA = SumToShape(dY*B, A),   dB = SumToShape(dY*A, B)
//                                                   Div   dA = SumToShape(dY/B, A),   dB = SumToShape(-(dY/B)*Y, B)
//   Clip       dX = ClipGrad(dY, X, [min], [max])   Pow   dA', dB' = PowGrad(dY, A, B), each SumToShape'd
//   HardSigmoid dX = HardSigmoidGrad(dY, X)         Where dX = SumToShape(Where(C, dY, 0), X)
//   HardSwish  dX = HardSwishGrad(dY, X)                  dY' = SumToShape(Where(C, 0, dY), Y)
//   Sqrt       dX = SqrtGrad(dY, Y)                 Equal non-differentiable (bool output)
//   Erf, Gelu  dX = ErfGrad(dY, X), GeluGrad(dY, X)
//   Exp        dX = dY * Y                          Greater, Less, GreaterOrEqual, LessOrEqual:
//   Log        dX = dY / X                                non-differentiable (bool output)
//   Reciprocal dX = -(dY * Y) * Y                    Not: non-differentiable (bool)
//   Mod        non-differentiable: exported graphs use it on integer shape values;
//              a float Mod's inputs get no gradient (dA = dY, dB = -dY*trunc(a/b) is not built)
//
// Kinks follow PyTorch: Clip passes dY where min <= x <= max (torch.clamp; note
// F.relu6 uses min < x < max), HardSigmoid where 0 < alpha*x + beta < 1, HardSwish
// has x/3 + 1/2 on [-3, 3]. Clip's bounds and Where's condition get no gradient.
//
// Broadcasting: an input that was broadcast to Y's shape gets dY summed over the
// broadcast axes (SumToShape); when its shape is statically Y's, an Identity
// stands in. Integer Add/Sub/Mul/Div never reach a rule: the driver propagates
// gradients through float outputs only.
#include "autodiff/gradient.h"
#include "ops/unary_ops.h"

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

// The forward's attributes named in `keys` (those it has), for its backward op.
std::map<std::string, Attribute> copy_attrs(const Node& n, const std::vector<std::string>& keys) {
  std::map<std::string, Attribute> out;
  for (const std::string& k : keys)
    if (n.has_attr(k)) out[k] = n.attrs.at(k);
  return out;
}

// The rule of a table op (ops/unary_ops.h): dX = Grad(dY, t), t the forward's input or
// output as the table says, with the forward's attributes that Grad's functor reads.
template <typename G>
GradRule unary_table_rule(const char* grad, UnaryGradReads reads) {
  return [grad, reads](GradBuilder& g) {
    const std::string t = reads == UnaryGradReads::input ? g.input(0) : g.output(0);
    g.add(grad, {g.dy(0), t}, {g.dx(0)}, copy_attrs(g.node(), UnaryAttrs<G>::names()));
  };
}

// The bounds go to ClipGrad as the forward has them: inputs (opset >= 11) or attributes.
void clip_grad(GradBuilder& g) {
  std::vector<std::string> ins{g.dy(0), g.input(0)};
  for (size_t i = 1; i < g.node().inputs.size(); ++i) ins.push_back(g.node().inputs[i]);
  g.add("ClipGrad", ins, {g.dx(0)}, copy_attrs(g.node(), {"min", "max"}));
}

void exp_grad(GradBuilder& g) { g.add_onnx("Mul", {g.dy(0), g.output(0)}, {g.dx(0)}); }
void log_grad(GradBuilder& g) { g.add_onnx("Div", {g.dy(0), g.input(0)}, {g.dx(0)}); }
// Y = 1/X: dX = -dY / X^2 = -(dY * Y) * Y.
void reciprocal_grad(GradBuilder& g) {
  const std::string dy_y = g.tmp("dy_times_y"), neg = g.tmp("neg_dy_times_y");
  g.add_onnx("Mul", {g.dy(0), g.output(0)}, {dy_y});
  g.add_onnx("Neg", {dy_y}, {neg});
  g.add_onnx("Mul", {neg, g.output(0)}, {g.dx(0)});
}

// PowGrad writes dA and dB in Y's shape; each is then reduced to its input's shape.
void pow_grad(GradBuilder& g) {
  const std::string da = g.needs_dx(0) ? g.tmp("da_full") : "", db = g.needs_dx(1) ? g.tmp("db_full") : "";
  g.add("PowGrad", {g.dy(0), g.input(0), g.input(1)}, {da, db});
  if (g.needs_dx(0)) reduce_to_input(g, da, 0);
  if (g.needs_dx(1)) reduce_to_input(g, db, 1);
}

// out = C ? X : Y: dY goes to X where C holds and to Y elsewhere.
void where_grad(GradBuilder& g) {
  const std::string zero = g.constant("zero", Tensor(g.graph().info(g.output(0)).dtype, {}));
  for (size_t i : {1u, 2u}) {
    if (!g.needs_dx(i)) continue;
    const std::string picked = g.tmp(i == 1 ? "dy_where_c" : "dy_where_not_c");
    g.add_onnx("Where", {g.input(0), i == 1 ? g.dy(0) : zero, i == 1 ? zero : g.dy(0)}, {picked});
    reduce_to_input(g, picked, i);
  }
}

}  // namespace

void register_elementwise_gradients(GradRegistry& r) {
#define TRAINRT_UNARY_RULE(Op, since, flops, Grad, reads, ...) \
  r.add_rule(#Op, unary_table_rule<unary_math::Grad>(#Grad, UnaryGradReads::reads));
  TRAINRT_UNARY_OPS(TRAINRT_UNARY_RULE)
#undef TRAINRT_UNARY_RULE
  r.add_rule("Neg", neg_grad);
  r.add_rule("Add", sum_grad);
  r.add_rule("Sum", sum_grad);
  r.add_rule("Sub", sub_grad);
  r.add_rule("Mul", mul_grad);
  r.add_rule("Div", div_grad);
  r.add_rule("Clip", clip_grad, /*differentiable=*/{0});
  r.add_rule("Pow", pow_grad);
  r.add_rule("Where", where_grad, /*differentiable=*/{1, 2});
  r.add_rule("Exp", exp_grad);
  r.add_rule("Log", log_grad);
  r.add_rule("Reciprocal", reciprocal_grad);
  for (const char* op : {"Equal", "Greater", "Less", "GreaterOrEqual", "LessOrEqual", "Not"})
    r.add_non_differentiable(op);
  // Mod: exported graphs use it on shape values (window padding); no gradient rule yet.
  r.add_non_differentiable("Mod");
}

}  // namespace trainrt
