// Gradient rules of the softmax/loss family (ops/softmax_loss.cpp).
//
//   Softmax      dX = SoftmaxGrad(dY, Y; axis)
//   LogSoftmax   dX = LogSoftmaxGrad(dY, Y; axis)
//   SoftmaxCrossEntropyLoss   dScores = SoftmaxCrossEntropyLossGrad(dLoss, log_prob, labels[, weights];
//                                       reduction, ignore_index)
//                             (+ LogSoftmaxGrad(dLogProb, log_prob; axis 1) when output 1 is used)
//                             scores only: labels are integers, weights are not trained
//   ReduceMean   dX = ReduceMeanGrad(dY, X; axes, keepdims, noop_with_empty_axes)  (data input only)
//   ReduceSum    dX = ReduceSumGrad(dY, X; axes, keepdims, noop_with_empty_axes)   dY broadcast back
//   ReduceMax    dX = ReduceMaxGrad(dY, X, Y; axes, keepdims, noop_with_empty_axes) dY to the maxima, ties split
//
// SoftmaxCrossEntropyLoss is prepared before differentiation: its log_prob output
// is added (named "<node>/log_prob") when the model omitted it, so the backward
// reuses the forward's log-softmax instead of recomputing it.
#include "autodiff/gradient.h"

namespace trainrt {

namespace {

void softmax_grad(GradBuilder& g) {
  const int64_t axis = g.node().attr_int("axis", -1);
  g.add("SoftmaxGrad", {g.dy(0), g.output(0)}, {g.dx(0)}, {{"axis", Attribute::of_int(axis)}});
}

void log_softmax_grad(GradBuilder& g) {
  const int64_t axis = g.node().attr_int("axis", -1);
  g.add("LogSoftmaxGrad", {g.dy(0), g.output(0)}, {g.dx(0)}, {{"axis", Attribute::of_int(axis)}});
}

void sce_prepare(Node& n, const Graph& g) {
  if (n.has_output(1)) return;
  std::string name = n.name + "/log_prob";
  for (int k = 1; g.find_info(name) || g.is_initializer(name); ++k) name = n.name + "/log_prob_" + std::to_string(k);
  n.outputs.resize(2);
  n.outputs[1] = name;
}

// dScores gets the loss's gradient and, when log_prob feeds something too, that one.
void sce_grad(GradBuilder& g) {
  const bool from_loss = !g.dy(0).empty(), from_log_prob = !g.dy(1).empty();
  const std::string via_loss = from_log_prob ? g.tmp("d_scores_from_loss") : g.dx(0);
  const std::string via_log_prob = from_loss ? g.tmp("d_scores_from_log_prob") : g.dx(0);
  if (from_loss) {
    std::map<std::string, Attribute> attrs{
        {"reduction", Attribute::of_string(g.node().attr_string("reduction", "mean"))}};
    if (g.node().has_attr("ignore_index"))
      attrs["ignore_index"] = Attribute::of_int(g.node().attr_int("ignore_index", 0));
    std::vector<std::string> inputs{g.dy(0), g.output(1), g.input(1)};
    if (g.has_input(2)) inputs.push_back(g.input(2));
    g.add("SoftmaxCrossEntropyLossGrad", inputs, {via_loss}, attrs);
  }
  if (from_log_prob) g.add("LogSoftmaxGrad", {g.dy(1), g.output(1)}, {via_log_prob}, {{"axis", Attribute::of_int(1)}});
  if (from_loss && from_log_prob) g.add_onnx("Sum", {via_loss, via_log_prob}, {g.dx(0)});
}

// ReduceMean -> ReduceMeanGrad(dY, X), ReduceSum -> ReduceSumGrad(dY, X),
// ReduceMax -> ReduceMaxGrad(dY, X, Y); the axes (attribute or constant input 1) become
// the grad op's attribute.
void reduce_grad(GradBuilder& g) {
  const Node& n = g.node();
  std::vector<int64_t> axes = n.attr_ints("axes");
  if (g.has_input(1)) {  // opset 18: a constant axes input (the shape rule checked it)
    const Tensor* t = nullptr;
    if (auto it = g.graph().initializers.find(g.input(1)); it != g.graph().initializers.end()) t = &it->second;
    for (const Node& c : g.graph().nodes)
      if (c.op_type == "Constant" && c.domain.empty() && !c.outputs.empty() && c.outputs[0] == g.input(1))
        t = c.attr_tensor("value");
    for (int64_t k = 0; t && k < t->numel(); ++k) axes.push_back(t->data<int64_t>()[k]);
  }
  std::map<std::string, Attribute> attrs{
      {"keepdims", Attribute::of_int(n.attr_int("keepdims", 1))},
      {"noop_with_empty_axes", Attribute::of_int(n.attr_int("noop_with_empty_axes", 0))}};
  if (!axes.empty()) attrs["axes"] = Attribute::of_ints(axes);
  std::vector<std::string> ins{g.dy(0), g.input(0)};
  if (n.op_type == "ReduceMax") ins.push_back(g.output(0));
  g.add(n.op_type + "Grad", std::move(ins), {g.dx(0)}, attrs);
}

}  // namespace

void register_softmax_loss_gradients(GradRegistry& r) {
  r.add_rule("Softmax", softmax_grad);
  r.add_rule("LogSoftmax", log_softmax_grad);
  r.add_rule("SoftmaxCrossEntropyLoss", sce_grad, /*differentiable=*/{0}, sce_prepare);
  for (const char* op : {"ReduceMean", "ReduceSum", "ReduceMax"}) r.add_rule(op, reduce_grad, /*differentiable=*/{0});
}

}  // namespace trainrt
