// BatchNormalization and LayerNormalization: schemas, shape rules, FLOP rules, reference kernels.
//
//   x: N,C,spatial...   scale, B, input_mean, input_var: C   ->   Y: like x
//   Y = (x - m) / sqrt(v + epsilon) * scale + B,  per channel c
//
// Inference: m, v = input_mean, input_var.
// Training: m, v = mean and biased (population) variance of x over N and spatial
//   dims, exactly as ONNX's reference implementation; running statistics are
//   running = input * momentum + current * (1 - momentum) for both mean and var.
//
// The node trains when any of these holds:
//   - training_mode = 1 (opset >= 14; outputs Y, running_mean, running_var),
//   - an output besides Y is requested (the opset 9..13 form that PyTorch 1.13
//     writes at opset 13: Y, mean, var, saved_mean, saved_var, where mean/var are the
//     updated running statistics, saved_mean the batch mean and saved_var the batch
//     biased variance, not its inverse square root),
//   - the executor runs in training mode (KernelContext::training; only Y is written
//     when no other output is requested).
// At opset >= 14 extra outputs need training_mode = 1 (as ONNX says), and the
// 4th/5th outputs do not exist. The opset 7/8 attribute spatial is accepted only as 1.
// Outputs 5 and 6 (saved_mean, saved_var) are trainrt's own, written in the training
// graph only (autodiff/rules_norm.cpp's prepare adds them; ONNX has no such outputs, an
// exported model never carries them): the batch mean and biased batch variance, in X's
// dtype (fp32 in every fp32/bf16/fp16 graph: stored values stay fp32), which the
// BatchNormalizationGrad reads instead of recomputing them. Variance, not its inverse
// square root: oneDNN's backward takes the variance, and it equals ONNX's saved_var.
// FLOPs: 2 per element for inference (a folded multiply-add), 6 per element when
// training (adds 1 for the mean and 3 for the variance).
//
// BatchNormalizationGrad (ai.trainrt), the backward of the training form:
//   (dY: like X, X: N,C,spatial..., scale: C, [saved_mean: C, saved_var: C],
//    [relu_y: like X]; epsilon) -> (dX: like X, dScale: C, dBias: C)
// relu_y (input 5, put there by the training fusion fuse_relu_grad_into_bn_grad): dY is
// first masked by the ReLU's gradient, relu_y > 0 ? dY : 0, exactly as the ReluGrad node
// it replaces (a select, no arithmetic: the same bits on every backend), so the fused node
// reads dY once instead of the ReluGrad writing and the backward reading a masked copy.
// saved_mean/saved_var are the forward's outputs 5/6 (the batch mean and biased variance
// the training forward normalised with); given both, the backward reads them and makes
// one pass over X and dY for the sums and one for dX. Without them (the older form) it
// recomputes them from X. Every output is optional.
//
// LayerNormalization (opset 17):
//   X: d0..d(r-1), Scale, B (optional): broadcast to the normalized shape d(axis)..d(r-1)
//   -> Y: like X, Mean, InvStdDev (optional): d0..d(axis-1),1,...,1
//   each row (the elements of X sharing d0..d(axis-1)) normalised over its D elements:
//   mean = sum(x)/D, var = sum((x-mean)^2)/D, r = 1/sqrt(var+epsilon), Y = (x-mean)*r*Scale + B
//   axis may be negative (counted from the end); stash_type must be 1 (float: the
//   statistics are computed in double and stored in X's type, float64 for a float64 X).
// LayerNormalizationGrad (ai.trainrt), its backward:
//   (dY: like X, X, Scale; axis, epsilon) -> (dX: like X, dScale, dBias: the normalized shape)
//   per row, xh = (x-mean)*r, g = dY*Scale:  dX = r*(g - mean(g) - xh*mean(g*xh));
//   dScale = sum over rows of dY*xh, dBias = sum over rows of dY (the rule sums them
//   further to Scale's / B's shape when those broadcast). Statistics are recomputed from X.
#include <cmath>
#include <cstdlib>
#include <memory>
#include <new>
#include <string>

