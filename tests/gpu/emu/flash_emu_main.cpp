// The flash kernel's code (src/backend/cuda/attention_flash.cu, rewritten by tests/gpu/emulate_flash.sh onto
// flash_emu.hpp) against the float64 CPU reference on every spec test_cuda_attention_fast's flash cases
// claim, with that test's tolerances. Inputs are rounded to bf16 first, as there. Exit 0 when every case
// passes; prints each case's errors.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "backend/ops.hpp"
#include "flash_emu.hpp"
#include "test_util.hpp"

using namespace sinklab;
using test::Owned;

namespace {

struct Case {
  std::string name;
  int64_t B, T, H, Hkv, dh;
  ops::AttnSim sim;
  ops::AttnNorm norm;
  ops::AttnMask mask = ops::AttnMask::causal;
  int64_t window = 0, prefix = 0, lead = 0;
  double alpha = 1.0, sigmoid_bias = 0.0, scale = 0.0;
  bool fused = false;  // q, k, v as head slices of one [B, T, H + 2 Hkv, dh] buffer (strided rows; no lead keys)
};

double error_vs(const Tensor& a, const Tensor& ref, double floor) {
  double max_err = 0.0, max_ref = floor;
  for (int64_t i = 0; i < ref.numel(); ++i) {
    const double x = test::element(a, i), r = test::element(ref, i);
    if (std::isnan(x) || std::isnan(r)) return INFINITY;
    max_err = std::max(max_err, std::abs(x - r));
    max_ref = std::max(max_ref, std::abs(r));
  }
  return max_ref > 0 ? max_err / max_ref : max_err;
}

Owned bf16_rounded(const Tensor& t) {
  Owned b = Owned::copy_of(t, DType::bf16);
  return Owned::copy_of(b.t, DType::f32);
}
Owned randn(std::vector<int64_t> dims, uint64_t stream) {
  Owned o(DType::f32, dims);
  test::randn(o.t, stream, 1.0);
  return bf16_rounded(o.t);
}

bool run(const Case& cs, uint64_t stream) {
  ops::AttentionSpec spec;
  spec.sim = cs.sim;
  spec.norm = cs.norm;
  spec.mask = cs.mask;
  spec.window = cs.window;
  spec.prefix = cs.prefix;
  spec.lead_keys = cs.lead;
  spec.norm_alpha = cs.alpha;
  spec.sigmoid_bias = cs.sigmoid_bias;
  spec.scale = cs.scale;
  const int64_t B = cs.B, T = cs.T, H = cs.H, Hkv = cs.Hkv, dh = cs.dh, S = T + cs.lead;
  Owned q_own = randn({B, T, H, dh}, stream), k_own = randn({B, S, Hkv, dh}, stream + 1);
  Owned v_own = randn({B, S, Hkv, dh}, stream + 2), qkv = randn({B, T, H + 2 * Hkv, dh}, stream + 5);
  Owned d_out = randn({B, T, H, dh}, stream + 3);
  const Tensor q = cs.fused ? qkv.t.slice(2, 0, H) : q_own.t;
  const Tensor k = cs.fused ? qkv.t.slice(2, H, Hkv) : k_own.t;
  const Tensor v = cs.fused ? qkv.t.slice(2, H + Hkv, Hkv) : v_own.t;
  auto f64 = [](const Tensor& t) { return Owned::copy_of(t, DType::f64); };
  Owned q64 = f64(q), k64 = f64(k), v64 = f64(v), do64 = f64(d_out.t);
  Owned out64(DType::f64, {B, T, H, dh}), st64(DType::f64, {B, H, T}), dq64(DType::f64, {B, T, H, dh}),
      dk64(DType::f64, {B, S, Hkv, dh}), dv64(DType::f64, {B, S, Hkv, dh});
  ops::attention_forward(out64.t, st64.t, q64.t, k64.t, v64.t, spec);
  ops::attention_backward(dq64.t, dk64.t, dv64.t, do64.t, q64.t, k64.t, v64.t, out64.t, st64.t, spec);

  Owned out(DType::f32, {B, T, H, dh}), st(DType::f32, {B, H, T}), dq(DType::f32, {B, T, H, dh}),
      dk(DType::f32, {B, S, Hkv, dh}), dv(DType::f32, {B, S, Hkv, dh});
  for (Owned* o : {&out, &st, &dq, &dk, &dv}) ops::fill(o->t, NAN);
  cuda::CudaBackend be;
  AttentionDims d;
  d.B = B;
  d.T = T;
  d.S = S;
  d.H = H;
  d.Hkv = Hkv;
  d.dh = dh;
  cuda::flash_attention_forward(be, out.t, st.t, q, k, v, spec, d);
  cuda::flash_attention_backward(be, dq.t, dk.t, dv.t, d_out.t, q, k, v, out.t, st.t, spec, d);
  const double e_out = error_vs(out.t, out64.t, 1.0), e_st = error_vs(st.t, st64.t, 0.0);
  const double e_dq = error_vs(dq.t, dq64.t, 1.0), e_dk = error_vs(dk.t, dk64.t, 1.0), e_dv = error_vs(dv.t, dv64.t, 1.0);
  const bool ok = e_out <= 1e-2 && e_st <= 1e-3 && e_dq <= 2e-2 && e_dk <= 2e-2 && e_dv <= 2e-2;
  std::printf("%-30s out %.2e stats %.2e d_q %.2e d_k %.2e d_v %.2e %s\n", cs.name.c_str(), e_out, e_st, e_dq, e_dk,
              e_dv, ok ? "ok" : "FAILED");
  return ok;
}

}  // namespace

