// The trainable transformer, written once over the op API (backend/ops.hpp): forward, backward and
// the probe's forward with per-layer taps. Parameters and gradients each live in one flat buffer
// laid out by param_layout(), so data-parallel all-reduce and ZeRO-1 sharding see one array.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "backend/attention_dispatch.hpp"
#include "core/arena.hpp"
#include "backend/memory.hpp"
#include "backend/ops.hpp"
#include "core/flat_range.hpp"
#include "model/config.hpp"
#include "model/layer_taps.hpp"

namespace sinklab::model {

using sinklab::LayerObserver;
using sinklab::LayerTaps;

// Told during backward which gradients are final: each part of the flat gradient buffer as soon as
// the backward pass has written its last contribution to it. Data-parallel training starts reducing
// that part while backward goes on with the earlier layers (train/grad_sync.hpp).
class GradReadyObserver {
 public:
  virtual ~GradReadyObserver() = default;
  virtual void on_grads_ready(int64_t begin, int64_t end) = 0;  // flat elements [begin, end)
};

// --recompute: which activations backward recomputes from each layer's input instead of keeping them
// from the forward pass (DESIGN.md, "Activation recomputation"). The recomputed forward runs the same ops
// on the same inputs, so gradients are the same bits as without.
//   none       every layer keeps everything its backward reads
//   attention  a layer keeps its input and its FFN block; the attention block's mixing (norm, qkv,
//              attention, gates) is recomputed before its backward
//   block      a layer keeps only its input; the whole layer is recomputed before its backward
enum class Recompute : uint8_t { none, attention, block };
Recompute parse_recompute(const std::string& text);  // throws naming --recompute
const char* recompute_name(Recompute mode);
std::string recompute_names();  // "none | attention | block"

// --precision: the numerics of the matrix products (DESIGN.md, "Mixed precision").
//   fp32  every operand and result f32
//   bf16  each matmul reads its input and weight rounded to bf16 (round to nearest even), accumulates in
//         f32 and rounds its output to bf16; backward rounds the incoming gradient alike, rounds d_input and
//         adds d_weight in f32; the attention op reads bf16 q, k, v and the gradient of its output is
//         rounded (its output is rounded where it enters the o projection). Master
//         weights, their gradients, AdamW's state, norms, softmax statistics, the residual stream and the
//         loss stay f32. On CUDA the matmuls run as bf16 GEMMs; the CPU computes the same values.
enum class Precision : uint8_t { fp32, bf16 };
Precision parse_precision(const std::string& text);  // throws naming --precision
const char* precision_name(Precision mode);
std::string precision_names();  // "fp32 | bf16"

// The activation buffer of one micro-batch shape, in bytes (each tensor rounded up to 64 bytes):
// kept_per_layer x layers + recomputed (one set every layer shares) + rest (the head's logits chunk, the
// final norm, backward's gradients workspace).
struct ActivationBytes {
  int64_t kept_per_layer = 0, recomputed = 0, rest = 0;
  int64_t total(int layers) const { return kept_per_layer * layers + recomputed + rest; }
};

// The tensors of one micro-batch shape's activation buffer. One plan lays them out (transformer_setup.cpp):
// Transformer::ensure_activations carves them out of its buffer, Transformer::activation_bytes only counts
// them. The Transformer holds them as its base, so its passes name them as members.
struct ActivationTensors {
  struct LayerActs {  // what backward needs of layer l, all [N = B*T', ...] (T' = T + lead positions)
    Tensor x_in, xn1, mean1, rstd1, mean2, qkv, feat_in, feat_hidden, feat_act, feat, k_ext, v_ext, att, att_biased, stats, gate_logits,
        att_gated, att_sum, pre_norm1, x_mid, xn2, rstd2, ffn_in, ffn_h, pre_norm2;
  };
  std::vector<LayerActs> layers_;
  Tensor x_final_in_, xf_, meanf_, rstdf_, logits_, losses_;
  Tensor d_res_, d_tmp_, d_xn_, d_attn_in_, d_qkv_, d_feat_, d_feat_hidden_, d_k_ext_, d_v_ext_, d_att_, d_att_gated_,
      d_att_sum_, d_gate_logits_, d_gate_small_, d_pre_, d_ffn_in_, d_ffn_h_, d_xf_, tmp_, d_sinks_,
      d_relative_;
  int64_t head_chunk_rows_ = 0;

  // The plan: every tensor of a [batch, input_seq] micro-batch under `recompute`, kept per layer or
  // recomputed (one copy, layer 0's, that every layer uses in turn). With an arena it carves them out of
  // it; without, the tensors are null views and only their bytes (each rounded up to 64) are counted.
  ActivationBytes lay_out(const ModelConfig& cfg, Recompute recompute, int64_t batch, int64_t input_seq,
                          Device device, Arena* arena);
};

class Transformer : private ActivationTensors {
 public:
  Transformer(const ModelConfig& cfg, Device device = Device::cpu());

