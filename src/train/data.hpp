// The pre-training data loader: token shards viewed as one packed stream, cut into fixed-length
// chunks (paper Figure 1, right), sampled deterministically.
//
// Packing. data_prep writes documents back to back, each ending with EOS (and starting with BOS when
// the corpus uses one), so the concatenation of the shards (in the order given) IS the packed stream
// of the paper: no document boundary is moved, dropped or padded here. Of the first N tokens of that
// stream (N = every token, or the `max_tokens` budget: the paper's training-data-amount axis),
// chunk c is tokens [c*C, c*C + C + 1): C+1 tokens whose first C are the inputs and last C the targets
// (next-token prediction). Consecutive chunks share one boundary token (the last token of chunk c is
// the first of chunk c+1), as nanoGPT/lit-gpt style packing does, so every token of the stream except
// the very first is a target exactly once per epoch. n_chunks = floor((N - 1) / C); the tail that does
// not fill a chunk is unused.
//
// Document rows (DataConfig::document_rows: BOS-started sequences of a fixed length, such as data_prep
// bbm's). Chunk c is instead the first C+1 tokens of document c (documents end with EOS), so every row
// starts at a document's start; every document of the first N tokens must hold C+1 tokens at least.
//
// Sampling. Sample index s (a running count over the whole run) belongs to epoch e = s / n_chunks and
// reads chunk perm_e(s % n_chunks), where perm_e is a pseudo-random permutation of [0, n_chunks) keyed
// by (seed, e): a Feistel network whose round function is Philox4x32-10, with cycle walking to the
// exact domain. It is a pure function of (seed, epoch, position), needs no memory, and every epoch
// visits each chunk exactly once in a new order (so a small token budget repeats the data reshuffled).
//
// Batches. An optimizer step consumes global_rows = world * accum * rows samples:
//   sample(step, micro, rank, j) = step * global_rows + rank * (accum * rows) + micro * rows + j
// i.e. rank r owns the contiguous block [r * rows_per_rank, (r+1) * rows_per_rank) of the step's global
// batch (rows_per_rank = accum * rows) and walks it one micro-batch of `rows` rows at a time. Hence the
// W ranks together read exactly the rows a single rank reads with the same global batch (accum * W
// micro-batches, or W times the rows), in the same order. Since sampling is pure, the data state to
// checkpoint is the optimizer step alone.
//
// Interventions (paper Sec. 5 and Table 10 right). A training sample's C+1 tokens can be altered at
// given 1-based positions p (token p of the row is input p-1 and, for p >= 2, target p-2):
//  - resampled: token p := a draw uniform over [0, vocab), word (p, attempt) of the Philox stream
//    keyed by (seed ^ kResampleKey, sample index); rejection sampling makes it exactly uniform. The
//    draw is a pure function of (seed, sample, p), so any rank count, micro-batch split or resume sees
//    the same tokens, and a chunk revisited in a later epoch gets fresh draws.
//  - fixed: token p := a given id (a learnable-free "sink token" at position p).
// They apply to training samples only (fill_batch / read_sample); read_chunk, which evaluation and
// the probe use, always returns the corpus as it is.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "core/tensor.hpp"
#include "io/h5.hpp"
#include "io/shard.hpp"

