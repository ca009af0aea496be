// The CPU emulation of the CUDA device that sinklab's hand-written kernels use (tests/gpu/emulate.sh; a
// test tool, never part of the product). The kernels' .cu files are compiled as C++ after a small textual
// rewrite (tests/gpu/emu/rewrite_cu.py: kernel<<<grid, block, smem, stream>>>(args) -> emu::launch(...),
// __shared__ arrays -> block-shared statics, extern __shared__ -> the launch's dynamic shared memory);
// their CUDA headers resolve to the shadow headers in tests/gpu/emu/include/, which all come here.
//
// The device model:
//   - Blocks of a launch run one after another, in blockIdx order (x fastest). The threads of a block are
//     cooperative fibers on ONE OS thread (emu_runtime.cpp): a thread runs until it waits at a barrier or
//     ends, then the next runnable one runs, in threadIdx order. So a kernel costs one core whatever its
//     block size, and a run is deterministic.
//   - __syncthreads: a barrier of the block's live threads (a thread that has returned no longer counts,
//     as on sm_70+). __syncwarp, the shuffles and the WMMA *_sync calls: a barrier of the warp's live
//     lanes (lockstep exactly where CUDA promises it, nowhere else).
//   - Shared memory: __shared__ arrays are function statics (one block at a time uses them), filled with
//     0xff bytes (NaN as f32 / bf16, -1 as integers) when a block first reaches their declaration; dynamic
//     shared memory likewise, per block. A read of shared memory that no thread of this block wrote reads
//     NaN instead of what a previous block left there.
//   - Global memory is host memory. cudaMalloc'd blocks are registered and filled with 0xff bytes; copies,
//     memsets and the library stand-ins check that their ranges lie inside a registered block (device side)
//     or outside every one (host side), as the copy kind says.
//   - Launch configuration is checked as the device does: block size <= 1024, grid.y/z <= 65535, no empty
//     grid, static + dynamic shared memory <= 48 KiB, or <= the cudaFuncSetAttribute opt-in up to 163 KiB
//     (sm_80's limit); a bad launch sets the error that CUDA_CHECK_LAUNCH's cudaGetLastError reports.
//   - Streams and events order nothing: every call runs to completion before it returns (stream order =
//     program order). Atomics are plain read-modify-writes (one OS thread).
//   - Math is the host's: expf/logf/tanhf of glibc, not the device's (the numbers are close to a GPU's, not
//     the same), and nothing is fused unless the code says fmaf.
// What it cannot see: warp scheduling and timing, memory coalescing, bank conflicts, register pressure and
// launch bounds, the hardware's WMMA fragment layout, races a sequential thread order happens to hide.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <type_traits>

// ---- qualifiers --------------------------------------------------------------------------------------
#define __global__
#define __device__
#define __host__
#define __forceinline__ inline
#define __noinline__
#define __launch_bounds__(...)
#define __align__(n) alignas(n)
#define __constant__ static

struct dim3 {
  unsigned x = 1, y = 1, z = 1;
  constexpr dim3(unsigned a = 1, unsigned b = 1, unsigned c = 1) : x(a), y(b), z(c) {}
};
using uint3 = dim3;

// The running thread's indices (set by the scheduler before it resumes a fiber).
inline dim3 threadIdx, blockIdx, blockDim, gridDim;
constexpr int warpSize = 32;

