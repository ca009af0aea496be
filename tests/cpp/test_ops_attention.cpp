// The generic attention op (causal softmax for now) on the CPU:
// - against PyTorch float64 autograd (golden file from tests/python/goldens/gen_attention.py): out,
//   probs, stats (= log-sum-exp), dq, dk, dv, in f32 and f64, with contiguous tensors and with q/k/v
//   (and their gradients) as slices of one fused QKV buffer and d_out as a permuted view;
// - finite differences of the backward in f64 with respect to q, k and v;
// - against a naive in-test reference on shapes large enough to run several query blocks in parallel;
// - properties of probs (rows sum to 1, 0 above the diagonal) and of stats;
// - invalid shapes and dtypes throw sinklab::Error.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <ostream>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace sinklab {
namespace {

using test::Owned;

struct Shape {
  int64_t B, T, H, Hkv, dh;
};

// A [B, L, heads, dh] view of columns [col, col + heads*dh) of a [B, L, width] buffer.
Tensor head_slice(const Tensor& fused, int64_t col, int64_t heads, int64_t dh) {
  return fused.slice(2, col, heads * dh).split_dim(2, heads, dh);
}

// Tensors of one attention problem in dtype dt. fused: q/k/v live in one [B, T, W] buffer with an odd
// padded width W (so no stride is a multiple of anything convenient), gradients likewise in another;
// d_out is a [B, H, T, dh] buffer read as [B, T, H, dh].
struct Problem {
  Shape s;
  Owned qkv, dqkv, q_own, k_own, v_own, dq_own, dk_own, dv_own, dout_own, out, stats, probs;
  Tensor q, k, v, dq, dk, dv, dout;

  Problem(Shape sh, DType dt, bool fused) : s(sh) {
    const int64_t B = s.B, T = s.T, H = s.H, Hkv = s.Hkv, dh = s.dh;
    out = Owned(dt, {B, T, H, dh});
    stats = Owned(dt, {B, H, T});
    probs = Owned(dt, {B, H, T, T});
    if (fused) {
      const int64_t W = (H + 2 * Hkv) * dh + 3;
      qkv = Owned(dt, {B, T, W});
      dqkv = Owned(dt, {B, T, W});
      q = head_slice(qkv.t, 0, H, dh);
      k = head_slice(qkv.t, H * dh, Hkv, dh);
      v = head_slice(qkv.t, (H + Hkv) * dh, Hkv, dh);
      dq = head_slice(dqkv.t, 0, H, dh);
      dk = head_slice(dqkv.t, H * dh, Hkv, dh);
      dv = head_slice(dqkv.t, (H + Hkv) * dh, Hkv, dh);
      ops::fill(dqkv.t, 777.0);  // gradients are written (=), not accumulated
      dout_own = Owned(dt, {B, H, T, dh});
      dout = dout_own.t;
      dout.shape = {B, T, H, dh, 0};
      dout.stride = {H * T * dh, dh, T * dh, 1, 0};
    } else {
      q_own = Owned(dt, {B, T, H, dh});
      k_own = Owned(dt, {B, T, Hkv, dh});
      v_own = Owned(dt, {B, T, Hkv, dh});
      dq_own = Owned(dt, {B, T, H, dh});
      dk_own = Owned(dt, {B, T, Hkv, dh});
      dv_own = Owned(dt, {B, T, Hkv, dh});
      dout_own = Owned(dt, {B, T, H, dh});
      q = q_own.t, k = k_own.t, v = v_own.t, dq = dq_own.t, dk = dk_own.t, dv = dv_own.t, dout = dout_own.t;
      ops::fill(dq, 777.0), ops::fill(dk, 777.0), ops::fill(dv, 777.0);
    }
  }

