// ops:: entry points: forward each call to the backend of its tensors' device (backend.hpp).
#include <cmath>

#include "backend/backend.hpp"

namespace sinklab {

void Backend::fill(Tensor, double) { no_kernel("fill"); }
void Backend::copy(Tensor, Tensor) { no_kernel("copy"); }
void Backend::add(Tensor, Tensor, Tensor) { no_kernel("add"); }
void Backend::accumulate(Tensor, Tensor, double) { no_kernel("accumulate"); }
void Backend::scale(Tensor, double) { no_kernel("scale"); }
double Backend::sum_squares(Tensor) { no_kernel("sum_squares"); }
void Backend::fill_normal(Tensor, uint64_t, uint64_t, double, double) { no_kernel("fill_normal"); }
void Backend::fill_uniform(Tensor, uint64_t, uint64_t, double, double) { no_kernel("fill_uniform"); }
void Backend::linear_forward(Tensor, Tensor, Tensor, Tensor) { no_kernel("linear_forward"); }
void Backend::linear_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) { no_kernel("linear_backward"); }
void Backend::matmul(Tensor, Tensor, Tensor, bool, bool, double, double) { no_kernel("matmul"); }
void Backend::embedding_forward(Tensor, Tensor, Tensor) { no_kernel("embedding_forward"); }
void Backend::embedding_backward(Tensor, Tensor, Tensor) { no_kernel("embedding_backward"); }
void Backend::rmsnorm_forward(Tensor, Tensor, Tensor, Tensor, double) { no_kernel("rmsnorm_forward"); }
void Backend::rmsnorm_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) { no_kernel("rmsnorm_backward"); }
void Backend::layernorm_forward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, double) { no_kernel("layernorm_forward"); }
void Backend::layernorm_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor) { no_kernel("layernorm_backward"); }
void Backend::rope_forward(Tensor, Tensor, Tensor, const RopeConfig&) { no_kernel("rope_forward"); }
void Backend::rope_backward(Tensor, Tensor, Tensor, const RopeConfig&) { no_kernel("rope_backward"); }
void Backend::activation_forward(Tensor, Tensor, Activation) { no_kernel("activation_forward"); }
void Backend::activation_backward(Tensor, Tensor, Tensor, Activation) { no_kernel("activation_backward"); }
void Backend::gated_forward(Tensor, Tensor, Tensor, Activation) { no_kernel("gated_forward"); }
void Backend::gated_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Activation) { no_kernel("gated_backward"); }
void Backend::cross_entropy(Tensor, Tensor, Tensor, Tensor, int, double) { no_kernel("cross_entropy"); }
void Backend::adamw_update(Tensor, Tensor, Tensor, Tensor, const AdamWStep&) { no_kernel("adamw_update"); }
void Backend::attention_forward(Tensor, Tensor, Tensor, Tensor, Tensor, const AttentionSpec&) { no_kernel("attention_forward"); }
void Backend::attention_backward(Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, Tensor, const AttentionSpec&) { no_kernel("attention_backward"); }
void Backend::attention_probs(Tensor, Tensor, Tensor, const AttentionSpec&) { no_kernel("attention_probs"); }

}  // namespace sinklab

