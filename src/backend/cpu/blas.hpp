// The one BLAS entry point of the CPU backend: row-major gemm in float or double, so every op that
// multiplies matrices is templated on its float type alike. double goes to the BLAS (cblas_dgemm); float
// to oneDNN's dnnl_sgemm when built with SINKLAB_SGEMM=onednn (the default), else to cblas_sgemm.
// Why oneDNN for float: at the emergence atlas's small scale (d = 64, 8192 rows, K or N of 64-256) its
// sgemm is 1.3-1.5x OpenBLAS's and the whole training step ~1.25x; but its kernels for a transposed A with a
// long sum, the weight gradient dY^T . X over a batch's tokens, lose up to 2x to OpenBLAS once the product
// is 256 x 256 or larger, so those stay on the BLAS (onednn_takes; bench/README.md, "f32 GEMM: oneDNN or
// the BLAS").
#pragma once

#include <cblas.h>
#include <omp.h>
#if SINKLAB_SGEMM_ONEDNN
#include <oneapi/dnnl/dnnl.h>

#include "core/error.hpp"
#endif

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace sinklab::cpu {

#if SINKLAB_SGEMM_ONEDNN
// Whether an f32 product goes to oneDNN: all but a transposed A summed over >= 4096 rows into a C of at
// least 256 x 256 (measured, one thread: the cheap atlas scale's [1024, 256] weight gradient over 8192
// tokens runs at 35-40 GFLOP/s on oneDNN 2.6 and 70-77 on OpenBLAS; the small scale's [256, 64] at 87 and
// 69; GPT-2-small's [768, 768] and [2304, 768] over 4096 tokens alike on both).
inline bool onednn_takes(bool ta, int64_t M, int64_t N, int64_t K) { return !(ta && K >= 4096 && M * N >= 65536); }
#endif

// C[M,N] = alpha * op(A) . op(B) + beta * C, row-major, in float or double.
template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
  if (K == 0) {  // an empty sum: C = beta * C (oneDNN 2.6's sgemm returns without touching C; tested)
    for (int64_t i = 0; i < M; ++i)
      for (int64_t j = 0; j < N; ++j) C[i * ldc + j] = beta == T(0) ? T(0) : beta * C[i * ldc + j];
    return;
  }
#if SINKLAB_SGEMM_ONEDNN
  if constexpr (std::is_same_v<T, float>) {
    if (onednn_takes(ta, M, N, K)) {
      // oneDNN threads with OpenMP like the rest of the backend, and runs on one thread when called inside a
      // parallel region; it clears C itself for beta = 0.
      const dnnl_status_t status = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', M, N, K, alpha, A, lda, B, ldb,
                                              beta, C, ldc);
      // Fails only for arguments the callers' shape checks already refuse.
      SL_CHECK(status == dnnl_success, "dnnl_sgemm(%c%c, M %lld, N %lld, K %lld, lda %lld, ldb %lld, ldc %lld) "
               "failed with status %d", ta ? 'T' : 'N', tb ? 'T' : 'N', (long long)M, (long long)N, (long long)K,
               (long long)lda, (long long)ldb, (long long)ldc, int(status));
      return;
    }
  }
#endif
  // beta = 0: zero C here and let the BLAS accumulate into it (beta = 1). OpenBLAS 0.3.21 clears C with
  // its generic scalar beta loop, ~1/5 of a [4096, 768] x K=128 product; rows zeroed in parallel take less
  // than half of that, and the result is the same bits (OpenBLAS also adds the product to a zeroed C).
  // The measurement: bench/README.md, "The BLAS's beta = 0 clear".
  if (beta == T(0)) {
    const bool parallel = M * N >= (int64_t(1) << 16) && !omp_in_parallel();
#pragma omp parallel for schedule(static) if (parallel)
    for (int64_t i = 0; i < M; ++i) std::memset(C + i * ldc, 0, size_t(N) * sizeof(T));
    beta = T(1);
  }
  const CBLAS_TRANSPOSE opa = ta ? CblasTrans : CblasNoTrans, opb = tb ? CblasTrans : CblasNoTrans;
  if constexpr (std::is_same_v<T, float>) {
    cblas_sgemm(CblasRowMajor, opa, opb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C,
                int(ldc));
  } else {
    cblas_dgemm(CblasRowMajor, opa, opb, int(M), int(N), int(K), alpha, A, int(lda), B, int(ldb), beta, C,
                int(ldc));
  }
}

}  // namespace sinklab::cpu