#include "ops/core/batchnorm_stats.h"
#include "ops/core/common.h"
#include "ops/core/register_all.h"
#include "ops/norm_loops.h"

namespace trainrt {

namespace {

constexpr const char* kParamNames[] = {"X", "scale", "B", "input_mean", "input_var"};
constexpr size_t kBatchNormOutputs = 7;  // Y, running mean/var, ONNX's saved mean/var, trainrt's saved mean/var

bool node_trains(const Node& n, bool executor_training) {
  if (executor_training || n.attr_int("training_mode", 0) == 1) return true;
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (n.has_output(i)) return true;
  return false;
}

void batchnorm_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  const DataType t = require_float(ctx, 0);
  const int64_t opset = ctx.graph().opset("");
  const int64_t rank = ctx.input_rank(0);
  if (rank < 2)
    ctx.fail("input 0 '" + n.inputs[0] + "' must have rank >= 2 (N,C,...), got rank " + std::to_string(rank));
  if (n.has_attr("spatial") && n.attr_int("spatial", 1) != 1)
    ctx.fail("attribute 'spatial' " + std::to_string(n.attr_int("spatial", 1)) +
             " (per-activation statistics) is not supported; only spatial=1");
  const int64_t training_mode = n.attr_int("training_mode", 0);
  if (training_mode != 0 && training_mode != 1)
    ctx.fail("attribute 'training_mode' must be 0 or 1, got " + std::to_string(training_mode));
  if (n.has_attr("training_mode") && opset < 14)
    ctx.fail("attribute 'training_mode' exists from opset 14, the model imports opset " + std::to_string(opset));
  const float eps = n.attr_float("epsilon", 1e-5f);
  if (!(eps >= 0)) ctx.fail("attribute 'epsilon' must be >= 0, got " + std::to_string(eps));
  const float momentum = n.attr_float("momentum", 0.9f);
  if (!std::isfinite(momentum)) ctx.fail("attribute 'momentum' must be finite, got " + std::to_string(momentum));
  if (opset >= 14) {
    if (n.has_output(3) || n.has_output(4))
      ctx.fail("has " + std::to_string(n.output_count()) + " outputs; at opset " + std::to_string(opset) +
               " BatchNormalization has at most 3 (Y, running_mean, running_var)");
    if (n.output_count() > 1 && training_mode != 1)
      ctx.fail("outputs running_mean/running_var are only defined with attribute 'training_mode' = 1");
  }
  const Shape& x = *ctx.input(0).shape;
  for (size_t i = 1; i < 5; ++i) {
    require_same_dtype(ctx, 0, i);
    if (ctx.input_rank(i) != 1)
      ctx.fail("input " + std::to_string(i) + " '" + n.inputs[i] + "' (" + kParamNames[i] +
               ") must have rank 1, got rank " + std::to_string(ctx.input_rank(i)));
    const Dim& c = (*ctx.input(i).shape)[0];
    if (c.known() && x[1].known() && c.value != x[1].value)
      ctx.fail("input " + std::to_string(i) + " '" + n.inputs[i] + "' (" + kParamNames[i] + ") has " +
               std::to_string(c.value) + " values, expected " + std::to_string(x[1].value) + " (channels of X)");
  }
  ctx.set_output(0, t, x);
  for (size_t i = 1; i < kBatchNormOutputs; ++i) ctx.set_output(i, t, Shape{x[1]});
}

double batchnorm_flops(const Graph& g, const Node& n) {
  const ValueInfo* x = g.find_info(n.inputs[0]);
  if (!x || !x->shape || !shape_is_known(*x->shape)) return 0;
  const double count = static_cast<double>(element_count(shape_dims(*x->shape)));
  return (node_trains(n, false) ? 6 : 2) * count;
}

// x: N,C,S (S = product of spatial dims); scale, bias, mean, var: C.
// out[1..6] (any may be null): running mean, running var, batch mean, batch var, and
// again batch mean, batch var (the saved statistics).
template <typename T>
void batchnorm_reference(const Tensor& x, const Tensor& scale, const Tensor& bias, const Tensor& mean,
                         const Tensor& var, Tensor& y, Tensor* const out[kBatchNormOutputs], bool training, double eps,
                         double momentum) {
  const int64_t N = x.dims()[0], C = x.dims()[1];
  const int64_t S = N * C == 0 ? 0 : x.numel() / (N * C);
  const T* xp = x.data<T>();
  T* yp = y.data<T>();
  auto data = [&](size_t i) { return out[i] ? out[i]->data<T>() : nullptr; };
  const batchnorm_stats::ChannelOutputs<T> outs{data(1), data(2), data(3), data(4), data(5), data(6)};
  for (int64_t c = 0; c < C; ++c) {
    auto at = [&](int64_t n, int64_t s) { return (n * C + c) * S + s; };
    double m = static_cast<double>(mean.data<T>()[c]);
    double v = static_cast<double>(var.data<T>()[c]);
    if (training) {
      const double count = static_cast<double>(N * S);
      double sum = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) sum += static_cast<double>(xp[at(n, s)]);
      const double batch_mean = sum / count;
      double sq = 0;  // two passes: exact enough for an oracle, no cancellation
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) {
          const double d = static_cast<double>(xp[at(n, s)]) - batch_mean;
          sq += d * d;
        }
      const double batch_var = sq / count;
      batchnorm_stats::write_channel(outs, c, m, v, batch_mean, batch_var, momentum);
      m = batch_mean;
      v = batch_var;
    }
    const double a = static_cast<double>(scale.data<T>()[c]) / std::sqrt(v + eps);
    const double b = static_cast<double>(bias.data<T>()[c]);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s)
        yp[at(n, s)] = static_cast<T>(batchnorm_stats::apply(static_cast<double>(xp[at(n, s)]), m, a, b));
  }
}