// ---- the runtime API's types -------------------------------------------------------------------------
enum cudaError_t {
  cudaSuccess = 0,
  cudaErrorInvalidValue = 1,
  cudaErrorMemoryAllocation = 2,
  cudaErrorInvalidConfiguration = 9,
  cudaErrorInvalidDevice = 101,
  cudaErrorNoDevice = 100,
  cudaErrorInvalidResourceHandle = 400,
  cudaErrorLaunchFailure = 719,
};
using cudaError = cudaError_t;
struct CUstream_st {
  int device = 0;
};
struct CUevent_st {
  int device = 0;
};
using cudaStream_t = CUstream_st*;
using cudaEvent_t = CUevent_st*;
enum cudaMemcpyKind {
  cudaMemcpyHostToHost = 0,
  cudaMemcpyHostToDevice = 1,
  cudaMemcpyDeviceToHost = 2,
  cudaMemcpyDeviceToDevice = 3,
  cudaMemcpyDefault = 4
};
enum cudaFuncAttribute { cudaFuncAttributeMaxDynamicSharedMemorySize = 8 };
constexpr unsigned cudaStreamDefault = 0, cudaStreamNonBlocking = 1;
constexpr unsigned cudaEventDefault = 0, cudaEventDisableTiming = 2;
constexpr unsigned cudaHostAllocDefault = 0, cudaHostAllocPortable = 1;
struct cudaDeviceProp {
  char name[256] = {};
  size_t totalGlobalMem = 0;
  size_t sharedMemPerBlock = 0;
  size_t sharedMemPerBlockOptin = 0;
  int warpSize = 32;
  int maxThreadsPerBlock = 1024;
  int multiProcessorCount = 1;
  int major = 8, minor = 0;
};

cudaError_t cudaGetDeviceCount(int* n);
cudaError_t cudaGetDevice(int* d);
cudaError_t cudaSetDevice(int d);
cudaError_t cudaGetDeviceProperties(cudaDeviceProp* p, int d);
cudaError_t cudaDeviceSynchronize();
cudaError_t cudaMalloc(void** p, size_t bytes);
template <class T>
cudaError_t cudaMalloc(T** p, size_t bytes) {
  return cudaMalloc(reinterpret_cast<void**>(p), bytes);
}
cudaError_t cudaFree(void* p);
cudaError_t cudaHostAlloc(void** p, size_t bytes, unsigned flags);
cudaError_t cudaMallocHost(void** p, size_t bytes);
cudaError_t cudaFreeHost(void* p);
cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total_bytes);
cudaError_t cudaDriverGetVersion(int* version);   // the emulation says 13000 (CUDA 13.0) for both
cudaError_t cudaRuntimeGetVersion(int* version);
cudaError_t cudaMemcpy(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind);
cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t bytes, cudaMemcpyKind kind, cudaStream_t s = nullptr);
cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t bytes,
                                cudaStream_t s = nullptr);
cudaError_t cudaMemset(void* p, int value, size_t bytes);
cudaError_t cudaMemsetAsync(void* p, int value, size_t bytes, cudaStream_t s = nullptr);
cudaError_t cudaStreamCreate(cudaStream_t* s);
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* s, unsigned flags);
cudaError_t cudaStreamDestroy(cudaStream_t s);
cudaError_t cudaStreamSynchronize(cudaStream_t s);
cudaError_t cudaStreamWaitEvent(cudaStream_t s, cudaEvent_t e, unsigned flags = 0);
cudaError_t cudaEventCreate(cudaEvent_t* e);
cudaError_t cudaEventCreateWithFlags(cudaEvent_t* e, unsigned flags);
cudaError_t cudaEventRecord(cudaEvent_t e, cudaStream_t s = nullptr);
cudaError_t cudaEventSynchronize(cudaEvent_t e);
cudaError_t cudaEventDestroy(cudaEvent_t e);
cudaError_t cudaGetLastError();
cudaError_t cudaPeekAtLastError();
const char* cudaGetErrorString(cudaError_t e);
const char* cudaGetErrorName(cudaError_t e);

