// The cuda backend's optimizer updates (domain ai.trainrt): SGD, Adam, Increment, Assign, with
// ops/optimizer.cpp's rules:
//
//   SGD   d = g + wd*p;  with a buffer: b = step == 0 ? d : momentum*b + (1 - dampening)*d,
//         d = nesterov ? d + momentum*b : b;  p' = p - lr*d
//   Adam  AdamW: p *= 1 - lr*wd, else g += wd*p;  m' = b1*m + (1-b1)*g,  v' = b2*v + (1-b2)*g^2,
//         p' = p - (lr / (1 - b1^t)) * m' / (sqrt(v') / sqrt(1 - b2^t) + eps),  t = step + 1
//   Increment  step' = step + 1
//   Assign     state' = value (any dtype: 4-byte words, or bytes when the size is odd)
//
// (AdamW's decay is applied as p - lr*wd*p, the same value, so a small lr*wd survives T.)
// Why it reads lr and step on the device: both are values (a schedule changes lr, the
// graph's Increment advances step), so reading them on the host would wait for the GPU
// at every parameter. Adam's bias corrections are computed once per block from them, in
// double as the reference does; the per-element update runs in T, so results differ from
// the reference's all-double arithmetic by rounding only. Updates are written in place
// (runtime/plan.cpp): each thread reads its element of every input before writing.
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

#include "graph/error.h"
#include "ops/core/cuda_util.h"

