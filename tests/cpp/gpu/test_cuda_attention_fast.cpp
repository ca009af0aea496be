// The fast CUDA attention kernels against the CPU reference (label "gpu"; skips without a usable CUDA
// device): cuDNN's fused SDPA (--attn-kernel cudnn, attention_cudnn.cpp) on every spec the dispatch
// sends it (softmax; causal, sliding windows of 5 and 1; ALiBi with H = 4, 8 and 6; the sink logit
// with and without a window; an explicit scale; grouped-query heads), forward (out, stats) and
// backward (d_q, d_k, d_v, d_sink_logit), odd shapes (T = 1, 2, 37, 70, 130; dh = 8, 40, 64, 128; H = 1; B = 2; q/k/v as
// head slices of one fused buffer); the flash kernel (--attn-kernel flash, attention_flash.cu) on every
// spec it claims (sigmoid with a -log n bias, elu+1, identity; norm one and sum with alpha 1 and 0.5;
// causal, sliding-window, prefix-LM masks; lead keys; T = 1, 37, 70, 130; dh 8, 16, 32, 40, 64, 128; H = 1; GQA);
// the GEMM path (--attn-kernel gemm, attention_gemm.cu) on the specs neither takes (p-norms, max_abs_sum_one,
// softpick, softmax with lead keys or a prefix, ALiBi and T5's relative bias with any sim, the sink logit
// with sigmoid and softpick, alpha != 1; T = 1, 20, 37, 70; dh 40, 64, 96, 128, 256; H = 1; GQA).
// Each kernel with f32 tensors and with bf16 ones (the --precision bf16 step's: q, k, v as head views of one
// fused bf16 projection buffer, d_q, d_k, d_v into one fused bf16 gradient buffer, outputs bf16, stats f32).
//
// The reference runs in float64 on the CPU, on the inputs rounded to bf16 (what the kernel multiplies),
// so the difference is the kernel's own bf16 rounding (P and the output rounded to bf16 before and after
// the P.V product, d_out and out to bf16 in the backward; the GEMM path's scores in bf16; bf16 outputs
// rounded once more) and f32 accumulation.
// Tolerances (stated, not yet measured on a GPU): out 1e-2 and d_q, d_k, d_v, d_sink_logit, d_relative_bias
// 2e-2 of max(max |reference|, 1) (bf16 has 8 significant bits, 3.9e-3 relative, and a few roundings
// stack); stats 1e-3 relative to max |stats| (f32 row sums of f32 scores: only the inputs' rounding, which
// the reference shares), 5e-3 on the GEMM path (its scores are rounded to bf16 before the row sum: 2^-9 of
// each), and the GEMM path's gradients 3e-2 (its bf16 scores enter dS through the sign-sensitive normalisers:
// identity with max_abs_sum_one, whose row sum cancels, came out at 2.6e-2 under the emulation). A wrong mask,
// slope, sign or layout shows as O(1). Also: every output element is written
// (NaN-poisoned before), and the deterministic backward gives the same bits twice.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "backend/attention_dispatch.hpp"
#include "backend/backend.hpp"
#include "core/error.hpp"
#include "gpu/gpu_test_util.hpp"
#include "model/transformer.hpp"

