// The learned sink logit (gpt-oss) at the edges fused kernels got wrong (flash-attention #1797, #2102, and
// the review of its PR #2752: NaN when a row has no visible key, Inf with a sink logit of 100 when the
// sink is left out of the row maximum). sinklab's f32 CPU op, forward and backward, against a float64
// reference written here from the formula (softmax over the keys plus one key of score S_h and value 0):
//   m_i = max(S_h, max_j s_ij),  Z_i = e^{S_h - m_i} + sum_j e^{s_ij - m_i},  P_ij = e^{s_ij - m_i} / Z_i,
//   o_i = sum_j P_ij v_j;  dP_ij = dO_i . v_j,  D_i = sum_j P_ij dP_ij,  ds_ij = P_ij (dP_ij - D_i),
//   dS_h = - sum_{b,i} P_i,sink D_i.
// Cases: sink logits +100 and -100 (scores of order 1: the sink takes the whole row, or nothing),
// T = 1, grouped-query heads, and the nearest thing to a row with every key masked: sinklab's masks
// always leave a query its own key, so an empty row cannot be built through the op; a row whose every
// score lies ~1e4 below the sink logit is the same limit (P_sink = 1, o = 0, no gradient but through
// the exponentials' underflow).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <vector>

#include "test_util.hpp"

namespace sinklab {
namespace {

using test::Owned;

struct EdgeCase {
  const char* name;
  int64_t B, T, H, Hkv, dh;
  double sink;         // every head's sink logit
  double score_shift;  // added to every score through q's first component against k's constant one
};

// The reference in float64 from the f32 inputs, for causal softmax with a sink logit (lead keys 0).
struct Reference {
  std::vector<double> out, dq, dk, dv, dsink;
};

Reference reference(const EdgeCase& c, const std::vector<float>& q, const std::vector<float>& k,
                    const std::vector<float>& v, const std::vector<float>& sink, const std::vector<float>& dout) {
  const int64_t B = c.B, T = c.T, H = c.H, Hkv = c.Hkv, dh = c.dh, group = H / Hkv;
  const double scale = 1.0 / std::sqrt(double(dh));
  auto qi = [&](int64_t b, int64_t t, int64_t h) { return &q[size_t(((b * T + t) * H + h) * dh)]; };
  auto kj = [&](int64_t b, int64_t t, int64_t g) { return &k[size_t(((b * T + t) * Hkv + g) * dh)]; };
  auto vj = [&](int64_t b, int64_t t, int64_t g) { return &v[size_t(((b * T + t) * Hkv + g) * dh)]; };
  Reference r;
  r.out.assign(size_t(B * T * H * dh), 0.0);
  r.dq.assign(size_t(B * T * H * dh), 0.0);
  r.dk.assign(size_t(B * T * Hkv * dh), 0.0);
  r.dv.assign(size_t(B * T * Hkv * dh), 0.0);
  r.dsink.assign(size_t(H), 0.0);
  for (int64_t b = 0; b < B; ++b)
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        const int64_t g = h / group;
        std::vector<double> s(size_t(i + 1)), p(size_t(i + 1)), dp(size_t(i + 1));
        double m = sink[size_t(h)];
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0.0;
          for (int64_t e = 0; e < dh; ++e) dot += double(qi(b, i, h)[e]) * double(kj(b, j, g)[e]);
          s[size_t(j)] = scale * dot;
          m = std::max(m, s[size_t(j)]);
        }
        double z = std::exp(double(sink[size_t(h)]) - m);
        for (int64_t j = 0; j <= i; ++j) z += std::exp(s[size_t(j)] - m);
        const double p_sink = std::exp(double(sink[size_t(h)]) - m) / z;
        const float* go = &dout[size_t(((b * T + i) * H + h) * dh)];
        double D = 0.0;
        for (int64_t j = 0; j <= i; ++j) {
          p[size_t(j)] = std::exp(s[size_t(j)] - m) / z;
          double d = 0.0;
          for (int64_t e = 0; e < dh; ++e) {
            r.out[size_t(((b * T + i) * H + h) * dh + e)] += p[size_t(j)] * double(vj(b, j, g)[e]);
            d += double(go[e]) * double(vj(b, j, g)[e]);
          }
          dp[size_t(j)] = d;
          D += p[size_t(j)] * d;
        }
        r.dsink[size_t(h)] -= p_sink * D;
        for (int64_t j = 0; j <= i; ++j) {
          const double ds = p[size_t(j)] * (dp[size_t(j)] - D);
          for (int64_t e = 0; e < dh; ++e) {
            r.dq[size_t(((b * T + i) * H + h) * dh + e)] += scale * ds * double(kj(b, j, g)[e]);
            r.dk[size_t(((b * T + j) * Hkv + g) * dh + e)] += scale * ds * double(qi(b, i, h)[e]);
            r.dv[size_t(((b * T + j) * Hkv + g) * dh + e)] += p[size_t(j)] * double(go[e]);
          }
        }
      }
  return r;
}