namespace trainrt::cuda {

namespace {

// Grid cap: Adam's blocks each derive the bias corrections first.
constexpr unsigned kMaxBlocks = 1024;

unsigned grid_for(int64_t n) { return std::min(blocks_for(n, kThreads), kMaxBlocks); }

// Whether the step's NaN/Inf checks lowered the skip flag: the update then writes nothing.
__device__ bool flagged(const uint64_t* skip) { return skip != nullptr && *skip != ~uint64_t{0}; }

template <typename T>
struct SgdArgs {
  const T *p, *g, *buf;  // buf, buf_out: nullptr without a momentum buffer (or its output)
  const float* lr;
  const int64_t* step;
  T *out, *buf_out;
  const uint64_t* skip;  // KernelContext::skip_if_flagged (nullptr: always run)
  int64_t n;
  T momentum, one_minus_dampening, wd;
  bool nesterov;
};

template <typename T>
__global__ void sgd_kernel(SgdArgs<T> a) {
  if (flagged(a.skip)) return;
  const T lr = static_cast<T>(*a.lr);
  const bool first = *a.step == 0;
  TRAINRT_GRID_STRIDE(i, a.n) {
    const T p = a.p[i];
    T d = a.g[i] + a.wd * p;
    if (a.buf) {
      // torch.optim.SGD: the buffer starts as the first step's d (no dampening).
      const T b = first ? d : a.momentum * a.buf[i] + a.one_minus_dampening * d;
      if (a.buf_out) a.buf_out[i] = b;
      d = a.nesterov ? d + a.momentum * b : b;
    }
    a.out[i] = p - lr * d;
  }
}

template <typename T>
struct AdamArgs {
  const T *p, *g, *m, *v;
  const float* lr;
  const int64_t* step;
  T *out, *m_out, *v_out;
  const uint64_t* skip;  // KernelContext::skip_if_flagged (nullptr: always run)
  int64_t n;
  double beta1, beta2, eps, wd;
  bool decoupled;
};

// Per launch constants of the update, from the device scalars lr and step.
template <typename T>
struct AdamStep {
  T step_size;  // lr / (1 - beta1^t)
  T sqrt_bc2;   // sqrt(1 - beta2^t)
  // AdamW's lr*wd, not 1 - lr*wd: rounded to float, 1 - lr*wd keeps lr*wd only to a
  // multiple of 2^-24 (lr*wd = 1e-8 rounds to 1, no decay at all; 1e-7 is off by 19%),
  // while the reference multiplies by it in double. p - lr*wd*p keeps it to float rounding.
  T lr_wd;
};

template <typename T>
__global__ void adam_kernel(AdamArgs<T> a) {
  if (flagged(a.skip)) return;  // every thread returns: no one waits at the barrier below
  __shared__ AdamStep<T> c;
  if (threadIdx.x == 0) {
    const double lr = static_cast<double>(*a.lr), t = static_cast<double>(*a.step + 1);
    c.step_size = static_cast<T>(lr / (1.0 - pow(a.beta1, t)));
    c.sqrt_bc2 = static_cast<T>(sqrt(1.0 - pow(a.beta2, t)));
    c.lr_wd = static_cast<T>(lr * a.wd);
  }
  __syncthreads();
  const T b1 = static_cast<T>(a.beta1), b2 = static_cast<T>(a.beta2);
  const T one_minus_b1 = static_cast<T>(1.0 - a.beta1), one_minus_b2 = static_cast<T>(1.0 - a.beta2);
  const T eps = static_cast<T>(a.eps), wd = static_cast<T>(a.wd);
  TRAINRT_GRID_STRIDE(i, a.n) {
    const T w = a.p[i];
    T g = a.g[i], decay = T(0);
    if (a.decoupled)
      decay = c.lr_wd * w;  // AdamW: w * (1 - lr*wd) = w - lr*wd*w, subtracted with the step
    else
      g += wd * w;  // Adam: L2 penalty folded into the gradient
    const T m = b1 * a.m[i] + one_minus_b1 * g;
    const T v = b2 * a.v[i] + one_minus_b2 * g * g;
    a.m_out[i] = m;
    a.v_out[i] = v;
    a.out[i] = w - (decay + c.step_size * m / (sqrt(v) / c.sqrt_bc2 + eps));
  }
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

void sgd(KernelContext& k) {
  const Node& node = k.node;
  if (!with_float(k.in(0).dtype(), [&](auto tag) {
        using T = decltype(tag);
        const bool has_buf = k.has_input(4);
        const SgdArgs<T> a{.p = k.in(0).data<T>(),
                           .g = k.in(1).data<T>(),
                           .buf = has_buf ? k.in(4).data<T>() : nullptr,
                           .lr = k.in(2).data<float>(),
                           .step = k.in(3).data<int64_t>(),
                           .out = k.out(0).data<T>(),
                           .buf_out = has_buf && k.has_output(1) ? k.out(1).data<T>() : nullptr,
                           .skip = k.skip_if_flagged,
                           .n = k.in(0).numel(),
                           .momentum = static_cast<T>(node.attr_float("momentum", 0.f)),
                           .one_minus_dampening = static_cast<T>(1.0 - node.attr_float("dampening", 0.f)),
                           .wd = static_cast<T>(node.attr_float("weight_decay", 0.f)),
                           .nesterov = node.attr_int("nesterov", 0) != 0};
        sgd_kernel<<<grid_for(a.n), kThreads, 0, context().stream>>>(a);
        check_launch(k.node, "sgd_kernel");
      }))
    run_reference(k);
}

void adam(KernelContext& k) {
  const Node& node = k.node;
  if (!with_float(k.in(0).dtype(), [&](auto tag) {
        using T = decltype(tag);
        const AdamArgs<T> a{.p = k.in(0).data<T>(),
                            .g = k.in(1).data<T>(),
                            .m = k.in(4).data<T>(),
                            .v = k.in(5).data<T>(),
                            .lr = k.in(2).data<float>(),
                            .step = k.in(3).data<int64_t>(),
                            .out = k.out(0).data<T>(),
                            .m_out = k.out(1).data<T>(),
                            .v_out = k.out(2).data<T>(),
                            .skip = k.skip_if_flagged,
                            .n = k.in(0).numel(),
                            .beta1 = node.attr_float("beta1", 0.9f),
                            .beta2 = node.attr_float("beta2", 0.999f),
                            .eps = node.attr_float("epsilon", 1e-8f),
                            .wd = node.attr_float("weight_decay", 0.f),
                            .decoupled = node.attr_int("decoupled_weight_decay", 0) != 0};
        adam_kernel<<<grid_for(a.n), kThreads, 0, context().stream>>>(a);
        check_launch(k.node, "adam_kernel");
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
  add_if_schema(r, "cuda", kTrainrtDomain, "Increment", increment);
  add_if_schema(r, "cuda", kTrainrtDomain, "Assign", assign);
  for (const char* op : {"SGD", "Adam", "Increment", "Assign"})
    if (r.kernels.find("cuda", kTrainrtDomain, op)) r.kernels.set_skips_when_flagged("cuda", kTrainrtDomain, op);
}

}  // namespace trainrt::cuda
