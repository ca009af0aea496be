// CUDA attention_forward / attention_backward / attention_probs against the CPU backend (label "gpu";
// skips without a usable CUDA device). Every variant family of AttentionSpec: softmax with the three
// masks, sigmoid / elu+1 / identity under sum, one, max_abs_sum_one, p-norms, norm_alpha, an explicit
// scale, the sink logit (softmax and sigmoid), lead keys (with the causal and sliding masks), ALiBi, T5
// relative bias, softpick (plain and sliding). Shapes: T = 1, T = 130 (two key chunks of the kernel's
// 128, the second partial), H = 1, grouped-query attention (H = 6 over Hkv = 2), head dims 5 and 129
// (more than one feature per thread), B = 2, q/k/v as head slices of a fused QKV buffer (strided rows).
//
// Tolerances: out, stats, probs within 2e-5 (rel_error: max abs error over max |reference|); d_q,
// d_k, d_v, d_sink_logit, d_relative_bias within 1e-4 of max(max |reference|, 1) (grad_error: where a
// gradient vanishes analytically, e.g. d_q and d_k of a one-key window, both sides hold rounding noise
// whose max-relative difference is O(1)). Both sides compute in f32 with sums in different
// orders (CPU: BLAS gemms and 16-lane f32 row sums; GPU: sequential fmaf and double row sums), so the
// differences are rounding only: a wrong mask, bias or formula shows as O(1). These tolerances are
// expectations from the f32 arithmetic, not yet measured on a GPU. Also checked: attention_probs gives
// the forward's probs bit for bit; a second backward gives the same bits (no atomics); every output
// element is written (outputs are NaN-poisoned before the call).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "gpu/gpu_test_util.hpp"

