// MaxPool, AveragePool, GlobalAveragePool and GlobalMaxPool (fp32) on oneDNN's
// pooling_v2_forward (1 to 3 spatial dims: ncw, nchw, ncdhw; Blocked16c for 2-D), but a
// row-major MaxPool with the 2x2 stride-2 unpadded window on own loops (below); LpPool
// and LpPoolGrad (float32/64, row-major) the reference's loops over parallel planes
// (ops/pool_loops.h: the two backends agree bit for bit).
//
//   Y[N,C,*out] = max / mean over the window at *(out*s - pb + k*d) of X[N,C,*]
//
// ONNX and oneDNN agree on the window; they differ in how the output size is
// stated. oneDNN needs padding_r such that out = (in + pb + pr - extent)/s + 1
// exactly, so pr is derived from the output size the shape rule computed
// (ceil_mode makes it larger than the ONNX end pad). Dilations go to pooling_v2 for
// AveragePool (opset 19) as for MaxPool: its divisors count a dilated window's taps on
// real elements (exclude padding) or all of them (include padding: exact where pr is at
// most the ONNX end pad, as below). Falls back to the reference
// kernel for: MaxPool's Indices output, AveragePool counting padding when that
// derived pr exceeds the ONNX end pad (the divisor rules differ there), and
// windows oneDNN rejects. X and Y are row-major or Blocked16c (runtime/layout.h):
// the primitive works in X's layout and Y is reordered out when its layout differs.
#include <algorithm>
#include <cstring>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <oneapi/dnnl/dnnl.hpp>

#include "graph/error.h"
#include "ops/core/kernel_facts.h"
#include "ops/core/parallel.h"
#include "ops/core/pool_geometry.h"
#include "ops/core/register_all.h"
#include "ops/core/window.h"
#include "ops/onednn/dnnl_util.h"
#include "ops/pool_loops.h"

