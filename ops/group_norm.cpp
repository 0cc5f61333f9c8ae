// InstanceNormalization and GroupNormalization: schemas, shape rules, FLOP rules,
// reference kernels (the loops of ops/group_norm_loops.h, run serially).
//
// InstanceNormalization (opset 6):
//   input: N,C,spatial... (rank >= 3), scale, B: C  ->  output: like input
//   each (n, c) plane normalised over its spatial values with the biased variance:
//   Y = (x - mean)/sqrt(var + epsilon)*scale[c] + B[c]
// GroupNormalization (opset 18; num_groups, epsilon; stash_type from opset 21):
//   X: N,C,spatial... (rank >= 2), scale, bias: num_groups values (opset 18) or C (opset 21)
//   channels split into num_groups groups of C/num_groups; each (n, group) normalised over
//   its C/num_groups*spatial values, then scaled and shifted per group (opset 18) or per
//   channel (opset 21). stash_type must be 1 (float): the statistics are computed in
//   double, which is at least float's precision.
// PyTorch's nn.GroupNorm exports at opset <= 17 as Reshape to N,G,-1 -> InstanceNormalization
// (scale ones, B zeros) -> Reshape back -> Mul(weight) -> Add(bias); it trains through
// InstanceNormalization's rule and those of Reshape, Mul and Add.
//
// GroupNormalizationGrad (ai.trainrt), the backward of both:
//   (dY: like X, X, scale: C or num_groups; num_groups (0: one group per channel), epsilon)
//   -> (dX: like X, dScale, dBias: like scale), each optional. Statistics recomputed from X.
// FLOPs: 8 per element forward (mean 1, variance 3, normalise 2, affine 2), 12 backward.
#include "ops/group_norm.h"

#include <string>

#include "ops/core/common.h"
#include "ops/core/register_all.h"
#include "ops/group_norm_loops.h"

namespace trainrt {

namespace {

void require_epsilon(const InferContext& ctx) {
  const float eps = ctx.node().attr_float("epsilon", 1e-5f);
  if (!(eps >= 0)) ctx.fail("attribute 'epsilon' must be >= 0, got " + std::to_string(eps));
}

// Input i (scale or bias) must be a vector of `want` values (where both are known).
void require_vector(const InferContext& ctx, size_t i, const Dim& want, const std::string& what,
                    const std::string& of) {
  const Node& n = ctx.node();
  if (ctx.input_rank(i) != 1)
    ctx.fail("input " + std::to_string(i) + " '" + n.inputs[i] + "' (" + what + ") must have rank 1, got rank " +
             std::to_string(ctx.input_rank(i)));
  const Dim& got = (*ctx.input(i).shape)[0];
  if (got.known() && want.known() && got.value != want.value)
    ctx.fail("input " + std::to_string(i) + " '" + n.inputs[i] + "' (" + what + ") has " + std::to_string(got.value) +
             " values, expected " + std::to_string(want.value) + " (" + of + ")");
}

// Checks num_groups against the channels of x; returns it.
int64_t require_groups(const InferContext& ctx, const Shape& x, bool zero_is_channels) {
  const int64_t g = ctx.node().attr_int("num_groups", zero_is_channels ? 0 : -1);
  if (!ctx.node().has_attr("num_groups")) ctx.fail("attribute 'num_groups' is required");
  if (g < 0 || (g == 0 && !zero_is_channels)) ctx.fail("attribute 'num_groups' must be >= 1, got " + std::to_string(g));
  if (g > 0 && x[1].known() && x[1].value % g != 0)
    ctx.fail("attribute 'num_groups' " + std::to_string(g) + " does not divide the " + std::to_string(x[1].value) +
             " channels of X " + shape_to_string(x));
  return g;
}

void instancenorm_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  const DataType t = require_float(ctx, 0);
  if (ctx.input_rank(0) < 3)
    ctx.fail("input 0 '" + n.inputs[0] + "' must have rank >= 3 (N,C,D1,...), got rank " +
             std::to_string(ctx.input_rank(0)));
  require_epsilon(ctx);
  const Shape& x = *ctx.input(0).shape;
  for (size_t i : {size_t{1}, size_t{2}}) {
    require_same_dtype(ctx, 0, i);
    require_vector(ctx, i, x[1], i == 1 ? "scale" : "B", "channels of the input");
  }
  ctx.set_output(0, t, x);
}

void groupnorm_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  const DataType t = require_float(ctx, 0);
  if (ctx.input_rank(0) < 2)
    ctx.fail("input 0 '" + n.inputs[0] + "' (X) must have rank >= 2 (N,C,...), got rank " +
             std::to_string(ctx.input_rank(0)));
  require_epsilon(ctx);
  const int64_t stash = n.attr_int("stash_type", 1);
  if (stash != 1) ctx.fail("attribute 'stash_type' " + std::to_string(stash) + " is not supported; only 1 (float)");
  const Shape& x = *ctx.input(0).shape;
  const int64_t g = require_groups(ctx, x, false);
  const bool per_channel = ctx.graph().opset("") >= 21;
  for (size_t i : {size_t{1}, size_t{2}}) {
    require_same_dtype(ctx, 0, i);
    require_vector(ctx, i, per_channel ? x[1] : Dim::of(g), i == 1 ? "scale" : "bias",
                   per_channel ? "channels of X, opset 21" : "num_groups, opset 18");
  }
  ctx.set_output(0, t, x);
}

