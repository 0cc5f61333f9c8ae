// Conv (fp32) on oneDNN's convolution_forward.
//
//   Y[N,M,*out] = sum_{c,k} X[N,g*C/G+c,*(out*s - pb + k*d)] * W[M,C/G,*k] + B[M]
//
// X, W, B, Y are row-major at the kernel interface. The primitive is created with
// format_tag::any for src/weights/dst so oneDNN picks its blocked layout (nChw16c,
// OIhw16i16o... on AVX-512); X and W are reordered into it and Y back out of it on
// every call. Caching the reordered W would need a weight version counter that
// Tensor does not have (buffer pointers are reused), so it is not done.
#include <oneapi/dnnl/dnnl.hpp>

#include "graph/error.h"
#include "ops/dnnl_util.h"
#include "ops/register_all.h"

namespace trainrt {
namespace {
namespace du = dnnl_util;

struct ConvPlan {
  bool use_reference = false;
  dnnl::primitive prim;
  du::Md src_plain, w_plain, dst_plain, bias_plain;  // row-major, at the kernel interface
  du::Md src_md, w_md, dst_md;                       // the layouts the primitive chose
  dnnl::reorder src_reorder, w_reorder, dst_reorder;  // empty when layouts match
};

ConvPlan make_conv_plan(const Node& n, const Tensor& x, const Tensor& w, bool has_bias, const Tensor& y) {
  ConvPlan p;
  const std::vector<int64_t>& xd = x.dims();
  const std::vector<int64_t>& wd = w.dims();
  const std::vector<int64_t>& yd = y.dims();
  std::vector<int64_t> in(xd.begin() + 2, xd.end()), out(yd.begin() + 2, yd.end()), k(wd.begin() + 2, wd.end());
  if (in.empty() || in.size() > 3) return du::reference_plan<ConvPlan>();
  du::Window win = du::window_of(n, in, out, k);
  int64_t group = n.attr_int("group", 1);

  // Grouped weights are the same bytes seen as G, M/G, C/G, *k.
  std::vector<int64_t> wg = wd;
  if (group > 1) {
    wg[0] = wd[0] / group;
    wg.insert(wg.begin(), group);
  }
  p.src_plain = du::plain_desc(xd);
  p.w_plain = du::plain_desc(wg);
  p.dst_plain = du::plain_desc(yd);
  p.bias_plain = du::plain_desc({wd[0]});
  du::Md bias_any = has_bias ? p.bias_plain : du::Md();
  du::Dims strides(win.strides.begin(), win.strides.end()), pl(win.pads_begin.begin(), win.pads_begin.end()),
      pr(win.pads_end.begin(), win.pads_end.end());
  try {
    dnnl::convolution_forward::desc d(dnnl::prop_kind::forward_inference, dnnl::algorithm::convolution_direct,
                                      du::any_desc(xd), du::any_desc(wg), bias_any, du::any_desc(yd), strides,
                                      du::dnnl_dilations(win.dilations), pl, pr);
    dnnl::convolution_forward::primitive_desc pd(d, du::attr(), du::engine());
    p.prim = dnnl::convolution_forward(pd);
    p.src_md = pd.src_desc();
    p.w_md = pd.weights_desc();
    p.dst_md = pd.dst_desc();
  } catch (const dnnl::error&) {
    return du::reference_plan<ConvPlan>();  // a window oneDNN rejects (e.g. pads >= kernel extent)
  }
  p.src_reorder = du::make_reorder(p.src_plain, p.src_md);
  p.w_reorder = du::make_reorder(p.w_plain, p.w_md);
  p.dst_reorder = du::make_reorder(p.dst_md, p.dst_plain);
  return p;
}

// Moves `user` into the primitive's layout (temp slot) when a reorder is planned.
dnnl::memory to_layout(const dnnl::reorder& r, const dnnl::memory& user, const du::Md& want, int slot) {
  if (!r) return user;
  dnnl::memory m = du::temp_memory(want, slot);
  du::reorder(r, user, m);
  return m;
}

void conv_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  const Tensor& x = ctx.in(0);
  const Tensor& w = ctx.in(1);
  Tensor& y = ctx.out(0);
  bool has_bias = ctx.has_input(2);
  if (y.numel() == 0) return;
  const Node& n = ctx.node;
  std::string key = du::key("Conv", x.dims(), w.dims(), y.dims(), has_bias, n.attr_int("group", 1),
                            n.attr_ints("kernel_shape"), n.attr_ints("strides"), n.attr_ints("dilations"),
                            n.attr_ints("pads"), n.attr_string("auto_pad", "NOTSET"));
  auto plan = du::cached<ConvPlan>(key, [&] { return make_conv_plan(n, x, w, has_bias, y); });
  if (plan->use_reference) return du::run_reference(ctx);

  dnnl::memory src = to_layout(plan->src_reorder, du::memory_of(x, plan->src_plain), plan->src_md, 0);
  dnnl::memory wts = to_layout(plan->w_reorder, du::memory_of(w, plan->w_plain), plan->w_md, 1);
  dnnl::memory dst_user = du::memory_of(y, plan->dst_plain);
  dnnl::memory dst = plan->dst_reorder ? du::temp_memory(plan->dst_md, 2) : dst_user;
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_SRC, src}, {DNNL_ARG_WEIGHTS, wts}, {DNNL_ARG_DST, dst}};
  if (has_bias) args[DNNL_ARG_BIAS] = du::memory_of(ctx.in(2), plan->bias_plain);
  du::execute(plan->prim, std::move(args));
  if (plan->dst_reorder) du::reorder(plan->dst_reorder, dst, dst_user);
}

}  // namespace

void register_conv_dnnl(Registry& r) {
  if (r.schemas.find("", "Conv")) r.kernels.add("cpu", "", "Conv", conv_cpu);
}

}  // namespace trainrt
