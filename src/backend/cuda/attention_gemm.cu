// The GEMM path of the attention op (attention_dispatch.hpp decides when it runs): every spec (every sim and
// norm of attention_math.hpp, the three masks, lead keys, ALiBi and T5's relative bias, the sink logit, any
// head dim) with bf16 q, k, v, out (and d_out, d_q, d_k, d_v), strided head views included; stats and the
// spec's tensors f32. For the variants neither cuDNN nor the flash kernel express (p-norms, max_abs_sum_one,
// softpick, softmax with lead keys or a prefix, sigmoid with ALiBi or a sink logit, ...), at GEMM speed
// instead of the reference kernel's.
//
// One query head h at a time (its key/value head h / group), over the whole batch (cuBLASLt's strided batch
// over b: every operand is a [B, L, dh] head view of a [B, L, heads, dh] tensor, batch stride its stride 0):
//   forward   S_h = scale Q_h K^T                       cuBLASLt, bf16 out: [B, T, S] scratch
//             row kernel (one block per (b, i)): s + position bias, the mask, the shift m (exp, softpick), the
//             row reduction R (double, fixed tree; none for norm one), stats = attn_stat(m, R),
//             P = numer(w) / Z in bf16 over S_h (0 where masked)
//             O_h = P V                                   cuBLASLt into out's head view (bf16, rounded once)
//   backward  S_h again, dP_h = dO_h V^T                 cuBLASLt, bf16 out: a second [B, T, S] scratch
//             row kernel: P from the score and stats (attn_prob), D_i = sum_j P_ij dP_ij (double; not for
//             norm one, whose dS does not read it), dS = attn_dscore, the sink logit's row piece; P over S_h,
//             dS over dP_h
//             dV += P^T dO_h, dQ_h = scale dS K, dK += scale dS^T Q_h
//             relative bias: the sums of dS per distance (one block per (b, n)), then attention.cu's fixed-order
//             sums over b and the buckets, as the reference kernels do (d_sink_logit too).
// Scores and P are bf16 (as PyTorch's eager bf16 attention holds them), every product accumulates in f32,
// every row sum in double. Grouped-query heads: dK, dV of a key/value head are summed over its group in an f32
// scratch and rounded to bf16 once (group 1: written by the product directly). Only the visible keys of a row
// are read ([attn_key_begin, attn_key_end) and the lead keys); the rest of a row is written as 0.
//
// Memory: 2 B T S bf16 values of scratch (scores and dP of one head), plus B H T doubles for the sink and the
// relative bias and 2 B S dh floats for grouped heads; kAttnGemmMaxQueries bounds T. Launches per call and
// head: forward 2 products + 1 row kernel, backward 5 products + 1 row kernel (+1 with a relative bias).
// Deterministic: fixed-order sums, cuBLASLt's products the same for the same call.
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/attention_math.hpp"
#include "backend/cuda/attention_kernels.hpp"
#include "backend/cuda/attention_rows.cuh"
#include "backend/cuda/cuda_common.hpp"