namespace trainrt {
namespace du = dnnl_util;

namespace {

struct PoolPlan {
  bool use_reference = false;
  dnnl::primitive prim;
  du::Md src, dst, y_user;
  dnnl::reorder dst_reorder;  // dst (X's layout) -> Y's layout, when they differ
  // When the windows skip x's last rows: x's used sub-block, copied densely first
  // (oneDNN's jit pooling wants dense src; on a strided view it runs ref:any, 50x slower).
  du::Md x_view;
  dnnl::reorder crop;
};

enum class PoolKind { Max, Average, GlobalAverage, GlobalMax };

PoolPlan make_pool_plan(PoolKind kind, const Node& n, const Tensor& x, const Tensor& y) {
  PoolPlan p;
  const std::vector<int64_t>& xd = x.dims();
  const std::vector<int64_t>& yd = y.dims();
  std::vector<int64_t> in(xd.begin() + 2, xd.end()), out(yd.begin() + 2, yd.end());
  if (in.empty() || in.size() > 3) return du::reference_plan<PoolPlan>();
  du::Window win;
  dnnl::algorithm alg = dnnl::algorithm::pooling_max;
  if (kind == PoolKind::GlobalAverage || kind == PoolKind::GlobalMax) {
    win = du::Window{in, std::vector<int64_t>(in.size(), 1), std::vector<int64_t>(in.size(), 1),
                     std::vector<int64_t>(in.size(), 0), std::vector<int64_t>(in.size(), 0)};
    if (kind == PoolKind::GlobalAverage) alg = dnnl::algorithm::pooling_avg_exclude_padding;
  } else {
    win = du::window_of(n, in, out, {});
    if (kind == PoolKind::Average) {
      bool include_pad = n.attr_int("count_include_pad", 0) != 0;
      alg = include_pad ? dnnl::algorithm::pooling_avg_include_padding : dnnl::algorithm::pooling_avg_exclude_padding;
    }
  }
  std::vector<int64_t> pr = du::effective_pads_end(win, in, out);
  // Rows past the last window (pr < 0: AveragePool 7 stride 7 on 8x8) are never
  // read: pool the leading sub-block of x that the windows cover.
  std::vector<int64_t> used = xd;
  for (size_t i = 0; i < pr.size(); ++i) {
    if (pr[i] < 0) used[i + 2] += pr[i], pr[i] = 0;
    if (alg == dnnl::algorithm::pooling_avg_include_padding && pr[i] > win.pads_end[i])
      return du::reference_plan<PoolPlan>();
  }
  const bool blocked = x.layout() == Layout::Blocked16c;
  p.src = blocked ? du::blocked16_desc(used) : du::plain_desc(used);
  if (used != xd) {  // the used sub-block copied dense (Blocked16c too: spatial dims only)
    p.x_view = blocked ? du::blocked_sub_block_desc(x, used) : du::sub_block_desc(used, xd);
    p.crop = du::make_reorder(p.x_view, p.src);
  }
  p.dst = blocked ? du::blocked16_desc(yd) : du::plain_desc(yd);
  p.y_user = du::desc_of(y);
  p.dst_reorder = du::make_reorder(p.dst, p.y_user);
  try {
    dnnl::pooling_v2_forward::desc d(
        dnnl::prop_kind::forward_inference, alg, p.src, p.dst, du::Dims(win.strides.begin(), win.strides.end()),
        du::Dims(win.kernel.begin(), win.kernel.end()), du::dnnl_dilations(win.dilations),
        du::Dims(win.pads_begin.begin(), win.pads_begin.end()), du::Dims(pr.begin(), pr.end()));
    p.prim = dnnl::pooling_v2_forward(dnnl::pooling_v2_forward::primitive_desc(d, du::attr(), du::engine()));
  } catch (const dnnl::error&) {
    return du::reference_plan<PoolPlan>();
  }
  return p;
}

// ---- MaxPool and MaxPoolGrad, 2x2 stride 2 unpadded, row-major: own loops -----------
// Why: oneDNN 2.6 runs the plain (ncsp) layout's pooling with its generic scalar loop,
// and MaxPoolGrad's general window walk (below) recomputes each argmax element by
// element; together ~5 % of the Wide ResNet's AVX2 step, whose pools are all 2x2 stride 2
// on row-major activations. The window of output (oh, ow) is a = X[2oh][2ow], b = the
// one right of it, c, d the two below; window_argmax (ops/core/pool_geometry.h) takes a,
// then b, c, d each only if greater than the best so far: the first maximum wins a tie,
// and a NaN wins only as a (nothing compares greater than it; a later one never does).
// The SSE2 loops (x86-64's baseline: no dispatch) keep exactly that rule: _mm_max_ps(v,
// best) is v > best ? v : best, bit for bit, NaN and signed zeros included.

// Whether g is that window on a 2-D plane with every window inside X (no padding, ceil
// windows excluded).
bool is_2x2_stride_2(const Pool3& g) {
  return g.in[0] == 1 && g.out[0] == 1 && g.k[0] == 1 && g.k[1] == 2 && g.k[2] == 2 && g.s[1] == 2 && g.s[2] == 2 &&
         g.d[1] == 1 && g.d[2] == 1 && g.pb[1] == 0 && g.pb[2] == 0 && 2 * g.out[1] <= g.in[1] &&
         2 * g.out[2] <= g.in[2];
}

#ifdef __SSE2__
// Windows ow..ow+3 of the rows top, bottom: a, b, c, d of each as 4 lanes.
struct Quad {
  __m128 a, b, c, d;
};
Quad load_quad(const float* top, const float* bottom, int64_t ow) {
  const __m128 t0 = _mm_loadu_ps(top + 2 * ow), t1 = _mm_loadu_ps(top + 2 * ow + 4);
  const __m128 b0 = _mm_loadu_ps(bottom + 2 * ow), b1 = _mm_loadu_ps(bottom + 2 * ow + 4);
  return {_mm_shuffle_ps(t0, t1, _MM_SHUFFLE(2, 0, 2, 0)), _mm_shuffle_ps(t0, t1, _MM_SHUFFLE(3, 1, 3, 1)),
          _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(2, 0, 2, 0)), _mm_shuffle_ps(b0, b1, _MM_SHUFFLE(3, 1, 3, 1))};
}

// dY's share of each of a, b, c, d in 4 windows: g4 to window_argmax's pick, 0 to the
// others; each + 0, so a -0 dY gives +0 as the reference's double sum 0 + dY does.
Quad route_2x2(const Quad& q, __m128 g4) {
  const __m128 zero = _mm_setzero_ps();
  // b, c, d win where greater than the best before them; a where none did.
  const __m128 mb = _mm_cmpgt_ps(q.b, q.a), best = _mm_max_ps(q.b, q.a);
  const __m128 mc = _mm_cmpgt_ps(q.c, best), md = _mm_cmpgt_ps(q.d, _mm_max_ps(q.c, best));
  const __m128 gd = _mm_and_ps(md, g4), gc = _mm_andnot_ps(md, _mm_and_ps(mc, g4));
  const __m128 gb = _mm_andnot_ps(_mm_or_ps(mc, md), _mm_and_ps(mb, g4));
  const __m128 ga = _mm_andnot_ps(_mm_or_ps(_mm_or_ps(mb, mc), md), g4);
  return {_mm_add_ps(ga, zero), _mm_add_ps(gb, zero), _mm_add_ps(gc, zero), _mm_add_ps(gd, zero)};
}
#endif

// Which of a, b, c, d (0..3) window_argmax picks.
int argmax_of_4(const float (&v)[4]) {
  int at = 0;
  for (int j = 1; j < 4; ++j)
    if (v[j] > v[at]) at = j;
  return at;
}
// The same for window ow of the row-major rows top, bottom.
int argmax_of_4(const float* top, const float* bottom, int64_t ow) {
  return argmax_of_4({top[2 * ow], top[2 * ow + 1], bottom[2 * ow], bottom[2 * ow + 1]});
}

// Y of one plane.
void maxpool_2x2_plane(const Pool3& g, const float* x, float* y) {
  const int64_t W = g.in[2], Wo = g.out[2];
  for (int64_t oh = 0; oh < g.out[1]; ++oh) {
    const float *top = x + 2 * oh * W, *bottom = top + W;
    float* out = y + oh * Wo;
    int64_t ow = 0;
#ifdef __SSE2__
    for (; ow + 4 <= Wo; ow += 4) {
      const Quad q = load_quad(top, bottom, ow);
      _mm_storeu_ps(out + ow, _mm_max_ps(q.d, _mm_max_ps(q.c, _mm_max_ps(q.b, q.a))));
    }
#endif
    for (; ow < Wo; ++ow) {
      const int at = argmax_of_4(top, bottom, ow);
      out[ow] = (at < 2 ? top : bottom)[2 * ow + (at & 1)];
    }
  }
}

// MaxPool of a row-major fp32 X with that window; false (nothing written) otherwise.
bool maxpool_2x2_plain(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (x.rank() != 4 || x.layout() != Layout::Plain || y.layout() != Layout::Plain) return false;
  const Pool3 g = pool_geometry(ctx.node, x, y);
  if (!is_2x2_stride_2(g)) return false;
  const float* xp = x.data<float>();
  float* yp = y.data<float>();
  const int64_t in_size = g.in_size(), out_size = g.out_size();
  parallel_ranges(g.planes, std::max<int64_t>(1, kGrain / in_size), [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) maxpool_2x2_plane(g, xp + p * in_size, yp + p * out_size);
  });
  return true;
}

