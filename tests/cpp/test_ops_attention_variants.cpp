// The attention variants of the paper (Sec. 7.3-7.4, Tables 14-15, Eq. 43-44) on the CPU:
// - against PyTorch float64 autograd of the paper's formulas (golden file from
//   tests/python/goldens/gen_attention_variants.py): out, probs (w/Z as computed), stats, dq, dk, dv,
//   in f32 and f64, for T = 1, T = 67 (two query blocks, one head) and grouped-query attention;
// - finite differences of the backward in f64 for every variant;
// - masks: exactly the visible entries of probs are non-zero;
// - invalid variants throw sinklab::Error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <ostream>
#include <set>
#include <string>
#include <vector>

#include "test_util.hpp"

namespace sinklab {
namespace {

using ops::AttnMask;
using ops::AttnNorm;
using ops::AttnSim;
using test::Owned;

// The variants of the golden file and the shapes each is stored for (gen_attention_variants.py).
struct VariantShapes {
  const char* variant;
  std::vector<const char*> shapes;
};

const std::vector<VariantShapes>& golden_variants() {
  static const std::vector<VariantShapes> v = {
      {"sliding_w5", {"t1", "t67", "gqa"}},     {"sliding_w1", {"t1", "gqa"}},
      {"prefix_p4", {"t1", "t67", "gqa"}},      {"prefix_p40", {"t67"}},
      {"sigmoid_one", {"t1", "t67", "gqa"}},    {"sigmoid_sum", {"t1", "t67", "gqa"}},
      {"elu_sum", {"t1", "t67", "gqa"}},        {"elu_one", {"t1", "t67", "gqa"}},
      {"elu_maxabs", {"t1", "t67", "gqa"}},     {"identity_sum", {"t1"}},
      {"identity_one", {"t1", "t67", "gqa"}},   {"identity_maxabs", {"t1", "t67", "gqa"}},
      {"alpha_0.5", {"t1", "t67", "gqa"}},      {"softmax_p0.25", {"t1", "t67", "gqa"}},
      {"softmax_p0.333", {"t1", "gqa"}},        {"softmax_p0.5", {"t1", "gqa"}},
      {"softmax_p2", {"t1", "gqa"}},            {"softmax_p3", {"t1", "gqa"}},
      {"softmax_p4", {"t1", "t67", "gqa"}},     {"sigmoid_p0.5", {"t1", "gqa"}},
      {"sigmoid_p2", {"t1", "gqa"}},            {"sigmoid_p3", {"t1", "t67", "gqa"}},
      {"sigmoid_p0.25", {"t1", "gqa"}},         {"sink_softmax", {"t1", "t67", "gqa"}},
      {"sink_sigmoid_sum", {"t1", "gqa"}},
  };
  return v;
}

ops::AttentionSpec spec_of(const test::Golden& g, const std::string& variant) {
  ops::AttentionSpec spec;
  spec.sim = AttnSim(int(g.param(variant + "/sim")));
  spec.norm = AttnNorm(int(g.param(variant + "/norm")));
  spec.mask = AttnMask(int(g.param(variant + "/mask")));
  spec.window = int64_t(g.param(variant + "/window"));
  spec.prefix = int64_t(g.param(variant + "/prefix"));
  spec.sigmoid_bias = g.param(variant + "/sigmoid_bias");
  spec.norm_alpha = g.param(variant + "/norm_alpha");
  spec.norm_p = g.param(variant + "/norm_p");
  return spec;
}

struct GoldenCase {
  std::string variant, shape;
  DType dtype;
};

void PrintTo(const GoldenCase& c, std::ostream* os) {
  *os << c.variant << "@" << c.shape << (c.dtype == DType::f32 ? " f32" : " f64");
}

std::string case_name(const ::testing::TestParamInfo<GoldenCase>& info) {
  std::string n = info.param.variant + "_" + info.param.shape + (info.param.dtype == DType::f32 ? "_f32" : "_f64");
  for (char& ch : n)
    if (ch == '.') ch = 'p';
  return n;
}

// test::rel_error, with a reference at round-off level (max |ref| < 1e-12: a gradient that vanishes
// identically, e.g. dq of a row with one visible key under a sum normaliser, where torch leaves
// ~1e-17) taken as zero: then, as rel_error does for an all-zero reference, the absolute error.
double err(const Tensor& a, const Tensor& ref) {
  double max_err = 0.0, max_ref = 0.0;
  EXPECT_EQ(a.numel(), ref.numel());
  for (int64_t i = 0; i < ref.numel(); ++i) {
    max_err = std::max(max_err, std::fabs(test::element(a, i) - test::element(ref, i)));
    max_ref = std::max(max_ref, std::fabs(test::element(ref, i)));
  }
  return max_ref >= 1e-12 ? max_err / max_ref : max_err;
}

class AttentionVariantsVsTorch : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(AttentionVariantsVsTorch, OutputsProbsStatsAndGradients) {
  const GoldenCase gc = GetParam();
  test::Golden g("attention_variants.safetensors");
  const std::string in = "in_" + gc.shape, c = gc.variant + "@" + gc.shape;
  const int64_t B = int64_t(g.param(in + "/B")), T = int64_t(g.param(in + "/T")), H = int64_t(g.param(in + "/H")),
                Hkv = int64_t(g.param(in + "/Hkv")), dh = int64_t(g.param(in + "/dh"));
  const DType dt = gc.dtype;
  Owned q = g.get(in + "/q", dt), k = g.get(in + "/k", dt), v = g.get(in + "/v", dt), dout = g.get(in + "/dout", dt);
  Owned out(dt, {B, T, H, dh}), stats(dt, {B, H, T}), probs(dt, {B, H, T, T});
  Owned dq(dt, {B, T, H, dh}), dk(dt, {B, T, Hkv, dh}), dv(dt, {B, T, Hkv, dh});
  ops::fill(dq, 777.0), ops::fill(dk, 777.0), ops::fill(dv, 777.0), ops::fill(probs, -5.0);
  ops::AttentionSpec spec = spec_of(g, gc.variant);
  const bool sink = g.has(c + "/sink_logit");
  Owned sink_logit, d_sink;
  if (sink) {
    sink_logit = g.get(c + "/sink_logit", dt);
    d_sink = Owned(dt, {H});
    ops::fill(d_sink, 777.0);
    spec.sink_logit = sink_logit.t;
    spec.d_sink_logit = d_sink.t;
  }
  ops::attention_forward(out, stats, q, k, v, spec);
  ops::attention_probs(probs, q, k, spec);
  ops::attention_backward(dq, dk, dv, dout, q, k, v, out, stats, spec);

