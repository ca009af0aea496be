// Error checking for CUDA runtime and cuBLAS/cuBLASLt calls: a failing call becomes a sinklab::Error
// whose message names the call, the error and where it was made.
#pragma once

#include <cublas_api.h>
#include <cuda_runtime_api.h>

#include "core/error.hpp"

// CUDA_CHECK(cudaMemcpyAsync(...)): throws on anything but cudaSuccess.
#define CUDA_CHECK(call)                                                                           \
  do {                                                                                             \
    cudaError_t sl_cuda_err_ = (call);                                                             \
    if (sl_cuda_err_ != cudaSuccess) {                                                             \
      cudaGetLastError(); /* clear a non-sticky error so the next call does not report it again */ \
      SL_FAIL("CUDA call %s failed at %s:%d: %s (%s)", #call, __FILE__, __LINE__,                  \
              cudaGetErrorString(sl_cuda_err_), cudaGetErrorName(sl_cuda_err_));                   \
    }                                                                                              \
  } while (0)

// After a kernel launch: reports launch-configuration errors (and earlier asynchronous faults).
#define CUDA_CHECK_LAUNCH(what)                                                                    \
  do {                                                                                             \
    cudaError_t sl_cuda_err_ = cudaGetLastError();                                                 \
    if (sl_cuda_err_ != cudaSuccess) {                                                             \
      SL_FAIL("CUDA kernel %s failed at %s:%d: %s (%s)", what, __FILE__, __LINE__,                 \
              cudaGetErrorString(sl_cuda_err_), cudaGetErrorName(sl_cuda_err_));                   \
    }                                                                                              \
  } while (0)

// CUBLAS_CHECK(cublasLtMatmul(...)): cuBLAS and cuBLASLt share cublasStatus_t.
#define CUBLAS_CHECK(call)                                                                         \
  do {                                                                                             \
    cublasStatus_t sl_cublas_st_ = (call);                                                         \
    if (sl_cublas_st_ != CUBLAS_STATUS_SUCCESS) {                                                  \
      SL_FAIL("cuBLAS call %s failed at %s:%d: %s (%s)", #call, __FILE__, __LINE__,                \
              cublasGetStatusString(sl_cublas_st_), cublasGetStatusName(sl_cublas_st_));          \
    }                                                                                              \
  } while (0)
