#include "backend/memory.hpp"

#include "backend/ops.hpp"

namespace sinklab {

Tensor staged_copy(Buffer& slot, Tensor t, Device device) {
  if (!t.defined() || t.device == device) return t;
  slot.ensure(t.nbytes(), device);
  Tensor copy = Tensor::contiguous_view(slot.data(), t.dtype, t.shape.data(), t.ndim, device);
  ops::copy(copy, t);
  return copy;
}

}  // namespace sinklab
