// The op API. Model code (the trainable transformer and every HF family) is written once over these
// functions; the device of the tensors picks the backend at run time (cpu/ or cuda/).
//
// Conventions
// - Tensors are views (core/tensor.hpp). Shapes are given in the comment of each op; [*] means any
//   leading dimensions flattened into rows. Views with strides are accepted where the comment says
//   "strided"; otherwise the op requires contiguous rows.
// - Arithmetic dtype: f32 everywhere; the CPU backend also runs every op in f64 (the finite-difference
//   checks use it). Integer ids are i32.
// - bf16 storage (--precision bf16, docs/DESIGN.md "The bf16 step"): every op also takes bf16 tensors
//   wherever its comment allows an activation (its inputs, outputs and their gradients), alone or mixed
//   with f32 ones. It computes what it computes on f32 tensors holding their values (widened exactly),
//   reads every input before it writes any output (in-place calls stay valid) and rounds each output it
//   writes to bf16 (round to nearest even). Statistics (rstd, mean, attention stats, losses), parameters
//   other than the matmuls' weights, parameter gradients and reductions stay f32 / f64. copy and the fills
//   convert between dtypes themselves. The CPU backend implements this once, for every op
//   (cpu/bf16_storage.hpp); the CUDA kernels read and write bf16 directly.
// - Gradients: activation gradients (d_in, d_q, ...) are written (=). Parameter gradients (d_weight,
//   d_bias, d_table) are accumulated (+=), so gradient accumulation over micro-batches is free.
// - Optional arguments are an undefined Tensor{} (e.g. no bias).
// - An op that has no kernel on a tensor's device throws sinklab::Error naming the op and device.
// - Every op declared here (but the composites global_norm and clip_grad_norm) has one line in
//   op_list.hpp, from which its entry point and the backends' interface are made.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/enum_names.hpp"
#include "core/flat_range.hpp"
#include "core/tensor.hpp"