namespace emu {

// ---- the device memory registry (emu_runtime.cpp) -----------------------------------------------------
// The device whose cudaMalloc block holds [p, p + bytes), or -1 when no block holds all of it.
int device_of_range(const void* p, size_t bytes);
// Throws (naming `what`) unless [p, p + bytes) lies inside one device block (bytes 0: any pointer passes).
void require_device_range(const void* p, size_t bytes, const char* what);
// Throws (naming `what`) when [p, p + bytes) touches a device block.
void require_host_range(const void* p, size_t bytes, const char* what);
// Records an error for the next cudaGetLastError (launch failures, as the device reports them).
void set_last_error(cudaError_t e, const char* detail);
// The number of emulated devices: SINKLAB_EMU_DEVICES, default 1.
int device_count();

// ---- launches (emu_runtime.cpp) ----------------------------------------------------------------------
struct KernelBody {
  void* ctx;
  void (*call)(void*);
};
void launch_impl(const char* name, const void* fn, dim3 grid, dim3 block, size_t dyn_smem, KernelBody body);
void set_max_dynamic_smem(const void* fn, int bytes);

// ---- what the device did, for the step ledger (src/backend/ledger.hpp; emu_runtime.cpp) ---------------
// Every launch, library call, copy, host synchronisation and allocation is counted. Under
// SINKLAB_EMU_COUNT_ONLY=1 they are only counted and checked, not run (device memory is mapped lazily and
// left unwritten): a whole training step of a real shape (the 60M job's) is then counted in seconds.
bool count_only();
void count_library_call();  // a cuBLAS(Lt) GEMM, a cuDNN graph execution, a CUB sort, an NCCL collective

template <class R, class... A>
const void* fn_addr(R (*f)(A...)) {
  return reinterpret_cast<const void*>(f);
}

inline dim3 as_dim3(dim3 d) { return d; }
template <class I, std::enable_if_t<std::is_integral_v<I>, int> = 0>
dim3 as_dim3(I n) {
  return dim3(unsigned(n));
}

// kernel<<<grid, block, smem, stream>>>(args), rewritten: the body calls the kernel with the arguments
// (every thread copies them, as the device does).
template <class F, class G, class B>
void launch(const char* name, const void* fn, F&& body, G grid, B block, size_t dyn_smem = 0, cudaStream_t = nullptr) {
  using Body = std::remove_reference_t<F>;
  launch_impl(name, fn, as_dim3(grid), as_dim3(block), dyn_smem,
              KernelBody{const_cast<void*>(static_cast<const void*>(&body)), [](void* p) { (*static_cast<Body*>(p))(); }});
}

// ---- inside a kernel ----------------------------------------------------------------------------------
void sync_block();              // __syncthreads
void sync_warp();               // __syncwarp, and the entry of every warp-collective call
unsigned lane_id();             // threadIdx's linear index % 32
unsigned warp_id();             // threadIdx's linear index / 32
unsigned warp_width();          // lanes in this warp (32, or fewer in a block's last partial warp)
unsigned linear_tid();          // x + y * blockDim.x + z * blockDim.x * blockDim.y
uint64_t* shuffle_slot(int parity, unsigned lane);  // this warp's exchange words (two sets, alternating)
int next_shuffle_parity();      // this thread's shuffle count % 2, then incremented
char* dynamic_smem();           // this launch's dynamic shared memory (128-byte aligned)
void shared_decl(void* p, size_t bytes);  // a __shared__ array reached: poisoned once per block
[[noreturn]] void kernel_fault(const char* fmt, ...);  // an error the device would trap on

template <class T>
T* dyn_smem() {
  return reinterpret_cast<T*>(dynamic_smem());
}

template <class T>
T shuffle(T v, int src_lane, int width) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable_v<T>, "shuffle of a type wider than 8 bytes");
  const int parity = next_shuffle_parity();
  const unsigned lane = lane_id();
  uint64_t word = 0;
  std::memcpy(&word, &v, sizeof(T));
  *shuffle_slot(parity, lane) = word;
  sync_warp();
  // The source lane, within this lane's segment of `width` lanes.
  const int base = int(lane) / width * width;
  unsigned src = unsigned(src_lane < base || src_lane >= base + width ? int(lane) : src_lane);
  if (src >= warp_width()) src = lane;  // no such lane in a partial warp: the device returns the own value
  word = *shuffle_slot(parity, src);
  T r;
  std::memcpy(&r, &word, sizeof(T));
  return r;
}

}  // namespace emu

