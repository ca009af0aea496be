// Matmul-family CPU ops over BLAS (cblas_sgemm / cblas_dgemm, row-major): linear forward/backward
// (nn.Linear layout, weight [N,K]) and the general (batched) matmul.
//
// Every operand is read as a row-major matrix with a leading dimension: a [*, K] tensor whose leading
// dimensions collapse into one row stride (a slice of a fused buffer, row stride > K, is fine).


#include <algorithm>
#include <cstring>
#include <initializer_list>
#include <type_traits>

#include "backend/cpu/blas.hpp"
#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_common.hpp"
#include "backend/memory.hpp"
#include "backend/op_checks.hpp"

namespace sinklab {

using cpu::dispatch_float;
using cpu::gemm;

namespace {


// bf16 operands (--precision bf16): the CUDA backend hands them to cuBLASLt with f32 accumulation; here
// they are widened to f32 (exact) and the f32 GEMM runs, so a product of two bf16 values is exact and the
// sums are f32 on both backends. An f32 copy of a defined bf16 tensor, or the tensor itself.
struct Widened {
  Buffer storage;
  Tensor view;
};
Widened widen(const Tensor& t) {
  Widened w;
  if (!t.defined() || t.dtype != DType::bf16) {
    w.view = t;
    return w;
  }
  w.storage = Buffer(size_t(t.numel()) * sizeof(float), Device::cpu());
  w.view = Tensor::contiguous_view(w.storage.data(), DType::f32, t.shape.data(), t.ndim, Device::cpu());
  backend_for(Device::cpu()).copy(w.view, t);
  return w;
}


}  // namespace

// ---------------------------------------------------------------------------------------------------
// out[M,N] = in[M,K] . weight[N,K]^T (+ bias[N])
void CpuBackend::linear_forward(Tensor out, Tensor in, Tensor weight, Tensor bias) {
  const char* op = "linear_forward";
  MatrixView x = as_matrix(in, op, "in"), w = as_matrix(weight, op, "weight"), y = as_matrix(out, op, "out");
  SL_CHECK(weight.ndim == 2, "linear_forward: weight must be [N,K], got %s", weight.shape_str().c_str());
  const int64_t M = x.rows, K = x.cols, N = w.rows;
  SL_CHECK(w.cols == K, "linear_forward: in %s and weight %s disagree on K", in.shape_str().c_str(),
           weight.shape_str().c_str());
  SL_CHECK(y.rows == M && y.cols == N, "linear_forward: out %s, expected [%lld rows, %lld]",
           out.shape_str().c_str(), (long long)M, (long long)N);
  if (bias.defined()) check_shape(bias, {N}, op, "bias");
  const DType dt = check_product_dtypes(op, {{in, "in"}, {weight, "weight"}}, {{out, "out"}});
  // The bias is added into out's rows: out's dtype.
  SL_CHECK(!bias.defined() || bias.dtype == out.dtype, "%s: bias has dtype %s, out %s: they must agree", op,
           dtype_name(bias.dtype), dtype_name(out.dtype));
  if (dt == DType::bf16) {  // bf16 in and weight; out (and bias) f32 or bf16
    Widened x32 = widen(in), w32 = widen(weight), b32 = widen(bias), y32 = widen(out);
    linear_forward(y32.view, x32.view, w32.view, b32.view);
    if (out.dtype == DType::bf16) backend_for(Device::cpu()).copy(out, y32.view);  // rounds to nearest even
    return;
  }
  dispatch_float(dt, op, [&](auto zero) {
    using T = decltype(zero);
    T* o = static_cast<T*>(y.ptr);
    T beta = T(0);
    if (bias.defined()) {  // out rows start as the bias, the gemm adds onto them (beta = 1)
      const T* b = bias.ptr<T>();
      const int64_t bs = bias.stride[0];
#pragma omp parallel for schedule(static) if (M * N > 16384)
      for (int64_t r = 0; r < M; ++r) {
        if (bs == 1) {
          std::memcpy(o + r * y.ld, b, size_t(N) * sizeof(T));
        } else {
          for (int64_t c = 0; c < N; ++c) o[r * y.ld + c] = b[c * bs];
        }
      }
      beta = T(1);
    }
    gemm<T>(false, true, M, N, K, T(1), static_cast<const T*>(x.ptr), x.ld, static_cast<const T*>(w.ptr), w.ld,
            beta, o, y.ld);
  });
}

// d_in[M,K]      = d_out[M,N] . weight[N,K]     (written)
// d_weight[N,K] += d_out[M,N]^T . in[M,K]        (accumulated)
// d_bias[N]     += sum over rows of d_out        (accumulated)
void CpuBackend::linear_backward(Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in,
                                 Tensor weight) {
  const char* op = "linear_backward";
  MatrixView dy = as_matrix(d_out, op, "d_out");
  const int64_t M = dy.rows, N = dy.cols;
  const DType dt = check_product_dtypes(op, {{d_out, "d_out"}, {in, "in"}, {weight, "weight"}},
                                        {{d_in, "d_in"}, {d_weight, "d_weight"}, {d_bias, "d_bias"}});
  if (dt == DType::bf16) {  // bf16 d_out, in and weight; d_in, d_weight, d_bias f32 or bf16
    Widened g32 = widen(d_out), x32 = widen(d_weight.defined() ? in : Tensor{}),
            w32 = widen(d_in.defined() ? weight : Tensor{});
    Widened dx32 = widen(d_in), dw32 = widen(d_weight), db32 = widen(d_bias);  // accumulated ones start as is
    linear_backward(dx32.view, dw32.view, db32.view, g32.view, x32.view, w32.view);
    for (auto [dst, src] : {std::pair{d_in, dx32.view}, std::pair{d_weight, dw32.view}, std::pair{d_bias, db32.view}})
      if (dst.defined() && dst.dtype == DType::bf16) backend_for(Device::cpu()).copy(dst, src);
    return;
  }
  dispatch_float(dt, op, [&](auto zero) {
    using T = decltype(zero);
    const T* g = static_cast<const T*>(dy.ptr);
    if (d_in.defined()) {
      MatrixView w = as_matrix(weight, op, "weight"), dx = as_matrix(d_in, op, "d_in");
      SL_CHECK(weight.ndim == 2 && w.rows == N, "linear_backward: weight %s does not match d_out %s",
               weight.shape_str().c_str(), d_out.shape_str().c_str());
      SL_CHECK(dx.rows == M && dx.cols == w.cols, "linear_backward: d_in %s, expected [%lld rows, %lld]",
               d_in.shape_str().c_str(), (long long)M, (long long)w.cols);
      gemm<T>(false, false, M, w.cols, N, T(1), g, dy.ld, static_cast<const T*>(w.ptr), w.ld, T(0),
              static_cast<T*>(dx.ptr), dx.ld);
    }
    if (d_weight.defined()) {
      MatrixView x = as_matrix(in, op, "in"), dw = as_matrix(d_weight, op, "d_weight");
      SL_CHECK(x.rows == M, "linear_backward: in %s and d_out %s differ in rows", in.shape_str().c_str(),
               d_out.shape_str().c_str());
      SL_CHECK(d_weight.ndim == 2 && dw.rows == N && dw.cols == x.cols,
               "linear_backward: d_weight %s, expected [%lld, %lld]", d_weight.shape_str().c_str(),
               (long long)N, (long long)x.cols);
      if (M > 0)
        gemm<T>(true, false, N, x.cols, M, T(1), g, dy.ld, static_cast<const T*>(x.ptr), x.ld, T(1),
                static_cast<T*>(dw.ptr), dw.ld);
    }
    if (d_bias.defined()) {
      check_shape(d_bias, {N}, op, "d_bias");
      T* db = d_bias.ptr<T>();
      const int64_t bs = d_bias.stride[0];
      // Column sums in double, 64 columns per task: each thread walks all rows for its columns.
      constexpr int64_t kBlock = 64;
      const int64_t blocks = (N + kBlock - 1) / kBlock;
#pragma omp parallel for schedule(static) if (M * N > 16384)
      for (int64_t blk = 0; blk < blocks; ++blk) {
        const int64_t c0 = blk * kBlock, c1 = std::min(N, c0 + kBlock);
        double acc[kBlock] = {};
        for (int64_t r = 0; r < M; ++r) {
          const T* row = g + r * dy.ld;
          for (int64_t c = c0; c < c1; ++c) acc[c - c0] += double(row[c]);
        }
        for (int64_t c = c0; c < c1; ++c) db[c * bs] += T(acc[c - c0]);
      }
    }
  });
}

// ---------------------------------------------------------------------------------------------------
// out[b] = alpha * op(a[b]) . op(b[b]) + beta * out[b]
//   2-D: a [M,K] ([K,M] if transpose_a), b [K,N] ([N,K] if transpose_b), out [M,N]
//   3-D: the same with a common leading batch dimension (any batch stride, rows strided, last dim contiguous)
void CpuBackend::matmul(Tensor out, Tensor a, Tensor b, bool transpose_a, bool transpose_b, double alpha,
                        double beta) {
  const char* op = "matmul";
  const MatmulGeometry g = matmul_geometry(out, a, b, transpose_a, transpose_b);
  const DType dt = check_product_dtypes(op, {{a, "a"}, {b, "b"}}, {{out, "out"}});
  SL_CHECK(out.dtype == dt, "%s: out has dtype %s, the inputs %s: the CPU backend multiplies them in one dtype", op,
           dtype_name(out.dtype), dtype_name(dt));
  dispatch_float(dt, op, [&](auto zero) {
    using T = decltype(zero);
    for (int64_t i = 0; i < g.batch; ++i)  // BLAS threads inside each product
      gemm<T>(transpose_a, transpose_b, g.M, g.N, g.K, T(alpha), a.ptr<T>() + i * g.stride_a, g.ld_a,
              b.ptr<T>() + i * g.stride_b, g.ld_b, T(beta), out.ptr<T>() + i * g.stride_out, g.ld_out);
  });
}

}  // namespace sinklab
