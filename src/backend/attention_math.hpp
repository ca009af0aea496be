// Per-element math of the generic attention operation (DESIGN.md, "The generic attention operation"),
// shared by the CPU backend and the CUDA kernels. The loops (cpu/attention.cpp, a flash-style kernel)
// are written once over these pieces; a new sim / norm / mask case is one enum value in ops.hpp plus
// one `case` in each switch below.
//
// For one head, query i and the keys j the mask lets it see:
//   s_ij = scale * <q_i, k_j>,   w_ij = sim(s_ij),   Z_i = norm(w_i.),   P_ij = w_ij / Z_i,
//   o_i  = sum_j P_ij v_j.
//
// Shifted weights (the running-max trick). A row is evaluated with a shift m_i: w~_ij = sim(s_ij; m_i).
// For exp, w~ = exp(s - m) with m = max_j s_ij, so w~ <= 1 and Z~ = Z e^{-m}; P = w~ / Z~ is unchanged.
// Other cases use m = 0 (attn_uses_max is false) and w~ = w.
//
// Row statistic (the stats tensor, what the backward needs to rebuild P without storing it):
//   stat_i = m_i + log Z~_i  (= log Z_i, the log-normaliser; for softmax the log-sum-exp)
// and P_ij = attn_prob(s_ij, stat_i).
//
// Backward (generic). With dP_ij = dO_i . v_j and D_i = sum_j P_ij dP_ij (= dO_i . o_i):
//   dL/dw_ij = (dP_ij - D_i * dZ_i/dw_ij) / Z_i            (norm's derivative: attn_norm_dz_dw)
//   dL/ds_ij = sim'(s_ij) * dL/dw_ij                          (sim's derivative: attn_dsim_over_z = sim'/Z)
//   dq_i = scale * sum_j ds_ij k_j,  dk_j = scale * sum_i ds_ij q_i,  dv_j = sum_i P_ij dO_i.
// Softmax: sim'(s)/Z = P and dZ/dw = 1, so ds_ij = P_ij (dP_ij - D_i).
//
// A is the arithmetic type (float or double); the CPU backend evaluates weights in the storage type
// and accumulates row sums in double.
#pragma once

#include <bit>
#include <cmath>
#include <cstdint>

#include "backend/math_fns.hpp"
#include "backend/ops.hpp"
#include "core/hd.hpp"