namespace sinklab {
namespace {

using gpu_test::Dev;
using gpu_test::poison;
using gpu_test::random_host;
using gpu_test::same_bits;
using gpu_test::to_device;
using gpu_test::to_host;
using ops::AttnMask;
using ops::AttnNorm;
using ops::AttnPosBias;
using ops::AttnSim;
using test::Owned;

constexpr double kTolForward = 2e-5;
constexpr double kTolBackward = 1e-4;

// max |a - ref| / max(max |ref|, floor), and infinity where a and ref disagree on NaN (an element the
// kernel left poisoned). (test::rel_error is this with floor 0, except that its std::max skips NaNs.)
double error_vs(const Tensor& a, const Tensor& ref, double floor) {
  EXPECT_EQ(a.numel(), ref.numel());
  double max_err = 0.0, max_ref = floor;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double x = test::element(a, i), r = test::element(ref, i);
    if (std::isnan(x) != std::isnan(r)) return INFINITY;
    if (std::isnan(r)) continue;
    max_err = std::max(max_err, std::abs(x - r));
    max_ref = std::max(max_ref, std::abs(r));
  }
  return max_ref > 0 ? max_err / max_ref : max_err;
}
double rel_error(const Tensor& a, const Tensor& ref) { return error_vs(a, ref, 0.0); }
double grad_error(const Tensor& a, const Tensor& ref) { return error_vs(a, ref, 1.0); }

struct Variant {
  std::string name;
  ops::AttentionSpec spec;  // without the sink / relative-bias tensors (made per shape)
  bool sink = false;
  int64_t num_buckets = 0;  // relative bias table columns
};

struct Shape {
  std::string name;
  int64_t B, T, H, Hkv, dh;
  bool fused;  // q, k, v as head slices of one [B, S, H + 2 Hkv, dh] buffer (needs lead_keys = 0)
};

ops::AttentionSpec make_spec(AttnSim sim, AttnNorm norm, AttnMask mask = AttnMask::causal) {
  ops::AttentionSpec s;
  s.sim = sim;
  s.norm = norm;
  s.mask = mask;
  return s;
}

std::vector<Variant> variants() {
  std::vector<Variant> v;
  v.push_back({"softmax", make_spec(AttnSim::exp, AttnNorm::sum)});
  ops::AttentionSpec s = make_spec(AttnSim::exp, AttnNorm::sum, AttnMask::sliding_window);
  s.window = 5;
  v.push_back({"sliding_w5", s});
  s.window = 1;
  v.push_back({"sliding_w1", s});
  s = make_spec(AttnSim::exp, AttnNorm::sum, AttnMask::prefix_lm);
  s.prefix = 4;
  v.push_back({"prefix_p4", s});
  s = make_spec(AttnSim::sigmoid, AttnNorm::one);
  s.sigmoid_bias = -2.0;
  v.push_back({"sigmoid_one", s});
  v.push_back({"sigmoid_sum", make_spec(AttnSim::sigmoid, AttnNorm::sum)});
  v.push_back({"elu_sum", make_spec(AttnSim::elu_plus_one, AttnNorm::sum)});
  v.push_back({"elu_one", make_spec(AttnSim::elu_plus_one, AttnNorm::one)});
  v.push_back({"elu_maxabs", make_spec(AttnSim::elu_plus_one, AttnNorm::max_abs_sum_one)});
  v.push_back({"identity_one", make_spec(AttnSim::identity, AttnNorm::one)});
  v.push_back({"identity_maxabs", make_spec(AttnSim::identity, AttnNorm::max_abs_sum_one)});
  s = make_spec(AttnSim::exp, AttnNorm::sum);
  s.norm_alpha = 0.5;
  s.scale = 0.3;
  v.push_back({"alpha0.5_scale0.3", s});
  s = make_spec(AttnSim::exp, AttnNorm::p_norm);
  s.norm_p = 2.0;
  v.push_back({"softmax_p2", s});
  s.norm_p = 0.5;
  v.push_back({"softmax_p0.5", s});
  s = make_spec(AttnSim::sigmoid, AttnNorm::p_norm);
  s.norm_p = 3.0;
  v.push_back({"sigmoid_p3", s});
  v.push_back({"sink_softmax", make_spec(AttnSim::exp, AttnNorm::sum), true});
  v.push_back({"sink_sigmoid_sum", make_spec(AttnSim::sigmoid, AttnNorm::sum), true});
  s = make_spec(AttnSim::exp, AttnNorm::sum);
  s.lead_keys = 2;
  v.push_back({"lead2_causal", s});
  s = make_spec(AttnSim::exp, AttnNorm::sum, AttnMask::sliding_window);
  s.lead_keys = 1;
  s.window = 5;
  v.push_back({"lead1_sliding_w5_sink", s, true});
  s = make_spec(AttnSim::exp, AttnNorm::sum);
  s.pos_bias = AttnPosBias::alibi;
  v.push_back({"alibi", s});
  s = make_spec(AttnSim::exp, AttnNorm::sum, AttnMask::prefix_lm);
  s.prefix = 3;
  s.pos_bias = AttnPosBias::relative;
  s.relative_max_distance = 20;
  v.push_back({"relative_prefix_p3", s, false, 8});
  s = make_spec(AttnSim::exp, AttnNorm::sum);
  s.pos_bias = AttnPosBias::relative;
  s.relative_max_distance = 20;
  s.lead_keys = 1;
  v.push_back({"relative_lead1", s, false, 8});
  v.push_back({"softpick", make_spec(AttnSim::softpick, AttnNorm::sum)});
  s = make_spec(AttnSim::softpick, AttnNorm::sum, AttnMask::sliding_window);
  s.window = 3;
  v.push_back({"softpick_sliding_w3_sink", s, true});
  return v;
}

std::vector<Shape> shapes() {
  return {{"t1", 1, 1, 2, 2, 8, false},       {"t130_h1", 1, 130, 1, 1, 16, false},
          {"gqa", 2, 37, 6, 2, 5, false},     {"dh129", 1, 9, 2, 1, 129, false},
          {"fused", 2, 20, 4, 2, 12, true}};
}

// sink_value: every head's sink logit, where not NaN (else drawn at random).
void check_case(const Variant& var, const Shape& sh, uint64_t stream, double sink_value = std::nan("")) {
  SCOPED_TRACE(var.name + " / " + sh.name);
  const int64_t L = var.spec.lead_keys, S = L + sh.T;
  const bool fused = sh.fused && L == 0;
  ops::AttentionSpec spec = var.spec;
  ops::AttentionSpec gspec = var.spec;
  gspec.kernel = ops::AttnKernel::reference;  // these kernels (the fast ones: test_cuda_attention_fast)

  // Inputs (scores of order 1-3, so that every sim and the masks matter).
  Owned qkv = random_host(DType::f32, {sh.B, S, sh.H + 2 * sh.Hkv, sh.dh}, stream);
  Owned q_own = random_host(DType::f32, {sh.B, sh.T, sh.H, sh.dh}, stream + 1000);
  Owned k_own = random_host(DType::f32, {sh.B, S, sh.Hkv, sh.dh}, stream + 2000);
  Owned v_own = random_host(DType::f32, {sh.B, S, sh.Hkv, sh.dh}, stream + 3000);
  Dev g_qkv = to_device(qkv.t), g_q = to_device(q_own.t), g_k = to_device(k_own.t), g_v = to_device(v_own.t);
  Tensor q = fused ? qkv.t.slice(2, 0, sh.H) : q_own.t;
  Tensor k = fused ? qkv.t.slice(2, sh.H, sh.Hkv) : k_own.t;
  Tensor v = fused ? qkv.t.slice(2, sh.H + sh.Hkv, sh.Hkv) : v_own.t;
  Tensor gq = fused ? g_qkv.t.slice(2, 0, sh.H) : g_q.t;
  Tensor gk = fused ? g_qkv.t.slice(2, sh.H, sh.Hkv) : g_k.t;
  Tensor gv = fused ? g_qkv.t.slice(2, sh.H + sh.Hkv, sh.Hkv) : g_v.t;
  Owned sink = random_host(DType::f32, {sh.H}, stream + 4000);
  if (!std::isnan(sink_value)) ops::fill(sink.t, sink_value);
  Owned rel = random_host(DType::f32, {sh.H, std::max<int64_t>(var.num_buckets, 1)}, stream + 5000);
  Dev g_sink = to_device(sink.t), g_rel = to_device(rel.t);
  Owned d_sink(DType::f32, {sh.H}), d_rel(DType::f32, {sh.H, std::max<int64_t>(var.num_buckets, 1)});
  Dev g_d_sink(DType::f32, {sh.H}), g_d_rel(DType::f32, {sh.H, std::max<int64_t>(var.num_buckets, 1)});
  if (var.sink) {
    spec.sink_logit = sink.t;
    spec.d_sink_logit = d_sink.t;
    gspec.sink_logit = g_sink.t;
    gspec.d_sink_logit = g_d_sink.t;
  }
  if (var.num_buckets > 0) {
    spec.relative_bias = rel.t;
    spec.d_relative_bias = d_rel.t;
    gspec.relative_bias = g_rel.t;
    gspec.d_relative_bias = g_d_rel.t;
  }

  // Forward.
  Owned out(DType::f32, {sh.B, sh.T, sh.H, sh.dh}), stats(DType::f32, {sh.B, sh.H, sh.T}),
      probs(DType::f32, {sh.B, sh.H, sh.T, S});
  ops::attention_forward(out.t, stats.t, q, k, v, spec, probs.t);
  Dev g_out(DType::f32, {sh.B, sh.T, sh.H, sh.dh}), g_stats(DType::f32, {sh.B, sh.H, sh.T}),
      g_probs(DType::f32, {sh.B, sh.H, sh.T, S});
  poison(g_out.t);
  poison(g_stats.t);
  poison(g_probs.t);
  ops::attention_forward(g_out.t, g_stats.t, gq, gk, gv, gspec, g_probs.t);
  Owned g_probs_h = to_host(g_probs.t);
  EXPECT_LE(rel_error(to_host(g_out.t).t, out.t), kTolForward) << "out";
  EXPECT_LE(rel_error(to_host(g_stats.t).t, stats.t), kTolForward) << "stats";
  EXPECT_LE(rel_error(g_probs_h.t, probs.t), kTolForward) << "probs";
  Dev g_probs2(DType::f32, {sh.B, sh.H, sh.T, S});
  poison(g_probs2.t);
  ops::attention_probs(g_probs2.t, gq, gk, gspec);
  EXPECT_TRUE(same_bits(to_host(g_probs2.t).t, g_probs_h.t)) << "attention_probs vs the forward's probs";

  // Backward (from the device's own forward results, which the CPU's also uses: the CPU's).
  Owned d_out = random_host(DType::f32, {sh.B, sh.T, sh.H, sh.dh}, stream + 6000);
  Dev g_d_out = to_device(d_out.t);
  Owned dq(DType::f32, {sh.B, sh.T, sh.H, sh.dh}), dk(DType::f32, {sh.B, S, sh.Hkv, sh.dh}),
      dv(DType::f32, {sh.B, S, sh.Hkv, sh.dh});
  ops::attention_backward(dq.t, dk.t, dv.t, d_out.t, q, k, v, out.t, stats.t, spec);
  Dev g_out_ref = to_device(out.t), g_stats_ref = to_device(stats.t);
  auto run_backward = [&](Dev& gdq, Dev& gdk, Dev& gdv) {
    poison(gdq.t);
    poison(gdk.t);
    poison(gdv.t);
    if (var.sink) poison(g_d_sink.t);
    if (var.num_buckets > 0) poison(g_d_rel.t);
    ops::attention_backward(gdq.t, gdk.t, gdv.t, g_d_out.t, gq, gk, gv, g_out_ref.t, g_stats_ref.t, gspec);
  };
  Dev gdq(DType::f32, {sh.B, sh.T, sh.H, sh.dh}), gdk(DType::f32, {sh.B, S, sh.Hkv, sh.dh}),
      gdv(DType::f32, {sh.B, S, sh.Hkv, sh.dh});
  run_backward(gdq, gdk, gdv);
  Owned gdq_h = to_host(gdq.t), gdk_h = to_host(gdk.t), gdv_h = to_host(gdv.t);
  EXPECT_LE(grad_error(gdq_h.t, dq.t), kTolBackward) << "d_q";
  EXPECT_LE(grad_error(gdk_h.t, dk.t), kTolBackward) << "d_k";
  EXPECT_LE(grad_error(gdv_h.t, dv.t), kTolBackward) << "d_v";
  Owned g_d_sink_h, g_d_rel_h;
  if (var.sink) {
    g_d_sink_h = to_host(g_d_sink.t);
    EXPECT_LE(grad_error(g_d_sink_h.t, d_sink.t), kTolBackward) << "d_sink_logit";
  }
  if (var.num_buckets > 0) {
    g_d_rel_h = to_host(g_d_rel.t);
    EXPECT_LE(grad_error(g_d_rel_h.t, d_rel.t), kTolBackward) << "d_relative_bias";
  }
  // Deterministic: a second backward, the same bits.
  Dev gdq2(DType::f32, {sh.B, sh.T, sh.H, sh.dh}), gdk2(DType::f32, {sh.B, S, sh.Hkv, sh.dh}),
      gdv2(DType::f32, {sh.B, S, sh.Hkv, sh.dh});
  run_backward(gdq2, gdk2, gdv2);
  EXPECT_TRUE(same_bits(to_host(gdq2.t).t, gdq_h.t)) << "d_q, second run";
  EXPECT_TRUE(same_bits(to_host(gdk2.t).t, gdk_h.t)) << "d_k, second run";
  EXPECT_TRUE(same_bits(to_host(gdv2.t).t, gdv_h.t)) << "d_v, second run";
  if (var.sink) {
    EXPECT_TRUE(same_bits(to_host(g_d_sink.t).t, g_d_sink_h.t)) << "d_sink_logit, second run";
  }
  if (var.num_buckets > 0) {
    EXPECT_TRUE(same_bits(to_host(g_d_rel.t).t, g_d_rel_h.t)) << "d_relative_bias, second run";
  }
}

TEST(CudaAttention, EveryVariantMatchesCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t stream = 100;
  for (const Variant& var : variants())
    for (const Shape& sh : shapes()) check_case(var, sh, stream += 10);
}

// The sink logit's edges (flash-attention #1797 / #2102 / PR #2752: NaN and Inf where the sink was left
// out of the row maximum): every head's sink logit at +100 and -100 against scores of order 1, T = 1 and
// grouped-query heads, softmax and sigmoid with sum, forward and backward against the CPU (which
// test_ops_attention_sink_edges checks against float64).
TEST(CudaAttention, SinkLogitEdgesMatchCpu) {
  SKIP_WITHOUT_CUDA();
  uint64_t stream = 5000;
  for (const Variant& var : variants()) {
    if (!var.sink || var.spec.lead_keys > 0 || var.spec.mask != AttnMask::causal) continue;
    for (const Shape& sh : shapes()) {
      if (sh.name != "t1" && sh.name != "gqa") continue;
      for (double edge : {100.0, -100.0}) {
        SCOPED_TRACE(strfmt("sink logit %+g", edge));
        check_case(var, sh, stream += 10, edge);
      }
    }
  }
}

// Backward with only some gradients asked for (d_q only; d_k, d_v only): the others are not written,
// the asked ones are those of the full call.
TEST(CudaAttention, PartialGradients) {
  SKIP_WITHOUT_CUDA();
  const int64_t B = 1, T = 11, H = 2, dh = 4;
  ops::AttentionSpec spec;
  Owned q = random_host(DType::f32, {B, T, H, dh}, 1), k = random_host(DType::f32, {B, T, H, dh}, 2),
        v = random_host(DType::f32, {B, T, H, dh}, 3), d_out = random_host(DType::f32, {B, T, H, dh}, 4);
  Dev gq = to_device(q.t), gk = to_device(k.t), gv = to_device(v.t), gd_out = to_device(d_out.t);
  Dev out(DType::f32, {B, T, H, dh}), stats(DType::f32, {B, H, T});
  ops::attention_forward(out.t, stats.t, gq.t, gk.t, gv.t, spec);
  Dev dq(DType::f32, {B, T, H, dh}), dk(DType::f32, {B, T, H, dh}), dv(DType::f32, {B, T, H, dh});
  ops::attention_backward(dq.t, dk.t, dv.t, gd_out.t, gq.t, gk.t, gv.t, out.t, stats.t, spec);
  Dev dq1(DType::f32, {B, T, H, dh}), dk1(DType::f32, {B, T, H, dh}), dv1(DType::f32, {B, T, H, dh});
  poison(dk1.t);
  poison(dv1.t);
  ops::attention_backward(dq1.t, Tensor{}, Tensor{}, gd_out.t, gq.t, gk.t, gv.t, out.t, stats.t, spec);
  poison(dq1.t);
  ops::attention_backward(Tensor{}, dk1.t, dv1.t, gd_out.t, gq.t, gk.t, gv.t, out.t, stats.t, spec);
  EXPECT_TRUE(same_bits(to_host(dk1.t).t, to_host(dk.t).t));
  EXPECT_TRUE(same_bits(to_host(dv1.t).t, to_host(dv.t).t));
  Owned dq1_h = to_host(dq1.t);
  for (int64_t i = 0; i < dq1_h.t.numel(); ++i) EXPECT_TRUE(std::isnan(dq1_h.data<float>()[i])) << "d_q written";
}

// f64 and bf16 tensors are refused with the op's name (the CUDA attention computes in f32 only).
TEST(CudaAttention, RefusesOtherDtypes) {
  SKIP_WITHOUT_CUDA();
  Dev q(DType::f64, {1, 3, 1, 4}), k(DType::f64, {1, 3, 1, 4}), v(DType::f64, {1, 3, 1, 4}),
      out(DType::f64, {1, 3, 1, 4});
  try {
    ops::attention_forward(out.t, Tensor{}, q.t, k.t, v.t, ops::AttentionSpec{});
    FAIL() << "no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("attention_forward"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("f32"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace sinklab