namespace sinklab::ops {

// ---------------------------------------------------------------------------------------------------
// Memory-level helpers
void fill(Tensor out, double value);
void copy(Tensor dst, Tensor src);            // same shape; any device pair; converts dtype (f32/f64/bf16/f16)
void add(Tensor out, Tensor a, Tensor b);     // out = a + b (residual add; backward is the identity)
void accumulate(Tensor dst, Tensor src, double alpha = 1.0);  // dst += alpha * src
void scale(Tensor x, double factor);          // x *= factor
double sum_squares(Tensor x);                 // sum of x^2, accumulated in double (grad norm pieces)
double max_abs(Tensor x);                     // max |x| (NaN if any element is NaN; 0 for an empty x): monitors
// The same reductions into a device scalar, without waiting for the device: out f64 [1] on x's device
// receives r (or combines r with its value when accumulate: + for the sums, max for max_abs, a NaN
// staying). r is formed in double in a fixed order (the CPU: logical index order, as sum_squares), so
// a training step can sum its losses and watch its activations without a host synchronisation.
enum class Reduction : uint8_t { sum, sum_squares, max_abs };
void reduce_into(Tensor out, Tensor x, Reduction kind, bool accumulate = false);
// Sum over the leading dimensions of `in` that `out` lacks: in [L..., out...] -> out [out...] (written, or
// added to when accumulate). out [C], in [R, C]: column sums (the gradient of a bias added to every row);
// out [H, C], in [B, T, H, C]: per-head sums over batch and positions. in and out strided rows.
// Each element sums its rows in row order, in double (f32 too): the result is the same for any number
// of threads, and the CUDA kernel's is the CPU's bit for bit.
void column_sum(Tensor out, Tensor in, bool accumulate = false);

// Random fill from the Philox stream (seed, stream): element i gets value i of the stream, so CPU and
// CUDA fills are identical.
void fill_normal(Tensor out, uint64_t seed, uint64_t stream, double mean, double std);
void fill_uniform(Tensor out, uint64_t seed, uint64_t stream, double low, double high);

// ---------------------------------------------------------------------------------------------------
// Matmul. out[M,N] = in[M,K] . weight[N,K]^T (+ bias[N])  (nn.Linear layout: weight rows are outputs)
// Operands f32 or f64 alike; or (--precision bf16) bf16 inputs (in and weight; d_out, in and weight in
// backward) with f32 or bf16 outputs: the bf16 products are exact and accumulate in f32 on both backends
// (cuBLASLt's CUBLAS_COMPUTE_32F; the CPU widens the operands to f32), a bf16 output is rounded once.
void linear_forward(Tensor out, Tensor in, Tensor weight, Tensor bias);
// d_in[M,K] = d_out[M,N] . weight[N,K]          (written; skipped if d_in undefined)
// d_weight[N,K] += d_out^T . in                  (skipped if undefined)
// d_bias[N] += sum over rows of d_out            (skipped if undefined)
void linear_backward(Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in, Tensor weight);

// General batched matmul: out[b] = alpha * op(a[b]) . op(b[b]) + beta * out[b], op = transpose when
// asked. 2-D ([M,K] x [K,N]) or 3-D with a common batch dimension; innermost dims contiguous.
void matmul(Tensor out, Tensor a, Tensor b, bool transpose_a, bool transpose_b, double alpha = 1.0,
            double beta = 0.0);

// ---------------------------------------------------------------------------------------------------
// Embedding lookup. out[N,d] = table[ids[n], :]; ids i32 [N]. Out-of-range ids throw.
void embedding_forward(Tensor out, Tensor ids, Tensor table);
// d_table[V,d] += scatter of d_out rows onto their ids.
void embedding_backward(Tensor d_table, Tensor d_out, Tensor ids);

// ---------------------------------------------------------------------------------------------------
// RMSNorm over the last dim: out = in * rstd * weight, rstd = 1/sqrt(mean(in^2) + eps).
// in/out [*, d]; weight [d] or undefined (no scale); rstd [*] saved for backward.
void rmsnorm_forward(Tensor out, Tensor rstd, Tensor in, Tensor weight, double eps);
// accumulate: d_in += dx (one rounding of the f32 sum), the residual stream's gradient; d_in may alias
// d_out only without it.
void rmsnorm_backward(Tensor d_in, Tensor d_weight, Tensor d_out, Tensor in, Tensor weight, Tensor rstd,
                      bool accumulate = false);
// A pre-norm block's residual add fused with the next RMSNorm: sum_out = a + b (stored in sum_out's
// dtype; sum_out may alias a), then out, rstd = rmsnorm_forward of sum_out as stored. Equal to add
// followed by rmsnorm_forward, in one pass over the rows.
void add_rmsnorm_forward(Tensor sum_out, Tensor out, Tensor rstd, Tensor a, Tensor b, Tensor weight, double eps);

// LayerNorm over the last dim: out = (in - mean) * rstd * weight + bias. mean/rstd [*] saved.
void layernorm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor in, Tensor weight, Tensor bias,
                       double eps);
void layernorm_backward(Tensor d_in, Tensor d_weight, Tensor d_bias, Tensor d_out, Tensor in,
                        Tensor weight, Tensor mean, Tensor rstd);

// ---------------------------------------------------------------------------------------------------
// Rotary position embedding, "rotate half" layout (HF Llama / GPT-NeoX): within the first rotary_dim
// features of each head, feature i pairs with i + rotary_dim/2; the rest pass through (partial rotary).
struct RopeConfig {
  int rotary_dim = 0;      // even, <= head_dim
  double base = 10000.0;   // rope_theta
  // Llama-3.1 frequency scaling (HF rope_type "llama3"); disabled when llama3_factor <= 0.
  double llama3_factor = 0.0;
  double llama3_low_freq_factor = 1.0;
  double llama3_high_freq_factor = 4.0;
  double llama3_original_max_position = 8192.0;
};
// x, out [B,T,H,dh] (strided; out may alias x). positions i32 [T] or undefined (= 0..T-1).
void rope_forward(Tensor out, Tensor x, Tensor positions, const RopeConfig& cfg);
// The rotation is orthogonal: backward rotates d_out by the opposite angle.
void rope_backward(Tensor d_x, Tensor d_out, Tensor positions, const RopeConfig& cfg);

