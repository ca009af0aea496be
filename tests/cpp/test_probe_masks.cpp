// The mask-relative sink probe (issue #17) on tiny trained-model shapes against an independent float64
// PyTorch reference (tests/python/goldens/gen_probe_masks.py): a sliding-window model's alpha_k^win /
// Sink_k^win (relative to each query's window start) and a prefix LM's per-position alpha / Sink, from
// every layer's attention, over a few random sequences. The model's dimensions come from
// tests/golden/model_variants.json (the same reference module), weights and expectations from
// tests/golden/probe_masks.safetensors.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "model/transformer.hpp"
#include "probe/model_probe.hpp"
#include "model_variant_cases.hpp"
#include "test_util.hpp"

namespace sinklab {
namespace {

using nlohmann::json;

model::ModelConfig tiny_config(const std::string& axis, const std::string& value) {
  model::ModelConfig cfg = test::config_of(test::golden_index().at("cases").at("default"));
  cfg.set_axis(axis, value);
  return cfg;
}

// Runs the probe over the case's inputs and returns its result.
probe::ProbeResult probe_case(const test::Golden& g, const std::string& name, const model::ModelConfig& cfg, int max_k,
                              std::vector<double>* eps) {
  model::Transformer model(cfg);
  for (const auto& spec : model.specs()) {
    std::string key = "w/" + spec.name + "/";
    for (size_t i = 0; i < spec.shape.size(); ++i) {
      if (i) key += 'x';
      key += std::to_string(spec.shape[i]);
    }
    ops::copy(model.param(spec.name), g.raw(key));
  }
  Tensor eps_t = g.raw(name + "/eps");
  eps->clear();
  for (int64_t e = 0; e < eps_t.numel(); ++e) eps->push_back(eps_t.ptr<double>()[e]);
  Tensor inputs = g.raw(name + "/inputs");  // i32 [B,T]
  probe::ModelProbe probe(cfg.n_layers, cfg.n_heads, inputs.shape[1], max_k, *eps,
                          probe::ProbeMask{cfg.attn_window, cfg.prefix_length});
  model.forward_observe(inputs, probe);
  return probe.result();
}

void expect_matches(const test::Golden& g, const std::string& name, const std::vector<double>& alpha,
                    const std::vector<double>& sink) {
  Tensor want_alpha = g.raw(name + "/alpha"), want_sink = g.raw(name + "/sink");
  ASSERT_EQ(alpha.size(), size_t(want_alpha.numel())) << name;
  ASSERT_EQ(sink.size(), size_t(want_sink.numel())) << name;
  double worst = 0;
  for (size_t i = 0; i < alpha.size(); ++i) worst = std::max(worst, std::fabs(alpha[i] - want_alpha.ptr<double>()[i]));
  EXPECT_LE(worst, 2e-6) << name << ": alpha vs the float64 reference (f32 model)";
  // Every per-sample score lies >= 1e-4 from each threshold (asserted by the generator): exact.
  for (size_t i = 0; i < sink.size(); ++i) EXPECT_NEAR(sink[i], want_sink.ptr<double>()[i], 1e-9) << name << " entry " << i;
}

TEST(ProbeMasks, WindowScoresMatchTheReference) {
  test::Golden g("probe_masks.safetensors");
  for (const std::string name : {"window4", "window3_k2"}) {
    const int w = int(g.param(name + "/window")), K = int(g.param(name + "/K"));
    std::vector<double> eps;
    probe::ProbeResult r = probe_case(g, name, tiny_config("attn-window", std::to_string(w)), K, &eps);
    EXPECT_TRUE(r.alpha_pos.empty());
    expect_matches(g, name, r.alpha_k_window, r.sink_k_window);
    // The absolute alpha_k is still measured beside it (and differs: the rows i < w-1 enter it).
    EXPECT_EQ(r.alpha_k.size(), r.alpha_k_window.size());
    EXPECT_NE(r.alpha_k, r.alpha_k_window);
  }
  // A window longer than the probe's sequences: no query has a full window, nothing is measured.
  model::ModelConfig cfg = tiny_config("attn-window", "8");
  probe::ModelProbe probe(cfg.n_layers, cfg.n_heads, 6, 2, probe::default_sink_eps(), probe::ProbeMask{8, 1});
  EXPECT_FALSE(probe.measures_window());
}

TEST(ProbeMasks, PrefixPerPositionScoresMatchTheReference) {
  test::Golden g("probe_masks.safetensors");
  const std::string name = "prefix3";
  const int p = int(g.param(name + "/prefix"));
  std::vector<double> eps;
  probe::ProbeResult r = probe_case(g, name, tiny_config("prefix-length", std::to_string(p)), 4, &eps);
  EXPECT_TRUE(r.alpha_k_window.empty());
  expect_matches(g, name, r.alpha_pos, r.sink_pos);
  EXPECT_EQ(r.alpha_k.size() * 11 / 4, r.alpha_pos.size());  // K = 4 absolute, T = 11 per position
}

}  // namespace
}  // namespace sinklab
