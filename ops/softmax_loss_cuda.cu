// The cuda backend's loss kernels, float32: SoftmaxCrossEntropyLoss and its gradient
// SoftmaxCrossEntropyLossGrad, with int64 or int32 labels, optional class weights,
// reduction mean/sum/none, ignore_index (ops/softmax_loss.cpp's header gives the maths;
// the reference's loops are ops/softmax_loss_loops.h); ReduceMean and ReduceSum over
// attribute axes (the global pool of exported CNNs) and their gradients ReduceMeanGrad
// and ReduceSumGrad. Softmax, LogSoftmax and ReduceMax run on the host.
//
//   SoftmaxCrossEntropyLoss      one thread per sample (n, d1..): its row's log_softmax
//                                in double (max subtracted), the log_prob output, its loss
//                                and weight; mean/sum add the blocks' partial sums, then
//                                one block adds those, in a fixed order
//   SoftmaxCrossEntropyLossGrad  the mean's denominator as partial sums too, then one
//                                thread per sample writes its C gradients
//   ReduceMean, ReduceSum        one thread per output element, summing its reduced
//                                elements in double in the reference's order, / count
//   ReduceMeanGrad, ReduceSumGrad  one thread per dX element: dY at its reduced index (/ count)
//
// Why own kernels: the loss closes every training step, so a host fallback here would
// cost a synchronisation and the migration of the logits' pages each step. The
// per-sample loops are the reference's; only the order of the final sums differs (a
// tree instead of one sequential loop), so results may differ by rounding.
//
// A device kernel cannot throw: where the reference rejects a label outside [0, C) that
// is not ignore_index, these kernels make that sample's loss and gradient NaN (and with
// it the mean or sum), so the NaN check after the step stops training.
//
// Host fallbacks (reference kernel after a stream synchronisation): dtypes other than
// float32 (training on the cuda backend is fp32, and each dtype is another kernel for
// every GPU architecture in the binary), labels other than int64/int32; reductions whose
// axes are an input (opset 18 ReduceMean, ReduceSum from opset 13: the plan knows them,
// the kernel would have to read device memory) or above rank 8.
//
// Compiled in CI, run only where a GPU exists (trainrt selftest --device cuda).
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <string>

#include "graph/error.h"
#include "ops/core/softmax_math.h"
#include "ops/cuda/cuda_util.h"

