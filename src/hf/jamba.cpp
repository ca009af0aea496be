// Jamba (HF model_type jamba; transformers' modeling_jamba.py): a hybrid of attention and Mamba layers,
// pre-RMSNorm blocks, mixture-of-experts FFNs on some layers, no position embedding at all.
//
//   x = embed[ids]
//   per layer l:  m = RMSNorm_in(x);  x += mixer_l(m);  f = RMSNorm_ff(x);  x += ffn_l(f)
//   logits = RMSNorm_final(x) lm_head^T
// mixer_l: attention when l % attn_layer_period == attn_layer_offset (causal softmax, grouped-query,
//          scale 1/sqrt(dh), no rotary, no biases), a Mamba mixer otherwise:
//            x|z = m W_in;  u = act(conv1d_causal(x) + b_conv);  dt|B|C = u W_x
//            dt, B, C = RMSNorm_dt(dt), RMSNorm_B(B), RMSNorm_C(C)   (Jamba's extra norms)
//            y = selective_scan(u, dt W_dt, A_log, B, C, D, b_dt, softplus);  out = (y * silu(z)) W_out
// ffn_l:   a mixture of num_experts SwiGLU experts when l % expert_layer_period == expert_layer_offset
//          (and num_experts > 1): router top-k of softmax(f W_router), the k weights NOT renormalised;
//          otherwise one SwiGLU MLP: (act(f W_gate) * f W_up) W_down.
// This is the sequence path of transformers without a cache (the Mamba state starts from zero), as its
// PyTorch fallback computes it (JambaMambaMixer with causal_conv1d_fn and mamba_selective_scan, used when
// the mamba_ssm / causal_conv1d kernels are not installed).
//
// Checkpoint names (the hub's layout, which transformers' save_pretrained writes back): experts one
// module each, feed_forward.experts.<e>.{gate,up,down}_proj.weight, and feed_forward.router.weight.

#include <cmath>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "hf/family.hpp"

namespace sinklab::hf {
namespace {

// Per-layer tensors, in WeightPlan order: the two norms, then the mixer's, then the FFN's.
constexpr size_t kInputNorm = 0, kPreFfNorm = 1, kMixer = 2;
// Attention mixer, from kMixer.
constexpr size_t kQkv = 0, kO = 1, kAttentionCount = 2;
// Mamba mixer, from kMixer.
constexpr size_t kInProj = 0, kInProjB = 1, kConvW = 2, kConvB = 3, kXProj = 4, kDtNorm = 5, kBNorm = 6, kCNorm = 7,
                 kDtProj = 8, kDtBias = 9, kALog = 10, kD = 11, kOutProj = 12, kOutProjB = 13, kMambaCount = 14;
// FFN, from the FFN base (kMixer + the mixer's count): dense gate|up and down; or the router, then
// expert e's gate|up at kExperts + 2e and down at kExperts + 2e + 1.
constexpr size_t kGateUp = 0, kDown = 1;
constexpr size_t kRouter = 0, kExperts = 1;

class JambaModel final : public FamilyModel {
 public:
  JambaModel(const ModelSource& src, const LoadOptions& options) {
    const HfConfig& cfg = src.config;
    const LayerPattern pattern = read_sizes(cfg);
    const int64_t L = pattern.n_layers;
    WeightPlan plan = token_plan(cfg, *src.weights, "model.embed_tokens.weight", d_, /*tied_by_default=*/false);
    plan.resident = {WeightSpec::one("model.final_layernorm.weight", {d_})};
    for (int64_t l = 0; l < L; ++l) {
      const std::string p = "model.layers." + std::to_string(l) + ".";
      const bool attention = l % pattern.attn_period == pattern.attn_offset;
      const bool moe = E_ > 1 && l % pattern.expert_period == pattern.expert_offset;
      std::vector<WeightSpec> w = {WeightSpec::one(p + "input_layernorm.weight", {d_}),
                                   WeightSpec::one(p + "pre_ff_layernorm.weight", {d_})};
      if (attention) add_attention_weights(w, p + "self_attn.");
      else add_mamba_weights(w, p + "mamba.", pattern);
      add_ffn_weights(w, p + "feed_forward.", moe);
      plan.layers.push_back(std::move(w));
      layers_.push_back({attention, moe});
    }
    load_weights(src, std::move(plan), options);  // max_positions 0: no position embedding, any length
    info_.attention_layers.clear();
    for (int64_t l = 0; l < L; ++l)
      if (layers_[size_t(l)].attention) info_.attention_layers.push_back(int(l));
    attention_.scale = 1.0 / std::sqrt(double(dh_));  // causal softmax: the AttentionSpec defaults
  }

