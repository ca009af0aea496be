// Per-element math of the state-space (Mamba) layers and of mixture-of-experts routing, shared by the
// CPU backend and (when they exist) CUDA kernels: one output element of the causal depthwise
// convolution, one time step of the selective scan, one row of the top-k router. Formulas: ops.hpp.
//
// T is the storage type (float, or double on the CPU); A is the accumulator type (the CPU backend uses
// double for both: the scan's state carries over T steps and the router's softmax picks the experts,
// so neither should depend on float rounding).
#pragma once

#include <cstdint>

#include "backend/math_fns.hpp"
#include "core/hd.hpp"

namespace sinklab::math {

// softplus(u) = log(1 + e^u), returning u itself above 20 as torch.nn.functional.softplus does
// (beta = 1, threshold = 20: there log(1 + e^u) == u to double precision anyway).
template <class A> SL_HD A softplus(A u) { return u > A(20) ? u : flog(A(1) + fexp(u)); }

// One output of the causal depthwise convolution for one channel:
//   bias + sum_{k<K} w[k] * x(t - (K-1) + k), with x(s) = 0 for s < 0.
// `x` points at the channel's element at time 0 and successive times are `stride_t` elements apart.
template <class A, class T>
SL_HD A causal_conv1d_at(const T* x, int64_t stride_t, int64_t t, const T* w, int64_t K, A bias) {
  A acc = bias;
  for (int64_t k = 0; k < K; ++k) {
    const int64_t s = t - (K - 1) + k;
    if (s >= 0) acc += A(w[k]) * A(x[s * stride_t]);
  }
  return acc;
}

// The discretisation step delta = softplus(dt + dt_bias), or dt + dt_bias without softplus.
template <class A> SL_HD A scan_delta(A dt, A dt_bias, bool use_softplus) {
  const A u = dt + dt_bias;
  return use_softplus ? softplus(u) : u;
}

// The state matrix entry from its stored logarithm: A = -exp(A_log) (negative: the state decays).
template <class A> SL_HD A scan_a_from_log(A a_log) { return -fexp(a_log); }

// One step of the selective scan for one channel: updates the channel's state h[N] in place,
//   h[n] = exp(delta a[n]) h[n] + delta b[n] x,
// and returns sum_n c[n] h[n] (the D skip term is the caller's). a = A[d, :] (already -exp(A_log)),
// b = B[b,t,:], c = C[b,t,:].
template <class A, class T>
SL_HD A selective_scan_step(A* h, const A* a, const T* b, const T* c, int64_t N, A x, A delta) {
  A y = A(0);
  const A delta_x = delta * x;
  for (int64_t n = 0; n < N; ++n) {
    h[n] = fexp(delta * a[n]) * h[n] + delta_x * A(b[n]);
    y += A(c[n]) * h[n];
  }
  return y;
}

// The top-k router of one row: p = softmax(logits[0..E)), then the k largest p in descending order
// (ties: the lower index first, by scanning upwards and replacing only on a strictly larger p), written
// to weight[0..k) (not renormalised) and expert[0..k). O(k E), which is nothing for k <= E ~ 16.
template <class A, class T>
SL_HD void moe_topk_row(T* weight, int32_t* expert, const T* logits, int64_t E, int64_t k) {
  A max_logit = A(logits[0]);
  for (int64_t e = 1; e < E; ++e) max_logit = A(logits[e]) > max_logit ? A(logits[e]) : max_logit;
  A sum = A(0);
  for (int64_t e = 0; e < E; ++e) sum += fexp(A(logits[e]) - max_logit);
  for (int64_t s = 0; s < k; ++s) {
    int64_t best = -1;
    for (int64_t e = 0; e < E; ++e) {
      bool taken = false;
      for (int64_t j = 0; j < s; ++j) taken = taken || expert[j] == int32_t(e);
      if (!taken && (best < 0 || A(logits[e]) > A(logits[best]))) best = e;
    }
    expert[s] = int32_t(best);
    weight[s] = T(fexp(A(logits[best]) - max_logit) / sum);
  }
}

}  // namespace sinklab::math
