// The paper's closed forms for a repeated token (App. B.1, Props. 1-3), on sinklab's model with random
// weights: one token x repeated T = 64 times. With no position signal in the hidden states (NoPE,
// relative PE, ALiBi: H^0 = X W_E) every layer's hidden states are equal at all positions (Eq. 17), so
// q_t = q and k_t = k for all t and the attention of query i to key j <= i is
//   NoPE (Prop. 1):      A_ij = 1/(i+1)                                   uniform: no attention sink
//   relative (Prop. 2):  A_ij = e^{g(i-j)} / sum_{n=0..i} e^{g(n)}        a function of distance only;
//                        g = the head's learned bias of bucket(i-j) (T5) or bucket(i-j) itself (Eq. 6).
//                        All keys in the last bucket (distance >= D, and here from 14 on) tie: the
//                        first token is never the strict maximum of a row that reaches that bucket.
//   ALiBi (Prop. 3):     A_ij = e^{-m_h (i-j)} / sum_{n=0..i} e^{-m_h n}, m_h = 2^(-8h/H) (Eq. 7):
//                        strictly increasing toward the diagonal, A_i,j+1 / A_ij = e^{m_h}; key 0 is
//                        the strict minimum of every row i >= 1.
// The probabilities are sinklab's attention_probs on each layer's taps (what the sink probe measures).
// A control with RoPE shows that the uniformity check does fail when positions reach the scores.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "model/transformer.hpp"
#include "test_util.hpp"

