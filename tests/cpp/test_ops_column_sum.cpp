// column_sum (CPU, f32 and f64) against a direct long-double loop over the logical elements: plain column
// sums (1 row, 1 column, rows and columns that fill no tile or block evenly), sums over several leading
// dims into a per-head output, strided input views, accumulation, bit-identical results for any
// number of threads, and the shape/dtype errors.
#include <omp.h>

#include <string>
#include <vector>

#include "test_util.hpp"

namespace sinklab {
namespace {

using test::Owned;
using test::rel_error;

// want[o, c] = (accumulate ? out0[o, c] : 0) + sum over l of in[l*O + o, c], from the logical (row-major)
// elements of `in` whatever its strides, in long double.
Owned reference(const Tensor& in, const Tensor& out0, bool accumulate) {
  const int64_t C = out0.shape[out0.ndim - 1], O = out0.numel() / C, L = in.numel() / (O * C);
  Owned want(DType::f64, test::dims_of(out0));
  for (int64_t o = 0; o < O; ++o)
    for (int64_t c = 0; c < C; ++c) {
      long double s = accumulate ? test::element(out0, o * C + c) : 0.0L;
      for (int64_t l = 0; l < L; ++l) s += test::element(in, (l * O + o) * C + c);
      want.data<double>()[o * C + c] = double(s);
    }
  return want;
}

// Runs column_sum(out, in, accumulate) on a random out and compares with the reference.
void check(const Tensor& in, const std::vector<int64_t>& out_dims, bool accumulate, uint64_t stream) {
  Owned out(in.dtype, out_dims);
  test::randn(out, stream, 2.0);
  Owned want = reference(in, out, accumulate);
  ops::column_sum(out, in, accumulate);
  EXPECT_LE(rel_error(out, want), test::tol(in.dtype)) << "in " << in.shape_str() << " out " << out.t.shape_str()
                                                       << (accumulate ? " (+=)" : " (=)");
}

TEST(OpsColumnSum, ColumnSumsOfOddShapes) {
  const std::vector<std::vector<int64_t>> shapes = {{1, 7}, {37, 1}, {1, 1}, {203, 67}, {5, 64}, {1031, 129}};
  for (DType dt : test::kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    uint64_t stream = 1;
    for (const auto& shape : shapes) {
      Owned in(dt, shape);
      test::randn(in, stream++);
      for (bool accumulate : {false, true}) check(in, {shape[1]}, accumulate, stream++);
    }
  }
}

TEST(OpsColumnSum, SumsOverSeveralLeadingDims) {
  for (DType dt : test::kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Owned in(dt, {3, 11, 4, 13});  // [B, T, H, dh]
    test::randn(in, 21);
    for (bool accumulate : {false, true}) {
      check(in, {4, 13}, accumulate, 22);      // per head: over B and T
      check(in, {13}, accumulate, 23);         // shared: over B, T and H
      check(in, {11, 4, 13}, accumulate, 24);  // over B only
      check(in, {3, 11, 4, 13}, accumulate, 25);  // nothing to sum: a copy (or an add)
    }
  }
}

TEST(OpsColumnSum, StridedInputViews) {
  for (DType dt : test::kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    // A column block of a wider matrix: rows 150 apart, 67 columns from column 40.
    Owned wide(dt, {203, 150});
    test::randn(wide, 31);
    check(wide.t.slice(1, 40, 67), {67}, true, 32);
    // Lead key 0, first 5 of 8 features, of a [B, S, H, dh] key gradient: [B, 1, H, 5] with strides
    // (S*H*dh, H*dh, dh, 1), summed per head and over the heads (the transformer's k*/v* gradients).
    Owned keys(dt, {6, 9, 3, 8});
    test::randn(keys, 33);
    Tensor lead_key = keys.t.slice(1, 0, 1).slice(3, 0, 5);
    check(lead_key, {3, 5}, true, 34);
    check(lead_key, {5}, false, 35);
    // A broadcast (stride 0) leading dim: every row is the same row.
    Owned row(dt, {1, 19});
    test::randn(row, 36);
    Tensor repeated = row.t;
    repeated.shape[0] = 7;
    repeated.stride[0] = 0;
    check(repeated, {19}, false, 37);
  }
}

// Large enough for the parallel loop: the same bits with 1, 2, 3 and 7 threads.
TEST(OpsColumnSum, SameBitsForAnyThreadCount) {
  for (DType dt : test::kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    Owned in(dt, {2053, 4, 33});
    test::randn(in, 41, 3.0);
    Owned first(dt, {4, 33});
    for (int threads : {1, 2, 3, 7}) {
      SCOPED_TRACE(std::to_string(threads) + " threads");
      omp_set_num_threads(threads);
      Owned out(dt, {4, 33});
      ops::column_sum(out, in);
      if (threads == 1) ops::copy(first, out);
      EXPECT_EQ(rel_error(out, first), 0.0);
    }
    omp_set_num_threads(omp_get_num_procs());
    Owned want = reference(in, first, false);
    EXPECT_LE(rel_error(first, want), test::tol(dt));
  }
}

TEST(OpsColumnSum, BadOperandsAreClearErrors) {
  Owned in(DType::f32, {5, 4, 3});
  auto expect_error = [](const std::function<void()>& call, const std::string& words) {
    try {
      call();
      ADD_FAILURE() << "no error (expected one mentioning '" << words << "')";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("column_sum"), std::string::npos) << e.what();
      EXPECT_NE(std::string(e.what()).find(words), std::string::npos) << e.what();
    }
  };
  Owned wrong_shape(DType::f32, {4});
  expect_error([&] { ops::column_sum(wrong_shape, in); }, "trailing dims");
  Owned too_many_dims(DType::f32, {2, 5, 4, 3});
  expect_error([&] { ops::column_sum(too_many_dims, in); }, "trailing dims");
  Owned f64_out(DType::f64, {3});
  expect_error([&] { ops::column_sum(f64_out, in); }, "f64");
}

}  // namespace
}  // namespace sinklab
