// Conv, FusedConv and ConvGrad of the cuda backend on cuDNN's convolution API; the
// pooling ops (ops/pool_cuda.cu, own kernels) are registered from here too.
//
//   Conv       x: N,C,H,W  w: M,C/G,kH,kW  [b: M]  ->  y: N,M,Ho,Wo
//   FusedConv  y = act(Conv(x, w, b)) + z        act: none | Relu, z: N,M,Ho,Wo (optional)
//   ConvGrad   (dy: N,M,Ho,Wo, x, w) -> (dx: like x, dw: like w, db: M), each only if requested
//
// 3-D convolutions (rank 5: x N,C,D,H,W, w M,C/G,kT,kR,kS) take the same calls through
// cuDNN's N-d descriptors (cudnnSetTensorNdDescriptor, cudnnSetFilterNdDescriptor,
// cudnnSetConvolutionNdDescriptor; dims and strides from ops/core/conv_descriptor.h),
// NCDHW and KCTRS only: the cuda backend keeps rank-5 values Plain (ChannelsLast is a
// rank-4 layout), so no KRSC copy or relayout is involved; the cuDNN graph's scope is
// 4-D, so they always take the legacy path. Compiled, not run on a GPU. 1-D ones
// (rank 3) run as 2-D ones over a unit height (as_two_d, below).
//
// cuDNN calls: cudnnConvolutionForward, cudnnConvolutionBackwardData and
// cudnnConvolutionBackwardFilter with algorithms from the cudnnGet*Algorithm_v7
// heuristics, and cudnnConvolutionBackwardBias for db. Without a chooser each pass runs
// the heuristics' first acceptable algorithm (nothing timed, no synchronisation). With
// one (KernelContext::chooser: a run with a timing cache) every acceptable algorithm is
// a candidate: the first call outside a CUDA graph capture takes the cache's choice or
// times each on its own buffers with cudaEvents, and every later call runs the fastest;
// the workspace rule then reserves the most any candidate needs. Math type by
// KernelContext::fp32: tf32 (the CLI's default on --device cuda, as PyTorch's for
// cuDNN) sets CUDNN_DEFAULT_MATH, which
// lets Ampere and later GPUs use TF32 tensor cores (fp32 inputs rounded to 10-bit
// mantissas, fp32 accumulation); strict sets CUDNN_FMA_MATH, the reference's
// arithmetic. fp64 is always FMA. Bias, Relu and the residual are one epilogue kernel
// after the convolution, because cudnnConvolutionBiasActivationForward adds z before the
// activation and FusedConv adds it after.
//
// FusedConv forward first tries one cuDNN graph (ops/conv_graph_cuda.h: convolution and
// its epilogue fused, the backend API); this legacy path runs where the graph is out of
// scope or cuDNN turns that problem down (said once per problem on stderr).
//
// Geometry is ops/core/window.h's. cuDNN pads both sides of a dim alike; an output element
// depends only on the begin pads, so the convolution runs as is whenever cuDNN's output
// size with the begin pads on both sides is the ONNX one. Otherwise (SAME_UPPER/LOWER or
// explicit end pads that change the size) x is copied zero-padded into the workspace and
// convolved unpadded; ConvGrad then computes dx padded and crops it (pad_planes and
// crop_planes for 2-D, pad_volumes and crop_volumes for 3-D).
//
// fp32 and fp64 (CUDNN_DATA_DOUBLE). Falls back to the host reference kernel (after
// synchronising the stream) when a tensor has 2^31 or more elements (cuDNN's int
// indexing), cuDNN rejects the descriptors, or its heuristics offer no algorithm of the
// allowed math within 256 MiB of workspace. Descriptors and algorithm choices are cached by
// dtype, shapes, resolved window, group, requested outputs and fp32 math; like the context, they
// live as long as the process.
//
// --precision bf16/fp16 (KernelContext::math): as the reference (ops/conv.cpp), the
// convolution reads x and w (ConvGrad: dy, x, w) rounded to bfloat16 / IEEE half; bias
// and residual unrounded; Y and dX are rounded (ops/core/rounded_outputs.h). Each pass first tries a cuDNN graph on
// 16-bit copies of those inputs (ops/conv_graph_cuda.h; the copies in the workspace ahead of the call's other scratch):
// tensor-core math at the 16-bit rate, products exact, fp32 accumulation into fp32 outputs, the reference's numerics.
// ConvGrad's db is then a sum per channel of the 16-bit dy (slice_sums over ops/cuda/channel_slices.h's slices, as
// batch-norm statistics are summed: coalesced on NHWC). A pass cuDNN turns down runs here on fp32 copies of the rounded
// values instead (same place in the workspace); their products are exact in TF32, so the tensor cores run them whatever
// --fp32-math says (tf32_allowed): the reference's numerics at TF32 speed. Inputs and outputs are fp32 in memory unless
// the plan stores them in 16 bits (runtime/narrow.h): such inputs are read as they are
// (the graphs) or widened (the legacy path); such a Y or dX is written by narrow_output
// (the forward's or data pass's graph with a 16-bit y / dx, else float32 in the
// workspace and one rounding pass), FusedConv's residual Z read from its bits.
//
// Layouts (runtime/layout.h): x (ConvGrad: x and dx, one layout) and y (y and the
// residual z; ConvGrad's dy) are each Plain or ChannelsLast (NHWC), described to cuDNN as
// such (legacy descriptors' format, graph tensors' strides); the legacy path convolves an
// x stored in another layout than y from a copy in y's (ConvPlan::xp_last). Filters: w and ConvGrad's dw
// are declared Converted, so the plan gives these kernels a KRSC copy of each weight
// (ChannelsLast of K,C,R,S: an Identity node per weight and step, in 16 bits under
// bf16/fp16; under bf16/fp16 a 1x1 or depthwise filter, the same bytes in both orders,
// gets a Plain 16-bit copy too, so no call converts a float32 filter) and takes a KRSC
// dw, which an Identity turns back into the parameter's KCRS gradient (runtime/layout.h
// add_layout_copies). Why KRSC: cuDNN's NHWC engines and its runtime-fusion engines read
// filters KRSC, and the legacy API has one filter descriptor per call, for w and dw
// alike; PyTorch's channels_last path likewise asks cuDNN for dw in the input's memory
// format, so a dw described KCRS beside NHWC x and dy would be a problem outside what
// those engines are built for (at best a transposing engine). The filter descriptor's
// format (CUDNN_TENSOR_NHWC) and the graph's strides say which (filter_krsc,
// ops/conv_graph_cuda.h); biases stay Plain. The own kernels (epilogue,
// padding, channel sums) follow the layout; the plan and graph keys hold it.
//
// Compiled in CI, run only where a GPU exists (trainrt selftest --device cuda).
#include <cuda_runtime.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <vector>

#include "graph/error.h"
#include "ops/conv_graph_cuda.h"
#include "ops/core/common.h"
#include "ops/core/conv_descriptor.h"
#include "ops/core/kernel_facts.h"
#include "ops/core/rounded_outputs.h"
#include "ops/core/unary_math.h"
#include "ops/core/window.h"
#include "ops/cuda/channel_slices.h"
#include "ops/cuda/cuda_load16.h"
#include "ops/cuda/cuda_util.h"

// cuDNN 9 marks this convolution API deprecated (when CUDNN_WARN_DEPRECATED is defined);
// it is still the only one that needs no graph/engine plumbing, so use it on purpose.
#pragma GCC diagnostic ignored "-Wdeprecated-declarations"