double groupnorm_flops(const Graph& g, const Node& n, size_t x_input, double per_element) {
  const ValueInfo* x = g.find_info(n.inputs[x_input]);
  if (!x || !x->shape || !shape_is_known(*x->shape)) return 0;
  return per_element * static_cast<double>(element_count(shape_dims(*x->shape)));
}

// GroupNormalizationGrad(dY, X, scale) -> (dX, dScale, dBias).
void groupnorm_grad_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  const DataType t = require_float(ctx, 1);
  require_same_dtype(ctx, 0, 1);
  require_same_dtype(ctx, 2, 1);
  if (ctx.input_rank(1) < 2)
    ctx.fail("input 1 '" + n.inputs[1] + "' (X) must have rank >= 2 (N,C,...), got rank " +
             std::to_string(ctx.input_rank(1)));
  require_epsilon(ctx);
  const Shape& x = *ctx.input(1).shape;
  if (ctx.input_rank(0) != ctx.input_rank(1))
    ctx.fail("input 0 '" + n.inputs[0] + "' (dY) must have X's rank " + std::to_string(x.size()));
  const int64_t g = require_groups(ctx, x, true);
  if (ctx.input_rank(2) != 1)
    ctx.fail("input 2 '" + n.inputs[2] + "' (scale) must have rank 1, got rank " + std::to_string(ctx.input_rank(2)));
  const Dim& k = (*ctx.input(2).shape)[0];
  if (k.known() && x[1].known() && k.value != x[1].value && k.value != (g == 0 ? x[1].value : g))
    ctx.fail("input 2 '" + n.inputs[2] + "' (scale) has " + std::to_string(k.value) +
             " values, expected the channels or the groups of X " + shape_to_string(x));
  ctx.set_output(0, ctx.input(1));
  ctx.set_output(1, t, *ctx.input(2).shape);
  ctx.set_output(2, t, *ctx.input(2).shape);
}

}  // namespace

void register_group_norm(Registry& r) {
  OpSchema in;
  in.op_type = "InstanceNormalization";
  in.min_inputs = in.max_inputs = 3;
  in.min_outputs = in.max_outputs = 1;
  in.since_version = 6;
  in.infer = instancenorm_infer;
  in.flops = [](const Graph& g, const Node& n) { return groupnorm_flops(g, n, 0, 8); };
  in.attributes = {"epsilon"};
  r.schemas.add(std::move(in));

  OpSchema gn;
  gn.op_type = "GroupNormalization";
  gn.min_inputs = gn.max_inputs = 3;
  gn.min_outputs = gn.max_outputs = 1;
  gn.since_version = 18;
  gn.infer = groupnorm_infer;
  gn.flops = [](const Graph& g, const Node& n) { return groupnorm_flops(g, n, 0, 8); };
  gn.attributes = {"num_groups", "epsilon", "stash_type"};
  r.schemas.add(std::move(gn));

  const Kernel forward = [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { group_norm_loops::forward<false, decltype(tag)>(ctx); });
  };
  r.kernels.add("reference", "", "InstanceNormalization", forward);
  r.kernels.add("reference", "", "GroupNormalization", forward);

  OpSchema grad;
  grad.domain = kTrainrtDomain;
  grad.op_type = "GroupNormalizationGrad";
  grad.min_inputs = grad.max_inputs = 3;
  grad.min_outputs = 1;
  grad.max_outputs = 3;
  grad.infer = groupnorm_grad_infer;
  grad.flops = [](const Graph& g, const Node& n) { return groupnorm_flops(g, n, 1, 12); };
  grad.attributes = {"num_groups", "epsilon"};
  r.schemas.add(std::move(grad));
  r.kernels.add("reference", kTrainrtDomain, "GroupNormalizationGrad", [](KernelContext& ctx) {
    dispatch_float(ctx.in(1).dtype(), [&](auto tag) { group_norm_loops::backward<false, decltype(tag)>(ctx); });
  });
}

}  // namespace trainrt
