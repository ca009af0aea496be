// The device probe's facts on CUDA (backend/device_probe.hpp): the runtime's device properties and
// memory, the driver's and runtime's versions, and the versions of the cuBLASLt, cuDNN and NCCL loaded.
#include <cublasLt.h>
#include <nccl.h>

#include "backend/cuda/cuda_common.hpp"

namespace sinklab::cuda {

DeviceFacts device_facts(int index) {
  backend(index);  // throws naming the device when it is not usable
  DeviceGuard guard(index);
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, index));
  DeviceFacts f;
  f.name = prop.name;
  f.compute_major = prop.major;
  f.compute_minor = prop.minor;
  f.multiprocessors = prop.multiProcessorCount;
  size_t free_bytes = 0, total_bytes = 0;
  CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  f.memory_total = int64_t(total_bytes);
  f.memory_free = int64_t(free_bytes);
  CUDA_CHECK(cudaDriverGetVersion(&f.driver_version));
  CUDA_CHECK(cudaRuntimeGetVersion(&f.runtime_version));
  f.cublaslt_version = int64_t(cublasLtGetVersion());
  f.cudnn_version = cudnn_library_version();
  int nccl = 0;
  SL_CHECK(ncclGetVersion(&nccl) == ncclSuccess, "ncclGetVersion failed");
  f.nccl_version = nccl;
  return f;
}

}  // namespace sinklab::cuda
