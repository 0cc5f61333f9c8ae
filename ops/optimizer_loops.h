// The update loops of SGD and Adam (ops/optimizer.cpp's header comment gives the rules),
// one template each for both backends and for the single and multi-tensor ops: the
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
#include <vector>

#include "ops/core/common.h"
#include "ops/core/parallel.h"
#include "ops/optimizer_args.h"

namespace trainrt::optimizer_loops {

// The settings of one SGD or MultiSGD node: its attributes, lr and step (input slots
// lr_slot and lr_slot + 1).
struct SgdRule {
  double lr, momentum, dampening, wd;
  bool nesterov, first;
};

inline SgdRule sgd_rule(const KernelContext& k, size_t lr_slot) {
  return {.lr = k.in(lr_slot).data<float>()[0],
          .momentum = k.node.attr_float("momentum", 0.f),
          .dampening = k.node.attr_float("dampening", 0.f),
          .wd = k.node.attr_float("weight_decay", 0.f),
          .nesterov = k.node.attr_int("nesterov", 0) != 0,
          .first = k.in(lr_slot + 1).data<int64_t>()[0] == 0};
}

// Elements [begin, end) of one parameter.
template <typename T>
void sgd_update(const SgdRule& r, const SgdTensors<T>& t, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    double d = t.g[i] + r.wd * t.p[i];
    if (t.buf) {
      // torch.optim.SGD: the buffer starts as the first step's d_p (no dampening).
      double b = r.first ? d : r.momentum * t.buf[i] + (1.0 - r.dampening) * d;
      if (t.buf_out) t.buf_out[i] = static_cast<T>(b);
      d = r.nesterov ? d + r.momentum * b : b;
    }
    t.out[i] = static_cast<T>(t.p[i] - r.lr * d);
  }
}

// The settings of one Adam or MultiAdam node, with the step's bias corrections.
struct AdamRule {
  double lr, b1, b2, eps, wd, bc1, bc2;
  bool decoupled;
};

inline AdamRule adam_rule(const KernelContext& k, size_t lr_slot) {
  AdamRule r{.lr = k.in(lr_slot).data<float>()[0],
             .b1 = k.node.attr_float("beta1", 0.9f),
             .b2 = k.node.attr_float("beta2", 0.999f),
             .eps = k.node.attr_float("epsilon", 1e-8f),
             .wd = k.node.attr_float("weight_decay", 0.f),
             .bc1 = 0,
             .bc2 = 0,
             .decoupled = k.node.attr_int("decoupled_weight_decay", 0) != 0};
  const double t = static_cast<double>(k.in(lr_slot + 1).data<int64_t>()[0] + 1);
  r.bc1 = 1.0 - std::pow(r.b1, t);
  r.bc2 = 1.0 - std::pow(r.b2, t);
  return r;
}

template <typename T>
void adam_update(const AdamRule& r, const AdamTensors<T>& t, int64_t begin, int64_t end) {
  for (int64_t i = begin; i < end; ++i) {
    double w = t.p[i], g = t.g[i];
    if (r.decoupled)
      w *= 1.0 - r.lr * r.wd;  // AdamW
    else
      g += r.wd * w;  // Adam: L2 penalty folded into the gradient
    double mi = r.b1 * t.m[i] + (1.0 - r.b1) * g;
    double vi = r.b2 * t.v[i] + (1.0 - r.b2) * g * g;
    t.m_out[i] = static_cast<T>(mi);
    t.v_out[i] = static_cast<T>(vi);
    t.out[i] = static_cast<T>(w - (r.lr / r.bc1) * mi / (std::sqrt(vi) / std::sqrt(r.bc2) + r.eps));
  }
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
  for_range<kParallel>(t.n, [&](int64_t begin, int64_t end) { sgd_update(r, t, begin, end); });
}

//   Adam(param, grad, lr, step, exp_avg, exp_avg_sq) -> param', exp_avg', exp_avg_sq'
template <typename T, bool kParallel>
void adam(KernelContext& k) {
  const AdamRule r = adam_rule(k, 2);
  const AdamTensors<T> t = adam_tensors<T>(k);
  for_range<kParallel>(t.n, [&](int64_t begin, int64_t end) { adam_update(r, t, begin, end); });
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
  for_tensor_chunks<kParallel>(counts_of(ts),
                               [&](size_t t, int64_t begin, int64_t end) { sgd_update(r, ts[t], begin, end); });
}

//   MultiAdam(lr, step, p_1, g_1, exp_avg_1, exp_avg_sq_1, ...) -> p_1', exp_avg_1', exp_avg_sq_1', ...
template <typename T, bool kParallel>
void multi_adam(KernelContext& k) {
  const AdamRule r = adam_rule(k, 0);
  const std::vector<AdamTensors<T>> ts = multi_adam_tensors<T>(k);
  for_tensor_chunks<kParallel>(counts_of(ts),
                               [&](size_t t, int64_t begin, int64_t end) { adam_update(r, ts[t], begin, end); });
}

}  // namespace trainrt::optimizer_loops
