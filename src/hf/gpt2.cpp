// GPT-2 (HF model_type gpt2; transformers' modeling_gpt2.py): learned absolute positions, pre-LN
// blocks, fused q|k|v projection, gelu_new MLP, final LayerNorm, head tied to the token table.
//
//   x   = wte[ids] + wpe[positions]
//   per layer:  a = LN_1(x);  q|k|v = a Wqkv + b;  x += attn(q, k, v) Wo + b
//               m = LN_2(x);  x += act(m Wfc + b) Wproj + b
//   logits = LN_f(x) wte^T
// Weights are Conv1D modules, stored [in, out]: converted to the op API's [out, in] while loading.
// Attention scale: 1/sqrt(dh) (scale_attn_weights), further / (layer + 1) with
// scale_attn_by_inverse_layer_idx.

#include <cmath>

#include "core/error.hpp"
#include "hf/family.hpp"

namespace sinklab::hf {
namespace {

// Per-layer tensors, in WeightPlan order.
enum Gpt2Layer : size_t { kLn1W, kLn1B, kQkvW, kQkvB, kOutW, kOutB, kLn2W, kLn2B, kFcW, kFcB, kProjW, kProjB };
enum Gpt2Resident : size_t { kPositions, kLnFW, kLnFB };

class Gpt2Model final : public FamilyModel {
 public:
  explicit Gpt2Model(const ModelSource& src, const LoadOptions& options) {
    const HfConfig& cfg = src.config;
    const HeadShape shape = head_shape(cfg, false, {"n_embd", "hidden_size"}, {"n_head", "num_attention_heads"});
    set_sizes(shape, cfg.has("n_inner") ? positive_int(cfg, {"n_inner"}) : 4 * shape.d_model);
    const int64_t L = positive_int(cfg, {"n_layer", "num_hidden_layers"});
    const int64_t P = positive_int(cfg, {"n_positions", "max_position_embeddings"});
    eps_ = cfg.get_double("layer_norm_epsilon", 1e-5);
    act_ = activation_from_config(cfg, "activation_function", "gelu_new");
    if (cfg.get_bool("add_cross_attention", false)) cfg.unsupported("add_cross_attention (an encoder-decoder GPT-2)");
    const bool scale_weights = cfg.get_bool("scale_attn_weights", true);
    const bool by_layer = cfg.get_bool("scale_attn_by_inverse_layer_idx", false);

    const std::string pre = find_prefix(*src.weights, {"transformer.", ""}, "wte.weight");
    WeightPlan plan = token_plan(cfg, *src.weights, pre + "wte.weight", d_, /*tied_by_default=*/true);
    plan.resident = {WeightSpec::one(pre + "wpe.weight", {P, d_}), WeightSpec::one(pre + "ln_f.weight", {d_}),
                     WeightSpec::one(pre + "ln_f.bias", {d_})};
    for (int64_t l = 0; l < L; ++l) {
      const std::string p = pre + "h." + std::to_string(l) + ".";
      plan.layers.push_back({
          WeightSpec::one(p + "ln_1.weight", {d_}), WeightSpec::one(p + "ln_1.bias", {d_}),
          WeightSpec::conv1d(p + "attn.c_attn.weight", d_, 3 * d_), WeightSpec::one(p + "attn.c_attn.bias", {3 * d_}),
          WeightSpec::conv1d(p + "attn.c_proj.weight", d_, d_), WeightSpec::one(p + "attn.c_proj.bias", {d_}),
          WeightSpec::one(p + "ln_2.weight", {d_}), WeightSpec::one(p + "ln_2.bias", {d_}),
          WeightSpec::conv1d(p + "mlp.c_fc.weight", d_, F_), WeightSpec::one(p + "mlp.c_fc.bias", {F_}),
          WeightSpec::conv1d(p + "mlp.c_proj.weight", F_, d_), WeightSpec::one(p + "mlp.c_proj.bias", {d_}),
      });
      ops::AttentionSpec spec;
      spec.scale = (scale_weights ? 1.0 / std::sqrt(double(dh_)) : 1.0) / (by_layer ? double(l + 1) : 1.0);
      specs_.push_back(spec);
    }
    load_weights(src, std::move(plan), options);
    info_.max_positions = P;
    info_.learned_positions = true;
  }

  void forward(Tensor ids, LayerObserver* observer, Tensor logits, const ForwardOptions& opt) override {
    const bool want_logits = begin_forward(ids, logits, opt);
    const int64_t B = ids.shape[0], T = ids.shape[1], N = B * T;
    ensure_activations(B, T, Norm::layer);
    const std::vector<Tensor>& resident = store_->resident();

    // x = wte[ids] + wpe[positions] (positions with the Table 7 interventions).
    store_->embed(res_[0], ids.reshape({N}));
    add_learned_positions(res_[0], resident[kPositions], B, T, opt, 0);

    for (int l = 0; l < info_.n_layers; ++l) {
      const std::vector<Tensor>& w = store_->layer(l);
      const ops::AttentionSpec& spec = specs_[size_t(l)];
      Tensor x_in = stream(l), x_out = stream(l + 1);
      // Attention block: mid = x_in + attn(LN_1(x_in)) Wo + bo.
      ops::layernorm_forward(xn_, mean_, rstd_, x_in, w[kLn1W], w[kLn1B], eps_);
      ops::linear_forward(qkv_, xn_, w[kQkvW], w[kQkvB]);
      const Heads h = qkv_heads(B, T);
      const Tensor probs = attend(h, spec, nullptr, l, opt, observer);
      ops::linear_forward(tmp_, att_, w[kOutW], w[kOutB]);
      ops::add(mid_, x_in, tmp_);
      // MLP block: x_out = mid + act(LN_2(mid) Wfc + bfc) Wproj + bproj.
      ops::layernorm_forward(xn_, mean_, rstd_, mid_, w[kLn2W], w[kLn2B], eps_);
      ops::linear_forward(ffn_, xn_, w[kFcW], w[kFcB]);
      ops::activation_forward(ffn_, ffn_, act_);
      ops::linear_forward(tmp_, ffn_, w[kProjW], w[kProjB]);
      ops::add(x_out, mid_, tmp_);
      end_layer(l, h, spec, probs, opt, observer);
    }
    if (want_logits) final_logits(logits, Norm::layer, resident[kLnFW], resident[kLnFB]);
  }

 private:
  std::vector<ops::AttentionSpec> specs_;
};

}  // namespace

std::unique_ptr<HfModel> load_gpt2(const ModelSource& source, const LoadOptions& options) {
  return std::make_unique<Gpt2Model>(source, options);
}

}  // namespace sinklab::hf
