// BatchNormalization (fp32) on oneDNN's batch_normalization_forward; LayerNormalization and its
// backward (below) on layer_normalization_forward/_backward.
//
//   x: N,C,spatial...   scale, B, input_mean, input_var: C   ->   Y: like x
//   Y = (x - m) / sqrt(v + epsilon) * scale + B
//
// Semantics are the reference kernel's (ops/norm.cpp): the node trains when the
// executor trains, training_mode = 1, or any output besides Y is requested. Then m, v
// are the batch mean and biased variance, computed here by batch_stats (two
// passes summed in double, as the reference and the backward kernel compute them, not
// oneDNN's fp32 statistics, whose rounding on a nearly constant channel is amplified
// by 1/sqrt(v + eps) and can flip a following Relu), and the running statistics are
// updated here, as oneDNN does not:
//   running = input * momentum + current * (1 - momentum)
// outputs 1/2 are the running mean/var, 3/4 (opset <= 13 form) and 5/6 (trainrt's
// saved statistics, read by BatchNormalizationGrad) the batch mean/var, all of one
// batch_stats call, so the backward sees the very bits the forward normalised with.
// Every precision runs this fp32 kernel: under --precision bf16/fp16 only the
// convolutions and matrix products round their inputs (KernelContext::math), BN's
// stored values and arithmetic stay fp32.
// Y is always normalised with given statistics (use_global_stats): the batch's when
// training, input_mean/input_var in inference, with Relu after it for fuse_relu (the
// fused BatchNormalizationRelu). X and Y share one layout (runtime/layout.h): row-major
// and Blocked16c run the own apply loop (apply_rows, below: oneDNN's formula, the same
// bits in both layouts), any other the oneDNN primitive (a workspace, if it asks for
// one, is scratch: the backward is ReluGrad on Y).
#include "ops/norm_cpu.h"

#include <algorithm>
#include <cmath>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <oneapi/dnnl/dnnl.hpp>
#include <utility>
#include <vector>

#include "graph/error.h"
#include "ops/core/batchnorm_stats.h"
#include "ops/core/common.h"
#include "ops/core/kernel_facts.h"
#include "ops/core/parallel.h"
#include "ops/core/register_all.h"
#include "ops/core/unary_math.h"
#include "ops/norm_loops.h"
#include "ops/onednn/dnnl_util.h"
#include "ops/onednn/dropout_simd.h"