namespace sinklab::cuda {

namespace {

using bf16 = __nv_bfloat16;

constexpr int kRowThreads = 128;

// What a row kernel reads: one head h of the batch's scores.
struct GemmRows {
  int64_t T = 0, S = 0, H = 0, h = 0;
  math::AttnConfig cfg;
  AttnTables tab;
  bf16* s = nullptr;   // [B, T, S]: the scores, then P
  bf16* dp = nullptr;  // backward: [B, T, S]: dP, then dS
  View3 stats;         // [B, H, T] f32
  double* dsink_rows = nullptr;  // backward with a sink logit: [B, H, T]
  double* d_dist = nullptr;      // backward with a relative bias: [B, H, T]
};

// Query i's keys as positions u < n of its row: the lead keys, then the positional keys from kb (a superset
// of the visible ones; attn_visible decides).
struct RowKeys {
  int64_t L = 0, kb = 0, n = 0;
  __device__ int64_t key(int64_t u) const { return u < L ? u : kb + (u - L); }
};
__device__ RowKeys row_keys(const GemmRows& g, int64_t i) {
  RowKeys r;
  r.L = g.cfg.lead_keys;
  r.kb = math::attn_key_begin(g.cfg, i, g.S);
  const int64_t ke = math::attn_key_end(g.cfg, i, g.S);
  r.n = r.L + (ke > r.kb ? ke - r.kb : 0);
  return r;
}

// s_ij = (scale q_i . k_j, as the product rounded it) + g_h(i - j').
__device__ float score(const GemmRows& g, const bf16* row, int64_t i, int64_t j) {
  const float s = __bfloat162float(row[j]);
  return g.cfg.pos_bias == ops::AttnPosBias::none ? s
                                                  : s + attn_position_bias(g.tab, g.cfg, g.h, i, j - g.cfg.lead_keys);
}

// Forward: one block per row (b, i) of head h.
__global__ void __launch_bounds__(kRowThreads) gemm_forward_rows_kernel(GemmRows g) {
  __shared__ float red_f[kRowThreads];
  __shared__ double red_d[kRowThreads];
  const int64_t row = blockIdx.x, i = row % g.T, b = row / g.T;
  bf16* srow = g.s + row * g.S;
  const math::AttnConfig& cfg = g.cfg;
  const RowKeys keys = row_keys(g, i);
  const float sink = attn_sink_of(g.tab, cfg, g.h);
  float m = 0.0f;
  if (math::attn_uses_max(cfg)) {
    float local = -INFINITY;
    for (int64_t u = threadIdx.x; u < keys.n; u += kRowThreads) {
      const int64_t j = keys.key(u);
      if (math::attn_visible(cfg, i, j)) local = fmaxf(local, score(g, srow, i, j));
    }
    m = block_reduce<kRowThreads, float, true>(local, red_f);
    if (cfg.sink) m = m < sink ? sink : m;
    m = math::attn_shift(cfg, m);
  }
  double R = 0.0;  // norm one: no row reduction at all
  if (cfg.norm != ops::AttnNorm::one) {
    double terms = 0.0;
    for (int64_t u = threadIdx.x; u < keys.n; u += kRowThreads) {
      const int64_t j = keys.key(u);
      if (math::attn_visible(cfg, i, j))
        terms += double(math::attn_norm_term(cfg, math::attn_sim(cfg, score(g, srow, i, j), m)));
    }
    R = block_reduce<kRowThreads, double, false>(terms, red_d);
    if (cfg.sink) R += double(math::attn_norm_term(cfg, math::attn_sim(cfg, sink, m)));
    R += double(math::attn_norm_offset(cfg, m));
  }
  const float inv = float(math::attn_inv_norm(math::attn_norm_finish(cfg, R)));
  if (threadIdx.x == 0 && g.stats.p) *g.stats.at(b, g.h, i) = float(math::attn_stat(cfg, double(m), R));
  // The block reductions' barriers put the passes' reads before these writes; here a thread reads only the
  // element it writes.
  for (int64_t j = threadIdx.x; j < g.S; j += kRowThreads) {
    float p = 0.0f;
    if (math::attn_visible(cfg, i, j)) p = math::attn_numer(cfg, math::attn_sim(cfg, score(g, srow, i, j), m)) * inv;
    srow[j] = __float2bfloat16(p);
  }
}

// Backward: one block per row (b, i) of head h. S_h -> P, dP_h -> dS.
__global__ void __launch_bounds__(kRowThreads) gemm_backward_rows_kernel(GemmRows g) {
  __shared__ double red_d[kRowThreads];
  const int64_t row = blockIdx.x, i = row % g.T, b = row / g.T;
  bf16* srow = g.s + row * g.S;
  bf16* dprow = g.dp + row * g.S;
  const math::AttnConfig& cfg = g.cfg;
  const float stat = *g.stats.at(b, g.h, i);
  const bool empty = math::attn_row_empty(cfg, stat);
  const float inv_z = math::attn_row_inv_norm(cfg, stat), row_sum = math::attn_row_sum(cfg, stat);
  float D = 0.0f;  // norm one: dS does not read D_i
  if (cfg.norm != ops::AttnNorm::one && !empty) {
    const RowKeys keys = row_keys(g, i);
    double part = 0.0;
    for (int64_t u = threadIdx.x; u < keys.n; u += kRowThreads) {
      const int64_t j = keys.key(u);
      if (math::attn_visible(cfg, i, j))
        part += double(math::attn_prob(cfg, score(g, srow, i, j), stat, inv_z)) * double(__bfloat162float(dprow[j]));
    }
    D = float(block_reduce<kRowThreads, double, false>(part, red_d));
  }
  if (threadIdx.x == 0 && cfg.sink) {
    double ds_sink = 0.0;
    if (!empty) {
      const float sink = attn_sink_of(g.tab, cfg, g.h);
      const float p_sink = math::attn_prob(cfg, sink, stat, inv_z);
      ds_sink = double(math::attn_dscore(cfg, sink, p_sink, stat, inv_z, row_sum, 0.0f, D));
    }
    g.dsink_rows[(b * g.H + g.h) * g.T + i] = ds_sink;
  }
  for (int64_t j = threadIdx.x; j < g.S; j += kRowThreads) {
    float p = 0.0f, ds = 0.0f;
    if (!empty && math::attn_visible(cfg, i, j)) {
      const float s = score(g, srow, i, j);
      p = math::attn_prob(cfg, s, stat, inv_z);
      ds = math::attn_dscore(cfg, s, p, stat, inv_z, row_sum, __bfloat162float(dprow[j]), D);
    }
    srow[j] = __float2bfloat16(p);
    dprow[j] = __float2bfloat16(ds);
  }
}

// Relative bias: one block per (b, n) of head h, the sum of dS over the pairs (i, j') with max(i - j', 0) = n:
// j' = i - n for n > 0; j' >= i (prefix keys ahead of the query) for n = 0. Masked pairs hold dS = 0.
__global__ void __launch_bounds__(kRowThreads) gemm_distance_kernel(GemmRows g) {
  __shared__ double red_d[kRowThreads];
  const int64_t r = blockIdx.x, n = r % g.T, b = r / g.T, L = g.cfg.lead_keys;
  const bf16* ds = g.dp + b * g.T * g.S;
  double sum = 0.0;
  if (n > 0) {
    for (int64_t u = threadIdx.x; u < g.T - n; u += kRowThreads)
      sum += double(__bfloat162float(ds[(n + u) * g.S + L + u]));
  } else {
    for (int64_t i = threadIdx.x; i < g.T; i += kRowThreads)
      for (int64_t j = L + i; j < math::attn_key_end(g.cfg, i, g.S); ++j)
        sum += double(__bfloat162float(ds[i * g.S + j]));
  }
  const double total = block_reduce<kRowThreads, double, false>(sum, red_d);
  if (threadIdx.x == 0) g.d_dist[(b * g.H + g.h) * g.T + n] = total;
}

// ---- host side ----------------------------------------------------------------------------------

// Head `h` of a [B, L, heads, dh] tensor as a [B, L, dh] batch of matrices (batch stride: its stride 0).
Tensor head_of(const Tensor& t, int64_t h) {
  Tensor v = t;
  v.data = static_cast<char*>(t.data) + h * t.stride[2] * int64_t(dtype_size(t.dtype));
  v.ndim = 3;
  v.shape = {t.shape[0], t.shape[1], t.shape[3], 0, 0};
  v.stride = {t.stride[0], t.stride[1], t.stride[3], 0, 0};
  return v;
}

// The call's scratch, one walk that measures (base null) and places: the two [B, T, S] bf16 score arrays, the
// sink's and the distances' per-row doubles, the f32 dK / dV sums of a key/value head's group.
struct GemmScratch {
  Tensor s, dp, dk32, dv32;
  double* dsink_rows = nullptr;
  double* d_dist = nullptr;
};
size_t carve(char* base, const AttentionDims& d, bool backward, Device dev, GemmScratch* sc) {
  size_t at = 0;
  auto take = [&](size_t bytes) {
    char* p = base ? base + at : nullptr;
    at += (bytes + 255) / 256 * 256;
    return p;
  };
  const int64_t scores[3] = {d.B, d.T, d.S}, keys[3] = {d.B, d.S, d.dh};
  const size_t score_bytes = size_t(d.B * d.T * d.S) * 2;
  if (char* p = take(score_bytes)) sc->s = Tensor::contiguous_view(p, DType::bf16, scores, 3, dev);
  if (!backward) return at;
  if (char* p = take(score_bytes)) sc->dp = Tensor::contiguous_view(p, DType::bf16, scores, 3, dev);
  sc->dsink_rows = reinterpret_cast<double*>(take(sizeof(double) * size_t(d.B * d.H * d.T)));
  sc->d_dist = reinterpret_cast<double*>(take(sizeof(double) * size_t(d.B * d.H * d.T)));
  if (d.H > d.Hkv) {
    if (char* p = take(sizeof(float) * size_t(d.B * d.S * d.dh)))
      sc->dk32 = Tensor::contiguous_view(p, DType::f32, keys, 3, dev);
    if (char* p = take(sizeof(float) * size_t(d.B * d.S * d.dh)))
      sc->dv32 = Tensor::contiguous_view(p, DType::f32, keys, 3, dev);
  }
  return at;
}

// The call's scratch and tables (attention.cu's scratch slot) and the row kernels' view of them.
GemmRows prepare(CudaBackend& be, const AttentionDims& d, const ops::AttentionSpec& spec, const Tensor& stats,
                 Device dev, bool backward, GemmScratch* sc, AttnTables* tab, const char* op) {
  SL_CHECK(d.B * d.T < (int64_t(1) << 31), "%s: B*T = %lld rows exceed the grid", op, (long long)(d.B * d.T));
  void* extra = nullptr;
  *tab = attn_tables(be, d, spec, carve(nullptr, d, backward, dev, sc), &extra);
  carve(static_cast<char*>(extra), d, backward, dev, sc);
  GemmRows g;
  g.T = d.T;
  g.S = d.S;
  g.H = d.H;
  g.cfg = math::attn_config(spec);
  g.tab = *tab;
  g.stats = view3(stats);
  g.s = sc->s.ptr<bf16>();
  g.dp = backward ? sc->dp.ptr<bf16>() : nullptr;
  g.dsink_rows = sc->dsink_rows;
  g.d_dist = sc->d_dist;
  return g;
}

}  // namespace

void gemm_attention_forward(CudaBackend& be, Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v,
                            const ops::AttentionSpec& spec, const AttentionDims& d) {
  const char* op = "attention_forward (gemm)";
  if (d.B * d.H * d.T == 0) return;
  DeviceGuard guard(be.index());
  GemmScratch sc;
  AttnTables tab;
  GemmRows g = prepare(be, d, spec, stats, q.device, false, &sc, &tab, op);
  const double scale = attention_scale(spec, d.dh);
  const int64_t group = d.H / d.Hkv;
  for (int64_t h = 0; h < d.H; ++h) {
    g.h = h;
    be.matmul(sc.s, head_of(q, h), head_of(k, h / group), false, true, scale, 0.0);
    gemm_forward_rows_kernel<<<unsigned(d.B * d.T), kRowThreads, 0, be.stream()>>>(g);
    CUDA_CHECK_LAUNCH("attention_forward (gemm rows)");
    be.matmul(head_of(out, h), sc.s, head_of(v, h / group), false, false, 1.0, 0.0);
  }
}

void gemm_attention_backward(CudaBackend& be, Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k,
                             Tensor v, Tensor out, Tensor stats, const ops::AttentionSpec& spec,
                             const AttentionDims& d) {
  (void)out;  // D_i comes from the rows of P and dP
  const char* op = "attention_backward (gemm)";
  DeviceGuard guard(be.index());
  if (d.B * d.H * d.T == 0) {  // no query: key gradients are zeros (lead keys with T = 0); nothing else to write
    if (d_k.defined()) be.fill(d_k, 0.0);
    if (d_v.defined()) be.fill(d_v, 0.0);
    return;
  }
  GemmScratch sc;
  AttnTables tab;
  GemmRows g = prepare(be, d, spec, stats, q.device, true, &sc, &tab, op);
  const double scale = attention_scale(spec, d.dh);
  const int64_t group = d.H / d.Hkv;
  for (int64_t h = 0; h < d.H; ++h) {
    const int64_t kvh = h / group, hh = h % group;
    const Tensor qh = head_of(q, h), kh = head_of(k, kvh), vh = head_of(v, kvh), doh = head_of(d_out, h);
    g.h = h;
    be.matmul(sc.s, qh, kh, false, true, scale, 0.0);
    be.matmul(sc.dp, doh, vh, false, true, 1.0, 0.0);
    gemm_backward_rows_kernel<<<unsigned(d.B * d.T), kRowThreads, 0, be.stream()>>>(g);
    CUDA_CHECK_LAUNCH("attention_backward (gemm rows)");
    if (spec.d_relative_bias.defined()) {
      gemm_distance_kernel<<<unsigned(d.B * d.T), kRowThreads, 0, be.stream()>>>(g);
      CUDA_CHECK_LAUNCH("attention_backward (gemm relative bias)");
    }
    if (d_q.defined()) be.matmul(head_of(d_q, h), sc.dp, kh, false, false, scale, 0.0);
    // dK, dV of key/value head kvh: the group's heads summed (in f32 scratch when there are several).
    const double beta = hh == 0 ? 0.0 : 1.0;
    if (d_v.defined()) be.matmul(group > 1 ? sc.dv32 : head_of(d_v, kvh), sc.s, doh, true, false, 1.0, beta);
    if (d_k.defined()) be.matmul(group > 1 ? sc.dk32 : head_of(d_k, kvh), sc.dp, qh, true, false, scale, beta);
    if (group > 1 && hh == group - 1) {
      if (d_v.defined()) be.copy(head_of(d_v, kvh), sc.dv32);
      if (d_k.defined()) be.copy(head_of(d_k, kvh), sc.dk32);
    }
  }
  AttnCallGeom cg;
  cg.B = d.B;
  cg.T = d.T;
  cg.H = d.H;
  attn_param_grads(be, cg, tab, spec, sc.dsink_rows, sc.d_dist);
}

}  // namespace sinklab::cuda
