// The Transformer's construction and memory: the parameter index, the flat parameter and gradient
// buffers, backward's spans, the constant tables, and the activations of one (batch, seq) shape.
// The forward and backward passes are in transformer.cpp.
#include "model/transformer.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

#include "backend/backend.hpp"
#include "backend/ledger.hpp"
#include "core/arena.hpp"
#include "core/enum_names.hpp"
#include "core/error.hpp"

namespace sinklab::model {

Transformer::Transformer(const ModelConfig& cfg, Device device) : cfg_(cfg), device_(device) {
  specs_ = param_layout(cfg_, &n_elements_);
  for (size_t i = 0; i < specs_.size(); ++i) index_[specs_[i].name] = i;
  index_parameters();
  make_backward_spans();
  params_buffer_ = Buffer(size_t(n_elements_) * sizeof(float), device_);
  grads_buffer_ = Buffer(size_t(n_elements_) * sizeof(float), device_);
  flat_params_ = params_buffer_.view(DType::f32, {n_elements_});
  flat_grads_ = grads_buffer_.view(DType::f32, {n_elements_});
  ops::fill(flat_params_, 0.0);  // alignment padding stays zero
  ops::fill(flat_grads_, 0.0);
  attention_ = cfg_.attention_spec();
  fusions_ = choose_step_fusions(cfg_, true);
  rope_.rotary_dim = cfg_.head_dim();
  rope_.base = cfg_.rope_theta;
  make_constants();
}

// Where each parameter sits in specs_, by its role (-1: this variant has none). q and gate_proj (or up_proj
// without a gate) start the fused q|k|v and gate|up matrices.
void Transformer::index_parameters() {
  layer_index_.assign(size_t(cfg_.n_layers), LayerIndex{});
  for (size_t i = 0; i < specs_.size(); ++i) {
    const int64_t at = int64_t(i);
    const ParamSpec& spec = specs_[i];
    LayerIndex not_a_layer;
    LayerIndex& li = spec.layer >= 0 ? layer_index_[size_t(spec.layer)] : not_a_layer;
    switch (spec.role) {
      case ParamRole::embed_tokens: embed_index_ = at; break;
      case ParamRole::embed_positions: positions_index_ = at; break;
      case ParamRole::sink_token: sink_token_index_ = at; break;
      case ParamRole::relative_bias: relative_index_ = at; break;
      case ParamRole::final_norm: final_norm_index_ = at; break;
      case ParamRole::final_norm_bias: final_norm_bias_index_ = at; break;
      case ParamRole::head: head_index_ = at; break;
      case ParamRole::norm1: li.norm1 = at; break;
      case ParamRole::norm1_bias: li.norm1_bias = at; break;
      case ParamRole::q: li.qkv = at; break;
      case ParamRole::k:
      case ParamRole::v: break;  // in q's fused matrix
      case ParamRole::kernel_mlp1: li.kernel_mlp1 = at; break;
      case ParamRole::kernel_mlp2: li.kernel_mlp2 = at; break;
      case ParamRole::k_bias: li.k_bias = at; break;
      case ParamRole::v_bias: li.v_bias = at; break;
      case ParamRole::sinks: li.sinks = at; break;
      case ParamRole::attn_gate: li.gate = at; break;
      case ParamRole::o: li.o = at; break;
      case ParamRole::norm2: li.norm2 = at; break;
      case ParamRole::norm2_bias: li.norm2_bias = at; break;
      case ParamRole::ffn_gate: li.ffn_in = at; break;
      case ParamRole::ffn_up:
        if (li.ffn_in < 0) li.ffn_in = at;  // else in gate_proj's fused matrix
        break;
      case ParamRole::ffn_down: li.down = at; break;
    }
  }
}

// Backward's spans, from param_layout's order: part 0 the embeddings and shared tensors, part 1 + l
// layer l, part L + 1 the final norm and head. A part begins at its first parameter (part 0 at 0).
void Transformer::make_backward_spans() {
  const int L = cfg_.n_layers;
  std::vector<int64_t> part_begin(size_t(L) + 3, -1);
  part_begin[0] = 0;
  part_begin[size_t(L) + 2] = n_elements_;
  int part = 0;
  for (const ParamSpec& spec : specs_) {
    const int l = spec.layer;
    const int this_part = l >= 0 ? 1 + l : (part == 0 ? 0 : L + 1);
    SL_CHECK(this_part >= part, "param_layout: %s is out of backward's order", spec.name.c_str());
    if (part_begin[size_t(this_part)] < 0) part_begin[size_t(this_part)] = spec.offset;
    part = this_part;
  }
  for (int p = L + 1; p >= 0; --p)  // a part without parameters is empty: it begins where the next does
    if (part_begin[size_t(p)] < 0) part_begin[size_t(p)] = part_begin[size_t(p) + 1];
  for (int p = L + 1; p >= 0; --p) backward_spans_.push_back({part_begin[size_t(p)], part_begin[size_t(p) + 1]});
}

// Constants, computed on the host in double and copied to the device once: the sinusoidal position
// table, the bucket-index bias, a zero sink logit, the head-expansion matrix of headwise gates.
void Transformer::make_constants() {
  const int64_t d = cfg_.d_model, H = cfg_.n_heads, dh = cfg_.head_dim(), nb = cfg_.relative_buckets;
  const int64_t positions = int64_t(cfg_.context) + cfg_.lead_positions();
  std::vector<float> host;
  auto place = [&](std::vector<float> values) {
    const int64_t at = int64_t(host.size());
    host.insert(host.end(), values.begin(), values.end());
    host.resize((host.size() + 15) / 16 * 16, 0.0f);
    return at;
  };
  int64_t at_sinusoidal = -1, at_bucket = -1, at_zero = -1, at_expand = -1;
  if (cfg_.pos_emb == PosEmb::sinusoidal) {
    // Paper Eq. 5: p_t = [sin(w_1 t), cos(w_1 t), ..., sin(w_{d/2} t), cos(w_{d/2} t)], w_i = 10000^(-2(i-1)/d).
    std::vector<float> table(size_t(positions * d));
    for (int64_t t = 0; t < positions; ++t)
      for (int64_t i = 0; i < d / 2; ++i) {
        const double w = std::pow(10000.0, -2.0 * double(i) / double(d));
        table[size_t(t * d + 2 * i)] = float(std::sin(w * double(t)));
        table[size_t(t * d + 2 * i + 1)] = float(std::cos(w * double(t)));
      }
    at_sinusoidal = place(std::move(table));
  }
  if (cfg_.pos_emb == PosEmb::relative && cfg_.relative_bias == RelativeBias::bucket_index) {
    // The paper's Eq. 6 as its released code uses it: the bucket index itself is the score bias.
    std::vector<float> table(size_t(H * nb));
    for (int64_t h = 0; h < H; ++h)
      for (int64_t b = 0; b < nb; ++b) table[size_t(h * nb + b)] = float(b);
    at_bucket = place(std::move(table));
  }
  if (cfg_.softmax_plus_one) at_zero = place(std::vector<float>(size_t(H), 0.0f));
  if (cfg_.attn_gate == AttnGate::headwise) {
    std::vector<float> expand(size_t(H * H * dh), 0.0f);  // expand[h, h*dh + i] = 1
    for (int64_t h = 0; h < H; ++h)
      for (int64_t i = 0; i < dh; ++i) expand[size_t(h * H * dh + h * dh + i)] = 1.0f;
    at_expand = place(std::move(expand));
  }
  if (!host.empty()) {
    constants_buffer_ = Buffer(host.size() * sizeof(float), device_);
    Tensor all = constants_buffer_.view(DType::f32, {int64_t(host.size())});
    ops::copy(all, Tensor(host.data(), DType::f32, {int64_t(host.size())}));
    float* base = all.ptr<float>();
    if (at_sinusoidal >= 0) sinusoidal_ = Tensor(base + at_sinusoidal, DType::f32, {positions, d}, device_);
    if (at_bucket >= 0) bucket_bias_ = Tensor(base + at_bucket, DType::f32, {H, nb}, device_);
    if (at_zero >= 0) zero_sink_ = Tensor(base + at_zero, DType::f32, {H}, device_);
    if (at_expand >= 0) head_expand_ = Tensor(base + at_expand, DType::f32, {H, H * dh}, device_);
  }
  if (head_expand_.defined() && act_dtype() != DType::f32) {  // 0s and 1s: exact in bf16
    head_expand_lp_buffer_ = Buffer(size_t(head_expand_.numel()) * dtype_size(act_dtype()), device_);
    Tensor lp = head_expand_lp_buffer_.view(act_dtype(), {H, H * dh});
    ops::copy(lp, head_expand_);
    head_expand_ = lp;
  }
}

int64_t Transformer::find(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? -1 : int64_t(it->second);
}

int64_t Transformer::num_parameters() const { return count_parameters(specs_); }

int64_t Transformer::num_parameters_non_embedding() const { return count_parameters_non_embedding(specs_); }

double Transformer::flops_per_token(int64_t seq) const { return model::flops_per_token(cfg_, specs_, seq); }

Tensor Transformer::at(int64_t param_index, bool grad) const {
  const ParamSpec& s = specs_[size_t(param_index)];
  float* base = (grad ? flat_grads_ : flat_params_).ptr<float>() + s.offset;
  return Tensor::contiguous_view(base, DType::f32, s.shape.data(), int(s.shape.size()), device_);
}

Tensor Transformer::param(const std::string& name) const {
  const int64_t i = find(name);
  SL_CHECK(i >= 0, "model has no parameter '%s'", name.c_str());
  return at(i, false);
}

Tensor Transformer::grad(const std::string& name) const {
  const int64_t i = find(name);
  SL_CHECK(i >= 0, "model has no parameter '%s'", name.c_str());
  return at(i, true);
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
    Tensor p = at(int64_t(i), false);
    if (specs_[i].init_one) ops::fill(p, 1.0);
    else if (specs_[i].init_uniform_bound > 0.0)
      ops::fill_uniform(p, seed, uint64_t(i), -specs_[i].init_uniform_bound, specs_[i].init_uniform_bound);
    else if (specs_[i].init_std == 0.0) ops::fill(p, specs_[i].init_value);
    else ops::fill_normal(p, seed, uint64_t(i), 0.0, specs_[i].init_std);
  }
  zero_grads();
}

