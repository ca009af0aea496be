// The flash-style attention kernel for the sink-free operations cuDNN cannot express (attention_dispatch.hpp
// decides when it runs): sim sigmoid (any bias, e.g. -log n), elu+1, identity; norm one (no row state at
// all, FlashSigmoid's design) or sum with any alpha (one row sum, no running max: these sims need no
// shift); causal, sliding-window and prefix-LM masks; lead keys (K/KV biases). No position bias, no sink
// logit. This file: the entry points and the WMMA kernels, which take f32 tensors and bf16 ones whose rows are
// not 16-byte aligned (IO = the element type: f32 converted to bf16 in the tile loads, bf16 read as it is);
// bf16 tensors with aligned rows go to the mma.sync kernels of attention_flash_mma.cu (FlashAttention-2
// style; shared pieces in attention_flash.cuh). bf16 tensor-core products (WMMA m16n16k16, sm_80 and sm_90)
// with f32 accumulation; no T x T matrix in memory; the backward recomputes the weights from the row statistic.
// The per-element math is attention_math.hpp's (attn_sim, attn_norm_term, attn_prob, attn_dscore), and
// its stats are the reference's (the row reduction R_i), so either kernel's forward serves the other's
// backward.
//
// Tiles. Head dims up to 128, zero-padded to a multiple of 16 (DP) in shared memory.
//   forward (one block of 4 warps per (b, h, 64 queries)): Q tile to bf16 once; per tile of 64 keys (the
//     lead keys, then the positional keys the tile's rows may see): K, V to bf16; S = Q K^T (warp w: rows
//     16w..16w+15); w = sim(scale S), masked, its norm term summed per row, P = bf16(w); O += P V in f32
//     accumulators in shared memory. Then o = O / Z (Z = 1 for norm one), stats = R.
//   backward: (1) per (b, h, 64 queries): D_i = dO_i . o_i, then per key tile S = Q K^T, dP = dO V^T,
//     dS = attn_dscore(...), dQ += dS K; (2) per (b, kv head, 32 keys), over the group's query heads and
//     the query tiles that see the keys: S, dP again, dV += P^T dO, dK += dS^T Q. Each output row is
//     written by one block: no atomics, the same bits on every run.
// The WMMA kernels ran on an H200 (2026-11-28, f32 tensors): test_cuda_attention_fast passes; speed in
// bench/README.md (6.8 TFLOP/s forward at dh 128, far from its targets).
#include <cuda_bf16.h>
#include <mma.h>

#include <algorithm>
#include <type_traits>

#include "backend/attention_math.hpp"
#include "backend/cuda/attention_flash.cuh"
#include "backend/cuda/attention_kernels.hpp"
#include "backend/cuda/cuda_common.hpp"