  void run(const ops::AttentionSpec& spec) {
    ops::attention_forward(out, stats, q, k, v, spec);
    ops::attention_probs(probs, q, k, spec);
    ops::attention_backward(dq, dk, dv, dout, q, k, v, out, stats, spec);
  }
};

// ---- against PyTorch --------------------------------------------------------------------------------

struct GoldenCase {
  std::string name;
  DType dtype;
  bool fused;
};

void PrintTo(const GoldenCase& c, std::ostream* os) {
  *os << c.name << (c.dtype == DType::f32 ? " f32" : " f64") << (c.fused ? " fused" : " contiguous");
}

std::string case_name(const ::testing::TestParamInfo<GoldenCase>& info) {
  return info.param.name + (info.param.dtype == DType::f32 ? "_f32" : "_f64") +
         (info.param.fused ? "_fused" : "_contiguous");
}

class AttentionVsTorch : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(AttentionVsTorch, OutputsProbsStatsAndGradients) {
  const GoldenCase gc = GetParam();
  test::Golden g("attention.safetensors");
  const std::string& c = gc.name;
  Shape s{int64_t(g.param(c + "/B")), int64_t(g.param(c + "/T")), int64_t(g.param(c + "/H")),
          int64_t(g.param(c + "/Hkv")), int64_t(g.param(c + "/dh"))};
  Problem p(s, gc.dtype, gc.fused);
  ops::copy(p.q, g.raw(c + "/q"));
  ops::copy(p.k, g.raw(c + "/k"));
  ops::copy(p.v, g.raw(c + "/v"));
  ops::copy(p.dout, g.raw(c + "/dout"));
  ops::AttentionSpec spec;
  spec.scale = g.param(c + "/scale");
  p.run(spec);

  const double tol = gc.dtype == DType::f32 ? 1e-5 : 1e-10;
  EXPECT_LE(test::rel_error(p.out, g.raw(c + "/out")), tol) << "out";
  EXPECT_LE(test::rel_error(p.probs, g.raw(c + "/probs")), tol) << "probs";
  EXPECT_LE(test::rel_error(p.stats, g.raw(c + "/lse")), tol) << "stats (log-sum-exp)";
  EXPECT_LE(test::rel_error(p.dq, g.raw(c + "/dq")), tol) << "dq";
  EXPECT_LE(test::rel_error(p.dk, g.raw(c + "/dk")), tol) << "dk";
  EXPECT_LE(test::rel_error(p.dv, g.raw(c + "/dv")), tol) << "dv";
  if (gc.fused) {
    // The padding columns of the fused gradient buffer are untouched.
    const int64_t W = p.dqkv.t.shape[2];
    for (int64_t r = 0; r < s.B * s.T; ++r)
      for (int64_t col = W - 3; col < W; ++col) EXPECT_EQ(test::element(p.dqkv.t, r * W + col), 777.0);
  }
}

std::vector<GoldenCase> golden_cases() {
  std::vector<GoldenCase> out;
  for (const char* name : {"t1", "t67", "h1", "gqa", "mqa", "dh12", "b2", "scale"})
    for (DType dt : {DType::f32, DType::f64})
      for (bool fused : {false, true}) out.push_back({name, dt, fused});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Golden, AttentionVsTorch, ::testing::ValuesIn(golden_cases()), case_name);

TEST(AttentionGolden, CoversEveryCaseOfTheFile) {
  test::Golden g("attention.safetensors");
  EXPECT_EQ(g.cases().size(), 8u);
}

// ---- naive reference on larger shapes (several query blocks, OpenMP across heads) -----------------

struct Naive {
  std::vector<double> out, lse, probs, dq, dk, dv;
};

Naive naive_attention(const Problem& p, double scale) {
  const auto [B, T, H, Hkv, dh] = p.s;
  const int64_t group = H / Hkv;
  auto at = [](const Tensor& t, int64_t b, int64_t l, int64_t h, int64_t c) {
    return test::element(t, ((b * t.shape[1] + l) * t.shape[2] + h) * t.shape[3] + c);
  };
  Naive n;
  n.out.assign(size_t(B * T * H * dh), 0.0);
  n.dq.assign(size_t(B * T * H * dh), 0.0);
  n.dk.assign(size_t(B * T * Hkv * dh), 0.0);
  n.dv.assign(size_t(B * T * Hkv * dh), 0.0);
  n.lse.assign(size_t(B * H * T), 0.0);
  n.probs.assign(size_t(B * H * T * T), 0.0);
  std::vector<double> P(static_cast<size_t>(T)), dP(static_cast<size_t>(T));
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h) {
      const int64_t g = h / group;
      for (int64_t i = 0; i < T; ++i) {
        double m = -1e300;
        for (int64_t j = 0; j <= i; ++j) {
          double s = 0;
          for (int64_t c = 0; c < dh; ++c) s += at(p.q, b, i, h, c) * at(p.k, b, j, g, c);
          P[size_t(j)] = s * scale;
          m = std::max(m, P[size_t(j)]);
        }
        double z = 0;
        for (int64_t j = 0; j <= i; ++j) z += std::exp(P[size_t(j)] - m);
        n.lse[size_t((b * H + h) * T + i)] = m + std::log(z);
        for (int64_t j = 0; j <= i; ++j) {
          P[size_t(j)] = std::exp(P[size_t(j)] - m) / z;
          n.probs[size_t(((b * H + h) * T + i) * T + j)] = P[size_t(j)];
        }
        double D = 0;
        for (int64_t j = 0; j <= i; ++j) {
          dP[size_t(j)] = 0;
          for (int64_t c = 0; c < dh; ++c) {
            n.out[size_t(((b * T + i) * H + h) * dh + c)] += P[size_t(j)] * at(p.v, b, j, g, c);
            dP[size_t(j)] += at(p.dout, b, i, h, c) * at(p.v, b, j, g, c);
          }
          D += P[size_t(j)] * dP[size_t(j)];
        }
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = P[size_t(j)] * (dP[size_t(j)] - D) * scale;
          for (int64_t c = 0; c < dh; ++c) {
            n.dq[size_t(((b * T + i) * H + h) * dh + c)] += ds * at(p.k, b, j, g, c);
            n.dk[size_t(((b * T + j) * Hkv + g) * dh + c)] += ds * at(p.q, b, i, h, c);
            n.dv[size_t(((b * T + j) * Hkv + g) * dh + c)] += P[size_t(j)] * at(p.dout, b, i, h, c);
          }
        }
      }
    }
  return n;
}

