// The training fusion of Relu + Dropout's backward:
//   Y = Relu(X) (or BatchNormalizationRelu), (Z, mask) = Dropout(Y, ratio, training_mode)
//   dY = DropoutGrad(dZ, mask, ratio, training_mode); dX = ReluGrad(dY, Y)
// becomes dX = DropoutReluGrad(dZ, Z, ratio, training_mode) (ops/misc.cpp: exact, since
// Z > 0 exactly where the mask kept a positive Y). What it saves: Y is no longer read
// by the backward, so it dies right after the Dropout instead of living until the
// block's backward (Z lives there anyway: the next Conv's weight gradient reads it);
// the mask, read by nobody now, is no longer written; and one pass over dY goes.
// The Relu's own forward stays where it is (fused into BatchNormalizationRelu in the
// Wide ResNet), so no forward node moves and Dropout masks, seeded by the node's
// index (runtime/executor.cpp), stay the same.
//
// The training fusion of BatchNormalizationRelu + a Dropout whose mask nobody reads
// (after the fusion above): Y = BatchNormalizationRelu(X, ...), Z = Dropout(Y, ratio,
// training_mode) with Y read by the Dropout only becomes Z = BatchNormalizationReluDropout(
// X, ..., ratio, training_mode; dropout_node = the Dropout's index) (ops/fused.cpp): one pass
// writes Z, and Y is never stored. The masks: the executor seeds node i with
// node_seed(run seed, i) (ops/core/kernel.h); the fused node draws with the Dropout's
// index as this pass sees it, which is its index in the final graph since the pass runs
// last in fuse_training_graph. Erasing the BatchNormalizationRelu shifts every later
// node's index down, so a site is fused only where no unfused Dropout comes after its
// BatchNormalizationRelu: no other node's mask changes. (NaN/Inf messages name nodes by
// their names; their indices are the fused graph's, as for every other fusion.)
// Every math precision: under bf16/fp16 the fused kernels round relu(bn(x)) before the
// mask as the executor rounds BatchNormalizationRelu's Y (ops/fused.h), and nobody rounds
// Z, as nobody rounds the Dropout's (math_rounded_outputs); where a backend stores values
// in 16 bits (runtime/narrow.h) the fused node declares Z as the Dropout declared it.
#include <algorithm>
#include <string>
#include <unordered_set>

#include "passes/fuse_util.h"
#include "passes/passes.h"

