// The sink metric on constructed attention matrices whose column means are known exactly.
// Indexing: position p (0-based) is the paper's k = p + 1.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/error.hpp"
#include "probe/sink_metrics.hpp"

namespace sinklab::probe {
namespace {

// A causal, row-stochastic [T,T] matrix whose column 0 has mean exactly `a0` (rows 1.. put c on column
// 0 and spread the rest uniformly over columns 1..i; row 0 is [1, 0, ...]).
// mean_i A[i,0] = (1 + (T-1) c) / T = a0  =>  c = (T a0 - 1) / (T - 1).
std::vector<double> first_column_matrix(int T, double a0) {
  std::vector<double> A(size_t(T) * T, 0.0);
  const double c = (T * a0 - 1.0) / (T - 1);
  A[0] = 1.0;
  for (int i = 1; i < T; ++i) {
    A[size_t(i) * T] = c;
    for (int j = 1; j <= i; ++j) A[size_t(i) * T + j] = (1.0 - c) / i;
  }
  return A;
}

// Direct evaluation of the paper's formula (1-based k), for comparison.
double alpha_ref(const std::vector<double>& A, int T, int k) {
  double s = 0.0;
  for (int i = k; i <= T; ++i) s += A[size_t(i - 1) * T + (k - 1)];
  return s / (T - k + 1);
}

TEST(SinkMetrics, ImportanceScoresMatchThePaperFormula) {
  const int T = 8;
  std::vector<double> A = first_column_matrix(T, 0.35);
  Tensor t(A.data(), DType::f64, {T, T});
  std::vector<double> alpha = importance_scores(t, T);
  ASSERT_EQ(alpha.size(), size_t(T));
  EXPECT_NEAR(alpha[0], 0.35, 1e-15);
  for (int k = 1; k <= T; ++k) EXPECT_NEAR(alpha[size_t(k - 1)], alpha_ref(A, T, k), 1e-15) << "k=" << k;
  // Column 1 (k = 2): rows i >= 1 put (1-c)/i there; known in closed form.
  const double c = (T * 0.35 - 1.0) / (T - 1);
  double col1 = 0.0;
  for (int i = 1; i < T; ++i) col1 += (1.0 - c) / i;
  EXPECT_NEAR(alpha[1], col1 / (T - 1), 1e-15);
  // The last position is the last diagonal entry alone.
  EXPECT_NEAR(alpha[T - 1], A[size_t(T - 1) * T + T - 1], 1e-15);
  // f32 input, strided (transposed storage) view gives the same numbers.
  std::vector<float> At(size_t(T) * T);
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < T; ++j) At[size_t(j) * T + i] = float(A[size_t(i) * T + j]);
  Tensor tt(At.data(), DType::f32, {T, T});
  std::swap(tt.stride[0], tt.stride[1]);
  std::vector<double> alpha32 = importance_scores(tt, 3);
  for (int p = 0; p < 3; ++p) EXPECT_NEAR(alpha32[size_t(p)], alpha[size_t(p)], 1e-6);
}

TEST(SinkMetrics, SinkIsExactOnConstructedHeads) {
  // L = 2 layers, H = 4 heads, T = 16. Heads with column-0 mean 0.35 sink at eps 0.2/0.3, heads with
  // 0.25 sink at eps 0.2 only; 0.45 at all three. Layer 0: {0.35, 0.25, 0.25, 0.45},
  // layer 1: {0.35, 0.35, 0.25, 0.15}.
  const int L = 2, H = 4, T = 16, B = 3;
  const double a0[L][H] = {{0.35, 0.25, 0.25, 0.45}, {0.35, 0.35, 0.25, 0.15}};
  SinkAccumulator acc(L, H, 4);
  for (int l = 0; l < L; ++l) {
    std::vector<float> probs(size_t(B) * H * T * T);
    for (int b = 0; b < B; ++b)
      for (int h = 0; h < H; ++h) {
        std::vector<double> A = first_column_matrix(T, a0[l][h]);
        for (size_t i = 0; i < A.size(); ++i) probs[(size_t(b) * H + h) * T * T + i] = float(A[i]);
      }
    acc.add(l, Tensor(probs.data(), DType::f32, {B, H, T, T}));
  }
  EXPECT_EQ(acc.samples(), B);
  // eps 0.2: 0.35,0.25,0.25,0.45,0.35,0.35,0.25 above (7 of 8); 0.3: 0.35,0.45,0.35,0.35 (4 of 8);
  // 0.4: 0.45 (1 of 8).
  for (SinkAveraging avg : {SinkAveraging::per_sample, SinkAveraging::mean_alpha}) {
    EXPECT_DOUBLE_EQ(acc.sink(0, 0.2, avg), 87.5);
    EXPECT_DOUBLE_EQ(acc.sink(0, 0.3, avg), 50.0);
    EXPECT_DOUBLE_EQ(acc.sink(0, 0.4, avg), 12.5);
  }
  std::vector<double> s = acc.sinks(0);
  ASSERT_EQ(s.size(), 3u);
  EXPECT_DOUBLE_EQ(s[1], 50.0);
  std::vector<double> mean = acc.mean_alpha();
  ASSERT_EQ(mean.size(), size_t(L) * H * 4);
  for (int l = 0; l < L; ++l)
    for (int h = 0; h < H; ++h) EXPECT_NEAR(mean[(size_t(l) * H + h) * 4], a0[l][h], 1e-6);
  // Position 1 (k = 2): column 1 has mean (1-c) H_{T-1} / (T-1) (H_n the harmonic number), which is
  // above 0.2 only for the head with a0 = 0.15 (c = 1.4/15: 0.2006); 0.25 gives 0.1896.
  auto col1 = [&](double a) {
    double c = (T * a - 1.0) / (T - 1), s1 = 0.0;
    for (int i = 1; i < T; ++i) s1 += (1.0 - c) / i;
    return s1 / (T - 1);
  };
  EXPECT_GT(col1(0.15), 0.2);
  EXPECT_LT(col1(0.25), 0.2);
  EXPECT_DOUBLE_EQ(acc.sink(1, 0.2), 12.5);
  EXPECT_DOUBLE_EQ(acc.sink(1, 0.3), 0.0);
  EXPECT_NEAR(acc.mean_alpha()[(size_t(1) * H + 3) * 4 + 1], col1(0.15), 1e-6);
  // A threshold that was not accumulated cannot be asked per sample.
  EXPECT_THROW(acc.sink(0, 0.5), Error);
  EXPECT_DOUBLE_EQ(acc.sink(0, 0.5, SinkAveraging::mean_alpha), 0.0);
}

// A sliding-window matrix [T,T] (window w) whose full-window rows i >= w-1 put weights[k] on the key at
// offset k from their window start (i-w+1+k); rows i < w-1 put 0.9 on the absolute first token and the
// rest on their diagonal (they must not enter alpha^win).
std::vector<double> window_matrix(int T, int w, const std::vector<double>& weights) {
  std::vector<double> A(size_t(T) * T, 0.0);
  for (int i = 0; i < T; ++i) {
    if (i < w - 1) {
      A[size_t(i) * T] += i == 0 ? 1.0 : 0.9;
      if (i > 0) A[size_t(i) * T + i] += 0.1;
    } else {
      for (int k = 0; k < w; ++k) A[size_t(i) * T + (i - w + 1 + k)] = weights[size_t(k)];
    }
  }
  return A;
}

TEST(SinkMetrics, WindowScoresAreRelativeToEachQuerysWindowStart) {
  // w = 3, T = 7 (5 full-window rows): every full row is (0.5, 0.3, 0.2) from its window start, so
  // alpha^win = (0.5, 0.3, 0.2) exactly, whatever the first w-1 rows hold; the absolute alpha_1 counts
  // rows 0..w-1 only: (1 + 0.9 + 0.5) / 7.
  const int T = 7, w = 3;
  std::vector<double> A = window_matrix(T, w, {0.5, 0.3, 0.2});
  Tensor t(A.data(), DType::f64, {T, T});
  double win[4];
  window_importance_scores(t, w, 3, win);
  EXPECT_NEAR(win[0], 0.5, 1e-15);
  EXPECT_NEAR(win[1], 0.3, 1e-15);
  EXPECT_NEAR(win[2], 0.2, 1e-15);
  EXPECT_NEAR(importance_scores(t, 1)[0], (1.0 + 0.9 + 0.5) / 7, 1e-15);
  // Odd sizes: w = 1 (each query sees itself: alpha^win_1 = 1), w = T (one full row: row T-1 itself).
  std::vector<double> A1 = window_matrix(5, 1, {1.0});
  window_importance_scores(Tensor(A1.data(), DType::f64, {5, 5}), 1, 1, win);
  EXPECT_DOUBLE_EQ(win[0], 1.0);
  std::vector<double> AT = window_matrix(4, 4, {0.4, 0.3, 0.2, 0.1});
  window_importance_scores(Tensor(AT.data(), DType::f64, {4, 4}), 4, 2, win);
  EXPECT_NEAR(win[0], 0.4, 1e-15);
  EXPECT_NEAR(win[1], 0.3, 1e-15);
  // A direct evaluation of the definition on an irregular matrix (rows differ), f32 and transposed storage.
  const int T2 = 9, w2 = 4;
  std::vector<double> R(size_t(T2) * T2, 0.0);
  for (int i = 0; i < T2; ++i)
    for (int j = std::max(0, i - w2 + 1); j <= i; ++j) R[size_t(i) * T2 + j] = 0.01 * (1 + (i * 7 + j * 3) % 11);
  double want[4] = {0, 0, 0, 0};
  for (int i = w2 - 1; i < T2; ++i)
    for (int k = 0; k < w2; ++k) want[k] += R[size_t(i) * T2 + i - w2 + 1 + k] / (T2 - w2 + 1);
  std::vector<float> Rt(R.size());
  for (int i = 0; i < T2; ++i)
    for (int j = 0; j < T2; ++j) Rt[size_t(j) * T2 + i] = float(R[size_t(i) * T2 + j]);
  Tensor rt(Rt.data(), DType::f32, {T2, T2});
  std::swap(rt.stride[0], rt.stride[1]);
  window_importance_scores(rt, w2, 4, win);
  for (int k = 0; k < 4; ++k) EXPECT_NEAR(win[k], want[k], 1e-7) << "k=" << k + 1;
  // Refused: no full window (w > T), K > w.
  EXPECT_THROW(window_importance_scores(t, 8, 1, win), Error);
  EXPECT_THROW(window_importance_scores(t, 3, 4, win), Error);

  // The accumulator: two layers of one head; layer 1's full rows put 0.35 on their window start, so
  // Sink_1^{win} is 50 % at eps 0.3 (layer 0: 0.5 also above) ... 0.4: layer 0 only.
  SinkAccumulator acc(2, 1, 2);
  std::vector<double> B0 = window_matrix(T, w, {0.5, 0.3, 0.2}), B1 = window_matrix(T, w, {0.35, 0.45, 0.2});
  acc.add_window(0, Tensor(B0.data(), DType::f64, {1, 1, T, T}), w);
  acc.add_window(1, Tensor(B1.data(), DType::f64, {1, 1, T, T}), w);
  EXPECT_DOUBLE_EQ(acc.sink(0, 0.3), 100.0);
  EXPECT_DOUBLE_EQ(acc.sink(0, 0.4), 50.0);
  EXPECT_DOUBLE_EQ(acc.sink(1, 0.4), 50.0);  // offset 2: 0.3 and 0.45
  EXPECT_NEAR(acc.mean_alpha()[3], 0.45, 1e-15);
  EXPECT_THROW(acc.add_window(0, Tensor(B0.data(), DType::f64, {1, 1, T, T}), 1), Error);  // K = 2 > w
}

TEST(SinkMetrics, PrefixScoresAverageEachColumnOverTheQueriesThatSeeIt) {
  // Prefix p = 3, T = 6. Every row puts 0.6 on key 1 (a prefix token every query sees, rows 0 and 1
  // included: they see the whole prefix), the rest on its last visible key max(i, p-1).
  const int T = 6, p = 3;
  std::vector<double> A(size_t(T) * T, 0.0);
  for (int i = 0; i < T; ++i) {
    A[size_t(i) * T + 1] += 0.6;
    A[size_t(i) * T + std::max(i, p - 1)] += 0.4;
  }
  Tensor t(A.data(), DType::f64, {T, T});
  std::vector<double> pos(T);
  prefix_importance_scores(t, p, pos.data());
  EXPECT_NEAR(pos[0], 0.0, 1e-15);
  EXPECT_NEAR(pos[1], 0.6, 1e-15);                 // 6 rows * 0.6 / 6
  EXPECT_NEAR(pos[2], (3 * 0.4) / 6.0, 1e-15);     // rows 0, 1, 2 end on key 2; every row sees it
  for (int j = p; j < T; ++j) EXPECT_NEAR(pos[j], 0.4 / (T - j), 1e-15) << "j=" << j;  // row j only
  // p <= 1 is the causal importance score of every position.
  std::vector<double> C = first_column_matrix(T, 0.4);
  std::vector<double> causal = importance_scores(Tensor(C.data(), DType::f64, {T, T}), T);
  for (int64_t q : {0, 1}) {
    prefix_importance_scores(Tensor(C.data(), DType::f64, {T, T}), q, pos.data());
    for (int j = 0; j < T; ++j) EXPECT_NEAR(pos[j], causal[j], 1e-15) << "p=" << q << " j=" << j;
  }
  // p = T: the whole matrix is visible, every column's mean over T rows.
  prefix_importance_scores(t, T, pos.data());
  for (int j = 0; j < T; ++j) {
    double col = 0;
    for (int i = 0; i < T; ++i) col += A[size_t(i) * T + j];
    EXPECT_NEAR(pos[j], col / T, 1e-15) << "j=" << j;
  }
  // The accumulator at K = T: Sink per position; position 2 (k = 2) sinks at every eps (0.6).
  SinkAccumulator acc(1, 1, T);
  acc.add_prefix(0, Tensor(A.data(), DType::f64, {1, 1, T, T}), p);
  EXPECT_DOUBLE_EQ(acc.sink(1, 0.4), 100.0);
  EXPECT_DOUBLE_EQ(acc.sink(0, 0.2), 0.0);
  EXPECT_DOUBLE_EQ(acc.sink(T - 1, 0.3), 100.0);  // the last row alone: 0.4
  SinkAccumulator small(1, 1, 2);
  EXPECT_THROW(small.add_prefix(0, Tensor(A.data(), DType::f64, {1, 1, T, T}), p), Error);  // K != T
}

TEST(SinkMetrics, PerSampleAndMeanAlphaAveragingDiffer) {
  // One head; sample 1 has alpha_1 = 0.5, sample 2 has 0.15: per-sample metric at 0.3 is 50 %
  // (reference code), the sample-mean alpha 0.325 is above 0.3 -> 100 %.
  const int T = 10;
  SinkAccumulator acc(1, 1, 1, {0.3});
  for (double a : {0.5, 0.15}) {
    std::vector<double> A = first_column_matrix(T, a);
    acc.add(0, Tensor(A.data(), DType::f64, {1, 1, T, T}));
  }
  EXPECT_EQ(acc.samples(), 2);
  EXPECT_DOUBLE_EQ(acc.sink(0, 0.3), 50.0);
  EXPECT_DOUBLE_EQ(acc.sink(0, 0.3, SinkAveraging::mean_alpha), 100.0);
  EXPECT_NEAR(acc.mean_alpha()[0], 0.325, 1e-15);
}

TEST(SinkMetrics, StrictThresholdAndMergeAndState) {
  // alpha exactly equal to eps does not count (strict '>'), as in the paper and the reference code.
  SinkAccumulator a(1, 2, 1, {0.25});
  std::vector<double> alpha = {0.25, 0.2500001};
  a.add_alpha(0, Tensor(alpha.data(), DType::f64, {1, 2, 1}));
  EXPECT_DOUBLE_EQ(a.sink(0, 0.25), 50.0);
  // merge == summing states (what an MPI allreduce of state() does)
  SinkAccumulator b(1, 2, 1, {0.25});
  std::vector<double> alpha2 = {0.9, 0.1};
  b.add_alpha(0, Tensor(alpha2.data(), DType::f64, {1, 2, 1}));
  SinkAccumulator c = a;
  c.merge(b);
  for (size_t i = 0; i < a.state().size(); ++i) a.state()[i] += b.state()[i];
  EXPECT_EQ(a.state(), c.state());
  EXPECT_EQ(c.samples(), 2);
  EXPECT_DOUBLE_EQ(c.sink(0, 0.25), 50.0);  // (1 + 1) of 4
  // Layers with different sample counts are an error.
  SinkAccumulator d(2, 2, 1, {0.25});
  d.add_alpha(0, Tensor(alpha.data(), DType::f64, {1, 2, 1}));
  EXPECT_THROW(d.samples(), Error);
}

TEST(SinkMetrics, SingleTokenSequence) {
  // T = 1: A = [[1]], alpha_1 = 1 > every eps.
  double one = 1.0;
  Tensor t(&one, DType::f64, {1, 1});
  EXPECT_DOUBLE_EQ(importance_scores(t, 1)[0], 1.0);
  SinkAccumulator acc(1, 1, 1);
  acc.add(0, Tensor(&one, DType::f64, {1, 1, 1, 1}));
  EXPECT_DOUBLE_EQ(acc.sink(0, 0.4), 100.0);
  // K > T is refused with a message.
  EXPECT_THROW(importance_scores(t, 2), Error);
  SinkAccumulator acc2(1, 1, 2);
  EXPECT_THROW(acc2.add(0, Tensor(&one, DType::f64, {1, 1, 1, 1})), Error);
}

TEST(SinkMetrics, ProxyScoresForUnnormalisedWeights) {
  // Sigmoid-style positive weights, causal (zeros above the diagonal), rows not summing to one.
  const int T = 3;
  std::vector<double> w = {0.5, 0, 0,  //
                           0.9, 0.3, 0,  //
                           0.2, 0.2, 0.4};
  std::vector<double> p(w.size());
  proxy_scores(Tensor(p.data(), DType::f64, {T, T}), Tensor(w.data(), DType::f64, {T, T}), false);
  const double rows[3] = {0.5, 1.2, 0.8};
  for (int i = 0; i < T; ++i)
    for (int j = 0; j < T; ++j) EXPECT_NEAR(p[size_t(i) * T + j], w[size_t(i) * T + j] / (rows[i] + 1e-8), 1e-15);
  // alpha_1 of the proxy matrix: (0.5/0.5 + 0.9/1.2 + 0.2/0.8) / 3 (up to the 1e-8).
  std::vector<double> alpha = importance_scores(Tensor(p.data(), DType::f64, {T, T}), 1);
  EXPECT_NEAR(alpha[0], (1.0 + 0.75 + 0.25) / 3.0, 1e-7);

  // Signed kernel weights use |w| in numerator and denominator.
  std::vector<double> s = {-2.0, 0, 0,  //
                           1.0, -3.0, 0,  //
                           -1.0, 1.0, 2.0};
  std::vector<double> ps(s.size());
  proxy_scores(Tensor(ps.data(), DType::f64, {T, T}), Tensor(s.data(), DType::f64, {T, T}), true);
  EXPECT_NEAR(ps[0], 1.0, 1e-8);
  EXPECT_NEAR(ps[3], 0.25, 1e-8);
  EXPECT_NEAR(ps[4], 0.75, 1e-8);
  EXPECT_NEAR(ps[6], 0.25, 1e-8);
  EXPECT_NEAR(ps[8], 0.5, 1e-8);
  // An all-zero row stays zero (the 1e-8 keeps it finite).
  std::vector<double> z = {0.0, 0.0};
  std::vector<double> pz(2);
  proxy_scores(Tensor(pz.data(), DType::f64, {1, 2}), Tensor(z.data(), DType::f64, {1, 2}), true);
  EXPECT_EQ(pz[0], 0.0);

  // The accumulator's add_weights == proxy_scores + add, on a [B,H,T,T] f32 tensor, in place allowed.
  std::vector<float> wf(w.begin(), w.end());
  SinkAccumulator acc(1, 1, 1, {0.6, 0.7});
  acc.add_weights(0, Tensor(wf.data(), DType::f32, {1, 1, T, T}), false);
  EXPECT_NEAR(acc.mean_alpha()[0], 2.0 / 3.0, 1e-6);
  EXPECT_DOUBLE_EQ(acc.sink(0, 0.6), 100.0);
  EXPECT_DOUBLE_EQ(acc.sink(0, 0.7), 0.0);
  proxy_scores(Tensor(wf.data(), DType::f32, {T, T}), Tensor(wf.data(), DType::f32, {T, T}), false);
  EXPECT_NEAR(wf[3], 0.75f, 1e-6);
}

TEST(SinkMetrics, MassiveRatioAndFirstVsRestNorms) {
  // h [4, 2]: row 0 = (30, 40) (norm 50), rows 1..3 norms 1, 2, 3 (mean 2) -> ratio 25.
  std::vector<float> h = {30, 40, 1, 0, 0, 2, 3, 0};
  Tensor t(h.data(), DType::f32, {4, 2});
  EXPECT_NEAR(massive_ratio(t), 25.0, 1e-12);
  FirstVsRest r = first_vs_rest_norms(t);
  EXPECT_NEAR(r.first, 50.0, 1e-12);
  EXPECT_NEAR(r.rest, 2.0, 1e-12);
  // A strided view: one head's [T, dh] slice of [T, H*dh] values.
  std::vector<double> kv = {3, 4, 100, 100,  //
                            0, 1, 100, 100};
  Tensor kvt(kv.data(), DType::f64, {2, 4});
  Tensor head0 = kvt.slice(1, 0, 2);
  FirstVsRest r2 = first_vs_rest_norms(head0);
  EXPECT_NEAR(r2.first, 5.0, 1e-12);
  EXPECT_NEAR(r2.rest, 1.0, 1e-12);
  // T = 1: no rest; massive_ratio needs T >= 2.
  FirstVsRest r3 = first_vs_rest_norms(Tensor(kv.data(), DType::f64, {1, 2}));
  EXPECT_NEAR(r3.first, 5.0, 1e-12);
  EXPECT_EQ(r3.rest, 0.0);
  EXPECT_THROW(massive_ratio(Tensor(kv.data(), DType::f64, {1, 2})), Error);
}

}  // namespace
}  // namespace sinklab::probe

namespace sinklab::probe {
namespace {

// --sink-eps is parsed once for sinklab-pretrain and sinklab-probe.
TEST(SinkEps, ParsesAndValidatesTheThresholdList) {
  EXPECT_EQ(parse_sink_eps("0.2,0.3,0.4"), (std::vector<double>{0.2, 0.3, 0.4}));
  EXPECT_EQ(parse_sink_eps("0.5"), (std::vector<double>{0.5}));
  for (const char* bad : {"", ",", "0.3x", "abc", "0", "1", "-0.2", "0.2,1.5"}) {
    try {
      parse_sink_eps(bad);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--sink-eps"), std::string::npos) << e.what();
    }
  }
}

}  // namespace
}  // namespace sinklab::probe
