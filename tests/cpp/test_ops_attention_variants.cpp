// The attention variants of the paper (Sec. 7.3-7.4, Tables 4, 14-15, Eq. 43-44, Appendix A) and
// softpick on the CPU:
// - against PyTorch float64 autograd of the formulas (golden file from
//   tests/python/goldens/gen_attention_variants.py): out, probs (w/Z as computed), stats, dq, dk, dv
//   (and d_sink_logit, d_relative_bias), in f32 and f64, for T = 1, T = 67 (two query blocks, one
//   head), grouped-query attention, H = 3 and H = 8 (B = 2), softpick's edge rows; lead keys (KV
//   biases), ALiBi and T5 relative position bias;
// - the ALiBi slopes and T5 buckets against the Python rules;
// - finite differences of the backward in f64 for every variant;
// - masks: exactly the visible entries of probs are non-zero (with lead keys too);
// - invalid variants throw sinklab::Error.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <cstdio>
#include <ostream>
#include <set>
#include <utility>
#include <string>
#include <vector>

#include "backend/attention_math.hpp"
#include "test_util.hpp"

namespace sinklab {
namespace {

using ops::AttnMask;
using ops::AttnNorm;
using ops::AttnPosBias;
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
      {"lead1_causal", {"t1", "t67", "gqa", "h8"}},
      {"lead2_causal", {"t1", "gqa"}},
      {"lead1_sliding_w5", {"t1", "t67", "gqa"}},
      {"lead2_sliding_w1", {"t1", "gqa", "h8"}},
      {"lead1_prefix_p4", {"t1", "gqa"}},
      {"lead2_prefix_p40", {"t67"}},
      {"lead1_sink", {"t1", "t67", "gqa"}},
      {"lead2_sink_sliding_w3", {"t1", "gqa"}},
      {"lead1_sigmoid_one", {"t1", "gqa"}},
      {"alibi", {"t1", "t67", "gqa", "h3", "h8"}},
      {"alibi_lead1_sliding_w4", {"t1", "gqa", "h8"}},
      {"alibi_prefix_p4", {"t1", "gqa", "h3"}},
      {"relative_b8_d16", {"t1", "t67", "gqa", "h8"}},
      {"relative_b32_d128", {"t67", "h3"}},
      {"relative_lead2_prefix_p3", {"t1", "gqa", "h8"}},
      {"softpick", {"t1", "t67", "gqa", "sp", "h8"}},
      {"softpick_lead1", {"t1", "gqa", "sp"}},
      {"softpick_sink", {"t1", "gqa", "sp"}},
      {"softpick_alpha_sliding_w3", {"t1", "gqa", "sp"}},
      {"softpick_alibi", {"sp", "h8"}},
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
  spec.lead_keys = int64_t(g.param(variant + "/lead_keys"));
  spec.pos_bias = AttnPosBias(int(g.param(variant + "/pos_bias")));
  spec.relative_max_distance = int64_t(g.param(variant + "/relative_max_distance"));
  return spec;
}

// [a; b] along dim 1 (the keys) in dtype dt.
Owned concat_keys(const Tensor& a, const Tensor& b, DType dt) {
  Owned out(dt, {a.shape[0], a.shape[1] + b.shape[1], a.shape[2], a.shape[3]});
  ops::copy(out.t.slice(1, 0, a.shape[1]), a);
  ops::copy(out.t.slice(1, a.shape[1], b.shape[1]), b);
  return out;
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

// The error of a gradient and its bound: err() against tol, except in f32 for a gradient that
// vanishes to the eps level (max |ref| < 1e-4 with O(1) inputs). That is softpick with one visible
// key per row (T = 1): P = u / (u + 1e-6) is constant up to eps, and dL/ds = E dP (1 - P) cancels O(1)
// terms, which f32 resolves only to their round-off: absolute error <= 1e-6 there (the f64 run holds
// the same case to 1e-10 relative).
std::pair<double, double> grad_check(const Tensor& a, const Tensor& ref, DType dt, double tol) {
  double max_err = 0.0, max_ref = 0.0;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    max_err = std::max(max_err, std::fabs(test::element(a, i) - test::element(ref, i)));
    max_ref = std::max(max_ref, std::fabs(test::element(ref, i)));
  }
  if (dt == DType::f32 && max_ref < 1e-4) return {max_err, 1e-6};
  return {err(a, ref), tol};
}

class AttentionVariantsVsTorch : public ::testing::TestWithParam<GoldenCase> {};

TEST_P(AttentionVariantsVsTorch, OutputsProbsStatsAndGradients) {
  const GoldenCase gc = GetParam();
  test::Golden g("attention_variants.safetensors");
  const std::string in = "in_" + gc.shape, c = gc.variant + "@" + gc.shape;
  const int64_t B = int64_t(g.param(in + "/B")), T = int64_t(g.param(in + "/T")), H = int64_t(g.param(in + "/H")),
                Hkv = int64_t(g.param(in + "/Hkv")), dh = int64_t(g.param(in + "/dh"));
  const DType dt = gc.dtype;
  ops::AttentionSpec spec = spec_of(g, gc.variant);
  const int64_t S = spec.lead_keys + T;
  Owned q = g.get(in + "/q", dt), k = g.get(in + "/k", dt), v = g.get(in + "/v", dt), dout = g.get(in + "/dout", dt);
  if (spec.lead_keys > 0) {  // k, v = [lead keys; positional keys]
    k = concat_keys(g.raw(c + "/k_lead"), k, dt);
    v = concat_keys(g.raw(c + "/v_lead"), v, dt);
  }
  Owned out(dt, {B, T, H, dh}), stats(dt, {B, H, T}), probs(dt, {B, H, T, S});
  Owned dq(dt, {B, T, H, dh}), dk(dt, {B, S, Hkv, dh}), dv(dt, {B, S, Hkv, dh});
  ops::fill(dq, 777.0), ops::fill(dk, 777.0), ops::fill(dv, 777.0), ops::fill(probs, -5.0);
  const bool sink = g.has(c + "/sink_logit");
  Owned sink_logit, d_sink;
  if (sink) {
    sink_logit = g.get(c + "/sink_logit", dt);
    d_sink = Owned(dt, {H});
    ops::fill(d_sink, 777.0);
    spec.sink_logit = sink_logit.t;
    spec.d_sink_logit = d_sink.t;
  }
  const bool relative = spec.pos_bias == AttnPosBias::relative;
  Owned relative_bias, d_relative_bias;
  if (relative) {
    relative_bias = g.get(c + "/relative_bias", dt);
    d_relative_bias = Owned(dt, test::dims_of(relative_bias.t));
    ops::fill(d_relative_bias, 777.0);
    spec.relative_bias = relative_bias.t;
    spec.d_relative_bias = d_relative_bias.t;
  }
  ops::attention_forward(out, stats, q, k, v, spec);
  ops::attention_probs(probs, q, k, spec);
  ops::attention_backward(dq, dk, dv, dout, q, k, v, out, stats, spec);
  // The forward's optional probs output is attention_probs' matrix bit for bit (every element written,
  // including the masked zeros), and asking for it leaves out and stats unchanged.
  {
    Owned fused(dt, {B, H, T, S}), out2(dt, {B, T, H, dh}), stats2(dt, {B, H, T});
    ops::fill(fused, -5.0);
    ops::attention_forward(out2, stats2, q, k, v, spec, fused);
    const size_t bytes = size_t(fused.t.numel()) * dtype_size(dt);
    EXPECT_EQ(std::memcmp(fused.t.data, probs.t.data, bytes), 0) << "attention_forward's probs";
    EXPECT_EQ(std::memcmp(out2.t.data, out.t.data, size_t(out.t.numel()) * dtype_size(dt)), 0) << "out with probs";
    EXPECT_EQ(std::memcmp(stats2.t.data, stats.t.data, size_t(stats.t.numel()) * dtype_size(dt)), 0)
        << "stats with probs";
  }

  // probs: all rows, or the rows listed in "<in>/prow" for the long shape.
  Tensor probs_ref = g.raw(c + "/probs");
  Owned probs_rows;
  Tensor probs_cmp = probs.t;
  if (g.has(in + "/prow")) {
    Tensor prow = g.raw(in + "/prow");
    const int64_t n = prow.numel();
    probs_rows = Owned(dt, {B, H, n, S});
    for (int64_t bh = 0; bh < B * H; ++bh)
      for (int64_t r = 0; r < n; ++r) {
        const int64_t i = int64_t(test::element(prow, r));
        for (int64_t j = 0; j < S; ++j) {
          const double x = test::element(probs, (bh * T + i) * S + j);
          const int64_t at = (bh * n + r) * S + j;
          if (dt == DType::f32) probs_rows.t.ptr<float>()[at] = float(x); else probs_rows.t.ptr<double>()[at] = x;
        }
      }
    probs_cmp = probs_rows.t;
  }
  const double tol = dt == DType::f32 ? 1e-5 : 1e-10;
  const double e_out = err(out, g.raw(c + "/out")), e_probs = err(probs_cmp, probs_ref),
               e_stats = err(stats, g.raw(c + "/stats")), e_dv = err(dv, g.raw(c + "/dv"));
  const auto [e_dq, tol_dq] = grad_check(dq, g.raw(c + "/dq"), dt, tol);
  const auto [e_dk, tol_dk] = grad_check(dk, g.raw(c + "/dk"), dt, tol);
  EXPECT_LE(e_out, tol) << "out";
  EXPECT_LE(e_probs, tol) << "probs";
  EXPECT_LE(e_stats, tol) << "stats";
  EXPECT_LE(e_dq, tol_dq) << "dq";
  EXPECT_LE(e_dk, tol_dk) << "dk";
  EXPECT_LE(e_dv, tol) << "dv";
  const double e_sink = sink ? err(d_sink, g.raw(c + "/d_sink")) : 0.0;
  EXPECT_LE(e_sink, tol) << "d_sink_logit";
  const double e_rel = relative ? err(d_relative_bias, g.raw(c + "/d_relative_bias")) : 0.0;
  EXPECT_LE(e_rel, tol) << "d_relative_bias";
  std::printf("[ variant  ] %-24s %-4s %s  out %.2e probs %.2e stats %.2e dq %.2e dk %.2e dv %.2e d_sink %.2e "
              "d_rel %.2e\n",
              gc.variant.c_str(), gc.shape.c_str(), dt == DType::f32 ? "f32" : "f64", e_out, e_probs, e_stats, e_dq,
              e_dk, e_dv, e_sink, e_rel);
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
    if (c.rfind("in_", 0) != 0 && c.rfind("table_", 0) != 0) file.insert(c);
  for (const auto& vs : golden_variants())
    for (const char* shape : vs.shapes) listed.insert(std::string(vs.variant) + "@" + shape);
  EXPECT_EQ(file, listed);
}

// ---- position-bias helpers against the Python rules ------------------------------------------------

// attn_alibi_slope against the released code's _get_slopes, bit for bit (same double operations).
TEST(AttentionPositionBias, AlibiSlopesMatchThePythonRule) {
  test::Golden g("attention_variants.safetensors");
  for (int64_t H : {1, 2, 3, 5, 6, 8, 12, 16}) {
    Tensor ref = g.raw("table_alibi/H" + std::to_string(H));
    ASSERT_EQ(ref.numel(), H);
    for (int64_t h = 0; h < H; ++h)
      EXPECT_EQ(math::attn_alibi_slope(h, H), test::element(ref, h)) << "H=" << H << " h=" << h;
  }
  // Eq. 7 for H = 8: 1/2, 1/4, ..., 1/256.
  for (int64_t h = 0; h < 8; ++h) EXPECT_EQ(math::attn_alibi_slope(h, 8), std::ldexp(1.0, -int(h + 1)));
}

// attn_relative_bucket against HF T5's _relative_position_bucket (bidirectional=False) run by torch in
// float32, for the distances 0..600 (see attn_relative_bucket for the rare distances where the two
// can differ; none in these tables).
TEST(AttentionPositionBias, RelativeBucketsMatchTorch) {
  test::Golden g("attention_variants.safetensors");
  // (10, 160), (9, 128), (19, 288): distances whose bucket in float32 differs from the one in float64.
  const std::pair<int64_t, int64_t> tables[] = {{32, 128}, {8, 16},   {6, 10},  {16, 64}, {10, 20},
                                                {7, 30},   {64, 256}, {10, 160}, {9, 128}, {19, 288}};
  for (auto [nb, md] : tables) {
    Tensor ref = g.raw("table_bucket/B" + std::to_string(nb) + "_D" + std::to_string(md));
    ASSERT_EQ(ref.numel(), 601);
    int64_t mismatches = 0;
    for (int64_t n = 0; n <= 600; ++n) {
      const int64_t b = math::attn_relative_bucket(n, nb, md);
      if (b != int64_t(test::element(ref, n))) {
        ++mismatches;
        ADD_FAILURE() << "B=" << nb << " D=" << md << " n=" << n << ": " << b << " vs torch " << test::element(ref, n);
      }
    }
    EXPECT_EQ(mismatches, 0);
    EXPECT_EQ(math::attn_relative_bucket(600, nb, md), nb - 1);  // beyond max_distance: the last bucket
  }
}

// ---- finite differences -------------------------------------------------------------------------------

struct FdCase {
  const char* name;
  ops::AttentionSpec spec;
  bool sink = false;        // with a learned sink logit (the test owns the tensor: the spec holds views)
  int64_t buckets = 0;      // pos_bias relative: a relative_bias table [H, buckets]
};

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
  v.push_back({"sink_softmax", make_spec(AttnSim::exp, AttnNorm::sum), true});
  s = make_spec(AttnSim::sigmoid, AttnNorm::sum, AttnMask::sliding_window);
  s.window = 4;
  v.push_back({"sink_sigmoid_sw4", s, true});
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
  // Lead keys (KV biases) with each mask, with a sink logit.
  s = make_spec(AttnSim::exp, AttnNorm::sum);
  s.lead_keys = 1;
  v.push_back({"lead1_causal", s});
  s = make_spec(AttnSim::exp, AttnNorm::sum, AttnMask::sliding_window);
  s.window = 3, s.lead_keys = 2;
  v.push_back({"lead2_sliding_w3", s});
  s = make_spec(AttnSim::exp, AttnNorm::sum, AttnMask::prefix_lm);
  s.prefix = 4, s.lead_keys = 2;
  v.push_back({"lead2_prefix_p4", s});
  s = make_spec(AttnSim::exp, AttnNorm::sum);
  s.lead_keys = 1;
  v.push_back({"lead1_sink", s, true});
  // Position bias: ALiBi (with lead keys), T5 relative bias (also d/d relative_bias).
  s = make_spec(AttnSim::exp, AttnNorm::sum);
  s.pos_bias = AttnPosBias::alibi;
  v.push_back({"alibi", s});
  s.lead_keys = 1, s.mask = AttnMask::sliding_window, s.window = 5;
  v.push_back({"alibi_lead1_sw5", s});
  s = make_spec(AttnSim::exp, AttnNorm::sum);
  s.pos_bias = AttnPosBias::relative, s.relative_max_distance = 7;
  v.push_back({"relative_b6_d7", s, false, 6});
  s.lead_keys = 2, s.mask = AttnMask::prefix_lm, s.prefix = 3;
  v.push_back({"relative_lead2_prefix", s, true, 6});
  // Softpick: plain, with lead keys, a sink logit, alpha and a window, a position bias.
  v.push_back({"softpick", make_spec(AttnSim::softpick, AttnNorm::sum)});
  s = make_spec(AttnSim::softpick, AttnNorm::sum);
  s.lead_keys = 1;
  v.push_back({"softpick_lead1_sink", s, true});
  s = make_spec(AttnSim::softpick, AttnNorm::sum, AttnMask::sliding_window);
  s.window = 4, s.norm_alpha = 0.5;
  v.push_back({"softpick_alpha_sw4", s});
  s = make_spec(AttnSim::softpick, AttnNorm::sum);
  s.pos_bias = AttnPosBias::alibi;
  s.scale = 0.5;  // with 1/sqrt(dh), one biased score lies 1.4e-5 from softpick's kink at s = 0: within
                  // the reach of the central differences (the smallest |s| is 6.7e-3 at scale 0.5)
  v.push_back({"softpick_alibi", s});
  return v;
}

