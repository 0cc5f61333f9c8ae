// Shape ops on the cpu backend (ops/shape_ops.cpp has the schemas, the shape rules
// and the reference kernels). Every kernel moves bytes, so one kernel serves every
// dtype and equals the reference bit for bit.
//
//   Flatten, Reshape, ReshapeLike   a parallel copy (ops/core/parallel.h)
//   Transpose(x, perm)              oneDNN reorder from a permuted-strides view of x
//   Concat(x0, x1, ..., axis)       oneDNN concat of the inputs seen as [outer, block_i]
//   Pad(x, pads, value)             oneTBB over output rows: fill, copy, fill (constant mode;
//                                   edge, reflect and wrap run the reference loop)
//   Squeeze, Unsqueeze              a parallel copy
//   Gather, Slice, Split, Expand, Range, ConstantOfShape, GatherGrad, SliceGrad:
//                                   the reference loops over oneTBB chunks of rows (shape_kernels)
//
// oneDNN's reorder and concat are given the elements as words: 4- and 8-byte elements
// as one or two s32, 1- and 2-byte elements as one or two u8 (an 8- or 2-byte element
// is an innermost axis of 2 words that stays in place). A reorder between two s32 or
// two u8 memories is a plain copy, so no value is converted. Transpose first drops
// size-1 axes and merges axes that stay neighbours in the output; it goes to the
// reference kernel only when more than DNNL_MAX_NDIMS (12) axes remain (with the word
// axis), or when oneDNN rejects the descriptors.
#include <algorithm>
#include <cstring>
#include <oneapi/dnnl/dnnl.hpp>

#include "ops/core/parallel.h"
#include "ops/core/register_all.h"
#include "ops/onednn/dnnl_util.h"
#include "ops/shape_ops.h"