namespace sinklab::math {

using ops::AttnMask;
using ops::AttnNorm;
using ops::AttnSim;

// ---- exp ------------------------------------------------------------------------------------------

// exp in double: the library's. exp in float: on the host a branch-free Cephes-style expf (range
// reduction x = n ln2 + r, degree-6 polynomial; <= 2 ulp on [-87, 88], exactly 0 below) that the
// compiler vectorises inside the attention loops; on the device expf.
// exp of the attention weights: the shared vectorisable f32 exp of math_fns.hpp.
template <class A> SL_HD A attn_exp(A x) { return fexp(x); }

// ---- mask -----------------------------------------------------------------------------------------

// Whether query i sees key j (i in [0,T), j in [0,S)).
SL_HD bool attn_visible(AttnMask mask, int64_t i, int64_t j) {
  switch (mask) {
    case AttnMask::causal: return j <= i;
  }
  return false;
}

// The keys query i may see lie in [attn_key_begin, attn_key_end) (a superset is allowed; attn_visible
// decides per element). Loops use the range to skip whole blocks.
SL_HD int64_t attn_key_begin(AttnMask mask, int64_t /*i*/, int64_t /*S*/) {
  switch (mask) {
    case AttnMask::causal: return 0;
  }
  return 0;
}
SL_HD int64_t attn_key_end(AttnMask mask, int64_t i, int64_t S) {
  switch (mask) {
    case AttnMask::causal: return i + 1 < S ? i + 1 : S;
  }
  return S;
}

// ---- sim --------------------------------------------------------------------------------------------

// Whether the row is evaluated with the running-max shift m = max_j s_ij (else m = 0). The shift
// cancels in P only for an exponential sim under a normaliser homogeneous of degree 1 in w.
SL_HD bool attn_uses_max(AttnSim sim, AttnNorm norm) {
  bool exp_sim = false, homogeneous = false;
  switch (sim) {
    case AttnSim::exp: exp_sim = true; break;
  }
  switch (norm) {
    case AttnNorm::sum: homogeneous = true; break;
  }
  return exp_sim && homogeneous;
}

// Shifted weight w~ = sim(s; m).
template <class A> SL_HD A attn_sim(AttnSim sim, A s, A m) {
  switch (sim) {
    case AttnSim::exp: return attn_exp(s - m);
  }
  return A(0);
}

// Factor that rescales quantities accumulated under shift m_old to shift m_new (online softmax):
// w~(s; m_new) = w~(s; m_old) * factor.
template <class A> SL_HD A attn_sim_rescale(AttnSim sim, A m_old, A m_new) {
  switch (sim) {
    case AttnSim::exp: return attn_exp(m_old - m_new);
  }
  return A(1);
}

// sim'(s_ij) / Z_i, from the score, the probability P_ij and the row statistic log Z_i.
template <class A> SL_HD A attn_dsim_over_z(AttnSim sim, A /*s*/, A p, A /*stat*/) {
  switch (sim) {
    case AttnSim::exp: return p;  // d e^s/ds = e^s, divided by Z
  }
  return A(0);
}

// ---- norm -------------------------------------------------------------------------------------------

// The normaliser is a function of an additive reduction over the row: Z~ = finish(sum_j term(w~_ij)),
// so loops reduce with a plain (vectorisable) sum. Under a change of shift the terms scale by
// attn_norm_term_rescale(factor) where the weights scale by factor (attn_sim_rescale).
template <class A> SL_HD A attn_norm_term(AttnNorm norm, A w) {
  switch (norm) {
    case AttnNorm::sum: return w;
  }
  return A(0);
}
template <class A> SL_HD A attn_norm_term_rescale(AttnNorm norm, A factor) {
  switch (norm) {
    case AttnNorm::sum: return factor;
  }
  return A(1);
}
template <class A> SL_HD A attn_norm_finish(AttnNorm norm, A sum_of_terms) {
  switch (norm) {
    case AttnNorm::sum: return sum_of_terms;
  }
  return sum_of_terms;
}

// dZ_i / dw_ij expressed through P_ij (the normalisers are homogeneous of degree 1 in w).
template <class A> SL_HD A attn_norm_dz_dw(AttnNorm norm, A /*p*/) {
  switch (norm) {
    case AttnNorm::sum: return A(1);
  }
  return A(0);
}

// ---- row statistic, probabilities, score gradient -----------------------------------------------

// stat = log Z = m + log Z~ (a row without visible keys has Z~ = 0: stat = -inf, P = 0).
template <class A> SL_HD A attn_stat(A m, A z_shifted) { return m + log(z_shifted); }

// 1 / Z~ for the forward's normalisation (0 for an empty row rather than inf).
template <class A> SL_HD A attn_inv_norm(A z_shifted) { return z_shifted > A(0) ? A(1) / z_shifted : A(0); }

// P_ij rebuilt from the score and the row statistic (a row without visible keys: call it not at all).
template <class A> SL_HD A attn_prob(AttnSim sim, A s, A stat) {
  switch (sim) {
    case AttnSim::exp: return attn_exp(s - stat);  // e^s / Z
  }
  return A(0);
}

// dL/ds_ij (the gradient of the score, before the scale) from dP_ij and D_i = sum_j P_ij dP_ij.
template <class A> SL_HD A attn_dscore(AttnSim sim, AttnNorm norm, A s, A p, A stat, A dp, A D) {
  return attn_dsim_over_z(sim, s, p, stat) * (dp - D * attn_norm_dz_dw(norm, p));
}

}  // namespace sinklab::math
