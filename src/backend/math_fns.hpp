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
// (max rel. error ~2 ulp) written without calls or branches, so the compiler vectorises the loops
// that use it (libm's expf is a scalar call: measured 5x slower in the cross-entropy and SwiGLU loops).
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
SL_HD float ftanh(float x) { return tanhf(x); }
SL_HD double ftanh(double x) { return tanh(x); }
SL_HD float ferf(float x) { return erff(x); }
SL_HD double ferf(double x) { return erf(x); }
SL_HD float fsqrt(float x) { return sqrtf(x); }
SL_HD double fsqrt(double x) { return sqrt(x); }

}  // namespace sinklab::math