namespace trainrt {
namespace du = dnnl_util;

namespace {

struct NormPlan {
  bool use_reference = false;
  dnnl::primitive prim;
  du::Md data, channel, workspace;
};

bool node_trains(const KernelContext& ctx) {
  if (ctx.training || ctx.node.attr_int("training_mode", 0) == 1) return true;
  for (size_t i = 1; i < ctx.node.outputs.size(); ++i)
    if (ctx.node.has_output(i)) return true;
  return false;
}

// x seen as N,C,S with S the product of the spatial dims (oneDNN's 3-D "ncw" case)
// unless it already has 3..5 dims, which oneDNN takes as they are.
std::vector<int64_t> data_dims(const Tensor& x) {
  const std::vector<int64_t>& d = x.dims();
  if (d.size() >= 3 && d.size() <= 5) return d;
  int64_t s = 1;
  for (size_t i = 2; i < d.size(); ++i) s *= d[i];
  return {d[0], d[1], s};
}

// Position s of a row goes to accumulator s % kStatWays; the ways are added in one fixed
// tree. Independent accumulators let the loop run at the adder's throughput instead of
// its latency (a single double sum was 80 % of a training BatchNormalization's time).
// sums[j] += the row's sum for each of its `lanes` channels (Plain: 1, positions adjacent;
// Blocked16c: 16 channels side by side), the same bits for a channel in either layout.
constexpr int64_t kStatWays = 8;
template <int64_t kLanes, typename F>
void add_row_sums(int64_t S, F&& value, double* sums) {
  auto tree = [](const double* a, int64_t step) {
    return ((a[0] + a[step]) + (a[2 * step] + a[3 * step])) +
           ((a[4 * step] + a[5 * step]) + (a[6 * step] + a[7 * step]));
  };
  if constexpr (kLanes == 1) {  // the ways side by side: the loop vectorises over them
    double a[kStatWays] = {};
    int64_t s = 0;
    for (; s + kStatWays <= S; s += kStatWays)
      for (int64_t k = 0; k < kStatWays; ++k) a[k] += value(s + k, 0);
    for (int64_t k = 0; s < S; ++s, ++k) a[k] += value(s, 0);
    sums[0] += tree(a, 1);
  } else {
    // The lanes side by side: the loop vectorises over them (kLanes a constant: with a
    // run-time count GCC's -O2 kept it scalar, 4.7 cycles a value on the AVX-512 Xeon).
    double a[kStatWays][kLanes] = {};
    int64_t s = 0;
    for (; s + kStatWays <= S; s += kStatWays)
      for (int64_t k = 0; k < kStatWays; ++k)
        for (int64_t j = 0; j < kLanes; ++j) a[k][j] += value((s + k) * kLanes + j, j);
    for (int64_t k = 0; s < S; ++s, ++k)
      for (int64_t j = 0; j < kLanes; ++j) a[k][j] += value(s * kLanes + j, j);
    for (int64_t j = 0; j < kLanes; ++j) sums[j] += tree(&a[0][j], kLanes);
  }
}

// x: N,C,S -> mean, var: C (biased variance), two passes per channel, each channel
// summed in the same order (n, then s in kStatWays ways) whatever the layout, so both
// layouts give the same bits. Blocked16c: 16 channels at once, interleaved (channel
// blocks in parallel).
void batch_stats(const Tensor& x, float* mean, float* var) {
  const int64_t N = x.dims()[0], C = x.dims()[1], S = x.numel() / (N * C);
  const double count = static_cast<double>(N * S);
  const float* xp = x.data<float>();
  const bool blocked = x.layout() == Layout::Blocked16c;
  const int64_t lanes = blocked ? 16 : 1, groups = C / lanes;
  parallel_ranges(groups, 1, [&](int64_t g0, int64_t g1) {
    for (int64_t g = g0; g < g1; ++g) {
      // Row of image n for this group: lanes channels side by side, S positions.
      auto row = [&](int64_t n) { return xp + (n * groups + g) * S * lanes; };
      double sum[16] = {}, sq[16] = {}, m[16];
      // The row sums with the lane count a constant (add_row_sums).
      auto sums = [&](auto value, double* to) {
        if (blocked)
          add_row_sums<16>(S, value, to);
        else
          add_row_sums<1>(S, value, to);
      };
      for (int64_t n = 0; n < N; ++n) {
        const float* r = row(n);
        sums([r](int64_t i, int64_t) { return static_cast<double>(r[i]); }, sum);
      }
      for (int64_t j = 0; j < lanes; ++j) m[j] = sum[j] / count;
      for (int64_t n = 0; n < N; ++n) {
        const float* r = row(n);
        sums(
            [r, &m](int64_t i, int64_t j) {
              const double d = static_cast<double>(r[i]) - m[j];
              return d * d;
            },
            sq);
      }
      for (int64_t j = 0; j < lanes; ++j) {
        mean[g * lanes + j] = static_cast<float>(m[j]);
        var[g * lanes + j] = static_cast<float>(sq[j] / count);
      }
    }
  });
}

// One row of S positions of one channel (Plain): y = relu?(a * (x - m) + b).
void apply_row_plain(const float* xr, float* yr, int64_t S, float a, float m, float b, bool relu) {
  int64_t i = 0;
#ifdef __SSE2__
  // 4 at a time (GCC's -O2 leaves the loop below scalar): the reference's formula
  // (batchnorm_stats::apply) on GCC's vector arithmetic, ReLU as v <= 0 ? 0 : v (NaN
  // kept, -0 to +0).
  const __m128 a4 = _mm_set1_ps(a), m4 = _mm_set1_ps(m), b4 = _mm_set1_ps(b), zero = _mm_setzero_ps();
  for (; i + 4 <= S; i += 4) {
    __m128 v = batchnorm_stats::apply(_mm_loadu_ps(xr + i), m4, a4, b4);
    if (relu) v = _mm_andnot_ps(_mm_cmple_ps(v, zero), v);
    _mm_storeu_ps(yr + i, v);
  }
#endif
  for (; i < S; ++i) {
    float v = batchnorm_stats::apply(xr[i], m, a, b);
    if (relu && v <= 0.f) v = 0.f;
    yr[i] = v;
  }
}

// One row of S positions of 16 channels side by side (Blocked16c), the same formula
// per channel; a, m, b hold the 16 channels' coefficients.
void apply_row_blocked(const float* xr, float* yr, int64_t S, const float* a, const float* m, const float* b,
                       bool relu) {
#ifdef __SSE2__
  __m128 a4[4], m4[4], b4[4];
  for (int k = 0; k < 4; ++k) {
    a4[k] = _mm_loadu_ps(a + 4 * k);
    m4[k] = _mm_loadu_ps(m + 4 * k);
    b4[k] = _mm_loadu_ps(b + 4 * k);
  }
  const __m128 zero = _mm_setzero_ps();
  for (int64_t s = 0; s < S; ++s)
    for (int k = 0; k < 4; ++k) {
      __m128 v = batchnorm_stats::apply(_mm_loadu_ps(xr + 16 * s + 4 * k), m4[k], a4[k], b4[k]);
      if (relu) v = _mm_andnot_ps(_mm_cmple_ps(v, zero), v);
      _mm_storeu_ps(yr + 16 * s + 4 * k, v);
    }
#else
  for (int64_t s = 0; s < S; ++s)
    for (int l = 0; l < 16; ++l) {
      float v = batchnorm_stats::apply(xr[16 * s + l], m[l], a[l], b[l]);
      if (relu && v <= 0.f) v = 0.f;
      yr[16 * s + l] = v;
    }
#endif
}

// Y = relu?(scale / sqrt(var + eps) * (x - mean) + B) on an N,C,S tensor, row-major or
// Blocked16c, per channel in fp32 as oneDNN's batch_normalization_forward computes it,
// rows (a channel, or 16 side by side) in parallel; with `drop`, the Dropout's mask and
// scale applied to each row while it is in cache, drawn by row-major index. Why: oneDNN
// 2.6 runs the plain (ncsp) layout with its generic C++ loop, a few times slower than
// this one (the training BatchNormalizationRelu was ~9-13% of the Wide ResNet's step on
// AVX2, where activations are row-major); on Blocked16c, with the Dropout fused here
// instead of a pass of its own, the Wide ResNet's BatchNormalizationReluDropout at
// [64,160,28,28] went from 24 to 17-19 ms (AVX-512 Xeon, with the statistics' loops of
// add_row_sums vectorised). Both layouts give the same bits.
void apply_rows(const Tensor& x, const float* scale, const float* shift, const float* mean, const float* var, float eps,
                bool relu, FusedDropout* drop, Tensor& y) {
  const bool blocked = x.layout() == Layout::Blocked16c;
  const int64_t N = x.dims()[0], C = x.dims()[1], S = x.numel() / std::max<int64_t>(1, N * C);
  const int64_t lanes = blocked ? 16 : 1, groups = C / lanes, len = S * lanes;
  std::vector<float> a(static_cast<size_t>(C));
  for (int64_t c = 0; c < C; ++c) a[c] = scale[c] / std::sqrt(var[c] + eps);
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  if (drop) drop->applied = true;
  const dropout_simd::Draw d =
      drop ? dropout_simd::Draw{drop->key, drop->threshold, drop->scale} : dropout_simd::Draw{};
  const dropout_simd::Isa isa = dropout_simd::best();
  parallel_ranges(N * groups, std::max<int64_t>(1, kGrain / std::max<int64_t>(1, len)), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r) {
      const int64_t c = (r % groups) * lanes;
      const float* xr = xp + r * len;
      float* yr = yp + r * len;
      if (blocked)
        apply_row_blocked(xr, yr, S, &a[c], mean + c, shift + c, relu);
      else
        apply_row_plain(xr, yr, S, a[c], mean[c], shift[c], relu);
      if (!drop) continue;
      // Row-major index of lane l at position s: (r * lanes + l) * S + s.
      if (blocked)
        dropout_simd::apply16(isa, yr, yr, nullptr, S, d, r * len, 1, S);
      else
        dropout_simd::apply_plain(yr, yr, nullptr, S, r * S, d, isa);
    }
  });
}

}  // namespace

