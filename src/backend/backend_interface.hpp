// Backend: the op API as one interface per device, which the CPU and CUDA backends implement
// (cpu/cpu_backend.hpp, cuda/cuda_backend.hpp). Every op is a virtual whose default throws
// "no <op> kernel on <device>", so a backend implements what it has and the op API already has room
// for the rest (same signatures, device chosen at run time). ops.cpp forwards each ops:: call to the
// backend of its tensors' device and defines the defaults. The virtuals, their defaults, the forwarders
// and the backends' override declarations are all made from one list, op_list.hpp (where each op's
// declaration and kernels are: OPS.md). Documentation of each op: ops.hpp. Which backend serves a
// device (the factory): backend.hpp.
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

}  // namespace sinklab