void batchnorm_kernel(KernelContext& ctx) {
  const Node& n = ctx.node;
  const bool training = node_trains(n, ctx.training);
  Tensor* out[kBatchNormOutputs] = {};
  for (size_t i = 1; i < kBatchNormOutputs; ++i) out[i] = ctx.has_output(i) ? &ctx.out(i) : nullptr;
  const double eps = n.attr_float("epsilon", 1e-5f);
  const double momentum = n.attr_float("momentum", 0.9f);
  dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
    using T = decltype(tag);
    batchnorm_reference<T>(ctx.in(0), ctx.in(1), ctx.in(2), ctx.in(3), ctx.in(4), ctx.out(0), out, training, eps,
                           momentum);
  });
}

// The backward ops' input 0 (dY) must have the shape x of input 1 (X) where both are known.
void require_dy_shape_of_x(const InferContext& ctx, const Shape& x) {
  const Node& n = ctx.node();
  const ValueInfo& dy = ctx.input(0);
  bool same = dy.shape && dy.shape->size() == x.size();
  for (size_t i = 0; same && i < x.size(); ++i)
    same = !((*dy.shape)[i].known() && x[i].known() && (*dy.shape)[i].value != x[i].value);
  if (!same)
    ctx.fail("input 0 '" + n.inputs[0] + "' (dY) has shape " + shape_to_string(dy.shape.value_or(Shape{})) +
             " but X '" + n.inputs[1] + "' is " + shape_to_string(x) + " (dY must have X's shape)");
}

