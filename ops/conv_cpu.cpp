// Conv (fp32 values; fp32 or bf16 arithmetic, KernelContext::math) on oneDNN's
// convolution_forward.
//
//   Y[N,M,*out] = sum_{c,k} X[N,g*C/G+c,*(out*s - pb + k*d)] * W[M,C/G,*k] + B[M]
//
// W and B are row-major; X, Y (and Z) are row-major or Blocked16c (nChw16c), as the
// runtime chose (runtime/layout.h). The primitive is created with format_tag::any for
// src/weights/dst so oneDNN picks its layout (nChw16c, OIhw16i16o... on AVX-512); an
// argument in another layout is reordered into it (Y back out of it) on every call,
// so between two oneDNN nodes that both keep nChw16c no reorder runs. Caching the
// reordered W would need a weight version counter that Tensor does not have (buffer
// pointers are reused), so W is reordered every call.
//
// The fused FusedConv (ops/fused.cpp) runs here too, with post-ops: eltwise_relu when
// its activation is Relu, then sum (dst = act(conv) + dst) when Z is given; dst starts
// as Z (reordered into the primitive's layout), so the residual add costs no extra pass.
// Under bf16/fp16 Z is added after the primitive instead, to its rounded output (the
// unfused Conv's rounding, ops/fused.cpp).
#include "ops/conv_cpu.h"

#include <algorithm>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include "graph/error.h"
#include "ops/core/common.h"
#include "ops/core/kernel_facts.h"
#include "ops/core/parallel.h"
#include "ops/core/register_all.h"
#include "ops/core/rounded_outputs.h"
#include "ops/core/window.h"
#include "ops/onednn/dnnl_grad_util.h"
#include "ops/onednn/dnnl_util.h"
#include "ops/onednn/winograd.h"

