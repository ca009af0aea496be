// The pre-training data loader: chunk arithmetic over packed shards, deterministic sampling, rank
// slices, epochs, token budgets.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <filesystem>
#include <map>
#include <unistd.h>
#include <set>
#include <string>
#include <vector>

#include "io/shard.hpp"
#include "test_util.hpp"
#include "train/data.hpp"
#include "train/train_config.hpp"

namespace sinklab {
namespace {

namespace fs = std::filesystem;
using train::BatchLayout;
using train::ChunkSampler;
using train::DataConfig;

class TrainData : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ = fs::temp_directory_path() /
           ("sinklab_test_data_" + std::to_string(::getpid()) + "_" +
            ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }
  std::string path(const std::string& name) const { return (dir_ / name).string(); }

  // Documents d (length len_d) with tokens 10*d+1.. and EOS = 0 after each; returns the stream.
  static std::vector<uint32_t> packed(const std::vector<int>& lengths, uint32_t bos = io::kNoBos) {
    std::vector<uint32_t> out;
    for (size_t d = 0; d < lengths.size(); ++d) {
      if (bos != io::kNoBos) out.push_back(bos);
      for (int i = 0; i < lengths[d]; ++i) out.push_back(uint32_t(100 * (d + 1) + i));
      out.push_back(0);
    }
    return out;
  }
  fs::path dir_;
};

// A stream 0..n-1 in one shard (vocab large enough).
std::vector<uint32_t> iota_tokens(uint32_t n) {
  std::vector<uint32_t> t(n);
  for (uint32_t i = 0; i < n; ++i) t[i] = i;
  return t;
}

// --document-rows: row c is the first C+1 tokens of document c (BOS first, as data_prep bbm writes them),
// across shards and within a token budget; a document shorter than C+1 is refused naming the flag.
TEST_F(TrainData, DocumentRowsStartAtDocuments) {
  const uint32_t bos = 999;
  const std::vector<uint32_t> a = packed({5, 7}, bos), b = packed({6}, bos);  // documents of 7, 9 and 8 tokens
  io::write_shard(path("a.bin"), a, 1000, 2, 0, bos);
  io::write_shard(path("b.bin"), b, 1000, 1, 0, bos);
  DataConfig cfg;
  cfg.shards = {path("a.bin"), path("b.bin")};
  cfg.context = 6;
  cfg.document_rows = true;
  ChunkSampler s(cfg);
  ASSERT_EQ(s.n_chunks(), 3u);
  const std::vector<std::vector<uint32_t>> docs = {{a.begin(), a.begin() + 7}, {a.begin() + 7, a.end()}, b};
  std::vector<int32_t> row(7);
  for (uint64_t c = 0; c < 3; ++c) {
    s.read_chunk(c, row.data());
    for (size_t i = 0; i < row.size(); ++i) EXPECT_EQ(uint32_t(row[i]), docs[c][i]) << "row " << c << " token " << i;
    EXPECT_EQ(uint32_t(row[0]), bos);
  }
  // Inputs and targets of a batch are the document's first C+1 tokens shifted by one; every target counts.
  BatchLayout layout{3, 1, 1};
  test::Owned in(DType::i32, std::vector<int64_t>{3, 6}), tg(DType::i32, std::vector<int64_t>{3, 6});
  EXPECT_EQ(s.fill_batch(layout, 0, 0, 0, in.t, tg.t), 18);
  const std::vector<uint64_t> chunks = s.batch_chunks(layout, 0, 0, 0);
  for (int j = 0; j < 3; ++j) {
    EXPECT_EQ(uint32_t(in.data<int32_t>()[j * 6]), bos);
    EXPECT_EQ(uint32_t(tg.data<int32_t>()[j * 6 + 5]), docs[chunks[size_t(j)]][6]);
  }
  // The fingerprint says so (a resume with the other cut is refused); a budget keeps whole documents only.
  EXPECT_NE(s.fingerprint().find("document_rows"), std::string::npos);
  cfg.max_tokens = 16 + 3;  // the first two documents and part of the third
  EXPECT_EQ(ChunkSampler(cfg).n_chunks(), 2u);
  cfg.max_tokens = 0;
  cfg.context = 7;  // C+1 = 8 > the first document's 7 tokens
  try {
    ChunkSampler refused(cfg);
    FAIL() << "a document shorter than context+1 was accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--document-rows"), std::string::npos) << e.what();
  }
}

