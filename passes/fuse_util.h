// Helpers shared by the graph passes (passes/passes.cpp, fold_*.cpp, fuse_*.cpp).
//
//   return sweep(g, [&](size_t j, const Uses& u, std::vector<bool>& dead) {
//     size_t i = u.producer_of(g.nodes[j].inputs[0]);   // npos for inputs and initializers
//     if (i == npos || dead[i] || u.sole_reader(g.nodes[j].inputs[0]) != j) return false;
//     ... rewrite g.nodes[j] from g.nodes[i] ...; dead[i] = true; return true;
//   });
//
// Why: every fusion asks the same questions — who writes a value, who reads it,
// is it a graph output — and every fusion removes nodes in place. A sweep computes
// Uses once, marks the nodes it swallowed and compacts at the end; the fused node
// takes the position of the pattern's last node, so the order stays topological.
#pragma once

#include <cstddef>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "graph/ir.h"

namespace trainrt::passes {

inline constexpr size_t npos = static_cast<size_t>(-1);
using trainrt::kTrainrtDomain;  // graph/ir.h

struct Uses {
  explicit Uses(const Graph& g);
  std::unordered_map<std::string, size_t> producer;              // value -> writing node
  std::unordered_map<std::string, std::vector<size_t>> readers;  // value -> reading node, once per input slot
  std::unordered_set<std::string> graph_outputs;
  // The node that reads `v` in exactly one input slot when no other node reads it and
  // it is not a graph output; npos otherwise.
  size_t sole_reader(const std::string& v) const;
  size_t producer_of(const std::string& v) const;  // npos for inputs/initializers
};

// True for a node of the default domain ("" or "ai.onnx") with this op type.
bool is_onnx(const Node& n, const char* op_type);
// True for a node of trainrt's own domain (kTrainrtDomain) with this op type.
bool is_trainrt(const Node& n, const char* op_type);
// Replaces every read of `from` (node inputs) by `to`. Graph outputs are left alone.
void replace_reads(Graph& g, const std::string& from, const std::string& to);
// Removes nodes flagged in `dead` (same size as g.nodes).
void erase_marked(Graph& g, const std::vector<bool>& dead);
// One sweep of a rewrite: visit(j, uses, dead) for every node index j in order, with
// the Uses of the graph as it was before the sweep; visit rewrites nodes in place, marks
// the ones it swallowed in `dead` and returns whether it fused. The marked nodes are
// erased at the end; returns how many visits fused.
template <typename Visit>
size_t sweep(Graph& g, Visit&& visit) {
  const Uses u(g);
  std::vector<bool> dead(g.nodes.size(), false);
  size_t fused = 0;
  for (size_t j = 0; j < g.nodes.size(); ++j)
    if (visit(j, u, dead)) ++fused;
  erase_marked(g, dead);
  return fused;
}
// True when every reader of `v` comes after node `pos` (also when `v` is "" or unread):
// a fused node taking position `pos` may write it.
bool read_only_after(const Uses& u, const std::string& v, size_t pos);
// Removes node i, whose output 0 equals its input 0 (Identity, inference Dropout):
// readers read the input instead. When the output is a graph output, the input's
// producer writes it under the output's name instead; if that is impossible (the
// input is a graph input, initializer or graph output) the node stays. True if removed.
bool bypass_node(Graph& g, size_t i);
// The name of a node fused from `first` .. `last`: "<first>+<last>"; either alone
// when the other is unnamed.
inline std::string fused_name(const Node& first, const Node& last) {
  if (first.name.empty() || last.name.empty()) return first.name + last.name;
  return first.name + "+" + last.name;
}
// A name not used by any value or initializer of g: base, base_1, base_2, ...
std::string fresh_name(const Graph& g, const std::string& base);
// Shape of value v when it is known and fully static; nullptr otherwise.
const Shape* known_shape(const Graph& g, const std::string& v);

}  // namespace trainrt::passes

namespace trainrt::passes {

// The pattern rewrites (passes/fuse_inference.cpp, passes/fuse_conv.cpp). Each sweeps
// the graph once and returns the number of rewrites; the graph must be typed.
size_t remove_identities(Graph& g);            // Identity and inference Dropout
size_t fold_batchnorm_into_conv(Graph& g);     // inference BN after Conv
size_t fuse_matmul_add(Graph& g);              // MatMul/Gemm + Add(bias) -> Gemm
size_t fuse_conv_relu(Graph& g);               // Conv + Relu -> FusedConv(activation=Relu)
size_t fuse_gemm_relu(Graph& g);               // Gemm + Relu -> FusedGemm(activation=Relu)
size_t fuse_gemm_bias_grad(Graph& g);          // weight-gradient Gemm + SumToShape(dY) -> FusedGemm(sum_of) (training)
size_t fuse_conv_add(Graph& g);                // Conv + Add(residual) -> FusedConv(Z)
size_t fuse_batchnorm_relu(Graph& g);          // BatchNormalization + Relu -> BatchNormalizationRelu
size_t fuse_dropout_relu_grad(Graph& g);       // DropoutGrad + ReluGrad -> DropoutReluGrad (training)
size_t fuse_batchnorm_relu_dropout(Graph& g);  // BatchNormalizationRelu + Dropout (no mask) -> ...Dropout (training)
size_t fuse_dgrad_relu_grad(Graph& g);         // ConvGrad's dX + ReluGrad -> ConvGrad(dx_relu=1) (training)
size_t fuse_relu_grad_into_bn_grad(Graph& g);  // ReluGrad + BatchNormalizationGrad -> BNGrad(relu_y) (training)

}  // namespace trainrt::passes
