// A CPU emulation of the CUDA subset that src/backend/cuda/attention.cu uses, so that its kernels'
// code runs without a GPU (tests/gpu/emulate_attention.sh; not part of CI, not a claim about a GPU).
// One std::thread per CUDA thread of a block; the blocks of a launch run one after another; __shared__
// arrays become function statics (one block at a time uses them), dynamic shared memory a NaN-filled
// buffer, __syncthreads a std::barrier of the block's threads. A kernel that lets threads diverge at a
// __syncthreads deadlocks here, as it would misbehave on the device. The "device" is host memory: the
// emulated cuda:0 backend allocates with operator new and runs fill/copy on the CPU backend. Device
// math differs: expf/logf are the host's (fexp), so the numbers are close to, not the same as, a GPU's.
#pragma once
#include <barrier>
#include <cmath>
#include <cstring>
#include <thread>
#include <vector>
#include "backend/backend.hpp"
#include "backend/op_checks.hpp"
#include "core/error.hpp"
#include "core/tensor.hpp"
#define __global__
#define __device__
#define __host__
struct EmuIdx { unsigned x = 0, y = 0, z = 0; };
inline thread_local EmuIdx threadIdx, blockIdx;
inline EmuIdx blockDim, gridDim;
namespace emu {
inline std::barrier<>* bar = nullptr;
inline std::vector<float> smem_buf;
inline float* dyn_smem() { return smem_buf.data(); }
template <class F> void launch(unsigned grid, unsigned block, size_t smem, void*, F fn) {
  smem_buf.assign(smem / sizeof(float) + 1, NAN);
  std::barrier<> b(block);
  bar = &b;
  blockDim.x = block;
  gridDim.x = grid;
  std::vector<std::thread> ts;
  for (unsigned t = 0; t < block; ++t)
    ts.emplace_back([&, t] {
      threadIdx.x = t;
      for (unsigned g = 0; g < grid; ++g) {
        blockIdx.x = g;
        fn();
        b.arrive_and_wait();
      }
    });
  for (auto& t : ts) t.join();
}
}  // namespace emu
inline void __syncthreads() { emu::bar->arrive_and_wait(); }
using cudaStream_t = void*;
enum cudaMemcpyKind { cudaMemcpyHostToDevice };
inline int cudaMemcpyAsync(void* d, const void* s, size_t n, cudaMemcpyKind, void*) { std::memcpy(d, s, n); return 0; }
#define CUDA_CHECK(x) (void)(x)
#define CUDA_CHECK_LAUNCH(x) (void)(x)
namespace sinklab::cuda {
inline constexpr int kThreads = 256;
inline unsigned grid_for(int64_t n) { int64_t b = (n + kThreads - 1) / kThreads; if (b > (1 << 20)) b = 1 << 20; return unsigned(b < 1 ? 1 : b); }
#define SL_GRID_LOOP(i, n) for (int64_t i = int64_t(blockIdx.x) * blockDim.x + threadIdx.x; i < (n); i += int64_t(blockDim.x) * gridDim.x)
struct DeviceGuard { explicit DeviceGuard(int) {} };
inline Tensor on_cpu(Tensor t) { if (t.defined()) t.device = Device::cpu(); return t; }
class CudaBackend final : public Backend {
 public:
  const char* name() const override { return "cuda:0"; }
  int index() const { return 0; }
  cudaStream_t stream() const { return nullptr; }
  void* allocate(size_t bytes) override { return ::operator new(bytes ? bytes : 1); }
  void deallocate(void* p) override { ::operator delete(p); }
  void fill(Tensor out, double v) override { backend_for(Device::cpu()).fill(on_cpu(out), v); }
  void copy(Tensor d, Tensor s) override { backend_for(Device::cpu()).copy(on_cpu(d), on_cpu(s)); }
  void attention_forward(Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v, const AttentionSpec& spec, Tensor probs) override;
  void attention_backward(Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor stats, const AttentionSpec& spec) override;
  void attention_probs(Tensor probs, Tensor q, Tensor k, const AttentionSpec& spec) override;
  enum class ScratchSlot : int { attention, count };
  void* scratch(ScratchSlot, size_t bytes) { if (scratch_.size() < bytes) scratch_.assign(bytes, char(0x7f)); return scratch_.data(); }
 protected:
  int index_ = 0;
  cudaStream_t stream_ = nullptr;
  std::vector<char> scratch_;
};
inline void check_device_f32(const CudaBackend&, const Tensor& t, const char* op, const char* arg) {
  SL_CHECK(t.device.is_cuda(), "%s: %s is on %s, expected cuda:0", op, arg, t.device.name().c_str());
  SL_CHECK(t.dtype == DType::f32, "%s: %s has dtype %s; the CUDA backend computes in f32 only", op, arg, dtype_name(t.dtype));
}
}  // namespace sinklab::cuda
