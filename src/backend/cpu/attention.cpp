// The generic attention operation on the CPU (ops.hpp; math in backend/attention_math.hpp).
//
// Layout: q [B,T,H,dh], k/v [B,S,Hkv,dh], out [B,T,H,dh] are strided views (last dim contiguous): the
// rows of one head, t = 0..T-1, form a row-major matrix with leading dimension stride[1], which BLAS
// reads in place (a head slice of a fused [B*T, (H+2Hkv)*dh] QKV buffer costs no copy).
//
// Key segments: the L = lead_keys lead keys (always visible) and the positional keys [kb, ke) the
// block's rows may see are two column segments of one score block [rows, L + ke - kb]; every product
// with K or V below is one gemm per segment (the lead one is absent when L = 0), so a sliding window
// still skips the keys between the lead keys and its window.
//
// Forward, one (b, h) per OpenMP task, query blocks of kBlock rows:
//   S_blk = scale * Q_blk [K[0:L]; K[kb:ke]]^T   (gemm; [kb,ke) = union of the block rows' visible keys)
//           + the position bias g_h(i - j') on the positional columns (ALiBi / T5 relative)
//   per row: shift m (running max: exp, softpick), w~ = sim(s; m) where visible else 0,
//            R = sum term(w~) (+ the head's sink logit term, + softpick's eps), Z~ = finish(R),
//            stat = m + log Z~ (running max) or R; the row keeps numer(w~) (the generic pieces of
//            attention_math.hpp)
//   O_blk = diag(1/Z~) (W~ [V[0:L]; V[kb:ke]])   (gemm, then the dh-long rows are scaled, not the n-long ones)
//   probs (optional; attention_probs runs only this part of the pass): rows numer(w~) / Z~
// Backward, one (b, kv head) per task so that dk/dv of a group are written by one thread only (race
// free without atomics); within it every query head of the group and every query block:
//   S_blk = scale Q_blk K^T, P = prob(S, stat) (recomputed: no T x T storage between the passes),
//   dP = dO_blk V^T, D_i = dO_i . o_i, dS = dscore(S, P, stat, dP, D),
//   dV += P^T dO_blk, dQ_blk = scale dS K, dK += scale dS^T Q_blk     (gemms)
//   (sink logit: dS_h += dscore of the sink column with dP = 0, summed over b after the loop;
//   relative bias: dS summed per distance i - j' for each (b, h), into buckets after the loop)
// Whole visible key ranges per query block (rather than key blocks with online rescaling) keep the
// loops simple; the scratch is 2 x kBlock x S values per thread.
//
// The per-element work runs in the storage type (f32 weights go through the vectorised attn_exp); the
// row sums of weights are vectorised sums in the storage type, D_i = dO_i . o_i is accumulated in double.


#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "backend/attention_dispatch.hpp"
#include "backend/attention_math.hpp"
#include "backend/cpu/blas.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_common.hpp"
#include "backend/op_checks.hpp"

