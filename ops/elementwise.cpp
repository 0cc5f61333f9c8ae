// Elementwise ops: activations (Relu, LeakyRelu, Sigmoid, Tanh, Clip, HardSigmoid,
// HardSwish, Gelu), Neg, Sqrt, Erf, Exp, Log, Reciprocal and with numpy broadcasting
// arithmetic (Add, Sub, Mul, Div, Mod, Pow, variadic Sum), Where, Not and the comparisons
// (Equal, Greater, Less, GreaterOrEqual, LessOrEqual), and their backward ops (domain
// ai.trainrt, used by autodiff/rules_elementwise.cpp). The ops added with Clip keep
// their loops and formulas in ops/elementwise_loops.h (ClipGrad, PowGrad, ... there);
// the older ones:
//
//   ReluGrad(dY, Y) -> dX              dX = Y > 0 ? dY : 0          (Y = Relu's output)
//   LeakyReluGrad(dY, X) -> dX         dX = X < 0 ? alpha*dY : dY   (attr alpha, default 0.01)
//   SigmoidGrad(dY, Y) -> dX           dX = dY * Y * (1 - Y)
//   TanhGrad(dY, Y) -> dX              dX = dY * (1 - Y^2)
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
using elementwise_loops::grad_map;
using elementwise_loops::unary_map;

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

