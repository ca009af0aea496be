// Per-element math of the generic attention operation (docs/DESIGN.md, "The generic attention operation"),
// shared by the CPU backend and the CUDA kernels. The loops (cpu/attention.cpp, a flash-style kernel)
// are written once over these pieces; a new sim / norm / mask case is one enum value in ops.hpp plus
// one `case` in each switch below.
//
// For one head h, query i and the keys j it sees — the lead keys j < L (L = lead_keys: learnable KV /
// K biases, always visible, no position bias) and the positional keys j' = j - L the mask lets it see:
//   s_ij = scale * <q_i, k_j> + g_h(i - j')   (g = 0 on lead keys; ALiBi or T5 relative bias)
//   w_ij = sim(s_ij),   Z_i = norm(w_i.),   P_ij = numer(w_ij) / Z_i,   o_i = sum_j P_ij v_j.
// numer is the identity except for softpick (relu).
//
// Shifted weights (the running-max trick). A row is evaluated with a shift m_i: w~_ij = sim(s_ij; m_i).
// For exp, w~ = exp(s - m) with m = max_j s_ij, so w~ <= 1 and Z~ = Z e^{-m}; P = w~ / Z~ is unchanged.
// For softpick, w~ = e^{s-m} - e^{-m} = (e^s - 1) e^{-m} with m = max(max_j s_ij, 0) (clamped at 0 so
// that e^{-m} <= 1 never overflows); the eps of its normaliser is scaled alike (eps e^{-m}).
// Other cases use m = 0 (attn_uses_max is false) and w~ = w.
//
// The normaliser is a function of an additive row reduction: R_i = sum_j term(w~_ij) (+ offset),
// Z~_i = finish(R_i) (sum: R/alpha, term w, or |w| for softpick whose offset is eps e^{-m}; one: 1;
// max_abs_sum_one: max(|R|, 1); p_norm: R^(1/p) with term w^p).
//
// Row statistic (the stats tensor, what the backward needs to rebuild P without storing it):
//   with the running max:  stat_i = m_i + log Z~_i  (= log Z_i; for softmax the log-sum-exp),
//                          P_ij = exp(s_ij - stat_i)  (softpick: relu(exp(s_ij - stat_i) - exp(-stat_i)));
//   without:               stat_i = R_i (signed for identity; max_abs_sum_one needs sign(R) backward),
//                          P_ij = sim(s_ij) / finish(R_i).
//
// Sink logit (optional, per head): an extra key with score S_h that every query sees and whose value
// is 0. Its weight sim(S_h; m) joins the row reduction (and the running max); it has no P column in
// the output, and dL/dS_h = sum_i attn_dscore(S_h, P_i,sink, ..., dP = 0, D_i).
//
// Backward (generic). With dP_ij = dO_i . v_j and D_i = sum_j P_ij dP_ij (= dO_i . o_i):
//   dL/dw_ij = (numer'(w_ij) dP_ij - D_i * dZ_i/dw_ij) / Z_i
//              (norm's derivative: attn_norm_dz_dw; sum: 1/alpha (softpick: sign(w)/alpha), one: 0,
//              max_abs_sum_one: sign(R)[|R| > 1], p_norm: P_ij^(p-1); numer' = 1, softpick: [w > 0])
//   dL/ds_ij = sim'(s_ij) * dL/dw_ij                          (sim's derivative: attn_dsim_over_z = sim'/Z)
//   dq_i = scale * sum_j ds_ij k_j,  dk_j = scale * sum_i ds_ij q_i,  dv_j = sum_i P_ij dO_i,
//   dL/d relative_bias[h, b] = sum over (batch, i, j') with bucket(i - j') = b of ds_ij.
// Softmax: sim'(s)/Z = P and dZ/dw = 1, so ds_ij = P_ij (dP_ij - D_i).
// Softpick: w = e^s - 1, P = relu(w)/Z, Z = (sum_j |w_j| + eps)/alpha, so with E_ij = e^{s_ij}/Z_i
//   (= exp(s_ij - stat_i)): ds_ij = E_ij ([s_ij > 0] dP_ij - sign(s_ij) D_i / alpha)
//   (sign(0) = 0 and relu'(0) = 0, as torch differentiates relu and abs).
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
using ops::AttnPosBias;
using ops::AttnSim;

