// The per-element math of the unary activations and their gradients, written once for
// every backend: the reference and cpu loops (ops/elementwise_loops.h, through the op
// table of ops/unary_ops.h) and the cuda kernels (ops/elementwise_cuda.cu) call these
// functors, so the CPU tests of a functor (tests/ops/test_unary_math.cpp: each gradient
// against a central difference of its forward in fp64, and the conventions at the
// kinks) are tests of what the GPU computes.
//
//   const float y = unary_math::Sigmoid{}(x);
//   const double dx = unary_math::GeluGrad{/*tanh_form=*/true}(dy, x);
//
// A forward functor maps x to y; a gradient functor maps (dY, t) to dX, where t is the
// forward's input X or its output Y, as the op table says (ops/unary_ops.h). Every
// operation is in T (float or double), in the reference's order, so the reference's bits
// do not depend on which backend runs the loop. The transcendental functions are the
// host's libm on the host and CUDA's on the device, which round differently by an ulp
// or so; nothing else differs.
//
// Formulas (conventions at the kinks are PyTorch's):
//   Relu         y = x < 0 ? 0 : x (NaN stays NaN)       dX = y > 0 ? dY : 0          (Y)
//   LeakyRelu    y = x < 0 ? alpha*x : x                  dX = x < 0 ? alpha*dY : dY   (X)
//   Sigmoid      y = 1/(1+e^-x), e^x/(1+e^x) for x < 0    dX = dY*y*(1-y)              (Y)
//   Tanh         y = tanh(x)                              dX = dY*(1-y^2)              (Y)
//   HardSigmoid  y = max(0, min(1, alpha*x + beta))       dX = 0 < alpha*x+beta < 1 ? alpha*dY : 0 (X)
//   HardSwish    y = x * min(max(x+3, 0), 6) / 6          dX = x < -3 ? 0 : x <= 3 ? dY*(x/3+1/2) : dY (X)
//   Sqrt         y = sqrt(x)                              dX = dY / (2y)               (Y)
//   Erf          y = erf(x)                               dX = dY * 2/sqrt(pi) * e^(-x^2) (X)
//   Gelu         none: y = x/2 (1 + erf(x/sqrt2))         dX = dY (Phi(x) + x phi(x))  (X)
//                tanh: y = x/2 (1 + tanh(k (x + c x^3))), k = sqrt(2/pi), c = 0.044715
//                      dX = dY ((1+t)/2 + x/2 (1-t^2) k (1 + 3c x^2)), t = tanh(k (x + c x^3))
//   Elu          y = x < 0 ? alpha (e^x - 1) : x          dX = x <= 0 ? alpha e^x dY : dY (X)
//   Softsign     y = x / (1 + |x|)                        dX = dY / (1 + |x|)^2        (X)
//   Softplus     y = log(1 + e^x), as max(x, 0) + log1p(e^-|x|)   dX = dY * sigmoid(x) (X)
//   Neg, Exp, Log, Reciprocal   y = -x, e^x, log x, 1/x   (gradients are other ops)
//
// Plain C++ for g++; under nvcc the functors are __host__ __device__.
#pragma once

#include <cmath>

#include "graph/float16.h"  // TRAINRT_HOST_DEVICE

namespace trainrt::unary_math {

// libm on the host, CUDA's overloads on the device (float and double each).
#ifdef __CUDA_ARCH__
#define TRAINRT_MATH(fn) ::fn
#else
#define TRAINRT_MATH(fn) std::fn
#endif
template <typename T>
TRAINRT_HOST_DEVICE T exp_of(T x) {
  return TRAINRT_MATH(exp)(x);
}
template <typename T>
TRAINRT_HOST_DEVICE T log_of(T x) {
  return TRAINRT_MATH(log)(x);
}
template <typename T>
TRAINRT_HOST_DEVICE T sqrt_of(T x) {
  return TRAINRT_MATH(sqrt)(x);
}
template <typename T>
TRAINRT_HOST_DEVICE T tanh_of(T x) {
  return TRAINRT_MATH(tanh)(x);
}
template <typename T>
TRAINRT_HOST_DEVICE T erf_of(T x) {
  return TRAINRT_MATH(erf)(x);
}
template <typename T>
TRAINRT_HOST_DEVICE T expm1_of(T x) {
  return TRAINRT_MATH(expm1)(x);
}
template <typename T>
TRAINRT_HOST_DEVICE T log1p_of(T x) {
  return TRAINRT_MATH(log1p)(x);
}
#undef TRAINRT_MATH

// pi and sqrt(2) rounded to T (std::numbers' values, which nvcc's device code lacks).
template <typename T>
TRAINRT_HOST_DEVICE constexpr T pi() {
  return T(3.14159265358979323846);
}
template <typename T>
TRAINRT_HOST_DEVICE constexpr T sqrt2() {
  return T(1.41421356237309504880);
}

struct Relu {
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T x) const {
    return x < T(0) ? T(0) : x;
  }
};
struct ReluGrad {  // (dY, Y)
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T dy, T y) const {
    return y > T(0) ? dy : T(0);
  }
};

