// Small ops with no family of their own: Identity, Constant, Cast, Dropout.
//
// Dropout's mask is counter-based so that every backend can reproduce it from
// (seed, element index) alone, in any order or in parallel:
//   key  = splitmix64(ctx.seed)                         (no `seed` attribute)
//        = splitmix64(ctx.seed ^ splitmix64(attr seed))  (with one)
//   u_i  = (splitmix64(key + i * 0x9E3779B97F4A7C15) >> 11) * 2^-53   in [0, 1)
//   keep_i = u_i >= ratio;   y_i = keep_i ? x_i / (1 - ratio) : 0
// ctx.seed differs per node and step (runtime/executor_issue.cpp), so masks do too.
//
// Backward (domain ai.trainrt): DropoutGrad(dY, mask, [ratio], [training_mode]) -> dX,
// dX = dY * mask / (1 - ratio) in training (ctx.training or training_mode true, the
// forward's test), dX = dY * mask otherwise. ratio is read like the forward's:
// the optional input, 0.5 when omitted.
//
// DropoutReluGrad(dZ, Z, [ratio], [training_mode]) -> dX (domain ai.trainrt) is
// ReluGrad(DropoutGrad(dZ, mask, ratio, training_mode), Y) for Z = Dropout(Y) with
// that mask, written by the training fusion (passes/fuse_dropout.cpp) from Z alone:
//   dX = Z > 0 ? dZ * scale : 0      scale as DropoutGrad's
// Exact: where the mask kept an element Z = Y * scale (scale >= 1), so Z > 0 exactly
// when Y > 0; where it dropped one the gradient is 0 either way. Under --precision
// bf16/fp16 the test reads Z rounded to that type (math_rounded_inputs), as a Z stored in
// 16 bits is read (runtime/narrow.h): a positive Z below half the smallest 16-bit
// subnormal (2^-134 bfloat16, 2^-25 half) passes no gradient, as in PyTorch's autocast,
// which keeps that activation in 16 bits.
//
// The loops of Dropout, DropoutGrad and DropoutReluGrad are in ops/misc_loops.h: the
// reference kernels here run them serially, the cpu kernels (ops/misc_cpu.cpp) over
// parallel chunks (ops/core/parallel.h): the same code, so the same mask and the same bits.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ops/core/cast.h"
#include "ops/core/common.h"
#include "ops/core/kernel_facts.h"
#include "ops/core/parallel.h"
#include "ops/core/register_all.h"
#include "ops/misc_loops.h"