TEST_F(TrainData, ChunkArithmeticSharesBoundaryToken) {
  io::write_shard(path("a.bin"), iota_tokens(23), 1000, 1, 0);
  DataConfig cfg;
  cfg.shards = {path("a.bin")};
  cfg.context = 5;
  ChunkSampler s(cfg);
  EXPECT_EQ(s.total_tokens(), 23u);
  EXPECT_EQ(s.n_tokens(), 23u);
  EXPECT_EQ(s.n_chunks(), 4u);  // floor((23 - 1) / 5)
  std::vector<int32_t> chunk(6);
  for (uint64_t c = 0; c < 4; ++c) {
    s.read_chunk(c, chunk.data());
    for (int i = 0; i < 6; ++i) EXPECT_EQ(chunk[size_t(i)], int32_t(c * 5 + uint64_t(i))) << "chunk " << c;
  }
  // Chunk c ends with the token chunk c+1 starts with.
  std::vector<int32_t> next(6);
  s.read_chunk(1, chunk.data());
  s.read_chunk(2, next.data());
  EXPECT_EQ(chunk[5], next[0]);
  EXPECT_THROW(s.read_chunk(4, chunk.data()), Error);
  // Exactly (N-1) % C == 0: the last token is used.
  io::write_shard(path("b.bin"), iota_tokens(21), 1000, 1, 0);
  cfg.shards = {path("b.bin")};
  ChunkSampler s2(cfg);
  EXPECT_EQ(s2.n_chunks(), 4u);
  s2.read_chunk(3, chunk.data());
  EXPECT_EQ(chunk[5], 20);
}

TEST_F(TrainData, InputsAndTargetsAreShiftedByOne) {
  io::write_shard(path("a.bin"), iota_tokens(41), 1000, 1, 0);
  DataConfig cfg;
  cfg.shards = {path("a.bin")};
  cfg.context = 4;
  cfg.seed = 7;
  ChunkSampler s(cfg);
  BatchLayout layout{3, 1, 1};
  test::Owned in(DType::i32, std::vector<int64_t>{3, 4}), tg(DType::i32, std::vector<int64_t>{3, 4});
  EXPECT_EQ(s.fill_batch(layout, 0, 0, 0, in, tg), 3 * 4);  // every target counts
  auto chunks = s.batch_chunks(layout, 0, 0, 0);
  ASSERT_EQ(chunks.size(), 3u);
  for (int j = 0; j < 3; ++j) {
    for (int t = 0; t < 4; ++t) {
      EXPECT_EQ(in.data<int32_t>()[j * 4 + t], int32_t(chunks[size_t(j)] * 4 + uint64_t(t)));
      EXPECT_EQ(tg.data<int32_t>()[j * 4 + t], int32_t(chunks[size_t(j)] * 4 + uint64_t(t) + 1));
    }
  }
}

TEST_F(TrainData, ChunksSpanShardsAsOneStream) {
  // Two shards, concatenated: 0..12 and 13..29. A chunk straddles the seam.
  std::vector<uint32_t> all = iota_tokens(30);
  io::write_shard(path("a.bin"), std::vector<uint32_t>(all.begin(), all.begin() + 13), 1000, 1, 0);
  io::write_shard(path("b.bin"), std::vector<uint32_t>(all.begin() + 13, all.end()), 1000, 1, 0);
  DataConfig cfg;
  cfg.shards = {path("a.bin"), path("b.bin")};
  cfg.context = 4;
  ChunkSampler s(cfg);
  EXPECT_EQ(s.n_tokens(), 30u);
  EXPECT_EQ(s.n_chunks(), 7u);
  std::vector<int32_t> chunk(5);
  for (uint64_t c = 0; c < 7; ++c) {
    s.read_chunk(c, chunk.data());
    for (int i = 0; i < 5; ++i) EXPECT_EQ(chunk[size_t(i)], int32_t(c * 4 + uint64_t(i)));
  }
  // Shards from different tokenizers are refused, naming the file.
  io::write_shard(path("c.bin"), iota_tokens(10), 1000, 1, 3);
  cfg.shards = {path("a.bin"), path("c.bin")};
  try {
    ChunkSampler bad(cfg);
    FAIL() << "mismatched shards accepted";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("c.bin"), std::string::npos) << e.what();
  }
}

