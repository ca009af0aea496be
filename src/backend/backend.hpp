// Backend: the op API as one interface per device. Every op is a virtual whose default throws
// "no <op> kernel on <device>", so a backend implements what it has and the op API already has room
// for the rest (same signatures, device chosen at run time). ops.cpp forwards each ops:: call to the
// backend of its tensors' device. The virtuals, their defaults, the forwarders and the backends'
// override declarations are all made from one list, op_list.hpp. Documentation of each op: ops.hpp.
#pragma once

#include <cstddef>
#include <functional>
#include <span>
#include <string>

#include "backend/op_list.hpp"
#include "backend/ops.hpp"

namespace sinklab {

using ops::Activation;
using ops::AdamWStep;
using ops::AttentionSpec;
using ops::FlatRanges;
using ops::Reduction;
using ops::RopeConfig;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  virtual void synchronize() {}
  // The device's product name (the GPU's, e.g. "NVIDIA H100 80GB HBM3"; the backend's name on the CPU):
  // MFU's peak is looked up by it.
  virtual std::string device_name() const { return name(); }
  // The stream the backend's ops run on (a cudaStream_t on CUDA, null on the CPU): what NCCL's
  // collectives are ordered with (parallel::make_communicator).
  virtual void* compute_stream() const { return nullptr; }

  // Every op of the API (op_list.hpp), each a virtual whose default throws "no <op> kernel on <device>".
#define SINKLAB_OP_VIRTUAL(ret, name, params, args) virtual ret name params;
  SINKLAB_OPS(SINKLAB_OP_VIRTUAL, SINKLAB_OP_VIRTUAL)
#undef SINKLAB_OP_VIRTUAL

 protected:
  [[noreturn]] void no_kernel(const char* op) const;
};

// The backend for a device (the CUDA one exists only in a SINKLAB_CUDA build; asking for it otherwise
// throws). The list form (an op's tensor operands; undefined ones are skipped) checks that every defined
// tensor lives on the same device; a copy between devices goes to the non-CPU side.
Backend& backend_for(Device device);
Backend& backend_for(std::span<const Tensor> tensors, const char* op);
bool cuda_available();  // a CUDA build and at least one usable device
// The device a --device flag ("cpu" | "cuda") names for this process: the CPU, or CUDA device
// gpu_for(visible devices) (parallel::World::local_gpu: one GPU per rank of the node). One line naming `flag`
// when the value is neither, the build has no CUDA, or no GPU is visible.
Device device_from_flag(const std::string& value, const char* flag, const std::function<int(int)>& gpu_for);
// The same for a kind already parsed (sinklab-pretrain's and sinklab-sft's --device, read with the
// other training settings): the one place a device request meets the machine.
Device resolve_device(DeviceKind kind, const char* flag, const std::function<int(int)>& gpu_for);
int cuda_device_count();  // usable CUDA devices (0 in a build without CUDA)
// cudnnGetVersion() of the loaded cuDNN (e.g. 91900); 0 in a build without CUDA.
int64_t cudnn_version();
// The CPU BLAS that multiplies matrices here, e.g. "OpenBLAS 0.3.21 (Zen kernels, 2 threads)". Its
// kernels differ per CPU (OpenBLAS picks them at run time; OPENBLAS_CORETYPE forces one) and give other
// last bits for the same GEMM: runs are bit-for-bit reproducible only with the same kernels and threads.
std::string cpu_blas_description();
// The description plus, when sinklab replaced OpenBLAS's own kernel choice at start-up
// (cpu/blas_kernels.hpp), what it replaced: the line every binary logs at start and results.h5 keeps.
std::string cpu_blas_summary();

}  // namespace sinklab