void PrintTo(const FdCase& c, std::ostream* os) { *os << c.name << " p=" << c.spec.norm_p; }

class AttentionVariantsFiniteDifference : public ::testing::TestWithParam<FdCase> {};

TEST_P(AttentionVariantsFiniteDifference, BackwardMatchesCentralDifferences) {
  ops::AttentionSpec spec = GetParam().spec;
  const int64_t B = 2, T = 9, H = 4, Hkv = 2, dh = 5, S = spec.lead_keys + T;
  const bool sink = GetParam().sink;
  Owned sink_logit(DType::f64, {H}), d_sink(DType::f64, {H});
  if (sink) {
    test::randn(sink_logit, 15);
    spec.sink_logit = sink_logit.t;
    spec.d_sink_logit = d_sink.t;
  }
  const int64_t buckets = GetParam().buckets;
  Owned relative_bias(DType::f64, {H, std::max<int64_t>(buckets, 1)}), d_relative_bias(DType::f64, {H, std::max<int64_t>(buckets, 1)});
  if (buckets > 0) {
    test::randn(relative_bias, 16);
    spec.relative_bias = relative_bias.t;
    spec.d_relative_bias = d_relative_bias.t;
  }
  Owned q(DType::f64, {B, T, H, dh}), k(DType::f64, {B, S, Hkv, dh}), v(DType::f64, {B, S, Hkv, dh});
  Owned w(DType::f64, {B, T, H, dh}), out(DType::f64, {B, T, H, dh}), stats(DType::f64, {B, H, T});
  Owned dq(DType::f64, {B, T, H, dh}), dk(DType::f64, {B, S, Hkv, dh}), dv(DType::f64, {B, S, Hkv, dh});
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
    std::printf("[ fd       ] %-20s d/dsink %.2e\n", GetParam().name, es);
  }
  if (buckets > 0) {
    const double er = test::finite_difference_error(relative_bias, d_relative_bias, loss, h);
    EXPECT_LT(er, 1e-6) << "d/drelative_bias";
    std::printf("[ fd       ] %-20s d/drelative_bias %.2e\n", GetParam().name, er);
  }
  EXPECT_LT(eq, 1e-6) << "d/dq";
  EXPECT_LT(ek, 1e-6) << "d/dk";
  EXPECT_LT(ev, 1e-6) << "d/dv";
  std::printf("[ fd       ] %-20s p=%.3g  dq %.2e dk %.2e dv %.2e\n", GetParam().name, spec.norm_p, eq, ek, ev);
}

