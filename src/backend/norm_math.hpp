// Per-row math of RMSNorm and LayerNorm, shared by the CPU backend and the CUDA kernels.
//
// T is the storage type (float, or double on the CPU); A is the accumulator type of the row reductions
// (the CPU backend uses double for both f32 and f64, a CUDA kernel would use float). Scalar pieces
// (rstd from a sum, one output element, one input-gradient element): the CUDA kernels call them around
// their warp-shuffle reductions, the CPU backend (cpu/norms.cpp) around its `omp simd` row sums.
//
// Derivations (d = row length, g = upstream gradient, w = weight or 1 when absent):
//   RMSNorm  y_i = x_i r w_i, r = (sum_j x_j^2 / d + eps)^(-1/2)
//            dr/dx_i = -r^3 x_i / d, so  dx_i = r g_i w_i - r^3 x_i / d * sum_j g_j w_j x_j
//            dw_i += g_i x_i r
//   LayerNorm xh_i = (x_i - mu) r, r = (var + eps)^(-1/2) with the biased variance (as torch)
//            y_i = xh_i w_i + b_i; with gh_i = g_i w_i the standard result is
//            dx_i = r (gh_i - mean_j gh_j - xh_i mean_j (gh_j xh_j))
//            dw_i += g_i xh_i,  db_i += g_i
#pragma once

#include <cmath>
#include <cstdint>

#include "core/hd.hpp"

namespace sinklab::math {

// ---- scalar pieces --------------------------------------------------------------------------------

// 1/sqrt(mean of squares + eps) from the row's sum of squares.
template <class A> SL_HD A rms_rstd(A sum_sq, int64_t d, A eps) { return A(1) / sqrt(sum_sq / A(d) + eps); }

// 1/sqrt(variance + eps) from the row's sum of squared deviations from the mean (biased variance).
template <class A> SL_HD A ln_rstd(A sum_sq_dev, int64_t d, A eps) { return A(1) / sqrt(sum_sq_dev / A(d) + eps); }

// One RMSNorm input gradient: r g_i w_i - r^3 x_i * (sum_j g_j w_j x_j) / d.
// `dot_over_d` = (sum_j g_j w_j x_j) / d.
template <class A> SL_HD A rms_dx(A r, A gw, A x, A dot_over_d) { return r * gw - r * r * r * x * dot_over_d; }

// One LayerNorm input gradient: r (gh_i - mean(gh) - xh_i mean(gh xh)).
template <class A> SL_HD A ln_dx(A r, A gh, A xh, A mean_gh, A mean_gh_xh) {
  return r * (gh - mean_gh - xh * mean_gh_xh);
}

// One RMSNorm output in the storage type T: x * rstd * w, rstd rounded to T once per row (w = 1 when
// there is no weight).
template <class T> SL_HD T rms_y(T x, T rstd, T w) { return x * rstd * w; }

// The row mean as a pair hi + lo in T (hi = T(mu), lo = T(mu - hi)), so that the normalisation in T
// keeps the precision of the accumulator's mean for rows whose mean is large next to their spread.
template <class A, class T> SL_HD void split_mean(A mu, T& hi, T& lo) {
  hi = T(mu);
  lo = T(mu - A(hi));
}

// One LayerNorm output in T: ((x - mean_hi) - mean_lo) * rstd * w + b (w = 1, b = 0 when absent).
template <class T> SL_HD T ln_y(T x, T mean_hi, T mean_lo, T rstd, T w, T b) {
  return ((x - mean_hi) - mean_lo) * rstd * w + b;
}

// Per-row terms of the parameter gradients, summed over rows: RMSNorm dw_i += g_i x_i r;
// LayerNorm dw_i += g_i (x_i - mu) r (and db_i += g_i).
template <class A> SL_HD A rms_dw_term(A g, A x, A r) { return g * x * r; }
template <class A> SL_HD A ln_dw_term(A g, A x, A mu, A r) { return g * (x - mu) * r; }

}  // namespace sinklab::math
