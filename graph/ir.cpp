#include "graph/ir.h"

#include <algorithm>
#include <queue>

#include "graph/error.h"

namespace trainrt {

std::string shape_to_string(const Shape& s) {
  std::string out = "[";
  for (size_t i = 0; i < s.size(); ++i) {
    if (i) out += ",";
    out += s[i].known() ? std::to_string(s[i].value) : (s[i].symbol.empty() ? "?" : s[i].symbol);
  }
  return out + "]";
}

Shape shape_of(const std::vector<int64_t>& dims) {
  Shape s;
  for (int64_t d : dims) s.push_back(Dim::of(d));
  return s;
}

bool shape_is_known(const Shape& s) {
  return std::all_of(s.begin(), s.end(), [](const Dim& d) { return d.known(); });
}

std::vector<int64_t> shape_dims(const Shape& s) {
  std::vector<int64_t> out;
  for (const Dim& d : s) {
    if (!d.known()) throw_internal("shape_dims", "shape " + shape_to_string(s) + " is not fully known");
    out.push_back(d.value);
  }
  return out;
}

const char* attribute_kind_name(Attribute::Kind k) {
  switch (k) {
    case Attribute::Kind::Float:
      return "float";
    case Attribute::Kind::Int:
      return "int";
    case Attribute::Kind::String:
      return "string";
    case Attribute::Kind::Tensor:
      return "tensor";
    case Attribute::Kind::Floats:
      return "floats";
    case Attribute::Kind::Ints:
      return "ints";
    case Attribute::Kind::Strings:
      return "strings";
  }
  return "?";
}

namespace {
const Attribute* get_attr(const Node& n, const std::string& key, Attribute::Kind kind) {
  auto it = n.attrs.find(key);
  if (it == n.attrs.end()) return nullptr;
  if (it->second.kind != kind)
    throw_bad_input("node '" + n.name + "' (" + n.op_type + ")", "attribute '" + key + "' must be " +
                                                                     attribute_kind_name(kind) + ", got " +
                                                                     attribute_kind_name(it->second.kind));
  return &it->second;
}
}  // namespace

int64_t Node::attr_int(const std::string& key, int64_t fallback) const {
  const Attribute* a = get_attr(*this, key, Attribute::Kind::Int);
  return a ? a->i : fallback;
}
float Node::attr_float(const std::string& key, float fallback) const {
  const Attribute* a = get_attr(*this, key, Attribute::Kind::Float);
  return a ? a->f : fallback;
}
std::string Node::attr_string(const std::string& key, const std::string& fallback) const {
  const Attribute* a = get_attr(*this, key, Attribute::Kind::String);
  return a ? a->s : fallback;
}
std::vector<int64_t> Node::attr_ints(const std::string& key, std::vector<int64_t> fallback) const {
  const Attribute* a = get_attr(*this, key, Attribute::Kind::Ints);
  return a ? a->ints : fallback;
}
std::vector<float> Node::attr_floats(const std::string& key, std::vector<float> fallback) const {
  const Attribute* a = get_attr(*this, key, Attribute::Kind::Floats);
  return a ? a->floats : fallback;
}
const Tensor* Node::attr_tensor(const std::string& key) const {
  const Attribute* a = get_attr(*this, key, Attribute::Kind::Tensor);
  return a ? &a->t : nullptr;
}

size_t Node::input_count() const {
  size_t n = inputs.size();
  while (n > 0 && inputs[n - 1].empty()) --n;
  return n;
}
size_t Node::output_count() const {
  size_t n = outputs.size();
  while (n > 0 && outputs[n - 1].empty()) --n;
  return n;
}

std::string describe_node(const Node& n, size_t index) {
  return "node " + std::to_string(index) + " '" + n.name + "' (" + n.op_type + ")";
}

const ValueInfo& Graph::info(const std::string& value) const {
  const ValueInfo* v = find_info(value);
  if (!v) throw_internal("Graph::info", "value '" + value + "' has no type");
  return *v;
}
ValueInfo* Graph::find_info(const std::string& value) {
  auto it = values.find(value);
  return it == values.end() ? nullptr : &it->second;
}
const ValueInfo* Graph::find_info(const std::string& value) const {
  auto it = values.find(value);
  return it == values.end() ? nullptr : &it->second;
}

int64_t Graph::opset(const std::string& domain) const {
  auto it = opsets.find(domain);
  if (it == opsets.end() && domain.empty()) it = opsets.find("ai.onnx");
  return it == opsets.end() ? 0 : it->second;
}

std::unordered_map<std::string, size_t> Graph::producers() const {
  std::unordered_map<std::string, size_t> out;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const std::string& o : nodes[i].outputs)
      if (!o.empty()) out[o] = i;
  return out;
}

std::unordered_map<std::string, std::vector<size_t>> Graph::consumers() const {
  std::unordered_map<std::string, std::vector<size_t>> out;
  for (size_t i = 0; i < nodes.size(); ++i)
    for (const std::string& in : nodes[i].inputs)
      if (!in.empty()) out[in].push_back(i);
  return out;
}

std::vector<size_t> Graph::topological_order() const {
  auto prod = producers();
  std::vector<std::vector<size_t>> users(nodes.size());
  std::vector<int> pending(nodes.size(), 0);
  for (size_t i = 0; i < nodes.size(); ++i) {
    for (const std::string& in : nodes[i].inputs) {
      auto it = in.empty() ? prod.end() : prod.find(in);
      if (it == prod.end()) continue;
      users[it->second].push_back(i);
      ++pending[i];
    }
  }
  // Min-heap on the original index keeps the file's order when it is already valid.
  std::priority_queue<size_t, std::vector<size_t>, std::greater<>> ready;
  for (size_t i = 0; i < nodes.size(); ++i)
    if (pending[i] == 0) ready.push(i);
  std::vector<size_t> order;
  order.reserve(nodes.size());
  while (!ready.empty()) {
    size_t i = ready.top();
    ready.pop();
    order.push_back(i);
    for (size_t u : users[i])
      if (--pending[u] == 0) ready.push(u);
  }
  if (order.size() != nodes.size()) {
    for (size_t i = 0; i < nodes.size(); ++i)
      if (pending[i] > 0) throw_bad_input(describe_node(nodes[i], i), "is on a cycle (the graph is not a DAG)");
  }
  return order;
}

void Graph::sort_topologically() {
  std::vector<size_t> order = topological_order();
  std::vector<Node> sorted;
  sorted.reserve(nodes.size());
  for (size_t i : order) sorted.push_back(std::move(nodes[i]));
  nodes = std::move(sorted);
}

int64_t Graph::parameter_count() const {
  int64_t n = 0;
  for (const auto& [name, t] : initializers)
    if (dtype_is_float(t.dtype())) n += t.numel();
  return n;
}

}  // namespace trainrt
