// RMSNorm and LayerNorm (CPU, f32 and f64) against PyTorch float64 autograd goldens
// (tests/python/goldens/gen_norms.py), plus finite-difference checks of both backwards in f64.
#include <string>
#include <vector>

#include "test_util.hpp"

namespace sinklab {
namespace {

using test::Golden;
using test::Owned;
using test::rel_error;
using test::kDtypes;
using test::tol;
using test::dims_of;

std::vector<int64_t> lead_dims(const Tensor& t) { return {t.shape.begin(), t.shape.begin() + t.ndim - 1}; }

// A tensor of shape `dims` whose rows are strided: columns [2, 2+d) of a buffer [..., d+5].
struct Padded {
  Owned buf;
  Tensor t;
};
Padded padded(DType dt, std::vector<int64_t> dims) {
  std::vector<int64_t> wide = dims;
  wide.back() += 5;
  Padded p{Owned(dt, wide), {}};
  test::randn(p.buf.t, 77);  // garbage around the view: must be neither read nor written
  p.t = p.buf.t.slice(int(dims.size()) - 1, 2, dims.back());
  return p;
}

// Reference times two: what a parameter gradient holds after two backward calls.
Owned twice(const Golden& g, const std::string& name) {
  Owned r = g.get(name, DType::f64);
  ops::scale(r, 2.0);
  return r;
}

struct NormCase {
  const Golden& g;
  std::string c;
  DType dt;
  bool ln() const { return g.param(c + "/layernorm") != 0.0; }
  bool has(const char* n) const { return g.has(c + "/" + n); }
  Owned get(const char* n) const { return has(n) ? g.get(c + "/" + n, dt) : Owned(); }
  Tensor ref(const char* n) const { return g.raw(c + "/" + n); }
};

// Runs forward + backward on (possibly strided) in/out/d_out/d_in views and checks everything.
// Backward is called twice: d_in must be the same (written), parameter grads doubled (accumulated).
void run_norm_case(const NormCase& k, bool strided) {
  SCOPED_TRACE(k.c + (k.dt == DType::f32 ? " f32" : " f64") + (strided ? " strided" : ""));
  const double eps = k.g.param(k.c + "/eps");
  Owned in_c = k.get("in"), dout_c = k.get("d_out"), weight = k.get("weight"), bias = k.get("bias");
  std::vector<int64_t> dims = dims_of(in_c.t);
  Padded in_p = padded(k.dt, dims), out_p = padded(k.dt, dims), dout_p = padded(k.dt, dims), din_p = padded(k.dt, dims);
  Owned out_c(k.dt, dims), din_c(k.dt, dims);
  Tensor in = in_c.t, out = out_c.t, d_out = dout_c.t, d_in = din_c.t;
  if (strided) {
    ops::copy(in_p.t, in_c.t);
    ops::copy(dout_p.t, dout_c.t);
    in = in_p.t, out = out_p.t, d_out = dout_p.t, d_in = din_p.t;
  }
  Owned rstd(k.dt, lead_dims(in_c.t)), mean(k.dt, lead_dims(in_c.t));
  Owned d_weight = weight.t.defined() ? Owned(k.dt, dims_of(weight.t)) : Owned();
  Owned d_bias = bias.t.defined() ? Owned(k.dt, dims_of(bias.t)) : Owned();
  const double t = tol(k.dt);
  if (k.ln()) {
    ops::layernorm_forward(out, mean, rstd, in, weight, bias, eps);
    EXPECT_LE(rel_error(mean, k.ref("mean")), t);
  } else {
    ops::rmsnorm_forward(out, rstd, in, weight, eps);
  }
  EXPECT_LE(rel_error(out, k.ref("out")), t);
  EXPECT_LE(rel_error(rstd, k.ref("rstd")), t);
  for (int call = 0; call < 2; ++call) {
    if (k.ln())
      ops::layernorm_backward(d_in, d_weight, d_bias, d_out, in, weight, mean, rstd);
    else
      ops::rmsnorm_backward(d_in, d_weight, d_out, in, weight, rstd);
  }
  EXPECT_LE(rel_error(d_in, k.ref("d_in")), t);
  if (weight.t.defined()) {
    EXPECT_LE(rel_error(d_weight, twice(k.g, k.c + "/d_weight")), t);
  }
  if (bias.t.defined()) {
    EXPECT_LE(rel_error(d_bias, twice(k.g, k.c + "/d_bias")), t);
  }
  if (strided) {
    // The padding columns around the views are untouched.
    Padded fresh = padded(k.dt, dims);
    for (Padded* p : {&out_p, &din_p}) {
      ops::copy(p->t, fresh.t);  // blank out the view itself, compare the rest
      EXPECT_EQ(rel_error(p->buf.t, fresh.buf.t), 0.0);
    }
  }
}

TEST(OpsNorms, GoldenCasesF32F64) {
  Golden g("norms.safetensors");
  ASSERT_GE(g.cases().size(), 8u);
  for (DType dt : kDtypes)
    for (const std::string& c : g.cases()) run_norm_case({g, c, dt}, false);
}

TEST(OpsNorms, GoldenCasesStridedRows) {
  Golden g("norms.safetensors");
  for (DType dt : kDtypes)
    for (const std::string& c : g.cases()) run_norm_case({g, c, dt}, true);
}

TEST(OpsNorms, CasesCoverTheAcceptanceShapes) {
  Golden g("norms.safetensors");
  bool t1 = false, t67 = false, no_weight_rms = false, no_weight_ln = false, odd_d = false;
  for (const std::string& c : g.cases()) {
    Tensor x = g.raw(c + "/in");
    if (x.ndim == 3 && x.shape[1] == 1) t1 = true;
    if (x.ndim == 3 && x.shape[1] == 67) t67 = true;
    if (x.shape[x.ndim - 1] % 8 != 0) odd_d = true;
    if (!g.has(c + "/weight")) (g.param(c + "/layernorm") != 0.0 ? no_weight_ln : no_weight_rms) = true;
  }
  EXPECT_TRUE(t1 && t67 && no_weight_rms && no_weight_ln && odd_d);
}

// ---------------------------------------------------------------------------------------------------
// Finite differences in f64: loss = sum(out * R) with R fixed, gradients from the backward.

struct FdSetup {
  std::vector<int64_t> dims;
  int64_t d;
};

void fd_rmsnorm(const FdSetup& s, bool with_weight) {
  SCOPED_TRACE(with_weight ? "weight" : "no weight");
  const DType f = DType::f64;
  std::vector<int64_t> lead(s.dims.begin(), s.dims.end() - 1);
  Owned x(f, s.dims), out(f, s.dims), r(f, s.dims), rstd(f, lead), dx(f, s.dims);
  Owned w = with_weight ? Owned(f, {s.d}) : Owned(), dw = with_weight ? Owned(f, {s.d}) : Owned();
  test::randn(x, 1);
  test::randn(r, 2);
  if (with_weight) {
    ops::fill_normal(w, 1234, 3, 1.0, 0.5);
  }
  const double eps = 1e-5;
  auto loss = [&] {
    ops::rmsnorm_forward(out, rstd, x, w, eps);
    return test::weighted_sum(out, r);
  };
  loss();
  ops::rmsnorm_backward(dx, dw, r, x, w, rstd);
  EXPECT_LT(test::finite_difference_error(x, dx, loss), 1e-6);
  if (with_weight) {
    EXPECT_LT(test::finite_difference_error(w, dw, loss), 1e-6);
  }
}

void fd_layernorm(const FdSetup& s, bool with_weight, bool with_bias) {
  SCOPED_TRACE(std::string(with_weight ? "weight" : "no weight") + (with_bias ? " bias" : " no bias"));
  const DType f = DType::f64;
  std::vector<int64_t> lead(s.dims.begin(), s.dims.end() - 1);
  Owned x(f, s.dims), out(f, s.dims), r(f, s.dims), mean(f, lead), rstd(f, lead), dx(f, s.dims);
  Owned w = with_weight ? Owned(f, {s.d}) : Owned(), dw = with_weight ? Owned(f, {s.d}) : Owned();
  Owned b = with_bias ? Owned(f, {s.d}) : Owned(), db = with_bias ? Owned(f, {s.d}) : Owned();
  test::randn(x, 4);
  test::randn(r, 5);
  if (with_weight) ops::fill_normal(w, 1234, 6, 1.0, 0.5);
  if (with_bias) test::randn(b, 7, 0.5);
  const double eps = 1e-5;
  auto loss = [&] {
    ops::layernorm_forward(out, mean, rstd, x, w, b, eps);
    return test::weighted_sum(out, r);
  };
  loss();
  ops::layernorm_backward(dx, dw, db, r, x, w, mean, rstd);
  EXPECT_LT(test::finite_difference_error(x, dx, loss), 1e-6);
  if (with_weight) {
    EXPECT_LT(test::finite_difference_error(w, dw, loss), 1e-6);
  }
  if (with_bias) {
    EXPECT_LT(test::finite_difference_error(b, db, loss), 1e-6);
  }
}

TEST(OpsNorms, RmsnormFiniteDifferences) {
  fd_rmsnorm({{3, 20}, 20}, true);       // 60 elements: every element checked
  fd_rmsnorm({{3, 20}, 20}, false);
  fd_rmsnorm({{2, 5, 12}, 12}, true);    // 120 elements: random directions
}

TEST(OpsNorms, LayernormFiniteDifferences) {
  fd_layernorm({{3, 20}, 20}, true, true);
  fd_layernorm({{3, 20}, 20}, false, false);
  fd_layernorm({{2, 5, 12}, 12}, true, false);
}

// d_in may alias d_out (in-place backward); parameter gradients are still right.
TEST(OpsNorms, BackwardInPlace) {
  Golden g("norms.safetensors");
  for (DType dt : kDtypes) {
    for (const char* c : {"rms_w", "ln_wb"}) {
      NormCase k{g, c, dt};
      Owned in = k.get("in"), grad = k.get("d_out"), w = k.get("weight"), b = k.get("bias");
      Owned out(dt, dims_of(in.t)), mean(dt, lead_dims(in.t)), rstd(dt, lead_dims(in.t));
      Owned dw(dt, dims_of(w.t)), db = b.t.defined() ? Owned(dt, dims_of(b.t)) : Owned();
      if (k.ln()) {
        ops::layernorm_forward(out, mean, rstd, in, w, b, g.param(std::string(c) + "/eps"));
        ops::layernorm_backward(grad, dw, db, grad, in, w, mean, rstd);
      } else {
        ops::rmsnorm_forward(out, rstd, in, w, g.param(std::string(c) + "/eps"));
        ops::rmsnorm_backward(grad, dw, grad, in, w, rstd);
      }
      EXPECT_LE(rel_error(grad, k.ref("d_in")), tol(dt)) << c;
      EXPECT_LE(rel_error(dw, k.ref("d_weight")), tol(dt)) << c;
    }
  }
}

// Large enough to run the OpenMP paths (rows * d > 16384): same results as golden-sized math, and the
// column-split parameter gradient matches a serial double sum.
TEST(OpsNorms, ParallelPathMatchesSerialSum) {
  const DType f = DType::f64;
  const int64_t n = 700, d = 37;
  Owned x(f, {n, d}), out(f, {n, d}), r(f, {n, d}), mean(f, {n}), rstd(f, {n}), dx(f, {n, d}), w(f, {d}),
      b(f, {d}), dw(f, {d}), db(f, {d});
  test::randn(x, 8);
  test::randn(r, 9);
  test::randn(w, 10);
  test::randn(b, 11);
  ops::layernorm_forward(out, mean, rstd, x, w, b, 1e-5);
  ops::layernorm_backward(dx, dw, db, r, x, w, mean, rstd);
  std::vector<double> want_w(size_t(d), 0.0), want_b(size_t(d), 0.0);
  for (int64_t i = 0; i < n; ++i) {
    double m = 0, v = 0;
    for (int64_t c = 0; c < d; ++c) m += x.data<double>()[i * d + c];
    m /= double(d);
    for (int64_t c = 0; c < d; ++c) v += std::pow(x.data<double>()[i * d + c] - m, 2);
    double rs = 1.0 / std::sqrt(v / double(d) + 1e-5);
    for (int64_t c = 0; c < d; ++c) {
      want_w[size_t(c)] += r.data<double>()[i * d + c] * (x.data<double>()[i * d + c] - m) * rs;
      want_b[size_t(c)] += r.data<double>()[i * d + c];
    }
  }
  for (int64_t c = 0; c < d; ++c) {
    EXPECT_NEAR(dw.data<double>()[c], want_w[size_t(c)], 1e-10 * n);
    EXPECT_NEAR(db.data<double>()[c], want_b[size_t(c)], 1e-10 * n);
  }
}

// f32 rows whose mean (1e4) is large next to their spread (1): the f32 LayerNorm keeps its 1e-5 bound
// against a double reference on the same inputs (the CPU op normalises in f32 with the double mean
// split into a hi + lo pair; with the mean rounded to one float the error here is 1.2e-3).
TEST(OpsNorms, LayernormF32RowsWithLargeMean) {
  const int64_t n = 9, d = 200;
  Owned x(DType::f32, {n, d}), out(DType::f32, {n, d}), mean(DType::f32, {n}), rstd(DType::f32, {n}),
      w(DType::f32, {d}), b(DType::f32, {d}), want(DType::f64, {n, d});
  test::randn(x, 21);
  test::randn(w, 22);
  test::randn(b, 23);
  for (int64_t i = 0; i < n * d; ++i) x.data<float>()[i] += 1e4f * float(1 + i / d);
  ops::layernorm_forward(out, mean, rstd, x, w, b, 1e-5);
  for (int64_t i = 0; i < n; ++i) {
    const float* xr = x.data<float>() + i * d;
    double m = 0, v = 0;
    for (int64_t c = 0; c < d; ++c) m += double(xr[c]);
    m /= double(d);
    for (int64_t c = 0; c < d; ++c) v += (double(xr[c]) - m) * (double(xr[c]) - m);
    const double rs = 1.0 / std::sqrt(v / double(d) + 1e-5);
    for (int64_t c = 0; c < d; ++c)
      want.data<double>()[i * d + c] =
          (double(xr[c]) - m) * rs * double(w.data<float>()[c]) + double(b.data<float>()[c]);
  }
  EXPECT_LE(rel_error(out, want), 1e-5);
}

TEST(OpsNorms, BadArgumentsThrow) {
  Owned x(DType::f32, {4, 12}), out(DType::f32, {4, 12}), rstd(DType::f32, {4}), w(DType::f32, {11});
  EXPECT_THROW(ops::rmsnorm_forward(out, rstd, x, w, 1e-5), Error);          // weight width
  Owned rstd_bad(DType::f32, {3});
  EXPECT_THROW(ops::rmsnorm_forward(out, rstd_bad, x, Tensor{}, 1e-5), Error);  // rstd length
  Owned x64(DType::f64, {4, 12});
  EXPECT_THROW(ops::rmsnorm_forward(out, rstd, x64, Tensor{}, 1e-5), Error);  // dtype mix
}

}  // namespace
}  // namespace sinklab