namespace trainrt::cuda {

namespace {

namespace slices = channel_slices;

constexpr size_t kMaxCudnnWorkspace = size_t{256} << 20;

// y[n,m,:] = act(y[n,m,:] + b[m]) + z[n,m,:]  (b, z may be null; plane = Ho*Wo, or
// Do*Ho*Wo for a 3-D convolution), per
// plane (TRAINRT_PLANES); V: T, or float4 for fp32 planes of a multiple of 4 elements.
template <typename T>
__device__ T epilogue_one(T v, T bias, const T* z, int64_t i, bool relu) {
  v += bias;
  if (relu && !(v > T(0))) v = T(0);  // as the reference: NaN becomes 0
  return z ? v + z[i] : v;
}
template <typename T, bool kVec4>
__global__ void conv_epilogue(T* y, const T* b, const T* z, bool relu, int64_t plane, int64_t channels,
                              int64_t planes) {
  TRAINRT_PLANES(p, planes) {
    const T bias = b ? b[p % channels] : T(0);
    T* yp = y + p * plane;
    const T* zp = z ? z + p * plane : nullptr;
    if constexpr (kVec4) {
      auto* y4 = reinterpret_cast<float4*>(yp);
      const auto* z4 = reinterpret_cast<const float4*>(zp);
      TRAINRT_GRID_STRIDE(i, plane / 4) {
        float4 v = y4[i];
        const float4 r = z4 ? z4[i] : make_float4(0.f, 0.f, 0.f, 0.f);
        v.x = epilogue_one<float>(v.x, bias, nullptr, 0, relu) + r.x;
        v.y = epilogue_one<float>(v.y, bias, nullptr, 0, relu) + r.y;
        v.z = epilogue_one<float>(v.z, bias, nullptr, 0, relu) + r.z;
        v.w = epilogue_one<float>(v.w, bias, nullptr, 0, relu) + r.w;
        y4[i] = v;
      }
    } else {
      TRAINRT_GRID_STRIDE(i, plane) { yp[i] = epilogue_one<T>(yp[i], bias, zp, i, relu); }
    }
  }
}

// conv_epilogue for a ChannelsLast y (and z): n values (kVec4: groups of four channels,
// `channels` counted in groups) with their channels.
template <typename T, bool kVec4>
__global__ void conv_epilogue_last(T* y, const T* b, const T* z, bool relu, int64_t n, int64_t channels) {
  if constexpr (kVec4) {
    auto* y4 = reinterpret_cast<float4*>(y);
    const auto* z4 = reinterpret_cast<const float4*>(z);
    TRAINRT_CHANNELS_LAST(i, g, n / 4, channels / 4) {
      const int64_t c = 4 * g;
      float4 v = y4[i];
      const float4 r = z4 ? z4[i] : make_float4(0.f, 0.f, 0.f, 0.f);
      v.x = epilogue_one<float>(v.x, b ? b[c] : 0.f, nullptr, 0, relu) + r.x;
      v.y = epilogue_one<float>(v.y, b ? b[c + 1] : 0.f, nullptr, 0, relu) + r.y;
      v.z = epilogue_one<float>(v.z, b ? b[c + 2] : 0.f, nullptr, 0, relu) + r.z;
      v.w = epilogue_one<float>(v.w, b ? b[c + 3] : 0.f, nullptr, 0, relu) + r.w;
      y4[i] = v;
    }
  } else {
    TRAINRT_CHANNELS_LAST(i, c, n, channels) { y[i] = epilogue_one<T>(y[i], b ? b[c] : T(0), z, i, relu); }
  }
}

// FusedConv's residual under bf16/fp16: y = round_to_math(y) + z over n values (y and z
// in one layout), after the graph or the epilogue wrote act(conv + b) without z: the
// unfused Conv's output is rounded (ops/core/rounded_outputs.h), the Add's is not.
// z: a float* or a Load16 (z stored in 16 bits: a rounded value, read as its widening).
template <typename Z>
__global__ void round_add_residual(float* y, Z z, int64_t n, MathPrecision m) {
  TRAINRT_GRID_STRIDE(i, n) { y[i] = round_to_math(y[i], m) + load_at(z, i); }
}

// ConvGrad's dx_relu after the legacy data pass where X is stored in 16 bits (the cuda
// ReluGrad reads a float32 Y only): dx = X > 0 ? dx : 0 over n values in one layout, X
// read as its exact widening (a value its writer rounded: the reference's mask), the
// shared ReluGrad formula.
__global__ void relu_mask16(float* dx, Load16 x, int64_t n) {
  const unary_math::ReluGrad g;
  TRAINRT_GRID_STRIDE(i, n) { dx[i] = g(dx[i], load_at(x, i)); }
}

// xp: planes of hp x wp holding x's h x w planes at (top, left), zeros around, each
// stored as its Planes say (Plain: a plane per image and channel; ChannelsLast: the
// channels innermost), so the copy may also change the layout (ConvPlan::xp_last).
template <typename T>
__global__ void pad_planes(const T* x, T* xp, int64_t h, int64_t w, int64_t hp, int64_t wp, int64_t top, int64_t left,
                           int64_t count, channels_last::Planes xs, channels_last::Planes ps) {
  TRAINRT_GRID_STRIDE(i, count) {
    const int64_t from = channels_last::relaid_padded_source(i, h, w, hp, wp, top, left, xs, ps);
    xp[i] = from >= 0 ? x[from] : T(0);
  }
}

// x: the h x w planes at (top, left) of xp's hp x wp planes (undoes pad_planes).
template <typename T>
__global__ void crop_planes(const T* xp, T* x, int64_t h, int64_t w, int64_t hp, int64_t wp, int64_t top, int64_t left,
                            int64_t count, channels_last::Planes xs, channels_last::Planes ps) {
  TRAINRT_GRID_STRIDE(i, count) { x[i] = xp[channels_last::relaid_cropped_source(i, h, w, hp, wp, top, left, xs, ps)]; }
}

// xp: x's Plain volumes zero-padded as v says, and back (a 3-D convolution's padded copy:
// ops/core/conv_descriptor.h).
template <typename T>
__global__ void pad_volumes(const T* x, T* xp, int64_t count, conv_descriptor::VolumeCopy v) {
  TRAINRT_GRID_STRIDE(i, count) {
    const int64_t from = conv_descriptor::padded_volume_source(i, v);
    xp[i] = from >= 0 ? x[from] : T(0);
  }
}
template <typename T>
__global__ void crop_volumes(const T* xp, T* x, int64_t count, conv_descriptor::VolumeCopy v) {
  TRAINRT_GRID_STRIDE(i, count) { x[i] = xp[conv_descriptor::cropped_volume_source(i, v)]; }
}

// dst = src in the other filter order (KCRS <-> KRSC: channels_last::relayout_source).
template <typename T>
__global__ void relayout_filter(const T* src, T* dst, int64_t count, int64_t C, int64_t hw, bool from_last,
                                bool to_last) {
  TRAINRT_GRID_STRIDE(i, count) { dst[i] = src[channels_last::relayout_source(i, C, hw, from_last, to_last)]; }
}

// Filter `w` (K,C,R,S) written into `dst` in the other order (KRSC -> KCRS when
// `from_last`, else back), on the context's stream; returns dst.
template <typename T>
T* relayout_filter_into(const Node& n, const Tensor& w, const T* src, T* dst, bool from_last) {
  relayout_filter<T><<<blocks_for(w.numel(), kThreads), kThreads, 0, context().stream>>>(
      src, dst, w.numel(), w.dims()[1], w.dims()[2] * w.dims()[3], from_last, !from_last);
  check_launch(n, "relayout_filter");
  return dst;
}

// pad_planes' and crop_planes' Planes of x, and of its padded copy `last` or not.
channels_last::Planes planes_of(const Tensor& x) {
  return channels_last::Planes{x.dims()[1], x.layout() == Layout::ChannelsLast};
}
channels_last::Planes planes_of(const Tensor& x, bool last) { return channels_last::Planes{x.dims()[1], last}; }
cudnnTensorFormat_t format_of(Layout l) { return l == Layout::ChannelsLast ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW; }

// Which passes a plan picks algorithms for.
struct Want {
  bool forward = false, data = false, filter = false;
};

// The algorithms a pass may run, best first by the heuristics; [0] is the one run
// unless a timing chose another (Choice).
template <typename Algo>
struct Algos {
  std::vector<Algo> algo;
  std::vector<std::string> tags;   // "algo 1", ...: the timing cache's engine names
  std::vector<std::string> names;  // cuDNN's enum names, for the engine log
};

// cuDNN's name of a legacy algorithm (the engine log's, ops/core/engine_record.h).
std::string algo_name(cudnnConvolutionFwdAlgo_t a) {
  static const char* const names[] = {"IMPLICIT_GEMM", "IMPLICIT_PRECOMP_GEMM", "GEMM", "DIRECT", "FFT", "FFT_TILING",
                                      "WINOGRAD",      "WINOGRAD_NONFUSED"};
  const auto i = static_cast<size_t>(a);
  return std::string("CUDNN_CONVOLUTION_FWD_ALGO_") + (i < 8 ? names[i] : std::to_string(i).c_str());
}
std::string algo_name(cudnnConvolutionBwdDataAlgo_t a) {
  static const char* const names[] = {"0", "1", "FFT", "FFT_TILING", "WINOGRAD", "WINOGRAD_NONFUSED"};
  const auto i = static_cast<size_t>(a);
  return std::string("CUDNN_CONVOLUTION_BWD_DATA_ALGO_") + (i < 6 ? names[i] : std::to_string(i).c_str());
}
std::string algo_name(cudnnConvolutionBwdFilterAlgo_t a) {
  static const char* const names[] = {"0", "1", "FFT", "3", "WINOGRAD", "WINOGRAD_NONFUSED", "FFT_TILING"};
  const auto i = static_cast<size_t>(a);
  return std::string("CUDNN_CONVOLUTION_BWD_FILTER_ALGO_") + (i < 7 ? names[i] : std::to_string(i).c_str());
}

// The algorithm a chooser picked for each pass (-1: none yet), set on the plan's first
// timed call and read by every later call.
struct Choice {
  std::atomic<int> pass[3] = {-1, -1, -1};  // forward, data, filter
};

struct ConvPlan {
  bool use_reference = false;
  bool padded = false;   // x goes through a zero-padded hp x wp copy, convolved unpadded
  bool xp_last = false;  // that copy is stored ChannelsLast (y's layout: x's may differ)
  // The filter is stored KRSC beside NCHW x and y: convolved from a KCRS copy (w), or
  // written into one and then transposed (dw).
  bool w_relaid = false;
  int64_t top = 0, left = 0, hp = 0, wp = 0;  // 2-D: the padded copy's begin pads and planes
  // 3-D (rank 5, NCDHW, described by N-d descriptors): the padded copy's volumes.
  conv_descriptor::VolumeCopy volume;
  int64_t padded_count = 0;  // elements of the padded copy (N*C times its planes or volumes)
  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;  // x: also dx (padded dims if padded)
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Algos<cudnnConvolutionFwdAlgo_t> forward;
  Algos<cudnnConvolutionBwdDataAlgo_t> data;
  Algos<cudnnConvolutionBwdFilterAlgo_t> filter;
  size_t cudnn_bytes = 0;  // the most any algorithm the plan may run needs
  std::string key;         // the problem: the plan cache's and the timing cache's key
  std::string precision;   // of the timing cache's key: "tf32", "fp32" or "fp64"
  std::string problem;     // the engine log's words for it
  double flops = 0;        // of one pass (each pass does the same multiply-adds)
  std::shared_ptr<Choice> choice = std::make_shared<Choice>();
};

// A plan that sends its calls to the host reference kernel, and what the notice says.
constexpr const char* kNoCudnnPlan =
    "cuDNN's legacy API has no algorithm for this problem, or its sizes or window do not fit it";
ConvPlan reference_plan() {
  ConvPlan p;
  p.use_reference = true;
  return p;
}

bool ok(cudnnStatus_t s) { return s == CUDNN_STATUS_SUCCESS; }

// x (data src) copied zero-padded into xp as plan p says: planes (2-D, either layout) or
// volumes (3-D, Plain).
template <typename T>
void pad_input(const Node& n, const ConvPlan& p, const Tensor& x, const T* src, T* xp) {
  const unsigned blocks = blocks_for(p.padded_count, kThreads);
  if (x.rank() == 5) {
    pad_volumes<T><<<blocks, kThreads, 0, context().stream>>>(src, xp, p.padded_count, p.volume);
    check_launch(n, "pad_volumes");
    return;
  }
  pad_planes<T><<<blocks, kThreads, 0, context().stream>>>(src, xp, x.dims()[2], x.dims()[3], p.hp, p.wp, p.top, p.left,
                                                           p.padded_count, planes_of(x), planes_of(x, p.xp_last));
  check_launch(n, "pad_planes");
}

// dx (data dst) cropped out of the padded dxp (pad_input's inverse).
template <typename T>
void crop_output(const Node& n, const ConvPlan& p, Tensor& dx, const T* dxp) {
  const unsigned blocks = blocks_for(dx.numel(), kThreads);
  if (dx.rank() == 5) {
    crop_volumes<T><<<blocks, kThreads, 0, context().stream>>>(dxp, dx.data<T>(), dx.numel(), p.volume);
    check_launch(n, "crop_volumes");
    return;
  }
  crop_planes<T><<<blocks, kThreads, 0, context().stream>>>(dxp, dx.data<T>(), dx.dims()[2], dx.dims()[3], p.hp, p.wp,
                                                            p.top, p.left, dx.numel(), planes_of(dx),
                                                            planes_of(dx, p.xp_last));
  check_launch(n, "crop_planes");
}

// The heuristic results within the workspace cap whose math the plan allows (FMA; with
// TF32 also the default math, never a down-conversion to fp16); with `deterministic` the
// deterministic ones only where there are any (a resumed run repeats the straight one bit
// for bit only if every kernel does; cuDNN's atomics-based backward algorithms do not),
// else every one in the heuristics' order (keep_engine, ops/core/engine_choice.h). All of them with
// `timed` (a chooser times them on the first call), else the first. `bytes(algo)` is its
// workspace, or nullopt when cuDNN will not say (left out).
template <typename Perf, typename Algo, typename Bytes>
bool candidates(const std::vector<Perf>& perf, int returned, bool tf32, bool deterministic, bool timed, Bytes&& bytes,
                Algos<Algo>& out, size_t* most) {
  auto allowed = [&](cudnnMathType_t m) { return m == CUDNN_FMA_MATH || (tf32 && m == CUDNN_DEFAULT_MATH); };
  for (bool need_deterministic : determinism_passes(deterministic)) {
    for (int i = 0; i < returned; ++i) {
      const Perf& r = perf[static_cast<size_t>(i)];
      if (r.status != CUDNN_STATUS_SUCCESS || !allowed(r.mathType) || r.memory > kMaxCudnnWorkspace ||
          !keep_engine(EngineNotes{false, false, false, r.determinism != CUDNN_DETERMINISTIC}, true, need_deterministic)
               .empty())
        continue;
      if (std::find(out.algo.begin(), out.algo.end(), r.algo) != out.algo.end()) continue;  // listed per math type
      const std::optional<size_t> b = bytes(r.algo);
      if (!b) continue;
      out.algo.push_back(r.algo);
      out.tags.push_back("algo " + std::to_string(static_cast<int>(r.algo)));
      out.names.push_back(algo_name(r.algo));
      *most = std::max(*most, *b);
      if (!timed) return true;
    }
    if (!out.algo.empty()) return true;
  }
  return false;
}

// The algorithms of each wanted pass for p's descriptors (candidates above); false where
// a pass has none.
bool with_algorithms(const Node& n, ConvPlan& p, Want want, bool tf32, bool deterministic, bool timed) {
  Context& c = context();
  const std::string heuristics = what(n, "cuDNN convolution heuristics");
  int count = 0, returned = 0;
  if (want.forward) {
    check(cudnnGetConvolutionForwardAlgorithmMaxCount(c.cudnn, &count), heuristics);
    std::vector<cudnnConvolutionFwdAlgoPerf_t> perf(static_cast<size_t>(count));
    auto bytes = [&](cudnnConvolutionFwdAlgo_t a) -> std::optional<size_t> {
      size_t b = 0;
      if (!ok(cudnnGetConvolutionForwardWorkspaceSize(c.cudnn, p.x, p.w, p.conv, p.y, a, &b))) return std::nullopt;
      return b;
    };
    if (!ok(cudnnGetConvolutionForwardAlgorithm_v7(c.cudnn, p.x, p.w, p.conv, p.y, count, &returned, perf.data())) ||
        !candidates(perf, returned, tf32, deterministic, timed, bytes, p.forward, &p.cudnn_bytes))
      return false;
  }
  if (want.data) {
    check(cudnnGetConvolutionBackwardDataAlgorithmMaxCount(c.cudnn, &count), heuristics);
    std::vector<cudnnConvolutionBwdDataAlgoPerf_t> perf(static_cast<size_t>(count));
    auto bytes = [&](cudnnConvolutionBwdDataAlgo_t a) -> std::optional<size_t> {
      size_t b = 0;
      if (!ok(cudnnGetConvolutionBackwardDataWorkspaceSize(c.cudnn, p.w, p.y, p.conv, p.x, a, &b))) return std::nullopt;
      return b;
    };
    if (!ok(cudnnGetConvolutionBackwardDataAlgorithm_v7(c.cudnn, p.w, p.y, p.conv, p.x, count, &returned,
                                                        perf.data())) ||
        !candidates(perf, returned, tf32, deterministic, timed, bytes, p.data, &p.cudnn_bytes))
      return false;
  }
  if (want.filter) {
    check(cudnnGetConvolutionBackwardFilterAlgorithmMaxCount(c.cudnn, &count), heuristics);
    std::vector<cudnnConvolutionBwdFilterAlgoPerf_t> perf(static_cast<size_t>(count));
    auto bytes = [&](cudnnConvolutionBwdFilterAlgo_t a) -> std::optional<size_t> {
      size_t b = 0;
      if (!ok(cudnnGetConvolutionBackwardFilterWorkspaceSize(c.cudnn, p.x, p.y, p.conv, p.w, a, &b)))
        return std::nullopt;
      return b;
    };
    if (!ok(cudnnGetConvolutionBackwardFilterAlgorithm_v7(c.cudnn, p.x, p.y, p.conv, p.w, count, &returned,
                                                          perf.data())) ||
        !candidates(perf, returned, tf32, deterministic, timed, bytes, p.filter, &p.cudnn_bytes))
      return false;
  }
  return true;
}

// "a,b,c,d" (the engine log's problem words).
std::string joined(const std::vector<int64_t>& d) {
  std::string s;
  for (int64_t v : d) s += (s.empty() ? "" : ",") + std::to_string(v);
  return s;
}

// A 3-D convolution's descriptors (NCDHW x and y, KCTRS w, 1,M,1,1,1 bias: ops/core/
// conv_descriptor.h) through cuDNN's N-d calls; the convolution descriptor is set by
// nd_geometry_fits. False where cuDNN (or an int) turns them down.
bool set_nd_descriptors(ConvPlan& p, cudnnDataType_t type, const std::vector<int64_t>& wd,
                        const std::vector<int64_t>& yd) {
  namespace cd = conv_descriptor;
  const cd::NdDims w = cd::filter_nd(wd), y = cd::tensor_nd(yd, false), b = cd::bias_nd(yd);
  return w.ok && y.ok && b.ok && ok(cudnnSetFilterNdDescriptor(p.w, type, CUDNN_TENSOR_NCHW, w.rank, w.dims)) &&
         ok(cudnnSetTensorNdDescriptor(p.y, type, y.rank, y.dims, y.strides)) &&
         ok(cudnnSetTensorNdDescriptor(p.bias, type, b.rank, b.dims, b.strides));
}

// A 3-D convolution of x (dims xd; its padded copy's when `padded`, convolved with zero
// pads) with p.w: sets p.conv and p.x and says whether cuDNN's output dims are y's.
bool nd_geometry_fits(ConvPlan& p, const Window& win, int64_t group, std::vector<int64_t> xd,
                      const std::vector<int64_t>& yd, cudnnDataType_t type, bool tf32, bool padded) {
  namespace cd = conv_descriptor;
  if (padded)
    for (int k = 0; k < p.volume.spatial; ++k) xd[static_cast<size_t>(k) + 2] = p.volume.out[k];
  const cd::ConvNd c = cd::conv_nd(win, padded);
  const cd::NdDims x = cd::tensor_nd(xd, false);
  std::vector<int> out(yd.size(), 0);
  if (!c.ok || !x.ok || group > INT_MAX ||
      !ok(cudnnSetConvolutionNdDescriptor(p.conv, c.spatial, c.pads, c.strides, c.dilations, CUDNN_CROSS_CORRELATION,
                                          type)) ||
      !ok(cudnnSetConvolutionGroupCount(p.conv, static_cast<int>(group))) ||
      !ok(cudnnSetConvolutionMathType(p.conv, tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH)) ||
      !ok(cudnnSetTensorNdDescriptor(p.x, type, x.rank, x.dims, x.strides)) ||
      !ok(cudnnGetConvolutionNdForwardOutputDim(p.conv, p.x, p.w, x.rank, out.data())))
    return false;
  for (size_t k = 0; k < yd.size(); ++k)
    if (out[k] != yd[k]) return false;
  return true;
}

// x: N,C,spatial...  w: M,C/G,kernel...  y: N,M,out... with `win` resolved for x: 2-D
// (rank 4) through the 4-d descriptors, 3-D (rank 5, Plain only) through the N-d ones.
// cuDNN's legacy API takes int dims and indexes tensors of fewer than 2^31 elements.
ConvPlan make_conv_plan(const Node& n, const Window& win, int64_t group, const std::vector<int64_t>& xd,
                        const std::vector<int64_t>& wd, const std::vector<int64_t>& yd, Layout xl, Layout yl,
                        bool w_krsc, DataType t, Want want, bool tf32, bool deterministic, bool timed,
                        const std::string& key) {
  ConvPlan p;
  p.key = key;
  const std::vector<int64_t> filter_volume(wd.begin() + 1, wd.end());
  p.flops = 2.0 * static_cast<double>(element_count(yd)) * static_cast<double>(element_count(filter_volume));
  p.problem = "x " + joined(xd) + " w " + joined(wd) + ", " + (tf32 ? "tf32" : dtype_name(t));
  p.precision = t == DataType::Float64 ? "fp64" : tf32 ? "tf32" : "fp32";
  const size_t sp = xd.size() - 2;
  const bool nd = sp == 3;
  // Rank 5 stays NCDHW with KCTRS filters (ChannelsLast is a rank-4 layout): anything
  // else is a caller's own tensor the N-d path does not describe.
  if (nd && (xl != Layout::Plain || yl != Layout::Plain || w_krsc)) return reference_plan();
  std::vector<int64_t> padded_spatial(sp), begin(sp);
  for (size_t k = 0; k < sp; ++k)
    begin[k] = win.pads[k], padded_spatial[k] = xd[k + 2] + win.pads[k] + win.pads[k + sp];
  p.volume = conv_descriptor::volume_copy(xd, padded_spatial, begin);
  p.padded_count = xd[0] * xd[1] * element_count(padded_spatial);
  p.top = begin[0], p.left = begin[1];
  p.hp = padded_spatial[0], p.wp = padded_spatial[1];
  for (int64_t v : {element_count(xd), element_count(wd), element_count(yd), p.padded_count, group})
    if (v > INT_MAX) return reference_plan();
  for (size_t k = 0; k < sp; ++k)
    if (win.strides[k] > INT_MAX || win.dilations[k] > INT_MAX) return reference_plan();
  auto i = [](int64_t v) { return static_cast<int>(v); };

  Context& c = context();
  const std::string where = what(n, "cuDNN convolution descriptors");
  check(cudnnCreateTensorDescriptor(&p.x), where);
  check(cudnnCreateTensorDescriptor(&p.y), where);
  check(cudnnCreateTensorDescriptor(&p.bias), where);
  check(cudnnCreateFilterDescriptor(&p.w), where);
  check(cudnnCreateConvolutionDescriptor(&p.conv), where);
  const cudnnDataType_t type = t == DataType::Float64 ? CUDNN_DATA_DOUBLE : CUDNN_DATA_FLOAT;
  if (nd) {
    if (!set_nd_descriptors(p, type, wd, yd)) return reference_plan();
    if (!nd_geometry_fits(p, win, group, xd, yd, type, tf32, false)) {
      p.padded = true;
      if (!nd_geometry_fits(p, win, group, xd, yd, type, tf32, true)) return reference_plan();
    }
    return with_algorithms(n, p, want, tf32, deterministic, timed) ? p : reference_plan();
  }
  // cuDNN's legacy API wants x, w and y in one layout (seen on cuDNN 9.19, H200: an NCHW
  // x beside an NHWC y and a KRSC w has no algorithm). An x stored in another layout than
  // y is convolved from a copy in y's (the padded copy's path, which pads it too; where
  // the two layouts are the same bytes, C == 1 or 1x1 planes, x is only described so).
  // A KRSC filter (the plan's copy) beside NCHW x and y (a graph whose values stay NCHW,
  // as selftest's node-by-node forward) goes through a KCRS copy, or is only described
  // KCRS where the two orders are the same bytes.
  const Layout xs = xl != yl ? yl : xl;
  const bool relaid = xl != yl && layout_fits(Layout::ChannelsLast, xd);
  p.xp_last = xs == Layout::ChannelsLast;
  p.w_relaid = w_krsc && !p.xp_last && layout_fits(Layout::ChannelsLast, wd);
  // Filter dims K,C,R,S in either format; CUDNN_TENSOR_NHWC: stored KRSC.
  const cudnnTensorFormat_t wf = w_krsc && p.xp_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
  if (!ok(cudnnSetFilter4dDescriptor(p.w, type, wf, i(wd[0]), i(wd[1]), i(wd[2]), i(wd[3]))) ||
      !ok(cudnnSetTensor4dDescriptor(p.y, format_of(yl), type, i(yd[0]), i(yd[1]), i(yd[2]), i(yd[3]))) ||
      !ok(cudnnSetTensor4dDescriptor(p.bias, CUDNN_TENSOR_NCHW, type, 1, i(yd[1]), 1, 1)))
    return reference_plan();
  // x (h x w planes) convolved with pads (ph, pw) on both sides: does cuDNN give y's size?
  auto geometry_fits = [&](int64_t ph, int64_t pw, int64_t h, int64_t w) {
    int n = 0, m = 0, ho = 0, wo = 0;
    return ok(cudnnSetConvolution2dDescriptor(p.conv, i(ph), i(pw), i(win.strides[0]), i(win.strides[1]),
                                              i(win.dilations[0]), i(win.dilations[1]), CUDNN_CROSS_CORRELATION,
                                              type)) &&
           ok(cudnnSetConvolutionGroupCount(p.conv, i(group))) &&
           ok(cudnnSetConvolutionMathType(p.conv, tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH)) &&
           ok(cudnnSetTensor4dDescriptor(p.x, format_of(xs), type, i(xd[0]), i(xd[1]), i(h), i(w))) &&
           ok(cudnnGetConvolution2dForwardOutputDim(p.conv, p.x, p.w, &n, &m, &ho, &wo)) && n == yd[0] && m == yd[1] &&
           ho == yd[2] && wo == yd[3];
  };
  if (relaid || !geometry_fits(p.top, p.left, xd[2], xd[3])) {
    p.padded = true;
    if (!geometry_fits(0, 0, p.hp, p.wp)) return reference_plan();
  }
  return with_algorithms(n, p, want, tf32, deterministic, timed) ? p : reference_plan();
}

// Node n's window, resolved for x (explicit pads) and checked against y's dims yd.
Window conv_window(const Node& n, const Tensor& x, const Tensor& w, const std::vector<int64_t>& yd) {
  const size_t sp = static_cast<size_t>(w.rank() - 2);
  Window win = read_window(n, sp, std::vector<int64_t>(w.dims().begin() + 2, w.dims().end()), "", {});
  for (size_t i = 0; i < sp; ++i) TRAINRT_ASSERT(resolve_window_dim(win, i, x.dims()[2 + i], "") == yd[2 + i]);
  return win;
}

// The plan for node n's convolution of x with w into y (dims yd, layout yl), the filter
// (w, or the dw it writes) stored KRSC when w_krsc.
std::shared_ptr<const ConvPlan> conv_plan(const KernelContext& ctx, const Tensor& x, const Tensor& w,
                                          const std::vector<int64_t>& yd, Layout yl, Want want, bool w_krsc) {
  const Node& n = ctx.node;
  const Window win = conv_window(n, x, w, yd);
  const int64_t group = n.attr_int("group", 1);
  const bool tf32 = tf32_allowed(ctx) && x.dtype() == DataType::Float32;
  std::string key = dtype_name(x.dtype());
  auto append = [&](const std::vector<int64_t>& v) {
    key += '|';
    for (int64_t d : v) key += std::to_string(d) + ',';
  };
  append(x.dims()), append(w.dims()), append(yd), append(win.strides), append(win.dilations), append(win.pads);
  // With a chooser every acceptable algorithm is a candidate, and the workspace is the
  // most any of them needs: another plan than without one.
  const bool timed = ctx.chooser != nullptr;
  key += "|g" + std::to_string(group) + (want.forward ? "F" : "") + (want.data ? "D" : "") + (want.filter ? "W" : "") +
         (tf32 ? "|tf32" : "") + (timed ? "|timed" : "") + (ctx.deterministic ? "" : "|nondet");
  if (x.layout() == Layout::ChannelsLast || yl == Layout::ChannelsLast)
    key += std::string("|nhwc") + (x.layout() == Layout::ChannelsLast ? "x" : "") +
           (yl == Layout::ChannelsLast ? "y" : "");
  if (w_krsc) key += "|krsc";
  return cached<ConvPlan>(key, [&] {
    return make_conv_plan(n, win, group, x.dims(), w.dims(), yd, x.layout(), yl, w_krsc, x.dtype(), want, tf32,
                          ctx.deterministic, timed, key);
  });
}

// Whether the forward's filter is described KRSC (filter_krsc, beside x and y).
bool forward_krsc(const Tensor& x, const Tensor& w, Layout yl) {
  return filter_krsc(w, x.layout() == Layout::ChannelsLast || yl == Layout::ChannelsLast);
}

// ConvGrad's legacy plan describes W (the data pass) and dW (the filter pass) with one
// filter descriptor: KRSC when the filters it serves are stored so; nullopt when the two
// differ (the plan's copies give both the same layout, so only a caller's own tensors).
std::optional<bool> grad_krsc(const Tensor& x, const Tensor& dy, const Tensor& w, Layout dw, bool data, bool filter) {
  const bool nhwc = x.layout() == Layout::ChannelsLast || dy.layout() == Layout::ChannelsLast;
  Tensor dw_shape(DataType::Float32, w.dims(), nullptr);
  dw_shape.set_layout(dw);
  const bool a = filter_krsc(w, nhwc), b = filter_krsc(dw_shape, nhwc);
  if (data && filter && a != b) return std::nullopt;
  return data ? a : b;
}

// The index into a pass's algorithms this call runs (chosen_candidate, ops/core/
// cuda_util.h): `call(i)` runs algorithm i and returns cuDNN's status.
template <typename Algo, typename Call>
size_t choose_algo(const KernelContext& ctx, const ConvPlan& p, int pass, const char* pattern, const Algos<Algo>& a,
                   Call&& call) {
  static const char* const passes[] = {"forward", "data", "filter"};
  return chosen_candidate(
      ctx, p.choice->pass[pass], pattern, p.key, p.precision, cudnn_version(), a.tags,
      /*repeatable=*/true, [&](size_t i) { return ok(call(i)); },
      engine_record(ctx.node.op_type, passes[pass], p.problem, "cuDNN " + cudnn_version(), p.flops), &a.names);
}

// The inputs a call reads in KernelContext::math, one per input of the node: under
// bf16/fp16 the fp32 ones of math_rounded_inputs (ops/core/kernel.h) are rounded into
// copies at the front of the call's workspace (`bytes` of it), those stored in 16 bits
// (runtime/narrow.h) widened into such copies, the others are the inputs
// themselves (an empty Tensor where an optional input is omitted).
struct MathInputs {
  std::vector<Tensor> t;
  size_t bytes = 0;
};
// ConvGrad's dx_relu (ops/conv.cpp): dX also goes through the ReLU gradient of X.
bool dx_relu(const KernelContext& ctx) {
  return ctx.node.op_type == "ConvGrad" && ctx.has_output(0) && ctx.node.attr_int("dx_relu", 0) != 0;
}

MathInputs math_inputs(const KernelContext& ctx) {
  MathInputs r;
  for (size_t i = 0; i < ctx.inputs.size(); ++i) r.t.push_back(ctx.has_input(i) ? ctx.in(i) : Tensor());
  const std::vector<size_t> rounded = rounded_inputs(ctx);
  if (rounded.empty()) return r;
  r.bytes = math_bytes(ctx);
  auto* base = static_cast<std::byte*>(workspace(r.bytes));
  Carve carve;
  for (size_t i : rounded) {
    const Tensor& t = ctx.in(i);
    std::byte* at = base + carve.take(static_cast<size_t>(t.numel()) * sizeof(float));
    if (stored_narrow(ctx, t))  // stored rounded in 16 bits: its widening is the rounded value
      widen_from_math(t.data<uint16_t>(), reinterpret_cast<float*>(at), t.numel(), ctx.math, ctx.node);
    else
      round_to_math(t.data<float>(), reinterpret_cast<float*>(at), t.numel(), ctx.math, ctx.node);
    r.t[i] = Tensor(DataType::Float32, t.dims(), std::shared_ptr<std::byte[]>(std::shared_ptr<std::byte[]>(), at));
    r.t[i].set_layout(t.layout());  // an elementwise copy: the same order
  }
  return r;
}

// Conv and FusedConv: y = act(conv(x, w) + b) + z. Under bf16/fp16 a float32 z is added
// after the rest by round_add_residual, to act(conv + b) rounded (ops/fused.cpp).
bool conv_forward_unrounded(KernelContext& ctx, bool fused, const Tensor* z);
void conv_forward(KernelContext& ctx, bool fused) {
  const Tensor* z = fused && ctx.has_input(3) ? &ctx.in(3) : nullptr;
  if (!z || !rounds_before_residual(ctx.math, ctx.out(0).dtype())) {
    conv_forward_unrounded(ctx, fused, z);
    return;
  }
  if (!conv_forward_unrounded(ctx, fused, nullptr)) return;  // the reference kernel ran the node
  const int64_t count = ctx.out(0).numel();
  if (count == 0) return;
  float* y = ctx.out(0).data<float>();
  cudaStream_t stream = context().stream;
  if (stored_narrow(ctx, *z))  // z stored in 16 bits (runtime/narrow.h): its exact widening
    round_add_residual<<<blocks_for(count), kThreads, 0, stream>>>(y, load16(*z, ctx.math), count, ctx.math);
  else
    round_add_residual<<<blocks_for(count), kThreads, 0, stream>>>(y, z->data<float>(), count, ctx.math);
  check_launch(ctx.node, "round_add_residual");
}

// conv_forward with the residual `z` (null: none) added in the epilogue or the graph.
// False where the reference kernel ran the whole node instead (no cuDNN plan).
bool conv_forward_unrounded(KernelContext& ctx, bool fused, const Tensor* z) {
  const Node& n = ctx.node;
  Tensor& y = ctx.out(0);
  if (y.numel() == 0) return true;
  const Tensor* b = ctx.has_input(2) ? &ctx.in(2) : nullptr;
  const bool relu = fused && n.attr_string("activation", "") == "Relu";
  const int64_t group = n.attr_int("group", 1);
  if (ctx.in(0).numel() > 0 && ctx.in(1).numel() > 0 && !rounded_inputs(ctx).empty()) {
    // bf16/fp16: the graph on 16-bit copies first.
    const size_t copies = math_bytes(ctx);
    const NarrowInputs narrow = narrow_inputs(ctx, static_cast<std::byte*>(workspace(copies)));
    const Window win = conv_window(n, narrow.t[0], narrow.t[1], y.dims());
    if (conv_graph_forward(ctx,
                           ConvGraphArgs{narrow.t[0], narrow.t[1], b, z, y, win, group, relu, copies, &narrow.prepare}))
      return true;
  }
  const MathInputs in = math_inputs(ctx);
  const Tensor& x = in.t[0];
  const Tensor& w = in.t[1];
  std::shared_ptr<const ConvPlan> plan;
  if (x.numel() > 0 && w.numel() > 0) {
    if (fused) {
      const Window win = conv_window(n, x, w, y.dims());
      if (conv_graph_forward(ctx, ConvGraphArgs{x, w, b, z, y, win, group, relu, in.bytes})) return true;
    }
    plan = conv_plan(ctx, x, w, y.dims(), y.layout(), Want{.forward = true}, forward_krsc(x, w, y.layout()));
    if (plan->use_reference) {
      run_reference(ctx, kNoCudnnPlan);
      return false;
    }
  }
  Context& c = context();
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T one = 1, zero = 0;
    if (!plan) {  // no input channels: y is the bias alone
      check(cudaMemsetAsync(y.raw(), 0, y.nbytes(), c.stream), what(n, "cudaMemsetAsync"));
    } else {
      Carve carve{in.bytes};
      const size_t xp_at = carve.take(plan->padded ? static_cast<size_t>(plan->padded_count) * sizeof(T) : 0);
      const size_t wc_at = carve.take(plan->w_relaid ? w.nbytes() : 0);
      const size_t ws_at = carve.take(plan->cudnn_bytes);
      char* base = static_cast<char*>(workspace(carve.size));
      const T* src = x.data<T>();
      const T* filter = plan->w_relaid
                            ? relayout_filter_into(n, w, w.data<T>(), reinterpret_cast<T*>(base + wc_at), true)
                            : w.data<T>();
      if (plan->padded) {
        T* xp = reinterpret_cast<T*>(base + xp_at);
        pad_input(n, *plan, x, src, xp);
        src = xp;
      }
      auto forward = [&](size_t i) {
        return cudnnConvolutionForward(c.cudnn, &one, plan->x, src, plan->w, filter, plan->conv, plan->forward.algo[i],
                                       base + ws_at, plan->cudnn_bytes, &zero, plan->y, y.data<T>());
      };
      check(forward(choose_algo(ctx, *plan, 0, "Conv.forward", plan->forward, forward)),
            what(n, "cudnnConvolutionForward"));
    }
    if ((b || z || relu) && y.layout() == Layout::ChannelsLast) {
      const T* zd = z ? z->data<T>() : nullptr;
      const T* bd = b ? b->data<T>() : nullptr;
      const int64_t count = y.numel(), channels = y.dims()[1];
      bool vec4 = false;
      if constexpr (std::is_same_v<T, float>) {
        vec4 = channels % 4 == 0 && aligned16(y.raw()) && (!z || aligned16(z->raw()));
        if (vec4)
          conv_epilogue_last<T, true>
              <<<blocks_for(count / 4), kThreads, 0, c.stream>>>(y.data<T>(), bd, zd, relu, count, channels);
      }
      if (!vec4)
        conv_epilogue_last<T, false>
            <<<blocks_for(count), kThreads, 0, c.stream>>>(y.data<T>(), bd, zd, relu, count, channels);
      check_launch(n, "conv_epilogue_last");
    } else if (b || z || relu) {
      const int64_t planes = y.dims()[0] * y.dims()[1], plane = planes > 0 ? y.numel() / planes : 0;
      const T* zd = z ? z->data<T>() : nullptr;
      const auto launch = [&](auto kernel, int64_t per_plane) {
        kernel<<<planes_grid(planes, per_plane), kThreads, 0, c.stream>>>(y.data<T>(), b ? b->data<T>() : nullptr, zd,
                                                                          relu, plane, y.dims()[1], planes);
      };
      bool vec4 = false;
      if constexpr (std::is_same_v<T, float>) {
        vec4 = plane % 4 == 0 && aligned16(y.raw()) && (!z || aligned16(z->raw()));
        if (vec4) launch(conv_epilogue<T, true>, plane / 4);
      }
      if (!vec4) launch(conv_epilogue<T, false>, plane);
      check_launch(n, "conv_epilogue");
    }
  });
  return true;
}

