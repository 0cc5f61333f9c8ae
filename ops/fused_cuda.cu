// The cuda backend's BatchNormalizationReluDropout (ops/fused.cpp): the statistics on the
// own batch-norm kernels (ops/norm_cuda.h: passes 1 and 2 and finish, as
// BatchNormalizationRelu computes them outside its cuDNN graph's scope), then one apply
// kernel writing Z = relu(bn(x)) * mask * scale in one pass over X:
//
//   y = relu(batchnorm_stats::apply(x, shift[c], mul[c], add[c]))   // forward_apply's value
//   y = round_to_math(y, math)              // bf16/fp16: as the executor rounds BNRelu's Y
//   z = !training ? y : kept(at) ? y * scale : 0                     // the cuda Dropout's
//
// The mask is drawn from each element's row-major index `at` (ops/core/dropout_mask.h)
// with the replaced Dropout's index (attribute dropout_node) as its node index, so it
// draws node_seed(*run_seed, dropout_node)'s mask, as the Dropout did; ratio,
// training_mode and the seed are read on the device (ops/cuda/dropout_device.h). Plain:
// per plane, at = plane * S + i, fp32 four values per 16-byte access where S % 4 == 0;
// ChannelsLast: values walked with their channel and row-major index
// (channels_last::PlainWalk), four channels per 16-byte access where C % 4 == 0. Z stored in
// 16 bits (runtime/narrow.h, as the Dropout's Z may be): scalar stores, rounded as written;
// X stored in 16 bits (a convolution's rounded Y): scalar loads of its widening.
// Why not the cuDNN BN+ReLU graph: it applies the statistics itself, so the mask would
// need a second pass over Z (the form this replaced: two launches over Z).
// Host-side fallback to the unfused pair's kernels (BatchNormalizationRelu's, Z rounded
// under bf16/fp16, then Dropout's in place): float64, rank < 2, no channels, a ratio or
// training_mode dtype the Dropout kernel rejects.
//
// Compiled in CI, not run: the stand-in device (tests/runtime) proves the declarations
// (layouts, 16-bit Z, workspace) with reference math.
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <type_traits>

#include "ops/core/batchnorm_stats.h"
#include "ops/core/channels_last.h"
#include "ops/core/dropout_mask.h"
#include "ops/core/kernel_facts.h"
#include "ops/core/register_all.h"
#include "ops/cuda/cuda_load16.h"
#include "ops/cuda/cuda_util.h"
#include "ops/cuda/dropout_device.h"
#include "ops/fused.h"
#include "ops/norm_cuda.h"

