// optimize_for_inference (passes/passes.h) and its inference-only rewrites:
// Identity / Dropout removal, BatchNormalization folded into Conv, MatMul + Add -> Gemm.
#include <algorithm>
#include <cmath>

#include "graph/error.h"
#include "passes/fuse_util.h"
#include "passes/passes.h"

namespace trainrt {
namespace passes {

namespace {

// True when v is an initializer whose value cannot change (not a graph input).
bool fixed_initializer(const Graph& g, const std::string& v) {
  return g.is_initializer(v) &&
         std::find(g.initializer_inputs.begin(), g.initializer_inputs.end(), v) == g.initializer_inputs.end() &&
         std::find(g.inputs.begin(), g.inputs.end(), v) == g.inputs.end();
}

bool float_type(DataType t) { return t == DataType::Float32 || t == DataType::Float64; }

// Dropout is the identity when it does not train: no training_mode input, or a
// constant false one, and no reader of its mask.
bool inference_dropout(const Graph& g, const Node& n, const Uses& u) {
  if (n.has_input(2)) {
    if (!fixed_initializer(g, n.inputs[2])) return false;
    const Tensor& t = g.initializers.at(n.inputs[2]);
    if (t.numel() != 1 || t.get_as_double(0) != 0.0) return false;
  }
  if (n.has_output(1) && (u.readers.count(n.outputs[1]) || u.graph_outputs.count(n.outputs[1]))) return false;
  return true;
}

int64_t rank_of(const Graph& g, const std::string& v) {
  const ValueInfo* info = g.find_info(v);
  return info && info->shape ? static_cast<int64_t>(info->shape->size()) : -1;
}

}  // namespace

size_t remove_identities(Graph& g) {
  size_t removed = 0;
  for (size_t i = 0; i < g.nodes.size();) {
    const Node& n = g.nodes[i];
    bool candidate = is_onnx(n, "Identity") && n.has_input(0) && n.has_output(0);
    if (is_onnx(n, "Dropout") && n.has_input(0) && n.has_output(0)) candidate = inference_dropout(g, n, Uses(g));
    if (candidate && bypass_node(g, i)) {
      ++removed;
      continue;  // node i is now the next one
    }
    ++i;
  }
  return removed;
}

size_t fold_batchnorm_into_conv(Graph& g) {
  return sweep(g, [&](size_t j, const Uses& u, std::vector<bool>& dead) {
    const Node& bn = g.nodes[j];
    if (!is_onnx(bn, "BatchNormalization") || bn.output_count() != 1 || bn.attr_int("training_mode", 0) != 0)
      return false;
    const size_t i = u.producer_of(bn.inputs[0]);
    if (i == npos || dead[i] || !is_onnx(g.nodes[i], "Conv") || u.sole_reader(bn.inputs[0]) != j) return false;
    const Node& conv = g.nodes[i];
    bool constant =
        fixed_initializer(g, conv.inputs[1]) && (!conv.has_input(2) || fixed_initializer(g, conv.inputs[2]));
    for (size_t k = 1; k < 5; ++k) constant = constant && fixed_initializer(g, bn.inputs[k]);
    if (!constant) return false;
    const Tensor& w = g.initializers.at(conv.inputs[1]);
    const DataType t = w.dtype();
    if (!float_type(t) || w.rank() < 3) return false;
    const int64_t m = w.dims()[0];
    bool same = true;
    for (size_t k = 1; k < 5; ++k) {
      const Tensor& p = g.initializers.at(bn.inputs[k]);
      same = same && p.dtype() == t && p.numel() == m;
    }
    if (conv.has_input(2)) same = same && g.initializers.at(conv.inputs[2]).dtype() == t;
    if (!same) return false;
    // s = scale / sqrt(var + eps);  W'[m] = W[m] * s[m];  B'[m] = (B[m] - mean[m]) * s[m] + bias[m]
    const Tensor &scale = g.initializers.at(bn.inputs[1]), &shift = g.initializers.at(bn.inputs[2]),
                 &mean = g.initializers.at(bn.inputs[3]), &var = g.initializers.at(bn.inputs[4]);
    const double eps = bn.attr_float("epsilon", 1e-5f);
    Tensor w2(t, w.dims()), b2(t, {m});
    const int64_t per = w.numel() / std::max<int64_t>(m, 1);
    for (int64_t c = 0; c < m; ++c) {
      const double s = scale.get_as_double(c) / std::sqrt(var.get_as_double(c) + eps);
      for (int64_t k = 0; k < per; ++k) w2.set_from_double(c * per + k, w.get_as_double(c * per + k) * s);
      const double b0 = conv.has_input(2) ? g.initializers.at(conv.inputs[2]).get_as_double(c) : 0.0;
      b2.set_from_double(c, (b0 - mean.get_as_double(c)) * s + shift.get_as_double(c));
    }
    const std::string wn = fresh_name(g, conv.inputs[1] + ".bn_folded");
    g.values[wn] = ValueInfo{t, shape_of(w2.dims())};
    g.initializers[wn] = std::move(w2);
    const std::string bname =
        fresh_name(g, (conv.has_input(2) ? conv.inputs[2] : conv.inputs[1] + ".bias") + ".bn_folded");
    g.values[bname] = ValueInfo{t, shape_of({m})};
    g.initializers[bname] = std::move(b2);
    Node fused = conv;
    fused.inputs = {conv.inputs[0], wn, bname};
    fused.outputs = {bn.outputs[0]};
    g.nodes[j] = std::move(fused);
    dead[i] = true;
    return true;
  });
}

size_t fuse_matmul_add(Graph& g) {
  return sweep(g, [&](size_t j, const Uses& u, std::vector<bool>& dead) {
    const Node& add = g.nodes[j];
    if (!is_onnx(add, "Add") || add.input_count() != 2 || !add.has_output(0)) return false;
    for (size_t k : {size_t{0}, size_t{1}}) {
      const size_t i = u.producer_of(add.inputs[k]);
      if (i == npos || dead[i] || u.sole_reader(add.inputs[k]) != j) continue;
      const Node& mm = g.nodes[i];
      const bool matmul = is_onnx(mm, "MatMul");
      const bool gemm = is_onnx(mm, "Gemm") && mm.input_count() == 2;
      if (!matmul && !gemm) continue;
      if (rank_of(g, mm.inputs[0]) != 2 || rank_of(g, mm.inputs[1]) != 2) continue;
      // Y[M,N]; the bias must be [N] or [1,N] with N known (Gemm's C broadcasts one way).
      const ValueInfo* y = g.find_info(mm.outputs[0]);
      const ValueInfo* bias = g.find_info(add.inputs[1 - k]);
      if (!y || !bias || !y->shape || !bias->shape || y->dtype != bias->dtype || !float_type(y->dtype)) continue;
      const Dim& n_dim = (*y->shape)[1];
      const Shape& bs = *bias->shape;
      const bool row = (bs.size() == 1 && n_dim.known() && bs[0] == n_dim) ||
                       (bs.size() == 2 && bs[0] == Dim::of(1) && n_dim.known() && bs[1] == n_dim);
      if (!row) continue;
      Node out = mm;
      out.op_type = "Gemm";
      out.domain = "";
      if (matmul) out.attrs.clear();
      out.attrs["beta"] = Attribute::of_float(1.f);
      out.inputs = {mm.inputs[0], mm.inputs[1], add.inputs[1 - k]};
      out.outputs = {add.outputs[0]};
      g.nodes[j] = std::move(out);
      dead[i] = true;
      return true;
    }
    return false;
  });
}

}  // namespace passes

Graph optimize_for_inference(const Graph& forward, const InferenceOptions& o) {
  Graph g = forward;
  simplify(g);
  passes::remove_identities(g);
  passes::fold_batchnorm_into_conv(g);
  passes::fuse_matmul_add(g);
  if (!o.standard_onnx_only) {
    passes::fuse_conv_relu(g);
    passes::fuse_gemm_relu(g);
    passes::fuse_conv_add(g);
    passes::fuse_batchnorm_relu(g);
    const bool custom =
        std::any_of(g.nodes.begin(), g.nodes.end(), [](const Node& n) { return n.domain == passes::kTrainrtDomain; });
    if (custom && !g.opsets.count(passes::kTrainrtDomain)) g.opsets[passes::kTrainrtDomain] = 1;
  }
  eliminate_dead_nodes(g);
  return g;
}

}  // namespace trainrt
