// Elementwise ops: the unary activations of the table in ops/unary_ops.h (Relu,
// LeakyRelu, Sigmoid, Tanh, HardSigmoid, HardSwish, Sqrt, Erf, Gelu with their backward
// ops; Neg, Exp, Log, Reciprocal; formulas in ops/core/unary_math.h), Clip, and with
// numpy broadcasting arithmetic (Add, Sub, Mul, Div, Mod, Pow, variadic Sum), Where, Not
// and the comparisons (Equal, Greater, Less, GreaterOrEqual, LessOrEqual), and their
// backward ops (domain ai.trainrt, used by autodiff/rules_elementwise.cpp). Loops and
// formulas of Clip, Pow and the rest in ops/elementwise_loops.h; here:
//
//   SumToShape(dY, X) -> dX            dY summed over the axes where X was broadcast
//                                      (ops/core/broadcast.h); X's dtype and shape
//
// The activation grads take two tensors of one dtype and one shape; dX has the
// type of input 1 (the forward tensor), so it has exactly the shape of X.
//
// Activations and Sum take float32/float64. Add/Sub/Mul/Div also take the integer
// types (exported graphs do shape arithmetic in int64); integer results wrap
// modulo 2^bits, integer Div truncates toward zero like C and ONNX Runtime, and
// integer division by zero is a bad-input error. The broadcasting rule and the
// index helper live in ops/core/broadcast.h (autodiff reuses them).
//
// cpu kernels: ops/elementwise_cpu.cpp; Sum's loop, shared with it, is in
// ops/elementwise_loops.h.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ops/core/broadcast.h"
#include "ops/core/common.h"
#include "ops/core/kernel_facts.h"
#include "ops/core/parallel.h"
#include "ops/core/register_all.h"
#include "ops/elementwise_loops.h"

namespace trainrt {

namespace {

// ---- dtype helpers ---------------------------------------------------------

bool is_arith_dtype(DataType t) {
  switch (t) {
    case DataType::Float32:
    case DataType::Float64:
    case DataType::Int8:
    case DataType::Int16:
    case DataType::Int32:
    case DataType::Int64:
    case DataType::UInt8:
    case DataType::UInt16:
    case DataType::UInt32:
    case DataType::UInt64:
      return true;
    default:
      return false;
  }
}

// ---- shape rules -----------------------------------------------------------

// Ops without attributes: OpSchema::attributes cannot say "none", so the rule does.
void reject_attributes(const InferContext& ctx) {
  if (!ctx.node().attrs.empty())
    throw_unsupported(ctx.where(), "attribute '" + ctx.node().attrs.begin()->first + "' is not supported");
}

// Y = f(X), float32/float64, same type and shape.
void unary_float_rule(InferContext& ctx) {
  require_float(ctx, 0);
  ctx.set_output(0, ctx.input(0));
}

// The broadcast of the shapes of inputs first.. (nullopt where a rank is unknown).
std::optional<Shape> broadcast_inputs(const InferContext& ctx, size_t first) {
  std::optional<Shape> out = ctx.input(first).shape;
  for (size_t i = first + 1; i < ctx.input_count(); ++i) {
    const std::optional<Shape>& s = ctx.input(i).shape;
    if (!out || !s) {
      out.reset();  // some rank is unknown: so is the output's
      continue;
    }
    std::string why;
    std::optional<Shape> b = broadcast_shapes(*out, *s, &why);
    if (!b) {
      const std::string lhs = i == first + 1 ? "input " + std::to_string(first) + " '" + ctx.node().inputs[first] +
                                                   "' " + shape_to_string(*out)
                                             : "inputs " + std::to_string(first) + ".." + std::to_string(i - 1) +
                                                   " (broadcast " + shape_to_string(*out) + ")";
      ctx.fail("cannot broadcast " + lhs + " with input " + std::to_string(i) + " '" + ctx.node().inputs[i] + "' " +
               shape_to_string(*s) + ": " + why);
    }
    out = std::move(b);
  }
  return out;
}

// Y = broadcast(inputs...), every input of input 0's dtype.
void broadcast_rule(InferContext& ctx, bool integers_ok) {
  const DataType t = ctx.input(0).dtype;
  if (integers_ok ? !is_arith_dtype(t) : (t != DataType::Float32 && t != DataType::Float64)) {
    const std::string accepted = integers_ok ? "float32, float64 or an integer type" : "float32 or float64";
    const std::string msg = "input 0 '" + ctx.node().inputs[0] + "' must be " + accepted + ", got " + dtype_name(t);
    if (t == DataType::Float16 || t == DataType::BFloat16) throw_unsupported(ctx.where(), msg);
    ctx.fail(msg);
  }
  for (size_t i = 1; i < ctx.input_count(); ++i) require_same_dtype(ctx, 0, i);
  ctx.set_output(0, ValueInfo{t, broadcast_inputs(ctx, 0)});
}

// FLOPs = cost * elements of output 0 (exp/tanh count as one operation).
FlopRule per_output_element(double cost) {
  return [cost](const Graph& g, const Node& n) {
    const ValueInfo* v = n.outputs.empty() ? nullptr : g.find_info(n.outputs[0]);
    if (!v || !v->shape || !shape_is_known(*v->shape)) return 0.0;
    return cost * static_cast<double>(element_count(shape_dims(*v->shape)));
  };
}

// ---- reference kernels -----------------------------------------------------

// The reference's loops are elementwise_loops' templates, serial (the cpu kernels run them
// over oneTBB chunks).
using elementwise_loops::broadcast_map;

// Integer arithmetic is done in uint64_t and narrowed: wraps modulo 2^bits
// without signed-overflow UB (C++20 defines the narrowing conversion).
template <typename T>
T wrap(uint64_t v) {
  return static_cast<T>(v);
}

struct AddOp {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      return a + b;
    else
      return wrap<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
  }
};
struct SubOp {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      return a - b;
    else
      return wrap<T>(static_cast<uint64_t>(a) - static_cast<uint64_t>(b));
  }
};
struct MulOp {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>)
      return a * b;
    else
      return wrap<T>(static_cast<uint64_t>(a) * static_cast<uint64_t>(b));
  }
};
struct DivOp {
  template <typename T>
  T operator()(T a, T b) const {
    if constexpr (std::is_floating_point_v<T>) {
      return a / b;
    } else {
      if (b == 0) throw_bad_input("", "integer division by zero");
      if constexpr (std::is_signed_v<T>)
        if (b == -1) return wrap<T>(0 - static_cast<uint64_t>(a));  // MIN / -1 wraps to MIN
      return static_cast<T>(a / b);
    }
  }
};