void batchnorm_forward_dnnl(KernelContext& ctx, bool fuse_relu, FusedDropout* dropout) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  const Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  const bool training = node_trains(ctx);
  const float eps = n.attr_float("epsilon", 1e-5f);
  const float momentum = n.attr_float("momentum", 0.9f);
  const int64_t channels = x.dims().at(1);
  if (x.numel() == 0) return du::run_reference(ctx);  // empty batch: the reference's rules
  std::vector<int64_t> dd = data_dims(x);
  if (y.layout() != x.layout()) return du::run_reference(ctx);  // the primitive takes one data layout
  auto plan = du::cached<NormPlan>(du::key("BatchNormalization", dd, eps, fuse_relu, x.layout()), [&] {
    NormPlan p;
    p.data = x.layout() == Layout::Plain ? du::plain_desc(dd) : du::desc_of(x);
    p.channel = du::plain_desc({channels});
    dnnl::normalization_flags flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    if (fuse_relu) flags = flags | dnnl::normalization_flags::fuse_norm_relu;
    flags = flags | dnnl::normalization_flags::use_global_stats;
    try {
      dnnl::batch_normalization_forward::desc d(dnnl::prop_kind::forward_inference, p.data, eps, flags);
      dnnl::batch_normalization_forward::primitive_desc pd(d, du::attr(), du::engine());
      p.prim = dnnl::batch_normalization_forward(pd);
      p.workspace = pd.workspace_desc();
    } catch (const dnnl::error&) {
      return du::reference_plan<NormPlan>();
    }
    return p;
  });
  if (plan->use_reference) return du::run_reference(ctx);

  std::unordered_map<int, dnnl::memory> args{
      {DNNL_ARG_SRC, du::memory_of(x, plan->data)},
      {DNNL_ARG_DST, du::memory_of(y, plan->data)},
      {DNNL_ARG_SCALE, du::memory_of(ctx.in(1), plan->channel)},
      {DNNL_ARG_SHIFT, du::memory_of(ctx.in(2), plan->channel)},
  };
  if (plan->workspace.get_size() != 0) args[DNNL_ARG_WORKSPACE] = du::temp_memory(plan->workspace, 2);
  const bool own = x.layout() == Layout::Plain || x.layout() == Layout::Blocked16c;
  auto run = [&](const float* m, const float* v) {
    if (own) return apply_rows(x, ctx.in(1).data<float>(), ctx.in(2).data<float>(), m, v, eps, fuse_relu, dropout, y);
    du::execute(plan->prim, std::move(args));
  };
  if (!training) {
    args[DNNL_ARG_MEAN] = du::memory_of(ctx.in(3), plan->channel);
    args[DNNL_ARG_VARIANCE] = du::memory_of(ctx.in(4), plan->channel);
    run(ctx.in(3).data<float>(), ctx.in(4).data<float>());
    return;
  }
  // Batch statistics go straight into output 5/6 or 3/4 when requested (copied to the
  // other pair when both are), else into temporaries.
  auto stat = [&](size_t saved, size_t onnx, int slot) {
    if (ctx.has_output(saved)) return du::memory_of(ctx.out(saved), plan->channel);
    return ctx.has_output(onnx) ? du::memory_of(ctx.out(onnx), plan->channel) : du::temp_memory(plan->channel, slot);
  };
  dnnl::memory mean = stat(5, 3, 0), var = stat(6, 4, 1);
  batch_stats(x, static_cast<float*>(mean.get_data_handle()), static_cast<float*>(var.get_data_handle()));
  auto copy_to = [&](const dnnl::memory& from, size_t saved, size_t onnx) {
    if (ctx.has_output(saved) && ctx.has_output(onnx))
      std::copy_n(static_cast<const float*>(from.get_data_handle()), channels, ctx.out(onnx).data<float>());
  };
  copy_to(mean, 5, 3);
  copy_to(var, 6, 4);
  args[DNNL_ARG_MEAN] = mean;
  args[DNNL_ARG_VARIANCE] = var;
  const float* bm = static_cast<const float*>(mean.get_data_handle());
  const float* bv = static_cast<const float*>(var.get_data_handle());
  run(bm, bv);
  const float* im = ctx.in(3).data<float>();
  const float* iv = ctx.in(4).data<float>();
  if (ctx.has_output(1))
    for (int64_t c = 0; c < channels; ++c) ctx.out(1).data<float>()[c] = im[c] * momentum + bm[c] * (1 - momentum);
  if (ctx.has_output(2))
    for (int64_t c = 0; c < channels; ++c) ctx.out(2).data<float>()[c] = iv[c] * momentum + bv[c] * (1 - momentum);
}