namespace sinklab {
namespace {

using model::ModelConfig;
using model::Transformer;

constexpr int64_t kT = 64;
// f32 tolerance of an entry that should equal a closed form, relative to it: the normaliser sums at
// most 64 terms ((64 * 2^-24 = 3.8e-6) and the hidden states of different positions agree only to
// about 3e-7 (the GEMM's rounding differs between rows), which the scores s turn into ~|s| * 3e-7 in
// e^s. With the q/k weights below (|s| <= ~6) the measured worst is 1.3e-6 (see the printout).
constexpr double kTol = 1e-5;

ModelConfig repeated_token_config(const std::string& pos_emb) {
  ModelConfig cfg;
  cfg.vocab_size = 32;
  cfg.d_model = 32;
  cfg.n_layers = 3;
  cfg.n_heads = 4;
  cfg.ffn_hidden = 48;
  cfg.context = int(kT);
  cfg.set_axis("pos-emb", pos_emb);
  return cfg;
}

// Random weights, larger than the initialisation for q and k so that the scores are O(1) and any
// positional leak into them would show; learned relative biases (initialised 0) drawn N(0, 1).
void randomise(Transformer& model) {
  model.init_weights(7);
  for (size_t i = 0; i < model.specs().size(); ++i) {
    const auto& s = model.specs()[i];
    const bool qk = s.name.find("q_proj") != std::string::npos || s.name.find("k_proj") != std::string::npos;
    if (qk) ops::fill_normal(model.param(s.name), 11, uint64_t(i), 0.0, 0.25);
    if (s.name == "model.relative_attention_bias.weight") ops::fill_normal(model.param(s.name), 11, uint64_t(i), 0.0, 1.0);
  }
}

// Every layer's attention probabilities [B,H,T,T] and how far its output hidden states are from being
// equal at all positions (max_t |h_t - h_0| / max |h_0|).
struct Observed {
  std::vector<test::Owned> probs;
  std::vector<double> hidden_spread;
  double max_score = 0;  // max over layers and heads of |<q_0, k_0>| / sqrt(dh)
};

class Recorder : public LayerObserver {
 public:
  Observed* out = nullptr;
  void on_layer(const LayerTaps& taps) override {
    const int64_t B = taps.q.shape[0], T = taps.q.shape[1], H = taps.q.shape[2], S = taps.k.shape[1];
    test::Owned p(DType::f32, {B, H, T, S});
    ops::attention_probs(p, taps.q, taps.k, *taps.attention);
    out->probs.push_back(std::move(p));
    const int64_t dh = taps.q.shape[3], lead = S - T;
    for (int64_t h = 0; h < H; ++h) {
      double dot = 0;
      for (int64_t c = 0; c < dh; ++c)
        dot += double(taps.q.ptr<float>()[h * taps.q.stride[2] + c * taps.q.stride[3]]) *
               double(taps.k.ptr<float>()[lead * taps.k.stride[1] + h * taps.k.stride[2] + c * taps.k.stride[3]]);
      out->max_score = std::max(out->max_score, std::fabs(dot) / std::sqrt(double(dh)));
    }
    const Tensor h = taps.hidden_out;  // [B,T,d]
    const int64_t d = h.shape[2];
    double spread = 0, scale = 0;
    for (int64_t t = 0; t < T; ++t)
      for (int64_t c = 0; c < d; ++c) {
        spread = std::max(spread, std::fabs(test::element(h, t * d + c) - test::element(h, c)));
        scale = std::max(scale, std::fabs(test::element(h, c)));
      }
    out->hidden_spread.push_back(spread / scale);
  }
};

Observed run_repeated_token(Transformer& model, int32_t token = 5) {
  test::Owned ids(DType::i32, {1, kT});
  for (int64_t t = 0; t < kT; ++t) ids.data<int32_t>()[t] = token;
  Observed obs;
  Recorder rec;
  rec.out = &obs;
  model.forward_observe(ids, rec);
  EXPECT_EQ(int(obs.probs.size()), model.config().n_layers);
  return obs;
}

double prob(const test::Owned& p, int64_t h, int64_t i, int64_t j) {
  const Tensor& t = p.t;  // [1,H,T,T]
  return test::element(t, (h * t.shape[2] + i) * t.shape[3] + j);
}

// max over rows i, keys j <= i of |A_ij - ref(h, i, j)| / ref(h, i, j); also checks A_ij = 0 for j > i.
template <class Ref>
double worst_relative(const Observed& obs, int64_t H, Ref ref) {
  double worst = 0;
  for (const auto& p : obs.probs)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < kT; ++i)
        for (int64_t j = 0; j < kT; ++j) {
          const double a = prob(p, h, i, j);
          if (j > i) {
            EXPECT_EQ(a, 0.0) << "masked key h=" << h << " i=" << i << " j=" << j;
            continue;
          }
          const double r = ref(h, i, j);
          worst = std::max(worst, std::fabs(a - r) / r);
        }
  return worst;
}

// T5 bucket of a distance n >= 0 (bidirectional=False; the paper's Eq. 6), written out here again.
int t5_bucket(int64_t n, int buckets, int max_distance) {
  const int half = buckets / 2;
  if (n < half) return int(n);
  const int big = half + int(std::log(double(n) / half) / std::log(double(max_distance) / half) * (buckets - half));
  return std::min(big, buckets - 1);
}

// A_ij = e^{g(i-j)} / sum_{n=0..i} e^{g(n)} for a per-head bias g_h(n).
template <class G>
double distance_softmax(G g, int64_t h, int64_t i, int64_t j) {
  double z = 0;
  for (int64_t n = 0; n <= i; ++n) z += std::exp(g(h, n) - g(h, 0));
  return std::exp(g(h, i - j) - g(h, 0)) / z;
}

TEST(RepeatedToken, NoPEAttentionIsUniform) {  // Prop. 1
  Transformer model(repeated_token_config("none"));
  randomise(model);
  const Observed obs = run_repeated_token(model);
  const double err = worst_relative(obs, 4, [](int64_t, int64_t i, int64_t) { return 1.0 / double(i + 1); });
  EXPECT_LE(err, kTol) << "A_ij = 1/(i+1) in every layer and head";
  for (size_t l = 0; l < obs.hidden_spread.size(); ++l)
    EXPECT_LE(obs.hidden_spread[l], kTol) << "hidden states equal at every position (Eq. 17), layer " << l;
  std::printf("NoPE: worst |A_ij (i+1) - 1| = %.1e, hidden-state spread %.1e, max |s| %.1f\n", err,
              *std::max_element(obs.hidden_spread.begin(), obs.hidden_spread.end()), obs.max_score);
}

TEST(RepeatedToken, RopeControlIsNotUniform) {  // the check above can fail: RoPE puts positions in the scores
  Transformer model(repeated_token_config("rope"));
  randomise(model);
  const Observed obs = run_repeated_token(model);
  const double err = worst_relative(obs, 4, [](int64_t, int64_t i, int64_t) { return 1.0 / double(i + 1); });
  EXPECT_GT(err, 1e-2);
  std::printf("RoPE control: worst |A_ij (i+1) - 1| = %.1e\n", err);
}

TEST(RepeatedToken, AlibiAttentionIncreasesTowardTheDiagonal) {  // Prop. 3
  Transformer model(repeated_token_config("alibi"));
  randomise(model);
  const Observed obs = run_repeated_token(model);
  const int64_t H = 4;
  auto slope = [&](int64_t h) { return std::pow(2.0, -double(h + 1) * std::pow(2.0, 3.0 - std::log2(double(H)))); };
  auto g = [&](int64_t h, int64_t n) { return -slope(h) * double(n); };
  const double err = worst_relative(obs, H, [&](int64_t h, int64_t i, int64_t j) { return distance_softmax(g, h, i, j); });
  EXPECT_LE(err, kTol) << "A_ij = e^{-m_h (i-j)} / sum_n e^{-m_h n}";
  for (const auto& p : obs.probs)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 1; i < kT; ++i)
        for (int64_t j = 0; j < i; ++j) {
          ASSERT_LT(prob(p, h, i, j), prob(p, h, i, j + 1)) << "row " << i << " of head " << h << " not increasing at " << j;
          ASSERT_NEAR(prob(p, h, i, j + 1) / prob(p, h, i, j), std::exp(slope(h)), kTol * std::exp(slope(h)));
        }
  for (size_t l = 0; l < obs.hidden_spread.size(); ++l) EXPECT_LE(obs.hidden_spread[l], kTol) << "layer " << l;
  std::printf("ALiBi: worst relative deviation from the closed form %.1e\n", err);
}