// y = op(a, b) with broadcasting; y is already shaped by the rule.
template <typename Op>
void binary_kernel(KernelContext& ctx) {
  dispatch_arith(ctx.in(0).dtype(), [&](auto tag) {
    using T = decltype(tag);
    broadcast_map<false, T, T, T>(ctx.out(0), Op{}, ctx.in(0), ctx.in(1));
  });
}

// ---- backward ops ------------------------------------------------------------

// Inputs 0 and 1 must have the same shape where both are known (an unknown rank
// or a symbolic dim matches anything but a different known size).
void require_same_shape(const InferContext& ctx, size_t i, size_t j) {
  const std::optional<Shape>&a = ctx.input(i).shape, &b = ctx.input(j).shape;
  if (!a || !b) return;
  bool ok = a->size() == b->size();
  for (size_t k = 0; ok && k < a->size(); ++k) {
    const Dim &x = (*a)[k], &y = (*b)[k];
    ok = !(x.known() && y.known() && x.value != y.value) &&
         !(!x.symbol.empty() && !y.symbol.empty() && x.symbol != y.symbol);
  }
  if (!ok)
    ctx.fail("input " + std::to_string(j) + " '" + ctx.node().inputs[j] + "' " + shape_to_string(*b) +
             " must have the shape of input " + std::to_string(i) + " '" + ctx.node().inputs[i] + "' " +
             shape_to_string(*a));
}

// (dY, T) -> dX: float, one dtype, one shape; dX is typed like T (the forward's X or Y).
void same_type_grad_rule(InferContext& ctx) {
  require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  require_same_shape(ctx, 0, 1);
  ctx.set_output(0, ctx.input(1));
}

// SumToShape(dY, X): X must broadcast to dY (rank <= dY's; each aligned dim 1 or equal).
void sum_to_shape_rule(InferContext& ctx) {
  require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  const std::optional<Shape>&dy = ctx.input(0).shape, &x = ctx.input(1).shape;
  if (dy && x) {
    std::string why;
    if (x->size() > dy->size()) why = "it has rank " + std::to_string(x->size()) + " > " + std::to_string(dy->size());
    for (size_t k = 0; why.empty() && k < x->size(); ++k) {
      const Dim& a = (*x)[x->size() - 1 - k];
      const Dim& b = (*dy)[dy->size() - 1 - k];
      if (a.known() && b.known() && a.value != 1 && a.value != b.value)
        why = "axis " + std::to_string(x->size() - 1 - k) + " is " + std::to_string(a.value) + " vs " +
              std::to_string(b.value);
    }
    if (!why.empty())
      ctx.fail("input 1 '" + ctx.node().inputs[1] + "' " + shape_to_string(*x) + " does not broadcast to input 0 '" +
               ctx.node().inputs[0] + "' " + shape_to_string(*dy) + ": " + why);
  }
  ctx.set_output(0, ctx.input(1));
}