// ---------------------------------------------------------------------------------------------------
// Elementwise activations and gated FFN products. Shapes [*], strided rows allowed.
enum class Activation : uint8_t { relu, gelu_exact, gelu_tanh, silu, sigmoid, elu_plus_one };
void activation_forward(Tensor out, Tensor in, Activation act);
void activation_backward(Tensor d_in, Tensor d_out, Tensor in, Activation act);
// out = act(gate) * up   (SwiGLU: silu, GeGLU: gelu, ReGLU: relu)
void gated_forward(Tensor out, Tensor gate, Tensor up, Activation act);
void gated_backward(Tensor d_gate, Tensor d_up, Tensor d_out, Tensor gate, Tensor up, Activation act);

// ---------------------------------------------------------------------------------------------------
// Softmax cross-entropy over a vocabulary, fused with its backward.
// logits [N,V]; targets i32 [N]; rows whose target == ignore_index contribute no loss and no gradient.
// losses [N] receives -log softmax(logits)[target] (0 for ignored rows).
// d_logits [N,V] (may alias logits; skipped if undefined) = (softmax - onehot) * grad_scale, 0 on
// ignored rows. grad_scale = 1/(number of counted rows) gives the gradient of the mean loss.
void cross_entropy(Tensor losses, Tensor d_logits, Tensor logits, Tensor targets, int ignore_index,
                   double grad_scale);

// ---------------------------------------------------------------------------------------------------
// AdamW (torch.optim.AdamW semantics, decoupled weight decay), one step t >= 1 for one tensor:
//   param *= 1 - lr*weight_decay;  m = b1 m + (1-b1) g;  v = b2 v + (1-b2) g^2
//   param -= lr/(1-b1^t) * m / (sqrt(v)/sqrt(1-b2^t) + eps)
// grad_scale multiplies each gradient first, as scale(grad, grad_scale) would (the clipping factor).
struct AdamWStep {
  double lr = 1e-3, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weight_decay = 0.0;
  int64_t step = 1;
  double grad_scale = 1.0;
};
void adamw_update(Tensor param, Tensor grad, Tensor m, Tensor v, const AdamWStep& s);

// Multi-tensor ops over a flat buffer (the model's parameters and gradients live in one each): ranges of
// it, each with a tag, in one call (one or two kernels on a GPU instead of one per tensor).
struct FlatRanges {
  std::vector<FlatRange> ranges;  // within [0, n) of the flat tensors; disjoint
  std::vector<int32_t> tags;      // one per range, >= 0
};
// out f64 [S] (S > every tag; written): out[t] = the sum over the ranges tagged t, in table order, of
// sum_squares of the range (the CPU: each as sum_squares forms it). flat f32 [n].
void sum_squares_ranges(Tensor out, Tensor flat, const FlatRanges& ranges);
// adamw_update over each range of param, grad, m, v (f32 [n]) with weight decay s.weight_decay where its
// tag is 1 and none where it is 0; param_lp (bf16 [n], optional) receives each updated element rounded
// (the bf16 weights the next forward reads). Elements outside every range are not touched.
void adamw_update_ranges(Tensor param, Tensor grad, Tensor m, Tensor v, Tensor param_lp, const FlatRanges& ranges,
                         const AdamWStep& s);