namespace trainrt::cuda {

namespace {

// Blocks derive the Dropout's constants from device scalars first: a capped grid.
constexpr unsigned kMaxBlocks = 1024;

// One value of Z (the header's three lines); kept: d.training && d.valid && the mask's test.
__device__ float fused_value(float x, float shift, float mul, float add, MathPrecision m,
                             const DropoutConstants<float>& d, bool kept) {
  float y = batchnorm_stats::apply(x, shift, mul, add);
  y = y > 0.f ? y : 0.f;  // NaN to 0, as forward_apply's ReLU
  y = ::trainrt::round_to_math(y, m);
  if (!d.training) return y;
  return kept ? y * d.scale : d.valid ? 0.f : d.scale;  // an invalid ratio: NaN, as the Dropout
}

__device__ bool kept_at(const DropoutConstants<float>& d, int64_t at) {
  return d.training && d.valid && dropout_mask::keep(d.key, at, d.threshold);
}

// Plain x and z: plane p = n*C + c of S values at p*S (row-major index p*S + i).
// x: a const float* (the float4 path too) or a Load16 (X stored in 16 bits, scalar path
// only); z: a float* (the float4 path too) or a Store16 (scalar path only).
template <bool kVec4, typename Out, typename In>
__global__ void apply_planes(In x, Out z, int64_t planes, int64_t C, int64_t S, BnCoefficients k, MathPrecision m,
                             DropoutOptions o) {
  const DropoutConstants<float> d = block_dropout_constants<float>(o);
  TRAINRT_PLANES(p, planes) {
    const int64_t c = p % C;
    const float sh = k.shift[c], mu = k.mul[c], ad = k.add[c];
    if constexpr (kVec4) {
      const auto* x4 = reinterpret_cast<const float4*>(x + p * S);
      auto* z4 = reinterpret_cast<float4*>(z + p * S);
      TRAINRT_GRID_STRIDE(g, S / 4) {
        bool kept[4] = {false, false, false, false};
        if (d.training && d.valid) dropout_mask::keep4(d.key, p * S + 4 * g, 1, d.threshold, kept);
        const float4 v = x4[g];
        z4[g] = make_float4(fused_value(v.x, sh, mu, ad, m, d, kept[0]), fused_value(v.y, sh, mu, ad, m, d, kept[1]),
                            fused_value(v.z, sh, mu, ad, m, d, kept[2]), fused_value(v.w, sh, mu, ad, m, d, kept[3]));
      }
    } else {
      TRAINRT_GRID_STRIDE(i, S) {
        const int64_t at = p * S + i;
        store_at(z, at, fused_value(load_at(x, at), sh, mu, ad, m, d, kept_at(d, at)));
      }
    }
  }
}

// ChannelsLast x and z (C channels, hw positions an image): storage offset i holds channel
// w.c at row-major index w.plain(); kVec4 (C % 4 == 0): channels c..c+3 of one position,
// row-major indices hw apart (dropout_mask::lane_step).
template <bool kVec4, typename Out, typename In>
__global__ void apply_last(In x, Out z, int64_t n, int64_t C, int64_t hw, BnCoefficients k, MathPrecision m,
                           DropoutOptions o) {
  const DropoutConstants<float> d = block_dropout_constants<float>(o);
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const int64_t first = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if constexpr (kVec4) {
    const auto* x4 = reinterpret_cast<const float4*>(x);
    auto* z4 = reinterpret_cast<float4*>(z);
    channels_last::PlainWalk w(4 * first, 4 * stride, C, hw);
    for (int64_t g = first; g < n / 4; g += stride, w.next(4 * stride)) {
      const int64_t c = w.c;
      bool kept[4] = {false, false, false, false};
      if (d.training && d.valid) dropout_mask::keep4(d.key, w.plain(), hw, d.threshold, kept);
      const float4 v = x4[g];
      z4[g] = make_float4(fused_value(v.x, k.shift[c], k.mul[c], k.add[c], m, d, kept[0]),
                          fused_value(v.y, k.shift[c + 1], k.mul[c + 1], k.add[c + 1], m, d, kept[1]),
                          fused_value(v.z, k.shift[c + 2], k.mul[c + 2], k.add[c + 2], m, d, kept[2]),
                          fused_value(v.w, k.shift[c + 3], k.mul[c + 3], k.add[c + 3], m, d, kept[3]));
    }
  } else {
    // (w.index) parenthesised: nvcc takes "w.index < n" for a template's argument list.
    for (channels_last::PlainWalk w(first, stride, C, hw); (w.index) < n; w.next(stride)) {
      const int64_t c = w.c;
      store_at(z, w.index,
               fused_value(load_at(x, w.index), k.shift[c], k.mul[c], k.add[c], m, d, kept_at(d, w.plain())));
    }
  }
}

// The apply's launch: four values per 16-byte access where X and Z are fp32 in memory
// (In a const float*, Out a float*; a Load16 reads and a Store16 writes scalars) and the
// accesses align (`aligned`).
template <typename In, typename Out>
void launch_apply(const KernelContext& ctx, const Tensor& x, In xp, Out z, bool aligned, BnCoefficients k,
                  const DropoutOptions& o) {
  constexpr bool kFloat = std::is_same_v<Out, float*> && std::is_same_v<In, const float*>;
  const int64_t n = x.numel(), C = x.dims()[1], S = n / (x.dims()[0] * C);
  cudaStream_t stream = context().stream;
  if (x.layout() == Layout::ChannelsLast) {
    bool vec4 = false;
    if constexpr (kFloat) {
      vec4 = aligned && C % 4 == 0;
      if (vec4)
        apply_last<true>
            <<<std::min(blocks_for(n / 4), kMaxBlocks), kThreads, 0, stream>>>(xp, z, n, C, S, k, ctx.math, o);
    }
    if (!vec4)
      apply_last<false><<<std::min(blocks_for(n), kMaxBlocks), kThreads, 0, stream>>>(xp, z, n, C, S, k, ctx.math, o);
    check_launch(ctx.node, "apply_last");
    return;
  }
  const int64_t planes = n / S;
  bool vec4 = false;
  if constexpr (kFloat) {
    vec4 = aligned && S % 4 == 0;
    if (vec4)
      apply_planes<true><<<planes_grid(planes, S / 4), kThreads, 0, stream>>>(xp, z, planes, C, S, k, ctx.math, o);
  }
  if (!vec4) apply_planes<false><<<planes_grid(planes, S), kThreads, 0, stream>>>(xp, z, planes, C, S, k, ctx.math, o);
  check_launch(ctx.node, "apply_planes");
}

// The unfused pair's kernels on Z: BatchNormalizationRelu's, Z rounded where the executor
// would round its Y (bf16/fp16, Z in fp32 memory; a 16-bit Z is written rounded), then
// the Dropout's in place (it reads training_mode on the device).
void run_pair(KernelContext& ctx, const Kernel& bn_relu, const Kernel& dropout) {
  run_as_bn_relu(ctx, bn_relu);
  Tensor& z = ctx.out(0);
  if (ctx.math != MathPrecision::fp32 && z.dtype() == DataType::Float32 && !stored_narrow(ctx, z))
    round_to_math(z.data<float>(), z.data<float>(), z.numel(), ctx.math, ctx.node);
  run_dropout_in_place(ctx, dropout);
}

void bn_relu_dropout(KernelContext& ctx, const Kernel& bn_relu, const Kernel& dropout) {
  const Tensor& x = ctx.in(0);
  Tensor& z = ctx.out(0);
  DropoutOptions o;
  o.run_seed = ctx.run_seed;
  o.node = static_cast<uint64_t>(ctx.node.attr_int("dropout_node", 0));
  o.seed = dropout_node_seed(ctx);
  if (ctx.node.has_attr("seed"))
    o.attr_mix = dropout_mask::splitmix64(static_cast<uint64_t>(ctx.node.attr_int("seed", 0)));
  const bool x16 = stored_narrow(ctx, x);  // a rounded float32 value stored in 16 bits
  if ((x.dtype() != DataType::Float32 && !x16) || x.rank() < 2 || x.dims()[1] == 0 || !dropout_options(ctx, 5, o))
    return run_pair(ctx, bn_relu, dropout);
  const BnCoefficients k = batchnorm_coefficients(ctx);
  if (x.numel() == 0) return;
  auto apply = [&](auto xp, bool x_aligned) {
    if (stored_narrow(ctx, z)) return launch_apply(ctx, x, xp, store16(z, ctx.math), false, k, o);
    launch_apply(ctx, x, xp, z.data<float>(), x_aligned && aligned16(z.raw()), k, o);
  };
  if (x16)
    apply(load16(x, ctx.math), false);
  else
    apply(x.data<float>(), aligned16(x.raw()));
}

}  // namespace

void register_fused_cuda(Registry& r) {
  const Kernel* bn_relu = r.kernels.find("cuda", kTrainrtDomain, "BatchNormalizationRelu");
  const Kernel* dropout = r.kernels.find("cuda", "", "Dropout");
  if (!bn_relu || !dropout || !r.schemas.find(kTrainrtDomain, "BatchNormalizationReluDropout")) return;
  add_if_schema(
      r, "cuda", kTrainrtDomain, "BatchNormalizationReluDropout",
      [bn = *bn_relu, drop = *dropout](KernelContext& ctx) { bn_relu_dropout(ctx, bn, drop); },
      facts::fixed({{facts::S}, {facts::S}}));
  // X may be stored in 16 bits, as BatchNormalizationRelu's (a convolution's rounded Y,
  // read as its widening), and Z, as the Dropout's y (runtime/narrow.h decides where).
  r.kernels.set_narrow("cuda", kTrainrtDomain, "BatchNormalizationReluDropout", facts::narrow({0}, {0}));
  // BatchNormalizationRelu's workspace: its own kernels' scratch, which the statistics
  // take, or its cuDNN graph's where larger (the fallback runs it).
  r.kernels.set_workspace("cuda", kTrainrtDomain, "BatchNormalizationReluDropout", [](const KernelContext& ctx) {
    size_t bytes = 0;
    run_as_bn_relu(ctx, [&](KernelContext& c) { bytes = registry().kernels.workspace("cuda", c); });
    return bytes;
  });
}

}  // namespace trainrt::cuda
