// OPT (HF model_type opt; transformers' modeling_opt.py): learned positions offset by 2, separate
// q/k/v projections with the query scaled by 1/sqrt(dh) before the scores (the attention itself then
// uses scale 1), ReLU MLP, head tied to the token table.
//
//   x = project_in(embed_tokens[ids]) + embed_positions[positions + 2]
//   do_layer_norm_before (125M, 1.3B, ...; pre-LN):
//     x = x + attn(LN_a(x));  x = x + fc2(relu(fc1(LN_f(x))))        ... then the decoder's final LN
//   not do_layer_norm_before (350M; post-LN, no final LN):
//     x = LN_a(x + attn(x));  x = LN_f(x + fc2(relu(fc1(x))))
//   logits = project_out(x) embed_tokens^T
// project_in/out exist when word_embed_proj_dim != hidden_size (350M: 512 vs 1024).

#include <cmath>

#include "core/error.hpp"
#include "hf/family.hpp"

namespace sinklab::hf {
namespace {

enum OptLayer : size_t { kAttnLnW, kAttnLnB, kQkvW, kQkvB, kOutW, kOutB, kMlpLnW, kMlpLnB, kFc1W, kFc1B, kFc2W, kFc2B };
enum OptResident : size_t { kPositions, kProjectIn, kProjectOut, kFinalLnW, kFinalLnB };

constexpr int32_t kPositionOffset = 2;  // OPTLearnedPositionalEmbedding.offset

class OptModel final : public FamilyModel {
 public:
  OptModel(const ModelSource& src, const LoadOptions& options) {
    const HfConfig& cfg = src.config;
    set_sizes(head_shape(cfg, false), positive_int(cfg, {"ffn_dim"}));
    eps_ = 1e-5;  // nn.LayerNorm's default; OPT's config has no epsilon
    const int64_t P = positive_int(cfg, {"max_position_embeddings"});
    wd_ = cfg.has("word_embed_proj_dim") ? positive_int(cfg, {"word_embed_proj_dim"}) : d_;
    act_ = activation_from_config(cfg, "activation_function", "relu");
    pre_ln_ = cfg.get_bool("do_layer_norm_before", true);
    final_ln_ = pre_ln_ && !cfg.get_bool("_remove_final_layer_norm", false);
    const bool bias = cfg.get_bool("enable_bias", true);
    const bool affine = cfg.get_bool("layer_norm_elementwise_affine", true);

    const std::string pre = find_prefix(*src.weights, {"model.decoder.", "decoder."}, "embed_tokens.weight");
    WeightPlan plan = token_plan(cfg, *src.weights, pre + "embed_tokens.weight", wd_, /*tied_by_default=*/true);
    auto ln = [&](const std::string& name) {  // LayerNorm weight/bias, absent without elementwise affine
      return affine ? WeightSpec::one(name, {d_}) : WeightSpec::absent();
    };
    const bool project = wd_ != d_;
    plan.resident = {
        WeightSpec::one(pre + "embed_positions.weight", {P + kPositionOffset, d_}),
        project ? WeightSpec::one(pre + "project_in.weight", {d_, wd_}) : WeightSpec::absent(),
        project ? WeightSpec::one(pre + "project_out.weight", {wd_, d_}) : WeightSpec::absent(),
        final_ln_ ? ln(pre + "final_layer_norm.weight") : WeightSpec::absent(),
        final_ln_ ? ln(pre + "final_layer_norm.bias") : WeightSpec::absent(),
    };
    const int64_t L = positive_int(cfg, {"num_hidden_layers"});
    for (int64_t l = 0; l < L; ++l) {
      const std::string p = pre + "layers." + std::to_string(l) + ".";
      const std::string a = p + "self_attn.";
      plan.layers.push_back({
          ln(p + "self_attn_layer_norm.weight"), ln(p + "self_attn_layer_norm.bias"),
          WeightSpec::stacked_qkv(a, "weight", d_, d_, d_),
          bias ? WeightSpec::stacked_qkv(a, "bias", d_, d_, d_) : WeightSpec::absent(),
          WeightSpec::one(a + "out_proj.weight", {d_, d_}),
          bias ? WeightSpec::one(a + "out_proj.bias", {d_}) : WeightSpec::absent(),
          ln(p + "final_layer_norm.weight"), ln(p + "final_layer_norm.bias"),
          WeightSpec::one(p + "fc1.weight", {F_, d_}), bias ? WeightSpec::one(p + "fc1.bias", {F_}) : WeightSpec::absent(),
          WeightSpec::one(p + "fc2.weight", {d_, F_}), bias ? WeightSpec::one(p + "fc2.bias", {d_}) : WeightSpec::absent(),
      });
    }
    load_weights(src, std::move(plan), options);
    info_.max_positions = P;
    info_.learned_positions = true;
    spec_.scale = 1.0;  // the query is scaled by 1/sqrt(dh) before the scores, as transformers does
  }