// Global gradient norm sqrt(sum over tensors of sum g^2), then clipping as torch.nn.utils.clip_grad_norm_:
// when norm > max_norm every gradient is scaled by max_norm / (norm + 1e-6). Returns the norm before
// clipping. (Data-parallel training combines sum_squares across ranks itself.)
double global_norm(std::span<const Tensor> grads);
double clip_grad_norm(std::span<const Tensor> grads, double max_norm);

// ---------------------------------------------------------------------------------------------------
// The generic attention operation (docs/DESIGN.md, "The generic attention operation"), for q [B,T,H,dh]
// and k, v [B,S,Hkv,dh] (strided
// views; H a multiple of Hkv: grouped-query attention), out [B,T,H,dh]. The first lead_keys keys of
// k/v are "lead keys" (learnable KV / K biases, paper Sec. 7.3 Table 4); the other S - lead_keys = T
// keys are the positional keys j' = j - lead_keys, aligned with the queries:
//   s_ij = scale * <q_i, k_j> + g_h(i - j')   over the keys j query i sees: every lead key (no bias)
//                                            and the positional keys the mask lets it see
//   w_ij = sim(s_ij);  Z_i = norm(w_i.);  o_i = sum_j (w_ij / Z_i) v_j
// (softpick: o_i = sum_j relu(w_ij) / Z_i v_j). The variant issue adds sim/norm/mask cases to these
// enums and to attention_math.hpp only (paper Sec. 7.3-7.4, Tables 14-15, Eq. 43-44, Appendix A).
// Valid combinations: exp needs a normaliser homogeneous in w (sum, p_norm) so that the running-max
// shift cancels; softpick needs sum; any other sim takes any norm (attn_config_error says why not).
enum class AttnSim : uint8_t {
  exp,           // e^s: softmax numerator, computed with the running max
  sigmoid,       // sigmoid(s + sigmoid_bias)
  elu_plus_one,  // elu(s) + 1
  identity,      // s (signed: pair it with max_abs_sum_one, or one)
  softpick,      // e^s - 1 (Zuhri et al. 2025): P = relu(e^s - 1) / (sum_j |e^s - 1| + 1e-6); norm sum only
};
enum class AttnNorm : uint8_t {
  sum,              // Z = (1/norm_alpha) * sum_j w_ij: rows of P sum to norm_alpha (1: softmax denominator)
                    // (softpick: Z = (1/norm_alpha) * (sum_j |w_ij| + 1e-6))
  one,              // Z = 1: no normalisation
  max_abs_sum_one,  // Z = max(|sum_j w_ij|, 1)
  p_norm,           // Z = (sum_j w_ij^norm_p)^(1/norm_p)  (Eq. 43; with exp: Eq. 44)
};
// The text of each sim and norm: the --attn-sim / --attn-norm values (model/config.cpp), config.json's,
// the words of the attention dispatch's messages.
inline constexpr EnumName<AttnSim> kAttnSimNames[] = {{AttnSim::exp, "exp"},
                                                      {AttnSim::sigmoid, "sigmoid"},
                                                      {AttnSim::elu_plus_one, "elu-plus-one"},
                                                      {AttnSim::identity, "identity", "(Tables 6, 15)"},
                                                      {AttnSim::softpick, "softpick", "(rectified softmax)"}};
inline constexpr EnumName<AttnNorm> kAttnNormNames[] = {{AttnNorm::sum, "sum"},
                                                        {AttnNorm::one, "one"},
                                                        {AttnNorm::max_abs_sum_one, "max-abs-sum-one"},
                                                        {AttnNorm::p_norm, "p-norm"}};
enum class AttnMask : uint8_t {  // on query i and positional key j' (lead keys are always visible)
  causal,          // j' <= i
  sliding_window,  // i - window < j' <= i
  prefix_lm,       // j' < prefix (bidirectional prefix) or j' <= i
};
// The additive position bias g_h(n), n = i - j' (paper Appendix A; h is the query head).
enum class AttnPosBias : uint8_t {
  none,
  alibi,     // g_h(n) = -slope_h * n, slope_h of Eq. 7 / the released code (math::attn_alibi_slope)
  relative,  // T5, unidirectional: g_h(n) = relative_bias[h, bucket(max(n, 0))] (math::attn_relative_bucket)
};

