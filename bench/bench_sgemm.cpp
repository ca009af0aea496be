// sgemm throughput of sinklab's CPU backend through the op API (ops::linear_forward for the forward
// x.W^T shapes, ops::matmul for the backward forms and the square), f32, GPT-2-small shapes with
// B*T = 4096 tokens. Threads: OMP_NUM_THREADS. bench/run_sgemm.sh runs it beside the PyTorch peer.
//
//   bench_sgemm [--reps N] [--list]
//   --list prints the shapes ("name kind M N K") for the peer instead of timing them.
#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "backend/memory.hpp"
#include "backend/ops.hpp"

using namespace sinklab;

namespace {

// kind: linear  out[M,N] = x[M,K] . W[N,K]^T        (ops::linear_forward, no bias)
//       nn      out[M,N] = a[M,K] . b[K,N]          (ops::matmul, e.g. dX = dY . W)
//       tn      out[M,N] = a[K,M]^T . b[K,N]        (ops::matmul, e.g. dW = dY^T . X)
struct Shape { const char* name; const char* kind; int64_t M, N, K; };

const Shape kShapes[] = {
    {"square_1024", "nn", 1024, 1024, 1024},
    {"fwd_proj_768", "linear", 4096, 768, 768},
    {"fwd_qkv_2304", "linear", 4096, 2304, 768},
    {"fwd_1536", "linear", 4096, 1536, 768},
    {"fwd_lmhead_50432", "linear", 4096, 50432, 768},
    {"bwd_dX_768", "nn", 4096, 768, 768},
    {"bwd_dW_768x768", "tn", 768, 768, 4096},
    {"bwd_dW_2304x768", "tn", 2304, 768, 4096},
    {"small_T64_qkv", "linear", 64, 2304, 768},     // one T=64 survey sequence through a QKV projection
    {"small_qkT_1024x64", "linear", 1024, 1024, 64}, // one head's q.k^T, T=1024, dh=64
};

}  // namespace

int main(int argc, char** argv) {
  int reps = 3;
  bool list = false;
  for (int i = 1; i < argc; ++i) {
    if (!std::strcmp(argv[i], "--reps") && i + 1 < argc) reps = std::atoi(argv[++i]);
    else if (!std::strcmp(argv[i], "--list")) list = true;
    else { std::fprintf(stderr, "usage: bench_sgemm [--reps N] [--list]\n"); return 2; }
  }
  if (list) {
    for (const Shape& s : kShapes) std::printf("%s %s %lld %lld %lld\n", s.name, s.kind, (long long)s.M, (long long)s.N, (long long)s.K);
    return 0;
  }
  return run_main("bench_sgemm", [&] {
    for (const Shape& s : kShapes) {
      const bool lin = !std::strcmp(s.kind, "linear"), tn = !std::strcmp(s.kind, "tn");
      // Operand shapes: linear a=[M,K] b=[N,K]; nn a=[M,K] b=[K,N]; tn a=[K,M] b=[K,N].
      const int64_t a0 = tn ? s.K : s.M, a1 = tn ? s.M : s.K;
      const int64_t b0 = lin ? s.N : s.K, b1 = lin ? s.K : s.N;
      Buffer ba = Buffer::for_tensor(DType::f32, {a0, a1}), bb = Buffer::for_tensor(DType::f32, {b0, b1}),
             bc = Buffer::for_tensor(DType::f32, {s.M, s.N});
      Tensor a = ba.view(DType::f32, {a0, a1}), b = bb.view(DType::f32, {b0, b1}), c = bc.view(DType::f32, {s.M, s.N});
      ops::fill_normal(a, 1, 0, 0.0, 1.0);
      ops::fill_normal(b, 1, 1, 0.0, 0.02);
      ops::fill(c, 0.0);
      auto run = [&] {
        if (lin) ops::linear_forward(c, a, b, Tensor{});
        else ops::matmul(c, a, b, tn, false);
      };
      const double flops = 2.0 * double(s.M) * double(s.N) * double(s.K);
      const int n = flops > 1e11 ? std::min(reps, 2) : flops < 1e9 ? 20 * reps : reps;
      run();  // warm-up
      double best = 1e30;
      for (int r = 0; r < n; ++r) {
        auto t0 = std::chrono::steady_clock::now();
        run();
        best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      }
      std::printf("%s %s %lld %lld %lld %.1f\n", s.name, s.kind, (long long)s.M, (long long)s.N, (long long)s.K,
                  flops / best * 1e-9);
      std::fflush(stdout);
    }
    return 0;
  });
}
