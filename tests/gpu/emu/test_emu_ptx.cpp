// The emulation's model of the warp-level PTX the flash kernel uses (tests/gpu/emu/emu_ptx.hpp, shadowing
// src/backend/cuda/mma_ptx.hpp) against hand-built cases of the PTX ISA's operand layouts: mma.sync m16n8k16
// (bf16 in, f32 accumulate), ldmatrix .x4 with and without .trans, cp.async with its commit and wait groups.
// Each also shows the mistake it is there to catch: a fragment packed in another layout computes another
// product, a read before the wait sees poison.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <vector>

#include "backend/cuda/mma_ptx.hpp"
#include "cuda_emu.hpp"

namespace {

namespace ptx = sinklab::cuda::ptx;

// Small integers: exact in bf16 and in the f32 sums.
float a_val(int r, int k) { return float((r * 3 + k * 5) % 7 - 3); }
float b_val(int k, int n) { return float((k * 2 + n * 7) % 5 - 2); }
float c_val(int r, int n) { return float(r - n); }

// One warp: every lane packs A (16 x 16), B (16 x 8) and C from the functions above in the ISA's layouts
// (or, with `swap`, A's registers 1 and 2 exchanged: rows g + 8 and columns 8.. mixed up), runs the mma and
// writes its D elements into d[16 * 8] by the C layout.
void mma_kernel(float* d, bool swap) {
  const int lane = int(threadIdx.x), g = lane / 4, t = lane % 4;
  uint32_t a[4], b[2];
  float c[4], out[4];
  for (int i = 0; i < 4; ++i) {
    const int r = g + 8 * (i % 2), k = 2 * t + 8 * (i / 2);
    a[i] = ptx::pack_bf16x2(a_val(r, k), a_val(r, k + 1));
  }
  if (swap) std::swap(a[1], a[2]);
  for (int i = 0; i < 2; ++i) b[i] = ptx::pack_bf16x2(b_val(2 * t + 8 * i, g), b_val(2 * t + 8 * i + 1, g));
  for (int e = 0; e < 4; ++e) c[e] = c_val(g + 8 * (e / 2), 2 * t + e % 2);
  ptx::mma_bf16_16816(out, a, b, c);
  for (int e = 0; e < 4; ++e) d[(g + 8 * (e / 2)) * 8 + 2 * t + e % 2] = out[e];
}

TEST(EmuPtx, MmaM16n8k16ComputesTheProductOfThePtxLayouts) {
  float* d = nullptr;
  ASSERT_EQ(cudaMalloc(&d, sizeof(float) * 128), cudaSuccess);
  std::vector<float> want(128);
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 8; ++n) {
      float s = c_val(r, n);
      for (int k = 0; k < 16; ++k) s += a_val(r, k) * b_val(k, n);
      want[size_t(r * 8 + n)] = s;
    }
  emu::launch("mma", nullptr, [&] { mma_kernel(d, false); }, 1, 32);
  for (int i = 0; i < 128; ++i) EXPECT_EQ(d[i], want[size_t(i)]) << "element " << i;
  emu::launch("mma_swapped", nullptr, [&] { mma_kernel(d, true); }, 1, 32);
  int differ = 0;
  for (int i = 0; i < 128; ++i) differ += d[i] != want[size_t(i)];
  EXPECT_GT(differ, 64) << "a fragment in the wrong layout went unnoticed";
  // The instruction needs the whole warp.
  EXPECT_THROW(emu::launch("mma_partial", nullptr, [&] { mma_kernel(d, false); }, 1, 16), std::runtime_error);
  cudaFree(d);
}

