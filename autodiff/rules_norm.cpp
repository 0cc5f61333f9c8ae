// Gradient rules of BatchNormalization (with its training rewrite) and LayerNormalization
// (ops/norm.cpp).
//
//   LayerNormalization(X, Scale, B?; axis, epsilon) -> Y, [Mean, InvStdDev]
//   (dX, dScale, dB) = LayerNormalizationGrad(dY, X, Scale; axis, epsilon), then
//   dScale / dB summed to Scale's / B's shape by SumToShape when those broadcast to the
//   normalized dims. Mean and InvStdDev carry no gradient (Unsupported if they reach the loss).
//
//   BatchNormalization(X, scale, B, mean, var) -> Y, [running_mean, running_var, ...,
//                                                    saved_mean, saved_var]
//   (dX, dScale, dB) = BatchNormalizationGrad(dY, X, scale, saved_mean, saved_var; epsilon)
//
// Training uses the batch statistics (mean and biased variance of X over N and the
// spatial dims); the forward writes them as its outputs 5 and 6 (trainrt's own, C values
// each, ops/norm.cpp) and the grad op reads them, so the backward does not read X once
// more to recompute them. They live from the forward to the backward like any saved
// activation (the planner's liveness). BatchNormalizationGrad without them still
// recomputes (ops/norm.cpp).
// Inputs 3 and 4 (running statistics) never get a gradient (the driver excludes
// them), and neither do outputs 1..6: running statistics are state, as PyTorch's
// buffers are. A model that feeds one of them into the loss is Unsupported.
//
// prepare() switches the node to training semantics before differentiation:
//   - opset >= 14: training_mode = 1 (outputs Y, running_mean, running_var);
//     opset < 14: a node with outputs besides Y trains by definition.
//   - outputs 1 and 2 exist and are named "<mean initializer>.updated" and
//     "<var initializer>.updated", so the driver writes the new running statistics
//     back after every step. An existing output of another name is renamed, and the
//     nodes that read it are rewired to the new name.
//   - outputs 5 and 6 (saved_mean, saved_var) exist, named "<node>/saved_mean" and
//     "<node>/saved_var". Only the training graph has them: the forward graph that is
//     exported and the eval graph keep ONNX's outputs.
//
// Momentum: ONNX updates running = running * momentum + batch * (1 - momentum), while
// PyTorch's BatchNorm2d updates running = (1 - m) * running + m * batch; so ONNX
// momentum = 1 - PyTorch momentum (PyTorch's default 0.1 is exported as 0.9).
// Running variance: ONNX's spec (and ops/norm.cpp) mixes in the *biased* batch
// variance (divided by N*H*W), PyTorch the *unbiased* one (divided by N*H*W - 1).
// We follow ONNX: after a step, running_var differs from PyTorch's by
// (1 - momentum) * batch_var / (N*H*W - 1), negligible for image batches (N*H*W in
// the thousands) but visible in tests with tiny batches. Y itself is normalised with
// the biased variance in both.
#include <algorithm>

#include "autodiff/gradient.h"
#include "graph/error.h"

