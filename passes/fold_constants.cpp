// Constant folding (passes/passes.h fold_constants): nodes of cheap ops whose inputs
// are all constant become initializers.
//
// Constant means: an initializer that is neither a graph input (overridable) nor in
// SimplifyOptions::variable (training state), or the output of a node folded before.
// Shape and Size need no constant input, only a fully known input shape (a fixed
// dimension cannot change: specialize() rejects a feed that disagrees).
// Shape-only ops (Reshape, Flatten, Squeeze, Unsqueeze) take their result's dims
// from the inferred output type, so they follow the op's own shape rule exactly.
// A scalar or 1-D integer value whose elements inference knows (ValueInfo::ints) folds
// whatever its op: Shape -> Gather -> Unsqueeze -> Concat chains, Add/Mul/Div on them,
// Equal/Where on them (bool 0/1) and ConstantOfShape of a known length.
// ConstantOfShape folds with a constant shape, Range with constant integer scalars.
// Transpose and Slice of a constant fold (PyTorch's F.pad export computes pads with them).
// Cast folds only when every value converts exactly (no rounding, no truncation),
// so the folded value is what any backend's Cast kernel would produce.
// The values of ConstantOfShape, Range, Cast, Concat, Transpose, Slice and Gather are
// computed by the ops' reference kernels (run_reference), not by copies of them here.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>

#include "graph/error.h"
#include "graph/infer.h"
#include "graph/schema.h"
#include "ops/core/register_all.h"
#include "passes/fuse_util.h"
#include "passes/passes.h"

