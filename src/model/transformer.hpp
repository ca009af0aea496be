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

// --precision: how activations are stored (DESIGN.md, "Mixed precision").
//   fp32  every activation, gradient and weight f32
//   bf16  every activation and activation gradient is stored in bf16 (round to nearest even): the outputs
//         of the products, norms, rotary embedding, attention, the gated MLP, the residual stream and its
//         gradient, the logits and their gradient; each op reads bf16, computes in f32 and rounds what it
//         writes (ops.hpp, "bf16 storage"). The matrix products multiply the bf16 copy of the weights
//         (refreshed once per optimizer step) and accumulate in f32. Master weights, their gradients
//         (accumulated over micro-batches in f32), AdamW's state, the norms' and attention's statistics and
//         the per-token losses stay f32. The CPU computes the same values as a GPU, up to summation order.
enum class Precision : uint8_t { fp32, bf16 };
Precision parse_precision(const std::string& text);  // throws naming --precision
const char* precision_name(Precision mode);
std::string precision_names();  // "fp32 | bf16"
DType activation_dtype(Precision mode);  // f32 | bf16
// The rows of the head's logits chunk for `rows` rows of a vocabulary of `vocab`: f32 activations in chunks
// of at most 16M logits (the CPU reference's memory); bf16 ones in at most 4 chunks, each at most 1 GiB of
// logits when 4 are not needed (one pass of the head GEMM and the fused loss per chunk).
int64_t head_chunk_rows(int64_t rows, int64_t vocab, DType act);