TEST_F(TrainData, EosAndBosBoundariesArePreserved) {
  const uint32_t bos = 1;
  std::vector<uint32_t> stream = packed({3, 7, 2, 9, 4, 5}, bos);
  io::write_shard(path("a.bin"), stream, 1000, 6, 0, bos);
  DataConfig cfg;
  cfg.shards = {path("a.bin")};
  cfg.context = 6;
  cfg.seed = 3;
  ChunkSampler s(cfg);
  EXPECT_EQ(s.eos_id(), 0u);
  EXPECT_EQ(s.bos_id(), bos);
  // Stitching the chunks back (dropping the shared boundary token) gives the packed stream verbatim.
  std::vector<int32_t> rebuilt, chunk(7);
  for (uint64_t c = 0; c < s.n_chunks(); ++c) {
    s.read_chunk(c, chunk.data());
    rebuilt.insert(rebuilt.end(), chunk.begin() + (c == 0 ? 0 : 1), chunk.end());
  }
  ASSERT_LE(rebuilt.size(), stream.size());
  EXPECT_EQ(rebuilt.size(), 1 + s.n_chunks() * 6);
  for (size_t i = 0; i < rebuilt.size(); ++i) EXPECT_EQ(uint32_t(rebuilt[i]), stream[i]) << i;
  size_t eos_in = std::count(rebuilt.begin(), rebuilt.end(), 0);
  EXPECT_EQ(eos_in, size_t(std::count(stream.begin(), stream.begin() + long(rebuilt.size()), 0u)));
}

TEST_F(TrainData, PermutationVisitsEveryChunkOncePerEpoch) {
  for (uint64_t n : {1ull, 2ull, 3ull, 5ull, 16ull, 17ull, 100ull, 1000ull, 4097ull}) {
    for (uint64_t epoch : {0ull, 1ull, 9ull}) {
      std::vector<char> seen(n, 0);
      for (uint64_t i = 0; i < n; ++i) {
        uint64_t p = train::permute_index(i, n, 42, epoch);
        ASSERT_LT(p, n);
        ASSERT_FALSE(seen[p]) << "n=" << n << " epoch=" << epoch << " repeats " << p;
        seen[p] = 1;
      }
    }
  }
  // Not the identity, and different per epoch and per seed.
  const uint64_t n = 1000;
  int fixed = 0, same_epoch = 0, same_seed = 0;
  for (uint64_t i = 0; i < n; ++i) {
    fixed += train::permute_index(i, n, 42, 0) == i;
    same_epoch += train::permute_index(i, n, 42, 0) == train::permute_index(i, n, 42, 1);
    same_seed += train::permute_index(i, n, 42, 0) == train::permute_index(i, n, 43, 0);
  }
  EXPECT_LT(fixed, 20);
  EXPECT_LT(same_epoch, 20);
  EXPECT_LT(same_seed, 20);
}

TEST_F(TrainData, SamplingIsDeterministicAndResumable) {
  io::write_shard(path("a.bin"), iota_tokens(2001), 5000, 1, 0);
  DataConfig cfg;
  cfg.shards = {path("a.bin")};
  cfg.context = 8;
  cfg.seed = 1234;
  BatchLayout layout{4, 2, 1};
  std::vector<std::vector<uint64_t>> run;
  {
    ChunkSampler s(cfg);
    for (uint64_t step = 0; step < 40; ++step)
      for (int64_t m = 0; m < layout.accum; ++m) run.push_back(s.batch_chunks(layout, step, m, 0));
    // Same object, same answer twice.
    EXPECT_EQ(s.batch_chunks(layout, 17, 1, 0), run[17 * 2 + 1]);
  }
  // A fresh sampler (a resumed job) started at step k reads the same batches, and the same tokens.
  ChunkSampler resumed(cfg);
  const uint64_t k = 23;
  test::Owned in(DType::i32, std::vector<int64_t>{4, 8}), tg(DType::i32, std::vector<int64_t>{4, 8});
  for (uint64_t step = k; step < 40; ++step)
    for (int64_t m = 0; m < layout.accum; ++m) {
      resumed.fill_batch(layout, step, m, 0, in, tg);
      auto chunks = resumed.batch_chunks(layout, step, m, 0);
      EXPECT_EQ(chunks, run[step * 2 + uint64_t(m)]);
      std::vector<int32_t> chunk(9);
      resumed.read_chunk(chunks[0], chunk.data());
      EXPECT_EQ(in.data<int32_t>()[0], chunk[0]);
    }
  // A different seed gives a different order.
  cfg.seed = 1235;
  ChunkSampler other(cfg);
  EXPECT_NE(other.batch_chunks(layout, 0, 0, 0), run[0]);
  EXPECT_NE(other.fingerprint(), resumed.fingerprint());
}

