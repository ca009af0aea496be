// Backend: the op API as one interface per device. Every op is a virtual whose default throws
// "no <op> kernel on <device>", so a backend implements what it has and the op API already has room
// for the rest (same signatures, device chosen at run time). ops.cpp forwards each ops:: call to the
// backend of its tensors' device. Documentation of each op: ops.hpp.
#pragma once

#include <cstddef>
#include <initializer_list>
#include <string>

#include "backend/ops.hpp"

namespace sinklab {

using ops::Activation;
using ops::AdamWStep;
using ops::AttentionSpec;
using ops::RopeConfig;

class Backend {
 public:
  virtual ~Backend() = default;
  virtual const char* name() const = 0;
  virtual void* allocate(size_t bytes) = 0;
  virtual void deallocate(void* ptr) = 0;
  virtual void synchronize() {}

  virtual void fill(Tensor out, double value);
  virtual void copy(Tensor dst, Tensor src);
  virtual void add(Tensor out, Tensor a, Tensor b);
  virtual void accumulate(Tensor dst, Tensor src, double alpha);
  virtual void scale(Tensor x, double factor);
  virtual double sum_squares(Tensor x);
  virtual double max_abs(Tensor x);
  virtual void column_sum(Tensor out, Tensor in, bool accumulate);
  virtual void fill_normal(Tensor out, uint64_t seed, uint64_t stream, double mean, double std);
  virtual void fill_uniform(Tensor out, uint64_t seed, uint64_t stream, double low, double high);
  virtual void linear_forward(Tensor out, Tensor in, Tensor weight, Tensor bias);
  virtual void linear_backward(Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in, Tensor weight);
  virtual void matmul(Tensor out, Tensor a, Tensor b, bool transpose_a, bool transpose_b, double alpha, double beta);
  virtual void embedding_forward(Tensor out, Tensor ids, Tensor table);
  virtual void embedding_backward(Tensor d_table, Tensor d_out, Tensor ids);
  virtual void rmsnorm_forward(Tensor out, Tensor rstd, Tensor in, Tensor weight, double eps);
  virtual void rmsnorm_backward(Tensor d_in, Tensor d_weight, Tensor d_out, Tensor in, Tensor weight, Tensor rstd);
  virtual void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor weight, Tensor bias, double eps);
  virtual void layernorm_backward(Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in, Tensor weight, Tensor mean, Tensor rstd);
  virtual void rope_forward(Tensor out, Tensor x, Tensor positions, const RopeConfig& cfg);
  virtual void rope_backward(Tensor d_x, Tensor d_out, Tensor positions, const RopeConfig& cfg);
  virtual void activation_forward(Tensor out, Tensor in, Activation act);
  virtual void activation_backward(Tensor d_in, Tensor d_out, Tensor in, Activation act);
  virtual void gated_forward(Tensor out, Tensor gate, Tensor up, Activation act);
  virtual void gated_backward(Tensor d_gate, Tensor d_up, Tensor d_out, Tensor gate, Tensor up, Activation act);
  virtual void cross_entropy(Tensor losses, Tensor d_logits, Tensor logits, Tensor targets, int ignore_index, double grad_scale);
  virtual void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& s);
  virtual void attention_forward(Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v, const AttentionSpec& spec,
                                 Tensor probs);
  virtual void attention_backward(Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k, Tensor v, Tensor out, Tensor stats, const AttentionSpec& spec);
  virtual void attention_probs(Tensor probs, Tensor q, Tensor k, const AttentionSpec& spec);
  // State-space (Mamba) layers and mixture-of-experts routing.
  virtual void causal_conv1d_forward(Tensor out, Tensor in, Tensor weight, Tensor bias);
  virtual void selective_scan_forward(Tensor y, Tensor x, Tensor dt, Tensor A_log, Tensor B, Tensor C, Tensor D, Tensor dt_bias, bool dt_softplus);
  virtual void moe_router_topk(Tensor top_weights, Tensor top_experts, Tensor logits);
  virtual void index_add_rows(Tensor out, Tensor src, Tensor index, Tensor scale);

 protected:
  [[noreturn]] void no_kernel(const char* op) const;
};

// The backend for a device (the CUDA one exists only in a SINKLAB_CUDA build; asking for it otherwise
// throws). The list form checks that every defined tensor lives on the same device; a copy between
// devices goes to the non-CPU side.
Backend& backend_for(Device device);
Backend& backend_for(std::initializer_list<Tensor> tensors, const char* op);
bool cuda_available();  // a CUDA build and at least one usable device
// cudnnGetVersion() of the loaded cuDNN (e.g. 91900); 0 in a build without CUDA.
int64_t cudnn_version();
// The CPU BLAS that multiplies matrices here, e.g. "OpenBLAS 0.3.21 (Zen kernels, 2 threads)". Its
// kernels differ per CPU (OpenBLAS picks them at run time; OPENBLAS_CORETYPE forces one) and give other
// last bits for the same GEMM: runs are bit-for-bit reproducible only with the same kernels and threads.
std::string cpu_blas_description();
// The description plus, when sinklab replaced OpenBLAS's own kernel choice at start-up
// (cpu/blas_kernels.hpp), what it replaced: the line every binary logs at start and results.h5 keeps.
std::string cpu_blas_summary();

}  // namespace sinklab
