// The flash kernel for bf16 tensors (the --precision bf16 step's), along FlashAttention-2 / FlashSigmoid
// lines: the sims cuDNN cannot express (sigmoid with any bias, elu+1, identity; norm one or sum), the three
// masks, lead keys, grouped-query heads. attention_flash.cu hands a call here when q, k, v (and out, d_out,
// d_q, d_k, d_v) are bf16 with 16-byte aligned rows and heads (mma_fits), else runs its WMMA kernels.
//
//   tiles     64 queries per block in 4 warps of 16 rows (forward, dQ), 64 keys per block in 4 warps of 16
//             (dK, dV); key tiles of 64 (forward) or 32 (backward); the head dim padded to D = 32, 64, 96 or
//             128 (a template parameter: every register array is indexed by compile-time constants, so
//             nothing goes to local memory; ptxas's report in bench/README.md)
//   loads     cp.async, 16 bytes a thread, straight from the bf16 views (no conversion; a chunk's row and
//             column come from D / 8, a compile-time divisor), double-buffered: tile t + 1 loads while tile t
//             computes; rows beyond the sequence and columns beyond dh are zero-filled by the copy itself
//   products  mma.sync m16n8k16 bf16 -> f32 with fragments from ldmatrix (.trans for the operands stored
//             [k][n]); S = Q K^T and dP = dO V^T stay in registers, and the accumulator fragments of S (and
//             dS) are the A fragments of P V (and dS K) after packing to bf16: no round trip through shared
//             memory
//   mask      only where a tile is not wholly visible (tile_visible: the diagonal and window-edge tiles, a
//             partial last tile); elsewhere no per-element test
//   norm one  no row state at all: the forward keeps no row sum, the backward no D_i = dO_i . o_i
//             (FlashSigmoid's saving); norm sum keeps one f32 row sum (4 lanes of a quad, shuffled at the end)
//   backward  (1) dQ per (b, h, 64 queries): D_i first (norm sum), S and dP per key tile, dS, dQ += dS K;
//             (2) dK, dV per (b, kv head, 64 keys) over the group's heads and the query tiles that see the
//             keys: S^T = K Q^T and dP^T = V dO^T, so P^T and dS^T come out as A fragments of
//             dV += P^T dO and dK += dS^T Q. Each output row is written by one block: no atomics, the same
//             bits on every run.
// The per-element math is attention_math.hpp's (attn_sim, attn_norm_term, attn_prob, attn_dscore), the
// stats the reference's row reduction R_i, as in attention_flash.cu. The sigmoid is attention_math.hpp's
// 1 / (1 + e^-x): 0.5 + 0.5 tanh(x / 2) with the device's tanh.approx (relative error 2^-11) would put an
// absolute error of ~2.4e-4 on sigmoid values near 0, i.e. ~50 % of a weight ~1/T under the paper's -log T
// bias at T = 2048, far beyond bf16's 2^-9: not accurate enough for the sink-free runs this kernel is for.
#include <cuda_bf16.h>

#include <algorithm>

#include "backend/attention_math.hpp"
#include "backend/cuda/attention_flash.cuh"
#include "backend/cuda/mma_ptx.hpp"

