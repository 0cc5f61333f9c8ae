// Loops of the elementwise ops that the reference and the cpu backend share:
// ops/elementwise.cpp registers them with kParallel = false (the reference kernels),
// ops/elementwise_cpu.cpp with kParallel = true where oneDNN has no primitive (the same
// loop over oneTBB chunks, ops/core/parallel.h, so the same bits).
//
//   r.kernels.add("reference", "", "Sum", sum_kernel<false>);
//   r.kernels.add("cpu", "", "Erf", unary_op_kernel<true, unary_math::Erf>);
//   r.kernels.add("reference", "", "Pow", pow_kernel<false>);
//   r.kernels.add("cpu", "", "Pow", pow_kernel<true>);
//
// Formulas (T is the tensor's float type, every operation in T; fp64 is exact to
// the last rounding of each step). The unary activations and their gradients are the
// functors of ops/core/unary_math.h, run by unary_op_kernel and unary_grad_kernel for
// every op of the table in ops/unary_ops.h. The rest:
//
//   Clip(X, [min], [max])   y = min(max(x, lo), hi)         NaN stays NaN; lo > hi gives hi
//   Pow(A, B)               y = a^b with broadcasting; float base: pow in T; integer base:
//                           integer exponent by squaring (wraps mod 2^bits; b < 0 gives
//                           1/a^|b| truncated), float exponent through double, truncated
//   Where(C, X, Y)          out = c ? x : y with broadcasting (any dtype, copied as bytes)
//   Equal(A, B)             out = a == b with broadcasting (bool; A, B numbers or bool)
//   Greater, Less, GreaterOrEqual, LessOrEqual(A, B)
//                           out = a > b, a < b, a >= b, a <= b likewise (numbers only)
//   Mod(A, B; fmod)         with broadcasting; fmod = 0 (integers only): the remainder
//                           takes the divisor's sign (numpy, Python); fmod = 1: C's fmod
//                           (the dividend's sign); integer b == 0 is a bad-input error
//   Not(X)                  y = !x (bool)
//
// Backward ops (ai.trainrt), in dY's shape; conventions at the kinks are PyTorch's:
//
//   ClipGrad(dY, X, [min], [max])  dX = lo <= x <= hi ? dY : 0       (torch.clamp)
//   PowGrad(dY, A, B) -> dA, dB    dA = b == 0 ? 0 : dY * b * a^(b-1)
//                                  dB = a == 0 && b >= 0 ? 0 : dY * a^b * log(a)
//                                  (both in dY's shape: the rule reduces them)
#pragma once

#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <utility>
#include <vector>

#include "ops/core/broadcast.h"
#include "ops/core/common.h"
#include "ops/core/parallel.h"
#include "ops/unary_ops.h"

namespace trainrt::elementwise_loops {

// y[i] = fn(x[i]), float32/float64.
template <bool kParallel, typename Fn>
void unary_map(KernelContext& ctx, Fn fn) {
  dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* x = ctx.in(0).data<T>();
    T* y = ctx.out(0).data<T>();
    for_range<kParallel>(ctx.in(0).numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) y[i] = fn(x[i]);
    });
  });
}

// dx[i] = fn(dy[i], t[i]) over same-shaped float tensors.
template <bool kParallel, typename Fn>
void grad_map(KernelContext& ctx, Fn fn) {
  dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* dy = ctx.in(0).data<T>();
    const T* t = ctx.in(1).data<T>();
    T* dx = ctx.out(0).data<T>();
    for_range<kParallel>(ctx.out(0).numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dx[i] = fn(dy[i], t[i]);
    });
  });
}

// One input of broadcast_map: x[i] is the element of a tensor of element type T that
// output element i reads (ops/core/broadcast.h).
template <typename T>
struct BroadcastInput {
  BroadcastInput(const Tensor& t, const std::vector<int64_t>& out_dims)
      : p(reinterpret_cast<const T*>(t.raw())), index(t.dims(), out_dims) {}
  T operator[](int64_t i) const { return p[index(i)]; }
  const T* p;
  BroadcastIndex index;
};

template <typename>
using TensorRef = const Tensor&;