// A 16 x 16 bf16 matrix M[r][c] = 16 r + c in shared memory; lane l names row l % 8 of matrix l / 8 of the
// four 8 x 8 quarters (quarter q: rows 8 (q % 2).., columns 8 (q / 2)..). out[lane * 4 + i]: register i as
// (low, high) = the two values, low * 1000 + high.
void ldmatrix_kernel(float* out, bool trans) {
  static uint16_t m[16 * 16] __attribute__((aligned(16)));
  emu::shared_decl(&m, sizeof m);
  const int lane = int(threadIdx.x);
  for (int e = lane; e < 256; e += 32) m[e] = __float2bfloat16(float(e)).bits;
  __syncwarp();
  const int q = lane / 8;
  const uint16_t* row = m + (8 * (q % 2) + lane % 8) * 16 + 8 * (q / 2);
  uint32_t r[4];
  if (trans) {
    ptx::ldmatrix_x4_trans(r, row);
  } else {
    ptx::ldmatrix_x4(r, row);
  }
  for (int i = 0; i < 4; ++i)
    out[lane * 4 + i] = __bfloat162float(__nv_bfloat16{uint16_t(r[i] & 0xffffu)}) * 1000.0f +
                        __bfloat162float(__nv_bfloat16{uint16_t(r[i] >> 16)});
}

TEST(EmuPtx, LdmatrixGivesEachLaneItsRowPairsAndTransTheColumnPairs) {
  float* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, sizeof(float) * 128), cudaSuccess);
  for (bool trans : {false, true}) {
    emu::launch("ldmatrix", nullptr, [&] { ldmatrix_kernel(out, trans); }, 1, 32);
    for (int lane = 0; lane < 32; ++lane)
      for (int i = 0; i < 4; ++i) {
        const int g = lane / 4, t = lane % 4, r0 = 8 * (i % 2), c0 = 8 * (i / 2);
        // Quarter i's element (row, col): non-trans (g, 2t), (g, 2t + 1); trans (2t, g), (2t + 1, g).
        const int lo = trans ? (r0 + 2 * t) * 16 + c0 + g : (r0 + g) * 16 + c0 + 2 * t;
        const int hi = trans ? lo + 16 : lo + 1;
        EXPECT_EQ(out[lane * 4 + i], float(lo) * 1000.0f + float(hi)) << "lane " << lane << " reg " << i << " trans " << trans;
      }
  }
  cudaFree(out);
}

// Thread 0 copies src[0..3] and src[4..7] to shared memory in two groups and reads both halves before any
// wait, after waiting for all but the newest group, and after waiting for all.
void cp_async_kernel(const float* src, float* out) {
  static float sh[8] __attribute__((aligned(16)));
  emu::shared_decl(&sh, sizeof sh);
  if (threadIdx.x != 0) return;
  ptx::cp_async_16(sh, src, 16);
  ptx::cp_async_commit();
  ptx::cp_async_16(sh + 4, src + 4, 8);  // 8 bytes read, 8 zero-filled
  ptx::cp_async_commit();
  out[0] = sh[0];
  out[1] = sh[4];
  ptx::cp_async_wait<1>();
  out[2] = sh[0];
  out[3] = sh[4];
  ptx::cp_async_wait<0>();
  for (int i = 0; i < 4; ++i) out[4 + i] = sh[4 + i];
}

TEST(EmuPtx, CpAsyncLandsAtItsGroupsWaitAndNotBefore) {
  float* src = nullptr;
  float* out = nullptr;
  ASSERT_EQ(cudaMalloc(&src, sizeof(float) * 8), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&out, sizeof(float) * 8), cudaSuccess);
  for (int i = 0; i < 8; ++i) src[i] = float(i + 1);
  emu::launch("cp_async", nullptr, [&] { cp_async_kernel(src, out); }, 1, 32);
  EXPECT_TRUE(std::isnan(out[0]) && std::isnan(out[1])) << "read before any wait: " << out[0] << " " << out[1];
  EXPECT_EQ(out[2], 1.0f);
  EXPECT_TRUE(std::isnan(out[3])) << "the newer group landed before its wait";
  EXPECT_EQ(out[4], 5.0f);
  EXPECT_EQ(out[5], 6.0f);
  EXPECT_EQ(out[6], 0.0f);  // zero-filled beyond src-size
  EXPECT_EQ(out[7], 0.0f);
  // A source outside device memory is the device's fault.
  std::vector<float> host(8, 1.0f);
  EXPECT_THROW(emu::launch("cp_async_host", nullptr, [&] { cp_async_kernel(host.data(), out); }, 1, 32),
               std::runtime_error);
  cudaFree(src);
  cudaFree(out);
}

}  // namespace
