// SL_HD marks per-element math shared by the CPU backend and CUDA kernels (__host__ __device__ under
// nvcc, nothing under the host compiler). Such functions use plain expf/sqrtf-style calls only.
#pragma once

#if defined(__CUDACC__)
#define SL_HD __host__ __device__ __forceinline__
#else
#define SL_HD inline
#endif

// SL_UNROLL before a loop of a fixed trip count unrolls it fully (nvcc and GCC spell it differently). A
// kernel's array parameters indexed by such a loop's counter are read at constant offsets; indexed at run
// time they would be copied to local memory first (docs/DESIGN.md, "The GPU path").
#if defined(__CUDA_ARCH__)
#define SL_UNROLL _Pragma("unroll")
#elif defined(__CUDACC__)
#define SL_UNROLL  // nvcc's host pass: the host compiler would warn about the device pragma
#else
#define SL_UNROLL _Pragma("GCC unroll 16")
#endif