// BatchNormalizationGrad (fp32) on oneDNN's batch_normalization_backward in the blocked
// layout; the row-major one runs own loops (batchnorm_grad_plain, below).
//
//   dY, X: N,C,spatial...   scale: C   [saved_mean, saved_var: C]
//     ->   dX: like X, dScale: C, dBias: C
//   per channel over M = N*S: mean, biased var of X, r = 1/sqrt(var+eps), xh = (x-mean)*r
//   dBias = sum dY, dScale = sum dY*xh, dX = scale*r*(dY - dBias/M - xh*dScale/M)
//
// The batch statistics the training forward normalised with are its outputs 5/6 when
// given (inputs 3/4, handed to the primitive as they are), else recomputed here from X
// by the forward's batch_stats (two passes, channels in parallel with oneTBB, each
// channel summed in double), which gives the same bits as the saved ones. Then the
// backward primitive (prop_kind::backward, use_scale|use_shift) computes all three outputs.
// Outputs that were not requested go to per-thread temporaries. Tensors are seen as
// N,C,S like the forward kernel (above) sees them; dY, X and dX share one
// layout, row-major or Blocked16c (runtime/layout.h), and the primitive works in it.
namespace {

struct NormGradPlan {
  bool use_reference = false;
  dnnl::primitive prim;
  du::Md data, channel;
};

// data_dims, batch_stats: as the forward, above.

// Runs a batch or layer normalization backward primitive (use_scale|use_shift) on
// (dY, X, scale) = inputs 0..2 of `data` / `channel` descriptors, with the forward's
// statistics; (dX, dScale, dBias) = outputs 0..2, each to a temporary when not requested.
void run_norm_backward(KernelContext& ctx, const dnnl::primitive& prim, const du::Md& data, const du::Md& channel,
                       const dnnl::memory& mean, const dnnl::memory& var) {
  // oneDNN 2.6 asks for the shift with use_shift though dX does not depend on it.
  dnnl::memory shift = du::temp_memory(channel, 5);
  auto out_or_temp = [&](size_t i, const du::Md& md, int slot) {
    return ctx.has_output(i) ? du::memory_of(ctx.out(i), md) : du::temp_memory(md, slot);
  };
  du::execute(prim, {{DNNL_ARG_SRC, du::memory_of(ctx.in(1), data)},
                     {DNNL_ARG_DIFF_DST, du::memory_of(ctx.in(0), data)},
                     {DNNL_ARG_MEAN, mean},
                     {DNNL_ARG_VARIANCE, var},
                     {DNNL_ARG_SCALE, du::memory_of(ctx.in(2), channel)},
                     {DNNL_ARG_SHIFT, shift},
                     {DNNL_ARG_DIFF_SRC, out_or_temp(0, data, 2)},
                     {DNNL_ARG_DIFF_SCALE, out_or_temp(1, channel, 3)},
                     {DNNL_ARG_DIFF_SHIFT, out_or_temp(2, channel, 4)}});
}

// ---- the row-major (Plain) fp32 backward, own loops --------------------------------
// Why: oneDNN 2.6 runs the ncsp layout with its generic scalar loop (~5 % of the Wide
// ResNet's AVX2 step, where activations are row-major). These loops compute what the
// reference does (ops/norm.cpp batchnorm_grad_reference), in double, with the same
// coefficients and the same per-element formulas (batchnorm_stats::grad; the products
// g * (x - mean) * r of dScale's sum are the reference's bits too): only the order of the
// two sums differs (4 lanes of double, then the scalar tail, against the reference's one
// running sum), so dScale, dBias are the reference's up to float rounding of a double
// sum that moved by its summation error, and dX by that error through bias_term/x_term.
// A channel is one task (channels in parallel with oneTBB), summed in one fixed order:
// the bits do not depend on the thread count. SSE2 is x86-64's baseline (no dispatch);
// with relu_y (the fused ReLU gradient) dY is masked as ReluGrad masks it, y > 0 ? dY : 0,
// while it is read, without the masked copy with_dy_relu writes.

// One channel's planes: row n of the channel starts at n * stride; ry null without ReLU.
struct ChannelPlanes {
  const float *dy, *x, *ry;
  int64_t N, S, stride;
  ChannelPlanes row(int64_t n) const {  // row n alone: its dY, X and relu_y
    return {dy + n * stride, x + n * stride, ry ? ry + n * stride : nullptr, 1, S, stride};
  }
};

#ifdef __SSE2__
// dY's 4 values at i, masked by ry > 0 as ReluGrad masks them where ry is given.
inline __m128 masked_dy4(const ChannelPlanes& row, int64_t i) {
  const __m128 g4 = _mm_loadu_ps(row.dy + i);
  return row.ry ? _mm_and_ps(_mm_cmpgt_ps(_mm_loadu_ps(row.ry + i), _mm_setzero_ps()), g4) : g4;
}
#endif

// sum(dY), sum(dY * (x - mean) * r) over the channel, dY masked by ry.
std::pair<double, double> channel_grad_sums(const ChannelPlanes& p, double mean, double r) {
  double tail_b = 0, tail_s = 0;
#ifdef __SSE2__
  // dY's and the products' 4 positions in 4 double lanes (2 registers each).
  const __m128d m2 = _mm_set1_pd(mean), r2 = _mm_set1_pd(r);
  __m128d b_lo = _mm_setzero_pd(), b_hi = b_lo, s_lo = b_lo, s_hi = b_lo;
#endif
  for (int64_t n = 0; n < p.N; ++n) {
    const ChannelPlanes q = p.row(n);
    const float *dy = q.dy, *x = q.x, *ry = q.ry;
    int64_t i = 0;
#ifdef __SSE2__
    for (; i + 4 <= p.S; i += 4) {
      const __m128 g4 = masked_dy4(q, i);
      const __m128 x4 = _mm_loadu_ps(x + i);
      const __m128d g_lo = _mm_cvtps_pd(g4), g_hi = _mm_cvtps_pd(_mm_movehl_ps(g4, g4));
      const __m128d x_lo = _mm_cvtps_pd(x4), x_hi = _mm_cvtps_pd(_mm_movehl_ps(x4, x4));
      b_lo += g_lo;
      b_hi += g_hi;
      s_lo += g_lo * (x_lo - m2) * r2;
      s_hi += g_hi * (x_hi - m2) * r2;
    }
#endif
    for (; i < p.S; ++i) {
      const double g = ry ? unary_math::ReluGrad{}(dy[i], ry[i]) : dy[i];
      tail_b += g;
      tail_s += g * (static_cast<double>(x[i]) - mean) * r;
    }
  }
#ifdef __SSE2__
  return {((b_lo[0] + b_lo[1]) + (b_hi[0] + b_hi[1])) + tail_b, ((s_lo[0] + s_lo[1]) + (s_hi[0] + s_hi[1])) + tail_s};
#else
  return {tail_b, tail_s};
#endif
}

// dX of the channel: batchnorm_stats::grad in double with its coefficients, rounded once.
void channel_dx(const ChannelPlanes& p, double mean, double k, double bias_term, double x_term, float* dx) {
#ifdef __SSE2__
  const __m128d m2 = _mm_set1_pd(mean), k2 = _mm_set1_pd(k), b2 = _mm_set1_pd(bias_term), t2 = _mm_set1_pd(x_term);
#endif
  for (int64_t n = 0; n < p.N; ++n) {
    const ChannelPlanes q = p.row(n);
    const float *dy = q.dy, *x = q.x, *ry = q.ry;
    float* out = dx + n * p.stride;
    int64_t i = 0;
#ifdef __SSE2__
    for (; i + 4 <= p.S; i += 4) {
      const __m128 g4 = masked_dy4(q, i);
      const __m128 x4 = _mm_loadu_ps(x + i);
      const __m128d lo = batchnorm_stats::grad(_mm_cvtps_pd(g4), _mm_cvtps_pd(x4), m2, k2, b2, t2);
      const __m128d hi = batchnorm_stats::grad(_mm_cvtps_pd(_mm_movehl_ps(g4, g4)), _mm_cvtps_pd(_mm_movehl_ps(x4, x4)),
                                               m2, k2, b2, t2);
      _mm_storeu_ps(out + i, _mm_movelh_ps(_mm_cvtpd_ps(lo), _mm_cvtpd_ps(hi)));
    }
#endif
    for (; i < p.S; ++i) {
      const double g = ry ? unary_math::ReluGrad{}(dy[i], ry[i]) : dy[i];
      out[i] = static_cast<float>(batchnorm_stats::grad(g, static_cast<double>(x[i]), mean, k, bias_term, x_term));
    }
  }
}

// The row-major fp32 BatchNormalizationGrad (relu_y, input 5, read when given); false
// (nothing written) where it does not apply: another dtype or layout, an empty tensor.
bool batchnorm_grad_plain(KernelContext& ctx) {
  const bool relu = ctx.has_input(5);
  if (!du::all_f32(ctx) || ctx.in(1).numel() == 0) return false;
  for (size_t i : {size_t{0}, size_t{1}, size_t{5}})
    if (ctx.has_input(i) && ctx.in(i).layout() != Layout::Plain) return false;
  if (ctx.has_output(0) && ctx.out(0).layout() != Layout::Plain) return false;
  const Tensor& x = ctx.in(1);
  const int64_t N = x.dims()[0], C = x.dims()[1], S = x.numel() / (N * C);
  const double eps = ctx.node.attr_float("epsilon", 1e-5f), M = static_cast<double>(N * S);
  // The forward's saved statistics, else batch_stats' (the same bits: the forward's own).
  std::vector<float> stats;
  const float *mean = nullptr, *var = nullptr;
  if (ctx.has_input(3) && ctx.has_input(4)) {
    mean = ctx.in(3).data<float>();
    var = ctx.in(4).data<float>();
  } else {
    stats.resize(static_cast<size_t>(2 * C));
    batch_stats(x, stats.data(), stats.data() + C);
    mean = stats.data();
    var = stats.data() + C;
  }
  const float* scale = ctx.in(2).data<float>();
  float* dx = ctx.has_output(0) ? ctx.out(0).data<float>() : nullptr;
  float* dscale = ctx.has_output(1) ? ctx.out(1).data<float>() : nullptr;
  float* dbias = ctx.has_output(2) ? ctx.out(2).data<float>() : nullptr;
  parallel_ranges(C, 1, [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) {
      const ChannelPlanes p{ctx.in(0).data<float>() + c * S,
                            x.data<float>() + c * S,
                            relu ? ctx.in(5).data<float>() + c * S : nullptr,
                            N,
                            S,
                            C * S};
      const double m = static_cast<double>(mean[c]), r = batchnorm_stats::inv_std(static_cast<double>(var[c]), eps);
      const std::pair<double, double> sums = channel_grad_sums(p, m, r);
      if (dbias) dbias[c] = static_cast<float>(sums.first);
      if (dscale) dscale[c] = static_cast<float>(sums.second);
      if (dx) channel_dx(p, m, static_cast<double>(scale[c]) * r, sums.first / M, r * sums.second / M, dx + c * S);
    }
  });
  return true;
}

