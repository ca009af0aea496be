// Buffer: owning storage on a device (host memory is 64-byte aligned). Tensors are views into it.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <utility>

#include "backend/backend.hpp"

namespace sinklab {

class Buffer {
 public:
  Buffer() = default;
  Buffer(size_t bytes, Device device) : device_(device), bytes_(bytes) {
    data_ = backend_for(device).allocate(bytes);
  }
  // A buffer holding exactly one tensor of this shape, and a view of it.
  static Buffer for_tensor(DType dt, std::initializer_list<int64_t> dims, Device device = Device::cpu()) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return Buffer(size_t(n) * dtype_size(dt), device);
  }
  ~Buffer() { release(); }
  Buffer(Buffer&& o) noexcept { *this = std::move(o); }
  Buffer& operator=(Buffer&& o) noexcept {
    if (this != &o) {
      release();
      data_ = std::exchange(o.data_, nullptr);
      bytes_ = std::exchange(o.bytes_, 0);
      device_ = o.device_;
    }
    return *this;
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  void* ptr_at(size_t byte_offset) const { return static_cast<char*>(data_) + byte_offset; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  // Afterwards holds at least `bytes` (and 64) on `device`: re-allocated when smaller or elsewhere, the old
  // block freed first (peak memory is one block, not two); the contents are not kept then. How every
  // scratch buffer that grows with the largest call so far is kept.
  void ensure(size_t bytes, Device device) {
    bytes = bytes < 64 ? 64 : bytes;
    if (data_ && bytes_ >= bytes && device_ == device) return;
    release();
    bytes_ = 0;  // (still true if the allocation below throws)
    data_ = backend_for(device).allocate(bytes);
    bytes_ = bytes;
    device_ = device;
  }
  Tensor view(DType dt, std::initializer_list<int64_t> dims) const {
    Tensor t(data_, dt, dims, device_);
    SL_CHECK(t.nbytes() <= bytes_, "view %s of %s needs %zu bytes, buffer has %zu", t.shape_str().c_str(),
             dtype_name(dt), t.nbytes(), bytes_);
    return t;
  }

 private:
  void release() {
    if (data_) backend_for(device_).deallocate(data_);
    data_ = nullptr;
  }
  void* data_ = nullptr;
  Device device_;
  size_t bytes_ = 0;
};

// A contiguous copy of t on `device`, made in `slot` (re-allocated on `device` when it is elsewhere or too
// small, kept for the next call): how a GPU model's small host-made inputs go up and the tensors its
// host-side steps read come down. t itself when it is undefined or already on `device`.
Tensor staged_copy(Buffer& slot, Tensor t, Device device);

}  // namespace sinklab