// BatchNormalizationGrad(dY, X, scale, [saved_mean, saved_var], [relu_y]) -> (dX, dScale,
// dBias); each output optional, the saved statistics both or neither, relu_y like X.
void batchnorm_grad_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  const DataType t = require_float(ctx, 1);
  require_same_dtype(ctx, 0, 1);
  require_same_dtype(ctx, 2, 1);
  const float eps = n.attr_float("epsilon", 1e-5f);
  if (!(eps >= 0)) ctx.fail("attribute 'epsilon' must be >= 0, got " + std::to_string(eps));
  const int64_t rank = ctx.input_rank(1);
  if (rank < 2)
    ctx.fail("input 1 '" + n.inputs[1] + "' (X) must have rank >= 2 (N,C,...), got rank " + std::to_string(rank));
  const Shape& x = *ctx.input(1).shape;
  require_dy_shape_of_x(ctx, x);
  if (ctx.input_rank(2) != 1)
    ctx.fail("input 2 '" + n.inputs[2] + "' (scale) must have rank 1, got rank " + std::to_string(ctx.input_rank(2)));
  const Dim& c = (*ctx.input(2).shape)[0];
  if (c.known() && x[1].known() && c.value != x[1].value)
    ctx.fail("input 2 '" + n.inputs[2] + "' (scale) has " + std::to_string(c.value) + " values, expected " +
             std::to_string(x[1].value) + " (channels of X)");
  if (ctx.has_input(3) != ctx.has_input(4))
    ctx.fail("has only one of inputs 3 (saved_mean) and 4 (saved_var); give both or neither");
  for (size_t i : {size_t{3}, size_t{4}}) {
    if (!ctx.has_input(i)) continue;
    const char* what = i == 3 ? "saved_mean" : "saved_var";
    require_same_dtype(ctx, i, 1);
    if (ctx.input_rank(i) != 1)
      ctx.fail("input " + std::to_string(i) + " '" + n.inputs[i] + "' (" + what + ") must have rank 1, got rank " +
               std::to_string(ctx.input_rank(i)));
    const Dim& ci = (*ctx.input(i).shape)[0];
    if (ci.known() && x[1].known() && ci.value != x[1].value)
      ctx.fail("input " + std::to_string(i) + " '" + n.inputs[i] + "' (" + what + ") has " + std::to_string(ci.value) +
               " values, expected " + std::to_string(x[1].value) + " (channels of X)");
  }
  if (ctx.has_input(5)) {
    require_same_dtype(ctx, 5, 1);
    const Shape& y = *ctx.input(5).shape;
    bool same = y.size() == x.size();
    for (size_t d = 0; same && d < y.size(); ++d) same = !(y[d].known() && x[d].known() && y[d].value != x[d].value);
    if (!same)
      ctx.fail("input 5 '" + n.inputs[5] + "' (relu_y) has shape " + shape_to_string(y) + " but X '" + n.inputs[1] +
               "' is " + shape_to_string(x) + " (relu_y must have X's shape)");
  }
  ctx.set_output(0, ctx.input(1));
  ctx.set_output(1, t, Shape{x[1]});
  ctx.set_output(2, t, Shape{x[1]});
}

// dy, x: N,C,S; scale: C -> dx: N,C,S, dscale, dbias: C (any may be null).
// With the batch statistics of the training forward, per channel over M = N*S elements:
//   mean = sum(x)/M, var = sum((x-mean)^2)/M (biased), r = 1/sqrt(var+eps), xh = (x-mean)*r
//   dbias = sum(dy), dscale = sum(dy*xh)
//   dx = scale*r * (dy - dbias/M - xh*dscale/M)
// (the last two terms are the gradient through mean and var).
// saved_mean/saved_var (both or neither null): the forward's statistics, used as given.
template <typename T>
void batchnorm_grad_reference(const Tensor& dy, const Tensor& x, const Tensor& scale, const Tensor* saved_mean,
                              const Tensor* saved_var, Tensor* dx, Tensor* dscale, Tensor* dbias, double eps) {
  const int64_t N = x.dims()[0], C = x.dims()[1];
  const int64_t S = N * C == 0 ? 0 : x.numel() / (N * C);
  const double M = static_cast<double>(N * S);
  const T* xp = x.data<T>();
  const T* dyp = dy.data<T>();
  for (int64_t c = 0; c < C; ++c) {
    auto at = [&](int64_t n, int64_t s) { return (n * C + c) * S + s; };
    double mean = 0, var = 0;
    if (saved_mean) {
      mean = static_cast<double>(saved_mean->data<T>()[c]);
      var = static_cast<double>(saved_var->data<T>()[c]);
    } else {
      double sum = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) sum += static_cast<double>(xp[at(n, s)]);
      mean = sum / M;
      double sq = 0;
      for (int64_t n = 0; n < N; ++n)
        for (int64_t s = 0; s < S; ++s) {
          const double d = static_cast<double>(xp[at(n, s)]) - mean;
          sq += d * d;
        }
      var = sq / M;
    }
    const double r = 1.0 / std::sqrt(var + eps);
    double g_bias = 0, g_scale = 0;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s) {
        const double g = static_cast<double>(dyp[at(n, s)]);
        g_bias += g;
        g_scale += g * (static_cast<double>(xp[at(n, s)]) - mean) * r;
      }
    if (dbias) dbias->data<T>()[c] = static_cast<T>(g_bias);
    if (dscale) dscale->data<T>()[c] = static_cast<T>(g_scale);
    if (!dx) continue;
    const double k = static_cast<double>(scale.data<T>()[c]) * r, bias_term = g_bias / M, x_term = r * g_scale / M;
    T* dxp = dx->data<T>();
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < S; ++s)
        dxp[at(n, s)] = static_cast<T>(batchnorm_stats::grad(
            static_cast<double>(dyp[at(n, s)]), static_cast<double>(xp[at(n, s)]), mean, k, bias_term, x_term));
  }
}

