#include "passes/passes.h"

#include <algorithm>
#include <cstdio>
#include <set>
#include <unordered_set>

#include "graph/error.h"
#include "passes/fuse_util.h"

namespace trainrt {

// ---- helpers (passes/fuse_util.h) ------------------------------------------------

namespace passes {

Uses::Uses(const Graph& g) : graph_outputs(g.outputs.begin(), g.outputs.end()) {
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    for (const std::string& o : g.nodes[i].outputs)
      if (!o.empty()) producer[o] = i;
    for (const std::string& in : g.nodes[i].inputs)
      if (!in.empty()) readers[in].push_back(i);
  }
}

size_t Uses::sole_reader(const std::string& v) const {
  if (v.empty() || graph_outputs.count(v)) return npos;
  auto it = readers.find(v);
  return it == readers.end() || it->second.size() != 1 ? npos : it->second[0];
}

size_t Uses::producer_of(const std::string& v) const {
  auto it = producer.find(v);
  return it == producer.end() ? npos : it->second;
}

bool is_onnx(const Node& n, const char* op_type) {
  return n.op_type == op_type && (n.domain.empty() || n.domain == "ai.onnx");
}

bool is_trainrt(const Node& n, const char* op_type) { return n.op_type == op_type && n.domain == kTrainrtDomain; }

void replace_reads(Graph& g, const std::string& from, const std::string& to) {
  for (Node& n : g.nodes) std::replace(n.inputs.begin(), n.inputs.end(), from, to);
}

void erase_marked(Graph& g, const std::vector<bool>& dead) {
  TRAINRT_ASSERT(dead.size() == g.nodes.size());
  std::vector<Node> kept;
  kept.reserve(g.nodes.size());
  for (size_t i = 0; i < g.nodes.size(); ++i)
    if (!dead[i]) kept.push_back(std::move(g.nodes[i]));
  g.nodes = std::move(kept);
}

bool read_only_after(const Uses& u, const std::string& v, size_t pos) {
  if (v.empty()) return true;
  const auto r = u.readers.find(v);
  return r == u.readers.end() || std::all_of(r->second.begin(), r->second.end(), [&](size_t i) { return i > pos; });
}

bool bypass_node(Graph& g, size_t i) {
  const std::string in = g.nodes[i].inputs.at(0), out = g.nodes[i].outputs.at(0);
  const bool out_is_output = std::find(g.outputs.begin(), g.outputs.end(), out) != g.outputs.end();
  if (!out_is_output) {
    replace_reads(g, out, in);
  } else {
    // The graph output keeps its name: the input's producer writes it directly.
    const bool in_is_output = std::find(g.outputs.begin(), g.outputs.end(), in) != g.outputs.end();
    size_t producer = npos;
    for (size_t k = 0; k < g.nodes.size(); ++k)
      if (std::find(g.nodes[k].outputs.begin(), g.nodes[k].outputs.end(), in) != g.nodes[k].outputs.end()) producer = k;
    if (producer == npos || in_is_output) return false;
    for (std::string& o : g.nodes[producer].outputs)
      if (o == in) o = out;
    replace_reads(g, in, out);
    g.values.erase(in);
  }
  g.nodes.erase(g.nodes.begin() + static_cast<std::ptrdiff_t>(i));
  return true;
}

std::string fresh_name(const Graph& g, const std::string& base) {
  std::string name = base;
  for (int k = 1; g.find_info(name) || g.is_initializer(name); ++k) name = base + "_" + std::to_string(k);
  return name;
}

const Shape* known_shape(const Graph& g, const std::string& v) {
  const ValueInfo* info = g.find_info(v);
  if (!info || !info->shape || !shape_is_known(*info->shape)) return nullptr;
  return &*info->shape;
}

}  // namespace passes

// ---- dead nodes -------------------------------------------------------------------

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
  std::erase_if(g.initializer_inputs, [&](const std::string& v) { return !g.is_initializer(v); });
  std::set<std::string> named(g.inputs.begin(), g.inputs.end());
  for (const auto& [k, t] : g.initializers) named.insert(k);
  for (const Node& n : g.nodes)
    for (const std::string& o : n.outputs) named.insert(o);
  for (auto it = g.values.begin(); it != g.values.end();)
    it = named.count(it->first) ? std::next(it) : g.values.erase(it);
  return removed;
}

size_t simplify(Graph& g, const SimplifyOptions& o) {
  const size_t before = g.nodes.size();
  fold_constants(g, o);
  eliminate_dead_nodes(g, o.keep);
  return before - g.nodes.size();
}

// ---- report -----------------------------------------------------------------------

namespace {

std::map<std::string, size_t> op_counts(const Graph& g) {
  std::map<std::string, size_t> counts;
  for (const Node& n : g.nodes) {
    const bool onnx = n.domain.empty() || n.domain == "ai.onnx";
    ++counts[onnx ? n.op_type : n.domain + "::" + n.op_type];
  }
  return counts;
}

}  // namespace

PassReport pass_report(const Graph& before, const Graph& after) {
  PassReport r;
  r.before = op_counts(before);
  r.after = op_counts(after);
  r.nodes_before = before.nodes.size();
  r.nodes_after = after.nodes.size();
  r.initializers_before = before.initializers.size();
  r.initializers_after = after.initializers.size();
  return r;
}

std::string describe_passes(const Graph& before, const Graph& after) {
  const PassReport r = pass_report(before, after);
  std::set<std::string> ops;
  for (const auto& [op, c] : r.before) ops.insert(op);
  for (const auto& [op, c] : r.after) ops.insert(op);
  size_t width = 12;
  for (const std::string& op : ops) width = std::max(width, op.size());
  auto line = [&](const std::string& op, size_t b, size_t a) {
    char buf[64];
    const long change = static_cast<long>(a) - static_cast<long>(b);
    std::snprintf(buf, sizeof buf, "  %7zu  %7zu  %+7ld\n", b, a, change);
    return op + std::string(width - op.size(), ' ') + buf;
  };
  std::string s = "op" + std::string(width - 2, ' ') + "   before    after   change\n";
  auto count = [](const std::map<std::string, size_t>& m, const std::string& op) {
    auto it = m.find(op);
    return it == m.end() ? size_t{0} : it->second;
  };
  for (const std::string& op : ops) s += line(op, count(r.before, op), count(r.after, op));
  s += line("nodes", r.nodes_before, r.nodes_after);
  s += line("initializers", r.initializers_before, r.initializers_after);
  return s;
}

}  // namespace trainrt
