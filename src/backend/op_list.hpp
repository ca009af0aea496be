// Every op of the API, once: the list from which ops.cpp makes the ops:: entry points and the Backend's
// default "no <op> kernel" bodies, backend.hpp the Backend virtuals, and each backend header its
// overrides. Documentation, default arguments and the composite ops (global_norm, clip_grad_norm):
// ops.hpp, whose declarations the generated entry points must match (they define ops::<name>, which
// does not compile for a signature ops.hpp lacks).
//
// SINKLAB_OPS(OP, CPU_ONLY_OP) calls OP or CPU_ONLY_OP once per op, in ops.hpp's order, with
//   (return type, name, (parameters), (arguments))
// OP for the ops both backends implement, CPU_ONLY_OP for those the CUDA backend has no kernel for yet
// (they keep the default that throws; none at present). Adding an op: its documented declaration in
// ops.hpp, one line here, its kernels (CpuBackend::<name> in cpu/*.cpp; for an OP line
// CudaBackend::<name> in cuda/*.cu), argument checks both kernels share in op_checks.hpp, and its tests.
#pragma once

#define SINKLAB_OPS(OP, CPU_ONLY_OP)                                                                            \
  /* Memory-level helpers: cpu/memory.cpp, cuda/memory.cu */                                                    \
  OP(void, fill, (Tensor out, double value), (out, value))                                                      \
  OP(void, copy, (Tensor dst, Tensor src), (dst, src))                                                          \
  OP(void, add, (Tensor out, Tensor a, Tensor b), (out, a, b))                                                  \
  OP(void, accumulate, (Tensor dst, Tensor src, double alpha), (dst, src, alpha))                               \
  OP(void, scale, (Tensor x, double factor), (x, factor))                                                       \
  OP(double, sum_squares, (Tensor x), (x))                                                                      \
  OP(double, max_abs, (Tensor x), (x))                                                                          \
  OP(void, reduce_into, (Tensor out, Tensor x, Reduction kind, bool accumulate), (out, x, kind, accumulate))            \
  OP(void, column_sum, (Tensor out, Tensor in, bool accumulate), (out, in, accumulate))                         \
  OP(void, fill_normal, (Tensor out, uint64_t seed, uint64_t stream, double mean, double std),                  \
     (out, seed, stream, mean, std))                                                                            \
  OP(void, fill_uniform, (Tensor out, uint64_t seed, uint64_t stream, double low, double high),                 \
     (out, seed, stream, low, high))                                                                            \
  /* Matmul: cpu/linear.cpp, cuda/linear.cu */                                                                  \
  OP(void, linear_forward, (Tensor out, Tensor in, Tensor weight, Tensor bias), (out, in, weight, bias))        \
  OP(void, linear_backward, (Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in, Tensor weight), \
     (d_in, d_weight, d_bias, d_out, in, weight))                                                               \
  OP(void, matmul,                                                                                              \
     (Tensor out, Tensor a, Tensor b, bool transpose_a, bool transpose_b, double alpha, double beta),           \
     (out, a, b, transpose_a, transpose_b, alpha, beta))                                                        \
  /* Embedding: cpu/embedding.cpp, cuda/embedding.cu */                                                         \
  OP(void, embedding_forward, (Tensor out, Tensor ids, Tensor table), (out, ids, table))                        \
  OP(void, embedding_backward, (Tensor d_table, Tensor d_out, Tensor ids), (d_table, d_out, ids))               \
  /* Norms: cpu/norms.cpp, cuda/norms.cu */                                                                     \
  OP(void, rmsnorm_forward, (Tensor out, Tensor rstd, Tensor in, Tensor weight, double eps),                    \
     (out, rstd, in, weight, eps))                                                                              \
  OP(void, rmsnorm_backward,                                                                                    \
     (Tensor d_in, Tensor d_weight, Tensor d_out, Tensor in, Tensor weight, Tensor rstd, bool accumulate),      \
     (d_in, d_weight, d_out, in, weight, rstd, accumulate))                                                     \
  OP(void, add_rmsnorm_forward, (Tensor sum_out, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor weight, double eps), \
     (sum_out, out, rstd, a, b, weight, eps))                                                                   \
  OP(void, layernorm_forward,                                                                                   \
     (Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor weight, Tensor bias, double eps),                 \
     (out, mean, rstd, in, weight, bias, eps))                                                                  \
  OP(void, layernorm_backward,                                                                                  \
     (Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in, Tensor weight, Tensor mean,         \
      Tensor rstd),                                                                                             \
     (d_in, d_weight, d_bias, d_out, in, weight, mean, rstd))                                                   \
  /* Rotary position embedding: cpu/rope.cpp, cuda/rope.cu */                                                   \
  OP(void, rope_forward, (Tensor out, Tensor x, Tensor positions, const RopeConfig& cfg),                       \
     (out, x, positions, cfg))                                                                                  \
  OP(void, rope_backward, (Tensor d_x, Tensor d_out, Tensor positions, const RopeConfig& cfg),                  \
     (d_x, d_out, positions, cfg))                                                                              \
  /* Activations and gated FFN products: cpu/activations.cpp, cuda/elementwise.cu */                            \
  OP(void, activation_forward, (Tensor out, Tensor in, Activation act), (out, in, act))                         \
  OP(void, activation_backward, (Tensor d_in, Tensor d_out, Tensor in, Activation act), (d_in, d_out, in, act)) \
  OP(void, gated_forward, (Tensor out, Tensor gate, Tensor up, Activation act), (out, gate, up, act))           \
  OP(void, gated_backward, (Tensor d_gate, Tensor d_up, Tensor d_out, Tensor gate, Tensor up, Activation act),  \
     (d_gate, d_up, d_out, gate, up, act))                                                                      \
  /* Cross-entropy: cpu/cross_entropy.cpp, cuda/cross_entropy.cu */                                            \
  OP(void, cross_entropy,                                                                                       \
     (Tensor losses, Tensor d_logits, Tensor logits, Tensor targets, int ignore_index, double grad_scale),      \
     (losses, d_logits, logits, targets, ignore_index, grad_scale))                                             \
  /* AdamW: cpu/adamw.cpp, cuda/elementwise.cu */                                                              \
  OP(void, adamw_update, (Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& s),                   \
     (param, grad, m, v, s))                                                                                    \
  /* Multi-tensor ops over flat buffers: cpu/adamw.cpp, cuda/multi_tensor.cu */                                 \
  OP(void, sum_squares_ranges, (Tensor out, Tensor flat, const FlatRanges& ranges), (out, flat, ranges))                \
  OP(void, adamw_update_ranges,                                                                                 \
     (Tensor param, Tensor grad, Tensor m, Tensor v, Tensor param_lp, const FlatRanges& ranges, const AdamWStep& s), \
     (param, grad, m, v, param_lp, ranges, s))                                                                  \
  /* Attention: cpu/attention.cpp, cuda/attention.cu (which hands calls on to the fast kernels) */             \
  OP(void, attention_forward,                                                                                   \
     (Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v, const AttentionSpec& spec, Tensor probs),         \
     (out, stats, q, k, v, spec, probs))                                                                        \
  OP(void, attention_backward,                                                                                  \
     (Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k, Tensor v, Tensor out,               \
      Tensor stats, const AttentionSpec& spec),                                                                 \
     (d_q, d_k, d_v, d_out, q, k, v, out, stats, spec))                                                         \
  OP(void, attention_probs, (Tensor probs, Tensor q, Tensor k, const AttentionSpec& spec), (probs, q, k, spec)) \
  /* State-space (Mamba) layers and mixture-of-experts routing: cpu/mamba.cpp, cuda/mamba.cu */                \
  OP(void, causal_conv1d_forward, (Tensor out, Tensor in, Tensor weight, Tensor bias), (out, in, weight, bias)) \
  OP(void, selective_scan_forward,                                                                              \
     (Tensor y, Tensor x, Tensor dt, Tensor A_log, Tensor B, Tensor C, Tensor D, Tensor dt_bias, bool dt_softplus), \
     (y, x, dt, A_log, B, C, D, dt_bias, dt_softplus))                                                          \
  OP(void, moe_router_topk, (Tensor top_weights, Tensor top_experts, Tensor logits), (top_weights, top_experts, logits)) \
  OP(void, index_add_rows, (Tensor out, Tensor src, Tensor index, Tensor scale), (out, src, index, scale))

// A backend's own declarations: SINKLAB_OPS(SINKLAB_OP_OVERRIDE, SINKLAB_OP_OVERRIDE) in its class declares
// every op; SINKLAB_OP_INHERITED in the CPU_ONLY_OP slot leaves those ops to the Backend default.
#define SINKLAB_OP_OVERRIDE(ret, name, params, args) ret name params override;
#define SINKLAB_OP_INHERITED(ret, name, params, args)