void batchnorm_grad_kernel(KernelContext& ctx) {
  Tensor* out[3] = {};
  for (size_t i = 0; i < 3; ++i) out[i] = ctx.has_output(i) ? &ctx.out(i) : nullptr;
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const bool saved = ctx.has_input(3) && ctx.has_input(4);
  dispatch_float(ctx.in(1).dtype(), [&](auto tag) {
    using T = decltype(tag);
    batchnorm_grad_reference<T>(ctx.in(0), ctx.in(1), ctx.in(2), saved ? &ctx.in(3) : nullptr,
                                saved ? &ctx.in(4) : nullptr, out[0], out[1], out[2], eps);
  });
}

}  // namespace

Kernel with_dy_relu(Kernel bn_grad, Kernel relu_grad) {
  ReluGradCall relu = relu_grad_call(std::move(relu_grad), "BatchNormalizationGrad's ReLU gradient (relu_y)");
  return [bn_grad = std::move(bn_grad), relu = std::move(relu)](KernelContext& ctx) {
    if (!ctx.has_input(5)) return bn_grad(ctx);
    const Tensor& dy = ctx.in(0);
    // The masked copy lives in a buffer of this thread's, grown when needed and reused:
    // a fresh activation-sized allocation per call would cost page faults every step.
    thread_local std::shared_ptr<std::byte[]> scratch;
    thread_local size_t scratch_bytes = 0;
    if (scratch_bytes < dy.nbytes()) {
      scratch_bytes = (dy.nbytes() + 63) / 64 * 64;
      scratch = std::shared_ptr<std::byte[]>(static_cast<std::byte*>(std::aligned_alloc(64, scratch_bytes)), std::free);
      if (!scratch) throw std::bad_alloc();
    }
    Tensor masked(dy.dtype(), dy.dims(), scratch);
    masked.set_layout(dy.layout());  // dY and relu_y share a layout: ReluGrad is elementwise over them
    relu(ctx, dy, ctx.in(5), masked);
    KernelContext c = ctx;
    c.inputs[0] = &masked;
    c.inputs.resize(5);
    bn_grad(c);
  };
}

