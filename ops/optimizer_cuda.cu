// The cuda backend's optimizer updates (domain ai.trainrt): SGD, Adam, MultiSGD, MultiAdam,
// Increment, Assign, with ops/optimizer.cpp's rules:
//
//   SGD   d = g + wd*p;  with a buffer: b = step == 0 ? d : momentum*b + (1 - dampening)*d,
//         d = nesterov ? d + momentum*b : b;  p' = p - lr*d
//   Adam  AdamW: p *= 1 - lr*wd, else g += wd*p;  m' = b1*m + (1-b1)*g,  v' = b2*v + (1-b2)*g^2,
//         p' = p - (lr / (1 - b1^t)) * m' / (sqrt(v') / sqrt(1 - b2^t) + eps),  t = step + 1
//   Increment  step' = step + 1
//   Assign     state' = value (any dtype: 4-byte words, or bytes when the size is odd)
//
// The per-element updates are ops/core/optimizer_math.h's, the reference's code, run in T
// (AdamW's decay is applied as p - lr*wd*p there, so a small lr*wd survives T).
// Why it reads lr and step on the device: both are values (a schedule changes lr, the
// graph's Increment advances step), so reading them on the host would wait for the GPU
// at every parameter. Adam's bias corrections are computed once per block from them, in
// double as the reference does; the per-element update runs in T, so results differ from
// the reference's all-double arithmetic by rounding only. Updates are written in place
// (runtime/plan.cpp): each thread reads its element of every input before writing.
// MultiSGD and MultiAdam update all their parameters in one launch (one per kMaxTensors
// parameters), over a table of (pointers, count) in the kernel parameters, one block per
// chunk of one tensor, each element with the single kernels' own device function (sgd_at,
// adam_at), so a multi node writes what its per-parameter nodes would.
// Each kernel first reads KernelContext::skip_if_flagged when set: a step whose checks
// found a NaN/Inf leaves the state unchanged without the host waiting before the update.
//
// Host fallbacks (reference kernel after a stream synchronisation): dtypes other than
// float32/float64, which the shape rules reject anyway.
//
// Compiled in CI, run only where a GPU exists (trainrt selftest --device cuda).
#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "graph/error.h"
#include "ops/core/optimizer_args.h"
#include "ops/core/optimizer_math.h"
#include "ops/cuda/cuda_util.h"