  void forward(Tensor ids, LayerObserver* observer, Tensor logits, const ForwardOptions& opt) override {
    const bool want_logits = begin_forward(ids, logits, opt);
    const int64_t B = ids.shape[0], T = ids.shape[1], N = B * T;
    // The Mamba mixer's, then the FFN's (an expert sees at most all N rows, ffn_ its hidden).
    ensure_activations(B, T, Norm::rms,
                       {{&xz_, {N, 2 * Di_}}, {&conv_, {N, Di_}}, {&dbc_, {N, R_ + 2 * Ns_}}, {&dt_in_, {N, R_}},
                        {&b_, {N, Ns_}}, {&c_, {N, Ns_}}, {&dt_, {N, Di_}}, {&gate_up_, {N, 2 * F_}},
                        {&router_logits_, {N, E_}}, {&top_weights_, {N, K_}}, {&rows_in_, {N, d_}},
                        {&rows_out_, {N, d_}}});
    top_experts_.resize(size_t(N * K_));

    store_->embed(res_[0], ids.reshape({N}));
    for (int l = 0; l < info_.n_layers; ++l) {
      const std::vector<Tensor>& w = store_->layer(l);
      const LayerKind kind = layers_[size_t(l)];
      Tensor x_in = stream(l), x_out = stream(l + 1);
      LayerTaps taps;
      // Mixer block: mid = x_in + mixer(RMSNorm_in(x_in)).
      ops::rmsnorm_forward(xn_, rstd_, x_in, w[kInputNorm], eps_);
      if (kind.attention) {
        attention_mixer(w, l, B, T, observer, &taps, opt);
      } else {
        mamba_mixer(w, B, T);
      }
      ops::add(mid_, x_in, tmp_);
      // FFN block: x_out = mid + ffn(RMSNorm_ff(mid)).
      ops::rmsnorm_forward(xn_, rstd_, mid_, w[kPreFfNorm], eps_);
      const size_t ffn = kMixer + (kind.attention ? kAttentionCount : kMambaCount);
      if (kind.moe) {
        moe_ffn(w, ffn, N);
      } else {
        swiglu(tmp_, xn_, w[ffn + kGateUp], w[ffn + kDown], N);
      }
      ops::add(x_out, mid_, tmp_);
      ablate_hidden(x_out, B, T, l, opt);
      if (observer) {
        taps.layer = l;
        taps.hidden_in = x_in.split_dim(0, B, T);
        taps.hidden_out = x_out.split_dim(0, B, T);
        observer->on_layer(taps);  // Mamba layers: q/k/v undefined, attention nullptr
      }
    }
    if (want_logits) final_logits(logits, Norm::rms, store_->resident()[0]);
  }

 private:
  // The layers; which layers attend and which have experts (JambaConfig.layers_block_type /
  // layers_num_experts); whether the Mamba projections and convolution have biases.
  struct LayerPattern {
    int64_t n_layers = 0;
    int64_t attn_period = 8, attn_offset = 4, expert_period = 2, expert_offset = 1;
    bool conv_bias = true, proj_bias = false;
  };

