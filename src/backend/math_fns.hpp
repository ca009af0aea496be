// Float/double overloads of the transcendental functions used by the *_math.hpp headers. They call
// the plain C functions (expf for float, exp for double), which exist on the host and in CUDA device
// code alike. Unqualified exp(float) inside a namespace would resolve to ::exp(double) on the host,
// silently computing every f32 activation in double (measured: the SwiGLU and cross-entropy kernels
// spent most of their time in libm's double exp).
#pragma once

#include <math.h>

#include "core/hd.hpp"

namespace sinklab::math {

SL_HD float fexp(float x) { return expf(x); }
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
