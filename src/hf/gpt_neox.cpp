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
    const HeadShape shape = head_shape(cfg, false);
    d_ = shape.d_model;
    H_ = shape.heads;
    dh_ = shape.head_dim;
    const int64_t L = positive_int(cfg, {"num_hidden_layers"});
    const int64_t V = positive_int(cfg, {"vocab_size"});
    F_ = positive_int(cfg, {"intermediate_size"});
    eps_ = cfg.get_double("layer_norm_eps", 1e-5);
    act_ = activation_from_config(cfg, "hidden_act", "gelu");
    parallel_ = cfg.get_bool("use_parallel_residual", true);
    RopeKeys keys;
    keys.theta_key = "rotary_emb_base";
    keys.partial_key = "rotary_pct";
    keys.partial_default = 0.25;  // GPTNeoXConfig's default
    rope_ = rope_from_config(cfg, dh_, keys);
    const bool bias = cfg.get_bool("attention_bias", true);

    const Checkpoint& ck = *src.weights;
    const std::string pre = find_prefix(ck, {"gpt_neox.", ""}, "embed_in.weight");
    WeightPlan plan;
    plan.embedding = pre + "embed_in.weight";
    ck.check_shape(plan.embedding, {V, d_});
    // The original uploads name the head embed_out; transformers >= 5 may write lm_head.
    plan.head = cfg.get_bool("tie_word_embeddings", false) ? plan.embedding
                : ck.has("embed_out.weight")                 ? "embed_out.weight"
                                                             : "lm_head.weight";
    plan.resident = {WeightSpec::one(pre + "final_layer_norm.weight", {d_}),
                     WeightSpec::one(pre + "final_layer_norm.bias", {d_})};
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
    store_ = std::make_unique<WeightStore>(src.weights, std::move(plan), options);
    fill_common_info(info_, src, *store_, shape, options);
    spec_.scale = 1.0 / std::sqrt(double(dh_));
  }

  void forward(Tensor ids, LayerObserver* observer, Tensor logits, const ForwardOptions& opt) override {
    const bool want_logits = begin_forward(ids, logits, opt);
    const int64_t B = ids.shape[0], T = ids.shape[1], N = B * T, d = d_, H = H_, dh = dh_;
    if (B != acts_batch_ || T != acts_seq_) {
      allocate_activations(B, T, {{&res_[0], {N, d}}, {&res_[1], {N, d}}, {&mid_, {N, d}}, {&xn_, {N, d}},
                                  {&mean_, {N}}, {&rstd_, {N}}, {&qkv_, {N, 3 * d}}, {&att_, {N, d}},
                                  {&attn_out_, {N, d}}, {&mlp_out_, {N, d}}, {&ffn_, {N, F_}}});
    }
    store_->embed(res_[0], ids.reshape({N}));
    for (int l = 0; l < info_.n_layers; ++l) {
      const std::vector<Tensor>& w = store_->layer(l);
      Tensor x_in = res_[l % 2], x_out = res_[(l + 1) % 2];
      // Attention: a = attn(rope(q), rope(k), v) Wd + bd, q|k|v from LN_1(x_in).
      ops::layernorm_forward(xn_, mean_, rstd_, x_in, w[kLn1W], w[kLn1B], eps_);
      ops::linear_forward(qkv_, xn_, w[kQkvW], w[kQkvB]);
      Tensor q = interleaved(qkv_, B, T, H, dh, 0), k = interleaved(qkv_, B, T, H, dh, 1),
             v = interleaved(qkv_, B, T, H, dh, 2);
      ops::rope_forward(q, q, Tensor{}, rope_);
      ops::rope_forward(k, k, Tensor{}, rope_);
      Tensor probs = observer_probs(observer, l, q, k);
      attention(head_view(att_, B, T, 0, H, dh), q, k, v, spec_, l, opt, &rope_, probs);
      ops::linear_forward(attn_out_, att_, w[kDenseW], w[kDenseB]);
      // MLP input: x_in (parallel) or x_in + a (sequential).
      Tensor mlp_in = x_in;
      if (!parallel_) {
        ops::add(mid_, attn_out_, x_in);
        mlp_in = mid_;
      }
      ops::layernorm_forward(xn_, mean_, rstd_, mlp_in, w[kLn2W], w[kLn2B], eps_);
      ops::linear_forward(ffn_, xn_, w[kFcW], w[kFcB]);
      ops::activation_forward(ffn_, ffn_, act_);
      ops::linear_forward(mlp_out_, ffn_, w[kProjW], w[kProjB]);
      // transformers' summation order: (mlp + a) + x, or mlp + (a + x).
      if (parallel_) {
        ops::add(x_out, mlp_out_, attn_out_);
        ops::add(x_out, x_out, x_in);
      } else {
        ops::add(x_out, mlp_out_, mid_);
      }
      ablate_hidden(x_out, B, T, l, opt);
      if (observer) observer->on_layer(attention_taps(l, B, x_in, x_out, q, k, v, &spec_, probs));
    }
    if (!want_logits) return;
    const std::vector<Tensor>& resident = store_->resident();
    ops::layernorm_forward(xn_, mean_, rstd_, res_[info_.n_layers % 2], resident[kLnFW], resident[kLnFB], eps_);
    store_->head(logits.reshape({N, int64_t(info_.vocab_size)}), xn_);
  }

 private:
  int64_t d_ = 0, H_ = 0, dh_ = 0, F_ = 0;
  double eps_ = 1e-5;
  bool parallel_ = true;
  ops::Activation act_ = ops::Activation::gelu_exact;
  ops::RopeConfig rope_;
  ops::AttentionSpec spec_;
  Tensor res_[2], mid_, xn_, mean_, rstd_, qkv_, att_, attn_out_, mlp_out_, ffn_;
};

}  // namespace

std::unique_ptr<HfModel> load_gpt_neox(const ModelSource& source, const LoadOptions& options) {
  return std::make_unique<NeoxModel>(source, options);
}

}  // namespace sinklab::hf
