// Resize (ai.onnx, opsets 11 to 19) and Upsample (opsets 7 and 9, deprecated: the same
// kernels, as Resize with coordinate_transformation_mode asymmetric and nearest_mode
// floor): schemas, shape rule, reference kernels; any rank.
//
//   Resize(X, roi, scales, sizes) -> Y      Upsample(X, scales) -> Y   (Upsample-7: 'scales' attribute)
//   Y[o...] = sum over the taps of each dim of X[i...] * prod weights   (ops/resize_loops.h)
//
// Per dim: out = floor(in*scale) with scales, or sizes (with 'axes': only those dims;
// keep_aspect_ratio_policy not_larger/not_smaller: one scale for them). Output coordinate
// o reads input coordinate x = f(o) by coordinate_transformation_mode (half_pixel:
// (o+0.5)/scale-0.5; pytorch_half_pixel: the same, 0 when out is 1; align_corners:
// o*(in-1)/(out-1); asymmetric: o/scale; tf_half_pixel_for_nn: (o+0.5)/scale;
// half_pixel_symmetric, opset 19) where scale is the given scale or out/in. mode nearest:
// X at x rounded by nearest_mode (round_prefer_floor, round_prefer_ceil, floor, ceil);
// linear: (1-t)*X[floor x] + t*X[floor x + 1], t = x - floor x, indices clamped to the
// input (N-linear over every resized dim: bilinear, trilinear). Refused (Unsupported, the
// node named): mode cubic, tf_crop_and_resize, antialias with linear. roi is read by
// tf_crop_and_resize only. scales and sizes may be run-time inputs: the plan is
// specialised on their values (graph/infer.h shape_input_slots); left unknown, the
// resized dims are open until then.
//
// ResizeGrad (ai.trainrt), the backward: ResizeGrad(dY, X, roi, scales, sizes) -> dX with
// the forward's attributes; dX[i] = sum of dY[o] * weight over the taps that read i (a
// scatter-add). X is read for its shape only.
#include <optional>
#include <string>
#include <vector>

#include "ops/core/common.h"
#include "ops/core/register_all.h"
#include "ops/resize_loops.h"

namespace trainrt {

namespace {

// Y's shape for data X at input xi and scales/sizes at scales_slot (-1: Upsample-7's
// attribute) and scales_slot+1.
Shape resize_output_shape(InferContext& ctx, size_t xi, int scales_slot) {
  const Node& n = ctx.node();
  require_float(ctx, xi);
  const ResizeMode m = resize_mode(n, ctx.where());
  const Shape& x = *ctx.input(xi).shape;
  std::optional<std::vector<double>> scales;
  std::optional<std::vector<int64_t>> sizes;
  bool open = false;  // scales or sizes not known before run time
  auto present = [&](size_t i) {
    return ctx.has_input(i) && !(ctx.input(i).shape && shape_is_known(*ctx.input(i).shape) &&
                                 element_count(shape_dims(*ctx.input(i).shape)) == 0);
  };
  if (scales_slot < 0) {
    scales.emplace();
    for (float s : n.attr_floats("scales")) scales->push_back(s);
  } else {
    const size_t si = static_cast<size_t>(scales_slot);
    if (present(si)) {
      if (ctx.input(si).dtype != DataType::Float32 && ctx.input(si).dtype != DataType::Float64)
        ctx.fail("input " + std::to_string(si) + " '" + n.inputs[si] + "' (scales) must be float32 (or float64)");
      if (const Tensor* t = ctx.input_constant(si)) {
        scales.emplace();
        for (int64_t i = 0; i < t->numel(); ++i) scales->push_back(t->get_as_double(i));
      } else {
        open = true;
      }
    }
    if (n.op_type != "Upsample" && present(si + 1)) {
      if (ctx.input(si + 1).dtype != DataType::Int64)
        ctx.fail("input " + std::to_string(si + 1) + " '" + n.inputs[si + 1] + "' (sizes) must be int64");
      if (scales || open) ctx.fail("'scales' and 'sizes' cannot both be given");
      if (std::optional<std::vector<int64_t>> v = ctx.input_numbers(si + 1))
        sizes = *v;
      else
        open = true;
    }
  }
  if (!scales && !sizes && !open) ctx.fail("one of 'scales' and 'sizes' must be given (non-empty)");
  std::vector<int64_t> in;
  for (const Dim& d : x)
    if (d.known()) in.push_back(d.value);
  if (open || in.size() < x.size()) {
    // Open until the plan specialises: dims with scale 1 keep their size when it is known.
    Shape y;
    for (size_t d = 0; d < x.size(); ++d) {
      const bool unit = scales && m.axes.empty() && d < scales->size() && (*scales)[d] == 1.0;
      y.push_back(unit ? x[d] : Dim{});
    }
    return y;
  }
  const ResizePlan p = resize_plan(m, in, scales, sizes, ctx.where());
  return shape_of(p.out);
}

void resize_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  const int scales_slot = n.op_type == "Upsample" ? (n.has_attr("scales") ? -1 : 1) : 2;
  ctx.set_output(0, ctx.input(0).dtype, resize_output_shape(ctx, 0, scales_slot));
}

// ResizeGrad(dY, X, roi, scales, sizes) -> dX (like X); dY must have the forward's output shape.
void resize_grad_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  require_float(ctx, 0);
  require_same_dtype(ctx, 0, 1);
  const Shape y = resize_output_shape(ctx, 1, 3);
  const ValueInfo& dy = ctx.input(0);
  bool agree = dy.shape && dy.shape->size() == y.size();
  for (size_t i = 0; agree && i < y.size(); ++i)
    agree = !(*dy.shape)[i].known() || !y[i].known() || (*dy.shape)[i].value == y[i].value;
  if (!agree)
    ctx.fail("input 0 '" + n.inputs[0] + "' (dY) has shape " + shape_to_string(dy.shape.value_or(Shape{})) +
             " but the forward Resize's output is " + shape_to_string(y));
  ctx.set_output(0, ctx.input(1));
}

}  // namespace

void register_resize(Registry& r) {
  const std::vector<std::string> attrs{"antialias",
                                       "axes",
                                       "coordinate_transformation_mode",
                                       "cubic_coeff_a",
                                       "exclude_outside",
                                       "extrapolation_value",
                                       "keep_aspect_ratio_policy",
                                       "mode",
                                       "nearest_mode"};
  OpSchema s;
  s.op_type = "Resize";
  s.min_inputs = 1;
  s.max_inputs = 4;
  s.since_version = 11;
  s.infer = resize_infer;
  s.attributes = attrs;
  r.schemas.add(s);
  r.kernels.add("reference", "", "Resize", resize_loops::forward_kernel<false>);

  OpSchema up;
  up.op_type = "Upsample";
  up.min_inputs = 1;
  up.max_inputs = 2;
  up.since_version = 7;
  up.infer = resize_infer;
  up.attributes = {"mode", "scales"};
  r.schemas.add(std::move(up));
  r.kernels.add("reference", "", "Upsample", resize_loops::forward_kernel<false>);

  OpSchema grad;
  grad.domain = kTrainrtDomain;
  grad.op_type = "ResizeGrad";
  grad.min_inputs = 2;
  grad.max_inputs = 5;
  grad.infer = resize_grad_infer;
  grad.attributes = attrs;
  r.schemas.add(std::move(grad));
  r.kernels.add("reference", kTrainrtDomain, "ResizeGrad", resize_loops::backward_kernel<false>);
}

}  // namespace trainrt
