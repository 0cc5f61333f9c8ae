#include "graph/passes.h"

#include <set>
#include <unordered_set>

namespace trainrt {

size_t eliminate_dead_nodes(Graph& g, const std::vector<std::string>& keep) {
  std::unordered_set<std::string> live(g.outputs.begin(), g.outputs.end());
  live.insert(keep.begin(), keep.end());
  std::vector<bool> alive(g.nodes.size(), false);
  // Nodes are topologically sorted: one backward sweep finds everything live.
  for (size_t i = g.nodes.size(); i-- > 0;) {
    const Node& n = g.nodes[i];
    for (const std::string& o : n.outputs) alive[i] = alive[i] || (!o.empty() && live.count(o));
    if (!alive[i]) continue;
    for (const std::string& in : n.inputs)
      if (!in.empty()) live.insert(in);
  }
  std::vector<Node> kept;
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (alive[i]) kept.push_back(std::move(g.nodes[i]));
  size_t removed = g.nodes.size() - kept.size();
  g.nodes = std::move(kept);
  for (auto it = g.initializers.begin(); it != g.initializers.end();)
    it = live.count(it->first) ? std::next(it) : g.initializers.erase(it);
  std::set<std::string> named(g.inputs.begin(), g.inputs.end());
  for (const auto& [k, t] : g.initializers) named.insert(k);
  for (const Node& n : g.nodes)
    for (const std::string& o : n.outputs) named.insert(o);
  for (auto it = g.values.begin(); it != g.values.end();)
    it = named.count(it->first) ? std::next(it) : g.values.erase(it);
  return removed;
}

}  // namespace trainrt
