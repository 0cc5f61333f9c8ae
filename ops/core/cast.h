// Cast's element conversions, shared by its reference kernel (ops/misc.cpp) and the
// cpu kernel (ops/misc_cpu.cpp), so that both convert every element identically.
//
//   cast_elements<false>(x, y);   // the reference: one loop over every element
//   cast_elements<true>(x, y);    // the same loop over oneTBB chunks (ops/core/parallel.h)
//
// Semantics (ONNX leaves the undefined cases open; these are trainrt's):
//   float -> float16/bfloat16   round to nearest even (through float32)
//   float -> integer            truncation toward zero; NaN -> 0; out of range saturates
//   integer -> integer          wraps modulo 2^bits (C++ conversion)
//   anything -> bool            x != 0
#pragma once

#include <cmath>
#include <limits>
#include <type_traits>

#include "ops/core/common.h"
#include "ops/core/parallel.h"

namespace trainrt::cast {

struct HalfBits {
  uint16_t bits;
};  // float16
struct BF16Bits {
  uint16_t bits;
};  // bfloat16
struct BoolByte {
  uint8_t bits;
};  // bool, one byte 0/1

// Calls f(S{}) with S the element storage type of dtype t: the 16-bit floats
// and bool as their bit patterns, everything else as dispatch_arith's type.
template <typename F>
void dispatch_storage(DataType t, F&& f) {
  switch (t) {
    case DataType::Float16:
      f(HalfBits{});
      break;
    case DataType::BFloat16:
      f(BF16Bits{});
      break;
    case DataType::Bool:
      f(BoolByte{});
      break;
    default:
      dispatch_arith(t, f);
  }
}

// A stored element as a C++ arithmetic value (half types widen to float).
template <typename S>
auto load(S s) {
  if constexpr (std::is_same_v<S, HalfBits>)
    return half_to_float(s.bits);
  else if constexpr (std::is_same_v<S, BF16Bits>)
    return bfloat16_to_float(s.bits);
  else if constexpr (std::is_same_v<S, BoolByte>)
    return s.bits != 0;
  else
    return s;
}

// Float to integer: truncation toward zero; NaN gives 0 and out-of-range values
// saturate (ONNX leaves both undefined; C++ would make them UB).
template <typename D, typename V>
D float_to_int(V v) {
  if (std::isnan(v)) return D(0);
  const long double w = v;
  const long double hi = std::ldexp(1.0L, std::numeric_limits<D>::digits);  // max + 1
  const long double lo = std::is_signed_v<D> ? -hi : 0.0L;                  // min
  if (w >= hi) return std::numeric_limits<D>::max();
  if (w < lo) return std::numeric_limits<D>::lowest();
  return static_cast<D>(v);
}

// Value v (from load) stored as D. Integer to integer wraps modulo 2^bits.
template <typename D, typename V>
D store(V v) {
  if constexpr (std::is_same_v<D, HalfBits>)
    return HalfBits{float_to_half(static_cast<float>(v))};
  else if constexpr (std::is_same_v<D, BF16Bits>)
    return BF16Bits{float_to_bfloat16(static_cast<float>(v))};
  else if constexpr (std::is_same_v<D, BoolByte>)
    return BoolByte{static_cast<uint8_t>(v != V(0) ? 1 : 0)};
  else if constexpr (std::is_integral_v<D> && std::is_floating_point_v<V>)
    return float_to_int<D>(v);
  else
    return static_cast<D>(v);
}

// y[i] = x[i] converted to y's dtype; y has x's element count.
template <bool kParallel>
void cast_elements(const Tensor& x, Tensor& y) {
  dispatch_storage(x.dtype(), [&](auto from) {
    dispatch_storage(y.dtype(), [&](auto to) {
      using S = decltype(from);
      using D = decltype(to);
      const S* px = x.data<S>();
      D* py = y.data<D>();
      for_range<kParallel>(x.numel(), [=](int64_t begin, int64_t end) {
        for (int64_t i = begin; i < end; ++i) py[i] = store<D>(load(px[i]));
      });
    });
  });
}

}  // namespace trainrt::cast