namespace sinklab::cuda::flash {

namespace {

constexpr int kRows = 64;    // queries (forward, dQ) or keys (dK, dV) per block, 16 per warp
constexpr int kColsF = 64;   // keys per tile, forward
constexpr int kColsB = 32;   // keys per tile, dQ
constexpr int kColsQ = 16;   // queries per tile, dK and dV (their two f32 accumulators hold D registers)
constexpr int kPad = 8;      // bf16 row padding: rows of D + 8 (16 bytes) keep ldmatrix free of bank conflicts

// This lane's place in its warp's mma fragments: group g = lane / 4 and t = lane % 4.
struct Lane {
  int warp, lane, g, t;
};
__device__ Lane lane_of() {
  Lane l;
  l.warp = int(threadIdx.x) / 32;
  l.lane = int(threadIdx.x) % 32;
  l.g = l.lane / 4;
  l.t = l.lane % 4;
  return l;
}

// ROWS x D tile of a [B, L, heads, dh] bf16 tensor into shared memory (row stride D + kPad) by cp.async: rows
// [row0, row0 + valid) of head `head`, zeros beyond them and beyond dh.
template <int D, int ROWS>
__device__ void load_rows(bf16* dst, const View3& src, int64_t b, int64_t row0, int64_t valid, int64_t head,
                          int64_t dh) {
  constexpr int kChunks = D / 8;
  const bf16* base = reinterpret_cast<const bf16*>(src.p);
  for (int e = threadIdx.x; e < ROWS * kChunks; e += kThreadsFlash) {
    const int r = e / kChunks, c = e % kChunks;
    const bool real = r < valid && c * 8 < dh;
    const bf16* from = real ? row_of<bf16>(src, b, row0 + r, head) + c * 8 : base;
    ptx::cp_async_16(dst + r * (D + kPad) + c * 8, from, real ? 16 : 0);
  }
}

// Fragments from a row-major tile (row stride LD): the A fragment of rows r0.. and columns k0.. (16 x 16);
// the B fragments of two n-tiles n0.. (16 columns) over k0.. from a tile stored [n][k] (nk) or [k][n] (kn):
// b[0], b[1] the first n-tile's, b[2], b[3] the second's.
template <int LD>
__device__ void load_a(uint32_t (&a)[4], const bf16* tile, const Lane& l, int r0, int k0) {
  const int m = l.lane / 8;
  ptx::ldmatrix_x4(a, tile + (r0 + (m % 2) * 8 + l.lane % 8) * LD + k0 + (m / 2) * 8);
}
template <int LD>
__device__ void load_b_nk(uint32_t (&b)[4], const bf16* tile, const Lane& l, int n0, int k0) {
  const int m = l.lane / 8;
  ptx::ldmatrix_x4(b, tile + (n0 + (m / 2) * 8 + l.lane % 8) * LD + k0 + (m % 2) * 8);
}
template <int LD>
__device__ void load_b_kn(uint32_t (&b)[4], const bf16* tile, const Lane& l, int k0, int n0) {
  const int m = l.lane / 8;
  ptx::ldmatrix_x4_trans(b, tile + (k0 + (m % 2) * 8 + l.lane % 8) * LD + n0 + (m / 2) * 8);
}

// acc[2 np], acc[2 np + 1] += a . (the two n-tiles of b).
__device__ void mma_pair(float (&acc0)[4], float (&acc1)[4], const uint32_t (&a)[4], const uint32_t (&b)[4]) {
  const uint32_t b0[2] = {b[0], b[1]}, b1[2] = {b[2], b[3]};
  ptx::mma_bf16_16816(acc0, a, b0, acc0);
  ptx::mma_bf16_16816(acc1, a, b1, acc1);
}

// The A fragment (16 x 16, k = 16 kk..) made of the accumulator fragments of n-tiles 2 kk and 2 kk + 1.
__device__ void acc_as_a(uint32_t (&a)[4], const float (*acc)[4], int kk) {
  a[0] = ptx::pack_bf16x2(acc[2 * kk][0], acc[2 * kk][1]);
  a[1] = ptx::pack_bf16x2(acc[2 * kk][2], acc[2 * kk][3]);
  a[2] = ptx::pack_bf16x2(acc[2 * kk + 1][0], acc[2 * kk + 1][1]);
  a[3] = ptx::pack_bf16x2(acc[2 * kk + 1][2], acc[2 * kk + 1][3]);
}

// acc (16 x 8 NT) += A (16 x D, from registers) . B^T, B stored [n][k] in shared memory (n = 8 NT rows).
template <int D, int NT>
__device__ void mma_abt_regs(float (&acc)[NT][4], const uint32_t (&a)[D / 16][4], const bf16* b, const Lane& l) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk)
#pragma unroll
    for (int np = 0; np < NT / 2; ++np) {
      uint32_t bf[4];
      load_b_nk<D + kPad>(bf, b, l, np * 16, kk * 16);
      mma_pair(acc[2 * np], acc[2 * np + 1], a[kk], bf);
    }
}

