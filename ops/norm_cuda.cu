// The cuda backend's BatchNormalization, BatchNormalizationRelu and
// BatchNormalizationGrad: own kernels that follow ops/norm.cpp's formulas output for
// output (cuDNN saves an inverse std and updates running statistics its own way).
//
//   x, dy: N,C,S (S = product of spatial dims); each channel has M = N*S values, the
//   j-th (j over n, then s) at (n*C + c)*S + s.
//   pass 1   grid (C, G): block (c, g) sums x over slice g of channel c       -> sums[C,G]
//   pass 2   the same slices: sum (x - mean)^2 [, dy, dy * (x - mean)]       -> devs[C,G,K]
//   finish   one thread per channel: mean, biased variance, the optional outputs,
//            and the per-channel coefficients of
//   apply    per plane of S values (the channel looked up once a plane, four fp32 values
//            per 16-byte access where S % 4 == 0): Y = (x - mean) * scale / sqrt(var + eps) + B [then Relu],
//            or dX = scale * r * (dy - dBias/M - (x - mean) * r * dScale/M)
// ChannelsLast (NHWC) x, y, dy, dx (runtime/layout.h; all of a node's in one layout): the
// j-th value of channel c at j*C + c. The statistics passes then give each block 32
// adjacent channels and 8 rows of threads striding the slice's positions, so a warp
// reads 128 contiguous bytes (coalesced); the rows' sums are added in row order. apply
// walks the values with their channel (TRAINRT_CHANNELS_LAST), fp32 four channels per
// 16-byte access where C % 4 == 0. The slicing (grids, slices, row sums, slice_sums) is
// ops/cuda/channel_slices.h's, which ConvGrad's 16-bit bias gradient uses too.
// BatchNormalizationGrad's input 5, relu_y (the training fusion's ReLU gradient): every
// read of dy is masked as ReluGrad masks it, relu_y > 0 ? dy : 0, no copy made.
// Inference runs finish (from input_mean/input_var) and apply only. The gradient with
// the forward's saved statistics (inputs 3/4) skips pass 1 and sums only dy and
// dy * (x - mean) in pass 2 (slice_grad_sums), one read of x and dy fewer.
//
// Each kernel that reads X, dY or relu_y is compiled per storage (Storage: all float32,
// all half bits, all bfloat16 bits, or each as it says at run time where they differ):
// the launch picks the one the node's tensors share, so no element waits on a branch.
//
// Why this shape: the statistics are two passes like the reference (mean first, then
// squared deviations: no cancellation), accumulated in double and combined in a fixed
// order, so they match the reference's to double rounding and repeat bit for bit run to
// run on one device. G (slices a channel: ops/cuda/channel_grid.h, from the tensor's shape
// and the device's SM count, at least 8 blocks an SM where each block still gets 2048
// values) fills the GPU at every layer; partial sums live in cuda::workspace. Only apply works
// in T (with coefficients rounded to T), which is where results differ by rounding.
//
// Training follows the reference's rule: ctx.training, training_mode = 1, or any output
// besides Y requested; running = input * momentum + batch * (1 - momentum); the 4th and
// 5th outputs, and trainrt's 6th and 7th (saved_mean, saved_var), are the batch mean and
// the biased batch variance.
//
// Host fallbacks (reference kernel after a stream synchronisation): dtypes other than
// float32/float64, which the shape rules reject anyway.
//
// Compiled in CI, run only where a GPU exists (trainrt selftest --device cuda); the
// saved-statistics path has been compiled, not run, and so have the storage-specialised
// kernels and the cuDNN graphs on 16-bit storage (written after the last GPU run;
// docs/gpu-runs.md says what was measured before).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <optional>
#include <string>
#include <type_traits>

#include "graph/error.h"
#include "ops/core/batchnorm_stats.h"
#include "ops/core/kernel_facts.h"
#include "ops/core/storage_choice.h"
#include "ops/cuda/channel_slices.h"
#include "ops/cuda/cuda_load16.h"
#include "ops/cuda/cuda_util.h"
#include "ops/norm_cuda.h"
#include "ops/norm_graph_cuda.h"

