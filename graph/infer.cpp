#include "graph/infer.h"

#include <algorithm>
#include <map>
#include <set>

#include "graph/error.h"

namespace trainrt {

namespace {

std::string prefix(const std::string& where, const std::string& what) {
  return where.empty() ? what : where + ": " + what;
}

void check_opset(const Graph& g, const Node& n, size_t i, const OpSchema& s, const std::string& where) {
  if (!canonical_domain(n.domain).empty()) return;
  int64_t v = g.opset("");
  if (v >= kMinOpset || v >= s.since_version) return;
  throw_unsupported(prefix(where, describe_node(n, i)),
                    "model imports ai.onnx opset " + std::to_string(v) + " but trainrt implements " + n.op_type +
                        " as of opset " + std::to_string(s.since_version) + " (accepted: opset >= " +
                        std::to_string(kMinOpset) + "); hint: re-export with opset_version=13 or newer");
}

void check_size(const std::string& name, const ValueInfo& v, const std::string& at) {
  if (!v.shape) return;
  int64_t n = 1;
  for (const Dim& d : *v.shape) {
    if (!d.known() || d.value == 0) continue;
    const std::optional<int64_t> m = times_within_limit(n, d.value);
    if (!m)
      throw_bad_input(at, "value '" + name + "' would have shape " + shape_to_string(*v.shape) +
                              ", over the limit of 2^36 elements");
    n = *m;
  }
}

// Integer arithmetic on shape values (Add/Sub/Mul/Div/Mod of Gather(Shape(x)), Cast,
// Identity, Equal, Not, Where): the output's elements where every input's are known, so
// Reshape(x, Concat(N, C/2, ...)) still types, and so does PyTorch's expand(n, -1, -1)
// (Where(Equal(s, -1), 1, s)). Numbers combine; a symbol passes through Identity,
// Cast, +0, *1 and /1; anything else is unknown ("?"). A symbol is a dimension, never
// negative, so it equals no negative number; Equal's bool output is 0 or 1.
std::optional<ShapeInt> combine(const std::string& op, const ShapeInt& a, const ShapeInt& b) {
  if (op == "Equal") {
    if (a.known() && b.known()) return ShapeInt::of(a.value == b.value);
    if (!a.known() && !b.known() && a.symbol != "?" && a.symbol == b.symbol) return ShapeInt::of(1);
    const ShapeInt& num = a.known() ? a : b;
    const ShapeInt& sym = a.known() ? b : a;
    if (num.known() && num.value < 0 && sym.symbol != "?") return ShapeInt::of(0);
    return ShapeInt{0, "?"};
  }
  if (a.known() && b.known()) {
    if ((op == "Div" || op == "Mod") && b.value == 0) return std::nullopt;  // the kernel reports it
    if (op == "Mod") {  // fmod = 0: the remainder takes the divisor's sign
      const int64_t r = b.value == -1 ? 0 : a.value % b.value;
      return ShapeInt::of(r != 0 && (r < 0) != (b.value < 0) ? r + b.value : r);
    }
    return ShapeInt::of(op == "Add"   ? a.value + b.value
                        : op == "Sub" ? a.value - b.value
                        : op == "Mul" ? a.value * b.value
                                      : a.value / b.value);
  }
  if (b.known() && ((op == "Add" || op == "Sub") ? b.value == 0 : b.value == 1)) return a;
  if (a.known() && ((op == "Add" && a.value == 0) || (op == "Mul" && a.value == 1))) return b;
  return ShapeInt{0, "?"};
}

std::optional<std::vector<ShapeInt>> arithmetic_ints(const InferContext& ctx, const ValueInfo& out) {
  const Node& n = ctx.node();
  static const std::set<std::string> ops{"Add",  "Sub",      "Mul",   "Div",   "Mod",
                                         "Cast", "Identity", "Equal", "Where", "Not"};
  if (!canonical_domain(n.domain).empty() || !ops.count(n.op_type)) return std::nullopt;
  if (n.op_type == "Mod" && n.attr_int("fmod", 0) != 0) return std::nullopt;  // C's fmod: not folded here
  const bool is_bool = n.op_type == "Equal" || n.op_type == "Not";
  if (is_bool ? out.dtype != DataType::Bool : (out.dtype != DataType::Int64 && out.dtype != DataType::Int32))
    return std::nullopt;
  if (!out.shape || out.shape->size() > 1) return std::nullopt;
  std::vector<std::vector<ShapeInt>> in;
  for (size_t i = 0; i < n.inputs.size(); ++i) {
    std::optional<std::vector<ShapeInt>> v = ctx.input_ints(i);
    if (!v) return std::nullopt;
    in.push_back(*v);
  }
  if (n.op_type == "Not") {  // bool 0/1 in, 1/0 out
    std::vector<ShapeInt> r;
    for (const ShapeInt& v : in[0]) r.push_back(v.known() ? ShapeInt::of(v.value == 0) : ShapeInt{0, "?"});
    return r;
  }
  if (in.size() == 1) return in[0];
  if (in.size() != (n.op_type == "Where" ? 3u : 2u)) return std::nullopt;
  size_t len = 1;
  for (const std::vector<ShapeInt>& v : in) len = std::max(len, v.size());
  for (const std::vector<ShapeInt>& v : in)
    if (v.size() != len && v.size() != 1) return std::nullopt;
  auto at = [&](size_t i, size_t k) -> const ShapeInt& { return in[i][in[i].size() == 1 ? 0 : k]; };
  std::vector<ShapeInt> r;
  for (size_t k = 0; k < len; ++k) {
    if (n.op_type == "Where") {  // Where(cond, a, b): cond's pick, or a when both agree
      const ShapeInt &c = at(0, k), &a = at(1, k), &b = at(2, k);
      r.push_back(c.known() ? (c.value ? a : b) : (a == b && a.symbol != "?") ? a : ShapeInt{0, "?"});
      continue;
    }
    std::optional<ShapeInt> e = combine(n.op_type, at(0, k), at(1, k));
    if (!e) return std::nullopt;
    r.push_back(*e);
  }
  return r;
}

}  // namespace

std::vector<size_t> shape_input_slots(const Node& n) {
  if (!canonical_domain(n.domain).empty()) return {};
  static const std::map<std::string, std::vector<size_t>> slots{
      {"Reshape", {1}},     {"Pad", {1, 3}},    {"Expand", {1}},     {"Slice", {1, 2, 3, 4}}, {"ConstantOfShape", {0}},
      {"Range", {0, 1, 2}}, {"Unsqueeze", {1}}, {"Squeeze", {1}},    {"Split", {1}},          {"Tile", {1}},
      {"ReduceSum", {1}},   {"ReduceMax", {1}}, {"ReduceMean", {1}},  // axes (an input from opset 13 / 18)
      {"Resize", {2, 3}},   {"Upsample", {1}},                        // scales (float) and sizes
  };
  auto it = slots.find(n.op_type);
  return it == slots.end() ? std::vector<size_t>{} : it->second;
}

void validate_graph(const Graph& g, const OpRegistry& reg, const std::string& where) {
  if (g.opsets.empty()) throw_bad_input(where, "model has no opset_import");

  // 1. Every unsupported op at once.
  std::string unknown;
  size_t unknown_count = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (reg.find(n.domain, n.op_type)) continue;
    if (unknown_count++ < 20) {
      unknown += unknown.empty() ? "" : ", ";
      unknown += describe_node(n, i);
      if (!canonical_domain(n.domain).empty()) unknown += " in domain '" + n.domain + "'";
    }
  }
  if (unknown_count)
    throw_unsupported(where, std::to_string(unknown_count) + " unsupported op" + (unknown_count > 1 ? "s" : "") + ": " +
                                 unknown + (unknown_count > 20 ? ", ..." : ""));

