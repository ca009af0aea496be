// SL_HD marks per-element math shared by the CPU backend and CUDA kernels (__host__ __device__ under
// nvcc, nothing under the host compiler). Such functions use plain expf/sqrtf-style calls only.
#pragma once

#if defined(__CUDACC__)
#define SL_HD __host__ __device__ __forceinline__
#else
#define SL_HD inline
#endif
