#include "model/config.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <nlohmann/json.hpp>

#include "backend/attention_math.hpp"
#include "core/error.hpp"
#include "core/text.hpp"

namespace sinklab::model {
namespace {

// Name tables of the enum-valued axes: the text is the flag value, the ini value and the HF json value.
template <class E>
struct Names {
  const char* flag;
  std::vector<std::pair<E, const char*>> values;

  const char* name(E e) const {
    for (const auto& [v, n] : values)
      if (v == e) return n;
    return "?";
  }
  E parse(const std::string& text) const {
    std::string all;
    for (const auto& [v, n] : values) {
      if (text == n) return v;
      all.append(all.empty() ? "" : " | ").append(n);
    }
    SL_FAIL("--%s: '%s' is not one of %s", flag, text.c_str(), all.c_str());
  }
};

const Names<PosEmb> kPosEmb{"pos-emb",
                            {{PosEmb::rope, "rope"},
                             {PosEmb::none, "none"},
                             {PosEmb::sinusoidal, "sinusoidal"},
                             {PosEmb::learned, "learned"},
                             {PosEmb::relative, "relative"},
                             {PosEmb::alibi, "alibi"}}};
const Names<RelativeBias> kRelativeBias{
    "relative-bias", {{RelativeBias::learned, "learned"}, {RelativeBias::bucket_index, "bucket-index"}}};
const Names<NormPlacement> kNormPlacement{"norm-placement",
                                          {{NormPlacement::pre, "pre"}, {NormPlacement::post, "post"}}};
const Names<FfnKind> kFfn{"ffn",
                          {{FfnKind::swiglu, "swiglu"},
                           {FfnKind::geglu, "geglu"},
                           {FfnKind::reglu, "reglu"},
                           {FfnKind::relu, "relu"},
                           {FfnKind::gelu, "gelu"},
                           {FfnKind::swish, "swish"}}};
const Names<HeadCombine> kHeadCombine{"head-combine", {{HeadCombine::concat, "concat"}, {HeadCombine::add, "add"}}};
const Names<AttnBias> kAttnBias{"attn-bias",
                                {{AttnBias::none, "none"},
                                 {AttnBias::sink_token, "sink-token"},
                                 {AttnBias::kv, "kv"},
                                 {AttnBias::k, "k"},
                                 {AttnBias::v, "v"}}};
const Names<FixedValue> kFixedValue{"fixed-value",
                                    {{FixedValue::zero, "zero"}, {FixedValue::e1, "e1"}, {FixedValue::ones, "ones"}}};
const Names<ops::AttnSim> kAttnSim{"attn-sim",
                                   {{ops::AttnSim::exp, "exp"},
                                    {ops::AttnSim::sigmoid, "sigmoid"},
                                    {ops::AttnSim::elu_plus_one, "elu-plus-one"},
                                    {ops::AttnSim::identity, "identity"},
                                    {ops::AttnSim::softpick, "softpick"}}};
const Names<ops::AttnNorm> kAttnNorm{"attn-norm",
                                     {{ops::AttnNorm::sum, "sum"},
                                      {ops::AttnNorm::one, "one"},
                                      {ops::AttnNorm::max_abs_sum_one, "max-abs-sum-one"},
                                      {ops::AttnNorm::p_norm, "p-norm"}}};
const Names<QkKernel> kQkKernel{
    "qk-kernel",
    {{QkKernel::identity, "identity"}, {QkKernel::elu_plus_one, "elu-plus-one"}, {QkKernel::mlp, "mlp"}}};
const Names<AttnGate> kAttnGate{
    "attn-gate", {{AttnGate::none, "none"}, {AttnGate::headwise, "headwise"}, {AttnGate::elementwise, "elementwise"}}};

bool parse_bool(const std::string& flag, const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  SL_FAIL("--%s: '%s' is not true or false", flag.c_str(), v.c_str());
}

// The shortest decimal text that reads back as exactly x ("1e-05", not "1.0000000000000001e-05").
std::string number_text(double x) {
  char buf[64];
  for (int digits = 6; digits <= 17; ++digits) {
    std::snprintf(buf, sizeof buf, "%.*g", digits, x);
    if (std::strtod(buf, nullptr) == x) break;
  }
  return buf;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> ModelConfig::axes() const {
  return {
      {"pos-emb", kPosEmb.name(pos_emb)},
      {"relative-bias", kRelativeBias.name(relative_bias)},
      {"relative-buckets", std::to_string(relative_buckets)},
      {"relative-max-distance", std::to_string(relative_max_distance)},
      {"norm-placement", kNormPlacement.name(norm_placement)},
      {"ffn", kFfn.name(ffn)},
      {"head-combine", kHeadCombine.name(head_combine)},
      {"attn-bias", kAttnBias.name(attn_bias)},
      {"bias-per-head", bias_per_head ? "true" : "false"},
      {"k-bias-dims", std::to_string(k_bias_dims)},
      {"fixed-value", kFixedValue.name(fixed_value)},
      {"fixed-value-scale", number_text(fixed_value_scale)},
      {"attn-sim", kAttnSim.name(attn_sim)},
      {"attn-norm", kAttnNorm.name(attn_norm)},
      {"qk-kernel", kQkKernel.name(qk_kernel)},
      {"attn-alpha", number_text(attn_alpha)},
      {"attn-p", number_text(attn_p)},
      {"sigmoid-bias", number_text(sigmoid_bias)},
      {"sigmoid-bias-log-n", sigmoid_bias_log_n ? "true" : "false"},
      {"sink-logit", sink_logit ? "true" : "false"},
      {"softmax-plus-one", softmax_plus_one ? "true" : "false"},
      {"attn-gate", kAttnGate.name(attn_gate)},
      {"attn-window", std::to_string(attn_window)},
      {"prefix-length", std::to_string(prefix_length)},
  };
}

std::vector<std::pair<std::string, std::string>> ModelConfig::settings() const {
  std::vector<std::pair<std::string, std::string>> s = {
      {"vocab-size", std::to_string(vocab_size)}, {"d-model", std::to_string(d_model)},
      {"n-layers", std::to_string(n_layers)},     {"n-heads", std::to_string(n_heads)},
      {"n-kv-heads", std::to_string(kv_heads())}, {"ffn-hidden", std::to_string(ffn_hidden)},
      {"context", std::to_string(context)},       {"rope-theta", number_text(rope_theta)},
      {"norm-eps", number_text(norm_eps)},
  };
  for (auto& axis : axes()) s.push_back(std::move(axis));
  return s;
}

const char* ModelConfig::axis_help(const std::string& flag) {
  if (flag == "pos-emb") return "positional embedding: rope | none | sinusoidal | learned | relative | alibi (Table 3)";
  if (flag == "relative-bias") return "pos-emb relative: learned (T5, per head) | bucket-index (the paper's Eq. 6)";
  if (flag == "relative-buckets") return "pos-emb relative: buckets B";
  if (flag == "relative-max-distance") return "pos-emb relative: max distance D";
  if (flag == "norm-placement") return "pre | post (Sec. 7.2)";
  if (flag == "ffn") return "swiglu | geglu | reglu | relu | gelu | swish (Table 11)";
  if (flag == "head-combine") return "concat | add: how head outputs meet W_O (Table 12 left)";
  if (flag == "attn-bias") return "none | sink-token | kv | k | v (Table 4)";
  if (flag == "bias-per-head") return "kv/k/v biases per head (false: shared by the heads of a layer, Table 12 right)";
  if (flag == "k-bias-dims") return "d_a: learnable leading dims of k* (0 = all; Table 13)";
  if (flag == "fixed-value") return "attn-bias k: v* = zero | e1 (m*v') | ones (m*v''), Table 5";
  if (flag == "fixed-value-scale") return "m, the l2 norm of the fixed v*";
  if (flag == "attn-sim") return "exp | sigmoid | elu-plus-one | identity (Tables 6, 15) | softpick (rectified softmax)";
  if (flag == "attn-norm") return "sum | one | max-abs-sum-one | p-norm";
  if (flag == "qk-kernel") return "identity | elu-plus-one | mlp: feature map of q and k (Table 15)";
  if (flag == "attn-alpha") return "attn-norm sum: rows sum to alpha (Table 14 left)";
  if (flag == "attn-p") return "attn-norm p-norm: p (Eq. 43-44)";
  if (flag == "sigmoid-bias") return "attn-sim sigmoid: b in sigmoid(s + b)";
  if (flag == "sigmoid-bias-log-n") return "attn-sim sigmoid: b = -log(context) (FlashSigmoid)";
  if (flag == "sink-logit") return "a learned per-head sink logit in the softmax denominator (gpt-oss)";
  if (flag == "softmax-plus-one") return "a constant sink logit 0: softmax with 1 + sum e^s";
  if (flag == "attn-gate") return "none | headwise | elementwise sigmoid gate on the attention output";
  if (flag == "attn-window") return "sliding-window attention over w keys (0 = off; Sec. 6)";
  if (flag == "prefix-length") return "prefix LM: bidirectional prefix of p tokens, loss after it (1 = off; Sec. 6)";
  return "";
}

void ModelConfig::set_axis(const std::string& flag, const std::string& v) {
  if (flag == "pos-emb") pos_emb = kPosEmb.parse(v);
  else if (flag == "relative-bias") relative_bias = kRelativeBias.parse(v);
  else if (flag == "relative-buckets") relative_buckets = int(parse_integer(v, "--relative-buckets"));
  else if (flag == "relative-max-distance") relative_max_distance = int(parse_integer(v, "--relative-max-distance"));
  else if (flag == "norm-placement") norm_placement = kNormPlacement.parse(v);
  else if (flag == "ffn") ffn = kFfn.parse(v);
  else if (flag == "head-combine") head_combine = kHeadCombine.parse(v);
  else if (flag == "attn-bias") attn_bias = kAttnBias.parse(v);
  else if (flag == "bias-per-head") bias_per_head = parse_bool(flag, v);
  else if (flag == "k-bias-dims") k_bias_dims = int(parse_integer(v, "--k-bias-dims"));
  else if (flag == "fixed-value") fixed_value = kFixedValue.parse(v);
  else if (flag == "fixed-value-scale") fixed_value_scale = parse_real(v, "--fixed-value-scale");
  else if (flag == "attn-sim") attn_sim = kAttnSim.parse(v);
  else if (flag == "attn-norm") attn_norm = kAttnNorm.parse(v);
  else if (flag == "qk-kernel") qk_kernel = kQkKernel.parse(v);
  else if (flag == "attn-alpha") attn_alpha = parse_real(v, "--attn-alpha");
  else if (flag == "attn-p") attn_p = parse_real(v, "--attn-p");
  else if (flag == "sigmoid-bias") sigmoid_bias = parse_real(v, "--sigmoid-bias");
  else if (flag == "sigmoid-bias-log-n") sigmoid_bias_log_n = parse_bool(flag, v);
  else if (flag == "sink-logit") sink_logit = parse_bool(flag, v);
  else if (flag == "softmax-plus-one") softmax_plus_one = parse_bool(flag, v);
  else if (flag == "attn-gate") attn_gate = kAttnGate.parse(v);
  else if (flag == "attn-window") attn_window = int(parse_integer(v, "--attn-window"));
  else if (flag == "prefix-length") prefix_length = int(parse_integer(v, "--prefix-length"));
  else SL_FAIL("unknown model axis --%s", flag.c_str());
}

ops::Activation ModelConfig::ffn_activation() const {
  switch (ffn) {
    case FfnKind::swiglu:
    case FfnKind::swish: return ops::Activation::silu;
    case FfnKind::geglu:
    case FfnKind::gelu: return ops::Activation::gelu_exact;
    case FfnKind::reglu:
    case FfnKind::relu: return ops::Activation::relu;
  }
  return ops::Activation::silu;
}

ops::AttentionSpec ModelConfig::attention_spec() const {
  ops::AttentionSpec s;
  s.scale = 0.0;  // 1/sqrt(dh)
  s.sim = attn_sim;
  s.norm = attn_norm;
  s.norm_alpha = attn_alpha;
  s.norm_p = attn_p;
  s.sigmoid_bias = sigmoid_bias_log_n ? -std::log(double(context)) : sigmoid_bias;
  if (attn_window > 0) {
    s.mask = ops::AttnMask::sliding_window;
    s.window = attn_window;
  } else if (prefix_length > 1) {
    s.mask = ops::AttnMask::prefix_lm;
    s.prefix = prefix_length + lead_positions();
  }
  s.lead_keys = lead_keys();
  if (pos_emb == PosEmb::alibi) s.pos_bias = ops::AttnPosBias::alibi;
  if (pos_emb == PosEmb::relative) {
    s.pos_bias = ops::AttnPosBias::relative;
    s.relative_max_distance = relative_max_distance;
  }
  return s;
}

void ModelConfig::validate() const {
  SL_CHECK(vocab_size > 0, "--vocab-size must be positive (got %d)", vocab_size);
  SL_CHECK(d_model > 0, "--d-model must be positive (got %d)", d_model);
  SL_CHECK(n_layers > 0, "--n-layers must be positive (got %d)", n_layers);
  SL_CHECK(n_heads > 0 && d_model % n_heads == 0, "--n-heads %d must divide --d-model %d", n_heads, d_model);
  SL_CHECK(pos_emb != PosEmb::rope || head_dim() % 2 == 0,
           "head dimension d_model/n_heads = %d must be even for rotary embeddings", head_dim());
  SL_CHECK(pos_emb != PosEmb::sinusoidal || d_model % 2 == 0, "--pos-emb sinusoidal needs an even --d-model");
  SL_CHECK(kv_heads() > 0 && n_heads % kv_heads() == 0, "--n-kv-heads %d must divide --n-heads %d", kv_heads(),
           n_heads);
  SL_CHECK(ffn_hidden > 0, "--ffn-hidden must be positive (got %d)", ffn_hidden);
  SL_CHECK(context > 0, "--context must be positive (got %d)", context);
  SL_CHECK(rope_theta > 0, "--rope-theta must be positive");
  SL_CHECK(norm_eps > 0, "--norm-eps must be positive");
  SL_CHECK(relative_buckets >= 2 && relative_buckets % 2 == 0, "--relative-buckets must be even and >= 2");
  SL_CHECK(relative_max_distance > relative_buckets / 2, "--relative-max-distance must exceed relative-buckets/2");
  const bool kv_style = attn_bias == AttnBias::kv || attn_bias == AttnBias::k;
  SL_CHECK(!kv_style || kv_heads() == n_heads,
           "--attn-bias %s needs multi-head attention (--n-kv-heads 0): its k*/v* are per query head",
           kAttnBias.name(attn_bias));
  SL_CHECK(k_bias_dims >= 0 && k_bias_dims <= head_dim(), "--k-bias-dims must lie in [0, head dim %d]", head_dim());
  SL_CHECK(k_bias_dims == 0 || kv_style, "--k-bias-dims applies to --attn-bias kv or k only");
  SL_CHECK(fixed_value == FixedValue::zero || attn_bias == AttnBias::k,
           "--fixed-value applies to --attn-bias k only");
  SL_CHECK(std::isfinite(fixed_value_scale), "--fixed-value-scale must be finite");
  SL_CHECK(bias_per_head || kv_style || attn_bias == AttnBias::v,
           "--bias-per-head false applies to --attn-bias kv, k or v only");
  SL_CHECK(!(sink_logit && softmax_plus_one), "--sink-logit and --softmax-plus-one both add a sink logit: pick one");
  SL_CHECK(!((sink_logit || softmax_plus_one) && attn_norm == ops::AttnNorm::one),
           "--sink-logit / --softmax-plus-one enter the normaliser: not with --attn-norm one");
  SL_CHECK(attn_window >= 0, "--attn-window must be >= 0 (0 = full causal attention)");
  SL_CHECK(prefix_length >= 1, "--prefix-length must be >= 1 (1 = plain causal LM)");
  SL_CHECK(attn_window == 0 || prefix_length == 1, "--attn-window and --prefix-length cannot be combined");
  SL_CHECK(prefix_length < context, "--prefix-length must be smaller than --context");
  SL_CHECK(!(attn_window > 0 && attn_bias == AttnBias::sink_token),
           "--attn-window with --attn-bias sink-token is not supported (the window would slide past x*)");
  SL_CHECK(attn_p > 0 && std::isfinite(attn_p), "--attn-p must be > 0 (got %g)", attn_p);
  SL_CHECK(attn_alpha > 0 && std::isfinite(attn_alpha), "--attn-alpha must be > 0 (got %g)", attn_alpha);
  ops::AttentionSpec spec = attention_spec();
  math::AttnConfig ac = math::attn_config(spec);
  ac.sink = sink_logit || softmax_plus_one;
  if (pos_emb == PosEmb::relative) ac.num_buckets = relative_buckets;  // the table the model will pass
  if (const char* why = math::attn_config_error(ac))
    SL_FAIL("--attn-sim %s --attn-norm %s: %s", kAttnSim.name(attn_sim), kAttnNorm.name(attn_norm), why);
}

std::string ModelConfig::hf_config_json() const {
  // Only the axes that differ from the paper's default model: a default checkpoint is a plain Llama.
  nlohmann::json variant = nlohmann::json::object();
  const std::vector<std::pair<std::string, std::string>> defaults = ModelConfig{}.axes();
  const std::vector<std::pair<std::string, std::string>> mine = axes();
  for (size_t i = 0; i < mine.size(); ++i)
    if (mine[i].second != defaults[i].second) variant[mine[i].first] = mine[i].second;
  nlohmann::json j = {
      {"architectures", {"LlamaForCausalLM"}},
      {"model_type", "llama"},
      {"vocab_size", vocab_size},
      {"hidden_size", d_model},
      {"intermediate_size", ffn_hidden},
      {"num_hidden_layers", n_layers},
      {"num_attention_heads", n_heads},
      {"num_key_value_heads", kv_heads()},
      {"head_dim", head_dim()},
      {"hidden_act", "silu"},
      {"max_position_embeddings", context},
      {"rms_norm_eps", norm_eps},
      {"rope_theta", rope_theta},
      {"attention_bias", false},
      {"mlp_bias", false},
      {"tie_word_embeddings", false},
      {"torch_dtype", "float32"},
      {"sinklab", variant},
  };
  return j.dump(2);
}

ModelConfig ModelConfig::from_hf_config_json(const std::string& text, const std::string& source) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& e) {
    SL_FAIL("%s: malformed JSON: %s", source.c_str(), e.what());
  }
  ModelConfig c;
  try {
    const std::string type = j.value("model_type", "");
    SL_CHECK(type == "llama", "%s: model_type '%s' is not a sinklab (llama) checkpoint", source.c_str(), type.c_str());
    c.vocab_size = j.at("vocab_size").get<int>();
    c.d_model = j.at("hidden_size").get<int>();
    c.ffn_hidden = j.at("intermediate_size").get<int>();
    c.n_layers = j.at("num_hidden_layers").get<int>();
    c.n_heads = j.at("num_attention_heads").get<int>();
    c.n_kv_heads = j.value("num_key_value_heads", c.n_heads);
    c.context = j.at("max_position_embeddings").get<int>();
    c.norm_eps = j.value("rms_norm_eps", 1e-6);
    c.rope_theta = j.value("rope_theta", 10000.0);
    if (j.contains("sinklab") && j["sinklab"].is_object()) {
      for (const auto& [flag, value] : j["sinklab"].items()) {
        if (flag == "attention") continue;  // written by versions before the variant axes ("softmax")
        SL_CHECK(value.is_string(), "%s: sinklab.%s must be a string", source.c_str(), flag.c_str());
        try {
          c.set_axis(flag, value.get<std::string>());
        } catch (const Error& e) {
          SL_FAIL("%s: %s", source.c_str(), e.what());
        }
      }
    }
  } catch (const nlohmann::json::exception& e) {
    SL_FAIL("%s: %s", source.c_str(), e.what());
  }
  c.validate();
  return c;
}

int layer_of_param(const std::string& name) {
  const std::string prefix = "model.layers.";
  if (name.rfind(prefix, 0) != 0) return -1;
  return std::stoi(name.substr(prefix.size()));
}

std::vector<ParamSpec> param_layout(const ModelConfig& cfg, int64_t* total_elements) {
  cfg.validate();
  const int64_t d = cfg.d_model, V = cfg.vocab_size, F = cfg.ffn_hidden;
  const int64_t dh = cfg.head_dim(), H = cfg.n_heads, Hkv = cfg.kv_heads();
  auto fan_in_std = [](int64_t fan_in) { return std::sqrt(2.0 / (5.0 * double(fan_in))); };
  const double std_matrix = fan_in_std(d);
  const double std_mlp_out = 1.0 / (std::sqrt(double(F)) * cfg.n_layers);
  const double std_bias = 0.02;

  std::vector<ParamSpec> specs;
  int64_t offset = 0;
  enum Kind { matrix, gain, bias };
  auto add = [&](std::string name, std::vector<int64_t> shape, double init_std, Kind kind) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.numel = 1;
    for (int64_t s : p.shape) p.numel *= s;
    p.offset = offset;
    p.init_std = kind == gain ? 0.0 : init_std;
    p.init_one = kind == gain;
    p.decay = kind == matrix;
    offset += p.numel;
    specs.push_back(p);
  };
  // Groups that are multiplied as one fused matrix must be adjacent with no padding between them;
  // every group starts 16-element (64-byte) aligned.
  auto align = [&]() { offset = (offset + 15) / 16 * 16; };

