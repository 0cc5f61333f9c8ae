// The elementwise family's cpu kernels (ops/elementwise.cpp has the schemas and the
// reference kernels): the activations and Add/Sub/Mul/Div (fp32) on oneDNN, activations
// via eltwise_forward, Add/Sub/Mul/Div via binary; then SumToShape. Sum, ReluGrad (a
// select, which oneDNN's relu backward is not for a NaN or Inf dY) and the ops that
// oneDNN 2.6 has no primitive for run the reference's loops
// (ops/elementwise_loops.h) over oneTBB chunks, bit for bit the reference.
//
//   Relu y = max(x,0)   LeakyRelu y = x<0 ? alpha*x : x   Sigmoid 1/(1+e^-x)   Tanh
//   Clip (clip_v2)   HardSwish   Sqrt   Gelu (gelu_erf, gelu_tanh)
//   (the unary ops by the `cpu` column of the table in ops/unary_ops.h)
//   Add/Sub/Mul/Div C[*] = A[*] op B[*] with numpy broadcasting
//
// Activations see the tensor as one flat vector (layout does not matter). Binary
// ops go to oneDNN when, after left-padding both shapes with 1s to the output
// rank, the first operand has the output's shape and the second has each dim 1
// or full (oneDNN 2.6 broadcasts src1 only); Add and Mul swap operands to get
// there. Other patterns and non-fp32 dtypes (int64 shape arithmetic) use the
// reference kernel.
#include <algorithm>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>

#include "graph/error.h"
#include "ops/core/common.h"
#include "ops/core/kernel_facts.h"
#include "ops/core/parallel.h"
#include "ops/core/register_all.h"
#include "ops/elementwise_loops.h"
#include "ops/onednn/dnnl_util.h"

namespace trainrt {
namespace {
namespace du = dnnl_util;

struct Plan {
  bool use_reference = false;
  dnnl::primitive prim;
  du::Md src0, src1, dst;
};

// ---- activations ---------------------------------------------------------
// oneDNN's alpha and beta: LeakyRelu is relu with a negative slope (plain Relu has
// alpha 0); Clip is clip_v2 between its bounds.
std::pair<float, float> eltwise_params(const KernelContext& ctx) {
  if (ctx.node.op_type == "LeakyRelu") return {ctx.node.attr_float("alpha", 0.01f), 0.f};
  if (ctx.node.op_type == "Clip") return elementwise_loops::clip_bounds<float>(ctx);
  // oneDNN 2.6's hardswish is x * relu6(x + 3) / 6; later versions read it as
  // x * clip(alpha x + beta, 0, 1), so pass ONNX's alpha and beta for either.
  if (ctx.node.op_type == "HardSwish") return {1.f / 6, 0.5f};
  return {0.f, 0.f};
}

template <dnnl::algorithm alg>
void eltwise_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  const std::pair<float, float> params = eltwise_params(ctx);
  const float alpha = params.first, beta = params.second;  // (clang 14 cannot capture bindings)
  auto plan = du::cached<Plan>(du::key("Eltwise", static_cast<int>(alg), x.numel(), alpha, beta), [&] {
    du::Md md = du::plain_desc({x.numel()});
    dnnl::eltwise_forward::desc d(dnnl::prop_kind::forward_inference, alg, md, alpha, beta);
    dnnl::eltwise_forward::primitive_desc pd(d, du::attr(), du::engine());
    return Plan{false, dnnl::eltwise_forward(pd), md, {}, md};
  });
  du::execute(plan->prim, {{DNNL_ARG_SRC, du::memory_of(x, plan->src0)}, {DNNL_ARG_DST, du::memory_of(y, plan->dst)}});
}

void gelu_cpu(KernelContext& ctx) {
  if (UnaryAttrs<unary_math::Gelu>::of(ctx.node).tanh_form) return eltwise_cpu<dnnl::algorithm::eltwise_gelu_tanh>(ctx);
  eltwise_cpu<dnnl::algorithm::eltwise_gelu_erf>(ctx);
}

// ---- binary --------------------------------------------------------------
std::vector<int64_t> left_pad(std::vector<int64_t> d, size_t rank) {
  d.insert(d.begin(), rank - d.size(), 1);
  return d;
}

bool broadcasts_to(const std::vector<int64_t>& small, const std::vector<int64_t>& full) {
  for (size_t i = 0; i < full.size(); ++i)
    if (small[i] != 1 && small[i] != full[i]) return false;
  return true;
}

template <dnnl::algorithm alg>
void binary_cpu(KernelContext& ctx) {
  if (!du::all_f32(ctx)) return du::run_reference(ctx);
  Tensor& c = ctx.out(0);
  if (c.numel() == 0) return;
  constexpr bool commutative = alg == dnnl::algorithm::binary_add || alg == dnnl::algorithm::binary_mul;
  const Tensor* a = &ctx.in(0);
  const Tensor* b = &ctx.in(1);
  size_t rank = std::max<size_t>(c.dims().size(), 1);
  if (rank > DNNL_MAX_NDIMS) return du::run_reference(ctx);
  std::vector<int64_t> cd = left_pad(c.dims(), rank), ad = left_pad(a->dims(), rank), bd = left_pad(b->dims(), rank);
  if (ad != cd && commutative) {
    std::swap(a, b);
    std::swap(ad, bd);
  }
  if (ad != cd || !broadcasts_to(bd, cd)) return du::run_reference(ctx);
  auto plan = du::cached<Plan>(du::key("Binary", static_cast<int>(alg), ad, bd), [&] {
    du::Md m0 = du::plain_desc(ad), m1 = du::plain_desc(bd), md = du::plain_desc(cd);
    try {
      dnnl::binary::primitive_desc pd(dnnl::binary::desc(alg, m0, m1, md), du::attr(), du::engine());
      return Plan{false, dnnl::binary(pd), m0, m1, md};
    } catch (const dnnl::error&) {
      return du::reference_plan<Plan>();
    }
  });
  if (plan->use_reference) return du::run_reference(ctx);
  du::execute(plan->prim, {{DNNL_ARG_SRC_0, du::memory_of(*a, plan->src0)},
                           {DNNL_ARG_SRC_1, du::memory_of(*b, plan->src1)},
                           {DNNL_ARG_DST, du::memory_of(c, plan->dst)}});
}

}  // namespace