namespace trainrt::cuda {

namespace {

// Grid cap: Adam's blocks each derive the bias corrections first.
constexpr unsigned kMaxBlocks = 1024;

unsigned grid_for(int64_t n) { return std::min(blocks_for(n, kThreads), kMaxBlocks); }

// Whether the step's NaN/Inf checks lowered the skip flag: the update then writes nothing.
__device__ bool flagged(const uint64_t* skip) { return skip != nullptr && *skip != ~uint64_t{0}; }

// The node's attributes (SGD, MultiSGD); lr and first come from the device scalars.
template <typename T>
using SgdSettings = optimizer_math::Sgd<T>;

// Element i of one parameter: the reference's update (ops/core/optimizer_math.h) in T.
template <typename T>
__device__ void sgd_at(const SgdTensors<T>& t, SgdSettings<T> s, T lr, bool first, int64_t i) {
  s.lr = lr;
  s.first = first;
  optimizer_math::sgd_element(s, t, i);
}

template <typename T>
struct SgdArgs {
  SgdTensors<T> t;
  SgdSettings<T> s;
  const float* lr;
  const int64_t* step;
  const uint64_t* skip;  // KernelContext::skip_if_flagged (nullptr: always run)
};

template <typename T>
__global__ void sgd_kernel(SgdArgs<T> a) {
  if (flagged(a.skip)) return;
  const T lr = static_cast<T>(*a.lr);
  const bool first = *a.step == 0;
  TRAINRT_GRID_STRIDE(i, a.t.n) { sgd_at(a.t, a.s, lr, first, i); }
}

// The node's attributes (Adam, MultiAdam).
struct AdamSettings {
  double beta1, beta2, eps, wd;
  bool decoupled;
};

// Per launch constants of the update, from the device scalars lr and step.
template <typename T>
using AdamStep = optimizer_math::Adam<T>;

// Thread 0 of the block derives the step's constants into `c`, in double as the reference
// does (optimizer_math::adam_of); every thread of the block must call this (it waits at a
// barrier).
template <typename T>
__device__ void adam_step(AdamStep<T>& c, const AdamSettings& s, const float* lr_in, const int64_t* step) {
  if (threadIdx.x == 0)
    c = optimizer_math::adam_of<T>(static_cast<double>(*lr_in), *step, s.beta1, s.beta2, s.eps, s.wd, s.decoupled);
  __syncthreads();
}

// Element i of one parameter: the reference's update (ops/core/optimizer_math.h) in T.
template <typename T>
__device__ void adam_at(const AdamTensors<T>& a, const AdamSettings&, const AdamStep<T>& c, int64_t i) {
  optimizer_math::adam_element(c, a, i);
}

template <typename T>
struct AdamArgs {
  AdamTensors<T> t;
  AdamSettings s;
  const float* lr;
  const int64_t* step;
  const uint64_t* skip;  // KernelContext::skip_if_flagged (nullptr: always run)
};

template <typename T>
__global__ void adam_kernel(AdamArgs<T> a) {
  if (flagged(a.skip)) return;  // every thread returns: no one waits at the barrier below
  __shared__ AdamStep<T> c;
  adam_step(c, a.s, a.lr, a.step);
  TRAINRT_GRID_STRIDE(i, a.t.n) { adam_at(a.t, a.s, c, i); }
}

// ---- Multi-tensor launches (MultiSGD, MultiAdam) ----------------------------------------
// One launch updates up to kMaxTensors parameters, whose (pointers, count) table travels
// by value in the kernel's parameters (at most 4 KB): nothing is allocated or copied, so
// the launch is captured in a CUDA graph like any other. Each block updates one chunk of
// kChunk elements of one tensor: block b belongs to the tensor j with
// first_block[j] <= b < first_block[j + 1]. A node with more parameters than one table
// holds launches once per kMaxTensors parameters, on the same stream.
constexpr int64_t kChunk = 65536;

template <typename Tensor, typename Settings, int kMaxTensors>
struct MultiArgs {
  Settings s;
  const float* lr;
  const int64_t* step;
  const uint64_t* skip;  // KernelContext::skip_if_flagged (nullptr: always run)
  int count;             // tensors in t
  int first_block[kMaxTensors + 1];
  Tensor t[kMaxTensors];
};

constexpr int kMaxSgdTensors = 64, kMaxAdamTensors = 48;
template <typename T>
using MultiSgdArgs = MultiArgs<SgdTensors<T>, SgdSettings<T>, kMaxSgdTensors>;
template <typename T>
using MultiAdamArgs = MultiArgs<AdamTensors<T>, AdamSettings, kMaxAdamTensors>;
static_assert(sizeof(MultiSgdArgs<double>) <= 4096 && sizeof(MultiAdamArgs<double>) <= 4096,
              "kernel parameters are limited to 4 KB");

// This block's tensor and its chunk's [begin, end).
template <typename Args>
__device__ int block_tensor(const Args& a, int64_t& begin, int64_t& end) {
  const int b = static_cast<int>(blockIdx.x);
  int lo = 0, hi = a.count - 1;  // the last j with first_block[j] <= b
  while (lo < hi) {
    const int mid = (lo + hi + 1) / 2;
    if (a.first_block[mid] <= b)
      lo = mid;
    else
      hi = mid - 1;
  }
  begin = static_cast<int64_t>(b - a.first_block[lo]) * kChunk;
  end = a.t[lo].n < begin + kChunk ? a.t[lo].n : begin + kChunk;
  return lo;
}

template <typename T>
__global__ void multi_sgd_kernel(MultiSgdArgs<T> a) {
  if (flagged(a.skip)) return;
  const T lr = static_cast<T>(*a.lr);
  const bool first = *a.step == 0;
  int64_t begin = 0, end = 0;
  const SgdTensors<T>& t = a.t[block_tensor(a, begin, end)];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) sgd_at(t, a.s, lr, first, i);
}

template <typename T>
__global__ void multi_adam_kernel(MultiAdamArgs<T> a) {
  if (flagged(a.skip)) return;  // every thread returns: no one waits at the barrier
  __shared__ AdamStep<T> c;
  adam_step(c, a.s, a.lr, a.step);
  int64_t begin = 0, end = 0;
  const AdamTensors<T>& t = a.t[block_tensor(a, begin, end)];
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) adam_at(t, a.s, c, i);
}

