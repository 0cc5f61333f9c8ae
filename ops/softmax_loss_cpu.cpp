// The softmax_loss family's cpu kernels (ops/softmax_loss.cpp has the schemas and the
// reference kernels): Softmax and LogSoftmax on oneDNN's softmax_forward and
// logsoftmax_forward (below), ReduceMean, ReduceSum and ReduceMax on oneDNN's reduction
// primitive (reduction_mean, reduction_sum, reduction_max), fp32. SoftmaxCrossEntropyLoss and its
// gradient: the reference's loops (ops/softmax_loss_loops.h) over oneTBB chunks, bit for bit
// the reference.
//
//   ReduceMean(x[N,C,H,W], axes=[2,3], keepdims=1) -> y[N,C,1,1]
//
// y is described in its keepdims form (extent 1 on reduced axes), which has the bytes
// of the keepdims=0 form. Size-1 axes are dropped and neighbouring axes of one kind
// (kept or reduced) merged first, so [N,C,H,W] over [2,3] runs as [N*C, H*W] -> [N*C, 1].
// When no axis of extent > 1 is reduced (or noop_with_empty_axes with no axes) y is x,
// copied (a mean, sum or max of one element each). oneDNN accumulates in fp32, the reference in double: the results
// differ by the fp32 sum's rounding (tests/ops/test_cpu_vs_reference.cpp states the tolerance). The reference kernel
// runs for fp64, for an empty x (a mean of nothing is NaN there, a max -inf) and when oneDNN rejects the descriptors.
#include <algorithm>
#include <oneapi/dnnl/dnnl.hpp>

#include "ops/core/parallel.h"
#include "ops/core/register_all.h"
#include "ops/onednn/dnnl_util.h"
#include "ops/softmax_loss_loops.h"

namespace trainrt {
namespace {
namespace du = dnnl_util;

struct Plan {
  bool use_reference = false;
  dnnl::primitive prim;
  du::Md src, dst;
};

// The reduced axes (normalised): attribute `axes` (opset 13) or input 1 (opset 18);
// none given means every axis unless noop_with_empty_axes (then none).
std::vector<bool> reduced_axes(const KernelContext& ctx) {
  const Node& n = ctx.node;
  const int64_t r = ctx.in(0).rank();
  std::vector<int64_t> axes = n.attr_ints("axes");
  if (!n.has_attr("axes") && ctx.has_input(1))
    axes.assign(ctx.in(1).data<int64_t>(), ctx.in(1).data<int64_t>() + ctx.in(1).numel());
  std::vector<bool> reduced(static_cast<size_t>(r), axes.empty() && n.attr_int("noop_with_empty_axes", 0) == 0);
  for (int64_t a : axes) reduced[static_cast<size_t>(a < 0 ? a + r : a)] = true;
  return reduced;
}

template <dnnl::algorithm algorithm>
void reduce_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (x.dtype() != DataType::Float32 || x.numel() == 0) return du::run_reference(ctx);
  const std::vector<bool> reduced = reduced_axes(ctx);
  // Collapsed src dims and their kinds.
  std::vector<int64_t> src;
  std::vector<bool> kind;
  for (size_t d = 0; d < reduced.size(); ++d) {
    const int64_t e = x.dims()[d];
    if (e == 1) continue;
    if (!kind.empty() && kind.back() == reduced[d])
      src.back() *= e;
    else
      src.push_back(e), kind.push_back(reduced[d]);
  }
  if (std::find(kind.begin(), kind.end(), true) == kind.end())
    return parallel_copy(y.raw(), x.raw(), x.nbytes());  // one element each
  if (src.size() > DNNL_MAX_NDIMS) return du::run_reference(ctx);
  std::vector<int64_t> dst = src;
  for (size_t k = 0; k < dst.size(); ++k)
    if (kind[k]) dst[k] = 1;
  auto plan = du::cached<Plan>(du::key("Reduce", static_cast<int>(algorithm), src, dst), [&] {
    du::Md s = du::plain_desc(src), t = du::plain_desc(dst);
    try {
      dnnl::reduction::desc d(algorithm, s, t, 0.f, 0.f);
      dnnl::reduction::primitive_desc pd(d, du::attr(), du::engine());
      return Plan{false, dnnl::reduction(pd), s, t};
    } catch (const dnnl::error&) {
      return du::reference_plan<Plan>();
    }
  });
  if (plan->use_reference) return du::run_reference(ctx);
  du::execute(plan->prim, {{DNNL_ARG_SRC, du::memory_of(x, plan->src)}, {DNNL_ARG_DST, du::memory_of(y, plan->dst)}});
}

// ---- softmax -------------------------------------------------------------
// Softmax/LogSoftmax via softmax_forward/logsoftmax_forward:
//   Softmax y = exp(x - max) / sum exp(x - max) along `axis` (opset 13: one axis)
struct SoftmaxPlan {
  bool use_reference = false;
  dnnl::primitive prim;
  du::Md src0, src1, dst;
};

template <bool log>
void softmax_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  int64_t rank = std::max<int64_t>(x.rank(), 1);
  int64_t axis = ctx.node.attr_int("axis", -1);
  if (axis < 0) axis += rank;
  if (axis < 0 || axis >= rank || rank > DNNL_MAX_NDIMS) return du::run_reference(ctx);
  auto plan = du::cached<SoftmaxPlan>(du::key(log ? "LogSoftmax" : "Softmax", x.dims(), axis), [&] {
    du::Md md = du::plain_desc(x.dims());
    int ax = static_cast<int>(axis);
    if constexpr (log) {
      dnnl::logsoftmax_forward::primitive_desc pd(
          dnnl::logsoftmax_forward::desc(dnnl::prop_kind::forward_inference, md, ax), du::attr(), du::engine());
      return SoftmaxPlan{false, dnnl::logsoftmax_forward(pd), md, {}, md};
    } else {
      dnnl::softmax_forward::primitive_desc pd(dnnl::softmax_forward::desc(dnnl::prop_kind::forward_inference, md, ax),
                                               du::attr(), du::engine());
      return SoftmaxPlan{false, dnnl::softmax_forward(pd), md, {}, md};
    }
  });
  du::execute(plan->prim, {{DNNL_ARG_SRC, du::memory_of(x, plan->src0)}, {DNNL_ARG_DST, du::memory_of(y, plan->dst)}});
}

}  // namespace

void register_softmax_loss_cpu(Registry& r) {
  add_if_schema(r, "cpu", "", "Softmax", softmax_cpu<false>);
  add_if_schema(r, "cpu", "", "LogSoftmax", softmax_cpu<true>);
  add_if_schema(r, "cpu", "", "ReduceMean", reduce_cpu<dnnl::algorithm::reduction_mean>);
  add_if_schema(r, "cpu", "", "ReduceSum", reduce_cpu<dnnl::algorithm::reduction_sum>);
  add_if_schema(r, "cpu", "", "ReduceMax", reduce_cpu<dnnl::algorithm::reduction_max>);
  add_if_schema(r, "cpu", "", "SoftmaxCrossEntropyLoss", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { softmax_loops::sce_kernel<decltype(tag), true>(ctx); });
  });
  add_if_schema(r, "cpu", kTrainrtDomain, "SoftmaxCrossEntropyLossGrad", [](KernelContext& ctx) {
    dispatch_float(ctx.in(0).dtype(), [&](auto tag) { softmax_loops::sce_grad_kernel<decltype(tag), true>(ctx); });
  });
}

}  // namespace trainrt
