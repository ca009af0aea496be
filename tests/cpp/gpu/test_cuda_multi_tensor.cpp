// The multi-tensor ops on CUDA (multi_tensor.cu) against the CPU backend (label "gpu"; skips without a usable
// CUDA device): sum_squares_ranges (double sums within 1e-12 of the CPU's, which add in another order) and
// adamw_update_ranges (f32 arithmetic as the CPU's, within 1e-6; the bf16 copy of the parameters; weight
// decay by tag; grad_scale), over ranges that cross chunk boundaries, are out of order, leave gaps, hold one
// element or none; elements outside every range untouched; the same ranges again (the cached chunk table)
// and other ranges (a second table). Also adamw_update's grad_scale.
#include <gtest/gtest.h>

#include <cmath>
#include <utility>
#include <vector>

#include "gpu/gpu_test_util.hpp"

namespace sinklab {
namespace {

using gpu_test::Dev;
using gpu_test::HostDev;
using gpu_test::random_pair;
using gpu_test::same_bits;
using gpu_test::to_device;
using gpu_test::to_host;
using test::Owned;
using test::rel_error;

constexpr int64_t kN = 100003;

ops::FlatRanges some_ranges() {
  ops::FlatRanges r;
  r.ranges = {{40000, 90001}, {5, 6}, {7, 7}, {10, 16394}, {16394, 16400}, {90010, 100003}};
  r.tags = {1, 0, 1, 1, 0, 0};
  return r;
}
ops::FlatRanges other_ranges() {
  ops::FlatRanges r;
  r.ranges = {{0, 33000}, {33000, 33001}};
  r.tags = {0, 1};
  return r;
}

TEST(CudaMultiTensor, SumSquaresRangesMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  HostDev flat = random_pair(DType::f32, {kN}, 10);
  for (const ops::FlatRanges& ranges : {some_ranges(), other_ranges(), some_ranges()}) {
    Owned out(DType::f64, {3});
    Dev gout(DType::f64, {3});
    gpu_test::poison(gout.t);
    ops::sum_squares_ranges(out.t, flat.host.t, ranges);
    ops::sum_squares_ranges(gout.t, flat.dev.t, ranges);
    Owned got = to_host(gout.t);
    for (int t = 0; t < 3; ++t)
      EXPECT_NEAR(got.data<double>()[t], out.data<double>()[t], 1e-12 * out.data<double>()[t]) << "tag " << t;
  }
}

TEST(CudaMultiTensor, AdamWUpdateRangesMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  HostDev param = random_pair(DType::f32, {kN}, 20), m = random_pair(DType::f32, {kN}, 21, 0.1);
  HostDev v = random_pair(DType::f32, {kN}, 22, 0.0), lp = random_pair(DType::bf16, {kN}, 23);
  ops::AdamWStep s;
  s.lr = 3e-3;
  s.beta2 = 0.95;
  s.weight_decay = 0.1;
  int64_t step = 0;
  for (const ops::FlatRanges& ranges : {some_ranges(), some_ranges(), other_ranges()}) {
    SCOPED_TRACE(step);
    s.step = ++step;
    s.grad_scale = step == 2 ? 1.0 : 0.37;
    HostDev grad = random_pair(DType::f32, {kN}, 30 + uint64_t(step), 0.5);
    ops::adamw_update_ranges(param.host.t, grad.host.t, m.host.t, v.host.t, lp.host.t, ranges, s);
    ops::adamw_update_ranges(param.dev.t, grad.dev.t, m.dev.t, v.dev.t, lp.dev.t, ranges, s);
    EXPECT_LE(rel_error(to_host(param.dev.t).t, param.host.t), 1e-6) << "param";
    EXPECT_LE(rel_error(to_host(m.dev.t).t, m.host.t), 1e-6) << "m";
    EXPECT_LE(rel_error(to_host(v.dev.t).t, v.host.t), 1e-6) << "v";
    EXPECT_LE(gpu_test::device_error(lp.dev.t, lp.host.t), gpu_test::kBf16Tol) << "param_lp";
  }
  // Elements in no range of any call ([33001, 40000) and [90001, 90010)): exactly as they started.
  HostDev param0 = random_pair(DType::f32, {kN}, 20), lp0 = random_pair(DType::bf16, {kN}, 23);
  for (const auto& [begin, size] : {std::pair<int64_t, int64_t>{33001, 6999}, {90001, 9}}) {
    EXPECT_TRUE(same_bits(to_host(param.dev.t.slice(0, begin, size)).t, param0.host.t.slice(0, begin, size)));
    EXPECT_TRUE(same_bits(to_host(lp.dev.t.slice(0, begin, size)).t, lp0.host.t.slice(0, begin, size)));
  }
}

TEST(CudaMultiTensor, AdamWUpdateScalesTheGradient) {
  SKIP_WITHOUT_CUDA();
  HostDev param = random_pair(DType::f32, {33, 65}, 40), grad = random_pair(DType::f32, {33, 65}, 41);
  HostDev m = random_pair(DType::f32, {33, 65}, 42, 0.1), v = random_pair(DType::f32, {33, 65}, 43, 0.0);
  ops::AdamWStep s;
  s.weight_decay = 0.1;
  s.grad_scale = 0.25;
  ops::adamw_update(param.host.t, grad.host.t, m.host.t, v.host.t, s);
  ops::adamw_update(param.dev.t, grad.dev.t, m.dev.t, v.dev.t, s);
  EXPECT_LE(rel_error(to_host(param.dev.t).t, param.host.t), 1e-6) << "param";
  EXPECT_LE(rel_error(to_host(m.dev.t).t, m.host.t), 1e-6) << "m";
}

}  // namespace
}  // namespace sinklab
