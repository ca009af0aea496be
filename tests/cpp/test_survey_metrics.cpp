// The survey measurements (probe::SurveyProbe) against a numpy float64 reference written from the
// paper's definitions (tests/python/goldens/gen_survey_metrics.py -> tests/golden/survey_metrics.safetensors),
// in f32 and f64, fed in two batches; plus a case small enough to check by hand, and the head-pair flags.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "probe/survey_metrics.hpp"
#include "test_util.hpp"

namespace sinklab::probe {
namespace {

using test::Golden;
using test::Owned;

double rel_error(const std::vector<double>& got, const Tensor& ref) {
  EXPECT_EQ(int64_t(got.size()), ref.numel());
  double err = 0.0, scale = 0.0;
  for (int64_t i = 0; i < ref.numel() && i < int64_t(got.size()); ++i) {
    err = std::max(err, std::fabs(got[size_t(i)] - test::element(ref, i)));
    scale = std::max(scale, std::fabs(test::element(ref, i)));
  }
  return scale > 0 ? err / scale : err;
}
double rel_error(const std::vector<float>& got, const Tensor& ref) {
  return rel_error(std::vector<double>(got.begin(), got.end()), ref);
}

std::vector<HeadPair> pairs_of(const Tensor& t) {
  std::vector<HeadPair> out;
  for (int64_t p = 0; p < t.shape[0]; ++p) out.push_back({t.ptr<int32_t>()[2 * p], t.ptr<int32_t>()[2 * p + 1]});
  return out;
}

// Runs the golden model's taps through a SurveyProbe in dtype dt, sequences [0,2) then [2,3).
// padded_kv: k and v are views of a [B,T,Hkv,dh+1] buffer (a head's features are not followed by the
// next head's, so they cannot be read as one [T, Hkv*dh] matrix). fused: the attention matrix comes in
// the probe's own buffer (probs_output), filled by ops::attention_forward as a model fills it, instead
// of being formed by the probe one head at a time.
SurveyResult run_golden(const Golden& g, DType dt, bool padded_kv, bool fused = false) {
  Owned hidden = g.get("in/hidden_out", dt), pre = g.get("in/hidden_pre_norm", dt);
  Owned q = g.get("in/q", dt), k = g.get("in/k", dt), v = g.get("in/v", dt);
  const int64_t L = hidden.t.shape[0], B = hidden.t.shape[1], T = hidden.t.shape[2], d = hidden.t.shape[3];
  const int64_t La = q.t.shape[0], H = q.t.shape[3], Hkv = k.t.shape[3], dh = q.t.shape[4];
  SurveyShape shape;
  shape.n_layers = int(L);
  const Tensor att = g.raw("in/attention_layers");
  for (int64_t a = 0; a < La; ++a) shape.attention_layers.push_back(att.ptr<int32_t>()[a]);
  shape.n_heads = int(H);
  shape.n_kv_heads = int(Hkv);
  shape.seq_len = T;
  shape.max_k = int(g.param("in/K"));
  const Tensor eps = g.raw("in/eps");
  shape.eps.assign(eps.ptr<double>(), eps.ptr<double>() + eps.numel());
  SurveyProbe probe(shape, pairs_of(g.raw("in/qk_pairs")), pairs_of(g.raw("in/attention_pairs")));

  // [B,T,Hkv,dh+1] copies of k and v (the extra feature is garbage), read through [B,T,Hkv,dh] views.
  Owned kp(dt, {La, B, T, Hkv, dh + 1}), vp(dt, {La, B, T, Hkv, dh + 1});
  for (const auto& [src, dst] : {std::pair{&k, &kp}, std::pair{&v, &vp}}) {
    ops::fill(dst->t, 1e6);
    for (int64_t i = 0; i < src->t.numel(); ++i)
      store_from_double(dst->t.data, dt, (i / dh) * (dh + 1) + i % dh, test::element(src->t, i));
  }
  auto kv_view = [&](const Owned& plain, const Owned& padded, int64_t a) {
    if (!padded_kv) return plain.t.slice(0, a, 1).reshape({B, T, Hkv, dh});
    return padded.t.slice(0, a, 1).reshape({B, T, Hkv, dh + 1}).slice(3, 0, dh);
  };

  ops::AttentionSpec spec;  // causal softmax, scale 1/sqrt(dh): what the reference computes
  for (auto [b0, n] : {std::pair<int64_t, int64_t>{0, 2}, std::pair<int64_t, int64_t>{2, 1}}) {
    for (int64_t l = 0; l < L; ++l) {
      LayerTaps taps;
      taps.layer = int(l);
      taps.hidden_out = hidden.t.slice(0, l, 1).reshape({B, T, d}).slice(0, b0, n);
      taps.hidden_in = taps.hidden_out;
      if (l == 2) taps.hidden_pre_norm = pre.t.slice(0, b0, n);
      const int64_t a = l == 0 ? 0 : l == 2 ? 1 : -1;
      if (a >= 0) {
        taps.q = q.t.slice(0, a, 1).reshape({B, T, H, dh}).slice(0, b0, n);
        taps.k = kv_view(k, kp, a).slice(0, b0, n);
        taps.v = kv_view(v, vp, a).slice(0, b0, n);
        taps.attention = &spec;
        if (fused) {
          taps.probs = observer_probs(&probe, int(l), taps.q, taps.k);
          EXPECT_TRUE(taps.probs.defined());
          Owned out(dt, {n, T, H, dh});
          ops::attention_forward(out, Tensor{}, taps.q, taps.k, taps.v, spec, taps.probs);
        }
      }
      probe.on_layer(taps);
    }
  }
  return probe.result();
}

void expect_matches_golden(const Golden& g, const SurveyResult& r, double tol) {
  EXPECT_EQ(r.samples, 3);
  EXPECT_LE(rel_error(r.alpha, g.raw("out/alpha")), tol);
  // Counts of heads above a threshold: the same counts (the reference keeps every alpha 1e-3 from each
  // eps; one head more or less would be an error of 100/24 percent).
  EXPECT_LE(rel_error(r.sink_k, g.raw("out/sink_k")), 1e-12);
  EXPECT_LE(rel_error(r.hnorm_first, g.raw("out/hnorm_first")), tol);
  EXPECT_LE(rel_error(r.hnorm_rest, g.raw("out/hnorm_rest")), tol);
  EXPECT_LE(rel_error(r.massive_ratio, g.raw("out/massive_ratio")), tol);
  EXPECT_LE(rel_error(r.hnorm_first_pre_norm, g.raw("out/hnorm_first_pre_norm")), tol);
  EXPECT_LE(rel_error(r.hnorm_rest_pre_norm, g.raw("out/hnorm_rest_pre_norm")), tol);
  EXPECT_LE(rel_error(r.massive_ratio_pre_norm, g.raw("out/massive_ratio_pre_norm")), tol);
  EXPECT_LE(rel_error(r.knorm_first, g.raw("out/knorm_first")), tol);
  EXPECT_LE(rel_error(r.knorm_rest, g.raw("out/knorm_rest")), tol);
  EXPECT_LE(rel_error(r.vnorm_first, g.raw("out/vnorm_first")), tol);
  EXPECT_LE(rel_error(r.vnorm_rest, g.raw("out/vnorm_rest")), tol);
  EXPECT_LE(rel_error(r.last_to_first, g.raw("out/last_to_first")), tol);
  // The maps are stored as f32.
  const double map_tol = std::max(tol, 1e-6);
  EXPECT_LE(rel_error(r.qk_cos, g.raw("out/qk_cos")), map_tol);
  EXPECT_LE(rel_error(r.qk_normprod, g.raw("out/qk_normprod")), map_tol);
  EXPECT_LE(rel_error(r.attention_maps, g.raw("out/attention_maps")), map_tol);
}

TEST(SurveyMetrics, MatchesNumpyReference) {
  Golden g("survey_metrics.safetensors");
  for (DType dt : test::kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    expect_matches_golden(g, run_golden(g, dt, false), test::tol(dt));
  }
  SCOPED_TRACE("k, v with a gap between heads");
  expect_matches_golden(g, run_golden(g, DType::f64, true), test::tol(DType::f64));
}

// The matrix a model's attention op forms in the probe's buffer gives the same numbers, bit for bit, as
// the probe's own per-head matrices.
TEST(SurveyMetrics, FusedAttentionMatrixGivesTheSameResult) {
  Golden g("survey_metrics.safetensors");
  for (DType dt : test::kDtypes) {
    SCOPED_TRACE(dtype_name(dt));
    const SurveyResult own = run_golden(g, dt, false), fused = run_golden(g, dt, false, true);
    expect_matches_golden(g, fused, test::tol(dt));
    EXPECT_EQ(fused.alpha, own.alpha);
    EXPECT_EQ(fused.sink_k, own.sink_k);
    EXPECT_EQ(fused.last_to_first, own.last_to_first);
    EXPECT_EQ(fused.attention_maps, own.attention_maps);
  }
}

// T = 2, one head, q = 0: every row is uniform over the keys it sees, A = [[1, 0], [1/2, 1/2]].
TEST(SurveyMetrics, HandComputedTwoTokens) {
  SurveyShape shape;
  shape.n_layers = 1;
  shape.attention_layers = {0};
  shape.n_heads = shape.n_kv_heads = 1;
  shape.seq_len = 2;
  shape.max_k = 2;
  shape.eps = {0.4, 0.6};
  SurveyProbe probe(shape, {{0, 0}}, {{0, 0}});
  Owned h(DType::f64, {1, 2, 2}), q(DType::f64, {1, 2, 1, 2}), k(DType::f64, {1, 2, 1, 2}), v(DType::f64, {1, 2, 1, 2});
  double* ph = h.data<double>();
  ph[0] = 3, ph[1] = 4, ph[2] = 0, ph[3] = 1;  // ||h_1|| = 5, ||h_2|| = 1
  double* pk = k.data<double>();
  pk[0] = 1, pk[1] = 0, pk[2] = 0, pk[3] = 2;  // k_1 = (1,0), k_2 = (0,2)
  double* pv = v.data<double>();
  pv[0] = 0, pv[1] = 0, pv[2] = 6, pv[3] = 8;  // ||v_1|| = 0, ||v_2|| = 10
  ops::AttentionSpec spec;
  LayerTaps taps;
  taps.hidden_in = taps.hidden_out = h.t;
  taps.q = q.t, taps.k = k.t, taps.v = v.t, taps.attention = &spec;
  probe.on_layer(taps);
  SurveyResult r = probe.result();
  EXPECT_EQ(r.samples, 1);
  EXPECT_DOUBLE_EQ(r.alpha[0], 0.75);  // (1 + 1/2) / 2
  EXPECT_DOUBLE_EQ(r.alpha[1], 0.5);   // 1/2 / 1
  EXPECT_EQ(r.sink_k, (std::vector<double>{100, 100, 100, 0}));  // [k, eps]: 0.75 > 0.4, 0.6; 0.5 > 0.4 only
  EXPECT_DOUBLE_EQ(r.hnorm_first[0], 5.0);
  EXPECT_DOUBLE_EQ(r.hnorm_rest[0], 1.0);
  EXPECT_DOUBLE_EQ(r.massive_ratio[0], 5.0);
  EXPECT_DOUBLE_EQ(r.knorm_first[0], 1.0);
  EXPECT_DOUBLE_EQ(r.knorm_rest[0], 2.0);
  EXPECT_DOUBLE_EQ(r.vnorm_first[0], 0.0);
  EXPECT_DOUBLE_EQ(r.vnorm_rest[0], 10.0);
  EXPECT_DOUBLE_EQ(r.last_to_first[0], 0.5);
  EXPECT_EQ(r.attention_maps, (std::vector<float>{1.0f, 0.0f, 0.5f, 0.5f}));
  EXPECT_EQ(r.qk_cos, (std::vector<float>(4, 0.0f)));  // q = 0 has no angle
  EXPECT_EQ(r.qk_normprod, (std::vector<float>(4, 0.0f)));
  EXPECT_TRUE(r.massive_ratio_pre_norm.empty());  // no post-norm layer
}

// logits 0 except logit[b,t,v] = v (t = 0) and 2 (t = 1, v = 0): position t predicts ids[b,t+1]; the
// last position predicts nothing. With V = 3: row (0,1,2) gives -log p(v) = log(1+e+e^2) - v, row
// (2,0,0) gives log(e^2+2) - (2 if v = 0 else 0).
TEST(SurveyMetrics, NextTokenLossHandComputed) {
  for (DType dt : {DType::f32, DType::f64}) {
    Owned logits(dt, {2, 3, 3}), ids(DType::i32, {2, 3});
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t v = 0; v < 3; ++v) store_from_double(logits.t.data, dt, b * 9 + v, double(v));
      store_from_double(logits.t.data, dt, b * 9 + 3, 2.0);
      store_from_double(logits.t.data, dt, b * 9 + 6, 50.0);  // the last position: never read
    }
    const int32_t id[] = {7, 2, 0, /**/ 7, 0, 1};  // ids[b,0] is never a target (7 >= V would throw)
    std::copy(id, id + 6, ids.t.ptr<int32_t>());
    const double a = std::log(1 + std::exp(1.0) + std::exp(2.0)), c = std::log(std::exp(2.0) + 2);
    const double expected = (a - 2) + (c - 2) + (a - 0) + (c - 0);
    EXPECT_NEAR(next_token_loss_sum(logits.t, ids.t), expected, dt == DType::f32 ? 1e-5 : 1e-12) << dtype_name(dt);
  }
  // A target outside the vocabulary and mismatched shapes are errors.
  Owned logits(DType::f32, {1, 2, 3}), ids(DType::i32, {1, 2}), short_ids(DType::i32, {1, 1});
  ids.t.ptr<int32_t>()[1] = 3;
  EXPECT_THROW(next_token_loss_sum(logits.t, ids.t), Error);
  EXPECT_THROW(next_token_loss_sum(logits.t, short_ids.t), Error);
}