Tensor view_of(std::vector<double>& v, std::initializer_list<int64_t> dims) { return Tensor(v.data(), DType::f64, dims); }

class AttentionVsNaive : public ::testing::TestWithParam<std::tuple<DType, bool>> {};

TEST_P(AttentionVsNaive, LargeGroupedQueryProblem) {
  const auto [dt, fused] = GetParam();
  Shape s{3, 150, 6, 2, 20};  // three query blocks (64 + 64 + 22), groups of 3 query heads
  Problem p(s, dt, fused);
  test::randn(p.q, 1), test::randn(p.k, 2), test::randn(p.v, 3), test::randn(p.dout, 4);
  ops::AttentionSpec spec;  // default scale
  p.run(spec);
  Naive n = naive_attention(p, 1.0 / std::sqrt(double(s.dh)));
  const double tol = dt == DType::f32 ? 1e-5 : 1e-10;
  EXPECT_LE(test::rel_error(p.out, view_of(n.out, {s.B, s.T, s.H, s.dh})), tol);
  EXPECT_LE(test::rel_error(p.stats, view_of(n.lse, {s.B, s.H, s.T})), tol);
  EXPECT_LE(test::rel_error(p.probs, view_of(n.probs, {s.B, s.H, s.T, s.T})), tol);
  EXPECT_LE(test::rel_error(p.dq, view_of(n.dq, {s.B, s.T, s.H, s.dh})), tol);
  EXPECT_LE(test::rel_error(p.dk, view_of(n.dk, {s.B, s.T, s.Hkv, s.dh})), tol);
  EXPECT_LE(test::rel_error(p.dv, view_of(n.dv, {s.B, s.T, s.Hkv, s.dh})), tol);
}

INSTANTIATE_TEST_SUITE_P(Shapes, AttentionVsNaive,
                         ::testing::Combine(::testing::Values(DType::f32, DType::f64), ::testing::Bool()));

// ---- finite differences -------------------------------------------------------------------------------

class AttentionFiniteDifference : public ::testing::TestWithParam<double> {};