  // 2. Names: each value is defined once.
  std::set<std::string> defined;
  for (const std::string& in : g.inputs)
    if (!defined.insert(in).second) throw_bad_input(where, "graph input '" + in + "' is declared twice");
  for (const auto& [name, t] : g.initializers) defined.insert(name);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    for (const std::string& o : n.outputs) {
      if (o.empty()) continue;
      if (!defined.insert(o).second)
        throw_bad_input(prefix(where, describe_node(n, i)),
                        "output '" + o + "' is already defined (duplicate value name)");
    }
  }

  // 3. Arity, attributes, opsets, missing inputs.
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    const OpSchema& s = *reg.find(n.domain, n.op_type);
    const std::string at = prefix(where, describe_node(n, i));
    int ins = static_cast<int>(n.input_count()), outs = static_cast<int>(n.output_count());
    if (ins < s.min_inputs || ins > s.max_inputs)
      throw_bad_input(
          at, "has " + std::to_string(ins) + " inputs, expected " +
                  (s.min_inputs == s.max_inputs ? std::to_string(s.min_inputs)
                                                : std::to_string(s.min_inputs) + ".." + std::to_string(s.max_inputs)));
    if (outs < s.min_outputs || outs > s.max_outputs)
      throw_bad_input(at, "has " + std::to_string(outs) + " outputs, expected " +
                              (s.min_outputs == s.max_outputs
                                   ? std::to_string(s.min_outputs)
                                   : std::to_string(s.min_outputs) + ".." + std::to_string(s.max_outputs)));
    for (int k = 0; k < s.min_inputs; ++k)
      if (n.inputs[k].empty()) throw_bad_input(at, "required input " + std::to_string(k) + " is empty");
    if (!s.attributes.empty()) {
      for (const auto& [key, a] : n.attrs) {
        bool known = false;
        for (const std::string& k : s.attributes) known = known || k == key;
        if (!known) throw_unsupported(at, "attribute '" + key + "' is not supported");
      }
    }
    check_opset(g, n, i, s, where);
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      const std::string& in = n.inputs[k];
      if (!in.empty() && !defined.count(in))
        throw_bad_input(at, "input " + std::to_string(k) + " '" + in +
                                "' is not a graph input, an initializer or any node's output");
    }
  }
  for (const std::string& o : g.outputs)
    if (!defined.count(o)) throw_bad_input(where, "graph output '" + o + "' is never produced");

  // 4. Cycles (names the first node on one).
  try {
    (void)g.topological_order();
  } catch (const Error& e) {
    throw_bad_input(where, e.what());
  }
}