template <PoolKind kind>
void pool_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx) || ctx.has_output(1)) return du::run_reference(ctx);  // Indices: reference
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  if constexpr (kind == PoolKind::Max)
    if (maxpool_2x2_plain(ctx)) return;
  const Node& n = ctx.node;
  std::string key =
      du::key("Pool", static_cast<int>(kind), x.dims(), y.dims(), n.attr_ints("kernel_shape"), n.attr_ints("strides"),
              n.attr_ints("dilations"), n.attr_ints("pads"), n.attr_string("auto_pad", "NOTSET"),
              n.attr_int("count_include_pad", 0), x.layout(), y.layout());
  auto plan = du::cached<PoolPlan>(key, [&] { return make_pool_plan(kind, n, x, y); });
  if (plan->use_reference) return du::run_reference(ctx);
  dnnl::memory src = plan->crop ? du::temp_memory(plan->src, 0) : du::memory_of(x, plan->src);
  if (plan->crop) du::reorder(plan->crop, du::memory_of(x, plan->x_view), src);
  dnnl::memory y_user = du::memory_of(y, plan->y_user);
  dnnl::memory dst = plan->dst_reorder ? du::temp_memory(plan->dst, 1) : y_user;
  du::execute(plan->prim, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
  if (plan->dst_reorder) du::reorder(plan->dst_reorder, dst, y_user);
}

