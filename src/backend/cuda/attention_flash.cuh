// What the two flash kernels share (attention_flash.cu: WMMA tiles for f32 tensors and unaligned bf16 views;
// attention_flash_mma.cu: mma.sync, ldmatrix and cp.async for bf16 tensors with 16-byte aligned rows): the
// call's geometry, typed rows, the key tiles a query tile sees, the backward's per-row statistics, launches.
// Device code for the .cu files that include it; every function is inline (two translation units).
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <type_traits>

#include "backend/attention_math.hpp"
#include "backend/cuda/attention_kernels.hpp"
#include "backend/cuda/cuda_common.hpp"

namespace sinklab::cuda::flash {

using bf16 = __nv_bfloat16;

constexpr int kWarps = 4, kThreadsFlash = 32 * kWarps;

struct FlashGeom : AttnCallGeom {
  int DP = 0;  // dh rounded up to 16 (the WMMA kernels)
  View3 o, dout, dq, dk, dv;  // [B, L, heads, dh] f32 or bf16, contiguous last dim: row (b, l, h)
  View3 stats;                // [B, H, T] f32: element (b, h, i)
  float* D = nullptr;         // backward: [B, H, T] contiguous, dO_i . o_i (not for norm one)
};

// Row (b, l, h) of a [B, L, heads, dh] tensor of element type IO (f32 or bf16; View3 holds its strides in
// elements).
template <class IO>
__device__ inline IO* row_of(const View3& v, int64_t b, int64_t l, int64_t h) {
  return reinterpret_cast<IO*>(v.p) + b * v.s0 + l * v.s1 + h * v.s2;
}
__device__ inline float to_f32(float x) { return x; }
__device__ inline float to_f32(bf16 x) { return __bfloat162float(x); }
__device__ inline bf16 to_bf16(float x) { return __float2bfloat16(x); }
__device__ inline bf16 to_bf16(bf16 x) { return x; }
template <class IO>
__device__ inline IO from_f32(float x) {
  if constexpr (std::is_same_v<IO, float>) {
    return x;
  } else {
    return __float2bfloat16(x);
  }
}

// The keys a query tile [i0, i1) may see: the lead keys [0, L), then [kb, ke) (attention_math.hpp's ranges
// are monotone in i, so the first and last rows bound the tile's). Tiles never mix the two segments.
struct KeyRange {
  int64_t L = 0, kb = 0, ke = 0;
  __device__ int64_t tiles(int bk) const { return (L + bk - 1) / bk + (ke > kb ? (ke - kb + bk - 1) / bk : 0); }
  // Tile t: its first key and how many keys it holds.
  __device__ void tile(int64_t t, int bk, int64_t* j0, int64_t* n) const {
    const int64_t lead_tiles = (L + bk - 1) / bk;
    if (t < lead_tiles) {
      *j0 = t * bk;
      *n = L - *j0 < bk ? L - *j0 : bk;
    } else {
      *j0 = kb + (t - lead_tiles) * bk;
      *n = ke - *j0 < bk ? ke - *j0 : bk;
    }
  }
};
__device__ inline KeyRange key_range(const FlashGeom& g, int64_t i0, int64_t i1) {
  KeyRange r;
  r.L = g.cfg.lead_keys;
  r.kb = math::attn_key_begin(g.cfg, i0, g.S);
  r.ke = math::attn_key_end(g.cfg, i1 - 1, g.S);
  return r;
}

// Whether query rows [i0, i1) see every key of [j0, j0 + n) (keys of one segment): then a tile needs no mask.
// The masks' visible keys of row i are exactly the lead keys and [attn_key_begin, attn_key_end), both ends
// non-decreasing in i.
__device__ inline bool tile_visible(const math::AttnConfig& c, int64_t i0, int64_t i1, int64_t j0, int64_t n,
                                    int64_t S) {
  if (j0 + n <= c.lead_keys) return true;
  return j0 >= math::attn_key_begin(c, i1 - 1, S) && j0 + n <= math::attn_key_end(c, i0, S);
}

// P_ij and dS_ij (before the scale) of a visible pair from S, dP and the row's statistics.
struct RowStat {
  float stat, inv_z, row_sum, D;
};
__device__ inline void pair_p_ds(const math::AttnConfig& cfg, float s, float dp, const RowStat& rs, float* p,
                                 float* ds) {
  *p = math::attn_prob(cfg, s, rs.stat, rs.inv_z);
  *ds = math::attn_dscore(cfg, s, *p, rs.stat, rs.inv_z, rs.row_sum, dp, rs.D);
}

// Row i's statistics (D only where the norm reads it: not for norm one, whose dS has no D term).
__device__ inline RowStat row_stat(const FlashGeom& g, int64_t b, int64_t h, int64_t i) {
  RowStat rs;
  rs.stat = *g.stats.at(b, h, i);
  rs.inv_z = math::attn_row_inv_norm(g.cfg, rs.stat);
  rs.row_sum = math::attn_row_sum(g.cfg, rs.stat);
  rs.D = g.cfg.norm == ops::AttnNorm::one ? 0.0f : g.D[(b * g.H + h) * g.T + i];
  return rs;
}

template <class Kernel>
inline void launch(Kernel kernel, dim3 grid, size_t smem, cudaStream_t s, const FlashGeom& g, const char* what) {
  CUDA_CHECK(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, int(smem)));
  kernel<<<grid, kThreadsFlash, smem, s>>>(g);
  CUDA_CHECK_LAUNCH(what);
}

inline unsigned tiles(int64_t n, int64_t per) { return unsigned((n + per - 1) / per); }

// attention_flash_mma.cu. Whether the mma kernels take the call's bf16 tensors (16-byte aligned rows and
// heads: cp.async moves 16 bytes); the kernels for out, stats (forward) and d_q, d_k, d_v (backward; D first
// unless norm one).
bool mma_fits(std::initializer_list<const Tensor*> tensors);
void mma_forward(CudaBackend& be, const FlashGeom& g);
void mma_backward(CudaBackend& be, const FlashGeom& g, bool key_grads);

}  // namespace sinklab::cuda::flash