namespace trainrt {
namespace du = dnnl_util;
namespace gu = grad_util;

namespace {

struct ConvPlan {
  bool use_reference = false;
  dnnl::primitive prim;
  du::Md src_user, w_plain, dst_user, z_user, bias_plain;  // *_user: the tensors' own layouts
  du::Md src_md, w_md, dst_md;
  dnnl::reorder src_reorder, w_reorder, dst_reorder, z_reorder;
  bool add_z_after = false;   // Z added by a loop after the primitive (see make_plan)
  bool own_winograd = false;  // ops/onednn/winograd.h runs it (no primitive)
  winograd::Geometry wino;
};

// The geometry of a 2-D convolution for the cpu backend's own Winograd (ops/core/
// winograd.h), when it takes it: the CPU has AVX2+FMA, the channel counts are those it
// is faster for (winograd::preferred) and every tensor is row-major.
bool own_winograd_geometry(const Tensor& x, const Tensor& y, int64_t K, int64_t pad_top, int64_t pad_left,
                           std::initializer_list<const Tensor*> others, winograd::Geometry* g) {
  if (x.dims().size() != 4 || !winograd::preferred(x.dims()[1], K)) return false;
  for (const Tensor* t : others)
    if (t && t->layout() != Layout::Plain) return false;
  if (x.layout() != Layout::Plain || y.layout() != Layout::Plain) return false;
  const std::vector<int64_t>& xd = x.dims();
  *g = winograd::Geometry{xd[0], xd[1], xd[2], xd[3], K, y.dims()[2], y.dims()[3], pad_top, pad_left};
  return true;
}

// A blocked argument's own layout (the implementations for nChw16c are as fast as
// the nhwc ones oneDNN otherwise picks for inference, and no reorder runs), else any.
du::Md blocked_or_any(const Tensor& t) {
  return t.layout() == Layout::Blocked16c ? du::desc_of(t) : du::any_desc(t.dims());
}

ConvPlan make_conv_plan(const Node& n, const Tensor& x, const Tensor& w, bool has_bias, bool relu, const Tensor* z,
                        const Tensor& y, MathPrecision math, dnnl::algorithm algorithm) {
  const bool has_z = z != nullptr;
  ConvPlan p;
  const std::vector<int64_t>& xd = x.dims();
  const std::vector<int64_t>& wd = w.dims();
  const std::vector<int64_t>& yd = y.dims();
  std::vector<int64_t> in(xd.begin() + 2, xd.end()), out(yd.begin() + 2, yd.end()), k(wd.begin() + 2, wd.end());
  if (in.empty() || in.size() > 3) return du::reference_plan<ConvPlan>();
  du::Window win = du::window_of(n, in, out, k);
  const int64_t group = n.attr_int("group", 1);
  std::vector<int64_t> wg = wd;  // grouped weights: G, M/G, C/G, *k (same bytes)
  if (group > 1) {
    wg[0] = wd[0] / group;
    wg.insert(wg.begin(), group);
  }
  p.src_user = du::desc_of(x);
  p.w_plain = du::plain_desc(wg);
  p.dst_user = du::desc_of(y);
  if (has_z) p.z_user = du::desc_of(*z);
  p.bias_plain = du::plain_desc({wd[0]});
  du::Dims strides(win.strides.begin(), win.strides.end()), pl(win.pads_begin.begin(), win.pads_begin.end()),
      pr(win.pads_end.begin(), win.pads_end.end());
  try {
    // bf16: X and W are read as bf16 copies in the primitive's layout (the reorders
    // below convert), the result and the bias stay fp32.
    const du::Md src_want = math == MathPrecision::bf16 ? du::any_desc(xd, du::math_type(math)) : blocked_or_any(x);
    // Winograd's forward_inference wants its weights pre-transformed (a wino_reorder of
    // W on every call, as slow as the convolution); forward_training transforms them
    // inside the primitive.
    const auto prop = algorithm == dnnl::algorithm::convolution_winograd ? dnnl::prop_kind::forward_training
                                                                         : dnnl::prop_kind::forward_inference;
    dnnl::convolution_forward::desc d(prop, algorithm, src_want, du::any_desc(wg, du::math_type(math)),
                                      has_bias ? p.bias_plain : du::Md(), blocked_or_any(y), strides,
                                      du::dnnl_dilations(win.dilations), pl, pr);
    auto make_pd = [&](bool sum) {
      dnnl::post_ops po;
      if (relu) po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      if (sum) po.append_sum(1.f);
      dnnl::primitive_attr a = du::attr();
      a.set_post_ops(po);
      return dnnl::convolution_forward::primitive_desc(d, a, du::engine());
    };
    // bf16/fp16: act(conv + B) is rounded before Z is added (ops/fused.cpp), which no
    // post-op does: Z is added by the loop below.
    p.add_z_after = has_z && rounds_before_residual(math, y.dtype());
    dnnl::convolution_forward::primitive_desc pd = make_pd(has_z && !p.add_z_after);
    // Some implementations (the gemm-based one used for grouped convolutions) take
    // relu-then-sum only in oneDNN's slow ref:any; then Z is added by a loop instead.
    if (has_z && relu && !p.add_z_after && std::string(pd.impl_info_str()).rfind("ref", 0) == 0) {
      pd = make_pd(false);
      p.add_z_after = true;
    }
    p.prim = dnnl::convolution_forward(pd);
    p.src_md = pd.src_desc();
    p.w_md = pd.weights_desc();
    p.dst_md = pd.dst_desc();
    p.src_reorder = du::make_reorder(p.src_user, p.src_md);
    p.w_reorder = du::make_reorder(p.w_plain, p.w_md);
    p.dst_reorder = du::make_reorder(p.dst_md, p.dst_user);
    if (has_z && !p.add_z_after) p.z_reorder = du::make_reorder(p.z_user, p.dst_md);
  } catch (const dnnl::error&) {
    return du::reference_plan<ConvPlan>();
  }
  // The loop that adds Z after the primitive needs Z and Y in one layout.
  if (p.add_z_after && p.z_user != p.dst_user) return du::reference_plan<ConvPlan>();
  return p;
}

// Winograd where asked for and oneDNN implements it for this fp32 convolution (3x3,
// stride 1, no dilation or groups), else direct.
ConvPlan make_conv_plan(const Node& n, const Tensor& x, const Tensor& w, bool has_bias, bool relu, const Tensor* z,
                        const Tensor& y, MathPrecision math, ConvAlgorithm conv) {
  if (conv == ConvAlgorithm::winograd && math == MathPrecision::fp32 && du::winograd_shape(n, w)) {
    ConvPlan own;
    own.own_winograd = true;
    bool own_fits = false;
    if (x.dims().size() == 4) {
      const du::Window win = du::window_of(n, {x.dims()[2], x.dims()[3]}, {y.dims()[2], y.dims()[3]}, {3, 3});
      own_fits = own_winograd_geometry(x, y, w.dims()[0], win.pads_begin[0], win.pads_begin[1], {z}, &own.wino);
    }
    if (own_fits && winograd::own_requested()) return own;
    ConvPlan p = make_conv_plan(n, x, w, has_bias, relu, z, y, math, dnnl::algorithm::convolution_winograd);
    if (!p.use_reference) return p;
    if (own_fits) return own;  // no oneDNN Winograd (AVX2): our own
  }
  return make_conv_plan(n, x, w, has_bias, relu, z, y, math, dnnl::algorithm::convolution_direct);
}

}  // namespace

void conv_forward_dnnl(KernelContext& ctx, bool relu) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  const Node& n = ctx.node;
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  const bool has_bias = ctx.has_input(2), has_z = ctx.has_input(3);
  const Tensor* z = has_z ? &ctx.in(3) : nullptr;
  const std::string key = du::key(
      "Conv", x.dims(), w.dims(), y.dims(), has_bias, relu, has_z, x.layout(), y.layout(),
      has_z ? z->layout() : Layout::Plain, n.attr_int("group", 1), n.attr_ints("kernel_shape"), n.attr_ints("strides"),
      n.attr_ints("dilations"), n.attr_ints("pads"), n.attr_string("auto_pad", "NOTSET"), math_precision_name(ctx.math),
      conv_algorithm_name(ctx.conv), winograd::own_requested());
  auto plan =
      du::cached<ConvPlan>(key, [&] { return make_conv_plan(n, x, w, has_bias, relu, z, y, ctx.math, ctx.conv); });
  if (plan->use_reference) return du::run_reference(ctx);
  if (plan->own_winograd) {
    const winograd::Epilogue e{has_bias ? ctx.in(2).data<float>() : nullptr, relu, has_z ? z->data<float>() : nullptr};
    return winograd::forward(plan->wino, x.data<float>(), w.data<float>(), e, y.data<float>());
  }

