// The CUDA backend: one CudaBackend per device, created on first use, each with its own stream on
// which every op of that device is ordered. Ops are asynchronous with respect to the host except where
// host memory is involved (copies to/from the CPU, sum_squares' result): those return once finished.
// A backend's ops are issued from one host thread at a time (its scratch buffers are shared by them).
//
// What runs on the device (everything else keeps the Backend default, which throws "no <op> kernel"):
//   memory ops: fill, copy (H2D / D2H / D2D / peer; dtype conversion f32/f64/bf16/f16/i32 as the CPU
//   does it), add, accumulate, scale, sum_squares, max_abs, column_sum (bit-identical to the CPU), fill_normal, fill_uniform (bit-identical to the CPU:
//   same Philox stream, element i in row-major logical order), and the elementwise ops over the shared
//   *_math.hpp functions: activation_forward/backward, gated_forward/backward, adamw_update;
//   linear_forward/backward and matmul on cuBLASLt (linear.cu: f32, or bf16 inputs with f32
//   accumulation); embedding_forward/backward (embedding.cu, no float atomics); rmsnorm/layernorm
//   forward/backward (norms.cu); rope_forward/backward (rope.cu, cached tables); cross_entropy
//   (cross_entropy.cu); attention_forward/backward/probs, every AttentionSpec variant (attention.cu:
//   reference kernels, deterministic, no T x T storage); Jamba's causal_conv1d_forward,
//   selective_scan_forward, moe_router_topk, index_add_rows (mamba.cu, no float atomics).
// Activation operands are f32 or bf16 ("bf16 storage", ops.hpp: widened on load, rounded on store), the
// matmuls take bf16 inputs; statistics, norm weights, parameter gradients and optimizer state are f32 (f16
// and f64 are storage for copy/fill). Also reduce_into, add_rmsnorm_forward and the multi-tensor ops
// (multi_tensor.cu). Tensors may have strided leading dimensions with a contiguous last dimension, as on
// the CPU.
//
// Errors a kernel finds in the data (an out-of-range token id or target) cannot throw where they are
// found without making every call wait for the device. The kernel records the first one in a device
// word, whose copy into pinned host memory is queued right behind it; the backend throws it, naming
// the op, at the next point where it waits for the device anyway (synchronize(), a copy to the host,
// sum_squares). Until then the op's output rows for the bad entries are zero.
//
// This header is included by host-only translation units (backend.cpp): no CUDA header here.
#pragma once

#include <cstdint>
#include <string>

#include "backend/backend_interface.hpp"
#include "backend/device_probe.hpp"

struct CUstream_st;  // cudaStream_t is CUstream_st*

namespace sinklab::cuda {

struct GemmContext;
struct RopeTables;
struct CudnnContext;
struct MultiTensorTables;

class CudaBackend final : public Backend {
 public:
  explicit CudaBackend(int index);
  ~CudaBackend() override;
  CudaBackend(const CudaBackend&) = delete;
  CudaBackend& operator=(const CudaBackend&) = delete;

  const char* name() const override { return name_.c_str(); }
  int index() const { return index_; }
  // The GPU's product name (cudaDeviceProp::name), e.g. "NVIDIA H100 80GB HBM3".
  std::string device_name() const override { return device_name_; }
  // The stream every op of this device runs on (a blocking stream: ordered with the legacy default
  // stream too, so code that uses stream 0 stays correct).
  CUstream_st* stream() const { return stream_; }
  void* compute_stream() const override { return stream_; }

  void* allocate(size_t bytes) override;
  void deallocate(void* ptr) override;
  void synchronize() override;

  // The ops of op_list.hpp's OP lines (the files named there); the CPU_ONLY_OP ones keep the Backend
  // default, which throws "no <op> kernel".
  SINKLAB_OPS(SINKLAB_OP_OVERRIDE, SINKLAB_OP_INHERITED)

  // ---- state shared by the op files (cuda_backend.cu) ----
  // Grow-only device scratch buffers, one per use, so that no allocation happens once the shapes of a
  // training step have been seen. Growing waits for the stream (queued work may still read the old
  // buffer). Two buffers in use by one op need two slots.
  enum class ScratchSlot : int {
    column_partials, embedding_sort, embedding_sort_temp, rope_table, attention,
    attention_fast,  // the cuDNN / flash kernels' bf16 copies, stats and workspace
    index_add_sort, index_add_sort_temp,
    count
  };
  void* scratch(ScratchSlot slot, size_t bytes);
  // Data errors recorded by kernels (see above): one slot per op that can record one. A kernel gets
  // the device word; `bound` is what the message names (the vocabulary). After the launch,
  // publish_data_error queues the word's copy to the host.
  enum class DataErrorSlot : int { embedding_forward, embedding_backward, cross_entropy, index_add_rows, count };
  unsigned long long* data_error_word(DataErrorSlot slot, long long bound);
  void publish_data_error(DataErrorSlot slot);
  // Throws the first recorded data error (and clears it). Valid once the stream has drained: called
  // right after the backend's own synchronisations.
  void check_data_errors();

 private:
  int index_;
  std::string name_;
  std::string device_name_;
  CUstream_st* stream_ = nullptr;
  void* reduce_buffer_ = nullptr;  // the reductions' partial results (memory.cu), allocated on first use
  double* launch_reduce(Tensor x, const char* op, Reduction kind, double* out, bool accumulate);
  double reduce_to_host(Tensor x, const char* op, Reduction kind);
  struct ScratchBuffer {
    void* ptr = nullptr;
    size_t bytes = 0;
  };
  ScratchBuffer scratch_[int(ScratchSlot::count)];
  unsigned long long* data_errors_host_ = nullptr;    // pinned copies, ~0ull = no error
  unsigned long long* data_errors_device_ = nullptr;  // the words kernels write
  long long data_error_bound_[int(DataErrorSlot::count)] = {};
  // cuBLASLt handle, cuBLAS handle (fallback) and their workspace (linear.cu), and the rope tables
  // (rope.cu): created on first use, kept for the backend's life (backends are never destroyed).
  GemmContext* gemm_ = nullptr;
  RopeTables* rope_ = nullptr;
  CudnnContext* cudnn_ = nullptr;  // cuDNN handle and SDPA graph cache (attention_cudnn.cpp)
  MultiTensorTables* multi_tensor_ = nullptr;  // the multi-tensor ops' uploaded chunk tables (multi_tensor.cu)

 public:
  GemmContext& gemm_context();  // linear.cu
  RopeTables& rope_tables();    // rope.cu
  CudnnContext& cudnn_context();  // attention_cudnn.cpp
  MultiTensorTables& multi_tensor_tables();  // multi_tensor.cu
};

// Number of usable CUDA devices: 0 when the runtime reports any error (no driver, driver too old for
// this runtime, no device). Computed once.
int device_count();
// cudnnGetVersion() of the loaded cuDNN library (e.g. 91900).
int64_t cudnn_library_version();
// The runtime's and the libraries' facts about device `index` (device_facts.cu; backend/device_probe.hpp).
// Throws sinklab::Error when there is no such usable device.
DeviceFacts device_facts(int index);
// The backend of device `index` (created on first use). Throws sinklab::Error when there is no such
// usable device.
Backend& backend(int index);

}  // namespace sinklab::cuda
