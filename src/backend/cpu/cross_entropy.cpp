// Fused softmax cross-entropy on the CPU: one pass for the row maximum, one for sum exp(x - max)
// (accumulated in double), one writing the gradient. OpenMP across rows. Per-row math:
// backend/cross_entropy_math.hpp.

#include <cmath>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_common.hpp"
#include "backend/cross_entropy_math.hpp"

namespace sinklab {

using cpu::dispatch_float;

// losses[N]       = -log softmax(logits[n])[targets[n]]         (0 where targets[n] == ignore_index)
// d_logits[N,V]   = (softmax(logits[n]) - onehot) * grad_scale  (0 rows where ignored; may alias logits)
void CpuBackend::cross_entropy(Tensor losses, Tensor d_logits, Tensor logits, Tensor targets, int ignore_index,
                               double grad_scale) {
  const char* op = "cross_entropy";
  SL_CHECK(logits.ndim == 2, "cross_entropy: logits must be [N,V], got %s", logits.shape_str().c_str());
  const int64_t N = logits.shape[0], V = logits.shape[1];
  check_shape(targets, {N}, op, "targets");
  check_dtype(targets, DType::i32, op, "targets");
  check_shape(losses, {N}, op, "losses");
  check_dtype(losses, logits.dtype, op, "losses");
  if (d_logits.defined()) {
    check_shape(d_logits, {N, V}, op, "d_logits");
    check_dtype(d_logits, logits.dtype, op, "d_logits");
  }
  TensorRows rx = rows_of(logits, op, "logits");
  TensorRows rd = d_logits.defined() ? rows_of(d_logits, op, "d_logits") : TensorRows{};
  const int32_t* tgt = targets.ptr<int32_t>();
  const int64_t ts = targets.stride[0], ls = losses.stride[0];
  // Targets are checked up front (no throwing inside the parallel region).
  for (int64_t n = 0; n < N; ++n) {
    const int32_t t = tgt[n * ts];
    SL_CHECK(t == ignore_index || (t >= 0 && t < V),
             "cross_entropy: target %d of row %lld is outside the vocabulary [0, %lld) and is not ignore_index %d",
             t, (long long)n, (long long)V, ignore_index);
  }
  dispatch_float(logits.dtype, op, [&](auto zero) {
    using T = decltype(zero);
    const T scale = T(grad_scale);
#pragma omp parallel for schedule(static) if (N * V > 16384)
    for (int64_t n = 0; n < N; ++n) {
      const int32_t t = tgt[n * ts];
      const T* x = logits.ptr<T>() + rx.row_offset(n);
      T* d = d_logits.defined() ? d_logits.ptr<T>() + rd.row_offset(n) : nullptr;
      if (t == ignore_index) {
        losses.ptr<T>()[n * ls] = T(0);
        if (d)
          for (int64_t j = 0; j < V; ++j) d[j] = T(0);
        continue;
      }
      T mx = -INFINITY;
#pragma omp simd reduction(max : mx)
      for (int64_t j = 0; j < V; ++j) mx = x[j] > mx ? x[j] : mx;
      const T x_target = x[t];  // read before d (which may alias x) is written
      // The exps are vectorised (math::fexp) and the sum kept in double lanes (50k terms). With a
      // gradient wanted, each exp is computed once: stored in d, then scaled by grad_scale / sum.
      double sum = 0.0;
      if (d) {
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < V; ++j) {
          const T e = math::fexp(x[j] - mx);
          d[j] = e;
          sum += double(e);
        }
      } else {
#pragma omp simd reduction(+ : sum)
        for (int64_t j = 0; j < V; ++j) sum += double(math::fexp(x[j] - mx));
      }
      const math::SoftmaxStats<T> s{mx, T(sum)};
      losses.ptr<T>()[n * ls] = math::ce_loss(s, x_target);
      if (d) {
        const T factor = scale / T(sum);
#pragma omp simd
        for (int64_t j = 0; j < V; ++j) d[j] *= factor;
        d[t] = math::ce_grad(s, x_target, true, scale);
      }
    }
  });
}

}  // namespace sinklab
