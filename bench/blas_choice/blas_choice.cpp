// Standalone sgemm throughput probe used to pick the CPU BLAS (bench/blas_choice/blas_choice.sh compiles
// it once per library). Row-major C[M,N] = op(A) . op(B), the shapes one GPT-2-small training step
// issues with B*T = 4096 tokens, the 1024^3 square, two small ones (a single T = 64 sequence of the
// survey through a QKV projection; one head's q.k^T at T = 1024, dh = 64) and four of the emergence
// atlas's small scale (d = 64). Prints one line per shape: best GFLOP/s.
// Not a CMake target (it includes either cblas.h or dnnl.h, whichever library it is built against).
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <vector>

#if defined(USE_DNNL)
#include <dnnl.h>
static const char* kLib = "onednn";
static void sgemm(bool ta, bool tb, long M, long N, long K, const float* A, long lda, const float* B, long ldb,
                  float* C, long ldc) {
  dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, 1.0f, A, lda, B, ldb, 0.0f, C, ldc);
}
#else
#include <cblas.h>
#if defined(USE_BLIS)
static const char* kLib = "blis";
#else
static const char* kLib = "openblas";
#endif
static void sgemm(bool ta, bool tb, long M, long N, long K, const float* A, long lda, const float* B, long ldb,
                  float* C, long ldc) {
  cblas_sgemm(CblasRowMajor, ta ? CblasTrans : CblasNoTrans, tb ? CblasTrans : CblasNoTrans, int(M), int(N),
              int(K), 1.0f, A, int(lda), B, int(ldb), 0.0f, C, int(ldc));
}
#endif

struct Shape { const char* name; long M, N, K; bool ta, tb; };

int main(int argc, char** argv) {
  int reps = argc > 1 ? std::atoi(argv[1]) : 3;
  const Shape shapes[] = {
      {"square 1024^3            NN", 1024, 1024, 1024, false, false},
      {"fwd  x.W^T  N=768  (proj) NT", 4096, 768, 768, false, true},
      {"fwd  x.W^T  N=2304 (qkv)  NT", 4096, 2304, 768, false, true},
      {"fwd  x.W^T  N=1536        NT", 4096, 1536, 768, false, true},
      {"fwd  x.W^T  N=50432 (lm)  NT", 4096, 50432, 768, false, true},
      {"bwd  dX=dY.W  N=768       NN", 4096, 768, 768, false, false},
      {"bwd  dW=dY^T.X 768x768    TN", 768, 768, 4096, true, false},
      {"bwd  dW=dY^T.X 2304x768   TN", 2304, 768, 4096, true, false},
      {"small x.W^T T=64 (survey) NT", 64, 2304, 768, false, true},
      {"small q.k^T T=1024 dh=64  NT", 1024, 1024, 64, false, true},
      // the emergence atlas's small scale (d 64, FFN 256, 8192 tokens a step): the QKV and FFN-up
      // products forward, the FFN-down input gradient, the FFN-up weight gradient
      {"atlas fwd x.W^T N=192 (qkv) NT", 8192, 192, 64, false, true},
      {"atlas fwd x.W^T N=256 (up) NT", 8192, 256, 64, false, true},
      {"atlas bwd dX=dY.W K=64    NN", 8192, 256, 64, false, false},
      {"atlas bwd dW=dY^T.X 256x64 TN", 256, 64, 8192, true, false},
  };
  for (const Shape& s : shapes) {
    long a_rows = s.ta ? s.K : s.M, a_cols = s.ta ? s.M : s.K;
    long b_rows = s.tb ? s.N : s.K, b_cols = s.tb ? s.K : s.N;
    std::vector<float> A(size_t(a_rows * a_cols)), B(size_t(b_rows * b_cols)), C(size_t(s.M * s.N));
    for (size_t i = 0; i < A.size(); ++i) A[i] = float(int(i % 13) - 6) * 0.01f;
    for (size_t i = 0; i < B.size(); ++i) B[i] = float(int(i % 7) - 3) * 0.01f;
    double flops = 2.0 * double(s.M) * double(s.N) * double(s.K), best = 1e30;
    int n = flops > 1e11 ? 1 : flops < 1e9 ? 20 * reps : reps;  // lm head ~0.3 TFLOP: one timed call
    sgemm(s.ta, s.tb, s.M, s.N, s.K, A.data(), a_cols, B.data(), b_cols, C.data(), s.N);  // warm-up
    for (int r = 0; r < n; ++r) {
      auto t0 = std::chrono::steady_clock::now();
      sgemm(s.ta, s.tb, s.M, s.N, s.K, A.data(), a_cols, B.data(), b_cols, C.data(), s.N);
      double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      if (dt < best) best = dt;
    }
    std::printf("%-9s %-30s M=%-5ld N=%-6ld K=%-5ld %8.1f GFLOP/s\n", kLib, s.name, s.M, s.N, s.K,
                flops / best * 1e-9);
    std::fflush(stdout);
  }
  return 0;
}