namespace sinklab {
namespace {

using gpu_test::bf16_rounded;
using gpu_test::Dev;
using gpu_test::poison;
using gpu_test::random_host;
using gpu_test::same_bits;
using gpu_test::to_device;
using gpu_test::to_host;
using ops::AttnKernel;
using ops::AttnMask;
using ops::AttnPosBias;
using test::Owned;

constexpr double kTolOut = 1e-2, kTolStats = 1e-3, kTolStatsGemm = 5e-3, kTolGrad = 2e-2, kTolGradGemm = 3e-2;

// max |a - ref| / max(max |ref|, floor); infinite where exactly one side is NaN (an unwritten element).
double error_vs(const Tensor& a, const Tensor& ref, double floor) {
  EXPECT_EQ(a.numel(), ref.numel());
  double max_err = 0.0, max_ref = floor;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double x = test::element(a, i), r = test::element(ref, i);
    if (std::isnan(x) || std::isnan(r)) return INFINITY;
    max_err = std::max(max_err, std::abs(x - r));
    max_ref = std::max(max_ref, std::abs(r));
  }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

struct Case {
  std::string name;
  int64_t B, T, H, Hkv, dh;
  AttnMask mask = AttnMask::causal;
  int64_t window = 0;
  bool alibi = false, sink = false, fused = false;
  double scale = 0.0;
  // the flash kernel's axes
  AttnKernel kernel = AttnKernel::cudnn;
  AttnKernel expect = AttnKernel::auto_select;  // the kernel that runs it when not `kernel` (kernel auto)
  ops::AttnSim sim = ops::AttnSim::exp;
  ops::AttnNorm norm = ops::AttnNorm::sum;
  double alpha = 1.0, sigmoid_bias = 0.0;
  int64_t prefix = 0, lead = 0;
  double sink_value = 0.0;  // with sink_at_edge: every head's sink logit (else drawn at random)
  bool sink_at_edge = false;
  DType dtype = DType::f32;  // of q, k, v, out, d_out, d_q, d_k, d_v (stats f32)
  double p = 1.0;            // norm p_norm's p
  int64_t buckets = 0;       // > 0: T5's relative bias with this many buckets (max distance 20)
  int64_t pad = 0;           // the fused buffer's rows hold dh + pad values a head (unaligned views)
};

std::vector<Case> cudnn_cases() {
  std::vector<Case> c;
  c.push_back({"causal_t37_dh64", 2, 37, 4, 4, 64});
  c.push_back({"causal_t2_dh8", 1, 2, 2, 2, 8});
  c.push_back({"causal_t130_dh128_gqa", 1, 130, 4, 2, 128});
  c.push_back({"window5_t37", 2, 37, 2, 2, 64, AttnMask::sliding_window, 5});
  c.push_back({"window1_t37", 1, 37, 2, 1, 64, AttnMask::sliding_window, 1});
  c.push_back({"alibi_h4_t37", 2, 37, 4, 4, 64, AttnMask::causal, 0, true});
  c.push_back({"alibi_h8_gqa_window9", 1, 37, 8, 2, 32, AttnMask::sliding_window, 9, true});
  c.push_back({"alibi_h6_t37", 1, 37, 6, 3, 64, AttnMask::causal, 0, true});  // slopes of a non-power-of-two H
  c.push_back({"sink_t37", 2, 37, 4, 4, 64, AttnMask::causal, 0, false, true});
  c.push_back({"sink_window5_gqa", 1, 37, 4, 2, 64, AttnMask::sliding_window, 5, false, true});
  c.push_back({"scale0.3_fused", 2, 20, 4, 2, 16, AttnMask::causal, 0, false, false, true, 0.3});
  c.push_back({"causal_h1_t1_dh40", 1, 1, 1, 1, 40});
  c.push_back({"window3_h1_t70_dh40", 2, 70, 1, 1, 40, AttnMask::sliding_window, 3});
  // The sink logit's edges (flash-attention PR #2752's review: Inf at a sink of 100 left out of the row
  // maximum): +-100 against scores of order 1, T = 1 and T = 37.
  for (double edge : {100.0, -100.0})
    for (int64_t T : {1, 37}) {
      Case x{strfmt("sink%+g_t%lld", edge, (long long)T), 2, T, 4, 2, 64, AttnMask::causal, 0, false, true};
      x.sink_value = edge;
      x.sink_at_edge = true;
      if (T == 1) {  // cuDNN refuses a sink with one query: auto runs the reference kernel (the same check)
        x.kernel = AttnKernel::auto_select;
        x.expect = AttnKernel::reference;
      }
      c.push_back(x);
    }
  return c;
}

// Flash: sigmoid (with -log n bias), elu+1, identity; norm one and sum (alpha 1, 0.5); the three masks;
// lead keys; T = 1 (one query, one key), 37, 130; dh 8, 40 (padded to 48), 64, 128; GQA.
std::vector<Case> flash_cases() {
  std::vector<Case> c;
  auto add = [&](std::string name, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t dh, ops::AttnSim sim,
                 ops::AttnNorm norm) -> Case& {
    Case x{name, B, T, H, Hkv, dh};
    x.kernel = AttnKernel::flash;
    x.sim = sim;
    x.norm = norm;
    c.push_back(x);
    return c.back();
  };
  using ops::AttnNorm;
  using ops::AttnSim;
  add("sigmoid_one_logn_t130_dh64", 1, 130, 4, 4, 64, AttnSim::sigmoid, AttnNorm::one).sigmoid_bias = -std::log(130.0);
  add("sigmoid_one_t1", 1, 1, 2, 2, 8, AttnSim::sigmoid, AttnNorm::one);
  add("sigmoid_sum_t37_gqa_dh40", 2, 37, 6, 2, 40, AttnSim::sigmoid, AttnNorm::sum);
  add("sigmoid_sum_alpha0.5_dh128", 1, 37, 2, 2, 128, AttnSim::sigmoid, AttnNorm::sum).alpha = 0.5;
  add("elu_one_t37", 2, 37, 2, 1, 64, AttnSim::elu_plus_one, AttnNorm::one);
  add("elu_sum_t130", 1, 130, 2, 2, 32, AttnSim::elu_plus_one, AttnNorm::sum);
  add("identity_one_t37", 1, 37, 2, 2, 16, AttnSim::identity, AttnNorm::one);
  add("identity_sum_t37", 1, 37, 2, 2, 16, AttnSim::identity, AttnNorm::sum);
  Case& w = add("sigmoid_one_window5", 2, 37, 2, 2, 64, AttnSim::sigmoid, AttnNorm::one);
  w.mask = AttnMask::sliding_window;
  w.window = 5;
  Case& p = add("sigmoid_sum_prefix4", 1, 37, 2, 2, 64, AttnSim::sigmoid, AttnNorm::sum);
  p.mask = AttnMask::prefix_lm;
  p.prefix = 4;
  add("sigmoid_one_lead1", 2, 37, 2, 2, 64, AttnSim::sigmoid, AttnNorm::one).lead = 1;
  Case& lw = add("elu_sum_lead2_window5", 1, 70, 2, 2, 64, AttnSim::elu_plus_one, AttnNorm::sum);
  lw.lead = 2;
  lw.mask = AttnMask::sliding_window;
  lw.window = 5;
  add("sigmoid_one_fused_scale0.3", 2, 20, 4, 2, 16, AttnSim::sigmoid, AttnNorm::one).fused = true;
  c.back().scale = 0.3;
  Case& h1 = add("sigmoid_sum_h1_window3_t70_dh128", 2, 70, 1, 1, 128, AttnSim::sigmoid, AttnNorm::sum);
  h1.mask = AttnMask::sliding_window;
  h1.window = 3;
  return c;
}

// The same spec with bf16 tensors, q/k/v as head views of one fused bf16 buffer (the training step's).
Case bf16_of(Case c) {
  c.name = "bf16_" + c.name;
  c.dtype = DType::bf16;
  c.fused = c.lead == 0;  // lead keys come as their own k, v tensors (the model concatenates them)
  return c;
}

std::vector<Case> cudnn_bf16_cases() {
  std::vector<Case> c;
  for (const Case& x : cudnn_cases())
    if (x.name == "causal_t130_dh128_gqa" || x.name == "window5_t37" || x.name == "alibi_h6_t37" ||
        x.name == "sink_window5_gqa" || x.name == "scale0.3_fused" || x.name == "causal_h1_t1_dh40" ||
        x.name == "window3_h1_t70_dh40")
      c.push_back(bf16_of(x));
  c.push_back(bf16_of(cudnn_cases()[0]));  // heads of 64 + 4 values: bf16 views cuDNN cannot take in place
  c.back().name += "_unaligned";
  c.back().pad = 4;
  return c;
}

std::vector<Case> flash_bf16_cases() {
  std::vector<Case> c;
  for (const Case& x : flash_cases())
    if (x.name == "sigmoid_one_logn_t130_dh64" || x.name == "sigmoid_one_t1" || x.name == "sigmoid_sum_t37_gqa_dh40" ||
        x.name == "elu_sum_lead2_window5" || x.name == "sigmoid_one_fused_scale0.3" ||
        x.name == "sigmoid_sum_alpha0.5_dh128" || x.name == "sigmoid_sum_prefix4" ||
        x.name == "sigmoid_sum_h1_window3_t70_dh128" || x.name == "identity_one_t37")
      c.push_back(bf16_of(x));
  c.push_back(bf16_of(flash_cases()[2]));  // unaligned heads: the WMMA kernels with bf16 tensors
  c.back().name += "_unaligned";
  c.back().pad = 4;
  return c;
}

// The GEMM path (bf16 only): the specs cuDNN and the flash kernel refuse.
std::vector<Case> gemm_cases() {
  using ops::AttnNorm;
  using ops::AttnSim;
  std::vector<Case> c;
  auto add = [&](std::string name, int64_t B, int64_t T, int64_t H, int64_t Hkv, int64_t dh, AttnSim sim,
                 AttnNorm norm) -> Case& {
    Case x{name, B, T, H, Hkv, dh};
    x.kernel = AttnKernel::gemm;
    x.sim = sim;
    x.norm = norm;
    c.push_back(x);
    return c.back();
  };
  add("softmax_p2_t37_dh64", 2, 37, 4, 4, 64, AttnSim::exp, AttnNorm::p_norm).p = 2.0;
  add("sigmoid_p3_gqa_dh40", 2, 37, 6, 2, 40, AttnSim::sigmoid, AttnNorm::p_norm).p = 3.0;
  add("identity_max_abs_t70_dh128", 1, 70, 2, 2, 128, AttnSim::identity, AttnNorm::max_abs_sum_one);
  Case& sp = add("softpick_window5_t37", 2, 37, 2, 1, 64, AttnSim::softpick, AttnNorm::sum);
  sp.mask = AttnMask::sliding_window;
  sp.window = 5;
  Case& lp = add("softmax_lead2_prefix4_t37", 1, 37, 2, 2, 64, AttnSim::exp, AttnNorm::sum);
  lp.lead = 2;
  lp.prefix = 4;
  lp.mask = AttnMask::prefix_lm;
  Case& lw = add("softmax_lead1_window5_t70_dh96", 2, 70, 2, 2, 96, AttnSim::exp, AttnNorm::sum);
  lw.lead = 1;
  lw.mask = AttnMask::sliding_window;
  lw.window = 5;
  add("softmax_relative_h1_t37", 2, 37, 1, 1, 64, AttnSim::exp, AttnNorm::sum).buckets = 8;
  Case& rp = add("softmax_relative_prefix4_t37", 1, 37, 2, 2, 64, AttnSim::exp, AttnNorm::sum);
  rp.buckets = 8;
  rp.prefix = 4;
  rp.mask = AttnMask::prefix_lm;
  Case& sa = add("sigmoid_sum_alibi_sink_t37", 2, 37, 4, 2, 64, AttnSim::sigmoid, AttnNorm::sum);
  sa.alibi = true;
  sa.sink = true;
  sa.sigmoid_bias = -1.0;
  add("softmax_sink_t1", 2, 1, 4, 2, 64, AttnSim::exp, AttnNorm::sum).sink = true;
  add("softmax_alpha0.5_t37_dh96", 1, 37, 2, 2, 96, AttnSim::exp, AttnNorm::sum).alpha = 0.5;
  add("softmax_dh256_h1_t20", 1, 20, 1, 1, 256, AttnSim::exp, AttnNorm::sum);
  Case& f = add("softmax_p0.5_gqa_scale0.3", 2, 20, 4, 2, 16, AttnSim::exp, AttnNorm::p_norm);
  f.p = 0.5;
  f.scale = 0.3;
  add("identity_one_t1", 1, 1, 2, 2, 40, AttnSim::identity, AttnNorm::one);
  for (Case& x : c) x = bf16_of(x);
  return c;
}

void check_case(const Case& cs, uint64_t stream) {
  SCOPED_TRACE(cs.name);
  ops::AttentionSpec spec;
  spec.mask = cs.mask;
  spec.window = cs.window;
  spec.prefix = cs.prefix;
  spec.scale = cs.scale;
  spec.sim = cs.sim;
  spec.norm = cs.norm;
  spec.norm_alpha = cs.alpha;
  spec.sigmoid_bias = cs.sigmoid_bias;
  spec.lead_keys = cs.lead;
  spec.norm_p = cs.p;
  if (cs.alibi) spec.pos_bias = AttnPosBias::alibi;
  if (cs.buckets > 0) {
    spec.pos_bias = AttnPosBias::relative;
    spec.relative_max_distance = 20;
  }
  const int64_t B = cs.B, T = cs.T, H = cs.H, Hkv = cs.Hkv, dh = cs.dh, S = T + cs.lead;
  const DType dt = cs.dtype;

  // Inputs, rounded to bf16 (what the kernel sees); the reference gets them in f64. Scores of order 1-3.
  // (pad: the fused buffer's rows hold dh + pad values a head, so the head views are not 16-byte aligned)
  Owned qkv_pad = bf16_rounded(random_host(DType::f32, {B, T, H + 2 * Hkv, dh + cs.pad}, stream).t);
  Tensor qkv_t = qkv_pad.t.slice(3, 0, dh);
  Owned k_lead = bf16_rounded(random_host(DType::f32, {B, S, Hkv, dh}, stream + 3).t);
  Owned v_lead = bf16_rounded(random_host(DType::f32, {B, S, Hkv, dh}, stream + 4).t);
  Owned d_out = bf16_rounded(random_host(DType::f32, {B, T, H, dh}, stream + 1).t);
  Owned sink = random_host(DType::f32, {H}, stream + 2);
  if (cs.sink_at_edge) ops::fill(sink.t, cs.sink_value);
  Owned rel = random_host(DType::f32, {H, std::max<int64_t>(cs.buckets, 1)}, stream + 5, 0.5);
  Tensor q = qkv_t.slice(2, 0, H);
  Tensor k = cs.lead > 0 ? k_lead.t : qkv_t.slice(2, H, Hkv), v = cs.lead > 0 ? v_lead.t : qkv_t.slice(2, H + Hkv, Hkv);
  Owned q64 = Owned::copy_of(q, DType::f64), k64 = Owned::copy_of(k, DType::f64), v64 = Owned::copy_of(v, DType::f64);
  Owned do64 = Owned::copy_of(d_out.t, DType::f64), sink64 = Owned::copy_of(sink.t, DType::f64);
  Owned out64(DType::f64, {B, T, H, dh}), stats64(DType::f64, {B, H, T});
  Owned dq64(DType::f64, {B, T, H, dh}), dk64(DType::f64, {B, S, Hkv, dh}), dv64(DType::f64, {B, S, Hkv, dh});
  Owned dsink64(DType::f64, {H});
  Owned rel64 = Owned::copy_of(rel.t, DType::f64), drel64(DType::f64, {H, std::max<int64_t>(cs.buckets, 1)});
  ops::AttentionSpec ref = spec;
  if (cs.sink) {
    ref.sink_logit = sink64.t;
    ref.d_sink_logit = dsink64.t;
  }
  if (cs.buckets > 0) {
    ref.relative_bias = rel64.t;
    ref.d_relative_bias = drel64.t;
  }
  ops::attention_forward(out64.t, stats64.t, q64.t, k64.t, v64.t, ref);
  ops::attention_backward(dq64.t, dk64.t, dv64.t, do64.t, q64.t, k64.t, v64.t, out64.t, stats64.t, ref);

  // The device, in the case's dtype: q, k, v as head slices of one fused buffer (d_q, d_k, d_v as the same
  // slices of one fused gradient buffer), or contiguous copies.
  Dev g_qkv_pad = to_device(qkv_pad.t, dt), g_dqkv_pad(dt, {B, T, H + 2 * Hkv, dh + cs.pad});
  const Tensor g_qkv = g_qkv_pad.t.slice(3, 0, dh), g_dqkv = g_dqkv_pad.t.slice(3, 0, dh);
  Owned qc = Owned::copy_of(q, DType::f32), kc = Owned::copy_of(k, DType::f32), vc = Owned::copy_of(v, DType::f32);
  Dev g_qc = to_device(qc.t, dt), g_kc = to_device(kc.t, dt), g_vc = to_device(vc.t, dt);
  Tensor gq = cs.fused ? g_qkv.slice(2, 0, H) : g_qc.t;
  Tensor gk = cs.fused ? g_qkv.slice(2, H, Hkv) : g_kc.t;
  Tensor gv = cs.fused ? g_qkv.slice(2, H + Hkv, Hkv) : g_vc.t;
  Dev g_do = to_device(d_out.t, dt), g_sink = to_device(sink.t), g_dsink(DType::f32, {H});
  Dev g_rel = to_device(rel.t), g_drel(DType::f32, {H, std::max<int64_t>(cs.buckets, 1)});
  ops::AttentionSpec gspec = spec;
  gspec.kernel = cs.kernel;
  if (cs.sink) {
    gspec.sink_logit = g_sink.t;
    gspec.d_sink_logit = g_dsink.t;
  }
  if (cs.buckets > 0) {
    gspec.relative_bias = g_rel.t;
    gspec.d_relative_bias = g_drel.t;
  }
  ASSERT_EQ(ops::choose_attention_kernel(gspec, ops::attn_call_of(gq, false)).kernel,
            cs.expect == AttnKernel::auto_select ? cs.kernel : cs.expect);
  Dev g_out(dt, {B, T, H, dh}), g_stats(DType::f32, {B, H, T});
  Dev g_dq_own(dt, {B, T, H, dh}), g_dk_own(dt, {B, S, Hkv, dh}), g_dv_own(dt, {B, S, Hkv, dh});
  Tensor g_dq = cs.fused ? g_dqkv.slice(2, 0, H) : g_dq_own.t;
  Tensor g_dk = cs.fused ? g_dqkv.slice(2, H, Hkv) : g_dk_own.t;
  Tensor g_dv = cs.fused ? g_dqkv.slice(2, H + Hkv, Hkv) : g_dv_own.t;
  for (const Tensor* t : {&g_out.t, &g_stats.t, &g_dq, &g_dk, &g_dv, &g_dsink.t, &g_drel.t}) poison(*t);
  ops::attention_forward(g_out.t, g_stats.t, gq, gk, gv, gspec);
  ops::attention_backward(g_dq, g_dk, g_dv, g_do.t, gq, gk, gv, g_out.t, g_stats.t, gspec);

  EXPECT_LE(error_vs(to_host(g_out.t).t, out64.t, 1.0), kTolOut) << "out";
  EXPECT_LE(error_vs(to_host(g_stats.t).t, stats64.t, 0.0), cs.kernel == AttnKernel::gemm ? kTolStatsGemm : kTolStats)
      << "stats";
  const double tol_grad = cs.kernel == AttnKernel::gemm ? kTolGradGemm : kTolGrad;
  EXPECT_LE(error_vs(to_host(g_dq).t, dq64.t, 1.0), tol_grad) << "d_q";
  EXPECT_LE(error_vs(to_host(g_dk).t, dk64.t, 1.0), tol_grad) << "d_k";
  EXPECT_LE(error_vs(to_host(g_dv).t, dv64.t, 1.0), tol_grad) << "d_v";
  if (cs.sink) {
    EXPECT_LE(error_vs(to_host(g_dsink.t).t, dsink64.t, 1.0), tol_grad) << "d_sink_logit";
  }
  if (cs.buckets > 0) {
    EXPECT_LE(error_vs(to_host(g_drel.t).t, drel64.t, 1.0), tol_grad) << "d_relative_bias";
  }

  // The deterministic backward (the default; the flash kernel and the GEMM path always) gives the same bits.
  Owned dq_first = to_host(g_dq);
  poison(g_dq);
  ops::attention_backward(g_dq, g_dk, g_dv, g_do.t, gq, gk, gv, g_out.t, g_stats.t, gspec);
  EXPECT_TRUE(same_bits(to_host(g_dq).t, dq_first.t)) << "deterministic d_q";
}

TEST(CudaAttentionCudnn, MatchesTheReferenceOnEverySpecItRuns) {
  SKIP_WITHOUT_CUDA();
  ASSERT_GE(cudnn_version(), 91300) << "the sink cases need cuDNN >= 9.13";
  uint64_t stream = 700;
  for (const Case& c : cudnn_cases()) check_case(c, stream += 10);
}

TEST(CudaAttentionFlash, MatchesTheReferenceOnEverySpecItRuns) {
  SKIP_WITHOUT_CUDA();
  uint64_t stream = 900;
  for (const Case& c : flash_cases()) check_case(c, stream += 10);
}

// bf16 tensors in place: the training step's fused projection buffer and its gradient, read and written by
// cuDNN through strided graph tensors and by the flash kernel directly.
TEST(CudaAttentionCudnn, Bf16HeadViewsInPlace) {
  SKIP_WITHOUT_CUDA();
  uint64_t stream = 1300;
  for (const Case& c : cudnn_bf16_cases()) check_case(c, stream += 10);
}

TEST(CudaAttentionFlash, Bf16HeadViewsInPlace) {
  SKIP_WITHOUT_CUDA();
  uint64_t stream = 1500;
  for (const Case& c : flash_bf16_cases()) check_case(c, stream += 10);
}

TEST(CudaAttentionGemm, MatchesTheReferenceOnEverySpecItRuns) {
  SKIP_WITHOUT_CUDA();
  uint64_t stream = 1100;
  for (const Case& c : gemm_cases()) check_case(c, stream += 10);
}

// auto on a GPU: the softmax model's attention goes to cuDNN, the probe's probs to the reference, a p-norm
// with bf16 tensors to the GEMM path.
TEST(CudaAttentionFast, AutoPicksCudnnForSoftmaxFlashForSigmoidAndTheReferenceForProbs) {
  SKIP_WITHOUT_CUDA();
  Dev q(DType::f32, {1, 8, 2, 64});
  ops::AttentionSpec spec;
  EXPECT_EQ(ops::choose_attention_kernel(spec, ops::attn_call_of(q.t, false)).kernel, AttnKernel::cudnn);
  EXPECT_EQ(ops::choose_attention_kernel(spec, ops::attn_call_of(q.t, true)).kernel, AttnKernel::reference);
  Dev sink(DType::f32, {2}), q1(DType::f32, {1, 1, 2, 64});  // a sink logit: cuDNN, except with one query
  spec.sink_logit = sink.t;
  EXPECT_EQ(ops::choose_attention_kernel(spec, ops::attn_call_of(q.t, false)).kernel, AttnKernel::cudnn);
  EXPECT_EQ(ops::choose_attention_kernel(spec, ops::attn_call_of(q1.t, false)).kernel, AttnKernel::reference);
  spec.sink_logit = Tensor{};
  spec.sim = ops::AttnSim::sigmoid;
  spec.norm = ops::AttnNorm::one;
  EXPECT_EQ(ops::choose_attention_kernel(spec, ops::attn_call_of(q.t, false)).kernel, AttnKernel::flash);
  // p-norms: the reference with f32 tensors (its f32 arithmetic kept), the GEMM path with bf16 ones
  Dev q16(DType::bf16, {1, 8, 2, 64});
  spec.norm = ops::AttnNorm::p_norm;
  spec.norm_p = 2.0;
  EXPECT_EQ(ops::choose_attention_kernel(spec, ops::attn_call_of(q.t, false)).kernel, AttnKernel::reference);
  EXPECT_EQ(ops::choose_attention_kernel(spec, ops::attn_call_of(q16.t, false)).kernel, AttnKernel::gemm);
}

// The trainer's view: a model on the GPU names the kernel its attention runs (what the log and results.h5 say).
TEST(CudaAttentionFast, ModelOnTheGpuNamesItsKernel) {
  SKIP_WITHOUT_CUDA();
  model::ModelConfig c;
  c.vocab_size = 16;
  c.d_model = 128;
  c.n_layers = 1;
  c.n_heads = 2;
  c.ffn_hidden = 32;
  c.context = 16;
  EXPECT_EQ(model::Transformer(c, Device::cuda(0)).attention_kernel().kernel, AttnKernel::cudnn);
  c.attn_sim = ops::AttnSim::sigmoid;
  c.attn_norm = ops::AttnNorm::one;
  EXPECT_EQ(model::Transformer(c, Device::cuda(0)).attention_kernel().kernel, AttnKernel::flash);
  c.attn_norm = ops::AttnNorm::p_norm;
  c.attn_p = 2.0;
  model::Transformer pnorm(c, Device::cuda(0));
  EXPECT_EQ(pnorm.attention_kernel().kernel, AttnKernel::reference);
  pnorm.set_attention_kernel(AttnKernel::flash);
  EXPECT_THROW(pnorm.attention_kernel(), Error);
}

}  // namespace
}  // namespace sinklab
