// The fusions shared by inference and training graphs, and fuse_training_graph:
//   Conv (+B) + Relu              -> FusedConv(X, W, B; activation=Relu)
//   Conv (+B) [+Relu] + Add(Z)    -> FusedConv(X, W, B, Z)      Y = act(conv) + Z
//   BatchNormalization + Relu     -> BatchNormalizationRelu (all BN outputs kept)
//   Gemm + Relu                   -> FusedGemm(A, B, C; activation=Relu)
//   Gemm(dY^T X) + SumToShape(dY) -> FusedGemm(dY, X; sum_of=A) -> (dW, db)   (training:
//                                    a Linear layer's weight and bias gradients; also
//                                    Gemm(X^T dY) with sum_of=B)
//   ConvGrad -> dX, ReluGrad(dX, X) -> ConvGrad(...; dx_relu=1)   (training: the data
//                                    gradient through the ReLU whose output X is)
// The fused node is named "<first>+<last>" after the nodes it replaces (so an error
// or a profile names nodes the user knows), takes the position of the last, and
// writes the last node's output name, so readers and graph outputs are unchanged.
// The swallowed intermediate must have that one reader only.
#include <algorithm>
#include <functional>
#include <optional>
#include <string>

#include "graph/error.h"
#include "passes/fuse_util.h"
#include "passes/passes.h"