namespace sinklab {

using cpu::dispatch_float;
using cpu::gemm;

namespace {

constexpr int64_t kBlock = 64;  // query rows per block


// A [B, L, heads, dh] strided view: head (b, h) is the row-major matrix at(b, 0, h) with rows of dh
// elements and leading dimension ld.
template <class T>
struct Heads {
  T* base = nullptr;
  int64_t sb = 0, sl = 0, sh = 0, ld = 1;
  T* at(int64_t b, int64_t l, int64_t h) const { return base + b * sb + l * sl + h * sh; }
};

template <class T>
Heads<T> heads_of(const Tensor& t, const char* op, const char* arg) {
  Heads<T> v;
  if (!t.defined()) return v;
  SL_CHECK(t.stride[3] == 1 || t.shape[3] == 1, "%s: the last dimension of %s must be contiguous (stride %lld)",
           op, arg, (long long)t.stride[3]);
  for (int d = 0; d < 3; ++d)
    SL_CHECK(t.stride[d] >= 0, "%s: %s has a negative stride", op, arg);
  SL_CHECK(t.shape[1] <= 1 || t.stride[1] >= t.shape[3],
           "%s: rows of %s overlap (stride %lld over positions < head dim %lld)", op, arg, (long long)t.stride[1],
           (long long)t.shape[3]);
  v.base = t.ptr<T>();
  v.sb = t.stride[0];
  v.sl = t.stride[1];
  v.sh = t.stride[2];
  v.ld = std::max<int64_t>(t.shape[1] <= 1 ? t.shape[3] : t.stride[1], 1);
  return v;
}

// A [B, H, T] (stats) or [B, H, T, S] (probs) view: element / row (b, h, i).
template <class T>
struct RowStat {
  T* base = nullptr;
  int64_t sb = 0, sh = 0, st = 0;
  T* at(int64_t b, int64_t h, int64_t i) const { return base + b * sb + h * sh + i * st; }
};

// The positional key range [kb, ke) (key indices) visible to any of the query rows [i0, i1); the lead
// keys [0, lead_keys) come on top.
void block_keys(const math::AttnConfig& mask, int64_t i0, int64_t i1, int64_t S, int64_t* kb, int64_t* ke) {
  *kb = S;
  *ke = 0;
  for (int64_t i = i0; i < i1; ++i) {
    *kb = std::min(*kb, math::attn_key_begin(mask, i, S));
    *ke = std::max(*ke, math::attn_key_end(mask, i, S));
  }
  if (*ke < *kb) *ke = *kb;
}

// The part of the configuration the row loops below take as compile-time constants. Their inner loops
// vectorise only when the per-element switches of attention_math.hpp (on sim, norm and mask) fold away:
// GCC does not unswitch them ("control flow in loop"), and scalar row loops made the variants' attention
// 1.6-2.3x slower than with these kinds at the tiny model's shape (bench_attention variants,
// bench/README.md). So:
// - plain causal softmax (the default, and every model's hot path) fixes the whole configuration;
// - the (sim, norm, mask) triples of the paper's CPU-sized runs fix those three and read the rest (sink
//   logit, lead keys, window, alpha, sigmoid bias, position bias) at run time, outside the inner loops
//   or as plain values inside them;
// - every other variant (p_norm, softpick, max_abs_sum_one, prefix_lm, ...) runs the same loops with
//   the configuration read at run time.
struct LoopKind {
  enum class Fixed { everything, sim_norm_mask, nothing };
  Fixed fixed = Fixed::nothing;
  ops::AttnSim sim = ops::AttnSim::exp;
  ops::AttnNorm norm = ops::AttnNorm::sum;
  ops::AttnMask mask = ops::AttnMask::causal;
};

constexpr LoopKind kPlainSoftmax{LoopKind::Fixed::everything};
constexpr LoopKind kRunTime{LoopKind::Fixed::nothing};
template <ops::AttnSim kSim, ops::AttnNorm kNorm, ops::AttnMask kMask>
constexpr LoopKind kFixed{LoopKind::Fixed::sim_norm_mask, kSim, kNorm, kMask};

template <LoopKind kKind>
math::AttnConfig loop_config(const ops::AttentionSpec& spec) {
  if constexpr (kKind.fixed == LoopKind::Fixed::everything) {
    return math::AttnConfig{};
  } else {
    math::AttnConfig c = math::attn_config(spec);
    if constexpr (kKind.fixed == LoopKind::Fixed::sim_norm_mask) {
      c.sim = kKind.sim;  // (with_loop_kind chose kKind because the spec has these three)
      c.norm = kKind.norm;
      c.mask = kKind.mask;
    }
    return c;
  }
}

bool is_plain_softmax(const ops::AttentionSpec& spec) {
  const math::AttnConfig c = math::attn_config(spec), plain{};
  return c.sim == plain.sim && c.norm == plain.norm && c.mask == plain.mask && c.sink == plain.sink &&
         c.sigmoid_bias == plain.sigmoid_bias && c.norm_alpha == plain.norm_alpha && c.norm_p == plain.norm_p &&
         c.lead_keys == plain.lead_keys && c.pos_bias == plain.pos_bias;
}

template <LoopKind kKind>
struct LoopKindTag {
  static constexpr LoopKind value = kKind;
};

// Calls fn(LoopKindTag<kind>{}) with the loop kind of spec (the kKind argument of the loops below).
template <LoopKind... kTriples, class Fn>
void with_loop_kind_of(const ops::AttentionSpec& spec, Fn&& fn) {
  if (is_plain_softmax(spec)) return fn(LoopKindTag<kPlainSoftmax>{});
  const bool fixed = ((spec.sim == kTriples.sim && spec.norm == kTriples.norm && spec.mask == kTriples.mask
                           ? (fn(LoopKindTag<kTriples>{}), true)
                           : false) ||
                      ...);
  if (!fixed) fn(LoopKindTag<kRunTime>{});
}

template <class Fn>
void with_loop_kind(const ops::AttentionSpec& spec, Fn&& fn) {
  using ops::AttnMask, ops::AttnNorm, ops::AttnSim;
  with_loop_kind_of<kFixed<AttnSim::exp, AttnNorm::sum, AttnMask::causal>,  // sink logit, KV biases, ALiBi
                    kFixed<AttnSim::exp, AttnNorm::sum, AttnMask::sliding_window>,
                    kFixed<AttnSim::sigmoid, AttnNorm::one, AttnMask::causal>,  // the sink-free operation
                    kFixed<AttnSim::sigmoid, AttnNorm::sum, AttnMask::causal>,
                    kFixed<AttnSim::elu_plus_one, AttnNorm::sum, AttnMask::causal>,
                    kFixed<AttnSim::identity, AttnNorm::one, AttnMask::causal>>(spec, fn);
}

// The sink logit of head h (read only when spec.sink_logit is defined).
template <class T>
T sink_of(const ops::AttentionSpec& spec, int64_t h) {
  return spec.sink_logit.defined() ? spec.sink_logit.ptr<T>()[h * spec.sink_logit.stride[0]] : T(0);
}

// The position bias g_h(n), n = i - j', of one call, tabulated once: ALiBi slopes per query head; for
// the relative bias the bucket of every distance n = 0..T-1 (the largest one: positional keys are
// aligned with the queries) and the table expanded per distance.
template <class T>
struct PosBias {
  ops::AttnPosBias kind = ops::AttnPosBias::none;
  int64_t n_dist = 0;            // distances 0..n_dist-1
  std::vector<T> slope;          // alibi: [H]
  std::vector<int64_t> bucket;   // relative: [T]
  std::vector<T> by_distance;    // relative: [H, T], relative_bias[h, bucket[n]]

