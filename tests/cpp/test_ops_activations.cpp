// Activations (relu, exact/tanh GELU, SiLU) and gated products (ReGLU, GeGLU, SwiGLU) on the CPU in f32
// and f64 against PyTorch float64 autograd goldens (tests/python/goldens/gen_activations.py): plain,
// strided (gate/up as the halves of one fused projection) and in-place; finite differences in f64.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/math_fns.hpp"
#include "test_util.hpp"

namespace sinklab {
namespace {

using ops::Activation;
using test::Golden;
using test::Owned;
using test::rel_error;
using test::kDtypes;
using test::tol;
using test::dims_of;

constexpr Activation kActs[] = {Activation::relu,    Activation::gelu_exact, Activation::gelu_tanh,
                                Activation::silu,    Activation::sigmoid,    Activation::elu_plus_one};
const char* act_name(Activation a) {
  switch (a) {
    case Activation::relu: return "relu";
    case Activation::gelu_exact: return "gelu_exact";
    case Activation::gelu_tanh: return "gelu_tanh";
    case Activation::silu: return "silu";
    case Activation::sigmoid: return "sigmoid";
    case Activation::elu_plus_one: return "elu_plus_one";
  }
  return "?";
}

// Sum of |x| over the columns of a 2-D buffer outside [start, start+len): writes outside a view.
double abs_sum_outside(const Tensor& wide, int64_t start, int64_t len) {
  double s = 0.0;
  for (int64_t i = 0; i < wide.numel(); ++i) {
    int64_t c = i % wide.shape[1];
    if (c < start || c >= start + len) s += std::fabs(test::element(wide, i));
  }
  return s;
}

TEST(OpsActivations, GoldenActivation) {
  Golden g("activations.safetensors");
  for (DType dt : kDtypes) {
    for (Activation a : kActs) {
      const std::string c = std::string("act_") + act_name(a);
      SCOPED_TRACE(c + (dt == DType::f32 ? " f32" : " f64"));
      ASSERT_EQ(g.param(c + "/act"), double(int(a)));
      Owned in = g.get(c + "/in", dt), dout = g.get(c + "/d_out", dt);
      Owned out(dt, dims_of(in.t)), din(dt, dims_of(in.t));
      ops::activation_forward(out, in, a);
      EXPECT_LE(rel_error(out, g.raw(c + "/out")), tol(dt));
      ops::activation_backward(din, dout, in, a);
      EXPECT_LE(rel_error(din, g.raw(c + "/d_in")), tol(dt));
      // Strided rows: in/out as columns [3, 3+d) of wider buffers.
      const int64_t rows = in.t.shape[0], d = in.t.shape[1];
      Owned win(dt, {rows, d + 6}), wout(dt, {rows, d + 6}), wdo(dt, {rows, d + 6}), wdi(dt, {rows, d + 6});
      Tensor sin_ = win.t.slice(1, 3, d), sout = wout.t.slice(1, 3, d), sdo = wdo.t.slice(1, 3, d), sdi = wdi.t.slice(1, 3, d);
      ops::copy(sin_, in);
      ops::copy(sdo, dout);
      ops::activation_forward(sout, sin_, a);
      ops::activation_backward(sdi, sdo, sin_, a);
      EXPECT_LE(rel_error(sout, g.raw(c + "/out")), tol(dt));
      EXPECT_LE(rel_error(sdi, g.raw(c + "/d_in")), tol(dt));
      EXPECT_EQ(abs_sum_outside(wout.t, 3, d), 0.0);
      EXPECT_EQ(abs_sum_outside(wdi.t, 3, d), 0.0);
      // In place: d_in aliases d_out.
      ops::activation_backward(dout, dout, in, a);
      EXPECT_LE(rel_error(dout, g.raw(c + "/d_in")), tol(dt));
    }
  }
}

TEST(OpsActivations, GoldenGated) {
  Golden g("activations.safetensors");
  for (DType dt : kDtypes) {
    for (Activation a : kActs) {
      const std::string c = std::string("gated_") + act_name(a);
      SCOPED_TRACE(c + (dt == DType::f32 ? " f32" : " f64"));
      Owned gate = g.get(c + "/gate", dt), up = g.get(c + "/up", dt), dout = g.get(c + "/d_out", dt);
      std::vector<int64_t> dims = dims_of(gate.t);
      Owned out(dt, dims), dg(dt, dims), du(dt, dims);
      ops::gated_forward(out, gate, up, a);
      EXPECT_LE(rel_error(out, g.raw(c + "/out")), tol(dt));
      ops::gated_backward(dg, du, dout, gate, up, a);
      EXPECT_LE(rel_error(dg, g.raw(c + "/d_gate")), tol(dt));
      EXPECT_LE(rel_error(du, g.raw(c + "/d_up")), tol(dt));
      // Fused projection [.., 2F]: gate = first half, up = second half (strided rows), and the backward
      // in place into the same buffer (d_gate aliases gate, d_up aliases up).
      std::vector<int64_t> wide = dims;
      const int64_t F = dims.back();
      wide.back() = 2 * F;
      Owned fused(dt, wide);
      const int last = int(dims.size()) - 1;
      Tensor fg = fused.t.slice(last, 0, F), fu = fused.t.slice(last, F, F);
      ops::copy(fg, gate);
      ops::copy(fu, up);
      Owned out2(dt, dims);
      ops::gated_forward(out2, fg, fu, a);
      EXPECT_LE(rel_error(out2, g.raw(c + "/out")), tol(dt));
      ops::gated_backward(fg, fu, dout, fg, fu, a);
      EXPECT_LE(rel_error(fg, g.raw(c + "/d_gate")), tol(dt));
      EXPECT_LE(rel_error(fu, g.raw(c + "/d_up")), tol(dt));
      // Either gradient may be skipped.
      Owned dg_only(dt, dims);
      ops::gated_backward(dg_only, Tensor{}, dout, gate, up, a);
      EXPECT_LE(rel_error(dg_only, g.raw(c + "/d_gate")), tol(dt));
    }
  }
}

// The golden inputs hold exact zeros (relu'(0) = 0 in torch) and the tails +-8, +-20.
TEST(OpsActivations, GoldenInputsHoldZerosAndTails) {
  Golden g("activations.safetensors");
  Tensor x = g.raw("act_relu/in");
  EXPECT_EQ(test::element(x, 0), 0.0);
  EXPECT_EQ(test::element(x, 4), -20.0);
  EXPECT_EQ(x.shape[0], 67);
  EXPECT_NE(x.shape[1] % 8, 0);
}

// f64 finite differences of sum(act(x) * R) and sum(act(g) * u * R) for every activation.
TEST(OpsActivations, FiniteDifferences) {
  const DType f = DType::f64;
  for (Activation a : kActs) {
    SCOPED_TRACE(act_name(a));
    Owned x(f, {7, 13}), out(f, {7, 13}), r(f, {7, 13}), dx(f, {7, 13});
    test::randn(x, 71, 2.0);
    test::randn(r, 72);
    auto loss = [&] {
      ops::activation_forward(out, x, a);
      return test::weighted_sum(out, r);
    };
    ops::activation_backward(dx, r, x, a);
    EXPECT_LT(test::finite_difference_error(x, dx, loss), 1e-6);
    Owned gate(f, {3, 20}), up(f, {3, 20}), gout(f, {3, 20}), gr(f, {3, 20}), dg(f, {3, 20}), du(f, {3, 20});
    test::randn(gate, 73, 2.0);
    test::randn(up, 74);
    test::randn(gr, 75);
    auto gloss = [&] {
      ops::gated_forward(gout, gate, up, a);
      return test::weighted_sum(gout, gr);
    };
    ops::gated_backward(dg, du, gr, gate, up, a);
    EXPECT_LT(test::finite_difference_error(gate, dg, gloss), 1e-6);
    EXPECT_LT(test::finite_difference_error(up, du, gloss), 1e-6);
  }
}

// Large enough for the OpenMP path: equal to the per-element math.
TEST(OpsActivations, ParallelPathMatchesElementwise) {
  Owned x(DType::f32, {300, 100}), y(DType::f32, {300, 100});
  test::randn(x, 81, 3.0);
  ops::activation_forward(y, x, Activation::silu);
  for (int64_t i = 0; i < x.t.numel(); i += 97) {
    float v = x.data<float>()[i];
    EXPECT_FLOAT_EQ(y.data<float>()[i], v / (1.0f + std::exp(-v)));
  }
}

// The host f32 erf behind exact GELU (math::ferf, branch-free polynomial fits) against std::erf in
// double on a dense grid over [-6, 6] (step 2^-16, 786k points, the region boundaries |x| = 1 and 3.92
// inside). Max abs error measured: 1.6e-7 for |x| <= 1 (x P(x^2)), 1.0e-7 beyond (the degree-12 R(u)).
// Also exact 0, +-1 beyond the fit, NaN.
TEST(OpsActivations, HostF32ErfMatchesStdErf) {
  double max_err[2] = {0.0, 0.0}, at[2] = {0.0, 0.0};
  for (int64_t i = -6 * 65536; i <= 6 * 65536; ++i) {
    const float x = float(i) / 65536.0f;
    const double err = std::fabs(double(math::ferf(x)) - std::erf(double(x)));
    const int region = std::fabs(x) <= 1.0f ? 0 : 1;
    if (err > max_err[region]) max_err[region] = err, at[region] = double(x);
  }
  EXPECT_LE(max_err[0], 2e-7) << "at x = " << at[0];
  EXPECT_LE(max_err[1], 1.5e-7) << "at x = " << at[1];
  EXPECT_EQ(math::ferf(0.0f), 0.0f);
  EXPECT_EQ(math::ferf(5.0f), 1.0f);
  EXPECT_EQ(math::ferf(-1e30f), -1.0f);
  EXPECT_EQ(math::ferf(INFINITY), 1.0f);
  EXPECT_TRUE(std::isnan(math::ferf(NAN)));
  std::printf("ferf: max abs error %.3g (|x| <= 1, at %.6f), %.3g (|x| > 1, at %.6f)\n", max_err[0], at[0],
              max_err[1], at[1]);
}

TEST(OpsActivations, BadArgumentsThrow) {
  Owned a(DType::f32, {4, 12}), b(DType::f32, {4, 11}), c64(DType::f64, {4, 12});
  EXPECT_THROW(ops::activation_forward(b, a, Activation::relu), Error);
  EXPECT_THROW(ops::activation_forward(c64, a, Activation::relu), Error);
  EXPECT_THROW(ops::gated_forward(a, a, b, Activation::silu), Error);
}

}  // namespace
}  // namespace sinklab
