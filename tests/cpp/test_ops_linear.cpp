// linear_forward / linear_backward / matmul on the CPU backend against PyTorch float64 goldens
// (tests/python/goldens/gen_linear.py), in f32 and f64, plus finite differences and accumulation.
#include <cmath>
#include <cstring>
#include <limits>
#include <string>
#include <type_traits>
#include <vector>

#include "backend/cpu/blas.hpp"
#include "backend/op_checks.hpp"
#include "test_util.hpp"

namespace sinklab {
namespace {

using test::Golden;
using test::Owned;
using test::rel_error;
using test::kDtypes;
using test::tol;
using test::dims_of;

// A copy of `ref` scaled by k (expected value after k accumulations).
Owned scaled(const Tensor& ref, double k) {
  Owned o = Owned::copy_of(ref, DType::f64);
  ops::scale(o.t, k);
  return o;
}

std::vector<std::string> cases_with(const Golden& g, const std::string& prefix) {
  std::vector<std::string> out;
  for (const std::string& c : g.cases())
    if (c.rfind(prefix, 0) == 0) out.push_back(c);
  return out;
}

TEST(Linear, MatchesTorchForwardBackward) {
  Golden g("linear.safetensors");
  auto cases = cases_with(g, "lin_");
  ASSERT_EQ(cases.size(), 5u);
  for (const std::string& c : cases) {
    for (DType dt : kDtypes) {
      SCOPED_TRACE(c + " " + dtype_name(dt));
      const bool has_bias = g.has(c + "/b");
      Owned w = g.get(c + "/w", dt), dy = g.get(c + "/dy", dt);
      const int64_t N = w.t.shape[0], K = w.t.shape[1];
      Owned x_store;
      Tensor x;
      if (g.has(c + "/x_full")) {  // in = a column slice of a wider buffer (row stride > K)
        x_store = g.get(c + "/x_full", dt);
        x = x_store.t.slice(1, int64_t(g.param(c + "/offset")), K);
        ASSERT_GT(x.stride[0], K);
      } else {
        x_store = g.get(c + "/x", dt);
        x = x_store.t;
      }
      Owned b = has_bias ? g.get(c + "/b", dt) : Owned();
      Tensor ref_y = g.raw(c + "/y");

      Owned y(dt, dims_of(ref_y));
      ops::fill(y, std::nan(""));  // forward must write every element
      ops::linear_forward(y, x, w, b.t);
      EXPECT_LE(rel_error(y, ref_y), tol(dt));

      // Backward twice: d_in written (same value both times), d_weight/d_bias accumulated (2x).
      Owned dx(dt, dims_of(x)), dw(dt, {N, K}), db(dt, {N});
      ops::fill(dx, std::nan(""));
      for (int rep = 1; rep <= 2; ++rep) {
        ops::linear_backward(dx, dw, has_bias ? db.t : Tensor{}, dy, x, w);
        EXPECT_LE(rel_error(dx, g.raw(c + "/dx")), tol(dt)) << "rep " << rep;
        EXPECT_LE(rel_error(dw, scaled(g.raw(c + "/dw"), rep)), tol(dt)) << "rep " << rep;
        if (has_bias) {
          EXPECT_LE(rel_error(db, scaled(g.raw(c + "/db"), rep)), tol(dt)) << "rep " << rep;
        }
      }
      // Each gradient alone (the others undefined = skipped).
      Owned dx1(dt, dims_of(x)), dw1(dt, {N, K}), db1(dt, {N});
      ops::linear_backward(dx1, Tensor{}, Tensor{}, dy, x, w);
      EXPECT_LE(rel_error(dx1, g.raw(c + "/dx")), tol(dt));
      ops::linear_backward(Tensor{}, dw1, Tensor{}, dy, x, w);
      EXPECT_LE(rel_error(dw1, g.raw(c + "/dw")), tol(dt));
      if (has_bias) {
        ops::linear_backward(Tensor{}, Tensor{}, db1, dy, x, w);
        EXPECT_LE(rel_error(db1, g.raw(c + "/db")), tol(dt));
      }
    }
  }
}

// out and d_in written into column slices of wider buffers (a fused QKV output, for instance).
TEST(Linear, StridedOutputAndInputGradient) {
  Golden g("linear.safetensors");
  const std::string c = "lin_m67";
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Owned x = g.get(c + "/x", dt), w = g.get(c + "/w", dt), b = g.get(c + "/b", dt), dy = g.get(c + "/dy", dt);
    const int64_t M = x.t.shape[0], K = x.t.shape[1], N = w.t.shape[0];
    Owned y_full(dt, {M, N + 9}), dx_full(dt, {M, K + 4});
    ops::fill(y_full, -7.0);
    ops::fill(dx_full, -7.0);
    Tensor y = y_full.t.slice(1, 3, N), dx = dx_full.t.slice(1, 4, K);
    ops::linear_forward(y, x, w, b);
    EXPECT_LE(rel_error(y, g.raw(c + "/y")), tol(dt));
    Owned dw(dt, {N, K});
    ops::linear_backward(dx, dw, Tensor{}, dy, x, w);
    EXPECT_LE(rel_error(dx, g.raw(c + "/dx")), tol(dt));
    // Columns outside the slices are untouched.
    for (int64_t r = 0; r < M; ++r) {
      for (int64_t j = 0; j < 3; ++j) ASSERT_EQ(test::element(y_full, r * (N + 9) + j), -7.0);
      for (int64_t j = 3 + N; j < N + 9; ++j) ASSERT_EQ(test::element(y_full, r * (N + 9) + j), -7.0);
      for (int64_t j = 0; j < 4; ++j) ASSERT_EQ(test::element(dx_full, r * (K + 4) + j), -7.0);
    }
  }
}

// Larger, multi-threaded BLAS path against a naive double-precision loop.
TEST(Linear, LargeRandomAgainstNaiveLoop) {
  const int64_t M = 130, K = 300, N = 257;
  Owned x(DType::f32, {M, K}), w(DType::f32, {N, K}), b(DType::f32, {N}), y(DType::f32, {M, N});
  test::randn(x, 1);
  test::randn(w, 2, 0.05);
  test::randn(b, 3);
  ops::linear_forward(y, x, w, b);
  Owned ref(DType::f64, {M, N});
  for (int64_t i = 0; i < M; ++i)
    for (int64_t j = 0; j < N; ++j) {
      double s = b.data<float>()[j];
      for (int64_t k = 0; k < K; ++k) s += double(x.data<float>()[i * K + k]) * double(w.data<float>()[j * K + k]);
      ref.data<double>()[i * N + j] = s;
    }
  EXPECT_LE(rel_error(y, ref), 1e-5);
}

TEST(Linear, FiniteDifferencesF64) {
  const int64_t M = 5, K = 7, N = 4;
  Owned x(DType::f64, {M, K}), w(DType::f64, {N, K}), b(DType::f64, {N}), r(DType::f64, {M, N});
  test::randn(x, 11);
  test::randn(w, 12);
  test::randn(b, 13);
  test::randn(r, 14);  // loss = sum(r * y): d_out = r
  Owned y(DType::f64, {M, N}), dx(DType::f64, {M, K}), dw(DType::f64, {N, K}), db(DType::f64, {N});
  auto loss = [&] {
    ops::linear_forward(y, x, w, b);
    return test::weighted_sum(y, r);
  };
  ops::linear_backward(dx, dw, db, r, x, w);
  EXPECT_LT(test::finite_difference_error(x, dx, loss), 1e-6);
  EXPECT_LT(test::finite_difference_error(w, dw, loss), 1e-6);
  EXPECT_LT(test::finite_difference_error(b, db, loss), 1e-6);
}

TEST(Linear, RejectsBadShapesAndDtypes) {
  Owned x(DType::f32, {4, 6}), w(DType::f32, {5, 6}), y(DType::f32, {4, 5}), y_bad(DType::f32, {4, 6});
  Owned w_bad(DType::f32, {5, 7}), x64(DType::f64, {4, 6}), b_bad(DType::f32, {6});
  EXPECT_THROW(ops::linear_forward(y_bad, x, w, Tensor{}), Error);
  EXPECT_THROW(ops::linear_forward(y, x, w_bad, Tensor{}), Error);
  EXPECT_THROW(ops::linear_forward(y, x64, w, Tensor{}), Error);
  EXPECT_THROW(ops::linear_forward(y, x, w, b_bad), Error);
  Owned dw_bad(DType::f32, {6, 5});
  EXPECT_THROW(ops::linear_backward(Tensor{}, dw_bad, Tensor{}, y, x, w), Error);
}

// --precision bf16: bf16 operands (rounded to nearest even, as torch rounds them), products exact, sums in
// f32, an f32 or a bf16 output. Golden: torch's rounding of x, w, dy and float64 products of the rounded
// values (gen_linear.py, "bf16_*").
TEST(Linear, Bf16OperandsRoundToNearestEvenAndAccumulateInF32) {
  Golden g("linear.safetensors");
  auto cases = cases_with(g, "bf16_");
  ASSERT_EQ(cases.size(), 2u);
  auto to_bf16 = [](const Tensor& t) { return Owned::copy_of(t, DType::bf16); };
  auto to_f32 = [](const Tensor& t) { return Owned::copy_of(t, DType::f32); };
  // Every element within half a bf16 step of the reference (a rounding of a slightly different f32 sum
  // may land on the neighbour: at most one step).
  auto within_one_bf16_step = [](const Tensor& a, const Tensor& ref) {
    for (int64_t i = 0; i < ref.numel(); ++i) {
      const double r = test::element(ref, i), x = test::element(a, i);
      if (std::fabs(x - r) > std::ldexp(std::fabs(r), -8) + 1e-30) return false;
    }
    return true;
  };
  for (const std::string& c : cases) {
    SCOPED_TRACE(c);
    // The conversion itself: ties to even, a carry into the next binade, overflow to inf, a subnormal, -0.
    Owned probe = g.get(c + "/round_probe", DType::f32);
    Owned probe_back = to_f32(to_bf16(probe).t);
    Tensor probe_ref = g.raw(c + "/round_probe_r");
    for (int64_t i = 0; i < probe_ref.numel(); ++i) {
      const float got = probe_back.data<float>()[i], want = float(test::element(probe_ref, i));
      EXPECT_EQ(f32_bits(got), f32_bits(want)) << "element " << i << ": " << got << " vs " << want;
    }
    Owned x = g.get(c + "/x", DType::f32), w = g.get(c + "/w", DType::f32), dy = g.get(c + "/dy", DType::f32);
    Owned xb = to_bf16(x), wb = to_bf16(w), dyb = to_bf16(dy);
    EXPECT_EQ(rel_error(to_f32(xb.t), g.raw(c + "/x_r")), 0.0);
    EXPECT_EQ(rel_error(to_f32(wb.t), g.raw(c + "/w_r")), 0.0);
    const int64_t M = x.t.shape[0], K = x.t.shape[1], N = w.t.shape[0];

    Owned y(DType::f32, {M, N}), y_lp(DType::bf16, {M, N});
    ops::fill(y, std::nan(""));
    ops::linear_forward(y, xb, wb, Tensor{});
    EXPECT_LE(rel_error(y, g.raw(c + "/y")), 1e-6);
    ops::linear_forward(y_lp, xb, wb, Tensor{});
    EXPECT_TRUE(within_one_bf16_step(to_f32(y_lp.t), g.raw(c + "/y")));

    // Backward twice: d_in written, d_weight accumulated in f32 (2x); a bf16 d_in rounded once.
    Owned dx(DType::f32, {M, K}), dw(DType::f32, {N, K}), dx_lp(DType::bf16, {M, K});
    for (int rep = 1; rep <= 2; ++rep) {
      ops::linear_backward(dx, dw, Tensor{}, dyb, xb, wb);
      EXPECT_LE(rel_error(dx, g.raw(c + "/dx")), 1e-6) << "rep " << rep;
      EXPECT_LE(rel_error(dw, scaled(g.raw(c + "/dw"), rep)), 1e-6) << "rep " << rep;
    }
    ops::linear_backward(dx_lp, Tensor{}, Tensor{}, dyb, Tensor{}, wb);
    EXPECT_TRUE(within_one_bf16_step(to_f32(dx_lp.t), g.raw(c + "/dx")));

    // Mixed operands are refused, naming the op.
    EXPECT_THROW(ops::linear_forward(y, xb, w, Tensor{}), Error);
    EXPECT_THROW(ops::linear_forward(Owned(DType::f64, {M, N}).t, xb, wb, Tensor{}), Error);
    EXPECT_THROW(ops::linear_backward(dx, dw, Tensor{}, dyb, x, wb), Error);
  }
}

// The products' dtype rule (op_checks: check_product_dtypes), which both backends' linear and matmul
// apply: inputs of one dtype; outputs of that dtype, or f32 / bf16 from bf16 inputs.
TEST(Linear, ProductDtypeRule) {
  const Owned f32(DType::f32, {2, 2}), f64(DType::f64, {2, 2}), bf16(DType::bf16, {2, 2});
  auto accepted = [](std::initializer_list<NamedTensor> in, std::initializer_list<NamedTensor> out) {
    try {
      check_product_dtypes("op", in, out);
      return true;
    } catch (const Error& e) {
      EXPECT_EQ(std::string(e.what()).rfind("op: ", 0), 0u) << e.what();  // names the op first
      return false;
    }
  };
  EXPECT_TRUE(accepted({{f32.t, "a"}, {f32.t, "b"}}, {{f32.t, "out"}}));
  EXPECT_TRUE(accepted({{f64.t, "a"}, {f64.t, "b"}}, {{f64.t, "out"}}));
  EXPECT_TRUE(accepted({{bf16.t, "a"}, {bf16.t, "b"}}, {{f32.t, "out"}, {bf16.t, "d_bias"}}));
  EXPECT_TRUE(accepted({{bf16.t, "a"}, {Tensor{}, "b"}}, {{Tensor{}, "out"}}));  // undefined ones skipped
  EXPECT_FALSE(accepted({{f32.t, "a"}, {bf16.t, "b"}}, {{f32.t, "out"}}));       // mixed inputs
  EXPECT_FALSE(accepted({{f32.t, "a"}, {f32.t, "b"}}, {{bf16.t, "out"}}));       // bf16 only from bf16
  EXPECT_FALSE(accepted({{f32.t, "a"}, {f32.t, "b"}}, {{f64.t, "out"}}));
  EXPECT_FALSE(accepted({{bf16.t, "a"}, {bf16.t, "b"}}, {{f64.t, "out"}}));      // bf16 -> f32 or bf16 only
  EXPECT_EQ(check_product_dtypes("op", {{bf16.t, "a"}}, {}), DType::bf16);
}

TEST(Matmul, MatchesTorch2DAnd3D) {
  Golden g("linear.safetensors");
  auto cases = cases_with(g, "mm_");
  ASSERT_EQ(cases.size(), 6u);
  for (const std::string& c : cases) {
    for (DType dt : kDtypes) {
      SCOPED_TRACE(c + " " + dtype_name(dt));
      Owned a = g.get(c + "/a", dt), b = g.get(c + "/b", dt), out = g.get(c + "/c0", dt);
      ops::matmul(out, a, b, g.param(c + "/ta") != 0, g.param(c + "/tb") != 0, g.param(c + "/alpha"),
                  g.param(c + "/beta"));
      EXPECT_LE(rel_error(out, g.raw(c + "/out")), tol(dt));
    }
  }
}

// 3-D with a batch stride that is not M*K: a [B,M,K] view of an [M,B,K] buffer (heads of a fused
// [T, H*dh] activation), and beta = 0 must ignore whatever out holds (NaN included).
TEST(Matmul, BatchedStridedViews) {
  Golden g("linear.safetensors");
  const std::string c = "mm_b3_nt";
  for (DType dt : kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Owned a = g.get(c + "/a", dt), b = g.get(c + "/b", dt);
    const int64_t B = a.t.shape[0], M = a.t.shape[1], K = a.t.shape[2], N = b.t.shape[1];
    Owned store(dt, {M, B, K});
    Tensor a_view = store.t;  // [B, M, K] with strides (K, B*K, 1)
    a_view.shape = {B, M, K, 0, 0};
    a_view.stride = {K, B * K, 1, 0, 0};
    ops::copy(a_view, a);
    Owned out(dt, {B, M, N});
    ops::fill(out, std::nan(""));
    ops::matmul(out, a_view, b, false, true, g.param(c + "/alpha"), 0.0);
    EXPECT_LE(rel_error(out, g.raw(c + "/out")), tol(dt));
  }
}

TEST(Matmul, RejectsMismatchedShapes) {
  Owned a(DType::f32, {3, 4}), b(DType::f32, {5, 6}), out(DType::f32, {3, 6});
  EXPECT_THROW(ops::matmul(out, a, b, false, false), Error);
  Owned a3(DType::f32, {2, 3, 4}), b3(DType::f32, {3, 4, 6}), out3(DType::f32, {2, 3, 6});
  EXPECT_THROW(ops::matmul(out3, a3, b3, false, false), Error);
  EXPECT_THROW(ops::matmul(out3, a, b3, false, false), Error);
}

// cpu::gemm clears C itself when beta = 0 and asks the BLAS to accumulate (backend/cpu/blas.hpp): the
// result must be the library's own beta = 0 bits (cblas_sgemm / cblas_dgemm; dnnl_sgemm for float when
// built with SINKLAB_SGEMM=onednn), whatever C held before (NaN here), with the columns past N of a
// strided C untouched; at a size that clears rows in parallel and at a small one.
// ta: A is given as [K, M] and multiplied transposed (the weight-gradient form), which for large products
// goes to the BLAS even when the f32 GEMM is oneDNN's (cpu::onednn_takes).
template <class T>
void expect_zero_beta_matches_the_blas(int64_t M, int64_t N, int64_t K, bool ta = false) {
  const DType dt = std::is_same_v<T, float> ? DType::f32 : DType::f64;
  const int64_t ldc = N + 5, lda = ta ? M : K;
  Owned a(dt, {ta ? K : M, ta ? M : K}), b(dt, {N, K}), c(dt, {M, ldc}), ref(dt, {M, ldc});
  test::randn(a, 1);
  test::randn(b, 2);
  ops::fill(c, std::numeric_limits<double>::quiet_NaN());
  ops::fill(ref, std::numeric_limits<double>::quiet_NaN());
  cpu::gemm<T>(ta, true, M, N, K, T(1), a.data<T>(), lda, b.data<T>(), K, T(0), c.data<T>(), ldc);
  const CBLAS_TRANSPOSE op_a = ta ? CblasTrans : CblasNoTrans;
  bool onednn = false;
#if SINKLAB_SGEMM_ONEDNN
  onednn = std::is_same_v<T, float> && cpu::onednn_takes(ta, M, N, K);
#endif
  if constexpr (std::is_same_v<T, float>) {
    if (onednn) {
#if SINKLAB_SGEMM_ONEDNN
      ASSERT_EQ(dnnl_sgemm(ta ? 'T' : 'N', 'T', M, N, K, 1.0f, a.data<float>(), lda, b.data<float>(), K, 0.0f,
                           ref.data<float>(), ldc),
                dnnl_success);
#endif
    } else {
      cblas_sgemm(CblasRowMajor, op_a, CblasTrans, int(M), int(N), int(K), 1.0f, a.data<T>(), int(lda),
                  b.data<T>(), int(K), 0.0f, ref.data<T>(), int(ldc));
    }
  } else {
    cblas_dgemm(CblasRowMajor, op_a, CblasTrans, int(M), int(N), int(K), 1.0, a.data<T>(), int(lda), b.data<T>(),
                int(K), 0.0, ref.data<T>(), int(ldc));
  }
  for (int64_t i = 0; i < M; ++i) {
    ASSERT_EQ(std::memcmp(c.data<T>() + i * ldc, ref.data<T>() + i * ldc, size_t(N) * sizeof(T)), 0) << "row " << i;
    for (int64_t j = N; j < ldc; ++j) ASSERT_TRUE(std::isnan(c.data<T>()[i * ldc + j])) << "row " << i;
  }
}

// K = 0 (an empty sum): C = beta * C, in either library.
TEST(Gemm, EmptySumScalesC) {
  for (float beta : {0.0f, 1.0f, 0.5f}) {
    float c[6] = {1, 2, 3, 4, 5, 6}, a[1] = {7}, b[1] = {8};
    cpu::gemm<float>(false, false, 2, 3, 0, 1.0f, a, 1, b, 3, beta, c, 3);
    for (int i = 0; i < 6; ++i) EXPECT_EQ(c[i], beta * float(i + 1)) << "beta " << beta << " element " << i;
  }
}

TEST(Gemm, ZeroBetaGivesTheBlasOwnBitsAndIgnoresWhatCHeld) {
  expect_zero_beta_matches_the_blas<float>(300, 257, 130);  // 77,100 elements: the parallel clear
  expect_zero_beta_matches_the_blas<float>(5, 3, 7);
  expect_zero_beta_matches_the_blas<double>(300, 257, 130);
  expect_zero_beta_matches_the_blas<double>(1, 1, 1);
}

// The f32 products cpu::gemm hands to each library, by their bits: a large weight gradient (A transposed,
// 4096 rows summed into 256 x 256) is the BLAS's, a small one oneDNN's when the f32 GEMM is oneDNN's.
TEST(Gemm, EachProductGoesToItsLibrary) {
  expect_zero_beta_matches_the_blas<float>(256, 256, 4096, true);
  expect_zero_beta_matches_the_blas<float>(64, 48, 4096, true);
  expect_zero_beta_matches_the_blas<float>(300, 257, 130, true);
#if SINKLAB_SGEMM_ONEDNN
  EXPECT_FALSE(cpu::onednn_takes(true, 256, 256, 4096));
  EXPECT_TRUE(cpu::onednn_takes(true, 64, 48, 4096));
  EXPECT_TRUE(cpu::onednn_takes(false, 4096, 4096, 4096));
#endif
}

}  // namespace
}  // namespace sinklab