namespace trainrt::passes {

namespace {

// DropoutGrad's optional inputs (ratio, training_mode) are the Dropout's (inputs 1, 2),
// as the gradient rule writes them (autodiff/rules_misc.cpp).
bool same_options(const Node& dropout, const Node& grad) {
  for (size_t k = 1; k <= 2; ++k) {
    const std::string a = dropout.has_input(k) ? dropout.inputs[k] : "";
    const std::string b = grad.has_input(k + 1) ? grad.inputs[k + 1] : "";
    if (a != b) return false;
  }
  return true;
}

}  // namespace

size_t fuse_dropout_relu_grad(Graph& g) {
  std::unordered_set<std::string> masks;  // of the Dropouts whose gradient was fused
  const size_t fused = sweep(g, [&](size_t j, const Uses& u, std::vector<bool>& dead) {
    const Node& relu_grad = g.nodes[j];
    if (!is_trainrt(relu_grad, "ReluGrad") || relu_grad.input_count() != 2 || !relu_grad.has_output(0)) return false;
    const std::string &dy = relu_grad.inputs[0], &y = relu_grad.inputs[1];
    if (dy.empty() || y.empty()) return false;
    const size_t i = u.producer_of(dy);
    if (i == npos || dead[i] || u.sole_reader(dy) != j) return false;
    const Node& drop_grad = g.nodes[i];
    if (!is_trainrt(drop_grad, "DropoutGrad") || !drop_grad.has_input(0) || !drop_grad.has_input(1)) return false;
    const size_t d = u.producer_of(drop_grad.inputs[1]);
    if (d == npos) return false;
    const Node& dropout = g.nodes[d];
    if (!is_onnx(dropout, "Dropout") || !dropout.has_input(0) || dropout.inputs[0] != y || !dropout.has_output(0) ||
        dropout.outputs.size() < 2 || dropout.outputs[1] != drop_grad.inputs[1] || !same_options(dropout, drop_grad))
      return false;
    Node f = drop_grad;
    f.op_type = "DropoutReluGrad";
    f.inputs[1] = dropout.outputs[0];
    f.outputs = {relu_grad.outputs[0]};
    f.name = fused_name(drop_grad, relu_grad);
    masks.insert(dropout.outputs[1]);
    g.nodes[j] = std::move(f);
    dead[i] = true;
    return true;
  });
  if (masks.empty()) return fused;
  // A mask nobody reads any more is not written: Dropout's mask output is optional.
  const Uses after(g);
  for (Node& n : g.nodes)
    if (is_onnx(n, "Dropout") && n.outputs.size() == 2 && masks.count(n.outputs[1]) &&
        !after.readers.count(n.outputs[1]) && !after.graph_outputs.count(n.outputs[1])) {
      g.values.erase(n.outputs[1]);
      n.outputs.resize(1);
    }
  return fused;
}

size_t fuse_batchnorm_relu_dropout(Graph& g) {
  const Uses u(g);
  struct Site {
    size_t bn, dropout;
  };
  std::vector<Site> sites;
  std::vector<size_t> dropouts;  // every Dropout's index
  for (size_t d = 0; d < g.nodes.size(); ++d) {
    const Node& dropout = g.nodes[d];
    if (!is_onnx(dropout, "Dropout")) continue;
    dropouts.push_back(d);
    if (!dropout.has_input(0) || !dropout.has_output(0) || dropout.input_count() > 3) continue;
    if (dropout.outputs.size() > 1 && !dropout.outputs[1].empty()) continue;  // its mask is read
    const std::string& y = dropout.inputs[0];
    const size_t b = u.producer_of(y);
    if (b == npos || u.sole_reader(y) != d) continue;
    const Node& bn = g.nodes[b];
    if (!is_trainrt(bn, "BatchNormalizationRelu") || bn.outputs.empty() || bn.outputs[0] != y ||
        bn.input_count() != 5 || bn.has_attr("dropout_node") || bn.has_attr("seed"))
      continue;
    // The fused node takes the Dropout's place: BN's other outputs must be read after it.
    bool later = true;
    for (size_t k = 1; k < bn.outputs.size(); ++k) later = later && read_only_after(u, bn.outputs[k], d);
    if (later) sites.push_back({b, d});
  }
  // Drop the sites that would shift an unfused Dropout's index, until none does.
  for (bool changed = true; changed;) {
    changed = false;
    size_t last_unfused = 0;
    bool any = false;
    for (size_t d : dropouts)
      if (std::none_of(sites.begin(), sites.end(), [&](const Site& s) { return s.dropout == d; }))
        last_unfused = std::max(last_unfused, d), any = true;
    if (!any) break;
    const size_t before = sites.size();
    std::erase_if(sites, [&](const Site& s) { return s.bn < last_unfused; });
    changed = sites.size() != before;
  }
  if (sites.empty()) return 0;
  std::vector<bool> dead(g.nodes.size(), false);
  for (const Site& s : sites) {
    const Node &bn = g.nodes[s.bn], &dropout = g.nodes[s.dropout];
    Node f = bn;
    f.op_type = "BatchNormalizationReluDropout";
    f.inputs.resize(7);
    f.inputs[5] = dropout.has_input(1) ? dropout.inputs[1] : "";
    f.inputs[6] = dropout.has_input(2) ? dropout.inputs[2] : "";
    while (!f.inputs.empty() && f.inputs.back().empty()) f.inputs.pop_back();
    f.outputs[0] = dropout.outputs[0];
    f.attrs["dropout_node"] = Attribute::of_int(static_cast<int64_t>(s.dropout));
    if (dropout.has_attr("seed")) f.attrs["seed"] = dropout.attrs.at("seed");
    f.name = fused_name(bn, dropout);
    g.values.erase(bn.outputs[0]);
    g.nodes[s.dropout] = std::move(f);
    dead[s.bn] = true;
  }
  erase_marked(g, dead);
  return sites.size();
}

}  // namespace trainrt::passes
