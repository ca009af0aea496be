// Attention TFLOP/s on a GPU (issue #14's acceptance shape: B=8, H=16, T=2048, dh=128, causal), forward and
// backward, for each CUDA kernel through the op API in one run: cuDNN softmax, the flash kernel's sigmoid
// (norm one, bias -log T: the paper's sink-free operation), and the reference kernel (softmax).
// bench/run_attention_gpu.sh runs it beside PyTorch's SDPA (bench/peers/torch_sdpa_gpu.py) and prints the
// ratios the issue sets targets for.
//
// FLOPs counted as FlashAttention does: forward 4 B H T^2 dh / 2 for a causal mask (QK^T and PV, half the
// pairs), backward 2.5x the forward (five products instead of two). Times include what the model pays per
// call: the f32 -> bf16 conversions of the fast kernels (the CUDA backend is f32 until bf16 --precision).
// Each time is the median of `reps` timed calls after 2 warm-up calls, the device synchronised around each.
//
// Usage: bench_attention_gpu [reps] [reference_reps] [dh]   (dh 128 by default; needs a CUDA device)
// Output, one line per kernel: "attention_gpu kernel=<> sim=<> fwd_ms=<> bwd_ms=<> fwd_tflops=<> bwd_tflops=<>"
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

void run(ops::AttnKernel kernel, ops::AttnSim sim, int reps, int64_t dh) {
  const int64_t B = 8, H = 16, T = 2048;
  const Device dev = Device::cuda(0);
  Backend& be = backend_for(dev);
  auto make = [&](std::initializer_list<int64_t> shape) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    Buffer buf(size_t(n) * sizeof(float), dev);
    std::vector<int64_t> dims(shape);
    Tensor t = Tensor::contiguous_view(buf.data(), DType::f32, dims.data(), int(dims.size()), dev);
    return std::make_pair(std::move(buf), t);
  };
  auto [qb, q] = make({B, T, H, dh});
  auto [kb, k] = make({B, T, H, dh});
  auto [vb, v] = make({B, T, H, dh});
  auto [ob, o] = make({B, T, H, dh});
  auto [gob, go] = make({B, T, H, dh});
  auto [dqb, dq] = make({B, T, H, dh});
  auto [dkb, dk] = make({B, T, H, dh});
  auto [dvb, dv] = make({B, T, H, dh});
  auto [sb, st] = make({B, H, T});
  ops::fill_normal(q, 7, 0, 0.0, 1.0);  // random data: zeros can run faster than real inputs
  ops::fill_normal(k, 7, 1, 0.0, 1.0);
  ops::fill_normal(v, 7, 2, 0.0, 1.0);
  ops::fill_normal(go, 7, 3, 0.0, 1.0);
  ops::AttentionSpec spec;
  spec.kernel = kernel;
  spec.sim = sim;
  if (sim == ops::AttnSim::sigmoid) {
    spec.norm = ops::AttnNorm::one;
    spec.sigmoid_bias = -std::log(double(T));
  }
  const ops::AttnKernelChoice c = ops::choose_attention_kernel(spec, ops::attn_call_of(q, false));
  for (int w = 0; w < 2; ++w) {
    ops::attention_forward(o, st, q, k, v, spec);
    ops::attention_backward(dq, dk, dv, go, q, k, v, o, st, spec);
  }
  const double fwd = median_ms(be, reps, [&] { ops::attention_forward(o, st, q, k, v, spec); });
  const double bwd = median_ms(be, reps, [&] { ops::attention_backward(dq, dk, dv, go, q, k, v, o, st, spec); });
  const double flops_fwd = 4.0 * double(B * H) * double(T) * double(T) * double(dh) / 2.0;
  if (kernel == ops::AttnKernel::cudnn) {  // what the f32 <-> bf16 copies around the fast kernels cost
    Buffer hb(size_t(B * T * H * dh) * 2, dev);
    const int64_t dims[4] = {B, T, H, dh};
    Tensor q16 = Tensor::contiguous_view(hb.data(), DType::bf16, dims, 4, dev);
    const double convert = median_ms(be, reps, [&] { ops::copy(q16, q); });
    std::printf("attention_gpu_copy f32->bf16 of q [%lld,%lld,%lld,%lld]: %.3f ms (%.0f GB/s read + write); the "
                "cuDNN forward makes 4 such copies and 1 of the stats, the backward 6 and 2\n",
                (long long)B, (long long)T, (long long)H, (long long)dh, convert,
                double(B * T * H * dh) * 6.0 / (convert * 1e-3) / 1e9);
  }
  std::printf("attention_gpu kernel=%s sim=%s B=%lld H=%lld T=%lld dh=%lld fwd_ms=%.3f bwd_ms=%.3f fwd_tflops=%.1f "
              "bwd_tflops=%.1f\n",
              ops::attn_kernel_name(c.kernel), sim == ops::AttnSim::exp ? "softmax" : "sigmoid", (long long)B,
              (long long)H, (long long)T, (long long)dh, fwd, bwd, flops_fwd / (fwd * 1e-3) / 1e12,
              2.5 * flops_fwd / (bwd * 1e-3) / 1e12);
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
    run(ops::AttnKernel::cudnn, ops::AttnSim::exp, reps, dh);
    run(ops::AttnKernel::flash, ops::AttnSim::sigmoid, reps, dh);
    run(ops::AttnKernel::reference, ops::AttnSim::exp, ref_reps, dh);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "bench_attention_gpu: error: %s\n", e.what());
    return 1;
  }
  return 0;
}
