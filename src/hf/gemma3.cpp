// Gemma 3, the text model (HF model_type gemma3_text; transformers' modeling_gemma3.py, Gemma3ForCausalLM).
//
//   x = embed_tokens[ids] * sqrt(hidden_size)            (the scale rounded to f32, as the model's dtype)
//   per layer:  a = N_in(x);  q|k|v = a Wq|Wk|Wv;  q = N_q(q), k = N_k(k) per head (QK-norm, over head_dim)
//               x = x + N_post_attn(attn(rope_l(q), rope_l(k), v) Wo)
//               m = N_pre_ffn(x);  x = x + N_post_ffn((gelu_tanh(m Wg) * (m Wu)) Wd)
//   logits = N_f(x) embed_tokens^T                        (tied head)
// Every N is an RMSNorm that scales by (1 + w) (Gemma's convention; the weights are converted to 1 + w
// once, WeightSpec::plus_one). Layers are local or global (config "layer_types", or the older
// "sliding_window_pattern": every 6th layer global): a local layer attends to a sliding window of
// `sliding_window` keys (i - window < j <= i, HF's sliding_window_overlay: kv_idx > q_idx - window) with
// rope base rope_local_base_freq (10000), a global one causally with rope_theta (1e6). The attention scale
// is query_pre_attn_scalar^-1/2, not head_dim^-1/2; head_dim (256) need not be hidden_size / heads.
// Soft-capping of attention logits or final logits (Gemma 2; null in Gemma 3) and bidirectional attention
// (EmbeddingGemma) are refused naming the key.

#include <cmath>

#include "core/error.hpp"
#include "hf/family.hpp"

