// The token ids random/repeat survey inputs are drawn from (probe::sampling_vocabulary).
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>

#include "core/error.hpp"
#include "probe/vocabulary.hpp"

namespace sinklab::probe {
namespace {

namespace fs = std::filesystem;

class Vocabulary : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() / ("sinklab_vocab_" + std::to_string(::getpid()) + "_" +
                                        ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  void write(const std::string& name, const std::string& text) { std::ofstream(dir_ / name) << text; }
  fs::path dir_;
};

TEST_F(Vocabulary, BpeTokenizerWithAddedTokensAndPaddedEmbedding) {
  // Ids 0..9 in the model vocabulary, 10 (special) and 11 (not special) added; the embedding has 16 rows.
  write("tokenizer.json", R"({"model": {"type": "BPE", "vocab": {"a": 0, "b": 1, "c": 2, "d": 3, "e": 4,
      "f": 5, "g": 6, "h": 7, "i": 8, "j": 9}, "merges": []},
      "added_tokens": [{"id": 10, "content": "<s>", "special": true}, {"id": 11, "content": "xx", "special": false}]})");
  write("config.json", R"({"model_type": "llama", "vocab_size": 16, "bos_token_id": 1, "eos_token_id": [2, 3],
      "pad_token_id": null})");
  SamplingVocabulary v = sampling_vocabulary(dir_.string(), 16);
  EXPECT_EQ(v.size, 12u);
  EXPECT_EQ(v.special, (std::vector<uint32_t>{1, 2, 3, 10}));
  EXPECT_NE(v.source.find("tokenizer.json"), std::string::npos);
  // A tokenizer larger than the embedding is capped at the embedding (and so are its specials).
  EXPECT_EQ(sampling_vocabulary(dir_.string(), 10).size, 10u);
  EXPECT_EQ(sampling_vocabulary(dir_.string(), 10).special, (std::vector<uint32_t>{1, 2, 3}));
}

TEST_F(Vocabulary, UnigramAndNoTokenizer) {
  write("tokenizer.json", R"({"model": {"type": "Unigram", "vocab": [["<unk>", 0], ["a", -1], ["b", -2]]},
      "added_tokens": [{"id": 0, "content": "<unk>", "special": true}]})");
  SamplingVocabulary v = sampling_vocabulary(dir_.string(), 8);
  EXPECT_EQ(v.size, 3u);
  EXPECT_EQ(v.special, (std::vector<uint32_t>{0}));
  fs::remove(dir_ / "tokenizer.json");
  write("config.json", R"({"eos_token_id": 0})");
  v = sampling_vocabulary(dir_.string(), 64);  // sinklab's own checkpoints: no tokenizer
  EXPECT_EQ(v.size, 64u);
  EXPECT_EQ(v.special, (std::vector<uint32_t>{0}));
}

TEST_F(Vocabulary, VocabJsonAndMergesLikeTheHubsOpt) {
  // facebook/opt-*: vocab.json (ids 0..7 here), the specials in tokenizer_config.json (strings or
  // AddedToken objects) and special_tokens_map.json; the embedding padded to 12 rows.
  write("vocab.json", R"({"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "a": 4, "b": 5, "c": 6, "d": 7})");
  write("merges.txt", "#version: 0.2\n");
  write("tokenizer_config.json", R"({"bos_token": {"content": "</s>", "special": true}, "pad_token": "<pad>",
      "added_tokens_decoder": {"0": {"content": "<s>", "special": true}, "6": {"content": "c", "special": false}}})");
  write("special_tokens_map.json", R"({"unk_token": "<unk>", "eos_token": "</s>"})");
  write("config.json", R"({"model_type": "opt", "vocab_size": 12, "bos_token_id": 2, "pad_token_id": 1})");
  SamplingVocabulary v = sampling_vocabulary(dir_.string(), 12);
  EXPECT_EQ(v.size, 8u);
  EXPECT_EQ(v.special, (std::vector<uint32_t>{0, 1, 2, 3}));
  EXPECT_NE(v.source.find("vocab.json"), std::string::npos);
  // The committed OPT .bin fixture: 280 ids, </s> <pad> <unk> named (and <s> not), config's ids too.
  const std::string opt = std::string(SINKLAB_SOURCE_DIR) + "/tests/fixtures/hf/opt_bin_tied";
  v = sampling_vocabulary(opt, 280);
  EXPECT_EQ(v.size, 280u);
  EXPECT_EQ(v.special, (std::vector<uint32_t>{1, 2}));
  write("vocab.json", R"({"a": -1})");
  EXPECT_THROW(sampling_vocabulary(dir_.string(), 12), Error);
}

TEST_F(Vocabulary, BadFilesNameThemselves) {
  write("tokenizer.json", "{not json");
  try {
    sampling_vocabulary(dir_.string(), 8);
    ADD_FAILURE() << "accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("tokenizer.json"), std::string::npos) << e.what();
  }
  write("tokenizer.json", R"({"model": {}})");
  EXPECT_THROW(sampling_vocabulary(dir_.string(), 8), Error);
  write("tokenizer.json", R"({"model": {"vocab": {"a": 0}}, "added_tokens": []})");
  write("config.json", R"({"eos_token_id": 0})");
  EXPECT_THROW(sampling_vocabulary(dir_.string(), 8), Error);  // the only token is special
}

}  // namespace
}  // namespace sinklab::probe