// The workspace of a Conv / FusedConv call (KernelRegistry::set_workspace), asked at plan
// time: the larger of the graph's (FusedConv) and the legacy path's carve.
size_t conv_forward_workspace(const KernelContext& ctx, bool fused) {
  const Node& n = ctx.node;
  const Tensor x = wide_shape(ctx.in(0));  // the legacy path reads 16-bit inputs widened
  const Tensor w = wide_shape(ctx.in(1));
  Tensor& y = ctx.out(0);
  if (y.numel() == 0 || x.numel() == 0 || w.numel() == 0) return 0;
  const size_t rounded = math_bytes(ctx);
  size_t bytes = 0;
  const Tensor* b = ctx.has_input(2) ? &ctx.in(2) : nullptr;
  // Under bf16/fp16 the graphs run without the residual (conv_forward adds it after).
  const bool residual_after = rounds_before_residual(ctx.math, y.dtype());
  const Tensor* z = fused && ctx.has_input(3) && !residual_after ? &ctx.in(3) : nullptr;
  const bool relu = fused && n.attr_string("activation", "") == "Relu";
  const int64_t group = n.attr_int("group", 1);
  const Window win = conv_window(n, x, w, y.dims());
  if (!rounded_inputs(ctx).empty()) {  // the graph on 16-bit copies
    const NarrowInputs narrow = narrow_inputs(ctx, nullptr);
    const int64_t g = conv_graph_workspace(ctx, ConvGraphArgs{narrow.t[0], narrow.t[1], b, z, y, win, group, relu});
    if (g >= 0) bytes = rounded + static_cast<size_t>(g);
  }
  if (fused) {  // the graph on fp32 inputs (or fp32 copies of the rounded ones)
    const int64_t g = conv_graph_workspace(ctx, ConvGraphArgs{x, w, b, z, y, win, group, relu});
    if (g >= 0) bytes = std::max(bytes, rounded + static_cast<size_t>(g));
  }
  const auto plan = conv_plan(ctx, x, w, y.dims(), y.layout(), Want{.forward = true}, forward_krsc(x, w, y.layout()));
  if (plan->use_reference) return bytes;
  Carve carve{rounded};
  carve.take(plan->padded ? static_cast<size_t>(plan->padded_count) * dtype_size(x.dtype()) : 0);
  carve.take(plan->w_relaid ? static_cast<size_t>(w.numel()) * dtype_size(x.dtype()) : 0);
  carve.take(plan->cudnn_bytes);
  return std::max(bytes, carve.size);
}

