// Constant folding (graph/passes.h fold_constants): nodes of cheap ops whose inputs
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
#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <set>

#include "graph/error.h"
#include "graph/fuse_util.h"
#include "graph/infer.h"
#include "graph/passes.h"
#include "graph/schema.h"

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

// Concatenation of same-dtype tensors along `axis` (already normalised).
Tensor concat(const std::vector<const Tensor*>& in, int64_t axis, const std::vector<int64_t>& out_dims) {
  Tensor out(in[0]->dtype(), out_dims);
  const size_t esize = dtype_size(out.dtype());
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= out_dims[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < out_dims.size(); ++d) inner *= out_dims[d];
  std::byte* dst = out.raw();
  for (int64_t o = 0; o < outer; ++o)
    for (const Tensor* t : in) {
      const size_t chunk = static_cast<size_t>(t->dims()[static_cast<size_t>(axis)] * inner) * esize;
      if (chunk == 0) continue;
      std::memcpy(dst, t->raw() + static_cast<size_t>(o) * chunk, chunk);
      dst += chunk;
    }
  return out;
}

// Gather(data, indices; axis) -> data[outer, indices..., inner]; nullopt on a bad index.
std::optional<Tensor> gather(const Tensor& data, const Tensor& idx, int64_t axis,
                             const std::vector<int64_t>& out_dims) {
  if (idx.dtype() != DataType::Int64 && idx.dtype() != DataType::Int32) return std::nullopt;
  Tensor out(data.dtype(), out_dims);
  const size_t esize = dtype_size(data.dtype());
  const int64_t dim = data.dims()[static_cast<size_t>(axis)];
  int64_t outer = 1, inner = 1;
  for (int64_t d = 0; d < axis; ++d) outer *= data.dims()[static_cast<size_t>(d)];
  for (size_t d = static_cast<size_t>(axis) + 1; d < data.dims().size(); ++d) inner *= data.dims()[d];
  if (out.numel() != outer * idx.numel() * inner) return std::nullopt;
  const size_t row = static_cast<size_t>(inner) * esize;
  std::byte* dst = out.raw();
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t k = 0; k < idx.numel(); ++k) {
      int64_t j = static_cast<int64_t>(idx.get_as_double(k));
      if (j < 0) j += dim;
      if (j < 0 || j >= dim) return std::nullopt;  // the kernel reports it at run time
      if (row) std::memcpy(dst, data.raw() + static_cast<size_t>(o * dim + j) * row, row);
      dst += row;
    }
  return out;
}