void register_more_elementwise(Registry& r) {
  using namespace elementwise_loops;
  auto unary = [](InferContext& ctx) {
    reject_attributes(ctx);
    unary_float_rule(ctx);
  };
  OpSchema clip = make_schema("Clip", 6, 1, 3, clip_rule, per_output_element(2), {"min", "max"});
  r.schemas.add(std::move(clip));
  r.schemas.add(make_schema("HardSigmoid", 6, 1, 1, unary_float_rule, per_output_element(3), {"alpha", "beta"}));
  r.schemas.add(make_schema("HardSwish", 14, 1, 1, unary, per_output_element(4)));
  r.schemas.add(make_schema("Sqrt", 6, 1, 1, unary, per_output_element(1)));
  r.schemas.add(make_schema("Exp", 6, 1, 1, unary, per_output_element(1)));
  r.schemas.add(make_schema("Log", 6, 1, 1, unary, per_output_element(1)));
  r.schemas.add(make_schema("Reciprocal", 6, 1, 1, unary, per_output_element(1)));
  r.schemas.add(make_schema("Erf", 9, 1, 1, unary, per_output_element(4)));
  // Gelu is ONNX opset 20's; trainrt's import does not run onnx's checker, so a
  // model that declares opset 20 (or a graph pass) may use it.
  r.schemas.add(make_schema("Gelu", 20, 1, 1, gelu_rule, per_output_element(8), {"approximate"}));
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
  r.kernels.add("reference", "", "HardSigmoid", hard_sigmoid_kernel<false>);
  r.kernels.add("reference", "", "HardSwish", hard_swish_kernel<false>);
  r.kernels.add("reference", "", "Sqrt", sqrt_kernel<false>);
  r.kernels.add("reference", "", "Erf", erf_kernel<false>);
  r.kernels.add("reference", "", "Gelu", gelu_kernel<false>);
  r.kernels.add("reference", "", "Pow", pow_kernel<false>);
  r.kernels.add("reference", "", "Where", where_kernel<false>);
  r.kernels.add("reference", "", "Equal", equal_kernel<false>);
  r.kernels.add("reference", "", "Greater", greater_kernel<false>);
  r.kernels.add("reference", "", "Less", less_kernel<false>);
  r.kernels.add("reference", "", "GreaterOrEqual", greater_or_equal_kernel<false>);
  r.kernels.add("reference", "", "LessOrEqual", less_or_equal_kernel<false>);
  r.kernels.add("reference", "", "Exp", exp_kernel<false>);
  r.kernels.add("reference", "", "Log", log_kernel<false>);
  r.kernels.add("reference", "", "Reciprocal", reciprocal_kernel<false>);
  // In place: y[i] = f(x[i]) in every backend's kernel (oneDNN's eltwise supports src == dst).
  for (const char* op : {"Clip", "HardSigmoid", "HardSwish", "Sqrt", "Erf", "Gelu", "Exp", "Log", "Reciprocal"})
    r.kernels.set_in_place("", op, facts::in_place({{0, 0}}));

  // ---- backward ops (ai.trainrt) ----
  auto grad_rule = [](InferContext& ctx) {
    reject_attributes(ctx);
    same_type_grad_rule(ctx);
  };
  OpSchema clip_grad = make_grad_schema("ClipGrad", same_type_grad_rule, per_output_element(2), {"min", "max"});
  clip_grad.max_inputs = 4;  // dY, X, [min], [max]
  r.schemas.add(std::move(clip_grad));
  r.schemas.add(make_grad_schema("HardSigmoidGrad", same_type_grad_rule, per_output_element(4), {"alpha", "beta"}));
  r.schemas.add(make_grad_schema("HardSwishGrad", grad_rule, per_output_element(4)));
  r.schemas.add(make_grad_schema("SqrtGrad", grad_rule, per_output_element(2)));
  r.schemas.add(make_grad_schema("ErfGrad", grad_rule, per_output_element(5)));
  r.schemas.add(make_grad_schema("GeluGrad", same_type_grad_rule, per_output_element(12), {"approximate"}));
  OpSchema pow_grad = make_grad_schema("PowGrad", pow_grad_rule, per_output_element(10));
  pow_grad.min_inputs = pow_grad.max_inputs = 3;
  pow_grad.max_outputs = 2;
  r.schemas.add(std::move(pow_grad));

  r.kernels.add("reference", kTrainrtDomain, "ClipGrad", clip_grad_kernel<false>);
  r.kernels.add("reference", kTrainrtDomain, "HardSigmoidGrad", hard_sigmoid_grad_kernel<false>);
  r.kernels.add("reference", kTrainrtDomain, "HardSwishGrad", hard_swish_grad_kernel<false>);
  r.kernels.add("reference", kTrainrtDomain, "SqrtGrad", sqrt_grad_kernel<false>);
  r.kernels.add("reference", kTrainrtDomain, "ErfGrad", erf_grad_kernel<false>);
  r.kernels.add("reference", kTrainrtDomain, "GeluGrad", gelu_grad_kernel<false>);
  r.kernels.add("reference", kTrainrtDomain, "PowGrad", pow_grad_kernel<false>);
  for (const char* op : {"ClipGrad", "HardSigmoidGrad", "HardSwishGrad", "SqrtGrad", "ErfGrad", "GeluGrad"})
    r.kernels.set_in_place(kTrainrtDomain, op, facts::in_place({{0, 0}}));
}
}  // namespace