// SumToShape(dY, X) -> dX on the cpu backend (oneTBB): dY summed over the axes
// where X was broadcast (ops/elementwise.cpp has the schema and the reference).
//
//   dY [N,C,H,W] -> dX [N,C,H,W]    a copy (the gradient of a same-shape Add); none
//                                   when the planner put dX over dY (runtime/plan.cpp)
//   dY [N,K]     -> dX [K]          dX[k] = sum over n of dY[n,k]   (a bias gradient)
//   dY [N,C,H,W] -> dX [1,C,1,1]    dX[c] = sum over n,h,w of dY[n,c,h,w]
//
// The axes are first collapsed: size-1 axes of dY are dropped and neighbouring axes
// of one kind (kept: dX has the extent; reduced: dX has 1) merged. Each dX element is
// the sum of its dY elements in increasing dY index, accumulated in T from 0: the
// reference kernel's order, so the result is the reference's bit for bit. The work
// is split over dX elements; when the innermost collapsed axis is kept (contiguous
// in dY and dX), a block of up to kBlock neighbouring dX elements is summed together
// so the inner loop runs over contiguous memory and vectorises.
namespace {

constexpr int64_t kBlock = 64;  // dX elements summed together on the contiguous path

struct Axis {
  int64_t size, dy_stride;
};

// dY's axes split into kept (dX's element order) and reduced ones, collapsed.
struct Collapsed {
  std::vector<Axis> kept, reduced;
  bool inner_kept = false;  // the innermost non-trivial axis is kept (dY stride 1)
};

Collapsed collapse(const std::vector<int64_t>& dy, const std::vector<int64_t>& dx) {
  const size_t lead = dy.size() - dx.size();
  Collapsed c;
  int last_kind = -1;  // 0 kept, 1 reduced
  int64_t stride = 1;
  // Innermost axis first; merged axes keep the innermost one's stride.
  for (size_t k = dy.size(); k-- > 0;) {
    const int64_t d = dy[k], e = k < lead ? 1 : dx[k - lead];
    if (d == 1) continue;
    const int kind = e == 1 ? 1 : 0;
    std::vector<Axis>& list = kind ? c.reduced : c.kept;
    if (kind == last_kind)
      list.back().size *= d;
    else
      list.push_back({d, stride});
    if (last_kind < 0) c.inner_kept = kind == 0;
    last_kind = kind;
    stride *= d;
  }
  std::reverse(c.kept.begin(), c.kept.end());  // outermost first, like dX's index
  std::reverse(c.reduced.begin(), c.reduced.end());
  return c;
}

// Offset in dY of the first element that dX element j reads.
int64_t base_of(const std::vector<Axis>& kept, int64_t j) {
  int64_t off = 0;
  for (size_t k = kept.size(); k-- > 0 && j > 0;) {
    off += (j % kept[k].size) * kept[k].dy_stride;
    j /= kept[k].size;
  }
  return off;
}

// Calls f(offset) with the dY offset of each multi-index of `axes`, in increasing
// (lexicographic) order; not at all when one of them has extent 0.
template <typename F>
void for_each_offset(const std::vector<Axis>& axes, F&& f) {
  for (const Axis& a : axes)
    if (a.size == 0) return;
  std::vector<int64_t> idx(axes.size(), 0);
  int64_t off = 0;
  for (;;) {
    f(off);
    size_t k = axes.size();
    for (; k-- > 0;) {
      off += axes[k].dy_stride;
      if (++idx[k] < axes[k].size) break;
      off -= axes[k].size * axes[k].dy_stride;
      idx[k] = 0;
    }
    if (k == static_cast<size_t>(-1)) return;
  }
}

template <typename T>
void sum_to_shape(const Tensor& dy_t, Tensor& dx_t) {
  const T* dy = dy_t.data<T>();
  T* dx = dx_t.data<T>();
  const int64_t n = dx_t.numel();
  if (n == dy_t.numel()) {  // nothing is broadcast: dX is dY (a no-op when in place)
    if (dx != dy)
      parallel_chunks(
          n, [&](int64_t b, int64_t e) { std::memcpy(dx + b, dy + b, static_cast<size_t>(e - b) * sizeof(T)); });
    return;
  }
  Collapsed c = collapse(dy_t.dims(), dx_t.dims());
  int64_t r = 1;
  for (const Axis& a : c.reduced) r *= a.size;
  // Innermost axis kept: blocks of up to kBlock neighbouring dX elements. Reduced: one
  // dX element at a time, its contiguous innermost run of dY summed in a row.
  const int64_t inner = c.inner_kept ? c.kept.back().size : 1;
  const int64_t run = c.inner_kept ? 1 : c.reduced.back().size;
  if (!c.inner_kept) c.reduced.pop_back();
  const int64_t per_run = (inner + kBlock - 1) / kBlock, items = n / inner * per_run;
  const int64_t grain = std::max<int64_t>(1, kGrain / std::max<int64_t>(1, r * std::min(inner, kBlock)));
  parallel_ranges(items, grain, [&](int64_t first, int64_t last) {
    T acc[kBlock];
    for (int64_t it = first; it < last; ++it) {
      const int64_t j0 = it / per_run * inner + it % per_run * kBlock;
      const int64_t w = std::min(kBlock, inner - it % per_run * kBlock);
      const T* p0 = dy + base_of(c.kept, j0);
      for (int64_t q = 0; q < w; ++q) acc[q] = T(0);
      if (c.inner_kept) {
        for_each_offset(c.reduced, [&](int64_t o) {
          const T* p = p0 + o;
          for (int64_t q = 0; q < w; ++q) acc[q] += p[q];
        });
      } else {
        T a = T(0);
        for_each_offset(c.reduced, [&](int64_t o) {
          const T* p = p0 + o;
          for (int64_t t = 0; t < run; ++t) a += p[t];
        });
        acc[0] = a;
      }
      std::memcpy(dx + j0, acc, static_cast<size_t>(w) * sizeof(T));
    }
  });
}

void sum_to_shape_cpu(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  Tensor& dx = ctx.out(0);
  TRAINRT_ASSERT(dx.rank() <= dy.rank());
  dispatch_float(dy.dtype(), [&](auto tag) { sum_to_shape<decltype(tag)>(dy, dx); });
}

}  // namespace