// Which implementation runs the operation (attention_dispatch.hpp decides; --attn-kernel requests):
// auto picks the fastest that can express the spec; a named one is used or refused with the reason.
enum class AttnKernel : uint8_t {
  auto_select,  // cuDNN when the spec fits, else the flash kernel, else the GEMM path, else the reference kernel
  cudnn,        // cuDNN fused SDPA (CUDA): the softmax family
  flash,        // sinklab's flash-style kernel (CUDA): sigmoid / elu+1 / identity
  gemm,         // scores through batched cuBLASLt GEMMs and a fused row kernel (CUDA, bf16): every spec
  reference,    // the reference kernels (CPU backend, cuda/attention.cu): every spec
};

// Every parameter of the computed function (docs/DESIGN.md, "The generic attention operation"): a plain
// struct, copied by value into every kernel (math::AttnConfig adds what the spec's tensors say). A new
// similarity, normaliser or mask parameter is one field here and its use in attention_math.hpp.
struct AttnParams {
  double scale = 0.0;  // 0 means 1/sqrt(dh)
  AttnSim sim = AttnSim::exp;
  AttnNorm norm = AttnNorm::sum;
  AttnMask mask = AttnMask::causal;
  int64_t window = 0;         // sliding_window: keys per query (>= 1)
  int64_t prefix = 0;         // prefix_lm: length of the bidirectional prefix (>= 0)
  double sigmoid_bias = 0.0;  // sigmoid: b in sigmoid(s + b) (e.g. -log(n), FlashSigmoid style)
  double norm_alpha = 1.0;    // sum: rows of P sum to alpha (Table 14 left; Z = sum / alpha), > 0
  double norm_p = 1.0;        // p_norm: p > 0
  // Keys 0..lead_keys-1 of k/v are seen by every query, without position bias (KV biases k*, v*; K
  // biases: v* = 0). S = lead_keys + T. Their columns are part of attention_probs.
  int64_t lead_keys = 0;
  AttnPosBias pos_bias = AttnPosBias::none;
  int64_t relative_max_distance = 128;  // relative: the distance from which on every distance falls into the last bucket
};

// One attention call's configuration: the parameters, the kernel request and the learned tensors.
struct AttentionSpec : AttnParams {
  AttnKernel kernel = AttnKernel::auto_select;  // the request; the computed function does not depend on it
  bool deterministic = true;  // backward: cuDNN's deterministic algorithm (the other kernels always are)
  // relative: the learned table relative_bias [H, num_buckets] (dtype of q). d_relative_bias: optional
  // [H, num_buckets] output of attention_backward, dL/d relative_bias summed over batch and positions
  // (written, not accumulated).
  Tensor relative_bias;
  Tensor d_relative_bias;
  // Learned per-head sink logit S_h (gpt-oss style): an extra "key" every query sees, with score S_h
  // and a zero value vector, so it enters only the normaliser (softmax: Z_i = e^{S_h} + sum_j e^{s_ij}).
  // Optional [H], the dtype of q; not with norm one. d_sink_logit: optional [H] output of
  // attention_backward, dL/dS_h summed over batch and queries (written, not accumulated).
  Tensor sink_logit;
  Tensor d_sink_logit;
};

// stats [B,H,T] f32/f64: per-row statistics the backward needs to recompute the weights without
// storing the T x T matrix (for softmax and softpick: the log of the normaliser, log Z_i; for
// variants without the running max: the row reduction R_i the normaliser is made of, see
// attention_math.hpp).
// probs: optional [B,H,T,S] output, the matrix attention_probs would write (bit for bit), formed in the
// same pass so that a probe need not recompute it (the survey's forward: ~10 % of its time at T = 64).
void attention_forward(Tensor out, Tensor stats, Tensor q, Tensor k, Tensor v, const AttentionSpec& spec,
                       Tensor probs = Tensor{});