// The bytes of a filter gradient's 16-bit copy ahead of the filter graph's workspace (a
// float32 dW only; 256-byte aligned, so the workspace after it stays aligned).
size_t dw16_bytes(const Tensor& dw) {
  return dw.dtype() == DataType::Float32 ? (static_cast<size_t>(dw.numel()) * 2 + 255) / 256 * 256 : 0;
}

// The workspace of a ConvGrad call, as conv_grad carves it.
size_t conv_grad_workspace(const KernelContext& ctx) {
  const Tensor dy = wide_shape(ctx.in(0));  // the legacy path reads 16-bit inputs widened
  const Tensor x = wide_shape(ctx.in(1));
  const Tensor w = wide_shape(ctx.in(2));
  const bool dx = ctx.has_output(0), dw = ctx.has_output(1);
  const Layout dw_layout = dw ? ctx.out(1).layout() : w.layout();
  if (dy.numel() == 0 || x.numel() == 0 || w.numel() == 0) return 0;
  const size_t copies = math_bytes(ctx);  // the rounded inputs' copies, ahead of the rest
  size_t graph = 0;                       // the graphs on 16-bit copies: the copies, then either pass's workspace
  if (!rounded_inputs(ctx).empty()) {
    const NarrowInputs narrow = narrow_inputs(ctx, nullptr);
    const Window win = conv_window(ctx.node, x, w, dy.dims());
    const int64_t group = ctx.node.attr_int("group", 1);
    int64_t most = -1;
    if (dx) {
      Tensor out(x.dtype(), x.dims(), nullptr);
      out.set_layout(x.layout());                                  // dX and X share a layout
      const Tensor* relu_x = dx_relu(ctx) ? &ctx.in(1) : nullptr;  // the mask reads X as stored (fp32 or 16-bit)
      most =
          std::max(most, conv_graph_backward_workspace(ctx, ConvGradGraphArgs{ConvPass::data, narrow.t[0], narrow.t[2],
                                                                              out, win, group, 0, nullptr, relu_x}));
    }
    if (dw) {  // filter16: a float32 dW's 16-bit copy, then the graph's workspace
      Tensor out(narrow.t[0].dtype(), w.dims(), nullptr);
      out.set_layout(dw_layout);  // written in its own layout (KRSC: the plan's copy)
      const int64_t g = conv_graph_backward_workspace(
          ctx, ConvGradGraphArgs{ConvPass::filter, narrow.t[0], narrow.t[1], out, win, group});
      if (g >= 0) most = std::max(most, static_cast<int64_t>(dw16_bytes(ctx.out(1))) + g);
    }
    // db from the 16-bit dy when both graphs ran: its partial sums where their workspace was.
    const size_t sums = ctx.has_output(2) ? slices::parts_bytes(slices::channels_of(narrow.t[0]), 1) : 0;
    if (most >= 0) graph = copies + std::max(static_cast<size_t>(most), sums);
  } else if (dx && dx_relu(ctx)) {  // fp32: the data pass with its ReLU gradient as one graph
    Tensor out(x.dtype(), x.dims(), nullptr);
    out.set_layout(x.layout());
    const int64_t g = conv_graph_backward_workspace(
        ctx, ConvGradGraphArgs{ConvPass::data, dy, w, out, conv_window(ctx.node, x, w, dy.dims()),
                               ctx.node.attr_int("group", 1), 0, nullptr, &x});
    if (g >= 0) graph = static_cast<size_t>(g);
  }
  const std::optional<bool> krsc = grad_krsc(x, dy, w, dw_layout, dx, dw);
  if (!krsc) return graph;  // runs on the host
  const auto plan = conv_plan(ctx, x, w, dy.dims(), dy.layout(), Want{.data = dx, .filter = dw}, *krsc);
  if (plan->use_reference) return graph;
  const size_t padded = static_cast<size_t>(plan->padded_count) * dtype_size(x.dtype());
  Carve carve{copies};
  carve.take(plan->padded && dw ? padded : 0);
  carve.take(plan->padded && dx ? padded : 0);
  carve.take(plan->w_relaid && dx ? static_cast<size_t>(w.numel()) * dtype_size(x.dtype()) : 0);  // W's KCRS copy
  carve.take(plan->w_relaid && dw ? static_cast<size_t>(w.numel()) * dtype_size(x.dtype()) : 0);  // dW's
  carve.take(plan->cudnn_bytes);
  return std::max(graph, carve.size);
}

