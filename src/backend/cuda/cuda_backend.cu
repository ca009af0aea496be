// CUDA backend: devices, streams, allocation. The ops live in memory.cu and elementwise.cu.
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "backend/cuda/cuda_common.hpp"

namespace sinklab::cuda {

namespace {

struct DeviceCount {
  int count = 0;
  std::string error;  // why there is none, when the runtime said so
};

const DeviceCount& probe_devices() {
  static const DeviceCount result = [] {
    DeviceCount r;
    int n = 0;
    cudaError_t err = cudaGetDeviceCount(&n);
    if (err != cudaSuccess) {
      cudaGetLastError();  // leave no error behind for later calls
      r.error = std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
      return r;
    }
    r.count = n < 0 ? 0 : n;
    if (r.count == 0) r.error = "the CUDA runtime reports no device";
    return r;
  }();
  return result;
}

}  // namespace

int device_count() { return probe_devices().count; }

Backend& backend(int index) {
  const DeviceCount& devices = probe_devices();
  SL_CHECK(devices.count > 0, "tensor on cuda:%d, but no CUDA device is usable (%s)", index,
           devices.error.c_str());
  SL_CHECK(index >= 0 && index < devices.count, "tensor on cuda:%d, but only %d CUDA device%s usable",
           index, devices.count, devices.count == 1 ? " is" : "s are");
  // Created on first use, never destroyed: at static destruction the CUDA runtime may already be gone.
  static std::mutex mutex;
  static std::vector<CudaBackend*> backends(size_t(devices.count), nullptr);
  std::lock_guard<std::mutex> lock(mutex);
  if (!backends[size_t(index)]) backends[size_t(index)] = new CudaBackend(index);
  return *backends[size_t(index)];
}

CudaBackend::CudaBackend(int index) : index_(index), name_("cuda:" + std::to_string(index)) {
  DeviceGuard guard(index_);
  cudaStream_t s = nullptr;
  CUDA_CHECK(cudaStreamCreate(&s));
  stream_ = s;
}

CudaBackend::~CudaBackend() {
  if (stream_) {
    int previous = -1;
    if (cudaGetDevice(&previous) == cudaSuccess && cudaSetDevice(index_) == cudaSuccess) {
      (void)cudaStreamSynchronize(stream_);
      (void)cudaStreamDestroy(stream_);
      (void)cudaSetDevice(previous);
    }
  }
}

void* CudaBackend::allocate(size_t bytes) {
  DeviceGuard guard(index_);
  void* p = nullptr;
  cudaError_t err = cudaMalloc(&p, bytes ? bytes : 1);
  if (err != cudaSuccess) {
    cudaGetLastError();
    size_t free_bytes = 0, total_bytes = 0;
    (void)cudaMemGetInfo(&free_bytes, &total_bytes);
    cudaGetLastError();
    SL_FAIL("out of memory on %s allocating %zu bytes (%zu of %zu bytes free): %s", name(), bytes,
            free_bytes, total_bytes, cudaGetErrorString(err));
  }
  return p;
}

// Called from Buffer's destructor: never throws. A failure here (a device already in an error state)
// is reported by the next checked call instead.
void CudaBackend::deallocate(void* ptr) {
  if (!ptr) return;
  int previous = -1;
  if (cudaGetDevice(&previous) != cudaSuccess) return;
  if (previous != index_ && cudaSetDevice(index_) != cudaSuccess) return;
  // Work queued on this device's stream may still use the buffer.
  (void)cudaStreamSynchronize(stream_);
  (void)cudaFree(ptr);
  if (previous != index_) (void)cudaSetDevice(previous);
}

void CudaBackend::synchronize() {
  DeviceGuard guard(index_);
  CUDA_CHECK(cudaStreamSynchronize(stream_));
}

}  // namespace sinklab::cuda