// out[i] = fn(in0[i0(i)], in1[i1(i)], ...) over the row-major output, every input
// broadcast to out's dims; Out and In... are the element types (read as their bytes,
// so a Bytes<n> copies any dtype of that size).
//   broadcast_map<kParallel, T, T, U>(y, [](T a, U b) { return pow_elem(a, b); }, a, b);
template <bool kParallel, typename Out, typename... In, typename Fn>
void broadcast_map(Tensor& out, Fn fn, TensorRef<In>... in) {
  Out* po = reinterpret_cast<Out*>(out.raw());
  auto run = [&](const BroadcastInput<In>&... x) {
    for_range<kParallel>(out.numel(), [&](int64_t s, int64_t e) {
      for (int64_t i = s; i < e; ++i) po[i] = fn(x[i]...);
    });
  };
  run(BroadcastInput<In>(in, out.dims())...);
}

// ---- Clip -------------------------------------------------------------------

// Clip's bounds as T: inputs 1 and 2 (opset >= 11) or attributes min/max (opset 6-10);
// a missing bound is T's lowest/highest value.
template <typename T>
std::pair<T, T> clip_bounds(const KernelContext& ctx) {
  T lo = std::numeric_limits<T>::lowest(), hi = std::numeric_limits<T>::max();
  const size_t first = ctx.node.domain.empty() ? 1 : 2;  // ClipGrad has dY first
  if (ctx.has_input(first)) lo = ctx.in(first).data<T>()[0];
  if (ctx.has_input(first + 1)) hi = ctx.in(first + 1).data<T>()[0];
  if (ctx.node.attrs.count("min")) lo = static_cast<T>(ctx.node.attr_float("min", 0.f));
  if (ctx.node.attrs.count("max")) hi = static_cast<T>(ctx.node.attr_float("max", 0.f));
  return {lo, hi};
}

template <bool kParallel>
void clip_kernel(KernelContext& ctx) {
  dispatch_arith(ctx.in(0).dtype(), [&](auto tag) {
    using T = decltype(tag);
    const std::pair<T, T> bounds = clip_bounds<T>(ctx);
    const T lo = bounds.first, hi = bounds.second;  // (clang 14 cannot capture bindings)
    const T* x = ctx.in(0).data<T>();
    T* y = ctx.out(0).data<T>();
    for_range<kParallel>(ctx.in(0).numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) {
        const T v = x[i] < lo ? lo : x[i];
        y[i] = v > hi ? hi : v;
      }
    });
  });
}

template <bool kParallel>
void clip_grad_kernel(KernelContext& ctx) {
  dispatch_float(ctx.in(0).dtype(), [&](auto tag) {
    using T = decltype(tag);
    const std::pair<T, T> bounds = clip_bounds<T>(ctx);
    const T lo = bounds.first, hi = bounds.second;  // (clang 14 cannot capture bindings)
    const T* dy = ctx.in(0).data<T>();
    const T* x = ctx.in(1).data<T>();
    T* dx = ctx.out(0).data<T>();
    for_range<kParallel>(ctx.out(0).numel(), [&](int64_t b, int64_t e) {
      for (int64_t i = b; i < e; ++i) dx[i] = lo <= x[i] && x[i] <= hi ? dy[i] : T(0);
    });
  });
}

// ---- the unary ops of the table (ops/unary_ops.h) ------------------------------------

// y = Op(x) and dX = Grad(dY, t) with the shared functors (ops/core/unary_math.h),
// built from the node's attributes.
template <bool kParallel, typename F>
void unary_op_kernel(KernelContext& ctx) {
  unary_map<kParallel>(ctx, UnaryAttrs<F>::of(ctx.node));
}
template <bool kParallel, typename G>
void unary_grad_kernel(KernelContext& ctx) {
  grad_map<kParallel>(ctx, UnaryAttrs<G>::of(ctx.node));
}

// ---- Pow ----------------------------------------------------------------------

// a^b for one element: T is the base's (and result's) type, U the exponent's.
template <typename T, typename U>
T pow_elem(T a, U b) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::pow(a, static_cast<T>(b));
  } else if constexpr (std::is_floating_point_v<U>) {
    return static_cast<T>(std::trunc(std::pow(static_cast<double>(a), static_cast<double>(b))));
  } else {
    if constexpr (std::is_signed_v<U>) {
      if (b < 0) {  // 1 / a^|b| truncated toward zero: 0 unless |a| == 1
        if (a == 1) return T(1);
        if constexpr (std::is_signed_v<T>)
          if (a == -1) return (b % 2) ? T(-1) : T(1);
        if (a == 0) throw_bad_input("", "Pow: integer 0 to a negative power");
        return T(0);
      }
    }
    uint64_t result = 1, base = static_cast<uint64_t>(a);  // wraps mod 2^64, narrowed below
    for (auto e = static_cast<uint64_t>(b); e; e >>= 1, base *= base)
      if (e & 1) result *= base;
    return static_cast<T>(result);
  }
}