// One add per element of dY.
double sum_to_shape_flops(const Graph& g, const Node& n) {
  const ValueInfo* v = g.find_info(n.inputs[0]);
  if (!v || !v->shape || !shape_is_known(*v->shape)) return 0.0;
  return static_cast<double>(element_count(shape_dims(*v->shape)));
}

// dx[j] = sum of dy[i] over the i that read x[j] in the forward broadcast.
void sum_to_shape_kernel(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  Tensor& dx = ctx.out(0);
  dispatch_float(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const BroadcastIndex ix(dx.dims(), dy.dims());
    const T* pdy = dy.data<T>();
    T* pdx = dx.data<T>();
    if (dx.numel() == dy.numel()) {  // nothing is broadcast: a copy, none when dX is over dY
      if (pdx != pdy) std::memcpy(pdx, pdy, static_cast<size_t>(dx.numel()) * sizeof(T));
      return;
    }
    for (int64_t j = 0; j < dx.numel(); ++j) pdx[j] = T(0);
    for (int64_t i = 0; i < dy.numel(); ++i) pdx[ix(i)] += pdy[i];
  });
}

OpSchema make_grad_schema(const std::string& op, ShapeRule rule, FlopRule flops,
                          std::vector<std::string> attributes = {}) {
  OpSchema s;
  s.domain = kTrainrtDomain;
  s.op_type = op;
  s.min_inputs = s.max_inputs = 2;
  s.infer = std::move(rule);
  s.flops = std::move(flops);
  s.attributes = std::move(attributes);
  return s;
}

OpSchema make_schema(const std::string& op, int since, int min_in, int max_in, ShapeRule rule, FlopRule flops,
                     std::vector<std::string> attributes = {}) {
  OpSchema s;
  s.op_type = op;
  s.since_version = since;
  s.min_inputs = min_in;
  s.max_inputs = max_in;
  s.infer = std::move(rule);
  s.flops = std::move(flops);
  s.attributes = std::move(attributes);
  return s;
}

// ---- Clip, Pow, Where, Equal and the activations added with them ------------

// Input i must be float32/float64 or an integer type (or bool where bool_ok).
DataType require_arith(const InferContext& ctx, size_t i, bool bool_ok = false) {
  const DataType t = ctx.input(i).dtype;
  if (is_arith_dtype(t) || (bool_ok && t == DataType::Bool)) return t;
  const std::string msg = "input " + std::to_string(i) + " '" + ctx.node().inputs[i] + "' must be float32, float64" +
                          (bool_ok ? ", bool" : "") + " or an integer type, got " + dtype_name(t);
  if (t == DataType::Float16 || t == DataType::BFloat16) throw_unsupported(ctx.where(), msg);
  ctx.fail(msg);
}

// Clip: opset 6-10 take the bounds as attributes min/max, opset >= 11 as optional
// scalar inputs 1 and 2 of X's dtype (either may be missing or "").
void clip_rule(InferContext& ctx) {
  const DataType t = require_arith(ctx, 0);
  const bool attrs = ctx.node().attrs.count("min") || ctx.node().attrs.count("max");
  const int64_t opset = ctx.graph().opset("");
  if (opset >= 11 && attrs)
    ctx.fail("attributes min/max are Clip-6's; at opset " + std::to_string(opset) + " the bounds are inputs 1 and 2");
  if (opset > 0 && opset < 11 && ctx.input_count() > 1)
    ctx.fail("Clip at opset " + std::to_string(opset) + " takes the bounds as attributes min/max, not as inputs");
  for (size_t i = 1; i < ctx.input_count(); ++i) {
    if (!ctx.has_input(i)) continue;
    require_same_dtype(ctx, 0, i);
    const std::optional<Shape>& s = ctx.input(i).shape;
    if (s && !(s->empty() || (s->size() == 1 && (*s)[0].known() && (*s)[0].value == 1)))
      ctx.fail("input " + std::to_string(i) + " '" + ctx.node().inputs[i] + "' (the " + (i == 1 ? "min" : "max") +
               " bound) must be a scalar, got " + shape_to_string(*s));
  }
  ctx.set_output(0, ValueInfo{t, ctx.input(0).shape});
}

