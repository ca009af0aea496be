#include "train/data.hpp"

#include <algorithm>
#include <filesystem>

#include "core/error.hpp"
#include "core/philox.hpp"
#include "train/checkpoint.hpp"

namespace sinklab::train {

BatchLayout make_batch_layout(int64_t global_batch_tokens, int64_t context, int64_t micro_rows, int64_t world) {
  SL_CHECK(context > 0, "--context must be positive (got %lld)", (long long)context);
  SL_CHECK(micro_rows > 0, "--micro-batch must be positive (got %lld)", (long long)micro_rows);
  SL_CHECK(world > 0, "world size must be positive (got %lld)", (long long)world);
  const int64_t per_micro = context * micro_rows * world;
  SL_CHECK(global_batch_tokens > 0 && global_batch_tokens % per_micro == 0,
           "--global-batch-tokens %lld is not a positive multiple of context x micro-batch rows x ranks "
           "= %lld x %lld x %lld = %lld",
           (long long)global_batch_tokens, (long long)context, (long long)micro_rows, (long long)world,
           (long long)per_micro);
  return BatchLayout{micro_rows, global_batch_tokens / per_micro, world};
}

// ---------------------------------------------------------------------------------------------------
// Permutation: balanced Feistel network over 2h bits (2^(2h) >= n), Philox round function, cycle walk.

uint64_t permute_index(uint64_t i, uint64_t n, uint64_t seed, uint64_t epoch) {
  SL_CHECK(i < n, "permute_index: position %llu outside [0, %llu)", (unsigned long long)i, (unsigned long long)n);
  if (n <= 1) return 0;
  int bits = 64 - __builtin_clzll(n - 1);  // bits needed for n-1
  int h = (bits + 1) / 2;
  if (h < 1) h = 1;
  const uint64_t mask = h >= 32 ? 0xFFFFFFFFull : ((uint64_t(1) << h) - 1);
  const uint32_t k0 = uint32_t(seed), k1 = uint32_t(seed >> 32);
  auto feistel = [&](uint64_t x) {
    uint64_t left = (x >> h) & mask, right = x & mask;
    for (uint32_t round = 0; round < 8; ++round) {
      Philox4x32 ctr = {{uint32_t(right), round, uint32_t(epoch), uint32_t(epoch >> 32)}};
      uint64_t f = philox4x32_10(ctr, k0, k1).v[0] & mask;
      uint64_t next_right = left ^ f;
      left = right;
      right = next_right;
    }
    return (left << h) | right;
  };
  uint64_t x = feistel(i);
  while (x >= n) x = feistel(x);  // cycle walking: stays a bijection on [0, n)
  return x;
}

// ---------------------------------------------------------------------------------------------------
// Resampled tokens: Philox keyed by (seed ^ kResampleKey); stream = sample index; word index =
// position << 32 | attempt. The key differs from the permutation's and the initialisation's (which
// use the seed itself), so the draws are independent of both.

namespace {
constexpr uint64_t kResampleKey = 0x5265'7361'6d70'6c65ull;  // "Resample"
}

int32_t resampled_token(uint64_t seed, uint64_t sample, int64_t position, uint32_t vocab) {
  SL_CHECK(vocab > 0, "resampled_token: empty vocabulary");
  // Rejection of the top 2^32 mod vocab words makes `word % vocab` exactly uniform; a word is rejected
  // with probability < vocab / 2^32, so the loop ends after one draw almost always.
  const uint64_t range = uint64_t(1) << 32;
  const uint64_t limit = range - range % vocab;
  for (uint64_t attempt = 0;; ++attempt) {
    const uint64_t word = philox_u32(seed ^ kResampleKey, sample, (uint64_t(position) << 32) | attempt);
    if (word < limit) return int32_t(word % vocab);
  }
}

// ---------------------------------------------------------------------------------------------------

ChunkSampler::ChunkSampler(const DataConfig& cfg) : cfg_(cfg) {
  SL_CHECK(!cfg.shards.empty(), "no training shards given (--train-shards)");
  SL_CHECK(cfg.context > 0, "--context must be positive (got %lld)", (long long)cfg.context);
  for (const std::string& path : cfg.shards) {
    auto shard = std::make_unique<io::Shard>(path, cfg.verify_checksum);
    const io::ShardHeader& h = shard->header();
    if (shards_.empty()) {
      vocab_size_ = h.vocab_size;
      eos_id_ = h.eos_id;
      bos_id_ = h.bos_id;
    } else {
      SL_CHECK(h.vocab_size == vocab_size_ && h.eos_id == eos_id_ && h.bos_id == bos_id_,
               "%s: vocab/eos/bos (%u/%u/%u) differ from %s (%u/%u/%u): shards of one run must come from "
               "one tokenizer",
               path.c_str(), h.vocab_size, h.eos_id, h.bos_id, cfg.shards[0].c_str(), vocab_size_, eos_id_,
               bos_id_);
    }
    starts_.push_back(total_tokens_);
    total_tokens_ += shard->size();
    shards_.push_back(std::move(shard));
  }
  n_tokens_ = cfg.max_tokens > 0 ? std::min<uint64_t>(cfg.max_tokens, total_tokens_) : total_tokens_;
  const uint64_t C = uint64_t(cfg.context);
  n_chunks_ = n_tokens_ > 0 ? (n_tokens_ - 1) / C : 0;
  if (cfg.document_rows) index_documents();
  SL_CHECK(n_chunks_ >= 1,
           "%s%s: %llu tokens%s, fewer than one chunk of context+1 = %llu tokens", cfg.shards[0].c_str(),
           cfg.shards.size() > 1 ? " (and the other shards)" : "", (unsigned long long)n_tokens_,
           cfg.max_tokens > 0 ? " within --max-tokens" : "", (unsigned long long)(C + 1));
  for (int64_t p : cfg.resample_positions) {
    SL_CHECK(p >= 1 && p <= cfg.context, "--resample-positions: %lld is not a position in [1, --context = %lld]",
             (long long)p, (long long)cfg.context);
    SL_CHECK(p != cfg.fixed_token_position, "--fixed-token-position %lld is also in --resample-positions",
             (long long)p);
  }
  SL_CHECK(cfg.resample_positions.empty() || cfg.resample_vocab > 0,
           "--resample-positions needs the vocabulary size to draw from");
  SL_CHECK(cfg.fixed_token_position >= 0 && cfg.fixed_token_position <= cfg.context,
           "--fixed-token-position %lld is not in [0, --context = %lld]", (long long)cfg.fixed_token_position,
           (long long)cfg.context);
  SL_CHECK(cfg.fixed_token_id >= 0, "--fixed-token-id must be >= 0 (got %d)", cfg.fixed_token_id);
}

ChunkSampler::~ChunkSampler() = default;

// Document rows: the start of every whole document (ended by EOS) within the first n_tokens_ tokens.
void ChunkSampler::index_documents() {
  const uint64_t C = uint64_t(cfg_.context);
  uint64_t begin = 0;
  for (size_t s = 0; s < shards_.size(); ++s) {
    const io::Shard& shard = *shards_[s];
    for (uint64_t i = 0; i < shard.size() && starts_[s] + i < n_tokens_; ++i) {
      if (shard.token(i) != eos_id_) continue;
      const uint64_t end = starts_[s] + i + 1;  // one past the EOS
      SL_CHECK(end - begin >= C + 1, "--document-rows: %s holds a document of %llu tokens (stream tokens %llu..%llu), "
               "fewer than context+1 = %llu", shard.path().c_str(), (unsigned long long)(end - begin),
               (unsigned long long)begin, (unsigned long long)(end - 1), (unsigned long long)(C + 1));
      document_starts_.push_back(begin);
      begin = end;
    }
  }
  n_chunks_ = document_starts_.size();
  SL_CHECK(n_chunks_ >= 1, "--document-rows: %s holds no whole document (none ends with EOS = %u)",
           cfg_.shards[0].c_str(), eos_id_);
}

uint64_t ChunkSampler::chunk_of(uint64_t sample) const {
  const uint64_t pos = sample % n_chunks_;
  if (!cfg_.shuffle) return pos;
  return permute_index(pos, n_chunks_, cfg_.seed, sample / n_chunks_);
}

uint64_t ChunkSampler::sample_index(const BatchLayout& layout, uint64_t step, int64_t micro, int64_t rank,
                                    int64_t j) {
  return step * uint64_t(layout.global_rows()) + uint64_t(rank * layout.rows_per_rank()) +
         uint64_t(micro * layout.rows) + uint64_t(j);
}

std::vector<uint64_t> ChunkSampler::batch_chunks(const BatchLayout& layout, uint64_t step, int64_t micro,
                                                 int64_t rank) const {
  SL_CHECK(layout.rows > 0 && layout.accum > 0 && layout.world > 0, "batch layout %lld x %lld x %lld is empty",
           (long long)layout.rows, (long long)layout.accum, (long long)layout.world);
  SL_CHECK(micro >= 0 && micro < layout.accum, "micro-batch %lld outside [0, %lld)", (long long)micro,
           (long long)layout.accum);
  SL_CHECK(rank >= 0 && rank < layout.world, "rank %lld outside [0, %lld)", (long long)rank,
           (long long)layout.world);
  std::vector<uint64_t> out(size_t(layout.rows));
  for (int64_t j = 0; j < layout.rows; ++j) out[size_t(j)] = chunk_of(sample_index(layout, step, micro, rank, j));
  return out;
}

void ChunkSampler::read_chunk(uint64_t chunk, int32_t* out) const {
  SL_CHECK(chunk < n_chunks_, "chunk %llu outside [0, %llu)", (unsigned long long)chunk,
           (unsigned long long)n_chunks_);
  const uint64_t C = uint64_t(cfg_.context);
  uint64_t begin = cfg_.document_rows ? document_starts_[chunk] : chunk * C, remaining = C + 1;
  // The shard holding `begin`: the last one whose start is <= begin.
  size_t s = size_t(std::upper_bound(starts_.begin(), starts_.end(), begin) - starts_.begin()) - 1;
  while (remaining > 0) {
    const io::Shard& shard = *shards_[s];
    const uint64_t local = begin - starts_[s];
    const uint64_t n = std::min<uint64_t>(remaining, shard.size() - local);
    shard.read(local, n, out);
    out += n;
    begin += n;
    remaining -= n;
    ++s;
  }
}

void apply_interventions(const DataConfig& cfg, uint64_t sample, int32_t* row, int64_t len) {
  for (int64_t p : cfg.resample_positions)
    if (p <= len) row[p - 1] = resampled_token(cfg.seed, sample, p, cfg.resample_vocab);
  if (cfg.fixed_token_position > 0 && cfg.fixed_token_position <= len) row[cfg.fixed_token_position - 1] = cfg.fixed_token_id;
}

void ChunkSampler::intervene(uint64_t sample, int32_t* row) const { apply_interventions(cfg_, sample, row, cfg_.context + 1); }

void ChunkSampler::read_sample(uint64_t sample, int32_t* out) const {
  read_chunk(chunk_of(sample), out);
  intervene(sample, out);
}

int64_t ChunkSampler::fill_batch(const BatchLayout& layout, uint64_t step, int64_t micro, int64_t rank, Tensor inputs,
                                 Tensor targets) const {
  const int64_t C = cfg_.context;
  check_shape(inputs, {layout.rows, C}, "ChunkSampler::fill_batch", "inputs");
  check_shape(targets, {layout.rows, C}, "ChunkSampler::fill_batch", "targets");
  check_dtype(inputs, DType::i32, "ChunkSampler::fill_batch", "inputs");
  check_dtype(targets, DType::i32, "ChunkSampler::fill_batch", "targets");
  SL_CHECK(inputs.device.is_cpu() && targets.device.is_cpu() && inputs.is_contiguous() && targets.is_contiguous(),
           "ChunkSampler::fill_batch: inputs and targets must be contiguous CPU tensors");
  std::vector<uint64_t> chunks = batch_chunks(layout, step, micro, rank);
  std::vector<int32_t> row(size_t(C + 1));
  int32_t* in = inputs.ptr<int32_t>();
  int32_t* tg = targets.ptr<int32_t>();
  for (int64_t j = 0; j < layout.rows; ++j) {
    read_chunk(chunks[size_t(j)], row.data());
    intervene(sample_index(layout, step, micro, rank, j), row.data());
    std::copy(row.begin(), row.begin() + C, in + j * C);
    std::copy(row.begin() + 1, row.end(), tg + j * C);
  }
  return layout.rows * C;
}

std::vector<std::pair<std::string, std::string>> ChunkSampler::run_settings() const {
  std::string resample;
  for (int64_t p : cfg_.resample_positions) resample += strfmt("%s%lld", resample.empty() ? "" : ",", (long long)p);
  return {
      {"train-data", content_text()},
      {"max-train-tokens", std::to_string(cfg_.max_tokens)},
      {"resample-positions", resample},
      {"fixed-token-position", std::to_string(cfg_.fixed_token_position)},
      {"fixed-token-id", std::to_string(cfg_.fixed_token_position > 0 ? cfg_.fixed_token_id : 0)},
  };
}

std::string ChunkSampler::content_text() const {
  uint64_t tokens = 0;
  std::string crcs;
  for (const auto& shard : shards_) {
    tokens += shard->size();
    crcs += strfmt(" %08x", shard->header().crc32);
  }
  return strfmt("%zu shard%s, %llu tokens, crc32%s", shards_.size(), shards_.size() == 1 ? "" : "s",
                (unsigned long long)tokens, crcs.c_str());
}

std::string ChunkSampler::fingerprint() const {
  std::string s = strfmt("context=%lld seed=%llu max_tokens=%llu shuffle=%d n_tokens=%llu n_chunks=%llu shards=",
                         (long long)cfg_.context, (unsigned long long)cfg_.seed,
                         (unsigned long long)cfg_.max_tokens, cfg_.shuffle ? 1 : 0, (unsigned long long)n_tokens_,
                         (unsigned long long)n_chunks_);
  for (size_t i = 0; i < shards_.size(); ++i) {
    if (i) s += ",";
    s += strfmt("%llu:%08x", (unsigned long long)shards_[i]->size(), shards_[i]->header().crc32);
  }
  // Interventions and document rows change what the model sees: part of the identity (absent when
  // unused, so fingerprints of plain runs are unchanged).
  return s + intervention_text() + (cfg_.document_rows ? " document_rows" : "");
}

std::string ChunkSampler::intervention_text_of(const DataConfig& cfg) {
  std::string s;
  if (!cfg.resample_positions.empty()) {
    s += " resample=";
    for (size_t i = 0; i < cfg.resample_positions.size(); ++i)
      s += strfmt("%s%lld", i ? "," : "", (long long)cfg.resample_positions[i]);
    s += strfmt(" resample_vocab=%u", cfg.resample_vocab);
  }
  if (cfg.fixed_token_position > 0)
    s += strfmt(" fixed=%lld:%d", (long long)cfg.fixed_token_position, cfg.fixed_token_id);
  return s;
}

// ---------------------------------------------------------------------------------------------------
// SFT data.

namespace {

// --sft-data opened read-only; a missing file, or one that is not HDF5, refused naming the flag.
io::ResultsFile open_sft_data(const std::string& path) {
  std::error_code ec;
  SL_CHECK(std::filesystem::exists(path, ec), "--sft-data: %s: no such SFT data file", path.c_str());
  SL_CHECK(std::filesystem::is_regular_file(path, ec), "--sft-data: %s is not a file (expected the SFT data file "
           "data_prep sft writes)", path.c_str());
  try {
    return io::ResultsFile::open_read(path);
  } catch (const Error&) {
    SL_FAIL("--sft-data: %s is not an SFT data file (not HDF5; expected the file data_prep sft writes)", path.c_str());
  }
}

}  // namespace

SftSampler::SftSampler(const std::string& path, int64_t context, uint64_t seed, uint32_t vocab_size)
    : path_(path), file_(open_sft_data(path)), context_(context), seed_(seed), vocab_size_(vocab_size) {
  SL_CHECK(file_.exists("/tokens") && file_.exists("/loss_mask"),
           "--sft-data %s: no tokens/loss_mask datasets (not written by `data_prep sft`?)", path.c_str());
  const std::vector<int64_t> dims = file_.dims("/tokens");
  SL_CHECK(dims.size() == 2 && dims[0] >= 1 && file_.dims("/loss_mask") == dims,
           "--sft-data %s: tokens and loss_mask must both be [rows, context] with rows >= 1", path.c_str());
  SL_CHECK(dims[1] == context, "--sft-data %s holds rows of %lld tokens but the model's context is %lld (run "
           "`data_prep sft --context %lld`)", path.c_str(), (long long)dims[1], (long long)context, (long long)context);
  n_rows_ = uint64_t(dims[0]);
  n_loss_tokens_ = file_.has_attr("/", "n_loss_tokens") ? uint64_t(file_.attr_int("/", "n_loss_tokens")) : 0;
  const uint32_t crc = file_crc32(path);
  fingerprint_ = strfmt("sft context=%lld seed=%llu rows=%llu crc32=%08x", (long long)context,
                        (unsigned long long)seed, (unsigned long long)n_rows_, crc);
  content_text_ = strfmt("%llu rows of %lld tokens, %llu loss tokens, crc32 %08x", (unsigned long long)n_rows_,
                         (long long)context, (unsigned long long)n_loss_tokens_, crc);
}

uint64_t SftSampler::row_of(uint64_t sample) const {
  return permute_index(sample % n_rows_, n_rows_, seed_, sample / n_rows_);
}

int64_t SftSampler::count_targets(const BatchLayout& layout, uint64_t step, int64_t micro, int64_t rank) const {
  std::vector<int32_t> mask(static_cast<size_t>(context_));
  int64_t counted = 0;
  for (int64_t j = 0; j < layout.rows; ++j) {
    file_.read_rows("/loss_mask", int64_t(row_of(ChunkSampler::sample_index(layout, step, micro, rank, j))), 1,
                    mask.data());
    for (int64_t i = 1; i < context_; ++i) counted += mask[size_t(i)] != 0;
  }
  return counted;
}

int64_t SftSampler::fill_batch(const BatchLayout& layout, uint64_t step, int64_t micro, int64_t rank, Tensor inputs,
                               Tensor targets) const {
  const int64_t C = context_;
  check_shape(inputs, {layout.rows, C}, "SftSampler::fill_batch", "inputs");
  check_shape(targets, {layout.rows, C}, "SftSampler::fill_batch", "targets");
  SL_CHECK(inputs.device.is_cpu() && targets.device.is_cpu() && inputs.is_contiguous() && targets.is_contiguous() &&
               inputs.dtype == DType::i32 && targets.dtype == DType::i32,
           "SftSampler::fill_batch: inputs and targets must be contiguous i32 CPU tensors");
  std::vector<int32_t> mask(static_cast<size_t>(C));
  int64_t counted = 0;
  for (int64_t j = 0; j < layout.rows; ++j) {
    const int64_t row = int64_t(row_of(ChunkSampler::sample_index(layout, step, micro, rank, j)));
    int32_t* in = inputs.ptr<int32_t>() + j * C;
    int32_t* tg = targets.ptr<int32_t>() + j * C;
    file_.read_rows("/tokens", row, 1, in);
    file_.read_rows("/loss_mask", row, 1, mask.data());
    for (int64_t i = 0; i < C; ++i)
      SL_CHECK(in[i] >= 0 && uint32_t(in[i]) < vocab_size_, "--sft-data %s: row %lld holds token %d outside the "
               "model's vocabulary [0, %u)", path_.c_str(), (long long)row, in[i], vocab_size_);
    for (int64_t i = 0; i + 1 < C; ++i) {
      tg[i] = mask[size_t(i + 1)] ? in[i + 1] : -1;
      counted += mask[size_t(i + 1)] != 0;
    }
    tg[C - 1] = -1;
  }
  return counted;
}

}  // namespace sinklab::train