class RepeatedTokenRelative : public ::testing::TestWithParam<std::string> {};

TEST_P(RepeatedTokenRelative, AttentionDependsOnDistanceOnly) {  // Prop. 2
  const int buckets = 8, max_distance = 20;  // T = 64 reaches the saturated bucket (distance >= 14)
  ModelConfig cfg = repeated_token_config("relative");
  cfg.set_axis("relative-bias", GetParam());
  cfg.relative_buckets = buckets;
  cfg.relative_max_distance = max_distance;
  Transformer model(cfg);
  randomise(model);
  const bool learned = GetParam() == "learned";
  std::vector<double> table;  // [H, buckets]
  if (learned) {
    Tensor t = model.param("model.relative_attention_bias.weight");
    for (int64_t i = 0; i < t.numel(); ++i) table.push_back(test::element(t, i));
  }
  auto g = [&](int64_t h, int64_t n) {
    const int b = t5_bucket(n, buckets, max_distance);
    return learned ? table[size_t(h * buckets + b)] : double(b);
  };
  const Observed obs = run_repeated_token(model);
  const double err = worst_relative(obs, 4, [&](int64_t h, int64_t i, int64_t j) { return distance_softmax(g, h, i, j); });
  EXPECT_LE(err, kTol) << "A_ij = e^{g(i-j)} / sum_n e^{g(n)}";
  // Keys in the last bucket tie, so for rows that reach it key 0 is not a strict maximum; with the
  // bucket index as the bias (non-decreasing in distance) those tied keys are the row's maximum.
  int64_t rows_with_ties = 0;
  for (const auto& p : obs.probs)
    for (int64_t h = 0; h < 4; ++h)
      for (int64_t i = 0; i < kT; ++i) {
        if (t5_bucket(i - 1, buckets, max_distance) != buckets - 1 || i < 1) continue;
        ++rows_with_ties;
        const double a0 = prob(p, h, i, 0);
        EXPECT_NEAR(prob(p, h, i, 1), a0, kTol * a0) << "row " << i << " head " << h;
        if (learned) continue;
        for (int64_t j = 0; j <= i; ++j) EXPECT_LE(prob(p, h, i, j), a0 * (1 + kTol)) << "row " << i << " head " << h;
      }
  EXPECT_GT(rows_with_ties, 0);
  for (size_t l = 0; l < obs.hidden_spread.size(); ++l) EXPECT_LE(obs.hidden_spread[l], kTol) << "layer " << l;
  std::printf("relative (%s): worst relative deviation from the closed form %.1e\n", GetParam().c_str(), err);
}

INSTANTIATE_TEST_SUITE_P(Modes, RepeatedTokenRelative, ::testing::Values("learned", "bucket-index"),
                         [](const ::testing::TestParamInfo<std::string>& info) {
                           return info.param == "learned" ? std::string("learned") : std::string("bucket_index");
                         });

}  // namespace
}  // namespace sinklab