namespace sinklab::hf {
namespace {

enum Gemma3Layer : size_t {
  kNormIn, kQkvW, kQkvB, kQNorm, kKNorm, kOutW, kOutB, kNormPostAttn, kNormPreFfn, kGateUpW, kDownW, kNormPostFfn
};
enum Gemma3Resident : size_t { kFinalNorm };

// The rotary embedding of one layer type. transformers >= 5 writes rope_parameters = {"sliding_attention":
// {...}, "full_attention": {...}}; the hub's configs have rope_theta (global layers), rope_local_base_freq
// (local layers) and rope_scaling (global layers only). Either way the sub-config goes through
// rope_from_config, which refuses rope types sinklab lacks (e.g. Gemma 3 4B+'s "linear") naming them.
ops::RopeConfig layer_rope(const HfConfig& cfg, int64_t head_dim, bool local) {
  const char* type = local ? "sliding_attention" : "full_attention";
  const nlohmann::json& params = cfg.object("rope_parameters");
  nlohmann::json sub;
  if (!params.is_null()) {
    SL_CHECK(params.is_object() && params.contains(type) && params[type].is_object(),
             "%s: rope_parameters has no '%s' object", cfg.path().c_str(), type);
    sub["rope_parameters"] = params[type];
  } else if (local) {
    sub["rope_theta"] = cfg.get_double("rope_local_base_freq", 10000.0);
  } else {
    sub["rope_theta"] = cfg.get_double("rope_theta", 1000000.0);
    if (!cfg.object("rope_scaling").is_null()) sub["rope_scaling"] = cfg.object("rope_scaling");
  }
  if (cfg.has("max_position_embeddings")) sub["max_position_embeddings"] = cfg.get_int("max_position_embeddings");
  return rope_from_config(HfConfig(sub, cfg.path()), head_dim, RopeKeys{});
}

// Which layers are local: "layer_types" (transformers >= 4.55), else every `sliding_window_pattern`-th
// layer (default 6, the older configs' key, also spelt _sliding_window_pattern) global.
std::vector<bool> local_layers(const HfConfig& cfg, int64_t n_layers) {
  std::vector<bool> local(static_cast<size_t>(n_layers));
  const nlohmann::json& json = cfg.json();
  const nlohmann::json types = json.contains("layer_types") ? json["layer_types"] : nlohmann::json();
  if (!types.is_null()) {
    SL_CHECK(types.is_array() && int64_t(types.size()) == n_layers,
             "%s: layer_types must list %lld layer types, got %s", cfg.path().c_str(), (long long)n_layers,
             types.dump().c_str());
    for (int64_t l = 0; l < n_layers; ++l) {
      const nlohmann::json& t = types[size_t(l)];
      if (t == "sliding_attention") local[size_t(l)] = true;
      else if (t == "full_attention") local[size_t(l)] = false;
      else cfg.unsupported(strfmt("layer_types[%lld] %s (sinklab has sliding_attention and full_attention)",
                                  (long long)l, t.dump().c_str()));
    }
    return local;
  }
  const int64_t pattern = cfg.has("sliding_window_pattern")    ? positive_int(cfg, {"sliding_window_pattern"})
                          : cfg.has("_sliding_window_pattern") ? positive_int(cfg, {"_sliding_window_pattern"})
                                                               : 6;
  for (int64_t l = 0; l < n_layers; ++l) local[size_t(l)] = (l + 1) % pattern != 0;
  return local;
}

class Gemma3Model final : public FamilyModel {
 public:
  Gemma3Model(const ModelSource& src, const LoadOptions& options) {
    const HfConfig& cfg = src.config;
    // Switches of the Gemma family that Gemma 3 does not use: refused, naming the key.
    for (const char* key : {"attn_logit_softcapping", "final_logit_softcapping"})
      if (cfg.has(key)) cfg.unsupported(strfmt("%s %g (soft-capping; null in Gemma 3)", key, cfg.get_double(key)));
    if (cfg.get_bool("use_bidirectional_attention", false))
      cfg.unsupported("use_bidirectional_attention true (sinklab's gemma3 is causal)");
    // transformers' Gemma3TextConfig default head_dim is 256, whatever hidden_size / heads is.
    HeadShape shape;
    if (cfg.has("head_dim")) {
      shape = head_shape(cfg, true);
    } else {
      nlohmann::json with_head = cfg.json();
      with_head["head_dim"] = 256;
      shape = head_shape(HfConfig(with_head, cfg.path()), true);
    }
    set_sizes(shape, positive_int(cfg, {"intermediate_size"}));
    const int64_t L = positive_int(cfg, {"num_hidden_layers"});
    eps_ = cfg.get_double("rms_norm_eps", 1e-6);
    act_ = activation_from_config(cfg, "hidden_activation", "gelu_pytorch_tanh");
    const bool attn_bias = cfg.get_bool("attention_bias", false);
    const double scalar = cfg.get_double("query_pre_attn_scalar", 256.0);
    SL_CHECK(scalar > 0.0, "%s: query_pre_attn_scalar must be positive, got %g", cfg.path().c_str(), scalar);
    // HF's Gemma3TextScaledWordEmbedding: hidden_size**0.5 as a tensor of the model's dtype.
    embed_scale_ = double(float(std::sqrt(double(d_))));
    rope_local_ = layer_rope(cfg, dh_, true);
    rope_global_ = layer_rope(cfg, dh_, false);
    local_ = local_layers(cfg, L);
    for (int64_t l = 0; l < L; ++l) {
      ops::AttentionSpec spec;
      spec.scale = 1.0 / std::sqrt(scalar);
      if (local_[size_t(l)]) {
        const int64_t window = cfg.get_int("sliding_window");
        SL_CHECK(window >= 1, "%s: sliding_window must be >= 1, got %lld", cfg.path().c_str(), (long long)window);
        spec.mask = ops::AttnMask::sliding_window;
        spec.window = window;
      }
      specs_.push_back(spec);
    }

    const std::string pre = find_prefix(*src.weights, {"model.", ""}, "embed_tokens.weight");
    WeightPlan plan = token_plan(cfg, *src.weights, pre + "embed_tokens.weight", d_, /*tied_by_default=*/true);
    plan.resident = {WeightSpec::plus_one(pre + "norm.weight", {d_})};
    const int64_t q_rows = H_ * dh_, kv_rows = Hkv_ * dh_;
    for (int64_t l = 0; l < L; ++l) {
      const std::string p = pre + "layers." + std::to_string(l) + ".", a = p + "self_attn.";
      plan.layers.push_back({
          WeightSpec::plus_one(p + "input_layernorm.weight", {d_}),
          WeightSpec::stacked_qkv(a, "weight", q_rows, kv_rows, d_),
          attn_bias ? WeightSpec::stacked_qkv(a, "bias", q_rows, kv_rows, d_) : WeightSpec::absent(),
          WeightSpec::plus_one(a + "q_norm.weight", {dh_}),
          WeightSpec::plus_one(a + "k_norm.weight", {dh_}),
          WeightSpec::one(a + "o_proj.weight", {d_, q_rows}),
          attn_bias ? WeightSpec::one(a + "o_proj.bias", {d_}) : WeightSpec::absent(),
          WeightSpec::plus_one(p + "post_attention_layernorm.weight", {d_}),
          WeightSpec::plus_one(p + "pre_feedforward_layernorm.weight", {d_}),
          stacked_gate_up(p + "mlp.", "weight", F_, d_),
          WeightSpec::one(p + "mlp.down_proj.weight", {d_, F_}),
          WeightSpec::plus_one(p + "post_feedforward_layernorm.weight", {d_}),
      });
    }
    load_weights(src, std::move(plan), options);
  }