// acc (16 x D) += A (16 x 8 NT, the accumulator fragments p) . B, B stored [k][n] in shared memory (k = 8 NT
// rows, n = D columns).
template <int D, int NT>
__device__ void mma_pb(float (&acc)[D / 8][4], const float (&p)[NT][4], const bf16* b, const Lane& l) {
#pragma unroll
  for (int kk = 0; kk < NT / 2; ++kk) {
    uint32_t a[4];
    acc_as_a(a, p, kk);
#pragma unroll
    for (int dp = 0; dp < D / 16; ++dp) {
      uint32_t bf[4];
      load_b_kn<D + kPad>(bf, b, l, kk * 16, dp * 16);
      mma_pair(acc[2 * dp], acc[2 * dp + 1], a, bf);
    }
  }
}

template <int D>
__device__ void load_a_all(uint32_t (&a)[D / 16][4], const bf16* tile, const Lane& l, int r0) {
#pragma unroll
  for (int kk = 0; kk < D / 16; ++kk) load_a<D + kPad>(a[kk], tile, l, r0, kk * 16);
}

// Writes this warp's 16 rows (r0.. of the block's tile, rows [row0, row0 + valid) of the tensor) of acc * f
// (per row: f[0] for row g, f[1] for row g + 8) as bf16 pairs into head `head` of dst.
template <int D>
__device__ void store_rows(const View3& dst, const float (&acc)[D / 8][4], const Lane& l, int64_t b, int64_t row0,
                           int64_t valid, int64_t head, int64_t dh, int r0, const float (&f)[2]) {
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    const int r = r0 + l.g + 8 * x;
    if (r >= valid) continue;
    bf16* row = row_of<bf16>(dst, b, row0 + r, head);
#pragma unroll
    for (int dt = 0; dt < D / 8; ++dt) {
      const int c = dt * 8 + 2 * l.t;
      if (c < dh)
        *reinterpret_cast<uint32_t*>(row + c) = ptx::pack_bf16x2(acc[dt][2 * x] * f[x], acc[dt][2 * x + 1] * f[x]);
    }
  }
}

// The double-buffered pipeline's step at tile t of n: tile t + 1's copies issued (load(t + 1), one group),
// then this thread's copies up to tile t waited for, then a barrier so that every thread's are in.
template <class Load>
__device__ void pipeline_step(int64_t t, int64_t n, Load&& load) {
  if (t + 1 < n) {
    load(t + 1);
    ptx::cp_async_wait<1>();
  } else {
    ptx::cp_async_wait<0>();
  }
  __syncthreads();
}

// A block's query tile: rows [i0, i0 + nq) of head h in batch b (key/value head kvh), this warp's rows r0..
struct QueryTile {
  int64_t b, h, kvh, i0, nq;
  int r0;
};
__device__ QueryTile query_tile(const FlashGeom& g, const Lane& l) {
  QueryTile q;
  q.b = blockIdx.z;
  q.h = blockIdx.y;
  q.kvh = q.h / g.group;
  q.i0 = int64_t(blockIdx.x) * kRows;
  q.nq = g.T - q.i0 < kRows ? g.T - q.i0 : kRows;
  q.r0 = l.warp * 16;
  return q;
}

// ---- forward --------------------------------------------------------------------------------------------

