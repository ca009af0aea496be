#include "backend/memory.hpp"

#include <algorithm>

#include "backend/ops.hpp"

namespace sinklab {

Tensor staged_copy(Buffer& slot, Tensor t, Device device) {
  if (!t.defined() || t.device == device) return t;
  if (slot.bytes() < t.nbytes() || !(slot.device() == device)) {
    slot = Buffer();  // free the old block before taking the new one
    slot = Buffer(std::max<size_t>(t.nbytes(), 64), device);
  }
  Tensor copy = Tensor::contiguous_view(slot.data(), t.dtype, t.shape.data(), t.ndim, device);
  ops::copy(copy, t);
  return copy;
}

}  // namespace sinklab
