// The CUDA backend: one CudaBackend per device, created on first use, each with its own stream on
// which every op of that device is ordered. Ops are asynchronous with respect to the host except where
// host memory is involved (copies to/from the CPU, sum_squares' result): those return once finished.
//
// What runs on the device (everything else keeps the Backend default, which throws "no <op> kernel"):
//   memory ops: fill, copy (H2D / D2H / D2D / peer; dtype conversion f32/f64/bf16/f16/i32 as the CPU
//   does it), add, accumulate, scale, sum_squares, column_sum (bit-identical to the CPU), fill_normal, fill_uniform (bit-identical to the CPU:
//   same Philox stream, element i in row-major logical order), and the elementwise ops over the shared
//   *_math.hpp functions: activation_forward/backward, gated_forward/backward, adamw_update.
// Arithmetic ops take f32 tensors only (bf16/f16/f64 are storage for copy/fill). Tensors may have
// strided leading dimensions with a contiguous last dimension, as on the CPU.
//
// This header is included by host-only translation units (backend.cpp): no CUDA header here.
#pragma once

#include <string>

#include "backend/backend.hpp"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace sinklab::cuda {

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return name_.c_str(); }
  int index() const { return index_; }
  // The stream every op of this device runs on (a blocking stream: ordered with the legacy default
  // stream too, so code that uses stream 0 stays correct).
  CUstream_st* stream() const { return stream_; }

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr) override;
  void synchronize() override;

  void fill(Tensor out, double value) override;
  void copy(Tensor dst, Tensor src) override;
  void add(Tensor out, Tensor a, Tensor b) override;
  void accumulate(Tensor dst, Tensor src, double alpha) override;
  void scale(Tensor x, double factor) override;
  double sum_squares(Tensor x) override;
  void column_sum(Tensor out, Tensor in, bool accumulate) override;
  void fill_normal(Tensor out, uint64_t seed, uint64_t stream, double mean, double std) override;
  void fill_uniform(Tensor out, uint64_t seed, uint64_t stream, double low, double high) override;
  void activation_forward(Tensor out, Tensor in, Activation act) override;
  void activation_backward(Tensor d_in, Tensor d_out, Tensor in, Activation act) override;
  void gated_forward(Tensor out, Tensor gate, Tensor up, Activation act) override;
  void gated_backward(Tensor d_gate, Tensor d_up, Tensor d_out, Tensor gate, Tensor up, Activation act) override;
  void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& s) override;

 private:
  int index_;
  std::string name_;
  CUstream_st* stream_ = nullptr;
  void* reduce_buffer_ = nullptr;  // sum_squares' partial sums, allocated on first use
};

// Number of usable CUDA devices: 0 when the runtime reports any error (no driver, driver too old for
// this runtime, no device). Computed once.
int device_count();
// The backend of device `index` (created on first use). Throws sinklab::Error when there is no such
// usable device.
Backend& backend(int index);

}  // namespace sinklab::cuda
