// The probe's first-token measurements (probe/model_probe.hpp) on constructed attention matrices, against
// sums written out here: the attention to the first token by query group (as measured, and as raw
// weights beside an average other key: the Bigram-Backcopy split of train/evaluation.hpp), and the first
// token's hidden-state and value norms beside the others'.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "probe/model_probe.hpp"
#include "test_util.hpp"

namespace sinklab {
namespace {

constexpr int64_t B = 2, H = 2, T = 4, d = 3, dh = 2;

// A causal attention matrix [B,H,T,T]: row i of head h of sequence b has weights w(b,h,i,j) for j <= i,
// normalised to sum 1 when `distribution`, else left as they are (sigmoid weights without normalisation).
test::Owned attention(bool distribution) {
  test::Owned p(DType::f32, {B, H, T, T});
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        double sum = 0;
        for (int64_t j = 0; j <= i; ++j) sum += 0.1 + 0.05 * double((b + 2 * h + 3 * i + 5 * j) % 7) + (j == 0 ? 0.4 : 0.0);
        for (int64_t j = 0; j <= i; ++j) {
          const double w = 0.1 + 0.05 * double((b + 2 * h + 3 * i + 5 * j) % 7) + (j == 0 ? 0.4 : 0.0);
          p.data<float>()[((b * H + h) * T + i) * T + j] = float(distribution ? w / sum : w);
        }
      }
  return p;
}

struct Case {
  test::Owned q{DType::f32, {B, T, H, dh}}, k{DType::f32, {B, T, 1, dh}}, v{DType::f32, {B, T, 1, dh}};
  test::Owned hidden{DType::f32, {B, T, d}};
  Case() {
    for (int64_t i = 0; i < v.t.numel(); ++i) v.data<float>()[i] = float(0.3 * double(i % 5) - 0.4);
    for (int64_t i = 0; i < hidden.t.numel(); ++i) hidden.data<float>()[i] = float(std::sin(double(i)) * (i < d ? 9 : 1));
  }
};

probe::ProbeResult probe_of(const test::Owned& probs, const ops::AttentionSpec& spec, const std::vector<int8_t>& groups,
                            int n_groups) {
  Case c;
  probe::ModelProbe probe(1, int(H), T, 1, {0.3}, {}, n_groups);
  probe.set_query_groups(groups);
  LayerTaps taps;
  taps.layer = 0;
  taps.hidden_in = c.hidden.t;
  taps.hidden_out = c.hidden.t;
  taps.q = c.q.t, taps.k = c.k.t, taps.v = c.v.t;
  taps.attention = &spec;
  test::Owned copy = test::Owned::copy_of(probs.t, DType::f32);  // the probe may overwrite its matrix
  taps.probs = copy.t;
  probe.on_layer(taps);
  return probe.result();
}

// Query groups of the two sequences: -1 leaves a query out.
const std::vector<int8_t> kGroups = {0, 1, 0, -1, /* sequence 1 */ 1, 0, 0, 1};

void expect_group_means(const probe::ProbeResult& r, const test::Owned& raw, bool proxy) {
  for (int64_t h = 0; h < H; ++h)
    for (int g = 0; g < 2; ++g) {
      double first = 0, first_raw = 0, rest = 0, n = 0, n_rest = 0;
      for (int64_t b = 0; b < B; ++b)
        for (int64_t i = 0; i < T; ++i) {
          if (kGroups[size_t(b * T + i)] != g) continue;
          const float* row = raw.data<float>() + ((b * H + h) * T + i) * T;
          double sum = 0;
          for (int64_t j = 0; j <= i; ++j) sum += row[j];
          first += proxy ? row[0] / (sum + 1e-8) : row[0];  // the paper's proxy score w / (sum w + 1e-8)
          first_raw += row[0];
          n += 1;
          if (i >= 1) {
            rest += (sum - row[0]) / double(i);
            n_rest += 1;
          }
        }
      const size_t at = size_t(h * 2 + g);
      EXPECT_NEAR(r.first_attention[at], first / n, 1e-6) << "head " << h << " group " << g;
      EXPECT_NEAR(r.first_weight_raw[at], first_raw / n, 1e-6) << "head " << h << " group " << g;
      EXPECT_NEAR(r.rest_weight_raw[at], rest / n_rest, 1e-6) << "head " << h << " group " << g;
    }
}

TEST(ProbeFirstToken, AttentionToTheFirstTokenByQueryGroup) {
  ops::AttentionSpec softmax;  // rows are distributions: measured = raw
  const test::Owned probs = attention(true);
  const probe::ProbeResult r = probe_of(probs, softmax, kGroups, 2);
  ASSERT_EQ(r.n_query_groups, 2);
  ASSERT_EQ(r.first_attention.size(), size_t(H * 2));
  EXPECT_FALSE(r.proxy_scores);
  expect_group_means(r, probs, false);
}

TEST(ProbeFirstToken, ProxyScoresBesideTheRawSigmoidWeights) {
  ops::AttentionSpec sigmoid;  // sigmoid without normalisation: the sink metric reads proxy scores
  sigmoid.sim = ops::AttnSim::sigmoid;
  sigmoid.norm = ops::AttnNorm::one;
  const test::Owned weights = attention(false);
  const probe::ProbeResult r = probe_of(weights, sigmoid, kGroups, 2);
  EXPECT_TRUE(r.proxy_scores);
  expect_group_means(r, weights, true);
}

TEST(ProbeFirstToken, OneGroupOfEveryQueryByDefault) {
  ops::AttentionSpec softmax;
  const test::Owned probs = attention(true);
  const probe::ProbeResult r = probe_of(probs, softmax, {}, 1);
  for (int64_t h = 0; h < H; ++h) {
    double first = 0;
    for (int64_t b = 0; b < B; ++b)
      for (int64_t i = 0; i < T; ++i) first += probs.data<float>()[((b * H + h) * T + i) * T];
    EXPECT_NEAR(r.first_attention[size_t(h)], first / double(B * T), 1e-6);
  }
}

TEST(ProbeFirstToken, FirstTokenNormsBesideTheOthers) {
  ops::AttentionSpec softmax;
  const probe::ProbeResult r = probe_of(attention(true), softmax, {}, 1);
  Case c;
  auto norm = [](const float* x, int64_t n) {
    double s = 0;
    for (int64_t i = 0; i < n; ++i) s += double(x[i]) * x[i];
    return std::sqrt(s);
  };
  double h_first = 0, h_rest = 0, v_first = 0, v_rest = 0;
  for (int64_t b = 0; b < B; ++b) {
    h_first += norm(c.hidden.data<float>() + b * T * d, d) / B;
    v_first += norm(c.v.data<float>() + b * T * dh, dh) / B;
    for (int64_t t = 1; t < T; ++t) {
      h_rest += norm(c.hidden.data<float>() + (b * T + t) * d, d) / double(B * (T - 1));
      v_rest += norm(c.v.data<float>() + (b * T + t) * dh, dh) / double(B * (T - 1));
    }
  }
  ASSERT_EQ(r.hnorm_first.size(), 1u);
  EXPECT_NEAR(r.hnorm_first[0], h_first, 1e-6);
  EXPECT_NEAR(r.hnorm_rest[0], h_rest, 1e-6);
  EXPECT_NEAR(r.vnorm_first[0], v_first, 1e-6);
  EXPECT_NEAR(r.vnorm_rest[0], v_rest, 1e-6);
  EXPECT_GT(r.hnorm_first[0], 3 * r.hnorm_rest[0]);  // the constructed massive first token
}

}  // namespace
}  // namespace sinklab