// The multiple-choice score: only the continuation's tokens count, each predicted by the position before it.
TEST(SurveyMetrics, ContinuationLoglikHandComputed) {
  Owned logits(DType::f32, {2, 3, 3}), ids(DType::i32, {2, 3});
  for (int64_t b = 0; b < 2; ++b) {
    for (int64_t v = 0; v < 3; ++v) store_from_double(logits.t.data, DType::f32, b * 9 + v, double(v));  // position 0
    store_from_double(logits.t.data, DType::f32, b * 9 + 3, 2.0);                                        // position 1
  }
  const int32_t id[] = {1, 2, 0, /**/ 1, 0, 1};
  std::copy(id, id + 6, ids.t.ptr<int32_t>());
  const double a = std::log(1 + std::exp(1.0) + std::exp(2.0)), c = std::log(std::exp(2.0) + 2);
  // Row 0: continuation = tokens [1, 3) (both predicted); row 1: only token 1 (end 2).
  const std::vector<double> got = continuation_logliks(logits.t, ids.t, {1, 1}, {3, 2});
  EXPECT_NEAR(got[0], -(a - 2) - (c - 2), 1e-5);
  EXPECT_NEAR(got[1], -(a - 0), 1e-5);
  // From position 2 on only the last token counts; an empty span scores 0; spans outside [1, T] are errors.
  EXPECT_NEAR(continuation_logliks(logits.t, ids.t, {2, 3}, {3, 3})[0], -(c - 2), 1e-5);
  EXPECT_EQ(continuation_logliks(logits.t, ids.t, {2, 3}, {3, 3})[1], 0.0);
  EXPECT_THROW(continuation_logliks(logits.t, ids.t, {0, 1}, {3, 3}), Error);
  EXPECT_THROW(continuation_logliks(logits.t, ids.t, {1, 1}, {4, 3}), Error);
  EXPECT_THROW(continuation_logliks(logits.t, ids.t, {1}, {3}), Error);
}

