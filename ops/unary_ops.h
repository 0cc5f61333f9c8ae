// The unary activations and their gradients, each declared once. One line of
// TRAINRT_UNARY_OPS gives an op its ONNX schema and its backward op's schema
// (ops/elementwise.cpp), the reference kernels and the cpu backend's loops over oneTBB
// chunks where oneDNN has no primitive (ops/elementwise_cpu.cpp), the cuda kernels
// (ops/elementwise_cuda.cu), the in-place facts (y[i] = f(x[i]) reads element i before
// writing it, in every backend), the gradient rule (autodiff/rules_elementwise.cpp) and
// its line in the registry's coverage test. The per-element math is the functor of the
// same name in ops/core/unary_math.h, shared by every backend.
//
//   X(Op, since, flops, Grad, reads, grad_flops, cpu)
//     Op          the ONNX op and its functor unary_math::Op
//     since       the opset that introduced it in this form
//     flops       per element, for the planner's cost model
//     Grad        the backward op (ai.trainrt) and its functor unary_math::Grad:
//                 dX = Grad(dY, t), t the forward's input (reads = input) or
//                 output (reads = output)
//     cpu         the oneDNN eltwise algorithm of the cpu kernel, or loop (the shared
//                 loop); gradients always run the loop
//
// Adding an activation with its gradient: one line here, its two functors in
// ops/core/unary_math.h (with attributes: UnaryAttrs below), and their tests
// (tests/ops/test_unary_math.cpp checks every gradient functor of this table against
// its forward by central differences).
//
// Ops whose gradient is a formula over other ops (TRAINRT_UNARY_OPS_COMPOSITE_GRAD)
// have a hand-written rule instead: Neg (dX = -dY), Exp (dY*Y), Log (dY/X),
// Reciprocal (-dY*Y*Y).
#pragma once

#include <string>
#include <vector>

#include "graph/ir.h"
#include "ops/core/unary_math.h"

#define TRAINRT_UNARY_OPS(X)                                      \
  X(Relu, 6, 1, ReluGrad, output, 1, eltwise_relu)                \
  X(LeakyRelu, 6, 2, LeakyReluGrad, input, 2, eltwise_relu)       \
  X(Sigmoid, 6, 4, SigmoidGrad, output, 3, eltwise_logistic)      \
  X(Tanh, 6, 4, TanhGrad, output, 3, eltwise_tanh)                \
  X(HardSigmoid, 6, 3, HardSigmoidGrad, input, 4, loop)           \
  X(HardSwish, 14, 4, HardSwishGrad, input, 4, eltwise_hardswish) \
  X(Sqrt, 6, 1, SqrtGrad, output, 2, eltwise_sqrt)                \
  X(Erf, 9, 4, ErfGrad, input, 5, loop)                           \
  X(Gelu, 20, 8, GeluGrad, input, 12, gelu)                       \
  X(Elu, 6, 4, EluGrad, input, 4, loop)                           \
  X(Softsign, 1, 3, SoftsignGrad, input, 4, loop)                 \
  X(Softplus, 1, 5, SoftplusGrad, input, 5, loop)

// X(Op, since, flops, cpu): Exp, Log, Reciprocal run the shared loop on the cpu
// backend (libm's exp and log, not oneDNN's polynomial approximations), so cpu and
// reference give the same bits.
#define TRAINRT_UNARY_OPS_COMPOSITE_GRAD(X) \
  X(Neg, 6, 1, loop)                        \
  X(Exp, 6, 1, loop)                        \
  X(Log, 6, 1, loop)                        \
  X(Reciprocal, 6, 1, loop)

namespace trainrt {

// A functor's attributes: their names (copied from the forward node to its backward
// node by the gradient rule) and the functor built from a node's values. Functors
// without attributes take the primary template.
template <typename F>
struct UnaryAttrs {
  static std::vector<std::string> names() { return {}; }
  static F of(const Node&) { return F{}; }
};
template <>
struct UnaryAttrs<unary_math::LeakyRelu> {
  static std::vector<std::string> names() { return {"alpha"}; }
  static unary_math::LeakyRelu of(const Node& n) { return {n.attr_float("alpha", 0.01f)}; }
};
template <>
struct UnaryAttrs<unary_math::LeakyReluGrad> {
  static std::vector<std::string> names() { return {"alpha"}; }
  static unary_math::LeakyReluGrad of(const Node& n) { return {n.attr_float("alpha", 0.01f)}; }
};
template <>
struct UnaryAttrs<unary_math::HardSigmoid> {
  static std::vector<std::string> names() { return {"alpha", "beta"}; }
  static unary_math::HardSigmoid of(const Node& n) { return {n.attr_float("alpha", 0.2f), n.attr_float("beta", 0.5f)}; }
};
template <>
struct UnaryAttrs<unary_math::HardSigmoidGrad> {
  static std::vector<std::string> names() { return {"alpha", "beta"}; }
  static unary_math::HardSigmoidGrad of(const Node& n) {
    return {n.attr_float("alpha", 0.2f), n.attr_float("beta", 0.5f)};
  }
};
template <>
struct UnaryAttrs<unary_math::Elu> {
  static std::vector<std::string> names() { return {"alpha"}; }
  static unary_math::Elu of(const Node& n) { return {n.attr_float("alpha", 1.0f)}; }
};
template <>
struct UnaryAttrs<unary_math::EluGrad> {
  static std::vector<std::string> names() { return {"alpha"}; }
  static unary_math::EluGrad of(const Node& n) { return {n.attr_float("alpha", 1.0f)}; }
};
template <>
struct UnaryAttrs<unary_math::Gelu> {
  static std::vector<std::string> names() { return {"approximate"}; }
  static unary_math::Gelu of(const Node& n) { return {n.attr_string("approximate", "none") == "tanh"}; }
};
template <>
struct UnaryAttrs<unary_math::GeluGrad> {
  static std::vector<std::string> names() { return {"approximate"}; }
  static unary_math::GeluGrad of(const Node& n) { return {n.attr_string("approximate", "none") == "tanh"}; }
};

// Which tensor of the forward the backward op reads besides dY.
enum class UnaryGradReads { input, output };

// The table as data, for code that walks it at run time (the coverage test, docs).
struct UnaryOpInfo {
  const char* op;
  const char* grad;  // nullptr: the gradient is a formula over other ops
  UnaryGradReads reads;
};
inline const std::vector<UnaryOpInfo>& unary_op_table() {
  static const std::vector<UnaryOpInfo> table = {
#define TRAINRT_UNARY_INFO(Op, since, flops, Grad, reads, grad_flops, cpu) {#Op, #Grad, UnaryGradReads::reads},
      TRAINRT_UNARY_OPS(TRAINRT_UNARY_INFO)
#undef TRAINRT_UNARY_INFO
#define TRAINRT_UNARY_INFO(Op, since, flops, cpu) {#Op, nullptr, UnaryGradReads::input},
          TRAINRT_UNARY_OPS_COMPOSITE_GRAD(TRAINRT_UNARY_INFO)
#undef TRAINRT_UNARY_INFO
  };
  return table;
}

}  // namespace trainrt
