#include "runtime/layout.h"

#include <algorithm>
#include <map>
#include <string>

#include "ops/core/rounded_outputs.h"

namespace trainrt {

std::vector<Layout> choose_layouts(const Plan& plan, const Backend& backend) {
  const size_t count = plan.values.size();
  const int end = static_cast<int>(plan.steps.size());
  const Layout layout = backend.blocked_layout;
  std::vector<char> blocked(count, 0);
  for (size_t v = 0; v < count; ++v) {
    const PlannedValue& pv = plan.values[v];
    blocked[v] = pv.storage == Storage::Arena && pv.def >= 0 && pv.last < end && layout_fits(layout, pv.dims) &&
                 dtype_size(pv.dtype) > 0;
  }
  std::vector<NodeLayouts> rules;
  rules.reserve(plan.steps.size());
  for (const PlanStep& st : plan.steps) rules.push_back(backend.layouts(plan.graph, plan.graph.nodes[st.node]));

  auto slot = [](const std::vector<SlotLayout>& kinds, size_t i) {
    return i < kinds.size() ? kinds[i] : SlotLayout::Plain;
  };
  bool changed = true;
  auto drop = [&](int v) {
    if (v >= 0 && blocked[static_cast<size_t>(v)]) blocked[static_cast<size_t>(v)] = 0, changed = true;
  };
  while (changed) {
    changed = false;
    for (size_t s = 0; s < plan.steps.size(); ++s) {
      const PlanStep& st = plan.steps[s];
      const NodeLayouts& r = rules[s];
      std::vector<int> shared;
      bool shared_plain = false;
      auto visit = [&](const std::vector<int>& values, const std::vector<SlotLayout>& kinds) {
        for (size_t i = 0; i < values.size(); ++i) {
          const int v = values[i];
          if (v < 0) continue;
          switch (slot(kinds, i)) {
            case SlotLayout::Plain:
              drop(v);
              break;
            case SlotLayout::Shared:
              shared.push_back(v);
              shared_plain = shared_plain || !blocked[static_cast<size_t>(v)];
              break;
            case SlotLayout::Any:
            case SlotLayout::Converted:  // add_layout_copies gave it a value of the step's own
              break;
          }
        }
      };
      visit(st.inputs, r.inputs);
      visit(st.outputs, r.outputs);
      if (shared_plain)
        for (int v : shared) drop(v);
    }
    for (size_t v = 0; v < count; ++v) {  // an in-place output and the input it overwrites agree
      const int a = plan.values[v].alias;
      if (plan.values[v].storage == Storage::Arena && a >= 0 && blocked[v] != blocked[static_cast<size_t>(a)]) {
        drop(static_cast<int>(v));
        drop(a);
      }
    }
  }
  std::vector<Layout> out(count, Layout::Plain);
  for (size_t v = 0; v < count; ++v)
    if (blocked[v]) out[v] = layout;
  return out;
}

namespace {

// Under bf16/fp16, whether parameter input j of n, whose layout needs no copy (a 1x1 or
// depthwise filter, one input channel), still gets one: stored in 16 bits
// (runtime/narrow.h), it is rounded once per step instead of converted again by every
// convolution pass that reads it. Only where choose_narrowed will take the copy: n
// declares the slot 16-bit and rounds it, and the Identity declares its output.
bool narrow_copy_pays(const Graph& g, const Backend& backend, const Node& n, size_t j, DataType t, MathPrecision m) {
  if (m == MathPrecision::fp32 || t != DataType::Float32 || !backend.narrow(g, n).input(j)) return false;
  std::vector<bool> wanted(n.outputs.size());
  for (size_t k = 0; k < wanted.size(); ++k) wanted[k] = !n.outputs[k].empty();
  const std::vector<size_t> rounded = math_rounded_inputs(n, wanted);
  if (std::find(rounded.begin(), rounded.end(), j) == rounded.end()) return false;
  Node probe;
  probe.op_type = "Identity", probe.inputs = {n.inputs[j]}, probe.outputs = {n.inputs[j]};
  return backend.narrow(g, probe).output(0);
}

}  // namespace

size_t add_layout_copies(Graph& g, const Backend& backend, MathPrecision m) {
  const Layout layout = backend.blocked_layout;
  const std::unordered_map<std::string, size_t> producers = g.producers();
  // The dims of value v, when known.
  auto dims_of = [&](const std::string& v, std::vector<int64_t>* d, DataType* t) {
    if (auto it = g.initializers.find(v); it != g.initializers.end()) {
      *d = it->second.dims(), *t = it->second.dtype();
      return true;
    }
    const ValueInfo* info = g.find_info(v);
    if (!info || !info->shape || !shape_is_known(*info->shape)) return false;
    *d = shape_dims(*info->shape), *t = info->dtype;
    return true;
  };
  auto fits = [&](const std::string& v, std::vector<int64_t>* d, DataType* t) {
    return dims_of(v, d, t) && dtype_size(*t) > 0 && layout_fits(layout, *d);
  };
  std::vector<Node> nodes, copies_made;       // the graph's nodes; the conversions, appended after them
  std::map<std::string, std::string> copies;  // parameter -> its blocked or 16-bit copy
  nodes.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const NodeLayouts r = backend.layouts(g, g.nodes[i]);
    Node n = g.nodes[i];
    for (size_t j = 0; j < n.inputs.size() && j < r.inputs.size(); ++j) {
      const std::string v = n.inputs[j];
      std::vector<int64_t> d;
      DataType t{};
      if (r.inputs[j] != SlotLayout::Converted || v.empty() || producers.count(v) || !dims_of(v, &d, &t)) continue;
      const bool blocked = fits(v, &d, &t);
      if (!blocked && !narrow_copy_pays(g, backend, n, j, t, m)) continue;
      // "/narrow": a copy in the parameter's own layout, there to be stored in 16 bits.
      auto [it, fresh] = copies.emplace(v, v + (blocked ? "/blocked" : "/narrow"));
      if (fresh) {  // one copy per step, whatever the number of readers
        g.values[it->second] = ValueInfo(t, shape_of(d));
        Node c;
        c.name = it->second, c.op_type = "Identity", c.inputs = {v}, c.outputs = {it->second};
        copies_made.push_back(std::move(c));
      }
      n.inputs[j] = it->second;
    }
    std::vector<Node> back;  // conversions of n's blocked outputs
    for (size_t k = 0; k < n.outputs.size() && k < r.outputs.size(); ++k) {
      const std::string v = n.outputs[k];
      std::vector<int64_t> d;
      DataType t{};
      if (r.outputs[k] != SlotLayout::Converted || v.empty() || !fits(v, &d, &t)) continue;
      const std::string b = v + "/blocked";
      g.values[b] = ValueInfo(t, shape_of(d));
      Node c;
      c.name = b, c.op_type = "Identity", c.inputs = {b}, c.outputs = {v};
      back.push_back(std::move(c));
      n.outputs[k] = b;
    }
    nodes.push_back(std::move(n));
    for (Node& c : back) copies_made.push_back(std::move(c));
  }
  // Appended: every node keeps its index (messages name nodes by it, Dropout's masks derive from it).
  for (Node& c : copies_made) nodes.push_back(std::move(c));
  g.nodes = std::move(nodes);
  return copies_made.size();
}

}  // namespace trainrt
