// Loops shaped like the CPU backend's elementwise ones, over the shared *_math.hpp functions: the loop
// of every function marked "must vectorise" has to be reported vectorised by GCC under the flags
// sinklab's library is built with (check.sh). A branch that creeps into fexp, or a build without
// -fno-trapping-math (CMakeLists.txt), turns them scalar: softmax, SwiGLU and cross-entropy run ~4x
// slower and nothing else looks wrong.
#include <cstdint>

#include "backend/activation_math.hpp"
#include "backend/attention_math.hpp"
#include "backend/math_fns.hpp"

using namespace sinklab;

void exp_shifted(float* out, const float* in, float shift, int64_t n) {  // must vectorise
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = math::fexp(in[i] - shift);
}

// cross-entropy's pass: the exps stored, their sum in double lanes
double exp_store_and_sum(float* out, const float* in, float shift, int64_t n) {  // must vectorise
  double sum = 0.0;
#pragma omp simd reduction(+ : sum)
  for (int64_t i = 0; i < n; ++i) {
    const float e = math::fexp(in[i] - shift);
    out[i] = e;
    sum += double(e);
  }
  return sum;
}

void swiglu_forward(float* out, const float* gate, const float* up, int64_t n) {  // must vectorise
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = math::activate_as<ops::Activation::silu>(gate[i]) * up[i];
}

void swiglu_backward(float* dg, float* du, const float* dy, const float* g, const float* u, int64_t n) {  // must vectorise
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) {
    dg[i] = dy[i] * u[i] * math::activate_grad_as<ops::Activation::silu>(g[i]);
    du[i] = dy[i] * math::activate_as<ops::Activation::silu>(g[i]);
  }
}

void gelu_tanh_forward(float* out, const float* in, int64_t n) {  // must vectorise
#pragma omp simd
  for (int64_t i = 0; i < n; ++i) out[i] = math::activate_as<ops::Activation::gelu_tanh>(in[i]);
}

// attention's causal row: numerators of the visible keys, 0 past the last one
void masked_softmax_numerators(float* s, float max, int64_t visible, int64_t n) {  // must vectorise
#pragma omp simd
  for (int64_t j = 0; j < n; ++j) s[j] = j < visible ? math::fexp(s[j] - max) : 0.0f;
}

// attention's row under one of cpu/attention.cpp's fixed (sim, norm, mask) loop kinds, the other fields
// read at run time: sigmoid without normalisation (the paper's sink-free operation) with a sigmoid bias
float sigmoid_one_row(const ops::AttentionSpec& spec, float* s, int64_t i, int64_t jp0, int64_t jb, int64_t je) {  // must vectorise
  math::AttnConfig cfg = math::attn_config(spec);
  cfg.sim = ops::AttnSim::sigmoid;
  cfg.norm = ops::AttnNorm::one;
  cfg.mask = ops::AttnMask::causal;
  float acc = 0.0f;
#pragma omp simd reduction(+ : acc)
  for (int64_t j = jb; j < je; ++j) {
    const bool vis = math::attn_visible_pos(cfg, i, jp0 + j);
    const float w = vis ? math::attn_sim(cfg, s[j], 0.0f) : 0.0f;
    s[j] = math::attn_numer(cfg, w);
    acc += vis ? math::attn_norm_term(cfg, w) : 0.0f;
  }
  return acc;
}

// the same kind's backward row: P and dS of softmax with a sliding window and the run-time window size
void softmax_window_backward_row(const ops::AttentionSpec& spec, float* s, float* dp, int64_t i,  // must vectorise
                                 int64_t jp0, int64_t jb, int64_t je, float stat, float D) {
  math::AttnConfig cfg = math::attn_config(spec);
  cfg.sim = ops::AttnSim::exp;
  cfg.norm = ops::AttnNorm::sum;
  cfg.mask = ops::AttnMask::sliding_window;
  const float inv_z = math::attn_row_inv_norm(cfg, stat), row_sum = math::attn_row_sum(cfg, stat);
#pragma omp simd
  for (int64_t j = jb; j < je; ++j) {
    const bool vis = math::attn_visible_pos(cfg, i, jp0 + j);
    const float p = vis ? math::attn_prob(cfg, s[j], stat, inv_z) : 0.0f;
    const float ds = vis ? math::attn_dscore(cfg, s[j], p, stat, inv_z, row_sum, dp[j], D) : 0.0f;
    s[j] = p;
    dp[j] = ds;
  }
}