  // The widths of every part (into the members) and the layer pattern, checked in config order.
  LayerPattern read_sizes(const HfConfig& cfg) {
    const char* path = cfg.path().c_str();
    LayerPattern pattern;
    set_sizes(head_shape(cfg, true), positive_int(cfg, {"intermediate_size"}));
    pattern.n_layers = positive_int(cfg, {"num_hidden_layers"});
    eps_ = cfg.get_double("rms_norm_eps", 1e-6);
    act_ = activation_from_config(cfg, "hidden_act", "silu");

    pattern.attn_period = cfg.get_int("attn_layer_period", 8);
    pattern.attn_offset = cfg.get_int("attn_layer_offset", 4);
    pattern.expert_period = cfg.get_int("expert_layer_period", 2);
    pattern.expert_offset = cfg.get_int("expert_layer_offset", 1);
    SL_CHECK(pattern.attn_period >= 1 && pattern.attn_offset >= 0 && pattern.attn_offset < pattern.attn_period,
             "%s: attn_layer_offset %lld must be in [0, attn_layer_period %lld)", path, (long long)pattern.attn_offset,
             (long long)pattern.attn_period);
    SL_CHECK(pattern.expert_period >= 1 && pattern.expert_offset >= 0 && pattern.expert_offset < pattern.expert_period,
             "%s: expert_layer_offset %lld must be in [0, expert_layer_period %lld)", path,
             (long long)pattern.expert_offset, (long long)pattern.expert_period);
    E_ = cfg.has("num_experts") ? positive_int(cfg, {"num_experts"}) : cfg.get_int("num_local_experts", 16);
    K_ = cfg.get_int("num_experts_per_tok", 2);
    SL_CHECK(E_ >= 1 && K_ >= 1 && K_ <= E_, "%s: num_experts_per_tok %lld must be in [1, num_experts %lld]", path,
             (long long)K_, (long long)E_);

    // Mamba mixer sizes.
    Ns_ = cfg.get_int("mamba_d_state", 16);
    conv_k_ = cfg.get_int("mamba_d_conv", 4);
    Di_ = cfg.get_int("mamba_expand", 2) * d_;
    const nlohmann::json& rank = cfg.json().contains("mamba_dt_rank") ? cfg.json()["mamba_dt_rank"] : nlohmann::json();
    R_ = (rank.is_null() || (rank.is_string() && rank.get<std::string>() == "auto")) ? (d_ + 15) / 16
                                                                                     : cfg.get_int("mamba_dt_rank");
    SL_CHECK(Ns_ >= 1 && conv_k_ >= 1 && Di_ >= 1 && R_ >= 1,
             "%s: mamba_d_state, mamba_d_conv, mamba_expand and mamba_dt_rank must be positive", path);
    pattern.conv_bias = cfg.get_bool("mamba_conv_bias", true);
    pattern.proj_bias = cfg.get_bool("mamba_proj_bias", false);
    // AI21's original remote code could leave out the dt/B/C norms; transformers' Jamba always has them.
    if (!cfg.get_bool("mamba_inner_layernorms", true)) cfg.unsupported("mamba_inner_layernorms false");
    return pattern;
  }

  // An attention mixer's tensors (prefix a = "model.layers.<l>.self_attn."), at kMixer + kQkv, kO.
  void add_attention_weights(std::vector<WeightSpec>& w, const std::string& a) const {
    w.push_back(WeightSpec::stacked_qkv(a, "weight", H_ * dh_, Hkv_ * dh_, d_));
    w.push_back(WeightSpec::one(a + "o_proj.weight", {d_, H_ * dh_}));
  }

  // A Mamba mixer's tensors (prefix m = "model.layers.<l>.mamba."), at kMixer + kInProj .. kOutProjB.
  void add_mamba_weights(std::vector<WeightSpec>& w, const std::string& m, const LayerPattern& pattern) const {
    auto bias = [&](bool present, const std::string& name, int64_t n) {
      return present ? WeightSpec::one(name, {n}) : WeightSpec::absent();
    };
    w.push_back(WeightSpec::one(m + "in_proj.weight", {2 * Di_, d_}));
    w.push_back(bias(pattern.proj_bias, m + "in_proj.bias", 2 * Di_));
    w.push_back(WeightSpec::one(m + "conv1d.weight", {Di_, 1, conv_k_}));
    w.push_back(bias(pattern.conv_bias, m + "conv1d.bias", Di_));
    w.push_back(WeightSpec::one(m + "x_proj.weight", {R_ + 2 * Ns_, Di_}));
    w.push_back(WeightSpec::one(m + "dt_layernorm.weight", {R_}));
    w.push_back(WeightSpec::one(m + "b_layernorm.weight", {Ns_}));
    w.push_back(WeightSpec::one(m + "c_layernorm.weight", {Ns_}));
    w.push_back(WeightSpec::one(m + "dt_proj.weight", {Di_, R_}));
    w.push_back(WeightSpec::one(m + "dt_proj.bias", {Di_}));
    w.push_back(WeightSpec::one(m + "A_log", {Di_, Ns_}));
    w.push_back(WeightSpec::one(m + "D", {Di_}));
    w.push_back(WeightSpec::one(m + "out_proj.weight", {d_, Di_}));
    w.push_back(bias(pattern.proj_bias, m + "out_proj.bias", d_));
  }

