// The warp-level tensor-core and asynchronous-copy instructions of sm_80 and later that the flash kernel uses
// (attention_flash_mma.cu), as inline PTX with the operand layouts of the PTX ISA ("Matrix fragments for
// mma.m16n8k16 with floating point type", "ldmatrix", "cp.async"). Lane l of a warp: g = l / 4 (its group),
// t = l % 4 (its place in the group); a b32 register holds two bf16, the lower column (or k) in its low half.
//   mma_bf16_16816   D (16 x 8, f32) = A (16 x 16, bf16, row) B (16 x 8, bf16, col) + C
//                    A regs: (g, 2t..), (g + 8, 2t..), (g, 8 + 2t..), (g + 8, 8 + 2t..)   [row, k]
//                    B regs: (2t.., g), (8 + 2t.., g)                                     [k, n]
//                    C, D:   (g, 2t), (g, 2t + 1), (g + 8, 2t), (g + 8, 2t + 1)           [row, n]
//   ldmatrix_x4      four 8 x 8 b16 matrices from shared memory; lane l gives the address of row l % 8 of
//                    matrix l / 8 (16-byte aligned); register i of lane l is row g of matrix i, columns 2t, 2t + 1
//   ldmatrix_x4_trans  the same with each matrix transposed: register i holds rows 2t, 2t + 1 of column g
//   cp_async_16      16 bytes global -> shared, asynchronous (both 16-byte aligned); src_bytes < 16 reads that
//                    many and zero-fills the rest (0: a row of zeros, nothing read)
//   cp_async_commit  closes this thread's group of copies; cp_async_wait<N> waits until at most N of its
//                    committed groups are pending (a __syncthreads then shows every thread's copies to all)
// The CPU emulation (tests/gpu/emulate.sh) shadows this header with tests/gpu/emu/include/backend/cuda/mma_ptx.hpp,
// which models each instruction on the CPU with these layouts.
#pragma once

#include <cuda_bf16.h>
#include <cuda_runtime.h>

#include <cstdint>

namespace sinklab::cuda::ptx {

__device__ __forceinline__ void mma_bf16_16816(float (&d)[4], const uint32_t (&a)[4], const uint32_t (&b)[2],
                                               const float (&c)[4]) {
  asm volatile(
      "mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
      "{%10, %11, %12, %13};\n"
      : "=f"(d[0]), "=f"(d[1]), "=f"(d[2]), "=f"(d[3])
      : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b[0]), "r"(b[1]), "f"(c[0]), "f"(c[1]), "f"(c[2]),
        "f"(c[3]));
}

__device__ __forceinline__ uint32_t smem_addr(const void* p) {
  return static_cast<uint32_t>(__cvta_generic_to_shared(p));
}

__device__ __forceinline__ void ldmatrix_x4(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

__device__ __forceinline__ void ldmatrix_x4_trans(uint32_t (&r)[4], const void* row) {
  asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
               : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
               : "r"(smem_addr(row)));
}

__device__ __forceinline__ void cp_async_16(void* smem, const void* gmem, int src_bytes) {
  asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;\n" ::"r"(smem_addr(smem)), "l"(gmem), "r"(src_bytes));
}

__device__ __forceinline__ void cp_async_commit() { asm volatile("cp.async.commit_group;\n" ::); }

template <int N>
__device__ __forceinline__ void cp_async_wait() {
  asm volatile("cp.async.wait_group %0;\n" ::"n"(N));
}

// Two floats as one b32 register of bf16 (round to nearest even), lo in the low half.
__device__ __forceinline__ uint32_t pack_bf16x2(float lo, float hi) {
  const __nv_bfloat162 v = __floats2bfloat162_rn(lo, hi);
  return *reinterpret_cast<const uint32_t*>(&v);
}

}  // namespace sinklab::cuda::ptx