  void forward(Tensor ids, LayerObserver* observer, Tensor logits, const ForwardOptions& opt) override {
    const bool want_logits = begin_forward(ids, logits, opt);
    const int64_t B = ids.shape[0], T = ids.shape[1], N = B * T;
    ensure_activations(B, T, Norm::layer, {{&pre_norm_, {N, d_}}, {&words_, {N, wd_}}});
    const std::vector<Tensor>& resident = store_->resident();

    // x = project_in(embed_tokens[ids]) + embed_positions[positions + 2].
    if (resident[kProjectIn].defined()) {
      store_->embed(words_, ids.reshape({N}));
      ops::linear_forward(res_[0], words_, resident[kProjectIn], Tensor{});
    } else {
      store_->embed(res_[0], ids.reshape({N}));
    }
    add_learned_positions(res_[0], resident[kPositions], B, T, opt, kPositionOffset);

    const double q_scale = 1.0 / std::sqrt(double(dh_));
    for (int l = 0; l < info_.n_layers; ++l) {
      const std::vector<Tensor>& w = store_->layer(l);
      Tensor x_in = stream(l), x_out = stream(l + 1);
      // Attention block. Pre-LN: mid = x_in + attn(LN_a(x_in)). Post-LN: mid = LN_a(x_in + attn(x_in)).
      Tensor attn_in = x_in;
      if (pre_ln_) {
        ops::layernorm_forward(xn_, mean_, rstd_, x_in, w[kAttnLnW], w[kAttnLnB], eps_);
        attn_in = xn_;
      }
      ops::linear_forward(qkv_, attn_in, w[kQkvW], w[kQkvB]);
      const Heads h = qkv_heads(B, T);
      ops::scale(h.q, q_scale);
      const Tensor probs = attend(h, spec_, nullptr, l, opt, observer);
      ops::linear_forward(tmp_, att_, w[kOutW], w[kOutB]);
      if (pre_ln_) {
        ops::add(mid_, x_in, tmp_);
      } else {
        ops::add(pre_norm_, x_in, tmp_);
        ops::layernorm_forward(mid_, mean_, rstd_, pre_norm_, w[kAttnLnW], w[kAttnLnB], eps_);
      }
      // MLP block. Pre-LN: x_out = mid + mlp(LN_f(mid)). Post-LN: x_out = LN_f(mid + mlp(mid)).
      Tensor mlp_in = mid_;
      if (pre_ln_) {
        ops::layernorm_forward(xn_, mean_, rstd_, mid_, w[kMlpLnW], w[kMlpLnB], eps_);
        mlp_in = xn_;
      }
      ops::linear_forward(ffn_, mlp_in, w[kFc1W], w[kFc1B]);
      ops::activation_forward(ffn_, ffn_, act_);
      ops::linear_forward(tmp_, ffn_, w[kFc2W], w[kFc2B]);
      if (pre_ln_) {
        ops::add(x_out, mid_, tmp_);
      } else {
        ops::add(pre_norm_, mid_, tmp_);  // the residual sum before the layer's last norm (Fig. 7 left)
        ops::layernorm_forward(x_out, mean_, rstd_, pre_norm_, w[kMlpLnW], w[kMlpLnB], eps_);
      }
      end_layer(l, h, spec_, probs, opt, observer, pre_ln_ ? Tensor{} : pre_norm_);
    }
    if (!want_logits) return;
    // logits = project_out(LN(x)) embed_tokens^T (the final LN only in pre-LN models).
    Tensor x = stream(info_.n_layers);
    if (final_ln_) {
      ops::layernorm_forward(xn_, mean_, rstd_, x, resident[kFinalLnW], resident[kFinalLnB], eps_);
      x = xn_;
    }
    if (resident[kProjectOut].defined()) {
      ops::linear_forward(words_, x, resident[kProjectOut], Tensor{});
      x = words_;
    }
    write_logits(logits, x);
  }

 private:
  int64_t wd_ = 0;  // the token table's width (word_embed_proj_dim)
  bool pre_ln_ = true, final_ln_ = true;
  ops::AttentionSpec spec_;
  Tensor pre_norm_, words_;
};

}  // namespace

std::unique_ptr<HfModel> load_opt(const ModelSource& source, const LoadOptions& options) {
  return std::make_unique<OptModel>(source, options);
}

}  // namespace sinklab::hf
