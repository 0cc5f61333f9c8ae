// Graph passes that keep the graph valid and typed.
//
//   eliminate_dead_nodes(g, {"loss", "w.updated"});   // keeps graph outputs too
//   simplify(g);                                       // constant folding + dead nodes
//   Graph infer = optimize_for_inference(forward);     // BN folded, Dropout gone, fused ops
//   Graph onnx = optimize_for_inference(forward, {.standard_onnx_only = true});  // for export
//   TrainingGraph t = build_training_graph(forward, opts);
//   fuse_training_graph(t.graph);                      // BN+Relu, Conv+residual Add, one
//                                                      // optimizer node (TrainingSession does this)
//   std::cout << describe_passes(before, after);       // node counts per op type
//
// Why: the graph is optimised once, before planning, as TensorRT does. Every pass
// keeps the graph's inputs, outputs and the names of every value a caller can see
// (graph outputs, `keep`), so a pass can be dropped without changing results beyond
// float rounding. A fusion happens only when the intermediate value it removes has
// no other reader (forward or backward) and is not a graph output.
//
// Fused ops (domain ai.trainrt; schemas and kernels in ops/fused.cpp):
//   FusedConv(X, W, [B], [Z]; Conv's attributes, activation = "" | "Relu") -> Y
//       Y = act(Conv(X, W, B)) + Z            Z: Y's shape (a residual), optional
//   BatchNormalizationRelu(X, scale, B, mean, var; BatchNormalization's attributes)
//       -> (Y, [running_mean, running_var, ...])   Y = Relu(BatchNormalization(...))
// Relu's backward (ReluGrad(dY, Y)) reads Relu's output, which the fused op still
// writes under the same name; BatchNormalizationGrad reads X and BN's saved statistics
// (outputs 5/6, which the fused node writes too), not BN's Y. So
// fusing after autodiff leaves every backward node valid.
#pragma once

#include <cstddef>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "graph/ir.h"