// ConvGrad's filter pass as a cuDNN graph on the 16-bit copies: dW written in their type
// (the value the step rounds it to: math_rounded_outputs), then widened into a float32
// dW. cuDNN's fast weight-gradient engines write their inputs' type; with a float32 dW
// its heuristics offer one generic engine, 3-12x slower on an H200 (bench/cudnn_conv.cpp,
// docs/cuda.md). The copy lies at `off` in the workspace, the graph's workspace after it.
bool filter16(const KernelContext& ctx, const Tensor& dy16, const NarrowInputs& narrow, const Window& win,
              int64_t group, size_t off, Tensor& dw) {
  const size_t copy = dw16_bytes(dw);
  if (!copy)
    return conv_graph_backward(
        ctx, ConvGradGraphArgs{ConvPass::filter, dy16, narrow.t[1], dw, win, group, off, &narrow.prepare});
  auto* base = static_cast<std::byte*>(workspace(off + copy));
  Tensor dw16(dy16.dtype(), dw.dims(), std::shared_ptr<std::byte[]>(std::shared_ptr<std::byte[]>(), base + off));
  dw16.set_layout(dw.layout());
  if (!conv_graph_backward(
          ctx, ConvGradGraphArgs{ConvPass::filter, dy16, narrow.t[1], dw16, win, group, off + copy, &narrow.prepare}))
    return false;
  widen_from_math(dw16.data<uint16_t>(), dw.data<float>(), dw.numel(), ctx.math, ctx.node);
  return true;
}

