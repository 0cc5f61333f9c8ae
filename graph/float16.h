// IEEE half and bfloat16 conversions, callable from host and device code, so that the
// host's kernels (Cast, the importer, the reference's rounding of convolution inputs
// under --precision bf16/fp16) and the cuda kernels round every float the same way.
//
//   uint16_t h = float_to_half(x);          // round to nearest even, overflow to Inf
//   float y = bfloat16_to_float(float_to_bfloat16(x));
//
// NaN stays NaN (quiet); half subnormals are kept, not flushed.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>

#ifdef __CUDACC__
#define TRAINRT_HOST_DEVICE __host__ __device__
#else
#define TRAINRT_HOST_DEVICE
#endif

namespace trainrt {

TRAINRT_HOST_DEVICE inline uint32_t float_bits(float f) {
  uint32_t u;
  memcpy(&u, &f, sizeof u);
  return u;
}
TRAINRT_HOST_DEVICE inline float bits_float(uint32_t u) {
  float f;
  memcpy(&f, &u, sizeof f);
  return f;
}

TRAINRT_HOST_DEVICE inline float half_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    if (man == 0) return bits_float(sign);
    int e = -1;  // subnormal: renormalise
    do {
      ++e;
      man <<= 1;
    } while ((man & 0x400u) == 0);
    return bits_float(sign | static_cast<uint32_t>(127 - 15 - e) << 23 | (man & 0x3ffu) << 13);
  }
  if (exp == 31) return bits_float(sign | 0x7f800000u | man << 13);
  return bits_float(sign | (exp + 112) << 23 | man << 13);
}

TRAINRT_HOST_DEVICE inline uint16_t float_to_half(float f) {
  const uint32_t x = float_bits(f);
  const auto sign = static_cast<uint16_t>((x >> 16) & 0x8000u);
  const uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return sign | 0x7c00u | (abs > 0x7f800000u ? 0x200u : 0u);
  if (abs >= 0x477ff000u) return sign | 0x7c00u;    // overflow to inf after rounding
  if (abs < 0x38800000u) {                          // subnormal or zero in half
    const float v = bits_float(abs) * 16777216.0f;  // * 2^24, exact
    return sign | static_cast<uint16_t>(rintf(v));  // ties to even (the default rounding mode)
  }
  const uint32_t mant = abs + 0xfffu + ((abs >> 13) & 1u);  // round to nearest even
  return sign | static_cast<uint16_t>((mant - 0x38000000u) >> 13);
}

TRAINRT_HOST_DEVICE inline float bfloat16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

TRAINRT_HOST_DEVICE inline uint16_t float_to_bfloat16(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);  // quiet NaN
  x += 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>(x >> 16);
}

}  // namespace trainrt