  const ModelConfig& config() const { return cfg_; }
  Device device() const { return device_; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  int64_t num_parameters() const;      // without alignment padding
  // Without the word embedding and the unembedding (the paper's count: "60M parameters except for word
  // embeddings and unembeddings", Sec. 4).
  int64_t num_parameters_non_embedding() const;
  // Training FLOPs per token at sequence length seq, forward and backward, counted as PaLM does
  // (Chowdhery et al. 2022, App. B) and nanoGPT's MFU after it: 6 per parameter of the matrix products
  // (every parameter but the embedding tables, which are gathered) plus 12 * L * H * dh * seq for the
  // attention's QK^T and PV, every key counted (causal masking not discounted).
  double flops_per_token(int64_t seq) const;
  Tensor flat_params() const { return flat_params_; }  // [n_elements]
  Tensor flat_grads() const { return flat_grads_; }    // [n_elements]
  Tensor param(const std::string& name) const;
  Tensor grad(const std::string& name) const;
  const ops::AttentionSpec& attention_spec() const { return attention_; }
  // The attention op's spec for layer l with its per-layer tensors (sink logits, relative bias).
  ops::AttentionSpec layer_spec(int l, bool backward) const;
  // --attn-kernel: the kernel the attention calls of training ask for (backend/attention_dispatch.hpp);
  // --attn-deterministic: the backward's deterministic algorithm where a kernel has a faster other one.
  void set_attention_kernel(ops::AttnKernel request, bool deterministic = true) {
    attention_.kernel = request;
    attention_.deterministic = deterministic;
  }
  // The kernel those calls run on this model's device, and why; throws "--attn-kernel ...: why not" when
  // the requested one cannot run this model's attention.
  ops::AttnKernelChoice attention_kernel() const;
  // --recompute (the next forward reallocates the activations).
  void set_recompute(Recompute mode);
  Recompute recompute() const { return recompute_; }
  // --precision.
  void set_precision(Precision mode);
  Precision precision() const { return precision_; }
  // Allocates the activations for micro-batches of [batch, seq] inputs (forward does it on a new shape) and
  // says how large they are.
  ActivationBytes prepare_activations(int64_t batch, int64_t seq);
  // What prepare_activations(batch, seq) allocates under `recompute`, counted by the same plan without a
  // model or an allocation (sinklab-pretrain --describe).
  static ActivationBytes activation_bytes(const ModelConfig& cfg, Recompute recompute, int64_t batch, int64_t seq);
  // Rows of the sequence the model runs on per input row: T + cfg.lead_positions().
  int64_t model_seq(int64_t seq) const { return seq + cfg_.lead_positions(); }

  // Philox-seeded initialisation of every parameter (stream = parameter index), zero gradients.
  void init_weights(uint64_t seed);
  void zero_grads();

  // One micro-batch: inputs/targets i32 [B,T] (T <= context; target -1 = not counted). Runs forward and
  // backward, ACCUMULATING grad_scale * d(sum of losses)/d(params) into the gradients; returns the sum
  // of the per-token losses and (via counted) how many targets were counted. An observer sees every
  // layer of the forward pass (the trainer's stability monitor reads the residual stream).
  // grads_ready, when given, is told each span of backward_spans() as backward finishes it.
  double forward_backward(Tensor inputs, Tensor targets, double grad_scale, int64_t* counted = nullptr,
                          LayerObserver* observer = nullptr, GradReadyObserver* grads_ready = nullptr);
  // The spans of the flat gradient buffer in the order backward finishes them: the head and final norm,
  // layer L-1, ..., layer 0, then the embeddings and the tensors every layer shares (the sink token,
  // learned positions, the relative bias). They partition [0, flat size) and run from its end to its
  // start, because param_layout places the embeddings first and the head last.
  const std::vector<FlatRange>& backward_spans() const { return backward_spans_; }
  // Forward only: the sum of per-token losses and their count; token_losses, when given (f32 [B,T] of
  // the inputs' positions, any device), receives each target's loss (0 where not counted).
  double forward_loss(Tensor inputs, Tensor targets, int64_t* counted = nullptr, Tensor token_losses = Tensor{});
  // Forward only, no loss: calls observer.on_layer for every layer (the sink probe).
  void forward_observe(Tensor inputs, LayerObserver& observer);

 private:
  // Where each parameter of layer l sits in specs_ (-1: the variant has no such tensor).
  struct LayerIndex {
    int64_t norm1 = -1, norm1_bias = -1, norm2_bias = -1, qkv = -1, kernel_mlp1 = -1, kernel_mlp2 = -1, k_bias = -1, v_bias = -1, sinks = -1,
            gate = -1, o = -1, norm2 = -1, ffn_in = -1, down = -1;
  };
  // Construction (transformer_setup.cpp).
  void index_parameters();
  void make_backward_spans();
  void make_constants();
  void ensure_activations(int64_t batch, int64_t seq);
  void embed(Tensor inputs);
  void embed_backward(Tensor inputs);
  void forward_layers(Tensor inputs, LayerObserver* observer);
  // Layer l's forward from layers_[l].x_in to x_out (the next layer's input, or a scratch buffer when
  // backward recomputes the layer).
  void layer_forward(int l, Tensor x_out, LayerObserver* observer);
  // The attention block's mixing, from x_in to the input of o_proj (returned): norm, qkv, attention, the V
  // bias, gates, head sum. probs receives the observer's attention matrix.
  Tensor attention_mix_forward(int l, const ops::AttentionSpec& spec, LayerObserver* observer, Tensor* probs);
  // Returns the attention matrix when the observer supplied a buffer for it (LayerObserver::probs_output).
  Tensor attention_forward(int l, const ops::AttentionSpec& spec, LayerObserver* observer);
  Tensor model_targets(Tensor targets);
  double head_loss(Tensor targets, double grad_scale, bool backward, int64_t* counted);
  void backward_layers(Tensor inputs, GradReadyObserver* grads_ready);
  void attention_backward(int l, Tensor d_attn_in);
  // One norm of the model (--norm-type): out = RMSNorm(in) g, or LayerNorm(in) g + b when it has a bias
  // (mean is LayerNorm's only); backward writes d_in and adds to the parameters' gradients.
  void norm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor in, int64_t weight_index, int64_t bias_index);
  void norm_backward(Tensor d_in, Tensor d_out, Tensor in, Tensor mean, Tensor rstd, int64_t weight_index,
                     int64_t bias_index);
  // out = in . weight^T and its backward (d_in written, d_weight added to) under --precision.
  void project(Tensor out, Tensor in, Tensor weight);
  void project_backward(Tensor d_in, Tensor d_weight, Tensor d_out, Tensor in, Tensor weight);
  // --precision bf16: x's values rounded to bf16 in place (a no-op under fp32).
  void round_to_precision(Tensor x);
  // A contiguous bf16 tensor shaped like `like` in scratch slot `slot` (grown on demand; nothing in a slot
  // outlives one project call), and one holding x's values rounded.
  enum LowPrecisionSlot { kLpIn, kLpOut, kLpDin, kLpSlots };
  Tensor low_precision_scratch(int slot, const Tensor& like);
  Tensor low_precision_copy(int slot, const Tensor& x);
  // A weight's bf16 values: its view in the bf16 copy of the parameters, which forward_layers refreshes at
  // the start of every pass (one rounding per pass, not per product: the head's weight serves every
  // logits chunk). Every product's weight is a parameter.
  Tensor low_precision_weight(const Tensor& weight);
  Tensor weight(int64_t first_param_index, int64_t rows, int64_t cols, bool grad) const;
  Tensor at(int64_t param_index, bool grad) const;  // the parameter (or its gradient) in its own shape
  int64_t find(const std::string& name) const;      // -1 when absent

