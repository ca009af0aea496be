#include "model/transformer.hpp"

#include <algorithm>
#include <functional>

#include "core/arena.hpp"
#include "core/error.hpp"

namespace sinklab::model {
namespace {

// Parameter indices in param_layout order: the embedding, then 9 per layer, then the final norm and
// the head.
constexpr size_t kPerLayer = 9;
enum LayerParam : size_t { kNorm1 = 0, kQ, kK, kV, kO, kNorm2, kGate, kUp, kDown };
size_t layer_param(int layer, LayerParam p) { return 1 + kPerLayer * size_t(layer) + p; }
constexpr size_t kEmbedding = 0;
size_t final_norm_param(int n_layers) { return 1 + kPerLayer * size_t(n_layers); }
size_t head_param(int n_layers) { return final_norm_param(n_layers) + 1; }

// Per-head view of columns [col, col + heads*dh) of a [B*T, width] matrix: [B,T,heads,dh].
Tensor head_view(Tensor m, int64_t batch, int64_t seq, int64_t col, int64_t heads, int64_t dh) {
  return m.split_dim(0, batch, seq).slice(2, col, heads * dh).split_dim(2, heads, dh);
}

}  // namespace

Transformer::Transformer(const ModelConfig& cfg, Device device) : cfg_(cfg), device_(device) {
  specs_ = param_layout(cfg_, &n_elements_);
  for (size_t i = 0; i < specs_.size(); ++i) index_[specs_[i].name] = i;
  params_buffer_ = Buffer(size_t(n_elements_) * sizeof(float), device_);
  grads_buffer_ = Buffer(size_t(n_elements_) * sizeof(float), device_);
  flat_params_ = params_buffer_.view(DType::f32, {n_elements_});
  flat_grads_ = grads_buffer_.view(DType::f32, {n_elements_});
  ops::fill(flat_params_, 0.0);  // alignment padding stays zero
  ops::fill(flat_grads_, 0.0);
  attention_.scale = 0.0;  // 1/sqrt(dh)
  rope_.rotary_dim = cfg_.head_dim();
  rope_.base = cfg_.rope_theta;
}

int64_t Transformer::num_parameters() const {
  int64_t n = 0;
  for (const auto& s : specs_) n += s.numel;
  return n;
}

Tensor Transformer::at(size_t param_index, bool grad) const {
  const ParamSpec& s = specs_[param_index];
  float* base = (grad ? flat_grads_ : flat_params_).ptr<float>() + s.offset;
  return Tensor::contiguous_view(base, DType::f32, s.shape.data(), int(s.shape.size()), device_);
}

Tensor Transformer::param(const std::string& name) const {
  auto it = index_.find(name);
  SL_CHECK(it != index_.end(), "model has no parameter '%s'", name.c_str());
  return at(it->second, false);
}

Tensor Transformer::grad(const std::string& name) const {
  auto it = index_.find(name);
  SL_CHECK(it != index_.end(), "model has no parameter '%s'", name.c_str());
  return at(it->second, true);
}

// The [rows, cols] matrix starting at parameter first_param_index: a fused q|k|v or gate|up group is
// one matrix because param_layout places its members adjacently.
Tensor Transformer::weight(int64_t first_param_index, int64_t rows, int64_t cols, bool grad) const {
  const ParamSpec& s = specs_[size_t(first_param_index)];
  float* base = (grad ? flat_grads_ : flat_params_).ptr<float>() + s.offset;
  return Tensor(base, DType::f32, {rows, cols}, device_);
}

void Transformer::init_weights(uint64_t seed) {
  for (size_t i = 0; i < specs_.size(); ++i) {
    Tensor p = at(i, false);
    if (specs_[i].init_one) ops::fill(p, 1.0);
    else ops::fill_normal(p, seed, uint64_t(i), 0.0, specs_[i].init_std);
  }
  zero_grads();
}

void Transformer::zero_grads() { ops::fill(flat_grads_, 0.0); }

void Transformer::ensure_activations(int64_t batch, int64_t seq) {
  SL_CHECK(seq >= 1 && seq <= cfg_.context, "sequence length %lld outside [1, context=%d]", (long long)seq,
           cfg_.context);
  if (batch == batch_ && seq == seq_) return;
  const int64_t N = batch * seq, d = cfg_.d_model, F = cfg_.ffn_hidden, V = cfg_.vocab_size;
  const int64_t H = cfg_.n_heads, dh = cfg_.head_dim(), Hkv = cfg_.kv_heads();
  const int64_t qkv_dim = (H + 2 * Hkv) * dh;
  // Logits are produced and consumed in row chunks of at most ~16M floats: the [N, V] matrix of a
  // 50k vocabulary would otherwise dominate memory.
  head_chunk_rows_ = std::clamp<int64_t>((int64_t(16) << 20) / V, 1, N);

  // Two passes over the same allocation plan: count the bytes, then carve them out of one buffer.
  size_t total = 0;
  Arena arena;
  bool counting = true;
  std::function<Tensor(std::initializer_list<int64_t>)> alloc = [&](std::initializer_list<int64_t> dims) {
    if (counting) {
      Tensor t(nullptr, DType::f32, dims, device_);
      total += (t.nbytes() + 63) / 64 * 64;
      return t;
    }
    return arena.alloc(DType::f32, dims);
  };
  auto plan = [&]() {
    layers_.assign(size_t(cfg_.n_layers), LayerActs{});
    for (auto& a : layers_) {
      a.x_in = alloc({N, d});
      a.xn1 = alloc({N, d});
      a.rstd1 = alloc({N});
      a.qkv = alloc({N, qkv_dim});
      a.att = alloc({N, H * dh});
      a.stats = alloc({batch, H, seq});
      a.x_mid = alloc({N, d});
      a.xn2 = alloc({N, d});
      a.rstd2 = alloc({N});
      a.gate_up = alloc({N, 2 * F});
      a.ffn_h = alloc({N, F});
    }
    x_final_in_ = alloc({N, d});
    xf_ = alloc({N, d});
    rstdf_ = alloc({N});
    logits_ = alloc({head_chunk_rows_, V});
    losses_ = alloc({N});
    tmp_ = alloc({N, d});
    d_res_ = alloc({N, d});
    d_tmp_ = alloc({N, d});
    d_xn_ = alloc({N, d});
    d_qkv_ = alloc({N, qkv_dim});
    d_att_ = alloc({N, H * dh});
    d_gate_up_ = alloc({N, 2 * F});
    d_ffn_h_ = alloc({N, F});
    d_xf_ = alloc({N, d});
  };
  plan();
  acts_buffer_ = Buffer(total, device_);
  arena = Arena(acts_buffer_.data(), acts_buffer_.bytes(), device_);
  counting = false;
  plan();
  batch_ = batch;
  seq_ = seq;
}

void Transformer::forward_layers(Tensor inputs, LayerObserver* observer) {
  SL_CHECK(inputs.ndim == 2 && inputs.dtype == DType::i32, "model inputs must be i32 [B,T], got %s",
           inputs.shape_str().c_str());
  const int64_t B = inputs.shape[0], T = inputs.shape[1];
  ensure_activations(B, T);
  const int64_t N = B * T, d = cfg_.d_model, F = cfg_.ffn_hidden;
  const int64_t H = cfg_.n_heads, dh = cfg_.head_dim(), Hkv = cfg_.kv_heads();
  const int64_t qkv_dim = (H + 2 * Hkv) * dh;

  ops::embedding_forward(layers_[0].x_in, inputs.reshape({N}), at(kEmbedding, false));
  for (int l = 0; l < cfg_.n_layers; ++l) {
    LayerActs& a = layers_[size_t(l)];
    // Attention block: x_mid = x_in + o_proj(attention(rope(q), rope(k), v)) of rmsnorm(x_in).
    ops::rmsnorm_forward(a.xn1, a.rstd1, a.x_in, at(layer_param(l, kNorm1), false), cfg_.norm_eps);
    ops::linear_forward(a.qkv, a.xn1, weight(int64_t(layer_param(l, kQ)), qkv_dim, d, false), Tensor{});
    Tensor q = head_view(a.qkv, B, T, 0, H, dh);
    Tensor k = head_view(a.qkv, B, T, H * dh, Hkv, dh);
    Tensor v = head_view(a.qkv, B, T, (H + Hkv) * dh, Hkv, dh);
    ops::rope_forward(q, q, Tensor{}, rope_);
    ops::rope_forward(k, k, Tensor{}, rope_);
    ops::attention_forward(head_view(a.att, B, T, 0, H, dh), a.stats, q, k, v, attention_);
    ops::linear_forward(tmp_, a.att, weight(int64_t(layer_param(l, kO)), d, H * dh, false), Tensor{});
    ops::add(a.x_mid, a.x_in, tmp_);
    // FFN block: x_out = x_mid + down(silu(gate(xn2)) * up(xn2)), xn2 = rmsnorm(x_mid).
    ops::rmsnorm_forward(a.xn2, a.rstd2, a.x_mid, at(layer_param(l, kNorm2), false), cfg_.norm_eps);
    ops::linear_forward(a.gate_up, a.xn2, weight(int64_t(layer_param(l, kGate)), 2 * F, d, false), Tensor{});
    ops::gated_forward(a.ffn_h, a.gate_up.slice(1, 0, F), a.gate_up.slice(1, F, F), ops::Activation::silu);
    ops::linear_forward(tmp_, a.ffn_h, weight(int64_t(layer_param(l, kDown)), d, F, false), Tensor{});
    Tensor x_out = l + 1 < cfg_.n_layers ? layers_[size_t(l) + 1].x_in : x_final_in_;
    ops::add(x_out, a.x_mid, tmp_);
    if (observer) {
      LayerTaps taps;
      taps.layer = l;
      taps.hidden_in = a.x_in.split_dim(0, B, T);
      taps.hidden_out = x_out.split_dim(0, B, T);
      taps.q = q;
      taps.k = k;
      taps.v = v;
      taps.attention = &attention_;
      observer->on_layer(taps);
    }
  }
  ops::rmsnorm_forward(xf_, rstdf_, x_final_in_, at(final_norm_param(cfg_.n_layers), false), cfg_.norm_eps);
}

// The untied head and the loss, in row chunks: logits -> per-token cross-entropy -> (backward) the
// logits' gradient in place -> d_xf and d_lm_head, before the next chunk reuses the logits buffer.
double Transformer::head_loss(Tensor targets, double grad_scale, bool backward, int64_t* counted) {
  const int64_t N = batch_ * seq_;
  SL_CHECK(targets.ndim == 2 && targets.dtype == DType::i32 && targets.shape[0] == batch_ &&
               targets.shape[1] == seq_,
           "model targets must be i32 [B,T] like the inputs, got %s", targets.shape_str().c_str());
  Tensor tgt = targets.reshape({N});
  Tensor w_head = at(head_param(cfg_.n_layers), false);
  Tensor dw_head = at(head_param(cfg_.n_layers), true);
  for (int64_t r0 = 0; r0 < N; r0 += head_chunk_rows_) {
    const int64_t n = std::min(head_chunk_rows_, N - r0);
    Tensor logits = logits_.slice(0, 0, n);
    Tensor xf = xf_.slice(0, r0, n);
    ops::linear_forward(logits, xf, w_head, Tensor{});
    ops::cross_entropy(losses_.slice(0, r0, n), backward ? logits : Tensor{}, logits, tgt.slice(0, r0, n), -1,
                       grad_scale);
    if (backward) ops::linear_backward(d_xf_.slice(0, r0, n), dw_head, Tensor{}, logits, xf, w_head);
  }
  // Sum the per-token losses on the host (losses of ignored targets are 0).
  Buffer host_losses = Buffer::for_tensor(DType::f32, {N});
  Buffer host_targets = Buffer::for_tensor(DType::i32, {N});
  Tensor hl = host_losses.view(DType::f32, {N}), ht = host_targets.view(DType::i32, {N});
  ops::copy(hl, losses_);
  ops::copy(ht, tgt);
  double sum = 0.0;
  int64_t n_counted = 0;
  for (int64_t i = 0; i < N; ++i) {
    if (ht.ptr<int32_t>()[i] < 0) continue;
    sum += hl.ptr<float>()[i];
    ++n_counted;
  }
  if (counted) *counted = n_counted;
  return sum;
}

void Transformer::backward_layers(Tensor inputs) {
  const int64_t B = batch_, T = seq_, N = B * T, d = cfg_.d_model, F = cfg_.ffn_hidden;
  const int64_t H = cfg_.n_heads, dh = cfg_.head_dim(), Hkv = cfg_.kv_heads();
  const int64_t qkv_dim = (H + 2 * Hkv) * dh;

  const size_t final_norm = final_norm_param(cfg_.n_layers);
  ops::rmsnorm_backward(d_res_, at(final_norm, true), d_xf_, x_final_in_, at(final_norm, false), rstdf_);
  for (int l = cfg_.n_layers - 1; l >= 0; --l) {
    LayerActs& a = layers_[size_t(l)];
    const size_t norm1 = layer_param(l, kNorm1), norm2 = layer_param(l, kNorm2);
    // d_res holds dL/dx_out. FFN block.
    ops::linear_backward(d_ffn_h_, weight(int64_t(layer_param(l, kDown)), d, F, true), Tensor{}, d_res_, a.ffn_h,
                         weight(int64_t(layer_param(l, kDown)), d, F, false));
    ops::gated_backward(d_gate_up_.slice(1, 0, F), d_gate_up_.slice(1, F, F), d_ffn_h_, a.gate_up.slice(1, 0, F),
                        a.gate_up.slice(1, F, F), ops::Activation::silu);
    ops::linear_backward(d_xn_, weight(int64_t(layer_param(l, kGate)), 2 * F, d, true), Tensor{}, d_gate_up_,
                         a.xn2, weight(int64_t(layer_param(l, kGate)), 2 * F, d, false));
    ops::rmsnorm_backward(d_tmp_, at(norm2, true), d_xn_, a.x_mid, at(norm2, false), a.rstd2);
    ops::accumulate(d_res_, d_tmp_);  // now dL/dx_mid
    // Attention block.
    ops::linear_backward(d_att_, weight(int64_t(layer_param(l, kO)), d, H * dh, true), Tensor{}, d_res_, a.att,
                         weight(int64_t(layer_param(l, kO)), d, H * dh, false));
    Tensor q = head_view(a.qkv, B, T, 0, H, dh);
    Tensor k = head_view(a.qkv, B, T, H * dh, Hkv, dh);
    Tensor v = head_view(a.qkv, B, T, (H + Hkv) * dh, Hkv, dh);
    // Attention writes d(rotated q, k) into d_qkv_; rope_backward then un-rotates them in place.
    Tensor dq = head_view(d_qkv_, B, T, 0, H, dh);
    Tensor dk = head_view(d_qkv_, B, T, H * dh, Hkv, dh);
    Tensor dv = head_view(d_qkv_, B, T, (H + Hkv) * dh, Hkv, dh);
    ops::attention_backward(dq, dk, dv, head_view(d_att_, B, T, 0, H, dh), q, k, v, head_view(a.att, B, T, 0, H, dh),
                            a.stats, attention_);
    ops::rope_backward(dq, dq, Tensor{}, rope_);
    ops::rope_backward(dk, dk, Tensor{}, rope_);
    ops::linear_backward(d_xn_, weight(int64_t(layer_param(l, kQ)), qkv_dim, d, true), Tensor{}, d_qkv_, a.xn1,
                         weight(int64_t(layer_param(l, kQ)), qkv_dim, d, false));
    ops::rmsnorm_backward(d_tmp_, at(norm1, true), d_xn_, a.x_in, at(norm1, false), a.rstd1);
    ops::accumulate(d_res_, d_tmp_);  // now dL/dx_in
  }
  ops::embedding_backward(at(kEmbedding, true), d_res_, inputs.reshape({N}));
}

double Transformer::forward_backward(Tensor inputs, Tensor targets, double grad_scale, int64_t* counted) {
  forward_layers(inputs, nullptr);
  double loss_sum = head_loss(targets, grad_scale, true, counted);
  backward_layers(inputs);
  return loss_sum;
}

double Transformer::forward_loss(Tensor inputs, Tensor targets, int64_t* counted) {
  forward_layers(inputs, nullptr);
  return head_loss(targets, 0.0, false, counted);
}

void Transformer::forward_observe(Tensor inputs, LayerObserver& observer) { forward_layers(inputs, &observer); }

}  // namespace sinklab::model