// Sequences and (sequence, head) pairs are measured in parallel into their own slots and summed in index
// order: one thread and two give the same numbers, bit for bit. The shapes are large enough that every
// parallel loop of the probe runs parallel (kParallelMinWork), with the fused matrix, the per-head
// fallback and proxy scores (sigmoid rows) all exercised.
TEST(SurveyMetrics, ResultDoesNotDependOnTheThreadCount) {
  const int64_t B = 6, T = 96, H = 4, Hkv = 2, dh = 16, d = 64;
  for (DType dt : test::kDtypes)
    for (bool fused : {true, false})
      for (ops::AttnSim sim : {ops::AttnSim::exp, ops::AttnSim::sigmoid}) {
        SCOPED_TRACE(std::string(dtype_name(dt)) + (fused ? " fused" : " per head") +
                     (sim == ops::AttnSim::exp ? " softmax" : " sigmoid"));
        Owned hidden(dt, {B, T, d}), q(dt, {B, T, H, dh}), k(dt, {B, T, Hkv, dh}), v(dt, {B, T, Hkv, dh});
        test::randn(hidden, 21), test::randn(q, 22), test::randn(k, 23), test::randn(v, 24);
        ops::AttentionSpec spec;
        spec.sim = sim;
        if (sim == ops::AttnSim::sigmoid) spec.norm = ops::AttnNorm::one;
        auto run = [&](int threads) {
          omp_set_num_threads(threads);
          SurveyShape shape;
          shape.n_layers = 1;
          shape.attention_layers = {0};
          shape.n_heads = int(H);
          shape.n_kv_heads = int(Hkv);
          shape.seq_len = T;
          shape.max_k = 8;
          SurveyProbe probe(shape, {{0, 1}}, {{0, 3}});
          LayerTaps taps;
          taps.hidden_in = taps.hidden_out = hidden.t;
          taps.q = q.t, taps.k = k.t, taps.v = v.t;
          taps.attention = &spec;
          if (fused) {
            taps.probs = observer_probs(&probe, 0, q.t, k.t);
            EXPECT_TRUE(taps.probs.defined());
            Owned out(dt, {B, T, H, dh});
            ops::attention_forward(out, Tensor{}, q.t, k.t, v.t, spec, taps.probs);
          }
          probe.on_layer(taps);
          return probe.result();
        };
        const int before = omp_get_max_threads();
        const SurveyResult one = run(1), two = run(2);
        omp_set_num_threads(before);
        EXPECT_EQ(one.alpha, two.alpha);
        EXPECT_EQ(one.sink_k, two.sink_k);
        EXPECT_EQ(one.hnorm_first, two.hnorm_first);
        EXPECT_EQ(one.hnorm_rest, two.hnorm_rest);
        EXPECT_EQ(one.massive_ratio, two.massive_ratio);
        EXPECT_EQ(one.knorm_first, two.knorm_first);
        EXPECT_EQ(one.knorm_rest, two.knorm_rest);
        EXPECT_EQ(one.vnorm_first, two.vnorm_first);
        EXPECT_EQ(one.vnorm_rest, two.vnorm_rest);
        EXPECT_EQ(one.last_to_first, two.last_to_first);
        EXPECT_EQ(one.qk_cos, two.qk_cos);
        EXPECT_EQ(one.attention_maps, two.attention_maps);
      }
}

