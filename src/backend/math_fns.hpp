// Float/double overloads of the transcendental functions used by the *_math.hpp headers. They call
// the plain C functions (expf for float, exp for double), which exist on the host and in CUDA device
// code alike. Unqualified exp(float) inside a namespace would resolve to ::exp(double) on the host,
// silently computing every f32 activation in double (measured: the SwiGLU and cross-entropy kernels
// spent most of their time in libm's double exp).
#pragma once

#include <math.h>

#include <bit>
#include <cstdint>

#include "core/hd.hpp"

namespace sinklab::math {

// f32 exp. On the device: expf. On the host: a Cephes-style range reduction + degree-5 polynomial
// (max rel. error ~2 ulp) written without calls, so the compiler vectorises the loops that use it
// (libm's expf is a scalar call: measured 5x slower in the cross-entropy and SwiGLU loops). Its clamps
// and its underflow select are selects only under -fno-trapping-math (CMakeLists.txt); GCC's default
// keeps them as branches and the loops scalar (tests/cpp/vectorise checks both).
// Underflows to 0 below -87 and saturates at exp(88) like expf's finite range.
SL_HD float fexp(float x) {
#if defined(__CUDA_ARCH__)
  return expf(x);
#else
  const float xc = x < -87.0f ? -87.0f : (x > 88.0f ? 88.0f : x);
  // n = round(x / ln 2) by adding and removing 1.5 * 2^23 (round-to-nearest in the FPU's default mode):
  // unlike floorf this vectorises without -fno-trapping-math.
  const float n = (xc * 1.44269504088896341f + 12582912.0f) - 12582912.0f;
  float r = xc - n * 0.693359375f;                             // x - n ln2, ln2 split in two parts
  r = r - n * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  const float y = p * r * r + r + 1.0f;
  const float two_n = std::bit_cast<float>((int32_t(n) + 127) << 23);
  return x < -87.0f ? 0.0f : y * two_n;
#endif
}
SL_HD double fexp(double x) { return exp(x); }
SL_HD float flog(float x) { return logf(x); }
SL_HD double flog(double x) { return log(x); }

// x with the sign of s (bit operations: vectorises, unlike a branch).
SL_HD float copy_sign(float x, float s) {
  return std::bit_cast<float>((std::bit_cast<uint32_t>(x) & 0x7fffffffu) | (std::bit_cast<uint32_t>(s) & 0x80000000u));
}

// f32 tanh. On the host, branch-free so the GELU-tanh loops vectorise (libm's tanhf is a scalar call):
// |x| < 0.625: x + x^3 P(x^2), otherwise 1 - 2 / (e^{2|x|} + 1), sign restored. P is a least-squares
// fit (sinklab's own) of (tanh x - x) / x^3; max abs error 1.1e-7 over the line.
SL_HD float ftanh(float x) {
#if defined(__CUDA_ARCH__)
  return tanhf(x);
#else
  const float a = x < 0.0f ? -x : x, z = a * a;
  float p = -6.155212812e-03f;
  p = p * z + 2.104569995e-02f;
  p = p * z + -5.386392106e-02f;
  p = p * z + 1.333289069e-01f;
  p = p * z + -3.333333141e-01f;
  const float small = a + a * z * p;
  const float large = 1.0f - 2.0f / (fexp(2.0f * (a < 20.0f ? a : 20.0f)) + 1.0f);
  const float y = copy_sign(a < 0.625f ? small : large, x);
  return x != x ? x : y;  // NaN stays NaN
#endif
}
SL_HD double ftanh(double x) { return tanh(x); }

// f32 erf. On the host, branch-free so the exact-GELU loops vectorise (libm's erff is a scalar call:
// the GELU of the Pythia survey models spent most of its time in it): |x| <= 1: x P(x^2);
// 1 < |x| < 3.92: R(u), u = (|x| - 2.46) / 1.46 in [-1, 1]; |x| >= 3.92: +-1 (1 - erf(3.92) = 1.2e-8,
// below f32 resolution at 1). P and R are least-squares fits (sinklab's own, on Chebyshev nodes). R is
// one degree-12 polynomial where there was 1 - e^{-x^2} Q(u): no exp, 12 fewer operations, exact GELU
// of Pythia-14M 600 -> 400 us a call on one thread. Max abs error 1.6e-7 for |x| <= 1, 9.3e-8 beyond
// (libm's erff: 3e-8); tests/cpp/test_ops_activations.cpp checks it against std::erf.
SL_HD float ferf(float x) {
#if defined(__CUDA_ARCH__)
  return erff(x);
#else
  const float a = x < 0.0f ? -x : x, z = a * a;
  float p = -9.728409678e-06f;
  p = p * z + 1.128817519e-04f;
  p = p * z + -8.487267788e-04f;
  p = p * z + 5.221261499e-03f;
  p = p * z + -2.686551745e-02f;
  p = p * z + 1.128378411e-01f;
  p = p * z + -3.761263859e-01f;
  p = p * z + 1.128379167e+00f;
  const float u = ((a < 3.92f ? a : 3.92f) - 2.46f) * 0.6849315f;
  float q = -8.599194116e-04f;
  q = q * u + 1.629612991e-03f;
  q = q * u + 2.283840673e-03f;
  q = q * u + -9.083879180e-03f;
  q = q * u + 8.065709844e-03f;
  q = q * u + 6.526904646e-03f;
  q = q * u + -2.869897336e-02f;
  q = q * u + 4.509779066e-02f;
  q = q * u + -4.500537366e-02f;
  q = q * u + 3.060109727e-02f;
  q = q * u + -1.393160224e-02f;
  q = q * u + 3.878064919e-03f;
  q = q * u + 9.994966984e-01f;
  const float y = copy_sign(a <= 1.0f ? a * p : (a < 3.92f ? q : 1.0f), x);
  return x != x ? x : y;  // NaN stays NaN
#endif
}
SL_HD double ferf(double x) { return erf(x); }
SL_HD float fsqrt(float x) { return sqrtf(x); }
SL_HD double fsqrt(double x) { return sqrt(x); }

}  // namespace sinklab::math
