// Import-time expansion of ONNX's recurrent ops into existing ops.
//
//   Graph g = import_onnx_file("lstm.onnx", reg);   // graph/onnx_io.h calls it:
//   expand_recurrent(g, "lstm.onnx");               // LSTM/GRU/RNN -> MatMul, Gemm, Split,
//   infer_shapes(g, reg, "lstm.onnx");              // Sigmoid, Tanh, Mul, Add, Concat...
//
// Why: an LSTM, GRU or RNN node unrolled over its static sequence length is a graph of
// ops that autodiff differentiates and every backend runs already, so the recurrent ops
// need no kernels and no gradient rules of their own (ops/recurrent.cpp registers their
// schemas and shape rules, which check a node before it is rewritten). X.W^T is one MatMul
// over all steps, as cuDNN and oneDNN compute it; each step adds one Gemm with R. Memory
// stays linear in the sequence length (graph/expand_recurrent.cpp details the cost).
#pragma once

#include <string>

#include "graph/ir.h"

namespace trainrt {

// Whether domain::op_type is one expand_recurrent rewrites (LSTM, GRU, RNN).
bool is_recurrent_op(const std::string& domain, const std::string& op_type);

// Rewrites every LSTM, GRU and RNN node of a typed graph (infer_shapes ran) into existing
// ops writing the same output names; new intermediate values are left untyped, so the
// caller infers shapes again. A node whose sequence length is not a number, or with an
// activation that no existing op computes, is an Unsupported error naming `where` and
// the node. Returns the number of nodes rewritten.
size_t expand_recurrent(Graph& g, const std::string& where);

}  // namespace trainrt