// Pow(A, B): base and exponent of any numeric types (opset 12+ lets them differ);
// Y has A's dtype and the broadcast shape.
void pow_rule(InferContext& ctx) {
  const DataType t = require_arith(ctx, 0);
  require_arith(ctx, 1);
  ctx.set_output(0, ValueInfo{t, broadcast_inputs(ctx, 0)});
}

// Where(C, X, Y): C bool, X and Y of one dtype; all three broadcast.
void where_rule(InferContext& ctx) {
  if (ctx.input(0).dtype != DataType::Bool)
    ctx.fail("input 0 '" + ctx.node().inputs[0] + "' (the condition) must be bool, got " +
             dtype_name(ctx.input(0).dtype));
  const DataType t = ctx.input(1).dtype;
  if (dtype_size(t) == 0) ctx.fail("input 1 '" + ctx.node().inputs[1] + "' has unsupported dtype " + dtype_name(t));
  require_same_dtype(ctx, 1, 2);
  ctx.set_output(0, ValueInfo{t, broadcast_inputs(ctx, 0)});
}

// Equal(A, B): one numeric or bool dtype; a bool output of the broadcast shape.
void equal_rule(InferContext& ctx) {
  require_arith(ctx, 0, /*bool_ok=*/ctx.node().op_type == "Equal");
  require_same_dtype(ctx, 0, 1);
  ctx.set_output(0, ValueInfo{DataType::Bool, broadcast_inputs(ctx, 0)});
}

// Mod(A, B; fmod): one numeric dtype, broadcast; float needs fmod = 1 (ONNX's rule).
void mod_rule(InferContext& ctx) {
  const int64_t fmod = ctx.node().attr_int("fmod", 0);
  if (fmod != 0 && fmod != 1) ctx.fail("attribute fmod must be 0 or 1, got " + std::to_string(fmod));
  broadcast_rule(ctx, /*integers_ok=*/true);
  const DataType t = ctx.input(0).dtype;
  if (fmod == 0 && (t == DataType::Float32 || t == DataType::Float64))
    ctx.fail("a float Mod needs fmod = 1, input 0 '" + ctx.node().inputs[0] + "' is " + dtype_name(t));
}

// Not(X): bool in, bool out of X's shape.
void not_rule(InferContext& ctx) {
  reject_attributes(ctx);
  if (ctx.input(0).dtype != DataType::Bool)
    ctx.fail("input 0 '" + ctx.node().inputs[0] + "' must be bool, got " + dtype_name(ctx.input(0).dtype));
  ctx.set_output(0, ctx.input(0));
}

void gelu_rule(InferContext& ctx) {
  const std::string a = ctx.node().attr_string("approximate", "none");
  if (a != "none" && a != "tanh") ctx.fail("attribute approximate must be \"none\" or \"tanh\", got \"" + a + "\"");
  unary_float_rule(ctx);
}

// PowGrad(dY, A, B) -> dA, dB: A and B broadcast to dY; dA typed like dY, dB like B
// (a float: an integer exponent has no gradient).
void pow_grad_rule(InferContext& ctx) {
  reject_attributes(ctx);
  require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  require_arith(ctx, 2);
  const std::optional<Shape> ab = broadcast_inputs(ctx, 1), &dy = ctx.input(0).shape;
  if (ab && dy && ab->size() != dy->size())
    ctx.fail("inputs 1 and 2 broadcast to " + shape_to_string(*ab) + ", not to dY's " + shape_to_string(*dy));
  const bool wants_db = ctx.node().outputs.size() > 1 && !ctx.node().outputs[1].empty();
  if (wants_db && ctx.input(2).dtype != DataType::Float32 && ctx.input(2).dtype != DataType::Float64)
    ctx.fail("output 1 (dB) needs a float exponent, input 2 '" + ctx.node().inputs[2] + "' is " +
             dtype_name(ctx.input(2).dtype));
  ctx.set_output(0, ctx.input(0));
  ctx.set_output(1, ValueInfo{ctx.input(2).dtype, dy});
}

