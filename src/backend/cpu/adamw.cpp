// AdamW on the CPU: the element update of backend/adamw_math.hpp over contiguous tensors, OpenMP over
// elements. Step-level constants are formed once, in double.

#include "backend/adamw_math.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_common.hpp"

namespace sinklab {

using cpu::dispatch_float;

namespace {

// n elements of one tensor: the gradient scaled as scale() would (grad_scale != 1), then adamw_element;
// lp (optional) receives the updated parameters (the widening of cpu/bf16_storage.hpp rounds them).
template <class T>
void adamw_span(T* p, const T* g, T* m, T* v, T* lp, int64_t n, const AdamWStep& s, double weight_decay) {
  const math::AdamWConstants c = math::adamw_constants(s.lr, s.beta1, s.beta2, s.eps, weight_decay, s.step);
  if (s.grad_scale == 1.0) {
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) math::adamw_element<T>(p[i], g[i], m[i], v[i], c);
  } else {
    const T f = T(s.grad_scale);
#pragma omp parallel for simd schedule(static) if (n > 65536)
    for (int64_t i = 0; i < n; ++i) math::adamw_element<T>(p[i], g[i] * f, m[i], v[i], c);
  }
  if (lp)
    for (int64_t i = 0; i < n; ++i) lp[i] = p[i];
}

}  // namespace

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
  dispatch_float(param.dtype, op, [&](auto zero) {
    using T = decltype(zero);
    adamw_span<T>(param.ptr<T>(), grad.ptr<T>(), m.ptr<T>(), v.ptr<T>(), nullptr, param.numel(), s, s.weight_decay);
  });
}

// ---------------------------------------------------------------------------------------------------
// The multi-tensor ops: each range as the single-tensor op runs it.

void CpuBackend::sum_squares_ranges(Tensor out, Tensor flat, const FlatRanges& ranges) {
  const char* op = "sum_squares_ranges";
  SL_CHECK(flat.ndim == 1 && flat.is_contiguous(), "%s: flat must be 1-D and contiguous, got %s", op,
           flat.shape_str().c_str());
  const int32_t slots = check_flat_ranges(ranges, flat.numel(), int32_t(out.numel()), op);
  SL_CHECK(out.dtype == DType::f64 && out.is_contiguous() && out.device == flat.device,
           "%s: out must be contiguous f64 on flat's device", op);
  (void)slots;
  double* o = out.ptr<double>();
  for (int64_t i = 0; i < out.numel(); ++i) o[i] = 0.0;
  for (size_t r = 0; r < ranges.ranges.size(); ++r) {
    const FlatRange range = ranges.ranges[r];
    if (range.size() > 0) o[ranges.tags[r]] += sum_squares(flat.slice(0, range.begin, range.size()));
  }
}

void CpuBackend::adamw_update_ranges(Tensor param, Tensor grad, Tensor m, Tensor v, Tensor param_lp,
                                     const FlatRanges& ranges, const AdamWStep& s) {
  const char* op = "adamw_update_ranges";
  for (const Tensor* t : {&param, &grad, &m, &v}) {
    SL_CHECK(t->ndim == 1 && t->is_contiguous() && t->dtype == DType::f32 && t->numel() == param.numel(),
             "%s: param, grad, m and v must be contiguous f32 [n] alike", op);
  }
  // (A bf16 param_lp arrives here widened to f32, cpu/bf16_storage.hpp.)
  SL_CHECK(!param_lp.defined() || (param_lp.is_contiguous() && param_lp.numel() == param.numel() &&
                                   param_lp.dtype == DType::f32),
           "%s: param_lp must be contiguous [n] like param", op);
  SL_CHECK(s.step >= 1, "%s: step must be >= 1, got %lld", op, (long long)s.step);
  check_flat_ranges(ranges, param.numel(), 2, op);
  for (size_t r = 0; r < ranges.ranges.size(); ++r) {
    const FlatRange range = ranges.ranges[r];
    const int64_t b = range.begin;
    adamw_span<float>(param.ptr<float>() + b, grad.ptr<float>() + b, m.ptr<float>() + b, v.ptr<float>() + b,
                      param_lp.defined() ? param_lp.ptr<float>() + b : nullptr, range.size(), s,
                      ranges.tags[r] == 1 ? s.weight_decay : 0.0);
  }
}

}  // namespace sinklab
