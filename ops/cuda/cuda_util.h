// What every CUDA kernel of the cuda backend shares: the process's CUDA context (the
// compute stream, or the second one inside a SideLane, cuDNN and cuBLASLt handles, a
// growing workspace per stream), error checks,
// and the small helpers of ops/*_cuda.cu (host fallback, dtype dispatch, plan cache,
// grid-stride loop, block sum).
//
//   cuda::Context& c = cuda::context();                 // created on first use
//   if (!cuda::with_float(x.dtype(), [&](auto tag) {
//         my_kernel<decltype(tag)><<<cuda::blocks_for(n), cuda::kThreads, 0, c.stream>>>(...);
//         cuda::check_launch(ctx.node, "my_kernel");    // Internal error naming kernel and node
//       }))
//     cuda::run_reference(ctx);                         // other dtypes: the host kernel
//   cuda::check(cudnnConvolutionForward(c.cudnn, ...), cuda::what(ctx.node, "cudnnConvolutionForward"));
//
// Why: the cuda backend (runtime/cuda/cuda_backend.h) queues every kernel on the compute
// stream in plan order (the second of a pair of independent steps on the second compute
// stream, ordered by events), so a kernel never waits for another itself; the executor synchronises
// only where the host reads values (checks, hooks, host-run fallback kernels, results).
// Values live in device memory (cudaMalloc): a tensor's data() pointer is for kernels
// and copies only, never for the host. Kernels read and write fp32 (and fp64
// where cuDNN/cuBLASLt have it) in the plain row-major layout; everything else falls
// back to the host kernels (Backend::fallback_ops).
//
// Compiled only in a CUDA build (TRAINRT_HAVE_CUDA); nothing here has run without a GPU.
#pragma once

#include <cublasLt.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "ops/core/channels_last.h"
#include "ops/core/engine_record.h"
#include "ops/core/register_all.h"

