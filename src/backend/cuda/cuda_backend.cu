// CUDA backend: devices, streams, allocation, scratch buffers and the data errors kernels record. The
// ops live in memory.cu, elementwise.cu, linear.cu, embedding.cu, norms.cu, rope.cu, cross_entropy.cu,
// attention*.cu, mamba.cu.
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
  cudaDeviceProp prop{};
  CUDA_CHECK(cudaGetDeviceProperties(&prop, index_));
  device_name_ = prop.name;
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
  check_data_errors();
}

void* CudaBackend::scratch(ScratchSlot slot, size_t bytes) {
  ScratchBuffer& b = scratch_[int(slot)];
  if (bytes <= b.bytes && b.ptr) return b.ptr;
  DeviceGuard guard(index_);
  // Queued kernels may still use the old buffer.
  CUDA_CHECK(cudaStreamSynchronize(stream_));
  if (b.ptr) CUDA_CHECK(cudaFree(b.ptr));
  b.ptr = nullptr;
  b.bytes = 0;
  // 25 % headroom: a shape that grows a little (the last, shorter batch) does not reallocate again.
  const size_t want = bytes + bytes / 4 + 256;
  b.ptr = allocate(want);
  b.bytes = want;
  return b.ptr;
}

unsigned long long* CudaBackend::data_error_word(DataErrorSlot slot, long long bound) {
  constexpr size_t bytes = sizeof(unsigned long long) * size_t(DataErrorSlot::count);
  if (!data_errors_host_) {
    DeviceGuard guard(index_);
    void* host = nullptr;
    CUDA_CHECK(cudaHostAlloc(&host, bytes, cudaHostAllocPortable));
    data_errors_host_ = static_cast<unsigned long long*>(host);
    for (int i = 0; i < int(DataErrorSlot::count); ++i) data_errors_host_[i] = ~0ull;
    data_errors_device_ = static_cast<unsigned long long*>(allocate(bytes));
    CUDA_CHECK(cudaMemsetAsync(data_errors_device_, 0xff, bytes, stream_));  // ~0ull: no error
  }
  data_error_bound_[int(slot)] = bound;
  return data_errors_device_ + int(slot);
}

void CudaBackend::publish_data_error(DataErrorSlot slot) {
  CUDA_CHECK(cudaMemcpyAsync(data_errors_host_ + int(slot), data_errors_device_ + int(slot),
                             sizeof(unsigned long long), cudaMemcpyDeviceToHost, stream_));
}

// A recorded error word is (position << 32) | uint32(value): atomicMin keeps the first position.
void CudaBackend::check_data_errors() {
  if (!data_errors_host_) return;
  for (int i = 0; i < int(DataErrorSlot::count); ++i) {
    volatile unsigned long long* word = data_errors_host_ + i;
    const unsigned long long w = *word;
    if (w == ~0ull) continue;
    *word = ~0ull;
    {
      DeviceGuard guard(index_);
      CUDA_CHECK(cudaMemsetAsync(data_errors_device_ + i, 0xff, sizeof(unsigned long long), stream_));
    }
    const long long position = (long long)(w >> 32);
    const int value = int(uint32_t(w & 0xffffffffull));
    const long long bound = data_error_bound_[i];
    switch (DataErrorSlot(i)) {
      case DataErrorSlot::embedding_forward:
      case DataErrorSlot::embedding_backward:
        SL_FAIL("%s on %s: token id %d at position %lld is out of range [0, %lld)",
                DataErrorSlot(i) == DataErrorSlot::embedding_forward ? "embedding_forward" : "embedding_backward",
                name(), value, position, bound);
      case DataErrorSlot::cross_entropy:
        SL_FAIL("cross_entropy on %s: target %d of row %lld is outside the vocabulary [0, %lld) and is not "
                "ignore_index",
                name(), value, position, bound);
      case DataErrorSlot::index_add_rows:
        SL_FAIL("index_add_rows on %s: index %d at %lld is out of range [0, %lld)", name(), value, position, bound);
      case DataErrorSlot::count: break;
    }
  }
}

}  // namespace sinklab::cuda
