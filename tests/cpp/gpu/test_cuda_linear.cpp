// CUDA linear_forward / linear_backward / matmul (cuBLASLt) against the CPU backend (label "gpu"; skips
// without a usable CUDA device): f32 within 1e-5 (max error over max |reference|), bf16 inputs with
// f32 accumulation within 1e-5 of the CPU's f32 product of the same bf16-rounded inputs (bf16 x bf16
// products are exact in f32) and within 4e-3 when the output itself is rounded to bf16 (half an ulp of
// bf16 is 2^-9 = 2e-3 relative); two runs give the same bits. Shapes include 1s, primes and sizes off
// every tile multiple, strided views and K = 0.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu/gpu_test_util.hpp"

namespace sinklab {
namespace {

using gpu_test::bf16_rounded;
using gpu_test::Dev;
using gpu_test::poison;
using gpu_test::random_host;
using gpu_test::same_bits;
using gpu_test::to_device;
using gpu_test::to_host;
using test::Owned;
using test::rel_error;

constexpr double kTolF32 = 1e-5;
constexpr double kTolBf16Out = 4e-3;
// A bf16 output with the bias in cuBLASLt's epilogue: measured 4.85e-3 (M 37 K 53 N 29) and 4.74e-3 (M 300
// K 128 N 64) on an H200 with cuBLASLt 13.1 (2026-11-28), over the 4e-3 of one rounding: consistent with
// the product rounded to bf16 before the bias is added and the sum rounded again. Three half-ulps.
constexpr double kTolBf16OutBias = 6e-3;

struct Shape {
  int64_t M, K, N;
};
const std::vector<Shape> kShapes = {{1, 1, 1}, {1, 64, 3}, {37, 53, 29}, {128, 80, 257}, {300, 128, 64}, {5, 0, 7}};

// One linear layer's forward and backward on both backends. `dt` is the device input dtype; `out_dt`
// the device output dtype (the CPU runs f32 on the same, already rounded, inputs).
void check_linear(const Shape& s, DType dt, DType out_dt, bool with_bias, uint64_t seed) {
  SCOPED_TRACE("M " + std::to_string(s.M) + " K " + std::to_string(s.K) + " N " + std::to_string(s.N) + " " +
               dtype_name(dt) + " -> " + dtype_name(out_dt) + (with_bias ? " bias" : ""));
  const bool rounded = dt == DType::bf16;
  auto input = [&](std::vector<int64_t> dims, uint64_t stream) {
    Owned h = random_host(DType::f32, dims, stream);
    return rounded ? bf16_rounded(h.t) : std::move(h);
  };
  // in is the left part of a wider buffer: strided rows.
  Owned in_wide = input({s.M, s.K + 3}, seed);
  Tensor in = in_wide.t.slice(1, 0, s.K);
  Owned weight = input({s.N, s.K}, seed + 1);
  Owned bias = input({s.N}, seed + 2);
  Owned d_out = input({s.M, s.N}, seed + 3);
  const double tol = out_dt == DType::bf16 ? kTolBf16Out : kTolF32;
  const double tol_forward = out_dt == DType::bf16 && with_bias ? kTolBf16OutBias : tol;

  Dev din_wide = to_device(in_wide.t, dt), dweight = to_device(weight.t, dt), dd_out = to_device(d_out.t, dt);
  Dev dbias = to_device(bias.t, out_dt);
  Tensor dev_in = din_wide.t.slice(1, 0, s.K);

  // forward
  Owned out(DType::f32, {s.M, s.N});
  ops::linear_forward(out.t, in, weight.t, with_bias ? bias.t : Tensor{});
  Dev dout(out_dt, {s.M, s.N});
  poison(dout.t);
  ops::linear_forward(dout.t, dev_in, dweight.t, with_bias ? dbias.t : Tensor{});
  Owned got = to_host(dout.t, DType::f32);
  EXPECT_LE(rel_error(got.t, out.t), tol_forward) << "linear_forward";
  Dev dout2(out_dt, {s.M, s.N});
  ops::linear_forward(dout2.t, dev_in, dweight.t, with_bias ? dbias.t : Tensor{});
  EXPECT_TRUE(same_bits(to_host(dout2.t).t, to_host(dout.t).t)) << "linear_forward, second run";

  // backward: d_in written, d_weight and d_bias accumulated onto what they hold
  Owned d_in(DType::f32, {s.M, s.K});
  Owned d_weight = input({s.N, s.K}, seed + 4), d_bias = input({s.N}, seed + 5);
  Dev gd_in(out_dt, {s.M, s.K});
  poison(gd_in.t);
  Dev gd_weight = to_device(d_weight.t, out_dt), gd_bias = to_device(d_bias.t, out_dt);
  Owned d_weight0 = Owned::copy_of(d_weight.t, DType::f32);
  ops::linear_backward(d_in.t, d_weight.t, with_bias ? d_bias.t : Tensor{}, d_out.t, in, weight.t);
  ops::linear_backward(gd_in.t, gd_weight.t, with_bias ? gd_bias.t : Tensor{}, dd_out.t, dev_in, dweight.t);
  EXPECT_LE(rel_error(to_host(gd_in.t, DType::f32).t, d_in.t), tol) << "d_in";
  EXPECT_LE(rel_error(to_host(gd_weight.t, DType::f32).t, d_weight.t), tol) << "d_weight";
  if (with_bias) {
    EXPECT_LE(rel_error(to_host(gd_bias.t, DType::f32).t, d_bias.t), tol) << "d_bias";
  }

  // Run-to-run: the same backward from the same start gives the same bits.
  Dev gd_in2(out_dt, {s.M, s.K});
  Dev gd_weight2 = to_device(d_weight0.t, out_dt), gd_weight3 = to_device(d_weight0.t, out_dt);
  Dev gd_bias2(out_dt, {s.N}), gd_bias3(out_dt, {s.N});
  ops::fill(gd_bias2.t, 0.5);
  ops::fill(gd_bias3.t, 0.5);
  ops::linear_backward(gd_in2.t, gd_weight2.t, gd_bias2.t, dd_out.t, dev_in, dweight.t);
  ops::linear_backward(Tensor{}, gd_weight3.t, gd_bias3.t, dd_out.t, dev_in, dweight.t);
  EXPECT_TRUE(same_bits(to_host(gd_in2.t).t, to_host(gd_in.t).t)) << "d_in, second run";
  EXPECT_TRUE(same_bits(to_host(gd_weight2.t).t, to_host(gd_weight3.t).t)) << "d_weight, second run";
  EXPECT_TRUE(same_bits(to_host(gd_bias2.t).t, to_host(gd_bias3.t).t)) << "d_bias, second run";
}

TEST(CudaLinear, F32MatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 100;
  for (const Shape& s : kShapes)
    for (bool bias : {false, true}) check_linear(s, DType::f32, DType::f32, bias, seed += 10);
}

TEST(CudaLinear, Bf16InputsF32OutputMatchCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 300;
  for (const Shape& s : kShapes)
    for (bool bias : {false, true}) check_linear(s, DType::bf16, DType::f32, bias, seed += 10);
}

TEST(CudaLinear, Bf16OutputWithinBf16Rounding) {
  SKIP_WITHOUT_CUDA();
  uint64_t seed = 500;
  for (const Shape& s : kShapes)
    for (bool bias : {false, true}) check_linear(s, DType::bf16, DType::bf16, bias, seed += 10);
}

// Leading dims that collapse into rows ([B,T,K] input), a bias that is a strided view.
TEST(CudaLinear, ThreeDimInputAndStridedBias) {
  SKIP_WITHOUT_CUDA();
  Owned in = random_host(DType::f32, {3, 7, 19}, 700), weight = random_host(DType::f32, {11, 19}, 701);
  // A strided bias: column 1 of [11, 2].
  Owned bias2 = random_host(DType::f32, {11, 2}, 702);
  Tensor strided_bias = bias2.t.slice(1, 1, 1);
  strided_bias.ndim = 1;  // [11] with stride 2
  Owned out(DType::f32, {3, 7, 11});
  ops::linear_forward(out.t, in.t, weight.t, strided_bias);
  Dev din = to_device(in.t), dweight = to_device(weight.t), dbias2 = to_device(bias2.t);
  Tensor dstrided = dbias2.t.slice(1, 1, 1);
  dstrided.ndim = 1;
  Dev dout(DType::f32, {3, 7, 11});
  poison(dout.t);
  ops::linear_forward(dout.t, din.t, dweight.t, dstrided);
  EXPECT_LE(rel_error(to_host(dout.t).t, out.t), kTolF32);
}

struct MatmulCase {
  int64_t batch, M, K, N;
  bool ta, tb;
  double alpha, beta;
};

TEST(CudaMatmul, MatchesCpu) {
  SKIP_WITHOUT_CUDA();
  const std::vector<MatmulCase> cases = {
      {0, 1, 1, 1, false, false, 1.0, 0.0},   {0, 17, 33, 9, false, true, 0.5, 0.0},
      {0, 64, 80, 65, true, false, 1.0, 1.0}, {0, 31, 7, 129, true, true, -2.0, 0.25},
      {4, 1, 64, 1, false, true, 1.0, 0.0},   {3, 37, 64, 37, false, true, 0.125, 0.0},
      {5, 33, 37, 80, false, false, 1.0, 0.5}, {2, 19, 128, 23, true, false, 1.0, 0.0}};
  uint64_t seed = 800;
  for (const MatmulCase& c : cases) {
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE("batch " + std::to_string(c.batch) + " M " + std::to_string(c.M) + " K " + std::to_string(c.K) +
                   " N " + std::to_string(c.N) + (c.ta ? " aT" : "") + (c.tb ? " bT" : "") + " " + dtype_name(dt));
      auto dims = [&](int64_t r, int64_t k) {
        return c.batch ? std::vector<int64_t>{c.batch, r, k} : std::vector<int64_t>{r, k};
      };
      auto input = [&](std::vector<int64_t> d) {
        Owned h = random_host(DType::f32, d, seed++);
        return dt == DType::bf16 ? bf16_rounded(h.t) : std::move(h);
      };
      Owned a = input(c.ta ? dims(c.K, c.M) : dims(c.M, c.K));
      Owned b = input(c.tb ? dims(c.N, c.K) : dims(c.K, c.N));
      Owned out = input(dims(c.M, c.N));
      Dev da = to_device(a.t, dt), db = to_device(b.t, dt), dout = to_device(out.t, DType::f32);
      Dev dout2 = to_device(out.t, DType::f32);
      ops::matmul(out.t, a.t, b.t, c.ta, c.tb, c.alpha, c.beta);
      ops::matmul(dout.t, da.t, db.t, c.ta, c.tb, c.alpha, c.beta);
      ops::matmul(dout2.t, da.t, db.t, c.ta, c.tb, c.alpha, c.beta);
      Owned got = to_host(dout.t);
      EXPECT_LE(rel_error(got.t, out.t), kTolF32);
      EXPECT_TRUE(same_bits(to_host(dout2.t).t, got.t)) << "second run";
    }
  }
  // 3-D with a batch stride larger than the matrix: every other [M,K] block of a [2B, M, K] buffer.
  Owned a = random_host(DType::f32, {6, 5, 8}, 900), b = random_host(DType::f32, {3, 8, 4}, 901);
  Tensor a_view = a.t;
  a_view.shape[0] = 3;
  a_view.stride[0] = 2 * 5 * 8;
  Owned out(DType::f32, {3, 5, 4});
  ops::matmul(out.t, a_view, b.t, false, false);
  Dev da = to_device(a.t), db = to_device(b.t);
  Tensor da_view = da.t;
  da_view.shape[0] = 3;
  da_view.stride[0] = 2 * 5 * 8;
  Dev dout(DType::f32, {3, 5, 4});
  poison(dout.t);
  ops::matmul(dout.t, da_view, db.t, false, false);
  EXPECT_LE(rel_error(to_host(dout.t).t, out.t), kTolF32) << "strided batch";
}

TEST(CudaMatmul, RefusesOtherDtypesNamingTheOp) {
  SKIP_WITHOUT_CUDA();
  Dev a(DType::f16, {4, 4}), b(DType::f16, {4, 4}), out(DType::f32, {4, 4});
  try {
    ops::matmul(out.t, a.t, b.t, false, false);
    ADD_FAILURE() << "matmul on f16 did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("matmul"), std::string::npos) << e.what();
  }
  Dev x(DType::f32, {4, 4}), w(DType::f32, {4, 4}), o16(DType::bf16, {4, 4});
  try {
    ops::linear_forward(o16.t, x.t, w.t, Tensor{});
    ADD_FAILURE() << "f32 inputs into a bf16 output did not throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("linear_forward"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sinklab
