// Gradient rules of the shape family (ops/shape_ops.cpp).
//
//   Flatten, Reshape   dX = ReshapeLike(dY, X)                 (Reshape: data input only)
//   Transpose          dX = Transpose(dY, perm = inverse(perm))
//   Concat             (dX0, dX1, ...) = ConcatGrad(dY, X0, X1, ...; axis)
//   Pad                dX = Pad(dY, -pads[, axes])             (data input only; constant mode)
//   Squeeze, Unsqueeze dX = ReshapeLike(dY, X)
//   Gather             dX = GatherGrad(dY, indices, X; axis)   (scatter-add into zeros of X's shape)
//   Slice              dX = SliceGrad(dY, X, starts, ends, axes, steps)   (scatter into zeros)
//   Split              dX = Concat(dY_0, dY_1, ...; axis)      (zeros for an output with no gradient)
//   Expand             dX = SumToShape(dY, X)
//   Shape, ConstantOfShape, Range: non-differentiable (integer or constant outputs)
//
// Pad with negated pads crops what the forward added and zero-fills what a
// negative forward pad cropped, which is exactly the adjoint of constant padding.
#include "autodiff/gradient.h"
#include "graph/error.h"

namespace trainrt {

namespace {

// The constant behind a value: an initializer or a Constant node's `value`.
const Tensor* constant_of(const Graph& g, const std::string& name) {
  if (auto it = g.initializers.find(name); it != g.initializers.end()) return &it->second;
  for (const Node& n : g.nodes)
    if (n.op_type == "Constant" && n.domain.empty() && !n.outputs.empty() && n.outputs[0] == name)
      return n.attr_tensor("value");
  return nullptr;
}

void reshape_grad(GradBuilder& g) { g.add("ReshapeLike", {g.dy(0), g.input(0)}, {g.dx(0)}); }

void transpose_grad(GradBuilder& g) {
  const int64_t rank = static_cast<int64_t>(g.graph().info(g.input(0)).shape.value().size());
  std::vector<int64_t> perm = g.node().attr_ints("perm");
  if (!g.node().has_attr("perm"))
    for (int64_t i = rank - 1; i >= 0; --i) perm.push_back(i);
  std::vector<int64_t> inverse(perm.size());
  for (size_t k = 0; k < perm.size(); ++k) inverse[static_cast<size_t>(perm[k])] = static_cast<int64_t>(k);
  g.add_onnx("Transpose", {g.dy(0)}, {g.dx(0)}, {{"perm", Attribute::of_ints(inverse)}});
}

void concat_grad(GradBuilder& g) {
  std::vector<std::string> inputs{g.dy(0)}, outputs;
  for (size_t i = 0; i < g.node().inputs.size(); ++i) {
    inputs.push_back(g.input(i));
    outputs.push_back(g.dx(i));
  }
  g.add("ConcatGrad", inputs, outputs, {{"axis", Attribute::of_int(g.node().attr_int("axis", 0))}});
}

void pad_grad(GradBuilder& g) {
  if (g.node().attr_string("mode", "constant") != "constant")
    throw_unsupported(g.node().name, "Pad's gradient is implemented for mode 'constant' only");
  const Tensor* pads = constant_of(g.graph(), g.input(1));
  if (!pads) throw_internal(g.node().name, "Pad's pads are not a constant (the shape rule requires one)");
  Tensor neg(DataType::Int64, {pads->numel()});
  for (int64_t k = 0; k < pads->numel(); ++k) neg.data<int64_t>()[k] = -static_cast<int64_t>(pads->get_as_double(k));
  std::vector<std::string> inputs{g.dy(0), g.constant("neg_pads", neg)};
  if (g.has_input(3)) inputs.insert(inputs.end(), {"", g.input(3)});  // opset 18 axes
  // A padded dim of X that is symbolic comes back unknown from Pad: restore X's shape.
  const Shape& x = g.graph().info(g.input(0)).shape.value();
  const Shape& y = g.graph().info(g.output(0)).shape.value();
  bool restore = false;
  for (size_t d = 0; d < x.size(); ++d) restore = restore || (!x[d].known() && !(x[d] == y[d]));
  if (!restore) return g.add_onnx("Pad", inputs, {g.dx(0)});
  const std::string cropped = g.tmp("cropped");
  g.add_onnx("Pad", inputs, {cropped});
  g.add("ReshapeLike", {cropped, g.input(0)}, {g.dx(0)});
}

void gather_grad(GradBuilder& g) {
  g.add("GatherGrad", {g.dy(0), g.input(1), g.input(0)}, {g.dx(0)},
        {{"axis", Attribute::of_int(g.node().attr_int("axis", 0))}});
}

void slice_grad(GradBuilder& g) {
  std::vector<std::string> inputs{g.dy(0), g.input(0)};
  for (size_t i = 1; i < g.node().inputs.size(); ++i) inputs.push_back(g.node().inputs[i]);
  g.add("SliceGrad", inputs, {g.dx(0)});
}

// dX = Concat(dY_0, dY_1, ...) along the split axis; an output nothing reads
// contributes zeros of its shape (ConstantOfShape of its Shape, so a symbolic batch works).
void split_grad(GradBuilder& g) {
  std::vector<std::string> parts;
  for (size_t i = 0; i < g.node().outputs.size(); ++i) {
    if (!g.dy(i).empty()) {
      parts.push_back(g.dy(i));
      continue;
    }
    const std::string shape = g.tmp("shape" + std::to_string(i)), zeros = g.tmp("zeros" + std::to_string(i));
    g.add_onnx("Shape", {g.output(i)}, {shape});
    const Attribute zero = Attribute::of_tensor(Tensor(g.graph().info(g.output(i)).dtype, {1}));
    g.add_onnx("ConstantOfShape", {shape}, {zeros}, {{"value", zero}});
    parts.push_back(zeros);
  }
  g.add_onnx("Concat", parts, {g.dx(0)}, {{"axis", Attribute::of_int(g.node().attr_int("axis", 0))}});
}

void expand_grad(GradBuilder& g) { g.add("SumToShape", {g.dy(0), g.input(0)}, {g.dx(0)}); }

}  // namespace

void register_shape_gradients(GradRegistry& r) {
  r.add_rule("Gather", gather_grad, /*differentiable=*/{0});
  r.add_rule("Unsqueeze", reshape_grad, /*differentiable=*/{0});
  r.add_rule("Squeeze", reshape_grad, /*differentiable=*/{0});
  r.add_rule("Slice", slice_grad, /*differentiable=*/{0});
  r.add_rule("Split", split_grad, /*differentiable=*/{0});
  r.add_rule("Expand", expand_grad, /*differentiable=*/{0});
  r.add_non_differentiable("Shape");  // integer outputs
  r.add_non_differentiable("ConstantOfShape");
  r.add_non_differentiable("Range");
  // ScatterND: exported graphs build masks with it from constants; no rule yet
  // (dData = dY with the scattered slices zeroed, dUpdates = GatherND(dY, indices)).
  r.add_non_differentiable("ScatterND");
  r.add_rule("Flatten", reshape_grad);
  r.add_rule("Reshape", reshape_grad, /*differentiable=*/{0});
  r.add_rule("Transpose", transpose_grad);
  r.add_rule("Concat", concat_grad);
  r.add_rule("Pad", pad_grad, /*differentiable=*/{0});
}

}  // namespace trainrt
