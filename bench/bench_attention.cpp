// Causal softmax attention, forward + backward, on the CPU backend in f32: tokens/s for the shapes of the
// project's small and GPT-2-small-like models (d=128,H=4 and d=768,H=8, T=256, B*T=4096 tokens). q, k, v
// are head slices of one fused [B*T, 3d] QKV buffer (as the transformer lays them out), and so are their
// gradients. Compare with bench/peers/torch_attention.py (bench/run_attention.sh prints the ratio).
//
// Usage: bench_attention [reps]   (threads: OMP_NUM_THREADS)
// Output, one line per shape: "attention d=<d> H=<H> T=<T> B=<B> fwd_ms=<> bwd_ms=<> tokens_per_s=<>"
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include "backend/memory.hpp"
#include "backend/ops.hpp"

using namespace sinklab;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

Tensor heads(const Tensor& fused, int64_t col, int64_t H, int64_t dh) {
  return fused.slice(2, col, H * dh).split_dim(2, H, dh);
}

void run(int64_t d, int64_t H, int64_t T, int64_t tokens, int reps) {
  const int64_t B = tokens / T, dh = d / H;
  std::vector<float> qkv(size_t(B * T * 3 * d)), dqkv(qkv.size()), out(size_t(B * T * d)), dout(out.size());
  std::vector<float> stats(size_t(B * H * T));
  Tensor fused(qkv.data(), DType::f32, {B, T, 3 * d}), dfused(dqkv.data(), DType::f32, {B, T, 3 * d});
  Tensor q = heads(fused, 0, H, dh), k = heads(fused, d, H, dh), v = heads(fused, 2 * d, H, dh);
  Tensor dq = heads(dfused, 0, H, dh), dk = heads(dfused, d, H, dh), dv = heads(dfused, 2 * d, H, dh);
  Tensor o(out.data(), DType::f32, {B, T, H, dh}), go(dout.data(), DType::f32, {B, T, H, dh});
  Tensor st(stats.data(), DType::f32, {B, H, T});
  ops::fill_normal(fused, 1, 0, 0.0, 1.0);
  ops::fill_normal(go, 1, 1, 0.0, 1.0);
  ops::AttentionSpec spec;
  for (int w = 0; w < 2; ++w) {  // warm-up
    ops::attention_forward(o, st, q, k, v, spec);
    ops::attention_backward(dq, dk, dv, go, q, k, v, o, st, spec);
  }
  double best_f = 1e30, best_b = 1e30;
  for (int r = 0; r < reps; ++r) {
    double t0 = now();
    ops::attention_forward(o, st, q, k, v, spec);
    double t1 = now();
    ops::attention_backward(dq, dk, dv, go, q, k, v, o, st, spec);
    double t2 = now();
    best_f = std::min(best_f, t1 - t0);
    best_b = std::min(best_b, t2 - t1);
  }
  std::printf("attention d=%lld H=%lld T=%lld B=%lld fwd_ms=%.3f bwd_ms=%.3f tokens_per_s=%.0f\n", (long long)d,
              (long long)H, (long long)T, (long long)B, best_f * 1e3, best_b * 1e3,
              double(B * T) / (best_f + best_b));
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 10;
  std::printf("# sinklab attention (cpu, f32, causal softmax), %d threads, best of %d\n", omp_get_max_threads(), reps);
  run(128, 4, 256, 4096, reps);
  run(768, 8, 256, 4096, reps);
  return 0;
}
