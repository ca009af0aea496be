// The whole transformer against Hugging Face's LlamaForCausalLM (float64, eager attention): the same
// initial weights and batches give the same gradients at step 1 and the same losses for 20 AdamW steps
// (golden file from tests/python/goldens/gen_model.py).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "model/transformer.hpp"
#include "test_util.hpp"

namespace sinklab {
namespace {

using model::ModelConfig;
using model::Transformer;

class ModelVsHf : public ::testing::TestWithParam<std::string> {};

ModelConfig config_of(const test::Golden& g, const std::string& c) {
  ModelConfig cfg;
  cfg.vocab_size = int(g.param(c + "/vocab"));
  cfg.d_model = int(g.param(c + "/d"));
  cfg.n_layers = int(g.param(c + "/layers"));
  cfg.n_heads = int(g.param(c + "/heads"));
  cfg.n_kv_heads = int(g.param(c + "/kv_heads"));
  cfg.ffn_hidden = int(g.param(c + "/ffn"));
  cfg.context = int(g.param(c + "/context"));
  cfg.norm_eps = g.param(c + "/norm_eps");
  cfg.rope_theta = g.param(c + "/rope_theta");
  return cfg;
}

TEST_P(ModelVsHf, TwentyAdamWStepsMatchTransformers) {
  const std::string c = GetParam();
  test::Golden g("model.safetensors");
  ModelConfig cfg = config_of(g, c);
  Transformer model(cfg);
  for (const auto& spec : model.specs()) ops::copy(model.param(spec.name), g.raw(c + "/init/" + spec.name));

  const int steps = int(g.param(c + "/steps"));
  const int64_t rows = int64_t(g.param(c + "/rows")), C = cfg.context;
  Tensor batches = g.raw(c + "/batches");  // i32 [steps, rows, C+1]
  Tensor ref_losses = g.raw(c + "/losses");
  test::Owned inputs(DType::i32, {rows, C}), targets(DType::i32, {rows, C});
  test::Owned m(DType::f32, {model.flat_params().numel()}), v(DType::f32, {model.flat_params().numel()});
  ops::AdamWStep adam;
  adam.lr = g.param(c + "/lr");
  adam.beta1 = g.param(c + "/beta1");
  adam.beta2 = g.param(c + "/beta2");
  adam.eps = g.param(c + "/eps");
  const double weight_decay = g.param(c + "/weight_decay");

  double worst_loss = 0, worst_grad = 0;
  for (int step = 0; step < steps; ++step) {
    const int32_t* b = batches.ptr<int32_t>() + int64_t(step) * rows * (C + 1);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t t = 0; t < C; ++t) {
        inputs.data<int32_t>()[r * C + t] = b[r * (C + 1) + t];
        targets.data<int32_t>()[r * C + t] = b[r * (C + 1) + t + 1];
      }
    model.zero_grads();
    int64_t counted = 0;
    double loss_sum = model.forward_backward(inputs, targets, 1.0 / double(rows * C), &counted);
    ASSERT_EQ(counted, rows * C);
    double loss = loss_sum / double(counted);
    double ref = test::element(ref_losses, step);
    worst_loss = std::max(worst_loss, std::fabs(loss - ref) / std::fabs(ref));
    EXPECT_LE(std::fabs(loss - ref) / std::fabs(ref), 1e-4) << "step " << step << ": " << loss << " vs " << ref;
    if (step == 0) {
      for (const auto& spec : model.specs()) {
        double err = test::rel_error(model.grad(spec.name), g.raw(c + "/grad0/" + spec.name));
        worst_grad = std::max(worst_grad, err);
        EXPECT_LE(err, 1e-5) << "gradient of " << spec.name;
      }
    }
    Tensor grads[] = {model.flat_grads()};
    double norm = ops::clip_grad_norm(grads, g.param(c + "/clip"));
    EXPECT_LE(std::fabs(norm - test::element(g.raw(c + "/grad_norms"), step)) / norm, 1e-4) << "step " << step;
    adam.step = step + 1;
    for (const auto& spec : model.specs()) {
      Tensor p = model.param(spec.name);
      auto slice = [&](const test::Owned& buf) { return buf.t.slice(0, spec.offset, spec.numel).reshape({spec.numel}); };
      ops::AdamWStep s = adam;
      s.weight_decay = spec.decay ? weight_decay : 0.0;
      ops::adamw_update(p.reshape({spec.numel}), model.grad(spec.name).reshape({spec.numel}), slice(m), slice(v), s);
    }
  }
  double worst_weight = 0;
  for (const auto& spec : model.specs()) {
    double err = test::rel_error(model.param(spec.name), g.raw(c + "/final/" + spec.name));
    worst_weight = std::max(worst_weight, err);
    // Looser than the loss: AdamW divides by sqrt(v), so a weight whose gradients are near zero turns
    // f32-vs-f64 rounding of those gradients into an O(lr) step difference (measured worst: 9e-5).
    EXPECT_LE(err, 1e-3) << "weights after " << steps << " steps: " << spec.name;
  }
  std::printf("[%s] worst rel. diff vs transformers: loss %.2e (20 steps), step-1 gradient %.2e, final weights %.2e\n",
              c.c_str(), worst_loss, worst_grad, worst_weight);
}

INSTANTIATE_TEST_SUITE_P(Cases, ModelVsHf, ::testing::Values("mha", "gqa"));

TEST(Model, RejectsBadConfig) {
  ModelConfig cfg;
  cfg.vocab_size = 10;
  cfg.d_model = 30;
  cfg.n_layers = 1;
  cfg.n_heads = 4;  // does not divide 30
  cfg.ffn_hidden = 8;
  cfg.context = 4;
  EXPECT_THROW(Transformer{cfg}, Error);
}

}  // namespace
}  // namespace sinklab