namespace trainrt::cuda {

struct Context {
  int device = 0;
  // Where kernels are queued now: the compute stream, or the second compute stream while
  // a SideLane lives. The cuDNN handle is bound to it.
  cudaStream_t stream = nullptr;
  cudnnHandle_t cudnn = nullptr;
  cublasLtHandle_t lt = nullptr;
  cudaStream_t compute = nullptr;  // the compute stream
  cudaStream_t side = nullptr;     // the second compute stream (side_stream(): created on first use)
  int lane = 0;                    // 0: compute, 1: side
};

// The second compute stream, created on first use (outside a capture: the first run of a
// plan, which is never captured, creates it).
cudaStream_t side_stream();
// While one lives, the context's kernels (and cuDNN's) are queued on the second compute
// stream and take the side lane's workspace: the second of a pair of independent plan
// steps (Backend::run_pair), which the cuda backend orders by events. The process issues
// its kernels from one thread, so the lane is the context's, not a thread's.
class SideLane {
 public:
  SideLane();
  ~SideLane();
  SideLane(const SideLane&) = delete;
  SideLane& operator=(const SideLane&) = delete;
};

// Selects the device this process uses (before the first context()); default 0.
void set_device(int device);
// The process's context on its device, created on first use (thread-safe).
// Throws Unsupported when no GPU is usable.
Context& context();
// Scratch device memory of at least `bytes` for a kernel call on the context's stream,
// one buffer per lane (the two streams' kernels may run at once). A buffer outgrown by a
// later call stays allocated until the process ends, since queued kernels and captured
// CUDA graphs may still use it.
void* workspace(size_t bytes);
// The side lane's buffer of at least `bytes`, from outside a SideLane (the plan's reserve).
void reserve_side_workspace(size_t bytes);
// Byte offsets of the buffers one call carves out of its workspace(), each a multiple
// of 256 bytes (cuDNN and cuBLASLt want aligned buffers; workspace() is cudaMalloc's).
struct Carve {
  size_t size = 0;
  size_t take(size_t bytes) {
    const size_t at = size;
    size += (bytes + 255) / 256 * 256;
    return at;
  }
};

// The GPU's name and cuDNN's version ("9.19.0"): what an engine timing belongs to
// (ops/core/engine_choice.h's EngineKey).
const std::string& gpu_name();
const std::string& cudnn_version();
// The device's number of SMs (cudaDevAttrMultiProcessorCount), read once: what the grids
// of ops/cuda/channel_grid.h are sized by.
int sm_count();
// Mean ms per call of `call` on the context's stream: `p.warmup` untimed calls, then
// `p.repeats` calls between two events (waits for the second one: never while the
// stream is being captured). nullopt as soon as a call returns false (the library
// turned it down); the calls already queued end first.
std::optional<double> time_calls(const Node& node, const TimingPolicy& p, const std::function<bool()>& call);

// Whether the context's stream is being captured into a CUDA graph (nothing is timed then).
bool capturing(const Node& node);

// The index of the candidate (`tags`, one per library algorithm) a call of a problem
// runs: 0 without a chooser or with one candidate; else the one kept in `chosen` (-1:
// none yet), or the chooser's (ops/core/engine_choice.h: the timing cache's entry under
// `pattern`, `problem`, `precision` and `library` on this GPU, or the policy's first
// candidates timed by time_calls over `run(i)`, which runs candidate i on this call's
// buffers and says whether the library took it). Nothing is timed when the call is not
// `repeatable` (it would write other outputs when run again) or the stream is being
// captured: the kept choice or 0 then, for this call only. 0 too when every candidate
// failed when timed: the first, whose error then names the call. The legacy convolution
// algorithms and cuBLASLt's share it (ops/conv_cuda.cu, ops/gemm_cuda.cu). The choice,
// once made, goes to engine_log() as `rec` (op, pass, problem, library and FLOPs filled
// by the caller) with its engine (names[i], else tags[i]) and measured time.
template <typename Run>
size_t chosen_candidate(const KernelContext& ctx, std::atomic<int>& chosen, const char* pattern,
                        const std::string& problem, const std::string& precision, const std::string& library,
                        const std::vector<std::string>& tags, bool repeatable, Run&& run, EngineRecord rec,
                        const std::vector<std::string>* names = nullptr) {
  if (const int c = chosen.load(); c >= 0) return static_cast<size_t>(c);
  auto log = [&](size_t i, const EngineChoice* c) {
    if (i < tags.size()) rec.engine = names && i < names->size() ? (*names)[i] : tags[i];
    if (c && c->cached) rec.engine += " (the timing cache's choice)";
    rec.timed = c && c->timed;
    rec.time_ms = rec.timed ? c->time_ms : 0;
    engine_log().record(std::move(rec));
  };
  if (!ctx.chooser || tags.size() <= 1) {  // the heuristics' first: kept for later calls of this plan
    chosen.store(0);
    log(0, nullptr);
    return 0;
  }
  EngineChooser::Time time;
  if (repeatable && !capturing(ctx.node))
    time = [&](size_t i, const TimingPolicy& policy) { return time_calls(ctx.node, policy, [&] { return run(i); }); };
  const EngineChoice c = ctx.chooser->choose(EngineKey{pattern, problem, precision, gpu_name(), library}, tags, time);
  if (!c.index) return 0;
  if (c.cached || c.timed) chosen.store(static_cast<int>(*c.index)), log(*c.index, &c);
  return *c.index;
}

// Internal errors naming `what` and the library's own message.
void check(cudaError_t e, const std::string& what);
void check(cudnnStatus_t s, const std::string& what);
void check(cublasStatus_t s, const std::string& what);

// Threads per block of the 1-D kernels; block_sum assumes exactly this many.
constexpr int kThreads = 256;

// Blocks and threads for a grid-stride loop over n elements.
inline unsigned blocks_for(long long n, int threads = kThreads) {
  long long b = (n + threads - 1) / threads;
  return static_cast<unsigned>(b < 1 ? 1 : (b > 65535 ? 65535 : b));
}

// "call (Op 'name')": the `what` of a check() while running node n.
std::string what(const Node& n, const char* call);
// Right after a launch: an Internal error naming the kernel and node if it failed to start.
void check_launch(const Node& n, const char* kernel);
// For what a cuda kernel does not cover: the op's host reference kernel, run once the
// stream is synchronised (queued kernels may still be writing its inputs). Says so on
// stderr once per node, with `why` (ops/cuda/graph_fallback.h, HostFallbackNotices).
void run_reference(KernelContext& ctx, const char* why = "this call is outside the device kernel's scope");
// Whether `p` points into device memory (cudaMalloc); false for host memory and for a
// pointer CUDA does not know (the error is cleared).
bool is_device_memory(const void* p);
// Under --precision bf16/fp16 (KernelContext::math) the convolution kernels read copies of
// their fp32 inputs rounded by round_to_math (ops/core/kernel.h: the reference's own
// rounding, compiled for the device), still stored as fp32. to[i] = round_to_math(from[i])
// for n floats, queued on the context's stream.
void round_to_math(const float* from, float* to, int64_t n, MathPrecision m, const Node& node);
// The same values as 16-bit numbers (bfloat16 or IEEE half bits) for the cuDNN graphs
// that read them at the tensor cores' 16-bit rate: to[i] = float_to_bfloat16(from[i]) or
// float_to_half(from[i]), whose widening is round_to_math(from[i]); m is bf16 or fp16.
void narrow_to_math(const float* from, uint16_t* to, int64_t n, MathPrecision m, const Node& node);
// Back: to[i] = the float32 value of 16-bit number from[i] (exact), for the fp32 library
// calls that read a value stored in 16 bits (runtime/narrow.h); m is bf16 or fp16.
void widen_from_math(const uint16_t* from, float* to, int64_t n, MathPrecision m, const Node& node);
// The inputs of ctx's node a call reads rounded under its KernelContext::math: the fp32
// ones among math_rounded_inputs (ops/core/kernel.h) for the outputs it computes, and
// those stored in 16 bits already (stored_narrow); none under fp32.
std::vector<size_t> rounded_inputs(const KernelContext& ctx);
// Whether `t` is a float32 value stored rounded in ctx's 16-bit type (Tensor::narrowed).
bool stored_narrow(const KernelContext& ctx, const Tensor& t);
// Bytes at the front of a call's workspace for a copy of each of rounded_inputs, sized as
// its fp32 self (so rounded fp32 copies, 16-bit ones, or the fp32 widening of a value
// stored in 16 bits fit), each at a Carve offset.
size_t math_bytes(const KernelContext& ctx);
// `t`'s dims and layout as float32 without memory, where `t` is stored in 16 bits (the
// widened copy math_inputs reads, for plan-time rules); `t` itself otherwise.
Tensor wide_shape(const Tensor& t);
// Under bf16/fp16, rounded_inputs as 16-bit copies (bfloat16 / IEEE half bits) for the
// library calls that read them at the tensor cores' 16-bit rate, each at the offset
// math_bytes gives it in `base`; inputs stored in 16 bits already and the other inputs
// are themselves (an empty Tensor where an optional input is omitted). `prepare` writes
// the copies once, on the context's stream. Asked at plan time (`base` null) the copies
// have shapes and dtypes but no memory. `ok` is false under fp32 or when no input is
// rounded.
struct NarrowInputs {
  std::vector<Tensor> t;
  std::function<void()> prepare;
  bool ok = false;
};
NarrowInputs narrow_inputs(const KernelContext& ctx, std::byte* base);
// Whether a convolution of this call may run TF32 tensor-core math: with --fp32-math tf32,
// and always on rounded bf16/fp16 inputs, whose 8- or 11-bit significands TF32 holds
// exactly (the products are then the reference's, accumulated in fp32 either way).
inline bool tf32_allowed(const KernelContext& ctx) {
  return ctx.fp32 == Fp32Math::tf32 || ctx.math != MathPrecision::fp32;
}

// f(float{}) or f(double{}) and true; false (nothing called) for other dtypes, which the
// caller sends to run_reference. (ops/core/common.h's dispatch_float throws instead.)
template <typename F>
bool with_float(DataType t, F&& f) {
  if (t == DataType::Float32) return f(float{}), true;
  if (t == DataType::Float64) return f(double{}), true;
  return false;
}

// The plan (descriptors, chosen algorithm) cached under `key`, made by `make` on first
// use; the lock is held while it runs, so library heuristics run once per key. Never
// freed: like the context, plans live as long as the process.
template <typename Plan, typename Make>
std::shared_ptr<const Plan> cached(const std::string& key, Make&& make) {
  static std::mutex mu;
  static auto* plans = new std::map<std::string, std::shared_ptr<const Plan>>();
  std::lock_guard<std::mutex> lock(mu);
  auto it = plans->find(key);
  if (it == plans->end()) it = plans->emplace(key, std::make_shared<const Plan>(make())).first;
  return it->second;
}

#ifdef __CUDACC__
// Where a kernel writes a float32 value stored in 16 bits (runtime/narrow.h,
// stored_narrow): bfloat16 or IEEE half bits rounded to nearest even, the rounding every
// reader of the value does. store_at(p, i, v) writes element i through a T* or a Store16.
struct Store16 {
  uint16_t* p;
  bool bf16;
};
template <typename T>
__device__ inline void store_at(T* p, int64_t i, T v) {
  p[i] = v;
}
template <typename T>
__device__ inline void store_at(Store16 s, int64_t i, T v) {
  const auto f = static_cast<float>(v);
  s.p[i] = s.bf16 ? float_to_bfloat16(f) : float_to_half(f);
}
inline Store16 store16(Tensor& t, MathPrecision m) { return Store16{t.data<uint16_t>(), m == MathPrecision::bf16}; }

// for (int64_t i = this thread's first element; i < n; i += all threads of the grid):
// the loop of a kernel launched with blocks_for(n) blocks (any grid size is correct).
#define TRAINRT_GRID_STRIDE(i, n)                                                        \
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); \
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// Passes over N*C planes of S elements (per-channel work: BatchNormalization's apply, the
// convolution epilogue) without a 64-bit division per element: blockIdx.y strides over
// the planes (the channel is computed once per plane), x over the plane's elements,
// and where S is a multiple of 4 and the buffers are 16-byte aligned, fp32 goes four
// elements per 16-byte load and store (Vec4).
#define TRAINRT_PLANES(p, planes) for (int64_t p = blockIdx.y; p < (planes); p += gridDim.y)
inline dim3 planes_grid(int64_t planes, int64_t per_plane) {
  const unsigned x = blocks_for(per_plane);
  const long long y = planes < 1 ? 1 : (planes > 65535 ? 65535 : planes);
  return dim3(x > 1024 ? 1024 : x, static_cast<unsigned>(y));
}
inline bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

