// RMSNorm and LayerNorm over the last dimension, forward and backward. Per-row math: norm_math.hpp.
//
// All row reductions accumulate in double, for f32 too: it costs nothing next to the memory traffic and
// keeps the f32 results within 1e-5 of the f64 reference for any row length.

#include <omp.h>

#include <vector>

#include "backend/cpu/cpu_backend.hpp"
#include "backend/cpu/cpu_common.hpp"
#include "backend/norm_math.hpp"

namespace sinklab {

using cpu::dispatch_float;

namespace {

using Acc = double;

// A tensor that must have in's shape and dtype (out, d_out, d_in).
void check_like_in(const Tensor& t, const Tensor& in, const char* op, const char* name) {
  cpu::check_same_shape(t, in, op, name, "in");
  SL_CHECK(t.dtype == in.dtype, "%s: %s and in differ in dtype", op, name);
}

// Parameter gradients: dparam[c] += sum over rows of term(row, c), for one or two parameters at once.
// Rows would race on dparam, so each thread owns a block of columns and walks all rows (in order, so the
// sums do not depend on the thread count), accumulating in double before one += into the tensor.
template <class T, class Term>
void accumulate_over_rows(T* dparam_a, T* dparam_b, int64_t rows, int64_t cols, Term&& term) {
#pragma omp parallel if (rows * cols > 16384)
  {
    const int64_t nt = omp_get_num_threads(), t = omp_get_thread_num();
    const int64_t c0 = cols * t / nt, c1 = cols * (t + 1) / nt;
    std::vector<Acc> acc_a(size_t(c1 - c0), 0.0), acc_b(size_t(c1 - c0), 0.0);
    for (int64_t r = 0; r < rows; ++r) term(r, c0, c1, acc_a.data(), acc_b.data());
    for (int64_t c = c0; c < c1; ++c) {
      if (dparam_a) dparam_a[c] += T(acc_a[size_t(c - c0)]);
      if (dparam_b) dparam_b[c] += T(acc_b[size_t(c - c0)]);
    }
  }
}

// The rows, built from norm_math.hpp's scalar pieces (the forward's output pass in T), with the row sums
// as `omp simd` reductions: the compiler does not reorder a plain double sum, so those loops ran one
// dependent add at a time (the Pythia-14M LayerNorm, 1280 rows of 128, spent 340 us of a 1-thread call in
// them). The lanes keep double accumulators, and the lane order is fixed, so results still do not depend
// on the thread count.
template <class T>
Acc rmsnorm_row_forward(T* out, const T* x, const T* w, int64_t d, Acc eps) {
  Acc ss = 0.0;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < d; ++i) ss += Acc(x[i]) * Acc(x[i]);
  const Acc r = math::rms_rstd(ss, d, eps);
  const T rt = T(r);  // the scaling in T, as in layernorm_row_forward
  if (w) {
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) out[i] = math::rms_y(x[i], rt, w[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) out[i] = math::rms_y(x[i], rt, T(1));
  }
  return r;
}

// Two passes (mean, then squared deviations), as norm_math.hpp: E[x^2]-E[x]^2 cancels for rows with a
// large mean. w, b may be null.
template <class T>
void layernorm_row_forward(T* out, Acc* mean_out, Acc* rstd_out, const T* x, const T* w, const T* b, int64_t d,
                           Acc eps) {
  Acc s = 0.0;
#pragma omp simd reduction(+ : s)
  for (int64_t i = 0; i < d; ++i) s += Acc(x[i]);
  const Acc mu = s / Acc(d);
  Acc ss = 0.0;
#pragma omp simd reduction(+ : ss)
  for (int64_t i = 0; i < d; ++i) ss += (Acc(x[i]) - mu) * (Acc(x[i]) - mu);
  const Acc r = math::ln_rstd(ss, d, eps);
  // Normalise + affine in T: for f32 twice the lanes of double (Pythia-14M, 1 thread: 130 -> 77 us a
  // call). The mean enters as a T pair hi + lo, so a row whose mean is large next to its spread keeps
  // the precision of the double mean.
  T mh, ml;
  math::split_mean(mu, mh, ml);
  const T rt = T(r);
  if (w && b) {
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) out[i] = math::ln_y(x[i], mh, ml, rt, w[i], b[i]);
  } else {
#pragma omp simd
    for (int64_t i = 0; i < d; ++i) out[i] = math::ln_y(x[i], mh, ml, rt, w ? w[i] : T(1), b ? b[i] : T(0));
  }
  *mean_out = mu;
  *rstd_out = r;
}

