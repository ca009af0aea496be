// Arena: a bump allocator over memory someone else owns (a Buffer). Activations of one training step
// are carved out of it and released all at once with reset(); peak() reports the high-water mark.
#pragma once

#include <cstddef>
#include <initializer_list>

#include "core/tensor.hpp"

namespace sinklab {

class Arena {
 public:
  Arena() = default;
  Arena(void* base, size_t capacity, Device device) : base_(static_cast<char*>(base)), capacity_(capacity), device_(device) {}

  Tensor alloc(DType dt, std::initializer_list<int64_t> dims) {
    Tensor t(nullptr, dt, dims, device_);
    size_t bytes = (t.nbytes() + kAlign - 1) / kAlign * kAlign;
    SL_CHECK(used_ + bytes <= capacity_, "arena exhausted: %zu + %zu bytes > capacity %zu", used_, bytes,
             capacity_);
    t.data = base_ + used_;
    used_ += bytes;
    if (used_ > peak_) peak_ = used_;
    return t;
  }
  void reset() { used_ = 0; }
  size_t used() const { return used_; }
  size_t peak() const { return peak_; }
  size_t capacity() const { return capacity_; }

 private:
  static constexpr size_t kAlign = 64;
  char* base_ = nullptr;
  size_t capacity_ = 0;
  size_t used_ = 0;
  size_t peak_ = 0;
  Device device_;
};

}  // namespace sinklab
