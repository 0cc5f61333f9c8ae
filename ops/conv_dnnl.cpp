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
#include "ops/conv_dnnl.h"

#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>
#include <string>

#include "graph/error.h"
#include "ops/core/dnnl_grad_util.h"
#include "ops/core/dnnl_util.h"
#include "ops/core/register_all.h"

namespace trainrt {
namespace {
namespace du = dnnl_util;
namespace gu = grad_util;

struct ConvPlan {
  bool use_reference = false;
  dnnl::primitive prim;
  du::Md src_user, w_plain, dst_user, z_user, bias_plain;  // *_user: the tensors' own layouts
  du::Md src_md, w_md, dst_md;
  dnnl::reorder src_reorder, w_reorder, dst_reorder, z_reorder;
  bool add_z_after = false;  // Z added by a loop after the primitive (see make_plan)
};

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
    dnnl::convolution_forward::desc d(prop, algorithm, src_want,
                                      du::any_desc(wg, du::math_type(math)), has_bias ? p.bias_plain : du::Md(),
                                      blocked_or_any(y), strides, du::dnnl_dilations(win.dilations), pl, pr);
    auto make_pd = [&](bool sum) {
      dnnl::post_ops po;
      if (relu) po.append_eltwise(1.f, dnnl::algorithm::eltwise_relu, 0.f, 0.f);
      if (sum) po.append_sum(1.f);
      dnnl::primitive_attr a = du::attr();
      a.set_post_ops(po);
      return dnnl::convolution_forward::primitive_desc(d, a, du::engine());
    };
    dnnl::convolution_forward::primitive_desc pd = make_pd(has_z);
    // Some implementations (the gemm-based one used for grouped convolutions) take
    // relu-then-sum only in oneDNN's slow ref:any; then Z is added by a loop instead.
    if (has_z && relu && std::string(pd.impl_info_str()).rfind("ref", 0) == 0) {
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
    ConvPlan p = make_conv_plan(n, x, w, has_bias, relu, z, y, math, dnnl::algorithm::convolution_winograd);
    if (!p.use_reference) return p;
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
  const std::string key = du::key("Conv", x.dims(), w.dims(), y.dims(), has_bias, relu, has_z, x.layout(), y.layout(),
                                  has_z ? z->layout() : Layout::Plain,
                                  n.attr_int("group", 1), n.attr_ints("kernel_shape"), n.attr_ints("strides"),
                                  n.attr_ints("dilations"), n.attr_ints("pads"), n.attr_string("auto_pad", "NOTSET"),
                                  math_precision_name(ctx.math), conv_algorithm_name(ctx.conv));
  auto plan =
      du::cached<ConvPlan>(key, [&] { return make_conv_plan(n, x, w, has_bias, relu, z, y, ctx.math, ctx.conv); });
  if (plan->use_reference) return du::run_reference(ctx);

  // Slots 0-2 hold the primitive's layouts, 3-4 the fp16 rounded copies (du::math_rounded).
  dnnl::memory src = gu::to_layout(plan->src_reorder, du::math_rounded(x, plan->src_user, ctx.math, 3), plan->src_md, 0);
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
    for (int64_t i = 0; i < count; ++i) py[i] += pz[i];
  }
}

void register_conv_dnnl(Registry& r) {
  if (r.schemas.find("", "Conv"))
    r.kernels.add("cpu", "", "Conv", [](KernelContext& ctx) { conv_forward_dnnl(ctx, /*relu=*/false); });
}

}  // namespace trainrt