  // Slots 0-2 hold the primitive's layouts, 3-4 the fp16 rounded copies (du::math_rounded).
  dnnl::memory src =
      gu::to_layout(plan->src_reorder, du::math_rounded(x, plan->src_user, ctx.math, 3), plan->src_md, 0);
  dnnl::memory wts = gu::to_layout(plan->w_reorder, du::math_rounded(w, plan->w_plain, ctx.math, 4), plan->w_md, 1);
  dnnl::memory dst_user = du::memory_of(y, plan->dst_user);
  dnnl::memory dst = gu::out_memory(plan->dst_reorder, dst_user, plan->dst_md, 2);
  if (has_z && !plan->add_z_after) {  // the sum post-op accumulates into dst: start it as Z
    if (plan->z_reorder)
      du::reorder(plan->z_reorder, du::memory_of(*z, plan->z_user), dst);
    else if (dst.get_data_handle() != z->raw())
      std::memcpy(dst.get_data_handle(), z->raw(), plan->dst_md.get_size());
  }
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, dst}};
  if (has_bias) args[DNNL_ARG_BIAS] = du::memory_of(ctx.in(2), plan->bias_plain);
  du::execute(plan->prim, std::move(args));
  gu::from_layout(plan->dst_reorder, dst, dst_user);
  if (has_z && plan->add_z_after) {
    float* py = y.data<float>();
    const float* pz = z->data<float>();
    const int64_t count = y.numel();
    if (ctx.math != MathPrecision::fp32) round_floats(py, py, count, ctx.math, true);  // conv + B rounded, then + Z
    for (int64_t i = 0; i < count; ++i) py[i] += pz[i];
  }
}