// Softpick's eps: P = relu(e^s - 1) / (sum_j |e^s - 1| + eps), eps in the units of that formula (the
// shifted rows add eps e^{-m}). The value of the authors' training kernel (flash_softpick_attn.py adds
// 1e-6 to the shifted sum, i.e. eps e^{m} here; their naive reference adds 1e-8 likewise). The two
// differ only in rows whose sum_j |e^s - 1| is ~1e-6, i.e. all scores ~0.
inline constexpr double kSoftpickEps = 1e-6;

// What a kernel reads of a call: the spec's parameters (ops::AttnParams, device-copyable) and the two facts
// its tensors carry.
struct AttnConfig : ops::AttnParams {
  bool sink = false;        // a learned per-head sink logit takes part in the normaliser
  int64_t num_buckets = 0;  // relative: the columns of relative_bias (0 when it is undefined)
};

inline AttnConfig attn_config(const ops::AttentionSpec& s) {
  AttnConfig c;
  static_cast<ops::AttnParams&>(c) = s;
  c.sink = s.sink_logit.defined();
  c.num_buckets = s.relative_bias.defined() && s.relative_bias.ndim == 2 ? s.relative_bias.shape[1] : 0;
  return c;
}

// ---- exp ------------------------------------------------------------------------------------------

// exp in double: the library's. exp in float: on the host a branch-free Cephes-style expf (range
// reduction x = n ln2 + r, degree-6 polynomial; <= 2 ulp on [-87, 88], exactly 0 below) that the
// compiler vectorises inside the attention loops; on the device expf.
// exp of the attention weights: the shared vectorisable f32 exp of math_fns.hpp.
template <class A> SL_HD A attn_exp(A x) { return fexp(x); }

// ---- mask -----------------------------------------------------------------------------------------

// Whether query i sees the positional key jp (jp = j - lead_keys in [0, S - lead_keys)).
SL_HD bool attn_visible_pos(const AttnConfig& c, int64_t i, int64_t jp) {
  switch (c.mask) {
    case AttnMask::causal: return jp <= i;
    case AttnMask::sliding_window: return jp <= i && jp > i - c.window;
    case AttnMask::prefix_lm: return jp <= i || jp < c.prefix;
  }
  return false;
}

// Whether query i sees key j (j in [0, S)): every lead key, the positional keys by the mask.
SL_HD bool attn_visible(const AttnConfig& c, int64_t i, int64_t j) {
  return j < c.lead_keys || attn_visible_pos(c, i, j - c.lead_keys);
}

// The positional keys query i may see lie in [attn_key_begin, attn_key_end) (key indices, i.e. with
// the lead_keys offset; a superset is allowed, attn_visible_pos decides per element). The lead keys
// [0, lead_keys) are always visible and not part of the range: loops treat them as a segment of their
// own, so that the range still skips whole blocks of invisible keys (sliding window).
SL_HD int64_t attn_key_begin(const AttnConfig& c, int64_t i, int64_t S) {
  int64_t b = 0;
  switch (c.mask) {
    case AttnMask::causal: b = 0; break;
    case AttnMask::sliding_window: b = i - c.window + 1 > 0 ? i - c.window + 1 : 0; break;
    case AttnMask::prefix_lm: b = 0; break;
  }
  b += c.lead_keys;
  return b < S ? b : S;
}
SL_HD int64_t attn_key_end(const AttnConfig& c, int64_t i, int64_t S) {
  int64_t e = S;
  switch (c.mask) {
    case AttnMask::causal:
    case AttnMask::sliding_window: e = i + 1; break;
    case AttnMask::prefix_lm: e = i + 1 > c.prefix ? i + 1 : c.prefix; break;
  }
  e += c.lead_keys;
  return e < S ? e : S;
}

// The queries that may see key j (j in [0, S), with the lead_keys offset) lie in
// [attn_query_begin, attn_query_end) (a superset is allowed; attn_visible decides per element): every
// query for a lead key; for a positional key j' the transpose of the mask's range. The key-major
// backward loops (dk, dv owned by one key row) walk this range.
SL_HD int64_t attn_query_begin(const AttnConfig& c, int64_t j) {
  const int64_t jp = j - c.lead_keys;
  if (jp < 0) return 0;
  if (c.mask == AttnMask::prefix_lm && jp < c.prefix) return 0;
  return jp;
}
SL_HD int64_t attn_query_end(const AttnConfig& c, int64_t j, int64_t T) {
  const int64_t jp = j - c.lead_keys;
  if (jp >= 0 && c.mask == AttnMask::sliding_window) return jp + c.window < T ? jp + c.window : T;
  return T;
}

