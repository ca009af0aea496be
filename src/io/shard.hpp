// Token shards: the one binary format data_prep writes and the trainer reads.
//
// Layout (all integers little-endian), 64-byte header then the tokens:
//
//   offset size  field
//   0      8     magic        "SLTOKENS"
//   8      4     version      2 (1: the same without header_crc32, still read)
//   12     4     header_bytes 64
//   16     4     vocab_size   every token id is < vocab_size
//   20     4     token_bytes  2 (uint16) or 4 (uint32)
//   24     8     n_tokens
//   32     8     n_documents  documents packed into this shard (each ends with eos_id)
//   40     4     eos_id
//   44     4     bos_id       0xFFFFFFFF when documents carry no BOS
//   48     4     crc32        zlib CRC-32 of the token bytes (detects corruption)
//   52     8     reserved     zero
//   60     4     header_crc32 zlib CRC-32 of bytes 0..59 (version 2; version 1 has reserved zero here)
//   64     n_tokens * token_bytes   the token ids
//
// The file size must be exactly 64 + n_tokens * token_bytes: a truncated or padded file is refused.
// Version 2 puts the header under a checksum too: vocab_size (which every id is checked against) and
// the sizes are then as trustworthy as the tokens. crc32 keeps its version-1 meaning, so a shard
// rewritten as version 2 has the same crc32 (and a run's data fingerprint, train/data.hpp, is unchanged).
// data_prep/shards.py writes this format; tests/python/test_data_prep_shards.py round-trips it through
// `sinklab-shard dump`.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "io/files.hpp"

namespace sinklab::io {

inline constexpr char kShardMagic[8] = {'S', 'L', 'T', 'O', 'K', 'E', 'N', 'S'};
inline constexpr uint32_t kShardVersion = 2;        // what write_shard writes
inline constexpr uint32_t kShardOldestVersion = 1;  // the oldest Shard reads
inline constexpr uint32_t kShardHeaderBytes = 64;
inline constexpr uint32_t kShardHeaderCrcOffset = 60;
inline constexpr uint32_t kNoBos = 0xFFFFFFFFu;

struct ShardHeader {
  uint32_t version = kShardVersion;
  uint32_t vocab_size = 0;
  uint32_t token_bytes = 2;
  uint64_t n_tokens = 0;
  uint64_t n_documents = 0;
  uint32_t eos_id = 0;
  uint32_t bos_id = kNoBos;
  uint32_t crc32 = 0;
  uint32_t header_crc32 = 0;  // version 2; 0 in version 1
};

// A read-only memory-mapped shard. Opening validates magic, version, the header's CRC (version 2) and
// size, and, unless verify_tokens is false, the tokens' CRC and every token id against vocab_size (one
// pass over the mapped ids each); any mismatch throws sinklab::Error naming the file (and for an id, its
// position and value).
class Shard {
 public:
  explicit Shard(const std::string& path, bool verify_tokens = true);
  Shard(const Shard&) = delete;
  Shard& operator=(const Shard&) = delete;

  const ShardHeader& header() const { return header_; }
  const std::string& path() const { return path_; }
  uint64_t size() const { return header_.n_tokens; }
  uint32_t token(uint64_t i) const {
    return header_.token_bytes == 2 ? reinterpret_cast<const uint16_t*>(tokens_)[i]
                                    : reinterpret_cast<const uint32_t*>(tokens_)[i];
  }
  // Copies tokens [begin, begin+n) into out as int32 (the dtype of ids in the op API).
  void read(uint64_t begin, uint64_t n, int32_t* out) const;

 private:
  void read_header();
  void check_token_ids() const;
  std::string path_;
  MappedFile file_;
  ShardHeader header_;
  const unsigned char* tokens_ = nullptr;
};

// The largest of n token ids of `token_bytes` bytes each (0 when n is 0): the vectorised reduction
// behind the id check. Exposed for the benchmark in tests.
uint32_t max_token_id(const unsigned char* ids, uint64_t n, uint32_t token_bytes);

// Writes a shard (the current version) atomically (temporary file + rename). token_bytes is chosen
// from vocab_size.
void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, uint32_t vocab_size,
                 uint64_t n_documents, uint32_t eos_id, uint32_t bos_id = kNoBos);

}  // namespace sinklab::io