std::string fd_name(const ::testing::TestParamInfo<FdCase>& info) {
  return std::string(info.param.name) + "_" + std::to_string(info.index);
}

INSTANTIATE_TEST_SUITE_P(Variants, AttentionVariantsFiniteDifference, ::testing::ValuesIn(fd_cases()), fd_name);

// ---- masks ---------------------------------------------------------------------------------------------

// Three query blocks; the lead keys (columns 0..L-1) are seen by every row, the positional keys
// j' = j - L as the mask says (a window of 70 makes the later blocks skip keys between the lead keys
// and the window).
TEST(AttentionVariantsMasks, ProbsAreNonZeroExactlyWhereVisible) {
  const int64_t B = 1, T = 140, H = 2, dh = 8;
  for (int64_t L : {0, 2}) {
    const int64_t S = L + T;
    Owned q(DType::f64, {B, T, H, dh}), k(DType::f64, {B, S, H, dh}), probs(DType::f64, {B, H, T, S});
    test::randn(q, 41), test::randn(k, 42);
    for (int which = 0; which < 2; ++which) {
      ops::AttentionSpec spec;
      spec.mask = which == 0 ? AttnMask::sliding_window : AttnMask::prefix_lm;
      spec.window = 70;
      spec.prefix = 100;
      spec.lead_keys = L;
      ops::fill(probs, -5.0);
      ops::attention_probs(probs, q, k, spec);
      for (int64_t h = 0; h < H; ++h)
        for (int64_t i = 0; i < T; ++i) {
          double sum = 0;
          for (int64_t j = 0; j < S; ++j) {
            const int64_t jp = j - L;
            const bool vis = jp < 0 || (which == 0 ? (jp <= i && jp > i - 70) : (jp <= i || jp < 100));
            ASSERT_EQ(math::attn_visible(math::attn_config(spec), i, j), vis) << which << " " << i << " " << j;
            const double p = test::element(probs, (h * T + i) * S + j);
            if (vis) {
              ASSERT_GT(p, 0.0) << which << " L=" << L << " " << i << " " << j;
            } else {
              ASSERT_EQ(p, 0.0) << which << " L=" << L << " " << i << " " << j;
            }
            sum += p;
          }
          ASSERT_NEAR(sum, 1.0, 1e-12);
        }
    }
  }
}