// ---- position bias ----------------------------------------------------------------------------------

// ALiBi slope of query head h (0-based) among H heads: paper Eq. 7 as the released code computes it
// (sail-sg/Attention-Sink, _get_slopes): for H a power of two the geometric sequence start^(h+1),
// start = 2^(-2^(3 - log2 H)) = 2^(-8/H); otherwise the H' = 2^floor(log2 H) slopes of H', followed by
// the even-indexed slopes of the sequence for 2H'. Same double operations as the Python rule
// (start * start**i), so the host values agree with it to the bit.
SL_HD double attn_alibi_slope(int64_t h, int64_t H) {
  int64_t p = 1;  // the largest power of two <= H
  while (2 * p <= H) p *= 2;
  const int64_t n = h < p ? p : 2 * p;        // the power-of-two sequence the slope is taken from
  const int64_t i = h < p ? h : 2 * (h - p);  // and its index there
  int64_t log2n = 0;
  while ((int64_t(1) << log2n) < n) ++log2n;
  const double start = pow(2.0, -pow(2.0, -(double(log2n) - 3.0)));
  return start * pow(start, double(i));
}

// T5's relative-position bucket, unidirectional (HF _relative_position_bucket, bidirectional=False)
// of the distance n = max(i - j', 0) >= 0: the first num_buckets/2 distances have a bucket each, then
// logarithmically wider buckets up to max_distance, beyond it the last bucket. In float32, with the
// operations of the torch code (n/exact, log, / log(max_distance/exact) rounded to float, * (B - exact),
// truncation), so the bucket boundaries fall where torch puts them (in float64 some move: e.g.
// B = 10, D = 160, n = 10). Where the exact value is an integer the float32 result depends on the last
// ulp of logf: torch's vectorised log is up to 1 ulp off the host's correctly rounded one, and for
// B <= 64, D <= 512, n <= 1000 the two disagree on 9 (B, D, n), e.g. (17, 27, 12); none for T5's
// (32, 128) (checked to n = 10^5). A device kernel should take the buckets from the host.
SL_HD int64_t attn_relative_bucket(int64_t n, int64_t num_buckets, int64_t max_distance) {
  const int64_t exact = num_buckets / 2;
  if (n < exact) return n;
  const float x = flog(float(n) / float(exact)) / float(log(double(max_distance) / double(exact))) *
                  float(num_buckets - exact);
  if (!(x < float(num_buckets))) return num_buckets - 1;  // (also keeps the conversion below defined)
  const int64_t b = exact + int64_t(x);
  return b < num_buckets - 1 ? b : num_buckets - 1;
}

// ---- sim --------------------------------------------------------------------------------------------

// Whether the row is evaluated with the running-max shift m (else m = 0). The shift cancels in P only
// for an exponential sim under a normaliser homogeneous of degree 1 in w (sum, p_norm); the op rejects
// exp with any other normaliser, and softpick with any but sum (attn_config_error).
SL_HD bool attn_uses_max(const AttnConfig& c) { return c.sim == AttnSim::exp || c.sim == AttnSim::softpick; }

// The shift m_i from the largest score the row sees (-inf for a row without keys, whose m is 0).
// Softpick's is clamped at 0: its weights e^{s-m} - e^{-m} then never overflow.
template <class A> SL_HD A attn_shift(const AttnConfig& c, A max_score) {
  if (c.sim == AttnSim::softpick) return max_score > A(0) ? max_score : A(0);
  return max_score > -A(INFINITY) ? max_score : A(0);
}

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
  if (c.sim == AttnSim::softpick && c.norm != AttnNorm::sum)
    return "sim softpick is normalised by sum_j |e^s - 1| + eps: it needs norm sum";
  if (c.lead_keys < 0) return "lead_keys must be >= 0";
  if (c.pos_bias == AttnPosBias::relative) {
    if (c.num_buckets < 2) return "pos_bias relative needs relative_bias [H, num_buckets] with num_buckets >= 2";
    if (c.relative_max_distance <= c.num_buckets / 2)
      return "relative_max_distance must exceed num_buckets/2 (the last exactly-bucketed distance)";
  } else {
    if (c.num_buckets != 0) return "relative_bias applies to pos_bias relative only";
    if (c.relative_max_distance != 128) return "relative_max_distance applies to pos_bias relative only";
  }
  return nullptr;
}