// The backward rows, with `omp simd` row sums for the same reason (the Bigram-Backcopy atlas's d = 64
// RMSNorm backward over 8192 rows: 0.87-0.91 ms a call in its row loop, 0.49-0.50 ms with them; one
// thread, a scratch benchmark of the two loops). dx may alias dy: each element is read before it is
// written (not with accumulate, which adds dx to what dx holds).
template <class T>
void rmsnorm_row_backward(T* dx, const T* dy, const T* x, const T* w, int64_t d, Acc r, bool accumulate) {
  Acc dot = 0.0;
#pragma omp simd reduction(+ : dot)
  for (int64_t i = 0; i < d; ++i) dot += Acc(dy[i]) * (w ? Acc(w[i]) : Acc(1)) * Acc(x[i]);
  const Acc dot_over_d = dot / Acc(d);
  if (accumulate) {
#pragma omp simd
    for (int64_t i = 0; i < d; ++i)
      dx[i] += T(math::rms_dx(r, Acc(dy[i]) * (w ? Acc(w[i]) : Acc(1)), Acc(x[i]), dot_over_d));
    return;
  }
#pragma omp simd
  for (int64_t i = 0; i < d; ++i)
    dx[i] = T(math::rms_dx(r, Acc(dy[i]) * (w ? Acc(w[i]) : Acc(1)), Acc(x[i]), dot_over_d));
}

template <class T>
void layernorm_row_backward(T* dx, const T* dy, const T* x, const T* w, int64_t d, Acc mu, Acc r) {
  Acc sum_gh = 0.0, sum_gh_xh = 0.0;
#pragma omp simd reduction(+ : sum_gh, sum_gh_xh)
  for (int64_t i = 0; i < d; ++i) {
    const Acc gh = Acc(dy[i]) * (w ? Acc(w[i]) : Acc(1));
    sum_gh += gh;
    sum_gh_xh += gh * (Acc(x[i]) - mu) * r;
  }
  const Acc mean_gh = sum_gh / Acc(d), mean_gh_xh = sum_gh_xh / Acc(d);
#pragma omp simd
  for (int64_t i = 0; i < d; ++i) {
    const Acc gh = Acc(dy[i]) * (w ? Acc(w[i]) : Acc(1));
    dx[i] = T(math::ln_dx(r, gh, (Acc(x[i]) - mu) * r, mean_gh, mean_gh_xh));
  }
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// RMSNorm. in/out [*, d] (rows may be strided); weight [d] or undefined; rstd [*] written.
void CpuBackend::rmsnorm_forward(Tensor out, Tensor rstd, Tensor in, Tensor weight, double eps) {
  const char* op = "rmsnorm_forward";
  check_like_in(out, in, op, "out");
  TensorRows ri = rows_of(in, op, "in"), ro = rows_of(out, op, "out");
  check_norm_operands(op, ri, {{rstd, "rstd"}}, {{weight, "weight"}},
                      [&](const Tensor& t, const char* arg) { check_dtype(t, in.dtype, op, arg); });
  dispatch_float(in.dtype, op, [&](auto zero) {
    using T = decltype(zero);
    const T* w = weight.defined() ? weight.ptr<T>() : nullptr;
#pragma omp parallel for schedule(static) if (ri.rows * ri.cols > 16384)
    for (int64_t r = 0; r < ri.rows; ++r) {
      Acc rs = rmsnorm_row_forward(out.ptr<T>() + ro.row_offset(r), in.ptr<T>() + ri.row_offset(r), w, ri.cols,
                                   Acc(eps));
      rstd.ptr<T>()[r] = T(rs);
    }
  });
}

// d_in [*, d] written (skipped if undefined); d_weight [d] += sum_rows d_out * in * rstd (skipped if
// undefined; must be undefined when weight is).
void CpuBackend::rmsnorm_backward(Tensor d_in, Tensor d_weight, Tensor d_out, Tensor in, Tensor weight, Tensor rstd,
                                  bool accumulate) {
  const char* op = "rmsnorm_backward";
  SL_CHECK(!(accumulate && d_in.defined() && tensors_overlap(d_in, d_out)),
           "%s: d_in may not overlap d_out when accumulating", op);
  check_like_in(d_out, in, op, "d_out");
  TensorRows ri = rows_of(in, op, "in"), rg = rows_of(d_out, op, "d_out");
  check_norm_operands(op, ri, {{rstd, "rstd"}}, {{weight, "weight"}, {d_weight, "d_weight"}},
                      [&](const Tensor& t, const char* arg) { check_dtype(t, in.dtype, op, arg); });
  SL_CHECK(!d_weight.defined() || weight.defined(), "%s: d_weight given but there is no weight", op);
  dispatch_float(in.dtype, op, [&](auto zero) {
    using T = decltype(zero);
    const T* w = weight.defined() ? weight.ptr<T>() : nullptr;
    const T* rs = rstd.ptr<T>();
    // Parameter gradient first: d_in may alias d_out (in-place backward), which would clobber d_out.
    if (d_weight.defined()) {
      accumulate_over_rows<T>(d_weight.ptr<T>(), nullptr, ri.rows, ri.cols,
                              [&](int64_t r, int64_t c0, int64_t c1, Acc* acc, Acc*) {
                                const T* x = in.ptr<T>() + ri.row_offset(r);
                                const T* g = d_out.ptr<T>() + rg.row_offset(r);
                                const Acc rr = Acc(rs[r]);
                                for (int64_t c = c0; c < c1; ++c) acc[c - c0] += math::rms_dw_term(Acc(g[c]), Acc(x[c]), rr);
                              });
    }
    if (d_in.defined()) {
      check_like_in(d_in, in, op, "d_in");
      TensorRows rd = rows_of(d_in, op, "d_in");
#pragma omp parallel for schedule(static) if (ri.rows * ri.cols > 16384)
      for (int64_t r = 0; r < ri.rows; ++r)
        rmsnorm_row_backward(d_in.ptr<T>() + rd.row_offset(r), d_out.ptr<T>() + rg.row_offset(r),
                                        in.ptr<T>() + ri.row_offset(r), w, ri.cols, Acc(rs[r]), accumulate);
    }
  });
}

// The residual add and the norm of a pre-norm block, as the two ops they equal: the norm reads the sum as
// stored (rounded when sum_out is bf16), as the next backward reads it.
void CpuBackend::add_rmsnorm_forward(Tensor sum_out, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor weight,
                                     double eps) {
  ops::add(sum_out, a, b);
  ops::rmsnorm_forward(out, rstd, sum_out, weight, eps);
}

// ---------------------------------------------------------------------------------------------------
// LayerNorm. in/out [*, d] (rows may be strided); weight, bias [d] or undefined; mean, rstd [*] written.
void CpuBackend::layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor weight, Tensor bias,
                                   double eps) {
  const char* op = "layernorm_forward";
  check_like_in(out, in, op, "out");
  TensorRows ri = rows_of(in, op, "in"), ro = rows_of(out, op, "out");
  check_norm_operands(op, ri, {{mean, "mean"}, {rstd, "rstd"}}, {{weight, "weight"}, {bias, "bias"}},
                      [&](const Tensor& t, const char* arg) { check_dtype(t, in.dtype, op, arg); });
  dispatch_float(in.dtype, op, [&](auto zero) {
    using T = decltype(zero);
    const T* w = weight.defined() ? weight.ptr<T>() : nullptr;
    const T* b = bias.defined() ? bias.ptr<T>() : nullptr;
#pragma omp parallel for schedule(static) if (ri.rows * ri.cols > 16384)
    for (int64_t r = 0; r < ri.rows; ++r) {
      Acc mu, rs;
      layernorm_row_forward(out.ptr<T>() + ro.row_offset(r), &mu, &rs, in.ptr<T>() + ri.row_offset(r), w, b, ri.cols,
                            Acc(eps));
      mean.ptr<T>()[r] = T(mu);
      rstd.ptr<T>()[r] = T(rs);
    }
  });
}

