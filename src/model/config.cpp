#include "model/config.hpp"

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <nlohmann/json.hpp>

#include "backend/attention_math.hpp"
#include "core/enum_names.hpp"
#include "core/error.hpp"
#include "core/text.hpp"

namespace sinklab::model {
namespace {

// The text of the model's own enum axes (attn-sim and attn-norm: ops.hpp, whose names the attention
// dispatch uses too): the flag value, the ini value and the config.json value.
constexpr EnumName<PosEmb> kPosEmbNames[] = {
    {PosEmb::rope, "rope"},       {PosEmb::none, "none"},         {PosEmb::sinusoidal, "sinusoidal"},
    {PosEmb::learned, "learned"}, {PosEmb::relative, "relative"}, {PosEmb::alibi, "alibi"}};
constexpr EnumName<RelativeBias> kRelativeBiasNames[] = {
    {RelativeBias::learned, "learned", "(T5, per head)"},
    {RelativeBias::bucket_index, "bucket-index", "(the paper's Eq. 6)"}};
constexpr EnumName<NormType> kNormTypeNames[] = {{NormType::rms, "rms"}, {NormType::layer, "layer"}};
constexpr EnumName<MatrixInit> kMatrixInitNames[] = {{MatrixInit::lit_gpt, "lit-gpt"},
                                                     {MatrixInit::torch_linear, "torch-linear"}};
constexpr EnumName<NormPlacement> kNormPlacementNames[] = {{NormPlacement::pre, "pre"},
                                                           {NormPlacement::post, "post"}};
constexpr EnumName<FfnKind> kFfnNames[] = {
    {FfnKind::swiglu, "swiglu"}, {FfnKind::geglu, "geglu"}, {FfnKind::reglu, "reglu"},
    {FfnKind::relu, "relu"},     {FfnKind::gelu, "gelu"},   {FfnKind::swish, "swish"}};
constexpr EnumName<HeadCombine> kHeadCombineNames[] = {{HeadCombine::concat, "concat"}, {HeadCombine::add, "add"}};
constexpr EnumName<AttnBias> kAttnBiasNames[] = {{AttnBias::none, "none"}, {AttnBias::sink_token, "sink-token"},
                                                 {AttnBias::kv, "kv"},     {AttnBias::k, "k"},
                                                 {AttnBias::v, "v"}};
constexpr EnumName<FixedValue> kFixedValueNames[] = {
    {FixedValue::zero, "zero"}, {FixedValue::e1, "e1", "(m*v')"}, {FixedValue::ones, "ones", "(m*v'')"}};
constexpr EnumName<QkKernel> kQkKernelNames[] = {
    {QkKernel::identity, "identity"}, {QkKernel::elu_plus_one, "elu-plus-one"}, {QkKernel::mlp, "mlp"}};
constexpr EnumName<AttnGate> kAttnGateNames[] = {
    {AttnGate::none, "none"}, {AttnGate::headwise, "headwise"}, {AttnGate::elementwise, "elementwise"}};

bool parse_bool(const std::string& flag, const std::string& v) {
  if (v == "true" || v == "1") return true;
  if (v == "false" || v == "0") return false;
  SL_FAIL("--%s: '%s' is not true or false", flag.c_str(), v.c_str());
}

// One variant axis: its flag (also its ini key and its config.json key), its --help line, and its
// value as text both ways (the flag value, the ini value, the config.json value).
struct Axis {
  std::string flag;
  std::string help;
  std::function<std::string(const ModelConfig&)> get;
  std::function<void(ModelConfig&, const std::string&)> set;
};

// An axis of enum values; "%s" in its help stands for the list of values ("pre | post").
template <class E, size_t N>
Axis enum_axis(const char* flag, E ModelConfig::*field, const EnumName<E> (&names)[N], const char* help) {
  return {flag, strfmt(help, enum_name_list(names, true).c_str()),
          [field, &names](const ModelConfig& c) -> std::string { return enum_name(names, c.*field); },
          [field, &names, flag](ModelConfig& c, const std::string& v) { c.*field = parse_enum(names, v, flag); }};
}

Axis int_axis(const char* flag, int ModelConfig::*field, const char* help) {
  return {flag, help, [field](const ModelConfig& c) { return std::to_string(c.*field); },
          [field, flag](ModelConfig& c, const std::string& v) {
            c.*field = int(parse_integer(v, strfmt("--%s", flag).c_str()));
          }};
}

Axis real_axis(const char* flag, double ModelConfig::*field, const char* help) {
  return {flag, help, [field](const ModelConfig& c) { return number_text(c.*field); },
          [field, flag](ModelConfig& c, const std::string& v) {
            c.*field = parse_real(v, strfmt("--%s", flag).c_str());
          }};
}

Axis bool_axis(const char* flag, bool ModelConfig::*field, const char* help) {
  return {flag, help, [field](const ModelConfig& c) -> std::string { return c.*field ? "true" : "false"; },
          [field, flag](ModelConfig& c, const std::string& v) { c.*field = parse_bool(flag, v); }};
}

// Every variant axis, in the fixed order of axes() (and so of --help, --dry-run and config.json): the one
// place an axis is spelled.
const std::vector<Axis>& axis_table() {
  using C = ModelConfig;
  static const std::vector<Axis> table = {
      enum_axis("pos-emb", &C::pos_emb, kPosEmbNames, "positional embedding: %s (Table 3)"),
      enum_axis("relative-bias", &C::relative_bias, kRelativeBiasNames, "pos-emb relative: %s"),
      int_axis("relative-buckets", &C::relative_buckets, "pos-emb relative: buckets B"),
      int_axis("relative-max-distance", &C::relative_max_distance, "pos-emb relative: max distance D"),
      enum_axis("norm-placement", &C::norm_placement, kNormPlacementNames, "%s (Sec. 7.2)"),
      enum_axis("norm-type", &C::norm_type, kNormTypeNames, "%s: RMSNorm, or LayerNorm with a bias (Guo et al.'s BBM)"),
      enum_axis("ffn", &C::ffn, kFfnNames, "%s (Table 11)"),
      enum_axis("head-combine", &C::head_combine, kHeadCombineNames, "%s: how head outputs meet W_O (Table 12 left)"),
      enum_axis("attn-bias", &C::attn_bias, kAttnBiasNames, "%s (Table 4)"),
      bool_axis("bias-per-head", &C::bias_per_head,
                "kv/k/v biases per head (false: shared by the heads of a layer, Table 12 right)"),
      int_axis("k-bias-dims", &C::k_bias_dims, "d_a: learnable leading dims of k* (0 = all; Table 13)"),
      enum_axis("fixed-value", &C::fixed_value, kFixedValueNames, "attn-bias k: v* = %s, Table 5"),
      real_axis("fixed-value-scale", &C::fixed_value_scale, "m, the l2 norm of the fixed v*"),
      enum_axis("attn-sim", &C::attn_sim, ops::kAttnSimNames, "%s"),
      enum_axis("attn-norm", &C::attn_norm, ops::kAttnNormNames, "%s"),
      enum_axis("qk-kernel", &C::qk_kernel, kQkKernelNames, "%s: feature map of q and k (Table 15)"),
      real_axis("attn-alpha", &C::attn_alpha, "attn-norm sum: rows sum to alpha (Table 14 left)"),
      real_axis("attn-p", &C::attn_p, "attn-norm p-norm: p (Eq. 43-44)"),
      real_axis("sigmoid-bias", &C::sigmoid_bias, "attn-sim sigmoid: b in sigmoid(s + b)"),
      bool_axis("sigmoid-bias-log-n", &C::sigmoid_bias_log_n, "attn-sim sigmoid: b = -log(context) (FlashSigmoid)"),
      bool_axis("sink-logit", &C::sink_logit, "a learned per-head sink logit in the softmax denominator (gpt-oss)"),
      real_axis("sink-logit-init", &C::sink_logit_init,
                "--sink-logit: the logits' starting value (0, gpt-oss's; log(context) outweighs a uniform row)"),
      bool_axis("softmax-plus-one", &C::softmax_plus_one, "a constant sink logit 0: softmax with 1 + sum e^s"),
      enum_axis("attn-gate", &C::attn_gate, kAttnGateNames, "%s sigmoid gate on the attention output"),
      int_axis("attn-window", &C::attn_window, "sliding-window attention over w keys (0 = off; Sec. 6)"),
      int_axis("prefix-length", &C::prefix_length,
               "prefix LM: bidirectional prefix of p tokens, loss after it (1 = off; Sec. 6)"),
      real_axis("embed-init-std", &C::embed_init_std,
                "std of the embeddings' initial values (0 = fan-in default; 1 = nn.Embedding, Guo et al.)"),
      enum_axis("matrix-init", &C::matrix_init, kMatrixInitNames,
                "%s: weight matrices start normal(0, sqrt(2/(5 fan_in))) (lit_gpt, the paper's code) or "
                "uniform(+-1/sqrt(fan_in)) (nn.Linear, Guo et al.)"),
  };
  return table;
}

const Axis* find_axis(const std::string& flag) {
  for (const Axis& axis : axis_table())
    if (axis.flag == flag) return &axis;
  return nullptr;
}

}  // namespace

std::vector<std::pair<std::string, std::string>> ModelConfig::axes() const {
  std::vector<std::pair<std::string, std::string>> values;
  for (const Axis& axis : axis_table()) values.emplace_back(axis.flag, axis.get(*this));
  return values;
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
  const Axis* axis = find_axis(flag);
  return axis ? axis->help.c_str() : "";
}

void ModelConfig::set_axis(const std::string& flag, const std::string& v) {
  const Axis* axis = find_axis(flag);
  SL_CHECK(axis != nullptr, "unknown model axis --%s", flag.c_str());
  axis->set(*this, v);
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
           enum_name(kAttnBiasNames, attn_bias));
  SL_CHECK(k_bias_dims >= 0 && k_bias_dims <= head_dim(), "--k-bias-dims must lie in [0, head dim %d]", head_dim());
  SL_CHECK(k_bias_dims == 0 || kv_style, "--k-bias-dims applies to --attn-bias kv or k only");
  SL_CHECK(fixed_value == FixedValue::zero || attn_bias == AttnBias::k,
           "--fixed-value applies to --attn-bias k only");
  SL_CHECK(std::isfinite(fixed_value_scale), "--fixed-value-scale must be finite");
  SL_CHECK(bias_per_head || kv_style || attn_bias == AttnBias::v,
           "--bias-per-head false applies to --attn-bias kv, k or v only");
  SL_CHECK(!(sink_logit && softmax_plus_one), "--sink-logit and --softmax-plus-one both add a sink logit: pick one");
  SL_CHECK(std::isfinite(sink_logit_init), "--sink-logit-init must be finite");
  SL_CHECK(sink_logit_init == 0.0 || sink_logit, "--sink-logit-init applies to --sink-logit only");
  SL_CHECK(!((sink_logit || softmax_plus_one) && attn_norm == ops::AttnNorm::one),
           "--sink-logit / --softmax-plus-one enter the normaliser: not with --attn-norm one");
  SL_CHECK(attn_window >= 0, "--attn-window must be >= 0 (0 = full causal attention)");
  SL_CHECK(prefix_length >= 1, "--prefix-length must be >= 1 (1 = plain causal LM)");
  SL_CHECK(attn_window == 0 || prefix_length == 1, "--attn-window and --prefix-length cannot be combined");
  SL_CHECK(prefix_length < context, "--prefix-length must be smaller than --context");
  SL_CHECK(!(attn_window > 0 && attn_bias == AttnBias::sink_token),
           "--attn-window with --attn-bias sink-token is not supported (the window would slide past x*)");
  SL_CHECK(embed_init_std >= 0 && std::isfinite(embed_init_std), "--embed-init-std must be >= 0 (got %g)",
           embed_init_std);
  SL_CHECK(attn_p > 0 && std::isfinite(attn_p), "--attn-p must be > 0 (got %g)", attn_p);
  SL_CHECK(attn_alpha > 0 && std::isfinite(attn_alpha), "--attn-alpha must be > 0 (got %g)", attn_alpha);
  ops::AttentionSpec spec = attention_spec();
  math::AttnConfig ac = math::attn_config(spec);
  ac.sink = sink_logit || softmax_plus_one;
  if (pos_emb == PosEmb::relative) ac.num_buckets = relative_buckets;  // the table the model will pass
  if (const char* why = math::attn_config_error(ac))
    SL_FAIL("--attn-sim %s --attn-norm %s: %s", enum_name(ops::kAttnSimNames, attn_sim),
            enum_name(ops::kAttnNormNames, attn_norm), why);
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

int64_t count_parameters(const std::vector<ParamSpec>& specs) {
  int64_t n = 0;
  for (const auto& s : specs) n += s.numel;
  return n;
}

int64_t count_parameters_non_embedding(const std::vector<ParamSpec>& specs) {
  int64_t n = 0;
  for (const auto& s : specs)
    if (s.role != ParamRole::embed_tokens && s.role != ParamRole::head) n += s.numel;
  return n;
}

double flops_per_token(const ModelConfig& cfg, const std::vector<ParamSpec>& specs, int64_t seq) {
  int64_t multiplied = 0;  // the embedding tables are gathered, not multiplied
  for (const auto& s : specs)
    if (s.role != ParamRole::embed_tokens && s.role != ParamRole::embed_positions) multiplied += s.numel;
  return 6.0 * double(multiplied) + 12.0 * double(cfg.n_layers) * double(cfg.n_heads) * double(cfg.head_dim()) *
                                        double(seq + cfg.lead_positions());
}

std::vector<ParamSpec> param_layout(const ModelConfig& cfg, int64_t* total_elements) {
  cfg.validate();
  const int64_t d = cfg.d_model, V = cfg.vocab_size, F = cfg.ffn_hidden;
  const int64_t dh = cfg.head_dim(), H = cfg.n_heads, Hkv = cfg.kv_heads();
  auto fan_in_std = [](int64_t fan_in) { return std::sqrt(2.0 / (5.0 * double(fan_in))); };
  const double std_matrix = fan_in_std(d);
  const double std_mlp_out = 1.0 / (std::sqrt(double(F)) * cfg.n_layers);
  const double std_bias = 0.02;
  const double std_embed = cfg.embed_init_std > 0 ? cfg.embed_init_std : std_matrix;
  const bool layer_norm = cfg.norm_type == NormType::layer;  // each norm's bias follows its weight

  std::vector<ParamSpec> specs;
  int64_t offset = 0;
  // embedding: decayed like a matrix, but its starting law is std_embed whatever matrix-init says
  enum Kind { matrix, embedding, gain, bias };
  int layer = -1;  // the layer whose parameters add() is laying out
  auto add = [&](std::string name, ParamRole role, std::vector<int64_t> shape, double init_std, Kind kind) {
    ParamSpec p;
    p.name = std::move(name);
    p.role = role;
    p.layer = layer;
    p.shape = std::move(shape);
    p.numel = 1;
    for (int64_t s : p.shape) p.numel *= s;
    p.offset = offset;
    p.init_std = kind == gain ? 0.0 : init_std;
    p.init_one = kind == gain;
    p.decay = kind == matrix || kind == embedding;
    // nn.Linear's default: kaiming_uniform(a = sqrt(5)) = uniform(+-1/sqrt(fan_in)).
    if (kind == matrix && cfg.matrix_init == MatrixInit::torch_linear)
      p.init_uniform_bound = 1.0 / std::sqrt(double(p.shape.back()));
    offset += p.numel;
    specs.push_back(p);
  };
  // Groups that are multiplied as one fused matrix must be adjacent with no padding between them;
  // every group starts 16-element (64-byte) aligned.
  auto align = [&]() { offset = (offset + 15) / 16 * 16; };

  align();
  add("model.embed_tokens.weight", ParamRole::embed_tokens, {V, d}, std_embed, embedding);
  if (cfg.pos_emb == PosEmb::learned) {
    align();
    add("model.embed_positions.weight", ParamRole::embed_positions, {int64_t(cfg.context) + cfg.lead_positions(), d},
        std_embed, embedding);
  }
  if (cfg.attn_bias == AttnBias::sink_token) {
    align();
    add("model.sink_token", ParamRole::sink_token, {d}, std_matrix, bias);
  }
  if (cfg.pos_emb == PosEmb::relative && cfg.relative_bias == RelativeBias::learned) {
    align();
    add("model.relative_attention_bias.weight", ParamRole::relative_bias, {H, cfg.relative_buckets}, 0.0, bias);
  }
  const int64_t bias_heads = cfg.bias_per_head ? H : 1;
  const int64_t k_dims = cfg.k_bias_dims > 0 ? cfg.k_bias_dims : dh;
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    layer = l;
    align();
    add(p + "input_layernorm.weight", ParamRole::norm1, {d}, 0, gain);
    if (layer_norm) add(p + "input_layernorm.bias", ParamRole::norm1_bias, {d}, 0.0, bias);
    align();
    add(p + "self_attn.q_proj.weight", ParamRole::q, {H * dh, d}, std_matrix, matrix);
    add(p + "self_attn.k_proj.weight", ParamRole::k, {Hkv * dh, d}, std_matrix, matrix);
    add(p + "self_attn.v_proj.weight", ParamRole::v, {Hkv * dh, d}, std_matrix, matrix);
    if (cfg.qk_kernel == QkKernel::mlp) {
      align();
      add(p + "self_attn.kernel_mlp1.weight", ParamRole::kernel_mlp1, {dh, dh}, fan_in_std(dh), matrix);
      align();
      add(p + "self_attn.kernel_mlp2.weight", ParamRole::kernel_mlp2, {dh, dh}, fan_in_std(dh), matrix);
    }
    if (cfg.lead_keys() > 0) {
      align();
      add(p + "self_attn.k_bias", ParamRole::k_bias, {bias_heads, k_dims}, std_bias, bias);
    }
    if (cfg.attn_bias == AttnBias::kv || cfg.attn_bias == AttnBias::v) {
      align();
      add(p + "self_attn.v_bias", ParamRole::v_bias, {bias_heads, dh}, std_bias, bias);
    }
    if (cfg.sink_logit) {
      align();
      add(p + "self_attn.sinks", ParamRole::sinks, {H}, 0.0, bias);
      specs.back().init_value = cfg.sink_logit_init;
    }
    if (cfg.attn_gate != AttnGate::none) {
      align();
      add(p + "self_attn.gate_proj.weight", ParamRole::attn_gate, {cfg.attn_gate == AttnGate::headwise ? H : H * dh, d},
          std_matrix, matrix);
    }
    const int64_t o_in = cfg.head_combine == HeadCombine::add ? dh : H * dh;
    align();
    add(p + "self_attn.o_proj.weight", ParamRole::o, {d, o_in}, fan_in_std(o_in), matrix);
    align();
    add(p + "post_attention_layernorm.weight", ParamRole::norm2, {d}, 0, gain);
    if (layer_norm) add(p + "post_attention_layernorm.bias", ParamRole::norm2_bias, {d}, 0.0, bias);
    align();
    if (cfg.gated_ffn()) add(p + "mlp.gate_proj.weight", ParamRole::ffn_gate, {F, d}, std_matrix, matrix);
    add(p + "mlp.up_proj.weight", ParamRole::ffn_up, {F, d}, std_matrix, matrix);
    align();
    add(p + "mlp.down_proj.weight", ParamRole::ffn_down, {d, F}, std_mlp_out, matrix);
  }
  layer = -1;
  if (cfg.norm_placement == NormPlacement::pre) {
    align();
    add("model.norm.weight", ParamRole::final_norm, {d}, 0, gain);
    if (layer_norm) add("model.norm.bias", ParamRole::final_norm_bias, {d}, 0.0, bias);
  }
  align();
  add("lm_head.weight", ParamRole::head, {V, d}, std_matrix, matrix);
  align();
  if (total_elements) *total_elements = offset;
  return specs;
}

}  // namespace sinklab::model