// Shifted weight w~ = sim(s; m).
template <class A> SL_HD A attn_sim(const AttnConfig& c, A s, A m) {
  switch (c.sim) {
    case AttnSim::exp: return attn_exp(s - m);
    case AttnSim::sigmoid: return A(1) / (A(1) + attn_exp(-(s + A(c.sigmoid_bias))));
    case AttnSim::elu_plus_one: return s > A(0) ? s + A(1) : attn_exp(s);
    case AttnSim::identity: return s;
    case AttnSim::softpick: return attn_exp(s - m) - attn_exp(-m);  // (e^s - 1) e^{-m}, signed
  }
  return A(0);
}

// The numerator of P from the weight: relu for softpick (P = relu(w)/Z), else w itself.
template <class A> SL_HD A attn_numer(const AttnConfig& c, A w) {
  return c.sim == AttnSim::softpick ? (w > A(0) ? w : A(0)) : w;
}
// d numer / dw, from the score (w has the sign of s for softpick): [s > 0] (relu'(0) = 0), else 1.
template <class A> SL_HD A attn_dnumer_dw(const AttnConfig& c, A s) {
  return c.sim == AttnSim::softpick ? (s > A(0) ? A(1) : A(0)) : A(1);
}

// Factor that rescales quantities accumulated under shift m_old to shift m_new (online softmax):
// w~(s; m_new) = w~(s; m_old) * factor.
template <class A> SL_HD A attn_sim_rescale(const AttnConfig& c, A m_old, A m_new) {
  switch (c.sim) {
    case AttnSim::exp:
    case AttnSim::softpick: return attn_exp(m_old - m_new);
    case AttnSim::sigmoid:
    case AttnSim::elu_plus_one:
    case AttnSim::identity: return A(1);
  }
  return A(1);
}

// sim'(s_ij) / Z_i, from the score, the probability P_ij, the row statistic and 1/Z_i (inv_z; unused
// under the running max).
template <class A> SL_HD A attn_dsim_over_z(const AttnConfig& c, A s, A p, A stat, A inv_z) {
  switch (c.sim) {
    case AttnSim::exp: return p;  // d e^s/ds = e^s, divided by Z
    case AttnSim::softpick: return attn_exp(s - stat);  // d (e^s - 1)/ds = e^s, divided by Z = e^stat
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
    case AttnNorm::sum: return c.sim == AttnSim::softpick ? (w < A(0) ? -w : w) : w;
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

// A constant part of the row reduction under the shift m: softpick's eps (as eps e^{-m}), else 0.
template <class A> SL_HD A attn_norm_offset(const AttnConfig& c, A m) {
  return c.sim == AttnSim::softpick ? A(kSoftpickEps) * attn_exp(-m) : A(0);
}

// dZ_i / dw_ij from the score (softpick: the sign of w is that of s), P_ij and the row reduction R_i
// (sum_of_terms; its sign for max_abs_sum_one).
template <class A> SL_HD A attn_norm_dz_dw(const AttnConfig& c, A s, A p, A sum_of_terms) {
  switch (c.norm) {
    case AttnNorm::sum:
      if (c.sim == AttnSim::softpick) return (s > A(0) ? A(1) : (s < A(0) ? A(-1) : A(0))) / A(c.norm_alpha);
      return A(1) / A(c.norm_alpha);
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
  if (c.sim == AttnSim::softpick) return attn_numer(c, attn_exp(s - stat) - attn_exp(-stat));  // relu(e^s - 1) / Z
  if (attn_uses_max(c)) return attn_exp(s - stat);  // e^s / Z
  return attn_sim(c, s, A(0)) * inv_z;
}

// dL/ds_ij (the gradient of the score s_ij = scale <q_i, k_j> + g, before the scale) from dP_ij and
// D_i = sum_j P_ij dP_ij.
template <class A> SL_HD A attn_dscore(const AttnConfig& c, A s, A p, A stat, A inv_z, A row_sum, A dp, A D) {
  const A a = attn_dsim_over_z(c, s, p, stat, inv_z);
  return a != A(0) ? a * (attn_dnumer_dw(c, s) * dp - D * attn_norm_dz_dw(c, s, p, row_sum)) : A(0);
}

}  // namespace sinklab::math
