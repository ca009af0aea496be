// The Jamba family (src/hf/jamba.cpp) against transformers: a tiny random JambaForCausalLM (2 attention
// + 2 Mamba layers, a 4-expert top-2 MoE layer; tests/python/goldens/gen_hf_jamba.py) run by
// transformers in float64 with eager attention. For ids [2,13] and [2,1]:
// - logits: NMSE (sum of squared errors / sum of squared references) < 1e-6;
// - the attention probabilities of both attention layers, from the taps (attention_probs on taps.q,
//   taps.k with taps.attention), within 1e-5 of output_attentions;
// - alpha_1 of every head (probe::importance_scores) within 1e-5;
// - hidden_out of every layer (attention and Mamba) within 1e-5 of its scale of transformers'
//   hidden_states; each layer's hidden_in is the previous layer's hidden_out;
// - Mamba layers report no q/k/v and no attention spec;
// - layer streaming (--max-memory) gives bit-identical logits;
// - broken configs / checkpoints fail with one sinklab::Error naming the file.
#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "hf/hf_model.hpp"
#include "probe/sink_metrics.hpp"
#include "test_util.hpp"

namespace sinklab {
namespace {

namespace fs = std::filesystem;
using test::max_abs_diff;
using test::nmse;
using test::Owned;

const std::string kFixture = std::string(SINKLAB_SOURCE_DIR) + "/tests/fixtures/hf/jamba_tiny";

// Records, per layer, what the taps say, and the attention probabilities of attention layers.
class Recorder final : public LayerObserver {
 public:
  struct Layer {
    bool has_attention = false;
    bool qkv_defined = false;
    Owned hidden_in, hidden_out;  // [B,T,d]
    Owned probs;  // [B,H,T,T]
  };
  void on_layer(const LayerTaps& taps) override {
    Layer rec;
    rec.has_attention = taps.attention != nullptr;
    rec.qkv_defined = taps.q.defined() || taps.k.defined() || taps.v.defined();
    rec.hidden_in = Owned::copy_of(taps.hidden_in, DType::f32);
    rec.hidden_out = Owned::copy_of(taps.hidden_out, DType::f32);
    if (taps.attention) {
      const int64_t B = taps.q.shape[0], T = taps.q.shape[1], H = taps.q.shape[2], S = taps.k.shape[1];
      rec.probs = Owned(DType::f32, {B, H, T, S});
      ops::attention_probs(rec.probs, taps.q, taps.k, *taps.attention);
    }
    EXPECT_EQ(taps.layer, int(layers.size()));
    layers.push_back(std::move(rec));
  }
  std::vector<Layer> layers;
};

TEST(HfJamba, Info) {
  auto model = hf::load_model(kFixture);
  const hf::HfModelInfo& info = model->info();
  EXPECT_EQ(info.model_type, "jamba");
  EXPECT_EQ(info.n_layers, 4);
  EXPECT_EQ(info.n_heads, 4);
  EXPECT_EQ(info.n_kv_heads, 2);
  EXPECT_EQ(info.d_model, 32);
  EXPECT_EQ(info.vocab_size, 80);
  EXPECT_EQ(info.max_positions, 0);
  EXPECT_FALSE(info.learned_positions);
  EXPECT_EQ(info.attention_layers, (std::vector<int>{1, 3}));
  EXPECT_GT(info.weight_bytes, 0);
}

class HfJambaVsTransformers : public ::testing::TestWithParam<std::string> {};

TEST_P(HfJambaVsTransformers, LogitsAttentionAndAlpha) {
  const std::string c = GetParam();
  io::SafetensorsFile golden(kFixture + "/jamba_golden.safetensors");
  auto model = hf::load_model(kFixture);
  Tensor ids = golden.view(c + "/ids");
  const int64_t B = ids.shape[0], T = ids.shape[1], V = model->info().vocab_size;
  Owned logits(DType::f32, {B, T, V});
  Recorder rec;
  model->forward(ids, &rec, logits, hf::ForwardOptions{});

  const double e_logits = nmse(logits, golden.view(c + "/logits"));
  EXPECT_LT(e_logits, 1e-6) << "logits NMSE";
  ASSERT_EQ(rec.layers.size(), 4u);
  double worst_probs = 0.0, worst_alpha = 0.0, worst_hidden = 0.0;
  for (int l = 0; l < 4; ++l) {
    const Recorder::Layer& layer = rec.layers[size_t(l)];
    EXPECT_EQ(test::dims_of(layer.hidden_out), (std::vector<int64_t>{B, T, 32})) << l;
    const double e_hidden = test::rel_error(layer.hidden_out, golden.view(c + "/hidden_out/" + std::to_string(l)));
    EXPECT_LE(e_hidden, 1e-5) << "hidden_out of layer " << l;
    worst_hidden = std::max(worst_hidden, e_hidden);
    if (l > 0) {
      EXPECT_EQ(test::rel_error(layer.hidden_in, rec.layers[size_t(l - 1)].hidden_out), 0.0) << l;
    }
    const bool attention = l == 1 || l == 3;
    EXPECT_EQ(layer.has_attention, attention) << l;
    EXPECT_EQ(layer.qkv_defined, attention) << l;
    if (!attention) continue;
    const std::string name = c + "/probs/" + std::to_string(l);
    const double e_probs = max_abs_diff(layer.probs, golden.view(name));
    EXPECT_LE(e_probs, 1e-5) << name;
    // alpha_1 of each (b, h): the mean of the first column of its [T,T] matrix.
    Tensor alpha_ref = golden.view(c + "/alpha/" + std::to_string(l));
    const int64_t H = layer.probs.t.shape[1];
    for (int64_t b = 0; b < B; ++b)
      for (int64_t h = 0; h < H; ++h) {
        Tensor head = layer.probs.t.slice(0, b, 1).slice(1, h, 1).reshape({T, T});
        const double alpha = probe::importance_scores(head, 1)[0];
        const double e_alpha = std::fabs(alpha - test::element(alpha_ref, b * H + h));
        EXPECT_LE(e_alpha, 1e-5) << "layer " << l << " b " << b << " h " << h;
        worst_alpha = std::max(worst_alpha, e_alpha);
      }
    worst_probs = std::max(worst_probs, e_probs);
  }
  std::printf("[%s] logits NMSE %.3g, hidden_out rel. err. %.3g, attention probs max |diff| %.3g, "
              "alpha_1 max |diff| %.3g\n", c.c_str(), e_logits, worst_hidden, worst_probs, worst_alpha);
}

INSTANTIATE_TEST_SUITE_P(Cases, HfJambaVsTransformers, ::testing::Values("t13", "t1"));

// Layer streaming converts the same f32 weights one layer at a time: the logits are bit-identical.
TEST(HfJamba, StreamingMatchesResident) {
  io::SafetensorsFile golden(kFixture + "/jamba_golden.safetensors");
  Tensor ids = golden.view("t13/ids");
  const int64_t B = ids.shape[0], T = ids.shape[1];
  auto resident = hf::load_model(kFixture);
  hf::LoadOptions opts;
  opts.max_memory_bytes = int64_t(2) << 20;
  auto streamed = hf::load_model(kFixture, opts);
  Owned a(DType::f32, {B, T, 80}), b(DType::f32, {B, T, 80});
  resident->forward(ids, nullptr, a, hf::ForwardOptions{});
  // Twice: the second forward streams every layer again into the same buffer.
  for (int pass = 0; pass < 2; ++pass) {
    ops::fill(b, 0.0);
    streamed->forward(ids, nullptr, b, hf::ForwardOptions{});
    EXPECT_EQ(test::rel_error(b, a), 0.0) << "pass " << pass;
  }
}

// A copy of the fixture whose config.json has some fields replaced; the weights are linked.
class BrokenFixture {
 public:
  explicit BrokenFixture(const std::map<std::string, nlohmann::json>& changes) {
    dir_ = fs::temp_directory_path() / ("sinklab_jamba_" + std::to_string(::getpid()) + "_" + std::to_string(count_++));
    fs::create_directories(dir_);
    nlohmann::json cfg;
    std::ifstream(kFixture + "/config.json") >> cfg;
    for (const auto& [k, v] : changes) cfg[k] = v;
    std::ofstream(dir_ / "config.json") << cfg.dump(2);
    fs::create_symlink(kFixture + "/model.safetensors", dir_ / "model.safetensors");
  }
  ~BrokenFixture() { fs::remove_all(dir_); }
  std::string dir() const { return dir_.string(); }