int main() {
  using ops::AttnMask;
  using ops::AttnNorm;
  using ops::AttnSim;
  std::vector<Case> cases = {
      {"sigmoid_one_logn_t130_dh64", 1, 130, 2, 2, 64, AttnSim::sigmoid, AttnNorm::one},
      {"sigmoid_one_t1", 1, 1, 2, 2, 8, AttnSim::sigmoid, AttnNorm::one},
      {"sigmoid_sum_t37_gqa_dh40", 1, 37, 6, 2, 40, AttnSim::sigmoid, AttnNorm::sum},
      {"sigmoid_sum_alpha0.5_dh128", 1, 37, 1, 1, 128, AttnSim::sigmoid, AttnNorm::sum},
      {"elu_one_t37", 2, 37, 2, 1, 64, AttnSim::elu_plus_one, AttnNorm::one},
      {"elu_sum_t130", 1, 130, 1, 1, 32, AttnSim::elu_plus_one, AttnNorm::sum},
      {"identity_one_t37", 1, 37, 2, 2, 16, AttnSim::identity, AttnNorm::one},
      {"identity_sum_t37", 1, 37, 2, 2, 16, AttnSim::identity, AttnNorm::sum},
      {"sigmoid_one_window5", 1, 37, 2, 2, 64, AttnSim::sigmoid, AttnNorm::one, AttnMask::sliding_window, 5},
      {"sigmoid_sum_prefix4", 1, 37, 2, 2, 64, AttnSim::sigmoid, AttnNorm::sum, AttnMask::prefix_lm, 0, 4},
      {"sigmoid_one_lead1", 1, 37, 2, 2, 64, AttnSim::sigmoid, AttnNorm::one, AttnMask::causal, 0, 0, 1},
      {"elu_sum_lead2_window5", 1, 70, 2, 2, 64, AttnSim::elu_plus_one, AttnNorm::sum, AttnMask::sliding_window, 5, 0, 2},
  };
  cases[0].sigmoid_bias = -std::log(130.0);
  cases[3].alpha = 0.5;
  cases[6].scale = 0.3;
  cases.push_back({"sigmoid_one_fused_gqa_scale0.3", 2, 20, 4, 2, 16, AttnSim::sigmoid, AttnNorm::one});
  cases.back().fused = true;
  cases.back().scale = 0.3;
  int failed = 0;
  uint64_t stream = 900;
  for (const Case& c : cases) failed += run(c, stream += 10) ? 0 : 1;
  std::printf("%d of %zu cases failed\n", failed, cases.size());
  return failed == 0 ? 0 : 1;
}
