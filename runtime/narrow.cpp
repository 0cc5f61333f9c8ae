#include "runtime/narrow.h"

#include <set>

#include "ops/core/rounded_outputs.h"
namespace trainrt {

std::map<std::string, DataType> choose_narrowed(const Graph& g, const std::vector<std::string>& keep,
                                                const std::vector<std::string>& state_updates, const Backend& backend,
                                                MathPrecision m) {
  std::map<std::string, DataType> out;
  if (m == MathPrecision::fp32) return out;
  const DataType narrow = m == MathPrecision::bf16 ? DataType::BFloat16 : DataType::Float16;
  std::set<std::string> outside(keep.begin(), keep.end());
  outside.insert(state_updates.begin(), state_updates.end());
  outside.insert(g.inputs.begin(), g.inputs.end());
  outside.insert(g.outputs.begin(), g.outputs.end());

  // Per node: its declared slots and the inputs it reads rounded.
  std::vector<NodeSlots> slots;
  std::vector<std::set<size_t>> rounded;
  slots.reserve(g.nodes.size());
  rounded.reserve(g.nodes.size());
  for (const Node& n : g.nodes) {
    slots.push_back(backend.narrow(g, n));
    std::vector<bool> wanted(n.outputs.size());
    for (size_t k = 0; k < wanted.size(); ++k) wanted[k] = !n.outputs[k].empty();
    const std::vector<size_t> r = math_rounded_inputs(n, wanted);
    rounded.emplace_back(r.begin(), r.end());
  }
  // A value qualifies when its writer declared it and no reader refuses it.
  std::map<std::string, bool> candidate;  // name -> still qualifies (and has a reader)
  std::set<std::string> exact;            // rounded by their writer: any declared reader takes them
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (size_t k : math_rounded_outputs(n))
      if (k < n.outputs.size() && !n.outputs[k].empty()) exact.insert(n.outputs[k]);
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      const std::string& v = n.outputs[k];
      if (v.empty() || outside.count(v) || g.is_initializer(v) || !slots[i].output(k)) continue;
      const ValueInfo* info = g.find_info(v);
      if (!info || info->dtype != DataType::Float32) continue;
      candidate.emplace(v, false);
    }
  }
  std::set<std::string> refused;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (size_t j = 0; j < n.inputs.size(); ++j) {
      auto it = candidate.find(n.inputs[j]);
      if (it == candidate.end()) continue;
      if (slots[i].input(j) && (rounded[i].count(j) || exact.count(it->first)))
        it->second = true;
      else
        refused.insert(it->first);
    }
  }
  for (const auto& [v, read] : candidate)
    if (read && !refused.count(v)) out.emplace(v, narrow);
  return out;
}

}  // namespace trainrt
