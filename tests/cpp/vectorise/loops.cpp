// Loops shaped like the CPU backend's elementwise ones, over the shared *_math.hpp functions: the loop
// of every function marked "must vectorise" has to be reported vectorised by GCC under the flags
// sinklab's library is built with (check.sh). A branch that creeps into fexp, or a build without
// -fno-trapping-math (CMakeLists.txt), turns them scalar: softmax, SwiGLU and cross-entropy run ~4x
// slower and nothing else looks wrong.
#include <cstdint>

#include "backend/activation_math.hpp"
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
