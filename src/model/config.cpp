#include "model/config.hpp"

#include <cmath>
#include <nlohmann/json.hpp>

#include "core/error.hpp"

namespace sinklab::model {

void ModelConfig::validate() const {
  SL_CHECK(vocab_size > 0, "--vocab-size must be positive (got %d)", vocab_size);
  SL_CHECK(d_model > 0, "--d-model must be positive (got %d)", d_model);
  SL_CHECK(n_layers > 0, "--n-layers must be positive (got %d)", n_layers);
  SL_CHECK(n_heads > 0 && d_model % n_heads == 0, "--n-heads %d must divide --d-model %d", n_heads, d_model);
  SL_CHECK(head_dim() % 2 == 0, "head dimension d_model/n_heads = %d must be even for rotary embeddings", head_dim());
  SL_CHECK(kv_heads() > 0 && n_heads % kv_heads() == 0, "--n-kv-heads %d must divide --n-heads %d", kv_heads(),
           n_heads);
  SL_CHECK(ffn_hidden > 0, "--ffn-hidden must be positive (got %d)", ffn_hidden);
  SL_CHECK(context > 0, "--context must be positive (got %d)", context);
  SL_CHECK(rope_theta > 0, "--rope-theta must be positive");
  SL_CHECK(norm_eps > 0, "--norm-eps must be positive");
}

std::string ModelConfig::hf_config_json() const {
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
      {"sinklab", {{"attention", "softmax"}}},
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
  } catch (const nlohmann::json::exception& e) {
    SL_FAIL("%s: %s", source.c_str(), e.what());
  }
  c.validate();
  return c;
}

std::vector<ParamSpec> param_layout(const ModelConfig& cfg, int64_t* total_elements) {
  cfg.validate();
  const int64_t d = cfg.d_model, V = cfg.vocab_size, F = cfg.ffn_hidden;
  const int64_t dh = cfg.head_dim(), H = cfg.n_heads, Hkv = cfg.kv_heads();
  auto fan_in_std = [](int64_t fan_in) { return std::sqrt(2.0 / (5.0 * double(fan_in))); };
  const double std_matrix = fan_in_std(d);
  const double std_mlp_out = 1.0 / (std::sqrt(double(F)) * cfg.n_layers);

  std::vector<ParamSpec> specs;
  int64_t offset = 0;
  auto add = [&](std::string name, std::vector<int64_t> shape, double init_std, bool is_gain) {
    ParamSpec p;
    p.name = std::move(name);
    p.shape = std::move(shape);
    p.numel = 1;
    for (int64_t s : p.shape) p.numel *= s;
    p.offset = offset;
    p.init_std = is_gain ? 0.0 : init_std;
    p.init_one = is_gain;
    p.decay = !is_gain;
    offset += p.numel;
    specs.push_back(p);
  };
  // Groups that are multiplied as one fused matrix must be adjacent with no padding between them;
  // every group starts 16-element (64-byte) aligned.
  auto align = [&]() { offset = (offset + 15) / 16 * 16; };

  align();
  add("model.embed_tokens.weight", {V, d}, std_matrix, false);
  for (int l = 0; l < cfg.n_layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    align();
    add(p + "input_layernorm.weight", {d}, 0, true);
    align();
    add(p + "self_attn.q_proj.weight", {H * dh, d}, std_matrix, false);
    add(p + "self_attn.k_proj.weight", {Hkv * dh, d}, std_matrix, false);
    add(p + "self_attn.v_proj.weight", {Hkv * dh, d}, std_matrix, false);
    align();
    add(p + "self_attn.o_proj.weight", {d, H * dh}, fan_in_std(H * dh), false);
    align();
    add(p + "post_attention_layernorm.weight", {d}, 0, true);
    align();
    add(p + "mlp.gate_proj.weight", {F, d}, std_matrix, false);
    add(p + "mlp.up_proj.weight", {F, d}, std_matrix, false);
    align();
    add(p + "mlp.down_proj.weight", {d, F}, std_mlp_out, false);
  }
  align();
  add("model.norm.weight", {d}, 0, true);
  align();
  add("lm_head.weight", {V, d}, std_matrix, false);
  align();
  if (total_elements) *total_elements = offset;
  return specs;
}

}  // namespace sinklab::model
