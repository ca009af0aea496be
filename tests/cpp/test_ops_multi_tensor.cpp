// The ops a training step runs without waiting for the device (ops.hpp): reduce_into, the multi-tensor
// sum_squares_ranges and adamw_update_ranges, the fused add_rmsnorm_forward and rmsnorm_backward's
// accumulate. Each is checked against the single-tensor ops it stands for (which have their PyTorch
// goldens in test_ops_adamw / test_ops_norms) bit for bit on the CPU, and the reductions against sums
// formed here.
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "test_util.hpp"

namespace sinklab {
namespace {

using test::Owned;

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.nbytes() == b.nbytes() && std::memcmp(a.data, b.data, a.nbytes()) == 0;
}

TEST(ReduceInto, SumsAndMaxInDoubleAndAccumulates) {
  Owned x(DType::f32, {3, 5}), out(DType::f64, {1});
  test::randn(x.t, 1);
  double sum = 0, squares = 0, max = 0;
  for (int64_t i = 0; i < 15; ++i) {
    const double v = x.data<float>()[i];
    sum += v;
    squares += v * v;
    max = std::max(max, std::fabs(v));
  }
  ops::reduce_into(out, x, ops::Reduction::sum);
  EXPECT_EQ(out.data<double>()[0], sum);
  ops::reduce_into(out, x, ops::Reduction::sum_squares, true);
  EXPECT_DOUBLE_EQ(out.data<double>()[0], sum + squares);
  EXPECT_EQ(ops::sum_squares(x), squares);
  ops::reduce_into(out, x, ops::Reduction::max_abs);
  EXPECT_EQ(out.data<double>()[0], max);
  out.data<double>()[0] = 1e9;
  ops::reduce_into(out, x, ops::Reduction::max_abs, true);
  EXPECT_EQ(out.data<double>()[0], 1e9);
  x.data<float>()[7] = std::numeric_limits<float>::quiet_NaN();
  ops::reduce_into(out, x, ops::Reduction::max_abs, true);
  EXPECT_TRUE(std::isnan(out.data<double>()[0]));
  ops::reduce_into(out, x.t.slice(0, 2, 1), ops::Reduction::max_abs, true);  // a NaN stays
  EXPECT_TRUE(std::isnan(out.data<double>()[0]));
  Owned wrong(DType::f32, {1});
  EXPECT_THROW(ops::reduce_into(wrong, x, ops::Reduction::sum), Error);
}

TEST(SumSquaresRanges, EqualsSumSquaresPerRangeByTag) {
  Owned flat(DType::f32, {1000}), out(DType::f64, {3});
  test::randn(flat.t, 2);
  ops::FlatRanges r;
  r.ranges = {{0, 100}, {100, 101}, {400, 1000}, {150, 400}, {101, 101}};
  r.tags = {2, 0, 2, 1, 0};
  ops::sum_squares_ranges(out, flat, r);
  const double t2 = ops::sum_squares(flat.t.slice(0, 0, 100)) + ops::sum_squares(flat.t.slice(0, 400, 600));
  EXPECT_EQ(out.data<double>()[2], t2);
  EXPECT_EQ(out.data<double>()[0], ops::sum_squares(flat.t.slice(0, 100, 1)));
  EXPECT_EQ(out.data<double>()[1], ops::sum_squares(flat.t.slice(0, 150, 250)));
  r.ranges[1] = {90, 110};  // overlaps the first
  EXPECT_THROW(ops::sum_squares_ranges(out, flat, r), Error);
  r.ranges[1] = {100, 101};
  r.tags[0] = 3;  // no slot 3 in out
  EXPECT_THROW(ops::sum_squares_ranges(out, flat, r), Error);
}

TEST(AdamWUpdateRanges, EqualsAdamWPerRangeWithDecayByTag) {
  const int64_t n = 300;
  Owned p(DType::f32, {n}), g(DType::f32, {n}), m(DType::f32, {n}), v(DType::f32, {n});
  test::randn(p.t, 3);
  test::randn(g.t, 4);
  test::randn(m.t, 5, 0.1);
  ops::fill(v, 0.01);
  Owned p2 = Owned::copy_of(p, DType::f32), g2 = Owned::copy_of(g, DType::f32), m2 = Owned::copy_of(m, DType::f32),
        v2 = Owned::copy_of(v, DType::f32), lp(DType::bf16, {n});
  ops::fill(lp, 7.0);
  ops::AdamWStep s;
  s.lr = 1e-2;
  s.weight_decay = 0.1;
  s.step = 3;
  s.grad_scale = 0.37;
  ops::FlatRanges r;
  r.ranges = {{0, 120}, {120, 128}, {200, 300}};  // [128, 200) in no range
  r.tags = {1, 0, 1};
  ops::adamw_update_ranges(p, g, m, v, lp, r, s);
  // The reference: scale the gradient, then one adamw_update per range with its decay.
  ops::scale(g2, s.grad_scale);
  ops::AdamWStep one = s;
  one.grad_scale = 1.0;
  for (size_t i = 0; i < r.ranges.size(); ++i) {
    const FlatRange q = r.ranges[i];
    one.weight_decay = r.tags[i] ? s.weight_decay : 0.0;
    ops::adamw_update(p2.t.slice(0, q.begin, q.size()), g2.t.slice(0, q.begin, q.size()),
                      m2.t.slice(0, q.begin, q.size()), v2.t.slice(0, q.begin, q.size()), one);
  }
  EXPECT_TRUE(same_bits(p, p2));
  EXPECT_TRUE(same_bits(m, m2));
  EXPECT_TRUE(same_bits(v, v2));
  Owned want_lp = Owned::copy_of(p, DType::bf16);
  for (int64_t i = 0; i < n; ++i) {
    if (i < 128 || i >= 200) EXPECT_EQ(lp.data<uint16_t>()[i], want_lp.data<uint16_t>()[i]) << i;
    else EXPECT_EQ(test::element(lp, i), 7.0) << i;  // in no range: untouched
  }
}

TEST(AddRmsnorm, EqualsAddThenRmsnormInF32AndBf16) {
  for (DType dt : {DType::f32, DType::bf16}) {
    SCOPED_TRACE(dtype_name(dt));
    const int64_t rows = 6, d = 40;
    Owned a(dt, {rows, d}), b(dt, {rows, d}), w(DType::f32, {d});
    Owned ra(DType::f32, {rows, d}), rb(DType::f32, {rows, d});
    test::randn(ra.t, 6);
    test::randn(rb.t, 7);
    test::randn(w.t, 8);
    ops::copy(a, ra);
    ops::copy(b, rb);
    Owned sum(dt, {rows, d}), out(dt, {rows, d}), rstd(DType::f32, {rows});
    Owned sum2(dt, {rows, d}), out2(dt, {rows, d}), rstd2(DType::f32, {rows});
    ops::add_rmsnorm_forward(sum, out, rstd, a, b, w, 1e-5);
    ops::add(sum2, a, b);
    ops::rmsnorm_forward(out2, rstd2, sum2, w, 1e-5);
    EXPECT_TRUE(same_bits(sum, sum2));
    EXPECT_TRUE(same_bits(out, out2));
    EXPECT_TRUE(same_bits(rstd, rstd2));
    ops::add_rmsnorm_forward(a, out, rstd, a, b, w, 1e-5);  // the residual stream updated in place
    EXPECT_TRUE(same_bits(a, sum2));
    EXPECT_TRUE(same_bits(out, out2));
  }
}

TEST(RmsnormBackward, AccumulateAddsTheGradientOnce) {
  const int64_t rows = 5, d = 32;
  Owned x(DType::f32, {rows, d}), w(DType::f32, {d}), g(DType::f32, {rows, d}), rstd(DType::f32, {rows}),
      y(DType::f32, {rows, d});
  test::randn(x.t, 9);
  test::randn(w.t, 10);
  test::randn(g.t, 11);
  ops::rmsnorm_forward(y, rstd, x, w, 1e-5);
  Owned dx(DType::f32, {rows, d}), acc(DType::f32, {rows, d}), dw(DType::f32, {d}), dw2(DType::f32, {d});
  test::randn(acc.t, 12);
  Owned want = Owned::copy_of(acc, DType::f32);
  ops::rmsnorm_backward(dx, dw, g, x, w, rstd, false);
  ops::accumulate(want, dx, 1.0);
  ops::rmsnorm_backward(acc, dw2, g, x, w, rstd, true);
  EXPECT_TRUE(same_bits(acc, want));
  EXPECT_TRUE(same_bits(dw, dw2));
  EXPECT_THROW(ops::rmsnorm_backward(g, Tensor{}, g, x, w, rstd, true), Error);  // d_in overlaps d_out
}

}  // namespace
}  // namespace sinklab
