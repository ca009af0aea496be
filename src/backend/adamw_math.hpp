// One AdamW element update (torch.optim.AdamW, non-amsgrad, non-foreach semantics), shared by the
// CPU backend and the CUDA kernel. The caller precomputes the step-level constants once.
#pragma once

#include <cmath>

#include "core/hd.hpp"

namespace sinklab::math {

struct AdamWConstants {
  float lr, beta1, beta2, eps, weight_decay;
  float bias_correction1;       // 1 - beta1^t
  float bias_correction2_sqrt;  // sqrt(1 - beta2^t)
};

template <class T>
SL_HD void adamw_element(T& param, T grad, T& m, T& v, const AdamWConstants& c) {
  param *= T(1) - T(c.lr) * T(c.weight_decay);
  m = T(c.beta1) * m + (T(1) - T(c.beta1)) * grad;
  v = T(c.beta2) * v + (T(1) - T(c.beta2)) * grad * grad;
  T step_size = T(c.lr) / T(c.bias_correction1);
  T denom = sqrt(v) / T(c.bias_correction2_sqrt) + T(c.eps);
  param -= step_size * m / denom;
}

}  // namespace sinklab::math