// The same per-channel work on a ChannelsLast (NHWC) tensor: a grid-stride loop over its
// n values (or groups of 4 of them, with C counted in groups) giving each one's channel,
// c = i % C, carried from step to step by one compare instead of a division per element
// (channels_last::ChannelWalk). Launch with blocks_for(n).
#define TRAINRT_CHANNELS_LAST(i, c, n, C)                                                                       \
  for (::trainrt::channels_last::ChannelWalk walk_(static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x, \
                                                   static_cast<int64_t>(gridDim.x) * blockDim.x, (C));          \
       (walk_.index) < (n); walk_.next())                                                                       \
    if (const int64_t i = walk_.index, c = walk_.channel; true)

// Where element o of a dense row-major tensor of `dims` sits in a view with `strides`
// (elements, per dim): o split over the dims, innermost first, one division per dim.
__device__ inline int64_t strided_offset(int64_t o, int rank, const int64_t* dims, const int64_t* strides) {
  int64_t off = 0;
  for (int d = rank - 1; d >= 0; --d) {
    const int64_t q = o / dims[d];
    off += (o - q * dims[d]) * strides[d];
    o = q;
  }
  return off;
}

// Sums of each v[k] over the block (1-D, kThreads threads, all of them calling); the
// results are thread 0's, in a fixed order, so they repeat bit for bit. May be called
// repeatedly in one kernel: it first waits for the previous call's readers.
template <int K>
__device__ void block_sum(double (&v)[K]) {
  __shared__ double warp_sums[K][kThreads / 32];
  __syncthreads();
  for (int k = 0; k < K; ++k)
    for (int o = 16; o > 0; o /= 2) v[k] += __shfl_down_sync(0xffffffffu, v[k], o);
  if (threadIdx.x % 32 == 0)
    for (int k = 0; k < K; ++k) warp_sums[k][threadIdx.x / 32] = v[k];
  __syncthreads();
  if (threadIdx.x < 32)
    for (int k = 0; k < K; ++k) {
      v[k] = threadIdx.x < kThreads / 32 ? warp_sums[k][threadIdx.x] : 0.0;
      for (int o = 16; o > 0; o /= 2) v[k] += __shfl_down_sync(0xffffffffu, v[k], o);
    }
}
__device__ inline double block_sum(double v) {
  double one[1] = {v};
  block_sum(one);
  return one[0];
}
#endif  // __CUDACC__

}  // namespace trainrt::cuda