void batchnorm_grad_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  if (x.numel() == 0) return du::run_reference(ctx);  // empty batch: the reference's rules
  const float eps = ctx.node.attr_float("epsilon", 1e-5f);
  const int64_t channels = x.dims().at(1);
  std::vector<int64_t> dd = data_dims(x);
  if (dy.layout() != x.layout() || (ctx.has_output(0) && ctx.out(0).layout() != x.layout()))
    return du::run_reference(ctx);  // the primitive takes one data layout
  auto plan = du::cached<NormGradPlan>(du::key("BatchNormalizationGrad", dd, eps, x.layout()), [&] {
    NormGradPlan p;
    p.data = x.layout() == Layout::Plain ? du::plain_desc(dd) : du::desc_of(x);
    p.channel = du::plain_desc({channels});
    const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    try {
      dnnl::batch_normalization_forward::desc fd(dnnl::prop_kind::forward_training, p.data, eps, flags);
      dnnl::batch_normalization_forward::primitive_desc hint(fd, du::attr(), du::engine());
      dnnl::batch_normalization_backward::desc bd(dnnl::prop_kind::backward, p.data, p.data, eps, flags);
      p.prim = dnnl::batch_normalization_backward(
          dnnl::batch_normalization_backward::primitive_desc(bd, du::attr(), du::engine(), hint));
    } catch (const dnnl::error&) {
      return du::reference_plan<NormGradPlan>();
    }
    return p;
  });
  if (plan->use_reference) return du::run_reference(ctx);

  if (ctx.has_input(3) && ctx.has_input(4))
    return run_norm_backward(ctx, plan->prim, plan->data, plan->channel, du::memory_of(ctx.in(3), plan->channel),
                             du::memory_of(ctx.in(4), plan->channel));
  dnnl::memory mean = du::temp_memory(plan->channel, 0), var = du::temp_memory(plan->channel, 1);
  batch_stats(x, static_cast<float*>(mean.get_data_handle()), static_cast<float*>(var.get_data_handle()));
  run_norm_backward(ctx, plan->prim, plan->data, plan->channel, mean, var);
}

}  // namespace