void infer_shapes(Graph& g, const OpRegistry& reg, const std::string& where,
                  const std::unordered_map<std::string, ValueInfo>& declared) {
  std::vector<size_t> order = g.topological_order();
  for (const auto& [name, v] : g.values) check_size(name, v, where);  // inputs and initializers
  for (size_t i : order) {
    const Node& n = g.nodes[i];
    const OpSchema* s = reg.find(n.domain, n.op_type);
    if (!s) throw_unsupported(prefix(where, describe_node(n, i)), "op is not supported");
    std::vector<ValueInfo> outs(n.outputs.size());
    InferContext ctx(g, n, i, outs);
    try {
      s->infer(ctx);
      for (ValueInfo& out : outs)
        if (!out.ints && out.dtype != DataType::Undefined) out.ints = arithmetic_ints(ctx, out);
    } catch (const Error& e) {
      throw Error(e.kind(), prefix(where, e.what()));
    }
    for (size_t k = 0; k < n.outputs.size(); ++k) {
      if (n.outputs[k].empty()) continue;
      ValueInfo& out = outs[k];
      if (out.dtype == DataType::Undefined)
        throw_internal(prefix(where, describe_node(n, i)), "shape rule left output " + std::to_string(k) + " untyped");
      auto d = declared.find(n.outputs[k]);
      if (d != declared.end()) {
        const ValueInfo& want = d->second;
        if (want.dtype != DataType::Undefined && want.dtype != out.dtype)
          throw_bad_input(prefix(where, describe_node(n, i)), "output '" + n.outputs[k] + "' is declared " +
                                                                  dtype_name(want.dtype) + " but computes " +
                                                                  dtype_name(out.dtype));
        if (want.shape && out.shape) {
          bool ok = want.shape->size() == out.shape->size();
          for (size_t j = 0; ok && j < want.shape->size(); ++j) {
            const Dim &a = (*want.shape)[j], &b = (*out.shape)[j];
            ok = !(a.known() && b.known() && a.value != b.value);
          }
          if (!ok)
            throw_bad_input(prefix(where, describe_node(n, i)), "output '" + n.outputs[k] + "' is declared " +
                                                                    shape_to_string(*want.shape) + " but computes " +
                                                                    shape_to_string(*out.shape));
        }
        if (!out.shape && want.shape) out.shape = want.shape;
      }
      check_size(n.outputs[k], out, prefix(where, describe_node(n, i)));
      g.values[n.outputs[k]] = std::move(out);
    }
  }
}

}  // namespace trainrt