// The passes of ConvGrad that run as cuDNN graphs before the legacy path: under bf16/fp16
// each pass on 16-bit copies (and db from the 16-bit dy when both ran), in fp32 the data
// pass with its ReLU gradient. Nulls the outputs it wrote; true when dx went through
// the ReLU's gradient (relu_x: X, whose mask it reads).
bool conv_grad_graphs(KernelContext& ctx, Tensor*& dx, Tensor*& dw, Tensor*& db, const Tensor* relu_x) {
  const Node& n = ctx.node;
  const Tensor& x0 = ctx.in(1);
  const Tensor& w0 = ctx.in(2);
  Context& c = context();
  bool masked = false;
  if (!rounded_inputs(ctx).empty()) {
    // bf16/fp16: each pass's graph on 16-bit copies first; the passes it ran are done.
    const size_t off = math_bytes(ctx);  // the copies; each graph's workspace after them
    const NarrowInputs narrow = narrow_inputs(ctx, static_cast<std::byte*>(workspace(off)));
    const Tensor& dy16 = narrow.t[0];
    const Window win = conv_window(n, x0, w0, dy16.dims());
    const int64_t group = n.attr_int("group", 1);
    if (dx && conv_graph_backward(ctx, ConvGradGraphArgs{ConvPass::data, dy16, narrow.t[2], *dx, win, group, off,
                                                         &narrow.prepare, relu_x}))
      dx = nullptr, masked = relu_x != nullptr;
    if (dw && filter16(ctx, dy16, narrow, win, group, off, *dw)) dw = nullptr;
    if (db && !dx && !dw) {  // both graphs ran (or none was wanted): db from the 16-bit dy too
      narrow.prepare();
      // The partial sums after the copies, where the graphs' workspace was (they ran
      // before on this stream).
      const slices::Channels v = slices::channels_of(dy16);
      auto* base = static_cast<std::byte*>(workspace(off + slices::parts_bytes(v, 1)));
      auto* parts = reinterpret_cast<double*>(base + off);
      slices::slice_sums<<<slices::slice_grid(v), kThreads, 0, c.stream>>>(
          slices::Bits16{dy16.data<uint16_t>(), ctx.math == MathPrecision::bf16}, v, parts);
      check_launch(n, "slice_sums");
      slices::channel_sums_finish<<<blocks_for(v.C), kThreads, 0, c.stream>>>(parts, v, db->data<float>());
      check_launch(n, "channel_sums_finish");
      db = nullptr;
    }
  } else if (relu_x) {  // fp32: the data pass with its ReLU gradient as one graph first
    const Window win = conv_window(n, x0, w0, ctx.in(0).dims());
    if (conv_graph_backward(ctx, ConvGradGraphArgs{ConvPass::data, ctx.in(0), w0, *dx, win, n.attr_int("group", 1), 0,
                                                   nullptr, relu_x}))
      dx = nullptr, masked = true;
  }
  return masked;
}