TEST_F(TrainData, RankSlicesPartitionTheGlobalBatch) {
  io::write_shard(path("a.bin"), iota_tokens(5001), 6000, 1, 0);
  DataConfig cfg;
  cfg.shards = {path("a.bin")};
  cfg.context = 4;
  cfg.seed = 99;
  ChunkSampler s(cfg);
  const int64_t W = 4, rows = 3, accum = 2;
  BatchLayout multi{rows, accum, W};
  BatchLayout single_accum{rows, accum * W, 1};  // one rank, more micro-batches
  BatchLayout single_wide{rows * W, accum, 1};   // one rank, wider micro-batches
  for (uint64_t step = 0; step < 5; ++step) {
    std::vector<uint64_t> by_ranks, by_accum, by_wide;
    for (int64_t r = 0; r < W; ++r)
      for (int64_t m = 0; m < accum; ++m) {
        auto c = s.batch_chunks(multi, step, m, r);
        by_ranks.insert(by_ranks.end(), c.begin(), c.end());
      }
    for (int64_t m = 0; m < accum * W; ++m) {
      auto c = s.batch_chunks(single_accum, step, m, 0);
      by_accum.insert(by_accum.end(), c.begin(), c.end());
    }
    for (int64_t m = 0; m < accum; ++m) {
      auto c = s.batch_chunks(single_wide, step, m, 0);
      by_wide.insert(by_wide.end(), c.begin(), c.end());
    }
    EXPECT_EQ(by_ranks, by_accum) << "step " << step;  // same rows in the same order
    std::vector<uint64_t> a = by_ranks, b = by_wide;
    std::sort(a.begin(), a.end());
    std::sort(b.begin(), b.end());
    EXPECT_EQ(a, b) << "step " << step;  // same global batch
    // Within one epoch (1250 chunks, 24 rows a step) no chunk repeats.
    EXPECT_EQ(std::set<uint64_t>(a.begin(), a.end()).size(), a.size());
  }
  // Rank r's block starts at r * rows_per_rank of the step.
  EXPECT_EQ(ChunkSampler::sample_index(multi, 2, 1, 3, 2), uint64_t(2 * 24 + 3 * 6 + 1 * 3 + 2));
  EXPECT_THROW(s.batch_chunks(multi, 0, 0, W), Error);
  EXPECT_THROW(s.batch_chunks(multi, 0, accum, 0), Error);
}

TEST_F(TrainData, EpochsReshuffle) {
  io::write_shard(path("a.bin"), iota_tokens(61), 1000, 1, 0);  // 20 chunks of C = 3
  DataConfig cfg;
  cfg.shards = {path("a.bin")};
  cfg.context = 3;
  cfg.seed = 5;
  ChunkSampler s(cfg);
  ASSERT_EQ(s.n_chunks(), 20u);
  BatchLayout layout{5, 1, 1};  // 4 steps per epoch
  std::vector<std::vector<uint64_t>> epochs(3);
  for (uint64_t step = 0; step < 12; ++step) {
    auto c = s.batch_chunks(layout, step, 0, 0);
    EXPECT_EQ(s.epoch_of(ChunkSampler::sample_index(layout, step, 0, 0, 0)), step / 4);
    epochs[step / 4].insert(epochs[step / 4].end(), c.begin(), c.end());
  }
  for (auto& e : epochs) {
    std::vector<uint64_t> sorted = e;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t i = 0; i < 20; ++i) EXPECT_EQ(sorted[i], i);  // every chunk once per epoch
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
  // Without shuffling: stream order every epoch.
  cfg.shuffle = false;
  ChunkSampler seq(cfg);
  EXPECT_EQ(seq.batch_chunks(layout, 5, 0, 0), (std::vector<uint64_t>{5, 6, 7, 8, 9}));
}