namespace trainrt {

namespace {

// BatchNormalization's outputs that hold the batch statistics for the backward (ops/norm.cpp).
constexpr size_t kSavedMean = 5, kSavedVar = 6;

// Names output i of BatchNormalization `n` "<stat>.updated", rewiring readers of its old name.
void rename_output(Node& n, size_t i, const std::string& stat, Graph& g) {
  const std::string want = stat + ".updated";
  const std::string old = n.outputs[i];
  if (old == want) return;
  for (const Node& m : g.nodes)
    if (&m != &n && std::find(m.outputs.begin(), m.outputs.end(), want) != m.outputs.end())
      throw_unsupported("node '" + n.name + "' (BatchNormalization)",
                        "running statistic '" + stat + "' is also updated by node '" + m.name +
                            "'; BatchNormalization nodes sharing running statistics cannot train");
  if (!old.empty()) {
    if (std::find(g.outputs.begin(), g.outputs.end(), old) != g.outputs.end())
      throw_unsupported("node '" + n.name + "' (BatchNormalization)",
                        "output '" + old +
                            "' is a graph output; training writes the running statistics back to the "
                            "initializers instead (remove it from the model's outputs)");
    for (Node& m : g.nodes)
      if (&m != &n) std::replace(m.inputs.begin(), m.inputs.end(), old, want);
    g.values.erase(old);
  }
  n.outputs[i] = want;
}

// A value name "<node><suffix>" that nothing in g uses yet (outputs added by earlier
// prepare calls have no type yet, so node outputs are searched too).
std::string fresh_name(const Node& n, const std::string& suffix, const Graph& g) {
  auto used = [&](const std::string& name) {
    if (g.find_info(name) || g.is_initializer(name)) return true;
    return std::any_of(g.nodes.begin(), g.nodes.end(), [&](const Node& m) {
      return std::find(m.outputs.begin(), m.outputs.end(), name) != m.outputs.end();
    });
  };
  std::string name = n.name + suffix;
  for (int k = 1; used(name); ++k) name = n.name + suffix + "_" + std::to_string(k);
  return name;
}

void batchnorm_prepare(Node& n, Graph& g) {
  if (g.opset("") >= 14) n.attrs["training_mode"] = Attribute::of_int(1);
  if (n.outputs.size() < kSavedVar + 1) n.outputs.resize(kSavedVar + 1);
  if (!n.has_output(kSavedMean)) n.outputs[kSavedMean] = fresh_name(n, "/saved_mean", g);
  if (!n.has_output(kSavedVar)) n.outputs[kSavedVar] = fresh_name(n, "/saved_var", g);
  for (size_t i : {size_t{1}, size_t{2}}) {
    const std::string& stat = n.inputs[i + 2];
    if (g.is_initializer(stat)) {
      rename_output(n, i, stat, g);
    } else if (!n.has_output(i)) {  // fed statistics: computed, nothing to write back
      n.outputs[i] = fresh_name(n, i == 1 ? "/running_mean" : "/running_var", g);
    }
  }
}

void batchnorm_grad(GradBuilder& g) {
  for (size_t i = 1; i < g.node().outputs.size(); ++i)
    if (!g.dy(i).empty())
      throw_unsupported("node '" + g.node().name + "' (BatchNormalization)",
                        "output " + std::to_string(i) + " '" + g.output(i) +
                            "' (a running or batch statistic) reaches the loss; only Y carries a gradient");
  std::vector<std::string> outs{g.dx(0), g.dx(1), g.dx(2)};
  while (outs.size() > 1 && outs.back().empty()) outs.pop_back();
  const float eps = g.node().attr_float("epsilon", 1e-5f);
  std::vector<std::string> ins{g.dy(0), g.input(0), g.input(1)};
  if (g.node().has_output(kSavedMean) && g.node().has_output(kSavedVar)) {
    ins.push_back(g.output(kSavedMean));
    ins.push_back(g.output(kSavedVar));
  }
  g.add("BatchNormalizationGrad", std::move(ins), std::move(outs), {{"epsilon", Attribute::of_float(eps)}});
}

// Equal at run time for sure: same dims, where unknown the same named symbol.
bool same_shape(const Shape& a, const Shape& b) {
  if (a.size() != b.size()) return false;
  for (size_t d = 0; d < a.size(); ++d)
    if (!(a[d] == b[d]) || (!a[d].known() && a[d].symbol.empty())) return false;
  return true;
}

void layernorm_grad(GradBuilder& g) {
  const Node& n = g.node();
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (!g.dy(i).empty())
      throw_unsupported("node '" + n.name + "' (LayerNormalization)",
                        "output " + std::to_string(i) + " '" + g.output(i) +
                            "' (Mean or InvStdDev) reaches the loss; only Y carries a gradient");
  const Shape& x = g.graph().info(g.input(0)).shape.value();
  int64_t axis = n.attr_int("axis", -1);
  if (axis < 0) axis += static_cast<int64_t>(x.size());
  const Shape norm(x.begin() + axis, x.end());
  // Grad outputs in the normalized shape; a broadcast Scale or B sums them further.
  std::vector<std::string> outs{g.dx(0), "", ""};
  std::vector<std::pair<size_t, std::string>> sums;
  for (size_t i : {size_t{1}, size_t{2}}) {
    if (!g.needs_dx(i)) continue;
    if (same_shape(g.graph().info(g.input(i)).shape.value(), norm)) {
      outs[i] = g.dx(i);
    } else {
      outs[i] = g.tmp(i == 1 ? "d_scale_normalized" : "d_bias_normalized");
      sums.emplace_back(i, outs[i]);
    }
  }
  while (outs.size() > 1 && outs.back().empty()) outs.pop_back();
  g.add("LayerNormalizationGrad", {g.dy(0), g.input(0), g.input(1)}, std::move(outs),
        {{"axis", Attribute::of_int(axis)}, {"epsilon", Attribute::of_float(n.attr_float("epsilon", 1e-5f))}});
  for (const auto& [i, full] : sums) g.add("SumToShape", {full, g.input(i)}, {g.dx(i)});
}

}  // namespace

void register_norm_gradients(GradRegistry& r) {
  r.add_rule("BatchNormalization", batchnorm_grad, /*differentiable=*/{0, 1, 2}, batchnorm_prepare);
  r.add_rule("LayerNormalization", layernorm_grad, /*differentiable=*/{0, 1, 2});
}

}  // namespace trainrt