// Pooling backward ops (fp32) of the cpu backend.
//
//   MaxPoolGrad(dY: N,C,out..., X: N,C,in...) -> dX: like X
//     by hand, planes (N*C) in parallel with oneTBB: each window's argmax is
//     recomputed from X with the forward's tie rule (first maximum in window order,
//     padding ignored) and gets the window's dY; overlapping windows add up. Exactly
//     the reference's choice of element, without running the forward for a workspace.
//     Row-major with the 2x2 stride-2 unpadded window: the forward's own loops' rule
//     (above), four windows at a time; Blocked16c with that window (the layout the
//     Wide ResNet's pools have on AVX-512): the same rule, 16 planes' windows at a time
//     (the general walk took ~3 % of the AVX-512 step).
//   AveragePoolGrad(dY, X) -> dX
//     oneDNN's pooling_v2_backward (avg include/exclude padding), with a
//     forward_training hint of the same geometry. As in the forward kernel
//     (above), padding_r is what makes the output size exact; rows past
//     the last window (AveragePool 7 stride 7 on 8x8) are left out of the described
//     dX and zeroed here. count_include_pad with a derived padding_r beyond the ONNX
//     end pad (ceil_mode) divides differently in oneDNN: the reference kernel runs.
//   GlobalAveragePoolGrad(dY: N,C,1,..., X) -> dX: dY/plane size over each plane.
//   GlobalMaxPoolGrad(dY: N,C,1,..., X) -> dX: dY at each plane's first maximum (the
//     reference's tie rule), planes in parallel.
// MaxPoolGrad and AveragePoolGrad take Blocked16c arguments (runtime/layout.h): a
// channel's plane is then every 16th float of its channel block; AveragePoolGrad's
// primitive works in dX's layout and dY is reordered into it when its layout differs.

// The pooling window of `n` resolved for x's spatial sizes (exactly as the shape
// rule and the reference kernel resolve it); false when the sizes disagree with dY.
bool pool_window(const Node& n, const Tensor& x, const Tensor& dy, Window& w) {
  const size_t sp = static_cast<size_t>(x.rank() - 2);
  w = read_window(n, sp, n.attr_ints("kernel_shape"), "", WindowOptions{.ceil_mode = true, .pad_below_kernel = true});
  for (size_t i = 0; i < sp; ++i)
    if (resolve_window_dim(w, i, x.dims()[2 + i], "") != dy.dims()[2 + i]) return false;
  return true;
}

