// Qwen2 / Qwen2.5 (HF model_type qwen2; transformers' modeling_qwen2.py, Qwen2ForCausalLM).
//
//   x = embed_tokens[ids]
//   per layer:  x = x + attn(rope(q), rope(k), v) Wo,   q|k|v = RMSNorm_1(x) Wq|Wk|Wv + bq|bk|bv
//               x = x + (silu(m Wg) * (m Wu)) Wd,       m = RMSNorm_2(x)
//   logits = RMSNorm_f(x) lm_head^T                     (tied to embed_tokens when tie_word_embeddings)
// A Llama with biases on the q, k and v projections and none on o (always: Qwen2 has no attention_bias
// switch; these are the biases the paper's Sec. 7 is about), grouped-query attention, rope_theta 1e6 in
// Qwen2.5, head_dim = hidden_size / heads. Qwen2's optional sliding window (use_sliding_window true, or
// layer_types with sliding_attention) is refused naming the key: no released Qwen2 checkpoint turns it on.

#include <cmath>

#include "core/error.hpp"
#include "hf/family.hpp"

namespace sinklab::hf {
namespace {

enum Qwen2Layer : size_t { kNorm1, kQkvW, kQkvB, kOutW, kNorm2, kGateUpW, kDownW };
enum Qwen2Resident : size_t { kFinalNorm };

class Qwen2Model final : public FamilyModel {
 public:
  Qwen2Model(const ModelSource& src, const LoadOptions& options) {
    const HfConfig& cfg = src.config;
    if (cfg.get_bool("use_sliding_window", false))
      cfg.unsupported("use_sliding_window true (sinklab's qwen2 attends to every earlier key)");
    const nlohmann::json types = cfg.json().contains("layer_types") ? cfg.json()["layer_types"] : nlohmann::json();
    if (!types.is_null()) {
      SL_CHECK(types.is_array(), "%s: layer_types must be an array", cfg.path().c_str());
      for (size_t l = 0; l < types.size(); ++l)
        if (types[l] != "full_attention")
          cfg.unsupported(strfmt("layer_types[%zu] %s (sinklab's qwen2 has full_attention layers only)", l,
                                 types[l].dump().c_str()));
    }
    const HeadShape shape = head_shape(cfg, true);
    d_ = shape.d_model;
    H_ = shape.heads;
    Hkv_ = shape.kv_heads;
    dh_ = shape.head_dim;
    const int64_t L = positive_int(cfg, {"num_hidden_layers"});
    const int64_t V = positive_int(cfg, {"vocab_size"});
    F_ = positive_int(cfg, {"intermediate_size"});
    eps_ = cfg.get_double("rms_norm_eps", 1e-6);
    act_ = activation_from_config(cfg, "hidden_act", "silu");
    rope_ = rope_from_config(cfg, dh_, RopeKeys{});
    spec_.scale = 1.0 / std::sqrt(double(dh_));

    const Checkpoint& ck = *src.weights;
    const std::string pre = find_prefix(ck, {"model.", ""}, "embed_tokens.weight");
    WeightPlan plan;
    plan.embedding = pre + "embed_tokens.weight";
    ck.check_shape(plan.embedding, {V, d_});
    plan.head = cfg.get_bool("tie_word_embeddings", false) ? plan.embedding : "lm_head.weight";
    plan.resident = {WeightSpec::one(pre + "norm.weight", {d_})};
    const int64_t q_rows = H_ * dh_, kv_rows = Hkv_ * dh_;
    for (int64_t l = 0; l < L; ++l) {
      const std::string p = pre + "layers." + std::to_string(l) + ".";
      const std::string a = p + "self_attn.", m = p + "mlp.";
      plan.layers.push_back({
          WeightSpec::one(p + "input_layernorm.weight", {d_}),
          WeightSpec::stacked({{a + "q_proj.weight", {q_rows, d_}},
                               {a + "k_proj.weight", {kv_rows, d_}},
                               {a + "v_proj.weight", {kv_rows, d_}}}),
          WeightSpec::stacked({{a + "q_proj.bias", {q_rows}}, {a + "k_proj.bias", {kv_rows}}, {a + "v_proj.bias", {kv_rows}}}),
          WeightSpec::one(a + "o_proj.weight", {d_, q_rows}),
          WeightSpec::one(p + "post_attention_layernorm.weight", {d_}),
          WeightSpec::stacked({{m + "gate_proj.weight", {F_, d_}}, {m + "up_proj.weight", {F_, d_}}}),
          WeightSpec::one(m + "down_proj.weight", {d_, F_}),
      });
    }
    store_ = std::make_unique<WeightStore>(src.weights, std::move(plan), options.max_memory_bytes,
                                           options.resident_if_fits);
    fill_common_info(info_, src, *store_, shape);
  }