  PosBias(const ops::AttentionSpec& spec, int64_t H, int64_t T_queries) : kind(spec.pos_bias), n_dist(T_queries) {
    if (kind == ops::AttnPosBias::alibi) {
      for (int64_t h = 0; h < H; ++h) slope.push_back(T(math::attn_alibi_slope(h, H)));
    } else if (kind == ops::AttnPosBias::relative) {
      const Tensor& rb = spec.relative_bias;
      const int64_t nb = rb.shape[1];
      for (int64_t n = 0; n < n_dist; ++n)
        bucket.push_back(math::attn_relative_bucket(n, nb, spec.relative_max_distance));
      by_distance.resize(size_t(H * n_dist));
      for (int64_t h = 0; h < H; ++h)
        for (int64_t n = 0; n < n_dist; ++n)
          by_distance[size_t(h * n_dist + n)] = rb.ptr<T>()[h * rb.stride[0] + bucket[size_t(n)] * rb.stride[1]];
    }
  }

  // Adds g_h(i - jp) to s[c] for the positional keys jp = jp0 + c, c in [0, n).
  void add(int64_t h, int64_t i, int64_t jp0, T* s, int64_t n) const {
    if (kind == ops::AttnPosBias::alibi) {
      const T m = slope[size_t(h)];
#pragma omp simd
      for (int64_t c = 0; c < n; ++c) s[c] += m * T(jp0 + c - i);  // -slope * (i - j')
    } else if (kind == ops::AttnPosBias::relative) {
      const T* g = by_distance.data() + h * n_dist;
      for (int64_t c = 0; c < n; ++c) s[c] += g[std::max<int64_t>(i - jp0 - c, 0)];
    }
  }
};

// Turns one row of scores into the numerators numer(w~) of its weights in place (0 where masked),
// stores 1/Z~ in *inv_out (the weights are s[j] * inv: the forward scales the n-times shorter output
// row instead) and returns the row statistic (attention_math.hpp; sink: the head's sink logit, used
// when spec.sink_logit is defined). The row holds the L lead keys in s[0..L) and the positional keys
// kb, kb+1, ... in s[L..n).
template <class T, LoopKind kKind>
T normalise_row(const ops::AttentionSpec& spec, T* s, int64_t n, int64_t i, int64_t kb, int64_t S, T sink,
                T* inv_out) {
  // Local copies: the enums must not be re-read through a reference the stores could alias (that
  // would keep the loops below from vectorising).
  const math::AttnConfig cfg = loop_config<kKind>(spec);
  const int64_t L = cfg.lead_keys;
  const int64_t jp0 = kb - 2 * L;  // column c >= L holds positional key jp0 + c
  const int64_t jb = L + std::max<int64_t>(math::attn_key_begin(cfg, i, S) - kb, 0);
  const int64_t je = std::clamp<int64_t>(L + math::attn_key_end(cfg, i, S) - kb, jb, n);
  constexpr T kNegInf = -std::numeric_limits<T>::infinity();
  T m = T(0);
  if (math::attn_uses_max(cfg)) {
    m = kNegInf;
    for (int64_t j = 0; j < L; ++j) m = std::max(m, s[j]);
#pragma omp simd reduction(max : m)
    for (int64_t j = jb; j < je; ++j) m = std::max(m, math::attn_visible_pos(cfg, i, jp0 + j) ? s[j] : kNegInf);
    if (cfg.sink) m = std::max(m, sink);
    m = math::attn_shift(cfg, m);
  }
  // 16 f32 lanes of partial sums (softmax terms lie in [0, 1]; the other variants' goldens hold to
  // ~3e-7 relative in f32): accurate enough, twice as fast as double.
  T acc = T(0);
  for (int64_t j = 0; j < L; ++j) {
    const T w = math::attn_sim(cfg, s[j], m);
    s[j] = math::attn_numer(cfg, w);
    acc += math::attn_norm_term(cfg, w);
  }
  for (int64_t j = L; j < jb; ++j) s[j] = T(0);
#pragma omp simd reduction(+ : acc)
  for (int64_t j = jb; j < je; ++j) {
    const bool vis = math::attn_visible_pos(cfg, i, jp0 + j);
    const T w = vis ? math::attn_sim(cfg, s[j], m) : T(0);
    s[j] = math::attn_numer(cfg, w);
    acc += vis ? math::attn_norm_term(cfg, w) : T(0);
  }
  for (int64_t j = je; j < n; ++j) s[j] = T(0);
  if (cfg.sink) acc += math::attn_norm_term(cfg, math::attn_sim(cfg, sink, m));
  acc += math::attn_norm_offset(cfg, m);
  const double z = math::attn_norm_finish(cfg, double(acc));
  *inv_out = T(math::attn_inv_norm(z));
  return T(math::attn_stat(cfg, double(m), double(acc)));
}

// Per-thread scratch for the score blocks.
template <class T>
struct Scratch {
  std::vector<T> s, dp;
  explicit Scratch(int64_t S, bool backward) : s(size_t(kBlock * std::max<int64_t>(S, 1))) {
    if (backward) dp.resize(s.size());
  }
};

// C[rows, n] (leading dimension n) = alpha * A[rows, dh] . [X[0:L]; X[kb:kb+n-L]]^T: the product of a
// query-side block with the keys (or values) of both segments, one gemm per segment.
template <class T>
void gemm_keys(int64_t rows, int64_t n, int64_t L, int64_t dh, T alpha, const T* A, int64_t lda, const Heads<T>& X,
               int64_t b, int64_t g, int64_t kb, T* C) {
  if (L > 0) gemm<T>(false, true, rows, L, dh, alpha, A, lda, X.at(b, 0, g), X.ld, T(0), C, n);
  gemm<T>(false, true, rows, n - L, dh, alpha, A, lda, X.at(b, kb, g), X.ld, T(0), C + L, n);
}

// Y[rows, dh] = alpha * C[rows, n] . [X[0:L]; X[kb:kb+n-L]] + beta * Y.
template <class T>
void gemm_from_keys(int64_t rows, int64_t n, int64_t L, int64_t dh, T alpha, const T* C, const Heads<T>& X, int64_t b,
                    int64_t g, int64_t kb, T beta, T* Y, int64_t ldy) {
  if (L > 0) gemm<T>(false, false, rows, dh, L, alpha, C, n, X.at(b, 0, g), X.ld, beta, Y, ldy);
  if (n > L) gemm<T>(false, false, rows, dh, n - L, alpha, C + L, n, X.at(b, kb, g), X.ld, L > 0 ? T(1) : beta, Y, ldy);
}

// dX[0:L] and dX[kb:kb+n-L] += alpha * C[rows, n]^T . A[rows, dh].
template <class T>
void gemm_to_keys(int64_t rows, int64_t n, int64_t L, int64_t dh, T alpha, const T* C, const T* A, int64_t lda,
                  const Heads<T>& dX, int64_t b, int64_t g, int64_t kb) {
  if (L > 0) gemm<T>(true, false, L, dh, rows, alpha, C, n, A, lda, T(1), dX.at(b, 0, g), dX.ld);
  gemm<T>(true, false, n - L, dh, rows, alpha, C + L, n, A, lda, T(1), dX.at(b, kb, g), dX.ld);
}

// One row of the probs layout [S] (lead keys, then every positional key, 0 where not visible) from a
// normalised score row s[n] (numer(w~): the lead keys, then the positional keys [kb, ke)) and its 1/Z~.
template <class T>
void store_probs_row(T* row, const T* s, T inv, int64_t n, int64_t lead, int64_t kb, int64_t ke, int64_t S) {
  for (int64_t j = 0; j < lead; ++j) row[j] = s[j] * inv;
  std::fill_n(row + lead, kb - lead, T(0));
#pragma omp simd
  for (int64_t j = lead; j < n; ++j) row[kb - lead + j] = s[j] * inv;
  std::fill_n(row + ke, S - ke, T(0));
}

// The forward pass, and attention_probs: with out (and v) undefined only the score rows are formed,
// so the matrix a forward hands out and attention_probs' are the same products.
template <class T, LoopKind kKind>
void forward_impl(Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v, const ops::AttentionSpec& spec,
                  Tensor probs, const AttentionDims& d) {
  const char* op = out.defined() ? "attention_forward" : "attention_probs";
  const Heads<T> Q = heads_of<T>(q, op, "q"), K = heads_of<T>(k, op, "k"), V = heads_of<T>(v, op, "v"),
                 O = heads_of<T>(out, op, "out");
  RowStat<T> L{stats.defined() ? stats.ptr<T>() : nullptr, stats.stride[0], stats.stride[1], stats.stride[2]};
  RowStat<T> P{probs.defined() ? probs.ptr<T>() : nullptr, probs.stride[0], probs.stride[1], probs.stride[2]};
  const T scale = T(attention_scale(spec, d.dh));
  const int64_t group = d.H / d.Hkv;
  const PosBias<T> bias(spec, d.H, d.T);
#pragma omp parallel if (d.B * d.H * d.T * d.S * d.dh > 32768)
  {
    Scratch<T> scratch(d.S, false);
    const math::AttnConfig cfg = loop_config<kKind>(spec);
    const int64_t lead = cfg.lead_keys;
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t h = 0; h < d.H; ++h) {
        const int64_t g = h / group;
        for (int64_t i0 = 0; i0 < d.T; i0 += kBlock) {
          const int64_t rows = std::min(kBlock, d.T - i0);
          int64_t kb, ke;
          block_keys(cfg, i0, i0 + rows, d.S, &kb, &ke);
          const int64_t n = lead + ke - kb;
          T* s = scratch.s.data();
          gemm_keys<T>(rows, n, lead, d.dh, scale, Q.at(b, i0, h), Q.ld, K, b, g, kb, s);
          T inv[kBlock];
          for (int64_t r = 0; r < rows; ++r) {
            if (cfg.pos_bias != ops::AttnPosBias::none) bias.add(h, i0 + r, kb - lead, s + r * n + lead, n - lead);
            T stat = normalise_row<T, kKind>(spec, s + r * n, n, i0 + r, kb, d.S, sink_of<T>(spec, h), &inv[r]);
            if (L.base) *L.at(b, h, i0 + r) = stat;
            if (P.base) store_probs_row(P.at(b, h, i0 + r), s + r * n, inv[r], n, lead, kb, ke, d.S);
          }
          if (O.base == nullptr) continue;  // attention_probs
          if (n > 0) {
            gemm_from_keys<T>(rows, n, lead, d.dh, T(1), s, V, b, g, kb, T(0), O.at(b, i0, h), O.ld);
            for (int64_t r = 0; r < rows; ++r) {
              T* o = O.at(b, i0 + r, h);
              const T c = inv[r];
#pragma omp simd
              for (int64_t e = 0; e < d.dh; ++e) o[e] *= c;
            }
          } else {
            for (int64_t r = 0; r < rows; ++r) std::fill_n(O.at(b, i0 + r, h), d.dh, T(0));
          }
        }
      }
  }
}

// The gradients of the per-head parameters, the sink logit S_h and the relative bias table: the
// backward's tasks (one per (b, kv head)) add their (b, h) pieces here in double, and write() sums them
// over b (and the distances into their buckets) in a fixed order once the parallel loop is done.
struct HeadParamGrads {
  int64_t heads = 0, queries = 0;
  std::vector<double> d_sink;  // [B, H]: dL/dS_h of batch element b
  std::vector<double> d_dist;  // [B, H, T]: dL/dg_h(n) of batch element b, distance n = i - j'