namespace sinklab::cuda {

namespace {

using namespace flash;

namespace wmma = nvcuda::wmma;

constexpr int kBQ = 64;      // queries per tile
constexpr int kBKf = 64;     // keys per tile, forward and dQ
constexpr int kBKb = 32;     // keys per block, dK / dV
constexpr int kPad16 = 8;    // bf16 row padding (16 bytes: rows stay 32-byte aligned every 16 rows)
constexpr int kPad32 = 4;    // f32 row padding

size_t align128(size_t bytes) { return (bytes + 127) / 128 * 128; }

// Carves dynamic shared memory into 128-byte aligned arrays (the same walk on host and device).
struct SmemCarve {
  char* base;
  size_t at = 0;
  template <class T>
  __host__ __device__ T* take(size_t n) {
    T* p = reinterpret_cast<T*>(base + at);
    at += (n * sizeof(T) + 127) / 128 * 128;
    return p;
  }
};

// rows x DP tile of a [B, L, heads, dh] tensor to bf16 (zero beyond `valid` rows and dh columns).
template <class IO>
__device__ void load_tile(bf16* dst, int ld, const View3& src, int64_t b, int64_t row0, int64_t valid, int64_t head,
                          int64_t dh, int DP, int rows) {
  for (int e = threadIdx.x; e < rows * DP; e += blockDim.x) {
    const int r = e / DP, c = e % DP;
    bf16 x = __float2bfloat16(0.0f);
    if (r < valid && c < dh) x = to_bf16(row_of<IO>(src, b, row0 + r, head)[c]);
    dst[r * ld + c] = x;
  }
}

// One warp: the 16 x 16 f32 tile C (row-major, ldc) = (accumulate ? C : 0) + sum over K of A B, A being
// 16 x K and B K x 16 in the given layouts; a/b point at the tile's first row/column (element (m, k) of
// a row-major A at a[m * lda + k], of a col-major A at a[k * lda + m]; B likewise with (k, n)).
template <class LayoutA, class LayoutB>
__device__ void warp_mma(float* c, int ldc, const bf16* a, int lda, const bf16* b, int ldb, int K, bool accumulate) {
  wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc;
  if (accumulate) {
    wmma::load_matrix_sync(acc, c, ldc, wmma::mem_row_major);
  } else {
    wmma::fill_fragment(acc, 0.0f);
  }
  wmma::fragment<wmma::matrix_a, 16, 16, 16, bf16, LayoutA> fa;
  wmma::fragment<wmma::matrix_b, 16, 16, 16, bf16, LayoutB> fb;
  for (int kk = 0; kk < K; kk += 16) {
    const bf16* ap = std::is_same_v<LayoutA, wmma::row_major> ? a + kk : a + kk * lda;
    const bf16* bp = std::is_same_v<LayoutB, wmma::row_major> ? b + kk * ldb : b + kk;
    wmma::load_matrix_sync(fa, ap, lda);
    wmma::load_matrix_sync(fb, bp, ldb);
    wmma::mma_sync(acc, fa, fb, acc);
  }
  wmma::store_matrix_sync(c, acc, ldc, wmma::mem_row_major);
}

// Rows m0..m0+15 of C [*, n] = A [*, K] . B^T where B is stored [n][K] row-major (i.e. B^T col-major):
// the score-like products (S = Q K^T, dP = dO V^T). One warp, n a multiple of 16.
__device__ void warp_abt(float* c, int ldc, const bf16* a, int lda, const bf16* bt, int ldb, int n, int K) {
  for (int n0 = 0; n0 < n; n0 += 16)
    warp_mma<wmma::row_major, wmma::col_major>(c + n0, ldc, a, lda, bt + n0 * ldb, ldb, K, false);
}

// ---- forward --------------------------------------------------------------------------------------

template <class IO>
__global__ void __launch_bounds__(kThreadsFlash) flash_forward_kernel(FlashGeom g) {
  extern __shared__ __align__(128) char smem[];
  const int DP = g.DP, ldb = DP + kPad16, ldf = DP + kPad32, lds = kBKf + kPad32, ldp = kBKf + kPad16;
  SmemCarve sc{smem};
  bf16* Qs = sc.take<bf16>(size_t(kBQ) * ldb);
  bf16* Ks = sc.take<bf16>(size_t(kBKf) * ldb);
  bf16* Vs = sc.take<bf16>(size_t(kBKf) * ldb);
  float* Sf = sc.take<float>(size_t(kBQ) * lds);
  bf16* Pb = sc.take<bf16>(size_t(kBQ) * ldp);
  float* Of = sc.take<float>(size_t(kBQ) * ldf);
  float* rowsum = sc.take<float>(kBQ);
  const int64_t b = blockIdx.z, h = blockIdx.y, i0 = int64_t(blockIdx.x) * kBQ;
  const int64_t nq = g.T - i0 < kBQ ? g.T - i0 : kBQ, kvh = h / g.group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const math::AttnConfig& cfg = g.cfg;

  load_tile<IO>(Qs, ldb, g.q, b, i0, nq, h, g.dh, DP, kBQ);
  for (int e = threadIdx.x; e < kBQ * ldf; e += blockDim.x) Of[e] = 0.0f;
  for (int e = threadIdx.x; e < kBQ; e += blockDim.x) rowsum[e] = 0.0f;
  const KeyRange keys = key_range(g, i0, i0 + nq);
  const int64_t n_tiles = keys.tiles(kBKf);
  for (int64_t t = 0; t < n_tiles; ++t) {
    int64_t j0, nk;
    keys.tile(t, kBKf, &j0, &nk);
    __syncthreads();  // the previous tile's K, V are no longer read
    load_tile<IO>(Ks, ldb, g.k, b, j0, nk, kvh, g.dh, DP, kBKf);
    load_tile<IO>(Vs, ldb, g.v, b, j0, nk, kvh, g.dh, DP, kBKf);
    __syncthreads();
    // S = Q K^T for this warp's 16 rows.
    const int r0 = warp * 16;
    warp_abt(Sf + r0 * lds, lds, Qs + r0 * ldb, ldb, Ks, ldb, kBKf, DP);
    __syncwarp();
    // Weights: lane -> row r0 + lane / 2, half (lane % 2) of the key columns.
    {
      const int r = r0 + lane / 2, c0 = (lane % 2) * (kBKf / 2);
      const int64_t i = i0 + r;
      float terms = 0.0f;
      for (int c = c0; c < c0 + kBKf / 2; ++c) {
        const int64_t j = j0 + c;
        float numer = 0.0f;
        if (i < g.T && c < nk && math::attn_visible(cfg, i, j)) {
          const float w = math::attn_sim(cfg, g.scale * Sf[r * lds + c], 0.0f);
          numer = math::attn_numer(cfg, w);
          terms += math::attn_norm_term(cfg, w);
        }
        Pb[r * ldp + c] = __float2bfloat16(numer);
      }
      terms += __shfl_xor_sync(0xffffffffu, terms, 1);
      if (lane % 2 == 0) rowsum[r] += terms;
    }
    __syncwarp();
    // O += P V (this warp's rows, every column block of the head dim).
    for (int n0 = 0; n0 < DP; n0 += 16)
      warp_mma<wmma::row_major, wmma::row_major>(Of + r0 * ldf + n0, ldf, Pb + r0 * ldp, ldp, Vs + n0, ldb, kBKf,
                                                 true);
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kBQ * DP; e += blockDim.x) {
    const int r = e / DP, c = e % DP;
    const int64_t i = i0 + r;
    if (i >= g.T || c >= g.dh) continue;
    const float inv = math::attn_inv_norm(math::attn_norm_finish(cfg, rowsum[r]));
    row_of<IO>(g.o, b, i, h)[c] = from_f32<IO>(Of[r * ldf + c] * inv);
  }
  if (g.stats.p)
    for (int r = threadIdx.x; r < nq; r += blockDim.x)
      *g.stats.at(b, h, i0 + r) = math::attn_stat(cfg, 0.0f, rowsum[r]);
}

size_t forward_smem(int DP) {
  const size_t ldb = DP + kPad16, ldf = DP + kPad32;
  return align128(2 * kBQ * ldb) + 2 * align128(2 * kBKf * ldb) + align128(4 * kBQ * (kBKf + kPad32)) +
         align128(2 * kBQ * (kBKf + kPad16)) + align128(4 * kBQ * ldf) + align128(4 * kBQ);
}

// ---- backward ---------------------------------------------------------------------------------------

// (1) dQ and D, one block per (b, h, 64 queries).
template <class IO>
__global__ void __launch_bounds__(kThreadsFlash) flash_backward_dq_kernel(FlashGeom g) {
  extern __shared__ __align__(128) char smem[];
  const int DP = g.DP, ldb = DP + kPad16, ldf = DP + kPad32, lds = kBKf + kPad32, ldp = kBKf + kPad16;
  SmemCarve sc{smem};
  bf16* Qs = sc.take<bf16>(size_t(kBQ) * ldb);
  bf16* dOs = sc.take<bf16>(size_t(kBQ) * ldb);
  bf16* Ks = sc.take<bf16>(size_t(kBKf) * ldb);
  bf16* Vs = sc.take<bf16>(size_t(kBKf) * ldb);
  float* Sf = sc.take<float>(size_t(kBQ) * lds);
  float* dPf = sc.take<float>(size_t(kBQ) * lds);
  bf16* dSb = sc.take<bf16>(size_t(kBQ) * ldp);
  float* dQf = sc.take<float>(size_t(kBQ) * ldf);
  RowStat* rst = sc.take<RowStat>(kBQ);
  const int64_t b = blockIdx.z, h = blockIdx.y, i0 = int64_t(blockIdx.x) * kBQ;
  const int64_t nq = g.T - i0 < kBQ ? g.T - i0 : kBQ, kvh = h / g.group;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const math::AttnConfig& cfg = g.cfg;

  load_tile<IO>(Qs, ldb, g.q, b, i0, nq, h, g.dh, DP, kBQ);
  load_tile<IO>(dOs, ldb, g.dout, b, i0, nq, h, g.dh, DP, kBQ);
  for (int e = threadIdx.x; e < kBQ * ldf; e += blockDim.x) dQf[e] = 0.0f;
  // D_i = dO_i . o_i in f32 from the f32 tensors (warp per row), published for kernel (2).
  for (int r = warp; r < nq; r += kWarps) {
    const IO* o = row_of<IO>(g.o, b, i0 + r, h);
    const IO* go = row_of<IO>(g.dout, b, i0 + r, h);
    float d = 0.0f;
    for (int64_t c = lane; c < g.dh; c += 32) d = fmaf(to_f32(o[c]), to_f32(go[c]), d);
    for (int off = 16; off > 0; off /= 2) d += __shfl_xor_sync(0xffffffffu, d, off);
    if (lane == 0) g.D[(b * g.H + h) * g.T + i0 + r] = d;
  }
  __syncthreads();  // D visible to this block (global writes, same block)
  __threadfence_block();
  for (int r = threadIdx.x; r < nq; r += blockDim.x) rst[r] = row_stat(g, b, h, i0 + r);
  const KeyRange keys = key_range(g, i0, i0 + nq);
  const int64_t n_tiles = keys.tiles(kBKf);
  const int r0 = warp * 16;
  for (int64_t t = 0; t < n_tiles; ++t) {
    int64_t j0, nk;
    keys.tile(t, kBKf, &j0, &nk);
    __syncthreads();
    load_tile<IO>(Ks, ldb, g.k, b, j0, nk, kvh, g.dh, DP, kBKf);
    load_tile<IO>(Vs, ldb, g.v, b, j0, nk, kvh, g.dh, DP, kBKf);
    __syncthreads();
    warp_abt(Sf + r0 * lds, lds, Qs + r0 * ldb, ldb, Ks, ldb, kBKf, DP);
    warp_abt(dPf + r0 * lds, lds, dOs + r0 * ldb, ldb, Vs, ldb, kBKf, DP);
    __syncwarp();
    {
      const int r = r0 + lane / 2, c0 = (lane % 2) * (kBKf / 2);
      const int64_t i = i0 + r;
      for (int c = c0; c < c0 + kBKf / 2; ++c) {
        float p = 0.0f, ds = 0.0f;
        if (i < g.T && c < nk && math::attn_visible(cfg, i, j0 + c))
          pair_p_ds(cfg, g.scale * Sf[r * lds + c], dPf[r * lds + c], rst[r], &p, &ds);
        dSb[r * ldp + c] = __float2bfloat16(ds);
      }
    }
    __syncwarp();
    for (int n0 = 0; n0 < DP; n0 += 16)
      warp_mma<wmma::row_major, wmma::row_major>(dQf + r0 * ldf + n0, ldf, dSb + r0 * ldp, ldp, Ks + n0, ldb, kBKf,
                                                 true);
  }
  __syncthreads();
  if (!g.dq.p) return;
  for (int e = threadIdx.x; e < kBQ * DP; e += blockDim.x) {
    const int r = e / DP, c = e % DP;
    if (i0 + r < g.T && c < g.dh) row_of<IO>(g.dq, b, i0 + r, h)[c] = from_f32<IO>(g.scale * dQf[r * ldf + c]);
  }
}

size_t dq_smem(int DP) {
  const size_t ldb = DP + kPad16, ldf = DP + kPad32;
  return 2 * align128(2 * kBQ * ldb) + 2 * align128(2 * kBKf * ldb) + 2 * align128(4 * kBQ * (kBKf + kPad32)) +
         align128(2 * kBQ * (kBKf + kPad16)) + align128(4 * kBQ * ldf) + align128(sizeof(RowStat) * kBQ);
}

// (2) dK, dV: one block per (b, kv head, 32 keys), over the group's query heads and the query tiles that
// may see the keys. Warp w computes S / dP rows 16w.. of a query tile; for dK / dV it owns key rows
// 16 (w % 2).. and every other 16-column block of the head dim from w / 2.
template <class IO>
__global__ void __launch_bounds__(kThreadsFlash) flash_backward_dkv_kernel(FlashGeom g) {
  extern __shared__ __align__(128) char smem[];
  const int DP = g.DP, ldb = DP + kPad16, ldf = DP + kPad32, lds = kBKb + kPad32, ldp = kBKb + kPad16;
  SmemCarve sc{smem};
  bf16* Ks = sc.take<bf16>(size_t(kBKb) * ldb);
  bf16* Vs = sc.take<bf16>(size_t(kBKb) * ldb);
  bf16* Qs = sc.take<bf16>(size_t(kBQ) * ldb);
  bf16* dOs = sc.take<bf16>(size_t(kBQ) * ldb);
  float* Sf = sc.take<float>(size_t(kBQ) * lds);
  float* dPf = sc.take<float>(size_t(kBQ) * lds);
  bf16* Pb = sc.take<bf16>(size_t(kBQ) * ldp);
  bf16* dSb = sc.take<bf16>(size_t(kBQ) * ldp);
  float* dKf = sc.take<float>(size_t(kBKb) * ldf);
  float* dVf = sc.take<float>(size_t(kBKb) * ldf);
  RowStat* rst = sc.take<RowStat>(kBQ);
  const int64_t b = blockIdx.z, kvh = blockIdx.y, j0 = int64_t(blockIdx.x) * kBKb;
  const int64_t nk = g.S - j0 < kBKb ? g.S - j0 : kBKb;
  const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  const math::AttnConfig& cfg = g.cfg;

  load_tile<IO>(Ks, ldb, g.k, b, j0, nk, kvh, g.dh, DP, kBKb);
  load_tile<IO>(Vs, ldb, g.v, b, j0, nk, kvh, g.dh, DP, kBKb);
  for (int e = threadIdx.x; e < kBKb * ldf; e += blockDim.x) {
    dKf[e] = 0.0f;
    dVf[e] = 0.0f;
  }
  // The queries that may see keys [j0, j0 + nk): the union of the keys' ranges (a lead key is seen by every
  // query, the positional keys after it by a window's worth only: the ends are not monotone across them).
  int64_t qb = g.T, qe = 0;
  for (int64_t j = j0; j < j0 + nk; ++j) {
    const int64_t b_j = math::attn_query_begin(cfg, j), e_j = math::attn_query_end(cfg, j, g.T);
    qb = b_j < qb ? b_j : qb;
    qe = e_j > qe ? e_j : qe;
  }
  const int r0 = warp * 16;
  for (int64_t hh = 0; hh < g.group; ++hh) {
    const int64_t h = kvh * g.group + hh;
    for (int64_t i0 = qb - qb % kBQ; i0 < qe; i0 += kBQ) {
      const int64_t nq = g.T - i0 < kBQ ? g.T - i0 : kBQ;
      __syncthreads();  // the previous tile's Q, dO, P, dS are no longer read
      load_tile<IO>(Qs, ldb, g.q, b, i0, nq, h, g.dh, DP, kBQ);
      load_tile<IO>(dOs, ldb, g.dout, b, i0, nq, h, g.dh, DP, kBQ);
      for (int r = threadIdx.x; r < nq; r += blockDim.x) rst[r] = row_stat(g, b, h, i0 + r);
      __syncthreads();
      warp_abt(Sf + r0 * lds, lds, Qs + r0 * ldb, ldb, Ks, ldb, kBKb, DP);
      warp_abt(dPf + r0 * lds, lds, dOs + r0 * ldb, ldb, Vs, ldb, kBKb, DP);
      __syncwarp();
      {
        const int r = r0 + lane / 2, c0 = (lane % 2) * (kBKb / 2);
        const int64_t i = i0 + r;
        for (int c = c0; c < c0 + kBKb / 2; ++c) {
          float p = 0.0f, ds = 0.0f;
          if (i < g.T && c < nk && math::attn_visible(cfg, i, j0 + c))
            pair_p_ds(cfg, g.scale * Sf[r * lds + c], dPf[r * lds + c], rst[r], &p, &ds);
          Pb[r * ldp + c] = __float2bfloat16(p);
          dSb[r * ldp + c] = __float2bfloat16(ds);
        }
      }
      __syncthreads();  // dK / dV read every warp's rows of P and dS
      const int m0 = (warp % 2) * 16;
      for (int n0 = (warp / 2) * 16; n0 < DP; n0 += 32) {
        // dV[keys m0.., dims n0..] += P^T dO ; dK += dS^T Q  (P^T: P read column-major)
        warp_mma<wmma::col_major, wmma::row_major>(dVf + m0 * ldf + n0, ldf, Pb + m0, ldp, dOs + n0, ldb, kBQ, true);
        warp_mma<wmma::col_major, wmma::row_major>(dKf + m0 * ldf + n0, ldf, dSb + m0, ldp, Qs + n0, ldb, kBQ, true);
      }
    }
  }
  __syncthreads();
  for (int e = threadIdx.x; e < kBKb * DP; e += blockDim.x) {
    const int r = e / DP, c = e % DP;
    if (r >= nk || c >= g.dh) continue;
    if (g.dk.p) row_of<IO>(g.dk, b, j0 + r, kvh)[c] = from_f32<IO>(g.scale * dKf[r * ldf + c]);
    if (g.dv.p) row_of<IO>(g.dv, b, j0 + r, kvh)[c] = from_f32<IO>(dVf[r * ldf + c]);
  }
}

size_t dkv_smem(int DP) {
  const size_t ldb = DP + kPad16, ldf = DP + kPad32;
  return 2 * align128(2 * kBKb * ldb) + 2 * align128(2 * kBQ * ldb) + 2 * align128(4 * kBQ * (kBKb + kPad32)) +
         2 * align128(2 * kBQ * (kBKb + kPad16)) + 2 * align128(4 * kBKb * ldf) + align128(sizeof(RowStat) * kBQ);
}

FlashGeom make_flash_geom(const AttentionDims& d, const ops::AttentionSpec& spec, const Tensor& q, const Tensor& k,
                          const Tensor& v, const Tensor& stats, const char* op) {
  FlashGeom g;
  static_cast<AttnCallGeom&>(g) = attn_call_geom(d, spec, q, k, v, op);
  g.DP = int((d.dh + 15) / 16 * 16);
  g.stats = view3(stats);
  return g;
}

}  // namespace

// out [B,T,H,dh], stats [B,H,T] (optional) from q [B,T,H,dh], k/v [B,S,Hkv,dh].
void flash_attention_forward(CudaBackend& be, Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v,
                             const ops::AttentionSpec& spec, const AttentionDims& d) {
  const char* op = "attention_forward (flash)";
  if (d.B * d.H * d.T == 0) return;
  DeviceGuard guard(be.index());
  FlashGeom g = make_flash_geom(d, spec, q, k, v, stats, op);
  g.o = head_rows(out, op, "out");
  if (mma_fits({&q, &k, &v, &out})) return mma_forward(be, g);
  const dim3 grid(tiles(d.T, kBQ), unsigned(d.H), unsigned(d.B));
  if (q.dtype == DType::bf16) {
    launch(flash_forward_kernel<bf16>, grid, forward_smem(g.DP), be.stream(), g, op);
  } else {
    launch(flash_forward_kernel<float>, grid, forward_smem(g.DP), be.stream(), g, op);
  }
}

// d_q [B,T,H,dh], d_k/d_v [B,S,Hkv,dh] (each optional, written) from d_out, q, k, v, out, stats.
void flash_attention_backward(CudaBackend& be, Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k,
                              Tensor v, Tensor out, Tensor stats, const ops::AttentionSpec& spec,
                              const AttentionDims& d) {
  const char* op = "attention_backward (flash)";
  DeviceGuard guard(be.index());
  FlashGeom g = make_flash_geom(d, spec, q, k, v, stats, op);
  g.o = head_rows(out, op, "out");
  g.dout = head_rows(d_out, op, "d_out");
  g.dq = head_rows(d_q, op, "d_q");
  g.dk = head_rows(d_k, op, "d_k");
  g.dv = head_rows(d_v, op, "d_v");
  g.D = static_cast<float*>(
      be.scratch(CudaBackend::ScratchSlot::attention_fast, sizeof(float) * size_t(std::max<int64_t>(d.B * d.H * d.T, 1))));
  if (mma_fits({&q, &k, &v, &out, &d_out, &d_q, &d_k, &d_v}))
    return mma_backward(be, g, d_k.defined() || d_v.defined());
  const bool bf = q.dtype == DType::bf16;
  const dim3 grid_q(tiles(d.T, kBQ), unsigned(d.H), unsigned(d.B)),
      grid_k(tiles(d.S, kBKb), unsigned(d.Hkv), unsigned(d.B));
  if (d.B * d.H * d.T > 0)
    launch(bf ? flash_backward_dq_kernel<bf16> : flash_backward_dq_kernel<float>, grid_q, dq_smem(g.DP), be.stream(), g,
           "attention_backward (flash dq)");
  // Key rows are written even when no query sees them (T = 0 with lead keys: zeros).
  if ((d_k.defined() || d_v.defined()) && d.B * d.Hkv * d.S > 0)
    launch(bf ? flash_backward_dkv_kernel<bf16> : flash_backward_dkv_kernel<float>, grid_k, dkv_smem(g.DP),
           be.stream(), g, "attention_backward (flash dk, dv)");
}

}  // namespace sinklab::cuda