// Fills the tables from `tensors` and launches `kernel` once per full table (and once for
// the rest); tensors without elements take no block.
template <typename Args, typename Tensor, typename Kernel>
void launch_multi(KernelContext& k, Args a, const std::vector<Tensor>& tensors, Kernel kernel, const char* name) {
  constexpr int kMax = static_cast<int>(sizeof(a.t) / sizeof(a.t[0]));
  a.count = 0;
  a.first_block[0] = 0;
  auto flush = [&] {
    if (a.count == 0) return;
    kernel<<<static_cast<unsigned>(a.first_block[a.count]), kThreads, 0, context().stream>>>(a);
    check_launch(k.node, name);
    a.count = 0;
  };
  for (const Tensor& t : tensors) {
    if (t.n == 0) continue;
    const int64_t blocks = (t.n + kChunk - 1) / kChunk;
    if (a.count == kMax || a.first_block[a.count] + blocks > int64_t{1} << 30) flush();
    a.t[a.count] = t;
    a.first_block[a.count + 1] = a.first_block[a.count] + static_cast<int>(blocks);
    ++a.count;
  }
  flush();
}

__global__ void increment_kernel(const int64_t* step, int64_t* out, const uint64_t* skip) {
  if (flagged(skip)) return;
  // In uint64: the reference's int64 + 1 without signed overflow.
  *out = static_cast<int64_t>(static_cast<uint64_t>(*step) + 1);
}

template <typename W>
__global__ void assign_kernel(const W* from, W* to, int64_t n, const uint64_t* skip) {
  if (flagged(skip)) return;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x)
    to[i] = from[i];
}

template <typename T>
SgdSettings<T> sgd_settings(const Node& node) {
  return optimizer_math::sgd_of<T>(0.0, node.attr_float("momentum", 0.f), node.attr_float("dampening", 0.f),
                                   node.attr_float("weight_decay", 0.f), node.attr_int("nesterov", 0) != 0, false);
}

AdamSettings adam_settings(const Node& node) {
  return {.beta1 = node.attr_float("beta1", 0.9f),
          .beta2 = node.attr_float("beta2", 0.999f),
          .eps = node.attr_float("epsilon", 1e-8f),
          .wd = node.attr_float("weight_decay", 0.f),
          .decoupled = node.attr_int("decoupled_weight_decay", 0) != 0};
}

//   SGD(param, grad, lr, step [, momentum_buf]) -> param' [, momentum_buf']
void sgd(KernelContext& k) {
  if (!with_float(k.in(0).dtype(), [&](auto tag) {
        using T = decltype(tag);
        const SgdArgs<T> a{.t = sgd_tensors<T>(k),
                           .s = sgd_settings<T>(k.node),
                           .lr = k.in(2).data<float>(),
                           .step = k.in(3).data<int64_t>(),
                           .skip = k.skip_if_flagged};
        sgd_kernel<<<grid_for(a.t.n), kThreads, 0, context().stream>>>(a);
        check_launch(k.node, "sgd_kernel");
      }))
    run_reference(k);
}

//   Adam(param, grad, lr, step, exp_avg, exp_avg_sq) -> param', exp_avg', exp_avg_sq'
void adam(KernelContext& k) {
  if (!with_float(k.in(0).dtype(), [&](auto tag) {
        using T = decltype(tag);
        const AdamArgs<T> a{.t = adam_tensors<T>(k),
                            .s = adam_settings(k.node),
                            .lr = k.in(2).data<float>(),
                            .step = k.in(3).data<int64_t>(),
                            .skip = k.skip_if_flagged};
        adam_kernel<<<grid_for(a.t.n), kThreads, 0, context().stream>>>(a);
        check_launch(k.node, "adam_kernel");
      }))
    run_reference(k);
}