// LayerNormalization and LayerNormalizationGrad (fp32) on oneDNN's
// layer_normalization_forward / _backward.
//
//   X seen as rows x D, D = the product of X's dims from axis on (they are the
//   contiguous trailing ones, so any axis is the primitive's last-dim case):
//   Y = (x - mean) * r * Scale + B per row, r = 1/sqrt(var + epsilon)
//   Mean: rows (oneDNN's own), InvStdDev: rows = 1/sqrt(variance + epsilon).
//   Backward: dX, dScale, dBias (D) with the row statistics recomputed from X in
//   double by the reference's loop (ops/norm_loops.h; rows in parallel with oneTBB),
//   as BatchNormalizationGrad does.
// Scale and B must have D values (the normalized shape); a Scale or B that
// broadcasts to it, an empty X, or a non-f32 tensor runs the reference kernel.
namespace {

struct LayerNormPlan {
  bool use_reference = false;
  dnnl::primitive prim;
  du::Md data, stat, channel;
};

// rows x D of x for the node's axis.
std::pair<int64_t, int64_t> rows_by_d(const KernelContext& ctx, const Tensor& x) {
  int64_t axis = ctx.node.attr_int("axis", -1);
  if (axis < 0) axis += x.rank();
  int64_t d = 1;
  for (int64_t k = axis; k < x.rank(); ++k) d *= x.dims()[static_cast<size_t>(k)];
  return {d == 0 ? 0 : x.numel() / d, d};
}

void layernorm_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  const Tensor& x = ctx.in(0);
  const bool has_bias = ctx.has_input(2);
  const std::pair<int64_t, int64_t> shape = rows_by_d(ctx, x);
  const int64_t rows = shape.first, D = shape.second;  // named values: lambdas capture them
  if (x.numel() == 0 || ctx.in(1).numel() != D || (has_bias && ctx.in(2).numel() != D)) return du::run_reference(ctx);
  const bool stats = ctx.has_output(1) || ctx.has_output(2);
  const float eps = ctx.node.attr_float("epsilon", 1e-5f);
  auto plan = du::cached<LayerNormPlan>(du::key("LayerNormalization", rows, D, eps, has_bias, stats), [&] {
    LayerNormPlan p;
    p.data = du::plain_desc({rows, D});
    p.stat = du::plain_desc({rows});
    p.channel = du::plain_desc({D});
    dnnl::normalization_flags flags = dnnl::normalization_flags::use_scale;
    if (has_bias) flags = flags | dnnl::normalization_flags::use_shift;
    try {
      dnnl::layer_normalization_forward::desc d(
          stats ? dnnl::prop_kind::forward_training : dnnl::prop_kind::forward_inference, p.data, p.stat, eps, flags);
      p.prim = dnnl::layer_normalization_forward(
          dnnl::layer_normalization_forward::primitive_desc(d, du::attr(), du::engine()));
    } catch (const dnnl::error&) {
      return du::reference_plan<LayerNormPlan>();
    }
    return p;
  });
  if (plan->use_reference) return du::run_reference(ctx);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, du::memory_of(x, plan->data)},
                                             {DNNL_ARG_DST, du::memory_of(ctx.out(0), plan->data)},
                                             {DNNL_ARG_SCALE, du::memory_of(ctx.in(1), plan->channel)}};
  if (has_bias) args[DNNL_ARG_SHIFT] = du::memory_of(ctx.in(2), plan->channel);
  if (!stats) return du::execute(plan->prim, std::move(args));
  dnnl::memory var = du::temp_memory(plan->stat, 1);
  args[DNNL_ARG_MEAN] = ctx.has_output(1) ? du::memory_of(ctx.out(1), plan->stat) : du::temp_memory(plan->stat, 0);
  args[DNNL_ARG_VARIANCE] = var;
  du::execute(plan->prim, std::move(args));
  if (!ctx.has_output(2)) return;
  const float* v = static_cast<const float*>(var.get_data_handle());
  float* inv = ctx.out(2).data<float>();
  for (int64_t i = 0; i < rows; ++i) inv[i] = static_cast<float>(1.0 / std::sqrt(static_cast<double>(v[i]) + eps));
}