// ConvGrad (fp32 values; fp32 or bf16 arithmetic, KernelContext::math) on oneDNN's
// convolution_backward_data and _weights.
//
//   dY: N,M,Ho,Wo   X: N,C,H,W   W: M,C/G,kH,kW   ->   dX: like X, dW: like W, dB: M
//   dX = dY convolved back through W (backward data), dW = dY correlated with X and
//   dB = sum of dY over N,Ho,Wo (backward weights with bias), each only when requested.
//
// Geometry is ops/core/window.h's, resolved exactly as the forward Conv and the reference
// ConvGrad resolve it. Both primitives are created against a forward_training hint
// built from the same shapes, with format_tag::any everywhere, so oneDNN picks its
// blocked layouts (nChw16c, OIhw16o16i... on AVX-512); dY, X and dX come row-major
// or Blocked16c (runtime/layout.h), W and dW row-major, and whatever differs from the
// primitive's choice is reordered in or out at the kernel boundary. dY is reordered once
// when both primitives chose the same layout for it. dB alone (no dW) is a plain
// per-channel sum. The plan (primitives, layouts, reorders) is cached by shapes,
// attributes and the set of requested outputs.
namespace {

struct ConvGradPlan {
  bool use_reference = false;
  du::Md dy_user, x_user, dx_user, w_plain, db_plain;  // the arguments' own layouts
  // backward data: dY, W -> dX
  dnnl::primitive data_prim;
  du::Md bd_dy, bd_w, bd_dx;
  dnnl::reorder bd_dy_reorder, bd_w_reorder, bd_dx_reorder;
  // backward weights: dY, X -> dW (+ dB)
  dnnl::primitive wts_prim;
  du::Md bw_dy, bw_x, bw_dw;
  dnnl::reorder bw_dy_reorder, bw_x_reorder, bw_dw_reorder;
  bool share_dy = false;      // both primitives read dY in one layout
  bool own_winograd = false;  // ops/onednn/winograd.h runs dX and dW (dB: bias_grad)
  winograd::Geometry wino;
};

struct Want {
  bool dx, dw, db;
};

ConvGradPlan make_plan(const Node& n, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx, Want want,
                       MathPrecision math, dnnl::algorithm algorithm) {
  ConvGradPlan p;
  const std::vector<int64_t>& xd = x.dims();
  const std::vector<int64_t>& wd = w.dims();
  const std::vector<int64_t>& yd = dy.dims();
  const size_t sp = xd.size() - 2;
  if (sp < 1 || sp > 3) return du::reference_plan<ConvGradPlan>();
  Window win = read_window(n, sp, std::vector<int64_t>(wd.begin() + 2, wd.end()), "", {});
  for (size_t i = 0; i < sp; ++i)
    if (resolve_window_dim(win, i, xd[2 + i], "") != yd[2 + i]) return du::reference_plan<ConvGradPlan>();
  const int64_t group = n.attr_int("group", 1);

  // Grouped weights are the same bytes seen as G, M/G, C/G, *k.
  std::vector<int64_t> wg = wd;
  if (group > 1) {
    wg[0] = wd[0] / group;
    wg.insert(wg.begin(), group);
  }
  p.dy_user = du::desc_of(dy);
  p.x_user = du::desc_of(x);
  p.dx_user = dx ? du::desc_of(*dx) : p.x_user;
  p.w_plain = du::plain_desc(wg);
  p.db_plain = du::plain_desc({wd[0]});
  const du::Dims strides(win.strides.begin(), win.strides.end());
  const du::Dims dil = du::dnnl_dilations(win.dilations);
  const du::Dims pl(win.pads.begin(), win.pads.begin() + static_cast<std::ptrdiff_t>(sp));
  const du::Dims pr(win.pads.begin() + static_cast<std::ptrdiff_t>(sp), win.pads.end());
  const bool wts_bias = want.dw && want.db;
  // The inputs dY, X, W in the arithmetic's type (bf16 copies for MathPrecision::bf16);
  // dX, dW and dB are fp32 either way.
  const dnnl::memory::data_type in_t = du::math_type(math);
  try {
    dnnl::convolution_forward::desc fd(dnnl::prop_kind::forward_training, algorithm, du::any_desc(xd, in_t),
                                       du::any_desc(wg, in_t), wts_bias ? p.db_plain : du::Md(), du::any_desc(yd, in_t),
                                       strides, dil, pl, pr);
    dnnl::convolution_forward::primitive_desc hint(fd, du::attr(), du::engine());
    if (want.dx) {
      dnnl::convolution_backward_data::desc d(algorithm, du::any_desc(xd), du::any_desc(wg, in_t),
                                              du::any_desc(yd, in_t), strides, dil, pl, pr);
      dnnl::convolution_backward_data::primitive_desc pd(d, du::attr(), du::engine(), hint);
      p.data_prim = dnnl::convolution_backward_data(pd);
      p.bd_dy = pd.diff_dst_desc();
      p.bd_w = pd.weights_desc();
      p.bd_dx = pd.diff_src_desc();
    }
    if (want.dw) {
      dnnl::convolution_backward_weights::desc d(algorithm, du::any_desc(xd, in_t), du::any_desc(wg),
                                                 wts_bias ? p.db_plain : du::Md(), du::any_desc(yd, in_t), strides, dil,
                                                 pl, pr);
      dnnl::convolution_backward_weights::primitive_desc pd(d, du::attr(), du::engine(), hint);
      p.wts_prim = dnnl::convolution_backward_weights(pd);
      p.bw_dy = pd.diff_dst_desc();
      p.bw_x = pd.src_desc();
      p.bw_dw = pd.diff_weights_desc();
      if (wts_bias && pd.diff_bias_desc() != p.db_plain) return du::reference_plan<ConvGradPlan>();
    }
    if (want.dx) {
      p.bd_dy_reorder = du::make_reorder(p.dy_user, p.bd_dy);
      p.bd_w_reorder = du::make_reorder(p.w_plain, p.bd_w);
      p.bd_dx_reorder = du::make_reorder(p.bd_dx, p.dx_user);
    }
    if (want.dw) {
      p.share_dy = want.dx && p.bw_dy == p.bd_dy;
      if (!p.share_dy) p.bw_dy_reorder = du::make_reorder(p.dy_user, p.bw_dy);
      p.bw_x_reorder = du::make_reorder(p.x_user, p.bw_x);
      p.bw_dw_reorder = du::make_reorder(p.bw_dw, p.w_plain);
    }
  } catch (const dnnl::error&) {
    return du::reference_plan<ConvGradPlan>();  // a window oneDNN rejects
  }
  return p;
}

// Winograd where asked for and oneDNN implements both passes for this fp32
// convolution (3x3, stride 1, no dilation or groups), else direct.
ConvGradPlan make_plan(const Node& n, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx, Want want,
                       MathPrecision math, ConvAlgorithm conv) {
  if (conv == ConvAlgorithm::winograd && math == MathPrecision::fp32 && du::winograd_shape(n, w)) {
    // Our own, for dX and dW, where it fits.
    ConvGradPlan own;
    own.own_winograd = true;
    bool own_fits = false;
    if (x.dims().size() == 4 && (want.dx || want.dw)) {
      Window win = read_window(n, 2, {3, 3}, "", {});
      bool same = true;  // dY has the window's output size
      for (size_t i = 0; i < 2; ++i) same = same && resolve_window_dim(win, i, x.dims()[2 + i], "") == dy.dims()[2 + i];
      own_fits = same && own_winograd_geometry(x, dy, w.dims()[0], win.pads[0], win.pads[1], {dx}, &own.wino);
    }
    if (own_fits && winograd::own_requested()) return own;
    ConvGradPlan p = make_plan(n, dy, x, w, dx, want, math, dnnl::algorithm::convolution_winograd);
    if (!p.use_reference) return p;
    if (own_fits) return own;  // no oneDNN Winograd (AVX2)
  }
  return make_plan(n, dy, x, w, dx, want, math, dnnl::algorithm::convolution_direct);
}

// dy: N,M,S -> db: M, summed in double per channel (channels in parallel); with
// bf16/fp16 arithmetic each dY is rounded first, as the oneDNN primitive reads it.
void bias_grad(const Tensor& dy, Tensor& db, MathPrecision math) {
  const int64_t N = dy.dims()[0], M = dy.dims()[1], S = dy.numel() / std::max<int64_t>(N * M, 1);
  const float* g = dy.data<float>();
  float* out = db.data<float>();
  parallel_ranges(M, 1, [&](int64_t m0, int64_t m1) {
    for (int64_t m = m0; m < m1; ++m) {
      double acc = 0;
      for (int64_t b = 0; b < N; ++b) {
        const float* row = g + (b * M + m) * S;
        float part = 0;  // one plane in fp32 (vectorises), planes summed in double
        if (math != MathPrecision::fp32)
          for (int64_t s = 0; s < S; ++s) part += round_to_math(row[s], math);
        else
          for (int64_t s = 0; s < S; ++s) part += row[s];
        acc += part;
      }
      out[m] = static_cast<float>(acc);
    }
  });
}

void conv_grad_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  const Tensor& dy = ctx.in(0);
  const Tensor& x = ctx.in(1);
  const Tensor& w = ctx.in(2);
  const Want want{ctx.has_output(0), ctx.has_output(1), ctx.has_output(2)};
  if (dy.numel() == 0 || x.numel() == 0 || w.numel() == 0) return du::run_reference(ctx);  // empty: zeros
  const Node& n = ctx.node;
  const Tensor* dx = want.dx ? &ctx.out(0) : nullptr;
  if (want.db && !want.dw && dy.layout() != Layout::Plain) return du::run_reference(ctx);  // bias_grad is row-major
  std::string key = du::key("ConvGrad", dy.dims(), x.dims(), w.dims(), want.dx, want.dw, want.db, dy.layout(),
                            x.layout(), dx ? dx->layout() : Layout::Plain, n.attr_int("group", 1),
                            n.attr_ints("kernel_shape"), n.attr_ints("strides"), n.attr_ints("dilations"),
                            n.attr_ints("pads"), n.attr_string("auto_pad", "NOTSET"), math_precision_name(ctx.math),
                            conv_algorithm_name(ctx.conv), winograd::own_requested());
  auto plan = du::cached<ConvGradPlan>(key, [&] { return make_plan(n, dy, x, w, dx, want, ctx.math, ctx.conv); });
  if (plan->use_reference) return du::run_reference(ctx);
  if (plan->own_winograd) {
    if (want.dx) winograd::backward_data(plan->wino, dy.data<float>(), w.data<float>(), ctx.out(0).data<float>());
    if (want.dw) winograd::backward_weights(plan->wino, dy.data<float>(), x.data<float>(), ctx.out(1).data<float>());
    if (want.db) bias_grad(dy, ctx.out(2), ctx.math);
    return;
  }