namespace sinklab::train {

// How an optimizer step's global batch is split: `rows` sequences per micro-batch per rank, `accum`
// micro-batches per step (gradient accumulation), `world` data-parallel ranks.
struct BatchLayout {
  int64_t rows = 1;
  int64_t accum = 1;
  int64_t world = 1;
  int64_t rows_per_rank() const { return rows * accum; }
  int64_t global_rows() const { return rows * accum * world; }
};

// The layout that reaches a global batch of `global_batch_tokens` tokens (= global_rows * context)
// with micro-batches of `micro_rows` rows on `world` ranks; accum is derived. Throws naming
// --global-batch-tokens when the tokens are not a multiple of context * micro_rows * world.
BatchLayout make_batch_layout(int64_t global_batch_tokens, int64_t context, int64_t micro_rows, int64_t world);

struct DataConfig {
  std::vector<std::string> shards;  // concatenated in this order
  int64_t context = 0;              // C: tokens per input row
  uint64_t seed = 0;                // keys the per-epoch permutations
  uint64_t max_tokens = 0;          // use only the first max_tokens tokens of the stream; 0 = all
  bool shuffle = true;              // false: chunks in stream order every epoch (evaluation)
  bool verify_checksum = true;      // CRC- and id-check every shard when opening it (io::Shard verify_tokens)
  // Interventions on training samples (above). Positions are 1-based, within [1, context].
  std::vector<int64_t> resample_positions;  // tokens redrawn uniformly from [0, resample_vocab)
  uint32_t resample_vocab = 0;              // the model's vocabulary size (required with resampling)
  int64_t fixed_token_position = 0;         // > 0: this position always holds fixed_token_id
  int32_t fixed_token_id = 0;
  bool document_rows = false;  // chunk c = the first C+1 tokens of document c, not a cut of the packed stream
};

// Sample indices from here on are never training samples (2^62 exceeds any step x global batch): the
// trainer's probe of intervened inputs draws validation chunk c's resampled tokens as sample
// kProbeSampleBase + c, the same draws at every evaluation and for any rank count.
inline constexpr uint64_t kProbeSampleBase = uint64_t(1) << 62;

// The interventions of `cfg` (its seed and intervention fields) applied to the first `len` tokens of
// sample `sample`, in place; positions beyond len are left out (a probe row shorter than C+1).
void apply_interventions(const DataConfig& cfg, uint64_t sample, int32_t* row, int64_t len);

// What the training loop reads: one micro-batch of a step at a time, a pure function of (step,
// micro-batch, rank) by the layout above. Pre-training shards (ChunkSampler) and fine-tuning rows
// (SftSampler) are its two kinds; the trainer sees only this.
class TrainingData {
 public:
  virtual ~TrainingData() = default;
  virtual const char* flag() const = 0;       // the flag that names the data: "--train-data", "--sft-data"
  virtual uint64_t n_rows() const = 0;        // rows of one epoch
  virtual uint64_t n_tokens() const = 0;      // tokens the run trains on
  virtual uint32_t data_vocab_size() const = 0;  // the data's vocabulary, 0 when the data does not say
  virtual uint64_t row_of(uint64_t sample) const = 0;  // the row (chunk, SFT row) training sample `sample` reads
  // The targets that micro-batch counts in the loss (known before reading its tokens).
  virtual int64_t count_targets(const BatchLayout& layout, uint64_t step, int64_t micro, int64_t rank) const = 0;
  // Fills inputs and targets (i32 [rows, C], contiguous CPU tensors; target -1 = not counted) for that
  // micro-batch; returns the counted targets.
  virtual int64_t fill_batch(const BatchLayout& layout, uint64_t step, int64_t micro, int64_t rank, Tensor inputs,
                             Tensor targets) const = 0;
  // One line that identifies the data a run saw: stored in checkpoints so a resume with other data is refused.
  virtual std::string fingerprint() const = 0;
  // The data's settings a resumed job must share, as (flag, value) (Trainer::check_same_run).
  virtual std::vector<std::pair<std::string, std::string>> run_settings() const = 0;
};

class ChunkSampler : public TrainingData {
 public:
  // Opens every shard (throws naming the file when one is missing/corrupt or holds an id outside its
  // vocabulary (naming the position and the id: before any step runs), when the shards disagree
  // on vocab_size/eos/bos, or when the stream holds fewer than C+1 tokens).
  explicit ChunkSampler(const DataConfig& cfg);
  ~ChunkSampler();
  ChunkSampler(const ChunkSampler&) = delete;
  ChunkSampler& operator=(const ChunkSampler&) = delete;

  const DataConfig& config() const { return cfg_; }
  int64_t context() const { return cfg_.context; }
  uint64_t total_tokens() const { return total_tokens_; }        // in all shards
  uint64_t n_tokens() const override { return n_tokens_; }        // used: min(total, max_tokens)
  uint64_t n_chunks() const { return n_chunks_; }
  uint32_t vocab_size() const { return vocab_size_; }
  uint32_t eos_id() const { return eos_id_; }
  uint32_t bos_id() const { return bos_id_; }  // io::kNoBos when the corpus has none
  const std::vector<std::unique_ptr<io::Shard>>& shards() const { return shards_; }

  // Global sample s -> (epoch, chunk id).
  uint64_t epoch_of(uint64_t sample) const { return sample / n_chunks_; }
  uint64_t chunk_of(uint64_t sample) const;
  // The global sample index of row j of micro-batch `micro` of step `step` on `rank` (layout above).
  static uint64_t sample_index(const BatchLayout& layout, uint64_t step, int64_t micro, int64_t rank, int64_t j);
  // The chunk ids of that micro-batch's rows (size layout.rows).
  std::vector<uint64_t> batch_chunks(const BatchLayout& layout, uint64_t step, int64_t micro, int64_t rank) const;