// ---- MaxPoolGrad ----------------------------------------------------------
// One pooling plane as D,H,W (1-D/2-D pools have leading size-1 dims), in the
// reference's Pool3 (ops/core/pool_geometry.h), so the window walk is the same code.
Pool3 geometry(const Window& w, const Tensor& x, const Tensor& dy) {
  Pool3 g;
  const size_t sp = w.rank();
  for (size_t i = 0; i < sp; ++i) {
    const size_t j = 3 - sp + i;
    g.in[j] = x.dims()[2 + i];
    g.out[j] = dy.dims()[2 + i];
    g.k[j] = w.kernel[i], g.s[j] = w.strides[i], g.d[j] = w.dilations[i], g.pb[j] = w.pads[i];
  }
  return g;
}

// dX of one plane (elements `step` apart): each window's dY goes to its argmax, picked by
// window_argmax as the forward MaxPool picks it; overlapping windows add up.
void maxpool_grad_plane(const Pool3& g, const float* dy, const float* x, float* dx, int64_t step) {
  for (int64_t i = 0; i < g.in_size(); ++i) dx[i * step] = 0.f;
  for (int64_t od = 0; od < g.out[0]; ++od)
    for (int64_t oh = 0; oh < g.out[1]; ++oh)
      for (int64_t ow = 0; ow < g.out[2]; ++ow) {
        const Argmax m = window_argmax(g, x, od, oh, ow, step);
        if (m.d >= 0)
          dx[((m.d * g.in[1] + m.h) * g.in[2] + m.w) * step] += dy[((od * g.out[1] + oh) * g.out[2] + ow) * step];
      }
}

// dX of one plane: each window's dY at its argmax, +0 elsewhere and where no window
// reads (an odd last row or column). dY + 0 as the reference's double sum 0 + dY: -0 -> +0.
void maxpool_grad_2x2_plane(const Pool3& g, const float* dy, const float* x, float* dx) {
  const int64_t H = g.in[1], W = g.in[2], Ho = g.out[1], Wo = g.out[2];
  for (int64_t oh = 0; oh < Ho; ++oh) {
    const float *top = x + 2 * oh * W, *bottom = top + W, *gr = dy + oh * Wo;
    float *dtop = dx + 2 * oh * W, *dbottom = dtop + W;
    int64_t ow = 0;
#ifdef __SSE2__
    for (; ow + 4 <= Wo; ow += 4) {
      const Quad r = route_2x2(load_quad(top, bottom, ow), _mm_loadu_ps(gr + ow));
      _mm_storeu_ps(dtop + 2 * ow, _mm_unpacklo_ps(r.a, r.b));
      _mm_storeu_ps(dtop + 2 * ow + 4, _mm_unpackhi_ps(r.a, r.b));
      _mm_storeu_ps(dbottom + 2 * ow, _mm_unpacklo_ps(r.c, r.d));
      _mm_storeu_ps(dbottom + 2 * ow + 4, _mm_unpackhi_ps(r.c, r.d));
    }
#endif
    for (; ow < Wo; ++ow) {
      const int at = argmax_of_4(top, bottom, ow);
      for (int j = 0; j < 4; ++j) (j < 2 ? dtop : dbottom)[2 * ow + (j & 1)] = j == at ? gr[ow] + 0.f : 0.f;
    }
    std::fill(dtop + 2 * Wo, dtop + W, 0.f);
    std::fill(dbottom + 2 * Wo, dbottom + W, 0.f);
  }
  std::fill(dx + 2 * Ho * W, dx + H * W, 0.f);
}