void Transformer::zero_grads() { ops::fill(flat_grads_, 0.0); }

namespace {
constexpr EnumName<Recompute> kRecomputeNames[] = {
    {Recompute::none, "none"}, {Recompute::attention, "attention"}, {Recompute::block, "block"}};
}  // namespace

Recompute parse_recompute(const std::string& text) { return parse_enum(kRecomputeNames, text, "recompute"); }
const char* recompute_name(Recompute mode) { return enum_name(kRecomputeNames, mode); }
std::string recompute_names() { return enum_name_list(kRecomputeNames); }

namespace {
constexpr EnumName<Precision> kPrecisionNames[] = {{Precision::fp32, "fp32"}, {Precision::bf16, "bf16"}};
}  // namespace

Precision parse_precision(const std::string& text) { return parse_enum(kPrecisionNames, text, "precision"); }
const char* precision_name(Precision mode) { return enum_name(kPrecisionNames, mode); }
std::string precision_names() { return enum_name_list(kPrecisionNames); }

DType activation_dtype(Precision mode) { return mode == Precision::bf16 ? DType::bf16 : DType::f32; }

void Transformer::set_precision(Precision mode) {
  if (mode == precision_) return;
  precision_ = mode;
  batch_ = input_seq_ = 0;  // the next forward lays the activations out again, in the new dtype
  lp_fresh_ = false;
  if (mode == Precision::bf16 && !flat_params_lp_.defined()) {
    low_precision_params_buffer_ = Buffer(size_t(n_elements_) * dtype_size(DType::bf16), device_);
    flat_params_lp_ = low_precision_params_buffer_.view(DType::bf16, {n_elements_});
  }
  make_constants();  // the head-expansion matrix meets activations in a product: their dtype
}

