// sinklab's own checkpoints in the survey: probe::load_any_model runs a variant checkpoint through the
// trainable model (the same layers, bit for bit) and sends every other directory to the HF families.
#include <gtest/gtest.h>

#include <filesystem>
#include <string>
#include <unistd.h>

#include "core/error.hpp"
#include "model/transformer.hpp"
#include "probe/own_model.hpp"
#include "test_util.hpp"
#include "train/checkpoint.hpp"

namespace sinklab {
namespace {

namespace fs = std::filesystem;

// Copies of every layer's output hidden states.
struct HiddenCapture : LayerObserver {
  std::vector<std::vector<float>> layers;
  void on_layer(const LayerTaps& taps) override {
    const Tensor h = taps.hidden_out;
    layers.emplace_back(h.ptr<float>(), h.ptr<float>() + h.numel());
  }
};

TEST(OwnModel, VariantCheckpointRunsThroughTheTrainableModel) {
  model::ModelConfig cfg;
  cfg.vocab_size = 50;
  cfg.d_model = 24;
  cfg.n_layers = 2;
  cfg.n_heads = 4;
  cfg.ffn_hidden = 40;
  cfg.context = 16;
  cfg.set_axis("attn-sim", "sigmoid");
  cfg.set_axis("attn-norm", "one");
  cfg.set_axis("pos-emb", "sinusoidal");
  model::Transformer trained(cfg);
  trained.init_weights(11);
  const std::string dir = (fs::temp_directory_path() / ("sinklab_test_own_" + std::to_string(::getpid()))).string();
  fs::remove_all(dir);
  fs::create_directories(dir);
  std::vector<io::NamedTensor> weights;
  for (const auto& spec : trained.specs()) weights.push_back({spec.name, trained.param(spec.name)});
  train::write_model(dir, weights, cfg.hf_config_json());

  ASSERT_TRUE(probe::is_own_checkpoint(dir));
  std::unique_ptr<hf::HfModel> loaded = probe::load_any_model(dir);
  EXPECT_EQ(loaded->info().model_type, "sinklab");
  EXPECT_EQ(loaded->info().attention_layers.size(), 2u);

  test::Owned ids(DType::i32, {2, 9});
  for (int64_t i = 0; i < ids.t.numel(); ++i) ids.data<int32_t>()[i] = int32_t((i * 13 + 5) % 50);
  HiddenCapture theirs, ours;
  trained.forward_observe(ids.t, theirs);
  loaded->forward(ids.t, &ours, Tensor{}, {});
  ASSERT_EQ(ours.layers.size(), 2u);
  EXPECT_EQ(ours.layers, theirs.layers);
  EXPECT_THROW(loaded->forward(ids.t, &ours, ids.t, {}), Error);  // no logits from own checkpoints

  // The HF Llama loader refuses the variant with one line naming the axis.
  try {
    hf::load_model(dir);
    ADD_FAILURE() << "hf::load_model read a sigmoid-attention checkpoint as a Llama";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("unsupported sinklab variant"), std::string::npos) << e.what();
  }
  fs::remove(dir + "/model.safetensors");
  EXPECT_THROW(probe::load_any_model(dir), Error);
  fs::remove_all(dir);
}

}  // namespace
}  // namespace sinklab