void register_elementwise(Registry& r) {
  // Activations: ONNX opset 6 dropped `consumed_inputs`; later versions only add types.
  auto unary = [](InferContext& ctx) {
    reject_attributes(ctx);
    unary_float_rule(ctx);
  };
  r.schemas.add(make_schema("Relu", 6, 1, 1, unary, per_output_element(1)));
  r.schemas.add(make_schema("Sigmoid", 6, 1, 1, unary, per_output_element(4)));
  r.schemas.add(make_schema("Tanh", 6, 1, 1, unary, per_output_element(4)));
  r.schemas.add(make_schema("LeakyRelu", 6, 1, 1, unary_float_rule, per_output_element(2), {"alpha"}));

  // Relu: y = max(x, 0); NaN stays NaN.
  r.kernels.add("reference", "", "Relu",
                [](KernelContext& ctx) { unary_map<false>(ctx, [](auto x) { return x < 0 ? decltype(x)(0) : x; }); });
  // LeakyRelu: y = x if x >= 0 else alpha * x (alpha defaults to 0.01).
  r.kernels.add("reference", "", "LeakyRelu", [](KernelContext& ctx) {
    const double alpha = ctx.node.attr_float("alpha", 0.01f);
    unary_map<false>(ctx, [alpha](auto x) { return x < 0 ? static_cast<decltype(x)>(alpha) * x : x; });
  });
  // Sigmoid: y = 1 / (1 + exp(-x)), in a form where exp never overflows.
  r.kernels.add("reference", "", "Sigmoid", [](KernelContext& ctx) {
    unary_map<false>(ctx, [](auto x) {
      using T = decltype(x);
      if (x >= 0) return T(1) / (T(1) + std::exp(-x));
      const T e = std::exp(x);
      return e / (T(1) + e);
    });
  });
  r.kernels.add("reference", "", "Tanh",
                [](KernelContext& ctx) { unary_map<false>(ctx, [](auto x) { return std::tanh(x); }); });
  // Neg: y = -x (float32/float64; the gradient rules' negation, and ONNX's op).
  r.schemas.add(make_schema("Neg", 6, 1, 1, unary, per_output_element(1)));
  r.kernels.add("reference", "", "Neg", [](KernelContext& ctx) { unary_map<false>(ctx, [](auto x) { return -x; }); });
  // In place: y[i] = f(x[i]) (the reference loop; oneDNN's eltwise supports src == dst).
  for (const char* op : {"Relu", "LeakyRelu", "Sigmoid", "Tanh", "Neg"})
    r.kernels.set_in_place("", op, facts::in_place({{0, 0}}));

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
  auto grad_rule = [](InferContext& ctx) {
    reject_attributes(ctx);
    same_type_grad_rule(ctx);
  };
  r.schemas.add(make_grad_schema("ReluGrad", grad_rule, per_output_element(1)));
  r.schemas.add(make_grad_schema("SigmoidGrad", grad_rule, per_output_element(3)));
  r.schemas.add(make_grad_schema("TanhGrad", grad_rule, per_output_element(3)));
  r.schemas.add(make_grad_schema("LeakyReluGrad", same_type_grad_rule, per_output_element(2), {"alpha"}));
  r.schemas.add(make_grad_schema(
      "SumToShape",
      [](InferContext& ctx) {
        reject_attributes(ctx);
        sum_to_shape_rule(ctx);
      },
      sum_to_shape_flops));

  r.kernels.add("reference", kTrainrtDomain, "ReluGrad", elementwise_loops::relu_grad_kernel<false>);
  r.kernels.add("reference", kTrainrtDomain, "LeakyReluGrad", [](KernelContext& ctx) {
    const double alpha = ctx.node.attr_float("alpha", 0.01f);  // same branch as the forward: x < 0
    grad_map<false>(ctx, [alpha](auto dy, auto x) { return x < 0 ? static_cast<decltype(dy)>(alpha) * dy : dy; });
  });
  r.kernels.add("reference", kTrainrtDomain, "SigmoidGrad", [](KernelContext& ctx) {
    grad_map<false>(ctx, [](auto dy, auto y) { return dy * y * (decltype(y)(1) - y); });
  });
  r.kernels.add("reference", kTrainrtDomain, "TanhGrad", [](KernelContext& ctx) {
    grad_map<false>(ctx, [](auto dy, auto y) { return dy * (decltype(y)(1) - y * y); });
  });
  // In place: dx[i] = f(dy[i], t[i]) (oneDNN's eltwise_backward supports diff_src == diff_dst).
  for (const char* op : {"ReluGrad", "SigmoidGrad", "TanhGrad", "LeakyReluGrad"})
    r.kernels.set_in_place(kTrainrtDomain, op, facts::in_place({{0, 0}}));
  r.kernels.add("reference", kTrainrtDomain, "SumToShape", sum_to_shape_kernel);

  register_more_elementwise(r);
}

}  // namespace trainrt