namespace trainrt::cuda {

namespace {

// Blocks of the partial-sum kernels: each writes one (loss, weight) pair to the workspace.
constexpr unsigned kMaxPartials = 256;

// Label k as int64 whatever the stored width.
struct Labels {
  const void* p = nullptr;
  bool wide = true;  // int64; else int32
  __device__ int64_t operator[](int64_t k) const {
    return wide ? static_cast<const int64_t*>(p)[k] : static_cast<const int32_t*>(p)[k];
  }
};

// Scores [N, C, D] (D = d1*d2*...), labels [N, D]: rows = N * D samples.
struct Sizes {
  int64_t rows = 0, C = 0, D = 1;
  bool has_ignore = false;
  int64_t ignore_index = 0;
};

// Sample weight: 0 when ignored, NaN for a label the reference rejects, else w[l] (1 without weights).
template <typename T>
__device__ double sample_weight(int64_t l, const T* w, const Sizes& s) {
  if (s.has_ignore && l == s.ignore_index) return 0.0;
  if (l < 0 || l >= s.C) return nan("");
  return w ? static_cast<double>(w[l]) : 1.0;
}

// Adds (loss, weight) over the block and stores them as partials[2 * blockIdx.x ...].
__device__ void store_partials(double loss, double weight, double* partials) {
  double v[2] = {loss, weight};
  block_sum(v);
  if (threadIdx.x == 0) {
    partials[2 * blockIdx.x] = v[0];
    partials[2 * blockIdx.x + 1] = v[1];
  }
}

// ---- SoftmaxCrossEntropyLoss -------------------------------------------------------

// log_prob (optional) and the per-sample loss: written to loss_none (reduction none) or
// added into this block's partial sums (mean, sum).
template <typename T>
__global__ void sce_rows_kernel(const T* x, Labels labels, const T* w, T* log_prob, T* loss_none, double* partials,
                                Sizes s) {
  double loss_sum = 0, weight_sum = 0;
  TRAINRT_GRID_STRIDE(k, s.rows) {
    const int64_t n = k / s.D, d = k - n * s.D;
    const T* row = x + n * s.C * s.D + d;
    double m, log_sum;
    softmax_math::log_normaliser(row, s.C, s.D, m, log_sum);  // the reference's
    if (log_prob) {
      T* out = log_prob + n * s.C * s.D + d;
      for (int64_t c = 0; c < s.C; ++c) out[c * s.D] = static_cast<T>(static_cast<double>(row[c * s.D]) - m - log_sum);
    }
    const int64_t l = labels[k];
    const double wl = sample_weight(l, w, s);
    double loss = 0;  // ignored: 0
    if (!(s.has_ignore && l == s.ignore_index))
      loss = l < 0 || l >= s.C ? wl : -wl * (static_cast<double>(row[l * s.D]) - m - log_sum);
    if (loss_none) loss_none[k] = static_cast<T>(loss);
    loss_sum += loss;
    weight_sum += wl;
  }
  if (partials) store_partials(loss_sum, weight_sum, partials);
}

// One block: y = sum of the partial losses (sum) or that over the sum of the weights
// (mean; every sample ignored gives 0/0 = NaN, as the reference).
template <typename T>
__global__ void sce_total_kernel(const double* partials, unsigned count, bool mean, T* y) {
  double v[2] = {0, 0};
  for (unsigned b = threadIdx.x; b < count; b += blockDim.x) {
    v[0] += partials[2 * b];
    v[1] += partials[2 * b + 1];
  }
  block_sum(v);
  if (threadIdx.x == 0) y[0] = static_cast<T>(mean ? v[0] / v[1] : v[0]);
}

// ---- SoftmaxCrossEntropyLossGrad --------------------------------------------------

// The partial sums of the sample weights (the mean's denominator; NaN for a bad label).
template <typename T>
__global__ void sce_weight_kernel(Labels labels, const T* w, double* partials, Sizes s) {
  double weight_sum = 0;
  TRAINRT_GRID_STRIDE(k, s.rows) weight_sum += sample_weight(labels[k], w, s);
  store_partials(0.0, weight_sum, partials);
}

// dScores[n,c,d] = g * (exp(log_prob[n,c,d]) - [c == l]), g = w[l] * dLoss (/ the weight
// sum for mean); 0 for ignored samples, NaN for bad labels. `partials` (mean only) holds
// `count` pairs from sce_weight_kernel, added by each block's thread 0 in a fixed order.
template <typename T>
__global__ void sce_grad_kernel(const T* dloss, const T* lp, Labels labels, const T* w, T* dx, const double* partials,
                                unsigned count, bool none, Sizes s) {
  __shared__ double weight_sum;
  if (threadIdx.x == 0) {
    weight_sum = 0;
    if (partials)
      for (unsigned b = 0; b < count; ++b) weight_sum += partials[2 * b + 1];
  }
  __syncthreads();
  TRAINRT_GRID_STRIDE(k, s.rows) {
    const int64_t n = k / s.D, d = k - n * s.D;
    const int64_t at = n * s.C * s.D + d;
    const int64_t l = labels[k];
    const bool ignored = s.has_ignore && l == s.ignore_index;
    double g = 0;
    if (!ignored) {
      g = sample_weight(l, w, s) * static_cast<double>(none ? dloss[k] : dloss[0]);
      if (partials) g /= weight_sum;
    }
    for (int64_t c = 0; c < s.C; ++c) {
      const int64_t i = at + c * s.D;
      dx[i] = static_cast<T>(ignored ? 0.0 : softmax_math::loss_grad(g, static_cast<double>(lp[i]), c == l));
    }
  }
}

// f(float{}) and true for float32; false (the caller falls back) for other dtypes.
template <typename F>
bool with_fp32(DataType t, F&& f) {
  return t == DataType::Float32 ? (f(float{}), true) : false;
}

// Sizes and labels of a loss node; false (the caller falls back) for labels of another dtype.
bool loss_sizes(const KernelContext& ctx, const Tensor& scores, const Tensor& labels, Sizes& s, Labels& l) {
  if (labels.dtype() != DataType::Int64 && labels.dtype() != DataType::Int32) return false;
  l.p = labels.raw();
  l.wide = labels.dtype() == DataType::Int64;
  s.C = scores.dims()[1];
  s.rows = labels.numel();
  for (size_t d = 2; d < scores.dims().size(); ++d) s.D *= scores.dims()[d];
  s.has_ignore = ctx.node.has_attr("ignore_index");
  s.ignore_index = ctx.node.attr_int("ignore_index", 0);
  return true;
}

void sce(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Sizes s;
  Labels labels;
  if (!loss_sizes(ctx, x, ctx.in(1), s, labels) || !with_fp32(x.dtype(), [&](auto tag) {
        using T = decltype(tag);
        const Context& c = context();
        const std::string reduction = ctx.node.attr_string("reduction", "mean");
        const T* w = ctx.has_input(2) ? ctx.in(2).data<T>() : nullptr;
        T* log_prob = ctx.has_output(1) ? ctx.out(1).data<T>() : nullptr;
        T* y = ctx.out(0).data<T>();
        if (reduction == "none") {
          if (s.rows == 0) return;
          sce_rows_kernel<T>
              <<<blocks_for(s.rows), kThreads, 0, c.stream>>>(x.data<T>(), labels, w, log_prob, y, nullptr, s);
          check_launch(ctx.node, "sce_rows_kernel");
          return;
        }
        const unsigned blocks = std::min(blocks_for(s.rows), kMaxPartials);
        double* partials = static_cast<double*>(workspace(2 * sizeof(double) * blocks));
        sce_rows_kernel<T><<<blocks, kThreads, 0, c.stream>>>(x.data<T>(), labels, w, log_prob, nullptr, partials, s);
        check_launch(ctx.node, "sce_rows_kernel");
        sce_total_kernel<T><<<1, kThreads, 0, c.stream>>>(partials, blocks, reduction == "mean", y);
        check_launch(ctx.node, "sce_total_kernel");
      }))
    run_reference(ctx);
}

void sce_grad(KernelContext& ctx) {
  const Tensor& lp = ctx.in(1);
  Sizes s;
  Labels labels;
  if (!loss_sizes(ctx, lp, ctx.in(2), s, labels) || !with_fp32(lp.dtype(), [&](auto tag) {
        using T = decltype(tag);
        if (s.rows == 0) return;
        const Context& c = context();
        const std::string reduction = ctx.node.attr_string("reduction", "mean");
        const T* w = ctx.has_input(3) ? ctx.in(3).data<T>() : nullptr;
        const unsigned blocks = blocks_for(s.rows);
        double* partials = nullptr;
        unsigned count = 0;
        if (reduction == "mean") {
          count = std::min(blocks, kMaxPartials);
          partials = static_cast<double*>(workspace(2 * sizeof(double) * count));
          sce_weight_kernel<T><<<count, kThreads, 0, c.stream>>>(labels, w, partials, s);
          check_launch(ctx.node, "sce_weight_kernel");
        }
        sce_grad_kernel<T><<<blocks, kThreads, 0, c.stream>>>(ctx.in(0).data<T>(), lp.data<T>(), labels, w,
                                                              ctx.out(0).data<T>(), partials, count,
                                                              reduction == "none", s);
        check_launch(ctx.node, "sce_grad_kernel");
      }))
    run_reference(ctx);
}

// ---- ReduceMean, ReduceSum and their gradients ----------------------------------

constexpr int kMaxReduceRank = 8;

// x's axes split into kept (y's, in order) and reduced ones, each with x's stride.
struct ReduceGeometry {
  int kept = 0, reduced = 0;
  int64_t kept_dims[kMaxReduceRank] = {}, kept_strides[kMaxReduceRank] = {};
  int64_t red_dims[kMaxReduceRank] = {}, red_strides[kMaxReduceRank] = {};
  int64_t count = 1;  // x elements per y element