std::vector<float> values(const Owned& t) {
  const float* p = t.data<float>();
  return std::vector<float>(p, p + t.t.numel());
}

// max |got - want| / max(max |want|, 1): the f32 op's error in units of the quantity's own scale.
double scaled_error(const Owned& got, const std::vector<double>& want) {
  const float* g = got.data<float>();
  double worst = 0.0, scale = 1.0;
  for (double w : want) scale = std::max(scale, std::fabs(w));
  for (size_t n = 0; n < want.size(); ++n) {
    EXPECT_TRUE(std::isfinite(g[n])) << "element " << n << " is " << g[n];
    worst = std::max(worst, std::fabs(double(g[n]) - want[n]));
  }
  return worst / scale;
}

class SinkLogitEdges : public ::testing::TestWithParam<EdgeCase> {};

TEST_P(SinkLogitEdges, ForwardAndBackwardMatchFloat64) {
  const EdgeCase c = GetParam();
  const int64_t B = c.B, T = c.T, H = c.H, Hkv = c.Hkv, dh = c.dh;
  Owned q(DType::f32, {B, T, H, dh}), k(DType::f32, {B, T, Hkv, dh}), v(DType::f32, {B, T, Hkv, dh});
  Owned dout(DType::f32, {B, T, H, dh}), sink(DType::f32, {H}), d_sink(DType::f32, {H});
  test::randn(q, 71), test::randn(k, 72), test::randn(v, 73), test::randn(dout, 74);
  ops::fill(sink, c.sink);
  if (c.score_shift != 0.0) {
    // Component 0: k = 1, q = shift * sqrt(dh), so every score moves by `shift` (scale 1/sqrt(dh)).
    for (int64_t n = 0; n < B * T * Hkv; ++n) k.data<float>()[n * dh] = 1.0f;
    for (int64_t n = 0; n < B * T * H; ++n) q.data<float>()[n * dh] = float(c.score_shift * std::sqrt(double(dh)));
  }
  ops::AttentionSpec spec;
  spec.sink_logit = sink.t;
  spec.d_sink_logit = d_sink.t;
  Owned out(DType::f32, {B, T, H, dh}), stats(DType::f32, {B, H, T});
  Owned dq(DType::f32, {B, T, H, dh}), dk(DType::f32, {B, T, Hkv, dh}), dv(DType::f32, {B, T, Hkv, dh});
  ops::attention_forward(out, stats, q, k, v, spec);
  ops::attention_backward(dq, dk, dv, dout, q, k, v, out, stats, spec);
  const Reference r = reference(c, values(q), values(k), values(v), values(sink), values(dout));
  for (int64_t n = 0; n < stats.t.numel(); ++n) EXPECT_TRUE(std::isfinite(stats.data<float>()[n])) << "stats " << n;
  const double e_out = scaled_error(out, r.out), e_dq = scaled_error(dq, r.dq), e_dk = scaled_error(dk, r.dk),
               e_dv = scaled_error(dv, r.dv), e_sink = scaled_error(d_sink, r.dsink);
  std::printf("[ sink edge ] %-22s out %.2e dq %.2e dk %.2e dv %.2e d_sink %.2e\n", c.name, e_out, e_dq, e_dk, e_dv,
              e_sink);
  EXPECT_LE(e_out, 1e-5) << "out";
  EXPECT_LE(e_dq, 1e-5) << "d_q";
  EXPECT_LE(e_dk, 1e-5) << "d_k";
  EXPECT_LE(e_dv, 1e-5) << "d_v";
  EXPECT_LE(e_sink, 1e-5) << "d_sink_logit";
}

const EdgeCase kEdgeCases[] = {
    {"sink_plus100", 2, 9, 4, 2, 8, 100.0, 0.0},
    {"sink_minus100", 2, 9, 4, 2, 8, -100.0, 0.0},
    {"t1_sink_plus100", 1, 1, 2, 1, 8, 100.0, 0.0},
    {"t1_sink_minus100", 1, 1, 2, 1, 8, -100.0, 0.0},
    {"t1_h1_sink0", 1, 1, 1, 1, 4, 0.0, 0.0},
    {"keys_1e4_below_sink", 2, 7, 2, 2, 8, 0.0, -1e4},
};

std::string edge_name(const ::testing::TestParamInfo<EdgeCase>& info) { return info.param.name; }

INSTANTIATE_TEST_SUITE_P(Cpu, SinkLogitEdges, ::testing::ValuesIn(kEdgeCases), edge_name);

}  // namespace
}  // namespace sinklab
