// The update loops of SGD and Adam (the per-element update, shared with the cuda kernels:
// ops/core/optimizer_math.h, in double here), one template each for both backends and for
// the single and multi-tensor ops: the
// reference kernels (ops/optimizer.cpp) instantiate kParallel=false, the cpu kernels
// (ops/optimizer_cpu.cpp) kParallel=true, the same per-element update over parallel
// chunks (ops/core/parallel.h). MultiSGD and MultiAdam run the same per-tensor update
// (sgd_update, adam_update) as SGD and Adam, so a multi node equals its single nodes
// bit for bit.
//
//   dispatch_float(t, [&](auto tag) { optimizer_loops::sgd<decltype(tag), true>(k); });
//   dispatch_float(t, [&](auto tag) { optimizer_loops::multi_sgd<decltype(tag), true>(k); });
#pragma once

#include <cmath>
#include <cstring>
#ifdef __SSE2__
#include <emmintrin.h>
#endif
#include <type_traits>
#include <vector>

#include "ops/core/common.h"
#include "ops/core/optimizer_args.h"
#include "ops/core/optimizer_math.h"
#include "ops/core/parallel.h"

namespace trainrt::optimizer_loops {

// The settings of one SGD or MultiSGD node in double: its attributes, lr and step
// (input slots lr_slot and lr_slot + 1).
using SgdRule = optimizer_math::Sgd<double>;
inline SgdRule sgd_rule(const KernelContext& k, size_t lr_slot) {
  return optimizer_math::sgd_of<double>(k.in(lr_slot).data<float>()[0], k.node.attr_float("momentum", 0.f),
                                        k.node.attr_float("dampening", 0.f), k.node.attr_float("weight_decay", 0.f),
                                        k.node.attr_int("nesterov", 0) != 0, k.in(lr_slot + 1).data<int64_t>()[0] == 0);
}

// Two floats widened to doubles and back: the cpu loops' vectors, SSE2's width (wider
// vectors change the ABI of the calls GCC may not inline).
using F32x2 = float __attribute__((vector_size(8)));
using F64x2 = double __attribute__((vector_size(16)));
inline F64x2 load2(const float* p) {
  F32x2 v;
  std::memcpy(&v, p, sizeof v);
  return __builtin_convertvector(v, F64x2);
}
inline void store2(float* p, F64x2 v) {
  const F32x2 f = __builtin_convertvector(v, F32x2);
  std::memcpy(p, &f, sizeof f);
}

// Elements [begin, end) of one parameter. The cpu kernel (kVector) runs the usual fp32
// step with momentum 2 elements at a time in double vectors (GCC's -O2 left the loop
// scalar: MultiSGD took 79 ms of the Wide ResNet's 3.3 s step on an AVX-512 Xeon, 42 ms
// so), the same formula and roundings as the reference's sgd_element.
template <typename T, bool kVector>
void sgd_update(const SgdRule& r, const SgdTensors<T>& t, int64_t begin, int64_t end) {
  int64_t i = begin;
  if constexpr (kVector && std::is_same_v<T, float>) {
    if (optimizer_math::is_momentum_step(r, t) && t.buf_out) {
      for (; i + 2 <= end; i += 2) {  // every input read before the stores: in place is fine
        F64x2 b;
        const F64x2 out = optimizer_math::sgd_momentum_step(r, load2(t.p + i), load2(t.g + i), load2(t.buf + i), b);
        store2(t.buf_out + i, b);
        store2(t.out + i, out);
      }
    }
  }
  for (; i < end; ++i) optimizer_math::sgd_element(r, t, i);
}

// The settings of one Adam or MultiAdam node in double, with the step's bias corrections.
using AdamRule = optimizer_math::Adam<double>;
inline AdamRule adam_rule(const KernelContext& k, size_t lr_slot) {
  return optimizer_math::adam_of<double>(k.in(lr_slot).data<float>()[0], k.in(lr_slot + 1).data<int64_t>()[0],
                                         k.node.attr_float("beta1", 0.9f), k.node.attr_float("beta2", 0.999f),
                                         k.node.attr_float("epsilon", 1e-8f), k.node.attr_float("weight_decay", 0.f),
                                         k.node.attr_int("decoupled_weight_decay", 0) != 0);
}

// The cpu kernel (kVector) runs fp32 2 elements at a time in double vectors, as
// sgd_update, with SSE2's exact square root: the reference's bits.
template <typename T, bool kVector>
void adam_update(const AdamRule& r, const AdamTensors<T>& t, int64_t begin, int64_t end) {
  int64_t i = begin;
#ifdef __SSE2__
  if constexpr (kVector && std::is_same_v<T, float>) {
    auto sqrt2 = [](F64x2 x) { return reinterpret_cast<F64x2>(_mm_sqrt_pd(reinterpret_cast<__m128d>(x))); };
    for (; i + 2 <= end; i += 2) {  // every input read before the stores: in place is fine
      F64x2 m, v;
      const F64x2 out =
          optimizer_math::adam_step(r, load2(t.p + i), load2(t.g + i), load2(t.m + i), load2(t.v + i), m, v, sqrt2);
      store2(t.m_out + i, m);
      store2(t.v_out + i, v);
      store2(t.out + i, out);
    }
  }
#endif
  for (; i < end; ++i) optimizer_math::adam_element(r, t, i);
}

// f(tensor, begin, end) over every element of every tensor (counts[i] elements each):
// the reference one tensor after the other, the cpu kernel over chunks of at most kGrain
// elements of all tensors together, in parallel.
template <bool kParallel, typename F>
void for_tensor_chunks(const std::vector<int64_t>& counts, F&& f) {
  if constexpr (!kParallel) {
    for (size_t t = 0; t < counts.size(); ++t)
      if (counts[t] > 0) f(t, int64_t{0}, counts[t]);
  } else {
    struct Chunk {
      size_t tensor;
      int64_t begin, end;
    };
    std::vector<Chunk> chunks;
    for (size_t t = 0; t < counts.size(); ++t)
      for (int64_t b = 0; b < counts[t]; b += kGrain) chunks.push_back({t, b, std::min(counts[t], b + kGrain)});
    parallel_ranges(static_cast<int64_t>(chunks.size()), 1, [&](int64_t c0, int64_t c1) {
      for (int64_t c = c0; c < c1; ++c) {
        const Chunk& x = chunks[static_cast<size_t>(c)];
        f(x.tensor, x.begin, x.end);
      }
    });
  }
}

//   SGD(param, grad, lr, step [, momentum_buf]) -> param' [, momentum_buf']
template <typename T, bool kParallel>
void sgd(KernelContext& k) {
  const SgdRule r = sgd_rule(k, 2);
  const SgdTensors<T> t = sgd_tensors<T>(k);
  for_range<kParallel>(t.n, [&](int64_t begin, int64_t end) { sgd_update<T, kParallel>(r, t, begin, end); });
}

//   Adam(param, grad, lr, step, exp_avg, exp_avg_sq) -> param', exp_avg', exp_avg_sq'
template <typename T, bool kParallel>
void adam(KernelContext& k) {
  const AdamRule r = adam_rule(k, 2);
  const AdamTensors<T> t = adam_tensors<T>(k);
  for_range<kParallel>(t.n, [&](int64_t begin, int64_t end) { adam_update<T, kParallel>(r, t, begin, end); });
}

// The element counts of a multi node's tensors (for_tensor_chunks).
template <typename Tensors>
std::vector<int64_t> counts_of(const std::vector<Tensors>& ts) {
  std::vector<int64_t> counts;
  for (const Tensors& t : ts) counts.push_back(t.n);
  return counts;
}

//   MultiSGD(lr, step, p_1, g_1, [m_1], p_2, g_2, [m_2], ...) -> p_1', [m_1'], p_2', [m_2'], ...
template <typename T, bool kParallel>
void multi_sgd(KernelContext& k) {
  const SgdRule r = sgd_rule(k, 0);
  const std::vector<SgdTensors<T>> ts = multi_sgd_tensors<T>(k);
  for_tensor_chunks<kParallel>(
      counts_of(ts), [&](size_t t, int64_t begin, int64_t end) { sgd_update<T, kParallel>(r, ts[t], begin, end); });
}

//   MultiAdam(lr, step, p_1, g_1, exp_avg_1, exp_avg_sq_1, ...) -> p_1', exp_avg_1', exp_avg_sq_1', ...
template <typename T, bool kParallel>
void multi_adam(KernelContext& k) {
  const AdamRule r = adam_rule(k, 0);
  const std::vector<AdamTensors<T>> ts = multi_adam_tensors<T>(k);
  for_tensor_chunks<kParallel>(
      counts_of(ts), [&](size_t t, int64_t begin, int64_t end) { adam_update<T, kParallel>(r, ts[t], begin, end); });
}

}  // namespace trainrt::optimizer_loops
