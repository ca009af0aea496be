// The Transformer's forward and backward passes over the op API (construction, parameters and the
// activation buffers: transformer_setup.cpp).
#include "model/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <vector>

#include "backend/backend.hpp"
#include "backend/ledger.hpp"
#include "core/error.hpp"

namespace sinklab::model {
namespace {

// Per-head view of columns [col, col + heads*dh) of a [B*T, width] matrix: [B,T,heads,dh].
Tensor head_view(Tensor m, int64_t batch, int64_t seq, int64_t col, int64_t heads, int64_t dh) {
  return m.split_dim(0, batch, seq).slice(2, col, heads * dh).split_dim(2, heads, dh);
}

// A view of `base` with explicit shape and strides (stride 0 broadcasts a dimension; only ever a source).
Tensor strided(Tensor base, std::initializer_list<int64_t> shape, std::initializer_list<int64_t> strides) {
  Tensor t = base;
  t.ndim = int(shape.size());
  int d = 0;
  for (int64_t s : shape) t.shape[size_t(d++)] = s;
  d = 0;
  for (int64_t s : strides) t.stride[size_t(d++)] = s;
  return t;
}

}  // namespace

// ---------------------------------------------------------------------------------------------------
// --precision (transformer.hpp, Precision). Under bf16 the activations are bf16 tensors, so a product
// reads and writes them as they are and multiplies the weight's bf16 copy; d_weight is added in f32, as
// the f32 master gradients accumulate over micro-batches (Megatron's "gradient accumulation in fp32";
// autocast would round each micro-batch's).
void Transformer::project(Tensor out, Tensor in, Tensor weight) {
  ops::linear_forward(out, in, precision_ == Precision::fp32 ? weight : low_precision_weight(weight), Tensor{});
}

void Transformer::project_backward(Tensor d_in, Tensor d_weight, Tensor d_out, Tensor in, Tensor weight) {
  const bool lp = precision_ == Precision::bf16;
  ops::linear_backward(d_in, d_weight, Tensor{}, d_out, d_weight.defined() ? in : Tensor{},
                       d_in.defined() ? (lp ? low_precision_weight(weight) : weight) : Tensor{});
}

Tensor Transformer::low_precision_weight(const Tensor& weight) {
  const auto at_byte = reinterpret_cast<uintptr_t>(weight.data), base = reinterpret_cast<uintptr_t>(flat_params_.data);
  const uintptr_t end = base + uintptr_t(n_elements_) * sizeof(float);
  SL_CHECK(weight.dtype == DType::f32 && at_byte >= base && at_byte < end,
           "project: the weight of a matrix product must be one of the model's parameters");
  Tensor lp = weight;  // same shape and element strides, in the bf16 copy
  lp.dtype = DType::bf16;
  lp.data = flat_params_lp_.ptr<uint16_t>() + (at_byte - base) / sizeof(float);
  return lp;
}

// h0 [B*T', d]: token embeddings (after the sink token x* when there is one) plus absolute positions.
void Transformer::embed(Tensor inputs) {
  const int64_t B = batch_, T = input_seq_, Tp = seq_, d = cfg_.d_model;
  Tensor x0 = layers_[0].x_in;
  if (sink_token_index_ >= 0) {
    Tensor tokens = tmp_.slice(0, 0, B * T);
    ops::embedding_forward(tokens, inputs.reshape({B * T}), at(embed_index_, false));
    Tensor rows = x0.split_dim(0, B, Tp);
    ops::copy(rows.slice(1, 1, T), tokens.split_dim(0, B, T));
    ops::copy(rows.slice(1, 0, 1), strided(at(sink_token_index_, false), {B, 1, d}, {0, 0, 1}));
  } else {
    ops::embedding_forward(x0, inputs.reshape({B * T}), at(embed_index_, false));
  }
  Tensor table = positions_index_ >= 0 ? at(positions_index_, false) : sinusoidal_;
  if (table.defined()) ops::accumulate(x0.split_dim(0, B, Tp), strided(table, {B, Tp, d}, {0, d, 1}));
}

void Transformer::embed_backward(Tensor inputs) {
  const int64_t B = batch_, T = input_seq_, Tp = seq_;
  Tensor d_rows = d_res_.split_dim(0, B, Tp);
  if (positions_index_ >= 0) {
    Tensor d_table = at(positions_index_, true).slice(0, 0, Tp);
    for (int64_t b = 0; b < B; ++b) ops::accumulate(d_table, d_rows.slice(0, b, 1).reshape({Tp, cfg_.d_model}));
  }
  if (sink_token_index_ >= 0) {
    Tensor d_sink = at(sink_token_index_, true).reshape({1, cfg_.d_model});
    for (int64_t b = 0; b < B; ++b) ops::accumulate(d_sink, d_res_.slice(0, b * Tp, 1));
    Tensor d_tokens = tmp_.slice(0, 0, B * T);
    ops::copy(d_tokens.split_dim(0, B, T), d_rows.slice(1, 1, T));
    ops::embedding_backward(at(embed_index_, true), d_tokens, inputs.reshape({B * T}));
  } else {
    ops::embedding_backward(at(embed_index_, true), d_res_, inputs.reshape({B * T}));
  }
}

ops::AttnKernelChoice Transformer::attention_kernel() const {
  return ops::choose_attention_kernel(layer_spec(0, false),
                                      ops::attn_call(device_, act_dtype(), cfg_.head_dim(), /*probs=*/false));
}

ops::AttentionSpec Transformer::layer_spec(int l, bool backward) const {
  ops::AttentionSpec spec = attention_;
  const LayerIndex& li = layer_index_[size_t(l)];
  if (li.sinks >= 0) {
    spec.sink_logit = at(li.sinks, false);
    if (backward) spec.d_sink_logit = d_sinks_;
  } else if (zero_sink_.defined()) {
    spec.sink_logit = zero_sink_;
  }
  if (relative_index_ >= 0) {
    spec.relative_bias = at(relative_index_, false);
    if (backward) spec.d_relative_bias = d_relative_;
  } else if (bucket_bias_.defined()) {
    spec.relative_bias = bucket_bias_;
  }
  return spec;
}

// One attention block's mixing, from a.qkv to the input of o_proj:
//   rope(q, k) -> phi(q), phi(k) -> [k*; k], [v*; v] -> attention -> + v* -> * sigmoid(gate) -> combine.
Tensor Transformer::attention_forward(int l, const ops::AttentionSpec& spec, LayerObserver* observer) {
  LayerActs& a = layers_[size_t(l)];
  const LayerIndex& li = layer_index_[size_t(l)];
  const int64_t B = batch_, T = seq_, N = B * T, H = cfg_.n_heads, dh = cfg_.head_dim(), Hkv = cfg_.kv_heads();
  const int64_t feat_dim = (H + Hkv) * dh;
  Tensor q = head_view(a.qkv, B, T, 0, H, dh);
  Tensor k = head_view(a.qkv, B, T, H * dh, Hkv, dh);
  Tensor v = head_view(a.qkv, B, T, (H + Hkv) * dh, Hkv, dh);
  if (cfg_.pos_emb == PosEmb::rope) {
    ops::rope_forward(q, q, Tensor{}, rope_);
    ops::rope_forward(k, k, Tensor{}, rope_);
  }
  // Kernel feature map on every q and k head row (Table 15): elu+1, or a 2-layer ReLU MLP [dh -> dh -> dh].
  if (cfg_.qk_kernel != QkKernel::identity) {
    ops::copy(a.feat_in, a.qkv.slice(1, 0, feat_dim));
    Tensor rows_in = a.feat_in.reshape({N * (H + Hkv), dh}), rows_out = a.feat.reshape({N * (H + Hkv), dh});
    if (cfg_.qk_kernel == QkKernel::elu_plus_one) {
      ops::activation_forward(rows_out, rows_in, ops::Activation::elu_plus_one);
    } else {
      Tensor hidden = a.feat_hidden.reshape({N * (H + Hkv), dh}), act = a.feat_act.reshape({N * (H + Hkv), dh});
      project(hidden, rows_in, at(li.kernel_mlp1, false));
      ops::activation_forward(act, hidden, ops::Activation::relu);
      project(rows_out, act, at(li.kernel_mlp2, false));
    }
    q = head_view(a.feat, B, T, 0, H, dh);
    k = head_view(a.feat, B, T, H * dh, Hkv, dh);
  }
  // KV / K biases: one extra key (and value) in front of the sequence's keys that every query sees.
  if (cfg_.lead_keys() > 0) {
    const int64_t S = T + 1, per_head = cfg_.bias_per_head ? 1 : 0;
    ops::copy(a.k_ext.slice(1, 1, T), k);
    ops::copy(a.v_ext.slice(1, 1, T), v);
    Tensor k_star = a.k_ext.slice(1, 0, 1), v_star = a.v_ext.slice(1, 0, 1);  // [B,1,H,dh]
    Tensor k_bias = at(li.k_bias, false);                                     // [H|1, d_a]
    const int64_t d_a = k_bias.shape[1];
    ops::fill(k_star, 0.0);
    ops::copy(k_star.slice(3, 0, d_a), strided(k_bias, {B, 1, H, d_a}, {0, 0, per_head * d_a, 1}));
    if (li.v_bias >= 0) {
      ops::copy(v_star, strided(at(li.v_bias, false), {B, 1, H, dh}, {0, 0, per_head * dh, 1}));
    } else {
      // Fixed v* = m v' (v' = e_1) or m v'' (v'' = ones / sqrt(dh)), Table 5; 0 by default.
      ops::fill(v_star, 0.0);
      const double m = cfg_.fixed_value_scale;
      if (cfg_.fixed_value == FixedValue::e1) ops::fill(v_star.slice(3, 0, 1), m);
      if (cfg_.fixed_value == FixedValue::ones) ops::fill(v_star, m / std::sqrt(double(dh)));
    }
    k = a.k_ext;
    v = a.v_ext;
    (void)S;
  }
  Tensor probs = observer_probs(observer, l, q, k);
  ops::attention_forward(head_view(a.att, B, T, 0, H, dh), a.stats, q, k, v, spec, probs);
  if (cfg_.attn_bias == AttnBias::v) {  // V biases: o_h + v*_h (Table 4, last row)
    const int64_t per_head = cfg_.bias_per_head ? 1 : 0;
    ops::add(head_view(a.att_biased, B, T, 0, H, dh), head_view(a.att, B, T, 0, H, dh),
             strided(at(li.v_bias, false), {B, T, H, dh}, {0, 0, per_head * dh, 1}));
  }
  return probs;
}

Tensor Transformer::attention_mix_forward(int l, const ops::AttentionSpec& spec, LayerObserver* observer,
                                          Tensor* probs, bool norm1_done) {
  LayerActs& a = layers_[size_t(l)];
  const LayerIndex& li = layer_index_[size_t(l)];
  const int64_t d = cfg_.d_model, H = cfg_.n_heads, dh = cfg_.head_dim(), Hkv = cfg_.kv_heads();
  const int64_t qkv_dim = (H + 2 * Hkv) * dh;
  // Pre-norm: the block reads Norm(x_in); post-norm: x_in itself (the norm comes after the residual add).
  Tensor attn_in = a.x_in;
  if (cfg_.norm_placement == NormPlacement::pre) {
    if (!norm1_done) norm_forward(a.xn1, a.mean1, a.rstd1, a.x_in, li.norm1, li.norm1_bias);
    attn_in = a.xn1;
  }
  project(a.qkv, attn_in, weight(li.qkv, qkv_dim, d, false));
  *probs = attention_forward(l, spec, observer);
  Tensor heads_out = cfg_.attn_bias == AttnBias::v ? a.att_biased : a.att;  // [N, H*dh]
  Tensor o_in = heads_out;
  if (li.gate >= 0) {  // gated attention: o *= sigmoid(attn_in W_g^T), per head or per element
    if (cfg_.attn_gate == AttnGate::headwise) {
      project(tmp_.slice(1, 0, H), attn_in, at(li.gate, false));
      ops::matmul(a.gate_logits, tmp_.slice(1, 0, H), head_expand_, false, false);  // [N,H] -> [N,H*dh]
    } else {
      project(a.gate_logits, attn_in, at(li.gate, false));
    }
    ops::gated_forward(a.att_gated, a.gate_logits, heads_out, ops::Activation::sigmoid);
    o_in = a.att_gated;
  }
  if (cfg_.head_combine == HeadCombine::add) {  // (sum_h o_h) W_O
    ops::copy(a.att_sum, o_in.slice(1, 0, dh));
    for (int64_t h = 1; h < H; ++h) ops::accumulate(a.att_sum, o_in.slice(1, h * dh, dh));
    o_in = a.att_sum;
  }
  return o_in;
}

void Transformer::layer_forward(int l, Tensor x_out, LayerObserver* observer, const NextNorm* next_norm,
                                bool norm1_done) {
  LayerActs& a = layers_[size_t(l)];
  const LayerIndex& li = layer_index_[size_t(l)];
  const int64_t B = batch_, T = seq_, d = cfg_.d_model, F = cfg_.ffn_hidden;
  const int64_t H = cfg_.n_heads, dh = cfg_.head_dim(), Hkv = cfg_.kv_heads();
  const bool post = cfg_.norm_placement == NormPlacement::post;
  const ops::Activation act = cfg_.ffn_activation();
  const ops::AttentionSpec spec = layer_spec(l, false);
  // Attention block. Pre-norm: x_mid = x_in + Attn(Norm(x_in)); post-norm: x_mid = Norm(x_in + Attn(x_in)).
  Tensor probs;
  const Tensor o_in = attention_mix_forward(l, spec, observer, &probs, norm1_done);
  project(tmp_, o_in, at(li.o, false));
  if (post) {
    ops::add(a.pre_norm1, a.x_in, tmp_);
    norm_forward(a.x_mid, a.mean1, a.rstd1, a.pre_norm1, li.norm1, li.norm1_bias);
  } else if (fusions_.residual_norm) {
    ops::add_rmsnorm_forward(a.x_mid, a.xn2, a.rstd2, a.x_in, tmp_, at(li.norm2, false), cfg_.norm_eps);
  } else {
    ops::add(a.x_mid, a.x_in, tmp_);
  }
  // FFN block: gated (act(x W_gate) * x W_up) W_down or act(x W_up) W_down.
  Tensor ffn_x = a.x_mid;
  if (!post) {
    if (!fusions_.residual_norm) norm_forward(a.xn2, a.mean2, a.rstd2, a.x_mid, li.norm2, li.norm2_bias);
    ffn_x = a.xn2;
  }
  const int64_t ffn_width = a.ffn_in.shape[1];
  project(a.ffn_in, ffn_x, weight(li.ffn_in, ffn_width, d, false));
  if (cfg_.gated_ffn()) ops::gated_forward(a.ffn_h, a.ffn_in.slice(1, 0, F), a.ffn_in.slice(1, F, F), act);
  else ops::activation_forward(a.ffn_h, a.ffn_in, act);
  project(tmp_, a.ffn_h, at(li.down, false));
  if (post) {
    ops::add(a.pre_norm2, a.x_mid, tmp_);
    norm_forward(x_out, a.mean2, a.rstd2, a.pre_norm2, li.norm2, li.norm2_bias);
  } else if (next_norm) {
    ops::add_rmsnorm_forward(x_out, next_norm->out, next_norm->rstd, a.x_mid, tmp_, at(next_norm->weight_index, false),
                             cfg_.norm_eps);
  } else {
    ops::add(x_out, a.x_mid, tmp_);
  }
  if (observer) {
    // q, k, v as attention_forward passed them to the op.
    const bool kernel = cfg_.qk_kernel != QkKernel::identity;
    LayerTaps taps = attention_taps(
        l, B, a.x_in, x_out, head_view(kernel ? a.feat : a.qkv, B, T, 0, H, dh),
        cfg_.lead_keys() > 0 ? a.k_ext : head_view(kernel ? a.feat : a.qkv, B, T, H * dh, Hkv, dh),
        cfg_.lead_keys() > 0 ? a.v_ext : head_view(a.qkv, B, T, (H + Hkv) * dh, Hkv, dh), &spec, probs);
    if (post) taps.hidden_pre_norm = a.pre_norm2.split_dim(0, B, T);
    taps.lead_positions = cfg_.lead_positions();
    observer->on_layer(taps);
  }
}

void Transformer::forward_layers(Tensor inputs, LayerObserver* observer) {
  SL_CHECK(inputs.ndim == 2 && inputs.dtype == DType::i32, "model inputs must be i32 [B,T], got %s",
           inputs.shape_str().c_str());
  ensure_activations(inputs.shape[0], inputs.shape[1]);
  ledger::Scope scope("forward");
  refresh_weights_lp();
  embed(inputs);
  const bool fused = fusions_.residual_norm;  // each layer's last add also forms the next norm
  for (int l = 0; l < cfg_.n_layers; ++l) {
    ledger::Scope layer("layer", l);
    const bool last = l + 1 == cfg_.n_layers;
    NextNorm next;
    if (fused && !last)
      next = {layers_[size_t(l) + 1].xn1, layers_[size_t(l) + 1].rstd1, layer_index_[size_t(l) + 1].norm1};
    if (fused && last) next = {xf_, rstdf_, final_norm_index_};
    layer_forward(l, last ? x_final_in_ : layers_[size_t(l) + 1].x_in, observer, fused ? &next : nullptr,
                  fused && l > 0);
  }
  if (cfg_.norm_placement == NormPlacement::pre && !fused)
    norm_forward(xf_, meanf_, rstdf_, x_final_in_, final_norm_index_, final_norm_bias_index_);
}

void Transformer::norm_forward(Tensor out, Tensor mean, Tensor rstd, Tensor in, int64_t weight_index,
                               int64_t bias_index) {
  if (bias_index < 0) ops::rmsnorm_forward(out, rstd, in, at(weight_index, false), cfg_.norm_eps);
  else ops::layernorm_forward(out, mean, rstd, in, at(weight_index, false), at(bias_index, false), cfg_.norm_eps);
}

void Transformer::norm_backward(Tensor d_in, Tensor d_out, Tensor in, Tensor mean, Tensor rstd, int64_t weight_index,
                                int64_t bias_index) {
  if (bias_index < 0)
    ops::rmsnorm_backward(d_in, at(weight_index, true), d_out, in, at(weight_index, false), rstd);
  else
    ops::layernorm_backward(d_in, at(weight_index, true), at(bias_index, true), d_out, in, at(weight_index, false),
                            mean, rstd);
}

void Transformer::add_norm_backward(Tensor d_norm_out, Tensor in, Tensor mean, Tensor rstd, int64_t weight_index,
                                    int64_t bias_index) {
  if (fusions_.residual_norm) {
    ops::rmsnorm_backward(d_res_, at(weight_index, true), d_norm_out, in, at(weight_index, false), rstd, true);
    return;
  }
  norm_backward(d_tmp_, d_norm_out, in, mean, rstd, weight_index, bias_index);
  ops::accumulate(d_res_, d_tmp_);
}

StepFusions choose_step_fusions(const ModelConfig& cfg, bool requested) {
  if (!requested) return {false, "--fused-ops off: the op-by-op reference path"};
  if (cfg.norm_placement != NormPlacement::pre) return {false, "post-norm: the residual add is not followed by a norm"};
  if (cfg.norm_type != NormType::rms) return {false, "LayerNorm: add_rmsnorm_forward fuses RMSNorm only"};
  return {true, "pre-norm RMSNorm: residual add + RMSNorm in one op, forward and backward"};
}

// The targets of the sequence the model runs on: none at the sink token x*, none inside a prefix-LM
// prefix (the loss starts with predicting x_{p+1}, Sec. 6).
Tensor Transformer::model_targets(Tensor targets) {
  const int64_t B = batch_, T = input_seq_, Tp = seq_, lead = cfg_.lead_positions();
  SL_CHECK(targets.ndim == 2 && targets.dtype == DType::i32 && targets.shape[0] == B && targets.shape[1] == T,
           "model targets must be i32 [B,T] like the inputs, got %s", targets.shape_str().c_str());
  const int64_t unpredicted = cfg_.prefix_length - 1;  // input positions whose next token is inside the prefix
  if (lead == 0 && unpredicted == 0) return targets;
  Buffer host_in = Buffer::for_tensor(DType::i32, {B, T}), host_out = Buffer::for_tensor(DType::i32, {B, Tp});
  Tensor in = host_in.view(DType::i32, {B, T}), out = host_out.view(DType::i32, {B, Tp});
  ops::copy(in, targets);
  for (int64_t b = 0; b < B; ++b) {
    for (int64_t t = 0; t < lead; ++t) out.ptr<int32_t>()[b * Tp + t] = -1;
    for (int64_t t = 0; t < T; ++t)
      out.ptr<int32_t>()[b * Tp + lead + t] = t < unpredicted ? -1 : in.ptr<int32_t>()[b * T + t];
  }
  ops::copy(targets_, out);
  return targets_;
}

// The untied head and the loss, in row chunks: logits -> per-token cross-entropy -> (backward) the
// logits' gradient in place -> d_xf and d_lm_head, before the next chunk reuses the logits buffer. The
// per-token losses (0 where a target is not counted) are summed on the device into loss_sum, in row order,
// in double.
void Transformer::head_loss(Tensor targets, double grad_scale, bool backward, Tensor loss_sum) {
  ledger::Scope scope("head");
  const int64_t N = batch_ * seq_;
  Tensor tgt = model_targets(targets).reshape({N});
  Tensor w_head = at(head_index_, false);
  Tensor dw_head = at(head_index_, true);
  for (int64_t r0 = 0; r0 < N; r0 += head_chunk_rows_) {
    const int64_t n = std::min(head_chunk_rows_, N - r0);
    Tensor logits = logits_.slice(0, 0, n);
    Tensor xf = xf_.slice(0, r0, n);
    project(logits, xf, w_head);
    ops::cross_entropy(losses_.slice(0, r0, n), backward ? logits : Tensor{}, logits, tgt.slice(0, r0, n), -1,
                       grad_scale);
    if (backward) project_backward(d_xf_.slice(0, r0, n), dw_head, logits, xf, w_head);
  }
  ops::reduce_into(loss_sum, losses_, ops::Reduction::sum, /*accumulate=*/true);
}

int64_t Transformer::count_targets(Tensor host_targets) const {
  SL_CHECK(host_targets.device.is_cpu() && host_targets.dtype == DType::i32 && host_targets.ndim == 2 &&
               host_targets.is_contiguous(),
           "count_targets: host i32 [B,T] targets expected, got %s", host_targets.shape_str().c_str());
  const int64_t B = host_targets.shape[0], T = host_targets.shape[1], unpredicted = cfg_.prefix_length - 1;
  int64_t counted = 0;
  for (int64_t b = 0; b < B; ++b)
    for (int64_t t = std::max<int64_t>(unpredicted, 0); t < T; ++t) counted += host_targets.ptr<int32_t>()[b * T + t] >= 0;
  return counted;
}

Tensor Transformer::loss_scratch() {
  if (!loss_scratch_buffer_.data()) loss_scratch_buffer_ = Buffer::for_tensor(DType::f64, {1}, device_);
  return loss_scratch_buffer_.view(DType::f64, {1});
}

// Backward of attention_forward: from d_att (dL/d of the heads' outputs, after the v bias: the bias is
// additive, so this is also dL/d of the op's output) to d_qkv, and the
// gradients of k*, v*, sink logits and the relative bias.
void Transformer::attention_backward(int l, Tensor d_att_rows) {
  LayerActs& a = layers_[size_t(l)];
  const LayerIndex& li = layer_index_[size_t(l)];
  const int64_t B = batch_, T = seq_, N = B * T, H = cfg_.n_heads, dh = cfg_.head_dim(), Hkv = cfg_.kv_heads();
  const int64_t feat_dim = (H + Hkv) * dh;
  const ops::AttentionSpec spec = layer_spec(l, true);
  const bool kernel = cfg_.qk_kernel != QkKernel::identity, lead = cfg_.lead_keys() > 0;

  // v bias added to every head's output: dv* [H|1, dh] += sums of d_att [B,T,H,dh] over batch and positions
  // (and heads when shared).
  if (cfg_.attn_bias == AttnBias::v) {
    Tensor dvb = at(li.v_bias, true);
    ops::column_sum(cfg_.bias_per_head ? dvb : dvb.reshape({dh}), head_view(d_att_rows, B, T, 0, H, dh), true);
  }
  Tensor q = head_view(kernel ? a.feat : a.qkv, B, T, 0, H, dh);
  Tensor k = lead ? a.k_ext : head_view(kernel ? a.feat : a.qkv, B, T, H * dh, Hkv, dh);
  Tensor v = lead ? a.v_ext : head_view(a.qkv, B, T, (H + Hkv) * dh, Hkv, dh);
  Tensor dq = head_view(kernel ? d_feat_ : d_qkv_, B, T, 0, H, dh);
  Tensor dk_seq = head_view(kernel ? d_feat_ : d_qkv_, B, T, H * dh, Hkv, dh);
  Tensor dv_seq = head_view(d_qkv_, B, T, (H + Hkv) * dh, Hkv, dh);
  ops::attention_backward(dq, lead ? d_k_ext_ : dk_seq, lead ? d_v_ext_ : dv_seq, head_view(d_att_rows, B, T, 0, H, dh),
                          q, k, v, head_view(a.att, B, T, 0, H, dh), a.stats, spec);
  if (spec.d_sink_logit.defined()) ops::accumulate(at(li.sinks, true), d_sinks_);
  if (spec.d_relative_bias.defined()) ops::accumulate(at(relative_index_, true), d_relative_);
  if (lead) {
    ops::copy(dk_seq, d_k_ext_.slice(1, 1, T));
    ops::copy(dv_seq, d_v_ext_.slice(1, 1, T));
    // dk* [H|1, dims] += sum over the batch of lead key 0 of dK_ext [B,S,H,dh] (and over heads when shared),
    // its first dims features (d_a for k*, dh for v*); dv* likewise from dV_ext.
    auto reduce_lead_key = [&](Tensor d_ext, int64_t param) {
      Tensor g = at(param, true);
      const int64_t dims = g.shape[1];
      Tensor lead_key = d_ext.slice(1, 0, 1).slice(3, 0, dims);  // [B,1,H,dims]
      ops::column_sum(cfg_.bias_per_head ? g : g.reshape({dims}), lead_key, true);
    };
    reduce_lead_key(d_k_ext_, li.k_bias);
    if (cfg_.attn_bias == AttnBias::kv) reduce_lead_key(d_v_ext_, li.v_bias);
  }
  if (kernel) {
    Tensor d_rows_out = d_feat_.reshape({N * (H + Hkv), dh}), rows_in = a.feat_in.reshape({N * (H + Hkv), dh});
    Tensor d_rows_in = d_feat_.reshape({N * (H + Hkv), dh});  // in place: each step reads then overwrites
    if (cfg_.qk_kernel == QkKernel::elu_plus_one) {
      ops::activation_backward(d_rows_in, d_rows_out, rows_in, ops::Activation::elu_plus_one);
    } else {
      Tensor hidden = a.feat_hidden.reshape({N * (H + Hkv), dh}), act = a.feat_act.reshape({N * (H + Hkv), dh});
      Tensor d_hidden = d_feat_hidden_.reshape({N * (H + Hkv), dh});
      project_backward(d_hidden, at(li.kernel_mlp2, true), d_rows_out, act, at(li.kernel_mlp2, false));
      ops::activation_backward(d_hidden, d_hidden, hidden, ops::Activation::relu);
      project_backward(d_rows_in, at(li.kernel_mlp1, true), d_hidden, rows_in, at(li.kernel_mlp1, false));
    }
    ops::copy(d_qkv_.slice(1, 0, feat_dim), d_feat_);
  }
  if (cfg_.pos_emb == PosEmb::rope) {
    // Attention wrote d(rotated q, k); rope_backward un-rotates them in place.
    ops::rope_backward(head_view(d_qkv_, B, T, 0, H, dh), head_view(d_qkv_, B, T, 0, H, dh), Tensor{}, rope_);
    ops::rope_backward(head_view(d_qkv_, B, T, H * dh, Hkv, dh), head_view(d_qkv_, B, T, H * dh, Hkv, dh), Tensor{},
                       rope_);
  }
}

void Transformer::backward_layers(Tensor inputs, GradReadyObserver* grads_ready) {
  // Reports the next span of backward_spans() as final (head_loss already wrote the head's gradient).
  size_t next_span = 0;
  auto span_done = [&]() {
    const FlatRange span = backward_spans_[next_span++];
    if (grads_ready) grads_ready->on_grads_ready(span.begin, span.end);
  };
  const int64_t B = batch_, T = seq_, N = B * T, d = cfg_.d_model, F = cfg_.ffn_hidden;
  const int64_t H = cfg_.n_heads, dh = cfg_.head_dim(), Hkv = cfg_.kv_heads();
  const int64_t qkv_dim = (H + 2 * Hkv) * dh;
  const bool post = cfg_.norm_placement == NormPlacement::post;
  const ops::Activation act = cfg_.ffn_activation();

  ledger::Scope scope("backward");
  if (post) ops::copy(d_res_, d_xf_);
  else norm_backward(d_res_, d_xf_, x_final_in_, meanf_, rstdf_, final_norm_index_, final_norm_bias_index_);
  span_done();  // the head and final norm
  for (int l = cfg_.n_layers - 1; l >= 0; --l) {
    ledger::Scope layer("layer", l);
    LayerActs& a = layers_[size_t(l)];
    const LayerIndex& li = layer_index_[size_t(l)];
    // --recompute block: the layer's activations are rebuilt from its kept input (x_out goes to d_tmp_, free
    // here: the next layer's input is no longer read).
    if (recompute_ == Recompute::block) layer_forward(l, d_tmp_, nullptr);
    // d_res holds dL/dx_out. FFN block; afterwards d_res holds dL/dx_mid.
    Tensor ffn_x = post ? a.x_mid : a.xn2;
    if (post) {  // x_out = Norm(pre_norm2), pre_norm2 = x_mid + FFN(x_mid)
      norm_backward(d_pre_, d_res_, a.pre_norm2, a.mean2, a.rstd2, li.norm2, li.norm2_bias);
      ops::copy(d_res_, d_pre_);
    }
    project_backward(d_ffn_h_, at(li.down, true), d_res_, a.ffn_h, at(li.down, false));
    if (cfg_.gated_ffn())
      ops::gated_backward(d_ffn_in_.slice(1, 0, F), d_ffn_in_.slice(1, F, F), d_ffn_h_, a.ffn_in.slice(1, 0, F),
                          a.ffn_in.slice(1, F, F), act);
    else ops::activation_backward(d_ffn_in_, d_ffn_h_, a.ffn_in, act);
    const int64_t ffn_width = a.ffn_in.shape[1];
    project_backward(d_xn_, weight(li.ffn_in, ffn_width, d, true), d_ffn_in_, ffn_x,
                     weight(li.ffn_in, ffn_width, d, false));
    if (post) ops::accumulate(d_res_, d_xn_);
    else add_norm_backward(d_xn_, a.x_mid, a.mean2, a.rstd2, li.norm2, li.norm2_bias);
    // Attention block; afterwards d_res holds dL/dx_in.
    if (recompute_ == Recompute::attention) {  // rebuild the mixing's activations from the kept x_in
      Tensor no_probs;
      attention_mix_forward(l, layer_spec(l, false), nullptr, &no_probs);
    }
    Tensor attn_in = post ? a.x_in : a.xn1;
    if (post) {  // x_mid = Norm(pre_norm1), pre_norm1 = x_in + Attn(x_in)
      norm_backward(d_pre_, d_res_, a.pre_norm1, a.mean1, a.rstd1, li.norm1, li.norm1_bias);
      ops::copy(d_res_, d_pre_);
    }
    Tensor heads_out = cfg_.attn_bias == AttnBias::v ? a.att_biased : a.att;
    Tensor o_in = cfg_.head_combine == HeadCombine::add ? a.att_sum : (li.gate >= 0 ? a.att_gated : heads_out);
    Tensor d_o_in = cfg_.head_combine == HeadCombine::add ? d_att_sum_ : (li.gate >= 0 ? d_att_gated_ : d_att_);
    project_backward(d_o_in, at(li.o, true), d_res_, o_in, at(li.o, false));
    Tensor d_gated = li.gate >= 0 ? d_att_gated_ : d_att_;
    if (cfg_.head_combine == HeadCombine::add)
      for (int64_t h = 0; h < H; ++h) ops::copy(d_gated.slice(1, h * dh, dh), d_att_sum_);
    if (li.gate >= 0) {
      ops::gated_backward(d_gate_logits_, d_att_, d_att_gated_, a.gate_logits, heads_out, ops::Activation::sigmoid);
      Tensor d_logits = d_gate_logits_;
      if (cfg_.attn_gate == AttnGate::headwise) {  // back through the [N,H] -> [N,H*dh] expansion
        ops::matmul(d_gate_small_, d_gate_logits_, head_expand_, false, true);
        d_logits = d_gate_small_;
      }
      project_backward(d_attn_in_, at(li.gate, true), d_logits, attn_in, at(li.gate, false));
    }
    attention_backward(l, d_att_);
    // The qkv product's d_input is the block input's gradient, or is added to the gate's.
    project_backward(li.gate >= 0 ? d_xn_ : d_attn_in_, weight(li.qkv, qkv_dim, d, true), d_qkv_, attn_in,
                     weight(li.qkv, qkv_dim, d, false));
    if (li.gate >= 0) ops::accumulate(d_attn_in_, d_xn_);
    if (post) ops::accumulate(d_res_, d_attn_in_);
    else add_norm_backward(d_attn_in_, a.x_in, a.mean1, a.rstd1, li.norm1, li.norm1_bias);
    span_done();  // layer l
  }
  ledger::Scope embed_scope("embed");
  embed_backward(inputs);
  span_done();  // the embeddings and the shared tensors
  (void)N;
}

void Transformer::accumulate_forward_backward(Tensor inputs, Tensor targets, double grad_scale, Tensor loss_sum,
                                              LayerObserver* observer, GradReadyObserver* grads_ready) {
  forward_layers(inputs, observer);
  head_loss(targets, grad_scale, true, loss_sum);
  backward_layers(inputs, grads_ready);
}

namespace {
// A tensor's values as host memory (a copy when it lives on a device).
Tensor on_host(Tensor t, Buffer& keep) {
  if (t.device.is_cpu()) return t;
  keep = Buffer::for_tensor(t.dtype, {t.numel()});
  Tensor host = Tensor::contiguous_view(keep.data(), t.dtype, t.shape.data(), t.ndim, Device::cpu());
  ops::copy(host, t);
  return host;
}

double read_scalar(Tensor device_scalar) {
  double value = 0.0;
  ops::copy(Tensor(&value, DType::f64, {1}), device_scalar);
  return value;
}
}  // namespace

double Transformer::forward_backward(Tensor inputs, Tensor targets, double grad_scale, int64_t* counted,
                                     LayerObserver* observer, GradReadyObserver* grads_ready) {
  Tensor sum = loss_scratch();
  ops::fill(sum, 0.0);
  accumulate_forward_backward(inputs, targets, grad_scale, sum, observer, grads_ready);
  if (counted) {
    Buffer keep;
    *counted = count_targets(on_host(targets, keep));
  }
  return read_scalar(sum);
}

double Transformer::forward_loss(Tensor inputs, Tensor targets, int64_t* counted, Tensor token_losses) {
  forward_layers(inputs, nullptr);
  Tensor sum = loss_scratch();
  ops::fill(sum, 0.0);
  head_loss(targets, 0.0, false, sum);
  if (token_losses.defined())  // the input positions' losses: after any lead positions (a sink token)
    ops::copy(token_losses, losses_.slice(0, 0, batch_ * seq_).reshape({batch_, seq_}).slice(1, cfg_.lead_positions(),
                                                                                            input_seq_));
  if (counted) {
    Buffer keep;
    *counted = count_targets(on_host(targets, keep));
  }
  return read_scalar(sum);
}

void Transformer::forward_observe(Tensor inputs, LayerObserver& observer) { forward_layers(inputs, &observer); }

}  // namespace sinklab::model
