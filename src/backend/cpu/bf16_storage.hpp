// bf16 storage on the CPU (ops.hpp, "bf16 storage"), for every op at once: the backend that backend_for
// hands out for CPU tensors. An op with no bf16 tensor among its operands goes straight to CpuBackend
// (the f32 and f64 paths are untouched). Otherwise each bf16 operand is read into an f32 copy (widening is
// exact), CpuBackend's f32 kernel runs on the copies, and every element the kernel changed is rounded
// back into the bf16 tensor (round to nearest even). So an op computes on bf16 data exactly what it
// computes on f32 data holding the same values, every input is read before any output is written, and
// the CPU stays the reference the CUDA kernels (which read and write bf16 directly) are tested against.
// Two operands that are the same view (an in-place call) share one copy. copy, the fills and the linear
// products handle bf16 themselves, and add_rmsnorm_forward is made of two ops that each go through here:
// those pass straight through.
#pragma once

#include "backend/cpu/cpu_backend.hpp"

namespace sinklab {

class CpuBf16Storage final : public Backend {
 public:
  const char* name() const override { return inner_.name(); }
  void* allocate(size_t bytes) override { return inner_.allocate(bytes); }
  void deallocate(void* ptr) override { inner_.deallocate(ptr); }
  SINKLAB_OPS(SINKLAB_OP_OVERRIDE, SINKLAB_OP_OVERRIDE)

 private:
  CpuBackend inner_;
};

}  // namespace sinklab