namespace trainrt {
namespace {
namespace du = dnnl_util;
using dt = dnnl::memory::data_type;

struct Words {
  dt type;
  int64_t per_element;
};

Words words_of(size_t element_bytes) {
  switch (element_bytes) {
    case 1:
      return {dt::u8, 1};
    case 2:
      return {dt::u8, 2};
    case 4:
      return {dt::s32, 1};
    case 8:
      return {dt::s32, 2};
    default:
      return {dt::undef, 0};
  }
}

du::Dims row_major_strides(const du::Dims& d) {
  du::Dims s(d.size(), 1);
  for (size_t i = d.size(); i-- > 1;) s[i - 1] = s[i] * d[i];
  return s;
}

struct Plan {
  bool use_reference = false;
  dnnl::primitive prim;
  std::vector<du::Md> src;
  du::Md dst;
};

// ---- Flatten, Reshape, ReshapeLike ------------------------------------------------

void copy_cpu(KernelContext& ctx) { parallel_copy(ctx.out(0).raw(), ctx.in(0).raw(), ctx.in(0).nbytes()); }

// ---- Transpose --------------------------------------------------------------------

// x's dims and perm with size-1 axes dropped and axes that are neighbours in both x
// and y merged: [N,C,H,W] perm [0,2,3,1] -> [N,C,H*W] perm [0,2,1].
struct Collapsed {
  std::vector<int64_t> dims, perm;
};
Collapsed collapse(const std::vector<int64_t>& xd, const std::vector<int64_t>& perm) {
  std::vector<std::vector<int64_t>> groups;  // x axes, in y's order
  for (int64_t p : perm) {
    if (xd[static_cast<size_t>(p)] == 1) continue;
    if (!groups.empty() && groups.back().back() + 1 == p)
      groups.back().push_back(p);
    else
      groups.push_back({p});
  }
  std::vector<size_t> by_x(groups.size());  // groups in x's order
  for (size_t g = 0; g < groups.size(); ++g) by_x[g] = g;
  std::sort(by_x.begin(), by_x.end(), [&](size_t a, size_t b) { return groups[a][0] < groups[b][0]; });
  Collapsed c;
  c.perm.resize(groups.size());
  for (size_t k = 0; k < by_x.size(); ++k) {
    int64_t size = 1;
    for (int64_t a : groups[by_x[k]]) size *= xd[static_cast<size_t>(a)];
    c.dims.push_back(size);
    c.perm[by_x[k]] = static_cast<int64_t>(k);
  }
  return c;
}

void transpose_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  const size_t es = dtype_size(x.dtype());
  const Collapsed c = collapse(x.dims(), transpose_perm(ctx.node, x.rank()));
  bool identity = true;
  for (size_t k = 0; k < c.perm.size(); ++k) identity = identity && c.perm[k] == static_cast<int64_t>(k);
  if (identity) return parallel_copy(y.raw(), x.raw(), x.nbytes());
  const Words w = words_of(es);
  const size_t rank = c.dims.size() + (w.per_element > 1 ? 1 : 0);
  if (w.type == dt::undef || rank > DNNL_MAX_NDIMS) return du::run_reference(ctx);
  auto plan = du::cached<Plan>(du::key("Transpose", c.dims, c.perm, static_cast<int64_t>(es)), [&] {
    du::Dims xd(c.dims.begin(), c.dims.end());
    if (w.per_element > 1) xd.push_back(w.per_element);
    const du::Dims xs = row_major_strides(xd);
    du::Dims yd, src_strides;  // y's dims; x's strides seen in y's axis order
    for (int64_t p : c.perm) {
      yd.push_back(xd[static_cast<size_t>(p)]);
      src_strides.push_back(xs[static_cast<size_t>(p)]);
    }
    if (w.per_element > 1) yd.push_back(w.per_element), src_strides.push_back(1);
    Plan p;
    p.src = {du::Md(yd, w.type, src_strides)};
    p.dst = du::Md(yd, w.type, row_major_strides(yd));
    try {
      p.prim = dnnl::reorder(dnnl::reorder::primitive_desc(du::engine(), p.src[0], du::engine(), p.dst, du::attr()));
    } catch (const dnnl::error&) {
      return du::reference_plan<Plan>();
    }
    return p;
  });
  if (plan->use_reference) return du::run_reference(ctx);
  du::execute(plan->prim,
              {{DNNL_ARG_FROM, du::memory_of(x, plan->src[0])}, {DNNL_ARG_TO, du::memory_of(y, plan->dst)}});
}

// ---- Concat -----------------------------------------------------------------------

// Along `axis`, a row-major tensor is [outer, block] with block = the product of the
// dims from axis on; y's row o is every input's row o in turn, so the concat is one
// along axis 1 of these 2-D views, whatever the rank.
void concat_cpu(KernelContext& ctx) {
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  const size_t axis = concat_axis(ctx.node, y.rank());
  int64_t outer = 1;
  for (size_t d = 0; d < axis; ++d) outer *= y.dims()[d];
  std::vector<const Tensor*> parts;  // inputs with elements (oneDNN rejects empty ones)
  for (const Tensor* t : ctx.inputs)
    if (t->numel() > 0) parts.push_back(t);
  if (parts.size() == 1) return parallel_copy(y.raw(), parts[0]->raw(), parts[0]->nbytes());
  const Words w = words_of(dtype_size(y.dtype()));
  if (w.type == dt::undef) return du::run_reference(ctx);
  std::vector<int64_t> blocks;
  for (const Tensor* t : parts) blocks.push_back(t->numel() / outer * w.per_element);
  auto plan = du::cached<Plan>(du::key("Concat", outer, blocks, static_cast<int>(w.type)), [&] {
    Plan p;
    int64_t total = 0;
    for (int64_t b : blocks) {
      p.src.push_back(du::Md({outer, b}, w.type, du::Dims{b, 1}));
      total += b;
    }
    p.dst = du::Md({outer, total}, w.type, du::Dims{total, 1});
    try {
      p.prim = dnnl::concat(dnnl::concat::primitive_desc(p.dst, 1, p.src, du::engine(), du::attr()));
    } catch (const dnnl::error&) {
      return du::reference_plan<Plan>();
    }
    return p;
  });
  if (plan->use_reference) return du::run_reference(ctx);
  std::unordered_map<int, dnnl::memory> args{{DNNL_ARG_DST, du::memory_of(y, plan->dst)}};
  for (size_t i = 0; i < parts.size(); ++i)
    args[DNNL_ARG_MULTIPLE_SRC + static_cast<int>(i)] = du::memory_of(*parts[i], plan->src[i]);
  du::execute(plan->prim, std::move(args));
}

// ---- Pad --------------------------------------------------------------------------

// y = x shifted by the begin pads, `value` elsewhere (negative pads crop), one output
// row (innermost axis) at a time: W is the element's bytes as an unsigned word.
template <typename W>
void pad_rows(const Tensor& x, Tensor& y, const std::vector<int64_t>& pads, W value) {
  const std::vector<int64_t>& xd = x.dims();
  const std::vector<int64_t>& yd = y.dims();
  const size_t r = xd.size(), last = r - 1;
  std::vector<int64_t> xs(r, 1);  // x's row-major strides
  for (size_t d = r; d-- > 1;) xs[d - 1] = xs[d] * xd[d];
  const int64_t inner = yd[last], begin = pads[last];
  // Columns [j0, j1) of every inside row come from x's columns [j0 - begin, j1 - begin).
  const int64_t j0 = std::clamp<int64_t>(begin, 0, inner);
  const int64_t j1 = std::max(j0, std::clamp<int64_t>(begin + xd[last], 0, inner));
  const W* px = x.data<W>();
  W* py = y.data<W>();
  for_rows<true>(y.numel() / inner, inner, [&](int64_t row0, int64_t row1) {
    std::vector<int64_t> idx(last);  // row0's index over y's outer axes
    for (size_t d = last, q = static_cast<size_t>(row0); d-- > 0;) {
      idx[d] = static_cast<int64_t>(q % static_cast<size_t>(yd[d]));
      q /= static_cast<size_t>(yd[d]);
    }
    for (int64_t row = row0; row < row1; ++row) {
      W* out = py + row * inner;
      int64_t src = j0 - begin;
      bool inside = true;
      for (size_t d = 0; d < last && inside; ++d) {
        const int64_t i = idx[d] - pads[d];
        inside = i >= 0 && i < xd[d];
        src += i * xs[d];
      }
      if (!inside) {
        std::fill(out, out + inner, value);
      } else {
        std::fill(out, out + j0, value);
        if (j1 > j0) std::copy(px + src, px + src + (j1 - j0), out + j0);
        std::fill(out + j1, out + inner, value);
      }
      for (size_t d = last; d-- > 0;) {
        if (++idx[d] < yd[d]) break;
        idx[d] = 0;
      }
    }
  });
}

template <typename W>
void pad_as(KernelContext& ctx) {
  W value{};
  if (ctx.has_input(2) && ctx.in(2).numel() > 0) std::memcpy(&value, ctx.in(2).raw(), sizeof(W));
  pad_rows<W>(ctx.in(0), ctx.out(0), pad_amounts(ctx), value);
}

void pad_cpu(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return;
  if (x.rank() == 0) return parallel_copy(y.raw(), x.raw(), x.nbytes());                      // nothing to pad
  if (ctx.node.attr_string("mode", "constant") != "constant") return du::run_reference(ctx);  // edge, reflect, wrap
  switch (dtype_size(x.dtype())) {
    case 1:
      return pad_as<uint8_t>(ctx);
    case 2:
      return pad_as<uint16_t>(ctx);
    case 4:
      return pad_as<uint32_t>(ctx);
    case 8:
      return pad_as<uint64_t>(ctx);
    default:
      return du::run_reference(ctx);
  }
}

}  // namespace

