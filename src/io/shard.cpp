#include "io/shard.hpp"

#include <zlib.h>

#include <cstring>

#include "core/error.hpp"

namespace sinklab::io {
namespace {

template <class T>
T read_le(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));  // x86-64 and every supported target are little-endian
  return v;
}

uint32_t crc32_of(const unsigned char* bytes, uint64_t n) {
  uLong crc = ::crc32(0L, Z_NULL, 0);
  // zlib takes uInt lengths: feed in 1 GiB pieces.
  while (n > 0) {
    uInt piece = uInt(n > (1u << 30) ? (1u << 30) : n);
    crc = ::crc32(crc, bytes, piece);
    bytes += piece;
    n -= piece;
  }
  return uint32_t(crc);
}

// A plain max over the ids: `omp simd` lets the compiler keep it in vector registers (vpmaxuw/vpmaxud),
// so the check costs about one read of the mapped tokens.
template <class T>
uint32_t max_of(const T* ids, uint64_t n) {
  T m = 0;
#pragma omp simd reduction(max : m)
  for (uint64_t i = 0; i < n; ++i) m = ids[i] > m ? ids[i] : m;
  return m;
}

// The first position holding an id >= vocab_size (only looked for once the max says there is one).
uint64_t first_id_outside(const Shard& shard, uint32_t vocab_size) {
  uint64_t i = 0;
  while (i < shard.size() && shard.token(i) < vocab_size) ++i;
  return i;
}

}  // namespace

uint32_t max_token_id(const unsigned char* ids, uint64_t n, uint32_t token_bytes) {
  return token_bytes == 2 ? max_of(reinterpret_cast<const uint16_t*>(ids), n)
                          : max_of(reinterpret_cast<const uint32_t*>(ids), n);
}

Shard::Shard(const std::string& path, bool verify_tokens) : path_(path), file_(path) {
  read_header();
  tokens_ = file_.data() + kShardHeaderBytes;
  if (!verify_tokens) return;
  uint32_t crc = crc32_of(tokens_, header_.n_tokens * header_.token_bytes);
  SL_CHECK(crc == header_.crc32, "%s: corrupted shard (CRC-32 %08x, header says %08x)", path.c_str(), crc,
           header_.crc32);
  check_token_ids();
}

void Shard::read_header() {
  const char* path = path_.c_str();
  const unsigned char* p = file_.data();
  SL_CHECK(file_.size() >= kShardHeaderBytes, "%s: not a token shard (%zu bytes, shorter than the header)", path,
           file_.size());
  SL_CHECK(std::memcmp(p, kShardMagic, 8) == 0, "%s: not a token shard (bad magic)", path);
  header_.version = read_le<uint32_t>(p + 8);
  SL_CHECK(header_.version >= kShardOldestVersion && header_.version <= kShardVersion,
           "%s: shard version %u, this build reads versions %u to %u", path, header_.version, kShardOldestVersion,
           kShardVersion);
  if (header_.version >= 2) {
    header_.header_crc32 = read_le<uint32_t>(p + kShardHeaderCrcOffset);
    const uint32_t crc = crc32_of(p, kShardHeaderCrcOffset);
    SL_CHECK(crc == header_.header_crc32, "%s: corrupted shard header (CRC-32 %08x of bytes 0..%u, header says %08x)",
             path, crc, kShardHeaderCrcOffset - 1, header_.header_crc32);
  }
  SL_CHECK(read_le<uint32_t>(p + 12) == kShardHeaderBytes, "%s: bad shard header size", path);
  header_.vocab_size = read_le<uint32_t>(p + 16);
  header_.token_bytes = read_le<uint32_t>(p + 20);
  header_.n_tokens = read_le<uint64_t>(p + 24);
  header_.n_documents = read_le<uint64_t>(p + 32);
  header_.eos_id = read_le<uint32_t>(p + 40);
  header_.bos_id = read_le<uint32_t>(p + 44);
  header_.crc32 = read_le<uint32_t>(p + 48);
  SL_CHECK(header_.token_bytes == 2 || header_.token_bytes == 4, "%s: token size %u bytes (expected 2 or 4)", path,
           header_.token_bytes);
  SL_CHECK(header_.token_bytes == 4 || header_.vocab_size <= 65536, "%s: vocab %u does not fit uint16 tokens", path,
           header_.vocab_size);
  // n_tokens is compared before it is multiplied: a huge count could otherwise wrap around to the file's size.
  const uint64_t token_room = (file_.size() - kShardHeaderBytes) / header_.token_bytes;
  SL_CHECK(header_.n_tokens == token_room && (file_.size() - kShardHeaderBytes) % header_.token_bytes == 0,
           "%s: truncated or padded shard: %zu bytes, header says %llu tokens of %u bytes", path, file_.size(),
           (unsigned long long)header_.n_tokens, header_.token_bytes);
  SL_CHECK(header_.eos_id < header_.vocab_size, "%s: eos id %u outside the vocabulary of %u", path, header_.eos_id,
           header_.vocab_size);
  SL_CHECK(header_.bos_id == kNoBos || header_.bos_id < header_.vocab_size, "%s: bos id %u outside the vocabulary of %u",
           path, header_.bos_id, header_.vocab_size);
}

