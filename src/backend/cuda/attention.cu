// The generic attention operation on CUDA (ops.hpp): the reference kernels beside cpu/attention.cpp,
// for every AttentionSpec (sim, norm, mask, lead keys, ALiBi / T5 relative bias, sink logit), f32.
// The per-element math is attention_math.hpp's, the argument checks op_checks' (both shared with the
// CPU). Written for correctness and determinism, not speed: no tensor cores, one block per row.
//
// No T x T matrix is ever stored: the forward keeps one row's chunk of weights in shared memory, the
// backward recomputes P from the row statistic (stats), as the CPU does.
//
// forward / attention_probs: one block per query row (b, h, i); the row's keys are its lead keys, then
// the positional keys [attn_key_begin, attn_key_end), walked in chunks of kAttnThreads (thread c scores
// key c of a chunk: s = scale <q_i, k_j> + g_h(i - j')).
//   pass 1 (running max only: exp, softpick): the shift m over the visible scores and the sink logit;
//   pass 2: w~ = sim(s; m); each thread sums term(w~) of its keys in double; o[e] += numer(w~) v_j[e]
//           (thread e owns feature e and adds the chunk's keys in key order); then R = fixed-tree sum
//           (+ sink term, + softpick's eps), stat, 1/Z~, o *= 1/Z~;
//   pass 3 (probs only): the row numer(w~) / Z~ over all S columns (0 where not visible).
// backward, with D_i = dO_i . o_i and the per-pair P_ij, dS_ij of attention_math.hpp (pair_grad):
//   (1) query-major, one block per (b, h, i): D_i (kept for (2) and (3)), dq_i = scale sum_j dS_ij k_j,
//       and the row's dL/dS_h share;
//   (2) key-major, one block per (b, g, j) (g a key/value head): dv_j = sum P_ij dO_i and
//       dk_j = scale sum dS_ij q_i over the group's query heads and the queries that see j
//       (attn_query_begin/end): each dk/dv row is written by one block, no atomics;
//   (3) relative bias only: one block per (b, h, distance n), the sum of dS over the pairs with
//       max(i - j', 0) = n (the CPU's per-distance sums);
//   (4) one thread per h (sink) or per (h, bucket) (relative bias) adds the pieces of (1) / (3) over
//       b and i (or n) in index order.
// Which kernel runs a call is attention_dispatch.hpp's choice: the entry points below check the operands,
// then hand the call to cuDNN (attention_cudnn.cpp), the flash kernel (attention_flash.cu) or the GEMM path
// (attention_gemm.cu) when it says so, those with f32 or bf16 tensors; these reference kernels run the rest
// (every spec, f32 tensors; the probe's probs always).
// Every sum runs in an order fixed by the shapes (chunks in key order, fixed trees): the same inputs
// give the same bits on the same GPU. The ALiBi slopes and the T5 buckets come from the host
// (attention_math.hpp: the device's logf may put a bucket boundary elsewhere).
#include <cmath>
#include <vector>

#include "backend/attention_dispatch.hpp"
#include "backend/attention_math.hpp"
#include "backend/cuda/attention_kernels.hpp"
#include "backend/cuda/attention_rows.cuh"
#include "backend/cuda/cuda_common.hpp"
#include "backend/memory.hpp"
#include "backend/op_checks.hpp"