  void forward(Tensor ids, LayerObserver* observer, Tensor logits, const ForwardOptions& opt) override {
    const bool want_logits = begin_forward(ids, logits, opt);
    const int64_t B = ids.shape[0], T = ids.shape[1], N = B * T;
    ensure_activations(B, T, Norm::rms, {{&qk_rstd_, {N * H_}}, {&gate_up_, {N, 2 * F_}}});
    store_->embed(res_[0], ids.reshape({N}));
    ops::scale(res_[0], embed_scale_);
    for (int l = 0; l < info_.n_layers; ++l) {
      const std::vector<Tensor>& w = store_->layer(l);
      const ops::RopeConfig& rope = local_[size_t(l)] ? rope_local_ : rope_global_;
      const ops::AttentionSpec& spec = specs_[size_t(l)];
      Tensor x_in = stream(l), x_out = stream(l + 1);
      // Attention block: mid = x_in + N_post_attn(attn(rope(N_q(q)), rope(N_k(k)), v) Wo), q|k|v = N_in(x_in) W.
      ops::rmsnorm_forward(xn_, rstd_, x_in, w[kNormIn], eps_);
      ops::linear_forward(qkv_, xn_, w[kQkvW], w[kQkvB]);
      const Heads h = qkv_heads(B, T);
      ops::rmsnorm_forward(h.q, qk_rstd_, h.q, w[kQNorm], eps_);  // per head, over head_dim, in place
      ops::rmsnorm_forward(h.k, qk_rstd_.slice(0, 0, N * Hkv_), h.k, w[kKNorm], eps_);
      const Tensor probs = attend(h, spec, &rope, l, opt, observer);
      ops::linear_forward(tmp_, att_, w[kOutW], w[kOutB]);
      ops::rmsnorm_forward(tmp_, rstd_, tmp_, w[kNormPostAttn], eps_);
      ops::add(mid_, x_in, tmp_);
      // MLP block: x_out = mid + N_post_ffn((gelu_tanh(m Wg) * (m Wu)) Wd), m = N_pre_ffn(mid).
      ops::rmsnorm_forward(xn_, rstd_, mid_, w[kNormPreFfn], eps_);
      gated_mlp(tmp_, xn_, w[kGateUpW], Tensor{}, w[kDownW], Tensor{}, act_, gate_up_, ffn_);
      ops::rmsnorm_forward(tmp_, rstd_, tmp_, w[kNormPostFfn], eps_);
      ops::add(x_out, mid_, tmp_);
      end_layer(l, h, spec, probs, opt, observer);
    }
    if (want_logits) final_logits(logits, Norm::rms, store_->resident()[kFinalNorm]);
  }

 private:
  double embed_scale_ = 1.0;
  ops::RopeConfig rope_local_, rope_global_;
  std::vector<bool> local_;
  std::vector<ops::AttentionSpec> specs_;
  Tensor qk_rstd_, gate_up_;
};

}  // namespace

std::unique_ptr<HfModel> load_gemma3(const ModelSource& source, const LoadOptions& options) {
  return std::make_unique<Gemma3Model>(source, options);
}

}  // namespace sinklab::hf
