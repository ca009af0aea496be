// One AdamW element update (torch.optim.AdamW, non-amsgrad, non-foreach semantics), shared by the
// CPU backend and the CUDA kernel. The caller precomputes the step-level constants once, in double
// (adamw_constants): 1 - beta2 = 0.001 must not be formed in float (1 - 0.999f = 0.00099998713, a
// 1.3e-5 relative error in v); torch also forms these scalars in double before the tensor op.
#pragma once

#include <cmath>
#include <cstdint>

#include "backend/math_fns.hpp"
#include "core/hd.hpp"

namespace sinklab::math {

struct AdamWConstants {
  double lr, beta1, beta2, eps, weight_decay;
  double bias_correction1;       // 1 - beta1^t
  double bias_correction2_sqrt;  // sqrt(1 - beta2^t)
  double one_minus_beta1;        // 1 - beta1
  double one_minus_beta2;        // 1 - beta2
  double decay;                  // 1 - lr * weight_decay
  double step_size;              // lr / bias_correction1
};

inline AdamWConstants adamw_constants(double lr, double beta1, double beta2, double eps, double weight_decay,
                                      int64_t step) {
  AdamWConstants c{};
  c.lr = lr;
  c.beta1 = beta1;
  c.beta2 = beta2;
  c.eps = eps;
  c.weight_decay = weight_decay;
  c.bias_correction1 = 1.0 - std::pow(beta1, double(step));
  c.bias_correction2_sqrt = std::sqrt(1.0 - std::pow(beta2, double(step)));
  c.one_minus_beta1 = 1.0 - beta1;
  c.one_minus_beta2 = 1.0 - beta2;
  c.decay = 1.0 - lr * weight_decay;
  c.step_size = lr / c.bias_correction1;
  return c;
}

template <class T>
SL_HD void adamw_element(T& param, T grad, T& m, T& v, const AdamWConstants& c) {
  param *= T(c.decay);
  m = T(c.beta1) * m + T(c.one_minus_beta1) * grad;
  v = T(c.beta2) * v + T(c.one_minus_beta2) * grad * grad;
  T denom = fsqrt(v) / T(c.bias_correction2_sqrt) + T(c.eps);
  param -= T(c.step_size) * m / denom;
}

}  // namespace sinklab::math