namespace trainrt::cuda {

namespace {

using channel_slices::Channels, channel_slices::channels_of, channel_slices::slice_grid, channel_slices::last_channel,
    channel_slices::for_slice_last, channel_slices::store_rows, channel_slices::for_slice,
    channel_slices::channel_total, channel_slices::slice_sums, channel_slices::part_index, channel_slices::parts_bytes;
using storage_choice::Storage, storage_choice::Given, storage_choice::common_storage;

// ops/norm.cpp's rule for when the node computes batch statistics.
bool node_trains(const Node& n, bool executor_training) {
  if (executor_training || n.attr_int("training_mode", 0) == 1) return true;
  for (size_t i = 1; i < n.outputs.size(); ++i)
    if (n.has_output(i)) return true;
  return false;
}

// A 16-bit value's float32 widening, the storage (ops/core/storage_choice.h) known at
// compile time.
template <Storage S>
__device__ inline float widen16(uint16_t v) {
  if constexpr (S == Storage::half) {
    return half_to_float(v);
  } else {
    return bfloat16_to_float(v);
  }
}

// x or dy as the kernels read it: float32 or float64 (p), or a float32 value's 16-bit
// bits (p16) where it is stored so (runtime/narrow.h; its writer rounded it, so the
// widening is the value itself). The float4 paths take p only.
template <typename T, Storage S = Storage::any>
struct In {
  const T* p = nullptr;
  const uint16_t* p16 = nullptr;
  bool bf16 = false;
  __device__ T operator[](int64_t i) const {
    if constexpr (S == Storage::wide) {
      return p[i];
    } else if constexpr (S == Storage::any) {
      return p16 ? static_cast<T>(load_at(Load16{p16, bf16}, i)) : p[i];
    } else {
      return static_cast<T>(widen16<S>(p16[i]));
    }
  }
  template <Storage S2>
  __host__ __device__ In<T, S2> as() const {
    return {p, p16, bf16};
  }
};
// relu_y as the mask reads it: an In (its 16-bit widening is exact, so the test is the
// same); neither p nor p16: no mask.
template <typename T, Storage S = Storage::any>
using ReluY = In<T, S>;
template <typename T>
In<T> in_of(const KernelContext& ctx, const Tensor& t) {
  if (stored_narrow(ctx, t)) return In<T>{nullptr, t.data<uint16_t>(), ctx.math == MathPrecision::bf16};
  return In<T>{t.data<T>()};
}

// The storage of one tensor a kernel reads (none: an empty In, no mask).
template <typename A>
Given given(const A& a) {
  if (a.p16) return a.bf16 ? Given::bf16 : Given::half;
  return a.p ? Given::wide : Given::none;
}
// The variant for `all`: their common storage; kernels in float64 (never stored in 16
// bits) keep the one general instantiation.
template <typename T>
Storage storage_of(std::initializer_list<Given> all) {
  if constexpr (!std::is_same_v<T, float>) {
    return Storage::any;
  } else {
    return common_storage(all);
  }
}
// f(std::integral_constant<Storage, s>{}): the launch of the kernels specialised for `s`.
template <typename F>
void with_storage(Storage s, F&& f) {
  switch (s) {
    case Storage::wide:
      f(std::integral_constant<Storage, Storage::wide>{});
      return;
    case Storage::half:
      f(std::integral_constant<Storage, Storage::half>{});
      return;
    case Storage::bf16:
      f(std::integral_constant<Storage, Storage::bf16>{});
      return;
    case Storage::any:
      f(std::integral_constant<Storage, Storage::any>{});
      return;
  }
}

// dy[i], or 0 where relu_y (when given) is not positive: ReluGrad's select. dy is read
// first, so its load does not wait on the mask's.
template <typename T, Storage S>
__device__ T masked_dy(const In<T, S>& dy, const ReluY<T, S>& relu_y, int64_t i) {
  const T g = dy[i];
  return (relu_y.p || relu_y.p16) && !(relu_y[i] > T(0)) ? T(0) : g;
}
__device__ float4 masked_dy4(const float4* dy, const float4* relu_y, int64_t i) {
  float4 g = dy[i];
  if (!relu_y) return g;
  const float4 r = relu_y[i];
  return make_float4(r.x > 0.f ? g.x : 0.f, r.y > 0.f ? g.y : 0.f, r.z > 0.f ? g.z : 0.f, r.w > 0.f ? g.w : 0.f);
}

// Pass 2: devs[c, g, :] = sums over the slice of (x - mean)^2 and, for the gradient
// (K = 3, dy given), dy and dy * (x - mean).
template <typename T, int K, Storage S>
__global__ void slice_deviations(In<T, S> x, In<T, S> dy, ReluY<T, S> relu_y, Channels v, const double* sums,
                                 double* devs) {
  __shared__ double block_mean;
  const int64_t c = v.last ? last_channel() : blockIdx.x;
  double mean = 0;
  if (v.last) {
    if (c < v.C) mean = channel_total(sums, v, c, 1, 0) / static_cast<double>(v.M);
  } else {
    if (threadIdx.x == 0) block_mean = channel_total(sums, v, c, 1, 0) / static_cast<double>(v.M);
    __syncthreads();
    mean = block_mean;
  }
  double acc[K] = {};
  auto visit = [&](int64_t i) {
    const double d = static_cast<double>(x[i]) - mean;
    acc[0] += d * d;
    if constexpr (K == 3) {
      const double g = static_cast<double>(masked_dy(dy, relu_y, i));
      acc[1] += g;
      acc[2] += g * d;
    }
  };
  if (v.last) {
    for_slice_last(v, c, visit);
    store_rows(acc, v, c, devs);
    return;
  }
  for_slice(v, visit);
  block_sum(acc);
  if (threadIdx.x == 0)
    for (int k = 0; k < K; ++k) devs[part_index(v, blockIdx.x, blockIdx.y, K, k)] = acc[k];
}

// The gradient's one pass with saved statistics: grads[c, g, :] = sums over the slice of
// dy and dy * (x - mean[c]).
template <typename T, Storage S>
__global__ void slice_grad_sums(In<T, S> x, In<T, S> dy, ReluY<T, S> relu_y, Channels v, const T* mean, double* grads) {
  const int64_t c = v.last ? last_channel() : blockIdx.x;
  const double m = c < v.C ? static_cast<double>(mean[c]) : 0.0;
  double acc[2] = {};
  auto visit = [&](int64_t i) {
    const double g = static_cast<double>(masked_dy(dy, relu_y, i));
    acc[0] += g;
    acc[1] += g * (static_cast<double>(x[i]) - m);
  };
  if (v.last) {
    for_slice_last(v, c, visit);
    store_rows(acc, v, c, grads);
    return;
  }
  for_slice(v, visit);
  block_sum(acc);
  if (threadIdx.x == 0)
    for (int k = 0; k < 2; ++k) grads[part_index(v, blockIdx.x, blockIdx.y, 2, k)] = acc[k];
}

// The forward's per-channel inputs, optional outputs (nullptr when not requested) and
// apply coefficients: Y = (x - shift) * mul + add.
template <typename T>
struct ForwardArgs {
  const T *scale, *bias, *mean, *var;
  batchnorm_stats::ChannelOutputs<T> outs;  // outputs 1..6
  T *shift, *mul, *add;
  double eps, momentum;
  bool training;
};

template <typename T>
__global__ void forward_finish(ForwardArgs<T> a, Channels v, const double* sums, const double* devs) {
  TRAINRT_GRID_STRIDE(c, v.C) {
    double m = static_cast<double>(a.mean[c]), var = static_cast<double>(a.var[c]);
    if (a.training) {
      const double count = static_cast<double>(v.M);
      const double batch_mean = channel_total(sums, v, c, 1, 0) / count;
      const double batch_var = channel_total(devs, v, c, 1, 0) / count;
      batchnorm_stats::write_channel(a.outs, c, m, var, batch_mean, batch_var, a.momentum);
      m = batch_mean;
      var = batch_var;
    }
    a.shift[c] = static_cast<T>(m);
    a.mul[c] = static_cast<T>(static_cast<double>(a.scale[c]) / sqrt(var + a.eps));
    a.add[c] = a.bias[c];
  }
}

// Y = (x - shift[c]) * mul[c] + add[c], then max(., 0) with NaN to 0 as ops/fused.cpp does;
// per plane (TRAINRT_PLANES), four fp32 values per 16-byte access with kVec4.
template <typename T, bool kRelu>
__device__ T apply_one(T x, T shift, T mul, T add) {
  T out = batchnorm_stats::apply(x, shift, mul, add);  // the reference's formula, in T
  if constexpr (kRelu) out = out > T(0) ? out : T(0);
  return out;
}
// y: a T* (the float4 path too) or a Store16 (Y stored in 16 bits, scalar path only).
template <typename T, bool kRelu, bool kVec4, Storage St, typename Out>
__global__ void forward_apply(In<T, St> x, Out y, int64_t planes, int64_t C, int64_t S, const T* shift, const T* mul,
                              const T* add) {
  TRAINRT_PLANES(p, planes) {
    const int64_t c = p % C;
    const T sh = shift[c], mu = mul[c], ad = add[c];
    if constexpr (kVec4) {
      const auto* x4 = reinterpret_cast<const float4*>(x.p + p * S);
      auto* y4 = reinterpret_cast<float4*>(y + p * S);
      TRAINRT_GRID_STRIDE(i, S / 4) {
        const float4 v = x4[i];
        y4[i] = make_float4(apply_one<float, kRelu>(v.x, sh, mu, ad), apply_one<float, kRelu>(v.y, sh, mu, ad),
                            apply_one<float, kRelu>(v.z, sh, mu, ad), apply_one<float, kRelu>(v.w, sh, mu, ad));
      }
    } else {
      TRAINRT_GRID_STRIDE(i, S) { store_at(y, p * S + i, apply_one<T, kRelu>(x[p * S + i], sh, mu, ad)); }
    }
  }
}

// forward_apply for ChannelsLast: n values (kVec4: n/4 groups of four channels, C in
// groups) with their channels.
template <typename T, bool kRelu, bool kVec4, Storage St, typename Out>
__global__ void forward_apply_last(In<T, St> x, Out y, int64_t n, int64_t C, const T* shift, const T* mul,
                                   const T* add) {
  if constexpr (kVec4) {
    const auto* x4 = reinterpret_cast<const float4*>(x.p);
    auto* y4 = reinterpret_cast<float4*>(y);
    TRAINRT_CHANNELS_LAST(i, g, n / 4, C / 4) {
      const int64_t c = 4 * g;
      const float4 v = x4[i];
      y4[i] = make_float4(apply_one<float, kRelu>(v.x, shift[c], mul[c], add[c]),
                          apply_one<float, kRelu>(v.y, shift[c + 1], mul[c + 1], add[c + 1]),
                          apply_one<float, kRelu>(v.z, shift[c + 2], mul[c + 2], add[c + 2]),
                          apply_one<float, kRelu>(v.w, shift[c + 3], mul[c + 3], add[c + 3]));
    }
  } else {
    TRAINRT_CHANNELS_LAST(i, c, n, C) { store_at(y, i, apply_one<T, kRelu>(x[i], shift[c], mul[c], add[c])); }
  }
}

// Per channel, with r = 1/sqrt(var + eps): dBias = sum dy, dScale = r * sum dy * (x - mean),
// and dX's coefficients: dX = k * (dy - bias_term - (x - mean) * x_term).
// saved_mean/saved_var: the forward's statistics (grads holds K = 2 sums: dy, dy * (x - mean)),
// or nullptr (recomputed from sums and devs, K = 3).
template <typename T>
struct GradArgs {
  const T *scale, *saved_mean, *saved_var;
  ReluY<T> relu_y;    // none unless input 5; 16-bit: scalar paths only
  T *dscale, *dbias;  // nullptr when not requested
  T *mean, *k, *bias_term, *x_term;
  double eps;
};

template <typename T>
__global__ void grad_finish(GradArgs<T> a, Channels v, const double* sums, const double* devs) {
  TRAINRT_GRID_STRIDE(c, v.C) {
    const double count = static_cast<double>(v.M);
    const bool saved = a.saved_mean != nullptr;
    const double mean = saved ? static_cast<double>(a.saved_mean[c]) : channel_total(sums, v, c, 1, 0) / count;
    const double var = saved ? static_cast<double>(a.saved_var[c]) : channel_total(devs, v, c, 3, 0) / count;
    const double r = batchnorm_stats::inv_std(var, a.eps);
    const int K = saved ? 2 : 3;
    const double g_bias = channel_total(devs, v, c, K, K - 2);
    const double g_scale = channel_total(devs, v, c, K, K - 1) * r;
    if (a.dbias) a.dbias[c] = static_cast<T>(g_bias);
    if (a.dscale) a.dscale[c] = static_cast<T>(g_scale);
    a.mean[c] = static_cast<T>(mean);
    a.k[c] = static_cast<T>(static_cast<double>(a.scale[c]) * r);
    a.bias_term[c] = static_cast<T>(g_bias / count);
    a.x_term[c] = static_cast<T>(r * g_scale / count);
  }
}

// dX per plane (TRAINRT_PLANES), as forward_apply.
// dx: a T* (the float4 path too) or a Store16 (dX stored in 16 bits, scalar path only).
template <typename T, bool kVec4, Storage St, typename Out>
__global__ void grad_apply(In<T, St> dy, In<T, St> x, Out dx, int64_t planes, int64_t C, int64_t S, GradArgs<T> a) {
  const ReluY<T, St> relu_y = a.relu_y.template as<St>();
  TRAINRT_PLANES(p, planes) {
    const int64_t c = p % C;
    const T k = a.k[c], bt = a.bias_term[c], m = a.mean[c], xt = a.x_term[c];
    const int64_t at = p * S;
    if constexpr (kVec4) {
      const auto* dy4 = reinterpret_cast<const float4*>(dy.p + at);
      const auto* r4 = a.relu_y.p ? reinterpret_cast<const float4*>(a.relu_y.p + at) : nullptr;
      const auto* x4 = reinterpret_cast<const float4*>(x.p + at);
      auto* dx4 = reinterpret_cast<float4*>(dx + at);
      TRAINRT_GRID_STRIDE(i, S / 4) {
        const float4 g = masked_dy4(dy4, r4, i), v = x4[i];
        dx4[i] =
            make_float4(batchnorm_stats::grad(g.x, v.x, m, k, bt, xt), batchnorm_stats::grad(g.y, v.y, m, k, bt, xt),
                        batchnorm_stats::grad(g.z, v.z, m, k, bt, xt), batchnorm_stats::grad(g.w, v.w, m, k, bt, xt));
      }
    } else {
      TRAINRT_GRID_STRIDE(i, S) {
        store_at(dx, at + i, batchnorm_stats::grad(masked_dy(dy, relu_y, at + i), x[at + i], m, k, bt, xt));
      }
    }
  }
}

// grad_apply for ChannelsLast, as forward_apply_last.
template <typename T>
__device__ T grad_one(T g, T v, const GradArgs<T>& a, int64_t c) {
  return batchnorm_stats::grad(g, v, a.mean[c], a.k[c], a.bias_term[c], a.x_term[c]);
}
template <typename T, bool kVec4, Storage St, typename Out>
__global__ void grad_apply_last(In<T, St> dy, In<T, St> x, Out dx, int64_t n, int64_t C, GradArgs<T> a) {
  if constexpr (kVec4) {
    const auto* dy4 = reinterpret_cast<const float4*>(dy.p);
    const auto* r4 = reinterpret_cast<const float4*>(a.relu_y.p);
    const auto* x4 = reinterpret_cast<const float4*>(x.p);
    auto* dx4 = reinterpret_cast<float4*>(dx);
    TRAINRT_CHANNELS_LAST(i, g, n / 4, C / 4) {
      const int64_t c = 4 * g;
      const float4 d = masked_dy4(dy4, r4, i), v = x4[i];
      dx4[i] = make_float4(grad_one(d.x, v.x, a, c), grad_one(d.y, v.y, a, c + 1), grad_one(d.z, v.z, a, c + 2),
                           grad_one(d.w, v.w, a, c + 3));
    }
  } else {
    const ReluY<T, St> relu_y = a.relu_y.template as<St>();
    TRAINRT_CHANNELS_LAST(i, c, n, C) { store_at(dx, i, grad_one(masked_dy(dy, relu_y, i), x[i], a, c)); }
  }
}

// The forward's outputs 1..6 from the cuDNN graph's batch mean and inverse std
// (ops/norm_graph_cuda.h): the biased variance recovered from the inverse std, running
// statistics by ONNX's rule, as forward_finish writes them.
__global__ void graph_forward_finish(batchnorm_stats::ChannelOutputs<float> outs, const float* input_mean,
                                     const float* input_var, const float* mean, const float* inv_std, int64_t C,
                                     double eps, double momentum) {
  TRAINRT_GRID_STRIDE(c, C) {
    const double var = batchnorm_stats::variance_of_inv_std(static_cast<double>(inv_std[c]), eps);
    batchnorm_stats::write_channel(outs, c, static_cast<double>(input_mean[c]), static_cast<double>(input_var[c]),
                                   static_cast<double>(mean[c]), var, momentum);
  }
}

// inv_std[c] = 1/sqrt(var[c] + eps): the saved variance as cuDNN's backward reads it.
__global__ void inv_std_of(const float* var, float* inv_std, int64_t C, double eps) {
  TRAINRT_GRID_STRIDE(c, C) { inv_std[c] = static_cast<float>(batchnorm_stats::inv_std(var[c], eps)); }
}

// Bytes of `arrays` arrays of C floats at the front of the workspace, before a graph's own
// workspace (rounded to 256 bytes, so the graph's workspace keeps the buffer's alignment).
size_t graph_stats_bytes(int64_t C, int arrays) {
  const size_t bytes = static_cast<size_t>(arrays) * static_cast<size_t>(C) * sizeof(float);
  return (bytes + 255) / 256 * 256;
}

// Workspace: sums[C, slices], devs[C, slices, K] (doubles), then `coefficients` arrays
// of C values of T for the apply kernel.
struct Scratch {
  double *sums, *devs;
  void* coefficients;
};

// The grid (and so parts_bytes) is channels_of's, the same for the plan-time rule below
// and the call.
size_t scratch_bytes(const Channels& v, int K, int coefficients, size_t t_bytes) {
  return parts_bytes(v, 1) + parts_bytes(v, K) + static_cast<size_t>(coefficients) * static_cast<size_t>(v.C) * t_bytes;
}

template <typename T>
Scratch scratch(const Channels& v, int K, int coefficients) {
  auto* w = static_cast<double*>(workspace(scratch_bytes(v, K, coefficients, sizeof(T))));
  double* devs = w + parts_bytes(v, 1) / sizeof(double);
  return {w, devs, devs + parts_bytes(v, K) / sizeof(double)};
}

// The cuDNN graph's arguments for a forward call (ops/norm_graph_cuda.h): its batch mean
// and inverse std at the front of the workspace; without `mean` (planning) no buffers.
BnForwardGraphArgs forward_graph_args(const KernelContext& ctx, float* mean = nullptr) {
  const Tensor& x = ctx.in(0);
  const int64_t C = x.dims()[1];
  return {x,
          ctx.in(1),
          ctx.in(2),
          ctx.out(0),
          ctx.node.op_type == "BatchNormalizationRelu",
          ctx.node.attr_float("epsilon", 1e-5f),
          mean,
          mean ? mean + C : nullptr,
          graph_stats_bytes(C, 2)};
}

// The same for a gradient with the forward's saved statistics and dX requested (else
// none): the inverse std, then scratch for dScale and dBias where they are not
// requested; without `inv_std` (planning) no buffers.
std::optional<BnBackwardGraphArgs> grad_graph_args(const KernelContext& ctx, float* inv_std = nullptr) {
  if (!ctx.has_input(3) || !ctx.has_input(4) || !ctx.has_output(0)) return std::nullopt;
  const int64_t C = ctx.in(1).dims()[1];
  auto sums = [&](size_t output, int64_t scratch) -> float* {
    if (!inv_std) return nullptr;
    return ctx.has_output(output) ? ctx.out(output).data<float>() : inv_std + scratch;
  };
  return BnBackwardGraphArgs{ctx.in(0),
                             ctx.in(1),
                             ctx.in(2),
                             ctx.has_input(5) ? &ctx.in(5) : nullptr,
                             inv_std ? ctx.in(3).data<float>() : nullptr,
                             inv_std,
                             ctx.out(0),
                             sums(1, C),
                             sums(2, 2 * C),
                             graph_stats_bytes(C, 3)};
}

// The workspace a call needs (KernelRegistry::set_workspace): forward (K 1, 3 coefficient
// arrays) or gradient (K 3, 4 arrays), as the kernels below carve it, or the cuDNN
// graph's with its statistics where the node is in the graph's scope (asked whether or
// not it trains), whichever is larger.
size_t batchnorm_workspace(const KernelContext& ctx, bool grad) {
  const Tensor& x = ctx.in(grad ? 1 : 0);
  if (x.rank() < 2) return 0;
  const Channels v = channels_of(x);
  if (v.C == 0) return 0;
  // Coefficients in the compute type: float32 where x is stored in 16 bits.
  const size_t own = scratch_bytes(v, grad ? 3 : 1, grad ? 4 : 3, dtype_size(wide_shape(x).dtype()));
  size_t stats = 0;
  int64_t graph = -1;
  if (!grad) {
    const BnForwardGraphArgs a = forward_graph_args(ctx);
    stats = a.workspace_offset;
    graph = bn_graph_forward_workspace(ctx, a);
  } else if (const auto a = grad_graph_args(ctx)) {
    stats = a->workspace_offset;
    graph = bn_graph_backward_workspace(ctx, *a);
  }
  return graph < 0 ? own : std::max(own, stats + static_cast<size_t>(graph));
}

// Training forward of a float32 node on its cuDNN graph, then the statistics' outputs;
// false when the node is outside the graph's scope or cuDNN turned its problem down.
bool forward_on_graph(KernelContext& ctx) {
  if (ctx.in(0).rank() < 2) return false;
  const int64_t C = ctx.in(0).dims()[1];
  auto* mean = static_cast<float*>(workspace(graph_stats_bytes(C, 2)));
  const BnForwardGraphArgs a = forward_graph_args(ctx, mean);
  if (!bn_graph_forward(ctx, a)) return false;
  auto out = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<float>() : nullptr; };
  graph_forward_finish<<<blocks_for(C), kThreads, 0, context().stream>>>(
      {out(1), out(2), out(3), out(4), out(5), out(6)}, ctx.in(3).data<float>(), ctx.in(4).data<float>(), a.mean,
      a.inv_std, C, a.eps, ctx.node.attr_float("momentum", 0.9f));
  check_launch(ctx.node, "graph_forward_finish");
  return true;
}

// The gradient of a float32 node with the forward's saved statistics on its cuDNN graph;
// false when outside the scope or turned down.
bool grad_on_graph(KernelContext& ctx) {
  if (ctx.in(1).rank() < 2 || !grad_graph_args(ctx)) return false;
  const int64_t C = ctx.in(1).dims()[1];
  auto* inv_std = static_cast<float*>(workspace(graph_stats_bytes(C, 3)));
  BnBackwardGraphArgs a = *grad_graph_args(ctx, inv_std);
  const float* var = ctx.in(4).data<float>();
  const double eps = ctx.node.attr_float("epsilon", 1e-5f);
  const std::function<void()> prepare = [&] {
    inv_std_of<<<blocks_for(C), kThreads, 0, context().stream>>>(var, inv_std, C, eps);
    check_launch(ctx.node, "inv_std_of");
  };
  a.prepare = &prepare;
  return bn_graph_backward(ctx, a);
}

// The own kernels' statistics (training: passes 1 and 2) and finish: outputs 1..6 and
// the apply's coefficients in the workspace.
template <typename T>
ForwardArgs<T> forward_statistics(KernelContext& ctx, const Channels& v, bool training) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.in(0);
  // X stored in 16 bits (runtime/narrow.h): read as its bits (In).
  const In<T> xin = in_of<T>(ctx, x);
  cudaStream_t stream = context().stream;
  const Scratch s = scratch<T>(v, 1, 3);
  if (training) {
    const dim3 grid = slice_grid(v);
    with_storage(storage_of<T>({given(xin)}), [&](auto st) {
      constexpr Storage S = decltype(st)::value;
      slice_sums<<<grid, kThreads, 0, stream>>>(xin.template as<S>(), v, s.sums);
      check_launch(ctx.node, "slice_sums");
      slice_deviations<T, 1, S>
          <<<grid, kThreads, 0, stream>>>(xin.template as<S>(), In<T, S>{}, ReluY<T, S>{}, v, s.sums, s.devs);
      check_launch(ctx.node, "slice_deviations");
    });
  }
  auto out = [&](size_t i) { return ctx.has_output(i) ? ctx.out(i).data<T>() : nullptr; };
  T* coef = static_cast<T*>(s.coefficients);
  const ForwardArgs<T> a{.scale = ctx.in(1).data<T>(),
                         .bias = ctx.in(2).data<T>(),
                         .mean = ctx.in(3).data<T>(),
                         .var = ctx.in(4).data<T>(),
                         .outs = {out(1), out(2), out(3), out(4), out(5), out(6)},
                         .shift = coef,
                         .mul = coef + v.C,
                         .add = coef + 2 * v.C,
                         .eps = node.attr_float("epsilon", 1e-5f),
                         .momentum = node.attr_float("momentum", 0.9f),
                         .training = training};
  forward_finish<<<blocks_for(v.C), kThreads, 0, stream>>>(a, v, s.sums, s.devs);
  check_launch(ctx.node, "forward_finish");
  return a;
}

