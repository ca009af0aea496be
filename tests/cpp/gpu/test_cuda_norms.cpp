// CUDA rmsnorm / layernorm forward and backward against the CPU backend (label "gpu"; skips without a
// usable CUDA device): f32 within 1e-5 (max error over max |reference|) for outputs, saved statistics,
// input and parameter gradients; two runs give the same bits. Rows of 1, widths off every block
// multiple (1, 3, 33, 80, 129, 4099), with and without weight/bias, strided rows, in-place backward,
// and rows with a large mean (the hi+lo mean of the LayerNorm forward); bf16 storage and the fused add +
// RMSNorm and accumulating backward (CudaNormsBf16).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "gpu/gpu_test_util.hpp"

namespace sinklab {
namespace {

using gpu_test::Dev;
using gpu_test::poison;
using gpu_test::random_host;
using gpu_test::same_bits;
using gpu_test::to_device;
using gpu_test::to_host;
using test::Owned;
using test::rel_error;

constexpr double kTol = 1e-5;

struct Case {
  int64_t rows, d;
};
const std::vector<Case> kCases = {{1, 1}, {1, 64}, {5, 3}, {37, 33}, {64, 80}, {17, 129}, {3, 4099}, {1000, 128}};

// in as the right part of a wider buffer (strided rows), shifted by `offset` (a large mean).
struct Input {
  Owned wide;
  Tensor view;
};
Input make_input(const Case& c, uint64_t stream, double offset) {
  Input in{random_host(DType::f32, {c.rows, c.d + 2}, stream), Tensor{}};
  if (offset != 0.0) {
    Owned shift(DType::f32, {c.rows, c.d + 2});
    ops::fill(shift.t, offset);
    ops::add(in.wide.t, in.wide.t, shift.t);
  }
  in.view = in.wide.t.slice(1, 2, c.d);
  return in;
}

TEST(CudaNorms, RmsNormMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t stream = 10;
  for (const Case& c : kCases) {
    for (bool with_weight : {true, false}) {
      SCOPED_TRACE("rows " + std::to_string(c.rows) + " d " + std::to_string(c.d) + (with_weight ? " weight" : ""));
      Input in = make_input(c, stream++, 0.0);
      Owned weight = random_host(DType::f32, {c.d}, stream++);
      Owned d_out = random_host(DType::f32, {c.rows, c.d}, stream++);
      Owned d_weight = random_host(DType::f32, {c.d}, stream++);
      Dev din_wide = to_device(in.wide.t), dweight = to_device(weight.t), dd_out = to_device(d_out.t);
      Dev dd_weight = to_device(d_weight.t), dd_weight2 = to_device(d_weight.t);
      Tensor din = din_wide.t.slice(1, 2, c.d);
      Tensor w = with_weight ? weight.t : Tensor{}, dw = with_weight ? dweight.t : Tensor{};

      Owned out(DType::f32, {c.rows, c.d}), rstd(DType::f32, {c.rows});
      ops::rmsnorm_forward(out.t, rstd.t, in.view, w, 1e-5);
      Dev gout(DType::f32, {c.rows, c.d}), grstd(DType::f32, {c.rows});
      poison(gout.t);
      poison(grstd.t);
      ops::rmsnorm_forward(gout.t, grstd.t, din, dw, 1e-5);
      Owned gout_h = to_host(gout.t);
      EXPECT_LE(rel_error(gout_h.t, out.t), kTol) << "out";
      EXPECT_LE(rel_error(to_host(grstd.t).t, rstd.t), kTol) << "rstd";
      Dev gout2(DType::f32, {c.rows, c.d});
      ops::rmsnorm_forward(gout2.t, grstd.t, din, dw, 1e-5);
      EXPECT_TRUE(same_bits(to_host(gout2.t).t, gout_h.t)) << "forward, second run";

      // backward from the CPU's rstd (both sides see the same saved statistic)
      Dev grstd_cpu = to_device(rstd.t);
      Owned d_in(DType::f32, {c.rows, c.d});
      ops::rmsnorm_backward(d_in.t, with_weight ? d_weight.t : Tensor{}, d_out.t, in.view, w, rstd.t);
      Dev gd_in(DType::f32, {c.rows, c.d});
      poison(gd_in.t);
      ops::rmsnorm_backward(gd_in.t, with_weight ? dd_weight.t : Tensor{}, dd_out.t, din, dw, grstd_cpu.t);
      Owned gd_in_h = to_host(gd_in.t);
      EXPECT_LE(rel_error(gd_in_h.t, d_in.t), kTol) << "d_in";
      if (with_weight) {
        EXPECT_LE(rel_error(to_host(dd_weight.t).t, d_weight.t), kTol) << "d_weight";
      }
      // In place (d_in = d_out) and a second run: the same bits.
      Dev gd_inplace = to_device(d_out.t);
      ops::rmsnorm_backward(gd_inplace.t, with_weight ? dd_weight2.t : Tensor{}, gd_inplace.t, din, dw, grstd_cpu.t);
      EXPECT_TRUE(same_bits(to_host(gd_inplace.t).t, gd_in_h.t)) << "in-place backward";
      if (with_weight) {
        EXPECT_TRUE(same_bits(to_host(dd_weight2.t).t, to_host(dd_weight.t).t)) << "d_weight, second run";
      }
    }
  }
}

TEST(CudaNorms, LayerNormMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t stream = 500;
  for (const Case& c : kCases) {
    for (int affine = 0; affine < 3; ++affine) {  // 0: weight and bias, 1: weight only, 2: neither
      for (double offset : {0.0, 300.0}) {
        SCOPED_TRACE("rows " + std::to_string(c.rows) + " d " + std::to_string(c.d) + " affine " +
                     std::to_string(affine) + " offset " + std::to_string(offset));
        const bool has_w = affine < 2, has_b = affine == 0;
        Input in = make_input(c, stream++, offset);
        Owned weight = random_host(DType::f32, {c.d}, stream++), bias = random_host(DType::f32, {c.d}, stream++);
        Owned d_out = random_host(DType::f32, {c.rows, c.d}, stream++);
        Owned d_weight = random_host(DType::f32, {c.d}, stream++), d_bias = random_host(DType::f32, {c.d}, stream++);
        Dev din_wide = to_device(in.wide.t), dweight = to_device(weight.t), dbias = to_device(bias.t);
        Dev dd_out = to_device(d_out.t), dd_weight = to_device(d_weight.t), dd_bias = to_device(d_bias.t);
        Dev dd_weight2 = to_device(d_weight.t), dd_bias2 = to_device(d_bias.t);
        Tensor din = din_wide.t.slice(1, 2, c.d);
        Tensor w = has_w ? weight.t : Tensor{}, b = has_b ? bias.t : Tensor{};
        Tensor dw = has_w ? dweight.t : Tensor{}, db = has_b ? dbias.t : Tensor{};

        Owned out(DType::f32, {c.rows, c.d}), mean(DType::f32, {c.rows}), rstd(DType::f32, {c.rows});
        ops::layernorm_forward(out.t, mean.t, rstd.t, in.view, w, b, 1e-5);
        Dev gout(DType::f32, {c.rows, c.d}), gmean(DType::f32, {c.rows}), grstd(DType::f32, {c.rows});
        poison(gout.t);
        poison(gmean.t);
        poison(grstd.t);
        ops::layernorm_forward(gout.t, gmean.t, grstd.t, din, dw, db, 1e-5);
        Owned gout_h = to_host(gout.t);
        EXPECT_LE(rel_error(gout_h.t, out.t), kTol) << "out";
        EXPECT_LE(rel_error(to_host(gmean.t).t, mean.t), kTol) << "mean";
        EXPECT_LE(rel_error(to_host(grstd.t).t, rstd.t), kTol) << "rstd";
        Dev gout2(DType::f32, {c.rows, c.d});
        ops::layernorm_forward(gout2.t, gmean.t, grstd.t, din, dw, db, 1e-5);
        EXPECT_TRUE(same_bits(to_host(gout2.t).t, gout_h.t)) << "forward, second run";

        Dev gmean_cpu = to_device(mean.t), grstd_cpu = to_device(rstd.t);
        Owned d_in(DType::f32, {c.rows, c.d});
        ops::layernorm_backward(d_in.t, has_w ? d_weight.t : Tensor{}, d_bias.t, d_out.t, in.view, w, mean.t, rstd.t);
        Dev gd_in(DType::f32, {c.rows, c.d});
        poison(gd_in.t);
        ops::layernorm_backward(gd_in.t, has_w ? dd_weight.t : Tensor{}, dd_bias.t, dd_out.t, din, dw, gmean_cpu.t,
                                grstd_cpu.t);
        Owned gd_in_h = to_host(gd_in.t);
        EXPECT_LE(rel_error(gd_in_h.t, d_in.t), kTol) << "d_in";
        if (has_w) {
          EXPECT_LE(rel_error(to_host(dd_weight.t).t, d_weight.t), kTol) << "d_weight";
        }
        EXPECT_LE(rel_error(to_host(dd_bias.t).t, d_bias.t), kTol) << "d_bias";
        Dev gd_inplace = to_device(d_out.t);
        ops::layernorm_backward(gd_inplace.t, has_w ? dd_weight2.t : Tensor{}, dd_bias2.t, gd_inplace.t, din, dw,
                                gmean_cpu.t, grstd_cpu.t);
        EXPECT_TRUE(same_bits(to_host(gd_inplace.t).t, gd_in_h.t)) << "in-place backward";
        EXPECT_TRUE(same_bits(to_host(dd_bias2.t).t, to_host(dd_bias.t).t)) << "d_bias, second run";
      }
    }
  }
}

// ---- bf16 storage (ops.hpp) and the fused ops: bf16 in / out / d_in / d_out (strided), f32 weights, statistics
// and parameter gradients, against the CPU's bf16 storage; the residual add fused with RMSNorm
// (add_rmsnorm_forward, sum_out over a, the norm reading the rounded sum) and the accumulating backward
// (d_in += dx, the residual stream's gradient), in f32 and bf16.
const std::vector<Case> kBf16Cases = {{1, 1}, {1, 64}, {37, 33}, {17, 129}, {3, 4099}};

TEST(CudaNormsBf16, RmsNormFusedAddAndAccumulateMatchCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t stream = 1100;
  for (const Case& c : kBf16Cases) {
    for (DType dt : {DType::f32, DType::bf16}) {
      SCOPED_TRACE("rows " + std::to_string(c.rows) + " d " + std::to_string(c.d) + " " + dtype_name(dt));
      const double tol = dt == DType::bf16 ? gpu_test::kBf16Tol : kTol;
      gpu_test::HostDev wide = gpu_test::random_pair(dt, {c.rows, c.d + 3}, stream++);
      gpu_test::HostDev b = gpu_test::random_pair(dt, {c.rows, c.d}, stream++);
      gpu_test::HostDev weight = gpu_test::random_pair(DType::f32, {c.d}, stream++);
      gpu_test::HostDev d_out = gpu_test::random_pair(dt, {c.rows, c.d}, stream++);
      gpu_test::HostDev d_acc = gpu_test::random_pair(dt, {c.rows, c.d}, stream++);
      const Tensor a_h = wide.host.t.slice(1, 3, c.d), a_d = wide.dev.t.slice(1, 3, c.d);
      // Fused add + norm, sum_out over a (in place).
      Owned out(dt, {c.rows, c.d}), rstd(DType::f32, {c.rows});
      Dev gout(dt, {c.rows, c.d}), grstd(DType::f32, {c.rows});
      poison(gout.t);
      poison(grstd.t);
      ops::add_rmsnorm_forward(a_h, out.t, rstd.t, a_h, b.host.t, weight.host.t, 1e-5);
      ops::add_rmsnorm_forward(a_d, gout.t, grstd.t, a_d, b.dev.t, weight.dev.t, 1e-5);
      EXPECT_LE(gpu_test::device_error(wide.dev.t, wide.host.t), tol) << "sum_out (and a's other columns)";
      EXPECT_LE(gpu_test::device_error(gout.t, out.t), tol) << "out";
      EXPECT_LE(gpu_test::device_error(grstd.t, rstd.t), kTol) << "rstd";
      // Plain forward of the stored sum: the same rstd bits as the fused kernel's.
      Dev grstd2(DType::f32, {c.rows}), gout2(dt, {c.rows, c.d});
      ops::rmsnorm_forward(gout2.t, grstd2.t, a_d, weight.dev.t, 1e-5);
      EXPECT_TRUE(same_bits(to_host(grstd2.t).t, to_host(grstd.t).t)) << "rstd: fused = add, then norm";
      EXPECT_TRUE(same_bits(to_host(gout2.t).t, to_host(gout.t).t)) << "out: fused = add, then norm";
      // Backward from the CPU's rstd, accumulating into d_acc, with the weight gradient.
      Dev grstd_cpu = to_device(rstd.t);
      Owned d_weight(DType::f32, {c.d});
      Dev gd_weight = to_device(d_weight.t);
      ops::rmsnorm_backward(d_acc.host.t, d_weight.t, d_out.host.t, a_h, weight.host.t, rstd.t, true);
      ops::rmsnorm_backward(d_acc.dev.t, gd_weight.t, d_out.dev.t, a_d, weight.dev.t, grstd_cpu.t, true);
      EXPECT_LE(gpu_test::device_error(d_acc.dev.t, d_acc.host.t), tol) << "d_in +=";
      EXPECT_LE(gpu_test::device_error(gd_weight.t, d_weight.t), kTol) << "d_weight";
      // Written (in place over d_out).
      ops::rmsnorm_backward(d_out.host.t, Tensor{}, d_out.host.t, a_h, weight.host.t, rstd.t);
      ops::rmsnorm_backward(d_out.dev.t, Tensor{}, d_out.dev.t, a_d, weight.dev.t, grstd_cpu.t);
      EXPECT_LE(gpu_test::device_error(d_out.dev.t, d_out.host.t), tol) << "d_in = (in place)";
    }
  }
}

TEST(CudaNormsBf16, LayerNormMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t stream = 1300;
  for (const Case& c : kBf16Cases) {
    SCOPED_TRACE("rows " + std::to_string(c.rows) + " d " + std::to_string(c.d));
    gpu_test::HostDev in = gpu_test::random_pair(DType::bf16, {c.rows, c.d}, stream++);
    gpu_test::HostDev weight = gpu_test::random_pair(DType::f32, {c.d}, stream++);
    gpu_test::HostDev bias = gpu_test::random_pair(DType::f32, {c.d}, stream++);
    gpu_test::HostDev d_out = gpu_test::random_pair(DType::bf16, {c.rows, c.d}, stream++);
    Owned out(DType::bf16, {c.rows, c.d}), mean(DType::f32, {c.rows}), rstd(DType::f32, {c.rows});
    Dev gout(DType::bf16, {c.rows, c.d}), gmean(DType::f32, {c.rows}), grstd(DType::f32, {c.rows});
    ops::layernorm_forward(out.t, mean.t, rstd.t, in.host.t, weight.host.t, bias.host.t, 1e-5);
    ops::layernorm_forward(gout.t, gmean.t, grstd.t, in.dev.t, weight.dev.t, bias.dev.t, 1e-5);
    EXPECT_LE(gpu_test::device_error(gout.t, out.t), gpu_test::kBf16Tol) << "out";
    EXPECT_LE(gpu_test::device_error(gmean.t, mean.t), kTol) << "mean";
    EXPECT_LE(gpu_test::device_error(grstd.t, rstd.t), kTol) << "rstd";
    Dev gmean_cpu = to_device(mean.t), grstd_cpu = to_device(rstd.t);
    Owned d_in(DType::bf16, {c.rows, c.d}), d_weight(DType::f32, {c.d}), d_bias(DType::f32, {c.d});
    Dev gd_in(DType::bf16, {c.rows, c.d}), gd_weight = to_device(d_weight.t), gd_bias = to_device(d_bias.t);
    ops::layernorm_backward(d_in.t, d_weight.t, d_bias.t, d_out.host.t, in.host.t, weight.host.t, mean.t, rstd.t);
    ops::layernorm_backward(gd_in.t, gd_weight.t, gd_bias.t, d_out.dev.t, in.dev.t, weight.dev.t, gmean_cpu.t,
                            grstd_cpu.t);
    EXPECT_LE(gpu_test::device_error(gd_in.t, d_in.t), gpu_test::kBf16Tol) << "d_in";
    EXPECT_LE(gpu_test::device_error(gd_weight.t, d_weight.t), kTol) << "d_weight";
    EXPECT_LE(gpu_test::device_error(gd_bias.t, d_bias.t), kTol) << "d_bias";
  }
}

// Many rows: the parameter gradients' row chunks (column_reduce.cuh) and the grid-stride row loop.
TEST(CudaNorms, ParameterGradientsOverManyRows) {
  SKIP_WITHOUT_CUDA();
  const int64_t rows = 70001, d = 40;
  Owned in = random_host(DType::f32, {rows, d}, 900), weight = random_host(DType::f32, {d}, 901);
  Owned d_out = random_host(DType::f32, {rows, d}, 902);
  Owned out(DType::f32, {rows, d}), rstd(DType::f32, {rows}), d_weight(DType::f32, {d});
  ops::rmsnorm_forward(out.t, rstd.t, in.t, weight.t, 1e-6);
  ops::rmsnorm_backward(Tensor{}, d_weight.t, d_out.t, in.t, weight.t, rstd.t);
  Dev gin = to_device(in.t), gweight = to_device(weight.t), gd_out = to_device(d_out.t), grstd = to_device(rstd.t);
  Dev gd_weight(DType::f32, {d});
  ops::fill(gd_weight.t, 0.0);
  ops::rmsnorm_backward(Tensor{}, gd_weight.t, gd_out.t, gin.t, gweight.t, grstd.t);
  EXPECT_LE(rel_error(to_host(gd_weight.t).t, d_weight.t), kTol);
  Dev gout(DType::f32, {rows, d});
  ops::rmsnorm_forward(gout.t, grstd.t, gin.t, gweight.t, 1e-6);
  EXPECT_LE(rel_error(to_host(gout.t).t, out.t), kTol);
}

}  // namespace
}  // namespace sinklab