namespace trainrt {
namespace passes {

namespace {

bool is_fused_conv(const Node& n) { return is_trainrt(n, "FusedConv"); }

// A Conv, or a FusedConv that has no residual yet (it can still take an activation or Z).
bool conv_like(const Node& n) { return is_onnx(n, "Conv") || (is_fused_conv(n) && !n.has_input(3)); }

// True when node n reads v only for its shape (SumToShape / ReshapeLike input 1, as
// the Add and Reshape gradient rules write them): it may read any value of v's type.
bool shape_only_read(const Node& n, const std::string& v) {
  if (!is_trainrt(n, "SumToShape") && !is_trainrt(n, "ReshapeLike")) return false;
  return n.inputs.size() == 2 && n.inputs[1] == v && n.inputs[0] != v;
}

Node to_fused_conv(const Node& conv, const Node& last) {
  Node f = conv;
  f.op_type = "FusedConv";
  f.domain = kTrainrtDomain;
  f.name = fused_name(conv, last);
  return f;
}

// Producer + Relu -> one node with activation=Relu writing the Relu's output, where the
// producer's output has the Relu as its sole reader: `make` builds the fused node from
// the producer (nullopt: not this producer). Shared by the Conv and Gemm rewrites.
size_t fuse_relu_into_producer(Graph& g,
                               const std::function<std::optional<Node>(const Node& producer, const Node& relu)>& make) {
  return sweep(g, [&](size_t j, const Uses& u, std::vector<bool>& dead) {
    const Node& relu = g.nodes[j];
    if (!is_onnx(relu, "Relu") || !relu.has_input(0) || !relu.has_output(0)) return false;
    const size_t i = u.producer_of(relu.inputs[0]);
    if (i == npos || dead[i] || u.sole_reader(relu.inputs[0]) != j) return false;
    std::optional<Node> f = make(g.nodes[i], relu);
    if (!f) return false;
    f->attrs["activation"] = Attribute::of_string("Relu");
    f->outputs = {relu.outputs[0]};
    g.nodes[j] = std::move(*f);
    dead[i] = true;
    return true;
  });
}

}  // namespace

size_t fuse_conv_relu(Graph& g) {
  return fuse_relu_into_producer(g, [](const Node& conv, const Node& relu) -> std::optional<Node> {
    if (!conv_like(conv) || conv.has_input(3) || !conv.attr_string("activation", "").empty()) return std::nullopt;
    return to_fused_conv(conv, relu);
  });
}

size_t fuse_conv_add(Graph& g) {
  return sweep(g, [&](size_t j, const Uses& u, std::vector<bool>& dead) {
    const Node& add = g.nodes[j];
    if (!is_onnx(add, "Add") || add.input_count() != 2 || !add.has_output(0)) return false;
    if (add.inputs[0] == add.inputs[1]) return false;
    for (size_t k : {size_t{0}, size_t{1}}) {
      const std::string& y = add.inputs[k];
      const std::string& z = add.inputs[1 - k];
      const size_t i = u.producer_of(y);
      if (i == npos || dead[i] || !conv_like(g.nodes[i]) || u.graph_outputs.count(y)) continue;
      // The Add must be y's only real reader; shape-only readers after it move to the Add's output.
      std::vector<size_t> shape_readers;
      size_t add_reads = 0;
      bool other = false;
      for (size_t r : u.readers.at(y)) {
        if (r == j)
          ++add_reads;
        else if (r > j && shape_only_read(g.nodes[r], y))
          shape_readers.push_back(r);
        else
          other = true;
      }
      if (other || add_reads != 1) continue;
      // Z must have Y's exact type (no broadcasting: the conv accumulates into it).
      const ValueInfo* yi = g.find_info(y);
      const ValueInfo* zi = g.find_info(z);
      const ValueInfo* oi = g.find_info(add.outputs[0]);
      if (!yi || !zi || !oi || !yi->shape || !(*yi == *zi) || !(*yi == *oi)) continue;
      const std::string out = add.outputs[0];
      for (size_t r : shape_readers) g.nodes[r].inputs[1] = out;
      Node f = to_fused_conv(g.nodes[i], add);
      f.inputs.resize(4);
      f.inputs[3] = z;
      f.outputs = {out};
      g.nodes[j] = std::move(f);
      dead[i] = true;
      return true;
    }
    return false;
  });
}

size_t fuse_gemm_relu(Graph& g) {
  return fuse_relu_into_producer(g, [](const Node& gemm, const Node& relu) -> std::optional<Node> {
    if (!is_onnx(gemm, "Gemm") || gemm.outputs.size() != 1) return std::nullopt;
    Node f = gemm;
    f.op_type = "FusedGemm";
    f.domain = kTrainrtDomain;
    f.name = fused_name(gemm, relu);
    return f;
  });
}

size_t fuse_gemm_bias_grad(Graph& g) {
  return sweep(g, [&](size_t j, const Uses& u, std::vector<bool>& dead) {
    const Node& sum = g.nodes[j];
    if (dead[j] || !is_trainrt(sum, "SumToShape") || sum.inputs.size() != 2 || !sum.has_output(0)) return false;
    const std::string dy = sum.inputs[0], db = sum.outputs[0];
    const Shape* s = known_shape(g, db);
    if (!s || s->size() != 1 || dy.empty()) return false;
    auto readers = u.readers.find(dy);
    if (readers == u.readers.end()) return false;
    for (size_t i : readers->second) {
      const Node& gemm = g.nodes[i];
      if (i == j || dead[i] || !is_onnx(gemm, "Gemm") || gemm.input_count() != 2 || gemm.outputs.size() != 1 ||
          !gemm.has_output(0) || gemm.attr_float("alpha", 1.f) != 1.f || gemm.inputs[0] == gemm.inputs[1])
        continue;
      // dY as op(A) = dY^T (the sums of op(A)'s rows: dY's columns) or as op(B) = dY.
      const bool ta = gemm.attr_int("transA", 0) != 0, tb = gemm.attr_int("transB", 0) != 0;
      const char* of = gemm.inputs[0] == dy && ta ? "A" : gemm.inputs[1] == dy && !tb ? "B" : nullptr;
      const Shape* y = known_shape(g, gemm.outputs[0]);
      if (!of || !y || y->size() != 2 || !((*y)[of[0] == 'A' ? 0 : 1] == (*s)[0])) continue;
      // The fused node takes the later position: the earlier node's output must be read after it.
      const size_t first = std::min(i, j), last = std::max(i, j);
      if (!read_only_after(u, g.nodes[first].outputs[0], last)) continue;
      Node f = gemm;
      f.op_type = "FusedGemm";
      f.domain = kTrainrtDomain;
      f.name = fused_name(g.nodes[first], g.nodes[last]);
      f.attrs["sum_of"] = Attribute::of_string(of);
      f.outputs = {gemm.outputs[0], db};
      g.nodes[last] = std::move(f);
      dead[first] = true;
      return true;
    }
    return false;
  });
}

size_t fuse_dgrad_relu_grad(Graph& g) {
  return sweep(g, [&](size_t j, const Uses& u, std::vector<bool>& dead) {
    const Node& rg = g.nodes[j];
    if (!is_trainrt(rg, "ReluGrad") || rg.inputs.size() != 2 || !rg.has_output(0)) return false;
    const size_t i = u.producer_of(rg.inputs[0]);
    if (i == npos || dead[i] || u.sole_reader(rg.inputs[0]) != j) return false;
    const Node& cg = g.nodes[i];
    // The Relu's output must be the convolution's input X (ReluGrad(dY, Y) with Y == X).
    if (!is_trainrt(cg, "ConvGrad") || cg.inputs.size() != 3 || cg.outputs.empty() || cg.outputs[0] != rg.inputs[0] ||
        cg.inputs[1] != rg.inputs[1] || cg.attr_int("dx_relu", 0) != 0)
      return false;
    // The fused node takes the ReluGrad's place: dW and dB must be read after it.
    for (size_t k = 1; k < cg.outputs.size(); ++k)
      if (!read_only_after(u, cg.outputs[k], j)) return false;
    Node f = cg;
    f.name = fused_name(cg, rg);
    f.attrs["dx_relu"] = Attribute::of_int(1);
    f.outputs[0] = rg.outputs[0];
    g.nodes[j] = std::move(f);
    dead[i] = true;
    return true;
  });
}

// ReluGrad(dY, Y) -> g read only by BatchNormalizationGrad(g, X, scale, [mean, var]):
// the gradient takes dY and Y (input 5, relu_y) and masks dY itself. The fused node
// takes the ReluGrad's place, so dY and Y die there as before and X and the statistics
// no later; that needs the gradient's other inputs made before it (in a training graph
// they come from the forward), and its outputs' readers, after the batch-norm
// gradient's old place, still come after it.
size_t fuse_relu_grad_into_bn_grad(Graph& g) {
  return sweep(g, [&](size_t j, const Uses& u, std::vector<bool>& dead) {
    const Node& bg = g.nodes[j];
    if (!is_trainrt(bg, "BatchNormalizationGrad") || bg.inputs.empty() || bg.inputs.size() > 5 || bg.inputs[0].empty())
      return false;
    const size_t i = u.producer_of(bg.inputs[0]);
    if (i == npos || dead[i] || u.sole_reader(bg.inputs[0]) != j) return false;
    const Node& rg = g.nodes[i];
    if (!is_trainrt(rg, "ReluGrad") || rg.inputs.size() != 2 || rg.outputs.size() != 1 ||
        rg.outputs[0] != bg.inputs[0] || rg.inputs[0].empty() || rg.inputs[1].empty())
      return false;
    for (size_t k = 1; k < bg.inputs.size(); ++k)
      if (!bg.inputs[k].empty()) {
        const size_t p = u.producer_of(bg.inputs[k]);
        if (p != npos && p >= i) return false;
      }
    Node f = bg;
    f.name = fused_name(rg, bg);
    f.inputs[0] = rg.inputs[0];
    f.inputs.resize(5);  // saved statistics (or "" where the older form has none)
    f.inputs.push_back(rg.inputs[1]);
    g.nodes[i] = std::move(f);
    dead[j] = true;
    return true;
  });
}

size_t fuse_batchnorm_relu(Graph& g) {
  return sweep(g, [&](size_t j, const Uses& u, std::vector<bool>& dead) {
    const Node& relu = g.nodes[j];
    if (!is_onnx(relu, "Relu") || !relu.has_input(0) || !relu.has_output(0)) return false;
    const size_t i = u.producer_of(relu.inputs[0]);
    if (i == npos || dead[i] || u.sole_reader(relu.inputs[0]) != j) return false;
    const Node& bn = g.nodes[i];
    if (!is_onnx(bn, "BatchNormalization") || bn.outputs.empty() || bn.outputs[0] != relu.inputs[0]) return false;
    // The other outputs (running statistics) move to position j: no reader may come before it.
    for (size_t k = 1; k < bn.outputs.size(); ++k)
      if (!read_only_after(u, bn.outputs[k], j)) return false;
    Node f = bn;
    f.op_type = "BatchNormalizationRelu";
    f.domain = kTrainrtDomain;
    f.name = fused_name(bn, relu);
    f.outputs[0] = relu.outputs[0];
    g.nodes[j] = std::move(f);
    dead[i] = true;
    return true;
  });
}

}  // namespace passes

size_t fuse_training_graph(Graph& g, bool dropout_into_batchnorm) {
  size_t fused = passes::fuse_batchnorm_relu(g);
  fused += passes::fuse_conv_relu(g);  // before the residual: Conv + Relu + Add -> FusedConv(Relu, Z)
  fused += passes::fuse_conv_add(g);
  fused += passes::fuse_gemm_relu(g);
  fused += passes::fuse_gemm_bias_grad(g);
  fused += passes::fuse_dropout_relu_grad(g);  // passes/fuse_dropout.cpp
  fused += passes::fuse_dgrad_relu_grad(g);
  fused += fuse_optimizer(g);  // passes/fuse_optimizer.cpp
  // Last, so the Dropout index it carries is the one the unfused Dropout would have
  // (passes/fuse_dropout.cpp); after fuse_dropout_relu_grad, which frees the masks.
  if (dropout_into_batchnorm) fused += passes::fuse_batchnorm_relu_dropout(g);
  if (fused && !g.opsets.count(passes::kTrainrtDomain)) g.opsets[passes::kTrainrtDomain] = 1;
  return fused;
}

}  // namespace trainrt