struct LeakyRelu {
  double alpha = 0.01;
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T x) const {
    return x < T(0) ? static_cast<T>(alpha) * x : x;
  }
};
struct LeakyReluGrad {  // (dY, X): the forward's branch, x < 0
  double alpha = 0.01;
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T dy, T x) const {
    return x < T(0) ? static_cast<T>(alpha) * dy : dy;
  }
};

// A form where exp never overflows.
struct Sigmoid {
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T x) const {
    if (x >= T(0)) return T(1) / (T(1) + exp_of(-x));
    const T e = exp_of(x);
    return e / (T(1) + e);
  }
};
struct SigmoidGrad {  // (dY, Y)
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T dy, T y) const {
    return dy * y * (T(1) - y);
  }
};

struct Tanh {
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T x) const {
    return tanh_of(x);
  }
};
struct TanhGrad {  // (dY, Y)
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T dy, T y) const {
    return dy * (T(1) - y * y);
  }
};

struct HardSigmoid {
  double alpha = 0.2, beta = 0.5;
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T x) const {
    const T v = static_cast<T>(alpha) * x + static_cast<T>(beta);
    return v < T(0) ? T(0) : v > T(1) ? T(1) : v;
  }
};
struct HardSigmoidGrad {  // (dY, X)
  double alpha = 0.2, beta = 0.5;
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T dy, T x) const {
    const T v = static_cast<T>(alpha) * x + static_cast<T>(beta);
    return T(0) < v && v < T(1) ? static_cast<T>(alpha) * dy : T(0);
  }
};

// PyTorch's and oneDNN's order of operations.
struct HardSwish {
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T x) const {
    const T r = x + T(3) < T(0) ? T(0) : x + T(3) > T(6) ? T(6) : x + T(3);
    return x * r / T(6);
  }
};
struct HardSwishGrad {  // (dY, X)
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T dy, T x) const {
    return x < T(-3) ? T(0) : x <= T(3) ? dy * (x / T(3) + T(0.5)) : dy;
  }
};

struct Sqrt {
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T x) const {
    return sqrt_of(x);
  }
};
struct SqrtGrad {  // (dY, Y)
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T dy, T y) const {
    return dy / (T(2) * y);
  }
};

struct Erf {
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T x) const {
    return erf_of(x);
  }
};
struct ErfGrad {  // (dY, X)
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T dy, T x) const {
    return dy * (T(2) / sqrt_of(pi<T>())) * exp_of(-x * x);
  }
};

// Gelu's "approximate" attribute: tanh_form for "tanh", else "none" (erf).
struct Gelu {
  bool tanh_form = false;
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T x) const {
    if (tanh_form) {
      const T k = sqrt_of(T(2) / pi<T>());
      return T(0.5) * x * (T(1) + tanh_of(k * (x + T(0.044715) * x * x * x)));
    }
    return T(0.5) * x * (T(1) + erf_of(x / sqrt2<T>()));
  }
};
// PyTorch's gelu_backward.
struct GeluGrad {  // (dY, X)
  bool tanh_form = false;
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T dy, T x) const {
    if (tanh_form) {
      const T k = sqrt_of(T(2) / pi<T>()), c = T(0.044715);
      const T t = tanh_of(k * (x + c * x * x * x));
      return dy * (T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * k * (T(1) + T(3) * c * x * x));
    }
    const T cdf = T(0.5) * (T(1) + erf_of(x / sqrt2<T>()));
    const T pdf = exp_of(T(-0.5) * x * x) / sqrt_of(T(2) * pi<T>());
    return dy * (cdf + x * pdf);
  }
};

// expm1: alpha (e^x - 1) keeps its digits for x near 0 (PyTorch's form).
struct Elu {
  double alpha = 1.0;
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T x) const {
    return x < T(0) ? static_cast<T>(alpha) * expm1_of(x) : x;
  }
};
struct EluGrad {  // (dY, X); at x = 0 the negative side's alpha, as PyTorch's elu_backward
  double alpha = 1.0;
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T dy, T x) const {
    return x <= T(0) ? dy * static_cast<T>(alpha) * exp_of(x) : dy;
  }
};

struct Softsign {
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T x) const {
    return x / (T(1) + (x < T(0) ? -x : x));
  }
};
struct SoftsignGrad {  // (dY, X)
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T dy, T x) const {
    const T d = T(1) + (x < T(0) ? -x : x);
    return dy / (d * d);
  }
};

// Never overflows: e^-|x| <= 1.
struct Softplus {
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T x) const {
    return (x > T(0) ? x : T(0)) + log1p_of(exp_of(x < T(0) ? x : -x));
  }
};
struct SoftplusGrad {  // (dY, X)
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T dy, T x) const {
    return dy * Sigmoid{}(x);
  }
};

struct Neg {
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T x) const {
    return -x;
  }
};
struct Exp {
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T x) const {
    return exp_of(x);
  }
};
struct Log {
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T x) const {
    return log_of(x);
  }
};
struct Reciprocal {
  template <typename T>
  TRAINRT_HOST_DEVICE T operator()(T x) const {
    return T(1) / x;
  }
};

}  // namespace trainrt::unary_math