template <int D>
__global__ void __launch_bounds__(kThreadsFlash) mma_forward_kernel(FlashGeom g) {
  constexpr int LD = D + kPad;
  extern __shared__ __align__(128) char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);  // [kRows][LD]
  bf16* Ks = Qs + kRows * LD;                // [2][kColsF][LD]
  bf16* Vs = Ks + 2 * kColsF * LD;           // [2][kColsF][LD]
  const Lane l = lane_of();
  const QueryTile qt = query_tile(g, l);
  const int64_t b = qt.b, h = qt.h, i0 = qt.i0, kvh = qt.kvh, nq = qt.nq;
  const int r0 = qt.r0;
  const math::AttnConfig& cfg = g.cfg;
  const KeyRange keys = key_range(g, i0, i0 + nq);
  const int64_t n_tiles = keys.tiles(kColsF);
  auto load_kv = [&](int64_t t) {
    int64_t j0, nk;
    keys.tile(t, kColsF, &j0, &nk);
    load_rows<D, kColsF>(Ks + (t % 2) * kColsF * LD, g.k, b, j0, nk, kvh, g.dh);
    load_rows<D, kColsF>(Vs + (t % 2) * kColsF * LD, g.v, b, j0, nk, kvh, g.dh);
    ptx::cp_async_commit();
  };
  load_rows<D, kRows>(Qs, g.q, b, i0, nq, h, g.dh);
  ptx::cp_async_commit();
  if (n_tiles > 0) load_kv(0);
  float o[D / 8][4] = {}, rs[2] = {0.0f, 0.0f};
  uint32_t qf[D / 16][4];
  for (int64_t t = 0; t < n_tiles; ++t) {
    pipeline_step(t, n_tiles, load_kv);  // Q and tile t are in
    if (t == 0) load_a_all<D>(qf, Qs, l, r0);
    int64_t j0, nk;
    keys.tile(t, kColsF, &j0, &nk);
    const bf16* Kt = Ks + (t % 2) * kColsF * LD;
    const bf16* Vt = Vs + (t % 2) * kColsF * LD;
    float s[kColsF / 8][4] = {};
    mma_abt_regs<D, kColsF / 8>(s, qf, Kt, l);
    const bool whole = nk == kColsF && tile_visible(cfg, i0, i0 + nq, j0, nk, g.S);
#pragma unroll
    for (int nt = 0; nt < kColsF / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = i0 + r0 + l.g + 8 * (e / 2);
        const int c = nt * 8 + 2 * l.t + e % 2;
        float p = 0.0f;
        if (whole || (i < g.T && c < nk && math::attn_visible(cfg, i, j0 + c))) {
          const float w = math::attn_sim(cfg, g.scale * s[nt][e], 0.0f);
          if (cfg.norm != ops::AttnNorm::one) rs[e / 2] += math::attn_norm_term(cfg, w);
          p = math::attn_numer(cfg, w);
        }
        s[nt][e] = p;
      }
    mma_pb<D, kColsF / 8>(o, s, Vt, l);
    __syncthreads();  // tile t's buffer is reloaded at t + 1 (tile t + 2)
  }
  float inv[2];
#pragma unroll
  for (int x = 0; x < 2; ++x) {  // the row sums of the quad's four lanes (each held 2 of every 8 keys)
    rs[x] += __shfl_xor_sync(0xffffffffu, rs[x], 1);
    rs[x] += __shfl_xor_sync(0xffffffffu, rs[x], 2);
    inv[x] = math::attn_inv_norm(math::attn_norm_finish(cfg, rs[x]));
  }
  store_rows<D>(g.o, o, l, b, i0, nq, h, g.dh, r0, inv);
  if (g.stats.p && l.t == 0)
    for (int x = 0; x < 2; ++x)
      if (r0 + l.g + 8 * x < nq) *g.stats.at(b, h, i0 + r0 + l.g + 8 * x) = math::attn_stat(cfg, 0.0f, rs[x]);
}

template <int D>
size_t forward_smem() {
  return size_t(kRows + 4 * kColsF) * (D + kPad) * sizeof(bf16);
}

// ---- backward (1): D_i and dQ per (b, h, 64 queries) ----------------------------------------------------