template <bool kParallel>
void pow_kernel(KernelContext& ctx) {
  const Tensor &a = ctx.in(0), &b = ctx.in(1);
  dispatch_arith(a.dtype(), [&](auto ta) {
    dispatch_arith(b.dtype(), [&](auto tb) {
      using T = decltype(ta);
      using U = decltype(tb);
      broadcast_map<kParallel, T, T, U>(
          ctx.out(0), [](T x, U p) { return pow_elem(x, p); }, a, b);
    });
  });
}

// PowGrad(dY, A, B) -> dA, dB in dY's shape (either output may be omitted). A is a
// float; B is a float (for dB) or any exponent type (dA only).
template <bool kParallel>
void pow_grad_kernel(KernelContext& ctx) {
  const Tensor &dy = ctx.in(0), &a = ctx.in(1), &b = ctx.in(2);
  dispatch_float(a.dtype(), [&](auto ta) {
    dispatch_arith(b.dtype(), [&](auto tb) {
      using T = decltype(ta);
      using U = decltype(tb);
      const BroadcastIndex ia(a.dims(), dy.dims()), ib(b.dims(), dy.dims());
      const T* pdy = dy.data<T>();
      const T* pa = a.data<T>();
      const U* pb = b.data<U>();
      T* da = ctx.has_output(0) ? ctx.out(0).data<T>() : nullptr;
      U* db = nullptr;
      if constexpr (std::is_floating_point_v<U>)
        if (ctx.has_output(1)) db = ctx.out(1).data<U>();
      for_range<kParallel>(dy.numel(), [&](int64_t s, int64_t e) {
        for (int64_t i = s; i < e; ++i) {
          const T x = pa[ia(i)];
          const T p = static_cast<T>(pb[ib(i)]);
          if (da) da[i] = p == T(0) ? T(0) : pdy[i] * p * std::pow(x, p - T(1));
          if constexpr (std::is_floating_point_v<U>)
            if (db) db[i] = static_cast<U>(x == T(0) && p >= T(0) ? T(0) : pdy[i] * std::pow(x, p) * std::log(x));
        }
      });
    });
  });
}

// ---- Where, Equal ------------------------------------------------------------------

template <size_t kBytes>
struct Bytes {
  unsigned char b[kBytes];
};

template <bool kParallel>
void where_kernel(KernelContext& ctx) {
  const Tensor &c = ctx.in(0), &x = ctx.in(1), &y = ctx.in(2);
  auto run = [&](auto tag) {
    using E = decltype(tag);
    broadcast_map<kParallel, E, uint8_t, E, E>(
        ctx.out(0), [](uint8_t pick, E a, E b) { return pick ? a : b; }, c, x, y);
  };
  switch (dtype_size(x.dtype())) {
    case 1:
      return run(Bytes<1>{});
    case 2:
      return run(Bytes<2>{});
    case 4:
      return run(Bytes<4>{});
    case 8:
      return run(Bytes<8>{});
    default:
      throw_internal("Where", std::string("unexpected dtype ") + dtype_name(x.dtype()));
  }
}

// out = cmp(a, b) with broadcasting, bool out; a and b bool only for Equal.
template <bool kParallel, typename Cmp>
void compare_kernel(KernelContext& ctx, Cmp cmp) {
  const Tensor &a = ctx.in(0), &b = ctx.in(1);
  auto run = [&](auto tag) {
    using T = decltype(tag);
    broadcast_map<kParallel, uint8_t, T, T>(ctx.out(0), cmp, a, b);
  };
  if (a.dtype() == DataType::Bool)
    run(uint8_t{});
  else
    dispatch_arith(a.dtype(), run);
}