//   MultiSGD(lr, step, p_1, g_1, [m_1], ...) -> p_1', [m_1'], ...: 2 + 3n inputs and 2n
//   outputs with momentum buffers, 2 + 2n and n without (ops/optimizer.cpp).
void multi_sgd(KernelContext& k) {
  if (!with_float(k.in(2).dtype(), [&](auto tag) {
        using T = decltype(tag);
        const std::vector<SgdTensors<T>> tensors = multi_sgd_tensors<T>(k);
        MultiSgdArgs<T> a{};
        a.s = sgd_settings<T>(k.node);
        a.lr = k.in(0).data<float>();
        a.step = k.in(1).data<int64_t>();
        a.skip = k.skip_if_flagged;
        launch_multi(k, a, tensors, multi_sgd_kernel<T>, "multi_sgd_kernel");
      }))
    run_reference(k);
}

//   MultiAdam(lr, step, p_1, g_1, exp_avg_1, exp_avg_sq_1, ...) -> p_1', exp_avg_1', exp_avg_sq_1', ...
void multi_adam(KernelContext& k) {
  if (!with_float(k.in(2).dtype(), [&](auto tag) {
        using T = decltype(tag);
        const std::vector<AdamTensors<T>> tensors = multi_adam_tensors<T>(k);
        MultiAdamArgs<T> a{};
        a.s = adam_settings(k.node);
        a.lr = k.in(0).data<float>();
        a.step = k.in(1).data<int64_t>();
        a.skip = k.skip_if_flagged;
        launch_multi(k, a, tensors, multi_adam_kernel<T>, "multi_adam_kernel");
      }))
    run_reference(k);
}

void increment(KernelContext& k) {
  increment_kernel<<<1, 1, 0, context().stream>>>(k.in(0).data<int64_t>(), k.out(0).data<int64_t>(), k.skip_if_flagged);
  check_launch(k.node, "increment_kernel");
}

// A kernel, not cudaMemcpyAsync: the copy must skip on the step's flag like the updates.
void assign(KernelContext& k) {
  const size_t bytes = k.in(1).nbytes();
  if (bytes == 0 || k.out(0).raw() == k.in(1).raw()) return;
  if (bytes % 4 == 0) {
    const auto n = static_cast<int64_t>(bytes / 4);
    assign_kernel<<<grid_for(n), kThreads, 0, context().stream>>>(reinterpret_cast<const uint32_t*>(k.in(1).raw()),
                                                                  reinterpret_cast<uint32_t*>(k.out(0).raw()), n,
                                                                  k.skip_if_flagged);
  } else {
    const auto n = static_cast<int64_t>(bytes);
    assign_kernel<<<grid_for(n), kThreads, 0, context().stream>>>(reinterpret_cast<const uint8_t*>(k.in(1).raw()),
                                                                  reinterpret_cast<uint8_t*>(k.out(0).raw()), n,
                                                                  k.skip_if_flagged);
  }
  check_launch(k.node, "assign_kernel");
}

}  // namespace

void register_optimizer_cuda(Registry& r) {
  add_if_schema(r, "cuda", kTrainrtDomain, "SGD", sgd);
  add_if_schema(r, "cuda", kTrainrtDomain, "Adam", adam);
  add_if_schema(r, "cuda", kTrainrtDomain, "MultiSGD", multi_sgd);
  add_if_schema(r, "cuda", kTrainrtDomain, "MultiAdam", multi_adam);
  add_if_schema(r, "cuda", kTrainrtDomain, "Increment", increment);
  add_if_schema(r, "cuda", kTrainrtDomain, "Assign", assign);
  for (const char* op : {"SGD", "Adam", "MultiSGD", "MultiAdam", "Increment", "Assign"})
    if (r.kernels.find("cuda", kTrainrtDomain, op)) r.kernels.set_skips_when_flagged("cuda", kTrainrtDomain, op);
}

}  // namespace trainrt::cuda