// d_in written (skipped if undefined); d_weight += sum_rows d_out * xhat; d_bias += sum_rows d_out
// (each skipped if undefined).
void CpuBackend::layernorm_backward(Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in,
                                    Tensor weight, Tensor mean, Tensor rstd) {
  const char* op = "layernorm_backward";
  check_like_in(d_out, in, op, "d_out");
  TensorRows ri = rows_of(in, op, "in"), rg = rows_of(d_out, op, "d_out");
  check_norm_operands(op, ri, {{mean, "mean"}, {rstd, "rstd"}},
                      {{weight, "weight"}, {d_weight, "d_weight"}, {d_bias, "d_bias"}},
                      [&](const Tensor& t, const char* arg) { check_dtype(t, in.dtype, op, arg); });
  SL_CHECK(!d_weight.defined() || weight.defined(), "%s: d_weight given but there is no weight", op);
  dispatch_float(in.dtype, op, [&](auto zero) {
    using T = decltype(zero);
    const T* w = weight.defined() ? weight.ptr<T>() : nullptr;
    const T* mu = mean.ptr<T>();
    const T* rs = rstd.ptr<T>();
    // Parameter gradients first: d_in may alias d_out.
    if (d_weight.defined() || d_bias.defined()) {
      accumulate_over_rows<T>(d_weight.defined() ? d_weight.ptr<T>() : nullptr,
                              d_bias.defined() ? d_bias.ptr<T>() : nullptr, ri.rows, ri.cols,
                              [&](int64_t r, int64_t c0, int64_t c1, Acc* acc_w, Acc* acc_b) {
                                const T* x = in.ptr<T>() + ri.row_offset(r);
                                const T* g = d_out.ptr<T>() + rg.row_offset(r);
                                const Acc m = Acc(mu[r]), rr = Acc(rs[r]);
                                for (int64_t c = c0; c < c1; ++c) {
                                  acc_w[c - c0] += math::ln_dw_term(Acc(g[c]), Acc(x[c]), m, rr);
                                  acc_b[c - c0] += Acc(g[c]);
                                }
                              });
    }
    if (d_in.defined()) {
      check_like_in(d_in, in, op, "d_in");
      TensorRows rd = rows_of(d_in, op, "d_in");
#pragma omp parallel for schedule(static) if (ri.rows * ri.cols > 16384)
      for (int64_t r = 0; r < ri.rows; ++r)
        layernorm_row_backward(d_in.ptr<T>() + rd.row_offset(r), d_out.ptr<T>() + rg.row_offset(r),
                                          in.ptr<T>() + ri.row_offset(r), w, ri.cols, Acc(mu[r]), Acc(rs[r]));
    }
  });
}

}  // namespace sinklab
