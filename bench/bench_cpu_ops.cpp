// The non-GEMM forward ops of the GPT-NeoX survey forward (bench/hf_forward.cpp) on the CPU backend in
// f32, one at a time, at the shapes of one Pythia layer for B*T = 1280 tokens (batch 20 x 64):
// LayerNorm [N,d], the bias of linear_forward (with bias minus without: the gemm is the same), exact
// GELU in place on [N,F], partial rotary in place on the q head view of the fused [B,T,H,3,dh] QKV
// buffer, residual add [N,d]. Each op runs `reps` times; the best and the median call are printed (on a
// machine shared with other jobs the best is the op's own cost, the median shows what the load adds).
//
// Usage: bench_cpu_ops [reps]   (threads: OMP_NUM_THREADS)
// Output, one line per op and shape: "<shape> <op> best_us=<> median_us=<>"
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <vector>

#include "backend/memory.hpp"
#include "backend/ops.hpp"

using namespace sinklab;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

struct Timing {
  double best = 0.0, median = 0.0;
};

Timing time_op(int reps, const std::function<void()>& fn) {
  for (int w = 0; w < 3; ++w) fn();  // warm-up
  std::vector<double> t(static_cast<size_t>(reps));
  for (int r = 0; r < reps; ++r) {
    const double t0 = now();
    fn();
    t[size_t(r)] = now() - t0;
  }
  std::sort(t.begin(), t.end());
  return {t.front(), t[t.size() / 2]};
}

void report(const char* shape, const char* op, Timing t) {
  std::printf("%-12s %-18s best_us=%9.1f median_us=%9.1f\n", shape, op, t.best * 1e6, t.median * 1e6);
}

void run(const char* shape, int64_t d, int64_t H, int64_t F, int reps) {
  const int64_t B = 20, T = 64, N = B * T, dh = d / H;
  auto buf = [](std::initializer_list<int64_t> dims) { return Buffer::for_tensor(DType::f32, dims); };
  Buffer x_b = buf({N, d}), y_b = buf({N, d}), z_b = buf({N, d}), mean_b = buf({N}), rstd_b = buf({N});
  Buffer w_b = buf({d}), b_b = buf({d}), ffn_b = buf({N, F}), qkv_b = buf({N, 3 * d});
  Buffer wfc_b = buf({F, d}), bfc_b = buf({F});
  Tensor x = x_b.view(DType::f32, {N, d}), y = y_b.view(DType::f32, {N, d}), z = z_b.view(DType::f32, {N, d});
  Tensor mean = mean_b.view(DType::f32, {N}), rstd = rstd_b.view(DType::f32, {N});
  Tensor w = w_b.view(DType::f32, {d}), b = b_b.view(DType::f32, {d});
  Tensor ffn = ffn_b.view(DType::f32, {N, F}), qkv = qkv_b.view(DType::f32, {N, 3 * d});
  Tensor wfc = wfc_b.view(DType::f32, {F, d}), bfc = bfc_b.view(DType::f32, {F});
  ops::fill_normal(x, 1, 0, 0.5, 1.0);
  ops::fill_normal(z, 1, 1, 0.0, 1.0);
  ops::fill_normal(w, 1, 2, 1.0, 0.1);
  ops::fill_normal(b, 1, 3, 0.0, 0.1);
  ops::fill_normal(qkv, 1, 4, 0.0, 1.0);
  ops::fill_normal(wfc, 1, 5, 0.0, 0.05);
  ops::fill_normal(bfc, 1, 6, 0.0, 0.1);
  // q of the GPT-NeoX fused QKV [N, H*3*dh] (as src/hf/gpt_neox.cpp's interleaved()): [B,T,H,dh], strided.
  Tensor q = qkv.split_dim(0, B, T).split_dim(2, H, 3 * dh).slice(3, 0, dh);
  ops::RopeConfig rope;
  rope.rotary_dim = int(dh / 4);
  rope.base = 10000.0;

  report(shape, "layernorm_forward", time_op(reps, [&] { ops::layernorm_forward(y, mean, rstd, x, w, b, 1e-5); }));
  Timing fc_bias = time_op(reps, [&] { ops::linear_forward(ffn, x, wfc, bfc); });
  Timing fc_plain = time_op(reps, [&] { ops::linear_forward(ffn, x, wfc, Tensor{}); });
  report(shape, "linear_fc+bias", fc_bias);
  report(shape, "linear_fc", fc_plain);
  ops::fill_normal(ffn, 1, 7, 0.0, 1.0);
  report(shape, "gelu_exact", time_op(reps, [&] { ops::activation_forward(ffn, ffn, ops::Activation::gelu_exact); }));
  report(shape, "gelu_tanh", time_op(reps, [&] { ops::activation_forward(ffn, ffn, ops::Activation::gelu_tanh); }));
  report(shape, "rope_forward(q)", time_op(reps, [&] { ops::rope_forward(q, q, Tensor{}, rope); }));
  report(shape, "add", time_op(reps, [&] { ops::add(y, x, z); }));
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 200;
  run("pythia-14m", 128, 4, 512, reps);
  run("pythia-160m", 768, 12, 3072, reps);
  return 0;
}