  // probs: all rows, or the rows listed in "<in>/prow" for the long shape.
  Tensor probs_ref = g.raw(c + "/probs");
  Owned probs_rows;
  Tensor probs_cmp = probs.t;
  if (g.has(in + "/prow")) {
    Tensor prow = g.raw(in + "/prow");
    const int64_t n = prow.numel();
    probs_rows = Owned(dt, {B, H, n, T});
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t r = 0; r < n; ++r) {
        const int64_t i = int64_t(test::element(prow, r));
        for (int64_t j = 0; j < T; ++j) {
          const double x = test::element(probs, (bh * T + i) * T + j);
          const int64_t at = (bh * n + r) * T + j;
          if (dt == DType::f32) probs_rows.t.ptr<float>()[at] = float(x); else probs_rows.t.ptr<double>()[at] = x;
        }
      }
    probs_cmp = probs_rows.t;
  }
  const double tol = dt == DType::f32 ? 1e-5 : 1e-10;
  const double e_out = err(out, g.raw(c + "/out")), e_probs = err(probs_cmp, probs_ref),
               e_stats = err(stats, g.raw(c + "/stats")), e_dq = err(dq, g.raw(c + "/dq")),
               e_dk = err(dk, g.raw(c + "/dk")), e_dv = err(dv, g.raw(c + "/dv"));
  EXPECT_LE(e_out, tol) << "out";
  EXPECT_LE(e_probs, tol) << "probs";
  EXPECT_LE(e_stats, tol) << "stats";
  EXPECT_LE(e_dq, tol) << "dq";
  EXPECT_LE(e_dk, tol) << "dk";
  EXPECT_LE(e_dv, tol) << "dv";
  const double e_sink = sink ? err(d_sink, g.raw(c + "/d_sink")) : 0.0;
  EXPECT_LE(e_sink, tol) << "d_sink_logit";
  std::printf("[ variant  ] %-16s %-4s %s  out %.2e probs %.2e stats %.2e dq %.2e dk %.2e dv %.2e d_sink %.2e\n",
              gc.variant.c_str(), gc.shape.c_str(), dt == DType::f32 ? "f32" : "f64", e_out, e_probs, e_stats, e_dq,
              e_dk, e_dv, e_sink);
}

std::vector<GoldenCase> golden_cases() {
  std::vector<GoldenCase> out;
  for (const auto& vs : golden_variants())
    for (const char* shape : vs.shapes)
      for (DType dt : {DType::f32, DType::f64}) out.push_back({vs.variant, shape, dt});
  return out;
}

INSTANTIATE_TEST_SUITE_P(Golden, AttentionVariantsVsTorch, ::testing::ValuesIn(golden_cases()), case_name);

TEST(AttentionVariantsGolden, CoversEveryCaseOfTheFile) {
  test::Golden g("attention_variants.safetensors");
  std::set<std::string> file, listed;
  for (const std::string& c : g.cases())
    if (c.rfind("in_", 0) != 0) file.insert(c);
  for (const auto& vs : golden_variants())
    for (const char* shape : vs.shapes) listed.insert(std::string(vs.variant) + "@" + shape);
  EXPECT_EQ(file, listed);
}

// ---- finite differences -------------------------------------------------------------------------------

struct FdCase {
  const char* name;
  ops::AttentionSpec spec;
};

// In spec.scale, marks a case as carrying a sink logit (filled by the test: the spec holds views).
constexpr double kSinkMarker = -12345.0;

ops::AttentionSpec make_spec(AttnSim sim, AttnNorm norm, AttnMask mask = AttnMask::causal) {
  ops::AttentionSpec s;
  s.sim = sim, s.norm = norm, s.mask = mask;
  return s;
}

std::vector<FdCase> fd_cases() {
  std::vector<FdCase> v;
  ops::AttentionSpec s = make_spec(AttnSim::exp, AttnNorm::sum, AttnMask::sliding_window);
  s.window = 3;
  v.push_back({"sliding_w3", s});
  s = make_spec(AttnSim::exp, AttnNorm::sum, AttnMask::prefix_lm);
  s.prefix = 4;
  v.push_back({"prefix_p4", s});
  s = make_spec(AttnSim::sigmoid, AttnNorm::one);
  s.sigmoid_bias = -std::log(9.0);
  v.push_back({"sigmoid_one", s});
  v.push_back({"sigmoid_sum", make_spec(AttnSim::sigmoid, AttnNorm::sum)});
  v.push_back({"elu_sum", make_spec(AttnSim::elu_plus_one, AttnNorm::sum)});
  s = make_spec(AttnSim::exp, AttnNorm::sum);
  s.scale = kSinkMarker;
  v.push_back({"sink_softmax", s});
  s = make_spec(AttnSim::sigmoid, AttnNorm::sum, AttnMask::sliding_window);
  s.window = 4;
  s.scale = kSinkMarker;
  v.push_back({"sink_sigmoid_sw4", s});
  v.push_back({"elu_one", make_spec(AttnSim::elu_plus_one, AttnNorm::one)});
  v.push_back({"elu_maxabs", make_spec(AttnSim::elu_plus_one, AttnNorm::max_abs_sum_one)});
  v.push_back({"identity_one", make_spec(AttnSim::identity, AttnNorm::one)});
  v.push_back({"identity_maxabs", make_spec(AttnSim::identity, AttnNorm::max_abs_sum_one)});
  s = make_spec(AttnSim::exp, AttnNorm::sum);
  s.norm_alpha = 0.3;
  v.push_back({"alpha_0p3", s});
  for (double p : {0.25, 1.0 / 3.0, 0.5, 2.0, 3.0, 4.0}) {
    s = make_spec(AttnSim::exp, AttnNorm::p_norm);
    s.norm_p = p;
    v.push_back({"softmax_p", s});
    s.sim = AttnSim::sigmoid;
    v.push_back({"sigmoid_p", s});
  }
  return v;
}

void PrintTo(const FdCase& c, std::ostream* os) { *os << c.name << " p=" << c.spec.norm_p; }

class AttentionVariantsFiniteDifference : public ::testing::TestWithParam<FdCase> {};

TEST_P(AttentionVariantsFiniteDifference, BackwardMatchesCentralDifferences) {
  ops::AttentionSpec spec = GetParam().spec;
  const int64_t B = 2, T = 9, H = 4, Hkv = 2, dh = 5;
  const bool sink = spec.scale == kSinkMarker;
  Owned sink_logit(DType::f64, {H}), d_sink(DType::f64, {H});
  if (sink) {
    spec.scale = 0.0;
    test::randn(sink_logit, 15);
    spec.sink_logit = sink_logit.t;
    spec.d_sink_logit = d_sink.t;
  }
  Owned q(DType::f64, {B, T, H, dh}), k(DType::f64, {B, T, Hkv, dh}), v(DType::f64, {B, T, Hkv, dh});
  Owned w(DType::f64, {B, T, H, dh}), out(DType::f64, {B, T, H, dh}), stats(DType::f64, {B, H, T});
  Owned dq(DType::f64, {B, T, H, dh}), dk(DType::f64, {B, T, Hkv, dh}), dv(DType::f64, {B, T, Hkv, dh});
  test::randn(q, 11), test::randn(k, 12), test::randn(v, 13), test::randn(w, 14);
  ops::attention_forward(out, stats, q, k, v, spec);
  ops::attention_backward(dq, dk, dv, w, q, k, v, out, stats, spec);
  auto loss = [&] {
    ops::attention_forward(out, stats, q, k, v, spec);
    return test::weighted_sum(out, w);
  };
  // h = 1e-5 rather than the 1e-6 of test_ops_attention: for p_norm with small p the loss contains
  // (sum w^p)^(1/p) = (...)^4, whose round-off at h = 1e-6 reaches ~2e-6 (sigmoid, p = 1/4); the
  // truncation error at 1e-5 is ~1e-10 (measured: 2.5e-7 at 1e-5, 2.1e-6 at 1e-6, 9e-7 at 1e-4).
  const double h = 1e-5;
  const double eq = test::finite_difference_error(q, dq, loss, h), ek = test::finite_difference_error(k, dk, loss, h),
               ev = test::finite_difference_error(v, dv, loss, h);
  if (sink) {
    const double es = test::finite_difference_error(sink_logit, d_sink, loss, h);
    EXPECT_LT(es, 1e-6) << "d/dsink_logit";
    std::printf("[ fd       ] %-16s d/dsink %.2e\n", GetParam().name, es);
  }
  EXPECT_LT(eq, 1e-6) << "d/dq";
  EXPECT_LT(ek, 1e-6) << "d/dk";
  EXPECT_LT(ev, 1e-6) << "d/dv";
  std::printf("[ fd       ] %-16s p=%.3g  dq %.2e dk %.2e dv %.2e\n", GetParam().name, spec.norm_p, eq, ek, ev);
}

std::string fd_name(const ::testing::TestParamInfo<FdCase>& info) {
  return std::string(info.param.name) + "_" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(Variants, AttentionVariantsFiniteDifference, ::testing::ValuesIn(fd_cases()), fd_name);

// ---- masks ---------------------------------------------------------------------------------------------

TEST(AttentionVariantsMasks, ProbsAreNonZeroExactlyWhereVisible) {
  const int64_t B = 1, T = 140, H = 2, dh = 8;  // three query blocks
  Owned q(DType::f64, {B, T, H, dh}), k(DType::f64, {B, T, H, dh}), probs(DType::f64, {B, H, T, T});
  test::randn(q, 41), test::randn(k, 42);
  for (int which = 0; which < 2; ++which) {
    ops::AttentionSpec spec;
    spec.mask = which == 0 ? AttnMask::sliding_window : AttnMask::prefix_lm;
    spec.window = 70;
    spec.prefix = 100;
    ops::fill(probs, -5.0);
    ops::attention_probs(probs, q, k, spec);
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < T; ++i) {
        double sum = 0;
        for (int64_t j = 0; j < T; ++j) {
          const bool vis = which == 0 ? (j <= i && j > i - 70) : (j <= i || j < 100);
          const double p = test::element(probs, (h * T + i) * T + j);
          if (vis) {
            ASSERT_GT(p, 0.0) << which << " " << i << " " << j;
          } else {
            ASSERT_EQ(p, 0.0) << which << " " << i << " " << j;
          }
          sum += p;
        }
        ASSERT_NEAR(sum, 1.0, 1e-12);
      }
  }
}

// ---- invalid variants ----------------------------------------------------------------------------------

TEST(AttentionVariantsErrors, InvalidVariantsThrow) {
  const DType dt = DType::f64;
  Owned q(dt, {1, 6, 2, 4}), k(dt, {1, 6, 2, 4}), v(dt, {1, 6, 2, 4}), out(dt, {1, 6, 2, 4}), st(dt, {1, 2, 6});
  Owned probs(dt, {1, 2, 6, 6}), dq(dt, {1, 6, 2, 4}), dk(dt, {1, 6, 2, 4}), dv(dt, {1, 6, 2, 4});
  auto expect_invalid = [&](const ops::AttentionSpec& spec, const char* what) {
    EXPECT_THROW(ops::attention_forward(out, st, q, k, v, spec), Error) << what;
    EXPECT_THROW(ops::attention_probs(probs, q, k, spec), Error) << what;
    EXPECT_THROW(ops::attention_backward(dq, dk, dv, out, q, k, v, out, st, spec), Error) << what;
  };
  ops::AttentionSpec s;
  s.mask = AttnMask::sliding_window;  // window 0
  expect_invalid(s, "window 0");
  s.window = -2;
  expect_invalid(s, "negative window");
  s = {};
  s.mask = AttnMask::prefix_lm;
  s.prefix = -1;
  expect_invalid(s, "negative prefix");
  for (double p : {0.0, -1.0, std::nan("")}) {
    s = {};
    s.norm = AttnNorm::p_norm;
    s.norm_p = p;
    expect_invalid(s, "norm_p <= 0");
  }
  s = {};
  s.norm_alpha = 0.0;
  expect_invalid(s, "norm_alpha 0");
  s = {};
  s.norm = AttnNorm::one;  // exp without a normaliser the running max cancels under
  expect_invalid(s, "exp / one");
  s.norm = AttnNorm::max_abs_sum_one;
  expect_invalid(s, "exp / max_abs_sum_one");
  s = {};
  s.sim = AttnSim::identity;
  s.norm = AttnNorm::p_norm;
  s.norm_p = 2.0;
  expect_invalid(s, "identity / p_norm");
  s = {};
  s.norm_p = 2.0;  // a p for a norm that has none
  expect_invalid(s, "norm_p with norm sum");
  s = {};
  s.sigmoid_bias = -1.0;
  expect_invalid(s, "sigmoid_bias with sim exp");
  Owned sink3(dt, {3}), sink2(dt, {2}), sink2f(DType::f32, {2});
  s = {};
  s.sink_logit = sink3.t;  // not [H]
  expect_invalid(s, "sink_logit shape");
  s.sink_logit = sink2f.t;  // not the dtype of q
  expect_invalid(s, "sink_logit dtype");
  s = {};
  s.sim = AttnSim::sigmoid;
  s.norm = AttnNorm::one;
  s.sink_logit = sink2.t;
  expect_invalid(s, "sink with norm one");
  s = {};
  s.d_sink_logit = sink2.t;
  EXPECT_THROW(ops::attention_backward(dq, dk, dv, out, q, k, v, out, st, s), Error) << "d_sink without sink";
  // The message names the problem.
  s = {};
  s.norm = AttnNorm::one;
  try {
    ops::attention_forward(out, st, q, k, v, s);
    ADD_FAILURE() << "no throw";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("running-max"), std::string::npos) << e.what();
  }
  // Valid variants work.
  s = {};
  s.sim = AttnSim::sigmoid;
  s.norm = AttnNorm::one;
  s.sigmoid_bias = -std::log(6.0);
  EXPECT_NO_THROW(ops::attention_forward(out, st, q, k, v, s));
  s = {};
  s.mask = AttnMask::sliding_window;
  s.window = 1;
  EXPECT_NO_THROW(ops::attention_forward(out, st, q, k, v, s));
}

}  // namespace
}  // namespace sinklab