template <typename T, bool kRelu>
void batchnorm(KernelContext& ctx) {
  const Node& node = ctx.node;
  const Tensor& x = ctx.in(0);
  const Channels v = channels_of(x);
  if (v.C == 0) return;
  const bool training = node_trains(node, ctx.training);
  // X or Y may be stored in 16 bits (runtime/narrow.h): the cuDNN graph describes them
  // so (ops/core/bn_graph_scope.h), the own kernels read X's bits (In) and write Y rounded.
  const In<T> xin = in_of<T>(ctx, x);
  const Storage storage = storage_of<T>({given(xin)});
  [[maybe_unused]] bool y16 = false;
  if constexpr (std::is_same_v<T, float>) {
    y16 = stored_narrow(ctx, ctx.out(0));
    if (training && forward_on_graph(ctx)) return;
  }
  const ForwardArgs<T> a = forward_statistics<T>(ctx, v, training);
  cudaStream_t stream = context().stream;
  const int64_t n = x.numel();
  if (n == 0) return;
  const int64_t planes = n / v.S;
  if constexpr (std::is_same_v<T, float>)
    if (y16) {
      const Store16 y = store16(ctx.out(0), ctx.math);
      with_storage(storage, [&](auto st) {
        constexpr Storage S = decltype(st)::value;
        if (v.last)
          forward_apply_last<T, kRelu, false, S>
              <<<blocks_for(n), kThreads, 0, stream>>>(xin.template as<S>(), y, n, v.C, a.shift, a.mul, a.add);
        else
          forward_apply<T, kRelu, false, S><<<planes_grid(planes, v.S), kThreads, 0, stream>>>(
              xin.template as<S>(), y, planes, v.C, v.S, a.shift, a.mul, a.add);
      });
      check_launch(ctx.node, v.last ? "forward_apply_last" : "forward_apply");
      return;
    }
  T* y = ctx.out(0).data<T>();
  if (v.last) {
    bool vec4 = false;
    if constexpr (std::is_same_v<T, float>) {
      vec4 = v.C % 4 == 0 && !xin.p16 && aligned16(x.raw()) && aligned16(y);
      if (vec4)
        forward_apply_last<T, kRelu, true, Storage::wide><<<blocks_for(n / 4), kThreads, 0, stream>>>(
            xin.template as<Storage::wide>(), y, n, v.C, a.shift, a.mul, a.add);
    }
    if (!vec4)
      with_storage(storage, [&](auto st) {
        constexpr Storage S = decltype(st)::value;
        forward_apply_last<T, kRelu, false, S>
            <<<blocks_for(n), kThreads, 0, stream>>>(xin.template as<S>(), y, n, v.C, a.shift, a.mul, a.add);
      });
    check_launch(ctx.node, "forward_apply_last");
    return;
  }
  bool vec4 = false;
  if constexpr (std::is_same_v<T, float>) vec4 = v.S % 4 == 0 && !xin.p16 && aligned16(x.raw()) && aligned16(y);
  if constexpr (std::is_same_v<T, float>)
    if (vec4)
      forward_apply<T, kRelu, true, Storage::wide><<<planes_grid(planes, v.S / 4), kThreads, 0, stream>>>(
          xin.template as<Storage::wide>(), y, planes, v.C, v.S, a.shift, a.mul, a.add);
  if (!vec4)
    with_storage(storage, [&](auto st) {
      constexpr Storage S = decltype(st)::value;
      forward_apply<T, kRelu, false, S><<<planes_grid(planes, v.S), kThreads, 0, stream>>>(
          xin.template as<S>(), y, planes, v.C, v.S, a.shift, a.mul, a.add);
    });
  check_launch(ctx.node, "forward_apply");
}

