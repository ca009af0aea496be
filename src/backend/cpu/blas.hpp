// The one BLAS entry point of the CPU backend: row-major gemm in float (cblas_sgemm) or double
// (cblas_dgemm), so every op that multiplies matrices is templated on its float type alike.
#pragma once

#include <cblas.h>
#include <omp.h>

#include <cstdint>
#include <cstring>
#include <type_traits>

namespace sinklab::cpu {

// C[M,N] = alpha * op(A) . op(B) + beta * C, row-major, in float or double.
template <class T>
void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, T alpha, const T* A, int64_t lda, const T* B,
          int64_t ldb, T beta, T* C, int64_t ldc) {
  if (M == 0 || N == 0) return;
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