TEST_F(TrainData, MaxTokensBudgetIsRespected) {
  io::write_shard(path("a.bin"), iota_tokens(1001), 2000, 1, 0);
  DataConfig cfg;
  cfg.shards = {path("a.bin")};
  cfg.context = 10;
  cfg.max_tokens = 101;
  cfg.seed = 11;
  ChunkSampler s(cfg);
  EXPECT_EQ(s.total_tokens(), 1001u);
  EXPECT_EQ(s.n_tokens(), 101u);
  EXPECT_EQ(s.n_chunks(), 10u);
  BatchLayout layout{4, 1, 1};
  test::Owned in(DType::i32, std::vector<int64_t>{4, 10}), tg(DType::i32, std::vector<int64_t>{4, 10});
  for (uint64_t step = 0; step < 30; ++step) {  // 12 epochs of the budget
    s.fill_batch(layout, step, 0, 0, in, tg);
    for (int i = 0; i < 40; ++i) {
      EXPECT_LT(in.data<int32_t>()[i], 101);
      EXPECT_LT(tg.data<int32_t>()[i], 101);  // token 100 is the last one a target may be
    }
  }
  // A budget larger than the data is the data; a budget under one chunk is refused.
  cfg.max_tokens = 5000;
  EXPECT_EQ(ChunkSampler(cfg).n_tokens(), 1001u);
  cfg.max_tokens = 10;
  EXPECT_THROW(ChunkSampler bad(cfg), Error);
}

TEST_F(TrainData, BatchLayoutFromTokens) {
  BatchLayout l = train::make_batch_layout(1 << 20, 2048, 8, 4);
  EXPECT_EQ(l.rows, 8);
  EXPECT_EQ(l.world, 4);
  EXPECT_EQ(l.accum, 16);
  EXPECT_EQ(l.global_rows() * 2048, 1 << 20);
  try {
    train::make_batch_layout(1000, 64, 2, 2);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("--global-batch-tokens"), std::string::npos);
  }
}

// ---------------------------------------------------------------------------------------------------
// Data interventions (paper Sec. 5, Table 10 right).

// The rows of every sample of steps [0, steps) under `layout`, by global sample index: inputs and
// targets re-joined into the C+1 tokens of the sample.
std::map<uint64_t, std::vector<int32_t>> rows_by_sample(const ChunkSampler& s, const BatchLayout& layout,
                                                        uint64_t steps) {
  const int64_t C = s.context();
  std::map<uint64_t, std::vector<int32_t>> out;
  const std::vector<int64_t> shape{layout.rows, C};
  test::Owned in(DType::i32, shape), tg(DType::i32, shape);
  for (uint64_t step = 0; step < steps; ++step)
    for (int64_t r = 0; r < layout.world; ++r)
      for (int64_t m = 0; m < layout.accum; ++m) {
        s.fill_batch(layout, step, m, r, in, tg);
        for (int64_t j = 0; j < layout.rows; ++j) {
          std::vector<int32_t> row(in.data<int32_t>() + j * C, in.data<int32_t>() + (j + 1) * C);
          row.push_back(tg.data<int32_t>()[j * C + C - 1]);
          // Inputs and targets are the same row shifted by one, interventions included.
          for (int64_t t = 0; t + 1 < C; ++t) EXPECT_EQ(tg.data<int32_t>()[j * C + t], row[size_t(t + 1)]);
          EXPECT_TRUE(out.emplace(ChunkSampler::sample_index(layout, step, m, r, j), row).second);
        }
      }
  return out;
}