void layernorm_grad_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  const Tensor& x = ctx.in(1);
  const std::pair<int64_t, int64_t> shape = rows_by_d(ctx, x);
  const int64_t rows = shape.first, D = shape.second;  // named values: lambdas capture them
  if (x.numel() == 0 || ctx.in(2).numel() != D) return du::run_reference(ctx);
  const float eps = ctx.node.attr_float("epsilon", 1e-5f);
  auto plan = du::cached<LayerNormPlan>(du::key("LayerNormalizationGrad", rows, D, eps), [&] {
    LayerNormPlan p;
    p.data = du::plain_desc({rows, D});
    p.stat = du::plain_desc({rows});
    p.channel = du::plain_desc({D});
    const auto flags = dnnl::normalization_flags::use_scale | dnnl::normalization_flags::use_shift;
    try {
      dnnl::layer_normalization_forward::desc fd(dnnl::prop_kind::forward_training, p.data, p.stat, eps, flags);
      dnnl::layer_normalization_forward::primitive_desc hint(fd, du::attr(), du::engine());
      dnnl::layer_normalization_backward::desc bd(dnnl::prop_kind::backward, p.data, p.data, p.stat, eps, flags);
      p.prim = dnnl::layer_normalization_backward(
          dnnl::layer_normalization_backward::primitive_desc(bd, du::attr(), du::engine(), hint));
    } catch (const dnnl::error&) {
      return du::reference_plan<LayerNormPlan>();
    }
    return p;
  });
  if (plan->use_reference) return du::run_reference(ctx);
  dnnl::memory mean = du::temp_memory(plan->stat, 0), var = du::temp_memory(plan->stat, 1);
  float* mp = static_cast<float*>(mean.get_data_handle());
  float* vp = static_cast<float*>(var.get_data_handle());
  const float* xp = x.data<float>();
  parallel_ranges(rows, 16, [&](int64_t r0, int64_t r1) {
    for (int64_t i = r0; i < r1; ++i) {
      const std::pair<double, double> mv = norm_loops::row_moments(xp + i * D, D);
      mp[i] = static_cast<float>(mv.first);
      vp[i] = static_cast<float>(mv.second);
    }
  });
  run_norm_backward(ctx, plan->prim, plan->data, plan->channel, mean, var);
}

}  // namespace