  HeadParamGrads(const ops::AttentionSpec& spec, const AttentionDims& d)
      : heads(d.H), queries(d.T), d_sink(spec.sink_logit.defined() ? size_t(d.B * d.H) : 0, 0.0),
        d_dist(spec.d_relative_bias.defined() ? size_t(d.B * d.H * d.T) : 0, 0.0) {}

  // The distance row of (b, h), or nullptr when no relative-bias gradient is asked for.
  double* distance_row(int64_t b, int64_t h) { return d_dist.empty() ? nullptr : d_dist.data() + (b * heads + h) * queries; }

  template <class T>
  void write(const ops::AttentionSpec& spec, const PosBias<T>& bias, const AttentionDims& d) const {
    if (spec.d_sink_logit.defined()) {
      T* ds = spec.d_sink_logit.ptr<T>();
      for (int64_t h = 0; h < d.H; ++h) {
        double acc = 0.0;
        for (int64_t b = 0; b < d.B; ++b) acc += d_sink[size_t(b * d.H + h)];
        ds[h * spec.d_sink_logit.stride[0]] = T(acc);
      }
    }
    if (d_dist.empty()) return;
    const Tensor& dr = spec.d_relative_bias;
    const int64_t nb = dr.shape[1];
    std::vector<double> acc(size_t(nb), 0.0);
    for (int64_t h = 0; h < d.H; ++h) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t b = 0; b < d.B; ++b)
        for (int64_t n = 0; n < d.T; ++n) acc[size_t(bias.bucket[size_t(n)])] += d_dist[size_t((b * d.H + h) * d.T + n)];
      for (int64_t c = 0; c < nb; ++c) dr.ptr<T>()[h * dr.stride[0] + c * dr.stride[1]] = T(acc[size_t(c)]);
    }
  }
};