namespace sinklab {
namespace {

// A model large enough for the sample statistics of its starting values.
model::ModelConfig init_statistics_config() {
  model::ModelConfig cfg;
  cfg.vocab_size = 512;
  cfg.d_model = 96;
  cfg.n_layers = 3;
  cfg.n_heads = 4;
  cfg.ffn_hidden = 256;
  cfg.context = 8;
  return cfg;
}

// sqrt(mean(x^2)): the std of a zero-mean tensor's values.
double sample_std(const Tensor& t) {
  double s = 0;
  for (int64_t i = 0; i < t.numel(); ++i) s += test::element(t, i) * test::element(t, i);
  return std::sqrt(s / double(t.numel()));
}

// The initialisation scheme of the paper's released code, checked on the sample statistics.
TEST(Model, InitialisationFollowsTheReferenceCode) {
  model::Transformer m(init_statistics_config());
  m.init_weights(42);
  const double fan_in_d = std::sqrt(2.0 / (5.0 * 96)), mlp_out = 1.0 / (std::sqrt(256.0) * 3);
  EXPECT_NEAR(sample_std(m.param("model.embed_tokens.weight")), fan_in_d, 0.02 * fan_in_d);
  EXPECT_NEAR(sample_std(m.param("model.layers.1.self_attn.q_proj.weight")), fan_in_d, 0.03 * fan_in_d);
  EXPECT_NEAR(sample_std(m.param("model.layers.1.self_attn.o_proj.weight")), fan_in_d, 0.03 * fan_in_d);
  EXPECT_NEAR(sample_std(m.param("model.layers.2.mlp.gate_proj.weight")), fan_in_d, 0.03 * fan_in_d);
  EXPECT_NEAR(sample_std(m.param("model.layers.2.mlp.down_proj.weight")), mlp_out, 0.03 * mlp_out);
  EXPECT_NEAR(sample_std(m.param("lm_head.weight")), fan_in_d, 0.02 * fan_in_d);
  EXPECT_EQ(test::element(m.param("model.layers.0.input_layernorm.weight"), 5), 1.0);
  EXPECT_EQ(test::element(m.param("model.norm.weight"), 0), 1.0);
}

// matrix-init torch-linear: every matrix but the embeddings uniform(+-1/sqrt(fan_in)) as nn.Linear (Guo et
// al.'s BBM models), down_proj and lm_head included; embeddings and norms as before.
TEST(Model, TorchLinearInitIsUniformOverFanIn) {
  model::ModelConfig cfg = init_statistics_config();
  cfg.set_axis("norm-type", "layer");
  cfg.set_axis("matrix-init", "torch-linear");
  cfg.set_axis("embed-init-std", "1");
  model::Transformer m(cfg);
  m.init_weights(42);
  auto check_uniform = [&](const char* name, int64_t fan_in) {
    const Tensor t = m.param(name);
    const double bound = 1.0 / std::sqrt(double(fan_in));
    double largest = 0;
    for (int64_t i = 0; i < t.numel(); ++i) largest = std::max(largest, std::fabs(test::element(t, i)));
    EXPECT_LE(largest, bound) << name;
    EXPECT_GT(largest, 0.99 * bound) << name;  // fills the interval, not a narrower law
    // uniform(+-b) has std b / sqrt(3)
    EXPECT_NEAR(sample_std(t), bound / std::sqrt(3.0), 0.03 * bound / std::sqrt(3.0)) << name;
  };
  check_uniform("model.layers.1.self_attn.q_proj.weight", 96);
  check_uniform("model.layers.1.self_attn.o_proj.weight", 96);
  check_uniform("model.layers.2.mlp.up_proj.weight", 96);
  check_uniform("model.layers.2.mlp.down_proj.weight", 256);
  check_uniform("lm_head.weight", 96);
  EXPECT_NEAR(sample_std(m.param("model.embed_tokens.weight")), 1.0, 0.02);
  EXPECT_EQ(test::element(m.param("model.layers.0.input_layernorm.weight"), 5), 1.0);
  EXPECT_EQ(test::element(m.param("model.layers.0.input_layernorm.bias"), 5), 0.0);
}

}  // namespace
}  // namespace sinklab