void Transformer::manage_weights_lp(bool managed) {
  lp_managed_ = managed;
  lp_fresh_ = false;
}

void Transformer::params_changed(bool lp_written) { lp_fresh_ = lp_written; }

void Transformer::refresh_weights_lp() {
  if (precision_ != Precision::bf16 || (lp_managed_ && lp_fresh_)) return;
  ledger::Scope scope("weights");
  ops::copy(flat_params_lp_, flat_params_);  // one rounding of every weight
  lp_fresh_ = true;
}

void Transformer::set_recompute(Recompute mode) {
  if (mode == recompute_) return;
  recompute_ = mode;
  batch_ = input_seq_ = 0;  // the next forward lays the activations out again
}

ActivationBytes Transformer::prepare_activations(int64_t batch, int64_t seq) {
  ensure_activations(batch, seq);
  return activation_bytes_;
}

void Transformer::ensure_activations(int64_t batch, int64_t input_seq) {
  if (batch == batch_ && input_seq == input_seq_) return;
  // Two passes over the same plan: count the bytes, then carve the tensors out of one buffer.
  activation_bytes_ = lay_out(cfg_, recompute_, act_dtype(), batch, input_seq, device_, nullptr);
  acts_buffer_ = Buffer(size_t(activation_bytes_.total(cfg_.n_layers)), device_);
  Arena arena(acts_buffer_.data(), acts_buffer_.bytes(), device_);
  lay_out(cfg_, recompute_, act_dtype(), batch, input_seq, device_, &arena);
  SL_CHECK(arena.used() == arena.capacity(), "activation plan: %zu bytes counted, %zu carved", arena.capacity(),
           arena.used());
  const int64_t seq = model_seq(input_seq);
  targets_buffer_ = Buffer(size_t(batch * seq) * sizeof(int32_t), device_);
  targets_ = targets_buffer_.view(DType::i32, {batch, seq});
  batch_ = batch;
  seq_ = seq;
  input_seq_ = input_seq;
}