  // Slots 0-5 hold the primitives' layouts, 6-8 the fp16 rounded copies (du::math_rounded).
  const dnnl::memory dy_user = du::math_rounded(dy, plan->dy_user, ctx.math, 6);
  dnnl::memory dy_data;
  if (want.dx) {
    dy_data = gu::to_layout(plan->bd_dy_reorder, dy_user, plan->bd_dy, 0);
    dnnl::memory wts =
        gu::to_layout(plan->bd_w_reorder, du::math_rounded(w, plan->w_plain, ctx.math, 7), plan->bd_w, 1);
    dnnl::memory dx_user = du::memory_of(ctx.out(0), plan->dx_user);
    dnnl::memory dx = gu::out_memory(plan->bd_dx_reorder, dx_user, plan->bd_dx, 2);
    du::execute(plan->data_prim, {{DNNL_ARG_DIFF_DST, dy_data}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DIFF_SRC, dx}});
    gu::from_layout(plan->bd_dx_reorder, dx, dx_user);
  }
  if (want.dw) {
    dnnl::memory dy_w = plan->share_dy ? dy_data : gu::to_layout(plan->bw_dy_reorder, dy_user, plan->bw_dy, 3);
    dnnl::memory src = gu::to_layout(plan->bw_x_reorder, du::math_rounded(x, plan->x_user, ctx.math, 8), plan->bw_x, 4);
    dnnl::memory dw_user = du::memory_of(ctx.out(1), plan->w_plain);
    dnnl::memory dw = gu::out_memory(plan->bw_dw_reorder, dw_user, plan->bw_dw, 5);
    std::unordered_map<int, dnnl::memory> args{
        {DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, dy_w}, {DNNL_ARG_DIFF_WEIGHTS, dw}};
    if (want.db) args[DNNL_ARG_DIFF_BIAS] = du::memory_of(ctx.out(2), plan->db_plain);
    du::execute(plan->wts_prim, std::move(args));
    gu::from_layout(plan->bw_dw_reorder, dw, dw_user);
  } else if (want.db) {
    bias_grad(dy, ctx.out(2), ctx.math);
  }
}

}  // namespace

void register_conv_cpu(Registry& r) {
  using facts::A, facts::P, facts::S;
  add_if_schema(
      r, "cpu", "", "Conv", [](KernelContext& ctx) { conv_forward_dnnl(ctx, /*relu=*/false); },
      facts::fixed({{A, P, P}, {A}}));
  // With dx_relu, X and dX share a layout: the ReluGrad kernel masking dX in place is
  // elementwise over both (facts::elementwise's Shared).
  const Kernel* relu_grad = r.kernels.find("cpu", kTrainrtDomain, "ReluGrad");
  if (!relu_grad) throw_internal("register_conv_cpu", "the cpu ReluGrad must be registered first");
  add_if_schema(
      r, "cpu", kTrainrtDomain, "ConvGrad",
      with_dx_relu(
          [](KernelContext& ctx) {
            conv_grad_cpu(ctx);
            return false;
          },
          *relu_grad),
      [](const Graph&, const Node& n) {
        return n.attr_int("dx_relu", 0) != 0 ? NodeLayouts{{A, S, P}, {S, P, P}} : NodeLayouts{{A, A, P}, {A, P, P}};
      });
}

}  // namespace trainrt