template <int D>
__global__ void __launch_bounds__(kThreadsFlash) mma_dq_kernel(FlashGeom g) {
  constexpr int LD = D + kPad;
  extern __shared__ __align__(128) char smem[];
  bf16* Qs = reinterpret_cast<bf16*>(smem);  // [kRows][LD]
  bf16* dOs = Qs + kRows * LD;               // [kRows][LD]
  bf16* Ks = dOs + kRows * LD;               // [2][kColsB][LD]
  bf16* Vs = Ks + 2 * kColsB * LD;           // [2][kColsB][LD]
  const Lane l = lane_of();
  const QueryTile qt = query_tile(g, l);
  const int64_t b = qt.b, h = qt.h, i0 = qt.i0, kvh = qt.kvh, nq = qt.nq;
  const int r0 = qt.r0;
  const math::AttnConfig& cfg = g.cfg;
  const KeyRange keys = key_range(g, i0, i0 + nq);
  const int64_t n_tiles = keys.tiles(kColsB);
  auto load_kv = [&](int64_t t) {
    int64_t j0, nk;
    keys.tile(t, kColsB, &j0, &nk);
    load_rows<D, kColsB>(Ks + (t % 2) * kColsB * LD, g.k, b, j0, nk, kvh, g.dh);
    load_rows<D, kColsB>(Vs + (t % 2) * kColsB * LD, g.v, b, j0, nk, kvh, g.dh);
    ptx::cp_async_commit();
  };
  load_rows<D, kRows>(Qs, g.q, b, i0, nq, h, g.dh);
  load_rows<D, kRows>(dOs, g.dout, b, i0, nq, h, g.dh);
  ptx::cp_async_commit();
  if (n_tiles > 0) load_kv(0);
  // D_i = dO_i . o_i (f32 sums of the bf16 rows), the warp's own rows, published for kernel (2); norm one
  // needs none.
  if (cfg.norm != ops::AttnNorm::one) {
    for (int r = r0; r < r0 + 16 && r < nq; ++r) {
      const bf16* o = row_of<bf16>(g.o, b, i0 + r, h);
      const bf16* go = row_of<bf16>(g.dout, b, i0 + r, h);
      float d = 0.0f;
      for (int64_t c = l.lane; c < g.dh; c += 32) d = fmaf(__bfloat162float(o[c]), __bfloat162float(go[c]), d);
      for (int off = 16; off > 0; off /= 2) d += __shfl_xor_sync(0xffffffffu, d, off);
      if (l.lane == 0) g.D[(b * g.H + h) * g.T + i0 + r] = d;
    }
    __syncwarp();  // (the warp's own global writes, read back below by its lanes)
  }
  RowStat rst[2];
#pragma unroll
  for (int x = 0; x < 2; ++x) {
    const int r = r0 + l.g + 8 * x;
    rst[x] = r < nq ? row_stat(g, b, h, i0 + r) : RowStat{0.0f, 0.0f, 0.0f, 0.0f};
  }
  float dq[D / 8][4] = {};
  uint32_t qf[D / 16][4], dof[D / 16][4];
  for (int64_t t = 0; t < n_tiles; ++t) {
    pipeline_step(t, n_tiles, load_kv);
    if (t == 0) {
      load_a_all<D>(qf, Qs, l, r0);
      load_a_all<D>(dof, dOs, l, r0);
    }
    int64_t j0, nk;
    keys.tile(t, kColsB, &j0, &nk);
    const bf16* Kt = Ks + (t % 2) * kColsB * LD;
    const bf16* Vt = Vs + (t % 2) * kColsB * LD;
    float s[kColsB / 8][4] = {}, dp[kColsB / 8][4] = {};
    mma_abt_regs<D, kColsB / 8>(s, qf, Kt, l);
    mma_abt_regs<D, kColsB / 8>(dp, dof, Vt, l);
    const bool whole = nk == kColsB && tile_visible(cfg, i0, i0 + nq, j0, nk, g.S);
#pragma unroll
    for (int nt = 0; nt < kColsB / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t i = i0 + r0 + l.g + 8 * (e / 2);
        const int c = nt * 8 + 2 * l.t + e % 2;
        float p = 0.0f, ds = 0.0f;
        if (whole || (i < g.T && c < nk && math::attn_visible(cfg, i, j0 + c)))
          pair_p_ds(cfg, g.scale * s[nt][e], dp[nt][e], rst[e / 2], &p, &ds);
        s[nt][e] = ds;
      }
    mma_pb<D, kColsB / 8>(dq, s, Kt, l);
    __syncthreads();
  }
  if (!g.dq.p) return;
  const float f[2] = {g.scale, g.scale};
  store_rows<D>(g.dq, dq, l, b, i0, nq, h, g.dh, r0, f);
}

template <int D>
size_t dq_smem() {
  return size_t(2 * kRows + 4 * kColsB) * (D + kPad) * sizeof(bf16);
}

// ---- backward (2): dK, dV per (b, kv head, 64 keys) -----------------------------------------------------

// The query tiles of kernel (2), over the group's heads: tile u is head hh = u / per_head, queries from
// first + (u % per_head) kColsQ.
struct QueryTiles {
  int64_t first = 0, per_head = 0;
};

