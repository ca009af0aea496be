// Checkpoints: bit-exact round trip, atomicity (incomplete saves are invisible), refusal of damaged
// checkpoints with the file named, retention, and an exact resume of optimizer + data state.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "io/shard.hpp"
#include "test_util.hpp"
#include "train/checkpoint.hpp"
#include "train/data.hpp"
#include "train/optimizer.hpp"

namespace sinklab {
namespace {

namespace fs = std::filesystem;
using test::Owned;

const char* kConfig = R"({"architectures": ["LlamaForCausalLM"], "model_type": "llama", "hidden_size": 8,
  "num_hidden_layers": 1, "vocab_size": 11})";

class Checkpoint : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sinklab_test_ckpt_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    weights_.emplace_back(DType::f32, std::vector<int64_t>{11, 8});
    weights_.emplace_back(DType::f32, std::vector<int64_t>{8});
    weights_.emplace_back(DType::f32, std::vector<int64_t>{11, 8});
    for (size_t i = 0; i < weights_.size(); ++i) test::randn(weights_[i], 50 + i);
    grads_.emplace_back(DType::f32, std::vector<int64_t>{11, 8});
    grads_.emplace_back(DType::f32, std::vector<int64_t>{8});
    grads_.emplace_back(DType::f32, std::vector<int64_t>{11, 8});
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::vector<io::NamedTensor> named(const std::vector<Owned>& w) const {
    return {{"model.embed_tokens.weight", w[0].t}, {"model.norm.weight", w[1].t}, {"lm_head.weight", w[2].t}};
  }
  std::vector<train::ParamRef> refs() const {
    auto n = named(weights_);
    std::vector<train::ParamRef> out;
    for (size_t i = 0; i < n.size(); ++i) out.push_back({n[i].name, weights_[i].t, grads_[i].t, -1, -1});
    return out;
  }
  // A rank state with some recognisable tensors (no optimizer kernel needed).
  train::RankState rank_state(int rank) const {
    static std::vector<Owned> keep;
    keep.emplace_back(DType::f32, std::vector<int64_t>{5});
    test::randn(keep.back(), 900 + uint64_t(rank));
    train::RankState s;
    s.tensors.push_back({"exp_avg/x", keep.back().t});
    s.metadata["data_step"] = std::to_string(rank + 40);
    return s;
  }
  std::string save(int64_t step, int world = 2, int keep_last = 0) {
    std::vector<train::RankState> states;
    for (int r = 0; r < world; ++r) states.push_back(rank_state(r));
    return train::save_checkpoint(dir_.string(), step, named(weights_), kConfig, states, keep_last,
                                  {{"sinklab_config", "[model]\nlayers = 1\n"}});
  }
  // Runs f and returns the error text (or fails when nothing is thrown).
  template <class F>
  std::string error_of(F&& f) {
    try {
      f();
    } catch (const Error& e) {
      return e.what();
    }
    ADD_FAILURE() << "no error thrown";
    return "";
  }
  static void flip_byte(const fs::path& p, uint64_t offset) {
    std::fstream f(p, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(offset));
    char c;
    f.get(c);
    f.seekp(std::streamoff(offset));
    f.put(char(c ^ 0x20));
  }

  fs::path dir_;
  std::vector<Owned> weights_, grads_;
};