template <typename T>
void batchnorm_grad(KernelContext& ctx) {
  const Tensor &dy = ctx.in(0), &x = ctx.in(1);
  const Channels v = channels_of(x);
  if (v.C == 0) return;
  // relu_y stored in 16 bits (runtime/narrow.h): the own kernels read its bits, the cuDNN
  // graph describes it so.
  ReluY<T> relu_y;
  if (ctx.has_input(5)) {
    if (stored_narrow(ctx, ctx.in(5)))
      relu_y = ReluY<T>{nullptr, ctx.in(5).data<uint16_t>(), ctx.math == MathPrecision::bf16};
    else
      relu_y.p = ctx.in(5).data<T>();  // same layout as dy (declared Shared)
  }
  // dY or X stored in 16 bits: read as their bits (In), by the own kernels too.
  const In<T> dyin = in_of<T>(ctx, dy), xin = in_of<T>(ctx, x);
  const bool wide = !dyin.p16 && !xin.p16;  // the float4 paths read float32
  if constexpr (std::is_same_v<T, float>)
    if (grad_on_graph(ctx)) return;
  cudaStream_t stream = context().stream;
  const Scratch s = scratch<T>(v, 3, 4);
  const dim3 grid = slice_grid(v);
  const bool saved = ctx.has_input(3) && ctx.has_input(4);
  // One storage for dY, X and relu_y where they share it (the specialised kernels).
  const Storage storage = storage_of<T>({given(dyin), given(xin), given(relu_y)});
  with_storage(storage, [&](auto st) {
    constexpr Storage S = decltype(st)::value;
    const In<T, S> xs = xin.template as<S>(), dys = dyin.template as<S>();
    const ReluY<T, S> mask = relu_y.template as<S>();
    if (saved) {
      slice_grad_sums<T, S><<<grid, kThreads, 0, stream>>>(xs, dys, mask, v, ctx.in(3).data<T>(), s.devs);
      check_launch(ctx.node, "slice_grad_sums");
    } else {
      slice_sums<<<grid, kThreads, 0, stream>>>(xs, v, s.sums);
      check_launch(ctx.node, "slice_sums");
      slice_deviations<T, 3, S><<<grid, kThreads, 0, stream>>>(xs, dys, mask, v, s.sums, s.devs);
      check_launch(ctx.node, "slice_deviations");
    }
  });
  T* coef = static_cast<T*>(s.coefficients);
  const GradArgs<T> a{.scale = ctx.in(2).data<T>(),
                      .saved_mean = saved ? ctx.in(3).data<T>() : nullptr,
                      .saved_var = saved ? ctx.in(4).data<T>() : nullptr,
                      .relu_y = relu_y,
                      .dscale = ctx.has_output(1) ? ctx.out(1).data<T>() : nullptr,
                      .dbias = ctx.has_output(2) ? ctx.out(2).data<T>() : nullptr,
                      .mean = coef,
                      .k = coef + v.C,
                      .bias_term = coef + 2 * v.C,
                      .x_term = coef + 3 * v.C,
                      .eps = ctx.node.attr_float("epsilon", 1e-5f)};
  grad_finish<<<blocks_for(v.C), kThreads, 0, stream>>>(a, v, s.sums, s.devs);
  check_launch(ctx.node, "grad_finish");
  const int64_t n = x.numel();
  if (!ctx.has_output(0) || n == 0) return;
  const int64_t planes = n / v.S;
  if constexpr (std::is_same_v<T, float>)
    if (stored_narrow(ctx, ctx.out(0))) {  // dX stored in 16 bits (runtime/narrow.h): rounded as written
      const Store16 dx16 = store16(ctx.out(0), ctx.math);
      with_storage(storage, [&](auto st) {
        constexpr Storage S = decltype(st)::value;
        if (v.last)
          grad_apply_last<T, false, S>
              <<<blocks_for(n), kThreads, 0, stream>>>(dyin.template as<S>(), xin.template as<S>(), dx16, n, v.C, a);
        else
          grad_apply<T, false, S><<<planes_grid(planes, v.S), kThreads, 0, stream>>>(
              dyin.template as<S>(), xin.template as<S>(), dx16, planes, v.C, v.S, a);
      });
      check_launch(ctx.node, v.last ? "grad_apply_last" : "grad_apply");
      return;
    }
  T* dx = ctx.out(0).data<T>();
  if (v.last) {
    bool vec4 = false;
    if constexpr (std::is_same_v<T, float>) {
      vec4 = v.C % 4 == 0 && wide && aligned16(dy.raw()) && aligned16(x.raw()) && aligned16(dx) && !relu_y.p16 &&
             (!relu_y.p || aligned16(relu_y.p));
      if (vec4)
        grad_apply_last<T, true, Storage::wide><<<blocks_for(n / 4), kThreads, 0, stream>>>(
            dyin.template as<Storage::wide>(), xin.template as<Storage::wide>(), dx, n, v.C, a);
    }
    if (!vec4)
      with_storage(storage, [&](auto st) {
        constexpr Storage S = decltype(st)::value;
        grad_apply_last<T, false, S>
            <<<blocks_for(n), kThreads, 0, stream>>>(dyin.template as<S>(), xin.template as<S>(), dx, n, v.C, a);
      });
    check_launch(ctx.node, "grad_apply_last");
    return;
  }
  bool vec4 = false;
  if constexpr (std::is_same_v<T, float>)
    vec4 = v.S % 4 == 0 && wide && aligned16(dy.raw()) && aligned16(x.raw()) && aligned16(dx) && !relu_y.p16 &&
           (!relu_y.p || aligned16(relu_y.p));
  if constexpr (std::is_same_v<T, float>)
    if (vec4)
      grad_apply<T, true, Storage::wide><<<planes_grid(planes, v.S / 4), kThreads, 0, stream>>>(
          dyin.template as<Storage::wide>(), xin.template as<Storage::wide>(), dx, planes, v.C, v.S, a);
  if (!vec4)
    with_storage(storage, [&](auto st) {
      constexpr Storage S = decltype(st)::value;
      grad_apply<T, false, S><<<planes_grid(planes, v.S), kThreads, 0, stream>>>(
          dyin.template as<S>(), xin.template as<S>(), dx, planes, v.C, v.S, a);
    });
  check_launch(ctx.node, "grad_apply");
}