TEST_F(TrainData, InterventionsChangeOnlyTheNamedPositions) {
  io::write_shard(path("a.bin"), iota_tokens(4001), 5000, 1, 0);  // token t at stream index t: never < 0
  DataConfig plain;
  plain.shards = {path("a.bin")};
  plain.context = 16;
  plain.seed = 77;
  DataConfig cfg = plain;
  cfg.resample_positions = {1, 2, 7};
  cfg.resample_vocab = 50;
  cfg.fixed_token_position = 3;
  cfg.fixed_token_id = 4999;
  ChunkSampler base(plain), s(cfg);
  BatchLayout layout{3, 2, 1};
  auto a = rows_by_sample(base, layout, 40), b = rows_by_sample(s, layout, 40);  // 240 samples, 1 epoch
  ASSERT_EQ(a.size(), b.size());
  std::map<int64_t, int> changed;  // 1-based position -> samples where it differs
  for (const auto& [sample, row] : b) {
    const std::vector<int32_t>& orig = a.at(sample);
    std::vector<int32_t> chunk(17);
    s.read_chunk(s.chunk_of(sample), chunk.data());
    EXPECT_EQ(orig, chunk);  // the plain sampler reads the corpus as it is
    for (int64_t p = 1; p <= 17; ++p) {
      const int32_t got = row[size_t(p - 1)];
      if (p == 1 || p == 2 || p == 7) {
        EXPECT_EQ(got, train::resampled_token(77, sample, p, 50));
        EXPECT_GE(got, 0);
        EXPECT_LT(got, 50);
      } else if (p == 3) {
        EXPECT_EQ(got, 4999);
      } else {
        EXPECT_EQ(got, orig[size_t(p - 1)]) << "sample " << sample << " position " << p;
      }
      changed[p] += got != orig[size_t(p - 1)];
    }
  }
  // iota tokens are >= 50 after the first chunks: the resampled positions almost always differ.
  for (int64_t p : {1, 2, 3, 7}) EXPECT_GT(changed[p], 200) << p;
  // read_chunk (evaluation, probe) is untouched; read_sample is the training row.
  std::vector<int32_t> chunk(17), sample(17);
  s.read_chunk(5, chunk.data());
  for (int i = 0; i < 17; ++i) EXPECT_EQ(chunk[size_t(i)], 5 * 16 + i);
  s.read_sample(123, sample.data());
  EXPECT_EQ(sample, b.at(123));
  // The interventions are part of the data's identity (a resume with other ones is refused).
  EXPECT_NE(s.fingerprint(), base.fingerprint());
  DataConfig other = cfg;
  other.fixed_token_position = 4;
  EXPECT_NE(ChunkSampler(other).fingerprint(), s.fingerprint());
}

TEST_F(TrainData, ResampledTokensIgnoreRanksMicroBatchesAndResume) {
  io::write_shard(path("a.bin"), iota_tokens(3001), 5000, 1, 0);
  DataConfig cfg;
  cfg.shards = {path("a.bin")};
  cfg.context = 8;
  cfg.seed = 2024;
  cfg.resample_positions = {1, 2};
  cfg.resample_vocab = 1000;
  ChunkSampler s(cfg);
  const int64_t W = 4, rows = 2, accum = 3;
  // One rank, 2 ranks, 4 ranks, more or wider micro-batches: same global batch of 24 rows a step.
  auto ref = rows_by_sample(s, BatchLayout{rows, accum, W}, 30);  // 720 samples, 2 epochs of 374 chunks
  for (BatchLayout l : {BatchLayout{rows, accum * W, 1}, BatchLayout{rows * W, accum, 1},
                        BatchLayout{rows * 2, accum, 2}, BatchLayout{24, 1, 1}}) {
    auto other = rows_by_sample(s, l, 30);
    EXPECT_EQ(other, ref) << "layout " << l.rows << "x" << l.accum << "x" << l.world;
  }
  // A fresh sampler (a resumed job) reads the same tokens.
  ChunkSampler resumed(cfg);
  test::Owned in(DType::i32, std::vector<int64_t>{rows, 8}), tg(DType::i32, std::vector<int64_t>{rows, 8});
  BatchLayout l{rows, accum, W};
  resumed.fill_batch(l, 17, 2, 3, in, tg);
  for (int64_t j = 0; j < rows; ++j) {
    const auto& want = ref.at(ChunkSampler::sample_index(l, 17, 2, 3, j));
    for (int t = 0; t < 8; ++t) EXPECT_EQ(in.data<int32_t>()[j * 8 + t], want[size_t(t)]);
  }
  // A chunk met again in a later epoch gets new draws; another seed gives other draws.
  std::map<uint64_t, uint64_t> first_sample_of_chunk;
  int same_on_revisit = 0, revisits = 0;
  for (const auto& [sample, row] : ref) {
    auto [it, fresh] = first_sample_of_chunk.emplace(s.chunk_of(sample), sample);
    if (!fresh) {
      ++revisits;
      same_on_revisit += ref.at(it->second)[0] == row[0];
    }
  }
  EXPECT_GT(revisits, 300);
  EXPECT_LT(same_on_revisit, 5);  // chance 1/1000 each
  int same_seed = 0;
  for (uint64_t sample = 0; sample < 1000; ++sample)
    same_seed += train::resampled_token(2024, sample, 1, 1000) == train::resampled_token(2025, sample, 1, 1000);
  EXPECT_LT(same_seed, 8);
}

