// ModelConfig's variant axes: flag parsing, the HF config round trip, and the combinations that are
// refused at start with one clear line naming the flag.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "model/config.hpp"

namespace sinklab {
namespace {

using model::ModelConfig;

ModelConfig tiny() {
  ModelConfig c;
  c.vocab_size = 50;
  c.d_model = 32;
  c.n_layers = 2;
  c.n_heads = 4;
  c.ffn_hidden = 40;
  c.context = 16;
  return c;
}

// Applies flag=value pairs and validates; returns the error text ("" when accepted).
std::string error_of(std::vector<std::pair<std::string, std::string>> axes, int kv_heads = 0) {
  ModelConfig c = tiny();
  c.n_kv_heads = kv_heads;
  try {
    for (const auto& [flag, value] : axes) c.set_axis(flag, value);
    c.validate();
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(ModelConfig, EveryAxisSurvivesTheHfConfigRoundTrip) {
  ModelConfig c = tiny();
  const std::vector<std::pair<std::string, std::string>> changed = {
      {"pos-emb", "alibi"},      {"norm-placement", "post"}, {"ffn", "geglu"},      {"head-combine", "add"},
      {"attn-bias", "k"},        {"bias-per-head", "false"}, {"k-bias-dims", "3"},  {"fixed-value", "ones"},
      {"fixed-value-scale", "5"}, {"attn-sim", "sigmoid"},    {"attn-norm", "sum"},  {"attn-alpha", "0.25"},
      {"attn-gate", "headwise"}, {"prefix-length", "3"},     {"relative-buckets", "16"}, {"embed-init-std", "1"},
      {"matrix-init", "torch-linear"}};
  for (const auto& [flag, value] : changed) c.set_axis(flag, value);
  c.validate();
  const ModelConfig back = ModelConfig::from_hf_config_json(c.hf_config_json(), "config.json");
  EXPECT_EQ(back.axes(), c.axes());
  EXPECT_NE(back.axes(), tiny().axes());
}

TEST(ModelConfig, DefaultIsThePapersModel) {
  const ModelConfig c = tiny();
  EXPECT_EQ(c.pos_emb, model::PosEmb::rope);
  EXPECT_EQ(c.ffn, model::FfnKind::swiglu);
  EXPECT_EQ(c.norm_placement, model::NormPlacement::pre);
  EXPECT_EQ(c.attn_sim, ops::AttnSim::exp);
  EXPECT_EQ(c.attn_norm, ops::AttnNorm::sum);
  EXPECT_EQ(c.lead_keys() + c.lead_positions(), 0);
  EXPECT_EQ(error_of({}), "");
}

TEST(ModelConfig, UnknownValuesNameTheFlagAndTheChoices) {
  EXPECT_NE(error_of({{"pos-emb", "xpos"}}).find("--pos-emb: 'xpos' is not one of rope | none"), std::string::npos);
  EXPECT_NE(error_of({{"attn-p", "abc"}}).find("--attn-p"), std::string::npos);
  EXPECT_NE(error_of({{"bias-per-head", "maybe"}}).find("--bias-per-head"), std::string::npos);
}

TEST(ModelConfig, InvalidCombinationsAreRefusedNamingTheFlag) {
  struct Case {
    std::vector<std::pair<std::string, std::string>> axes;
    const char* expect;
    int kv_heads = 0;
  };
  const std::vector<Case> cases = {
      {{{"attn-norm", "p-norm"}, {"attn-p", "0"}}, "--attn-p must be > 0"},
      {{{"attn-norm", "p-norm"}, {"attn-p", "-2"}}, "--attn-p must be > 0"},
      {{{"attn-alpha", "0"}}, "--attn-alpha must be > 0"},
      {{{"attn-sim", "exp"}, {"attn-norm", "one"}}, "--attn-sim exp --attn-norm one"},
      {{{"attn-sim", "identity"}, {"attn-norm", "p-norm"}}, "--attn-sim identity --attn-norm p-norm"},
      {{{"attn-bias", "kv"}}, "--attn-bias kv needs multi-head attention", 2},
      {{{"k-bias-dims", "3"}}, "--k-bias-dims applies to --attn-bias kv or k only"},
      {{{"attn-bias", "k"}, {"k-bias-dims", "9"}}, "--k-bias-dims must lie in [0, head dim 8]"},
      {{{"fixed-value", "e1"}}, "--fixed-value applies to --attn-bias k only"},
      {{{"bias-per-head", "false"}}, "--bias-per-head false applies to --attn-bias kv, k or v only"},
      {{{"sink-logit", "true"}, {"softmax-plus-one", "true"}}, "pick one"},
      {{{"sink-logit-init", "4"}}, "--sink-logit-init applies to --sink-logit only"},
      {{{"sink-logit", "true"}, {"sink-logit-init", "inf"}}, "--sink-logit-init must be finite"},
      {{{"sink-logit", "true"}, {"attn-sim", "sigmoid"}, {"attn-norm", "one"}}, "not with --attn-norm one"},
      {{{"attn-window", "4"}, {"prefix-length", "3"}}, "cannot be combined"},
      {{{"attn-window", "4"}, {"attn-bias", "sink-token"}}, "--attn-window with --attn-bias sink-token"},
      {{{"prefix-length", "0"}}, "--prefix-length must be >= 1"},
      {{{"prefix-length", "16"}}, "--prefix-length must be smaller than --context"},
      {{{"attn-window", "-1"}}, "--attn-window must be >= 0"},
      {{{"relative-buckets", "7"}}, "--relative-buckets must be even"},
  };
  for (const Case& c : cases) {
    const std::string err = error_of(c.axes, c.kv_heads);
    EXPECT_NE(err.find(c.expect), std::string::npos) << "expected '" << c.expect << "', got '" << err << "'";
    EXPECT_EQ(err.find('\n'), std::string::npos) << "one line: " << err;
  }
}

// --embed-init-std moves only the embeddings' starting std (Guo et al.'s nn.Embedding N(0, 1)); 0 keeps the
// fan-in std of every matrix.
TEST(ModelConfig, EmbedInitStdSetsOnlyTheEmbeddingsStartingStd) {
  auto stds = [](const std::string& value) {
    ModelConfig c = tiny();
    c.set_axis("pos-emb", "learned");
    c.set_axis("embed-init-std", value);
    std::vector<std::pair<std::string, double>> out;
    for (const auto& p : model::param_layout(c, nullptr)) out.emplace_back(p.name, p.init_std);
    return out;
  };
  const auto fan_in = stds("0"), unit = stds("1");
  ASSERT_EQ(fan_in.size(), unit.size());
  for (size_t i = 0; i < unit.size(); ++i) {
    const std::string& name = unit[i].first;
    if (name == "model.embed_tokens.weight" || name == "model.embed_positions.weight") {
      EXPECT_EQ(unit[i].second, 1.0) << name;
      EXPECT_NEAR(fan_in[i].second, std::sqrt(2.0 / (5.0 * 32)), 1e-12) << name;
    } else {
      EXPECT_EQ(unit[i].second, fan_in[i].second) << name;
    }
  }
  EXPECT_NE(error_of({{"embed-init-std", "-1"}}).find("--embed-init-std must be >= 0"), std::string::npos);
}

// --sink-logit-init: the sink logits start at its value (a constant: no draw), every other tensor as without it.
TEST(ModelConfig, SinkLogitInitSetsOnlyTheSinkLogitsStart) {
  auto layout = [](const std::string& value) {
    ModelConfig c = tiny();
    c.set_axis("sink-logit", "true");
    c.set_axis("sink-logit-init", value);
    return model::param_layout(c, nullptr);
  };
  const auto zero = layout("0"), log_t = layout("4.1588830833596715");
  ASSERT_EQ(zero.size(), log_t.size());
  int sinks = 0;
  for (size_t i = 0; i < zero.size(); ++i) {
    EXPECT_EQ(zero[i].init_std, log_t[i].init_std) << zero[i].name;
    if (zero[i].role == model::ParamRole::sinks) {
      ++sinks;
      EXPECT_EQ(zero[i].init_value, 0.0);
      EXPECT_EQ(log_t[i].init_value, 4.1588830833596715);
      EXPECT_EQ(log_t[i].init_std, 0.0);  // a constant, not a draw
      EXPECT_TRUE(model::is_sink_parameter(log_t[i].role));
    } else {
      EXPECT_EQ(log_t[i].init_value, 0.0) << log_t[i].name;
    }
  }
  EXPECT_EQ(sinks, 2);  // one [H] tensor per layer
}

TEST(ModelConfig, ParamLayoutHasExactlyTheVariantsTensors) {
  auto names = [](std::vector<std::pair<std::string, std::string>> axes) {
    ModelConfig c = tiny();
    for (const auto& [flag, value] : axes) c.set_axis(flag, value);
    std::vector<std::string> out;
    for (const auto& p : model::param_layout(c, nullptr)) out.push_back(p.name);
    return out;
  };
  auto has = [](const std::vector<std::string>& v, const std::string& n) {
    return std::find(v.begin(), v.end(), n) != v.end();
  };
  const auto base = names({});
  EXPECT_TRUE(has(base, "model.norm.weight"));
  EXPECT_TRUE(has(base, "model.layers.1.mlp.gate_proj.weight"));
  EXPECT_FALSE(has(names({{"norm-placement", "post"}}), "model.norm.weight"));
  EXPECT_FALSE(has(names({{"ffn", "relu"}}), "model.layers.0.mlp.gate_proj.weight"));
  EXPECT_TRUE(has(names({{"pos-emb", "learned"}}), "model.embed_positions.weight"));
  EXPECT_TRUE(has(names({{"pos-emb", "relative"}}), "model.relative_attention_bias.weight"));
  EXPECT_FALSE(has(names({{"pos-emb", "relative"}, {"relative-bias", "bucket-index"}}),
                   "model.relative_attention_bias.weight"));
  EXPECT_TRUE(has(names({{"attn-bias", "sink-token"}}), "model.sink_token"));
  const auto kv = names({{"attn-bias", "kv"}});
  EXPECT_TRUE(has(kv, "model.layers.0.self_attn.k_bias") && has(kv, "model.layers.0.self_attn.v_bias"));
  const auto k = names({{"attn-bias", "k"}});
  EXPECT_TRUE(has(k, "model.layers.0.self_attn.k_bias") && !has(k, "model.layers.0.self_attn.v_bias"));
  EXPECT_TRUE(has(names({{"sink-logit", "true"}}), "model.layers.1.self_attn.sinks"));
  EXPECT_FALSE(has(names({{"softmax-plus-one", "true"}}), "model.layers.1.self_attn.sinks"));
  EXPECT_TRUE(has(names({{"attn-gate", "headwise"}}), "model.layers.0.self_attn.gate_proj.weight"));
  EXPECT_TRUE(has(names({{"qk-kernel", "mlp"}, {"attn-sim", "identity"}, {"attn-norm", "one"}}),
                  "model.layers.0.self_attn.kernel_mlp2.weight"));
  // Shapes that carry the axis.
  ModelConfig c = tiny();
  c.set_axis("attn-bias", "k");
  c.set_axis("bias-per-head", "false");
  c.set_axis("k-bias-dims", "3");
  c.set_axis("head-combine", "add");
  for (const auto& p : model::param_layout(c, nullptr)) {
    if (p.name == "model.layers.0.self_attn.k_bias") {
      EXPECT_EQ(p.shape, (std::vector<int64_t>{1, 3}));
      EXPECT_FALSE(p.decay);
    }
    if (p.name == "model.layers.0.self_attn.o_proj.weight") {
      EXPECT_EQ(p.shape, (std::vector<int64_t>{32, 8}));
    }
  }
}

}  // namespace
}  // namespace sinklab
