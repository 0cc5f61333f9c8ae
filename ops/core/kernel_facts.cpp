#include "ops/core/kernel_facts.h"

#include "graph/ir.h"

namespace trainrt::facts {

bool same_shapes(const Graph& g, const std::vector<std::string>& values) {
  const Shape* first = nullptr;
  for (const std::string& v : values) {
    if (v.empty()) continue;
    const ValueInfo* info = g.find_info(v);
    if (!info || !info->shape || !shape_is_known(*info->shape)) return false;
    if (!first) first = &*info->shape;
    if (*info->shape != *first) return false;
  }
  return true;
}

bool node_shapes_agree(const Graph& g, const Node& n) {
  std::vector<std::string> all = n.inputs;
  all.insert(all.end(), n.outputs.begin(), n.outputs.end());
  return same_shapes(g, all);
}

NodeLayouts elementwise(const Graph& g, const Node& n) {
  if (!node_shapes_agree(g, n)) return {};
  return {std::vector<SlotLayout>(n.inputs.size(), S), std::vector<SlotLayout>(n.outputs.size(), S)};
}

NodeLayouts clip(const Graph& g, const Node& n) {
  const bool grad = !n.domain.empty();
  std::vector<std::string> data{n.inputs[0], n.outputs[0]};
  if (grad) data.push_back(n.inputs[1]);
  if (!same_shapes(g, data)) return {};
  return grad ? NodeLayouts{{S, S, P, P}, {S}} : NodeLayouts{{S, P, P}, {S}};
}

NodeLayouts sum_to_shape(const Graph& g, const Node& n) {
  if (!node_shapes_agree(g, n)) return {};
  return {{S, A}, {S}};
}

NodeLayouts dropout(const Graph& g, const Node& n) {
  if (!same_shapes(g, {n.inputs.at(0), n.outputs.at(0), n.outputs.size() > 1 ? n.outputs[1] : ""})) return {};
  return {{S}, {S, S}};
}

NodeLayouts dropout_grad(const Graph& g, const Node& n) {
  if (!same_shapes(g, {n.inputs.at(0), n.inputs.at(1), n.outputs.at(0)})) return {};
  return {{S, S}, {S}};
}

LayoutRule fixed(NodeLayouts l) {
  return [l](const Graph&, const Node&) { return l; };
}

InPlaceRule in_place(std::vector<InPlacePair> pairs) {
  return [pairs](const Node&, const InPlaceDims&, const std::vector<int64_t>*) { return pairs; };
}

InPlaceRule in_place_binary(bool commutative) {
  using Pairs = std::vector<InPlacePair>;
  return [commutative](const Node&, const InPlaceDims& in, const std::vector<int64_t>* out0) -> Pairs {
    const std::vector<int64_t>* a = in(0);
    const std::vector<int64_t>* b = in(1);
    if (!out0 || !a || !b) return {};
    if (*a == *out0) return {{0, 0}};
    if (commutative && *b == *out0) return {{0, 1}};
    return {};
  };
}

NarrowRule narrow(std::vector<size_t> inputs, std::vector<size_t> outputs) {
  NodeSlots slots;
  for (size_t i : inputs) {
    if (slots.inputs.size() <= i) slots.inputs.resize(i + 1);
    slots.inputs[i] = true;
  }
  for (size_t k : outputs) {
    if (slots.outputs.size() <= k) slots.outputs.resize(k + 1);
    slots.outputs[k] = true;
  }
  return [slots](const Graph&, const Node&) { return slots; };
}

}  // namespace trainrt::facts