TEST_F(TrainData, ResampledTokensAreUniform) {
  // Pearson chi-square over 37 bins (odd, so 2^32 % 37 != 0: the rejection step matters), 74,000 draws
  // over samples and positions: 36 degrees of freedom; the 99.99th percentile is 75. The draws are
  // deterministic, so this is a fixed check, not a flaky one.
  const uint32_t vocab = 37;
  std::vector<int64_t> counts(vocab, 0);
  int64_t n = 0;
  for (uint64_t sample = 0; sample < 37000; ++sample)
    for (int64_t p : {1, 2}) {
      const int32_t t = train::resampled_token(9, sample, p, vocab);
      ASSERT_GE(t, 0);
      ASSERT_LT(t, int32_t(vocab));
      ++counts[size_t(t)];
      ++n;
    }
  const double expected = double(n) / vocab;
  double chi2 = 0;
  for (int64_t c : counts) chi2 += (double(c) - expected) * (double(c) - expected) / expected;
  EXPECT_LT(chi2, 75.0);
  EXPECT_GT(chi2, 10.0);  // 0.0001th percentile: not suspiciously flat (e.g. a counter mod vocab)
  // Positions 1 and 2 of one sample are independent draws, not one value twice.
  int equal = 0;
  for (uint64_t sample = 0; sample < 5000; ++sample)
    equal += train::resampled_token(9, sample, 1, 50432) == train::resampled_token(9, sample, 2, 50432);
  EXPECT_LT(equal, 3);
  // The whole range is reached at the vocabulary of the paper's tokenizer.
  int32_t lo = 50432, hi = -1;
  for (uint64_t sample = 0; sample < 20000; ++sample) {
    const int32_t t = train::resampled_token(1, sample, 1, 50432);
    lo = std::min(lo, t);
    hi = std::max(hi, t);
  }
  EXPECT_LT(lo, 50);
  EXPECT_GT(hi, 50432 - 50);
  EXPECT_LT(hi, 50432);
}

TEST_F(TrainData, BadInterventionsAreNamed) {
  io::write_shard(path("a.bin"), iota_tokens(101), 1000, 1, 0);
  DataConfig cfg;
  cfg.shards = {path("a.bin")};
  cfg.context = 8;
  cfg.resample_vocab = 1000;
  auto error_of = [&](const DataConfig& c) -> std::string {
    try {
      ChunkSampler s(c);
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  };
  DataConfig c = cfg;
  c.resample_positions = {9};  // > context
  EXPECT_NE(error_of(c).find("--resample-positions"), std::string::npos);
  c.resample_positions = {0};
  EXPECT_NE(error_of(c).find("--resample-positions"), std::string::npos);
  c.resample_positions = {2};
  c.fixed_token_position = 2;
  EXPECT_NE(error_of(c).find("--fixed-token-position"), std::string::npos);
  c = cfg;
  c.fixed_token_position = 9;
  EXPECT_NE(error_of(c).find("--fixed-token-position"), std::string::npos);
  c = cfg;
  c.resample_positions = {1};
  c.resample_vocab = 0;
  EXPECT_NE(error_of(c).find("--resample-positions"), std::string::npos);
  c = cfg;
  c.resample_positions = {8};  // the last input position is allowed
  c.fixed_token_position = 1;
  EXPECT_EQ(error_of(c), "");
}

TEST_F(TrainData, MissingOrCorruptShardIsNamed) {
  DataConfig cfg;
  cfg.shards = {path("nope.bin")};
  cfg.context = 4;
  try {
    ChunkSampler s(cfg);
    FAIL();
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("nope.bin"), std::string::npos);
  }
}

}  // namespace
}  // namespace sinklab

namespace sinklab {
namespace {

// --eval-every 10 --eval-every-after 50:25: steps 10, 20, .., 50, then 75, 100, ...
TEST(EvaluationSchedule, FineEarlyCoarseLater) {
  train::TrainConfig cfg;
  cfg.eval_every = 10;
  cfg.eval_coarse_from = 50;
  cfg.eval_coarse_every = 25;
  std::vector<int64_t> due;
  for (int64_t n = 1; n <= 120; ++n)
    if (train::evaluation_due(cfg, n)) due.push_back(n);
  EXPECT_EQ(due, (std::vector<int64_t>{10, 20, 30, 40, 50, 75, 100}));
  cfg.eval_coarse_every = 0;  // no coarse grid: every 10
  EXPECT_TRUE(train::evaluation_due(cfg, 70));
  cfg.eval_every = 0;  // neither: only the trainer's end-of-run evaluation
  EXPECT_FALSE(train::evaluation_due(cfg, 70));
}

}  // namespace
}  // namespace sinklab