// --fused-ops: the fused ops of the training step (docs/DESIGN.md, "The bf16 step": its seam). Each computes
// what the ops it replaces compute (the CPU runs exactly those), so "off" is the op-by-op reference path:
//   residual_norm  a pre-norm RMSNorm model adds each block's output to the residual stream and normalises
//                  the sum in one op (add_rmsnorm_forward: the FFN norm, and the next layer's or the final
//                  norm), and adds each norm's backward into the residual's gradient in one
//                  (rmsnorm_backward with accumulate)
struct StepFusions {
  bool residual_norm = false;
  std::string reason;  // why (or why not), for the log and results.h5
};
StepFusions choose_step_fusions(const ModelConfig& cfg, bool requested);

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
  ActivationBytes lay_out(const ModelConfig& cfg, Recompute recompute, DType act, int64_t batch,
                          int64_t input_seq, Device device, Arena* arena);
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
  // --fused-ops (on by default).
  void set_fused_ops(bool requested) { fusions_ = choose_step_fusions(cfg_, requested); }
  const StepFusions& fusions() const { return fusions_; }
  // --precision (the next forward reallocates the activations).
  void set_precision(Precision mode);
  Precision precision() const { return precision_; }
  DType act_dtype() const { return activation_dtype(precision_); }
  // --precision bf16: the bf16 copy of the parameters the products multiply [n_elements] (undefined
  // under fp32). By default every forward pass refreshes it from the f32 parameters, so any caller that
  // changed them is safe. A training loop that writes it itself (AdamW's update writes the rounded
  // parameters as it goes) calls manage_weights_lp(true) once and params_changed(lp_written) after every
  // change of the parameters: the copy is then refreshed only when it is stale (once per optimizer step
  // at most, none when the optimizer wrote it).
  Tensor flat_params_lp() const { return flat_params_lp_; }
  void manage_weights_lp(bool managed);
  void params_changed(bool lp_written);
  // Allocates the activations for micro-batches of [batch, seq] inputs (forward does it on a new shape) and
  // says how large they are.
  ActivationBytes prepare_activations(int64_t batch, int64_t seq);
  // What prepare_activations(batch, seq) allocates under `recompute`, counted by the same plan without a
  // model or an allocation (sinklab-pretrain --describe).
  static ActivationBytes activation_bytes(const ModelConfig& cfg, Recompute recompute, Precision precision,
                                          int64_t batch, int64_t seq);
  // Rows of the sequence the model runs on per input row: T + cfg.lead_positions().
  int64_t model_seq(int64_t seq) const { return seq + cfg_.lead_positions(); }

  // Philox-seeded initialisation of every parameter (stream = parameter index), zero gradients.
  void init_weights(uint64_t seed);
  void zero_grads();

  // One micro-batch: inputs/targets i32 [B,T] (T <= context; target -1 = not counted). Runs forward and
  // backward, ACCUMULATING grad_scale * d(sum of losses)/d(params) into the gradients and the sum of the
  // per-token losses into loss_sum (f64 [1] on the model's device), without waiting for the device. An
  // observer sees every layer of the forward pass (the trainer's stability monitor reads the residual
  // stream). grads_ready, when given, is told each span of backward_spans() as backward finishes it.
  void accumulate_forward_backward(Tensor inputs, Tensor targets, double grad_scale, Tensor loss_sum,
                                   LayerObserver* observer = nullptr, GradReadyObserver* grads_ready = nullptr);
  // The same, returning the sum of the per-token losses and (via counted) how many targets were counted
  // (waits for the device).
  double forward_backward(Tensor inputs, Tensor targets, double grad_scale, int64_t* counted = nullptr,
                          LayerObserver* observer = nullptr, GradReadyObserver* grads_ready = nullptr);
  // The targets of i32 [B,T] (host memory) the loss counts: those >= 0 that are not inside a prefix-LM's
  // prefix (whose next token is not predicted).
  int64_t count_targets(Tensor host_targets) const;
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
  // backward recomputes the layer). The norm that reads x_out: given (forward_layers, residual_norm fused),
  // the layer's last residual add also normalises into it (out, rstd, weight); absent, it is left to the
  // reader. norm1_done: the previous layer already normalised this layer's input.
  struct NextNorm {
    Tensor out, rstd;
    int64_t weight_index = -1;
  };
  void layer_forward(int l, Tensor x_out, LayerObserver* observer, const NextNorm* next_norm = nullptr,
                     bool norm1_done = false);
  // The attention block's mixing, from x_in to the input of o_proj (returned): norm (unless norm1_done),
  // qkv, attention, the V bias, gates, head sum. probs receives the observer's attention matrix.
  Tensor attention_mix_forward(int l, const ops::AttentionSpec& spec, LayerObserver* observer, Tensor* probs,
                               bool norm1_done = false);
  // The residual's gradient gets a pre-norm's backward added: d_res_ += Norm'(d_norm_out).
  void add_norm_backward(Tensor d_norm_out, Tensor in, Tensor mean, Tensor rstd, int64_t weight_index,
                         int64_t bias_index);
  // Returns the attention matrix when the observer supplied a buffer for it (LayerObserver::probs_output).
  Tensor attention_forward(int l, const ops::AttentionSpec& spec, LayerObserver* observer);
  Tensor model_targets(Tensor targets);
  // The head and the loss; the per-token losses' sum is added to loss_sum (no host synchronisation).
  void head_loss(Tensor targets, double grad_scale, bool backward, Tensor loss_sum);
  // The bf16 weights, refreshed when they may be stale (flat_params_lp).
  void refresh_weights_lp();
  // A device f64 [1] for the callers that want the loss on the host.
  Tensor loss_scratch();
  void backward_layers(Tensor inputs, GradReadyObserver* grads_ready);
  void attention_backward(int l, Tensor d_attn_in);
  // One norm of the model (--norm-type): out = RMSNorm(in) g, or LayerNorm(in) g + b when it has a bias
  // (mean is LayerNorm's only); backward writes d_in and adds to the parameters' gradients.
  void norm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor in, int64_t weight_index, int64_t bias_index);
  void norm_backward(Tensor d_in, Tensor d_out, Tensor in, Tensor mean, Tensor rstd, int64_t weight_index,
                     int64_t bias_index);
  // out = in . weight^T and its backward (d_in written, d_weight added to) under --precision: bf16 products
  // multiply the weight's bf16 copy.
  void project(Tensor out, Tensor in, Tensor weight);
  void project_backward(Tensor d_in, Tensor d_weight, Tensor d_out, Tensor in, Tensor weight);
  // A weight's view in the bf16 copy of the parameters (flat_params_lp). Every product's weight is a
  // parameter.
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
  StepFusions fusions_;
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
  Buffer low_precision_params_buffer_;  // bf16 [n_elements] under --precision bf16
  Tensor flat_params_lp_;
  bool lp_managed_ = false, lp_fresh_ = false;  // manage_weights_lp, params_changed
  Buffer head_expand_lp_buffer_;                // head_expand_ in bf16 under --precision bf16
  Buffer loss_scratch_buffer_;
};

}  // namespace sinklab::model