// The backward pass is one function on purpose (docs/DESIGN.md, "The generic attention operation"):
// per query block it recomputes the scores, turns them into P and dS row by row and feeds both to the
// gemms that give dV, dQ and dK; the row loop shares the block's scratch with the gemms, and the
// vectorisation of its inner loops was measured (see the note on cfg below). Cutting it into pieces
// would pass that state around without making a piece readable on its own.
template <class T, LoopKind kKind>
void backward_impl(Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k, Tensor v, Tensor out,
                   Tensor stats, const ops::AttentionSpec& spec, const AttentionDims& d) {
  const char* op = "attention_backward";
  const Heads<T> Q = heads_of<T>(q, op, "q"), K = heads_of<T>(k, op, "k"), V = heads_of<T>(v, op, "v"),
                 O = heads_of<T>(out, op, "out"), dO = heads_of<T>(d_out, op, "d_out"),
                 dQ = heads_of<T>(d_q, op, "d_q"), dK = heads_of<T>(d_k, op, "d_k"), dV = heads_of<T>(d_v, op, "d_v");
  const RowStat<T> L{stats.ptr<T>(), stats.stride[0], stats.stride[1], stats.stride[2]};
  const T scale = T(attention_scale(spec, d.dh));
  const int64_t group = d.H / d.Hkv;
  const PosBias<T> bias(spec, d.H, d.T);
  HeadParamGrads head_grads(spec, d);
#pragma omp parallel if (d.B * d.H * d.T * d.S * d.dh > 32768)
  {
    Scratch<T> scratch(d.S, true);
    // Declared inside the parallel region: OpenMP passes outer locals to the outlined region by
    // reference, which hides plain softmax's constant configuration from the compiler (the score loop
    // below then did not vectorise: measured 1.5x slower).
    const math::AttnConfig cfg = loop_config<kKind>(spec);
    const int64_t lead = cfg.lead_keys;
#pragma omp for collapse(2) schedule(dynamic)
    for (int64_t b = 0; b < d.B; ++b)
      for (int64_t g = 0; g < d.Hkv; ++g) {
        // This task owns dk/dv of (b, g): written as zero, then accumulated over the group's heads.
        for (int64_t j = 0; j < d.S; ++j) {
          if (dK.base) std::fill_n(dK.at(b, j, g), d.dh, T(0));
          if (dV.base) std::fill_n(dV.at(b, j, g), d.dh, T(0));
        }
        for (int64_t h = g * group; h < (g + 1) * group; ++h) {
          const T sink = sink_of<T>(spec, h);
          double d_sink_bh = 0.0;
          double* d_dist_bh = head_grads.distance_row(b, h);
          for (int64_t i0 = 0; i0 < d.T; i0 += kBlock) {
            const int64_t rows = std::min(kBlock, d.T - i0);
            int64_t kb, ke;
            block_keys(cfg, i0, i0 + rows, d.S, &kb, &ke);
            const int64_t n = lead + ke - kb;
            const int64_t jp0 = kb - 2 * lead;  // column c >= lead holds positional key jp0 + c
            if (n == 0) {
              if (dQ.base)
                for (int64_t r = 0; r < rows; ++r) std::fill_n(dQ.at(b, i0 + r, h), d.dh, T(0));
              continue;
            }
            T* s = scratch.s.data();
            T* dp = scratch.dp.data();
            gemm_keys<T>(rows, n, lead, d.dh, scale, Q.at(b, i0, h), Q.ld, K, b, g, kb, s);
            gemm_keys<T>(rows, n, lead, d.dh, T(1), dO.at(b, i0, h), dO.ld, V, b, g, kb, dp);
            for (int64_t r = 0; r < rows; ++r) {
              const int64_t i = i0 + r;
              T* sr = s + r * n;
              T* dpr = dp + r * n;
              if (cfg.pos_bias != ops::AttnPosBias::none) bias.add(h, i, kb - lead, sr + lead, n - lead);
              const T stat = *L.at(b, h, i);
              const int64_t jb = lead + std::max<int64_t>(math::attn_key_begin(cfg, i, d.S) - kb, 0);
              const int64_t je = std::clamp<int64_t>(lead + math::attn_key_end(cfg, i, d.S) - kb, jb, n);
              const bool empty = math::attn_row_empty(cfg, stat);
              const T inv_z = math::attn_row_inv_norm(cfg, stat);
              const T row_sum = math::attn_row_sum(cfg, stat);
              double D = 0.0;
              const T* o = O.at(b, i, h);
              const T* go = dO.at(b, i, h);
#pragma omp simd reduction(+ : D)
              for (int64_t c = 0; c < d.dh; ++c) D += double(o[c]) * double(go[c]);
              for (int64_t j = lead; j < jb; ++j) sr[j] = dpr[j] = T(0);
              for (int64_t j = je; j < n; ++j) sr[j] = dpr[j] = T(0);
              if (empty) {
                for (int64_t j = 0; j < lead; ++j) sr[j] = dpr[j] = T(0);
                for (int64_t j = jb; j < je; ++j) sr[j] = dpr[j] = T(0);
                continue;
              }
              const T Dt = T(D);
              if (cfg.sink) {
                const T p_sink = math::attn_prob(cfg, sink, stat, inv_z);
                d_sink_bh += double(math::attn_dscore(cfg, sink, p_sink, stat, inv_z, row_sum, T(0), Dt));
              }
              for (int64_t j = 0; j < lead; ++j) {
                const T p = math::attn_prob(cfg, sr[j], stat, inv_z);
                dpr[j] = math::attn_dscore(cfg, sr[j], p, stat, inv_z, row_sum, dpr[j], Dt);
                sr[j] = p;
              }
#pragma omp simd
              for (int64_t j = jb; j < je; ++j) {
                const bool vis = math::attn_visible_pos(cfg, i, jp0 + j);
                const T p = vis ? math::attn_prob(cfg, sr[j], stat, inv_z) : T(0);
                const T ds = vis ? math::attn_dscore(cfg, sr[j], p, stat, inv_z, row_sum, dpr[j], Dt) : T(0);
                sr[j] = p;
                dpr[j] = ds;
              }
              if (d_dist_bh)
                for (int64_t j = jb; j < je; ++j) d_dist_bh[std::max<int64_t>(i - jp0 - j, 0)] += double(dpr[j]);
            }
            if (dV.base) gemm_to_keys<T>(rows, n, lead, d.dh, T(1), s, dO.at(b, i0, h), dO.ld, dV, b, g, kb);
            if (dQ.base) gemm_from_keys<T>(rows, n, lead, d.dh, scale, dp, K, b, g, kb, T(0), dQ.at(b, i0, h), dQ.ld);
            if (dK.base) gemm_to_keys<T>(rows, n, lead, d.dh, scale, dp, Q.at(b, i0, h), Q.ld, dK, b, g, kb);
          }
          if (cfg.sink) head_grads.d_sink[size_t(b * d.H + h)] = d_sink_bh;
        }
      }
  }
  head_grads.write<T>(spec, bias, d);
}

}  // namespace