// dX of one Blocked16c channel block (16 planes interleaved: element (h, w) of plane j
// at (h * W + w) * 16 + j), as maxpool_grad_2x2_plane: the a, b, c, d of 16 planes'
// windows are each 16 contiguous floats, so no shuffles. Rows and columns no window
// reads (odd H or W) are +0.
void maxpool_grad_2x2_block(const Pool3& g, const float* dy, const float* x, float* dx) {
  constexpr int64_t L = 16;
  const int64_t H = g.in[1], W = g.in[2], Ho = g.out[1], Wo = g.out[2];
  if (H != 2 * Ho || W != 2 * Wo) std::fill(dx, dx + H * W * L, 0.f);
  for (int64_t oh = 0; oh < Ho; ++oh)
    for (int64_t ow = 0; ow < Wo; ++ow) {
      const int64_t at = (2 * oh * W + 2 * ow) * L;
      const float *a = x + at, *b = a + L, *c = a + W * L, *d = c + L, *gr = dy + (oh * Wo + ow) * L;
      float *da = dx + at, *db = da + L, *dc = da + W * L, *dd = dc + L;
      int64_t j = 0;
#ifdef __SSE2__
      for (; j < L; j += 4) {
        const Quad q{_mm_loadu_ps(a + j), _mm_loadu_ps(b + j), _mm_loadu_ps(c + j), _mm_loadu_ps(d + j)};
        const Quad r = route_2x2(q, _mm_loadu_ps(gr + j));
        _mm_storeu_ps(da + j, r.a);
        _mm_storeu_ps(db + j, r.b);
        _mm_storeu_ps(dc + j, r.c);
        _mm_storeu_ps(dd + j, r.d);
      }
#endif
      for (; j < L; ++j) {
        const int pick = argmax_of_4({a[j], b[j], c[j], d[j]});
        float* out[4] = {da, db, dc, dd};
        for (int k = 0; k < 4; ++k) out[k][j] = k == pick ? gr[j] + 0.f : 0.f;
      }
    }
}

void maxpool_grad_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  Tensor& dx = ctx.out(0);
  if (x.numel() == 0) return;
  Window w;
  if (x.rank() < 3 || x.rank() > 5 || !pool_window(ctx.node, x, dy, w)) return du::run_reference(ctx);
  if (dy.layout() != x.layout() || dx.layout() != x.layout()) return du::run_reference(ctx);
  const Pool3 g = geometry(w, x, dy);
  const int64_t lanes = x.layout() == Layout::Blocked16c ? 16 : 1;
  const int64_t groups = x.dims()[0] * x.dims()[1] / lanes;  // planes, or channel blocks of 16 planes
  const int64_t in_size = g.in[0] * g.in[1] * g.in[2], out_size = g.out[0] * g.out[1] * g.out[2];
  const float* dyp = dy.data<float>();
  const float* xp = x.data<float>();
  float* dxp = dx.data<float>();
  if (lanes == 1 && x.rank() == 4 && is_2x2_stride_2(g))
    return parallel_ranges(groups, std::max<int64_t>(1, kGrain / in_size), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        maxpool_grad_2x2_plane(g, dyp + p * out_size, xp + p * in_size, dxp + p * in_size);
    });
  if (lanes == 16 && is_2x2_stride_2(g))  // Blocked16c is rank 4
    return parallel_ranges(groups, std::max<int64_t>(1, kGrain / (16 * in_size)), [&](int64_t p0, int64_t p1) {
      for (int64_t p = p0; p < p1; ++p)
        maxpool_grad_2x2_block(g, dyp + p * out_size * 16, xp + p * in_size * 16, dxp + p * in_size * 16);
    });
  parallel_ranges(groups, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t j = 0; j < lanes; ++j)
        maxpool_grad_plane(g, dyp + p * out_size * lanes + j, xp + p * in_size * lanes + j,
                           dxp + p * in_size * lanes + j, lanes);
  });
}

// ---- AveragePoolGrad ------------------------------------------------------
struct AvgPlan {
  bool use_reference = false;
  bool zero_first = false;  // dX has rows no window reads: zero them
  dnnl::primitive prim;
  du::Md dx, dy, dy_user;
  dnnl::reorder dy_reorder;  // dY's layout -> dX's, when they differ
  // Blocked16c dX with rows no window reads: the primitive writes a dense nChw16c dX of
  // the used sub-block (dx), copied into dX's sub-block view (dx_view) after.
  du::Md dx_view;
  dnnl::reorder dx_reorder;
};

