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
// The normaliser is a function of an additive row reduction: R_i = sum_j term(w~_ij), Z~_i = finish(R_i)
// (sum: R/alpha; one: 1; max_abs_sum_one: max(|R|, 1); p_norm: R^(1/p) with term w^p).
//
// Row statistic (the stats tensor, what the backward needs to rebuild P without storing it):
//   with the running max:  stat_i = m_i + log Z~_i  (= log Z_i; for softmax the log-sum-exp),
//                          P_ij = exp(s_ij - stat_i);
//   without:               stat_i = R_i (signed for identity; max_abs_sum_one needs sign(R) backward),
//                          P_ij = sim(s_ij) / finish(R_i).
//
// Sink logit (optional, per head): an extra key with score S_h that every query sees and whose value
// is 0. Its weight sim(S_h; m) joins the row reduction (and the running max); it has no P column in
// the output, and dL/dS_h = sum_i attn_dscore(S_h, P_i,sink, ..., dP = 0, D_i).
//
// Backward (generic). With dP_ij = dO_i . v_j and D_i = sum_j P_ij dP_ij (= dO_i . o_i):
//   dL/dw_ij = (dP_ij - D_i * dZ_i/dw_ij) / Z_i            (norm's derivative: attn_norm_dz_dw;
//              sum: 1/alpha, one: 0, max_abs_sum_one: sign(R)[|R| > 1], p_norm: P_ij^(p-1))
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

// The parameters of one attention variant as a plain struct (device-copyable; ops::AttentionSpec may
// grow non-trivial members).
struct AttnConfig {
  AttnSim sim = AttnSim::exp;
  AttnNorm norm = AttnNorm::sum;
  AttnMask mask = AttnMask::causal;
  int64_t window = 0;
  int64_t prefix = 0;
  double sigmoid_bias = 0.0;
  double norm_alpha = 1.0;
  double norm_p = 1.0;
  bool sink = false;  // a learned per-head sink logit takes part in the normaliser
};

inline AttnConfig attn_config(const ops::AttentionSpec& s) {
  return AttnConfig{s.sim,         s.norm,       s.mask,       s.window, s.prefix,
                    s.sigmoid_bias, s.norm_alpha, s.norm_p, s.sink_logit.defined()};
}

// ---- exp ------------------------------------------------------------------------------------------

// exp in double: the library's. exp in float: on the host a branch-free Cephes-style expf (range
// reduction x = n ln2 + r, degree-6 polynomial; <= 2 ulp on [-87, 88], exactly 0 below) that the
// compiler vectorises inside the attention loops; on the device expf.
// exp of the attention weights: the shared vectorisable f32 exp of math_fns.hpp.
template <class A> SL_HD A attn_exp(A x) { return fexp(x); }

// ---- mask -----------------------------------------------------------------------------------------

// Whether query i sees key j (i in [0,T), j in [0,S)).
SL_HD bool attn_visible(const AttnConfig& c, int64_t i, int64_t j) {
  switch (c.mask) {
    case AttnMask::causal: return j <= i;
    case AttnMask::sliding_window: return j <= i && j > i - c.window;
    case AttnMask::prefix_lm: return j <= i || j < c.prefix;
  }
  return false;
}

// The keys query i may see lie in [attn_key_begin, attn_key_end) (a superset is allowed; attn_visible
// decides per element). Loops use the range to skip whole blocks.
SL_HD int64_t attn_key_begin(const AttnConfig& c, int64_t i, int64_t /*S*/) {
  switch (c.mask) {
    case AttnMask::causal: return 0;
    case AttnMask::sliding_window: return i - c.window + 1 > 0 ? i - c.window + 1 : 0;
    case AttnMask::prefix_lm: return 0;
  }
  return 0;
}
SL_HD int64_t attn_key_end(const AttnConfig& c, int64_t i, int64_t S) {
  switch (c.mask) {
    case AttnMask::causal:
    case AttnMask::sliding_window: return i + 1 < S ? i + 1 : S;
    case AttnMask::prefix_lm: {
      const int64_t e = i + 1 > c.prefix ? i + 1 : c.prefix;
      return e < S ? e : S;
    }
  }
  return S;
}

// ---- sim --------------------------------------------------------------------------------------------

