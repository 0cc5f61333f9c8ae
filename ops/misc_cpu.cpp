// Cast, Identity, Constant and Dropout (with its backward ops) on the cpu backend
// (ops/misc.cpp has the schemas and the reference kernels).
//
//   Identity(x) -> x, Constant() -> value     parallel copies (ops/core/parallel.h)
//   Dropout, DropoutGrad, DropoutReluGrad      the reference's loops over oneTBB chunks
//                                              (ops/misc_loops.h): the same mask, bit for bit
//   Cast(x, to)                                a copy when the dtype does not change;
//                                              oneDNN's reorder for the pairs below;
//                                              else the reference loop over oneTBB chunks
//
// oneDNN's reorder converts between f32, bf16, f16, s8, u8 and s32, but it rounds to
// nearest and saturates where Cast truncates toward zero and wraps (ops/core/cast.h). It is
// used only where both agree on every value, so the cpu kernel equals the reference
// bit for bit (NaN payloads aside):
//   to float32   from bfloat16, float16, int8, uint8 (exact), int32 (nearest even)
//   to float16   from float32 (nearest even), int8, uint8 (exact)
//   to bfloat16  from int8, uint8 (exact)
//   to int32     from int8, uint8 (exact)
// Not float32 -> bfloat16: oneDNN converts it with vcvtneps2bf16 on this CPU, which
// flushes subnormal inputs to zero; the reference rounds them (1e-39f -> 0x000b).
// Every other pair (float -> integer, narrowing integers, int64, float64, bool, ...)
// runs cast_elements<true>, the reference's own conversion; none falls back.
#include <oneapi/dnnl/dnnl.hpp>

#include "ops/core/cast.h"
#include "ops/core/kernel_facts.h"
#include "ops/core/parallel.h"
#include "ops/core/register_all.h"
#include "ops/misc_loops.h"
#include "ops/onednn/dnnl_util.h"

namespace trainrt {
namespace {
namespace du = dnnl_util;
using dt = dnnl::memory::data_type;

// oneDNN's name for a dtype it converts; undef for the others.
dt dnnl_type(DataType t) {
  switch (t) {
    case DataType::Float32:
      return dt::f32;
    case DataType::BFloat16:
      return dt::bf16;
    case DataType::Float16:
      return dt::f16;
    case DataType::Int8:
      return dt::s8;
    case DataType::UInt8:
      return dt::u8;
    case DataType::Int32:
      return dt::s32;
    default:
      return dt::undef;
  }
}

// True when oneDNN's reorder from `from` to `to` gives Cast's result for every value
// (the table at the top of this file).
bool reorder_is_exact(DataType from, DataType to) {
  const bool small_int = from == DataType::Int8 || from == DataType::UInt8;
  switch (to) {
    case DataType::Float32:
      return small_int || from == DataType::BFloat16 || from == DataType::Float16 || from == DataType::Int32;
    case DataType::Float16:
      return small_int || from == DataType::Float32;
    case DataType::BFloat16:
      return small_int;
    case DataType::Int32:
      return small_int;
    default:
      return false;
  }
}

struct CastPlan {
  bool use_loop = false;  // this machine's oneDNN has no reorder for the pair
  dnnl::reorder prim;
  du::Md src, dst;
};

void cast_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (x.numel() == 0) return;
  if (x.dtype() == y.dtype()) return parallel_copy(y.raw(), x.raw(), x.nbytes());
  if (!reorder_is_exact(x.dtype(), y.dtype())) return cast::cast_elements<true>(x, y);
  const auto plan =
      du::cached<CastPlan>(du::key("Cast", static_cast<int>(x.dtype()), static_cast<int>(y.dtype()), x.numel()), [&] {
        const du::Dims d{x.numel()};
        CastPlan p;
        p.src = du::Md(d, dnnl_type(x.dtype()), du::Dims{1});
        p.dst = du::Md(d, dnnl_type(y.dtype()), du::Dims{1});
        try {
          p.prim = dnnl::reorder(dnnl::reorder::primitive_desc(du::engine(), p.src, du::engine(), p.dst, du::attr()));
        } catch (const dnnl::error&) {
          p.use_loop = true;
        }
        return p;
      });
  if (plan->use_loop) return cast::cast_elements<true>(x, y);
  du::execute(plan->prim, {{DNNL_ARG_FROM, du::memory_of(x, plan->src)}, {DNNL_ARG_TO, du::memory_of(y, plan->dst)}});
}

void identity_cpu(KernelContext& ctx) { parallel_copy(ctx.out(0).raw(), ctx.in(0).raw(), ctx.in(0).nbytes()); }

void constant_cpu(KernelContext& ctx) {
  const Tensor& t = *ctx.node.attr_tensor("value");
  parallel_copy(ctx.out(0).raw(), t.raw(), t.nbytes());
}

}  // namespace

void register_misc_cpu(Registry& r) {
  add_if_schema(r, "cpu", "", "Cast", cast_cpu);
  add_if_schema(r, "cpu", "", "Identity", identity_cpu);
  add_if_schema(r, "cpu", "", "Constant", constant_cpu);

  add_if_schema(r, "cpu", "", "Dropout", misc_loops::dropout_kernel<true>, facts::dropout);
  add_if_schema(r, "cpu", kTrainrtDomain, "DropoutGrad", misc_loops::dropout_grad_kernel<true>, facts::dropout_grad);
  add_if_schema(r, "cpu", kTrainrtDomain, "DropoutReluGrad", misc_loops::dropout_relu_grad_kernel<true>,
                facts::dropout_grad);
}

}  // namespace trainrt