namespace sinklab::cuda {

namespace {

using ops::AttnPosBias;

constexpr int kAttnThreads = 128;  // threads per block = keys (or queries) per chunk

// Everything a kernel needs about one call, passed by value.
struct AttnGeom : AttnCallGeom, AttnTables {
  View3 o, dout, dq, dk, dv;           // [B, L, heads, dh]: row (b, l, h)
  View3 stats, probs;                  // [B, H, T] and [B, H, T, S]: (b, h, i)
};

__device__ float dot(const float* a, const float* b, int64_t n) {
  float acc = 0.0f;
  for (int64_t e = 0; e < n; ++e) acc = fmaf(a[e], b[e], acc);
  return acc;
}

// The score s_ij of query (h, i) and key j: scale <q_i, k_j>, plus g_h(i - j') on a positional key.
__device__ float score(const AttnGeom& g, const float* qi, const float* kj, int64_t h, int64_t i, int64_t j) {
  const float s = g.scale * dot(qi, kj, g.dh);
  const int64_t jp = j - g.cfg.lead_keys;
  return g.cfg.pos_bias == AttnPosBias::none || jp < 0 ? s : s + attn_position_bias(g, g.cfg, h, i, jp);
}

// Query row i's keys as columns c < n: the lead keys, then the positional keys from kb.
struct RowKeys {
  int64_t kb = 0, n = 0;
  __device__ int64_t key(int64_t c, int64_t L) const { return c < L ? c : kb + (c - L); }
};
__device__ RowKeys row_keys(const AttnGeom& g, int64_t i) {
  RowKeys r;
  r.kb = math::attn_key_begin(g.cfg, i, g.S);
  int64_t ke = math::attn_key_end(g.cfg, i, g.S);
  if (ke < r.kb) ke = r.kb;
  r.n = g.cfg.lead_keys + ke - r.kb;
  return r;
}

__device__ float sink_of(const AttnGeom& g, int64_t h) { return attn_sink_of(g, g.cfg, h); }

// ---- forward ------------------------------------------------------------------------------------

// One block per query row r = (b * H + h) * T + i. Dynamic shared memory: q_i [dh], o accumulators [dh].
// out undefined: attention_probs (no values read, only probs written).
__global__ void attention_forward_kernel(AttnGeom g) {
  extern __shared__ float smem[];
  float* qi = smem;
  float* acc = smem + g.dh;
  __shared__ float w[kAttnThreads];
  __shared__ float red_f[kAttnThreads];
  __shared__ double red_d[kAttnThreads];
  const int64_t r = blockIdx.x;
  const int64_t i = r % g.T, h = (r / g.T) % g.H, b = r / (g.T * g.H), kvh = h / g.group;
  const int tid = threadIdx.x;
  const math::AttnConfig& cfg = g.cfg;
  const int64_t L = cfg.lead_keys;
  for (int64_t e = tid; e < g.dh; e += kAttnThreads) {
    qi[e] = g.q.at(b, i, h)[e];
    acc[e] = 0.0f;
  }
  __syncthreads();
  const RowKeys keys = row_keys(g, i);
  const float sink = sink_of(g, h);

  // Pass 1: the shift.
  float m = 0.0f;
  if (math::attn_uses_max(cfg)) {
    float local = -INFINITY;
    for (int64_t c = tid; c < keys.n; c += kAttnThreads) {
      const int64_t j = keys.key(c, L);
      if (math::attn_visible(cfg, i, j)) {
        const float s = score(g, qi, g.k.at(b, j, kvh), h, i, j);
        local = local < s ? s : local;
      }
    }
    m = block_reduce<kAttnThreads, float, true>(local, red_f);
    if (cfg.sink) m = m < sink ? sink : m;
    m = math::attn_shift(cfg, m);
  }

  // Pass 2: weights, the row reduction, the unnormalised output.
  double terms = 0.0;
  for (int64_t c0 = 0; c0 < keys.n; c0 += kAttnThreads) {
    const int64_t c = c0 + tid;
    float numer = 0.0f;
    if (c < keys.n) {
      const int64_t j = keys.key(c, L);
      if (math::attn_visible(cfg, i, j)) {
        const float wt = math::attn_sim(cfg, score(g, qi, g.k.at(b, j, kvh), h, i, j), m);
        numer = math::attn_numer(cfg, wt);
        terms += double(math::attn_norm_term(cfg, wt));
      }
    }
    w[tid] = numer;
    __syncthreads();
    if (g.o.p) {
      const int64_t chunk = keys.n - c0 < kAttnThreads ? keys.n - c0 : kAttnThreads;
      for (int64_t e = tid; e < g.dh; e += kAttnThreads) {
        float a = acc[e];
        for (int64_t cc = 0; cc < chunk; ++cc) a = fmaf(w[cc], g.v.at(b, keys.key(c0 + cc, L), kvh)[e], a);
        acc[e] = a;
      }
    }
    __syncthreads();
  }
  double R = block_reduce<kAttnThreads, double, false>(terms, red_d);
  if (cfg.sink) R += double(math::attn_norm_term(cfg, math::attn_sim(cfg, sink, m)));
  R += double(math::attn_norm_offset(cfg, m));
  const float inv = float(math::attn_inv_norm(math::attn_norm_finish(cfg, R)));
  if (tid == 0 && g.stats.p) *g.stats.at(b, h, i) = float(math::attn_stat(cfg, double(m), R));
  if (g.o.p) {
    float* o = g.o.at(b, i, h);
    for (int64_t e = tid; e < g.dh; e += kAttnThreads) o[e] = acc[e] * inv;
  }

  // Pass 3: the row of probs.
  if (g.probs.p) {
    float* row = g.probs.at(b, h, i);
    for (int64_t j = tid; j < g.S; j += kAttnThreads) {
      float p = 0.0f;
      if (math::attn_visible(cfg, i, j))
        p = math::attn_numer(cfg, math::attn_sim(cfg, score(g, qi, g.k.at(b, j, kvh), h, i, j), m)) * inv;
      row[j] = p;
    }
  }
}

// ---- backward -----------------------------------------------------------------------------------

struct PairGrad {
  float p, ds;  // P_ij and dL/ds_ij
};

// P_ij and dL/ds_ij of a visible pair of a non-empty row, from the row statistic and D_i
// (attention_math.hpp's attn_prob / attn_dscore with dP_ij = dO_i . v_j).
__device__ PairGrad pair_grad(const AttnGeom& g, const float* qi, const float* goi, const float* kj, const float* vj,
                              int64_t h, int64_t i, int64_t j, float stat, float D) {
  const math::AttnConfig& cfg = g.cfg;
  const float s = score(g, qi, kj, h, i, j);
  const float dp = dot(goi, vj, g.dh);
  const float inv_z = math::attn_row_inv_norm(cfg, stat);
  const float row_sum = math::attn_row_sum(cfg, stat);
  PairGrad pg;
  pg.p = math::attn_prob(cfg, s, stat, inv_z);
  pg.ds = math::attn_dscore(cfg, s, pg.p, stat, inv_z, row_sum, dp, D);
  return pg;
}

// (1) One block per query row r = (b * H + h) * T + i: D_i into D_rows[r], dq_i (when d_q is given),
// the row's dL/dS_h into dsink_rows[r] (when the spec has a sink). Shared: q_i, dO_i, dq accumulators.
__global__ void attention_backward_query_kernel(AttnGeom g, float* D_rows, double* dsink_rows) {
  extern __shared__ float smem[];
  float* qi = smem;
  float* goi = smem + g.dh;
  float* acc = smem + 2 * g.dh;
  __shared__ float dsc[kAttnThreads];
  __shared__ double red_d[kAttnThreads];
  const int64_t r = blockIdx.x;
  const int64_t i = r % g.T, h = (r / g.T) % g.H, b = r / (g.T * g.H), kvh = h / g.group;
  const int tid = threadIdx.x;
  const math::AttnConfig& cfg = g.cfg;
  const int64_t L = cfg.lead_keys;
  double d_part = 0.0;
  const float* o = g.o.at(b, i, h);
  for (int64_t e = tid; e < g.dh; e += kAttnThreads) {
    qi[e] = g.q.at(b, i, h)[e];
    goi[e] = g.dout.at(b, i, h)[e];
    acc[e] = 0.0f;
    d_part += double(o[e]) * double(goi[e]);
  }
  // (the reduction's __syncthreads publishes qi, goi)
  const float D = float(block_reduce<kAttnThreads, double, false>(d_part, red_d));
  const float stat = *g.stats.at(b, h, i);
  if (tid == 0) D_rows[r] = D;
  const bool empty = math::attn_row_empty(cfg, stat);
  if (tid == 0 && cfg.sink) {
    double ds_sink = 0.0;
    if (!empty) {
      const float inv_z = math::attn_row_inv_norm(cfg, stat), row_sum = math::attn_row_sum(cfg, stat);
      const float sink = sink_of(g, h);
      const float p_sink = math::attn_prob(cfg, sink, stat, inv_z);
      ds_sink = double(math::attn_dscore(cfg, sink, p_sink, stat, inv_z, row_sum, 0.0f, D));
    }
    dsink_rows[r] = ds_sink;
  }
  if (!g.dq.p) return;
  const RowKeys keys = row_keys(g, i);
  if (!empty) {
    for (int64_t c0 = 0; c0 < keys.n; c0 += kAttnThreads) {
      const int64_t c = c0 + tid;
      float ds = 0.0f;
      if (c < keys.n) {
        const int64_t j = keys.key(c, L);
        if (math::attn_visible(cfg, i, j))
          ds = pair_grad(g, qi, goi, g.k.at(b, j, kvh), g.v.at(b, j, kvh), h, i, j, stat, D).ds;
      }
      dsc[tid] = ds;
      __syncthreads();
      const int64_t chunk = keys.n - c0 < kAttnThreads ? keys.n - c0 : kAttnThreads;
      for (int64_t e = tid; e < g.dh; e += kAttnThreads) {
        float a = acc[e];
        for (int64_t cc = 0; cc < chunk; ++cc) a = fmaf(dsc[cc], g.k.at(b, keys.key(c0 + cc, L), kvh)[e], a);
        acc[e] = a;
      }
      __syncthreads();
    }
  }
  float* dq = g.dq.at(b, i, h);
  for (int64_t e = tid; e < g.dh; e += kAttnThreads) dq[e] = g.scale * acc[e];
}

// (2) One block per key row r = (b * Hkv + kvh) * S + j: dk_j, dv_j (each when given) over the pairs
// (h, i), h in the group of kvh, i in [attn_query_begin, attn_query_end), in that order, chunked.
// Shared: k_j, v_j, dk and dv accumulators.
__global__ void attention_backward_key_kernel(AttnGeom g, const float* D_rows) {
  extern __shared__ float smem[];
  float* kj = smem;
  float* vj = smem + g.dh;
  float* acc_k = smem + 2 * g.dh;
  float* acc_v = smem + 3 * g.dh;
  __shared__ float p_sh[kAttnThreads], ds_sh[kAttnThreads];
  const int64_t r = blockIdx.x;
  const int64_t j = r % g.S, kvh = (r / g.S) % g.Hkv, b = r / (g.S * g.Hkv);
  const int tid = threadIdx.x;
  const math::AttnConfig& cfg = g.cfg;
  for (int64_t e = tid; e < g.dh; e += kAttnThreads) {
    kj[e] = g.k.at(b, j, kvh)[e];
    vj[e] = g.v.at(b, j, kvh)[e];
    acc_k[e] = 0.0f;
    acc_v[e] = 0.0f;
  }
  __syncthreads();
  const int64_t ib = math::attn_query_begin(cfg, j), ie_raw = math::attn_query_end(cfg, j, g.T);
  const int64_t nq = ie_raw > ib ? ie_raw - ib : 0;
  const int64_t h0 = kvh * g.group;
  const int64_t pairs = g.group * nq;  // pair u: head h0 + u / nq, query ib + u % nq
  for (int64_t u0 = 0; u0 < pairs; u0 += kAttnThreads) {
    const int64_t u = u0 + tid;
    float p = 0.0f, ds = 0.0f;
    if (u < pairs) {
      const int64_t h = h0 + u / nq, i = ib + u % nq;
      const float stat = *g.stats.at(b, h, i);
      if (math::attn_visible(cfg, i, j) && !math::attn_row_empty(cfg, stat)) {
        const PairGrad pg = pair_grad(g, g.q.at(b, i, h), g.dout.at(b, i, h), kj, vj, h, i, j, stat,
                                      D_rows[(b * g.H + h) * g.T + i]);
        p = pg.p;
        ds = pg.ds;
      }
    }
    p_sh[tid] = p;
    ds_sh[tid] = ds;
    __syncthreads();
    const int64_t chunk = pairs - u0 < kAttnThreads ? pairs - u0 : kAttnThreads;
    for (int64_t e = tid; e < g.dh; e += kAttnThreads) {
      float ak = acc_k[e], av = acc_v[e];
      for (int64_t cc = 0; cc < chunk; ++cc) {
        const int64_t h = h0 + (u0 + cc) / nq, i = ib + (u0 + cc) % nq;
        ak = fmaf(ds_sh[cc], g.q.at(b, i, h)[e], ak);
        av = fmaf(p_sh[cc], g.dout.at(b, i, h)[e], av);
      }
      acc_k[e] = ak;
      acc_v[e] = av;
    }
    __syncthreads();
  }
  for (int64_t e = tid; e < g.dh; e += kAttnThreads) {
    if (g.dk.p) g.dk.at(b, j, kvh)[e] = g.scale * acc_k[e];
    if (g.dv.p) g.dv.at(b, j, kvh)[e] = acc_v[e];
  }
}

// (3) Relative bias: one block per r = (b * H + h) * T + n, the sum of dS over the visible pairs
// (i, j') with max(i - j', 0) = n: j' = i - n for n > 0; j' >= i for n = 0 (prefix keys ahead of the
// query fall into distance 0), into d_dist[r] (double).
__global__ void attention_backward_distance_kernel(AttnGeom g, const float* D_rows, double* d_dist) {
  __shared__ double red_d[kAttnThreads];
  const int64_t r = blockIdx.x;
  const int64_t n = r % g.T, h = (r / g.T) % g.H, b = r / (g.T * g.H), kvh = h / g.group;
  const math::AttnConfig& cfg = g.cfg;
  const int64_t L = cfg.lead_keys;
  const int64_t pairs = n > 0 ? g.T - n : g.T * g.T;
  double sum = 0.0;
  for (int64_t u = threadIdx.x; u < pairs; u += kAttnThreads) {
    int64_t i, jp;
    if (n > 0) {
      i = n + u;
      jp = u;
    } else {
      i = u / g.T;
      jp = u % g.T;
      if (jp < i) continue;
    }
    const int64_t j = jp + L;
    const float stat = *g.stats.at(b, h, i);
    if (!math::attn_visible(cfg, i, j) || math::attn_row_empty(cfg, stat)) continue;
    sum += double(pair_grad(g, g.q.at(b, i, h), g.dout.at(b, i, h), g.k.at(b, j, kvh), g.v.at(b, j, kvh), h, i, j,
                            stat, D_rows[(b * g.H + h) * g.T + i])
                      .ds);
  }
  const double total = block_reduce<kAttnThreads, double, false>(sum, red_d);
  if (threadIdx.x == 0) d_dist[r] = total;
}

// (4) d_sink_logit[h] = sum over b, i of dsink_rows (thread per h); d_relative_bias[h, c] = sum over b
// and the distances n with bucket c of d_dist (thread per (h, c)). Written, not accumulated.
__global__ void attention_param_grads_kernel(AttnGeom g, const double* dsink_rows, float* d_sink, int64_t d_sink_stride,
                                             const double* d_dist, float* d_rel, int64_t num_buckets, int64_t dr0,
                                             int64_t dr1) {
  SL_GRID_LOOP(t, g.H * (1 + num_buckets)) {
    if (t < g.H) {
      if (!d_sink) continue;
      double acc = 0.0;
      for (int64_t b = 0; b < g.B; ++b) {
        double acc_b = 0.0;
        for (int64_t i = 0; i < g.T; ++i) acc_b += dsink_rows[(b * g.H + t) * g.T + i];
        acc += acc_b;
      }
      d_sink[t * d_sink_stride] = float(acc);
    } else {
      const int64_t h = (t - g.H) / num_buckets, c = (t - g.H) % num_buckets;
      double acc = 0.0;
      for (int64_t b = 0; b < g.B; ++b)
        for (int64_t n = 0; n < g.T; ++n)
          if (g.buckets[n] == c) acc += d_dist[(b * g.H + h) * g.T + n];
      d_rel[h * dr0 + c * dr1] = float(acc);
    }
  }
}

// ---- host side ----------------------------------------------------------------------------------

void check_spec_tensors(const CudaBackend& be, const ops::AttentionSpec& spec, const char* op) {
  if (spec.sink_logit.defined()) check_device_f32(be, spec.sink_logit, op, "sink_logit");
  if (spec.d_sink_logit.defined()) check_device_f32(be, spec.d_sink_logit, op, "d_sink_logit");
  if (spec.relative_bias.defined()) check_device_f32(be, spec.relative_bias, op, "relative_bias");
  if (spec.d_relative_bias.defined()) check_device_f32(be, spec.d_relative_bias, op, "d_relative_bias");
}

size_t round_up(size_t bytes) { return (bytes + 255) / 256 * 256; }

// The geometry of a call, with the host-made tables (attn_tables) behind `extra_bytes` of per-call device
// scratch (returned in *extra).
AttnGeom make_geom(CudaBackend& be, const AttentionDims& d, const Tensor& q, const Tensor& k, const Tensor& v,
                   const ops::AttentionSpec& spec, size_t extra_bytes, void** extra, const char* op) {
  AttnGeom g;
  static_cast<AttnCallGeom&>(g) = attn_call_geom(d, spec, q, k, v, op);
  static_cast<AttnTables&>(g) = attn_tables(be, d, spec, extra_bytes, extra);
  return g;
}

size_t shared_bytes(const AttentionDims& d, int rows, const char* op) {
  const size_t bytes = sizeof(float) * size_t(rows) * size_t(d.dh);
  SL_CHECK(bytes <= 40 * 1024, "%s: head dim %lld is too large for the CUDA reference kernel (at most %d)", op,
           (long long)d.dh, int(40 * 1024 / (sizeof(float) * size_t(rows))));
  return bytes;
}

// The forward pass and attention_probs (out, v undefined).
void forward(CudaBackend& be, Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v, const ops::AttentionSpec& spec,
             Tensor probs, const AttentionDims& d, const char* op) {
  for (const auto& [t, name] : {std::pair<const Tensor*, const char*>{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"},
                                {&stats, "stats"}, {&probs, "probs"}})
    if (t->defined()) check_device_f32(be, *t, op, name);
  check_spec_tensors(be, spec, op);
  const size_t smem = shared_bytes(d, 2, op);
  if (d.B * d.H * d.T == 0) return;
  SL_CHECK(d.B * d.H * d.T < (int64_t(1) << 31), "%s: B*H*T = %lld rows exceed the grid", op,
           (long long)(d.B * d.H * d.T));
  DeviceGuard guard(be.index());
  void* extra = nullptr;
  AttnGeom g = make_geom(be, d, q, k, v, spec, 0, &extra, op);
  g.o = head_rows(out, op, "out");
  g.stats = view3(stats);
  g.probs = view3(probs);
  attention_forward_kernel<<<unsigned(d.B * d.H * d.T), kAttnThreads, smem, be.stream()>>>(g);
  CUDA_CHECK_LAUNCH(op);
}

// The fast kernels' operands (cuDNN, flash, GEMM): on this device, f32 or bf16 (op_checks made q, k, v and
// the outputs one dtype, stats and the spec's tensors f32 with bf16).
using NamedTensors = std::initializer_list<std::pair<const Tensor*, const char*>>;
void check_fast_operands(const CudaBackend& be, NamedTensors tensors, const ops::AttentionSpec& spec, const char* op) {
  for (const auto& [t, name] : tensors) {
    if (!t->defined()) continue;
    check_device(be, *t, op, name);
    SL_CHECK(t->dtype == DType::f32 || t->dtype == DType::bf16,
             "%s: %s has dtype %s; the CUDA attention takes f32 or bf16", op, name, dtype_name(t->dtype));
  }
  check_spec_tensors(be, spec, op);
}

// The reference kernels compute in f32. bf16 operands (a bf16 model that asks for the reference kernel, or
// for the probs matrix only the reference forms) run it on f32 copies: inputs widened, outputs rounded back,
// as the CPU's bf16 storage does (ops.hpp, "bf16 storage"). A path for probes and checks, not the bf16 step's.
class WidenedOperands {
 public:
  WidenedOperands(Device device, std::initializer_list<Tensor*> inputs, std::initializer_list<Tensor*> outputs)
      : device_(device) {
    for (Tensor* t : inputs) widen(t, /*read=*/true);
    for (Tensor* t : outputs) widen(t, /*read=*/false);
  }
  // The outputs rounded back into the bf16 tensors they stand for.
  void write_back() {
    for (auto& [out, f32] : outputs_) ops::copy(out, f32);
  }

 private:
  void widen(Tensor* t, bool read) {
    if (!t->defined() || t->dtype != DType::bf16) return;
    buffers_.emplace_back(size_t(t->numel()) * sizeof(float), device_);
    Tensor f32 = Tensor::contiguous_view(buffers_.back().data(), DType::f32, t->shape.data(), t->ndim, device_);
    if (read) ops::copy(f32, *t);
    else outputs_.push_back({*t, f32});
    *t = f32;
  }
  Device device_;
  std::vector<Buffer> buffers_;
  std::vector<std::pair<Tensor, Tensor>> outputs_;  // (the bf16 output, its f32 stand-in)
};

}  // namespace

AttnCallGeom attn_call_geom(const AttentionDims& d, const ops::AttentionSpec& spec, const Tensor& q, const Tensor& k,
                            const Tensor& v, const char* op) {
  AttnCallGeom g;
  g.B = d.B;
  g.T = d.T;
  g.S = d.S;
  g.H = d.H;
  g.Hkv = d.Hkv;
  g.dh = d.dh;
  g.group = d.H / d.Hkv;
  g.scale = float(attention_scale(spec, d.dh));
  g.cfg = math::attn_config(spec);
  g.q = head_rows(q, op, "q");
  g.k = head_rows(k, op, "k");
  g.v = head_rows(v, op, "v");
  return g;
}


AttnTables attn_tables(CudaBackend& be, const AttentionDims& d, const ops::AttentionSpec& spec, size_t extra_bytes,
                       void** extra) {
  AttnTables t;
  if (spec.sink_logit.defined()) {
    t.sink = spec.sink_logit.ptr<float>();
    t.sink_stride = spec.sink_logit.stride[0];
  }
  std::vector<float> slopes;
  std::vector<int32_t> buckets;
  if (spec.pos_bias == AttnPosBias::alibi) {
    for (int64_t h = 0; h < d.H; ++h) slopes.push_back(float(math::attn_alibi_slope(h, d.H)));
  } else if (spec.pos_bias == AttnPosBias::relative) {
    const int64_t num_buckets = math::attn_config(spec).num_buckets;
    for (int64_t n = 0; n < d.T; ++n)
      buckets.push_back(int32_t(math::attn_relative_bucket(n, num_buckets, spec.relative_max_distance)));
    t.rel = spec.relative_bias.ptr<float>();
    t.rel0 = spec.relative_bias.stride[0];
    t.rel1 = spec.relative_bias.stride[1];
  }
  const size_t extra_size = round_up(extra_bytes);
  const size_t slope_bytes = round_up(sizeof(float) * slopes.size());
  const size_t bucket_bytes = sizeof(int32_t) * buckets.size();
  char* base = static_cast<char*>(
      be.scratch(CudaBackend::ScratchSlot::attention, extra_size + slope_bytes + bucket_bytes + 1));
  *extra = base;
  // Pageable sources: the copy has read them when cudaMemcpyAsync returns; stream order keeps earlier
  // calls' kernels, which may still read the old tables, ahead of it.
  if (!slopes.empty()) {
    CUDA_CHECK(cudaMemcpyAsync(base + extra_size, slopes.data(), sizeof(float) * slopes.size(), cudaMemcpyHostToDevice,
                               be.stream()));
    t.slopes = reinterpret_cast<const float*>(base + extra_size);
  }
  if (!buckets.empty()) {
    CUDA_CHECK(cudaMemcpyAsync(base + extra_size + slope_bytes, buckets.data(), bucket_bytes, cudaMemcpyHostToDevice,
                               be.stream()));
    t.buckets = reinterpret_cast<const int32_t*>(base + extra_size + slope_bytes);
  }
  return t;
}

void attn_param_grads(CudaBackend& be, const AttnCallGeom& g, const AttnTables& t, const ops::AttentionSpec& spec,
                      const double* dsink_rows, const double* d_dist) {
  const bool want_sink = spec.d_sink_logit.defined(), want_rel = spec.d_relative_bias.defined();
  if (!want_sink && !want_rel) return;
  AttnGeom geom;
  static_cast<AttnCallGeom&>(geom) = g;
  static_cast<AttnTables&>(geom) = t;
  const int64_t nb = want_rel ? spec.d_relative_bias.shape[1] : 0;
  float* d_sink = want_sink ? spec.d_sink_logit.ptr<float>() : nullptr;
  float* d_rel = want_rel ? spec.d_relative_bias.ptr<float>() : nullptr;
  attention_param_grads_kernel<<<grid_for(g.H * (1 + nb)), kThreads, 0, be.stream()>>>(
      geom, dsink_rows, d_sink, want_sink ? spec.d_sink_logit.stride[0] : 0, d_dist, d_rel, nb,
      want_rel ? spec.d_relative_bias.stride[0] : 0, want_rel ? spec.d_relative_bias.stride[1] : 0);
  CUDA_CHECK_LAUNCH("attention_backward (parameter gradients)");
}

// out [B,T,H,dh], stats [B,H,T] (optional), probs [B,H,T,S] (optional) from q [B,T,H,dh], k/v [B,S,Hkv,dh].
void CudaBackend::attention_forward(Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v, const AttentionSpec& spec,
                                    Tensor probs) {
  const char* op = "attention_forward";
  const AttentionDims d = check_attention_forward_args(op, out, stats, q, k, v, spec, probs);
  const ops::AttnKernelChoice kernel = ops::choose_attention_kernel(spec, ops::attn_call_of(q, probs.defined()));
  if (kernel.kernel == ops::AttnKernel::reference) {
    WidenedOperands f32(q.device, {&q, &k, &v}, {&out});
    forward(*this, out, stats, q, k, v, spec, probs, d, op);
    return f32.write_back();
  }
  check_fast_operands(*this, {{&q, "q"}, {&k, "k"}, {&v, "v"}, {&out, "out"}, {&stats, "stats"}}, spec, op);
  if (kernel.kernel == ops::AttnKernel::cudnn) return cudnn_attention_forward(*this, out, stats, q, k, v, spec, d);
  if (kernel.kernel == ops::AttnKernel::flash) return flash_attention_forward(*this, out, stats, q, k, v, spec, d);
  gemm_attention_forward(*this, out, stats, q, k, v, spec, d);
}

// probs [B,H,T,S]: the forward's pass 3 alone (the same products, so the same bits as a forward's probs).
void CudaBackend::attention_probs(Tensor probs, Tensor q, Tensor k, const AttentionSpec& spec) {
  const char* op = "attention_probs";
  const AttentionDims d = check_attention_qkv(op, q, k, Tensor{}, spec);
  check_attention_probs(probs, d, q, op);
  WidenedOperands f32(q.device, {&q, &k}, {});
  forward(*this, Tensor{}, Tensor{}, q, k, Tensor{}, spec, probs, d, op);
}

// d_q [B,T,H,dh], d_k/d_v [B,S,Hkv,dh] (each optional, written), d_sink_logit / d_relative_bias of the
// spec (optional, written), from d_out, the forward's inputs, out and stats.
void CudaBackend::attention_backward(Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k, Tensor v,
                                     Tensor out, Tensor stats, const AttentionSpec& spec) {
  const char* op = "attention_backward";
  const AttentionDims d = check_attention_backward_args(op, d_q, d_k, d_v, d_out, q, k, v, out, stats, spec);
  const ops::AttnKernelChoice kernel = ops::choose_attention_kernel(spec, ops::attn_call_of(q, false));
  const NamedTensors operands = {{&q, "q"},         {&k, "k"},         {&v, "v"},     {&out, "out"}, {&d_out, "d_out"},
                                 {&stats, "stats"}, {&d_q, "d_q"},     {&d_k, "d_k"}, {&d_v, "d_v"}};
  if (kernel.kernel != ops::AttnKernel::reference) {
    check_fast_operands(*this, operands, spec, op);
    if (kernel.kernel == ops::AttnKernel::cudnn)
      return cudnn_attention_backward(*this, d_q, d_k, d_v, d_out, q, k, v, out, stats, spec, d);
    if (kernel.kernel == ops::AttnKernel::flash)
      return flash_attention_backward(*this, d_q, d_k, d_v, d_out, q, k, v, out, stats, spec, d);
    return gemm_attention_backward(*this, d_q, d_k, d_v, d_out, q, k, v, out, stats, spec, d);
  }
  WidenedOperands f32(q.device, {&q, &k, &v, &out, &d_out}, {&d_q, &d_k, &d_v});
  for (const auto& [t, name] : operands)
    if (t->defined()) check_device_f32(*this, *t, op, name);
  check_spec_tensors(*this, spec, op);
  const size_t smem_query = shared_bytes(d, 3, op), smem_key = shared_bytes(d, 4, op);
  DeviceGuard guard(index_);
  const int64_t rows = d.B * d.H * d.T;
  SL_CHECK(rows < (int64_t(1) << 31) && d.B * d.Hkv * d.S < (int64_t(1) << 31), "%s: B*H*T = %lld rows exceed the grid",
           op, (long long)rows);
  const bool want_rel = spec.d_relative_bias.defined();
  // Per-call scratch: D_i and the sink's per-row pieces (rows each), the per-distance sums (rows).
  const size_t dsink_bytes = round_up(sizeof(double) * size_t(rows));
  const size_t dist_bytes = round_up(sizeof(double) * size_t(want_rel ? rows : 0));
  void* extra = nullptr;
  AttnGeom g = make_geom(*this, d, q, k, v, spec, dsink_bytes + dist_bytes + sizeof(float) * size_t(rows), &extra, op);
  double* dsink_rows = static_cast<double*>(extra);
  double* d_dist = reinterpret_cast<double*>(static_cast<char*>(extra) + dsink_bytes);
  float* D_rows = reinterpret_cast<float*>(static_cast<char*>(extra) + dsink_bytes + dist_bytes);
  g.o = head_rows(out, op, "out");
  g.dout = head_rows(d_out, op, "d_out");
  g.dq = head_rows(d_q, op, "d_q");
  g.dk = head_rows(d_k, op, "d_k");
  g.dv = head_rows(d_v, op, "d_v");
  g.stats = view3(stats);
  cudaStream_t s = stream_;
  if (rows > 0) {
    attention_backward_query_kernel<<<unsigned(rows), kAttnThreads, smem_query, s>>>(g, D_rows, dsink_rows);
    CUDA_CHECK_LAUNCH("attention_backward (queries)");
  }
  // Key rows are written even when no query sees them (T = 0 with lead keys: zeros).
  if ((d_k.defined() || d_v.defined()) && d.B * d.Hkv * d.S > 0) {
    attention_backward_key_kernel<<<unsigned(d.B * d.Hkv * d.S), kAttnThreads, smem_key, s>>>(g, D_rows);
    CUDA_CHECK_LAUNCH("attention_backward (keys)");
  }
  if (want_rel && rows > 0) {
    attention_backward_distance_kernel<<<unsigned(rows), kAttnThreads, 0, s>>>(g, D_rows, d_dist);
    CUDA_CHECK_LAUNCH("attention_backward (relative bias)");
  }
  attn_param_grads(*this, g, g, spec, dsink_rows, d_dist);
  f32.write_back();
}

}  // namespace sinklab::cuda
