// Per-element activation math shared by the CPU backend and the CUDA kernels. Templated on the float
// type (float on the GPU; float or double on the CPU). Derivatives are written out, not approximated.
#pragma once

#include <type_traits>

#include "backend/math_fns.hpp"
#include "backend/ops.hpp"
#include "core/hd.hpp"

namespace sinklab::math {

template <class T> SL_HD T relu(T x) { return x > T(0) ? x : T(0); }
template <class T> SL_HD T relu_grad(T x) { return x > T(0) ? T(1) : T(0); }

template <class T> SL_HD T sigmoid(T x) { return T(1) / (T(1) + fexp(-x)); }
// elu(x) + 1 (alpha 1): the kernel feature map phi of linear attention; d/dx = 1 (x > 0) or e^x.
template <class T> SL_HD T elu_plus_one(T x) { return x > T(0) ? x + T(1) : fexp(x); }
template <class T> SL_HD T elu_plus_one_grad(T x) { return x > T(0) ? T(1) : fexp(x); }
template <class T> SL_HD T sigmoid_grad(T x) {
  const T s = sigmoid(x);
  return s * (T(1) - s);
}

// SiLU (Swish-1): x * sigmoid(x); d/dx = s + x s (1 - s).
template <class T> SL_HD T silu(T x) { return x * sigmoid(x); }
template <class T> SL_HD T silu_grad(T x) {
  T s = sigmoid(x);
  return s + x * s * (T(1) - s);
}

// Exact GELU: x * Phi(x) = 0.5 x (1 + erf(x / sqrt 2)); d/dx = Phi(x) + x phi(x).
template <class T> SL_HD T gelu_exact(T x) { return T(0.5) * x * (T(1) + ferf(x * T(0.70710678118654752440))); }
template <class T> SL_HD T gelu_exact_grad(T x) {
  T cdf = T(0.5) * (T(1) + ferf(x * T(0.70710678118654752440)));
  T pdf = T(0.39894228040143267794) * fexp(T(-0.5) * x * x);
  return cdf + x * pdf;
}

// tanh GELU (GPT-2's gelu_new): 0.5 x (1 + tanh(u)), u = sqrt(2/pi) (x + 0.044715 x^3).
template <class T> SL_HD T gelu_tanh(T x) {
  T u = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
  return T(0.5) * x * (T(1) + ftanh(u));
}
template <class T> SL_HD T gelu_tanh_grad(T x) {
  T u = T(0.79788456080286535588) * (x + T(0.044715) * x * x * x);
  T t = ftanh(u);
  T du = T(0.79788456080286535588) * (T(1) + T(3) * T(0.044715) * x * x);
  return T(0.5) * (T(1) + t) + T(0.5) * x * (T(1) - t * t) * du;
}

template <class T> SL_HD T activate(ops::Activation act, T x) {
  switch (act) {
    case ops::Activation::relu: return relu(x);
    case ops::Activation::gelu_exact: return gelu_exact(x);
    case ops::Activation::gelu_tanh: return gelu_tanh(x);
    case ops::Activation::silu: return silu(x);
    case ops::Activation::sigmoid: return sigmoid(x);
    case ops::Activation::elu_plus_one: return elu_plus_one(x);
  }
  return x;
}

template <class T> SL_HD T activate_grad(ops::Activation act, T x) {
  switch (act) {
    case ops::Activation::relu: return relu_grad(x);
    case ops::Activation::gelu_exact: return gelu_exact_grad(x);
    case ops::Activation::gelu_tanh: return gelu_tanh_grad(x);
    case ops::Activation::silu: return silu_grad(x);
    case ops::Activation::sigmoid: return sigmoid_grad(x);
    case ops::Activation::elu_plus_one: return elu_plus_one_grad(x);
  }
  return T(1);
}

// The same with the activation fixed at compile time, so a loop over elements has no switch in it and
// vectorises. with_activation(act, fn) calls fn(std::integral_constant<Activation, act>{}).
template <ops::Activation A, class T> SL_HD T activate_as(T x) {
  if constexpr (A == ops::Activation::relu) return relu(x);
  else if constexpr (A == ops::Activation::gelu_exact) return gelu_exact(x);
  else if constexpr (A == ops::Activation::gelu_tanh) return gelu_tanh(x);
  else if constexpr (A == ops::Activation::sigmoid) return sigmoid(x);
  else if constexpr (A == ops::Activation::elu_plus_one) return elu_plus_one(x);
  else return silu(x);
}
template <ops::Activation A, class T> SL_HD T activate_grad_as(T x) {
  if constexpr (A == ops::Activation::relu) return relu_grad(x);
  else if constexpr (A == ops::Activation::gelu_exact) return gelu_exact_grad(x);
  else if constexpr (A == ops::Activation::gelu_tanh) return gelu_tanh_grad(x);
  else if constexpr (A == ops::Activation::sigmoid) return sigmoid_grad(x);
  else if constexpr (A == ops::Activation::elu_plus_one) return elu_plus_one_grad(x);
  else return silu_grad(x);
}
template <class Fn> decltype(auto) with_activation(ops::Activation act, Fn&& fn) {
  switch (act) {
    case ops::Activation::relu: return fn(std::integral_constant<ops::Activation, ops::Activation::relu>{});
    case ops::Activation::gelu_exact: return fn(std::integral_constant<ops::Activation, ops::Activation::gelu_exact>{});
    case ops::Activation::gelu_tanh: return fn(std::integral_constant<ops::Activation, ops::Activation::gelu_tanh>{});
    case ops::Activation::sigmoid: return fn(std::integral_constant<ops::Activation, ops::Activation::sigmoid>{});
    case ops::Activation::elu_plus_one:
      return fn(std::integral_constant<ops::Activation, ops::Activation::elu_plus_one>{});
    case ops::Activation::silu: break;
  }
  return fn(std::integral_constant<ops::Activation, ops::Activation::silu>{});
}

}  // namespace sinklab::math