// The dtype the kernels compute in: a value stored in 16 bits is a float32 one.
DataType compute_type(const KernelContext& ctx, const Tensor& t) {
  return stored_narrow(ctx, t) ? DataType::Float32 : t.dtype();
}

template <bool kRelu>
void batchnorm_kernel(KernelContext& ctx) {
  if (!with_float(compute_type(ctx, ctx.in(0)), [&](auto tag) { batchnorm<decltype(tag), kRelu>(ctx); }))
    run_reference(ctx);
}

void batchnorm_grad_kernel(KernelContext& ctx) {
  if (!with_float(compute_type(ctx, ctx.in(1)), [&](auto tag) { batchnorm_grad<decltype(tag)>(ctx); }))
    run_reference(ctx);
}

}  // namespace

BnCoefficients batchnorm_coefficients(KernelContext& ctx) {
  const ForwardArgs<float> a =
      forward_statistics<float>(ctx, channels_of(ctx.in(0)), node_trains(ctx.node, ctx.training));
  return {a.shift, a.mul, a.add};
}

void register_norm_cuda(Registry& r) {
  using facts::S;  // X and Y (dY, X, dX) in one layout: Plain or ChannelsLast
  add_if_schema(r, "cuda", "", "BatchNormalization", batchnorm_kernel<false>, facts::fixed({{S}, {S}}));
  add_if_schema(r, "cuda", kTrainrtDomain, "BatchNormalizationRelu", batchnorm_kernel<true>, facts::fixed({{S}, {S}}));
  add_if_schema(r, "cuda", kTrainrtDomain, "BatchNormalizationGrad", batchnorm_grad_kernel,
                facts::fixed({{S, S, facts::P, facts::P, facts::P, S}, {S}}));  // and relu_y (input 5)
  // X and Y (the forward), dY, X, relu_y and dX (the gradient) of float32 activations may
  // be stored in 16 bits (the cuDNN graphs describe them so, the own kernels read their bits).
  // None of them rounds an input, so an input is stored so only where its writer rounded
  // it (a convolution's Y or dX: runtime/narrow.h), and the widening is the same value.
  if (r.kernels.find("cuda", kTrainrtDomain, "BatchNormalizationGrad"))
    r.kernels.set_narrow("cuda", kTrainrtDomain, "BatchNormalizationGrad", facts::narrow({0, 1, 5}, {0}));
  for (const auto& [domain, op] :
       {std::pair<std::string, std::string>{"", "BatchNormalization"}, {kTrainrtDomain, "BatchNormalizationRelu"}})
    if (r.kernels.find("cuda", domain, op)) r.kernels.set_narrow("cuda", domain, op, facts::narrow({0}, {0}));
  for (const char* op : {"BatchNormalization", "BatchNormalizationRelu", "BatchNormalizationGrad"}) {
    const std::string domain = std::string(op) == "BatchNormalization" ? "" : kTrainrtDomain;
    const bool grad = std::string(op) == "BatchNormalizationGrad";
    if (r.kernels.find("cuda", domain, op))
      r.kernels.set_workspace("cuda", domain, op,
                              [grad](const KernelContext& c) { return batchnorm_workspace(c, grad); });
  }
}

}  // namespace trainrt::cuda