  // The FFN's tensors (prefix f = "model.layers.<l>.feed_forward."): one SwiGLU MLP, or the router and
  // every expert's MLP. gate|up stacked: one GEMM, then gated_forward on the halves.
  void add_ffn_weights(std::vector<WeightSpec>& w, const std::string& f, bool moe) const {
    auto swiglu = [&](const std::string& q) {
      w.push_back(stacked_gate_up(q, "weight", F_, d_));
      w.push_back(WeightSpec::one(q + "down_proj.weight", {d_, F_}));
    };
    if (!moe) return swiglu(f);
    w.push_back(WeightSpec::one(f + "router.weight", {E_, d_}));
    for (int64_t e = 0; e < E_; ++e) swiglu(f + "experts." + std::to_string(e) + ".");
  }

  struct LayerKind {
    bool attention = false, moe = false;
  };

  // tmp = attention(xn) W_o: causal grouped-query softmax attention without position embedding.
  // Fills the attention taps (the attention matrix in the observer's buffer, when it gives one).
  void attention_mixer(const std::vector<Tensor>& w, int layer, int64_t B, int64_t T, LayerObserver* observer,
                       LayerTaps* taps, const ForwardOptions& opt) {
    ops::linear_forward(qkv_, xn_, w[kMixer + kQkv], Tensor{});
    const Heads h = qkv_heads(B, T);
    taps->probs = attend(h, attention_, nullptr, layer, opt, observer);
    ops::linear_forward(tmp_, att_, w[kMixer + kO], Tensor{});
    taps->q = h.q;
    taps->k = h.k;
    taps->v = h.v;
    taps->attention = &attention_;
  }

  // tmp = Mamba mixer of xn (see the top of the file). Rows are [N = B*T, ...]; the conv and the scan
  // read them as [B,T,...].
  void mamba_mixer(const std::vector<Tensor>& w, int64_t B, int64_t T) {
    const size_t m = kMixer;
    ops::linear_forward(xz_, xn_, w[m + kInProj], w[m + kInProjB]);
    Tensor x = xz_.slice(1, 0, Di_).split_dim(0, B, T), z = xz_.slice(1, Di_, Di_);
    Tensor u = conv_.split_dim(0, B, T);
    ops::causal_conv1d_forward(u, x, w[m + kConvW].reshape({Di_, conv_k_}), w[m + kConvB]);
    ops::activation_forward(conv_, conv_, act_);
    // dt|B|C = u W_x, each through its own RMSNorm.
    ops::linear_forward(dbc_, conv_, w[m + kXProj], Tensor{});
    ops::rmsnorm_forward(dt_in_, rstd_, dbc_.slice(1, 0, R_), w[m + kDtNorm], eps_);
    ops::rmsnorm_forward(b_, rstd_, dbc_.slice(1, R_, Ns_), w[m + kBNorm], eps_);
    ops::rmsnorm_forward(c_, rstd_, dbc_.slice(1, R_ + Ns_, Ns_), w[m + kCNorm], eps_);
    // dt = dt_in W_dt; its bias goes into the scan's softplus, as transformers does.
    ops::linear_forward(dt_, dt_in_, w[m + kDtProj], Tensor{});
    Tensor dt = dt_.split_dim(0, B, T);
    ops::selective_scan_forward(dt, u, dt, w[m + kALog], b_.split_dim(0, B, T), c_.split_dim(0, B, T), w[m + kD],
                                w[m + kDtBias], /*dt_softplus=*/true);  // y written over dt
    // Output gate y * silu(z) (silu whatever hidden_act is: transformers hard-codes it), then W_out.
    ops::gated_forward(conv_, z, dt_, ops::Activation::silu);
    ops::linear_forward(tmp_, conv_, w[m + kOutProj], w[m + kOutProjB]);
  }