AvgPlan make_avg_plan(const Window& w, const Tensor& x, const Tensor& dy, const Tensor& dx, bool include_pad) {
  AvgPlan p;
  const std::vector<int64_t>& xd = x.dims();
  const size_t sp = w.rank();
  std::vector<int64_t> pb(w.pads.begin(), w.pads.begin() + static_cast<std::ptrdiff_t>(sp));
  std::vector<int64_t> pr(sp), used = xd;
  for (size_t i = 0; i < sp; ++i) {
    pr[i] = (dy.dims()[2 + i] - 1) * w.strides[i] + w.effective_kernel(i) - xd[2 + i] - pb[i];
    if (pr[i] < 0) used[2 + i] += pr[i], pr[i] = 0, p.zero_first = true;
    if (include_pad && pr[i] > w.pads[sp + i]) return du::reference_plan<AvgPlan>();
  }
  const auto alg =
      include_pad ? dnnl::algorithm::pooling_avg_include_padding : dnnl::algorithm::pooling_avg_exclude_padding;
  const bool blocked = dx.layout() == Layout::Blocked16c;
  p.dx = blocked ? du::blocked16_desc(used) : du::sub_block_desc(used, xd);
  if (blocked && used != xd) {
    p.dx_view = du::blocked_sub_block_desc(dx, used);
    p.dx_reorder = du::make_reorder(p.dx, p.dx_view);
  }
  const std::vector<int64_t>& yd = dy.dims();
  p.dy = blocked ? du::blocked16_desc(yd) : du::plain_desc(yd);
  p.dy_user = du::desc_of(dy);
  p.dy_reorder = du::make_reorder(p.dy_user, p.dy);
  const du::Dims strides(w.strides.begin(), w.strides.end()), kernel(w.kernel.begin(), w.kernel.end()),
      dil = du::dnnl_dilations(w.dilations), l(pb.begin(), pb.end()), r(pr.begin(), pr.end());
  try {
    dnnl::pooling_v2_forward::desc fd(dnnl::prop_kind::forward_training, alg, p.dx, p.dy, strides, kernel, dil, l, r);
    dnnl::pooling_v2_forward::primitive_desc hint(fd, du::attr(), du::engine());
    dnnl::pooling_v2_backward::desc bd(alg, p.dx, p.dy, strides, kernel, dil, l, r);
    p.prim = dnnl::pooling_v2_backward(dnnl::pooling_v2_backward::primitive_desc(bd, du::attr(), du::engine(), hint));
  } catch (const dnnl::error&) {
    return du::reference_plan<AvgPlan>();
  }
  return p;
}

void averagepool_grad_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  Tensor& dx = ctx.out(0);
  if (x.numel() == 0) return;
  const Node& n = ctx.node;
  const bool include_pad = n.attr_int("count_include_pad", 0) == 1;
  std::string key = du::key("AveragePoolGrad", x.dims(), dy.dims(), n.attr_ints("kernel_shape"), n.attr_ints("strides"),
                            n.attr_ints("dilations"), n.attr_ints("pads"), n.attr_string("auto_pad", "NOTSET"),
                            n.attr_int("ceil_mode", 0), include_pad, dy.layout(), dx.layout());
  auto plan = du::cached<AvgPlan>(key, [&] {
    Window w;
    if (x.rank() < 3 || x.rank() > 5 || !pool_window(n, x, dy, w)) return du::reference_plan<AvgPlan>();
    return make_avg_plan(w, x, dy, dx, include_pad);
  });
  if (plan->use_reference) return du::run_reference(ctx);
  if (plan->zero_first) std::memset(dx.raw(), 0, dx.nbytes());
  dnnl::memory dy_mem = du::memory_of(dy, plan->dy_user);
  if (plan->dy_reorder) {
    dnnl::memory m = du::temp_memory(plan->dy, 0);
    du::reorder(plan->dy_reorder, dy_mem, m);
    dy_mem = m;
  }
  if (!plan->dx_reorder) {
    du::execute(plan->prim, {{DNNL_ARG_DIFF_DST, dy_mem}, {DNNL_ARG_DIFF_SRC, du::memory_of(dx, plan->dx)}});
    return;
  }
  dnnl::memory used = du::temp_memory(plan->dx, 1);
  du::execute(plan->prim, {{DNNL_ARG_DIFF_DST, dy_mem}, {DNNL_ARG_DIFF_SRC, used}});
  du::reorder(plan->dx_reorder, used, du::memory_of(dx, plan->dx_view));
}

