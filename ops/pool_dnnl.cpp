// MaxPool, AveragePool and GlobalAveragePool (fp32) on oneDNN's pooling_v2_forward.
//
//   Y[N,C,*out] = max / mean over the window at *(out*s - pb + k*d) of X[N,C,*]
//
// ONNX and oneDNN agree on the window; they differ in how the output size is
// stated. oneDNN needs padding_r such that out = (in + pb + pr - extent)/s + 1
// exactly, so pr is derived from the output size the shape rule computed
// (ceil_mode makes it larger than the ONNX end pad). Falls back to the reference
// kernel for: MaxPool's Indices output, AveragePool counting padding when that
// derived pr exceeds the ONNX end pad (the divisor rules differ there), and
// windows oneDNN rejects. X and Y are row-major or Blocked16c (runtime/layout.h):
// the primitive works in X's layout and Y is reordered out when its layout differs.
#include <oneapi/dnnl/dnnl.hpp>

#include "graph/error.h"
#include "ops/core/dnnl_util.h"
#include "ops/core/register_all.h"

namespace trainrt {
namespace {
namespace du = dnnl_util;

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

enum class PoolKind { Max, Average, GlobalAverage };

PoolPlan make_pool_plan(PoolKind kind, const Node& n, const Tensor& x, const Tensor& y) {
  PoolPlan p;
  const std::vector<int64_t>& xd = x.dims();
  const std::vector<int64_t>& yd = y.dims();
  std::vector<int64_t> in(xd.begin() + 2, xd.end()), out(yd.begin() + 2, yd.end());
  if (in.empty() || in.size() > 3) return du::reference_plan<PoolPlan>();
  du::Window win;
  dnnl::algorithm alg = dnnl::algorithm::pooling_max;
  if (kind == PoolKind::GlobalAverage) {
    win = du::Window{in, std::vector<int64_t>(in.size(), 1), std::vector<int64_t>(in.size(), 1),
                     std::vector<int64_t>(in.size(), 0), std::vector<int64_t>(in.size(), 0)};
    alg = dnnl::algorithm::pooling_avg_exclude_padding;
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
    if (alg == dnnl::algorithm::pooling_avg_include_padding && pr[i] > win.pads_end[i]) return du::reference_plan<PoolPlan>();
  }
  const bool blocked = x.layout() == Layout::Blocked16c;
  if (blocked && used != xd) return du::reference_plan<PoolPlan>();  // no blocked sub-block view
  p.src = blocked ? du::desc_of(x) : du::plain_desc(used);
  if (used != xd) {
    p.x_view = du::sub_block_desc(used, xd);
    p.crop = du::make_reorder(p.x_view, p.src);
  }
  p.dst = blocked ? du::Md(du::Dims(yd.begin(), yd.end()), dnnl::memory::data_type::f32,
                           dnnl::memory::format_tag::nChw16c)
                  : du::plain_desc(yd);
  p.y_user = du::desc_of(y);
  p.dst_reorder = du::make_reorder(p.dst, p.y_user);
  try {
    dnnl::pooling_v2_forward::desc d(dnnl::prop_kind::forward_inference, alg, p.src, p.dst,
                                     du::Dims(win.strides.begin(), win.strides.end()),
                                     du::Dims(win.kernel.begin(), win.kernel.end()), du::dnnl_dilations(win.dilations),
                                     du::Dims(win.pads_begin.begin(), win.pads_begin.end()), du::Dims(pr.begin(), pr.end()));
    p.prim = dnnl::pooling_v2_forward(dnnl::pooling_v2_forward::primitive_desc(d, du::attr(), du::engine()));
  } catch (const dnnl::error&) {
    return du::reference_plan<PoolPlan>();
  }
  return p;
}

template <PoolKind kind>
void pool_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx) || ctx.has_output(1)) return du::run_reference(ctx);  // Indices: reference
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  const Node& n = ctx.node;
  std::string key = du::key("Pool", static_cast<int>(kind), x.dims(), y.dims(), n.attr_ints("kernel_shape"),
                            n.attr_ints("strides"), n.attr_ints("dilations"), n.attr_ints("pads"),
                            n.attr_string("auto_pad", "NOTSET"), n.attr_int("count_include_pad", 0), x.layout(),
                            y.layout());
  auto plan = du::cached<PoolPlan>(key, [&] { return make_pool_plan(kind, n, x, y); });
  if (plan->use_reference) return du::run_reference(ctx);
  dnnl::memory src = plan->crop ? du::temp_memory(plan->src, 0) : du::memory_of(x, plan->src);
  if (plan->crop) du::reorder(plan->crop, du::memory_of(x, plan->x_view), src);
  dnnl::memory y_user = du::memory_of(y, plan->y_user);
  dnnl::memory dst = plan->dst_reorder ? du::temp_memory(plan->dst, 1) : y_user;
  du::execute(plan->prim, {{DNNL_ARG_SRC, src}, {DNNL_ARG_DST, dst}});
  if (plan->dst_reorder) du::reorder(plan->dst_reorder, dst, y_user);
}

}  // namespace

void register_pool_dnnl(Registry& r) {
  if (r.schemas.find("", "MaxPool")) r.kernels.add("cpu", "", "MaxPool", pool_cpu<PoolKind::Max>);
  if (r.schemas.find("", "AveragePool")) r.kernels.add("cpu", "", "AveragePool", pool_cpu<PoolKind::Average>);
  if (r.schemas.find("", "GlobalAveragePool"))
    r.kernels.add("cpu", "", "GlobalAveragePool", pool_cpu<PoolKind::GlobalAverage>);
}

}  // namespace trainrt