  ModelConfig cfg_;
  Device device_;
  std::vector<ParamSpec> specs_;
  std::map<std::string, size_t> index_;
  std::vector<LayerIndex> layer_index_;
  int64_t embed_index_ = -1, positions_index_ = -1, sink_token_index_ = -1, relative_index_ = -1,
          final_norm_index_ = -1, final_norm_bias_index_ = -1, head_index_ = -1;
  int64_t n_elements_ = 0;
  std::vector<FlatRange> backward_spans_;  // [L + 2]: top, layers L-1..0, bottom
  Buffer params_buffer_, grads_buffer_;
  Tensor flat_params_, flat_grads_;
  ops::AttentionSpec attention_;
  ops::RopeConfig rope_;
  // Constants: the sinusoidal table [C+lead, d], the bucket-index bias [H, buckets], a zero sink logit
  // [H] (softmax-plus-one), the head-expansion matrix [H, H*dh] of headwise gates.
  Buffer constants_buffer_;
  Tensor sinusoidal_, bucket_bias_, zero_sink_, head_expand_;

  // Activations for the current (batch, seq) shape.
  int64_t batch_ = 0, seq_ = 0, input_seq_ = 0;  // seq_ = T' = input_seq_ + lead positions
  Buffer acts_buffer_, targets_buffer_;
  Tensor targets_;  // the rest are ActivationTensors'
  Recompute recompute_ = Recompute::none;
  ActivationBytes activation_bytes_;
  Precision precision_ = Precision::fp32;
  Buffer low_precision_buffers_[kLpSlots];
  Buffer low_precision_params_buffer_;  // bf16 [n_elements] under --precision bf16
  Tensor flat_params_lp_;
};

}  // namespace sinklab::model
