#include "runtime/layout.h"

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

}  // namespace trainrt
