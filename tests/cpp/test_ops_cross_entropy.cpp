// Fused softmax cross-entropy on the CPU backend against F.cross_entropy in float64
// (tests/python/goldens/gen_cross_entropy.py), in f32 and f64; aliasing, strided rows, ignore_index,
// finite differences and the online-softmax helpers of cross_entropy_math.hpp.
#include <cmath>
#include <string>
#include <vector>

#include "backend/cross_entropy_math.hpp"
#include "test_util.hpp"

namespace sinklab {
namespace {

using test::Golden;
using test::Owned;
using test::rel_error;
using test::kDtypes;
using test::tol;

// Absolute check for tensors whose reference is all zero (rel_error falls back to max abs error).
double max_abs(const Tensor& t) {
  double m = 0;
  for (int64_t i = 0; i < t.numel(); ++i) m = std::max(m, std::fabs(test::element(t, i)));
  return m;
}

TEST(CrossEntropy, MatchesTorch) {
  Golden g("cross_entropy.safetensors");
  ASSERT_EQ(g.cases().size(), 6u);
  for (const std::string& c : g.cases()) {
    for (DType dt : kDtypes) {
      SCOPED_TRACE(c + " " + dtype_name(dt));
      Owned logits = g.get(c + "/logits", dt);
      Tensor targets = g.raw(c + "/targets");
      const int ignore = int(g.param(c + "/ignore_index"));
      const double scale = g.param(c + "/grad_scale");
      const int64_t N = logits.t.shape[0], V = logits.t.shape[1];
      Tensor ref_loss = g.raw(c + "/losses"), ref_d = g.raw(c + "/d_logits");

      Owned losses(dt, {N}), d(dt, {N, V});
      ops::fill(losses, std::nan(""));
      ops::fill(d, std::nan(""));
      ops::cross_entropy(losses, d, logits, targets, ignore, scale);
      EXPECT_LE(rel_error(losses, ref_loss), tol(dt));
      EXPECT_LE(rel_error(d, ref_d), tol(dt));
      if (c == "all_ignored") {
        EXPECT_EQ(max_abs(losses), 0.0);
        EXPECT_EQ(max_abs(d), 0.0);
      }

      // Losses only.
      Owned losses2(dt, {N});
      ops::cross_entropy(losses2, Tensor{}, logits, targets, ignore, scale);
      EXPECT_LE(rel_error(losses2, ref_loss), tol(dt));

      // In place: d_logits aliases logits.
      Owned inplace = g.get(c + "/logits", dt);
      Owned losses3(dt, {N});
      ops::cross_entropy(losses3, inplace, inplace, targets, ignore, scale);
      EXPECT_LE(rel_error(losses3, ref_loss), tol(dt));
      EXPECT_LE(rel_error(inplace, ref_d), tol(dt));

      // Strided rows (a [N, V] slice of a wider buffer), gradient into another strided slice.
      Owned wide(dt, {N, V + 7}), dwide(dt, {N, V + 3});
      ops::fill(wide, 1e30);
      Tensor lv = wide.t.slice(1, 2, V), dv = dwide.t.slice(1, 1, V);
      ops::copy(lv, logits);
      Owned losses4(dt, {N});
      ops::cross_entropy(losses4, dv, lv, targets, ignore, scale);
      EXPECT_LE(rel_error(losses4, ref_loss), tol(dt));
      EXPECT_LE(rel_error(dv, ref_d), tol(dt));
    }
  }
}

TEST(CrossEntropy, FiniteDifferencesF64) {
  const int64_t N = 5, V = 11;
  Owned logits(DType::f64, {N, V}), targets(DType::i32, {N}), losses(DType::f64, {N}), d(DType::f64, {N, V});
  test::randn(logits, 21, 3.0);
  const int32_t tv[N] = {3, -100, 0, 10, 7};
  for (int64_t n = 0; n < N; ++n) targets.data<int32_t>()[n] = tv[n];
  const double scale = 1.0 / 4;  // mean over the 4 counted rows
  ops::cross_entropy(losses, d, logits, targets, -100, scale);
  auto loss = [&] {
    Owned l(DType::f64, {N});
    ops::cross_entropy(l, Tensor{}, logits, targets, -100, scale);
    double s = 0;
    for (int64_t n = 0; n < N; ++n) s += l.data<double>()[n];
    return s * scale;
  };
  EXPECT_LT(test::finite_difference_error(logits, d, loss), 1e-6);
  // The ignored row has zero loss and zero gradient.
  EXPECT_EQ(losses.data<double>()[1], 0.0);
  for (int64_t j = 0; j < V; ++j) EXPECT_EQ(d.data<double>()[V + j], 0.0);
}

TEST(CrossEntropy, HugeLogitsStayFinite) {
  for (DType dt : kDtypes) {
    Owned logits(dt, {2, 3}), targets(DType::i32, {2}), losses(dt, {2}), d(dt, {2, 3});
    const double vals[6] = {1000, 0, -1000, 3e4, 3e4, 3e4};
    for (int i = 0; i < 6; ++i) ops::fill(logits.t.reshape({6}).slice(0, i, 1), vals[i]);
    targets.data<int32_t>()[0] = 1;
    targets.data<int32_t>()[1] = 2;
    ops::cross_entropy(losses, d, logits, targets, -100, 1.0);
    EXPECT_NEAR(test::element(losses, 0), 1000.0, 1e-9);
    EXPECT_NEAR(test::element(losses, 1), std::log(3.0), 1e-6);
    EXPECT_NEAR(test::element(d, 0), 1.0, 1e-9);
    EXPECT_NEAR(test::element(d, 1), -1.0, 1e-9);
    EXPECT_NEAR(test::element(d, 5), 1.0 / 3 - 1, 1e-6);
  }
}

TEST(CrossEntropy, OutOfRangeTargetsThrow) {
  Owned logits(DType::f32, {3, 4}), targets(DType::i32, {3}), losses(DType::f32, {3});
  int32_t* t = targets.data<int32_t>();
  t[0] = 0; t[1] = 3; t[2] = -100;
  EXPECT_NO_THROW(ops::cross_entropy(losses, Tensor{}, logits, targets, -100, 1.0));
  t[1] = 4;
  EXPECT_THROW(ops::cross_entropy(losses, Tensor{}, logits, targets, -100, 1.0), Error);
  t[1] = -1;
  EXPECT_THROW(ops::cross_entropy(losses, Tensor{}, logits, targets, -100, 1.0), Error);
  t[1] = -1;  // -1 is fine when it is the ignore index
  t[2] = 0;
  EXPECT_NO_THROW(ops::cross_entropy(losses, Tensor{}, logits, targets, -1, 1.0));
  Owned bad_losses(DType::f32, {2});
  t[1] = 1;
  EXPECT_THROW(ops::cross_entropy(bad_losses, Tensor{}, logits, targets, -100, 1.0), Error);
}

// The online helpers a CUDA block reduction uses agree with the two-pass statistics.
TEST(CrossEntropyMath, OnlineStatsMatchTwoPass) {
  std::vector<double> x(203);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 30.0 * philox_normal(5, 0, i);
  double mx = -INFINITY, sum = 0;
  for (double v : x) mx = std::max(mx, v);
  for (double v : x) sum += std::exp(v - mx);
  // Sequential push.
  auto s = math::ce_empty<double>();
  for (double v : x) math::ce_push(s, v);
  EXPECT_EQ(s.max, mx);
  EXPECT_NEAR(s.sum / sum, 1.0, 1e-13);
  // Four strided partials combined in a tree, with an empty partial.
  math::SoftmaxStats<double> part[5] = {math::ce_empty<double>(), math::ce_empty<double>(),
                                        math::ce_empty<double>(), math::ce_empty<double>(),
                                        math::ce_empty<double>()};
  for (size_t i = 0; i < x.size(); ++i) math::ce_push(part[i % 4], x[i]);
  auto t = math::ce_combine(math::ce_combine(part[0], part[4]),
                            math::ce_combine(math::ce_combine(part[1], part[2]), part[3]));
  EXPECT_EQ(t.max, mx);
  EXPECT_NEAR(t.sum / sum, 1.0, 1e-13);
  EXPECT_NEAR(math::ce_loss(t, x[17]), std::log(sum) + mx - x[17], 1e-12);
}

}  // namespace
}  // namespace sinklab
