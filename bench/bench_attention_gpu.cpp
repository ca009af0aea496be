// Attention TFLOP/s on a GPU (issue #55's shape: B=8, H=16, T=2048, causal), forward and backward, for each
// CUDA kernel through the op API in one run, with the tensors the --precision bf16 training step hands the op:
// q, k, v bf16 head views of one fused projection buffer [B*T, 3 H dh], d_q, d_k, d_v views of one fused
// gradient buffer, out and d_out bf16, stats f32. The kernels: cuDNN softmax, the flash kernel's sigmoid (norm
// one, bias -log T: the paper's sink-free operation), the GEMM path's sigmoid (the same spec, beside PyTorch's
// eager sigmoid attention) and its softmax with a p-norm (p = 2, a variant only it runs), and the reference
// kernel (softmax, f32 tensors: it takes no bf16; one rep, it is slow by design).
// bench/run_attention_gpu.sh runs it beside PyTorch's SDPA and eager sigmoid attention (bench/peers/) and
// prints the ratios the issue sets targets for.
//
// FLOPs counted as FlashAttention does: forward 4 B H T^2 dh / 2 for a causal mask (QK^T and PV, half the
// pairs), backward 2.5x the forward (five products instead of two), whatever a kernel computes (the GEMM path
// multiplies the whole T x T square). Each time is the median of `reps` timed calls after 2 warm-up calls, the
// device synchronised around each; the first call's time (cuDNN's graph build, the launches' first
// cudaFuncSetAttribute) is printed apart as first_ms.
//
// Usage: bench_attention_gpu [reps] [reference_reps] [dh]   (dh 128 by default; needs a CUDA device)
// Output, one line per kernel: "attention_gpu kernel=<> sim=<> ... first_ms=<> fwd_ms=<> bwd_ms=<> fwd_tflops=<>
// bwd_tflops=<>"
#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/attention_dispatch.hpp"
#include "backend/backend.hpp"
#include "backend/memory.hpp"
#include "backend/ops.hpp"

using namespace sinklab;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

template <class F>
double median_ms(Backend& be, int reps, F&& f) {
  std::vector<double> t;
  for (int r = 0; r < reps; ++r) {
    be.synchronize();
    const double t0 = now();
    f();
    be.synchronize();
    t.push_back((now() - t0) * 1e3);
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

// A device buffer and a contiguous view of it.
struct DevTensor {
  Buffer buf;
  Tensor t;
  DevTensor(DType dt, std::vector<int64_t> dims, Device dev)
      : buf(size_t(numel(dims)) * size_t(dtype_size(dt)), dev),
        t(Tensor::contiguous_view(buf.data(), dt, dims.data(), int(dims.size()), dev)) {}
  static int64_t numel(const std::vector<int64_t>& dims) {
    int64_t n = 1;
    for (int64_t d : dims) n *= d;
    return n;
  }
};

enum class Variant { softmax, sigmoid, softmax_p2 };

void run(ops::AttnKernel kernel, Variant variant, DType dt, int reps, int64_t dh) {
  const int64_t B = 8, H = 16, T = 2048;
  const Device dev = Device::cuda(0);
  Backend& be = backend_for(dev);
  DevTensor qkv(dt, {B, T, 3 * H, dh}, dev), d_qkv(dt, {B, T, 3 * H, dh}, dev);
  DevTensor o(dt, {B, T, H, dh}, dev), go(dt, {B, T, H, dh}, dev), st(DType::f32, {B, H, T}, dev);
  {  // random data (zeros can run faster than real inputs), drawn in f32
    DevTensor r(DType::f32, {B, T, 3 * H, dh}, dev), rg(DType::f32, {B, T, H, dh}, dev);
    ops::fill_normal(r.t, 7, 0, 0.0, 1.0);
    ops::fill_normal(rg.t, 7, 3, 0.0, 1.0);
    ops::copy(qkv.t, r.t);
    ops::copy(go.t, rg.t);
  }
  const Tensor q = qkv.t.slice(2, 0, H), k = qkv.t.slice(2, H, H), v = qkv.t.slice(2, 2 * H, H);
  const Tensor dq = d_qkv.t.slice(2, 0, H), dk = d_qkv.t.slice(2, H, H), dv = d_qkv.t.slice(2, 2 * H, H);
  ops::AttentionSpec spec;
  spec.kernel = kernel;
  if (variant == Variant::sigmoid) {
    spec.sim = ops::AttnSim::sigmoid;
    spec.norm = ops::AttnNorm::one;
    spec.sigmoid_bias = -std::log(double(T));
  } else if (variant == Variant::softmax_p2) {
    spec.norm = ops::AttnNorm::p_norm;
    spec.norm_p = 2.0;
  }
  const ops::AttnKernelChoice c = ops::choose_attention_kernel(spec, ops::attn_call_of(q, false));
  be.synchronize();
  const double t0 = now();
  ops::attention_forward(o.t, st.t, q, k, v, spec);
  ops::attention_backward(dq, dk, dv, go.t, q, k, v, o.t, st.t, spec);
  be.synchronize();
  const double first = (now() - t0) * 1e3;
  ops::attention_forward(o.t, st.t, q, k, v, spec);
  ops::attention_backward(dq, dk, dv, go.t, q, k, v, o.t, st.t, spec);
  const double fwd = median_ms(be, reps, [&] { ops::attention_forward(o.t, st.t, q, k, v, spec); });
  const double bwd = median_ms(be, reps, [&] { ops::attention_backward(dq, dk, dv, go.t, q, k, v, o.t, st.t, spec); });
  const double flops_fwd = 4.0 * double(B * H) * double(T) * double(T) * double(dh) / 2.0;
  const char* sim = variant == Variant::sigmoid ? "sigmoid" : variant == Variant::softmax ? "softmax" : "softmax_p2";
  std::printf("attention_gpu kernel=%s sim=%s dtype=%s B=%lld H=%lld T=%lld dh=%lld first_ms=%.3f fwd_ms=%.3f "
              "bwd_ms=%.3f fwd_tflops=%.1f bwd_tflops=%.1f\n",
              ops::attn_kernel_name(c.kernel), sim, dtype_name(dt), (long long)B, (long long)H, (long long)T,
              (long long)dh, first, fwd, bwd, flops_fwd / (fwd * 1e-3) / 1e12, 2.5 * flops_fwd / (bwd * 1e-3) / 1e12);
  std::fflush(stdout);
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 20;
  const int ref_reps = argc > 2 ? std::atoi(argv[2]) : 1;
  const int64_t dh = argc > 3 ? std::atoll(argv[3]) : 128;
  if (reps < 1 || ref_reps < 1 || dh < 1) {
    std::fprintf(stderr, "bench_attention_gpu: reps, reference_reps and dh must be positive\n");
    return 2;
  }
  if (!cuda_available()) {
    std::fprintf(stderr, "bench_attention_gpu: no usable CUDA device (or a build without CUDA)\n");
    return 3;
  }
  try {
    run(ops::AttnKernel::cudnn, Variant::softmax, DType::bf16, reps, dh);
    run(ops::AttnKernel::flash, Variant::sigmoid, DType::bf16, reps, dh);
    run(ops::AttnKernel::gemm, Variant::sigmoid, DType::bf16, reps, dh);
    run(ops::AttnKernel::gemm, Variant::softmax_p2, DType::bf16, reps, dh);
    run(ops::AttnKernel::reference, Variant::softmax, DType::f32, ref_reps, dh);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention_gpu: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
