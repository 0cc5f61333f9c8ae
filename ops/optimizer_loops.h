// The update loops of SGD and Adam (ops/optimizer.cpp's header comment gives the rules),
// one template each for both backends: the reference kernels (ops/optimizer.cpp)
// instantiate kParallel=false, the cpu kernels (ops/optimizer_cpu.cpp) kParallel=true,
// the same per-element update over parallel chunks (ops/core/parallel.h).
//
//   dispatch_float(t, [&](auto tag) { optimizer_loops::sgd<decltype(tag), true>(k); });
#pragma once

#include <cmath>

#include "ops/core/common.h"
#include "ops/core/parallel.h"

namespace trainrt::optimizer_loops {

// kParallel: the cpu kernel, the same per-element update over parallel chunks, so it
// equals the reference bit for bit.
template <typename T, bool kParallel>
void sgd(KernelContext& k) {
  const Tensor &p = k.in(0), &g = k.in(1);
  const double lr = k.in(2).data<float>()[0];
  const bool first = k.in(3).data<int64_t>()[0] == 0;
  const double momentum = k.node.attr_float("momentum", 0.f), dampening = k.node.attr_float("dampening", 0.f);
  const double wd = k.node.attr_float("weight_decay", 0.f);
  const bool nesterov = k.node.attr_int("nesterov", 0) != 0;
  const bool has_buf = k.has_input(4);
  const T *pp = p.data<T>(), *gp = g.data<T>();
  T* out = k.out(0).data<T>();
  const T* buf = has_buf ? k.in(4).data<T>() : nullptr;
  T* buf_out = has_buf && k.has_output(1) ? k.out(1).data<T>() : nullptr;
  for_range<kParallel>(p.numel(), [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      double d = gp[i] + wd * pp[i];
      if (has_buf) {
        // torch.optim.SGD: the buffer starts as the first step's d_p (no dampening).
        double b = first ? d : momentum * buf[i] + (1.0 - dampening) * d;
        if (buf_out) buf_out[i] = static_cast<T>(b);
        d = nesterov ? d + momentum * b : b;
      }
      out[i] = static_cast<T>(pp[i] - lr * d);
    }
  });
}

template <typename T, bool kParallel>
void adam(KernelContext& k) {
  const Tensor& p = k.in(0);
  const double lr = k.in(2).data<float>()[0];
  const double t = static_cast<double>(k.in(3).data<int64_t>()[0] + 1);
  const double b1 = k.node.attr_float("beta1", 0.9f), b2 = k.node.attr_float("beta2", 0.999f);
  const double eps = k.node.attr_float("epsilon", 1e-8f), wd = k.node.attr_float("weight_decay", 0.f);
  const bool decoupled = k.node.attr_int("decoupled_weight_decay", 0) != 0;
  const T *pp = p.data<T>(), *gp = k.in(1).data<T>(), *m = k.in(4).data<T>(), *v = k.in(5).data<T>();
  T *out = k.out(0).data<T>(), *m_out = k.out(1).data<T>(), *v_out = k.out(2).data<T>();
  const double bc1 = 1.0 - std::pow(b1, t), bc2 = 1.0 - std::pow(b2, t);
  for_range<kParallel>(p.numel(), [=](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) {
      double w = pp[i], g = gp[i];
      if (decoupled)
        w *= 1.0 - lr * wd;  // AdamW
      else
        g += wd * w;  // Adam: L2 penalty folded into the gradient
      double mi = b1 * m[i] + (1.0 - b1) * g;
      double vi = b2 * v[i] + (1.0 - b2) * g * g;
      m_out[i] = static_cast<T>(mi);
      v_out[i] = static_cast<T>(vi);
      out[i] = static_cast<T>(w - (lr / bc1) * mi / (std::sqrt(vi) / std::sqrt(bc2) + eps));
    }
  });
}

}  // namespace trainrt::optimizer_loops
