// Attention, forward + backward, on the CPU backend in f32.
//
// Default: causal softmax, tokens/s for the shapes of the project's small and GPT-2-small-like models
// (d=128,H=4 and d=768,H=8, T=256, B*T=4096 tokens). q, k, v are head slices of one fused [B*T, 3d] QKV
// buffer (as the transformer lays them out), and so are their gradients. Compare with
// bench/peers/torch_attention.py (bench/run_attention.sh prints the ratio).
// "variants": the attention variants of the paper's CPU-sized runs (sigmoid without normalisation, the
// sink logit, K biases, a sliding window, ...) at the tiny model's shape and the Bigram-Backcopy shape
// (d=256, H=1, one micro-batch of 32 x 256), each beside plain softmax in the same run.
//
// Usage: bench_attention [reps] [variants]   (threads: OMP_NUM_THREADS)
// Output, one line per shape (and variant): "attention d=<d> H=<H> T=<T> B=<B> [variant=<name>] fwd_ms=<>
// bwd_ms=<> tokens_per_s=<>"
#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "backend/memory.hpp"
#include "backend/ops.hpp"

using namespace sinklab;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

Tensor heads(const Tensor& fused, int64_t col, int64_t H, int64_t dh) {
  return fused.slice(2, col, H * dh).split_dim(2, H, dh);
}

struct Variant {
  const char* name;
  ops::AttentionSpec spec;  // sink_logit / d_sink_logit are made by run() when `sink` is set
  bool sink = false;
};

// The variants: plain softmax first (the reference of the ratios), then the paper's CPU-sized cells.
std::vector<Variant> variants() {
  auto with = [](const char* name, auto set) {
    Variant v{name, ops::AttentionSpec{}};
    set(v);
    return v;
  };
  using ops::AttnMask, ops::AttnNorm, ops::AttnSim;
  return {
      with("softmax", [](Variant&) {}),
      with("softmax_sink_logit", [](Variant& v) { v.sink = true; }),
      with("softmax_k_bias", [](Variant& v) { v.spec.lead_keys = 1; }),
      with("softmax_window64", [](Variant& v) { v.spec.mask = AttnMask::sliding_window; v.spec.window = 64; }),
      with("softmax_alibi", [](Variant& v) { v.spec.pos_bias = ops::AttnPosBias::alibi; }),
      with("sigmoid_one", [](Variant& v) { v.spec.sim = AttnSim::sigmoid; v.spec.norm = AttnNorm::one; }),
      with("sigmoid_sum", [](Variant& v) { v.spec.sim = AttnSim::sigmoid; v.spec.norm = AttnNorm::sum; }),
      with("elu_plus_one_sum", [](Variant& v) { v.spec.sim = AttnSim::elu_plus_one; v.spec.norm = AttnNorm::sum; }),
      with("identity_one", [](Variant& v) { v.spec.sim = AttnSim::identity; v.spec.norm = AttnNorm::one; }),
      with("sigmoid_p_norm2", [](Variant& v) {
        v.spec.sim = AttnSim::sigmoid;
        v.spec.norm = AttnNorm::p_norm;
        v.spec.norm_p = 2.0;
      }),
  };
}

void run(int64_t d, int64_t H, int64_t T, int64_t tokens, int reps, const Variant* variant = nullptr) {
  const int64_t B = tokens / T, dh = d / H;
  const int64_t lead = variant ? variant->spec.lead_keys : 0, S = lead + T;
  std::vector<float> qkv(size_t(B * T * 3 * d)), dqkv(qkv.size()), out(size_t(B * T * d)), dout(out.size());
  std::vector<float> stats(size_t(B * H * T));
  Tensor fused(qkv.data(), DType::f32, {B, T, 3 * d}), dfused(dqkv.data(), DType::f32, {B, T, 3 * d});
  Tensor q = heads(fused, 0, H, dh), k = heads(fused, d, H, dh), v = heads(fused, 2 * d, H, dh);
  Tensor dq = heads(dfused, 0, H, dh), dk = heads(dfused, d, H, dh), dv = heads(dfused, 2 * d, H, dh);
  // With lead keys, k and v have S = lead + T rows: a fused [B, S, 2d] buffer of their own.
  std::vector<float> kv, dkv;
  if (lead > 0) {
    kv.resize(size_t(B * S * 2 * d));
    dkv.resize(kv.size());
    Tensor kvt(kv.data(), DType::f32, {B, S, 2 * d}), dkvt(dkv.data(), DType::f32, {B, S, 2 * d});
    ops::fill_normal(kvt, 1, 2, 0.0, 1.0);
    k = heads(kvt, 0, H, dh), v = heads(kvt, d, H, dh);
    dk = heads(dkvt, 0, H, dh), dv = heads(dkvt, d, H, dh);
  }
  Tensor o(out.data(), DType::f32, {B, T, H, dh}), go(dout.data(), DType::f32, {B, T, H, dh});
  Tensor st(stats.data(), DType::f32, {B, H, T});
  ops::fill_normal(fused, 1, 0, 0.0, 1.0);
  ops::fill_normal(go, 1, 1, 0.0, 1.0);
  ops::AttentionSpec spec = variant ? variant->spec : ops::AttentionSpec{};
  std::vector<float> sink(size_t(H), 1.0f), d_sink(size_t(H), 0.0f);
  if (variant && variant->sink) {
    spec.sink_logit = Tensor(sink.data(), DType::f32, {H});
    spec.d_sink_logit = Tensor(d_sink.data(), DType::f32, {H});
  }
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
  std::printf("attention d=%lld H=%lld T=%lld B=%lld%s%s fwd_ms=%.3f bwd_ms=%.3f tokens_per_s=%.0f\n",
              (long long)d, (long long)H, (long long)T, (long long)B, variant ? " variant=" : "",
              variant ? variant->name : "", best_f * 1e3, best_b * 1e3, double(B * T) / (best_f + best_b));
}

}  // namespace

int main(int argc, char** argv) {
  const int reps = argc > 1 ? std::atoi(argv[1]) : 10;
  if (argc > 2 && std::string(argv[2]) == "variants") {
    std::printf("# sinklab attention variants (cpu, f32), %d threads, best of %d\n", omp_get_max_threads(), reps);
    for (const Variant& v : variants()) {
      run(128, 4, 256, 4096, reps, &v);  // the tiny model (jobs/pretrain/tiny_cpu.ini): 16 rows
      run(256, 1, 256, 8192, reps, &v);  // Bigram-Backcopy (jobs/pretrain/bbm_cpu.ini): one 32-row micro-batch
    }
    return 0;
  }
  std::printf("# sinklab attention (cpu, f32, causal softmax), %d threads, best of %d\n", omp_get_max_threads(), reps);
  run(128, 4, 256, 4096, reps);
  run(768, 8, 256, 4096, reps);
  return 0;
}
