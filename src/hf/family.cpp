#include "hf/family.hpp"

#include <cmath>
#include <filesystem>

#include "core/error.hpp"
#include "hf/registry.hpp"

namespace sinklab::hf {

Tensor head_view(Tensor m, int64_t batch, int64_t seq, int64_t col, int64_t heads, int64_t dh) {
  return m.split_dim(0, batch, seq).slice(2, col, heads * dh).split_dim(2, heads, dh);
}

int64_t Activations::bytes(const std::vector<Slot>& slots) {
  int64_t total = 0;
  for (const Slot& s : slots) {
    int64_t n = 1;
    for (int64_t d : s.dims) n *= d;
    total += aligned_f32_bytes(n);
  }
  return total;
}

void Activations::allocate(const std::vector<Slot>& slots, Device device) {
  const int64_t need = bytes(slots);
  buffer_.ensure(size_t(need), device);
  char* cursor = static_cast<char*>(buffer_.data());
  for (const Slot& s : slots) {
    *s.tensor = Tensor::contiguous_view(cursor, DType::f32, s.dims.data(), int(s.dims.size()), device);
    int64_t n = 1;
    for (int64_t d : s.dims) n *= d;
    cursor += aligned_f32_bytes(n);
  }
}

bool FamilyModel::begin_forward(Tensor ids, Tensor logits, const ForwardOptions& opt) const {
  const char* dir = info_.dir.c_str();
  SL_CHECK(ids.defined() && ids.ndim == 2 && ids.dtype == DType::i32 && ids.device.is_cpu() && ids.is_contiguous(),
           "%s: forward needs contiguous host token ids i32 [B,T], got %s %s", dir, dtype_name(ids.dtype),
           ids.shape_str().c_str());
  const int64_t B = ids.shape[0], T = ids.shape[1];
  SL_CHECK(B >= 1 && T >= 1, "%s: empty batch %s", dir, ids.shape_str().c_str());
  SL_CHECK(info_.max_positions == 0 || T <= info_.max_positions,
           "%s: sequences of %lld tokens exceed the model's %lld learned positions", dir, (long long)T,
           (long long)info_.max_positions);
  const bool intervene = opt.replace_first_position_with >= 0 || opt.swap_first_position_with >= 0;
  SL_CHECK(!intervene || info_.learned_positions,
           "%s: the position interventions (p_1 := p_t, p_1 <-> p_t) need learned positions (gpt2, opt); "
           "model_type %s has none", dir, info_.model_type.c_str());
  SL_CHECK(opt.replace_first_position_with < 0 || opt.swap_first_position_with < 0,
           "%s: replace_first_position_with and swap_first_position_with exclude each other", dir);
  SL_CHECK(opt.replace_first_position_with < info_.max_positions || info_.max_positions == 0,
           "%s: p_1 := p_t needs t < %lld learned positions, got t = %lld", dir, (long long)info_.max_positions,
           (long long)opt.replace_first_position_with);
  SL_CHECK(opt.swap_first_position_with < T, "%s: p_1 <-> p_t needs t < T = %lld, got t = %lld", dir, (long long)T,
           (long long)opt.swap_first_position_with);
  const AttentionAblation& a = opt.attention_ablation;
  switch (a.kind) {
    case AttentionAblation::Kind::none: break;
    case AttentionAblation::Kind::window:
    case AttentionAblation::Kind::window_sinks:
      SL_CHECK(a.window >= 1 && a.sink_tokens >= 0, "%s: a window ablation needs window >= 1 and sink tokens >= 0", dir);
      break;
    case AttentionAblation::Kind::mask_first:
      SL_CHECK(a.from_layer >= 0 && a.from_layer < info_.n_layers, "%s: mask_first from layer %d: the model has layers "
               "0..%d", dir, a.from_layer, info_.n_layers - 1);
      break;
  }
  const HiddenAblation& h = opt.hidden_ablation;
  SL_CHECK(h.kind == HiddenAblation::Kind::none ||
               (h.layer >= 0 && h.layer < info_.n_layers && h.top_dims >= 1 && h.top_dims <= info_.d_model),
           "%s: the hidden-state ablation needs a layer in 0..%d and 1..%d features, got layer %d, %d features", dir,
           info_.n_layers - 1, info_.d_model, h.layer, h.top_dims);
  if (!logits.defined() || !opt.want_logits) return false;
  SL_CHECK(logits.dtype == DType::f32 && logits.device.is_cpu() && logits.is_contiguous() && logits.ndim == 3 &&
               logits.shape[0] == B && logits.shape[1] == T && logits.shape[2] == info_.vocab_size,
           "%s: logits must be contiguous host f32 [%lld,%lld,%d], got %s %s", dir, (long long)B, (long long)T,
           info_.vocab_size, dtype_name(logits.dtype), logits.shape_str().c_str());
  return true;
}

void FamilyModel::set_sizes(const HeadShape& shape, int64_t mlp_width) {
  d_ = shape.d_model;
  H_ = shape.heads;
  Hkv_ = shape.kv_heads;
  dh_ = shape.head_dim;
  F_ = mlp_width;
}

void FamilyModel::load_weights(const ModelSource& source, WeightPlan plan, const LoadOptions& options) {
  store_ = std::make_unique<WeightStore>(source.weights, std::move(plan), options);
  const WeightStore& store = *store_;
  info_.model_type = source.config.get_string("model_type");
  info_.dir = source.dir;
  info_.weights = std::filesystem::path(source.weights->source()).filename().string();
  info_.n_layers = store.n_layers();
  info_.n_heads = int(H_);
  info_.n_kv_heads = int(Hkv_);
  info_.d_model = int(d_);
  info_.vocab_size = int(store.vocab_size());
  info_.weight_bytes = store.weight_bytes();
  info_.n_params = store.n_params();
  info_.n_params_non_embedding = store.n_params() - store.n_params_embedding();
  info_.weights_streamed = store.streaming();
  info_.device = store.device();
  info_.attention_kernel = options.attention_kernel;
  info_.attention_layers.clear();
  for (int l = 0; l < info_.n_layers; ++l) info_.attention_layers.push_back(l);
}

void FamilyModel::ensure_activations(int64_t batch, int64_t seq, Norm norm, std::vector<Activations::Slot> extra) {
  if (batch == acts_batch_ && seq == acts_seq_) return;
  const int64_t N = batch * seq;
  std::vector<Activations::Slot> slots = {
      {&res_[0], {N, d_}}, {&res_[1], {N, d_}}, {&mid_, {N, d_}}, {&xn_, {N, d_}}, {&rstd_, {N}},
      {&qkv_, {N, (H_ + 2 * Hkv_) * dh_}}, {&att_, {N, H_ * dh_}}, {&tmp_, {N, d_}}, {&ffn_, {N, F_}}};
  if (norm == Norm::layer) slots.push_back({&mean_, {N}});
  slots.insert(slots.end(), extra.begin(), extra.end());
  store_->check_budget(Activations::bytes(slots), strfmt("a batch of %lld x %lld tokens", (long long)batch,
                                                         (long long)seq));
  acts_.allocate(slots, store_->device());
  acts_batch_ = batch;
  acts_seq_ = seq;
}

FamilyModel::Heads FamilyModel::qkv_heads(int64_t batch, int64_t seq) const {
  return {head_view(qkv_, batch, seq, 0, H_, dh_), head_view(qkv_, batch, seq, H_ * dh_, Hkv_, dh_),
          head_view(qkv_, batch, seq, (H_ + Hkv_) * dh_, Hkv_, dh_)};
}

Tensor FamilyModel::attend(const Heads& h, const ops::AttentionSpec& spec, const ops::RopeConfig* rope, int layer,
                           const ForwardOptions& opt, LayerObserver* observer) {
  if (rope) {
    ops::rope_forward(h.q, h.q, Tensor{}, *rope);
    ops::rope_forward(h.k, h.k, Tensor{}, *rope);
  }
  Tensor probs = observer_probs(observer, layer, h.q, h.k);
  attention(head_view(att_, h.q.shape[0], h.q.shape[1], 0, H_, dh_), h.q, h.k, h.v, spec, layer, opt, rope, probs);
  return probs;
}

void FamilyModel::end_layer(int layer, const Heads& h, const ops::AttentionSpec& spec, Tensor probs,
                            const ForwardOptions& opt, LayerObserver* observer, Tensor pre_norm) {
  const int64_t B = h.q.shape[0], T = h.q.shape[1];
  const Tensor x_out = stream(layer + 1);
  ablate_hidden(x_out, B, T, layer, opt);
  if (!observer) return;
  LayerTaps taps = attention_taps(layer, B, stream(layer), x_out, h.q, h.k, h.v, &spec, probs);
  if (pre_norm.defined()) taps.hidden_pre_norm = pre_norm.split_dim(0, B, T);
  observer->on_layer(taps);
}

void FamilyModel::add_learned_positions(Tensor x, Tensor table, int64_t batch, int64_t seq, const ForwardOptions& opt,
                                        int32_t offset) {
  std::vector<int32_t> positions = learned_positions(batch, seq, opt, offset);
  ops::embedding_forward(tmp_, on_device(positions_buffer_, Tensor(positions.data(), DType::i32, {batch * seq})),
                         table);
  ops::add(x, x, tmp_);
}

void FamilyModel::write_logits(Tensor logits, Tensor x) {
  store_->head(logits.reshape({logits.shape[0] * logits.shape[1], logits.shape[2]}), x);
}

void FamilyModel::final_logits(Tensor logits, Norm norm, Tensor weight, Tensor bias) {
  const Tensor x = stream(info_.n_layers);
  if (norm == Norm::layer) ops::layernorm_forward(xn_, mean_, rstd_, x, weight, bias, eps_);
  else ops::rmsnorm_forward(xn_, rstd_, x, weight, eps_);
  write_logits(logits, xn_);
}

WeightPlan token_plan(const HfConfig& cfg, const Checkpoint& ckpt, const std::string& embedding, int64_t d_embed,
                      bool tied_by_default, std::initializer_list<const char*> head_names) {
  WeightPlan plan;
  plan.embedding = embedding;
  ckpt.check_shape(embedding, {positive_int(cfg, {"vocab_size"}), d_embed});
  if (cfg.get_bool("tie_word_embeddings", tied_by_default)) {
    plan.head = embedding;
    return plan;
  }
  for (const char* name : head_names) {
    plan.head = name;
    if (ckpt.has(name)) break;
  }
  return plan;
}

WeightSpec stacked_gate_up(const std::string& mlp, const std::string& what, int64_t mlp_width, int64_t d_in) {
  const std::vector<int64_t> shape = what == "weight" ? std::vector<int64_t>{mlp_width, d_in} : std::vector<int64_t>{mlp_width};
  return WeightSpec::stacked({{mlp + "gate_proj." + what, shape}, {mlp + "up_proj." + what, shape}});
}

void gated_mlp(Tensor out, Tensor x, Tensor gate_up_w, Tensor gate_up_b, Tensor down_w, Tensor down_b,
               ops::Activation act, Tensor gate_up, Tensor hidden) {
  const int64_t F = hidden.shape[1];
  ops::linear_forward(gate_up, x, gate_up_w, gate_up_b);
  ops::gated_forward(hidden, gate_up.slice(1, 0, F), gate_up.slice(1, F, F), act);
  ops::linear_forward(out, hidden, down_w, down_b);
}

std::vector<int32_t> learned_positions(int64_t batch, int64_t seq, const ForwardOptions& opt, int32_t offset) {
  std::vector<int32_t> row(static_cast<size_t>(seq));
  for (int64_t t = 0; t < seq; ++t) row[size_t(t)] = int32_t(t);
  if (opt.replace_first_position_with >= 0) row[0] = int32_t(opt.replace_first_position_with);
  if (opt.swap_first_position_with >= 0) std::swap(row[0], row[size_t(opt.swap_first_position_with)]);
  std::vector<int32_t> all(static_cast<size_t>(batch * seq));
  for (int64_t b = 0; b < batch; ++b)
    for (int64_t t = 0; t < seq; ++t) all[size_t(b * seq + t)] = row[size_t(t)] + offset;
  return all;
}

ops::Activation activation_from_config(const HfConfig& cfg, const std::string& key, const std::string& fallback) {
  const std::string name = cfg.get_string(key, fallback);
  // transformers' ACT2FN names: gelu_new, gelu_pytorch_tanh and gelu_fast are the same tanh formula.
  if (name == "gelu_new" || name == "gelu_pytorch_tanh" || name == "gelu_fast") return ops::Activation::gelu_tanh;
  if (name == "gelu") return ops::Activation::gelu_exact;
  if (name == "relu") return ops::Activation::relu;
  if (name == "silu" || name == "swish") return ops::Activation::silu;
  cfg.unsupported(strfmt("%s '%s' (sinklab has gelu, gelu_new, gelu_pytorch_tanh, gelu_fast, relu, silu)",
                         key.c_str(), name.c_str()));
}

ops::RopeConfig rope_from_config(const HfConfig& cfg, int64_t head_dim, const RopeKeys& keys) {
  // transformers >= 5 writes one "rope_parameters" object; older configs (every hub checkpoint of the
  // survey) have top-level theta / partial keys and an optional "rope_scaling" object.
  const nlohmann::json& params = cfg.object("rope_parameters");
  const nlohmann::json& scaling = params.is_null() ? cfg.object("rope_scaling") : params;
  auto number = [&](const nlohmann::json& obj, const char* key, double fallback) {
    if (obj.is_null() || !obj.contains(key) || obj[key].is_null()) return fallback;
    SL_CHECK(obj[key].is_number(), "%s: rope field '%s' must be a number, got %s", cfg.path().c_str(), key,
             obj[key].dump().c_str());
    return obj[key].get<double>();
  };
  ops::RopeConfig rope;
  rope.base = number(params, "rope_theta", cfg.get_double(keys.theta_key, cfg.get_double("rope_theta", keys.theta_default)));
  const double partial =
      number(params, "partial_rotary_factor", cfg.get_double(keys.partial_key, keys.partial_default));
  std::string type = "default";
  if (!scaling.is_null()) {
    const char* type_key = scaling.contains("rope_type") ? "rope_type" : "type";
    if (scaling.contains(type_key)) {
      SL_CHECK(scaling[type_key].is_string(), "%s: rope field '%s' must be a string", cfg.path().c_str(), type_key);
      type = scaling[type_key].get<std::string>();
    }
  }
  if (type == "llama3") {
    rope.llama3_factor = number(scaling, "factor", 0.0);
    rope.llama3_low_freq_factor = number(scaling, "low_freq_factor", 1.0);
    rope.llama3_high_freq_factor = number(scaling, "high_freq_factor", 4.0);
    rope.llama3_original_max_position =
        number(scaling, "original_max_position_embeddings", double(cfg.get_int("max_position_embeddings")));
    SL_CHECK(rope.llama3_factor > 0.0, "%s: llama3 rope scaling needs a positive 'factor'", cfg.path().c_str());
    SL_CHECK(rope.llama3_high_freq_factor > rope.llama3_low_freq_factor && rope.llama3_low_freq_factor > 0.0 &&
                 rope.llama3_original_max_position > 0.0,
             "%s: llama3 rope scaling needs high_freq_factor > low_freq_factor > 0 and "
             "original_max_position_embeddings > 0", cfg.path().c_str());
  } else if (type != "default") {
    cfg.unsupported(strfmt("rope type '%s' (sinklab has default and llama3)", type.c_str()));
  }
  SL_CHECK(rope.base > 0.0, "%s: rope theta must be positive, got %g", cfg.path().c_str(), rope.base);
  // As transformers: int(head_dim * factor).
  const int rotary = int(double(head_dim) * partial);
  if (rotary <= 0 || rotary % 2 != 0 || rotary > head_dim)
    cfg.unsupported(strfmt("partial rotary factor %g: %d rotary features of a %lld-wide head (must be even, > 0)",
                           partial, rotary, (long long)head_dim));
  rope.rotary_dim = rotary;
  return rope;
}

std::string find_prefix(const Checkpoint& ckpt, std::initializer_list<const char*> prefixes, const std::string& probe) {
  for (const char* p : prefixes)
    if (ckpt.has(p + probe)) return p;
  SL_FAIL("%s: missing tensor '%s%s'", ckpt.source().c_str(), *prefixes.begin(), probe.c_str());
}

int64_t positive_int(const HfConfig& cfg, std::initializer_list<const char*> keys) {
  const int64_t v = cfg.get_int_any(keys);
  SL_CHECK(v > 0 && v < (int64_t(1) << 31), "%s: field '%s' must be a positive integer, got %lld",
           cfg.path().c_str(), *keys.begin(), (long long)v);
  return v;
}

HeadShape head_shape(const HfConfig& cfg, bool grouped_query, std::initializer_list<const char*> width_keys,
                     std::initializer_list<const char*> head_keys) {
  HeadShape s;
  s.d_model = positive_int(cfg, width_keys);
  s.heads = positive_int(cfg, head_keys);
  s.kv_heads = s.heads;
  if (grouped_query && cfg.has("num_key_value_heads")) s.kv_heads = positive_int(cfg, {"num_key_value_heads"});
  SL_CHECK(s.heads % s.kv_heads == 0, "%s: num_attention_heads %lld is not a multiple of num_key_value_heads %lld",
           cfg.path().c_str(), (long long)s.heads, (long long)s.kv_heads);
  if (grouped_query && cfg.has("head_dim")) {
    s.head_dim = positive_int(cfg, {"head_dim"});
  } else {
    SL_CHECK(s.d_model % s.heads == 0, "%s: %s %lld is not a multiple of %s %lld", cfg.path().c_str(),
             *width_keys.begin(), (long long)s.d_model, *head_keys.begin(), (long long)s.heads);
    s.head_dim = s.d_model / s.heads;
  }
  return s;
}

}  // namespace sinklab::hf