namespace sinklab::ops {

void fill(Tensor out, double value) {
  return backend_for({out}, "fill").fill(out, value);
}

void copy(Tensor dst, Tensor src) {
  return backend_for({dst, src}, "copy").copy(dst, src);
}

void add(Tensor out, Tensor a, Tensor b) {
  return backend_for({out, a, b}, "add").add(out, a, b);
}

void accumulate(Tensor dst, Tensor src, double alpha) {
  return backend_for({dst, src}, "accumulate").accumulate(dst, src, alpha);
}

void scale(Tensor x, double factor) {
  return backend_for({x}, "scale").scale(x, factor);
}

double sum_squares(Tensor x) {
  return backend_for({x}, "sum_squares").sum_squares(x);
}

void fill_normal(Tensor out, uint64_t seed, uint64_t stream, double mean, double std) {
  return backend_for({out}, "fill_normal").fill_normal(out, seed, stream, mean, std);
}

void fill_uniform(Tensor out, uint64_t seed, uint64_t stream, double low, double high) {
  return backend_for({out}, "fill_uniform").fill_uniform(out, seed, stream, low, high);
}

void linear_forward(Tensor out, Tensor in, Tensor weight, Tensor bias) {
  return backend_for({out, in, weight, bias}, "linear_forward").linear_forward(out, in, weight, bias);
}

void linear_backward(Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in, Tensor weight) {
  return backend_for({d_in, d_weight, d_bias, d_out, in, weight}, "linear_backward").linear_backward(d_in, d_weight, d_bias, d_out, in, weight);
}

void matmul(Tensor out, Tensor a, Tensor b, bool transpose_a, bool transpose_b, double alpha, double beta) {
  return backend_for({out, a, b}, "matmul").matmul(out, a, b, transpose_a, transpose_b, alpha, beta);
}

void embedding_forward(Tensor out, Tensor ids, Tensor table) {
  return backend_for({out, ids, table}, "embedding_forward").embedding_forward(out, ids, table);
}

void embedding_backward(Tensor d_table, Tensor d_out, Tensor ids) {
  return backend_for({d_table, d_out, ids}, "embedding_backward").embedding_backward(d_table, d_out, ids);
}

void rmsnorm_forward(Tensor out, Tensor rstd, Tensor in, Tensor weight, double eps) {
  return backend_for({out, rstd, in, weight}, "rmsnorm_forward").rmsnorm_forward(out, rstd, in, weight, eps);
}

void rmsnorm_backward(Tensor d_in, Tensor d_weight, Tensor d_out, Tensor in, Tensor weight, Tensor rstd) {
  return backend_for({d_in, d_weight, d_out, in, weight, rstd}, "rmsnorm_backward").rmsnorm_backward(d_in, d_weight, d_out, in, weight, rstd);
}

void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor weight, Tensor bias, double eps) {
  return backend_for({out, mean, rstd, in, weight, bias}, "layernorm_forward").layernorm_forward(out, mean, rstd, in, weight, bias, eps);
}

void layernorm_backward(Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in, Tensor weight, Tensor mean, Tensor rstd) {
  return backend_for({d_in, d_weight, d_bias, d_out, in, weight, mean, rstd}, "layernorm_backward").layernorm_backward(d_in, d_weight, d_bias, d_out, in, weight, mean, rstd);
}

void rope_forward(Tensor out, Tensor x, Tensor positions, const RopeConfig& cfg) {
  return backend_for({out, x, positions}, "rope_forward").rope_forward(out, x, positions, cfg);
}

void rope_backward(Tensor d_x, Tensor d_out, Tensor positions, const RopeConfig& cfg) {
  return backend_for({d_x, d_out, positions}, "rope_backward").rope_backward(d_x, d_out, positions, cfg);
}

void activation_forward(Tensor out, Tensor in, Activation act) {
  return backend_for({out, in}, "activation_forward").activation_forward(out, in, act);
}

void activation_backward(Tensor d_in, Tensor d_out, Tensor in, Activation act) {
  return backend_for({d_in, d_out, in}, "activation_backward").activation_backward(d_in, d_out, in, act);
}

void gated_forward(Tensor out, Tensor gate, Tensor up, Activation act) {
  return backend_for({out, gate, up}, "gated_forward").gated_forward(out, gate, up, act);
}

void gated_backward(Tensor d_gate, Tensor d_up, Tensor d_out, Tensor gate, Tensor up, Activation act) {
  return backend_for({d_gate, d_up, d_out, gate, up}, "gated_backward").gated_backward(d_gate, d_up, d_out, gate, up, act);
}

void cross_entropy(Tensor losses, Tensor d_logits, Tensor logits, Tensor targets, int ignore_index, double grad_scale) {
  return backend_for({losses, d_logits, logits, targets}, "cross_entropy").cross_entropy(losses, d_logits, logits, targets, ignore_index, grad_scale);
}

void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& s) {
  return backend_for({param, grad, m, v}, "adamw_update").adamw_update(param, grad, m, v, s);
}

void attention_forward(Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v, const AttentionSpec& spec) {
  return backend_for({out, stats, q, k, v}, "attention_forward").attention_forward(out, stats, q, k, v, spec);
}

void attention_backward(Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor stats, const AttentionSpec& spec) {
  return backend_for({d_q, d_k, d_v, d_out, q, k, v, out, stats}, "attention_backward").attention_backward(d_q, d_k, d_v, d_out, q, k, v, out, stats, spec);
}

void attention_probs(Tensor probs, Tensor q, Tensor k, const AttentionSpec& spec) {
  return backend_for({probs, q, k}, "attention_probs").attention_probs(probs, q, k, spec);
}

double global_norm(std::span<const Tensor> grads) {
  double total = 0.0;
  for (const Tensor& g : grads) total += sum_squares(g);
  return std::sqrt(total);
}

double clip_grad_norm(std::span<const Tensor> grads, double max_norm) {
  double norm = global_norm(grads);
  if (norm > max_norm) {
    double coef = max_norm / (norm + 1e-6);
    for (const Tensor& g : grads) scale(g, coef);
  }
  return norm;
}

}  // namespace sinklab::ops