// Whether the row is evaluated with the running-max shift m = max_j s_ij (else m = 0). The shift
// cancels in P only for an exponential sim under a normaliser homogeneous of degree 1 in w (sum,
// p_norm); the op rejects exp with any other normaliser (attn_config_error).
SL_HD bool attn_uses_max(const AttnConfig& c) { return c.sim == AttnSim::exp; }

// Why a configuration is invalid (nullptr when it is valid).
inline const char* attn_config_error(const AttnConfig& c) {
  if (c.mask == AttnMask::sliding_window && c.window <= 0) return "sliding_window needs window >= 1";
  if (c.mask == AttnMask::prefix_lm && c.prefix < 0) return "prefix_lm needs prefix >= 0";
  if (!(c.norm_alpha > 0.0) || !std::isfinite(c.norm_alpha)) return "norm_alpha must be finite and > 0";
  if (!(c.norm_p > 0.0) || !std::isfinite(c.norm_p)) return "norm_p must be finite and > 0";
  if (!std::isfinite(c.sigmoid_bias)) return "sigmoid_bias must be finite";
  if (c.norm_alpha != 1.0 && c.norm != AttnNorm::sum) return "norm_alpha applies to norm sum only";
  if (c.norm_p != 1.0 && c.norm != AttnNorm::p_norm) return "norm_p applies to norm p_norm only";
  if (c.sigmoid_bias != 0.0 && c.sim != AttnSim::sigmoid) return "sigmoid_bias applies to sim sigmoid only";
  if (c.sim == AttnSim::exp && c.norm != AttnNorm::sum && c.norm != AttnNorm::p_norm)
    return "sim exp is computed with the running-max shift, which cancels only under norm sum or p_norm";
  if (c.sim == AttnSim::identity && c.norm == AttnNorm::p_norm)
    return "norm p_norm needs non-negative weights (not sim identity)";
  if (c.sink && c.norm == AttnNorm::one) return "a sink logit only enters the normaliser: not with norm one";
  return nullptr;
}

// Shifted weight w~ = sim(s; m).
template <class A> SL_HD A attn_sim(const AttnConfig& c, A s, A m) {
  switch (c.sim) {
    case AttnSim::exp: return attn_exp(s - m);
    case AttnSim::sigmoid: return A(1) / (A(1) + attn_exp(-(s + A(c.sigmoid_bias))));
    case AttnSim::elu_plus_one: return s > A(0) ? s + A(1) : attn_exp(s);
    case AttnSim::identity: return s;
  }
  return A(0);
}

// Factor that rescales quantities accumulated under shift m_old to shift m_new (online softmax):
// w~(s; m_new) = w~(s; m_old) * factor.
template <class A> SL_HD A attn_sim_rescale(const AttnConfig& c, A m_old, A m_new) {
  switch (c.sim) {
    case AttnSim::exp: return attn_exp(m_old - m_new);
    case AttnSim::sigmoid:
    case AttnSim::elu_plus_one:
    case AttnSim::identity: return A(1);
  }
  return A(1);
}

// sim'(s_ij) / Z_i, from the score, the probability P_ij and 1/Z_i (inv_z; unused under the running max).
template <class A> SL_HD A attn_dsim_over_z(const AttnConfig& c, A s, A p, A inv_z) {
  switch (c.sim) {
    case AttnSim::exp: return p;  // d e^s/ds = e^s, divided by Z
    case AttnSim::sigmoid: {
      const A g = attn_sim(c, s, A(0));
      return g * (A(1) - g) * inv_z;
    }
    case AttnSim::elu_plus_one: return (s > A(0) ? A(1) : attn_exp(s)) * inv_z;
    case AttnSim::identity: return inv_z;
  }
  return A(0);
}

// ---- norm -------------------------------------------------------------------------------------------