TEST_F(Checkpoint, RoundTripIsBitExact) {
  const std::string path = save(5);
  EXPECT_EQ(fs::path(path).filename(), "step_00000005");
  EXPECT_FALSE(fs::exists(dir_ / "step_00000005.tmp"));
  auto latest = train::latest_checkpoint(dir_.string());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(*latest, path);
  train::CheckpointInfo info = train::open_checkpoint(path);
  EXPECT_EQ(info.step, 5);
  EXPECT_EQ(info.world, 2);

  std::vector<Owned> loaded;
  for (const auto& w : weights_) loaded.emplace_back(DType::f32, std::vector<int64_t>(w.t.shape.begin(), w.t.shape.begin() + w.t.ndim));
  train::load_weights(info, named(loaded));
  for (size_t i = 0; i < weights_.size(); ++i)
    EXPECT_EQ(std::memcmp(loaded[i].t.data, weights_[i].t.data, weights_[i].t.nbytes()), 0) << i;

  // The weights file is what an HF loader reads: metadata format=pt, plain names, config beside it.
  io::SafetensorsFile model(path + "/model.safetensors");
  EXPECT_EQ(model.metadata().at("format"), "pt");
  EXPECT_EQ(model.metadata().at("sinklab_config"), "[model]\nlayers = 1\n");
  EXPECT_TRUE(model.contains("lm_head.weight"));
  EXPECT_EQ(nlohmann::json::parse(train::read_config_json(info)), nlohmann::json::parse(kConfig));

  for (int r = 0; r < 2; ++r) {
    io::SafetensorsFile st(train::rank_state_path(info, r));
    EXPECT_EQ(st.metadata().at("data_step"), std::to_string(r + 40));
    EXPECT_EQ(st.metadata().at("rank"), std::to_string(r));
    Owned want(DType::f32, std::vector<int64_t>{5});
    test::randn(want, 900 + uint64_t(r));
    EXPECT_EQ(std::memcmp(st.view("exp_avg/x").data, want.t.data, want.t.nbytes()), 0);
  }
  EXPECT_THROW(train::rank_state_path(info, 2), Error);

  // Loading checks names and shapes.
  Owned wrong(DType::f32, std::vector<int64_t>{8, 11});
  std::string err = error_of([&] { train::load_weights(info, {{"lm_head.weight", wrong.t}}); });
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("lm_head.weight"), std::string::npos) << err;
  err = error_of([&] { train::load_weights(info, {{"model.layers.0.mlp.up_proj.weight", wrong.t}}); });
  EXPECT_NE(err.find("up_proj"), std::string::npos) << err;
}

TEST_F(Checkpoint, LatestIgnoresIncompleteSaves) {
  EXPECT_FALSE(train::latest_checkpoint(dir_.string()).has_value());
  EXPECT_FALSE(train::latest_checkpoint((dir_ / "does_not_exist").string()).has_value());
  const std::string good = save(3);
  // A newer directory without COMPLETE (e.g. copied by hand, or an old-style crash) and a temp dir.
  fs::create_directories(dir_ / "step_00000009");
  fs::copy_file(good + "/model.safetensors", dir_ / "step_00000009" / "model.safetensors");
  const std::string tmp = train::begin_checkpoint(dir_.string(), 12);
  train::write_rank_state(tmp, 0, rank_state(0));
  fs::create_directories(dir_ / "step_abc");
  EXPECT_EQ(train::latest_checkpoint(dir_.string()), good);
  EXPECT_EQ(train::list_checkpoints(dir_.string()), (std::vector<int64_t>{3}));
  // Opening the incomplete one directly is refused, naming the missing manifest.
  std::string err = error_of([&] { train::open_checkpoint((dir_ / "step_00000009").string()); });
  EXPECT_NE(err.find("COMPLETE"), std::string::npos) << err;
}

TEST_F(Checkpoint, TruncatedWeightsAreRefused) {
  const std::string path = save(1);
  fs::resize_file(path + "/model.safetensors", fs::file_size(path + "/model.safetensors") - 7);
  std::string err = error_of([&] { train::open_checkpoint(path); });
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("truncated"), std::string::npos) << err;
  // Even without the manifest's size check, the safetensors reader refuses it.
  EXPECT_THROW(io::SafetensorsFile(path + "/model.safetensors"), Error);
}