// The key ranges (attn_key_begin/end, the forward's loops) and the query ranges (attn_query_begin/end,
// the key-major backward of the CUDA kernels) hold every visible pair of every mask, with and without
// lead keys, for windows / prefixes shorter than, equal to and longer than T; and the query range is
// exact for the positional keys (no query outside it sees the key, the first and last inside do).
TEST(AttentionVariantsMasks, KeyAndQueryRangesHoldEveryVisiblePair) {
  for (int64_t T : {1, 7, 20})
    for (int64_t L : {0, 3})
      for (AttnMask mask : {AttnMask::causal, AttnMask::sliding_window, AttnMask::prefix_lm})
        for (int64_t w : {1, 4, 7, 30}) {
          math::AttnConfig c;
          c.mask = mask;
          c.window = w;
          c.prefix = w - 1;
          c.lead_keys = L;
          const int64_t S = L + T;
          for (int64_t j = 0; j < S; ++j) {
            const int64_t qb = math::attn_query_begin(c, j), qe = math::attn_query_end(c, j, T);
            int64_t first = T, last = -1;
            for (int64_t i = 0; i < T; ++i) {
              const bool vis = math::attn_visible(c, i, j);
              const bool in_keys = j < L || (j >= math::attn_key_begin(c, i, S) && j < math::attn_key_end(c, i, S));
              ASSERT_TRUE(!vis || in_keys) << int(mask) << " T=" << T << " L=" << L << " w=" << w << " i=" << i
                                           << " j=" << j;
              ASSERT_TRUE(!vis || (i >= qb && i < qe)) << int(mask) << " T=" << T << " L=" << L << " w=" << w
                                                       << " i=" << i << " j=" << j;
              if (vis) first = std::min(first, i), last = std::max(last, i);
            }
            if (last >= 0) {
              EXPECT_EQ(qb, first) << int(mask) << " T=" << T << " L=" << L << " w=" << w << " j=" << j;
              EXPECT_EQ(qe, last + 1) << int(mask) << " T=" << T << " L=" << L << " w=" << w << " j=" << j;
            }
          }
        }
}