// The normaliser is a function of an additive reduction over the row: Z~ = finish(sum_j term(w~_ij)),
// so loops reduce with a plain (vectorisable) sum. Under a change of shift the terms scale by
// attn_norm_term_rescale(factor) where the weights scale by factor (attn_sim_rescale).
template <class A> SL_HD A attn_norm_term(const AttnConfig& c, A w) {
  switch (c.norm) {
    case AttnNorm::sum:
    case AttnNorm::max_abs_sum_one: return w;
    case AttnNorm::one: return A(0);
    case AttnNorm::p_norm: return A(pow(double(w), c.norm_p));
  }
  return A(0);
}
template <class A> SL_HD A attn_norm_term_rescale(const AttnConfig& c, A factor) {
  switch (c.norm) {
    case AttnNorm::sum:
    case AttnNorm::max_abs_sum_one: return factor;
    case AttnNorm::one: return A(1);
    case AttnNorm::p_norm: return A(pow(double(factor), c.norm_p));
  }
  return A(1);
}
template <class A> SL_HD A attn_norm_finish(const AttnConfig& c, A sum_of_terms) {
  switch (c.norm) {
    case AttnNorm::sum: return sum_of_terms / A(c.norm_alpha);
    case AttnNorm::one: return A(1);
    case AttnNorm::max_abs_sum_one: {
      const A a = sum_of_terms < A(0) ? -sum_of_terms : sum_of_terms;
      return a > A(1) ? a : A(1);
    }
    case AttnNorm::p_norm: return A(pow(double(sum_of_terms), 1.0 / c.norm_p));
  }
  return sum_of_terms;
}

// dZ_i / dw_ij from P_ij and the row reduction R_i (sum_of_terms; its sign for max_abs_sum_one).
template <class A> SL_HD A attn_norm_dz_dw(const AttnConfig& c, A p, A sum_of_terms) {
  switch (c.norm) {
    case AttnNorm::sum: return A(1) / A(c.norm_alpha);
    case AttnNorm::one: return A(0);
    case AttnNorm::max_abs_sum_one:
      return sum_of_terms > A(1) ? A(1) : (sum_of_terms < A(-1) ? A(-1) : A(0));
    case AttnNorm::p_norm:  // d/dw_j (sum w^p)^(1/p) = (w_j / Z)^(p-1)
      return p > A(0) ? A(pow(double(p), c.norm_p - 1.0)) : A(0);
  }
  return A(0);
}

// ---- row statistic, probabilities, score gradient -----------------------------------------------

// The row statistic from the shift m and the row reduction R (sum of terms under the shift):
// log Z = m + log finish(R) with the running max (a row without visible keys: -inf, P = 0), else R.
template <class A> SL_HD A attn_stat(const AttnConfig& c, A m, A sum_of_terms) {
  return attn_uses_max(c) ? m + log(attn_norm_finish(c, sum_of_terms)) : sum_of_terms;
}

// 1 / Z~ for the forward's normalisation (0 for an empty row rather than inf).
template <class A> SL_HD A attn_inv_norm(A z_shifted) { return z_shifted != A(0) ? A(1) / z_shifted : A(0); }

// 1 / Z_i from the row statistic (only needed without the running max; 1 otherwise).
template <class A> SL_HD A attn_row_inv_norm(const AttnConfig& c, A stat) {
  return attn_uses_max(c) ? A(1) : attn_inv_norm(attn_norm_finish(c, stat));
}

// The row reduction R_i from the statistic (only meaningful without the running max).
template <class A> SL_HD A attn_row_sum(const AttnConfig& c, A stat) { return attn_uses_max(c) ? A(0) : stat; }

// Whether the row has no visible key (its P and gradients are 0).
template <class A> SL_HD bool attn_row_empty(const AttnConfig& c, A stat) {
  return attn_uses_max(c) && !(stat > -A(INFINITY));
}

// P_ij rebuilt from the score, the row statistic and 1/Z_i (a row without visible keys: call it not at all).
template <class A> SL_HD A attn_prob(const AttnConfig& c, A s, A stat, A inv_z) {
  if (attn_uses_max(c)) return attn_exp(s - stat);  // e^s / Z
  return attn_sim(c, s, A(0)) * inv_z;
}

// dL/ds_ij (the gradient of the score, before the scale) from dP_ij and D_i = sum_j P_ij dP_ij.
template <class A> SL_HD A attn_dscore(const AttnConfig& c, A s, A p, A inv_z, A row_sum, A dp, A D) {
  const A a = attn_dsim_over_z(c, s, p, inv_z);
  return a != A(0) ? a * (dp - D * attn_norm_dz_dw(c, p, row_sum)) : A(0);
}

}  // namespace sinklab::math