namespace trainrt {

class OpRegistry;

// Removes nodes none of whose outputs reach a graph output or a value in `keep`,
// then drops initializers and value types nothing uses. Returns nodes removed.
size_t eliminate_dead_nodes(Graph& g, const std::vector<std::string>& keep = {});

struct SimplifyOptions {
  std::vector<std::string> keep;  // values that must survive (besides graph outputs)
  // Initializers whose value changes between runs (training state: parameters,
  // optimizer state, BN running statistics — the states of TrainingGraph::updates).
  // Nothing reading them is folded. Initializers that are also graph inputs are
  // never folded either.
  std::set<std::string> variable;
  int64_t max_fold_elements = int64_t{1} << 22;  // larger results stay computed at run time
};

// Replaces nodes whose inputs are all constant (initializers, Constant nodes) by
// initializers, for cheap ops only: Constant, Identity, Cast, Shape (also of any
// value whose shape is fully known), Size, Reshape, Flatten, Squeeze, Unsqueeze,
// Concat, Gather, ConstantOfShape, integer Range, and any node whose scalar or 1-D
// integer output inference knows element by element (ValueInfo::ints). Returns the number of nodes folded. Values keep
// their names.
size_t fold_constants(Graph& g, const SimplifyOptions& o = {});

// Shape inference and fold_constants in turn until nothing more folds: each fold
// makes the shapes behind it known (a Reshape whose shape was computed), which the
// next inference passes on. With every input shape known, every shape computation
// (Shape -> Gather/Slice -> Unsqueeze -> Concat -> Reshape/Expand, ConstantOfShape,
// Range, int64 arithmetic) becomes an initializer. Returns the number of nodes folded.
size_t fold_shapes(Graph& g, const OpRegistry& reg, const SimplifyOptions& o = {});
// Whether g computes shapes (Shape, Size, ConstantOfShape, Range) or has a node output
// whose shape inference left open: what fold_shapes is for.
bool has_shape_computation(const Graph& g);

// fold_constants then eliminate_dead_nodes; returns nodes removed in total.
size_t simplify(Graph& g, const SimplifyOptions& o = {});

struct InferenceOptions {
  // Only standard ONNX ops in the result (for --export-inference: onnx.checker and
  // ONNX Runtime must accept it): BN folded, Dropout/Identity removed, MatMul+Add ->
  // Gemm, but no FusedConv / BatchNormalizationRelu.
  bool standard_onnx_only = false;
};

// The inference form of a forward graph, same inputs and outputs:
//   - constant folding and dead nodes removed;
//   - Identity and (inference) Dropout removed, readers rewired;
//   - BatchNormalization (inference form) after a Conv folded into the Conv's weights
//     and bias (a bias is added when absent): W' = W*s, B' = (B - mean)*s + bias,
//     s = scale / sqrt(var + epsilon), per output channel (computed in double);
//   - MatMul(A[M,K], B[K,N]) + Add(bias [N] or [1,N]) -> Gemm; Gemm without C + Add -> Gemm;
//   - unless standard_onnx_only: Conv (+bias) + Relu -> FusedConv(activation=Relu),
//     Conv + Add of a same-shape value -> FusedConv(Z), BatchNormalization + Relu ->
//     BatchNormalizationRelu, Gemm + Relu -> FusedGemm(activation=Relu).
// The forward graph must be typed (infer_shapes). Folded weights get new initializer
// names ("<W>.bn_folded"); the old ones disappear when nothing else reads them.
Graph optimize_for_inference(const Graph& forward, const InferenceOptions& o = {});

// Fusions of a training graph (after build_training_graph), in place; TrainingSession
// applies them before planning (runtime/training_session.h):
//   BatchNormalization + Relu -> BatchNormalizationRelu (running-stat outputs kept),
//   Conv (+bias) + Relu -> FusedConv(X, W, B; activation=Relu) (the Relu's gradient reads
//     its output, so the convolution's own output has no other reader),
//   Conv + Add of a same-shape residual -> FusedConv(X, W, B, Z),
//   Gemm + Relu -> FusedGemm(A, B, C; activation=Relu) (a Linear layer and its ReLU: one
//     cuBLASLt call with its epilogue on cuda, one oneDNN matmul with a post-op on cpu),
//   a Linear layer's weight-gradient Gemm (dY^T X or X^T dY, alpha 1) + its bias gradient
//     SumToShape(dY) to 1-D -> FusedGemm(...; sum_of=A|B) writing both (cuBLASLt's
//     BGRADB/BGRADA epilogue on cuda),
//   Relu + Dropout's backward: ReluGrad(DropoutGrad(dZ, mask), Y) -> DropoutReluGrad(dZ, Z)
//     for Z = Dropout(Y), which reads the Dropout's output instead of the Relu's, so
//     Y dies after the Dropout and the mask is no longer written (passes/fuse_dropout.cpp).
//   a convolution's data gradient and the ReLU gradient of its input: ReluGrad(dX, X) of
//     ConvGrad(dY, X, W) -> dX -> ConvGrad(...; dx_relu=1) (one cuDNN graph with a
//     RELU_BWD epilogue on cuda; the backend's ReluGrad kernel after it elsewhere),
//   the per-parameter SGD/Adam nodes -> one MultiSGD/MultiAdam node (fuse_optimizer, below),
//   last, with dropout_into_batchnorm: BatchNormalizationRelu + a Dropout whose mask nobody
//     reads (after the Relu + Dropout backward fusion) -> BatchNormalizationReluDropout(X,
//     scale, B, mean, var, ratio, training_mode; dropout_node = the Dropout's index), one pass
//     writing Z with the Dropout's own mask (passes/fuse_dropout.cpp). Every precision:
//     under bf16/fp16 the fused kernels round relu(bn(x)) before the mask, as the executor
//     rounds BatchNormalizationRelu's Y, and Z, like the Dropout's, is not rounded (a
//     backend may store it in 16 bits where its readers round it, runtime/narrow.h).
// A fused node is named "<first>+<last>" after the nodes it replaced. The Relu's
// forward is not fused into the Dropout: in the Wide ResNet (models/wrn.h) every Relu
// that feeds a Dropout follows a BatchNormalization and goes into the
// BatchNormalizationRelu, where it costs no pass of its own. Returns the number of
// fusions made (fuse_optimizer's: the nodes it removed).
size_t fuse_training_graph(Graph& g, bool dropout_into_batchnorm = true);

// The per-parameter optimizer nodes (ai.trainrt SGD, Adam) that share lr, step,
// attributes and parameter dtype -> one MultiSGD / MultiAdam node each (ops/optimizer.cpp;
// passes/fuse_optimizer.cpp), every value name kept, so the optimizer state, checkpoints
// and exports do not change and each parameter's update is the same bit for bit. Part of
// fuse_training_graph. Returns the number of nodes removed (a group of k nodes: k - 1).
size_t fuse_optimizer(Graph& g);

// Node counts per op type ("Conv", "ai.trainrt::FusedConv") before and after passes.
struct PassReport {
  std::map<std::string, size_t> before, after;
  size_t nodes_before = 0, nodes_after = 0;
  size_t initializers_before = 0, initializers_after = 0;
};
PassReport pass_report(const Graph& before, const Graph& after);
// A table: one line per op type "op  before  after  change", then the totals.
std::string describe_passes(const Graph& before, const Graph& after);

}  // namespace trainrt