  void forward(Tensor ids, LayerObserver* observer, Tensor logits, const ForwardOptions& opt) override {
    const bool want_logits = begin_forward(ids, logits, opt);
    const int64_t B = ids.shape[0], T = ids.shape[1], N = B * T, d = d_, H = H_, Hkv = Hkv_, dh = dh_;
    const int64_t qkv_dim = (H + 2 * Hkv) * dh;
    if (B != acts_batch_ || T != acts_seq_) {
      allocate_activations(B, T, {{&res_[0], {N, d}}, {&res_[1], {N, d}}, {&mid_, {N, d}}, {&xn_, {N, d}},
                                  {&rstd_, {N}}, {&qkv_, {N, qkv_dim}}, {&att_, {N, H * dh}}, {&tmp_, {N, d}},
                                  {&gate_up_, {N, 2 * F_}}, {&ffn_, {N, F_}}});
    }
    store_->embed(res_[0], ids.reshape({N}));
    for (int l = 0; l < info_.n_layers; ++l) {
      const std::vector<Tensor>& w = store_->layer(l);
      Tensor x_in = res_[l % 2], x_out = res_[(l + 1) % 2];
      // Attention block: mid = x_in + attn(rope(q), rope(k), v) Wo, q|k|v = RMSNorm_1(x_in) W + b.
      ops::rmsnorm_forward(xn_, rstd_, x_in, w[kNorm1], eps_);
      ops::linear_forward(qkv_, xn_, w[kQkvW], w[kQkvB]);
      Tensor q = head_view(qkv_, B, T, 0, H, dh), k = head_view(qkv_, B, T, H * dh, Hkv, dh),
             v = head_view(qkv_, B, T, (H + Hkv) * dh, Hkv, dh);
      ops::rope_forward(q, q, Tensor{}, rope_);
      ops::rope_forward(k, k, Tensor{}, rope_);
      Tensor probs = observer_probs(observer, l, q, k);
      attention(head_view(att_, B, T, 0, H, dh), q, k, v, spec_, l, opt, &rope_, probs);
      ops::linear_forward(tmp_, att_, w[kOutW], Tensor{});
      ops::add(mid_, x_in, tmp_);
      // MLP block: x_out = mid + (silu(m Wg) * (m Wu)) Wd, m = RMSNorm_2(mid).
      ops::rmsnorm_forward(xn_, rstd_, mid_, w[kNorm2], eps_);
      ops::linear_forward(gate_up_, xn_, w[kGateUpW], Tensor{});
      ops::gated_forward(ffn_, gate_up_.slice(1, 0, F_), gate_up_.slice(1, F_, F_), act_);
      ops::linear_forward(tmp_, ffn_, w[kDownW], Tensor{});
      ops::add(x_out, mid_, tmp_);
      ablate_hidden(x_out, B, T, l, opt);
      if (observer) observer->on_layer(attention_taps(l, B, x_in, x_out, q, k, v, &spec_, probs));
    }
    if (!want_logits) return;
    ops::rmsnorm_forward(xn_, rstd_, res_[info_.n_layers % 2], store_->resident()[kFinalNorm], eps_);
    store_->head(logits.reshape({N, int64_t(info_.vocab_size)}), xn_);
  }

 private:
  int64_t d_ = 0, H_ = 0, Hkv_ = 0, dh_ = 0, F_ = 0;
  double eps_ = 1e-6;
  ops::Activation act_ = ops::Activation::silu;
  ops::RopeConfig rope_;
  ops::AttentionSpec spec_;
  Tensor res_[2], mid_, xn_, rstd_, qkv_, att_, tmp_, gate_up_, ffn_;
};

}  // namespace

std::unique_ptr<HfModel> load_qwen2(const ModelSource& source, const LoadOptions& options) {
  return std::make_unique<Qwen2Model>(source, options);
}

}  // namespace sinklab::hf