// ConvGrad(dy, x, w) -> (dx, dw, db), each optional; true when dx went through its ReLU
// gradient too (dx_relu: the graph's RELU_BWD, relu_mask16 where X is stored in 16 bits,
// or the reference on the host), else with_dx_relu's ReluGrad kernel does it after.
bool conv_grad(KernelContext& ctx) {
  const Node& n = ctx.node;
  const Tensor& x0 = ctx.in(1);
  const Tensor& w0 = ctx.in(2);
  Tensor* dx = ctx.has_output(0) ? &ctx.out(0) : nullptr;
  Tensor* dw = ctx.has_output(1) ? &ctx.out(1) : nullptr;
  Tensor* db = ctx.has_output(2) ? &ctx.out(2) : nullptr;
  Context& c = context();
  // x or w empty (C == 0, or H/W == 0 with pads) while dy is not: dx and dw are sums over
  // nothing, but db = sum of dy is not, so zeroing it would differ from the reference.
  // Degenerate, so the host computes it.
  if (db && ctx.in(0).numel() > 0 && (x0.numel() == 0 || w0.numel() == 0)) return run_reference(ctx), true;
  if (ctx.in(0).numel() == 0 || x0.numel() == 0 || w0.numel() == 0) {  // sums over nothing: zeros, as the reference
    for (Tensor* t : {dx, dw, db})
      if (t) check(cudaMemsetAsync(t->raw(), 0, t->nbytes(), c.stream), what(n, "cudaMemsetAsync"));
    return true;  // a zero dx stays zero
  }
  const Tensor* relu_x = dx && dx_relu(ctx) ? &x0 : nullptr;
  const bool masked = conv_grad_graphs(ctx, dx, dw, db, relu_x);
  if (!dx && !dw && !db) return masked;
  // What is left runs on cuDNN's legacy API (under bf16/fp16 on fp32 copies of the rounded
  // inputs, written over the 16-bit ones after the graphs that read them).
  const MathInputs in = math_inputs(ctx);
  const Tensor& dy = in.t[0];
  // X stored in 16 bits is copied only where dW reads it (rounded_inputs); otherwise its
  // shape is all the legacy data pass needs.
  const Tensor x = wide_shape(in.t[1]);
  const Tensor& w = in.t[2];
  const std::optional<bool> krsc = grad_krsc(x, dy, w, dw ? dw->layout() : w.layout(), dx != nullptr, dw != nullptr);
  if (!krsc) return run_reference(ctx, "W and dW are stored in different layouts (one legacy filter descriptor)"), true;
  auto plan = conv_plan(ctx, x, w, dy.dims(), dy.layout(), Want{.data = dx != nullptr, .filter = dw != nullptr}, *krsc);
  if (plan->use_reference) return run_reference(ctx, kNoCudnnPlan), true;
  dispatch_float(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T one = 1, zero = 0;
    const size_t padded_bytes = static_cast<size_t>(plan->padded_count) * sizeof(T);
    Carve carve{in.bytes};
    const size_t xp_at = carve.take(plan->padded && dw ? padded_bytes : 0);
    const size_t dxp_at = carve.take(plan->padded && dx ? padded_bytes : 0);
    const size_t wc_at = carve.take(plan->w_relaid && dx ? w.nbytes() : 0);
    const size_t dwc_at = carve.take(plan->w_relaid && dw ? w.nbytes() : 0);
    const size_t ws_at = carve.take(plan->cudnn_bytes);
    char* base = static_cast<char*>(workspace(carve.size));
    if (dw) {
      const T* src = x.data<T>();
      if (plan->padded) {
        T* xp = reinterpret_cast<T*>(base + xp_at);
        pad_input(n, *plan, x, src, xp);
        src = xp;
      }
      T* dw_out = plan->w_relaid ? reinterpret_cast<T*>(base + dwc_at) : dw->data<T>();
      auto filter = [&](size_t i) {
        return cudnnConvolutionBackwardFilter(c.cudnn, &one, plan->x, src, plan->y, dy.data<T>(), plan->conv,
                                              plan->filter.algo[i], base + ws_at, plan->cudnn_bytes, &zero, plan->w,
                                              dw_out);
      };
      check(filter(choose_algo(ctx, *plan, 2, "ConvGrad.filter", plan->filter, filter)),
            what(n, "cudnnConvolutionBackwardFilter"));
      if (plan->w_relaid)  // dW written KCRS: into the KRSC dw
        relayout_filter_into(n, *dw, static_cast<const T*>(dw_out), dw->data<T>(), false);
    }
    if (dx) {
      T* dst = plan->padded ? reinterpret_cast<T*>(base + dxp_at) : dx->data<T>();
      const T* filter = plan->w_relaid
                            ? relayout_filter_into(n, w, w.data<T>(), reinterpret_cast<T*>(base + wc_at), true)
                            : w.data<T>();
      auto data = [&](size_t i) {
        return cudnnConvolutionBackwardData(c.cudnn, &one, plan->w, filter, plan->y, dy.data<T>(), plan->conv,
                                            plan->data.algo[i], base + ws_at, plan->cudnn_bytes, &zero, plan->x, dst);
      };
      check(data(choose_algo(ctx, *plan, 1, "ConvGrad.data", plan->data, data)),
            what(n, "cudnnConvolutionBackwardData"));
      if (plan->padded) crop_output(n, *plan, *dx, static_cast<const T*>(dst));
    }
    if (db)
      check(cudnnConvolutionBackwardBias(c.cudnn, &one, plan->y, dy.data<T>(), &zero, plan->bias, db->data<T>()),
            what(n, "cudnnConvolutionBackwardBias"));
  });
  if (dx && relu_x && stored_narrow(ctx, *relu_x)) {  // the mask reading X's 16 bits
    relu_mask16<<<blocks_for(dx->numel()), kThreads, 0, c.stream>>>(dx->data<float>(), load16(*relu_x, ctx.math),
                                                                    dx->numel());
    check_launch(n, "relu_mask16");
    return true;
  }
  return masked;
}

// The kernels above take 2-D convolutions (rank 4) and 3-D ones (rank 5, NCDHW: cuDNN's
// N-d descriptors). A 1-D one (rank 3: N,C,L) runs as
// the 2-D one over N,C,1,L: views of its rank-3 tensors with a unit height (the same
// bytes: rank-3 values are Plain) and a copy of the node whose window has that height
// (kernel, stride and dilation 1, no pads: ONNX's 1-D pads [b, e] become [0, b, 0, e]).

// Calls f with ctx's 1-D convolution seen as a 2-D one (above).
template <typename F>
auto as_two_d(const KernelContext& ctx, F&& f) {
  const Node n = one_d_as_two_d(ctx.node);
  std::vector<Tensor> views;  // every rank-3 argument as N,C,1,L (reserved: pointers into it stay)
  views.reserve(ctx.inputs.size() + ctx.outputs.size());
  auto view = [&](const Tensor* t) -> Tensor* {
    if (!t || t->rank() != 3) return const_cast<Tensor*>(t);
    views.push_back(t->reshaped({t->dims()[0], t->dims()[1], 1, t->dims()[2]}));
    return &views.back();
  };
  KernelContext c = ctx_with_node(ctx, n);
  for (auto& in : c.inputs) in = view(in);
  for (auto& out : c.outputs) out = view(out);
  return f(c);
}

Kernel one_d_as_2d(Kernel k) {
  return [k = std::move(k)](KernelContext& ctx) {
    if (ctx.in(0).rank() != 3) return k(ctx);
    as_two_d(ctx, [&](KernelContext& c) { k(c); });
  };
}
WorkspaceRule one_d_as_2d_workspace(WorkspaceRule w) {
  return [w = std::move(w)](const KernelContext& c) {
    if (c.in(0).rank() != 3) return w(c);
    return as_two_d(c, [&](const KernelContext& v) { return w(v); });
  };
}

// Output 0 (Conv and FusedConv's Y, ConvGrad's dX) stored in 16 bits (runtime/narrow.h).
// First `direct` where given (the forward's or data pass's graph writing the 16-bit
// output itself: forward16, grad16); where it does not run, the kernel writes output 0
// in float32 past its own workspace and one pass rounds that to nearest even into the
// 16-bit storage (narrow_to_math), the rounding the executor's step gives a float32 Y,
// so the bits are the same either way (cuDNN's conversion taken to be nearest even).
// The float32 way serves every path (the graphs, the legacy API, the epilogue, the host
// fallback) at the price of Y's float32 write and read in the workspace.
struct Direct16 {
  std::function<bool(KernelContext&)> run;                 // false: did not run; empty: none
  std::function<int64_t(const KernelContext&)> workspace;  // its bytes; -1: would not run
};
KernelContext with_wide_output(const KernelContext& ctx, Tensor& wide) {
  wide = wide_shape(ctx.out(0));  // dims and layout, float32, no memory yet
  KernelContext c = ctx_with_node(ctx, ctx.node);
  c.outputs[0] = &wide;
  return c;
}
WorkspaceRule narrow_output_workspace(WorkspaceRule inner, Direct16 direct = {}) {
  return [inner = std::move(inner), direct = std::move(direct)](const KernelContext& ctx) {
    if (!ctx.has_output(0) || !ctx.out(0).narrowed()) return inner(ctx);
    Tensor wide;
    const KernelContext c = with_wide_output(ctx, wide);
    Carve carve;
    carve.take(inner(c));
    carve.take(static_cast<size_t>(wide.numel()) * sizeof(float));
    const int64_t d = direct.workspace ? direct.workspace(ctx) : -1;
    return std::max(carve.size, d < 0 ? size_t{0} : static_cast<size_t>(d));
  };
}
Kernel narrow_output(Kernel k, WorkspaceRule inner, Direct16 direct = {}) {
  return [k = std::move(k), inner = std::move(inner), direct = std::move(direct)](KernelContext& ctx) {
    if (!ctx.has_output(0) || !stored_narrow(ctx, ctx.out(0))) return k(ctx);
    if (direct.run && direct.run(ctx)) return;
    Tensor& y16 = ctx.out(0);
    Tensor wide;
    KernelContext c = with_wide_output(ctx, wide);
    Carve carve;
    carve.take(inner(c));
    const size_t at = carve.take(static_cast<size_t>(wide.numel()) * sizeof(float));
    auto* base = static_cast<std::byte*>(workspace(carve.size));
    wide =
        Tensor(DataType::Float32, y16.dims(), std::shared_ptr<std::byte[]>(std::shared_ptr<std::byte[]>(), base + at));
    wide.set_layout(y16.layout());
    k(c);  // a larger workspace it might take is another buffer: the old one stays allocated
    narrow_to_math(wide.data<float>(), y16.data<uint16_t>(), wide.numel(), c.math, ctx.node);
  };
}

