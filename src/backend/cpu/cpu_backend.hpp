// The CPU backend: the verified reference. Simple loops over the shared *_math.hpp functions,
// OpenMP across rows, BLAS for matmuls. Every op runs in f32 and in f64 (for finite differences).
// The op bodies live in one .cpp per op family (memory.cpp, linear.cpp, norms.cpp, ...).
#pragma once

#include "backend/backend_interface.hpp"

namespace sinklab {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr) override;

  // Every op of op_list.hpp: memory.cpp, linear.cpp, embedding.cpp, norms.cpp, rope.cpp, activations.cpp,
  // cross_entropy.cpp, adamw.cpp, attention.cpp, mamba.cpp.
  SINKLAB_OPS(SINKLAB_OP_OVERRIDE, SINKLAB_OP_OVERRIDE)
};

}  // namespace sinklab