ActivationBytes Transformer::activation_bytes(const ModelConfig& cfg, Recompute recompute, Precision precision,
                                              int64_t batch, int64_t seq) {
  ActivationTensors counted;
  return counted.lay_out(cfg, recompute, activation_dtype(precision), batch, seq, Device::cpu(), nullptr);
}

int64_t head_chunk_rows(int64_t rows, int64_t vocab, DType act) {
  if (act == DType::f32) return std::clamp<int64_t>((int64_t(16) << 20) / vocab, 1, rows);
  const int64_t chunks = std::clamp<int64_t>((rows * vocab * 2 + (int64_t(1) << 30) - 1) >> 30, 1, 4);
  return (rows + chunks - 1) / chunks;
}

ActivationBytes ActivationTensors::lay_out(const ModelConfig& cfg, Recompute recompute, DType act, int64_t batch,
                                           int64_t input_seq, Device device, Arena* arena) {
  SL_CHECK(input_seq >= 1 && input_seq <= cfg.context, "sequence length %lld outside [1, context=%d]",
           (long long)input_seq, cfg.context);
  const int64_t seq = input_seq + cfg.lead_positions();
  const int64_t N = batch * seq, d = cfg.d_model, F = cfg.ffn_hidden, V = cfg.vocab_size;
  const int64_t H = cfg.n_heads, dh = cfg.head_dim(), Hkv = cfg.kv_heads();
  const int64_t qkv_dim = (H + 2 * Hkv) * dh, feat_dim = (H + Hkv) * dh;
  const int64_t ffn_in = cfg.gated_ffn() ? 2 * F : F;
  const int64_t S = cfg.lead_keys() + seq;
  const bool kernel = cfg.qk_kernel != QkKernel::identity, mlp = cfg.qk_kernel == QkKernel::mlp;
  const bool lead = cfg.lead_keys() > 0, post = cfg.norm_placement == NormPlacement::post;
  const bool gate = cfg.attn_gate != AttnGate::none, add = cfg.head_combine == HeadCombine::add;
  const bool layer_norm = cfg.norm_type == NormType::layer;
  head_chunk_rows_ = head_chunk_rows(N, V, act);

  int64_t* bytes_to = nullptr;  // while counting: which ActivationBytes field the next tensor adds to
  ActivationBytes bytes;
  int64_t uncounted = 0;  // the layers after the first: layer 0's figures count them
  // Activations and their gradients in `act`; the statistics (norms' mean and rstd, attention's stats, the
  // losses) and the gradients of the learned attention tensors (sink logits, relative bias) in f32.
  std::function<Tensor(DType, std::initializer_list<int64_t>)> alloc_as = [&](DType dt,
                                                                            std::initializer_list<int64_t> dims) {
    if (arena) return arena->alloc(dt, dims);
    Tensor t(nullptr, dt, dims, device);
    *bytes_to += int64_t((t.nbytes() + 63) / 64 * 64);
    return t;
  };
  auto alloc = [&](std::initializer_list<int64_t> dims) { return alloc_as(act, dims); };
  auto alloc_f32 = [&](std::initializer_list<int64_t> dims) { return alloc_as(DType::f32, dims); };
  auto alloc_if = [&](bool needed, std::initializer_list<int64_t> dims) { return needed ? alloc(dims) : Tensor{}; };
  // --recompute: what backward rebuilds instead of reading it from the forward pass. Those tensors are
  // allocated once (layer 0's) and every layer uses them in turn; the rest once per layer.
  const bool pre_norm = !post;
  auto recomputed = [&](bool in_attention_mix) {
    return recompute == Recompute::block || (recompute == Recompute::attention && in_attention_mix);
  };
  layers_.assign(size_t(cfg.n_layers), LayerActs{});
  for (size_t l = 0; l < layers_.size(); ++l) {
    LayerActs& a = layers_[l];
    auto slot = [&](Tensor LayerActs::*field, bool in_attention_mix, bool needed,
                    std::initializer_list<int64_t> dims) {
      const bool shared = recomputed(in_attention_mix);
      if (shared && l > 0) {
        a.*field = layers_[0].*field;
        return;
      }
      bytes_to = shared ? &bytes.recomputed : (l == 0 ? &bytes.kept_per_layer : &uncounted);
      const bool statistic = field == &LayerActs::rstd1 || field == &LayerActs::mean1 || field == &LayerActs::stats ||
                             field == &LayerActs::rstd2 || field == &LayerActs::mean2;
      a.*field = needed ? alloc_as(statistic ? DType::f32 : act, dims) : Tensor{};
    };
    bytes_to = l == 0 ? &bytes.kept_per_layer : &uncounted;
    a.x_in = alloc({N, d});  // every mode keeps each layer's input: recomputation starts there
    slot(&LayerActs::xn1, pre_norm, !post, {N, d});
    slot(&LayerActs::rstd1, pre_norm, true, {N});
    slot(&LayerActs::mean1, pre_norm, layer_norm, {N});
    slot(&LayerActs::qkv, true, true, {N, qkv_dim});
    slot(&LayerActs::feat_in, true, kernel, {N, feat_dim});
    slot(&LayerActs::feat_hidden, true, mlp, {N, feat_dim});
    slot(&LayerActs::feat_act, true, mlp, {N, feat_dim});
    slot(&LayerActs::feat, true, kernel, {N, feat_dim});
    slot(&LayerActs::k_ext, true, lead, {batch, S, Hkv, dh});
    slot(&LayerActs::v_ext, true, lead, {batch, S, Hkv, dh});
    slot(&LayerActs::att, true, true, {N, H * dh});
    slot(&LayerActs::att_biased, true, cfg.attn_bias == AttnBias::v, {N, H * dh});
    slot(&LayerActs::stats, true, true, {batch, H, seq});
    slot(&LayerActs::gate_logits, true, gate, {N, H * dh});
    slot(&LayerActs::att_gated, true, gate, {N, H * dh});
    slot(&LayerActs::att_sum, true, add, {N, dh});
    slot(&LayerActs::pre_norm1, false, post, {N, d});
    slot(&LayerActs::x_mid, false, true, {N, d});
    slot(&LayerActs::xn2, false, !post, {N, d});
    slot(&LayerActs::rstd2, false, true, {N});
    slot(&LayerActs::mean2, false, layer_norm, {N});
    slot(&LayerActs::ffn_in, false, true, {N, ffn_in});
    slot(&LayerActs::ffn_h, false, true, {N, F});
    slot(&LayerActs::pre_norm2, false, post, {N, d});
  }
  bytes_to = &bytes.rest;
  x_final_in_ = alloc({N, d});
  xf_ = post ? x_final_in_ : alloc({N, d});  // post-norm models have no final norm
  rstdf_ = alloc_f32({N});
  meanf_ = layer_norm ? alloc_f32({N}) : Tensor{};
  logits_ = alloc({head_chunk_rows_, V});
  losses_ = alloc_f32({N});
  tmp_ = alloc({N, d});
  d_res_ = alloc({N, d});
  d_tmp_ = alloc({N, d});
  d_xn_ = alloc({N, d});
  d_attn_in_ = alloc({N, d});
  d_qkv_ = alloc({N, qkv_dim});
  d_feat_ = alloc_if(kernel, {N, feat_dim});
  d_feat_hidden_ = alloc_if(mlp, {N, feat_dim});
  d_k_ext_ = alloc_if(lead, {batch, S, Hkv, dh});
  d_v_ext_ = alloc_if(lead, {batch, S, Hkv, dh});
  d_att_ = alloc({N, H * dh});
  d_att_gated_ = alloc_if(gate, {N, H * dh});
  d_att_sum_ = alloc_if(add, {N, dh});
  d_gate_logits_ = alloc_if(gate, {N, H * dh});
  d_gate_small_ = alloc_if(cfg.attn_gate == AttnGate::headwise, {N, H});
  d_pre_ = alloc_if(post, {N, d});
  d_ffn_in_ = alloc({N, ffn_in});
  d_ffn_h_ = alloc({N, F});
  d_xf_ = alloc({N, d});
  d_sinks_ = alloc_f32({H});
  d_relative_ = alloc_f32({H, cfg.relative_buckets});
  return bytes;
}

}  // namespace sinklab::model
