// The warp-level PTX of src/backend/cuda/mma_ptx.hpp under the CPU emulation (cuda_emu.hpp), with the operand
// layouts of the PTX ISA that header states, so that a kernel which puts a value in the wrong lane or register
// computes a wrong product here as on the device:
//   mma_bf16_16816      every lane deposits its A, B, C registers in its warp's exchange words, waits for the
//                       warp's lanes (mma.sync is warp-collective: the warp must be whole), then computes its own
//                       four D elements from the 16 x 16 A and 16 x 8 B the warp's registers make (f32 sums in k
//                       order; bf16 products are exact in f32; the device's order of the k sum may differ)
//   ldmatrix_x4(_trans) every lane deposits its row address (16-byte aligned, in this block's shared memory or a
//                       static __shared__ array), waits for the warp, then reads its registers from the rows the
//                       warp named, after the wait (what other warps wrote needs their __syncthreads first)
//   cp_async_16         the 16 bytes are read from device memory (the range checked) when issued, the destination
//                       is poisoned (0xff: NaN) at once and written only when this thread's cp_async_wait retires
//                       the copy's group: a read before the wait, or another thread's read before the
//                       __syncthreads after it, sees NaN
//   cp_async_commit / cp_async_wait<N>  this thread's groups, oldest first
// The exchange words alternate between two sets by the thread's count of warp-collective calls (shuffles
// included), as the shuffles' do (cuda_emu.hpp, emu::shuffle).
#pragma once

#include <cstdint>
#include <cstring>
#include <deque>
#include <vector>

#include "cuda_emu.hpp"

namespace sinklab::cuda::ptx {

namespace emu_detail {

constexpr int kWords = 10;  // per lane: A (4), B (2), C (4); or an address (2)
inline uint32_t g_exchange[32][2][32][kWords];  // [warp][set][lane][word]

inline uint32_t* exchange(int set, unsigned lane) { return g_exchange[emu::warp_id()][set][lane]; }

inline void full_warp(const char* what) {
  if (emu::warp_width() != 32) emu::kernel_fault("%s: the warp has %u lanes; it needs all 32", what, emu::warp_width());
}

inline float bf16_lo(uint32_t r) { return __bfloat162float(__nv_bfloat16{uint16_t(r & 0xffffu)}); }
inline float bf16_hi(uint32_t r) { return __bfloat162float(__nv_bfloat16{uint16_t(r >> 16)}); }

// The row addresses of an ldmatrix: deposited, then the warp's 32 read back.
inline int deposit_address(const void* row, const char* what) {
  if (reinterpret_cast<uintptr_t>(row) % 16 != 0) emu::kernel_fault("%s: row address %p is not 16-byte aligned", what, row);
  const int set = emu::next_shuffle_parity();
  const uint64_t a = reinterpret_cast<uintptr_t>(row);
  uint32_t* mine = exchange(set, emu::lane_id());
  mine[0] = uint32_t(a);
  mine[1] = uint32_t(a >> 32);
  emu::sync_warp();
  full_warp(what);
  return set;
}
inline const uint16_t* row_of(int set, unsigned lane) {
  const uint32_t* w = exchange(set, lane);
  return reinterpret_cast<const uint16_t*>(uintptr_t(w[0]) | (uintptr_t(w[1]) << 32));
}

struct PendingCopy {
  unsigned char* dst;
  unsigned char bytes[16];
};
struct CopyQueue {
  std::vector<PendingCopy> open;
  std::deque<std::vector<PendingCopy>> committed;
};
inline CopyQueue g_copies[1024];  // by linear thread index (one block runs at a time)

}  // namespace emu_detail

inline void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2], const float (&c)[4]) {
  using namespace emu_detail;
  const int set = emu::next_shuffle_parity();
  const unsigned lane = emu::lane_id();
  uint32_t* mine = exchange(set, lane);
  for (int i = 0; i < 4; ++i) mine[i] = a[i];
  mine[4] = b[0];
  mine[5] = b[1];
  float acc[4];
  for (int i = 0; i < 4; ++i) acc[i] = c[i];
  emu::sync_warp();
  full_warp("mma.sync");
  float A[16][16], B[16][8];
  for (unsigned l = 0; l < 32; ++l) {
    const uint32_t* r = exchange(set, l);
    const int g = int(l / 4), t = int(l % 4);
    for (int i = 0; i < 4; ++i) {
      const int row = g + 8 * (i % 2), col = 2 * t + 8 * (i / 2);
      A[row][col] = bf16_lo(r[i]);
      A[row][col + 1] = bf16_hi(r[i]);
    }
    for (int i = 0; i < 2; ++i) {
      B[2 * t + 8 * i][g] = bf16_lo(r[4 + i]);
      B[2 * t + 8 * i + 1][g] = bf16_hi(r[4 + i]);
    }
  }
  const int g = int(lane / 4), t = int(lane % 4);
  for (int e = 0; e < 4; ++e) {
    const int row = g + 8 * (e / 2), n = 2 * t + e % 2;
    float s = acc[e];
    for (int k = 0; k < 16; ++k) s += A[row][k] * B[k][n];
    d[e] = s;
  }
}

