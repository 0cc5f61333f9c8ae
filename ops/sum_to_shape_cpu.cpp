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
#include <algorithm>
#include <cstring>

#include "graph/error.h"
#include "ops/core/common.h"
#include "ops/cpu_grad_kernels.h"
#include "ops/core/parallel.h"
#include "ops/core/register_all.h"

namespace trainrt {
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

void register_sum_to_shape_cpu(Registry& r) {
  if (r.schemas.find(kTrainrtDomain, "SumToShape")) r.kernels.add("cpu", kTrainrtDomain, "SumToShape", sum_to_shape_cpu);
}

}  // namespace trainrt
