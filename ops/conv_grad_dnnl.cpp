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
#include <algorithm>

#include <oneapi/dnnl/dnnl.hpp>

#include "graph/error.h"
#include "ops/core/common.h"
#include "ops/cpu_grad_kernels.h"
#include "ops/core/dnnl_grad_util.h"
#include "ops/core/dnnl_util.h"
#include "ops/core/parallel.h"
#include "ops/core/register_all.h"
#include "ops/core/window.h"

namespace trainrt {
namespace {
namespace du = dnnl_util;
namespace gu = grad_util;

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
  bool share_dy = false;  // both primitives read dY in one layout
};

struct Want {
  bool dx, dw, db;
};

ConvGradPlan make_plan(const Node& n, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx,
                       Want want, MathPrecision math, dnnl::algorithm algorithm) {
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
      dnnl::convolution_backward_data::desc d(algorithm, du::any_desc(xd), du::any_desc(wg, in_t), du::any_desc(yd, in_t),
                                              strides, dil, pl, pr);
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
ConvGradPlan make_plan(const Node& n, const Tensor& dy, const Tensor& x, const Tensor& w, const Tensor* dx,
                       Want want, MathPrecision math, ConvAlgorithm conv) {
  if (conv == ConvAlgorithm::winograd && math == MathPrecision::fp32 && du::winograd_shape(n, w)) {
    ConvGradPlan p = make_plan(n, dy, x, w, dx, want, math, dnnl::algorithm::convolution_winograd);
    if (!p.use_reference) return p;
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
                            x.layout(), dx ? dx->layout() : Layout::Plain,
                            n.attr_int("group", 1), n.attr_ints("kernel_shape"), n.attr_ints("strides"),
                            n.attr_ints("dilations"), n.attr_ints("pads"), n.attr_string("auto_pad", "NOTSET"),
                            math_precision_name(ctx.math), conv_algorithm_name(ctx.conv));
  auto plan = du::cached<ConvGradPlan>(key, [&] { return make_plan(n, dy, x, w, dx, want, ctx.math, ctx.conv); });
  if (plan->use_reference) return du::run_reference(ctx);

  // Slots 0-5 hold the primitives' layouts, 6-8 the fp16 rounded copies (du::math_rounded).
  const dnnl::memory dy_user = du::math_rounded(dy, plan->dy_user, ctx.math, 6);
  dnnl::memory dy_data;
  if (want.dx) {
    dy_data = gu::to_layout(plan->bd_dy_reorder, dy_user, plan->bd_dy, 0);
    dnnl::memory wts = gu::to_layout(plan->bd_w_reorder, du::math_rounded(w, plan->w_plain, ctx.math, 7), plan->bd_w, 1);
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
    std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_DIFF_DST, dy_w}, {DNNL_ARG_DIFF_WEIGHTS, dw}};
    if (want.db) args[DNNL_ARG_DIFF_BIAS] = du::memory_of(ctx.out(2), plan->db_plain);
    du::execute(plan->wts_prim, std::move(args));
    gu::from_layout(plan->bw_dw_reorder, dw, dw_user);
  } else if (want.db) {
    bias_grad(dy, ctx.out(2), ctx.math);
  }
}

}  // namespace

void register_conv_grad_dnnl(Registry& r) {
  if (r.schemas.find(kTrainrtDomain, "ConvGrad")) r.kernels.add("cpu", kTrainrtDomain, "ConvGrad", conv_grad_cpu);
}

void register_cpu_grad_kernels(Registry& r) {
  register_conv_grad_dnnl(r);
  register_norm_grad_dnnl(r);
  register_pool_grad_dnnl(r);
  register_eltwise_grad_dnnl(r);
}

}  // namespace trainrt
