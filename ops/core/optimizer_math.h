// The per-element updates of SGD and Adam, written once for every backend: the reference
// and cpu loops (ops/optimizer_loops.h) run them in double, the cuda kernels
// (ops/optimizer_cuda.cu) in the parameter's type T, from the same code; the arithmetic
// type A is the only difference. tests/ops/test_optimizer_math.cpp checks the device's
// form (A = float) against the reference's (A = double) and PyTorch's formulas.
//
//   const auto s = optimizer_math::sgd_of<double>(lr, momentum, dampening, wd, nesterov, step == 0);
//   for (int64_t i = 0; i < t.n; ++i) optimizer_math::sgd_element(s, t, i);
//
//   SGD   d = g + wd*p;  with a buffer: b = first step ? d : momentum*b + (1 - dampening)*d,
//         d = nesterov ? d + momentum*b : b;  p' = p - lr*d            (torch.optim.SGD)
//   Adam  AdamW: decay = lr*wd*p, else g += wd*p and decay = 0;
//         m' = b1*m + (1-b1)*g,  v' = b2*v + (1-b2)*g^2,
//         p' = p - (decay + (lr / (1 - b1^t)) * m' / (sqrt(v') / sqrt(1 - b2^t) + eps)),
//         t = step + 1                                     (torch.optim.Adam, AdamW)
//
// The step's constants (the bias corrections, 1 - dampening, lr*wd) are computed in
// double whatever A is, then rounded to A once. AdamW's decay is p - lr*wd*p rather than
// p*(1 - lr*wd): in float, 1 - lr*wd keeps lr*wd only to a multiple of 2^-24 (lr*wd =
// 1e-8 rounds to no decay at all), while lr*wd*p keeps it to float's relative rounding.
// Every input element is read before any output element is written, so an update may
// run in place (runtime/plan.cpp puts p' over p, m' over m, ...).
//
// Plain C++ for g++; under nvcc the functions are __host__ __device__.
#pragma once

#include <cmath>
#include <cstdint>

#include "graph/float16.h"  // TRAINRT_HOST_DEVICE
#include "ops/core/optimizer_args.h"
#include "ops/core/unary_math.h"

namespace trainrt::optimizer_math {

TRAINRT_HOST_DEVICE inline double pow_of(double x, double y) {
#ifdef __CUDA_ARCH__
  return ::pow(x, y);
#else
  return std::pow(x, y);
#endif
}

// One SGD or MultiSGD node's settings for one step, in the arithmetic type A.
template <typename A>
struct Sgd {
  A lr, momentum, one_minus_dampening, wd;
  bool nesterov, first;  // first: the step counter is 0 (the buffer starts as d)
};
template <typename A>
TRAINRT_HOST_DEVICE Sgd<A> sgd_of(double lr, double momentum, double dampening, double wd, bool nesterov, bool first) {
  return {static_cast<A>(lr),
          static_cast<A>(momentum),
          static_cast<A>(1.0 - dampening),
          static_cast<A>(wd),
          nesterov,
          first};
}

// The usual step's arithmetic (a momentum buffer, past the first step, no Nesterov) on
// values: returns p' and sets the buffer b. V is A or a vector of A's (GCC's vector
// types: the cpu loop runs it 2 elements at a time, ops/optimizer_loops.h).
template <typename A, typename V>
TRAINRT_HOST_DEVICE V sgd_momentum_step(const Sgd<A>& s, V p, V g, V buf, V& b) {
  const V d = g + s.wd * p;
  b = s.momentum * buf + s.one_minus_dampening * d;
  return p - s.lr * b;
}
template <typename A, typename T>
TRAINRT_HOST_DEVICE bool is_momentum_step(const Sgd<A>& s, const SgdTensors<T>& t) {
  return t.buf && !s.first && !s.nesterov;
}

template <typename A, typename T>
TRAINRT_HOST_DEVICE void sgd_element(const Sgd<A>& s, const SgdTensors<T>& t, int64_t i) {
  const A p = static_cast<A>(t.p[i]);
  if (is_momentum_step(s, t)) {
    A b;
    const A out = sgd_momentum_step(s, p, static_cast<A>(t.g[i]), static_cast<A>(t.buf[i]), b);
    if (t.buf_out) t.buf_out[i] = static_cast<T>(b);
    t.out[i] = static_cast<T>(out);
    return;
  }
  A d = static_cast<A>(t.g[i]) + s.wd * p;
  if (t.buf) {
    const A b = s.first ? d : s.momentum * static_cast<A>(t.buf[i]) + s.one_minus_dampening * d;
    if (t.buf_out) t.buf_out[i] = static_cast<T>(b);
    d = s.nesterov ? d + s.momentum * b : b;
  }
  t.out[i] = static_cast<T>(p - s.lr * d);
}

// One Adam or MultiAdam node's settings for one step (t = step + 1), in A.
template <typename A>
struct Adam {
  A b1, one_minus_b1, b2, one_minus_b2, eps, wd;
  A step_size;  // lr / (1 - b1^t)
  A sqrt_bc2;   // sqrt(1 - b2^t)
  A lr_wd;      // lr * wd (AdamW)
  bool decoupled;
};
template <typename A>
TRAINRT_HOST_DEVICE Adam<A> adam_of(double lr, int64_t step, double b1, double b2, double eps, double wd,
                                    bool decoupled) {
  const double t = static_cast<double>(step + 1);
  return {static_cast<A>(b1),
          static_cast<A>(1.0 - b1),
          static_cast<A>(b2),
          static_cast<A>(1.0 - b2),
          static_cast<A>(eps),
          static_cast<A>(wd),
          static_cast<A>(lr / (1.0 - pow_of(b1, t))),
          static_cast<A>(unary_math::sqrt_of(1.0 - pow_of(b2, t))),
          static_cast<A>(lr * wd),
          decoupled};
}

// Adam's arithmetic on values: returns p' and sets the moments m and v. V is A or a
// vector of A's (GCC's vector types: the cpu loop runs it 2 elements at a time,
// ops/optimizer_loops.h), `sqrt` V's square root.
template <typename A, typename V, typename Sqrt>
TRAINRT_HOST_DEVICE V adam_step(const Adam<A>& c, V w, V g, V m_in, V v_in, V& m, V& v, Sqrt sqrt) {
  V decay{};  // +0 (AdamW sets it below)
  if (c.decoupled)
    decay = c.lr_wd * w;  // AdamW
  else
    g = g + c.wd * w;  // Adam: the L2 penalty folded into the gradient
  m = c.b1 * m_in + c.one_minus_b1 * g;
  v = c.b2 * v_in + c.one_minus_b2 * g * g;
  return w - (decay + c.step_size * m / (sqrt(v) / c.sqrt_bc2 + c.eps));
}

// unary_math::sqrt_of as a function object (adam_step's `sqrt` for scalars).
struct SqrtOf {
  template <typename X>
  TRAINRT_HOST_DEVICE X operator()(X x) const {
    return unary_math::sqrt_of(x);
  }
};

template <typename A, typename T>
TRAINRT_HOST_DEVICE void adam_element(const Adam<A>& c, const AdamTensors<T>& a, int64_t i) {
  A m, v;
  const A out = adam_step(c, static_cast<A>(a.p[i]), static_cast<A>(a.g[i]), static_cast<A>(a.m[i]),
                          static_cast<A>(a.v[i]), m, v, SqrtOf{});
  a.m_out[i] = static_cast<T>(m);
  a.v_out[i] = static_cast<T>(v);
  a.out[i] = static_cast<T>(out);
}

}  // namespace trainrt::optimizer_math