inline void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  using namespace emu_detail;
  const int set = deposit_address(row, "ldmatrix");
  const unsigned lane = emu::lane_id(), g = lane / 4, t = lane % 4;
  for (unsigned i = 0; i < 4; ++i) {
    const uint16_t* p = row_of(set, i * 8 + g);
    r[i] = uint32_t(p[2 * t]) | (uint32_t(p[2 * t + 1]) << 16);
  }
}

inline void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  using namespace emu_detail;
  const int set = deposit_address(row, "ldmatrix.trans");
  const unsigned lane = emu::lane_id(), g = lane / 4, t = lane % 4;
  for (unsigned i = 0; i < 4; ++i)
    r[i] = uint32_t(row_of(set, i * 8 + 2 * t)[g]) | (uint32_t(row_of(set, i * 8 + 2 * t + 1)[g]) << 16);
}

inline void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  using namespace emu_detail;
  if (reinterpret_cast<uintptr_t>(smem) % 16 != 0 || reinterpret_cast<uintptr_t>(gmem) % 16 != 0)
    emu::kernel_fault("cp.async: %p <- %p is not 16-byte aligned", smem, gmem);
  if (src_bytes < 0 || src_bytes > 16) emu::kernel_fault("cp.async: src-size %d outside [0, 16]", src_bytes);
  PendingCopy c;
  c.dst = static_cast<unsigned char*>(smem);
  std::memset(c.bytes, 0, 16);
  if (src_bytes > 0) {
    emu::require_device_range(gmem, size_t(src_bytes), "cp.async source");
    std::memcpy(c.bytes, gmem, size_t(src_bytes));
  }
  std::memset(smem, 0xff, 16);  // undefined until the copy is waited for
  g_copies[emu::linear_tid()].open.push_back(c);
}

inline void cp_async_commit() {
  emu_detail::CopyQueue& q = emu_detail::g_copies[emu::linear_tid()];
  q.committed.push_back(std::move(q.open));
  q.open.clear();
}

template <int N>
void cp_async_wait() {
  emu_detail::CopyQueue& q = emu_detail::g_copies[emu::linear_tid()];
  while (q.committed.size() > size_t(N)) {
    for (const emu_detail::PendingCopy& c : q.committed.front()) std::memcpy(c.dst, c.bytes, 16);
    q.committed.pop_front();
  }
}

inline uint32_t pack_bf16x2(float lo, float hi) {
  return uint32_t(__float2bfloat16(lo).bits) | (uint32_t(__float2bfloat16(hi).bits) << 16);
}

}  // namespace sinklab::cuda::ptx