void register_norm_cpu(Registry& r) {
  using facts::S;
  add_if_schema(
      r, "cpu", "", "BatchNormalization", [](KernelContext& ctx) { batchnorm_forward_dnnl(ctx, false); },
      facts::fixed({{S}, {S}}));
  // dY, X, relu_y (input 5) and dX in one layout (ReluGrad masks dY elementwise).
  const Kernel* relu_grad = r.kernels.find("cpu", kTrainrtDomain, "ReluGrad");
  if (!relu_grad) throw_internal("register_norm_cpu", "the cpu ReluGrad must be registered first");
  // Row-major fp32: the own loops (relu_y read by them); else oneDNN after the masked copy.
  Kernel dnnl_grad = with_dy_relu(batchnorm_grad_cpu, *relu_grad);
  add_if_schema(
      r, "cpu", kTrainrtDomain, "BatchNormalizationGrad",
      [dnnl_grad](KernelContext& ctx) {
        if (!batchnorm_grad_plain(ctx)) dnnl_grad(ctx);
      },
      facts::fixed({{S, S, facts::P, facts::P, facts::P, S}, {S}}));
  add_if_schema(r, "cpu", "", "LayerNormalization", layernorm_cpu);
  add_if_schema(r, "cpu", kTrainrtDomain, "LayerNormalizationGrad", layernorm_grad_cpu);
}

}  // namespace trainrt