namespace trainrt {

namespace {

// ---- Cast (ops/core/cast.h) -------------------------------------------------------

void cast_kernel(KernelContext& ctx) { cast::cast_elements<false>(ctx.in(0), ctx.out(0)); }

// ---- shape rules ------------------------------------------------------------

// A numeric dtype trainrt stores; strings are unsupported, not malformed.
void require_numeric(const InferContext& ctx, DataType t, const std::string& what) {
  if (t == DataType::String) throw_unsupported(ctx.where(), what + " is a string tensor (not supported)");
  if (!dtype_is_supported(t)) ctx.fail(what + " has unsupported dtype " + dtype_name(t));
}

void identity_rule(InferContext& ctx) {
  if (!ctx.node().attrs.empty())
    throw_unsupported(ctx.where(), "attribute '" + ctx.node().attrs.begin()->first + "' is not supported");
  require_numeric(ctx, ctx.input(0).dtype, "input 0 '" + ctx.node().inputs[0] + "'");
  ctx.set_output(0, ctx.input(0));
}

void constant_rule(InferContext& ctx) {
  const Tensor* t = ctx.node().attr_tensor("value");
  if (!t) ctx.fail("attribute 'value' is required (value_float, value_ints, ... are not supported)");
  require_numeric(ctx, t->dtype(), "attribute 'value'");
  ctx.set_output(0, t->dtype(), shape_of(t->dims()));
}

void cast_rule(InferContext& ctx) {
  const Node& n = ctx.node();
  if (!n.has_attr("to")) ctx.fail("attribute 'to' is required");
  const int64_t to = n.attr_int("to", 0);
  if (to < 0 || to > 16 || dtype_size(static_cast<DataType>(to)) == 0) {
    if (to == static_cast<int64_t>(DataType::String)) throw_unsupported(ctx.where(), "cast to string is not supported");
    ctx.fail("attribute 'to' = " + std::to_string(to) + " is not a numeric ONNX data type");
  }
  require_numeric(ctx, ctx.input(0).dtype, "input 0 '" + n.inputs[0] + "'");
  ctx.set_output(0, ValueInfo{static_cast<DataType>(to), ctx.input(0).shape});
}

// Input i must be a scalar (rank 0, or one element) when its shape is known.
void require_scalar(const InferContext& ctx, size_t i, const std::string& what) {
  const std::optional<Shape>& s = ctx.input(i).shape;
  if (!s) return;
  for (const Dim& d : *s)
    if (d.known() && d.value != 1)
      ctx.fail(what + " '" + ctx.node().inputs[i] + "' must be a scalar, got shape " + shape_to_string(*s));
}

void dropout_rule(InferContext& ctx) {
  require_float(ctx, 0);
  if (ctx.has_input(1)) {
    const DataType rt = ctx.input(1).dtype;
    if (rt != DataType::Float32 && rt != DataType::Float64 && rt != DataType::Float16 && rt != DataType::BFloat16)
      ctx.fail("ratio '" + ctx.node().inputs[1] + "' must be a float type, got " + dtype_name(rt));
    require_scalar(ctx, 1, "ratio");
    if (const Tensor* r = ctx.input_constant(1); r && r->numel() == 1) {
      const double v = r->get_as_double(0);
      if (!(v >= 0.0 && v < 1.0)) ctx.fail("ratio must be in [0, 1), got " + std::to_string(v));
    }
  }
  if (ctx.has_input(2)) {
    if (ctx.input(2).dtype != DataType::Bool)
      ctx.fail("training_mode '" + ctx.node().inputs[2] + "' must be bool, got " + dtype_name(ctx.input(2).dtype));
    require_scalar(ctx, 2, "training_mode");
  }
  ctx.set_output(0, ctx.input(0));
  ctx.set_output(1, ValueInfo{DataType::Bool, ctx.input(0).shape});
}

// Input 1 (`what`) must have input 0's (`like`) shape where both dims are known.
void require_shape_of_input0(InferContext& ctx, const char* what, const char* like) {
  const ValueInfo &x = ctx.input(0), &y = ctx.input(1);
  if (!x.shape || !y.shape) return;
  bool same = x.shape->size() == y.shape->size();
  for (size_t k = 0; same && k < x.shape->size(); ++k) {
    const Dim &a = (*x.shape)[k], &b = (*y.shape)[k];
    same = !(a.known() && b.known() && a.value != b.value);
  }
  if (!same)
    ctx.fail(std::string(what) + " '" + ctx.node().inputs[1] + "' " + shape_to_string(*y.shape) +
             " must have the shape of " + like + " '" + ctx.node().inputs[0] + "' " + shape_to_string(*x.shape));
}

// The optional inputs 2 and 3 of the Dropout gradients: ratio (float scalar) and
// training_mode (bool scalar), as the forward Dropout takes them.
void require_dropout_options(InferContext& ctx) {
  if (ctx.has_input(2)) {
    if (!dtype_is_float(ctx.input(2).dtype))
      ctx.fail("ratio '" + ctx.node().inputs[2] + "' must be a float type, got " + dtype_name(ctx.input(2).dtype));
    require_scalar(ctx, 2, "ratio");
  }
  if (ctx.has_input(3)) {
    if (ctx.input(3).dtype != DataType::Bool)
      ctx.fail("training_mode '" + ctx.node().inputs[3] + "' must be bool, got " + dtype_name(ctx.input(3).dtype));
    require_scalar(ctx, 3, "training_mode");
  }
}

// DropoutGrad(dY, mask, [ratio], [training_mode]): mask bool with dY's shape.
void dropout_grad_rule(InferContext& ctx) {
  if (!ctx.node().attrs.empty())
    throw_unsupported(ctx.where(), "attribute '" + ctx.node().attrs.begin()->first + "' is not supported");
  require_float(ctx, 0);
  if (ctx.input(1).dtype != DataType::Bool)
    ctx.fail("mask '" + ctx.node().inputs[1] + "' must be bool, got " + dtype_name(ctx.input(1).dtype));
  require_shape_of_input0(ctx, "mask", "dY");
  require_dropout_options(ctx);
  ctx.set_output(0, ctx.input(0));
}

// DropoutReluGrad(dZ, Z, [ratio], [training_mode]): Z of dZ's float type and shape.
void dropout_relu_grad_rule(InferContext& ctx) {
  if (!ctx.node().attrs.empty())
    throw_unsupported(ctx.where(), "attribute '" + ctx.node().attrs.begin()->first + "' is not supported");
  require_float(ctx, 0);
  const ValueInfo &dz = ctx.input(0), &z = ctx.input(1);
  if (z.dtype != dz.dtype)
    ctx.fail("Z '" + ctx.node().inputs[1] + "' must have dZ's type " + dtype_name(dz.dtype) + ", got " +
             dtype_name(z.dtype));
  require_shape_of_input0(ctx, "Z", "dZ");
  require_dropout_options(ctx);
  ctx.set_output(0, dz);
}

OpSchema make_schema(const std::string& op, int since, int min_in, int max_in, int min_out, int max_out, ShapeRule rule,
                     std::vector<std::string> attributes = {}) {
  OpSchema s;
  s.op_type = op;
  s.since_version = since;
  s.min_inputs = min_in;
  s.max_inputs = max_in;
  s.min_outputs = min_out;
  s.max_outputs = max_out;
  s.infer = std::move(rule);
  s.attributes = std::move(attributes);
  return s;
}

// Copies input 0 (or the `value` attribute) byte for byte into output 0.
void copy_kernel(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  std::memcpy(ctx.out(0).raw(), x.raw(), x.nbytes());
}

}  // namespace

void register_misc(Registry& r) {
  r.schemas.add(make_schema("Identity", 1, 1, 1, 1, 1, identity_rule));
  r.kernels.add("reference", "", "Identity", copy_kernel);

  // Only the tensor-valued form; value_float, value_ints, sparse_value... are
  // rejected by validation as unsupported attributes.
  r.schemas.add(make_schema("Constant", 1, 0, 0, 1, 1, constant_rule, {"value"}));
  r.kernels.add("reference", "", "Constant", [](KernelContext& ctx) {
    const Tensor& t = *ctx.node.attr_tensor("value");
    std::memcpy(ctx.out(0).raw(), t.raw(), t.nbytes());
  });

  // Opset 6 made `to` an integer; later versions only add types.
  r.schemas.add(make_schema("Cast", 6, 1, 1, 1, 1, cast_rule, {"to"}));
  r.kernels.add("reference", "", "Cast", cast_kernel);

  // Opset 12 moved ratio to an input and added training_mode.
  r.schemas.add(make_schema("Dropout", 12, 1, 3, 1, 2, dropout_rule, {"seed"}));
  r.kernels.add("reference", "", "Dropout", misc_loops::dropout_kernel<false>);

  OpSchema dropout_grad = make_schema("DropoutGrad", 1, 2, 4, 1, 1, dropout_grad_rule);
  dropout_grad.domain = kTrainrtDomain;
  r.schemas.add(std::move(dropout_grad));
  r.kernels.add("reference", kTrainrtDomain, "DropoutGrad", misc_loops::dropout_grad_kernel<false>);

  OpSchema dropout_relu_grad = make_schema("DropoutReluGrad", 1, 2, 4, 1, 1, dropout_relu_grad_rule);
  dropout_relu_grad.domain = kTrainrtDomain;
  r.schemas.add(std::move(dropout_relu_grad));
  r.kernels.add("reference", kTrainrtDomain, "DropoutReluGrad", misc_loops::dropout_relu_grad_kernel<false>);
  // In place: dX[i] = Z[i] > 0 ? dZ[i] * scale : 0, a plain loop on every backend.
  r.kernels.set_in_place(kTrainrtDomain, "DropoutReluGrad", facts::in_place({{0, 0}}));
}

}  // namespace trainrt