// ---- GlobalAveragePoolGrad ------------------------------------------------
// dy: N,C,1,... -> dx: N,C,spatial...; the share is rounded once, as the reference does.
void global_average_pool_grad_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  Tensor& dx = ctx.out(0);
  const int64_t planes = dx.dims()[0] * dx.dims()[1];
  if (dx.numel() == 0) return;
  const int64_t size = dx.numel() / planes;
  const float* dyp = ctx.in(0).data<float>();
  float* dxp = dx.data<float>();
  parallel_ranges(planes, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      std::fill(dxp + p * size, dxp + (p + 1) * size,
                static_cast<float>(static_cast<double>(dyp[p]) / static_cast<double>(size)));
  });
}

// ---- GlobalMaxPoolGrad ----------------------------------------------------
void global_max_pool_grad_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  Tensor& dx = ctx.out(0);
  if (dx.numel() == 0) return;
  const int64_t planes = dx.dims()[0] * dx.dims()[1], size = dx.numel() / planes;
  const float* dyp = ctx.in(0).data<float>();
  const float* xp = ctx.in(1).data<float>();
  float* dxp = dx.data<float>();
  parallel_ranges(planes, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const float* plane = xp + p * size;
      int64_t at = 0;
      for (int64_t i = 1; i < size; ++i)
        if (plane[i] > plane[at]) at = i;
      std::fill(dxp + p * size, dxp + (p + 1) * size, 0.f);
      dxp[p * size + at] = dyp[p];
    }
  });
}

}  // namespace

void register_pool_cpu(Registry& r) {
  using facts::A, facts::S;
  add_if_schema(r, "cpu", "", "MaxPool", pool_cpu<PoolKind::Max>, facts::fixed({{A}, {A}}));
  add_if_schema(r, "cpu", "", "AveragePool", pool_cpu<PoolKind::Average>, facts::fixed({{A}, {A}}));
  add_if_schema(r, "cpu", "", "GlobalAveragePool", pool_cpu<PoolKind::GlobalAverage>, facts::fixed({{A}, {A}}));
  add_if_schema(r, "cpu", kTrainrtDomain, "MaxPoolGrad", maxpool_grad_cpu, facts::fixed({{S, S}, {S}}));
  add_if_schema(r, "cpu", kTrainrtDomain, "AveragePoolGrad", averagepool_grad_cpu, facts::fixed({{A, A}, {A}}));
  add_if_schema(r, "cpu", kTrainrtDomain, "GlobalAveragePoolGrad", global_average_pool_grad_cpu);
  add_if_schema(r, "cpu", "", "GlobalMaxPool", pool_cpu<PoolKind::GlobalMax>, facts::fixed({{A}, {A}}));
  add_if_schema(r, "cpu", kTrainrtDomain, "GlobalMaxPoolGrad", global_max_pool_grad_cpu);
  // LpPool: oneDNN has no Lp pooling; the reference's loops over parallel planes.
  add_if_schema(r, "cpu", "", "LpPool", lp_pool_loops::forward_kernel<true>);
  add_if_schema(r, "cpu", kTrainrtDomain, "LpPoolGrad", lp_pool_loops::backward_kernel<true>);
}

}  // namespace trainrt