// Softpick rows whose scores are all <= 0 attend to nothing: P = 0, out = 0, zero gradients, and all
// is finite in f32 and f64, also for scores so negative that e^{-max s} overflows f32 (the shift is
// clamped at 0) or so large that e^s does (the shift is the row max).
TEST(AttentionVariantsSoftpick, RowsWithoutPositiveScores) {
  for (DType dt : test::kDtypes) {
    const int64_t B = 1, T = 5, H = 1, dh = 2;
    Owned q(dt, {B, T, H, dh}), k(dt, {B, T, H, dh}), v(dt, {B, T, H, dh}), out(dt, {B, T, H, dh}),
        st(dt, {B, H, T}), probs(dt, {B, H, T, T}), dq(dt, {B, T, H, dh}), dk(dt, {B, T, H, dh}), dv(dt, {B, T, H, dh});
    test::randn(v, 51);
    // Keys along +e0 (k0 = 0.5 .. 1.5), queries along -e0: scores -100 .. -300 (query 2: all 0); query
    // 4 along +e0: scores 75 .. 225.
    for (int64_t j = 0; j < T; ++j) {
      ops::fill(k.t.slice(1, j, 1).slice(3, 0, 1), 0.5 + 0.25 * double(j));
      ops::fill(q.t.slice(1, j, 1).slice(3, 0, 1), j == 4 ? 150.0 : (j == 2 ? 0.0 : -200.0));
    }
    ops::AttentionSpec spec;
    spec.sim = AttnSim::softpick;
    spec.scale = 1.0;
    ops::attention_forward(out, st, q, k, v, spec);
    ops::attention_probs(probs, q, k, spec);
    ops::attention_backward(dq, dk, dv, v, q, k, v, out, st, spec);
    for (int64_t i = 0; i < T; ++i) {
      double row = 0.0;
      for (int64_t j = 0; j < T; ++j) row += test::element(probs, i * T + j);
      if (i < 4) {
        EXPECT_EQ(row, 0.0) << "row " << i;
        EXPECT_EQ(test::element(out, i * dh), 0.0) << "row " << i;
        EXPECT_EQ(test::element(dq, i * dh), 0.0) << "row " << i;
      } else {
        EXPECT_NEAR(row, 1.0, 1e-6) << "all scores of row 4 are large and positive";
      }
    }
    for (const Tensor* t : {&out.t, &st.t, &probs.t, &dq.t, &dk.t, &dv.t})
      for (int64_t e = 0; e < t->numel(); ++e) ASSERT_TRUE(std::isfinite(test::element(*t, e)));
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
  // Softpick needs norm sum.
  for (AttnNorm n : {AttnNorm::one, AttnNorm::max_abs_sum_one, AttnNorm::p_norm}) {
    s = {};
    s.sim = AttnSim::softpick;
    s.norm = n;
    expect_invalid(s, "softpick without norm sum");
  }
  // Lead keys: >= 0, and S - lead_keys positional keys for T queries.
  s = {};
  s.lead_keys = -1;
  expect_invalid(s, "negative lead_keys");
  s.lead_keys = 1;  // k has 6 keys for 6 queries: one too few
  expect_invalid(s, "S != lead_keys + T");
  s.lead_keys = 7;
  expect_invalid(s, "S < lead_keys");
  // Relative position bias: the table, its shape and dtype, the parameters.
  Owned rb(dt, {2, 8}), rb_h3(dt, {3, 8}), rb_f32(DType::f32, {2, 8}), rb_1(dt, {2, 1}), drb_bad(dt, {2, 7});
  s = {};
  s.pos_bias = AttnPosBias::relative;
  expect_invalid(s, "relative without relative_bias");
  s.relative_bias = rb_h3.t;
  expect_invalid(s, "relative_bias not [H, buckets]");
  s.relative_bias = rb_f32.t;
  expect_invalid(s, "relative_bias dtype");
  s.relative_bias = rb_1.t;
  expect_invalid(s, "one bucket");
  s.relative_bias = rb.t;
  s.relative_max_distance = 4;  // <= num_buckets / 2
  expect_invalid(s, "relative_max_distance <= num_buckets/2");
  s.relative_max_distance = 128;
  s.d_relative_bias = drb_bad.t;
  EXPECT_THROW(ops::attention_backward(dq, dk, dv, out, q, k, v, out, st, s), Error) << "d_relative_bias shape";
  s = {};
  s.relative_bias = rb.t;  // a table without pos_bias relative
  expect_invalid(s, "relative_bias with pos_bias none");
  s = {};
  s.pos_bias = AttnPosBias::alibi;
  s.relative_max_distance = 64;
  expect_invalid(s, "relative_max_distance with alibi");
  s = {};
  s.d_relative_bias = rb.t;
  EXPECT_THROW(ops::attention_backward(dq, dk, dv, out, q, k, v, out, st, s), Error) << "d_relative_bias alone";
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
  s = {};
  s.sim = AttnSim::softpick;
  s.pos_bias = AttnPosBias::relative;
  s.relative_bias = rb.t;
  s.relative_max_distance = 5;
  EXPECT_NO_THROW(ops::attention_forward(out, st, q, k, v, s));
  Owned k7(dt, {1, 7, 2, 4}), v7(dt, {1, 7, 2, 4});
  s = {};
  s.lead_keys = 1;
  EXPECT_NO_THROW(ops::attention_forward(out, st, q, k7, v7, s));
}

}  // namespace
}  // namespace sinklab