namespace trainrt {

namespace {

using passes::is_onnx;

// Dims of value v from its inferred type, when fully known.
std::optional<std::vector<int64_t>> inferred_dims(const Graph& g, const std::string& v) {
  const Shape* s = passes::known_shape(g, v);
  if (!s) return std::nullopt;
  return shape_dims(*s);
}

Tensor int64_vector(const std::vector<int64_t>& v) {
  Tensor t(DataType::Int64, {static_cast<int64_t>(v.size())});
  for (size_t i = 0; i < v.size(); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

// True when every element of x converts to `to` and back to the same double.
bool cast_is_exact(const Tensor& x, DataType to) {
  if (!dtype_is_supported(to) || dtype_size(to) == 0 || x.dtype() == DataType::String) return false;
  if (to == DataType::Float16 || to == DataType::BFloat16 || x.dtype() == DataType::Float16 ||
      x.dtype() == DataType::BFloat16 || to == DataType::Bool || x.dtype() == DataType::Bool)
    return false;  // rounding rules of the narrow types: leave them to the kernel
  Tensor probe(to, {1});
  for (int64_t i = 0; i < x.numel(); ++i) {
    const double v = x.get_as_double(i);
    if (!std::isfinite(v) || std::fabs(v) > 9007199254740992.0) return false;  // beyond 2^53
    probe.set_from_double(0, v);
    if (probe.get_as_double(0) != v) return false;
  }
  return true;
}

// The value of node n computed by its reference kernel (ops/; the oracle every backend is
// tested against), as a tensor of the inferred type: nullopt when the op has none. A
// kernel that refuses its inputs (a Gather index out of range) throws, and the caller
// leaves the node to be run, and reported, at run time.
std::optional<Tensor> run_reference(const Node& n, const std::vector<const Tensor*>& in, DataType dtype,
                                    const std::vector<int64_t>& dims) {
  const Kernel* k = registry().kernels.find("reference", n.domain, n.op_type);
  if (!k) return std::nullopt;
  Tensor out(dtype, dims);
  KernelContext ctx{.node = n, .inputs = in, .outputs = {&out}};
  (*k)(ctx);
  return out;
}

// A scalar or 1-D integer (or bool) value whose elements shape inference knows as numbers
// (ValueInfo::ints: Shape of a known shape, arithmetic on it), as a tensor.
std::optional<Tensor> known_ints(const Graph& g, const std::string& v) {
  const ValueInfo* info = g.find_info(v);
  if (!info || !info->ints || !info->shape || info->shape->size() > 1) return std::nullopt;
  if (info->dtype != DataType::Int64 && info->dtype != DataType::Int32 && info->dtype != DataType::Bool)
    return std::nullopt;
  const std::optional<std::vector<int64_t>> dims = inferred_dims(g, v);
  if (!dims || element_count(*dims) != static_cast<int64_t>(info->ints->size())) return std::nullopt;
  Tensor t(info->dtype, *dims);
  for (size_t k = 0; k < info->ints->size(); ++k) {
    const ShapeInt& e = (*info->ints)[k];
    if (!e.known()) return std::nullopt;
    if (info->dtype == DataType::Int64)
      t.data<int64_t>()[k] = e.value;
    else
      t.set_from_double(static_cast<int64_t>(k), static_cast<double>(e.value));  // int32, bool 0/1
  }
  return t;
}

// The folded value of node n (single output) or nullopt when n is not foldable.
// `in[i]` is the constant value of input i (nullptr when omitted or not constant).
std::optional<Tensor> evaluate(const Graph& g, const Node& n, const std::vector<const Tensor*>& in) {
  auto all_const = [&](size_t from) {
    for (size_t i = from; i < n.inputs.size(); ++i)
      if (!n.inputs[i].empty() && !in[i]) return false;
    return true;
  };
  const std::optional<std::vector<int64_t>> out_dims = inferred_dims(g, n.outputs[0]);
  if (std::optional<Tensor> t = known_ints(g, n.outputs[0])) return t;
  if (is_onnx(n, "Constant")) {
    const Tensor* t = n.has_attr("value") ? n.attr_tensor("value") : nullptr;
    return t ? std::optional<Tensor>(t->clone()) : std::nullopt;
  }
  if (is_onnx(n, "Shape") || is_onnx(n, "Size")) {
    const std::optional<std::vector<int64_t>> d = inferred_dims(g, n.inputs.at(0));
    if (!d) return std::nullopt;
    if (is_onnx(n, "Size")) {
      Tensor t(DataType::Int64, {});
      t.data<int64_t>()[0] = element_count(*d);
      return t;
    }
    const int64_t rank = static_cast<int64_t>(d->size());
    auto clamp = [&](int64_t v) { return std::clamp(v < 0 ? v + rank : v, int64_t{0}, rank); };
    const int64_t start = clamp(n.attr_int("start", 0)), end = clamp(n.attr_int("end", rank));
    return int64_vector(std::vector<int64_t>(d->begin() + start, d->begin() + std::max(start, end)));
  }
  const ValueInfo* out_info = g.find_info(n.outputs[0]);
  auto run = [&](const std::vector<int64_t>& dims) {
    return out_info ? run_reference(n, in, out_info->dtype, dims) : std::nullopt;
  };
  if (is_onnx(n, "ConstantOfShape") && out_dims && all_const(0)) return run(*out_dims);
  // float32 Range is left to run time: the backends' rounding of start + i*delta.
  if (is_onnx(n, "Range") && out_dims && all_const(0) && in.size() == 3 && in[0]->dtype() != DataType::Float32)
    return run(*out_dims);
  if (!all_const(0) || in.empty() || !in[0]) return std::nullopt;
  const Tensor& x = *in[0];
  if (is_onnx(n, "Identity")) return x.clone();
  if (is_onnx(n, "Cast")) {  // x's dims, the type `to`: no inferred type needed
    const DataType to = static_cast<DataType>(n.attr_int("to", 0));
    return cast_is_exact(x, to) ? run_reference(n, in, to, x.dims()) : std::nullopt;
  }
  if (!out_dims) return std::nullopt;
  if (is_onnx(n, "Reshape") || is_onnx(n, "Flatten") || is_onnx(n, "Squeeze") || is_onnx(n, "Unsqueeze")) {
    if (element_count(*out_dims) != x.numel()) return std::nullopt;
    return x.clone().reshaped(*out_dims);
  }
  for (const char* op : {"Concat", "Transpose", "Slice", "Gather"})
    if (is_onnx(n, op)) return run(*out_dims);
  return std::nullopt;
}

}  // namespace

size_t fold_constants(Graph& g, const SimplifyOptions& o) {
  std::set<std::string> not_constant(o.variable.begin(), o.variable.end());
  not_constant.insert(g.inputs.begin(), g.inputs.end());
  not_constant.insert(g.initializer_inputs.begin(), g.initializer_inputs.end());
  const std::set<std::string> outputs(g.outputs.begin(), g.outputs.end());
  std::vector<bool> dead(g.nodes.size(), false);
  size_t folded = 0;
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    if (n.output_count() != 1 || !n.has_output(0) || outputs.count(n.outputs[0])) continue;
    std::vector<const Tensor*> in(n.inputs.size(), nullptr);
    for (size_t k = 0; k < n.inputs.size(); ++k) {
      auto it = g.initializers.find(n.inputs[k]);
      if (it != g.initializers.end() && !not_constant.count(n.inputs[k])) in[k] = &it->second;
    }
    std::optional<Tensor> v;
    try {
      v = evaluate(g, n, in);
    } catch (const Error&) {
      v.reset();  // a malformed node: left for the shape rule / kernel to report
    }
    if (!v || v->numel() > o.max_fold_elements) continue;
    const std::string out = n.outputs[0];
    g.values[out] = ValueInfo{v->dtype(), shape_of(v->dims())};
    g.initializers[out] = std::move(*v);
    dead[i] = true;
    ++folded;
  }
  passes::erase_marked(g, dead);
  return folded;
}

bool has_shape_computation(const Graph& g) {
  static const std::set<std::string> computing{"Shape", "Size", "ConstantOfShape", "Range"};
  for (const Node& n : g.nodes) {
    if (canonical_domain(n.domain).empty() && computing.count(n.op_type)) return true;
    for (const std::string& out : n.outputs) {
      const ValueInfo* info = out.empty() ? nullptr : g.find_info(out);
      if (info && (!info->shape || !shape_is_known(*info->shape))) return true;
    }
  }
  return false;
}

size_t fold_shapes(Graph& g, const OpRegistry& reg, const SimplifyOptions& o) {
  size_t total = 0;
  for (size_t folded = 1; folded > 0; total += folded) {
    infer_shapes(g, reg, "");
    folded = fold_constants(g, o);
  }
  return total;
}

}  // namespace trainrt