// Every id below the header's vocab_size, checked when the shard is opened: a bad id otherwise surfaces
// only when its row is drawn, maybe hours into a run, in the embedding without a file name.
void Shard::check_token_ids() const {
  if (max_token_id(tokens_, header_.n_tokens, header_.token_bytes) < header_.vocab_size) return;
  const uint64_t i = first_id_outside(*this, header_.vocab_size);
  SL_FAIL("%s: token id %u at position %llu is outside the vocabulary [0, %u) of the shard's header (vocab_size): the "
          "shard was written wrongly or for another tokenizer",
          path_.c_str(), token(i), (unsigned long long)i, header_.vocab_size);
}

void Shard::read(uint64_t begin, uint64_t n, int32_t* out) const {
  SL_CHECK(begin + n <= header_.n_tokens, "%s: read [%llu, %llu) beyond %llu tokens", path_.c_str(),
           (unsigned long long)begin, (unsigned long long)(begin + n), (unsigned long long)header_.n_tokens);
  for (uint64_t i = 0; i < n; ++i) out[i] = int32_t(token(begin + i));
}

void write_shard(const std::string& path, const std::vector<uint32_t>& tokens, uint32_t vocab_size,
                 uint64_t n_documents, uint32_t eos_id, uint32_t bos_id) {
  uint32_t token_bytes = vocab_size <= 65536 ? 2 : 4;
  std::vector<unsigned char> body(tokens.size() * token_bytes);
  for (size_t i = 0; i < tokens.size(); ++i) {
    SL_CHECK(tokens[i] < vocab_size, "%s: token %u at %zu outside the vocabulary of %u", path.c_str(), tokens[i],
             i, vocab_size);
    if (token_bytes == 2) {
      uint16_t t = uint16_t(tokens[i]);
      std::memcpy(&body[i * 2], &t, 2);
    } else {
      std::memcpy(&body[i * 4], &tokens[i], 4);
    }
  }
  unsigned char header[kShardHeaderBytes] = {};
  auto put32 = [&](int off, uint32_t v) { std::memcpy(header + off, &v, 4); };
  auto put64 = [&](int off, uint64_t v) { std::memcpy(header + off, &v, 8); };
  std::memcpy(header, kShardMagic, 8);
  put32(8, kShardVersion);
  put32(12, kShardHeaderBytes);
  put32(16, vocab_size);
  put32(20, token_bytes);
  put64(24, tokens.size());
  put64(32, n_documents);
  put32(40, eos_id);
  put32(44, bos_id);
  put32(48, crc32_of(body.data(), body.size()));
  put32(kShardHeaderCrcOffset, crc32_of(header, kShardHeaderCrcOffset));
  AtomicFile file(path);
  file.write(header, sizeof(header));
  file.write(body.data(), body.size());
  file.commit();
}

}  // namespace sinklab::io