namespace {

double batchnorm_grad_flops(const Graph& g, const Node& n) {
  const ValueInfo* x = g.find_info(n.inputs[1]);
  if (!x || !x->shape || !shape_is_known(*x->shape)) return 0;
  // per element: statistics 4 (unless saved), dScale/dBias sums 3, dX 5
  const bool saved = n.has_input(3) && n.has_input(4);
  return (saved ? 8 : 12) * static_cast<double>(element_count(shape_dims(*x->shape)));
}

// ---- LayerNormalization -------------------------------------------------------------

// The axis attribute, made non-negative for rank `rank`.
int64_t layernorm_axis(const InferContext& ctx, int64_t rank) {
  const int64_t axis = ctx.node().attr_int("axis", -1);
  if (axis < -rank || axis >= rank)
    ctx.fail("attribute 'axis' " + std::to_string(axis) + " is out of range for rank " + std::to_string(rank));
  return axis < 0 ? axis + rank : axis;
}

// Input i (Scale or B) must broadcast one way to x's dims from `axis` on.
void require_broadcasts_to_normalized(const InferContext& ctx, size_t i, const Shape& x, int64_t axis,
                                      const char* what) {
  const Node& n = ctx.node();
  const Shape& s = *ctx.input(i).shape;
  const size_t rank = x.size(), norm_rank = rank - static_cast<size_t>(axis);
  bool ok = s.size() <= norm_rank;
  for (size_t k = 0; ok && k < s.size(); ++k) {
    const Dim& sd = s[s.size() - 1 - k];
    const Dim& xd = x[rank - 1 - k];
    ok = !(sd.known() && sd.value != 1 && xd.known() && sd.value != xd.value);
  }
  if (!ok)
    ctx.fail("input " + std::to_string(i) + " '" + n.inputs[i] + "' (" + what + ") " + shape_to_string(s) +
             " does not broadcast to the normalized dims " + shape_to_string(Shape(x.begin() + axis, x.end())) +
             " of X " + shape_to_string(x) + " (axis " + std::to_string(axis) + ")");
}

void layernorm_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  const DataType t = require_float(ctx, 0);
  const int64_t rank = ctx.input_rank(0);
  if (rank < 1) ctx.fail("input 0 '" + n.inputs[0] + "' (X) must have rank >= 1, got a scalar");
  const int64_t axis = layernorm_axis(ctx, rank);
  const float eps = n.attr_float("epsilon", 1e-5f);
  if (!(eps >= 0)) ctx.fail("attribute 'epsilon' must be >= 0, got " + std::to_string(eps));
  const int64_t stash = n.attr_int("stash_type", 1);
  if (stash != 1) ctx.fail("attribute 'stash_type' " + std::to_string(stash) + " is not supported; only 1 (float)");
  const Shape& x = *ctx.input(0).shape;
  require_same_dtype(ctx, 0, 1);
  require_broadcasts_to_normalized(ctx, 1, x, axis, "Scale");
  if (ctx.has_input(2)) {
    require_same_dtype(ctx, 0, 2);
    require_broadcasts_to_normalized(ctx, 2, x, axis, "B");
  }
  ctx.set_output(0, t, x);
  Shape stats(x.begin(), x.begin() + axis);
  stats.resize(x.size(), Dim::of(1));
  for (size_t i = 1; i < 3; ++i) ctx.set_output(i, t, stats);
}

double layernorm_flops(const Graph& g, const Node& n) {
  const ValueInfo* x = g.find_info(n.inputs[0]);
  if (!x || !x->shape || !shape_is_known(*x->shape)) return 0;
  // per element: mean 1, variance 3, normalise 2, scale and shift 2
  return 8 * static_cast<double>(element_count(shape_dims(*x->shape)));
}

// X seen as rows x D (D = product of the dims from axis on), and where each of the D
// normalized positions reads a Scale/B that broadcasts to them.
struct LayerNormView {
  int64_t rows = 0, D = 0;
  std::vector<int64_t> scale_at, bias_at;  // size D
};

std::vector<int64_t> broadcast_offsets(const std::vector<int64_t>& norm, const std::vector<int64_t>& p) {
  const size_t r = norm.size();
  std::vector<int64_t> stride(r, 0);
  for (size_t k = 0, s = 1; k < p.size(); ++k) {  // p right-aligned to norm; a dim of 1 broadcasts
    const int64_t e = p[p.size() - 1 - k];
    stride[r - 1 - k] = e == 1 ? 0 : static_cast<int64_t>(s);
    s *= static_cast<size_t>(e);
  }
  std::vector<int64_t> at(static_cast<size_t>(element_count(norm)));
  for (size_t j = 0; j < at.size(); ++j) {
    int64_t rest = static_cast<int64_t>(j), off = 0;
    for (size_t k = r; k-- > 0;) {
      off += (rest % norm[k]) * stride[k];
      rest /= norm[k];
    }
    at[j] = off;
  }
  return at;
}