  align();
  add("model.embed_tokens.weight", {V, d}, std_matrix, matrix);
  if (cfg.pos_emb == PosEmb::learned) {
    align();
    add("model.embed_positions.weight", {int64_t(cfg.context) + cfg.lead_positions(), d}, std_matrix, matrix);
  }
  if (cfg.attn_bias == AttnBias::sink_token) {
    align();
    add("model.sink_token", {d}, std_matrix, bias);
  }
  if (cfg.pos_emb == PosEmb::relative && cfg.relative_bias == RelativeBias::learned) {
    align();
    add("model.relative_attention_bias.weight", {H, cfg.relative_buckets}, 0.0, bias);
  }
  const int64_t bias_heads = cfg.bias_per_head ? H : 1;
  const int64_t k_dims = cfg.k_bias_dims > 0 ? cfg.k_bias_dims : dh;
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    align();
    add(p + "input_layernorm.weight", {d}, 0, gain);
    align();
    add(p + "self_attn.q_proj.weight", {H * dh, d}, std_matrix, matrix);
    add(p + "self_attn.k_proj.weight", {Hkv * dh, d}, std_matrix, matrix);
    add(p + "self_attn.v_proj.weight", {Hkv * dh, d}, std_matrix, matrix);
    if (cfg.qk_kernel == QkKernel::mlp) {
      align();
      add(p + "self_attn.kernel_mlp1.weight", {dh, dh}, fan_in_std(dh), matrix);
      align();
      add(p + "self_attn.kernel_mlp2.weight", {dh, dh}, fan_in_std(dh), matrix);
    }
    if (cfg.lead_keys() > 0) {
      align();
      add(p + "self_attn.k_bias", {bias_heads, k_dims}, std_bias, bias);
    }
    if (cfg.attn_bias == AttnBias::kv || cfg.attn_bias == AttnBias::v) {
      align();
      add(p + "self_attn.v_bias", {bias_heads, dh}, std_bias, bias);
    }
    if (cfg.sink_logit) {
      align();
      add(p + "self_attn.sinks", {H}, 0.0, bias);
    }
    if (cfg.attn_gate != AttnGate::none) {
      align();
      add(p + "self_attn.gate_proj.weight", {cfg.attn_gate == AttnGate::headwise ? H : H * dh, d}, std_matrix, matrix);
    }
    const int64_t o_in = cfg.head_combine == HeadCombine::add ? dh : H * dh;
    align();
    add(p + "self_attn.o_proj.weight", {d, o_in}, fan_in_std(o_in), matrix);
    align();
    add(p + "post_attention_layernorm.weight", {d}, 0, gain);
    align();
    if (cfg.gated_ffn()) add(p + "mlp.gate_proj.weight", {F, d}, std_matrix, matrix);
    add(p + "mlp.up_proj.weight", {F, d}, std_matrix, matrix);
    align();
    add(p + "mlp.down_proj.weight", {d, F}, std_mlp_out, matrix);
  }
  if (cfg.norm_placement == NormPlacement::pre) {
    align();
    add("model.norm.weight", {d}, 0, gain);
  }
  align();
  add("lm_head.weight", {V, d}, std_matrix, matrix);
  align();
  if (total_elements) *total_elements = offset;
  return specs;
}

}  // namespace sinklab::model
