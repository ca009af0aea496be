// Training-step throughput of sinklab's CPU backend: one optimizer step = forward + backward over a
// batch (rows x T tokens), global grad-norm clipping and AdamW over every parameter, exactly as
// sinklab-pretrain does it (minus I/O). Prints tokens/s and model FLOP/s, and the sgemm peak measured
// in the same process (for MFU). bench/run_train_step.sh runs it beside the PyTorch eager peer.
//
//   bench_train_step --vocab V --d D --layers L --heads H --ffn F --seq T --rows B [--steps N] [--warmup W]
//                    [--set axis=value ...]   (model variant axes, e.g. --set pos-emb=learned --set ffn=relu)
//                    [--no-peak]              (skip the sgemm peak measurement; mfu prints 0)
//                    [--peak-gflops P]        (MFU against this peak instead of measuring one)
//   bench_train_step --peak-only              (measure and print the sgemm peak, nothing else)
//
// MFU above 1 is refused (exit 3, one line): it means the peak was measured low (a cold or loaded
// machine), never that the step beat the machine's own GEMM.
//
// Model FLOPs per token (the convention of the PaLM paper's MFU, causal attention counted once):
//   6 * (parameters in matmuls, including the untied head) + 6 * L * T * d
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "backend/memory.hpp"
#include "backend/ops.hpp"
#include "core/philox.hpp"
#include "model/transformer.hpp"

using namespace sinklab;

namespace {

double now() { return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count(); }

// Peak sgemm GFLOP/s of this machine and thread count (the step's: the same OpenMP threads and placement,
// this process): 2048^3 products, two untimed to warm the threads, caches and clocks, then the best of
// at least 20 timed ones spanning at least 3 s. (One cold trial of five once read 192 GFLOP/s where the
// same run's other measurement read 312, and gave an MFU of 1.157; on a shared 2-core VM, back-to-back
// 1-s measurements read 154-176.)
double sgemm_peak_gflops() {
  const int64_t n = 2048;
  Buffer a = Buffer::for_tensor(DType::f32, {n, n}), b = Buffer::for_tensor(DType::f32, {n, n}),
         c = Buffer::for_tensor(DType::f32, {n, n});
  Tensor ta = a.view(DType::f32, {n, n}), tb = b.view(DType::f32, {n, n}), tc = c.view(DType::f32, {n, n});
  ops::fill_normal(ta, 1, 1, 0, 1);
  ops::fill_normal(tb, 1, 2, 0, 1);
  for (int i = 0; i < 2; ++i) ops::matmul(tc, ta, tb, false, false);
  double best = 0;
  const double start = now();
  for (int i = 0; i < 20 || now() - start < 3.0; ++i) {
    double t0 = now();
    ops::matmul(tc, ta, tb, false, false);
    best = std::max(best, 2.0 * n * n * n / (now() - t0) / 1e9);
  }
  return best;
}

}  // namespace