TEST_F(Checkpoint, CorruptedBytesAreRefused) {
  const std::string path = save(1);
  // A flipped byte in the tensor data: same size, CRC mismatch.
  const uint64_t size = fs::file_size(path + "/model.safetensors");
  flip_byte(path + "/model.safetensors", size - 3);
  std::string err = error_of([&] { train::open_checkpoint(path); });
  EXPECT_NE(err.find("model.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("CRC"), std::string::npos) << err;
  // Skipping the CRC pass still checks sizes and structure, so this one passes then.
  EXPECT_NO_THROW(train::open_checkpoint(path, false));
}

TEST_F(Checkpoint, FlippedManifestByteIsRefused) {
  const std::string path = save(1);
  const std::string manifest = path + "/COMPLETE";
  // Flip a digit inside a recorded size (still valid JSON): the manifest's own checksum catches it.
  std::ifstream in(manifest);
  std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t key = text.find("\"bytes\": ");
  ASSERT_NE(key, std::string::npos);
  flip_byte(manifest, key + 9);
  std::string err = error_of([&] { train::open_checkpoint(path); });
  EXPECT_NE(err.find("COMPLETE"), std::string::npos) << err;
  EXPECT_NE(err.find("corrupted"), std::string::npos) << err;
}

TEST_F(Checkpoint, MissingOptimizerFileIsRefused) {
  const std::string path = save(2, 3);
  fs::remove(path + "/optimizer-rank1.safetensors");
  std::string err = error_of([&] { train::open_checkpoint(path); });
  EXPECT_NE(err.find("optimizer-rank1.safetensors"), std::string::npos) << err;
  EXPECT_NE(err.find("missing"), std::string::npos) << err;
}

TEST_F(Checkpoint, FinishRefusesMissingRankFiles) {
  const std::string tmp = train::begin_checkpoint(dir_.string(), 4);
  train::write_rank_state(tmp, 0, rank_state(0));
  train::write_model(tmp, named(weights_), kConfig);
  std::string err = error_of([&] { train::finish_checkpoint(dir_.string(), 4, 2); });
  EXPECT_NE(err.find("optimizer-rank1.safetensors"), std::string::npos) << err;
  EXPECT_FALSE(train::latest_checkpoint(dir_.string()).has_value());
  // Invalid HF config JSON is refused before anything is written.
  err = error_of([&] { train::write_model(tmp, named(weights_), "{not json"); });
  EXPECT_NE(err.find("config.json"), std::string::npos) << err;
}

TEST_F(Checkpoint, InterruptedSaveLeavesThePreviousOneLoadable) {
  const std::string good = save(10);
  // (1) A save that throws midway (duplicate tensor name while writing the weights) cleans up after itself.
  std::vector<io::NamedTensor> bad = named(weights_);
  bad.push_back(bad[0]);
  EXPECT_THROW(train::save_checkpoint(dir_.string(), 20, bad, kConfig, {rank_state(0), rank_state(1)}), Error);
  EXPECT_FALSE(fs::exists(dir_ / "step_00000020"));
  // (2) A process killed midway leaves its temp directory behind.
  const std::string tmp = train::begin_checkpoint(dir_.string(), 30);
  train::write_rank_state(tmp, 0, rank_state(0));
  train::write_model(tmp, named(weights_), kConfig);
  ASSERT_TRUE(fs::exists(dir_ / "step_00000030.tmp"));
  auto latest = train::latest_checkpoint(dir_.string());
  ASSERT_TRUE(latest.has_value());
  EXPECT_EQ(*latest, good);
  train::CheckpointInfo info = train::open_checkpoint(*latest);
  std::vector<Owned> loaded;
  for (const auto& w : weights_) loaded.emplace_back(DType::f32, std::vector<int64_t>(w.t.shape.begin(), w.t.shape.begin() + w.t.ndim));
  train::load_weights(info, named(loaded));
  EXPECT_EQ(std::memcmp(loaded[2].t.data, weights_[2].t.data, weights_[2].t.nbytes()), 0);
  // The next save of that step replaces the stale temp directory.
  save(30);
  EXPECT_FALSE(fs::exists(dir_ / "step_00000030.tmp"));
  EXPECT_EQ(train::open_checkpoint(*train::latest_checkpoint(dir_.string())).step, 30);
}

TEST_F(Checkpoint, KeepLastAndResaveOfTheSameStep) {
  for (int64_t s = 1; s <= 5; ++s) save(s, 1, 2);
  EXPECT_EQ(train::list_checkpoints(dir_.string()), (std::vector<int64_t>{4, 5}));
  // Saving step 5 again (a resumed job re-reaching it) replaces it atomically.
  test::randn(weights_[0], 77);
  save(5, 1, 2);
  EXPECT_EQ(train::list_checkpoints(dir_.string()), (std::vector<int64_t>{4, 5}));
  EXPECT_FALSE(fs::exists(dir_ / "step_00000005.old"));
  train::CheckpointInfo info = train::open_checkpoint((dir_ / "step_00000005").string());
  Owned e(DType::f32, std::vector<int64_t>{11, 8});
  train::load_weights(info, {{"model.embed_tokens.weight", e.t}});
  EXPECT_EQ(std::memcmp(e.t.data, weights_[0].t.data, e.t.nbytes()), 0);
}

// A miniature training loop (quadratic loss, AdamW, sampled data as the gradient source) checkpointed
// at step k and resumed in fresh objects continues bit-exactly.
TEST_F(Checkpoint, ResumeContinuesBitExactly) {
  std::vector<uint32_t> tokens(801);
  for (size_t i = 0; i < tokens.size(); ++i) tokens[i] = uint32_t((i * 7919) % 11);
  io::write_shard((dir_ / "d.bin").string(), tokens, 11, 1, 0);
  train::DataConfig dcfg;
  dcfg.shards = {(dir_ / "d.bin").string()};
  dcfg.context = 8;
  dcfg.seed = 3;
  const train::BatchLayout layout{2, 2, 1};

  // One "training step": gradient = weights - f(batch tokens), accumulated over micro-batches.
  auto train_step = [&](train::ChunkSampler& data, train::AdamW& opt, std::vector<Owned>& w, std::vector<Owned>& g,
                        uint64_t step) {
    for (auto& x : g) ops::fill(x, 0.0);
    Owned in(DType::i32, std::vector<int64_t>{2, 8}), tg(DType::i32, std::vector<int64_t>{2, 8});
    for (int64_t micro = 0; micro < layout.accum; ++micro) {
      data.fill_batch(layout, step, micro, 0, in, tg);
      for (size_t i = 0; i < w.size(); ++i) {
        float* gp = g[i].data<float>();
        const float* wp = w[i].data<float>();
        for (int64_t k = 0; k < w[i].t.numel(); ++k)
          gp[k] += 0.5f * (wp[k] - 0.1f * float(tg.data<int32_t>()[k % 16]));
      }
    }
    opt.step(1e-2 * double(step + 1));
  };
  auto make_refs = [](std::vector<Owned>& w, std::vector<Owned>& g) {
    std::vector<train::ParamRef> r;
    const char* names[] = {"model.embed_tokens.weight", "model.norm.weight", "lm_head.weight"};
    for (size_t i = 0; i < w.size(); ++i) r.push_back({names[i], w[i].t, g[i].t, -1, -1});
    return r;
  };
  auto fresh = [&](std::vector<Owned>& w, std::vector<Owned>& g) {
    w.clear();
    g.clear();
    for (const auto& x : weights_) {
      std::vector<int64_t> dims(x.t.shape.begin(), x.t.shape.begin() + x.t.ndim);
      w.push_back(Owned::copy_of(x.t, DType::f32));
      g.emplace_back(DType::f32, dims);
    }
  };

  // Uninterrupted run of 8 steps.
  std::vector<Owned> w1, g1;
  fresh(w1, g1);
  {
    train::ChunkSampler data(dcfg);
    train::AdamW opt(make_refs(w1, g1), train::AdamWConfig{});
    for (uint64_t s = 0; s < 8; ++s) train_step(data, opt, w1, g1, s);
  }
  // Run of 5 steps, checkpoint, then everything rebuilt from the checkpoint and 3 more steps.
  std::vector<Owned> w2, g2;
  fresh(w2, g2);
  {
    train::ChunkSampler data(dcfg);
    train::AdamW opt(make_refs(w2, g2), train::AdamWConfig{});
    for (uint64_t s = 0; s < 5; ++s) train_step(data, opt, w2, g2, s);
    train::RankState st;
    std::vector<Buffer> host;
    st.tensors = opt.state_tensors(&host);
    st.metadata = opt.state_metadata();
    st.metadata["data_step"] = "5";
    st.metadata["data_fingerprint"] = data.fingerprint();
    train::save_checkpoint(dir_.string(), 5, named(w2), kConfig, {st});
  }
  std::vector<Owned> w3, g3;
  fresh(w3, g3);
  for (auto& x : w3) ops::fill(x, 0.0);  // everything must come from the checkpoint
  {
    train::CheckpointInfo info = train::open_checkpoint(*train::latest_checkpoint(dir_.string()));
    train::load_weights(info, named(w3));
    train::ChunkSampler data(dcfg);
    train::AdamW opt(make_refs(w3, g3), train::AdamWConfig{});
    io::SafetensorsFile st(train::rank_state_path(info, 0));
    opt.load_state(st);
    EXPECT_EQ(st.metadata().at("data_fingerprint"), data.fingerprint());
    const uint64_t start = std::stoull(st.metadata().at("data_step"));
    EXPECT_EQ(start, 5u);
    for (uint64_t s = start; s < 8; ++s) train_step(data, opt, w3, g3, s);
  }
  for (size_t i = 0; i < w1.size(); ++i)
    EXPECT_EQ(std::memcmp(w1[i].t.data, w3[i].t.data, w1[i].t.nbytes()), 0) << "tensor " << i;
}

}  // namespace
}  // namespace sinklab
