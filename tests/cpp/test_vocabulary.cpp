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