LayerNormView layernorm_view(const Node& n, const Tensor& x, const Tensor& scale, const Tensor* bias) {
  const int64_t rank = x.rank();
  int64_t axis = n.attr_int("axis", -1);
  if (axis < 0) axis += rank;
  const std::vector<int64_t> norm(x.dims().begin() + axis, x.dims().end());
  LayerNormView v;
  v.D = element_count(norm);
  v.rows = v.D == 0 ? 0 : x.numel() / v.D;
  v.scale_at = broadcast_offsets(norm, scale.dims());
  if (bias) v.bias_at = broadcast_offsets(norm, bias->dims());
  return v;
}

// Mean and 1/sqrt(var+eps) of row xr (D values), both passes in double.
template <typename T>
std::pair<double, double> row_stats(const T* xr, int64_t D, double eps) {
  const std::pair<double, double> mv = norm_loops::row_moments(xr, D);
  return {mv.first, 1.0 / std::sqrt(mv.second + eps)};
}

template <typename T>
void layernorm_reference(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  const Tensor* bias = ctx.has_input(2) ? &ctx.in(2) : nullptr;
  const LayerNormView v = layernorm_view(ctx.node, x, ctx.in(1), bias);
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const T* s = ctx.in(1).data<T>();
  const T* b = bias ? bias->data<T>() : nullptr;
  T* mean_out = ctx.has_output(1) ? ctx.out(1).data<T>() : nullptr;
  T* inv_out = ctx.has_output(2) ? ctx.out(2).data<T>() : nullptr;
  for (int64_t i = 0; i < v.rows; ++i) {
    const T* xr = x.data<T>() + i * v.D;
    T* yr = ctx.out(0).data<T>() + i * v.D;
    const auto [mean, r] = row_stats(xr, v.D, eps);
    if (mean_out) mean_out[i] = static_cast<T>(mean);
    if (inv_out) inv_out[i] = static_cast<T>(r);
    for (int64_t j = 0; j < v.D; ++j) {
      double y = (static_cast<double>(xr[j]) - mean) * r * static_cast<double>(s[v.scale_at[j]]);
      if (b) y += static_cast<double>(b[v.bias_at[j]]);
      yr[j] = static_cast<T>(y);
    }
  }
}

// LayerNormalizationGrad(dY, X, Scale) -> (dX, dScale, dBias); each output optional.
void layernorm_grad_infer(InferContext& ctx) {
  const Node& n = ctx.node();
  const DataType t = require_float(ctx, 1);
  require_same_dtype(ctx, 0, 1);
  require_same_dtype(ctx, 2, 1);
  const int64_t rank = ctx.input_rank(1);
  if (rank < 1) ctx.fail("input 1 '" + n.inputs[1] + "' (X) must have rank >= 1, got a scalar");
  const int64_t axis = layernorm_axis(ctx, rank);
  const float eps = n.attr_float("epsilon", 1e-5f);
  if (!(eps >= 0)) ctx.fail("attribute 'epsilon' must be >= 0, got " + std::to_string(eps));
  const Shape& x = *ctx.input(1).shape;
  require_dy_shape_of_x(ctx, x);
  require_broadcasts_to_normalized(ctx, 2, x, axis, "Scale");
  ctx.set_output(0, ctx.input(1));
  const Shape norm(x.begin() + axis, x.end());
  ctx.set_output(1, t, norm);
  ctx.set_output(2, t, norm);
}

double layernorm_grad_flops(const Graph& g, const Node& n) {
  const ValueInfo* x = g.find_info(n.inputs[1]);
  if (!x || !x->shape || !shape_is_known(*x->shape)) return 0;
  // per element: statistics 4 (recomputed), dScale/dBias 3, dX 7
  return 14 * static_cast<double>(element_count(shape_dims(*x->shape)));
}