// y[i] = x[src(i)] for every multi-index i of out_dims, src mapping output to input
// per axis as start[d] + i[d] * step[d] along input axis axis_of[d] (Transpose, Slice).
Tensor strided_copy(const Tensor& x, const std::vector<int64_t>& out_dims, const std::vector<int64_t>& axis_of,
                    const std::vector<int64_t>& start, const std::vector<int64_t>& step) {
  Tensor out(x.dtype(), out_dims);
  const size_t esize = dtype_size(x.dtype());
  const size_t r = out_dims.size();
  std::vector<int64_t> in_stride(x.dims().size(), 1);
  for (size_t d = x.dims().size(); d-- > 1;) in_stride[d - 1] = in_stride[d] * x.dims()[d];
  std::vector<int64_t> idx(r, 0);
  for (int64_t i = 0; i < out.numel(); ++i) {
    int64_t off = 0;
    for (size_t d = 0; d < r; ++d) off += (start[d] + idx[d] * step[d]) * in_stride[static_cast<size_t>(axis_of[d])];
    std::memcpy(out.raw() + static_cast<size_t>(i) * esize, x.raw() + static_cast<size_t>(off) * esize, esize);
    for (size_t d = r; d-- > 0;) {
      if (++idx[d] < out_dims[d]) break;
      idx[d] = 0;
    }
  }
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
  if (is_onnx(n, "ConstantOfShape") && out_dims && all_const(0)) {
    Tensor t(g.info(n.outputs[0]).dtype, *out_dims);
    const Tensor* value = n.has_attr("value") ? n.attr_tensor("value") : nullptr;
    const size_t esize = dtype_size(t.dtype());
    if (value && value->nbytes() == esize)
      for (int64_t i = 0; i < t.numel(); ++i)
        std::memcpy(t.raw() + static_cast<size_t>(i) * esize, value->raw(), esize);
    return t;
  }
  if (is_onnx(n, "Range") && out_dims && all_const(0) && in.size() == 3 && in[0]->dtype() != DataType::Float32) {
    Tensor t(in[0]->dtype(), *out_dims);  // float32 is left to the kernel: its rounding of start + i*delta
    const double start = in[0]->get_as_double(0), delta = in[2]->get_as_double(0);
    for (int64_t i = 0; i < t.numel(); ++i) t.set_from_double(i, start + static_cast<double>(i) * delta);
    return t;
  }
  if (!all_const(0) || in.empty() || !in[0]) return std::nullopt;
  const Tensor& x = *in[0];
  if (is_onnx(n, "Identity")) return x.clone();
  if (is_onnx(n, "Cast")) {
    const DataType to = static_cast<DataType>(n.attr_int("to", 0));
    if (!cast_is_exact(x, to)) return std::nullopt;
    return x.dtype() == to ? x.clone() : x.cast(to);
  }
  if (!out_dims) return std::nullopt;
  if (is_onnx(n, "Reshape") || is_onnx(n, "Flatten") || is_onnx(n, "Squeeze") || is_onnx(n, "Unsqueeze")) {
    if (element_count(*out_dims) != x.numel()) return std::nullopt;
    return x.clone().reshaped(*out_dims);
  }
  if (is_onnx(n, "Concat")) {
    std::vector<const Tensor*> parts;
    for (const Tensor* t : in) {
      if (!t || t->dtype() != x.dtype() || t->rank() != x.rank()) return std::nullopt;
      parts.push_back(t);
    }
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += x.rank();
    if (axis < 0 || axis >= x.rank()) return std::nullopt;
    return concat(parts, axis, *out_dims);
  }
  if (is_onnx(n, "Transpose") && x.rank() == static_cast<int64_t>(out_dims->size())) {
    std::vector<int64_t> perm = n.attr_ints("perm");
    if (perm.empty())
      for (int64_t d = x.rank(); d-- > 0;) perm.push_back(d);
    if (static_cast<int64_t>(perm.size()) != x.rank()) return std::nullopt;
    for (int64_t& p : perm)
      if (p < 0 || p >= x.rank() ||
          (*out_dims)[static_cast<size_t>(&p - perm.data())] != x.dims()[static_cast<size_t>(p)])
        return std::nullopt;
    return strided_copy(x, *out_dims, perm, std::vector<int64_t>(perm.size(), 0), std::vector<int64_t>(perm.size(), 1));
  }
  if (is_onnx(n, "Slice") && in.size() >= 3 && x.rank() == static_cast<int64_t>(out_dims->size())) {
    const size_t r = static_cast<size_t>(x.rank());
    std::vector<int64_t> axis_of(r), start(r, 0), step(r, 1);
    for (size_t d = 0; d < r; ++d) axis_of[d] = static_cast<int64_t>(d);
    const int64_t na = in[1]->numel();
    for (int64_t j = 0; j < na; ++j) {
      int64_t a = in.size() > 3 && in[3] ? static_cast<int64_t>(in[3]->get_as_double(j)) : j;
      if (a < 0) a += x.rank();
      if (a < 0 || a >= x.rank()) return std::nullopt;
      const int64_t dim = x.dims()[static_cast<size_t>(a)];
      const int64_t st = in.size() > 4 && in[4] ? static_cast<int64_t>(in[4]->get_as_double(j)) : 1;
      if (st == 0) return std::nullopt;
      double b = in[1]->get_as_double(j);
      if (b < 0) b += static_cast<double>(dim);
      b = st > 0 ? std::clamp(b, 0.0, static_cast<double>(dim)) : std::clamp(b, 0.0, static_cast<double>(dim - 1));
      start[static_cast<size_t>(a)] = static_cast<int64_t>(b);
      step[static_cast<size_t>(a)] = st;
    }
    for (size_t d = 0; d < r; ++d) {  // every read inside x (the inferred dims say how many)
      const int64_t last = start[d] + ((*out_dims)[d] - 1) * step[d];
      if ((*out_dims)[d] > 0 && (last < 0 || last >= x.dims()[d] || start[d] >= x.dims()[d])) return std::nullopt;
    }
    return strided_copy(x, *out_dims, axis_of, start, step);
  }
  if (is_onnx(n, "Gather") && in.size() == 2) {
    int64_t axis = n.attr_int("axis", 0);
    if (axis < 0) axis += x.rank();
    if (axis < 0 || axis >= x.rank()) return std::nullopt;
    return gather(x, *in[1], axis, *out_dims);
  }
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
