// The Hugging Face families (src/hf/) against transformers itself: every fixture under
// tests/fixtures/hf/<name>/ is a tiny random model saved by transformers plus golden.safetensors with
// what transformers (eager attention, float64) computed from it (tests/python/goldens/gen_hf_families.py).
//
// Bounds: logits NMSE = sum (a - ref)^2 / sum ref^2 < 1e-6; attention probabilities (from the taps, via
// ops::attention_probs with the layer's AttentionSpec) within 1e-5 absolute; alpha_1 per (layer, head)
// from sinklab's probabilities vs from transformers' within 1e-5; hidden states within 1e-5 of their scale.
// Also: layer streaming gives bit-identical results, sinklab's own checkpoints load as Llama models, and
// each kind of broken model directory fails with one line naming the file.

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "hf/hf_model.hpp"
#include "layer_capture.hpp"
#include "model/transformer.hpp"
#include "probe/model_probe.hpp"
#include "probe/sink_metrics.hpp"
#include "test_util.hpp"
#include "train/checkpoint.hpp"

namespace sinklab {
namespace {

namespace fs = std::filesystem;
using test::max_abs_diff;
using test::nmse;
using test::Owned;

const std::string kFixtures = std::string(SINKLAB_SOURCE_DIR) + "/tests/fixtures/hf";

std::vector<std::string> fixture_names() {
  std::vector<std::string> names;
  for (const auto& e : fs::directory_iterator(kFixtures))
    if (fs::exists(e.path() / "golden.safetensors")) names.push_back(e.path().filename().string());
  std::sort(names.begin(), names.end());
  return names;
}

using Capture = test::LayerCapture;

// alpha_1 (0-based position 0) of every (layer, head), averaged over the batch.
std::vector<double> alpha_first(const std::vector<Tensor>& probs) {
  const int L = int(probs.size()), H = int(probs[0].shape[1]);
  probe::SinkAccumulator acc(L, H, 1);
  for (int l = 0; l < L; ++l) acc.add(l, probs[size_t(l)]);
  return acc.mean_alpha();
}

class HfFamily : public ::testing::TestWithParam<std::string> {};

TEST_P(HfFamily, MatchesTransformers) {
  const std::string dir = kFixtures + "/" + GetParam();
  std::unique_ptr<hf::HfModel> model = hf::load_model(dir);
  const hf::HfModelInfo& info = model->info();
  io::SafetensorsFile golden(dir + "/golden.safetensors");
  const std::vector<std::string> cases = test::split_commas(golden.metadata().at("cases"));
  ASSERT_GE(cases.size(), 2u);
  EXPECT_EQ(info.dir, dir);
  EXPECT_EQ(int(info.attention_layers.size()), info.n_layers);
  EXPECT_GT(info.weight_bytes, 0);
  for (const std::string& c : cases) {
    SCOPED_TRACE(GetParam() + " case " + c);
    Tensor ids = golden.view(c + "/ids");
    const int64_t B = ids.shape[0], T = ids.shape[1];
    hf::ForwardOptions opt;
    if (c.rfind("replace", 0) == 0) opt.replace_first_position_with = std::stoll(golden.metadata().at(c + "/position"));
    if (c.rfind("swap", 0) == 0) opt.swap_first_position_with = std::stoll(golden.metadata().at(c + "/position"));
    Owned logits(DType::f32, {B, T, int64_t(info.vocab_size)});
    Capture cap;
    model->forward(ids, &cap, logits, opt);
    ASSERT_EQ(int(cap.layers.size()), info.n_layers);

    const double logit_nmse = nmse(logits, golden.view(c + "/logits"));
    EXPECT_LT(logit_nmse, 1e-6);
    std::vector<Tensor> ours, theirs;
    double worst_probs = 0.0;
    for (int l = 0; l < info.n_layers; ++l) {
      const std::string tag = "/" + std::to_string(l);
      Capture::Layer& layer = cap.layers[size_t(l)];
      EXPECT_EQ(layer.lead_positions, 0);
      EXPECT_EQ(layer.q.t.shape[2], info.n_heads);
      EXPECT_EQ(layer.k.t.shape[2], info.n_kv_heads);
      Tensor ref = golden.view(c + "/probs" + tag);
      EXPECT_LE(max_abs_diff(layer.probs, ref), 1e-5) << "layer " << l;
      ours.push_back(layer.probs);
      theirs.push_back(ref);
      if (golden.contains(c + "/hidden_in" + tag)) {
        EXPECT_LE(test::rel_error(layer.hidden_in, golden.view(c + "/hidden_in" + tag)), 1e-5) << "layer " << l;
        EXPECT_LE(test::rel_error(layer.hidden_out, golden.view(c + "/hidden_out" + tag)), 1e-5) << "layer " << l;
      }
      if (golden.contains(c + "/hidden_pre_norm" + tag)) {
        ASSERT_TRUE(layer.hidden_pre_norm.t.defined()) << "post-LN layers report hidden_pre_norm";
        EXPECT_LE(test::rel_error(layer.hidden_pre_norm, golden.view(c + "/hidden_pre_norm" + tag)), 1e-5);
      } else if (golden.contains(c + "/hidden_in" + tag)) {
        EXPECT_FALSE(layer.hidden_pre_norm.t.defined()) << "pre-norm layers leave hidden_pre_norm undefined";
      }
      worst_probs = std::max(worst_probs, max_abs_diff(layer.probs, ref));
    }
    const std::vector<double> a = alpha_first(ours), b = alpha_first(theirs);
    double worst_alpha = 0.0;
    for (size_t i = 0; i < a.size(); ++i) {
      EXPECT_NEAR(a[i], b[i], 1e-5) << "alpha_1 of (layer, head) " << i;
      worst_alpha = std::max(worst_alpha, std::fabs(a[i] - b[i]));
    }
    std::printf("  %-22s %-10s logits NMSE %.2e  max |probs diff| %.2e  max |alpha_1 diff| %.2e\n",
                GetParam().c_str(), c.c_str(), logit_nmse, worst_probs, worst_alpha);
    // transformers' hidden_states[0] is the embedding output: what the first layer receives.
    if (golden.contains(c + "/hidden_states/0")) {
      EXPECT_LE(test::rel_error(cap.layers[0].hidden_in, golden.view(c + "/hidden_states/0")), 1e-5);
    }
  }
}

// The probe the survey runs (ModelProbe) consumes the taps directly: its alpha equals the one from
// transformers' probabilities, and its massive-activation ratio is the one of the last layer's output
// before the final norm.
TEST_P(HfFamily, ModelProbeOnTaps) {
  const std::string dir = kFixtures + "/" + GetParam();
  std::unique_ptr<hf::HfModel> model = hf::load_model(dir);
  const hf::HfModelInfo& info = model->info();
  io::SafetensorsFile golden(dir + "/golden.safetensors");
  Tensor ids = golden.view("t13/ids");
  const int64_t B = ids.shape[0], T = ids.shape[1];
  probe::ModelProbe probe(info.n_layers, info.n_heads, T, 2);
  hf::ForwardOptions opt;
  opt.want_logits = false;
  model->forward(ids, &probe, Tensor{}, opt);
  const probe::ProbeResult r = probe.result();
  std::vector<Tensor> theirs;
  for (int l = 0; l < info.n_layers; ++l) theirs.push_back(golden.view("t13/probs/" + std::to_string(l)));
  const std::vector<double> ref = alpha_first(theirs);
  for (size_t i = 0; i < ref.size(); ++i) EXPECT_NEAR(r.alpha[i], ref[i], 1e-5) << "alpha_1 of (layer, head) " << i;
  const int last = info.n_layers - 1;
  Tensor h = golden.view("t13/hidden_out/" + std::to_string(last));
  double expect = 0.0;
  for (int64_t b = 0; b < B; ++b) expect += probe::massive_ratio(h.slice(0, b, 1).reshape({T, h.shape[2]}));
  EXPECT_NEAR(r.massive_ratio[size_t(last)], expect / double(B), 1e-5 * std::max(1.0, expect / double(B)));
}

// Layer streaming (only one layer's f32 weights resident) computes exactly what the unbounded load does.
TEST_P(HfFamily, StreamingIsBitIdentical) {
  const std::string dir = kFixtures + "/" + GetParam();
  io::SafetensorsFile golden(dir + "/golden.safetensors");
  Tensor ids = golden.view("t13/ids");
  std::vector<Owned> logits;
  std::vector<Capture> caps(2);
  for (int64_t max_memory : {int64_t(0), int64_t(2) << 20}) {
    hf::LoadOptions lo;
    lo.max_memory_bytes = max_memory;
    std::unique_ptr<hf::HfModel> model = hf::load_model(dir, lo);
    logits.emplace_back(DType::f32, std::vector<int64_t>{ids.shape[0], ids.shape[1], model->info().vocab_size});
    // Twice: the second forward re-streams every layer into the same buffer.
    model->forward(ids, nullptr, logits.back(), {});
    model->forward(ids, &caps[logits.size() - 1], logits.back(), {});
  }
  EXPECT_EQ(test::rel_error(logits[1], logits[0]), 0.0);
  ASSERT_EQ(caps[0].layers.size(), caps[1].layers.size());
  for (size_t l = 0; l < caps[0].layers.size(); ++l) {
    EXPECT_EQ(test::rel_error(caps[1].layers[l].hidden_out, caps[0].layers[l].hidden_out), 0.0);
    EXPECT_EQ(test::rel_error(caps[1].layers[l].probs, caps[0].layers[l].probs), 0.0);
  }
}

INSTANTIATE_TEST_SUITE_P(Fixtures, HfFamily, ::testing::ValuesIn(fixture_names()),
                         [](const ::testing::TestParamInfo<std::string>& p) { return p.param; });

TEST(HfFamilies, EveryFamilyAndSwitchHasAFixture) {
  const std::vector<std::string> names = fixture_names();
  for (const char* n : {"gpt2", "gpt2_layer_scaled", "neox_rot025_parallel", "neox_rot1_sequential", "opt_pre",
                        "opt_post_project", "opt_pre_project", "llama_gqa", "llama3_rope_scaling",
                        "llama_bf16_tied_bias", "mistral_sliding", "llama_sharded_f16", "qwen2_gqa_tied", "qwen2_untied",
                        "gemma3_text", "gemma3_hub_config"})
    EXPECT_NE(std::find(names.begin(), names.end(), n), names.end()) << "fixture " << n << " missing";
}

// ---- forward arguments ------------------------------------------------------------------------------

TEST(HfFamilies, ForwardArgumentErrors) {
  std::unique_ptr<hf::HfModel> gpt2 = hf::load_model(kFixtures + "/gpt2");
  std::unique_ptr<hf::HfModel> llama = hf::load_model(kFixtures + "/llama_gqa");
  Owned ids(DType::i32, {1, 4});
  auto fails = [](const std::function<void()>& fn, const std::string& needle) {
    try {
      fn();
      ADD_FAILURE() << "no error, expected one mentioning '" << needle << "'";
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  hf::ForwardOptions replace;
  replace.replace_first_position_with = 3;
  fails([&] { llama->forward(ids, nullptr, Tensor{}, replace); }, "need learned positions");
  hf::ForwardOptions swap_far;
  swap_far.swap_first_position_with = 4;
  fails([&] { gpt2->forward(ids, nullptr, Tensor{}, swap_far); }, "p_1 <-> p_t needs t < T = 4");
  Owned long_ids(DType::i32, {1, 17});  // gpt2 fixture: 16 learned positions
  fails([&] { gpt2->forward(long_ids, nullptr, Tensor{}, {}); }, "exceed the model's 16 learned positions");
  ids.data<int32_t>()[2] = 96;  // vocabulary 96
  fails([&] { gpt2->forward(ids, nullptr, Tensor{}, {}); }, "token id 96 at position 2 is outside the vocabulary");
  ids.data<int32_t>()[2] = 0;
  Owned bad_logits(DType::f32, {1, 4, 95});
  fails([&] { gpt2->forward(ids, nullptr, bad_logits, {}); }, "logits must be contiguous host f32 [1,4,96]");
}

// ---- sinklab's own checkpoints -------------------------------------------------------------------------

struct TempDir {
  std::string path;
  explicit TempDir(const std::string& name) {
    path = (fs::temp_directory_path() / ("sinklab_test_hf_" + name + "_" + std::to_string(::getpid()))).string();
    fs::remove_all(path);
    fs::create_directories(path);
  }
  ~TempDir() { fs::remove_all(path); }
};

// Records the taps of the trainable transformer.
TEST(HfFamilies, SinklabCheckpointLoadsAsLlama) {
  model::ModelConfig cfg;
  cfg.vocab_size = 50;
  cfg.d_model = 32;
  cfg.n_layers = 2;
  cfg.n_heads = 4;
  cfg.n_kv_heads = 2;
  cfg.ffn_hidden = 40;
  cfg.context = 11;
  model::Transformer trained(cfg, Device::cpu());
  trained.init_weights(7);
  TempDir tmp("own");
  std::vector<io::NamedTensor> weights;
  for (const auto& spec : trained.specs()) weights.push_back({spec.name, trained.param(spec.name)});
  train::write_model(tmp.path, weights, cfg.hf_config_json());

  Owned ids(DType::i32, {3, 11});
  for (int64_t i = 0; i < ids.t.numel(); ++i) ids.data<int32_t>()[i] = int32_t((i * 17 + 3) % 50);
  Capture theirs, ours;
  trained.forward_observe(ids, theirs);
  std::unique_ptr<hf::HfModel> loaded = hf::load_model(tmp.path);
  EXPECT_EQ(loaded->info().model_type, "llama");
  EXPECT_EQ(loaded->info().n_kv_heads, 2);
  loaded->forward(ids, &ours, Tensor{}, {});
  ASSERT_EQ(ours.layers.size(), theirs.layers.size());
  for (size_t l = 0; l < ours.layers.size(); ++l) {
    EXPECT_LE(test::rel_error(ours.layers[l].hidden_out, theirs.layers[l].hidden_out), 1e-6);
    EXPECT_LE(max_abs_diff(ours.layers[l].probs, theirs.layers[l].probs), 1e-6);
  }

  // Another attention variant is a switch the HF loader does not have yet.
  std::string text;
  {
    std::ifstream in(tmp.path + "/config.json");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = text.find("\"sinklab\": {}");
  ASSERT_NE(at, std::string::npos);
  text.replace(at, 13, "\"sinklab\": {\"attn-sim\": \"sigmoid\"}");
  std::ofstream(tmp.path + "/config.json") << text;
  try {
    hf::load_model(tmp.path);
    ADD_FAILURE() << "a sigmoid-attention checkpoint loaded";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(tmp.path + "/config.json: unsupported sinklab variant attn-sim = \"sigmoid\""),
              std::string::npos)
        << e.what();
  }
}

// ---- broken model directories: one line naming the file ------------------------------------------------

// A copy of a fixture directory to break.
std::string copy_fixture(const TempDir& tmp, const std::string& name) {
  const std::string dst = tmp.path + "/" + name;
  fs::copy(kFixtures + "/" + name, dst, fs::copy_options::recursive);
  return dst;
}

// Rewrites a safetensors file through `edit` (which may drop or replace tensors).
void rewrite(const std::string& path,
             const std::function<void(std::vector<io::NamedTensor>&, std::vector<Owned>&)>& edit) {
  std::vector<Owned> keep;
  std::vector<io::NamedTensor> tensors;
  {
    io::SafetensorsFile f(path);
    for (const std::string& n : f.names()) {
      keep.push_back(Owned::copy_of(f.view(n), f.view(n).dtype));
      tensors.push_back({n, keep.back().t});
    }
  }
  edit(tensors, keep);
  io::write_safetensors(path, tensors);
}

void expect_load_error(const std::string& dir, const std::vector<std::string>& needles) {
  try {
    hf::load_model(dir);
    ADD_FAILURE() << dir << " loaded";
  } catch (const Error& e) {
    const std::string what = e.what();
    EXPECT_EQ(what.find('\n'), std::string::npos) << "not one line: " << what;
    for (const std::string& n : needles) EXPECT_NE(what.find(n), std::string::npos) << "'" << n << "' not in: " << what;
  }
}

TEST(HfFamilies, TruncatedSafetensors) {
  TempDir tmp("truncated");
  const std::string dir = copy_fixture(tmp, "gpt2");
  const std::string file = dir + "/model.safetensors";
  fs::resize_file(file, fs::file_size(file) - 100);
  expect_load_error(dir, {file + ": tensor '", "(truncated file?)"});
  fs::resize_file(file, 5);
  expect_load_error(dir, {file + ": not a safetensors file (5 bytes)"});
}

TEST(HfFamilies, UnknownModelType) {
  TempDir tmp("unknown");
  const std::string dir = copy_fixture(tmp, "gpt2");
  std::ofstream(dir + "/config.json") << R"({"model_type": "bert", "vocab_size": 96})";
  expect_load_error(dir, {dir + "/config.json: unknown model_type 'bert' (sinklab reads gpt2, gpt_neox, opt, llama"});
  std::ofstream(dir + "/config.json") << R"({"vocab_size": 96})";
  expect_load_error(dir, {dir + "/config.json: missing field 'model_type'"});
  std::ofstream(dir + "/config.json") << R"({"model_type": )";
  expect_load_error(dir, {dir + "/config.json: malformed JSON"});
  fs::remove(dir + "/config.json");
  expect_load_error(dir, {dir + "/config.json: cannot be read"});
  expect_load_error(dir + "/nope", {dir + "/nope: not a model directory"});
}

// Found by tests/fuzz/fuzz_hf_config: an integer field written as a float beyond int64 (4e104) was
// converted before it was checked (undefined behaviour); beyond int64 as an integer it wrapped around.
TEST(HfFamilies, IntegerFieldsBeyondInt64AreRefused) {
  TempDir tmp("huge_int");
  const std::string dir = copy_fixture(tmp, "llama_gqa");
  const std::string config = dir + "/config.json";
  std::ifstream in(config);
  nlohmann::json j = nlohmann::json::parse(in);
  in.close();
  for (const char* value : {"4.0333e104", "18446744073709551615", "1e19", "-9.3e18"}) {
    j["intermediate_size"] = nlohmann::json::parse(value);
    std::ofstream(config) << j.dump();
    expect_load_error(dir, {config + ": field 'intermediate_size' must be an integer, got "});
  }
}

TEST(HfFamilies, MissingTensor) {
  TempDir tmp("missing");
  const std::string dir = copy_fixture(tmp, "gpt2");
  rewrite(dir + "/model.safetensors", [](std::vector<io::NamedTensor>& ts, std::vector<Owned>&) {
    ts.erase(std::remove_if(ts.begin(), ts.end(), [](const auto& t) { return t.name == "transformer.h.1.mlp.c_fc.bias"; }),
             ts.end());
  });
  expect_load_error(dir, {dir + "/model.safetensors: missing tensor 'transformer.h.1.mlp.c_fc.bias'"});

  // Sharded: a tensor the index lists is absent from its shard, and a shard file is missing.
  const std::string sharded = copy_fixture(tmp, "llama_sharded_f16");
  std::string shard;
  {
    std::ifstream in(sharded + "/model.safetensors.index.json");
    std::string text((std::istreambuf_iterator<char>(in)), {});
    const std::string key = "\"model.norm.weight\": \"";
    const size_t at = text.find(key);
    ASSERT_NE(at, std::string::npos);
    shard = text.substr(at + key.size(), text.find('"', at + key.size()) - at - key.size());
  }
  rewrite(sharded + "/" + shard, [](std::vector<io::NamedTensor>& ts, std::vector<Owned>&) {
    ts.erase(std::remove_if(ts.begin(), ts.end(), [](const auto& t) { return t.name == "model.norm.weight"; }), ts.end());
  });
  expect_load_error(sharded, {sharded + "/" + shard + ": missing tensor 'model.norm.weight'"});
  fs::remove(sharded + "/" + shard);
  expect_load_error(sharded, {sharded + "/model.safetensors.index.json: shard " + sharded + "/" + shard});

  // A shard name longer than the file system allows (tests/fuzz/fuzz_safetensors_index's regression case
  // shard_name_too_long_for_the_file_system) is a missing shard, not an uncaught filesystem_error.
  const std::string index = sharded + "/model.safetensors.index.json";
  const std::string long_name(300, 'x');
  std::ofstream(index) << R"({"weight_map": {"model.norm.weight": ")" << long_name << R"("}})";
  expect_load_error(sharded, {index + ": shard " + sharded + "/" + long_name + " (of tensor 'model.norm.weight') "
                              "does not exist: File name too long"});
}

TEST(HfFamilies, WrongShape) {
  TempDir tmp("shape");
  const std::string dir = copy_fixture(tmp, "llama_gqa");
  rewrite(dir + "/model.safetensors", [](std::vector<io::NamedTensor>& ts, std::vector<Owned>& keep) {
    for (auto& t : ts)
      if (t.name == "model.layers.0.self_attn.k_proj.weight") {  // [16, 48] -> [48, 16]
        keep.push_back(Owned(DType::f32, {48, 16}));
        t.tensor = keep.back().t;
      }
  });
  expect_load_error(dir, {dir + "/model.safetensors: tensor 'model.layers.0.self_attn.k_proj.weight' has shape "
                                "[48,16], expected [16,48]"});
}

TEST(HfFamilies, UnsupportedSwitches) {
  TempDir tmp("switch");
  const std::string dir = copy_fixture(tmp, "llama3_rope_scaling");
  std::string text;
  {
    std::ifstream in(dir + "/config.json");
    text.assign(std::istreambuf_iterator<char>(in), {});
  }
  const size_t at = text.find("\"llama3\"");
  ASSERT_NE(at, std::string::npos);
  std::ofstream(dir + "/config.json") << text.substr(0, at) + "\"yarn\"" + text.substr(at + 8);
  expect_load_error(dir, {dir + "/config.json: unsupported rope type 'yarn'"});
}

// Gemma 3's and Qwen2's configuration switches that sinklab does not implement: one line naming the key.
TEST(HfFamilies, Gemma3AndQwen2UnsupportedSwitches) {
  TempDir tmp("gemma_qwen_switch");
  int copies = 0;
  auto edit_config = [&](const std::string& fixture, const nlohmann::json& changes) {
    const std::string dir = tmp.path + "/" + fixture + "_" + std::to_string(copies++);
    fs::copy(kFixtures + "/" + fixture, dir, fs::copy_options::recursive);
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
    for (const auto& [key, value] : changes.items()) cfg[key] = value;
    std::ofstream(dir + "/config.json") << cfg.dump();
    return dir;
  };
  std::string dir = edit_config("gemma3_hub_config", {{"final_logit_softcapping", 30.0}});
  expect_load_error(dir, {dir + "/config.json: unsupported final_logit_softcapping 30 (soft-capping"});
  dir = edit_config("gemma3_hub_config", {{"attn_logit_softcapping", 50.0}});
  expect_load_error(dir, {dir + "/config.json: unsupported attn_logit_softcapping 50"});
  dir = edit_config("gemma3_hub_config", {{"use_bidirectional_attention", true}});
  expect_load_error(dir, {dir + "/config.json: unsupported use_bidirectional_attention true"});
  // Gemma 3 4B+'s global layers scale rope linearly (rope_scaling {"rope_type": "linear", "factor": 8}).
  dir = edit_config("gemma3_hub_config", {{"rope_scaling", {{"rope_type", "linear"}, {"factor", 8.0}}}});
  expect_load_error(dir, {dir + "/config.json: unsupported rope type 'linear'"});
  dir = edit_config("gemma3_text", {{"layer_types", {"sliding_attention", "chunked_attention", "full_attention",
                                                     "sliding_attention"}}});
  expect_load_error(dir, {dir + "/config.json: unsupported layer_types[1] \"chunked_attention\""});
  dir = edit_config("gemma3_text", {{"rope_parameters", {{"full_attention", {{"rope_type", "yarn"}, {"factor", 4.0}}},
                                                         {"sliding_attention", {{"rope_type", "default"}}}}}});
  expect_load_error(dir, {dir + "/config.json: unsupported rope type 'yarn'"});
  dir = edit_config("qwen2_gqa_tied", {{"use_sliding_window", true}, {"sliding_window", 4}});
  expect_load_error(dir, {dir + "/config.json: unsupported use_sliding_window true"});
  dir = edit_config("qwen2_gqa_tied", {{"layer_types", {"full_attention", "sliding_attention"}}});
  expect_load_error(dir, {dir + "/config.json: unsupported layer_types[1] \"sliding_attention\""});
}

// Gemma 3's local layers: HF masks key j for query i unless i - window < j <= i (masking_utils'
// sliding_window_overlay: kv_idx > q_idx - sliding_window, on top of causal), which is AttnMask::sliding_window
// with window = config sliding_window (ops.hpp: i - window < j' <= i), not window - 1 or window + 1. The
// gemma3 fixtures (window 4 and 5 < T = 13) match transformers' probabilities above; here the spec itself.
TEST(HfFamilies, Gemma3SlidingWindowSpec) {
  std::unique_ptr<hf::HfModel> model = hf::load_model(kFixtures + "/gemma3_text");  // layer_types s, s, f, s
  io::SafetensorsFile golden(kFixtures + "/gemma3_text/golden.safetensors");
  Capture cap;
  model->forward(golden.view("t13/ids"), &cap, Tensor{}, {});
  ASSERT_EQ(cap.layers.size(), 4u);
  for (int l : {0, 1, 3}) {
    EXPECT_EQ(cap.layers[size_t(l)].spec.mask, ops::AttnMask::sliding_window) << "layer " << l;
    EXPECT_EQ(cap.layers[size_t(l)].spec.window, 4) << "layer " << l;
  }
  EXPECT_EQ(cap.layers[2].spec.mask, ops::AttnMask::causal);
  for (const auto& layer : cap.layers) EXPECT_DOUBLE_EQ(layer.spec.scale, 1.0 / std::sqrt(32.0));  // query_pre_attn_scalar
  // Query 12 sees keys 9..12 in a local layer and nothing before (transformers' probabilities agree).
  Tensor ref = golden.view("t13/probs/0");
  for (int64_t j = 0; j < 13; ++j) {
    const float p = ref.ptr<float>()[12 * 13 + j];  // batch 0, head 0, query 12
    if (j <= 12 - 4) EXPECT_EQ(p, 0.0f) << "key " << j;
    else EXPECT_GT(p, 0.0f) << "key " << j;
  }
}

// The head geometry every family checks (hf::head_shape): width a multiple of the heads (under the family's
// spelling of the fields), query heads a multiple of the key/value heads.
TEST(HfFamilies, HeadShapeErrors) {
  TempDir tmp("heads");
  int copies = 0;
  auto edit_config = [&](const std::string& fixture, const nlohmann::json& changes) {
    const std::string dir = tmp.path + "/" + fixture + "_" + std::to_string(copies++);
    fs::copy(kFixtures + "/" + fixture, dir, fs::copy_options::recursive);
    nlohmann::json cfg = nlohmann::json::parse(std::ifstream(dir + "/config.json"));
    for (const auto& [key, value] : changes.items()) {
      if (value.is_null()) cfg.erase(key);
      else cfg[key] = value;
    }
    std::ofstream(dir + "/config.json") << cfg.dump();
    return dir;
  };
  std::string dir = edit_config("gpt2", {{"n_head", 5}});
  expect_load_error(dir, {dir + "/config.json: n_embd 32 is not a multiple of n_head 5"});
  dir = edit_config("opt_pre", {{"num_attention_heads", 7}});
  expect_load_error(dir, {dir + "/config.json: hidden_size ", " is not a multiple of num_attention_heads 7"});
  dir = edit_config("llama_gqa", {{"num_key_value_heads", 4}});
  expect_load_error(dir, {dir + "/config.json: num_attention_heads 6 is not a multiple of num_key_value_heads 4"});
  dir = edit_config("llama_gqa", {{"num_attention_heads", 7}, {"num_key_value_heads", 7}, {"head_dim", nullptr}});
  expect_load_error(dir, {dir + "/config.json: hidden_size 48 is not a multiple of num_attention_heads 7"});
  dir = edit_config("llama_gqa", {{"num_key_value_heads", 0}});
  expect_load_error(dir, {dir + "/config.json: field 'num_key_value_heads' must be a positive integer, got 0"});
}

TEST(HfFamilies, MaxMemoryTooSmall) {
  hf::LoadOptions lo;
  lo.max_memory_bytes = 1000;
  const std::string dir = kFixtures + "/gpt2";
  try {
    hf::load_model(dir, lo);
    ADD_FAILURE() << "loaded within 1000 bytes";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--max-memory 0.0 MiB is too small for " + dir), std::string::npos) << e.what();
  }
  // Enough for the weights, not for the activations of a large batch.
  lo.max_memory_bytes = 512 << 10;
  std::unique_ptr<hf::HfModel> model = hf::load_model(dir, lo);
  Owned ids(DType::i32, {400, 16});
  try {
    model->forward(ids, nullptr, Tensor{}, {});
    ADD_FAILURE() << "a 400 x 16 batch ran within 512 KiB";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("for a batch of 400 x 16 tokens"), std::string::npos) << e.what();
  }
  Owned small(DType::i32, {1, 4});
  EXPECT_NO_THROW(model->forward(small, nullptr, Tensor{}, {}));
}

}  // namespace
}  // namespace sinklab
