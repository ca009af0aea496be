// Element types and their conversions. bf16/fp16 are storage types (weights, activations on GPU);
// arithmetic is fp32. fp64 exists for the CPU reference only: finite-difference checks run in double.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/hd.hpp"

namespace sinklab {

enum class DType : uint8_t { f32, f64, bf16, f16, i32 };

constexpr int dtype_size(DType t) {
  switch (t) {
    case DType::f32: return 4;
    case DType::f64: return 8;
    case DType::bf16: return 2;
    case DType::f16: return 2;
    case DType::i32: return 4;
  }
  return 0;
}

constexpr const char* dtype_name(DType t) {
  switch (t) {
    case DType::f32: return "f32";
    case DType::f64: return "f64";
    case DType::bf16: return "bf16";
    case DType::f16: return "f16";
    case DType::i32: return "i32";
  }
  return "?";
}

template <class T> struct dtype_of;
template <> struct dtype_of<float> { static constexpr DType value = DType::f32; };
template <> struct dtype_of<double> { static constexpr DType value = DType::f64; };
template <> struct dtype_of<int32_t> { static constexpr DType value = DType::i32; };

// Bit-level conversions, identical on host and device. bf16 rounds to nearest even (as torch does);
// NaN stays NaN.
SL_HD uint32_t f32_bits(float x) {
  uint32_t u;
  memcpy(&u, &x, 4);
  return u;
}
SL_HD float bits_f32(uint32_t u) {
  float x;
  memcpy(&x, &u, 4);
  return x;
}
SL_HD float bf16_to_f32(uint16_t h) { return bits_f32(uint32_t(h) << 16); }
SL_HD uint16_t f32_to_bf16(float x) {
  uint32_t u = f32_bits(x);
  if ((u & 0x7fffffffu) > 0x7f800000u) return uint16_t((u >> 16) | 0x40);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);
  return uint16_t(u >> 16);
}

// IEEE binary16 <-> binary32, exact for every half value (including subnormals, inf, NaN).
SL_HD float f16_to_f32(uint16_t h) {
  uint32_t sign = uint32_t(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t man = h & 0x3ffu;
  if (exp == 0) {
    // zero or subnormal: value = man * 2^-24
    float v = float(man) * 5.9604644775390625e-08f;
    return bits_f32(f32_bits(v) | sign);
  }
  if (exp == 31) return bits_f32(sign | 0x7f800000u | (man << 13));
  return bits_f32(sign | ((exp + 112u) << 23) | (man << 13));
}
// Round to nearest even.
SL_HD uint16_t f32_to_f16(float x) {
  uint32_t u = f32_bits(x);
  uint32_t sign = (u >> 16) & 0x8000u;
  uint32_t a = u & 0x7fffffffu;
  if (a > 0x7f800000u) return uint16_t(sign | 0x7e00u);            // NaN
  if (a >= 0x477ff000u) return uint16_t(sign | 0x7c00u);           // overflow (>= 65520) -> inf
  if (a < 0x38800000u) {                                            // result is subnormal or zero
    // a float below 2^-14: scale so the half subnormal step 2^-24 becomes 1 and round to nearest even
    float v = bits_f32(a) * 16777216.0f;  // * 2^24, exact
    uint32_t r = uint32_t(v);
    float frac = v - float(r);
    if (frac > 0.5f || (frac == 0.5f && (r & 1u))) ++r;
    return uint16_t(sign | r);
  }
  uint32_t rounded = a + 0xfffu + ((a >> 13) & 1u);
  return uint16_t(sign | ((rounded - 0x38000000u) >> 13));
}

// Element i of any storage dtype as double, and back: the one conversion path of copy/fill on every
// backend (so a CPU and a CUDA copy of the same data round identically).
SL_HD double load_as_double(const void* base, DType dt, int64_t i) {
  switch (dt) {
    case DType::f32: return static_cast<const float*>(base)[i];
    case DType::f64: return static_cast<const double*>(base)[i];
    case DType::bf16: return bf16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::f16: return f16_to_f32(static_cast<const uint16_t*>(base)[i]);
    case DType::i32: return static_cast<const int32_t*>(base)[i];
  }
  return 0.0;
}

SL_HD void store_from_double(void* base, DType dt, int64_t i, double v) {
  switch (dt) {
    case DType::f32: static_cast<float*>(base)[i] = float(v); break;
    case DType::f64: static_cast<double*>(base)[i] = v; break;
    case DType::bf16: static_cast<uint16_t*>(base)[i] = f32_to_bf16(float(v)); break;
    case DType::f16: static_cast<uint16_t*>(base)[i] = f32_to_f16(float(v)); break;
    case DType::i32: static_cast<int32_t*>(base)[i] = int32_t(v); break;
  }
}

}  // namespace sinklab