TEST(SurveyMetrics, LayersMustAgree) {
  SurveyShape shape;
  shape.n_layers = 2;
  shape.attention_layers = {1};
  shape.n_heads = shape.n_kv_heads = 1;
  shape.seq_len = 2;
  SurveyProbe probe(shape);
  Owned h(DType::f32, {1, 2, 3});
  test::randn(h.t, 5);
  LayerTaps taps;
  taps.hidden_in = taps.hidden_out = h.t;
  probe.on_layer(taps);  // layer 0: no attention, as announced
  EXPECT_THROW(probe.result(), Error);  // layer 1 has seen nothing yet
  taps.layer = 1;
  EXPECT_THROW(probe.on_layer(taps), Error);  // layer 1 was announced with attention
  taps.layer = 2;
  EXPECT_THROW(probe.on_layer(taps), Error);  // no such layer
  // Pairs must name attention heads.
  EXPECT_THROW(SurveyProbe(shape, {{0, 0}}), Error);
  EXPECT_THROW(SurveyProbe(shape, {}, {{1, 1}}), Error);
  EXPECT_NO_THROW(SurveyProbe(shape, {{1, 0}}, {{1, 0}}));
  // A sink token (lead position) is refused, not silently measured as text.
  SurveyProbe fresh(shape);
  taps.layer = 0;
  taps.lead_positions = 1;
  EXPECT_THROW(fresh.on_layer(taps), Error);
}