void attention_backward(Tensor d_q, Tensor d_k, Tensor d_v, Tensor d_out, Tensor q, Tensor k, Tensor v,
                        Tensor out, Tensor stats, const AttentionSpec& spec);
// The normalised attention matrix probs [B,H,T,S] (0 where masked; the lead keys are columns
// 0..lead_keys-1) — what the sink probe measures. For variants whose rows are not a distribution:
// w/Z as computed (softpick: relu(w)/Z; the probe applies proxy scores).
void attention_probs(Tensor probs, Tensor q, Tensor k, const AttentionSpec& spec);


// ===================================================================================================
// State-space (Mamba) layers and mixture-of-experts routing: forward only (the survey runs pretrained
// hybrids such as Jamba; nothing here is trained). Per-element math: mamba_math.hpp.

// Causal depthwise 1-D convolution over time: channel c has its own K-tap filter (nn.Conv1d with
// groups = C and padding K-1, keeping the first T outputs, as Mamba's conv1d):
//   out[b,t,c] = bias[c] + sum_{k<K} weight[c,k] * in[b, t-(K-1)+k, c]      (in = 0 before t = 0)
// in, out [B,T,C] (strided, contiguous channels; out must not overlap in); weight [C,K] (the HF
// conv1d.weight [C,1,K] without its middle dim); bias [C] or undefined.
void causal_conv1d_forward(Tensor out, Tensor in, Tensor weight, Tensor bias);

// Selective scan (Mamba's S6 recurrence) over channels d < Di and states n < N, from a zero state:
//   A[d,n]       = -exp(A_log[d,n])                    (the parameter as checkpoints store it)
//   delta[b,t,d] = softplus(dt[b,t,d] + dt_bias[d])   (without softplus when dt_softplus is false)
//   h[b,t,d,n]   = exp(delta A[d,n]) h[b,t-1,d,n] + delta B[b,t,n] x[b,t,d]
//   y[b,t,d]     = sum_n C[b,t,n] h[b,t,d,n] + D[d] x[b,t,d]
// x, dt, y [B,T,Di] (strided, contiguous last dim; y may alias x or dt); A_log [Di,N]; B, C [B,T,N]
// (strided); D [Di] or undefined (no skip); dt_bias [Di] or undefined. softplus(u) = log(1 + e^u),
// and u itself above 20 (torch's threshold). The output gate y * silu(z) is not part of the scan:
// gated_forward(out, z, y, silu) does it.
void selective_scan_forward(Tensor y, Tensor x, Tensor dt, Tensor A_log, Tensor B, Tensor C, Tensor D,
                            Tensor dt_bias, bool dt_softplus);

// Mixture-of-experts router (HF JambaTopKRouter): p = softmax(logits[n,:]) over the E experts, then the
// k largest p in descending order (ties: the lower expert index first). The weights are the softmax
// probabilities themselves, NOT renormalised over the k chosen (Mixtral renormalises, Jamba does not).
// logits [N,E] (contiguous rows); top_weights [N,k] (dtype of logits); top_experts i32 [N,k]; k <= E.
void moe_router_topk(Tensor top_weights, Tensor top_experts, Tensor logits);

// out[index[m], :] += scale[m] * src[m, :] for m < M (torch index_add_ with a per-row factor): the
// combine step of a mixture of experts, after an expert ran on the rows gathered for it (the gather is
// embedding_forward). out [N,d], src [M,d] (strided rows); index i32 [M] in [0, N); scale [M] or
// undefined (= 1). Repeated indices add in order m = 0, 1, ...
void index_add_rows(Tensor out, Tensor src, Tensor index, Tensor scale);

}  // namespace sinklab::ops