 private:
  fs::path dir_;
  static inline int count_ = 0;
};

// The first line of the error a load throws ("" when it does not throw).
std::string load_error(const std::string& dir) {
  try {
    hf::load_model(dir);
  } catch (const Error& e) {
    return e.what();
  }
  return "";
}

TEST(HfJamba, BrokenCheckpointsFailWithOneLine) {
  struct Case {
    std::map<std::string, nlohmann::json> changes;
    std::string expect;  // a piece of the message
  };
  const std::vector<Case> cases = {
      {{{"attn_layer_offset", 2}}, "attn_layer_offset"},
      {{{"num_experts_per_tok", 5}}, "num_experts_per_tok"},
      {{{"num_experts", 5}}, "router.weight"},      // a router of the wrong width
      {{{"mamba_proj_bias", true}}, "in_proj.bias"},  // a missing tensor
      {{{"mamba_d_state", 7}}, "x_proj"},           // a wrong shape
      {{{"hidden_act", "tanhshrink"}}, "hidden_act"},
      {{{"mamba_inner_layernorms", false}}, "mamba_inner_layernorms"},
  };
  for (const Case& c : cases) {
    BrokenFixture fx(c.changes);
    const std::string msg = load_error(fx.dir());
    EXPECT_NE(msg.find(c.expect), std::string::npos) << "message: '" << msg << "'";
    EXPECT_EQ(msg.find('\n'), std::string::npos) << msg;
  }
}

}  // namespace
}  // namespace sinklab
