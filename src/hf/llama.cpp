// LLaMA-2/3/3.1 and Mistral (HF model_type llama / mistral; transformers' modeling_llama.py and
// modeling_mistral.py), and sinklab's own checkpoints (a llama config.json with a "sinklab" section).
//
//   x = embed_tokens[ids]
//   per layer:  x = x + attn(rope(q), rope(k), v) Wo,   q|k|v = RMSNorm_1(x) Wq|Wk|Wv
//               x = x + (act(m Wg) * (m Wu)) Wd,        m = RMSNorm_2(x)
//   logits = RMSNorm_f(x) lm_head^T
// Grouped-query attention (num_key_value_heads < num_attention_heads), rope_theta, Llama-3.1 rope
// scaling (rope type llama3), optional q/k/v/o and MLP biases (attention_bias, mlp_bias), head_dim
// other than hidden_size / heads, tied embeddings (Llama-3.2). Mistral: every layer attends to a
// sliding window of `sliding_window` keys (i - window < j <= i), when the config sets one.

#include <cmath>

#include "core/error.hpp"
#include "hf/family.hpp"
#include "hf/registry.hpp"

namespace sinklab::hf {
namespace {

enum LlamaLayer : size_t { kNorm1, kQkvW, kQkvB, kOutW, kOutB, kNorm2, kGateUpW, kGateUpB, kDownW, kDownB };
enum LlamaResident : size_t { kFinalNorm };

class LlamaModel final : public FamilyModel {
 public:
  // biases: the bias layout; nullptr reads Llama's own switches (attention_bias: q, k, v and o; mlp_bias).
  LlamaModel(const ModelSource& src, const LoadOptions& options, const LlamaBiases* biases) {
    const HfConfig& cfg = src.config;
    const std::string model_type = cfg.get_string("model_type");
    set_sizes(head_shape(cfg, true), positive_int(cfg, {"intermediate_size"}));
    const int64_t L = positive_int(cfg, {"num_hidden_layers"});
    eps_ = cfg.get_double("rms_norm_eps", 1e-6);
    act_ = activation_from_config(cfg, "hidden_act", "silu");
    rope_ = rope_from_config(cfg, dh_, RopeKeys{});
    const bool attn_bias = cfg.get_bool("attention_bias", false);
    const LlamaBiases bias = biases ? *biases : LlamaBiases{attn_bias, attn_bias, cfg.get_bool("mlp_bias", false)};
    // sinklab's own checkpoints list the variant axes that differ from the default model under
    // "sinklab"; only the default model is a plain Llama (the survey loads the others through the
    // trainable model, probe::load_any_model). "attention": "softmax" is what older checkpoints wrote.
    const nlohmann::json& own = cfg.object("sinklab");
    if (own.is_object()) {
      for (const auto& [axis, value] : own.items()) {
        if (axis == "attention" && value == "softmax") continue;
        cfg.unsupported(strfmt("sinklab variant %s = %s (the HF loader reads default checkpoints; sinklab-survey "
                               "loads variants through the trainable model)",
                               axis.c_str(), value.dump().c_str()));
      }
    }
    if (model_type == "mistral" && cfg.has("sliding_window")) {
      const int64_t window = cfg.get_int("sliding_window");
      SL_CHECK(window >= 1, "%s: sliding_window must be >= 1, got %lld", cfg.path().c_str(), (long long)window);
      spec_.mask = ops::AttnMask::sliding_window;
      spec_.window = window;
    }
    spec_.scale = 1.0 / std::sqrt(double(dh_));

    const std::string pre = find_prefix(*src.weights, {"model.", ""}, "embed_tokens.weight");
    WeightPlan plan = token_plan(cfg, *src.weights, pre + "embed_tokens.weight", d_, /*tied_by_default=*/false);
    plan.resident = {WeightSpec::one(pre + "norm.weight", {d_})};
    const int64_t q_rows = H_ * dh_, kv_rows = Hkv_ * dh_;
    for (int64_t l = 0; l < L; ++l) {
      const std::string p = pre + "layers." + std::to_string(l) + ".";
      const std::string a = p + "self_attn.", m = p + "mlp.";
      plan.layers.push_back({
          WeightSpec::one(p + "input_layernorm.weight", {d_}),
          WeightSpec::stacked_qkv(a, "weight", q_rows, kv_rows, d_),
          bias.qkv ? WeightSpec::stacked_qkv(a, "bias", q_rows, kv_rows, d_) : WeightSpec::absent(),
          WeightSpec::one(a + "o_proj.weight", {d_, q_rows}),
          bias.o ? WeightSpec::one(a + "o_proj.bias", {d_}) : WeightSpec::absent(),
          WeightSpec::one(p + "post_attention_layernorm.weight", {d_}),
          stacked_gate_up(m, "weight", F_, d_),
          bias.mlp ? stacked_gate_up(m, "bias", F_, d_) : WeightSpec::absent(),
          WeightSpec::one(m + "down_proj.weight", {d_, F_}),
          bias.mlp ? WeightSpec::one(m + "down_proj.bias", {d_}) : WeightSpec::absent(),
      });
    }
    load_weights(src, std::move(plan), options);
  }

  void forward(Tensor ids, LayerObserver* observer, Tensor logits, const ForwardOptions& opt) override {
    const bool want_logits = begin_forward(ids, logits, opt);
    const int64_t B = ids.shape[0], T = ids.shape[1], N = B * T;
    ensure_activations(B, T, Norm::rms, {{&gate_up_, {N, 2 * F_}}});
    store_->embed(res_[0], ids.reshape({N}));
    for (int l = 0; l < info_.n_layers; ++l) {
      const std::vector<Tensor>& w = store_->layer(l);
      Tensor x_in = stream(l), x_out = stream(l + 1);
      // Attention block: mid = x_in + attn(rope(q), rope(k), v) Wo.
      ops::rmsnorm_forward(xn_, rstd_, x_in, w[kNorm1], eps_);
      ops::linear_forward(qkv_, xn_, w[kQkvW], w[kQkvB]);
      const Heads h = qkv_heads(B, T);
      const Tensor probs = attend(h, spec_, &rope_, l, opt, observer);
      ops::linear_forward(tmp_, att_, w[kOutW], w[kOutB]);
      ops::add(mid_, x_in, tmp_);
      // MLP block: x_out = mid + (act(m Wg) * (m Wu)) Wd, m = RMSNorm_2(mid).
      ops::rmsnorm_forward(xn_, rstd_, mid_, w[kNorm2], eps_);
      gated_mlp(tmp_, xn_, w[kGateUpW], w[kGateUpB], w[kDownW], w[kDownB], act_, gate_up_, ffn_);
      ops::add(x_out, mid_, tmp_);
      end_layer(l, h, spec_, probs, opt, observer);
    }
    if (want_logits) final_logits(logits, Norm::rms, store_->resident()[kFinalNorm]);
  }

 private:
  ops::RopeConfig rope_;
  ops::AttentionSpec spec_;
  Tensor gate_up_;
};

}  // namespace

std::unique_ptr<HfModel> load_llama(const ModelSource& source, const LoadOptions& options) {
  return std::make_unique<LlamaModel>(source, options, nullptr);
}

std::unique_ptr<HfModel> load_llama_with_biases(const ModelSource& source, const LoadOptions& options,
                                                const LlamaBiases& biases) {
  return std::make_unique<LlamaModel>(source, options, &biases);
}

}  // namespace sinklab::hf