  // x's offset of the first element of y element o, and of reduced element j.
  __device__ int64_t kept_offset(int64_t o) const { return strided_offset(o, kept, kept_dims, kept_strides); }
  __device__ int64_t reduced_offset(int64_t j) const { return strided_offset(j, reduced, red_dims, red_strides); }
};

// Which of x's axes the node reduces; false where the kernel does not take the node
// (axes as an input, rank above 8, an axis out of range).
bool reduced_axes(const Node& n, const std::vector<int64_t>& xd, std::vector<bool>& reduced) {
  if (!n.has_attr("axes") && n.input_count() > 1) return false;
  if (xd.size() > static_cast<size_t>(kMaxReduceRank)) return false;
  const std::vector<int64_t> axes = n.attr_ints("axes");
  const bool noop = axes.empty() && n.attr_int("noop_with_empty_axes", 0) != 0;
  const auto r = static_cast<int64_t>(xd.size());
  reduced.assign(xd.size(), axes.empty() && !noop);
  for (int64_t a : axes) {
    const int64_t d = a < 0 ? a + r : a;
    if (d < 0 || d >= r) return false;
    reduced[static_cast<size_t>(d)] = true;
  }
  return true;
}

// The forward's geometry: kept and reduced axes with x's strides.
ReduceGeometry forward_geometry(const std::vector<int64_t>& xd, const std::vector<bool>& reduced) {
  ReduceGeometry g;
  int64_t stride = 1;
  std::vector<int64_t> strides(xd.size());
  for (size_t d = xd.size(); d-- > 0;) strides[d] = stride, stride *= xd[d];
  for (size_t d = 0; d < xd.size(); ++d) {
    if (reduced[d]) {
      g.red_dims[g.reduced] = xd[d];
      g.red_strides[g.reduced++] = strides[d];
      g.count *= xd[d];
    } else {
      g.kept_dims[g.kept] = xd[d];
      g.kept_strides[g.kept++] = strides[d];
    }
  }
  return g;
}

// The gradient's geometry: every x axis "kept", with y's stride (0 on reduced axes), so
// kept_offset(k) is the y element x element k was summed into.
ReduceGeometry backward_geometry(const std::vector<int64_t>& xd, const std::vector<bool>& reduced) {
  ReduceGeometry g;
  g.kept = static_cast<int>(xd.size());
  int64_t ystride = 1;
  for (size_t d = xd.size(); d-- > 0;) {
    g.kept_dims[d] = xd[d];
    g.kept_strides[d] = reduced[d] ? 0 : ystride;
    if (!reduced[d])
      ystride *= xd[d];
    else
      g.count *= xd[d];
  }
  return g;
}

template <typename T>
__global__ void reduce_kernel(const T* x, T* y, int64_t n, ReduceGeometry g, double div) {
  TRAINRT_GRID_STRIDE(o, n) {
    const int64_t base = g.kept_offset(o);
    double acc = 0;
    for (int64_t j = 0; j < g.count; ++j) acc += static_cast<double>(x[base + g.reduced_offset(j)]);
    y[o] = static_cast<T>(acc / div);
  }
}

template <typename T>
__global__ void reduce_grad_kernel(const T* dy, T* dx, int64_t n, ReduceGeometry g, double div) {
  TRAINRT_GRID_STRIDE(k, n) { dx[k] = static_cast<T>(static_cast<double>(dy[g.kept_offset(k)]) / div); }
}

template <bool kMean>
void reduce(KernelContext& ctx) {
  const Tensor& x = ctx.in(0);
  Tensor& y = ctx.out(0);
  std::vector<bool> reduced;
  if (x.dtype() != DataType::Float32 || !reduced_axes(ctx.node, x.dims(), reduced)) return run_reference(ctx);
  const int64_t n = y.numel();
  if (n == 0) return;
  const ReduceGeometry g = forward_geometry(x.dims(), reduced);
  reduce_kernel<<<blocks_for(n), kThreads, 0, context().stream>>>(x.data<float>(), y.data<float>(), n, g,
                                                                  kMean ? static_cast<double>(g.count) : 1.0);
  check_launch(ctx.node, "reduce_kernel");
}

template <bool kMean>
void reduce_grad(KernelContext& ctx) {
  const Tensor& dy = ctx.in(0);
  Tensor& dx = ctx.out(0);
  std::vector<bool> reduced;
  if (dy.dtype() != DataType::Float32 || !reduced_axes(ctx.node, ctx.in(1).dims(), reduced)) return run_reference(ctx);
  const int64_t n = dx.numel();
  if (n == 0) return;
  const ReduceGeometry g = backward_geometry(ctx.in(1).dims(), reduced);
  reduce_grad_kernel<<<blocks_for(n), kThreads, 0, context().stream>>>(dy.data<float>(), dx.data<float>(), n, g,
                                                                       kMean ? static_cast<double>(g.count) : 1.0);
  check_launch(ctx.node, "reduce_grad_kernel");
}

}  // namespace

void register_softmax_loss_cuda(Registry& r) {
  add_if_schema(r, "cuda", "", "SoftmaxCrossEntropyLoss", sce);
  add_if_schema(r, "cuda", kTrainrtDomain, "SoftmaxCrossEntropyLossGrad", sce_grad);
  for (const char* op : {"SoftmaxCrossEntropyLoss", "SoftmaxCrossEntropyLossGrad"}) {  // the partial sums, at most
    const std::string domain = std::string(op) == "SoftmaxCrossEntropyLoss" ? "" : kTrainrtDomain;
    if (r.kernels.find("cuda", domain, op))
      r.kernels.set_workspace("cuda", domain, op,
                              [](const KernelContext&) { return 2 * sizeof(double) * kMaxPartials; });
  }
  add_if_schema(r, "cuda", "", "ReduceMean", reduce<true>);
  add_if_schema(r, "cuda", "", "ReduceSum", reduce<false>);
  add_if_schema(r, "cuda", kTrainrtDomain, "ReduceMeanGrad", reduce_grad<true>);
  add_if_schema(r, "cuda", kTrainrtDomain, "ReduceSumGrad", reduce_grad<false>);
}

}  // namespace trainrt::cuda