// Conv, and FusedConv without a residual, whose Y is stored in 16 bits: the graph on the
// 16-bit copies of x and w writes Y's 16 bits itself (fp32 accumulation and epilogue,
// rounded to nearest even as written, as the float32 way rounds), no float32 Y at all.
// 2-D only (a 1-D or 3-D convolution takes the float32 way).
bool forward16_scope(const KernelContext& ctx, bool fused) {
  return ctx.in(0).rank() == 4 && ctx.in(0).numel() > 0 && ctx.in(1).numel() > 0 && !(fused && ctx.has_input(3)) &&
         !rounded_inputs(ctx).empty();
}
ConvGraphArgs forward16_args(const KernelContext& ctx, bool fused, const NarrowInputs& narrow, const Window& win,
                             size_t copies) {
  const Node& n = ctx.node;
  return ConvGraphArgs{narrow.t[0],
                       narrow.t[1],
                       ctx.has_input(2) ? &ctx.in(2) : nullptr,
                       nullptr,
                       ctx.out(0),
                       win,
                       n.attr_int("group", 1),
                       fused && n.attr_string("activation", "") == "Relu",
                       copies};
}
int64_t forward16_workspace(const KernelContext& ctx, bool fused) {
  if (!forward16_scope(ctx, fused)) return -1;
  const NarrowInputs narrow = narrow_inputs(ctx, nullptr);
  const Window win = conv_window(ctx.node, narrow.t[0], narrow.t[1], ctx.out(0).dims());
  const int64_t g = conv_graph_workspace(ctx, forward16_args(ctx, fused, narrow, win, 0));
  return g < 0 ? -1 : static_cast<int64_t>(math_bytes(ctx)) + g;
}
bool forward16(KernelContext& ctx, bool fused) {
  if (!forward16_scope(ctx, fused)) return false;
  const size_t copies = math_bytes(ctx);
  const NarrowInputs narrow = narrow_inputs(ctx, static_cast<std::byte*>(workspace(copies)));
  const Window win = conv_window(ctx.node, narrow.t[0], narrow.t[1], ctx.out(0).dims());
  ConvGraphArgs a = forward16_args(ctx, fused, narrow, win, copies);
  a.prepare = &narrow.prepare;
  a.instead = "the graph writing float32 Y, rounded into 16 bits after";
  return conv_graph_forward(ctx, a);
}
Direct16 forward16_direct(bool fused) {
  return {[fused](KernelContext& c) { return forward16(c, fused); },
          [fused](const KernelContext& c) { return forward16_workspace(c, fused); }};
}

// ConvGrad whose dX is stored in 16 bits: the data pass's graph on the 16-bit copies
// writes dX's 16 bits itself (with dx_relu through RELU_BWD against X as stored, fp32 or
// 16-bit: the mask of the fp32 dgrad, then one rounding); then `k` (the ConvGrad kernel)
// computes the node's other outputs on a context without dX. 2-D only.
bool grad16_scope(const KernelContext& ctx) {
  return ctx.in(0).rank() == 4 && ctx.in(0).numel() > 0 && ctx.in(1).numel() > 0 && ctx.in(2).numel() > 0 &&
         !rounded_inputs(ctx).empty();
}
ConvGradGraphArgs grad16_args(const KernelContext& ctx, const NarrowInputs& narrow, const Window& win, size_t copies) {
  ConvGradGraphArgs a{ConvPass::data, narrow.t[0], narrow.t[2], ctx.out(0), win, ctx.node.attr_int("group", 1), copies};
  a.relu_x = dx_relu(ctx) ? &ctx.in(1) : nullptr;  // X as stored, fp32 or 16-bit
  return a;
}
KernelContext without_dx(const KernelContext& ctx) {
  KernelContext c = ctx_with_node(ctx, ctx.node);
  c.outputs[0] = nullptr;
  return c;
}
int64_t grad16_workspace(const KernelContext& ctx, const WorkspaceRule& inner) {
  if (!grad16_scope(ctx)) return -1;
  const NarrowInputs narrow = narrow_inputs(ctx, nullptr);
  const Window win = conv_window(ctx.node, ctx.in(1), ctx.in(2), ctx.in(0).dims());
  const int64_t g = conv_graph_backward_workspace(ctx, grad16_args(ctx, narrow, win, 0));
  if (g < 0) return -1;
  // The rest runs after the data pass, from the workspace's start too.
  const size_t rest = ctx.has_output(1) || ctx.has_output(2) ? inner(without_dx(ctx)) : 0;
  return static_cast<int64_t>(std::max(math_bytes(ctx) + static_cast<size_t>(g), rest));
}
bool grad16(KernelContext& ctx, const Kernel& k) {
  if (!grad16_scope(ctx)) return false;
  const size_t copies = math_bytes(ctx);
  const NarrowInputs narrow = narrow_inputs(ctx, static_cast<std::byte*>(workspace(copies)));
  const Window win = conv_window(ctx.node, ctx.in(1), ctx.in(2), ctx.in(0).dims());
  ConvGradGraphArgs a = grad16_args(ctx, narrow, win, copies);
  a.prepare = &narrow.prepare;
  a.instead = a.relu_x ? "the data pass + ReLU gradient writing float32 dX, rounded into 16 bits after"
                       : "the data pass writing float32 dX, rounded into 16 bits after";
  if (!conv_graph_backward(ctx, a)) return false;
  if (!ctx.has_output(1) && !ctx.has_output(2)) return true;
  KernelContext rest = without_dx(ctx);  // its copies reuse the workspace after the data pass, in stream order
  k(rest);
  return true;
}

}  // namespace

void register_conv_cuda(Registry& r) {
  // x (ConvGrad: dY) and y (with z; ConvGrad: x and dX) each Plain or ChannelsLast.
  // Filters Converted: the plan hands these kernels KRSC weights and takes KRSC weight
  // gradients (runtime/layout.h add_layout_copies); ConvGrad reads W only for dX.
  using facts::A, facts::C, facts::P, facts::S;
  const WorkspaceRule conv_ws =
      one_d_as_2d_workspace([](const KernelContext& c) { return conv_forward_workspace(c, false); });
  const WorkspaceRule fused_ws =
      one_d_as_2d_workspace([](const KernelContext& c) { return conv_forward_workspace(c, true); });
  const WorkspaceRule grad_ws = one_d_as_2d_workspace(conv_grad_workspace);
  add_if_schema(r, "cuda", "", "Conv",
                narrow_output(one_d_as_2d([](KernelContext& ctx) { conv_forward(ctx, /*fused=*/false); }), conv_ws,
                              forward16_direct(false)),
                facts::fixed({{A, C, P}, {A}}));
  add_if_schema(r, "cuda", kTrainrtDomain, "FusedConv",
                narrow_output(one_d_as_2d([](KernelContext& ctx) { conv_forward(ctx, /*fused=*/true); }), fused_ws,
                              forward16_direct(true)),
                facts::fixed({{A, C, P, S}, {S}}));
  const Kernel* relu_grad = r.kernels.find("cuda", kTrainrtDomain, "ReluGrad");
  if (!relu_grad) throw_internal("register_conv_cuda", "the cuda ReluGrad must be registered first");
  const Kernel grad_kernel = one_d_as_2d(with_dx_relu(conv_grad, *relu_grad));
  const Direct16 grad_direct{[grad_kernel](KernelContext& c) { return grad16(c, grad_kernel); },
                             [grad_ws](const KernelContext& c) { return grad16_workspace(c, grad_ws); }};
  add_if_schema(r, "cuda", kTrainrtDomain, "ConvGrad", narrow_output(grad_kernel, grad_ws, grad_direct),
                [](const Graph&, const Node& n) {
                  return NodeLayouts{{A, S, n.has_output(0) ? C : P}, {S, C, P}};
                });
  // Under bf16/fp16 x and w (ConvGrad: dY, X, W) may be stored in 16 bits
  // (runtime/narrow.h): the graphs read them as they are, the legacy path widened. With
  // dx_relu, X only where its writer rounds it (written_rounded): the ReLU mask reads X
  // unrounded, and only a 16-bit number reads the same stored in 16 bits (a value every
  // reader rounds may not be one: a tiny positive X would round to 0 and flip the mask).
  // The weights' copies (KRSC, or Plain 16-bit ones of 1x1 and depthwise filters) are so
  // stored: every convolution rounds them.
  // Y (ConvGrad: dX) where the kernel rounds it (math_rounded_outputs): Conv's, and
  // FusedConv's without a residual (with Z, act(conv + B) is rounded before Z is added, so
  // Y is no 16-bit number); written through narrow_output. FusedConv's residual Z, which
  // round_add_residual reads as its exact widening (a value stored so is rounded by its
  // writer).
  if (r.kernels.find("cuda", "", "Conv")) r.kernels.set_narrow("cuda", "", "Conv", facts::narrow({0, 1}, {0}));
  if (r.kernels.find("cuda", kTrainrtDomain, "FusedConv"))
    r.kernels.set_narrow("cuda", kTrainrtDomain, "FusedConv", [](const Graph&, const Node& n) {
      NodeSlots s;
      s.inputs = {true, true, false, true};
      s.outputs = {!n.has_input(3)};
      return s;
    });
  if (r.kernels.find("cuda", kTrainrtDomain, "ConvGrad"))
    r.kernels.set_narrow("cuda", kTrainrtDomain, "ConvGrad", [](const Graph& g, const Node& n) {
      NodeSlots s;
      s.inputs = {true, n.attr_int("dx_relu", 0) == 0 || written_rounded(g, n.inputs[1]), true};
      s.outputs = {true};
      return s;
    });
  if (r.kernels.find("cuda", "", "Conv"))
    r.kernels.set_workspace("cuda", "", "Conv", narrow_output_workspace(conv_ws, forward16_direct(false)));
  if (r.kernels.find("cuda", kTrainrtDomain, "FusedConv"))
    r.kernels.set_workspace("cuda", kTrainrtDomain, "FusedConv",
                            narrow_output_workspace(fused_ws, forward16_direct(true)));
  if (r.kernels.find("cuda", kTrainrtDomain, "ConvGrad"))
    r.kernels.set_workspace("cuda", kTrainrtDomain, "ConvGrad", narrow_output_workspace(grad_ws, grad_direct));
}

}  // namespace trainrt::cuda