void register_shape_ops_cpu(Registry& r) {
  add_if_schema(r, "cpu", "", "Flatten", copy_cpu);
  add_if_schema(r, "cpu", "", "Reshape", copy_cpu);
  add_if_schema(r, "cpu", kTrainrtDomain, "ReshapeLike", copy_cpu);
  add_if_schema(r, "cpu", "", "Transpose", transpose_cpu);
  add_if_schema(r, "cpu", "", "Concat", concat_cpu);
  add_if_schema(r, "cpu", "", "Pad", pad_cpu);
  const ShapeKernels& k = shape_kernels(/*parallel=*/true);
  add_if_schema(r, "cpu", "", "Shape", shape_of_kernel);
  add_if_schema(r, "cpu", "", "ConstantOfShape", k.constant_of_shape);
  add_if_schema(r, "cpu", "", "Range", k.range);
  add_if_schema(r, "cpu", "", "Gather", k.gather);
  add_if_schema(r, "cpu", "", "Unsqueeze", copy_cpu);
  add_if_schema(r, "cpu", "", "Squeeze", copy_cpu);
  add_if_schema(r, "cpu", "", "Slice", k.slice);
  add_if_schema(r, "cpu", "", "Split", k.split);
  add_if_schema(r, "cpu", "", "Expand", k.expand);
  add_if_schema(r, "cpu", "", "ScatterND", k.scatter_nd);
  add_if_schema(r, "cpu", kTrainrtDomain, "GatherGrad", k.gather_grad);
  add_if_schema(r, "cpu", kTrainrtDomain, "SliceGrad", k.slice_grad);
}

}  // namespace trainrt
