// Helpers shared by the CUDA op files (.cu only): device checks and guards, launch geometry and
// grid-stride loops. (Tensors read as rows with a contiguous last dim, TensorRows:
// backend/tensor_rows.hpp, shared with the CPU backend.)
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/op_checks.hpp"
#include "backend/tensor_rows.hpp"
#include "core/hd.hpp"
#include "core/tensor.hpp"

namespace sinklab::cuda {

using sinklab::check_same_shape;  // backend/op_checks.hpp

// The tensor lives on this backend's device and holds f32 (device arithmetic is f32 only).
inline void check_device_f32(const CudaBackend& be, const Tensor& t, const char* op, const char* arg) {
  SL_CHECK(t.device.is_cuda() && t.device.index == be.index(), "%s: %s is on %s, expected %s", op, arg,
           t.device.name().c_str(), be.name());
  SL_CHECK(t.dtype == DType::f32, "%s: %s has dtype %s; the CUDA backend computes in f32 only", op, arg,
           dtype_name(t.dtype));
}
// The tensor lives on this backend's device and holds f32 or bf16 (an activation under "bf16 storage",
// ops.hpp: read as f32, written rounded to nearest even).
inline void check_device_f32_or_bf16(const CudaBackend& be, const Tensor& t, const char* op, const char* arg) {
  SL_CHECK(t.device.is_cuda() && t.device.index == be.index(), "%s: %s is on %s, expected %s", op, arg,
           t.device.name().c_str(), be.name());
  SL_CHECK(t.dtype == DType::f32 || t.dtype == DType::bf16,
           "%s: %s has dtype %s; the CUDA backend takes f32 or bf16 here", op, arg, dtype_name(t.dtype));
}
inline void check_device(const CudaBackend& be, const Tensor& t, const char* op, const char* arg) {
  SL_CHECK(t.device.is_cuda() && t.device.index == be.index(), "%s: %s is on %s, expected %s", op, arg,
           t.device.name().c_str(), be.name());
}

// Makes `index` the current device for the scope, restoring the previous one.
class DeviceGuard {
 public:
  explicit DeviceGuard(int index) {
    CUDA_CHECK(cudaGetDevice(&previous_));
    if (previous_ != index) CUDA_CHECK(cudaSetDevice(index));
  }
  ~DeviceGuard() {
    int now = -1;
    if (cudaGetDevice(&now) == cudaSuccess && now != previous_) (void)cudaSetDevice(previous_);
  }
  DeviceGuard(const DeviceGuard&) = delete;
  DeviceGuard& operator=(const DeviceGuard&) = delete;

 private:
  int previous_ = 0;
};

inline cudaStream_t stream_of(const CudaBackend& be) { return be.stream(); }

// Launch geometry for a grid-stride loop over n elements.
inline constexpr int kThreads = 256;
inline unsigned grid_for(int64_t n) {
  int64_t blocks = (n + kThreads - 1) / kThreads;
  if (blocks > (int64_t(1) << 20)) blocks = int64_t(1) << 20;
  return unsigned(blocks < 1 ? 1 : blocks);
}

// for (i over [0, n)) spread across the whole grid.
#define SL_GRID_LOOP(i, n)                                                                        \
  for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n);                       \
       i += int64_t(blockDim.x) * gridDim.x)

}  // namespace sinklab::cuda