TEST_P(AttentionFiniteDifference, BackwardMatchesCentralDifferences) {
  const double scale = GetParam();
  const int64_t B = 2, T = 9, H = 4, Hkv = 2, dh = 5;
  Owned q(DType::f64, {B, T, H, dh}), k(DType::f64, {B, T, Hkv, dh}), v(DType::f64, {B, T, Hkv, dh});
  Owned w(DType::f64, {B, T, H, dh}), out(DType::f64, {B, T, H, dh}), stats(DType::f64, {B, H, T});
  Owned dq(DType::f64, {B, T, H, dh}), dk(DType::f64, {B, T, Hkv, dh}), dv(DType::f64, {B, T, Hkv, dh});
  test::randn(q, 11), test::randn(k, 12), test::randn(v, 13), test::randn(w, 14);
  ops::AttentionSpec spec;
  spec.scale = scale;
  ops::attention_forward(out, stats, q, k, v, spec);
  ops::attention_backward(dq, dk, dv, w, q, k, v, out, stats, spec);
  auto loss = [&] {
    ops::attention_forward(out, stats, q, k, v, spec);
    return test::weighted_sum(out, w);
  };
  EXPECT_LT(test::finite_difference_error(q, dq, loss), 1e-6) << "d/dq";
  EXPECT_LT(test::finite_difference_error(k, dk, loss), 1e-6) << "d/dk";
  EXPECT_LT(test::finite_difference_error(v, dv, loss), 1e-6) << "d/dv";
}

INSTANTIATE_TEST_SUITE_P(Scales, AttentionFiniteDifference, ::testing::Values(0.0, 0.9));

// ---- properties ----------------------------------------------------------------------------------------

class AttentionProperties : public ::testing::TestWithParam<DType> {};

TEST_P(AttentionProperties, ProbsRowsSumToOneAndVanishAboveTheDiagonal) {
  const DType dt = GetParam();
  const int64_t B = 2, T = 97, H = 4, Hkv = 1, dh = 16;
  Owned q(dt, {B, T, H, dh}), k(dt, {B, T, Hkv, dh}), v(dt, {B, T, Hkv, dh});
  Owned probs(dt, {B, H, T, T}), out(dt, {B, T, H, dh}), stats(dt, {B, H, T});
  test::randn(q, 21, 3.0), test::randn(k, 22, 3.0), test::randn(v, 23);  // large scores: peaked rows
  ops::fill(probs, -5.0);
  ops::AttentionSpec spec;
  ops::attention_probs(probs, q, k, spec);
  ops::attention_forward(out, stats, q, k, v, spec);
  const double tol = dt == DType::f32 ? 1e-5 : 1e-12;
  const double scale = 1.0 / std::sqrt(double(dh));
  double worst_sum = 0, worst_stat = 0, worst_out = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        double sum = 0, m = -1e300, z = 0;
        std::vector<double> s(size_t(i + 1));
        for (int64_t j = 0; j < T; ++j) {
          const double pij = test::element(probs, ((b * H + h) * T + i) * T + j);
          if (j > i) {
            ASSERT_EQ(pij, 0.0) << "masked entry (" << i << "," << j << ") of head " << h;
          } else {
            ASSERT_GE(pij, 0.0);
            sum += pij;
            double dot = 0;
            for (int64_t c = 0; c < dh; ++c)
              dot += test::element(q, ((b * T + i) * H + h) * dh + c) * test::element(k, (b * T + j) * dh + c);
            s[size_t(j)] = dot * scale;
            m = std::max(m, s[size_t(j)]);
          }
        }
        worst_sum = std::max(worst_sum, std::fabs(sum - 1.0));
        for (int64_t j = 0; j <= i; ++j) z += std::exp(s[size_t(j)] - m);
        const double lse = m + std::log(z);
        worst_stat = std::max(worst_stat, std::fabs(test::element(stats, (b * H + h) * T + i) - lse) /
                                              std::max(1.0, std::fabs(lse)));
        // out = probs . v
        for (int64_t c = 0; c < dh; ++c) {
          double o = 0;
          for (int64_t j = 0; j <= i; ++j)
            o += test::element(probs, ((b * H + h) * T + i) * T + j) * test::element(v, (b * T + j) * dh + c);
          worst_out = std::max(worst_out, std::fabs(o - test::element(out, ((b * T + i) * H + h) * dh + c)));
        }
      }
  EXPECT_LE(worst_sum, tol) << "row sums";
  EXPECT_LE(worst_stat, tol) << "stats vs log-sum-exp of the scores";
  EXPECT_LE(worst_out, 10 * tol) << "out vs probs . v";
}