// The ops of the table in ops/unary_ops.h: schema, backward op's schema, reference
// kernels and in-place facts, one line of the table each. Without attributes the
// shape rule rejects any; Gelu's checks its "approximate" value.
template <typename F>
ShapeRule unary_rule() {
  if constexpr (std::is_same_v<F, unary_math::Gelu>) return gelu_rule;
  if (!UnaryAttrs<F>::names().empty()) return unary_float_rule;
  return [](InferContext& ctx) {
    reject_attributes(ctx);
    unary_float_rule(ctx);
  };
}
template <typename G>
ShapeRule unary_grad_rule() {
  if (!UnaryAttrs<G>::names().empty()) return same_type_grad_rule;
  return [](InferContext& ctx) {
    reject_attributes(ctx);
    same_type_grad_rule(ctx);
  };
}

void register_unary_ops(Registry& r) {
  using namespace elementwise_loops;
#define TRAINRT_FORWARD(Op, since, flops)                                                              \
  r.schemas.add(make_schema(#Op, since, 1, 1, unary_rule<unary_math::Op>(), per_output_element(flops), \
                            UnaryAttrs<unary_math::Op>::names()));                                     \
  r.kernels.add("reference", "", #Op, unary_op_kernel<false, unary_math::Op>);                         \
  r.kernels.set_in_place("", #Op, facts::in_place({{0, 0}}));
#define TRAINRT_WITH_GRAD(Op, since, flops, Grad, reads, grad_flops, cpu)                                    \
  TRAINRT_FORWARD(Op, since, flops)                                                                          \
  r.schemas.add(make_grad_schema(#Grad, unary_grad_rule<unary_math::Grad>(), per_output_element(grad_flops), \
                                 UnaryAttrs<unary_math::Grad>::names()));                                    \
  r.kernels.add("reference", kTrainrtDomain, #Grad, unary_grad_kernel<false, unary_math::Grad>);             \
  r.kernels.set_in_place(kTrainrtDomain, #Grad, facts::in_place({{0, 0}}));
#define TRAINRT_COMPOSITE(Op, since, flops, cpu) TRAINRT_FORWARD(Op, since, flops)
  TRAINRT_UNARY_OPS(TRAINRT_WITH_GRAD)
  TRAINRT_UNARY_OPS_COMPOSITE_GRAD(TRAINRT_COMPOSITE)
#undef TRAINRT_COMPOSITE
#undef TRAINRT_WITH_GRAD
#undef TRAINRT_FORWARD
}

void register_more_elementwise(Registry& r) {
  using namespace elementwise_loops;
  OpSchema clip = make_schema("Clip", 6, 1, 3, clip_rule, per_output_element(2), {"min", "max"});
  r.schemas.add(std::move(clip));
  r.schemas.add(make_schema(
      "Pow", 7, 2, 2,
      [](InferContext& ctx) {
        reject_attributes(ctx);
        pow_rule(ctx);
      },
      per_output_element(4)));
  r.schemas.add(make_schema(
      "Where", 9, 3, 3,
      [](InferContext& ctx) {
        reject_attributes(ctx);
        where_rule(ctx);
      },
      per_output_element(1)));
  // Comparisons: Equal from opset 7 (bool inputs from 11), Greater/Less from 7 (9 and 13
  // only add types), GreaterOrEqual/LessOrEqual from 12.
  for (auto [op, since] :
       {std::pair{"Equal", 7}, {"Greater", 7}, {"Less", 7}, {"GreaterOrEqual", 12}, {"LessOrEqual", 12}})
    r.schemas.add(make_schema(
        op, since, 2, 2,
        [](InferContext& ctx) {
          reject_attributes(ctx);
          equal_rule(ctx);
        },
        per_output_element(1)));
  // Mod from opset 10 (13 only adds types), Not from opset 1.
  r.schemas.add(make_schema("Mod", 10, 2, 2, mod_rule, per_output_element(1), {"fmod"}));
  r.schemas.add(make_schema("Not", 1, 1, 1, not_rule, per_output_element(1)));

  r.kernels.add("reference", "", "Clip", clip_kernel<false>);
  r.kernels.add("reference", "", "Mod", mod_kernel<false>);
  r.kernels.add("reference", "", "Not", not_kernel<false>);
  r.kernels.add("reference", "", "Pow", pow_kernel<false>);
  r.kernels.add("reference", "", "Where", where_kernel<false>);
  r.kernels.add("reference", "", "Equal", equal_kernel<false>);
  r.kernels.add("reference", "", "Greater", greater_kernel<false>);
  r.kernels.add("reference", "", "Less", less_kernel<false>);
  r.kernels.add("reference", "", "GreaterOrEqual", greater_or_equal_kernel<false>);
  r.kernels.add("reference", "", "LessOrEqual", less_or_equal_kernel<false>);
  // In place: y[i] = f(x[i]) in every backend's kernel (oneDNN's eltwise supports src == dst).
  r.kernels.set_in_place("", "Clip", facts::in_place({{0, 0}}));

  // ---- backward ops (ai.trainrt) ----
  OpSchema clip_grad = make_grad_schema("ClipGrad", same_type_grad_rule, per_output_element(2), {"min", "max"});
  clip_grad.max_inputs = 4;  // dY, X, [min], [max]
  r.schemas.add(std::move(clip_grad));
  OpSchema pow_grad = make_grad_schema("PowGrad", pow_grad_rule, per_output_element(10));
  pow_grad.min_inputs = pow_grad.max_inputs = 3;
  pow_grad.max_outputs = 2;
  r.schemas.add(std::move(pow_grad));

  r.kernels.add("reference", kTrainrtDomain, "ClipGrad", clip_grad_kernel<false>);
  r.kernels.add("reference", kTrainrtDomain, "PowGrad", pow_grad_kernel<false>);
  r.kernels.set_in_place(kTrainrtDomain, "ClipGrad", facts::in_place({{0, 0}}));
}
}  // namespace

void register_elementwise(Registry& r) {
  register_unary_ops(r);

  // Binary arithmetic: multidirectional broadcasting since opset 7.
  auto binary = [](InferContext& ctx) {
    reject_attributes(ctx);
    broadcast_rule(ctx, /*integers_ok=*/true);
  };
  for (const char* op : {"Add", "Sub", "Mul", "Div"})
    r.schemas.add(make_schema(op, 7, 2, 2, binary, per_output_element(1)));
  r.kernels.add("reference", "", "Add", binary_kernel<AddOp>);
  r.kernels.add("reference", "", "Sub", binary_kernel<SubOp>);
  r.kernels.add("reference", "", "Mul", binary_kernel<MulOp>);
  r.kernels.add("reference", "", "Div", binary_kernel<DivOp>);
  // In place: the reference's y[i] = op(a[ia(i)], b[ib(i)]) reads index i of an operand
  // with the output's shape before writing it; the oneDNN binary kernel supports
  // dst == src0, and for Add/Mul it swaps the operands so that the one with the
  // output's shape is src0 (so input 1 is only taken when input 0 is broadcast).
  r.kernels.set_in_place("", "Add", facts::in_place_binary(/*commutative=*/true));
  r.kernels.set_in_place("", "Mul", facts::in_place_binary(/*commutative=*/true));
  r.kernels.set_in_place("", "Sub", facts::in_place_binary(/*commutative=*/false));
  r.kernels.set_in_place("", "Div", facts::in_place_binary(/*commutative=*/false));

  // Sum: variadic, broadcasting since opset 8; k inputs cost k-1 adds per element.
  OpSchema sum = make_schema(
      "Sum", 8, 1, std::numeric_limits<int>::max(),
      [](InferContext& ctx) {
        reject_attributes(ctx);
        broadcast_rule(ctx, /*integers_ok=*/false);
      },
      nullptr);
  sum.flops = [](const Graph& g, const Node& n) {
    return per_output_element(static_cast<double>(n.input_count()) - 1.0)(g, n);
  };
  r.schemas.add(std::move(sum));
  r.kernels.add("reference", "", "Sum", elementwise_loops::sum_kernel<false>);

  // ---- backward ops (ai.trainrt) ----
  r.schemas.add(make_grad_schema(
      "SumToShape",
      [](InferContext& ctx) {
        reject_attributes(ctx);
        sum_to_shape_rule(ctx);
      },
      sum_to_shape_flops));

  r.kernels.add("reference", kTrainrtDomain, "SumToShape", sum_to_shape_kernel);
  // Where nothing is broadcast (dX's dims are dY's: an Add's gradient, 12 a Wide ResNet
  // step) the op is a copy, which every backend's kernel skips when dX lies over dY.
  r.kernels.set_in_place(
      kTrainrtDomain, "SumToShape",
      [](const Node&, const InPlaceDims& in, const std::vector<int64_t>* out0) -> std::vector<InPlacePair> {
        const std::vector<int64_t>* dy = in(0);
        if (!out0 || !dy || *dy != *out0) return {};
        return {{0, 0}};
      });

  register_more_elementwise(r);
}

}  // namespace trainrt
