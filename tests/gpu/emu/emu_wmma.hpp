// WMMA (mma.h) under the CPU emulation (cuda_emu.hpp): m16n16k16 bf16 x bf16 -> f32, the subset the
// flash kernel uses. A fragment holds its whole 16 x 16 tile in every lane; each *_sync call first waits
// for the warp's lanes (CUDA: "waits until all warp lanes have arrived"). Accumulator elements are owned by
// lanes (element e by lane e % 32): mma_sync computes, and store_matrix_sync writes, a lane's own elements
// only, so a missing __syncwarp between a store and other lanes' reads shows, and the products cost one
// tile per warp, not per lane. Checked as the device requires: the pointer 256-bit aligned, ldm a multiple
// of 16 bytes; sums in f32, products of bf16 exact in f32 (the device's order of the k sum may differ).
#pragma once

#include <type_traits>

#include "cuda_emu.hpp"

namespace nvcuda::wmma {

struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };

template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  static_assert(M == 16 && N == 16 && K == 16, "the emulation has m16n16k16 only");
  static constexpr int num_elements = 256;
  float x[256];
};

namespace detail {
inline void check_operand(const void* p, unsigned ldm, size_t elem_bytes, const char* what) {
  if (reinterpret_cast<uintptr_t>(p) % 32 != 0)
    emu::kernel_fault("%s: pointer %p is not 256-bit aligned (WMMA requires it)", what, p);
  if ((size_t(ldm) * elem_bytes) % 16 != 0)
    emu::kernel_fault("%s: ldm %u is not a multiple of 16 bytes (WMMA requires it)", what, ldm);
}
inline bool owns(int e) { return unsigned(e) % 32 == emu::lane_id(); }
}  // namespace detail

template <class Use, int M, int N, int K, class T, class L>
void fill_fragment(fragment<Use, M, N, K, T, L>& f, float v) {
  for (float& e : f.x) e = v;
}

// matrix_a / matrix_b: element (r, c) of the 16 x 16 operand ((m, k) of A, (k, n) of B) at p[r * ldm + c]
// (row_major) or p[c * ldm + r] (col_major).
template <class Use, int M, int N, int K, class L>
void load_matrix_sync(fragment<Use, M, N, K, __nv_bfloat16, L>& f, const __nv_bfloat16* p, unsigned ldm) {
  emu::sync_warp();
  detail::check_operand(p, ldm, 2, "wmma::load_matrix_sync");
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = __bfloat162float(std::is_same_v<L, row_major> ? p[r * ldm + c] : p[c * ldm + r]);
}

template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ldm, layout_t layout) {
  emu::sync_warp();
  detail::check_operand(p, ldm, 4, "wmma::load_matrix_sync");
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r];
}

template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ldm, layout_t layout) {
  emu::sync_warp();
  detail::check_operand(p, ldm, 4, "wmma::store_matrix_sync");
  for (int e = 0; e < 256; ++e) {
    if (!detail::owns(e)) continue;
    const int r = e / 16, c = e % 16;
    (layout == mem_row_major ? p[r * ldm + c] : p[c * ldm + r]) = f.x[e];
  }
}

template <int M, int N, int K, class LA, class LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, __nv_bfloat16, LA>& a,
              const fragment<matrix_b, M, N, K, __nv_bfloat16, LB>& b, const fragment<accumulator, M, N, K, float>& c) {
  emu::sync_warp();
  for (int e = 0; e < 256; ++e) {
    if (!detail::owns(e)) continue;
    const int r = e / 16, n = e % 16;
    float s = c.x[e];
    for (int k = 0; k < 16; ++k) s += a.x[r * 16 + k] * b.x[k * 16 + n];
    d.x[e] = s;
  }
}

}  // namespace nvcuda::wmma