  // out[rows] = (act(in W_gate) * in W_up) W_down for the first `rows` rows of in.
  void swiglu(Tensor out, Tensor in, Tensor gate_up, Tensor down, int64_t rows) {
    gated_mlp(out, in, gate_up, Tensor{}, down, Tensor{}, act_, gate_up_.slice(0, 0, rows), ffn_.slice(0, 0, rows));
  }

  // tmp = sum over each row's top-k experts e of p_e * expert_e(xn), p the router softmax (not
  // renormalised over the k). Each expert runs once on the rows routed to it: gathered by
  // embedding_forward, added back weighted by index_add_rows.
  void moe_ffn(const std::vector<Tensor>& w, size_t ffn, int64_t N) {
    ops::linear_forward(router_logits_, xn_, w[ffn + kRouter], Tensor{});
    Tensor top_experts(top_experts_.data(), DType::i32, {N, K_});
    if (!xn_.device.is_cpu()) {  // the op writes the choices where the model runs
      experts_buffer_.ensure(top_experts.nbytes(), xn_.device);
      top_experts = experts_buffer_.view(DType::i32, {N, K_});
    }
    ops::moe_router_topk(top_weights_, top_experts, router_logits_);
    // Host-side dispatch lists (a GPU model's choices copied down first): the rows of expert e, ascending,
    // at [first[e], first[e + 1]) of one list, with their router weights; one copy of each list up.
    const int32_t* te = on_host(moe_host_[0], top_experts).ptr<int32_t>();
    const float* tw = on_host(moe_host_[1], top_weights_).ptr<float>();
    std::vector<int64_t> first(size_t(E_) + 1, 0);
    for (int64_t i = 0; i < N * K_; ++i) ++first[size_t(te[i]) + 1];
    for (int64_t e = 0; e < E_; ++e) first[size_t(e) + 1] += first[size_t(e)];
    std::vector<int32_t> rows(size_t(N * K_));
    std::vector<float> weights(size_t(N * K_));
    std::vector<int64_t> fill(first.begin(), first.end() - 1);
    for (int64_t n = 0; n < N; ++n)
      for (int64_t s = 0; s < K_; ++s) {
        const int64_t at = fill[size_t(te[n * K_ + s])]++;
        rows[size_t(at)] = int32_t(n);
        weights[size_t(at)] = tw[n * K_ + s];
      }
    const Tensor all_rows = on_device(moe_rows_buffer_, Tensor(rows.data(), DType::i32, {N * K_}));
    const Tensor all_weights = on_device(moe_weights_buffer_, Tensor(weights.data(), DType::f32, {N * K_}));
    ops::fill(tmp_, 0.0);
    for (int64_t e = 0; e < E_; ++e) {
      const int64_t n_e = first[size_t(e) + 1] - first[size_t(e)];
      if (n_e == 0) continue;
      const Tensor idx = all_rows.slice(0, first[size_t(e)], n_e), scale = all_weights.slice(0, first[size_t(e)], n_e);
      Tensor in = rows_in_.slice(0, 0, n_e), out = rows_out_.slice(0, 0, n_e);
      ops::embedding_forward(in, idx, xn_);  // gather the expert's rows
      swiglu(out, in, w[ffn + kExperts + 2 * size_t(e)], w[ffn + kExperts + 2 * size_t(e) + 1], n_e);
      ops::index_add_rows(tmp_, out, idx, scale);
    }
  }

  int64_t E_ = 1, K_ = 1;
  int64_t Di_ = 0, Ns_ = 0, R_ = 0, conv_k_ = 0;
  ops::AttentionSpec attention_;
  std::vector<LayerKind> layers_;
  Tensor xz_, conv_, dbc_, dt_in_, b_, c_, dt_;
  Tensor gate_up_, router_logits_, top_weights_, rows_in_, rows_out_;
  std::vector<int32_t> top_experts_;
  // A GPU model's expert choices, dispatch lists, and their host copies.
  Buffer experts_buffer_, moe_rows_buffer_, moe_weights_buffer_;
  std::array<Buffer, 2> moe_host_;
};

}  // namespace

std::unique_ptr<HfModel> load_jamba(const ModelSource& source, const LoadOptions& options) {
  return std::make_unique<JambaModel>(source, options);
}

}  // namespace sinklab::hf