  // The C+1 tokens of chunk `chunk` into out (which has room for C+1 values), as in the corpus.
  void read_chunk(uint64_t chunk, int32_t* out) const;
  // The C+1 tokens of training sample `sample`: its chunk with the interventions applied.
  void read_sample(uint64_t sample, int32_t* out) const;
  // Applies the interventions of sample `sample` to its C+1 tokens in place.
  void intervene(uint64_t sample, int32_t* row) const;
  // TrainingData: every target counts; rows are training samples with their interventions.
  const char* flag() const override { return "--train-data"; }
  uint64_t n_rows() const override { return n_chunks_; }
  uint32_t data_vocab_size() const override { return vocab_size_; }
  uint64_t row_of(uint64_t sample) const override { return chunk_of(sample); }
  int64_t count_targets(const BatchLayout& layout, uint64_t, int64_t, int64_t) const override {
    return layout.rows * cfg_.context;
  }
  int64_t fill_batch(const BatchLayout& layout, uint64_t step, int64_t micro, int64_t rank, Tensor inputs,
                     Tensor targets) const override;
  // The shards, sizes, C, seed, budget and interventions.
  std::string fingerprint() const override;
  // The shards' content, the budget and the interventions.
  std::vector<std::pair<std::string, std::string>> run_settings() const override;
  // The interventions as " resample=2,3 resample_vocab=V fixed=P:ID" ("" when none).
  std::string intervention_text() const { return intervention_text_of(cfg_); }
  static std::string intervention_text_of(const DataConfig& cfg);
  // The shards' content in words, for messages: "2 shards, 1048576 tokens, crc32 0a1b2c3d 4e5f6a7b".
  std::string content_text() const;

 private:
  void index_documents();
  DataConfig cfg_;
  std::vector<std::unique_ptr<io::Shard>> shards_;
  std::vector<uint64_t> starts_;  // first stream index of each shard (prefix sums)
  std::vector<uint64_t> document_starts_;  // document_rows: the stream index where chunk c begins
  uint64_t total_tokens_ = 0, n_tokens_ = 0, n_chunks_ = 0;
  uint32_t vocab_size_ = 0, eos_id_ = 0, bos_id_ = io::kNoBos;
};

// The fine-tuning data of sinklab-sft: data_prep sft's HDF5 file, `tokens` int32 [N, C] and
// `loss_mask` uint8 [N, C] (1 = an assistant token, which the model is to predict), conversations
// packed back to back into rows of C tokens (attribute `context`).
//
// Row r gives the inputs tokens[r, 0..C) and the targets tokens[r, 1..C) followed by -1 (the row's
// last token has no successor in the row: rows are drawn shuffled), a target counted only where
// loss_mask[r, i+1] = 1, else -1 (Transformer: target -1 = not counted). So a row of C tokens trains
// C-1 predictions at most, with the model's full context C.
//
// Attention runs plainly causal over the packed row (a conversation sees the end of the previous one
// in its row), with positions 0..C-1 per row, not restarted per conversation: the file stores no
// conversation boundaries (a conversation can hold several assistant turns, each ending in EOS, so EOS
// does not mark one), and the attention op's mask is one per call, not per row (a block-diagonal mask
// would be a new mask kind in every CPU and CUDA attention kernel). README, sinklab-sft.
//
// Sampling as ChunkSampler's: sample s reads row perm_e(s % N) of epoch e = s / N, with the same
// sample_index layout over steps, micro-batches and ranks, so any rank count reads the same rows.
class SftSampler : public TrainingData {
 public:
  // Opens the file (throws naming it when it is not data_prep sft output or its context differs from
  // the model's). Token ids are checked against vocab_size as rows are read.
  SftSampler(const std::string& path, int64_t context, uint64_t seed, uint32_t vocab_size);

  const char* flag() const override { return "--sft-data"; }
  uint64_t n_rows() const override { return n_rows_; }
  uint64_t n_tokens() const override { return n_rows_ * uint64_t(context_); }
  uint32_t data_vocab_size() const override { return 0; }  // ids are checked against the model's as rows are read
  uint64_t n_loss_tokens() const { return n_loss_tokens_; }
  uint64_t row_of(uint64_t sample) const override;

  // The counted targets of that micro-batch (reads the mask only).
  int64_t count_targets(const BatchLayout& layout, uint64_t step, int64_t micro, int64_t rank) const override;
  // Fills inputs and targets as above (the assistant-only mask); returns the counted targets.
  int64_t fill_batch(const BatchLayout& layout, uint64_t step, int64_t micro, int64_t rank, Tensor inputs,
                     Tensor targets) const override;

  // Identifies the data (file size, CRC-32, rows, C, seed): stored in checkpoints like ChunkSampler's.
  std::string fingerprint() const override { return fingerprint_; }
  std::vector<std::pair<std::string, std::string>> run_settings() const override { return {{"sft-data", content_text_}}; }
  std::string content_text() const { return content_text_; }

 private:
  std::string path_;
  io::ResultsFile file_;
  int64_t context_ = 0;
  uint64_t seed_ = 0, n_rows_ = 0, n_loss_tokens_ = 0;
  uint32_t vocab_size_ = 0;
  std::string fingerprint_, content_text_;
};

// A Philox-keyed pseudo-random permutation of [0, n): position i -> element. Exposed for tests.
uint64_t permute_index(uint64_t i, uint64_t n, uint64_t seed, uint64_t epoch);

// The resampled token at 1-based position `position` of training sample `sample`: uniform over
// [0, vocab). Exposed for tests.
int32_t resampled_token(uint64_t seed, uint64_t sample, int64_t position, uint32_t vocab);

}  // namespace sinklab::train
