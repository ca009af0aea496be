// A CPU emulation of the CUDA subset that src/backend/cuda/attention_flash.cu uses (tests/gpu/emulate_flash.sh;
// not part of CI, not a claim about a GPU): one std::thread per CUDA thread of a block, the blocks of a
// launch one after another (3-D grids), dynamic shared memory a NaN-filled buffer, __syncthreads a barrier
// of the block, __syncwarp / __shfl_xor_sync a barrier of the warp, bf16 as round-to-nearest-even bits,
// and WMMA fragments as whole 16 x 16 tiles that every lane holds (load: every lane reads the tile; mma:
// every lane computes it, f32 sums; store: lane 0 writes it between two warp barriers). A kernel whose
// lanes or threads diverge at a barrier deadlocks here, as it would misbehave on the device.
#pragma once
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <type_traits>
#include <vector>

#include "backend/op_checks.hpp"
#include "core/error.hpp"
#include "core/tensor.hpp"

#define __global__
#define __device__
#define __host__
#define __launch_bounds__(x)
#define __align__(x)

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
inline thread_local dim3 threadIdx, blockIdx;
inline dim3 blockDim, gridDim;
using cudaStream_t = void*;

namespace emu {
inline std::barrier<>* block_bar = nullptr;
inline std::vector<std::unique_ptr<std::barrier<>>> warp_bars;
inline std::vector<float> shfl;  // one word per thread
inline std::vector<char> smem_buf;
inline char* dyn_smem() { return smem_buf.data(); }
inline std::barrier<>& warp_bar() { return *warp_bars[threadIdx.x / 32]; }
template <class F>
void launch(dim3 grid, unsigned block, size_t smem, cudaStream_t, F fn) {
  smem_buf.assign(smem + 128, char(0xff));  // 0xffff... = NaN as f32 and as bf16: unwritten reads show
  std::barrier<> b(block);
  block_bar = &b;
  warp_bars.clear();
  for (unsigned w = 0; w < (block + 31) / 32; ++w) warp_bars.push_back(std::make_unique<std::barrier<>>(32));
  shfl.assign(block, 0.0f);
  blockDim = dim3(block);
  gridDim = grid;
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < block; ++t)
    ts.emplace_back([&, t] {
      threadIdx = dim3(t);
      for (unsigned z = 0; z < grid.z; ++z)
        for (unsigned y = 0; y < grid.y; ++y)
          for (unsigned x = 0; x < grid.x; ++x) {
            blockIdx = dim3(x, y, z);
            fn();
            b.arrive_and_wait();
          }
    });
  for (auto& t : ts) t.join();
}
}  // namespace emu

inline void __syncthreads() { emu::block_bar->arrive_and_wait(); }
inline void __threadfence_block() {}
inline void __syncwarp(unsigned = 0xffffffffu) { emu::warp_bar().arrive_and_wait(); }
inline float __shfl_xor_sync(unsigned, float v, int lane_mask) {
  emu::shfl[threadIdx.x] = v;
  __syncwarp();
  const unsigned base = threadIdx.x / 32 * 32, lane = threadIdx.x % 32;
  const float r = emu::shfl[base + (lane ^ unsigned(lane_mask))];
  __syncwarp();
  return r;
}

struct __nv_bfloat16 {
  uint16_t bits;
};
inline __nv_bfloat16 __float2bfloat16(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return {uint16_t(0x7fc0)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {uint16_t(u >> 16)};
}
inline float bf16_to_float(__nv_bfloat16 b) {
  const uint32_t u = uint32_t(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

namespace nvcuda::wmma {
struct row_major {};
struct col_major {};
struct matrix_a {};
struct matrix_b {};
struct accumulator {};
enum layout_t { mem_row_major, mem_col_major };
template <class Use, int M, int N, int K, class T, class Layout = void>
struct fragment {
  float x[16 * 16];
};
template <class Use, int M, int N, int K, class T, class L>
void fill_fragment(fragment<Use, M, N, K, T, L>& f, float v) {
  for (float& e : f.x) e = v;
}
// A / B tiles: element (r, c) of the 16 x 16 operand ((m, k) or (k, n)) at p[r * ld + c] (row-major) or
// p[c * ld + r] (col-major).
template <class Use, int M, int N, int K, class L>
void load_matrix_sync(fragment<Use, M, N, K, __nv_bfloat16, L>& f, const __nv_bfloat16* p, unsigned ld) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c)
      f.x[r * 16 + c] = bf16_to_float(std::is_same_v<L, row_major> ? p[r * ld + c] : p[c * ld + r]);
}
template <int M, int N, int K>
void load_matrix_sync(fragment<accumulator, M, N, K, float>& f, const float* p, unsigned ld, layout_t) {
  for (int r = 0; r < 16; ++r)
    for (int c = 0; c < 16; ++c) f.x[r * 16 + c] = p[r * ld + c];
}
template <int M, int N, int K>
void store_matrix_sync(float* p, const fragment<accumulator, M, N, K, float>& f, unsigned ld, layout_t) {
  __syncwarp();
  if (threadIdx.x % 32 == 0)
    for (int r = 0; r < 16; ++r)
      for (int c = 0; c < 16; ++c) p[r * ld + c] = f.x[r * 16 + c];
  __syncwarp();
}
template <int M, int N, int K, class LA, class LB>
void mma_sync(fragment<accumulator, M, N, K, float>& d, const fragment<matrix_a, M, N, K, __nv_bfloat16, LA>& a,
              const fragment<matrix_b, M, N, K, __nv_bfloat16, LB>& b, const fragment<accumulator, M, N, K, float>& c) {
  float out[256];
  for (int r = 0; r < 16; ++r)
    for (int n = 0; n < 16; ++n) {
      float s = c.x[r * 16 + n];
      for (int k = 0; k < 16; ++k) s += a.x[r * 16 + k] * b.x[k * 16 + n];
      out[r * 16 + n] = s;
    }
  std::memcpy(d.x, out, sizeof out);
}
}  // namespace nvcuda::wmma

enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize };
template <class K>
int cudaFuncSetAttribute(K, cudaFuncAttribute, int) { return 0; }
#define CUDA_CHECK(x) (void)(x)
#define CUDA_CHECK_LAUNCH(x) (void)(x)

namespace sinklab::cuda {
struct DeviceGuard {
  explicit DeviceGuard(int) {}
};
// The backend as the flash kernel uses it: its index, stream and one scratch slot (host memory).
class CudaBackend {
 public:
  enum class ScratchSlot : int { attention_fast };
  int index() const { return 0; }
  cudaStream_t stream() const { return nullptr; }
  void* scratch(ScratchSlot, size_t bytes) {
    if (scratch_.size() < bytes) scratch_.assign(bytes, char(0xff));
    return scratch_.data();
  }

 private:
  std::vector<char> scratch_;
};
void flash_attention_forward(CudaBackend& be, Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v,
                             const ops::AttentionSpec& spec, const AttentionDims& d);
void flash_attention_backward(CudaBackend& be, Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k,
                              Tensor v, Tensor out, Tensor stats, const ops::AttentionSpec& spec,
                              const AttentionDims& d);
}  // namespace sinklab::cuda
