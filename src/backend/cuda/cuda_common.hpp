// Helpers shared by the CUDA op files (.cu only): tensors read as rows with a contiguous last dim,
// device guards, launch geometry and grid-stride loops.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "backend/cuda/cuda_backend.hpp"
#include "backend/cuda/cuda_check.hpp"
#include "backend/op_checks.hpp"
#include "core/hd.hpp"
#include "core/tensor.hpp"

namespace sinklab::cuda {

// A tensor [*, cols] as `rows` rows of contiguous `cols` elements; the leading dims may have any
// strides (same contract as the CPU backend's rows_of). Passed by value to kernels.
struct DevRows {
  int64_t rows = 1;
  int64_t cols = 1;
  int64_t numel = 1;
  int lead_ndim = 0;
  bool contiguous = true;  // offset(i) == i
  int64_t lead_shape[kMaxDims] = {};
  int64_t lead_stride[kMaxDims] = {};

  // Element offset of logical (row-major) element i.
  SL_HD int64_t offset(int64_t i) const {
    if (contiguous) return i;
    int64_t r = i / cols;
    int64_t off = i - r * cols;
    for (int d = lead_ndim - 1; d >= 0; --d) {
      int64_t q = r / lead_shape[d];
      off += (r - q * lead_shape[d]) * lead_stride[d];
      r = q;
    }
    return off;
  }
};

// Checks the last-dim contiguity (naming op and argument) and describes t for a kernel.
inline DevRows rows_of(const Tensor& t, const char* op, const char* arg) {
  DevRows r;
  r.numel = t.numel();
  r.contiguous = t.is_contiguous();
  if (t.ndim == 0) return r;
  SL_CHECK(t.stride[t.ndim - 1] == 1 || t.shape[t.ndim - 1] == 1,
           "%s: the last dimension of %s must be contiguous (stride %lld)", op, arg,
           (long long)t.stride[t.ndim - 1]);
  r.cols = t.shape[t.ndim - 1];
  r.lead_ndim = t.ndim - 1;
  r.rows = 1;
  for (int d = 0; d < r.lead_ndim; ++d) {
    r.lead_shape[d] = t.shape[d];
    r.lead_stride[d] = t.stride[d];
    r.rows *= t.shape[d];
  }
  if (r.cols == 0) r.contiguous = true;  // nothing to address
  return r;
}

using sinklab::check_same_shape;  // backend/op_checks.hpp

// The tensor lives on this backend's device and holds f32 (device arithmetic is f32 only).
inline void check_device_f32(const CudaBackend& be, const Tensor& t, const char* op, const char* arg) {
  SL_CHECK(t.device.is_cuda() && t.device.index == be.index(), "%s: %s is on %s, expected %s", op, arg,
           t.device.name().c_str(), be.name());
  SL_CHECK(t.dtype == DType::f32, "%s: %s has dtype %s; the CUDA backend computes in f32 only", op, arg,
           dtype_name(t.dtype));
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