template <bool kParallel>
void equal_kernel(KernelContext& ctx) {
  compare_kernel<kParallel>(ctx, [](auto a, auto b) { return a == b; });
}
template <bool kParallel>
void greater_kernel(KernelContext& ctx) {
  compare_kernel<kParallel>(ctx, [](auto a, auto b) { return a > b; });
}
template <bool kParallel>
void less_kernel(KernelContext& ctx) {
  compare_kernel<kParallel>(ctx, [](auto a, auto b) { return a < b; });
}
template <bool kParallel>
void greater_or_equal_kernel(KernelContext& ctx) {
  compare_kernel<kParallel>(ctx, [](auto a, auto b) { return a >= b; });
}
template <bool kParallel>
void less_or_equal_kernel(KernelContext& ctx) {
  compare_kernel<kParallel>(ctx, [](auto a, auto b) { return a <= b; });
}

// ---- Mod, Not ------------------------------------------------------------------

// a mod b; kFmod: C's fmod (sign of a), else the sign of b (integers only).
template <bool kFmod, typename T>
T mod_of(T a, T b) {
  if constexpr (std::is_floating_point_v<T>) {
    return std::fmod(a, b);
  } else {
    if (b == 0) throw_bad_input("Mod", "integer modulo by zero");
    if constexpr (std::is_signed_v<T>) {
      if (b == -1) return T(0);  // MIN % -1 would overflow
      const T r = static_cast<T>(a % b);
      if constexpr (!kFmod)
        if (r != 0 && ((r < 0) != (b < 0))) return static_cast<T>(r + b);
      return r;
    } else {
      return static_cast<T>(a % b);
    }
  }
}

template <bool kParallel>
void mod_kernel(KernelContext& ctx) {
  const Tensor &a = ctx.in(0), &b = ctx.in(1);
  const bool fmod = ctx.node.attr_int("fmod", 0) != 0;
  dispatch_arith(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    if (fmod)
      broadcast_map<kParallel, T, T, T>(ctx.out(0), mod_of<true, T>, a, b);
    else
      broadcast_map<kParallel, T, T, T>(ctx.out(0), mod_of<false, T>, a, b);
  });
}

template <bool kParallel>
void not_kernel(KernelContext& ctx) {
  const uint8_t* x = ctx.in(0).data<uint8_t>();
  uint8_t* y = ctx.out(0).data<uint8_t>();
  for_range<kParallel>(ctx.in(0).numel(), [&](int64_t s, int64_t e) {
    for (int64_t i = s; i < e; ++i) y[i] = x[i] ? 0 : 1;
  });
}

// y = x0 + x1 + ... with broadcasting, per element left to right from 0.
// kParallel: the cpu kernel, the same code over parallel chunks (same bits).
// Inputs of y's shape (the gradient fan-out case, two inputs as a rule) are summed in
// one pass, ((0 + x0) + x1) + ..., the same additions in the same order as the
// general loop's, which zeroes y and adds each input in a pass of its own.
template <bool kParallel>
void sum_kernel(KernelContext& ctx) {
  Tensor& y = ctx.out(0);
  dispatch_float(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* py = y.data<T>();
    bool dense = true;
    for (size_t k = 0; k < ctx.inputs.size(); ++k) dense = dense && ctx.in(k).numel() == y.numel();
    if (dense) {
      std::vector<const T*> px;
      for (size_t k = 0; k < ctx.inputs.size(); ++k) px.push_back(ctx.in(k).data<T>());
      for_range<kParallel>(y.numel(), [&](int64_t begin, int64_t end) {
        const T* a = px[0];
        if (px.size() == 1) {
          for (int64_t i = begin; i < end; ++i) py[i] = T(0) + a[i];
          return;
        }
        const T* b = px[1];
        for (int64_t i = begin; i < end; ++i) py[i] = (T(0) + a[i]) + b[i];
        for (size_t k = 2; k < px.size(); ++k) {
          const T* c = px[k];
          for (int64_t i = begin; i < end; ++i) py[i] += c[i];
        }
      });
      return;
    }
    std::vector<BroadcastIndex> ix;
    for (size_t k = 0; k < ctx.inputs.size(); ++k) ix.emplace_back(ctx.in(k).dims(), y.dims());
    for_range<kParallel>(y.numel(), [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) py[i] = T(0);
      for (size_t k = 0; k < ctx.inputs.size(); ++k) {
        const T* px = ctx.in(k).data<T>();
        if (ctx.in(k).numel() == y.numel()) {  // the gradient fan-out case: a dense loop
          for (int64_t i = begin; i < end; ++i) py[i] += px[i];
        } else {
          for (int64_t i = begin; i < end; ++i) py[i] += px[ix[k](i)];
        }
      }
    });
  });
}

}  // namespace trainrt::elementwise_loops