int main(int argc, char** argv) {
  model::ModelConfig cfg;
  int64_t rows = 0, steps = 10, warmup = 2;
  bool peak_wanted = true;
  double given_peak = 0.0;
  for (int i = 1; i < argc; i += 2) {
    std::string k = argv[i];
    if (k == "--no-peak") {  // skip the sgemm peak (mfu and peak print as 0)
      peak_wanted = false;
      --i;
      continue;
    }
    if (k == "--peak-only") {
      std::printf("sgemm_peak_gflops %.2f\n", sgemm_peak_gflops());
      return 0;
    }
    if (i + 1 >= argc) {
      std::fprintf(stderr, "bench_train_step: %s needs a value\n", k.c_str());
      return 2;
    }
    long long v = std::atoll(argv[i + 1]);
    if (k == "--peak-gflops") {
      given_peak = std::atof(argv[i + 1]);
      if (!(given_peak > 0)) {
        std::fprintf(stderr, "bench_train_step: --peak-gflops wants a positive number, got %s\n", argv[i + 1]);
        return 2;
      }
    } else if (k == "--set") {  // a model variant axis, --set flag=value (e.g. pos-emb=learned, ffn=relu)
      const std::string kv = argv[i + 1];
      const size_t eq = kv.find('=');
      if (eq == std::string::npos) {
        std::fprintf(stderr, "bench_train_step: --set wants flag=value, got %s\n", kv.c_str());
        return 2;
      }
      cfg.set_axis(kv.substr(0, eq), kv.substr(eq + 1));
    } else if (k == "--vocab") cfg.vocab_size = int(v);
    else if (k == "--d") cfg.d_model = int(v);
    else if (k == "--layers") cfg.n_layers = int(v);
    else if (k == "--heads") cfg.n_heads = int(v);
    else if (k == "--ffn") cfg.ffn_hidden = int(v);
    else if (k == "--seq") cfg.context = int(v);
    else if (k == "--rows") rows = v;
    else if (k == "--steps") steps = v;
    else if (k == "--warmup") warmup = v;
    else {
      std::fprintf(stderr, "bench_train_step: unknown flag %s\n", k.c_str());
      return 2;
    }
  }
  const int64_t T = cfg.context;
  model::Transformer model(cfg);
  model.init_weights(1);
  Buffer in_buf = Buffer::for_tensor(DType::i32, {rows, T}), tg_buf = Buffer::for_tensor(DType::i32, {rows, T});
  Tensor inputs = in_buf.view(DType::i32, {rows, T}), targets = tg_buf.view(DType::i32, {rows, T});
  for (int64_t i = 0; i < rows * T; ++i) {
    inputs.ptr<int32_t>()[i] = int32_t(philox_u32(7, 0, uint64_t(i)) % uint32_t(cfg.vocab_size));
    targets.ptr<int32_t>()[i] = int32_t(philox_u32(7, 1, uint64_t(i)) % uint32_t(cfg.vocab_size));
  }
  const int64_t n = model.flat_params().numel();
  Buffer m_buf(size_t(n) * 4, Device::cpu()), v_buf(size_t(n) * 4, Device::cpu());
  Tensor m = m_buf.view(DType::f32, {n}), v = v_buf.view(DType::f32, {n});
  ops::fill(m, 0);
  ops::fill(v, 0);

  double t_total = 0;
  for (int64_t s = 0; s < warmup + steps; ++s) {
    double t0 = now();
    model.zero_grads();
    model.forward_backward(inputs, targets, 1.0 / double(rows * T));
    Tensor grads[] = {model.flat_grads()};
    ops::clip_grad_norm(grads, 1.0);
    ops::AdamWStep step;
    step.lr = 1e-4;
    step.beta2 = 0.95;
    step.weight_decay = 0.1;
    step.step = s + 1;
    ops::adamw_update(model.flat_params(), model.flat_grads(), m, v, step);
    if (s >= warmup) t_total += now() - t0;
  }
  const double tokens_per_s = double(rows * T * steps) / t_total;
  int64_t matmul_params = 0;
  for (const auto& spec : model.specs())
    if (spec.shape.size() == 2 && spec.name != "model.embed_tokens.weight" && spec.name != "model.embed_positions.weight")
      matmul_params += spec.numel;
  const double flops_per_token = 6.0 * double(matmul_params) + 6.0 * cfg.n_layers * double(T) * cfg.d_model;
  const double achieved = tokens_per_s * flops_per_token / 1e9;
  const double peak = given_peak > 0 ? given_peak : peak_wanted ? sgemm_peak_gflops() : 0.0;
  if (peak > 0 && achieved > peak) {
    std::fprintf(stderr,
                 "bench_train_step: MFU %.3f > 1 refused: the step ran %.1f GFLOP/s, above the sgemm peak %.1f "
                 "GFLOP/s, so that peak was measured low (cold or loaded machine); measure it again\n",
                 achieved / peak, achieved, peak);
    return 3;
  }
  std::printf("sinklab tokens_per_s %.1f model_gflops %.2f sgemm_peak_gflops %.2f mfu %.4g step_ms %.2f\n",
              tokens_per_s, achieved, peak, peak > 0 ? achieved / peak : 0.0, 1e3 * t_total / double(steps));
  return 0;
}