INSTANTIATE_TEST_SUITE_P(DTypes, AttentionProperties, ::testing::Values(DType::f32, DType::f64));

TEST(AttentionProperties, FirstRowAttendsOnlyToItself) {
  const int64_t B = 1, T = 5, H = 2, dh = 4;
  Owned q(DType::f64, {B, T, H, dh}), k(DType::f64, {B, T, H, dh}), v(DType::f64, {B, T, H, dh});
  Owned out(DType::f64, {B, T, H, dh}), stats(DType::f64, {B, H, T});
  test::randn(q, 31), test::randn(k, 32), test::randn(v, 33);
  ops::attention_forward(out, stats, q, k, v, {});
  for (int64_t h = 0; h < H; ++h)
    for (int64_t c = 0; c < dh; ++c)
      EXPECT_DOUBLE_EQ(test::element(out, h * dh + c), test::element(v, h * dh + c));
}

// ---- invalid arguments ---------------------------------------------------------------------------------

TEST(AttentionErrors, InvalidShapesThrow) {
  const DType dt = DType::f32;
  Owned q(dt, {1, 6, 3, 4}), k2(dt, {1, 6, 2, 4}), v2(dt, {1, 6, 2, 4}), out(dt, {1, 6, 3, 4}), st(dt, {1, 3, 6});
  Owned probs(dt, {1, 3, 6, 6}), dq(dt, {1, 6, 3, 4}), dk2(dt, {1, 6, 2, 4}), dv2(dt, {1, 6, 2, 4});
  ops::AttentionSpec spec;
  // H % Hkv != 0 (3 query heads, 2 kv heads)
  EXPECT_THROW(ops::attention_forward(out, st, q, k2, v2, spec), Error);
  EXPECT_THROW(ops::attention_probs(probs, q, k2, spec), Error);
  EXPECT_THROW(ops::attention_backward(dq, dk2, dv2, out, q, k2, v2, out, st, spec), Error);
  // S != T under the causal mask
  Owned k7(dt, {1, 7, 3, 4}), v7(dt, {1, 7, 3, 4}), dk7(dt, {1, 7, 3, 4}), dv7(dt, {1, 7, 3, 4}), p7(dt, {1, 3, 6, 7});
  EXPECT_THROW(ops::attention_forward(out, st, q, k7, v7, spec), Error);
  EXPECT_THROW(ops::attention_probs(p7, q, k7, spec), Error);
  EXPECT_THROW(ops::attention_backward(dq, dk7, dv7, out, q, k7, v7, out, st, spec), Error);
  // Mismatched head dim, v unlike k, wrong stats / out / probs shapes, mixed dtypes, bad scale.
  Owned k5(dt, {1, 6, 3, 5}), k3(dt, {1, 6, 3, 4}), v3(dt, {1, 6, 3, 4}), v3b(dt, {1, 6, 1, 4});
  EXPECT_THROW(ops::attention_forward(out, st, q, k5, k5, spec), Error);
  EXPECT_THROW(ops::attention_forward(out, st, q, k3, v3b, spec), Error);
  Owned st_bad(dt, {1, 6, 3}), out_bad(dt, {1, 6, 3, 5}), probs_bad(dt, {1, 3, 6, 5});
  EXPECT_THROW(ops::attention_forward(out, st_bad, q, k3, v3, spec), Error);
  EXPECT_THROW(ops::attention_forward(out_bad, st, q, k3, v3, spec), Error);
  EXPECT_THROW(ops::attention_probs(probs_bad, q, k3, spec), Error);
  Owned v64(DType::f64, {1, 6, 3, 4});
  EXPECT_THROW(ops::attention_forward(out, st, q, k3, v64, spec), Error);
  Owned q3d(dt, {6, 3, 4});
  EXPECT_THROW(ops::attention_forward(out, st, q3d, k3, v3, spec), Error);
  ops::AttentionSpec negative;
  negative.scale = -1.0;
  EXPECT_THROW(ops::attention_forward(out, st, q, k3, v3, negative), Error);
  // The valid call works.
  EXPECT_NO_THROW(ops::attention_forward(out, st, q, k3, v3, spec));
}

}  // namespace
}  // namespace sinklab