// The cpu kernel of a table op (ops/unary_ops.h) by its `cpu` column.
#define TRAINRT_CPU_KERNEL_loop(Op) elementwise_loops::unary_op_kernel<true, unary_math::Op>
#define TRAINRT_CPU_KERNEL_eltwise_relu(Op) eltwise_cpu<dnnl::algorithm::eltwise_relu>
#define TRAINRT_CPU_KERNEL_eltwise_logistic(Op) eltwise_cpu<dnnl::algorithm::eltwise_logistic>
#define TRAINRT_CPU_KERNEL_eltwise_tanh(Op) eltwise_cpu<dnnl::algorithm::eltwise_tanh>
#define TRAINRT_CPU_KERNEL_eltwise_hardswish(Op) eltwise_cpu<dnnl::algorithm::eltwise_hardswish>
#define TRAINRT_CPU_KERNEL_eltwise_sqrt(Op) eltwise_cpu<dnnl::algorithm::eltwise_sqrt>
#define TRAINRT_CPU_KERNEL_gelu(Op) gelu_cpu

void register_elementwise_cpu(Registry& r) {
  // The unary table: oneDNN's eltwise where the table names one, else the shared loop
  // over oneTBB chunks (Exp, Log, Reciprocal: libm's exp and log, not oneDNN's
  // polynomial approximations, so both backends give the same bits); gradients always
  // the loop.
#define TRAINRT_CPU_UNARY(Op, since, flops, cpu) \
  add_if_schema(r, "cpu", "", #Op, TRAINRT_CPU_KERNEL_##cpu(Op), facts::elementwise);
#define TRAINRT_CPU_UNARY_GRAD(Op, since, flops, Grad, reads, grad_flops, cpu)                                 \
  TRAINRT_CPU_UNARY(Op, since, flops, cpu)                                                                     \
  add_if_schema(r, "cpu", kTrainrtDomain, #Grad, elementwise_loops::unary_grad_kernel<true, unary_math::Grad>, \
                facts::elementwise);
  TRAINRT_UNARY_OPS(TRAINRT_CPU_UNARY_GRAD)
  TRAINRT_UNARY_OPS_COMPOSITE_GRAD(TRAINRT_CPU_UNARY)
#undef TRAINRT_CPU_UNARY_GRAD
#undef TRAINRT_CPU_UNARY

  add_if_schema(r, "cpu", "", "Add", binary_cpu<dnnl::algorithm::binary_add>, facts::elementwise);
  add_if_schema(r, "cpu", "", "Sub", binary_cpu<dnnl::algorithm::binary_sub>, facts::elementwise);
  add_if_schema(r, "cpu", "", "Mul", binary_cpu<dnnl::algorithm::binary_mul>, facts::elementwise);
  add_if_schema(r, "cpu", "", "Div", binary_cpu<dnnl::algorithm::binary_div>, facts::elementwise);
  add_if_schema(r, "cpu", "", "Sum", elementwise_loops::sum_kernel<true>, facts::elementwise);
  add_if_schema(r, "cpu", "", "Clip", eltwise_cpu<dnnl::algorithm::eltwise_clip_v2>, facts::clip);
  // No oneDNN 2.6 primitive (Pow with a tensor exponent, Where, Equal, the backward
  // ops): the reference loops over oneTBB chunks (ops/elementwise_loops.h).
  add_if_schema(r, "cpu", "", "Pow", elementwise_loops::pow_kernel<true>, facts::elementwise);
  add_if_schema(r, "cpu", "", "Where", elementwise_loops::where_kernel<true>, facts::elementwise);
  add_if_schema(r, "cpu", "", "Equal", elementwise_loops::equal_kernel<true>, facts::elementwise);
  add_if_schema(r, "cpu", "", "Mod", elementwise_loops::mod_kernel<true>, facts::elementwise);
  add_if_schema(r, "cpu", "", "Not", elementwise_loops::not_kernel<true>, facts::elementwise);
  add_if_schema(r, "cpu", "", "Greater", elementwise_loops::greater_kernel<true>, facts::elementwise);
  add_if_schema(r, "cpu", "", "Less", elementwise_loops::less_kernel<true>, facts::elementwise);
  add_if_schema(r, "cpu", "", "GreaterOrEqual", elementwise_loops::greater_or_equal_kernel<true>, facts::elementwise);
  add_if_schema(r, "cpu", "", "LessOrEqual", elementwise_loops::less_or_equal_kernel<true>, facts::elementwise);
  add_if_schema(r, "cpu", kTrainrtDomain, "ClipGrad", elementwise_loops::clip_grad_kernel<true>, facts::clip);
  add_if_schema(r, "cpu", kTrainrtDomain, "PowGrad", elementwise_loops::pow_grad_kernel<true>, facts::elementwise);
  add_if_schema(r, "cpu", kTrainrtDomain, "SumToShape", sum_to_shape_cpu, facts::sum_to_shape);
}

}  // namespace trainrt
