// GPT-NeoX / Pythia (HF model_type gpt_neox; transformers' modeling_gpt_neox.py): rotary positions on
// the first rotary_pct of each head, pre-LN, exact-GELU MLP, untied head (embed_out).
//
//   x = embed_in[ids]
//   per layer:  a = attn(LN_1(x)) Wd + bd      (q|k|v interleaved per head, see below)
//     parallel residual:  x = x + a + mlp(LN_2(x))
//     sequential:         x = (x + a) + mlp(LN_2(x + a))
//   logits = LN_f(x) embed_out^T
//
// The fused query_key_value projection is laid out per head: output columns [h*3*dh, (h+1)*3*dh) hold
// head h's q, then k, then v. Strided views read q, k, v of each head in place.

#include <cmath>

#include "core/error.hpp"
#include "hf/family.hpp"

namespace sinklab::hf {
namespace {

enum NeoxLayer : size_t { kLn1W, kLn1B, kQkvW, kQkvB, kDenseW, kDenseB, kLn2W, kLn2B, kFcW, kFcB, kProjW, kProjB };
enum NeoxResident : size_t { kLnFW, kLnFB };

// q, k or v (which = 0, 1, 2) of every head of the interleaved [B*T, H*3*dh] projection: [B,T,H,dh].
Tensor interleaved(Tensor qkv, int64_t B, int64_t T, int64_t H, int64_t dh, int which) {
  return qkv.split_dim(0, B, T).split_dim(2, H, 3 * dh).slice(3, which * dh, dh);
}

class NeoxModel final : public FamilyModel {
 public:
  NeoxModel(const ModelSource& src, const LoadOptions& options) {
    const HfConfig& cfg = src.config;
    set_sizes(head_shape(cfg, false), positive_int(cfg, {"intermediate_size"}));
    eps_ = cfg.get_double("layer_norm_eps", 1e-5);
    act_ = activation_from_config(cfg, "hidden_act", "gelu");
    parallel_ = cfg.get_bool("use_parallel_residual", true);
    RopeKeys keys;
    keys.theta_key = "rotary_emb_base";
    keys.partial_key = "rotary_pct";
    keys.partial_default = 0.25;  // GPTNeoXConfig's default
    rope_ = rope_from_config(cfg, dh_, keys);
    const bool bias = cfg.get_bool("attention_bias", true);

    const std::string pre = find_prefix(*src.weights, {"gpt_neox.", ""}, "embed_in.weight");
    // The original uploads name the head embed_out; transformers >= 5 may write lm_head.
    WeightPlan plan = token_plan(cfg, *src.weights, pre + "embed_in.weight", d_, /*tied_by_default=*/false,
                                 {"embed_out.weight", "lm_head.weight"});
    plan.resident = {WeightSpec::one(pre + "final_layer_norm.weight", {d_}),
                     WeightSpec::one(pre + "final_layer_norm.bias", {d_})};
    const int64_t L = positive_int(cfg, {"num_hidden_layers"});
    for (int64_t l = 0; l < L; ++l) {
      const std::string p = pre + "layers." + std::to_string(l) + ".";
      std::vector<WeightSpec> layer = {
          WeightSpec::one(p + "input_layernorm.weight", {d_}),
          WeightSpec::one(p + "input_layernorm.bias", {d_}),
          WeightSpec::one(p + "attention.query_key_value.weight", {3 * d_, d_}),
          bias ? WeightSpec::one(p + "attention.query_key_value.bias", {3 * d_}) : WeightSpec::absent(),
          WeightSpec::one(p + "attention.dense.weight", {d_, d_}),
          bias ? WeightSpec::one(p + "attention.dense.bias", {d_}) : WeightSpec::absent(),
          WeightSpec::one(p + "post_attention_layernorm.weight", {d_}),
          WeightSpec::one(p + "post_attention_layernorm.bias", {d_}),
          WeightSpec::one(p + "mlp.dense_h_to_4h.weight", {F_, d_}),
          WeightSpec::one(p + "mlp.dense_h_to_4h.bias", {F_}),
          WeightSpec::one(p + "mlp.dense_4h_to_h.weight", {d_, F_}),
          WeightSpec::one(p + "mlp.dense_4h_to_h.bias", {d_}),
      };
      plan.layers.push_back(std::move(layer));
    }
    load_weights(src, std::move(plan), options);
    spec_.scale = 1.0 / std::sqrt(double(dh_));
  }

  void forward(Tensor ids, LayerObserver* observer, Tensor logits, const ForwardOptions& opt) override {
    const bool want_logits = begin_forward(ids, logits, opt);
    const int64_t B = ids.shape[0], T = ids.shape[1], N = B * T;
    ensure_activations(B, T, Norm::layer, {{&mlp_out_, {N, d_}}});
    store_->embed(res_[0], ids.reshape({N}));
    for (int l = 0; l < info_.n_layers; ++l) {
      const std::vector<Tensor>& w = store_->layer(l);
      Tensor x_in = stream(l), x_out = stream(l + 1);
      // Attention: a = attn(rope(q), rope(k), v) Wd + bd, q|k|v from LN_1(x_in); a in tmp_.
      ops::layernorm_forward(xn_, mean_, rstd_, x_in, w[kLn1W], w[kLn1B], eps_);
      ops::linear_forward(qkv_, xn_, w[kQkvW], w[kQkvB]);
      const Heads h = {interleaved(qkv_, B, T, H_, dh_, 0), interleaved(qkv_, B, T, H_, dh_, 1),
                       interleaved(qkv_, B, T, H_, dh_, 2)};
      const Tensor probs = attend(h, spec_, &rope_, l, opt, observer);
      ops::linear_forward(tmp_, att_, w[kDenseW], w[kDenseB]);
      // MLP input: x_in (parallel) or x_in + a (sequential).
      Tensor mlp_in = x_in;
      if (!parallel_) {
        ops::add(mid_, tmp_, x_in);
        mlp_in = mid_;
      }
      ops::layernorm_forward(xn_, mean_, rstd_, mlp_in, w[kLn2W], w[kLn2B], eps_);
      ops::linear_forward(ffn_, xn_, w[kFcW], w[kFcB]);
      ops::activation_forward(ffn_, ffn_, act_);
      ops::linear_forward(mlp_out_, ffn_, w[kProjW], w[kProjB]);
      // transformers' summation order: (mlp + a) + x, or mlp + (a + x).
      if (parallel_) {
        ops::add(x_out, mlp_out_, tmp_);
        ops::add(x_out, x_out, x_in);
      } else {
        ops::add(x_out, mlp_out_, mid_);
      }
      end_layer(l, h, spec_, probs, opt, observer);
    }
    if (want_logits) final_logits(logits, Norm::layer, store_->resident()[kLnFW], store_->resident()[kLnFB]);
  }

 private:
  bool parallel_ = true;
  ops::RopeConfig rope_;
  ops::AttentionSpec spec_;
  Tensor mlp_out_;
};

}  // namespace

std::unique_ptr<HfModel> load_gpt_neox(const ModelSource& source, const LoadOptions& options) {
  return std::make_unique<NeoxModel>(source, options);
}

}  // namespace sinklab::hf