void CpuBackend::attention_forward(Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v, const AttentionSpec& spec,
                                   Tensor probs) {
  const char* op = "attention_forward";
  ops::choose_attention_kernel(spec, ops::attn_call_of(q, probs.defined()));  // refuses --attn-kernel cudnn / flash
  const AttentionDims d = check_attention_forward_args(op, out, stats, q, k, v, spec, probs);
  dispatch_float(q.dtype, op, [&](auto zero) {
    with_loop_kind(spec, [&](auto kind) {
      forward_impl<decltype(zero), decltype(kind)::value>(out, stats, q, k, v, spec, probs, d);
    });
  });
}

void CpuBackend::attention_backward(Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k, Tensor v,
                                    Tensor out, Tensor stats, const AttentionSpec& spec) {
  const char* op = "attention_backward";
  ops::choose_attention_kernel(spec, ops::attn_call_of(q, false));  // refuses --attn-kernel cudnn / flash
  const AttentionDims d = check_attention_backward_args(op, d_q, d_k, d_v, d_out, q, k, v, out, stats, spec);
  dispatch_float(q.dtype, op, [&](auto zero) {
    with_loop_kind(spec, [&](auto kind) {
      backward_impl<decltype(zero), decltype(kind)::value>(d_q, d_k, d_v, d_out, q, k, v, out, stats, spec, d);
    });
  });
}

void CpuBackend::attention_probs(Tensor probs, Tensor q, Tensor k, const AttentionSpec& spec) {
  const char* op = "attention_probs";
  ops::choose_attention_kernel(spec, ops::attn_call_of(q, true));  // refuses --attn-kernel cudnn / flash
  AttentionDims d = check_attention_qkv(op, q, k, Tensor{}, spec);
  check_attention_probs(probs, d, q, op);
  dispatch_float(q.dtype, op, [&](auto zero) {
    with_loop_kind(spec, [&](auto kind) {
      forward_impl<decltype(zero), decltype(kind)::value>(Tensor{}, Tensor{}, q, k, Tensor{}, spec, probs, d);
    });
  });
}

}  // namespace sinklab