// (__launch_bounds__ with its minimum of 1 block per SM: without it ptxas capped the D = 32 and 64 instances at
// 128 and 168 registers and spilled 4 to 8 bytes.)
template <int D>
__global__ void __launch_bounds__(kThreadsFlash, 1) mma_dkv_kernel(FlashGeom g) {
  constexpr int LD = D + kPad;
  extern __shared__ __align__(128) char smem[];
  bf16* Ks = reinterpret_cast<bf16*>(smem);  // [kRows][LD]
  bf16* Vs = Ks + kRows * LD;                // [kRows][LD]
  bf16* Qs = Vs + kRows * LD;                // [2][kColsQ][LD]
  bf16* dOs = Qs + 2 * kColsQ * LD;          // [2][kColsQ][LD]
  RowStat* rst = reinterpret_cast<RowStat*>(dOs + 2 * kColsQ * LD);  // [2][kColsQ]
  const Lane l = lane_of();
  const int64_t b = blockIdx.z, kvh = blockIdx.y, j0 = int64_t(blockIdx.x) * kRows;
  const int64_t nk = g.S - j0 < kRows ? g.S - j0 : kRows;
  const math::AttnConfig& cfg = g.cfg;
  const int r0 = l.warp * 16;
  // The queries that may see keys [j0, j0 + nk): the union of the keys' ranges (a lead key is seen by every
  // query, the positional keys after it by a window's worth only: the ends are not monotone across them).
  int64_t qb = g.T, qe = 0;
  for (int64_t j = j0; j < j0 + nk; ++j) {
    const int64_t b_j = math::attn_query_begin(cfg, j), e_j = math::attn_query_end(cfg, j, g.T);
    qb = b_j < qb ? b_j : qb;
    qe = e_j > qe ? e_j : qe;
  }
  QueryTiles qt;
  qt.first = qb - qb % kColsQ;
  qt.per_head = qe > qt.first ? (qe - qt.first + kColsQ - 1) / kColsQ : 0;
  const int64_t n_tiles = qt.per_head * g.group;
  auto load_q = [&](int64_t u) {
    const int64_t h = kvh * g.group + u / qt.per_head, i0 = qt.first + (u % qt.per_head) * kColsQ;
    const int64_t nq = g.T - i0 < kColsQ ? g.T - i0 : kColsQ;
    load_rows<D, kColsQ>(Qs + (u % 2) * kColsQ * LD, g.q, b, i0, nq, h, g.dh);
    load_rows<D, kColsQ>(dOs + (u % 2) * kColsQ * LD, g.dout, b, i0, nq, h, g.dh);
    ptx::cp_async_commit();
    for (int r = threadIdx.x; r < kColsQ; r += kThreadsFlash)  // rows beyond T: P = dS = 0 (1/Z = 0)
      rst[(u % 2) * kColsQ + r] = r < nq ? row_stat(g, b, h, i0 + r) : RowStat{0.0f, 0.0f, 0.0f, 0.0f};
  };
  load_rows<D, kRows>(Ks, g.k, b, j0, nk, kvh, g.dh);
  load_rows<D, kRows>(Vs, g.v, b, j0, nk, kvh, g.dh);
  ptx::cp_async_commit();
  if (n_tiles > 0) load_q(0);
  float dk[D / 8][4] = {}, dv[D / 8][4] = {};
  for (int64_t u = 0; u < n_tiles; ++u) {
    pipeline_step(u, n_tiles, load_q);
    const int64_t i0 = qt.first + (u % qt.per_head) * kColsQ;
    const int64_t nq = g.T - i0 < kColsQ ? g.T - i0 : kColsQ;
    const bf16* Qt = Qs + (u % 2) * kColsQ * LD;
    const bf16* dOt = dOs + (u % 2) * kColsQ * LD;
    const RowStat* rt = rst + (u % 2) * kColsQ;
    // S^T (this warp's 16 keys x 32 queries) = K Q^T, dP^T = V dO^T.
    float st[kColsQ / 8][4] = {}, dpt[kColsQ / 8][4] = {};
#pragma unroll
    for (int kk = 0; kk < D / 16; ++kk) {
      uint32_t ka[4], va[4];
      load_a<LD>(ka, Ks, l, r0, kk * 16);
      load_a<LD>(va, Vs, l, r0, kk * 16);
#pragma unroll
      for (int np = 0; np < kColsQ / 16; ++np) {
        uint32_t bf[4];
        load_b_nk<LD>(bf, Qt, l, np * 16, kk * 16);
        mma_pair(st[2 * np], st[2 * np + 1], ka, bf);
        load_b_nk<LD>(bf, dOt, l, np * 16, kk * 16);
        mma_pair(dpt[2 * np], dpt[2 * np + 1], va, bf);
      }
    }
    const bool whole = nq == kColsQ && nk == kRows && tile_visible(cfg, i0, i0 + nq, j0, nk, g.S);
#pragma unroll
    for (int nt = 0; nt < kColsQ / 8; ++nt)
#pragma unroll
      for (int e = 0; e < 4; ++e) {
        const int64_t j = j0 + r0 + l.g + 8 * (e / 2);
        const int c = nt * 8 + 2 * l.t + e % 2;
        float p = 0.0f, ds = 0.0f;
        if (whole || (c < nq && j < j0 + nk && math::attn_visible(cfg, i0 + c, j)))
          pair_p_ds(cfg, g.scale * st[nt][e], dpt[nt][e], rt[c], &p, &ds);
        st[nt][e] = p;
        dpt[nt][e] = ds;
      }
    mma_pb<D, kColsQ / 8>(dv, st, dOt, l);
    mma_pb<D, kColsQ / 8>(dk, dpt, Qt, l);
    __syncthreads();
  }
  const float fk[2] = {g.scale, g.scale}, fv[2] = {1.0f, 1.0f};
  if (g.dk.p) store_rows<D>(g.dk, dk, l, b, j0, nk, kvh, g.dh, r0, fk);
  if (g.dv.p) store_rows<D>(g.dv, dv, l, b, j0, nk, kvh, g.dh, r0, fv);
}

