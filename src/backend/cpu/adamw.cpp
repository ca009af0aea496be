// AdamW on the CPU: the element update of backend/adamw_math.hpp over contiguous tensors, OpenMP over
// elements. Step-level constants are formed once, in double.

#include "backend/adamw_math.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_common.hpp"

namespace sinklab {

using cpu::dispatch_float;

// param, grad, m, v: same shape and dtype, contiguous. One step s.step >= 1 (torch.optim.AdamW).
void CpuBackend::adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& s) {
  const char* op = "adamw_update";
  cpu::check_same_shape(param, grad, op, "param", "grad");
  cpu::check_same_shape(param, m, op, "param", "m");
  cpu::check_same_shape(param, v, op, "param", "v");
  for (const Tensor* t : {&grad, &m, &v}) check_dtype(*t, param.dtype, op, "grad/m/v");
  SL_CHECK(param.is_contiguous() && grad.is_contiguous() && m.is_contiguous() && v.is_contiguous(),
           "adamw_update: param, grad, m and v must be contiguous");
  SL_CHECK(s.step >= 1, "adamw_update: step must be >= 1, got %lld", (long long)s.step);
  const math::AdamWConstants c =
      math::adamw_constants(s.lr, s.beta1, s.beta2, s.eps, s.weight_decay, s.step);
  const int64_t n = param.numel();
  dispatch_float(param.dtype, op, [&](auto zero) {
    using T = decltype(zero);
    T* p = param.ptr<T>();
    const T* g = grad.ptr<T>();
    T* mm = m.ptr<T>();
    T* vv = v.ptr<T>();
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) math::adamw_element<T>(p[i], g[i], mm[i], vv[i], c);
  });
}

}  // namespace sinklab
