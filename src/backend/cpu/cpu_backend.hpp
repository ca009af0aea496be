// The CPU backend: the verified reference. Simple loops over the shared *_math.hpp functions,
// OpenMP across rows, BLAS for matmuls. Every op runs in f32 and in f64 (for finite differences).
// The op bodies live in one .cpp per op family (memory.cpp, linear.cpp, norms.cpp, ...).
#pragma once

#include "backend/backend.hpp"

namespace sinklab {

class CpuBackend final : public Backend {
 public:
  const char* name() const override { return "cpu"; }
  void* allocate(size_t bytes) override;
  void deallocate(void* ptr) override;

  void fill(Tensor out, double value) override;
  void copy(Tensor dst, Tensor src) override;
  void add(Tensor out, Tensor a, Tensor b) override;
  void accumulate(Tensor dst, Tensor src, double alpha) override;
  void scale(Tensor x, double factor) override;
  double sum_squares(Tensor x) override;
  double max_abs(Tensor x) override;
  void column_sum(Tensor out, Tensor in, bool accumulate) override;
  void fill_normal(Tensor out, uint64_t seed, uint64_t stream, double mean, double std) override;
  void fill_uniform(Tensor out, uint64_t seed, uint64_t stream, double low, double high) override;
  void linear_forward(Tensor out, Tensor in, Tensor weight, Tensor bias) override;
  void linear_backward(Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in, Tensor weight) override;
  void matmul(Tensor out, Tensor a, Tensor b, bool transpose_a, bool transpose_b, double alpha, double beta) override;
  void embedding_forward(Tensor out, Tensor ids, Tensor table) override;
  void embedding_backward(Tensor d_table, Tensor d_out, Tensor ids) override;
  void rmsnorm_forward(Tensor out, Tensor rstd, Tensor in, Tensor weight, double eps) override;
  void rmsnorm_backward(Tensor d_in, Tensor d_weight, Tensor d_out, Tensor in, Tensor weight, Tensor rstd) override;
  void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor weight, Tensor bias, double eps) override;
  void layernorm_backward(Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in, Tensor weight, Tensor mean, Tensor rstd) override;
  void rope_forward(Tensor out, Tensor x, Tensor positions, const RopeConfig& cfg) override;
  void rope_backward(Tensor d_x, Tensor d_out, Tensor positions, const RopeConfig& cfg) override;
  void activation_forward(Tensor out, Tensor in, Activation act) override;
  void activation_backward(Tensor d_in, Tensor d_out, Tensor in, Activation act) override;
  void gated_forward(Tensor out, Tensor gate, Tensor up, Activation act) override;
  void gated_backward(Tensor d_gate, Tensor d_up, Tensor d_out, Tensor gate, Tensor up, Activation act) override;
  void cross_entropy(Tensor losses, Tensor d_logits, Tensor logits, Tensor targets, int ignore_index, double grad_scale) override;
  void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& s) override;
  void attention_forward(Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v, const AttentionSpec& spec,
                         Tensor probs) override;
  void attention_backward(Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor stats, const AttentionSpec& spec) override;
  void attention_probs(Tensor probs, Tensor q, Tensor k, const AttentionSpec& spec) override;
  // State-space (Mamba) layers and mixture-of-experts routing: mamba.cpp.
  void causal_conv1d_forward(Tensor out, Tensor in, Tensor weight, Tensor bias) override;
  void selective_scan_forward(Tensor y, Tensor x, Tensor dt, Tensor A_log, Tensor B, Tensor C, Tensor D, Tensor dt_bias, bool dt_softplus) override;
  void moe_router_topk(Tensor top_weights, Tensor top_experts, Tensor logits) override;
  void index_add_rows(Tensor out, Tensor src, Tensor index, Tensor scale) override;
};

}  // namespace sinklab