template <int D>
size_t dkv_smem() {
  return size_t(2 * kRows + 4 * kColsQ) * (D + kPad) * sizeof(bf16) + 2 * kColsQ * sizeof(RowStat);
}

// The call's padded head dim as a template argument.
template <class F>
void with_head_dim(int64_t dh, F&& f) {
  if (dh <= 32) return f(std::integral_constant<int, 32>{});
  if (dh <= 64) return f(std::integral_constant<int, 64>{});
  if (dh <= 96) return f(std::integral_constant<int, 96>{});
  f(std::integral_constant<int, 128>{});
}

}  // namespace

bool mma_fits(std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (!t->defined()) continue;
    if (t->dtype != DType::bf16 || reinterpret_cast<uintptr_t>(t->data) % 16 != 0) return false;
    for (int d = 0; d < 3; ++d)
      if (t->stride[d] % 8 != 0) return false;
  }
  return true;
}

void mma_forward(CudaBackend& be, const FlashGeom& g) {
  const dim3 grid(tiles(g.T, kRows), unsigned(g.H), unsigned(g.B));
  with_head_dim(g.dh, [&](auto d) {
    constexpr int D = decltype(d)::value;
    launch(mma_forward_kernel<D>, grid, forward_smem<D>(), be.stream(), g, "attention_forward (flash mma)");
  });
}

void mma_backward(CudaBackend& be, const FlashGeom& g, bool key_grads) {
  with_head_dim(g.dh, [&](auto d) {
    constexpr int D = decltype(d)::value;
    if (g.B * g.H * g.T > 0)
      launch(mma_dq_kernel<D>, dim3(tiles(g.T, kRows), unsigned(g.H), unsigned(g.B)), dq_smem<D>(), be.stream(), g,
             "attention_backward (flash mma dq)");
    // Key rows are written even when no query sees them (T = 0 with lead keys: zeros).
    if (key_grads && g.B * g.Hkv * g.S > 0)
      launch(mma_dkv_kernel<D>, dim3(tiles(g.S, kRows), unsigned(g.Hkv), unsigned(g.B)), dkv_smem<D>(), be.stream(),
             g, "attention_backward (flash mma dk, dv)");
  });
}

}  // namespace sinklab::cuda::flash