template <class K>
cudaError_t cudaFuncSetAttribute(K* kernel, cudaFuncAttribute attr, int value) {
  if (attr == cudaFuncAttributeMaxDynamicSharedMemorySize) emu::set_max_dynamic_smem(reinterpret_cast<const void*>(kernel), value);
  return cudaSuccess;
}

// ---- device intrinsics --------------------------------------------------------------------------------
inline void __syncthreads() { emu::sync_block(); }
inline void __syncwarp(unsigned = 0xffffffffu) { emu::sync_warp(); }
inline void __threadfence() {}
inline void __threadfence_block() {}
template <class T>
T __shfl_sync(unsigned, T v, int src, int width = 32) {
  return emu::shuffle(v, int(emu::lane_id()) / width * width + src % width, width);
}
template <class T>
T __shfl_xor_sync(unsigned, T v, int mask, int width = 32) {
  return emu::shuffle(v, int(emu::lane_id() ^ unsigned(mask)), width);
}
template <class T>
T __shfl_down_sync(unsigned, T v, unsigned delta, int width = 32) {
  return emu::shuffle(v, int(emu::lane_id() + delta), width);
}
template <class T>
T __shfl_up_sync(unsigned, T v, unsigned delta, int width = 32) {
  return emu::shuffle(v, int(emu::lane_id()) - int(delta), width);
}

template <class T>
T atomicAdd(T* p, T v) {
  const T old = *p;
  *p = old + v;
  return old;
}
template <class T>
T atomicMin(T* p, T v) {
  const T old = *p;
  *p = v < old ? v : old;
  return old;
}
template <class T>
T atomicMax(T* p, T v) {
  const T old = *p;
  *p = v > old ? v : old;
  return old;
}
template <class T>
T atomicExch(T* p, T v) {
  const T old = *p;
  *p = v;
  return old;
}
template <class T>
T atomicCAS(T* p, T compare, T v) {
  const T old = *p;
  if (old == compare) *p = v;
  return old;
}

inline double __longlong_as_double(long long x) {
  double d;
  std::memcpy(&d, &x, sizeof d);
  return d;
}
inline long long __double_as_longlong(double x) {
  long long i;
  std::memcpy(&i, &x, sizeof i);
  return i;
}
inline float __int_as_float(int x) {
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}
inline int __float_as_int(float x) {
  int i;
  std::memcpy(&i, &x, sizeof i);
  return i;
}
inline float __uint_as_float(unsigned x) {
  float f;
  std::memcpy(&f, &x, sizeof f);
  return f;
}
inline unsigned __float_as_uint(float x) {
  unsigned i;
  std::memcpy(&i, &x, sizeof i);
  return i;
}
inline float rsqrtf(float x) { return 1.0f / std::sqrt(x); }
inline double rsqrt(double x) { return 1.0 / std::sqrt(x); }
inline float __expf(float x) { return std::exp(x); }
inline float __logf(float x) { return std::log(x); }
inline float __fdividef(float a, float b) { return a / b; }
template <class T>
T __ldg(const T* p) {
  return *p;
}

// ---- bf16 (cuda_bf16.h) -------------------------------------------------------------------------------
struct __nv_bfloat16 {
  uint16_t bits = 0;
};
inline __nv_bfloat16 __float2bfloat16(float f) {  // round to nearest even, as the device's cvt.rn.bf16.f32
  uint32_t u;
  std::memcpy(&u, &f, 4);
  if (std::isnan(f)) return {uint16_t((u >> 16) | 0x40u)};
  u += 0x7fffu + ((u >> 16) & 1u);
  return {uint16_t(u >> 16)};
}
inline float __bfloat162float(__nv_bfloat16 b) {
  const uint32_t u = uint32_t(b.bits) << 16;
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}