template <typename T>
void layernorm_grad_reference(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  const LayerNormView v = layernorm_view(ctx.node, x, ctx.in(2), nullptr);
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const T* s = ctx.in(2).data<T>();
  T* dx = ctx.has_output(0) ? ctx.out(0).data<T>() : nullptr;
  std::vector<double> g_scale(static_cast<size_t>(v.D)), g_bias(static_cast<size_t>(v.D)), g(static_cast<size_t>(v.D));
  for (int64_t i = 0; i < v.rows; ++i) {
    const T* xr = x.data<T>() + i * v.D;
    const T* dyr = dy.data<T>() + i * v.D;
    const auto [mean, r] = row_stats(xr, v.D, eps);
    double g_mean = 0, gxh_mean = 0;
    for (int64_t j = 0; j < v.D; ++j) {
      const size_t k = static_cast<size_t>(j);
      const double xh = (static_cast<double>(xr[j]) - mean) * r;
      const double d = static_cast<double>(dyr[j]);
      g_scale[k] += d * xh;
      g_bias[k] += d;
      g[k] = d * static_cast<double>(s[v.scale_at[k]]);
      g_mean += g[k];
      gxh_mean += g[k] * xh;
    }
    if (!dx) continue;
    g_mean /= static_cast<double>(v.D);
    gxh_mean /= static_cast<double>(v.D);
    for (int64_t j = 0; j < v.D; ++j) {
      const double xh = (static_cast<double>(xr[j]) - mean) * r;
      dx[i * v.D + j] = static_cast<T>(r * (g[static_cast<size_t>(j)] - g_mean - xh * gxh_mean));
    }
  }
  for (size_t o : {size_t{1}, size_t{2}}) {
    if (!ctx.has_output(o)) continue;
    const std::vector<double>& from = o == 1 ? g_scale : g_bias;
    T* to = ctx.out(o).data<T>();
    for (size_t k = 0; k < from.size(); ++k) to[k] = static_cast<T>(from[k]);
  }
}

}  // namespace

void register_norm(Registry& r) {
  OpSchema s;
  s.op_type = "BatchNormalization";
  s.min_inputs = s.max_inputs = 5;
  s.min_outputs = 1;
  s.max_outputs = kBatchNormOutputs;
  s.since_version = 9;
  s.infer = batchnorm_infer;
  s.flops = batchnorm_flops;
  s.attributes = {"epsilon", "momentum", "training_mode", "spatial"};
  r.schemas.add(std::move(s));
  r.kernels.add("reference", "", "BatchNormalization", batchnorm_kernel);

  OpSchema grad;
  grad.domain = kTrainrtDomain;
  grad.op_type = "BatchNormalizationGrad";
  grad.min_inputs = 3;
  grad.max_inputs = 6;
  grad.min_outputs = 1;
  grad.max_outputs = 3;
  grad.infer = batchnorm_grad_infer;
  grad.flops = batchnorm_grad_flops;
  grad.attributes = {"epsilon"};
  r.schemas.add(std::move(grad));
  const Kernel* relu_grad = r.kernels.find("reference", kTrainrtDomain, "ReluGrad");
  if (!relu_grad) throw_internal("register_norm", "ReluGrad must be registered first");
  r.kernels.add("reference", kTrainrtDomain, "BatchNormalizationGrad", with_dy_relu(batchnorm_grad_kernel, *relu_grad));

  OpSchema ln;
  ln.op_type = "LayerNormalization";
  ln.min_inputs = 2;
  ln.max_inputs = 3;
  ln.min_outputs = 1;
  ln.max_outputs = 3;
  ln.since_version = 17;
  ln.infer = layernorm_infer;
  ln.flops = layernorm_flops;
  ln.attributes = {"axis", "epsilon", "stash_type"};
  r.schemas.add(std::move(ln));
  r.kernels.add("reference", "", "LayerNormalization", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { layernorm_reference<decltype(tag)>(ctx); });
  });

  OpSchema ln_grad;
  ln_grad.domain = kTrainrtDomain;
  ln_grad.op_type = "LayerNormalizationGrad";
  ln_grad.min_inputs = ln_grad.max_inputs = 3;
  ln_grad.min_outputs = 1;
  ln_grad.max_outputs = 3;
  ln_grad.infer = layernorm_grad_infer;
  ln_grad.flops = layernorm_grad_flops;
  ln_grad.attributes = {"axis", "epsilon"};
  r.schemas.add(std::move(ln_grad));
  r.kernels.add("reference", kTrainrtDomain, "LayerNormalizationGrad", [](KernelContext& ctx) {
    dispatch_float(ctx.in(1).dtype(), [&](auto tag) { layernorm_grad_reference<decltype(tag)>(ctx); });
  });
}

}  // namespace trainrt