TEST(SurveyMetrics, HeadPairFlags) {
  EXPECT_TRUE(parse_head_pairs("", "qk-maps").empty());
  std::vector<HeadPair> p = parse_head_pairs("2:0,-1:3,0:1", "qk-maps");
  ASSERT_EQ(p.size(), 3u);
  EXPECT_EQ(p[0], (HeadPair{2, 0}));
  EXPECT_EQ(p[1], (HeadPair{-1, 3}));
  EXPECT_EQ(p[2], (HeadPair{0, 1}));
  for (const char* bad : {"2", "2:", ":1", "a:1", "1:-1", "1:2:3", "1.5:2"}) {
    try {
      parse_head_pairs(bad, "qk-maps");
      ADD_FAILURE() << bad << " was accepted";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("--qk-maps"), std::string::npos) << e.what();
    }
  }
  // A 6-layer model whose layers 1 and 5 have attention, 4 heads.
  std::vector<std::string> skipped;
  std::vector<HeadPair> r = resolve_head_pairs(
      {{1, 0}, {-1, 3}, {2, 0}, {5, 4}, {6, 0}, {-7, 0}}, 6, {1, 5}, 4, &skipped);
  ASSERT_EQ(r.size(), 2u);
  EXPECT_EQ(r[0], (HeadPair{1, 0}));
  EXPECT_EQ(r[1], (HeadPair{5, 3}));
  ASSERT_EQ(skipped.size(), 4u);
  EXPECT_EQ(skipped[0], "2:0 (layer 2 has no attention)");
  EXPECT_EQ(skipped[1], "5:4 (the model has 4 heads)");
  EXPECT_EQ(skipped[2], "6:0 (the model has 6 layers)");
  EXPECT_EQ(skipped[3], "-7:0 (the model has 6 layers)");
}

}  // namespace
}  // namespace sinklab::probe
